"""onnxruntime's static quantizer on the exported nets, every setting users pick (issue 21):
per-tensor and per-channel weights x with and without ``quant_pre_process`` x uint8 and
int8 activations.  Each QDQ file runs whole (VTA where it can) and matches onnxruntime's
own QDQ output (its fake-quant arithmetic, graph optimizations off); VTA's int8 tensors
equal the integer reference.  The files are made here, offline, by onnxruntime itself (a
test dependency): nothing is downloaded.
"""

from __future__ import annotations

import itertools
from pathlib import Path

import numpy as np
import onnxruntime as ort
import pytest
from onnxruntime.quantization import (CalibrationDataReader, QuantFormat, QuantType,
                                      quantize_static)
from onnxruntime.quantization.shape_inference import quant_pre_process

from vtaforge.compiler.compile import compile_model
from vtaforge.compiler.reference import run_quantized
from vtaforge.runtime.executor import Executor
from vtaforge.runtime.fsim import FsimDevice

HERE = Path(__file__).parent / "real_models"
INPUTS = np.load(HERE / "inputs.npz")


class _Reader(CalibrationDataReader):
    def __init__(self, data):
        self.it = iter([{"input": x} for x in data])

    def get_next(self):
        return next(self.it, None)


def _ort(path, x):
    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    s = ort.InferenceSession(str(path), so, providers=["CPUExecutionProvider"])
    return s.run(None, {"input": x})[0]


def _cos(a, b) -> float:
    a, b = a.ravel().astype(np.float64), b.ravel().astype(np.float64)
    return float(a @ b / max(np.linalg.norm(a) * np.linalg.norm(b), 1e-30))


CASES = list(itertools.product(("resnet_tiny", "mobilenetv2_tiny"), (False, True),
                               (False, True), ("u8", "s8")))


@pytest.mark.parametrize("net,per_channel,pre,act", CASES,
                         ids=[f"{n}-{'pc' if p else 'pt'}-{'pre' if q else 'raw'}-{a}"
                              for n, p, q, a in CASES])
def test_quantize_static_file_runs_and_matches_onnxruntime_qdq(tmp_path, net, per_channel,
                                                               pre, act):
    src = HERE / f"{net}.ts_op13.onnx"
    x = INPUTS[net]                                   # [4, 1, C, H, W]
    calib = np.random.default_rng(3).normal(0, 1, (16,) + x.shape[2:]).astype(np.float32)
    model = src
    if pre:
        model = tmp_path / "pre.onnx"
        # (its symbolic shape pass needs sympy, not a dependency; ONNX shape inference and
        # onnxruntime's optimizer still run)
        quant_pre_process(str(src), str(model), skip_symbolic_shape=True)
    path = tmp_path / "q.onnx"
    quantize_static(str(model), str(path), _Reader(calib[:, None][:8].reshape(8, *x.shape[1:])),
                    quant_format=QuantFormat.QDQ, per_channel=per_channel,
                    activation_type=QuantType.QUInt8 if act == "u8" else QuantType.QInt8,
                    weight_type=QuantType.QInt8)
    cm = compile_model(str(path), calib, "pynq")
    assert any(s.target == "vta" for s in cm.steps), cm.placement_table()
    if per_channel:
        assert "per-channel shifts" in cm.placement_table(), cm.placement_table()
    ex = Executor(cm, FsimDevice(cm.config))
    out = cm.outputs[0]
    for xi in x[:2]:
        want = _ort(path, xi)
        got = ex.run(xi, keep=True)
        assert got[out].shape == want.shape
        # power-of-two approximations of the file's scales (pynq has no ALU MUL); measured
        # 0.9998-1.0000 over the 16 settings
        assert _cos(got[out], want) >= 0.999, (path.name, _cos(got[out], want))
        ref = run_quantized(cm.qgraph, {cm.inputs[0]: xi}, keep_all=True)
        for s in cm.steps:
            if s.target == "vta":
                np.testing.assert_array_equal(got[s.outputs[0]], ref[s.outputs[0]], err_msg=s.name)
