"""The max-pool lowerings on the Verilator simulation of the core (``rtl``) against fsim,
bit for bit, through the executor: the GEMM-copy forms (compiler/lower_eltwise.py
``_max_pool_copy``: INP loads, an identity GEMM, the region zeroed on the pipeline or
beside the previous tile on the REQ engine, pairs or ``ALU_FORWARD`` chains) and the ACC8
form they replace.

- tiny family (fast builds): a 3x3/2 pad-1 pool of several tiles per channel block with a
  smaller last tile, and a 2x2/2 one, on tiny, tiny + engine, tiny + forwarding and tiny +
  both; with forwarding the pool takes fewer cycles than without.
- pynq (``slow``: pynq-sized builds): ResNet-18's max-pool (64x112x112, 3x3/2 pad 1) on
  ``pynq`` and on ``pynq-fast`` (REQ engine and ALU forwarding), where it runs at >= 0.85 of
  its memory bound (input read and output written once at the bus width).
"""

from __future__ import annotations

import numpy as np
import pytest

from rtl_compare import rtl_equals_fsim
from vtaforge.compiler.compile import compile_model
from vtaforge.compiler.options import LowerOptions
from vtaforge.hw.config import preset

pytestmark = pytest.mark.rtl

pytest.importorskip("vtaforge.runtime.rtl")

TINY = preset("tiny")
TINY_CFGS = {"tiny": TINY,
             "tiny+eng": TINY.replace(ALU_REQUANT=True, REQ_ENGINE=True),
             "tiny+fwd": TINY.replace(ALU_FORWARD=True),
             "tiny+eng+fwd": TINY.replace(ALU_REQUANT=True, REQ_ENGINE=True, ALU_FORWARD=True)}


def pool_model(c: int, h: int, w: int, k: int, s: int, p: int):
    """input [1, c, h, w] -> Relu -> MaxPool k x k / s, pads p (the ReLU makes the input
    provably non-negative, which a padded max-pool on VTA needs)."""
    from onnx import TensorProto, helper

    ho, wo = (h + 2 * p - k) // s + 1, (w + 2 * p - k) // s + 1
    g = helper.make_graph(
        [helper.make_node("Relu", ["input"], ["r"]),
         helper.make_node("MaxPool", ["r"], ["y"], kernel_shape=[k, k], strides=[s, s],
                          pads=[p] * 4)],
        "pool", [helper.make_tensor_value_info("input", TensorProto.FLOAT, [1, c, h, w])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, c, ho, wo])])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])


def pool_on_rtl(cfg, model, shape, seed: int = 0, mem: int = 16 << 20,
                options=None) -> tuple[int, dict]:
    """Compile ``model`` for ``cfg`` (lowering ``options``: a ``LowerOptions``, default the
    config's), run it on fsim and on the Verilated core: every kept tensor equal
    (:func:`rtl_compare.rtl_equals_fsim`).  Returns the max-pool step's RTL cycles and its
    trace statistics."""
    x = np.random.default_rng(seed).standard_normal(shape).astype(np.float32)
    cm = compile_model(model, x, cfg, options=options)
    step = [s for s in cm.steps if s.op == "qmax_pool"]
    assert step and step[0].target == "vta", [(s.op, s.target, s.reason) for s in cm.steps]
    _, runs = rtl_equals_fsim(cm, x, mem_bytes=mem, fsim_mem_bytes=mem)
    vta = [s for s in cm.steps if s.target == "vta"]
    assert len(runs) == len(vta)
    return runs[vta.index(step[0])].cycles, step[0].trace.stats


@pytest.mark.parametrize("name", list(TINY_CFGS))
@pytest.mark.parametrize("c,h,w,k,s,p", [(16, 30, 23, 3, 2, 1), (8, 12, 10, 2, 2, 0)])
def test_pool_tiny_rtl_equals_fsim(name, c, h, w, k, s, p):
    cyc, st = pool_on_rtl(TINY_CFGS[name], pool_model(c, h, w, k, s, p), (1, c, h, w))
    assert st.get("gemm_copy"), st
    assert st["tiles"] > 2 if k == 3 else True


def test_forwarding_makes_the_pool_faster():
    m = pool_model(16, 30, 23, 3, 2, 1)
    cyc = {n: pool_on_rtl(TINY_CFGS[n], m, (1, 16, 30, 23))[0]
           for n in ("tiny", "tiny+fwd", "tiny+eng", "tiny+eng+fwd")}
    assert cyc["tiny+fwd"] < cyc["tiny"], cyc
    assert cyc["tiny+eng+fwd"] < cyc["tiny+eng"] < cyc["tiny"], cyc


def test_acc8_form_rtl_equals_fsim():
    """The ACC8 form (``gemm_copy=False``), kept for the cores the copy does not fit."""
    cyc, st = pool_on_rtl(TINY, pool_model(16, 30, 23, 3, 2, 1), (1, 16, 30, 23),
                          options=LowerOptions(pool_gemm_copy=False))
    assert not st.get("gemm_copy")


PYNQ_CFGS = {"pynq": preset("pynq"), "pynq-fast": preset("pynq-fast")}


@pytest.mark.slow
@pytest.mark.parametrize("name", list(PYNQ_CFGS))
def test_resnet18_max_pool_pynq(name):
    """ResNet-18's max-pool at full size on pynq and on pynq-fast (REQ engine and ALU
    forwarding), bit for bit against fsim; on pynq-fast at >= 0.85 of its memory bound."""
    cfg = PYNQ_CFGS[name]
    cyc, st = pool_on_rtl(cfg, pool_model(64, 112, 112, 3, 2, 1), (1, 64, 112, 112),
                          mem=256 << 20)
    assert st.get("gemm_copy"), st
    bound = -(-st["min_dram_bytes"] // (cfg.BUS_WIDTH // 8))
    if cfg.ALU_FORWARD:
        assert bound / cyc >= 0.85, (cyc, bound)
