"""``vtaforge compile --explain`` (issue 23): one plan block per VTA conv / dense layer."""

from __future__ import annotations

from click.testing import CliRunner

from vtaforge.cli import main
from vtaforge.compiler.models import DIGITS_ONNX


def test_compile_explain_prints_one_block_per_conv_layer(tmp_path):
    out = tmp_path / "d.vtapkg"
    r = CliRunner().invoke(main, ["compile", str(DIGITS_ONNX), "-o", str(out), "--explain"])
    assert r.exit_code == 0, r.output
    assert out.exists()
    text = r.output
    assert "conv plans (4 layer(s)):" in text
    blocks = [ln for ln in text.splitlines() if ln.startswith("conv '")]
    assert [b.split("'")[1] for b in blocks] == ["conv1", "conv2", "fc1", "fc2"]
    for key in ("  tiling: ", "  inputs: ", "  ACC: ", "  weights: ", "  last tile: "):
        assert text.count(key) == 4, key
    assert "(im2col on the host: 1x3x3 patches as 9 channels)" in text
    assert "per-channel requantize" in text          # fc1


def test_compile_without_explain_prints_no_plan(tmp_path):
    r = CliRunner().invoke(main, ["compile", str(DIGITS_ONNX), "-o", str(tmp_path / "d.vtapkg")])
    assert r.exit_code == 0, r.output
    assert "conv plans" not in r.output
