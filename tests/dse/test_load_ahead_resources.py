"""The resource model's ``LOAD_AHEAD`` term (dse/resources.py ``LOAD_AHEAD_LUT``,
``LOAD_AHEAD_FF``) against its oracle, the Yosys counts of the option points in
tests/dse/data/yosys_points.json (``tiny_ahead``, ``pynq_fast_ahead`` against the same cores
without the option, ``tiny_dma4`` and ``pynq_fast_lane``; bench/dse_resource_fit.py
record)."""

from __future__ import annotations

import json
from pathlib import Path

from vtaforge.dse.resources import LOAD_AHEAD_FF, LOAD_AHEAD_LUT, AnalyticResources
from vtaforge.hw.config import VTAConfig

POINTS = {p["name"]: p for p in json.loads(
    (Path(__file__).parent / "data" / "yosys_points.json").read_text())["points"]}
PAIRS = (("tiny_dma4", "tiny_ahead"), ("pynq_fast_lane", "pynq_fast_ahead"))


def test_load_ahead_terms_from_the_option_points():
    """The points differ from their bases in LOAD_AHEAD only, with the same DSP and BRAM;
    each term the mean of the two differences (within 10 of each); the model adds exactly
    the two terms, and the whole core stays within 3 % (LUT) / 5 % (FF) of Yosys."""
    d_lut, d_ff = [], []
    model = AnalyticResources("xc7z020")
    for base, opt in PAIRS:
        b, o = POINTS[base], POINTS[opt]
        cb, co = VTAConfig.from_dict(b["config"]), VTAConfig.from_dict(o["config"])
        assert o["role"] == "option" and co.LOAD_AHEAD and not cb.LOAD_AHEAD
        assert co.replace(LOAD_AHEAD=False) == cb
        assert (o["dsp"], o["bram36"]) == (b["dsp"], b["bram36"])
        d_lut.append(o["lut"] - b["lut"])
        d_ff.append(o["ff"] - b["ff"])
        assert abs(LOAD_AHEAD_LUT - d_lut[-1]) <= 10 and abs(LOAD_AHEAD_FF - d_ff[-1]) <= 10
        eo, eb = model.resources(co), model.resources(cb)
        assert (eo["lut"] - eb["lut"], eo["ff"] - eb["ff"]) in {
            (round(LOAD_AHEAD_LUT + f), LOAD_AHEAD_FF) for f in (-1, -0.5, 0, 0.5, 1)}
        assert abs(eo["lut"] / o["lut"] - 1) < 0.03, (opt, eo["lut"], o["lut"])
        assert abs(eo["ff"] / o["ff"] - 1) < 0.05, (opt, eo["ff"], o["ff"])
    assert LOAD_AHEAD_LUT == sum(d_lut) / len(d_lut)
    assert LOAD_AHEAD_FF == sum(d_ff) / len(d_ff)
