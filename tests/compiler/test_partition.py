"""Partitioning: nothing that should run on VTA falls back silently (BR-11), reasons for CPU."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import helper

from vtaforge.compiler import import_onnx, partition, quantize
from vtaforge.compiler.models import DIGITS_ONNX, load_digits_split
from vtaforge.compiler.partition import capability_table
from vtaforge.compiler.zoo import mobilenet_v1, resnet18
from vtaforge.hw.config import preset

from _onnx_util import make_model, rand

COMPUTE = {"qconv2d", "qdense", "qmax_pool", "qavg_pool", "qadd"}


@pytest.fixture(scope="module")
def digits_q():
    xtr, *_ = load_digits_split()
    return quantize(import_onnx(DIGITS_ONNX), xtr[:200])


def test_digits_all_compute_on_vta_at_pynq(digits_q):
    p = partition(digits_q, "pynq")
    for n in digits_q.nodes:
        if n.op in COMPUTE:
            assert p.target(n.name) == "vta", p.report()
    assert [r.target for r in p.regions] == ["cpu", "vta", "cpu", "vta", "cpu"]
    assert p.regions[1].nodes == ["conv1", "pool1", "conv2", "pool2"]
    assert p.regions[1].inputs == ["input_q"] and p.regions[1].outputs == ["pool2"]
    rep = p.report()
    for n in p.cpu_nodes():
        assert p.placements[n].reason and n in rep


@pytest.mark.parametrize("builder", [resnet18, mobilenet_v1])
def test_zoo_models_all_compute_on_vta_at_pynq(builder):
    """At 64x64 the final global pool is 2x2 (a power of two), so every compute op is on VTA."""
    m = builder(64, num_classes=10, **({"alpha": 0.25} if builder is mobilenet_v1 else {}))
    q = quantize(import_onnx(m), rand(2, 3, 64, 64, seed=3))
    p = partition(q, preset("pynq"))
    ops = {n.op for n in q.nodes}
    assert "qconv2d" in ops and "qdense" in ops and "qavg_pool" in ops
    assert ("qadd" in ops) == (builder is resnet18)
    for n in q.nodes:
        if n.op in COMPUTE:
            assert p.target(n.name) == "vta", (n.name, p.placements[n.name].reason)
    if builder is mobilenet_v1:
        dw = [n for n in q.nodes if n.op == "qconv2d" and n.attrs["groups"] > 1]
        assert len(dw) == 13 and all("depthwise" in p.placements[n.name].reason for n in dw)


def test_non_power_of_two_avg_pool_goes_to_cpu_with_reason():
    m = make_model([helper.make_node("GlobalAveragePool", ["x"], ["y"], name="gap")],
                   [("x", ["N", 4, 7, 7])], [("y", ["N", 4, 1, 1])])
    q = quantize(import_onnx(m), rand(2, 4, 7, 7))
    p = partition(q)
    assert p.target("gap") == "cpu"
    assert "49 is not a power of two" in p.placements["gap"].reason


def test_acc8_off_moves_pooling_to_cpu(digits_q):
    p = partition(digits_q, preset("pynq").replace(ACC_8BIT=False))
    assert p.target("conv1") == "vta"
    assert p.target("pool1") == "cpu" and "ACC_8BIT" in p.placements["pool1"].reason
    assert "unavailable: ACC_8BIT off" in capability_table(preset("pynq").replace(ACC_8BIT=False))["qmax_pool"]


def test_mul_by_constant_needs_alu_mul():
    m = make_model([helper.make_node("Mul", ["x", "c"], ["y"], name="scale")],
                   [("x", ["N", 4, 5, 5])], [("y", ["N", 4, 5, 5])], {"c": rand(4, 1, 1, seed=1)})
    q = quantize(import_onnx(m), rand(2, 4, 5, 5))
    assert partition(q, "pynq").target("scale") == "cpu"
    assert "ALU_MUL" in partition(q, "pynq").placements["scale"].reason
    assert partition(q, preset("pynq").replace(ALU_MUL=True)).target("scale") == "vta"


@pytest.mark.parametrize("c", [np.array(0.37, np.float32), rand(1, 4, 1, 1, seed=2)], ids=["scalar", "per-channel"])
def test_mul_by_constant_on_vta_is_bit_exact(c):
    """Mul by a scalar (ALU MUL immediate) or a per-channel constant (resident ACC constant)
    with ALU_MUL: on VTA, equal to the integer reference."""
    from vtaforge.compiler.compile import compile_model
    from vtaforge.compiler.reference import run_quantized
    from vtaforge.runtime.executor import Executor
    from vtaforge.runtime.fsim import FsimDevice

    m = make_model([helper.make_node("Relu", ["x"], ["r"]), helper.make_node("Mul", ["r", "c"], ["y"], name="scale")],
                   [("x", ["N", 4, 5, 5])], [("y", ["N", 4, 5, 5])], {"c": c})
    cfg = preset("pynq").replace(ALU_MUL=True)
    x = rand(3, 4, 5, 5, seed=4)
    cm = compile_model(m, x, cfg)
    (st,) = [s for s in cm.steps if s.name == "scale"]
    assert st.target == "vta" and st.op == "qmul", cm.placement_table()
    got = Executor(cm, FsimDevice(cfg)).run(x, keep=True)
    np.testing.assert_array_equal(got[st.outputs[0]], run_quantized(cm.qgraph, {"x": x}, keep_all=True)[st.outputs[0]])


def test_padded_max_pool_of_signed_values_goes_to_cpu():
    """LOAD pads with zeros; exact max-pool padding is -128, so only non-negative inputs qualify."""
    m = make_model([helper.make_node("MaxPool", ["x"], ["y"], kernel_shape=[3, 3], pads=[1, 1, 1, 1],
                                     name="mp")], [("x", ["N", 4, 6, 6])], [("y", ["N", 4, 6, 6])])
    q = quantize(import_onnx(m), rand(2, 4, 6, 6))
    p = partition(q)
    assert p.target("mp") == "cpu" and "-128 padding" in p.placements["mp"].reason


def test_narrow_accumulator_is_flagged():
    """BR-29: a worst-case accumulator that does not fit ACC_WIDTH stays on the CPU."""
    m = make_model([helper.make_node("Gemm", ["x", "w"], ["y"], transB=1, name="fc")],
                   [("x", ["N", 1024])], [("y", ["N", 16])], {"w": rand(16, 1024)})
    q = quantize(import_onnx(m), rand(4, 1024))
    cfg = preset("pynq").replace(LOG_ACC_WIDTH=4, LOG_ACC_BUFF_SIZE=16)
    p = partition(q, cfg)
    assert p.target("fc") == "cpu" and "ACC_WIDTH 16" in p.placements["fc"].reason
