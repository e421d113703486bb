"""Tests for the bundled digits CNN (``vtaforge.compiler.models``)."""

from __future__ import annotations

import numpy as np
import onnx
import onnxruntime as ort
import pytest

from vtaforge.compiler.models import DIGITS_ONNX, load_digits_split

EXPECTED_OPS = ["Conv", "Relu", "MaxPool", "Conv", "Relu", "MaxPool", "Flatten", "Gemm", "Relu", "Gemm"]


@pytest.fixture(scope="module")
def model() -> onnx.ModelProto:
    return onnx.load(str(DIGITS_ONNX))


@pytest.fixture(scope="module")
def session() -> ort.InferenceSession:
    return ort.InferenceSession(str(DIGITS_ONNX), providers=["CPUExecutionProvider"])


@pytest.fixture(scope="module")
def split():
    return load_digits_split()


def _run(session: ort.InferenceSession, x: np.ndarray) -> np.ndarray:
    (out,) = session.run(["logits"], {"input": x})
    return out


# --------------------------------------------------------------------------
# File / graph structure
# --------------------------------------------------------------------------


def test_file_is_small_and_checks(model):
    assert DIGITS_ONNX.is_file()
    assert DIGITS_ONNX.stat().st_size < 100_000
    onnx.checker.check_model(model, full_check=True)
    onnx.shape_inference.infer_shapes(model, check_type=True, strict_mode=True)


def test_graph_interface(model):
    assert [(o.domain, o.version) for o in model.opset_import] == [("", 17)]
    assert [n.op_type for n in model.graph.node] == EXPECTED_OPS
    init_names = {i.name for i in model.graph.initializer}
    inputs = [i for i in model.graph.input if i.name not in init_names]
    assert [i.name for i in inputs] == ["input"]
    assert [o.name for o in model.graph.output] == ["logits"]
    for vi, expected in ((inputs[0], ["N", 1, 8, 8]), (model.graph.output[0], ["N", 10])):
        tt = vi.type.tensor_type
        assert tt.elem_type == onnx.TensorProto.FLOAT
        dims = [d.dim_param if d.HasField("dim_param") else d.dim_value for d in tt.shape.dim]
        assert dims == expected
    for init in model.graph.initializer:
        assert init.data_type == onnx.TensorProto.FLOAT
    for node in model.graph.node:
        if node.op_type == "Gemm":
            attrs = {a.name: onnx.helper.get_attribute_value(a) for a in node.attribute}
            assert attrs.get("transB") == 1


def test_weights_are_finite_and_without_huge_outliers(model):
    for init in model.graph.initializer:
        w = onnx.numpy_helper.to_array(init)
        assert np.all(np.isfinite(w)), init.name
        if init.name.endswith("_w"):
            assert np.abs(w).max() < 8.0, init.name
            assert np.abs(w).max() / w.std() < 16.0, init.name


# --------------------------------------------------------------------------
# Data split
# --------------------------------------------------------------------------


def test_split_shapes_dtypes_and_determinism(split):
    x_tr, y_tr, x_te, y_te = split
    assert x_tr.shape == (1297, 1, 8, 8) and x_tr.dtype == np.float32
    assert x_te.shape == (500, 1, 8, 8) and x_te.dtype == np.float32
    assert y_tr.shape == (1297,) and y_tr.dtype == np.int64
    assert y_te.shape == (500,) and y_te.dtype == np.int64
    for x in (x_tr, x_te):
        assert x.min() >= 0.0 and x.max() <= 1.0
        assert np.all(x * 16 == np.round(x * 16))  # exact pixel/16 values
    assert set(np.unique(y_tr)) == set(range(10)) == set(np.unique(y_te))
    again = load_digits_split()
    for a, b in zip(split, again):
        np.testing.assert_array_equal(a, b)


# --------------------------------------------------------------------------
# onnxruntime inference
# --------------------------------------------------------------------------


def test_heldout_accuracy(session, split):
    _, _, x_te, y_te = split
    logits = _run(session, x_te)
    assert logits.shape == (500, 10) and logits.dtype == np.float32
    acc = float((logits.argmax(axis=1) == y_te).mean())
    assert acc >= 0.95, acc


@pytest.mark.parametrize("batch", [1, 7])
def test_symbolic_batch(session, split, batch):
    _, _, x_te, _ = split
    full = _run(session, x_te[:batch])
    assert full.shape == (batch, 10)
    # Same per-image results as running the images one by one.
    for i in range(batch):
        np.testing.assert_allclose(full[i], _run(session, x_te[i : i + 1])[0], rtol=0, atol=1e-5)


# --------------------------------------------------------------------------
# Independent numpy reference
# --------------------------------------------------------------------------


def _ref_conv3x3_pad1(x: np.ndarray, w: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Direct (shift-and-accumulate) 3x3 conv, pad 1, stride 1, in float64."""
    n, _, h, wd = x.shape
    xp = np.pad(x, ((0, 0), (0, 0), (1, 1), (1, 1)))
    y = np.zeros((n, w.shape[0], h, wd), dtype=np.float64)
    for i in range(3):
        for j in range(3):
            y += np.einsum("nchw,oc->nohw", xp[:, :, i : i + h, j : j + wd], w[:, :, i, j])
    return y + b[None, :, None, None]


def _ref_maxpool2x2(x: np.ndarray) -> np.ndarray:
    n, c, h, w = x.shape
    return x.reshape(n, c, h // 2, 2, w // 2, 2).max(axis=(3, 5))


def _ref_forward(params: dict[str, np.ndarray], x: np.ndarray) -> np.ndarray:
    p = {k: v.astype(np.float64) for k, v in params.items()}
    a = x.astype(np.float64)
    a = _ref_maxpool2x2(np.maximum(_ref_conv3x3_pad1(a, p["conv1_w"], p["conv1_b"]), 0.0))
    a = _ref_maxpool2x2(np.maximum(_ref_conv3x3_pad1(a, p["conv2_w"], p["conv2_b"]), 0.0))
    a = a.reshape(a.shape[0], -1)
    a = np.maximum(a @ p["fc1_w"].T + p["fc1_b"], 0.0)
    return a @ p["fc2_w"].T + p["fc2_b"]


def test_numpy_reference_matches_onnxruntime(model, session, split):
    params = {i.name: onnx.numpy_helper.to_array(i) for i in model.graph.initializer}
    # Check the initializers are wired up the way the reference assumes.
    wiring = [list(n.input[1:]) for n in model.graph.node if n.op_type in ("Conv", "Gemm")]
    assert wiring == [["conv1_w", "conv1_b"], ["conv2_w", "conv2_b"], ["fc1_w", "fc1_b"], ["fc2_w", "fc2_b"]]
    assert params["conv1_w"].shape == (16, 1, 3, 3)
    assert params["conv2_w"].shape == (32, 16, 3, 3)
    assert params["fc1_w"].shape == (64, 128)
    assert params["fc2_w"].shape == (10, 64)

    _, _, x_te, y_te = split
    ref = _ref_forward(params, x_te)
    got = _run(session, x_te)
    np.testing.assert_allclose(got, ref, rtol=0, atol=1e-4)
    assert np.array_equal(ref.argmax(axis=1) == y_te, got.argmax(axis=1) == y_te)
