"""Compiled models on the Verilator simulation of the core (``rtl``) against the functional
simulator (``fsim``), through the executor: every step's output equal bit for bit.

- ``tiny``: a small ONNX model with a 3x3 conv (padding 1, stride 2), a residual add, a
  max-pool and a dense layer, compiled with ``compile_model``; the layers that run on the
  core are checked to be on VTA.
- ``pynq``: the bundled digits CNN on a handful of held-out images (``slow``: the first pynq
  Verilator build takes minutes; later runs reuse the cached build, the same flags as
  ``runtime/rtl`` uses by default).
"""

from __future__ import annotations

import numpy as np
import pytest

from small_models import four_step_model
from vtaforge.compiler.compile import compile_model
from vtaforge.compiler.quantize import QuantConfig
from vtaforge.runtime.executor import Executor
from vtaforge.runtime.fsim import FsimDevice

pytestmark = pytest.mark.rtl

rtl = pytest.importorskip("vtaforge.runtime.rtl")


def _run_both(cm, x, *, mem_bytes=16 << 20):
    """Executor outputs (every intermediate kept) on fsim and on rtl, plus the rtl executor."""
    f = Executor(cm, FsimDevice(cm.config, mem_bytes=mem_bytes)).run(x, keep=True)
    dev = rtl.RtlDevice(cm.config, mem_bytes, progress=False)
    try:
        ex = Executor(cm, dev)
        r = ex.run(x, keep=True)
    finally:
        dev.close()
    return f, r, ex


def _assert_equal_outputs(f, r):
    assert set(f) == set(r)
    for k in f:
        np.testing.assert_array_equal(np.asarray(r[k]), np.asarray(f[k]), err_msg=k)


def test_layers_tiny_rtl_equals_fsim():
    rng = np.random.default_rng(1)
    calib = rng.standard_normal((16, 8, 9, 9)).astype(np.float32)
    cm = compile_model(four_step_model(), calib, "tiny")
    on_vta = {s.op for s in cm.steps if s.target == "vta"}
    for op in ("qconv2d", "qadd", "qmax_pool", "qdense"):
        assert op in on_vta, (op, [(s.name, s.op, s.target, s.reason) for s in cm.steps])
    x = rng.standard_normal((3, 8, 9, 9)).astype(np.float32)   # batch 3: a partial block
    f, r, ex = _run_both(cm, x)
    _assert_equal_outputs(f, r)
    assert any(st.gemm_uops > 0 for st in ex.stats.values())


@pytest.mark.slow
def test_digits_pynq_rtl_equals_fsim():
    from vtaforge.compiler.models import DIGITS_ONNX, load_digits_split

    xtr, _, xte, _ = load_digits_split()
    cm = compile_model(str(DIGITS_ONNX), xtr, "pynq")
    x = xte[:8]
    f, r, ex = _run_both(cm, x, mem_bytes=32 << 20)
    _assert_equal_outputs(f, r)
    assert sum(st.gemm_uops for st in ex.stats.values()) > 0


def _se_model():
    """Conv -> hard-swish as x * HardSigmoid(x) -> squeeze-excite (GAP, 1x1 conv, Sigmoid,
    Mul by the per-channel scale) -> Mul by a per-channel constant -> Div by 6: two tensor
    multiplies, a per-channel and a scalar constant multiply."""
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(5)
    inits = [numpy_helper.from_array((rng.standard_normal(s) * 0.3).astype(np.float32), n)
             for n, s in (("w", (8, 4, 3, 3)), ("w2", (8, 8, 1, 1)))]
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1]),
             helper.make_node("HardSigmoid", ["c"], ["hs"]),
             helper.make_node("Mul", ["c", "hs"], ["hw"], name="hswish"),
             helper.make_node("GlobalAveragePool", ["hw"], ["g"]),
             helper.make_node("Conv", ["g", "w2"], ["e"]),
             helper.make_node("Sigmoid", ["e"], ["s"]),
             helper.make_node("Mul", ["s", "hw"], ["z"], name="se"),
             helper.make_node("Mul", ["z", "pc"], ["z2"], name="mul_pc"),
             helper.make_node("Div", ["z2", "six"], ["y"], name="div_6")]
    inits += [numpy_helper.from_array(rng.standard_normal((1, 8, 1, 1)).astype(np.float32), "pc"),
              numpy_helper.from_array(np.array(6.0, np.float32), "six")]
    g = helper.make_graph(nodes, "se", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 4, 6, 6])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 8, 6, 6])], inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    return m


@pytest.mark.slow
def test_tensor_multiply_rtl_equals_fsim():
    """The tensor-operand ALU MUL (element-wise and per-channel broadcast) on the core with
    ALU_MUL (the same config as the core tests' ALU_MUL build, so the build is shared)."""
    from vtaforge.hw.config import preset

    cfg = preset("tiny").replace(ALU_MUL=True, LUT_MULTIPLIERS=5, DSP_PACKING=2)
    rng = np.random.default_rng(2)
    cm = compile_model(_se_model(), rng.standard_normal((8, 4, 6, 6)).astype(np.float32), cfg)
    assert {s.name for s in cm.steps if s.target == "vta" and s.op == "qmul"} == {"hswish", "se", "mul_pc",
                                                                               "div_6"}, cm.placement_table()
    f, r, _ = _run_both(cm, rng.standard_normal((3, 4, 6, 6)).astype(np.float32))
    _assert_equal_outputs(f, r)


def test_add_const_and_layout_tiny_rtl_equals_fsim():
    """Adds of a scalar (ALU immediate) and of a per-channel constant (resident ACC constant,
    broadcast by a zero source factor) on the tiny core, rtl against fsim."""
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(3)
    inits = [numpy_helper.from_array(rng.standard_normal((1, 12, 1, 1)).astype(np.float32), "pc"),
             numpy_helper.from_array(np.array(3.0, np.float32), "three")]
    nodes = [helper.make_node("MaxPool", ["x"], ["p"], kernel_shape=[2, 2], strides=[2, 2]),
             helper.make_node("Add", ["p", "pc"], ["a"], name="add_pc"),
             helper.make_node("Relu", ["a"], ["r"]),
             helper.make_node("Add", ["r", "three"], ["y"], name="add_3")]
    g = helper.make_graph(nodes, "addc", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 12, 6, 6])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 12, 3, 3])], inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    cm = compile_model(m, rng.standard_normal((8, 12, 6, 6)).astype(np.float32), "tiny")
    assert {s.name for s in cm.steps if s.target == "vta"} >= {"add_pc", "add_3"}
    f, r, _ = _run_both(cm, rng.standard_normal((3, 12, 6, 6)).astype(np.float32))
    _assert_equal_outputs(f, r)


def test_layers_tiny_fused_requantize_rtl_equals_fsim():
    """The same model on tiny with ``ALU_REQUANT`` (the fused ALU REQ): every output equal
    on rtl and fsim, and equal to the core without the option (REQ is defined as the
    sequence it replaces); fewer ALU micro-ops and fewer core cycles on every step with a
    requantize (conv, add, dense)."""
    from vtaforge.hw.config import preset

    rng = np.random.default_rng(1)
    calib = rng.standard_normal((16, 8, 9, 9)).astype(np.float32)
    x = rng.standard_normal((2, 8, 9, 9)).astype(np.float32)
    # per-tensor weights: a per-channel layer takes the tensor SHR, never the fused REQ
    qc = QuantConfig(calibration="mse", per_channel="off")
    plain = compile_model(four_step_model(), calib, "tiny", quant_config=qc)
    fused = compile_model(four_step_model(), calib, preset("tiny").replace(ALU_REQUANT=True),
                          quant_config=qc)
    f, r, ex = _run_both(fused, x)
    _assert_equal_outputs(f, r)
    f0, _r0, ex0 = _run_both(plain, x)
    _assert_equal_outputs(f0, f)
    for s in fused.steps:
        if s.target == "vta" and s.op in ("qconv2d", "qadd", "qdense"):
            a, b = ex.stats[s.name], ex0.stats[s.name]
            assert a.alu_uops < b.alu_uops and a.cycles < b.cycles, (s.name, a, b)


def _conv_model(c: int = 8, o: int = 16, hw: int = 16, seed: int = 0):
    """input [N,c,hw,hw] -> Conv 3x3 pad 1 (o) -> Relu: on tiny, more output tiles than
    virtual threads (tiles of one ACC region follow each other)."""
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(seed)
    inits = [numpy_helper.from_array((rng.standard_normal((o, c, 3, 3)) * 0.2)
                                     .astype(np.float32), "w"),
             numpy_helper.from_array((rng.standard_normal(o) * 0.1).astype(np.float32), "b")]
    nodes = [helper.make_node("Conv", ["input", "w", "b"], ["c"], kernel_shape=[3, 3],
                              pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c"], ["y"])]
    g = helper.make_graph(
        nodes, "rtl_clear_conv",
        [helper.make_tensor_value_info("input", TensorProto.FLOAT, ["N", c, hw, hw])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", o, hw, hw])], inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    return m


def test_clearing_req_conv_tiny_rtl_equals_fsim():
    """With ``ALU_REQUANT`` each conv tile ends with a clearing REQ (OUT gets the result,
    ACC 0), so a tile whose entries the previous tile of its ACC region cleared skips its
    GEMM reset: rtl equals fsim, the outputs equal those of the lowering without the clear
    (``ConvOptions(clearing_req=False)``), the same GEMM and ALU micro-ops run, and the
    core takes fewer cycles."""
    from vtaforge.compiler.options import ConvOptions, LowerOptions
    from vtaforge.hw.config import preset

    cfg = preset("tiny").replace(ALU_REQUANT=True)
    rng = np.random.default_rng(2)
    calib = rng.standard_normal((8, 8, 16, 16)).astype(np.float32)
    x = rng.standard_normal((1, 8, 16, 16)).astype(np.float32)
    clear = compile_model(_conv_model(), calib, cfg)
    plain = compile_model(_conv_model(), calib, cfg,
                          options=LowerOptions(conv=ConvOptions(clearing_req=False)))
    conv = [s for s in clear.steps if s.target == "vta" and s.op == "qconv2d"]
    assert len(conv) == 1 and conv[0].trace.stats["resets_skipped"] >= 2
    assert [s.trace.stats["resets_skipped"] for s in plain.steps
            if s.target == "vta" and s.op == "qconv2d"] == [0]
    f, r, ex = _run_both(clear, x)
    _assert_equal_outputs(f, r)
    f0, _r0, ex0 = _run_both(plain, x)
    _assert_equal_outputs(f0, f)
    a, b = ex.stats[conv[0].name], ex0.stats[conv[0].name]
    assert (a.gemm_uops, a.alu_uops) == (b.gemm_uops, b.alu_uops)
    assert a.cycles < b.cycles, (a, b)
