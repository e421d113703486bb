"""Float graph passes.

Each pass is an object with ``name`` and ``apply(graph) -> (graph, changed)``;
it returns a new graph (the input is not modified). :func:`run_passes` runs
the list to a fixpoint and calls :func:`~.ir.validate` after every pass
application, so a pass that breaks an invariant is caught at once, naming the
pass.

Passes (default order, :data:`DEFAULT_PASSES`):

* :class:`FoldConstants`: a node whose inputs are all constants is evaluated
  (with the float executor) and replaced by a constant.
* :class:`FoldBatchNorm`: ``conv2d -> batch_norm`` (the conv's only consumer)
  becomes one ``conv2d`` with ``w' = w * g/sqrt(v+eps)`` per output channel and
  ``b' = (b - mean) * g/sqrt(v+eps) + beta``. A batch_norm not after such a
  conv becomes ``mul`` + ``add`` by per-channel constants.
* :class:`FoldAffineIntoConv`: ``conv2d``/``dense`` followed by ``mul`` by a
  per-output-channel (or scalar) constant scales the weights and bias;
  followed by ``add`` of such a constant adds it to the bias.
* :class:`FuseActivation`: ``conv2d``/``dense``/``add`` followed by ``relu`` or
  ``clip`` (its only consumer) sets the producer's ``act``/``act_min``/``act_max``.
* :class:`DeadCode`: removes nodes and constants nothing uses.
"""

from __future__ import annotations

import numpy as np

from .errors import CompileError
from .ir import Graph, Node, validate
from .reference import _float_node

__all__ = ["FoldConstants", "FoldBatchNorm", "FoldAffineIntoConv", "FuseActivation", "DeadCode",
           "DEFAULT_PASSES", "run_passes", "optimize"]


def _sole_consumer(g: Graph, tensor: str) -> Node | None:
    if tensor in g.outputs:
        return None
    cons = g.consumers().get(tensor, [])
    return cons[0] if len(cons) == 1 else None


def _remove_and_rename(g: Graph, producer: Node, fused: Node) -> None:
    """Drop ``fused`` (the sole consumer of ``producer``); ``producer`` now writes ``fused``'s output."""
    old = producer.outputs[0]
    producer.outputs = list(fused.outputs)
    g.nodes.remove(fused)
    g.types.pop(old, None)


class FoldConstants:
    """Evaluate nodes whose inputs are all constants (float reference semantics) and
    replace their outputs with constants.  ``apply(graph) -> (new graph, changed)``; the
    input graph is not modified."""

    name = "fold-constants"

    def apply(self, graph: Graph) -> tuple[Graph, bool]:
        g = graph.copy()
        changed = False
        for node in list(g.nodes):
            if node.inputs and all(i in g.constants for i in node.inputs) and \
                    not any(o in g.outputs for o in node.outputs):
                vals = _float_node(node, [g.constants[i] for i in node.inputs], g)
                g.nodes.remove(node)
                for out, val in zip(node.outputs, vals):
                    g.types.pop(out, None)
                    if out in g.outputs:
                        raise CompileError(f"graph output '{out}' is a constant")
                    g.add_constant(out, np.asarray(val))
                changed = True
        return g, changed


def _per_channel(c: np.ndarray, rank: int, channels: int) -> np.ndarray | None:
    """Return ``c`` as a ``[channels]`` vector if it broadcasts along axis 1 only, else None."""
    if c.ndim > rank:
        return None
    shp = (1,) * (rank - c.ndim) + c.shape
    if any(d != 1 for i, d in enumerate(shp) if i != 1):
        return None
    if shp[1] not in (1, channels):
        return None
    return np.broadcast_to(c.reshape(-1), (channels,)).astype(np.float64)


def _with_bias(g: Graph, conv: Node) -> np.ndarray:
    w = g.constants[conv.inputs[1]]
    if len(conv.inputs) > 2:
        return g.constants[conv.inputs[2]].astype(np.float64)
    return np.zeros(w.shape[0], np.float64)


def _set_wb(g: Graph, conv: Node, w: np.ndarray, b: np.ndarray) -> None:
    wn = g.fresh(f"{conv.name}_w")
    bn = g.fresh(f"{conv.name}_b")
    g.add_constant(wn, w.astype(np.float32))
    g.add_constant(bn, b.astype(np.float32))
    conv.inputs = [conv.inputs[0], wn, bn]


class FoldBatchNorm:
    """Fold a ``batch_norm`` into the preceding ``conv2d`` (its sole consumer, no fused
    activation): ``w' = w * s``, ``b' = b * s + beta - mean * s`` with
    ``s = scale / sqrt(var + epsilon)``; otherwise rewrite it as ``mul`` + ``add`` by
    per-channel constants.  One rewrite per ``apply`` (returns ``(graph, changed)``).

    Raises:
        CompileError: batch-norm parameters that are not constants.
    """

    name = "fold-batchnorm"

    def apply(self, graph: Graph) -> tuple[Graph, bool]:
        g = graph.copy()
        prod = g.producers()
        for bn in list(g.nodes):
            if bn.op != "batch_norm":
                continue
            x, sc, beta, mean, var = bn.inputs
            if not all(i in g.constants for i in (sc, beta, mean, var)):
                raise CompileError(f"node '{bn.name}' (batch_norm): parameters must be constants")
            inv = g.constants[sc].astype(np.float64) / np.sqrt(
                g.constants[var].astype(np.float64) + bn.attrs["epsilon"])
            shift = g.constants[beta].astype(np.float64) - g.constants[mean] * inv
            conv = prod.get(x)
            if (conv is not None and conv.op == "conv2d" and conv.attrs.get("act") == "none"
                    and _sole_consumer(g, x) is bn and conv.inputs[1] in g.constants):
                w = g.constants[conv.inputs[1]].astype(np.float64)
                b = _with_bias(g, conv)
                _set_wb(g, conv, w * inv.reshape(-1, 1, 1, 1), b * inv + shift)
                _remove_and_rename(g, conv, bn)
            else:
                rank = g.types[x].rank
                shp = (-1,) + (1,) * (rank - 2)
                mn = g.fresh(f"{bn.name}_mul")
                an = g.fresh(f"{bn.name}_add")
                g.add_constant(mn, inv.astype(np.float32).reshape(shp))
                g.add_constant(an, shift.astype(np.float32).reshape(shp))
                mid = g.fresh(f"{bn.name}_scaled")
                i = g.nodes.index(bn)
                g.nodes[i:i + 1] = [
                    Node(g.fresh(f"{bn.name}_scale"), "mul", [x, mn], [mid], {}),
                    Node(g.fresh(f"{bn.name}_shift"), "add", [mid, an], list(bn.outputs),
                         {"act": "none", "act_min": None, "act_max": None}),
                ]
                g.types[mid] = g.types[x]
            return g, True
        return g, False


class FoldAffineIntoConv:
    """Fold a per-channel constant ``mul`` or ``add`` (no activation) that is the sole
    consumer of a ``conv2d``/``dense`` output into its weights and bias.  One rewrite per
    ``apply`` (returns ``(graph, changed)``)."""

    name = "fold-affine"

    def apply(self, graph: Graph) -> tuple[Graph, bool]:
        g = graph.copy()
        prod = g.producers()
        for node in g.nodes:
            if node.op not in ("mul", "add") or node.inputs[1] not in g.constants:
                continue
            if node.op == "add" and node.attrs.get("act") != "none":
                continue
            conv = prod.get(node.inputs[0])
            if (conv is None or conv.op not in ("conv2d", "dense") or conv.attrs.get("act") != "none"
                    or _sole_consumer(g, node.inputs[0]) is not node or conv.inputs[1] not in g.constants):
                continue
            w = g.constants[conv.inputs[1]].astype(np.float64)
            vec = _per_channel(g.constants[node.inputs[1]], g.types[node.inputs[0]].rank, w.shape[0])
            if vec is None:
                continue
            b = _with_bias(g, conv)
            if node.op == "mul":
                _set_wb(g, conv, w * vec.reshape((-1,) + (1,) * (w.ndim - 1)), b * vec)
            else:
                _set_wb(g, conv, w, b + vec)
            _remove_and_rename(g, conv, node)
            return g, True
        return g, False


class FuseActivation:
    """Fuse a ``relu``/``clip`` into its producer (``conv2d``, ``dense`` or ``add``, sole
    consumer) as the producer's ``act``/``act_min``/``act_max`` attributes (intersecting
    ranges when one is already fused).  ``apply(graph) -> (graph, changed)``."""

    name = "fuse-activation"

    def apply(self, graph: Graph) -> tuple[Graph, bool]:
        g = graph.copy()
        prod = g.producers()
        for act in g.nodes:
            if act.op not in ("relu", "clip"):
                continue
            p = prod.get(act.inputs[0])
            if p is None or p.op not in ("conv2d", "dense", "add") or _sole_consumer(g, act.inputs[0]) is not act:
                continue
            cur = p.attrs.get("act", "none")
            lo = p.attrs.get("act_min") if cur == "clip" else (0.0 if cur == "relu" else None)
            hi = p.attrs.get("act_max") if cur == "clip" else None
            nlo, nhi = (0.0, None) if act.op == "relu" else (act.attrs["min"], act.attrs["max"])
            lo = nlo if lo is None else (lo if nlo is None else max(lo, nlo))
            hi = nhi if hi is None else (hi if nhi is None else min(hi, nhi))
            if lo == 0.0 and hi is None:
                p.attrs.update(act="relu", act_min=None, act_max=None)
            else:
                p.attrs.update(act="clip", act_min=lo, act_max=hi)
            _remove_and_rename(g, p, act)
            return g, True
        return g, False


class DeadCode:
    """Remove nodes and constants that no graph output depends on.
    ``apply(graph) -> (graph, changed)``."""

    name = "dead-code"

    def apply(self, graph: Graph) -> tuple[Graph, bool]:
        g = graph.copy()
        changed = False
        while True:
            used = set(g.outputs) | {i for n in g.nodes for i in n.inputs}
            dead = [n for n in g.nodes if not any(o in used for o in n.outputs)]
            if not dead:
                break
            for n in dead:
                g.nodes.remove(n)
                for o in n.outputs:
                    g.types.pop(o, None)
            changed = True
        for c in [c for c in g.constants if c not in used]:
            del g.constants[c]
            del g.types[c]
            changed = True
        return g, changed


DEFAULT_PASSES = (FoldConstants(), FoldBatchNorm(), FoldAffineIntoConv(), FuseActivation(), DeadCode())


def run_passes(graph: Graph, passes=DEFAULT_PASSES, *, max_rounds: int = 1000) -> Graph:
    """Run ``passes`` in order, repeatedly, until none changes the graph.

    The validator runs after each pass application; an invalid result raises
    :class:`CompileError` naming the pass. Returns the final graph.
    """
    validate(graph)
    for _ in range(max_rounds):
        any_change = False
        for p in passes:
            graph, changed = p.apply(graph)
            if changed:
                try:
                    validate(graph)
                except CompileError as e:
                    raise CompileError(f"after pass {p.name}: {e}") from None
                any_change = True
        if not any_change:
            return graph
    raise CompileError(f"passes did not reach a fixpoint in {max_rounds} rounds")


def optimize(graph: Graph) -> Graph:
    """The default float pipeline: :func:`run_passes` with :data:`DEFAULT_PASSES`."""
    return run_passes(graph, DEFAULT_PASSES)
