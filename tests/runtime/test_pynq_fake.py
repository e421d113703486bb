"""PynqDevice without a board: fake MMIO + fake cacheable memory + a simulated core, and
unit tests of the shared register driver (``runtime/mmio.py``) and the buffer pool.

The fake memory models a write-back CPU cache at 64-byte line granularity: the host's view
(``cache``) and the device's view (``dram``) are separate arrays; ``flush`` writes back the
lines the host changed since the last sync, ``invalidate`` reloads every line from DRAM
(dropping dirty ones).  The fake core's START runs the functional simulator on what DRAM
holds, so a forgotten flush gives stale inputs and a forgotten invalidate stale outputs,
and it refuses (records a fault) to start while any line is host-dirty (field-faults BR-22).
Results are checked against numpy integer oracles written here.  (The run finishing inside
the START write is this fake's simplification; ``test_pynq_sim.py`` runs the same backend
against the Verilated core, which runs while the host polls.)
"""

from __future__ import annotations

import numpy as np
import pytest

from programs import record_dot_gemm
from vtaforge.hw import regs
from vtaforge.hw.config import MemType, preset
from vtaforge.hw.isa import Insn, Module, Opcode, encode_program
from vtaforge.runtime.builder import ProgramBuilder
from vtaforge.runtime.bundle import make_device, run_raw as bundle_run_raw
from vtaforge.runtime.device import Buffer, DeviceError, ProgramError
from vtaforge.runtime.fsim import simulate
from vtaforge.runtime.mmio import (CoreBusyError, CoreDriver, CoreIdentityError, CoreTimeout,
                                   Watchdog, field_mask)
from vtaforge.runtime.pynq import (MIN_ALLOC_BYTES, BufferPool, CacheState, HostBuffer,
                                   PynqDevice, find_core, run_raw)

LINE = 64
PHYS_BASE = 0x0010_0000
C, S, L = Module.COMPUTE, Module.STORE, Module.LOAD


class FakeMemory:
    """Contiguous 'CMA' buffers with a separate CPU-cache view (see module docstring)."""

    def __init__(self, base=PHYS_BASE, log=None):
        self.next = base
        self.bufs = {}   # phys -> dict(cache, dram, synced)
        self.log = log if log is not None else []

    def allocate(self, nbytes):
        self.sizes = getattr(self, "sizes", []) + [nbytes]
        n = -(-nbytes // 4096) * 4096
        phys = self.next
        self.next += n + 4096  # a guard page between buffers
        rec = {"cache": np.zeros(n, np.uint8), "dram": np.zeros(n, np.uint8),
               "synced": np.zeros(n, np.uint8)}
        self.bufs[phys] = rec

        def flush():
            self.log.append(("flush", phys))
            dirty = self.dirty_lines(phys)
            for i in np.nonzero(dirty)[0]:
                sl = slice(i * LINE, (i + 1) * LINE)
                rec["dram"][sl] = rec["cache"][sl]   # whole line written back
            rec["synced"][:] = rec["cache"]

        def invalidate():
            self.log.append(("invalidate", phys))
            rec["cache"][:] = rec["dram"]
            rec["synced"][:] = rec["dram"]

        def free():
            self.log.append(("free", phys))
            del self.bufs[phys]

        return HostBuffer(phys, rec["cache"], flush, invalidate, free)

    def dirty_lines(self, phys):
        rec = self.bufs[phys]
        return (rec["cache"] != rec["synced"]).reshape(-1, LINE).any(axis=1)

    def any_dirty(self):
        return [p for p in self.bufs if self.dirty_lines(p).any()]


class FakeCore:
    """A register file at byte offsets; CTRL.START runs fsim on the fake DRAM."""

    def __init__(self, cfg, mem, *, fingerprint=None, hang=False, log=None):
        self.cfg, self.mem = cfg, mem
        self.regs = {r.offset: 0 for r in regs.REGISTERS}
        self.regs[regs.offset("FINGERPRINT")] = cfg.fingerprint if fingerprint is None \
            else fingerprint
        self.regs[regs.offset("VERSION")] = regs.REGMAP_VERSION
        self.hang = hang
        self.starts = 0
        self.faults = []
        self.log = log if log is not None else []

    def read(self, off):
        assert off % 4 == 0 and off in self.regs, f"read of unmapped offset 0x{off:x}"
        return self.regs[off]

    def write(self, off, value):
        assert off % 4 == 0 and off in self.regs, f"write of unmapped offset 0x{off:x}"
        if off == regs.offset("CTRL") and value & 1:
            self._start()
            return
        self.regs[off] = value

    def _start(self):
        self.starts += 1
        self.log.append(("start", None))
        dirty = self.mem.any_dirty()
        if dirty:
            self.faults.append(f"launch over host-dirty buffers {[hex(p) for p in dirty]}")
            raise AssertionError(self.faults[-1])
        self.regs[regs.offset("STATUS")] = 1  # BUSY, DONE low
        if self.hang:
            return
        top = max(p + r["dram"].size for p, r in self.mem.bufs.items())
        image = np.zeros(top, np.uint8)
        for p, r in self.mem.bufs.items():
            image[p:p + r["dram"].size] = r["dram"]
        addr = self.regs[regs.offset("INSN_ADDR_LO")] | (self.regs[regs.offset("INSN_ADDR_HI")] << 32)
        res = simulate(self.cfg, image, addr, self.regs[regs.offset("INSN_COUNT")],
                       regions=[(p, r["dram"].size) for p, r in self.mem.bufs.items()])
        for p, r in self.mem.bufs.items():
            r["dram"][:] = image[p:p + r["dram"].size]
        self.regs[regs.offset("CYCLES_LO")] = 4321
        self.regs[regs.offset("CYCLES_HI")] = 1
        self.regs[regs.offset("GEMM_COUNT")] = res.stats["gemm_counter"]
        self.regs[regs.offset("ALU_COUNT")] = res.stats["alu_counter"]
        self.regs[regs.offset("DMA_WR_BYTES")] = res.stats["dram_write_nbytes"]
        self.regs[regs.offset("STATUS")] = 2  # DONE


def board(cfg, base=PHYS_BASE, **kw):
    log = []
    mem = FakeMemory(base=base, log=log)
    core = FakeCore(cfg, mem, log=log, **{k: kw.pop(k) for k in ("fingerprint", "hang")
                                          if k in kw})
    dev = PynqDevice(cfg, mmio=core, allocator=mem, reg_base=0x43C00000, poll_s=0, **kw)
    return dev, core, mem, log


@pytest.fixture
def cfg():
    return preset("tiny")


# ------------------------------------------------------------------ end to end
def _gemm_program(dev, x, w):
    """out = int8(x @ w.T) per batch row, through the builder."""
    cfg = dev.config
    n_in = x.shape[0]
    xb, wb = dev.alloc(x.nbytes), dev.alloc(w.nbytes)
    dev.write(xb, x)
    dev.write(wb, w)
    ob = dev.alloc(cfg.elem_bytes(MemType.OUT))
    dev.write(ob, np.zeros(cfg.elem_bytes(MemType.OUT), np.uint8))  # zero-filled output
    b = ProgramBuilder(dev)
    record_dot_gemm(b, xb, wb, ob, n_in)
    return b, ob


def _oracle(cfg, x, w):
    # x: (n_in, BATCH, BLOCK_IN) int8, w: (n_in, BLOCK_OUT, BLOCK_IN) int8
    acc = np.zeros((cfg.BATCH, cfg.BLOCK_OUT), np.int64)
    for i in range(x.shape[0]):
        acc += x[i].astype(np.int64) @ w[i].astype(np.int64).T
    return ((acc + 128) % 256 - 128).astype(np.int8)


def _inputs(cfg, seed, n_in=3):
    r = np.random.default_rng(seed)
    x = r.integers(-128, 128, (n_in, cfg.BATCH, cfg.BLOCK_IN)).astype(np.int8)
    w = r.integers(-128, 128, (n_in, cfg.BLOCK_OUT, cfg.BLOCK_IN)).astype(np.int8)
    return x, w


def test_builder_program_end_to_end(cfg):
    dev, core, mem, log = board(cfg)
    x, w = _inputs(cfg, 1)
    b, ob = _gemm_program(dev, x, w)
    res = b.synchronize()
    out = dev.read(ob).view(np.int8).reshape(cfg.BATCH, cfg.BLOCK_OUT)
    np.testing.assert_array_equal(out, _oracle(cfg, x, w))
    assert core.starts == 1 and not core.faults
    # stats come from the counter registers
    assert res.cycles == 4321 + (1 << 32)
    assert res.stats["gemm_counter"] == 3
    # BR-22: every host-written buffer flushed before START, the output invalidated after
    # (maintenance is per pynq allocation: the pooled chunk holding each buffer)
    start = log.index(("start", None))
    flushed = {p for op, p in log[:start] if op == "flush"}
    assert {dev.allocation_of(b).addr for b in dev.buffers()} - flushed == set()
    assert ("invalidate", dev.allocation_of(ob).addr) in log[start:]
    assert dev.state(ob) is CacheState.CLEAN
    # pooled: few allocations, none of them tiny, however small the buffers
    assert min(mem.sizes) >= MIN_ALLOC_BYTES and len(mem.sizes) < len(dev.buffers())


def test_output_buffer_reused(cfg):
    """BR-22 (a): a reused, re-zeroed output buffer gives the right result every run."""
    dev, core, mem, log = board(cfg)
    for seed in range(3):
        x, w = _inputs(cfg, seed)
        b, ob = _gemm_program(dev, x, w)
        b.synchronize()
        out = dev.read(ob).view(np.int8).reshape(cfg.BATCH, cfg.BLOCK_OUT)
        np.testing.assert_array_equal(out, _oracle(cfg, x, w))
        for buf in dev.buffers():
            dev.free(buf)
    assert core.starts == 3 and not core.faults


# ------------------------------------------------------------------ cache state machine
def _finish_only(dev):
    cfg = dev.config
    ib = dev.alloc(16)
    dev.write(ib, encode_program(cfg, [Insn(opcode=Opcode.FINISH)]).reshape(-1))
    return ib


def test_manual_mode_refuses_launch_over_host_dirty(cfg):
    dev, core, mem, log = board(cfg, auto_cache=False)
    ib = _finish_only(dev)
    data = dev.alloc(128 << 10)  # a dedicated allocation: flushing ib does not reach it
    assert dev.allocation_of(data) != dev.allocation_of(ib)
    dev.write(data, np.ones(256, np.uint8))
    dev.flush(ib)
    with pytest.raises(DeviceError, match=r"refusing to launch: buffer at 0x[0-9a-f]+ "
                                          r"\(131072 bytes\) holds host writes not flushed"):
        dev.run(ib.addr, 1)
    assert core.starts == 0
    dev.flush(data)
    dev.run(ib.addr, 1)
    assert core.starts == 1 and not core.faults


def test_manual_mode_refuses_stale_read(cfg):
    dev, core, mem, log = board(cfg, auto_cache=False)
    x, w = _inputs(cfg, 7)
    b, ob = _gemm_program(dev, x, w)
    for buf in dev.buffers():
        dev.flush(buf)
    b.verify = False
    # the builder writes its own instruction/uop buffers: flush them as it would be told to
    orig_run = dev.run

    def run_flushing(*a, **k):
        for buf in dev.buffers():
            if dev.state(buf) is CacheState.HOST_DIRTY:
                dev.flush(buf)
        return orig_run(*a, **k)

    dev.run = run_flushing
    b.synchronize()
    assert dev.state(ob) is CacheState.DEVICE_WRITTEN
    with pytest.raises(DeviceError, match="written by the device and not invalidated"):
        dev.read(ob)
    dev.invalidate(ob)
    out = dev.read(ob).view(np.int8).reshape(cfg.BATCH, cfg.BLOCK_OUT)
    np.testing.assert_array_equal(out, _oracle(cfg, x, w))


def test_partial_host_write_after_device_write_keeps_device_bytes(cfg):
    """A host write into a device-written buffer must not write stale lines back later."""
    dev, core, mem, log = board(cfg, auto_cache=False, verify=False)
    buf = dev.alloc(256)
    dev.flush(buf)

    def dram_of(dev, mem, b):
        ch = dev.allocation_of(b)
        return mem.bufs[ch.addr]["dram"][b.addr - ch.addr:b.addr - ch.addr + b.nbytes]

    # pretend a run stored into buf: device DRAM changes, the CPU cache holds old lines
    dram_of(dev, mem, buf)[:] = 7
    dev._bufs[buf.addr].state = CacheState.DEVICE_WRITTEN
    with pytest.raises(DeviceError, match="invalidate it before writing"):
        dev.write(buf, b"\x01")
    dev2, _, mem2, _ = board(cfg, verify=False)  # auto mode: invalidates first
    b2 = dev2.alloc(256)
    dram_of(dev2, mem2, b2)[:] = 7
    dev2._bufs[b2.addr].state = CacheState.DEVICE_WRITTEN
    dev2.write(b2, b"\x01")
    dev2.flush(b2)
    d = dram_of(dev2, mem2, b2)
    assert d[0] == 1 and (d[1:] == 7).all()


def test_invalidate_keeps_host_writes_of_neighbours_in_the_chunk(cfg):
    """Invalidating a pooled chunk (XRT syncs whole buffers) must not drop a neighbour's
    unflushed host writes: the chunk is flushed first."""
    dev, core, mem, log = board(cfg, auto_cache=False, verify=False)
    a, b = dev.alloc(256), dev.alloc(256)
    assert dev.allocation_of(a) == dev.allocation_of(b)
    dev.flush(a)
    dev._bufs[a.addr].state = CacheState.DEVICE_WRITTEN
    dev.write(b, np.full(256, 9, np.uint8))
    dev.invalidate(a)
    assert dev.state(a) is CacheState.CLEAN and dev.state(b) is CacheState.CLEAN
    ch = dev.allocation_of(b)
    assert (mem.bufs[ch.addr]["dram"][b.addr - ch.addr:][:256] == 9).all()


def test_invalidate_refuses_unflushed_host_writes(cfg):
    dev, *_ = board(cfg, auto_cache=False)
    buf = dev.alloc(64)
    dev.write(buf, b"\x05")
    with pytest.raises(DeviceError, match="discard host writes"):
        dev.invalidate(buf)


# ------------------------------------------------------------------ BR-24 fingerprint
def test_fingerprint_mismatch_refused(cfg):
    other = preset("batch2").fingerprint
    with pytest.raises(DeviceError) as ei:
        board(cfg, fingerprint=other)
    msg = str(ei.value)
    assert f"0x{other:08x}" in msg and f"0x{cfg.fingerprint:08x}" in msg
    assert "another configuration" in msg and "refusing" in msg


def test_fingerprint_no_core(cfg):
    with pytest.raises(DeviceError, match=r"0x00000000 .*is the bitstream loaded"):
        board(cfg, fingerprint=0)


def test_mmio_factory_gets_the_exact_base(cfg):
    """The register port comes from the factory (pynq.MMIO on a board), called with the
    base itself (in-page offset included: pynq.MMIO maps the page and adds it, BR-23)."""
    calls = []
    mem = FakeMemory()
    core = FakeCore(cfg, mem)

    def factory(base, length):
        calls.append((base, length))
        return core

    dev = PynqDevice(cfg, mmio_factory=factory, allocator=mem, reg_base=0x41200080, poll_s=0)
    assert calls == [(0x41200080, regs.REGMAP_SIZE)]
    assert dev.reg_read("FINGERPRINT") == cfg.fingerprint


def test_make_device_pynq_without_pynq_package(cfg, monkeypatch):
    import builtins

    real = builtins.__import__

    def no_pynq(name, globals=None, locals=None, fromlist=(), level=0):
        if name == "pynq" and level == 0:
            raise ImportError("No module named 'pynq'")
        return real(name, globals, locals, fromlist, level)

    monkeypatch.setattr(builtins, "__import__", no_pynq)
    monkeypatch.delenv("VTAFORGE_BITSTREAM", raising=False)

    class Regs:
        def read(self, off):
            return {regs.offset("FINGERPRINT"): cfg.fingerprint,
                    regs.offset("VERSION"): regs.REGMAP_VERSION}.get(off, 0)

        def write(self, off, v):
            pass

    with pytest.raises(DeviceError, match="needs the pynq package"):
        make_device("pynq", cfg, mmio=Regs())


# ------------------------------------------------------------------ verifier, timeout
def test_verifier_refuses_before_launch(cfg):
    dev, core, *_ = board(cfg)
    ib = dev.alloc(32)
    # a LOAD far outside every buffer, then FINISH
    bad = Insn(opcode=Opcode.LOAD, memory_type=MemType.INP, dram_base=0x3000000, y_size=1,
               x_size=1, x_stride=1)
    dev.write(ib, encode_program(cfg, [bad, Insn(opcode=Opcode.FINISH)]).reshape(-1))
    with pytest.raises(ProgramError):
        dev.run(ib.addr, 2)
    assert core.starts == 0
    ib2 = dev.alloc(16)
    dev.write(ib2, encode_program(cfg, [Insn(opcode=Opcode.GEMM)]).reshape(-1))
    with pytest.raises(ProgramError, match="FINISH"):
        dev.run(ib2.addr, 1)
    assert core.starts == 0


def test_fetch_outside_buffers(cfg):
    dev, core, *_ = board(cfg)
    dev.alloc(16)
    with pytest.raises(ProgramError, match="outside every allocated buffer"):
        dev.run(0x10, 1)


def test_region_outside_buffers_refused(cfg):
    dev, core, *_ = board(cfg)
    ib = _finish_only(dev)
    with pytest.raises(DeviceError, match="not inside an allocated buffer"):
        dev.run(ib.addr, 1, regions=[Buffer(ib.addr, 16), Buffer(0x1000, 64)])


def test_timeout(cfg):
    t = [0.0]

    def clock():
        t[0] += 0.01
        return t[0]

    dev, core, *_ = board(cfg, hang=True, timeout_s=0.5, clock=clock)
    ib = _finish_only(dev)
    with pytest.raises(ProgramError, match=r"board run not done after 0.5 s \(STATUS=0x1"):
        dev.run(ib.addr, 1)
    assert core.starts == 1
    # still busy: a second launch is refused rather than stacked
    with pytest.raises(DeviceError, match="still busy"):
        dev.run(ib.addr, 1)


def test_timeout_cycles_maps_to_seconds(cfg):
    t = [0.0]

    def clock():
        t[0] += 0.001
        return t[0]

    dev, core, *_ = board(cfg, hang=True, timeout_s=100, clock=clock)
    ib = _finish_only(dev)
    with pytest.raises(ProgramError, match=r"after 0.02 s"):
        dev.run(ib.addr, 1, timeout_cycles=int(0.02 * cfg.CLOCK_MHZ * 1e6))


# ------------------------------------------------------------------ raw images (exec)
def test_run_raw_relocates_and_matches_fsim(cfg):
    """An exec bundle (addresses from 0) runs relocated on the board, same final image."""
    r = np.random.default_rng(3)
    ie, we = cfg.elem_bytes(MemType.INP), cfg.elem_bytes(MemType.WGT)
    oe, ue = cfg.elem_bytes(MemType.OUT), cfg.elem_bytes(MemType.UOP)
    from vtaforge.hw.isa import encode_uops

    dram = np.zeros(8192, np.uint8)
    x_at, w_at, o_at, u_at, i_at = 1024, 2048, 4096, 3072, 256
    dram[x_at:x_at + ie] = r.integers(0, 256, ie)
    dram[w_at:w_at + we] = r.integers(0, 256, we)
    dram[u_at:u_at + ue] = encode_uops(cfg, [0], [0], [0]).view(np.uint8)
    prog = [
        Insn(opcode=Opcode.LOAD, memory_type=MemType.UOP, dram_base=u_at // ue, y_size=1,
             x_size=1, x_stride=1),
        Insn(opcode=Opcode.LOAD, memory_type=MemType.INP, dram_base=x_at // ie, y_size=1,
             x_size=1, x_stride=1),
        Insn(opcode=Opcode.LOAD, memory_type=MemType.WGT, dram_base=w_at // we, y_size=1,
             x_size=1, x_stride=1, push_next=1),
        Insn(opcode=Opcode.GEMM, pop_prev=1, reset=0, uop_bgn=0, uop_end=1, iter_out=1,
             iter_in=1, push_next=1),
        Insn(opcode=Opcode.STORE, memory_type=MemType.OUT, dram_base=o_at // oe, y_size=1,
             x_size=1, x_stride=1, pop_prev=1, push_prev=1),
        Insn(opcode=Opcode.FINISH, pop_next=1),
    ]
    dram[i_at:i_at + 16 * len(prog)] = encode_program(cfg, prog).reshape(-1)
    want = dram.copy()
    simulate(cfg, want, i_at, len(prog))
    dev, core, mem, log = board(cfg)
    got = dram.copy()
    res = run_raw(cfg, got, i_at, len(prog), device=dev)
    np.testing.assert_array_equal(got, want)
    assert core.starts == 1 and res.stats["gemm_counter"] == 1
    # the board saw relocated addresses, not the image's
    assert core.regs[regs.offset("INSN_ADDR_LO")] != i_at
    # the bundle registry reaches the same code path
    got2 = dram.copy()
    bundle_run_raw("pynq", cfg, got2, i_at, len(prog), device=board(cfg)[0])
    np.testing.assert_array_equal(got2, want)


def test_run_raw_rejects_like_fsim(cfg):
    dram = np.zeros(4096, np.uint8)
    dev, core, *_ = board(cfg)
    with pytest.raises(ProgramError, match="FINISH"):
        run_raw(cfg, dram, 0, 1, device=dev)
    assert core.starts == 0


# ------------------------------------------------------------------ verifier memory
def test_verifier_memory_sized_by_buffers_not_addresses(cfg, monkeypatch):
    """Buffers near 1 GiB: the verifier's image holds the instructions and micro-ops only
    (a few KiB), not an image up to the highest physical address, and it runs once per
    launch (the builder leaves it to the device, checks_in_run)."""
    import vtaforge.runtime.verify as verify_mod

    seen = []
    real = verify_mod.verify_program

    def spy(cfg_, dram, *a, **k):
        seen.append(dram.nbytes)
        return real(cfg_, dram, *a, **k)

    monkeypatch.setattr(verify_mod, "verify_program", spy)
    dev, core, mem, log = board(cfg, base=0x3FF0_0000)
    assert dev.checks_in_run
    x, w = _inputs(cfg, 11)
    b, ob = _gemm_program(dev, x, w)
    b.synchronize()
    np.testing.assert_array_equal(
        dev.read(ob).view(np.int8).reshape(cfg.BATCH, cfg.BLOCK_OUT), _oracle(cfg, x, w))
    assert len(seen) == core.starts == 1
    assert seen[0] < 64 << 10
    assert min(b.addr for b in dev.buffers()) >= 0x3FF0_0000


# ------------------------------------------------------------------ PL clock
@pytest.mark.parametrize("mhz", [100.0, 99.999, 100.5])
def test_pl_clock_at_clock_mhz_accepted(cfg, mhz):
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        dev, *_ = board(cfg, pl_clock_mhz=mhz)
    assert dev.clock_mhz == mhz


def test_pl_clock_faster_refused_slower_warned(cfg):
    with pytest.raises(DeviceError, match=r"fclk0 runs at 125 MHz, faster than the "
                                          r"CLOCK_MHZ = 100 .*refusing"):
        board(cfg, pl_clock_mhz=125.0)
    with pytest.warns(RuntimeWarning, match=r"fclk0 runs at 50 MHz, below CLOCK_MHZ = 100"):
        dev, core, *_ = board(cfg, pl_clock_mhz=50.0, hang=True, timeout_s=100)
    # the cycle-based timeout uses the measured clock: 1e6 cycles at 50 MHz = 20 ms
    t = [0.0]

    def clock():
        t[0] += 0.001
        return t[0]

    dev._clock = clock
    ib = _finish_only(dev)
    with pytest.raises(ProgramError, match=r"after 0.02 s"):
        dev.run(ib.addr, 1, timeout_cycles=1_000_000)


# ------------------------------------------------------------------ the core in ip_dict
def test_find_core_matches_the_module_reference_type():
    ip = {"vta_leds": {"type": "xilinx.com:ip:axi_gpio:2.0", "phys_addr": 0x41200000},
          "accel/core": {"type": "xilinx.com:module_ref:vta_wrapper:1.0",
                         "phys_addr": 0x43C40000, "addr_range": 0x1000},
          "ps7_0": {"type": "xilinx.com:ip:processing_system7:5.5"}}
    name, e = find_core(ip)
    assert name == "accel/core" and e["phys_addr"] == 0x43C40000
    assert find_core({k: v for k, v in ip.items() if k != "accel/core"}) is None
    ip["second"] = dict(ip["accel/core"], phys_addr=0x43C50000)
    with pytest.raises(DeviceError, match="2 vtaforge cores"):
        find_core(ip)


# ------------------------------------------------------------------ buffer pool
class _CountingAllocator:
    def __init__(self, base=0x1F00_0000, high_upto=0):
        self.next, self.sizes, self.freed, self.high_upto = base, [], [], high_upto

    def allocate(self, n):
        self.sizes.append(n)
        if n <= self.high_upto:
            phys = 0x1_0000_0000 + 0x10000 * len(self.sizes)
        else:
            phys = self.next
            self.next += -(-n // 4096) * 4096
        return HostBuffer(phys, np.zeros(n, np.uint8), lambda: None, lambda: None,
                          lambda p=phys: self.freed.append(p))


def test_buffer_pool_sizes_alignment_and_release():
    al = _CountingAllocator()
    pool = BufferPool(al, align=16, chunk_bytes=64 << 10)
    got = [pool.alloc(n) for n in (16, 64, 100, 4096, 16 << 10)]
    assert al.sizes == [64 << 10]  # one pooled chunk for all of them
    addrs = [a for a, _ in got]
    assert all(a % 64 == 0 for a in addrs) and len(set(addrs)) == len(addrs)
    big, cbig = pool.alloc((16 << 10) + 1)  # above chunk/4: its own allocation
    assert al.sizes[-1] == 20 << 10 and cbig.sub is None
    small, csmall = pool.alloc(8)
    assert csmall is got[0][1]
    pool.free(big, cbig)
    assert al.freed == [cbig.phys]
    for a, c in got + [(small, csmall)]:
        pool.free(a, c)
    assert al.freed[-1] == got[0][1].phys and not pool.chunks
    assert min(al.sizes) >= MIN_ALLOC_BYTES


def test_buffer_above_4gib_refused(cfg):
    """A 64-bit board whose allocations land above 4 GiB: refused with a clear error
    (the core's AXI addresses are 32-bit), never handed to the core."""
    core_mem = FakeMemory()
    core = FakeCore(cfg, core_mem)
    dev = PynqDevice(cfg, mmio=core, allocator=_CountingAllocator(high_upto=1 << 30),
                     poll_s=0)
    with pytest.raises(DeviceError, match=r"physical 0x1000[0-9a-f]{5}, which lies above "
                                          r"4 GiB, beyond the core's 32-bit AXI addresses"):
        dev.alloc(64)
    # XRT 2.17's behaviour (only buffers <= 4 KiB go high): the pool never asks for those
    al = _CountingAllocator(high_upto=4096)
    dev = PynqDevice(cfg, mmio=core, allocator=al, poll_s=0)
    bufs = [dev.alloc(n) for n in (16, 64, 4096, 5000, 70000)]
    assert max(b.end for b in bufs) < 1 << 32 and min(al.sizes) > 4096


# ------------------------------------------------------------------ the shared driver
class _RegFile:
    """A register file that records writes; STATUS is scripted."""

    def __init__(self, cfg, statuses=()):
        self.vals = {r.offset: 0 for r in regs.REGISTERS}
        self.vals[regs.offset("FINGERPRINT")] = cfg.fingerprint
        self.vals[regs.offset("VERSION")] = regs.REGMAP_VERSION
        self.statuses = list(statuses)
        self.writes = []

    def read(self, off):
        if off == regs.offset("STATUS") and self.statuses:
            return self.statuses.pop(0)
        return self.vals[off]

    def write(self, off, v):
        self.writes.append((off, v))
        self.vals[off] = v


def test_driver_launch_sequence_and_irq_en(cfg):
    rf = _RegFile(cfg)
    d = CoreDriver(rf)
    d.identify(cfg)
    d.launch(0x1_2345_6780, 7)
    o = regs.offset
    start, irq_en = field_mask("CTRL", "START"), field_mask("CTRL", "IRQ_EN")
    assert rf.writes == [(o("INSN_ADDR_LO"), 0x2345_6780), (o("INSN_ADDR_HI"), 1),
                         (o("INSN_COUNT"), 7), (o("CTRL"), start)]
    rf.writes.clear()
    rf.vals[o("CTRL")] = irq_en  # the host enabled the interrupt
    d.launch(0x100, 1, irq=None)  # keep it
    assert rf.writes[-1] == (o("CTRL"), irq_en | start)
    d.launch(0x100, 1, irq=True)
    assert rf.writes[-1] == (o("CTRL"), irq_en | start)
    with pytest.raises(DeviceError, match="does not fit INSN_COUNT"):
        d.launch(0x100, 1 << 32)


def test_driver_busy_wait_timeout_counters(cfg):
    busy, done = field_mask("STATUS", "BUSY"), field_mask("STATUS", "DONE")
    rf = _RegFile(cfg, statuses=[busy])
    d = CoreDriver(rf, where="window X")
    with pytest.raises(CoreBusyError, match=r"window X: the core is still busy \(STATUS=0x1\)"):
        d.launch(0x100, 1)
    # three busy polls, then done: wait returns the elapsed time, idles between polls
    rf.statuses = [busy, busy, busy, done]
    t, idles = [0], []
    dog = Watchdog(limit=100, now=lambda: t[0], idle=lambda: (idles.append(1), t.__setitem__(0, t[0] + 10)))
    assert d.wait(dog) == 30 and len(idles) == 3
    rf.statuses = [busy] * 20
    t[0] = 0
    with pytest.raises(CoreTimeout, match=r"window X: run not done after 100 s \(STATUS=0x1\)") as ei:
        d.wait(dog)
    assert ei.value.elapsed >= 100 and isinstance(ei.value, ProgramError)
    rf.vals[regs.offset("CYCLES_LO")], rf.vals[regs.offset("CYCLES_HI")] = 5, 2
    rf.vals[regs.offset("GEMM_COUNT")] = 9
    c = d.counters()
    assert c["cycles"] == (2 << 32) | 5 and c["gemm_counter"] == 9 and len(c) == 12


def test_driver_identity(cfg):
    rf = _RegFile(cfg)
    rf.vals[regs.offset("VERSION")] = 0x0002_0000
    with pytest.raises(CoreIdentityError, match="register-map version 0x00020000"):
        CoreDriver(rf).identify(cfg)
    rf.vals[regs.offset("VERSION")] = regs.REGMAP_VERSION | 0x0105  # minor/patch: fine
    CoreDriver(rf).identify(cfg)
