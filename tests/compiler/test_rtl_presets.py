"""The fast presets (hw/config.py ``FAST_PRESETS``) RTL-verified: each preset's core is
built (Verilator, the shared build cache) and compiled layers run on it bit for bit against
fsim, through the executor: a 3x3 conv with its per-channel requantize on the REQ engine, a
strided 1x1 conv, a residual add and the max-pool (the engine-zeroed GEMM-copy form where
BLOCK_IN == BLOCK_OUT, forwarded on pynq-fast; the ACC8 form on the others), and the dense
layer.  ``slow``: a pynq-sized build takes a minute or more the first
time; later runs reuse the cached build.  The whole networks on these cores are
bench/rtl_resnet18.py's (README.md "Which core")."""

from __future__ import annotations

import numpy as np
import pytest

from rtl_compare import rtl_equals_fsim
from small_models import resnet_kinds_model
from vtaforge.compiler.compile import compile_model
from vtaforge.compiler.lower_eltwise import pool_copy_ok
from vtaforge.hw.config import FAST_PRESETS, preset

pytestmark = [pytest.mark.rtl, pytest.mark.slow]

pytest.importorskip("vtaforge.runtime.rtl")


@pytest.mark.parametrize("name", list(FAST_PRESETS.values()))
def test_fast_preset_rtl_equals_fsim(name):
    cfg = preset(name)
    x = np.random.default_rng(1).standard_normal((1, 32, 24, 24)).astype(np.float32)
    cm = compile_model(resnet_kinds_model(), x, cfg)
    on_vta = {s.op for s in cm.steps if s.target == "vta"}
    assert {"qconv2d", "qmax_pool", "qadd", "qdense"} <= on_vta, \
        [(s.name, s.target, s.reason) for s in cm.steps]
    pool = [s for s in cm.steps if s.op == "qmax_pool"][0]
    assert bool(pool.trace.stats.get("gemm_copy")) == pool_copy_ok(cfg)
    rtl_equals_fsim(cm, x)
