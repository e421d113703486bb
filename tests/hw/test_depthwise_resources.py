"""The resource model's ``DEPTHWISE_TAPS`` terms (dse/resources.py ``depthwise_terms``)
against their oracle, the Yosys counts of the option points in tests/dse/data/
yosys_points.json (``tiny_dw3``, ``pynq_dw3`` against the same cores without the option,
``tiny_dma4`` and ``pynq_dma4``; bench/dse_resource_fit.py record), and the fit of
pynq-fast with the option on the PYNQ's xc7z020."""

from __future__ import annotations

import json
from pathlib import Path

from vtaforge.dse.resources import (DEPTHWISE_FF, DEPTHWISE_LUT, DEPTHWISE_LUT_PER_PRODUCT,
                                    AnalyticResources, depthwise_terms, memory_map,
                                    resources_fit)
from vtaforge.hw.config import VTAConfig, preset
from vtaforge.hw.estimate import part_info

POINTS = {p["name"]: p for p in json.loads(
    (Path(__file__).parents[1] / "dse" / "data" / "yosys_points.json").read_text())["points"]}
PAIRS = (("tiny_dma4", "tiny_dw3"), ("pynq_dma4", "pynq_dw3"))


def test_depthwise_terms_from_the_option_points():
    """The points differ from their bases in DEPTHWISE_TAPS only; the DSP and BRAM
    differences are the model's exactly (tiny: 12 products, one merged with the array's,
    and the INP in four banks; pynq: 48 products beside the packed array); the LUT line
    through both differences within 1; the FF term within 20 of each; the whole core within
    3 % of Yosys."""
    model = AnalyticResources("xc7z020")
    for base, opt in PAIRS:
        b, o = POINTS[base], POINTS[opt]
        cb, co = VTAConfig.from_dict(b["config"]), VTAConfig.from_dict(o["config"])
        assert o["role"] == "option" and co.DEPTHWISE_TAPS == 3 and cb.DEPTHWISE_TAPS == 0
        assert co.replace(DEPTHWISE_TAPS=0) == cb
        n = co.BATCH * co.BLOCK_OUT * co.DEPTHWISE_TAPS
        lut, ff, dsp = depthwise_terms(co)
        assert o["dsp"] - b["dsp"] == dsp == (n - 1 if opt == "tiny_dw3" else n)
        banks = [m["name"] for m in memory_map(co) if m["name"].startswith("inp")]
        assert banks == ["inp.bank0", "inp.bank1", "inp.bank2", "inp.bank3"]
        eo, eb = model.resources(co), model.resources(cb)
        assert o["bram36"] - b["bram36"] == eo["bram36"] - eb["bram36"]
        assert abs(DEPTHWISE_LUT + DEPTHWISE_LUT_PER_PRODUCT * n - (o["lut"] - b["lut"])) < 1
        assert abs(DEPTHWISE_FF - (o["ff"] - b["ff"])) <= 20
        assert abs(eo["lut"] / o["lut"] - 1) < 0.03, (opt, eo["lut"], o["lut"])
        assert abs(eo["ff"] / o["ff"] - 1) < 0.05, (opt, eo["ff"], o["ff"])
        assert (eo["dsp"], eo["bram36"]) == (o["dsp"], o["bram36"])
    assert depthwise_terms(preset("pynq-fast").replace(DEPTHWISE_TAPS=0)) == (0.0, 0.0, 0)
    assert depthwise_terms(preset("pynq-fast"))[2] == 48      # the preset has the option


def test_pynq_fast_with_depthwise_fits_the_xc7z020():
    """pynq-fast + DEPTHWISE_TAPS 3: 132 + 48 DSP48 of 220, and LUT, FF, BRAM within the
    part, by the model and by Yosys (the held-out point pynq_fast_dw3)."""
    cfg = preset("pynq-fast").replace(DEPTHWISE_TAPS=3, REQ_LANE_SHIFT=False, LOAD_AHEAD=False)
    cap = part_info(cfg.PART)
    r = AnalyticResources("xc7z020").resources(cfg)
    assert r["dsp"] == 180 and resources_fit(r, cap), r
    y = POINTS["pynq_fast_dw3"]
    assert VTAConfig.from_dict(y["config"]) == cfg and y["role"] == "held-out"
    assert resources_fit(y, cap) and y["dsp"] == 180
    assert abs(r["lut"] / y["lut"] - 1) < 0.03, (r["lut"], y["lut"])
