"""Program identity (issue 23): SHA-256 of every program the conv / pool lowerings emit for
the models, configs and lowering variants the tests and benches use, so a refactor of the
lowering can be shown to change no instruction, micro-op or constant.

A *case* is a name and a thunk that returns what it lowers: a :class:`LoweredOp`, a list
of traces (row bands), or a compiled model (every VTA step's trace, constants, layouts and
row bands).  :func:`digest` hashes the trace's ops and kernels (fields and micro-op index
arrays), its block bytes, the packed constants and the slot layouts (never the statistics).

Cases marked ``cheap`` are recompiled by ``tests/compiler/test_program_identity.py``; the
whole set by ``bench/program_identity.py`` (``--record`` rewrites the JSON, the default
checks it).  The recorded hashes are in ``tests/compiler/program_identity.json``.

Lowering variants that tests flip (the former module switches, now
:class:`~vtaforge.compiler.options.ConvOptions` fields, ``bias_load`` among them, and
``lower_pool``'s ``separable`` / ``gemm_copy``) are cases with ``opts`` / ``bias_load`` /
``sep`` / ``gemm_copy``.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import numpy as np

from vtaforge.hw.config import preset

JSON_PATH = Path(__file__).resolve().parent.parent / "compiler" / "program_identity.json"


def pattern(shape, mod, off, dtype):
    """Deterministic pseudo-random integers in ``[-off, mod - off)`` (no RNG: recorded hashes
    must not depend on numpy's generators)."""
    n = int(np.prod(shape))
    v = (np.arange(n, dtype=np.int64) * 7919 + 104729) % 65521 % mod - off
    return v.reshape(shape).astype(dtype)


def digest(lo=None, trace=None, n: int = 64) -> str:
    """sha256 (first ``n`` hex digits) of everything a lowering emits: the trace's ops,
    kernels (fields and micro-op index arrays), block bytes, the packed constants and the
    slot layouts (not the statistics).  ``trace`` alone: the trace only."""
    h = hashlib.sha256()
    tr = lo.trace if trace is None else trace
    d = tr.to_json()
    h.update(json.dumps([d["ops"], d["kernels"], d["block_bytes"]], sort_keys=True,
                        default=int).encode())
    for k in tr.kernels:
        for a in (k.dst, k.src, k.wgt):
            h.update(np.asarray(a, np.int64).tobytes())
            h.update(b"|")
    if lo is None:
        return h.hexdigest()[:n]
    for name in sorted(lo.consts):
        a = np.ascontiguousarray(lo.consts[name])
        h.update(f"{name}:{a.dtype.str}:{a.shape}".encode())
        h.update(a.tobytes())
    h.update(json.dumps({k: v.to_json() for k, v in sorted(lo.layouts.items())}).encode())
    return h.hexdigest()[:n]


def model_digests(cm) -> dict[str, str]:
    """Per VTA step of a compiled model: the digest of its trace, constants and layouts,
    and of each row band's traces."""
    from vtaforge.compiler.lower_common import LoweredOp

    out = {}
    for s in cm.steps:
        if s.target != "vta":
            continue
        consts = {k: cm.constants[v] for k, v in s.slots.items() if v in cm.constants}
        out[s.name] = digest(LoweredOp(s.trace, consts, dict(s.layouts)))
        for i, b in enumerate(s.bands or []):
            out[f"{s.name}@band{i}"] = [digest(trace=t) for t in (b.trace, b.tail)
                                        if t is not None]
    return out


# ------------------------------------------------------------------ configs
PYNQ = preset("pynq")
TINY = preset("tiny")
CFGS = {
    "pynq": PYNQ,
    "req": PYNQ.replace(ALU_REQUANT=True),
    "eng": PYNQ.replace(ALU_REQUANT=True, REQ_ENGINE=True),
    "tiny": TINY,
    "tiny-req": TINY.replace(ALU_REQUANT=True),
    "tiny-eng": TINY.replace(ALU_REQUANT=True, REQ_ENGINE=True),
    "batch2": preset("batch2"),
    "tiny16": TINY.replace(LOG_INP_WIDTH=4, LOG_WGT_WIDTH=4, LOG_INP_BUFF_SIZE=13,
                           LOG_WGT_BUFF_SIZE=14),
    "tiny-i16w8": TINY.replace(LOG_INP_WIDTH=4, LOG_INP_BUFF_SIZE=13),
    "tiny-i16w8-req": TINY.replace(LOG_INP_WIDTH=4, LOG_INP_BUFF_SIZE=13, ALU_REQUANT=True),
    "tiny-w4": TINY.replace(LOG_WGT_WIDTH=2, LOG_WGT_BUFF_SIZE=12),
    "pynq-w4": PYNQ.replace(LOG_WGT_WIDTH=2, LOG_WGT_BUFF_SIZE=17),
    "tiny-a4w8": TINY.replace(LOG_INP_WIDTH=2, LOG_INP_BUFF_SIZE=9),
    "tiny-a4w4": TINY.replace(LOG_INP_WIDTH=2, LOG_WGT_WIDTH=2, LOG_INP_BUFF_SIZE=9,
                              LOG_WGT_BUFF_SIZE=12),
    "pynq-a4": PYNQ.replace(LOG_INP_WIDTH=2, LOG_INP_BUFF_SIZE=14),
    "tiny-q1": TINY.replace(TOKEN_QUEUE_DEPTH=1),
    "tiny-q2": TINY.replace(TOKEN_QUEUE_DEPTH=2),
    "pynq-q1": PYNQ.replace(TOKEN_QUEUE_DEPTH=1),
    "pynq-q2": PYNQ.replace(TOKEN_QUEUE_DEPTH=2),
    "eng-q1": PYNQ.replace(ALU_REQUANT=True, REQ_ENGINE=True, TOKEN_QUEUE_DEPTH=1),
    "eng-fwd": PYNQ.replace(ALU_REQUANT=True, REQ_ENGINE=True, ALU_FORWARD=True),
    "tiny-eng-fwd": TINY.replace(ALU_REQUANT=True, REQ_ENGINE=True, ALU_FORWARD=True),
}


def _wdtype(cfg):
    return np.int16 if cfg.WGT_WIDTH == 16 else np.int8


def _wrange(cfg):
    return (15, 7) if cfg.WGT_WIDTH == 4 else (255, 127)


def _clip(cfg):
    a = cfg.INP_WIDTH
    return -(1 << (a - 1)), (1 << (a - 1)) - 1


def scalar_attrs(k, s, p, groups, shift, lo=-128, hi=127):
    """Scalar-requantize conv attributes (square kernel ``k``, stride ``s``, pad ``p``)."""
    return {"kernel": (k, k), "strides": (s, s), "pads": (p,) * 4, "groups": groups,
            "shift": shift, "round": 1 << (shift - 1) if shift > 0 else 0, "mult": 1,
            "clip_lo": lo, "clip_hi": hi}


def _pc_shifts(o):
    s = pattern((o,), 24, 3, np.int64)
    s[0], s[-1] = 0, -2
    if o > 2:
        s[1] = 20
    return s


def _options(cfg, opts, bias_load=False) -> dict:
    """The variant ``opts`` ({former switch name: value}) and ``bias_load`` (formerly a
    ``lower_conv`` keyword) as ``lower_conv`` keywords: a ``ConvOptions`` of the
    lower-cased names.  (The pins were recorded before the redesign by setting those
    module switches, at commit d311b15.)"""
    from vtaforge.compiler.options import ConvOptions

    fields = {k.lower(): v for k, v in (opts or {}).items()}
    if bias_load:
        fields["bias_load"] = True
    if not fields:
        return {}
    return {"options": ConvOptions.for_config(cfg, **fields)}


def conv(cfg_name, cin, cout, h, k, s, p, groups=1, *, wd=None, shift=8, per_channel=False,
         opts=None, bias_load=False, **kw):
    """Lower one conv of pattern weights on ``CFGS[cfg_name]``."""
    from vtaforge.compiler.lower_conv import lower_conv

    cfg = CFGS[cfg_name]
    mod, off = _wrange(cfg)
    w = pattern((cout, cin // groups, k, k), mod, off, _wdtype(cfg))
    b = pattern((cout,), 20001, 10000, np.int32)
    lo, hi = _clip(cfg)
    a = scalar_attrs(k, s, p, groups, shift, lo, hi)
    if per_channel:
        sh = _pc_shifts(cout)
        a["shift"] = [int(v) for v in sh]
        a["round"] = [int(1 << (v - 1)) if v > 0 else 0 for v in sh]
    return lower_conv(cfg, "c", (cin, h, h if wd is None else wd), w, b, a, **kw,
                      **_options(cfg, opts, bias_load))


def dense(cfg_name, k, m, *, per_channel=False):
    """Lower one dense layer of pattern weights on ``CFGS[cfg_name]``."""
    from vtaforge.compiler.lower_conv import lower_dense

    cfg = CFGS[cfg_name]
    mod, off = _wrange(cfg)
    w = pattern((m, k), mod, off, _wdtype(cfg))
    b = pattern((m,), 20001, 10000, np.int32)
    lo, hi = _clip(cfg)
    a = scalar_attrs(1, 1, 0, 1, 9, lo, hi)
    if per_channel:
        sh = _pc_shifts(m)
        a["shift"] = [int(v) for v in sh]
        a["round"] = [int(1 << (v - 1)) if v > 0 else 0 for v in sh]
    return lower_dense(cfg, "d", k, w, b, a)


def bands(cfg_name, cin, cout, h, k, s, p, groups=1):
    """Row bands of one conv: the traces of every band variant."""
    from vtaforge.compiler.lower_conv import lower_conv_bands

    cfg = CFGS[cfg_name]
    w = pattern((cout, cin // groups, k, k), 255, 127, np.int8)
    b = pattern((cout,), 20001, 10000, np.int32)
    out = lower_conv_bands(cfg, "bd", (cin, h, h), w, b, scalar_attrs(k, s, p, groups, 8))
    return [t for r in out for t in (r.trace, r.tail) if t is not None]


def pool(cfg_name, k, s, pads, c, hw, kind="max", sep=True, gemm_copy=True):
    """Lower one pooling layer (``sep``: the separable max-pool, else per window;
    ``gemm_copy``: its INP-load and identity-GEMM form where the core allows it)."""
    from vtaforge.compiler import lower_eltwise

    cfg = CFGS[cfg_name]
    attrs = {"kernel": k, "strides": s, "pads": pads}
    if kind == "avg":
        n = k[0] * k[1]
        attrs.update(divisor=n, shift=n.bit_length() - 1, round=n // 2, mult=1, clip_lo=-128,
                     clip_hi=127)
    return lower_eltwise.lower_pool(cfg, "p", (c,) + tuple(hw), attrs, kind, separable=sep,
                                    gemm_copy=gemm_copy)


def compiled(model: str, cfg_name: str, size: int = 224):
    """A whole model compiled with ``compile_model`` (seeded calibration data)."""
    from vtaforge.compiler.compile import compile_model
    from vtaforge.compiler.zoo import mobilenet_v1, resnet18

    cfg = CFGS[cfg_name]
    if model == "digits":
        from vtaforge.compiler.models import DIGITS_ONNX, load_digits_split

        return compile_model(str(DIGITS_ONNX), load_digits_split()[0], cfg)
    m = {"resnet18": resnet18, "mobilenet_v1": mobilenet_v1}[model](size)
    x = np.random.default_rng(0).standard_normal((2, 3, size, size)).astype(np.float32)
    return compile_model(m, x, cfg)


# ------------------------------------------------------------------ the cases
@dataclass
class Case:
    """One named lowering; ``cheap`` ones run in the unit test."""

    name: str
    run: Callable
    cheap: bool = False
    kind: str = "lowered"        # "lowered", "traces" or "model"
    meta: dict = field(default_factory=dict)


def hashes_of(case: Case):
    """The recorded form of a case: a hex digest, or a list / dict of them."""
    r = case.run()
    if case.kind == "traces":
        return [digest(trace=t) for t in r]
    if case.kind == "model":
        return model_digests(r)
    return digest(r)


def _workload_args(wl, div=1):
    h = max(wl.height // div, wl.kernel_h)
    return (wl.in_channels, wl.out_channels, h, wl.kernel_h, wl.stride_h, wl.pad_h,
            wl.groups)


def cases() -> list[Case]:
    """Every case, cheap ones first."""
    from vtaforge.compiler.zoo import MOBILENET_WORKLOADS, RESNET18_WORKLOADS

    out: list[Case] = []

    def add(name, fn, cheap=False, kind="lowered"):
        out.append(Case(name, fn, cheap, kind))

    # the lowering tests' shapes (test_lower_perchannel SCALAR_CASES and friends)
    small = {
        "3x3": (64, 64, 14, 3, 1, 1, 1), "dw": (32, 32, 14, 3, 1, 1, 32),
        "1x1s2": (64, 128, 28, 1, 2, 0, 1), "im2col": (3, 16, 16, 3, 2, 1, 1),
        "5x5-17": (17, 20, 9, 5, 1, 2, 1), "dw128": (128, 128, 14, 3, 1, 1, 128),
        "dw-s2": (64, 64, 28, 3, 2, 1, 64), "c10": (256, 512, 14, 1, 2, 0, 1),
        "c7": (128, 256, 28, 1, 2, 0, 1), "pw512": (512, 512, 14, 1, 1, 0, 1),
        "quad": (32, 64, 28, 1, 1, 0, 1), "stream3x3": (256, 256, 7, 3, 1, 1, 1),
        "1x1": (64, 96, 9, 1, 1, 0, 1), "3x3s2": (32, 48, 11, 3, 2, 1, 1),
    }
    tiny_small = {
        "3x3": (16, 16, 8, 3, 1, 1, 1), "dw": (12, 12, 9, 3, 1, 1, 12),
        "1x1s2": (64, 64, 8, 1, 2, 0, 1), "1x1": (32, 32, 8, 1, 1, 0, 1),
        "4to8": (4, 8, 20, 1, 1, 0, 1), "3x3-10": (16, 16, 10, 3, 1, 1, 1),
        "3x3-6": (64, 64, 6, 3, 1, 1, 1), "im2col": (3, 8, 12, 3, 1, 1, 1),
        "5x5": (8, 12, 9, 5, 2, 2, 1),
    }
    for cfg in ("pynq", "req", "eng", "pynq-q1", "pynq-q2", "eng-q1", "pynq-w4", "pynq-a4"):
        cheap_set = {"3x3", "dw", "1x1s2", "im2col", "c10", "dw128", "quad", "c7"} \
            if cfg in ("pynq", "req", "eng") else {"3x3", "1x1s2"}
        for nm, a in small.items():
            add(f"conv/{cfg}/{nm}", lambda c=cfg, a=a: conv(c, *a), nm in cheap_set)
        add(f"dense/{cfg}/256x10", lambda c=cfg: dense(c, 256, 10), True)
        add(f"dense/{cfg}/512x1000", lambda c=cfg: dense(c, 512, 1000))
    for cfg in ("tiny", "tiny-req", "tiny-eng", "batch2", "tiny16", "tiny-i16w8",
                "tiny-i16w8-req", "tiny-w4", "tiny-a4w8", "tiny-a4w4", "tiny-q1", "tiny-q2"):
        for nm, a in tiny_small.items():
            add(f"conv/{cfg}/{nm}", lambda c=cfg, a=a: conv(c, *a), nm in ("3x3", "dw", "1x1s2"))
        add(f"dense/{cfg}/64x10", lambda c=cfg: dense(c, 64, 10), True)
    # non-default lowering arguments
    add("conv/pynq/3x3-bias-load", lambda: conv("pynq", 64, 64, 14, 3, 1, 1, bias_load=True), True)
    add("conv/eng/3x3-bias-load", lambda: conv("eng", 64, 64, 14, 3, 1, 1, bias_load=True))
    add("conv/eng/1x1-out-rows", lambda: conv("eng", 64, 32, 4, 1, 1, 0, out_rows=8), True)
    add("conv/pynq/3x3-pre-pad", lambda: conv("pynq", 32, 32, 10, 3, 1, 1, pre_pad=True), True)
    add("conv/pynq/3x3-no-im2col", lambda: conv("pynq", 3, 16, 16, 3, 2, 1, im2col=False))
    add("conv/tiny/3x3-wide", lambda: conv("tiny", 16, 16, 6, 3, 1, 1, wd=13))
    add("bands/eng/1x1", lambda: bands("eng", 64, 32, 8, 1, 1, 0), True, "traces")
    add("bands/pynq/im2col", lambda: bands("pynq", 3, 16, 32, 3, 2, 1), True, "traces")
    add("bands/tiny/1x1", lambda: bands("tiny", 16, 16, 9, 1, 1, 0), False, "traces")
    # the variants tests flip (formerly module switches)
    variants = [
        ("OB_LOOP", False, "eng", (64, 64, 8, 1, 1, 0, 1)),
        ("OB_LOOP", False, "eng", (512, 512, 14, 1, 1, 0, 1)),
        ("STREAMED_IB_MAJOR", False, "eng", (256, 256, 7, 3, 1, 1, 1)),
        ("STREAMED_IB_MAJOR", False, "pynq", (256, 256, 7, 3, 1, 1, 1)),
        ("KEEP_CLEARED", False, "eng", (32, 32, 112, 3, 1, 1, 32)),
        ("STEP_REQ", False, "eng", (1024, 1024, 7, 3, 1, 1, 1024)),
        ("CLEARING_REQ", False, "req", (64, 64, 14, 3, 1, 1, 1)),
        ("CLEARING_REQ", False, "tiny-req", (8, 8, 16, 3, 1, 1, 1)),
        ("CLEARING_REQ", False, "eng", (64, 64, 14, 3, 1, 1, 1)),
    ]
    for name, val, cfg, a in variants:
        add(f"variant/{name}={val}/{cfg}/{'x'.join(map(str, a))}",
            lambda n=name, v=val, c=cfg, a=a: conv(c, *a, opts={n: v}), a[2] <= 28)
    for a in [(64, 64, 8, 1, 2, 0, 1), (32, 32, 8, 1, 1, 0, 1), (16, 16, 10, 3, 1, 1, 1),
              (4, 8, 20, 1, 1, 0, 1), (64, 64, 6, 3, 1, 1, 1)]:
        add(f"variant/W_CHUNK_BEATS=2,QUAD_ACC_RATIO=0.25/tiny-eng/{'x'.join(map(str, a))}",
            lambda a=a: conv("tiny-eng", *a, opts={"W_CHUNK_BEATS": 2, "QUAD_ACC_RATIO": 0.25}),
            True)
    # per-output-channel requantize (test_lower_perchannel)
    pc = [(16, 32, 8, 3, 1, 1, 1), (64, 64, 14, 3, 1, 1, 1), (32, 32, 10, 3, 1, 1, 32),
          (128, 128, 14, 3, 1, 1, 128), (64, 96, 9, 1, 1, 0, 1), (64, 128, 28, 1, 2, 0, 1),
          (32, 48, 11, 3, 2, 1, 1), (3, 24, 16, 3, 2, 1, 1)]
    for cfg in ("pynq", "eng", "req", "tiny"):
        for a in pc:
            add(f"perchannel/{cfg}/{'x'.join(map(str, a))}",
                lambda c=cfg, a=a: conv(c, *a, per_channel=True), a[2] <= 14 and a[0] <= 64)
        add(f"perchannel-dense/{cfg}/256x100", lambda c=cfg: dense(c, 256, 100, per_channel=True),
            True)
    add("perchannel/eng/3x3-bias-load",
        lambda: conv("eng", 64, 64, 14, 3, 1, 1, per_channel=True, bias_load=True), True)
    add("perchannel/batch2/17x21", lambda: conv("batch2", 17, 21, 7, 3, 1, 1, wd=6,
                                                  per_channel=True), True)
    # pooling (the separable max-pool and its per-window form)
    pools = [((3, 3), (2, 2), (1, 1, 1, 1), 16, (30, 23)), ((3, 2), (2, 2), (1, 0, 0, 1), 5, (11, 8)),
             ((5, 5), (3, 3), (2, 2, 2, 2), 3, (13, 14)), ((3, 3), (3, 3), (0, 0, 0, 0), 8, (9, 12)),
             ((3, 3), (2, 2), (1, 1, 1, 1), 64, (112, 112))]
    for cfg in ("tiny", "pynq"):
        for i, p in enumerate(pools):
            for sep in (True, False):
                add(f"pool/{cfg}/max{i}/sep={sep}", lambda c=cfg, p=p, s=sep: pool(c, *p, sep=s),
                    i < 2)
        add(f"pool/{cfg}/avg2x2", lambda c=cfg: pool(c, (2, 2), (2, 2), (0,) * 4, 16, (8, 8),
                                                     "avg"), True)
    # the separable max-pool's engine and forwarding forms (the GEMM copy)
    for cfg in ("eng", "eng-fwd", "tiny-eng", "tiny-eng-fwd"):
        for i, p in enumerate(pools):
            add(f"pool/{cfg}/max{i}/sep=True", lambda c=cfg, p=p: pool(c, *p), i < 2)
    add("pool/pynq/max4/acc8", lambda: pool("pynq", *pools[4], gemm_copy=False))
    # ResNet-18 and MobileNet-v1 layer tables at full size (pynq family) and quarter size
    for wl in RESNET18_WORKLOADS + MOBILENET_WORKLOADS:
        for cfg in ("pynq", "req", "eng"):
            add(f"workload/{cfg}/{wl.name}", lambda c=cfg, wl=wl: conv(c, *_workload_args(wl)))
        for cfg in ("tiny", "tiny-eng", "pynq-q1"):
            add(f"workload/{cfg}/{wl.name}/4", lambda c=cfg, wl=wl: conv(c, *_workload_args(wl, 4)))
    # whole models through compile_model
    add("model/digits/pynq", lambda: compiled("digits", "pynq"), False, "model")
    add("model/digits/tiny", lambda: compiled("digits", "tiny"), False, "model")
    add("model/digits/eng", lambda: compiled("digits", "eng"), False, "model")
    add("model/digits/tiny-q1", lambda: compiled("digits", "tiny-q1"), False, "model")
    add("model/resnet18/pynq", lambda: compiled("resnet18", "pynq"), False, "model")
    add("model/mobilenet_v1/pynq", lambda: compiled("mobilenet_v1", "pynq"), False, "model")
    add("model/resnet18-64/eng", lambda: compiled("resnet18", "eng", 64), False, "model")
    add("model/mobilenet_v1-64/eng", lambda: compiled("mobilenet_v1", "eng", 64), False, "model")
    return sorted(out, key=lambda c: not c.cheap)


def load() -> dict:
    """The recorded hashes: ``{case name: hashes}``."""
    return json.loads(JSON_PATH.read_text())
