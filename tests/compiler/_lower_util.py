"""Helpers for the lowering tests: tiny quantized graphs and numpy integer oracles.

The oracles here are written independently of the code under test (and of
compiler/reference.py): direct loops over the kernel window in int64.
"""

from __future__ import annotations

import numpy as np

from vtaforge.compiler.compile import lower_graph
from vtaforge.compiler.ir import Graph, Node, TensorType, validate
from vtaforge.compiler.requant import requant_round
from vtaforge.compiler.partition import partition
from vtaforge.hw.config import VTAConfig, preset
from vtaforge.hw.isa import Opcode, decode_program
from vtaforge.runtime.executor import Executor
from vtaforge.runtime.fsim import FsimDevice


def requant(acc, shift, lo, hi):
    acc = acc.astype(np.int64)
    if shift > 0:
        acc = (acc + (1 << (shift - 1))) >> shift
    elif shift < 0:
        acc = acc << -shift
    return np.clip(acc, lo, hi).astype(np.int8)


def conv_oracle(x, w, b, stride, pads, groups):
    n, c, h, wd = x.shape
    o, cg, kh, kw = w.shape
    pt, pl, pb, pr = pads
    xp = np.zeros((n, c, h + pt + pb, wd + pl + pr), np.int64)
    xp[:, :, pt:pt + h, pl:pl + wd] = x
    ho = (h + pt + pb - kh) // stride[0] + 1
    wo = (wd + pl + pr - kw) // stride[1] + 1
    acc = np.zeros((n, o, ho, wo), np.int64)
    og = o // groups
    for oc in range(o):
        g = oc // og
        for i in range(kh):
            for j in range(kw):
                win = xp[:, g * cg:(g + 1) * cg, i:i + ho * stride[0]:stride[0],
                         j:j + wo * stride[1]:stride[1]]
                acc[:, oc] += np.einsum("nchw,c->nhw", win, w[oc, :, i, j].astype(np.int64))
    return acc + b.astype(np.int64).reshape(1, -1, 1, 1)


def maxpool_oracle(x, k, s, pads):
    n, c, h, w = x.shape
    pt, pl, pb, pr = pads
    xp = np.full((n, c, h + pt + pb, w + pl + pr), -128, np.int64)
    xp[:, :, pt:pt + h, pl:pl + w] = x
    ho = (h + pt + pb - k[0]) // s[0] + 1
    wo = (w + pl + pr - k[1]) // s[1] + 1
    out = np.full((n, c, ho, wo), -(1 << 40), np.int64)
    for i in range(k[0]):
        for j in range(k[1]):
            out = np.maximum(out, xp[:, :, i:i + ho * s[0]:s[0], j:j + wo * s[1]:s[1]])
    return out.astype(np.int8)


class QG:
    """Build a quantized graph: float input -> quantize (exp 0) -> ops -> dequantize."""

    def __init__(self, shape):
        self.g = Graph(name="t", kind="quantized")
        self.g.inputs = ["input"]
        self.g.types["input"] = TensorType("float32", tuple(shape))
        self.add("quantize", ["input"], {"exp": 0}, TensorType("int8", tuple(shape), 0), "xq")

    def add(self, op, ins, attrs, t, out):
        self.g.nodes.append(Node(f"n{len(self.g.nodes)}_{op}", op, ins, [out], attrs))
        self.g.types[out] = t
        return out

    def const(self, name, v, exp=0):
        self.g.add_constant(name, v, exp)
        return name

    def req(self, shift, lo, hi):
        return {"shift": shift, "round": requant_round(shift), "mult": 1, "clip_lo": lo,
                "clip_hi": hi, "exp_out": shift}

    def finish(self, last):
        t = self.g.types[last]
        self.add("dequantize", [last], {}, TensorType("float32", t.shape), "out")
        self.g.outputs = ["out"]
        return validate(self.g)


def run_graph(g, cfg_name, x, *, expect_vta=True, device=None, options=None):
    """Partition, lower (with ``options``, a ``LowerOptions``; default the config's) and
    run ``g`` at preset ``cfg_name`` (or a VTAConfig) on ``device`` (default fsim); returns
    ``(outputs incl. intermediates, executor, compiled model)``."""
    cfg = cfg_name if isinstance(cfg_name, VTAConfig) else preset(cfg_name)
    part = partition(g, cfg)
    cm = lower_graph(g, part, options=options)
    if expect_vta:
        for s in cm.steps:
            if s.op.startswith("q") and s.op not in ("quantize",):
                assert s.target == "vta", (s.name, s.reason)
    ex = Executor(cm, FsimDevice(cfg) if device is None else device)
    out = ex.run(x.astype(np.float32), keep=True)
    return out, ex, cm


def conv_case(cfg, cin, cout, h, k, s, groups=1, seed=0, options=None):
    """One random int8 conv (+bias, ReLU clip; pads ``k // 2``) run through ``cfg``'s
    fsim (lowered with ``options``, as for :func:`run_graph`) and checked against
    :func:`conv_oracle`; returns the conv step's trace statistics."""
    rng = np.random.default_rng(seed)
    p = k // 2
    x = rng.integers(-128, 128, (1, cin, h, h)).astype(np.int8)
    w = rng.integers(-127, 128, (cout, cin // groups, k, k)).astype(np.int8)
    b = rng.integers(-5000, 5000, cout).astype(np.int32)
    shift = max(1, int(np.ceil(np.log2(cin // groups * k * k * 128 * 40 / 127))) - 3)
    qg = QG(("N", cin, h, h))
    wn, bn = qg.const("w", w), qg.const("b", b)
    ho = (h + 2 * p - k) // s + 1
    a = {"kernel": (k, k), "strides": (s, s), "pads": (p, p, p, p), "groups": groups}
    a.update(qg.req(shift, 0, 127))
    y = qg.add("qconv2d", ["xq", wn, bn], a, TensorType("int8", ("N", cout, ho, ho), shift), "y")
    out, _, cm = run_graph(qg.finish(y), cfg, x.astype(np.float32), options=options)
    want = requant(conv_oracle(x, w, b, (s, s), (p, p, p, p), groups), shift, 0, 127)
    np.testing.assert_array_equal(out["y"], want)
    return [st for st in cm.steps if st.op == "qconv2d"][0].trace.stats


class RecordingFsim(FsimDevice):
    """fsim that records the ALU opcodes of every program it runs."""

    def __init__(self, cfg):
        super().__init__(cfg)
        self.alu_ops: set[int] = set()

    def run(self, insn_addr, insn_count, **kw):
        f = decode_program(self.config, self._read_mem(insn_addr, insn_count * 16))
        alu = f["opcode"] == int(Opcode.ALU)
        self.alu_ops |= set(int(v) for v in f["alu_opcode"][alu])
        return super().run(insn_addr, insn_count, **kw)
