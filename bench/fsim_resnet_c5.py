"""ResNet-18 layer C5 on the functional simulator, hand-built with the ProgramBuilder.

C5 (vta-anchor.md §7.2): 28x28, 128 -> 128 channels, 3x3, pad 1, stride 1, batch 1, int8,
``pynq`` preset (1x16x16, INP 2048 / WGT 1024 / ACC 2048 / UOP 8192 entries).

Schedule:
- DRAM layouts (elements): input ``(H, W, ICB)``, weights ``(OCB, ICB, KH, KW)``, output
  ``(H, W, OCB)``, with ICB = OCB = 128 / 16 = 8 channel blocks.
- All 576 weight elements are loaded once and stay resident.
- Output row tiles of TH = 4 rows (7 tiles): per tile one padded input LOAD of
  (TH + 2) x 30 x 8 elements (x padding 8 elements = one pixel of 8 channel blocks each
  side; y padding 1 row on the first/last tile), a reset GEMM, one GEMM whose 576
  micro-ops (ocb, icb, kh, kw) run under a (TH rows) x (28 columns) loop nest, three ALU
  ops (>> 8, max 0, min 127) and one STORE.  The micro-op kernels are recorded once and
  reused by every tile.
- Tokens: load of tile t waits for the GEMM of tile t-1 (input buffer free); the reset of
  tile t waits for the store of tile t-1 (accumulator free).

Prints wall seconds, GEMM micro-ops executed vs ideal (MACs / 256), DRAM bytes vs the
minimum (each tensor read or written once), instructions.  Not a pass/fail timing test.

Run: ``/work/venv/bin/python bench/fsim_resnet_c5.py``
"""

from __future__ import annotations

import argparse
import sys
import time

import numpy as np
from _record import header

from vtaforge.hw.config import MemType, preset
from vtaforge.hw.isa import AluOp, Module
from vtaforge.runtime.builder import ProgramBuilder
from vtaforge.runtime.fsim import FsimDevice

L, C, S = Module.LOAD, Module.COMPUTE, Module.STORE
H = W = 28
CIN = COUT = 128
K = 3
TH = 4          # output rows per tile
SHIFT = 8


def reference(x: np.ndarray, w: np.ndarray) -> np.ndarray:
    """int64 conv2d (NCHW, pad 1, stride 1), wrap to int32, >> SHIFT, clip [0, 127]."""
    xp = np.pad(x.astype(np.int64), ((0, 0), (1, 1), (1, 1)))
    acc = np.zeros((COUT, H, W), np.int64)
    for kh in range(K):
        for kw in range(K):
            acc += np.einsum("oc,chw->ohw", w[:, :, kh, kw].astype(np.int64),
                             xp[:, kh:kh + H, kw:kw + W])
    acc = ((acc + 2**31) % 2**32) - 2**31
    return np.clip(acc >> SHIFT, 0, 127).astype(np.int8)


def build_and_run(dev: FsimDevice, x: np.ndarray, w: np.ndarray):
    cfg = dev.config
    bi, bo = cfg.BLOCK_IN, cfg.BLOCK_OUT
    icb, ocb = CIN // bi, COUT // bo
    # pack: input (H, W, ICB, BLOCK_IN); weights (OCB, ICB, KH, KW, BLOCK_OUT, BLOCK_IN)
    xin = np.ascontiguousarray(x.reshape(icb, bi, H, W).transpose(2, 3, 0, 1))
    wpk = np.ascontiguousarray(w.reshape(ocb, bo, icb, bi, K, K).transpose(0, 2, 4, 5, 1, 3))
    ib, wb = dev.alloc(xin.nbytes), dev.alloc(wpk.nbytes)
    ob = dev.alloc(H * W * ocb * cfg.elem_bytes(MemType.OUT))
    dev.write(ib, xin)
    dev.write(wb, wpk)

    row_in = (W + 2) * icb          # padded input row, elements
    row_out = W * ocb               # output row, elements
    n_wgt = ocb * icb * K * K
    assert n_wgt <= cfg.WGT_DEPTH and (TH + 2) * row_in <= cfg.INP_DEPTH
    assert TH * row_out <= cfg.ACC_DEPTH

    o_, i_, kh_, kw_ = np.meshgrid(np.arange(ocb), np.arange(icb), np.arange(K), np.arange(K),
                                   indexing="ij")
    conv_dst = o_.reshape(-1)
    conv_src = (kh_ * row_in + kw_ * icb + i_).reshape(-1)
    conv_wgt = (((o_ * icb + i_) * K + kh_) * K + kw_).reshape(-1)

    def conv(k, th):
        with k.loop(th, row_out, row_in, 0):         # output rows
            with k.loop(W, ocb, icb, 0):             # output columns
                k.uops(conv_dst, conv_src, conv_wgt)

    def reset(k, th):
        with k.loop(th, row_out, 0, 0):
            with k.loop(W, ocb, 0, 0):
                k.uops(np.arange(ocb), np.zeros(ocb, int))

    def elementwise(k, th):
        with k.loop(th, row_out, row_out):
            k.uops(np.arange(row_out), np.arange(row_out))

    b = ProgramBuilder(dev)
    b.load_2d(wb, 0, MemType.WGT, 0, 1, n_wgt, n_wgt)
    tiles = list(range(0, H, TH))
    for t, r0 in enumerate(tiles):
        th = min(TH, H - r0)
        top, bot = r0 - 1, r0 + th + 1          # input rows needed [top, bot)
        y0 = 1 if top < 0 else 0
        y1 = 1 if bot > H else 0
        lo, hi = max(top, 0), min(bot, H)
        if t > 0:
            b.dep_pop(C, L)
        b.load_2d(ib, lo * W * icb, MemType.INP, 0, hi - lo, W * icb, W * icb,
                  pad=(y0, y1, icb, icb))
        b.dep_push(L, C)
        b.dep_pop(L, C)
        if t > 0:
            b.dep_pop(S, C)
        b.gemm(("c5_reset", th), lambda k, th=th: reset(k, th), reset=True)
        b.gemm(("c5_conv", th), lambda k, th=th: conv(k, th))
        if t < len(tiles) - 1:
            b.dep_push(C, L)
        ew = lambda k, th=th: elementwise(k, th)     # noqa: E731
        b.alu(("c5_ew", th), ew, AluOp.SHR, use_imm=True, imm=SHIFT)
        b.alu(("c5_ew", th), ew, AluOp.MAX, use_imm=True, imm=0)
        b.alu(("c5_ew", th), ew, AluOp.MIN, use_imm=True, imm=127)
        b.dep_push(C, S)
        b.dep_pop(C, S)
        b.store_2d(0, ob, r0 * row_out, 1, th * row_out, th * row_out)
        if t < len(tiles) - 1:
            b.dep_push(S, C)
    res = b.synchronize()
    out = dev.read(ob).view(np.int8).reshape(H, W, ocb, bo).transpose(2, 3, 0, 1)
    return out.reshape(COUT, H, W), res


def main(argv: list[str]) -> None:
    argparse.ArgumentParser(description=__doc__.splitlines()[0]).parse_args(argv)
    print(header(__file__), flush=True)
    cfg = preset("pynq")
    rng = np.random.default_rng(0)
    x = rng.integers(-128, 128, (CIN, H, W)).astype(np.int8)
    w = rng.integers(-128, 128, (COUT, CIN, K, K)).astype(np.int8)
    dev = FsimDevice(cfg, mem_bytes=64 << 20)
    t0 = time.perf_counter()
    got, res = build_and_run(dev, x, w)
    wall = time.perf_counter() - t0
    t1 = time.perf_counter()
    want = reference(x, w)
    ref_s = time.perf_counter() - t1
    ok = np.array_equal(got, want)
    st = res.stats
    macs = H * W * CIN * COUT * K * K
    ideal = macs // cfg.macs_per_cycle
    data_min = x.nbytes + w.nbytes + H * W * COUT
    dram = st.get("dram_read_nbytes", 0) + st.get("dram_write_nbytes", 0)
    print("ResNet-18 C5 (28x28, 128->128, 3x3, pad 1, stride 1) on fsim, pynq preset")
    print(f"  result matches numpy reference : {ok}")
    print(f"  wall seconds (build + run)     : {wall:.3f}   (numpy reference {ref_s:.3f})")
    print(f"  GEMM micro-ops executed        : {st.get('gemm_counter', 0)}  "
          f"(ideal MACs/{cfg.macs_per_cycle} = {ideal}, "
          f"ratio {st.get('gemm_counter', 0) / ideal:.3f})")
    print(f"  ALU micro-ops executed         : {st.get('alu_counter', 0)}")
    print(f"  DRAM bytes read+written        : {dram}  (minimum {data_min}, "
          f"ratio {dram / data_min:.3f})")
    for key in ("inp_load_nbytes", "wgt_load_nbytes", "uop_load_nbytes", "out_store_nbytes"):
        print(f"    {key:<28} : {st.get(key, 0)}")
    print(f"  instructions                   : {st['insns']} in {st['launches']} launch(es); "
          f"micro-op loads {st['uop_loads']} ({st['uop_words_loaded']} micro-ops), "
          f"kernels recorded {st['kernel_records']}, cache hits {st['kernel_hits']}")
    if not ok:
        raise SystemExit("C5 result differs from the numpy reference")


if __name__ == "__main__":
    main(sys.argv[1:])
