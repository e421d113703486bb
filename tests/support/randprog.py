"""Seeded random generator of legal VTA programs and a program shrinker, for differential
testing of the backends (fsim as reference, rtl under test).  Test code: it lives under
``tests/support/`` (the race checker it relies on is product code, ``runtime/race.py``).

:func:`generate` builds one random program for any :class:`~vtaforge.hw.config.VTAConfig`:
a raw DRAM image (``uint8``) holding random tensor data, micro-op kernels, a guard-filled
output region and the instruction stream.  Programs mix INP/WGT/ACC (and ACC8 when
``cfg.ACC_8BIT``) loads with random padding, strides (including overlapping rows, stride 0,
``y_size == 0``), UOP loads at random scratchpad offsets (some hundreds of micro-ops long),
GEMM and ALU instructions with
random two-level loop nests (empty micro-op ranges, ``iter == 0``, long loops, ``reset``,
repeated destinations), every ALU opcode (MUL only with ``cfg.ALU_MUL``) with edge
immediates and tensor operands, STOREs (including overlapping rows), token-only NOPs with
junk in their ignored fields, virtual-thread-like ping-pong use of the scratchpads, loads
that read back what an earlier STORE wrote (a DRAM round trip, ordered by tokens), and a
FINISH that sometimes does not wait for the store module (so "complete = FINISH executed
and every module drained" is exercised) and is sometimes followed by more load/store work.

Legality by construction (DESIGN.md "Semantics"):

- every DMA lies inside the image, every scratchpad index inside its depth, every micro-op
  range inside the UOP depth;
- nothing reads a scratchpad entry this program has not written (contents are undefined at
  the start of a run, and a backend may keep them across runs);
- dependency tokens are *race-free*: the generator tracks a vector clock per module
  (per-module instruction sequence numbers; the k-th pop of a queue observes the k-th push)
  and, before an instruction that touches data another module touched, pops tokens (adding
  pushes to the other module's latest instruction and token-only NOPs as needed, through
  the compute module when load and store must be ordered) until the access is ordered
  after the conflicting one.  So the final DRAM does not depend on the schedule;
- tokens are balanced and every pop is preceded in program order by its push, and no queue
  receives more than ``cfg.TOKEN_QUEUE_DEPTH`` pushes per program, so no schedule (any
  command-queue depth) can deadlock.

:func:`race_check` re-derives the same properties from the *encoded* program only (decode,
token matching, vector clocks, access sets from the decoded fields and micro-ops in DRAM),
independently of the generator's bookkeeping; :func:`shrink` reduces a failing program by
turning instructions into token-preserving NOPs and deleting matched push/pop pairs,
keeping only candidates that the verifier and :func:`race_check` accept.
"""

from __future__ import annotations

from collections import Counter, deque
from dataclasses import dataclass, field
from typing import Callable, Sequence

import numpy as np

from vtaforge.hw.config import MemType, VTAConfig
from vtaforge.hw.isa import (
    FLAG_QUEUES, INSN_BYTES, AluOp, Insn, Module, Opcode, Queue, disassemble, encode_program, encode_uops, insn_module,
)
from vtaforge.runtime.device import ProgramError
from vtaforge.runtime.race import RaceError, RaceReport, program_insns, race_check

__all__ = ["RandomProgram", "generate", "race_check", "RaceError", "RaceReport", "nopify",
           "rebuild", "shrink", "program_insns"]

# internal module indices
_LD, _CP, _ST = 0, 1, 2
_MOD_OF = {Module.LOAD: _LD, Module.COMPUTE: _CP, Module.STORE: _ST}

#: (producer, consumer) -> (queue, push flag on the producer, pop flag on the consumer)
_QMAP = {
    (_LD, _CP): (int(Queue.L2G), "push_next", "pop_prev"),
    (_CP, _LD): (int(Queue.G2L), "push_prev", "pop_next"),
    (_CP, _ST): (int(Queue.G2S), "push_next", "pop_prev"),
    (_ST, _CP): (int(Queue.S2G), "push_prev", "pop_next"),
}
_QSRC = {q: (s, d, pf, cf) for (s, d), (q, pf, cf) in _QMAP.items()}

#: Signed 16-bit immediates worth hitting (sign extension, wrap, zero, ones).
_IMM_EDGES = (-32768, 32767, 0, 1, -1, 2, -2, 127, -128, 255, 256, -256, 16383, -16384)

#: SHR amounts: the low LOG_ACC_WIDTH+1 bits are read as signed (DESIGN.md).
_SHR_EDGES = (0, 1, -1, 7, -7, 15, -15, 16, 31, -31, 32, -32, 33, -33, 63, 64, -64, 65, 127,
              -128, 32767, -32768)


class _Exhausted(Exception):
    """A token queue would exceed its per-program push budget: end the program here."""


@dataclass
class _Rec:
    insn: Insn
    mod: int
    seq: int
    vc: tuple
    patch: tuple | None = None  # (region name, element offset, memory type) for dram_base


@dataclass
class RandomProgram:
    """One generated program.

    Attributes:
        cfg: the config it was generated for.
        seed: the generator seed.
        dram: the initial DRAM image, ``uint8`` 1-D (byte address = index); copy it before
            running (backends modify it in place).
        insn_addr: byte address of the first instruction; insn_count: instructions.
        regions: name -> ``(byte address, nbytes)`` of each part of the image
            (``inp``, ``wgt``, ``acc``, ``acc8``, ``uop``, ``out``, ``insn``).
        features: counts of the notable cases the program contains (``"pad"``,
            ``"alu_SHR_imm"``, ``"gemm_reset"``, ``"empty_nest"``, ``"roundtrip"``, ...).
    """

    cfg: VTAConfig
    seed: int
    dram: np.ndarray
    insn_addr: int
    insn_count: int
    regions: dict[str, tuple[int, int]]
    features: Counter = field(default_factory=Counter)

    def disassemble(self) -> list[str]:
        """:func:`vtaforge.hw.isa.disassemble` of the instruction stream."""
        return disassemble(self.cfg, self.program_bytes())

    def program_bytes(self) -> np.ndarray:
        """The instruction stream, ``uint8`` of shape ``(insn_count * 16,)``."""
        return self.dram[self.insn_addr:self.insn_addr + INSN_BYTES * self.insn_count]

    def description(self) -> str:
        """One line: seed, instruction count and the features present."""
        feats = ", ".join(f"{k}={v}" for k, v in sorted(self.features.items()))
        return f"seed {self.seed}: {self.insn_count} instructions; {feats}"


# ----------------------------------------------------------------------------- generator
class _Gen:
    def __init__(self, cfg: VTAConfig, seed: int, max_insns: int | None):
        self.cfg = cfg
        self.seed = int(seed)
        self.rng = np.random.default_rng([0x5EED, self.seed])
        r = self.rng
        self.max_insns = int(max_insns) if max_insns is not None else int(r.integers(8, 64))
        self.feat: Counter = Counter()
        self.prog: list[_Rec] = []
        self.seq = [0, 0, 0]
        self.vc = [[0, 0, 0], [0, 0, 0], [0, 0, 0]]
        self.last = [-1, -1, -1]
        self.pending = [deque() for _ in range(4)]
        self.npush = [0, 0, 0, 0]
        self.cap = cfg.TOKEN_QUEUE_DEPTH
        self.finishing = False
        # scratchpads: depth, window(s), written-by-this-program, last writer, readers
        self.depth = {"inp": cfg.INP_DEPTH, "wgt": cfg.WGT_DEPTH, "acc": cfg.ACC_DEPTH,
                      "uop": cfg.UOP_DEPTH}
        self.vthread = bool(r.random() < 0.3)
        if self.vthread:
            self.feat["vthread"] += 1
        self.win = {}
        for sp, d in self.depth.items():
            w = int(min(d, r.choice([8, 16, 24, 32, 48, 64])))
            u = r.random()
            lo = 0 if u < 0.2 else (d - w if u < 0.5 else int(r.integers(0, d - w + 1)))
            if self.vthread and sp != "uop" and w >= 8:
                h = w // 2
                self.win[sp] = [(lo, lo + h), (lo + h, lo + w)]
            else:
                self.win[sp] = [(lo, lo + w)]
        self.thread = 0
        self.init = {sp: np.zeros(d, dtype=bool) for sp, d in self.depth.items()}
        # data-race bookkeeping for cross-module spaces (uop is compute-only)
        self.out_elems = int(r.integers(24, 72))
        ob = self.out_elems * cfg.elem_bytes(MemType.OUT)
        sizes = {"inp": cfg.INP_DEPTH, "wgt": cfg.WGT_DEPTH, "acc": cfg.ACC_DEPTH, "dram": ob}
        self.lw_mod = {k: np.full(n, -1, dtype=np.int8) for k, n in sizes.items()}
        self.lw_seq = {k: np.zeros(n, dtype=np.int64) for k, n in sizes.items()}
        self.rd = {k: np.zeros((3, n), dtype=np.int64) for k, n in sizes.items()}
        self.out_written = np.zeros(ob, dtype=bool)
        # micro-op buffer contents known to the generator
        self.uop_dst = np.zeros(cfg.UOP_DEPTH, dtype=np.int64)
        self.uop_src = np.zeros(cfg.UOP_DEPTH, dtype=np.int64)
        self.uop_wgt = np.zeros(cfg.UOP_DEPTH, dtype=np.int64)
        self.pool: list[tuple[int, int, int]] = []  # micro-ops in DRAM, in order
        # DRAM data region sizes (elements)
        self.n_elems = {"inp": int(r.integers(32, 128)), "wgt": int(r.integers(16, 64)),
                        "acc": int(r.integers(32, 128)), "acc8": int(r.integers(32, 128))}

    # ------------------------------------------------------------------ helpers
    def _window(self, sp: str) -> tuple[int, int]:
        w = self.win[sp]
        if len(w) == 1:
            return w[0]
        if self.rng.random() < 0.85:
            return w[self.thread]
        lo = w[0][0]
        return lo, w[-1][1]

    def _budget(self, q: int) -> None:
        if self.npush[q] + 1 > self.cap:
            raise _Exhausted()

    def _emit(self, insn: Insn, mod: int, *, reads=(), writes=(), patch=None) -> _Rec:
        """Append ``insn`` (its pop flags already set for tokens at the queue heads)."""
        fq = FLAG_QUEUES[Module(mod + 1)]
        for flag in ("push_prev", "push_next"):  # budget first: no partial state on failure
            if getattr(insn, flag):
                self._budget(int(fq[flag]))
        for flag in ("pop_prev", "pop_next"):
            if getattr(insn, flag):
                q = int(fq[flag])
                tvc = self.pending[q].popleft()
                self.vc[mod] = [max(a, b) for a, b in zip(self.vc[mod], tvc)]
        self.seq[mod] += 1
        s = self.seq[mod]
        self.vc[mod][mod] = s
        rec = _Rec(insn, mod, s, tuple(self.vc[mod]), patch)
        self.prog.append(rec)
        self.last[mod] = len(self.prog) - 1
        for flag in ("push_prev", "push_next"):
            if getattr(insn, flag):
                q = int(fq[flag])
                self.npush[q] += 1
                self.pending[q].append(rec.vc)
        for sp, idx in writes:
            if sp in self.lw_mod:
                self.lw_mod[sp][idx] = mod
                self.lw_seq[sp][idx] = s
            if sp in self.init:
                self.init[sp][idx] = True
            if sp == "dram":
                self.out_written[idx] = True
        for sp, idx in reads:
            if sp in self.rd:
                self.rd[sp][mod, idx] = s
        return rec

    def _nop_insn(self, mod: int) -> Insn:
        r = self.rng
        if mod == _ST:
            i = Insn(Opcode.STORE, memory_type=int(MemType.OUT))
        elif mod == _LD:
            i = Insn(Opcode.LOAD, memory_type=int(r.choice([MemType.INP, MemType.WGT])))
        else:
            mts = [MemType.UOP, MemType.ACC] + ([MemType.ACC8] if self.cfg.ACC_8BIT else [])
            i = Insn(Opcode.LOAD, memory_type=int(r.choice(mts)))
        if r.random() < 0.25:  # junk in the fields a NOP must ignore
            self.feat["nop_junk"] += 1
            i.sram_base = int(r.integers(0, 1 << 16))
            i.dram_base = int(r.integers(0, 1 << 32))
            i.y_size = int(r.integers(0, 1 << 16))
            i.x_stride = int(r.integers(0, 1 << 16))
            if i.opcode == Opcode.LOAD and i.memory_type != MemType.UOP:
                i.y_pad_0, i.y_pad_1, i.x_pad_0, i.x_pad_1 = (int(v) for v in r.integers(0, 16, 4))
        return i

    def _nop(self, mod: int, pops=(), pushes=()) -> _Rec:
        i = self._nop_insn(mod)
        for f in pops:
            setattr(i, f, 1)
        for f in pushes:
            setattr(i, f, 1)
        self.feat["nop"] += 1
        return self._emit(i, mod)

    def _pop_to(self, dst: int, q: int, pos: int, flag: str, insn: Insn | None) -> None:
        """Pop the first ``pos + 1`` tokens of queue ``q`` in module ``dst``: NOPs for the
        first ``pos`` and ``insn`` (or one more NOP) for the last."""
        for _ in range(pos):
            self._nop(dst, pops=(flag,))
        if insn is None:
            self._nop(dst, pops=(flag,))
        else:
            setattr(insn, flag, 1)

    def _find(self, q: int, src: int, s: int) -> int:
        for k, tvc in enumerate(self.pending[q]):
            if tvc[src] >= s:
                return k
        return -1

    def _direct_token(self, src: int, dst: int, s: int) -> int:
        """Position of a pending token of queue src->dst that carries knowledge of
        ``src``'s instruction ``s``, adding a push to ``src``'s latest instruction if
        needed."""
        q, pflag, _ = _QMAP[(src, dst)]
        k = self._find(q, src, s)
        if k >= 0:
            return k
        rec = self.prog[self.last[src]]
        assert rec.vc[src] >= s and not getattr(rec.insn, pflag)
        self._budget(q)
        setattr(rec.insn, pflag, 1)
        self.npush[q] += 1
        self.pending[q].append(rec.vc)
        return len(self.pending[q]) - 1

    def _acquire(self, dst: int, src: int, s: int, insn: Insn | None) -> None:
        """Make ``dst`` know ``src``'s instruction ``s`` before ``insn`` runs."""
        if self.vc[dst][src] >= s:
            return
        if (src, dst) in _QMAP:
            q, _, cflag = _QMAP[(src, dst)]
            if insn is not None and getattr(insn, cflag):
                # insn already pops this queue's head: pop up to the token with NOPs first
                # (keeping insn's pop for the token after it)
                k = self._direct_token(src, dst, s)
                self._pop_to(dst, q, k, cflag, None)
                if not self.pending[q]:
                    setattr(insn, cflag, 0)
                return
            k = self._direct_token(src, dst, s)
            self._pop_to(dst, q, k, cflag, insn)
            return
        # load <-> store: through the compute module
        self.feat["sync_via_compute"] += 1
        self._acquire(_CP, src, s, None)
        q, pflag, cflag = _QMAP[(_CP, dst)]
        k = self._find(q, src, s)
        if k < 0:
            rec = self.prog[self.last[_CP]]
            if rec.vc[src] >= s and not getattr(rec.insn, pflag):
                self._budget(q)
                setattr(rec.insn, pflag, 1)
                self.npush[q] += 1
                self.pending[q].append(rec.vc)
            else:
                self._nop(_CP, pushes=(pflag,))
            k = len(self.pending[q]) - 1
        if insn is not None and getattr(insn, cflag):
            self._pop_to(dst, q, k, cflag, None)
            if not self.pending[q]:
                setattr(insn, cflag, 0)
        else:
            self._pop_to(dst, q, k, cflag, insn)

    def _needs(self, mod: int, reads, writes) -> dict[int, int]:
        need: dict[int, int] = {}

        def upd(m, s):
            if m != mod and s > 0:
                need[m] = max(need.get(m, 0), int(s))

        for sp, idx in list(reads) + list(writes):
            if sp not in self.lw_mod or len(idx) == 0:
                continue
            lm, ls = self.lw_mod[sp][idx], self.lw_seq[sp][idx]
            for m in range(3):
                sel = lm == m
                if sel.any():
                    upd(m, ls[sel].max())
        for sp, idx in writes:
            if sp not in self.rd or len(idx) == 0:
                continue
            for m in range(3):
                upd(m, self.rd[sp][m, idx].max())
        return need

    def _issue(self, insn: Insn, mod: int, reads=(), writes=(), patch=None) -> None:
        """Order ``insn`` after every conflicting access, add random token traffic, emit."""
        need = self._needs(mod, reads, writes)
        for src in sorted(need, key=lambda _: self.rng.random()):
            self._acquire(mod, src, need[src], insn)
        r = self.rng
        fq = FLAG_QUEUES[Module(mod + 1)]
        if not self.finishing:
            for flag in ("pop_prev", "pop_next"):
                q = fq[flag]
                if q is not None and not getattr(insn, flag) and self.pending[int(q)] \
                        and r.random() < 0.15:
                    setattr(insn, flag, 1)
                    self.feat["extra_pop"] += 1
            for flag in ("push_prev", "push_next"):
                q = fq[flag]
                if q is not None and not getattr(insn, flag) and r.random() < 0.12 \
                        and self.npush[int(q)] + 1 <= self.cap:
                    setattr(insn, flag, 1)
                    self.feat["extra_push"] += 1
        self._emit(insn, mod, reads=reads, writes=writes, patch=patch)

    # ------------------------------------------------------------------ instructions
    def _load(self, mt: MemType) -> bool:
        cfg, r = self.cfg, self.rng
        sp = {MemType.INP: "inp", MemType.WGT: "wgt", MemType.ACC: "acc",
              MemType.ACC8: "acc"}[mt]
        lo, hi = self._window(sp)
        W = hi - lo
        eb = cfg.elem_bytes(mt)
        y = 0 if r.random() < 0.04 else int(r.integers(1, 5))
        x = int(r.integers(1, 7)) if r.random() < 0.85 else int(r.integers(7, 17))
        pads = [0, 0, 0, 0]
        if r.random() < 0.4:
            pads = [int(v) if r.random() < 0.6 else 0 for v in r.integers(0, 4, 4)]
            if r.random() < 0.05:
                pads[int(r.integers(0, 4))] = 15
        for _ in range(8):
            R, C = pads[0] + y + pads[1], pads[2] + x + pads[3]
            if R * C <= W and R * C > 0:
                break
            if any(pads):
                pads = [p // 2 for p in pads]
            else:
                x = max(1, x // 2)
                y = min(y, max(1, W // max(1, x)))
        R, C = pads[0] + y + pads[1], pads[2] + x + pads[3]
        if R * C > W or R * C == 0:
            return False
        sram = int(r.integers(lo, hi - R * C + 1))
        # DRAM source: the type's data region, or (a round trip) bytes an earlier STORE wrote
        region = {MemType.INP: "inp", MemType.WGT: "wgt", MemType.ACC: "acc",
                  MemType.ACC8: "acc8"}[mt]
        n_avail = self.n_elems[region]
        reads = []
        if self.out_written.any() and not self.finishing and r.random() < 0.12:
            n_out = self.out_written.size // eb
            if n_out >= 1:
                region, n_avail = "out", n_out
        if r.random() < 0.08:
            stride = int(r.integers(0, x + 1))  # overlapping rows (or all the same row)
            self.feat["load_stride_le_x"] += 1
        else:
            stride = x + int(r.integers(0, 4))
        span = (y - 1) * stride + x if y else 0
        if span > n_avail:
            stride = x
            span = (y - 1) * stride + x
            if span > n_avail:
                return False
        off = int(r.integers(0, n_avail - span + 1)) if y else 0
        if region == "out" and y:
            self.feat["roundtrip"] += 1
            rows = [np.arange((off + k * stride) * eb, (off + k * stride + x) * eb)
                    for k in range(y)]
            reads.append(("dram", np.unique(np.concatenate(rows))))
        if y == 0:
            self.feat["load_y0"] += 1
        if any(pads):
            self.feat["pad"] += 1
        self.feat[f"load_{mt.name}"] += 1
        insn = Insn(Opcode.LOAD, memory_type=int(mt), sram_base=sram, y_size=y, x_size=x,
                    x_stride=stride, y_pad_0=pads[0], y_pad_1=pads[1], x_pad_0=pads[2],
                    x_pad_1=pads[3])
        mod = _LD if mt in (MemType.INP, MemType.WGT) else _CP
        writes = [(sp, np.arange(sram, sram + R * C))]
        self._issue(insn, mod, reads=reads, writes=writes, patch=(region, off, int(mt)))
        return True

    def _uop_load(self, slot: int, uops: list[tuple[int, int, int]]) -> None:
        off = len(self.pool)
        self.pool.extend(uops)
        n = len(uops)
        a = np.array(uops, dtype=np.int64).reshape(n, 3)
        self.uop_dst[slot:slot + n] = a[:, 0]
        self.uop_src[slot:slot + n] = a[:, 1]
        self.uop_wgt[slot:slot + n] = a[:, 2]
        self.feat["load_UOP"] += 1
        insn = Insn(Opcode.LOAD, memory_type=int(MemType.UOP), sram_base=slot, y_size=1,
                    x_size=n, x_stride=n if self.rng.random() < 0.7 else
                    int(self.rng.integers(0, 1 << 16)))
        self._issue(insn, _CP, writes=[("uop", np.arange(slot, slot + n))],
                    patch=("uop", off, int(MemType.UOP)))

    def _random_uop_load(self) -> bool:
        """A UOP load of already-pooled micro-ops to a random offset (no kernel uses it yet)."""
        r = self.rng
        cfg = self.cfg
        if r.random() < 0.2:
            # a long UOP load anywhere in the buffer (more than one burst, odd bases,
            # 4 KiB crossings in DRAM); its micro-ops hold random in-range indices
            d = cfg.UOP_DEPTH
            n = int(min(d, r.integers(64, 700)))
            slot = int(r.integers(0, d - n + 1))
            srcd = min(cfg.INP_DEPTH, cfg.ACC_DEPTH)
            uops = list(zip(r.integers(0, cfg.ACC_DEPTH, n).tolist(),
                            r.integers(0, srcd, n).tolist(),
                            r.integers(0, cfg.WGT_DEPTH, n).tolist()))
            self.feat["uop_big"] += 1
            self._uop_load(slot, uops)
            return True
        if not self.pool:
            return False
        lo, hi = self._window("uop")
        n = int(min(hi - lo, r.integers(1, 9)))
        slot = int(r.integers(lo, hi - n + 1))
        k = int(r.integers(0, len(self.pool)))
        uops = [self.pool[(k + j) % len(self.pool)] for j in range(n)]
        self._uop_load(slot, uops)
        return True

    @staticmethod
    def _offsets(I: int, J: int, fo: int, fi: int) -> np.ndarray:
        return np.unique((np.arange(I)[:, None] * fo + np.arange(J)[None, :] * fi).reshape(-1))

    def _pick_bases(self, sp: str, offs: np.ndarray, U: int, need_init: bool) -> np.ndarray | None:
        r = self.rng
        lo, hi = self._window(sp)
        d = self.depth[sp]
        top = min(hi, d - int(offs.max()))
        if top <= lo:
            return None
        cand = np.arange(lo, top)
        if need_init:
            ok = np.ones(cand.size, dtype=bool)
            for o in offs.tolist():
                ok &= self.init[sp][cand + o]
            cand = cand[ok]
        if cand.size == 0:
            return None
        u = r.random()
        if u < 0.25:  # one base for every micro-op: repeated destinations
            return np.full(U, int(r.choice(cand)))
        if u < 0.45:  # consecutive
            start = int(r.integers(0, cand.size))
            return cand[(start + np.arange(U)) % cand.size]
        return r.choice(cand, U)

    def _loop(self, gemm: bool) -> bool:
        cfg, r = self.cfg, self.rng
        reset = int(r.random() < (0.15 if gemm else 0.08))
        I = int(r.choice([0, 1, 1, 2, 2, 3, 4])) if r.random() > 0.03 else 0
        J = int(r.choice([0, 1, 1, 2, 3, 4])) if r.random() > 0.03 else 0
        if I == 0 and r.random() < 0.7:
            I = 1
        if J == 0 and r.random() < 0.7:
            J = 1
        big = r.random() < 0.04
        U = int(r.integers(1, 6))
        aw, iw, ww = cfg.LOG_ACC_DEPTH, cfg.LOG_INP_DEPTH, cfg.LOG_WGT_DEPTH
        widths = {"dfo": aw, "dfi": aw, "sfo": iw if gemm else aw, "sfi": iw if gemm else aw,
                  "wfo": ww, "wfi": ww}
        f = {k: min(int(r.choice([0, 0, 1, 1, 2, 3, U])), (1 << w) - 1)
             for k, w in widths.items()}
        if big:  # a long loop level with factor 0 (counter widths)
            if r.random() < 0.5:
                I, f["dfo"], f["sfo"], f["wfo"] = int(r.integers(60, 400)), 0, 0, 0
            else:
                J, f["dfi"], f["sfi"], f["wfi"] = int(r.integers(60, 400)), 0, 0, 0
            U = 1
            self.feat["long_loop"] += 1
        aop, use_imm, imm = 0, 0, 0
        if not gemm:
            ops = [AluOp.MIN, AluOp.MAX, AluOp.ADD, AluOp.SHR] + \
                ([AluOp.MUL] if cfg.ALU_MUL else [])
            aop = int(r.choice(ops))
            use_imm = int(r.random() < 0.5)
            if aop == AluOp.SHR:
                imm = int(r.choice(_SHR_EDGES)) if r.random() < 0.6 else int(r.integers(-40, 41))
            elif r.random() < 0.5:
                imm = int(r.choice(_IMM_EDGES))
            else:
                imm = int(r.integers(-32768, 32768))
            if big and use_imm == 0 and aop in (AluOp.ADD, AluOp.MUL, AluOp.SHR):
                use_imm = 1  # keep long tensor loops tame; still wraps
        empty = I == 0 or J == 0
        # micro-ops: reuse loaded ones or load a fresh kernel
        uop_lo, uop_hi = self._window("uop")
        offs_d = self._offsets(max(I, 1), max(J, 1), f["dfo"], f["dfi"])
        offs_s = self._offsets(max(I, 1), max(J, 1), f["sfo"], f["sfi"])
        offs_w = self._offsets(max(I, 1), max(J, 1), f["wfo"], f["wfi"])
        reads_src = (gemm and not reset) or (not gemm and not reset and not use_imm)
        src_sp = "inp" if gemm else "acc"
        bgn = end = None
        if empty or r.random() < 0.04:
            # no work: random micro-op range (maybe uop_end <= uop_bgn), any iteration counts
            if not empty:
                self.feat["empty_uop_range"] += 1
                b = int(r.integers(0, cfg.UOP_DEPTH))
                bgn, end = b, int(r.integers(max(0, b - 3), b + 1))
            else:
                self.feat["empty_iter"] += 1
                b = int(r.integers(0, cfg.UOP_DEPTH))
                bgn, end = b, min(cfg.UOP_DEPTH, b + U)
            insn = self._loop_insn(gemm, reset, bgn, end, I, J, f, aop, use_imm, imm)
            self._issue(insn, _CP)
            return True

        def index_sets(b, e):
            dst = (self.uop_dst[b:e][None, :] + offs_d[:, None]).reshape(-1)
            src = (self.uop_src[b:e][None, :] + offs_s[:, None]).reshape(-1)
            wgt = (self.uop_wgt[b:e][None, :] + offs_w[:, None]).reshape(-1)
            return dst, src, wgt

        def legal(dst, src, wgt):
            if dst.max() >= cfg.ACC_DEPTH or src.max() >= self.depth[src_sp] or \
                    wgt.max() >= cfg.WGT_DEPTH:
                return False
            if not reset and not self.init["acc"][dst].all():
                return False
            if reads_src and not self.init[src_sp][src].all():
                return False
            if gemm and not reset and not self.init["wgt"][wgt].all():
                return False
            return True

        if r.random() < 0.4:
            valid = self.init["uop"]
            for _ in range(4):
                b = int(r.integers(0, cfg.UOP_DEPTH - U + 1))
                if not valid[b:b + U].all():
                    idx = np.flatnonzero(valid)
                    if idx.size == 0:
                        break
                    b = int(r.choice(idx))
                    if b + U > cfg.UOP_DEPTH or not valid[b:b + U].all():
                        continue
                if legal(*index_sets(b, b + U)):
                    bgn, end = b, b + U
                    self.feat["uop_reuse"] += 1
                    break
        if bgn is None:
            dst = self._pick_bases("acc", offs_d, U, need_init=not reset)
            src = self._pick_bases(src_sp, offs_s, U, need_init=reads_src)
            wgt = self._pick_bases("wgt", offs_w, U, need_init=gemm and not reset)
            if dst is None or src is None or wgt is None:
                return False
            extra = int(r.integers(0, 3)) if r.random() < 0.2 else 0
            n = U + extra
            if n > uop_hi - uop_lo:
                return False
            slot = int(r.integers(uop_lo, uop_hi - n + 1))
            kern = [(int(a), int(b), int(c)) for a, b, c in zip(dst, src, wgt)]
            pre = [self.pool[int(r.integers(0, len(self.pool)))] if self.pool
                   else kern[0] for _ in range(extra)]
            k0 = int(r.integers(0, extra + 1))
            self._uop_load(slot, pre[:k0] + kern + pre[k0:])
            bgn, end = slot + k0, slot + k0 + U
            if not legal(*index_sets(bgn, end)):  # cannot happen: bases were chosen legal
                raise AssertionError("generator chose illegal micro-op bases")
        dst, src, wgt = index_sets(bgn, end)
        reads, writes = [], [("acc", np.unique(dst))]
        if not reset:
            reads.append(("acc", np.unique(dst)))
            if gemm:
                reads += [("inp", np.unique(src)), ("wgt", np.unique(wgt))]
            elif not use_imm:
                reads.append(("acc", np.unique(src)))
        reads.append(("uop", np.arange(bgn, end)))
        insn = self._loop_insn(gemm, reset, bgn, end, I, J, f, aop, use_imm, imm)
        if gemm:
            self.feat["gemm_reset" if reset else "gemm"] += 1
        else:
            name = AluOp(aop).name
            self.feat[f"alu_{name}_{'imm' if use_imm else 'tensor'}"] += 1
            if reset:
                self.feat["alu_reset"] += 1
        if np.unique(dst).size < dst.size:
            self.feat["repeated_dst"] += 1
        self._issue(insn, _CP, reads=reads, writes=writes)
        return True

    def _loop_insn(self, gemm, reset, bgn, end, I, J, f, aop, use_imm, imm) -> Insn:
        cfg = self.cfg
        # factors are fields of limited width: keep them in range
        aw, iw, ww = cfg.LOG_ACC_DEPTH, cfg.LOG_INP_DEPTH, cfg.LOG_WGT_DEPTH
        sw = iw if gemm else aw
        clip = lambda v, w: min(int(v), (1 << w) - 1)  # noqa: E731
        i = Insn(Opcode.GEMM if gemm else Opcode.ALU, reset=int(reset), uop_bgn=int(bgn),
                 uop_end=int(end), iter_out=int(I), iter_in=int(J),
                 dst_factor_out=clip(f["dfo"], aw), dst_factor_in=clip(f["dfi"], aw),
                 src_factor_out=clip(f["sfo"], sw), src_factor_in=clip(f["sfi"], sw))
        if gemm:
            i.wgt_factor_out, i.wgt_factor_in = clip(f["wfo"], ww), clip(f["wfi"], ww)
        else:
            i.alu_opcode, i.use_imm, i.imm = int(aop), int(use_imm), int(imm)
        return i

    def _store(self) -> bool:
        cfg, r = self.cfg, self.rng
        lo, hi = self._window("acc")
        y = 0 if r.random() < 0.03 else int(r.integers(1, 5))
        x = int(r.integers(1, 7))
        n = max(1, y * x)
        init = self.init["acc"]
        for _ in range(4):
            if n <= hi - lo:
                c = np.concatenate([[0], np.cumsum(init[lo:hi])])
                starts = np.arange(lo, hi - n + 1)
                ok = (c[starts - lo + n] - c[starts - lo]) == n
                if ok.any():
                    break
            y, x = max(1 if y else 0, y // 2), max(1, x // 2)
            n = max(1, y * x)
        else:
            return False
        sram = int(r.choice(starts[ok]))
        eb = cfg.elem_bytes(MemType.OUT)
        if y > 1 and r.random() < 0.05:
            stride = int(r.integers(0, x))
            self.feat["store_overlap"] += 1
        else:
            stride = x + int(r.integers(0, 4))
        span = (y - 1) * stride + x if y else 0
        if span > self.out_elems:
            stride = x
            span = (y - 1) * stride + x
            if span > self.out_elems:
                return False
        off = int(r.integers(0, self.out_elems - span + 1)) if y else 0
        reads = [("acc", np.arange(sram, sram + y * x))] if y else []
        writes = []
        if y:
            rows = [np.arange((off + k * stride) * eb, (off + k * stride + x) * eb)
                    for k in range(y)]
            writes.append(("dram", np.unique(np.concatenate(rows))))
        else:
            self.feat["store_y0"] += 1
        insn = Insn(Opcode.STORE, memory_type=int(MemType.OUT), sram_base=sram, y_size=y,
                    x_size=x, x_stride=stride)
        self.feat["store"] += 1
        self._issue(insn, _ST, reads=reads, writes=writes,
                    patch=("out", off, int(MemType.OUT)))
        return True

    def _random_nop(self) -> bool:
        r = self.rng
        mod = int(r.integers(0, 3))
        i = self._nop_insn(mod)
        fq = FLAG_QUEUES[Module(mod + 1)]
        for flag in ("pop_prev", "pop_next"):
            q = fq[flag]
            if q is not None and self.pending[int(q)] and r.random() < 0.5:
                setattr(i, flag, 1)
        for flag in ("push_prev", "push_next"):
            q = fq[flag]
            if q is not None and r.random() < 0.4 and self.npush[int(q)] + 1 <= self.cap:
                setattr(i, flag, 1)
        self.feat["nop"] += 1
        self._emit(i, mod)
        return True

    # ------------------------------------------------------------------ program
    def body(self) -> None:
        r = self.rng
        acts = [("inp", 3.0), ("wgt", 3.0), ("acc", 2.0), ("acc8", 1.0 if self.cfg.ACC_8BIT
                                                              else 0.0),
                ("uop", 0.7), ("gemm", 4.0), ("alu", 4.0), ("store", 3.0), ("nop", 0.8)]
        names = [a for a, _ in acts]
        w = np.array([x for _, x in acts])
        w = w / w.sum()
        # start with some data so that compute has something to read
        warm = [MemType.INP, MemType.WGT, MemType.ACC]
        r.shuffle(warm)
        for mt in warm:
            self._load(mt)
        while len(self.prog) < self.max_insns:
            if self.vthread and r.random() < 0.3:
                self.thread ^= 1
            a = names[int(r.choice(len(names), p=w))]
            if a in ("inp", "wgt", "acc", "acc8"):
                self._load({"inp": MemType.INP, "wgt": MemType.WGT, "acc": MemType.ACC,
                            "acc8": MemType.ACC8}[a])
            elif a == "uop":
                self._random_uop_load()
            elif a in ("gemm", "alu"):
                self._loop(a == "gemm")
            elif a == "store":
                self._store()
            else:
                self._random_nop()

    def finish(self) -> None:
        r = self.rng
        self.finishing = True
        sync = r.random() < 0.6
        trailing = r.random() < 0.15 and not self.feat["roundtrip"]
        fin = Insn(Opcode.FINISH)
        if sync:
            self.feat["finish_sync"] += 1
            try:
                for src in (_ST, _LD):
                    if self.seq[src]:
                        self._acquire(_CP, src, self.seq[src], fin)
            except _Exhausted:
                pass
        # drain every queue into compute: NOPs for all but the last token, FINISH the last
        for q in (int(Queue.L2G), int(Queue.S2G)):
            _, _, _, cflag = _QSRC[q]
            n = len(self.pending[q])
            if getattr(fin, cflag):
                for _ in range(n - 1):
                    self._nop(_CP, pops=(cflag,))
            elif n:
                for _ in range(n - 1):
                    self._nop(_CP, pops=(cflag,))
                if r.random() < 0.5:
                    setattr(fin, cflag, 1)
                else:
                    self._nop(_CP, pops=(cflag,))
        self._emit(fin, _CP)
        self.feat["finish"] += 1
        if trailing:
            self.feat["finish_trailing"] += 1
            try:
                for _ in range(int(r.integers(1, 3))):
                    if r.random() < 0.6:
                        self._store()
                    else:
                        self._load(MemType.INP if r.random() < 0.5 else MemType.WGT)
            except _Exhausted:
                pass
        for q in (int(Queue.G2L), int(Queue.G2S)):
            src, dst, _, cflag = _QSRC[q]
            while self.pending[q]:
                self._nop(dst, pops=(cflag,))
        assert not any(self.pending), "tokens left after draining"

    # ------------------------------------------------------------------ image
    def image(self) -> RandomProgram:
        cfg, r = self.cfg, self.rng
        align = cfg.dram_alignment
        eb = {k: cfg.elem_bytes(m) for k, m in (("inp", MemType.INP), ("wgt", MemType.WGT),
                                                 ("acc", MemType.ACC), ("acc8", MemType.ACC8),
                                                 ("uop", MemType.UOP), ("out", MemType.OUT))}
        data: dict[str, np.ndarray] = {}
        for k in ("inp", "wgt", "acc8"):
            data[k] = r.integers(0, 256, self.n_elems[k] * eb[k], dtype=np.uint8)
            if r.random() < 0.2:  # extremes only
                data[k] = r.choice(np.array([0x80, 0x7F, 0xFF, 0x00, 0x01], np.uint8),
                                   data[k].size)
        aw = cfg.ACC_WIDTH
        n_acc_vals = self.n_elems["acc"] * cfg.BATCH * cfg.BLOCK_OUT
        lo_v, hi_v = -(1 << (aw - 1)), (1 << (aw - 1)) - 1
        u = r.random(n_acc_vals)
        vals = np.where(u < 0.55, r.integers(-1000, 1001, n_acc_vals),
                        r.integers(lo_v, hi_v + 1, n_acc_vals, dtype=np.int64))
        edges = np.array([lo_v, hi_v, 0, -1, 1, lo_v + 1, hi_v - 1], dtype=np.int64)
        vals = np.where(u > 0.9, r.choice(edges, n_acc_vals), vals)
        data["acc"] = vals.astype({16: "<i2", 32: "<i4"}[aw]).view(np.uint8)
        pool = self.pool or [(0, 0, 0)]
        p = np.array(pool, dtype=np.int64).reshape(-1, 3)
        data["uop"] = encode_uops(cfg, p[:, 0], p[:, 1], p[:, 2]).astype("<u4").view(np.uint8)
        data["out"] = r.integers(0, 256, self.out_elems * eb["out"], dtype=np.uint8)
        order = ["inp", "wgt", "acc", "acc8", "uop", "out"]
        r.shuffle(order)
        regions: dict[str, tuple[int, int]] = {}
        cur = align
        for k in order:
            # random gap: vary where regions sit relative to 4 KiB boundaries
            cur += align * int(r.integers(0, max(1, 4096 // align) + 1)) if r.random() < 0.5 \
                else 0
            regions[k] = (cur, int(data[k].size))
            cur += -(-data[k].size // align) * align
        insns = []
        for rec in self.prog:
            i = rec.insn
            if rec.patch is not None and not i.is_nop:
                name, off, mt = rec.patch
                if i.y_size == 0:
                    off = 0
                i.dram_base = regions[name][0] // cfg.elem_bytes(mt) + off
            insns.append(i)
        prog = encode_program(cfg, insns).reshape(-1)
        cur += align * int(r.integers(0, 4))
        regions["insn"] = (cur, int(prog.size))
        total = cur + prog.size + align * int(r.integers(1, 3))
        dram = r.integers(0, 256, total, dtype=np.uint8)  # untouched bytes are random too
        for k in order:
            a, n = regions[k]
            dram[a:a + n] = data[k]
        a, n = regions["insn"]
        dram[a:a + n] = prog
        return RandomProgram(cfg=cfg, seed=self.seed, dram=dram, insn_addr=a,
                             insn_count=len(insns), regions=regions, features=self.feat)


def generate(cfg: VTAConfig, seed: int, *, max_insns: int | None = None) -> RandomProgram:
    """A random legal, race-free program for ``cfg`` (deterministic per ``(cfg, seed)``).

    Args:
        cfg: any valid config (uses ACC8 loads only with ``cfg.ACC_8BIT``, ALU MUL only
            with ``cfg.ALU_MUL``).
        seed: non-negative integer.
        max_insns: approximate body length in instructions (default: random 8..63); the
            token drain, NOPs and FINISH are added on top.

    Returns:
        A :class:`RandomProgram`; ``dram`` is the image, the program is
        ``insn_count`` instructions at ``insn_addr``, and the whole image is the memory
        it may touch.
    """
    g = _Gen(cfg, seed, max_insns)
    try:
        g.body()
    except _Exhausted:
        pass
    g.finish()
    return g.image()


# ----------------------------------------------------------------------------- shrinking
def nopify(insn: Insn, cfg: VTAConfig) -> Insn:
    """A token-only NOP in the same module as ``insn`` with the same token flags (FINISH is
    returned unchanged)."""
    if insn.opcode == Opcode.FINISH:
        return insn
    flags = {f: getattr(insn, f) for f in ("pop_prev", "pop_next", "push_prev", "push_next")}
    mod = insn_module(insn.opcode, insn.memory_type)
    if mod == Module.STORE:
        return Insn(Opcode.STORE, memory_type=int(MemType.OUT), **flags)
    if mod == Module.LOAD:
        return Insn(Opcode.LOAD, memory_type=int(insn.memory_type), **flags)
    return Insn(Opcode.LOAD, memory_type=int(MemType.UOP), **flags)


def rebuild(cfg: VTAConfig, dram: np.ndarray, insn_addr: int, insns: Sequence[Insn]
            ) -> tuple[np.ndarray, int, int]:
    """A copy of ``dram`` with ``insns`` written at ``insn_addr`` (the new program must not
    be longer than the space there). Returns ``(dram, insn_addr, insn_count)``."""
    out = dram.copy()
    prog = encode_program(cfg, list(insns)).reshape(-1)
    out[insn_addr:insn_addr + prog.size] = prog
    return out, insn_addr, len(insns)


def _legal(cfg, dram, ia, n) -> bool:
    from vtaforge.runtime.verify import verify_program

    try:
        verify_program(cfg, dram, ia, n)
        race_check(cfg, dram, ia, n)
    except ProgramError:
        return False
    return True


def shrink(cfg: VTAConfig, dram: np.ndarray, insn_addr: int, insn_count: int,
           fails: Callable[[np.ndarray, int, int], bool], *, max_tests: int = 400
           ) -> tuple[np.ndarray, int, int]:
    """Delta-debug a failing program to a smaller one that still fails.

    Steps, each repeated to a fixpoint within ``max_tests`` calls of ``fails``: (1) replace
    chunks of instructions (halving the chunk size, ddmin style) by token-preserving NOPs
    (:func:`nopify`); (2) delete flag-free NOPs; (3) delete matched push/pop pairs.  A
    candidate is tried only if the static verifier and :func:`race_check` accept it (so
    the shrunk program is still legal and schedule-independent); the instruction stream
    stays at ``insn_addr`` (only shorter), the rest of the image is unchanged.

    Args:
        fails: ``fails(dram_copy, insn_addr, insn_count) -> bool``; must not keep
            ``dram_copy``'s modifications visible to the caller (it receives a copy).

    Returns:
        ``(dram, insn_addr, insn_count)`` of the smallest failing program found.
    """
    insns = program_insns(cfg, dram, insn_addr, insn_count)
    base = dram.copy()
    budget = [max_tests]

    def attempt(cand: list[Insn]) -> bool:
        if budget[0] <= 0:
            return False
        try:
            d, ia, n = rebuild(cfg, base, insn_addr, cand)
        except Exception:
            return False
        if not _legal(cfg, d, ia, n):
            return False
        budget[0] -= 1
        return bool(fails(d.copy(), ia, n))

    def is_nop(i: Insn) -> bool:
        return i.opcode in (Opcode.LOAD, Opcode.STORE) and i.x_size == 0

    # (1) NOP-ify chunks
    chunk = max(1, len(insns) // 2)
    while chunk >= 1 and budget[0] > 0:
        changed = False
        s = 0
        while s < len(insns):
            targets = [k for k in range(s, min(len(insns), s + chunk))
                       if not is_nop(insns[k]) and insns[k].opcode != Opcode.FINISH]
            if targets:
                cand = list(insns)
                for k in targets:
                    cand[k] = nopify(cand[k], cfg)
                if attempt(cand):
                    insns = cand
                    changed = True
            s += chunk
        if not changed:
            chunk //= 2
    # (2) delete flag-free NOPs, one at a time (cheap: usually all at once works)
    flagless = [k for k, i in enumerate(insns) if is_nop(i) and not
                (i.pop_prev or i.pop_next or i.push_prev or i.push_next)]
    if flagless:
        cand = [i for k, i in enumerate(insns) if k not in set(flagless)]
        if attempt(cand):
            insns = cand
        else:
            for k in reversed(flagless):
                cand = insns[:k] + insns[k + 1:]
                if attempt(cand):
                    insns = cand
    # (3) delete matched push/pop pairs (then the NOPs that become flag-free)
    progress = True
    while progress and budget[0] > 0:
        progress = False
        mods = [insn_module(i.opcode, i.memory_type) for i in insns]
        pushes: dict[int, list[tuple[int, str]]] = {q: [] for q in range(4)}
        pops: dict[int, list[tuple[int, str]]] = {q: [] for q in range(4)}
        for k, i in enumerate(insns):
            for flag, q in FLAG_QUEUES[mods[k]].items():
                if q is not None and getattr(i, flag):
                    (pushes if flag.startswith("push") else pops)[int(q)].append((k, flag))
        for q in range(4):
            for (kp, fp), (kc, fc) in reversed(list(zip(pushes[q], pops[q]))):
                cand = [Insn(**i.asdict()) for i in insns]
                setattr(cand[kp], fp, 0)
                setattr(cand[kc], fc, 0)
                cand = [i for i in cand if not (is_nop(i) and not (
                    i.pop_prev or i.pop_next or i.push_prev or i.push_next))]
                if attempt(cand):
                    insns = cand
                    progress = True
                    break
            if progress:
                break
    return rebuild(cfg, base, insn_addr, insns)

