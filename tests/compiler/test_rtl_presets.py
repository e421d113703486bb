"""The fast presets (hw/config.py ``FAST_PRESETS``) RTL-verified: each preset's core is
built (Verilator, the shared build cache) and compiled layers run on it bit for bit against
fsim, through the executor: a 3x3 conv with its per-channel requantize on the REQ engine, a
strided 1x1 conv, a residual add and the max-pool (the engine-zeroed GEMM-copy form where
BLOCK_IN == BLOCK_OUT, forwarded on pynq-fast; the ACC8 form on the others), and the dense
layer.  ``slow``: a pynq-sized build takes a minute or more the first
time; later runs reuse the cached build.  The whole networks on these cores are
bench/rtl_resnet18.py's (README.md "Which core")."""

from __future__ import annotations

import numpy as np
import pytest

from rtl_compare import rtl_equals_fsim
from vtaforge.compiler.compile import compile_model
from vtaforge.compiler.lower_eltwise import pool_copy_ok
from vtaforge.hw.config import FAST_PRESETS, preset

pytestmark = [pytest.mark.rtl, pytest.mark.slow]

pytest.importorskip("vtaforge.runtime.rtl")


def _layers_model(seed: int = 0):
    """input [1,32,24,24] -> Conv 3x3 pad 1 (32) -> Relu -> a; MaxPool 3x3/2 pad 1 -> p;
    Conv 1x1/1 (32) on p -> Add(p, .) -> Relu -> Conv 1x1/2 (64) -> Relu -> Flatten -> Gemm
    (10)."""
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(seed)

    def init(name, shape, scale):
        return numpy_helper.from_array((rng.standard_normal(shape) * scale).astype(np.float32),
                                       name)

    inits = [init("w1", (32, 32, 3, 3), 0.1), init("b1", (32,), 0.1),
             init("w2", (32, 32, 1, 1), 0.2), init("b2", (32,), 0.1),
             init("w3", (64, 32, 1, 1), 0.2), init("b3", (64,), 0.1),
             init("w4", (10, 64 * 36), 0.05), init("b4", (10,), 0.1)]
    nodes = [
        helper.make_node("Conv", ["input", "w1", "b1"], ["c1"], kernel_shape=[3, 3],
                         pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c1"], ["a"]),
        helper.make_node("MaxPool", ["a"], ["p"], kernel_shape=[3, 3], strides=[2, 2],
                         pads=[1, 1, 1, 1]),
        helper.make_node("Conv", ["p", "w2", "b2"], ["c2"], kernel_shape=[1, 1]),
        helper.make_node("Add", ["p", "c2"], ["s"]),
        helper.make_node("Relu", ["s"], ["r"]),
        helper.make_node("Conv", ["r", "w3", "b3"], ["c3"], kernel_shape=[1, 1],
                         strides=[2, 2]),
        helper.make_node("Relu", ["c3"], ["r3"]),
        helper.make_node("Flatten", ["r3"], ["f"], axis=1),
        helper.make_node("Gemm", ["f", "w4", "b4"], ["logits"], transB=1),
    ]
    g = helper.make_graph(
        nodes, "preset_layers",
        [helper.make_tensor_value_info("input", TensorProto.FLOAT, [1, 32, 24, 24])],
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT, [1, 10])], inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    return m


@pytest.mark.parametrize("name", list(FAST_PRESETS.values()))
def test_fast_preset_rtl_equals_fsim(name):
    cfg = preset(name)
    x = np.random.default_rng(1).standard_normal((1, 32, 24, 24)).astype(np.float32)
    cm = compile_model(_layers_model(), x, cfg)
    on_vta = {s.op for s in cm.steps if s.target == "vta"}
    assert {"qconv2d", "qmax_pool", "qadd", "qdense"} <= on_vta, \
        [(s.name, s.target, s.reason) for s in cm.steps]
    pool = [s for s in cm.steps if s.op == "qmax_pool"][0]
    assert bool(pool.trace.stats.get("gemm_copy")) == pool_copy_ok(cfg)
    rtl_equals_fsim(cm, x)
