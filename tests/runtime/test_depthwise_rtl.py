"""The depthwise GEMM (``DEPTHWISE_TAPS``) in the generated core against fsim, bit for bit:
random programs mixing depthwise and ordinary GEMMs, resets, ALU ops, loop factors and
back-to-back micro-ops on one destination (stage D's forwarding), the whole accumulator
read back through four stores (OUT, then shifted right by 8, 16, 24); and a last tap out of
range, which both report as the same fault (kind, index, instruction).  fsim's depthwise
semantics are checked against a numpy oracle in test_depthwise_gemm.py.

One core is built: ``tiny`` with ``DEPTHWISE_TAPS = 3`` (minutes, cached on disk).  The
tap scratchpad is also checked alone, in Amaranth's simulator, against a Python list."""

from __future__ import annotations

import numpy as np
import pytest

from programs import Image, MemType, acc_bytes, alu, finish, gemm, ld, st
from vtaforge.hw.config import preset
from vtaforge.hw.isa import AluOp, encode_uops
from vtaforge.hw.regs import ErrorKind
from vtaforge.runtime.device import ProgramError
from vtaforge.runtime.fsim import simulate

UOP, INP, WGT, ACC = MemType.UOP, MemType.INP, MemType.WGT, MemType.ACC
CFG = preset("tiny").replace(DEPTHWISE_TAPS=3)
N_INP, N_WGT, N_ACC = 48, 8, 32


@pytest.fixture(scope="module")
def rtl():
    return pytest.importorskip("vtaforge.runtime.rtl")


def _uops(rng, n, same_dst, dw):
    """``n`` random micro-ops (dst, src, wgt); ``same_dst``: all on one destination."""
    d0 = int(rng.integers(0, 8))
    span = N_INP - 20 - (CFG.DEPTHWISE_TAPS - 1 if dw else 0)
    return [(d0 if same_dst else int(rng.integers(0, 8)), int(rng.integers(0, span)),
             int(rng.integers(0, N_WGT - 3))) for _ in range(n)]


def random_dw_program(rng):
    """A legal random program: loads, a random sequence of depthwise GEMMs, ordinary GEMMs,
    GEMM resets and ALU ops on one ACC window, then the whole window stored four times
    (shifted right by 8 more each time).  Returns ``(dram, insn_addr, insn_count)``."""
    cfg = CFG
    im = Image(cfg)
    B, BO = cfg.BATCH, cfg.BLOCK_OUT
    x = rng.integers(-128, 128, (N_INP, B, BO)).astype("<i1")
    x[:2] = -128                                    # the extreme product, -128 * -128
    w = rng.integers(-128, 128, (N_WGT, BO, BO)).astype("<i1")
    w[0] = -128
    acc0 = rng.integers(-2**20, 2**20, (N_ACC, B, BO))
    ax, aw, aa = im.put(x), im.put(w), im.put(acc_bytes(cfg, acc0))
    ao = [im.zeros(N_ACC * cfg.elem_bytes(MemType.OUT)) for _ in range(4)]
    uops, body = [], []

    def nest(kind, dw):
        n = int(rng.integers(1, 5))
        bgn = len(uops)
        uops.extend(_uops(rng, n, rng.random() < 0.4, dw))
        I, J = int(rng.integers(1, 3)), int(rng.integers(1, 4))
        d = (int(rng.integers(0, 4)) * 4, int(rng.integers(0, 3)))    # dst <= 7+12+4 < 32
        s = (int(rng.integers(0, 6)), int(rng.integers(0, 4)))        # src <= span+5+6
        if kind == "gemm":
            f = dict(w=(int(rng.integers(0, 2)), int(rng.integers(0, 2))))
            body.append(gemm(bgn, bgn + n, I, J, d=d, s=s, depthwise=int(dw),
                             reset=int(rng.random() < 0.15), **f))
        else:
            op = [AluOp.ADD, AluOp.MAX, AluOp.MIN, AluOp.SHR][int(rng.integers(0, 4))]
            use_imm = rng.random() < 0.5
            imm = int(rng.integers(-4, 5)) if op == AluOp.SHR else int(rng.integers(-99, 99))
            # tensor sources in the ACC window
            for k in range(bgn, bgn + n):
                uops[k] = (uops[k][0], int(rng.integers(0, 8)), 0)
            body.append(alu(op, bgn, bgn + n, I, J, d=d, s=(s[0] % 4, s[1] % 3),
                            imm=imm if use_imm else None))

    for _ in range(int(rng.integers(6, 12))):
        r = rng.random()
        nest("gemm" if r < 0.8 else "alu", r < 0.55)
    d, s, k = (np.array([u[c] for u in uops]) for c in range(3))
    au = im.put(encode_uops(cfg, d, s, k).astype("<u4"))
    shr = len(uops)
    au2 = im.put(encode_uops(cfg, np.array([0]), np.array([0]), np.array([0])).astype("<u4"))
    insns = [ld(INP, 0, im.base(ax, INP), 1, N_INP),
             ld(WGT, 0, im.base(aw, WGT), 1, N_WGT, push_next=1),
             ld(UOP, 0, im.base(au, UOP), 1, len(uops)),
             ld(UOP, shr, im.base(au2, UOP), 1, 1),
             ld(ACC, 0, im.base(aa, ACC), 1, N_ACC)]
    body[0].pop_prev = 1
    body[-1].push_next = 1
    insns += body
    for q in range(4):
        insns.append(st(0, im.base(ao[q], MemType.OUT), 1, N_ACC, pop_prev=1, push_prev=1))
        if q < 3:   # everything >> 8 more
            insns.append(alu(AluOp.SHR, shr, shr + 1, N_ACC, 1, d=(1, 0), s=(1, 0), imm=8,
                             pop_next=1, push_next=1))
    insns.append(finish(pop_next=1))
    return im.build(insns)


@pytest.mark.rtl
@pytest.mark.slow
def test_random_depthwise_programs_match_fsim(rtl):
    rng = np.random.default_rng(2026)
    for trial in range(8):
        dram, ia, n = random_dw_program(rng)
        ref = dram.copy()
        simulate(CFG, ref, ia, n)
        got = dram.copy()
        kw = {} if trial % 2 == 0 else {"latency": (0, 5), "backpressure": 0.3, "seed": trial}
        res = rtl.run_raw(CFG, got, ia, n, progress=False, timeout_cycles=500_000, **kw)
        diff = np.flatnonzero(got != ref)
        assert diff.size == 0, (trial, diff[:8], got[diff[:8]], ref[diff[:8]])
        assert res.cycles > 0


def _fault_program(src0, sfo, iter_out):
    """One depthwise GEMM micro-op (dst 0, src ``src0``, wgt 0) in an ``iter_out`` loop of
    source factor ``sfo``, over INP loaded at the top of the buffer."""
    cfg = CFG
    im = Image(cfg)
    B, BO, depth = cfg.BATCH, cfg.BLOCK_OUT, cfg.INP_DEPTH
    x = np.arange(16 * B * BO).reshape(16, B, BO).astype("<i1")
    ax = im.put(x)
    aw = im.put(np.ones((1, BO, BO), "<i1"))
    au = im.put(encode_uops(cfg, np.array([0]), np.array([src0]), np.array([0])).astype("<u4"))
    ao = im.zeros(cfg.elem_bytes(MemType.OUT))
    insns = [ld(INP, depth - 16, im.base(ax, INP), 1, 16),
             ld(WGT, 0, im.base(aw, WGT), 1, 1, push_next=1),
             ld(UOP, 0, im.base(au, UOP), 1, 1),
             gemm(0, 1, 1, 1, reset=1),
             gemm(0, 1, iter_out, 1, s=(sfo, 0), pop_prev=1, push_next=1, depthwise=1),
             st(0, im.base(ao, MemType.OUT), 1, 1, pop_prev=1, push_prev=1),
             finish(pop_next=1)]
    return im.build(insns)


@pytest.mark.rtl
@pytest.mark.slow
@pytest.mark.parametrize("src0,sfo,iters", [(None, 0, 1), ("T-1", 0, 1), ("T+3", 2, 3)])
def test_depthwise_last_tap_fault_matches_fsim(rtl, src0, sfo, iters):
    """``src0`` relative to the depth: the last in-range position (runs), one past it
    (faults on the first micro-op), a loop that steps past the end on its third
    iteration; the RTL's fault (kind, index, instruction) equals fsim's."""
    T, depth = CFG.DEPTHWISE_TAPS, CFG.INP_DEPTH
    s = {None: depth - T, "T-1": depth - T + 1, "T+3": depth - T - 3}[src0]
    dram, ia, n = _fault_program(s, sfo, iters)
    ref, got = dram.copy(), dram.copy()
    if src0 is None:
        simulate(CFG, ref, ia, n)
        rtl.run_raw(CFG, got, ia, n, progress=False, verify=False, timeout_cycles=100_000)
        assert np.array_equal(got, ref)
        return
    with pytest.raises(ProgramError) as ef:
        simulate(CFG, ref, ia, n)
    with pytest.raises(ProgramError) as er:
        rtl.run_raw(CFG, got, ia, n, progress=False, verify=False, timeout_cycles=100_000)
    want_index = s + sfo * (iters - 1) + T - 1      # the last tap of the faulting micro-op
    assert f"src index {want_index} is outside the INP" in str(ef.value)
    assert str(er.value) == str(ef.value)            # fsim names kind, index, instruction
    assert (er.value.kind, er.value.index, er.value.insn_index) == \
        (ErrorKind.INP_SRC, want_index, 4)


def test_tap_scratchpad_reads_consecutive_entries():
    """TapScratchpad (3 taps, 4 banks, 32 entries) in Amaranth's simulator: after random
    writes, a read at every address gives entries a..a+2 (wrapping) and r_data entry a."""
    from amaranth.sim import Simulator

    from vtaforge.hw.core.scratchpad import TapScratchpad

    W, D, T = 12, 32, 3
    dut = TapScratchpad(W, D, T)
    rng = np.random.default_rng(3)
    vals = [int(v) for v in rng.integers(0, 1 << W, D)]
    seen = []

    async def bench(ctx):
        for a, v in enumerate(vals):
            ctx.set(dut.w_en, 1)
            ctx.set(dut.w_addr, a)
            ctx.set(dut.w_data, v)
            await ctx.tick()
        ctx.set(dut.w_en, 0)
        ctx.set(dut.r_en, 1)
        for a in list(range(D)) + [5, 30, 31]:
            ctx.set(dut.r_addr, a)
            await ctx.tick()
            seen.append((a, ctx.get(dut.r_taps), ctx.get(dut.r_data)))

    sim = Simulator(dut)
    sim.add_clock(1e-6)
    sim.add_testbench(bench)
    sim.run()
    for a, taps, r0 in seen:
        want = [vals[(a + t) % D] for t in range(T)]
        assert [(taps >> (W * t)) & ((1 << W) - 1) for t in range(T)] == want, a
        assert r0 == want[0]


@pytest.mark.parametrize("bad", [dict(taps=1, depth=32), dict(taps=3, depth=4),
                                 dict(taps=3, depth=48)])
def test_tap_scratchpad_refuses_bad_geometry(bad):
    from vtaforge.hw.core.scratchpad import TapScratchpad

    with pytest.raises(ValueError, match="tap scratchpad"):
        TapScratchpad(8, bad["depth"], bad["taps"])


def _nest_program(dw, rng):
    """One GEMM nest of 24 random micro-ops (every fourth pair on one destination) in a
    2 x 3 loop, ``depthwise`` = ``dw``, then a STORE; the image is the same for both."""
    cfg = CFG
    im = Image(cfg)
    B, BO = cfg.BATCH, cfg.BLOCK_OUT
    ax = im.put(rng.integers(-128, 128, (N_INP, B, BO)).astype("<i1"))
    aw = im.put(rng.integers(-128, 128, (N_WGT, BO, BO)).astype("<i1"))
    d = rng.integers(0, 8, 24)
    d[1::4] = d[0::4]
    u = encode_uops(cfg, d, rng.integers(0, N_INP - 12, 24), rng.integers(0, N_WGT, 24))
    au = im.put(u.astype("<u4"))
    ao = im.zeros(N_ACC * cfg.elem_bytes(MemType.OUT))
    insns = [ld(INP, 0, im.base(ax, INP), 1, N_INP),
             ld(WGT, 0, im.base(aw, WGT), 1, N_WGT, push_next=1),
             ld(UOP, 0, im.base(au, UOP), 1, 24),
             gemm(0, 24, 1, 1, reset=1),
             gemm(0, 24, 2, 3, d=(8, 0), s=(3, 2), pop_prev=1, push_next=1, depthwise=dw),
             st(0, im.base(ao, MemType.OUT), 1, N_ACC, pop_prev=1, push_prev=1),
             finish(pop_next=1)]
    return im.build(insns)


@pytest.mark.rtl
@pytest.mark.slow
def test_depthwise_nest_takes_as_many_cycles_as_an_ordinary_one(rtl):
    """One micro-op per cycle in steady state: the same nest (144 micro-ops, repeated
    destinations back to back) takes the same core cycles with and without the flag, and
    both results equal fsim's."""
    cycles = []
    for dw in (0, 1):
        dram, ia, n = _nest_program(dw, np.random.default_rng(7))
        ref, got = dram.copy(), dram.copy()
        simulate(CFG, ref, ia, n)
        cycles.append(rtl.run_raw(CFG, got, ia, n, progress=False).cycles)
        assert np.array_equal(got, ref), dw
    assert cycles[0] == cycles[1], cycles


def test_off_verilog_is_byte_identical():
    """``DEPTHWISE_TAPS = 0`` is the core without the option (every preset's Verilog was
    also diffed against the commit before the RTL change: identical, docs/hardware.md)."""
    from vtaforge.hw.config import VTAConfig
    from vtaforge.hw.core import emit_verilog

    tiny = preset("tiny")
    off = emit_verilog(VTAConfig.from_dict({**tiny.to_dict(), "DEPTHWISE_TAPS": 0}))
    assert off == emit_verilog(tiny)
    assert "inp_r_taps" not in off and "inp_r_taps" in emit_verilog(CFG)
