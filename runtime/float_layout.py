"""Host-CPU numpy kernels of the layout, shape and indexing ONNX ops: reshapes and
transposes, concat / split / slice, gathers and scatters, shape queries, casts, expand / tile,
generators (``ConstantOfShape``, ``Range``, ``EyeLike``, ``Trilu``), ``Pad``, depth/space
moves, ``Dropout``, ``Compress`` / ``NonZero`` / ``OneHot``, ``Einsum``, cumulative sums and
products and ``TopK`` (conventions: :mod:`.float_ops`).  :data:`KERNELS`: op type -> kernel.
"""

from __future__ import annotations

import math
from typing import Callable

import numpy as np

from .float_common import (
    ONNX_DTYPES,
    CpuKernelError,
    Kernel,
    UnsupportedKernel,
    _as,
    _axis,
    _inp,
    _ints,
    _need,
    _present,
    _req,
    _scalar,
    tensor_attr,
)


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

#: ONNX op type -> kernel, for the ops of this module.
KERNELS: dict[str, Kernel] = {
    "Identity": _identity, "Reshape": _reshape, "Flatten": _flatten, "Transpose": _transpose,
    "Squeeze": _squeeze, "Unsqueeze": _unsqueeze, "Concat": _concat, "Split": _split, "Slice": _slice,
    "Gather": _gather, "GatherElements": _gather_elements, "GatherND": _gather_nd,
    "ScatterElements": _scatter_elements, "ScatterND": _scatter_nd,
    "Shape": _shape, "Size": _size, "Cast": _cast, "CastLike": _cast_like, "Expand": _expand, "Tile": _tile,
    "ConstantOfShape": _constant_of_shape, "Range": _range, "EyeLike": _eye_like, "Trilu": _trilu, "Pad": _pad,
    "DepthToSpace": _depth_to_space, "SpaceToDepth": _space_to_depth, "Dropout": _dropout,
    "Compress": _compress, "NonZero": _nonzero, "OneHot": _one_hot, "Einsum": _einsum,
    "CumSum": _cumulative(np.cumsum, 0), "CumProd": _cumulative(np.cumprod, 1), "TopK": _topk,
}
