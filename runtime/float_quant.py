"""Host-CPU numpy kernels of the ONNX quantization ops, bit exact: ``QuantizeLinear``,
``DequantizeLinear``, ``DynamicQuantizeLinear``, ``MatMulInteger``, ``QLinearMatMul``,
``ConvInteger`` and ``QLinearConv`` (int32 accumulation, onnxruntime's requantization; see
:mod:`.float_ops`).  :data:`KERNELS`: op type -> kernel.
"""

from __future__ import annotations

import numpy as np

from .float_common import ONNX_DTYPES, CpuKernelError, Kernel, UnsupportedKernel, _as, _axis, _inp
from .float_window import _conv_core

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

#: ONNX op type -> kernel, for the ops of this module.
KERNELS: dict[str, Kernel] = {
    "QuantizeLinear": _quantize_linear, "DequantizeLinear": _dequantize_linear,
    "DynamicQuantizeLinear": _dynamic_quantize_linear, "MatMulInteger": _matmul_integer,
    "QLinearMatMul": _qlinear_matmul, "ConvInteger": _conv_integer, "QLinearConv": _qlinear_conv,
}
