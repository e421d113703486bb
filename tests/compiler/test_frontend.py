"""ONNX frontend: each supported op against onnxruntime (float), errors, symbolic batch."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import helper

from vtaforge.compiler import CompileError, import_onnx, optimize, run_float
from vtaforge.compiler.models import DIGITS_ONNX, load_digits_split

from _onnx_util import make_model, rand, run_ort

X = ("x", [2, 4, 9, 9])


def _conv(attrs, wshape, bias=True):
    ins = ["x", "w"] + (["b"] if bias else [])
    inits = {"w": rand(*wshape, seed=1, scale=0.3)}
    if bias:
        inits["b"] = rand(wshape[0], seed=2)
    return [helper.make_node("Conv", ins, ["y"], **attrs)], inits


def _case(name):
    """(nodes, inputs, out_shape_or_None, inits)."""
    if name == "conv_stride_asympad":
        n, i = _conv({"kernel_shape": [3, 2], "strides": [2, 1], "pads": [1, 0, 2, 1]}, (6, 4, 3, 2))
        return n, [X], i
    if name == "conv_same_upper":
        n, i = _conv({"auto_pad": "SAME_UPPER", "strides": [2, 2]}, (6, 4, 3, 3))
        return n, [X], i
    if name == "conv_group":
        n, i = _conv({"group": 2, "pads": [1, 1, 1, 1]}, (6, 2, 3, 3))
        return n, [X], i
    if name == "conv_depthwise":
        n, i = _conv({"group": 4, "pads": [1, 1, 1, 1], "strides": [2, 2]}, (4, 1, 3, 3), bias=False)
        return n, [X], i
    if name == "gemm_alpha_beta_transB0":
        return ([helper.make_node("Gemm", ["x", "w", "c"], ["y"], alpha=0.5, beta=2.0)],
                [("x", [3, 5])], {"w": rand(5, 7, seed=1), "c": rand(1, 7, seed=2)})
    if name == "matmul":
        return [helper.make_node("MatMul", ["x", "w"], ["y"])], [("x", [3, 5])], {"w": rand(5, 7, seed=1)}
    if name == "relu":
        return [helper.make_node("Relu", ["x"], ["y"])], [X], {}
    if name == "clip":
        return ([helper.make_node("Clip", ["x", "lo", "hi"], ["y"])], [X],
                {"lo": np.array(-0.5, np.float32), "hi": np.array(0.7, np.float32)})
    if name == "add_tensors":
        return [helper.make_node("Add", ["x", "x2"], ["y"])], [X, ("x2", [2, 4, 9, 9])], {}
    if name == "add_const":
        return [helper.make_node("Add", ["c", "x"], ["y"])], [X], {"c": rand(4, 1, 1, seed=3)}
    if name == "mul_const":
        return [helper.make_node("Mul", ["x", "c"], ["y"])], [X], {"c": rand(4, 1, 1, seed=3)}
    if name == "conv_bn":
        n, i = _conv({"pads": [1, 1, 1, 1]}, (6, 4, 3, 3))
        n[0].output[0] = "t"
        n.append(helper.make_node("BatchNormalization", ["t", "g", "be", "m", "v"], ["y"], epsilon=1e-3))
        i.update(g=rand(6, seed=4), be=rand(6, seed=5), m=rand(6, seed=6),
                 v=np.abs(rand(6, seed=7)) + 0.5)
        return n, [X], i
    if name == "bn_alone":
        return ([helper.make_node("BatchNormalization", ["x", "g", "be", "m", "v"], ["y"])], [X],
                {"g": rand(4, seed=4), "be": rand(4, seed=5), "m": rand(4, seed=6),
                 "v": np.abs(rand(4, seed=7)) + 0.5})
    if name == "maxpool_pad":
        return ([helper.make_node("MaxPool", ["x"], ["y"], kernel_shape=[3, 3], strides=[2, 2],
                                  pads=[1, 1, 1, 1])], [X], {})
    if name == "avgpool_exclude_pad":
        return ([helper.make_node("AveragePool", ["x"], ["y"], kernel_shape=[3, 3], strides=[2, 2],
                                  pads=[1, 1, 1, 1])], [X], {})
    if name == "avgpool_include_pad":
        return ([helper.make_node("AveragePool", ["x"], ["y"], kernel_shape=[2, 2], strides=[2, 2],
                                  pads=[1, 1, 0, 0], count_include_pad=1)], [X], {})
    if name == "global_avgpool":
        return [helper.make_node("GlobalAveragePool", ["x"], ["y"])], [X], {}
    if name == "flatten":
        return [helper.make_node("Flatten", ["x"], ["y"], axis=1)], [X], {}
    if name == "reshape":
        return ([helper.make_node("Reshape", ["x", "s"], ["y"])], [X],
                {"s": np.array([0, -1, 9], np.int64)})
    if name == "transpose":
        return [helper.make_node("Transpose", ["x"], ["y"], perm=[0, 2, 3, 1])], [X], {}
    if name == "concat":
        return [helper.make_node("Concat", ["x", "x2"], ["y"], axis=1)], [X, ("x2", [2, 3, 9, 9])], {}
    if name == "softmax":
        return [helper.make_node("Softmax", ["x"], ["y"], axis=1)], [("x", [3, 10])], {}
    if name == "qdq_pair":
        return ([helper.make_node("QuantizeLinear", ["x", "s", "z"], ["q"]),
                 helper.make_node("DequantizeLinear", ["q", "s", "z"], ["y"])], [X],
                {"s": np.array(0.05, np.float32), "z": np.array(0, np.int8)})
    raise KeyError(name)


CASES = ["conv_stride_asympad", "conv_same_upper", "conv_group", "conv_depthwise",
         "gemm_alpha_beta_transB0", "matmul", "relu", "clip", "add_tensors", "add_const", "mul_const",
         "conv_bn", "bn_alone", "maxpool_pad", "avgpool_exclude_pad", "avgpool_include_pad",
         "global_avgpool", "flatten", "reshape", "transpose", "concat", "softmax", "qdq_pair"]


@pytest.mark.parametrize("case", CASES)
def test_op_matches_onnxruntime(case):
    nodes, inputs, inits = _case(case)
    m = make_model(nodes, inputs, [("y", None)], inits)
    feeds = {n: rand(*s, seed=10 + k) for k, (n, s) in enumerate(inputs)}
    (want,) = run_ort(m, feeds)
    g = import_onnx(m)
    for graph in (g, optimize(g)):
        got = run_float(graph, feeds)["y"]
        assert got.shape == want.shape
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)
    if case == "conv_bn":
        assert [n.op for n in optimize(g).nodes] == ["conv2d"]


def test_digits_float_matches_onnxruntime_and_keeps_symbolic_batch():
    g = import_onnx(DIGITS_ONNX)
    assert g.types["input"].shape == ("N", 1, 8, 8)
    assert g.types["logits"].shape == ("N", 10)
    _, _, xte, _ = load_digits_split()
    (want,) = run_ort(__import__("onnx").load(str(DIGITS_ONNX)), {"input": xte[:64]})
    np.testing.assert_allclose(run_float(optimize(g), {"input": xte[:64]})["logits"], want,
                               rtol=1e-4, atol=1e-4)


def test_malformed_bytes():
    with pytest.raises(CompileError, match="malformed ONNX model") as e:
        import_onnx(b"\x08\x07this is not a protobuf\xff\xff")
    assert "\n" not in str(e.value)


def test_op_without_ir_conversion_is_kept_as_an_onnx_node():
    """BYOC: an op with no IR conversion is not refused; it stays an ONNX node (CPU)."""
    m = make_model([helper.make_node("Sin", ["x"], ["y"], name="my_sin")], [X], [("y", None)])
    g = import_onnx(m)
    (n,) = g.nodes
    assert (n.name, n.op, n.attrs["op_type"]) == ("my_sin", "onnx", "Sin")
    assert n.attrs["why"] == "no IR conversion for ONNX op Sin"
    assert g.types["y"].shape == (2, 4, 9, 9)


def test_invalid_node_names_node_op_reason():
    """A node ONNX itself cannot type (an Add whose shapes do not broadcast) is refused with
    one line naming the node; it is not kept."""
    m = make_model([helper.make_node("Add", ["x", "c"], ["y"], name="ad")],
                   [X], [("y", [2, 4, 9, 9])], {"c": rand(3)})
    with pytest.raises(CompileError) as e:
        import_onnx(m)
    assert str(e.value).startswith("node 'ad' (Add): shapes [2, 4, 9, 9] and [3] do not broadcast")
    assert "\n" not in str(e.value)


def test_shape_mismatch_names_node_op_reason():
    m = make_model([helper.make_node("Flatten", ["x"], ["f"], name="flat"),
                    helper.make_node("Gemm", ["f", "w"], ["y"], name="fc", transB=1)],
                   [X], [("y", [2, 10])], {"w": rand(10, 100)})
    with pytest.raises(CompileError, match=r"^node 'fc' \(Gemm\): inner dims differ"):
        import_onnx(m)


def test_declared_output_shape_that_does_not_check_out_takes_the_computed_one():
    """onnxruntime runs such a model and only warns (ddddocr's OCR models declare [1, ?] for
    a [T, 1, 8210] output): the computed shape is used and noted."""
    m = make_model([helper.make_node("Relu", ["x"], ["y"], name="r")], [X], [("y", [2, 4, 9, 8])])
    g = import_onnx(m)
    shape = tuple(X[1])
    assert g.types["y"].shape == shape
    assert any(f"'y' of node 'r' is declared [2, 4, 9, 8] but computes {list(shape)}" in t
               for t in g.meta["notes"]), g.meta
    (want,) = run_ort(m, {"x": rand(*shape, seed=3)})
    assert want.shape == shape


def test_bad_conv_attribute_is_refused():
    """auto_pad FOO: onnxruntime refuses the model; the import refuses it, naming the node
    (ONNX's shape inference reads it as NOTSET, so the declared shape does not check out)."""
    n, i = _conv({"auto_pad": "FOO"}, (6, 4, 3, 3))
    n[0].name = "cv"
    with pytest.raises(CompileError, match=r"node 'cv' \(Conv\): "):
        import_onnx(make_model(n, [X], [("y", [2, 6, 5, 5])], i))


def test_dilated_conv_is_a_conv_with_a_zero_expanded_kernel():
    """Dilation 2 of a 3x3 kernel = a 5x5 kernel with zeros between the taps (exact, and it
    runs on VTA like any conv)."""
    n, i = _conv({"dilations": [2, 2]}, (6, 4, 3, 3))
    n[0].name = "cv"
    m = make_model(n, [X], [("y", [2, 6, 5, 5])], i)
    g = import_onnx(m)
    (node,) = g.nodes
    assert node.op == "conv2d" and node.attrs["kernel"] == (5, 5)
    w = g.constants[node.inputs[1]]
    np.testing.assert_array_equal(w[:, :, ::2, ::2], i["w"])
    assert not w[:, :, 1::2, :].any() and not w[:, :, :, 1::2].any()
    x = rand(2, 4, 9, 9, seed=3)
    np.testing.assert_allclose(run_float(g, {"x": x})["y"], run_ort(m, {"x": x})[0], rtol=1e-4, atol=1e-4)


def test_dequantize_of_int8_weight_keeps_scale_hint():
    w = np.arange(-8, 10, dtype=np.int8).reshape(2, 9)
    m = make_model([helper.make_node("DequantizeLinear", ["wq", "s"], ["w"]),
                    helper.make_node("Gemm", ["x", "w"], ["y"], transB=1)], [("x", [3, 9])], [("y", None)],
                   {"wq": w, "s": np.array(0.25, np.float32)})
    g = import_onnx(m)
    x = rand(3, 9)
    np.testing.assert_allclose(run_float(g, {"x": x})["y"], run_ort(m, {"x": x})[0], rtol=1e-5, atol=1e-5)
    assert 0.25 in g.meta["scale_hints"].values()


@pytest.mark.parametrize("axis", [5, 2, -3])
def test_softmax_axis_out_of_range_is_an_invalid_model(axis):
    """Softmax axis outside [-rank, rank - 1]: onnxruntime refuses the model; the import
    refuses it as an invalid model (no CPU fallback), naming node, op and axis."""
    import onnxruntime as ort

    m = make_model([helper.make_node("Softmax", ["x"], ["y"], axis=axis, name="sm")],
                   [("x", [1, 4])], [("y", [1, 4])])
    with pytest.raises(Exception, match="axis"):
        ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"])
    with pytest.raises(CompileError, match=rf"node 'sm' \(Softmax\): axis {axis} is out of "
                                           r"range for its rank-2 input") as e:
        import_onnx(m)
    assert e.value.infeasible


def test_model_local_function_runs_on_the_cpu_like_onnxruntime():
    """A node calling a model-local function (ModelProto.functions, its own domain) is an
    ``onnx`` CPU step whose one-node model carries the functions and their opsets."""
    fn = helper.make_function("local.ops", "AddRelu", ["a", "b"], ["c"],
                              [helper.make_node("Add", ["a", "b"], ["t"]),
                               helper.make_node("Relu", ["t"], ["c"])],
                              [helper.make_opsetid("", 17)])
    m = make_model([helper.make_node("AddRelu", ["x", "k"], ["y"], domain="local.ops")],
                   [("x", [2, 4])], [("y", [2, 4])], {"k": rand(2, 4, seed=4)})
    m.opset_import.append(helper.make_opsetid("local.ops", 1))
    m.functions.append(fn)
    g = import_onnx(m)
    (node,) = g.nodes
    assert node.op == "onnx" and g.types["y"].shape == (2, 4)
    x = rand(2, 4, seed=5)
    np.testing.assert_allclose(run_float(g, {"x": x})["y"], run_ort(m, {"x": x})[0], rtol=1e-6)
