"""An int4-activation core on Verilator: a small conv model compiled for the A4W4 core of
tests/runtime/test_int4_activations.py (the same config object, so the Verilator build is
shared with its raw-program test) equals fsim step for step and the int64 oracle of
test_widths4a.py; so does the residual add in its GEMM form."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from vtaforge.compiler.compile import compile_model

pytestmark = pytest.mark.rtl

rtl = pytest.importorskip("vtaforge.runtime.rtl")

sys.path.insert(0, str(Path(__file__).parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "runtime"))
from test_int4_activations import A4W4  # noqa: E402
from test_rtl_widths16 import rtl_equals_fsim  # noqa: E402
from test_widths16 import _conv_model  # noqa: E402
from test_widths4a import _assert_exact, _residual_model  # noqa: E402
from _onnx_util import rand  # noqa: E402


def test_conv_model_int4_activations_rtl_equals_fsim_and_oracle():
    cm = compile_model(_conv_model(), rand(16, 3, 10, 10, seed=7), A4W4)
    assert [s.op for s in cm.steps if s.target == "vta"] == ["qconv2d", "qconv2d", "qdense"]
    x = rand(2, 3, 10, 10, seed=8, scale=3.0)
    _assert_exact(cm, rtl_equals_fsim(cm, A4W4, x), x, min_vta=3)


def test_residual_add_int4_gemm_rtl_equals_fsim_and_oracle():
    cm = compile_model(_residual_model(), rand(16, 4, 6, 6, seed=17), A4W4)
    assert [s.op for s in cm.steps if s.target == "vta"] == ["qconv2d", "qconv2d", "qadd",
                                                             "qconv2d"]
    x = rand(2, 4, 6, 6, seed=18, scale=2.0)
    _assert_exact(cm, rtl_equals_fsim(cm, A4W4, x), x, min_vta=4)
