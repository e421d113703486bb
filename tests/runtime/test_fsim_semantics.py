"""Instruction-level semantics against numpy/Python oracles, on every backend.

The upstream unit-test matrix (vta-anchor.md §7.1) rebuilt at the instruction level, plus
the rules of DESIGN.md "Semantics" that upstream left open.  Every expected value comes from
integer arithmetic written here, never from a backend.  Each test runs its programs on the
``device`` fixture's backend (tests/runtime/conftest.py): fsim, rtl and the simulated
PYNQ-Z2; the Verilated backends run the tiny core (a test written for another preset
whose oracle is config-generic takes tiny there, through :func:`on`), and a case that
needs another core says so in its skip reason.
"""

from __future__ import annotations

import numpy as np
import pytest

from programs import (AluOp, Image, MemType, acc_bytes, alu, finish, gemm, int_dtype, ld, nop,
                      read_out, st, wrap)
from vtaforge.hw.config import preset
from vtaforge.hw.isa import encode_program, encode_uops
from vtaforge.runtime.fsim import FsimDevice
from vtaforge.runtime.verify import verify_program

UOP, INP, WGT, ACC, OUT, ACC8 = (MemType.UOP, MemType.INP, MemType.WGT, MemType.ACC,
                                 MemType.OUT, MemType.ACC8)


def acc_shape(cfg, n):
    return (n, cfg.BATCH, cfg.BLOCK_OUT)


def trunc(cfg, x):
    """Oracle: low OUT_WIDTH bits of x, read as signed."""
    return wrap(x, cfg.OUT_WIDTH)


def on(device, name):
    """The preset a config-generic test runs on: ``name`` on fsim, tiny on the Verilated
    backends (one core build per session)."""
    return preset("tiny" if device.verilated else name)


def assert_stats(device, res, **want):
    """The run's counters: every key on fsim; on the other backends the keys they report
    (the core's counter registers)."""
    got = {k: res.stats[k] for k in want if not device.verilated or k in res.stats}
    assert got == {k: want[k] for k in got}


def run_acc_program(cfg, acc_init, body, n_out, *, device, extra=None, guard=0, fill=0):
    """LOAD ACC ``acc_init`` at sram 0, then ``body(im)`` → list of compute insns (the last
    must push g2s), then STORE ``n_out`` elements from sram 0.  Returns the OUT values and
    the final/initial images."""
    im = Image(cfg, guard=guard)
    a = im.put(acc_bytes(cfg, acc_init))
    o = im.zeros(n_out * cfg.elem_bytes(OUT))
    insns = [ld(ACC, 0, im.base(a, ACC), 1, acc_init.shape[0])]
    insns += body(im)
    insns += [st(0, im.base(o, OUT), 1, n_out, pop_prev=1, push_prev=1), finish(pop_next=1)]
    dram, ia, n = im.build(insns, fill=fill)
    before = dram.copy()
    res = device.run(cfg, dram, ia, n)
    return read_out(cfg, dram, o, n_out), res, dram, before, o


def copy_body(n, pre=()):
    """Uop load + ALU SHR-by-0 over n entries (the upstream 'mov')."""
    def body(im):
        u = im.uops([0], [0])
        return [ld(UOP, 0, im.base(u, UOP), 1, 1), *pre,
                alu(AluOp.SHR, 0, 1, 1, n, dfi=1, imm=0, push_next=1)]
    return body


# ------------------------------------------------------------------ save / load / out
def test_save_load_out(cfg, device):
    rng = np.random.default_rng(1)
    n = 36
    x = rng.integers(-2**31, 2**31, acc_shape(cfg, n))
    got, res, *_ = run_acc_program(cfg, x, copy_body(n), n, device=device)
    np.testing.assert_array_equal(got, x.astype(np.int8).astype(np.int64))
    assert_stats(device, res, acc_load_nbytes=n * cfg.elem_bytes(ACC),
                 out_store_nbytes=n * cfg.elem_bytes(OUT), alu_counter=n, gemm_counter=0,
                 insn_count=5, load_insns=2, store_insns=1, alu_insns=1, finish_insns=1,
                 nop_insns=0, dram_read_nbytes=5 * 16 + 4 + n * cfg.elem_bytes(ACC),
                 dram_write_nbytes=n * cfg.elem_bytes(OUT))


# ------------------------------------------------------------------ padded loads
PADS = {"Y0": (2, 0, 0, 0), "Y1": (0, 2, 0, 0), "X0": (0, 0, 2, 0), "X1": (0, 0, 0, 2),
        "all": (1, 1, 1, 1), "max": (15, 0, 0, 15)}


@pytest.mark.parametrize("pad", list(PADS))
@pytest.mark.parametrize("stride", [5, 8])
def test_padded_acc_load(pad, stride, device):
    """3x5 window (of a 3xstride tensor: BR-03) loaded into ACC with padding."""
    cfg = preset("tiny")
    y0, y1, x0, x1 = PADS[pad]
    rng = np.random.default_rng(2)
    src = rng.integers(-10, 10, (3, stride, cfg.BATCH, cfg.BLOCK_OUT))
    R, C = y0 + 3 + y1, x0 + 5 + x1
    im = Image(cfg)
    a = im.put(acc_bytes(cfg, src))
    o = im.zeros(R * C * cfg.elem_bytes(OUT))
    u = im.uops([0], [0])
    insns = [ld(UOP, 0, im.base(u, UOP), 1, 1),
             # fill the target block with garbage first: padding must overwrite it
             ld(ACC, 0, im.base(a, ACC), 1, min(R * C, 3 * stride)),
             ld(ACC, 0, im.base(a, ACC), 3, 5, stride=stride, pads=(y0, y1, x0, x1)),
             alu(AluOp.SHR, 0, 1, 1, R * C, dfi=1, imm=0, push_next=1),
             st(0, im.base(o, OUT), 1, R * C, pop_prev=1, push_prev=1), finish(pop_next=1)]
    dram, ia, n = im.build(insns)
    device.run(cfg, dram, ia, n)
    exp = np.pad(src[:, :5], ((y0, y1), (x0, x1), (0, 0), (0, 0)))
    got = read_out(cfg, dram, o, R * C).reshape(exp.shape)
    np.testing.assert_array_equal(got, exp)


def identity_wgt(cfg):
    """WGT element with w[o][i] = (i == o): GEMM copies the first BLOCK_OUT input lanes."""
    w = np.zeros((cfg.BLOCK_OUT, cfg.BLOCK_IN), dtype=np.int64)
    for o in range(min(cfg.BLOCK_OUT, cfg.BLOCK_IN)):
        w[o, o] = 1
    return w


@pytest.mark.parametrize("pad", list(PADS))
def test_padded_inp_load(cfg, pad, device):
    """3x5 window of a 3x8 int8 input (negative values) loaded into INP with padding, copied
    out through an identity GEMM."""
    y0, y1, x0, x1 = PADS[pad]
    rng = np.random.default_rng(3)
    src = rng.integers(-128, 128, (3, 8, cfg.BATCH, cfg.BLOCK_IN))
    R, C = y0 + 3 + y1, x0 + 5 + x1
    im = Image(cfg)
    ai = im.put(src.astype(int_dtype(cfg.INP_WIDTH)))
    aw = im.put(identity_wgt(cfg).astype(int_dtype(cfg.WGT_WIDTH)))
    o = im.zeros(R * C * cfg.elem_bytes(OUT))
    u = im.uops([0], [0], [0])
    insns = [ld(INP, 0, im.base(ai, INP), 1, 3 * 8),  # garbage under the padding
             ld(INP, 0, im.base(ai, INP), 3, 5, stride=8, pads=(y0, y1, x0, x1)),
             ld(WGT, 0, im.base(aw, WGT), 1, 1, push_next=1),
             ld(UOP, 0, im.base(u, UOP), 1, 1),
             gemm(0, 1, 1, R * C, d=(0, 1), s=(0, 1), reset=1),
             gemm(0, 1, 1, R * C, d=(0, 1), s=(0, 1), pop_prev=1, push_next=1),
             st(0, im.base(o, OUT), 1, R * C, pop_prev=1, push_prev=1), finish(pop_next=1)]
    dram, ia, n = im.build(insns)
    device.run(cfg, dram, ia, n)
    k = min(cfg.BLOCK_OUT, cfg.BLOCK_IN)
    exp = np.zeros((R, C, cfg.BATCH, cfg.BLOCK_OUT), dtype=np.int64)
    exp[..., :k] = np.pad(src[:, :5], ((y0, y1), (x0, x1), (0, 0), (0, 0)))[..., :k]
    got = read_out(cfg, dram, o, R * C).reshape(exp.shape)
    np.testing.assert_array_equal(got, exp)


def test_padded_wgt_load(device):
    """WGT padding writes zero weight elements."""
    cfg = preset("tiny")
    rng = np.random.default_rng(4)
    w = rng.integers(-128, 128, (2, cfg.BLOCK_OUT, cfg.BLOCK_IN))
    x = rng.integers(-128, 128, (1, cfg.BATCH, cfg.BLOCK_IN))
    im = Image(cfg)
    ai, aw = im.put(x.astype("<i1")), im.put(w.astype("<i1"))
    o = im.zeros(4 * cfg.elem_bytes(OUT))
    u = im.uops([0], [0], [0])
    insns = [ld(WGT, 0, im.base(aw, WGT), 1, 4),  # garbage
             ld(WGT, 0, im.base(aw, WGT), 1, 2, pads=(0, 0, 1, 1)),
             ld(INP, 0, im.base(ai, INP), 1, 1, push_next=1),
             ld(UOP, 0, im.base(u, UOP), 1, 1),
             gemm(0, 1, 1, 4, d=(0, 1), w=(0, 1), reset=1),
             gemm(0, 1, 1, 4, d=(0, 1), w=(0, 1), pop_prev=1),
             alu(AluOp.SHR, 0, 1, 1, 4, dfi=1, imm=8, push_next=1),
             st(0, im.base(o, OUT), 1, 4, pop_prev=1, push_prev=1), finish(pop_next=1)]
    dram, ia, n = im.build(insns)
    device.run(cfg, dram, ia, n)
    wp = np.concatenate([np.zeros_like(w[:1]), w, np.zeros_like(w[:1])])
    exp = trunc(cfg, np.einsum("bi,woi->wbo", x[0], wp) >> 8)
    np.testing.assert_array_equal(read_out(cfg, dram, o, 4), exp)


def test_acc8_load_sign_extension(device):
    cfg = preset("tiny")
    vals = np.arange(-128, 128, dtype=np.int64)[: 16 * cfg.BATCH * cfg.BLOCK_OUT]
    vals = np.concatenate([vals, -vals - 1]).reshape(-1, cfg.BATCH, cfg.BLOCK_OUT)
    n = vals.shape[0]
    im = Image(cfg)
    a8 = im.put(vals.astype("<i1"))
    o = im.zeros((n + 2) * cfg.elem_bytes(OUT))
    u = im.uops([0], [0])
    insns = [ld(UOP, 0, im.base(u, UOP), 1, 1),
             ld(ACC8, 0, im.base(a8, ACC8), 1, n, pads=(0, 0, 1, 1)),
             # >> 4 exposes the sign extension (a zero-extended 0x80 would give 8, not -8)
             alu(AluOp.SHR, 0, 1, 1, n + 2, dfi=1, imm=4, push_next=1),
             st(0, im.base(o, OUT), 1, n + 2, pop_prev=1, push_prev=1), finish(pop_next=1)]
    dram, ia, cnt = im.build(insns)
    res = device.run(cfg, dram, ia, cnt)
    exp = np.concatenate([np.zeros((1,) + vals.shape[1:], np.int64), vals >> 4,
                          np.zeros((1,) + vals.shape[1:], np.int64)])
    np.testing.assert_array_equal(read_out(cfg, dram, o, n + 2), exp)
    assert_stats(device, res, acc_load_nbytes=n * cfg.elem_bytes(ACC8))


# ------------------------------------------------------------------ GEMM
@pytest.mark.parametrize("threads", [1, 2])
def test_gemm_blocked(cfg, threads, device):
    """O=4, N=2, M=4 blocks: GEMM + SHR 8 + MAX 0 + MIN 127 (upstream test_gemm); with two
    virtual threads each owns half of O and its own scratchpad regions, and the threads'
    load / compute / store streams interleave through the token queues."""
    rng = np.random.default_rng(5)
    O, N, M = 4, 2, 4
    x = rng.integers(-128, 128, (O, N, cfg.BATCH, cfg.BLOCK_IN))
    w = rng.integers(-128, 128, (M, N, cfg.BLOCK_OUT, cfg.BLOCK_IN))
    im = Image(cfg)
    aw = im.put(w.astype("<i1"))
    ax = im.put(x.astype("<i1"))
    ao = im.zeros(O * M * cfg.elem_bytes(OUT))
    Ot = O // threads
    uops = []
    for t in range(threads):  # per thread: N GEMM uops, then one ALU uop
        ib, ab, wb = t * Ot * N, t * Ot * M, t * M * N
        uops.append(encode_uops(cfg, np.full(N, ab), ib + np.arange(N), wb + np.arange(N)))
        uops.append(encode_uops(cfg, [ab], [ab], [0]))
    u = im.put(np.concatenate(uops).astype("<u4"))
    insns = [ld(UOP, 0, im.base(u, UOP), 1, threads * (N + 1))]
    for t in range(threads):
        ib = t * Ot * N
        insns += [ld(INP, ib, im.base(ax, INP) + ib, 1, Ot * N),
                  ld(WGT, t * M * N, im.base(aw, WGT), 1, M * N, push_next=1)]
    for t in range(threads):
        g0 = t * (N + 1)
        a0 = g0 + N
        insns += [
            gemm(g0, g0 + N, Ot, M, d=(M, 1), s=(N, 0), w=(0, N), reset=1),
            gemm(g0, g0 + N, Ot, M, d=(M, 1), s=(N, 0), w=(0, N), pop_prev=1),
            alu(AluOp.SHR, a0, a0 + 1, Ot, M, dfo=M, dfi=1, imm=8),
            alu(AluOp.MAX, a0, a0 + 1, Ot, M, dfo=M, dfi=1, imm=0),
            alu(AluOp.MIN, a0, a0 + 1, Ot, M, dfo=M, dfi=1, imm=127, push_next=1),
            st(t * Ot * M, im.base(ao, OUT) + t * Ot * M, 1, Ot * M, pop_prev=1,
               push_prev=1)]
    insns += [nop(UOP, pop_next=1) for _ in range(threads - 1)] + [finish(pop_next=1)]
    dram, ia, n = im.build(insns)
    rep = verify_program(cfg, dram, ia, n, None)
    res = device.run(cfg, dram, ia, n)
    exp = np.clip(wrap(np.einsum("onbi,mnki->ombk", x, w), cfg.ACC_WIDTH) >> 8, 0, 127)
    got = read_out(cfg, dram, ao, O * M).reshape(O, M, cfg.BATCH, cfg.BLOCK_OUT)
    np.testing.assert_array_equal(got, exp)
    assert_stats(device, res, gemm_counter=O * M * N)
    if not device.verilated:
        assert rep.stats == res.stats
    assert rep.pushes == rep.pops == (threads, 0, threads, threads)


def test_gemm_wide_inputs_and_wrap(device):
    """16-bit INP/WGT (float64 path) with sums that wrap at ACC_WIDTH."""
    cfg = preset("tiny").replace(LOG_INP_WIDTH=4, LOG_WGT_WIDTH=4, LOG_INP_BUFF_SIZE=13,
                                 LOG_WGT_BUFF_SIZE=14)
    rng = np.random.default_rng(6)
    K = 3
    x = rng.integers(-2**15, 2**15, (K, cfg.BATCH, cfg.BLOCK_IN))
    x[0] = -2**15
    w = rng.integers(-2**15, 2**15, (K, cfg.BLOCK_OUT, cfg.BLOCK_IN))
    w[0] = -2**15
    im = Image(cfg)
    ax, aw = im.put(x.astype("<i2")), im.put(w.astype("<i2"))
    ao = im.zeros(cfg.elem_bytes(OUT))
    u = im.put(encode_uops(cfg, np.zeros(K), np.arange(K), np.arange(K)).astype("<u4"))
    insns = [ld(INP, 0, im.base(ax, INP), 1, K), ld(WGT, 0, im.base(aw, WGT), 1, K, push_next=1),
             ld(UOP, 0, im.base(u, UOP), 1, K), gemm(0, K, 1, 1, reset=1),
             gemm(0, K, 1, 1, pop_prev=1, push_next=1),
             st(0, im.base(ao, OUT), 1, 1, pop_prev=1, push_prev=1), finish(pop_next=1)]
    dram, ia, n = im.build(insns)
    device.run(cfg, dram, ia, n)
    acc = np.zeros((cfg.BATCH, cfg.BLOCK_OUT), dtype=object)
    for k in range(K):  # sequential, wrapping after each micro-op
        acc = wrap(acc + np.einsum("bi,oi->bo", x[k].astype(object), w[k].astype(object)), 32)
    np.testing.assert_array_equal(read_out(cfg, dram, ao, 1)[0], wrap(acc, 16))


def test_two_uops_same_acc_entry(device):
    """Two micro-ops in a row on one accumulator entry give the sum (16 + 32 = 48), for GEMM
    and for a tensor ALU ADD."""
    cfg = on(device, "pynq")
    x = np.zeros((2, cfg.BATCH, cfg.BLOCK_IN), dtype=np.int64)
    x[0, :, 0], x[1, :, 0] = 16, 32
    w = np.zeros((1, cfg.BLOCK_OUT, cfg.BLOCK_IN), dtype=np.int64)
    w[0, :, 0] = 1
    im = Image(cfg)
    ax, aw = im.put(x.astype("<i1")), im.put(w.astype("<i1"))
    ao = im.zeros(2 * cfg.elem_bytes(OUT))
    u = im.put(encode_uops(cfg, [0, 0, 1, 1], [0, 1, 0, 0], [0, 0, 0, 0]).astype("<u4"))
    insns = [ld(INP, 0, im.base(ax, INP), 1, 2), ld(WGT, 0, im.base(aw, WGT), 1, 1, push_next=1),
             ld(UOP, 0, im.base(u, UOP), 1, 4),
             gemm(0, 2, 1, 1, reset=1), gemm(0, 2, 1, 1, pop_prev=1),
             alu(AluOp.SHR, 2, 3, imm=0, reset=1),
             # acc[1] = 0 + acc[0] + acc[0] = 96 (two tensor ADDs in a row)
             alu(AluOp.ADD, 2, 4, push_next=1),
             st(0, im.base(ao, OUT), 1, 2, pop_prev=1, push_prev=1), finish(pop_next=1)]
    dram, ia, n = im.build(insns)
    device.run(cfg, dram, ia, n)
    got = read_out(cfg, dram, ao, 2)
    assert (got[0] == 48).all() and (got[1] == 96).all()


def test_empty_uop_range_and_zero_iterations(device):
    cfg = preset("tiny")
    rng = np.random.default_rng(7)
    x = rng.integers(-100, 100, acc_shape(cfg, 4))

    def body(im):
        u = im.uops([0], [0])
        return [ld(UOP, 0, im.base(u, UOP), 1, 1),
                gemm(0, 0, 1, 4, d=(0, 1), reset=1),        # empty uop range
                gemm(3, 1, 1, 4, d=(0, 1), reset=1),        # uop_end < uop_bgn
                gemm(0, 1, 0, 4, d=(0, 1), reset=1),        # iter_out 0
                alu(AluOp.ADD, 0, 1, 4, 0, dfo=1, imm=5, reset=1),  # iter_in 0
                alu(AluOp.SHR, 0, 1, 1, 4, dfi=1, imm=0, push_next=1)]
    got, res, *_ = run_acc_program(cfg, x, body, 4, device=device)
    np.testing.assert_array_equal(got, x)
    assert_stats(device, res, gemm_counter=0, alu_counter=4)


# ------------------------------------------------------------------ ALU
def alu_oracle(op, a, b, acc_bits):
    a, b = int(a), int(b)
    if op == AluOp.MIN:
        r = min(a, b)
    elif op == AluOp.MAX:
        r = max(a, b)
    elif op == AluOp.ADD:
        r = a + b
    elif op == AluOp.MUL:
        r = a * b
    else:
        m = (acc_bits.bit_length() - 1) + 1
        s = b & ((1 << m) - 1)
        if s >= 1 << (m - 1):
            s -= 1 << m
        r = a >> s if s >= 0 else a << -s
    h = 1 << (acc_bits - 1)
    return ((r + h) % (1 << acc_bits)) - h


ALU_CASES = [(AluOp.SHR, -3), (AluOp.MAX, 0), (AluOp.MAX, None), (AluOp.ADD, 3),
             (AluOp.ADD, None), (AluOp.SHR, 2), (AluOp.MIN, 1), (AluOp.MIN, None),
             (AluOp.SHR, None), (AluOp.MUL, 3), (AluOp.MUL, None)]


@pytest.mark.parametrize("op,imm", ALU_CASES)
def test_alu_ops(cfg, op, imm, device):
    cfg = cfg.replace(ALU_MUL=True) if op == AluOp.MUL else cfg
    rng = np.random.default_rng(8)
    n = 8
    a = rng.integers(-16, 16, acc_shape(cfg, n))
    b = rng.integers(-16, 16, acc_shape(cfg, n))
    if op == AluOp.ADD or op == AluOp.MUL:
        a[:2] = rng.integers(-2**31, 2**31, a[:2].shape)  # wrap-around cases
        b[:2] = rng.integers(-2**31, 2**31, b[:2].shape)

    def body(im):
        u = im.uops([0], [n])  # dst i, src n + i
        return [ld(UOP, 0, im.base(u, UOP), 1, 1),
                alu(op, 0, 1, 1, n, dfi=1, sfi=1, imm=imm),
                alu(AluOp.SHR, 0, 1, 1, n, dfi=1, imm=0, push_next=1)]
    _, _, dram, _, o = run_acc_program(cfg, np.concatenate([a, b]), body, n, device=device)
    got = read_out(cfg, dram, o, n)
    exp = np.vectorize(lambda x, y: alu_oracle(op, x, y, 32))(a, b if imm is None else imm)
    np.testing.assert_array_equal(got, trunc(cfg, exp))


def test_relu(device):
    cfg = on(device, "pynq")
    rng = np.random.default_rng(9)
    n = 16
    x = rng.integers(-256, 256, acc_shape(cfg, n))
    body = copy_body(n, pre=[alu(AluOp.MAX, 0, 1, 1, n, dfi=1, imm=0),
                             alu(AluOp.MIN, 0, 1, 1, n, dfi=1, imm=127)])
    got, *_ = run_acc_program(cfg, x, body, n, device=device)
    np.testing.assert_array_equal(got, np.clip(x, 0, 127))


def test_shift_and_scale(device):
    cfg = on(device, "pynq")
    rng = np.random.default_rng(10)
    n = 16
    x = rng.integers(-256, 256, acc_shape(cfg, n))
    add, shr = int(rng.integers(0, 8)), int(rng.integers(1, 5))
    body = copy_body(n, pre=[alu(AluOp.ADD, 0, 1, n, 1, dfo=1, imm=add),
                             alu(AluOp.SHR, 0, 1, n, 1, dfo=1, imm=shr)])
    got, *_ = run_acc_program(cfg, x, body, n, device=device)
    np.testing.assert_array_equal(got, trunc(cfg, (x + add) >> shr))


@pytest.mark.parametrize("acc_bits", [32, 16])
@pytest.mark.parametrize("op,imm", [
    (AluOp.ADD, -32768), (AluOp.ADD, -1), (AluOp.ADD, 32767), (AluOp.MIN, -32768),
    (AluOp.MAX, 32767), (AluOp.SHR, 3), (AluOp.SHR, -2), (AluOp.SHR, "maxr"),
    (AluOp.SHR, "maxl"), (AluOp.SHR, "highbits")])
def test_alu_immediate_edges(acc_bits, op, imm, device):
    cfg = preset("tiny")
    if acc_bits == 16:
        cfg = cfg.replace(LOG_ACC_WIDTH=4, LOG_ACC_BUFF_SIZE=12)
    W = cfg.ACC_WIDTH
    imm = {"maxr": W - 1, "maxl": -W, "highbits": (1 << (cfg.LOG_ACC_WIDTH + 1)) * 3 + 3}.get(
        imm, imm)
    n = 8
    x = np.array([0, 1, -1, 5, -5, 2**(W - 1) - 1, -2**(W - 1), 12345 % 2**(W - 1)])
    x = np.repeat(x[:, None, None], cfg.BATCH * cfg.BLOCK_OUT, axis=1).reshape(acc_shape(cfg, n))
    # the OUT truncation hides high bits: check them with a final SHR by each byte offset
    shifts = [s for s in (0, 8, 16, 24) if s < W]

    def body(im):
        u = im.uops([0], [0])
        return [ld(UOP, 0, im.base(u, UOP), 1, 1), alu(op, 0, 1, 1, n, dfi=1, imm=imm),
                alu(AluOp.SHR, 0, 1, 1, n, dfi=1, imm=0, push_next=1)]
    _, _, dram, _, o = run_acc_program(cfg, x, body, n, device=device)
    exp = np.vectorize(lambda v: alu_oracle(op, v, imm, W))(x)
    np.testing.assert_array_equal(read_out(cfg, dram, o, n), trunc(cfg, exp))
    for s in shifts[1:]:
        def body2(im, s=s):
            u = im.uops([0], [0])
            return [ld(UOP, 0, im.base(u, UOP), 1, 1), alu(op, 0, 1, 1, n, dfi=1, imm=imm),
                    alu(AluOp.SHR, 0, 1, 1, n, dfi=1, imm=s, push_next=1)]
        got, *_ = run_acc_program(cfg, x, body2, n, device=device)
        np.testing.assert_array_equal(got, trunc(cfg, exp >> s))


def seq_alu_oracle(acc, uops, I, J, f, op, imm, bits):
    """Plain Python one-micro-op-at-a-time ALU nest."""
    acc = acc.astype(object).copy()
    for i in range(I):
        for j in range(J):
            for d, s in uops:
                d2 = d + i * f[0] + j * f[1]
                s2 = s + i * f[2] + j * f[3]
                bv = acc[s2] if imm is None else np.full(acc[d2].shape, imm, dtype=object)
                acc[d2] = np.vectorize(lambda x, y: alu_oracle(op, x, y, bits),
                                       otypes=[object])(acc[d2], bv)
    return acc.astype(np.int64)


@pytest.mark.parametrize("seed", range(12))
def test_alu_hazards_random(seed, device):
    """Random ALU nests with repeated destinations and reads of entries written earlier in
    the same nest match one-after-another execution."""
    rng = np.random.default_rng(100 + seed)
    E = 12
    op = AluOp(int(rng.integers(0, 5)))
    cfg = preset("tiny").replace(ALU_MUL=True) if op == AluOp.MUL else preset("tiny")
    use_imm = seed % 3 == 0
    imm = int(rng.integers(-4, 5)) if use_imm else None
    U = int(rng.integers(1, 6))
    dst = rng.integers(0, 4, U)
    src = rng.integers(0, 6, U)
    I, J = int(rng.integers(1, 3)), int(rng.integers(1, 3))
    f = (int(rng.integers(0, 3)), int(rng.integers(0, 3)), int(rng.integers(0, 3)),
         int(rng.integers(0, 3)))
    x = rng.integers(-8, 8, acc_shape(cfg, E))
    if op in (AluOp.ADD, AluOp.MUL):
        x = rng.integers(-2**31, 2**31, acc_shape(cfg, E))

    def body(im):
        u = im.put(np.concatenate([encode_uops(cfg, dst, src, np.zeros(U)),
                                   encode_uops(cfg, [0], [0], [0])]).astype("<u4"))
        return [ld(UOP, 0, im.base(u, UOP), 1, U + 1),
                alu(op, 0, U, I, J, dfo=f[0], dfi=f[1], sfo=f[2], sfi=f[3], imm=imm),
                alu(AluOp.SHR, U, U + 1, 1, E, dfi=1, imm=0, push_next=1)]
    got, *_ = run_acc_program(cfg, x, body, E, device=device)
    exp = seq_alu_oracle(x, list(zip(dst.tolist(), src.tolist())), I, J, f, op, imm, 32)
    np.testing.assert_array_equal(got, trunc(cfg, exp))


@pytest.mark.parametrize("seed", range(6))
def test_gemm_repeated_dst_random(seed, device):
    cfg = preset("batch2")
    rng = np.random.default_rng(200 + seed)
    U = int(rng.integers(1, 6))
    dst, src, wg = rng.integers(0, 3, U), rng.integers(0, 4, U), rng.integers(0, 3, U)
    I, J = int(rng.integers(1, 4)), int(rng.integers(1, 3))
    fd, fs, fw = rng.integers(0, 2, 2), rng.integers(0, 2, 2), rng.integers(0, 2, 2)
    x = rng.integers(-128, 128, (8, cfg.BATCH, cfg.BLOCK_IN))
    w = rng.integers(-128, 128, (6, cfg.BLOCK_OUT, cfg.BLOCK_IN))
    im = Image(cfg)
    ax, aw = im.put(x.astype("<i1")), im.put(w.astype("<i1"))
    E = 8
    ao = im.zeros(E * cfg.elem_bytes(OUT))
    u = im.put(np.concatenate([encode_uops(cfg, dst, src, wg),
                               encode_uops(cfg, [0], [0], [0])]).astype("<u4"))
    insns = [ld(INP, 0, im.base(ax, INP), 1, 8), ld(WGT, 0, im.base(aw, WGT), 1, 6, push_next=1),
             ld(UOP, 0, im.base(u, UOP), 1, U + 1),
             alu(AluOp.SHR, U, U + 1, 1, E, dfi=1, imm=0, reset=1),
             gemm(0, U, I, J, d=tuple(fd), s=tuple(fs), w=tuple(fw), pop_prev=1),
             alu(AluOp.SHR, U, U + 1, 1, E, dfi=1, imm=6, push_next=1),
             st(0, im.base(ao, OUT), 1, E, pop_prev=1, push_prev=1), finish(pop_next=1)]
    dram, ia, n = im.build(insns)
    res = device.run(cfg, dram, ia, n)
    acc = np.zeros((E, cfg.BATCH, cfg.BLOCK_OUT), dtype=np.int64)
    for i in range(I):
        for j in range(J):
            for d, s, g in zip(dst, src, wg):
                acc[d + i * fd[0] + j * fd[1]] += x[s + i * fs[0] + j * fs[1]] @ \
                    w[g + i * fw[0] + j * fw[1]].T
    np.testing.assert_array_equal(read_out(cfg, dram, ao, E), trunc(cfg, acc >> 6))
    assert_stats(device, res, gemm_counter=I * J * U)


def test_alu_prefix_sum_chain(device):
    """acc[k] += acc[k-1] for k = 1..n in one instruction: each micro-op reads the previous
    one's result (a running sum)."""
    cfg = on(device, "pynq")
    n = 20
    x = np.arange(1, n + 1)[:, None, None] * np.ones(acc_shape(cfg, n)[1:], np.int64)

    def body(im):
        u = im.uops([1], [0])
        u2 = im.uops([0], [0])
        return [ld(UOP, 0, im.base(u, UOP), 1, 1), ld(UOP, 1, im.base(u2, UOP), 1, 1),
                alu(AluOp.ADD, 0, 1, 1, n - 1, dfi=1, sfi=1),
                alu(AluOp.SHR, 1, 2, 1, n, dfi=1, imm=0, push_next=1)]
    got, *_ = run_acc_program(cfg, x, body, n, device=device)
    np.testing.assert_array_equal(got, trunc(cfg, np.cumsum(x, axis=0)))


# ------------------------------------------------------------------ STORE
def test_store_writes_exactly_out_bytes(device):
    """BR-10: a store writes exactly the OUT element bytes; guard bytes around each row (and
    between strided rows) stay untouched, with BLOCK_IN != BLOCK_OUT."""
    cfg = preset("batch2")
    rng = np.random.default_rng(11)
    n = 6
    x = rng.integers(-2**31, 2**31, acc_shape(cfg, n))
    eb = cfg.elem_bytes(OUT)
    im = Image(cfg, guard=64)
    a = im.put(acc_bytes(cfg, x))
    o = im.put(np.full(3 * 2 * eb + 64, 0xAB, np.uint8))
    u = im.uops([0], [0])
    insns = [ld(UOP, 0, im.base(u, UOP), 1, 1), ld(ACC, 0, im.base(a, ACC), 1, n),
             alu(AluOp.SHR, 0, 1, 1, n, dfi=1, imm=0, push_next=1),
             st(0, im.base(o, OUT), 3, 2, stride=2 * 2 if eb >= 64 else 3, pop_prev=1,
                push_prev=1),
             finish(pop_next=1)]
    stride = insns[3].x_stride
    dram, ia, cnt = im.build(insns, fill=0xCD)
    before = dram.copy()
    device.run(cfg, dram, ia, cnt)
    exp = before.copy()
    vals = x.astype(np.int8).reshape(3, 2, -1)
    for r in range(3):
        off = o + r * stride * eb
        exp[off:off + 2 * eb] = vals[r].reshape(-1).view(np.uint8)
    np.testing.assert_array_equal(dram, exp)


# ------------------------------------------------------------------ scheduling
def test_token_queue_capacity_one_and_insn_queue_depth_one(device):
    """With TOKEN_QUEUE_DEPTH 1 a producer waits for room; with INSN_QUEUE_DEPTH 1 fetch
    waits for the command queue; the program still completes correctly."""
    cfg = preset("tiny").replace(TOKEN_QUEUE_DEPTH=1, INSN_QUEUE_DEPTH=1)
    rng = np.random.default_rng(12)
    x = rng.integers(-128, 128, (3, cfg.BATCH, cfg.BLOCK_IN))
    w = identity_wgt(cfg)
    im = Image(cfg)
    ax, aw = im.put(x.astype("<i1")), im.put(w.astype("<i1"))
    ao = im.zeros(3 * cfg.elem_bytes(OUT))
    u = im.uops([0], [0], [0])
    inp = [ld(INP, k, im.base(ax, INP) + k, 1, 1, push_next=1) for k in range(3)]
    insns = [ld(WGT, 0, im.base(aw, WGT), 1, 1, push_next=1), inp[0],  # inp[0] waits for room
             ld(UOP, 0, im.base(u, UOP), 1, 1, pop_prev=1),
             gemm(0, 1, 1, 3, d=(0, 1), s=(0, 1), reset=1), nop(UOP, pop_prev=1),
             inp[1], inp[2], nop(UOP, pop_prev=1),
             gemm(0, 1, 1, 3, d=(0, 1), s=(0, 1), pop_prev=1, push_next=1),
             st(0, im.base(ao, OUT), 1, 3, pop_prev=1, push_prev=1), finish(pop_next=1)]
    dram, ia, n = im.build(insns)
    device.run(cfg, dram, ia, n)
    k = min(cfg.BLOCK_IN, cfg.BLOCK_OUT)
    exp = np.zeros((3, cfg.BATCH, cfg.BLOCK_OUT), np.int64)
    exp[..., :k] = x[..., :k]
    np.testing.assert_array_equal(read_out(cfg, dram, ao, 3), exp)


def test_nop_counts_and_fsim_device():
    """FsimDevice: allocate, write, run with live buffers as regions, read back."""
    cfg = preset("tiny")
    dev = FsimDevice(cfg, mem_bytes=1 << 20)
    rng = np.random.default_rng(13)
    n = 5
    x = rng.integers(-1000, 1000, acc_shape(cfg, n))
    b_acc = dev.alloc(x.size * 4)
    b_out = dev.alloc(n * cfg.elem_bytes(OUT))
    b_uop = dev.alloc(4)
    dev.write(b_acc, x.astype("<i4"))
    dev.write(b_uop, encode_uops(cfg, [0], [0], [0]).astype("<u4"))
    insns = [ld(UOP, 0, b_uop.addr // 4, 1, 1), ld(ACC, 0, b_acc.elem_offset(cfg.elem_bytes(ACC)), 1, n),
             nop(UOP), alu(AluOp.ADD, 0, 1, 1, n, dfi=1, imm=1, push_next=1),
             st(0, b_out.elem_offset(cfg.elem_bytes(OUT)), 1, n, pop_prev=1, push_prev=1),
             nop(store=True), finish(pop_next=1)]
    prog = encode_program(cfg, insns)
    b_ins = dev.alloc(prog.size)
    dev.write(b_ins, prog)
    res = dev.run(b_ins.addr, len(insns))
    got = dev.read(b_out).view("<i1").reshape(x.shape)
    np.testing.assert_array_equal(got, (x + 1).astype(np.int8))
    assert res.cycles == 0 and res.stats["nop_insns"] == 2
    assert res.stats["insn_count"] == len(insns)


def test_large_nests_across_chunks(device):
    """Nests longer than one evaluation chunk (32 Ki micro-ops) keep sequential semantics:
    40000 immediate ADDs on one entry, doubling by tensor ADD with src == dst, and a GEMM
    that accumulates 40000 products into one entry."""
    cfg = preset("tiny")
    n = 3
    x = np.array([1, -2, 7])[:, None, None] * np.ones(acc_shape(cfg, n)[1:], np.int64)
    N = 40000

    def body(im):
        u = im.uops([0, 1], [0, 1])
        return [ld(UOP, 0, im.base(u, UOP), 1, 2),
                alu(AluOp.ADD, 0, 1, 200, 200, imm=1),           # acc[0] += 40000
                alu(AluOp.ADD, 1, 2, 1, 5),                      # acc[1] *= 32 via x + x
                alu(AluOp.SHR, 0, 1, 1, n, dfi=1, imm=4, push_next=1)]
    got, res, *_ = run_acc_program(cfg, x, body, n, device=device)
    exp = x.copy()
    exp[0] += N
    exp[1] *= 32
    np.testing.assert_array_equal(got, trunc(cfg, exp >> 4))
    # GEMM: 40000 micro-ops into acc[0], inputs of ones
    im = Image(cfg)
    ones = np.ones((1, cfg.BATCH, cfg.BLOCK_IN), np.int64)
    ax = im.put(ones.astype("<i1"))
    aw = im.put(np.ones((1, cfg.BLOCK_OUT, cfg.BLOCK_IN), np.int64).astype("<i1"))
    ao = im.zeros(cfg.elem_bytes(OUT))
    u = im.uops([0], [0], [0])
    insns = [ld(INP, 0, im.base(ax, INP), 1, 1), ld(WGT, 0, im.base(aw, WGT), 1, 1, push_next=1),
             ld(UOP, 0, im.base(u, UOP), 1, 1), gemm(0, 1, 1, 1, reset=1),
             gemm(0, 1, 200, 200, pop_prev=1),
             alu(AluOp.SHR, 0, 1, imm=8, push_next=1),
             st(0, im.base(ao, OUT), 1, 1, pop_prev=1, push_prev=1), finish(pop_next=1)]
    dram, ia, cnt = im.build(insns)
    res = device.run(cfg, dram, ia, cnt)
    assert (read_out(cfg, dram, ao, 1) == trunc(cfg, (N * cfg.BLOCK_IN) >> 8)).all()
    assert_stats(device, res, gemm_counter=N)
