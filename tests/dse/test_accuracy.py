"""Accuracy as a DSE objective, and the width axis.

Oracles: the labels of the digits held-out set against argmax of the logits this test
computes itself (an fsim run of the model compiled here, and the onnxruntime float model);
the accumulator bound from numpy on the quantized weights.  A user's model (``--accuracy
MODEL.onnx:DATA.npz``): a small MLP built here with onnx.helper, its labels the argmax of
numpy float logits on inputs whose top-two logit margin is far above the quantization error,
then ``K`` labels deliberately wrong: the expected accuracy is exactly ``(N - K) / N`` by
construction, float and on fsim, int8 and int16.
"""

from __future__ import annotations

import csv

import numpy as np
import pytest
from click.testing import CliRunner

from vtaforge.cli import main
from vtaforge.compiler.compile import compile_model
from vtaforge.compiler.models import DIGITS_ONNX, load_digits_split
from vtaforge.dse.accuracy import AccuracyEvaluator, accuracy_key, width_label
from vtaforge.dse.evaluate import DesignEvaluator
from vtaforge.dse.performance import AccSafety
from vtaforge.dse.result import DSEError
from vtaforge.dse.workloads import parse_workloads
from vtaforge.dse.report import build_report, format_table, write_csv
from vtaforge.dse.search import PointResult, SearchStats, mark_pareto, run_search
from vtaforge.dse.space import Point, Space, SpaceError, with_width_axis
from vtaforge.hw.config import preset
from vtaforge.runtime.executor import Executor
from vtaforge.runtime.fsim import FsimDevice

N = 64
TINY16 = preset("tiny").replace(LOG_INP_WIDTH=4, LOG_WGT_WIDTH=4, LOG_INP_BUFF_SIZE=13,
                                LOG_WGT_BUFF_SIZE=14)
#: int4 activations (and outputs), int8 weights
TINY_A4 = preset("tiny").replace(LOG_INP_WIDTH=2, LOG_INP_BUFF_SIZE=11)


def _accuracy_oracle(cfg):
    xtr, _, xte, yte = load_digits_split()
    cm = compile_model(str(DIGITS_ONNX), xtr, cfg)
    y = Executor(cm, FsimDevice(cfg)).run(xte[:N])[cm.outputs[0]]
    return float(np.mean(np.argmax(y, axis=1) == yte[:N]))


@pytest.mark.parametrize("cfg", [preset("tiny"), TINY16, TINY_A4], ids=["int8", "int16", "a4"])
def test_measure_matches_an_fsim_run_and_labels(cfg, tmp_path):
    rec = AccuracyEvaluator("digits", samples=N).measure(cfg)
    if cfg.INP_WIDTH == 8:      # the same model and data given as a user's: the same figures
        xtr, _, xte, yte = load_digits_split()
        np.savez(tmp_path / "digits.npz", x=xte[:N], y=yte[:N], calib=xtr)
        urec = AccuracyEvaluator(f"{DIGITS_ONNX}:{tmp_path / 'digits.npz'}").measure(cfg)
        for k in ("accuracy", "float_accuracy", "samples", "exact", "cpu_steps", "widths"):
            assert urec[k] == rec[k], k
        assert urec["calibration"] == "calib" and urec["dataset"] == "digits.onnx:digits.npz"
    assert "error" not in rec, rec
    assert rec["samples"] == N and rec["exact"] is True
    assert rec["accuracy"] == pytest.approx(_accuracy_oracle(cfg), abs=0)
    # (int4 activations lose a few points on digits: 91.0 % of the 500 held-out images)
    assert rec["accuracy"] >= (0.85 if cfg.INP_WIDTH == 4 else 0.9)
    assert 0.9 <= rec["float_accuracy"] <= 1.0
    assert rec["widths"] == {8: "i8w8a32", 16: "i16w16a32", 4: "i4w8a32"}[cfg.INP_WIDTH]
    if cfg.INP_WIDTH != 8:      # pools: int16 / int4 cannot be ACC8-loaded, CPU
        assert rec["cpu_steps"] == ["pool1", "pool2"]
    else:
        assert rec["cpu_steps"] == []


def test_accuracy_evaluator_bad_input():
    with pytest.raises(DSEError, match=r"^unknown accuracy data set 'mnist'; allowed: digits, or "
                                         r"MODEL\.onnx:DATA\.npz \(a model and its labelled inputs\)$"):
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
    # (the wording lists the allowed widths: 8 and 16, and more where dse/space.py has them)
    with pytest.raises(SpaceError, match=r"^--widths '4': give 8(,| and/or) 16"):
        with_width_axis(sp, "4")
    with pytest.raises(SpaceError, match=r"^--widths '8,8': give 8(,| and/or) 16.*each once"):
        with_width_axis(Space(preset("tiny"), {}), "8,8")
    with pytest.raises(SpaceError, match="already has the width axis LOG_WIDTH"):
        with_width_axis(sp, "8")
    # w4: int8 activations with int4 weights; a depth axis keeps the depth, half the bytes
    s4 = with_width_axis(Space(preset("tiny"), {"LOG_WGT_DEPTH": [8]}), "8,w4")
    assert s4.axes["LOG_WIDTH"] == [3, [3, 2]]
    c8, c4 = (p.cfg for p in s4.grid())
    assert (c4.INP_WIDTH, c4.WGT_WIDTH) == (8, 4) and c4.WGT_DEPTH == c8.WGT_DEPTH == 256
    assert c4.LOG_WGT_BUFF_SIZE == c8.LOG_WGT_BUFF_SIZE - 1
    with pytest.raises(SpaceError, match=r"^--widths '8,x'"):
        with_width_axis(Space(preset("tiny"), {}), "8,x")
    assert with_width_axis(Space(preset("tiny"), {}), "08, W4").axes["LOG_WIDTH"] == [3, [3, 2]]
    with pytest.raises(SpaceError, match=r"base sets LOG_INP_WIDTH 3 / LOG_WGT_WIDTH 2, which "
                                         r"--widths would replace"):
        with_width_axis(Space(preset("tiny").replace(LOG_WGT_WIDTH=2), {}), "8,16")


def test_width_axis_int4_activations():
    # a4: int4 activations (and outputs), int8 weights; a4w4: int4 both.  A depth axis keeps
    # the depth; an int4 element is half the bytes (two values per byte)
    sp = with_width_axis(Space(preset("tiny"), {"LOG_INP_DEPTH": [9], "LOG_WGT_DEPTH": [8]}),
                         "8,a4,a4w4")
    assert sp.axes["LOG_WIDTH"] == [3, [2, 3], [2, 2]]
    c8, a4, a4w4 = (p.cfg for p in sp.grid())
    assert [(c.INP_WIDTH, c.WGT_WIDTH) for c in (c8, a4, a4w4)] == [(8, 8), (4, 8), (4, 4)]
    assert c8.INP_DEPTH == a4.INP_DEPTH == a4w4.INP_DEPTH == 512
    assert c8.WGT_DEPTH == a4.WGT_DEPTH == a4w4.WGT_DEPTH == 256
    assert a4.LOG_INP_BUFF_SIZE == a4w4.LOG_INP_BUFF_SIZE == c8.LOG_INP_BUFF_SIZE - 1
    assert a4.LOG_WGT_BUFF_SIZE == c8.LOG_WGT_BUFF_SIZE == a4w4.LOG_WGT_BUFF_SIZE + 1
    # every value together, case and blanks ignored, in the order given
    sa = with_width_axis(Space(preset("tiny"), {}), " A4W4, 16,a4 ,w4,8")
    assert sa.axes["LOG_WIDTH"] == [[2, 2], 4, [2, 3], [3, 2], 3]
    assert all(p.valid for p in sa.grid())
    # bad values are named, with the new ones in the list of allowed values
    for bad in ("a8", "a4w8", "4", "a4,a4", "w4a4"):
        with pytest.raises(SpaceError, match=rf"^--widths '{bad}': give 8, 16, w4, a4 and/or "
                                             rf"a4w4 \(.*\), comma-separated, each once$"):
            with_width_axis(Space(preset("tiny"), {}), bad)
    with pytest.raises(SpaceError, match=r"base sets LOG_INP_WIDTH 2 / LOG_WGT_WIDTH 3, which "
                                         r"--widths would replace"):
        with_width_axis(Space(preset("tiny").replace(LOG_INP_WIDTH=2), {}), "8,a4")


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


def test_sweep_int4_activations(tmp_path):
    # --widths 8,a4,a4w4 on the digits CNN: each width compiled, run on the cycle model and
    # measured; the int4-activation points keep the pools on the CPU (ACC8 loads int8 only)
    sp = with_width_axis(Space(preset("tiny"), {"LOG_BLOCK": [2], "DSP_PACKING": [2]}),
                         "8,a4,a4w4")
    wls = parse_workloads("digits", None)
    ev = DesignEvaluator(accuracy=AccuracyEvaluator("digits", samples=N))
    res = run_search(sp, wls, ev, cache=tmp_path / "c.jsonl", progress=False)
    assert all(r.feasible for r in res), [r.verdict["reasons"] for r in res]
    rep = build_report(res, wls, ev)
    accs = {g["widths"]: g for g in rep["accuracy"]}
    assert set(accs) == {"i8w8a32", "i4w8a32", "i4w4a32"}
    assert all(g["exact"] and g["samples"] == N for g in accs.values())
    for p in rep["points"]:
        c = p["config"]
        wl = p["workloads"]["digits"]
        assert wl.get("cpu_integer_ops", []) == ([] if c["LOG_INP_WIDTH"] == 3
                                                 else ["pool1", "pool2"])
        assert p["resources"]["dsp"] == 8       # 16 MACs, two per DSP at every width
    assert "accuracy i4w4a32:" in format_table(rep)
    write_csv(rep, tmp_path / "p.csv")
    rows = list(csv.DictReader((tmp_path / "p.csv").open()))
    assert [r["param:LOG_WIDTH"] for r in rows] == ["3", "[2, 3]", "[2, 2]"]


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
    lines = r.output.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: --widths '12': give 8") \
        and lines[0].endswith("each once"), lines
    r = CliRunner().invoke(main, ["dse", "run", "--widths", "8,a2", "--workloads", "digits",
                                  "--no-progress"])
    assert r.exit_code == 2 and r.output.strip().splitlines() == [
        "error: --widths '8,a2': give 8, 16, w4, a4 and/or a4w4 (int8 / int16 operands; w4: "
        "int8 activations, int4 weights; a4: int4 activations, int8 weights; a4w4: int4 both), "
        "comma-separated, each once"]
    r = CliRunner().invoke(main, ["dse", "run", "--accuracy", "mnist", "--workloads", "digits",
                                  "--no-progress"])
    assert r.exit_code == 2
    assert r.output.strip().splitlines() == [
        "error: unknown accuracy data set 'mnist'; allowed: digits, or MODEL.onnx:DATA.npz "
        "(a model and its labelled inputs)"]


# ------------------------------------------------------------ a user's model and labelled data
NU, KU = 48, 6          # labelled inputs, and how many of their labels are made wrong


def _mlp(path, batch="N", inputs=("x",), out_shape=None):
    """A 16 -> 24 -> 10 MLP (Gemm, Relu, Gemm) written to ``path`` (``out_shape``: reshape
    the logits to it); returns its float weights."""
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(7)
    w1, w2 = rng.normal(0, 0.5, (16, 24)), rng.normal(0, 0.5, (24, 10))
    w1, w2 = w1.astype(np.float32), (w2 - w2.mean(0)).astype(np.float32)    # balanced classes
    nodes = [helper.make_node("Gemm", ["x", "w1"], ["h"]), helper.make_node("Relu", ["h"], ["r"]),
             helper.make_node("Gemm", ["r", "w2"], ["logits"])]
    if len(inputs) > 1:
        nodes.insert(0, helper.make_node("Add", ["x0", "x1"], ["x"]))
    inits = [numpy_helper.from_array(w1, "w1"), numpy_helper.from_array(w2, "w2")]
    if out_shape is not None:
        nodes[-1].output[0] = "flat"
        nodes.append(helper.make_node("Reshape", ["flat", "shape"], ["logits"]))
        inits.append(numpy_helper.from_array(np.array(out_shape, np.int64), "shape"))
    g = helper.make_graph(
        nodes, "mlp", [helper.make_tensor_value_info(i, TensorProto.FLOAT, [batch, 16])
                       for i in inputs],
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT,
                                       [batch, 10] if out_shape is None else None)], inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    path.write_bytes(m.SerializeToString())
    return w1, w2


def _labelled(w1, w2, n=NU, seed=0):
    """``(x [n, 16] float32, y [n] labels with the first KU wrong, calib [256, 16])``:
    inputs whose numpy float logits have a top-two margin over 10 % of the logit range,
    taken round-robin over the classes."""
    rng = np.random.default_rng(seed)
    pool = rng.normal(0, 1, (4000, 16)).astype(np.float32)
    lg = np.maximum(pool.astype(np.float64) @ w1, 0) @ w2
    s = np.sort(lg, 1)
    ok = (s[:, -1] - s[:, -2]) > 0.1 * (lg.max() - lg.min())
    cls = [list(np.flatnonzero(ok & (lg.argmax(1) == c))) for c in range(10)]
    pick = []
    while len(pick) < n:
        pick += [c.pop(0) for c in cls if c][:n - len(pick)]
    x, y = pool[pick], lg[pick].argmax(1)
    assert len(set(y.tolist())) >= 8
    y[:KU] = (y[:KU] + 1) % 10
    return x, y, pool[:256]


@pytest.fixture
def user_set(tmp_path):
    w = _mlp(tmp_path / "m.onnx")
    x, y, calib = _labelled(*w)
    np.savez(tmp_path / "d.npz", x=x, y=y)
    return tmp_path


@pytest.mark.parametrize("cfg", [preset("tiny"), TINY16], ids=["int8", "int16"])
def test_user_model_accuracy_by_construction(user_set, cfg):
    ev = AccuracyEvaluator(f"{user_set / 'm.onnx'}:{user_set / 'd.npz'}")
    rec = ev.measure(cfg)
    assert "error" not in rec, rec
    want = (NU - KU) / NU
    assert rec["accuracy"] == want and rec["float_accuracy"] == want
    assert rec["exact"] is True and rec["samples"] == NU and rec["vta_steps"] >= 2
    assert rec["calibration"] == f"x[:{NU}]" and rec["dataset"] == "m.onnx:d.npz"
    assert rec["widths"] == width_label(accuracy_key(cfg))


def test_user_model_fixed_batch_and_calib(tmp_path):
    w = _mlp(tmp_path / "m.onnx", batch=8)
    x, y, calib = _labelled(*w)
    np.savez(tmp_path / "d.npz", x=x, y=y, calib=calib)
    ev = AccuracyEvaluator(model=tmp_path / "m.onnx", data=tmp_path / "d.npz", samples=40)
    rec = ev.measure(preset("tiny"))
    assert "error" not in rec, rec
    assert rec["samples"] == 40 and rec["calibration"] == "calib" and rec["exact"] is True
    assert rec["accuracy"] == rec["float_accuracy"] == (40 - KU) / 40
    with pytest.raises(DSEError, match="multiple of the model's batch 8"):
        AccuracyEvaluator(model=tmp_path / "m.onnx", data=tmp_path / "d.npz", samples=41)


def test_user_cache_key_is_the_contents(user_set, tmp_path_factory):
    spec = f"{user_set / 'm.onnx'}:{user_set / 'd.npz'}"
    k1 = DesignEvaluator(accuracy=spec).accuracy_key(preset("tiny"))
    other = tmp_path_factory.mktemp("copy")     # same bytes elsewhere: the same key
    for f in ("m.onnx", "d.npz"):
        (other / f).write_bytes((user_set / f).read_bytes())
    assert DesignEvaluator(accuracy=f"{other / 'm.onnx'}:{other / 'd.npz'}").accuracy_key(
        preset("tiny")) == k1
    ev = AccuracyEvaluator(spec)
    assert ev.key["model_sha256"] == __import__("hashlib").sha256(
        (user_set / "m.onnx").read_bytes()).hexdigest()
    with np.load(user_set / "d.npz") as z:      # other labels, same path: another key
        x, y = z["x"], z["y"]
    np.savez(user_set / "d.npz", x=x, y=(y + 1) % 10)
    k2 = DesignEvaluator(accuracy=spec).accuracy_key(preset("tiny"))
    assert k2 != k1
    assert DesignEvaluator(accuracy=spec).accuracy_key(TINY16) != k2
    assert DesignEvaluator(accuracy="digits").accuracy_key(preset("tiny")) not in (k1, k2)


def test_cli_user_accuracy_sweep(user_set):
    (user_set / "s.json").write_text('{"base": "tiny", "axes": {"LOG_BLOCK": [2]}}')
    out = user_set / "r.json"
    r = CliRunner().invoke(main, ["dse", "run", "--space", str(user_set / "s.json"),
                                  "--widths", "8,16", "--workloads", "digits", "--accuracy",
                                  f"{user_set / 'm.onnx'}:{user_set / 'd.npz'}",
                                  "--no-progress", "-o", str(out)])
    assert r.exit_code == 0, r.output
    pct = f"{(NU - KU) / NU * 100:.1f} %"
    assert f"accuracy i8w8a32: {pct} on {NU} labelled" in r.output
    assert f"accuracy i16w16a32: {pct} on {NU} labelled" in r.output
    import json

    rep = json.loads(out.read_text())
    assert {g["widths"]: g["accuracy"] for g in rep["accuracy"]} == {
        "i8w8a32": (NU - KU) / NU, "i16w16a32": (NU - KU) / NU}
    assert all(g["exact"] for g in rep["accuracy"])


def _bad_sets(d):
    """``name -> (spec, expected error line)`` for the CLI's bad-input cases."""
    w = _mlp(d / "m.onnx")
    _mlp(d / "two.onnx", inputs=("x0", "x1"))
    _mlp(d / "per2.onnx", out_shape=[-1, 2, 5])
    x, y, _ = _labelled(*w)
    (d / "junk.onnx").write_bytes(b"this is not a model\n" * 4)
    np.savez(d / "noy.npz", x=x)
    np.savez(d / "shape.npz", x=x[:, :12], y=y)
    np.savez(d / "range.npz", x=x, y=np.where(np.arange(NU) == 3, 10, y))
    np.savez(d / "empty.npz", x=x[:0], y=y[:0])
    np.savez(d / "ylen.npz", x=x, y=y[:-1])
    np.savez(d / "yfloat.npz", x=x, y=y.astype(np.float32))
    np.savez(d / "ok.npz", x=x, y=y)
    np.savez(d / "huge.npz", x=x, y=np.where(np.arange(NU) == 3, np.uint64(2 ** 63 + 5),
                                             y.astype(np.uint64)))
    np.savez(d / "wide.npz", x=np.where(np.arange(NU)[:, None] == 1, 1e300, x.astype(np.float64)),
             y=y)
    np.save(d / "arr.npy", x)
    (d / "txt.npz").write_text("x,y\n")
    (d / "zip.npz").write_bytes((d / "ok.npz").read_bytes()[:200])     # truncated
    m, ok = d / "m.onnx", d / "ok.npz"
    return {
        "no model": (f"{d / 'nope.onnx'}:{ok}", f"accuracy model '{d / 'nope.onnx'}': no such file"),
        "no data": (f"{m}:{d / 'nope.npz'}", f"accuracy data '{d / 'nope.npz'}': no such file"),
        "not onnx": (f"{d / 'junk.onnx'}:{ok}", f"accuracy model '{d / 'junk.onnx'}': not an ONNX "
                     f"model (no graph with nodes could be read)"),
        "no y": (f"{m}:{d / 'noy.npz'}", f"accuracy data '{d / 'noy.npz'}' has no array 'y' (it "
                 f"has: x); it needs x (inputs [N, ...]) and y (integer labels [N])"),
        "shape": (f"{m}:{d / 'shape.npz'}", f"accuracy data '{d / 'shape.npz'}': x has shape "
                  f"[{NU}, 12]; the model's input is [N, 16] (samples first)"),
        "range": (f"{m}:{d / 'range.npz'}", f"accuracy data '{d / 'range.npz'}': labels y span "
                  f"0..10; the model's first output 'logits' has 10 classes, so labels must be "
                  f"in 0..9"),
        "huge labels": (f"{m}:{d / 'huge.npz'}", f"accuracy data '{d / 'huge.npz'}': labels y "
                        f"span 0..{2 ** 63 + 5}; the model's first output 'logits' has 10 "
                        f"classes, so labels must be in 0..9"),
        "beyond float32": (f"{m}:{d / 'wide.npz'}", f"accuracy data '{d / 'wide.npz'}': x holds "
                           f"values beyond float32's range (max |x| = 1e+300); the model takes "
                           f"float32"),
        "N=0": (f"{m}:{d / 'empty.npz'}", f"accuracy data '{d / 'empty.npz'}': x has no samples "
                f"(shape [0, 16])"),
        "y length": (f"{m}:{d / 'ylen.npz'}", f"accuracy data '{d / 'ylen.npz'}': y has shape "
                     f"[{NU - 1}]; expected [{NU}] (one label per input of x)"),
        "y float": (f"{m}:{d / 'yfloat.npz'}", f"accuracy data '{d / 'yfloat.npz'}': y has dtype "
                    f"float32; expected integer class labels"),
        "two inputs": (f"{d / 'two.onnx'}:{ok}", f"accuracy model '{d / 'two.onnx'}' has 2 inputs "
                       f"(x0, x1); accuracy needs a model with one input"),
        "2 per sample": (f"{d / 'per2.onnx'}:{ok}", f"accuracy model '{d / 'per2.onnx'}': first "
                         f"output 'logits' has shape [{NU}, 2, 5]; the argmax over its last axis "
                         f"gives 2 values per sample, accuracy needs one (e.g. [N, classes])"),
        "npy": (f"{m}:{d / 'arr.npy'}", f"accuracy data '{d / 'arr.npy'}': not a .npz archive (a "
                f"single .npy array); write it with numpy.savez(path, x=..., y=...)"),
        "not npz": (f"{m}:{d / 'txt.npz'}", f"accuracy data '{d / 'txt.npz'}': not a .npz archive "
                    f"(no zip header); write it with numpy.savez(path, x=..., y=...)"),
        "bad zip": (f"{m}:{d / 'zip.npz'}", None),
        "no colon": (str(m), f"--accuracy {str(m)!r}: give the model and its labelled data as "
                     f"MODEL.onnx:DATA.npz"),
    }


def test_cli_user_accuracy_bad_input_one_line(tmp_path):
    for name, (spec, want) in _bad_sets(tmp_path).items():
        r = CliRunner().invoke(main, ["dse", "run", "--accuracy", spec, "--workloads", "digits",
                                      "--no-progress"])
        lines = r.output.strip().splitlines()
        assert r.exit_code == 2 and len(lines) == 1 and lines[0].startswith("error: "), (name, r.output)
        if want is None:
            assert lines[0].startswith(f"error: accuracy data '{tmp_path / 'zip.npz'}': not a "
                                       f"readable .npz archive ("), (name, lines)
        else:
            assert lines[0] == f"error: {want}", name
