"""The resource model's ``REQ_LANE_SHIFT`` terms (dse/resources.py ``REQ_LANE_SHIFT_LUT``,
``REQ_LANE_SHIFT_FF``) against their oracle, the Yosys counts of the option points in
tests/dse/data/yosys_points.json (``tiny_lane``, ``tiny_lane_engine``, ``pynq_fast_lane``
against the same cores without the option synthesized from the same RTL: ``tiny_lane_off``,
``tiny_lane_engine_off``, and ``pynq_fast_dw3``, the pynq-fast preset, which synthesizes
to the same counts from this RTL), and the fit of pynq-fast with the option on the PYNQ's
xc7z020."""

from __future__ import annotations

import json
from pathlib import Path

from vtaforge.dse.resources import (REQ_LANE_SHIFT_FF, REQ_LANE_SHIFT_LUT, AnalyticResources,
                                    resources_fit)
from vtaforge.hw.config import VTAConfig, preset
from vtaforge.hw.estimate import part_info

DATA = json.loads((Path(__file__).parent / "data" / "yosys_points.json").read_text())
POINTS = {p["name"]: p for p in DATA["points"]}
PAIRS = (("tiny_lane_off", "tiny_lane"), ("tiny_lane_engine_off", "tiny_lane_engine"),
         ("pynq_fast_dw3", "pynq_fast_lane"))


def _cfg(p):
    return VTAConfig.from_dict(p["config"])


def test_req_lane_shift_terms_from_the_option_points():
    """Each pair differs in REQ_LANE_SHIFT only; the option adds no FF, DSP or BRAM on any
    of them, its LUT differences are within 4 % of the base (Yosys's spread on
    near-identical netlists) and of both signs, so the model's terms are 0; the whole core
    within 5 % LUT / 2 % FF of Yosys."""
    model = AnalyticResources("xc7z020")
    d_lut = []
    for base, opt in PAIRS:
        b, o = POINTS[base], POINTS[opt]
        cb, co = _cfg(b), _cfg(o)
        assert o["role"] == "option" and co.REQ_LANE_SHIFT
        assert not cb.REQ_LANE_SHIFT and co.replace(REQ_LANE_SHIFT=False) == cb
        assert (o["ff"], o["dsp"], o["bram36"]) == (b["ff"], b["dsp"], b["bram36"])
        assert abs(o["lut"] / b["lut"] - 1) < 0.04, (opt, o["lut"], b["lut"])
        d_lut.append(o["lut"] - b["lut"])
        eo, eb = model.resources(co), model.resources(cb)
        assert (eo["lut"] - eb["lut"], eo["ff"] - eb["ff"]) == (REQ_LANE_SHIFT_LUT,
                                                                REQ_LANE_SHIFT_FF) == (0, 0)
        assert (eo["dsp"], eo["bram36"]) == (o["dsp"], o["bram36"])
        assert abs(eo["lut"] / o["lut"] - 1) < 0.05, (opt, eo["lut"], o["lut"])
        assert abs(eo["ff"] / o["ff"] - 1) < 0.02, (opt, eo["ff"], o["ff"])
    assert min(d_lut) < 0 < max(d_lut), d_lut
    assert POINTS["tiny_lane_engine"]["config"]["REQ_ENGINE"] is True     # both datapaths


def test_pynq_fast_with_lane_shift_fits_the_xc7z020():
    """pynq-fast + REQ_LANE_SHIFT: within the part by the model and by Yosys, with the
    DSPs and BRAM of pynq-fast."""
    cfg = preset("pynq-fast").replace(REQ_LANE_SHIFT=True, LOAD_AHEAD=False)
    cap = part_info(cfg.PART)
    r = AnalyticResources("xc7z020").resources(cfg)
    y = POINTS["pynq_fast_lane"]
    assert _cfg(y) == cfg and resources_fit(r, cap) and resources_fit(y, cap)
    assert (y["dsp"], y["bram36"]) == (r["dsp"], r["bram36"]) == (180, 112.0)
    assert abs(r["lut"] / y["lut"] - 1) < 0.03, (r["lut"], y["lut"])
