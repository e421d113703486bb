"""Placement rules: each quantized op's VTA predicate and accumulator bound.

A predicate ``(node, graph, config, producers) -> (ok, reason)`` says whether VTA runs one
node on a :class:`~vtaforge.hw.config.VTAConfig`, and why (or why not); it is the ``vta``
facet of the op's registry entry (:data:`~.ops.REGISTRY`), and
:func:`~.partition.vta_support` runs it after the checks every VTA op shares (the graph's
widths are the core's, the batch is dim 0).  A bound ``(node, graph) -> int`` is the
worst-case ``|acc|`` entering the node's requantize over every input of its dtype (the
``acc_bound`` facet): a requantize multiplier needs an overflow-free ALU sequence for it
(:func:`mult_why`, :func:`~.requant.mult_plan`).  Beside them: an op's form on int4
activations (the ``int4`` facet, :func:`add_int4_why`) and its multiply-accumulates (the
``macs`` facet, :func:`linear_macs`, :func:`onnx_macs`).  The rules themselves are listed
in :mod:`.partition`'s docstring.

This module imports no dispatcher (``ops``, ``partition``): the registry imports it.
"""

from __future__ import annotations

import numpy as np

from ..hw.config import VTAConfig
from .ir import Graph, Node, qbits
from .lower_conv import channel_lanes, depthwise_taps
from .lower_eltwise import gemm_add_ok
from .requant import mult_plan

__all__ = ["MAX_PAD", "IMM_MAX", "operand_bound", "linear_acc_bound", "add_acc_bound",
           "mul_acc_bound", "avg_acc_bound", "mult_why", "const_kind", "add_const_kind",
           "vta_linear", "vta_add", "vta_requant", "vta_max_pool", "vta_avg_pool", "vta_mul",
           "INT4_ELTWISE_WHY", "add_int4_why", "linear_macs", "onnx_macs"]

#: the LOAD pad field's maximum (4 bits)
MAX_PAD = 15
#: the largest ALU immediate (16-bit signed)
IMM_MAX = (1 << 15) - 1


# ---------------------------------------------------------------------------
# Accumulator bounds (the ``acc_bound`` facet)
# ---------------------------------------------------------------------------

def operand_bound(node: Node, graph: Graph) -> int:
    """``2**(bits-1)`` of ``node``'s activation input: 8 (int4), 128 (int8) or 32768
    (int16) -- the bound of an op whose accumulator holds one operand (``qrequant``,
    ``qmax_pool``)."""
    t = graph.types.get(node.inputs[0]) if node.inputs else None
    return 1 << (((qbits(t.dtype) if t is not None else 0) or 8) - 1)


def linear_acc_bound(node: Node, graph: Graph) -> int:
    """Worst-case ``|acc|`` of a ``qconv2d`` / ``qdense`` before its requantize (bias
    included, rounding constant not): int8 operands ``K*128*128 + max|bias|`` (the
    data-independent bound of the int8 path); any other width ``max_o sum_k |w[o, k]| *
    2**(in_bits-1) + max|bias|``, the exact worst case over all inputs of the input dtype
    for the constant weights."""
    k = 1
    for d in graph.types[node.inputs[1]].shape[1:]:
        k *= d
    b = graph.constants.get(node.inputs[2])
    bmax = int(abs(b.astype("int64")).max()) if b is not None and b.size else 0
    w = graph.constants.get(node.inputs[1])
    half = operand_bound(node, graph)
    if half == 128 and (w is None or w.dtype == "int8"):
        return k * 128 * 128 + bmax
    l1 = int(abs(w.astype("int64")).reshape(w.shape[0], -1).sum(1).max(initial=0))
    return l1 * half + bmax


def add_acc_bound(node: Node, graph: Graph) -> int:
    """``qadd``: ``h * (2**lshift_a + 2**lshift_b)``, ``h`` = :func:`operand_bound`."""
    a = node.attrs
    return operand_bound(node, graph) * ((1 << a["lshift_a"]) + (1 << a["lshift_b"]))


def mul_acc_bound(node: Node, graph: Graph) -> int:
    """``qmul``: ``h * max|c|`` for a constant operand ``c``, else ``h * h``."""
    h = operand_bound(node, graph)
    c = graph.constants.get(node.inputs[1])
    return h * (int(abs(c.astype("int64")).max()) if c is not None and c.size else h)


def avg_acc_bound(node: Node, graph: Graph) -> int:
    """``qavg_pool``: ``h * divisor`` (the window sum)."""
    return operand_bound(node, graph) * node.attrs["divisor"]


def mult_why(node: Node, cfg: VTAConfig, bound: int) -> str | None:
    """Why a requantize multiplier (``mult != 1``) keeps ``node`` off VTA (None when it has
    none, or when ``ALU_MUL`` and an overflow-free sequence at ``ACC_WIDTH`` for
    ``|acc| <= bound`` exist)."""
    a = node.attrs
    if a.get("mult") in (None, 1):
        return None
    if not cfg.ALU_MUL:
        return f"requantize multiplier {a['mult']} needs ALU_MUL, which this config lacks"
    if mult_plan(a["mult"], a["shift"], a["round"], a["clip_lo"], a["clip_hi"], bound,
                 cfg.ACC_WIDTH) is None:
        return (f"requantize multiplier {a['mult']} (shift {a['shift']}) may overflow "
                f"ACC_WIDTH {cfg.ACC_WIDTH} (worst case |acc| {bound})")
    return None


# ---------------------------------------------------------------------------
# int4 activations (the ``int4`` facet)
# ---------------------------------------------------------------------------

#: why an op without an int4 form runs on the CPU on a ``LOG_INP_WIDTH`` 2 core
INT4_ELTWISE_WHY = ("int4 operands: ACC8 loads int8 values only, so int4 activations (two per "
                    "byte) cannot reach the accumulator for this element-wise op (CPU, exact)")


def add_int4_why(node: Node, graph: Graph, cfg: VTAConfig) -> str | None:
    """``qadd`` of int4 activations (a ``LOG_INP_WIDTH`` 2 core): two int4 tensors run as a
    GEMM over INP loads (:func:`~.lower_eltwise.gemm_add_ok`), so None when that form
    exists; else why not (a constant operand: :data:`INT4_ELTWISE_WHY`)."""
    if node.inputs[1] in graph.constants:
        return INT4_ELTWISE_WHY
    if any(graph.types[i].dtype != "int4" for i in node.inputs):
        return "a qadd of int4 and int8 tensors: quantize for the core's widths"
    if not gemm_add_ok(cfg, node.attrs):
        return (f"int4 operands: ACC8 loads int8 values only, and the GEMM form of "
                f"the add needs BLOCK_IN == BLOCK_OUT (here {cfg.BLOCK_IN} / "
                f"{cfg.BLOCK_OUT}) and both lshift <= {cfg.WGT_WIDTH - 2} (here "
                f"{node.attrs['lshift_a']} / {node.attrs['lshift_b']}) (CPU, exact)")
    return None


# ---------------------------------------------------------------------------
# Multiply-accumulates (the ``macs`` facet)
# ---------------------------------------------------------------------------

def _prod(dims) -> int:
    """The product of a shape's dims, a symbolic one counting 1."""
    p = 1
    for d in dims:
        p *= d if isinstance(d, int) else 1
    return p


def linear_macs(node: Node, graph: Graph) -> int:
    """Multiply-accumulates per sample of a conv / dense (float or quantized): output
    elements (batch dim excluded) times the weights' ``K`` (``prod(w.shape[1:])``)."""
    return _prod(graph.types[node.outputs[0]].shape[1:]) * _prod(graph.types[node.inputs[1]].shape[1:])


#: the weight input of each ONNX conv op kept as is
_ONNX_CONV_W = {"Conv": 1, "ConvInteger": 1, "QLinearConv": 3}
_ONNX_MATMUL = ("Gemm", "MatMul", "MatMulInteger", "QLinearMatMul", "QGemm")


def onnx_macs(node: Node, graph: Graph) -> int:
    """Multiply-accumulates per sample of an ONNX node kept as is: Conv / ConvInteger /
    QLinearConv (output elements times the weights' ``K``), ConvTranspose (input elements
    times ``prod(w.shape[1:])``), Gemm / MatMul and their integer forms (output elements
    times the reduced dim); 0 for any other ONNX op."""
    a, out = node.attrs, graph.types[node.outputs[0]]
    ins = [graph.types[i].shape for i in node.inputs]
    wpos = _ONNX_CONV_W.get(a["op_type"])
    if wpos is not None and len(ins) > wpos:
        return _prod(out.shape[1:]) * _prod(ins[wpos][1:])
    if a["op_type"] == "ConvTranspose" and len(ins) > 1:
        return _prod(ins[0][1:]) * _prod(ins[1][1:])
    if a["op_type"] in _ONNX_MATMUL and len(ins) > 1:
        k = ins[0][-1] if not a["onnx_attrs"].get("transA") else ins[0][-2]
        return _prod(out.shape[1:]) * (k if isinstance(k, int) else 1)
    return 0


# ---------------------------------------------------------------------------
# Helpers shared by the predicates
# ---------------------------------------------------------------------------

def _nonneg(g: Graph, tensor: str, prod: dict[str, Node]) -> bool:
    n = prod.get(tensor)
    while n is not None and n.op in ("qmax_pool", "flatten", "reshape", "transpose"):
        n = prod.get(n.inputs[0])
    return n is not None and n.attrs.get("clip_lo") is not None and n.attrs["clip_lo"] >= 0


def _mul_suffix(a: dict) -> str:
    return f"MUL {a['mult']}, " if a.get("mult") not in (None, 1) else ""


def _round_imm(a: dict) -> str | None:
    if ("shift" in a and isinstance(a.get("round"), int) and a["round"] > IMM_MAX
            and a.get("mult") in (None, 1)):
        return f"rounding constant {a['round']} (shift {a['shift']}) does not fit a 16-bit ALU immediate"
    return None


def _acc8(cfg: VTAConfig) -> str | None:
    return None if cfg.ACC_8BIT else "int8 operands must be loaded into the accumulator, which needs ACC_8BIT"


def _eltwise_why(node: Node, graph: Graph, cfg: VTAConfig) -> str | None:
    """Why an element-wise ACC8 op does not run on VTA: a rank other than NC / NCHW, no
    ``ACC_8BIT``, a rounding constant beyond the ALU immediate (None: it runs)."""
    r = graph.types[node.inputs[0]].rank
    if r not in (2, 4):
        return f"element-wise op on a rank-{r} tensor: the VTA lowering takes NC or NCHW"
    return _acc8(cfg) or _round_imm(node.attrs)


def const_kind(graph: Graph, node: Node) -> str | None:
    """``"scalar"`` or ``"per-channel"`` (one value per channel of an NC / NCHW first
    operand) for the constant second operand of ``node``, else None: the constant shapes
    the VTA lowerings take (``lower_eltwise.lower_add_const``)."""
    c = graph.constants[node.inputs[1]]
    ta = graph.types[node.inputs[0]]
    if c.size == 1:
        return "scalar"
    shp = (1,) * (ta.rank - c.ndim) + tuple(c.shape)
    if ta.rank in (2, 4) and shp[1] == ta.shape[1] and all(d == 1 for k, d in enumerate(shp) if k != 1):
        return "per-channel"
    return None


def add_const_kind(graph: Graph, node: Node) -> str | None:
    """:func:`const_kind` of ``qadd``'s constant, and for a scalar only when its aligned
    value ``c << lshift_b`` is a 16-bit immediate."""
    kind = const_kind(graph, node)
    if kind == "scalar":
        v = int(graph.constants[node.inputs[1]].reshape(())) << int(node.attrs["lshift_b"])
        return kind if -(1 << 15) <= v < (1 << 15) else None
    return kind


# ---------------------------------------------------------------------------
# Predicates (the ``vta`` facet)
# ---------------------------------------------------------------------------

def vta_linear(node: Node, graph: Graph, cfg: VTAConfig, producers) -> tuple[bool, str]:
    """``qconv2d`` / ``qdense``: the worst-case accumulator fits ``ACC_WIDTH``; conv pads fit
    the LOAD pad field."""
    a, op = node.attrs, node.op
    why = mult_why(node, cfg, linear_acc_bound(node, graph))
    if why:
        return False, why
    worst = linear_acc_bound(node, graph) + (max(a["round"]) if isinstance(a["round"], tuple)
                                             else a["round"])
    if worst >= 1 << (cfg.ACC_WIDTH - 1):
        return False, f"worst-case accumulator {worst} does not fit ACC_WIDTH {cfg.ACC_WIDTH}"
    if op == "qconv2d" and max(a["pads"]) > MAX_PAD:
        return False, f"padding {a['pads']} exceeds the LOAD pad field maximum {MAX_PAD}"
    what = "depthwise conv" if op == "qconv2d" and a["groups"] == graph.types[node.inputs[0]].shape[1] \
        and a["groups"] > 1 else ("group conv" if op == "qconv2d" and a["groups"] > 1 else op[1:])
    if what == "depthwise conv" and cfg.DEPTHWISE_TAPS:
        w_shape = graph.types[node.inputs[1]].shape
        if depthwise_taps(cfg, a["groups"], w_shape, a["groups"], a["pads"][3]):
            what += f" (depthwise GEMMs of {cfg.DEPTHWISE_TAPS} taps)"
    mul = f"mult {a['mult']}, " if a["mult"] != 1 else ""
    if isinstance(a["shift"], tuple):
        b = graph.constants.get(node.inputs[2]) if len(node.inputs) > 2 else None
        b = np.zeros(len(a["shift"]), np.int64) if b is None else b
        lane = cfg.REQ_LANE_SHIFT and channel_lanes(
            cfg, b, a, (np.asarray(a["shift"], np.int64), np.asarray(a["round"], np.int64))
        ) is not None
        shift = (f"per-channel shifts {min(a['shift'])}..{max(a['shift'])} "
                 + ("(per-lane REQ)" if lane else "(tensor SHR)"))
    else:
        shift = f"shift {a['shift']}"
    return True, f"{what}: GEMM + ALU requantize ({mul}{shift}, clip [{a['clip_lo']}, {a['clip_hi']}])"


def vta_add(node: Node, graph: Graph, cfg: VTAConfig, producers) -> tuple[bool, str]:
    """``qadd``: NC or NCHW, ``ACC_8BIT``, the rounding constant an immediate; a constant
    operand a scalar immediate or per channel."""
    a = node.attrs
    why = mult_why(node, cfg, add_acc_bound(node, graph)) or _eltwise_why(node, graph, cfg)
    if why:
        return False, why
    if node.inputs[1] in graph.constants:
        kind = add_const_kind(graph, node)
        if kind is None:
            return False, (f"adding a constant of shape {list(graph.types[node.inputs[1]].shape)}: only a "
                           f"scalar (16-bit immediate after alignment) or a per-channel constant runs on VTA")
        return True, (f"add of a {kind} constant: ACC8 load + ALU SHL {a['lshift_a']}, ADD, "
                      f"{_mul_suffix(a)}SHR {a['shift']}, MAX/MIN")
    if graph.types[node.inputs[0]].dtype == "int4":
        return True, (f"residual add of int4 tensors: GEMM over INP loads (diagonal weights "
                      f"{1 << a['lshift_a']}, {1 << a['lshift_b']}), {_mul_suffix(a)}SHR "
                      f"{a['shift']}, MAX/MIN")
    return True, (f"residual add: ACC8 loads + ALU SHL {a['lshift_a']}/{a['lshift_b']}, ADD, "
                  f"{_mul_suffix(a)}SHR {a['shift']}, MAX/MIN")


def vta_requant(node: Node, graph: Graph, cfg: VTAConfig, producers) -> tuple[bool, str]:
    """``qrequant``: NC or NCHW, ``ACC_8BIT``, the rounding constant an immediate."""
    a = node.attrs
    why = mult_why(node, cfg, operand_bound(node, graph)) or _eltwise_why(node, graph, cfg)
    if why:
        return False, why
    return True, f"requantize: ACC8 load + ALU {_mul_suffix(a)}SHR {a['shift']}, MAX/MIN"


def vta_max_pool(node: Node, graph: Graph, cfg: VTAConfig, producers) -> tuple[bool, str]:
    """``qmax_pool``: ``ACC_8BIT``; padding only on inputs known non-negative (LOAD pads zeros)."""
    a = node.attrs
    why = _acc8(cfg)
    if why:
        return False, why
    if max(a["pads"]) > MAX_PAD:
        return False, f"padding {a['pads']} exceeds the LOAD pad field maximum {MAX_PAD}"
    if any(a["pads"]) and not _nonneg(graph, node.inputs[0], producers or graph.producers()):
        return False, "padded max-pool of possibly negative values needs -128 padding; LOAD pads zeros"
    return True, "max-pool: ACC8 loads + ALU MAX"


def vta_avg_pool(node: Node, graph: Graph, cfg: VTAConfig, producers) -> tuple[bool, str]:
    """``qavg_pool``: ``ACC_8BIT``; a power-of-two window or an exact reciprocal (``ALU_MUL``)."""
    a = node.attrs
    if a.get("mult") not in (None, 1) and not cfg.ALU_MUL:
        return False, (f"window {a['kernel'][0]}x{a['kernel'][1]} = {a['divisor']} is not a power "
                       f"of two: its reciprocal multiply needs ALU_MUL, which this config lacks")
    why = mult_why(node, cfg, avg_acc_bound(node, graph)) or _acc8(cfg)
    if why:
        return False, why
    if a["shift"] is None:
        return False, (f"window {a['kernel'][0]}x{a['kernel'][1]} = {a['divisor']} is not a power "
                       f"of two and has no exact 16-bit reciprocal (needs a divide)")
    if max(a["pads"]) > MAX_PAD:
        return False, f"padding {a['pads']} exceeds the LOAD pad field maximum {MAX_PAD}"
    why = _round_imm(a)
    if why:
        return False, why
    mul = _mul_suffix(a)
    if mul:
        return True, f"avg-pool: ACC8 loads + ALU ADD, {mul}SHR {a['shift']} (exact reciprocal of {a['divisor']})"
    return True, f"avg-pool: ACC8 loads + ALU ADD, SHR {a['shift']}"


def vta_mul(node: Node, graph: Graph, cfg: VTAConfig, producers) -> tuple[bool, str]:
    """``qmul``: by a scalar or per-channel constant, or by a tensor of the same shape or
    per channel (``[N,C,1,1]`` against NCHW); needs ``ALU_MUL`` and ``ACC_8BIT``."""
    a = node.attrs
    why = mult_why(node, cfg, mul_acc_bound(node, graph))
    if why:
        return False, why
    ta, tb = graph.types[node.inputs[0]], graph.types[node.inputs[1]]
    if node.inputs[1] in graph.constants:
        kind = const_kind(graph, node)
        if kind is None:
            c = graph.constants[node.inputs[1]]
            return False, f"multiply by a constant of shape {list(c.shape)}: only scalar or per-channel on VTA"
        no_mul = "multiply by a non-power-of-two constant needs ALU_MUL, which this config lacks"
        ok = f"multiply by a {kind} constant: ACC8 load + ALU MUL, {_mul_suffix(a)}SHR {a['shift']}, MAX/MIN"
    else:
        if ta.rank not in (2, 4) or tb.rank != ta.rank:
            return False, f"multiply of {ta} by {tb}: the VTA lowering takes NC or NCHW operands"
        if tb.shape != ta.shape and not (ta.rank == 4 and tuple(tb.shape[1:]) == (ta.shape[1], 1, 1)):
            return False, f"multiply of {ta} by {tb}: only equal shapes or a per-channel operand on VTA"
        no_mul = "a tensor multiply needs ALU_MUL, which this config lacks"
        kind = "per-channel" if tb.shape != ta.shape else "element-wise"
        ok = f"{kind} multiply: ACC8 loads + ALU MUL (tensor operand), {_mul_suffix(a)}SHR {a['shift']}, MAX/MIN"
    if not cfg.ALU_MUL:
        return False, no_mul
    why = _acc8(cfg) or _round_imm(a)
    return (False, why) if why else (True, ok)
