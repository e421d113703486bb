"""Small helpers for building one-op ONNX models in the compiler tests."""

from __future__ import annotations

import numpy as np
import onnxruntime as ort
from onnx import TensorProto, helper, numpy_helper


def make_model(nodes, inputs, outputs, inits=(), opset=17):
    """inputs/outputs: [(name, shape)] float32 (an output shape None is filled in by running
    onnxruntime once on zeros); inits: {name: ndarray}."""
    if any(s is None for _, s in outputs):
        tmp = _make(nodes, inputs, outputs, inits, opset)
        res = run_ort(tmp, {n: np.zeros(s, np.float32) for n, s in inputs})
        outputs = [(n, list(r.shape) if s is None else s) for (n, s), r in zip(outputs, res)]
    return _make(nodes, inputs, outputs, inits, opset)


def _make(nodes, inputs, outputs, inits, opset):
    g = helper.make_graph(
        nodes, "t",
        [helper.make_tensor_value_info(n, TensorProto.FLOAT, s) for n, s in inputs],
        [helper.make_tensor_value_info(n, TensorProto.FLOAT, s) for n, s in outputs],
        [numpy_helper.from_array(np.asarray(v), k) for k, v in dict(inits).items()])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])
    m.ir_version = 8
    return m


def run_ort(model, feeds):
    s = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return s.run(None, feeds)


def rand(*shape, seed=0, scale=1.0):
    return (np.random.default_rng(seed).normal(0, scale, shape)).astype(np.float32)


def vi(name, shape, t=TensorProto.FLOAT):
    """A value info of ``name`` (ONNX elem type ``t``, dims ints or symbolic names)."""
    return helper.make_tensor_value_info(name, t, shape)


def graph_model(nodes, ins, outs, inits=(), opset=17):
    """A model of ``nodes`` with value infos ``ins``/``outs`` (any dtype), ``inits``:
    {name: ndarray}, at ``opset``."""
    g = helper.make_graph(nodes, "t", ins, outs,
                          [numpy_helper.from_array(np.asarray(v), k) for k, v in dict(inits).items()])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)])
    m.ir_version = 8
    return m


def two_conv_model():
    """A two-conv net (3x3 conv 3->8, ReLU, 1x1 conv 8->8) on ``x [N, 3, 8, 8]``, seeded
    weights at scale 0.3: the smallest model with two measured layers (the adaptive error
    floor's tests)."""
    w1, w2 = rand(8, 3, 3, 3, seed=11, scale=0.3), rand(8, 8, 1, 1, seed=12, scale=0.3)
    return make_model([helper.make_node("Conv", ["x", "w1"], ["h"], pads=[1, 1, 1, 1]),
                       helper.make_node("Relu", ["h"], ["r"]),
                       helper.make_node("Conv", ["r", "w2"], ["y"])],
                      [("x", ["N", 3, 8, 8])], [("y", ["N", 8, 8, 8])], {"w1": w1, "w2": w2})
