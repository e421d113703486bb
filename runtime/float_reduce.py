"""Host-CPU numpy kernels of the reducing and normalising ONNX ops: the ``Reduce*`` family,
``ArgMax`` / ``ArgMin``, ``Softmax`` / ``LogSoftmax`` / ``Hardmax``, batch, instance, layer,
RMS, group, Lp and mean-variance normalisation and the global pools (conventions:
:mod:`.float_ops`).  :data:`KERNELS`: op type -> kernel.
"""

from __future__ import annotations

import math
from typing import Callable

import numpy as np

from .float_common import ONNX_DTYPES, CpuKernelError, Kernel, _as, _axis, _fl, _inp, _ints, _req


def _reduce_axes(a: dict, ins: list, opset: int, input_from: int, rank: int) -> tuple | None:
    """Axes to reduce (a tuple) or None for 'identity' (noop_with_empty_axes and no axes)."""
    if opset >= input_from:
        axes = _ints(ins[1]) if _inp(ins, 1) is not None else []
        noop = a.get("noop_with_empty_axes", 0)
    else:
        axes, noop = list(a.get("axes", [])), 0
    if not axes:
        return None if noop else tuple(range(rank))
    return tuple(sorted({_axis(int(v), rank, "Reduce") for v in axes}))


def _r_max(x, ax, kd):
    if x.dtype == np.bool_:
        return np.any(x, axis=ax, keepdims=kd)
    init = -np.inf if x.dtype.kind == "f" else np.iinfo(x.dtype).min
    return np.max(x, axis=ax, keepdims=kd, initial=init)


def _r_min(x, ax, kd):
    if x.dtype == np.bool_:
        return np.all(x, axis=ax, keepdims=kd)
    init = np.inf if x.dtype.kind == "f" else np.iinfo(x.dtype).max
    return np.min(x, axis=ax, keepdims=kd, initial=init)


def _r_sum(x, ax, kd):
    return np.sum(x, axis=ax, keepdims=kd, dtype=np.float64 if x.dtype.kind == "f" else x.dtype)


def _r_mean(x, ax, kd):
    n = math.prod(x.shape[i] for i in ax)
    s = _r_sum(x, ax, kd)
    return s / n if x.dtype.kind == "f" else (np.trunc(s / n) if n else s)


def _r_logsumexp(x, ax, kd):
    xf = x.astype(np.float64)
    m = np.max(xf, axis=ax, keepdims=True, initial=-np.inf)
    m = np.where(np.isfinite(m), m, 0.0)
    y = np.log(np.sum(np.exp(xf - m), axis=ax, keepdims=True)) + m
    return y if kd else np.squeeze(y, axis=ax)


_REDUCE: dict[str, tuple[Callable, int]] = {
    "ReduceMax": (_r_max, 18), "ReduceMin": (_r_min, 18), "ReduceSum": (_r_sum, 13),
    "ReduceMean": (_r_mean, 18),
    "ReduceProd": (lambda x, ax, kd: np.prod(x, axis=ax, keepdims=kd,
                                            dtype=np.float64 if x.dtype.kind == "f" else x.dtype), 18),
    "ReduceL1": (lambda x, ax, kd: _r_sum(np.abs(x), ax, kd), 18),
    "ReduceL2": (lambda x, ax, kd: np.sqrt(_r_sum(x.astype(np.float64) ** 2, ax, kd)), 18),
    "ReduceSumSquare": (lambda x, ax, kd: _r_sum(x * x if x.dtype.kind != "f" else x.astype(np.float64) ** 2,
                                                ax, kd), 18),
    "ReduceLogSum": (lambda x, ax, kd: np.log(_r_sum(x.astype(np.float64), ax, kd)), 18),
    "ReduceLogSumExp": (_r_logsumexp, 18),
}


def _reduce(name: str) -> Kernel:
    fn, input_from = _REDUCE[name]

    def k(a, ins, opset):
        x = ins[0]
        axes = _reduce_axes(a, ins, opset, input_from, x.ndim)
        if axes is None:
            return [x]
        kd = bool(a.get("keepdims", 1))
        y = fn(x, axes, kd)
        if x.dtype.kind in "iu" and np.asarray(y).dtype.kind == "f":
            y = np.trunc(y)
        return [_as(y, x.dtype)]
    return k


def _arg(fn: Callable) -> Kernel:
    def k(a, ins, opset):
        x = ins[0]
        ax = _axis(a.get("axis", 0), x.ndim, "ArgMax/ArgMin")
        if x.shape[ax] == 0:
            raise CpuKernelError("ArgMax/ArgMin over an empty axis")
        if a.get("select_last_index", 0):
            i = x.shape[ax] - 1 - fn(np.flip(x, ax), axis=ax)
        else:
            i = fn(x, axis=ax)
        if a.get("keepdims", 1):
            i = np.expand_dims(i, ax)
        return [np.asarray(i, dtype=np.int64)]
    return k


def _softmax_kind(kind: str) -> Kernel:
    def core(x, ax):
        if kind == "hard":
            i = np.argmax(x, axis=ax)
            return (np.arange(x.shape[ax]).reshape((-1,) + (1,) * (x.ndim - ax - 1)) == np.expand_dims(i, ax))
        m = np.max(x, axis=ax, keepdims=True)
        m = np.where(np.isfinite(m), m, 0)
        z = x - m
        e = np.exp(z)
        s = np.sum(e, axis=ax, keepdims=True)
        return z - np.log(s) if kind == "log" else e / s

    def k(a, ins, opset):
        x = ins[0]
        xf = _fl(x)
        if opset < 13:
            ax = a.get("axis", 1)
            ax = ax + x.ndim if ax < 0 else ax
            if not 0 <= ax <= x.ndim:
                raise CpuKernelError(f"softmax axis {a.get('axis', 1)} out of range for rank {x.ndim}")
            shp2 = (math.prod(x.shape[:ax]), math.prod(x.shape[ax:]))
            y = core(xf.reshape(shp2), 1).reshape(x.shape)
        else:
            y = core(xf, _axis(a.get("axis", -1), x.ndim, "softmax"))
        return [_as(y, x.dtype)]
    return k


def _chan(p: np.ndarray, rank: int) -> np.ndarray:
    """Per-channel parameter ``[C]`` -> ``[1, C, 1, ...]``; an N-D parameter gets a leading 1."""
    p = np.asarray(p)
    return p.reshape((1, -1) + (1,) * (rank - 2)) if p.ndim == 1 else p.reshape((1,) + p.shape)


def _batchnorm(a, ins, opset):
    x, scale, b, mean, var = ins[:5]
    eps = a.get("epsilon", 1e-5)
    r = x.ndim
    xf = x.astype(np.float32) if x.dtype == np.float16 else x
    if opset >= 14 and a.get("training_mode", 0):
        axes = (0,) + tuple(range(2, r))
        bm = xf.mean(axis=axes, dtype=np.float64)
        bv = xf.var(axis=axes, dtype=np.float64)
        y = (xf - _chan(bm, r)) / np.sqrt(_chan(bv, r) + eps) * _chan(scale, r) + _chan(b, r)
        mom = a.get("momentum", 0.9)
        rm = mean * mom + bm * (1 - mom)
        rv = var * mom + bv * (1 - mom)
        return [_as(y, x.dtype), _as(rm, mean.dtype), _as(rv, var.dtype)]
    s = _chan(scale, r).astype(np.float32) / np.sqrt(_chan(var, r).astype(np.float32) + np.float32(eps))
    y = xf * s.astype(xf.dtype) + (_chan(b, r) - _chan(mean, r) * s).astype(xf.dtype)
    return [_as(y, x.dtype)]


def _instancenorm(a, ins, opset):
    x, scale, b = ins[:3]
    eps = a.get("epsilon", 1e-5)
    xf = x.astype(np.float64)
    axes = tuple(range(2, x.ndim))
    m = xf.mean(axis=axes, keepdims=True)
    v = xf.var(axis=axes, keepdims=True)
    y = (xf - m) / np.sqrt(v + eps) * _chan(scale, x.ndim) + _chan(b, x.ndim)
    return [_as(y, x.dtype)]


def _stash_dtype(a: dict, x: np.ndarray) -> np.dtype:
    st = int(a.get("stash_type", 1))
    return ONNX_DTYPES[st] if st in ONNX_DTYPES else np.dtype(np.float32)


def _layernorm(a, ins, opset):
    x, scale, b = ins[0], ins[1], _inp(ins, 2)
    ax = _axis(a.get("axis", -1), x.ndim, "LayerNormalization")
    eps = a.get("epsilon", 1e-5)
    axes = tuple(range(ax, x.ndim))
    xf = x.astype(np.float64)
    m = xf.mean(axis=axes, keepdims=True)
    inv = 1.0 / np.sqrt(((xf - m) ** 2).mean(axis=axes, keepdims=True) + eps)
    y = (xf - m) * inv * scale
    if b is not None:
        y = y + b
    sd = _stash_dtype(a, x)
    return [_as(y, x.dtype), _as(m, sd), _as(inv, sd)]


def _rmsnorm(a, ins, opset):
    x, scale = ins[0], ins[1]
    ax = _axis(a.get("axis", -1), x.ndim, "RMSNormalization")
    xf = x.astype(np.float64)
    ms = (xf * xf).mean(axis=tuple(range(ax, x.ndim)), keepdims=True)
    return [_as(xf / np.sqrt(ms + a.get("epsilon", 1e-5)) * scale, x.dtype)]


def _groupnorm(a, ins, opset):
    x, scale, b = ins[:3]
    g = int(_req(a, "num_groups", "GroupNormalization"))
    n, c = x.shape[:2]
    if c % g:
        raise CpuKernelError(f"GroupNormalization: {c} channels in {g} groups")
    xf = x.astype(np.float64).reshape(n, g, -1)
    m = xf.mean(axis=2, keepdims=True)
    v = xf.var(axis=2, keepdims=True)
    y = ((xf - m) / np.sqrt(v + a.get("epsilon", 1e-5))).reshape(x.shape)
    if opset < 21 and scale.size == g:          # opset 18: one scale/bias per group
        scale, b = np.repeat(scale, c // g), np.repeat(b, c // g)
    y = y * _chan(scale, x.ndim) + _chan(b, x.ndim)
    return [_as(y, x.dtype)]


def _lpnorm(a, ins, opset):
    x = ins[0]
    ax = _axis(a.get("axis", -1), x.ndim, "LpNormalization")
    p = a.get("p", 2)
    xf = x.astype(np.float64)
    nrm = np.sum(np.abs(xf), axis=ax, keepdims=True) if p == 1 else np.sqrt(np.sum(xf * xf, axis=ax, keepdims=True))
    return [_as(np.where(nrm == 0, 0.0, xf / np.where(nrm == 0, 1.0, nrm)), x.dtype)]


def _mvn(a, ins, opset):
    x = ins[0]
    axes = tuple(_axis(v, x.ndim) for v in a.get("axes", [0, 2, 3]))
    xf = x.astype(np.float64)
    m = xf.mean(axis=axes, keepdims=True)
    sd = np.sqrt(((xf - m) ** 2).mean(axis=axes, keepdims=True))
    return [_as((xf - m) / (sd + 1e-9), x.dtype)]


def _global_pool(fn: Callable) -> Kernel:
    def k(a, ins, opset):
        x = ins[0]
        axes = tuple(range(2, x.ndim))
        return [_as(fn(_fl(x), axis=axes, keepdims=True), x.dtype)]
    return k

#: ONNX op type -> kernel, for the ops of this module.
KERNELS: dict[str, Kernel] = {
    **{k: _reduce(k) for k in _REDUCE},
    "ArgMax": _arg(np.argmax), "ArgMin": _arg(np.argmin),
    "Softmax": _softmax_kind("soft"), "LogSoftmax": _softmax_kind("log"), "Hardmax": _softmax_kind("hard"),
    "BatchNormalization": _batchnorm, "InstanceNormalization": _instancenorm,
    "LayerNormalization": _layernorm, "RMSNormalization": _rmsnorm, "GroupNormalization": _groupnorm,
    "LpNormalization": _lpnorm, "MeanVarianceNormalization": _mvn,
    "GlobalAveragePool": _global_pool(np.mean), "GlobalMaxPool": _global_pool(np.max),
}
