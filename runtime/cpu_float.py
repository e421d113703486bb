"""Float CPU kernels of the executor: the real-valued IR ops and ONNX nodes kept as is.

BYOC fallback: a node the quantizer cannot express in int8 stays a float IR op
(``conv2d``, ``dense``, ``add``, ``mul``, ``max_pool``, ``avg_pool`` ...), and an ONNX node
with no IR conversion stays an ``onnx`` node; both run on the host between a
``dequantize`` and a ``quantize`` (the compiler places those boundaries).  This module
runs them with numpy, or, for ``onnx`` nodes without a numpy kernel, on onnxruntime
(:mod:`.float_ops`; onnxruntime is optional and imported only when such a node runs).

The IR float semantics are those of ``compiler/ir.py`` (NCHW, OIHW weights, fused
``act``); :func:`run_float_op` computes in float32 like onnxruntime, float64 where a sum
needs it.  Numpy only at import, like the rest of the runtime.
"""

from __future__ import annotations

import base64

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view

__all__ = ["REAL_OPS", "FLOAT_KERNELS", "run_float_op", "run_onnx_node", "onnx_backend", "conv2d_nchw"]


def _pad(x: np.ndarray, pads, value) -> np.ndarray:
    pt, pl, pb, pr = pads
    if not any(pads):
        return x
    return np.pad(x, ((0, 0), (0, 0), (pt, pb), (pl, pr)), constant_values=value)


def _windows(x: np.ndarray, kernel, strides) -> np.ndarray:
    """``[N,C,Ho,Wo,kh,kw]`` view of the (already padded) input."""
    kh, kw = kernel
    sh, sw = strides
    return sliding_window_view(x, (kh, kw), axis=(2, 3))[:, :, ::sh, ::sw]


def conv2d_nchw(x: np.ndarray, w: np.ndarray, strides, pads, groups: int, dtype=np.float64) -> np.ndarray:
    """Direct 2-D convolution (cross-correlation), NCHW x OIHW -> NCHW.

    ``x`` [N,C,H,W], ``w`` [O, C/groups, kh, kw]; zero padding
    ``pads=(top,left,bottom,right)``.  Computed as a GEMM over im2col windows in ``dtype``
    (float64 is exact for int8 operands up to a reduction length of 2**39; float32 is
    what onnxruntime computes).
    """
    n, c, _, _ = x.shape
    o, cg, kh, kw = w.shape
    xw = _windows(_pad(x.astype(dtype), pads, 0.0), (kh, kw), strides)
    ho, wo = xw.shape[2], xw.shape[3]
    g = groups
    og = o // g
    if g == 1:
        cols = xw.transpose(0, 2, 3, 1, 4, 5).reshape(n * ho * wo, c * kh * kw)
        out = (cols @ w.reshape(o, -1).astype(dtype).T)[None]  # [1, NHW, O]
    else:
        cols = xw.reshape(n, g, cg, ho, wo, kh, kw).transpose(1, 0, 3, 4, 2, 5, 6).reshape(
            g, n * ho * wo, cg * kh * kw)
        wm = w.astype(dtype).reshape(g, og, cg * kh * kw)
        out = np.einsum("gpk,gok->gpo", cols, wm, optimize=og > 1)  # [G, NHW, Og]
    return out.reshape(g, n, ho, wo, og).transpose(1, 0, 4, 2, 3).reshape(n, o, ho, wo)


def _act(y: np.ndarray, a: dict) -> np.ndarray:
    act = a.get("act", "none")
    if act == "relu":
        return np.maximum(y, 0)
    if act == "clip":
        lo = -np.inf if a.get("act_min") is None else a["act_min"]
        hi = np.inf if a.get("act_max") is None else a["act_max"]
        return np.clip(y, lo, hi)
    return y


def _avg_pool(x, a):
    kh, kw = a["kernel"]
    s = _windows(_pad(x.astype(np.float64), a["pads"], 0.0), (kh, kw), a["strides"]).sum(axis=(-2, -1))
    if a["count_include_pad"] or not any(a["pads"]):
        return s / (kh * kw)
    ones = np.ones((1, 1) + x.shape[2:])
    cnt = _windows(_pad(ones, a["pads"], 0.0), (kh, kw), a["strides"]).sum(axis=(-2, -1))
    return s / cnt


def _softmax(x, axis):
    x = x.astype(np.float64)
    e = np.exp(x - x.max(axis=axis, keepdims=True))
    return (e / e.sum(axis=axis, keepdims=True)).astype(np.float32)


def _fake_quant(x, a):
    s = np.asarray(a["scale"], dtype=np.float64)
    zp = np.asarray(a["zero_point"], dtype=np.float64)
    if s.ndim == 1:
        shp = [1] * x.ndim
        shp[a.get("axis", 1)] = -1
        s, zp = s.reshape(shp), zp.reshape(shp)
    q = np.clip(np.rint(x / s) + zp, a["qmin"], a["qmax"])
    return (q - zp) * s


def _batch_norm(x, sc, b, m, v, eps):
    shp = (1, -1) + (1,) * (x.ndim - 2)
    inv = sc.astype(np.float64) / np.sqrt(v.astype(np.float64) + eps)
    return (x - m.reshape(shp)) * inv.reshape(shp) + b.reshape(shp)


def _conv2d(a, x):
    y = conv2d_nchw(x[0], x[1], a["strides"], a["pads"], a["groups"], np.float32)
    return _act(y + x[2].reshape(1, -1, 1, 1) if len(x) > 2 else y, a)


def _dense(a, x):
    y = x[0].astype(np.float32) @ x[1].astype(np.float32).T
    return _act(y + x[2] if len(x) > 2 else y, a)


#: ``IR op -> kernel(attrs, inputs)`` for the real-valued IR ops (:data:`REAL_OPS`).
FLOAT_KERNELS = {
    "conv2d": _conv2d,
    "dense": _dense,
    "relu": lambda a, x: np.maximum(x[0], 0),
    "clip": lambda a, x: _act(x[0], {"act": "clip", "act_min": a["min"], "act_max": a["max"]}),
    "add": lambda a, x: _act(x[0].astype(np.float64) + x[1], a),
    "mul": lambda a, x: x[0].astype(np.float64) * x[1],
    "batch_norm": lambda a, x: _batch_norm(*x, a["epsilon"]),
    "max_pool": lambda a, x: _windows(_pad(x[0], a["pads"], -np.inf), a["kernel"], a["strides"]).max(axis=(-2, -1)),
    "avg_pool": lambda a, x: _avg_pool(x[0], a),
    "global_avg_pool": lambda a, x: x[0].astype(np.float64).mean(axis=(2, 3), keepdims=True),
    "fake_quant": lambda a, x: _fake_quant(x[0], a),
    "softmax": lambda a, x: _softmax(x[0], a["axis"]),
}
#: IR float ops with a kernel here (``compiler.ir.REAL_OPS`` plus softmax).
REAL_OPS = frozenset(FLOAT_KERNELS)


def run_float_op(op: str, attrs: dict, x: list) -> np.ndarray:
    """Run one real-valued IR op (:data:`REAL_OPS`) with its kernel from
    :data:`FLOAT_KERNELS` on float32 arrays.

    Args:
        op: the IR op; attrs: its attributes (``compiler/ir.py``); x: input arrays in the
            node's order (activations and constants).
    Returns:
        float32 array.
    Raises:
        ValueError: ``op`` is not a real-valued IR op.
    """
    k = FLOAT_KERNELS.get(op)
    if k is None:
        raise ValueError(f"no float CPU kernel for IR op {op!r}")
    return np.asarray(k(attrs, x), dtype=np.float32)


# ------------------------------------------------------------------ ONNX nodes kept as is
def onnx_backend(attrs: dict) -> tuple[str, str]:
    """``("numpy", "")`` when an ``onnx`` node has a numpy kernel, else
    ``("onnxruntime", reason)``: which CPU backend runs it."""
    from .float_ops import numpy_supports

    ok, why = numpy_supports(attrs["op_type"], attrs["onnx_attrs"], int(attrs["opset"])) \
        if attrs.get("domain", "") in ("", "ai.onnx") else (False, f"domain {attrs['domain']!r}")
    return ("numpy", "") if ok else ("onnxruntime", why)


def run_onnx_node(attrs: dict, inputs: list, backend: str | None = None) -> list[np.ndarray]:
    """Run an ``onnx`` IR node (an ONNX node kept as is) on the host.

    Args:
        attrs: the node's attributes (``op_type``, ``domain``, ``opset``, ``onnx_attrs``,
            ``in_slots``: the ONNX input position of each given input, ``out_slots``: the
            ONNX output position of each IR output, ``out_types``, ``model``: base64 of a
            one-node ONNX model for onnxruntime).
        inputs: arrays, one per IR input.
        backend: ``"numpy"`` or ``"onnxruntime"``; default: numpy when it has a kernel.
    Returns:
        one array per IR output, in the declared dtypes.
    Raises:
        float_common.CpuKernelError: no kernel, onnxruntime missing, bad input.
    """
    from . import float_ops

    if backend is None:
        backend = onnx_backend(attrs)[0]
    if backend == "numpy":
        slots = list(attrs["in_slots"])
        full: list = [None] * (max(slots) + 1 if slots else 0)
        for pos, v in zip(slots, inputs):
            full[pos] = v
        outs = float_ops.run_numpy(attrs["op_type"], attrs["onnx_attrs"], full, int(attrs["opset"]))
        oslots = attrs.get("out_slots") or list(range(len(attrs["out_types"])))
        outs = [outs[k] for k in oslots]
    else:
        outs = float_ops.run_onnxruntime(base64.b64decode(attrs["model"]), list(inputs))
    res = []
    for v, (dt, _shape) in zip(outs, attrs["out_types"]):
        res.append(np.asarray(v).astype(dt, copy=False))
    return res
