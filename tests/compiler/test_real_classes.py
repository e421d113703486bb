"""Structures of real pretrained networks that used to be refused (issue #21), as small
synthetic ONNX models; the oracle is onnxruntime on the float model.

* a standalone BatchNormalization on a large spatial tensor: its VTA lowering refuses the
  channel block ("does not fit half the accumulator"), so by default the node runs on the
  CPU with that reason in the placement table (CLI and API alike);
* a Mul by 0.5 and a Div by 2.0 (magika's activation, YOLO heads): a power-of-two scaling
  that the quantizer requantizes to the calibrated output exp.
"""

from __future__ import annotations

import numpy as np
from click.testing import CliRunner
from onnx import helper

from vtaforge.cli import main
from vtaforge.compiler.compile import compile_model
from vtaforge.runtime.executor import Executor
from vtaforge.runtime.fsim import FsimDevice

from _onnx_util import make_model, rand, run_ort


def _bn_model(h: int, w: int):
    """x [1,16,h,w] -> BatchNormalization -> Relu (no conv to fold the BN into)."""
    c = 16
    inits = {"s": (1 + rand(c, seed=1, scale=0.2)), "b": rand(c, seed=2, scale=0.1),
             "m": rand(c, seed=3, scale=0.1), "v": (1 + np.abs(rand(c, seed=4, scale=0.2)))}
    nodes = [helper.make_node("BatchNormalization", ["x", "s", "b", "m", "v"], ["t"]),
             helper.make_node("Relu", ["t"], ["y"])]
    return make_model(nodes, [("x", [1, c, h, w])], [("y", [1, c, h, w])], inits)


def _run(cm, x):
    return Executor(cm, FsimDevice(cm.config)).run(x)[cm.outputs[0]]


def test_lowering_failure_falls_back_to_cpu_by_default():
    m = _bn_model(496, 368)
    x = np.abs(rand(1, 16, 496, 368, seed=5))
    cm = compile_model(m, x, "pynq")
    table = cm.placement_table()
    assert "VTA lowering failed" in table, table
    y = _run(cm, x)
    ref = run_ort(m, {"x": x})[0]
    # int8 activations: within two output steps of the float result
    assert np.abs(y - ref).max() <= 0.05 * np.abs(ref).max() + 1e-6, np.abs(y - ref).max()


def test_cli_runs_a_model_whose_lowering_fails(tmp_path):
    m = _bn_model(496, 368)
    p = tmp_path / "bn.onnx"
    p.write_bytes(m.SerializeToString())
    x = np.abs(rand(1, 16, 496, 368, seed=6))
    np.save(tmp_path / "x.npy", x)
    r = CliRunner().invoke(main, ["run", "--model", str(p), "--input", str(tmp_path / "x.npy"),
                                  "--output", str(tmp_path / "y.npy")])
    assert r.exit_code == 0, r.output
    assert "VTA lowering failed" in r.output
    y = np.load(tmp_path / "y.npy")
    ref = run_ort(m, {"x": x})[0]
    assert np.abs(y - ref).max() <= 0.05 * np.abs(ref).max() + 1e-6


def _scale_model(op: str, c: float):
    """x -> Conv 1x1 -> (Mul c | Div c) -> Relu."""
    inits = {"w": rand(16, 8, 1, 1, seed=7, scale=0.3), "k": np.array(c, np.float32)}
    nodes = [helper.make_node("Conv", ["x", "w"], ["t"]),
             helper.make_node(op, ["t", "k"], ["u"]),
             helper.make_node("Relu", ["u"], ["y"])]
    return make_model(nodes, [("x", ["N", 8, 6, 6])], [("y", ["N", 16, 6, 6])], inits)


def test_mul_half_and_div_two_quantize_and_match_ort():
    for op, c in (("Mul", 0.5), ("Div", 2.0), ("Mul", 4.0), ("Div", 0.25)):
        m = _scale_model(op, c)
        xc = rand(16, 8, 6, 6, seed=8)
        cm = compile_model(m, xc, "pynq")
        x = rand(2, 8, 6, 6, seed=9)
        y = _run(cm, x)
        ref = run_ort(m, {"x": x})[0]
        err = np.abs(y - ref).max()
        assert err <= 0.03 * np.abs(ref).max(), (op, c, err)
