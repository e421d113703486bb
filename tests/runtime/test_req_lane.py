"""Per-lane REQ (config option ``REQ_LANE_SHIFT``, ``hw.isa.req_lane_word``): an ALU REQ
whose shift field is ``REQ_LANE`` (-32) takes each lane's bias and shift from its tensor
operand word, ``bias = word >> 6``, ``shift = sext(word[5:0])``.

Oracle: numpy int64 arithmetic of what the one REQ replaces, per lane (ADD of the bias
wrapping at ACC_WIDTH, SHR by the signed amount under SHR's rule, MAX lo, MIN hi), the
operand words packed here by hand, all written independently of fsim and of the ISA
helpers.  The raw programs run on fsim and on the Verilated core (marker ``rtl``; two core
builds: tiny + ALU_REQUANT + REQ_LANE_SHIFT, whose REQs of several micro-ops run in the
main ALU, and the same with REQ_ENGINE, whose one-micro-op REQs run in the engine); the
ALU lane alone is checked in Amaranth's simulator against the same oracle.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from programs import Image, acc_bytes, alu, finish, ld, read_out, st  # tests/support
from vtaforge.hw import regs
from vtaforge.hw.config import ConfigError, MemType, VTAConfig, preset
from vtaforge.hw.isa import REQ_LANE, AluOp, ISAError, req_imm, req_lane_fields, req_lane_word
from vtaforge.runtime.fsim import simulate

TINY = preset("tiny")
REQ_CFG = TINY.replace(ALU_REQUANT=True)
LANE_CFG = REQ_CFG.replace(REQ_LANE_SHIFT=True)
LANE_ENG_CFG = LANE_CFG.replace(REQ_ENGINE=True)
BIAS_LIM = 1 << 25      # 32-bit accumulator: biases -2**25 .. 2**25 - 1


# ------------------------------------------------------------------ oracle
def _wrap(v, bits):
    m, h = 1 << bits, 1 << (bits - 1)
    return ((np.asarray(v, np.int64) + h) % m) - h


def _shr(t, s, bits, log_bits):
    """SHR's rule: the low ``log_bits + 1`` bits of ``s`` as a signed amount, negative a
    left shift wrapping at ``bits``."""
    k = log_bits + 1
    s = np.asarray(s, np.int64) & ((1 << k) - 1)
    s = np.where(s >= 1 << (k - 1), s - (1 << k), s)
    right = t >> np.maximum(s, 0)
    left = _wrap(t << np.maximum(-s, 0), bits)
    return np.where(s < 0, left, right)


def lane_oracle(a, bias, shift, lo, hi, bits=32, log_bits=5):
    """``MIN(MAX(SHR(ADD(a, bias), shift), lo), hi)`` lane by lane (int64 arrays that
    broadcast)."""
    t = _wrap(np.asarray(a, np.int64) + np.asarray(bias, np.int64), bits)
    return np.minimum(np.maximum(_shr(t, shift, bits, log_bits), lo), hi)


def lane_words(bias, shift, bits=32):
    """The operand words, packed here by hand: ``bias * 64 + (shift mod 64)``, signed
    ``bits``-bit."""
    return _wrap(np.asarray(bias, np.int64) * 64 + (np.asarray(shift, np.int64) % 64), bits)


def lane_imm(lo, hi):
    """The REQ immediate with the shift field -32 (bits [5:0] = 100000), built by hand:
    bits [7:6] the lower bound (-128: 00, 0: 01, -8: 10), [15:8] hi."""
    code = {-128: 0, 0: 1, -8: 2}[lo]
    u = 0b100000 | code << 6 | (hi & 255) << 8
    return u - (1 << 16) if u >> 15 else u


# ------------------------------------------------------------------ encoding and config
def test_lane_imm_is_req_imm_with_shift_req_lane():
    assert REQ_LANE == -32
    for lo, hi in ((-128, 127), (0, 127), (-8, 7), (0, 0), (-8, -8)):
        assert lane_imm(lo, hi) == req_imm(REQ_LANE, lo, hi)


def test_req_lane_word_round_trips():
    rng = np.random.default_rng(0)
    bias = np.concatenate([[-BIAS_LIM, BIAS_LIM - 1, 0, -1, 1],
                           rng.integers(-BIAS_LIM, BIAS_LIM, 200)])
    shift = np.concatenate([[-32, 31, 0, -1, 1], rng.integers(-32, 32, 200)])
    w = req_lane_word(bias, shift)
    np.testing.assert_array_equal(w, lane_words(bias, shift))
    assert w.min() >= -(1 << 31) and w.max() < 1 << 31
    b2, s2 = req_lane_fields(w)
    np.testing.assert_array_equal(b2, bias)
    np.testing.assert_array_equal(s2, shift)
    assert req_lane_word(-3, -5) == -3 * 64 + 59 and isinstance(req_lane_word(-3, -5), int)
    # ACC_WIDTH 16: biases -2**9 .. 2**9 - 1
    assert req_lane_word(511, 31, 16) == 511 * 64 + 31
    assert [int(v) for v in req_lane_fields(req_lane_word(-512, -32, 16))] == [-512, -32]


@pytest.mark.parametrize("bias,shift,acc,msg", [
    (BIAS_LIM, 0, 32, r"per-lane REQ bias 33554432 is out of range; allowed: "
                      r"-33554432..33554431"),
    (-BIAS_LIM - 1, 0, 32, r"bias -33554433 is out of range"),
    (0, 32, 32, r"per-lane REQ shift 32 is out of range; allowed: -32..31"),
    (0, -33, 32, r"shift -33 is out of range"),
    ([0, 5, -BIAS_LIM - 7], [1, 2, 3], 32, r"bias -33554439 is out"),
    ([0, 1], [3, 40], 32, r"shift 40 is out"),
    (512, 0, 16, r"bias 512 is out of range; allowed: -512..511"),
])
def test_req_lane_word_refuses_what_it_cannot_hold(bias, shift, acc, msg):
    with pytest.raises(ISAError, match=msg):
        req_lane_word(bias, shift, acc)


def test_req_lane_word_names_the_bad_value_beside_a_valid_extreme():
    with pytest.raises(ISAError, match=r"bias 33554432 is out"):
        req_lane_word([-BIAS_LIM, BIAS_LIM], [0, 0])
    with pytest.raises(ISAError, match=r"shift 32 is out"):
        req_lane_word([0, 0], [-32, 32])


def test_config_header_and_fingerprint():
    assert VTAConfig.from_dict({**REQ_CFG.to_dict(), "REQ_LANE_SHIFT": False}) == REQ_CFG
    assert "REQ_LANE_SHIFT" not in REQ_CFG.to_dict()
    assert LANE_CFG.to_dict()["REQ_LANE_SHIFT"] is True
    assert LANE_CFG.fingerprint != REQ_CFG.fingerprint
    assert "#define VTA_REQ_LANE_SHIFT 1" in regs.c_header(LANE_CFG)
    assert "REQ_LANE_SHIFT" not in regs.c_header(REQ_CFG)
    with pytest.raises(ConfigError, match=r"REQ_LANE_SHIFT = true needs ALU_REQUANT = true"):
        TINY.replace(REQ_LANE_SHIFT=True)
    with pytest.raises(ConfigError, match=r"REQ_LANE_SHIFT = 1 must be a boolean"):
        REQ_CFG.replace(REQ_LANE_SHIFT=1)


def test_option_off_is_the_same_verilog():
    core = pytest.importorskip("vtaforge.hw.core")
    for cfg in (REQ_CFG, REQ_CFG.replace(REQ_ENGINE=True)):
        off = VTAConfig.from_dict({**cfg.to_dict(), "REQ_LANE_SHIFT": False})
        v = core.emit_verilog(off)
        assert v == core.emit_verilog(cfg)
        assert v != core.emit_verilog(cfg.replace(REQ_LANE_SHIFT=True))


# ------------------------------------------------------------------ the ALU lane alone
@pytest.mark.parametrize("acc_log", [5, 4])
def test_alu_lane_per_lane_req_matches_oracle(acc_log):
    """:class:`AluLane` (hw/core/compute.py) in Amaranth's simulator: per-lane REQs over
    random and extreme words and every lower bound; a REQ with another shift, SHR and ADD
    unchanged; on a core without the option a shift of -32 is SHR's left shift by 32."""
    from amaranth.sim import Simulator

    from vtaforge.hw.core.compute import AluLane

    cfg = REQ_CFG.replace(LOG_ACC_WIDTH=acc_log)
    bits = cfg.ACC_WIDTH
    blim = 1 << (bits - 7)
    rng = np.random.default_rng(acc_log)
    amin, amax = -(1 << (bits - 1)), (1 << (bits - 1)) - 1
    cases = [(a, b, s) for a in (amin, amax, 0, -1, 1000) for b in (-blim, blim - 1, 0, -1)
             for s in (-32, 31, 0, -1, 1, -16, 15)]
    cases += [(int(rng.integers(amin, amax + 1)), int(rng.integers(-blim, blim)),
               int(rng.integers(-32, 32))) for _ in range(150)]
    clips = ((-128, 127), (0, 127), (-8, 7), (0, 5), (-8, -8), (-128, -100))
    results = {}

    def bench_for(dut, lane_core):
        async def bench(ctx):
            ctx.set(dut.op, int(AluOp.REQ))
            for lo, hi in clips:
                ctx.set(dut.imm, lane_imm(lo, hi) & 0xFFFF)
                for a, bias, s in cases:
                    ctx.set(dut.a, a)
                    ctx.set(dut.b, int(lane_words(bias, s, bits)))
                    results[(lane_core, "lane", lo, hi, a, bias, s)] = ctx.get(dut.res)
            ctx.set(dut.imm, req_imm(3, 0, 127) & 0xFFFF)
            for a, b, _ in cases[::3]:
                ctx.set(dut.a, a)
                ctx.set(dut.b, b)
                results[(lane_core, "req3", a, b)] = ctx.get(dut.res)
            for op in (AluOp.SHR, AluOp.ADD):
                ctx.set(dut.op, int(op))
                for a, _, s in cases[::3]:
                    ctx.set(dut.a, a)
                    ctx.set(dut.b, s)
                    results[(lane_core, op, a, s)] = ctx.get(dut.res)
        return bench

    for lane_core in (True, False):
        dut = AluLane(cfg.replace(REQ_LANE_SHIFT=lane_core))
        sim = Simulator(dut)
        sim.add_testbench(bench_for(dut, lane_core))
        sim.run()
    bad = []
    for key, got in results.items():
        core, kind = key[0], key[1]
        if kind == "lane":
            _, _, lo, hi, a, bias, s = key
            word = int(lane_words(bias, s, bits))
            # without the option: an ordinary REQ by -32 of a + word
            exp = (lane_oracle(a, bias, s, lo, hi, bits, acc_log) if core
                   else lane_oracle(a, word, -32, lo, hi, bits, acc_log))
        elif kind == "req3":
            _, _, a, b = key
            exp = lane_oracle(a, b, 3, 0, 127, bits, acc_log)
        elif kind == AluOp.SHR:
            _, _, a, s = key
            exp = _shr(np.int64(a), s, bits, acc_log)
        else:
            _, _, a, s = key
            exp = _wrap(a + s, bits)
        if got != int(exp):
            bad.append((key, got, int(exp)))
    assert not bad, bad[:10]


# ------------------------------------------------------------------ programs
N = 24   # entries per operand region


def _req(bgn, end, imm, tensor, **kw):
    ins = alu(AluOp.REQ, bgn, end, imm=None if tensor else 0, **kw)
    return dataclasses.replace(ins, imm=imm)


def lane_program(cfg, rng, steps, *, a_range=None):
    """acc[0:N] = a; then per step an ALU REQ of N micro-ops over acc[0:N], back to back,
    each over the previous result (the hazard path of the main ALU).  A step is
    ``("lane", lo, hi, rows, bias_range, shifts)`` (its words at acc[W:W+K], K = N //
    rows, entry i reading word W + i // rows; ``bias_range``/``shifts`` a ``(lo, hi)``
    range or a list to draw from), ``("clip", lo, hi)`` (the lane form with use_imm: the
    clip alone), ``("req", shift, lo, hi)`` (an ordinary tensor REQ on a fresh operand
    region) or ``("add", imm)`` (ALU ADD imm on the previous lane step's words, which the
    next lane step with ``rows = 0`` reads: a source written just before).  STORE
    acc[0:N].  Returns ``(dram, insn_addr, count, out_addr, want)``."""
    lanes = cfg.BATCH * cfg.BLOCK_OUT
    bits = cfg.ACC_WIDTH
    lo_a, hi_a = a_range or (-(1 << 31), 1 << 31)
    a = rng.integers(lo_a, hi_a, (N, lanes))
    a[:6] = rng.integers(-3000, 3000, (6, lanes))      # some values that land inside the clip
    img = Image(cfg)
    a_addr = img.put(acc_bytes(cfg, a))
    out_addr = img.zeros(N * cfg.elem_bytes(MemType.OUT))
    want = a.astype(np.int64)
    insns = [ld(MemType.ACC, 0, img.base(a_addr, MemType.ACC), 1, N)]
    uop_at, acc_at = 0, N
    last = None     # (words' first entry, K, rows, bias, shift) of the previous lane step

    def pick(spec, shape):
        if isinstance(spec, tuple):
            return rng.integers(spec[0], spec[1], shape)
        return rng.choice(np.asarray(spec, np.int64), shape)

    def uop_insn(src):
        nonlocal uop_at
        ua = img.uops(np.arange(N), src)
        insns.append(ld(MemType.UOP, uop_at, img.base(ua, MemType.UOP), 1, N))
        uop_at += N
        return uop_at - N

    for step in steps:
        kind = step[0]
        if kind == "lane":
            _, lo, hi, rows, brange, shifts = step
            if rows == 0:       # the previous lane step's words, as the ADD left them
                w0, k, rows, bias, shift = last
            else:
                k = N // rows
                bias, shift = pick(brange, (k, lanes)), pick(shifts, (k, lanes))
                w0 = acc_at
                wa = img.put(acc_bytes(cfg, lane_words(bias, shift, bits)))
                insns.append(ld(MemType.ACC, w0, img.base(wa, MemType.ACC), 1, k))
                acc_at += k
            u = uop_insn(w0 + np.arange(N) // rows)
            insns.append(_req(u, u + N, lane_imm(lo, hi), True))
            rep = np.arange(N) // rows
            want = lane_oracle(want, bias[rep], shift[rep], lo, hi, bits, cfg.LOG_ACC_WIDTH)
            last = (w0, k, rows, bias, shift)
        elif kind == "clip":
            _, lo, hi = step
            u = uop_insn(np.arange(N))
            insns.append(_req(u, u + N, lane_imm(lo, hi), False))
            want = np.minimum(np.maximum(want, lo), hi)
        elif kind == "req":
            _, shift, lo, hi = step
            b = rng.integers(-(1 << 20), 1 << 20, (N, lanes))
            ba = img.put(acc_bytes(cfg, b))
            insns.append(ld(MemType.ACC, acc_at, img.base(ba, MemType.ACC), 1, N))
            u = uop_insn(acc_at + np.arange(N))
            acc_at += N
            insns.append(_req(u, u + N, req_imm(shift, lo, hi), True))
            want = lane_oracle(want, b, shift, lo, hi, bits, cfg.LOG_ACC_WIDTH)
        else:       # "add": imm on the previous lane step's words
            _, imm = step
            w0, k, rows, bias, shift = last
            ua = img.uops(w0 + np.arange(k), w0 + np.arange(k))
            insns.append(ld(MemType.UOP, uop_at, img.base(ua, MemType.UOP), 1, k))
            insns.append(alu(AluOp.ADD, uop_at, uop_at + k, imm=imm))
            uop_at += k
            words = lane_words(bias, shift, bits) + imm
            bias, shift = words >> 6, ((words & 63) ^ 32) - 32
            last = (w0, k, rows, bias, shift)
    insns[-1] = dataclasses.replace(insns[-1], push_next=1)     # results ready: to store
    insns += [st(0, img.base(out_addr, MemType.OUT), 1, N, pop_prev=1), finish()]
    dram, ia, n = img.build(insns)
    return dram, ia, n, out_addr, want.reshape(N, cfg.BATCH, cfg.BLOCK_OUT)


FULL = (-BIAS_LIM, BIAS_LIM)
SHIFTS = (-32, 32)
CASES = {
    # per-entry words (no source reuse), biases and shifts over their whole ranges
    "each": [("lane", -128, 127, 1, FULL, SHIFTS)],
    # one word per 4 entries: the source cache's hits; small biases, right shifts
    "rows": [("lane", -128, 127, 4, (-5000, 5000), (0, 12))],
    # left shifts of small values (the clip sees them)
    "left": [("lane", -128, 127, 2, (-64, 64), (-6, 0))],
    "extremes": [("lane", -128, 127, 1, [-BIAS_LIM, BIAS_LIM - 1, 0, -1],
                  [-32, 31, 0, -1, 30, -31])],
    "relu-int4": [("lane", 0, 127, 3, (-20000, 20000), (4, 10)),
                  ("lane", -8, 7, 1, (-300, 300), (-2, 3))],
    "clip-only": [("clip", -8, 5)],
    # back to back: lane, lane, an ordinary REQ, the use_imm form, lane
    "chain": [("lane", -128, 127, 6, (-1 << 20, 1 << 20), (2, 14)),
              ("lane", -128, 127, 1, (-100, 100), (-3, 3)),
              ("req", 2, -128, 127), ("clip", 0, 100),
              ("lane", -8, 7, 24, (-50, 50), (0, 4))],
    # the words written by an ALU ADD just before the lane REQ reads them (bias + 3)
    "written-words": [("lane", -128, 127, 2, (-4000, 4000), (0, 8)), ("add", 3 * 64),
                      ("lane", -128, 127, 0, None, None)],
    # an ordinary REQ on the lane core: unchanged
    "plain-req": [("req", 5, -128, 127), ("req", -3, 0, 127)],
}
CASE_A = {"left": (-1 << 12, 1 << 12), "written-words": (-1 << 16, 1 << 16)}


def fsim_run(cfg, dram, ia, n):
    simulate(cfg, dram, ia, n)


@pytest.fixture(params=["fsim", pytest.param("rtl", marks=pytest.mark.rtl)])
def run(request):
    if request.param == "fsim":
        return fsim_run
    rtl = pytest.importorskip("vtaforge.runtime.rtl")
    models = request.getfixturevalue("rtl_models")
    return lambda cfg, dram, ia, n: rtl.run_raw(cfg, dram, ia, n, progress=False,
                                                model=models(cfg))


@pytest.mark.parametrize("cfg", [LANE_CFG, LANE_ENG_CFG], ids=["lane", "lane+engine"])
@pytest.mark.parametrize("case", list(CASES))
def test_lane_req_main_alu_matches_oracle(run, cfg, case):
    rng = np.random.default_rng(sorted(CASES).index(case))
    dram, ia, n, out_addr, want = lane_program(cfg, rng, CASES[case], a_range=CASE_A.get(case))
    run(cfg, dram, ia, n)
    np.testing.assert_array_equal(read_out(cfg, dram, out_addr, N), want)


def test_shift_minus_32_keeps_shr_meaning_without_the_option():
    """On tiny + ALU_REQUANT (no REQ_LANE_SHIFT) the lane-form immediate is a REQ by -32:
    SHR's left shift by 32, so every sum wraps to 0 and the result is the clip of 0."""
    rng = np.random.default_rng(7)
    lanes = REQ_CFG.BATCH * REQ_CFG.BLOCK_OUT
    for lo, hi in ((-128, 127), (0, 127), (-8, -8)):
        img = Image(REQ_CFG)
        a = rng.integers(-(1 << 31), 1 << 31, (N, lanes))
        b = rng.integers(-(1 << 31), 1 << 31, (N, lanes))
        a_addr = img.put(acc_bytes(REQ_CFG, np.concatenate([a, b])))
        out_addr = img.zeros(N * REQ_CFG.elem_bytes(MemType.OUT))
        ua = img.uops(np.arange(N), N + np.arange(N))
        insns = [ld(MemType.ACC, 0, img.base(a_addr, MemType.ACC), 1, 2 * N),
                 ld(MemType.UOP, 0, img.base(ua, MemType.UOP), 1, N),
                 _req(0, N, lane_imm(lo, hi), True, push_next=1),
                 st(0, img.base(out_addr, MemType.OUT), 1, N, pop_prev=1), finish()]
        dram, ia, n = img.build(insns)
        simulate(REQ_CFG, dram, ia, n)
        got = read_out(REQ_CFG, dram, out_addr, N).reshape(N, lanes)
        want = lane_oracle(a, b, -32, lo, hi)
        np.testing.assert_array_equal(got, want)
        np.testing.assert_array_equal(got, np.full_like(got, min(max(0, lo), hi)))


# ------------------------------------------------------------------ the REQ engine
R, C = 6, 4      # the engine's REQ nest: R rows of C entries, one word row per row
HALF = LANE_ENG_CFG.ACC_DEPTH // 2


def engine_program(cfg, rng):
    """One-micro-op REQs (the engine's kind on a REQ_ENGINE core) over a R x C nest at
    acc[0:R*C], the tensor source one word row per nest row (acc[64 + r]), back to back:
    a clearing lane REQ to OUT (out0: its result; ACC 0 after), then on acc[HALF:...]
    (the second bank) a lane REQ, the use_imm lane form and an ordinary REQ, each over the
    previous result (the engine's own hazards), stored to out1.  Returns ``(dram,
    insn_addr, count, (out0, out1), (want0, want1))``."""
    lanes = cfg.BATCH * cfg.BLOCK_OUT
    bits = cfg.ACC_WIDTH
    a = rng.integers(-(1 << 31), 1 << 31, (R * C, lanes))
    a[:8] = rng.integers(-3000, 3000, (8, lanes))
    g = rng.integers(-(1 << 24), 1 << 24, (R * C, lanes))
    b0, s0 = rng.integers(-BIAS_LIM, BIAS_LIM, (R, lanes)), rng.integers(-32, 32, (R, lanes))
    b0[0], s0[0] = [-BIAS_LIM, BIAS_LIM - 1, 7, -7], [-32, 31, 0, -1]
    b1, s1 = rng.integers(-3000, 3000, (R, lanes)), rng.integers(-4, 12, (R, lanes))
    bp = rng.integers(-1000, 1000, (R, lanes))
    img = Image(cfg)
    a_addr = img.put(acc_bytes(cfg, a))
    g_addr = img.put(acc_bytes(cfg, g))
    w_addr = img.put(acc_bytes(cfg, np.concatenate([lane_words(b0, s0, bits),
                                                    lane_words(b1, s1, bits), bp])))
    outs = [img.zeros(R * C * cfg.elem_bytes(MemType.OUT)) for _ in range(3)]
    u = img.uops([0, HALF, HALF, HALF], [64, 64 + R, HALF, 64 + 2 * R])

    def nest(k, imm, tensor, **kw):
        ins = alu(AluOp.REQ, k, k + 1, R, C, d=(C, 1), s=(1, 0), imm=None if tensor else 0,
                  **kw)
        return dataclasses.replace(ins, imm=imm)

    L = MemType
    insns = [
        ld(L.ACC, 0, img.base(a_addr, L.ACC), 1, R * C),
        ld(L.ACC, HALF, img.base(g_addr, L.ACC), 1, R * C),
        ld(L.ACC, 64, img.base(w_addr, L.ACC), 1, 3 * R),
        ld(L.UOP, 0, img.base(u, L.UOP), 1, 4),
        nest(0, lane_imm(-128, 127), True, reset=1, push_next=1),
        st(0, img.base(outs[0], L.OUT), 1, R * C, pop_prev=1, push_prev=1),
        nest(1, lane_imm(0, 127), True, pop_next=1),
        nest(2, lane_imm(-8, 7), False),
        nest(3, req_imm(1, -128, 127), True, push_next=1),
        st(HALF, img.base(outs[1], L.OUT), 1, R * C, pop_prev=1),
        finish(),
    ]
    dram, ia, n = img.build(insns)
    rep = np.repeat(np.arange(R), C)
    want0 = lane_oracle(a, b0[rep], s0[rep], -128, 127, bits, cfg.LOG_ACC_WIDTH)
    w = lane_oracle(g, b1[rep], s1[rep], 0, 127, bits, cfg.LOG_ACC_WIDTH)
    w = np.minimum(np.maximum(w, -8), 7)
    want1 = lane_oracle(w, bp[rep], 1, -128, 127, bits, cfg.LOG_ACC_WIDTH)
    shape = (R * C, cfg.BATCH, cfg.BLOCK_OUT)
    return dram, ia, n, outs[:2], (want0.reshape(shape), want1.reshape(shape))


def test_engine_program_oracle_fsim():
    dram, ia, n, outs, wants = engine_program(LANE_ENG_CFG, np.random.default_rng(3))
    simulate(LANE_ENG_CFG, dram, ia, n)
    for out, want in zip(outs, wants):
        np.testing.assert_array_equal(read_out(LANE_ENG_CFG, dram, out, R * C), want)


@pytest.mark.rtl
@pytest.mark.parametrize("seed", [3, 4])
def test_engine_program_rtl_matches_oracle_and_fsim(rtl_models, seed):
    """The engine's program on the Verilated core (the REQs of one micro-op run in the
    engine): OUT equals the oracle and the whole DRAM image equals fsim's."""
    rtl = pytest.importorskip("vtaforge.runtime.rtl")
    dram, ia, n, outs, wants = engine_program(LANE_ENG_CFG, np.random.default_rng(seed))
    ref = dram.copy()
    simulate(LANE_ENG_CFG, ref, ia, n)
    rtl.run_raw(LANE_ENG_CFG, dram, ia, n, progress=False, model=rtl_models(LANE_ENG_CFG))
    for out, want in zip(outs, wants):
        np.testing.assert_array_equal(read_out(LANE_ENG_CFG, dram, out, R * C), want)
    np.testing.assert_array_equal(dram, ref)
