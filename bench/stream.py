"""Streamed execution on the RTL simulation: host-visible wall time and core idle cycles
between steps, with and without streaming, for the digits model on tiny + a 1024-slot ring.

Three schedules of the same model on the same Verilated core (one build):

- ``one-shot``: ``Executor(stream=False)``, one launch per program, the host waits for
  each (the simulation is clocked only inside the waits, so the core's idle time between
  launches is not in simulated cycles: ``n/a``);
- ``step``: one ring session with a free-running clock thread, the host waiting right
  after appending each step (the one-shot schedule, clock running): ``RING_IDLE`` counts
  the cycles the core sat with an empty ring;
- ``stream``: the same session, the host appends each step as soon as it is built and
  waits only for results it reads (``Executor(stream=True)``).

Each session schedule runs twice: ``/free``, the simulated clock runs freely (idle cycles
are simulated and counted, as on a board, but cost simulation time), and ``/busy``, the
clock thread parks while every appended segment is done (the wall time a host would see
if the core's idle cycles cost nothing, as on hardware).

``first`` is a fresh executor's first run (programs built while the core runs), ``warm``
the median of ``--runs`` later runs (programs cached).  Wall times are host seconds;
idle and busy figures are core cycles (``RING_IDLE``, ``CYCLES``) of the session.  The
simulation and the host share this machine's cores, so wall times vary with load.

Run: ``python bench/stream.py [--runs 5] [--batch 4] [--json]``.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

import numpy as np
from _record import header, stamp

from vtaforge.compiler.compile import compile_model
from vtaforge.compiler.models import DIGITS_ONNX, load_digits_split
from vtaforge.hw.config import preset
from vtaforge.runtime.executor import Executor
from vtaforge.runtime.rtl.build import build_model
from vtaforge.runtime.rtl.device import RtlDevice

RING = 1024


def measure(cm, dev, x, stream, runs: int, clock: str = "free") -> dict:
    """Wall seconds of a first and of warm runs; the session figures of the last run."""
    dev.stream_clock = clock
    ex = Executor(cm, dev, stream=stream)
    t0 = time.perf_counter()
    out = ex.run(x)
    first = time.perf_counter() - t0
    first_stream = dict(ex.last_stream)
    warm = []
    for _ in range(runs):
        t0 = time.perf_counter()
        ex.run(x)
        warm.append(time.perf_counter() - t0)
    name = {False: "one-shot", "step": "step", True: "stream"}[stream]
    row = {"schedule": name if not stream else f"{name}/{clock}",
           "first_s": first, "warm_s": statistics.median(warm),
           "core_cycles": None, "idle_cycles": None, "idle_cycles_first": None,
           "waits": None}
    if stream:
        s = ex.last_stream
        row.update(core_cycles=int(s["cycles"]), idle_cycles=int(s["ring_idle"]),
                   idle_cycles_first=int(first_stream["ring_idle"]), waits=int(s["waits"]))
    else:
        row["core_cycles"] = int(sum(st.cycles for st in ex.stats.values()) / (runs + 1))
    ex.close()
    return row, out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--batch", type=int, default=4)
    ap.add_argument("--json", action="store_true")
    a = ap.parse_args()
    cfg = preset("tiny").replace(INSN_RING=RING)
    xtr, _, xte, _ = load_digits_split()
    cm = compile_model(str(DIGITS_ONNX), xtr[:300], cfg)
    x = xte[:a.batch]
    dev = RtlDevice(cfg, 16 << 20, model=build_model(cfg, progress=True))
    rows, ref = [], None
    for stream, clock in ((False, "free"), ("step", "free"), (True, "free"),
                          ("step", "busy"), (True, "busy")):
        row, out = measure(cm, dev, x, stream, a.runs, clock)
        if ref is None:
            ref = out
        for k in ref:
            assert np.array_equal(out[k], ref[k]), f"{row['schedule']}: {k} differs"
        rows.append(row)
    steps = [s.target for s in cm.steps]
    if a.json:
        print(json.dumps({"record": stamp(__file__), "model": "digits",
                          "config": f"tiny+INSN_RING={RING}",
                          "batch": a.batch, "steps": steps, "rows": rows}, indent=2))
        return
    print(header(__file__))
    print(f"digits on tiny + INSN_RING={RING}, batch {a.batch}: {steps.count('vta')} VTA "
          f"steps, {steps.count('cpu')} CPU steps; outputs identical in all schedules")
    print(f"{'schedule':<12} {'first run s':>12} {'warm run s':>11} {'core cycles':>12} "
          f"{'idle cycles':>12} {'idle (first)':>13} {'waits':>6}")

    def f(v):
        return "n/a" if v is None else f"{v:,}"

    for r in rows:
        print(f"{r['schedule']:<12} {r['first_s']:>12.3f} {r['warm_s']:>11.3f} "
              f"{f(r['core_cycles']):>12} {f(r['idle_cycles']):>12} "
              f"{f(r['idle_cycles_first']):>13} {f(r['waits']):>6}")


if __name__ == "__main__":
    main()
