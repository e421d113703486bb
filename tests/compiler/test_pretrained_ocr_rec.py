"""PP-OCRv4's text recogniser (dynamic width, ``[N, 3, 48, ?]``) end to end.

``ch_PP-OCRv4_rec_infer.onnx`` ships in the ``rapidocr-onnxruntime`` wheel.  Its SVTR
neck reshapes with ``[0, 120, -1]`` targets and Shape -> Gather -> Concat chains on the
symbolic width (it failed with "cannot reshape float32[N,120,H,W] to [0, 120, -1]
(symbolic dims)"); it must compile at the data's width, through ``vtaforge run`` too, and
agree with onnxruntime's float model (cosine of the [N, T, 6625] probabilities, and the
per-step argmax that CTC decoding reads).

The imported float graph is exact (cosine 1.0 vs onnxruntime on a rendered line).  The
int8 compiled model with two calibration lines: measured cosine 0.944, per-step argmax
agreement 0.925 (2026-12-07; was 0.54 / 0.53 before per-channel weights, the error floor and
the guarded bias correction), held here as floors with margin.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from pretrained import find_ocr_model, preprocess_cls, render_text_lines, run_ort_float

pytest.importorskip("PIL", reason="Pillow renders the text lines")

MODEL = find_ocr_model("rec")
if MODEL is None:
    pytest.skip("rapidocr-onnxruntime (PyPI) is not installed: it ships ch_PP-OCRv4_rec_infer.onnx",
                allow_module_level=True)

REC_SHAPE = (3, 48, 320)
MIN_COSINE = 0.85               # int8, measured 0.944 (see the module docstring)
MIN_ARGMAX_AGREEMENT = 0.8      # measured 0.925


def _cos(a, b) -> float:
    a, b = a.reshape(-1).astype(np.float64), b.reshape(-1).astype(np.float64)
    return float(a @ b / np.linalg.norm(a) / np.linalg.norm(b))


@pytest.fixture(scope="module")
def lines():
    imgs, _ = render_text_lines(3, seed=2, rotated=False)
    x = preprocess_cls(imgs, REC_SHAPE)
    return x[:1], x[1:]


def test_rec_float_graph_is_exact(lines):
    from vtaforge.compiler import import_onnx, optimize, run_float

    x = lines[0]
    fg = optimize(import_onnx(str(MODEL), input_shapes={"x": (None,) + REC_SHAPE}))
    got = run_float(fg, {"x": x})[fg.outputs[0]]
    want = run_ort_float(MODEL, x)
    assert _cos(got, want) > 0.9999
    assert np.array_equal(got.argmax(-1), want.argmax(-1))


@pytest.mark.slow
def test_rec_compiles_and_agrees(lines):
    from vtaforge.compiler.compile import compile_model
    from vtaforge.runtime.executor import Executor
    from vtaforge.runtime.fsim import FsimDevice

    x, calib = lines
    cm = compile_model(str(MODEL), calib, "pynq")
    assert any(s.target == "vta" for s in cm.steps)
    ex = Executor(cm, FsimDevice(cm.config))
    try:
        got = ex.run(x)[cm.outputs[0]]
    finally:
        ex.close()
    want = run_ort_float(MODEL, x)
    assert got.shape == want.shape == (1, 40, 6625)
    agree = float(np.mean(got.argmax(-1) == want.argmax(-1)))
    assert _cos(got, want) >= MIN_COSINE, (_cos(got, want), agree)
    assert agree >= MIN_ARGMAX_AGREEMENT, (_cos(got, want), agree)


@pytest.mark.slow
def test_rec_via_cli(tmp_path, lines):
    x, calib = lines
    np.save(tmp_path / "x.npy", x)
    np.save(tmp_path / "c.npy", calib)
    exe = Path(sys.executable).parent / "vtaforge"
    r = subprocess.run([str(exe), "run", "--model", str(MODEL), "--input", str(tmp_path / "x.npy"),
                        "--calibrate", str(tmp_path / "c.npy"), "--output", str(tmp_path / "y.npy")],
                       capture_output=True, text=True)
    assert r.returncode == 0, (r.stdout + r.stderr)[-2000:]
    got = np.load(tmp_path / "y.npy")
    want = run_ort_float(MODEL, x)
    assert got.shape == want.shape
    assert _cos(got, want) >= MIN_COSINE


@pytest.mark.slow
def test_rec_guarded_bias_correction_and_error_floor(monkeypatch):
    """On eight calibration lines, the default pipeline's guarded bias correction never
    lowers the agreement of the graph's output with float on those lines, where correcting
    every layer unconditionally lowers it (measured 0.89 -> 0.64: after accumulated upstream
    error a layer's mean error is mostly other layers'); and held-out lines agree with
    onnxruntime float at cosine >= 0.9 (measured 0.96; was 0.55 with unguarded correction)."""
    import copy

    import vtaforge.compiler.compile as comp
    from vtaforge.compiler.compile import compile_model
    from vtaforge.compiler.reference import run_float, run_quantized

    qmod = sys.modules["vtaforge.compiler.quantize"]
    seen = {}
    real_bc = comp.bias_correct

    def recording(fg, q, feeds, **kw):
        seen.update(fg=fg, before=copy.deepcopy(q), feeds=feeds)
        return real_bc(fg, q, feeds, **kw)
    monkeypatch.setattr(comp, "bias_correct", recording)
    imgs, _ = render_text_lines(8, seed=1, rotated=False)
    calib = preprocess_cls(imgs, REC_SHAPE)
    cm = compile_model(str(MODEL), calib, "pynq")
    fg, before, feeds = seen["fg"], seen["before"], seen["feeds"]
    batches = feeds if isinstance(feeds, list) else [feeds]
    fenvs = [run_float(fg, f, keep_all=True) for f in batches]
    base = qmod.output_agreement(before, batches, fenvs)
    assert qmod.output_agreement(cm.qgraph, batches, fenvs) >= base
    unguarded = copy.deepcopy(before)
    qmod.bias_correct(fg, unguarded, feeds, groups=0)
    assert qmod.output_agreement(unguarded, batches, fenvs) < base - 0.05

    test_imgs, _ = render_text_lines(3, seed=2, rotated=False)
    x = preprocess_cls(test_imgs, REC_SHAPE)
    got = run_quantized(cm.qgraph, {cm.qgraph.inputs[0]: x})[cm.qgraph.outputs[0]]
    want = run_ort_float(MODEL, x)
    assert _cos(got, want) >= 0.9, _cos(got, want)
