"""Every configuration ``VTAConfig`` accepts either elaborates into a core or is refused with
a clear :class:`ConfigError` (fast: Amaranth elaboration only, plus an RTLIL netlist for a few
small ones); and unusual configurations run bit-exactly against fsim under Verilator
(``rtl``, ``slow``): ALU MUL with LUT multipliers next to DSP-packed pairs, a 32-bit and a
128-bit AXI bus.
"""

from __future__ import annotations

import random

import numpy as np
import pytest
from amaranth.hdl import Fragment

from vtaforge.hw.config import RANGES, ConfigError, MemType, VTAConfig, preset
from vtaforge.hw.core import VTACore
from vtaforge.hw.isa import AluOp

from programs import Image, alu, assert_same_dram, finish, ld, run_both, st

#: elaboration time grows with the multiplier count; the sample stays at or below this
MAX_MACS = 256


def _elem_log_bytes(bits: int) -> int:
    return (bits // 8).bit_length() - 1


def sample_config_dict(r: random.Random) -> dict:
    """One random config dict over the ranges of hw/config.py: widths 8/16 (acc 16/32),
    BATCH 1..16, BLOCK_IN/BLOCK_OUT 2..128, bus 32..512 bits, queue depths from 1, ACC_8BIT
    and ALU_MUL on or off, DSP_PACKING 1/2, any LUT_MULTIPLIERS; buffer sizes chosen to give
    2..1024 entries (the config class may still refuse the combination)."""
    li, lw = r.choice([3, 4]), r.choice([3, 4])
    la = r.choice([4, 5]) if max(li, lw) <= 4 else 5
    while True:
        lb, bi, bo = r.randint(0, 4), r.randint(1, 7), r.randint(1, 7)
        if (1 << (lb + bi + bo)) <= MAX_MACS:
            break
    n_mul = 1 << (lb + bi + bo)
    d = dict(TARGET="sim", LOG_INP_WIDTH=li, LOG_WGT_WIDTH=lw, LOG_ACC_WIDTH=la,
             LOG_BATCH=lb, LOG_BLOCK_IN=bi, LOG_BLOCK_OUT=bo,
             LOG_BUS_WIDTH=r.randint(*RANGES["LOG_BUS_WIDTH"]),
             INSN_QUEUE_DEPTH=r.choice([1, 2, 3, 16, 512, 4096]),
             TOKEN_QUEUE_DEPTH=r.choice([1, 2, 5, 255, 1024]),
             ACC_8BIT=r.random() < 0.5, ALU_MUL=r.random() < 0.5,
             DSP_PACKING=r.choice([1, 2]),
             LUT_MULTIPLIERS=r.choice([0, 1, r.randint(0, n_mul), n_mul]))
    inp = _elem_log_bytes((1 << lb) * (1 << bi) * (1 << li))
    wgt = _elem_log_bytes((1 << bo) * (1 << bi) * (1 << lw))
    acc = _elem_log_bytes((1 << lb) * (1 << bo) * (1 << la))
    d["LOG_UOP_BUFF_SIZE"] = r.randint(8, 13)
    d["LOG_INP_BUFF_SIZE"] = max(8, inp + r.randint(1, 10))
    d["LOG_WGT_BUFF_SIZE"] = max(8, wgt + r.randint(1, 6))
    d["LOG_ACC_BUFF_SIZE"] = max(8, acc + r.randint(1, 10))
    return d


#: hand-picked extremes on top of the random sample
EXTREMES = [
    dict(TARGET="sim", LOG_BLOCK_IN=7, LOG_BLOCK_OUT=1, LOG_INP_BUFF_SIZE=10,
         LOG_WGT_BUFF_SIZE=11, LOG_ACC_BUFF_SIZE=9, LOG_BUS_WIDTH=5),
    dict(TARGET="sim", LOG_BLOCK_IN=1, LOG_BLOCK_OUT=7, LOG_INP_BUFF_SIZE=8,
         LOG_WGT_BUFF_SIZE=11, LOG_ACC_BUFF_SIZE=12, LOG_BUS_WIDTH=9, ALU_MUL=True),
    dict(TARGET="sim", LOG_BATCH=4, LOG_BLOCK_IN=1, LOG_BLOCK_OUT=1, LOG_INP_BUFF_SIZE=9,
         LOG_WGT_BUFF_SIZE=8, LOG_ACC_BUFF_SIZE=11, LOG_BUS_WIDTH=5, TOKEN_QUEUE_DEPTH=1,
         INSN_QUEUE_DEPTH=1),
    dict(TARGET="sim", LOG_INP_WIDTH=4, LOG_WGT_WIDTH=4, LOG_ACC_WIDTH=4, LOG_BLOCK=2,
         LOG_INP_BUFF_SIZE=9, LOG_WGT_BUFF_SIZE=9, LOG_ACC_BUFF_SIZE=9, DSP_PACKING=2,
         ACC_8BIT=False, ALU_MUL=True, LUT_MULTIPLIERS=16, LOG_BUS_WIDTH=9),
    dict(TARGET="sim", LOG_BLOCK=2, LOG_UOP_BUFF_SIZE=8, LOG_INP_BUFF_SIZE=8,
         LOG_WGT_BUFF_SIZE=8, LOG_ACC_BUFF_SIZE=8, ALU_MUL=True, LUT_MULTIPLIERS=5,
         DSP_PACKING=2, LOG_BUS_WIDTH=7),
    # int4 weights: packed pairs and LUT multipliers of 8x4 bits
    dict(TARGET="sim", LOG_WGT_WIDTH=2, LOG_BLOCK_IN=3, LOG_BLOCK_OUT=2, LOG_INP_BUFF_SIZE=9,
         LOG_WGT_BUFF_SIZE=9, LOG_ACC_BUFF_SIZE=10, DSP_PACKING=2, LUT_MULTIPLIERS=3),
]


def _configs(seed: int, n: int):
    r = random.Random(seed)
    out = [sample_config_dict(r) for _ in range(n)]
    return EXTREMES + out


def _make(d):
    """The config, or None when the config class refuses it with a ConfigError (a clear
    refusal); any other exception propagates and fails the test."""
    try:
        return VTAConfig.from_dict(d)
    except ConfigError as e:
        assert str(e) and "=" in str(e), f"unclear refusal for {d}: {e!r}"
        return None


def test_sampled_configs_elaborate():
    """A seeded sample of valid configs: every one the class accepts elaborates."""
    built = 0
    for d in _configs(2024, 30):
        cfg = _make(d)
        if cfg is None:
            continue
        try:
            Fragment.get(VTACore(cfg), None)
        except ConfigError:
            continue
        except Exception as e:  # pragma: no cover - a failure names the config
            raise AssertionError(f"VTACore failed to elaborate {cfg.to_dict()}: "
                                 f"{type(e).__name__}: {e}") from e
        built += 1
    assert built >= 25


def test_small_configs_build_netlists():
    """A few small configs all the way to an RTLIL netlist (catches driver conflicts and
    width errors that elaboration alone does not)."""
    from amaranth.back import rtlil

    picked = [EXTREMES[2], EXTREMES[4]]
    r = random.Random(7)
    while len(picked) < 5:
        d = sample_config_dict(r)
        if (1 << (d["LOG_BATCH"] + d["LOG_BLOCK_IN"] + d["LOG_BLOCK_OUT"])) <= 32:
            picked.append(d)
    for d in picked:
        cfg = _make(d)
        if cfg is None:
            continue
        text = rtlil.convert(VTACore(cfg), name="vta_core")
        assert "module \\vta_core" in text, d


# ----------------------------------------------------------------------------- Verilator


def _tiny(**kw) -> VTAConfig:
    return preset("tiny").replace(**kw)


#: 32-bit accumulator values that stress a wrapping multiply
EDGE = [-(1 << 31), (1 << 31) - 1, -1, 0, 1, 2, -2, 1 << 16, -(1 << 16), 0x7FFF, -0x8000,
        0xFFFF, 46341, -46341, 0x12345678, -0x12345678, 1 << 30, 3, -3, 0x55555555]
IMMS = [-32768, 32767, -1, 0, 3, 255, -256]


def mul_edge_program(cfg, rng):
    """ALU MUL with a tensor operand and with immediates on edge values; every 32-bit result
    is exposed byte by byte (copy, SHR by 0/8/16/24, store), since a STORE keeps only the low
    8 bits.  Returns ``(dram, insn_addr, insn_count)``."""
    lanes = cfg.BATCH * cfg.BLOCK_OUT
    N = 8                                      # entries per region
    regions = 2 + len(IMMS)                    # 0: a*b, 1: b, 2..: a*imm
    S = regions * N                            # scratch region
    img = Image(cfg)

    def vals():
        return np.array([EDGE[i] for i in rng.integers(0, len(EDGE), N * lanes)], "<i4")

    a = img.put(vals())
    b = img.put(vals())
    ebo = cfg.elem_bytes(MemType.OUT)
    shown = [0] + list(range(2, regions))
    out = img.zeros(len(shown) * 4 * N * ebo)
    # uop r < regions: dst r*N, src N (the tensor operand b); uop regions + r: dst S, src r*N
    dsts = [r * N for r in range(regions)] + [S] * regions
    srcs = [N] * regions + [r * N for r in range(regions)]
    u = img.uops(dsts, srcs, [0] * len(dsts))
    A, B = img.base(a, MemType.ACC), img.base(b, MemType.ACC)
    insns = [ld(MemType.UOP, 0, img.base(u, MemType.UOP), 1, len(dsts)),
             ld(MemType.ACC, 0, A, 1, N), ld(MemType.ACC, N, B, 1, N)]
    for m in range(len(IMMS)):
        insns.append(ld(MemType.ACC, (2 + m) * N, A, 1, N))
    insns.append(alu(AluOp.MUL, 0, 1, N, 1, d=(1, 0), s=(1, 0)))             # a * b
    for m, imm in enumerate(IMMS):
        insns.append(alu(AluOp.MUL, 2 + m, 3 + m, N, 1, d=(1, 0), imm=imm))   # a * imm
    o = img.base(out, MemType.OUT)
    for r in shown:
        cu = regions + r
        for sh in (0, 8, 16, 24):
            insns += [
                alu(AluOp.MIN, cu, cu + 1, N, 1, d=(1, 0), reset=1),             # S = 0
                alu(AluOp.ADD, cu, cu + 1, N, 1, d=(1, 0), s=(1, 0)),            # S = acc[r]
                alu(AluOp.SHR, cu, cu + 1, N, 1, d=(1, 0), imm=sh, push_next=1),
                st(S, o, 1, N, pop_prev=1, push_prev=1),
                alu(AluOp.MIN, cu, cu, 1, 1, pop_next=1),                        # token only
            ]
            o += N
    insns.append(finish())
    return img.build(insns)


def _compare_programs(rtl, cfg, progs, bus_kw=({},)):
    for i, (dram, ia, n, what) in enumerate(progs):
        bus = bus_kw[i % len(bus_kw)]
        r_f, r_r, ref, got = run_both(rtl, cfg, dram, ia, n, **bus)
        assert_same_dram(ref, got, what)
        for k in ("gemm_counter", "alu_counter", "dram_read_nbytes", "dram_write_nbytes"):
            assert r_f.stats[k] == r_r.stats[k], (what, k, r_f.stats[k], r_r.stats[k])


def _random_progs(cfg, seeds):
    from randprog import generate

    for s in seeds:
        p = generate(cfg, s)
        yield p.dram, p.insn_addr, p.insn_count, p.description()


RANDOM_BUS = ({}, dict(latency=(0, 6), backpressure=0.4, seed=3))


@pytest.mark.rtl
@pytest.mark.slow
def test_rtl_alu_mul_lut_multipliers():
    """ALU_MUL on, 5 of 16 GEMM products in LUT logic next to DSP-packed pairs."""
    rtl = pytest.importorskip("vtaforge.runtime.rtl")
    cfg = _tiny(ALU_MUL=True, LUT_MULTIPLIERS=5, DSP_PACKING=2)
    rng = np.random.default_rng(17)
    progs = [(*mul_edge_program(cfg, rng), f"MUL edge values {k}") for k in range(3)]
    progs += list(_random_progs(cfg, range(500, 508)))
    _compare_programs(rtl, cfg, progs, RANDOM_BUS)


@pytest.mark.rtl
@pytest.mark.slow
@pytest.mark.parametrize("log_bus", [5, 7], ids=["bus32", "bus128"])
def test_rtl_bus_width(log_bus):
    """A 32-bit bus (ACC elements span 4 beats, INP/OUT fill one) and a 128-bit bus (INP/OUT
    elements are lanes of a beat, ACC one beat)."""
    rtl = pytest.importorskip("vtaforge.runtime.rtl")
    cfg = _tiny(LOG_BUS_WIDTH=log_bus)
    progs = list(_random_progs(cfg, range(600, 610)))
    _compare_programs(rtl, cfg, progs, RANDOM_BUS)
