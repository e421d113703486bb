"""Bitstream flow for PYNQ-class Zynq boards, under the names its callers import.

The flow has two halves, one module each:

- :mod:`vtaforge.hw.parts`: the boards (:data:`BOARDS`, :func:`board_spec`,
  :data:`TARGET_BOARDS`), their PS and ports, and the PL clocks they reach
  (:func:`pl_clock`, :func:`reachable_pl_clocks`), in the one table of parts and boards;
- :mod:`vtaforge.hw.vivado`: the Vivado project generated from a config
  (:func:`write_project`, :func:`build_tcl`, :func:`wrapper_verilog`, :func:`board_json`)
  and Vivado run and read back (:func:`run_vivado`, :func:`parse_timing_summary`).

This module re-exports both, so ``from vtaforge.hw.flow import board_spec, write_project``
keeps working; new code may import from either half directly.
"""

from __future__ import annotations

from .parts import (BOARDS, COHERENCE_FLUSH_INVALIDATE, PL_DIVIDER_MAX, TARGET_BOARDS, ZYNQ7,
                    ZYNQMP, BoardSpec, FlowError, PLClock, board_spec, pl_clock,
                    reachable_pl_clocks)
from .vivado import (BD_NAME, BUILD_STAGES, CORE_NAME, M_AXI_READ_OUTSTANDING,
                     M_AXI_WRITE_OUTSTANDING, OVERLAY_NAME, REG_WINDOW_BYTES, WRAPPER_NAME,
                     FlowWarning, TimingResult, board_json, build_sh, build_tcl,
                     parse_timing_summary, run_vivado, wrapper_verilog, write_project)

__all__ = ["FlowError", "FlowWarning", "BoardSpec", "BOARDS", "TARGET_BOARDS", "board_spec",
           "PLClock", "pl_clock", "reachable_pl_clocks", "wrapper_verilog", "build_tcl",
           "build_sh", "board_json", "write_project", "TimingResult",
           "parse_timing_summary", "run_vivado", "REG_WINDOW_BYTES", "WRAPPER_NAME",
           "CORE_NAME", "BD_NAME", "OVERLAY_NAME", "COHERENCE_FLUSH_INVALIDATE",
           "M_AXI_READ_OUTSTANDING", "M_AXI_WRITE_OUTSTANDING", "BUILD_STAGES",
           "PL_DIVIDER_MAX", "ZYNQ7", "ZYNQMP"]
