"""Control flow (If, Loop, Scan) runs whole on onnxruntime as a CPU node, vs onnxruntime.

The models are built here (no download): an If whose condition compares a reduction of
the input with zero and whose branches differ (Relu of a conv result / Neg then a
multiply, both reading outer-scope values), a Loop accumulating an outer tensor, and a
Scan running a cumulative sum; each sits between ops that VTA takes.  ONNX shape
inference alone cannot type such a node taken out of its model (the branches read
values of the enclosing graph); the frontend captures those values as inputs of a
sub-graph model and types the outputs with onnxruntime.
"""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto as TP
from onnx import helper

from vtaforge.compiler.compile import compile_model
from vtaforge.runtime.executor import Executor
from vtaforge.runtime.fsim import FsimDevice

from _onnx_util import graph_model, run_ort, vi


_vi, _model = vi, graph_model


RNG = np.random.default_rng(0)
W = (0.3 * RNG.normal(size=(8, 4, 3, 3))).astype(np.float32)
SHAPE = [1, 8, 6, 6]


def _if_model(batch="N"):
    then = helper.make_graph([helper.make_node("Relu", ["c"], ["t"])], "then", [],
                             [_vi("t", [batch] + SHAPE[1:])])
    els = helper.make_graph([helper.make_node("Neg", ["c"], ["e0"]),
                             helper.make_node("Mul", ["e0", "k"], ["e"])], "else", [],
                            [_vi("e", [batch] + SHAPE[1:])])
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1]),
             helper.make_node("ReduceSum", ["x"], ["s"], keepdims=0),
             helper.make_node("Greater", ["s", "z"], ["cond"]),
             helper.make_node("If", ["cond"], ["b"], then_branch=then, else_branch=els),
             helper.make_node("Conv", ["b", "w2"], ["y"])]
    return _model(nodes, [_vi("x", [batch, 4, 6, 6])], [_vi("y", [batch, 2, 6, 6])],
                  {"w": W, "z": np.array(0.0, np.float32), "k": np.array(0.5, np.float32),
                   "w2": (0.3 * RNG.normal(size=(2, 8, 1, 1))).astype(np.float32)})


def _loop_model():
    """y = x + sum_{i<3} (x * 0.5): a Loop with a trip count, a loop-carried tensor and a
    body that reads the outer ``x``."""
    body = helper.make_graph(
        [helper.make_node("Identity", ["cond_in"], ["cond_out"]),
         helper.make_node("Mul", ["x", "h"], ["d"]),
         helper.make_node("Add", ["acc_in", "d"], ["acc_out"])],
        "body", [_vi("i", [], TP.INT64), _vi("cond_in", [], TP.BOOL), _vi("acc_in", [1, 4, 6, 6])],
        [_vi("cond_out", [], TP.BOOL), _vi("acc_out", [1, 4, 6, 6])])
    nodes = [helper.make_node("Relu", ["x0"], ["x"]),
             helper.make_node("Loop", ["n", "t", "x"], ["acc"], body=body),
             helper.make_node("Conv", ["acc", "w"], ["y"], pads=[1, 1, 1, 1])]
    return _model(nodes, [_vi("x0", [1, 4, 6, 6])], [_vi("y", [1, 8, 6, 6])],
                  {"n": np.array(3, np.int64), "t": np.array(True), "h": np.array(0.5, np.float32), "w": W})


def _scan_model():
    """A cumulative sum over the rows of a [1, 6, 4] tensor (Scan, opset 17)."""
    body = helper.make_graph(
        [helper.make_node("Add", ["s_in", "row"], ["s_out"]),
         helper.make_node("Identity", ["s_out"], ["o"])],
        "body", [_vi("s_in", [4]), _vi("row", [4])], [_vi("s_out", [4]), _vi("o", [4])])
    nodes = [helper.make_node("Reshape", ["x", "t"], ["x2"]),
             helper.make_node("Scan", ["zero", "x2"], ["last", "cum"], body=body, num_scan_inputs=1),
             helper.make_node("Reshape", ["cum", "t4"], ["y"])]
    return _model(nodes, [_vi("x", [1, 4, 6, 1])], [_vi("y", [1, 6, 4, 1]), _vi("last", [4])],
                  {"t": np.array([6, 4], np.int64), "t4": np.array([1, 6, 4, 1], np.int64),
                   "zero": np.zeros(4, np.float32)})


def _run(cm, x):
    ex = Executor(cm, FsimDevice(cm.config))
    try:
        return ex.run(x)
    finally:
        ex.close()


def _flow_steps(cm, op):
    return [p for p in cm.placement() if op in str(p)]


@pytest.mark.parametrize("sign", [1.0, -1.0], ids=["then", "else"])
def test_if_runs_on_onnxruntime(sign):
    m = _if_model()
    x = (sign * np.abs(RNG.normal(size=(2, 4, 6, 6)))).astype(np.float32)
    calib = np.concatenate([x, -x])         # both branches seen by calibration
    cm = compile_model(m, calib, "pynq")
    table = cm.placement_table()
    assert "control flow (If): runs whole on onnxruntime as a sub-graph model" in table, table
    assert any(s.target == "vta" for s in cm.steps), table
    want = run_ort(m, {"x": x})[0]
    got = _run(cm, x)[cm.outputs[0]]
    assert got.shape == want.shape
    cos = float(np.dot(got.ravel(), want.ravel()) / np.linalg.norm(got) / np.linalg.norm(want))
    assert cos > 0.95, cos       # int8 convs around it (measured 0.97 .. 1.0)


def test_if_static_batch_exact_on_float_path():
    """The If node itself is exact: its outputs on the host equal onnxruntime's."""
    from vtaforge.compiler import import_onnx, optimize, run_float

    m = _if_model(batch=1)
    for sign in (1.0, -1.0):
        x = (sign * np.abs(RNG.normal(size=(1, 4, 6, 6)))).astype(np.float32)
        fg = optimize(import_onnx(m))
        np.testing.assert_allclose(run_float(fg, {"x": x})[fg.outputs[0]], run_ort(m, {"x": x})[0],
                                   rtol=1e-5, atol=1e-5)


def test_loop_runs_on_onnxruntime():
    m = _loop_model()
    x = RNG.normal(size=(1, 4, 6, 6)).astype(np.float32)
    cm = compile_model(m, x, "pynq")
    assert "control flow (Loop)" in cm.placement_table(), cm.placement_table()
    want = run_ort(m, {"x0": x})[0]
    got = _run(cm, x)[cm.outputs[0]]
    assert got.shape == want.shape
    np.testing.assert_allclose(got, want, atol=0.1 * float(np.abs(want).max()))


def test_scan_runs_on_onnxruntime():
    m = _scan_model()
    x = RNG.normal(size=(1, 4, 6, 1)).astype(np.float32)
    cm = compile_model(m, x, "pynq")
    assert "control flow (Scan)" in cm.placement_table(), cm.placement_table()
    want = run_ort(m, {"x": x})
    out = _run(cm, x)
    for name, w in zip(cm.outputs, want):
        assert out[name].shape == w.shape
        np.testing.assert_allclose(out[name], w, atol=0.05)


def test_if_whose_branches_run_only_at_the_data_size():
    """An audio model's ``[batch, sequence]`` input and an If whose branches reshape the
    sequence to a fixed ``[8, 64]`` (silero-vad's decoder squeezes a dim that is 1 only at
    its real size): typing the If at placeholder sizes cannot run it, so the model is
    imported at the calibration data's shapes."""
    def branch(tag, red):
        return helper.make_graph([helper.make_node("Reshape", ["x", "shp"], [f"{tag}0"]),
                                  helper.make_node(red, [f"{tag}0"], [tag], axes=[2], keepdims=0)],
                                 tag, [], [_vi(tag, ["N", 8])])
    nodes = [helper.make_node("Equal", ["sr", "k16"], ["cond"]),
             helper.make_node("If", ["cond"], ["b"], then_branch=branch("t", "ReduceMax"),
                              else_branch=branch("e", "ReduceMin")),
             helper.make_node("Relu", ["b"], ["y"])]
    m = _model(nodes, [_vi("x", ["N", "S"]), _vi("sr", [], TP.INT64)], [_vi("y", ["N", 8])],
               {"k16": np.array(16000, np.int64), "shp": np.array([0, 8, 64], np.int64)},
               opset=13)
    calib = {"x": RNG.normal(size=(4, 512)).astype(np.float32), "sr": np.array(16000, np.int64)}
    cm = compile_model(m, calib, "pynq")
    for sr in (16000, 8000):
        feeds = {"x": RNG.normal(size=(1, 512)).astype(np.float32), "sr": np.array(sr, np.int64)}
        got = Executor(cm, FsimDevice(cm.config)).run(feeds)[cm.outputs[0]]
        # the Relu after the If is int8 (an output step of 2**-5)
        np.testing.assert_allclose(got, run_ort(m, feeds)[0], rtol=0, atol=0.05)
