"""Design-space sweep around the pynq preset for the xc7z020, ResNet-18 C2-C11.

Layers are run at reduced spatial size (``--size``, default 14: C2-C4 at 14x14, C11 at its
7x7) on the functional simulator; cycles come from the dse cycle model (an estimate, zero
DRAM latency unless ``--dram-latency``); resources from the analytic model (BRAM and DSP
reproduce the measured Yosys figures of pynq and tiny; LUT/FF are a two-point calibrated
estimate).  Throughput is at the 100 MHz target clock, timing not verified.

Prints the best designs per objective, the Pareto front, and where the pynq preset stands.

    python bench/dse_pynq_space.py [--samples 40] [--seed 0] [--size 14] [--cache FILE]
"""

from __future__ import annotations

import argparse
import time

from vtaforge.dse import (CycleModel, DesignEvaluator, Space, build_report, format_table,
                          parse_workloads, run_search)
from vtaforge.hw.config import preset


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--samples", type=int, default=40)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--size", type=int, default=14)
    ap.add_argument("--dram-latency", type=float, default=0.0)
    ap.add_argument("--cache", default="/tmp/vtaforge-dse-pynq.cache.json")
    ap.add_argument("-o", "--out", default=None, help="write the JSON report")
    a = ap.parse_args()

    base = preset("pynq")
    space = Space(base, {
        "LOG_BATCH": [0, 1],
        "LOG_BLOCK": [3, 4, 5],
        "LOG_WGT_BUFF_SIZE": [17, 18, 19],
        "LOG_ACC_BUFF_SIZE": [16, 17],
        "LOG_BUS_WIDTH": [6, 7],
        "DSP_PACKING": [1, 2],
    })
    pts = space.points(a.samples, a.seed)
    pynq_params = {"LOG_BATCH": 0, "LOG_BLOCK": 4, "LOG_WGT_BUFF_SIZE": 18,
                   "LOG_ACC_BUFF_SIZE": 17, "LOG_BUS_WIDTH": 6, "DSP_PACKING": 2}
    if pynq_params not in [p.params for p in pts]:
        pts.append(space.make_point(pynq_params))
    wls = parse_workloads("resnet18-c2..c11", a.size)
    ev = DesignEvaluator("xc7z020", "analytic", "model", CycleModel(dram_latency=a.dram_latency))
    t0 = time.perf_counter()
    res = run_search(pts, wls, ev, cache=a.cache)
    dt = time.perf_counter() - t0
    rep = build_report(res, wls, ev)
    print(f"{len(pts)} points of {space.size} (seed {a.seed}) + the pynq preset, "
          f"ResNet-18 C2-C11 at size <= {a.size}, {dt:.1f} s")
    print(format_table(rep, limit=15, only_feasible=True))
    print("\nPareto front (latency vs binding-resource use):")
    byfp = {p.get("fingerprint"): p for p in rep["points"] if p["valid"]}
    for fp in rep["pareto"]:
        p = byfp[fp]
        print(f"  {fp} {p['bitstream']:<28} bus {p['bus_bits']:>3} pack {p['dsp_packing']}: "
              f"{p['latency_us']:9.1f} us  {p['gops']:5.1f} GOPS  util {p['utilization']['max']:.2f}")
    fp = f"0x{base.fingerprint:08x}"
    p = byfp[fp]
    feas = sorted((q for q in rep["points"] if q["feasible"]), key=lambda q: q["latency_us"])
    rank = [q["fingerprint"] for q in feas].index(fp) + 1 if p["feasible"] else None
    print(f"\npynq preset {fp} {p['bitstream']}: {p['latency_us']:.1f} us, {p['gops']:.1f} GOPS "
          f"({p['throughput_label']}), util {p['utilization']['max']:.2f} "
          f"(BRAM {p['resources']['bram36']:g}, DSP {p['resources']['dsp']}), "
          f"rank {rank} of {len(feas)} feasible by latency, "
          f"{'on' if p['pareto'] else 'not on'} the Pareto front")
    print("estimated: cycles (cycle model on fsim-executed programs), LUT/FF (2-point "
          "calibration); geometric: BRAM, DSP; not verified: timing")
    if a.out:
        from vtaforge.dse import write_report

        write_report(rep, a.out)


if __name__ == "__main__":
    main()
