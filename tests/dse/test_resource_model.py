"""The analytic resource model against recorded Yosys counts (tests/dse/data/
yosys_points.json, written by ``bench/dse_resource_fit.py record``: hw/estimate.py's
``synth_xilinx`` of each config), without running Yosys: BRAM and DSP exact on every point,
LUT and FF within 10 % on the points the constants were fitted on and on the held-out
ones, among them cores with int16 operands (``*_w16``) and int4 weights (``*_w4*``): the
structural width terms (``width_terms``) were fitted on no such point."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from vtaforge.dse.resources import (DSP_MIN_PRODUCT_BITS, FF_COEFFS, LUT_COEFFS, LUT_FF_TERMS,
                                    SOFT_MUL4X4_LUTS, AnalyticResources, lut_ff_features,
                                    soft_products, width_terms)
from vtaforge.hw.config import VTAConfig

DATA = json.loads((Path(__file__).parent / "data" / "yosys_points.json").read_text())
POINTS = DATA["points"]
TOLERANCE = 0.10   # LUT/FF, relative, fit and held-out points (issue 11)


def _cfg(p):
    return VTAConfig.from_dict(p["config"])


def test_points_are_enough_and_from_one_flow():
    roles = [p["role"] for p in POINTS]
    assert roles.count("fit") >= 8 and roles.count("held-out") >= 3
    assert roles.count("fit") > len(LUT_FF_TERMS)
    assert len({p["yosys"] for p in POINTS}) == 1 and DATA["yosys"] == POINTS[0]["yosys"]
    for p in POINTS:    # the recorded config is the one synthesized
        c = _cfg(p)
        assert f"0x{c.fingerprint:08x}" == p["fingerprint"] and c.macs_per_cycle == p["macs"]


@pytest.mark.parametrize("p", POINTS, ids=[p["name"] for p in POINTS])
def test_analytic_model_against_yosys(p):
    r = AnalyticResources("xc7z020").resources(_cfg(p))
    assert r["dsp"] == p["dsp"]
    assert r["bram36"] == p["bram36"]
    assert abs(r["lut"] / p["lut"] - 1) <= TOLERANCE, (r["lut"], p["lut"])
    assert abs(r["ff"] / p["ff"] - 1) <= TOLERANCE, (r["ff"], p["ff"])


def test_constants_are_the_least_squares_fit_of_the_fit_points():
    fit = [p for p in POINTS if p["role"] == "fit"]
    X = np.array([lut_ff_features(_cfg(p)) for p in fit])
    W = np.array([width_terms(_cfg(p)) for p in fit], dtype=float)    # structural, not fitted
    for col, (kind, coeffs) in enumerate((("lut", LUT_COEFFS), ("ff", FF_COEFFS))):
        y = np.array([p[kind] for p in fit], dtype=float)
        sol = np.linalg.lstsq(X / y[:, None], (y - W[:, col]) / y, rcond=None)[0]
        # the model's estimates equal the refit's within rounding of the printed constants
        assert np.allclose(X @ np.array(coeffs), X @ sol, rtol=1e-3), kind


def _widths(p):
    c = _cfg(p)
    return c.INP_WIDTH, c.WGT_WIDTH


def test_wide_operand_cores_are_measured_and_held_out():
    # int16 cores: never used to fit a constant, and at least one beyond the tiny preset
    wide = [p for p in POINTS if _widths(p) == (16, 16)]
    assert len(wide) >= 2 and all(p["role"] == "held-out" for p in wide)
    assert any(p["macs"] >= 64 for p in wide)
    for p in wide:      # a 16x16 product fits one DSP48E1 (25x18): one slice per MAC, no packing
        assert p["dsp"] == p["macs"]


def test_width_terms_vanish_for_int8():
    for p in POINTS:
        if _widths(p) == (8, 8):
            assert width_terms(_cfg(p)) == (0, 0)


def test_width_terms_count_the_structure():
    # hand counts (docs/dse.md "Operand widths"), 64-bit bus.  1x16x16 int4 both, packed:
    # loader shift registers INP 64 -> 0 and WGT 1984 -> 960 bits (-1,088 LUT and FF);
    # 16 x 15 adders and 128 pairs 8 bits narrower; 256 product registers 8 bits narrower
    a4w4 = VTAConfig.from_dict({"TARGET": "pynq", "LOG_BLOCK": 4, "LOG_INP_WIDTH": 2,
                                "LOG_WGT_WIDTH": 2, "LOG_INP_BUFF_SIZE": 14,
                                "LOG_WGT_BUFF_SIZE": 17, "DSP_PACKING": 2})
    assert a4w4.packs_dsp_pairs
    assert width_terms(a4w4) == (-1088 - (240 + 128) * 8, -1088 - 256 * 8)
    # 1x8x8 int16, unpacked: only the loaders (INP 0 -> 64, WGT 448 -> 960 bits); the
    # products and their adds stay in the DSP48s
    w16 = VTAConfig.from_dict({"TARGET": "pynq", "LOG_BLOCK": 3, "LOG_INP_WIDTH": 4,
                               "LOG_WGT_WIDTH": 4, "LOG_INP_BUFF_SIZE": 14,
                               "LOG_WGT_BUFF_SIZE": 16, "LOG_ACC_BUFF_SIZE": 15})
    assert not w16.packs_dsp_pairs
    assert width_terms(w16) == (576, 576)
    # int4 activations narrower than the bus: no loader register either way, packed adds
    a4 = VTAConfig.from_dict({"TARGET": "pynq", "LOG_BLOCK": 3, "LOG_INP_WIDTH": 2,
                              "LOG_INP_BUFF_SIZE": 12, "LOG_WGT_BUFF_SIZE": 15,
                              "LOG_ACC_BUFF_SIZE": 15, "DSP_PACKING": 2})
    assert width_terms(a4) == (-(56 + 32) * 4, -64 * 4)
    # 1x8x8 int4 both, unpacked: WGT loader register 448 -> 192 bits; 64 products from LUTs
    # (8-bit registers), and per lane an adder tree of 4 + 2 + 1 adders of 9, 10 and 11
    # bits in fabric
    soft = a4.replace(LOG_WGT_WIDTH=2, LOG_WGT_BUFF_SIZE=14, DSP_PACKING=1)
    assert soft_products(soft) and not soft_products(a4w4)
    assert width_terms(soft) == (-256 + 64 * SOFT_MUL4X4_LUTS + 8 * (4 * 9 + 2 * 10 + 11),
                                 -256 + 64 * 8)
    assert AnalyticResources().resources(soft)["dsp"] == 0


def test_int4_weight_cores_are_measured_and_held_out():
    # int8 x int4: Yosys maps an unpacked 8x4 product to one DSP48E1 (not to LUTs), and the
    # RTL packs two int4 weights per DSP as it does int8 ones
    w4 = [p for p in POINTS if _widths(p) == (8, 4)]
    assert len(w4) >= 2 and all(p["role"] == "held-out" for p in w4)
    packed = [p for p in w4 if _cfg(p).DSP_PACKING == 2]
    unpacked = [p for p in w4 if _cfg(p).DSP_PACKING == 1]
    assert packed and unpacked
    assert all(p["dsp"] == p["macs"] for p in unpacked)
    assert all(2 * p["dsp"] == p["macs"] for p in packed)


def test_int4_activation_cores_are_measured_and_held_out():
    # int4 activations (and outputs), int8 or int4 weights: recorded after the width terms
    # were written, never fitted on; an unpacked 4x8 product takes one DSP48E1 as 8x4 does,
    # the RTL packs two int4-activation products per DSP (packs_dsp_pairs), and Yosys builds
    # an unpacked 4x4 product (8 bits < DSP_MIN_PRODUCT_BITS) from LUTs: no DSP at all
    a4 = [p for p in POINTS if _widths(p)[0] == 4]
    assert {_widths(p) for p in a4} == {(4, 8), (4, 4)}
    assert all(p["role"] == "held-out" for p in a4) and any(p["macs"] >= 256 for p in a4)
    for p in a4:
        c = _cfg(p)
        if c.DSP_PACKING == 2:
            assert p["dsp"] == p["macs"] // 2
        else:
            assert p["dsp"] == (0 if _widths(p) == (4, 4) else p["macs"])
            assert soft_products(c) == (_widths(p) == (4, 4))
    assert any(p["dsp"] == 0 for p in a4) and DSP_MIN_PRODUCT_BITS == 9


def _point(name):
    return next(p for p in POINTS if p["name"] == name)


def test_req_engine_terms_from_the_option_points():
    """REQ_ENGINE against the same core with ALU_REQUANT alone (Yosys, tests/dse/data):
    +4 DSP on tiny and on pynq (the engine's four loop-bound products), BRAM as the banks
    rule says (ACC and OUT in two half-depth banks), the LUT line through both differences,
    FF 2 x ACC_WIDTH per lane plus a constant within 20 of each difference's; no term
    without the engine."""
    from vtaforge.dse.resources import (REQ_ENGINE_DSP, REQ_ENGINE_FF, REQ_ENGINE_LUT,
                                        REQ_ENGINE_LUT_PER_LANE, memory_map, req_engine_terms)

    for base, eng in (("tiny_alu_requant", "tiny_req_engine"),
                      ("pynq_alu_requant", "pynq_req_engine")):
        b, e = _point(base), _point(eng)
        cb, ce = _cfg(b), _cfg(e)
        assert e["role"] == "option" and ce.REQ_ENGINE and not cb.REQ_ENGINE
        assert ce.replace(REQ_ENGINE=False) == cb
        assert e["dsp"] - b["dsp"] == REQ_ENGINE_DSP == 4
        banks = [m for m in memory_map(ce) if m["name"].endswith((".bank0", ".bank1"))]
        assert sorted(m["name"] for m in banks) == ["acc.bank0", "acc.bank1", "out.bank0",
                                                    "out.bank1"]
        assert e["bram36"] - b["bram36"] == sum(m["bram36"] for m in memory_map(ce)) - sum(
            m["bram36"] for m in memory_map(cb))
        lanes = ce.BATCH * ce.BLOCK_OUT
        assert abs(REQ_ENGINE_LUT + REQ_ENGINE_LUT_PER_LANE * lanes - (e["lut"] - b["lut"])) < 2
        assert abs(REQ_ENGINE_FF + 2 * ce.ACC_WIDTH * lanes - (e["ff"] - b["ff"])) <= 20
        assert req_engine_terms(cb) == (0.0, 0.0, 0)
    held = [p for p in POINTS if _cfg(p).REQ_ENGINE and p["role"] == "held-out"]
    assert held, "no held-out REQ_ENGINE point"


def test_alu_forward_terms_from_the_option_points():
    """ALU_FORWARD against the same core with ALU_REQUANT and REQ_ENGINE (Yosys, tests/dse/
    data): no DSP or BRAM; the LUT term the mean of both differences (which do not grow with
    the lanes), the FF term within 2 of each; the whole core within 3 % of Yosys (the bases: +1.1 % and +1.7 %)."""
    from vtaforge.dse.resources import ALU_FORWARD_FF, ALU_FORWARD_LUT, AnalyticResources

    d_lut = []
    for base, fwd in (("tiny_req_engine", "tiny_alu_forward"),
                      ("pynq_req_engine", "pynq_alu_forward")):
        b, f = _point(base), _point(fwd)
        cb, cf = _cfg(b), _cfg(f)
        assert f["role"] == "option" and cf.ALU_FORWARD and not cb.ALU_FORWARD
        assert cf.replace(ALU_FORWARD=False) == cb
        assert (f["dsp"], f["bram36"]) == (b["dsp"], b["bram36"])
        assert abs(ALU_FORWARD_FF - (f["ff"] - b["ff"])) <= 2
        d_lut.append(f["lut"] - b["lut"])
        est = AnalyticResources("xc7z020").resources(cf)
        assert abs(est["lut"] / f["lut"] - 1) < 0.03, (fwd, est["lut"], f["lut"])
        assert est["lut"] - AnalyticResources("xc7z020").resources(cb)["lut"] == ALU_FORWARD_LUT
    assert abs(ALU_FORWARD_LUT - sum(d_lut) / len(d_lut)) <= 0.5, d_lut
