"""The DSE's result record and error: one :class:`Result` per (config, evaluator), and
:class:`DSEError` for bad input (one line, no traceback)."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Mapping

from ..hw.config import VTAConfig


__all__ = ['DSEError', 'Result']


class DSEError(ValueError):
    """Bad DSE input (workload spec, part, timing file, option); one line naming the cause."""


# =============================================================================== result
@dataclass
class Result:
    """What evaluating one config gives (JSON-serialisable through :meth:`to_dict`).

    - ``resources``: ``{"lut", "ff", "dsp", "bram36", "source", "breakdown"}`` or None.
    - ``workloads``: name -> ``{"cycles", "cycles_lower", "cycles_upper",
      "cycles_measured" (rtl only), "macs", "gemm_uops", "alu_uops", "insns", "launches",
      "dram_read_bytes", "dram_write_bytes", "cpu_compute_ops"}``, or ``{"error": msg}``.
    - ``acc``: accumulator-safety verdict (:class:`AccSafety`), or None.
    - ``notes``: strings explaining fallbacks; ``errors``: evaluation failures.
    - ``accuracy``: the accuracy measurement of the point's widths
      (:meth:`~.accuracy.AccuracyEvaluator.measure`), or None when not asked for.
    """

    fingerprint: str
    config: dict
    resources: dict | None = None
    workloads: dict = field(default_factory=dict)
    acc: dict | None = None
    performance_source: str | None = None
    notes: list = field(default_factory=list)
    errors: list = field(default_factory=list)
    accuracy: dict | None = None

    def to_dict(self) -> dict:
        """JSON-ready dict of every field (the cache and report form)."""
        return asdict(self)

    @classmethod
    def from_dict(cls, d: Mapping) -> "Result":
        """Inverse of :meth:`to_dict` (unknown keys ignored, missing ones defaulted)."""
        return cls(**{k: d[k] for k in ("fingerprint", "config", "resources", "workloads",
                                        "acc", "performance_source", "notes", "errors",
                                        "accuracy")
                      if k in d})


def _fp(cfg: VTAConfig) -> str:
    return f"0x{cfg.fingerprint:08x}"
