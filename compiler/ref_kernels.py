"""The integer reference kernels: one numpy function per quantized op, the ``reference``
facet of its registry entry (:data:`~.ops.REGISTRY`), and one per layout op, which moves
data of any dtype and so runs in float and quantized graphs alike.

Every kernel is ``(node, inputs, graph) -> array``: ``inputs`` are the node's input arrays
in order (activations and constants), the result is the output in the node's output
dtype.  They follow the integer rules of the :mod:`.ir` docstring literally and share no
code with the lowering / packing / VTA path: :func:`~.reference.run_quantized` runs them as
the oracle VTA results are compared against bit for bit (:mod:`.reference` gives the
exactness argument for the float64 sums).  This module imports no dispatcher (``ops``,
``reference``): the registry imports it.
"""

from __future__ import annotations

import numpy as np

from ..runtime.cpu_float import _pad, _windows, conv2d_nchw
from .errors import CompileError
from .ir import Graph, Node, qrange, storage_dtype

__all__ = ["requantize", "conv2d_nchw", "layout_flatten", "layout_reshape", "layout_transpose",
           "layout_concat", "layout_upsample", "layout_pad", "ref_quantize", "ref_dequantize",
           "ref_qconv2d", "ref_qdense", "ref_qadd", "ref_qmul", "ref_qrequant", "ref_qmax_pool",
           "ref_qavg_pool"]


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


def layout_flatten(node: Node, x: list[np.ndarray], graph: Graph) -> np.ndarray:
    """``flatten``: ``[d0, ..., dk, ...] -> [d0*...*d(axis-1), rest]``."""
    a = node.attrs
    ax = a["axis"] if a["axis"] >= 0 else a["axis"] + x[0].ndim
    return x[0].reshape(int(np.prod(x[0].shape[:ax], dtype=np.int64)), -1)


def layout_reshape(node: Node, x: list[np.ndarray], graph: Graph) -> np.ndarray:
    """``reshape`` to ``shape`` (ONNX: 0 copies the input dim, -1 is inferred)."""
    tgt = [x[0].shape[i] if d == 0 else d for i, d in enumerate(node.attrs["shape"])]
    return x[0].reshape(tgt)


def layout_transpose(node: Node, x: list[np.ndarray], graph: Graph) -> np.ndarray:
    """``transpose`` by ``perm``."""
    return np.transpose(x[0], node.attrs["perm"])


def layout_concat(node: Node, x: list[np.ndarray], graph: Graph) -> np.ndarray:
    """``concat`` of every input along ``axis``."""
    return np.concatenate(x, axis=node.attrs["axis"])


def layout_upsample(node: Node, x: list[np.ndarray], graph: Graph) -> np.ndarray:
    """``upsample``: NCHW nearest neighbour, each pixel repeated ``scales = (sh, sw)`` times."""
    sh, sw = node.attrs["scales"]
    return np.repeat(np.repeat(x[0], sh, axis=2), sw, axis=3)


def layout_pad(node: Node, x: list[np.ndarray], graph: Graph) -> np.ndarray:
    """``pad``: NCHW zero padding ``pads = (top, left, bottom, right)``."""
    pt, pl, pb, pr = node.attrs["pads"]
    return np.pad(x[0], ((0, 0), (0, 0), (pt, pb), (pl, pr)))


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
