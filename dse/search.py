"""Run a space against workloads: evaluations (in process or on Dask), an append-only
result cache, verdicts, Pareto front.

:func:`run_search` splits a sweep into *evaluations*, the units that are cached and that
run on Dask workers (:mod:`.parallel`):

- one **resource** evaluation per hardware config, keyed by the resource evaluator and the
  whole config (:meth:`~.evaluate.DesignEvaluator.resource_key`); the analytic model is
  cheap and always runs in the driver, Yosys runs on the workers;
- one **performance** evaluation per (ISA-visible config, workload), keyed by the
  performance evaluator, the workload and :func:`~.evaluate.program_key` (the config
  without DSP_PACKING, LUT_MULTIPLIERS, CLOCK_MHZ, PART; the whole config for
  ``--perf rtl``) (:meth:`~.evaluate.DesignEvaluator.perf_key`): points that differ only
  in those knobs, or a sweep that adds a workload, reuse what was measured.

Each evaluation is appended to the cache as one JSON line when it finishes (never a
rewrite), so an interrupted or failed sweep keeps its work.  Then every point's
:class:`~.result.Result` is assembled, :func:`~.evaluate.judge` applies capacity, timing
and accumulator safety, and the Pareto front over (estimated latency, resource use) is
marked among the feasible points.

Resource use is the utilization of the binding resource: ``max(LUT, FF, DSP, BRAM36
fractions of the part)``.

With an accuracy evaluator (``DesignEvaluator(accuracy="digits")``, ``vtaforge dse run
--accuracy digits``) there is a third kind of evaluation: one **accuracy** measurement per
:func:`~.accuracy.accuracy_key` (the widths), in the driver, cached like the others; every
point gets its key's measurement, and the Pareto front is over (latency, resource use,
``-accuracy``) (:data:`PARETO_KEYS_ACCURACY`).
"""

from __future__ import annotations

import json
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

from .evaluate import DesignEvaluator, judge, program_family
from .performance import perf_records_of
from .resources import resource_record
from .workloads import DseWorkload
from .parallel import SerialExecutor, TaskFailure, make_executor
from .space import Point, Space

__all__ = ["PointResult", "ResultCache", "run_search", "pareto_front", "PARETO_KEYS",
           "PARETO_KEYS_ACCURACY", "CACHE_FORMAT", "SearchStats"]

#: Objectives of the Pareto front (both minimised).
PARETO_KEYS = ("latency_us", "utilization_max")
#: ... when accuracy is measured (``accuracy_neg`` = -accuracy, minimised).
PARETO_KEYS_ACCURACY = PARETO_KEYS + ("accuracy_neg",)

#: Most configs in one worker task of a program family (:func:`run_search`).
_FAMILY_TASK = 16

#: First line of a cache file.
CACHE_FORMAT = "vtaforge.dse.cache/2"

#: Failures not cached (a missing tool, a dead worker): the next run tries again.
_TRANSIENT = ("RtlBuildError", "HarnessError", "KilledWorker", "MemoryError",
              "CommClosedError", "CancelledError", "TaskFailure")


@dataclass
class PointResult:
    """A point with its evaluation and verdict: ``point`` (params, cfg or error),
    ``result`` (None for invalid points), ``verdict`` (:func:`judge` dict),
    ``cached`` (every evaluation it needed came from the cache), ``pareto``."""

    point: Point
    result: Any = None
    verdict: dict = field(default_factory=dict)
    cached: bool = False
    pareto: bool = False

    @property
    def feasible(self) -> bool:
        """The verdict says feasible (fits, timing not failed, safe, complete)."""
        return bool(self.verdict.get("feasible"))

    def objective(self, key: str) -> float | None:
        """``latency_us``, ``utilization_max``, ``accuracy`` / ``accuracy_neg`` (or another
        verdict key) of the point."""
        if key == "utilization_max":
            return (self.verdict.get("utilization") or {}).get("max")
        if key in ("accuracy", "accuracy_neg"):
            a = (getattr(self.result, "accuracy", None) or {}).get("accuracy")
            return None if a is None else (a if key == "accuracy" else -a)
        return self.verdict.get(key)


@dataclass
class SearchStats:
    """What one :func:`run_search` did: evaluations run / taken from the cache, per kind,
    wall seconds, and where they ran."""

    resource_runs: int = 0
    resource_cached: int = 0
    perf_runs: int = 0
    perf_cached: int = 0
    perf_shared: int = 0
    accuracy_runs: int = 0
    accuracy_cached: int = 0
    seconds: float = 0.0
    executor: str = "serial, in process"
    workers: int = 1


class ResultCache:
    """An append-only JSON-lines file of evaluation records.

    Line 1 is ``{"format": CACHE_FORMAT}``; every further line is one evaluation,
    ``{"kind": "res" | "perf" | "accu", "key": str, "value": record}``, appended (and flushed) when
    it finishes; a later line for the same key wins.  A missing file starts empty.  A
    truncated last line (a run killed mid-write) is ignored (``skipped`` counts it).

    Raises:
        ValueError: a file that is not such a cache (e.g. the old single-JSON format), or a
            corrupt line before the last (the message names the file and line).
    """

    def __init__(self, path: str | Path | None):
        self.path = Path(path) if path else None
        self.entries: dict[tuple[str, str], dict] = {}
        self.hits = 0
        self.misses = 0
        self.skipped = 0
        self._fh = None
        if self.path and self.path.exists():
            self._load()

    def _load(self) -> None:
        try:
            lines = self.path.read_text().splitlines()
        except UnicodeDecodeError:
            raise ValueError(f"DSE cache {str(self.path)!r} is not a text file; delete it "
                             f"to start over") from None
        if not lines:
            return
        try:
            head = json.loads(lines[0])
        except json.JSONDecodeError:
            head = None
        if not isinstance(head, dict) or head.get("format") != CACHE_FORMAT:
            old = isinstance(head, dict) and "entries" in head
            raise ValueError(f"DSE cache {str(self.path)!r} is "
                             + ("in the old single-JSON format" if old else
                                f"not a {CACHE_FORMAT} file")
                             + "; delete it to start over")
        for n, line in enumerate(lines[1:], start=2):
            if not line.strip():
                continue
            try:
                d = json.loads(line)
                self.entries[(d["kind"], d["key"])] = d["value"]
            except (json.JSONDecodeError, KeyError, TypeError) as e:
                if n == len(lines):
                    self.skipped += 1
                    continue
                raise ValueError(f"DSE cache {str(self.path)!r} is corrupt at line {n} ({e}); "
                                 f"delete it to start over") from None

    def get(self, kind: str, key: str) -> dict | None:
        """The cached record of kind ``"res"`` or ``"perf"`` under ``key`` (see
        :meth:`~.evaluate.DesignEvaluator.resource_key` / ``perf_key``), or ``None``
        (counted in ``hits`` / ``misses``)."""
        d = self.entries.get((kind, key))
        if d is None:
            self.misses += 1
            return None
        self.hits += 1
        return d

    def put(self, kind: str, key: str, value: dict) -> None:
        """Keep ``value`` and append it to the file as one line (flushed at once)."""
        self.entries[(kind, key)] = value
        if not self.path:
            return
        if self._fh is None:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            new = not self.path.exists() or self.path.stat().st_size == 0
            self._fh = open(self.path, "a", encoding="utf-8")
            if new:
                self._fh.write(json.dumps({"format": CACHE_FORMAT}) + "\n")
        self._fh.write(json.dumps({"kind": kind, "key": key, "value": value},
                                  sort_keys=True) + "\n")
        self._fh.flush()

    def close(self) -> None:
        """Close the file (appends reopen it)."""
        if self._fh is not None:
            self._fh.close()
            self._fh = None


def pareto_front(values: Sequence[Sequence[float]]) -> list[int]:
    """Indices of the non-dominated rows (every objective minimised).

    Row ``a`` dominates ``b`` when ``a <= b`` in every objective and ``a < b`` in one;
    equal rows do not dominate each other (both stay).  O(n log n + n·front) by sorting.
    """
    order = sorted(range(len(values)), key=lambda i: tuple(values[i]))
    front: list[int] = []
    for i in order:
        v = values[i]
        dominated = False
        for j in front:
            w = values[j]
            if all(a <= b for a, b in zip(w, v)) and any(a < b for a, b in zip(w, v)):
                dominated = True
                break
        if not dominated:
            front.append(i)
    return sorted(front)


def _transient(rec: Mapping) -> bool:
    errs = list(rec.get("errors") or [])
    w = rec.get("workload") or {}
    if "error" in w:
        errs.append(w["error"])
    return any(e.split(":", 1)[0].strip() in _TRANSIENT for e in errs)


def run_search(points: Space | Sequence[Point], workloads: Sequence[DseWorkload],
               evaluator: DesignEvaluator | None = None, *, cache: str | Path | None = None,
               timing: Mapping | None = None, samples: int | None = None, seed: int = 0,
               progress: bool = True, on_result: Callable[[PointResult], Any] | None = None,
               jobs: int | None = None, scheduler: str | None = None, executor: Any = None,
               stats: SearchStats | None = None, desc: str = "dse") -> list[PointResult]:
    """Evaluate points (a space's grid or sample, or an explicit list) against workloads.

    Args:
        cache: JSON-lines cache file (:class:`ResultCache`): one line appended per
            evaluation as it finishes; reruns, larger samples, extra axis values or extra
            workloads only run what is new.
        timing: timing results (see :func:`~.evaluate.judge`); applied after the cache.
        samples, seed: sample the space instead of the full grid.
        progress: show a tqdm bar of evaluations on stderr (labelled ``desc``).
        jobs, scheduler: where evaluations run (:func:`~.parallel.make_executor`): serial
            in process by default, a LocalCluster of ``jobs`` workers, or a Dask scheduler
            address.  Results do not depend on it.
        executor: an executor to use instead (not closed here).
        stats: filled with what ran (:class:`SearchStats`).

    Returns:
        One :class:`PointResult` per point, in point order, Pareto flags set.

    Raises:
        ValueError: a corrupt cache, bad ``jobs``/``scheduler``, an unreachable scheduler.
    """
    t0 = time.perf_counter()
    ev = evaluator or DesignEvaluator()
    st = stats if stats is not None else SearchStats()
    pts = points.points(samples, seed) if isinstance(points, Space) else list(points)
    store = ResultCache(cache)
    ex = executor or make_executor(jobs, scheduler)
    st.executor, st.workers = getattr(ex, "description", "custom"), getattr(ex, "workers", 1)
    sw = _Sweep(ev, st, store, ex)
    try:
        valid = [p for p in pts if p.cfg is not None]
        sw.run_resources(valid, progress, desc)
        # performance jobs need the resources first (only fitting points run)
        sw.run_perf(valid, workloads)
        sw.run_accuracy(valid)
    finally:
        if sw.bar is not None:
            sw.bar.close()
        store.close()
        if executor is None:
            ex.close()
    out: list[PointResult] = []
    for p in pts:
        pr = sw.point_result(p, workloads, timing)
        out.append(pr)
        if on_result:
            on_result(pr)
    mark_pareto(out)
    st.seconds = time.perf_counter() - t0
    return out


@dataclass
class _Sweep:
    """The evaluations of one :func:`run_search`, stage by stage: what each stage read
    from the cache or ran (``res``, ``perf``, ``accu``: key -> record), each point's keys
    (``rkey``, ``pkeys``, ``akey``, by ``id(point)``), the keys run in this sweep
    (``fresh``) and the progress bar (None without progress)."""

    ev: DesignEvaluator
    st: SearchStats
    store: ResultCache
    ex: Any
    bar: Any = None
    fresh: set = field(default_factory=set)
    res: dict = field(default_factory=dict)
    rkey: dict = field(default_factory=dict)
    perf: dict = field(default_factory=dict)
    pkeys: dict = field(default_factory=dict)
    accu: dict = field(default_factory=dict)
    akey: dict = field(default_factory=dict)

    def run_resources(self, valid: list[Point], progress: bool, desc: str) -> None:
        """One resource evaluation per distinct :meth:`~.evaluate.DesignEvaluator.resource_key`
        not in the cache: in the driver for a cheap (analytic) evaluator, else on the
        executor.  ``progress``: open the tqdm bar (labelled ``desc``) the stages update."""
        ev, st = self.ev, self.st
        todo: dict[str, Any] = {}
        for p in valid:
            k = self.rkey[id(p)] = ev.resource_key(p.cfg)
            if k in self.res or k in todo:
                continue
            rec = self.store.get("res", k)
            if rec is not None:
                self.res[k] = rec
                st.resource_cached += 1
            else:
                todo[k] = p.cfg
        res_ex = SerialExecutor() if getattr(ev.res_eval, "cheap", False) else self.ex
        if progress:
            from tqdm import tqdm

            self.bar = tqdm(total=len(todo) if res_ex is self.ex else 0, desc=desc,
                            unit="eval", leave=False, file=sys.stderr)
        keys = list(todo)
        for i, rec in res_ex.map_unordered(resource_record,
                                           [(ev.res_eval, todo[k]) for k in keys]):
            if isinstance(rec, TaskFailure):
                rec = {"resources": None, "notes": [], "errors": [rec.message]}
            self.res[keys[i]] = rec
            self.fresh.add(("res", keys[i]))
            st.resource_runs += 1
            if not _transient(rec):
                self.store.put("res", keys[i], rec)
            if self.bar is not None and res_ex is self.ex:
                self.bar.update(1)

    def run_perf(self, valid: list[Point], workloads: Sequence[DseWorkload]) -> None:
        """One performance evaluation per distinct
        :meth:`~.evaluate.DesignEvaluator.perf_key` of the points whose resources want one,
        not in the cache, in the tasks of :meth:`_perf_tasks`; a task lost with several
        configs is retried config by config."""
        ptodo: dict[str, tuple] = {}
        for p in valid:
            if not self.ev.wants_perf(self.res[self.rkey[id(p)]]):
                continue
            pk = self.pkeys[id(p)] = {wl.name: self.ev.perf_key(p.cfg, wl) for wl in workloads}
            for wl in workloads:
                k = pk[wl.name]
                if k in self.perf or k in ptodo:
                    self.st.perf_shared += 1
                    continue
                rec = self.store.get("perf", k)
                if rec is not None:
                    self.perf[k] = rec
                    self.st.perf_cached += 1
                else:
                    ptodo[k] = (p.cfg, wl)
        if self.bar is not None:
            self.bar.total = (self.bar.total or 0) + len(ptodo)
            self.bar.refresh()
        tasks = self._perf_tasks(ptodo)

        def args(t: list[list[str]]):
            return (self.ev.perf_eval, [(ptodo[g[0]][0], [ptodo[k][1] for k in g]) for g in t])

        retry: list[list[str]] = []
        for ti, trecs in self.ex.map_unordered(perf_records_of, [args(t) for t in tasks]):
            if isinstance(trecs, TaskFailure) and len(tasks[ti]) > 1:
                retry += tasks[ti]      # a lost worker must not fail the family's other configs
                continue
            for gi, g in enumerate(tasks[ti]):
                self._store_perf(ptodo, g, trecs if isinstance(trecs, TaskFailure) else trecs[gi])
        for ti, trecs in self.ex.map_unordered(perf_records_of, [args([g]) for g in retry]):
            self._store_perf(ptodo, retry[ti],
                             trecs if isinstance(trecs, TaskFailure) else trecs[0])

    def _perf_tasks(self, ptodo: dict[str, tuple]) -> list[list[list[str]]]:
        """The worker tasks of the missing performance keys ``ptodo`` (key -> (cfg,
        workload)): each task a list of groups, a group the keys of one config.

        One group per config (its missing workloads): 10x fewer Dask tasks than one per
        (config, workload), each record still cached on its own.  On workers, one task per
        program family (configs that differ only in buffer sizes, whose programs are often
        the same: a worker's program memo shares them), at most ``_FAMILY_TASK`` configs
        each, longest first."""
        groups: dict[int, list[str]] = {}
        for k in ptodo:
            groups.setdefault(id(ptodo[k][0]), []).append(k)
        glist = list(groups.values())
        if getattr(self.ex, "workers", 1) <= 1:
            return [[g] for g in glist]
        fams: dict[str, list[list[str]]] = {}
        for g in glist:
            fams.setdefault(program_family(ptodo[g[0]][0]), []).append(g)
        tasks = [f[i:i + _FAMILY_TASK] for f in fams.values()
                 for i in range(0, len(f), _FAMILY_TASK)]
        tasks.sort(key=lambda t: -sum(len(g) for g in t))
        return tasks

    def _store_perf(self, ptodo: dict[str, tuple], g: list[str], recs) -> None:
        """Record the performance records ``recs`` of group ``g`` (a :class:`TaskFailure`:
        an error record per key), caching the ones that are not transient."""
        if isinstance(recs, TaskFailure):
            cfg = ptodo[g[0]][0]
            recs = [{"source": self.ev.perf_eval.name, "workload": {"error": recs.message},
                     "notes": [], "by": f"0x{cfg.fingerprint:08x}"} for _ in g]
        for k, rec in zip(g, recs):
            self.perf[k] = rec
            self.fresh.add(("perf", k))
            self.st.perf_runs += 1
            if not _transient(rec):
                self.store.put("perf", k, rec)
            if self.bar is not None:
                self.bar.update(1)

    def run_accuracy(self, valid: list[Point]) -> None:
        """With an accuracy evaluator: one fsim measurement per width key
        (:meth:`~.evaluate.DesignEvaluator.accuracy_key`) not in the cache, in the driver."""
        if self.ev.accuracy_eval is None:
            return
        for p in valid:
            k = self.akey[id(p)] = self.ev.accuracy_key(p.cfg)
            if k in self.accu:
                continue
            rec = self.store.get("accu", k)
            if rec is not None:
                self.accu[k] = rec
                self.st.accuracy_cached += 1
                continue
            self.accu[k] = rec = self.ev.accuracy_eval.measure(p.cfg)
            self.fresh.add(("accu", k))
            self.st.accuracy_runs += 1
            if "error" not in rec:
                self.store.put("accu", k, rec)

    def point_result(self, p: Point, workloads: Sequence[DseWorkload],
                     timing: Mapping | None) -> PointResult:
        """The :class:`PointResult` of ``p`` from the stages' records (an invalid config:
        infeasible, with the reason), judged with ``timing``."""
        pr = PointResult(p)
        if p.cfg is None:
            pr.verdict = {"feasible": False, "reasons": [f"invalid config: {p.error}"]}
            return pr
        rk = self.rkey[id(p)]
        pk = self.pkeys.get(id(p), {})
        r = self.ev.assemble(p.cfg, self.res[rk], {n: self.perf[k] for n, k in pk.items()},
                             workloads)
        used = [("res", rk)] + [("perf", k) for k in pk.values()]
        if id(p) in self.akey:
            r.accuracy = dict(self.accu[self.akey[id(p)]])
            used.append(("accu", self.akey[id(p)]))
        pr.cached = not any(u in self.fresh for u in used)
        pr.result = r
        pr.verdict = judge(r, float(p.cfg.CLOCK_MHZ), self.ev.capacity, timing,
                           p.cfg.bitstream_name)
        return pr


def mark_pareto(results: Sequence[PointResult]) -> list[int]:
    """Set ``pareto`` on the feasible results not dominated in :data:`PARETO_KEYS`
    (:data:`PARETO_KEYS_ACCURACY` when any point has a measured accuracy); returns their
    indices."""
    keys = PARETO_KEYS_ACCURACY if any(r.objective("accuracy") is not None
                                       for r in results) else PARETO_KEYS
    idx = [i for i, r in enumerate(results)
           if r.feasible and all(r.objective(k) is not None for k in keys)]
    vals = [[results[i].objective(k) for k in keys] for i in idx]
    front = [idx[j] for j in pareto_front(vals)]
    for i, r in enumerate(results):
        r.pareto = i in set(front)
    return front
