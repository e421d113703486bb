"""Evaluators of one design point: resources, performance, accumulator safety.

Split along its seams: workloads (:mod:`.workloads`), resource evaluators
(:mod:`.resources`), performance evaluators and the cycle model (:mod:`.performance`), the
result record (:mod:`.result`); this module combines them (:class:`DesignEvaluator`,
:func:`judge`).  Import each name from the module that defines it.

Every evaluator has ``evaluate(cfg, workloads) -> Result`` and a ``key`` (a dict of its
settings, part of the cache key).  :class:`DesignEvaluator` combines a resource evaluator,
a performance evaluator and :class:`AccSafety`; :func:`judge` then applies the part's
capacity and an optional timing result (BR-31) to decide feasibility.

Resources (docs/dse.md "Resource model"):

- :class:`AnalyticResources` (default): BRAM from the scratchpad and command-queue
  geometry with the RAMB18/RAMB36 aspect-ratio rule of :func:`bram36_for_memory`
  (derived from hardware-notes.md "Scratchpads"; reproduces the measured Yosys figures
  exactly for pynq, 114.5, and tiny, 12.5); DSP = ceil((MACs − LUT_MULTIPLIERS) /
  packing); LUT and FF a linear model in MACs, GEMM DSP slices, ALU lanes, ALU lane bits,
  input element bits and bus width (plus LUT multipliers and the fused requantize as
  terms of their own), least-squares fitted on recorded Yosys points
  (tests/dse/data/yosys_points.json; a *calibrated estimate*, docs/dse.md has its error on
  held-out configs).
- :class:`YosysResources`: real Yosys ``synth_xilinx`` counts via ``hw/estimate.py`` for
  configs up to ``max_macs`` multipliers (minutes each; larger ones fall back to the
  analytic model and say so).

Performance:

- :class:`ModelPerformance` (default): compiles each workload with ``compile_model`` for
  the config, runs it on the functional simulator, decodes every launched program and
  turns it into cycles with :class:`CycleModel` (an *estimate*; lower and upper bounds).
- :class:`RtlPerformance`: the same, on the cycle-accurate Verilator backend (measured
  cycles, zero-latency DRAM model) for small configs; the model figures are kept next to
  the measured ones.

Throughput is reported at ``cfg.CLOCK_MHZ``, labelled "at target clock, timing not
verified" unless a timing result is supplied; a point with negative slack (or fmax below
the clock) is infeasible and gets no throughput (BR-31).
"""

from __future__ import annotations

import copy
import dataclasses
import hashlib
import json
import math
from pathlib import Path
from typing import Any, Mapping, Sequence

from ..hw.config import VTAConfig
from ..hw.estimate import PARTS, part_info
from .result import DSEError, Result, _fp
from .workloads import DseWorkload
from .resources import AnalyticResources, YosysResources, resource_record, resources_fit
from .performance import (AccSafety, CycleModel, ModelPerformance, RtlPerformance, TRACE_BOUND_FIELDS,
                          perf_record)

__all__ = ["DesignEvaluator", "judge", "MODEL_VERSION", "UNVERIFIED_LABEL", "PROGRAM_NEUTRAL_FIELDS",
           "program_key", "program_family", "code_hash", "known_parts", "load_timing", "unmatched_timing",
           "TIMING_FIELDS"]

#: Bump when a model changes: cached results of another version are not reused.
MODEL_VERSION = 2

_PKG = Path(__file__).resolve().parent.parent     # the installed vtaforge package
#: Source files each kind of cached evaluation depends on besides its settings (relative to
#: the package): the compiler and runtime decide the programs and their stats, the cycle
#: and resource models price them.  Their hash is part of every cache key, so a cache
#: written by another version of the code is not reused (no version number to forget).
_CODE_DEPS = {"res": ("dse/resources.py", "hw/estimate.py"),
              "perf": ("compiler", "runtime", "dse/performance.py", "dse/workloads.py"),
              "accuracy": ("compiler", "runtime", "dse/accuracy.py")}
_code_hashes: dict[str, str] = {}


def code_hash(kind: str) -> str:
    """SHA-1 (16 hex digits) of the Python sources evaluation ``kind`` (``res``, ``perf``,
    ``accuracy``) depends on (:data:`_CODE_DEPS`), computed once per process; files that
    are missing (an unusual install) hash as absent."""
    if kind not in _code_hashes:
        h = hashlib.sha1()
        for dep in _CODE_DEPS[kind]:
            p = _PKG / dep
            files = sorted(p.rglob("*.py")) if p.is_dir() else [p]
            for f in files:
                h.update(str(f.relative_to(_PKG)).encode())
                h.update(f.read_bytes() if f.is_file() else b"<missing>")
        _code_hashes[kind] = h.hexdigest()[:16]
    return _code_hashes[kind]

UNVERIFIED_LABEL = "at target clock, timing not verified"

#: VTAConfig fields that change no instruction the compiler emits and nothing the
#: functional simulator does (the compiler and runtime never read them), hence no cycle of
#: the cycle model: points that differ only in these share one performance evaluation
#: (latency still scales with each point's own CLOCK_MHZ).  Not applied to ``--perf rtl``:
#: the RTL's pipeline may depend on packing or LUT multipliers.
PROGRAM_NEUTRAL_FIELDS = ("DSP_PACKING", "LUT_MULTIPLIERS", "CLOCK_MHZ", "PART")


def program_key(cfg: VTAConfig) -> str:
    """Key of what the compiled programs depend on: the config without
    :data:`PROGRAM_NEUTRAL_FIELDS`."""
    d = {k: v for k, v in dataclasses.asdict(cfg).items() if k not in PROGRAM_NEUTRAL_FIELDS}
    return json.dumps(d, sort_keys=True)


def program_family(cfg: VTAConfig) -> str:
    """:func:`program_key` without the buffer sizes (``TRACE_BOUND_FIELDS``): configs of one
    family often compile to the same programs (``performance.program_memo_key``)."""
    d = {k: v for k, v in dataclasses.asdict(cfg).items()
         if k not in PROGRAM_NEUTRAL_FIELDS and k not in TRACE_BOUND_FIELDS}
    return json.dumps(d, sort_keys=True)


# =============================================================================== combined
class DesignEvaluator:
    """Resources, then performance (only for points that fit the part, unless
    ``perf_when_unfit``), then accumulator safety, as one :class:`Result`.

    Args:
        part: a key of ``hw.estimate.PARTS`` (or a full part name starting with one).
        resources: ``"analytic"`` or ``"yosys"`` (or an evaluator object).
        performance: ``"model"``, ``"rtl"``, ``"none"`` (or an evaluator object).
        cycle_model: parameters of :class:`CycleModel`.
        accuracy: ``None`` (default: not measured), a data set name (``"digits"``), a
            user's ``"MODEL.onnx:DATA.npz"`` or an :class:`~.accuracy.AccuracyEvaluator`:
            each point also gets the top-1 accuracy of that labelled model compiled for its
            widths (one fsim measurement per :func:`~.accuracy.accuracy_key`, shared by the
            points with that key).

    Raises:
        DSEError: unknown part, mode or accuracy data set, or a bad accuracy model / data file.
    """

    def __init__(self, part: str = "xc7z020", resources: Any = "analytic",
                 performance: Any = "model", cycle_model: CycleModel | None = None,
                 perf_when_unfit: bool = False, max_macs: int | None = 64,
                 accuracy: Any = None):
        from .accuracy import make_accuracy

        self.part = part
        self.accuracy_eval = make_accuracy(accuracy)
        self.cycle_model = cycle_model or CycleModel()
        if resources == "analytic":
            resources = AnalyticResources(part)
        elif resources == "yosys":
            resources = YosysResources(part, max_macs)
        elif isinstance(resources, str):
            raise DSEError(f"unknown resource evaluator {resources!r}; allowed: analytic, yosys")
        if performance == "model":
            performance = ModelPerformance(self.cycle_model)
        elif performance == "rtl":
            performance = RtlPerformance(self.cycle_model, max_macs=max_macs)
        elif performance in ("none", None):
            performance = None
        elif isinstance(performance, str):
            raise DSEError(f"unknown performance evaluator {performance!r}; allowed: model, "
                           f"rtl, none")
        self.res_eval = resources
        self.perf_eval = performance
        self.acc_eval = AccSafety()
        self.perf_when_unfit = perf_when_unfit
        self.capacity = {k: part_info(part)[k] for k in ("lut", "ff", "dsp", "bram36")}
        #: perf_key -> record, for :meth:`evaluate` called directly (run_search caches).
        self._perf_memo: dict[str, dict] = {}

    # ------------------------------------------------------------------ evaluation units
    def resource_key(self, cfg: VTAConfig) -> str:
        """Cache key of a resource evaluation: the model version, the resource evaluator's
        settings and the whole hardware config (every field)."""
        d = {"v": MODEL_VERSION, "code": code_hash("res"), "res": self.res_eval.key,
             "cfg": dataclasses.asdict(cfg)}
        return hashlib.sha1(json.dumps(d, sort_keys=True).encode()).hexdigest()[:20]

    def perf_key(self, cfg: VTAConfig, wl: DseWorkload) -> str:
        """Cache key of one performance evaluation: the model version, the performance
        evaluator's settings, the workload (shape as run) and the ISA-visible config
        (:func:`program_key`: without :data:`PROGRAM_NEUTRAL_FIELDS`) when the evaluator
        ``shares_programs``, else the whole config (``--perf rtl``)."""
        pe = self.perf_eval
        cfgk = program_key(cfg) if getattr(pe, "shares_programs", False) \
            else json.dumps(dataclasses.asdict(cfg), sort_keys=True)
        d = {"v": MODEL_VERSION, "code": code_hash("perf"), "perf": pe.key if pe else None,
             "cfg": cfgk, "wl": wl.describe()}
        return hashlib.sha1(json.dumps(d, sort_keys=True).encode()).hexdigest()[:20]

    def accuracy_key(self, cfg: VTAConfig) -> str:
        """Cache key of an accuracy measurement: the model version, the accuracy
        evaluator's settings and :func:`~.accuracy.accuracy_key` of the config (its widths)."""
        from .accuracy import accuracy_key

        d = {"v": MODEL_VERSION, "code": code_hash("accuracy"), "accuracy": self.accuracy_eval.key,
             "cfg": accuracy_key(cfg)}
        return hashlib.sha1(json.dumps(d, sort_keys=True).encode()).hexdigest()[:20]

    def run_resources(self, cfg: VTAConfig) -> dict:
        """One resource evaluation (:func:`resource_record`)."""
        return resource_record(self.res_eval, cfg)

    def run_perf(self, cfg: VTAConfig, wl: DseWorkload) -> dict:
        """One performance evaluation (:func:`perf_record`)."""
        return perf_record(self.perf_eval, cfg, wl)

    def wants_perf(self, res_record: Mapping) -> bool:
        """Performance is evaluated for this resource record: it fits the part (or
        ``perf_when_unfit``) and there is a performance evaluator."""
        return self.perf_eval is not None and (
            self.perf_when_unfit or resources_fit(res_record.get("resources"), self.capacity))

    def assemble(self, cfg: VTAConfig, res_record: Mapping, perf_records: Mapping,
                 workloads: Sequence[DseWorkload]) -> Result:
        """The :class:`Result` of one point from its resource record and its performance
        records (``workload name -> record``; ignored when :meth:`wants_perf` is false),
        plus accumulator safety (cheap, never cached)."""
        r = Result(_fp(cfg), cfg.to_dict(), resources=copy.deepcopy(res_record["resources"]),
                   notes=list(res_record.get("notes", [])),
                   errors=list(res_record.get("errors", [])))
        if self.wants_perf(res_record):
            shared = set()
            for wl in workloads:
                rec = perf_records[wl.name]
                r.workloads[wl.name] = copy.deepcopy(rec["workload"])
                r.performance_source = rec["source"] if r.performance_source in (
                    None, rec["source"]) else "model"
                r.notes += [n for n in rec.get("notes", []) if n not in r.notes]
                if rec.get("by") and rec["by"] != r.fingerprint:
                    shared.add(rec["by"])
            if shared:
                r.notes.append(f"performance shared with {', '.join(sorted(shared))}: same "
                               f"programs (differs only in {', '.join(PROGRAM_NEUTRAL_FIELDS)})")
        elif self.perf_eval is not None:
            r.notes.append("performance not evaluated: does not fit the part")
        r.acc = self.acc_eval.evaluate(cfg, workloads)
        return r

    def key(self, workloads: Sequence[DseWorkload]) -> str:
        """Hash of everything that changes an evaluation except the config itself."""
        d = {"v": MODEL_VERSION, "code": [code_hash(k) for k in sorted(_CODE_DEPS)],
             "res": self.res_eval.key,
             "perf": self.perf_eval.key if self.perf_eval else None,
             "unfit": self.perf_when_unfit, "workloads": [w.describe() for w in workloads]}
        if self.accuracy_eval is not None:
            d["accuracy"] = self.accuracy_eval.key
        return hashlib.sha1(json.dumps(d, sort_keys=True).encode()).hexdigest()[:16]

    def evaluate(self, cfg: VTAConfig, workloads: Sequence[DseWorkload]) -> Result:
        """One point in this process: resources, performance if it fits (or
        ``perf_when_unfit``; records shared in memory by :meth:`perf_key`), and accumulator
        safety, as one :class:`Result` (failures are recorded, not raised)."""
        res = self.run_resources(cfg)
        perf = {}
        if self.wants_perf(res):
            for wl in workloads:
                k = self.perf_key(cfg, wl)
                if k not in self._perf_memo:
                    self._perf_memo[k] = self.run_perf(cfg, wl)
                perf[wl.name] = self._perf_memo[k]
        r = self.assemble(cfg, res, perf, workloads)
        if self.accuracy_eval is not None:
            k = "acc:" + self.accuracy_key(cfg)
            if k not in self._perf_memo:
                self._perf_memo[k] = self.accuracy_eval.measure(cfg)
            r.accuracy = copy.deepcopy(self._perf_memo[k])
        return r


# =============================================================================== judge
def judge(result: Result, cfg_clock_mhz: float, capacity: Mapping,
          timing: Mapping | None = None, bitstream: str | None = None) -> dict:
    """Turn a :class:`Result` into the report's verdict for one point.

    Args:
        timing: optional ``{fingerprint hex "0x…" or bitstream name: {"slack_ns": float} or
            {"fmax_mhz": float}, optional "source": str}``.  Negative slack or fmax below
            the clock makes the point infeasible at that clock (BR-31).

    Returns:
        ``{"utilization": {lut, ff, dsp, bram36, max}, "fits", "timing": {"status":
        "met"|"failed"|"unverified", ...}, "cycles_total", "latency_us", "gops",
        "throughput_label", "feasible", "reasons": [...]}``.
    """
    res = result.resources or {}
    util = {k: (res[k] / capacity[k]) if res else None for k in ("lut", "ff", "dsp", "bram36")}
    util["max"] = max(util.values()) if res else None
    fits = resources_fit(res, capacity)
    reasons = []
    if not res:
        reasons.append("no resource estimate")
    elif not fits:
        over = [f"{k.upper()} {res[k]:g} > {capacity[k]}" for k in ("lut", "ff", "dsp", "bram36")
                if res[k] > capacity[k]]
        reasons.append("does not fit: " + ", ".join(over))
    t = None
    if timing:
        t = timing.get(result.fingerprint) or (timing.get(bitstream) if bitstream else None)
    tinfo: dict[str, Any] = {"status": "unverified"}
    if t is not None:
        tinfo = {k: t[k] for k in ("slack_ns", "fmax_mhz", "source") if k in t}
        failed = ("slack_ns" in t and float(t["slack_ns"]) < 0) or \
                 ("fmax_mhz" in t and float(t["fmax_mhz"]) < cfg_clock_mhz)
        tinfo["status"] = "failed" if failed else "met"
        if failed:
            reasons.append(f"timing failed at {cfg_clock_mhz:g} MHz"
                           + (f" (slack {float(t['slack_ns']):g} ns)" if "slack_ns" in t else
                              f" (fmax {float(t['fmax_mhz']):g} MHz)"))
    wls = result.workloads or {}
    errs = [f"{n}: {v['error']}" for n, v in wls.items() if "error" in v]
    cpu = [f"{n}: {', '.join(v['cpu_compute_ops'])} on CPU" for n, v in wls.items()
           if v.get("cpu_compute_ops")]
    reasons += [f"workload failed: {e}" for e in errs]
    reasons += [f"not offloaded: {c}" for c in cpu]
    if fits and not wls:
        reasons.append("no performance result")
    acc = result.acc or {}
    if acc and not acc.get("safe", True):
        reasons.append(f"accumulator may overflow ({acc['acc_width']}-bit) on "
                       f"{', '.join(acc['unsafe_workloads'])}")
    complete = bool(wls) and not errs and not cpu
    cyc = None
    if complete:
        cyc = float(sum(v.get("cycles_measured", v["cycles"]) for v in wls.values()))
    macs = sum(v.get("macs", 0) for v in wls.values()) if complete else 0
    latency_us = cyc / cfg_clock_mhz if cyc else None
    timing_ok = tinfo["status"] != "failed"
    gops = (2 * macs / (latency_us * 1e3)) if (latency_us and timing_ok) else None
    label = None
    if gops is not None:
        label = (f"at {cfg_clock_mhz:g} MHz, timing met" if tinfo["status"] == "met"
                 else f"{UNVERIFIED_LABEL} ({cfg_clock_mhz:g} MHz)")
    return {"utilization": util, "fits": fits, "timing": tinfo, "cycles_total": cyc,
            "latency_us": latency_us if timing_ok else None, "gops": gops,
            "throughput_label": label, "feasible": not reasons, "reasons": reasons}


#: The fields of a timing file's entry and what each must be.
TIMING_FIELDS = {"slack_ns": "a finite number", "fmax_mhz": "a positive finite number",
                 "source": "a string"}


def load_timing(path: str | Path) -> dict:
    """Read a timing file (see :func:`judge`): an object mapping a config fingerprint
    (``"0x…"``, hex, normalized to ``0x%08x``) or a bitstream name to an entry with a
    finite number ``slack_ns`` and / or a positive finite number ``fmax_mhz``, and an
    optional string ``source``.

    Raises:
        DSEError: unreadable, not JSON, a malformed fingerprint, an entry without
            ``slack_ns``/``fmax_mhz``, or one of those fields (or ``source``) of the
            wrong type (one line naming the entry and the field); other fields (what
            ``vtaforge hw timing`` records beside them) are ignored.
    """
    p = Path(path)
    try:
        d = json.loads(p.read_text())
    except OSError as e:
        raise DSEError(f"cannot read timing file {str(p)!r}: {e.strerror or e}") from None
    except json.JSONDecodeError as e:
        raise DSEError(f"timing file {str(p)!r} is not valid JSON: {e.msg} (line {e.lineno})") \
            from None
    if not isinstance(d, dict):
        raise DSEError(f"timing file {str(p)!r} must be an object: fingerprint -> "
                       f"{{\"slack_ns\": x}}")
    out: dict = {}
    for k, v in d.items():
        where = f"timing file {str(p)!r}: entry {k!r}"
        key = k
        if k[:2].lower() == "0x":
            try:
                fp = int(k, 16)
            except ValueError:
                fp = -1
            if not 0 <= fp < 1 << 32:
                raise DSEError(f"{where}: not a config fingerprint (0x and up to 8 hex digits)")
            key = f"0x{fp:08x}"
        if not isinstance(v, dict) or not ({"slack_ns", "fmax_mhz"} & set(v)):
            raise DSEError(f"{where} needs \"slack_ns\" or \"fmax_mhz\"")
        for f, x in v.items():
            if f not in TIMING_FIELDS:
                continue    # what else a timing run records (``vtaforge hw timing``: config ...)
            if f == "source":
                ok = isinstance(x, str)
            else:
                ok = isinstance(x, (int, float)) and not isinstance(x, bool) \
                    and math.isfinite(x) and (f != "fmax_mhz" or x > 0)
            if not ok:
                raise DSEError(f"{where}: {f!r} must be {TIMING_FIELDS[f]}, not "
                               f"{json.dumps(x)}")
        if key in out:
            raise DSEError(f"{where}: a second entry for fingerprint {key}")
        out[key] = v
    return out


def unmatched_timing(timing: Mapping, points) -> list[str]:
    """The keys of ``timing`` (:func:`load_timing`) that name none of ``points`` (valid
    space points) by fingerprint or bitstream name: entries that apply to nothing."""
    names = set()
    for pt in points:
        if pt.cfg is not None:
            names.add(f"0x{pt.cfg.fingerprint:08x}")
            names.add(pt.cfg.bitstream_name)
    return [k for k in timing if k not in names]


def known_parts() -> list[str]:
    """Part names accepted by ``--part`` (keys of ``PARTS``)."""
    return list(PARTS)
