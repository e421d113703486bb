"""fsim speed: micro-op GEMMs per second at the pynq preset on a large raw program.

Two programs, each many GEMM instructions over 2048-micro-op loop nests:

- ``hazard-free``: every micro-op of a nest writes a distinct accumulator entry (one
  vectorised numpy step per nest);
- ``accumulate``: 16 micro-ops in a row add into the same entry (a reduction over input
  blocks, as in a convolution): one grouped (im2col) matmul per destination group.

Usage: ``python bench/fsim_speed.py [--insns N] [--config pynq]``.  Prints one line per
program: micro-op GEMMs, seconds, micro-op GEMMs per second, and MAC/s.  Anchor: upstream's
C++ fsim runs the same work one micro-op at a time (no published figure; the brief's goal
is > 1 M micro-op GEMMs per second).
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from vtaforge.hw.config import MemType, load_config
from vtaforge.hw.isa import Insn, Opcode, encode_program, encode_uops
from vtaforge.runtime.fsim import simulate


def build(cfg, n_gemm: int, accumulate: bool, rng):
    U = 64
    I, J = 8, 4  # 8 * 4 * 64 = 2048 micro-ops per GEMM
    if accumulate:  # dst repeats across 16 consecutive micro-ops
        dst, src, wgt = np.arange(U) // 16, np.arange(U), np.arange(U) % 16
        d, s, w = (J * (U // 16), U // 16), (J * U, U), (1, 0)
    else:
        dst, src, wgt = np.arange(U), np.arange(U), np.arange(U) % 16
        d, s, w = (J * U, U), (J * U, U), (1, 0)
    eb = {m: cfg.elem_bytes(m) for m in MemType}
    align = cfg.dram_alignment
    inp = rng.integers(-128, 128, (cfg.INP_DEPTH, eb[MemType.INP]), dtype=np.int64)
    wgts = rng.integers(-128, 128, (64, eb[MemType.WGT]), dtype=np.int64)
    uops = encode_uops(cfg, dst, src, wgt).astype("<u4")
    a_inp = align
    a_wgt = a_inp + inp.size
    a_uop = a_wgt + wgts.size
    a_ins = -(-(a_uop + uops.nbytes) // align) * align
    insns = [
        Insn(Opcode.LOAD, memory_type=MemType.INP, dram_base=a_inp // eb[MemType.INP],
             y_size=1, x_size=cfg.INP_DEPTH, x_stride=cfg.INP_DEPTH),
        Insn(Opcode.LOAD, memory_type=MemType.WGT, dram_base=a_wgt // eb[MemType.WGT],
             y_size=1, x_size=64, x_stride=64, push_next=1),
        Insn(Opcode.LOAD, memory_type=MemType.UOP, dram_base=a_uop // 4, y_size=1, x_size=U,
             x_stride=U, pop_prev=1),
    ]
    g = dict(uop_bgn=0, uop_end=U, iter_out=I, iter_in=J, dst_factor_out=d[0],
             dst_factor_in=d[1], src_factor_out=s[0], src_factor_in=s[1],
             wgt_factor_out=w[0], wgt_factor_in=w[1])
    insns.append(Insn(Opcode.GEMM, reset=1, **g))
    insns += [Insn(Opcode.GEMM, **g) for _ in range(n_gemm)]
    insns.append(Insn(Opcode.FINISH))
    prog = encode_program(cfg, insns).reshape(-1)
    dram = np.zeros(a_ins + prog.size, dtype=np.uint8)
    dram[a_inp:a_inp + inp.size] = inp.astype(np.int8).view(np.uint8).reshape(-1)
    dram[a_wgt:a_wgt + wgts.size] = wgts.astype(np.int8).view(np.uint8).reshape(-1)
    dram[a_uop:a_uop + uops.nbytes] = uops.view(np.uint8)
    dram[a_ins:] = prog
    return dram, a_ins, len(insns)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--insns", type=int, default=1000, help="GEMM instructions per program")
    ap.add_argument("--config", default="pynq")
    args = ap.parse_args()
    cfg = load_config(args.config)
    rng = np.random.default_rng(0)
    macs = cfg.BATCH * cfg.BLOCK_IN * cfg.BLOCK_OUT
    print(f"fsim speed, config {args.config} ({cfg.bitstream_name}), "
          f"{args.insns} GEMM instructions x 2048 micro-ops")
    simulate(cfg, *build(cfg, 1, False, rng))  # warm-up (BLAS thread control, caches)
    for acc in (False, True):
        dram, ia, n = build(cfg, args.insns, acc, rng)
        t0 = time.perf_counter()
        res = simulate(cfg, dram, ia, n)
        dt = time.perf_counter() - t0
        g = res.stats["gemm_counter"]
        name = "accumulate" if acc else "hazard-free"
        print(f"  {name:<12} {g:>10d} uop GEMMs  {dt:7.2f} s  {g / dt / 1e6:6.2f} M uop GEMM/s"
              f"  {g * macs / dt / 1e9:6.2f} GMAC/s")


if __name__ == "__main__":
    main()
