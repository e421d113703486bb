"""Race checker for VTA programs: is a program's result independent of the schedule?

:func:`race_check` derives, from the *encoded* program alone (decode, token matching,
vector clocks per module -- the k-th pop of a queue observes the k-th push -- and access sets
from the decoded fields and the micro-ops in DRAM), whether every pair of accesses by
different modules to the same scratchpad entry or DRAM byte is ordered by dependency tokens,
whether anything reads a scratchpad entry the program has not written, and whether the
token pattern can deadlock under some schedule.  A program that passes gives the same DRAM
on every legal schedule (any command-queue depth), which is what lets the differential
tests compare backends bit for bit.  :func:`program_insns` decodes a program's instructions.

The random-program generator and shrinker that use it are test code
(``tests/support/randprog.py``).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..hw.config import MemType, VTAConfig
from ..hw.isa import (
    FLAG_QUEUES, INSN_BYTES, INSN_FIELDS, AluOp, Insn, Module, Opcode, decode_program,
    decode_uops, insn_module,
)
from .device import ProgramError

__all__ = ["race_check", "RaceError", "RaceReport", "program_insns"]

# internal module indices
_LD, _CP, _ST = 0, 1, 2
_MOD_OF = {Module.LOAD: _LD, Module.COMPUTE: _CP, Module.STORE: _ST}
_MOD_NAME = ("load", "compute", "store")
_QNAMES = ("l2g", "g2l", "g2s", "s2g")


# ----------------------------------------------------------------------------- race checker
class RaceError(ProgramError):
    """A program whose result may depend on the schedule (a data race between modules, a
    scratchpad read before any write, a store over the instruction stream) or that
    deadlocks under every schedule.  ``insn_index``: the instruction the message names
    first (the reader or writer of a race); None for a deadlock (several heads)."""


@dataclass
class RaceReport:
    """Result of :func:`race_check`: per-module instruction counts and token pushes per
    queue (``l2g, g2l, g2s, s2g``)."""

    per_module: tuple[int, int, int]
    pushes: tuple[int, int, int, int]


def program_insns(cfg: VTAConfig, dram: np.ndarray, insn_addr: int, insn_count: int
                  ) -> list[Insn]:
    """Decode the ``insn_count`` instructions at ``insn_addr`` of ``dram``."""
    cols = decode_program(cfg, dram[insn_addr:insn_addr + INSN_BYTES * insn_count])
    return [Insn(**{k: int(cols[k][i]) for k in INSN_FIELDS}) for i in range(insn_count)]


def _loop_sets(cfg, insn: Insn, ud, us, uw):
    I, J = insn.iter_out, insn.iter_in
    b, e = insn.uop_bgn, insn.uop_end
    if I == 0 or J == 0 or e <= b:
        return None
    io = np.arange(I, dtype=np.int64)[:, None, None]
    jo = np.arange(J, dtype=np.int64)[None, :, None]

    def idx(base, fo, fi):
        return np.unique((io * fo + jo * fi + base[b:e][None, None, :]).reshape(-1))

    return (idx(ud, insn.dst_factor_out, insn.dst_factor_in),
            idx(us, insn.src_factor_out, insn.src_factor_in),
            idx(uw, insn.wgt_factor_out, insn.wgt_factor_in), np.arange(b, e))


def race_check(cfg: VTAConfig, dram: np.ndarray, insn_addr: int, insn_count: int
               ) -> RaceReport:
    """Check from the encoded program alone that its result cannot depend on the schedule.

    Happens-before: program order within a module, and the k-th push of a token queue before
    its k-th pop.  Vector clocks are computed in a topological order of that relation (none
    exists: :class:`RaceError`, the program deadlocks on every schedule).  Then, for every
    INP, WGT, ACC scratchpad entry and every DRAM byte: two accesses from different modules
    of which one writes must be ordered; every scratchpad read (GEMM/ALU operands,
    accumulate destinations, STORE sources, micro-ops) must follow a write by this program;
    no STORE may write the instruction stream.  Micro-ops are taken from the image as
    given (like the static verifier).  The program must otherwise be valid (run
    ``verify_program`` first).

    Raises:
        RaceError: naming the two instructions (or the read) and the location.
    """
    insns = program_insns(cfg, dram, insn_addr, insn_count)
    mods = [_MOD_OF[insn_module(i.opcode, i.memory_type)] for i in insns]
    per_mod, push_lists, pop_of = _match_tokens(insns, mods)
    vc, seqno, order = _vector_clocks(len(insns), per_mod, pop_of)
    acc = _Accesses(cfg, dram, insn_addr, insn_count)
    for k in order:
        reads, writes = acc.sets(k, insns[k])
        acc.check(k, mods[k], vc[k], reads, writes)
        acc.record(k, mods[k], seqno[k], reads, writes)
    return RaceReport(per_module=tuple(len(p) for p in per_mod),
                      pushes=tuple(len(p) for p in push_lists))


def _match_tokens(insns: list[Insn], mods: list[int]):
    """Per-module instruction sequences and token matching: ``(per_mod, push_lists,
    pop_of)`` with ``pop_of[k]`` the ``(queue, pushing instruction)`` of each pop of
    instruction ``k`` (the k-th pop of a queue matches its k-th push).

    Raises:
        RaceError: a pop with no matching push.
    """
    per_mod: list[list[int]] = [[], [], []]
    for k, m in enumerate(mods):
        per_mod[m].append(k)
    push_lists: list[list[int]] = [[], [], [], []]
    pop_of: dict[int, list[tuple[int, int]]] = {}
    for k, i in enumerate(insns):
        fq = FLAG_QUEUES[Module(mods[k] + 1)]
        for flag in ("push_prev", "push_next"):
            if getattr(i, flag) and fq[flag] is not None:
                push_lists[int(fq[flag])].append(k)
    pop_count = [0, 0, 0, 0]
    for k, i in enumerate(insns):
        fq = FLAG_QUEUES[Module(mods[k] + 1)]
        for flag in ("pop_prev", "pop_next"):
            if getattr(i, flag) and fq[flag] is not None:
                q = int(fq[flag])
                j = pop_count[q]
                pop_count[q] += 1
                if j >= len(push_lists[q]):
                    raise RaceError(f"instruction {k}: pop number {j + 1} of {_QNAMES[q]} has "
                                    f"no matching push", insn_index=k)
                pop_of.setdefault(k, []).append((q, push_lists[q][j]))
    return per_mod, push_lists, pop_of


def _vector_clocks(n: int, per_mod: list[list[int]], pop_of: dict):
    """A topological order of happens-before and each instruction's vector clock (one
    entry per module) and sequence number in its module: ``(vc, seqno, order)``.

    Raises:
        RaceError: no order exists (the tokens deadlock on every schedule).
    """
    vc: list[tuple | None] = [None] * n
    seqno = [0] * n
    ptr = [0, 0, 0]
    cur = [[0, 0, 0], [0, 0, 0], [0, 0, 0]]
    order: list[int] = []
    while len(order) < n:
        progress = False
        for m in range(3):
            while ptr[m] < len(per_mod[m]):
                k = per_mod[m][ptr[m]]
                deps = pop_of.get(k, [])
                if any(vc[p] is None for _, p in deps):
                    break
                v = cur[m]
                for _, p in deps:
                    v = [max(a, b) for a, b in zip(v, vc[p])]
                ptr[m] += 1
                v[m] = ptr[m]
                cur[m] = v
                vc[k] = tuple(v)
                seqno[k] = ptr[m]
                order.append(k)
                progress = True
        if not progress:
            heads = [per_mod[m][ptr[m]] for m in range(3) if ptr[m] < len(per_mod[m])]
            raise RaceError(f"tokens deadlock on every schedule at instructions {heads}")
    return vc, seqno, order


def _rows(base, y, x, stride, eb):
    """The DRAM bytes of ``y`` rows of ``x`` elements of ``eb`` bytes (sorted, unique)."""
    if y == 0 or x == 0:
        return np.zeros(0, dtype=np.int64)
    r0 = base * eb + np.arange(y, dtype=np.int64)[:, None] * stride * eb
    return np.unique((r0 + np.arange(x * eb, dtype=np.int64)[None, :]).reshape(-1))


def _where(sp, e):
    """Location ``e`` of space ``sp`` in words, for the error messages."""
    return f"{sp} entry {int(e)}" if sp != "DRAM" else f"DRAM byte 0x{int(e):x}"


class _Accesses:
    """Access tracking over INP, WGT, ACC and DRAM, in happens-before order: per location
    the last writer (module, sequence number, instruction), per module the last read, which
    scratchpad entries (and UOP slots) this program has written, and the micro-ops loaded
    so far."""

    def __init__(self, cfg: VTAConfig, dram: np.ndarray, insn_addr: int, insn_count: int):
        self.cfg, self.dram = cfg, dram
        spaces = {"INP": cfg.INP_DEPTH, "WGT": cfg.WGT_DEPTH, "ACC": cfg.ACC_DEPTH,
                  "DRAM": int(dram.size)}
        self.lw_mod = {s: np.full(d, -1, dtype=np.int8) for s, d in spaces.items()}
        self.lw_seq = {s: np.zeros(d, dtype=np.int64) for s, d in spaces.items()}
        self.lw_insn = {s: np.full(d, -1, dtype=np.int64) for s, d in spaces.items()}
        self.rd_seq = {s: np.zeros((3, d), dtype=np.int64) for s, d in spaces.items()}
        self.rd_insn = {s: np.full((3, d), -1, dtype=np.int64) for s, d in spaces.items()}
        self.written = {"INP": np.zeros(cfg.INP_DEPTH, bool),
                        "WGT": np.zeros(cfg.WGT_DEPTH, bool),
                        "ACC": np.zeros(cfg.ACC_DEPTH, bool),
                        "UOP": np.zeros(cfg.UOP_DEPTH, bool)}
        self.ud = np.zeros(cfg.UOP_DEPTH, dtype=np.int64)
        self.us, self.uw = self.ud.copy(), self.ud.copy()
        self.ia0, self.ia1 = insn_addr, insn_addr + INSN_BYTES * insn_count

    def sets(self, k: int, i: Insn):
        """The ``(reads, writes)`` of instruction ``k``, lists of ``(space, indices)``; a
        UOP LOAD updates the micro-op table.

        Raises:
            RaceError: a STORE over the instruction stream, or a micro-op slot read
                before any UOP LOAD wrote it.
        """
        cfg, dram, written = self.cfg, self.dram, self.written
        reads: list[tuple[str, np.ndarray]] = []
        writes: list[tuple[str, np.ndarray]] = []
        op = i.opcode
        if op == Opcode.LOAD and i.x_size:
            mt = i.memory_type
            R = i.y_pad_0 + i.y_size + i.y_pad_1
            C = i.x_pad_0 + i.x_size + i.x_pad_1
            if mt == MemType.UOP:
                words = dram[i.dram_base * 4:(i.dram_base + i.x_size) * 4].view("<u4")
                d = decode_uops(cfg, words)
                s0 = i.sram_base
                self.ud[s0:s0 + i.x_size] = d["dst"]
                self.us[s0:s0 + i.x_size] = d["src"]
                self.uw[s0:s0 + i.x_size] = d["wgt"]
                written["UOP"][s0:s0 + i.x_size] = True
                reads.append(("DRAM", np.arange(i.dram_base * 4, (i.dram_base + i.x_size) * 4)))
            else:
                sp = {MemType.INP: "INP", MemType.WGT: "WGT", MemType.ACC: "ACC",
                      MemType.ACC8: "ACC"}[MemType(mt)]
                writes.append((sp, np.arange(i.sram_base, i.sram_base + R * C)))
                reads.append(("DRAM", _rows(i.dram_base, i.y_size, i.x_size, i.x_stride,
                                            cfg.elem_bytes(mt))))
        elif op == Opcode.STORE and i.x_size:
            reads.append(("ACC", np.arange(i.sram_base, i.sram_base + i.y_size * i.x_size)))
            w = _rows(i.dram_base, i.y_size, i.x_size, i.x_stride, cfg.elem_bytes(MemType.OUT))
            if w.size and ((w >= self.ia0) & (w < self.ia1)).any():
                raise RaceError(f"instruction {k}: STORE writes the instruction stream",
                                insn_index=k)
            writes.append(("DRAM", w))
        elif op in (Opcode.GEMM, Opcode.ALU):
            sets = _loop_sets(cfg, i, self.ud, self.us, self.uw)
            if sets is not None:
                dst, src, wgt, slots = sets
                if not written["UOP"][slots].all():
                    raise RaceError(f"instruction {k}: micro-op slot "
                                    f"{int(slots[~written['UOP'][slots]][0])} is read before "
                                    f"any UOP load wrote it", insn_index=k)
                writes.append(("ACC", dst))
                # a clearing REQ (reset on ALU REQ) reads dst and src like REQ: no reset
                if not i.reset or (op == Opcode.ALU and i.alu_opcode == AluOp.REQ):
                    reads.append(("ACC", dst))
                    if op == Opcode.GEMM:
                        if i.depthwise:     # the DEPTHWISE_TAPS entries from src on
                            src = np.unique((src[:, None] + np.arange(
                                cfg.DEPTHWISE_TAPS)).reshape(-1))
                        reads += [("INP", src), ("WGT", wgt)]
                    elif not i.use_imm:
                        reads.append(("ACC", src))
        return reads, writes

    def check(self, k: int, m: int, v: tuple, reads: list, writes: list) -> None:
        """Check instruction ``k`` of module ``m`` (vector clock ``v``) against the accesses
        recorded so far: its reads follow a write by this program and every other module's
        write to them; its writes follow every other module's access.

        Raises:
            RaceError: the first read or access out of order.
        """
        lw_mod, lw_seq, lw_insn, written = self.lw_mod, self.lw_seq, self.lw_insn, self.written
        for sp, idx in reads:
            if idx.size == 0:
                continue
            if sp in written and not written[sp][idx].all():
                e = idx[~written[sp][idx]][0]
                raise RaceError(f"instruction {k} ({_MOD_NAME[m]}) reads {_where(sp, e)} "
                                f"before this program wrote it", insn_index=k)
            lm = lw_mod[sp][idx]
            for m2 in range(3):
                if m2 == m:
                    continue
                sel = lm == m2
                if sel.any():
                    bad = sel & (lw_seq[sp][idx] > v[m2])
                    if bad.any():
                        e = idx[bad][0]
                        raise RaceError(
                            f"race: instruction {k} ({_MOD_NAME[m]}) reads {_where(sp, e)} "
                            f"written by instruction {int(lw_insn[sp][e])} ({_MOD_NAME[m2]}) "
                            f"without a token ordering them", insn_index=k)
        for sp, idx in writes:
            if idx.size == 0:
                continue
            for m2 in range(3):
                if m2 == m:
                    continue
                bad = (lw_mod[sp][idx] == m2) & (lw_seq[sp][idx] > v[m2])
                bad |= self.rd_seq[sp][m2, idx] > v[m2]
                if bad.any():
                    e = idx[bad][0]
                    other = int(lw_insn[sp][e]) if lw_mod[sp][e] == m2 and \
                        lw_seq[sp][e] > v[m2] else int(self.rd_insn[sp][m2, e])
                    raise RaceError(
                        f"race: instruction {k} ({_MOD_NAME[m]}) writes {_where(sp, e)} "
                        f"accessed by instruction {other} ({_MOD_NAME[m2]}) without a token "
                        f"ordering them", insn_index=k)

    def record(self, k: int, m: int, seq: int, reads: list, writes: list) -> None:
        """Record instruction ``k``'s accesses (module ``m``, sequence number ``seq``)."""
        for sp, idx in reads:
            if idx.size:
                self.rd_seq[sp][m, idx] = seq
                self.rd_insn[sp][m, idx] = k
        for sp, idx in writes:
            if idx.size:
                self.lw_mod[sp][idx] = m
                self.lw_seq[sp][idx] = seq
                self.lw_insn[sp][idx] = k
                self.rd_seq[sp][:, idx] = 0
                if sp in self.written:
                    self.written[sp][idx] = True
