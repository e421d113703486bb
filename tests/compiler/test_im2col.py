"""im2col lowering of convs with few input channels, explicit float scales in the compiled
model, and the artifact format version.

Oracles: direct int64 loops over the kernel window (``_lower_util.conv_oracle``), a loop
im2col written here, the compiler's integer reference for the QDQ model, and the GEMM
micro-op count ``ceil(C*kh*kw/BLOCK_IN) * ceil(O/BLOCK_OUT) * Ho * Wo`` per image.
"""

from __future__ import annotations

import json
import zipfile

import numpy as np
import pytest

from vtaforge.compiler.compile import compile_model
from vtaforge.compiler.ir import TensorType
from vtaforge.compiler.lower_conv import lower_conv, use_im2col
from vtaforge.compiler.quantize import QuantConfig
from vtaforge.compiler.reference import run_quantized
from vtaforge.hw.config import preset
from vtaforge.runtime.artifact import (FORMAT_VERSION, ArtifactError, SlotLayout,
                                       load_artifact, save_artifact)
from vtaforge.runtime.cpu_ops import im2col, run_cpu_op, scale_factor
from vtaforge.runtime.executor import Executor
from vtaforge.runtime.fsim import FsimDevice

from _lower_util import QG, conv_oracle, requant, run_graph


def _im2col_loops(x, k, s, p):
    n, c, h, w = x.shape
    pt, pl, pb, pr = p
    ho = (h + pt + pb - k[0]) // s[0] + 1
    wo = (w + pl + pr - k[1]) // s[1] + 1
    out = np.zeros((n, c * k[0] * k[1], ho, wo), x.dtype)
    for ci in range(c):
        for i in range(k[0]):
            for j in range(k[1]):
                for oy in range(ho):
                    for ox in range(wo):
                        y, xx = oy * s[0] + i - pt, ox * s[1] + j - pl
                        if 0 <= y < h and 0 <= xx < w:
                            out[:, (ci * k[0] + i) * k[1] + j, oy, ox] = x[:, ci, y, xx]
    return out


@pytest.mark.parametrize("k,s,p", [((3, 3), (1, 1), (1, 1, 1, 1)), ((7, 7), (2, 2), (3, 3, 3, 3)),
                                   ((2, 3), (1, 2), (0, 1, 1, 0))])
def test_im2col_matches_loops(k, s, p):
    x = np.random.default_rng(0).integers(-128, 128, (2, 3, 9, 10)).astype(np.int8)
    np.testing.assert_array_equal(im2col(x, k, s, p), _im2col_loops(x, k, s, p))


def test_use_im2col_rule():
    cfg = preset("pynq")
    assert use_im2col(cfg, 1, 1, 3, 3) and use_im2col(cfg, 3, 1, 7, 7)
    assert not use_im2col(cfg, 64, 1, 3, 3)       # 36 vs 36 blocks
    assert not use_im2col(cfg, 3, 1, 1, 1)        # 1x1: nothing to gain
    assert not use_im2col(cfg, 4, 4, 3, 3)        # grouped


@pytest.mark.parametrize("c,o,hw,k,s,p,cfg_name", [
    (1, 16, (8, 8), (3, 3), (1, 1), (1, 1, 1, 1), "pynq"),       # digits conv1
    (3, 20, (15, 13), (7, 7), (2, 2), (3, 3, 3, 3), "pynq"),     # C1-like, odd sizes
    (1, 8, (9, 9), (3, 3), (2, 1), (0, 2, 1, 0), "tiny"),
    (3, 4, (6, 7), (3, 3), (1, 1), (1, 1, 1, 1), "batch2"),
])
def test_im2col_conv_bit_exact_and_gemm_count(c, o, hw, k, s, p, cfg_name):
    rng = np.random.default_rng(1)
    n = 3
    x = rng.integers(-128, 128, (n, c) + hw).astype(np.int8)
    w = rng.integers(-127, 128, (o, c) + k).astype(np.int8)
    b = rng.integers(-500, 500, o).astype(np.int32)
    qg = QG((n, c) + hw)
    qg.const("w", w)
    qg.const("b", b)
    ho = (hw[0] + p[0] + p[2] - k[0]) // s[0] + 1
    wo = (hw[1] + p[1] + p[3] - k[1]) // s[1] + 1
    attrs = dict(qg.req(6, -128, 127), kernel=k, strides=s, pads=p, groups=1)
    y = qg.add("qconv2d", ["xq", "w", "b"], attrs, TensorType("int8", (n, o, ho, wo), 6), "y")
    g = qg.finish(y)
    out, ex, cm = run_graph(g, cfg_name, x)
    want = requant(conv_oracle(x, w, b, s, p, 1), 6, -128, 127)
    np.testing.assert_array_equal(out["y"], want)
    cfg = cm.config
    step = [st for st in cm.steps if st.op == "qconv2d"][0]
    assert step.layouts["x"].im2col == (k + s + p)
    assert "im2col on host" in step.reason and "im2col on host" in cm.meta["placement_report"]
    blocks = -(-c * k[0] * k[1] // cfg.BLOCK_IN) * -(-o // cfg.BLOCK_OUT) * ho * wo
    assert ex.stats[step.name].gemm_uops == blocks * -(-n // cfg.BATCH)


def test_im2col_and_direct_lowering_agree():
    cfg = preset("pynq")
    rng = np.random.default_rng(2)
    w = rng.integers(-127, 128, (16, 3, 3, 3)).astype(np.int8)
    b = rng.integers(-99, 99, 16).astype(np.int32)
    a = {"kernel": (3, 3), "strides": (1, 1), "pads": (1, 1, 1, 1), "groups": 1, "shift": 5,
         "round": 16, "mult": 1, "clip_lo": -128, "clip_hi": 127}
    lo1 = lower_conv(cfg, "a", (3, 6, 6), w, b, a, im2col=True)
    lo0 = lower_conv(cfg, "b", (3, 6, 6), w, b, a, im2col=False)
    # 27 patch channels: 2 blocks per pixel instead of 9 taps x 1 block
    assert lo1.trace.stats["gemm_uops_planned"] == 2 * 36
    assert lo0.trace.stats["gemm_uops_planned"] == 9 * 36
    assert lo1.layouts["x"].im2col is not None and lo0.layouts["x"].im2col is None


def test_slot_layout_im2col_json_and_refusal():
    lay = SlotLayout((3, 8, 8), 1, 16, im2col=(3, 3, 1, 1, 1, 1, 1, 1))
    assert lay.packed_chw == (27, 8, 8) and lay.cb == 2
    assert SlotLayout.from_json(json.loads(json.dumps(lay.to_json()))) == lay
    with pytest.raises(ArtifactError, match="im2col"):
        SlotLayout((3, 8, 8), 1, 16, (1, 1, 1, 1), im2col=(3, 3, 1, 1, 1, 1, 1, 1))


# ------------------------------------------------------------------ explicit scales
def test_cpu_quantize_dequantize_explicit_scale():
    x = np.linspace(-2, 2, 101, dtype=np.float32)
    q = run_cpu_op("quantize", {"exp": -6, "scale": 0.0137}, [x])
    np.testing.assert_array_equal(q, np.clip(np.floor(x.astype(np.float64) * 2.0 ** -np.log2(
        0.0137) + 0.5), -128, 127).astype(np.int8))
    # default scale = 2**exp
    np.testing.assert_array_equal(run_cpu_op("quantize", {"exp": -5}, [x]),
                                  np.clip(np.floor(x * 32.0 + 0.5), -128, 127).astype(np.int8))
    d = run_cpu_op("dequantize", {}, [q], {"in": 0.0137})
    np.testing.assert_allclose(d, q * 0.0137, rtol=1e-6)
    assert scale_factor(2.0 ** -7, inverse=True) == 128.0
    with pytest.raises(ValueError, match="scale"):
        run_cpu_op("dequantize", {}, [q], {"in": None})


def _qdq_conv_model():
    from onnx import helper
    from _onnx_util import make_model, rand
    w = np.clip(np.rint(rand(8, 3, 3, 3, seed=1, scale=0.4) / 0.0071), -127, 127).astype(np.int8)
    z = np.array(0, np.int8)
    nodes = [helper.make_node("QuantizeLinear", ["x", "sx", "z"], ["xq"]),
             helper.make_node("DequantizeLinear", ["xq", "sx", "z"], ["xd"]),
             helper.make_node("DequantizeLinear", ["wq", "sw"], ["wd"]),
             helper.make_node("Conv", ["xd", "wd", "b"], ["c"], pads=[1, 1, 1, 1]),
             helper.make_node("QuantizeLinear", ["c", "sy", "z"], ["cq"]),
             helper.make_node("DequantizeLinear", ["cq", "sy", "z"], ["y"])]
    inits = {"sx": np.array(0.0137, np.float32), "sw": np.array(0.0071, np.float32),
             "sy": np.array(0.0611, np.float32), "z": z, "wq": w,
             "b": rand(8, seed=3, scale=0.1)}
    return make_model(nodes, [("x", ["N", 3, 6, 6])], [("y", ["N", 8, 6, 6])], inits)


def test_qdq_scales_explicit_through_artifact_bit_exact(tmp_path):
    cfg = preset("pynq").replace(ALU_MUL=True)
    rng = np.random.default_rng(4)
    x = rng.uniform(-1.5, 1.5, (5, 3, 6, 6)).astype(np.float32)
    cm = compile_model(_qdq_conv_model(), x, cfg, quant_config=QuantConfig(exact_multiply=True))
    qsteps = [s for s in cm.steps if s.op == "quantize"]
    assert qsteps and all(isinstance(s.attrs["exp"], int) for s in qsteps)
    assert any(abs(s.attrs["scale"] - 0.0137) < 1e-9 for s in qsteps)
    assert all(t[2] is None or isinstance(t[2], int) for t in cm.types.values())
    p = tmp_path / "q.vtapkg"
    save_artifact(cm, p)
    cm2 = load_artifact(p, cfg)
    assert cm2.types == cm.types
    ref = run_quantized(cm.qgraph, {"x": x}, keep_all=True)
    for m in (cm, cm2):
        out = Executor(m, FsimDevice(cfg)).run(x, keep=True)
        for s in cm.steps:
            if s.op != "dequantize":
                np.testing.assert_array_equal(out[s.outputs[0]], ref[s.outputs[0]], s.name)
        np.testing.assert_array_equal(out["y"], ref["y"])


def test_old_artifact_version_refused(tmp_path):
    cfg = preset("pynq")
    x = np.random.default_rng(0).uniform(-1, 1, (2, 3, 6, 6)).astype(np.float32)
    cm = compile_model(_qdq_conv_model(), x, cfg)
    p = tmp_path / "new.vtapkg"
    save_artifact(cm, p)
    with np.load(p) as z:
        arrays = {k: z[k] for k in z.files}
    man = json.loads(str(arrays["manifest"]))
    man["version"] = 1
    arrays["manifest"] = np.array(json.dumps(man))
    old = tmp_path / "old.vtapkg"
    with open(old, "wb") as f:
        np.savez(f, **arrays)
    assert zipfile.is_zipfile(old)
    with pytest.raises(ArtifactError, match=f"version 1.*reads version {FORMAT_VERSION}.*recompile"):
        load_artifact(old, cfg)
