"""Differential tests of the generated core (through the Verilator backend, runtime/rtl)
against the functional simulator on small random legal programs: padded/strided loads of
every memory type, GEMM with repeated destinations (read-after-write hazards), ALU with
immediate and tensor operands, stores of narrow elements at odd lanes, back-to-back runs.
The expected DRAM image comes from fsim, which tests/runtime checks against numpy oracles.
"""

from __future__ import annotations

import numpy as np
import pytest

from vtaforge.hw.config import MemType, preset
from vtaforge.hw.isa import AluOp, Insn, Opcode, encode_program, encode_uops
from vtaforge.runtime.fsim import simulate

pytestmark = [pytest.mark.rtl, pytest.mark.slow]

rtl = pytest.importorskip("vtaforge.runtime.rtl")

UOP, INP, WGT, ACC, OUT, ACC8 = (MemType.UOP, MemType.INP, MemType.WGT, MemType.ACC,
                                 MemType.OUT, MemType.ACC8)


def _ld(mem, sram, base, y, x, stride, pads=(0, 0, 0, 0), **fl):
    return Insn(Opcode.LOAD, memory_type=int(mem), sram_base=sram, dram_base=base, y_size=y,
                x_size=x, x_stride=stride, y_pad_0=pads[0], y_pad_1=pads[1], x_pad_0=pads[2],
                x_pad_1=pads[3], **fl)


def random_program(cfg, rng):
    """A legal random program and its DRAM image: (dram, insn_addr, insn_count)."""
    al = cfg.dram_alignment
    mem = bytearray(al)

    def put(b):
        nonlocal mem
        pad = (-len(mem)) % al
        mem += bytes(pad)
        addr = len(mem)
        mem += bytes(b)
        return addr

    n_inp, n_wgt, n_acc = 24, 12, 64
    eb = {m: cfg.elem_bytes(m) for m in MemType}
    inp = rng.integers(-128, 128, n_inp * eb[INP], dtype=np.int64).astype(np.int8)
    wgt = rng.integers(-128, 128, n_wgt * eb[WGT], dtype=np.int64).astype(np.int8)
    acc = rng.integers(-2**20, 2**20, n_acc * cfg.BATCH * cfg.BLOCK_OUT).astype("<i4")
    acc8 = rng.integers(-128, 128, n_acc * eb[ACC8]).astype(np.int8)
    a_inp, a_wgt, a_acc, a_acc8 = (put(x.tobytes()) for x in (inp, wgt, acc, acc8))
    nu = 8
    same = rng.random() < 0.5
    dst = np.full(nu, 5) if same else rng.integers(0, 32, nu)
    g_uops = encode_uops(cfg, dst, rng.integers(0, 12, nu), rng.integers(0, 6, nu))
    a_alu = encode_uops(cfg, rng.integers(0, 32, nu), rng.integers(0, 32, nu), np.zeros(nu, int))
    a_g = put(g_uops.astype("<u4").tobytes())
    a_a = put(a_alu.astype("<u4").tobytes())
    out_bytes = 6 * 40 * eb[OUT]
    a_out = put(bytes(out_bytes))

    ins = []
    # load unit: INP with padding and stride, WGT
    ins.append(_ld(INP, 0, a_inp // eb[INP], 2, 5, 7, pads=tuple(int(v) for v in rng.integers(0, 3, 4))))
    ins.append(_ld(WGT, 0, a_wgt // eb[WGT], 2, 6, 6, push_next=1))
    # compute: uops, ACC (padded) and ACC8, GEMM, ALUs
    ins.append(_ld(UOP, 0, a_g // 4, 1, nu, nu))
    ins.append(_ld(UOP, nu, a_a // 4, 1, nu, nu))
    ins.append(_ld(ACC, 0, a_acc // eb[ACC], 4, 10, 12, pads=(1, 1, 1, 2)))
    if cfg.ACC_8BIT:
        ins.append(_ld(ACC8, 40, a_acc8 // eb[ACC8], 2, 8, 9))
    io, ii = int(rng.integers(1, 3)), int(rng.integers(1, 3))
    ins.append(Insn(Opcode.GEMM, pop_prev=1, uop_bgn=0, uop_end=nu, iter_out=io, iter_in=ii,
                    dst_factor_out=int(rng.integers(0, 8)), dst_factor_in=int(rng.integers(0, 8)),
                    src_factor_out=int(rng.integers(0, 4)), src_factor_in=int(rng.integers(0, 4)),
                    wgt_factor_out=int(rng.integers(0, 3)), wgt_factor_in=int(rng.integers(0, 3))))
    ops = [AluOp.MIN, AluOp.MAX, AluOp.ADD, AluOp.SHR] + ([AluOp.MUL] if cfg.ALU_MUL else [])
    for _ in range(4):
        op = ops[int(rng.integers(len(ops)))]
        use_imm = rng.random() < 0.5
        imm = int(rng.integers(-40, 40)) if op == AluOp.SHR else int(rng.integers(-2**15, 2**15))
        ins.append(Insn(Opcode.ALU, alu_opcode=int(op), uop_bgn=nu, uop_end=2 * nu,
                        iter_out=2, iter_in=1, dst_factor_out=int(rng.integers(0, 16)),
                        src_factor_out=int(rng.integers(0, 16)), use_imm=int(use_imm),
                        imm=imm if use_imm else 0))
    ins.append(Insn(Opcode.GEMM, uop_bgn=0, uop_end=2, iter_out=1, iter_in=2, dst_factor_in=50,
                    reset=1, push_next=1))
    # store: rows at an odd element offset (lane != 0 for narrow elements)
    ins.append(Insn(Opcode.STORE, memory_type=int(OUT), pop_prev=1, push_prev=1,
                    sram_base=int(rng.integers(0, 4)), dram_base=a_out // eb[OUT] + 1,
                    y_size=6, x_size=int(rng.integers(1, 12)), x_stride=13))
    ins.append(Insn(Opcode.FINISH, pop_next=1))
    prog = encode_program(cfg, ins).reshape(-1)
    ia = put(prog.tobytes())
    mem += bytes(64)
    return np.frombuffer(bytes(mem), dtype=np.uint8).copy(), ia, len(ins)


@pytest.mark.parametrize("name", ["tiny", "batch2"])
def test_random_programs_match_fsim(name):
    cfg = preset(name)
    rng = np.random.default_rng(11)
    for trial in range(6):
        dram, ia, n = random_program(cfg, rng)
        ref = dram.copy()
        simulate(cfg, ref, ia, n)
        got = dram.copy()
        kw = {} if trial % 2 == 0 else {"latency": (0, 6), "backpressure": 0.4, "seed": trial}
        res = rtl.run_raw(cfg, got, ia, n, timeout_cycles=500_000, **kw)
        diff = np.flatnonzero(got != ref)
        assert diff.size == 0, (trial, diff[:8], got[diff[:8]], ref[diff[:8]])
        assert res.cycles > 0


def test_back_to_back_runs_on_one_device():
    """Two launches on one device: the second's result is final when DONE rises (BR-17)."""
    from vtaforge.runtime.device import Buffer

    cfg = preset("tiny")
    rng = np.random.default_rng(5)
    dev = rtl.RtlDevice(cfg, 1 << 20, progress=False)
    try:
        for _ in range(2):
            dram, ia, n = random_program(cfg, rng)
            ref = dram.copy()
            simulate(cfg, ref, ia, n)
            dev.resize(dram.size)
            dev.mem[:] = dram
            res = dev.run(ia, n, regions=[Buffer(0, dram.size)])
            assert np.array_equal(dev.mem[:dram.size], ref)
            assert res.cycles > 0
    finally:
        dev.close()
