"""The resource model's ``DMA_OUTSTANDING`` term (dse/resources.py ``DMA_OUTSTANDING_LUT``,
``DMA_OUTSTANDING_FF``) against its oracle, the Yosys counts of the option points in
tests/dse/data/yosys_points.json (``tiny_dma2``, ``tiny_dma4``, ``pynq_dma4`` against the
same cores without the option, ``tiny_alu_forward`` and ``pynq_alu_forward``;
bench/dse_resource_fit.py record)."""

from __future__ import annotations

import json
from pathlib import Path

from vtaforge.dse.resources import DMA_OUTSTANDING_FF, DMA_OUTSTANDING_LUT, AnalyticResources
from vtaforge.hw.config import VTAConfig

POINTS = {p["name"]: p for p in json.loads(
    (Path(__file__).parent / "data" / "yosys_points.json").read_text())["points"]}
PAIRS = (("tiny_alu_forward", "tiny_dma2"), ("tiny_alu_forward", "tiny_dma4"),
         ("pynq_alu_forward", "pynq_dma4"))


def test_dma_outstanding_terms_from_the_option_points():
    """The points differ from their bases in DMA_OUTSTANDING only, with the same DSP and
    BRAM; the FF term within 3 of each difference, the LUT term their mean; the model
    adds exactly the two terms, and the whole core stays within 3 % of Yosys."""
    d_lut = []
    model = AnalyticResources("xc7z020")
    for base, opt in PAIRS:
        b, o = POINTS[base], POINTS[opt]
        cb, co = VTAConfig.from_dict(b["config"]), VTAConfig.from_dict(o["config"])
        assert o["role"] == "option" and co.DMA_OUTSTANDING > 1 and cb.DMA_OUTSTANDING == 1
        assert co.replace(DMA_OUTSTANDING=1) == cb
        assert (o["dsp"], o["bram36"]) == (b["dsp"], b["bram36"])
        assert abs(DMA_OUTSTANDING_FF - (o["ff"] - b["ff"])) <= 3
        d_lut.append(o["lut"] - b["lut"])
        eo, eb = model.resources(co), model.resources(cb)
        assert (eo["lut"] - eb["lut"], eo["ff"] - eb["ff"]) == (DMA_OUTSTANDING_LUT,
                                                                DMA_OUTSTANDING_FF)
        assert abs(eo["lut"] / o["lut"] - 1) < 0.03, (opt, eo["lut"], o["lut"])
        assert abs(eo["ff"] / o["ff"] - 1) < 0.05, (opt, eo["ff"], o["ff"])
    assert abs(DMA_OUTSTANDING_LUT - sum(d_lut) / len(d_lut)) <= 0.5, d_lut
