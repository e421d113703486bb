"""The conv lowering's plan (issue 23): the planning passes' printable plans, ConvOptions,
and the emitter that turns a plan into the same program every time.  Program identity
with the lowering before the redesign: test_program_identity.py."""

from __future__ import annotations

import numpy as np
import pytest

import program_identity as pi
from vtaforge.compiler.conv_plan import ConvPlan
from vtaforge.compiler.options import ConvOptions
from vtaforge.compiler.lower_conv import emit_conv, lower_conv
from vtaforge.runtime.artifact import TraceBuilder

ENG = pi.CFGS["eng"]


def _plan(cfg_name, *args, **kw):
    out: list = []
    lo = pi.conv(cfg_name, *args, explain=out, **kw)
    assert len(out) == 1 and isinstance(out[0], ConvPlan)
    return lo, out[0]


def test_options_defaults_and_errors():
    assert ConvOptions.for_config(ENG) == ConvOptions()
    assert ConvOptions.for_config(ENG, ob_loop=False).ob_loop is False
    assert str(ConvOptions()) == "options: defaults"
    assert str(ConvOptions(step_req=False)) == "options: step_req=False"
    with pytest.raises(TypeError, match=r"unknown ConvOptions field\(s\) \['OB_LOOP'\]"):
        ConvOptions.for_config(ENG, OB_LOOP=False)
    with pytest.raises(ValueError, match="ConvOptions.w_chunk_beats must be >= 1, got 0"):
        ConvOptions(w_chunk_beats=0)
    with pytest.raises(ValueError, match="quad_acc_ratio must be >= 0"):
        ConvOptions(quad_acc_ratio=-1)


@pytest.mark.parametrize("cfg,args", [
    ("eng", (256, 512, 14, 1, 2, 0)),            # C10: one tile split over the banks
    ("eng", (128, 128, 14, 3, 1, 1, 128)),       # depthwise: REQ per step
    ("eng", (256, 256, 7, 3, 1, 1)),             # streamed weights
    ("pynq", (64, 64, 14, 3, 1, 1)),
    ("tiny-q1", (16, 16, 8, 3, 1, 1)),
])
def test_plan_agrees_with_the_program(cfg, args):
    lo, plan = _plan(cfg, *args)
    st = lo.trace.stats
    assert len(plan.steps) == st["steps"] and len(plan.tiles) == st["tiles"]
    assert plan.stats["gemm_uops"] == st["gemm_uops_planned"]
    assert plan.weights.n_loads == st["w_loads"]
    text = plan.describe()
    assert text == str(plan) and text.startswith("conv 'c': ")
    assert [ln.split(":")[0].strip() for ln in text.splitlines()[1:]] == [
        "tiling", "inputs", "ACC", "weights", "last tile"]
    # the emitter decides nothing: the same plan emits the same program again
    tb = TraceBuilder("c", dict(lo.trace.block_bytes))
    attrs = pi.scalar_attrs(args[3], args[4], args[5], args[6] if len(args) > 6 else 1, 8,
                            *pi._clip(pi.CFGS[cfg]))
    emit_conv(pi.CFGS[cfg], tb, plan, attrs, None)
    assert pi.digest(trace=tb.trace) == pi.digest(trace=lo.trace)


def test_plan_names_the_engine_forms():
    _, c10 = _plan("eng", 256, 512, 14, 1, 2, 0)
    assert c10.stats["bank_split"] and "bank split" in str(c10)
    assert "streamed per block" in str(c10)
    # the default tiler gives a depthwise conv tiles of one output block (ConvOptions
    # tile_span), whose last tile is one step; the per-step REQ serves the multi-block
    # tiles of tile_span=False
    _, dw1 = _plan("eng", 128, 128, 14, 3, 1, 1, 128)
    assert dw1.tiling.tiling.obn == 1 and all(t.ob1 - t.ob0 == 1 for t in dw1.tiles)
    _, dw = _plan("eng", 128, 128, 14, 3, 1, 1, 128, opts={"TILE_SPAN": False})
    assert dw.tiles[-1].done_at and "REQ per step" in str(dw)
    _, off = _plan("eng", 128, 128, 14, 3, 1, 1, 128, opts={"STEP_REQ": False, "TILE_SPAN": False})
    assert not off.tiles[-1].done_at and "step_req=False" in str(off)


def test_explain_through_im2col_and_dense():
    out: list = []
    w = pi.pattern((16, 3, 3, 3), 255, 127, np.int8)
    b = pi.pattern((16,), 2001, 1000, np.int32)
    lower_conv(pi.CFGS["pynq"], "c1", (3, 16, 16), w, b, pi.scalar_attrs(3, 2, 1, 1, 8),
               explain=out)
    assert len(out) == 1 and out[0].layer.c == 27 and out[0].layer.kh == 1
