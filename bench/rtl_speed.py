"""Simulation speed of the ``rtl`` target (Verilator + C++ harness) on a GEMM-heavy program,
per speed lever, beside the anchors.

Anchors: upstream VTA's Chisel+Verilator simulator (tsim) ran about 0.12 M cycles/s
(ResNet-18: 7.73 M cycles in about 228 s); a bare 16x16 MAC array under Verilator with a
C++ harness ran 0.83-0.98 M cycles/s here at -O2 (shared/reference/hardware-notes.md).
Target (issue 9): >= 1 M cycles per CPU-second at pynq, ResNet-18's whole network
(7.76 M cycles at pynq + ALU_REQUANT + REQ_ENGINE, ``--config``) in <= 10 CPU-seconds.  A
figure, not a pass/fail test.

Figures are simulated cycles per CPU-second of the process (``time.process_time``: all
threads, so a ``--threads`` model pays for its worker), the figure that survives a shared
machine; the variants run interleaved, round by round,
each on its own simulation of the same program, and the median and best of the rounds are
printed with each variant's median ratio to the first.  Every variant must give the same
cycle count and the same final memory (checked).

Levers measured (``--levers`` builds the variants, one cache entry each):

- ``poll in harness``: the default; ``RtlDevice.wait`` runs CoreDriver.wait's loop of
  256-cycle steps and STATUS reads inside the harness (``vh_poll``), one ctypes call per
  run instead of one Python round trip per 256 cycles;
- ``poll in Python``: the same steps and reads driven from Python (as before ``vh_poll``);
- build variants (``--levers``): Verilator ``-O3``, ``--noassert``, no ``--output-split``,
  ``--threads 2``, ``-fno-dfg``; C++ ``-O3`` and ``-O2 -march=x86-64-v3`` (the latter is
  not portable to every x86-64 machine: measured, never the default).

Measured at pynq on the 2-core machine shared with other jobs (load average 6-16 while
measuring, so only interleaved ratios mean much; medians of 9-12 rounds of 67-133 k-cycle
GEMM runs; build seconds under that load, verilate + compile with 2 jobs):

    lever                      M cycles/CPU-s (median, best)  ratio  build s (compile s)
    before (poll in Python)    0.48, 0.55                      1.00   80-89 (54-65)
    poll in harness (vh_poll)  ->                               1.11   same
    Python poll every 4096     0.54, 0.58                      1.15   same (what polling costs)
    Verilator -O3              0.45, 0.54                      0.99   125 (118): 1.8x compile
    --noassert                 0.40, 0.55                      0.94   (no assertions to drop)
    C++ -O3                    0.51, 0.57                      1.06   594 (401) under load
    no --output-split          0.38 best of 4                  <1     371 (351): one big file
    --threads 2                0.008, 0.015                    0.02   481 (399) under load
    -fno-dfg                   0.50, 0.53                      0.87   205 (199)
    C++ -O2 -march=x86-64-v3   0.54, 0.59                      1.02   301 (217); not portable

(the last three rows against the vh_poll build, whose own median was 0.51-0.57 in those
rounds; --threads 2: the worker threads wait for each other on two cores shared with
other jobs, and process CPU time counts both.)

Every variant gave the same cycles and final memory.  The build flags are within the
noise, so the defaults stay (-O2, split output: the cheapest build).  Where the time goes
(perf, GEMM run): ~80 % in Verilator's generated sequential logic (``nba_sequent``), ~2 %
in the harness's per-cycle AXI model (``tick``), ~1.5 % in eval bookkeeping, the rest in
Python (the poll loop, now in the harness).  A DMA-bound run (64 INP loads of 2,048
elements) simulates at 0.23-0.40 M cycles/s: every falling-edge eval with a new read beat
runs Verilator's input-combinational pass (a quarter of the model's code); registering
``rst`` in a wrapper would shrink that pass by only 15 % (measured on the generated C++).
1 M cycles/s therefore needs less logic evaluated per cycle in the core's RTL, not a
faster harness or other flags.

Issue 9 item 3, what the RTL and harness changes bought.  Counted, not timed: valgrind
``--tool=callgrind`` instructions inside the harness's ``tick()`` (model and harness) per
simulated cycle, a figure the load of the shared machine does not move (it was 6-12 while
these were measured, so CPU-second figures swing 2x between rounds); GEMM: 2 GEMMs of 32 x
256 micro-ops (18.6 k cycles); DMA: ``--workload dma`` with 4 loads (16.6 k cycles):

    step (cumulative)                                     GEMM instr/cycle   DMA instr/cycle
    before                                                16,642             21,498
    build: sign-extension runs as replications            14,648             -
    + compute: reset-less datapath registers, products
      and ALU lanes loaded only for their kind of uop,
      packed DSP operand written as a concatenation,
      hi product as an unsigned 16-bit add; harness:
      the root's _eval called directly (~540 of these)    12,672             16,537
    measured, not kept: the dot-product tree in offset
      binary (unsigned adds, sign bits flipped)           10,433             11,120
      (tiny preset 5,513 LUT against 5,476 before and 5,436 kept: refused)

Timed, interleaved, before vs now (M cycles per CPU-second, median and best; load 9-11):
GEMM program (133 k cycles, 11 rounds) 0.42, 0.51 -> 0.54, 0.63 (ratio 1.24); DMA program
(264 k cycles, 7 rounds) 0.27, 0.32 -> 0.36, 0.44 (ratio 1.30).  Same cycles and final
memory throughout.  Short of 1 M: a whole ResNet-18 is still about 15-17 CPU-seconds.
Verilator's C++ for the core shrank from 5.9 MB to 3.8 MB; the build took 362 s under load
11 (471 s recorded for the old one under load; 57 s for a 4.1 MB build on an idle
machine).  In the DMA run the ico pass still evaluates the adder tree: the accumulator
write-data mux takes the loader's data (an input cone),
and Verilator inlines the GEMM result into that assignment.

Where the rest goes (callgrind of the offset-binary variant, GEMM run): the 128 packed
multiplies ~40 % (Verilator's 33-bit signed multiply sign-extends each operand twice), the
adder tree ~15 % (more with the signed tree kept),
product-register updates ~7 %, the three tensor loaders' next-state logic (a 1,984-bit
shift register copied twice a cycle in the load unit's) ~10 %, eval bookkeeping ~2 %.

Issue 9 item 3, second round (callgrind instructions in ``tick()`` per simulated cycle,
the GEMM and DMA runs above, 18,630 and 16,566 ticks; every step the same cycles and final
memory; "eng" is pynq + ALU_REQUANT + REQ_ENGINE, the ResNet-18 target's configuration):

    step (cumulative)                                pynq GEMM/DMA     eng GEMM/DMA
    before (this round's start)                      12,859 / 16,694   14,990 / 15,979
    + REQ clip result as one 8-bit signal, sign-
      extended by replication (Yosys had written
      ACC_WIDTH - 8 copies of its mux chain per lane,
      which Verilator merged, then rebuilt the sign
      bits two at a time; eng Verilog 4.8 -> 2.9 MB);
      dot-product tree in offset binary (unsigned
      adds), leaves' and root's sign bit by XOR      -                 13,804 / 14,687
    + loader beats in a small memory written at
      their index (no 1,984-bit next-state copy per
      cycle); build: masked signed multiplies in
      Verilator's C++ made unsigned (_patch_masked_
      muls, exact: no 64-bit sign extensions)        -                 12,803 / 13,414
    + lane add signed (tiny LUT, see below)          -                 13,308 / 13,908
    + leaves' sign bit inverted as "+ 2**15" (one
      add in C++ instead of a mask-and-merge)        8,837 / 9,272     12,102 / 12,706
    measured, not kept: root's sign bit as an add    -                 12,184 / 12,912

Timed, interleaved (M cycles per CPU-second, median and best; load about 1): pynq GEMM
(133 k cycles, 9 rounds) 0.76, 0.91 -> 1.22, 1.28 (ratio 1.48); pynq DMA (263 k cycles, 7
rounds) 0.60, 0.67 -> 1.01, 1.12 (1.52); eng GEMM (5 rounds) 0.65, 0.69 -> 0.73, 0.85
(1.20); eng DMA (7 rounds) 0.58, 0.65 -> 0.76, 0.85 (1.33).  Whole networks,
``bench/rtl_resnet18.py --config`` eng (simulation CPU-seconds of the measured run, same
per-step cycles, all exact; runs alternating old and new core, load 1-2.5, the spread is
the shared machine's): ResNet-18 7,763,808 cycles 12.1-13.0 CPU-s (median 12.35 of 8)
-> 9.5-11.3 CPU-s (median 9.8 of 7; 0.79 M cycles per CPU-second at 9.8 s): the 10 s
target at the median, not in every run; MobileNet-v1 3,491,850 cycles 5.4-6.5 (median
5.8 of 5) -> 4.4-5.7 CPU-s (median 4.9 of 5).  pynq (no REQ) reaches the
1 M cycles per CPU-second; eng costs ~3,300 instructions a cycle more, spread over the
REQ logic evaluated every cycle (the two sets of 16 clip lanes alone ~3 % of an eng GEMM
cycle; not broken down further), and the 128 packed multiplies with their product
registers are still ~15-20 % of an eng cycle (Verilator extends each 25- and 8-bit
operand to 33 bits; computed every cycle, GEMM or not, since two product registers read
each).  Yosys synth_xilinx: tiny 5,494 -> 5,420 LUT (the signed tree with the other
changes 5,494; offset tree with an unsigned lane add of the sign-extended sum 5,597-5,642,
refused), pynq 22,271 -> 19,823 LUT, FF unchanged (3,297; 11,705).  fmax proxy
(hw/timing.py, tiny, ECP5): 47.98 / 47.66 MHz -> 44.24 / 46.35 MHz (seeds 1 / 2), the
critical path in every run the sequencer's control path (micro-op RAM output -> index
adder -> hazard and fault logic), which these changes do not touch: placement spread.

    python bench/rtl_speed.py [--preset pynq | --config FILE] [--workload gemm|dma]
                              [--gemms 2] [--rounds 9] [--levers]
"""

from __future__ import annotations

import argparse
import hashlib
import json
import statistics
import time

import numpy as np

from vtaforge.hw.config import MemType, load_config, preset
from vtaforge.hw.isa import Insn, Opcode, encode_program, encode_uops
from vtaforge.runtime.device import Buffer
from vtaforge.runtime.mmio import Watchdog
from vtaforge.runtime.rtl import RtlDevice, build_model

TSIM_ANCHOR = 0.12e6
#: ResNet-18 224x224 whole network, cycles: pynq + ALU_REQUANT + REQ_ENGINE (issue 9,
#: bench/rtl_resnet18.py --config with those keys), the configuration the target is for.
RESNET18_CYCLES = 7_763_808
#: Build variants of ``--levers``: name -> build_model keyword arguments.
LEVERS = {
    "verilator -O3": {"extra_vflags": ("-O3",)},
    "--noassert": {"extra_vflags": ("--noassert",)},
    "no --output-split": {"extra_vflags": ("--output-split", "0", "--output-split-cfuncs", "0")},
    "--threads 2": {"extra_vflags": ("--threads", "2")},
    "-fno-dfg": {"extra_vflags": ("-fno-dfg",)},
    "c++ -O3": {"cxx_opt": ("-O3",)},
    "c++ -march=x86-64-v3": {"cxx_opt": ("-O2", "-march=x86-64-v3")},
}


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


def dma_program(cfg, n_loads: int = 64, n_elems: int = 2048, seed: int = 1):
    """A DMA-bound DRAM image: ``n_loads`` INP LOADs of ``n_elems`` elements each (capped
    at the INP depth) from one DRAM buffer, then FINISH.  Returns (dram, insn_addr, n)."""
    eb = cfg.elem_bytes(MemType.INP)
    n_elems = min(n_elems, cfg.INP_DEPTH)
    align = cfg.dram_alignment
    data = np.random.default_rng(seed).integers(0, 256, n_elems * eb, dtype=np.uint8)
    da = align
    insns = [Insn(Opcode.LOAD, memory_type=int(MemType.INP), sram_base=0,
                  dram_base=da // eb, y_size=1, x_size=n_elems, x_stride=n_elems)
             for _ in range(n_loads)]
    insns.append(Insn(Opcode.FINISH))
    prog = encode_program(cfg, insns).reshape(-1).tobytes()
    pa = -(-(da + data.size) // align) * align
    dram = np.zeros(pa + len(prog) + 4096, dtype=np.uint8)
    dram[da:da + data.size] = data
    dram[pa:pa + len(prog)] = np.frombuffer(prog, dtype=np.uint8)
    return dram, pa, len(insns)


def python_poll_run(dev: RtlDevice, insn_addr: int, insn_count: int) -> int:
    """Run a program with the poll loop in Python, as ``RtlDevice.wait`` did before the
    harness had ``vh_poll``: ``CoreDriver.wait`` reading STATUS, its watchdog's idle step
    clocking ``poll_interval`` cycles per ctypes call.  Returns the core's CYCLES."""
    h, poll = dev.harness, dev.poll_interval
    dev.launch(insn_addr, insn_count)
    stop = h.cycle + dev.timeout_cycles

    def idle() -> None:
        h.step(max(1, min(poll, stop - h.cycle)))

    dev.driver.wait(Watchdog(dev.timeout_cycles, lambda: h.cycle, idle, "cycles"))
    return int(dev.driver.counters()["cycles"])


def build_seconds(model) -> str:
    """How the model came: its recorded build time, or ``cache hit``."""
    try:
        rec = json.loads((model.path.parent / "build.json").read_text())
    except (OSError, ValueError):
        return "cache hit"
    how = "built now" if not model.cached else "cached; built"
    return (f"{how} in {rec.get('build_seconds', '?')} s (verilate "
            f"{rec.get('verilate_seconds', '?')} s, compile {rec.get('compile_seconds', '?')} s)")


def measure(variants, cfg, dram, ia, n, rounds: int) -> dict:
    """Interleaved rounds over ``variants`` (``(label, model, python_poll)``); returns
    label -> ``{"rates": [...], "digest"}`` (simulated cycles per process CPU-second)."""
    out = {label: {"rates": []} for label, _, _ in variants}
    for r in range(rounds):
        for label, model, py in (variants if r % 2 == 0 else variants[::-1]):
            # a fresh simulation per run: a --threads model's workers exist only while
            # its own runs are measured
            dev = RtlDevice(cfg, max(cfg.dram_alignment, dram.size), model=model,
                            progress=False, verify=False)
            dev.mem[:dram.size] = dram
            c0, t0 = dev.cycle, time.process_time()
            if py:
                cycles = python_poll_run(dev, ia, n)
            else:
                cycles = dev.run(ia, n, regions=[Buffer(0, dram.size)]).cycles
            cpu = time.process_time() - t0
            rec = out[label]
            rec["rates"].append((dev.cycle - c0) / cpu)
            digest = (cycles, hashlib.sha256(dev.mem[:dram.size].tobytes()).hexdigest()[:12])
            dev.close()
            if rec.setdefault("digest", digest) != digest:
                raise SystemExit(f"{label}: round {r} gave {digest}, earlier {rec['digest']}")
    ref = {v["digest"] for v in out.values()}
    if len(ref) != 1:
        raise SystemExit(f"variants disagree (cycles, memory digest): {ref}")
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--preset", default="pynq")
    ap.add_argument("--config", default=None,
                    help="preset name or vta_config.json instead of --preset (e.g. pynq with "
                         "ALU_REQUANT and REQ_ENGINE, the ResNet-18 target's configuration)")
    ap.add_argument("--gemms", type=int, default=2, help="GEMMs of 256 x 256 micro-ops")
    ap.add_argument("--iters", type=int, default=256)
    ap.add_argument("--rounds", type=int, default=9)
    ap.add_argument("--workload", choices=("gemm", "dma"), default="gemm",
                    help="gemm: GEMM-heavy program (default); dma: 64 INP loads of 2,048 "
                         "elements")
    ap.add_argument("--levers", action="store_true",
                    help="also build and measure the build variants (minutes per variant)")
    args = ap.parse_args()
    cfg = load_config(args.config) if args.config else preset(args.preset)
    t0 = time.perf_counter()
    model = build_model(cfg)
    print(f"default model: {model.path} ({build_seconds(model)}; this call "
          f"{time.perf_counter() - t0:.1f} s incl. Verilog emission)")
    variants = [("poll in harness", model, False), ("poll in Python", model, True)]
    if args.levers:
        for name, kw in LEVERS.items():
            t0 = time.perf_counter()
            m = build_model(cfg, **kw)
            print(f"{name}: {build_seconds(m)}")
            variants.append((name, m, False))
    if args.workload == "dma":
        dram, ia, n = dma_program(cfg)
    else:
        dram, ia, n = gemm_program(cfg, args.gemms, args.iters)
    res = measure(variants, cfg, dram, ia, n, args.rounds)
    cycles = next(iter(res.values()))["digest"][0]
    what = args.config or f"preset {args.preset}"
    print(f"{what}, {args.workload} program: {n} instructions, {cycles} cycles per run, {args.rounds} "
          f"interleaved rounds; all variants: same cycles and final memory")
    base = res[variants[0][0]]["rates"]
    print(f"  {'variant':<22} {'median':>8} {'best':>8}  M cycles per CPU-second   ratio")
    for label, _, _ in variants:
        rates = res[label]["rates"]
        ratio = statistics.median(a / b for a, b in zip(rates, base))
        print(f"  {label:<22} {statistics.median(rates) / 1e6:8.3f} {max(rates) / 1e6:8.3f}"
              f"{'':26} {ratio:5.2f}")
    best = statistics.median(base)
    print(f"ResNet-18 224x224 ({RESNET18_CYCLES / 1e6:.2f} M cycles) at the default's median: "
          f"{RESNET18_CYCLES / best:.1f} CPU-seconds of simulation (target <= 10 s; "
          f"bench/rtl_resnet18.py measures the whole network)")
    print(f"anchors: upstream tsim ~{TSIM_ANCHOR / 1e6:.2f} M cycles/s (ResNet-18 228 s) -> "
          f"{best / TSIM_ANCHOR:.1f}x; bare 16x16 MAC array under Verilator 0.83-0.98 M "
          f"cycles/s; target >= 1 M cycles per CPU-second")


if __name__ == "__main__":
    main()
