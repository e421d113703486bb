"""Unit tests of small core components in the Amaranth simulator, against independent
oracles: token queues, the ALU lane function (numpy oracle), the DSP-packed multiplier pair
(exhaustive pure-integer model + simulation), LUT multipliers, the burst-split rule and the
AXI4-Lite register handshake."""

from __future__ import annotations

import numpy as np
import pytest
from amaranth.hdl import Module, signed
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out
from amaranth.sim import Simulator

from vtaforge.hw import regs as regmap
from vtaforge.hw.config import preset
from vtaforge.hw.core.axi import AXILiteRegs, burst_beats
from vtaforge.hw.core.compute import (PACK_SHIFT, AluLane, PackedMulPair, lut_multiply,
                                      packed_pair_model)
from vtaforge.hw.core.queues import TokenQueue
from vtaforge.hw.isa import AluOp


def run_comb(dut, bench):
    sim = Simulator(dut)
    sim.add_testbench(bench)
    sim.run()


def run_clocked(dut, bench):
    sim = Simulator(dut)
    sim.add_clock(1e-8)
    sim.add_testbench(bench)
    sim.run()


# ------------------------------------------------------------------ token queue
def test_token_queue_counts_and_capacity():
    dut = TokenQueue(2)
    seen = []

    async def bench(ctx):
        async def step(push, pop, clear=0):
            ctx.set(dut.push, push)
            ctx.set(dut.pop, pop)
            ctx.set(dut.clear, clear)
            await ctx.tick()
            seen.append((ctx.get(dut.count), ctx.get(dut.nonempty), ctx.get(dut.has_room)))
        await step(1, 0)
        await step(1, 0)
        await step(1, 0)      # full: saturates
        await step(1, 1)      # push and pop together: unchanged
        await step(0, 1)
        await step(0, 1)
        await step(0, 1)      # empty: stays 0
        await step(1, 0)
        await step(0, 0, clear=1)
    run_clocked(dut, bench)
    assert seen == [(1, 1, 1), (2, 1, 0), (2, 1, 0), (2, 1, 0), (1, 1, 1), (0, 0, 1),
                    (0, 0, 1), (1, 1, 1), (0, 0, 1)]


def test_token_queue_rejects_bad_capacity():
    import gc
    import warnings

    from amaranth.hdl import UnusedElaboratable

    with warnings.catch_warnings():
        # the half-built component is never elaborated: collect it here, silently
        warnings.simplefilter("ignore", UnusedElaboratable)
        with pytest.raises(ValueError, match="positive integer"):
            TokenQueue(0)
        gc.collect()


# ------------------------------------------------------------------ ALU lane
def alu_oracle(op, a, b, bits, log_bits):
    """Independent oracle with Python ints."""
    m = 1 << bits

    def wrap(x):
        x %= m
        return x - m if x >= m // 2 else x
    if op == AluOp.MIN:
        return min(a, b)
    if op == AluOp.MAX:
        return max(a, b)
    if op == AluOp.ADD:
        return wrap(a + b)
    if op == AluOp.MUL:
        return wrap(a * b)
    sb = log_bits + 1
    s = b & ((1 << sb) - 1)
    if s >= 1 << (sb - 1):
        s -= 1 << sb
    return a >> s if s >= 0 else wrap(a << -s)


def req_oracle(a, b, imm, bits, log_bits):
    """ALU REQ with Python ints: MIN(MAX(SHR(ADD(a, b), shift), lo), hi), the fields of
    ``imm`` decoded here by hand (bits [5:0] shift; bit 6 set: lo = 0, else bit 7 set:
    lo = -8, else -128 (bits 7:6 = 11 is reserved: the verifier refuses it, the lane takes
    lo = 0); [15:8] hi)."""
    u = imm & 0xFFFF
    shift = (u & 63) - 64 if u & 32 else u & 63
    lo = 0 if u >> 6 & 1 else (-8 if u >> 7 & 1 else -128)
    hi = (u >> 8) - 256 if u >> 15 else u >> 8
    t = alu_oracle(AluOp.SHR, alu_oracle(AluOp.ADD, a, b, bits, log_bits), shift, bits,
                   log_bits)
    return min(max(t, lo), hi)


@pytest.mark.parametrize("acc_log", [5, 4])
def test_alu_lane_matches_oracle(acc_log):
    cfg = preset("tiny").replace(LOG_ACC_WIDTH=acc_log, ALU_MUL=True, ALU_REQUANT=True)
    bits = cfg.ACC_WIDTH
    dut = AluLane(cfg)
    rng = np.random.default_rng(acc_log)
    lo, hi = -(1 << (bits - 1)), (1 << (bits - 1)) - 1
    edge = [lo, lo + 1, -1, 0, 1, hi - 1, hi, 31, 32, 33, -31, -32, -33, 15, 16, -16, -17,
            -9, -8, -7, 7, 8]
    vals = [(a, b) for a in edge for b in edge]
    vals += [tuple(int(v) for v in rng.integers(lo, hi + 1, 2)) for _ in range(60)]
    vals += [(int(rng.integers(lo, hi + 1)), int(rng.integers(-40, 40))) for _ in range(60)]
    bad = []

    async def bench(ctx):
        for op in (AluOp.MIN, AluOp.MAX, AluOp.ADD, AluOp.SHR, AluOp.MUL):
            ctx.set(dut.op, int(op))
            for a, b in vals:
                ctx.set(dut.a, a)
                ctx.set(dut.b, b)
                got = ctx.get(dut.res)
                exp = alu_oracle(op, a, b, bits, cfg.LOG_ACC_WIDTH)
                if got != exp:
                    bad.append((op.name, a, b, got, exp))
        # REQ: every lower bound (bits 7:6: -128, 0, -8; 11 reserved, which the verifier
        # refuses), upper bounds at the edges and inside, hi < lo, shifts both ways
        ctx.set(dut.op, int(AluOp.REQ))
        his = [-128, -127, -9, -8, -7, -1, 0, 1, 5, 7, 100, 126, 127]
        imms = [(sh & 63) | (relu << 6) | (b7 << 7) | ((hi & 255) << 8)
                for sh in (0, 1, 7, 31, -1, -3, -32) for relu in (0, 1) for hi in his
                for b7 in (0, 1) if not (relu and b7) or sh == 7]
        for imm in imms:
            ctx.set(dut.imm, imm)
            for a, b in vals[::3]:
                ctx.set(dut.a, a)
                ctx.set(dut.b, b)
                got = ctx.get(dut.res)
                exp = req_oracle(a, b, imm, bits, cfg.LOG_ACC_WIDTH)
                if got != exp:
                    bad.append(("REQ", hex(imm), a, b, got, exp))
    run_comb(dut, bench)
    assert not bad, bad[:10]


# ------------------------------------------------------------------ DSP packing
def test_packed_pair_model_exhaustive_int8():
    """Every (a, w_lo, w_hi) in int8^3: the packed product unpacks to both exact products.
    Vectorised with int64 numpy in the same arithmetic as packed_pair_model."""
    a = np.arange(-128, 128, dtype=np.int64)
    w = np.arange(-128, 128, dtype=np.int64)
    A, WL = np.meshgrid(a, w, indexing="ij")
    for wh in range(-128, 128):
        p = ((wh << PACK_SHIFT) + WL) * A
        lo = p & ((1 << PACK_SHIFT) - 1)
        lo = np.where(lo >> (PACK_SHIFT - 1) != 0, lo - (1 << PACK_SHIFT), lo)
        hi = (p >> PACK_SHIFT) + ((p >> (PACK_SHIFT - 1)) & 1)
        assert np.array_equal(lo, A * WL)
        assert np.array_equal(hi, A * wh)
    # the packed operand fits the DSP48E1 25-bit A port and P fits 48 bits
    assert (127 << PACK_SHIFT) + 127 < 1 << 24 and (-128 << PACK_SHIFT) - 128 >= -(1 << 24)
    assert max(abs(x * y) for x in (-128, 127) for y in (-128, 127)) < 1 << (PACK_SHIFT - 1)
    assert packed_pair_model(-128, -128, -128) == (16384, 16384)


def test_packed_pair_hardware_matches_products():
    dut = PackedMulPair()
    rng = np.random.default_rng(7)
    edge = [-128, -127, -1, 0, 1, 126, 127]
    cases = [(a, l, h) for a in edge for l in edge for h in edge]
    cases += [tuple(int(v) for v in rng.integers(-128, 128, 3)) for _ in range(400)]
    bad = []

    async def bench(ctx):
        for a, l, h in cases:
            ctx.set(dut.a, a)
            ctx.set(dut.w_lo, l)
            ctx.set(dut.w_hi, h)
            got = (ctx.get(dut.p_lo), ctx.get(dut.p_hi))
            if got != (a * l, a * h):
                bad.append((a, l, h, got))
    run_comb(dut, bench)
    assert not bad, bad[:10]


class _LutMul(wiring.Component):
    def __init__(self):
        super().__init__({"a": In(signed(8)), "w": In(signed(8)), "p": Out(signed(16))})

    def elaborate(self, platform):
        m = Module()
        m.d.comb += self.p.eq(lut_multiply(self.a, self.w))
        return m


def test_lut_multiplier_exhaustive_corners_and_random():
    dut = _LutMul()
    rng = np.random.default_rng(3)
    cases = [(a, w) for a in (-128, -127, -1, 0, 1, 127) for w in range(-128, 128)]
    cases += [tuple(int(v) for v in rng.integers(-128, 128, 2)) for _ in range(300)]
    bad = []

    async def bench(ctx):
        for a, w in cases:
            ctx.set(dut.a, a)
            ctx.set(dut.w, w)
            if ctx.get(dut.p) != a * w:
                bad.append((a, w, ctx.get(dut.p)))
    run_comb(dut, bench)
    assert not bad, bad[:10]


# ------------------------------------------------------------------ burst split rule
@pytest.mark.parametrize("bb", [4, 8, 16, 64])
def test_burst_split_never_crosses_4k(bb):
    rng = np.random.default_rng(bb)
    for _ in range(300):
        addr = int(rng.integers(0, 1 << 20)) // bb * bb
        left = int(rng.integers(1, 3000))
        total = 0
        while left:
            n = burst_beats(addr, left, bb)
            assert 1 <= n <= 256
            assert addr // 4096 == (addr + n * bb - 1) // 4096
            addr += n * bb
            left -= n
            total += n
    # a burst that ends exactly at the boundary is not split (BR-26 a)
    assert burst_beats(0x0FC0, 8, 8) == 8


# ------------------------------------------------------------------ AXI4-Lite slave
def test_axi_lite_register_handshake():
    cfg = preset("tiny")
    dut = AXILiteRegs(cfg)
    log = {}

    async def write(ctx, addr, data, aw_first=False):
        ctx.set(dut.s_axi_awaddr, addr)
        ctx.set(dut.s_axi_wdata, data)
        ctx.set(dut.s_axi_wstrb, 0xF)
        ctx.set(dut.s_axi_awvalid, 1)
        if aw_first:
            await ctx.tick()
            assert not ctx.get(dut.s_axi_awready)  # waits for W
        ctx.set(dut.s_axi_wvalid, 1)
        start = 0
        for _ in range(10):
            ok = ctx.get(dut.s_axi_awready) and ctx.get(dut.s_axi_wready)
            start |= ctx.get(dut.start)
            await ctx.tick()
            if ok:
                break
        ctx.set(dut.s_axi_awvalid, 0)
        ctx.set(dut.s_axi_wvalid, 0)
        ctx.set(dut.s_axi_bready, 1)
        for _ in range(10):
            if ctx.get(dut.s_axi_bvalid):
                assert ctx.get(dut.s_axi_bresp) == 0
                await ctx.tick()
                break
            await ctx.tick()
        ctx.set(dut.s_axi_bready, 0)
        return start

    async def read(ctx, addr):
        ctx.set(dut.s_axi_araddr, addr)
        ctx.set(dut.s_axi_arvalid, 1)
        for _ in range(10):
            ok = ctx.get(dut.s_axi_arready)
            await ctx.tick()
            if ok:
                break
        ctx.set(dut.s_axi_arvalid, 0)
        ctx.set(dut.s_axi_rready, 1)
        for _ in range(10):
            if ctx.get(dut.s_axi_rvalid):
                v = ctx.get(dut.s_axi_rdata)
                await ctx.tick()
                ctx.set(dut.s_axi_rready, 0)
                return v
            await ctx.tick()
        raise AssertionError("no read response")

    async def bench(ctx):
        ctx.set(dut.cycles, 0x1_2345_6789)
        ctx.set(dut.cnt_gemm_count, 77)
        await write(ctx, regmap.offset("INSN_COUNT"), 1234)
        await write(ctx, regmap.offset("INSN_ADDR_LO"), 0xDEAD0000, aw_first=True)
        log["count"] = await read(ctx, regmap.offset("INSN_COUNT"))
        log["addr"] = await read(ctx, regmap.offset("INSN_ADDR_LO"))
        log["fp"] = await read(ctx, regmap.offset("FINGERPRINT"))
        log["ver"] = await read(ctx, regmap.offset("VERSION"))
        log["cyc_hi"] = await read(ctx, regmap.offset("CYCLES_HI"))
        log["gemm"] = await read(ctx, regmap.offset("GEMM_COUNT"))
        log["unmapped"] = await read(ctx, 0xFC)
        log["start"] = await write(ctx, regmap.offset("CTRL"), 0b11)
        log["ctrl"] = await read(ctx, regmap.offset("CTRL"))
        # completion raises IRQ_STATUS and the irq line (IRQ_EN set); W1C clears it
        ctx.set(dut.set_irq, 1)
        await ctx.tick()
        ctx.set(dut.set_irq, 0)
        log["irq"] = ctx.get(dut.irq)
        log["irq_status"] = await read(ctx, regmap.offset("IRQ_STATUS"))
        await write(ctx, regmap.offset("IRQ_STATUS"), 1)
        log["irq_after"] = (ctx.get(dut.irq), await read(ctx, regmap.offset("IRQ_STATUS")))

    run_clocked(dut, bench)
    assert log["count"] == 1234 and log["addr"] == 0xDEAD0000
    assert log["fp"] == cfg.fingerprint and log["ver"] == regmap.REGMAP_VERSION
    assert log["cyc_hi"] == 1 and log["gemm"] == 77 and log["unmapped"] == 0
    assert log["start"] == 1
    assert log["ctrl"] == 0b10  # START reads back 0, IRQ_EN 1
    assert log["irq"] == 1 and log["irq_status"] == 1
    assert log["irq_after"] == (0, 0)
