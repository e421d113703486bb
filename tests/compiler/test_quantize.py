"""Quantization: digits accuracy, exact integer rules against numpy written here, QDQ, ResNet-18."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from onnx import helper

from vtaforge.compiler import QuantConfig, import_onnx, quantize, run_quantized
from vtaforge.compiler.ir import Node
from vtaforge.compiler.models import DIGITS_ONNX, load_digits_split
from vtaforge.compiler.zoo import resnet18

from _onnx_util import make_model, rand, run_ort


@pytest.fixture(scope="module")
def digits():
    xtr, ytr, xte, yte = load_digits_split()
    q = quantize(import_onnx(DIGITS_ONNX), xtr)
    return q, xtr, xte, yte


def test_digits_int8_accuracy_within_one_point_of_float(digits):
    q, _, xte, yte = digits
    (f,) = run_ort(onnx.load(str(DIGITS_ONNX)), {"input": xte})
    acc_f = float(np.mean(f.argmax(1) == yte))
    acc_q = float(np.mean(run_quantized(q, {"input": xte})["logits"].argmax(1) == yte))
    print(f"digits held-out accuracy: float {acc_f:.2%}, int8 {acc_q:.2%}")
    assert acc_f >= 0.95
    assert abs(acc_f - acc_q) <= 0.010


def test_digits_requantize_is_shift_and_clip_only(digits):
    q, *_ = digits
    ops = [n.op for n in q.nodes]
    assert ops == ["quantize", "qconv2d", "qmax_pool", "qconv2d", "qmax_pool", "flatten", "qdense",
                   "qdense", "dequantize"]
    for n in q.nodes:
        if "shift" in n.attrs:
            assert n.attrs["mult"] == 1
            shifts = n.attrs["shift"] if isinstance(n.attrs["shift"], tuple) else (n.attrs["shift"],)
            rounds = n.attrs["round"] if isinstance(n.attrs["round"], tuple) else (n.attrs["round"],)
            for s, r in zip(shifts, rounds, strict=True):
                assert r == (1 << (s - 1) if s > 0 else 0)
    relu_nodes = [n for n in q.nodes if n.op in ("qconv2d", "qdense")][:-1]
    assert all((n.attrs["clip_lo"], n.attrs["clip_hi"]) == (0, 127) for n in relu_nodes)
    assert (q.nodes[-2].attrs["clip_lo"], q.nodes[-2].attrs["clip_hi"]) == (-128, 127)
    for c, v in q.constants.items():
        assert v.dtype in (np.int8, np.int32), c


def _int_conv(x, w, pads, stride, groups):
    """Independent int64 direct convolution (explicit loops over the kernel window)."""
    n, c, h, wd = x.shape
    o, cg, kh, kw = w.shape
    pt, pl, pb, pr = pads
    xp = np.zeros((n, c, h + pt + pb, wd + pl + pr), np.int64)
    xp[:, :, pt:pt + h, pl:pl + wd] = x
    ho = (h + pt + pb - kh) // stride + 1
    wo = (wd + pl + pr - kw) // stride + 1
    out = np.zeros((n, o, ho, wo), np.int64)
    og = o // groups
    for g in range(groups):
        xs = xp[:, g * cg:(g + 1) * cg]
        ws = w[g * og:(g + 1) * og].astype(np.int64)
        for i in range(kh):
            for j in range(kw):
                patch = xs[:, :, i:i + stride * ho:stride, j:j + stride * wo:stride]
                out[:, g * og:(g + 1) * og] += np.einsum("nchw,oc->nohw", patch, ws[:, :, i, j])
    return out


def _requant(acc, n):
    a = n.attrs
    if isinstance(a["shift"], tuple):      # per output channel (axis 1)
        return np.concatenate([_requant(acc[:, k:k + 1], Node(n.name, n.op, n.inputs, n.outputs,
                                        dict(a, shift=s))) for k, s in enumerate(a["shift"])], 1)
    s = a["shift"]
    acc = acc + (1 << (s - 1)) if s > 0 else acc
    acc = acc >> s if s > 0 else acc << -s
    return np.clip(acc, a["clip_lo"], a["clip_hi"])


def test_reference_matches_integer_math_written_here(digits):
    q, _, xte, _ = digits
    env = run_quantized(q, {"input": xte[:50]}, keep_all=True)
    x = np.clip(np.floor(xte[:50].astype(np.float64) * 64 + 0.5), -128, 127)  # input exp is -6
    assert q.types["input_q"].exp == -6
    np.testing.assert_array_equal(env["input_q"], x)
    for n in q.nodes:
        ins = [env[i] if i in env else q.constants[i] for i in n.inputs]
        if n.op == "qconv2d":
            acc = _int_conv(ins[0], ins[1], n.attrs["pads"], n.attrs["strides"][0], n.attrs["groups"])
            want = _requant(acc + ins[2].astype(np.int64)[None, :, None, None], n)
        elif n.op == "qdense":
            acc = ins[0].astype(np.int64) @ ins[1].astype(np.int64).T + ins[2]
            want = _requant(acc, n)
        elif n.op == "qmax_pool":
            v = ins[0]
            want = np.maximum.reduce([v[:, :, i::2, j::2] for i in range(2) for j in range(2)])
        else:
            continue
        np.testing.assert_array_equal(env[n.outputs[0]], want, err_msg=n.name)
        assert env[n.outputs[0]].dtype == np.int8


def _residual_model():
    nodes = [helper.make_node("Conv", ["x", "w1"], ["a"], pads=[1, 1, 1, 1]),
             helper.make_node("Conv", ["x", "w2"], ["b"], pads=[0, 0, 0, 0]),
             helper.make_node("BatchNormalization", ["b", "g", "be", "m", "v"], ["bb"]),
             helper.make_node("Add", ["a", "bb"], ["s"]),
             helper.make_node("Relu", ["s"], ["r"]),
             helper.make_node("AveragePool", ["r"], ["p"], kernel_shape=[2, 2], strides=[2, 2]),
             helper.make_node("GlobalAveragePool", ["p"], ["y"])]
    inits = {"w1": rand(8, 4, 3, 3, seed=1, scale=0.3), "w2": rand(8, 4, 1, 1, seed=2, scale=2.0),
             "g": np.abs(rand(8, seed=3)) + 0.5, "be": rand(8, seed=4), "m": rand(8, seed=5),
             "v": np.abs(rand(8, seed=6)) + 0.5}
    return make_model(nodes, [("x", ["N", 4, 8, 8])], [("y", ["N", 8, 1, 1])], inits)


def test_residual_add_and_avg_pool_rules():
    m = _residual_model()
    x = rand(16, 4, 8, 8, seed=7)
    q = quantize(import_onnx(m), x)
    assert [n.op for n in q.nodes] == ["quantize", "qconv2d", "qconv2d", "qadd", "qavg_pool",
                                       "qavg_pool", "dequantize"]
    env = run_quantized(q, {"x": x}, keep_all=True)
    add = q.nodes[3]
    a, b = (env[i].astype(np.int64) for i in add.inputs)
    ea, eb = (q.types[i].exp for i in add.inputs)
    c = min(ea, eb)
    assert (add.attrs["lshift_a"], add.attrs["lshift_b"]) == (ea - c, eb - c)
    assert add.attrs["shift"] == q.types[add.outputs[0]].exp - c
    assert add.attrs["clip_lo"] == 0  # the ReLU folded into the clip
    want = _requant((a << (ea - c)) + (b << (eb - c)), add)
    np.testing.assert_array_equal(env[add.outputs[0]], want)
    pool = q.nodes[4]
    assert (pool.attrs["divisor"], pool.attrs["shift"], pool.attrs["round"]) == (4, 2, 2)
    v = env[pool.inputs[0]].astype(np.int64)
    s = sum(v[:, :, i::2, j::2] for i in range(2) for j in range(2))
    np.testing.assert_array_equal(env[pool.outputs[0]], np.clip((s + 2) >> 2, -128, 127))
    (f,) = run_ort(m, {"x": x})
    qy = run_quantized(q, {"x": x})["y"]
    cos = np.sum(f * qy) / (np.linalg.norm(f) * np.linalg.norm(qy))
    assert cos > 0.99


def test_batchnorm_leaves_no_multiply():
    """BR-30: conv + BN + ReLU quantizes to shift/clip only."""
    m = make_model([helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1]),
                    helper.make_node("BatchNormalization", ["c", "g", "be", "m", "v"], ["b"]),
                    helper.make_node("Relu", ["b"], ["y"])],
                   [("x", ["N", 16, 14, 14])], [("y", ["N", 16, 14, 14])],
                   {"w": rand(16, 16, 3, 3, scale=0.1), "g": rand(16, seed=1), "be": rand(16, seed=2),
                    "m": rand(16, seed=3), "v": np.abs(rand(16, seed=4)) + 0.5})
    q = quantize(import_onnx(m), rand(4, 16, 14, 14, seed=5))
    assert [n.op for n in q.nodes] == ["quantize", "qconv2d", "dequantize"]
    assert q.nodes[1].attrs["mult"] == 1


def _qdq_model():
    w = np.clip(np.rint(rand(6, 4, 3, 3, seed=1, scale=0.3) / 0.01), -127, 127).astype(np.int8)
    z = np.array(0, np.int8)
    nodes = [helper.make_node("QuantizeLinear", ["x", "sx", "z"], ["xq"]),
             helper.make_node("DequantizeLinear", ["xq", "sx", "z"], ["xd"]),
             helper.make_node("DequantizeLinear", ["wq", "sw"], ["wd"]),
             helper.make_node("Conv", ["xd", "wd"], ["c"], pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c"], ["r"]),
             helper.make_node("QuantizeLinear", ["r", "sy", "z"], ["rq"]),
             helper.make_node("DequantizeLinear", ["rq", "sy", "z"], ["y"])]
    inits = {"sx": np.array(0.03, np.float32), "sw": np.array(0.01, np.float32),
             "sy": np.array(0.06, np.float32), "z": z, "wq": w}
    return make_model(nodes, [("x", ["N", 4, 6, 6])], [("y", ["N", 6, 6, 6])], inits)


def test_qdq_model_import_and_power_of_two_approximation():
    m = _qdq_model()
    x = rand(8, 4, 6, 6, seed=9)
    g = import_onnx(m)
    (want,) = run_ort(m, {"x": x})
    from vtaforge.compiler import run_float

    np.testing.assert_allclose(run_float(g, {"x": x})["y"], want, atol=1e-5)
    q = quantize(g, x)
    rep = q.meta["quant_report"]
    got = {a.tensor: (a.exp, round(a.rel_error, 4)) for a in rep.qdq}
    # 0.03 -> 2^-5 = 0.03125 (4.17 %), 0.01 -> 2^-7 (21.9 %), 0.06 -> 2^-4 (4.17 %)
    assert sorted(got.values()) == sorted([(-5, 0.0417), (-7, 0.2187), (-4, 0.0417)])
    assert [n.op for n in q.nodes] == ["quantize", "qconv2d", "dequantize"]  # QDQ pairs absorbed
    qy = run_quantized(q, {"x": x})["y"]
    cos = np.sum(want * qy) / (np.linalg.norm(want) * np.linalg.norm(qy))
    assert cos > 0.98, cos


@pytest.mark.parametrize("cal", ["max", "percentile", "mse"])
def test_calibration_statistics_all_keep_digits_accuracy(digits, cal):
    _, xtr, xte, yte = digits
    q = quantize(import_onnx(DIGITS_ONNX), xtr[:400], QuantConfig(calibration=cal))
    acc = np.mean(run_quantized(q, {"input": xte})["logits"].argmax(1) == yte)
    assert acc >= 0.96


def test_resnet18_reduced_integer_reference_close_to_onnxruntime():
    """ResNet-18 at 32x32, seeded weights: cosine of int8 vs float logits >= 0.95 per input."""
    m = resnet18(32, seed=0)
    rng = np.random.default_rng(42)
    calib = rng.normal(0, 1, (8, 3, 32, 32)).astype(np.float32)
    x = rng.normal(0, 1, (4, 3, 32, 32)).astype(np.float32)
    q = quantize(import_onnx(m), calib)
    (f,) = run_ort(m, {"input": x})
    qy = run_quantized(q, {"input": x})["logits"]
    cos = np.sum(f * qy, 1) / (np.linalg.norm(f, axis=1) * np.linalg.norm(qy, axis=1))
    print("ResNet-18@32 cosine per input:", np.round(cos, 4))
    assert cos.min() >= 0.95
