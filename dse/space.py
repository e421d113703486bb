"""Design spaces: named axes over :class:`~vtaforge.hw.config.VTAConfig` fields.

A :class:`Space` is a base config plus ordered axes ``name -> candidate values``.  An axis
name is a ``VTAConfig`` field (``LOG_BATCH``, ``LOG_BLOCK_IN``, ``LOG_INP_BUFF_SIZE``,
``LOG_BUS_WIDTH``, ``DSP_PACKING``, ``CLOCK_MHZ`` ...) or ``LOG_BLOCK``, which sets
``LOG_BLOCK_IN`` and ``LOG_BLOCK_OUT`` together (upstream's key).

Points come from the full grid (:meth:`Space.grid`, the Cartesian product in axis order)
or from seeded random sampling without replacement (:meth:`Space.sample`).  A combination
that ``VTAConfig`` rejects is not dropped: it becomes a :class:`Point` with ``cfg = None``
and ``error`` set to the :class:`ConfigError` message, so a report can say why it was
skipped.

JSON form (``Space.from_json`` / ``vtaforge dse run --space FILE.json``)::

    {"base": "pynq",                       # preset name, or an upstream-style config dict
     "overrides": {"CLOCK_MHZ": 100},      # optional: applied to the base first
     "axes": {"LOG_BLOCK": [3, 4, 5], "LOG_BATCH": [0, 1]}}
"""

from __future__ import annotations

import dataclasses
import itertools
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterator, Mapping, Sequence

import numpy as np

from ..hw.config import ConfigError, VTAConfig, load_config

__all__ = ["Space", "Point", "SpaceError", "default_space", "AXIS_ALIASES"]

#: Axis names that expand to several VTAConfig fields.
AXIS_ALIASES: dict[str, tuple[str, ...]] = {"LOG_BLOCK": ("LOG_BLOCK_IN", "LOG_BLOCK_OUT")}

_FIELDS = {f.name for f in dataclasses.fields(VTAConfig)}


class SpaceError(ValueError):
    """A malformed space (unknown axis, empty axis, bad JSON); the message names the cause."""


@dataclass(frozen=True)
class Point:
    """One point of a space: ``params`` (axis name -> value, in axis order), the validated
    ``cfg`` or ``None`` with ``error`` (the ConfigError message) when the combination is
    invalid."""

    params: dict
    cfg: VTAConfig | None
    error: str | None = None

    @property
    def valid(self) -> bool:
        return self.cfg is not None

    def label(self) -> str:
        """Short ``name=value`` list of the axis values."""
        return " ".join(f"{k}={v}" for k, v in self.params.items())


@dataclass
class Space:
    """A base config and named axes.

    Args:
        base: the config every point starts from.
        axes: ``name -> sequence of values``; names are VTAConfig fields or ``LOG_BLOCK``.

    Raises:
        SpaceError: unknown axis name, empty or duplicate-valued axis.
    """

    base: VTAConfig
    axes: dict[str, list] = field(default_factory=dict)

    def __post_init__(self) -> None:
        axes = {}
        for name, vals in dict(self.axes).items():
            if name not in _FIELDS and name not in AXIS_ALIASES:
                raise SpaceError(f"unknown axis {name!r}; allowed: VTAConfig fields "
                                 f"({', '.join(sorted(_FIELDS - {'TARGET', 'HW_VER'}))}) or "
                                 f"LOG_BLOCK")
            if isinstance(vals, (str, bytes)) or not isinstance(vals, Sequence):
                raise SpaceError(f"axis {name!r} must be a list of values, got {vals!r}")
            vals = list(vals)
            if not vals:
                raise SpaceError(f"axis {name!r} has no values")
            if len({json.dumps(v) for v in vals}) != len(vals):
                raise SpaceError(f"axis {name!r} repeats a value: {vals!r}")
            axes[name] = vals
        for a, fields_ in AXIS_ALIASES.items():
            if a in axes and any(f in axes for f in fields_):
                raise SpaceError(f"axis {a!r} and {'/'.join(f for f in fields_ if f in axes)} "
                                 f"both set the same field")
        self.axes = axes

    # ------------------------------------------------------------------ size / points
    @property
    def size(self) -> int:
        """Number of grid points (valid or not)."""
        n = 1
        for v in self.axes.values():
            n *= len(v)
        return n

    def make_point(self, params: Mapping[str, Any]) -> Point:
        """Apply ``params`` to the base config; an invalid combination gives a Point with
        ``cfg=None`` and the ConfigError message (never raises ConfigError)."""
        changes: dict[str, Any] = {}
        for k, v in params.items():
            for f in AXIS_ALIASES.get(k, (k,)):
                changes[f] = v
        try:
            cfg = self.base.replace(**changes)
        except ConfigError as e:
            return Point(dict(params), None, str(e))
        except TypeError as e:  # e.g. a JSON value of the wrong kind
            return Point(dict(params), None, f"invalid value: {e}")
        return Point(dict(params), cfg)

    def _params(self, index: int) -> dict:
        names = list(self.axes)
        out = {}
        for name in reversed(names):
            vals = self.axes[name]
            index, r = divmod(index, len(vals))
            out[name] = vals[r]
        return {n: out[n] for n in names}

    def grid(self) -> Iterator[Point]:
        """Every combination, in axis order (the last axis varies fastest)."""
        names = list(self.axes)
        for combo in itertools.product(*(self.axes[n] for n in names)):
            yield self.make_point(dict(zip(names, combo)))

    def sample(self, n: int, seed: int = 0) -> list[Point]:
        """``min(n, size)`` distinct grid points drawn uniformly without replacement with
        ``numpy.random.default_rng(seed)``, in ascending grid order (reproducible).

        Raises:
            SpaceError: ``n < 1``.
        """
        if not isinstance(n, int) or n < 1:
            raise SpaceError(f"sample count must be a positive integer, got {n!r}")
        if n >= self.size:
            return list(self.grid())
        rng = np.random.default_rng(seed)
        idx = sorted(int(i) for i in rng.choice(self.size, size=n, replace=False))
        return [self.make_point(self._params(i)) for i in idx]

    def points(self, samples: int | None = None, seed: int = 0) -> list[Point]:
        """The grid (``samples`` None) or a seeded sample of it."""
        return list(self.grid()) if samples is None else self.sample(samples, seed)

    # ------------------------------------------------------------------ JSON
    def to_dict(self) -> dict:
        return {"base": self.base.to_dict(), "axes": {k: list(v) for k, v in self.axes.items()}}

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> "Space":
        """Build from the JSON form in the module docstring.

        Raises:
            SpaceError: missing/unknown keys, bad axes; ConfigError: invalid base config.
        """
        if not isinstance(d, Mapping):
            raise SpaceError(f"a space must be a JSON object, got {type(d).__name__}")
        unknown = sorted(set(d) - {"base", "overrides", "axes"})
        if unknown:
            raise SpaceError(f"unknown space key {unknown[0]!r}; allowed: base, overrides, axes")
        if "axes" not in d or not isinstance(d["axes"], Mapping):
            raise SpaceError("a space needs \"axes\": an object of axis name -> list of values")
        base = d.get("base", "pynq")
        cfg = VTAConfig.from_dict(base) if isinstance(base, Mapping) else load_config(str(base))
        ov = d.get("overrides") or {}
        if not isinstance(ov, Mapping):
            raise SpaceError("\"overrides\" must be an object of config field -> value")
        if ov:
            cfg = cfg.replace(**dict(ov))
        return cls(cfg, dict(d["axes"]))

    @classmethod
    def from_json(cls, path: str | Path) -> "Space":
        """Load a space file.

        Raises:
            SpaceError: unreadable file, invalid JSON or content (the message names the file).
        """
        p = Path(path)
        try:
            d = json.loads(p.read_text())
        except OSError as e:
            raise SpaceError(f"cannot read space file {str(p)!r}: {e.strerror or e}") from None
        except json.JSONDecodeError as e:
            raise SpaceError(f"space file {str(p)!r} is not valid JSON: {e.msg} "
                             f"(line {e.lineno})") from None
        try:
            return cls.from_dict(d)
        except (SpaceError, ConfigError) as e:
            raise SpaceError(f"{p}: {e}") from None


def default_space(base: str | VTAConfig = "pynq") -> Space:
    """The default space around ``base`` (default the pynq preset): GEMM shape, buffer
    sizes, bus width and DSP packing.  2·3·3·3·3·2·2 = 648 grid points; use sampling."""
    return Space(load_config(base), {
        "LOG_BATCH": [0, 1],
        "LOG_BLOCK": [3, 4, 5],
        "LOG_INP_BUFF_SIZE": [14, 15, 16],
        "LOG_WGT_BUFF_SIZE": [17, 18, 19],
        "LOG_ACC_BUFF_SIZE": [16, 17, 18],
        "LOG_BUS_WIDTH": [6, 7],
        "DSP_PACKING": [1, 2],
    })
