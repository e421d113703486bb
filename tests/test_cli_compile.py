"""``vtaforge compile``'s default calibration (no ``--calibrate``) is what its help says:
the help is written from :data:`DEFAULT_CALIB_SAMPLES` / :data:`DEFAULT_CALIB_DIM`, and the
data compile_model gets has that many samples for a symbolic batch, a fixed batch of 1 and
a fixed batch of 3 (whole batches), with other symbolic dimensions at DEFAULT_CALIB_DIM."""

from __future__ import annotations

import onnx
import pytest
from click.testing import CliRunner
from onnx import TensorProto, helper

from vtaforge.cli import main
from vtaforge.commands import compile as compile_mod


def test_help_states_the_default_sample_count():
    r = CliRunner().invoke(main, ["compile", "--help"])
    text = " ".join(r.output.split())
    assert (f"default: {compile_mod.DEFAULT_CALIB_SAMPLES} uniform random samples in [0, 1)"
            in text), text
    assert f"other symbolic dimensions {compile_mod.DEFAULT_CALIB_DIM}" in text, text


@pytest.mark.parametrize("dims, want", [
    (["N", 4], [16, 4]), ([1, 4], [16, 4]), ([3, 4], [18, 4]), ([20, 4], [20, 4]),
    (["N", 2, "H", "W"], [16, 2, 16, 16]), ([], []),
])
def test_default_calibration_matches_the_help(tmp_path, monkeypatch, dims, want):
    assert compile_mod.DEFAULT_CALIB_SAMPLES == 16 and compile_mod.DEFAULT_CALIB_DIM == 16
    vi = helper.make_tensor_value_info
    g = helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "g",
                          [vi("x", TensorProto.FLOAT, dims)], [vi("y", TensorProto.FLOAT, dims)])
    model = tmp_path / "m.onnx"
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), str(model))
    seen = {}

    def fake_compile(m, calib, cfg, **kw):
        seen["shape"], seen["label"] = list(calib.shape), kw.get("calib_label")
        raise SystemExit(0)

    import vtaforge.compiler.compile as cc

    monkeypatch.setattr(cc, "compile_model", fake_compile)
    r = CliRunner().invoke(main, ["compile", str(model), "-o", str(tmp_path / "m.vtapkg")])
    assert r.exit_code == 0, r.output
    assert seen["shape"] == want
    assert seen["label"] == f"uniform random calibration data of shape {want}"
    assert ((tmp_path / "m.vtapkg").exists()) is False


@pytest.mark.parametrize("cmd", ["compile", "run", "profile"])
def test_a_model_without_inputs_is_named_as_such(tmp_path, cmd):
    """A model whose outputs are constants (no graph inputs): compile and profile said "a
    model with several inputs () needs --calibrate/--input DATA.npz ... named ", run said
    "model has 0 inputs: calibration must be a dict"."""
    import numpy as np
    from onnx import numpy_helper

    vi = helper.make_tensor_value_info
    c = helper.make_node("Constant", [], ["y"],
                         value=numpy_helper.from_array(np.ones((1, 4), np.float32)))
    g = helper.make_graph([c], "g", [], [vi("y", TensorProto.FLOAT, [1, 4])])
    model = tmp_path / "const.onnx"
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]), str(model))
    x = tmp_path / "x.npy"
    np.save(x, np.ones((1, 4), np.float32))
    argv = {"compile": ["compile", str(model), "-o", str(tmp_path / "m.vtapkg")],
            "run": ["run", "--model", str(model), "--input", str(x)],
            "profile": ["profile", str(model), "--target", "fsim"]}[cmd]
    r = CliRunner().invoke(main, argv)
    assert r.exit_code == 2, r.output
    assert r.stderr.strip() == (f"error: model '{model}' has no graph inputs (its outputs are "
                                f"constants): nothing to calibrate or feed; vtaforge compiles "
                                f"models that take an input"), r.stderr
