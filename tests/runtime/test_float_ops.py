"""runtime/float_ops (numpy kernels for host-CPU ONNX nodes, onnxruntime fallback) and compiler/onnx_attrs.

Oracles: ONNX's own node test cases (``onnx.backend.test.case.node``: expected outputs of the
reference implementation) and onnxruntime, the reference the rest of the project uses; the
integer ops are compared bit exactly with onnxruntime on seeded random inputs.
"""

from __future__ import annotations

import builtins
import functools
import json
import math
import subprocess
import sys
import warnings

import numpy as np
import onnx
import pytest
from onnx import helper, numpy_helper

from vtaforge.compiler.onnx_attrs import attrs_to_json
from vtaforge.runtime import float_ops as F
from vtaforge.runtime import float_common as FC
from vtaforge.runtime import float_window
from vtaforge.runtime.float_common import tensor_attr

try:
    import onnxruntime as ort
except ImportError:  # pragma: no cover - onnxruntime is a project dependency
    ort = None

needs_ort = pytest.mark.skipif(ort is None, reason="onnxruntime is not installed")

#: ONNX node cases where onnxruntime (the project's reference, which the kernels follow) and the
#: ONNX reference implementation disagree; the kernels match onnxruntime there.
ONNX_REFERENCE_DIFFERS = {
    "test_resize_downsample_scales_linear_align_corners":
        "align_corners with a fractional output length: ONNX divides by scale*in - 1, onnxruntime by out - 1",
    "test_resize_downsample_scales_cubic_align_corners":
        "align_corners with a fractional output length: ONNX divides by scale*in - 1, onnxruntime by out - 1",
}
ORT_NO_KERNEL = "onnxruntime has no kernel for this node (op/type/opset)"
NUMPY_NO_KERNEL = "the node needs randomness or a dtype numpy lacks (UnsupportedKernel at run time)"


# ============================================================================ ONNX node cases
def _arr(v):
    if isinstance(v, onnx.TensorProto):
        return numpy_helper.to_array(v)
    if isinstance(v, np.generic):
        return np.asarray(v)
    return v


def _opset(model: onnx.ModelProto) -> int:
    return max(o.version for o in model.opset_import if o.domain in ("", "ai.onnx"))


@functools.lru_cache(maxsize=1)
def _cases() -> dict:
    """name -> (case, node, opset, attrs, why-not) for single-node default-domain cases of NUMPY_OPS ops."""
    import onnx.backend.test.case.node as node_cases

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        cases = node_cases.collect_testcases("")
    out = {}
    for c in cases:
        g = c.model.graph
        if len(g.node) != 1 or g.node[0].domain not in ("", "ai.onnx") or g.node[0].op_type not in F.NUMPY_OPS:
            continue
        node = g.node[0]
        opset = _opset(c.model)
        attrs = attrs_to_json(node)
        ok, why = F.numpy_supports(node.op_type, attrs, opset)
        if ok:
            data = [[_arr(v) for v in ins] for ins, _ in c.data_sets]
            if not all(isinstance(v, np.ndarray) for ins in data for v in ins):
                why = "non-tensor data (sequence/optional)"
            elif any(v.dtype not in FC.NUMPY_DTYPES for ins in data for v in ins):
                why = "input dtype numpy lacks (" + ", ".join(sorted({str(v.dtype) for ins in data for v in ins
                                                                      if v.dtype not in FC.NUMPY_DTYPES})) + ")"
        out[c.name] = (c, node, opset, attrs, why)
    return out


def _supported_params():
    params = []
    for name, (_, _, _, _, why) in _cases().items():
        if why:
            continue
        marks = [pytest.mark.xfail(strict=True, reason=ONNX_REFERENCE_DIFFERS[name])] \
            if name in ONNX_REFERENCE_DIFFERS else []
        params.append(pytest.param(name, marks=marks, id=name))
    return params


def _feed(case, node, ins):
    g = case.model.graph
    inits = {t.name: numpy_helper.to_array(t) for t in g.initializer}
    feed = dict(zip([i.name for i in g.input if i.name not in inits], ins))
    feed.update(inits)
    return feed, [feed[nm] if nm else None for nm in node.input]


def _assert_same(got: np.ndarray, want: np.ndarray, rtol: float, atol: float, what: str):
    want = np.asarray(want)
    assert got.dtype == want.dtype, f"{what}: dtype {got.dtype}, expected {want.dtype}"
    assert got.shape == want.shape, f"{what}: shape {got.shape}, expected {want.shape}"
    if want.dtype.kind in "biu":
        assert np.array_equal(got, want), f"{what}: {np.sum(got != want)} of {want.size} integers differ"
    else:
        np.testing.assert_allclose(got.astype(np.float64), want.astype(np.float64), rtol=rtol, atol=atol,
                                   equal_nan=True, err_msg=what)


def _run_case(name):
    case, node, opset, attrs, _ = _cases()[name]
    for k, (ins, outs) in enumerate(case.data_sets):
        feed, args = _feed(case, node, [_arr(v) for v in ins])
        try:
            got = F.run_numpy(node.op_type, attrs, args, opset)
        except FC.UnsupportedKernel:
            pytest.skip(NUMPY_NO_KERNEL)
        yield k, case, node, feed, got, [_arr(v) for v in outs]


@pytest.mark.parametrize("name", _supported_params())
def test_onnx_node_case(name):
    """run_numpy reproduces the expected outputs of ONNX's node test case."""
    for k, case, node, _, got, want in _run_case(name):
        exp = dict(zip([o.name for o in case.model.graph.output], want))
        for j, nm in enumerate(node.output):
            if nm in exp:
                assert j < len(got), f"output {j} missing"
                _assert_same(got[j], exp[nm], case.rtol, case.atol, f"data set {k} output {j}")


def _ort_session(model: onnx.ModelProto):
    """A session for ``model``; when onnxruntime lacks the op version, the same op at an older opset
    whose schema is unchanged for the node (tried newest first)."""
    so = ort.SessionOptions()
    so.log_severity_level = 4
    so.intra_op_num_threads = 1
    try:
        return ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])
    except Exception:  # noqa: BLE001
        pass
    node = model.graph.node[0]
    opset = _opset(model)
    versions = sorted({onnx.defs.get_schema(node.op_type, v, "").since_version for v in range(1, opset + 1)
                       if _has_schema(node.op_type, v)}, reverse=True)
    for v in versions[1:]:
        m = onnx.ModelProto()
        m.CopyFrom(model)
        for o in m.opset_import:
            if o.domain in ("", "ai.onnx"):
                o.version = v
        try:
            onnx.checker.check_model(m)
            return ort.InferenceSession(m.SerializeToString(), so, providers=["CPUExecutionProvider"])
        except Exception:  # noqa: BLE001
            continue
    return None


def _has_schema(op: str, v: int) -> bool:
    try:
        onnx.defs.get_schema(op, v, "")
    except Exception:  # noqa: BLE001
        return False
    return True


@needs_ort
@pytest.mark.parametrize("name", [pytest.param(p.values[0], id=p.id) for p in _supported_params()])
def test_onnx_node_case_vs_onnxruntime(name):
    """run_numpy matches onnxruntime on the inputs of ONNX's node test case."""
    case = _cases()[name][0]
    sess = _ort_session(case.model)
    if sess is None:
        pytest.skip(ORT_NO_KERNEL)
    for k, case, node, feed, got, _ in _run_case(name):
        try:
            ref = sess.run(None, {i.name: feed[i.name] for i in sess.get_inputs()})
        except Exception:  # noqa: BLE001
            pytest.skip(ORT_NO_KERNEL)
        exp = dict(zip([o.name for o in case.model.graph.output], ref))
        for j, nm in enumerate(node.output):
            if nm in exp:
                _assert_same(got[j], exp[nm], case.rtol, case.atol, f"data set {k} output {j} vs onnxruntime")


def test_unsupported_cases_say_why():
    """Cases numpy_supports rejects carry a one-line reason, and run_numpy raises it as UnsupportedKernel."""
    rejected = {n: v for n, v in _cases().items() if not F.numpy_supports(v[1].op_type, v[3], v[2])[0]}
    assert rejected, "expected some rejected cases (float8 casts, antialias resize)"
    for name, (case, node, opset, attrs, why) in rejected.items():
        assert why and "\n" not in why, name
        with pytest.raises(FC.UnsupportedKernel, match="no numpy"):
            F.run_numpy(node.op_type, attrs, [], opset)


# ============================================================================ onnxruntime on hand-made nodes
def _node(op: str, inputs: list, attrs: dict, n_out: int = 1) -> onnx.NodeProto:
    names = ["" if v is None else f"i{k}" for k, v in enumerate(inputs)]
    while names and names[-1] == "":
        names.pop()
    return helper.make_node(op, names, [f"o{k}" for k in range(n_out)], **attrs)


def _model(node: onnx.NodeProto, inputs: list, opset: int) -> onnx.ModelProto:
    gin = [helper.make_tensor_value_info(f"i{k}", helper.np_dtype_to_tensor_dtype(v.dtype), list(v.shape))
           for k, v in enumerate(inputs) if v is not None]
    gout = [helper.make_empty_tensor_value_info(o) for o in node.output]
    g = helper.make_graph([node], "n", gin, gout)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", opset)], ir_version=8)


def _vs_ort(op, inputs, attrs, opset, n_out=1, rtol=1e-5, atol=1e-5, outputs=None):
    """run_numpy == onnxruntime (via run_onnxruntime) for a one-node model; ints bit exact."""
    inputs = [None if v is None else np.asarray(v) for v in inputs]
    node = _node(op, inputs, attrs, n_out)
    got = F.run_numpy(op, attrs_to_json(node), inputs, opset)
    ref = F.run_onnxruntime(_model(node, inputs, opset).SerializeToString(), inputs)
    for j in outputs if outputs is not None else range(n_out):
        _assert_same(got[j], ref[j], rtol, atol, f"{op} opset {opset} output {j}")
    return got


def _rng(seed=0):
    return np.random.default_rng(seed)


def _f32(*shape, seed=0, lo=-3.0, hi=3.0):
    return _rng(seed).uniform(lo, hi, shape).astype(np.float32)


# ------------------------------------------------------------------ opset-dependent forms
_X = _f32(2, 3, 4, 5)
_LEGACY = [
    ("Clip", [_X], {"min": -0.5, "max": 0.7}, 6),
    ("Clip", [_X, np.float32(-0.5), np.float32(0.7)], {}, 11),
    ("Clip", [_X, None, np.float32(0.7)], {}, 13),
    ("Clip", [np.arange(-5, 5, dtype=np.int8), np.int8(-2), np.int8(3)], {}, 13),
    ("Squeeze", [_X[:, :1, :, :1]], {"axes": [1, -1]}, 11),
    ("Squeeze", [_X[:, :1, :, :1], np.array([1, 3])], {}, 13),
    ("Squeeze", [_X[:, :1, :, :1]], {}, 13),
    ("Unsqueeze", [_X], {"axes": [0, -1]}, 11),
    ("Unsqueeze", [_X, np.array([0, 5])], {}, 13),
    ("ReduceMean", [_X], {"axes": [1, 3], "keepdims": 0}, 13),
    ("ReduceMean", [_X, np.array([1, -1])], {"keepdims": 1}, 18),
    ("ReduceMean", [_X, np.array([], np.int64)], {"noop_with_empty_axes": 1}, 18),
    ("ReduceMax", [_X], {"axes": [2]}, 13),
    ("ReduceMax", [_X, np.array([0, 2])], {"keepdims": 0}, 18),
    ("ReduceMin", [_X], {}, 13),
    ("ReduceSum", [_X], {"axes": [0, 2], "keepdims": 0}, 11),
    ("ReduceSum", [_X, np.array([1])], {}, 13),
    ("ReduceSum", [_X], {"noop_with_empty_axes": 1}, 13),
    ("ReduceProd", [_X], {"axes": [3]}, 13),
    ("ReduceL2", [_X], {"axes": [1]}, 13),
    ("ReduceL2", [_X, np.array([1, 2])], {"keepdims": 0}, 18),
    ("Split", [_X], {"axis": 1, "split": [1, 2]}, 11),
    ("Split", [_X, np.array([2, 1])], {"axis": 1}, 13),
    ("Split", [_X], {"axis": 3}, 13),                           # equal split, output count from the node
    ("Split", [_X], {"axis": 3, "num_outputs": 3}, 18),         # uneven: 2, 2, 1
    ("Pad", [_X], {"pads": [0, 1, 2, 0, 0, 0, 1, 2], "value": 1.5}, 2),
    ("Pad", [_X], {"pads": [0, 0, 2, 1, 0, 0, 1, 2], "mode": "reflect"}, 2),
    ("Pad", [_X, np.array([0, 1, 2, 0, 0, 0, 1, 2]), np.float32(-1)], {}, 11),
    ("Pad", [_X, np.array([0, 0, 1, -1, 0, 0, -2, 2])], {"mode": "edge"}, 13),
    ("Pad", [_X, np.array([1, 2, 2, 0]), None, np.array([1, -1])], {"mode": "reflect"}, 18),
    ("Pad", [_X, np.array([1, 2, 2, 1]), None, np.array([2, 3])], {"mode": "wrap"}, 19),
    ("Slice", [_X], {"starts": [1, -3], "ends": [100, -1], "axes": [1, 3]}, 9),
    ("Slice", [_X, np.array([-1, 4]), np.array([-100, 0]), np.array([1, 3]), np.array([-1, -2])], {}, 13),
    ("Slice", [_X, np.array([0]), np.array([np.iinfo(np.int64).max]), None, np.array([2])], {}, 13),
    ("Softmax", [_X], {"axis": 2}, 11),
    ("Softmax", [_X], {}, 11),
    ("Softmax", [_X], {"axis": 2}, 13),
    ("LogSoftmax", [_X], {"axis": 1}, 11),
    ("LogSoftmax", [_X], {}, 13),
    ("Hardmax", [_X], {"axis": 2}, 11),
    ("Reshape", [_X, np.array([0, -1, 5])], {}, 13),
    ("Reshape", [_X, np.array([2, 0, 20])], {"allowzero": 0}, 14),
    ("Reshape", [_X, np.array([4, 30])], {"allowzero": 1}, 14),
    ("Flatten", [_X], {"axis": -2}, 13),
    ("Flatten", [_X], {"axis": 0}, 13),
    ("Transpose", [_X], {}, 13),
    ("Transpose", [_X], {"perm": [0, 3, 1, 2]}, 13),
    ("TopK", [_X], {"k": 2, "axis": 1}, 1),
    ("TopK", [_X, np.array([3])], {"axis": -1, "largest": 0}, 11),
    ("TopK", [np.array([[1, 3, 3, 2, 3, 1]], np.int64), np.array([4])], {}, 11),
    ("Dropout", [_X], {"ratio": 0.3}, 10),
    ("Dropout", [_X, np.float32(0.2)], {}, 13),
    ("BatchNormalization", [_X, _f32(3, seed=1), _f32(3, seed=2), _f32(3, seed=3), _f32(3, seed=4, lo=0.5)],
     {"epsilon": 1e-3}, 9),
    ("BatchNormalization", [_X, _f32(3, seed=1), _f32(3, seed=2), _f32(3, seed=3), _f32(3, seed=4, lo=0.5)], {}, 15),
    ("InstanceNormalization", [_X, _f32(3, seed=1), _f32(3, seed=2)], {"epsilon": 1e-4}, 6),
    ("LayerNormalization", [_X, _f32(5, seed=1), _f32(5, seed=2)], {}, 17),
    ("LayerNormalization", [_X, _f32(4, 5, seed=1), None], {"axis": -2, "epsilon": 1e-3}, 17),
    ("Gelu", [_X * 2], {}, 20),
    ("Gelu", [_X * 2], {"approximate": "tanh"}, 20),
    ("Erf", [np.linspace(-7, 7, 1001).astype(np.float32)], {}, 13),
    ("Div", [np.array([7, -7, 7, -7, 0], np.int32), np.array([2, 2, -2, -2, 3], np.int32)], {}, 14),
    ("Div", [np.array([7, -7, 6], np.int64), np.array([3], np.int64)], {}, 14),
    ("Pow", [_X, np.float32(2)], {}, 15),
    ("Pow", [np.abs(_X), np.array(3, np.int64)], {}, 15),
    ("Round", [np.array([-2.5, -1.5, -0.5, 0.5, 1.5, 2.5, 2.4, -2.6], np.float32)], {}, 11),
    ("Mean", [_X, _X[:1], _X[0, 0]], {}, 13),
    ("Sum", [_X, _X[:, :1]], {}, 13),
    ("Max", [np.arange(6, dtype=np.int32), np.int32(3)], {}, 13),
    ("Min", [_X, _X[0]], {}, 13),
    ("Where", [_X > 0, _X, np.float32(-1)], {}, 16),
    ("PRelu", [_X, _f32(3, 1, 1, seed=1)], {}, 16),
    ("Cast", [_X * 100], {"to": onnx.TensorProto.INT8}, 13),
    ("Cast", [_X], {"to": onnx.TensorProto.FLOAT16}, 13),
    ("Cast", [_X], {"to": onnx.TensorProto.BOOL}, 13),
    ("Cast", [np.array([1, -1, 300], np.int64)], {"to": onnx.TensorProto.UINT8}, 13),
    ("Shape", [_X], {"start": 1, "end": -1}, 15),
    ("Shape", [_X], {"start": -10}, 15),
    ("Gather", [np.arange(24, dtype=np.int64).reshape(4, 6), np.array([[0, -1], [2, 3]])], {"axis": 1}, 13),
    ("Expand", [_X[:, :1], np.array([3, 1, 1])], {}, 13),
    ("Tile", [_X[0], np.array([2, 1, 3])], {}, 13),
    ("Range", [np.int64(10), np.int64(-3), np.int64(-3)], {}, 11),
    ("Range", [np.float32(0.5), np.float32(3.2), np.float32(0.3)], {}, 11),
    ("ConstantOfShape", [np.array([2, 3])], {"value": numpy_helper.from_array(np.array([7], np.int32))}, 9),
    ("DepthToSpace", [_f32(1, 8, 2, 3)], {"blocksize": 2, "mode": "CRD"}, 13),
    ("SpaceToDepth", [_f32(1, 2, 4, 6)], {"blocksize": 2}, 13),
    ("ArgMax", [np.array([[1, 5, 5, 2], [7, 7, 0, 7]], np.float32)], {"axis": 1, "select_last_index": 1}, 13),
    ("ArgMin", [_X], {"axis": -1, "keepdims": 0}, 13),
    ("GlobalAveragePool", [_X], {}, 1),
    ("GlobalMaxPool", [_X], {}, 1),
    ("Gemm", [_f32(4, 3), _f32(5, 4, seed=1), _f32(5, seed=2)], {"transA": 1, "transB": 1, "alpha": 0.5,
                                                                 "beta": 2.0}, 13),
    ("Gemm", [_f32(3, 4), _f32(4, 5, seed=1)], {}, 13),
    ("MatMul", [_f32(2, 1, 3, 4), _f32(3, 4, 2, seed=1)], {}, 13),
    ("MatMul", [_f32(4), _f32(2, 4, 3, seed=1)], {}, 13),
    ("Einsum", [_f32(2, 3, 4), _f32(2, 4, 5, seed=1)], {"equation": "bij, bjk -> bik"}, 12),
    ("Upsample", [_f32(1, 2, 2, 3)], {"scales": [1.0, 1.0, 2.0, 3.0]}, 7),
    ("Upsample", [_f32(1, 2, 2, 3)], {"scales": [1.0, 1.0, 2.0, 2.0], "mode": "linear"}, 7),
    ("Upsample", [_f32(1, 2, 3, 3), np.array([1, 1, 2.5, 1.5], np.float32)], {"mode": "nearest"}, 9),
    ("Upsample", [_f32(1, 2, 3, 3), np.array([1, 1, 2, 1.5], np.float32)], {"mode": "linear"}, 9),
    ("DynamicQuantizeLinear", [_X], {}, 11),
    ("DynamicQuantizeLinear", [np.abs(_X) + 0.5], {}, 11),
    ("Resize", [_f32(1, 2, 4, 6), np.array([1, 1, 2, 0.5], np.float32)], {"mode": "nearest"}, 10),
    ("Resize", [_f32(1, 2, 4, 6), np.array([1, 1, 0.6, 1.7], np.float32)], {"mode": "nearest"}, 10),
    ("Resize", [_f32(1, 2, 4, 6), np.array([1, 1, 0.6, 1.7], np.float32)], {"mode": "linear"}, 10),
]


def _legacy_id(p):
    op, ins, attrs, opset = p
    return f"{op}-{opset}-" + ",".join(f"{k}={v}" for k, v in attrs.items() if k != "value")[:60]


_OUTS = {"Split": lambda ins, a: a.get("num_outputs") or (len(a["split"]) if "split" in a else
                                                          (len(ins[1]) if len(ins) > 1 else 5)),
         "TopK": lambda ins, a: 2, "Dropout": lambda ins, a: 2, "LayerNormalization": lambda ins, a: 3,
         "DynamicQuantizeLinear": lambda ins, a: 3}


@needs_ort
@pytest.mark.parametrize("spec", _LEGACY, ids=[_legacy_id(p) for p in _LEGACY])
def test_opset_forms_vs_onnxruntime(spec):
    op, ins, attrs, opset = spec
    n_out = _OUTS[op](ins, attrs) if op in _OUTS else 1
    outputs = [0] if op == "Dropout" and opset < 12 else None     # opset-10 mask: onnxruntime's is all True too
    _vs_ort(op, ins, attrs, opset, n_out=n_out, outputs=outputs, rtol=1e-5, atol=1e-6)


# ------------------------------------------------------------------ Resize
def _resize_specs():
    x = _f32(2, 2, 4, 6, seed=5)
    out = []
    for opset in (11, 13, 19):
        ctms = ["half_pixel", "pytorch_half_pixel", "align_corners", "asymmetric"]
        ctms += ["tf_half_pixel_for_nn"] if opset < 18 else ["half_pixel_symmetric"]
        scales = [np.array([1, 1, 2, 1.5], np.float32), np.array([1, 1, 0.6, 0.5], np.float32),
                  np.array([1, 1, 0.75, 2.5], np.float32)]
        for si, sc in enumerate(scales):
            for ctm in ctms:
                roi = np.array([], np.float32) if opset < 13 else None
                for nm in ("round_prefer_floor", "round_prefer_ceil", "floor", "ceil"):
                    out.append((opset, [x, roi, sc], {"mode": "nearest", "coordinate_transformation_mode": ctm,
                                                      "nearest_mode": nm}, f"s{si}"))
                if ctm != "tf_half_pixel_for_nn":
                    out.append((opset, [x, roi, sc], {"mode": "linear", "coordinate_transformation_mode": ctm},
                                f"s{si}"))
                    out.append((opset, [x, roi, sc], {"mode": "cubic", "coordinate_transformation_mode": ctm,
                                                      "exclude_outside": si % 2, "cubic_coeff_a": -0.5}, f"s{si}"))
        if opset >= 13:                    # (onnxruntime rejects an empty scales graph input at opset 11)
            for mode in ("nearest", "linear", "cubic"):
                out.append((opset, [x, None, None, np.array([2, 2, 7, 3], np.int64)], {"mode": mode}, "sizes"))
    crop = np.array([0, 0, 0.2, 0.1, 1, 1, 0.9, 1.2], np.float32)
    for mode in ("nearest", "linear"):
        out.append((13, [x, crop, np.array([1, 1, 1.5, 0.8], np.float32)],
                    {"mode": mode, "coordinate_transformation_mode": "tf_crop_and_resize",
                     "extrapolation_value": -7.0}, "crop"))
        out.append((13, [x, crop, None, np.array([2, 2, 3, 5], np.int64)],
                    {"mode": mode, "coordinate_transformation_mode": "tf_crop_and_resize"}, "crop-sizes"))
    for pol in ("not_larger", "not_smaller"):
        out.append((18, [x, None, None, np.array([5, 5], np.int64)],
                    {"mode": "linear", "axes": [2, 3], "keep_aspect_ratio_policy": pol}, "aspect"))
    out.append((18, [x, None, np.array([2.0, 0.5], np.float32)], {"mode": "nearest", "axes": [3, 2]}, "axes"))
    xi = (x * 40 + 100).astype(np.uint8)
    out.append((19, [xi, None, np.array([1, 1, 1.5, 0.7], np.float32)], {"mode": "linear"}, "u8"))
    out.append((19, [xi, None, np.array([1, 1, 1.5, 0.7], np.float32)], {"mode": "nearest"}, "u8"))
    xe = np.zeros((1, 2, 5, 6), np.int8)              # extremes: truncation of the float32 blend decides
    xe[..., ::2, ::2], xe[..., 1::2, 1::2] = 127, -128
    for ctm in ("align_corners", "half_pixel", "asymmetric"):
        out.append((13, [xe, None, np.array([1, 1, 1.7, 2.3], np.float32)],
                    {"mode": "linear", "coordinate_transformation_mode": ctm}, "i8"))
        out.append((13, [xe.astype(np.int32), None, np.array([1, 1, 1, 2.3], np.float32)],
                    {"mode": "linear", "coordinate_transformation_mode": ctm}, "i32"))
    return out


_RESIZE = _resize_specs()


@needs_ort
@pytest.mark.parametrize("spec", _RESIZE, ids=[f"{o}-{a['mode']}-{a.get('coordinate_transformation_mode', '')}-"
                                               f"{a.get('nearest_mode', '')}-{t}" for o, _, a, t in _RESIZE])
def test_resize_vs_onnxruntime(spec):
    opset, ins, attrs, _ = spec
    _vs_ort("Resize", ins, attrs, opset, rtol=1e-4, atol=1e-4)


# ------------------------------------------------------------------ windows: pools, Conv, ConvTranspose
def _pool_specs():
    x2 = _f32(2, 3, 7, 8, seed=7)
    out = []
    geo = [{"kernel_shape": [3, 3]},
           {"kernel_shape": [3, 2], "strides": [2, 2]},
           {"kernel_shape": [3, 3], "strides": [2, 2], "pads": [1, 1, 1, 1]},
           {"kernel_shape": [3, 3], "strides": [2, 3], "pads": [1, 0, 0, 2], "ceil_mode": 1},
           {"kernel_shape": [2, 2], "strides": [2, 2], "ceil_mode": 1},
           {"kernel_shape": [3, 3], "strides": [2, 2], "auto_pad": "SAME_UPPER"},
           {"kernel_shape": [2, 4], "strides": [3, 2], "auto_pad": "SAME_LOWER"},
           {"kernel_shape": [3, 3], "strides": [2, 2], "auto_pad": "VALID"},
           {"kernel_shape": [2, 2], "strides": [1, 2], "dilations": [2, 2], "pads": [1, 1, 1, 0]},
           {"kernel_shape": [2, 3], "strides": [2, 2], "dilations": [2, 1], "ceil_mode": 1, "pads": [0, 1, 1, 1]}]
    for g in geo:
        out.append(("MaxPool", 12, [x2], g))
        out.append(("MaxPool", 12, [x2], dict(g, storage_order=1)))
        for cip in (0, 1):
            if "dilations" in g or g.get("auto_pad", "NOTSET") != "NOTSET" and cip:
                op = 19
            else:
                op = 11
            out.append(("AveragePool", op, [x2], dict(g, count_include_pad=cip)))
        out.append(("LpPool", 18, [x2], dict(g, p=3)))
    out.append(("MaxPool", 12, [(x2 * 40).astype(np.int8)], {"kernel_shape": [2, 2], "pads": [1, 1, 1, 1]}))
    out.append(("MaxPool", 12, [(x2 * 40 + 128).astype(np.uint8)], {"kernel_shape": [3, 3], "strides": [2, 2]}))
    out.append(("MaxPool", 12, [_f32(1, 2, 9, seed=8)], {"kernel_shape": [3], "strides": [2], "pads": [1, 1]}))
    out.append(("MaxPool", 12, [_f32(1, 2, 5, 4, 6, seed=8)], {"kernel_shape": [2, 3, 2], "strides": [2, 1, 2]}))
    out.append(("AveragePool", 11, [_f32(1, 2, 9, seed=8)], {"kernel_shape": [4], "strides": [3], "pads": [2, 1],
                                                              "count_include_pad": 1}))
    out.append(("AveragePool", 11, [_f32(1, 2, 5, 4, 6, seed=8)], {"kernel_shape": [2, 3, 2], "ceil_mode": 1,
                                                                    "strides": [2, 2, 2]}))
    return out


_POOLS = _pool_specs()


@needs_ort
@pytest.mark.parametrize("spec", _POOLS, ids=[f"{op}-{o}-" + "-".join(f"{k}{v}" for k, v in a.items()).replace(" ", "")
                                              for op, o, _, a in _POOLS])
def test_pools_vs_onnxruntime(spec):
    op, opset, ins, attrs = spec
    _vs_ort(op, ins, attrs, opset, n_out=2 if op == "MaxPool" and ins[0].dtype == np.float32 else 1)


def _conv_specs():
    out = []
    x = _f32(2, 4, 7, 9, seed=9)
    for attrs, wshape in [
        ({}, (6, 4, 3, 3)),
        ({"strides": [2, 2], "pads": [1, 2, 0, 1]}, (6, 4, 3, 3)),
        ({"dilations": [2, 3], "pads": [2, 2, 2, 2]}, (3, 4, 2, 3)),
        ({"group": 2, "strides": [1, 2]}, (6, 2, 3, 1)),
        ({"group": 4}, (8, 1, 3, 3)),
        ({"auto_pad": "SAME_UPPER", "strides": [2, 2]}, (5, 4, 4, 3)),
        ({"auto_pad": "SAME_LOWER", "strides": [2, 3]}, (5, 4, 4, 3)),      # (no dilations: onnxruntime refuses)
        ({"auto_pad": "VALID", "strides": [3, 2], "kernel_shape": [2, 2]}, (5, 4, 2, 2)),
    ]:
        out.append(("Conv", [x, _f32(*wshape, seed=10), _f32(wshape[0], seed=11)], attrs))
        out.append(("Conv", [x, _f32(*wshape, seed=10)], attrs))
    out.append(("Conv", [_f32(2, 3, 11, seed=12), _f32(4, 3, 3, seed=13)], {"strides": [2], "pads": [1, 1]}))
    out.append(("Conv", [_f32(1, 2, 5, 6, 4, seed=12), _f32(3, 2, 2, 3, 2, seed=13), _f32(3, seed=1)],
                {"strides": [1, 2, 1], "pads": [1, 0, 1, 0, 1, 1]}))
    xt = _f32(2, 4, 4, 5, seed=14)
    for attrs, wshape in [
        ({}, (4, 3, 3, 3)),
        ({"strides": [2, 2]}, (4, 3, 3, 3)),
        ({"strides": [2, 3], "pads": [1, 0, 1, 2], "output_padding": [1, 2]}, (4, 2, 3, 3)),
        ({"dilations": [2, 2], "strides": [2, 1]}, (4, 2, 2, 3)),
        ({"group": 2, "strides": [2, 2], "pads": [1, 1, 0, 0]}, (4, 3, 3, 2)),
        ({"strides": [2, 2], "output_shape": [10, 11]}, (4, 3, 3, 3)),
        ({"strides": [3, 2], "output_shape": [12, 10], "output_padding": [1, 0]}, (4, 3, 3, 3)),
        ({"auto_pad": "SAME_UPPER", "strides": [2, 3]}, (4, 3, 3, 4)),
        ({"auto_pad": "SAME_LOWER", "strides": [2, 3]}, (4, 3, 3, 4)),
        ({"auto_pad": "SAME_UPPER", "strides": [2, 2]}, (4, 3, 2, 2)),
        ({"auto_pad": "VALID", "strides": [2, 2]}, (4, 3, 3, 3)),
    ]:
        out.append(("ConvTranspose", [xt, _f32(*wshape, seed=15), _f32(wshape[1] * attrs.get("group", 1), seed=16)],
                    attrs))
    out.append(("ConvTranspose", [_f32(1, 2, 6, seed=17), _f32(2, 3, 4, seed=18)],
                {"strides": [3], "pads": [1, 2], "output_padding": [2]}))
    out.append(("ConvTranspose", [_f32(1, 2, 3, 3, 2, seed=17), _f32(2, 2, 2, 3, 2, seed=18)], {"strides": [2, 1, 2]}))
    return out


_CONVS = _conv_specs()


@needs_ort
@pytest.mark.parametrize("spec", _CONVS, ids=[f"{op}-{len(ins)}in-" + "-".join(f"{k}{v}" for k, v in a.items())
                                              .replace(" ", "") for op, ins, a in _CONVS])
def test_conv_vs_onnxruntime(spec):
    op, ins, attrs = spec
    _vs_ort(op, ins, attrs, 13, rtol=1e-4, atol=1e-4)


def test_conv_bounded_memory_path_matches(monkeypatch):
    """Convolutions too large for the im2col buffer accumulate per kernel offset: same results."""
    specs = [s for s in _CONVS if s[0] == "Conv"]
    fast = [F.run_numpy(op, a, ins, 13)[0] for op, ins, a in specs]
    q = _INTS
    qfast = [F.run_numpy(op, a, ins, o)[0] for op, o, ins, a in q if op in ("QLinearConv", "ConvInteger")]
    monkeypatch.setattr(float_window, "_IM2COL_BYTES", 0)
    for (op, ins, a), want in zip(specs, fast):
        np.testing.assert_allclose(F.run_numpy(op, a, ins, 13)[0], want, rtol=1e-5, atol=1e-5)
    slow = [F.run_numpy(op, a, ins, o)[0] for op, o, ins, a in q if op in ("QLinearConv", "ConvInteger")]
    assert all(np.array_equal(u, v) for u, v in zip(slow, qfast))


# ------------------------------------------------------------------ integer ops: bit exact
def _q(shape, dt, seed, bits=None):
    info = np.iinfo(dt)
    lo, hi = (info.min, info.max) if bits is None else (-(1 << (bits - 1)), (1 << (bits - 1)) - 1)
    return _rng(seed).integers(lo, hi + 1, shape).astype(dt)


def _w(shape, dt, seed):
    """Weights: int8 in 7 bits (onnxruntime's u8 x s8 kernels on AVX2 sum byte pairs in saturating int16,
    exact only for 7-bit weights, what its quantizer's reduce_range produces); uint8 full range."""
    return _q(shape, dt, seed, bits=7 if dt == np.int8 else None)


def _int_specs():
    out = []
    rng = _rng(21)
    x = rng.normal(0, 4, (2, 3, 5, 4)).astype(np.float32)
    ties = (np.arange(-40, 40, dtype=np.float32) * 0.25)            # x/scale lands on .5 ties with scale 0.5
    for dt in (np.uint8, np.int8):
        z = np.array(3 if dt == np.int8 else 128, dt)
        out.append(("QuantizeLinear", 10, [x, np.float32(0.05), z], {}))
        out.append(("QuantizeLinear", 13, [ties, np.float32(0.5), np.array(-1 if dt == np.int8 else 5, dt)], {}))
        out.append(("QuantizeLinear", 13, [x, np.array([0.02, 0.05, 0.1], np.float32), np.array([0, 1, 2], dt)],
                    {"axis": 1}))
        out.append(("QuantizeLinear", 19, [x, np.array([0.1, 0.2], np.float32), np.array([1, -1], np.int8)
                                           .astype(dt)], {"axis": 0}))
        out.append(("QuantizeLinear", 21, [x, _f32(2, 3, 5, 2, seed=3, lo=0.01, hi=0.1), None],
                    {"axis": 3, "block_size": 2, "output_dtype": 3 if dt == np.int8 else 2}))
        q = _q((2, 3, 5, 4), dt, 22)
        out.append(("DequantizeLinear", 10, [q, np.float32(0.07), z], {}))
        out.append(("DequantizeLinear", 13, [q, np.array([0.02, 0.05, 0.1], np.float32), np.array([0, 1, 2], dt)],
                    {"axis": 1}))
        out.append(("DequantizeLinear", 19, [q, np.float32(0.3)], {}))
        out.append(("DequantizeLinear", 21, [q, _f32(2, 3, 5, 2, seed=4, lo=0.01, hi=0.1), _q((2, 3, 5, 2), dt, 5)],
                    {"axis": -1, "block_size": 2}))
    out.append(("DequantizeLinear", 13, [_q((4, 3), np.int32, 23), np.array(0.001, np.float32)], {}))
    out.append(("QuantizeLinear", 21, [x * 300, np.float32(0.01), np.array(7, np.int16)], {}))
    out.append(("DequantizeLinear", 21, [_q((4, 3), np.uint16, 24), np.float32(0.01), np.array(9, np.uint16)], {}))
    for adt, bdt in ((np.uint8, np.uint8), (np.uint8, np.int8), (np.int8, np.int8)):
        for k in (7, 1500):                  # 1500: accumulators past 2**24, float32(acc) rounding matters
            a, b = _q((3, k), adt, 30), _w((k, 5), bdt, 31)
            az, bz = _q((), adt, 32), _w((), bdt, 33)
            out.append(("MatMulInteger", 10, [a, b, az, bz], {}))
            out.append(("MatMulInteger", 10, [a, b, None, _w((5,), bdt, 34)], {}))
            for ydt in (adt,):            # onnxruntime: y has the type of a
                for bs in (np.float32(0.02), _f32(5, seed=35, lo=0.001, hi=0.05)):
                    out.append(("QLinearMatMul", 10, [a, np.float32(0.03), az, b, bs, _w(bs.shape, bdt, 36),
                                                      np.float32(0.7 if k > 100 else 0.05), _q((), ydt, 37)], {}))
        out.append(("QLinearMatMul", 21, [_q((2, 3, 6), adt, 40), np.float32(0.1), _q((), adt, 41),
                                          _w((6, 4), bdt, 42), np.float32(0.2), _w((), bdt, 43), np.float32(0.9),
                                          _q((), adt, 44)], {}))
    xq = _q((2, 4, 7, 6), np.uint8, 50)
    for wdt in (np.int8, np.uint8):
        for attrs, wshape in [({}, (5, 4, 3, 3)), ({"strides": [2, 1], "pads": [1, 1, 1, 0]}, (5, 4, 3, 2)),
                              ({"group": 4, "pads": [1, 1, 1, 1]}, (8, 1, 3, 3)),
                              ({"group": 2, "dilations": [2, 1], "pads": [1, 0, 1, 2]}, (6, 2, 2, 3)),
                              ({"auto_pad": "SAME_UPPER", "strides": [2, 2]}, (3, 4, 2, 3))]:
            w = _w(wshape, wdt, 51)
            m = wshape[0]
            for per_ch in (False, True):
                ws = _f32(m, seed=52, lo=0.001, hi=0.02) if per_ch else np.float32(0.01)
                wz = np.zeros(m, wdt) if per_ch else np.array(0 if wdt == np.int8 else 131, wdt)
                bias = _rng(53).integers(-2000, 2000, m).astype(np.int32)
                out.append(("QLinearConv", 10, [xq, np.float32(0.05), np.uint8(120), w, ws, wz, np.float32(0.4),
                                                np.uint8(100), bias], attrs))
            out.append(("QLinearConv", 10, [xq, np.float32(0.05), np.uint8(120), w, np.float32(0.01),
                                            np.array(0, wdt), np.float32(0.3), np.uint8(7)], attrs))
            if wdt == np.uint8:
                out.append(("ConvInteger", 10, [xq, w, np.uint8(121), np.uint8(130)], attrs))
                out.append(("ConvInteger", 10, [xq, w], attrs))
    return out


_INTS = _int_specs()


@needs_ort
@pytest.mark.parametrize("spec", _INTS, ids=[f"{op}-{o}-" + "-".join(str(v.dtype) for v in ins if v is not None)
                                             + "-" + "-".join(f"{k}{v}" for k, v in a.items()).replace(" ", "")
                                             for op, o, ins, a in _INTS])
def test_integer_ops_bit_exact_vs_onnxruntime(spec):
    op, opset, ins, attrs = spec
    _vs_ort(op, ins, attrs, opset, rtol=0, atol=0)


def test_integer_accumulation_is_exact_for_full_range_int8():
    """Full-range u8 x s8 products: exact int32 sums as ONNX defines them.  (onnxruntime's AVX2 u8s8
    kernels saturate byte-pair sums to int16 and differ here; on ARM and with 7-bit weights they are exact.)"""
    a, b = _q((3, 1500), np.uint8, 30), _q((1500, 5), np.int8, 31)
    az, bz = np.uint8(131), np.array([-128, 127, 0, 5, -3], np.int8)
    got = F.run_numpy("MatMulInteger", {}, [a, b, az, bz], 10)[0]
    exact = (a.astype(np.int64) - 131) @ (b.astype(np.int64) - bz.astype(np.int64))
    assert got.dtype == np.int32 and np.array_equal(got, exact)
    x, w = _q((1, 8, 9, 9), np.uint8, 60), _q((4, 8, 3, 3), np.int8, 61)
    acc = F.run_numpy("ConvInteger", {}, [x, w, np.uint8(7)], 10)[0]
    xw = np.lib.stride_tricks.sliding_window_view(x.astype(np.int64) - 7, (3, 3), axis=(2, 3))
    assert np.array_equal(acc, np.einsum("nchwij,ocij->nohw", xw, w.astype(np.int64)))


def test_requantize_rule():
    """QLinearMatMul is saturate(round_half_even(float32(acc) * float32(sa*sb/sy)) + zy), ties to even."""
    a = np.array([[1, 3, 5, 7]], np.uint8).T      # acc = a * 1 with b = [[1]]
    y = F.run_numpy("QLinearMatMul", {}, [a, np.float32(1), np.uint8(0), np.array([[1]], np.uint8), np.float32(1),
                                          np.uint8(0), np.float32(2), np.uint8(10)], 10)[0]
    assert y.ravel().tolist() == [10, 12, 12, 14]   # 0.5, 1.5, 2.5, 3.5 -> 0, 2, 2, 4


# ============================================================================ every op is tested
#: the ops the compiler relies on having a numpy kernel (board fallback without onnxruntime).
REQUIRED_OPS = set('''
Relu LeakyRelu Sigmoid HardSigmoid HardSwish Tanh Clip Add Sub Mul Div Neg Abs Exp Log Sqrt Pow Reciprocal Erf Elu
Selu Softplus PRelu Gelu Max Min Sum Mean Floor Ceil Round Sign Where Equal Less Greater LessOrEqual GreaterOrEqual Not
And Or Identity Reshape Flatten Transpose Squeeze Unsqueeze Concat Split Slice Gather Shape Size Cast Expand Tile
ConstantOfShape Range Pad DepthToSpace SpaceToDepth Dropout ReduceMean ReduceMax ReduceMin ReduceSum ReduceProd
ReduceL2 ArgMax ArgMin Softmax LogSoftmax BatchNormalization InstanceNormalization LayerNormalization
GlobalAveragePool GlobalMaxPool Conv ConvTranspose MaxPool AveragePool Gemm MatMul Resize Upsample QuantizeLinear
DequantizeLinear QLinearConv QLinearMatMul ConvInteger MatMulInteger'''.split())


def test_required_ops_have_numpy_kernels():
    assert sorted(REQUIRED_OPS - F.NUMPY_OPS) == []


def test_every_numpy_op_is_tested():
    covered = {v[1].op_type for v in _cases().values() if not v[4]}
    covered |= {s[0] for s in _LEGACY} | {s[0] for s in _POOLS} | {s[0] for s in _CONVS} | {s[0] for s in _INTS}
    covered |= {"Resize"}
    assert sorted(F.NUMPY_OPS - covered) == []


# ============================================================================ errors and small semantics
def test_erf_accuracy():
    x = np.concatenate([np.linspace(-8, 8, 20001), np.array([0.0, 1e-300, -1e-12, 2.5, -2.5, np.inf, -np.inf])])
    want = np.array([math.erf(v) for v in x])
    got = FC._erf64(x)
    err = np.abs(got - want) / np.maximum(np.abs(want), 1e-300)
    assert err.max() < 1e-13
    assert np.isnan(FC._erf64(np.array([np.nan])))[0]
    y = F.run_numpy("Erf", {}, [x.astype(np.float32)], 13)[0]
    assert y.dtype == np.float32
    np.testing.assert_allclose(y, np.array([math.erf(v) for v in x.astype(np.float32)]), rtol=1e-6, atol=1e-7)


@pytest.mark.parametrize("op,attrs,ins,match", [
    ("Gather", {}, [np.zeros(3, np.float32), np.array([3])], "out of range"),
    ("Reshape", {}, [np.zeros(6, np.float32), np.array([4, -1])], "Reshape"),
    ("Div", {}, [np.array([1], np.int32), np.array([0], np.int32)], "division by zero"),
    ("Squeeze", {}, [np.zeros((2, 3), np.float32), np.array([0])], "not all 1"),
    ("Split", {}, [np.zeros(3, np.float32), np.array([1, 1])], "do not split"),
    ("Conv", {}, [np.zeros((1, 3, 4, 4), np.float32), np.zeros((2, 2, 3, 3), np.float32)], "group"),
    ("MaxPool", {}, [np.zeros((1, 1, 4, 4), np.float32)], "kernel_shape"),
    ("Slice", {}, [np.zeros(3, np.float32), np.array([0]), np.array([2]), None, np.array([0])], "step 0"),
    ("Relu", {}, [], "needs input 0"),
])
def test_bad_input_is_cpu_kernel_error(op, attrs, ins, match):
    with pytest.raises(FC.CpuKernelError, match=match) as e:
        F.run_numpy(op, attrs, ins, 13)
    assert not isinstance(e.value, FC.UnsupportedKernel)
    assert "\n" not in str(e.value)


def test_unsupported_kernel():
    assert F.numpy_supports("LSTM", {}, 14) == (False, "LSTM has no numpy kernel")
    ok, why = F.numpy_supports("Resize", {"mode": "cubic", "antialias": 1}, 18)
    assert not ok and "antialias" in why
    assert F.numpy_supports("Resize", {"mode": "cubic", "antialias": 1}, 13) == (True, "")
    assert not F.numpy_supports("Loop", {"body": {"unsupported": "GRAPH"}}, 13)[0]
    assert "GRAPH" in F.numpy_supports("Identity", {"x": {"unsupported": "GRAPH"}}, 13)[1]
    assert not F.numpy_supports("Cast", {"to": 16}, 13)[0]
    with pytest.raises(FC.UnsupportedKernel, match="LSTM has no numpy kernel"):
        F.run_numpy("LSTM", {}, [np.zeros(1, np.float32)], 14)
    with pytest.raises(FC.UnsupportedKernel, match="dtype <U1"):
        F.run_numpy("Identity", {}, [np.array(["a"])], 13)
    with pytest.raises(FC.UnsupportedKernel, match="random"):
        F.run_numpy("Dropout", {}, [np.ones(3, np.float32), np.float32(0.5), np.array(True)], 13)
    with pytest.raises(FC.UnsupportedKernel, match="num_outputs"):
        F.run_numpy("Split", {}, [np.ones(4, np.float32)], 13)
    assert issubclass(FC.UnsupportedKernel, FC.CpuKernelError) and issubclass(FC.CpuKernelError, ValueError)


def test_dtypes_are_preserved():
    i64 = np.arange(12, dtype=np.int64).reshape(3, 4)
    assert F.run_numpy("Shape", {}, [np.zeros((2, 3), np.float16)], 13)[0].dtype == np.int64
    assert F.run_numpy("Size", {}, [np.zeros((2, 3), np.float16)], 13)[0].tolist() == 6
    assert F.run_numpy("Gather", {}, [i64, np.array([2, 0])], 13)[0].dtype == np.int64
    assert F.run_numpy("Transpose", {}, [i64.astype(np.uint8)], 13)[0].dtype == np.uint8
    assert F.run_numpy("Relu", {}, [np.array([-1, 2], np.int8)], 14)[0].tolist() == [0, 2]
    h = F.run_numpy("Sigmoid", {}, [np.array([0, 1], np.float16)], 13)[0]
    assert h.dtype == np.float16 and h[0] == 0.5
    y = F.run_numpy("Add", {}, [np.array([1.5], np.float64), np.array([2.25], np.float64)], 14)[0]
    assert y.dtype == np.float64 and y[0] == 3.75
    c = F.run_numpy("Concat", {"axis": 0}, [i64, i64], 13)[0]
    assert c.dtype == np.int64 and c.shape == (6, 4)


def test_legacy_broadcast_attribute():
    x, b = np.zeros((2, 3, 4), np.float32), np.arange(3, dtype=np.float32)
    y = F.run_numpy("Add", {"broadcast": 1, "axis": 1}, [x, b], 6)[0]
    assert np.array_equal(y[:, :, 0], np.broadcast_to(b, (2, 3)))


def test_split_outputs_come_from_attrs_to_json():
    node = helper.make_node("Split", ["x"], ["a", "b", "c"], axis=0)
    attrs = attrs_to_json(node)
    assert attrs["num_outputs"] == 3
    outs = F.run_numpy("Split", attrs, [np.arange(6, dtype=np.float32)], 13)
    assert [o.tolist() for o in outs] == [[0, 1], [2, 3], [4, 5]]
    assert "num_outputs" not in attrs_to_json(helper.make_node("Split", ["x", "s"], ["a", "b"]))


def test_maxpool_indices():
    x = np.array([[[[1, 9, 2], [3, 4, 9], [0, 5, 6]]]], np.float32)
    y, i = F.run_numpy("MaxPool", {"kernel_shape": [2, 2]}, [x], 12)
    assert y.ravel().tolist() == [9, 9, 5, 9] and i.ravel().tolist() == [1, 1, 7, 5]
    _, ic = F.run_numpy("MaxPool", {"kernel_shape": [2, 2], "storage_order": 1}, [x], 12)
    assert ic.ravel().tolist() == [3, 3, 5, 7]


# ============================================================================ attrs_to_json / tensor_attr
def test_attrs_to_json_all_types():
    t = numpy_helper.from_array(np.arange(6, dtype=np.int16).reshape(2, 3))
    g = helper.make_graph([], "g", [], [])
    node = helper.make_node("Foo", ["x"], ["y"], i=3, f=0.5, s="héllo", ints=[1, -2], floats=[0.25, 1.0],
                            strings=["a", "b"], t=t, g=g, gs=[g],
                            tp=helper.make_tensor_type_proto(onnx.TensorProto.FLOAT, [1]))
    node.attribute.append(helper.make_attribute("sp", helper.make_sparse_tensor(
        numpy_helper.from_array(np.array([1.0], np.float32)), numpy_helper.from_array(np.array([0])), [2])))
    a = attrs_to_json(node)
    assert a["i"] == 3 and type(a["i"]) is int
    assert a["f"] == 0.5 and a["s"] == "héllo"
    assert a["ints"] == [1, -2] and a["floats"] == [0.25, 1.0] and a["strings"] == ["a", "b"]
    assert a["t"] == {"tensor": {"dtype": "int16", "shape": [2, 3], "data": [0, 1, 2, 3, 4, 5]}}
    assert a["g"] == {"unsupported": "GRAPH"} and a["gs"] == {"unsupported": "GRAPHS"}
    assert a["tp"] == {"unsupported": "TYPE_PROTO"} and a["sp"] == {"unsupported": "SPARSE_TENSOR"}
    back = json.loads(json.dumps(a))
    assert back == a
    arr = tensor_attr(back["t"])
    assert arr.dtype == np.int16 and arr.tolist() == [[0, 1, 2], [3, 4, 5]]


@pytest.mark.parametrize("arr", [np.array(2.5, np.float32), np.array([1, 0, 1], bool), np.arange(4, dtype=np.uint64),
                                 np.array([[np.nan, -np.inf]], np.float64), np.array([1.5, -2], np.float16),
                                 np.zeros((0, 3), np.int8)])
def test_tensor_attr_roundtrip(arr):
    v = attrs_to_json(helper.make_node("ConstantOfShape", ["s"], ["y"], value=numpy_helper.from_array(arr)))["value"]
    back = tensor_attr(json.loads(json.dumps(v)))
    assert back.dtype == arr.dtype and back.shape == arr.shape
    np.testing.assert_array_equal(back, arr)


def test_tensor_attr_errors():
    bf = onnx.TensorProto(data_type=onnx.TensorProto.BFLOAT16, dims=[1], int32_data=[16256])
    a = attrs_to_json(helper.make_node("ConstantOfShape", ["s"], ["y"], value=bf))
    assert "unsupported" in a["value"] and "BFLOAT16" in a["value"]["unsupported"]
    assert not F.numpy_supports("ConstantOfShape", a, 13)[0]
    with pytest.raises(FC.CpuKernelError, match="values for shape"):
        tensor_attr({"tensor": {"dtype": "float32", "shape": [3], "data": [1.0]}})
    with pytest.raises(FC.UnsupportedKernel):
        tensor_attr({"tensor": {"dtype": "complex64", "shape": [1], "data": [1.0]}})
    with pytest.raises(FC.CpuKernelError, match="not a tensor"):
        tensor_attr([1, 2])


# ============================================================================ run_onnxruntime
def _add_model(c: float = 1.0, with_optional: bool = False) -> bytes:
    inputs = [helper.make_tensor_value_info("x", onnx.TensorProto.FLOAT, [2]),
              helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, [2])]
    nodes = [helper.make_node("Add", ["x", "y"], ["s"]), helper.make_node("Mul", ["s", "k"], ["z"])]
    init = [numpy_helper.from_array(np.array(c, np.float32), "k")]
    outs = [helper.make_tensor_value_info("z", onnx.TensorProto.FLOAT, [2]),
            helper.make_tensor_value_info("s", onnx.TensorProto.FLOAT, [2])]
    g = helper.make_graph(nodes, "add", inputs, outs, init)
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)], ir_version=8).SerializeToString()


@needs_ort
def test_run_onnxruntime_and_cache(monkeypatch):
    assert F.onnxruntime_available()
    x, y = np.array([1, 2], np.float32), np.array([3, 4], np.float32)
    m = _add_model(2.0)
    z, s = F.run_onnxruntime(m, [x, y])
    assert z.tolist() == [8, 12] and s.tolist() == [4, 6]
    key = next(k for k, v in F._sessions.items() if v is F._session(m))
    first = F._sessions[key]
    F.run_onnxruntime(m, [x, None, y])                 # more entries than inputs: the None is dropped
    assert F._sessions[key] is first                   # cached, not rebuilt
    with pytest.raises(FC.CpuKernelError, match="has 2 inputs"):
        F.run_onnxruntime(m, [x])
    with pytest.raises(FC.CpuKernelError, match="onnxruntime failed"):
        F.run_onnxruntime(m, [x, np.zeros(3, np.float32)])
    with pytest.raises(FC.CpuKernelError, match="cannot load"):
        F.run_onnxruntime(b"not a model", [x])
    monkeypatch.setattr(F, "_SESSION_CACHE_SIZE", 3)
    for c in range(5):
        F.run_onnxruntime(_add_model(float(c) + 10), [x, y])
    assert len(F._sessions) == 3 and key not in F._sessions


def test_onnxruntime_missing(monkeypatch):
    real_import = builtins.__import__

    def fake_import(name, *args, **kwargs):
        if name == "onnxruntime" or name.startswith("onnxruntime."):
            raise ImportError("No module named 'onnxruntime'")
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", fake_import)
    monkeypatch.delitem(sys.modules, "onnxruntime", raising=False)
    assert F.onnxruntime_available() is False
    msg = r"needs onnxruntime, which is not installed \(pip install onnxruntime\)"
    with pytest.raises(FC.CpuKernelError, match=msg):
        F.run_onnxruntime(_add_model(), [np.zeros(2, np.float32)] * 2)
    # numpy kernels keep working
    assert F.run_numpy("Relu", {}, [np.array([-1.0, 1.0], np.float32)], 13)[0].tolist() == [0, 1]


def test_float_ops_imports_only_numpy():
    """The module and its op-family modules load (and run a Conv) in a process where onnx and
    onnxruntime cannot be imported."""
    code = """
import importlib.abc, sys
class Block(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.split('.')[0] in ('onnx', 'onnxruntime', 'scipy', 'torch'):
            raise ImportError('blocked ' + name)
        return None
sys.meta_path.insert(0, Block())
import vtaforge.runtime.float_ops as m
import numpy as np
x, w = np.ones((1, 2, 3, 3), np.float32), np.ones((4, 2, 3, 3), np.float32)
y = m.run_numpy('Conv', {'pads': [1, 1, 1, 1]}, [x, w], 13)
assert y[0].shape == (1, 4, 3, 3) and y[0][0, 0, 1, 1] == 18
assert not m.onnxruntime_available()
print('ok', sorted(k for k in sys.modules if k.split('.')[0] in ('onnx', 'onnxruntime')))
"""
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "ok []"
