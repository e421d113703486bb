"""Host-CPU kernels for ONNX nodes that do not run on VTA: numpy kernels, and onnxruntime for the rest.

The compiler keeps an ONNX node it cannot lower to the accelerator as is and runs it on the
host.  On a board only numpy is installed, so the common ops have numpy kernels here
(:func:`run_numpy`, :data:`NUMPY_OPS`, :func:`numpy_supports`); any other node runs on
onnxruntime's CPU provider when that is installed (:func:`run_onnxruntime`).

Conventions of the numpy kernels:

* ``attrs`` is the node's attribute dict in the JSON form of
  :func:`vtaforge.compiler.onnx_attrs.attrs_to_json` (``INT`` -> int, ``FLOATS`` -> list,
  ``TENSOR`` -> ``{"tensor": {...}}``, see :func:`tensor_attr`); an absent attribute takes the
  ONNX default of that opset.
* ``inputs`` are positional (``None`` or a missing trailing entry for an omitted optional
  input); ``opset`` is the default-domain opset of the model, which selects the operator
  version (e.g. Clip bounds are attributes before opset 11 and inputs from 11).
* Floating-point ops compute in float32 like onnxruntime (float16 inputs are computed in
  float32 and rounded back; float64 stays float64; a few kernels use float64 intermediates
  for accuracy).  Layout and integer ops keep the input dtype.
* Integer ops (``QLinearConv``, ``QLinearMatMul``, ``ConvInteger``, ``MatMulInteger``,
  ``QuantizeLinear``, ``DequantizeLinear``) are bit exact: int32 accumulation (computed in
  float64, exact for any realistic reduction length) and onnxruntime's requantization
  ``saturate(round_half_even(float32(acc) * float32(x_scale * w_scale / y_scale)) + zp)``.
* Every output of the op is returned in ONNX order, optional ones included (MaxPool's
  ``Indices``, Dropout's ``mask``, TopK's ``Indices``, LayerNormalization's ``Mean`` and
  ``InvStdDev``); outputs may be views of the inputs, so do not modify them in place.
* ``Split`` without sizes (no ``split`` attribute/input) needs ``attrs["num_outputs"]``, which
  ``attrs_to_json`` fills in from the node's output count.

Where onnxruntime and the ONNX reference implementation disagree, the kernels follow
onnxruntime: Resize ``align_corners`` divides by ``out - 1`` (not ``scale * in - 1``);
``tf_crop_and_resize`` with scales gives ``floor(in * scale)`` outputs; linear Resize blends in
float32 like onnxruntime's bilinear kernel and truncates integer outputs.  Integer
accumulation is exact; onnxruntime's AVX2 u8 x s8 GEMM saturates byte-pair sums to int16 and
so differs for full-range int8 weights (its quantizer's 7-bit ``reduce_range`` weights agree).

Only numpy and the standard library are imported at module level; onnxruntime is imported
when :func:`run_onnxruntime` first needs it.
"""

from __future__ import annotations

import hashlib
import math
import threading
from collections import OrderedDict
from itertools import product
from typing import Callable

import numpy as np

__all__ = ["CpuKernelError", "UnsupportedKernel", "NUMPY_OPS", "numpy_supports", "run_numpy",
           "onnxruntime_available", "run_onnxruntime", "tensor_attr", "ONNX_DTYPES", "NUMPY_DTYPES"]


class CpuKernelError(ValueError):
    """A host-CPU kernel cannot run a node: bad attributes or inputs, or onnxruntime is missing."""


class UnsupportedKernel(CpuKernelError):
    """No numpy kernel for this op, attribute combination or input dtype (use onnxruntime)."""


#: TensorProto data type number -> numpy dtype, for the types the numpy kernels handle.
ONNX_DTYPES: dict[int, np.dtype] = {
    1: np.dtype(np.float32), 2: np.dtype(np.uint8), 3: np.dtype(np.int8), 4: np.dtype(np.uint16),
    5: np.dtype(np.int16), 6: np.dtype(np.int32), 7: np.dtype(np.int64), 9: np.dtype(np.bool_),
    10: np.dtype(np.float16), 11: np.dtype(np.float64), 12: np.dtype(np.uint32), 13: np.dtype(np.uint64),
}
#: numpy dtypes the kernels accept (ml_dtypes' bfloat16 / float8 / int4, strings and complex are not).
NUMPY_DTYPES: frozenset[np.dtype] = frozenset(ONNX_DTYPES.values())
_ONNX_TYPE_NAMES = {0: "UNDEFINED", 8: "STRING", 14: "COMPLEX64", 15: "COMPLEX128", 16: "BFLOAT16",
                    17: "FLOAT8E4M3FN", 18: "FLOAT8E4M3FNUZ", 19: "FLOAT8E5M2", 20: "FLOAT8E5M2FNUZ",
                    21: "UINT4", 22: "INT4", 23: "FLOAT4E2M1"}


def tensor_attr(v: dict) -> np.ndarray:
    """Array of a TENSOR attribute in its JSON form (inverse of ``attrs_to_json``'s encoding).

    Args:
        v: ``{"tensor": {"dtype": numpy dtype name, "shape": [d0, ...], "data": flat list}}``.
    Returns:
        array of that dtype and shape (C order).
    Raises:
        UnsupportedKernel: the attribute was recorded as ``{"unsupported": ...}`` or has a dtype
            numpy cannot represent.
        CpuKernelError: malformed dict, or ``data`` does not fill ``shape``.
    """
    if isinstance(v, dict) and "unsupported" in v:
        raise UnsupportedKernel(f"tensor attribute of type {v['unsupported']} has no numpy form")
    if not isinstance(v, dict) or not isinstance(v.get("tensor"), dict):
        raise CpuKernelError(f"not a tensor attribute: {str(v)[:80]}")
    t = v["tensor"]
    try:
        dt = np.dtype(t["dtype"])
        if dt not in NUMPY_DTYPES:
            raise TypeError("not a numpy kernel dtype")
        shape = tuple(int(d) for d in t["shape"])
        data = np.array(t["data"], dtype=dt).reshape(-1)
    except TypeError as e:
        raise UnsupportedKernel(f"tensor attribute dtype {t.get('dtype')!r}: {e}") from None
    except (KeyError, ValueError) as e:
        raise CpuKernelError(f"malformed tensor attribute: {e}") from None
    if data.size != math.prod(shape):
        raise CpuKernelError(f"tensor attribute has {data.size} values for shape {list(shape)}")
    return data.reshape(shape)


# ============================================================================ helpers
Kernel = Callable[[dict, list, int], list]


def _inp(ins: list, i: int):
    """Input ``i`` or None when omitted (None, missing trailing entry, or an empty name)."""
    return ins[i] if i < len(ins) else None


def _present(v) -> bool:
    """An optional input that is given and not the empty tensor some exporters use for 'absent'."""
    return v is not None and np.asarray(v).size > 0


def _req(a: dict, name: str, op: str):
    if name not in a:
        raise CpuKernelError(f"{op} needs attribute {name!r}")
    return a[name]


def _need(ins: list, i: int, op: str, what: str) -> np.ndarray:
    v = _inp(ins, i)
    if v is None:
        raise CpuKernelError(f"{op} needs input {i} ({what})")
    return v


def _ints(v) -> list[int]:
    return [int(i) for i in np.asarray(v).reshape(-1)]


def _scalar(v) -> float | int:
    arr = np.asarray(v)
    if arr.size != 1:
        raise CpuKernelError(f"expected a scalar, got shape {list(arr.shape)}")
    return arr.reshape(-1)[0].item()


def _axis(axis: int, rank: int, op: str = "") -> int:
    if not -rank <= axis < max(rank, 1):
        raise CpuKernelError(f"{op} axis {axis} out of range for rank {rank}")
    return axis + rank if axis < 0 else axis


def _wdt(x: np.ndarray) -> np.dtype:
    """Working float dtype: float64 stays float64, everything else computes in float32."""
    return np.dtype(np.float64) if x.dtype == np.float64 else np.dtype(np.float32)


def _fl(x: np.ndarray) -> np.ndarray:
    return x.astype(_wdt(x), copy=False)


def _as(y, dt) -> np.ndarray:
    return np.asarray(y).astype(dt, copy=False)


def _out_float(x: np.ndarray) -> np.dtype:
    return x.dtype if x.dtype.kind == "f" else np.dtype(np.float32)


# ============================================================================ erf
_SQRT_PI = math.sqrt(math.pi)


def _erf64(x: np.ndarray) -> np.ndarray:
    """erf in float64 to ~1e-15 relative: a positive series below 2.5, the erfc continued fraction above."""
    x = np.asarray(x, np.float64)
    a = np.abs(x)
    out = np.ones_like(a)
    small = a < 2.5
    if small.any():
        xs = a[small]
        t2 = 2.0 * xs * xs
        term = xs.copy()
        total = xs.copy()
        for n in range(1, 80):       # erf(x) = 2/sqrt(pi) exp(-x^2) sum (2x^2)^n x / (2n+1)!!
            term = term * t2 / (2 * n + 1)
            total += term
            if n > 8 and np.all(term <= 1e-17 * total):
                break
        out[small] = 2.0 / _SQRT_PI * np.exp(-xs * xs) * total
    big = (a >= 2.5) & (a < 6.0)     # erf(6) == 1 in float64
    if big.any():
        xb = a[big]
        f = xb.copy()
        for k in range(60, 0, -1):   # erfc(x) = exp(-x^2)/sqrt(pi) / (x + (1/2)/(x + 1/(x + (3/2)/(x + ...))))
            f = xb + (0.5 * k) / f
        out[big] = 1.0 - np.exp(-xb * xb) / (_SQRT_PI * f)
    out[np.isnan(a)] = np.nan
    return np.copysign(out, x)


# ============================================================================ elementwise
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


# ============================================================================ layout / shape
def _identity(a, ins, opset):
    return [ins[0]]


def _reshape(a, ins, opset):
    x = ins[0]
    shape = list(_req(a, "shape", "Reshape")) if opset < 5 else _ints(_need(ins, 1, "Reshape", "shape"))
    if not a.get("allowzero", 0):
        if any(s == 0 and i >= x.ndim for i, s in enumerate(shape)):
            raise CpuKernelError(f"Reshape: 0 in shape {shape} past the input rank {x.ndim}")
        shape = [x.shape[i] if s == 0 else s for i, s in enumerate(shape)]
    return [x.reshape(shape)]


def _flatten(a, ins, opset):
    x = ins[0]
    ax = a.get("axis", 1)
    ax = ax + x.ndim if ax < 0 else ax
    if not 0 <= ax <= x.ndim:
        raise CpuKernelError(f"Flatten axis {a.get('axis', 1)} out of range for rank {x.ndim}")
    return [x.reshape(math.prod(x.shape[:ax]), math.prod(x.shape[ax:]))]


def _transpose(a, ins, opset):
    x = ins[0]
    perm = a.get("perm")
    return [np.transpose(x, None if perm is None else [int(p) for p in perm])]


def _squeeze(a, ins, opset):
    x = ins[0]
    axes = a.get("axes") if opset < 13 else (_ints(ins[1]) if _inp(ins, 1) is not None else None)
    if axes is None:
        return [np.squeeze(x)]
    axes = tuple(sorted({_axis(int(v), x.ndim, "Squeeze") for v in axes}))
    if any(x.shape[v] != 1 for v in axes):
        raise CpuKernelError(f"Squeeze: axes {list(axes)} of shape {list(x.shape)} are not all 1")
    return [np.squeeze(x, axis=axes)]


def _unsqueeze(a, ins, opset):
    x = ins[0]
    axes = _req(a, "axes", "Unsqueeze") if opset < 13 else _ints(_need(ins, 1, "Unsqueeze", "axes"))
    r = x.ndim + len(axes)
    norm = sorted(_axis(int(v), r, "Unsqueeze") for v in axes)
    if len(set(norm)) != len(norm):
        raise CpuKernelError(f"Unsqueeze: repeated axes {list(axes)}")
    return [np.expand_dims(x, tuple(norm))]


def _concat(a, ins, opset):
    xs = [v for v in ins if v is not None]
    ax = _axis(a.get("axis", 1), xs[0].ndim, "Concat")
    return [np.concatenate(xs, axis=ax)]


def _split(a, ins, opset):
    x = ins[0]
    ax = _axis(a.get("axis", 0), x.ndim, "Split")
    d = x.shape[ax]
    split = a.get("split") if opset < 13 else (_ints(ins[1]) if _present(_inp(ins, 1)) else None)
    if split:
        sizes = [int(s) for s in split]
        if sum(sizes) != d or min(sizes) < 0:
            raise CpuKernelError(f"Split: sizes {sizes} do not split a dimension of {d}")
    else:
        n = a.get("num_outputs")
        if not n:
            raise UnsupportedKernel("Split without 'split' needs 'num_outputs' (attrs_to_json adds it)")
        n = int(n)
        chunk = -(-d // n)
        sizes = [chunk] * (n - 1) + [d - chunk * (n - 1)]
        if sizes[-1] < 0:
            raise CpuKernelError(f"Split: a dimension of {d} cannot be split into {n} outputs")
    return np.split(x, np.cumsum(sizes)[:-1], axis=ax)


def _slice(a, ins, opset):
    x = ins[0]
    if opset < 10:
        starts, ends = _req(a, "starts", "Slice"), _req(a, "ends", "Slice")
        axes, steps = a.get("axes"), None
    else:
        starts = _ints(_need(ins, 1, "Slice", "starts"))
        ends = _ints(_need(ins, 2, "Slice", "ends"))
        axes = _ints(ins[3]) if _inp(ins, 3) is not None else None
        steps = _ints(ins[4]) if _inp(ins, 4) is not None else None
    n = len(starts)
    axes = list(range(n)) if axes is None else [int(v) for v in axes]
    steps = [1] * n if steps is None else steps
    if not len(ends) == len(axes) == len(steps) == n:
        raise CpuKernelError("Slice: starts, ends, axes and steps differ in length")
    sl = [slice(None)] * x.ndim
    for s, e, ax, st in zip(starts, ends, axes, steps):
        ax = _axis(ax, x.ndim, "Slice")
        d = x.shape[ax]
        s, e, st = int(s), int(e), int(st)
        if st == 0:
            raise CpuKernelError("Slice: step 0")
        s, e = (s + d if s < 0 else s), (e + d if e < 0 else e)
        if st > 0:
            s, e = min(max(s, 0), d), min(max(e, 0), d)
        else:
            s, e = min(max(s, 0), d - 1), min(max(e, -1), d - 1)
        sl[ax] = slice(s, e if e >= 0 else None, st)
    return [x[tuple(sl)]]


def _gather(a, ins, opset):
    x, idx = ins[0], ins[1]
    ax = _axis(a.get("axis", 0), x.ndim, "Gather")
    idx = idx.astype(np.int64)
    d = x.shape[ax]
    if idx.size and (idx.min() < -d or idx.max() >= d):
        raise CpuKernelError(f"Gather: index out of range [-{d}, {d})")
    return [np.take(x, idx, axis=ax)]


def _gather_elements(a, ins, opset):
    x, idx = ins[0], ins[1].astype(np.int64)
    ax = _axis(a.get("axis", 0), x.ndim, "GatherElements")
    d = x.shape[ax]
    if idx.size and (idx.min() < -d or idx.max() >= d):
        raise CpuKernelError(f"GatherElements: index out of range [-{d}, {d})")
    return [np.take_along_axis(x, np.where(idx < 0, idx + d, idx), axis=ax)]


def _gather_nd(a, ins, opset):
    x, idx = ins[0], ins[1].astype(np.int64)
    b = int(a.get("batch_dims", 0))
    k = idx.shape[-1]
    dims = np.array(x.shape[b:b + k], np.int64)
    if idx.size and (np.any(idx < -dims) or np.any(idx >= dims)):
        raise CpuKernelError("GatherND: index out of range")
    idx = np.where(idx < 0, idx + dims, idx)
    nb = math.prod(x.shape[:b])
    xr = x.reshape((nb,) + x.shape[b:])
    ir = idx.reshape(nb, -1, k)
    out = xr[(np.arange(nb)[:, None],) + tuple(ir[..., j] for j in range(k))]
    return [out.reshape(idx.shape[:-1] + x.shape[b + k:])]


def _scatter_reduce(name: str) -> Callable | None:
    return {"none": None, "add": np.add, "mul": np.multiply, "max": np.maximum, "min": np.minimum}[name]


def _scatter_elements(a, ins, opset):
    x, idx, upd = ins[0], ins[1].astype(np.int64), ins[2]
    ax = _axis(a.get("axis", 0), x.ndim, "ScatterElements")
    d = x.shape[ax]
    if idx.size and (idx.min() < -d or idx.max() >= d):
        raise CpuKernelError("ScatterElements: index out of range")
    idx = np.where(idx < 0, idx + d, idx)
    out = x.copy()
    grid = list(np.indices(idx.shape, sparse=True))
    grid[ax] = idx
    ufunc = _scatter_reduce(a.get("reduction", "none"))
    if ufunc is None:
        out[tuple(grid)] = upd
    else:
        ufunc.at(out, tuple(grid), upd)
    return [out]


def _scatter_nd(a, ins, opset):
    x, idx, upd = ins[0], ins[1].astype(np.int64), ins[2]
    k = idx.shape[-1]
    dims = np.array(x.shape[:k], np.int64)
    idx = np.where(idx < 0, idx + dims, idx)
    out = x.copy()
    flat = idx.reshape(-1, k)
    u = upd.reshape((flat.shape[0],) + x.shape[k:])
    ufunc = _scatter_reduce(a.get("reduction", "none"))
    key = tuple(flat[:, j] for j in range(k))
    if ufunc is None:
        out[key] = u
    else:
        ufunc.at(out, key, u)
    return [out]


def _shape(a, ins, opset):
    shp = ins[0].shape
    r = len(shp)
    s, e = a.get("start", 0), a.get("end", r)
    s, e = (s + r if s < 0 else s), (e + r if e < 0 else e)
    s, e = min(max(s, 0), r), min(max(e, 0), r)
    return [np.array(shp[s:e], dtype=np.int64)]


def _size(a, ins, opset):
    return [np.array(ins[0].size, dtype=np.int64)]


def _cast_to(x: np.ndarray, dt: np.dtype) -> np.ndarray:
    if dt == np.bool_:
        return x != 0
    if dt.kind in "iu" and x.dtype.kind == "f":
        with np.errstate(invalid="ignore"):
            return np.trunc(x).astype(dt)
    return x.astype(dt)


def _cast(a, ins, opset):
    to = int(_req(a, "to", "Cast"))
    return [_cast_to(ins[0], ONNX_DTYPES[to])]


def _cast_like(a, ins, opset):
    return [_cast_to(ins[0], ins[1].dtype)]


def _expand(a, ins, opset):
    x = ins[0]
    shp = np.broadcast_shapes(x.shape, tuple(_ints(ins[1])))
    return [np.broadcast_to(x, shp).copy()]


def _tile(a, ins, opset):
    reps = _ints(ins[1])
    if len(reps) != ins[0].ndim:
        raise CpuKernelError(f"Tile: {len(reps)} repeats for rank {ins[0].ndim}")
    return [np.tile(ins[0], reps)]


def _constant_of_shape(a, ins, opset):
    v = tensor_attr(a["value"]) if "value" in a else np.zeros(1, np.float32)
    if v.size != 1:
        raise CpuKernelError("ConstantOfShape: value must hold one element")
    shape = _ints(ins[0])
    if any(s < 0 for s in shape):
        raise CpuKernelError(f"ConstantOfShape: negative dimension in {shape}")
    return [np.full(shape, v.reshape(-1)[0], dtype=v.dtype)]


def _range(a, ins, opset):
    start, limit, delta = (np.asarray(v).reshape(()) for v in ins[:3])
    dt = start.dtype
    if dt.kind in "iu":
        s, lim, d = int(start), int(limit), int(delta)
        if d == 0:
            raise CpuKernelError("Range: delta 0")
        n = max(-((s - lim) // d), 0)
        return [(s + np.arange(n, dtype=np.int64) * d).astype(dt)]
    s, lim, d = float(start), float(limit), float(delta)
    if d == 0:
        raise CpuKernelError("Range: delta 0")
    n = max(int(math.ceil((lim - s) / d)), 0)
    return [(start + np.arange(n).astype(dt) * delta).astype(dt)]


def _eye_like(a, ins, opset):
    x = ins[0]
    dt = ONNX_DTYPES[int(a["dtype"])] if "dtype" in a else x.dtype
    return [np.eye(x.shape[0], x.shape[1], k=int(a.get("k", 0)), dtype=dt)]


def _trilu(a, ins, opset):
    x = ins[0]
    k = int(_scalar(ins[1])) if _present(_inp(ins, 1)) else 0
    return [np.triu(x, k) if a.get("upper", 1) else np.tril(x, k)]


def _pad(a, ins, opset):
    x = ins[0]
    mode = a.get("mode", "constant")
    if opset < 11:
        pads = a.get("pads", a.get("paddings"))
        if pads is None:
            raise CpuKernelError("Pad needs attribute 'pads'")
        value, axes = a.get("value", 0.0), None
    else:
        pads = _ints(_need(ins, 1, "Pad", "pads"))
        value = _scalar(ins[2]) if _present(_inp(ins, 2)) else 0
        axes = _ints(ins[3]) if opset >= 18 and _inp(ins, 3) is not None else None
    axes = list(range(x.ndim)) if axes is None else [_axis(v, x.ndim, "Pad") for v in axes]
    n = len(axes)
    if len(pads) != 2 * n:
        raise CpuKernelError(f"Pad: {len(pads)} pads for {n} axes")
    before, after = [0] * x.ndim, [0] * x.ndim
    for i, ax in enumerate(axes):
        before[ax], after[ax] = int(pads[i]), int(pads[i + n])
    crop = tuple(slice(-b if b < 0 else 0, x.shape[i] + e if e < 0 else None)
                 for i, (b, e) in enumerate(zip(before, after)))
    x = x[crop]
    width = [(max(b, 0), max(e, 0)) for b, e in zip(before, after)]
    if mode == "constant":
        return [np.pad(x, width, mode="constant", constant_values=np.asarray(value).astype(x.dtype))]
    if any(w != (0, 0) and x.shape[i] == 0 for i, w in enumerate(width)):
        raise CpuKernelError(f"Pad mode {mode!r} on an empty axis")
    return [np.pad(x, width, mode={"reflect": "reflect", "edge": "edge", "wrap": "wrap"}[mode])]


def _depth_to_space(a, ins, opset):
    x = ins[0]
    b = int(_req(a, "blocksize", "DepthToSpace"))
    n, c, h, w = x.shape
    if c % (b * b):
        raise CpuKernelError(f"DepthToSpace: {c} channels not divisible by blocksize^2 = {b * b}")
    if a.get("mode", "DCR") == "CRD":
        y = x.reshape(n, c // (b * b), b, b, h, w).transpose(0, 1, 4, 2, 5, 3)
    else:
        y = x.reshape(n, b, b, c // (b * b), h, w).transpose(0, 3, 4, 1, 5, 2)
    return [y.reshape(n, c // (b * b), h * b, w * b)]


def _space_to_depth(a, ins, opset):
    x = ins[0]
    b = int(_req(a, "blocksize", "SpaceToDepth"))
    n, c, h, w = x.shape
    if h % b or w % b:
        raise CpuKernelError(f"SpaceToDepth: {h}x{w} not divisible by blocksize {b}")
    y = x.reshape(n, c, h // b, b, w // b, b)
    y = y.transpose(0, 1, 3, 5, 2, 4) if a.get("mode", "DCR") == "CRD" else y.transpose(0, 3, 5, 1, 2, 4)
    return [y.reshape(n, c * b * b, h // b, w // b)]


def _dropout(a, ins, opset):
    x = ins[0]
    if opset >= 12:
        ratio = _scalar(ins[1]) if _present(_inp(ins, 1)) else 0.5
        training = bool(_scalar(ins[2])) if _present(_inp(ins, 2)) else False
        if training and ratio != 0:
            raise UnsupportedKernel("Dropout in training mode with ratio > 0 is random; no numpy kernel")
    mask = np.ones(x.shape, dtype=bool if opset >= 10 else x.dtype)
    return [x, mask]


def _compress(a, ins, opset):
    x, cond = ins[0], ins[1].astype(bool).reshape(-1)
    if "axis" not in a:
        return [np.compress(cond, x.reshape(-1))]
    return [np.compress(cond, x, axis=_axis(a["axis"], x.ndim, "Compress"))]


def _nonzero(a, ins, opset):
    x = np.atleast_1d(ins[0])
    return [np.array(np.nonzero(x), dtype=np.int64).reshape(x.ndim, -1)]


def _one_hot(a, ins, opset):
    idx, depth, vals = ins[0], int(_scalar(ins[1])), ins[2].reshape(-1)
    idx = idx.astype(np.int64)
    idx = np.where(idx < 0, idx + depth, idx)
    hot = np.arange(depth) == idx[..., None]
    ax = _axis(a.get("axis", -1), idx.ndim + 1, "OneHot")
    hot = np.moveaxis(hot, -1, ax)
    return [np.where(hot, vals[1], vals[0]).astype(vals.dtype)]


def _einsum(a, ins, opset):
    eq = str(_req(a, "equation", "Einsum")).replace(" ", "")
    dt = ins[0].dtype
    xs = [v.astype(np.float32) if dt == np.float16 else v for v in ins if v is not None]
    return [_as(np.einsum(eq, *xs), dt)]


def _cumulative(fn: Callable, ident: int) -> Kernel:
    def k(a, ins, opset):
        x = ins[0]
        ax = _axis(int(_scalar(ins[1])), x.ndim, "CumSum")
        xx = np.flip(x, ax) if a.get("reverse", 0) else x
        y = fn(xx, axis=ax, dtype=x.dtype)
        if a.get("exclusive", 0):
            first = np.full_like(np.take(y, [0], axis=ax), ident)
            y = np.concatenate([first, np.take(y, np.arange(x.shape[ax] - 1), axis=ax)], axis=ax)
        return [np.flip(y, ax) if a.get("reverse", 0) else y]
    return k


def _topk(a, ins, opset):
    x = ins[0]
    k = int(_req(a, "k", "TopK")) if opset < 10 else int(_scalar(ins[1]))
    ax = _axis(a.get("axis", -1), x.ndim, "TopK")
    d = x.shape[ax]
    if not 0 <= k <= d:
        raise CpuKernelError(f"TopK: k={k} for a dimension of {d}")
    if a.get("largest", 1):          # descending, ties keep the lower index first
        order = d - 1 - np.flip(np.argsort(np.flip(x, ax), axis=ax, kind="stable"), ax)
    else:
        order = np.argsort(x, axis=ax, kind="stable")
    idx = np.take(order, np.arange(k), axis=ax)
    return [np.take_along_axis(x, idx, axis=ax), idx.astype(np.int64)]


# ============================================================================ reductions / normalisation
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


# ============================================================================ windowed / linear
def _spatial(a: dict, name: str, n: int, default: int) -> list[int]:
    v = a.get(name)
    if v is None or len(v) == 0:
        return [default] * n
    if len(v) != n:
        raise CpuKernelError(f"{name} {list(v)} for {n} spatial dims")
    return [int(i) for i in v]


def _geometry(a: dict, in_sp, kernel, strides, dil, ceil_mode: bool = False):
    """Pads (begin, end) and output size per spatial dim, for Conv and the pools."""
    n = len(in_sp)
    auto = a.get("auto_pad", "NOTSET")
    eff = [(k - 1) * d + 1 for k, d in zip(kernel, dil)]
    if auto in ("SAME_UPPER", "SAME_LOWER"):
        out = [-(-i // s) for i, s in zip(in_sp, strides)]
        tot = [max((o - 1) * s + e - i, 0) for o, s, e, i in zip(out, strides, eff, in_sp)]
        pb = [t // 2 if auto == "SAME_UPPER" else t - t // 2 for t in tot]
        pe = [t - b for t, b in zip(tot, pb)]
        return pb, pe, out
    if auto == "VALID":
        pb, pe = [0] * n, [0] * n
    else:
        pads = _spatial(a, "pads", 2 * n, 0)
        pb, pe = pads[:n], pads[n:]
    out = []
    for i, b, e, k, s in zip(in_sp, pb, pe, eff, strides):
        span = i + b + e - k
        if span < 0:
            raise CpuKernelError(f"window of {k} larger than the padded input {i + b + e}")
        o = (-(-span // s) if ceil_mode else span // s) + 1
        if ceil_mode and (o - 1) * s >= i + b:     # a window must start inside the input or left pad
            o -= 1
        out.append(o)
    return pb, pe, out


def _pad_windows(x: np.ndarray, pb, pe, out, eff, strides, fill) -> np.ndarray:
    """Pad the spatial dims (extra at the end so every output window is in range)."""
    width = [(0, 0), (0, 0)]
    for i, b, e, o, k, s in zip(x.shape[2:], pb, pe, out, eff, strides):
        need = (o - 1) * s + k
        width.append((b, max(e, need - i - b)))
    if all(w == (0, 0) for w in width):
        return x
    return np.pad(x, width, mode="constant", constant_values=fill)


def _window_slices(kernel, dil, strides, out):
    for koff in product(*[range(k) for k in kernel]):
        yield koff, tuple(slice(k * d, k * d + s * (o - 1) + 1, s) for k, d, s, o in zip(koff, dil, strides, out))


_IM2COL_BYTES = 256 << 20          # larger convolutions accumulate one kernel offset at a time


def _conv_core(x: np.ndarray, w: np.ndarray, a: dict, dtype) -> np.ndarray:
    """Cross-correlation ``[N, C, *in] x [M, C/g, *k] -> [N, M, *out]`` computed in ``dtype`` (zero padding)."""
    nsp = x.ndim - 2
    if w.ndim != x.ndim:
        raise CpuKernelError(f"Conv: weight rank {w.ndim} for input rank {x.ndim}")
    kernel = list(w.shape[2:])
    if a.get("kernel_shape") and [int(k) for k in a["kernel_shape"]] != kernel:
        raise CpuKernelError(f"Conv: kernel_shape {a['kernel_shape']} but weights {list(w.shape)}")
    strides, dil = _spatial(a, "strides", nsp, 1), _spatial(a, "dilations", nsp, 1)
    g = int(a.get("group", 1))
    n, c = x.shape[:2]
    m = w.shape[0]
    if c % g or m % g or w.shape[1] != c // g:
        raise CpuKernelError(f"Conv: input channels {c}, weights {list(w.shape)}, group {g}")
    pb, pe, out = _geometry(a, x.shape[2:], kernel, strides, dil)
    eff = [(k - 1) * d + 1 for k, d in zip(kernel, dil)]
    xp = _pad_windows(x.astype(dtype, copy=False), pb, pe, out, eff, strides, 0)
    nk, npix = math.prod(kernel), math.prod(out)
    if n * c * nk * npix * xp.itemsize <= _IM2COL_BYTES:      # one GEMM over an im2col buffer
        cols = np.empty((n, c, nk, npix), dtype)
        for ki, (_, sl) in enumerate(_window_slices(kernel, dil, strides, out)):
            cols[:, :, ki, :] = xp[(slice(None), slice(None)) + sl].reshape(n, c, npix)
        y = np.matmul(w.astype(dtype, copy=False).reshape(g, m // g, (c // g) * nk),
                      cols.reshape(n, g, (c // g) * nk, npix))
        return y.reshape([n, m] + out)
    wg = np.ascontiguousarray(np.moveaxis(w.astype(dtype, copy=False).reshape(g, m // g, c // g, nk), 3, 0))
    y = np.zeros((n, g, m // g, npix), dtype)
    for ki, (_, sl) in enumerate(_window_slices(kernel, dil, strides, out)):     # bounded memory
        patch = np.ascontiguousarray(xp[(slice(None), slice(None)) + sl]).reshape(n, g, c // g, npix)
        y += np.matmul(wg[ki], patch)
    return y.reshape([n, m] + out)


def _conv(a, ins, opset):
    x, w, b = ins[0], ins[1], _inp(ins, 2)
    wd = _wdt(x)
    y = _conv_core(x, w, a, wd)
    if b is not None:
        y = y + b.astype(wd).reshape((1, -1) + (1,) * (x.ndim - 2))
    return [_as(y, x.dtype)]


def _conv_transpose(a, ins, opset):
    x, w, b = ins[0], ins[1], _inp(ins, 2)
    wd = _wdt(x)
    nsp = x.ndim - 2
    n, c = x.shape[:2]
    g = int(a.get("group", 1))
    if w.ndim != x.ndim or w.shape[0] != c or c % g:
        raise CpuKernelError(f"ConvTranspose: input {list(x.shape)}, weights {list(w.shape)}, group {g}")
    mg = w.shape[1]
    kernel = list(w.shape[2:])
    strides, dil = _spatial(a, "strides", nsp, 1), _spatial(a, "dilations", nsp, 1)
    opad = _spatial(a, "output_padding", nsp, 0)
    in_sp = list(x.shape[2:])
    full = [s * (i - 1) + (k - 1) * d + 1 for s, i, k, d in zip(strides, in_sp, kernel, dil)]
    auto = a.get("auto_pad", "NOTSET")
    oshape = a.get("output_shape")
    if oshape or auto in ("SAME_UPPER", "SAME_LOWER"):
        out = [int(v) for v in oshape][-nsp:] if oshape else [i * s for i, s in zip(in_sp, strides)]
        tot = [f + p - o for f, p, o in zip(full, opad, out)]
        pb = [t // 2 if auto == "SAME_UPPER" else t - t // 2 for t in tot]
    else:
        pads = [0] * (2 * nsp) if auto == "VALID" else _spatial(a, "pads", 2 * nsp, 0)
        pb = pads[:nsp]
        out = [f + p - b0 - e0 for f, p, b0, e0 in zip(full, opad, pads[:nsp], pads[nsp:])]
    if any(o < 0 for o in out):
        raise CpuKernelError(f"ConvTranspose: negative output size {out}")
    off = [max(0, -p) for p in pb]
    length = [o0 + max(f, p + o) for o0, f, p, o in zip(off, full, pb, out)]
    buf = np.zeros([n, g, mg] + length, wd)
    nk = math.prod(kernel)
    xg = x.astype(wd, copy=False).reshape(n, g, c // g, -1)
    wt = w.astype(wd, copy=False).reshape(g, c // g, mg, nk).transpose(0, 2, 3, 1)   # g, mg, K, cg
    cols = np.matmul(np.ascontiguousarray(wt).reshape(g, mg * nk, c // g), xg)      # n, g, mg*K, P
    cols = cols.reshape([n, g, mg, nk] + in_sp)
    for ki, koff in enumerate(product(*[range(k) for k in kernel])):               # col2im
        sl = tuple(slice(o0 + k * d, o0 + k * d + s * (i - 1) + 1, s)
                   for o0, k, d, s, i in zip(off, koff, dil, strides, in_sp))
        buf[(slice(None),) * 3 + sl] += cols[:, :, :, ki]
    crop = tuple(slice(o0 + p, o0 + p + o) for o0, p, o in zip(off, pb, out))
    y = buf[(slice(None),) * 3 + crop].reshape([n, g * mg] + out)
    if b is not None:
        y = y + b.astype(wd).reshape((1, -1) + (1,) * nsp)
    return [_as(y, x.dtype)]


def _pool_setup(a: dict, x: np.ndarray, op: str):
    nsp = x.ndim - 2
    kernel = [int(k) for k in _req(a, "kernel_shape", op)]
    if len(kernel) != nsp:
        raise CpuKernelError(f"{op}: kernel_shape {kernel} for {nsp} spatial dims")
    strides, dil = _spatial(a, "strides", nsp, 1), _spatial(a, "dilations", nsp, 1)
    pb, pe, out = _geometry(a, x.shape[2:], kernel, strides, dil, bool(a.get("ceil_mode", 0)))
    eff = [(k - 1) * d + 1 for k, d in zip(kernel, dil)]
    return kernel, strides, dil, pb, pe, out, eff


def _maxpool(a, ins, opset):
    x = ins[0]
    kernel, strides, dil, pb, pe, out, eff = _pool_setup(a, x, "MaxPool")
    xw = x.astype(np.float32) if x.dtype == np.float16 else x
    fill = -np.inf if xw.dtype.kind == "f" else np.iinfo(xw.dtype).min
    xp = _pad_windows(xw, pb, pe, out, eff, strides, fill)
    sp = x.shape[2:]
    if a.get("storage_order", 0):                   # column-major spatial index
        strides_sp = [math.prod(sp[:i]) for i in range(len(sp))]
    else:
        strides_sp = [math.prod(sp[i + 1:]) for i in range(len(sp))]
    grids = np.indices(sp, sparse=True)
    sidx = sum(gr * st for gr, st in zip(grids, strides_sp)) if len(sp) else np.zeros((), np.int64)
    plane = math.prod(sp)
    idx = (np.arange(x.shape[0] * x.shape[1], dtype=np.int64).reshape(x.shape[:2] + (1,) * len(sp)) * plane
           + np.asarray(sidx, np.int64))
    ip = _pad_windows(idx, pb, pe, out, eff, strides, -1)
    best = bidx = None
    for _, sl in _window_slices(kernel, dil, strides, out):
        win = xp[(slice(None), slice(None)) + sl]
        wi = ip[(slice(None), slice(None)) + sl]
        if best is None:
            best, bidx = win.copy(), wi.copy()
        else:
            upd = (win > best) | ((bidx < 0) & (wi >= 0) & (win >= best))
            best = np.where(upd, win, best)
            bidx = np.where(upd, wi, bidx)
    return [_as(best, x.dtype), bidx.astype(np.int64)]


def _avgpool(a, ins, opset):
    x = ins[0]
    kernel, strides, dil, pb, pe, out, eff = _pool_setup(a, x, "AveragePool")
    xw = _fl(x).astype(np.float64) if x.dtype != np.float64 else x
    xp = _pad_windows(xw, pb, pe, out, eff, strides, 0.0)
    mask = np.zeros((1, 1) + xp.shape[2:], np.float64)
    if a.get("count_include_pad", 0):
        mask[(0, 0) + tuple(slice(0, b + i + e) for b, i, e in zip(pb, x.shape[2:], pe))] = 1
    else:
        mask[(0, 0) + tuple(slice(b, b + i) for b, i in zip(pb, x.shape[2:]))] = 1
    s = np.zeros(xp.shape[:2] + tuple(out), np.float64)
    cnt = np.zeros((1, 1) + tuple(out), np.float64)
    for _, sl in _window_slices(kernel, dil, strides, out):
        s += xp[(slice(None), slice(None)) + sl]
        cnt += mask[(slice(None), slice(None)) + sl]
    return [_as(s / np.maximum(cnt, 1), x.dtype)]


def _lppool(a, ins, opset):
    x = ins[0]
    kernel, strides, dil, pb, pe, out, eff = _pool_setup(a, x, "LpPool")
    p = float(a.get("p", 2))
    xp = _pad_windows(np.abs(x.astype(np.float64)), pb, pe, out, eff, strides, 0.0)
    s = np.zeros(xp.shape[:2] + tuple(out), np.float64)
    for _, sl in _window_slices(kernel, dil, strides, out):
        s += xp[(slice(None), slice(None)) + sl] ** p
    return [_as(s ** (1.0 / p), x.dtype)]


def _gemm(a, ins, opset):
    A, B, C = ins[0], ins[1], _inp(ins, 2)
    dt = A.dtype
    wd = _wdt(A) if dt.kind == "f" else dt
    A = A.astype(wd, copy=False)
    B = B.astype(wd, copy=False)
    if a.get("transA", 0):
        A = A.T
    if a.get("transB", 0):
        B = B.T
    alpha, beta = a.get("alpha", 1.0), a.get("beta", 1.0)
    y = A @ B
    if alpha != 1.0:
        y = y * (alpha if wd.kind == "f" else int(alpha))
    if C is not None:
        cc = C.astype(wd, copy=False)
        y = y + (cc * (beta if wd.kind == "f" else int(beta)) if beta != 1.0 else cc)
    return [_as(y, dt)]


def _matmul(a, ins, opset):
    A, B = ins[0], ins[1]
    if A.dtype == np.float16:
        return [_as(np.matmul(A.astype(np.float32), B.astype(np.float32)), A.dtype)]
    return [np.matmul(A, B)]


# ------------------------------------------------------------------ Resize / Upsample
def _nearest_index(xo: np.ndarray, mode: str, down: bool) -> np.ndarray:
    if mode == "round_prefer_floor":
        f = np.floor(xo)
        return np.where(xo - f == 0.5, f, np.rint(xo))
    if mode == "round_prefer_ceil":
        f = np.floor(xo)
        return np.where(xo - f == 0.5, f + 1, np.rint(xo))
    if mode == "floor":
        return np.floor(xo)
    if mode == "ceil":
        return np.ceil(xo)
    return np.ceil(xo) if down else np.trunc(xo)      # "simple": Resize-10 and Upsample


def _coords(ctm: str, length_out: int, length_in: int, scale, roi) -> np.ndarray:
    """Source coordinate of every output index along one axis (float32, as onnxruntime computes it)."""
    f = np.float32
    y = np.arange(length_out, dtype=f)
    s = f(scale)
    if ctm == "half_pixel":
        return (y + f(0.5)) / s - f(0.5)
    if ctm == "half_pixel_symmetric":
        adj = f(length_out) / (s * f(length_in))
        off = f(length_in) / f(2) * (f(1) - adj)
        return off + (y + f(0.5)) / s - f(0.5)
    if ctm == "pytorch_half_pixel":
        return (y + f(0.5)) / s - f(0.5) if length_out > 1 else np.zeros(length_out, f)
    if ctm == "align_corners":
        if length_out == 1:
            return np.zeros(1, f)
        return y * f(length_in - 1) / f(length_out - 1)
    if ctm == "asymmetric":
        return y / s
    if ctm == "tf_half_pixel_for_nn":
        return (y + f(0.5)) / s
    if ctm == "tf_crop_and_resize":
        r0, r1 = f(roi[0]), f(roi[1])
        if length_out > 1:
            return r0 * f(length_in - 1) + y * (r1 - r0) * f(length_in - 1) / f(length_out - 1)
        return np.full(length_out, f(0.5) * (r0 + r1) * f(length_in - 1), f)
    raise UnsupportedKernel(f"Resize coordinate_transformation_mode {ctm!r}")


def _cubic_weights(t: np.ndarray, A: float) -> np.ndarray:
    """Keys cubic convolution weights for taps at distances (1+t, t, 1-t, 2-t); t in [0, 1)."""
    def near(s):
        return ((A + 2) * s - (A + 3)) * s * s + 1

    def far(s):
        return ((A * s - 5 * A) * s + 8 * A) * s - 4 * A
    return np.stack([far(1 + t), near(t), near(1 - t), far(2 - t)], axis=-1)


def _resize_axis(x: np.ndarray, ax: int, out_len: int, scale, roi, p: dict) -> np.ndarray:
    n_in = x.shape[ax]
    xo = _coords(p["ctm"], out_len, n_in, scale, roi).astype(np.float64)
    shp = (1,) * ax + (out_len,) + (1,) * (x.ndim - ax - 1)
    if p["mode"] == "nearest":
        idx = _nearest_index(xo, p["nearest_mode"], float(scale) < 1)
        y = np.take(x, np.clip(idx, 0, n_in - 1).astype(np.intp), axis=ax)
    elif p["mode"] == "linear":
        xc = np.clip(xo, 0, n_in - 1)
        lo = np.floor(xc).astype(np.intp)
        hi = np.minimum(lo + 1, n_in - 1)
        t = (xc - lo).reshape(shp)
        y = np.take(x, lo, axis=ax) * (1 - t) + np.take(x, hi, axis=ax) * t
    else:
        base = np.floor(xo)
        t = xo - base
        w = _cubic_weights(t, p["cubic_a"])                               # out, 4
        taps = base.astype(np.int64)[:, None] + np.arange(-1, 3)[None, :]
        if p["exclude_outside"]:
            w = np.where((taps < 0) | (taps >= n_in), 0.0, w)
            w = w / np.where(w.sum(axis=1, keepdims=True) == 0, 1.0, w.sum(axis=1, keepdims=True))
        taps = np.clip(taps, 0, n_in - 1).astype(np.intp)
        y = 0
        for j in range(4):
            y = y + np.take(x, taps[:, j], axis=ax) * w[:, j].reshape(shp)
    if p["ctm"] == "tf_crop_and_resize":
        outside = ((xo < 0) | (xo > n_in - 1)).reshape(shp)
        y = np.where(outside, p["extrapolation_value"], y)
    return y


def _resize_plan(a: dict, ins: list, opset: int, x: np.ndarray):
    """Per-axis (axis, out_len, scale) of a Resize node, plus the roi per axis and the params."""
    r = x.ndim
    if opset < 11:
        roi, scales, sizes = None, ins[1], None
        p = {"ctm": "asymmetric", "nearest_mode": "simple"}
    else:
        roi, scales, sizes = _inp(ins, 1), _inp(ins, 2), _inp(ins, 3)
        p = {"ctm": a.get("coordinate_transformation_mode", "half_pixel"),
             "nearest_mode": a.get("nearest_mode", "round_prefer_floor")}
    p.update(mode=a.get("mode", "nearest"), cubic_a=a.get("cubic_coeff_a", -0.75),
             exclude_outside=a.get("exclude_outside", 0), extrapolation_value=a.get("extrapolation_value", 0.0))
    axes = [_axis(int(v), r, "Resize") for v in a["axes"]] if opset >= 18 and a.get("axes") else list(range(r))
    roi = np.asarray(roi, np.float32).reshape(-1) if _present(roi) else None
    f = np.float32
    plan = []
    if _present(sizes):
        sz = _ints(sizes)
        if len(sz) != len(axes):
            raise CpuKernelError(f"Resize: {len(sz)} sizes for {len(axes)} axes")
        sc = [f(s) / f(x.shape[ax]) for s, ax in zip(sz, axes)]
        policy = a.get("keep_aspect_ratio_policy", "stretch") if opset >= 18 else "stretch"
        if policy != "stretch":
            one = min(sc) if policy == "not_larger" else max(sc)
            sc = [one] * len(axes)
            sz = [int(math.floor(float(one * f(x.shape[ax])) + 0.5)) for ax in axes]
        plan = [(ax, s, c) for ax, s, c in zip(axes, sz, sc)]
    elif _present(scales):
        sc = np.asarray(scales, np.float32).reshape(-1)
        if len(sc) != len(axes):
            raise CpuKernelError(f"Resize: {len(sc)} scales for {len(axes)} axes")
        for ax, c in zip(axes, sc):        # onnxruntime: floor(in * scale), also for tf_crop_and_resize
            if c <= 0:
                raise CpuKernelError(f"Resize: scale {float(c)} must be positive")
            plan.append((ax, int(f(x.shape[ax]) * c), c))
    else:
        raise CpuKernelError("Resize needs scales or sizes")
    rois = {}
    if roi is not None:
        nr = len(roi) // 2
        for i, (ax, _, _) in enumerate(plan):
            j = i if nr == len(axes) else ax
            rois[ax] = (roi[j], roi[nr + j])
    return plan, rois, p


def _bilinear_weights(n_out: int, n_in: int, scale, roi, p: dict):
    """onnxruntime's bilinear taps along one axis: indices (lo, hi), weights (w_lo, w_hi) and the
    tf_crop_and_resize 'outside' mask, in float32 like its UpsampleBilinear."""
    xo = _coords(p["ctm"], n_out, n_in, scale, roi)
    outside = (xo < 0) | (xo > n_in - 1)
    xc = np.clip(xo, np.float32(0), np.float32(n_in - 1))
    lo = np.minimum(xc.astype(np.int64), n_in - 1)
    hi = np.minimum(lo + 1, n_in - 1)
    d_lo = np.abs(xc - lo.astype(np.float32))
    d_hi = np.abs(xc - hi.astype(np.float32))
    same = lo == hi
    d_lo, d_hi = np.where(same, np.float32(0.5), d_lo), np.where(same, np.float32(0.5), d_hi)
    return lo, hi, d_hi, d_lo, outside          # weight of lo is the distance to hi and vice versa


def _bilinear_ort(x: np.ndarray, plan: dict, rois: dict, p: dict) -> np.ndarray:
    """Linear resize of the last two axes with onnxruntime's float32 formula
    ``w_y1 w_x1 X11 + w_y1 w_x2 X21 + w_y2 w_x1 X12 + w_y2 w_x2 X22`` (so that integer outputs,
    which onnxruntime truncates, agree)."""
    h, w = x.shape[-2:]
    ah, aw = x.ndim - 2, x.ndim - 1
    oh, sh = plan.get(ah, (h, 1.0))
    ow, sw = plan.get(aw, (w, 1.0))
    y1, y2, wy1, wy2, outy = _bilinear_weights(oh, h, sh, rois.get(ah, (0.0, 1.0)), p)
    x1, x2, wx1, wx2, outx = _bilinear_weights(ow, w, sw, rois.get(aw, (0.0, 1.0)), p)
    xf = x.astype(np.float32)
    r1, r2 = xf[..., y1, :], xf[..., y2, :]
    wy1, wy2 = wy1[:, None], wy2[:, None]
    y = (wx1 * wy1) * r1[..., x1] + (wx2 * wy1) * r1[..., x2] + (wx1 * wy2) * r2[..., x1] + (wx2 * wy2) * r2[..., x2]
    if p["ctm"] == "tf_crop_and_resize":
        y = np.where(outy[:, None] | outx[None, :], np.float32(p["extrapolation_value"]), y)
    return y


def _resize(a, ins, opset):
    x = ins[0]
    plan, rois, p = _resize_plan(a, ins, opset, x)
    if p["ctm"] == "tf_crop_and_resize" and len(rois) != len(plan):
        raise CpuKernelError("Resize tf_crop_and_resize needs roi")
    active = [(ax, n, sc) for ax, n, sc in plan
              if n != x.shape[ax] or float(sc) != 1.0 or p["ctm"] == "tf_crop_and_resize"]
    if (p["mode"] == "linear" and x.ndim in (2, 4) and x.dtype != np.float64 and active
            and all(ax >= x.ndim - 2 for ax, _, _ in active)):
        y = _bilinear_ort(x, {ax: (n, sc) for ax, n, sc in active}, rois, p)
    else:
        y = x.astype(np.float64)
        for ax, n_out, sc in active:
            y = _resize_axis(y, ax, n_out, sc, rois.get(ax), p)
    if x.dtype.kind in "iu":            # onnxruntime casts the interpolated float (truncation)
        info = np.iinfo(x.dtype)
        y = np.clip(np.trunc(y), info.min, info.max)
    return [_as(y, x.dtype)]


def _upsample(a, ins, opset):
    x = ins[0]
    scales = a.get("scales") if opset < 9 else ins[1]
    if scales is None:
        raise CpuKernelError("Upsample needs scales")
    return _resize({"mode": a.get("mode", "nearest")}, [x, np.asarray(scales, np.float32)], 10)


# ------------------------------------------------------------------ quantization
_QTYPES = {2: np.uint8, 3: np.int8, 4: np.uint16, 5: np.int16}


def _qparam(p: np.ndarray, x: np.ndarray, a: dict, opset: int, op: str) -> np.ndarray:
    """Broadcast a scale / zero point to ``x``: scalar, per-axis ``[D]`` or blocked (opset 21)."""
    p = np.asarray(p)
    if p.size == 1 and p.ndim <= 1:
        return p.reshape(())
    ax = _axis(a.get("axis", 1), x.ndim, op)
    if p.ndim == 1 and not a.get("block_size", 0):
        if p.shape[0] != x.shape[ax]:
            raise CpuKernelError(f"{op}: {p.shape[0]} per-axis parameters for a dimension of {x.shape[ax]}")
        return p.reshape((-1,) + (1,) * (x.ndim - ax - 1))
    bs = int(a.get("block_size", 0))
    if bs <= 0 or p.ndim != x.ndim:
        raise CpuKernelError(f"{op}: parameter shape {list(p.shape)} for input {list(x.shape)}")
    return np.repeat(p, bs, axis=ax).take(np.arange(x.shape[ax]), axis=ax)


def _quantize_linear(a, ins, opset):
    x, scale, zp = ins[0], ins[1], _inp(ins, 2)
    if zp is not None:
        qdt = zp.dtype
    else:
        od = int(a.get("output_dtype", 0)) if opset >= 21 else 0
        qdt = np.dtype(_QTYPES.get(od, np.uint8))
    if qdt.type not in _QTYPES.values():
        raise UnsupportedKernel(f"QuantizeLinear to {qdt} has no numpy kernel")
    s = _qparam(scale, x, a, opset, "QuantizeLinear").astype(np.float32)
    z = _qparam(zp, x, a, opset, "QuantizeLinear").astype(np.int64) if zp is not None else np.int64(0)
    info = np.iinfo(qdt)
    q = np.rint(x.astype(np.float32) / s).astype(np.float64) + z
    return [np.clip(q, info.min, info.max).astype(qdt)]


def _dequantize_linear(a, ins, opset):
    x, scale, zp = ins[0], ins[1], _inp(ins, 2)
    s = _qparam(scale, x, a, opset, "DequantizeLinear")
    z = _qparam(zp, x, a, opset, "DequantizeLinear").astype(np.int64) if zp is not None else np.int64(0)
    od = int(a.get("output_dtype", 0)) if opset >= 23 else 0
    dt = ONNX_DTYPES[od] if od else s.dtype
    y = (x.astype(np.int64) - z).astype(np.float32) * s.astype(np.float32)
    return [_as(y, dt)]


def _dynamic_quantize_linear(a, ins, opset):
    x = ins[0].astype(np.float32)
    lo = np.float32(min(0.0, float(x.min()) if x.size else 0.0))
    hi = np.float32(max(0.0, float(x.max()) if x.size else 0.0))
    scale = np.float32((hi - lo) / np.float32(255))
    if scale == 0:
        zp = np.float32(0)
        q = np.zeros(x.shape, np.uint8)
    else:
        zp = np.clip(np.rint(np.float32(0) - lo / scale), 0, 255)
        q = np.clip(np.rint(x / scale) + zp, 0, 255).astype(np.uint8)
    return [q, np.array(scale, np.float32), np.array(zp, np.uint8)]


def _requant(acc: np.ndarray, mult: np.ndarray, zp, qdt: np.dtype) -> np.ndarray:
    """onnxruntime's requantization: saturate(round_half_even(float32(acc) * mult) + zp)."""
    info = np.iinfo(qdt)
    v = np.rint(acc.astype(np.float32) * mult.astype(np.float32)).astype(np.float64) + zp
    return np.clip(v, info.min, info.max).astype(qdt)


def _int_acc(y: np.ndarray) -> np.ndarray:
    """Exact float64 accumulator -> int32 (wrapping like int32 arithmetic)."""
    return np.rint(y).astype(np.int64).astype(np.int32)


def _zp_matrix(zp, n: int, rows: bool):
    if zp is None:
        return np.float64(0)
    z = np.asarray(zp).astype(np.float64)
    if z.ndim == 1 and z.size > 1:
        return z.reshape(-1, 1) if rows else z.reshape(1, -1)
    return z.reshape(()) if z.size == 1 else z


def _matmul_integer(a, ins, opset):
    A, B = ins[0], ins[1]
    az = _zp_matrix(_inp(ins, 2), A.shape[-2] if A.ndim > 1 else 1, rows=True)
    bz = _zp_matrix(_inp(ins, 3), B.shape[-1], rows=False)
    y = np.matmul(A.astype(np.float64) - az, B.astype(np.float64) - bz)
    return [_int_acc(y)]


def _qlinear_matmul(a, ins, opset):
    A, a_s, a_z, B, b_s, b_z, y_s, y_z = (_inp(ins, i) for i in range(8))
    if a_s is None or b_s is None or y_s is None:
        raise CpuKernelError("QLinearMatMul needs a_scale, b_scale and y_scale")
    az = _zp_matrix(a_z, 0, rows=True)
    bz = _zp_matrix(b_z, 0, rows=False)
    acc = _int_acc(np.matmul(A.astype(np.float64) - az, B.astype(np.float64) - bz))
    bsf = np.asarray(b_s, np.float32)
    bsf = bsf.reshape(1, -1) if bsf.ndim == 1 and bsf.size > 1 else bsf
    asf = np.asarray(a_s, np.float32)
    asf = asf.reshape(-1, 1) if asf.ndim == 1 and asf.size > 1 else asf
    mult = (asf * bsf) / np.asarray(y_s, np.float32)
    qdt = y_z.dtype if y_z is not None else np.dtype(np.uint8)
    yz = np.asarray(y_z).astype(np.float64) if y_z is not None else 0.0
    return [_requant(acc, mult, yz, qdt)]


def _conv_integer(a, ins, opset):
    x, w = ins[0], ins[1]
    xz, wz = _inp(ins, 2), _inp(ins, 3)
    xf = x.astype(np.float64) - (np.asarray(xz).astype(np.float64).reshape(()) if xz is not None else 0)
    wf = w.astype(np.float64)
    if wz is not None:
        wf = wf - np.asarray(wz).astype(np.float64).reshape((-1,) + (1,) * (w.ndim - 1))
    return [_int_acc(_conv_core(xf, wf, a, np.float64))]


def _qlinear_conv(a, ins, opset):
    x, x_s, x_z, w, w_s, w_z, y_s, y_z = (_inp(ins, i) for i in range(8))
    b = _inp(ins, 8)
    if x_s is None or w_s is None or y_s is None:
        raise CpuKernelError("QLinearConv needs x_scale, w_scale and y_scale")
    y_z = np.zeros((), x.dtype) if y_z is None else y_z
    xf = x.astype(np.float64) - (np.asarray(x_z).astype(np.float64).reshape(()) if x_z is not None else 0.0)
    wf = w.astype(np.float64)
    if w_z is not None:
        wf = wf - np.asarray(w_z).astype(np.float64).reshape((-1,) + (1,) * (w.ndim - 1))
    acc = _conv_core(xf, wf, a, np.float64)
    if b is not None:
        acc = acc + b.astype(np.float64).reshape((1, -1) + (1,) * (x.ndim - 2))
    acc = _int_acc(acc)
    ws = np.asarray(w_s, np.float32).reshape(-1)
    mult = (np.asarray(x_s, np.float32).reshape(()) * ws) / np.asarray(y_s, np.float32).reshape(())
    mult = mult.reshape((1, -1) + (1,) * (x.ndim - 2)) if mult.size > 1 else mult.reshape(())
    return [_requant(acc, mult, np.asarray(y_z).astype(np.float64).reshape(()), y_z.dtype)]


# ============================================================================ the table
_KERNELS: dict[str, Kernel] = {}
_KERNELS.update({k: _unary_float(f) for k, f in _UNARY_FLOAT.items()})
_KERNELS.update({k: _unary_keep(f) for k, f in _UNARY_KEEP.items()})
_KERNELS.update({k: _binary(f) for k, f in _BINARY.items()})
_KERNELS.update({k: _compare(f) for k, f in _COMPARE.items()})
_KERNELS.update({k: _reduce(k) for k in _REDUCE})
_KERNELS.update({
    "Pow": _pow, "Clip": _clip, "PRelu": _prelu, "Where": _where, "Not": _not, "BitwiseNot": _bitwise_not,
    "IsNaN": _isnan, "IsInf": _isinf,
    "Max": _variadic(np.maximum), "Min": _variadic(np.minimum), "Sum": _variadic(np.add),
    "Mean": _variadic(np.add, mean=True),
    "Identity": _identity, "Reshape": _reshape, "Flatten": _flatten, "Transpose": _transpose,
    "Squeeze": _squeeze, "Unsqueeze": _unsqueeze, "Concat": _concat, "Split": _split, "Slice": _slice,
    "Gather": _gather, "GatherElements": _gather_elements, "GatherND": _gather_nd,
    "ScatterElements": _scatter_elements, "ScatterND": _scatter_nd,
    "Shape": _shape, "Size": _size, "Cast": _cast, "CastLike": _cast_like, "Expand": _expand, "Tile": _tile,
    "ConstantOfShape": _constant_of_shape, "Range": _range, "EyeLike": _eye_like, "Trilu": _trilu, "Pad": _pad,
    "DepthToSpace": _depth_to_space, "SpaceToDepth": _space_to_depth, "Dropout": _dropout,
    "Compress": _compress, "NonZero": _nonzero, "OneHot": _one_hot, "Einsum": _einsum,
    "CumSum": _cumulative(np.cumsum, 0), "CumProd": _cumulative(np.cumprod, 1), "TopK": _topk,
    "ArgMax": _arg(np.argmax), "ArgMin": _arg(np.argmin),
    "Softmax": _softmax_kind("soft"), "LogSoftmax": _softmax_kind("log"), "Hardmax": _softmax_kind("hard"),
    "BatchNormalization": _batchnorm, "InstanceNormalization": _instancenorm,
    "LayerNormalization": _layernorm, "RMSNormalization": _rmsnorm, "GroupNormalization": _groupnorm,
    "LpNormalization": _lpnorm, "MeanVarianceNormalization": _mvn,
    "GlobalAveragePool": _global_pool(np.mean), "GlobalMaxPool": _global_pool(np.max),
    "Conv": _conv, "ConvTranspose": _conv_transpose, "MaxPool": _maxpool, "AveragePool": _avgpool,
    "LpPool": _lppool, "Gemm": _gemm, "MatMul": _matmul, "Resize": _resize, "Upsample": _upsample,
    "QuantizeLinear": _quantize_linear, "DequantizeLinear": _dequantize_linear,
    "DynamicQuantizeLinear": _dynamic_quantize_linear, "MatMulInteger": _matmul_integer,
    "QLinearMatMul": _qlinear_matmul, "ConvInteger": _conv_integer, "QLinearConv": _qlinear_conv,
})

#: ONNX op_types (default domain) with a numpy kernel.
NUMPY_OPS: frozenset[str] = frozenset(_KERNELS)


# ------------------------------------------------------------------ static support checks
def _chk_cast(a, opset):
    to = a.get("to")
    if to is None:
        return "Cast needs attribute 'to'"
    if int(to) not in ONNX_DTYPES:
        return f"Cast to {_ONNX_TYPE_NAMES.get(int(to), f'TensorProto type {to}')} has no numpy kernel"
    return ""


def _chk_resize(a, opset):
    mode = a.get("mode", "nearest")
    if mode not in (("nearest", "linear") if opset < 11 else ("nearest", "linear", "cubic")):
        return f"Resize mode {mode!r} has no numpy kernel"
    ctm = a.get("coordinate_transformation_mode", "half_pixel")
    if opset >= 11 and ctm not in ("half_pixel", "half_pixel_symmetric", "pytorch_half_pixel", "align_corners",
                                   "asymmetric", "tf_half_pixel_for_nn", "tf_crop_and_resize"):
        return f"Resize coordinate_transformation_mode {ctm!r} has no numpy kernel"
    nm = a.get("nearest_mode", "round_prefer_floor")
    if opset >= 11 and nm not in ("round_prefer_floor", "round_prefer_ceil", "floor", "ceil"):
        return f"Resize nearest_mode {nm!r} has no numpy kernel"
    if opset >= 18 and a.get("antialias", 0) and mode != "nearest":
        return f"Resize antialias with mode {mode!r} has no numpy kernel"
    if a.get("keep_aspect_ratio_policy", "stretch") not in ("stretch", "not_larger", "not_smaller"):
        return f"Resize keep_aspect_ratio_policy {a['keep_aspect_ratio_policy']!r} has no numpy kernel"
    return ""


def _chk_upsample(a, opset):
    mode = a.get("mode", "nearest")
    return "" if mode in ("nearest", "linear") else f"Upsample mode {mode!r} has no numpy kernel"


def _chk_pad(a, opset):
    mode = a.get("mode", "constant")
    if mode not in ("constant", "reflect", "edge", "wrap"):
        return f"Pad mode {mode!r} has no numpy kernel"
    return ""


def _chk_auto_pad(a, opset):
    ap = a.get("auto_pad", "NOTSET")
    return "" if ap in ("NOTSET", "VALID", "SAME_UPPER", "SAME_LOWER") else f"auto_pad {ap!r} is not known"


def _chk_quantize(a, opset):
    od = int(a.get("output_dtype", 0)) if opset >= 21 else 0
    if od and od not in _QTYPES:
        return f"QuantizeLinear output_dtype {_ONNX_TYPE_NAMES.get(od, od)} has no numpy kernel"
    return ""


def _chk_dequantize(a, opset):
    od = int(a.get("output_dtype", 0)) if opset >= 23 else 0
    if od and od not in (1, 10, 11):
        return f"DequantizeLinear output_dtype {_ONNX_TYPE_NAMES.get(od, od)} has no numpy kernel"
    return ""


def _chk_stash(a, opset):
    st = int(a.get("stash_type", 1))
    return "" if st in (1, 11) else f"stash_type {_ONNX_TYPE_NAMES.get(st, st)} has no numpy kernel"


def _chk_eyelike(a, opset):
    dt = a.get("dtype")
    return "" if dt is None or int(dt) in ONNX_DTYPES else f"EyeLike dtype {_ONNX_TYPE_NAMES.get(int(dt), dt)}"


def _chk_dropout(a, opset):
    return "Dropout before opset 7 (is_test) has no numpy kernel" if opset < 7 and not a.get("is_test", 0) else ""


def _chk_bn(a, opset):
    if opset < 7 and not a.get("is_test", 0):
        return "BatchNormalization training (is_test=0, opset < 7) has no numpy kernel"
    return ""


def _chk_einsum(a, opset):
    return "" if isinstance(a.get("equation"), str) else "Einsum needs attribute 'equation'"


def _chk_scatter(a, opset):
    red = a.get("reduction", "none")
    return "" if red in ("none", "add", "mul", "max", "min") else f"scatter reduction {red!r} is not known"


_CHECKS: dict[str, Callable[[dict, int], str]] = {
    "Cast": _chk_cast, "Resize": _chk_resize, "Upsample": _chk_upsample, "Pad": _chk_pad,
    "Conv": _chk_auto_pad, "ConvTranspose": _chk_auto_pad, "MaxPool": _chk_auto_pad, "AveragePool": _chk_auto_pad,
    "LpPool": _chk_auto_pad, "ConvInteger": _chk_auto_pad, "QLinearConv": _chk_auto_pad,
    "QuantizeLinear": _chk_quantize, "DequantizeLinear": _chk_dequantize,
    "LayerNormalization": _chk_stash, "RMSNormalization": _chk_stash, "GroupNormalization": _chk_stash,
    "EyeLike": _chk_eyelike, "Dropout": _chk_dropout, "BatchNormalization": _chk_bn, "Einsum": _chk_einsum,
    "ScatterElements": _chk_scatter, "ScatterND": _chk_scatter,
}


def numpy_supports(op_type: str, attrs: dict, opset: int) -> tuple[bool, str]:
    """Whether :func:`run_numpy` can run a node, decided from its op, attributes and opset alone.

    Args:
        op_type: ONNX op type (default domain).
        attrs: the node's attributes in the ``attrs_to_json`` form.
        opset: default-domain opset of the model.
    Returns:
        ``(True, "")`` when there is a numpy kernel for this op and attribute combination, else
        ``(False, reason)`` with a one-line reason, e.g. ``"Resize antialias with mode 'linear' has
        no numpy kernel"``.  A True answer can still meet an input dtype numpy cannot run
        (strings, bfloat16, float8, int4): :func:`run_numpy` then raises :class:`UnsupportedKernel`.
    """
    if op_type not in _KERNELS:
        return False, f"{op_type} has no numpy kernel"
    for name, v in (attrs or {}).items():
        if isinstance(v, dict) and "unsupported" in v:
            return False, f"{op_type} attribute {name!r} of type {v['unsupported']} has no numpy form"
    chk = _CHECKS.get(op_type)
    why = chk(attrs or {}, int(opset)) if chk else ""
    return (not why), why


def _one_line(e: BaseException) -> str:
    s = str(e).strip().splitlines()
    return (s[0] if s else type(e).__name__)[:300]


def run_numpy(op_type: str, attrs: dict, inputs: list, opset: int) -> list[np.ndarray]:
    """Run one ONNX node (default domain) with numpy.

    Args:
        op_type: ONNX op type, one of :data:`NUMPY_OPS`.
        attrs: the node's attributes in the JSON form of ``compiler.onnx_attrs.attrs_to_json``;
            absent attributes take the ONNX defaults of ``opset``.
        inputs: positional input arrays (any shape, the dtypes the op allows), ``None`` (or a
            missing trailing entry) for an omitted optional input.
        opset: default-domain opset of the model; selects the operator version.
    Returns:
        every output of the op, in ONNX order (optional outputs included), as numpy arrays of the
        ONNX output dtypes (float outputs keep the float input dtype; Shape/Size/ArgMax/indices are
        int64; comparisons are bool; integer ops keep their integer dtypes).  Outputs may be views of
        the inputs.
    Raises:
        UnsupportedKernel: :func:`numpy_supports` is False for this node, or an input dtype has no
            numpy kernel (strings, bfloat16, float8, int4 ...), or the node needs randomness.
        CpuKernelError: bad inputs or attributes (wrong shapes, out-of-range indices, integer
            division by zero ...); the message is one line.
    """
    ok, why = numpy_supports(op_type, attrs, opset)
    if not ok:
        raise UnsupportedKernel(why)
    ins = []
    for i, v in enumerate(inputs):
        if v is None:
            ins.append(None)
            continue
        arr = np.asarray(v)
        if arr.dtype not in NUMPY_DTYPES:
            raise UnsupportedKernel(f"{op_type} input {i} of dtype {arr.dtype} has no numpy kernel")
        ins.append(arr)
    if not ins or ins[0] is None:
        if op_type not in ("Max", "Min", "Sum", "Mean", "Concat"):
            raise CpuKernelError(f"{op_type} needs input 0")
    try:
        with np.errstate(all="ignore"):
            outs = _KERNELS[op_type](attrs or {}, ins, int(opset))
    except CpuKernelError as e:
        raise type(e)(f"{op_type}: {_one_line(e)}" if not str(e).startswith(op_type) else _one_line(e)) from None
    except (ValueError, IndexError, TypeError, ZeroDivisionError, OverflowError, KeyError, AttributeError) as e:
        raise CpuKernelError(f"{op_type}: {_one_line(e)}") from None
    return [np.asarray(o) for o in outs]


# ============================================================================ onnxruntime
_ORT_MISSING = "needs onnxruntime, which is not installed (pip install onnxruntime)"
_SESSION_CACHE_SIZE = 64
_sessions: OrderedDict[str, object] = OrderedDict()
_sessions_lock = threading.Lock()


def onnxruntime_available() -> bool:
    """True when ``import onnxruntime`` works (imported lazily, never at module import)."""
    try:
        import onnxruntime  # noqa: F401
    except ImportError:
        return False
    return True


def _session(model_bytes: bytes):
    try:
        import onnxruntime as ort
    except ImportError:
        raise CpuKernelError(f"this node {_ORT_MISSING}") from None
    key = hashlib.sha256(model_bytes).hexdigest()
    with _sessions_lock:
        sess = _sessions.get(key)
        if sess is not None:
            _sessions.move_to_end(key)
            return sess
    so = ort.SessionOptions()
    so.log_severity_level = 3
    try:
        sess = ort.InferenceSession(model_bytes, so, providers=["CPUExecutionProvider"])
    except Exception as e:  # noqa: BLE001  (onnxruntime raises its own exception types)
        raise CpuKernelError(f"onnxruntime cannot load the model: {_one_line(e)}") from None
    with _sessions_lock:
        _sessions[key] = sess
        _sessions.move_to_end(key)
        while len(_sessions) > _SESSION_CACHE_SIZE:
            _sessions.popitem(last=False)
    return sess


def run_onnxruntime(model_bytes: bytes, inputs: list) -> list[np.ndarray]:
    """Run a serialized ONNX model on onnxruntime's CPU provider.

    Args:
        model_bytes: a serialized ``ModelProto`` (a node or sub-graph wrapped as a model).
        inputs: arrays bound positionally to the graph inputs (initializers are not inputs);
            ``None`` entries are dropped only when there are more entries than graph inputs
            (an omitted optional input the model does not declare).
    Returns:
        all graph outputs, in graph order, as numpy arrays.
    Raises:
        CpuKernelError: onnxruntime is not installed ("... needs onnxruntime, which is not
            installed (pip install onnxruntime)"), cannot load the model, gets the wrong number
            of inputs, or fails while running (one-line message).

    Sessions are cached by the SHA-256 of ``model_bytes`` (least recently used, 64 entries).
    """
    sess = _session(bytes(model_bytes))
    names = [i.name for i in sess.get_inputs()]
    arrs = list(inputs)
    if len(arrs) > len(names):
        arrs = [v for v in arrs if v is not None]
    if len(arrs) != len(names) or any(v is None for v in arrs):
        raise CpuKernelError(f"onnxruntime model has {len(names)} inputs, got "
                             f"{sum(v is not None for v in inputs)} arrays for {len(inputs)} positions")
    try:
        outs = sess.run(None, {n: np.asarray(v) for n, v in zip(names, arrs)})
    except Exception as e:  # noqa: BLE001
        raise CpuKernelError(f"onnxruntime failed: {_one_line(e)}") from None
    return [np.asarray(o) for o in outs]
