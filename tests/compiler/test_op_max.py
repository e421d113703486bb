"""ONNX ``Max``, the op added by following docs/compiler.md "Adding an op": imported as
``max`` (a scalar constant as ``clip``), quantized to ``qmax`` with aligned operands, placed
on VTA (ALU MAX of two ACC8 loads) or on the CPU with a reason, and run end to end on fsim
-- bit-exact against the numpy integer reference, close to onnxruntime float."""

from __future__ import annotations

import numpy as np
import pytest
from onnx import helper

from _onnx_util import make_model, rand, run_ort
from vtaforge.compiler import import_onnx, partition, quantize
from vtaforge.compiler.compile import compile_model, lower_node
from vtaforge.compiler.errors import CompileError
from vtaforge.compiler.ir import validate
from vtaforge.compiler.reference import run_quantized
from vtaforge.hw.config import preset
from vtaforge.runtime.executor import Executor
from vtaforge.runtime.fsim import FsimDevice


def _cos(a: np.ndarray, b: np.ndarray) -> float:
    a, b = a.astype(np.float64).ravel(), b.astype(np.float64).ravel()
    return float(a @ b / (np.linalg.norm(a) * np.linalg.norm(b)))


def _two_branch():
    """Two conv branches joined by an element-wise Max (a maxout unit), then a conv."""
    nodes = [helper.make_node("Conv", ["x", "w1"], ["c1"], pads=[1, 1, 1, 1], name="conv1"),
             helper.make_node("Conv", ["x", "w2"], ["c2"], pads=[1, 1, 1, 1], name="conv2"),
             helper.make_node("Max", ["c1", "c2"], ["m"], name="maxout"),
             helper.make_node("Conv", ["m", "w3"], ["y"], name="conv3")]
    return make_model(nodes, [("x", ["N", 3, 8, 8])], [("y", ["N", 8, 8, 8])],
                      {"w1": rand(16, 3, 3, 3, seed=1, scale=0.4), "w2": rand(16, 3, 3, 3, seed=2, scale=0.05),
                       "w3": rand(8, 16, 1, 1, seed=3, scale=0.3)})


def _leaky():
    """TensorFlow's export of a leaky ReLU: ``Max(x, Mul(x, 0.2))``."""
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1], name="conv"),
             helper.make_node("Mul", ["c", "alpha"], ["ca"], name="scale"),
             helper.make_node("Max", ["c", "ca"], ["y"], name="leaky")]
    return make_model(nodes, [("x", ["N", 3, 8, 8])], [("y", ["N", 16, 8, 8])],
                      {"w": rand(16, 3, 3, 3, seed=4, scale=0.4), "alpha": np.array(0.2, np.float32)})


def test_import_forms():
    ops = {n.name: n.op for n in import_onnx(_two_branch()).nodes}
    assert ops["maxout"] == "max"
    clip = make_model([helper.make_node("Max", ["x", "lo"], ["y"], name="floor")], [("x", ["N", 4])],
                      [("y", ["N", 4])], {"lo": np.array(0.5, np.float32)})
    (n,) = import_onnx(clip).nodes
    assert (n.op, n.attrs["min"], n.attrs["max"]) == ("clip", 0.5, None)
    three = make_model([helper.make_node("Max", ["x", "x", "x"], ["y"], name="m3")], [("x", ["N", 4])],
                       [("y", ["N", 4])])
    (n,) = import_onnx(three).nodes
    assert n.op == "onnx" and "3 inputs" in n.attrs["why"]
    # a smaller first operand is swapped so that the second broadcasts against the first
    bc = make_model([helper.make_node("Max", ["s", "x"], ["y"], name="mb")],
                    [("x", ["N", 4, 3, 3]), ("s", ["N", 4, 1, 1])], [("y", ["N", 4, 3, 3])])
    (n,) = import_onnx(bc).nodes
    assert n.op == "max" and n.inputs == ["x", "s"]


def test_quantized_operands_share_one_exp():
    x = rand(4, 3, 8, 8, seed=5)
    q = quantize(import_onnx(_two_branch()), x)
    (m,) = [n for n in q.nodes if n.op == "qmax"]
    ta, tb, to = (q.types[t] for t in list(m.inputs) + m.outputs)
    assert ta.exp == tb.exp == to.exp and m.attrs == {}
    # conv2's output sits at a finer exp: a qrequant aligns it to the output's
    c2 = next(n for n in q.nodes if n.name == "conv2").outputs[0]
    align = next(n for n in q.nodes if n.op == "qrequant" and n.inputs == [c2])
    assert align.outputs[0] == m.inputs[1] and q.types[c2].exp < to.exp
    # the validator's qmax rule (its spec's check) refuses misaligned operands
    bad = q.copy()
    next(n for n in bad.nodes if n.op == "qmax").inputs[1] = c2
    with pytest.raises(CompileError, match="differ in dtype or scale"):
        validate(bad)


def test_placement_and_reasons():
    q = quantize(import_onnx(_two_branch()), rand(4, 3, 8, 8, seed=5))
    (name,) = [n.name for n in q.nodes if n.op == "qmax"]
    p = partition(q, "pynq")
    assert p.target(name) == "vta" and "ALU MAX" in p.placements[name].reason
    off = partition(q, preset("pynq").replace(ACC_8BIT=False))
    assert off.target(name) == "cpu" and "ACC_8BIT" in off.placements[name].reason
    bc = make_model([helper.make_node("Max", ["x", "s"], ["y"], name="mb")],
                    [("x", ["N", 4, 3, 3]), ("s", ["N", 4, 1, 1])], [("y", ["N", 4, 3, 3])])
    qb = quantize(import_onnx(bc), {"x": rand(2, 4, 3, 3, seed=6), "s": rand(2, 4, 1, 1, seed=7)})
    pb = partition(qb, "pynq")      # per channel: broadcast over H*W by the ALU loop
    assert pb.target("mb") == "vta" and "per-channel tensor" in pb.placements["mb"].reason
    bs = make_model([helper.make_node("Max", ["x", "s"], ["y"], name="mb")],
                    [("x", ["N", 4, 3, 3]), ("s", ["N", 1, 1, 3])], [("y", ["N", 4, 3, 3])])
    qs = quantize(import_onnx(bs), {"x": rand(2, 4, 3, 3, seed=6), "s": rand(2, 1, 1, 3, seed=7)})
    ps = partition(qs, "pynq")
    assert ps.target("mb") == "cpu" and "broadcast tensor" in ps.placements["mb"].reason


@pytest.mark.parametrize("cfg", ["pynq", "tiny", "batch2"])
def test_lowers_on_every_config(cfg):
    q = quantize(import_onnx(_two_branch()), rand(4, 3, 8, 8, seed=5))
    c = preset(cfg)
    (m,) = [n for n in q.nodes if n.op == "qmax"]
    assert partition(q, c).target(m.name) == "vta"
    lo, slots = lower_node(c, q, m, "t/max")
    assert set(slots) == {"a", "b"} and set(lo.layouts) == {"a", "b", "y"}


@pytest.mark.parametrize("model, cfg", [(_two_branch, "pynq"), (_two_branch, "tiny"), (_leaky, "pynq"),
                                        (_leaky, "alu_mul")])
def test_end_to_end_on_fsim(model, cfg):
    """VTA (fsim) equals the integer reference bit for bit at every tensor, and the output
    follows onnxruntime's float result."""
    m = model()
    c = preset("pynq").replace(ALU_MUL=True) if cfg == "alu_mul" else preset(cfg)
    x = rand(4, 3, 8, 8, seed=8)
    cm = compile_model(m, x, c)
    maxes = [s for s in cm.steps if s.op == "qmax"]
    assert maxes and all(cm.where(s) == "VTA" for s in maxes), cm.placement_table()
    got = Executor(cm, FsimDevice(c)).run(x, keep=True)
    ref = run_quantized(cm.qgraph, {"x": x}, keep_all=True)
    for s in cm.steps:
        for o in s.outputs:
            if o in got and o in ref:
                np.testing.assert_array_equal(got[o], ref[o], err_msg=f"{s.name} ({s.op})")
    (y_ort,) = run_ort(m, {"x": x})
    y = got[cm.outputs[0]]
    assert _cos(y, y_ort) > 0.99
    assert float(np.abs(y - y_ort).max()) < 0.1 * float(np.abs(y_ort).max())


@pytest.mark.parametrize("cfg", ["acc8_off", "int16"])
def test_cpu_fallback_is_exact(cfg):
    """Without ACC_8BIT, or with int16 activations (ACC8 loads int8 only), the max runs in
    the runtime's integer kernel, with the reason, still bit-exact."""
    m = _two_branch()
    c = (preset("pynq").replace(ACC_8BIT=False) if cfg == "acc8_off" else
         preset("tiny").replace(LOG_INP_WIDTH=4, LOG_WGT_WIDTH=4, LOG_INP_BUFF_SIZE=13, LOG_WGT_BUFF_SIZE=13))
    x = rand(2, 3, 8, 8, seed=9)
    cm = compile_model(m, x, c)
    (s,) = [s for s in cm.steps if s.op == "qmax"]
    assert cm.where(s) == "CPU (numpy)"
    assert ("ACC_8BIT" if cfg == "acc8_off" else "ACC8 loads int8 values only") in s.reason
    got = Executor(cm, FsimDevice(c)).run(x, keep=True)
    ref = run_quantized(cm.qgraph, {"x": x}, keep_all=True)
    np.testing.assert_array_equal(got[s.outputs[0]], ref[s.outputs[0]])


def _qdq_max():
    """A QDQ model: inputs at scales 0.03 and 0.05, their Max re-quantized at 0.04."""
    nodes, inits = [], {}
    for t, n, s in (("x", "a", 0.03), ("x2", "b", 0.05), ("m", "o", 0.04)):
        nodes += [helper.make_node("QuantizeLinear", [t, f"{n}_s", f"{n}_z"], [f"{n}_q"]),
                  helper.make_node("DequantizeLinear", [f"{n}_q", f"{n}_s", f"{n}_z"], [f"{n}_d"])]
        inits[f"{n}_s"], inits[f"{n}_z"] = np.array(s, np.float32), np.array(0, np.int8)
        if n == "b":
            nodes.append(helper.make_node("Max", ["a_d", "b_d"], ["m"], name="mx"))
    nodes.append(helper.make_node("Identity", ["o_d"], ["y"]))
    return make_model(nodes, [("x", ["N", 4, 4, 4]), ("x2", ["N", 4, 4, 4])], [("y", ["N", 4, 4, 4])], inits)


@pytest.mark.parametrize("alu_mul", [False, True])
def test_qdq_scales(alu_mul):
    """Non-power-of-two QDQ scales: approximated by powers of two (``pynq``), or kept exact
    with ``ALU_MUL`` -- then each operand is aligned to 0.04 by a multiplier ``qrequant``;
    both bit-exact on fsim and close to onnxruntime."""
    m = _qdq_max()
    c = preset("pynq").replace(ALU_MUL=True) if alu_mul else preset("pynq")
    feeds = {"x": rand(4, 4, 4, 4, seed=1), "x2": rand(4, 4, 4, 4, seed=2)}
    cm = compile_model(m, feeds, c)
    where = {s.name: cm.where(s) for s in cm.steps}
    assert where["mx"] == "VTA", cm.placement_table()
    aligns = [s for s in cm.steps if s.op == "qrequant" and s.name.startswith("mx_align")]
    assert (len(aligns) == 2 and all(s.attrs["mult"] != 1 for s in aligns)) if alu_mul else not aligns
    got = Executor(cm, FsimDevice(c)).run(feeds, keep=True)
    ref = run_quantized(cm.qgraph, feeds, keep_all=True)
    for s in cm.steps:
        for o in s.outputs:
            if o in got and o in ref:
                np.testing.assert_array_equal(got[o], ref[o], err_msg=s.name)
    (y_ort,) = run_ort(m, feeds)
    assert _cos(got["y"], y_ort) > 0.999
