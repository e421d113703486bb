"""Non-power-of-two QDQ scales with ALU MUL, and the 7x7 global average pool on VTA.

Oracles are written here: numpy int64 rounding division for average pools, a numpy model
of VTA's wrapping 32-bit ALU for the multiplier sequence, onnxruntime for the QDQ float
model; bit-exactness is against the compiler's integer reference (which follows the
integer rules of the quantized-graph format).
"""

from __future__ import annotations

import numpy as np
import pytest
from onnx import helper

from vtaforge.compiler.compile import compile_model
from vtaforge.compiler.requant import MULT_MAX, avg_reciprocal, mult_plan
from vtaforge.compiler.quantize import QuantConfig
from vtaforge.compiler.reference import run_quantized
from vtaforge.compiler.zoo import resnet18
from vtaforge.hw.config import preset
from vtaforge.hw.isa import AluOp
from vtaforge.runtime.executor import Executor

from _lower_util import RecordingFsim
from _onnx_util import make_model, rand, run_ort

SX, SW1, SH, SW2, SY = 0.0137, 0.0071, 0.05, 0.0093, 0.0611
MUL_CFG = preset("pynq").replace(ALU_MUL=True)




def _qdq_model():
    """x -QDQ(0.0137)- Conv(w: DQ 0.0071) + ReLU -QDQ(0.05)- Flatten - Gemm(w: DQ 0.0093) -QDQ."""
    w1 = np.clip(np.rint(rand(8, 4, 3, 3, seed=1, scale=0.4) / SW1), -127, 127).astype(np.int8)
    w2 = np.clip(np.rint(rand(10, 8 * 6 * 6, seed=2, scale=0.06) / SW2), -127, 127).astype(np.int8)
    z = np.array(0, np.int8)
    nodes = [helper.make_node("QuantizeLinear", ["x", "sx", "z"], ["xq"]),
             helper.make_node("DequantizeLinear", ["xq", "sx", "z"], ["xd"]),
             helper.make_node("DequantizeLinear", ["w1q", "sw1"], ["w1d"]),
             helper.make_node("Conv", ["xd", "w1d", "b1"], ["c"], pads=[0, 0, 0, 0]),
             helper.make_node("Relu", ["c"], ["r"]),
             helper.make_node("QuantizeLinear", ["r", "sh", "z"], ["rq"]),
             helper.make_node("DequantizeLinear", ["rq", "sh", "z"], ["rd"]),
             helper.make_node("Flatten", ["rd"], ["f"]),
             helper.make_node("DequantizeLinear", ["w2q", "sw2"], ["w2d"]),
             helper.make_node("Gemm", ["f", "w2d", "b2"], ["g"], transB=1),
             helper.make_node("QuantizeLinear", ["g", "sy", "z"], ["gq"]),
             helper.make_node("DequantizeLinear", ["gq", "sy", "z"], ["y"])]
    inits = {"sx": np.array(SX, np.float32), "sw1": np.array(SW1, np.float32),
             "sh": np.array(SH, np.float32), "sw2": np.array(SW2, np.float32),
             "sy": np.array(SY, np.float32), "z": z, "w1q": w1, "w2q": w2,
             "b1": rand(8, seed=3, scale=0.1), "b2": rand(10, seed=4, scale=0.1)}
    return make_model(nodes, [("x", ["N", 4, 8, 8])], [("y", ["N", 10])], inits)


def _run(cm, x):
    dev = RecordingFsim(cm.config)
    out = Executor(cm, dev).run(x, keep=True)
    return out, dev


def _assert_bit_exact(cm, out, x):
    ref = run_quantized(cm.qgraph, {"x": x}, keep_all=True)
    n = 0
    for s in cm.steps:
        if s.target == "vta":
            np.testing.assert_array_equal(out[s.outputs[0]], ref[s.outputs[0]], err_msg=s.name)
            n += 1
    assert n >= 2


@pytest.fixture(scope="module")
def qdq():
    m = _qdq_model()
    rng = np.random.default_rng(5)
    calib = rng.uniform(-1.5, 1.5, (16, 4, 8, 8)).astype(np.float32)
    x = rng.uniform(-1.5, 1.5, (32, 4, 8, 8)).astype(np.float32)
    return m, calib, x


def test_qdq_exact_multiply_on_vta_bit_exact_and_close_to_onnxruntime(qdq):
    m, calib, x = qdq
    cm = compile_model(m, calib, MUL_CFG)
    q = cm.qgraph
    lin = [n for n in q.nodes if n.op in ("qconv2d", "qdense")]
    assert len(lin) == 2 and all(cm.partition.target(n.name) == "vta" for n in lin)
    # the multipliers realise the real ratios s_in*s_w/s_out (independent of the quantizer)
    for n, ratio in zip(lin, (SX * SW1 / SH, SH * SW2 / SY)):
        mlt, k = n.attrs["mult"], n.attrs["shift"]
        assert 1 < mlt <= 32767 and n.attrs["round"] == 1 << (k - 1)
        assert abs(mlt * 2.0 ** -k / ratio - 1) <= 0.5 / mlt + 1e-6, (n.name, mlt, k, ratio)
    rep = q.meta["quant_report"]
    assert {c.node for c in rep.multipliers} == {n.name for n in lin}
    assert not rep.qdq   # nothing approximated by a power of two
    out, dev = _run(cm, x)
    assert int(AluOp.MUL) in dev.alu_ops
    _assert_bit_exact(cm, out, x)
    (want,) = run_ort(m, {"x": x})
    lsb = np.abs(out["y"].astype(np.float64) - want) / SY
    frac_within_1 = float(np.mean(lsb <= 1 + 1e-6))
    print(f"exact QDQ: {frac_within_1:.2%} of outputs within 1 LSB of onnxruntime, "
          f"max {lsb.max():.2f} LSB, exact {np.mean(lsb < 1e-6):.2%}")
    assert frac_within_1 >= 0.99
    assert lsb.max() <= 2 + 1e-6


def test_qdq_plain_pynq_approximates_with_shifts_and_reports(qdq):
    m, calib, x = qdq
    cm = compile_model(m, calib, "pynq")
    q = cm.qgraph
    assert all(n.attrs.get("mult", 1) in (None, 1) for n in q.nodes)
    rep = q.meta["quant_report"]
    got = {a.scale: (a.exp, a.rel_error) for a in rep.qdq}
    for s in (SX, SW1, SH, SW2, SY):      # nearest power of two in the log domain
        e = int(np.round(np.log2(s)))
        match = [v for k, v in got.items() if abs(k / s - 1) < 1e-6]
        assert match and match[0][0] == e, (s, got)
        assert abs(match[0][1] - abs(2.0 ** e - s) / s) < 1e-6
    text = str(rep)
    assert "relative error" in text and "2^-4" in text
    out, dev = _run(cm, x)
    assert int(AluOp.MUL) not in dev.alu_ops
    _assert_bit_exact(cm, out, x)
    (want,) = run_ort(m, {"x": x})
    cos = np.sum(want * out["y"]) / (np.linalg.norm(want) * np.linalg.norm(out["y"]))
    assert cos > 0.9, cos


def test_exact_multiply_on_a_core_without_alu_mul_runs_on_cpu_never_emits_mul(qdq):
    m, calib, x = qdq
    cm = compile_model(m, calib, "pynq", quant_config=QuantConfig(exact_multiply=True))
    lin = [s for s in cm.steps if s.op in ("qconv2d", "qdense")]
    assert all(s.target == "cpu" and "ALU_MUL" in s.reason for s in lin)
    out, dev = _run(cm, x)
    assert int(AluOp.MUL) not in dev.alu_ops
    ref = run_quantized(cm.qgraph, {"x": x})
    np.testing.assert_array_equal(out["y"], ref["y"])


def _rounding_division(acc, d):
    """Round to nearest, ties toward +infinity, in exact integers."""
    q, r = np.divmod(acc, d)
    return q + (2 * r >= d)


@pytest.mark.parametrize("d", [3, 5, 6, 7, 9, 12, 25, 36, 49, 100, 121])
def test_avg_reciprocal_equals_rounding_division_for_every_window_sum(d):
    mlt, k, rnd = avg_reciprocal(d)
    assert 1 <= mlt <= MULT_MAX and 0 < k <= 31
    acc = np.arange(-128 * d, 127 * d + 1, dtype=np.int64)
    dev = np.abs(((acc * mlt + rnd) >> k) - _rounding_division(acc, d))
    assert dev.max() == 0          # the bound: no deviation over the reachable sums
    assert 128 * d * mlt + rnd < 2 ** 31


def _gap_model(c=16, h=7):
    return make_model([helper.make_node("GlobalAveragePool", ["x"], ["y"])],
                      [("x", ["N", c, h, h])], [("y", ["N", c, 1, 1])])


@pytest.mark.parametrize("cfg,target", [(MUL_CFG, "vta"), (preset("pynq"), "cpu")])
def test_global_avg_pool_7x7(cfg, target):
    m = _gap_model()
    rng = np.random.default_rng(1)
    x = rng.uniform(-4, 4, (3, 16, 7, 7)).astype(np.float32)
    cm = compile_model(m, x, cfg)
    if target == "cpu":     # its int8 form would run on the CPU: it stays a float CPU step
        (step,) = [s for s in cm.steps if s.op == "global_avg_pool"]
        assert step.target == "cpu"
        assert "49 is not a power of two" in step.reason and "ALU_MUL" in step.reason, step.reason
        out, dev = _run(cm, x)
        assert int(AluOp.MUL) not in dev.alu_ops
        np.testing.assert_allclose(out[cm.outputs[0]], x.mean(axis=(2, 3), keepdims=True),
                                   rtol=1e-5, atol=1e-6)
        return
    (step,) = [s for s in cm.steps if s.op == "qavg_pool"]
    assert step.target == target, step.reason
    assert "MUL" in step.reason
    out, dev = _run(cm, x)
    assert (int(AluOp.MUL) in dev.alu_ops) == (target == "vta")
    xq = out[step.inputs[0]].astype(np.int64)
    want = _rounding_division(xq.sum(axis=(2, 3), keepdims=True), 49)
    np.testing.assert_array_equal(out[step.outputs[0]], np.clip(want, -128, 127))


def _alu32(v):
    v = np.asarray(v, np.int64) & 0xFFFFFFFF
    return np.where(v >= 2 ** 31, v - 2 ** 32, v)


@pytest.mark.parametrize("mlt,k,lo,hi,bound,clip", [(21400, 20, -128, 127, 6272, False),
                                                    (30001, 22, 0, 127, 4608 * 16384, True),
                                                    (12345, 20, -128, 127, 600_000, True),
                                                    (30001, 15, -20, 90, 40_000, False)])
def test_mult_plan_never_overflows_and_matches_the_int64_rule(mlt, k, lo, hi, bound, clip):
    """Model VTA's wrapping 32-bit ALU on the planned sequence; compare with int64 math.

    ``clip``: the worst-case bound overflows ``acc*mult``, so the plan needs the exact
    pre-clip."""
    rnd = 1 << (k - 1)
    plan = mult_plan(mlt, k, rnd, lo, hi, bound, 32)
    assert plan is not None and (plan.clip is not None) == clip
    assert (bound * mlt + rnd >= 2 ** 31) == clip
    rng = np.random.default_rng(k)
    acc = np.concatenate([rng.integers(-bound, bound + 1, 20000),
                          np.arange(-300, 300), [-bound, bound]]).astype(np.int64)
    want = np.clip((acc * mlt + rnd) >> k, lo, hi)
    v = _alu32(acc + plan.pre_add)
    if plan.clip:
        v = np.minimum(np.maximum(v, plan.clip[0]), plan.clip[1])
    v = _alu32(v * plan.mult)
    assert np.abs(v).max() < 2 ** 31
    v = _alu32(v + plan.post_add) >> plan.shift
    np.testing.assert_array_equal(np.clip(v, lo, hi), want)


def test_mult_plan_refuses_what_it_cannot_prove():
    # pre-clip bounds ~127 * 2**25 / 30001 = 142k do not fit a 16-bit immediate
    assert mult_plan(30001, 25, 1 << 24, -128, 127, 4608 * 16384, 32) is None
    # a 16-bit accumulator cannot hold even the clipped products
    assert mult_plan(21400, 20, 1 << 19, -128, 127, 6272, 16) is None


def test_resnet18_reduced_global_pool_on_vta_bit_exact():
    """ResNet-18 at 96x96: the final 3x3 global pool (divisor 9) runs on VTA with ALU_MUL."""
    m = resnet18(96, seed=0)
    rng = np.random.default_rng(3)
    calib = rng.normal(0, 1, (2, 3, 96, 96)).astype(np.float32)
    x = rng.normal(0, 1, (1, 3, 96, 96)).astype(np.float32)
    cm = compile_model(m, calib, MUL_CFG)
    (gap,) = [s for s in cm.steps if s.op == "qavg_pool"]
    assert gap.target == "vta" and gap.attrs["divisor"] == 9, gap.reason
    out, _ = _run(cm, x)
    ref = run_quantized(cm.qgraph, {"input": x}, keep_all=True)
    for s in cm.steps:
        if s.target == "vta":
            np.testing.assert_array_equal(out[s.outputs[0]], ref[s.outputs[0]], err_msg=s.name)
