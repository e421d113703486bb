"""Small ONNX models shared by tests that run compiled layers on several backends (RTL
against fsim, fused against unfused launches).  Weights are seeded normal values; each
function returns an ``onnx.ModelProto`` (opset 17)."""

from __future__ import annotations

import numpy as np


def four_step_model(seed: int = 0):
    """input [N,8,9,9] -> Conv 3x3/2 pad 1 (16) -> Relu -> a; Conv 3x3/1 pad 1 (16) on a ->
    Add(a, .) -> Relu -> MaxPool 2x2/2 -> Flatten -> Gemm (10), symbolic batch ``N``:
    four VTA steps in a row (two convs, the add reading the first conv's output, the
    max-pool), a CPU flatten, a VTA dense."""
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(seed)

    def init(name, shape, scale):
        return numpy_helper.from_array((rng.standard_normal(shape) * scale).astype(np.float32),
                                       name)

    inits = [init("w1", (16, 8, 3, 3), 0.2), init("b1", (16,), 0.1),
             init("w2", (16, 16, 3, 3), 0.1), init("b2", (16,), 0.1),
             init("w3", (10, 64), 0.2), init("b3", (10,), 0.1)]
    nodes = [
        helper.make_node("Conv", ["input", "w1", "b1"], ["c1"], kernel_shape=[3, 3],
                         pads=[1, 1, 1, 1], strides=[2, 2]),
        helper.make_node("Relu", ["c1"], ["a"]),
        helper.make_node("Conv", ["a", "w2", "b2"], ["c2"], kernel_shape=[3, 3],
                         pads=[1, 1, 1, 1], strides=[1, 1]),
        helper.make_node("Add", ["a", "c2"], ["s"]),
        helper.make_node("Relu", ["s"], ["r"]),
        helper.make_node("MaxPool", ["r"], ["p"], kernel_shape=[2, 2], strides=[2, 2]),
        helper.make_node("Flatten", ["p"], ["f"], axis=1),
        helper.make_node("Gemm", ["f", "w3", "b3"], ["logits"], transB=1),
    ]
    g = helper.make_graph(
        nodes, "four_steps",
        [helper.make_tensor_value_info("input", TensorProto.FLOAT, ["N", 8, 9, 9])],
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["N", 10])], inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    return m


def resnet_kinds_model(seed: int = 0):
    """input [1,32,24,24] -> Conv 3x3 pad 1 (32) -> Relu -> a; MaxPool 3x3/2 pad 1 -> p;
    Conv 1x1/1 (32) on p -> Add(p, .) -> Relu -> Conv 1x1/2 (64) -> Relu -> Flatten -> Gemm
    (10): the layer kinds of ResNet-18 at a small size, batch 1."""
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(seed)

    def init(name, shape, scale):
        return numpy_helper.from_array((rng.standard_normal(shape) * scale).astype(np.float32),
                                       name)

    inits = [init("w1", (32, 32, 3, 3), 0.1), init("b1", (32,), 0.1),
             init("w2", (32, 32, 1, 1), 0.2), init("b2", (32,), 0.1),
             init("w3", (64, 32, 1, 1), 0.2), init("b3", (64,), 0.1),
             init("w4", (10, 64 * 36), 0.05), init("b4", (10,), 0.1)]
    nodes = [
        helper.make_node("Conv", ["input", "w1", "b1"], ["c1"], kernel_shape=[3, 3],
                         pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c1"], ["a"]),
        helper.make_node("MaxPool", ["a"], ["p"], kernel_shape=[3, 3], strides=[2, 2],
                         pads=[1, 1, 1, 1]),
        helper.make_node("Conv", ["p", "w2", "b2"], ["c2"], kernel_shape=[1, 1]),
        helper.make_node("Add", ["p", "c2"], ["s"]),
        helper.make_node("Relu", ["s"], ["r"]),
        helper.make_node("Conv", ["r", "w3", "b3"], ["c3"], kernel_shape=[1, 1],
                         strides=[2, 2]),
        helper.make_node("Relu", ["c3"], ["r3"]),
        helper.make_node("Flatten", ["r3"], ["f"], axis=1),
        helper.make_node("Gemm", ["f", "w4", "b4"], ["logits"], transB=1),
    ]
    g = helper.make_graph(
        nodes, "resnet_kinds",
        [helper.make_tensor_value_info("input", TensorProto.FLOAT, [1, 32, 24, 24])],
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT, [1, 10])], inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    return m
