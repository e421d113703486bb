"""Frontend forms of issue 21 against onnxruntime: shape arithmetic on symbolic dims
(Shape -> Gather -> Unsqueeze -> Concat -> Reshape / Expand / ConstantOfShape, Slice, Cast,
Mul on shapes), Gemm with every attribute, Clip with min > max, float64 models.

Each model is compiled at a concrete input shape through ``compile_model`` (a symbolic
import first, then one at the data's shape, as the CLI does) and through
``compile_dynamic`` (specialised per shape), run on fsim, and compared with onnxruntime;
the float graph (``run_float``) must agree with onnxruntime to float rounding.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from onnx import TensorProto as TP
from onnx import helper

from vtaforge.compiler import import_onnx, optimize, run_float
from vtaforge.compiler.compile import compile_model
from vtaforge.compiler.dynamic import compile_dynamic
from vtaforge.runtime.executor import Executor
from vtaforge.runtime.fsim import FsimDevice

from _onnx_util import graph_model, run_ort, vi


_vi, _model = vi, graph_model


def _i64(*v):
    return np.array(v, np.int64)


def _run_compiled(m, x):
    cm = compile_model(m, x, "pynq")
    ex = Executor(cm, FsimDevice(cm.config))
    try:
        return cm, ex.run(x)[cm.outputs[0]]
    finally:
        ex.close()


def _check(m, x, atol):
    """compile_model + fsim vs onnxruntime within ``atol`` (int8), the float graph exactly."""
    want = run_ort(m, {m.graph.input[0].name: x})[0]
    fg = optimize(import_onnx(m, input_shapes={m.graph.input[0].name: (None,) + x.shape[1:]}))
    got_f = run_float(fg, {fg.inputs[0]: x})[fg.outputs[0]]
    np.testing.assert_allclose(got_f, want, rtol=1e-5, atol=1e-5)
    cm, got = _run_compiled(m, x)
    assert got.shape == want.shape
    np.testing.assert_allclose(got, want, atol=atol)
    return cm


X = np.random.default_rng(0).normal(size=(1, 4, 6, 8)).astype(np.float32)
SYM = ["N", 4, "H", "W"]


def _chain(gather: int, opset: int, tail: str):
    """Shape -> Gather(scalar index) -> Unsqueeze -> Concat -> ``tail`` (the KeyError of
    ddddocr's old model was opset 11's attribute-axes Unsqueeze of a folded dim)."""
    ua = {"axes": [0]} if opset < 13 else {}
    uin = ["g"] if opset < 13 else ["g", "ax"]
    inits = {"i": np.array(gather, np.int64), "m1": _i64(-1), "one": _i64(1)}
    if opset >= 13:
        inits["ax"] = _i64(0)
    nodes = [helper.make_node("Shape", ["x"], ["s"]),
             helper.make_node("Gather", ["s", "i"], ["g"], axis=0),
             helper.make_node("Unsqueeze", uin, ["gu"], **ua)]
    if tail == "Reshape":
        nodes += [helper.make_node("Concat", ["gu", "m1"], ["t"], axis=0),
                  helper.make_node("Reshape", ["x", "t"], ["y"])]
    elif tail == "Expand":      # x + Expand(mean over C, [dim, 1]) broadcast back
        nodes += [helper.make_node("Concat", ["gu", "one"], ["t"], axis=0),
                  helper.make_node("ReduceMean", ["x"], ["r"], axes=[1], keepdims=0),
                  helper.make_node("ReduceMax", ["r"], ["rm"], axes=[1, 2], keepdims=1),
                  helper.make_node("Expand", ["rm", "t"], ["y"])]
    else:                       # ConstantOfShape([dim, 1]) * a reduction of x
        nodes += [helper.make_node("Concat", ["gu", "one"], ["t"], axis=0),
                  helper.make_node("ConstantOfShape", ["t"], ["c"],
                                   value=helper.make_tensor("v", TP.FLOAT, [1], [0.5])),
                  helper.make_node("ReduceMean", ["x"], ["r"], axes=[1, 2, 3], keepdims=1),
                  helper.make_node("Reshape", ["r", "one"], ["r1"]),
                  helper.make_node("Mul", ["c", "r1"], ["y"])]
    rank = 3 if tail == "Expand" else 2
    return _model(nodes, [_vi("x", SYM)], [_vi("y", [None] * rank)], inits, opset)


@pytest.mark.parametrize("opset", [11, 13])
@pytest.mark.parametrize("tail", ["Reshape", "Expand", "ConstantOfShape"])
@pytest.mark.parametrize("gather", [0, 2, 3])
def test_shape_gather_unsqueeze_chain(opset, tail, gather):
    m = _chain(gather, opset, tail)
    want = run_ort(m, {"x": X})[0]
    _, got = _run_compiled(m, X)
    assert got.shape == want.shape
    np.testing.assert_allclose(got, want, atol=0.05)


def test_chain_slice_mul_cast_reduceprod():
    """[N, C, H, W] -> [N*2, C/2, H*W] from Shape, Slice, ReduceProd, Gather, Mul, Div, Cast."""
    nodes = [helper.make_node("Shape", ["x"], ["s"]),
             helper.make_node("Slice", ["s", "st", "en"], ["hw"]),
             helper.make_node("ReduceProd", ["hw"], ["p"], keepdims=1),
             helper.make_node("Gather", ["s", "i0"], ["n"], axis=0),
             helper.make_node("Unsqueeze", ["n", "ax"], ["nu"]),
             helper.make_node("Mul", ["nu", "two"], ["n2"]),
             helper.make_node("Gather", ["s", "i1"], ["c"], axis=0),
             helper.make_node("Unsqueeze", ["c", "ax"], ["cu"]),
             helper.make_node("Div", ["cu", "two"], ["c2"]),
             helper.make_node("Cast", ["p"], ["pc"], to=TP.INT64),
             helper.make_node("Concat", ["n2", "c2", "pc"], ["t"], axis=0),
             helper.make_node("Reshape", ["x", "t"], ["y"])]
    m = _model(nodes, [_vi("x", SYM)], [_vi("y", [None, 2, None])],
               {"st": _i64(2), "en": _i64(4), "i0": np.array(0, np.int64), "i1": np.array(1, np.int64),
                "ax": _i64(0), "two": _i64(2)})
    for x in (X, np.random.default_rng(1).normal(size=(3, 4, 5, 7)).astype(np.float32)):
        want = run_ort(m, {"x": x})[0]
        _, got = _run_compiled(m, x)
        assert got.shape == want.shape == (2 * x.shape[0], 2, x.shape[2] * x.shape[3])
        np.testing.assert_allclose(got, want, atol=0.05)


def _ocr_head():
    """A PP-OCR-rec / YOLOv8-head shape: Conv -> Reshape [0, C, -1] -> Transpose, declared
    [N, 4, H, W] (the error was 'cannot reshape float32[N,120,H,W] to [0, 120, -1]')."""
    rng = np.random.default_rng(2)
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c"], ["r"]),
             helper.make_node("Reshape", ["r", "t"], ["f"]),
             helper.make_node("Transpose", ["f"], ["y"], perm=[0, 2, 1])]
    return _model(nodes, [_vi("x", SYM)], [_vi("y", ["N", None, 16])],
                  {"w": (0.3 * rng.normal(size=(16, 4, 3, 3))).astype(np.float32),
                   "t": _i64(0, 16, -1)})


def test_symbolic_reshape_static_and_dynamic():
    m = _ocr_head()
    cm = _check(m, X, atol=0.15)
    assert any(s.target == "vta" for s in cm.steps), cm.placement_table()
    dm = compile_dynamic(m, [X, np.random.default_rng(3).normal(size=(2, 4, 10, 12)).astype(np.float32)])
    for x in (X, np.random.default_rng(4).normal(size=(1, 4, 10, 12)).astype(np.float32)):
        spec = dm.specialise(dm.shape_key(x))
        ex = Executor(spec, FsimDevice(spec.config))
        try:
            got = ex.run(x)[spec.outputs[0]]
        finally:
            ex.close()
        want = run_ort(m, {"x": x})[0]
        assert got.shape == want.shape
        np.testing.assert_allclose(got, want, atol=0.15)


def test_symbolic_import_does_not_fail():
    """The symbolic import (before the data's shape is known) types what it cannot reshape
    as a host node with symbolic dims instead of refusing the model."""
    g = import_onnx(_chain(0, 13, "Reshape"))
    (out,) = g.outputs
    assert g.types[out].rank == 2 and g.types[out].shape[0] == "N"
    import_onnx(_ocr_head())


_GEMM_CASES = {
    "transA": dict(transA=1),
    "transA_transB_alpha_beta": dict(transA=1, transB=1, alpha=0.7, beta=1.3),
    "transB_alpha_beta": dict(transB=1, alpha=0.5, beta=2.0),
    "alpha_beta": dict(alpha=-1.5, beta=0.25),
}


@pytest.mark.parametrize("case", sorted(_GEMM_CASES))
@pytest.mark.parametrize("cshape", ["scalar", "row", "vector", "column", "full", "none"])
def test_gemm_all_attributes(case, cshape):
    a = _GEMM_CASES[case]
    rng = np.random.default_rng(5)
    m_, k_, n_ = 3, 5, 4
    ashape = [k_, m_] if a.get("transA") else [m_, k_]
    bshape = [n_, k_] if a.get("transB") else [k_, n_]
    cs = {"scalar": [], "row": [1, n_], "vector": [n_], "column": [m_, 1], "full": [m_, n_]}.get(cshape)
    inits = {"b": rng.normal(size=bshape).astype(np.float32)}
    ins = ["x", "b"]
    if cs is not None:
        inits["c"] = rng.normal(size=cs).astype(np.float32)
        ins.append("c")
    m = _model([helper.make_node("Gemm", ins, ["y"], **a)], [_vi("x", ashape)], [_vi("y", [m_, n_])],
               inits)
    x = rng.normal(size=ashape).astype(np.float32)
    _check(m, x, atol=0.15)


def test_gemm_transa_with_following_ops():
    """transA=1 swaps the batch axis: the dense cannot run as a per-batch VTA program and
    runs on the CPU with the reason (the executor crashed with a reshape error)."""
    rng = np.random.default_rng(6)
    nodes = [helper.make_node("Gemm", ["x", "b", "c"], ["g"], transA=1, alpha=0.5),
             helper.make_node("Relu", ["g"], ["y"])]
    m = _model(nodes, [_vi("x", [8, 3])], [_vi("y", [3, 16])],
               {"b": rng.normal(size=(8, 16)).astype(np.float32), "c": rng.normal(size=16).astype(np.float32)})
    cm = _check(m, rng.normal(size=(8, 3)).astype(np.float32), atol=0.15)
    reasons = " ".join(p[3] if len(p) > 3 else "" for p in cm.placement())
    assert "not the model's batch" in cm.placement_table() or "batch" in reasons


@pytest.mark.parametrize("opset", [11, 13])
def test_clip_min_greater_than_max(opset):
    # (opset 6's attribute form: onnxruntime itself refuses min > max there)
    node = helper.make_node("Clip", ["x", "lo", "hi"], ["y"])
    inits = {"lo": np.array(0.5, np.float32), "hi": np.array(-0.2, np.float32)}
    m = _model([node], [_vi("x", [1, 4, 6, 8])], [_vi("y", [1, 4, 6, 8])], inits, opset)
    want = run_ort(m, {"x": X})[0]
    assert np.all(want == np.float32(-0.2))
    _, got = _run_compiled(m, X)
    np.testing.assert_array_equal(got, want)


def _f64_model():
    """float64 end to end, with a constant that overflows float32 (1e200 * 1e-200)."""
    rng = np.random.default_rng(7)
    nodes = [helper.make_node("MatMul", ["x", "w"], ["c0"]), helper.make_node("Add", ["c0", "b"], ["c"]),
             helper.make_node("Relu", ["c"], ["r"]), helper.make_node("Mul", ["r", "k"], ["m"]),
             helper.make_node("ReduceMean", ["m"], ["g"], axes=[2, 3], keepdims=0),
             helper.make_node("Mul", ["g", "k2"], ["f"]),
             helper.make_node("Gemm", ["f", "gw", "gb"], ["y"], transB=1)]
    return _model(nodes, [_vi("x", ["N", 4, 6, 8], TP.DOUBLE)], [_vi("y", ["N", 3], TP.DOUBLE)],
                  {"w": rng.normal(size=(8, 8)), "b": rng.normal(size=8), "k": np.array(1e200),
                   "k2": np.array(1e-200), "gw": rng.normal(size=(3, 4)), "gb": rng.normal(size=3)})


def test_float64_model_computes_in_float64():
    m = _f64_model()
    x = np.random.default_rng(8).normal(size=(2, 4, 6, 8))
    want = run_ort(m, {"x": x})[0]
    assert want.dtype == np.float64 and np.all(np.isfinite(want))
    _, got = _run_compiled(m, x)
    assert got.dtype == np.float64
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)


def test_cli_output_keeps_float64(tmp_path):
    import onnx

    m = _f64_model()
    x = np.random.default_rng(9).normal(size=(1, 4, 6, 8))
    onnx.save(m, tmp_path / "m.onnx")
    np.save(tmp_path / "x.npy", x)
    exe = Path(sys.executable).parent / "vtaforge"
    env = dict(os.environ, PYTHONWARNINGS="error::RuntimeWarning")
    r = subprocess.run([str(exe), "run", "--model", str(tmp_path / "m.onnx"), "--input", str(tmp_path / "x.npy"),
                        "--output", str(tmp_path / "y.npy")], capture_output=True, text=True, env=env)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "RuntimeWarning" not in r.stderr
    y = np.load(tmp_path / "y.npy")
    assert y.dtype == np.float64
    np.testing.assert_allclose(y, run_ort(m, {"x": x})[0], rtol=1e-12, atol=1e-12)
