"""PynqDevice without a board: fake MMIO + fake cacheable memory + a simulated core.

The fake memory models a write-back CPU cache at 64-byte line granularity: the host's view
(``cache``) and the device's view (``dram``) are separate arrays; ``flush`` writes back the
lines the host changed since the last sync, ``invalidate`` reloads every line from DRAM
(dropping dirty ones).  The fake core's START runs the functional simulator on what DRAM
holds, so a forgotten flush gives stale inputs and a forgotten invalidate stale outputs,
and it refuses (records a fault) to start while any line is host-dirty (field-faults BR-22).
Results are checked against numpy integer oracles written here.
"""

from __future__ import annotations

import numpy as np
import pytest

from vtaforge.hw import regs
from vtaforge.hw.config import MemType, preset
from vtaforge.hw.isa import Insn, Module, Opcode, encode_program
from vtaforge.runtime.builder import ProgramBuilder
from vtaforge.runtime.bundle import make_device, run_raw as bundle_run_raw
from vtaforge.runtime.device import Buffer, DeviceError, ProgramError
from vtaforge.runtime.fsim import simulate
from vtaforge.runtime.pynq import CacheState, DevMemMMIO, PynqDevice, run_raw

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
        from vtaforge.runtime.pynq import HostBuffer

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


def board(cfg, **kw):
    log = []
    mem = FakeMemory(log=log)
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
    b.load_2d(xb, 0, MemType.INP, 0, 1, n_in, n_in)
    b.load_2d(wb, 0, MemType.WGT, 0, 1, n_in, n_in)
    b.dep_push(L, C)
    b.dep_pop(L, C)
    b.gemm("zero", lambda k: k.uop(0, 0, 0), reset=True)
    def mac(k):
        k.loop_begin(n_in, 0, 1, 1)
        k.uop(0, 0, 0)
        k.loop_end()

    b.gemm(("mac", n_in), mac)
    b.dep_push(C, S)
    b.dep_pop(C, S)
    b.store_2d(0, ob, 0, 1, 1, 1)
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
    start = log.index(("start", None))
    flushed = {p for op, p in log[:start] if op == "flush"}
    assert {xb.addr for xb in dev.buffers()} - flushed == set()
    assert ("invalidate", ob.addr) in log[start:]
    assert dev.state(ob) is CacheState.CLEAN


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
    data = dev.alloc(256)
    dev.write(data, np.ones(256, np.uint8))
    dev.flush(ib)
    with pytest.raises(DeviceError, match=r"refusing to launch: buffer at 0x[0-9a-f]+ "
                                          r"\(256 bytes\) holds host writes not flushed"):
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
    # pretend a run stored into buf: device DRAM changes, the CPU cache holds old lines
    mem.bufs[buf.addr]["dram"][:] = 7
    dev._bufs[buf.addr].state = CacheState.DEVICE_WRITTEN
    with pytest.raises(DeviceError, match="invalidate it before writing"):
        dev.write(buf, b"\x01")
    dev2, _, mem2, _ = board(cfg, verify=False)  # auto mode: invalidates first
    b2 = dev2.alloc(256)
    mem2.bufs[b2.addr]["dram"][:] = 7
    dev2._bufs[b2.addr].state = CacheState.DEVICE_WRITTEN
    dev2.write(b2, b"\x01")
    dev2.flush(b2)
    d = mem2.bufs[b2.addr]["dram"][:256]
    assert d[0] == 1 and (d[1:] == 7).all()


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


# ------------------------------------------------------------------ BR-23 MMIO page offset
@pytest.mark.parametrize("base", [0x0, 0x80, 0xFFC, 0x41200080])
def test_devmem_mmio_page_offset(tmp_path, base):
    """BR-23: a window not page-aligned; offset 0x10 (0 for the 4-byte window at 0xFFC)."""
    f = tmp_path / "devmem"
    size = (base & ~0xFFF) + 0x2000
    with open(f, "wb") as fh:
        fh.truncate(size)  # sparse
    length = 4 if base == 0xFFC else 0x80
    off = 0 if base == 0xFFC else 0x10
    m = DevMemMMIO(base, length, path=str(f))
    m.write(off, 0xA5C3_1E0F)
    assert m.read(off) == 0xA5C3_1E0F
    m.close()
    with open(f, "rb") as fh:
        fh.seek(base + off)
        assert int.from_bytes(fh.read(4), "little") == 0xA5C3_1E0F
        fh.seek((base & ~0xFFF) + off)  # the BR-23 bug would have written here
        assert fh.read(4) == b"\0\0\0\0" or (base & 0xFFF) == 0


def test_devmem_mmio_range_checks(tmp_path):
    f = tmp_path / "devmem"
    with open(f, "wb") as fh:
        fh.truncate(0x2000)
    m = DevMemMMIO(0x80, 0x80, path=str(f))
    with pytest.raises(DeviceError, match="outside the 0x80-byte window"):
        m.read(0x80)
    with pytest.raises(DeviceError, match="not 4-byte aligned"):
        m.write(0x2, 1)
    with pytest.raises(DeviceError, match="multiple of 4"):
        DevMemMMIO(0x82, 4, path=str(f))
    with pytest.raises(DeviceError, match="cannot open"):
        DevMemMMIO(0, 4, path=str(tmp_path / "missing"))
