"""Reference executors: the independent integer oracle and a float executor.

:func:`run_quantized` executes a quantized graph (see :mod:`.ir`) with plain
numpy integer arithmetic, NCHW, following the integer rules of the
:mod:`.ir` docstring literally. It shares no code with the lowering / packing
/ VTA path of the back half: it is the oracle the VTA results are compared
against bit for bit.  Real-valued nodes the BYOC fallback keeps on the CPU (float IR ops,
``onnx`` nodes) run with the runtime's float kernels (``runtime/cpu_float.py``,
``runtime/float_ops.py``), which are tested against onnxruntime on their own.

Exactness note: the convolution / dense sums are formed with a float64 BLAS
matrix product of int8 (or int16) values and then converted to int64. This is exact:
each product is at most 128*128 = 2**14 (int16: 2**30) in magnitude, and every partial
sum of K products is an integer of magnitude <= K * 2**14 < 2**53 for any
K < 2**39 (int16: K < 2**23), so float64 represents every intermediate exactly (checked
at run time).  Every quantized tensor keeps its dtype (int8, or int16 in a graph quantized
with ``act_bits`` / ``wgt_bits`` 16; the logical int4 of ``act_bits`` 4 is held in int8
arrays, :func:`~.ir.storage_dtype`); clips and the max-pool padding use that dtype's
range (int4: ``[-8, 7]``). Everything after the sum (bias, multiplier, rounding, shifts, clips,
pooling, adds) is int64; the quantizer proves every product ``acc * mult``
fits int32, so int64 and VTA's wrapping 32-bit ALU agree.

Non-power-of-two scales (``TensorType.scale``, QDQ models with
``exact_multiply``): ``quantize`` computes ``floor(x * 2.0**-e + 0.5)`` and
``dequantize`` ``q * 2.0**e`` with ``e = TensorType.scale_exp`` (float
``log2(scale)``), the same float64 expression the runtime's CPU kernels
evaluate, so both agree bit for bit.

:func:`run_float` executes a float graph (the frontend's IR, before or after
the float passes) in float32/float64 numpy; it is used to check the frontend
against onnxruntime and to calibrate the quantizer.
"""

from __future__ import annotations

import numpy as np

from ..runtime.cpu_float import REAL_OPS, _pad, _windows, conv2d_nchw, run_float_op, run_onnx_node
from .errors import CompileError, node_error
from .ir import LAYOUT_OPS, Graph, Node, qrange, storage_dtype

__all__ = ["run_float", "run_quantized", "conv2d_nchw", "requantize"]


# ---------------------------------------------------------------------------
# Kernels
# ---------------------------------------------------------------------------

def _int_sum_check(k: int, x: np.ndarray | None = None, w: np.ndarray | None = None) -> None:
    bits = sum(8 * (a.dtype.itemsize if a is not None else 1) - 1 for a in (x, w))
    if k * (1 << bits) >= (1 << 53):
        raise CompileError(f"reduction length {k} too long for an exact float64 integer sum")


def requantize(acc: np.ndarray, attrs: dict, dtype: str = "int8") -> np.ndarray:
    """The requantize rule of :mod:`.ir`, int64: ``*mult``, ``(+round) >> shift`` or ``<< -shift``,
    clip; the result as ``dtype`` (the node's output dtype, int8 or int16).  ``shift`` /
    ``round`` may be tuples, one per channel of ``acc``'s axis 1 (per-channel weights)."""
    acc = acc.astype(np.int64)
    if attrs["mult"] != 1:
        acc = acc * np.int64(attrs["mult"])
    s = attrs["shift"]
    if isinstance(s, tuple):    # per output channel (axis 1): ir "Per-channel weights"
        shp = (1, len(s)) + (1,) * (acc.ndim - 2)
        sv = np.asarray(s, np.int64).reshape(shp)
        rv = np.asarray(attrs["round"], np.int64).reshape(shp)
        acc = np.where(sv > 0, (acc + rv) >> np.maximum(sv, 0), acc << np.maximum(-sv, 0))
    elif s > 0:
        acc = (acc + np.int64(attrs["round"])) >> np.int64(s)
    elif s < 0:
        acc = acc << np.int64(-s)
    return np.clip(acc, attrs["clip_lo"], attrs["clip_hi"]).astype(storage_dtype(dtype))


def _odt(node: Node, graph: Graph) -> str:
    return graph.types[node.outputs[0]].dtype


def _layout(node: Node, x: list[np.ndarray], graph: Graph) -> np.ndarray:
    a = node.attrs
    if node.op == "flatten":
        ax = a["axis"] if a["axis"] >= 0 else a["axis"] + x[0].ndim
        return x[0].reshape(int(np.prod(x[0].shape[:ax], dtype=np.int64)), -1)
    if node.op == "reshape":
        tgt = [x[0].shape[i] if d == 0 else d for i, d in enumerate(a["shape"])]
        return x[0].reshape(tgt)
    if node.op == "transpose":
        return np.transpose(x[0], a["perm"])
    if node.op == "concat":
        return np.concatenate(x, axis=a["axis"])
    if node.op == "upsample":
        return np.repeat(np.repeat(x[0], a["scales"][0], axis=2), a["scales"][1], axis=3)
    if node.op == "pad":
        pt, pl, pb, pr = a["pads"]
        return np.pad(x[0], ((0, 0), (0, 0), (pt, pb), (pl, pr)))
    raise AssertionError(node.op)


# ---------------------------------------------------------------------------
# Float executor
# ---------------------------------------------------------------------------

def _float_node(node: Node, x: list[np.ndarray], graph: Graph) -> list[np.ndarray]:
    """Outputs of one node of a float graph (or a real-valued node of a quantized graph)."""
    if node.op == "onnx":
        return run_onnx_node(node.attrs, x)
    if node.op in LAYOUT_OPS:
        return [_layout(node, x, graph)]
    if node.op in REAL_OPS:
        return [run_float_op(node.op, node.attrs, x)]
    raise node_error(node.name, node.op, "the float executor cannot run this op")


def run_float(graph: Graph, feeds: dict[str, np.ndarray], *, keep_all: bool = False
              ) -> dict[str, np.ndarray]:
    """Run a float graph on concrete inputs.

    Args:
        graph: a ``kind == "float"`` graph.
        feeds: ``input name -> float32 array`` (shapes must match the input types,
            symbolic dims take any size).
        keep_all: return every tensor, not only the graph outputs.
    Returns:
        ``name -> float32 array``.
    """
    if graph.kind != "float":
        raise CompileError(f"run_float needs a float graph, got a {graph.kind} graph")
    env = _bind(graph, feeds)
    for node in graph.nodes:
        for o, y in zip(node.outputs, _float_node(node, [env[i] for i in node.inputs], graph)):
            env[o] = np.asarray(y)
    names = env.keys() if keep_all else graph.outputs
    return {k: env[k] for k in names}


def _bind(graph: Graph, feeds) -> dict[str, np.ndarray]:
    env = dict(graph.constants)
    for i in graph.inputs:
        if i not in feeds:
            raise CompileError(f"graph '{graph.name}': missing input {i!r}")
        v = np.asarray(feeds[i])
        t = graph.types[i]
        if v.ndim != t.rank or any(isinstance(d, int) and d != s for d, s in zip(t.shape, v.shape)):
            raise CompileError(f"graph '{graph.name}': input {i!r} has shape {list(v.shape)}, "
                               f"expected {list(t.shape)}")
        env[i] = v.astype(np.float32) if t.dtype == "float32" else v
    return env


# ---------------------------------------------------------------------------
# Integer executor (the oracle)
# ---------------------------------------------------------------------------

def ref_quantize(node: Node, x: list[np.ndarray], graph: Graph) -> np.ndarray:
    """``quantize``: ``clip(floor(x * 2**-e + 0.5), lo, hi)``, ``e`` the output's scale exp
    (per channel of axis 1 for a per-channel activation: its ``channel_exps``),
    ``[lo, hi]`` the output dtype's range (int8 ``[-128, 127]``, int16 ``[-32768, 32767]``)."""
    t = graph.types[node.outputs[0]]
    e = t.scale_exp
    if t.channel_exps is not None:      # per-channel activation: channel c at its own exp
        e = np.asarray(t.channel_exps, np.float64).reshape(1, -1, 1, 1)
    q = np.floor(x[0].astype(np.float64) * 2.0 ** (-e) + 0.5)
    lo, hi = qrange(t.dtype)
    return np.clip(q, lo, hi).astype(storage_dtype(t.dtype))


def ref_dequantize(node: Node, x: list[np.ndarray], graph: Graph) -> np.ndarray:
    """``dequantize``: ``q * 2**e``, ``e`` the input's scale exp."""
    e = graph.types[node.inputs[0]].scale_exp
    return (x[0].astype(np.float64) * 2.0 ** e).astype(np.float32)


def ref_qconv2d(node: Node, x: list[np.ndarray], graph: Graph) -> np.ndarray:
    """``qconv2d``: exact int64 cross-correlation + bias, then requantize."""
    a, w = node.attrs, x[1]
    _int_sum_check(w.shape[1] * w.shape[2] * w.shape[3], x[0], w)
    acc = np.rint(conv2d_nchw(x[0], w, a["strides"], a["pads"], a["groups"])).astype(np.int64)
    return requantize(acc + x[2].astype(np.int64).reshape(1, -1, 1, 1), a, _odt(node, graph))


def ref_qdense(node: Node, x: list[np.ndarray], graph: Graph) -> np.ndarray:
    """``qdense``: ``x @ w.T + bias`` (exact), then requantize."""
    _int_sum_check(x[1].shape[1], x[0], x[1])
    acc = np.rint(x[0].astype(np.float64) @ x[1].astype(np.float64).T).astype(np.int64)
    return requantize(acc + x[2].astype(np.int64), node.attrs, _odt(node, graph))


def ref_qadd(node: Node, x: list[np.ndarray], graph: Graph) -> np.ndarray:
    """``qadd``: ``(a << lshift_a) + (b << lshift_b)``, then requantize."""
    a = node.attrs
    acc = (x[0].astype(np.int64) << np.int64(a["lshift_a"])) + (
        x[1].astype(np.int64) << np.int64(a["lshift_b"]))
    return requantize(acc, a, _odt(node, graph))


def ref_qmul(node: Node, x: list[np.ndarray], graph: Graph) -> np.ndarray:
    """``qmul``: ``x * c``, then requantize."""
    return requantize(x[0].astype(np.int64) * x[1].astype(np.int64), node.attrs, _odt(node, graph))


def ref_qrequant(node: Node, x: list[np.ndarray], graph: Graph) -> np.ndarray:
    """``qrequant``: requantize alone."""
    return requantize(x[0].astype(np.int64), node.attrs, _odt(node, graph))


def ref_qmax_pool(node: Node, x: list[np.ndarray], graph: Graph) -> np.ndarray:
    """``qmax_pool``: window max with the dtype's minimum as padding (int8 -128)."""
    a = node.attrs
    dt = _odt(node, graph)
    xp = _pad(x[0].astype(np.int64), a["pads"], qrange(dt)[0])
    return _windows(xp, a["kernel"], a["strides"]).max(axis=(-2, -1)).astype(storage_dtype(dt))


def ref_qavg_pool(node: Node, x: list[np.ndarray], graph: Graph) -> np.ndarray:
    """``qavg_pool``: window sum, rounding division (or its exact fixed-point reciprocal)."""
    a = node.attrs
    xp = _pad(x[0].astype(np.int64), a["pads"], 0)
    acc = _windows(xp, a["kernel"], a["strides"]).sum(axis=(-2, -1), dtype=np.int64)
    d = np.int64(a["divisor"])
    if a.get("mult") is not None and a["divisor"] & (a["divisor"] - 1):
        # the fixed-point reciprocal rule (exact for every int8 window sum: ir.validate)
        y = (acc * np.int64(a["mult"]) + np.int64(a["round"])) >> np.int64(a["shift"])
    else:
        y = np.floor_divide(2 * acc + d, 2 * d)
    return np.clip(y, a["clip_lo"], a["clip_hi"]).astype(storage_dtype(_odt(node, graph)))


def ref_layout(node: Node, x: list[np.ndarray], graph: Graph) -> np.ndarray:
    """``flatten`` / ``reshape`` / ``transpose`` / ``concat``: data movement only."""
    return _layout(node, x, graph)


def _q_node(node: Node, x: list[np.ndarray], graph: Graph) -> np.ndarray:
    from .ops import REGISTRY

    d = REGISTRY.get(node.op)
    if d is None or d.reference is None:
        raise node_error(node.name, node.op, "the integer reference cannot run this op")
    return d.reference(node, x, graph)


def run_quantized(graph: Graph, feeds: dict[str, np.ndarray], *, keep_all: bool = False
                  ) -> dict[str, np.ndarray]:
    """Run a quantized graph with numpy integer arithmetic (the bit-exact oracle).

    Args:
        graph: a ``kind == "quantized"`` graph (:func:`vtaforge.compiler.quantize.quantize`).
        feeds: ``input name -> float32 array`` (the graph's ``quantize`` nodes
            convert them to int8).
        keep_all: also return every intermediate tensor (int8 activations,
            e.g. ``"logits_q"``), for bit-for-bit comparison with VTA.
    Returns:
        ``name -> array`` (int8 for quantized tensors, float32 for dequantized).
    """
    if graph.kind != "quantized":
        raise CompileError(f"run_quantized needs a quantized graph, got a {graph.kind} graph")
    env = _bind(graph, feeds)
    for node in graph.nodes:
        ins = [env[i] for i in node.inputs]
        if node.op == "onnx" or node.op in REAL_OPS:   # real-valued CPU nodes (BYOC fallback)
            for o, y in zip(node.outputs, _float_node(node, ins, graph)):
                env[o] = np.asarray(y)
        else:
            env[node.outputs[0]] = _q_node(node, ins, graph)
    names = env.keys() if keep_all else graph.outputs
    return {k: env[k] for k in names}
