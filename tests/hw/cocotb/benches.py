"""cocotb test benches of the generated VTA core (run by test_cocotb_core.py via conftest).

Environment (set by conftest.run_benches): ``VTAFORGE_COCOTB_CONFIG`` (the VTAConfig as
JSON), ``VTAFORGE_COCOTB_BACKPRESSURE`` ("1": random stalls on every AXI channel, both the
DRAM model's and the register master's), ``VTAFORGE_COCOTB_SEED``.

Test environment per bench (:class:`Tb`):

- clock ``clk`` (10 ns), active-high synchronous ``rst`` held for 8 cycles;
- ``AxiLiteMaster`` on ``s_axi_*`` (registers of ``vtaforge.hw.regs``);
- ``AxiRam`` on ``m_axi_*`` as the DRAM (the core has no ID signals: the ID members are
  replaced by an inert stand-in so the model sees ID 0);
- a bus monitor that records every AR/AW handshake and W/R/B beat and checks each burst
  against the AXI4 rules the core must obey: INCR, full-width beats, inside the DRAM image
  and never across a 4 KiB boundary (``(addr % 4096) + (len+1)*beat_bytes <= 4096``), WLAST
  exactly on the last beat;
- a cycle counter; every run has a cycle watchdog (a hang is a named failure naming the
  ``dbg_state`` of each unit), every bench a simulated-time limit.

Expected DRAM images come from the functional simulator
(``vtaforge.runtime.fsim.simulate``) and, for the key cases, from numpy oracles written
here.  A mismatch reports the first differing byte address, both values and the number of
differing bytes.
"""

from __future__ import annotations

import json
import os
import random
import sys
from pathlib import Path

import cocotb
import numpy as np
from cocotb.clock import Clock
from cocotb.triggers import ClockCycles, RisingEdge, with_timeout
from cocotbext.axi import AxiBus, AxiLiteBus, AxiLiteMaster, AxiRam

from vtaforge.hw import regs
from vtaforge.hw.config import MemType, VTAConfig
from vtaforge.hw.isa import AluOp, Insn

# The simulator process gets the pytest process's sys.path as PYTHONPATH; tests/support is
# added here as well, so that the benches also import when run by hand.
sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "support"))
from programs import (A, Image, alu, assert_same_dram, bit, finish,  # noqa: E402
                      fsim_expected, gemm, launch_writes, ld, nop, out_view, st)

CLK_NS = 10
RESET_CYCLES = 8
#: Default run watchdog in cycles (each bench's programs finish far below this).
RUN_WATCHDOG = 200_000

R = {r.name: r.offset for r in regs.REGISTERS}
CTRL_START, CTRL_IRQ_EN = bit("CTRL", "START"), bit("CTRL", "IRQ_EN")
STATUS_BUSY, STATUS_DONE = bit("STATUS", "BUSY"), bit("STATUS", "DONE")


def _cfg() -> VTAConfig:
    return VTAConfig.from_dict(json.loads(os.environ["VTAFORGE_COCOTB_CONFIG"]))


def _backpressure() -> bool:
    return os.environ.get("VTAFORGE_COCOTB_BACKPRESSURE", "0") == "1"


def _seed() -> int:
    return int(os.environ.get("VTAFORGE_COCOTB_SEED", "1"))


# ----------------------------------------------------------------------------- test bed
class _Zero1:
    """A 1-bit zero value (``len`` 1, ``int`` 0)."""

    def __len__(self):
        return 1

    def __int__(self):
        return 0


class _NoSignal:
    """Stand-in for an absent AXI ID signal: width 1, reads 0, ignores writes."""

    value = _Zero1()

    def __len__(self):
        return 1

    def setimmediatevalue(self, v):
        pass


def _axi_bus_without_ids(dut, prefix):
    bus = AxiBus.from_prefix(dut, prefix)
    for ch, name in ((bus.write.aw, "awid"), (bus.write.b, "bid"), (bus.read.ar, "arid"),
                     (bus.read.r, "rid")):
        if getattr(ch, name, None) is None:
            ch._signals.pop(name, None)
            setattr(ch, name, _NoSignal())
    return bus


def _pauses(rng: random.Random, p: float):
    while True:
        # bursts of stalls as well as single-cycle ones
        if rng.random() < p:
            for _ in range(rng.choice((1, 1, 1, 2, 3, 7))):
                yield True
        else:
            yield False


class Tb:
    """The test bed around one ``vta_core`` instance (see module docstring)."""

    def __init__(self, dut, dram_bytes: int = 1 << 18, backpressure: bool | None = None,
                 seed: int | None = None):
        self.dut = dut
        self.cfg = _cfg()
        self.bb = self.cfg.BUS_WIDTH // 8
        self.dram_bytes = dram_bytes
        self.bp = _backpressure() if backpressure is None else backpressure
        self.rng = random.Random(_seed() if seed is None else seed)
        self.cycle = 0
        self.ar: list[tuple[int, int, int, int, int]] = []  # (cycle, addr, len, size, burst)
        self.aw: list[tuple[int, int, int, int, int]] = []
        self.b_cycles: list[int] = []
        self.r_beats = 0
        self.w_beats = 0
        self.violations: list[str] = []
        self.irq_trace: list[int] = []
        cocotb.start_soon(Clock(dut.clk, CLK_NS, unit="ns").start())
        dut.rst.value = 1
        self.axil = AxiLiteMaster(AxiLiteBus.from_prefix(dut, "s_axi"), dut.clk, dut.rst)
        self.ram = AxiRam(_axi_bus_without_ids(dut, "m_axi"), dut.clk, dut.rst,
                          size=dram_bytes)
        if self.bp:
            chans = [self.ram.write_if.aw_channel, self.ram.write_if.w_channel,
                     self.ram.write_if.b_channel, self.ram.read_if.ar_channel,
                     self.ram.read_if.r_channel,
                     self.axil.write_if.aw_channel, self.axil.write_if.w_channel,
                     self.axil.write_if.b_channel, self.axil.read_if.ar_channel,
                     self.axil.read_if.r_channel]
            for i, ch in enumerate(chans):
                ch.set_pause_generator(_pauses(random.Random(self.rng.random() + i), 0.3))
        cocotb.start_soon(self._monitor())

    # ------------------------------------------------------------------ bus monitor
    def _check_burst(self, kind: str, addr: int, ln: int, size: int, burst: int) -> None:
        nbytes = (ln + 1) * self.bb
        where = f"{kind} addr=0x{addr:08x} len={ln} ({ln + 1} beats) at cycle {self.cycle}"
        if burst != 1:
            self.violations.append(f"{where}: burst type {burst}, expected INCR (1)")
        if (1 << size) != self.bb:
            self.violations.append(f"{where}: size {size} is not the bus width "
                                   f"({self.bb} B)")
        if addr % self.bb:
            self.violations.append(f"{where}: address not aligned to the {self.bb}-byte beat")
        if (addr % 4096) + nbytes > 4096:
            self.violations.append(f"{where}: burst crosses a 4 KiB boundary "
                                   f"((addr % 4096) + {nbytes} B > 4096)")
        if addr + nbytes > self.dram_bytes:
            self.violations.append(f"{where}: outside the {self.dram_bytes}-byte DRAM image")

    async def _monitor(self) -> None:
        d = self.dut
        w_left: list[int] = []  # beats expected per outstanding AW, in order
        w_in_burst = 0
        while True:
            await RisingEdge(d.clk)
            self.cycle += 1
            self.irq_trace.append(int(d.irq.value))
            if int(d.rst.value):
                continue
            if int(d.m_axi_arvalid.value) and int(d.m_axi_arready.value):
                t = (self.cycle, int(d.m_axi_araddr.value), int(d.m_axi_arlen.value),
                     int(d.m_axi_arsize.value), int(d.m_axi_arburst.value))
                self.ar.append(t)
                self._check_burst("AR", *t[1:])
            if int(d.m_axi_awvalid.value) and int(d.m_axi_awready.value):
                t = (self.cycle, int(d.m_axi_awaddr.value), int(d.m_axi_awlen.value),
                     int(d.m_axi_awsize.value), int(d.m_axi_awburst.value))
                self.aw.append(t)
                w_left.append(t[2] + 1)
                self._check_burst("AW", *t[1:])
            if int(d.m_axi_rvalid.value) and int(d.m_axi_rready.value):
                self.r_beats += 1
            if int(d.m_axi_wvalid.value) and int(d.m_axi_wready.value):
                self.w_beats += 1
                w_in_burst += 1
                last = int(d.m_axi_wlast.value)
                if w_left:
                    exp_last = w_in_burst == w_left[0]
                    if last != exp_last:
                        self.violations.append(
                            f"W beat {w_in_burst} of a {w_left[0]}-beat burst at cycle "
                            f"{self.cycle}: WLAST={last}, expected {int(exp_last)}")
                    if last or exp_last:
                        w_left.pop(0)
                        w_in_burst = 0
                elif last:
                    w_in_burst = 0
            if int(d.m_axi_bvalid.value) and int(d.m_axi_bready.value):
                self.b_cycles.append(self.cycle)

    def assert_bus_clean(self) -> None:
        assert not self.violations, ("AXI master rule broken:\n  "
                                     + "\n  ".join(self.violations[:10]))

    # ------------------------------------------------------------------ basics
    async def reset(self) -> None:
        self.dut.rst.value = 1
        await ClockCycles(self.dut.clk, RESET_CYCLES)
        self.dut.rst.value = 0
        await RisingEdge(self.dut.clk)

    async def rd(self, name: str) -> int:
        return await self.axil.read_dword(R[name])

    async def wr(self, name: str, value: int) -> None:
        await self.axil.write_dword(R[name], value & 0xFFFFFFFF)

    def dbg(self) -> str:
        from vtaforge.hw.core import DEBUG_STATE_NAMES

        v = int(self.dut.dbg_state.value)
        parts = []
        for i, unit in enumerate(("fetch", "load", "compute", "store")):
            code = (v >> (4 * i)) & 0xF
            parts.append(f"{unit}={DEBUG_STATE_NAMES.get(unit, {}).get(code, code)}")
        parts.append(f"fetch_index[7:0]={(v >> 16) & 0xFF}")
        return " ".join(parts)

    def write_dram(self, image: np.ndarray) -> None:
        assert image.size <= self.dram_bytes
        self.ram.write(0, image.tobytes())

    def read_dram(self, n: int | None = None) -> np.ndarray:
        return np.frombuffer(self.ram.read(0, n or self.dram_bytes), dtype=np.uint8).copy()

    async def launch(self, insn_addr: int, count: int, irq_en: bool = False) -> int:
        """Write the launch registers and START; returns the cycle of the START write."""
        *setup, start = launch_writes(insn_addr, count, irq_en=irq_en)
        for name, value in setup:
            await self.wr(name, value)
        c = self.cycle
        await self.wr(*start)
        return c

    async def wait_done(self, watchdog: int = RUN_WATCHDOG, what: str = "run") -> int:
        """Poll STATUS until DONE; returns the cycle DONE was seen.  Cycle watchdog."""
        start = self.cycle
        while True:
            st = await self.rd("STATUS")
            if st & STATUS_DONE:
                return self.cycle
            if self.cycle - start > watchdog:
                raise AssertionError(
                    f"watchdog: {what} did not complete within {watchdog} cycles "
                    f"(STATUS=0x{st:x}; {self.dbg()}; AR bursts {len(self.ar)}, "
                    f"AW bursts {len(self.aw)}, B {len(self.b_cycles)})")

    async def run(self, image: np.ndarray, insn_addr: int, count: int, *,
                  watchdog: int = RUN_WATCHDOG, irq_en: bool = False,
                  what: str = "run") -> int:
        """Load ``image`` into DRAM, launch, wait; returns the run's cycle count
        (CYCLES register)."""
        self.write_dram(image)
        await self.launch(insn_addr, count, irq_en)
        await self.wait_done(watchdog, what)
        lo, hi = await self.rd("CYCLES_LO"), await self.rd("CYCLES_HI")
        self.assert_bus_clean()
        return lo | (hi << 32)


# ----------------------------------------------------------------------------- programs
def image(cfg: VTAConfig, size: int, rng: np.random.Generator, start: int = 0x1000) -> Image:
    """A bench's DRAM image: ``size`` bytes of seeded random background, buffers from
    ``start`` with a guard gap of one alignment between them, instructions last."""
    return Image(cfg, size, rng, start=start, guard=cfg.dram_alignment)


def identity_wgt(cfg) -> np.ndarray:
    """One WGT element: W[o][i] = 1 if o == i (BLOCK_IN == BLOCK_OUT), int8."""
    w = np.zeros((cfg.BLOCK_OUT, cfg.BLOCK_IN), dtype=np.int8)
    for o in range(min(cfg.BLOCK_OUT, cfg.BLOCK_IN)):
        w[o, o] = 1
    return w


def acc_dump(cfg, img: Image, n: int, shift_uop: int):
    """Instructions dumping all bytes of ACC entries ``[0, n)``: stores of the OUT view
    (low OUT_WIDTH bits) interleaved with ``SHR OUT_WIDTH`` over the same entries, so that
    the k-th store shows bits ``[8k, 8k+8)`` of each entry.

    ``shift_uop``: index of a loaded uop (dst 0, src 0).  The first instruction is a STORE
    that pops the G2S token the caller's last compute instruction pushed.  Returns (insns,
    OUT byte addresses); tokens are balanced except the final S2G token, which the
    caller's FINISH pops (``finish(pop_next=1)``).
    """
    ob = cfg.elem_bytes(MemType.OUT)
    k = cfg.ACC_WIDTH // cfg.OUT_WIDTH
    addrs = [img.alloc(n * ob) for _ in range(k)]
    ins: list[Insn] = []
    for j, a in enumerate(addrs):
        if j:
            ins.append(Insn(A, alu_opcode=int(AluOp.SHR), uop_bgn=shift_uop,
                            uop_end=shift_uop + 1, iter_out=n, iter_in=1, dst_factor_out=1,
                            src_factor_out=1, use_imm=1, imm=cfg.OUT_WIDTH, pop_next=1,
                            push_next=1))
        ins.append(st(0, img.elem(a, MemType.OUT), 1, n, pop_prev=1, push_prev=1))
    return ins, addrs


def acc_from_dump(cfg, dram: np.ndarray, addrs: list[int], n: int) -> np.ndarray:
    """Rebuild int32 ACC values (n, BATCH, BLOCK_OUT) from an :func:`acc_dump`."""
    v = np.zeros((n, cfg.BATCH, cfg.BLOCK_OUT), dtype=np.int64)
    for j, a in enumerate(addrs):
        b = out_view(cfg, dram, a, n) & 0xFF
        v |= b << (8 * j)
    return ((v + (1 << 31)) % (1 << 32)) - (1 << 31)


def wrap32(x) -> np.ndarray:
    x = np.asarray(x, dtype=np.int64)
    return ((x + (1 << 31)) % (1 << 32)) - (1 << 31)


def check(tb: Tb, got: np.ndarray, exp_fsim: np.ndarray, what: str) -> None:
    tb.assert_bus_clean()
    assert_same_dram(exp_fsim, got, f"{what}: DRAM vs fsim")


def _np_rng() -> np.random.Generator:
    return np.random.default_rng(_seed())


# ----------------------------------------------------------------------------- benches
@cocotb.test(timeout_time=200, timeout_unit="us")
async def test_register_ping(dut):
    """BR-25: write/read INSN_COUNT, read FINGERPRINT and VERSION within 100 cycles."""
    tb = Tb(dut)
    await tb.reset()
    c0 = tb.cycle

    async def ping():
        await tb.wr("INSN_COUNT", 0x12345678)
        v = await tb.rd("INSN_COUNT")
        assert v == 0x12345678, f"INSN_COUNT read back 0x{v:08x}, wrote 0x12345678"
        await tb.wr("INSN_COUNT", 0xA5A50F0F)
        v = await tb.rd("INSN_COUNT")
        assert v == 0xA5A50F0F, f"INSN_COUNT read back 0x{v:08x}, wrote 0xa5a50f0f"
        fp = await tb.rd("FINGERPRINT")
        assert fp == tb.cfg.fingerprint, (f"FINGERPRINT 0x{fp:08x} != cfg.fingerprint "
                                          f"0x{tb.cfg.fingerprint:08x}")
        ver = await tb.rd("VERSION")
        assert ver == regs.REGMAP_VERSION, f"VERSION 0x{ver:x} != 0x{regs.REGMAP_VERSION:x}"
        st = await tb.rd("STATUS")
        assert not st & STATUS_BUSY, f"STATUS.BUSY set after reset (0x{st:x})"

    # budget: 100 cycles (plus the random stalls' share when back-pressure is on)
    budget = 100 * (4 if tb.bp else 1)
    try:
        await with_timeout(ping(), budget * CLK_NS, "ns")
    except Exception as e:
        if type(e).__name__ == "SimTimeoutError":
            raise AssertionError(f"register ping did not complete within {budget} cycles "
                                 f"(AXI4-Lite hang, BR-25)") from None
        raise
    dut._log.info("register ping took %d cycles", tb.cycle - c0)


@cocotb.test(timeout_time=20, timeout_unit="ms")
async def test_dispatch(dut):
    """Fetch, decode and dispatch to all three modules with tokens; GEMM + ALU + store;
    completion; DONE semantics; counters.  Expected from fsim and a numpy oracle."""
    tb = Tb(dut)
    cfg = tb.cfg
    rng = _np_rng()
    await tb.reset()
    img = image(cfg, 1 << 16, rng)
    n = 6  # INP entries / ACC entries
    inp = rng.integers(-8, 8, (n, cfg.BATCH, cfg.BLOCK_IN)).astype(np.int8)
    wgt = rng.integers(-8, 8, (2, cfg.BLOCK_OUT, cfg.BLOCK_IN)).astype(np.int8)
    a_inp = img.put(inp)
    a_wgt = img.put(wgt)
    # uops: 0 = (0,0,0) for loops; 1.. GEMM i -> (dst i, src i, wgt i%2)
    u = img.uops([0] + list(range(n)), [0] + list(range(n)), [0] + [i % 2 for i in range(n)])
    a_out = img.alloc(n * cfg.elem_bytes(MemType.OUT))
    insns = [
        ld(MemType.INP, 0, img.elem(a_inp, MemType.INP), 1, n),
        ld(MemType.WGT, 0, img.elem(a_wgt, MemType.WGT), 1, 2, push_next=1),
        ld(MemType.UOP, 0, img.elem(u, MemType.UOP), 1, n + 1),
        gemm(0, 1, iter_out=n, d=(1, 0), reset=1, pop_prev=1),  # reset acc[0..n)
        gemm(1, n + 1),
        alu(AluOp.MAX, 0, 1, iter_out=n, d=(1, 0), s=(1, 0), imm=-20),
        alu(AluOp.MIN, 0, 1, iter_out=n, d=(1, 0), s=(1, 0), imm=20, push_next=1),
        st(0, img.elem(a_out, MemType.OUT), 1, n, pop_prev=1, push_prev=1),
        finish(pop_next=1),
    ]
    dram, ia, cnt = img.program(insns)
    exp = fsim_expected(cfg, dram, ia, cnt)
    # numpy oracle
    acc = np.einsum("nbi,noi->nbo", inp.astype(np.int64),
                    wgt[np.arange(n) % 2].astype(np.int64))
    acc = np.clip(acc, -20, 20)
    assert np.array_equal(out_view(cfg, exp, a_out, n), acc), "fsim disagrees with numpy"
    # run, sampling irq each cycle and STATUS back to back
    tb.write_dram(dram)
    st0 = await tb.rd("STATUS")
    c_start = await tb.launch(ia, cnt, irq_en=True)
    st1 = await tb.rd("STATUS")
    assert st1 & STATUS_BUSY or st1 & STATUS_DONE, f"STATUS 0x{st1:x} right after START"
    c_done = await tb.wait_done(what="dispatch program")
    got = tb.read_dram(dram.size)
    check(tb, got, exp, "dispatch")
    assert np.array_equal(out_view(cfg, got, a_out, n), acc)
    assert tb.b_cycles and tb.b_cycles[-1] <= c_done, "DONE seen before the last write response"
    gemm_cnt = await tb.rd("GEMM_COUNT")
    alu_cnt = await tb.rd("ALU_COUNT")
    assert gemm_cnt == n, f"GEMM_COUNT {gemm_cnt}, expected {n} (non-reset GEMM micro-ops)"
    assert alu_cnt == 2 * n, f"ALU_COUNT {alu_cnt}, expected {2 * n}"
    cyc = (await tb.rd("CYCLES_LO")) | ((await tb.rd("CYCLES_HI")) << 32)
    assert 0 < cyc <= c_done - c_start + 4, f"CYCLES {cyc} vs observed {c_done - c_start}"
    irq_first = next((i for i in range(c_start, len(tb.irq_trace)) if tb.irq_trace[i]), None)
    assert irq_first is not None, "irq never rose with CTRL.IRQ_EN set"
    assert irq_first >= tb.b_cycles[-1], "irq rose before the last write response"
    dut._log.info("dispatch: %d cycles, STATUS before 0x%x", cyc, st0)


#: (y_pad_0, y_pad_1, x_pad_0, x_pad_1) of the five upstream padded-load patterns.
PAD_PATTERNS = {"Y0": (2, 0, 0, 0), "Y1": (0, 2, 0, 0), "X0": (0, 0, 2, 0),
                "X1": (0, 0, 0, 2), "all": (2, 1, 1, 2)}


def _padded_windows(img, mem, a_src, src):
    """LOADs of a rows × 5 window (starting at column 1: an odd element offset, a sub-beat
    start) of ``src`` (rows, cols, BATCH, lanes) at byte ``a_src``, once per pad pattern,
    packed one after another from scratchpad index 0.

    Returns ``(loads, expect, n_entries)``: the instructions, ``(sram_base, tile)`` pairs
    with the numpy-built padded tiles (zeros around the window), and the entries used."""
    rows, cols = src.shape[:2]
    lanes = src.shape[2:]
    loads, expect, sram = [], [], 0
    for y0, y1, x0, x1 in PAD_PATTERNS.values():
        loads.append(ld(mem, sram, img.elem(a_src, mem) + 1, rows, 5, stride=cols,
                        pads=(y0, y1, x0, x1)))
        tile = np.zeros((y0 + rows + y1, x0 + 5 + x1, *lanes), np.int64)
        tile[y0:y0 + rows, x0:x0 + 5] = src[:, 1:6]
        expect.append((sram, tile.reshape(-1, *lanes)))
        sram += tile.shape[0] * tile.shape[1]
    return loads, expect, sram


async def _padding_inp(tb: Tb, rng) -> None:
    cfg = tb.cfg
    assert cfg.BLOCK_IN == cfg.BLOCK_OUT, "the INP check uses an identity weight"
    img = image(cfg, 1 << 16, rng, start=0x1000)
    ie = cfg.elem_bytes(MemType.INP)
    # source tensor 3 x 8 elements (x_stride 8), loads of a 3 x 5 window
    src_rows, src_cols = 3, 8
    src = rng.integers(-128, 128, (src_rows, src_cols, cfg.BATCH, cfg.BLOCK_IN)).astype(np.int8)
    a_src = img.put(src)
    loads, expect, sram = _padded_windows(img, MemType.INP, a_src, src)
    n_pad = sram
    # a row longer than one burst that crosses a 4 KiB boundary: 600 elements
    long_x = min(600, cfg.INP_DEPTH - n_pad)
    long_bytes = long_x * ie
    a_long = 0x3000 - (long_bytes // 2) // ie * ie - ie  # straddles 0x3000, odd element
    long = rng.integers(-128, 128, (long_x, cfg.BATCH, cfg.BLOCK_IN)).astype(np.int8)
    img.put_at(a_long, long)
    img.cursor = max(img.cursor, a_long + long_bytes + img.align)
    loads.append(ld(MemType.INP, sram, a_long // ie, 1, long_x, pads=(0, 0, 1, 1)))
    tile = np.zeros((long_x + 2, cfg.BATCH, cfg.BLOCK_IN), np.int64)
    tile[1:-1] = long
    expect.append((sram, tile))
    total = sram + long_x + 2
    assert total <= cfg.INP_DEPTH
    a_w = img.put(identity_wgt(cfg))
    u = img.uops([0], [0], [0])
    # GEMM in chunks of at most ACC_DEPTH entries: acc[i] = inp[c+i] . I
    chunk = min(cfg.ACC_DEPTH, 256)
    ob = cfg.elem_bytes(MemType.OUT)
    insns = loads[:]
    insns.append(ld(MemType.WGT, 0, img.elem(a_w, MemType.WGT), 1, 1, push_next=1))
    insns.append(ld(MemType.UOP, 0, img.elem(u, MemType.UOP), 1, 1))
    outs = []
    first = True
    for c in range(0, total, chunk):
        k = min(chunk, total - c)
        a_o = img.alloc(k * ob)
        outs.append((c, k, a_o))
        # the GEMM uop (0,0,0) with src offset c: src index = 0 + i*1 + c ... the loop has
        # no base, so use uop src=c: reload a uop per chunk
        uc = img.uops([0], [c], [0])
        insns.append(ld(MemType.UOP, 1 + len(outs), img.elem(uc, MemType.UOP), 1, 1,
                        pop_next=0 if first else 1))
        insns.append(gemm(1 + len(outs), 2 + len(outs), iter_out=k, d=(1, 0), s=(1, 0),
                          reset=1, pop_prev=1 if first else 0))
        insns.append(gemm(1 + len(outs), 2 + len(outs), iter_out=k, d=(1, 0), s=(1, 0),
                          push_next=1))
        insns.append(st(0, img.elem(a_o, MemType.OUT), 1, k, pop_prev=1, push_prev=1))
        first = False
    insns.append(finish(pop_next=1))
    dram, ia, cnt = img.program(insns)
    exp = fsim_expected(cfg, dram, ia, cnt)
    # numpy oracle: the INP scratchpad image, as int8 on OUT
    sp = np.zeros((total, cfg.BATCH, cfg.BLOCK_IN), np.int64)
    for base, tile in expect:
        sp[base:base + len(tile)] = tile
    for c, k, a_o in outs:
        assert np.array_equal(out_view(cfg, exp, a_o, k), sp[c:c + k]), \
            "fsim disagrees with the numpy padding oracle"
    await tb.run(dram, ia, cnt, what="INP padded loads")
    got = tb.read_dram(dram.size)
    for c, k, a_o in outs:
        g = out_view(cfg, got, a_o, k)
        bad = np.argwhere(g != sp[c:c + k])
        assert bad.size == 0, (f"INP scratchpad entry {c + int(bad[0][0])} lane "
                               f"{tuple(int(x) for x in bad[0][1:])}: got "
                               f"{int(g[tuple(bad[0])])}, expected "
                               f"{int(sp[c:c + k][tuple(bad[0])])} (pattern bases "
                               f"{[b for b, _ in expect]})")
    check(tb, got, exp, "INP padded loads")
    _assert_split_seen(tb, a_long, long_bytes)


async def _padding_acc(tb: Tb, rng) -> None:
    cfg = tb.cfg
    img = image(cfg, 1 << 16, rng, start=0x1000)
    ae = cfg.elem_bytes(MemType.ACC)
    src_rows, src_cols = 3, 8
    src = rng.integers(-(1 << 31), 1 << 31, (src_rows, src_cols, cfg.BATCH, cfg.BLOCK_OUT),
                       dtype=np.int64).astype(np.int32)
    a_src = img.put(src)
    loads, expect, sram = _padded_windows(img, MemType.ACC, a_src, src)
    # long row (> one 256-beat burst on a 64-bit bus: 2 KiB) crossing a 4 KiB boundary
    long_x = min(200, cfg.ACC_DEPTH - sram - 2)
    a_long = 0x5000 - (long_x * ae) // 3 // ae * ae
    long = rng.integers(-(1 << 31), 1 << 31, (long_x, cfg.BATCH, cfg.BLOCK_OUT),
                        dtype=np.int64).astype(np.int32)
    img.put_at(a_long, long)
    img.cursor = max(img.cursor, a_long + long.nbytes + img.align)
    loads.append(ld(MemType.ACC, sram, a_long // ae, 1, long_x, pads=(0, 0, 1, 1)))
    tile = np.zeros((long_x + 2, cfg.BATCH, cfg.BLOCK_OUT), np.int64)
    tile[1:-1] = long
    expect.append((sram, tile))
    total = sram + long_x + 2
    u = img.uops([0], [0], [0])
    loads[-1].push_next = 1  # ACC loads run in compute: push G2S for the first store
    insns = [ld(MemType.UOP, 0, img.elem(u, MemType.UOP), 1, 1)] + loads
    dump, addrs = acc_dump(cfg, img, total, 0)
    insns += dump
    insns.append(finish(pop_next=1))
    dram, ia, cnt = img.program(insns)
    exp = fsim_expected(cfg, dram, ia, cnt)
    sp = np.zeros((total, cfg.BATCH, cfg.BLOCK_OUT), np.int64)
    for base, tile in expect:
        sp[base:base + len(tile)] = tile
    assert np.array_equal(acc_from_dump(cfg, exp, addrs, total), sp), \
        "fsim disagrees with the numpy ACC padding oracle"
    await tb.run(dram, ia, cnt, what="ACC padded loads")
    got = tb.read_dram(dram.size)
    g = acc_from_dump(cfg, got, addrs, total)
    bad = np.argwhere(g != sp)
    assert bad.size == 0, (f"ACC entry {int(bad[0][0])} lane {tuple(int(x) for x in bad[0][1:])}: "
                           f"got {int(g[tuple(bad[0])])}, expected {int(sp[tuple(bad[0])])} "
                           f"(pattern bases {[b for b, _ in expect]})")
    check(tb, got, exp, "ACC padded loads")
    _assert_split_seen(tb, a_long, long.nbytes)


def _assert_split_seen(tb: Tb, addr: int, nbytes: int) -> None:
    """The row ``[addr, addr+nbytes)`` straddles a 4 KiB boundary: some read burst must end
    exactly at that boundary and the next one start there (the bench really exercised the
    split; the monitor already checked that no burst crosses)."""
    edge = (addr // 4096 + 1) * 4096
    assert addr < edge < addr + nbytes
    ends = {a + (ln + 1) * tb.bb for _, a, ln, _, _ in tb.ar}
    starts = {a for _, a, _, _, _ in tb.ar}
    assert edge in ends and edge in starts, (
        f"no read burst split at 0x{edge:x} for the row at 0x{addr:x}+{nbytes}: bursts "
        f"{[(hex(a), ln) for _, a, ln, _, _ in tb.ar if a <= edge + 4096 and a + 4096 >= addr][:8]}")


@cocotb.test(timeout_time=50, timeout_unit="ms")
async def test_load_padding_inp(dut):
    """Padded INP loads: Y0/Y1/X0/X1/all on a 3x5 window of a 3x8 tensor (BR-01, BR-03),
    a 600-element row (longer than a burst) straddling a 4 KiB boundary; checked through
    an identity GEMM and the OUT view, against numpy and fsim."""
    tb = Tb(dut)
    await tb.reset()
    await _padding_inp(tb, _np_rng())


@cocotb.test(timeout_time=50, timeout_unit="ms")
async def test_load_padding_acc(dut):
    """Padded ACC loads (the same five patterns, int32 values of the full range), a
    200-element row (3.2 KiB) straddling a 4 KiB boundary; all four bytes of every entry
    checked through stores interleaved with SHR 8, against numpy and fsim."""
    tb = Tb(dut)
    await tb.reset()
    await _padding_acc(tb, _np_rng())


@cocotb.test(timeout_time=100, timeout_unit="ms")
async def test_uop_loads(dut):
    """Micro-op loads at odd SRAM offsets with counts 1, 2, 511, 512, 513 (and 1025 when
    the UOP buffer holds it), surrounded by sentinel micro-ops; every loaded range is
    executed (ALU ADD of a source entry into a destination entry), single micro-ops at the
    range edges and the sentinels too; ACC dumped and compared with fsim."""
    tb = Tb(dut)
    cfg = tb.cfg
    rng = _np_rng()
    await tb.reset()
    depth = cfg.UOP_DEPTH
    counts = [c for c in (1, 2, 511, 512, 513, 1025) if c + 4 <= depth]
    n_acc = min(cfg.ACC_DEPTH, 256)
    half = n_acc // 2
    img = image(cfg, 1 << 18, rng)
    init = rng.integers(0, 50, (n_acc, cfg.BATCH, cfg.BLOCK_OUT)).astype(np.int32)
    a_init = img.put(init)
    total_cycles = 0
    for count in counts:
        off = 2 * ((depth - count - 3) // 4) + 1  # odd, room for sentinels + shift uop
        dst = rng.integers(0, half, count + 2)
        src = half + rng.integers(0, half, count + 2)
        u_sent = img.uops(dst[[0, -1]], src[[0, -1]])
        u_body = img.uops(dst[1:-1], src[1:-1])
        # sentinels first (at off-1 and off+count), then the tested load in between
        insns = [
            ld(MemType.ACC, 0, img.elem(a_init, MemType.ACC), 1, n_acc),
            ld(MemType.UOP, off - 1, img.elem(u_sent, MemType.UOP), 1, 1),
            ld(MemType.UOP, off + count, img.elem(u_sent, MemType.UOP) + 1, 1, 1),
            ld(MemType.UOP, off, img.elem(u_body, MemType.UOP), 1, count),
            alu(AluOp.ADD, off - 1, off + count + 1),          # all, incl. sentinels
            alu(AluOp.ADD, off, off + 1),                      # first loaded
            alu(AluOp.ADD, off + count - 1, off + count),      # last loaded
            alu(AluOp.ADD, off - 1, off),                      # sentinel before
            alu(AluOp.ADD, off + count, off + count + 1),      # sentinel after
        ]
        if count > 2:
            insns.append(alu(AluOp.ADD, off + count // 2, off + count // 2 + 1))
        insns[-1].push_next = 1
        # the shift uop (dst 0, src 0) of the dump, right after the upper sentinel
        u0 = img.uops([0], [0])
        zpos = off + count + 1
        insns.insert(4, ld(MemType.UOP, zpos, img.elem(u0, MemType.UOP), 1, 1))
        dump, addrs = acc_dump(cfg, img, n_acc, zpos)
        insns += dump + [finish(pop_next=1)]
        dram, ia, cnt = img.program(insns)
        exp = fsim_expected(cfg, dram, ia, cnt)
        total_cycles += await tb.run(dram, ia, cnt, what=f"uop load count {count} at {off}")
        got = tb.read_dram(dram.size)
        g = acc_from_dump(cfg, got, addrs, n_acc)
        e = acc_from_dump(cfg, exp, addrs, n_acc)
        bad = np.argwhere(g != e)
        assert bad.size == 0, (f"uop load of {count} at SRAM offset {off}: ACC entry "
                               f"{int(bad[0][0])} got {int(g[tuple(bad[0])])}, expected "
                               f"{int(e[tuple(bad[0])])}")
        check(tb, got, exp, f"uop load count {count} at {off}")
        img = image(cfg, 1 << 18, rng)
        init = rng.integers(0, 50, (n_acc, cfg.BATCH, cfg.BLOCK_OUT)).astype(np.int32)
        a_init = img.put(init)
    dut._log.info("uop loads %s: %d cycles", counts, total_cycles)


@cocotb.test(timeout_time=20, timeout_unit="ms")
async def test_gemm_accumulate(dut):
    """BR-20/BR-12: 4 GEMM steps into one ACC entry (back-to-back micro-ops and an inner
    loop with dst factor 0) give the exact sum per lane and the immediately following
    STORE sees the final value; reset zeroes loaded entries; empty ranges (uop_end ==
    uop_bgn, iter_out 0, iter_in 0) change nothing."""
    tb = Tb(dut)
    cfg = tb.cfg
    rng = _np_rng()
    await tb.reset()
    img = image(cfg, 1 << 16, rng)
    inp = rng.integers(-128, 128, (4, cfg.BATCH, cfg.BLOCK_IN)).astype(np.int8)
    wgt = rng.integers(-128, 128, (4, cfg.BLOCK_OUT, cfg.BLOCK_IN)).astype(np.int8)
    ones_i = np.ones((1, cfg.BATCH, cfg.BLOCK_IN), np.int8)
    ones_w = np.full((1, cfg.BLOCK_OUT, cfg.BLOCK_IN), 4, np.int8)
    accinit = rng.integers(-1000, 1000, (8, cfg.BATCH, cfg.BLOCK_OUT)).astype(np.int32)
    a_inp = img.put(np.concatenate([inp, ones_i]))
    a_wgt = img.put(np.concatenate([wgt, ones_w]))
    a_acc = img.put(accinit)
    # uops 0..3: acc[0] += inp[i] . wgt[i];  4: (dst 1, src 4, wgt 4) for the loop form;
    # 5: (dst 2, 0, 0) reset target; 6: (dst 3, 0, 0) empty-range target
    u = img.uops([0, 0, 0, 0, 1, 2, 3], [0, 1, 2, 3, 4, 0, 0], [0, 1, 2, 3, 4, 0, 0])
    n_out = 8
    a_o = img.alloc(n_out * cfg.elem_bytes(MemType.OUT) * 4)
    insns = [
        ld(MemType.INP, 0, img.elem(a_inp, MemType.INP), 1, 5),
        ld(MemType.WGT, 0, img.elem(a_wgt, MemType.WGT), 1, 5, push_next=1),
        ld(MemType.UOP, 0, img.elem(u, MemType.UOP), 1, 7),
        ld(MemType.ACC, 0, img.elem(a_acc, MemType.ACC), 1, 8, pop_prev=1),
        gemm(0, 1, reset=1),                                   # acc[0] = 0
        gemm(0, 4),                                            # 4 steps into acc[0]
        gemm(4, 5, iter_out=2, iter_in=2, d=(0, 0)),           # 4 steps into acc[1]
        gemm(5, 6, reset=1),                                   # acc[2] = 0
        gemm(6, 6),                                            # empty: uop_end == bgn
        gemm(6, 7, iter_out=0),                                # empty: iter_out 0
        gemm(6, 7, iter_in=0, push_next=1),                    # empty: iter_in 0
        st(0, img.elem(a_o, MemType.OUT), 1, 4, pop_prev=1, push_prev=1),
        finish(pop_next=1),
    ]
    dram, ia, cnt = img.program(insns)
    exp = fsim_expected(cfg, dram, ia, cnt)
    o = np.zeros((4, cfg.BATCH, cfg.BLOCK_OUT), np.int64)
    o[0] = sum(inp[i].astype(np.int64) @ wgt[i].astype(np.int64).T for i in range(4))
    o[1] = accinit[1] + 4 * (ones_i[0].astype(np.int64) @ ones_w[0].astype(np.int64).T)
    o[2] = 0
    o[3] = accinit[3]
    o8 = ((o + 128) % 256) - 128
    assert np.array_equal(out_view(cfg, exp, a_o, 4), o8), "fsim disagrees with numpy"
    await tb.run(dram, ia, cnt, what="GEMM accumulate")
    got = tb.read_dram(dram.size)
    g = out_view(cfg, got, a_o, 4)
    names = ["4-step accumulate (back-to-back uops)", "4-step accumulate (loop, dst factor 0)",
             "reset", "empty ranges"]
    for i in range(4):
        assert np.array_equal(g[i], o8[i]), (f"{names[i]}: ACC entry {i} stored "
                                             f"{g[i].ravel().tolist()}, expected "
                                             f"{o8[i].ravel().tolist()}")
    check(tb, got, exp, "GEMM accumulate")


@cocotb.test(timeout_time=50, timeout_unit="ms")
async def test_alu_ops(dut):
    """Every ALU op (MIN, MAX, ADD, SHR; MUL when ALU_MUL) with immediates 0x7FFF, -0x8000,
    -1, 0, 3, -2 and the largest shift amounts, on ACC entries holding edge values, plus
    each op with an ACC source; all 32 bits checked (stores + SHR 8) against numpy & fsim."""
    tb = Tb(dut)
    cfg = tb.cfg
    rng = _np_rng()
    await tb.reset()
    lanes = cfg.BATCH * cfg.BLOCK_OUT
    edge = np.array([0x7FFFFFFF, -0x80000000, -1, 0, 1, 0x12345678, -0x12345678, 255,
                     -256, 0x7FFF, -0x8000, 65536], dtype=np.int64)
    vals = np.resize(edge, lanes).reshape(cfg.BATCH, cfg.BLOCK_OUT)
    ops = [AluOp.MIN, AluOp.MAX, AluOp.ADD, AluOp.SHR] + ([AluOp.MUL] if cfg.ALU_MUL else [])
    imms = [0x7FFF, -0x8000, -1, 0, 3, -2]
    shr_extra = [cfg.ACC_WIDTH - 1, -(cfg.ACC_WIDTH - 1), 1 << cfg.LOG_ACC_WIDTH,
                 -(1 << cfg.LOG_ACC_WIDTH), (1 << (cfg.LOG_ACC_WIDTH + 1)) - 1, 1, -1]
    cases = []
    for op in ops:
        for imm in imms + (shr_extra if op == AluOp.SHR else []):
            cases.append((op, imm))
    src_cases = [(op, None) for op in ops]
    n = len(cases) + len(src_cases)
    assert n + 1 <= cfg.ACC_DEPTH
    # entries 0..n-1: rotated edge values (lane variety); entry n: source operand
    acc = np.stack([np.roll(vals.reshape(-1), i).reshape(cfg.BATCH, cfg.BLOCK_OUT)
                    for i in range(n)] + [np.roll(vals.reshape(-1), 5)
                                         .reshape(cfg.BATCH, cfg.BLOCK_OUT) // 3])
    img = image(cfg, 1 << 17, rng)
    a_acc = img.put(acc.astype(np.int32))
    # uop k: (dst k, src n); uop n+... : shift uop (0, 0)
    u = img.uops(list(range(n)) + [0], [n] * n + [0])
    insns = [ld(MemType.UOP, 0, img.elem(u, MemType.UOP), 1, n + 1),
             ld(MemType.ACC, 0, img.elem(a_acc, MemType.ACC), 1, n + 1)]
    for k, (op, imm) in enumerate(cases + src_cases):
        insns.append(alu(op, k, k + 1, imm=imm))
    insns[-1].push_next = 1
    dump, addrs = acc_dump(cfg, img, n, n)
    insns += dump + [finish(pop_next=1)]
    dram, ia, cnt = img.program(insns)
    exp = fsim_expected(cfg, dram, ia, cnt)

    def oracle(op, a, b):
        if op == AluOp.MIN:
            return np.minimum(a, b)
        if op == AluOp.MAX:
            return np.maximum(a, b)
        if op == AluOp.ADD:
            return wrap32(a + b)
        if op == AluOp.MUL:
            return wrap32(a * b)
        lb = cfg.LOG_ACC_WIDTH + 1
        s = np.asarray(b, np.int64) & ((1 << lb) - 1)
        s = np.where(s >= (1 << (lb - 1)), s - (1 << lb), s)
        r = np.where(s >= 0, a >> np.clip(s, 0, 63), _shl(a, np.clip(-s, 0, 63)))
        return wrap32(r)

    want = np.zeros((n, cfg.BATCH, cfg.BLOCK_OUT), np.int64)
    for k, (op, imm) in enumerate(cases + src_cases):
        b = acc[n] if imm is None else np.int64(imm)
        want[k] = oracle(op, acc[k].astype(np.int64), b)
    e = acc_from_dump(cfg, exp, addrs, n)
    assert np.array_equal(e, want), (
        f"fsim disagrees with the numpy ALU oracle at entry "
        f"{int(np.argwhere(e != want)[0][0])}")
    await tb.run(dram, ia, cnt, what="ALU ops")
    got = tb.read_dram(dram.size)
    g = acc_from_dump(cfg, got, addrs, n)
    bad = np.argwhere(g != want)
    if bad.size:
        k = int(bad[0][0])
        op, imm = (cases + src_cases)[k]
        raise AssertionError(
            f"ALU {op.name} {'imm ' + str(imm) if imm is not None else 'acc src'}: entry {k} "
            f"got {g[k].ravel().tolist()}, expected {want[k].ravel().tolist()} "
            f"(a={acc[k].ravel().tolist()}); {len(set(int(b[0]) for b in bad))} cases wrong")
    check(tb, got, exp, "ALU ops")


def _shl(a: np.ndarray, s: np.ndarray) -> np.ndarray:
    """Left shift wrapping at 32 bits, elementwise, via Python ints."""
    a, s = np.broadcast_arrays(np.asarray(a, np.int64), np.asarray(s, np.int64))
    out = np.array([((int(x) << int(y)) & 0xFFFFFFFF) for x, y in zip(a.ravel(), s.ravel())],
                   dtype=np.int64).reshape(a.shape)
    return out


@cocotb.test(timeout_time=20, timeout_unit="ms")
async def test_store(dut):
    """STORE writes exactly the element bytes (low OUT_WIDTH bits of each ACC lane) at
    odd element addresses, with x_stride > x_size, several rows, single elements and a
    row crossing 4 KiB; every other byte (guard) keeps its random value."""
    tb = Tb(dut)
    cfg = tb.cfg
    rng = _np_rng()
    await tb.reset()
    img = image(cfg, 1 << 16, rng)
    oe = cfg.elem_bytes(MemType.OUT)
    n = 64
    acc = rng.integers(-(1 << 31), 1 << 31, (n, cfg.BATCH, cfg.BLOCK_OUT),
                       dtype=np.int64).astype(np.int32)
    a_acc = img.put(acc)
    region = img.alloc(0x3000, align=0x1000)  # stores go inside, guards around
    stores = [  # (sram, element offset in region, y, x, stride)
        (0, 1, 1, 1, 1),
        (1, 3, 1, 2, 2),
        (3, 9, 3, 5, 8),
        (18, 40, 2, 7, 9),
        (32, 0x1000 // oe - 5, 1, 20, 20),  # crosses the 4 KiB boundary inside region
    ]
    insns = [nop(MemType.UOP),
             ld(MemType.ACC, 0, img.elem(a_acc, MemType.ACC), 1, n)]
    insns[-1].push_next = 1
    for i, (s0, off, y, x, stride) in enumerate(stores):
        insns.append(st(s0, region // oe + off, y, x, stride, pop_prev=1 if i == 0 else 0,
                        push_prev=1 if i == len(stores) - 1 else 0))
    insns.append(finish(pop_next=1))
    dram, ia, cnt = img.program(insns)
    exp = fsim_expected(cfg, dram, ia, cnt)
    # numpy oracle: low OUT_WIDTH bits of each lane, little-endian, only written elements
    want = dram.copy()
    low = acc.astype(np.int64) & ((1 << cfg.OUT_WIDTH) - 1)
    lowb = low.astype(np.uint8 if cfg.OUT_WIDTH == 8 else np.uint16).reshape(n, -1)
    for s0, off, y, x, stride in stores:
        for r in range(y):
            for c in range(x):
                a = region + (off + r * stride + c) * oe
                want[a:a + oe] = np.frombuffer(lowb[s0 + r * x + c].tobytes(), np.uint8)
    assert_same_dram(want, exp, "fsim vs numpy store oracle")
    await tb.run(dram, ia, cnt, what="stores")
    got = tb.read_dram(dram.size)
    assert_same_dram(want, got, "stores (element bytes and guards) vs numpy")
    check(tb, got, exp, "stores")


@cocotb.test(timeout_time=50, timeout_unit="ms")
async def test_handshake(dut):
    """Register handshake (BR-17): DONE (and irq) low from START until this run's FINISH,
    sampled every cycle, for a second run after a first whose first instructions are a
    long padded load; DONE rises only after the last write response; IRQ only when
    enabled; IRQ_STATUS write-1-to-clear; START while busy ignored."""
    tb = Tb(dut)
    cfg = tb.cfg
    rng = _np_rng()
    await tb.reset()

    def program(long_load: bool):
        img = image(cfg, 1 << 17, rng)
        inp = rng.integers(-4, 4, (8, cfg.BATCH, cfg.BLOCK_IN)).astype(np.int8)
        a_inp = img.put(inp)
        a_w = img.put(identity_wgt(cfg))
        u = img.uops([0], [0], [0])
        a_o = img.alloc(8 * cfg.elem_bytes(MemType.OUT))
        insns = []
        if long_load:
            big = rng.integers(-128, 128, (4, 60, cfg.BATCH, cfg.BLOCK_IN)).astype(np.int8)
            a_big = img.put(big)
            for _ in range(3):  # 10 x 70 = 700 entries each, at INP 100..799
                insns.append(ld(MemType.INP, 100, img.elem(a_big, MemType.INP), 4, 60,
                                pads=(3, 3, 5, 5)))
        insns += [
            ld(MemType.INP, 0, img.elem(a_inp, MemType.INP), 1, 8),
            ld(MemType.WGT, 0, img.elem(a_w, MemType.WGT), 1, 1, push_next=1),
            ld(MemType.UOP, 0, img.elem(u, MemType.UOP), 1, 1),
            gemm(0, 1, iter_out=8, d=(1, 0), s=(1, 0), reset=1, pop_prev=1),
            gemm(0, 1, iter_out=8, d=(1, 0), s=(1, 0), push_next=1),
            st(0, img.elem(a_o, MemType.OUT), 1, 8, pop_prev=1, push_prev=1),
            finish(pop_next=1),
        ]
        dram, ia, cnt = img.program(insns)
        return dram, ia, cnt, a_o, inp

    # run 1: irq disabled
    d1, ia1, n1, o1, inp1 = program(False)
    exp1 = fsim_expected(cfg, d1, ia1, n1)
    tb.write_dram(d1)
    c1 = await tb.launch(ia1, n1, irq_en=False)
    done1 = await tb.wait_done(what="run 1")
    got = tb.read_dram(d1.size)
    assert_same_dram(exp1, got, "run 1 vs fsim")
    assert np.array_equal(out_view(cfg, got, o1, 8), inp1.astype(np.int64)), "run 1 output"
    assert not any(tb.irq_trace[c1:]), "irq rose although CTRL.IRQ_EN was 0"
    irqs = await tb.rd("IRQ_STATUS")
    assert irqs & 1, f"IRQ_STATUS.DONE not set after run 1 (0x{irqs:x})"
    await tb.wr("IRQ_STATUS", 1)
    irqs = await tb.rd("IRQ_STATUS")
    assert not irqs & 1, f"IRQ_STATUS.DONE not cleared by writing 1 (0x{irqs:x})"
    sv = await tb.rd("STATUS")
    assert sv & STATUS_DONE and not sv & STATUS_BUSY, f"STATUS 0x{sv:x} after run 1"

    # run 2: long padded loads first, irq enabled; DONE sampled via back-to-back reads
    d2, ia2, n2, o2, inp2 = program(True)
    exp2 = fsim_expected(cfg, d2, ia2, n2)
    tb.write_dram(d2)
    b_before = len(tb.b_cycles)
    c2 = await tb.launch(ia2, n2, irq_en=True)
    c2_acc = tb.cycle
    # START while busy must be ignored (the run continues; one completion)
    await tb.wr("CTRL", CTRL_START | CTRL_IRQ_EN)
    polls = []
    while True:
        sv = await tb.rd("STATUS")
        polls.append((tb.cycle, sv))
        if sv & STATUS_DONE:
            break
        if tb.cycle - c2 > RUN_WATCHDOG:
            raise AssertionError(f"watchdog: run 2 did not complete within {RUN_WATCHDOG} "
                                 f"cycles ({tb.dbg()})")
    done_seen = tb.cycle
    got = tb.read_dram(d2.size)
    assert_same_dram(exp2, got, "run 2 at the first DONE vs fsim (output must be final)")
    b_new = tb.b_cycles[b_before:]
    assert b_new, "run 2 wrote nothing"
    early = [(c, s) for c, s in polls[:-1] if s & STATUS_DONE]
    assert not early, f"STATUS.DONE set before run 2 completed (stale DONE, BR-17): {early[:3]}"
    assert polls[0][1] & STATUS_BUSY, f"first poll of run 2: STATUS 0x{polls[0][1]:x} not BUSY"
    # irq per cycle: low from START until after the last write response of run 2
    tr = tb.irq_trace
    first_irq = next((i for i in range(c2, len(tr)) if tr[i]), None)
    assert first_irq is not None, "irq never rose in run 2 with CTRL.IRQ_EN set"
    assert first_irq > b_new[-1] - 1, (f"irq rose at cycle {first_irq}, before the last write "
                                       f"response (cycle {b_new[-1]})")
    assert first_irq <= done_seen
    assert all(tr[i] for i in range(first_irq, len(tr))), "irq dropped before IRQ_STATUS W1C"
    await tb.wr("IRQ_STATUS", 1)
    await ClockCycles(dut.clk, 2)
    assert int(dut.irq.value) == 0, "irq still high after IRQ_STATUS write-1-to-clear"
    # writing 0 to IRQ_STATUS must not clear / set anything; STATUS stays DONE
    sv = await tb.rd("STATUS")
    assert sv & STATUS_DONE, f"STATUS.DONE not held after completion (0x{sv:x})"
    tb.assert_bus_clean()
    dut._log.info("run 1 %d cycles, run 2 %d cycles (START accepted by cycle %d)",
                  done1 - c1, done_seen - c2, c2_acc)


@cocotb.test(timeout_time=20, timeout_unit="ms")
async def test_watchdog_on_deadlock(dut):
    """A program whose compute module pops a token nobody pushes never completes: DONE
    stays low, the bench's cycle watchdog turns it into a named error (naming each unit's
    state), and a reset brings the core back (register ping and a short run succeed)."""
    tb = Tb(dut)
    cfg = tb.cfg
    rng = _np_rng()
    await tb.reset()
    img = image(cfg, 1 << 15, rng)
    dram, ia, cnt = img.program([finish(pop_prev=1)])  # L2G is never pushed
    tb.write_dram(dram)
    await tb.launch(ia, cnt)
    try:
        await tb.wait_done(watchdog=2000, what="deadlocked program")
    except AssertionError as e:
        assert "watchdog" in str(e) and "compute=" in str(e), str(e)
        dut._log.info("expected: %s", e)
    else:
        raise AssertionError("a program that pops a never-pushed token reported DONE")
    await tb.reset()
    v = await tb.rd("FINGERPRINT")
    assert v == cfg.fingerprint, f"FINGERPRINT 0x{v:08x} after reset"
    img = image(cfg, 1 << 15, rng)
    dram, ia, cnt = img.program([finish()])
    await tb.run(dram, ia, cnt, watchdog=5000, what="FINISH-only program after reset")
