"""Per-output-channel requantization in the conv/dense lowering (issue 21).

A ``qconv2d`` / ``qdense`` whose ``shift`` and ``round`` are tuples of one int per output
channel lowers with a bias constant ``b`` of ``2 * nob`` ACC entries (bias + round, then
the shift amounts) and a tensor-operand ALU SHR.  Oracle: numpy int64 arithmetic written
here.  Scalar-shift programs are pinned to hashes recorded from the lowering before this
change (:data:`SCALAR_HASHES`).
"""

from __future__ import annotations

import hashlib
import json

import numpy as np
import pytest

from vtaforge.compiler.lower_conv import lower_conv, lower_conv_bands, lower_dense
from vtaforge.hw.config import preset

PYNQ = preset("pynq")
REQ = PYNQ.replace(ALU_REQUANT=True)
ENG = PYNQ.replace(ALU_REQUANT=True, REQ_ENGINE=True)
CFGS = {"pynq": PYNQ, "req": REQ, "eng": ENG, "tiny": preset("tiny")}


def _pattern(shape, mod, off, dtype):
    """Deterministic pseudo-random integers in ``[-off, mod - off)`` (no RNG: the recorded
    hashes must not depend on numpy's generators)."""
    n = int(np.prod(shape))
    v = (np.arange(n, dtype=np.int64) * 7919 + 104729) % 65521 % mod - off
    return v.reshape(shape).astype(dtype)


def _digest(lo=None, trace=None) -> str:
    """sha256 of everything a lowering emits: the trace's ops, kernels (fields and micro-op
    index arrays), block bytes, the packed constants and the slot layouts (not the
    statistics)."""
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
        return h.hexdigest()[:16]
    for name in sorted(lo.consts):
        a = np.ascontiguousarray(lo.consts[name])
        h.update(f"{name}:{a.dtype.str}:{a.shape}".encode())
        h.update(a.tobytes())
    h.update(json.dumps({k: v.to_json() for k, v in sorted(lo.layouts.items())}).encode())
    return h.hexdigest()[:16]


def _scalar_attrs(k, s, p, groups, shift, lo=-128, hi=127):
    return {"kernel": (k, k), "strides": (s, s), "pads": (p,) * 4, "groups": groups,
            "shift": shift, "round": 1 << (shift - 1) if shift > 0 else 0, "mult": 1,
            "clip_lo": lo, "clip_hi": hi}


#: (name, config, kind, args): convs ``(cin, cout, h, k, s, p, groups)`` and denses
#: ``(k, m)`` of the existing lowering tests (test_lower_conv*.py, test_lower_conv_roofline)
SCALAR_CASES = [
    ("pynq-3x3", "pynq", "conv", (64, 64, 14, 3, 1, 1, 1)),
    ("pynq-dw", "pynq", "conv", (32, 32, 14, 3, 1, 1, 32)),
    ("pynq-1x1s2", "pynq", "conv", (64, 128, 28, 1, 2, 0, 1)),
    ("pynq-im2col", "pynq", "conv", (3, 16, 16, 3, 2, 1, 1)),
    ("pynq-5x5-17", "pynq", "conv", (17, 20, 9, 5, 1, 2, 1)),
    ("pynq-dense", "pynq", "dense", (256, 10)),
    ("pynq-dense-big", "pynq", "dense", (512, 1000)),
    ("tiny-3x3", "tiny", "conv", (16, 16, 8, 3, 1, 1, 1)),
    ("req-3x3", "req", "conv", (64, 64, 14, 3, 1, 1, 1)),
    ("req-dense", "req", "dense", (256, 10)),
    ("eng-c10", "eng", "conv", (256, 512, 14, 1, 2, 0, 1)),
    ("eng-c7", "eng", "conv", (128, 256, 28, 1, 2, 0, 1)),
    ("eng-3x3", "eng", "conv", (64, 64, 14, 3, 1, 1, 1)),
    ("eng-dw", "eng", "conv", (128, 128, 14, 3, 1, 1, 128)),
    ("eng-dw-s2", "eng", "conv", (64, 64, 28, 3, 2, 1, 64)),
    ("eng-dense", "eng", "dense", (512, 100)),
    ("eng-im2col", "eng", "conv", (3, 32, 32, 3, 1, 1, 1)),
    ("pynq-3x3-bias-load", "pynq", "conv-bias-load", (64, 64, 14, 3, 1, 1, 1)),
]

#: recorded from the lowering of a494e5a (before per-channel requantization)
SCALAR_HASHES = {
    "pynq-3x3": "1df491a002462e31", "pynq-dw": "b4103e2523f15abb",
    "pynq-1x1s2": "3fffb6d58feb139e", "pynq-im2col": "0ad4f7a5f206597d",
    "pynq-5x5-17": "5960af4bee706d05", "pynq-dense": "c744b4d53d674dca",
    "pynq-dense-big": "be3ff14b0b5eeb13", "tiny-3x3": "ce52cefbdf618ee2",
    "req-3x3": "029a61219aa8af67", "req-dense": "3d926934ab1d5a14",
    "eng-c10": "0445dc9462486dc3", "eng-c7": "7d50cb30821d9c08",
    "eng-3x3": "71a9a8441935f89d", "eng-dw": "a1b6e3880be40b30",
    "eng-dw-s2": "b862e6aff3b00858", "eng-dense": "7dcc4c7a5239a53a",
    "eng-im2col": "a4c659524f12bd18", "pynq-3x3-bias-load": "3d296db9f52bfae9",
    # lower_conv_bands at eng, 64 -> 32 1x1 on 8x8: bands of 4, 2, 1 rows (traces only)
    "eng-bands": ["d9a9a6a8e8e3e343", "aadf140479edb04b", "1f3bf15e3ad593af"],
}


def _lower_scalar(cfg, kind, args):
    kw = {}
    if kind == "conv-bias-load":
        kind, kw = "conv", {"bias_load": True}
    if kind == "dense":
        k, m = args
        w = _pattern((m, k), 255, 127, np.int8)
        b = _pattern((m,), 20001, 10000, np.int32)
        return lower_dense(cfg, "d", k, w, b, _scalar_attrs(1, 1, 0, 1, 9))
    cin, cout, h, k, s, p, g = args
    w = _pattern((cout, cin // g, k, k), 255, 127, np.int8)
    b = _pattern((cout,), 20001, 10000, np.int32)
    return lower_conv(cfg, "c", (cin, h, h), w, b, _scalar_attrs(k, s, p, g, 8), **kw)


@pytest.mark.parametrize("name,cfg,kind,args", SCALAR_CASES, ids=[c[0] for c in SCALAR_CASES])
def test_scalar_shift_programs_unchanged(name, cfg, kind, args):
    assert _digest(_lower_scalar(CFGS[cfg], kind, args)) == SCALAR_HASHES[name]


def test_scalar_shift_bands_unchanged():
    w = _pattern((32, 64, 1, 1), 255, 127, np.int8)
    b = _pattern((32,), 20001, 10000, np.int32)
    bands = lower_conv_bands(ENG, "bd", (64, 8, 8), w, b, _scalar_attrs(1, 1, 0, 1, 8))
    got = [_digest(trace=r.trace) for r in bands]
    assert [r.rows for r in bands] == [4, 2, 1]
    assert got == SCALAR_HASHES["eng-bands"]
