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
from ..runtime.cpu_float import onnx_backend
from .errors import CompileError
from .ir import REAL_OPS, Graph, Node, qbits
from .lower_conv import weights_fit
from .ops import REGISTRY, OpDef
from .placement import IMM_MAX, INT4_ELTWISE_WHY, MAX_PAD, linear_acc_bound
from .requant import mult_plan

__all__ = ["Placement", "Region", "Partition", "capability_table", "capability_caveats", "vta_support",
           "partition", "VTA", "CPU", "acc_bound", "linear_acc_bound", "node_mult_plan", "node_macs",
           "MAX_PAD", "IMM_MAX"]

VTA = "vta"
CPU = "cpu"


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
    """Multiply-accumulates of one node per sample (batch dim excluded): its registry
    entry's ``macs`` facet (conv/dense float or quantized, ONNX Conv / ConvTranspose / Gemm
    / MatMul kept as is: :func:`~.placement.linear_macs`, :func:`~.placement.onnx_macs`);
    0 for an op without one or an untyped output."""
    d = REGISTRY.get(node.op)
    if d is None or d.macs is None or graph.types.get(node.outputs[0]) is None:
        return 0
    return d.macs(node, graph)


def capability_table(config: VTAConfig | str | None = None) -> dict[str, str]:
    """``op -> "vta: <condition>"`` or ``"cpu: <reason>"`` for a config (human-readable):
    each registry entry's ``capability`` text (:data:`~.ops.REGISTRY`) with the config's
    caveats filled in (:func:`capability_caveats`)."""
    fill = capability_caveats(load_config(config))
    return {name: d.capability.format(**fill) for name, d in REGISTRY.items() if d.capability}


def capability_caveats(cfg: VTAConfig) -> dict[str, str]:
    """The fields a registry entry's ``capability`` text may name, for ``cfg``: ``acc8``
    (``ACC_8BIT`` off), ``mul`` (``ALU_MUL`` off), ``lin`` (conv/dense at the core's
    widths), ``elt`` (element-wise ACC8 ops at the core's widths), ``add`` (``qadd``:
    ``elt``, or its int4 GEMM form), ``max_pad`` (:data:`~.placement.MAX_PAD`); each
    ``""`` when it does not apply."""
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
    return {"acc8": acc8, "mul": mul, "lin": lin, "elt": elt, "add": add, "max_pad": str(MAX_PAD)}


def acc_bound(node: Node, graph: Graph) -> int:
    """Worst-case ``|acc|`` entering the requantize of ``node`` over all inputs of its dtype:
    its registry entry's ``acc_bound`` (:mod:`.placement`: conv/dense
    :func:`~.placement.linear_acc_bound`; qadd ``h*(2**lshift_a + 2**lshift_b)``; qmul
    ``h*max|c|``; qrequant and qmax_pool ``h``; qavg_pool ``h*divisor``; ``h = 2**(bits-1)``).

    Raises:
        CompileError: the op has no accumulator (no ``acc_bound`` facet).
    """
    d = REGISTRY.get(node.op)
    if d is None or d.acc_bound is None:
        raise CompileError(f"node '{node.name}' ({node.op}): no accumulator bound")
    return d.acc_bound(node, graph)


def node_mult_plan(node: Node, graph: Graph, acc_width: int):
    """The :class:`~.requant.MultPlan` of a node whose requantize has ``mult != 1`` (else None)."""
    a = node.attrs
    if a.get("mult") in (None, 1):
        return None
    return mult_plan(a["mult"], a["shift"], a["round"], a["clip_lo"], a["clip_hi"],
                     acc_bound(node, graph), acc_width)


def cpu_reason(node: Node, graph: Graph) -> str:
    """Why a node without a VTA predicate runs on the CPU (its registry entry's reason)."""
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


def vta_support(node: Node, graph: Graph, config: VTAConfig, producers: dict[str, Node] | None = None
                ) -> tuple[bool, str]:
    """Can ``node`` run on VTA with ``config``? Returns ``(ok, reason)``.

    The checks every VTA op shares (the graph's widths are the core's, the batch is dim 0),
    then the op's own predicate from its registry entry (:data:`~.ops.REGISTRY`,
    :mod:`.placement`; a requantizing op's predicate checks its multiplier with
    :func:`~.placement.mult_why`); ops without one run on the CPU with the entry's reason.
    """
    d = REGISTRY.get(node.op)
    if d is None or d.vta is None:
        return False, cpu_reason(node, graph)
    why = _width_mismatch(node, graph, config, d) or _batch_mismatch(node, graph)
    if why:
        return False, why
    return d.vta(node, graph, config, producers)


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


def _width_mismatch(node: Node, graph: Graph, cfg: VTAConfig, d: OpDef) -> str | None:
    """Why the node's dtypes do not fit the core's widths (None when they do).  int8 graph
    on an int8 core: None; an int16 graph on a ``LOG_INP_WIDTH`` 4 core: conv/dense fit
    (their weights must have ``WGT_WIDTH`` bits), every other integer op runs on the CPU
    (ACC8 loads int8 values only).  A ``LOG_WGT_WIDTH`` 2 core (int4 weights, int8
    activations) takes conv/dense whose int8 weight constants all lie in ``[-8, 7]``
    (checked on the values) and every int8 element-wise op.  An int4 graph on a
    ``LOG_INP_WIDTH`` 2 core: conv/dense with int8 weights (``WGT_WIDTH`` 8) or weights in
    ``[-8, 7]`` (``WGT_WIDTH`` 4), and an op with an int4 form (its entry's ``int4`` facet:
    a tensor-tensor ``qadd`` as a GEMM); every other integer op runs on the CPU (ACC8 loads
    int8 values, not nibbles).  The weights are the input at the entry's ``weights``
    position (conv/dense)."""
    t = graph.types[node.inputs[0]]
    wname = node.inputs[d.weights] if d.weights is not None else None
    w = graph.types[wname] if wname is not None else None
    if t.dtype == "int4" and cfg.INP_WIDTH == 4:
        if w is not None:
            if cfg.WGT_WIDTH == 4 and not _int4_weights(wname, graph, cfg):
                return (f"{w.dtype} weights outside int4 [-8, 7] on a core with WGT_WIDTH 4: "
                        f"quantize for the core's widths")
            if w.dtype != "int8":
                return (f"{w.dtype} weights on a core with WGT_WIDTH {cfg.WGT_WIDTH}: "
                        f"quantize for the core's widths")
            return None
        return d.int4(node, graph, cfg) if d.int4 is not None else INT4_ELTWISE_WHY
    if cfg.WGT_WIDTH == 4 and cfg.INP_WIDTH == 8 and t.dtype == "int8":
        if w is not None and not _int4_weights(wname, graph, cfg):
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
