"""Calibration of the cycle model on recorded (config, layer program, RTL cycles) pairs.

:func:`record_pairs` compiles workloads for a config, runs them on the Verilator backend
(the core's CYCLES register, zero-latency DRAM model) and keeps, per launched program, the
encoded instructions, the micro-op words every UOP LOAD brought in (the ALU hazard and
source-cache terms need the micro-ops' entries), the RTL cycles and the core's counters.
A pair is JSON (bytes zlib-compressed, base64), so a regression test re-costs recorded
programs with no Verilator build.

:func:`fit` adjusts :class:`~.performance.CycleModel`'s constants to minimise the worst
per-layer relative error on the pairs (coordinate search; every constant stays >= 0).
:func:`pair_errors` gives the per-layer error table.

Command line (``python -m vtaforge.dse.calibrate``)::

    record --config pynq [--config FILE.json ...] [--workloads resnet18] [--size full]
           -o tests/dse/data/rtl_pairs.json        # appends configs not yet recorded
    fit tests/dse/data/rtl_pairs.json              # prints the fitted constants
    errors tests/dse/data/rtl_pairs.json           # per-layer error of the current model
"""

from __future__ import annotations

import base64
import json
import sys
import time
import zlib
from pathlib import Path
from typing import Iterable, Mapping, Sequence

import numpy as np

from ..hw.config import VTAConfig
from .performance import CycleModel, run_closing, uop_loads_of
from .workloads import DseWorkload, compile_workload, parse_workloads

__all__ = ["PAIRS_SCHEMA", "record_pairs", "pair_program", "layer_errors", "fit",
           "load_pairs", "save_pairs", "main"]

PAIRS_SCHEMA = "vtaforge.dse.rtl_pairs/1"


def _b64(a: np.ndarray) -> str:
    return base64.b64encode(zlib.compress(np.ascontiguousarray(a).tobytes(), 9)).decode()


def _unb64(s: str, dtype) -> np.ndarray:
    return np.frombuffer(zlib.decompress(base64.b64decode(s)), dtype=dtype)


def _recording_rtl(cfg: VTAConfig, records: list, latency: tuple[int, int] = (0, 0)):
    """An RtlDevice (DRAM model first-beat ``latency`` range, cycles) that keeps each
    launched program with its UOP-load payloads."""
    from ..hw.isa import INSN_BYTES, decode_program
    from ..runtime.rtl.device import RtlDevice

    class _Rec(RtlDevice):
        def run(self, insn_addr, insn_count, **kw):
            prog = self._read_mem(insn_addr, insn_count * INSN_BYTES)
            cols = decode_program(self.config, prog)
            uops = [[i, _b64(w.view(np.uint8))]
                    for i, w in uop_loads_of(self, self.config, cols)]
            res = super().run(insn_addr, insn_count, **kw)
            st = {k: int(v) for k, v in res.stats.items()
                  if isinstance(v, (int, np.integer)) and not isinstance(v, bool)}
            records.append({"insns": _b64(np.asarray(prog, np.uint8)), "n_insns": int(insn_count),
                            "uop_loads": uops, "rtl_cycles": int(res.cycles), "rtl_stats": st})
            return res

    return _Rec(cfg, progress=False, latency=latency)


def record_pairs(cfg: VTAConfig, workloads: Sequence[DseWorkload], seed: int = 0,
                 log=None, latency: tuple[int, int] = (0, 0)) -> list[dict]:
    """Run every workload on the RTL for ``cfg``; one pair per launched program:
    ``{"config" (upstream-style dict), "fingerprint", "workload", "launch", "insns",
    "n_insns", "uop_loads", "rtl_cycles" (cycles), "rtl_stats", "sim_seconds"}``, and
    ``"dram_latency": [min, max]`` when the DRAM model had a first-beat ``latency`` range
    (cycles per burst; such pairs compare with ``CycleModel(dram_latency=...)``, not the
    default's zero-latency bus).

    Raises:
        whatever compilation or the RTL backend raises (a missing Verilator:
        ``RtlBuildError``).
    """
    from ..runtime.executor import Executor

    out = []
    for wl in workloads:
        t0 = time.perf_counter()
        cm, x = compile_workload(cfg, wl, seed)
        recs: list[dict] = []
        dev = _recording_rtl(cfg, recs, latency)
        run_closing(Executor(cm, dev), dev, x)
        dt = time.perf_counter() - t0
        for i, r in enumerate(recs):
            out.append({"config": cfg.to_dict(), "fingerprint": f"0x{cfg.fingerprint:08x}",
                        "workload": wl.name, "launch": i, **r, "sim_seconds": round(dt, 2),
                        **({"dram_latency": list(latency)} if tuple(latency) != (0, 0)
                           else {})})
        if log:
            log(f"  {cfg.bitstream_name} {wl.name}: {sum(r['rtl_cycles'] for r in recs)} "
                f"cycles in {len(recs)} launch(es), {dt:.1f} s")
    return out


def pair_program(pair: Mapping) -> tuple[VTAConfig, dict, list[tuple[int, np.ndarray]]]:
    """``(config, decoded instruction columns, [(insn index, uop words uint32)])`` of a
    recorded pair."""
    from ..hw.isa import decode_program

    cfg = VTAConfig.from_dict(pair["config"])
    prog = _unb64(pair["insns"], np.uint8)
    cols = decode_program(cfg, prog)
    uops = [(int(i), _unb64(s, np.uint8).view(np.uint32)) for i, s in pair["uop_loads"]]
    return cfg, cols, uops


def _for_pair(model: CycleModel, pair: Mapping) -> CycleModel:
    """``model`` with ``dram_latency`` at the mean of the pair's recorded DRAM latency range
    (``"dram_latency": [min, max]``, pairs recorded with a board-like DRAM), else as is."""
    lat = pair.get("dram_latency")
    if not lat:
        return model
    from dataclasses import replace

    return replace(model, dram_latency=(float(lat[0]) + float(lat[1])) / 2)


def model_cycles(model: CycleModel, pair: Mapping) -> dict:
    """The cycle model's ``program_cycles`` of a recorded pair (cycles), at the pair's DRAM
    latency (the mean of its recorded range) when it has one."""
    cfg, cols, uops = pair_program(pair)
    return _for_pair(model, pair).program_cycles(cfg, cols, uop_loads=uops)


def layer_errors(model: CycleModel, pairs: Iterable[Mapping]) -> list[dict]:
    """Per (config, workload): ``{"fingerprint", "bitstream", "workload", "rtl" (cycles),
    "model", "lower", "upper" (cycles), "error" (model / rtl - 1)}``, launches summed."""
    acc: dict[tuple, dict] = {}
    for p in pairs:
        est = model_cycles(model, p)
        k = (p["fingerprint"], p["workload"])
        d = acc.setdefault(k, {"fingerprint": p["fingerprint"],
                               "bitstream": VTAConfig.from_dict(p["config"]).bitstream_name,
                               "workload": p["workload"], "rtl": 0, "model": 0.0,
                               "lower": 0.0, "upper": 0.0})
        d["rtl"] += p["rtl_cycles"]
        d["model"] += est["cycles"]
        d["lower"] += est["lower"]
        d["upper"] += est["upper"]
    out = list(acc.values())
    for d in out:
        d["error"] = d["model"] / d["rtl"] - 1 if d["rtl"] else 0.0
    return out


#: The constants :func:`fit` adjusts (the last two only matter with ``read_arbitration``).
FIT_PARAMS = ("insn_overhead", "compute_overhead", "row_overhead", "fetch_overhead", "dma_lead")


def fit(pairs: Sequence[Mapping], start: CycleModel | None = None,
        params: Sequence[str] = FIT_PARAMS, rounds: int = 4) -> tuple[CycleModel, dict]:
    """Fit ``params`` of a :class:`CycleModel` to recorded pairs: coordinate search on a
    shrinking step, minimising (max |error| per layer, then mean |error|).

    Returns:
        ``(model, {"max_abs_error", "mean_abs_error", "layers"})``.
    """
    from dataclasses import replace

    m = start or CycleModel()
    for k, v in (("compute_overhead", m.insn_overhead), ("chain_overhead", m.insn_overhead),
                 ("store_row_overhead", m.row_overhead)):
        if getattr(m, k) is None and k in params:
            m = replace(m, **{k: v})
    decoded = [(p, pair_program(p)) for p in pairs]

    def score(model):
        acc: dict[tuple, list] = {}
        for p, (cfg, cols, uops) in decoded:
            est = _for_pair(model, p).program_cycles(cfg, cols, uop_loads=uops)["cycles"]
            a = acc.setdefault((p["fingerprint"], p["workload"]), [0.0, 0])
            a[0] += est
            a[1] += p["rtl_cycles"]
        errs = [abs(e / r - 1) for e, r in acc.values() if r]
        return (max(errs), float(np.mean(errs))), len(errs)

    best, n = score(m)
    for step in (1.0, 0.5, 0.25, 0.125)[:rounds]:
        improved = True
        while improved:
            improved = False
            for k in params:
                for d in (+step, -step):
                    v = getattr(m, k) + d
                    if v < 0:
                        continue
                    cand = replace(m, **{k: v})
                    s, _ = score(cand)
                    if s < best:
                        m, best, improved = cand, s, True
    return m, {"max_abs_error": best[0], "mean_abs_error": best[1], "layers": n}


def load_pairs(path: str | Path) -> list[dict]:
    """The pairs of a file written by :func:`save_pairs` (``[]`` when it does not exist).

    Raises:
        ValueError: not such a file.
    """
    p = Path(path)
    if not p.exists():
        return []
    d = json.loads(p.read_text())
    if not isinstance(d, dict) or d.get("schema") != PAIRS_SCHEMA:
        raise ValueError(f"{p}: not a {PAIRS_SCHEMA} file")
    return list(d["pairs"])


def save_pairs(pairs: Sequence[Mapping], path: str | Path, note: str = "") -> None:
    """Write pairs as ``{"schema", "note", "pairs"}`` (atomically)."""
    from ..runtime.npz import atomic_open

    with atomic_open(path) as f:
        f.write(json.dumps({"schema": PAIRS_SCHEMA, "note": note, "pairs": list(pairs)},
                           separators=(",", ":")).encode())


def main(argv: Sequence[str] | None = None) -> int:
    """Command line (module docstring).  Returns the exit status."""
    import argparse

    from ..hw.config import load_config

    ap = argparse.ArgumentParser(prog="python -m vtaforge.dse.calibrate",
                                 description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("record")
    r.add_argument("--config", action="append", required=True)
    r.add_argument("--workloads", default="resnet18")
    r.add_argument("--size", default="full")
    r.add_argument("-o", "--out", required=True)
    for name in ("fit", "errors"):
        s = sub.add_parser(name)
        s.add_argument("pairs")
    a = ap.parse_args(argv)
    if a.cmd == "record":
        size = None if a.size == "full" else int(a.size)
        wls = parse_workloads(a.workloads, size)
        pairs = load_pairs(a.out)
        have = {(p["fingerprint"], p["workload"]) for p in pairs}
        for spec in a.config:
            cfg = load_config(spec)
            todo = [w for w in wls if (f"0x{cfg.fingerprint:08x}", w.name) not in have]
            if not todo:
                continue
            print(f"recording {cfg.bitstream_name} ({len(todo)} workloads)", flush=True)
            pairs += record_pairs(cfg, todo, log=lambda s: print(s, flush=True))
            save_pairs(pairs, a.out, note=f"workloads {a.workloads}, size {a.size}")
        return 0
    pairs = load_pairs(a.pairs)
    if a.cmd == "fit":
        m, info = fit(pairs)
        print(json.dumps({"model": m.as_dict(), **info}, indent=1))
        return 0
    for d in layer_errors(CycleModel(), pairs):
        print(f"{d['bitstream']:<28} {d['workload']:<14} rtl {d['rtl']:>10} model "
              f"{d['model']:>12.0f} {100 * d['error']:+6.2f} %  lower<=rtl "
              f"{d['lower'] <= d['rtl']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
