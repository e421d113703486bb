"""The per-channel requantize on ``ALU_REQUANT`` cores (one fused REQ, lower_conv's
"aligned" form, :func:`~vtaforge.compiler.lower_conv.channel_align`).

``clip((acc + B[o]) >> s[o])`` is lowered as a tensor SHR by ``s[o] - max(s)`` (a left
shift) and one bias-fused, clearing REQ of shift ``max(s)`` with bias rows ``B[o] << k[o]``,
when no value can wrap at ``ACC_WIDTH``; else ADD bias, tensor SHR, and a REQ of shift 0
(clip only).  Oracle: the integer reference's own rule
(:func:`vtaforge.compiler.reference.requantize` on the exact conv sum).
"""

from __future__ import annotations

import numpy as np
import pytest

from test_lower_perchannel import CFGS, _pc_attrs, _run
from vtaforge.compiler.lower_conv import channel_align, channel_requant, lower_conv, lower_dense
from vtaforge.compiler.options import ConvOptions
from vtaforge.compiler.reference import conv2d_nchw, requantize
from vtaforge.hw.config import preset
from vtaforge.hw.isa import AluOp

REQ_CFGS = ("req", "eng")


def _want(x, w, b, attrs):
    """The integer reference: exact int64 conv + bias, then the per-channel requantize."""
    acc = np.rint(conv2d_nchw(x, w, attrs["strides"], attrs["pads"], attrs["groups"]))
    return requantize(acc.astype(np.int64) + b.astype(np.int64).reshape(1, -1, 1, 1), attrs)


def _case(cfg, cin, cout, h, k, s, p, g, shifts, *, seed=0, wmax=127, x=None, w=None,
          b=None, lo=-128, hi=127, **kw):
    rng = np.random.default_rng(seed)
    if x is None:
        x = rng.integers(-128, 128, (1, cin, h, h)).astype(np.int8)
    if w is None:
        w = rng.integers(-wmax, wmax + 1, (cout, cin // g, k, k)).astype(np.int8)
    if b is None:
        b = rng.integers(-20000, 20000, cout).astype(np.int32)
    attrs = _pc_attrs(k, s, p, g, shifts, lo, hi)
    lowered = lower_conv(cfg, "pcr", (cin, h, h), w, b, attrs, **kw)
    np.testing.assert_array_equal(_run(cfg, lowered, x), _want(x, w, b, attrs))
    return lowered


def _ops(lo):
    """``(alu_op, use_imm, reset)`` of every ALU kernel."""
    return {(k.alu_op, k.use_imm, k.reset) for k in lo.trace.kernels if k.mode == "alu"}


def _spread(o, seed):
    """Odd and even shifts 5..9 in every block, shift 0 and 1 among them: channels of one
    block with different shifts."""
    s = np.random.default_rng(seed).integers(5, 10, o)
    s[0], s[min(2, o - 1)] = 0, 1
    return s


@pytest.mark.parametrize("cfg", REQ_CFGS)
@pytest.mark.parametrize("case", [
    (16, 32, 8, 3, 1, 1, 1),        # 3x3
    (64, 64, 14, 3, 1, 1, 1),       # several tiles
    (32, 32, 10, 3, 1, 1, 32),      # depthwise
    (128, 128, 14, 3, 1, 1, 128),   # depthwise, REQ per step on eng
    (64, 96, 9, 1, 1, 0, 1),        # 1x1
    (256, 512, 14, 1, 2, 0, 1),     # 1x1 stride 2: streamed steps, bank split on eng
    (3, 24, 16, 3, 2, 1, 1),        # im2col
], ids=str)
def test_aligned_per_channel_is_one_fused_req(cfg, case):
    """Small weights (the bound proves no wrap): tensor SHR, then the clearing bias-fused
    REQ only (no ADD, MAX, MIN); bit-exact with the reference."""
    c = CFGS[cfg]
    lo = _case(c, *case, _spread(case[1], sum(case)), seed=sum(case), wmax=3)
    ops = _ops(lo)
    assert (int(AluOp.SHR), False, False) in ops
    assert (int(AluOp.REQ), False, True) in ops                     # clearing, bias fused
    assert not {int(AluOp.ADD), int(AluOp.MAX), int(AluOp.MIN)} & {
        op for op, imm, rst in ops if not rst}


@pytest.mark.parametrize("cfg", REQ_CFGS)
def test_aligned_bias_load_and_relu(cfg):
    """The bias loaded as the tiles' initial value (bias rows unscaled, REQ without a
    tensor operand) and a ReLU clip."""
    c = CFGS[cfg]
    lo = _case(c, 32, 48, 9, 3, 1, 1, 1, _spread(48, 1), seed=2, wmax=3,
               options=ConvOptions(bias_load=True),
               lo=0, hi=127)
    ops = _ops(lo)
    assert (int(AluOp.SHR), False, False) in ops and (int(AluOp.REQ), True, False) in ops
    assert int(AluOp.ADD) not in {op for op, _, rst in ops if not rst}


def test_aligned_dense_and_negative_shifts():
    """A dense and shifts below 0 (left shifts, no rounding) next to positive ones."""
    rng = np.random.default_rng(7)
    for c in (CFGS["req"], CFGS["eng"]):
        k, m = 256, 100
        x = rng.integers(-128, 128, (3, k)).astype(np.int8)
        w = rng.integers(-2, 3, (m, k)).astype(np.int8)
        b = rng.integers(-300, 300, m).astype(np.int32)
        sh = rng.integers(-2, 4, m)
        a = _pc_attrs(1, 1, 0, 1, sh)
        lo = lower_dense(c, "pd", k, w, b, a)
        assert (int(AluOp.REQ), False, True) in _ops(lo)
        got = _run(c, lo, x.reshape(3, k, 1, 1))
        np.testing.assert_array_equal(got, _want(x.reshape(3, k, 1, 1), w.reshape(m, k, 1, 1),
                                                 b, a))


def test_aligned_blocks_without_shift_take_no_shr():
    """An output block whose channels all have the largest shift needs no SHR."""
    c = CFGS["req"]
    sh = np.full(48, 9)
    sh[16:32] = np.arange(16) % 4 + 5      # only block 1 differs
    lo = _case(c, 16, 48, 6, 3, 1, 1, 1, sh, wmax=3)
    shr = [k for k in lo.trace.kernels if k.mode == "alu" and k.alu_op == int(AluOp.SHR)]
    nob = 3
    assert shr and all(set(np.unique(k.src).tolist()) == {nob + 1} for k in shr)


def _worst(cfg, o, kk, kmax):
    """Weights all 127, inputs all -128 (the largest |acc|): channel 0 shifted ``kmax``
    left by the alignment."""
    x = np.full((1, 16, 3, 3), -128, np.int8)
    w = np.full((o, 16, kk, kk), 127, np.int8)
    sh = np.full(o, 20)
    sh[0] = 20 - kmax
    return x, w, sh


@pytest.mark.parametrize("cfg", REQ_CFGS)
def test_wrap_bound_picks_the_form(cfg):
    """At the largest |acc| (16 x 3 x 3 x 127 x 128 = 2,340,864 < 2**22): a lift of 9 bits
    still fits 31 (aligned), 10 does not (ADD, SHR, clip REQ); both bit-exact."""
    c = CFGS[cfg]
    b = np.zeros(16, np.int32)
    for kmax, aligned in ((9, True), (10, False)):
        x, w, sh = _worst(c, 16, 3, kmax)
        attrs = _pc_attrs(3, 1, 1, 1, sh)
        _, pcq = channel_requant(c, "w", attrs, 16)
        assert (channel_align(c, w, b, attrs, pcq) is not None) == aligned
        lo = _case(c, 16, 16, 3, 3, 1, 1, 1, sh, x=x, w=w, b=b)
        ops = {op for op, _, rst in _ops(lo) if not rst}
        assert (int(AluOp.ADD) in ops) == (not aligned)
        assert int(AluOp.REQ) in ops or aligned
        assert int(AluOp.MAX) not in ops and int(AluOp.MIN) not in ops


@pytest.mark.parametrize("cfg", REQ_CFGS)
def test_wide_shift_spread_falls_back_exactly(cfg):
    """Shifts over [-3, 20] with full-range weights: not aligned; ADD bias, tensor SHR and
    a clip-only REQ (no MAX/MIN), bit-exact."""
    c = CFGS[cfg]
    sh = np.random.default_rng(3).integers(-3, 21, 40)
    sh[0], sh[1] = 0, 20
    lo = _case(c, 32, 40, 7, 3, 1, 1, 1, sh, seed=3)
    ops = _ops(lo)
    assert (int(AluOp.ADD), False, False) in ops and (int(AluOp.SHR), False, False) in ops
    assert (int(AluOp.REQ), True, False) in ops
    assert int(AluOp.MAX) not in {op for op, _, _ in ops}


def test_aligned_takes_the_engine_forms():
    """On the REQ engine core an aligned per-channel conv takes the forms built around the
    engine's REQ (per-step REQs / streamed steps, the bank split) as the scalar one does
    (the depthwise conv tiled by several output blocks, ``tile_span=False``: the default
    tiles one block each, whose last tile is one step)."""
    c = CFGS["eng"]
    dw = _case(c, 128, 128, 14, 3, 1, 1, 128, _spread(128, 4), wmax=3,
               options=ConvOptions(tile_span=False)).trace.stats
    c10 = _case(c, 256, 512, 14, 1, 2, 0, 1, _spread(512, 5), wmax=3).trace.stats
    assert dw["step_req"] or dw["stream_steps"]
    assert c10["bank_split"]


def test_non_req_cores_keep_the_tensor_shr_sequence():
    """Without ``ALU_REQUANT`` nothing changes: ADD, SHR by rows, MAX, MIN."""
    lo = _case(CFGS["pynq"], 16, 32, 8, 3, 1, 1, 1, _spread(32, 1), wmax=3)
    ops = {op for op, _, rst in _ops(lo) if not rst}
    assert ops == {int(AluOp.ADD), int(AluOp.SHR), int(AluOp.MAX), int(AluOp.MIN)}


@pytest.mark.rtl
@pytest.mark.parametrize("eng", [False, True], ids=("req", "req_engine"))
def test_aligned_per_channel_on_rtl(eng):
    """The aligned form on the Verilated tiny core with ``ALU_REQUANT`` (and the REQ
    engine): the left-shifting tensor SHR and the clearing REQ agree with the reference."""
    rtl = pytest.importorskip("vtaforge.runtime.rtl")
    cfg = preset("tiny").replace(ALU_REQUANT=True, REQ_ENGINE=eng)
    dev = rtl.RtlDevice(cfg, 16 << 20, progress=False)
    try:
        for args, seed in (((8, 12, 6, 3, 1, 1, 1), 4), ((8, 8, 5, 3, 2, 1, 8), 5)):
            lo = _case(cfg, *args, _spread(args[1], seed), seed=seed, wmax=3)
            # the same program on the RTL core
            rng = np.random.default_rng(seed)
            x = rng.integers(-128, 128, (1, args[0], args[2], args[2])).astype(np.int8)
            np.testing.assert_array_equal(_run(cfg, lo, x, dev), _run(cfg, lo, x))
            assert (int(AluOp.REQ), False, True) in _ops(lo)
    finally:
        dev.close()
