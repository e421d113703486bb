"""Liveness planning of the executor's device activation buffers.

Oracles: the compiler's integer reference (a buffer shared too early corrupts a later
step's input, which the bit-exact comparison catches, e.g. the residual adds of ResNet),
and an interval check written here on the plan's lifetimes.
"""

from __future__ import annotations

import numpy as np
import pytest

from vtaforge.compiler.compile import compile_model
from vtaforge.compiler.reference import run_quantized
from vtaforge.compiler.zoo import resnet18
from vtaforge.runtime.executor import Executor, plan_memory
from vtaforge.runtime.fsim import FsimDevice


@pytest.fixture(scope="module")
def resnet():
    m = resnet18(32)
    x = np.random.default_rng(0).standard_normal((3, 3, 32, 32)).astype(np.float32)
    return compile_model(m, x[:2], "pynq"), x


def test_shared_buffers_bit_exact_any_batch_order(resnet):
    cm, x = resnet
    ex = Executor(cm, FsimDevice(cm.config, mem_bytes=1 << 27))
    for n in (1, 3, 1):                              # shapes interleaved: cached programs
        out = ex.run(x[:n])
        ref = run_quantized(cm.qgraph, {"input": x[:n]}, keep_all=True)
        q = [s for s in cm.steps if s.outputs[0] == cm.outputs[0]][0].inputs[0]
        np.testing.assert_array_equal(out[cm.outputs[0]], ref[cm.outputs[0]])
        kept = ex.run(x[:n], keep=True)
        np.testing.assert_array_equal(kept[q], ref[q])
        for s in cm.steps:
            if s.target == "vta":
                np.testing.assert_array_equal(kept[s.outputs[0]], ref[s.outputs[0]], s.name)
    mr = ex.memory_report()
    assert mr["activations_peak_live"] <= mr["activations"] < mr["activations_unshared"]
    assert mr["total"] == mr["constants"] + mr["activations"] + mr["programs"]


def test_plan_never_shares_overlapping_lifetimes(resnet):
    cm, _ = resnet
    plan = plan_memory(cm, 2)
    by_buf: dict = {}
    for k, b in plan.assign.items():
        by_buf.setdefault(b, []).append(plan.lifetimes[k])
    for ivs in by_buf.values():
        ivs.sort()
        for (a0, a1), (b0, b1) in zip(ivs, ivs[1:]):
            assert a1 < b0
    assert len(plan.sizes) < len(plan.assign)      # something is shared
    for k, b in plan.assign.items():
        st = cm.steps[k[0]]
        assert plan.sizes[b] >= 2 * st.layouts[k[1]].block_bytes
