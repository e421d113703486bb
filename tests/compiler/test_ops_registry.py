"""The op registry is complete and consistent: no op can be placed on VTA without a
lowering, every quantized op has an integer reference and a runtime CPU kernel, and every
op a quantizer rule produces is registered with both."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from onnx import helper

from _onnx_util import make_model, rand
from vtaforge.compiler import import_onnx, partition, quantize
from vtaforge.compiler.compile import lower_node
from vtaforge.compiler.ir import OPS
from vtaforge.compiler.ops import REGISTRY
from vtaforge.compiler.quantize import _Quantizer
from vtaforge.hw.config import preset
from vtaforge.runtime.cpu_float import REAL_OPS
from vtaforge.runtime.cpu_ops import CPU_KERNELS


def test_every_ir_op_has_one_entry():
    assert set(REGISTRY) == set(OPS)


@pytest.mark.parametrize("name", sorted(REGISTRY))
def test_entry_is_consistent(name):
    d = REGISTRY[name]
    kinds = d.spec.kinds
    if d.vta is not None:                  # placeable on VTA => lowerable, with an oracle
        assert d.lower is not None, f"{name}: a VTA predicate without a lowering"
        assert d.reference is not None, f"{name}: a VTA op without an integer reference"
    if "quantized" in kinds and name not in REAL_OPS and name != "onnx":
        assert d.reference is not None or name == "softmax", f"{name}: no integer reference"
        assert name in CPU_KERNELS, f"{name}: no runtime CPU kernel"
    if d.cpu == "real":
        assert name in REAL_OPS, f"{name}: declared real-valued but runtime/cpu_float has no kernel"
    if d.cpu == "int":
        assert name in CPU_KERNELS, f"{name}: declared an integer CPU op but runtime/cpu_ops lacks it"
    if d.quantize is not None:
        assert hasattr(_Quantizer, d.quantize), f"{name}: quantizer rule {d.quantize} missing"
        for p in d.produces:   # a float kernel (the op) never lacks the integer one it becomes
            assert p in REGISTRY, f"{name} produces unregistered {p}"
            assert REGISTRY[p].reference is not None or p == "softmax", f"{name} -> {p}: no reference"
            assert p in CPU_KERNELS, f"{name} -> {p}: no CPU kernel"
    if "float" in kinds and name not in ("onnx",):
        assert d.quantize is not None, f"{name}: a float op without a quantizer rule"
    if d.vta is None and d.cpu not in ("real", "onnx"):
        assert d.cpu_reason, f"{name}: runs on the CPU without a stated reason"


def _models():
    """Small models that reach every VTA-capable quantized op."""
    conv = [helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1]),
            helper.make_node("Relu", ["c"], ["r"]),
            helper.make_node("MaxPool", ["r"], ["p"], kernel_shape=[2, 2], strides=[2, 2]),
            helper.make_node("AveragePool", ["p"], ["a"], kernel_shape=[2, 2], strides=[2, 2]),
            helper.make_node("Conv", ["a", "w2"], ["a2"]),
            helper.make_node("Add", ["a", "a2"], ["s"]),
            helper.make_node("Clip", ["s", "lo", "hi"], ["k"]),
            helper.make_node("Flatten", ["k"], ["f"]),
            helper.make_node("Gemm", ["f", "fw"], ["y"], transB=1)]
    return make_model(conv, [("x", ["N", 3, 8, 8])], [("y", ["N", 5])],
                      {"w": rand(8, 3, 3, 3, seed=1, scale=0.3), "w2": rand(8, 8, 1, 1, seed=2, scale=0.3),
                       "fw": rand(5, 32, seed=3, scale=0.3), "lo": np.array(-1.0, np.float32),
                       "hi": np.array(2.0, np.float32)})


@pytest.mark.parametrize("cfg", ["pynq", "tiny", "batch2", "alu_mul"])
def test_every_vta_placement_lowers(cfg):
    """Whatever the partitioner places on VTA, for any of these configs, has a lowering
    that accepts it (the issue's 'placed on VTA without a lowering' class of bug)."""
    c = preset("pynq").replace(ALU_MUL=True) if cfg == "alu_mul" else preset(cfg)
    q = quantize(import_onnx(_models()), rand(4, 3, 8, 8, seed=4))
    p = partition(q, c)
    placed = [n for n in q.nodes if p.target(n.name) == "vta"]
    assert {n.op for n in placed} >= {"qconv2d", "qdense", "qmax_pool", "qavg_pool", "qadd"}
    for i, n in zip(itertools.count(), placed):
        lower_node(c, q, n, f"t/{i}")
