"""Simulation speed of the ``rtl`` target (Verilator + C++ harness) on a GEMM-heavy program.

Prints cycles per second beside the anchors: upstream VTA's Chisel+Verilator simulator
(tsim) ran about 0.12 M cycles/s (ResNet-18: 7.73 M cycles in about 228 s); a bare 16x16
MAC array under Verilator with a C++ harness ran 0.83-0.98 M cycles/s here at -O2
(shared/reference/hardware-notes.md).  A figure, not a pass/fail test.

Measured at pynq (24 GEMMs x 256 x 256 micro-ops, 1.58 M cycles, 2-core machine, same
cycles and final memory before and after): with the input-combinational skip (see
runtime/rtl/harness.cpp) 0.75-0.81 M cycles/s (= cycles per CPU second at a load average
near 3), against 0.47-0.50 M before it, measured back to back; under a load average of 4.5
0.68-0.80 against 0.45-0.50 M cycles per CPU second.  C++ -O3, Verilator -O3,
-fvisibility=hidden/-fno-plt and dropping --output-split-cfuncs were all within noise of
the -O2 build (C++ -O3 about doubled the compile time), so the build flags are unchanged.

    python bench/rtl_speed.py [--preset pynq] [--gemms 24] [--iters 256]
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from vtaforge.hw.config import MemType, preset
from vtaforge.hw.isa import Insn, Opcode, encode_program, encode_uops
from vtaforge.runtime.rtl import build_model, run_raw

TSIM_ANCHOR = 0.12e6


def gemm_program(cfg, n_gemms: int, iters: int, seed: int = 0):
    """A DRAM image: load 256 micro-ops, inputs and weights, then ``n_gemms`` GEMMs of
    ``iters`` x 256 micro-ops each, one STORE and FINISH.  Returns (dram, insn_addr, n)."""
    rng = np.random.default_rng(seed)
    n_uop = 256
    n_inp = min(256, cfg.INP_DEPTH)
    n_wgt = min(16, cfg.WGT_DEPTH)
    n_acc = min(256, cfg.ACC_DEPTH)
    uops = encode_uops(cfg, np.arange(n_uop) % n_acc, np.arange(n_uop) % n_inp,
                       np.arange(n_uop) % n_wgt).astype("<u4").tobytes()
    inp = rng.integers(-128, 128, n_inp * cfg.elem_bytes(MemType.INP), dtype=np.int8).tobytes()
    wgt = rng.integers(-128, 128, n_wgt * cfg.elem_bytes(MemType.WGT), dtype=np.int8).tobytes()
    align = cfg.dram_alignment
    parts, cur = [], align

    def put(b):
        nonlocal cur
        a = cur
        parts.append((a, b))
        cur = -(-(cur + len(b)) // align) * align
        return a

    ua, ia_, wa = put(uops), put(inp), put(wgt)
    oa = put(bytes(n_acc * cfg.elem_bytes(MemType.OUT)))
    L, S, G, F = Opcode.LOAD, Opcode.STORE, Opcode.GEMM, Opcode.FINISH

    def ld(mem, addr, n, **kw):
        return Insn(L, memory_type=int(mem), sram_base=0, dram_base=addr // cfg.elem_bytes(mem),
                    y_size=1, x_size=n, x_stride=n, **kw)

    insns = [ld(MemType.UOP, ua, n_uop), ld(MemType.INP, ia_, n_inp),
             ld(MemType.WGT, wa, n_wgt, push_next=1),
             Insn(G, uop_bgn=0, uop_end=n_uop, iter_out=1, iter_in=1, reset=1, pop_prev=1)]
    for g in range(n_gemms):
        insns.append(Insn(G, uop_bgn=0, uop_end=n_uop, iter_out=iters, iter_in=1,
                          push_next=int(g == n_gemms - 1)))
    insns += [Insn(S, memory_type=int(MemType.OUT), sram_base=0, dram_base=oa //
                   cfg.elem_bytes(MemType.OUT), y_size=1, x_size=n_acc, x_stride=n_acc,
                   pop_prev=1, push_prev=1),
              Insn(F, pop_next=1)]
    prog = encode_program(cfg, insns).reshape(-1).tobytes()
    pa = put(prog)
    dram = np.zeros(cur + 4096, dtype=np.uint8)
    for a, b in parts:
        dram[a:a + len(b)] = np.frombuffer(b, dtype=np.uint8)
    return dram, pa, len(insns)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--preset", default="pynq")
    ap.add_argument("--gemms", type=int, default=24)
    ap.add_argument("--iters", type=int, default=256)
    ap.add_argument("--backpressure", type=float, default=0.0)
    args = ap.parse_args()
    cfg = preset(args.preset)
    t0 = time.perf_counter()
    model = build_model(cfg)
    print(f"model: {model.path} ({'cache hit' if model.cached else 'built'}, "
          f"{time.perf_counter() - t0:.1f} s incl. Verilog emission)")
    dram, ia, n = gemm_program(cfg, args.gemms, args.iters)
    t1, c1 = time.perf_counter(), time.process_time()
    res = run_raw(cfg, dram, ia, n, model=model, backpressure=args.backpressure, seed=1,
                  progress=False)
    wall = time.perf_counter() - t1
    cpu = time.process_time() - c1
    st = res.stats
    rate = st["sim_cycles_per_second"]
    print(f"preset {args.preset}: {n} instructions, {st['gemm_counter']} GEMM micro-ops, "
          f"{res.cycles} cycles (compute busy {st['compute_busy']})")
    print(f"simulation: {st['sim_cycles']} cycles in {st['sim_seconds']:.2f} s = "
          f"{rate / 1e6:.3f} M cycles/s wall (run_raw end to end {wall:.2f} s, incl. "
          f"verifier; {st['sim_cycles'] / cpu / 1e6:.3f} M cycles per CPU second, "
          f"the figure to trust on a shared machine)")
    print(f"anchor: upstream tsim ~{TSIM_ANCHOR / 1e6:.2f} M cycles/s -> "
          f"{rate / TSIM_ANCHOR:.1f}x; bare 16x16 MAC array under Verilator 0.83-0.98 M "
          f"cycles/s; target >= 0.5 M cycles/s")


if __name__ == "__main__":
    main()
