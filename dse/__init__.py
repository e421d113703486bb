"""vtaforge.dse: design-space exploration of VTA configurations (docs/dse.md).

- :mod:`.space`: :class:`Space` (named axes over VTAConfig fields; grid and seeded
  sampling; invalid points recorded with their reason), :func:`default_space`.
- :mod:`.evaluate`: evaluators with ``evaluate(cfg, workloads) -> Result`` — the analytic
  resource model (:class:`AnalyticResources`), Yosys (:class:`YosysResources`), fsim plus
  the cycle model (:class:`ModelPerformance`, :class:`CycleModel`), Verilator
  (:class:`RtlPerformance`), accumulator safety (:class:`AccSafety`, BR-29), combined in
  :class:`DesignEvaluator`; :func:`judge` applies capacity and timing (BR-31).
- :mod:`.search`: :func:`run_search` (resource and performance evaluations, append-only
  JSON-lines cache, Pareto front).
- :mod:`.parallel`: where evaluations run (serial, a Dask LocalCluster, a scheduler).
- :mod:`.promote`: ``--verify``: the Pareto front and the points within the model's band
  re-evaluated on Verilator / Yosys, rungs that did not run labelled.
- :mod:`.report`: :func:`build_report`, :func:`format_table`, :func:`load_report`.
- :mod:`.plot`: the Pareto / model-vs-RTL PNG (matplotlib, lazily).
- :mod:`.calibrate`: recorded (config, program, RTL cycles) pairs; fitting the cycle model.
- :mod:`.accuracy`: top-1 accuracy on a labelled set per width (:class:`AccuracyEvaluator`,
  ``--accuracy digits``), an objective next to latency and resources.
"""

from .evaluate import DesignEvaluator, judge
from .performance import AccSafety, CycleModel, ModelPerformance, RtlPerformance
from .resources import AnalyticResources, YosysResources, bram36_for_memory, memory_map
from .result import DSEError, Result
from .workloads import DseWorkload, parse_workloads
from .report import build_report, format_table, load_report, write_report
from .search import PointResult, ResultCache, SearchStats, mark_pareto, pareto_front, run_search
from .space import Point, Space, SpaceError, default_space, with_width_axis
from .accuracy import AccuracyEvaluator, accuracy_key

__all__ = [
    "Space", "Point", "SpaceError", "default_space", "with_width_axis",
    "AccuracyEvaluator", "accuracy_key",
    "DseWorkload", "parse_workloads", "Result", "DSEError", "CycleModel", "bram36_for_memory",
    "memory_map", "AnalyticResources", "YosysResources", "ModelPerformance", "RtlPerformance",
    "AccSafety", "DesignEvaluator", "judge",
    "run_search", "PointResult", "ResultCache", "SearchStats", "pareto_front", "mark_pareto",
    "build_report", "format_table", "load_report", "write_report",
]
