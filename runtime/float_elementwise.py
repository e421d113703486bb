"""Host-CPU numpy kernels of the element-wise ONNX ops: unary float and dtype-keeping ops,
broadcasting binary ops and comparisons, ``Pow``, ``Clip``, ``PRelu``, ``Where``, logical and
bitwise ``Not``, ``IsNaN`` / ``IsInf`` and the variadic ``Max`` / ``Min`` / ``Sum`` / ``Mean``
(conventions: :mod:`.float_ops`).  :data:`KERNELS`: op type -> kernel.
"""

from __future__ import annotations

import math
from typing import Callable

import numpy as np

from .float_common import CpuKernelError, Kernel, _as, _axis, _erf64, _fl, _inp, _out_float, _present, _scalar


def _unary_float(fn: Callable[[np.ndarray, dict], np.ndarray]) -> Kernel:
    def k(a, ins, opset):
        x = ins[0]
        return [_as(fn(_fl(x), a), _out_float(x))]
    return k


def _unary_keep(fn: Callable[[np.ndarray, dict], np.ndarray]) -> Kernel:
    """Ops defined for integer types too: compute in the input dtype (float16 via float32)."""
    def k(a, ins, opset):
        x = ins[0]
        xx = x.astype(np.float32) if x.dtype == np.float16 else x
        return [_as(fn(xx, a), x.dtype)]
    return k


def _sigmoid(x):
    e = np.exp(-np.abs(x))
    return np.where(x >= 0, 1.0 / (1.0 + e), e / (1.0 + e)).astype(x.dtype)


def _gelu(x, a):
    if a.get("approximate", "none") == "tanh":
        c = np.sqrt(2.0 / np.pi).astype(x.dtype)
        return 0.5 * x * (1.0 + np.tanh(c * (x + x.dtype.type(0.044715) * x * x * x)))
    return (0.5 * x.astype(np.float64) * (1.0 + _erf64(x.astype(np.float64) / math.sqrt(2.0))))


def _round(x, a):
    return np.rint(x) if x.dtype.kind == "f" else x


_UNARY_FLOAT: dict[str, Callable] = {
    "Sigmoid": lambda x, a: _sigmoid(x),
    "HardSigmoid": lambda x, a: np.clip(a.get("alpha", 0.2) * x + a.get("beta", 0.5), 0, 1),
    "HardSwish": lambda x, a: x * np.clip(x / 6 + 0.5, 0, 1),
    "Tanh": lambda x, a: np.tanh(x),
    "Exp": lambda x, a: np.exp(x),
    "Log": lambda x, a: np.log(x),
    "Sqrt": lambda x, a: np.sqrt(x),
    "Reciprocal": lambda x, a: 1 / x,
    "Erf": lambda x, a: _erf64(x),
    "Elu": lambda x, a: np.where(x >= 0, x, a.get("alpha", 1.0) * np.expm1(x)),
    "Selu": lambda x, a: a.get("gamma", 1.05070102214813232421875) * np.where(
        x > 0, x, a.get("alpha", 1.67326319217681884765625) * np.expm1(x)),
    "Celu": lambda x, a: np.maximum(x, 0) + np.minimum(0, a.get("alpha", 1.0) * np.expm1(x / a.get("alpha", 1.0))),
    "Softplus": lambda x, a: np.logaddexp(x.dtype.type(0), x),
    "Softsign": lambda x, a: x / (1 + np.abs(x)),
    "Mish": lambda x, a: x * np.tanh(np.logaddexp(x.dtype.type(0), x)),
    "Swish": lambda x, a: x * _sigmoid(x * x.dtype.type(a.get("alpha", 1.0))),
    "ThresholdedRelu": lambda x, a: np.where(x > a.get("alpha", 1.0), x, 0),
    "Gelu": _gelu,
    "Floor": lambda x, a: np.floor(x),
    "Ceil": lambda x, a: np.ceil(x),
    "Sin": lambda x, a: np.sin(x), "Cos": lambda x, a: np.cos(x), "Tan": lambda x, a: np.tan(x),
    "Asin": lambda x, a: np.arcsin(x), "Acos": lambda x, a: np.arccos(x), "Atan": lambda x, a: np.arctan(x),
    "Sinh": lambda x, a: np.sinh(x), "Cosh": lambda x, a: np.cosh(x), "Asinh": lambda x, a: np.arcsinh(x),
    "Acosh": lambda x, a: np.arccosh(x), "Atanh": lambda x, a: np.arctanh(x),
}

_UNARY_KEEP: dict[str, Callable] = {
    "Relu": lambda x, a: np.maximum(x, x.dtype.type(0)),
    "LeakyRelu": lambda x, a: np.where(x < 0, x * x.dtype.type(a.get("alpha", 0.01)), x),
    "Neg": lambda x, a: -x,
    "Abs": lambda x, a: np.abs(x),
    "Sign": lambda x, a: np.sign(x),
    "Round": _round,
    "Shrink": lambda x, a: np.where(x < -a.get("lambd", 0.5), x + a.get("bias", 0.0),
                                    np.where(x > a.get("lambd", 0.5), x - a.get("bias", 0.0), 0)),
}


def _legacy_bcast(a: dict, x: np.ndarray, y: np.ndarray, opset: int) -> np.ndarray:
    """Opset < 7 ``broadcast``/``axis`` attributes: align ``y`` with ``x`` starting at ``axis``."""
    if opset < 7 and a.get("broadcast", 0) and "axis" in a and y.ndim:
        ax = _axis(a["axis"], x.ndim)
        y = y.reshape(y.shape + (1,) * (x.ndim - ax - y.ndim))
    return y


def _int_div(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    if np.any(y == 0):
        raise CpuKernelError("Div: integer division by zero")
    q = np.floor_divide(x, y)
    if x.dtype.kind == "i":          # ONNX truncates toward zero; floor_divide rounds down
        q = np.where((q * y != x) & ((x < 0) != (y < 0)), q + 1, q)
    return q


def _mod(x, y, a):
    if a.get("fmod", 0):
        return np.fmod(x, y)
    if x.dtype.kind in "iu" and np.any(y == 0):
        raise CpuKernelError("Mod: integer division by zero")
    return np.mod(x, y)


_BINARY: dict[str, Callable] = {
    "Add": lambda x, y, a: x + y,
    "Sub": lambda x, y, a: x - y,
    "Mul": lambda x, y, a: x * y,
    "Div": lambda x, y, a: _int_div(x, y) if x.dtype.kind in "iu" else x / y,
    "Mod": _mod,
    "BitwiseAnd": lambda x, y, a: np.bitwise_and(x, y),
    "BitwiseOr": lambda x, y, a: np.bitwise_or(x, y),
    "BitwiseXor": lambda x, y, a: np.bitwise_xor(x, y),
    "BitShift": lambda x, y, a: (np.left_shift(x, y) if a.get("direction") == "LEFT" else np.right_shift(x, y)),
}
_COMPARE: dict[str, Callable] = {
    "Equal": np.equal, "Less": np.less, "Greater": np.greater, "LessOrEqual": np.less_equal,
    "GreaterOrEqual": np.greater_equal, "And": np.logical_and, "Or": np.logical_or, "Xor": np.logical_xor,
}


def _binary(fn: Callable) -> Kernel:
    def k(a, ins, opset):
        x, y = ins[0], _legacy_bcast(a, ins[0], ins[1], opset)
        if x.dtype == np.float16:
            return [_as(fn(x.astype(np.float32), y.astype(np.float32), a), x.dtype)]
        return [_as(fn(x, y.astype(x.dtype, copy=False), a), x.dtype)]
    return k


def _compare(fn: Callable) -> Kernel:
    def k(a, ins, opset):
        return [np.asarray(fn(ins[0], _legacy_bcast(a, ins[0], ins[1], opset)), dtype=bool)]
    return k


def _pow(a, ins, opset):
    x, y = ins[0], _legacy_bcast(a, ins[0], ins[1], opset)
    if x.dtype.kind in "iu" and y.dtype.kind in "iu" and not np.any(y < 0):
        return [_as(np.power(x.astype(np.int64), y.astype(np.int64)), x.dtype)]
    wd = np.float64 if np.float64 in (x.dtype, y.dtype) or x.dtype.kind in "iu" else np.float32
    return [_as(np.power(x.astype(wd), y.astype(wd)), x.dtype)]


def _clip(a, ins, opset):
    x = ins[0]
    if opset < 11:
        lo, hi = a.get("min"), a.get("max")
    else:
        lo = _scalar(ins[1]) if _present(_inp(ins, 1)) else None
        hi = _scalar(ins[2]) if _present(_inp(ins, 2)) else None
    y = x
    if lo is not None:
        y = np.maximum(y, np.asarray(lo).astype(x.dtype))
    if hi is not None:
        y = np.minimum(y, np.asarray(hi).astype(x.dtype))
    return [_as(y, x.dtype)]


def _prelu(a, ins, opset):
    x, s = ins[0], ins[1]
    if opset < 7 and s.ndim == 1 and x.ndim > 2 and s.size == x.shape[1]:
        s = s.reshape((-1,) + (1,) * (x.ndim - 2))
    return [_as(np.where(x < 0, x * s.astype(x.dtype), x), x.dtype)]


def _variadic(fn: Callable, mean: bool = False) -> Kernel:
    def k(a, ins, opset):
        xs = [v for v in ins if v is not None]
        if not xs:
            raise CpuKernelError("variadic op needs at least one input")
        dt = xs[0].dtype
        work = [v.astype(np.float32) if dt == np.float16 else v.astype(dt, copy=False) for v in xs]
        acc = work[0]
        for v in work[1:]:
            acc = fn(acc, v)
        if mean:
            acc = acc / len(xs) if dt.kind == "f" else acc // len(xs)
        return [_as(np.broadcast_to(acc, np.broadcast_shapes(*[v.shape for v in xs])), dt)]
    return k


def _where(a, ins, opset):
    c, x, y = ins[0], ins[1], ins[2]
    return [_as(np.where(c.astype(bool), x, y), x.dtype)]


def _not(a, ins, opset):
    return [np.logical_not(ins[0])]


def _bitwise_not(a, ins, opset):
    return [np.invert(ins[0])]


def _isnan(a, ins, opset):
    return [np.isnan(ins[0])]


def _isinf(a, ins, opset):
    x = ins[0]
    pos, neg = a.get("detect_positive", 1), a.get("detect_negative", 1)
    return [np.isinf(x) & (((x > 0) & bool(pos)) | ((x < 0) & bool(neg)))]

#: ONNX op type -> kernel, for the ops of this module.
KERNELS: dict[str, Kernel] = {
    **{k: _unary_float(f) for k, f in _UNARY_FLOAT.items()},
    **{k: _unary_keep(f) for k, f in _UNARY_KEEP.items()},
    **{k: _binary(f) for k, f in _BINARY.items()},
    **{k: _compare(f) for k, f in _COMPARE.items()},
    "Pow": _pow, "Clip": _clip, "PRelu": _prelu, "Where": _where, "Not": _not, "BitwiseNot": _bitwise_not,
    "IsNaN": _isnan, "IsInf": _isinf,
    "Max": _variadic(np.maximum), "Min": _variadic(np.minimum), "Sum": _variadic(np.add),
    "Mean": _variadic(np.add, mean=True),
}
