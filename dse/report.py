"""DSE reports: a JSON document with stable names, and a text table.

JSON (``schema = "vtaforge.dse.report/1"``)::

    {"schema", "part", "capacity": {lut, ff, dsp, bram36},
     "evaluator": {"resources", "performance", "cycle_model", "key"},
     "workloads": [{name, kind, height, width, ..., macs, full_macs}],
     "labels": {"resources": ..., "cycles": ..., "throughput": ...},
     "points": [{"params", "valid", "error", "config", "fingerprint", "bitstream",
                 "resources": {lut, ff, dsp, bram36, source}, "utilization": {..., max},
                 "fits", "acc": {...}, "timing": {"status", ...},
                 "workloads": {name: {cycles, cycles_lower, cycles_upper, [cycles_measured],
                                      macs, gemm_uops, ...}},
                 "cycles_total", "latency_us", "gops", "throughput_label",
                 "feasible", "reasons", "pareto", "cached", "notes", "errors"}],
     "pareto": [fingerprint, ...],
     "best": {"latency": fingerprint|null, "utilization": ..., "gops_per_utilization": ...},
     "selection": {"latency_band", "latency_ties": [fingerprint, ...], "rule",
                   "accuracy_floor" (a fraction or null), "accuracy_best", ...},
     "preset": fingerprint|null, "verify": promote()'s section|null,
     "summary": {"points", "valid", "fits", "feasible", "pareto", "cached"}}

Each valid point also has ``rungs`` (requested/ran per resources and cycles, and a
``status`` for ``--verify`` candidates), ``latency_band`` and, for candidates, ``verify``.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Sequence

from .evaluate import DesignEvaluator, UNVERIFIED_LABEL
from .performance import MODEL_ERROR_BAND
from .workloads import DseWorkload
from .search import PointResult

__all__ = ["SCHEMA", "build_report", "best_designs", "pick_floor", "above_floor", "format_table", "load_report",
           "write_report", "write_csv", "layer_breakdown", "CSV_COLUMNS"]

SCHEMA = "vtaforge.dse.report/1"


def _point_dict(pr: PointResult) -> dict:
    p, r, v = pr.point, pr.result, pr.verdict
    d: dict[str, Any] = {"params": p.params, "valid": p.valid, "error": p.error}
    if p.cfg is not None:
        res = dict(r.resources) if r and r.resources else None
        if res:
            res.pop("breakdown", None)
        d.update({
            "config": p.cfg.to_dict(), "fingerprint": f"0x{p.cfg.fingerprint:08x}",
            "bitstream": p.cfg.bitstream_name, "clock_mhz": float(p.cfg.CLOCK_MHZ),
            "bus_bits": p.cfg.BUS_WIDTH, "dsp_packing": p.cfg.DSP_PACKING,
            "peak_gops": p.cfg.peak_gops, "resources": res,
            "utilization": v.get("utilization"), "fits": v.get("fits"),
            "acc": r.acc if r else None, "timing": v.get("timing"),
            "workloads": r.workloads if r else {}, "cycles_total": v.get("cycles_total"),
            "latency_us": v.get("latency_us"), "gops": v.get("gops"),
            "throughput_label": v.get("throughput_label"),
            "performance_source": r.performance_source if r else None,
            "notes": r.notes if r else [], "errors": r.errors if r else [],
        })
        if r is not None and r.accuracy is not None:
            d["accuracy"] = r.accuracy.get("accuracy")
            d["accuracy_detail"] = r.accuracy
    d.update({"feasible": bool(v.get("feasible")), "reasons": v.get("reasons", []),
              "pareto": pr.pareto, "cached": pr.cached})
    return d


def _rungs(d: dict, res_req: str, perf_req: str) -> dict:
    """What each rung asked for and what actually ran on this point: ``{"resources":
    {"requested", "ran"}, "cycles": {"requested", "ran"}}``; ``ran`` is None where nothing
    ran (e.g. performance not evaluated because the point does not fit)."""
    res = d.get("resources") or {}
    wls = d.get("workloads") or {}
    if not wls or all("error" in w for w in wls.values()):
        cyc = None
    elif all("cycles_measured" in w for w in wls.values() if "error" not in w):
        cyc = "rtl"
    else:
        cyc = "model"
    return {"resources": {"requested": res_req, "ran": res.get("source")},
            "cycles": {"requested": perf_req, "ran": cyc if perf_req != "none" else None}}


def _rung_cell(r: dict) -> str:
    ran, req = r["ran"], r["requested"]
    if ran is None:
        return "-"
    return ran if ran == req else f"{ran}!"


def _res(p: dict, k: str) -> float:
    return float((p.get("resources") or {}).get(k) or 0)


def _band(p: dict, band: float) -> float:
    """A point's latency error band: its own ``latency_band`` when set, else ``band``."""
    b = p.get("latency_band")
    return float(band if b is None else b)


def latency_ties(points: Sequence[dict], band: float = MODEL_ERROR_BAND) -> list[dict]:
    """The feasible points the latency figures cannot tell from the fastest: latency
    within ``max(own band, the fastest's band)`` (relative) of the lowest.  A point's band
    is its ``latency_band`` (0 for RTL-measured latencies, the model's measured error band
    for estimates) or ``band``."""
    feas = [p for p in points if p.get("feasible") and p.get("latency_us")]
    if not feas:
        return []
    best = min(feas, key=lambda p: p["latency_us"])
    lo, b0 = best["latency_us"], _band(best, band)
    return [p for p in feas if p["latency_us"] <= lo * (1 + max(b0, _band(p, band)))]


def smallest_within(points: Sequence[dict], pct: float) -> str | None:
    """Fingerprint of the smallest design within ``pct`` % of the lowest latency: among
    the feasible points with ``latency <= lowest × (1 + pct/100)``, the lowest binding
    utilization, then the fewest DSPs, then LUTs, then the lowest latency."""
    feas = [p for p in points if p.get("feasible") and p.get("latency_us")]
    if not feas:
        return None
    lo = min(p["latency_us"] for p in feas)
    ok = [p for p in feas if p["latency_us"] <= lo * (1 + pct / 100.0)]
    return min(ok, key=lambda p: (p["utilization"]["max"], _res(p, "dsp"), _res(p, "lut"),
                                  p["latency_us"]))["fingerprint"]


#: The default accuracy floor: designs more than this below the best measured accuracy
#: (a fraction: 1 point of top-1) are never picked for latency or resources.
ACCURACY_FLOOR_MARGIN = 0.01


def pick_floor(points: Sequence[dict], floor: float | None = None) -> float | None:
    """The accuracy (a fraction) a design needs to be picked for latency, resources or
    ``--within``: ``floor`` when given, else the best accuracy of a feasible point minus
    :data:`ACCURACY_FLOOR_MARGIN`; ``None`` when no point has a measured accuracy (no
    floor)."""
    accs = [p["accuracy"] for p in points if p.get("accuracy") is not None]
    if not accs:
        return None
    if floor is not None:
        return float(floor)
    feas = [p["accuracy"] for p in points if p.get("feasible") and p.get("latency_us")
            and p.get("accuracy") is not None]
    return max(feas or accs) - ACCURACY_FLOOR_MARGIN


def above_floor(points: Sequence[dict], floor: float | None) -> list[dict]:
    """The points that may be picked: all of them without a floor, else those whose
    measured accuracy is at least ``floor`` (an unmeasured one is not)."""
    if floor is None:
        return list(points)
    return [p for p in points if p.get("accuracy") is not None
            and p["accuracy"] >= floor - 1e-12]


def best_designs(points: Sequence[dict], band: float = MODEL_ERROR_BAND,
                 within: float | None = None, floor: float | None = None) -> dict:
    """Fingerprints of the best feasible point per objective: ``latency`` (among the
    :func:`latency_ties` — points within the error band of the lowest latency — the one
    with the fewest DSPs, then LUTs, then the lowest latency, then BRAM; so a tie inside
    the error band never goes to twice the DSPs), ``utilization`` (lowest binding-resource
    utilization), ``gops_per_utilization`` (highest GOPS / utilization), and with
    ``within`` (percent) ``within`` (:func:`smallest_within`), and when any point has a
    measured ``accuracy``, ``accuracy`` (the highest accuracy, then the lowest latency,
    then the lowest binding utilization).  Other ties: first in point order.  With an
    accuracy ``floor`` (:func:`pick_floor`) every pick but ``accuracy`` is made among
    the points at or above it only (:func:`above_floor`)."""
    every = points
    points = above_floor(points, floor)
    feas = [p for p in points if p.get("feasible") and p.get("latency_us")]

    def pick(key, sign=1):
        if not feas:
            return None
        return min(feas, key=lambda p: sign * key(p))["fingerprint"]

    ties = latency_ties(points, band)
    lat = min(ties, key=lambda p: (_res(p, "dsp"), _res(p, "lut"), p["latency_us"],
                                   _res(p, "bram36")))["fingerprint"] if ties else None
    out = {"latency": lat,
           "utilization": pick(lambda p: p["utilization"]["max"]),
           "gops_per_utilization": pick(lambda p: p["gops"] / p["utilization"]["max"], -1)}
    if within is not None:
        out["within"] = smallest_within(points, within)
    if any(p.get("accuracy") is not None for p in every):
        acc = [p for p in every if p.get("feasible") and p.get("latency_us")
               and p.get("accuracy") is not None]
        out["accuracy"] = min(acc, key=lambda p: (-p["accuracy"], p["latency_us"],
                                                  p["utilization"]["max"]))["fingerprint"] \
            if acc else None
    return out


def build_report(results: Sequence[PointResult], workloads: Sequence[DseWorkload],
                 evaluator: DesignEvaluator, preset: Any = None, verify: dict | None = None,
                 within: float | None = None, accuracy_floor: float | None = None) -> dict:
    """The JSON report (see module docstring).  ``preset`` (a VTAConfig, e.g. the space's
    base) is named in ``report["preset"]`` when one of the points is that config;
    ``verify`` is :func:`~.promote.promote`'s section (promoted points then request the
    verify rungs, and estimates carry the larger of the stated and the measured model
    error as their band); ``within`` (percent) adds ``best["within"]``;
    ``accuracy_floor`` (a fraction; default: :func:`pick_floor`'s, when accuracy was
    measured) is the accuracy below which no design is picked but for ``best.accuracy``
    (``selection.accuracy_floor``)."""
    pts = [_point_dict(pr) for pr in results]
    pre_fp = None
    if preset is not None:
        fp = f"0x{preset.fingerprint:08x}"
        pre_fp = fp if any(p.get("fingerprint") == fp for p in pts) else None
    ev = evaluator
    perf = ev.perf_eval.name if ev.perf_eval is not None else "none"
    vpts = {v["fingerprint"]: v for v in (verify or {}).get("points", [])}
    for p in pts:
        if p["valid"]:
            p["rungs"] = _rungs(p, ev.res_eval.name, perf)
            v = vpts.get(p["fingerprint"])
            if v is not None:  # a candidate: it requested the verify rungs
                for rung, kind in (("rtl", "cycles"), ("yosys", "resources")):
                    if rung in v:
                        p["rungs"][kind]["requested"] = rung
                        p["rungs"][kind]["status"] = v[rung]["status"]
                p["verify"] = v
    ran = {k: {} for k in ("resources", "cycles")}
    base_rung = {"resources": ev.res_eval.name, "cycles": perf}
    for p in pts:
        for k, r in (p.get("rungs") or {}).items():
            if r["ran"] is None:
                continue
            # a promoted candidate ran the sweep's rung first (the verification section
            # says what the higher rung did)
            name = base_rung[k] if "verify" in p else r["ran"]
            ran[k][name] = ran[k].get(name, 0) + 1
    band = float(getattr(ev.perf_eval, "error_band", MODEL_ERROR_BAND))
    if perf == "rtl" and any("cycles_measured" not in w for p in pts if p.get("feasible")
                             for w in (p.get("workloads") or {}).values()):
        band = MODEL_ERROR_BAND  # some latencies are the model's (rtl did not run there)
    measured = ((verify or {}).get("model_error") or {}).get("max_abs")
    model_band = max(MODEL_ERROR_BAND, float(measured)) if measured is not None \
        else MODEL_ERROR_BAND
    if perf != "none":
        for p in pts:
            if p["valid"] and p.get("latency_us"):
                p["latency_band"] = 0.0 if p["rungs"]["cycles"]["ran"] == "rtl" else (
                    model_band if perf == "model" or verify else band)
    floor = pick_floor(pts, accuracy_floor)
    best = best_designs(pts, band, within, floor)
    eligible = above_floor(pts, floor)
    ok_ids = {id(p) for p in eligible}
    byfp = {p.get("fingerprint"): p for p in pts if p["valid"]}
    acc_best = max((p["accuracy"] for p in pts if p.get("feasible") and p.get("latency_us")
                    and p.get("accuracy") is not None), default=None)
    return {
        "schema": SCHEMA, "part": ev.part, "capacity": ev.capacity,
        "evaluator": {"resources": ev.res_eval.name, "performance": perf,
                      "cycle_model": ev.cycle_model.as_dict(), "key": ev.key(workloads)},
        "workloads": [w.describe() for w in workloads],
        "labels": {
            "resources": ("analytic: BRAM/DSP from geometry (equal to the recorded Yosys "
                          "figures); LUT/FF a linear estimate fitted on recorded Yosys points "
                          "(docs/dse.md: error on held-out configs)"
                          if ev.res_eval.name == "analytic" else
                          "Yosys synth_xilinx counts where run, analytic otherwise (see "
                          "resources.source)"),
            "cycles": ("estimated by the cycle model from fsim-executed programs "
                       "(cycles_lower/cycles_upper bound it)" if perf == "model" else
                       (f"cycles_measured: Verilator, zero-latency DRAM, on "
                        f"{ran['cycles'].get('rtl', 0)} points; the cycle model (rtl did not "
                        f"run) on {ran['cycles'].get('model', 0)}") if perf == "rtl" else
                       "not evaluated"),
            "throughput": UNVERIFIED_LABEL + " unless timing.status is 'met'",
        },
        "rungs": {"resources": {"requested": ev.res_eval.name, "ran": ran["resources"]},
                  "cycles": {"requested": perf, "ran": ran["cycles"]}},
        "points": pts,
        "preset": pre_fp,
        "pareto": [p["fingerprint"] for p in pts if p["pareto"]],
        "best": best,
        "best_breakdown": layer_breakdown(byfp[best["latency"]]) if best["latency"] else [],
        "selection": {
            "latency_band": band,
            "latency_ties": [p["fingerprint"] for p in latency_ties(eligible, band)],
            "model_band": model_band, "within_pct": within,
            "accuracy_floor": floor, "accuracy_floor_given": accuracy_floor is not None,
            "accuracy_best": acc_best,
            "below_accuracy_floor": sum(1 for p in pts if p.get("feasible")
                                        and p.get("latency_us") and id(p) not in ok_ids)
            if floor is not None else 0,
            "rule": (f"best latency: among the feasible points within their error band "
                     f"({band * 100:g} % for estimates" + (
                         f", {model_band * 100:.3g} % after verification" if verify else "")
                     + ", 0 for RTL-measured latencies) of the lowest latency, the fewest "
                     "DSPs, then LUTs, then the lowest latency, then BRAM")},
        "verify": verify,
        "accuracy": accuracy_by_width(pts),
        "summary": {"points": len(pts), "valid": sum(p["valid"] for p in pts),
                    "fits": sum(bool(p.get("fits")) for p in pts),
                    "feasible": sum(p["feasible"] for p in pts),
                    "pareto": sum(p["pareto"] for p in pts),
                    "cached": sum(p["cached"] for p in pts)},
    }


def accuracy_by_width(points: Sequence[dict]) -> list[dict] | None:
    """One entry per measured width (``None`` when accuracy was not measured):
    ``widths`` (``i16w16a32``), ``accuracy``, ``float_accuracy``, ``samples``, ``exact``,
    ``cpu_steps`` (or ``error``), ``points`` (how many points have these widths),
    ``feasible``, and the fastest feasible point of those widths: ``fastest`` (its
    fingerprint), ``latency_us``, ``utilization``."""
    groups: dict[str, dict] = {}
    for p in points:
        det = p.get("accuracy_detail")
        if not det:
            continue
        g = groups.setdefault(det["widths"], {
            **{k: det.get(k) for k in ("widths", "accuracy", "float_accuracy", "samples",
                                       "exact", "cpu_steps", "error", "dataset") if k in det},
            "points": 0, "feasible": 0, "fastest": None, "latency_us": None,
            "utilization": None})
        g["points"] += 1
        if p.get("feasible") and p.get("latency_us"):
            g["feasible"] += 1
            if g["latency_us"] is None or p["latency_us"] < g["latency_us"]:
                g.update(fastest=p["fingerprint"], latency_us=p["latency_us"],
                         utilization=p["utilization"]["max"])
    return list(groups.values()) or None


def layer_breakdown(p: dict) -> list[dict]:
    """Per workload (a ResNet-18 layer, or a whole model) of one point: ``name``,
    ``cycles`` (the ones latency uses: measured when present), ``source`` (rtl/model),
    ``share`` of the total, ``cycles_lower``/``cycles_upper`` (model bounds), ``macs``,
    ``gemm_uops``, ``latency_us`` and ``gops`` at the point's clock."""
    out = []
    wls = {n: w for n, w in (p.get("workloads") or {}).items() if "error" not in w}
    tot = sum(w.get("cycles_measured", w["cycles"]) for w in wls.values()) or 1.0
    clk = float(p.get("clock_mhz") or 1.0)
    for n, w in wls.items():
        c = float(w.get("cycles_measured", w["cycles"]))
        out.append({"name": n, "cycles": c, "source": "rtl" if "cycles_measured" in w else
                    "model", "share": c / tot, "cycles_lower": w.get("cycles_lower"),
                    "cycles_upper": w.get("cycles_upper"), "macs": w.get("macs"),
                    "gemm_uops": w.get("gemm_uops"), "latency_us": c / clk,
                    "gops": 2 * w.get("macs", 0) / (c / clk * 1e3) if c else None})
    return out


#: Columns of :func:`write_csv` (then one column per axis, ``param:<axis>``).
CSV_COLUMNS = ("fingerprint", "bitstream", "valid", "feasible", "pareto", "best_latency",
               "clock_mhz", "bus_bits", "dsp_packing", "lut", "ff", "dsp", "bram36",
               "resources_source", "util_lut", "util_ff", "util_dsp", "util_bram36",
               "util_max", "cycles_total", "cycles_source", "latency_us", "gops",
               "timing", "cached", "reasons", "accuracy")


def write_csv(report: dict, path: str | Path) -> None:
    """Every point of ``report`` as one CSV row (:data:`CSV_COLUMNS`, then the axis values
    as ``param:<axis>``); invalid points keep their params and the ConfigError in
    ``reasons``.  Written atomically."""
    import csv
    import io

    from ..runtime.npz import atomic_open

    axes: list[str] = []
    for p in report["points"]:
        for k in p["params"]:
            if k not in axes:
                axes.append(k)
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(list(CSV_COLUMNS) + [f"param:{a}" for a in axes])
    best = report["best"].get("latency")
    for p in report["points"]:
        res = p.get("resources") or {}
        u = p.get("utilization") or {}
        r = p.get("rungs") or {}
        reasons = list(p.get("reasons") or [])
        row = {"fingerprint": p.get("fingerprint"), "bitstream": p.get("bitstream"),
               "valid": p["valid"], "feasible": p["feasible"], "pareto": p["pareto"],
               "best_latency": p.get("fingerprint") == best and best is not None,
               "clock_mhz": p.get("clock_mhz"), "bus_bits": p.get("bus_bits"),
               "dsp_packing": p.get("dsp_packing"), "lut": res.get("lut"),
               "ff": res.get("ff"), "dsp": res.get("dsp"), "bram36": res.get("bram36"),
               "resources_source": res.get("source"),
               **{f"util_{k}": u.get(k) for k in ("lut", "ff", "dsp", "bram36", "max")},
               "cycles_total": p.get("cycles_total"),
               "cycles_source": (r.get("cycles") or {}).get("ran"),
               "latency_us": p.get("latency_us"), "gops": p.get("gops"),
               "timing": (p.get("timing") or {}).get("status"), "cached": p.get("cached"),
               "reasons": "; ".join(reasons), "accuracy": p.get("accuracy")}
        w.writerow(["" if row[c] is None else row[c] for c in CSV_COLUMNS]
                   + ["" if p["params"].get(a) is None else p["params"][a] for a in axes])
    with atomic_open(path) as f:
        f.write(buf.getvalue().encode())


def write_report(report: dict, path: str | Path) -> None:
    from ..runtime.npz import atomic_open

    with atomic_open(path) as f:  # a failed write never truncates an existing report
        f.write((json.dumps(report, indent=1, sort_keys=False) + "\n").encode())


def load_report(path: str | Path) -> dict:
    """Read a report written by :func:`write_report`.

    Raises:
        ValueError: not text, not JSON or not a DSE report (the message names the file).
        OSError: unreadable.
    """
    p = Path(path)
    try:
        d = json.loads(p.read_text())
    except UnicodeDecodeError:
        raise ValueError(f"{p}: not a text file (a DSE report is JSON)") from None
    except json.JSONDecodeError as e:
        raise ValueError(f"{p}: not a JSON file ({e.msg}, line {e.lineno})") from None
    if not isinstance(d, dict) or d.get("schema") != SCHEMA:
        raise ValueError(f"{p}: not a vtaforge DSE report (schema {SCHEMA!r} expected)")
    for key, kind in (("points", list), ("capacity", dict), ("summary", dict),
                      ("best", dict), ("evaluator", dict)):
        if not isinstance(d.get(key), kind):
            raise ValueError(f"{p}: malformed DSE report: {key!r} is "
                             f"{'missing' if key not in d else type(d[key]).__name__}, not a "
                             f"{'list' if kind is list else 'JSON object'}")
    bad = next((i for i, q in enumerate(d["points"])
                if not isinstance(q, dict) or not isinstance(q.get("params"), dict)), None)
    if bad is not None:
        raise ValueError(f"{p}: malformed DSE report: point {bad} is not an object with "
                         f"'params'")
    return d


def _fmt(v, spec=".1f", none="-"):
    return none if v is None else format(v, spec)


def format_table(report: dict, *, limit: int | None = 30, only_feasible: bool = False) -> str:
    """Text table: one line per point (feasible first, by latency), then best designs."""
    pts = report["points"]
    rows = [p for p in pts if p["valid"] and (p["feasible"] or not only_feasible)]
    rows.sort(key=lambda p: (not p["feasible"], p.get("latency_us") or float("inf")))
    cap = report["capacity"]
    def rung_head(k):
        rg = (report.get("rungs") or {}).get(k)
        if not rg:  # a report from before the rung labels
            return report["evaluator"]["resources" if k == "resources" else "performance"]
        req, ran = rg["requested"], rg["ran"]
        if not ran:
            return f"{req} (not run)"
        if set(ran) == {req}:
            return req
        other = {n: c for n, c in ran.items() if n != req}
        return (f"{req} ran on {ran.get(req, 0)} points, NOT on {sum(other.values())} "
                f"({', '.join(f'{n} used instead' for n in sorted(other))}; marked '!')")

    lines = [f"part {report['part']}: {cap['lut']} LUT, {cap['ff']} FF, {cap['dsp']} DSP, "
             f"{cap['bram36']} BRAM36; resources: {rung_head('resources')}; "
             f"cycles: {rung_head('cycles')}",
             f"{'fingerprint':<11} {'bitstream':<28} {'bus':>4} {'pk':>2} {'LUT%':>5} "
             f"{'DSP%':>5} {'BRAM%':>6} {'fits':>4} {'cycles':>11} {'lat_us':>9} "
             f"{'GOPS':>6} {'P':>1} {'res':<9} {'cyc':<6} status"]
    has_acc = bool(report.get("accuracy"))
    if has_acc:
        lines[-1] = lines[-1].replace(" status", f" {'acc%':>5} status")
    shown = rows if limit is None else rows[:limit]
    for p in shown:
        u = p.get("utilization") or {}
        pct = lambda k: _fmt(u.get(k) * 100 if u.get(k) is not None else None)  # noqa: E731, B023 (used at once)
        status = "ok" if p["feasible"] else "; ".join(p["reasons"])[:70]
        if has_acc:
            a = p.get("accuracy")
            status = f"{_fmt(a * 100 if a is not None else None):>5} {status}"
        lines.append(
            f"{p['fingerprint']:<11} {p['bitstream']:<28} {p.get('bus_bits', '-'):>4} "
            f"{p.get('dsp_packing', '-'):>2} {pct('lut'):>5} {pct('dsp'):>5} {pct('bram36'):>6} "
            f"{'yes' if p.get('fits') else 'NO':>4} {_fmt(p.get('cycles_total'), '.0f'):>11} "
            f"{_fmt(p.get('latency_us')):>9} {_fmt(p.get('gops')):>6} "
            f"{'*' if p['pareto'] else ' ':>1} "
            f"{_rung_cell(p['rungs']['resources']) if p.get('rungs') else '':<9} "
            f"{_rung_cell(p['rungs']['cycles']) if p.get('rungs') else '':<6} {status}")
    if len(rows) > len(shown):
        lines.append(f"... {len(rows) - len(shown)} more (see the JSON report)")
    inval = [p for p in pts if not p["valid"]]
    for p in inval[:5]:
        lines.append(f"invalid {' '.join(f'{k}={v}' for k, v in p['params'].items())}: "
                     f"{p['error']}")
    if len(inval) > 5:
        lines.append(f"... {len(inval) - 5} more invalid points")
    s = report["summary"]
    lines.append(f"{s['points']} points: {s['valid']} valid, {s['fits']} fit, "
                 f"{s['feasible']} feasible, {s['pareto']} on the Pareto front "
                 f"(latency vs binding-resource use), {s['cached']} from cache")
    byfp = {p.get("fingerprint"): p for p in pts if p["valid"]}
    sel = report.get("selection")
    if sel and sel.get("accuracy_floor") is not None:
        how = ("given" if sel.get("accuracy_floor_given") else
               f"the best feasible accuracy {_fmt((sel.get('accuracy_best') or 0) * 100)} % "
               f"minus {ACCURACY_FLOOR_MARGIN * 100:g} point")
        lines.append(f"accuracy floor {sel['accuracy_floor'] * 100:.1f} % ({how}): designs "
                     f"below it are not picked (best accuracy aside); "
                     f"{sel.get('below_accuracy_floor', 0)} feasible point(s) below it")
    if sel and report["best"].get("latency"):
        lo = min(byfp[f]["latency_us"] for f in sel["latency_ties"])
        pk = byfp[report["best"]["latency"]]
        lines.append(f"{sel['rule']}: {len(sel['latency_ties'])} point(s) within the band; "
                     f"the pick is {100 * (pk['latency_us'] / lo - 1):.2f} % slower than the "
                     f"fastest estimate with {pk['resources']['dsp']} DSPs")
    for obj, fp in report["best"].items():
        if fp is None:
            lines.append(f"best {obj}: none feasible")
            continue
        p = byfp[fp]
        acc = (f", accuracy {p['accuracy'] * 100:.1f} %" if p.get("accuracy") is not None
               else "")
        lines.append(f"best {obj}: {fp} {p['bitstream']} "
                     f"({' '.join(f'{k}={v}' for k, v in p['params'].items())}): "
                     f"{_fmt(p['latency_us'])} us, {_fmt(p['gops'])} GOPS "
                     f"{p['throughput_label']}, binding resource "
                     f"{_fmt(p['utilization']['max'] * 100)} %{acc}")
    for g in report.get("accuracy") or []:
        if "error" in g:
            lines.append(f"accuracy {g['widths']}: not measured ({g['error']})")
            continue
        fast = (f"fastest feasible {g['fastest']} {_fmt(g['latency_us'])} us, binding "
                f"resource {_fmt(g['utilization'] * 100)} %" if g["fastest"] else
                "no feasible point")
        cpu = f"; on the CPU: {', '.join(g['cpu_steps'])}" if g.get("cpu_steps") else ""
        what = "images" if g.get("dataset", "digits") == "digits" else "inputs"
        lines.append(f"accuracy {g['widths']}: {g['accuracy'] * 100:.1f} % on {g['samples']} "
                     f"labelled {what} (float {g['float_accuracy'] * 100:.1f} %; VTA steps "
                     f"bit-exact: {'yes' if g['exact'] else 'NO'}{cpu}); {g['points']} "
                     f"point(s), {g['feasible']} feasible; {fast}")
    lines += format_verify(report)
    bd = report.get("best_breakdown")
    if bd:
        lines.append(f"per-layer breakdown of the best-latency point {report['best']['latency']}:")
        lines.append(f"  {'workload':<16} {'cycles':>11} {'src':<5} {'share':>6} "
                     f"{'lower':>11} {'upper':>11} {'lat_us':>9} {'GOPS':>6}")
        for L in bd:
            lines.append(f"  {L['name']:<16} {L['cycles']:>11.0f} {L['source']:<5} "
                         f"{L['share'] * 100:>5.1f}% {_fmt(L['cycles_lower'], '.0f'):>11} "
                         f"{_fmt(L['cycles_upper'], '.0f'):>11} {_fmt(L['latency_us']):>9} "
                         f"{_fmt(L['gops']):>6}")
    return "\n".join(lines)


def format_verify(report: dict, limit: int = 12) -> list[str]:
    """Text lines of the verification section: per rung what ran, then per candidate the
    model's cycles and resources next to the measured ones (RTL, Yosys) and the status of
    each rung (``ran``, ``not run: budget exhausted``, ``not run: tool missing (...)``,
    ``failed: ...``); the points a rung ran on, then other candidates up to ``limit``
    lines."""
    v = report.get("verify")
    if not v:
        return []
    rungs = v["rungs"]
    head = "; ".join((f"{r}: {d['status']} on {d['points']} point(s)"
                      + (f", shared by {d['shared']} with the same programs"
                         if d.get("shared") else "")) if d["status"] == "ran"
                     else f"{r}: {d['status']}" for r, d in rungs.items())
    me = v.get("model_error") or {}
    nver = v.get("verifications")
    out = [f"verification of {len(v['candidates'])} candidate(s) (the pick, the Pareto front "
           f"+ points within the {100 * v['band']:g} % model band), budget {v['budget']}"
           + (f" ({nver} used)" if nver is not None else "") + f": {head}"]
    byfp = {p.get("fingerprint"): p for p in report.get("points", []) if p.get("valid")}
    for obj in ("latency", "within"):
        fp = (report.get("best") or {}).get(obj)
        if fp is None or (obj == "within" and fp == report["best"].get("latency")):
            continue
        ent = (byfp.get(fp) or {}).get("verify")
        sts = "; ".join(f"{r} {(ent.get(r) or {}).get('status', '-')}" for r in rungs) \
            if ent else "not a --verify candidate"
        ok = ent is not None and all(
            str((ent.get(r) or {}).get("status", "")).startswith(("ran", "shared"))
            for r in rungs)
        out.append(f"  the best-{obj} pick {fp}: {'verified' if ok else 'NOT verified'} "
                   f"({sts})")
    if me.get("points"):
        out.append(f"  cycle model vs RTL on {me['points']} point(s): mean |error| "
                   f"{100 * me['mean_abs']:.2f} %, max {100 * me['max_abs']:.2f} %")
    out.append(f"  {'fingerprint':<11} {'bitstream':<28} {'model cyc':>11} {'rtl cyc':>11} "
               f"{'err%':>6} {'LUT a/y':>13} {'DSP a/y':>9} {'BRAM a/y':>11}  status")
    ran = [e for e in v["points"] if any(str((e.get(r) or {}).get("status", "")).startswith(
        ("ran", "shared")) for r in rungs)]
    rest = [e for e in v["points"] if e not in ran]
    shown = ran + rest[:max(0, limit - len(ran))]
    for e in shown:
        m = e["model"]
        rt = e.get("rtl") or {}
        y = e.get("yosys") or {}

        def ay(k, spec, m=m, y=y):
            b = y.get(k) if y.get("status") == "ran" else None
            return f"{_fmt(m.get(k), spec)}/{_fmt(b, spec)}"

        st = "; ".join(f"{r} {(e.get(r) or {}).get('status', '-')}" for r in rungs)
        out.append(f"  {e['fingerprint']:<11} {e['bitstream']:<28} "
                   f"{_fmt(m.get('cycles'), '.0f'):>11} {_fmt(rt.get('cycles'), '.0f'):>11} "
                   f"{_fmt(rt['error'] * 100 if rt.get('error') is not None else None, '+.2f'):>6} "
                   f"{ay('lut', '.0f'):>13} {ay('dsp', '.0f'):>9} {ay('bram36', 'g'):>11}  {st}")
    if len(shown) < len(v["points"]):
        sts = sorted({f"{r} {(e.get(r) or {}).get('status', '-')}" for e in rest for r in rungs})
        out.append(f"  ... {len(v['points']) - len(shown)} more candidate(s) ({'; '.join(sts)}; "
                   f"see the JSON report)")
    return out
