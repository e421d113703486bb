"""compile_model checks calibration data given as ``{input name: ndarray}`` exactly like a
single ndarray (review): dtype, shape, empty, NaN/inf, missing or unknown inputs, and
mismatched sample counts are one CompileError naming the input."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import helper

from _onnx_util import make_model, rand
from vtaforge.compiler.compile import compile_model
from vtaforge.compiler.errors import CompileError


def _relu_model():
    return make_model([helper.make_node("Relu", ["x"], ["y"])], [("x", ["N", 16, 4, 4])],
                      [("y", ["N", 16, 4, 4])])


def _bad(x):
    return {"x": x}


@pytest.mark.parametrize("data,msg", [
    (_bad(np.full((2, 16, 4, 4), np.nan, np.float32)), r"'x' contains NaN or infinity"),
    (_bad(np.full((2, 16, 4, 4), np.inf, np.float32)), r"'x' contains NaN or infinity"),
    (_bad(np.zeros((0, 16, 4, 4), np.float32)), r"'x' has no samples"),
    (_bad(np.zeros((2, 8, 4, 4), np.float32)), r"'x' has shape \[2, 8, 4, 4\]"),
    (_bad(np.zeros((2, 16, 4, 4), np.int32)), r"'x' has dtype int32"),
    (_bad([[1.0]]), r"'x' must be an ndarray"),
    ({}, r"lacks model input\(s\) \['x'\]"),
    ({"x": rand(2, 16, 4, 4), "z": rand(2, 16, 4, 4)}, r"unknown input\(s\) \['z'\]"),
])
def test_dict_calibration_checked(data, msg):
    with pytest.raises(CompileError, match=msg):
        compile_model(_relu_model(), data, "pynq")


def test_dict_sample_counts_must_agree():
    m = make_model([helper.make_node("Add", ["a", "b"], ["y"])],
                   [("a", ["N", 16, 4, 4]), ("b", ["N", 16, 4, 4])], [("y", ["N", 16, 4, 4])])
    with pytest.raises(CompileError, match="different sample counts"):
        compile_model(m, {"a": rand(2, 16, 4, 4), "b": rand(3, 16, 4, 4)}, "pynq")
    # the same inputs with equal counts compile
    cm = compile_model(m, {"a": rand(2, 16, 4, 4), "b": rand(2, 16, 4, 4, seed=1)}, "pynq")
    assert cm.inputs == ["a", "b"]


def test_window_geometry_shared_by_conv_and_pool():
    """One helper computes the pad check, output size (ONNX floor formula, checked here by
    hand) and slot layouts for both the conv and the pooling lowering."""
    from vtaforge.compiler import lower_conv, lower_eltwise

    assert lower_eltwise.window_geometry is lower_conv.window_geometry
    g = lower_conv.window_geometry("t", (16, 7, 9), 32, (3, 3), (2, 2), (1, 1, 1, 1), 1, 16, 16)
    assert (g.ho, g.wo) == ((7 + 2 - 3) // 2 + 1, (9 + 2 - 3) // 2 + 1) == (4, 5)
    assert not g.pre_pad and g.pads == (1, 1, 1, 1) and g.xl.hw == (7, 9)
    g = lower_conv.window_geometry("t", (16, 7, 9), 32, (1, 1), (1, 1), (1, 0, 2, 0), 1, 16, 16)
    assert g.pre_pad and g.pads == (0, 0, 0, 0) and g.xl.hw == (7 + 1 + 2, 9)
    assert (g.ho, g.wo) == (10, 9)
    with pytest.raises(CompileError, match=r"t: pads \(16, 0, 0, 0\) exceed the LOAD pad"):
        lower_conv.window_geometry("t", (16, 7, 9), 32, (3, 3), (1, 1), (16, 0, 0, 0), 1, 16, 16)


def test_scalar_input_model_compiles_with_its_cpu_steps():
    """A rank-0 (scalar) input carries no batch: the array given is its one sample; the
    model compiles (its element-wise node on the CPU) and runs like onnxruntime."""
    from onnx import TensorProto

    from _onnx_util import run_ort
    from vtaforge.hw.config import preset
    from vtaforge.runtime.bundle import make_device
    from vtaforge.runtime.executor import Executor

    m = make_model([helper.make_node("Relu", ["x"], ["y"])], [("x", [])], [("y", [])])
    assert m.graph.input[0].type.tensor_type.elem_type == TensorProto.FLOAT
    cm = compile_model(m, np.array(0.5, np.float32), "pynq")
    assert all(s.target == "cpu" for s in cm.steps)
    ex = Executor(cm, make_device("fsim", preset("pynq")))
    for v in (-2.0, 3.0):
        x = np.array(v, np.float32)
        np.testing.assert_array_equal(ex.run({"x": x})["y"], run_ort(m, {"x": x})[0])
    with pytest.raises(CompileError, match=r"has shape \[1, 4\], expected a scalar"):
        compile_model(m, np.ones((1, 4), np.float32), "pynq")


@pytest.mark.parametrize("data", [np.ones((1, 4), np.float32), np.zeros((0, 4), np.float32)])
def test_zero_size_input_dim_is_refused_naming_it(data):
    """An input declared [0, 4] is a zero-size tensor: nothing to calibrate (onnxruntime
    also refuses any other size for it); one CompileError naming the input and the dim."""
    m = make_model([helper.make_node("Relu", ["x"], ["y"])], [("x", [0, 4])], [("y", [0, 4])])
    with pytest.raises(CompileError, match=r"model input 'x' is declared \[0, 4\]: dim 0 is 0"):
        compile_model(m, data, "pynq")


@pytest.mark.parametrize("scale,note", [(0.0, "is all zeros"), (1e30, "reaches 1e+30"),
                                        (1.0, None)])
def test_meaningless_calibration_range_is_noted(scale, note):
    """All-zero or absurdly large calibration data compiles (the model is valid) but the
    placement table says why its int8 ranges are meaningless; ordinary data adds no note."""
    x = np.full((2, 16, 4, 4), scale, np.float32)
    cm = compile_model(_relu_model(), x, "pynq")
    notes = [t for t in cm.placement_table().splitlines() if t.lstrip().startswith("note:")]
    if note is None:
        assert not notes, notes
    else:
        assert len(notes) == 1 and "calibration data for 'x'" in notes[0] and note in notes[0], notes


@pytest.mark.parametrize("calib", [np.ones((1, 4), np.float32), {}])
def test_model_without_inputs_is_one_clear_error(calib):
    """A model whose outputs are constants (no graph inputs) is refused with its cause,
    whatever calibration data comes with it (a dict used to raise IndexError)."""
    from onnx import TensorProto, numpy_helper

    c = numpy_helper.from_array(np.ones((1, 4), np.float32), "c")
    g = helper.make_graph([helper.make_node("Relu", ["c"], ["y"])], "g", [],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4])], [c])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    with pytest.raises(CompileError, match="the model has no inputs"):
        compile_model(m, calib, "pynq")
