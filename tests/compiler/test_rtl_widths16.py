"""An int16 core on Verilator: a small conv model compiled for ``LOG_INP_WIDTH`` =
``LOG_WGT_WIDTH`` = 4 (the ``inp16_wgt16`` config of tests/runtime/test_randprog.py, so the
Verilator build is shared) equals fsim step for step, and the int64 oracle of
test_widths16.py."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pytest

from vtaforge.compiler.compile import compile_model
from vtaforge.hw.config import preset
from vtaforge.runtime.executor import Executor
from vtaforge.runtime.fsim import FsimDevice

pytestmark = pytest.mark.rtl

rtl = pytest.importorskip("vtaforge.runtime.rtl")

sys.path.insert(0, str(Path(__file__).parent))
from test_widths16 import _assert_exact, _conv_model  # noqa: E402
from _onnx_util import rand  # noqa: E402

CFG = preset("tiny").replace(LOG_INP_WIDTH=4, LOG_WGT_WIDTH=4, LOG_INP_BUFF_SIZE=9,
                             LOG_WGT_BUFF_SIZE=9)


def rtl_equals_fsim(cm, cfg, x) -> dict:
    """Run ``cm`` on fsim and on the Verilated ``cfg`` core; every kept tensor must be equal.
    Returns the rtl outputs."""
    f = Executor(cm, FsimDevice(cfg)).run(x, keep=True)
    dev = rtl.RtlDevice(cfg, 16 << 20, progress=False)
    try:
        r = Executor(cm, dev).run(x, keep=True)
    finally:
        dev.close()
    assert set(f) == set(r)
    for k in f:
        np.testing.assert_array_equal(np.asarray(r[k]), np.asarray(f[k]), err_msg=k)
    return r


def test_conv_model_int16_rtl_equals_fsim_and_oracle():
    cm = compile_model(_conv_model(), rand(16, 3, 10, 10, seed=7), CFG)
    assert [s.op for s in cm.steps if s.target == "vta"] == ["qconv2d", "qconv2d", "qdense"]
    x = rand(2, 3, 10, 10, seed=8, scale=1.3)
    _assert_exact(cm, rtl_equals_fsim(cm, CFG, x), x, min_vta=3)
