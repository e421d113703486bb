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
