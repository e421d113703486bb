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
    # the zero-latency files only (pairs recorded with DRAM latency live apart)
    assert not any("dram_latency" in q for q in p)
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


#: (fingerprint, workload) pairs outside :data:`TOLERANCE` with the default model, and
#: why: tiny + ALU_REQUANT + REQ_ENGINE, C4 at size 14: a UOP load waits 1,140 cycles
#: behind a run of instruction-fetch requests in the model (the RTL's fetch leaves a cycle
#: between requests, in which the waiting read is granted): +4.28 %; within 3 % with
#: ``CycleModel(fetch_yields=True)`` (test_req_engine_tiny_pairs).
KNOWN_OUTLIERS = {("0xfe310dca", "resnet18-c4")}


def test_cycle_model_within_3_percent_per_layer(pairs):
    errs = layer_errors(CycleModel(), pairs)
    bad = [f"{e['bitstream']} {e['workload']}: model {e['model']:.0f} vs rtl {e['rtl']} "
           f"({100 * e['error']:+.2f} %)" for e in errs if abs(e["error"]) > TOLERANCE
           and (e["fingerprint"], e["workload"]) not in KNOWN_OUTLIERS]
    assert not bad, "\n".join(bad)


def test_lower_bound_never_above_rtl(all_pairs):
    for p in all_pairs:
        est = model_cycles(CycleModel(), p)
        assert est["lower"] <= p["rtl_cycles"], (p["workload"], p["fingerprint"], est["lower"],
                                                 p["rtl_cycles"])


def test_fit_does_not_worsen_the_worst_layer(pairs):
    pairs = [p for p in pairs if (p["fingerprint"], p["workload"]) not in KNOWN_OUTLIERS]
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


def test_max_pool_copy_form_within_3_percent(all_pairs):
    """The max-pool's INP-load / identity-GEMM form (compiler/lower_eltwise.py
    ``_max_pool_copy``; bench/rtl_pool_add.py --record, workload ``resnet18-maxpool-copy``)
    on pynq, pynq + REQ, pynq + REQ + engine (the region zeroed by the engine) and with
    ALU_FORWARD too (chains of forwarded micro-ops): recorded, within 3 % of the RTL, lower
    bound <= RTL."""
    d = [p for p in all_pairs if p["workload"] == "resnet18-maxpool-copy"]
    errs = layer_errors(CycleModel(), d)
    assert {e["fingerprint"] for e in errs} >= {"0x76479f18", "0x28fb1a15", "0x1991f7e8",
                                                "0xe259cca1"}
    bad = [(e["fingerprint"], e["error"]) for e in errs
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


# ---------------------------------------------------------------- the REQ engine
#: pynq + ALU_REQUANT + REQ_ENGINE and tiny + ALU_REQUANT + REQ_ENGINE
#: (bench/dse_engine_pairs.py; rtl_pairs_engine.json at size 14, rtl_pairs_engine_full.json
#: at full size, workloads ``resnet18-cN-full``).
ENGINE_PYNQ, ENGINE_TINY = "0x1991f7e8", "0xfe310dca"
LAYERS = tuple(f"resnet18-c{k}" for k in range(2, 12))


def _engine_errors(all_pairs, fp, model=None):
    d = [p for p in all_pairs if p["fingerprint"] == fp]
    return {e["workload"]: e for e in layer_errors(model or CycleModel(), d)}


def test_req_engine_pynq_pairs_within_3_percent(all_pairs):
    """pynq + REQ + ENGINE, ResNet-18 C2-C11 at size 14 and at full size: every layer
    within 3 % of the RTL and ``cycles_lower`` <= RTL.  The oracle is the recorded RTL
    (commit 26c2fa3 quotes the same full-size C2, C4, C7, C10: 456,591, 30,398, 29,601,
    32,746).  Before the engine was in the model: C4 full +18.6 %, C7 +9.9 %, C2 +2.7 %,
    and ``cycles_lower`` above the RTL on 7 of the 20 layers."""
    errs = _engine_errors(all_pairs, ENGINE_PYNQ)
    want = set(LAYERS) | {f"{w}-full" for w in LAYERS}
    assert want <= set(errs), sorted(want - set(errs))
    rtl = {w: errs[w]["rtl"] for w in ("resnet18-c2-full", "resnet18-c4-full",
                                       "resnet18-c7-full", "resnet18-c10-full")}
    assert rtl == {"resnet18-c2-full": 456591, "resnet18-c4-full": 30398,
                   "resnet18-c7-full": 29601, "resnet18-c10-full": 32746}
    bad = [f"{w}: {100 * e['error']:+.2f} % lower {e['lower']:.0f} rtl {e['rtl']}"
           for w, e in errs.items() if abs(e["error"]) > TOLERANCE or e["lower"] > e["rtl"]]
    assert not bad, bad


def test_req_engine_roofline_programs(all_pairs):
    """The programs of the 1x1-roofline lowerings (rtl_pairs_engine_roofline.json, pynq +
    REQ + ENGINE, full size, workloads ``r18roof-cN-full``): every layer within 3 % of the
    RTL, ``cycles_lower`` <= RTL, and the recorded RTL of C4, C7, C10 at >= 0.90 of their
    bound (25,088 MAC cycles: at most 27,875 cycles)."""
    errs = _engine_errors([p for p in all_pairs if p["workload"].startswith("r18roof-")],
                          ENGINE_PYNQ)
    assert {f"r18roof-c{k}-full" for k in range(2, 12)} <= set(errs)
    assert all(errs[f"r18roof-c{k}-full"]["rtl"] <= 25088 / 0.9 for k in (4, 7, 10))
    bad = [f"{w}: {100 * e['error']:+.2f} % lower {e['lower']:.0f} rtl {e['rtl']}"
           for w, e in errs.items() if abs(e["error"]) > TOLERANCE or e["lower"] > e["rtl"]]
    assert not bad, bad


def test_mobilenet_lowerings_pairs(all_pairs):
    """MobileNet-v1 layers whose programs use the MobileNet lowerings (the output-block
    GEMM loop, four bank-aligned ACC regions, re-tiled resident weights, streamed weights
    stored input-block-major, per-step REQs of depthwise convs; rtl_pairs_engine_mobilenet
    .json, bench/dse_mobilenet_pairs.py): every layer within 3 % of the RTL and
    ``cycles_lower`` <= RTL.  Before ``store_row_overhead`` and ``pad_row_overhead``: the
    112x112 32->64 1x1 +11.0 % (3 cycles per STORE row; the RTL pays 0.23), the 7x7
    1024-channel depthwise -3.9 % (padded INP rows)."""
    errs = _engine_errors([p for p in all_pairs if p["workload"].startswith("mbv1-")],
                          ENGINE_PYNQ)
    assert len(errs) == 10
    bad = [f"{w}: {100 * e['error']:+.2f} % lower {e['lower']:.0f} rtl {e['rtl']}"
           for w, e in errs.items() if abs(e["error"]) > TOLERANCE or e["lower"] > e["rtl"]]
    assert not bad, bad


def test_latency_pairs():
    """pynq + REQ + ENGINE, ResNet-18 C2-C11 at full size on the RTL with a board-like DRAM
    (first-beat latency 40-60 cycles per burst; latency_pairs_engine.json,
    ``bench/dse_engine_pairs.py --size full --configs pynq --latency 40,60``) against the
    model with ``dram_latency`` 50, the range's mean: every layer within 4 % (a fixed mean
    per row against random draws per burst; the 1x1 layers, whose requests are short rows,
    lowest: C7 -3.4 %), ``cycles_lower`` <= RTL.  Before the fetch requests paid the
    latency in the model: C7 -8.1 %, C10 -8.6 %."""
    pairs = load_pairs(DATA / "latency_pairs_engine.json")
    assert {tuple(p["dram_latency"]) for p in pairs} == {(40, 60)}
    # layer_errors models each pair at the mean of its recorded latency range
    errs = {e["workload"]: e for e in layer_errors(CycleModel(), pairs)}
    assert {f"resnet18-c{k}-full" for k in range(2, 12)} <= set(errs)
    bad = [f"{w}: {100 * e['error']:+.2f} % lower {e['lower']:.0f} rtl {e['rtl']}"
           for w, e in errs.items() if abs(e["error"]) > 0.04 or e["lower"] > e["rtl"]]
    assert not bad, bad


def test_req_engine_tiny_pairs(all_pairs):
    """tiny + REQ + ENGINE at size 14: within 3 % but for C4 (:data:`KNOWN_OUTLIERS`, the
    fetch run), which ``fetch_yields`` brings within 3 % with every other layer;
    ``cycles_lower`` <= RTL everywhere."""
    errs = _engine_errors(all_pairs, ENGINE_TINY)
    assert set(LAYERS) <= set(errs)
    assert all(e["lower"] <= e["rtl"] for e in errs.values())
    assert [w for w, e in errs.items() if abs(e["error"]) > TOLERANCE] == ["resnet18-c4"]
    yields = _engine_errors(all_pairs, ENGINE_TINY, CycleModel(fetch_yields=True))
    assert all(abs(e["error"]) <= TOLERANCE for e in yields.values()), \
        {w: e["error"] for w, e in yields.items()}


def test_fetch_yields_keeps_every_pair_within_3_percent(all_pairs):
    """``fetch_yields`` (off by default: the fitted model's figures stay as they are) on
    every recorded pair: all within 3 %, lower bound <= RTL."""
    errs = layer_errors(CycleModel(fetch_yields=True), all_pairs)
    assert all(abs(e["error"]) <= TOLERANCE and e["lower"] <= e["rtl"] for e in errs), \
        [(e["bitstream"], e["workload"], e["error"]) for e in errs
         if abs(e["error"]) > TOLERANCE or e["lower"] > e["rtl"]]


def _engine_cfg():
    from vtaforge.hw.config import preset

    return preset("pynq").replace(ALU_REQUANT=True, REQ_ENGINE=True)


def test_req_engine_overlap_hand_program():
    """hw/core/compute.py ``_req_engine``, without the read channel: GEMM of 100 micro-ops,
    ALU REQ of one micro-op over 50 entries (imm), GEMM of 100, FINISH.  Hand oracle
    (compute 6, engine 5, take 2, FINISH 7): GEMM [0, 106]; the REQ takes the engine at 106
    (the pipeline empty) and ends at 106 + 5 + 50 = 161, the pipeline free at 108; GEMM
    [108, 214]; FINISH waits for the engine and the pipeline: [214, 221].  When the second
    GEMM pushes to the store unit (g2s: a STORE popping it reads OUT, which the engine
    writes), it waits for the engine, whether or not the REQ pushes there: [161, 267],
    FINISH 274.  The same program without the engine: 106 + 56 + 106 + 7 = 275."""
    from vtaforge.hw.isa import AluOp, Opcode

    cfg = _engine_cfg()
    G, A, F = int(Opcode.GEMM), int(Opcode.ALU), int(Opcode.FINISH)
    gemm = dict(opcode=G, iter_out=1, iter_in=100, uop_bgn=0, uop_end=1)
    req = dict(opcode=A, alu_opcode=int(AluOp.REQ), use_imm=1, iter_out=1, iter_in=50,
               dst_factor_in=1, uop_bgn=1, uop_end=2, push_next=1)
    m = CycleModel(read_arbitration=False)
    assert (m.compute_overhead, m.engine_overhead, m.engine_take) == (6, 5, 2)
    est = m.program_cycles(cfg, _prog([gemm, req, gemm, dict(opcode=F)]))
    assert est["cycles"] == 221
    assert est["busy"]["engine"] == 55 and est["busy"]["compute"] == 106 + 106 + 7
    assert est["lower"] == 200
    for r in (req, {**req, "push_next": 0}):
        est = m.program_cycles(cfg, _prog([gemm, r, {**gemm, "push_next": 1}, dict(opcode=F)]))
        assert est["cycles"] == 274
    plain = cfg.replace(REQ_ENGINE=False)
    assert m.program_cycles(plain, _prog([gemm, req, gemm, dict(opcode=F)]))["cycles"] == 275


def test_req_engine_holds_a_gemm_in_its_range_hand_program():
    """A GEMM micro-op whose accumulator entry lies in the engine's destination range waits
    in stage B until the engine is done.  LOAD UOP of 4 micro-ops (dst 0, 0, 100, 10 or
    60), GEMM over entries 0..99, ALU REQ over 0..49 (imm), GEMM of micro-ops (100, X) x 50
    (entries 100.. and X..), FINISH; no read channel.  Hand oracle: LOAD UOP 7 + 4 + 3 =
    [0, 14]; GEMM [14, 120]; REQ on the engine [120, 175], the pipeline free at 122; with
    X = 10 the second micro-op (k = 1) is in [0, 49]: the GEMM ends at 175 + 3 + 99 = 277
    (not 122 + 106 = 228), FINISH 284; with X = 60 nothing is held: FINISH 235."""
    import numpy as np

    from vtaforge.hw.isa import AluOp, MemType, Opcode, encode_uops

    cfg = _engine_cfg()
    G, A, F, L = int(Opcode.GEMM), int(Opcode.ALU), int(Opcode.FINISH), int(Opcode.LOAD)
    m = CycleModel(read_arbitration=False)
    for x, want in ((10, 284), (60, 235)):
        words = encode_uops(cfg, [0, 0, 100, x], [0, 0, 0, 0], [0, 0, 0, 0])
        cols = _prog([
            dict(opcode=L, memory_type=int(MemType.UOP), sram_base=0, x_size=4, y_size=1,
                 x_stride=4),
            dict(opcode=G, iter_out=1, iter_in=100, dst_factor_in=1, uop_bgn=0, uop_end=1),
            dict(opcode=A, alu_opcode=int(AluOp.REQ), use_imm=1, iter_out=1, iter_in=50,
                 dst_factor_in=1, uop_bgn=1, uop_end=2),
            dict(opcode=G, iter_out=1, iter_in=50, dst_factor_in=1, uop_bgn=2, uop_end=4),
            dict(opcode=F)])
        est = m.program_cycles(cfg, cols, uop_loads=[(0, np.asarray(words, np.uint32))])
        assert est["cycles"] == want, (x, est["cycles"])
