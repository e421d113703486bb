"""4-bit activations: a ``LOG_INP_WIDTH`` 2 core (int4 inputs and outputs, int4 or int8
weights) on fsim and on Verilator, raw programs against an independent oracle.

The oracle is written here with Python integers: nibble packing (lane ``2k`` in bits
[3:0] of byte ``k``), the GEMM as ``np.einsum`` in int64, the epilogue as integer shift and
clip.  An INP element of ``BATCH x BLOCK_IN`` int4 values and an OUT element of ``BATCH x
BLOCK_OUT`` int4 values are half the bytes of their int8 forms.
"""

from __future__ import annotations

import numpy as np
import pytest

from programs import Image, MemType, alu, finish, gemm, ld, st
from vtaforge.hw.config import ConfigError, preset
from vtaforge.hw.isa import AluOp, encode_uops
from vtaforge.runtime.fsim import simulate

#: int4 activations with int8 weights (tiny: DSP_PACKING 1, plain products)
A4W8 = preset("tiny").replace(LOG_INP_WIDTH=2, LOG_INP_BUFF_SIZE=9)
#: int4 activations and weights through the DSP-packed multiplier pair
A4W4 = preset("tiny").replace(LOG_INP_WIDTH=2, LOG_WGT_WIDTH=2, LOG_INP_BUFF_SIZE=9,
                              LOG_WGT_BUFF_SIZE=9, DSP_PACKING=2)


def _nibbles(vals) -> bytes:
    v = [int(a) & 0xF for a in np.asarray(vals).reshape(-1)]
    return bytes(v[i] | (v[i + 1] << 4) for i in range(0, len(v), 2))


def _from_nibbles(raw: bytes, n: int) -> np.ndarray:
    out = []
    for b in raw:
        for nib in (b & 0xF, b >> 4):
            out.append(nib - 16 if nib > 7 else nib)
    return np.array(out[:n], np.int64)


def test_config_int4_activations():
    assert A4W8.INP_WIDTH == A4W8.OUT_WIDTH == 4 and A4W8.WGT_WIDTH == 8
    assert A4W8.elem_bytes(MemType.INP) == 2 and A4W8.elem_bytes(MemType.OUT) == 2
    assert A4W8.elem_bytes(MemType.ACC8) == 4          # ACC8 still loads int8 values
    assert A4W4.packs_dsp_pairs and not A4W8.packs_dsp_pairs
    assert A4W8.fingerprint != preset("tiny").fingerprint != A4W4.fingerprint
    with pytest.raises(ConfigError, match=r"LOG_INP_WIDTH = 2 \(int4 activations\) needs "
                                          r"LOG_WGT_WIDTH = 2 or 3"):
        preset("tiny").replace(LOG_INP_WIDTH=2, LOG_WGT_WIDTH=4)
    with pytest.raises(ConfigError, match=r"LOG_INP_WIDTH = 1 is out of range; allowed: "
                                          r"integers 2\.\.4"):
        preset("tiny").replace(LOG_INP_WIDTH=1)


def int4_program(cfg, seed: int = 4):
    """GEMM of int4 inputs (``-8`` included) and ``cfg``'s weights into two accumulator
    entries (three micro-ops each), then SHR (4 for int4 weights, 8 for int8), MAX -8, MIN 7
    and a STORE of both OUT
    elements.  Returns ``(dram, insn_addr, insn_count, out_addr, expected [2, BATCH,
    BLOCK_OUT] int64)``."""
    rng = np.random.default_rng(seed)
    B, BI, BO = cfg.BATCH, cfg.BLOCK_IN, cfg.BLOCK_OUT
    K = 3
    x = rng.integers(-8, 8, (2 * K, B, BI))
    x[0] = -8
    wlo = -8 if cfg.WGT_WIDTH == 4 else -128
    w = rng.integers(wlo, -wlo, (K, BO, BI))
    w[0, 0] = wlo
    sh = 4 if cfg.WGT_WIDTH == 4 else 8
    im = Image(cfg)
    ax = im.put(np.frombuffer(_nibbles(x), np.uint8))
    aw = im.put(np.frombuffer(_nibbles(w), np.uint8) if cfg.WGT_WIDTH == 4
                else w.astype(np.int8))
    ao = im.zeros(2 * cfg.elem_bytes(MemType.OUT))
    dst = np.repeat([0, 1], K)
    u = im.put(encode_uops(cfg, dst, np.arange(2 * K), np.tile(np.arange(K), 2)).astype("<u4"))
    insns = [ld(MemType.INP, 0, im.base(ax, MemType.INP), 1, 2 * K),
             ld(MemType.WGT, 0, im.base(aw, MemType.WGT), 1, K, push_next=1),
             ld(MemType.UOP, 0, im.base(u, MemType.UOP), 1, 2 * K),
             gemm(0, 2 * K, 1, 1, reset=1), gemm(0, 2 * K, 1, 1, pop_prev=1),
             alu(AluOp.SHR, 0, 1, 2, 1, d=(1, 0), imm=sh),
             alu(AluOp.MAX, 0, 1, 2, 1, d=(1, 0), imm=-8),
             alu(AluOp.MIN, 0, 1, 2, 1, d=(1, 0), imm=7, push_next=1),
             st(0, im.base(ao, MemType.OUT), 1, 2, pop_prev=1, push_prev=1), finish(pop_next=1)]
    dram, ia, n = im.build(insns)
    acc = np.einsum("ekbi,koi->ebo", x.reshape(2, K, B, BI), w)
    want = np.clip(acc >> sh, -8, 7)
    return dram, ia, n, ao, want


def _read_int4_out(cfg, dram, addr, shape):
    n = int(np.prod(shape))
    return _from_nibbles(bytes(dram[addr:addr + n // 2]), n).reshape(shape)


@pytest.mark.parametrize("cfg", [A4W8, A4W4], ids=["a4w8", "a4w4"])
def test_int4_activation_program_fsim(cfg):
    dram, ia, n, ao, want = int4_program(cfg)
    simulate(cfg, dram, ia, n)
    got = _read_int4_out(cfg, dram, ao, want.shape)
    np.testing.assert_array_equal(got, want)
    assert want.min() == -8 and want.max() == 7     # both clip bounds hit


@pytest.mark.rtl
def test_int4_activation_program_rtl():
    rtl = pytest.importorskip("vtaforge.runtime.rtl")
    dram, ia, n, ao, want = int4_program(A4W4)
    rtl.run_raw(A4W4, dram, ia, n, progress=False, model=rtl.build_model(A4W4, progress=False))
    np.testing.assert_array_equal(_read_int4_out(A4W4, dram, ao, want.shape), want)
