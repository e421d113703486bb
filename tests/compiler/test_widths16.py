"""16-bit widths: the compiler quantizes to a ``LOG_INP_WIDTH`` / ``LOG_WGT_WIDTH`` 4 core.

Oracles are written here (numpy int64 arithmetic, direct loops over the kernel window, the
requantize rule of docs/compiler.md), independent of compiler/reference.py and of the
lowering; the VTA outputs come from fsim.  The int8 path is checked to be unchanged by the
artifact-hash comparison described in docs/dse.md ("Widths and accuracy"), not here.
"""

from __future__ import annotations

import numpy as np
import pytest
from onnx import helper

from vtaforge.compiler.compile import compile_model, lower_graph
from vtaforge.compiler.errors import CompileError
from vtaforge.compiler.ir import Graph, Node, TensorType, validate
from vtaforge.compiler.requant import requant_round
from vtaforge.compiler.models import DIGITS_ONNX, load_digits_split
from vtaforge.compiler.partition import partition
from vtaforge.compiler.quantize import QuantConfig, quantize
from vtaforge.compiler.onnx_frontend import import_onnx
from vtaforge.hw.config import preset
from vtaforge.hw.isa import AluOp
from vtaforge.runtime.artifact import SlotLayout, load_artifact, save_artifact
from vtaforge.runtime.executor import Executor
from vtaforge.runtime.fsim import FsimDevice

from _lower_util import RecordingFsim, conv_oracle
from _onnx_util import make_model, rand

TINY16 = preset("tiny").replace(LOG_INP_WIDTH=4, LOG_WGT_WIDTH=4, LOG_INP_BUFF_SIZE=13,
                                LOG_WGT_BUFF_SIZE=14)
TINY16_REQ = TINY16.replace(ALU_REQUANT=True)
TINY_I16W8 = preset("tiny").replace(LOG_INP_WIDTH=4, LOG_INP_BUFF_SIZE=13)




# ------------------------------------------------------------------ independent oracle
def _requant(acc, a, lo_dt, hi_dt):
    acc = acc.astype(np.int64)
    # one shift, or one per output channel (axis 1; ir "Per-channel weights")
    s = np.asarray(a["shift"], np.int64).reshape((1, -1) + (1,) * (acc.ndim - 2))
    rnd = np.where(s > 0, np.left_shift(1, np.maximum(s - 1, 0)), 0)
    acc = np.where(s > 0, (acc + rnd) >> np.maximum(s, 0), acc << np.maximum(-s, 0))
    assert lo_dt <= a["clip_lo"] <= a["clip_hi"] <= hi_dt
    return np.clip(acc, a["clip_lo"], a["clip_hi"])


def _oracle(qgraph, x, bits=16):
    """int64 execution of the quantized graph's integer steps (conv, dense, max-pool,
    flatten), from its constants and attributes; activations of ``bits`` bits (int16 range
    ``[-32768, 32767]`` by default)."""
    env = {}
    lo16, hi16 = -(1 << (bits - 1)), (1 << (bits - 1)) - 1
    for n in qgraph.nodes:
        a = n.attrs
        ins = [env.get(i, qgraph.constants.get(i)) for i in n.inputs]
        if n.op == "quantize":
            q = np.floor(x.astype(np.float64) * 2.0 ** -a["exp"] + 0.5)
            y = np.clip(q, lo16, hi16)
        elif n.op == "qconv2d":
            y = _requant(conv_oracle(ins[0], ins[1], ins[2], a["strides"], a["pads"], 1), a, lo16, hi16)
        elif n.op == "qdense":
            acc = ins[0].astype(np.int64) @ ins[1].astype(np.int64).T + ins[2].astype(np.int64)
            y = _requant(acc, a, lo16, hi16)
        elif n.op == "qmax_pool":
            (kh, kw), (sh, sw) = a["kernel"], a["strides"]
            pt, pl, pb, pr = a["pads"]
            xi = ins[0]
            xp = np.full((xi.shape[0], xi.shape[1], xi.shape[2] + pt + pb, xi.shape[3] + pl + pr),
                         lo16, np.int64)
            xp[:, :, pt:pt + xi.shape[2], pl:pl + xi.shape[3]] = xi
            ho, wo = (xp.shape[2] - kh) // sh + 1, (xp.shape[3] - kw) // sw + 1
            y = np.full(xi.shape[:2] + (ho, wo), -(1 << 40), np.int64)
            for i in range(kh):
                for j in range(kw):
                    y = np.maximum(y, xp[:, :, i:i + ho * sh:sh, j:j + wo * sw:sw])
        elif n.op == "flatten":
            y = ins[0].reshape(ins[0].shape[0], -1)
        elif n.op == "dequantize":
            continue
        else:
            raise AssertionError(f"oracle has no {n.op}")
        env[n.outputs[0]] = y
    return env


def _run(cm, x, cfg):
    dev = RecordingFsim(cfg)
    return Executor(cm, dev).run(x, keep=True), dev


def _assert_exact(cm, out, x, min_vta=2, bits=16):
    ref = _oracle(cm.qgraph, x, bits)
    n = 0
    for s in cm.steps:
        if s.op == "dequantize":
            continue
        got = out[s.outputs[0]]
        assert got.dtype == (np.int16 if bits == 16 else np.int8), (s.name, got.dtype)
        np.testing.assert_array_equal(got.astype(np.int64), ref[s.outputs[0]], err_msg=s.name)
        n += s.target == "vta"
    assert n >= min_vta


# ------------------------------------------------------------------ models
def _conv_model():
    """x[N,3,10,10] - Conv 3x3 (3->8, pad 1) + ReLU - MaxPool 2 - Conv 3x3 (8->20) + ReLU -
    Flatten - Gemm (20*3*3 -> 7)."""
    nodes = [helper.make_node("Conv", ["x", "w1", "b1"], ["c1"], pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c1"], ["r1"]),
             helper.make_node("MaxPool", ["r1"], ["p1"], kernel_shape=[2, 2], strides=[2, 2]),
             helper.make_node("Conv", ["p1", "w2", "b2"], ["c2"]),
             helper.make_node("Relu", ["c2"], ["r2"]),
             helper.make_node("Flatten", ["r2"], ["f"]),
             helper.make_node("Gemm", ["f", "w3", "b3"], ["y"], transB=1)]
    inits = {"w1": rand(8, 3, 3, 3, seed=1, scale=0.3), "b1": rand(8, seed=2, scale=0.1),
             "w2": rand(20, 8, 3, 3, seed=3, scale=0.2), "b2": rand(20, seed=4, scale=0.1),
             "w3": rand(7, 180, seed=5, scale=0.1), "b3": rand(7, seed=6, scale=0.1)}
    return make_model(nodes, [("x", ["N", 3, 10, 10])], [("y", ["N", 7])], inits)


@pytest.fixture(scope="module")
def conv16():
    m = _conv_model()
    calib = rand(16, 3, 10, 10, seed=7)
    x = rand(5, 3, 10, 10, seed=8, scale=1.3)   # beyond the calibration range: clips too
    return m, calib, x


@pytest.fixture(scope="module")
def digits():
    xtr, _ytr, xte, yte = load_digits_split()
    return xtr, xte[:64], yte[:64]


# ------------------------------------------------------------------ tests
def test_quant_config_widths_refused_with_one_line():
    with pytest.raises(CompileError, match=r"^QuantConfig.act_bits = 12: only 4 \(int4\), 8 "
                                           r"\(int8\) and 16 \(int16\) are supported$"):
        QuantConfig(act_bits=12)
    with pytest.raises(CompileError, match=r"^QuantConfig.wgt_bits = True"):
        QuantConfig(wgt_bits=True)


def test_conv_model_int16_on_vta_bit_exact(conv16):
    m, calib, x = conv16
    cm = compile_model(m, calib, TINY16)
    q = cm.qgraph
    acts = {t.dtype for k, t in q.types.items() if t.exp is not None and k not in q.constants
            and t.dtype != "int32"}
    assert acts == {"int16"}
    wts = [q.constants[n.inputs[1]] for n in q.nodes if n.op in ("qconv2d", "qdense")]
    assert all(w.dtype == np.int16 for w in wts) and max(int(abs(w).max()) for w in wts) > 127
    places = {s.op: (s.target, s.reason) for s in cm.steps}
    assert places["qconv2d"][0] == places["qdense"][0] == "vta"
    assert places["qmax_pool"][0] == "cpu"
    assert "ACC8 loads int8 values only" in places["qmax_pool"][1]
    for n in q.nodes:     # the overflow proof: exact worst case for the constant weights
        if n.op in ("qconv2d", "qdense"):
            w = q.constants[n.inputs[1]].astype(np.int64).reshape(len(q.constants[n.inputs[2]]), -1)
            worst = int(np.abs(w).sum(1).max()) * 32768 + int(abs(q.constants[n.inputs[2]]).max())
            assert worst + n.attrs["round"] < 2 ** 31, n.name
            assert n.attrs["clip_hi"] == 32767 and n.attrs["clip_lo"] in (0, -32768)
    out, _dev = _run(cm, x, TINY16)
    _assert_exact(cm, out, x)


def test_int16_with_alu_requant_uses_shr_max_min_not_req(conv16):
    m, calib, x = conv16
    cm = compile_model(m, calib, TINY16_REQ)
    out, dev = _run(cm, x, TINY16_REQ)
    assert int(AluOp.REQ) not in dev.alu_ops      # 8-bit clip immediates: no fused REQ
    assert {int(AluOp.SHR), int(AluOp.MAX), int(AluOp.MIN)} <= dev.alu_ops
    _assert_exact(cm, out, x)


def test_int16_activations_int8_weights(conv16):
    m, calib, x = conv16
    cm = compile_model(m, calib, TINY_I16W8)
    q = cm.qgraph
    wts = [q.constants[n.inputs[1]] for n in q.nodes if n.op in ("qconv2d", "qdense")]
    assert all(w.dtype == np.int8 for w in wts)
    assert all(s.target == "vta" for s in cm.steps if s.op in ("qconv2d", "qdense"))
    out, _ = _run(cm, x, TINY_I16W8)
    _assert_exact(cm, out, x)


def test_digits_int16_accuracy_and_exact(digits):
    xtr, x, y = digits
    cm = compile_model(str(DIGITS_ONNX), xtr, TINY16)
    assert [s.name for s in cm.steps if s.target == "vta"] == ["conv1", "conv2", "fc1", "fc2"]
    out, _ = _run(cm, x, TINY16)
    _assert_exact(cm, out, x, min_vta=4)
    assert np.mean(out[cm.outputs[0]].argmax(1) == y) >= 0.95


def test_worst_case_inputs_do_not_overflow():
    """A hand-built int16 conv whose weights sit on the int32 bound, fed the extreme inputs
    ``±32767`` aligned with the weights' signs: fsim equals the int64 oracle."""
    rng = np.random.default_rng(3)
    w = rng.integers(-1800, 1801, (4, 4, 3, 3))
    w[0] = np.where(rng.random((4, 3, 3)) < 0.5, -1800, 1800)    # channel 0: the largest L1
    w = w.astype(np.int16)
    l1 = int(np.abs(w.astype(np.int64)).reshape(4, -1).sum(1).max())
    assert 2 ** 30 < l1 * 32768 < 2 ** 31 - 2 ** 16             # the proof just holds
    b = np.array([50, -50, 0, 3], np.int32)
    g = Graph(name="w16", kind="quantized")
    g.inputs = ["x"]
    g.types["x"] = TensorType("float32", ("N", 4, 5, 5))
    g.nodes.append(Node("q", "quantize", ["x"], ["xq"], {"exp": 0, "dtype": "int16"}))
    g.types["xq"] = TensorType("int16", ("N", 4, 5, 5), 0)
    g.add_constant("w", w, 0)
    g.add_constant("b", b, 0)
    sh = 16
    g.nodes.append(Node("conv", "qconv2d", ["xq", "w", "b"], ["y"],
                        {"kernel": (3, 3), "strides": (1, 1), "pads": (1, 1, 1, 1), "groups": 1,
                         "shift": sh, "round": requant_round(sh), "mult": 1,
                         "clip_lo": -32768, "clip_hi": 32767, "exp_out": sh}))
    g.types["y"] = TensorType("int16", ("N", 4, 5, 5), sh)
    g.nodes.append(Node("dq", "dequantize", ["y"], ["out"], {}))
    g.types["out"] = TensorType("float32", ("N", 4, 5, 5))
    g.outputs = ["out"]
    validate(g)
    part = partition(g, TINY16)
    assert part.target("conv") == "vta", part.report()
    cm = lower_graph(g, part)
    sgn = np.sign(w[0].astype(np.float32))            # [4, 3, 3]: align with channel 0
    x = np.zeros((3, 4, 5, 5), np.float32)
    x[0, :, 1:4, 1:4] = 32767 * sgn
    x[1, :, 1:4, 1:4] = -32768 * sgn
    x[2] = rng.integers(-32768, 32768, (4, 5, 5))
    out = Executor(cm, FsimDevice(TINY16)).run(x, keep=True)
    xq = np.clip(x, -32768, 32767).astype(np.int64)     # quantize at exp 0 saturates
    acc = conv_oracle(xq, w, b, (1, 1), (1, 1, 1, 1), 1)
    assert abs(acc).max() > 2 ** 29                     # the extremes were reached
    want = np.clip((acc + (1 << (sh - 1))) >> sh, -32768, 32767)
    np.testing.assert_array_equal(out["y"].astype(np.int64), want)


def test_width_mismatch_reasons():
    xtr, _, _, _ = load_digits_split()
    fg = import_onnx(str(DIGITS_ONNX))
    q8 = quantize(fg, xtr[:64])
    part = partition(q8, TINY16)
    assert all(p.target == "cpu" for p in part.placements.values())
    assert "are not the int8 of the quantized graph" in part.placements["conv1"].reason
    q16 = quantize(fg, xtr[:64], QuantConfig(act_bits=16, wgt_bits=16))
    part = partition(q16, preset("tiny"))
    assert part.placements["conv1"].target == "cpu"
    assert part.placements["conv1"].reason == ("int16 activations on a core with INP_WIDTH 8: "
                                               "quantize for the core's widths")
    part = partition(q16, TINY_I16W8)
    assert part.placements["fc1"].reason == ("int16 weights on a core with WGT_WIDTH 8: "
                                             "quantize for the core's widths")


def test_int16_artifact_round_trip(conv16, tmp_path):
    m, calib, x = conv16
    cm = compile_model(m, calib, TINY16)
    p = tmp_path / "m16.vtapkg"
    save_artifact(cm, p)
    cm2 = load_artifact(p, TINY16)
    lay = next(s.layouts["x"] for s in cm2.steps if s.op == "qdense")
    assert lay.elem_bytes == 2 and lay.dtype == np.int16
    a = Executor(cm, FsimDevice(TINY16)).run(x)["y"]
    b = Executor(cm2, FsimDevice(TINY16)).run(x)["y"]
    np.testing.assert_array_equal(a, b)


def test_slot_layout_elem_bytes():
    lay = SlotLayout((3, 2, 2), 1, 4, elem_bytes=2)
    assert lay.block_bytes == 2 * SlotLayout((3, 2, 2), 1, 4).block_bytes
    assert SlotLayout.from_json(lay.to_json()) == lay
    assert len(SlotLayout((3, 2, 2), 1, 4).to_json()) == 5     # int8 manifests unchanged
    x = np.arange(-6000, 6000, 1000, dtype=np.int16).reshape(1, 3, 2, 2)
    p = lay.pack(x)
    assert p.dtype == np.int16 and p.nbytes == lay.block_bytes
    from vtaforge.runtime.cpu_ops import pack_act, unpack_act
    np.testing.assert_array_equal(unpack_act(p.view(np.uint8), 1, 3, 2, 2, 1, 4, np.int16), x)
    with pytest.raises(ValueError, match="out of range"):
        pack_act(x, 1, 4)
    from vtaforge.runtime.artifact import ArtifactError
    with pytest.raises(ArtifactError, match="elem_bytes 4 must be 1"):
        SlotLayout((3, 2, 2), 1, 4, elem_bytes=4)


def test_qdq_model_on_int16_core_stays_int8_on_cpu():
    import sys
    sys.path.insert(0, __file__.rsplit("/", 1)[0])
    from test_qdq_mul import _qdq_model

    m = _qdq_model()
    calib = np.random.default_rng(5).uniform(-1.5, 1.5, (8, 4, 8, 8)).astype(np.float32)
    cm = compile_model(m, calib, TINY16)
    assert all(s.target == "cpu" for s in cm.steps)
    with pytest.raises(CompileError, match="QDQ model carries int8 scales"):
        quantize(import_onnx(m), calib, QuantConfig(act_bits=16))
