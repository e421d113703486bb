"""Per-output-channel requantization in the conv/dense lowering (issue 21).

A ``qconv2d`` / ``qdense`` whose ``shift`` and ``round`` are tuples of one int per output
channel lowers with a bias constant ``b`` of ``2 * nob`` ACC entries (bias + round, then
the shift amounts) and a tensor-operand ALU SHR.  Oracle: numpy int64 arithmetic written
here.  Scalar-shift programs are pinned to hashes recorded from the lowering before this
change (:data:`SCALAR_HASHES`).
"""

from __future__ import annotations

import numpy as np
import pytest

from program_identity import digest
from program_identity import pattern as _pattern
from vtaforge.compiler.errors import CompileError
from vtaforge.compiler.lower_conv import lower_conv, lower_conv_bands, lower_dense
from vtaforge.compiler.options import ConvOptions
from vtaforge.hw.config import preset
from vtaforge.hw.isa import AluOp
from vtaforge.runtime.artifact import replay
from vtaforge.runtime.builder import ProgramBuilder
from vtaforge.runtime.fsim import FsimDevice

PYNQ = preset("pynq")
REQ = PYNQ.replace(ALU_REQUANT=True)
ENG = PYNQ.replace(ALU_REQUANT=True, REQ_ENGINE=True)
CFGS = {"pynq": PYNQ, "req": REQ, "eng": ENG, "tiny": preset("tiny")}


def _digest(lo=None, trace=None) -> str:
    """The first 16 hex digits of :func:`program_identity.digest` (the program pins of
    ``program_identity.json`` use the same hash)."""
    return digest(lo, trace, 16)


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


#: the recorded hashes are of programs before merged STOREs (ConvOptions.merge_stores,
#: 2026-12-08), which ``merge_stores=False`` reproduces exactly
OLD = ConvOptions(merge_stores=False)


def _lower_scalar(cfg, kind, args, options=OLD):
    kw = {"options": options}
    if kind == "conv-bias-load":
        kind, kw = "conv", {"options": ConvOptions(bias_load=True, merge_stores=False)}
    if kind == "dense":
        k, m = args
        w = _pattern((m, k), 255, 127, np.int8)
        b = _pattern((m,), 20001, 10000, np.int32)
        return lower_dense(cfg, "d", k, w, b, _scalar_attrs(1, 1, 0, 1, 9), **kw)
    cin, cout, h, k, s, p, g = args
    w = _pattern((cout, cin // g, k, k), 255, 127, np.int8)
    b = _pattern((cout,), 20001, 10000, np.int32)
    return lower_conv(cfg, "c", (cin, h, h), w, b, _scalar_attrs(k, s, p, g, 8), **kw)


#: the depthwise cases' programs under the default tiler since it costs a tile by the input
#: blocks it reads (ConvOptions.tile_span, 2026-12-07: tiles of one output block); the
#: recorded SCALAR_HASHES are theirs with ``tile_span=False``
DW_DEFAULT_HASHES = {"pynq-dw": "b6e328c963861668", "eng-dw": "2d5e1dd3711ef749",
                     "eng-dw-s2": "eaabc8b564294fc2"}


@pytest.mark.parametrize("name,cfg,kind,args", SCALAR_CASES, ids=[c[0] for c in SCALAR_CASES])
def test_scalar_shift_programs_unchanged(name, cfg, kind, args):
    if name in DW_DEFAULT_HASHES:
        assert _digest(_lower_scalar(CFGS[cfg], kind, args)) == DW_DEFAULT_HASHES[name]
        old = _lower_scalar(CFGS[cfg], kind, args,
                            ConvOptions(tile_span=False, merge_stores=False))
        assert _digest(old) == SCALAR_HASHES[name]
        return
    assert _digest(_lower_scalar(CFGS[cfg], kind, args)) == SCALAR_HASHES[name]


def test_scalar_shift_bands_unchanged():
    w = _pattern((32, 64, 1, 1), 255, 127, np.int8)
    b = _pattern((32,), 20001, 10000, np.int32)
    bands = lower_conv_bands(ENG, "bd", (64, 8, 8), w, b, _scalar_attrs(1, 1, 0, 1, 8),
                             options=OLD)
    got = [_digest(trace=r.trace) for r in bands]
    assert [r.rows for r in bands] == [4, 2, 1]
    assert got == SCALAR_HASHES["eng-bands"]


# --------------------------------------------------------------------------- per-channel


def _oracle(x, w, b, shifts, stride, pads, groups, lo, hi):
    """int64 conv + per-channel requantize: ``(acc + b[o] + round[o]) >> shift[o]``
    (``round = 1 << (shift-1)``), ``acc << -shift[o]`` for a negative shift, clip."""
    n, c, h, wd = x.shape
    o, cg, kh, kw = w.shape
    pt, pl, pb, pr = pads
    xp = np.zeros((n, c, h + pt + pb, wd + pl + pr), np.int64)
    xp[:, :, pt:pt + h, pl:pl + wd] = x
    ho = (h + pt + pb - kh) // stride[0] + 1
    wo = (wd + pl + pr - kw) // stride[1] + 1
    og = o // groups
    out = np.zeros((n, o, ho, wo), np.int64)
    for oc in range(o):
        g = oc // og
        acc = np.full((n, ho, wo), int(b[oc]), np.int64)
        for i in range(kh):
            for j in range(kw):
                win = xp[:, g * cg:(g + 1) * cg, i:i + ho * stride[0]:stride[0],
                         j:j + wo * stride[1]:stride[1]]
                acc += np.einsum("nchw,c->nhw", win, w[oc, :, i, j].astype(np.int64))
        s = int(shifts[oc])
        if s > 0:
            acc = (acc + (1 << (s - 1))) >> s
        elif s < 0:
            acc = acc << -s
        out[:, oc] = np.clip(acc, lo, hi)
    return out


def _pc_attrs(k, s, p, groups, shifts, lo=-128, hi=127):
    rnd = tuple(1 << (int(v) - 1) if v > 0 else 0 for v in shifts)
    return {"kernel": (k, k), "strides": (s, s), "pads": (p,) * 4, "groups": groups,
            "shift": tuple(int(v) for v in shifts), "round": rnd, "mult": 1,
            "clip_lo": lo, "clip_hi": hi}


def _run(cfg, lo, x, dev=None):
    """Run ``lo`` (a :class:`LoweredOp`) on ``dev`` (default a fresh fsim) for the int8
    ``x [N, C, H, W]``; the output unpacked ``[N, O, Ho, Wo]``."""
    dev = FsimDevice(cfg, mem_bytes=64 << 20) if dev is None else dev
    pb = ProgramBuilder(dev)
    n = x.shape[0]
    nblk = -(-n // cfg.BATCH)
    bufs = {}
    for name, arr in list(lo.consts.items()) + [("x", lo.layouts["x"].pack(x))]:
        arr = np.ascontiguousarray(arr)
        bufs[name] = dev.alloc(max(arr.nbytes, 1))
        dev.write(bufs[name], arr)
    yl = lo.layouts["y"]
    bufs["y"] = dev.alloc(yl.nbytes(n))
    replay(pb, lo.trace, bufs, nblk)
    pb.record_program().run()
    return yl.unpack(dev.read(bufs["y"], yl.nbytes(n)), n)


def _shifts(rng, o):
    """Per-channel shifts over ``[-3, 20]``, 0 and a negative one always among them."""
    s = rng.integers(-3, 21, o)
    s[0], s[-1] = 0, -2
    if o > 2:
        s[1] = 20
    return s


def _conv_pc(cfg, cin, cout, h, k, s, p, groups, *, n=1, seed=0, lo=-128, hi=127,
             wd=None, dev=None, **kw):
    """A random per-channel conv through ``cfg``'s fsim against :func:`_oracle`; returns
    the :class:`LoweredOp`."""
    rng = np.random.default_rng(seed)
    wd = h if wd is None else wd
    xmax = 1 << (cfg.INP_WIDTH - 1)
    x = rng.integers(-xmax, xmax, (n, cin, h, wd)).astype(np.int16 if xmax > 128 else np.int8)
    w = rng.integers(-127, 128, (cout, cin // groups, k, k)).astype(np.int8)
    b = rng.integers(-20000, 20000, cout).astype(np.int32)
    sh = _shifts(rng, cout)
    lowered = lower_conv(cfg, "pc", (cin, h, wd), w, b, _pc_attrs(k, s, p, groups, sh, lo, hi),
                         **kw)
    got = _run(cfg, lowered, x, dev)
    want = _oracle(x, w, b, sh, (s, s), (p,) * 4, groups, lo, hi)
    np.testing.assert_array_equal(got, want)
    return lowered


def _alu_ops(lo) -> list[tuple[int, bool]]:
    return [(k.alu_op, k.use_imm) for k in lo.trace.kernels if k.mode == "alu" and not k.reset]


PC_CFGS = ("pynq", "eng", "req", "tiny")


@pytest.mark.parametrize("cfg", PC_CFGS)
@pytest.mark.parametrize("case", [
    (16, 32, 8, 3, 1, 1, 1),        # 3x3, groups 1
    (64, 64, 14, 3, 1, 1, 1),       # 3x3, several tiles / streamed steps on eng
    (32, 32, 10, 3, 1, 1, 32),      # depthwise
    (128, 128, 14, 3, 1, 1, 128),   # depthwise, one block per step (ConvOptions.step_req on eng)
    (64, 96, 9, 1, 1, 0, 1),        # 1x1
    (64, 128, 28, 1, 2, 0, 1),      # 1x1 stride 2 (row skip)
    (32, 48, 11, 3, 2, 1, 1),       # 3x3 stride 2
    (3, 24, 16, 3, 2, 1, 1),        # few channels: im2col
], ids=str)
def test_per_channel_conv(cfg, case):
    lo = _conv_pc(CFGS[cfg], *case, seed=hash(case) % 1000)
    ops = _alu_ops(lo)
    assert (int(AluOp.SHR), False) in ops               # the tensor-operand SHR
    assert (int(AluOp.SHR), True) not in ops
    if CFGS[cfg].ALU_REQUANT:
        # shifts over [-3, 20] with full-range weights could wrap if aligned to one
        # fused REQ (test_lower_perchannel_req): ADD bias, SHR by rows, a clip-only REQ
        assert (int(AluOp.ADD), False) in ops and (int(AluOp.REQ), True) in ops
        assert all(op not in (int(AluOp.MAX), int(AluOp.MIN)) for op, _ in ops)
    else:
        assert all(op != int(AluOp.REQ) for op, _ in ops)   # no fused REQ
    assert lo.consts["b"].shape[0] == 2 * -(-case[1] // CFGS[cfg].BLOCK_OUT)


@pytest.mark.parametrize("cfg", PC_CFGS)
@pytest.mark.parametrize("k,m,n", [(64, 10, 1), (256, 100, 3), (1024, 1000, 1)])
def test_per_channel_dense(cfg, k, m, n):
    c = CFGS[cfg]
    if cfg == "tiny" and m > 500:
        k, m = 256, 300         # tiny's 4-wide blocks: the 1000-way dense takes seconds
    rng = np.random.default_rng(k + m)
    x = rng.integers(-128, 128, (n, k)).astype(np.int8)
    w = rng.integers(-127, 128, (m, k)).astype(np.int8)
    b = rng.integers(-20000, 20000, m).astype(np.int32)
    sh = _shifts(rng, m)
    lo = lower_dense(c, "pd", k, w, b, _pc_attrs(1, 1, 0, 1, sh, -128, 127))
    got = _run(c, lo, x.reshape(n, k, 1, 1))
    want = _oracle(x.reshape(n, k, 1, 1), w.reshape(m, k, 1, 1), b, sh, (1, 1), (0,) * 4, 1,
                   -128, 127)
    np.testing.assert_array_equal(got, want)


def test_per_channel_batch2_odd_channels_and_relu_clip():
    """BATCH 2 with BLOCK_IN != BLOCK_OUT, channel counts off the block, a ReLU clip."""
    c = preset("batch2")
    _conv_pc(c, 17, 21, 7, 3, 1, 1, 1, n=3, lo=0, hi=127, wd=6)
    _conv_pc(c, 12, 12, 7, 3, 1, 1, 12, n=2, lo=0, hi=127)


def test_per_channel_int16_clip_and_bias_load():
    """int16 activations (a 16-bit clip, MAX/MIN immediates past 8 bits) on an
    ``ALU_REQUANT`` core, and the bias-as-initial-value lowering (the shift rows loaded
    once, the tiles' bias by broadcast loads)."""
    i16 = preset("tiny").replace(LOG_INP_WIDTH=4, LOG_INP_BUFF_SIZE=13, ALU_REQUANT=True)
    _conv_pc(i16, 16, 12, 6, 3, 1, 1, 1, lo=-32768, hi=32767)
    _conv_pc(i16, 8, 8, 6, 3, 1, 1, 8, lo=0, hi=32767)
    lo = _conv_pc(ENG, 64, 64, 14, 3, 1, 1, 1, options=ConvOptions(bias_load=True))
    assert (int(AluOp.ADD), False) not in _alu_ops(lo)     # no bias ADD


def test_per_channel_acc_reservation_and_layout():
    """The ACC regions start after 2*nob entries; ``b`` holds bias+round, then shifts; one
    ACC LOAD of both at entry 0."""
    rng = np.random.default_rng(3)
    o = 40
    w = rng.integers(-127, 128, (o, 16, 3, 3)).astype(np.int8)
    b = rng.integers(-100, 100, o).astype(np.int32)
    sh = _shifts(rng, o)
    lo = lower_conv(PYNQ, "r", (16, 6, 6), w, b, _pc_attrs(3, 1, 1, 1, sh))
    nob = 3
    bc = lo.consts["b"]
    assert bc.shape == (2 * nob, 1, 16) and bc.dtype == np.int32
    rnd = np.where(sh > 0, 1 << np.maximum(sh - 1, 0), 0)
    np.testing.assert_array_equal(bc[:nob].reshape(-1)[:o], b + rnd)
    np.testing.assert_array_equal(bc[nob:].reshape(-1)[:o], sh)
    assert (bc[:nob].reshape(-1)[o:] == 0).all() and (bc[nob:].reshape(-1)[o:] == 0).all()
    acc_loads = [op for op in lo.trace.ops if op[0] == "L" and op[1] == "b"]
    assert [(op[2], op[4], op[5], op[6]) for op in acc_loads] == [(0, 0, 1, 2 * nob)]
    gemm_dst = np.concatenate([k.dst for k in lo.trace.kernels if k.mode == "gemm"])
    assert gemm_dst.min() >= 2 * nob
    shr = [k for k in lo.trace.kernels if k.mode == "alu" and k.alu_op == int(AluOp.SHR)]
    assert shr and all(not k.use_imm and (k.src >= nob).all() and (k.src < 2 * nob).all()
                       for k in shr)


def test_per_channel_uniform_shifts_lower_as_scalar():
    """Shifts all equal: the scalar program exactly (its fused REQ forms included)."""
    rng = np.random.default_rng(5)
    w = rng.integers(-127, 128, (32, 32, 3, 3)).astype(np.int8)
    b = rng.integers(-100, 100, 32).astype(np.int32)
    pc = lower_conv(ENG, "u", (32, 8, 8), w, b, _pc_attrs(3, 1, 1, 1, [7] * 32))
    sc = lower_conv(ENG, "u", (32, 8, 8), w, b, _scalar_attrs(3, 1, 1, 1, 7))
    assert _digest(pc) == _digest(sc)


def test_per_channel_bands():
    """Row bands of a per-channel 1x1 conv lower with the same constants (shift rows too)."""
    rng = np.random.default_rng(9)
    w = rng.integers(-127, 128, (32, 64, 1, 1)).astype(np.int8)
    b = rng.integers(-100, 100, 32).astype(np.int32)
    sh = _shifts(rng, 32)
    bands = lower_conv_bands(ENG, "bd", (64, 8, 8), w, b, _pc_attrs(1, 1, 0, 1, sh))
    for band in bands:
        for tr in (band.trace, band.tail):
            if tr is None:
                continue
            assert [op[5:7] for op in tr.ops if op[0] == "L" and op[1] == "b"] == [(1, 4)]
            assert any(k.alu_op == int(AluOp.SHR) and not k.use_imm for k in tr.kernels
                       if k.mode == "alu")


@pytest.mark.parametrize("attrs,msg", [
    ({"shift": (1, 2), "round": (1, 2)}, "has 2 shifts"),
    ({"shift": (1,) * 8, "round": 1}, "both per channel"),
    ({"shift": (1,) * 7 + (2,), "round": (1,) * 7 + (2,), "mult": 3}, "needs mult 1"),
    ({"shift": (1,) * 7 + (40,), "round": (1,) * 7 + (0,)}, "outside the ALU SHR range"),
])
def test_per_channel_refused(attrs, msg):
    w = np.ones((8, 4, 1, 1), np.int8)
    a = dict(_scalar_attrs(1, 1, 0, 1, 1), **attrs)
    with pytest.raises(CompileError, match=msg):
        lower_conv(PYNQ, "bad", (4, 2, 2), w, np.zeros(8, np.int32), a)


@pytest.mark.parametrize("case", [(128, 128, 14, 3, 1, 1, 128), (256, 512, 14, 1, 2, 0, 1)],
                         ids=("dw-step-req", "c10-stream-bank-split"))
def test_per_channel_takes_no_engine_req_forms(case):
    """On the REQ engine core a per-channel conv takes none of the forms built around the
    engine's REQ (per-step REQs, the streamed last steps, the bank split), which the scalar
    conv of the same shape does."""
    cin, cout, h, k, s, p, g = case
    w = _pattern((cout, cin // g, k, k), 255, 127, np.int8)
    b = _pattern((cout,), 2001, 1000, np.int32)
    # a depthwise conv's per-step REQ needs tiles of several output blocks
    kw = {"options": ConvOptions(tile_span=False)} if g > 1 else {}
    sc = lower_conv(ENG, "s", (cin, h, h), w, b, _scalar_attrs(k, s, p, g, 8), **kw).trace.stats
    pc = lower_conv(ENG, "p", (cin, h, h), w, b,
                    _pc_attrs(k, s, p, g, np.arange(cout) % 23 - 3), **kw).trace.stats
    assert sc["step_req"] or sc["stream_steps"]
    assert sc["bank_split"]
    assert not pc["step_req"] and not pc["stream_steps"] and not pc["bank_split"]
    assert pc["tiling"] == sc["tiling"]


@pytest.mark.rtl
def test_per_channel_conv_on_rtl():
    """A small per-channel conv (two tiles of several output blocks) on the Verilated tiny
    core: the tensor-operand SHR reads the shift rows on hardware too."""
    rtl = pytest.importorskip("vtaforge.runtime.rtl")
    tiny = CFGS["tiny"]
    dev = rtl.RtlDevice(tiny, 16 << 20, progress=False)
    try:
        _conv_pc(tiny, 8, 12, 6, 3, 1, 1, 1, seed=4, dev=dev)
        _conv_pc(tiny, 8, 8, 5, 3, 2, 1, 8, seed=5, dev=dev)
    finally:
        dev.close()


def test_acc_regions_reserved():
    """``reserved`` moves the regions (one, two, four bank-aligned) past the shift rows;
    the default is the bias's ``nob`` entries."""
    from vtaforge.compiler import tiling

    nob, half = 4, ENG.ACC_DEPTH // 2
    for k in (1, 2, 4):
        assert tiling.acc_regions(ENG, nob, k) == tiling.acc_regions(ENG, nob, k, nob)
    assert tiling.acc_regions(ENG, nob, 2, 2 * nob) == (
        [8, 8 + (ENG.ACC_DEPTH - 8) // 2], (ENG.ACC_DEPTH - 8) // 2)
    bases, size = tiling.acc_regions(ENG, nob, 4, 2 * nob)
    assert bases == [8, half, 8 + size, half + size] and size == (half - 8) // 2
    tl = tiling.conv_tiling(PYNQ, 127, 4, 8, 8, 1, 1, 1, 1, 127 * 4, 4, reserved=254)
    assert tl.obn * tl.th * tl.tw <= tiling.acc_regions(PYNQ, 127, tl.acc_nvt, 254)[1]


def test_per_channel_quad_acc_regions():
    """The store-heavy 32 -> 64 1x1 on the engine core keeps its four ACC regions, after
    the 2*nob reserved entries, and is exact."""
    lo = _conv_pc(ENG, 32, 64, 28, 1, 1, 0, 1, seed=11)
    assert lo.trace.stats["acc_regions"] == 4
    gemm_dst = np.concatenate([k.dst for k in lo.trace.kernels if k.mode == "gemm"])
    assert gemm_dst.min() >= 8
