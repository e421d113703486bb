"""The output-agreement target of the adaptive error floor (``QuantConfig.agreement_target``,
``compile_model(agreement_target=)``, the CLI's ``--agreement-target``): a higher target keeps
more layers float on the CPU, the search's goal follows the target, bad values are refused
in one line."""

from __future__ import annotations

import numpy as np
import pytest
from click.testing import CliRunner
from onnx import helper

from vtaforge.cli import main
from vtaforge.compiler import QuantConfig
from vtaforge.compiler.compile import compile_model, search_floor
from vtaforge.compiler.errors import CompileError

from _onnx_util import make_model, rand


def _two_conv_model():
    w1, w2 = rand(8, 3, 3, 3, seed=11, scale=0.3), rand(8, 8, 1, 1, seed=12, scale=0.3)
    return make_model([helper.make_node("Conv", ["x", "w1"], ["h"], pads=[1, 1, 1, 1]),
                       helper.make_node("Relu", ["h"], ["r"]),
                       helper.make_node("Conv", ["r", "w2"], ["y"])],
                      [("x", ["N", 3, 8, 8])], [("y", ["N", 8, 8, 8])], {"w1": w1, "w2": w2})


def test_search_floor_aims_at_the_given_target():
    """search_floor against a brute-force oracle at targets 0.99 and 0.995: the smallest k
    of worst layers kept real whose agreement reaches min(target, all-real - 0.002)."""
    rng = np.random.default_rng(5)
    errs = {f"n{i}": float(c) for i, c in enumerate(rng.uniform(0.99, 1.0, 30))}
    order = sorted(errs, key=errs.get)
    gain = dict(zip(order, rng.uniform(0.0002, 0.0008, 30)))

    def agreement(k):
        return 0.985 + sum(gain[n] for n in order[:k])

    def trial(thr):
        kept = [n for n in errs if errs[n] < thr]
        return agreement(len(kept)), len(kept)
    a_all = agreement(30)
    got = {}
    for target in (0.99, 0.995):
        goal = min(target, a_all - 0.002)
        want = next(k for k in range(31) if agreement(k) >= goal)
        got[target] = search_floor(errs, set(errs), 0.99, agreement(0), trial, target)
        assert got[target] == want, (target, got[target], want)
    assert got[0.995] > got[0.99]
    # outputs that meet the default target are left alone only by the default
    assert search_floor(errs, set(errs), 0.99, 0.992, trial) is None
    assert search_floor(errs, set(errs), 0.99, 0.992, trial, 0.995) is not None


def _stub(monkeypatch):
    """Stubbed measurements of the two convs: local cosines 0.993 / 0.997; the outputs
    agree 0.990 with both int8 (the default target is met), 0.996 with conv 1 float,
    0.9995 with both float.  Returns a dict filled with the convs' names."""
    import vtaforge.compiler.compile as comp

    names: dict = {}

    def fake_errors(fg, q, feeds):
        names.setdefault("all", [n.name for n in fg.nodes if n.op == "conv2d"])
        c1, c2 = names["all"]
        return {c1: 0.993, c2: 0.997}

    def fake_agreement(q, batches, fenvs):
        ints = {n.name for n in q.nodes if n.op == "qconv2d"}
        c1, c2 = names["all"]
        return 0.990 if c1 in ints else (0.996 if c2 in ints else 0.9995)
    monkeypatch.setattr(comp, "layer_errors", fake_errors)
    monkeypatch.setattr(comp, "output_agreement", fake_agreement)
    return names


@pytest.mark.parametrize("target, float_convs", [(None, 0), (0.995, 1), (0.999, 2)])
def test_a_higher_target_keeps_more_layers_float(monkeypatch, target, float_convs):
    """Default 0.99: both convs on VTA; 0.995: conv 1 (the worse) float, its reason naming
    its cosine; 0.999: both float (the goal is capped at all-float - 0.002 = 0.9975)."""
    names = _stub(monkeypatch)
    cm = compile_model(_two_conv_model(), rand(4, 3, 8, 8, seed=13), "pynq",
                       agreement_target=target)
    ints = {n.name for n in cm.qgraph.nodes if n.op == "qconv2d"}
    kept = [n for n in names["all"] if n not in ints]
    assert kept == names["all"][:float_convs], (target, kept)
    vta = {s.name for s in cm.steps if s.target == "vta"}
    assert all(n not in vta for n in kept)
    if kept:
        why = cm.qgraph.meta["quant_report"].fallbacks[kept[0]]
        assert "0.9930 <" in why, why


def test_the_target_overrides_a_given_quant_config(monkeypatch):
    names = _stub(monkeypatch)
    qc = QuantConfig(calibration="max", min_layer_cosine=0.99, adaptive_floor=True)
    cm = compile_model(_two_conv_model(), rand(4, 3, 8, 8, seed=13), "pynq", quant_config=qc,
                       agreement_target=0.995)
    ints = {n.name for n in cm.qgraph.nodes if n.op == "qconv2d"}
    assert names["all"][0] not in ints and names["all"][1] in ints


@pytest.mark.parametrize("bad", [0, 0.0, -0.5, 1.01, float("nan"), True, "0.99"])
def test_bad_targets_are_refused(bad):
    with pytest.raises(CompileError, match="agreement_target"):
        QuantConfig(agreement_target=bad)
    with pytest.raises(CompileError, match="agreement_target"):
        compile_model(_two_conv_model(), rand(2, 3, 8, 8, seed=1), "pynq", agreement_target=bad)


def test_one_is_allowed():
    assert QuantConfig(agreement_target=1).agreement_target == 1


def _cli(args):
    r = CliRunner().invoke(main, args)
    return r.exit_code, r.stdout, r.stderr


def _one_error(code, err, *words):
    assert code != 0
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), err
    assert all(w in lines[0] for w in words), lines[0]


def test_cli_agreement_target(tmp_path, monkeypatch):
    """compile / run take --agreement-target: out-of-range values and a .vtapkg are refused
    in one line; a valid target reaches the compile (the stubbed case keeps conv 1 float)."""
    import onnx

    m = tmp_path / "m.onnx"
    onnx.save(_two_conv_model(), m)
    x = tmp_path / "x.npy"
    np.save(x, rand(4, 3, 8, 8, seed=13))
    pkg = tmp_path / "m.vtapkg"
    for bad in ("0", "1.5", "abc"):
        code, _, err = _cli(["compile", str(m), "-o", str(pkg), "--agreement-target", bad])
        _one_error(code, err, "--agreement-target")
    assert not pkg.exists()
    code, out, err = _cli(["compile", str(m), "-o", str(pkg), "--calibrate", str(x)])
    assert code == 0, err
    code, _, err = _cli(["run", "--model", str(pkg), "--input", str(x),
                         "--agreement-target", "0.995"])
    _one_error(code, err, "--agreement-target", ".vtapkg")
    code, _, err = _cli(["run", "--agreement-target", "0.995"])
    _one_error(code, err, "--agreement-target", "--model")
    names = _stub(monkeypatch)
    code, out, err = _cli(["run", "--model", str(m), "--input", str(x),
                           "--agreement-target", "0.995"])
    assert code == 0, err
    c1, c2 = names["all"]
    rows = {n: next(ln for ln in out.splitlines() if f" {n} " in ln) for n in (c1, c2)}
    assert rows[c1].lstrip().startswith("CPU") and "0.9930" in rows[c1], out
    assert rows[c2].lstrip().startswith("VTA"), out
