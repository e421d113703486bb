"""The cycle model against recorded RTL cycles (tests/dse/data/rtl_pairs*.json: (config,
layer program, micro-op loads, Verilator cycles) pairs recorded by bench/dse_calibrate.py
and ``python -m vtaforge.dse.calibrate record``; no build needed).  The oracle is the
Verilator core's CYCLES register at recording time.

The 3 % bound is checked for the ResNet-18 layers (the issue's C2-C11, and its max-pool and
four residual-add shapes at full size, rtl_pairs_pool_add.json from bench/rtl_pool_add.py
--record, with and without ALU_REQUANT) and, separately, for the digits CNN (pools, small
programs)."""

from __future__ import annotations

from pathlib import Path

import pytest

from programs import insn_cols as _prog   # hand programs' decoded columns
from vtaforge.dse import CycleModel
from vtaforge.dse.calibrate import fit, layer_errors, load_pairs, model_cycles, pair_program

DATA = Path(__file__).parent / "data"
#: Per-layer bound on |model / RTL - 1| (issue 11: <= 3 % per layer).
TOLERANCE = 0.03


def _all_pairs():
    out = []
    for f in sorted(DATA.glob("rtl_pairs*.json")):
        out += load_pairs(f)
    return out


@pytest.fixture(scope="module")
def all_pairs():
    p = _all_pairs()
    assert p, f"{DATA} holds no pairs"
    return p


@pytest.fixture(scope="module")
def pairs(all_pairs):
    return [p for p in all_pairs if p["workload"].startswith("resnet18-")]


def test_recorded_pairs_decode_for_their_config(all_pairs):
    for p in all_pairs:
        cfg, cols, uops = pair_program(p)
        assert f"0x{cfg.fingerprint:08x}" == p["fingerprint"]
        assert len(cols["opcode"]) == p["n_insns"]
        assert all(len(w) <= cfg.UOP_DEPTH for _, w in uops)


def test_cycle_model_within_3_percent_per_layer(pairs):
    errs = layer_errors(CycleModel(), pairs)
    bad = [f"{e['bitstream']} {e['workload']}: model {e['model']:.0f} vs rtl {e['rtl']} "
           f"({100 * e['error']:+.2f} %)" for e in errs if abs(e["error"]) > TOLERANCE]
    assert not bad, "\n".join(bad)


def test_lower_bound_never_above_rtl(all_pairs):
    for p in all_pairs:
        est = model_cycles(CycleModel(), p)
        assert est["lower"] <= p["rtl_cycles"], (p["workload"], p["fingerprint"], est["lower"],
                                                 p["rtl_cycles"])


def test_fit_does_not_worsen_the_worst_layer(pairs):
    errs = layer_errors(CycleModel(), pairs)
    worst = max(abs(e["error"]) for e in errs)
    few = pairs[:3]
    _, info = fit(few, params=("insn_overhead",), rounds=1)
    assert info["layers"] >= 1 and info["max_abs_error"] <= max(
        abs(e["error"]) for e in layer_errors(CycleModel(), few)) + 1e-12
    assert worst <= TOLERANCE


def test_digits_within_3_percent(all_pairs):
    """The digits CNN on the tiny core: pools (ALU MAX over windows), ACC8 loads and
    programs of a few hundred cycles, where the fixed costs dominate (-6.9 % before the
    fit)."""
    d = [p for p in all_pairs if p["workload"] == "digits"]
    assert d, "no digits pairs recorded"
    errs = layer_errors(CycleModel(), d)
    assert all(abs(e["error"]) <= TOLERANCE for e in errs), [e["error"] for e in errs]


#: The full-size ResNet-18 element-wise steps recorded by bench/rtl_pool_add.py --record.
POOL_ADD = ("resnet18-maxpool", "resnet18-add-64x56", "resnet18-add-128x28",
            "resnet18-add-256x14", "resnet18-add-512x7")


def test_pool_and_adds_recorded_and_within_3_percent(all_pairs):
    """The max-pool and the four residual-add shapes on pynq with and without ALU_REQUANT
    (two lowerings of the add: ACC8 operands and MAX/MIN clip, or a GEMM sum and a clearing
    REQ): every one recorded, within 3 % of the RTL, its lower bound <= RTL.  Before the
    model charged the read-channel arbitration and the instruction fetch, the REQ adds were
    -2.1 / -3.8 / -6.6 / -14.3 % off and the 512x7 add without REQ -7.9 %."""
    d = [p for p in all_pairs if p["workload"] in POOL_ADD]
    errs = layer_errors(CycleModel(), d)
    got = {(e["fingerprint"], e["workload"]) for e in errs}
    for fp in ("0x76479f18", "0x28fb1a15"):  # pynq, pynq + ALU_REQUANT
        assert {(fp, w) for w in POOL_ADD} <= got, sorted(got)
    bad = [f"{e['fingerprint']} {e['workload']}: {100 * e['error']:+.2f} %" for e in errs
           if abs(e["error"]) > TOLERANCE or e["lower"] > e["rtl"]]
    assert not bad, bad




def test_read_channel_one_row_per_grant_hand_program():
    """hw/core/axi.py: a granted client keeps the read channel to the end of its request (one
    DMA row).  A 1-beat UOP load that the compute module issues while the load module's
    512-element INP row (1,024 beats at pynq's 8-byte bus) is in flight waits for the row.
    Hand oracle with the default constants (insn 7, compute 6, row 3, lead 6): the INP row
    is requested at 6 and ends at 6 + 1,024 + 3 = 1,033; the GEMM of 100 micro-ops ends at
    106; the UOP load asks at 112, is granted at 1,033 and ends at 106 + 7 + (1 + 3) + 921 =
    1,038; FINISH 1,045.  Without the channel: the load's 1,034."""
    from vtaforge.hw.config import preset
    from vtaforge.hw.isa import Opcode

    cfg = preset("pynq")
    G, L, F = int(Opcode.GEMM), int(Opcode.LOAD), int(Opcode.FINISH)
    cols = _prog([dict(opcode=L, memory_type=2, x_size=512, y_size=1, x_stride=512),
                  dict(opcode=G, iter_out=1, iter_in=100, uop_bgn=0, uop_end=1),
                  dict(opcode=L, memory_type=0, x_size=1, y_size=1, x_stride=1),
                  dict(opcode=F)])
    m = CycleModel()
    assert (m.insn_overhead, m.compute_overhead, m.row_overhead, m.dma_lead) == (7, 6, 3, 6)
    assert m.program_cycles(cfg, cols)["cycles"] == 1045
    assert CycleModel(read_arbitration=False).program_cycles(cfg, cols)["cycles"] == 1034


def test_fetch_waits_behind_a_long_row_hand_program():
    """hw/core/fetch.py: four instructions per fetch request, the fetch a top-priority read
    client.  Program: an INP load of one 512-element row, 8 GEMMs of one micro-op, FINISH
    (batches [L G G G] [G G G G] [G F]).  Hand oracle (fetch 4 x 2 beats + 6.5 = 14.5 per
    request): batch 0 counts as in at 0; batch 1 holds the channel over [0, 14.5], so the
    INP row runs [14.5, 1,041.5]; batch 2, asked for at 14.5, waits for the row and is in at
    1,056; the GEMMs of batches 0-1 end at 49; the last GEMM runs [1,056, 1,063], FINISH
    1,070."""
    from vtaforge.hw.config import preset
    from vtaforge.hw.isa import Opcode

    cfg = preset("pynq")
    G, L, F = int(Opcode.GEMM), int(Opcode.LOAD), int(Opcode.FINISH)
    gemm = dict(opcode=G, iter_out=1, iter_in=1, uop_bgn=0, uop_end=1)
    cols = _prog([dict(opcode=L, memory_type=2, x_size=512, y_size=1, x_stride=512)]
                 + [gemm] * 8 + [dict(opcode=F)])
    m = CycleModel()
    assert m.fetch_overhead == 6.5
    assert m.program_cycles(cfg, cols)["cycles"] == 1070
