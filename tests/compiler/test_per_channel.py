"""Per-channel weight quantization (issue 21) and the per-layer error fallback.

Oracles: numpy written here (the weight grid of each channel, the integer conv/dense rule,
the local cosine), onnxruntime on the float model, the integer reference for VTA's int8
tensors (fsim), and the scales a real QDQ file (onnxruntime's quantize_static,
``per_channel=True``) stores.
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import helper, numpy_helper

from vtaforge.compiler import QuantConfig, import_onnx, quantize, run_quantized
from vtaforge.compiler.compile import compile_model
from vtaforge.compiler.passes import optimize
from vtaforge.compiler.quantize import layer_errors
from vtaforge.hw.config import preset
from vtaforge.runtime.executor import Executor
from vtaforge.runtime.fsim import FsimDevice

from _onnx_util import make_model, rand, run_ort, two_conv_model

C = 16
#: channel o's weights span 2**-(o % 7) of the largest channel's: a PicoDet-like depthwise
#: conv whose small channels keep 1-2 levels at one power of two per tensor
CH_SCALE = np.array([2.0 ** -(o % 7) for o in range(C)], np.float32)


def _dw_model():
    """x [N,16,12,12] -> 3x3 conv (ReLU) -> depthwise 3x3 with channel-scaled weights -> 1x1."""
    w1 = rand(C, C, 3, 3, seed=1, scale=0.2)
    wd = rand(C, 1, 3, 3, seed=2) * CH_SCALE.reshape(-1, 1, 1, 1)
    # the next layer scales each channel back (as a folded BatchNorm would), so the small
    # channels matter as much as the large ones
    w2 = rand(8, C, 1, 1, seed=3, scale=0.3) / CH_SCALE.reshape(1, -1, 1, 1) / 8
    nodes = [helper.make_node("Conv", ["x", "w1", "b1"], ["c1"], pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c1"], ["r1"]),
             helper.make_node("Conv", ["r1", "wd", "bd"], ["c2"], pads=[1, 1, 1, 1], group=C),
             helper.make_node("Relu", ["c2"], ["r2"]),
             helper.make_node("Conv", ["r2", "w2", "b2"], ["y"])]
    inits = {"w1": w1, "b1": rand(C, seed=4, scale=0.1), "wd": wd,
             "bd": rand(C, seed=5, scale=0.01) * CH_SCALE, "w2": w2, "b2": rand(8, seed=6, scale=0.1)}
    return make_model(nodes, [("x", ["N", C, 12, 12])], [("y", ["N", 8, 12, 12])], inits)


def _cos(a, b) -> float:
    a, b = np.ravel(a).astype(np.float64), np.ravel(b).astype(np.float64)
    return float(a @ b / max(np.linalg.norm(a) * np.linalg.norm(b), 1e-30))


@pytest.fixture(scope="module")
def dw():
    rng = np.random.default_rng(0)
    calib = rng.normal(0, 1, (16, C, 12, 12)).astype(np.float32)
    x = rng.normal(0, 1, (4, C, 12, 12)).astype(np.float32)
    return _dw_model(), calib, x


def test_channel_exps_are_each_channels_max_grid(dw):
    m, calib, _ = dw
    q = quantize(optimize(import_onnx(m)), calib, QuantConfig(per_channel="on"))
    wd = numpy_helper.to_array(next(i for i in m.graph.initializer if i.name == "wd")).astype(np.float64)
    node = next(n for n in q.nodes if n.op == "qconv2d" and n.attrs["groups"] == C)
    want = [math.ceil(math.log2(np.abs(wd[o]).max() / 127)) for o in range(C)]
    assert list(node.attrs["w_exps"]) == want
    wq = q.constants[node.inputs[1]]
    for o in range(C):
        np.testing.assert_array_equal(wq[o], np.clip(np.rint(wd[o] / 2.0 ** want[o]), -127, 127))
    ex, eo = q.types[node.inputs[0]].exp, q.types[node.outputs[0]].exp
    assert node.attrs["shift"] == tuple(eo - ex - e for e in want)
    assert node.attrs["round"] == tuple(1 << (s - 1) if s > 0 else 0 for s in node.attrs["shift"])
    # the small channels keep most of their levels: at one exp per tensor they would not
    assert int(np.abs(wq[6]).max()) >= 64


def test_per_channel_on_vta_is_bit_exact_and_closer_to_onnxruntime(dw):
    m, calib, x = dw
    (want,) = run_ort(m, {"x": x})
    cos = {}
    for pc in ("off", "auto"):
        for cfg in ("pynq", preset("pynq").replace(ALU_REQUANT=True, REQ_ENGINE=True)):
            cm = compile_model(m, calib, cfg, quant_config=QuantConfig(
                calibration="mse", per_channel=pc))
            assert all(s.target == "vta" for s in cm.steps if s.op in ("qconv2d",)), \
                cm.placement_table()
            table = cm.placement_table()
            assert ("per-channel shifts" in table) == (pc == "auto"), table
            got = Executor(cm, FsimDevice(cm.config)).run(x, keep=True)
            ref = run_quantized(cm.qgraph, {"x": x}, keep_all=True)
            for s in cm.steps:
                if s.target == "vta":
                    np.testing.assert_array_equal(got[s.outputs[0]], ref[s.outputs[0]], err_msg=s.name)
            cos[pc] = _cos(got[cm.outputs[0]], want)
    # measured: per-tensor 0.937, per-channel 0.970 (the rest is the per-tensor activations
    # of the depthwise output, whose small channels stay small)
    assert cos["auto"] >= 0.96, cos
    assert 1 - cos["auto"] < 0.6 * (1 - cos["off"]), cos


QDQ_PC = Path(__file__).parent / "real_models" / "resnet_tiny.ts_op13.qdq_u8s8_perchannel.onnx"


def test_qdq_per_channel_scales_are_honoured_per_channel():
    m = onnx.load(str(QDQ_PC))
    inits = {i.name: numpy_helper.to_array(i) for i in m.graph.initializer}
    # the file's per-channel weight scales, by the float weight tensor they dequantize
    scales = {}
    for n in m.graph.node:
        if (n.op_type == "DequantizeLinear" and n.input[0] in inits
                and inits[n.input[0]].ndim >= 2 and inits[n.input[1]].size > 1):
            scales[n.output[0]] = inits[n.input[1]].astype(np.float64)
    assert scales, "the fixture has per-channel weights"
    fg = optimize(import_onnx(m))
    calib = np.random.default_rng(7).normal(0, 1, fg.types[fg.inputs[0]].shape).astype(np.float32)
    q = quantize(fg, calib)
    convs = [n for n in q.nodes if n.op in ("qconv2d", "qdense") and "w_exps" in n.attrs]
    assert len(convs) >= len(scales) // 2
    # every per-channel exp is the floor or the ceil of log2 of one of the file's channel scales
    for n in convs:
        s = next(v for v in scales.values() if v.size == len(n.attrs["w_exps"])
                 and all(e in (math.floor(math.log2(c)), math.ceil(math.log2(c)))
                         for e, c in zip(n.attrs["w_exps"], v)))
        assert s is not None


def test_layer_errors_equal_a_numpy_local_cosine():
    w = rand(24, 40, seed=11, scale=0.2)
    b = rand(24, seed=12, scale=0.1)
    m = make_model([helper.make_node("Gemm", ["x", "w", "b"], ["y"], transB=1)],
                   [("x", ["N", 40])], [("y", ["N", 24])], {"w": w, "b": b})
    x = rand(8, 40, seed=13)
    fg = optimize(import_onnx(m))
    q = quantize(fg, x, QuantConfig(per_channel="off"))
    node = next(n for n in q.nodes if n.op == "qdense")
    ex, eo = q.types[node.inputs[0]].exp, q.types[node.outputs[0]].exp
    wq, bq = (q.constants[i].astype(np.int64) for i in node.inputs[1:])
    xq = np.clip(np.floor(x.astype(np.float64) / 2.0 ** ex + 0.5), -128, 127).astype(np.int64)
    s = node.attrs["shift"]
    acc = xq @ wq.T + bq
    yq = np.clip((acc + (1 << (s - 1))) >> s if s > 0 else acc << -s,
                 node.attrs["clip_lo"], node.attrs["clip_hi"])
    want = _cos(yq * 2.0 ** eo, x.astype(np.float64) @ w.T.astype(np.float64) + b)
    assert layer_errors(fg, q, {fg.inputs[0]: x})[node.name] == pytest.approx(want, abs=1e-9)


def test_a_layer_below_the_error_floor_runs_float_on_the_cpu_with_its_reason(dw):
    m, calib, x = dw
    cm = compile_model(m, calib, "pynq", quant_config=QuantConfig(
        calibration="mse", per_channel="off", min_layer_cosine=0.99999))
    table = cm.placement_table()
    assert "int8 error is too large (cosine" in table, table
    kept = [s for s in cm.steps if s.target == "cpu" and s.op == "conv2d"]
    assert kept, table
    (want,) = run_ort(m, {"x": x})
    got = Executor(cm, FsimDevice(cm.config)).run(x)[cm.outputs[0]]
    assert _cos(got, want) >= 0.999


def test_bias_correction_removes_the_mean_error_of_a_biased_layer():
    """Weights that all round the same way (w = (k + 0.45) * 2**-8, the grid the quantizer
    picks for |w| <= 0.47) shift every output
    channel's mean; bias_correct moves each int32 bias by the mean pre-activation error
    measured on the calibration samples, so the dequantized output's mean error per channel
    (numpy, against the float conv written here) drops to a fraction of what it was."""
    from vtaforge.compiler.quantize import bias_correct
    from vtaforge.runtime.cpu_float import conv2d_nchw

    rng = np.random.default_rng(4)
    w = ((rng.integers(-120, 120, (8, 6, 3, 3)) + 0.45) * 2.0 ** -8).astype(np.float32)
    b = rand(8, seed=5, scale=0.1)
    m = make_model([helper.make_node("Conv", ["x", "w", "b"], ["y"], pads=[1, 1, 1, 1])],
                   [("x", ["N", 6, 10, 10])], [("y", ["N", 8, 10, 10])], {"w": w, "b": b})
    x = np.abs(rand(8, 6, 10, 10, seed=6))         # positive inputs: the shift adds up
    fg = optimize(import_onnx(m))
    q = quantize(fg, x, QuantConfig(per_channel="off"))
    want = conv2d_nchw(x.astype(np.float64), w.astype(np.float64), (1, 1), (1, 1, 1, 1), 1) \
        + b.reshape(1, -1, 1, 1)
    step = 2.0 ** q.types[q.nodes[-1].inputs[0]].exp

    def mean_err():
        y = run_quantized(q, {"x": x})["y"].astype(np.float64)
        return np.abs((y - want).mean(axis=(0, 2, 3)))
    before = mean_err()
    assert before.min() > 0.5 * step, (before, step)      # the fixture is biased
    fixed = bias_correct(fg, q, {"x": x})
    assert fixed and sum(fixed.values()) >= 6, fixed
    after = mean_err()
    assert after.max() <= 0.25 * before.min(), (before, after)


def test_dynamic_model_applies_the_measured_fallbacks_and_bias_corrections_at_every_shape():
    """compile_dynamic measures the error floor and the bias corrections at its calibration
    shape and every specialised shape gets them (same nodes kept float, same int32 bias
    moves as a static compile at that shape measures)."""
    from vtaforge.compiler.dynamic import compile_dynamic

    m = _dw_model()
    m.graph.input[0].type.tensor_type.shape.dim[2].dim_param = "H"
    m.graph.input[0].type.tensor_type.shape.dim[3].dim_param = "W"
    m.graph.output[0].type.tensor_type.shape.dim[2].dim_param = "H"
    m.graph.output[0].type.tensor_type.shape.dim[3].dim_param = "W"
    rng = np.random.default_rng(1)
    calib = rng.normal(0, 1, (8, C, 12, 12)).astype(np.float32)
    qc = QuantConfig(calibration="mse", per_channel="off", min_layer_cosine=0.99,
                     bias_correction=True)
    dm = compile_dynamic(m, calib, "pynq", quant_config=qc)
    assert dm.measured["keep"] and dm.measured["bias"], dm.measured
    cm = dm.specialise(((C, 10, 14),))
    table = cm.placement_table()
    for name in dm.measured["keep"]:
        assert any(s.name == name and s.target == "cpu" for s in cm.steps), table
    assert "int8 error is too large" in table
    assert "bias correction" in " ".join(cm.qgraph.meta["quant_report"].notes)
    x = rng.normal(0, 1, (2, C, 10, 14)).astype(np.float32)
    got = Executor(cm, FsimDevice(cm.config)).run(x)[cm.outputs[0]]
    (want,) = run_ort(m, {"x": x})
    assert _cos(got, want) >= 0.95      # measured 0.962 (per-tensor weights here)


def test_layout_ops_from_a_float_node_to_a_graph_output_stay_float():
    """A detector head's box regression leaves a float CPU node (here: Sin, which VTA does
    not run), is reshaped and transposed, and is a graph output: those layout ops stay
    real-valued (no quantize before them, no int8 rounding of the model's float output),
    so that output equals onnxruntime's to float32 precision; the conv branch beside it
    still runs on VTA."""
    w = rand(8, 3, 3, 3, seed=1, scale=0.3)
    m = make_model([helper.make_node("Sin", ["x"], ["s"]),
                    helper.make_node("Reshape", ["s", "shape"], ["r"]),
                    helper.make_node("Transpose", ["r"], ["reg"], perm=[0, 2, 1]),
                    helper.make_node("Conv", ["x", "w"], ["cls"], pads=[1, 1, 1, 1])],
                   [("x", [1, 3, 8, 8])], [("reg", [1, 64, 3]), ("cls", [1, 8, 8, 8])],
                   {"w": w, "shape": np.array([1, 3, 64], np.int64)})
    calib = rand(8, 1, 3, 8, 8, seed=2) * 3.0
    cm = compile_model(m, {"x": calib.reshape(8, 3, 8, 8)[:1]}, "pynq")
    rounded = [n.name for n in cm.qgraph.nodes if n.op == "quantize" and n.inputs == ["s"]]
    assert not rounded, rounded
    assert any(s.target == "vta" for s in cm.steps)
    x = calib[3]
    want_reg, want_cls = run_ort(m, {"x": x})
    got = Executor(cm, FsimDevice(cm.config)).run(x)
    assert np.max(np.abs(got["reg"] - want_reg)) < 1e-6
    assert _cos(got["cls"], want_cls) > 0.99




def test_adaptive_floor_keeps_agreeing_models_on_vta():
    """A model whose outputs already agree with float (a two-conv net on N(0,1) inputs)
    keeps every conv on VTA under compile_model's adaptive error floor, even where a
    layer's local cosine is below the stricter floors (the floor only tightens where the
    outputs agree below 0.99)."""
    import vtaforge.compiler.compile as comp
    from vtaforge.compiler.reference import run_float

    calib = rand(4, 3, 8, 8, seed=13)
    cm = compile_model(two_conv_model(), calib, "pynq")
    convs = [s for s in cm.steps if s.op == "qconv2d"]
    assert len(convs) == 2 and all(s.target == "vta" for s in convs), cm.steps
    q0 = cm.qgraph
    batches = [{"x": calib}]
    fenvs = [run_float(optimize(import_onnx(two_conv_model())), b, keep_all=True)
             for b in batches]
    assert comp.output_agreement(q0, batches, fenvs) >= 0.99


def test_adaptive_floor_tightens_only_while_it_pays(monkeypatch):
    """Where the outputs agree below 0.99 the floor is tightened to 0.995, then 0.998,
    keeping each step only while the agreement rises by >= 0.005: with the local cosines
    and agreements stubbed (conv 1: 0.993, conv 2: 0.997; agreement 0.90 with both int8,
    0.95 with conv 1 float, 0.951 with both float) conv 1 goes to the CPU with its
    measured reason, conv 2 stays on VTA."""
    import vtaforge.compiler.compile as comp

    m = two_conv_model()
    names = {}

    def fake_errors(fg, q, feeds):
        convs = [n.name for n in q.nodes if n.op == "qconv2d"]
        names.setdefault("all", [n.name for n in fg.nodes if n.op == "conv2d"])
        c1, c2 = names["all"]
        return {c1: 0.993, c2: 0.997} if c1 in convs else {c2: 0.997}

    def fake_agreement(q, batches, fenvs):
        ints = {n.name for n in q.nodes if n.op == "qconv2d"}
        c1, c2 = names["all"]
        return 0.90 if c1 in ints else (0.95 if c2 in ints else 0.951)
    monkeypatch.setattr(comp, "layer_errors", fake_errors)
    monkeypatch.setattr(comp, "output_agreement", fake_agreement)
    cm = compile_model(m, rand(4, 3, 8, 8, seed=13), "pynq")
    c1, c2 = names["all"]
    place = {s.name: s for s in cm.steps}
    ints = {n.name for n in cm.qgraph.nodes if n.op == "qconv2d"}
    assert c1 not in ints and c2 in ints, (ints, list(place))
    why = cm.qgraph.meta["quant_report"].fallbacks[c1]
    assert "0.9930 < 0.995" in why, why


def test_adaptive_floor_tries_the_next_floor_when_one_adds_nothing(monkeypatch):
    """A floor that moves no new layer to the CPU does not end the search: with both
    convs' local cosines between 0.995 and 0.998 (0.996, 0.997) and the outputs agreeing
    0.90 int8 / 0.96 float, the 0.995 floor changes nothing and 0.998 puts both on the CPU."""
    import vtaforge.compiler.compile as comp

    names = {}

    def fake_errors(fg, q, feeds):
        names.setdefault("all", [n.name for n in fg.nodes if n.op == "conv2d"])
        c1, c2 = names["all"]
        return {c1: 0.996, c2: 0.997}

    def fake_agreement(q, batches, fenvs):
        return 0.90 if any(n.op == "qconv2d" for n in q.nodes) else 0.96
    monkeypatch.setattr(comp, "layer_errors", fake_errors)
    monkeypatch.setattr(comp, "output_agreement", fake_agreement)
    cm = compile_model(two_conv_model(), rand(4, 3, 8, 8, seed=13), "pynq")
    assert not any(n.op == "qconv2d" for n in cm.qgraph.nodes), cm.steps
    why = cm.qgraph.meta["quant_report"].fallbacks[names["all"][0]]
    assert "0.9960 < 0.998" in why, why
