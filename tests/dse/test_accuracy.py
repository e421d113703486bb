"""Accuracy as a DSE objective, and the width axis.

Oracles: the labels of the digits held-out set against argmax of the logits this test
computes itself (an fsim run of the model compiled here, and the onnxruntime float model);
the accumulator bound from numpy on the quantized weights.
"""

from __future__ import annotations

import csv

import numpy as np
import pytest
from click.testing import CliRunner

from vtaforge.cli import main
from vtaforge.compiler.compile import compile_model
from vtaforge.compiler.models import DIGITS_ONNX, load_digits_split
from vtaforge.dse.accuracy import AccuracyEvaluator, accuracy_key
from vtaforge.dse.evaluate import AccSafety, DesignEvaluator, DSEError, parse_workloads
from vtaforge.dse.report import build_report, format_table, write_csv
from vtaforge.dse.search import PointResult, SearchStats, mark_pareto, run_search
from vtaforge.dse.space import Point, Space, SpaceError, with_width_axis
from vtaforge.hw.config import preset
from vtaforge.runtime.executor import Executor
from vtaforge.runtime.fsim import FsimDevice

N = 64
TINY16 = preset("tiny").replace(LOG_INP_WIDTH=4, LOG_WGT_WIDTH=4, LOG_INP_BUFF_SIZE=13,
                                LOG_WGT_BUFF_SIZE=14)


def _accuracy_oracle(cfg):
    xtr, _, xte, yte = load_digits_split()
    cm = compile_model(str(DIGITS_ONNX), xtr, cfg)
    y = Executor(cm, FsimDevice(cfg)).run(xte[:N])[cm.outputs[0]]
    return float(np.mean(np.argmax(y, axis=1) == yte[:N]))


@pytest.mark.parametrize("cfg", [preset("tiny"), TINY16], ids=["int8", "int16"])
def test_measure_matches_an_fsim_run_and_labels(cfg):
    rec = AccuracyEvaluator("digits", samples=N).measure(cfg)
    assert "error" not in rec, rec
    assert rec["samples"] == N and rec["exact"] is True
    assert rec["accuracy"] == pytest.approx(_accuracy_oracle(cfg), abs=0)
    assert rec["accuracy"] >= 0.9 and 0.9 <= rec["float_accuracy"] <= 1.0
    assert rec["widths"] == ("i8w8a32" if cfg.INP_WIDTH == 8 else "i16w16a32")
    if cfg.INP_WIDTH == 16:     # pools: int16 cannot be ACC8-loaded, CPU
        assert rec["cpu_steps"] == ["pool1", "pool2"]
    else:
        assert rec["cpu_steps"] == []


def test_accuracy_evaluator_bad_input():
    with pytest.raises(DSEError, match=r"^unknown accuracy data set 'mnist'; allowed: digits$"):
        AccuracyEvaluator("mnist")
    with pytest.raises(DSEError, match="positive int"):
        AccuracyEvaluator("digits", samples=0)
    with pytest.raises(DSEError, match="unknown accuracy data set"):
        DesignEvaluator(accuracy="cifar")


def test_accuracy_key_ignores_shape():
    a = preset("tiny")
    assert accuracy_key(a) == accuracy_key(a.replace(LOG_BLOCK_IN=3, LOG_BLOCK_OUT=3))
    assert accuracy_key(a) != accuracy_key(TINY16)


def test_width_axis():
    sp = with_width_axis(Space(preset("tiny"), {"LOG_BLOCK": [2, 3]}), "8,16")
    assert sp.axes["LOG_WIDTH"] == [3, 4]
    cfgs = [p.cfg for p in sp.grid()]
    assert [(c.INP_WIDTH, c.WGT_WIDTH) for c in cfgs] == [(8, 8), (16, 16)] * 2
    # a depth axis keeps the depth: int16 doubles the bytes
    sd = with_width_axis(Space(preset("tiny"), {"LOG_INP_DEPTH": [9]}), [8, 16])
    c8, c16 = (p.cfg for p in sd.grid())
    assert c8.INP_DEPTH == c16.INP_DEPTH == 512
    assert c16.LOG_INP_BUFF_SIZE == c8.LOG_INP_BUFF_SIZE + 1
    with pytest.raises(SpaceError, match=r"give 8 and/or 16"):
        with_width_axis(sp, "4")
    with pytest.raises(SpaceError, match=r"give 8 and/or 16"):
        with_width_axis(Space(preset("tiny"), {}), "8,8")
    with pytest.raises(SpaceError, match="already has the width axis LOG_WIDTH"):
        with_width_axis(sp, "8")
    with pytest.raises(SpaceError, match="comma-separated integers"):
        with_width_axis(Space(preset("tiny"), {}), "8,x")


def test_acc_safety_for_int16_relies_on_the_weight_bound():
    wls = parse_workloads("digits", None)
    v = AccSafety().evaluate(TINY16, wls)
    w = v["workloads"]["digits"]
    # oracle: K = 16*9 = 144 worst-case int16 products need 2**30 * 144 > 2**31
    assert w["bits_needed"] == int(np.ceil(np.log2(144 * 2 ** 30 + 1))) + 1 > 32
    assert v["safe"] and w["proof"] == "weights"
    # and the compiled weights do satisfy the exact bound
    xtr, _, _, _ = load_digits_split()
    cm = compile_model(str(DIGITS_ONNX), xtr[:128], TINY16)
    q = cm.qgraph
    for n in q.nodes:
        if n.op in ("qconv2d", "qdense"):
            wq = q.constants[n.inputs[1]].astype(np.int64)
            b = q.constants[n.inputs[2]].astype(np.int64)
            assert np.abs(wq.reshape(wq.shape[0], -1)).sum(1).max() * 32768 + abs(b).max() \
                + n.attrs["round"] < 2 ** 31
    v8 = AccSafety().evaluate(preset("tiny").replace(LOG_INP_WIDTH=4, LOG_INP_BUFF_SIZE=13,
                                                     LOG_ACC_WIDTH=4, LOG_ACC_BUFF_SIZE=12), wls)
    assert not v8["safe"]               # 16-bit accumulators: no proof


def test_sweep_reports_accuracy_per_width(tmp_path):
    sp = with_width_axis(Space(preset("tiny"), {"LOG_BLOCK": [2]}), "8,16")
    wls = parse_workloads("digits", None)
    ev = DesignEvaluator(accuracy=AccuracyEvaluator("digits", samples=N))
    st = SearchStats()
    cache = tmp_path / "c.jsonl"
    res = run_search(sp, wls, ev, cache=cache, progress=False, stats=st)
    assert st.accuracy_runs == 2 and st.accuracy_cached == 0
    assert all(r.feasible for r in res), [r.verdict["reasons"] for r in res]
    rep = build_report(res, wls, ev)
    accs = {g["widths"]: g for g in rep["accuracy"]}
    assert set(accs) == {"i8w8a32", "i16w16a32"}
    assert all(g["exact"] and g["samples"] == N and g["fastest"] for g in accs.values())
    pts = {p["config"]["LOG_INP_WIDTH"]: p for p in rep["points"]}
    assert pts[4]["accuracy"] == accs["i16w16a32"]["accuracy"]
    assert pts[4]["workloads"]["digits"]["cpu_integer_ops"] == ["pool1", "pool2"]
    best = rep["best"]["accuracy"]
    assert best == max(rep["points"], key=lambda p: (p["accuracy"], -p["latency_us"]))[
        "fingerprint"]
    txt = format_table(rep)
    assert "acc%" in txt and "accuracy i16w16a32:" in txt and "best accuracy:" in txt
    write_csv(rep, tmp_path / "p.csv")
    rows = list(csv.DictReader((tmp_path / "p.csv").open()))
    assert {float(r["accuracy"]) for r in rows} == {g["accuracy"] for g in accs.values()}
    assert {r["param:LOG_WIDTH"] for r in rows} == {"3", "4"}
    # rerun on the cache: nothing is measured again
    st2 = SearchStats()
    res2 = run_search(sp, wls, ev, cache=cache, progress=False, stats=st2)
    assert st2.accuracy_runs == 0 and st2.accuracy_cached == 2 and all(r.cached for r in res2)


class _R:
    def __init__(self, a):
        self.accuracy = {"accuracy": a}


def test_pareto_with_accuracy_is_three_dimensional():
    def pr(lat, util, acc):
        return PointResult(Point({}, preset("tiny")), _R(acc),
                           {"feasible": True, "latency_us": lat, "utilization": {"max": util}})
    prs = [pr(10, 0.5, 0.97), pr(12, 0.5, 0.98), pr(12, 0.6, 0.97)]
    # without accuracy the second would be dominated by the first
    assert mark_pareto(prs) == [0, 1]
    assert [r.pareto for r in prs] == [True, True, False]


def test_cli_bad_width_and_accuracy_one_line():
    r = CliRunner().invoke(main, ["dse", "run", "--widths", "12", "--workloads", "digits",
                                  "--no-progress"])
    assert r.exit_code == 2
    assert r.output.strip().splitlines() == [
        "error: --widths '12': give 8 and/or 16 (int8 / int16 operands), each once"]
    r = CliRunner().invoke(main, ["dse", "run", "--accuracy", "mnist", "--workloads", "digits",
                                  "--no-progress"])
    assert r.exit_code == 2
    assert r.output.strip().splitlines() == [
        "error: unknown accuracy data set 'mnist'; allowed: digits"]
