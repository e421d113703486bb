"""CPU operator kernels of the executor (numpy) and the activation packing helpers.

The executor runs every step placed on the CPU with these kernels: float ``quantize`` /
``dequantize`` / ``softmax``, layout ops (``flatten``, ``reshape``, ``transpose``,
``concat``), and integer fallbacks for quantized ops the partitioner kept off VTA
(``qconv2d``, ``qdense``, ``qadd``, ``qmul``, ``qrequant``, ``qmax_pool``, ``qavg_pool``).
The integer rules are those of the quantized-graph format (docs/compiler.md): int64
sums, ``requantize = clip((acc*mult + round) >> shift)``.  Activations are int8, or int16
for a model compiled for ``LOG_INP_WIDTH`` 4: an integer kernel's output has the dtype of
its activation input (``quantize``: the ``dtype`` attribute, default int8), and the
max-pool padding is that dtype's minimum.  A model compiled for ``LOG_INP_WIDTH`` 2 has
int4 activations held in int8 arrays (``quantize`` with ``dtype="int4"`` clips to
``[-8, 7]``; every requantize clips to its ``clip_lo``/``clip_hi`` attributes, which lie in
``[-8, 7]``; with pads smaller than the kernel, as ONNX requires, every max-pool window
holds a real value, so its int8 padding gives the int4 result).  This module is independent of
the compiler (the runtime never imports it) and of the compiler's reference executor.

Activation packing (:func:`pack_act` / :func:`unpack_act`): NCHW int8 (or int16) to the VTA layout
``[ceil(N/B), ceil(C/cblk), H', W', B, cblk]`` (see
:class:`~vtaforge.runtime.artifact.SlotLayout`).
"""

from __future__ import annotations

import math

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view

__all__ = ["pack_act", "unpack_act", "pack_int4", "unpack_int4", "im2col", "run_cpu_op", "CPU_OPS",
           "CPU_KERNELS", "scale_factor"]


def pack_act(x: np.ndarray, batch: int, cblk: int, pre_pad=(0, 0, 0, 0), dtype=np.int8,
             bits: int | None = None) -> np.ndarray:
    """int8 ``[N, C, H, W]`` (or ``[N, C]``) -> packed ``dtype`` (int8; int16 for 16-bit
    activations) ``[ceil(N/batch), ceil(C/cblk), H+pt+pb, W+pl+pr, batch, cblk]``, zero padded.

    ``bits=4`` (int4 activations of a ``LOG_INP_WIDTH`` 2 core; ``x`` int8 holding
    ``[-8, 7]``): the same layout with each element's ``batch*cblk`` lanes packed two per
    byte (:func:`pack_int4`, lane ``2k`` in the low nibble), uint8 ``[ceil(N/batch),
    ceil(C/cblk), H', W', batch*cblk/2]``.

    Raises:
        ValueError: ``x`` has values outside ``dtype``'s range, or outside ``[-8, 7]`` for
            ``bits=4`` (never silently truncated); ``bits=4`` with an odd ``batch*cblk``.
    """
    if x.ndim == 2:
        x = x[:, :, None, None]
    n, c, h, w = x.shape
    pt, pb, pl, pr = pre_pad
    nb, cb = -(-n // batch), -(-c // cblk)
    if np.dtype(x.dtype).itemsize > np.dtype(dtype).itemsize and x.size:
        ii = np.iinfo(dtype)
        if x.min() < ii.min or x.max() > ii.max:
            raise ValueError(f"packing {x.dtype} values in [{x.min()}, {x.max()}] as "
                             f"{np.dtype(dtype).name}: out of range")
    buf = np.zeros((nb * batch, cb * cblk, h + pt + pb, w + pl + pr), dtype)
    buf[:n, :c, pt:pt + h, pl:pl + w] = x
    buf = buf.reshape(nb, batch, cb, cblk, h + pt + pb, w + pl + pr)
    out = np.ascontiguousarray(buf.transpose(0, 2, 4, 5, 1, 3))
    if bits == 4:
        return pack_int4(out.reshape(out.shape[:4] + (batch * cblk,)))
    return out


def pack_int4(a: np.ndarray) -> np.ndarray:
    """int4 values (any integer dtype, in ``[-8, 7]``) ``[..., L]`` -> uint8 ``[..., L/2]``:
    two values per byte, lane ``2k`` in bits [3:0] and lane ``2k+1`` in bits [7:4] (the
    scratchpad element layout: lanes packed from bit 0, docs/config.md ``LOG_WGT_WIDTH``).

    Raises:
        ValueError: ``L`` odd, or a value outside ``[-8, 7]`` (never silently truncated).
    """
    a = np.asarray(a)
    if a.shape[-1] % 2:
        raise ValueError(f"int4 packing needs an even last axis, got shape {a.shape}")
    if a.size and (a.min() < -8 or a.max() > 7):
        raise ValueError(f"packing values in [{a.min()}, {a.max()}] as int4: out of range "
                         f"[-8, 7]")
    n = (a.astype(np.int64) & 0xF).astype(np.uint8)
    return np.ascontiguousarray(n[..., 0::2] | (n[..., 1::2] << 4))


def unpack_int4(raw: np.ndarray) -> np.ndarray:
    """uint8 ``[..., n]`` (the :func:`pack_int4` layout) -> int8 ``[..., 2n]`` in
    ``[-8, 7]``."""
    raw = np.asarray(raw, np.uint8)
    out = np.empty(raw.shape[:-1] + (2 * raw.shape[-1],), np.int8)
    out[..., 0::2] = (raw & 0xF).astype(np.int8)
    out[..., 1::2] = (raw >> 4).astype(np.int8)
    out[out > 7] -= 16
    return out


def im2col(x: np.ndarray, kernel, strides, pads, rows: tuple[int, int] | None = None
           ) -> np.ndarray:
    """Patch tensor of a convolution input (host-side data movement, no arithmetic).

    Args:
        x: int8 ``[N, C, H, W]``; kernel ``(kh, kw)``; strides ``(sh, sw)``; pads
            ``(top, left, bottom, right)`` (zero padding).
        rows: ``(r0, r1)``: only output rows ``r0 <= oy < r1`` (a row band; only the
            input rows they read are windowed).  Default: every output row.
    Returns:
        int8 ``[N, C*kh*kw, Ho, Wo]`` (``Ho = r1 - r0`` with ``rows``) with channel
        ``(c*kh + i)*kw + j`` at ``(oy, ox)`` equal to the zero-padded
        ``x[:, c, (r0 + oy)*sh + i - top, ox*sw + j - left]``, so that a conv with weights
        ``w[O, C, kh, kw]`` equals the 1x1 conv of this tensor with
        ``w.reshape(O, C*kh*kw, 1, 1)``.
    Raises:
        ValueError: ``rows`` not within ``[0, Ho]`` or empty.
    """
    n, c = x.shape[:2]
    kh, kw = kernel
    xp = _pad(x, pads, 0)
    if rows is not None:
        ho = (xp.shape[2] - kh) // strides[0] + 1
        r0, r1 = (int(v) for v in rows)
        if not 0 <= r0 < r1 <= ho:
            raise ValueError(f"im2col rows {tuple(rows)} are not a band of the {ho} output "
                             f"rows")
        xp = xp[:, :, r0 * strides[0]:(r1 - 1) * strides[0] + kh]
    xw = _win(xp, (kh, kw), strides)                         # n c ho wo kh kw
    ho, wo = xw.shape[2:4]
    return np.ascontiguousarray(xw.transpose(0, 1, 4, 5, 2, 3)).reshape(n, c * kh * kw, ho, wo)


def unpack_act(p: np.ndarray, n: int, c: int, h: int, w: int, batch: int, cblk: int,
               dtype=np.int8, bits: int | None = None) -> np.ndarray:
    """Inverse of :func:`pack_act` (no pre-padding): packed bytes -> ``dtype`` (int8, or
    int16 for 16-bit activations) ``[n, c, h, w]``; ``bits=4``: nibble-packed bytes (two
    lanes per byte, :func:`unpack_int4`) -> int8 in ``[-8, 7]``."""
    nb, cb = -(-n // batch), -(-c // cblk)
    count = nb * cb * h * w * batch * cblk
    if bits == 4:
        a = unpack_int4(np.asarray(p).reshape(-1).view(np.uint8)[:count // 2])
    else:
        a = np.asarray(p).reshape(-1).view(dtype)[:count]
    a = a.reshape(nb, cb, h, w, batch, cblk).transpose(0, 4, 1, 5, 2, 3)
    return np.ascontiguousarray(a.reshape(nb * batch, cb * cblk, h, w)[:n, :c])


# ------------------------------------------------------------------ integer helpers
def _requant(acc: np.ndarray, a: dict, dtype=np.int8) -> np.ndarray:
    acc = acc.astype(np.int64) * int(a.get("mult", 1))
    if isinstance(a["shift"], (tuple, list)):    # per output channel (axis 1)
        shp = (1, len(a["shift"])) + (1,) * (acc.ndim - 2)
        sv = np.asarray(a["shift"], np.int64).reshape(shp)
        rv = np.asarray(a["round"], np.int64).reshape(shp)
        acc = np.where(sv > 0, (acc + rv) >> np.maximum(sv, 0), acc << np.maximum(-sv, 0))
        return np.clip(acc, a["clip_lo"], a["clip_hi"]).astype(dtype)
    s = int(a["shift"])
    if s > 0:
        acc = (acc + int(a["round"])) >> s
    elif s < 0:
        acc = acc << (-s)
    return np.clip(acc, a["clip_lo"], a["clip_hi"]).astype(dtype)


def _qdt(x: np.ndarray):
    """The dtype of an integer kernel's output: its activation input's (int8 or int16)."""
    return np.int16 if x.dtype == np.int16 else np.int8


def _pad(x, pads, value):
    pt, pl, pb, pr = pads
    return np.pad(x, ((0, 0), (0, 0), (pt, pb), (pl, pr)), constant_values=value)


def _win(x, kernel, strides):
    return sliding_window_view(x, tuple(kernel), axis=(2, 3))[:, :, ::strides[0], ::strides[1]]


def _conv_int(x, w, strides, pads, groups):
    n, c = x.shape[:2]
    o, cg, kh, kw = w.shape
    xw = _win(_pad(x.astype(np.int64), pads, 0), (kh, kw), strides)   # n c ho wo kh kw
    ho, wo = xw.shape[2:4]
    og = o // groups
    out = np.zeros((n, o, ho, wo), np.int64)
    for g in range(groups):
        xs = xw[:, g * cg:(g + 1) * cg]
        ws = w[g * og:(g + 1) * og].astype(np.int64)
        out[:, g * og:(g + 1) * og] = np.einsum("nchwij,ocij->nohw", xs, ws)
    return out


def scale_factor(scale: float, inverse: bool = False) -> float:
    """The float64 factor of a quantize (``inverse=True``: ``1/scale``) or dequantize
    (``scale``) with real scale ``scale`` (real = int * scale).

    Computed as ``2.0 ** (-/+ log2(scale))``: exactly ``2**-exp`` / ``2**exp`` for a
    power-of-two scale, and for any other scale the same float64 expression as the
    compiler's integer reference (``compiler/reference.py``), so the two agree bit for bit.

    Raises:
        ValueError: ``scale`` not a positive finite number.
    """
    s = float(scale)
    if not (s > 0 and math.isfinite(s)):
        raise ValueError(f"quantization scale {scale!r} must be a positive finite number")
    e = math.log2(s)
    return 2.0 ** (-e if inverse else e)


def _attr_scale(a: dict) -> float:
    s = a.get("scale")
    return 2.0 ** a["exp"] if s is None else s


def _quantize(a, ins, scales):
    if a.get("channel_exps") is not None:
        # a per-channel activation (NCHW, int8): channel c at 2**channel_exps[c]
        f = 2.0 ** -np.asarray(a["channel_exps"], np.float64).reshape(1, -1, 1, 1)
    else:
        f = scale_factor(_attr_scale(a), inverse=True)
    q = np.floor(ins[0].astype(np.float64) * f + 0.5)
    name = a.get("dtype", "int8")
    if name == "int4":      # int4 activations: [-8, 7] held in int8 (numpy has no int4)
        return np.clip(q, -8, 7).astype(np.int8)
    dt = np.dtype(name)
    if dt not in (np.int8, np.int16):
        raise ValueError(f"quantize to {dt.name}: only int4, int8 and int16 activations")
    ii = np.iinfo(dt)
    return np.clip(q, ii.min, ii.max).astype(dt)


def _dequantize(a, ins, scales):
    if not scales or scales.get("in") is None:
        raise ValueError("dequantize needs the real scale of its input")
    return (ins[0].astype(np.float64) * scale_factor(scales["in"])).astype(np.float32)


def _flatten(a, ins, scales):
    ax = a["axis"] if a["axis"] >= 0 else a["axis"] + ins[0].ndim
    return ins[0].reshape(int(np.prod(ins[0].shape[:ax], dtype=np.int64)), -1)


def _reshape(a, ins, scales):
    return ins[0].reshape([ins[0].shape[i] if d == 0 else d for i, d in enumerate(a["shape"])])


def _softmax(a, ins, scales):
    x = ins[0].astype(np.float64)
    e = np.exp(x - x.max(axis=a["axis"], keepdims=True))
    return (e / e.sum(axis=a["axis"], keepdims=True)).astype(np.float32)


def _qconv2d(a, ins, scales):
    acc = _conv_int(ins[0], ins[1], a["strides"], a["pads"], a["groups"])
    return _requant(acc + ins[2].astype(np.int64).reshape(1, -1, 1, 1), a, _qdt(ins[0]))


def _qdense(a, ins, scales):
    return _requant(ins[0].astype(np.int64) @ ins[1].astype(np.int64).T + ins[2].astype(np.int64), a,
                    _qdt(ins[0]))


def _qadd(a, ins, scales):
    acc = (ins[0].astype(np.int64) << int(a["lshift_a"])) + (ins[1].astype(np.int64) << int(a["lshift_b"]))
    return _requant(acc, a, _qdt(ins[0]))


def _qmax_pool(a, ins, scales):
    dt = _qdt(ins[0])
    xp = _pad(ins[0].astype(np.int64), a["pads"], np.iinfo(dt).min)
    return _win(xp, a["kernel"], a["strides"]).max(axis=(-2, -1)).astype(dt)


def _qavg_pool(a, ins, scales):
    xp = _pad(ins[0].astype(np.int64), a["pads"], 0)
    acc = _win(xp, a["kernel"], a["strides"]).sum(axis=(-2, -1))
    d = int(a["divisor"])
    return np.clip(np.floor_divide(2 * acc + d, 2 * d), a["clip_lo"], a["clip_hi"]).astype(_qdt(ins[0]))


#: ``op -> kernel(attrs, inputs, scales)``: every CPU step that is not a real-valued IR op or
#: an ONNX node (those are :mod:`.cpu_float`'s).
CPU_KERNELS = {
    "quantize": _quantize,
    "dequantize": _dequantize,
    "flatten": _flatten,
    "reshape": _reshape,
    "transpose": lambda a, ins, sc: np.ascontiguousarray(np.transpose(ins[0], a["perm"])),
    "concat": lambda a, ins, sc: np.concatenate(ins, axis=a["axis"]),
    "upsample": lambda a, ins, sc: np.repeat(np.repeat(ins[0], a["scales"][0], axis=2), a["scales"][1], axis=3),
    "pad": lambda a, ins, sc: np.pad(ins[0], ((0, 0), (0, 0), (a["pads"][0], a["pads"][2]),
                                              (a["pads"][1], a["pads"][3]))),
    "softmax": _softmax,
    "qconv2d": _qconv2d,
    "qdense": _qdense,
    "qadd": _qadd,
    "qmul": lambda a, ins, sc: _requant(ins[0].astype(np.int64) * ins[1].astype(np.int64), a,
                                        _qdt(ins[0])),
    "qrequant": lambda a, ins, sc: _requant(ins[0].astype(np.int64), a, _qdt(ins[0])),
    "qmax_pool": _qmax_pool,
    "qmax": lambda a, ins, sc: np.maximum(ins[0], ins[1]),
    "qmin": lambda a, ins, sc: np.minimum(ins[0], ins[1]),
    "qavg_pool": _qavg_pool,
}
CPU_OPS = tuple(CPU_KERNELS)


def run_cpu_op(op: str, attrs: dict, ins: list, scales: dict | None = None) -> np.ndarray:
    """Run one CPU step with its kernel from :data:`CPU_KERNELS`.

    Args:
        op: IR op name; attrs: its attributes (``quantize``: ``scale``, the real scale of
            the output, default ``2**exp``); ins: input arrays (activations then
            constants, in the node's input order).
        scales: ``{"in": real scale of input 0}`` for ``dequantize``.
    Raises:
        ValueError: an op this module cannot run, a missing or bad scale.
    """
    k = CPU_KERNELS.get(op)
    if k is None:
        raise ValueError(f"the CPU executor cannot run op {op!r}")
    return k(attrs, ins, scales)
