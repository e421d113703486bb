"""Small helpers shared by the core tests in ``tests/hw``: a DRAM image builder for hand-made
programs and an fsim-vs-rtl comparison.  Tensor bytes are laid out here from the element
definitions (INP ``BATCH x BLOCK_IN``, WGT ``BLOCK_OUT x BLOCK_IN``, ACC ``BATCH x
BLOCK_OUT``, little-endian two's complement), independently of either backend.
"""

from __future__ import annotations

import numpy as np

from vtaforge.hw.config import MemType
from vtaforge.hw.isa import Insn, Opcode, encode_program, encode_uops
from vtaforge.runtime.fsim import simulate


def int_dtype(bits: int) -> str:
    return {8: "<i1", 16: "<i2", 32: "<i4"}[bits]


class Image:
    """A DRAM image under construction; ``put`` returns byte addresses aligned to
    ``cfg.dram_alignment``; ``build(insns)`` appends the program and returns
    ``(dram, insn_addr, insn_count)``."""

    def __init__(self, cfg):
        self.cfg = cfg
        self.al = cfg.dram_alignment
        self.mem = bytearray(self.al)

    def put(self, data) -> int:
        b = data if isinstance(data, (bytes, bytearray)) else np.ascontiguousarray(data).tobytes()
        self.mem += bytes((-len(self.mem)) % self.al)
        addr = len(self.mem)
        self.mem += bytes(b)
        return addr

    def zeros(self, nbytes: int) -> int:
        return self.put(bytes(nbytes))

    def base(self, addr: int, mem) -> int:
        eb = self.cfg.elem_bytes(mem)
        assert addr % eb == 0
        return addr // eb

    def uops(self, dst, src, wgt) -> int:
        return self.put(encode_uops(self.cfg, np.asarray(dst), np.asarray(src),
                                    np.asarray(wgt)).astype("<u4"))

    def build(self, insns):
        ia = self.put(encode_program(self.cfg, insns).reshape(-1).tobytes())
        self.mem += bytes(self.al)
        return np.frombuffer(bytes(self.mem), dtype=np.uint8).copy(), ia, len(insns)


def rand_elems(rng, cfg, mem, n, lo=None, hi=None):
    """``n`` random elements of memory type ``mem`` as a little-endian integer array."""
    bits = {MemType.INP: cfg.INP_WIDTH, MemType.WGT: cfg.WGT_WIDTH,
            MemType.ACC: cfg.ACC_WIDTH, MemType.ACC8: 8}[mem]
    count = n * cfg.elem_bytes(mem) * 8 // bits
    lo = -(1 << (bits - 1)) if lo is None else lo
    hi = (1 << (bits - 1)) if hi is None else hi
    return rng.integers(lo, hi, count, dtype=np.int64).astype(int_dtype(bits))


def ld(mem, sram, base, y, x, stride=None, pads=(0, 0, 0, 0), **fl):
    return Insn(Opcode.LOAD, memory_type=int(mem), sram_base=sram, dram_base=base, y_size=y,
                x_size=x, x_stride=x if stride is None else stride, y_pad_0=pads[0],
                y_pad_1=pads[1], x_pad_0=pads[2], x_pad_1=pads[3], **fl)


def st(sram, base, y, x, stride=None, **fl):
    return Insn(Opcode.STORE, memory_type=int(MemType.OUT), sram_base=sram, dram_base=base,
                y_size=y, x_size=x, x_stride=x if stride is None else stride, **fl)


def gemm(bgn, end, io=1, ii=1, d=(0, 0), s=(0, 0), w=(0, 0), reset=0, **fl):
    return Insn(Opcode.GEMM, uop_bgn=bgn, uop_end=end, iter_out=io, iter_in=ii,
                dst_factor_out=d[0], dst_factor_in=d[1], src_factor_out=s[0],
                src_factor_in=s[1], wgt_factor_out=w[0], wgt_factor_in=w[1], reset=reset, **fl)


def alu(op, bgn, end, io=1, ii=1, d=(0, 0), s=(0, 0), imm=None, reset=0, **fl):
    return Insn(Opcode.ALU, alu_opcode=int(op), uop_bgn=bgn, uop_end=end, iter_out=io,
                iter_in=ii, dst_factor_out=d[0], dst_factor_in=d[1], src_factor_out=s[0],
                src_factor_in=s[1], use_imm=0 if imm is None else 1,
                imm=0 if imm is None else imm, reset=reset, **fl)


def finish(**fl):
    return Insn(Opcode.FINISH, **fl)


def run_both(rtl, cfg, dram, ia, n, **kw):
    """Run on fsim and on the RTL model from the same image.

    Returns ``(fsim_result, rtl_result, fsim_dram, rtl_dram)``."""
    ref = dram.copy()
    r_f = simulate(cfg, ref, ia, n)
    got = dram.copy()
    r_r = rtl.run_raw(cfg, got, ia, n, progress=False, **kw)
    return r_f, r_r, ref, got


def assert_same_dram(ref, got, what=""):
    diff = np.flatnonzero(ref != got)
    assert diff.size == 0, (f"{what}: {diff.size} bytes differ, first at 0x{diff[0]:x}: "
                            f"fsim {ref[diff[0]]} rtl {got[diff[0]]}")
