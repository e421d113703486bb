"""End-to-end tests of the program builder on the functional simulator.

The upstream unit-test matrix (vta-anchor.md §7.1) expressed through ProgramBuilder, at the
``tiny``, ``pynq`` and ``batch2`` presets, against numpy integer oracles written here.
"""

from __future__ import annotations

import numpy as np
import pytest

from vtaforge.hw.config import MemType, preset
from vtaforge.hw.isa import AluOp, Module
from vtaforge.runtime.builder import ProgramBuilder
from vtaforge.runtime.kernels import BuilderError

fsim = pytest.importorskip("vtaforge.runtime.fsim")

L, C, S = Module.LOAD, Module.COMPUTE, Module.STORE
PRESETS = ["tiny", "pynq", "batch2"]


@pytest.fixture(params=PRESETS)
def dev(request):
    return fsim.FsimDevice(preset(request.param), mem_bytes=16 << 20)


def rng(seed=0):
    return np.random.default_rng(seed)


def acc_tensor(cfg, n, lo=-(2**31), hi=2**31, seed=0):
    return rng(seed).integers(lo, hi, (n, cfg.BATCH, cfg.BLOCK_OUT)).astype(np.int32)


def upload(dev, arr):
    buf = dev.alloc(arr.nbytes)
    dev.write(buf, arr)
    return buf


def read_out(dev, buf, n):
    cfg = dev.config
    return dev.read(buf).view(np.int8)[:n * cfg.BATCH * cfg.BLOCK_OUT].reshape(
        n, cfg.BATCH, cfg.BLOCK_OUT)


def alu_all(b, n, op, imm=None, src_off=None, key="alu"):
    """One ALU over acc[0:n] (immediate, or tensor operand acc[src_off + i])."""
    if imm is not None:
        return b.alu((key, n), lambda k: k.uops(np.arange(n), np.arange(n)), op,
                     use_imm=True, imm=imm)
    return b.alu((key, n, src_off), lambda k: k.uops(np.arange(n), src_off + np.arange(n)), op)


def store_all(b, out, n):
    b.dep_push(C, S)
    b.dep_pop(C, S)
    b.store_2d(0, out, 0, 1, n, n)


# ------------------------------------------------------------------ save/load/out, padding
def test_save_load_out(dev):
    cfg = dev.config
    n = 36
    x = acc_tensor(cfg, n)
    a, o = upload(dev, x), dev.alloc(n * cfg.elem_bytes(MemType.OUT))
    b = ProgramBuilder(dev)
    b.load_2d(a, 0, MemType.ACC, 0, 6, 6, 6)
    alu_all(b, n, AluOp.SHR, imm=0)
    store_all(b, o, n)
    b.synchronize()
    np.testing.assert_array_equal(read_out(dev, o, n), x.astype(np.int8))


@pytest.mark.parametrize("pad", [(2, 0, 0, 0), (0, 2, 0, 0), (0, 0, 2, 0), (0, 0, 0, 2),
                                 (1, 1, 1, 1)], ids=["Y0", "Y1", "X0", "X1", "all"])
def test_padded_load(dev, pad):
    cfg = dev.config
    y0, y1, x0, x1 = pad
    x = acc_tensor(cfg, 15, -1000, 1000).reshape(3, 5, cfg.BATCH, cfg.BLOCK_OUT)
    # the 3x5 window is taken from a 3x8 tensor (row stride 8, BR-03)
    big = np.zeros((3, 8, cfg.BATCH, cfg.BLOCK_OUT), np.int32)
    big[:, 2:7] = x
    a = upload(dev, big)
    H, W = 3 + y0 + y1, 5 + x0 + x1
    o = dev.alloc(H * W * cfg.elem_bytes(MemType.OUT))
    b = ProgramBuilder(dev)
    b.load_2d(a, 2, MemType.ACC, 0, 3, 5, 8, pad=pad)
    alu_all(b, H * W, AluOp.SHR, imm=0)
    store_all(b, o, H * W)
    b.synchronize()
    want = np.pad(x, ((y0, y1), (x0, x1), (0, 0), (0, 0))).astype(np.int8)
    np.testing.assert_array_equal(read_out(dev, o, H * W).reshape(want.shape), want)


# ------------------------------------------------------------------ GEMM
def gemm_data(cfg, o, n, m, seed=0):
    r = rng(seed)
    inp = r.integers(-128, 128, (o, n, cfg.BATCH, cfg.BLOCK_IN)).astype(np.int8)
    wgt = r.integers(-128, 128, (m, n, cfg.BLOCK_OUT, cfg.BLOCK_IN)).astype(np.int8)
    return inp, wgt


def gemm_oracle(inp, wgt):
    """acc[oi, mi, b, oc] = Σ_{ni, ic} inp[oi, ni, b, ic] · wgt[mi, ni, oc, ic], then >>8,
    clip to [0, 127]."""
    acc = np.einsum("anbi,mnoi->ambo", inp.astype(np.int64), wgt.astype(np.int64))
    acc = ((acc + 2**31) % 2**32) - 2**31
    return np.clip(acc >> 8, 0, 127).astype(np.int8)


def emit_gemm_tile(b, inp_buf, wgt_buf, out_buf, o, n, m, *, m0=0, mt=None, sram=(0, 0, 0),
                   tag=0):
    """Load inp (o x n), wgt rows [m0, m0+mt) and compute/store out[:, m0:m0+mt]."""
    mt = m if mt is None else mt
    si, sw, sa = sram
    b.load_2d(inp_buf, 0, MemType.INP, si, 1, o * n, o * n)
    b.load_2d(wgt_buf, m0 * n, MemType.WGT, sw, 1, mt * n, mt * n)
    b.dep_push(L, C)
    b.dep_pop(L, C)

    def reset(k):
        with k.loop(o, mt, 0, 0):
            k.uops(sa + np.arange(mt), np.zeros(mt, int))

    def mac(k):
        with k.loop(o, mt, n, 0):          # rows of the output
            with k.loop(mt, 1, 0, n):      # output column blocks
                k.uops(np.full(n, sa), si + np.arange(n), sw + np.arange(n))

    b.gemm(("reset", o, mt, sa), reset, reset=True)
    b.gemm(("mac", o, n, mt, si, sw, sa), mac)
    return mt


def requant(b, base, cnt):
    rng_ = lambda k: k.uops(base + np.arange(cnt), base + np.arange(cnt))  # noqa: E731
    b.alu(("shr8", base, cnt), rng_, AluOp.SHR, use_imm=True, imm=8)
    b.alu(("max0", base, cnt), rng_, AluOp.MAX, use_imm=True, imm=0)
    b.alu(("min127", base, cnt), rng_, AluOp.MIN, use_imm=True, imm=127)


@pytest.mark.parametrize("o,n,m", [(4, 1, 4)])
def test_gemm_default(dev, o, n, m):
    cfg = dev.config
    inp, wgt = gemm_data(cfg, o, n, m)
    ib, wb = upload(dev, inp), upload(dev, wgt)
    ob = dev.alloc(o * m * cfg.elem_bytes(MemType.OUT))
    b = ProgramBuilder(dev, debug=True)
    emit_gemm_tile(b, ib, wb, ob, o, n, m)
    requant(b, 0, o * m)
    store_all(b, ob, o * m)
    res = b.synchronize()
    got = read_out(dev, ob, o * m).reshape(o, m, cfg.BATCH, cfg.BLOCK_OUT)
    np.testing.assert_array_equal(got, gemm_oracle(inp, wgt))
    assert res.stats["gemm_counter"] == o * m * n   # GEMM really ran (BR-11)


def emit_two_thread_gemm(b, ib, wb, ob, o, n, m):
    """Double-buffered pipeline: output column blocks split into tiles of 1 block, virtual
    thread t = tile % 2 owns INP/WGT/ACC region t.  Tokens: load waits for compute to free
    region t (tile - 2), compute waits for load and for store to free acc region t."""
    cfg = b.cfg
    tiles = m
    for t in range(tiles):
        vt = t % 2
        si, sw, sa = vt * o * n, vt * n, vt * o
        if t >= 2:
            b.dep_pop(C, L)
        b.load_2d(ib, 0, MemType.INP, si, 1, o * n, o * n)
        b.load_2d(wb, t * n, MemType.WGT, sw, 1, n, n)
        b.dep_push(L, C)
        b.dep_pop(L, C)
        if t >= 2:
            b.dep_pop(S, C)
        b.gemm(("vreset", o, sa), lambda k: k.uops(sa + np.arange(o), np.zeros(o, int)),  # noqa: B023
               reset=True)

        def mac(k, si=si, sw=sw, sa=sa):
            with k.loop(o, 1, n, 0):
                k.uops(np.full(n, sa), si + np.arange(n), sw + np.arange(n))

        b.gemm(("vmac", o, n, si, sw, sa), mac)
        b.dep_push(C, L)
        requant(b, sa, o)
        b.dep_push(C, S)
        b.dep_pop(C, S)
        # out[:, t] for all o rows: element (row, t) at row*m + t
        b.store_2d(sa, ob, t, o, 1, m)
        b.dep_push(S, C)
    del cfg


def test_gemm_two_virtual_threads(dev):
    cfg = dev.config
    o, n, m = 4, 1, 4
    inp, wgt = gemm_data(cfg, o, n, m, seed=3)
    ib, wb = upload(dev, inp), upload(dev, wgt)
    ob = dev.alloc(o * m * cfg.elem_bytes(MemType.OUT))
    b = ProgramBuilder(dev, debug=True)
    emit_two_thread_gemm(b, ib, wb, ob, o, n, m)
    b.synchronize()
    got = read_out(dev, ob, o * m).reshape(o, m, cfg.BATCH, cfg.BLOCK_OUT)
    np.testing.assert_array_equal(got, gemm_oracle(inp, wgt))


def test_gemm_split_into_launches(dev):
    """A pipelined GEMM split into several launches gives the same result."""
    cfg = dev.config
    o, n, m = 4, 2, 8
    inp, wgt = gemm_data(cfg, o, n, m, seed=5)
    ib, wb = upload(dev, inp), upload(dev, wgt)
    ob = dev.alloc(o * m * cfg.elem_bytes(MemType.OUT))
    b = ProgramBuilder(dev, max_insns_per_launch=24, debug=True)
    emit_two_thread_gemm(b, ib, wb, ob, o, n, m)
    res = b.synchronize()
    assert res.stats["launches"] >= 3
    assert res.stats["oversized_launches"] == 0
    assert all(p.shape[0] <= 24 for p in b.last_programs)
    got = read_out(dev, ob, o * m).reshape(o, m, cfg.BATCH, cfg.BLOCK_OUT)
    np.testing.assert_array_equal(got, gemm_oracle(inp, wgt))


# ------------------------------------------------------------------ ALU
ALU_CASES = [("shl_imm", AluOp.SHR, "imm_neg"), ("max_imm", AluOp.MAX, "imm"),
             ("max_tensor", AluOp.MAX, "tensor"), ("add_imm", AluOp.ADD, "imm"),
             ("add_tensor", AluOp.ADD, "tensor"), ("shr_imm", AluOp.SHR, "imm"),
             ("min_imm", AluOp.MIN, "imm"), ("min_tensor", AluOp.MIN, "tensor")]


@pytest.mark.parametrize("name,op,kind", ALU_CASES, ids=[c[0] for c in ALU_CASES])
def test_alu(dev, name, op, kind):
    cfg = dev.config
    n = 64  # 8x8 tiles
    a = acc_tensor(cfg, n, -16, 16, seed=1)
    bt = acc_tensor(cfg, n, -16, 16, seed=2)
    imm = int(rng(7).integers(1, 5))
    ab = upload(dev, np.concatenate([a, bt]))
    ob = dev.alloc(n * cfg.elem_bytes(MemType.OUT))
    b = ProgramBuilder(dev)
    b.load_2d(ab, 0, MemType.ACC, 0, 1, 2 * n, 2 * n)
    x = a.astype(np.int64)
    if kind == "tensor":
        alu_all(b, n, op, src_off=n)
        y = bt.astype(np.int64)
    else:
        v = -imm if kind == "imm_neg" else imm
        alu_all(b, n, op, imm=v)
        y = np.int64(v)
    want = {AluOp.MIN: lambda: np.minimum(x, y), AluOp.MAX: lambda: np.maximum(x, y),
            AluOp.ADD: lambda: x + y,
            AluOp.SHR: lambda: (x >> y) if np.all(y >= 0) else (x << -y)}[op]()
    store_all(b, ob, n)
    b.synchronize()
    np.testing.assert_array_equal(read_out(dev, ob, n), want.astype(np.int8))


def test_relu(dev):
    cfg = dev.config
    n = 64
    a = acc_tensor(cfg, n, -256, 256, seed=4)
    ab, ob = upload(dev, a), dev.alloc(n * cfg.elem_bytes(MemType.OUT))
    b = ProgramBuilder(dev)
    b.load_2d(ab, 0, MemType.ACC, 0, 8, 8, 8)
    alu_all(b, n, AluOp.MAX, imm=0)
    alu_all(b, n, AluOp.MIN, imm=127)
    store_all(b, ob, n)
    b.synchronize()
    np.testing.assert_array_equal(read_out(dev, ob, n), np.clip(a, 0, 127).astype(np.int8))


def test_shift_and_scale(dev):
    cfg = dev.config
    n = 64
    a = acc_tensor(cfg, n, -256, 256, seed=6)
    add, sh = int(rng(8).integers(0, 8)), int(rng(9).integers(1, 5))
    ab, ob = upload(dev, a), dev.alloc(n * cfg.elem_bytes(MemType.OUT))
    b = ProgramBuilder(dev)
    b.load_2d(ab, 0, MemType.ACC, 0, 8, 8, 8)
    alu_all(b, n, AluOp.ADD, imm=add)
    alu_all(b, n, AluOp.SHR, imm=sh)
    store_all(b, ob, n)
    b.synchronize()
    want = ((a.astype(np.int64) + add) >> sh).astype(np.int8)
    np.testing.assert_array_equal(read_out(dev, ob, n), want)


# ------------------------------------------------------------------ micro-op cache
def test_kernel_larger_than_uop_buffer():
    """A GEMM kernel with more micro-ops than the UOP scratchpad is split, not truncated."""
    cfg = preset("tiny").replace(LOG_UOP_BUFF_SIZE=8)          # 64 micro-ops
    dev = fsim.FsimDevice(cfg, mem_bytes=4 << 20)
    nrow, kblk = 20, 8                                            # 160 micro-ops
    inp, wgt = gemm_data(cfg, nrow, kblk, 1, seed=11)
    ib, wb = upload(dev, inp), upload(dev, wgt)
    ob = dev.alloc(nrow * cfg.elem_bytes(MemType.OUT))
    b = ProgramBuilder(dev, debug=True)
    b.load_2d(ib, 0, MemType.INP, 0, 1, nrow * kblk, nrow * kblk)
    b.load_2d(wb, 0, MemType.WGT, 0, 1, kblk, kblk)
    b.dep_push(L, C)
    b.dep_pop(L, C)
    b.gemm("rst", lambda k: k.uops(np.arange(nrow), np.zeros(nrow, int)), reset=True)
    r, kk = np.divmod(np.arange(nrow * kblk), kblk)
    k = b.gemm("big", lambda k: k.uops(r, r * kblk + kk, kk))
    assert len(k.chunks) == 3
    requant(b, 0, nrow)
    store_all(b, ob, nrow)
    res = b.synchronize()
    assert res.stats["gemm_counter"] == nrow * kblk
    got = read_out(dev, ob, nrow).reshape(nrow, 1, cfg.BATCH, cfg.BLOCK_OUT)
    np.testing.assert_array_equal(got, gemm_oracle(inp, wgt))


def test_alu_kernel_too_large_rejected():
    cfg = preset("tiny").replace(LOG_UOP_BUFF_SIZE=8)
    b = ProgramBuilder(fsim.FsimDevice(cfg, mem_bytes=1 << 20))

    def rec(k):
        with k.loop(2, 1, 1):
            k.uops(np.arange(100), np.arange(100))

    with pytest.raises(BuilderError, match="cannot be split exactly"):
        b.alu("x", rec, AluOp.ADD)


def test_repeat_after_uop_buffer_overwritten():
    """BR-18: K1, then K2 that overwrites the whole UOP scratchpad, then K1 again."""
    cfg = preset("tiny").replace(LOG_UOP_BUFF_SIZE=8)          # 64 micro-ops
    dev = fsim.FsimDevice(cfg, mem_bytes=4 << 20)
    n = 40
    a = acc_tensor(cfg, 64, -1000, 1000, seed=12)
    ab, ob = upload(dev, a), dev.alloc(n * cfg.elem_bytes(MemType.OUT))
    k1 = lambda k: k.uops(np.arange(n), np.arange(n))              # noqa: E731
    k2 = lambda k: k.uops(np.arange(64)[::-1], np.arange(64))      # noqa: E731
    b = ProgramBuilder(dev, debug=True)
    want = a[:n].astype(np.int64)
    for it in range(3):
        b.load_2d(ab, 0, MemType.ACC, 0, 1, 64, 64)
        b.alu("k1", k1, AluOp.ADD, use_imm=True, imm=3)
        b.alu("k2", k2, AluOp.MAX, use_imm=True, imm=-5000)       # identity, fills UOP
        b.alu("k1", k1, AluOp.ADD, use_imm=True, imm=3)
        store_all(b, ob, n)
        res = b.synchronize()
        assert res.stats["uop_loads"] == 3                         # reloaded every launch
        np.testing.assert_array_equal(read_out(dev, ob, n), (want + 6).astype(np.int8))


def test_allocator_alignment_property():
    """BR-09: every buffer address is a multiple of every element size."""
    for name in PRESETS + ["ultra96"]:
        cfg = preset(name)
        dev = fsim.FsimDevice(cfg, mem_bytes=8 << 20)
        for nbytes in (1, 3, 17, 64, 100, 4095, 4097, 65536 + 5):
            buf = dev.alloc(nbytes)
            for m in MemType:
                assert buf.addr % cfg.elem_bytes(m) == 0, (name, m, buf)


def test_regions_exactly_the_touched_buffers():
    """A DMA to a buffer the program did not name is outside its regions: the run reports
    it (the builder passes only its own and the named buffers)."""
    cfg = preset("tiny")
    dev = fsim.FsimDevice(cfg, mem_bytes=1 << 20)
    calls = []
    orig = dev.run

    def spy(addr, count, *, regions=None, timeout_cycles=None):
        calls.append(list(regions))
        return orig(addr, count, regions=regions, timeout_cycles=timeout_cycles)

    dev.run = spy
    a = upload(dev, acc_tensor(cfg, 4))
    dev.alloc(1000)                                   # unrelated buffer
    o = dev.alloc(4 * cfg.elem_bytes(MemType.OUT))
    b = ProgramBuilder(dev)
    b.load_2d(a, 0, MemType.ACC, 0, 1, 4, 4)
    alu_all(b, 4, AluOp.SHR, imm=0)
    store_all(b, o, 4)
    b.synchronize()
    (regs,) = calls
    addrs = {r.addr for r in regs}
    assert a.addr in addrs and o.addr in addrs and len(regs) == 4   # + insn, uop buffers
