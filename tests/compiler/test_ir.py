"""Graph IR: types with symbolic dims, type inference, validator, dump."""

from __future__ import annotations

import numpy as np
import pytest

from vtaforge.compiler.errors import CompileError
from vtaforge.compiler.ir import Graph, Node, TensorType, dump, infer_types, validate


def _graph():
    g = Graph(name="g")
    g.inputs = ["x"]
    g.types["x"] = TensorType("float32", ("N", 1, 8, 8))
    g.add_constant("w", np.zeros((16, 1, 3, 3), np.float32))
    g.add_constant("fw", np.zeros((10, 16 * 4 * 4), np.float32))
    conv = {"kernel": (3, 3), "strides": (1, 1), "pads": (1, 1, 1, 1), "groups": 1, "act": "relu",
            "act_min": None, "act_max": None}
    g.nodes = [
        Node("c", "conv2d", ["x", "w"], ["y"], conv),
        Node("p", "max_pool", ["y"], ["z"], {"kernel": (2, 2), "strides": (2, 2), "pads": (0, 0, 0, 0)}),
        Node("f", "flatten", ["z"], ["flat"], {"axis": 1}),
        Node("d", "dense", ["flat", "fw"], ["out"], {"act": "none"}),
    ]
    g.outputs = ["out"]
    return infer_types(g)


def test_symbolic_batch_flows_through_inference():
    g = validate(_graph())
    assert g.types["y"] == TensorType("float32", ("N", 16, 8, 8))
    assert g.types["z"].shape == ("N", 16, 4, 4)
    assert g.types["flat"].shape == ("N", 256)
    assert g.types["out"].shape == ("N", 10)


@pytest.mark.parametrize("target,expected", [((-1, 256), ("N", 256)), ((0, -1), ("N", 256)),
                                             ((0, 16, 16), ("N", 16, 16))])
def test_reshape_keeps_symbolic_batch(target, expected):
    g = _graph()
    g.nodes[2] = Node("f", "reshape", ["z"], ["flat"], {"shape": target})
    g.nodes = g.nodes[:3]
    g.outputs = ["flat"]
    assert infer_types(g).types["flat"].shape == expected


def test_validator_catches_bad_graphs():
    g = _graph()
    g.types["y"] = TensorType("float32", ("N", 15, 8, 8))
    with pytest.raises(CompileError, match=r"node 'c' \(conv2d\): stored type"):
        validate(g)
    g = _graph()
    g.nodes[1], g.nodes[0] = g.nodes[0], g.nodes[1]
    with pytest.raises(CompileError, match="not defined before use"):
        validate(g)
    g = _graph()
    g.nodes[1].outputs = ["y"]
    with pytest.raises(CompileError, match="written twice"):
        validate(g)
    g = _graph()
    g.nodes[0].op = "gelu"
    with pytest.raises(CompileError, match="unknown IR op"):
        validate(g)
    g = _graph()
    del g.nodes[0].attrs["groups"]
    with pytest.raises(CompileError, match="missing attribute 'groups'"):
        validate(g)


def test_shape_error_names_node():
    g = _graph()
    g.constants["fw"] = np.zeros((10, 100), np.float32)
    g.types["fw"] = TensorType("float32", (10, 100))
    with pytest.raises(CompileError, match=r"node 'd' \(dense\): inner dims differ"):
        infer_types(g)


def test_quantized_rules_checked():
    g = Graph(name="q", kind="quantized")
    g.inputs = ["x"]
    g.types["x"] = TensorType("int8", ("N", 4), -3)
    g.nodes = [Node("r", "qrequant", ["x"], ["y"], {"shift": 2, "round": 1, "mult": 1, "clip_lo": 0,
                                                     "clip_hi": 127, "exp_out": -1})]
    g.outputs = ["y"]
    infer_types(g)
    with pytest.raises(CompileError, match="round 1 does not match shift 2"):
        validate(g)
    g.nodes[0].attrs["round"] = 2
    validate(g)
    g.nodes[0].attrs["clip_hi"] = 200
    with pytest.raises(CompileError, match="outside the int8 range"):
        validate(g)


def test_dump_is_readable():
    text = dump(_graph())
    assert "input  %x: float32[N,1,8,8]" in text
    assert "%y: float32[N,16,8,8] = conv2d(%x, %w)" in text
    assert text.strip().endswith("return %out")
