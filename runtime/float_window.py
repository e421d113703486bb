"""Host-CPU numpy kernels of the windowed and linear ONNX ops: ``Conv``, ``ConvTranspose``,
``MaxPool``, ``AveragePool``, ``LpPool``, ``Gemm`` and ``MatMul``, with the window geometry
(pads, ``auto_pad``, ``ceil_mode``, dilations) the integer convolutions of
:mod:`.float_quant` share (conventions: :mod:`.float_ops`).  :data:`KERNELS`: op type ->
kernel.
"""

from __future__ import annotations

import math
from itertools import product

import numpy as np

from .float_common import CpuKernelError, Kernel, _as, _fl, _inp, _req, _wdt


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

#: ONNX op type -> kernel, for the ops of this module.
KERNELS: dict[str, Kernel] = {
    "Conv": _conv, "ConvTranspose": _conv_transpose, "MaxPool": _maxpool, "AveragePool": _avgpool,
    "LpPool": _lppool, "Gemm": _gemm, "MatMul": _matmul,
}
