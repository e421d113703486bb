"""An int4-weight core (``LOG_WGT_WIDTH`` 2, DSP-packed multiplier pairs) on Verilator: the raw int4 GEMM of
test_widths4.py against its einsum oracle, and a small conv model compiled for the core
equal to fsim step for step and to the int64 oracle of test_widths16.py."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

from vtaforge.compiler.compile import compile_model
from vtaforge.hw.config import preset

pytestmark = pytest.mark.rtl

rtl = pytest.importorskip("vtaforge.runtime.rtl")

sys.path.insert(0, str(Path(__file__).parent))
from test_widths16 import _assert_exact, _conv_model  # noqa: E402
from test_widths4 import gemm_int4_program  # noqa: E402
from test_rtl_widths16 import rtl_equals_fsim  # noqa: E402
from _onnx_util import rand  # noqa: E402
from programs import read_out  # noqa: E402

#: DSP_PACKING 2 (tiny has 1): the int4 weights go through the packed multiplier pair
CFG = preset("tiny").replace(LOG_WGT_WIDTH=2, LOG_INP_BUFF_SIZE=9, LOG_WGT_BUFF_SIZE=9,
                             DSP_PACKING=2)


@pytest.fixture(scope="module")
def model():
    return rtl.build_model(CFG, progress=False)


def test_raw_int4_gemm_rtl(model):
    dram, ia, n, ao, want = gemm_int4_program(CFG)
    rtl.run_raw(CFG, dram, ia, n, progress=False, model=model)
    np.testing.assert_array_equal(read_out(CFG, dram, ao, 1)[0], want)


def test_conv_model_int4_rtl_equals_fsim_and_oracle(model):
    cm = compile_model(_conv_model(), rand(16, 3, 10, 10, seed=7), CFG)
    assert [s.op for s in cm.steps if s.target == "vta"] == ["qconv2d", "qmax_pool", "qconv2d",
                                                             "qdense"]
    x = rand(2, 3, 10, 10, seed=8, scale=1.3)
    _assert_exact(cm, rtl_equals_fsim(cm, CFG, x), x, min_vta=4, bits=8)
