"""A real pretrained CNN end to end: PaddleOCR's text-direction classifier.

The model (``ch_ppocr_mobile_v2.0_cls_infer.onnx``, MobileNetV3-small x0.35, 53 Conv,
hard-swish and squeeze-excite blocks, opset 11) ships inside the PyPI wheel of
``rapidocr-onnxruntime``; nothing is downloaded at run time.  The inputs are text lines
rendered with Pillow, upright and rotated by 180 degrees; the classifier tells ``'0'``
from ``'180'``.  The compiled model (VTA where it can, the CPU for the rest) must run whole
and take the same decisions as onnxruntime's float model.

Skipped when the package is not installed (it is located without being imported, since
importing it imports cv2).
"""

from __future__ import annotations

import numpy as np
import pytest

from pretrained import CLS_SHAPE, find_ocr_model, preprocess_cls, render_text_lines, run_ort_float

pytest.importorskip("PIL", reason="Pillow renders the text lines (a dependency of rapidocr-onnxruntime)")

MODEL = find_ocr_model("cls")
if MODEL is None:
    pytest.skip("rapidocr-onnxruntime (PyPI) is not installed: it ships the PP-OCR text-direction "
                "classifier ch_ppocr_mobile_v2.0_cls_infer.onnx this test compiles",
                allow_module_level=True)

N_CALIB_LINES = 8          # 16 calibration images (upright + rotated), seed 1
N_TEST_LINES = 16          # 32 test images (upright + rotated), seed 0
MIN_AGREEMENT = 0.90       # compiled argmax == float argmax
MAX_ACCURACY_DROP = 0.07   # orientation accuracy, float minus compiled


@pytest.fixture(scope="module")
def data():
    calib_imgs, _ = render_text_lines(N_CALIB_LINES, seed=1)
    test_imgs, labels = render_text_lines(N_TEST_LINES, seed=0)
    calib, test = preprocess_cls(calib_imgs), preprocess_cls(test_imgs)
    return calib, test, labels


@pytest.fixture(scope="module")
def float_out(data):
    return run_ort_float(MODEL, data[1])


@pytest.fixture(scope="module")
def compiled(data):
    from vtaforge.compiler.compile import compile_model

    return compile_model(str(MODEL), data[0], "pynq")


@pytest.fixture(scope="module")
def compiled_out(compiled, data):
    from vtaforge.runtime.executor import Executor
    from vtaforge.runtime.fsim import FsimDevice

    ex = Executor(compiled, FsimDevice(compiled.config))
    try:
        return ex.run(data[1])[compiled.outputs[0]]
    finally:
        ex.close()


def test_inputs_are_the_package_format(data):
    calib, test, labels = data
    assert calib.shape == (2 * N_CALIB_LINES,) + CLS_SHAPE and calib.dtype == np.float32
    assert test.shape == (2 * N_TEST_LINES,) + CLS_SHAPE
    assert test.min() >= -1.0 and test.max() <= 1.0
    assert labels.tolist() == [0] * N_TEST_LINES + [1] * N_TEST_LINES
    # the rotated half is the upright half turned by 180 degrees (before the resize / pad)
    imgs, _ = render_text_lines(2, seed=0)
    assert np.array_equal(imgs[2], imgs[0][::-1, ::-1])


def test_float_model_reads_the_orientation(data, float_out):
    """Sanity of the rendered data and the preprocessing: the pretrained float model gets
    the orientation right (measured: 99.5 % over seeds 0-9, 1280 images)."""
    labels = data[2]
    assert float_out.shape == (len(labels), 2)
    np.testing.assert_allclose(float_out.sum(1), 1.0, atol=1e-4)
    acc = float(np.mean(float_out.argmax(1) == labels))
    assert acc >= 0.9, f"float classifier accuracy {acc:.3f} on the rendered lines"


def test_compiled_model_is_placed_whole(compiled):
    pl = compiled.placement()
    assert pl, "no steps"
    bad = [p for p in pl if p[2] not in ("vta", "cpu")]
    assert not bad, f"steps without a target: {bad[:5]}"
    n_vta = sum(p[2] == "vta" for p in pl)
    assert n_vta > 0, f"nothing placed on VTA ({len(pl)} CPU steps)"


def test_compiled_model_agrees_with_float(data, float_out, compiled_out):
    labels = data[2]
    assert compiled_out.shape == float_out.shape
    assert np.all(np.isfinite(compiled_out))
    got, want = compiled_out.argmax(1), float_out.argmax(1)
    agree = float(np.mean(got == want))
    acc_f, acc_c = float(np.mean(want == labels)), float(np.mean(got == labels))
    msg = (f"agreement {agree:.3f} (min {MIN_AGREEMENT}); accuracy float {acc_f:.3f}, "
           f"compiled {acc_c:.3f}; disagreeing images {np.flatnonzero(got != want).tolist()}")
    assert agree >= MIN_AGREEMENT, msg
    assert acc_c >= acc_f - MAX_ACCURACY_DROP, msg
