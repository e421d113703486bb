"""Shared ground of the host-CPU float kernels (:mod:`.float_ops` and its op families
:mod:`.float_elementwise`, :mod:`.float_layout`, :mod:`.float_reduce`, :mod:`.float_window`,
:mod:`.float_resize`, :mod:`.float_quant`): the errors they raise, the ONNX <-> numpy dtype
tables, TENSOR attributes (:func:`tensor_attr`), the argument helpers every kernel uses and
a float64 ``erf``.  The conventions are :mod:`.float_ops`'s.  Only numpy and the standard
library are imported.
"""

from __future__ import annotations

import math
from typing import Callable

import numpy as np


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
