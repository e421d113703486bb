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
from vtaforge.compiler.quantize import QuantConfig
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
    # max calibration, no error floor: the int8 add reaches its lowering (with the default
    # MSE calibration its clipped input makes the error floor keep it float first)
    cm = compile_model(m, x, "pynq", quant_config=QuantConfig(calibration="max"))
    table = cm.placement_table()
    assert "VTA lowering failed" in table, table
    # the table, its summary and the regions say where each node ran, not where the
    # partitioner first put it
    line = next(t for t in table.splitlines() if "VTA lowering failed" in t)
    assert line.lstrip().startswith("CPU"), line
    n_vta = sum(s.target == "vta" for s in cm.steps)
    assert cm.meta["summary"].startswith(f"{n_vta}/{len(cm.steps)} nodes on VTA"), cm.meta
    assert cm.meta["summary"] in table, table
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
    # the add goes to the CPU: its lowering fails, or (MSE calibration clips the largest
    # inputs) the error floor keeps it float first
    line = next(t for t in r.output.splitlines() if "BatchNormalization_0_shift" in t)
    assert "CPU" in line and ("VTA lowering failed" in line or "int8 error" in line), line
    y = np.load(tmp_path / "y.npy")
    ref = run_ort(m, {"x": x})[0]
    cos = float(np.sum(y * ref) / np.sqrt(np.sum(y * y) * np.sum(ref * ref)))
    assert cos >= 0.999 and np.abs(y - ref).mean() <= 0.01 * np.abs(ref).max(), cos


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


def _layernorm_model():
    """A transformer-style block (magika's shape): Conv1x1 -> LayerNorm over channels
    (ReduceMean, Sub, Mul, ReduceMean, Add eps, Sqrt, Div) -> Mul gamma -> Add beta -> Conv1x1."""
    c = 16
    inits = {"w1": rand(c, 8, 1, 1, seed=11, scale=0.4), "w2": rand(4, c, 1, 1, seed=12, scale=0.3),
             "eps": np.array(1e-5, np.float32), "g": (1 + rand(1, c, 1, 1, seed=13, scale=0.3)),
             "b": rand(1, c, 1, 1, seed=14, scale=0.1)}
    nodes = [helper.make_node("Conv", ["x", "w1"], ["h"]),
             helper.make_node("ReduceMean", ["h"], ["mu"], axes=[1], keepdims=1),
             helper.make_node("Sub", ["h", "mu"], ["d"]),
             helper.make_node("Mul", ["d", "d"], ["d2"]),
             helper.make_node("ReduceMean", ["d2"], ["var"], axes=[1], keepdims=1),
             helper.make_node("Add", ["var", "eps"], ["ve"]),
             helper.make_node("Sqrt", ["ve"], ["sd"]),
             helper.make_node("Div", ["d", "sd"], ["n"]),
             helper.make_node("Mul", ["n", "g"], ["ng"]),
             helper.make_node("Add", ["ng", "b"], ["nb"]),
             helper.make_node("Conv", ["nb", "w2"], ["y"])]
    return make_model(nodes, [("x", ["N", 8, 5, 5])], [("y", ["N", 4, 5, 5])], inits, opset=13)


def test_int8_forms_that_would_run_on_the_cpu_stay_float():
    """BYOC order: an int8 node the partitioner would place on the CPU (a multiply by a
    tensor or a non-power-of-two constant on a core without ALU_MUL) is kept float, so a
    LayerNorm between two VTA convs keeps its float accuracy; the convs stay on VTA."""
    m = _layernorm_model()
    cm = compile_model(m, rand(32, 8, 5, 5, seed=15), "pynq")
    by_op = {}
    for s in cm.steps:
        by_op.setdefault(s.op, []).append(s)
    assert [s.target for s in by_op["qconv2d"]] == ["vta", "vta"], cm.placement_table()
    assert "qmul" not in by_op, cm.placement_table()
    assert any("its int8 form runs on the CPU" in s.reason for s in by_op["mul"]), cm.placement_table()
    x = rand(4, 8, 5, 5, seed=16)
    y = _run(cm, x).astype(np.float64)
    ref = run_ort(m, {"x": x})[0].astype(np.float64)
    cos = float((y * ref).sum() / (np.linalg.norm(y) * np.linalg.norm(ref)))
    assert cos >= 0.995, cos


def test_layout_op_between_float_cpu_nodes_stays_float():
    """Sin -> Reshape -> Transpose -> Sin (ONNX nodes on the CPU with a layout chain between
    them, silero-vad's STFT/encoder pattern): the layout ops stay float, so no int8 round
    trip adds error (silero_vad_half: 0.4375 -> 0.1836 against onnxruntime's 0.1743)."""
    nodes = [helper.make_node("Sin", ["x"], ["a"]),
             helper.make_node("Reshape", ["a", "shp"], ["b"]),
             helper.make_node("Transpose", ["b"], ["c"], perm=[0, 2, 1]),
             helper.make_node("Sin", ["c"], ["y"])]
    m = make_model(nodes, [("x", [2, 4, 6])], [("y", [2, 6, 4])],
                   {"shp": np.array([2, 4, 6], np.int64)})
    x = rand(2, 4, 6, seed=21)
    cm = compile_model(m, rand(2, 4, 6, seed=22), "pynq")
    ops = [s.op for s in cm.steps]
    assert "quantize" not in ops and "dequantize" not in ops, cm.placement_table()
    np.testing.assert_allclose(_run(cm, x), run_ort(m, {"x": x})[0], rtol=1e-6, atol=1e-6)
