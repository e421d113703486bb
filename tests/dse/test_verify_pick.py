"""Issue 22 item 5: ``--verify`` verifies the pick first and spends one verification on
configs whose programs are the same; ``--accuracy`` picks only above an accuracy floor;
a space whose every config is refused is an error.  The RTL rung is a fake here (measured
cycles = the model's times a factor per config), so that these run without Verilator; the
real rung is tests/dse/test_promote.py's ``rtl`` test."""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest
from click.testing import CliRunner

from vtaforge.cli import main
from vtaforge.dse import DesignEvaluator, Space, parse_workloads, run_search
from vtaforge.dse import promote as pm
from vtaforge.dse.evaluate import judge
from vtaforge.dse.promote import program_groups, program_signature, promote
from vtaforge.dse.report import best_designs, build_report, format_table, pick_floor
from vtaforge.dse.search import mark_pareto
from vtaforge.hw.config import preset


def _fp(pr):
    return f"0x{pr.point.cfg.fingerprint:08x}"


class FakeRtl:
    """Stands in for run_search on the verify rungs: records what it was asked to verify
    and "measures" the model's cycles times ``factor[fingerprint]`` (default 1)."""

    def __init__(self, results, factor=None):
        self.by_fp = {_fp(r): r for r in results if r.point.cfg is not None}
        self.factor = factor or {}
        self.calls: list[tuple[list[str], dict]] = []

    def __call__(self, points, workloads, ev, **kw):
        fps = [f"0x{p.cfg.fingerprint:08x}" for p in points]
        self.calls.append((fps, kw))
        out = []
        for fp in fps:
            src = self.by_fp[fp].result
            f = self.factor.get(fp, 1.0)
            wls = {k: {**w, "cycles_measured": int(round(w["cycles"] * f))}
                   for k, w in src.workloads.items()}
            out.append(SimpleNamespace(result=SimpleNamespace(workloads=wls, resources=None,
                                                              errors=[])))
        return out

    @property
    def verified(self):
        return [fp for fps, _ in self.calls for fp in fps]


@pytest.fixture
def fake_rtl(monkeypatch):
    monkeypatch.setattr(pm, "rung_available", lambda r: (True, ""))

    def make(results, factor=None):
        f = FakeRtl(results, factor)
        monkeypatch.setattr(pm, "run_search", f)
        return f
    return make


# ------------------------------------------------------------ same programs, one verification
def _same_program_space():
    # 4x the micro-op buffer, which resnet18-c5 at 7x7 on tiny's scratchpads does not use
    # (tests/dse/test_program_sharing.py): the same programs, more BRAM
    return Space(preset("tiny"), {"LOG_UOP_DEPTH": [10, 12], "LOG_INP_DEPTH": [9],
                                  "LOG_ACC_DEPTH": [9]})


def test_same_programs_share_one_verification(fake_rtl):
    wls = parse_workloads("resnet18-c5", 7)
    ev = DesignEvaluator()
    res = run_search(_same_program_space(), wls, ev, progress=False)
    small, big = res
    assert small.feasible and big.feasible
    sig = program_signature(small.point.cfg, wls)
    assert sig is not None and sig == program_signature(big.point.cfg, wls)
    # a different core (LUT multipliers: the RTL pipeline may differ) shares nothing
    other = small.point.cfg.replace(LUT_MULTIPLIERS=8)
    assert program_signature(other, wls) != sig
    fake = fake_rtl(res, {_fp(small): 1.02, _fp(big): 1.02})
    sec = promote(res, wls, ev, ["rtl"], budget=2)
    assert len(sec["candidates"]) == 2
    assert fake.verified == [_fp(small)]            # one run, not two
    assert sec["verifications"] == 1 and sec["groups"] == [[_fp(small), _fp(big)]]
    e = {x["fingerprint"]: x for x in sec["points"]}
    assert e[_fp(small)]["rtl"]["status"] == "ran"
    assert e[_fp(big)]["rtl"]["status"] == f"shared: same programs as {_fp(small)}"
    assert e[_fp(big)]["rtl"]["cycles"] == e[_fp(small)]["rtl"]["cycles"]
    assert sec["rungs"]["rtl"] == {"status": "ran", "points": 1, "shared": 1}
    assert sec["model_error"]["points"] == 1        # the shared copy is not a second sample
    rep = build_report(res, wls, ev, verify=sec)
    for p in rep["points"]:                         # both RTL-measured now
        assert p["rungs"]["cycles"]["ran"] == "rtl" and p["latency_band"] == 0.0
    txt = format_table(rep)
    assert "shared by 1 with the same programs" in txt
    assert f"the best-latency pick {rep['best']['latency']}: verified" in txt


def test_program_groups_only_compare_the_same_hardware(monkeypatch):
    wls = parse_workloads("resnet18-c5", 7)
    res = run_search(Space(preset("tiny"), {"LUT_MULTIPLIERS": [0, 8]}), wls,
                     DesignEvaluator(), progress=False)
    seen = []
    real = pm.program_signature
    monkeypatch.setattr(pm, "program_signature",
                        lambda cfg, *a: seen.append(cfg) or real(cfg, *a))
    assert program_groups(res, [0, 1], wls) == [[0], [1]]
    assert seen == []               # different hardware: no compile needed to tell them apart


# ------------------------------------------------------------ the pick first, and last
def _two_shapes(monkeypatch=None):
    """tiny at 1x4x4 and 1x8x8, the bigger one made 1 % faster than the smaller (inside the
    2.5 % band): the pick is the smaller (fewer DSPs), the fastest is the bigger."""
    wls = parse_workloads("resnet18-c2", 4)
    ev = DesignEvaluator()
    res = run_search(Space(preset("tiny"), {"LOG_BLOCK": [2, 3]}), wls, ev, progress=False)
    small, big = sorted(res, key=lambda r: r.point.cfg.macs_per_cycle)
    for k, w in big.result.workloads.items():
        w["cycles"] = small.result.workloads[k]["cycles"] * 0.99
    for pr in res:
        pr.verdict = judge(pr.result, float(pr.point.cfg.CLOCK_MHZ), ev.capacity, None,
                           pr.point.cfg.bitstream_name)
    mark_pareto(res)
    return wls, ev, res, small, big


def test_the_pick_is_verified_first(fake_rtl):
    wls, ev, res, small, big = _two_shapes()
    assert pm.candidates(res)[0] == res.index(big)          # the fastest leads the front
    assert build_report(res, wls, ev)["best"]["latency"] == _fp(small)
    fake = fake_rtl(res)
    sec = promote(res, wls, ev, ["rtl"], budget=1)
    assert fake.verified == [_fp(small)]
    assert sec["candidates"][0] == _fp(small)
    rep = build_report(res, wls, ev, verify=sec)
    assert rep["best"]["latency"] == _fp(small)
    assert f"the best-latency pick {_fp(small)}: verified (rtl ran)" in format_table(rep)


def test_a_pick_changed_by_the_measurement_is_verified_next(fake_rtl, monkeypatch):
    wls, ev, res, small, big = _two_shapes()
    # only the pick is a candidate, so the first round verifies it alone
    monkeypatch.setattr(pm, "candidates", lambda results, band: [results.index(small)])
    fake = fake_rtl(res, {_fp(small): 1.10})        # the RTL says: 10 % slower
    sec = promote(res, wls, ev, ["rtl"], budget=2)
    assert [c[0] for c in fake.calls] == [[_fp(small)], [_fp(big)]]   # then the new pick
    assert sec["verifications"] == 2 and sec["candidates"] == [_fp(small), _fp(big)]
    rep = build_report(res, wls, ev, verify=sec)
    assert rep["best"]["latency"] == _fp(big)
    assert f"the best-latency pick {_fp(big)}: verified" in format_table(rep)


def test_an_unverified_pick_is_said_so(fake_rtl, monkeypatch):
    wls, ev, res, small, big = _two_shapes()
    monkeypatch.setattr(pm, "candidates", lambda results, band: [results.index(small)])
    fake_rtl(res, {_fp(small): 1.10})
    sec = promote(res, wls, ev, ["rtl"], budget=1)
    rep = build_report(res, wls, ev, verify=sec)
    assert rep["best"]["latency"] == _fp(big)
    assert (f"the best-latency pick {_fp(big)}: NOT verified (rtl not run: budget "
            f"exhausted)") in format_table(rep)


def test_verify_progress_is_labelled(fake_rtl):
    wls, ev, res, small, big = _two_shapes()
    fake = fake_rtl(res)
    promote(res, wls, ev, ["rtl"], budget=1, progress=True)
    assert fake.calls[0][1]["progress"] is True and fake.calls[0][1]["desc"] == "verify rtl"


# ------------------------------------------------------------ accuracy floor
def _acc_pt(fp, lat, dsp, util, acc):
    return {"fingerprint": fp, "feasible": True, "latency_us": lat, "gops": 1.0 / lat,
            "utilization": {"max": util}, "resources": {"dsp": dsp, "lut": 1000,
                                                        "bram36": 1.0}, "accuracy": acc}


def test_accuracy_floor_keeps_the_pick_accurate():
    # the case: a 90.4 % int4 core 1.9x faster than the 97.8 % int8 one
    pts = [_acc_pt("int4", 7504.7, 0, 0.834, 0.904), _acc_pt("int8", 14419.0, 128, 0.582,
                                                            0.978),
           _acc_pt("int8w4", 14408.0, 128, 0.60, 0.95)]
    assert best_designs(pts)["latency"] == "int4"          # no floor: the old pick
    floor = pick_floor(pts)
    assert floor == pytest.approx(0.968)                   # 1 point below the best
    b = best_designs(pts, floor=floor)
    assert b["latency"] == "int8" and b["utilization"] == "int8" and b["accuracy"] == "int8"
    assert best_designs(pts, floor=0.90)["latency"] == "int4"     # a given floor
    assert best_designs(pts, floor=0.95)["latency"] == "int8w4"   # ties: fewer LUTs, faster
    assert best_designs(pts, floor=0.975)["latency"] == "int8"
    assert pick_floor([{"feasible": True, "latency_us": 1.0}]) is None


def test_accuracy_floor_in_the_report():
    wls = parse_workloads("resnet18-c2", 4)
    ev = DesignEvaluator()
    res = run_search(Space(preset("tiny"), {"LOG_BLOCK": [2, 3]}), wls, ev, progress=False)
    small, big = sorted(res, key=lambda r: r.point.cfg.macs_per_cycle)
    for pr, a in ((small, 0.978), (big, 0.904)):     # the faster core is the worse one
        pr.result.accuracy = {"accuracy": a, "widths": f"w{a}", "float_accuracy": 0.98,
                              "samples": 500, "exact": True}
    rep = build_report(res, wls, ev)
    assert rep["best"]["latency"] == _fp(small)
    sel = rep["selection"]
    assert sel["accuracy_floor"] == pytest.approx(0.968) and sel["below_accuracy_floor"] == 1
    txt = format_table(rep)
    assert ("accuracy floor 96.8 % (the best feasible accuracy 97.8 % minus 1 point): "
            "designs below it are not picked (best accuracy aside); 1 feasible point(s) "
            "below it") in txt
    rep = build_report(res, wls, ev, accuracy_floor=0.90)
    assert rep["best"]["latency"] == _fp(big) and "accuracy floor 90.0 % (given)" in \
        format_table(rep)


# ------------------------------------------------------------ CLI
def test_cli_accuracy_floor_needs_accuracy():
    r = CliRunner().invoke(main, ["dse", "run", "--accuracy-floor", "97", "--no-progress"])
    assert r.exit_code == 2
    assert r.stderr.strip() == ("error: --accuracy-floor needs --accuracy (e.g. --accuracy "
                                "digits --accuracy-floor 97)")


def test_cli_all_invalid_space_is_an_error(tmp_path):
    (tmp_path / "s.json").write_text(json.dumps(
        {"base": "tiny", "axes": {"LOG_UOP_DEPTH": [40, 41]}}))
    r = CliRunner().invoke(main, ["dse", "run", "--space", str(tmp_path / "s.json"),
                                  "--workloads", "resnet18-c2", "--size", "4",
                                  "--no-progress"])
    assert r.exit_code == 2, r.output
    err = [ln for ln in r.stderr.strip().splitlines() if ln.startswith("error:")]
    assert len(err) == 1 and err[0].startswith(
        "error: no valid point: all 2 config(s) of the space are refused ("), r.stderr
    assert r.stdout == ""
