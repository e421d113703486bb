"""The one test-helper module for raw VTA programs and DRAM images.

Used by the runtime tests (fsim, rtl, the simulated PYNQ board), the core tests in
``tests/hw`` and the cocotb benches (which import it inside cocotb's simulator process:
it needs only numpy and ``vtaforge.hw``, plus ``vtaforge.runtime.fsim`` for
:func:`fsim_expected`/:func:`run_both`, imported when called).

Tensor data is laid out here independently of every backend: an INP element is
``BATCH x BLOCK_IN`` values, a WGT element ``BLOCK_OUT x BLOCK_IN``, an ACC/OUT element
``BATCH x BLOCK_OUT``, little-endian two's complement.

- :class:`Image`: a DRAM image under construction (growing, or of a fixed size over a
  background of random or fill bytes), ``build`` appends the instructions;
- instruction constructors :func:`ld`, :func:`st`, :func:`gemm`, :func:`alu`,
  :func:`nop`, :func:`finish`;
- oracles and readers: :func:`wrap`, :func:`read_out`, :func:`acc_bytes`,
  :func:`rand_elems`, :func:`dot_gemm_oracle`;
- running and comparing: :func:`fsim_expected`, :func:`run_both`, :func:`first_diff`,
  :func:`assert_same_dram`;
- the launch protocol of ``hw/regs.py`` as register writes (:func:`launch_writes`,
  :func:`bit`), for benches that drive the registers themselves.
"""

from __future__ import annotations

import numpy as np

from vtaforge.hw import regs
from vtaforge.hw.config import MemType
from vtaforge.hw.isa import AluOp, Insn, Opcode, encode_program, encode_uops

__all__ = ["Image", "ld", "st", "alu", "gemm", "nop", "finish", "wrap", "read_out",
           "out_view", "acc_bytes", "int_dtype", "rand_elems", "fsim_expected", "run_both",
           "first_diff", "assert_same_dram", "bit", "launch_writes", "record_dot_gemm",
           "dot_gemm_oracle", "AluOp", "MemType", "Insn", "Opcode", "L", "S", "G", "F", "A"]

L, S, G, F, A = Opcode.LOAD, Opcode.STORE, Opcode.GEMM, Opcode.FINISH, Opcode.ALU


def insn_cols(rows) -> dict:
    """Decoded-program columns (``INSN_FIELDS`` -> int64 array) of hand-written instructions:
    ``rows`` is a list of ``{field: value}`` dicts, unnamed fields 0 (for the cycle model's
    hand programs)."""
    from vtaforge.hw.isa import INSN_FIELDS

    cols = {k: np.zeros(len(rows), np.int64) for k in INSN_FIELDS}
    for i, r in enumerate(rows):
        for k, v in r.items():
            cols[k][i] = v
    return cols


def int_dtype(bits: int) -> str:
    """The little-endian signed numpy dtype of ``bits`` (8, 16 or 32) bits."""
    return {8: "<i1", 16: "<i2", 32: "<i4"}[bits]


def wrap(x, bits):
    """Oracle wrap of Python/numpy ints to signed ``bits`` bits (int64 result)."""
    x = np.asarray(x, dtype=object) if not isinstance(x, np.ndarray) else x.astype(object)
    m = 1 << bits
    h = 1 << (bits - 1)
    return np.vectorize(lambda v: ((int(v) + h) % m) - h, otypes=[object])(x).astype(np.int64)


# ============================================================================ images
class Image:
    """A DRAM image under construction.

    ``put`` places bytes at the next address aligned to ``cfg.dram_alignment`` (after
    ``guard`` free bytes) and returns the byte address; ``build(insns)`` appends the
    encoded program and returns ``(dram, insn_addr, insn_count)``.

    Args:
        cfg: the VTAConfig.
        size: ``None`` (default): the image grows; ``build`` returns ``tail`` bytes past
            the program (plus ``guard``), every byte not written being ``fill``.  An
            integer: a fixed ``size``-byte image over a background of ``fill`` bytes, or
            of random bytes when ``rng`` is given; ``build`` returns all of it.
        rng: a ``numpy.random.Generator`` for the random background (fixed size only).
        start: byte address of the first allocation (default ``cfg.dram_alignment``).
        guard: free bytes left before every allocation (guard bytes around buffers).
        fill: the background byte.
    """

    def __init__(self, cfg, size: int | None = None, rng=None, *, start: int | None = None,
                 guard: int = 0, fill: int = 0):
        self.cfg = cfg
        self.align = cfg.dram_alignment
        self.guard = guard
        self.fill = fill
        self.size = size
        self.cursor = self.align if start is None else start
        self.parts: list[tuple[int, bytes]] = []
        if size is not None:
            self.dram = (rng.integers(0, 256, size, dtype=np.uint8) if rng is not None
                         else np.full(size, fill, dtype=np.uint8))

    def alloc(self, nbytes: int, align: int | None = None) -> int:
        """Reserve ``nbytes`` (after ``guard`` bytes, aligned to ``align`` or the image's
        alignment); return the byte address."""
        al = align or self.align
        self.cursor += self.guard
        self.cursor = -(-self.cursor // al) * al
        addr = self.cursor
        self.cursor += nbytes
        assert self.size is None or self.cursor <= self.size, "test image too small"
        return addr

    def put_at(self, addr: int, data) -> int:
        """Write raw bytes (or an array's bytes) at byte ``addr``; return ``addr``."""
        b = data if isinstance(data, (bytes, bytearray)) else np.ascontiguousarray(data).tobytes()
        if self.size is None:
            self.parts.append((addr, bytes(b)))
        else:
            self.dram[addr:addr + len(b)] = np.frombuffer(bytes(b), dtype=np.uint8)
        return addr

    def put(self, data, align: int | None = None) -> int:
        """Place raw bytes (or an array's bytes); return the byte address."""
        b = data if isinstance(data, (bytes, bytearray)) else np.ascontiguousarray(data).tobytes()
        return self.put_at(self.alloc(len(b), align), b)

    def zeros(self, nbytes: int) -> int:
        """Place ``nbytes`` zero bytes; return the byte address."""
        return self.put(bytes(nbytes))

    def base(self, addr: int, mem) -> int:
        """Element-unit ``dram_base`` of byte address ``addr`` for memory type ``mem``."""
        eb = self.cfg.elem_bytes(mem)
        assert addr % eb == 0, (addr, eb)
        return addr // eb

    elem = base

    def uops(self, dst, src, wgt=None) -> int:
        """Place encoded micro-ops (``wgt`` defaults to zeros); return the byte address."""
        dst = np.atleast_1d(np.asarray(dst))
        wgt = np.zeros_like(dst) if wgt is None else np.asarray(wgt)
        return self.put(encode_uops(self.cfg, dst, np.asarray(src), wgt).astype("<u4"))

    def build(self, insns, tail: int = 64, fill: int | None = None):
        """Append the program; return ``(dram, insn_addr, insn_count)``."""
        prog = encode_program(self.cfg, insns).reshape(-1)
        ia = self.put(prog.tobytes())
        if self.size is not None:
            return self.dram, ia, len(insns)
        size = self.cursor + self.guard + tail
        dram = np.full(size, self.fill if fill is None else fill, dtype=np.uint8)
        for a, b in self.parts:
            dram[a:a + len(b)] = np.frombuffer(b, dtype=np.uint8)
        return dram, ia, len(insns)

    program = build


def acc_bytes(cfg, x: np.ndarray) -> np.ndarray:
    """ACC values as their little-endian ACC_WIDTH-bit bytes (for ``Image.put``)."""
    return np.ascontiguousarray(x.astype(int_dtype(cfg.ACC_WIDTH)))


def read_out(cfg, dram, addr, n_elems):
    """Read ``n_elems`` OUT elements at byte ``addr`` → int64 (n, BATCH, BLOCK_OUT)."""
    eb = cfg.elem_bytes(MemType.OUT)
    raw = dram[addr:addr + n_elems * eb]
    return raw.view(int_dtype(cfg.OUT_WIDTH)).reshape(
        n_elems, cfg.BATCH, cfg.BLOCK_OUT).astype(np.int64)


out_view = read_out


def rand_elems(rng, cfg, mem, n, lo=None, hi=None):
    """``n`` random elements of memory type ``mem`` as a little-endian integer array."""
    bits = {MemType.INP: cfg.INP_WIDTH, MemType.WGT: cfg.WGT_WIDTH,
            MemType.ACC: cfg.ACC_WIDTH, MemType.ACC8: 8}[mem]
    count = n * cfg.elem_bytes(mem) * 8 // bits
    lo = -(1 << (bits - 1)) if lo is None else lo
    hi = (1 << (bits - 1)) if hi is None else hi
    return rng.integers(lo, hi, count, dtype=np.int64).astype(int_dtype(bits))


# ============================================================================ instructions
def ld(mem, sram, dram_base, y, x, stride=None, pads=(0, 0, 0, 0), **flags) -> Insn:
    """LOAD ``y`` rows of ``x`` elements of ``mem``; ``pads`` = (y0, y1, x0, x1)."""
    return Insn(L, memory_type=int(mem), sram_base=sram, dram_base=dram_base, y_size=y,
                x_size=x, x_stride=x if stride is None else stride, y_pad_0=pads[0],
                y_pad_1=pads[1], x_pad_0=pads[2], x_pad_1=pads[3], **flags)


def st(sram, dram_base, y, x, stride=None, **flags) -> Insn:
    """STORE ``y`` rows of ``x`` OUT elements."""
    return Insn(S, memory_type=int(MemType.OUT), sram_base=sram, dram_base=dram_base,
                y_size=y, x_size=x, x_stride=x if stride is None else stride, **flags)


def gemm(bgn, end, iter_out=1, iter_in=1, d=(0, 0), s=(0, 0), w=(0, 0), reset=0,
         **flags) -> Insn:
    """GEMM over micro-ops ``[bgn, end)``; ``d``/``s``/``w``: (factor_out, factor_in)."""
    return Insn(G, uop_bgn=bgn, uop_end=end, iter_out=iter_out, iter_in=iter_in,
                dst_factor_out=d[0], dst_factor_in=d[1], src_factor_out=s[0],
                src_factor_in=s[1], wgt_factor_out=w[0], wgt_factor_in=w[1], reset=reset,
                **flags)


def alu(op, bgn, end, iter_out=1, iter_in=1, d=(0, 0), s=(0, 0), imm=None, reset=0, *,
        dfo=None, dfi=None, sfo=None, sfi=None, **flags) -> Insn:
    """ALU ``op`` over micro-ops ``[bgn, end)``; ``imm`` set means ``use_imm``.

    Loop factors: ``d``/``s`` as (factor_out, factor_in), or one by one with ``dfo``,
    ``dfi``, ``sfo``, ``sfi`` (which win over the tuples)."""
    dfo = d[0] if dfo is None else dfo
    dfi = d[1] if dfi is None else dfi
    sfo = s[0] if sfo is None else sfo
    sfi = s[1] if sfi is None else sfi
    return Insn(A, alu_opcode=int(op), uop_bgn=bgn, uop_end=end, iter_out=iter_out,
                iter_in=iter_in, dst_factor_out=dfo, dst_factor_in=dfi, src_factor_out=sfo,
                src_factor_in=sfi, use_imm=0 if imm is None else 1,
                imm=0 if imm is None else imm, reset=reset, **flags)


def nop(module_mem=MemType.UOP, store=False, **flags) -> Insn:
    """A token-only instruction (x_size 0) in the module of ``module_mem`` (or store)."""
    if store:
        return Insn(S, memory_type=int(MemType.OUT), **flags)
    return Insn(L, memory_type=int(module_mem), **flags)


def finish(**flags) -> Insn:
    """FINISH."""
    return Insn(F, **flags)


# ============================================================================ running
def fsim_expected(cfg, dram, ia, n) -> np.ndarray:
    """The DRAM image after the functional simulator ran the program (a copy)."""
    from vtaforge.runtime.fsim import simulate

    exp = dram.copy()
    simulate(cfg, exp, ia, n)
    return exp


def run_both(rtl, cfg, dram, ia, n, **kw):
    """Run on fsim and on the RTL model ``rtl`` (``run_raw``) from the same image.

    Returns ``(fsim_result, rtl_result, fsim_dram, rtl_dram)``."""
    from vtaforge.runtime.fsim import simulate

    ref = dram.copy()
    r_f = simulate(cfg, ref, ia, n)
    got = dram.copy()
    r_r = rtl.run_raw(cfg, got, ia, n, progress=False, **kw)
    return r_f, r_r, ref, got


def first_diff(got: np.ndarray, exp: np.ndarray, what: str = "DRAM") -> str | None:
    """None if equal, else a message naming the first differing byte address, both values
    and the number of differing bytes."""
    n = min(got.size, exp.size)
    bad = np.flatnonzero(got[:n] != exp[:n])
    if bad.size == 0 and got.size == exp.size:
        return None
    if bad.size == 0:
        return f"{what}: sizes differ ({got.size} vs {exp.size} bytes)"
    a = int(bad[0])
    lo = max(0, a - 8)
    return (f"{what} differs at {bad.size} bytes; first at 0x{a:x}: got 0x{int(got[a]):02x}, "
            f"expected 0x{int(exp[a]):02x} (got[0x{lo:x}:+24]={got[lo:lo + 24].tolist()}, "
            f"expected {exp[lo:lo + 24].tolist()})")


def assert_same_dram(ref, got, what: str = "") -> None:
    """Assert two DRAM images are equal (``ref`` expected, ``got`` under test)."""
    msg = first_diff(got, ref, what or "DRAM")
    assert msg is None, msg


# ============================================================================ registers
def bit(register: str, field: str) -> int:
    """The mask of ``field`` of ``register`` in hw/regs.py (``bit("CTRL", "START")``)."""
    for f in regs.reg(register).fields:
        if f.name == field:
            return ((1 << f.width) - 1) << f.lsb
    raise KeyError(f"{register} has no field {field}")


def launch_writes(insn_addr: int, count: int, *, irq_en: bool = False) -> list[tuple[str, int]]:
    """Steps 1 and 2 of the launch protocol (hw/regs.py) as ``(register, value)`` writes:
    the instruction address, the count, then ``CTRL.START`` (with ``IRQ_EN``)."""
    ctrl = bit("CTRL", "START") | (bit("CTRL", "IRQ_EN") if irq_en else 0)
    return [("INSN_ADDR_LO", insn_addr & 0xFFFFFFFF), ("INSN_ADDR_HI", insn_addr >> 32),
            ("INSN_COUNT", count), ("CTRL", ctrl)]


# ============================================================================ programs
def record_dot_gemm(builder, xb, wb, ob, n_in: int) -> None:
    """Record on a ProgramBuilder: LOAD ``n_in`` INP and WGT elements, one GEMM summing
    ``x[i] @ w[i].T`` over them into ACC 0, STORE it to ``ob`` (out = the int8 truncation;
    oracle: :func:`dot_gemm_oracle`).  Nothing is synchronized."""
    from vtaforge.hw.isa import Module

    ml, mc, ms = Module.LOAD, Module.COMPUTE, Module.STORE
    builder.load_2d(xb, 0, MemType.INP, 0, 1, n_in, n_in)
    builder.load_2d(wb, 0, MemType.WGT, 0, 1, n_in, n_in)
    builder.dep_push(ml, mc)
    builder.dep_pop(ml, mc)
    builder.gemm("zero", lambda k: k.uop(0, 0, 0), reset=True)

    def mac(k):
        k.loop_begin(n_in, 0, 1, 1)
        k.uop(0, 0, 0)
        k.loop_end()

    builder.gemm(("mac", n_in), mac)
    builder.dep_push(mc, ms)
    builder.dep_pop(mc, ms)
    builder.store_2d(0, ob, 0, 1, 1, 1)


def dot_gemm_oracle(x: np.ndarray, w: np.ndarray) -> np.ndarray:
    """int8 ``sum_i x[i] @ w[i].T`` (x ``[n, BATCH, BLOCK_IN]``, w ``[n, BLOCK_OUT, BLOCK_IN]``)."""
    acc = sum(x[i].astype(np.int64) @ w[i].astype(np.int64).T for i in range(x.shape[0]))
    return ((acc + 128) % 256 - 128).astype(np.int8)
