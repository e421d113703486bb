"""Helpers for building raw VTA programs in tests, straight from ``hw.isa`` encoders.

Tensor data is laid out here independently of the simulator: an INP element is
``BATCH x BLOCK_IN`` values, a WGT element ``BLOCK_OUT x BLOCK_IN``, an ACC/OUT element
``BATCH x BLOCK_OUT``, little-endian two's complement.
"""

from __future__ import annotations

import numpy as np
from vtaforge.hw.config import MemType
from vtaforge.hw.isa import AluOp, Insn, Opcode, encode_program, encode_uops

L, S, G, F, A = Opcode.LOAD, Opcode.STORE, Opcode.GEMM, Opcode.FINISH, Opcode.ALU


def int_dtype(bits: int) -> str:
    return {8: "<i1", 16: "<i2", 32: "<i4"}[bits]


def wrap(x, bits):
    """Oracle wrap of Python/numpy ints to signed ``bits`` bits."""
    x = np.asarray(x, dtype=object) if not isinstance(x, np.ndarray) else x.astype(object)
    m = 1 << bits
    h = 1 << (bits - 1)
    return np.vectorize(lambda v: ((int(v) + h) % m) - h, otypes=[object])(x).astype(np.int64)


class Image:
    """A DRAM image under construction: ``put`` places bytes at aligned addresses, ``build``
    appends the instructions and returns ``(dram, insn_addr, insn_count)``."""

    def __init__(self, cfg, guard: int = 0):
        self.cfg = cfg
        self.align = cfg.dram_alignment
        self.guard = guard
        self.parts: list[tuple[int, bytes]] = []
        self.cursor = self.align

    def _alloc(self, nbytes: int) -> int:
        self.cursor += self.guard
        self.cursor = -(-self.cursor // self.align) * self.align
        addr = self.cursor
        self.cursor += nbytes
        return addr

    def put(self, data) -> int:
        """Place raw bytes (or an array's bytes); return the byte address."""
        b = data if isinstance(data, (bytes, bytearray)) else np.ascontiguousarray(data).tobytes()
        addr = self._alloc(len(b))
        self.parts.append((addr, bytes(b)))
        return addr

    def zeros(self, nbytes: int) -> int:
        return self.put(bytes(nbytes))

    def base(self, addr: int, mem) -> int:
        """Element-unit dram_base of byte address ``addr`` for memory type ``mem``."""
        eb = self.cfg.elem_bytes(mem)
        assert addr % eb == 0
        return addr // eb

    def uops(self, dst, src, wgt=None) -> int:
        dst = np.atleast_1d(dst)
        wgt = np.zeros_like(dst) if wgt is None else wgt
        return self.put(encode_uops(self.cfg, dst, src, wgt).astype("<u4"))

    def build(self, insns, tail: int = 64, fill: int = 0):
        prog = encode_program(self.cfg, insns).reshape(-1)
        ia = self._alloc(prog.size)
        self.parts.append((ia, prog.tobytes()))
        size = self.cursor + self.guard + tail
        dram = np.full(size, fill, dtype=np.uint8)
        for a, b in self.parts:
            dram[a:a + len(b)] = np.frombuffer(b, dtype=np.uint8)
        return dram, ia, len(insns)


def acc_bytes(cfg, x: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(x.astype(int_dtype(cfg.ACC_WIDTH)))


def read_out(cfg, dram, addr, n_elems):
    """Read ``n_elems`` OUT elements at byte ``addr`` → int array (n, BATCH, BLOCK_OUT)."""
    eb = cfg.elem_bytes(MemType.OUT)
    raw = dram[addr:addr + n_elems * eb]
    return raw.view(int_dtype(cfg.OUT_WIDTH)).reshape(n_elems, cfg.BATCH, cfg.BLOCK_OUT).astype(np.int64)


def ld(mem, sram, dram_base, y, x, stride=None, pads=(0, 0, 0, 0), **flags):
    return Insn(L, memory_type=int(mem), sram_base=sram, dram_base=dram_base, y_size=y,
                x_size=x, x_stride=x if stride is None else stride, y_pad_0=pads[0],
                y_pad_1=pads[1], x_pad_0=pads[2], x_pad_1=pads[3], **flags)


def st(sram, dram_base, y, x, stride=None, **flags):
    return Insn(S, memory_type=int(MemType.OUT), sram_base=sram, dram_base=dram_base,
                y_size=y, x_size=x, x_stride=x if stride is None else stride, **flags)


def alu(op, bgn, end, iter_out=1, iter_in=1, dfo=0, dfi=0, sfo=0, sfi=0, imm=None,
        reset=0, **flags):
    return Insn(A, alu_opcode=int(op), uop_bgn=bgn, uop_end=end, iter_out=iter_out,
                iter_in=iter_in, dst_factor_out=dfo, dst_factor_in=dfi, src_factor_out=sfo,
                src_factor_in=sfi, use_imm=0 if imm is None else 1,
                imm=0 if imm is None else imm, reset=reset, **flags)


def gemm(bgn, end, iter_out=1, iter_in=1, d=(0, 0), s=(0, 0), w=(0, 0), reset=0, **flags):
    return Insn(G, uop_bgn=bgn, uop_end=end, iter_out=iter_out, iter_in=iter_in,
                dst_factor_out=d[0], dst_factor_in=d[1], src_factor_out=s[0],
                src_factor_in=s[1], wgt_factor_out=w[0], wgt_factor_in=w[1], reset=reset,
                **flags)


def nop(module_mem=MemType.UOP, store=False, **flags):
    """A token-only instruction (x_size 0) in the module of ``module_mem`` (or store)."""
    if store:
        return Insn(S, memory_type=int(MemType.OUT), **flags)
    return Insn(L, memory_type=int(module_mem), **flags)


def finish(**flags):
    return Insn(F, **flags)


__all__ = ["record_dot_gemm", "dot_gemm_oracle",
           "Image", "ld", "st", "alu", "gemm", "nop", "finish", "wrap", "read_out",
           "acc_bytes", "int_dtype", "AluOp", "MemType", "Insn", "Opcode", "L", "S", "G", "F", "A"]


def record_dot_gemm(builder, xb, wb, ob, n_in: int) -> None:
    """Record on a ProgramBuilder: LOAD ``n_in`` INP and WGT elements, one GEMM summing
    ``x[i] @ w[i].T`` over them into ACC 0, STORE it to ``ob`` (out = the int8 truncation;
    oracle: :func:`dot_gemm_oracle`).  Nothing is synchronized."""
    from vtaforge.hw.isa import Module

    L, C, S = Module.LOAD, Module.COMPUTE, Module.STORE
    builder.load_2d(xb, 0, MemType.INP, 0, 1, n_in, n_in)
    builder.load_2d(wb, 0, MemType.WGT, 0, 1, n_in, n_in)
    builder.dep_push(L, C)
    builder.dep_pop(L, C)
    builder.gemm("zero", lambda k: k.uop(0, 0, 0), reset=True)

    def mac(k):
        k.loop_begin(n_in, 0, 1, 1)
        k.uop(0, 0, 0)
        k.loop_end()

    builder.gemm(("mac", n_in), mac)
    builder.dep_push(C, S)
    builder.dep_pop(C, S)
    builder.store_2d(0, ob, 0, 1, 1, 1)


def dot_gemm_oracle(x: np.ndarray, w: np.ndarray) -> np.ndarray:
    """int8 ``sum_i x[i] @ w[i].T`` (x ``[n, BATCH, BLOCK_IN]``, w ``[n, BLOCK_OUT, BLOCK_IN]``)."""
    acc = sum(x[i].astype(np.int64) @ w[i].astype(np.int64).T for i in range(x.shape[0]))
    return ((acc + 128) % 256 - 128).astype(np.int8)
