"""Model builders and workload tables."""

from __future__ import annotations

import numpy as np
import onnx
import pytest

from vtaforge.compiler import import_onnx, optimize, run_float
from vtaforge.compiler.zoo import (MOBILENET_WORKLOADS, RESNET18_WORKLOADS, mobilenet_v1, resnet18,
                                   workload_model)

from _onnx_util import run_ort


def test_workload_tables_match_upstream():
    assert [w.name for w in RESNET18_WORKLOADS] == [f"C{i}" for i in range(1, 12)]
    assert [w.name for w in MOBILENET_WORKLOADS] == [f"D{i}" for i in range(1, 10)]
    c = {w.name: w for w in RESNET18_WORKLOADS}
    assert (c["C1"].out_height, c["C3"].out_height, c["C11"].out_height) == (112, 28, 7)
    # GOP (2 x MAC) column of vta-anchor.md section 7.2
    for name, gop in (("C1", 0.236), ("C2", 0.2312), ("C3", 0.1156), ("C4", 0.0128), ("C11", 0.2312)):
        assert round(c[name].gops, 4 if gop < 0.236 else 3) == gop, name
    d = {w.name: w for w in MOBILENET_WORKLOADS}
    assert (d["D1"].groups, d["D9"].groups, d["D9"].in_channels, d["D2"].stride_h) == (2, 64, 1024, 2)


@pytest.mark.parametrize("wl", [RESNET18_WORKLOADS[3], RESNET18_WORKLOADS[10], MOBILENET_WORKLOADS[8]],
                         ids=lambda w: w.name)
def test_workload_model_runs_and_matches_frontend(wl):
    m = workload_model(wl, seed=1)
    onnx.checker.check_model(m)
    x = np.random.default_rng(0).normal(0, 1, (1, wl.in_channels, wl.height, wl.width)).astype(np.float32)
    (want,) = run_ort(m, {"input": x})
    assert want.shape == (1, wl.out_channels, wl.out_height, wl.out_width)
    got = run_float(optimize(import_onnx(m)), {"input": x})["output"]
    np.testing.assert_allclose(got, want, rtol=1e-3, atol=1e-3)


@pytest.mark.parametrize("builder", [resnet18, mobilenet_v1])
def test_models_build_and_run_at_reduced_size(builder):
    m = builder(32, seed=0)
    onnx.checker.check_model(m)
    x = np.random.default_rng(0).normal(0, 1, (2, 3, 32, 32)).astype(np.float32)
    (want,) = run_ort(m, {"input": x})
    assert want.shape == (2, 1000) and np.all(np.isfinite(want))
    g = import_onnx(m)
    assert g.types["logits"].shape == ("N", 1000)
    np.testing.assert_allclose(run_float(optimize(g), {"input": x})["logits"], want, rtol=1e-3, atol=1e-3)


def test_full_size_graphs_import():
    for builder, n_conv in ((resnet18, 20), (mobilenet_v1, 27)):
        g = optimize(import_onnx(builder(224)))
        assert sum(n.op == "conv2d" for n in g.nodes) == n_conv
        assert not any(n.op == "batch_norm" for n in g.nodes)
        assert g.types["input"].shape == ("N", 3, 224, 224)


def test_bad_size():
    with pytest.raises(ValueError, match="multiple of 32"):
        resnet18(100)
