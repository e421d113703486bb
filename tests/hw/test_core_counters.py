"""The core's performance counters agree with the functional simulator's statistics, and
the deadlock watchdog names the units that wait for dependency tokens.

Counters compared (RtlDevice register -> fsim stat key): GEMM_COUNT -> ``gemm_counter``
and ALU_COUNT -> ``alu_counter`` (non-reset micro-ops only, as upstream's fsim counts
them), DMA_RD_BYTES -> ``dram_read_nbytes`` (instruction and element bytes a program reads)
and DMA_WR_BYTES -> ``dram_write_nbytes`` (bytes stored).  The expected micro-op counts of
the hand-made program are also computed in the test from its loop nests.
"""

from __future__ import annotations

import numpy as np
import pytest

from vtaforge.hw.config import MemType, preset
from vtaforge.hw.isa import AluOp
from vtaforge.runtime.device import ProgramError
from randprog import generate

from programs import Image, alu, assert_same_dram, finish, gemm, ld, rand_elems, run_both, st

pytestmark = pytest.mark.rtl

rtl = pytest.importorskip("vtaforge.runtime.rtl")

#: stat keys that both the RTL counters and fsim report
SHARED_KEYS = ("gemm_counter", "alu_counter", "dram_read_nbytes", "dram_write_nbytes")

INP, WGT, ACC, ACC8, UOP = MemType.INP, MemType.WGT, MemType.ACC, MemType.ACC8, MemType.UOP


@pytest.fixture(scope="module")
def cfg():
    c = preset("tiny")
    rtl.build_model(c, progress=False)
    return c


def counter_program(cfg, rng):
    """Every micro-op kind (GEMM and ALU, reset or not, immediate or tensor operand), padded
    loads of every memory type, stores at odd element offsets.  Returns the image and the
    expected non-reset GEMM and ALU micro-op counts."""
    img = Image(cfg)
    eb = {m: cfg.elem_bytes(m) for m in MemType}
    a_inp = img.put(rand_elems(rng, cfg, INP, 16))
    a_wgt = img.put(rand_elems(rng, cfg, WGT, 8))
    a_acc = img.put(rand_elems(rng, cfg, ACC, 12, -1000, 1000))
    a_acc8 = img.put(rand_elems(rng, cfg, ACC8, 8))
    a_u = img.uops([0, 1, 2, 3], [0, 1, 2, 3], [0, 1, 2, 3])     # GEMM
    a_a = img.uops([10, 11, 12], [20, 21, 22], [0, 0, 0])          # ALU
    a_out = img.zeros(64 * eb[MemType.OUT])
    insns = [
        ld(INP, 0, img.base(a_inp, INP), 2, 8, 8),
        ld(WGT, 0, img.base(a_wgt, WGT), 1, 8, 8, pads=(0, 0, 1, 0), push_next=1),
        ld(UOP, 0, img.base(a_u, UOP), 1, 4),
        ld(UOP, 4, img.base(a_a, UOP), 1, 3),
        ld(ACC, 20, img.base(a_acc, ACC), 3, 4, 4, pads=(1, 0, 0, 1)),
        ld(ACC8, 40, img.base(a_acc8, ACC8), 2, 4, 4),
        gemm(0, 4, 2, 2, d=(4, 0), reset=1),                                  # 16 reset
        gemm(0, 4, 2, 3, d=(4, 0), s=(1, 2), w=(1, 0), pop_prev=1),            # 24
        gemm(0, 2, 1, 1),                                                     # 2
        gemm(0, 0, 3, 3),                                                     # empty range
        gemm(0, 4, 0, 3),                                                     # iter_out 0
        alu(AluOp.MIN, 4, 7, 2, 1, d=(1, 0), reset=1),                        # 6 reset
        alu(AluOp.ADD, 4, 7, 2, 2, d=(1, 0), s=(0, 1)),                       # 12 tensor
        alu(AluOp.SHR, 4, 7, 1, 2, d=(0, 1), imm=3),                          # 6 imm
        alu(AluOp.MAX, 4, 7, 0, 2, imm=3),                                    # none
        alu(AluOp.ADD, 4, 6, 1, 1, imm=-5, push_next=1),                      # 2
        st(1, img.base(a_out, MemType.OUT) + 1, 3, 5, 7, pop_prev=1),
        st(20, img.base(a_out, MemType.OUT) + 30, 2, 3, 3, push_prev=1),
        finish(pop_next=1),
    ]
    dram, ia, n = img.build(insns)
    return (dram, ia, n), 24 + 2, 12 + 6 + 2


def _check_counters(r_f, r_r, what):
    bad = {k: (r_f.stats[k], r_r.stats[k]) for k in SHARED_KEYS if r_f.stats[k] != r_r.stats[k]}
    assert not bad, f"{what}: counters differ (fsim, rtl): {bad}"


def test_counters_hand_made_program(cfg):
    rng = np.random.default_rng(3)
    (dram, ia, n), n_gemm, n_alu = counter_program(cfg, rng)
    r_f, r_r, ref, got = run_both(rtl, cfg, dram, ia, n)
    assert_same_dram(ref, got, "hand-made counter program")
    # the oracle: micro-op counts from the loop nests above (reset micro-ops excluded)
    assert r_f.stats["gemm_counter"] == n_gemm and r_f.stats["alu_counter"] == n_alu
    _check_counters(r_f, r_r, "hand-made counter program")
    # bytes: instructions + elements read; elements stored
    eb = {m: cfg.elem_bytes(m) for m in MemType}
    rd = 16 * n + 16 * eb[INP] + 8 * eb[WGT] + 7 * 4 + 12 * eb[ACC] + 8 * eb[ACC8]
    assert r_r.stats["dram_read_nbytes"] == rd
    assert r_r.stats["dram_write_nbytes"] == (15 + 6) * eb[MemType.OUT]


@pytest.mark.parametrize("bus", [{}, dict(latency=(0, 5), backpressure=0.3, seed=7)],
                         ids=["ideal", "random-bus"])
def test_counters_random_programs(cfg, bus):
    """Seeded random legal programs: every shared counter equals fsim's, and the final DRAM
    images agree (the counters do not depend on bus timing)."""
    for seed in range(4):
        p = generate(cfg, 1000 + seed)
        r_f, r_r, ref, got = run_both(rtl, cfg, p.dram, p.insn_addr, p.insn_count, **bus)
        assert_same_dram(ref, got, p.description())
        _check_counters(r_f, r_r, p.description())


# ----------------------------------------------------------------------------- dbg_state
def deadlock_program(cfg, n_filler):
    """Load, compute and store each wait for a token nobody pushes; ``n_filler`` compute
    no-ops behind the blocked GEMM fill the compute command queue so fetch waits too."""
    img = Image(cfg)
    a_inp = img.put(bytes(4 * cfg.elem_bytes(INP)))
    a_out = img.zeros(4 * cfg.elem_bytes(MemType.OUT))
    insns = [
        ld(INP, 0, img.base(a_inp, INP), 1, 4, pop_next=1),       # waits for G2L
        st(0, img.base(a_out, MemType.OUT), 1, 4, pop_prev=1),    # waits for G2S
        gemm(0, 1, 1, 1, pop_prev=1),                             # waits for L2G
    ]
    insns += [gemm(0, 0, 0, 0)] * n_filler                        # compute no-ops
    insns.append(finish())
    return img.build(insns)


def test_watchdog_names_wait_token(cfg):
    """A deadlocked program: the watchdog message names WAIT_TOKEN for the three units and
    WAIT_QUEUE for fetch (its next instruction has no room in the compute queue)."""
    from vtaforge.hw.core import DEBUG_STATE_NAMES

    for unit in ("load", "compute", "store"):
        assert "WAIT_TOKEN" in DEBUG_STATE_NAMES[unit].values()
    assert "WAIT_QUEUE" in DEBUG_STATE_NAMES["fetch"].values()
    dram, ia, n = deadlock_program(cfg, cfg.INSN_QUEUE_DEPTH + 8)
    with pytest.raises(ProgramError) as ei:
        rtl.run_raw(cfg, dram.copy(), ia, n, progress=False, verify=False,
                    timeout_cycles=20_000)
    msg = str(ei.value)
    assert "watchdog" in msg
    for unit in ("load", "compute", "store"):
        assert f"{unit}=WAIT_TOKEN(" in msg, msg
    assert "fetch=WAIT_QUEUE(" in msg, msg


def test_watchdog_fetch_done_units_wait(cfg):
    """Same deadlock with a short program: fetch has dispatched everything (IDLE), the three
    units report WAIT_TOKEN; after the watchdog the device runs a good program."""
    dram, ia, n = deadlock_program(cfg, 2)
    dev = rtl.RtlDevice(cfg, 1 << 20, progress=False, verify=False, timeout_cycles=5_000)
    try:
        from vtaforge.runtime.device import Buffer

        dev.resize(dram.size)
        dev.mem[:] = dram
        with pytest.raises(ProgramError, match=r"fetch=IDLE\(0\), load=WAIT_TOKEN\(1\), "
                                               r"compute=WAIT_TOKEN\(1\), store=WAIT_TOKEN\(1\)"):
            dev.run(ia, n, regions=[Buffer(0, dram.size)])
        rng = np.random.default_rng(9)
        (good, gia, gn), _, _ = counter_program(cfg, rng)
        dev.resize(good.size)
        dev.mem[:] = good
        ref = good.copy()
        from vtaforge.runtime.fsim import simulate

        simulate(cfg, ref, gia, gn)
        dev.run(gia, gn, regions=[Buffer(0, good.size)])
        assert_same_dram(ref, dev.mem[:good.size].copy(), "run after a watchdog reset")
    finally:
        dev.close()
