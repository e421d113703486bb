"""Raw programs on the Verilator simulation of the generated core, compared bit for bit with
the functional simulator (``fsim.simulate``, the executable form of the semantics) on the
same DRAM image, with an ideal bus and with random latency and back-pressure; plus the
register handshake (DONE low from START until FINISH, a second run after a first: BR-17).

Presets: ``tiny`` always; ``pynq`` and ``batch2`` are ``slow`` (their first Verilator build
takes minutes; later runs hit the build cache).
"""

from __future__ import annotations

import numpy as np
import pytest

from vtaforge.hw.config import preset
from vtaforge.runtime.device import Buffer
from vtaforge.runtime.fsim import simulate

from programs import AluOp, Image, MemType, alu, finish, gemm, ld, nop, rand_elems, st

pytestmark = pytest.mark.rtl

rtl = pytest.importorskip("vtaforge.runtime.rtl")
try:
    from vtaforge.hw.core import emit_verilog  # noqa: F401
except ImportError:  # pragma: no cover - the core lands separately
    pytest.skip("the Amaranth core (vtaforge.hw.core) is not available", allow_module_level=True)

PRESETS = [pytest.param("tiny", id="tiny"),
           pytest.param("pynq", id="pynq", marks=pytest.mark.slow),
           pytest.param("batch2", id="batch2", marks=pytest.mark.slow)]
BUSES = [pytest.param({}, id="ideal"),
         pytest.param(dict(latency=(1, 24), backpressure=0.4, seed=11), id="random-bp")]


@pytest.fixture(scope="module", params=PRESETS)
def cfg(request):
    c = preset(request.param)
    rtl.build_model(c)  # build once per preset (progress on stderr)
    return c


def compare(cfg, dram, ia, n, **bus):
    """Run on fsim and RTL; the whole final DRAM must match bit for bit."""
    ref = dram.copy()
    simulate(cfg, ref, ia, n)
    got = dram.copy()
    res = rtl.run_raw(cfg, got, ia, n, progress=False, **bus)
    diff = np.flatnonzero(ref != got)
    assert diff.size == 0, (f"{diff.size} bytes differ, first at 0x{diff[0]:x}: "
                            f"fsim {ref[diff[0]]} rtl {got[diff[0]]}")
    assert not (ref == dram).all() or n == 1, "the program stored nothing"
    return res


# ------------------------------------------------------------------------------ programs
def prog_padded_loads(cfg, rng):
    """ACC and ACC8 loads with padding on all four sides, stored back (x_stride > x_size)."""
    img = Image(cfg, guard=64)
    acc = img.put(rand_elems(rng, cfg, MemType.ACC, 24))
    out = img.zeros(cfg.elem_bytes(MemType.OUT) * 64)
    insns = [
        ld(MemType.ACC, 0, img.base(acc, MemType.ACC), 2, 3, stride=5, pads=(1, 2, 1, 1)),
        # 5 rows x 5 elements = 25 entries at 0..24
        nop(push_next=1),
        st(0, img.base(out, MemType.OUT), 5, 5, stride=7, pop_prev=1, push_prev=1),
        finish(pop_next=1),
    ]
    if cfg.ACC_8BIT:
        acc8 = img.put(rand_elems(rng, cfg, MemType.ACC8, 8))
        out2 = img.zeros(cfg.elem_bytes(MemType.OUT) * 16)
        insns[3:3] = [
            ld(MemType.ACC8, 32, img.base(acc8, MemType.ACC8), 2, 4, pads=(0, 1, 2, 0),
               pop_next=1),  # 3 rows x 6 = 18 entries at 32..49
            nop(push_next=1),
            st(32, img.base(out2, MemType.OUT), 1, 16, pop_prev=1, push_prev=1),
        ]
    return img.build(insns)


def prog_gemm(cfg, rng):
    """INP/WGT loads (padded INP), a micro-op kernel, GEMM with reset, accumulation over
    two outer iterations (back-to-back updates of one entry), and STORE."""
    img = Image(cfg, guard=64)
    n_inp, n_wgt, k = 6, 3, 6
    inp = img.put(rand_elems(rng, cfg, MemType.INP, n_inp))
    wgt = img.put(rand_elems(rng, cfg, MemType.WGT, n_wgt))
    # uops: dst i, src i (padded row adds zeros), wgt i % n_wgt
    uop = img.uops(np.arange(k), np.arange(k), np.arange(k) % n_wgt)
    out = img.zeros(cfg.elem_bytes(MemType.OUT) * 2 * k)
    insns = [
        ld(MemType.UOP, 0, img.base(uop, MemType.UOP), 1, k),
        ld(MemType.INP, 0, img.base(inp, MemType.INP), 1, n_inp - 1, pads=(0, 0, 0, 1)),
        ld(MemType.WGT, 0, img.base(wgt, MemType.WGT), 1, n_wgt, push_next=1),
        gemm(0, k, iter_out=2, d=(k, 0), reset=1, pop_prev=1),  # zero acc[0, 2k)
        gemm(0, k, iter_out=2, iter_in=1, d=(0, 0), s=(0, 0), w=(0, 0)),
        gemm(0, k, iter_out=1, iter_in=2, d=(0, k), s=(0, 0), w=(0, 0), push_next=1),
        st(0, img.base(out, MemType.OUT), 1, 2 * k, pop_prev=1, push_prev=1),
        finish(pop_next=1),
    ]
    return img.build(insns)


def prog_alu(cfg, rng):
    """ALU ops with immediates (negative included) and with an accumulator source: ADD,
    MIN, MAX, SHR right and left (negative amount), and reset."""
    img = Image(cfg, guard=64)
    n = 8
    acc = img.put(rand_elems(rng, cfg, MemType.ACC, 2 * n, lo=-(1 << 20), hi=1 << 20))
    uop = img.uops(np.arange(n), np.arange(n) + n)
    out = img.zeros(cfg.elem_bytes(MemType.OUT) * 3 * n)
    insns = [
        ld(MemType.UOP, 0, img.base(uop, MemType.UOP), 1, n),
        ld(MemType.ACC, 0, img.base(acc, MemType.ACC), 1, 2 * n),
        alu(AluOp.ADD, 0, n, sfo=0),                     # acc[i] += acc[i + n]
        alu(AluOp.ADD, 0, n, imm=-1234),
        alu(AluOp.SHR, 0, n, imm=3),
        alu(AluOp.MAX, 0, n, imm=-300),
        alu(AluOp.MIN, 0, n, imm=20000),
        alu(AluOp.MAX, 0, 4, iter_out=2, dfo=4, sfo=4),  # max with the source half
        alu(AluOp.SHR, 0, n, iter_out=1, imm=-2),        # shift left by 2
        alu(AluOp.ADD, 0, 2, iter_out=2, dfo=n, sfo=0, reset=1),  # zero acc[n..n+4)
        nop(push_next=1),
        st(0, img.base(out, MemType.OUT), 1, 2 * n, pop_prev=1, push_prev=1),
        finish(pop_next=1),
    ]
    return img.build(insns)


def prog_pipeline(cfg, rng):
    """Two rounds of load -> GEMM -> ALU -> store with tokens both ways (load waits for
    compute to release the buffers; compute waits for store)."""
    img = Image(cfg, guard=64)
    k = 4
    inps = [img.put(rand_elems(rng, cfg, MemType.INP, k)) for _ in range(2)]
    wgt = img.put(rand_elems(rng, cfg, MemType.WGT, 1))
    uop = img.uops(np.arange(k), np.arange(k), np.zeros(k, int))
    auop = img.uops(np.arange(k), np.arange(k))
    outs = [img.zeros(cfg.elem_bytes(MemType.OUT) * k) for _ in range(2)]
    insns = [ld(MemType.UOP, 0, img.base(uop, MemType.UOP), 1, k),
             ld(MemType.UOP, k, img.base(auop, MemType.UOP), 1, k)]
    for r in range(2):
        insns += [
            ld(MemType.INP, 0, img.base(inps[r], MemType.INP), 1, k, pop_next=r > 0),
            ld(MemType.WGT, 0, img.base(wgt, MemType.WGT), 1, 1, push_next=1),
            gemm(0, k, reset=1, pop_prev=1, pop_next=r > 0),
            gemm(0, k, push_prev=1),
            alu(AluOp.SHR, k, 2 * k, imm=1),
            alu(AluOp.MIN, k, 2 * k, imm=50, push_next=1),
            st(0, img.base(outs[r], MemType.OUT), 1, k, pop_prev=1, push_prev=1),
        ]
    insns += [nop(MemType.INP, pop_next=1), finish(pop_next=1)]
    return img.build(insns)


PROGRAMS = [prog_padded_loads, prog_gemm, prog_alu, prog_pipeline]


@pytest.mark.parametrize("bus", BUSES)
@pytest.mark.parametrize("prog", PROGRAMS, ids=lambda p: p.__name__[5:])
def test_program_matches_fsim(cfg, prog, bus):
    rng = np.random.default_rng(hash((cfg.fingerprint, prog.__name__)) & 0xFFFF)
    dram, ia, n = prog(cfg, rng)
    res = compare(cfg, dram, ia, n, **bus)
    assert res.cycles > 0
    assert res.stats["dram_read_nbytes"] > 0


def test_counters(cfg):
    rng = np.random.default_rng(3)
    dram, ia, n = prog_gemm(cfg, rng)
    ref = simulate(cfg, dram.copy(), ia, n)
    res = rtl.run_raw(cfg, dram, ia, n, progress=False)
    assert res.stats["gemm_counter"] == ref.stats["gemm_counter"]
    assert res.stats["alu_counter"] == ref.stats["alu_counter"]
    assert res.stats["compute_busy"] > 0
    assert res.cycles >= res.stats["compute_busy"]


def test_done_handshake_and_second_run(cfg):
    """BR-17: DONE is 0 from START until FINISH on the second run too, and its output is
    final when DONE is seen."""
    rng = np.random.default_rng(4)
    dram, ia, n = prog_gemm(cfg, rng)
    ref = dram.copy()
    simulate(cfg, ref, ia, n)
    dev = rtl.RtlDevice(cfg, dram.size, progress=False, latency=(10, 10))
    try:
        dev.mem[:dram.size] = dram
        for run in range(2):
            dev.launch(ia, n)
            polls = 0
            while not dev.reg_read("STATUS") & 2:
                polls += 1
                assert polls < 10000
                dev.step(8)
            assert polls > 0, f"run {run}: DONE seen right after START"
            np.testing.assert_array_equal(dev.mem[:dram.size], ref)
            assert dev.reg_read("CYCLES_LO") > 0
    finally:
        dev.close()


def test_watchdog_on_real_core(cfg):
    """A run stopped by the watchdog names each unit's state from DEBUG_STATE_NAMES."""
    rng = np.random.default_rng(5)
    dram, ia, n = prog_gemm(cfg, rng)
    with pytest.raises(rtl.device.ProgramError, match=r"RTL watchdog: run not done after "
                                                      r"20 cycles; fetch=\w+\(\d+\)"):
        rtl.run_raw(cfg, dram, ia, n, progress=False, timeout_cycles=20, poll_interval=4,
                    latency=(50, 50))


def test_device_run_with_buffers_and_verifier(cfg):
    """RtlDevice.run on allocated buffers: the verifier runs first (its data-independent
    counters join the stats), results match fsim, and a program whose DMA leaves the live
    buffers is refused before launch."""
    rng = np.random.default_rng(6)
    dram, ia, n = prog_alu(cfg, rng)
    ref = dram.copy()
    simulate(cfg, ref, ia, n)
    with rtl.RtlDevice(cfg, 1 << 20, progress=False) as dev:
        buf = dev.alloc(dram.size)  # the image's addresses shift by buf.addr: relocate
        assert buf.addr % cfg.dram_alignment == 0
        # the image's own addresses start at 0: place it at 0 with a buffer covering it
        dev.mem[:dram.size] = dram
        res = dev.run(ia, n, regions=[Buffer(0, dram.size)])
        np.testing.assert_array_equal(dev.mem[:dram.size], ref)
        # ALU_COUNT counts non-reset micro-ops, as fsim's alu_counter does
        assert res.stats["alu_counter"] == simulate(cfg, dram.copy(), ia, n).stats["alu_counter"]
        assert "insn_count" in res.stats  # from the verifier
        c0 = dev.cycle
        with pytest.raises(rtl.device.ProgramError):
            dev.run(ia, n, regions=[Buffer(ia, n * 16)])  # data outside the regions
        assert dev.cycle == c0, "the core ran a program the verifier refused"
