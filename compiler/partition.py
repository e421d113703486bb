"""Partitioning (BYOC style): place each node of a quantized graph on VTA or the CPU.

:func:`capability_table` lists, for a :class:`~vtaforge.hw.config.VTAConfig`,
what the VTA core can run; :func:`vta_support` decides one node with a
reason; :func:`partition` places every node and groups the VTA nodes into
maximal regions. Nothing is placed on the CPU silently: every CPU placement
carries its reason, and :meth:`Partition.report` prints them node by node.

Rules (all need the graph's activation and weight dtypes to be the core's widths: int8
activations for ``INP_WIDTH`` = ``OUT_WIDTH`` 8, int16 for 16; int8 / int16 weights for
``WGT_WIDTH`` 8 / 16; and the worst-case accumulator of conv/dense within ``ACC_WIDTH``
bits: ``K*128*128 + max|bias|`` for int8, else ``max_o sum_k |w[o,k]| * 2**(INP_WIDTH-1)
+ max|bias|`` from the actual weights):

* 16-bit activations (``LOG_INP_WIDTH`` 4): only ``qconv2d`` / ``qdense`` run on VTA.
  Every other integer op (``qadd``, ``qmax_pool``, ``qavg_pool``, ``qrequant``, ``qmul``)
  runs on the CPU with the reason that ACC8 loads int8 values only, so int16 operands
  cannot reach the accumulator;
* 4-bit activations (``LOG_INP_WIDTH`` 2; the graph's logical dtype ``int4``, int8 arrays
  in ``[-8, 7]``): ``qconv2d`` / ``qdense`` with int8 weights (``WGT_WIDTH`` 8) or int8
  weight constants in ``[-8, 7]`` (``WGT_WIDTH`` 4), and a ``qadd`` of two tensors in its
  GEMM form (INP loads of both operands, :func:`~.lower_eltwise.gemm_add_ok`).  ACC8 loads
  read int8 values, not nibbles, so every other integer op runs on the CPU with that
  reason.  An int4 tensor is never placed on a core of another width, nor an int8 one on
  an int4 core (the width reason);

* ``qconv2d`` (groups 1, grouped and depthwise; any kernel and stride; each pad
  <= 15, the LOAD pad field width) and ``qdense``: GEMM, then ALU
  ADD (bias + round, which the lowering may merge into the bias), SHR, MAX, MIN;
* ``qadd``: needs ``ACC_8BIT`` (both int8 operands are loaded into the
  accumulator) and ``round`` as a 16-bit ALU immediate (``shift <= 15``);
* ``qmax_pool``: needs ``ACC_8BIT``; padded windows only when the input is
  known non-negative (produced under a clip with ``clip_lo >= 0``), because a
  LOAD pads with zeros while exact max-pool padding is -128;
* ``qavg_pool``: ``ACC_8BIT``; a power-of-two window (``shift <= 15``), or any
  window with an exact fixed-point reciprocal (``mult``, see
  :func:`~.requant.avg_reciprocal`) on a core with ``ALU_MUL``;
* ``qrequant`` (standalone ReLU / Clip / rescale): ``ACC_8BIT``, ``shift <= 15``;
* ``qmul`` and any requantize with ``mult != 1``: need ``ALU_MUL``, and an
  overflow-free ALU sequence at the config's ``ACC_WIDTH``
  (:func:`~.requant.mult_plan` from the worst-case accumulator bound);
* ``quantize``, ``dequantize``, ``softmax``: CPU (float arithmetic);
* ``flatten``, ``reshape``, ``transpose``, ``concat``: CPU (layout: the host
  rearranges the data between device calls; no arithmetic).

Regions: the node list (a topological order) is cut into maximal runs of
consecutive VTA nodes; each run is one VTA region (convex by construction),
each CPU node between them its own CPU region.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ..hw.config import VTAConfig, load_config
from .errors import CompileError
from ..runtime.cpu_float import onnx_backend
from .ir import REAL_OPS, Graph, Node, qbits
from .lower_conv import weights_fit
from .lower_eltwise import gemm_add_ok
from .requant import mult_plan

__all__ = ["Placement", "Region", "Partition", "capability_table", "vta_support", "partition",
           "VTA", "CPU", "acc_bound", "linear_acc_bound", "node_mult_plan", "node_macs"]

VTA = "vta"
CPU = "cpu"
MAX_PAD = 15
IMM_MAX = (1 << 15) - 1


@dataclass(frozen=True)
class Placement:
    """Where one node runs: ``target`` is ``"vta"`` or ``"cpu"``; ``reason`` says why;
    ``backend`` is ``"vta"``, ``"numpy"`` (the runtime's numpy kernels: integer ops,
    layout, float ops) or ``"onnxruntime"`` (an ONNX node without a numpy kernel)."""

    node: str
    op: str
    target: str
    reason: str
    backend: str = ""

    @property
    def where(self) -> str:
        """``VTA``, ``CPU (numpy)`` or ``CPU (onnxruntime)``."""
        return "VTA" if self.target == VTA else f"CPU ({self.backend or 'numpy'})"


@dataclass
class Region:
    """A group of nodes with one target.

    Attributes:
        index: position in execution order.
        target: ``"vta"`` or ``"cpu"``.
        nodes: node names, in execution order.
        inputs: non-constant tensors read from outside the region.
        outputs: tensors produced inside and read outside (or graph outputs).
        constants: constant tensors (weights, biases) read by the region.
    """

    index: int
    target: str
    nodes: list[str]
    inputs: list[str] = field(default_factory=list)
    outputs: list[str] = field(default_factory=list)
    constants: list[str] = field(default_factory=list)


@dataclass
class Partition:
    """Result of :func:`partition`: ``graph``, ``config``, ``placements`` (per node name), ``regions``."""

    graph: Graph
    config: VTAConfig
    placements: dict[str, Placement]
    regions: list[Region]

    def target(self, node: str) -> str:
        """``"vta"`` or ``"cpu"`` for a node name."""
        return self.placements[node].target

    def vta_nodes(self) -> list[str]:
        return [n for n, p in self.placements.items() if p.target == VTA]

    def cpu_nodes(self) -> list[str]:
        return [n for n, p in self.placements.items() if p.target == CPU]

    def region_of(self, node: str) -> Region:
        for r in self.regions:
            if node in r.nodes:
                return r
        raise KeyError(node)

    def with_cpu(self, reasons: dict[str, str]) -> "Partition":
        """A copy with the named nodes moved to the CPU (numpy backend) for the given
        reasons (e.g. a VTA lowering that failed), regions formed again.

        Raises:
            KeyError: a name that is not a node of the graph.
        """
        if not reasons:
            return self
        pl = dict(self.placements)
        for n, why in reasons.items():
            p = pl[n]
            pl[n] = Placement(n, p.op, CPU, why, "numpy")
        return Partition(self.graph, self.config, pl, _regions(self.graph, pl))

    def report(self) -> str:
        """Placement report: one line per node (where, node, op, reason), a summary line
        (``N/M nodes on VTA, K% of MACs on VTA``), then the regions."""
        lines = [f"placement of '{self.graph.name}' on {self.config.bitstream_name} "
                 f"({len(self.vta_nodes())} VTA, {len(self.cpu_nodes())} CPU nodes)"]
        w = max((len(n) for n in self.placements), default=4)
        by = {n.name: n for n in self.graph.nodes}
        for n, p in self.placements.items():
            op = p.op if p.op != "onnx" else f"onnx:{by[n].attrs['op_type']}"
            lines.append(f"  {p.where:<17}  {n:<{w}}  {op:<14}  {p.reason}")
        lines.append("  " + self.summary())
        for r in self.regions:
            lines.append(f"  region {r.index} [{r.target}]: {', '.join(r.nodes)}  "
                         f"in=({', '.join(r.inputs)}) out=({', '.join(r.outputs)})")
        return "\n".join(lines)

    def summary(self) -> str:
        """``N/M nodes on VTA, K% of MACs on VTA`` (MACs: :func:`node_macs`)."""
        tot = vta = 0
        for n in self.graph.nodes:
            m = node_macs(n, self.graph)
            tot += m
            if self.placements[n.name].target == VTA:
                vta += m
        pct = f"{100.0 * vta / tot:.1f}%" if tot else "n/a"
        return (f"{len(self.vta_nodes())}/{len(self.placements)} nodes on VTA, {pct} of MACs on VTA "
                f"({vta:,} of {tot:,} MACs per sample)")


def node_macs(node: Node, graph: Graph) -> int:
    """Multiply-accumulates of one node per sample (batch dim excluded): conv/dense (float
    or quantized) and ONNX Conv / ConvTranspose / Gemm / MatMul kept as is; 0 otherwise."""
    def prod(dims):
        p = 1
        for d in dims:
            p *= d if isinstance(d, int) else 1
        return p

    op = node.op
    out = graph.types.get(node.outputs[0])
    if out is None:
        return 0
    if op in ("qconv2d", "conv2d", "qdense", "dense"):
        w = graph.types[node.inputs[1]].shape
        return prod(out.shape[1:]) * prod(w[1:])
    if op == "onnx":
        a = node.attrs
        ins = [graph.types[i].shape for i in node.inputs]
        wpos = {"Conv": 1, "ConvInteger": 1, "QLinearConv": 3}.get(a["op_type"])
        if wpos is not None and len(ins) > wpos:
            return prod(out.shape[1:]) * prod(ins[wpos][1:])
        if a["op_type"] == "ConvTranspose" and len(ins) > 1:
            return prod(ins[0][1:]) * prod(ins[1][1:])
        if a["op_type"] in ("Gemm", "MatMul", "MatMulInteger", "QLinearMatMul", "QGemm") and len(ins) > 1:
            k = ins[0][-1] if not a["onnx_attrs"].get("transA") else ins[0][-2]
            return prod(out.shape[1:]) * (k if isinstance(k, int) else 1)
    return 0


def capability_table(config: VTAConfig | str | None = None) -> dict[str, str]:
    """``op -> "vta: <condition>"`` or ``"cpu: <reason>"`` for a config (human-readable)."""
    cfg = load_config(config)
    acc8 = "" if cfg.ACC_8BIT else " [unavailable: ACC_8BIT off]"
    mul = "" if cfg.ALU_MUL else " [unavailable: ALU_MUL off]"
    widths = (cfg.INP_WIDTH, cfg.WGT_WIDTH, cfg.OUT_WIDTH) == (8, 8, 8)
    base = "" if widths else " [unavailable: needs INP/WGT/OUT width 8]"
    lin = "" if widths else (f" [int{cfg.INP_WIDTH} activations, int{cfg.WGT_WIDTH} "
                             f"weights: SHR/MAX/MIN requantize, no fused REQ]")
    if (cfg.INP_WIDTH, cfg.WGT_WIDTH) == (8, 4):
        base = ""
        lin = " [int4 weights: int8 constants in [-8, 7], else cpu]"
    elt = base if widths or cfg.INP_WIDTH == 8 else (
        f" [unavailable: int{cfg.INP_WIDTH} activations, ACC8 loads int8 only: cpu]")
    add = elt
    if cfg.INP_WIDTH == 4:
        lin = (f" [int4 activations (nibbles), int{cfg.WGT_WIDTH} weights"
               + (": int8 constants in [-8, 7], else cpu" if cfg.WGT_WIDTH == 4 else "") + "]")
        add = (f" [int4 activations: only two tensors as a GEMM over INP loads, BLOCK_IN == "
               f"BLOCK_OUT and lshift <= {cfg.WGT_WIDTH - 2}; else cpu]")
    return {
        "qconv2d": f"vta: GEMM + ALU requantize; groups/depthwise ok; pads <= {MAX_PAD}; mult 1 unless ALU_MUL{lin}",
        "qdense": f"vta: GEMM + ALU requantize{lin}",
        "qadd": f"vta: ACC8 loads + ALU SHR(left)/ADD/SHR/MAX/MIN; shift <= 15{acc8}{add}",
        "qmax_pool": f"vta: ACC8 loads + ALU MAX; padding only on non-negative inputs{acc8}{elt}",
        "qavg_pool": f"vta: power-of-two window: ACC8 loads + ALU ADD/SHR/MIN/MAX; other windows: "
                     f"ADD, MUL by an exact reciprocal, SHR when ALU_MUL, else cpu{acc8}{elt}",
        "qrequant": f"vta: ACC8 load + ALU SHR/MAX/MIN{acc8}{elt}",
        "qmul": f"vta: by a tensor (same shape or per channel) or a scalar / per-channel constant: ACC8 "
                f"loads + ALU MUL{mul}{acc8}{elt}",
        "quantize": "cpu: float input",
        "dequantize": "cpu: float output",
        "softmax": "cpu: float exponentials",
        "flatten": "cpu: layout op (host rearranges data, no arithmetic)",
        "reshape": "cpu: layout op (host rearranges data, no arithmetic)",
        "transpose": "cpu: layout op (host rearranges data, no arithmetic)",
        "concat": "cpu: layout op (host rearranges data, no arithmetic)",
    }


def _in_half(node: Node, graph: Graph) -> int:
    """``2**(bits-1)`` of ``node``'s activation input: 8 (int4), 128 (int8) or 32768
    (int16)."""
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
    half = _in_half(node, graph)
    if half == 128 and (w is None or w.dtype == "int8"):
        return k * 128 * 128 + bmax
    l1 = int(abs(w.astype("int64")).reshape(w.shape[0], -1).sum(1).max(initial=0))
    return l1 * half + bmax


def acc_bound(node: Node, graph: Graph) -> int:
    """Worst-case ``|acc|`` entering the requantize of ``node`` (over all inputs of its
    dtype; ``h = 2**(bits-1)``: 128 for int8, 32768 for int16).

    conv/dense: :func:`linear_acc_bound`; qadd: ``h*(2**lshift_a + 2**lshift_b)``;
    qmul: ``h*max|c|``; qrequant: h; qavg_pool: ``h*divisor``.
    """
    a = node.attrs
    h = _in_half(node, graph)
    if node.op in ("qconv2d", "qdense"):
        return linear_acc_bound(node, graph)
    if node.op == "qadd":
        return h * ((1 << a["lshift_a"]) + (1 << a["lshift_b"]))
    if node.op == "qmul":
        c = graph.constants.get(node.inputs[1])
        return h * (int(abs(c.astype("int64")).max()) if c is not None and c.size else h)
    if node.op == "qavg_pool":
        return h * a["divisor"]
    return h


def node_mult_plan(node: Node, graph: Graph, acc_width: int):
    """The :class:`~.requant.MultPlan` of a node whose requantize has ``mult != 1`` (else None)."""
    a = node.attrs
    if a.get("mult") in (None, 1):
        return None
    return mult_plan(a["mult"], a["shift"], a["round"], a["clip_lo"], a["clip_hi"],
                     acc_bound(node, graph), acc_width)


def _nonneg(g: Graph, tensor: str, prod: dict[str, Node]) -> bool:
    n = prod.get(tensor)
    while n is not None and n.op in ("qmax_pool", "flatten", "reshape", "transpose"):
        n = prod.get(n.inputs[0])
    return n is not None and n.attrs.get("clip_lo") is not None and n.attrs["clip_lo"] >= 0


def cpu_reason(node: Node, graph: Graph) -> str:
    """Why a node without a VTA predicate runs on the CPU (its registry entry's reason)."""
    from .ops import REGISTRY

    op = node.op
    if op == "onnx":
        return node.attrs.get("why") or f"ONNX op {node.attrs['op_type']} kept as is"
    if op in REAL_OPS:
        rep = graph.meta.get("quant_report")
        why = rep.fallbacks.get(node.name) if rep is not None else None
        why = (why or "real-valued").removeprefix("kept real-valued: ")
        return f"float {op} (the quantizer kept it float: {why})"
    d = REGISTRY.get(op)
    return d.cpu_reason if d is not None and d.cpu_reason else f"no VTA implementation for op {op!r}"


def _mul_suffix(a: dict) -> str:
    return f"MUL {a['mult']}, " if a.get("mult") not in (None, 1) else ""


def _round_imm(a: dict) -> str | None:
    if ("shift" in a and isinstance(a.get("round"), int) and a["round"] > IMM_MAX
            and a.get("mult") in (None, 1)):
        return f"rounding constant {a['round']} (shift {a['shift']}) does not fit a 16-bit ALU immediate"
    return None


def _acc8(cfg: VTAConfig) -> str | None:
    return None if cfg.ACC_8BIT else "int8 operands must be loaded into the accumulator, which needs ACC_8BIT"


def vta_linear(node: Node, graph: Graph, cfg: VTAConfig, producers) -> tuple[bool, str]:
    """``qconv2d`` / ``qdense``: the worst-case accumulator fits ``ACC_WIDTH``; conv pads fit
    the LOAD pad field."""
    a, op = node.attrs, node.op
    worst = linear_acc_bound(node, graph) + (max(a["round"]) if isinstance(a["round"], tuple)
                                             else a["round"])
    if worst >= 1 << (cfg.ACC_WIDTH - 1):
        return False, f"worst-case accumulator {worst} does not fit ACC_WIDTH {cfg.ACC_WIDTH}"
    if op == "qconv2d" and max(a["pads"]) > MAX_PAD:
        return False, f"padding {a['pads']} exceeds the LOAD pad field maximum {MAX_PAD}"
    what = "depthwise conv" if op == "qconv2d" and a["groups"] == graph.types[node.inputs[0]].shape[1] \
        and a["groups"] > 1 else ("group conv" if op == "qconv2d" and a["groups"] > 1 else op[1:])
    mul = f"mult {a['mult']}, " if a["mult"] != 1 else ""
    if isinstance(a["shift"], tuple):
        shift = f"per-channel shifts {min(a['shift'])}..{max(a['shift'])} (tensor SHR)"
    else:
        shift = f"shift {a['shift']}"
    return True, f"{what}: GEMM + ALU requantize ({mul}{shift}, clip [{a['clip_lo']}, {a['clip_hi']}])"


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


def vta_eltwise(node: Node, graph: Graph, cfg: VTAConfig, producers) -> tuple[bool, str]:
    """``qadd`` / ``qrequant``: NC or NCHW, ``ACC_8BIT``, the rounding constant an immediate."""
    a = node.attrs
    r = graph.types[node.inputs[0]].rank
    if r not in (2, 4):
        return False, f"element-wise op on a rank-{r} tensor: the VTA lowering takes NC or NCHW"
    why = _acc8(cfg) or _round_imm(a)
    if why:
        return False, why
    if node.op == "qadd" and node.inputs[1] in graph.constants:
        kind = add_const_kind(graph, node)
        if kind is None:
            return False, (f"adding a constant of shape {list(graph.types[node.inputs[1]].shape)}: only a "
                           f"scalar (16-bit immediate after alignment) or a per-channel constant runs on VTA")
        return True, (f"add of a {kind} constant: ACC8 load + ALU SHL {a['lshift_a']}, ADD, "
                      f"{_mul_suffix(a)}SHR {a['shift']}, MAX/MIN")
    if node.op == "qadd" and graph.types[node.inputs[0]].dtype == "int4":
        return True, (f"residual add of int4 tensors: GEMM over INP loads (diagonal weights "
                      f"{1 << a['lshift_a']}, {1 << a['lshift_b']}), {_mul_suffix(a)}SHR "
                      f"{a['shift']}, MAX/MIN")
    if node.op == "qadd":
        return True, (f"residual add: ACC8 loads + ALU SHL {a['lshift_a']}/{a['lshift_b']}, ADD, "
                      f"{_mul_suffix(a)}SHR {a['shift']}, MAX/MIN")
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
    why = _acc8(cfg)
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


def vta_support(node: Node, graph: Graph, config: VTAConfig, producers: dict[str, Node] | None = None
                ) -> tuple[bool, str]:
    """Can ``node`` run on VTA with ``config``? Returns ``(ok, reason)``.

    The checks every VTA op shares (int8 widths, a requantize multiplier needs ``ALU_MUL``
    and an overflow-free plan), then the op's own predicate from its registry entry
    (:data:`~.ops.REGISTRY`); ops without one run on the CPU with the entry's reason.
    """
    from .ops import REGISTRY

    cfg = config
    a = node.attrs
    d = REGISTRY.get(node.op)
    if d is None or d.vta is None:
        return False, cpu_reason(node, graph)
    why = _width_mismatch(node, graph, cfg) or _batch_mismatch(node, graph)
    if why:
        return False, why
    if node.op == "qavg_pool" and a.get("mult") not in (None, 1) and not cfg.ALU_MUL:
        return False, (f"window {a['kernel'][0]}x{a['kernel'][1]} = {a['divisor']} is not a power "
                       f"of two: its reciprocal multiply needs ALU_MUL, which this config lacks")
    if a.get("mult") not in (None, 1):
        if not cfg.ALU_MUL:
            return False, f"requantize multiplier {a['mult']} needs ALU_MUL, which this config lacks"
        if node_mult_plan(node, graph, cfg.ACC_WIDTH) is None:
            return False, (f"requantize multiplier {a['mult']} (shift {a['shift']}) may overflow "
                           f"ACC_WIDTH {cfg.ACC_WIDTH} (worst case |acc| {acc_bound(node, graph)})")
    return d.vta(node, graph, cfg, producers)


def _batch_mismatch(node: Node, graph: Graph) -> str | None:
    """Why a node's activations do not have the model's batch in dim 0 (None when they
    do): the executor runs a VTA program per batch of the first graph input's dim 0, so a
    tensor that a reshape or transpose gave another leading dim (a Gemm with transA=1,
    ``[1,C,H,W] -> [H*W, C]``) runs on the CPU."""
    if not graph.inputs or not graph.types[graph.inputs[0]].shape:
        return None
    b = graph.types[graph.inputs[0]].shape[0]
    for t in list(node.inputs) + list(node.outputs):
        if t in graph.constants or t not in graph.types or not graph.types[t].shape:
            continue
        d0 = graph.types[t].shape[0]
        if d0 != b:
            return (f"dim 0 of {t!r} is {d0}, not the model's batch {b} (a VTA program runs "
                    f"per batch of the first input's dim 0)")
    return None


def _int4_weights(name: str, graph: Graph, cfg: VTAConfig) -> bool:
    """Whether constant ``name`` fits a ``WGT_WIDTH`` 4 core (int8 values in ``[-8, 7]``)."""
    w = graph.constants.get(name)
    return w is not None and weights_fit(cfg, w)


def _width_mismatch(node: Node, graph: Graph, cfg: VTAConfig) -> str | None:
    """Why the node's dtypes do not fit the core's widths (None when they do).  int8 graph
    on an int8 core: None; an int16 graph on a ``LOG_INP_WIDTH`` 4 core: conv/dense fit
    (their weights must have ``WGT_WIDTH`` bits), every other integer op runs on the CPU
    (ACC8 loads int8 values only).  A ``LOG_WGT_WIDTH`` 2 core (int4 weights, int8
    activations) takes conv/dense whose int8 weight constants all lie in ``[-8, 7]``
    (checked on the values) and every int8 element-wise op.  An int4 graph on a
    ``LOG_INP_WIDTH`` 2 core: conv/dense with int8 weights (``WGT_WIDTH`` 8) or weights in
    ``[-8, 7]`` (``WGT_WIDTH`` 4), and a tensor-tensor ``qadd`` in its GEMM form; every other
    integer op runs on the CPU (ACC8 loads int8 values, not nibbles)."""
    t = graph.types[node.inputs[0]]
    w = graph.types[node.inputs[1]] if node.op in ("qconv2d", "qdense") else None
    if t.dtype == "int4" and cfg.INP_WIDTH == 4:
        if w is not None:
            if cfg.WGT_WIDTH == 4 and not _int4_weights(node.inputs[1], graph, cfg):
                return (f"{w.dtype} weights outside int4 [-8, 7] on a core with WGT_WIDTH 4: "
                        f"quantize for the core's widths")
            if w.dtype != "int8":
                return (f"{w.dtype} weights on a core with WGT_WIDTH {cfg.WGT_WIDTH}: "
                        f"quantize for the core's widths")
            return None
        if node.op == "qadd" and node.inputs[1] not in graph.constants:
            if any(graph.types[i].dtype != "int4" for i in node.inputs):
                return "a qadd of int4 and int8 tensors: quantize for the core's widths"
            if not gemm_add_ok(cfg, node.attrs):
                return (f"int4 operands: ACC8 loads int8 values only, and the GEMM form of "
                        f"the add needs BLOCK_IN == BLOCK_OUT (here {cfg.BLOCK_IN} / "
                        f"{cfg.BLOCK_OUT}) and both lshift <= {cfg.WGT_WIDTH - 2} (here "
                        f"{node.attrs['lshift_a']} / {node.attrs['lshift_b']}) (CPU, exact)")
            return None
        return ("int4 operands: ACC8 loads int8 values only, so int4 activations (two per "
                "byte) cannot reach the accumulator for this element-wise op (CPU, exact)")
    if cfg.WGT_WIDTH == 4 and cfg.INP_WIDTH == 8 and t.dtype == "int8":
        if w is not None and not _int4_weights(node.inputs[1], graph, cfg):
            return (f"{w.dtype} weights outside int4 [-8, 7] on a core with WGT_WIDTH 4: "
                    f"quantize for the core's widths")
        return None
    if t.dtype == "int8" and (w is None or w.dtype == "int8") and \
            (cfg.INP_WIDTH, cfg.WGT_WIDTH, cfg.OUT_WIDTH) == (8, 8, 8):
        return None
    if t.dtype == "int8" and (w is None or w.dtype == "int8"):
        return (f"the core's widths INP {cfg.INP_WIDTH} / WGT {cfg.WGT_WIDTH} / OUT "
                f"{cfg.OUT_WIDTH} are not the int8 of the quantized graph (an int8 QDQ "
                f"model keeps its int8 scales; quantize the float model for this core)")
    ab = qbits(t.dtype)
    if ab != cfg.INP_WIDTH:
        return (f"{t.dtype} activations on a core with INP_WIDTH {cfg.INP_WIDTH}: quantize "
                f"for the core's widths")
    if w is not None and qbits(w.dtype) != cfg.WGT_WIDTH:
        return (f"{w.dtype} weights on a core with WGT_WIDTH {cfg.WGT_WIDTH}: quantize for "
                f"the core's widths")
    if w is None and ab != 8:
        return (f"{t.dtype} operands: ACC8 loads int8 values only, so {t.dtype} activations "
                f"cannot reach the accumulator for this element-wise op (CPU, exact)")
    return None


def partition(graph: Graph, config: VTAConfig | str | None = None) -> Partition:
    """Place every node of a quantized graph and form regions.

    Args:
        graph: a ``kind == "quantized"`` graph.
        config: a :class:`VTAConfig`, a preset name or config path (default ``pynq``).
    Returns:
        :class:`Partition` (placements in node order; regions in execution order).
    Raises:
        CompileError: the graph is not quantized.
    """
    if graph.kind != "quantized":
        raise CompileError(f"partition needs a quantized graph, got a {graph.kind} graph")
    cfg = load_config(config)
    prod = graph.producers()
    placements: dict[str, Placement] = {}
    for n in graph.nodes:
        ok, why = vta_support(n, graph, cfg, prod)
        backend = VTA if ok else "numpy"
        if n.op == "onnx":
            backend, bwhy = onnx_backend(n.attrs)
            if bwhy:
                why = f"{why}; onnxruntime: {bwhy}"
        placements[n.name] = Placement(n.name, n.op, VTA if ok else CPU, why, backend)
    return Partition(graph, cfg, placements, _regions(graph, placements))


def _regions(graph: Graph, placements: dict[str, Placement]) -> list[Region]:
    """Maximal runs of consecutive VTA nodes, each CPU node its own region, with their
    inputs, outputs and constants (see the module docstring)."""
    regions: list[Region] = []
    for n in graph.nodes:
        t = placements[n.name].target
        if t == VTA and regions and regions[-1].target == VTA:
            regions[-1].nodes.append(n.name)
        else:
            regions.append(Region(len(regions), t, [n.name]))
    cons = graph.consumers()
    by_name = {n.name: n for n in graph.nodes}
    for r in regions:
        members = set(r.nodes)
        produced = {o for nn in r.nodes for o in by_name[nn].outputs}
        for nn in r.nodes:
            for i in by_name[nn].inputs:
                if i in graph.constants:
                    if i not in r.constants:
                        r.constants.append(i)
                elif i not in produced and i not in r.inputs:
                    r.inputs.append(i)
            for o in by_name[nn].outputs:
                if o in graph.outputs or any(c.name not in members for c in cons.get(o, [])):
                    r.outputs.append(o)
    return regions
