"""Micro-op order and accumulator initialisation of the lowerings (issue 9): pooling sends no
two consecutive ALU micro-ops to one destination; the conv's optional bias-as-initial-value
(broadcast ACC LOAD) lowering stays bit-exact."""

from __future__ import annotations

import numpy as np
import pytest

from vtaforge.compiler.options import ConvOptions, LowerOptions
from vtaforge.compiler.lower_eltwise import lower_pool
from vtaforge.hw.config import preset

from test_lower_conv import _conv_case


def _dst_sequence(k) -> np.ndarray:
    """Destinations of a kernel's micro-ops in execution order."""
    (e0, d0, _, _), (e1, d1, _, _) = (list(k.loops) + [(1, 0, 0, 0)] * 2)[:2]
    i, j = np.meshgrid(np.arange(e0), np.arange(e1), indexing="ij")
    off = (i * d0 + j * d1).reshape(-1)
    return (off[:, None] + k.dst[None, :]).reshape(-1)


@pytest.mark.parametrize("cfg", ("pynq", "tiny"))
@pytest.mark.parametrize("kind", ("max", "avg"))
@pytest.mark.parametrize("k,s,p,c,h", [(3, 2, 1, 64, 28), (2, 2, 0, 16, 8), (3, 1, 1, 17, 6)])
def test_pool_no_back_to_back_destination(cfg, kind, k, s, p, c, h):
    attrs = {"kernel": (k, k), "strides": (s, s), "pads": (p,) * 4}
    if kind == "avg":
        if k != 2:
            pytest.skip("power-of-two average window only")
        attrs.update(shift=2, round=2, clip_lo=-128, clip_hi=127, mult=1, divisor=4)
    lo = lower_pool(preset(cfg), "p", (c, h, h), attrs, kind)
    prev = None
    for op in lo.trace.ops:
        if op[0] != "K":
            prev = None           # a load / store / token between kernels
            continue
        kern = lo.trace.kernels[op[1]]
        if kern.mode != "alu" or kern.reset:
            prev = None
            continue
        seq = _dst_sequence(kern)
        assert not np.any(seq[1:] == seq[:-1]), "consecutive micro-ops share a destination"
        if prev is not None and seq.size > 1:
            assert seq[0] != prev
        prev = seq[-1]


@pytest.mark.parametrize("cfg", ("pynq", "tiny", "batch2"))
@pytest.mark.parametrize("case", [(3, 1, 1, 17, 20, 9, 1, 1), (1, 2, 0, 64, 48, 14, 1, 1),
                                  (3, 1, 1, 32, 32, 8, 2, "dw"), (3, 2, 1, 255, 24, 7, 1, 1)])
def test_conv_bias_load_exact(cfg, case):
    """The tiles start at the bias by a broadcast ACC LOAD (``ConvOptions.bias_load``):
    exact against the numpy oracle."""
    k, s, p, cin, cout, h, n, g = case
    _conv_case(cfg, k, s, p, cin, cout, h, n, g, seed=7,
               options=LowerOptions(conv=ConvOptions(bias_load=True)))


@pytest.mark.parametrize("cfg", ("pynq", "tiny", "batch2"))
@pytest.mark.parametrize("la,lb,gemm", [(0, 1, True), (6, 0, True), (7, 0, False)])
def test_residual_add_path(cfg, la, lb, gemm):
    from vtaforge.compiler.lower_eltwise import lower_eltwise

    c = preset(cfg)
    attrs = {"lshift_a": la, "lshift_b": lb, "shift": 1, "round": 1, "clip_lo": 0,
             "clip_hi": 127, "mult": 1}
    lo = lower_eltwise(c, "add", (64, 9, 9), "qadd", attrs)
    used = bool(lo.trace.stats.get("gemm_add"))
    assert used == (gemm and c.BLOCK_IN == c.BLOCK_OUT)
    if used:     # operands are INP loads (load module), weights two diagonal blocks
        mems = {op[3] for op in lo.trace.ops if op[0] == "L" and op[1] in ("a", "b")}
        assert mems == {int(__import__("vtaforge.hw.config", fromlist=["MemType"]).MemType.INP)}
        w = lo.consts["w"]
        assert w.shape == (2, c.BLOCK_OUT, c.BLOCK_IN)
        assert (np.diagonal(w[0]) == 1 << la).all() and (np.diagonal(w[1]) == 1 << lb).all()
