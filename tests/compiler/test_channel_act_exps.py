"""Per-channel activation exps for depthwise convs (issue 21; ``ir`` "Per-channel
activations"): a CPU ``quantize`` puts each input channel at its own power of two and the
depthwise conv folds them into its per-channel weights.

Oracles: numpy written here (each channel's exp from the calibration data's per-channel
maximum, the quantize rule), onnxruntime on the float model, and the integer reference
for fsim's int8 tensors."""

from __future__ import annotations

import math

import numpy as np
import pytest
from onnx import helper

from vtaforge.compiler import QuantConfig
from vtaforge.compiler.compile import compile_model
from vtaforge.compiler.errors import CompileError
from vtaforge.compiler.ir import TensorType, validate
from vtaforge.compiler.reference import run_quantized
from vtaforge.runtime.executor import Executor
from vtaforge.runtime.fsim import FsimDevice

from _onnx_util import make_model, rand, run_ort

C = 16
#: input channel c spans 2**(-8 + 10 c / 15): a 1000x spread, as PicoDet's depthwise
#: inputs after hard-swish
SPAN = (2.0 ** np.linspace(-8, 2, C)).astype(np.float32).reshape(1, C, 1, 1)


def _dw_model():
    """x [N,16,8,8] -> depthwise 3x3 -> y (every channel matters as much as any other)."""
    w = rand(C, 1, 3, 3, seed=1, scale=0.5)
    return make_model([helper.make_node("Conv", ["x", "w"], ["y"], pads=[1, 1, 1, 1], group=C)],
                      [("x", ["N", C, 8, 8])], [("y", ["N", C, 8, 8])], {"w": w})


def _compile(on: bool):
    cal = rand(8, C, 8, 8, seed=2) * SPAN
    qc = QuantConfig(calibration="max", channel_act_exps=on)
    return compile_model(_dw_model(), cal, "pynq", quant_config=qc), cal


def _channel_rel_err(y, ref):
    return np.median([np.linalg.norm(y[:, c] - ref[:, c]) / np.linalg.norm(ref[:, c])
                      for c in range(C)])


def test_depthwise_input_quantized_per_channel_bit_exact():
    cm, cal = _compile(True)
    q = next(s for s in cm.steps if s.op == "quantize")
    # each channel's exp: the smallest e with max|x[:, c]| / 2**e <= 127 (max calibration)
    want = [math.ceil(math.log2(float(np.abs(cal[:, c]).max()) / 127)) for c in range(C)]
    for c, m in enumerate(np.abs(cal).max(axis=(0, 2, 3))):     # exact at the boundary
        while m / 2.0 ** (want[c] - 1) <= 127:
            want[c] -= 1
    assert list(q.attrs["channel_exps"]) == want, q.attrs
    assert max(want) - min(want) >= 9
    conv = next(s for s in cm.steps if s.op == "qconv2d")
    assert conv.target == "vta" and list(conv.attrs["x_exps"]) == want
    x = rand(2, C, 8, 8, seed=4) * SPAN
    y = Executor(cm, FsimDevice(cm.config)).run(x)[cm.outputs[0]]
    r = run_quantized(cm.qgraph, {"x": x})[cm.qgraph.outputs[0]]
    assert np.array_equal(y, r)


def test_per_channel_input_beats_one_exp_per_tensor():
    x = rand(4, C, 8, 8, seed=4) * SPAN
    ref = run_ort(_dw_model(), {"x": x})[0]
    errs = []
    for on in (False, True):
        cm, _ = _compile(on)
        errs.append(_channel_rel_err(Executor(cm, FsimDevice(cm.config)).run(x)[cm.outputs[0]], ref))
    # the output is still one exp per tensor: the gain is the input side's (0.38 -> 0.26 MSE
    # calibration when measured); a per-tensor input loses the narrow channels outright
    assert errs[1] < 0.8 * errs[0], errs


def test_only_a_folding_depthwise_conv_may_read_a_per_channel_tensor():
    cm, _ = _compile(True)
    g = cm.qgraph
    validate(g)
    conv = next(n for n in g.nodes if n.op == "qconv2d")
    conv.attrs["x_exps"] = tuple(e + 1 for e in conv.attrs["x_exps"])
    with pytest.raises(CompileError, match="per-channel activation"):
        validate(g)


def test_channel_exps_type_checked():
    with pytest.raises(CompileError, match="channel exps"):
        TensorType("int8", (1, 3, 4, 4), -2, channel_exps=(-3, -4, -5))     # max != exp
    with pytest.raises(CompileError, match="channel exps"):
        TensorType("int8", (1, 3, 4, 4), -3, channel_exps=(-3, -4))         # 2 of 3
    assert "per channel" in str(TensorType("int8", (1, 2, 4, 4), -3, channel_exps=(-3, -5)))


# ---------------------------------------------------------------- dense convs (groups = 1)

def _dense_model(k: int = 1):
    """x [N,16,8,8] -> Conv kxk (24 outputs, groups 1) -> y."""
    w = rand(24, C, k, k, seed=5, scale=0.5)
    return make_model([helper.make_node("Conv", ["x", "w"], ["y"], pads=[k // 2] * 4)],
                      [("x", ["N", C, 8, 8])], [("y", ["N", 24, 8, 8])], {"w": w})


def test_fold_error_matches_simulated_rounding():
    """fold_error against a Monte Carlo oracle written here: quantize x per channel at
    2**ce, fold 2**(ce - exp) into the weight columns, round each output channel's folded
    weights to its own int8 grid, and measure the output's squared error."""
    from vtaforge.compiler.quant_rules import fold_error, migrate

    rng = np.random.default_rng(7)
    w = rng.standard_normal((24, C, 3, 3)) * 0.3
    x = rng.standard_normal((64, C, 6, 6)) * SPAN.astype(np.float64)
    full = np.array([math.ceil(math.log2(np.abs(x[:, c]).max() / 127)) for c in range(C)])
    exp = int(full.max())
    ms = (x ** 2).mean(axis=(0, 2, 3))
    for a in (0.0, 0.5, 1.0):
        ce = migrate(full, exp, a)
        xq = np.rint(x / 2.0 ** ce.reshape(1, -1, 1, 1)) * 2.0 ** ce.reshape(1, -1, 1, 1)
        wf = w * 2.0 ** (ce - exp).reshape(1, -1, 1, 1)
        g = np.ceil(np.log2(np.abs(wf).reshape(24, -1).max(axis=1) / 127)).reshape(-1, 1, 1, 1)
        wq = np.rint(wf / 2.0 ** g) * 2.0 ** g / 2.0 ** (ce - exp).reshape(1, -1, 1, 1)
        # one output position's error: the 3x3 window at (1, 1) of each sample
        win = x[:, :, :3, :3]
        winq = xq[:, :, :3, :3]
        y = np.einsum("ochw,nchw->no", w, win)
        yq = np.einsum("ochw,nchw->no", wq, winq)
        measured = float(((yq - y) ** 2).sum(axis=1).mean())
        est = fold_error(w, exp, ce, ms)
        assert 0.6 < measured / est < 1.6, (a, measured, est)


def test_dense_conv_input_per_channel_bit_exact_and_better():
    cal = rand(8, C, 8, 8, seed=2) * SPAN
    x = rand(4, C, 8, 8, seed=4) * SPAN
    ref = run_ort(_dense_model(), {"x": x})[0]
    errs = []
    for on in (False, True):
        cm = compile_model(_dense_model(), cal, "pynq",
                           quant_config=QuantConfig(calibration="max", channel_act_exps=on))
        conv = next(s for s in cm.steps if s.op == "qconv2d")
        assert conv.target == "vta"
        assert ("x_exps" in conv.attrs) == on, conv.attrs
        y = Executor(cm, FsimDevice(cm.config)).run(x)[cm.outputs[0]]
        assert np.array_equal(y, run_quantized(cm.qgraph, {"x": x})[cm.qgraph.outputs[0]])
        errs.append(float(np.linalg.norm(y - ref) / np.linalg.norm(ref)))
    assert errs[1] < 0.8 * errs[0], errs


def test_dense_conv_with_even_channels_stays_per_tensor():
    cal = rand(8, C, 8, 8, seed=2)
    cm = compile_model(_dense_model(3), cal, "pynq",
                       quant_config=QuantConfig(calibration="max", channel_act_exps=True))
    assert not any("channel_exps" in s.attrs for s in cm.steps if s.op == "quantize")


def test_search_floor_finds_the_fewest_worst_layers():
    """search_floor against a brute-force oracle: layers with known cosines, an agreement
    that rises with each layer kept real; the answer is the smallest k reaching the goal."""
    from vtaforge.compiler.compile import search_floor

    rng = np.random.default_rng(3)
    errs = {f"n{i}": float(c) for i, c in enumerate(rng.uniform(0.99, 1.0, 40))}
    order = sorted(errs, key=errs.get)
    gain = dict(zip(order, rng.uniform(0.0005, 0.004, 40)))

    def trial(thr):
        kept = [n for n in errs if errs[n] < thr]
        return 0.9 + sum(gain[n] for n in kept), len(kept)
    base = 0.9
    a_all = trial(2.0)[0]
    goal = min(0.99, a_all - 0.002)
    want = next(k for k in range(41) if 0.9 + sum(gain[n] for n in order[:k]) >= goal)
    assert search_floor(errs, set(errs), 0.99, base, trial) == want
    assert search_floor(errs, set(errs), 0.99, 0.995, trial) is None      # already agrees
    assert search_floor(errs, set(), 0.99, base, trial) is None           # nothing eligible
