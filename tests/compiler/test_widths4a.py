"""4-bit activations: the compiler quantizes to a ``LOG_INP_WIDTH`` 2 core (int4 INP and OUT
elements, two values per byte, with int8 or int4 weights).

Oracles are written here, independent of compiler/reference.py and of the lowering: the
integer steps in numpy int64 (conv windows of ``_lower_util.conv_oracle``, the requantize
rule of docs/compiler.md, clips asserted inside int4), and the nibble layout of a packed
activation with Python integers (lane ``2k`` in bits [3:0] of byte ``k``).  The VTA outputs
come from fsim; the configs are the exact objects of tests/runtime/test_int4_activations.py.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner
from onnx import helper

from vtaforge.cli import main
from vtaforge.compiler.compile import compile_model
from vtaforge.compiler.errors import CompileError
from vtaforge.compiler.ir import Node, qrange
from vtaforge.compiler.models import DIGITS_ONNX, load_digits_split
from vtaforge.compiler.onnx_frontend import import_onnx
from vtaforge.compiler.partition import capability_table, partition, vta_support
from vtaforge.compiler.quantize import QuantConfig, quantize
from vtaforge.hw.config import load_config, preset
from vtaforge.hw.isa import AluOp
from vtaforge.runtime.artifact import ArtifactError, SlotLayout, load_artifact, save_artifact
from vtaforge.runtime.cpu_ops import pack_act, unpack_act
from vtaforge.runtime.executor import Executor
from vtaforge.runtime.fsim import FsimDevice

from _lower_util import RecordingFsim, conv_oracle
from _onnx_util import make_model, rand
from test_widths16 import _conv_model

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "runtime"))
from test_int4_activations import A4W4, A4W8  # noqa: E402

CFGS = [A4W8, A4W4]
IDS = ["a4w8", "a4w4"]


def _nibbles(vals) -> bytes:
    """Independent int4 packing: value ``2k`` in bits [3:0] of byte ``k``, ``2k+1`` above."""
    v = [int(a) & 0xF for a in np.asarray(vals).reshape(-1)]
    return bytes(v[i] | (v[i + 1] << 4) for i in range(0, len(v), 2))


# ------------------------------------------------------------------ independent oracle
def _requant(acc, a):
    acc = acc.astype(np.int64)
    s = a["shift"]
    assert a["mult"] == 1
    if s > 0:
        acc = (acc + (1 << (s - 1))) >> s
    elif s < 0:
        acc = acc << -s
    assert -8 <= a["clip_lo"] <= a["clip_hi"] <= 7, a      # int4 clips only
    return np.clip(acc, a["clip_lo"], a["clip_hi"])


def _oracle(qgraph, x):
    """int64 execution of the quantized graph's integer steps, int4 activations."""
    env = {}
    for n in qgraph.nodes:
        a = n.attrs
        ins = [env.get(i, qgraph.constants.get(i)) for i in n.inputs]
        if n.op == "quantize":
            y = np.clip(np.floor(x.astype(np.float64) * 2.0 ** -a["exp"] + 0.5), -8, 7)
        elif n.op == "qconv2d":
            y = _requant(conv_oracle(ins[0], ins[1], ins[2], a["strides"], a["pads"], 1), a)
        elif n.op == "qdense":
            acc = ins[0].astype(np.int64) @ ins[1].astype(np.int64).T + ins[2].astype(np.int64)
            y = _requant(acc, a)
        elif n.op == "qadd":
            y = _requant((ins[0].astype(np.int64) << a["lshift_a"])
                         + (ins[1].astype(np.int64) << a["lshift_b"]), a)
        elif n.op == "qmax_pool":
            (kh, kw), (sh, sw) = a["kernel"], a["strides"]
            assert not any(a["pads"])
            xi = ins[0]
            ho, wo = (xi.shape[2] - kh) // sh + 1, (xi.shape[3] - kw) // sw + 1
            y = np.full(xi.shape[:2] + (ho, wo), -(1 << 40), np.int64)
            for i in range(kh):
                for j in range(kw):
                    y = np.maximum(y, xi[:, :, i:i + ho * sh:sh, j:j + wo * sw:sw])
        elif n.op == "flatten":
            y = ins[0].reshape(ins[0].shape[0], -1)
        elif n.op == "dequantize":
            continue
        else:
            raise AssertionError(f"oracle has no {n.op}")
        assert y.min() >= -8 and y.max() <= 7, n.name
        env[n.outputs[0]] = y
    return env


def _assert_exact(cm, out, x, min_vta):
    ref = _oracle(cm.qgraph, x)
    n = 0
    for s in cm.steps:
        if s.op == "dequantize":
            continue
        got = out[s.outputs[0]]
        assert got.dtype == np.int8, (s.name, got.dtype)
        np.testing.assert_array_equal(got.astype(np.int64), ref[s.outputs[0]], err_msg=s.name)
        n += s.target == "vta"
    assert n >= min_vta


def _acts(q):
    return {t.dtype for k, t in q.types.items() if t.exp is not None and k not in q.constants
            and t.dtype != "int32"}


def _residual_model():
    """x[N,4,6,6] - Conv 3x3 (4->4, pad 1) + ReLU = a - Conv 1x1 (4->4) = b - Add(a, b) -
    ReLU - Conv 1x1 (4->6) = y."""
    nodes = [helper.make_node("Conv", ["x", "w1", "b1"], ["c1"], pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c1"], ["a"]),
             helper.make_node("Conv", ["a", "w2", "b2"], ["b"]),
             helper.make_node("Add", ["a", "b"], ["s"]),
             helper.make_node("Relu", ["s"], ["r"]),
             helper.make_node("Conv", ["r", "w3", "b3"], ["y"])]
    inits = {"w1": rand(4, 4, 3, 3, seed=11, scale=0.3), "b1": rand(4, seed=12, scale=0.1),
             "w2": rand(4, 4, 1, 1, seed=13, scale=0.5), "b2": rand(4, seed=14, scale=0.1),
             "w3": rand(6, 4, 1, 1, seed=15, scale=0.5), "b3": rand(6, seed=16, scale=0.1)}
    return make_model(nodes, [("x", ["N", 4, 6, 6])], [("y", ["N", 6, 6, 6])], inits)


@pytest.fixture(scope="module")
def conv4():
    m = _conv_model()
    calib = rand(16, 3, 10, 10, seed=7)
    x = rand(5, 3, 10, 10, seed=8, scale=3.0)   # beyond the calibration range: clips too
    return m, calib, x


@pytest.fixture(scope="module")
def digits():
    xtr, _ytr, xte, yte = load_digits_split()
    return xtr, xte[:64], yte[:64]


# ------------------------------------------------------------------ quantizer
def test_quant_config_act_bits_4():
    qc = QuantConfig(act_bits=4)
    assert qc.qmax == 7 and QuantConfig(act_bits=4, wgt_bits=4).wgt_bits == 4
    assert qrange("int4") == (-8, 7)
    with pytest.raises(CompileError, match=r"^QuantConfig.act_bits = 2: only 4 \(int4\), 8 "
                                           r"\(int8\) and 16 \(int16\) are supported$"):
        QuantConfig(act_bits=2)


def test_qdq_model_refused_at_act_bits_4():
    sys.path.insert(0, str(Path(__file__).parent))
    from test_qdq_mul import _qdq_model

    m = _qdq_model()
    calib = np.random.default_rng(5).uniform(-1.5, 1.5, (8, 4, 8, 8)).astype(np.float32)
    with pytest.raises(CompileError) as e:
        quantize(import_onnx(m), calib, QuantConfig(act_bits=4))
    assert str(e.value) == ("a QDQ model carries int8 scales: quantize it with act_bits 8, "
                            "not 4")
    # compile_model keeps such a model at int8, on the CPU of an int4 core with the reason
    cm = compile_model(m, calib, A4W8)
    assert all(s.target == "cpu" for s in cm.steps)
    conv = next(s for s in cm.steps if s.op == "qconv2d")
    assert conv.reason == ("the core's widths INP 4 / WGT 8 / OUT 4 are not the int8 of the "
                           "quantized graph (an int8 QDQ model keeps its int8 scales; "
                           "quantize the float model for this core)")


# ------------------------------------------------------------------ slot layout
def test_slot_layout_int4_nibbles_and_round_trip():
    lay = SlotLayout((5, 2, 3), 1, 4, int4=True)
    lay8 = SlotLayout((5, 2, 3), 1, 4)
    assert lay.bits == 4 and lay.block_bytes * 2 == lay8.block_bytes
    assert SlotLayout.from_json(lay.to_json()) == lay and lay.to_json()[5:] == [1, 4]
    assert SlotLayout.from_json(json.loads(json.dumps(lay.to_json()))) == lay
    assert len(lay8.to_json()) == 5                       # int8 manifests unchanged
    rng = np.random.default_rng(1)
    x = rng.integers(-8, 8, (3, 5, 2, 3)).astype(np.int8)
    x[0, 0, 0, 0] = -8
    p = lay.pack(x)
    assert p.nbytes == lay.nbytes(3)
    # independent layout: [N, ceil(C/4), H, W, 1, 4] of int8, channel-padded, then nibbles
    want = np.zeros((3, 8, 2, 3), np.int64)
    want[:, :5] = x
    want = want.reshape(3, 2, 4, 2, 3).transpose(0, 1, 3, 4, 2)
    assert p.tobytes() == _nibbles(want)
    np.testing.assert_array_equal(lay.unpack(p, 3), x)
    np.testing.assert_array_equal(unpack_act(p, 3, 5, 2, 3, 1, 4, bits=4), x)
    with pytest.raises(ValueError, match=r"as int4: out of range"):
        pack_act(x * 2, 1, 4, bits=4)
    with pytest.raises(ArtifactError, match=r"int4 values need elem_bytes 1 and an even "
                                            r"batch\*cblk"):
        SlotLayout((3, 1, 1), 1, 1, int4=True)
    with pytest.raises(ArtifactError, match=r"bits 8 must be 4"):
        SlotLayout.from_json([[3, 1, 1], 1, 4, [0, 0, 0, 0], None, 1, 8])


# ------------------------------------------------------------------ conv model on fsim
@pytest.mark.parametrize("cfg", CFGS, ids=IDS)
def test_conv_model_int4_on_vta_bit_exact(conv4, cfg):
    m, calib, x = conv4
    cm = compile_model(m, calib, cfg)
    q = cm.qgraph
    assert _acts(q) == {"int4"}
    wts = [q.constants[n.inputs[1]] for n in q.nodes if n.op in ("qconv2d", "qdense")]
    assert all(w.dtype == np.int8 for w in wts)
    wmax = max(int(abs(w).max()) for w in wts)
    assert wmax <= 7 if cfg.WGT_WIDTH == 4 else wmax > 7
    for n in q.nodes:       # the overflow proof with 2**(act_bits-1) = 8
        if n.op in ("qconv2d", "qdense"):
            w = q.constants[n.inputs[1]].astype(np.int64).reshape(len(q.constants[n.inputs[2]]), -1)
            worst = int(np.abs(w).sum(1).max()) * 8 + int(abs(q.constants[n.inputs[2]]).max())
            assert worst + n.attrs["round"] < 2 ** 31, n.name
            assert n.attrs["clip_hi"] == 7 and n.attrs["clip_lo"] in (0, -8)
    places = {s.name: (s.op, s.target, s.reason) for s in cm.steps}
    assert [s.op for s in cm.steps if s.target == "vta"] == ["qconv2d", "qconv2d", "qdense"]
    pool = next(v for v in places.values() if v[0] == "qmax_pool")
    assert pool[1] == "cpu" and pool[2] == (
        "int4 operands: ACC8 loads int8 values only, so int4 activations (two per byte) "
        "cannot reach the accumulator for this element-wise op (CPU, exact)")
    vta = [s for s in cm.steps if s.target == "vta"]
    assert all(lay.int4 for s in vta for lay in s.layouts.values())
    out = Executor(cm, FsimDevice(cfg)).run(x, keep=True)
    _assert_exact(cm, out, x, min_vta=3)
    xq = out[cm.steps[0].outputs[0]]
    assert xq.min() == -8 and xq.max() == 7              # the input clips hit both bounds
    assert any(out[s.outputs[0]].max() == 7 for s in vta)


def test_int4_with_alu_requant_bit_exact(conv4):
    """The fused REQ (8-bit clip immediates) takes the ReLU clip [0, 7]; [-8, 7] takes
    SHR/MAX/MIN: same integers."""
    m, calib, x = conv4
    cfg = A4W8.replace(ALU_REQUANT=True)
    cm = compile_model(m, calib, cfg)
    dev = RecordingFsim(cfg)
    out = Executor(cm, dev).run(x, keep=True)
    assert int(AluOp.REQ) in dev.alu_ops
    _assert_exact(cm, out, x, min_vta=3)


@pytest.mark.parametrize("cfg", CFGS, ids=IDS)
def test_residual_add_gemm_int4_bit_exact(cfg):
    m = _residual_model()
    calib = rand(16, 4, 6, 6, seed=17)
    cm = compile_model(m, calib, cfg)
    add = next(s for s in cm.steps if s.op == "qadd")
    assert add.target == "vta", add.reason
    assert add.reason.startswith("residual add of int4 tensors: GEMM over INP loads")
    assert add.trace.stats.get("gemm_add") is True
    assert [s.target for s in cm.steps if s.op in ("qconv2d", "qadd")] == ["vta"] * 4
    x = rand(3, 4, 6, 6, seed=18, scale=2.0)
    out = Executor(cm, FsimDevice(cfg)).run(x, keep=True)
    _assert_exact(cm, out, x, min_vta=4)


def test_residual_add_lshift_beyond_int4_weight_on_cpu():
    q = quantize(import_onnx(_residual_model()), rand(16, 4, 6, 6, seed=17),
                 QuantConfig(act_bits=4, wgt_bits=4))
    n = next(n for n in q.nodes if n.op == "qadd")
    far = Node(n.name, n.op, n.inputs, n.outputs, dict(n.attrs, lshift_a=3, lshift_b=0))
    ok, why = vta_support(far, q, A4W4)
    assert not ok and why == (
        "int4 operands: ACC8 loads int8 values only, and the GEMM form of the add needs "
        "BLOCK_IN == BLOCK_OUT (here 4 / 4) and both lshift <= 2 (here 3 / 0) (CPU, exact)")
    ok, _ = vta_support(far, q, A4W8)           # int8 weights: 1 << 3 is a weight
    assert ok


# ------------------------------------------------------------------ partition reasons
def test_int4_width_reasons(digits):
    xtr, _, _ = digits
    fg = import_onnx(str(DIGITS_ONNX))
    q8 = quantize(fg, xtr[:64])
    part = partition(q8, A4W8)
    assert all(p.target == "cpu" for p in part.placements.values())
    assert part.placements["conv1"].reason.startswith(
        "the core's widths INP 4 / WGT 8 / OUT 4 are not the int8 of the quantized graph")
    q4 = quantize(fg, xtr[:64], QuantConfig(act_bits=4))
    assert _acts(q4) == {"int4"}
    for core in (preset("tiny"), preset("tiny").replace(LOG_WGT_WIDTH=2, LOG_WGT_BUFF_SIZE=12)):
        part = partition(q4, core)
        assert all(p.target == "cpu" for p in part.placements.values())
        assert part.placements["conv1"].reason == ("int4 activations on a core with INP_WIDTH "
                                                   "8: quantize for the core's widths")
    part = partition(q4, A4W4)      # int8 weights beyond [-8, 7] on an int4-weight core
    assert part.placements["conv1"].reason == ("int8 weights outside int4 [-8, 7] on a core "
                                               "with WGT_WIDTH 4: quantize for the core's widths")
    part = partition(q4, A4W8)
    assert [n for n, p in part.placements.items() if p.target == "vta"] == [
        "conv1", "conv2", "fc1", "fc2"]
    assert "ACC8 loads int8 values only" in part.placements["pool1"].reason
    cap = capability_table(A4W4)
    assert "int4 activations (nibbles), int4 weights" in cap["qconv2d"]
    assert "GEMM over INP loads" in cap["qadd"] and "ACC8 loads int8 only: cpu" in cap["qmax_pool"]


# ------------------------------------------------------------------ digits
@pytest.mark.parametrize("cfg", CFGS, ids=IDS)
def test_digits_int4_activations_exact_and_accuracy(digits, cfg):
    xtr, x, y = digits
    cm = compile_model(str(DIGITS_ONNX), xtr, cfg)
    assert _acts(cm.qgraph) == {"int4"}
    assert [s.name for s in cm.steps if s.target == "vta"] == ["conv1", "conv2", "fc1", "fc2"]
    assert {s.name for s in cm.steps if s.target == "cpu" and s.op.startswith("q")
            and s.op != "quantize"} == {"pool1", "pool2"}
    out = Executor(cm, FsimDevice(cfg)).run(x, keep=True)
    _assert_exact(cm, out, x, min_vta=4)
    # 500 held-out images: a4w8 91.0 %, a4w4 90.4 % (int8 97.8 %, float 98.0 %)
    assert np.mean(out[cm.outputs[0]].argmax(1) == y) >= 0.8


# ------------------------------------------------------------------ artifact and CLI
def test_int4_artifact_and_cli_round_trip(conv4, tmp_path):
    m, calib, x = conv4
    cfg = {"TARGET": "sim", "LOG_INP_WIDTH": 2, "LOG_WGT_WIDTH": 2, "LOG_INP_BUFF_SIZE": 14,
           "LOG_WGT_BUFF_SIZE": 17}
    cj = tmp_path / "a4w4.json"
    cj.write_text(json.dumps(cfg))
    mp, cp, xp = tmp_path / "m.onnx", tmp_path / "c.npy", tmp_path / "x.npy"
    mp.write_bytes(m.SerializeToString())
    np.save(cp, calib)
    np.save(xp, x)
    pkg = tmp_path / "m.vtapkg"
    r = CliRunner().invoke(main, ["compile", str(mp), "-o", str(pkg), "--config", str(cj),
                                  "--calibrate", str(cp)])
    assert r.exit_code == 0, r.output
    yp = tmp_path / "y.npy"
    r = CliRunner().invoke(main, ["run", "--model", str(pkg), "--config", str(cj), "--input",
                                  str(xp), "--output", str(yp)])
    assert r.exit_code == 0, r.output
    y2 = tmp_path / "y2.npy"     # without --config a .vtapkg runs on its own config
    r = CliRunner().invoke(main, ["run", "--model", str(pkg), "--input", str(xp), "--output",
                                  str(y2)])
    assert r.exit_code == 0, r.output
    np.testing.assert_array_equal(np.load(y2), np.load(yp))
    r = CliRunner().invoke(main, ["run", "--model", str(pkg), "--config", "pynq", "--input",
                                  str(xp)])
    assert r.exit_code == 2 and "was compiled for config" in r.output, r.output
    core = load_config(str(cj))
    assert (core.INP_WIDTH, core.WGT_WIDTH) == (4, 4)
    cm = compile_model(m, calib, core)
    np.testing.assert_array_equal(np.load(yp), Executor(cm, FsimDevice(core)).run(x)["y"])
    cm2 = load_artifact(pkg, core)             # the CLI's .vtapkg loads back
    lay = next(s.layouts["x"] for s in cm2.steps if s.op == "qdense")
    assert lay.int4 and lay.bits == 4
    np.testing.assert_array_equal(Executor(cm2, FsimDevice(core)).run(x)["y"], np.load(yp))
    save_artifact(cm2, tmp_path / "b.vtapkg")
    cm3 = load_artifact(tmp_path / "b.vtapkg", core)
    assert [s.layouts for s in cm3.steps] == [s.layouts for s in cm2.steps]


def test_int4_row_bands_under_memory_budget():
    """Row bands of an im2col conv (host-packed int4 input bands, output offsets in
    nibble-packed rows) equal the unbudgeted run."""
    nodes = [helper.make_node("Conv", ["x", "w1", "b1"], ["y"], pads=[1, 1, 1, 1])]
    inits = {"w1": rand(16, 3, 3, 3, seed=1, scale=0.3), "b1": rand(16, seed=2, scale=0.1)}
    m = make_model(nodes, [("x", ["N", 3, 32, 32])], [("y", ["N", 16, 32, 32])], inits)
    cfg = preset("pynq").replace(LOG_INP_WIDTH=2, LOG_INP_BUFF_SIZE=14)
    cm = compile_model(m, rand(8, 3, 32, 32, seed=5), cfg)
    x = rand(1, 3, 32, 32, seed=6, scale=2.0)
    ref = Executor(cm, FsimDevice(cfg)).run(x)["y"]
    for budget, launches in ((12000, 8), (9000, 32)):
        ex = Executor(cm, FsimDevice(cfg), memory_budget=budget)
        np.testing.assert_array_equal(ex.run(x)["y"], ref)
        assert ex.stats["Conv_0"].launches == launches
