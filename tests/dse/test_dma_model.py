"""The cycle model on ``DMA_OUTSTANDING`` > 1 cores (dse/performance.py
``CycleModel._row_cycles`` and the schedule's ``lat_q``): a LOAD pays the DRAM latency on
its first row only, a later row costs ``max(d + queued_row_overhead, (L + d +
queued_loop_cycles) / N)``, a STORE pays the latency once, and a read holds the channel
only from its first beat.

The recorded pairs (``latency_pairs_dma.json``: pynq-fast + DMA_OUTSTANDING 4, ResNet-18
C2-C11 at full size on the RTL with 40-60 cycles of DRAM latency per burst;
``bench/dse_engine_pairs.py --size full --configs pynq-fast --latency 40,60 --dma 4``) are
the oracle: every layer within 3 %, the lower bound at most the RTL's cycles.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from vtaforge.dse.calibrate import layer_errors, load_pairs, pair_program
from vtaforge.dse.performance import CycleModel
from vtaforge.hw.config import MemType, preset
from vtaforge.hw.isa import Opcode

DATA = Path(__file__).parent / "data"
PAIRS = DATA / "latency_pairs_dma.json"
TOLERANCE = 0.03


def _load_cols(cfg, y: int, x: int, mem=MemType.INP, opcode=Opcode.LOAD) -> dict:
    """Decoded columns of a two-instruction program: one LOAD (or STORE) of ``y`` rows of
    ``x`` elements at stride ``x`` from DRAM element 0, then FINISH."""
    names = ("opcode", "memory_type", "sram_base", "dram_base", "y_size", "x_size",
             "x_stride", "y_pad_0", "y_pad_1", "x_pad_0", "x_pad_1", "pop_prev", "pop_next",
             "push_prev", "push_next", "iter_out", "iter_in", "uop_bgn", "uop_end",
             "use_imm", "reset", "alu_opcode", "dst_factor_out", "dst_factor_in",
             "src_factor_out", "src_factor_in")
    cols = {k: np.zeros(2, np.int64) for k in names}
    cols["opcode"][:] = [int(opcode), int(Opcode.FINISH)]
    cols["memory_type"][0] = int(mem)
    cols["y_size"][0], cols["x_size"][0], cols["x_stride"][0] = y, x, x
    return cols


@pytest.mark.parametrize("n_out,x", [(4, 16), (4, 2), (2, 2), (8, 32)])
def test_a_later_load_row_costs_its_data_or_a_share_of_the_latency(n_out, x):
    """pynq + DMA_OUTSTANDING: 16 more rows of an INP LOAD (16-byte elements, two beats
    each on the 8-byte bus) cost 16 x max(d + 3, (50 + d + 2) / N) at latency 50, d the
    row's beats; with the option off, 16 x (50 + d + row_overhead)."""
    cfg = preset("pynq").replace(DMA_OUTSTANDING=n_out)
    model = CycleModel(dram_latency=50)
    d = 2 * x

    def extra(c):
        return (model.program_cycles(c, _load_cols(c, 17, x))["cycles"]
                - model.program_cycles(c, _load_cols(c, 1, x))["cycles"])

    assert extra(cfg) == pytest.approx(16 * max(d + 3, (50 + d + 2) / n_out))
    off = preset("pynq")
    assert extra(off) == pytest.approx(16 * (50 + d + model.row_overhead))


@pytest.mark.parametrize("n_out", [1, 4])
def test_a_store_pays_the_latency_once(n_out):
    """A STORE's rows wait for no write response (hw/core/axi.py write side, the same with
    the option off): the latency is charged once per STORE, not per row, on every core;
    the program's first fetch batch pays it too.  Measured on the tiny RTL at
    DMA_OUTSTANDING 1 with 50 cycles per burst (ACC load + STORE programs): a 16-row STORE
    +150 cycles over the ideal bus like a 1-row one (fetch, load, store), which the model
    now gives; it charged 16 x 50 for the store before."""
    cfg = preset("pynq").replace(DMA_OUTSTANDING=n_out)
    for y in (1, 16):
        c = [CycleModel(dram_latency=lat).program_cycles(cfg, _load_cols(
            cfg, y, 8, MemType.OUT, Opcode.STORE))["cycles"] for lat in (0, 50)]
        assert c[1] - c[0] == pytest.approx(2 * 50)


@pytest.fixture(scope="module")
def pairs():
    return load_pairs(PAIRS)


def test_recorded_pairs_are_the_dma_core_with_latency(pairs):
    assert {tuple(p["dram_latency"]) for p in pairs} == {(40, 60)}
    cfgs = {pair_program(p)[0] for p in pairs}
    # recorded before pynq-fast took DEPTHWISE_TAPS 3 (ResNet-18 has no depthwise conv)
    # and REQ_LANE_SHIFT and LOAD_AHEAD
    assert cfgs == {preset("pynq-fast").replace(DMA_OUTSTANDING=4, DEPTHWISE_TAPS=0,
                                                REQ_LANE_SHIFT=False, LOAD_AHEAD=False)}
    assert {p["workload"] for p in pairs} == {f"resnet18-c{k}-full" for k in range(2, 12)}


def test_every_layer_within_3_percent(pairs):
    """Each layer of the pairs against the model at dram_latency 50 (the range's mean):
    within 3 %, ``cycles_lower`` <= RTL."""
    errs = {e["workload"]: e for e in layer_errors(CycleModel(), pairs)}
    bad = [f"{w}: {100 * e['error']:+.2f} % lower {e['lower']:.0f} rtl {e['rtl']}"
           for w, e in errs.items() if abs(e["error"]) > TOLERANCE or e["lower"] > e["rtl"]]
    assert not bad, bad


def test_queued_model_is_below_the_one_request_model(pairs):
    """The same programs costed as if DMA_OUTSTANDING were 1 (every row paying the
    latency): higher on the ten layers together, and on each 1x1 layer (short rows)."""
    model = CycleModel(dram_latency=50)
    on, off = {}, {}
    for p in pairs:
        cfg, cols, uops = pair_program(p)
        on[p["workload"]] = model.program_cycles(cfg, cols, uops)["cycles"]
        off[p["workload"]] = model.program_cycles(cfg.replace(DMA_OUTSTANDING=1), cols,
                                                  uops)["cycles"]
    assert sum(on.values()) < sum(off.values())
    for k in (4, 7, 10):
        w = f"resnet18-c{k}-full"
        assert on[w] < off[w], (w, on[w], off[w])
