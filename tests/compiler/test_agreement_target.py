"""The output-agreement target of the adaptive error floor (``QuantConfig.agreement_target``,
``compile_model(agreement_target=)``, the CLI's ``--agreement-target``): a higher target keeps
more layers float on the CPU, the search's goal follows the target, bad values are refused
in one line."""

from __future__ import annotations

import numpy as np
import pytest
from click.testing import CliRunner

from vtaforge.cli import main
from vtaforge.compiler import QuantConfig
from vtaforge.compiler.compile import compile_model, search_floor
from vtaforge.compiler.errors import CompileError

from _onnx_util import rand, two_conv_model




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
    cm = compile_model(two_conv_model(), rand(4, 3, 8, 8, seed=13), "pynq",
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
    cm = compile_model(two_conv_model(), rand(4, 3, 8, 8, seed=13), "pynq", quant_config=qc,
                       agreement_target=0.995)
    ints = {n.name for n in cm.qgraph.nodes if n.op == "qconv2d"}
    assert names["all"][0] not in ints and names["all"][1] in ints


@pytest.mark.parametrize("bad", [0, 0.0, -0.5, 1.01, float("nan"), float("inf"), True, "0.99",
                                 np.float32(1.5), [0.99]])
def test_bad_targets_are_refused(bad):
    with pytest.raises(CompileError, match="agreement_target"):
        QuantConfig(agreement_target=bad)
    with pytest.raises(CompileError, match="agreement_target"):
        compile_model(two_conv_model(), rand(2, 3, 8, 8, seed=1), "pynq", agreement_target=bad)


def test_one_and_numpy_scalars_are_allowed():
    assert QuantConfig(agreement_target=1).agreement_target == 1.0
    for v in (np.float32(0.995), np.float64(0.995), np.int64(1)):
        t = QuantConfig(agreement_target=v).agreement_target
        assert type(t) is float and abs(t - float(v)) < 1e-7


def test_a_quant_config_without_the_adaptive_floor_is_refused():
    """The target is the adaptive floor's goal: with a QuantConfig that has no floor it
    would do nothing, so it is refused rather than ignored."""
    for qc in (QuantConfig(), QuantConfig(adaptive_floor=True),
               QuantConfig(min_layer_cosine=0.99)):
        with pytest.raises(CompileError, match="no adaptive floor"):
            compile_model(two_conv_model(), rand(2, 3, 8, 8, seed=1), "pynq", quant_config=qc,
                          agreement_target=0.995)


def _cli(args):
    r = CliRunner().invoke(main, args)
    return r.exit_code, r.stdout, r.stderr


def _one_error(code, err, *words):
    assert code != 0
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), err
    assert all(w in lines[0] for w in words), lines[0]


def test_cli_agreement_target(tmp_path, monkeypatch):
    """compile / run / profile take --agreement-target: out-of-range values (nan included)
    and a .vtapkg are refused in one line; a valid target reaches the compile of run (one
    input: compile_model; two: compile_dynamic) and of profile (the stubbed case keeps conv
    1 float)."""
    import onnx

    m = tmp_path / "m.onnx"
    onnx.save(two_conv_model(), m)
    x = tmp_path / "x.npy"
    np.save(x, rand(4, 3, 8, 8, seed=13))
    pkg = tmp_path / "m.vtapkg"
    for bad in ("0", "1.5", "abc", "nan", "-inf"):
        for args in (["compile", str(m), "-o", str(pkg)], ["run", "--model", str(m), "--input",
                                                           str(x)], ["profile", str(m)]):
            code, _, err = _cli(args + ["--agreement-target", bad])
            _one_error(code, err, "--agreement-target")
    assert not pkg.exists()
    code, out, err = _cli(["compile", str(m), "-o", str(pkg), "--calibrate", str(x)])
    assert code == 0, err
    code, _, err = _cli(["run", "--model", str(pkg), "--input", str(x),
                         "--agreement-target", "0.995"])
    _one_error(code, err, "--agreement-target", ".vtapkg")
    code, _, err = _cli(["profile", str(pkg), "--target", "fsim", "--agreement-target", "0.995"])
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
    # two inputs (compile_dynamic) and profile: the same placement
    x2 = tmp_path / "x2.npy"
    np.save(x2, rand(2, 3, 8, 8, seed=14))
    code, out, err = _cli(["run", "--model", str(m), "--input", str(x), "--input", str(x2),
                           "--calibrate", str(x), "--agreement-target", "0.995"])
    assert code == 0, err
    import vtaforge.compiler.dynamic as dyn
    seen = {}
    real = dyn.compile_dynamic

    def spy(*a, **kw):
        seen["target"] = kw.get("agreement_target")
        return real(*a, **kw)
    monkeypatch.setattr(dyn, "compile_dynamic", spy)
    code, out, err = _cli(["run", "--model", str(m), "--input", str(x), "--input", str(x2),
                           "--calibrate", str(x), "--agreement-target", "0.995"])
    assert code == 0 and seen["target"] == 0.995, err
    code, out, err = _cli(["profile", str(m), "--target", "fsim", "--calibrate", str(x),
                           "--agreement-target", "0.995"])
    assert code == 0, err
    prow = {n: next(ln for ln in out.splitlines() if ln.split()[:1] == [n]) for n in (c1, c2)}
    assert prow[c1].split()[1] == "CPU" and prow[c2].split()[1] == "VTA", out
