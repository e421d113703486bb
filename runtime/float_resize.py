"""Host-CPU numpy kernels of ONNX ``Resize`` and ``Upsample``: nearest, linear and cubic
modes, every coordinate transformation, with onnxruntime's behaviour where it and the ONNX
reference disagree (see :mod:`.float_ops`).  :data:`KERNELS`: op type -> kernel.
"""

from __future__ import annotations

import math

import numpy as np

from .float_common import CpuKernelError, Kernel, UnsupportedKernel, _as, _axis, _inp, _ints, _present


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

#: ONNX op type -> kernel, for the ops of this module.
KERNELS: dict[str, Kernel] = {"Resize": _resize, "Upsample": _upsample}
