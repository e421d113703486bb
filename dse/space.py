"""Design spaces: named axes over :class:`~vtaforge.hw.config.VTAConfig` fields.

A :class:`Space` is a base config plus ordered axes ``name -> candidate values``.  An axis
name is a ``VTAConfig`` field (``LOG_BATCH``, ``LOG_BLOCK_IN``, ``LOG_INP_BUFF_SIZE``,
``LOG_BUS_WIDTH``, ``DSP_PACKING``, ``CLOCK_MHZ`` ...), ``LOG_BLOCK``, which sets
``LOG_BLOCK_IN`` and ``LOG_BLOCK_OUT`` together (upstream's key), ``LOG_WIDTH``, which sets
``LOG_INP_WIDTH`` and ``LOG_WGT_WIDTH`` together (3: int8, 4: int16; a two-element list
``[inp, wgt]`` sets them apart, ``[3, 2]``: int8 activations, int4 weights, ``[2, 3]``:
int4 activations, int8 weights, ``[2, 2]``: int4 both; ``vtaforge dse run --widths
8,16,w4,a4,a4w4``), or a depth axis
``LOG_UOP_DEPTH`` / ``LOG_INP_DEPTH`` / ``LOG_WGT_DEPTH`` / ``LOG_ACC_DEPTH`` (log2
scratchpad entries; sets the matching ``LOG_*_BUFF_SIZE`` from the point's element size).
The ISA's index fields are sized by depths, not bytes, so depth axes keep a space inside
the 128-bit instruction budget whatever the GEMM shape.

Points come from the full grid (:meth:`Space.grid`, the Cartesian product in axis order)
or from seeded random sampling without replacement (:meth:`Space.sample`).  A combination
that ``VTAConfig`` rejects is not dropped from the grid: it becomes a :class:`Point` with
``cfg = None`` and ``error`` set to the :class:`ConfigError` message, so a report can say
why it was skipped.  Sampling draws from the valid points only.

:func:`board_space` (``vtaforge dse run --board``) is the space for one board of
``hw/parts.py``'s :data:`~vtaforge.hw.parts.BOARDS`: its part, its memory port's width as the
bus, its nearest reachable PL clock, and GEMM-shape and depth axes trimmed to the ISA field
budget (every point valid).

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

from ..hw.config import ConfigError, VTAConfig, depthwise_possible, load_config

__all__ = ["Space", "Point", "SpaceError", "default_space", "board_space", "board_setup",
           "AXIS_ALIASES", "DEPTH_AXES", "valid_fraction", "with_width_axis",
           "DEPTHWISE_AXIS", "with_depthwise_axis"]

#: Axis names that expand to several VTAConfig fields.
AXIS_ALIASES: dict[str, tuple[str, ...]] = {"LOG_BLOCK": ("LOG_BLOCK_IN", "LOG_BLOCK_OUT"),
                                            "LOG_WIDTH": ("LOG_INP_WIDTH", "LOG_WGT_WIDTH")}

#: Depth axes (log2 entries) -> the buffer-size field they set (log2 bytes).
DEPTH_AXES: dict[str, str] = {"LOG_UOP_DEPTH": "LOG_UOP_BUFF_SIZE",
                              "LOG_INP_DEPTH": "LOG_INP_BUFF_SIZE",
                              "LOG_WGT_DEPTH": "LOG_WGT_BUFF_SIZE",
                              "LOG_ACC_DEPTH": "LOG_ACC_BUFF_SIZE"}


def _log_elem_bytes(f: Mapping[str, Any], axis: str) -> int:
    """log2 bytes of one element of the depth axis' memory for the field values ``f``
    (VTAConfig.elem_bits in log form: UOP 32 bits; INP BATCH·BLOCK_IN·INP_WIDTH; WGT
    BLOCK_OUT·BLOCK_IN·WGT_WIDTH; ACC BATCH·BLOCK_OUT·ACC_WIDTH)."""
    if axis == "LOG_UOP_DEPTH":
        return 2
    if axis == "LOG_INP_DEPTH":
        return f["LOG_BATCH"] + f["LOG_BLOCK_IN"] + f["LOG_INP_WIDTH"] - 3
    if axis == "LOG_WGT_DEPTH":
        return f["LOG_BLOCK_OUT"] + f["LOG_BLOCK_IN"] + f["LOG_WGT_WIDTH"] - 3
    return f["LOG_BATCH"] + f["LOG_BLOCK_OUT"] + f["LOG_ACC_WIDTH"] - 3

_FIELDS = {f.name for f in dataclasses.fields(VTAConfig)}

#: The ``DEPTHWISE_TAPS`` axis of :func:`with_depthwise_axis`: off, and 3 taps (a row of a
#: 3x3 kernel per depthwise GEMM micro-op; docs/isa.md "Depthwise GEMM").
DEPTHWISE_AXIS = [0, 3]


def _depthwise_skipped(f: Mapping[str, Any]) -> bool:
    """Whether the field values ``f`` (after a point's changes) set ``DEPTHWISE_TAPS`` on a
    core that cannot have it: ``BLOCK_IN != BLOCK_OUT`` or operands not int8."""
    return bool(f.get("DEPTHWISE_TAPS")) and not depthwise_possible(f)


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

    A ``DEPTHWISE_TAPS`` axis applies its non-zero values only to the combinations of the
    other axes where the option exists (``BLOCK_IN == BLOCK_OUT``, int8 operands): the
    others are skipped (not in the grid, its size or the sample; they would only be
    refused configs), so a space with the axis holds each non-square point once, without
    the option.

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
            if name not in _FIELDS and name not in AXIS_ALIASES and name not in DEPTH_AXES:
                raise SpaceError(f"unknown axis {name!r}; allowed: VTAConfig fields "
                                 f"({', '.join(sorted(_FIELDS - {'TARGET', 'HW_VER'}))}), "
                                 f"LOG_BLOCK, LOG_WIDTH or {', '.join(DEPTH_AXES)}")
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
        for a, f in DEPTH_AXES.items():
            if a in axes and f in axes:
                raise SpaceError(f"axis {a!r} and {f} both set the same field")
        self.axes = axes
        self._valid_idx: list[int] | None = None
        self._combos: list[dict] | None = None

    def _changes(self, params: Mapping[str, Any]) -> dict:
        """The VTAConfig field changes of ``params`` other than depth axes."""
        changes: dict[str, Any] = {}
        for k, v in params.items():
            if k in DEPTH_AXES:
                continue
            if k == "LOG_WIDTH" and isinstance(v, (list, tuple)) and len(v) == 2:
                changes["LOG_INP_WIDTH"], changes["LOG_WGT_WIDTH"] = v    # [inp, wgt]
                continue
            for f in AXIS_ALIASES.get(k, (k,)):
                changes[f] = v
        return changes

    def _skipped(self, params: Mapping[str, Any]) -> bool:
        """A combination the ``DEPTHWISE_TAPS`` axis skips (:class:`Space`)."""
        if "DEPTHWISE_TAPS" not in params:
            return False
        return _depthwise_skipped({**dataclasses.asdict(self.base), **self._changes(params)})

    def _combinations(self) -> list[dict] | None:
        """With a ``DEPTHWISE_TAPS`` axis, the combinations not skipped (grid order; built
        once); else None (the grid is the whole product)."""
        if "DEPTHWISE_TAPS" not in self.axes:
            return None
        if self._combos is None:
            names = list(self.axes)
            self._combos = [p for p in (dict(zip(names, c)) for c in itertools.product(
                *(self.axes[n] for n in names))) if not self._skipped(p)]
        return self._combos

    # ------------------------------------------------------------------ size / points
    @property
    def size(self) -> int:
        """Number of grid points (valid or not; skipped combinations not counted)."""
        combos = self._combinations()
        if combos is not None:
            return len(combos)
        n = 1
        for v in self.axes.values():
            n *= len(v)
        return n

    def make_point(self, params: Mapping[str, Any]) -> Point:
        """Apply ``params`` to the base config; an invalid combination gives a Point with
        ``cfg=None`` and the ConfigError message (never raises ConfigError)."""
        changes = self._changes(params)
        try:
            depth = {k: v for k, v in params.items() if k in DEPTH_AXES}
            if depth:
                f = {**dataclasses.asdict(self.base), **changes}
                for k, v in depth.items():
                    if isinstance(v, bool) or not isinstance(v, int):
                        raise TypeError(f"{k} = {v!r} must be an integer (log2 entries)")
                    changes[DEPTH_AXES[k]] = v + _log_elem_bytes(f, k)
            cfg = self.base.replace(**changes)
        except ConfigError as e:
            return Point(dict(params), None, str(e))
        except TypeError as e:  # e.g. a JSON value of the wrong kind
            return Point(dict(params), None, f"invalid value: {e}")
        return Point(dict(params), cfg)

    def _params(self, index: int) -> dict:
        combos = self._combinations()
        if combos is not None:
            return dict(combos[index])
        names = list(self.axes)
        out = {}
        for name in reversed(names):
            vals = self.axes[name]
            index, r = divmod(index, len(vals))
            out[name] = vals[r]
        return {n: out[n] for n in names}

    def grid(self) -> Iterator[Point]:
        """Every combination, in axis order (the last axis varies fastest); with a
        ``DEPTHWISE_TAPS`` axis, not those it skips."""
        combos = self._combinations()
        if combos is not None:
            for p in combos:
                yield self.make_point(p)
            return
        names = list(self.axes)
        for combo in itertools.product(*(self.axes[n] for n in names)):
            yield self.make_point(dict(zip(names, combo)))

    def valid_indices(self) -> list[int]:
        """Grid indices of the valid points (computed once: one VTAConfig per point)."""
        if self._valid_idx is None:
            self._valid_idx = [i for i, p in enumerate(self.grid()) if p.valid]
        return self._valid_idx

    @property
    def n_valid(self) -> int:
        """Number of valid grid points."""
        return len(self.valid_indices())

    def sample(self, n: int, seed: int = 0) -> list[Point]:
        """``min(n, n_valid)`` distinct *valid* grid points drawn uniformly without
        replacement with ``numpy.random.default_rng(seed)``, in ascending grid order
        (reproducible).  Invalid combinations are never drawn: a sample is a set of
        designs to evaluate, not of ISA violations.

        Raises:
            SpaceError: ``n < 1``.
        """
        if not isinstance(n, int) or n < 1:
            raise SpaceError(f"sample count must be a positive integer, got {n!r}")
        valid = self.valid_indices()
        if n >= len(valid):
            return [self.make_point(self._params(i)) for i in valid]
        rng = np.random.default_rng(seed)
        idx = sorted(valid[int(i)] for i in rng.choice(len(valid), size=n, replace=False))
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
            fields = {f.name for f in dataclasses.fields(VTAConfig)}
            bad = [k for k in ov if k not in fields]
            if bad:
                hint = (f" (an axis alias; give {', '.join(AXIS_ALIASES[bad[0]])})"
                        if bad[0] in AXIS_ALIASES else "")
                raise SpaceError(f"\"overrides\" key {bad[0]!r} is not a VTAConfig field{hint}")
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



#: Depth axes of the default and board spaces (log2 entries).  Every combination fits the
#: ISA budget (hw/isa.py ``check_layout_fits``): GEMM needs 37 + 2·(uop + acc + inp + wgt)
#: <= 128 bits, ALU 57 + 2·uop + 4·acc <= 128, a micro-op acc + max(acc, inp) + wgt <= 32;
#: the pynq preset (uop 13, inp 11, wgt 10, acc 11) sits exactly on the first and the last,
#: so the axes go down from it, never up.
DEFAULT_DEPTHS: dict[str, list[int]] = {
    "LOG_UOP_DEPTH": [12, 13],
    "LOG_INP_DEPTH": [10, 11],
    "LOG_WGT_DEPTH": [9, 10],
    "LOG_ACC_DEPTH": [10, 11],
}


def _block_axis(part: str | None) -> list[int]:
    """log2 BLOCK values 3.. whose smallest shape (8 × 2^b) fits the part's DSPs at packing
    2 (xc7z020: 3, 4, 5; xczu3eg, xczu7ev: 3..6); 3..5 without a part."""
    if part is None:
        return [3, 4, 5]
    from ..hw.estimate import part_info

    dsp = part_info(part)["dsp"]
    return [b for b in range(3, 7) if (8 << b) <= 2 * dsp]


def _bus_for_part(base: VTAConfig, part: str) -> int:
    """log2 of the data width of the PS memory port a core on ``part`` drives (hw/parts.py:
    Zynq-7000 S_AXI_HP0 64 bits, ZynqMP S_AXI_HP0_FPD 128 bits): a wider core bus only adds
    a width converter."""
    from ..hw.estimate import EstimateError, part_info
    from ..hw.parts import FlowError, board_spec

    try:
        part_info(part)
        spec = board_spec(base.replace(PART=part))
    except (EstimateError, FlowError, ConfigError) as e:
        raise SpaceError(str(e)) from None
    return spec.mem_port_width.bit_length() - 1


def default_space(base: str | VTAConfig = "pynq", part: str | None = None) -> Space:
    """The default space around ``base`` (default the pynq preset): BLOCK_IN and BLOCK_OUT
    as separate axes (:func:`_block_axis`), the four depth axes of :data:`DEFAULT_DEPTHS`
    (inside the ISA budget: every point is valid) and DSP packing {1, 2}.  BATCH stays at
    the base's (the workloads are batch 1).  The bus is the base's, or with ``part`` the
    width of that part's PS memory port (no 128-bit bus on a Zynq-7000)."""
    cfg = base if isinstance(base, VTAConfig) else load_config(base)
    if part is not None:
        cfg = cfg.replace(LOG_BUS_WIDTH=_bus_for_part(cfg, part))
    blocks = _block_axis(part)
    return Space(cfg, {"LOG_BLOCK_IN": blocks, "LOG_BLOCK_OUT": list(blocks),
                       **{k: list(v) for k, v in DEFAULT_DEPTHS.items()},
                       "DSP_PACKING": [1, 2]})


def board_setup(board: str) -> dict:
    """What ``--board`` sets, read from hw/parts.py: ``{"board", "title", "part",
    "base"}`` (the preset whose TARGET builds for that device), ``"fast_preset"`` (that
    TARGET's fast core, :data:`~vtaforge.hw.config.FAST_PRESETS`, or None),
    ``"log_bus_width"`` (the
    PS memory port's width) and ``"clock_mhz"`` (the PL clock the PS makes nearest at or
    below the preset's CLOCK_MHZ).

    Raises:
        SpaceError: unknown board.
    """
    from ..hw.config import preset
    from ..hw.parts import BOARD_ALIASES, BOARDS, TARGET_BOARDS, board_names, pl_clock

    key = BOARD_ALIASES.get(board, board)
    if key not in BOARDS:
        raise SpaceError(f"unknown board {board!r}; allowed: "
                         f"{', '.join(board_names(aliases=True))}")
    spec = BOARDS[key]
    targets = [t for t, b in TARGET_BOARDS.items() if BOARDS[b].device == spec.device]
    if not targets:
        raise SpaceError(f"board {board!r}: no preset targets its device {spec.device}")
    base = preset(targets[0])
    from ..hw.config import FAST_PRESETS

    return {"board": key, "title": spec.title, "part": spec.part, "base": targets[0],
            "fast_preset": FAST_PRESETS.get(targets[0]),
            "log_bus_width": spec.mem_port_width.bit_length() - 1,
            "clock_mhz": float(pl_clock(spec, base.CLOCK_MHZ).mhz)}


def board_space(board: str) -> Space:
    """The space for ``board`` (``pynq-z2``, ``ultra96``/``ultra96-v2``, ``zcu104``, or
    any hw/parts.py BOARDS key): :func:`board_setup`'s preset with the board's part, bus and
    PL clock, around it the GEMM shapes that fit the part's DSPs, the depth axes inside the
    ISA budget, DSP packing fixed at 2 (int8 × int8: it halves the GEMM DSPs and leaves
    the programs, hence the cycles, unchanged; the resource model has no term that packing
    raises, so packing 1 is always dominated), and ``ALU_REQUANT`` fixed on (the fused
    requantize: fewer cycles for LUTs only, no DSP or BRAM; a PYNQ-Z2 sweep with the axis
    off/on had it on at every Pareto point, so the off half only doubled the sweep; a
    space JSON can still sweep it; docs/dse.md has the figures).

    Raises:
        SpaceError: unknown board.
    """
    from ..hw.config import preset

    b = board_setup(board)
    base = preset(b["base"]).replace(PART=b["part"], LOG_BUS_WIDTH=b["log_bus_width"],
                                     CLOCK_MHZ=b["clock_mhz"], DSP_PACKING=2,
                                     ALU_REQUANT=True)
    blocks = _block_axis(b["part"])
    return Space(base, {"LOG_BLOCK_IN": blocks, "LOG_BLOCK_OUT": list(blocks),
                        **{k: list(v) for k, v in DEFAULT_DEPTHS.items()}})


def valid_fraction(space: Space) -> float:
    """Fraction of the grid that VTAConfig accepts."""
    return space.n_valid / space.size if space.size else 0.0


def with_width_axis(space: Space, widths: str | Sequence) -> Space:
    """``space`` with a ``LOG_WIDTH`` axis of the operand widths ``widths``
    (``"8,16,w4,a4,a4w4"`` or ``[8, 16, "w4"]``; case and blanks ignored), appended as the
    last axis: ``8`` int8 activations and weights (``LOG_WIDTH`` 3), ``16`` int16 (4),
    ``w4`` int8 activations with int4 weights (``[3, 2]``: ``LOG_INP_WIDTH`` 3,
    ``LOG_WGT_WIDTH`` 2), ``a4`` int4 activations (and outputs) with int8 weights
    (``[2, 3]``), ``a4w4`` int4 activations and weights (``[2, 2]``).  An int4 element holds
    two values per byte, so a depth axis keeps its depth and halves that memory's bytes.

    Raises:
        SpaceError: a width other than 8, 16, w4, a4 or a4w4, a repeated or empty list, a
            space that already has a width axis (``LOG_WIDTH``, ``LOG_INP_WIDTH``,
            ``LOG_WGT_WIDTH``), or a base config whose widths are not int8 (the axis would
            replace them).
    """
    codes = {"8": 3, "16": 4, "w4": [3, 2], "a4": [2, 3], "a4w4": [2, 2]}

    def norm(t) -> str:      # "08", "+8", 8 -> "8"; "W4" -> "w4"
        t = str(t).strip().lower()
        try:
            return str(int(t))
        except ValueError:
            return t

    toks = ([norm(v) for v in widths.split(",") if v.strip()] if isinstance(widths, str)
            else [norm(v) for v in widths] if isinstance(widths, Sequence) else None)
    if not toks or any(t not in codes for t in toks) or len(set(toks)) != len(toks):
        raise SpaceError(f"--widths {widths!r}: give 8, 16, w4, a4 and/or a4w4 (int8 / int16 "
                         f"operands; w4: int8 activations, int4 weights; a4: int4 activations, "
                         f"int8 weights; a4w4: int4 both), comma-separated, each once")
    have = [a for a in ("LOG_WIDTH", "LOG_INP_WIDTH", "LOG_WGT_WIDTH") if a in space.axes]
    if have:
        raise SpaceError(f"the space already has the width axis {have[0]}; drop --widths")
    b = space.base
    if (b.LOG_INP_WIDTH, b.LOG_WGT_WIDTH) != (3, 3):
        raise SpaceError(f"the space's base sets LOG_INP_WIDTH {b.LOG_INP_WIDTH} / "
                         f"LOG_WGT_WIDTH {b.LOG_WGT_WIDTH}, which --widths would replace; "
                         f"drop --widths or those base values")
    return Space(space.base, {**space.axes, "LOG_WIDTH": [codes[t] for t in toks]})


def with_depthwise_axis(space: Space, values: Sequence[int] = tuple(DEPTHWISE_AXIS)) -> Space:
    """``space`` with a ``DEPTHWISE_TAPS`` axis of ``values`` (default
    :data:`DEPTHWISE_AXIS`: 0 and 3) appended as the last axis; its non-zero values apply
    only to the points where the option exists (``BLOCK_IN == BLOCK_OUT``, int8 operands;
    the other combinations are skipped, :class:`Space`).  Its resource cost is the resource
    model's (dse/resources.py), its cycles the compiler's depthwise lowering on fsim with
    the cycle model's one cycle per depthwise GEMM micro-op.

    Raises:
        SpaceError: the space already has the axis, or the base sets it (non-zero).
    """
    if "DEPTHWISE_TAPS" in space.axes:
        raise SpaceError("the space already has the axis DEPTHWISE_TAPS")
    if space.base.DEPTHWISE_TAPS:
        raise SpaceError(f"the space's base sets DEPTHWISE_TAPS {space.base.DEPTHWISE_TAPS}, "
                         f"which the axis would replace")
    return Space(space.base, {**space.axes, "DEPTHWISE_TAPS": list(values)})
