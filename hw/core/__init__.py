"""vtaforge.hw.core: the Amaranth VTA core (one component per unit) and Verilog emission.

Public API:

- :class:`VTACore` (``VTACore(cfg)``): the top-level component.
- :func:`emit_verilog` (``emit_verilog(cfg, name="vta_core") -> str``): deterministic
  Verilog text of the core.
- :data:`DEBUG_STATE_NAMES`: ``{"fetch": {code: name}, "load": ..., "compute": ...,
  "store": ...}`` naming the 4-bit state fields of the ``dbg_state`` output.
"""

from __future__ import annotations

from ..config import VTAConfig
from .compute import ComputeState
from .fetch import FetchState
from .load import LoadState
from .store import StoreState
from .top import VTACore

__all__ = ["VTACore", "emit_verilog", "DEBUG_STATE_NAMES"]

#: Names of the FSM state codes in ``dbg_state`` ([3:0] fetch, [7:4] load, [11:8] compute,
#: [15:12] store).
DEBUG_STATE_NAMES: dict[str, dict[int, str]] = {
    unit: {s.value: s.name for s in states}
    for unit, states in (("fetch", FetchState), ("load", LoadState),
                         ("compute", ComputeState), ("store", StoreState))
}


def emit_verilog(cfg: VTAConfig, name: str = "vta_core") -> str:
    """Verilog text of :class:`VTACore` for ``cfg``, top module ``name``.

    Deterministic: the same config gives byte-identical text (with the same Amaranth and
    Yosys versions).

    Raises:
        TypeError: ``cfg`` is not a VTAConfig.
        ValueError: ``name`` is not a plain Verilog identifier.
    """
    import re

    from amaranth.back import verilog

    if not isinstance(cfg, VTAConfig):
        raise TypeError(f"emit_verilog needs a VTAConfig, got {type(cfg).__name__}")
    if not isinstance(name, str) or not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", name):
        raise ValueError(f"module name {name!r} is not a Verilog identifier")
    core = VTACore(cfg)
    return verilog.convert(core, name=name, emit_src=False)
