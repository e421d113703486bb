"""The op registry: one entry per IR op, every facet of the op reachable from it.

FINN keeps an op's shape inference, execution and estimates in one class; tinygrad keeps
rewrites in pattern tables.  Here each IR op has one :class:`OpDef` in :data:`REGISTRY`
holding its

* **spec** -- arity, required attributes, type/shape inference, graph kinds and the
  integer rules a quantized graph checks (``check``): the :class:`~.ir.OpSpec` in
  ``compiler/ir.py``'s :data:`~.ir.OPS`, which the validator runs between passes;
* **quantize** -- the quantizer rule ``rule(quantizer, node)`` that turns the float op into
  integer ops (:class:`~.quant_rules.QuantRules` ``q_<op>``) and the ops it ``produces``;
  a float op the rule refuses stays real-valued on the CPU (``q_real``, the BYOC fallback)
  when it has a runtime float kernel (``cpu="real"``);
* **vta** -- the VTA predicate ``(node, graph, config, producers) -> (ok, reason)``
  (``compiler/placement.py``), run after the checks every VTA op shares; ``None``: the op
  always runs on the CPU, for ``cpu_reason``;
* **acc_bound** -- the worst-case ``|acc|`` entering the op's requantize,
  ``(node, graph) -> int`` (``compiler/placement.py``), from which a multiplier's
  overflow-free ALU sequence is planned;
* **lower** -- the VTA lowering ``(config, graph, node, uid, options) -> (LoweredOp, slots)``
  (``options``: the :class:`~.options.LowerOptions` of the whole lowering): the adapters
  below, which hand a node's tensors, and the builder its part of the options, to the
  program builders of ``compiler/lower_conv.py`` / ``lower_eltwise.py``;
* **reference** -- the numpy kernel ``(node, inputs, graph) -> array``
  (``compiler/ref_kernels.py``): the integer oracle of a quantized op; a layout op's
  kernel moves data of any dtype and also runs in float graphs (real-valued float ops run
  the runtime's float kernels instead);
* **cpu** -- the runtime kernel that runs the op on the host: ``"int"``
  (``runtime/cpu_ops.CPU_KERNELS``), ``"real"`` (``runtime/cpu_float.run_float_op``) or
  ``"onnx"`` (``runtime/cpu_float.run_onnx_node``: numpy kernel or onnxruntime);
* **capability** -- the line of :func:`~.partition.capability_table`, a template whose
  fields (``{acc8}``, ``{mul}``, ``{lin}``, ``{elt}``, ``{add}``, ``{max_pad}``) the
  config's caveats fill (:func:`~.partition.capability_caveats`);
* **weights** -- the position of the op's weight constant (conv/dense: 1), whose dtype
  must be the core's ``WGT_WIDTH`` (``partition._width_mismatch``); ``None``: no weights;
* **int4** -- the op's form on int4 activations (a ``LOG_INP_WIDTH`` 2 core, where ACC8
  loads cannot read nibbles): ``(node, graph, config) -> str | None``, why not or None
  (``qadd`` of two tensors as a GEMM, :func:`~.placement.add_int4_why`); ``None``: an op
  without weights has no int4 form;
* **macs** -- multiply-accumulates per sample, ``(node, graph) -> int``
  (:func:`~.partition.node_macs`, the placement summary's MAC share;
  :func:`~.placement.linear_macs`, :func:`~.placement.onnx_macs`); ``None``: 0;
* **bands** -- the row-band variants of a VTA step whose input the host packs,
  ``(config, graph, node, lowered, uid, vta_layouts, options) -> [RowBands]`` (:func:`bands_qconv2d`;
  ``[]`` when none apply); ``None``: the op runs whole.

The dispatchers (:func:`~.partition.vta_support`, :func:`~.partition.acc_bound`,
:func:`~.compile.lower_node`, :func:`~.reference.run_node`, the quantizer's main loop, the
float executor) import this module at the top and look ops up here; this module imports
only the facet modules (``ir``, ``placement``, ``quant_rules``, ``ref_kernels``,
``lower_*``), none of which imports a dispatcher, so the imports are acyclic.
``tests/compiler/test_ops_registry.py`` checks that every facet is present where needed and
that no compiler module imports another inside a function.  ``docs/compiler.md`` "Adding
an op" gives the steps.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np

from ..hw.config import MemType, VTAConfig
from ..hw.isa import LIMITS, AluOp, Module
from ..runtime.artifact import SlotLayout, TraceBuilder
from . import placement as pl
from . import ref_kernels as rk
from .errors import CompileError
from .ir import OPS, Graph, Node, OpSpec
from .lower_common import LoweredOp, dram_stats, emit_kernel, fit_queues, operand_chw
from .lower_conv import bandable, lower_conv, lower_conv_bands, lower_dense
from .lower_eltwise import lower_add_const, lower_eltwise, lower_mul, lower_pool
from .options import LowerOptions
from .pack import pack_bias
from .quant_rules import QuantRules as _Q
from .tiling import MAX_EXTENT

__all__ = ["OpDef", "REGISTRY"]

_LAYOUT = "layout op: the host rearranges the data between device calls (no arithmetic)"
_FLOAT = "float arithmetic runs on the CPU"
_LAYOUT_CAP = "cpu: layout op (host rearranges data, no arithmetic)"
_EXTREMUM_CAP = ("vta: a tensor of the same shape or per channel ([N,C,1,1]), or a scalar / per-channel "
                 "constant: ACC8 loads + ALU {alu}{{acc8}}{{elt}}")


@dataclass(frozen=True)
class OpDef:
    """One IR op's facets (see the module docstring); ``None`` / ``""``: the op has none."""

    name: str
    quantize: Callable[[_Q, Node], None] | None = None
    produces: tuple[str, ...] = ()
    vta: Callable | None = None
    acc_bound: Callable[[Node, Graph], int] | None = None
    lower: Callable | None = None
    reference: Callable | None = None
    cpu: str = ""
    cpu_reason: str = ""
    capability: str = ""
    weights: int | None = None
    int4: Callable[[Node, Graph, VTAConfig], str | None] | None = None
    macs: Callable[[Node, Graph], int] | None = None
    bands: Callable | None = None

    @property
    def spec(self) -> OpSpec:
        """The op's :class:`~.ir.OpSpec` (arity, attributes, inference, graph kinds, check)."""
        return OPS[self.name]

    @property
    def check(self) -> Callable | None:
        """The op's integer rules in a quantized graph (its spec's ``check``)."""
        return self.spec.check


# ---------------------------------------------------------------------------
# Lowering adapters (the ``lower`` facet): a node's tensors -> a program builder.  Each
# takes the lowering's LowerOptions (ops without choices ignore them).
# ---------------------------------------------------------------------------

def lower_qconv2d(cfg: VTAConfig, graph: Graph, node: Node, uid: str, options: LowerOptions):
    """``qconv2d`` -> GEMM program (:func:`~.lower_conv.lower_conv`, ``options.conv``); slot ``x``."""
    x, w, b = node.inputs
    lo = lower_conv(cfg, uid, operand_chw(graph, x), graph.constants[w], graph.constants[b], node.attrs,
                    options=options.conv)
    return lo, {"x": x}


def lower_qdense(cfg: VTAConfig, graph: Graph, node: Node, uid: str, options: LowerOptions):
    """``qdense`` -> a 1x1 conv on a 1x1 image (:func:`~.lower_conv.lower_dense`,
    ``options.conv``); slot ``x``."""
    x, w, b = node.inputs
    lo = lower_dense(cfg, uid, graph.types[x].shape[1], graph.constants[w], graph.constants[b], node.attrs,
                     options=options.conv)
    return lo, {"x": x}


def bands_qconv2d(cfg: VTAConfig, graph: Graph, node: Node, lo: LoweredOp, uid: str, vta_y: dict,
                  options: LowerOptions) -> list:
    """The row-band variants of a VTA-placed ``qconv2d`` (``lo``: its whole lowering) whose
    input the host packs -- its producer is not a VTA step writing the same packed layout
    (``vta_y``: tensor -> layout of the VTA step writing it) and the input has no pre-pad --
    when :func:`~.lower_conv.bandable` (:func:`~.lower_conv.lower_conv_bands` with
    ``options.conv``); else ``[]``, also when the band lowering refuses (optional: the step
    still runs whole)."""
    if vta_y.get(node.inputs[0]) == lo.layouts.get("x") or lo.layouts["x"].pre_pad != (0, 0, 0, 0):
        return []
    x, w, b = node.inputs
    chw, wt = operand_chw(graph, x), graph.constants[w]
    if not bandable(cfg, chw, wt.shape, node.attrs):
        return []
    try:
        return lower_conv_bands(cfg, uid, chw, wt, graph.constants[b], node.attrs,
                                options=options.conv)
    except CompileError:
        return []


def _lower_pool(cfg: VTAConfig, graph: Graph, node: Node, uid: str, options: LowerOptions,
                kind: str):
    x = node.inputs[0]
    lo = lower_pool(cfg, uid, operand_chw(graph, x), node.attrs, kind,
                    separable=options.pool_separable, gemm_copy=options.pool_gemm_copy)
    return lo, {"x": x}


def lower_qmax_pool(cfg: VTAConfig, graph: Graph, node: Node, uid: str, options: LowerOptions):
    """``qmax_pool`` -> ACC8 loads + ALU MAX (:func:`~.lower_eltwise.lower_pool`,
    ``options.pool_separable`` / ``pool_gemm_copy``); slot ``x``."""
    return _lower_pool(cfg, graph, node, uid, options, "max")


def lower_qavg_pool(cfg: VTAConfig, graph: Graph, node: Node, uid: str, options: LowerOptions):
    """``qavg_pool`` -> ACC8 loads + ALU ADD, SHR (:func:`~.lower_eltwise.lower_pool`); slot ``x``."""
    return _lower_pool(cfg, graph, node, uid, options, "avg")


def _const_vals(graph: Graph, name: str) -> np.ndarray:
    """An int8 constant operand as int64 values: one for a scalar, else one per channel
    (the shapes :func:`~.placement.const_kind` admits)."""
    c = graph.constants[name].astype(np.int64).reshape(-1)
    return c[:1] if c.size == 1 else c


def lower_qadd(cfg: VTAConfig, graph: Graph, node: Node, uid: str, options: LowerOptions):
    """``qadd`` -> ACC8 loads of both operands + ALU (:func:`~.lower_eltwise.lower_eltwise`);
    a constant operand -> an immediate or a per-channel ACC constant
    (:func:`~.lower_eltwise.lower_add_const`)."""
    a, b = node.inputs
    if b in graph.constants:
        vals = _const_vals(graph, b) << int(node.attrs["lshift_b"])
        return lower_add_const(cfg, uid, operand_chw(graph, a), vals, node.attrs), {"a": a}
    lo = lower_eltwise(cfg, uid, operand_chw(graph, a), "qadd", node.attrs)
    return lo, {"a": a, "b": b}


def lower_qrequant(cfg: VTAConfig, graph: Graph, node: Node, uid: str, options: LowerOptions):
    """``qrequant`` -> ACC8 load + the ALU requantize (:func:`~.lower_eltwise.lower_eltwise`)."""
    lo = lower_eltwise(cfg, uid, operand_chw(graph, node.inputs[0]), "qrequant", node.attrs)
    return lo, {"a": node.inputs[0]}


def lower_qmul(cfg: VTAConfig, graph: Graph, node: Node, uid: str, options: LowerOptions):
    """``qmul`` of two tensors -> ACC8 loads + a tensor-operand ALU MUL
    (:func:`~.lower_eltwise.lower_mul`), slots ``a``, ``b``; by a scalar or per-channel
    constant -> MUL by an immediate or a resident ACC constant
    (:func:`~.lower_eltwise.lower_add_const` with ``MUL``), slot ``a``."""
    a, b = node.inputs
    if b in graph.constants:
        lo = lower_add_const(cfg, uid, operand_chw(graph, a), _const_vals(graph, b), node.attrs, AluOp.MUL)
        return lo, {"a": a}
    return lower_mul(cfg, uid, operand_chw(graph, a), operand_chw(graph, b), node.attrs), {"a": a, "b": b}


# ---------------------------------------------------------------------------
# max / min, qmax / qmin: every facet beside the entries (docs/compiler.md "Adding an op")
# ---------------------------------------------------------------------------

@dataclass(frozen=True)
class _Extremum:
    """What tells ``max`` from ``min``: the integer op, the ALU op, the numpy ufunc."""

    qop: str
    alu: AluOp
    fn: Callable[[np.ndarray, np.ndarray], np.ndarray]


_MAX = _Extremum("qmax", AluOp.MAX, np.maximum)
_MIN = _Extremum("qmin", AluOp.MIN, np.minimum)
#: ``op -> _Extremum`` of the four ops of the family (a table, looked up by the facets)
_EXTREMUM = {"max": _MAX, "qmax": _MAX, "min": _MIN, "qmin": _MIN}


def q_extremum(qz: _Q, n: Node) -> None:
    """``max`` / ``min`` -> ``qmax`` / ``qmin`` of both operands at the output's calibrated
    exp (and exact QDQ scale): a tensor at another one is requantized first (``qrequant``,
    on VTA like any standalone requantize); a constant is quantized at the output's exp
    (``clip(rint(c / s_out))`` in the output's dtype).  Exact: a requantize (and the
    quantization of a constant) is monotone, so ``max(r(a), r(b)) == r(max(a, b))``, and
    ``qmax`` / ``qmin`` needs none of its own."""
    out = n.outputs[0]
    eo, so = qz.exps[out], qz.scales.get(out)
    so_real = 2.0 ** eo if so is None else so
    oty = qz.otype(out, qz.fg.types[out].shape)
    aligned = []
    for t in n.inputs:
        if t in qz.fg.constants:
            aligned.append(qz.const_int8(f"{t}_q", qz.fg.constants[t], eo, lo=-128, scale=so, dtype=oty.dtype))
            continue
        x = qz.qin(t)
        xt = qz.q.types[x]
        if (xt.exp, xt.scale) != (eo, so):
            r = qz.q.fresh(f"{x}_align")
            qz.add(qz.q.fresh(f"{n.name}_align"), "qrequant", [x], r,
                   qz.requant_for(n, xt.real_scale / so_real, qz.half, out), qz.otype(out, xt.shape))
            x = r
        aligned.append(x)
    qo = qz.int_name(out)
    qz.add(n.name, _EXTREMUM[n.op].qop, aligned, qo, {}, oty)
    qz.qname[out] = qo


def ref_extremum(node: Node, x: list[np.ndarray], graph: Graph) -> np.ndarray:
    """``max`` / ``qmax``: ``np.maximum(a, b)``; ``min`` / ``qmin``: ``np.minimum(a, b)``,
    numpy broadcasting, in the operands' dtype (float32 in a float graph, the integer
    oracle in a quantized one: exact, no requantize)."""
    return _EXTREMUM[node.op].fn(x[0], x[1])


def _operand_form(graph: Graph, node: Node) -> str | None:
    """How ``qmax`` / ``qmin``'s second operand reaches the ALU: ``"tensor"`` (``a``'s
    shape: ACC8 load), ``"channel"`` (a ``[N,C,1,1]`` tensor against NCHW ``a``: ACC8 load
    of one entry per channel block, broadcast over H*W by a zero source factor),
    ``"scalar"`` (a one-value constant: the ALU immediate), ``"const"`` (a per-channel
    constant: resident ACC rows, broadcast like ``"channel"``); None for any other
    broadcast (and for operands of rank other than 2 and 4)."""
    ta, b = graph.types[node.inputs[0]], node.inputs[1]
    if ta.rank not in (2, 4):
        return None
    if b in graph.constants:
        kind = pl.const_kind(graph, node)
        return {"scalar": "scalar", "per-channel": "const"}.get(kind)
    tb = graph.types[b]
    if tb.shape == ta.shape:
        return "tensor"
    if ta.rank == 4 and tb.rank == 4 and tuple(tb.shape[1:]) == (ta.shape[1], 1, 1):
        return "channel"
    return None


_FORM_WHY = {"tensor": "element-wise {op}: ACC8 loads + ALU {alu} (tensor operand)",
             "channel": "{op} by a per-channel tensor: ACC8 loads + ALU {alu} (broadcast over H*W)",
             "scalar": "{op} by a scalar constant: ACC8 load + ALU {alu} (immediate)",
             "const": "{op} by a per-channel constant: ACC8 load + ALU {alu} by resident ACC rows"}


def vta_extremum(node: Node, graph: Graph, cfg: VTAConfig, producers) -> tuple[bool, str]:
    """``qmax`` / ``qmin``: NC or NCHW ``a``; ``b`` of ``a``'s shape, a per-channel
    ``[N,C,1,1]`` tensor, or a scalar / per-channel constant (:func:`_operand_form`);
    ``ACC_8BIT`` (``a`` is an ACC8 load)."""
    ta, tb = graph.types[node.inputs[0]], graph.types[node.inputs[1]]
    alu = _EXTREMUM[node.op].alu.name
    if ta.rank not in (2, 4):
        return False, f"element-wise op on a rank-{ta.rank} tensor: the VTA lowering takes NC or NCHW"
    form = _operand_form(graph, node)
    if form is None:
        what = "constant" if node.inputs[1] in graph.constants else "tensor"
        return False, (f"{alu} of {ta} and a broadcast {what} {tb}: VTA takes an operand of the same "
                       f"shape, a per-channel [N,C,1,1] tensor, or a scalar / per-channel constant")
    if not cfg.ACC_8BIT:
        return False, "int8 operands must be loaded into the accumulator, which needs ACC_8BIT"
    return True, _FORM_WHY[form].format(op=alu.lower(), alu=alu)


def _extremum_chunks(cfg: VTAConfig, form: str, lay: SlotLayout, half: int, uid: str) -> list:
    """``[(e0, m, c0, cnt)]``: the ACC entries ``[e0, e0+m)`` of ``a`` one tile holds (for
    a per-channel ``b`` whole channel blocks ``[c0, c0+cnt)``, ``m = cnt*H*W``) in half the
    accumulator beside its ``b`` entries (``"tensor"``: ``m``; ``"channel"``: ``cnt``;
    ``"scalar"``: none; ``"const"``: all ``cb`` channel blocks, resident).

    Raises:
        CompileError: a channel block whose ``H*W`` (plus its operand) does not fit.
    """
    hw = lay.hw[0] * lay.hw[1]
    n_el = lay.cb * hw
    if form in ("tensor", "scalar"):
        step = max(1, min(MAX_EXTENT, LIMITS.max("size"), half // 2 if form == "tensor" else half))
        return [(e0, min(step, n_el - e0), 0, 0) for e0 in range(0, n_el, step)]
    room = half - lay.cb if form == "const" else half
    k = min(room // (hw + (form == "channel")), MAX_EXTENT) if room > 0 else 0
    if k < 1 or hw > MAX_EXTENT:
        raise CompileError(f"{uid}: a {lay.hw[0]}x{lay.hw[1]} channel block and its operand do not "
                           f"fit half the accumulator")
    return [(c0 * hw, min(k, lay.cb - c0) * hw, c0, min(k, lay.cb - c0)) for c0 in range(0, lay.cb, k)]


def lower_extremum(cfg: VTAConfig, graph: Graph, node: Node, uid: str, options: LowerOptions):
    """``qmax`` / ``qmin`` for one batch block (slots ``a``, ``y``, and ``b`` for a tensor
    operand; a per-channel constant is the packed ACC constant ``c``): per tile (at most
    half the accumulator, :func:`_extremum_chunks`), an ACC8 load of ``a``, then ALU MAX /
    MIN by ``b`` in its form (:func:`_operand_form`: an ACC8 load of the same extent, one
    per channel block broadcast over H*W, the immediate, or the resident constants), STORE;
    two virtual threads alternate ACC halves, store->compute tokens guard their reuse.  No
    requantize: the stored low 8 bits are the int8 result.

    Raises:
        CompileError: ACC_8BIT off, activations other than int8, a broadcast VTA cannot
            express, a channel block too large for half the accumulator.
    """
    a, b = node.inputs
    alu = _EXTREMUM[node.op].alu
    chw = operand_chw(graph, a)
    if not cfg.ACC_8BIT or cfg.INP_WIDTH != 8:
        raise CompileError(f"{uid}: {node.op} on VTA needs ACC_8BIT and int8 activations (ACC8 loads)")
    form = _operand_form(graph, node)
    if form is None:
        raise CompileError(f"{uid}: {node.op} of {list(chw)} and {list(graph.types[b].shape)}: "
                           f"a broadcast VTA does not take")
    lay = SlotLayout(tuple(chw), cfg.BATCH, cfg.BLOCK_OUT)
    hw = lay.hw[0] * lay.hw[1]
    nvt = 2 if cfg.ACC_DEPTH >= 4 else 1
    half = cfg.ACC_DEPTH // nvt
    chunks = _extremum_chunks(cfg, form, lay, half, uid)
    slots, layouts, consts = {"a": lay.block_bytes}, {"a": lay}, {}
    b_size = 0
    if form in ("tensor", "channel"):
        lay_b = lay if form == "tensor" else SlotLayout(tuple(operand_chw(graph, b)), cfg.BATCH, cfg.BLOCK_OUT)
        slots["b"], layouts["b"], b_size = lay_b.block_bytes, lay_b, cfg.BATCH * int(np.prod(lay_b.shape))
    slots["y"], layouts["y"] = lay.block_bytes, lay
    tb = TraceBuilder(uid, slots)
    if form == "const":          # resident at the top of each thread's half
        consts["c"] = pack_bias(graph.constants[b].astype(np.int64).reshape(-1), 0, cfg.BATCH, cfg.BLOCK_OUT)
        for vt in range(nvt):
            tb.load_2d("c", 0, MemType.ACC, vt * half + half - lay.cb, 1, lay.cb, lay.cb)
    for t, (e0, m, c0, cnt) in enumerate(chunks):
        base = (t % nvt) * half
        if t >= nvt:
            tb.dep_pop(Module.STORE, Module.COMPUTE)
        tb.load_2d("a", e0, MemType.ACC8, base, 1, m, m)
        bcast = [(cnt, hw, 1, 0), (hw, 1, 0, 0)]
        if form == "tensor":
            tb.load_2d("b", e0, MemType.ACC8, base + m, 1, m, m)
            emit_kernel(tb, "alu", [(m, 1, 1, 0)], [base], [base + m], op=alu)
        elif form == "channel":
            tb.load_2d("b", c0, MemType.ACC8, base + m, 1, cnt, cnt)
            emit_kernel(tb, "alu", bcast, [base], [base + m], op=alu)
        elif form == "scalar":
            imm = int(graph.constants[b].reshape(()))
            emit_kernel(tb, "alu", [(m, 1, 1, 0)], [base], [base], op=alu, imm=imm)
        else:
            emit_kernel(tb, "alu", bcast, [base], [(t % nvt) * half + half - lay.cb + c0], op=alu)
        tb.dep_push(Module.COMPUTE, Module.STORE)
        tb.dep_pop(Module.COMPUTE, Module.STORE)
        tb.store_2d(base, "y", e0, 1, m, m)
        tb.dep_push(Module.STORE, Module.COMPUTE)
    for _ in range(min(len(chunks), nvt)):
        tb.dep_pop(Module.STORE, Module.COMPUTE)
    size = cfg.BATCH * int(np.prod(chw))
    tb.trace.stats = {"tiles": len(chunks), "gemm_uops_ideal": 0, **dram_stats(size + b_size, size)}
    act = {"a": a, "b": b} if "b" in slots else {"a": a}
    return fit_queues(cfg, LoweredOp(tb.trace, consts, layouts)), act


# ---------------------------------------------------------------------------
# The registry
# ---------------------------------------------------------------------------

def _layout_op(name: str, reference: Callable, produces: tuple[str, ...] | None = None,
               capability: str = _LAYOUT_CAP) -> OpDef:
    """A layout op (float and quantized graphs): data movement on the host."""
    return OpDef(name, getattr(_Q, f"q_{name}"), produces or (name,), reference=reference, cpu="int",
                 cpu_reason=_LAYOUT, capability=capability)


def _defs() -> dict[str, OpDef]:
    d = [
        # float ops: a quantizer rule each; kept real-valued (CPU) when the rule refuses
        OpDef("conv2d", _Q.q_conv2d, ("qconv2d",), cpu="real", weights=1, macs=pl.linear_macs),
        OpDef("dense", _Q.q_dense, ("qdense",), cpu="real", weights=1, macs=pl.linear_macs),
        OpDef("relu", _Q.q_relu, ("qrequant",), cpu="real"),
        OpDef("clip", _Q.q_clip, ("qrequant",), cpu="real"),
        OpDef("add", _Q.q_add, ("qadd", "qrequant"), cpu="real"),
        OpDef("mul", _Q.q_mul, ("qmul", "qrequant"), cpu="real"),
        OpDef("max", q_extremum, ("qmax", "qrequant"), reference=ref_extremum),   # always quantized
        OpDef("min", q_extremum, ("qmin", "qrequant"), reference=ref_extremum),   # always quantized
        OpDef("batch_norm", _Q.q_batch_norm, (), cpu="real"),   # folded by the passes first
        OpDef("max_pool", _Q.q_max_pool, ("qmax_pool",), cpu="real"),
        OpDef("avg_pool", _Q.q_avg_pool, ("qavg_pool",), cpu="real"),
        OpDef("global_avg_pool", _Q.q_global_avg_pool, ("qavg_pool",), cpu="real"),
        OpDef("fake_quant", _Q.q_fake_quant, ("qrequant",), cpu="real"),
        # layout ops (float and quantized graphs): data movement on the host
        _layout_op("flatten", rk.layout_flatten),
        _layout_op("reshape", rk.layout_reshape),
        _layout_op("transpose", rk.layout_transpose),
        _layout_op("concat", rk.layout_concat, ("concat", "qrequant")),
        _layout_op("upsample", rk.layout_upsample),
        _layout_op("pad", rk.layout_pad),
        OpDef("softmax", _Q.q_softmax, ("softmax", "dequantize"), cpu="int", cpu_reason=_FLOAT,
              capability="cpu: float exponentials"),
        # an ONNX node kept as is: always real-valued, on the CPU
        OpDef("onnx", _Q.q_real, (), cpu="onnx", macs=pl.onnx_macs),
        # quantized ops
        OpDef("quantize", reference=rk.ref_quantize, cpu="int", cpu_reason=_FLOAT,
              capability="cpu: float input"),
        OpDef("dequantize", reference=rk.ref_dequantize, cpu="int", cpu_reason=_FLOAT,
              capability="cpu: float output"),
        OpDef("qconv2d", vta=pl.vta_linear, acc_bound=pl.linear_acc_bound, lower=lower_qconv2d,
              reference=rk.ref_qconv2d, cpu="int",
              capability="vta: GEMM + ALU requantize; groups/depthwise ok; pads <= {max_pad}; "
                         "mult 1 unless ALU_MUL{lin}", weights=1, macs=pl.linear_macs, bands=bands_qconv2d),
        OpDef("qdense", vta=pl.vta_linear, acc_bound=pl.linear_acc_bound, lower=lower_qdense,
              reference=rk.ref_qdense, cpu="int", capability="vta: GEMM + ALU requantize{lin}",
              weights=1, macs=pl.linear_macs),
        OpDef("qadd", vta=pl.vta_add, acc_bound=pl.add_acc_bound, lower=lower_qadd,
              reference=rk.ref_qadd, cpu="int",
              capability="vta: ACC8 loads + ALU SHR(left)/ADD/SHR/MAX/MIN; shift <= 15{acc8}{add}",
              int4=pl.add_int4_why),
        OpDef("qrequant", vta=pl.vta_requant, acc_bound=pl.operand_bound, lower=lower_qrequant,
              reference=rk.ref_qrequant, cpu="int", capability="vta: ACC8 load + ALU SHR/MAX/MIN{acc8}{elt}"),
        OpDef("qmax_pool", vta=pl.vta_max_pool, acc_bound=pl.operand_bound, lower=lower_qmax_pool,
              reference=rk.ref_qmax_pool, cpu="int",
              capability="vta: ACC8 loads + ALU MAX; padding only on non-negative inputs{acc8}{elt}"),
        OpDef("qavg_pool", vta=pl.vta_avg_pool, acc_bound=pl.avg_acc_bound, lower=lower_qavg_pool,
              reference=rk.ref_qavg_pool, cpu="int",
              capability="vta: power-of-two window: ACC8 loads + ALU ADD/SHR/MIN/MAX; other windows: "
                         "ADD, MUL by an exact reciprocal, SHR when ALU_MUL, else cpu{acc8}{elt}"),
        OpDef("qmul", vta=pl.vta_mul, acc_bound=pl.mul_acc_bound, lower=lower_qmul,
              reference=rk.ref_qmul, cpu="int",
              capability="vta: by a tensor (same shape or per channel) or a scalar / per-channel "
                         "constant: ACC8 loads + ALU MUL{mul}{acc8}{elt}"),
        OpDef("qmax", vta=vta_extremum, acc_bound=pl.operand_bound, lower=lower_extremum,
              reference=ref_extremum, cpu="int", capability=_EXTREMUM_CAP.format(alu="MAX")),
        OpDef("qmin", vta=vta_extremum, acc_bound=pl.operand_bound, lower=lower_extremum,
              reference=ref_extremum, cpu="int", capability=_EXTREMUM_CAP.format(alu="MIN")),
    ]
    return {o.name: o for o in d}


#: ``IR op -> OpDef``: the single table every stage dispatches through.
REGISTRY: dict[str, OpDef] = _defs()
