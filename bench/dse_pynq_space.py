"""Sweep time of the default PYNQ-Z2 space on ResNet-18 C2-C11: serial vs Dask workers.

The space is ``vtaforge dse run --board pynq-z2``'s (``board_space("pynq-z2")``: 144
points, BLOCK_IN x BLOCK_OUT x depth axes, 64-bit bus, 100 MHz); layers at reduced
spatial size (``--size``, default 14) on the functional simulator; cycles from the dse
cycle model (an estimate), resources from the analytic model; throughput at the target
clock, timing not verified.

Each ``--jobs`` value is a fresh sweep (no cache; the process's quantized graphs and program
memo cleared): 1 = serial in process, N >= 2 = a Dask LocalCluster of N worker processes
(its start-up is included).  Then a rerun on the cache
written by the last sweep (every evaluation a cache hit).  Prints the times side by side
with the issue-11 target (<= 60 s on a 2-core machine), then the best designs, the Pareto
front and where the pynq preset stands.

    python bench/dse_pynq_space.py [--jobs 1,2] [--samples N] [--size 14] [-o report.json]
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time

from vtaforge.dse import (DesignEvaluator, build_report, format_table, parse_workloads,
                          run_search)
from vtaforge.dse.parallel import make_executor
from vtaforge.dse.performance import _PROGRAM_MEMO
from vtaforge.dse.search import SearchStats
from vtaforge.dse.space import board_space
from vtaforge.dse.workloads import _FRONT_CACHE
from vtaforge.hw.config import preset

TARGET_S = 60.0


def _cpu_seconds() -> float:
    """CPU seconds of the calling process (run on each Dask worker)."""
    return time.process_time()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--board", default="pynq-z2")
    ap.add_argument("--workloads", default="resnet18")
    ap.add_argument("--jobs", default="1,2", help="comma-separated worker counts (1 = serial)")
    ap.add_argument("--samples", type=int, default=None, help="sample N points (default: all)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--size", type=int, default=14)
    ap.add_argument("-o", "--out", default=None, help="write the JSON report")
    a = ap.parse_args()

    space = board_space(a.board)
    wls = parse_workloads(a.workloads, a.size)
    pts = space.points(a.samples, a.seed)
    print(f"{a.board}: {len(pts)} points of {space.size}, {len(wls)} workloads "
          f"({a.workloads}, size <= {a.size}), {os.cpu_count()} CPUs")
    times = []
    tmp = tempfile.mkdtemp(prefix="dse-bench-")
    rep = ev = None
    for j in [int(x) for x in a.jobs.split(",")]:
        # fresh: no quantized graph or program record kept in this process from a sweep before
        _FRONT_CACHE.clear()
        _PROGRAM_MEMO.clear()
        ev = DesignEvaluator(space.base.PART)
        st = SearchStats()
        cache = os.path.join(tmp, f"c{j}.jsonl")
        t0 = time.perf_counter()
        c0 = time.process_time()
        ex = make_executor(j)
        try:
            res = run_search(pts, wls, ev, cache=cache, executor=ex, stats=st, progress=False)
            wcpu = sorted(ex.client.run(_cpu_seconds).values()) if hasattr(ex, "client") else []
        finally:
            ex.close()
        dt = time.perf_counter() - t0
        cpu = time.process_time() - c0
        times.append((j, dt, cpu, wcpu))
        print(f"  jobs {j:>2} ({ex.description}): {dt:6.1f} s wall, driver CPU {cpu:.1f} s"
              + (f", worker CPU {', '.join(f'{w:.1f}' for w in wcpu)} s" if wcpu else "")
              + f"; {st.perf_runs} performance evaluations ({st.perf_shared} shared), "
              f"{st.resource_runs} resource")
        rep = build_report(res, wls, ev, preset=space.base)
    t0 = time.perf_counter()
    st = SearchStats()
    run_search(pts, wls, ev, cache=cache, stats=st, progress=False)
    print(f"  rerun on the cache: {time.perf_counter() - t0:6.2f} s "
          f"({st.perf_cached + st.resource_cached} cache hits, {st.perf_runs} runs)")
    base = times[0][1]
    load = os.getloadavg()[0]
    print(f"\n{'jobs':>4} {'wall s':>8} {'speed-up':>8} {'busiest CPU s':>13}  target <= "
          f"{TARGET_S:g} s wall (load average now {load:.1f} on {os.cpu_count()} CPUs: "
          f"the machine is shared; busiest CPU s = the wall time on an idle machine)")
    for j, dt, cpu, wcpu in times:
        busy = max(wcpu) if wcpu else cpu
        print(f"{j:>4} {dt:8.1f} {base / dt:8.2f} {busy:13.1f}  "
              f"{'met' if dt <= TARGET_S else 'missed'}")
    print()
    print(format_table(rep, limit=15, only_feasible=True))
    print("\nPareto front (latency vs binding-resource use):")
    byfp = {p.get("fingerprint"): p for p in rep["points"] if p["valid"]}
    for fp in rep["pareto"]:
        p = byfp[fp]
        print(f"  {fp} {p['bitstream']:<28} {p['latency_us']:9.1f} us  {p['gops']:5.1f} GOPS  "
              f"util {p['utilization']['max']:.2f}")
    pre = preset("pynq").replace(PART=space.base.PART, LOG_BUS_WIDTH=space.base.LOG_BUS_WIDTH,
                                 CLOCK_MHZ=space.base.CLOCK_MHZ, DSP_PACKING=2)
    fp = f"0x{pre.fingerprint:08x}"
    if fp in byfp and byfp[fp].get("feasible"):
        p = byfp[fp]
        feas = sorted((q for q in rep["points"] if q["feasible"]), key=lambda q: q["latency_us"])
        rank = [q["fingerprint"] for q in feas].index(fp) + 1
        print(f"\npynq preset {fp} {p['bitstream']}: {p['latency_us']:.1f} us, "
              f"rank {rank} of {len(feas)} feasible by latency, "
              f"{'on' if p['pareto'] else 'not on'} the Pareto front")
    print("estimated: cycles (cycle model on fsim-executed programs), LUT/FF (linear model "
          "fitted on recorded Yosys points); geometric: BRAM, DSP; not verified: timing")
    if a.out:
        from vtaforge.dse import write_report

        write_report(rep, a.out)


if __name__ == "__main__":
    main()
