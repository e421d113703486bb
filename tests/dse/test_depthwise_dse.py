"""The DSE and the depthwise GEMM (``DEPTHWISE_TAPS``): the space's axis (skipped where the
option cannot exist), the cycle model's cost of a depthwise GEMM micro-op (one, like any
GEMM micro-op), and the scratchpad extents of a depthwise trace (its last tap).

Oracles: VTAConfig's own validation (every point of the axis is a valid config, and the
skipped ones are those it refuses), counts from the axes' definitions, and hand-built
instructions and traces whose cycles and extents follow from the ISA text."""

from __future__ import annotations

import numpy as np
import pytest

from vtaforge.dse.performance import CycleModel, _trace_extents
from vtaforge.dse.space import (DEPTHWISE_AXIS, Space, SpaceError, default_space,
                                with_depthwise_axis)
from vtaforge.hw.config import ConfigError, MemType, preset
from vtaforge.hw.isa import Insn, Opcode, decode_program, encode_program
from vtaforge.runtime.artifact import Trace, TraceKernel


def test_depthwise_axis_skips_non_square_points():
    """The default xc7z020 space (3 x 3 block shapes, 3 of them square) with the axis: the
    square points twice (0 and 3), the others once (0); every point valid; the skipped
    combinations are exactly the ones VTAConfig refuses."""
    sp0 = default_space("pynq", "xc7z020")
    sp = with_depthwise_axis(sp0)
    assert sp.axes["DEPTHWISE_TAPS"] == DEPTHWISE_AXIS == [0, 3]
    square = sum(1 for p in sp0.grid() if p.cfg.BLOCK_IN == p.cfg.BLOCK_OUT)
    assert sp.size == sp0.size + square and sp.n_valid == sp.size
    pts = list(sp.grid())
    assert len(pts) == sp.size and all(p.valid for p in pts)
    on = [p for p in pts if p.cfg.DEPTHWISE_TAPS]
    assert len(on) == square and all(p.cfg.BLOCK_IN == p.cfg.BLOCK_OUT for p in on)
    # skipped = refused by the config itself
    with pytest.raises(ConfigError, match="needs BLOCK_IN == BLOCK_OUT"):
        preset("pynq").replace(LOG_BLOCK_IN=3, LOG_BLOCK_OUT=4, DEPTHWISE_TAPS=3)
    # samples draw from the same points, reproducibly
    s1, s2 = sp.sample(25, seed=4), sp.sample(25, seed=4)
    assert [p.params for p in s1] == [p.params for p in s2]
    assert all(p.valid and p.params in [q.params for q in pts] for p in s1)


def test_depthwise_axis_in_a_space_file_and_errors():
    """A space JSON may name the axis (the same skipping); it also skips int16 points;
    appending it twice, or to a base that sets it, is refused."""
    sp = Space.from_dict({"base": "tiny", "axes": {"LOG_BLOCK_OUT": [2, 3],
                                                   "LOG_WIDTH": [3, 4],
                                                   "DEPTHWISE_TAPS": [0, 3]}})
    combos = [p.params for p in sp.grid()]
    # tiny has BLOCK_IN 4 (LOG 2): only LOG_BLOCK_OUT 2 with int8 takes 3 taps
    assert sp.size == 5 and all(p.valid for p in sp.grid())
    assert [c for c in combos if c["DEPTHWISE_TAPS"]] == [
        {"LOG_BLOCK_OUT": 2, "LOG_WIDTH": 3, "DEPTHWISE_TAPS": 3}]
    with pytest.raises(SpaceError, match="already has the axis DEPTHWISE_TAPS"):
        with_depthwise_axis(sp)
    with pytest.raises(SpaceError, match="base sets DEPTHWISE_TAPS 3"):
        with_depthwise_axis(Space(preset("tiny").replace(DEPTHWISE_TAPS=3), {"DSP_PACKING": [1]}))


@pytest.mark.parametrize("name", ["tiny", "pynq-fast"])
def test_depthwise_gemm_costs_one_cycle_per_micro_op(name):
    """A depthwise GEMM of 2 x 3 iterations of 4 micro-ops costs what the same GEMM without
    the flag costs: the compute overhead + 24 micro-op cycles."""
    cfg = preset(name).replace(DEPTHWISE_TAPS=3)
    model = CycleModel()
    busy = []
    for dw in (0, 1):
        insns = [Insn(Opcode.GEMM, uop_bgn=0, uop_end=4, iter_out=2, iter_in=3,
                      depthwise=dw), Insn(Opcode.FINISH)]
        cols = decode_program(cfg, encode_program(cfg, insns).reshape(-1))
        assert int(cols["depthwise"][0]) == dw
        busy.append(model.program_cycles(cfg, cols)["busy"]["compute"])
    assert busy[0] == busy[1] == model.compute_overhead + 24 + model.insn_overhead


def test_trace_extents_count_the_last_tap():
    """A depthwise GEMM micro-op at INP entry 10 under a loop of 5 iterations of factor 2
    reads up to entry 18 + taps - 1; the same kernel without the flag up to 18."""
    def trace(dw: bool) -> Trace:
        k = TraceKernel("gemm", False, 0, False, 0, [(5, 1, 2, 0)], np.array([0]),
                        np.array([10]), np.array([0]), dw)
        return Trace("t", [("K", 0)], [k])
    assert _trace_extents(trace(False), 3)[MemType.INP] == 19
    assert _trace_extents(trace(True), 3)[MemType.INP] == 21
    assert _trace_extents(trace(True), 5)[MemType.INP] == 23
