"""The per-channel requantize as one per-lane REQ on ``REQ_LANE_SHIFT`` cores
(:func:`~vtaforge.compiler.lower_conv.channel_lanes`).

On such a core an ALU REQ whose shift field is ``REQ_LANE`` (-32) takes each lane's bias
and shift from its tensor operand word (``req_lane_word(bias, shift)``), so a conv with
per-output-channel shifts lowers with ``nob`` lane-word rows instead of ``2 * nob`` bias and
shift rows, no tensor SHR, and the scalar requantize's program shape (clearing REQ, the REQ
engine's forms).  Oracles: the integer reference's requantize rule on the exact int64 conv
sum (:func:`vtaforge.compiler.reference.requantize`), and ``run_quantized`` on whole
quantized ONNX models.
"""

from __future__ import annotations

import numpy as np
import pytest
from onnx import helper

from _onnx_util import make_model, rand
from test_lower_perchannel import _pc_attrs, _run, _scalar_attrs, _shifts
from vtaforge.compiler import QuantConfig, run_quantized
from vtaforge.compiler.compile import compile_model
from vtaforge.compiler.lower_conv import channel_lanes, lower_conv, lower_dense
from vtaforge.compiler.options import ConvOptions
from vtaforge.compiler.reference import conv2d_nchw, requantize
from vtaforge.hw.config import preset
from vtaforge.hw.isa import REQ_LANE, AluOp, req_fields, req_lane_fields
from vtaforge.runtime.executor import Executor
from vtaforge.runtime.fsim import FsimDevice

#: pynq-fast has the option since 2026-12-08; FAST is it without
LANE = preset("pynq-fast")
FAST = LANE.replace(REQ_LANE_SHIFT=False)
#: a small core with the fused requantize and lane shifts, no REQ engine
SMALL = preset("tiny").replace(ALU_REQUANT=True, REQ_LANE_SHIFT=True)
CFGS = {"fast-lane": LANE, "small-lane": SMALL}
#: the same cores without the option
BASE = {"fast-lane": FAST, "small-lane": SMALL.replace(REQ_LANE_SHIFT=False)}


def _want(x, w, b, attrs):
    """The integer reference: exact int64 conv + bias, then the per-channel requantize."""
    acc = np.rint(conv2d_nchw(x, w, attrs["strides"], attrs["pads"], attrs["groups"]))
    return requantize(acc.astype(np.int64) + b.astype(np.int64).reshape(1, -1, 1, 1), attrs)


def _data(cin, cout, h, k, g, seed, bmax=20000):
    rng = np.random.default_rng(seed)
    x = rng.integers(-128, 128, (1, cin, h, h)).astype(np.int8)
    w = rng.integers(-127, 128, (cout, cin // g, k, k)).astype(np.int8)
    b = rng.integers(-bmax, bmax, cout).astype(np.int32)
    return x, w, b, _shifts(rng, cout)


def _case(cfg, cin, cout, h, k, s, p, g, *, seed=0, b=None, **kw):
    """A random per-channel conv (shifts -3..20, one negative) on ``cfg``'s fsim against
    the reference; returns ``(lowered, attrs, (x, w, b))``."""
    x, w, b0, sh = _data(cin, cout, h, k, g, seed)
    b = b0 if b is None else b
    attrs = _pc_attrs(k, s, p, g, sh)
    lo = lower_conv(cfg, "ln", (cin, h, h), w, b, attrs, **kw)
    np.testing.assert_array_equal(_run(cfg, lo, x), _want(x, w, b, attrs))
    return lo, attrs, (x, w, b)


def _alu(lo):
    return [k for k in lo.trace.kernels if k.mode == "alu"]


def _is_lane(k) -> bool:
    """A per-lane REQ kernel: tensor operand, shift field REQ_LANE."""
    return (k.mode == "alu" and k.alu_op == AluOp.REQ and not k.use_imm
            and req_fields(k.imm)[0] == REQ_LANE)


def _lane_reqs(lo):
    return [k for k in lo.trace.kernels if _is_lane(k)]


def _count(lo, pred) -> int:
    """Instructions of ``lo``'s trace whose kernel satisfies ``pred``."""
    ks = lo.trace.kernels
    return sum(1 for op in lo.trace.ops if op[0] == "K" and pred(ks[op[1]]))


def _alu_work(lo) -> int:
    """ALU operations (micro-op executions: loop extents x micro-ops) of ``lo``'s trace."""
    ks = lo.trace.kernels
    return sum(ks[op[1]].n_uops * int(np.prod([lp[0] for lp in ks[op[1]].loops]))
               for op in lo.trace.ops if op[0] == "K" and ks[op[1]].mode == "alu")


def _shape(lo):
    """The trace with every kernel's immediate left out: its instruction stream and
    micro-op indices (what a scalar and a per-lane requantize share)."""
    ks = [(k.mode, k.reset, k.alu_op, k.use_imm, tuple(map(tuple, k.loops)), k.dst.tobytes(),
           k.src.tobytes(), k.wgt.tobytes(), k.depthwise) for k in lo.trace.kernels]
    return [("K",) + ks[op[1]] if op[0] == "K" else op for op in lo.trace.ops]


CASES = [
    (16, 32, 8, 3, 1, 1, 1),        # 3x3
    (64, 64, 28, 3, 1, 1, 1),       # 3x3, several tiles
    (64, 128, 28, 1, 2, 0, 1),      # 1x1 stride 2 (row skip; streamed / bank split on eng)
    (32, 32, 10, 3, 1, 1, 32),      # depthwise (depthwise GEMMs on pynq-fast)
    (128, 128, 14, 3, 2, 1, 128),   # depthwise stride 2
    (32, 48, 11, 3, 2, 1, 4),       # grouped
    (3, 24, 16, 3, 2, 1, 1),        # few channels: im2col
]


@pytest.mark.parametrize("name", CFGS)
@pytest.mark.parametrize("case", CASES, ids=str)
def test_lane_conv_is_one_req_and_exact(name, case):
    """Bit-exact; no SHR; every requantize one per-lane REQ (clearing) reading the ``nob``
    lane-word rows; fewer ALU operations than on the same core without the option, whose
    program keeps the tensor SHR (and, without a REQ engine, fewer
    instructions)."""
    cfg = CFGS[name]
    lo, attrs, (x, w, b) = _case(cfg, *case, seed=sum(case))
    nob = -(-case[1] // cfg.BLOCK_OUT)
    alu = _alu(lo)
    assert all(k.alu_op != AluOp.SHR for k in alu)
    assert all(k.alu_op == AluOp.REQ for k in alu if not k.reset)
    assert _lane_reqs(lo) and all(k.reset for k in _lane_reqs(lo))     # clearing
    assert all((k.src < nob).all() for k in _lane_reqs(lo))
    bc = lo.consts["b"]
    assert bc.shape[0] == nob
    bias, shift = req_lane_fields(bc[:, 0].reshape(-1)[:case[1]])
    np.testing.assert_array_equal(shift, attrs["shift"])
    np.testing.assert_array_equal(bias, b.astype(np.int64) + np.asarray(attrs["round"]))
    old = lower_conv(BASE[name], "ln", case[:1] + (case[2], case[2]), w, b, attrs)
    assert any(k.alu_op == AluOp.SHR for k in _alu(old))
    assert _alu_work(lo) < _alu_work(old)
    if not cfg.REQ_ENGINE:      # (on the engine core the REQ-per-step forms add tokens)
        assert len(lo.trace.ops) < len(old.trace.ops)


@pytest.mark.parametrize("case", CASES[:5], ids=str)
def test_lane_conv_is_planned_as_the_scalar_conv(case):
    """On pynq-fast (the REQ engine) the per-lane program is the scalar requantize's
    program of the same shape, instruction for instruction (the REQ per step, streamed
    last steps, bank split, clears, resets), only the REQ's immediate differs."""
    cin, cout, h, k, s, p, g = case
    x, w, b, sh = _data(cin, cout, h, k, g, 7)
    lane = lower_conv(LANE, "ln", (cin, h, h), w, b, _pc_attrs(k, s, p, g, sh))
    scalar = lower_conv(LANE, "ln", (cin, h, h), w, b, _scalar_attrs(k, s, p, g, 8))
    assert _shape(lane) == _shape(scalar)
    for key in ("tiling", "step_req", "stream_steps", "bank_split", "resets_skipped"):
        assert lane.trace.stats[key] == scalar.trace.stats[key], key


@pytest.mark.parametrize("name", CFGS)
def test_lane_dense(name):
    cfg = CFGS[name]
    rng = np.random.default_rng(2)
    k, m = 256, 100
    x = rng.integers(-128, 128, (3, k)).astype(np.int8)
    w = rng.integers(-127, 128, (m, k)).astype(np.int8)
    b = rng.integers(-20000, 20000, m).astype(np.int32)
    attrs = _pc_attrs(1, 1, 0, 1, _shifts(rng, m))
    lo = lower_dense(cfg, "ld", k, w, b, attrs)
    got = _run(cfg, lo, x.reshape(3, k, 1, 1))
    np.testing.assert_array_equal(got, _want(x.reshape(3, k, 1, 1), w.reshape(m, k, 1, 1), b,
                                             dict(attrs, strides=(1, 1), pads=(0,) * 4,
                                                  groups=1)))
    assert _lane_reqs(lo) and not any(k.alu_op == AluOp.SHR for k in _alu(lo))


def test_lane_depthwise_without_taps():
    """The depthwise conv on pynq-fast with ordinary GEMMs (DEPTHWISE_TAPS 0)."""
    cfg = LANE.replace(DEPTHWISE_TAPS=0)
    lo, _, _ = _case(cfg, 64, 64, 14, 3, 1, 1, 64, seed=3)
    assert "depthwise_taps" not in lo.trace.stats
    assert _lane_reqs(lo) and not any(k.alu_op == AluOp.SHR for k in _alu(lo))
    lo3, _, _ = _case(LANE, 64, 64, 14, 3, 1, 1, 64, seed=3)
    assert lo3.trace.stats["depthwise_taps"] == 3 and _lane_reqs(lo3)


def test_lane_multi_tile_on_a_small_scratchpad():
    """Many tiles (a small accumulator), every one's REQ per-lane, exact."""
    cfg = SMALL.replace(LOG_ACC_BUFF_SIZE=10)
    lo, _, _ = _case(cfg, 16, 16, 16, 3, 1, 1, 1, seed=4)
    assert lo.trace.stats["tiles"] > 4
    assert _count(lo, _is_lane) >= lo.trace.stats["tiles"]
    assert not any(k.alu_op == AluOp.SHR for k in _alu(lo))


def test_lane_shift_extremes():
    """A left shift (-3), shift 0 and a right shift of 25 (round 2**24, near the lane
    word's bias limit) in one block; exact."""
    cfg = SMALL
    x, w, b, _ = _data(8, 8, 6, 3, 1, 5)
    sh = np.array([-3, 0, 25, 1, 2, -1, 9, 20])
    attrs = _pc_attrs(3, 1, 1, 1, sh)
    lo = lower_conv(cfg, "lx", (8, 6, 6), w, b, attrs)
    np.testing.assert_array_equal(_run(cfg, lo, x), _want(x, w, b, attrs))
    assert _lane_reqs(lo)


@pytest.mark.parametrize("name", CFGS)
def test_bias_too_large_for_the_lane_word_falls_back(name):
    """A channel's bias + round beyond ±2**25: no lane words (channel_lanes None); the
    layer takes the core's path without the option (tensor SHR, 2*nob rows), exact, and
    the same program as on the core without the option."""
    cfg = CFGS[name]
    case = (16, 32, 8, 3, 1, 1, 1)
    x, w, b, sh = _data(16, 32, 8, 3, 1, 6)
    b[3] = (1 << 25) + 5
    attrs = _pc_attrs(3, 1, 1, 1, sh)
    assert channel_lanes(cfg, b, attrs, (np.asarray(sh), np.asarray(attrs["round"]))) is None
    lo, _, _ = _case(cfg, *case, seed=6, b=b)
    assert not _lane_reqs(lo) and any(k.alu_op == AluOp.SHR for k in _alu(lo))
    nob = -(-32 // cfg.BLOCK_OUT)
    assert lo.consts["b"].shape[0] == 2 * nob
    old = lower_conv(BASE[name], "ln", (16, 8, 8), w, b, attrs)
    assert _shape(lo) == _shape(old)
    for k1, k2 in zip(lo.trace.kernels, old.trace.kernels):
        assert k1.imm == k2.imm
    np.testing.assert_array_equal(lo.consts["b"], old.consts["b"])


def test_lane_bands():
    """Row bands of a per-channel 1x1 conv on pynq-fast + lane: each band loads the ``nob``
    lane-word rows once and requantizes with the per-lane REQ, no SHR."""
    from vtaforge.compiler.lower_conv import lower_conv_bands

    x, w, b, sh = _data(64, 32, 8, 1, 1, 9)
    bands = lower_conv_bands(LANE, "bd", (64, 8, 8), w, b, _pc_attrs(1, 1, 0, 1, sh))
    for band in bands:
        for tr in (band.trace, band.tail):
            if tr is None:
                continue
            assert [op[5:7] for op in tr.ops if op[0] == "L" and op[1] == "b"] == [(1, 2)]
            assert any(_is_lane(k) for k in tr.kernels)
            assert not any(k.mode == "alu" and k.alu_op == AluOp.SHR for k in tr.kernels)
            assert tr.stats["min_dram_read_bytes"] >= 4 * 32


def test_lane_words_limits():
    """channel_lanes: None without the option or without a REQ clip; the words' bias and
    shift fields."""
    sh, rn = np.array([1, -2, 31, -32]), np.array([1, 0, 1 << 30, 0])
    b = np.array([5, -7, 0, (1 << 25) - 1], np.int32)
    a = {"clip_lo": -128, "clip_hi": 127}
    assert channel_lanes(FAST, b, a, (sh, rn)) is None
    assert channel_lanes(LANE, b, {"clip_lo": -32768, "clip_hi": 32767}, (sh, rn)) is None
    assert channel_lanes(LANE, b, a, (sh, rn)) is None          # round 2**30 too large
    rn[2] = 1 << 24
    words = channel_lanes(LANE, b, a, (sh, rn))
    bias, shift = req_lane_fields(words)
    np.testing.assert_array_equal(bias, b + rn)
    np.testing.assert_array_equal(shift, sh)
    bias0, shift0 = req_lane_fields(channel_lanes(LANE, b, a, (sh, rn), bias_load=True))
    assert (bias0 == 0).all()
    np.testing.assert_array_equal(shift0, sh)


@pytest.mark.parametrize("name", CFGS)
def test_lane_with_bias_load(name):
    """``bias_load``: the tiles start at the bias (+round) by broadcast loads, the lane
    words (bias 0) are loaded once to entries ``[0, nob)``; one REQ, no ADD, exact."""
    cfg = CFGS[name]
    lo, _, _ = _case(cfg, 64, 64, 14, 3, 1, 1, 1, seed=8, options=ConvOptions(bias_load=True))
    nob = -(-64 // cfg.BLOCK_OUT)
    alu = _alu(lo)
    assert {k.alu_op for k in alu} == {int(AluOp.REQ)} and _lane_reqs(lo)
    assert lo.consts["b"].shape[0] == 2 * nob
    bias, _ = req_lane_fields(lo.consts["b"][nob:, 0].reshape(-1))
    assert (bias == 0).all()
    loads = [op for op in lo.trace.ops if op[0] == "L" and op[1] == "b"]
    assert (loads[0][2], loads[0][4], loads[0][6]) == (nob, 0, nob)


def test_scalar_shift_minus_32_is_no_lane_req():
    """On a lane core a scalar requantize of shift -32 cannot be a REQ (its field would
    mean per-lane): the program has no REQ of that field; without the option it does."""
    rng = np.random.default_rng(1)
    w = rng.integers(-3, 4, (16, 16, 1, 1)).astype(np.int8)
    b = np.zeros(16, np.int32)
    attrs = dict(_scalar_attrs(1, 1, 0, 1, 1), shift=-32, round=0)
    for cfg, has in ((SMALL, False), (SMALL.replace(REQ_LANE_SHIFT=False), True)):
        lo = lower_conv(cfg, "m", (16, 4, 4), w, b, attrs)
        reqs = [k for k in _alu(lo) if k.alu_op == AluOp.REQ]
        assert any(req_fields(k.imm)[0] == -32 for k in reqs) == has


# --------------------------------------------------------------------------- whole models
C = 16


def _model():
    """x [N,16,12,12] -> 3x3 conv, ReLU -> depthwise 3x3 (channel-scaled weights), ReLU ->
    1x1 stride 2 -> dense: per-channel weight exps on every layer."""
    scale = np.array([2.0 ** -(o % 7) for o in range(C)], np.float32).reshape(-1, 1, 1, 1)
    nodes = [helper.make_node("Conv", ["x", "w1", "b1"], ["c1"], pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c1"], ["r1"]),
             helper.make_node("Conv", ["r1", "wd", "bd"], ["c2"], pads=[1, 1, 1, 1], group=C),
             helper.make_node("Relu", ["c2"], ["r2"]),
             helper.make_node("Conv", ["r2", "w2", "b2"], ["c3"], strides=[2, 2]),
             helper.make_node("Flatten", ["c3"], ["f"]),
             helper.make_node("Gemm", ["f", "wf", "bf"], ["y"], transB=1)]
    inits = {"w1": rand(C, C, 3, 3, seed=1, scale=0.2) * scale, "b1": rand(C, seed=4, scale=0.1),
             "wd": rand(C, 1, 3, 3, seed=2) * scale, "bd": rand(C, seed=5, scale=0.01),
             "w2": rand(32, C, 1, 1, seed=3, scale=0.3) / scale.reshape(1, -1, 1, 1) / 8,
             "b2": rand(32, seed=6, scale=0.1),
             "wf": rand(10, 32 * 36, seed=7, scale=0.05)
             * (2.0 ** -(np.arange(10) % 4)).reshape(-1, 1).astype(np.float32),
             "bf": rand(10, seed=8, scale=0.1)}
    return make_model(nodes, [("x", ["N", C, 12, 12])], [("y", ["N", 10])], inits)


@pytest.mark.parametrize("name", CFGS)
def test_whole_model_lane_is_exact_against_run_quantized(name):
    """A quantized model with per-channel weights compiled for a lane core: every VTA step
    bit-exact with ``run_quantized``; its per-channel layers take the lane REQ and no
    tensor SHR; the model has fewer instructions than on the core without the option."""
    cfg = CFGS[name]
    rng = np.random.default_rng(0)
    calib = rng.normal(0, 1, (8, C, 12, 12)).astype(np.float32)
    x = rng.normal(0, 1, (2, C, 12, 12)).astype(np.float32)
    qc = QuantConfig(calibration="mse", per_channel="on")
    cm = compile_model(_model(), calib, cfg, quant_config=qc)
    old = compile_model(_model(), calib, BASE[name], quant_config=qc)
    got = Executor(cm, FsimDevice(cm.config)).run(x, keep=True)
    ref = run_quantized(cm.qgraph, {"x": x}, keep_all=True)
    lanes = 0
    for s in cm.steps:
        if s.target != "vta":
            continue
        np.testing.assert_array_equal(got[s.outputs[0]], ref[s.outputs[0]], err_msg=s.name)
        if s.op in ("qconv2d", "qdense") and isinstance(s.attrs.get("shift"), (list, tuple)):
            ks = s.trace.kernels
            assert not any(k.mode == "alu" and k.alu_op == AluOp.SHR for k in ks), s.name
            lanes += 1
    assert lanes >= 3
    assert "(per-lane REQ)" in cm.placement_table() and "(tensor SHR)" in old.placement_table()
    n_new = sum(len(s.trace.ops) for s in cm.steps if s.target == "vta")
    n_old = sum(len(s.trace.ops) for s in old.steps if s.target == "vta")
    assert n_new < n_old
