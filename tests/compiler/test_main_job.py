"""The main job: digits CNN on VTA (fsim, pynq) -- accuracy, bit-exactness, placement (BR-11),
and ResNet-18 C2-C11 / MobileNet D1-D9 / whole networks at reduced size."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import onnxruntime as ort
import pytest

from vtaforge.compiler.compile import compile_model
from vtaforge.compiler.models import DIGITS_ONNX, load_digits_split
from vtaforge.compiler.reference import run_quantized
from vtaforge.compiler.zoo import (MOBILENET_WORKLOADS, RESNET18_WORKLOADS, mobilenet_v1,
                                   resnet18, workload_model)
from vtaforge.runtime.executor import Executor
from vtaforge.runtime.fsim import FsimDevice


@pytest.fixture(scope="module")
def digits():
    xtr, ytr, xte, yte = load_digits_split()
    cm = compile_model(str(DIGITS_ONNX), xtr, "pynq")
    ex = Executor(cm, FsimDevice(cm.config))
    outs = [ex.run(xte[i:i + 100], keep=True) for i in range(0, len(xte), 100)]
    return cm, ex, outs, xte, yte


def test_every_conv_dense_on_vta_with_gemm(digits):
    cm, ex, _, _, _ = digits
    lin = [s for s in cm.steps if s.op in ("qconv2d", "qdense")]
    assert len(lin) == 4
    for s in lin:
        assert s.target == "vta", s.reason
        assert ex.stats[s.name].gemm_uops > 0, s.name          # BR-11
    assert all(s.target == "vta" for s in cm.steps if s.op == "qmax_pool")


def test_bit_exact_vs_integer_reference(digits):
    cm, _, outs, xte, _ = digits
    ref = run_quantized(cm.qgraph, {"input": xte}, keep_all=True)
    for s in cm.steps:
        if s.target == "vta":
            got = np.concatenate([o[s.outputs[0]] for o in outs])
            np.testing.assert_array_equal(got, ref[s.outputs[0]], err_msg=s.name)


def test_accuracy_within_one_point_of_float(digits):
    cm, _, outs, xte, yte = digits
    sess = ort.InferenceSession(str(DIGITS_ONNX), providers=["CPUExecutionProvider"])
    fl = sess.run(None, {"input": xte})[0]
    acc_f = np.mean(fl.argmax(1) == yte)
    acc_v = np.mean(np.concatenate([o["logits"] for o in outs]).argmax(1) == yte)
    assert acc_f > 0.9
    assert abs(acc_v - acc_f) <= 0.01, (acc_v, acc_f)


def _layer(wl, div):
    h = max(wl.height // div, wl.kernel_h)
    w2 = replace(wl, height=h, width=h)
    m = workload_model(w2)
    x = np.random.default_rng(0).standard_normal((1, wl.in_channels, h, h)).astype(np.float32)
    cm = compile_model(m, x, "pynq")
    ex = Executor(cm, FsimDevice(cm.config))
    out = ex.run(x, keep=True)
    ref = run_quantized(cm.qgraph, {"input": x}, keep_all=True)
    conv = [s for s in cm.steps if s.op == "qconv2d"]
    assert conv and all(s.target == "vta" for s in conv)
    for s in cm.steps:
        if s.target == "vta":
            np.testing.assert_array_equal(out[s.outputs[0]], ref[s.outputs[0]], err_msg=s.name)
    assert ex.stats[conv[0].name].gemm_uops > 0


@pytest.mark.parametrize("wl", RESNET18_WORKLOADS[1:], ids=lambda w: w.name)
def test_resnet18_layer_bit_exact(wl):
    _layer(wl, 4)        # spatial size / 4


@pytest.mark.parametrize("wl", MOBILENET_WORKLOADS, ids=lambda w: w.name)
def test_mobilenet_layer_bit_exact(wl):
    _layer(wl, 4)


@pytest.mark.slow
@pytest.mark.parametrize("name,fn", [("resnet18", resnet18), ("mobilenet_v1", mobilenet_v1)])
def test_whole_network_reduced_size(name, fn):
    """Whole network at 64x64 on fsim: every VTA step bit-exact vs the integer reference,
    and the float output close to onnxruntime: cosine similarity >= 0.98."""
    size = 64
    m = fn(size)
    x = np.random.default_rng(0).standard_normal((4, 3, size, size)).astype(np.float32)
    cm = compile_model(m, x, "pynq")
    assert all(s.target == "vta" for s in cm.steps if s.op in ("qconv2d", "qdense", "qadd"))
    ex = Executor(cm, FsimDevice(cm.config, mem_bytes=1 << 30))
    out = ex.run(x[:2], keep=True)
    ref = run_quantized(cm.qgraph, {"input": x[:2]}, keep_all=True)
    for s in cm.steps:
        if s.target == "vta":
            np.testing.assert_array_equal(out[s.outputs[0]], ref[s.outputs[0]], err_msg=s.name)
    sess = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"])
    fl = sess.run(None, {"input": x[:2]})[0].reshape(2, -1)
    v = out[cm.outputs[0]].reshape(2, -1)
    cos = np.sum(fl * v, 1) / np.linalg.norm(fl, axis=1) / np.linalg.norm(v, axis=1)
    assert cos.min() >= 0.98, cos
