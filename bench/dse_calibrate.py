"""Record (config, layer program, RTL cycles) pairs and fit the cycle model to them.

Configs: the pynq and tiny presets and six GEMM shapes of the PYNQ-Z2 board space
(BLOCK_IN x BLOCK_OUT in {8,16,32}, the pynq preset's depths), in that order; layers:
ResNet-18 C2-C11 at ``--size`` (default 14, the DSE's default reduced size; ``full`` for
the real layers).  Each config is one Verilator build (minutes at pynq size on 2 cores)
plus the simulation; pairs are appended to ``--out`` after each config, so an interrupted
run keeps what it recorded.  Then prints the per-layer error of the current cycle model
and of the fitted one, and whether ``cycles_lower`` <= RTL in every pair.

    python bench/dse_calibrate.py [--size 14] [--configs N] [--out tests/dse/data/rtl_pairs.json]

``--replay FINGERPRINT WORKLOAD LAUNCH`` instead re-runs one recorded pair of ``--out`` on
the Verilator model (its instructions and micro-op words written back into a fresh DRAM
model; data do not change cycles), one cycle at a time, and prints each change of the
units' states (``dbg_state``: fetch, load, compute, store, the fetch's instruction index)
with the read/write beats so far, beside the cycle model's schedule of the same program:
where the model and the RTL part ways.
"""

from __future__ import annotations

import argparse
import time

from vtaforge.dse import CycleModel, parse_workloads
from vtaforge.dse.calibrate import fit, layer_errors, load_pairs, record_pairs, save_pairs
from vtaforge.dse.space import board_space
from vtaforge.hw.config import preset

SHAPES = ((3, 5), (3, 3), (4, 5), (3, 4), (4, 3), (5, 4))


def configs():
    """The calibration configs, most useful first."""
    out = [preset("pynq"), preset("tiny")]
    sp = board_space("pynq-z2")
    for bi, bo in SHAPES:
        p = sp.make_point({"LOG_BLOCK_IN": bi, "LOG_BLOCK_OUT": bo, "LOG_UOP_DEPTH": 13,
                           "LOG_INP_DEPTH": 11, "LOG_WGT_DEPTH": 10, "LOG_ACC_DEPTH": 11})
        out.append(p.cfg)
    return out


def replay(pairs, fp: str, workload: str, launch: int) -> None:
    """Print the RTL's per-cycle unit-state changes of one recorded pair and the cycle
    model's per-instruction schedule (module docstring)."""
    import numpy as np

    from vtaforge.dse.calibrate import _unb64, pair_program
    from vtaforge.hw.config import MemType
    from vtaforge.hw.isa import disassemble
    from vtaforge.runtime.rtl.device import RtlDevice

    sel = [p for p in pairs if p["fingerprint"] == fp and p["workload"] == workload]
    if launch >= len(sel):
        raise SystemExit(f"error: no launch {launch} of {workload} on {fp} ({len(sel)} recorded)")
    p = sel[launch]
    cfg, cols, uops = pair_program(p)
    prog = _unb64(p["insns"], np.uint8)
    dev = RtlDevice(cfg, 256 << 20, progress=False)
    mem, eb = dev.mem, cfg.elem_bytes(MemType.UOP)
    for i, w in uops:
        a = int(cols["dram_base"][i]) * eb
        mem[a:a + w.nbytes] = w.view(np.uint8)
    ia = 240 << 20
    mem[ia:ia + prog.size] = prog
    h = dev.harness
    dev.launch(ia, p["n_insns"])
    c0, idle, prev = h.cycle, 0, None
    print("RTL: cycle  F L C S states (hw/core/{fetch,load,compute,store}.py)  fetch index  "
          "read beats  write beats")
    while idle < 40 and h.cycle - c0 < 10 ** 7:
        h.step(1)
        d = h.dbg_state
        idle = idle + 1 if (d & 0xFFFF) == 0 else 0
        st = (d & 15, (d >> 4) & 15, (d >> 8) & 15, (d >> 12) & 15, (d >> 16) & 255)
        if st != prev:
            print(f"{h.cycle - c0:>9}  F{st[0]} L{st[1]} C{st[2]} S{st[3]}  idx {st[4]:>3}  "
                  f"rd {h.stat(2)}  wr {h.stat(3)}")
            prev = st
    r = dev.wait()
    dev.close()
    print(f"RTL cycles {r.cycles} (recorded {p['rtl_cycles']})")
    trace: list = []
    m = CycleModel()
    orig = m._schedule
    object.__setattr__(m, "_schedule", lambda *a, **k: orig(*a, **{**k, "trace": trace}))
    est = m.program_cycles(cfg, cols, uop_loads=uops)
    print(f"model cycles {est['cycles']:.1f}; per instruction: start end")
    lines = disassemble(cfg, prog)
    for i, s, e in sorted(t for t in trace if t[0] >= 0):
        print(f"{i:>5} {s:>10.1f} {e:>10.1f}  {lines[i][:70]}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--size", default="14")
    ap.add_argument("--configs", type=int, default=8)
    ap.add_argument("--workloads", default="resnet18")
    ap.add_argument("--out", default="tests/dse/data/rtl_pairs.json")
    ap.add_argument("--no-record", action="store_true", help="only fit the recorded pairs")
    ap.add_argument("--replay", nargs=3, metavar=("FINGERPRINT", "WORKLOAD", "LAUNCH"),
                    help="trace one recorded pair of --out on the RTL, cycle by cycle")
    a = ap.parse_args()
    if a.replay:
        replay(load_pairs(a.out), a.replay[0], a.replay[1], int(a.replay[2]))
        return
    size = None if a.size == "full" else int(a.size)
    wls = parse_workloads(a.workloads, size)
    pairs = load_pairs(a.out)
    if not a.no_record:
        for cfg in configs()[:a.configs]:
            have = {(p["fingerprint"], p["workload"]) for p in pairs}
            todo = [w for w in wls if (f"0x{cfg.fingerprint:08x}", w.name) not in have]
            if not todo:
                continue
            t0 = time.perf_counter()
            print(f"recording {cfg.bitstream_name} 0x{cfg.fingerprint:08x}: {len(todo)} layers",
                  flush=True)
            pairs += record_pairs(cfg, todo, log=lambda s: print(s, flush=True))
            save_pairs(pairs, a.out, note=f"ResNet-18 {a.workloads} at size {a.size}, "
                                          f"Verilator zero-latency DRAM; bench/dse_calibrate.py")
            print(f"  {time.perf_counter() - t0:.0f} s", flush=True)
    for name, m in (("current", CycleModel()), ("fitted", fit(pairs)[0])):
        errs = layer_errors(m, pairs)
        ab = [abs(e["error"]) for e in errs]
        low = sum(e["lower"] <= e["rtl"] for e in errs)
        print(f"\n{name} model {m.as_dict()}: {len(errs)} (config, layer) pairs, mean |error| "
              f"{100 * sum(ab) / len(ab):.2f} %, max {100 * max(ab):.2f} %, lower <= rtl in "
              f"{low}/{len(errs)}")
        for e in sorted(errs, key=lambda e: -abs(e["error"]))[:12]:
            print(f"  {e['bitstream']:<28} {e['workload']:<14} rtl {e['rtl']:>9} model "
                  f"{e['model']:>11.0f} {100 * e['error']:+6.2f} %")


if __name__ == "__main__":
    main()
