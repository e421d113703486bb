"""The functional simulator: the executable form of DESIGN.md's "Semantics".

:func:`simulate` runs a program directly on a raw DRAM image (a 1-D ``uint8`` array, byte
address = index), modifying it in place; :class:`FsimDevice` is the ``Device`` backend built
on it.  The static verifier (:mod:`.verify`) runs the same machine in a data-free "dry" mode,
so both share every rule and every error message.

Model (DESIGN.md "Semantics", vta-anchor.md §2.3-§3.3):

- *Fetch* reads the ``insn_count`` instructions at ``insn_addr`` in order and dispatches each
  to the command queue of its module (``hw.isa.insn_module``); each of the three command
  queues holds ``cfg.INSN_QUEUE_DEPTH`` instructions and fetch stalls while the target queue
  is full.  The instruction stream is decoded once, before execution: a program that
  overwrites its own instructions has undefined behaviour.
- Three in-order *modules* (load, compute, store).  A module starts its head instruction
  only when every token it must pop is available and every token queue it will push to has
  room (``cfg.TOKEN_QUEUE_DEPTH``); it pops, executes, then pushes.
- Scheduling is deterministic: each round fetches as far as possible, then runs the load,
  compute and store modules (in that order) as far as possible.  A round without progress
  before completion is a deadlock (:class:`DeadlockError`).
- Completion: a FINISH has executed, every instruction has been fetched and every module has
  drained.  Tokens left in a queue at completion make the program invalid (the next program
  would see them).

Data (element layouts, little-endian two's complement in DRAM):

- INP element: ``BATCH x BLOCK_IN`` values of INP_WIDTH bits; WGT element:
  ``BLOCK_OUT x BLOCK_IN`` of WGT_WIDTH bits (one row per output channel); ACC element
  ``BATCH x BLOCK_OUT`` of ACC_WIDTH bits; OUT element ``BATCH x BLOCK_OUT`` of OUT_WIDTH
  bits (int4 INP, WGT or OUT: two values per byte, lane ``2k`` in the low nibble,
  :func:`~.cpu_ops.unpack_int4`); ACC8 element
  ``BATCH x BLOCK_OUT`` int8 values (sign-extended into the accumulator); UOP element one
  32-bit micro-op.
- Scratchpads start zeroed here, but their contents are undefined by the semantics.
- Accumulator entries are kept as int64 holding the signed ACC_WIDTH-bit value; every write
  wraps explicitly.  GEMM sums are computed exactly in floating point (contractions are
  split so that every partial sum is an integer of magnitude <= 2**24 with float32, 2**53
  with float64) and added as int64 integers.

Speed: a GEMM loop nest only accumulates (it never writes INP or WGT), so its micro-ops
commute and it is evaluated as dense matrix products: loop levels with weight factor 0 are
matrix rows, micro-ops are grouped by destination and each group is one im2col-style
contraction (one BLAS matmul per group for all rows, the sources gathered once for groups
that read the same ones, such as a 1x1 convolution's output blocks; BLAS limited to one
thread while a program runs, see :func:`_blas_one_thread`); destinations repeated across
rows are reduced with a sort and ``np.add.reduceat``.  ALU loop nests run in chunks of
micro-ops: a chunk with no hazard (no repeated destination, no read of an entry written
earlier in the chunk) is one vectorised step; ALU chunks with hazards run as "waves" of
hazard-free contiguous micro-ops, so results are always those of one-after-another
execution.

Replay (:class:`FsimDevice` and its streamed segments, not :func:`simulate`): every
instruction's data work (LOAD, STORE, GEMM, ALU) is a function of the machine whose
indices, hazard analysis and GEMM grouping are computed once, while the instruction is
decoded and checked; the plain run calls it at once and, on a device, records it into a
:class:`_Plan`.  A later run of the same program (same config, instruction bytes, address,
count and regions; the micro-op bytes it loaded unchanged; an image no smaller; a watchdog
that allows the recorded steps) only calls the recorded functions, in the recorded order,
on zeroed scratchpads: the same DRAM writes, statistics and (none) errors as the plain
run, which every other run takes.  A model's images after the first run this way
(``bench/fsim_models.py``).
"""

from __future__ import annotations

import contextlib
from collections import OrderedDict, deque
from types import SimpleNamespace
from typing import Any, Iterable, Sequence

import numpy as np

from ..hw.config import MemType, VTAConfig
from ..hw.regs import ErrorKind, index_fault_text, insn_fault_text, sram_range_text, \
    uop_range_text
from ..hw.isa import (
    FLAG_QUEUES, INSN_BYTES, INSN_FIELDS, REQ_LANE, REQ_RESERVED_BIT, AluOp, Insn, Module,
    Opcode, req_fields,
    decode_program, decode_uops, format_insn,
)
from .cpu_ops import unpack_int4
from .device import Buffer, DeadlockError, Device, DeviceError, ProgramError, RunResult, check_ring
from .fsim_kernels import (
    _alu_eval, _alu_fused, _alu_step, _box_index, _dram_view, _fast_index, _fuse_alu,
    _gemm_chunks, _gemm_dw_kernel, _gemm_kernel, _gemm_nest, _index_bytes, _int_dtype, _nest_boxes, _nest_index,
    _prev_conflict, _put, _same, _uint_dtype, _unique, _waves, _wrap,
)
from .fsim_ring import FsimRingMixin, ring_session_extra

__all__ = ["simulate", "FsimDevice", "STAT_KEYS", "DEFAULT_MAX_STEPS", "Regions"]

#: Keys of the statistics dict returned by :func:`simulate` (see docs/semantics.md).
STAT_KEYS = (
    "inp_load_nbytes", "wgt_load_nbytes", "acc_load_nbytes", "uop_load_nbytes",
    "out_store_nbytes", "gemm_counter", "alu_counter", "insn_count", "load_insns",
    "store_insns", "gemm_insns", "alu_insns", "finish_insns", "nop_insns",
    "dram_read_nbytes", "dram_write_nbytes",
)

#: Default watchdog: steps (one per instruction plus one per micro-op evaluated).
DEFAULT_MAX_STEPS = 1 << 32


#: Largest GEMM nest expanded into virtual micro-ops at once (loops with weight factors).
_VIRT_MAX = 1 << 16

_QNAMES = ("l2g", "g2l", "g2s", "s2g")
_MODS = (Module.LOAD, Module.COMPUTE, Module.STORE)
_MOD_NAMES = {Module.LOAD: "load", Module.COMPUTE: "compute", Module.STORE: "store"}
_MEM_NAMES = {int(m): m.name for m in MemType}
_OP_NAMES = {int(o): o.name for o in Opcode}
_FLAGS = ("pop_prev", "pop_next", "push_prev", "push_next")


# ---------------------------------------------------------------------------- regions
class Regions:
    """The device memory a program may touch: merged, sorted byte intervals ``[s, e)``.

    Args:
        regions: ``(addr, nbytes)`` pairs or :class:`Buffer` s; ``None`` means the whole image.
        image_bytes: size of the DRAM image; every region must lie inside it.

    Raises:
        DeviceError: a region with negative address/size or extending past the image.
    """

    def __init__(self, regions: Iterable[Buffer | tuple[int, int]] | None, image_bytes: int):
        if regions is None:
            iv = [(0, int(image_bytes))]
        else:
            iv = []
            for r in regions:
                a, n = (r.addr, r.nbytes) if isinstance(r, Buffer) else (int(r[0]), int(r[1]))
                if a < 0 or n < 0:
                    raise DeviceError(f"memory region (addr={a}, nbytes={n}) is invalid")
                if a + n > image_bytes:
                    raise DeviceError(
                        f"memory region [0x{a:x}, 0x{a + n:x}) extends past the "
                        f"{image_bytes}-byte DRAM image")
                if n:
                    iv.append((a, a + n))
            iv.sort()
        merged: list[list[int]] = []
        for s, e in iv:
            if merged and s <= merged[-1][1]:
                merged[-1][1] = max(merged[-1][1], e)
            else:
                merged.append([s, e])
        self.starts = np.array([m[0] for m in merged], dtype=np.int64)
        self.ends = np.array([m[1] for m in merged], dtype=np.int64)

    def contains(self, start, end) -> np.ndarray:
        """Elementwise: is ``[start, end)`` inside one region? (arrays of int64)."""
        start = np.asarray(start, dtype=np.int64)
        end = np.asarray(end, dtype=np.int64)
        if self.starts.size == 0:
            return np.zeros(start.shape, dtype=bool)
        idx = np.searchsorted(self.starts, start, side="right") - 1
        ok = idx >= 0
        idx = np.maximum(idx, 0)
        return ok & (start >= self.starts[idx]) & (end <= self.ends[idx])

    def describe(self, limit: int = 4) -> str:
        parts = [f"[0x{s:x}, 0x{e:x})" for s, e in zip(self.starts[:limit].tolist(),
                                                        self.ends[:limit].tolist())]
        more = f", ... ({self.starts.size} regions)" if self.starts.size > limit else ""
        return "allowed: " + (", ".join(parts) + more if parts else "none")


# ---------------------------------------------------------------------------- helpers


def _insn_text(cols: dict[str, list[int]], i: int) -> str:
    return format_insn(Insn(**{k: cols[k][i] for k in INSN_FIELDS})).strip()


_INDEX_MEM = {ErrorKind.ACC_DST: MemType.ACC, ErrorKind.INP_SRC: MemType.INP,
              ErrorKind.ACC_SRC: MemType.ACC, ErrorKind.WGT: MemType.WGT}


def first_out_of_range(base: np.ndarray, I: int, J: int, f_out: int, f_in: int,
                       depth: int) -> tuple[int, int] | None:
    """The first index ``base[k] + i*f_out + j*f_in >= depth`` of a GEMM/ALU loop nest in
    execution order (``i`` outer, ``j`` inner, micro-op ``k`` innermost; factors are
    non-negative), as ``(position, index)`` with ``position = (i*J + j)*len(base) + k``;
    None when every index is in range."""
    base = np.asarray(base, dtype=np.int64)
    U = int(base.size)
    if U == 0 or I <= 0 or J <= 0:
        return None
    top = int(base.max())
    I, J, f_out, f_in = int(I), int(J), int(f_out), int(f_in)
    if top + (I - 1) * f_out + (J - 1) * f_in < depth:
        return None
    # the offset grows with i and j, so the first (i, j) is the least i that can reach
    # ``depth`` with the largest j, then the least j for that i
    need = depth - top - (J - 1) * f_in
    i = 0 if f_out == 0 or need <= 0 else -(-need // f_out)
    need = depth - top - i * f_out
    j = 0 if f_in == 0 or need <= 0 else -(-need // f_in)
    off = i * f_out + j * f_in
    k = int(np.flatnonzero(base + off >= depth)[0])
    return (i * J + j) * U + k, int(base[k]) + off


# ---------------------------------------------------------------------------- machine
class _Machine:
    """One run of a program.  ``dry=True`` skips all data movement and arithmetic (no
    scratchpads except the micro-op buffer, which is loaded so computed indices can be
    checked) and never writes DRAM."""

    def __init__(self, cfg: VTAConfig, dram: np.ndarray, regions, *, dry: bool,
                 max_steps: int | None):
        if not isinstance(dram, np.ndarray) or dram.dtype != np.uint8 or dram.ndim != 1:
            raise DeviceError("the DRAM image must be a 1-D numpy uint8 array, got "
                              f"{getattr(dram, 'dtype', type(dram).__name__)} with shape "
                              f"{getattr(dram, 'shape', '?')}")
        if not dry and not dram.flags.writeable:
            raise DeviceError("the DRAM image is read-only")
        self.cfg = cfg
        self.dram = dram
        self.regions = regions if isinstance(regions, Regions) else Regions(regions, dram.size)
        self.dry = dry
        self.max_steps = DEFAULT_MAX_STEPS if max_steps is None else int(max_steps)
        self.steps = 0
        self.acc_bits = cfg.ACC_WIDTH
        self.uop_dst = np.zeros(cfg.UOP_DEPTH, dtype=np.int64)
        self.uop_src = np.zeros(cfg.UOP_DEPTH, dtype=np.int64)
        self.uop_wgt = np.zeros(cfg.UOP_DEPTH, dtype=np.int64)
        if not dry:
            self._scratchpads()
            # an upper bound of |ACC entry| as the program runs (data-independent): a GEMM
            # whose sums cannot leave the signed ACC_WIDTH range skips the wrap
            self.acc_bound = np.zeros(cfg.ACC_DEPTH, dtype=np.float64)
        self.stats = {k: 0 for k in STAT_KEYS}
        # while a plan is recorded (:class:`_Plan`): the data work, in execution order, and
        # the DRAM byte ranges of the micro-op LOADs and of the STOREs
        self.rec: list | None = None
        self.rec_bytes = 0
        self.uop_spans: list[tuple[int, int]] = []
        self.store_spans: list[tuple[int, int]] = []
        self.dirty: dict[str, tuple[int, int]] = {}     # scratchpad -> entries written
        self.pushes = [0, 0, 0, 0]
        self.pops = [0, 0, 0, 0]
        self.peak = [0, 0, 0, 0]

    def _scratchpads(self) -> None:
        cfg = self.cfg
        B, BI, BO = cfg.BATCH, cfg.BLOCK_IN, cfg.BLOCK_OUT
        exact32 = cfg.INP_WIDTH + cfg.WGT_WIDTH - 2 + cfg.LOG_BLOCK_IN <= 24
        self.fdt = np.float32 if exact32 else np.float64
        # micro-ops per float contraction: every partial sum of kc * BLOCK_IN products
        # stays an integer of magnitude <= 2**24 (float32) or 2**53 (float64)
        pmax = 1 << (cfg.INP_WIDTH + cfg.WGT_WIDTH - 2)
        self.kc = max(1, (1 << (24 if exact32 else 53)) // (pmax * BI))
        self.pmax = pmax
        self.inp = np.zeros((cfg.INP_DEPTH, B, BI), dtype=self.fdt)
        # weights stored transposed, (depth, BLOCK_IN, BLOCK_OUT), ready for matmul
        self.wgt_t = np.zeros((cfg.WGT_DEPTH, BI, BO), dtype=self.fdt)
        self.acc = np.zeros((cfg.ACC_DEPTH, B, BO), dtype=np.int64)
        # OUT apart from ACC (only after a clearing REQ, docs/semantics.md "Instructions"):
        # ``out_set[e]`` marks an entry whose OUT is ``out_val[e]``; any later write to
        # the entry clears the mark (OUT is the view of ACC again).  None until the
        # first clearing REQ, so programs without one pay nothing.
        self.out_set: np.ndarray | None = None
        self.out_val: np.ndarray | None = None

    # ------------------------------------------------------------------ errors
    def _err(self, i: int, msg: str) -> ProgramError:
        insn = Insn(**{k: self.cols[k][i] for k in INSN_FIELDS})
        return ProgramError(insn_fault_text(i, insn, msg), insn_index=i)

    # ------------------------------------------------------------------ decode + static
    def load_program(self, insn_addr: int, insn_count: int, raw: np.ndarray | None = None
                     ) -> None:
        """Decode and check the program.  ``raw``: its bytes, fetched from a ring whose
        slots span ``[insn_addr, insn_addr + 16 * insn_count)`` (streamed execution: the
        fetch range is the ring, always in bounds) instead of read at ``insn_addr``."""
        insn_addr, insn_count = int(insn_addr), int(insn_count)
        if raw is not None:
            self.insn_span = (insn_addr, insn_addr + INSN_BYTES * insn_count)
            self.n = raw.size // INSN_BYTES
            self.arr = decode_program(self.cfg, raw)
            self.cols = {k: v.tolist() for k, v in self.arr.items()}
            self.stats["dram_read_nbytes"] += raw.size
            self._static_checks()
            return
        if insn_count <= 0:
            raise ProgramError(f"insn_count = {insn_count}: a program needs at least one "
                               f"instruction (and a FINISH)")
        if insn_addr < 0:
            raise ProgramError(f"insn_addr = {insn_addr} is negative")
        end = insn_addr + INSN_BYTES * insn_count
        # Python ints beyond int64 (a corrupt bundle) are outside any region
        if end >= 1 << 63 or not bool(self.regions.contains(insn_addr, end)):
            raise ProgramError(
                f"instruction fetch of bytes [0x{insn_addr:x}, 0x{end:x}) ({insn_count} "
                f"instructions) is outside the memory the program may touch "
                f"({self.regions.describe()})")
        if insn_addr % INSN_BYTES:
            # The core fetches whole 16-byte instructions from beat-aligned addresses; a
            # misaligned start would decode differently on each backend (docs/semantics.md).
            raise ProgramError(f"insn_addr = 0x{insn_addr:x} is not a multiple of "
                               f"{INSN_BYTES} bytes (instructions are fetched 16-byte aligned)")
        raw = self.dram[insn_addr:end]
        arr = decode_program(self.cfg, raw)
        self.insn_span = (insn_addr, end)
        self.n = insn_count
        self.arr = arr
        self.cols = {k: v.tolist() for k, v in arr.items()}
        self.stats["dram_read_nbytes"] += INSN_BYTES * insn_count
        self._static_checks()

    def _dma_faults(self, dma: np.ndarray, st: np.ndarray, ebytes: np.ndarray) -> list[tuple[int, str]]:
        """``[(instruction, message)]`` of the DMA faults :meth:`_static_checks` reports: the
        first DMA instruction in program order (``dma``: the LOAD/STOREs with rows) with a
        row outside the memory the program may touch, and the first STORE (``st``) with a
        row over the program's own instructions; ``ebytes``: each instruction's element
        bytes."""
        a = self.arr
        op, mt, xs, ys = a["opcode"], a["memory_type"], a["x_size"], a["y_size"]
        bad: list[tuple[int, str]] = []
        idx = np.flatnonzero(dma)
        if idx.size:
            eb = ebytes[idx]
            s0 = a["dram_base"][idx] * eb
            e0 = s0 + ((ys[idx] - 1) * a["x_stride"][idx] + xs[idx]) * eb
            ok = self.regions.contains(s0, e0)
            for j in np.flatnonzero(~ok).tolist():
                i = int(idx[j])
                e = int(eb[j])
                rs = int(s0[j]) + np.arange(int(ys[i]), dtype=np.int64) * int(a["x_stride"][i]) * e
                re = rs + int(xs[i]) * e
                rok = self.regions.contains(rs, re)
                if not rok.all():
                    r = int(np.flatnonzero(~rok)[0])
                    kind = "read" if op[i] == Opcode.LOAD else "write"
                    bad.append((i, f"DMA {kind} of {_MEM_NAMES[int(mt[i])]} bytes "
                                   f"[0x{int(rs[r]):x}, 0x{int(re[r]):x}) (row {r}) is outside "
                                   f"the memory the program may touch "
                                   f"({self.regions.describe()})"))
                    break
            # STOREs over the program's own instructions: the backends fetch instructions
            # at different times (fsim decodes them all first, the core fetches lazily), so
            # such a program would give a different result on each; refused statically.
            ia, ie = self.insn_span
            hit = st[idx] & (s0 < ie) & (ia < e0)
            for j in np.flatnonzero(hit).tolist():
                i = int(idx[j])
                e = int(eb[j])
                rs = int(s0[j]) + np.arange(int(ys[i]), dtype=np.int64) * int(a["x_stride"][i]) * e
                re = rs + int(xs[i]) * e
                over = np.flatnonzero((rs < ie) & (ia < re))
                if over.size:
                    r = int(over[0])
                    bad.append((i, f"DMA write of OUT bytes [0x{int(rs[r]):x}, "
                                   f"0x{int(re[r]):x}) (row {r}) overlaps the program's own "
                                   f"instructions [0x{ia:x}, 0x{ie:x}); a program may not "
                                   f"overwrite its instructions"))
                    break
        return bad

    def _static_checks(self) -> None:
        cfg, a, n = self.cfg, self.arr, self.n
        op = a["opcode"]
        mt = a["memory_type"]
        xs, ys = a["x_size"], a["y_size"]
        bad: list[tuple[int, str]] = []

        def first(mask: np.ndarray, make) -> None:
            idx = np.flatnonzero(mask)
            if idx.size:
                i = int(idx[0])
                bad.append((i, make(i)))

        first(op > 4, lambda i: f"unknown opcode {int(op[i])}; allowed: 0..4 "
                                f"(LOAD, STORE, GEMM, FINISH, ALU)")
        valid_op = op <= 4
        is_load, is_store = op == Opcode.LOAD, op == Opcode.STORE
        is_mem = is_load | is_store
        nop = is_mem & (xs == 0)
        # module of each instruction
        load_mod = is_load & ((mt == MemType.INP) | (mt == MemType.WGT))
        module = np.where(is_store, int(Module.STORE),
                          np.where(load_mod, int(Module.LOAD), int(Module.COMPUTE)))
        self.module = module.tolist()
        for mod in _MODS:
            for flag, q in FLAG_QUEUES[mod].items():
                if q is None:
                    first(valid_op & (module == mod) & (a[flag] != 0),
                          lambda i, flag=flag, mod=mod:
                          f"flag {flag} is invalid for a {_MOD_NAMES[mod]}-module "
                          f"instruction (no token queue)")
        ld = is_load & ~nop
        st = is_store & ~nop
        first(ld & (mt > 5), lambda i: f"unknown memory type {int(mt[i])}; allowed: 0..5 "
                                       f"(UOP, WGT, INP, ACC, OUT, ACC8)")
        first(ld & (mt == MemType.OUT), lambda i: "LOAD of memory type OUT is invalid "
                                                  "(OUT is store-only)")
        if not cfg.ACC_8BIT:
            first(ld & (mt == MemType.ACC8),
                  lambda i: "LOAD of memory type ACC8 needs a config with ACC_8BIT")
        pads = a["y_pad_0"] + a["y_pad_1"] + a["x_pad_0"] + a["x_pad_1"]
        first(ld & (mt == MemType.UOP) & ((ys != 1) | (pads != 0)),
              lambda i: "a UOP load must have y_size 1 and no padding")
        first(st & (mt != MemType.OUT), lambda i: f"STORE of memory type "
              f"{_MEM_NAMES.get(int(mt[i]), int(mt[i]))} is invalid (must be OUT)")
        first(st & (pads != 0), lambda i: "STORE padding must be zero")
        is_alu = op == Opcode.ALU
        aop = a["alu_opcode"]
        first(is_alu & (aop > 5), lambda i: f"unknown ALU opcode {int(aop[i])}; allowed: "
                                            f"0..5 (MIN, MAX, ADD, SHR, MUL, REQ)")
        if not cfg.ALU_MUL:
            first(is_alu & (aop == AluOp.MUL),
                  lambda i: "ALU MUL needs a config with ALU_MUL")
        if not cfg.ALU_REQUANT:
            first(is_alu & (aop == AluOp.REQ),
                  lambda i: "ALU REQ needs a config with ALU_REQUANT")
        first(is_alu & (aop == AluOp.REQ) & ((a["imm"] >> (REQ_RESERVED_BIT - 1)) & 3 == 3),
              lambda i: f"ALU REQ immediate {int(a['imm'][i])}: bits {REQ_RESERVED_BIT}:"
                        f"{REQ_RESERVED_BIT - 1} = 11 are reserved (lower bound 00: -128, "
                        f"01: 0, 10: -8)")
        # micro-op range of GEMM/ALU with work
        loop = (op == Opcode.GEMM) | is_alu
        work = loop & (a["iter_out"] > 0) & (a["iter_in"] > 0) & (a["uop_end"] > a["uop_bgn"])
        first(work & (a["uop_end"] > cfg.UOP_DEPTH),
              lambda i: uop_range_text(cfg, a["uop_bgn"][i], a["uop_end"][i]))
        # scratchpad ranges of LOAD/STORE
        legal_mt = np.clip(mt, 0, 5)
        depth = np.array([cfg.depth(m) for m in MemType], dtype=np.int64)[legal_mt]
        ebytes = np.array([cfg.elem_bytes(m) for m in MemType], dtype=np.int64)[legal_mt]
        rows = a["y_pad_0"] + ys + a["y_pad_1"]
        colsz = a["x_pad_0"] + xs + a["x_pad_1"]
        sp_end = a["sram_base"] + np.where(is_load, rows * colsz, ys * xs)
        legal = (is_load & (mt <= 5) & (mt != MemType.OUT)) | (is_store & (mt == MemType.OUT))
        first((ld | st) & legal & (sp_end > depth),
              lambda i: sram_range_text(mt[i], a["sram_base"][i], sp_end[i], depth[i]))
        bad += self._dma_faults((ld | st) & legal & (ys > 0), st, ebytes)
        if bad:
            i, msg = min(bad, key=lambda t: t[0])
            raise self._err(i, msg)
        if not (op == Opcode.FINISH).any():
            raise ProgramError(f"the program has no FINISH instruction ({n} instructions)")
        # per-instruction token queues
        pops, pushes = [], []
        for i in range(n):
            m = Module(self.module[i])
            fq = FLAG_QUEUES[m]
            pops.append(tuple(int(fq[f]) for f in ("pop_prev", "pop_next")
                              if self.cols[f][i] and fq[f] is not None))
            pushes.append(tuple(int(fq[f]) for f in ("push_prev", "push_next")
                                if self.cols[f][i] and fq[f] is not None))
        self.insn_pops, self.insn_pushes = pops, pushes

    # ------------------------------------------------------------------ scheduler
    def run(self) -> None:
        cfg, n = self.cfg, self.n
        qcap = cfg.INSN_QUEUE_DEPTH
        tcap = cfg.TOKEN_QUEUE_DEPTH
        cq = {m: deque() for m in _MODS}
        tok = [0, 0, 0, 0]
        module = self.module
        pops, pushes = self.insn_pops, self.insn_pushes
        pc = 0
        finished = False
        execute = self._execute
        while True:
            progress = False
            while pc < n:
                q = cq[module[pc]]
                if len(q) >= qcap:
                    break
                q.append(pc)
                pc += 1
                progress = True
            for m in _MODS:
                q = cq[m]
                while q:
                    i = q[0]
                    ready = True
                    for t in pops[i]:
                        if tok[t] < 1:
                            ready = False
                    for t in pushes[i]:
                        if tok[t] >= tcap:
                            ready = False
                    if not ready:
                        break
                    q.popleft()
                    for t in pops[i]:
                        tok[t] -= 1
                        self.pops[t] += 1
                    execute(i)
                    if self.cols["opcode"][i] == Opcode.FINISH:
                        finished = True
                    for t in pushes[i]:
                        tok[t] += 1
                        self.pushes[t] += 1
                        if tok[t] > self.peak[t]:
                            self.peak[t] = tok[t]
                    progress = True
            if pc == n and not any(cq.values()):
                break
            if not progress:
                # insn_index: the first stalled instruction the message names
                raise DeadlockError(self._deadlock_msg(cq, tok, pc), insn_index=next(
                    (cq[m][0] for m in _MODS if cq[m]), pc if pc < n else None))
        if not finished:  # unreachable: static checks require a FINISH, and all drained
            raise ProgramError("the program completed without executing FINISH")
        left = [q for q in range(4) if tok[q]]
        if left:
            desc = ", ".join(f"{_QNAMES[q]}: {self.pushes[q]} pushes, {self.pops[q]} pops"
                             for q in left)
            raise ProgramError(f"unbalanced dependency tokens at completion ({desc}); tokens "
                               f"left in a queue would leak into the next program")

    def _deadlock_msg(self, cq, tok, pc) -> str:
        parts = []
        tcap = self.cfg.TOKEN_QUEUE_DEPTH
        for m in _MODS:
            q = cq[m]
            if not q:
                continue
            i = q[0]
            why = [f"waits for a {_QNAMES[t]} token" for t in self.insn_pops[i] if tok[t] < 1]
            why += [f"{_QNAMES[t]} is full" for t in self.insn_pushes[i] if tok[t] >= tcap]
            parts.append(f"{_MOD_NAMES[m]} stalled at instruction {i} "
                         f"'{_insn_text(self.cols, i)}' ({', '.join(why)})")
        if pc < self.n:
            parts.append(f"fetch stalled at instruction {pc} "
                         f"({_MOD_NAMES[Module(self.module[pc])]} command queue full)")
        counts = " ".join(f"{_QNAMES[q]}={tok[q]}" for q in range(4))
        return f"deadlock: {'; '.join(parts)}; token queues {counts}"

    # ------------------------------------------------------------------ execution
    def _step(self, i: int, cost: int) -> None:
        self.steps += cost
        if self.steps > self.max_steps:
            raise ProgramError(
                f"timeout: instruction {i} would exceed the watchdog of {self.max_steps} "
                f"steps (one per instruction and per micro-op)", insn_index=i)

    def _execute(self, i: int) -> None:
        c = self.cols
        op = c["opcode"][i]
        st = self.stats
        st["insn_count"] += 1
        if op == Opcode.LOAD or op == Opcode.STORE:
            self._step(i, 1)
            if c["x_size"][i] == 0:
                st["nop_insns"] += 1
            elif op == Opcode.LOAD:
                st["load_insns"] += 1
                self._load(i)
            else:
                st["store_insns"] += 1
                self._store(i)
        elif op == Opcode.GEMM:
            st["gemm_insns"] += 1
            self._loop(i, gemm=True)
        elif op == Opcode.ALU:
            st["alu_insns"] += 1
            self._loop(i, gemm=False)
        else:
            self._step(i, 1)
            st["finish_insns"] += 1

    def _load(self, i: int) -> None:
        c, cfg, st = self.cols, self.cfg, self.stats
        mt = c["memory_type"][i]
        y, x = c["y_size"][i], c["x_size"][i]
        eb = cfg.elem_bytes(mt)
        nbytes = y * x * eb
        st["dram_read_nbytes"] += nbytes
        key = {MemType.INP: "inp_load_nbytes", MemType.WGT: "wgt_load_nbytes",
               MemType.ACC: "acc_load_nbytes", MemType.ACC8: "acc_load_nbytes",
               MemType.UOP: "uop_load_nbytes"}[mt]
        st[key] += nbytes
        base = c["dram_base"][i] * eb
        sram = c["sram_base"][i]
        if mt == MemType.UOP:
            if self.rec is not None:
                self.uop_spans.append((base, base + nbytes))
            words = self.dram[base:base + nbytes].view("<u4")
            d = decode_uops(cfg, words)
            self.uop_dst[sram:sram + x] = d["dst"]
            self.uop_src[sram:sram + x] = d["src"]
            self.uop_wgt[sram:sram + x] = d["wgt"]
            return
        if self.dry:
            return
        yp0, yp1, xp0, xp1 = (c["y_pad_0"][i], c["y_pad_1"][i], c["x_pad_0"][i],
                              c["x_pad_1"][i])
        R, C = yp0 + y + yp1, xp0 + x + xp1
        B, BI, BO = cfg.BATCH, cfg.BLOCK_IN, cfg.BLOCK_OUT
        if mt == MemType.INP:
            spn, shape, dt = "inp", (B, BI), _int_dtype(cfg.INP_WIDTH)
        elif mt == MemType.WGT:
            spn, shape, dt = "wgt_t", (BO, BI), _int_dtype(cfg.WGT_WIDTH)
        elif mt == MemType.ACC:
            spn, shape, dt = "acc", (B, BO), _int_dtype(cfg.ACC_WIDTH)
        else:  # ACC8
            spn, shape, dt = "acc", (B, BO), "<i1"
        xb, stride = x * eb, c["x_stride"][i] * eb
        pad = bool(yp0 or yp1 or xp0 or xp1)
        wgt = mt == MemType.WGT
        dense = not pad and (y == 1 or stride == xb)    # one contiguous run of elements
        n_el = R * C
        end = sram + n_el
        if dense and dt != "int4":      # one contiguous run of elements: no reshaping
            nb = y * xb
            vshape = (n_el,) + shape
            # a view as a wider type needs contiguous bytes (an image may be a strided view)
            cont = np.ascontiguousarray if np.dtype(dt).itemsize > 1 else _same
            if wgt:
                def load(m: _Machine) -> None:
                    m.wgt_t[sram:end] = cont(m.dram[base:base + nb]).view(dt).reshape(
                        vshape).swapaxes(1, 2)
            elif spn == "inp":
                def load(m: _Machine) -> None:
                    m.inp[sram:end] = cont(m.dram[base:base + nb]).view(dt).reshape(vshape)
            else:
                def load(m: _Machine) -> None:
                    if m.out_set is not None:
                        m.out_set[sram:end] = False
                    m.acc[sram:end] = cont(m.dram[base:base + nb]).view(dt).reshape(vshape)
        else:
            def load(m: _Machine) -> None:
                # a LOAD never writes DRAM: the rows are read through a view, not copied
                raw = _dram_view(m.dram, base, y, xb, stride) if y else \
                    np.zeros((0, xb), np.uint8)
                if dt == "int4":    # two weights per byte, lane 2k in the low nibble
                    vals = unpack_int4(raw.reshape(-1)).reshape((y, x) + shape)
                else:
                    vals = raw.reshape(-1).view(dt).reshape((y, x) + shape)
                if wgt:
                    vals = vals.swapaxes(-1, -2)
                sp = getattr(m, spn)
                if spn == "acc" and m.out_set is not None:
                    m.out_set[sram:end] = False
                if dense:
                    sp[sram:end] = vals.reshape((n_el,) + vals.shape[2:])
                    return
                blk = sp[sram:end].reshape((R, C) + sp.shape[1:])
                if pad:
                    blk[...] = 0
                blk[yp0:yp0 + y, xp0:xp0 + x] = vals

        self._data(load)
        if spn == "acc":
            self.acc_bound[sram:end] = 128.0 if mt == MemType.ACC8 else \
                float(1 << (self.acc_bits - 1))
        if self.rec is not None:
            self._touch(spn, sram, sram + n_el)

    def _store(self, i: int) -> None:
        c, cfg, st = self.cols, self.cfg, self.stats
        y, x = c["y_size"][i], c["x_size"][i]
        eb = cfg.elem_bytes(MemType.OUT)
        nbytes = y * x * eb
        st["out_store_nbytes"] += nbytes
        st["dram_write_nbytes"] += nbytes
        if self.dry or y == 0:
            return
        if self.rec is not None:
            b0 = c["dram_base"][i] * eb
            self.store_spans.append((b0, b0 + ((y - 1) * c["x_stride"][i] + x) * eb))
        sram = c["sram_base"][i]
        ow = cfg.OUT_WIDTH
        # the low OUT_WIDTH bits: an integer cast to an unsigned type keeps them
        udt = None if ow == 4 else _uint_dtype(ow)
        base = c["dram_base"][i] * eb
        stride = c["x_stride"][i] * eb
        xb = x * eb
        n = y * x
        contiguous = y == 1 or stride == xb

        def store(m: _Machine) -> None:
            vals = m.acc[sram:sram + n]
            if m.out_set is not None:
                mark = m.out_set[sram:sram + n]
                if mark.any():
                    vals = np.where(mark[:, None, None], m.out_val[sram:sram + n], vals)
            if udt is None:  # two lanes per byte, lane 2k in the low nibble (pack_int4's)
                flat = (vals & np.int64(15)).reshape(-1).astype(np.uint8)
                raw = flat[0::2] | (flat[1::2] << 4)
            else:
                raw = vals.astype(udt).reshape(-1).view(np.uint8)
            dram = m.dram
            if contiguous:
                dram[base:base + n * eb] = raw
            elif stride > xb:
                _dram_view(dram, base, y, xb, stride, writeable=True)[...] = raw.reshape(y, xb)
            else:  # overlapping rows: later rows win, row by row
                raw = raw.reshape(y, xb)
                for r in range(y):
                    dram[base + r * stride:base + r * stride + xb] = raw[r]

        self._data(store)

    def _loop(self, i: int, gemm: bool) -> None:
        c, cfg, st = self.cols, self.cfg, self.stats
        I, J = c["iter_out"][i], c["iter_in"][i]
        bgn, end = c["uop_bgn"][i], c["uop_end"][i]
        U = end - bgn
        if I == 0 or J == 0 or U <= 0:
            self._step(i, 1)
            return
        N = I * J * U
        self._step(i, 1 + N)
        # a clearing REQ (reset on ALU REQ, docs/isa.md "REQ") reads like REQ: not a reset
        clear = (not gemm) and bool(c["reset"][i]) and c["alu_opcode"][i] == AluOp.REQ
        reset = bool(c["reset"][i]) and not clear
        use_imm = (not gemm) and bool(c["use_imm"][i])
        # index bounds (computed indices never wrap: out of range is an error).  The
        # report names the first offending micro-op in execution order (the hardware's
        # ERR_INDEX), dst before src before wgt within one micro-op.
        checks = [(ErrorKind.ACC_DST, self.uop_dst, "dst_factor")]
        if not reset:
            if gemm:
                checks.append((ErrorKind.INP_SRC, self.uop_src, "src_factor"))
                checks.append((ErrorKind.WGT, self.uop_wgt, "wgt_factor"))
            elif not use_imm:
                checks.append((ErrorKind.ACC_SRC, self.uop_src, "src_factor"))
        # a depthwise GEMM reads DEPTHWISE_TAPS consecutive INP entries: its last one
        # is the one checked (and named)
        dw = bool(gemm and c["depthwise"][i])
        last = cfg.DEPTHWISE_TAPS - 1 if dw else 0
        worst = None
        for order, (kind, arr, fac) in enumerate(checks):
            if last and kind == ErrorKind.INP_SRC:
                arr = arr + last
            hit = first_out_of_range(arr[bgn:end], I, J, c[fac + "_out"][i],
                                     c[fac + "_in"][i], cfg.depth(_INDEX_MEM[kind]))
            if hit is not None and (worst is None or (hit[0], order) < worst[:2]):
                worst = (hit[0], order, kind, hit[1])
        if worst is not None:
            raise self._err(i, index_fault_text(cfg, worst[2], worst[3]))
        if not reset:
            st["gemm_counter" if gemm else "alu_counter"] += N
        if self.dry:
            return
        dst_b = self.uop_dst[bgn:end]
        dfo, dfi = c["dst_factor_out"][i], c["dst_factor_in"][i]
        if self.out_set is not None and not clear:    # every other write: OUT follows ACC
            lo_ = int(dst_b.min())
            hi_ = int(dst_b.max()) + (I - 1) * int(dfo) + (J - 1) * int(dfi) + 1
            if self.out_set[lo_:hi_].any():
                marks = _nest_index(dst_b, I, J, U, dfo, dfi)

                def unmark(m: _Machine) -> None:
                    m.out_set[marks] = False

                self._data(unmark, _index_bytes(marks))
        if reset:
            zidx = _nest_index(dst_b, I, J, U, dfo, dfi)

            def zero(m: _Machine) -> None:
                m.acc[zidx] = 0

            self._data(zero, _index_bytes(zidx))
            self.acc_bound[zidx] = 0.0
            return
        lo_ = int(dst_b.min())
        hi_ = int(dst_b.max()) + (I - 1) * int(dfo) + (J - 1) * int(dfi) + 1
        if self.rec is not None:        # GEMM or ALU: the entries it may write
            self._touch("acc", lo_, hi_)
        if not gemm:
            self.acc_bound[lo_:hi_] = float(1 << (self.acc_bits - 1))
        src_b = self.uop_src[bgn:end]
        sfo, sfi = c["src_factor_out"][i], c["src_factor_in"][i]
        if gemm:
            ops: list = []
            (self._gemm_dw if dw else self._gemm)(
                ops, I, J, dst_b, src_b, self.uop_wgt[bgn:end], dfo, dfi, sfo, sfi,
                c["wgt_factor_out"][i], c["wgt_factor_in"][i])
            for fn, nb in ops:
                self._data(fn, nb)
            return
        aop = c["alu_opcode"][i]
        imm = c["imm"][i]
        if clear and self.out_set is None:
            def init_out(m: _Machine) -> None:
                m.out_set = np.zeros(m.acc.shape[0], dtype=bool)
                m.out_val = np.zeros_like(m.acc)

            self._data(init_out)
        for box in _nest_boxes(I, J, U):
            dst = _box_index(dst_b, box, dfo, dfi)
            src = None if use_imm else _box_index(src_b, box, sfo, sfi)
            self._data(self._alu_chunk(aop, dst, src, imm, clear),
                       dst.nbytes + (0 if src is None else src.nbytes))

    def _touch(self, pad: str, lo: int, hi: int) -> None:
        """Recording: scratchpad ``pad`` may be written in entries ``[lo, hi)``."""
        t = self.dirty.get(pad)
        self.dirty[pad] = (lo, hi) if t is None else (min(t[0], lo), max(t[1], hi))

    def _data(self, fn, nbytes: int = 0) -> None:
        """Run the data work ``fn(machine)`` of an instruction; while a plan is recorded
        (:class:`_Plan`), also append it (``nbytes``: about the bytes of index arrays it
        holds)."""
        fn(self)
        if self.rec is not None:
            self.rec.append(fn)
            self.rec_bytes += nbytes

    def _gemm(self, ops: list, I: int, J: int, dst_b: np.ndarray, src_b: np.ndarray,
              wgt_b: np.ndarray, dfo: int, dfi: int, sfo: int, sfi: int, wfo: int,
              wfi: int) -> None:
        """One GEMM loop nest (no reset): ``acc[dst] += inp[src] @ wgt[wgt]^T`` for every
        iteration ``(i, j)`` and micro-op ``k``, exactly, wrapped at ACC_WIDTH.  Appends
        to ``ops`` the data work (functions of the machine), all index arithmetic done
        here, once.

        A GEMM only adds into the accumulator and never writes what it reads (INP, WGT), so
        the micro-ops commute and the nest is evaluated as dense matrix products:

        - loop levels whose weight factor is 0 become matrix *rows* (same weight for every
          iteration); the others are expanded into "virtual" micro-ops;
        - virtual micro-ops are grouped by destination (stable sort), and each group of K
          becomes one contraction of length ``K * BLOCK_IN`` (im2col form: one BLAS matmul
          per group for all rows), split into sub-groups of at most ``self.kc`` micro-ops so
          that every partial sum is an integer the float dtype holds exactly;
        - sub-group results are summed in int64 and added to the accumulator; destinations
          repeated across rows are reduced with a sort and ``np.add.reduceat``.
        """
        U = dst_b.size
        if (I > 1 and wfo and I * U * (J if wfi else 1) > _VIRT_MAX) or \
                (J > 1 and wfi and J * U > _VIRT_MAX):
            if I > 1 and wfo:   # expand the outer loop in Python (huge virtual nest)
                for ii in range(I):
                    self._gemm(ops, 1, J, dst_b + ii * dfo, src_b + ii * sfo,
                               wgt_b + ii * wfo, 0, dfi, 0, sfi, 0, wfi)
            else:
                for jj in range(J):
                    self._gemm(ops, I, 1, dst_b + jj * dfi, src_b + jj * sfi,
                               wgt_b + jj * wfi, dfo, 0, sfo, 0, wfo, 0)
            return
        vd, vs, vw, rd, rs = _gemm_nest(I, J, dst_b, src_b, wgt_b, dfo, dfi, sfo, sfi, wfo,
                                        wfi)
        g = self._gemm_groups(vd, vs, vw)
        wrap = self._gemm_wraps(vd, rd)
        chunks = _gemm_chunks(g, rd, rs)
        gemm = _gemm_kernel(self.cfg, self.fdt, self.acc_bits, g, chunks, wrap)
        nb = _index_bytes(g.wsel) + (g.slot.nbytes if g.padded else 0) + sum(
            sum(_index_bytes(a) for a in it if isinstance(a, (np.ndarray, slice)))
            for c in chunks for it in c[4])
        ops.append((gemm, nb))

    def _gemm_dw(self, ops: list, I: int, J: int, dst_b: np.ndarray, src_b: np.ndarray,
                 wgt_b: np.ndarray, dfo: int, dfi: int, sfo: int, sfi: int, wfo: int,
                 wfi: int) -> None:
        """One depthwise GEMM loop nest (no reset; docs/isa.md "Depthwise GEMM"): for every
        iteration and micro-op, ``acc[dst][b][o] += sum_t inp[src + t][b][o] * wgt[wgt][o][t]``
        over ``t < DEPTHWISE_TAPS``, exactly, wrapped at ACC_WIDTH.  Appends the data work
        to ``ops`` (as :meth:`_gemm`)."""
        vd, vs, vw, rd, rs = _gemm_nest(I, J, dst_b, src_b, wgt_b, dfo, dfi, sfo, sfi, wfo,
                                        wfi)
        wrap = self._gemm_wraps(vd, rd)
        ops.append(_gemm_dw_kernel(self.cfg.DEPTHWISE_TAPS, self.acc_bits, vd, vs, vw, rd, rs,
                                   wrap))

    def _gemm_groups(self, vd: np.ndarray, vs: np.ndarray, vw: np.ndarray) -> SimpleNamespace:
        """The virtual micro-ops (destinations ``vd``, sources ``vs``, weights ``vw``)
        grouped by destination: ``G`` groups of ``Kp = S * Ks`` slots (``S`` sub-groups of
        at most ``self.kc``), or one group per micro-op when the groups are too ragged
        (``distinct`` False); ``gd`` the groups' destinations, ``slot`` each micro-op's
        slot, ``wsel`` the weight rows in slot order, ``ps`` the source rows
        ``(G, S, 1, Ks)`` (a padding slot: any valid source row, a zero weight)."""
        V = vd.size
        order = np.argsort(vd, kind="stable")
        sd = vd[order]
        newg = np.empty(V, dtype=bool)
        newg[0] = True
        np.not_equal(sd[1:], sd[:-1], out=newg[1:])
        starts = np.flatnonzero(newg)
        G = starts.size
        kmax = int(np.diff(starts, append=V).max())
        S = -(-kmax // self.kc)
        Ks = -(-kmax // S)
        Kp = S * Ks
        distinct = True           # one group per destination
        if G * Kp > 2 * V + 64:   # ragged groups: one group per micro-op
            order = np.arange(V)
            gd, G, S, Ks, Kp = vd, V, 1, 1, 1
            slot = order
            distinct = False
        else:
            gd = sd[starts]
            gid = np.cumsum(newg) - 1
            slot = gid * Kp + (np.arange(V) - starts[gid])
        wsel = _fast_index(vw[order])
        padded = G * Kp != V
        if not padded:
            ps = vs[order]
        else:   # padding: any valid source row times a zero weight
            ps = np.full(G * Kp, vs[order[0]], dtype=np.int64)
            ps[slot] = vs[order]
        ps = ps.reshape(G, S, 1, Ks)
        return SimpleNamespace(G=G, S=S, Ks=Ks, Kp=Kp, gd=gd, slot=slot, distinct=distinct,
                               wsel=wsel, padded=padded, ps=ps)

    def _gemm_wraps(self, vd: np.ndarray, rd: np.ndarray) -> bool:
        """Whether the nest's sums must be wrapped at ACC_WIDTH: the wrap is the identity
        when no sum can leave the signed range, every entry's bound (``self.acc_bound``,
        raised here by the micro-ops' largest products, in place) included."""
        bits = self.acc_bits
        R = rd.size
        # the wrap is the identity when no sum can leave the signed ACC_WIDTH range: every
        # entry's bound plus its micro-ops' largest products
        u, cnt = np.unique(vd, return_counts=True)
        lo = int(u[0]) + int(rd.min())
        if R == 1:
            per = np.zeros(int(u[-1]) + 1 - int(u[0]), dtype=np.float64)
            per[u - u[0]] = cnt
        else:
            per = np.bincount((u[:, None] + rd[None, :] - lo).reshape(-1),
                              weights=np.repeat(cnt, R).astype(np.float64))
        bound = self.acc_bound[lo:lo + per.size]
        bound += per * float(self.cfg.BLOCK_IN * self.pmax)
        wrap = float(bound.max()) > (1 << (bits - 1)) - 1
        if wrap:
            np.minimum(bound, float(1 << (bits - 1)), out=bound)
        return wrap

    def _alu_chunk(self, aop: int, dst: np.ndarray, src: np.ndarray | None, imm: int,
                   clear: bool = False):
        """The data work of one chunk of an ALU nest (``clear``: a clearing REQ,
        :func:`_put`), as a function of the machine; the hazard analysis is done here.
        A hazard-free chunk that writes ACC is an in-place step on ``acc[dst]``
        (:func:`_alu_step`), marked so that :class:`_Plan` can fuse consecutive ones."""
        bits, law = self.acc_bits, self.cfg.LOG_ACC_WIDTH
        bimm = np.int64(0 if aop == AluOp.REQ else imm)
        lane = bool(self.cfg.REQ_LANE_SHIFT and aop == AluOp.REQ
                    and req_fields(imm)[0] == REQ_LANE)

        def f(a, b):
            return _alu_eval(aop, a, b, imm, bits, law, lane)

        if src is None:
            if _unique(dst):
                d = _fast_index(dst)
                if not clear:
                    return _alu_fused(d, [(_alu_step(aop, imm, True, bits, law, lane), None)])

                def put_imm(m: _Machine) -> None:
                    _put(m, d, f(m.acc[d], bimm), clear)

                return put_imm
            if aop in (AluOp.MIN, AluOp.MAX):
                u = _fast_index(np.unique(dst))  # idempotent: once per entry

                def minmax_imm(m: _Machine) -> None:
                    m.acc[u] = f(m.acc[u], bimm)

                return minmax_imm
            if aop in (AluOp.ADD, AluOp.MUL):
                uf = np.add if aop == AluOp.ADD else np.multiply
                u = _fast_index(np.unique(dst))

                def at_imm(m: _Machine) -> None:
                    uf.at(m.acc, dst, bimm)
                    m.acc[u] = _wrap(m.acc[u], bits)

                return at_imm
            prev = _prev_conflict(dst, None)
        else:
            depth = self.cfg.ACC_DEPTH
            if _unique(dst):
                firstw = np.full(depth, dst.size, dtype=np.int64)
                firstw[dst] = np.arange(dst.size, dtype=np.int64)
                if not (firstw[src] < np.arange(dst.size, dtype=np.int64)).any():
                    d, s = _fast_index(dst), _fast_index(src)
                    if not clear:
                        return _alu_fused(d, [(_alu_step(aop, imm, False, bits, law, lane), s)])

                    def put_src(m: _Machine) -> None:
                        _put(m, d, f(m.acc[d], m.acc[s]), clear)

                    return put_src
            else:
                written = np.zeros(depth, dtype=bool)
                written[dst] = True
                if not written[src].any() and aop in (AluOp.MIN, AluOp.MAX, AluOp.ADD,
                                                      AluOp.MUL):
                    uf = {AluOp.MIN: np.minimum, AluOp.MAX: np.maximum, AluOp.ADD: np.add,
                          AluOp.MUL: np.multiply}[aop]
                    u = _fast_index(np.unique(dst)) if aop in (AluOp.ADD, AluOp.MUL) \
                        else None

                    def at_src(m: _Machine) -> None:
                        uf.at(m.acc, dst, m.acc[src])
                        if u is not None:
                            m.acc[u] = _wrap(m.acc[u], bits)

                    return at_src
            prev = _prev_conflict(dst, src)
        waves = [(_fast_index(dst[a:b_]), None if src is None else _fast_index(src[a:b_]))
                 for a, b_ in _waves(prev)]

        def run_waves(m: _Machine) -> None:
            acc = m.acc
            for d, s in waves:
                _put(m, d, f(acc[d], bimm if s is None else acc[s]), clear)

        return run_waves


# ---------------------------------------------------------------------------- public API
_BLAS = []


def _blas_one_thread():
    """Context limiting BLAS to one thread (``threadpoolctl`` when installed, else a no-op).

    fsim's matrix products are small (at most ``CHUNK`` micro-ops each); OpenBLAS's worker
    threads spin between them and, on a shared machine, cost 5-20x the single-thread time."""
    if not _BLAS:
        try:
            from threadpoolctl import ThreadpoolController  # noqa: PLC0415 - optional
            _BLAS.append(ThreadpoolController())
        except Exception:  # noqa: BLE001 - missing or broken: run with the default threads
            _BLAS.append(None)
    ctl = _BLAS[0]
    if ctl is None:
        return contextlib.nullcontext()
    return ctl.limit(limits=1, user_api="blas")


class _Plan:
    """A recorded run of one program: its data work in execution order (functions of the
    machine, every index computed), its statistics and steps, and the micro-op bytes it
    loaded.

    Everything but the data is fixed by the instruction bytes, the regions, the DRAM
    image's size and the micro-ops: the schedule (token queues, command queues), the
    static checks, the computed indices and their bounds checks, the hazard analysis of
    ALU nests, the GEMM grouping.  So a run of the same program (same key, see
    :func:`_plan_key`) whose micro-op LOADs read the same bytes and whose watchdog allows
    its steps replays the data work alone, in the recorded order: the results, the DRAM
    writes and the statistics are those of the plain run.  A program whose STOREs may
    write where its micro-op LOADs read is never recorded, nor one that failed.
    """

    __slots__ = ("ops", "stats", "steps", "uop_spans", "uop_bytes", "image_bytes", "dirty",
                 "nbytes")

    def __init__(self, m: _Machine):
        self.dirty = tuple((k, lo, hi) for k, (lo, hi) in m.dirty.items())
        self.image_bytes = m.dram.size     # a larger image holds every region as well
        self.ops = _fuse_alu(m.rec)
        self.stats = dict(m.stats)
        self.steps = m.steps
        self.uop_spans = _merge_spans(m.uop_spans)
        self.uop_bytes = [m.dram[s:e].tobytes() for s, e in self.uop_spans]
        self.nbytes = m.rec_bytes + sum(map(len, self.uop_bytes))

    def matches(self, dram: np.ndarray, max_steps: int | None) -> bool:
        """Whether a run of the plan's program on ``dram`` (1-D uint8) under watchdog
        ``max_steps`` may replay it: the watchdog allows the recorded steps, the image is
        no smaller and the micro-op bytes at the recorded spans are unchanged."""
        if self.steps > (DEFAULT_MAX_STEPS if max_steps is None else int(max_steps)):
            return False        # the plain run names the instruction the watchdog stops
        if dram.size < self.image_bytes:
            return False
        for (s, e), b in zip(self.uop_spans, self.uop_bytes):
            if dram[s:e].tobytes() != b:
                return False
        return True

    def replay(self, m: _Machine, dram: np.ndarray) -> dict:
        """Run the data work on ``m``'s zeroed scratchpads (zeroed again after, in the
        entries the program may have written); returns the statistics."""
        m.dram = dram
        m.out_set = m.out_val = None
        try:
            with _blas_one_thread():
                for fn in self.ops:
                    fn(m)
        finally:
            m.dram = None
            m.out_set = m.out_val = None
            for k, lo, hi in self.dirty:
                getattr(m, k)[lo:hi] = 0
        return dict(self.stats)


def _plan_key(cfg: VTAConfig, dram: np.ndarray, insn_addr: int, insn_count: int, regions,
              raw) -> tuple | None:
    """The key of a program's :class:`_Plan`: its address, length, instruction bytes and
    regions (None: not cacheable; the plain run then checks and reports whatever is
    wrong)."""
    if not isinstance(dram, np.ndarray) or dram.dtype != np.uint8 or dram.ndim != 1 or \
            not dram.flags.writeable:
        return None
    if regions is None:
        rk = None
    elif isinstance(regions, Regions):
        return None
    else:
        try:
            rk = tuple((r.addr, r.nbytes) if isinstance(r, Buffer) else (int(r[0]), int(r[1]))
                       for r in regions)
        except (TypeError, ValueError, IndexError):
            return None
    insn_addr, insn_count = int(insn_addr), int(insn_count)
    if raw is None:
        end = insn_addr + INSN_BYTES * insn_count
        if insn_count <= 0 or insn_addr < 0 or end > dram.size:
            return None
        code = dram[insn_addr:end].tobytes()
    else:
        code = b"ring" + raw.tobytes()
    return (cfg, insn_addr, insn_count, rk, code)


class _PlanCache:
    """The plans of one device: per key (:func:`_plan_key`) up to ``variants`` plans (one
    per set of micro-op bytes), the least recently used key evicted past ``size`` keys or
    past ``max_bytes`` of recorded index arrays in all (a plan larger than that is not
    kept).  ``hits``: replays run; ``records``: plans stored."""

    def __init__(self, size: int = 1024, variants: int = 4, max_bytes: int = 1 << 30):
        self.size, self.variants, self.max_bytes = size, variants, max_bytes
        self.plans: OrderedDict = OrderedDict()     # key -> [_Plan], most recent first
        self.nbytes = 0
        self.pads: _Machine | None = None           # zeroed scratchpads for replays
        self.hits = 0
        self.records = 0

    def find(self, key, dram: np.ndarray, max_steps: int | None) -> _Plan | None:
        """The plan of ``key`` valid for a run on ``dram`` under watchdog ``max_steps``."""
        ps = self.plans.get(key)
        if ps is None:
            return None
        self.plans.move_to_end(key)
        for k, p in enumerate(ps):
            if p.matches(dram, max_steps):
                if k:
                    ps.insert(0, ps.pop(k))
                return p
        return None

    def put(self, key, plan: _Plan) -> None:
        """Store ``plan`` under ``key`` (a variant with the same micro-op bytes is
        replaced)."""
        if plan.nbytes > self.max_bytes:
            return
        ps = self.plans.setdefault(key, [])
        self.plans.move_to_end(key)
        for k, p in enumerate(ps):
            if p.uop_spans == plan.uop_spans and p.uop_bytes == plan.uop_bytes:
                self.nbytes -= ps.pop(k).nbytes
                break
        ps.insert(0, plan)
        self.nbytes += plan.nbytes
        while len(ps) > self.variants:
            self.nbytes -= ps.pop().nbytes
        while len(self.plans) > self.size or self.nbytes > self.max_bytes:
            _, old = self.plans.popitem(last=False)
            self.nbytes -= sum(p.nbytes for p in old)
        self.records += 1

    def clear(self) -> None:
        """Drop every plan."""
        self.plans.clear()
        self.nbytes = 0

    def scratch(self, cfg: VTAConfig) -> _Machine:
        """The zeroed scratchpads that replays run on (made once per config)."""
        pads = self.pads
        if pads is None or pads.cfg != cfg:
            pads = self.pads = _Machine.__new__(_Machine)
            pads.cfg, pads.dry = cfg, False
            pads._scratchpads()
        return pads


def _merge_spans(spans: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """Byte intervals ``[s, e)`` sorted and merged (touching ones too)."""
    out: list[list[int]] = []
    for a, b in sorted(spans):
        if out and a <= out[-1][1]:
            out[-1][1] = max(out[-1][1], b)
        else:
            out.append([a, b])
    return [(a, b) for a, b in out]


def _spans_overlap(a: list[tuple[int, int]], b: list[tuple[int, int]]) -> bool:
    if not a or not b:
        return False
    b = sorted(b)
    ends = np.maximum.accumulate(np.array([e for _, e in b], dtype=np.int64))
    starts = np.array([s for s, _ in b], dtype=np.int64)
    for s, e in a:      # any b-span with start < e and end > s
        k = int(np.searchsorted(starts, e, side="left"))
        if k and int(ends[k - 1]) > s and e > s:
            return True
    return False


def _run_machine(cfg, dram, insn_addr, insn_count, regions, *, dry, max_steps,
                 raw=None) -> _Machine:
    m = _Machine(cfg, dram, regions, dry=dry, max_steps=max_steps)
    m.load_program(insn_addr, insn_count, raw)
    if dry:
        m.run()
    else:
        with _blas_one_thread():
            m.run()
    return m


def _run_planned(cfg, dram, insn_addr, insn_count, regions, *, max_steps, raw=None,
                 plans: _PlanCache | None = None) -> dict:
    """Run a program (not dry), replaying its :class:`_Plan` from ``plans`` when one is
    valid for this run, else the plain run (recording a plan when it can); returns the
    statistics dict.  Errors as :func:`simulate`."""
    key = None
    if plans is not None:
        key = _plan_key(cfg, dram, insn_addr, insn_count, regions, raw)
        if key is not None:
            plan = plans.find(key, dram, max_steps)
            if plan is not None:
                plans.hits += 1
                return plan.replay(plans.scratch(cfg), dram)
    m = _Machine(cfg, dram, regions, dry=False, max_steps=max_steps)
    if key is not None:
        m.rec = []
    m.load_program(insn_addr, insn_count, raw)
    with _blas_one_thread():
        m.run()
    if key is not None and not _spans_overlap(m.uop_spans, m.store_spans):
        plans.put(key, _Plan(m))
    m.rec = None
    return m.stats


def simulate(cfg: VTAConfig, dram: np.ndarray, insn_addr: int, insn_count: int, *,
             regions: Sequence[Buffer | tuple[int, int]] | None = None,
             max_steps: int | None = None) -> RunResult:
    """Run a program on a raw DRAM image, in place.

    Args:
        cfg: the core configuration.
        dram: 1-D ``uint8`` array, byte address = index; STOREs modify it in place.
        insn_addr: byte address of the first instruction.
        insn_count: number of 16-byte instructions.
        regions: the byte ranges the program may touch, as ``(addr, nbytes)`` pairs or
            :class:`Buffer` s (``None``: the whole image).  Every DMA, instruction fetch
            included, must lie inside one (merged) region.
        max_steps: watchdog in steps (one per instruction plus one per micro-op evaluated);
            default :data:`DEFAULT_MAX_STEPS`.  Checked before each instruction executes.

    Returns:
        :class:`RunResult` with ``cycles = 0`` and ``stats`` keyed by :data:`STAT_KEYS`
        (bytes for ``*_nbytes``, micro-ops for ``*_counter``, instructions for ``*_insns``).

    Raises:
        ProgramError: invalid instruction (unknown opcode, memory type or ALU opcode; flag
            with no queue for its module; disabled feature), DMA outside ``regions``,
            scratchpad index out of range, no FINISH, tokens left unbalanced, watchdog.
            Static faults are found before anything executes; others when reached (DRAM
            may then be partly modified).
        DeadlockError: no module can make progress; names stalled modules, their next
            instructions and the four token-queue counts.
        DeviceError: ``dram`` is not a writeable 1-D uint8 array, or a region lies outside it.
    """
    m = _run_machine(cfg, dram, insn_addr, insn_count, regions, dry=False, max_steps=max_steps)
    return RunResult(cycles=0, stats=dict(m.stats))


class FsimDevice(FsimRingMixin, Device):
    """The functional-simulator backend (target ``"fsim"``).

    Device memory is a numpy ``uint8`` array that grows on demand (up to the allocator's
    ``mem_bytes``); :meth:`run` calls :func:`simulate` with the live buffers as the regions
    the program may touch.  ``timeout_cycles`` maps to the watchdog ``max_steps``.

    ``checks_in_run = True``: :func:`simulate` runs every check of the static verifier
    itself (the same machine) and stops at the first fault, so the program builder does
    not verify separately before a launch.  Static faults (opcodes, flags, FINISH, DMA and
    scratchpad ranges) are still found before anything executes; computed-index errors,
    deadlocks and unbalanced tokens are found when reached (DRAM may then be partly
    written by the program's own STOREs, inside its regions).

    Args:
        config: the core configuration.
        mem_bytes: device memory the allocator may hand out, in bytes.
        plans: replay repeated programs (see the module docstring, "Replay"; the
            results, statistics and errors are those of :func:`simulate`); ``False``: every
            run takes the plain path.  ``self.plans`` holds the cache (``hits``: replays
            run; ``records``: plans stored; ``clear()``).
    """

    target = "fsim"
    checks_in_run = True

    def __init__(self, config: VTAConfig, mem_bytes: int = 256 << 20, *, plans: bool = True):
        super().__init__(config, mem_bytes)
        self.mem = np.zeros(1 << 16, dtype=np.uint8)
        #: recorded runs of the programs launched here (:class:`_Plan`; None: no replay)
        self.plans: _PlanCache | None = _PlanCache() if plans else None

    def _ensure(self, end: int) -> None:
        if end > self.mem.size:
            size = self.mem.size
            while size < end:
                size *= 2
            grown = np.zeros(size, dtype=np.uint8)
            grown[:self.mem.size] = self.mem
            self.mem = grown

    def _write_mem(self, addr: int, data: np.ndarray) -> None:
        self._ensure(addr + data.size)
        self.mem[addr:addr + data.size] = data

    def _read_mem(self, addr: int, nbytes: int) -> np.ndarray:
        self._ensure(addr + nbytes)
        return self.mem[addr:addr + nbytes].copy()

    def run(self, insn_addr: int, insn_count: int, *,
            regions: Sequence[Buffer] | None = None, timeout_cycles: int | None = None
            ) -> RunResult:
        """Run a program in device memory (see :func:`simulate`; default regions: every live
        buffer).  A repeated program replays its recorded plan (``plans``), with the
        results, statistics and errors of :func:`simulate`."""
        regs = self.buffers() if regions is None else list(regions)
        ends = [(r.end if isinstance(r, Buffer) else int(r[0]) + int(r[1])) for r in regs]
        self._ensure(max(ends, default=0))
        stats = _run_planned(self.config, self.mem, insn_addr, insn_count, regs,
                             max_steps=timeout_cycles, plans=self.plans)
        return RunResult(cycles=0, stats=dict(stats))

    # ------------------------------------------------------------------ streaming
    def stream_open(self) -> None:
        """Start a streamed-execution session (``hw/regs.py`` ring protocol): a ring of
        ``INSN_RING`` instruction slots is allocated in device memory; HEAD, TAIL and the
        FINISH count start at 0.

        Raises:
            DeviceError: the config has no ring (``INSN_RING = 0``), or a session is open.
        """
        check_ring(self.config)
        if getattr(self, "_stream", None) is not None:
            raise DeviceError("fsim: a stream session is already open")
        ring = self.alloc(self.config.INSN_RING * INSN_BYTES)
        self._stream = {"ring": ring, "tail": 0, "head": 0, "finish": 0, "pending": deque(),
                        "appended": 0, "failed": None}
        self._stream.update(ring_session_extra(ring))

    def stream_append(self, insn_addr: int, insn_count: int, *,
                      regions: Sequence[Buffer] | None = None,
                      timeout_cycles: int | None = None) -> int:
        """Verify one segment (``verify.verify_segment``: the whole static verifier, one
        FINISH as its last instruction) and append it to the ring: its instructions, read
        from device memory at ``insn_addr``, are copied into the ring's slots (wrapping);
        the data it touches must lie in ``regions`` (default: every live buffer but the
        ring).  The core model runs appended segments in order, lazily (at
        :meth:`stream_wait`, or when the ring has no room for the next segment).

        Returns:
            the segment's number ``k`` (1-based).
        Raises:
            ProgramError: the verifier refused the segment (nothing is appended), or an
                earlier segment failed when it ran.
            DeviceError: no session is open.
        """
        st = self._session()
        ring = st["ring"]
        regs = [b for b in (self.buffers() if regions is None else list(regions))
                if b != ring]
        _verify_segment(self.config, self.mem, insn_addr, insn_count, regs, timeout_cycles)
        raw = self._read_mem(int(insn_addr), int(insn_count) * INSN_BYTES)
        size = self.config.INSN_RING
        while size - (st["tail"] - st["head"]) < min(insn_count, size) and st["pending"]:
            self._run_segment(st)           # the core frees slots by fetching them
        from .mmio import ring_pieces  # noqa: PLC0415
        for slot, first, n in ring_pieces(st["tail"], insn_count, size):
            self._write_mem(ring.addr + slot * INSN_BYTES,
                            raw[first * INSN_BYTES:(first + n) * INSN_BYTES])
        st["tail"] += insn_count
        st["appended"] += 1
        st["pending"].append((st["appended"], raw, regs, timeout_cycles))
        return st["appended"]

    def stream_wait(self, k: int, *, timeout_cycles: int | None = None) -> RunResult:
        """Run appended segments until segment ``k`` is done (FINISH count >= ``k``).

        Returns:
            a :class:`RunResult` with the statistics of the segments run by this call
            (summed per key).
        Raises:
            ProgramError / DeadlockError: a segment failed (the message starts with
                ``segment <k>:``); the session then refuses further appends.
            DeviceError: ``k`` was never appended.
        """
        st = self._session()
        if not 1 <= int(k) <= st["appended"]:
            raise DeviceError(f"fsim: segment {k} was not appended in this session")
        total = RunResult(cycles=0, stats=stats_template())
        while st["finish"] < k:
            res = self._run_segment(st, timeout_cycles)
            for key, v in res.stats.items():
                if isinstance(v, (int, float)):
                    total.stats[key] = total.stats.get(key, 0) + v
        return total

    @property
    def finish_count(self) -> int:
        """Segments completed in the open session (the ``FINISH_COUNT`` register)."""
        return self._session()["finish"]

    def stream_close(self) -> RunResult:
        """Run every pending segment and end the session (the ring is freed).

        Returns:
            ``cycles = 0``, ``stats``: ``finish_count`` (segments run) and ``ring_head``.
        Raises:
            ProgramError: a pending segment failed (the session is closed anyway).
        """
        st = getattr(self, "_stream", None)
        if st is None:
            raise DeviceError("fsim: no stream session is open (stream_open first)")
        self._ring_close(st, checked=True)  # ring faults (hw/regs.py), as the core reports
        try:
            if st["appended"] and st["failed"] is None:
                self.stream_wait(st["appended"])
        finally:
            if st.get("own", True):
                self.free(st["ring"])
            self._stream = None
        return RunResult(cycles=0, stats={"finish_count": st["finish"],
                                          "ring_head": st["head"]})

    def _session(self) -> dict:
        st = getattr(self, "_stream", None)
        if st is None:
            raise DeviceError("fsim: no stream session is open (stream_open first)")
        if st["failed"] is not None:
            raise ProgramError(f"fsim: the stream session stopped at a failed segment: "
                               f"{st['failed']}", insn_index=st.get("failed_insn"))
        return st

    def _run_segment(self, st: dict, timeout_cycles: int | None = None) -> RunResult:
        k, raw, regs, tmo = st["pending"].popleft()
        ring = st["ring"]
        ends = [(r.end if isinstance(r, Buffer) else int(r[0]) + int(r[1])) for r in regs]
        self._ensure(max(ends + [ring.end]))
        try:
            stats = _run_planned(self.config, self.mem, ring.addr, self.config.INSN_RING,
                                 list(regs), max_steps=timeout_cycles or tmo, raw=raw,
                                 plans=self.plans)
        except ProgramError as e:
            st["failed"] = f"segment {k}: {e}"
            st["failed_insn"] = e.insn_index     # within the segment, as its message says
            raise e.with_message(st["failed"]) from None
        st["head"] += raw.size // INSN_BYTES
        st["finish"] = k
        return RunResult(cycles=0, stats=dict(stats))


def _verify_segment(cfg, mem, insn_addr, insn_count, regions, max_steps) -> None:
    from .verify import verify_segment  # noqa: PLC0415 - verify imports this module

    verify_segment(cfg, mem, insn_addr, insn_count, regions, max_steps=max_steps)


def _dry_run(cfg: VTAConfig, dram: np.ndarray, insn_addr: int, insn_count: int, regions,
             max_steps: int | None = None) -> _Machine:
    """Run the scheduler without data (for :mod:`.verify`)."""
    return _run_machine(cfg, dram, insn_addr, insn_count, regions, dry=True,
                        max_steps=max_steps)


def stats_template() -> dict[str, Any]:
    """A zeroed statistics dict with every key of :data:`STAT_KEYS`."""
    return {k: 0 for k in STAT_KEYS}
