"""Run a space against workloads: evaluation with a result cache, verdicts, Pareto front.

:func:`run_search` evaluates every point (a tqdm progress bar on stderr), caches each
:class:`~.evaluate.Result` in a JSON file keyed by ``"<config fingerprint>:<evaluator
key>"`` (so a rerun, a larger sample or an extra axis value only evaluates new points),
applies :func:`~.evaluate.judge` (capacity, timing, accumulator safety) and marks the
Pareto front over (estimated latency, resource use) among the feasible points.

Resource use is the utilization of the binding resource: ``max(LUT, FF, DSP, BRAM36
fractions of the part)``.
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

from .evaluate import DesignEvaluator, DseWorkload, Result, judge
from .space import Point, Space

__all__ = ["PointResult", "ResultCache", "run_search", "pareto_front", "PARETO_KEYS"]

#: Objectives of the Pareto front (both minimised).
PARETO_KEYS = ("latency_us", "utilization_max")


@dataclass
class PointResult:
    """A point with its evaluation and verdict: ``point`` (params, cfg or error),
    ``result`` (None for invalid points), ``verdict`` (:func:`judge` dict),
    ``cached`` (taken from the cache), ``pareto``."""

    point: Point
    result: Result | None = None
    verdict: dict = field(default_factory=dict)
    cached: bool = False
    pareto: bool = False

    @property
    def feasible(self) -> bool:
        return bool(self.verdict.get("feasible"))

    def objective(self, key: str) -> float | None:
        if key == "utilization_max":
            return (self.verdict.get("utilization") or {}).get("max")
        return self.verdict.get(key)


class ResultCache:
    """A JSON file of evaluation results: ``{"version": 1, "entries": {key: Result dict}}``.

    A missing file starts empty; a corrupt one is an error (not silently discarded).

    Raises:
        OSError/ValueError on an unreadable or corrupt cache file (message names it).
    """

    def __init__(self, path: str | Path | None):
        self.path = Path(path) if path else None
        self.entries: dict[str, dict] = {}
        self.hits = 0
        self.misses = 0
        if self.path and self.path.exists():
            try:
                d = json.loads(self.path.read_text())
                self.entries = dict(d["entries"])
            except (json.JSONDecodeError, KeyError, TypeError) as e:
                raise ValueError(f"DSE cache {str(self.path)!r} is corrupt ({e}); delete it "
                                 f"to start over") from None

    def get(self, key: str) -> Result | None:
        """The cached :class:`Result` for ``key`` (a design/workload/model key), or ``None``
        (counted in ``hits`` / ``misses``)."""
        d = self.entries.get(key)
        if d is None:
            self.misses += 1
            return None
        self.hits += 1
        return Result.from_dict(d)

    def put(self, key: str, r: Result) -> None:
        """Store ``r`` under ``key`` in memory; :meth:`save` writes the file."""
        self.entries[key] = r.to_dict()

    def save(self) -> None:
        """Write atomically (temporary file + rename)."""
        if not self.path:
            return
        self.path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.path.with_suffix(self.path.suffix + ".tmp")
        tmp.write_text(json.dumps({"version": 1, "entries": self.entries}, sort_keys=True))
        os.replace(tmp, self.path)


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


def run_search(points: Space | Sequence[Point], workloads: Sequence[DseWorkload],
               evaluator: DesignEvaluator | None = None, *, cache: str | Path | None = None,
               timing: Mapping | None = None, samples: int | None = None, seed: int = 0,
               progress: bool = True, on_result: Callable[[PointResult], Any] | None = None,
               save_interval_s: float = 30.0) -> list[PointResult]:
    """Evaluate points (a space's grid or sample, or an explicit list) against workloads.

    Args:
        cache: JSON cache file, written atomically at most every ``save_interval_s`` seconds
            while new results come in, and at the end, also when the run is interrupted or
            fails (``finally``), so an interrupted run keeps its work; a crash mid-write
            leaves the previous file (temporary file + rename).  It was rewritten after
            every point: 9x slower resource-only sweeps.
        timing: timing results (see :func:`~.evaluate.judge`).
        samples, seed: sample the space instead of the full grid.
        progress: show a tqdm bar on stderr.

    Returns:
        One :class:`PointResult` per point, in point order, Pareto flags set.
    """
    ev = evaluator or DesignEvaluator()
    pts = points.points(samples, seed) if isinstance(points, Space) else list(points)
    key = ev.key(workloads)
    store = ResultCache(cache)
    out: list[PointResult] = []
    dirty = False
    last_save = time.monotonic()
    bar = None
    if progress:
        from tqdm import tqdm

        bar = tqdm(total=len(pts), desc="dse", unit="pt", leave=False)
    try:
        for p in pts:
            pr = PointResult(p)
            if p.cfg is not None:
                k = f"{p.cfg.fingerprint:08x}:{key}"
                r = store.get(k)
                if r is None:
                    r = ev.evaluate(p.cfg, workloads)
                    store.put(k, r)
                    dirty = True
                    if time.monotonic() - last_save >= save_interval_s:
                        store.save()
                        dirty, last_save = False, time.monotonic()
                else:
                    pr.cached = True
                    if hasattr(ev, "remember"):
                        ev.remember(p.cfg, r)
                pr.result = r
                pr.verdict = judge(r, float(p.cfg.CLOCK_MHZ), ev.capacity, timing,
                                   p.cfg.bitstream_name)
            else:
                pr.verdict = {"feasible": False, "reasons": [f"invalid config: {p.error}"]}
            out.append(pr)
            if on_result:
                on_result(pr)
            if bar is not None:
                bar.update(1)
    finally:
        if bar is not None:
            bar.close()
        if dirty:
            store.save()
    mark_pareto(out)
    return out


def mark_pareto(results: Sequence[PointResult]) -> list[int]:
    """Set ``pareto`` on the feasible results not dominated in :data:`PARETO_KEYS`;
    returns their indices."""
    idx = [i for i, r in enumerate(results)
           if r.feasible and all(r.objective(k) is not None for k in PARETO_KEYS)]
    vals = [[results[i].objective(k) for k in PARETO_KEYS] for i in idx]
    front = [idx[j] for j in pareto_front(vals)]
    for i, r in enumerate(results):
        r.pareto = i in set(front)
    return front
