"""ONNX ``Min`` (the second op added by following docs/compiler.md "Adding an op", beside
``Max``) and the broadcast forms of ``qmax`` / ``qmin``: imported as ``min`` (a float scalar
constant as ``clip``), quantized to ``qmin`` with operands aligned to the output's exp,
placed on VTA as ALU MIN -- of two tensors, by a per-channel ``[N,C,1,1]`` tensor, by a
per-channel constant (resident ACC rows) or a scalar one (the immediate) -- or on the CPU
with a reason, and run on fsim.  Oracles: every fsim tensor equals the numpy integer
reference (``run_quantized``), each max / min output equals ``np.maximum`` /
``np.minimum`` of the int8 operands fsim produced (numpy integer math, no compiler code),
and the output follows onnxruntime's float result."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import helper

from _onnx_util import make_model, rand, run_ort
from vtaforge.compiler import import_onnx, partition, quantize
from vtaforge.compiler.compile import compile_model, lower_graph, lower_node
from vtaforge.compiler.ir import TensorType, validate
from vtaforge.compiler.reference import run_quantized
from vtaforge.hw.config import preset
from vtaforge.runtime.executor import Executor
from vtaforge.runtime.fsim import FsimDevice

_NP = {"qmax": np.maximum, "qmin": np.minimum}


def _cos(a: np.ndarray, b: np.ndarray) -> float:
    a, b = a.astype(np.float64).ravel(), b.astype(np.float64).ravel()
    return float(a @ b / (np.linalg.norm(a) * np.linalg.norm(b)))


def _net():
    """Two conv branches joined by ``Min`` (tensor form), a ``Max`` with their per-channel
    means (``[N,C,1,1]`` tensor form), a ``Min`` with a per-channel constant, a ``Max`` with a
    scalar (a clip), then a 1x1 conv."""
    nodes = [helper.make_node("Conv", ["x", "w1"], ["c1"], pads=[1, 1, 1, 1], name="conv1"),
             helper.make_node("Conv", ["x", "w2"], ["c2"], pads=[1, 1, 1, 1], name="conv2"),
             helper.make_node("Min", ["c1", "c2"], ["m"], name="minout"),
             helper.make_node("GlobalAveragePool", ["c2"], ["g"], name="gap"),
             helper.make_node("Max", ["g", "m"], ["m2"], name="chmax"),
             helper.make_node("Min", ["m2", "cc"], ["m3"], name="cmin"),
             helper.make_node("Max", ["m3", "lo"], ["m4"], name="floor"),
             helper.make_node("Conv", ["m4", "w3"], ["y"], name="conv3")]
    return make_model(nodes, [("x", ["N", 3, 8, 8])], [("y", ["N", 8, 8, 8])],
                      {"w1": rand(16, 3, 3, 3, seed=1, scale=0.4), "w2": rand(16, 3, 3, 3, seed=2, scale=0.05),
                       "w3": rand(8, 16, 1, 1, seed=3, scale=0.3), "cc": rand(16, 1, 1, seed=9, scale=0.5),
                       "lo": np.array(-0.3, np.float32)})


def test_import_forms():
    ops = {n.name: n for n in import_onnx(_net()).nodes}
    assert ops["minout"].op == "min" and ops["cmin"].op == "min" and ops["cmin"].inputs[1] == "cc"
    assert ops["chmax"].op == "max" and ops["chmax"].inputs[1] == "g"     # the smaller operand second
    fl = ops["floor"]
    assert (fl.op, fl.attrs["min"], fl.attrs["max"]) == ("clip", float(np.float32(-0.3)), None)
    one = make_model([helper.make_node("Min", ["x", "hi"], ["y"], name="ceil")], [("x", ["N", 4])],
                     [("y", ["N", 4])], {"hi": np.array(0.5, np.float32)})
    (n,) = import_onnx(one).nodes
    assert (n.op, n.attrs["min"], n.attrs["max"]) == ("clip", None, 0.5)
    for ins, inits, why, out in ((["x", "x", "x"], {}, "3 inputs", [1, 4]),
                                 (["x", "k"], {"k": np.ones((1, 4), np.int64)}, "int64 constant", [1, 4]),
                                 (["x", "e"], {"e": np.ones((2, 4), np.float32)}, "enlarges", [2, 4])):
        m = make_model([helper.make_node("Min", ins, ["y"], name="m")], [("x", [1, 4])], [("y", out)], inits)
        (n,) = import_onnx(m).nodes
        assert n.op == "onnx" and why in n.attrs["why"], n.attrs["why"]


def test_quantized_operands_share_one_exp():
    q = quantize(import_onnx(_net()), rand(4, 3, 8, 8, seed=5))
    ext = [n for n in q.nodes if n.op in ("qmax", "qmin")]
    assert [n.op for n in ext] == ["qmin", "qmax", "qmin"]
    for n in ext:
        ta, tb, to = (q.types[t] for t in list(n.inputs) + n.outputs)
        assert ta.exp == tb.exp == to.exp and n.attrs == {}
    cq = q.constants[ext[2].inputs[1]]          # the constant, quantized at the output's exp
    want = np.clip(np.rint(_net_const() / 2.0 ** q.types[ext[2].outputs[0]].exp), -128, 127)
    np.testing.assert_array_equal(cq, want.astype(np.int8))


def _net_const() -> np.ndarray:
    return rand(16, 1, 1, seed=9, scale=0.5).astype(np.float64)


def test_placement_and_reasons():
    q = quantize(import_onnx(_net()), rand(4, 3, 8, 8, seed=5))
    p = partition(q, "pynq")
    why = {n.name: p.placements[n.name].reason for n in q.nodes if n.op in ("qmax", "qmin")}
    assert all(p.target(k) == "vta" for k in why), why
    assert "ALU MIN (tensor operand)" in why["minout"]
    assert "per-channel tensor" in why["chmax"] and "ALU MAX" in why["chmax"]
    assert "per-channel constant" in why["cmin"] and "ALU MIN" in why["cmin"]
    off = partition(q, preset("pynq").replace(ACC_8BIT=False))
    assert all(off.target(k) == "cpu" and "ACC_8BIT" in off.placements[k].reason for k in why)
    # a broadcast over the channels (one map for all of them) is not an ALU loop VTA runs
    bc = make_model([helper.make_node("Min", ["x", "s"], ["y"], name="mb")],
                    [("x", ["N", 4, 3, 3]), ("s", ["N", 1, 3, 3])], [("y", ["N", 4, 3, 3])])
    qb = quantize(import_onnx(bc), {"x": rand(2, 4, 3, 3, seed=6), "s": rand(2, 1, 3, 3, seed=7)})
    pb = partition(qb, "pynq")
    assert pb.target("mb") == "cpu" and "broadcast tensor" in pb.placements["mb"].reason


@pytest.mark.parametrize("cfg", ["pynq", "tiny", "batch2"])
def test_lowers_on_every_config(cfg):
    q = quantize(import_onnx(_net()), rand(4, 3, 8, 8, seed=5))
    c = preset(cfg)
    slots = {}
    for n in q.nodes:
        if n.op in ("qmax", "qmin"):
            assert partition(q, c).target(n.name) == "vta"
            lo, act = lower_node(c, q, n, f"t/{n.name}")
            slots[n.name] = (set(act), set(lo.consts))
    assert slots == {"minout": ({"a", "b"}, set()), "chmax": ({"a", "b"}, set()), "cmin": ({"a"}, {"c"})}


def _check_run(cm, c, feeds, qgraph=None):
    """fsim equals the integer reference at every tensor of ``qgraph`` (default the compiled
    model's), and every max / min output equals numpy's of its int8 operands; returns
    fsim's tensors."""
    qgraph = cm.qgraph if qgraph is None else qgraph
    got = Executor(cm, FsimDevice(c)).run(feeds, keep=True)
    ref = run_quantized(qgraph, feeds, keep_all=True)
    for s in cm.steps:
        for o in s.outputs:
            if o in got and o in ref:
                np.testing.assert_array_equal(got[o], ref[o], err_msg=f"{s.name} ({s.op})")
        if s.op in _NP:
            a, b = (got[i] if i in got else qgraph.constants[i] for i in s.inputs)
            assert a.dtype == np.int8 and b.dtype == np.int8
            np.testing.assert_array_equal(got[s.outputs[0]], _NP[s.op](a, b), err_msg=s.name)
    return got


@pytest.mark.parametrize("cfg", ["pynq", "tiny", "batch2"])
def test_end_to_end_on_fsim(cfg):
    m, c = _net(), preset(cfg)
    x = rand(4, 3, 8, 8, seed=8)
    cm = compile_model(m, x, c)
    ext = [s for s in cm.steps if s.op in _NP]
    assert len(ext) == 3 and all(cm.where(s) == "VTA" for s in ext), cm.placement_table()
    got = _check_run(cm, c, {"x": x})
    (y_ort,) = run_ort(m, {"x": x})
    y = got[cm.outputs[0]]
    assert _cos(y, y_ort) > 0.99
    assert float(np.abs(y - y_ort).max()) < 0.1 * float(np.abs(y_ort).max())


def _scalar_min(x):
    """``_net`` quantized, its per-channel ``Min`` constant replaced by the one value -5 at
    the same exp: ``(graph, that qmin node)``."""
    q = quantize(import_onnx(_net()), x)
    n = next(n for n in q.nodes if n.name == "cmin")
    t = q.types[n.inputs[1]]
    q.constants[n.inputs[1]] = np.array([-5], np.int8)
    q.types[n.inputs[1]] = TensorType(t.dtype, (1,), t.exp, t.scale)
    validate(q)
    return q, n


def test_scalar_constant_is_an_immediate():
    """A one-value constant operand (which the frontend turns into a clip; here set in the
    quantized graph) lowers to ALU MIN with the immediate, bit-exact on fsim."""
    c, x = preset("pynq"), rand(4, 3, 8, 8, seed=8)
    q, n = _scalar_min(x)
    p = partition(q, c)
    assert p.target("cmin") == "vta" and "scalar constant" in p.placements["cmin"].reason
    lo, act = lower_node(c, q, n, "t/imm")
    assert set(act) == {"a"} and not lo.consts
    got = _check_run(lower_graph(q, p), c, {"x": x}, q)
    assert int(got[n.outputs[0]].max()) <= -5


@pytest.mark.parametrize("cfg", ["acc8_off", "int16"])
def test_cpu_fallback_is_exact(cfg):
    """Without ACC_8BIT, or with int16 activations (ACC8 loads int8 only), max and min run
    in the runtime's integer kernels, with the reason, still bit-exact."""
    c = (preset("pynq").replace(ACC_8BIT=False) if cfg == "acc8_off" else
         preset("tiny").replace(LOG_INP_WIDTH=4, LOG_WGT_WIDTH=4, LOG_INP_BUFF_SIZE=13, LOG_WGT_BUFF_SIZE=13))
    x = rand(2, 3, 8, 8, seed=9)
    cm = compile_model(_net(), x, c)
    ext = [s for s in cm.steps if s.op in _NP]
    assert len(ext) == 3 and all(cm.where(s) == "CPU (numpy)" for s in ext)
    assert all(("ACC_8BIT" if cfg == "acc8_off" else "ACC8 loads int8 values only") in s.reason for s in ext)
    got = Executor(cm, FsimDevice(c)).run(x, keep=True)
    ref = run_quantized(cm.qgraph, {"x": x}, keep_all=True)
    for s in ext:
        np.testing.assert_array_equal(got[s.outputs[0]], ref[s.outputs[0]])


def test_channel_broadcast_on_the_cpu_is_exact():
    """``Min`` of ``[N,4,3,3]`` and ``[N,1,3,3]``: the CPU integer kernel, exact against
    numpy's minimum of the int8 operands, close to onnxruntime."""
    m = make_model([helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1], name="conv"),
                    helper.make_node("Conv", ["x", "w1"], ["s"], pads=[1, 1, 1, 1], name="conv1"),
                    helper.make_node("Min", ["c", "s"], ["y"], name="mb")],
                   [("x", ["N", 3, 6, 6])], [("y", ["N", 4, 6, 6])],
                   {"w": rand(4, 3, 3, 3, seed=1, scale=0.4), "w1": rand(1, 3, 3, 3, seed=2, scale=0.4)})
    c, x = preset("pynq"), rand(3, 3, 6, 6, seed=3)
    cm = compile_model(m, x, c)
    (s,) = [s for s in cm.steps if s.op == "qmin"]
    assert cm.where(s) == "CPU (numpy)" and "broadcast tensor" in s.reason
    got = _check_run(cm, c, {"x": x})
    (y_ort,) = run_ort(m, {"x": x})
    assert _cos(got[cm.outputs[0]], y_ort) > 0.99


@pytest.mark.rtl
def test_every_form_on_rtl():
    """The forms (tensor MIN, per-channel tensor MAX, per-channel constant MIN, the scalar
    clip; then the scalar-constant MIN by an immediate) on the Verilated ``tiny`` core,
    every tensor equal to fsim."""
    pytest.importorskip("vtaforge.runtime.rtl")
    from rtl_compare import rtl_equals_fsim

    c, x = preset("tiny"), rand(1, 3, 8, 8, seed=8)
    cm = compile_model(_net(), x, c)
    assert sum(cm.where(s) == "VTA" for s in cm.steps if s.op in _NP) == 3
    rtl_equals_fsim(cm, x)
    q, _ = _scalar_min(x)
    rtl_equals_fsim(lower_graph(q, partition(q, c)), x)
