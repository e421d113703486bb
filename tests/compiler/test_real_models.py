"""Models written by the real tools (PyTorch's TorchScript and dynamo exporters,
onnxruntime's static quantizer; ``tests/compiler/real_models/``) run whole through the
compiler -- VTA where it can, the CPU elsewhere -- and match onnxruntime.

Oracles: onnxruntime on the same file (float exports; QDQ/QOperator files with graph
optimizations off, so its fake-quant arithmetic is exact), and the independent integer
reference (``run_quantized``) for the int8 tensor VTA produces.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import onnxruntime as ort
import pytest

from vtaforge.compiler.compile import compile_model
from vtaforge.compiler.reference import run_quantized
from vtaforge.runtime.executor import Executor
from vtaforge.runtime.fsim import FsimDevice

HERE = Path(__file__).parent / "real_models"
MANIFEST = json.loads((HERE / "manifest.json").read_text())
FILES = [f for f in MANIFEST["files"]]
INPUTS = np.load(HERE / "inputs.npz")


def _ort(path: Path, x: np.ndarray, exact: bool) -> np.ndarray:
    so = ort.SessionOptions()
    if exact:
        so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    s = ort.InferenceSession(str(path), so, providers=["CPUExecutionProvider"])
    return s.run(None, {s.get_inputs()[0].name: x})[0]


def _cos(a, b) -> float:
    a, b = a.ravel().astype(np.float64), b.ravel().astype(np.float64)
    return float(a @ b / max(np.linalg.norm(a) * np.linalg.norm(b), 1e-30))


@pytest.mark.parametrize("entry", FILES, ids=[f["file"] for f in FILES])
def test_real_model_runs_whole_and_matches_onnxruntime(entry):
    path = HERE / entry["file"]
    x = INPUTS[entry["source_net"]]                      # [4, 1, C, H, W]
    rng = np.random.default_rng(7)
    calib = rng.normal(0, 1, (16,) + x.shape[2:]).astype(np.float32)
    cm = compile_model(str(path), calib, "pynq")
    assert {s.target for s in cm.steps} <= {"vta", "cpu"}
    quant = entry["quantization"] is not None
    ex = Executor(cm, FsimDevice(cm.config))
    out = cm.outputs[0]
    for xi in x:
        want = _ort(path, xi, exact=quant)
        got = ex.run(xi, keep=True)
        y = got[out]
        assert y.shape == want.shape
        cos = _cos(y, want)
        assert cos >= (0.95 if quant else 0.97), (entry["file"], cos)
        ref = run_quantized(cm.qgraph, {cm.inputs[0]: xi}, keep_all=True)
        for s in cm.steps:            # every int8 tensor VTA wrote equals the integer oracle
            if s.target == "vta":
                np.testing.assert_array_equal(got[s.outputs[0]], ref[s.outputs[0]], err_msg=s.name)
    if not entry["file"].startswith("misc_ops"):
        # every conv/dense MAC of the ResNet/MobileNet-style nets runs on VTA, QOperator
        # files included (their QLinear* ops become real-valued twins between fake-quant pairs)
        assert "100.0% of MACs on VTA" in cm.placement_table().splitlines()[-1], cm.placement_table()
