"""The program builder (the JIT): instruction queue, dependency tokens, micro-op kernels.

Micro-op kernels (:class:`~.kernels.UopKernel`, :class:`~.kernels.KernelRecorder`) live in
:mod:`.kernels` and the capacity ordering of a launch in :mod:`.launch`.

A :class:`ProgramBuilder` turns calls such as :meth:`~ProgramBuilder.load_2d`,
:meth:`~ProgramBuilder.gemm` and :meth:`~ProgramBuilder.dep_push` into a VTA instruction
stream and micro-op kernels, and runs it on a :class:`~vtaforge.runtime.device.Device` at
:meth:`~ProgramBuilder.synchronize`.  It is the Python counterpart of upstream's runtime
(vta-anchor.md §5.3 micro-kernel JIT and cache, §5.4 instruction queue and dependency
insertion), with these rules of its own:

- Micro-op kernels are recorded once per *kernel key* (the caller's key plus everything
  that changes the code: mode, reset, ALU opcode, use_imm, imm), and placed in the UOP
  scratchpad when the program is lowered, per launch: the residency cache starts empty
  at every launch (scratchpad contents are undefined at the start of a run, BR-18) and
  is keyed by the micro-op *content*, so two kernels can never alias in the scratchpad.
  A kernel placed right after the previous micro-op LOAD's range (in the scratchpad and
  in the staging buffer) joins that LOAD (at most ``UOP_LOAD_MERGE_MAX`` micro-ops, never
  the launch's first LOAD) unless an instruction between the two reads micro-ops the
  kernel overwrites: each LOAD is a compute-unit instruction that waits for the read
  channel.
- A kernel longer than the UOP scratchpad is split into chunks run one after another
  when that is exact (GEMM always: it only accumulates; ALU when the loop nest runs
  once); otherwise it is rejected.  Never truncated.
- Dependency tokens are coalesced as upstream does: pops become flags of the next
  instruction of the popping module, pushes flags of the last instruction of the pushing
  module when free, otherwise a NOP (LOAD/STORE with ``x_size == 0``) carries them.
- Programs longer than ``max_insns_per_launch`` are split into several launches at points
  where no token queue owes a pop to a later push (every program-order balance >= 0)
  *and* no scratchpad entry written before the point is read after it (a backward
  liveness pass over the recorded stream).  Tokens outstanding at a split point (e.g.
  the "buffer free" credits of a double-buffered pipeline) are pushed again by NOPs at
  the start of the next launch, so splitting never changes results.
- Each launch honours the queue capacities: when program order would push more tokens
  into a queue than ``TOKEN_QUEUE_DEPTH`` holds before they are popped, the launch's
  instructions are re-interleaved across modules (each module's own order kept) so that
  they run one after another within the capacity; such a stream cannot deadlock for any
  ``INSN_QUEUE_DEPTH`` (see :func:`.launch.capacity_order`).  Program order is kept whenever it
  already fits (the deep-queue presets).

Errors: bad arguments raise :class:`BuilderError` (a ``ProgramError`` and a
``ValueError``) with one line naming the cause; a run that breaks the ISA rules raises
the device's ``ProgramError``.
"""

from __future__ import annotations

import bisect
import dataclasses
from dataclasses import dataclass
from typing import Any, Callable, Hashable, Sequence

import numpy as np

from ..hw.config import MemType, VTAConfig
from ..hw.isa import (FLAG_QUEUES, INSN_BYTES, LIMITS, AluOp, Insn, Module, Opcode, Queue, token_route,
                      encode_program)
from .device import Buffer, Device, ProgramError, RunResult
from .kernels import ALU, GEMM, BuilderError, KernelRecorder, UopKernel, _check_int, _module
from .launch import capacity_order as _capacity_order
from .launch import split_pushes as _split_pushes

__all__ = ["ProgramBuilder", "RecordedProgram"]


_MAX_16 = LIMITS.max("size")      # sram_base, y_size, x_size, x_stride: 16-bit fields
_MAX_PAD = LIMITS.max("pad")
_DRAIN_INSNS = 3  # worst case drain: store NOP, load NOP, FINISH
#: Micro-op kernels placed one after another (scratchpad and staging buffer) share one
#: micro-op LOAD of at most this many micro-ops: every LOAD is a compute-unit instruction
#: that waits for the read channel, so fewer LOADs mean fewer compute stalls (the effect
#: on the 1x1 convs: bench/RESULTS.md, 2026-12-02).
UOP_LOAD_MERGE_MAX = 256












# ------------------------------------------------------------------------- kernels




# ------------------------------------------------------------------------- records
@dataclass
class _Rec:
    """One recorded instruction: the Insn, the kernel chunk it runs (GEMM/ALU), the data
    buffer it touches (LOAD/STORE)."""

    insn: Insn
    chunk: bytes | None = None
    kernel: UopKernel | None = None
    chunk_off: int = 0
    buf: Buffer | None = None


def _flag_for(frm: Module, to: Module, push: bool) -> str:
    """The header flag for the token from ``frm`` to ``to``: the producer's push flag
    (``push``), else the consumer's pop flag (``hw/isa.py`` TOKEN_ROUTES)."""
    r = token_route(frm, to)
    return r.push_flag if push else r.pop_flag


@dataclass
class BuilderStats:
    """Counters of the builder itself (aggregated over a synchronize)."""

    launches: int = 0
    insns: int = 0
    uop_loads: int = 0
    uop_words_loaded: int = 0
    #: kernels loaded by extending the micro-op LOAD before them instead of a LOAD of their own
    uop_loads_merged: int = 0
    kernel_records: int = 0
    kernel_hits: int = 0
    oversized_launches: int = 0
    #: launches whose fetch order was changed to fit the token-queue capacity
    reordered_launches: int = 0
    #: launches that fit the token-queue capacity only with pushes moved onto NOPs
    #: (:func:`.launch.split_pushes`; one-token queues)
    split_launches: int = 0


def _add_result(total: RunResult, res: RunResult) -> None:
    """Add one launch's result into ``total`` (cycles summed, numeric stats summed)."""
    total.cycles += int(res.cycles or 0)
    for key, v in (res.stats or {}).items():
        if isinstance(v, (int, float, np.integer, np.floating)) and not isinstance(v, bool):
            total.stats[key] = total.stats.get(key, 0) + v
        else:
            total.stats[key] = v


class RecordedProgram:
    """A lowered, encoded program kept in device memory for relaunching
    (from :meth:`ProgramBuilder.record_program`).

    Attributes:
        launches: ``(insn_addr, insn_count, regions)`` per launch, run in order.
        counters: the builder counters of the recording (``launches``, ``insns``,
            ``uop_loads`` ...), reported by every :meth:`run` (``kernel_records`` and
            ``kernel_hits`` as 0: nothing is recorded again).
    """

    def __init__(self, device: Device, launches: list, buffers: list[Buffer],
                 counters: dict, timeout_cycles: int | None,
                 launch_steps: list[list[str] | None] | None = None):
        self.device = device
        self.launches = launches
        self.launch_steps = launch_steps or [None] * len(launches)
        self.buffers = buffers
        self.counters = dict(counters, kernel_records=0, kernel_hits=0)
        self.timeout_cycles = timeout_cycles

    @property
    def insn_count(self) -> int:
        return sum(n for _, n, _ in self.launches)

    def run(self) -> RunResult:
        """Run every launch in order; returns what :meth:`ProgramBuilder.synchronize` would
        (cycles and stats summed over launches plus the builder counters).

        Raises:
            ProgramError: from the device; BuilderError: the program was freed.
        """
        if self.buffers is None:
            raise BuilderError("this recorded program was freed")
        total = RunResult(cycles=0, stats={})
        for (addr, n, regions), names in zip(self.launches, self.launch_steps):
            try:
                res = self.device.run(addr, n, regions=regions,
                                      timeout_cycles=self.timeout_cycles)
            except ProgramError as e:
                raise _name_fault(e, names) from None
            _add_result(total, res)
        total.stats.update(self.counters)
        return total

    def free(self) -> None:
        """Free the program's instruction and micro-op buffers (idempotent)."""
        for b in self.buffers or ():
            self.device.free(b)
        self.buffers = None


def _name_fault(err: ProgramError, names: list[str] | None) -> ProgramError:
    """``err`` of a fused launch with the step it is about named first: the owner (in
    ``names``, one step name per instruction of the launch) of the instruction
    ``err.insn_index``, else (no index, or one outside the launch) every step of the
    launch.  The result is of ``err``'s class with all its attributes (``insn_index``
    included).  ``names`` None (an unfused launch): ``err`` unchanged."""
    if not names:
        return err
    i = err.insn_index
    steps = list(dict.fromkeys(names))
    where = (f"fused launch of {len(steps)} steps, {steps[0]!r} ... {steps[-1]!r}"
             if len(steps) > 2 else f"fused launch of {', '.join(map(repr, steps))}")
    if i is not None and 0 <= i < len(names):
        text = f"step {names[i]!r} ({where}): {err}"
    else:
        text = f"one of the steps {', '.join(map(repr, steps))} ({where}): {err}"
    return err.with_message(text)


def _launch_head(start_bal: Sequence[int]) -> list[Insn]:
    """The NOPs that open a launch by pushing again the tokens outstanding at its start
    (``start_bal``, per queue: pushed by an earlier launch, popped in this one)."""
    q = [int(v) for v in start_bal]
    out = [Insn(Opcode.LOAD, memory_type=int(MemType.INP), push_next=1) for _ in range(max(q[Queue.L2G], 0))]
    for i in range(max(q[Queue.G2L], q[Queue.G2S], 0)):
        out.append(Insn(Opcode.LOAD, memory_type=int(MemType.UOP),
                        push_prev=int(i < q[Queue.G2L]), push_next=int(i < q[Queue.G2S])))
    out += [Insn(Opcode.STORE, memory_type=int(MemType.OUT), push_prev=1) for _ in range(max(q[Queue.S2G], 0))]
    return out


def _launch_tail(out: list[Insn], last_mod: dict, end_bal: Sequence[int]) -> None:
    """Close a launch in place: consume the tokens outstanding at its end (``end_bal``),
    the drain (store->compute and load->compute pushes on the last instruction of each
    module, ``last_mod``, or on NOPs, popped by compute) and FINISH."""
    # Tokens outstanding at the end must be consumed (a launch ends with every queue
    # empty): load pops compute->load credits, store pops compute->store ones.
    for i in range(max(0, int(end_bal[Queue.G2L]))):
        last_mod[Module.LOAD] = len(out)
        out.append(Insn(Opcode.LOAD, memory_type=int(MemType.INP), pop_next=1))
    for i in range(max(0, int(end_bal[Queue.G2S]))):
        last_mod[Module.STORE] = len(out)
        out.append(Insn(Opcode.STORE, memory_type=int(MemType.OUT), pop_prev=1))
    # Drain: store->compute and load->compute pushes, compute pops them, FINISH.
    for frm in (Module.STORE, Module.LOAD):
        flag = _flag_for(frm, Module.COMPUTE, push=True)
        i = last_mod.get(frm)
        if i is not None and not getattr(out[i], flag):
            out[i] = dataclasses.replace(out[i], **{flag: 1})
        else:
            out.append(Insn(Opcode.STORE, memory_type=int(MemType.OUT), **{flag: 1})
                       if frm == Module.STORE else
                       Insn(Opcode.LOAD, memory_type=int(MemType.INP), **{flag: 1}))
    # Outstanding store->compute / load->compute tokens (pushed, never popped) would
    # let FINISH pass early: compute pops every one of them before FINISH.
    extra_s2g = max(0, int(end_bal[Queue.S2G]))
    extra_l2g = max(0, int(end_bal[Queue.L2G]))
    for i in range(max(extra_s2g, extra_l2g)):
        out.append(Insn(Opcode.LOAD, memory_type=int(MemType.UOP),
                        pop_next=int(i < extra_s2g), pop_prev=int(i < extra_l2g)))
    out.append(Insn(Opcode.FINISH, pop_prev=1, pop_next=1))


class ProgramBuilder:
    """Builds VTA programs on a device and runs them (vta-anchor.md §5.3–5.4).

    Args:
        device: the :class:`Device` to run on (its ``config`` drives every layout).
        max_insns_per_launch: soft limit on instructions per launch (drain and FINISH
            included); longer programs are split at safe points (see module docstring).
            A program with no safe point within the limit runs in one larger launch and
            counts ``oversized_launches``.
        debug: keep each launch's encoded program (:attr:`last_program`,
            :attr:`last_programs`) and micro-ops (:attr:`last_uops`).
        verify: run the static verifier (``runtime.verify.verify_program``) before each
            launch when that module exists, unless the device runs the same checks
            itself and stops at the first fault (``device.checks_in_run``, e.g. fsim).
        check_keys: re-record a kernel on every cache hit and raise if its code differs
            from the cached one (catches a caller's key that misses an attribute; costs a
            re-record per call).
        timeout_cycles: passed to :meth:`Device.run`.

    Units: ``sram_base``/``elem_offset``/sizes/strides are elements of the memory type.
    """

    def __init__(self, device: Device, *, max_insns_per_launch: int = 65536,
                 debug: bool = False, verify: bool = True, check_keys: bool = False,
                 timeout_cycles: int | None = None):
        if not isinstance(device, Device):
            raise BuilderError(f"device must be a Device, got {type(device).__name__}")
        self.device = device
        self.cfg: VTAConfig = device.config
        self.max_insns_per_launch = _check_int("max_insns_per_launch", max_insns_per_launch,
                                               _DRAIN_INSNS + 2, 1 << 31)
        self.debug = debug
        self.verify = verify
        self.check_keys = check_keys
        self.timeout_cycles = timeout_cycles
        self.uop_merge_max = min(UOP_LOAD_MERGE_MAX, self.cfg.UOP_DEPTH)
        self._kernels: dict[tuple, UopKernel] = {}
        self._insn_buf: Buffer | None = None
        self._uop_buf: Buffer | None = None
        self.last_program: np.ndarray | None = None
        self.last_programs: list[np.ndarray] = []
        self.last_uops: list[np.ndarray] = []
        #: per launch of the last lowering: the step name of each instruction (fused steps,
        #: :meth:`begin_step`), or None when no step was named
        self.last_launch_steps: list[list[str] | None] = []
        self.stats = BuilderStats()
        self._reset_program()

    # ------------------------------------------------------------------ state
    def _reset_program(self) -> None:
        self._recs: list[_Rec] = []
        self._pending: dict[Module, set[str]] = {m: set() for m in Module}
        self._last: dict[Module, int] = {}
        # fused steps (begin_step): (first record, step name) per step; byte spans the
        # current step stores; the previous step's stored spans while its "stores done"
        # token (t2) is still owed to the load module; load-module loads held back behind
        # that pop while loads that do not read those bytes go ahead of them
        self._marks: list[tuple[int, str]] = []
        self._stored: list[tuple[int, int]] = []
        self._raw: list[tuple[int, int]] | None = None
        self._deferred: list[tuple[Insn, Buffer, int]] = []

    @property
    def pending_insns(self) -> int:
        """Instructions recorded since the last synchronize (micro-op loads, drain and
        FINISH not included)."""
        return len(self._recs)

    def close(self) -> None:
        """Free the builder's instruction and micro-op staging buffers."""
        for b in (self._insn_buf, self._uop_buf):
            if b is not None:
                self.device.free(b)
        self._insn_buf = self._uop_buf = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def discard(self) -> None:
        """Drop everything recorded since the last synchronize (kernels stay cached)."""
        self._reset_program()

    # ------------------------------------------------------------------ emit
    def _emit(self, insn: Insn, **extra) -> int:
        mod = insn.module
        pend = self._pending[mod]
        if pend:
            for f in pend:
                setattr(insn, f, 1)
            pend.clear()
        self._recs.append(_Rec(insn, **extra))
        idx = len(self._recs) - 1
        self._last[mod] = idx
        return idx

    def _nop(self, mod: Module) -> int:
        if mod == Module.LOAD:
            insn = Insn(Opcode.LOAD, memory_type=MemType.INP)
        elif mod == Module.COMPUTE:
            insn = Insn(Opcode.LOAD, memory_type=MemType.UOP)
        else:
            insn = Insn(Opcode.STORE, memory_type=MemType.OUT)
        return self._emit(insn)

    # ------------------------------------------------------------------ data movement
    def _check_dma(self, what: str, buf: Buffer, mem: MemType, elem_offset: int, y_size: int,
                   x_size: int, x_stride: int) -> int:
        if not isinstance(buf, Buffer):
            raise BuilderError(f"{what}: buf must be a Buffer, got {type(buf).__name__}")
        eb = self.cfg.elem_bytes(mem)
        if buf.addr % eb:
            raise BuilderError(f"{what}: buffer at 0x{buf.addr:x} is not aligned to the "
                               f"{eb}-byte {mem.name} element")
        elem_offset = _check_int(f"{what} elem_offset", elem_offset, 0, (1 << 32) - 1)
        y_size = _check_int(f"{what} y_size", y_size, 1, _MAX_16)
        x_size = _check_int(f"{what} x_size", x_size, 1, _MAX_16)
        x_stride = _check_int(f"{what} x_stride", x_stride, 0, _MAX_16)
        last = elem_offset + (y_size - 1) * x_stride + x_size
        cap = buf.nbytes // eb
        if last > cap:
            raise BuilderError(
                f"{what}: elements [{elem_offset}, {last}) of {mem.name} ({eb} B each) exceed "
                f"the buffer at 0x{buf.addr:x} ({buf.nbytes} bytes = {cap} elements)")
        base = buf.addr // eb + elem_offset
        if base >= 1 << 32:
            raise BuilderError(f"{what}: dram_base {base} does not fit 32 bits")
        return base

    def load_2d(self, buf: Buffer, elem_offset: int, mem: MemType | int, sram_base: int,
                y_size: int, x_size: int, x_stride: int,
                pad: Sequence[int] = (0, 0, 0, 0)) -> None:
        """Load a 2-D block of ``mem`` elements from ``buf`` into a scratchpad.

        Element ``(r, c)`` comes from element ``elem_offset + r * x_stride + c`` of ``buf``;
        the scratchpad receives ``(y0 + y_size + y1)`` rows of ``(x0 + x_size + x1)``
        elements at ``sram_base`` with zero padding ``pad = (y0, y1, x0, x1)``.  INP and WGT
        loads run on the load module; ACC and ACC8 loads on the compute module.

        Raises:
            BuilderError: unknown or unloadable memory type (OUT, UOP: the builder owns
                micro-op loads), ACC8 without ``ACC_8BIT``, pads outside 0..15, sizes outside
                1..65535, stride outside 0..65535, DMA outside ``buf``, scratchpad range past
                the buffer depth.
        """
        try:
            mem = MemType(int(mem))
        except ValueError:
            raise BuilderError(f"memory type {mem!r} is unknown; allowed: WGT, INP, ACC, ACC8"
                               ) from None
        if mem not in (MemType.WGT, MemType.INP, MemType.ACC, MemType.ACC8):
            raise BuilderError(f"load_2d of memory type {mem.name} is not allowed; allowed: "
                               f"WGT, INP, ACC, ACC8 (micro-ops are loaded by the builder, "
                               f"OUT is store-only)")
        if mem == MemType.ACC8 and not self.cfg.ACC_8BIT:
            raise BuilderError("load_2d of ACC8 needs a config with ACC_8BIT enabled")
        if len(pad) != 4:
            raise BuilderError(f"pad must be (y0, y1, x0, x1), got {pad!r}")
        y0, y1, x0, x1 = (_check_int(f"load_2d pad {n}", p, 0, _MAX_PAD)
                          for n, p in zip(("y0", "y1", "x0", "x1"), pad))
        base = self._check_dma("load_2d", buf, mem, elem_offset, y_size, x_size, x_stride)
        sram_base = _check_int("load_2d sram_base", sram_base, 0, _MAX_16)
        n = (y0 + y_size + y1) * (x0 + x_size + x1)
        depth = self.cfg.depth(mem)
        if sram_base + n > depth:
            raise BuilderError(
                f"load_2d: scratchpad range [{sram_base}, {sram_base + n}) exceeds the "
                f"{mem.name} scratchpad ({depth} entries)")
        insn = Insn(Opcode.LOAD, memory_type=int(mem), sram_base=sram_base,
                    dram_base=base, y_size=y_size, x_size=x_size, x_stride=x_stride,
                    y_pad_0=y0, y_pad_1=y1, x_pad_0=x0, x_pad_1=x1)
        if self._raw is not None and mem in (MemType.INP, MemType.WGT):
            self._fused_load(insn, buf, n)
            return
        self._emit(insn, buf=buf)

    def store_2d(self, sram_base: int, buf: Buffer, elem_offset: int, y_size: int,
                 x_size: int, x_stride: int) -> None:
        """Store ``y_size`` rows of ``x_size`` OUT elements from accumulator index
        ``sram_base`` (row-major) to ``buf`` at element ``elem_offset + r * x_stride + c``
        (OUT elements: BATCH × BLOCK_OUT × OUT_WIDTH bits, the low bits of each
        accumulator lane).

        Raises:
            BuilderError: sizes/stride out of range, DMA outside ``buf``, scratchpad range
                past the accumulator depth.
        """
        base = self._check_dma("store_2d", buf, MemType.OUT, elem_offset, y_size, x_size,
                               x_stride)
        sram_base = _check_int("store_2d sram_base", sram_base, 0, _MAX_16)
        depth = self.cfg.depth(MemType.OUT)
        if sram_base + y_size * x_size > depth:
            raise BuilderError(f"store_2d: scratchpad range [{sram_base}, "
                               f"{sram_base + y_size * x_size}) exceeds the OUT view "
                               f"({depth} entries)")
        self._emit(Insn(Opcode.STORE, memory_type=int(MemType.OUT), sram_base=sram_base,
                        dram_base=base, y_size=y_size, x_size=x_size, x_stride=x_stride),
                   buf=buf)
        eb = self.cfg.elem_bytes(MemType.OUT)
        self._stored.append((base * eb, (base + (y_size - 1) * x_stride + x_size) * eb))

    # ------------------------------------------------------------------ kernels
    def kernel(self, key: Hashable, record_fn: Callable[[KernelRecorder], Any] | None,
               mode: str, *, reset: bool = False, alu_op: AluOp | int = 0,
               use_imm: bool = False, imm: int = 0, depthwise: bool = False) -> UopKernel:
        """Record (first time) or fetch (cached) the kernel for ``key``; emits nothing.

        The cache key is ``(key, mode, reset, alu_op, use_imm, imm)`` (and, for a depthwise
        GEMM, ``depthwise``: docs/isa.md "Depthwise GEMM", a ``DEPTHWISE_TAPS`` config only,
        whose micro-ops read ``DEPTHWISE_TAPS`` INP entries from ``src``): everything that
        changes the instruction besides the loop nest and micro-ops, which ``record_fn``
        derives from ``key``.  ``key`` must therefore determine ``record_fn``'s output
        (include shapes, strides, tile sizes, virtual thread...); with ``check_keys=True``
        the builder re-records on every hit and raises if the code differs.

        Raises:
            BuilderError: unknown mode/opcode, MUL without ``ALU_MUL``, REQ without
                ``ALU_REQUANT``, imm outside int16, a malformed loop nest, indices outside
                the scratchpads, ``depthwise`` on an ALU kernel or a config without
                ``DEPTHWISE_TAPS``, an unhashable key, a missing ``record_fn`` for a key never
                recorded, a kernel that cannot fit.
        """
        if mode not in (GEMM, ALU):
            raise BuilderError(f"kernel mode {mode!r} is unknown; allowed: 'gemm', 'alu'")
        if mode == ALU:
            try:
                alu_op = AluOp(int(alu_op))
            except ValueError:
                raise BuilderError(f"ALU opcode {alu_op!r} is unknown; allowed: "
                                   f"{', '.join(o.name for o in AluOp)}") from None
            if alu_op == AluOp.MUL and not self.cfg.ALU_MUL:
                raise BuilderError("ALU MUL needs a config with ALU_MUL enabled")
            if alu_op == AluOp.REQ and not self.cfg.ALU_REQUANT:
                raise BuilderError("ALU REQ needs a config with ALU_REQUANT enabled")
            # REQ keeps its parameters in the immediate field with a tensor operand too
            imm = (_check_int("imm", imm, LIMITS.imm_min, LIMITS.imm_max)
                   if use_imm or alu_op == AluOp.REQ else 0)
            alu_op, use_imm = int(alu_op), bool(use_imm)
        else:
            alu_op, use_imm, imm = 0, False, 0
        if depthwise and (mode != GEMM or not self.cfg.DEPTHWISE_TAPS):
            raise BuilderError("a depthwise kernel must be a GEMM on a config with "
                               "DEPTHWISE_TAPS > 0")
        full = (key, mode, bool(reset), alu_op, use_imm, imm) + (
            ("depthwise",) if depthwise else ())
        try:
            hit = self._kernels.get(full)
        except TypeError:
            raise BuilderError(f"kernel key {key!r} is not hashable") from None
        if hit is not None:
            self.stats.kernel_hits += 1
            if self.check_keys and record_fn is not None:
                again = self._record(full, record_fn)
                if not again.same_code(hit):
                    raise BuilderError(f"kernel key {key!r} was reused for different micro-ops "
                                       f"or loops: the key must include every attribute that "
                                       f"changes the kernel")
            return hit
        if record_fn is None:
            raise BuilderError(f"kernel {key!r} ({mode}) was never recorded and no record_fn "
                               f"was given")
        k = self._record(full, record_fn)
        self._kernels[full] = k
        self.stats.kernel_records += 1
        return k

    def _record(self, full: tuple, record_fn) -> UopKernel:
        rec = KernelRecorder(self.cfg, full[1])
        record_fn(rec)
        return rec._finish(full, full[2], full[3], full[4], full[5],
                           depthwise=len(full) > 6)

    def run_kernel(self, k: UopKernel) -> None:
        """Emit the GEMM/ALU instruction(s) running kernel ``k`` (one per chunk)."""
        it = list(k.loops) + [(1, 0, 0, 0)] * (2 - len(k.loops))
        (eo, do, so, wo), (ei, di, si, wi) = it
        opcode = Opcode.GEMM if k.mode == GEMM else Opcode.ALU
        depth = self.cfg.UOP_DEPTH
        for c, chunk in enumerate(k.chunks):
            insn = Insn(opcode, reset=int(k.reset), iter_out=eo, iter_in=ei,
                        dst_factor_out=do, dst_factor_in=di, src_factor_out=so,
                        src_factor_in=si, alu_opcode=k.alu_opcode, use_imm=int(k.use_imm),
                        imm=k.imm)
            if opcode == Opcode.GEMM:
                insn.wgt_factor_out, insn.wgt_factor_in = wo, wi
                insn.depthwise = int(k.depthwise)
            self._emit(insn, chunk=chunk, kernel=k, chunk_off=c * depth)

    def gemm(self, key: Hashable, record_fn: Callable[[KernelRecorder], Any] | None = None,
             reset: bool = False, depthwise: bool = False) -> UopKernel:
        """Record-or-fetch a GEMM kernel and emit it: for every loop iteration and micro-op,
        ``acc[dst] += inp[src] · wgt[wgt]ᵀ`` (or ``acc[dst] = 0`` with ``reset``); with
        ``depthwise`` the depthwise GEMM (docs/isa.md)."""
        k = self.kernel(key, record_fn, GEMM, reset=reset, depthwise=depthwise)
        self.run_kernel(k)
        return k

    def alu(self, key: Hashable, record_fn: Callable[[KernelRecorder], Any] | None,
            op: AluOp | int, use_imm: bool = False, imm: int = 0,
            reset: bool = False) -> UopKernel:
        """Record-or-fetch an ALU kernel and emit it: ``acc[dst] = op(acc[dst], imm if
        use_imm else acc[src])`` lane-wise (or ``acc[dst] = 0`` with ``reset``)."""
        k = self.kernel(key, record_fn, ALU, reset=reset, alu_op=op, use_imm=use_imm, imm=imm)
        self.run_kernel(k)
        return k

    # ------------------------------------------------------------------ tokens
    def dep_pop(self, from_module: Module | int, to_module: Module | int) -> None:
        """``to_module`` waits for a token from ``from_module``: a pop flag on the next
        instruction of ``to_module`` (a NOP first if that flag is already pending).

        Raises:
            BuilderError: load↔store (no such queue), same module, unknown module.
        """
        frm, to = self._pair(from_module, to_module)
        if to == Module.LOAD and self._raw is not None:
            self._release_loads()
        flag = _flag_for(frm, to, push=False)
        pend = self._pending[to]
        if flag in pend:
            self._nop(to)  # absorbs the pending pops
        self._pending[to].add(flag)

    def dep_push(self, from_module: Module | int, to_module: Module | int) -> None:
        """``from_module`` sends a token to ``to_module`` after its work so far: a push flag
        on its last instruction when free, else on a NOP.

        Raises:
            BuilderError: load↔store (no such queue), same module, unknown module.
        """
        frm, to = self._pair(from_module, to_module)
        if frm == Module.LOAD and self._raw is not None:
            self._release_loads()
        flag = _flag_for(frm, to, push=True)
        if self._pending[frm]:
            self._nop(frm)
        idx = self._last.get(frm)
        if idx is not None and not getattr(self._recs[idx].insn, flag):
            setattr(self._recs[idx].insn, flag, 1)
        else:
            idx = self._nop(frm)
            setattr(self._recs[idx].insn, flag, 1)

    @staticmethod
    def _pair(a, b) -> tuple[Module, Module]:
        frm, to = _module(a), _module(b)
        if frm == to:
            raise BuilderError(f"dependency from {frm.name} to itself: no such token queue")
        if {frm, to} == {Module.LOAD, Module.STORE}:
            raise BuilderError(f"dependency {frm.name} -> {to.name}: there is no load<->store "
                               f"token queue (go through compute)")
        return frm, to

    # ------------------------------------------------------------------ fused steps
    def begin_step(self, name: str) -> None:
        """Start recording the step ``name`` of a fused launch (several VTA steps, one
        FINISH): the steps recorded since the last synchronize run in this program too.

        Between the previous step (A) and this one (B) the builder closes A's token state
        (tokens A leaves outstanding are popped, as a launch's drain does) and places a
        barrier of tokens:

        - t1: compute pushes compute->load after A's last compute instruction; B's first
          load-module instruction pops it, so B's INP/WGT loads never overwrite what A's
          GEMMs still read, and issue during A's tail (its last ALU work and stores);
        - compute pops "A's loads done" (load->compute) and "A's stores done"
          (store->compute) on a NOP that pushes t2 (compute->load) and t3
          (compute->store): B's compute instructions (ACC/ACC8/micro-op loads included)
          wait for A's stores, so B never overwrites an accumulator entry A still stores
          and reads what A stored; B's first store pops t3;
        - the load module pops t2 before B's first load whose DRAM bytes overlap A's
          stores, and before B's own first compute->load pop or load->compute push.  B's
          INP/WGT loads that read no byte A stores (weights, constants, older tensors) and
          write no scratchpad entry of a load held back go ahead of those loads (their
          order among themselves kept): the next step's first weight loads run during
          this step's tail.

        Every DRAM read-after-write and write-after-read between the steps is ordered by
        these tokens (checked with :func:`.race.race_check` in the tests), and the token
        pattern is deadlock-free: each pop waits only for instructions earlier in its
        producer's order.  The first call (nothing recorded) only names the step.

        Raises:
            BuilderError: ``name`` not a str; the previous step pops more tokens of a
                queue than were pushed (it would deadlock).
        """
        if not isinstance(name, str):
            raise BuilderError(f"step name must be a str, got {type(name).__name__}")
        if self._recs:
            self._step_barrier()
        self._marks.append((len(self._recs), name))

    def _step_barrier(self) -> None:
        """The token barrier between two fused steps (see :meth:`begin_step`)."""
        if self._raw is not None:
            self._release_loads()
        for mod in Module:              # pops the step left pending: on NOPs of its own
            if self._pending[mod]:
                self._nop(mod)
        bal = self._prefix()[-1]
        neg = np.flatnonzero(bal < 0)
        if neg.size:
            q = Queue(int(neg[0]))
            name = self._marks[-1][1] if self._marks else "?"
            raise BuilderError(f"step {name!r}: token queue {q.name.lower()} has "
                               f"{int(-bal[q])} more pop(s) than pushes: the program "
                               f"would deadlock")
        ld, cp, st = Module.LOAD, Module.COMPUTE, Module.STORE
        self.dep_push(cp, ld)                           # t1: A's compute is done
        for _ in range(int(bal[Queue.G2L])):            # A's outstanding tokens
            self.dep_pop(cp, ld)
        for _ in range(int(bal[Queue.G2S])):
            self.dep_pop(cp, st)
        for _ in range(int(bal[Queue.L2G])):
            self.dep_pop(ld, cp)
        for _ in range(int(bal[Queue.S2G])):
            self.dep_pop(st, cp)
        self.dep_push(ld, cp)                           # A's loads done
        self.dep_push(st, cp)                           # A's stores done
        self.dep_pop(cp, ld)                            # t1, on B's first load
        self.dep_pop(ld, cp)
        self.dep_pop(st, cp)
        self.dep_push(cp, ld)                           # t2
        self.dep_push(cp, st)                           # t3
        self.dep_pop(cp, st)                            # t3, on B's first store
        self._raw = self._stored
        self._stored = []
        self._deferred = []

    def _fused_load(self, insn: Insn, buf: Buffer, n: int) -> None:
        """Emit an INP/WGT load of ``n`` scratchpad entries while t2 is owed: held back
        when it reads bytes the previous step stores, emitted at once (ahead of the held
        ones) otherwise, unless it writes a scratchpad entry a held load writes."""
        eb = self.cfg.elem_bytes(MemType(insn.memory_type))
        lo = insn.dram_base * eb
        hi = (insn.dram_base + (insn.y_size - 1) * insn.x_stride + insn.x_size) * eb
        if any(a < hi and lo < b for a, b in self._raw):
            self._deferred.append((insn, buf, n))
            return
        b0, b1 = insn.sram_base, insn.sram_base + n
        if any(d.memory_type == insn.memory_type and d.sram_base < b1 and b0 < d.sram_base + m
               for d, _, m in self._deferred):
            self._release_loads()
        self._emit(insn, buf=buf)

    def _release_loads(self) -> None:
        """Pop t2 on the load module and emit the loads held back behind it."""
        held, self._deferred, self._raw = self._deferred, [], None
        self.dep_pop(Module.COMPUTE, Module.LOAD)
        for insn, buf, _ in held:
            self._emit(insn, buf=buf)

    # ------------------------------------------------------------------ lowering
    def _lower(self, s: int, e: int, start_bal: Sequence[int] = (0, 0, 0, 0),
               end_bal: Sequence[int] = (0, 0, 0, 0)
               ) -> tuple[list[Insn], list[int], list[bytes]]:
        """Lower records [s, e) into one launch: micro-op placement and loads, drain, FINISH.

        ``start_bal``: tokens outstanding in each queue at ``s`` (pushed earlier, popped
        later); they are pushed again by NOPs at the start of the launch.  ``end_bal``: the
        tokens outstanding at ``e``; compute pops every store→compute and load→compute one
        before FINISH so that FINISH cannot pass a store or load still running.

        Returns the instruction list, the indices of micro-op LOADs (their ``dram_base``
        holds a staging offset in micro-ops, patched at launch), and the staging chunks.
        """
        depth = self.cfg.UOP_DEPTH
        resident: dict[bytes, int] = {}      # content -> sram begin
        spans: dict[bytes, tuple[int, int]] = {}
        sram_end = 0
        staged: dict[bytes, int] = {}        # content -> staging offset (micro-ops)
        stage_list: list[bytes] = []
        stage_len = 0
        out: list[Insn] = []
        uop_loads: list[int] = []
        # the last micro-op LOAD and the micro-op ranges run since it: a kernel placed
        # right after that load's range (scratchpad and staging) joins it when none of
        # those instructions reads what the kernel overwrites (UOP_LOAD_MERGE_MAX words);
        # never the launch's first LOAD, so the first kernel starts as soon as it can
        merge_at: int | None = None
        since: set[tuple[int, int]] = set()    # distinct ranges: bounded by the kernels
        last_mod: dict[Module, int] = {}
        out.extend(_launch_head(start_bal))
        for r in self._recs[s:e]:
            ch = r.chunk
            if ch is not None:
                n = len(ch) // 4
                bgn = resident.get(ch)
                if bgn is None:
                    if sram_end + n > depth:
                        sram_end = 0
                    bgn, end = sram_end, sram_end + n
                    for other, (ob, oe) in list(spans.items()):
                        if ob < end and bgn < oe:
                            del spans[other]
                            del resident[other]
                    resident[ch] = bgn
                    spans[ch] = (bgn, end)
                    sram_end = end
                    off = staged.get(ch)
                    if off is None:
                        off = stage_len
                        staged[ch] = off
                        stage_list.append(ch)
                        stage_len += n
                    prev = out[merge_at] if merge_at is not None else None
                    if (prev is not None and len(uop_loads) > 1
                            and prev.sram_base + prev.x_size == bgn
                            and prev.dram_base + prev.x_size == off
                            and prev.x_size + n <= self.uop_merge_max
                            and all(oe <= bgn or end <= ob for ob, oe in since)):
                        out[merge_at] = dataclasses.replace(prev, x_size=prev.x_size + n,
                                                            x_stride=prev.x_size + n)
                        self.stats.uop_loads_merged += 1
                    else:
                        merge_at = len(out)
                        since = set()
                        uop_loads.append(len(out))
                        out.append(Insn(Opcode.LOAD, memory_type=int(MemType.UOP),
                                        sram_base=bgn, dram_base=off, y_size=1, x_size=n,
                                        x_stride=n))
                        self.stats.uop_loads += 1
                    self.stats.uop_words_loaded += n
                insn = r.insn
                insn.uop_bgn, insn.uop_end = bgn, bgn + n
                since.add((bgn, bgn + n))
            last_mod[r.insn.module] = len(out)
            out.append(r.insn)
        _launch_tail(out, last_mod, end_bal)
        cap = self.cfg.TOKEN_QUEUE_DEPTH
        try:
            order = _capacity_order(out, cap)
        except BuilderError:
            # shallow queues: an instruction that pops one queue and pushes another can
            # tie two modules together; with its pushes on NOPs right behind it the launch
            # may fit (raises, as before, when it still does not)
            out, where = _split_pushes(out)
            uop_loads = [where[j] for j in uop_loads]
            order = _capacity_order(out, cap)
            self.stats.split_launches += 1
        if order is not None:
            pos = {old: new for new, old in enumerate(order)}
            out = [out[j] for j in order]
            uop_loads = sorted(pos[j] for j in uop_loads)
            self.stats.reordered_launches += 1
        return out, uop_loads, stage_list

    # ------------------------------------------------------------------ splitting
    def _queue_deltas(self) -> np.ndarray:
        """(N, 4) token deltas per recorded instruction (push +1, pop -1 per queue)."""
        d = np.zeros((len(self._recs), 4), dtype=np.int64)
        for i, r in enumerate(self._recs):
            insn = r.insn
            for flag, q in FLAG_QUEUES[insn.module].items():
                if q is not None and getattr(insn, flag):
                    d[i, q] += 1 if flag.startswith("push") else -1
        return d

    def _prefix(self) -> np.ndarray:
        """(N+1, 4) tokens outstanding per queue before each recorded instruction (program
        order: pushes so far minus pops so far)."""
        return np.vstack([np.zeros((1, 4), np.int64), np.cumsum(self._queue_deltas(), 0)])

    def _live_clear(self) -> np.ndarray:
        """Boolean (N+1,): True at point p when no scratchpad entry read at or after p was
        written before p (a launch may start at p).  Backward liveness over INP, WGT, ACC."""
        cfg = self.cfg
        live = {MemType.INP: np.zeros(cfg.INP_DEPTH, bool),
                MemType.WGT: np.zeros(cfg.WGT_DEPTH, bool),
                MemType.ACC: np.zeros(cfg.ACC_DEPTH, bool)}
        n = len(self._recs)
        ok = np.zeros(n + 1, dtype=bool)
        ok[n] = True
        for i in range(n - 1, -1, -1):
            r = self._recs[i]
            insn = r.insn
            op = insn.opcode
            if op == Opcode.LOAD and insn.x_size:
                mt = MemType(insn.memory_type)
                if mt != MemType.UOP:
                    tgt = live[MemType.ACC if mt == MemType.ACC8 else mt]
                    cnt = ((insn.y_pad_0 + insn.y_size + insn.y_pad_1)
                           * (insn.x_pad_0 + insn.x_size + insn.x_pad_1))
                    tgt[insn.sram_base:insn.sram_base + cnt] = False
            elif op == Opcode.STORE and insn.x_size:
                live[MemType.ACC][insn.sram_base:insn.sram_base + insn.y_size * insn.x_size] = True
            elif r.kernel is not None:
                k = r.kernel
                sl = slice(r.chunk_off, r.chunk_off + len(r.chunk) // 4)
                it = list(k.loops) + [(1, 0, 0, 0)] * (2 - len(k.loops))
                (eo, do, so, wo), (ei, di, si, wi) = it
                ii = np.arange(eo)[:, None, None]
                jj = np.arange(ei)[None, :, None]
                dst = (k.dst[sl][None, None, :] + ii * do + jj * di).reshape(-1)
                live[MemType.ACC][dst] = False
                # a clearing REQ (reset on ALU REQ) reads dst and src like REQ: no reset
                if not k.reset or (k.mode == ALU and k.alu_opcode == AluOp.REQ):
                    src = (k.src[sl][None, None, :] + ii * so + jj * si).reshape(-1)
                    live[MemType.ACC][dst] = True
                    if k.mode == GEMM:
                        if k.depthwise:     # the DEPTHWISE_TAPS entries from src on
                            src = (src[:, None] + np.arange(cfg.DEPTHWISE_TAPS)).reshape(-1)
                        wgt = (k.wgt[sl][None, None, :] + ii * wo + jj * wi).reshape(-1)
                        live[MemType.INP][src] = True
                        live[MemType.WGT][wgt] = True
                    elif not k.use_imm:
                        live[MemType.ACC][src] = True
            ok[i] = not (live[MemType.INP].any() or live[MemType.WGT].any()
                         or live[MemType.ACC].any())
        return ok

    def _segments(self, prefix: np.ndarray) -> list[tuple[int, int]]:
        n = len(self._recs)
        limit = self.max_insns_per_launch
        # Quick exit: even if every GEMM/ALU needed a micro-op load it fits.
        n_k = sum(1 for r in self._recs if r.chunk is not None)
        if n + n_k + _DRAIN_INSNS + 8 <= limit:
            return [(0, n)]
        cand = (prefix >= 0).all(axis=1) & self._live_clear()
        segs = []
        s = 0
        while s < n:
            # Walk forward counting lowered instructions (micro-op loads from a fresh cache).
            depth = self.cfg.UOP_DEPTH
            spans: dict[bytes, tuple[int, int]] = {}
            sram_end = 0
            count = int(prefix[s].max())
            best = None
            i = s
            while i < n:
                ch = self._recs[i].chunk
                if ch is not None and ch not in spans:
                    m = len(ch) // 4
                    if sram_end + m > depth:
                        sram_end = 0
                    b, e = sram_end, sram_end + m
                    for o, (ob, oe) in list(spans.items()):
                        if ob < e and b < oe:
                            del spans[o]
                    spans[ch] = (b, e)
                    sram_end = e
                    count += 1
                count += 1
                i += 1
                if cand[i] and i < n:
                    if count + _DRAIN_INSNS + int(prefix[i].max()) <= limit:
                        best = i
                    else:
                        break
            if i >= n and count + _DRAIN_INSNS + int(prefix[n].max()) <= limit:
                segs.append((s, n))
                break
            if best is None:
                # No safe point within the limit: run up to the first safe point.
                nxt = next((j for j in range(s + 1, n + 1) if cand[j]), n)
                self.stats.oversized_launches += 1
                segs.append((s, nxt))
                s = nxt
            else:
                segs.append((s, best))
                s = best
        return segs

    # ------------------------------------------------------------------ run
    def _ensure(self, attr: str, nbytes: int) -> Buffer:
        cur = getattr(self, attr)
        if cur is None or cur.nbytes < nbytes:
            if cur is not None:
                self.device.free(cur)
            cur = self.device.alloc(max(nbytes, 64))
            setattr(self, attr, cur)
        return cur

    def synchronize(self) -> RunResult:
        """Drain, finish and run everything recorded since the last call.

        Appends the final drain (store→compute and load→compute pushes that compute pops)
        and FINISH, writes instructions and micro-ops to the builder's device buffers, runs
        the static verifier when available, then ``device.run`` with regions = the builder's
        instruction/micro-op buffers plus every buffer the program loads from or stores to.
        Long programs run as several launches (see the module docstring).

        Returns:
            A :class:`RunResult` with ``cycles`` summed over launches and ``stats`` summed
            per key, plus the builder's counters (``launches``, ``insns``, ``uop_loads``,
            ``uop_words_loaded``, ``kernel_records``, ``kernel_hits``,
            ``oversized_launches``, ``reordered_launches``, ``split_launches``).  An empty program
            runs nothing (``launches == 0``).

        Raises:
            ProgramError: from the verifier or the device.
        """
        self.stats = stats = dataclasses.replace(self.stats)
        self.last_programs = []
        self.last_uops = []
        total = RunResult(cycles=0, stats={})
        try:
            lowered = self._launches()
            steps = self.last_launch_steps
            for li, (insns, uop_loads, words, regions) in enumerate(lowered):
                if words is not None:
                    ubuf = self._ensure("_uop_buf", words.nbytes)
                    self.device.write(ubuf, words)
                    ubase = ubuf.addr // self.cfg.elem_bytes(MemType.UOP)
                    for j in uop_loads:
                        insns[j] = dataclasses.replace(insns[j],
                                                       dram_base=insns[j].dram_base + ubase)
                    regions[ubuf.addr] = Buffer(ubuf.addr, words.nbytes)
                    if self.debug:
                        self.last_uops.append(words.copy())
                prog = encode_program(self.cfg, insns)
                ibuf = self._ensure("_insn_buf", prog.nbytes)
                self.device.write(ibuf, prog)
                regions[ibuf.addr] = Buffer(ibuf.addr, prog.nbytes)
                if self.debug:
                    self.last_programs.append(prog)
                    self.last_program = prog
                region_list = sorted(regions.values(), key=lambda b: b.addr)
                try:
                    self._verify(ibuf.addr, prog, region_list,
                                 (self._uop_buf.addr, words) if words is not None else None)
                    res = self.device.run(ibuf.addr, len(insns), regions=region_list,
                                          timeout_cycles=self.timeout_cycles)
                except ProgramError as e:
                    raise _name_fault(e, steps[li]) from None
                stats.launches += 1
                stats.insns += len(insns)
                _add_result(total, res)
            return self._result(total)
        finally:
            self._reset_program()

    def _launches(self) -> list[tuple[list[Insn], list[int], np.ndarray | None,
                                      dict[int, Buffer]]]:
        """Lower everything recorded into launches: ``(instructions, indices of micro-op
        LOADs (dram_base = staging offset in micro-ops), staging words (uint32) or None,
        {addr: data Buffer} the launch loads from or stores to)``."""
        if self._deferred:
            self._release_loads()
        self._raw = None
        self.last_launch_steps = []
        if not self._recs:
            return []
        prefix = self._prefix()
        neg = np.flatnonzero(prefix[-1] < 0)
        if neg.size:
            q = Queue(int(neg[0]))
            raise BuilderError(
                f"token queue {q.name.lower()} has {int(-prefix[-1][q])} more pop(s) than "
                f"pushes: the program would deadlock")
        out = []
        for s, e in self._segments(prefix):
            insns, uop_loads, stage = self._lower(s, e, prefix[s], prefix[e])
            self.last_launch_steps.append(self._owners(s, e, insns))
            regions: dict[int, Buffer] = {}
            for r in self._recs[s:e]:
                if r.buf is not None:
                    regions[r.buf.addr] = r.buf
            words = np.frombuffer(b"".join(stage), dtype=np.uint32) if stage else None
            out.append((insns, uop_loads, words, regions))
        return out

    def _owners(self, s: int, e: int, insns: list[Insn]) -> list[str] | None:
        """The step (:meth:`begin_step` name) of each lowered instruction of records
        ``[s, e)``: a recorded instruction's own step; a micro-op load, NOP or drain the
        step of the next recorded instruction in the launch (the last one's at the end).
        None when no step was named."""
        if not self._marks:
            return None
        starts = [m[0] for m in self._marks]

        def step_of(ri: int) -> str:
            return self._marks[bisect.bisect_right(starts, ri) - 1][1]

        ids = {id(self._recs[i].insn): i for i in range(s, e)}
        names: list[str] = [""] * len(insns)
        nxt = step_of(e - 1)
        for p in range(len(insns) - 1, -1, -1):
            ri = ids.get(id(insns[p]))
            if ri is not None:
                nxt = step_of(ri)
            names[p] = nxt
        return names

    def record_program(self) -> "RecordedProgram":
        """Lower everything recorded since the last synchronize into a reusable program
        instead of running it: instructions and micro-ops are encoded once into device
        buffers owned by the returned :class:`RecordedProgram` (one pair for all its
        launches), the static verifier runs once here (when enabled and the device does
        not check programs itself), and :meth:`RecordedProgram.run` relaunches it any
        number of times.  The data buffers it loads from and stores to are baked in: the
        caller must keep them allocated (same addresses) while the program is used.

        Returns:
            A :class:`RecordedProgram` (free it with :meth:`RecordedProgram.free`).
        Raises:
            BuilderError / ProgramError: as :meth:`synchronize` (static faults only).
        """
        self.stats = stats = dataclasses.replace(self.stats)
        try:
            lowered = self._launches()
            align = self.cfg.dram_alignment
            ueb = self.cfg.elem_bytes(MemType.UOP)
            uoffs, ioffs = [], []
            utop = itop = 0
            for insns, uop_loads, words, _ in lowered:
                uoffs.append(utop)
                if words is not None:
                    utop += -(-words.nbytes // align) * align
                ioffs.append(itop)
                itop += -(-(len(insns) * INSN_BYTES) // align) * align
            ubuf = self.device.alloc(max(utop, 64)) if utop else None
            ibuf = self.device.alloc(max(itop, 64)) if lowered else None
            launches = []
            try:
                for (insns, uop_loads, words, regions), uo, io in zip(lowered, uoffs, ioffs):
                    if words is not None:
                        uaddr = ubuf.addr + uo
                        self.device.write(ubuf, words, offset=uo)
                        ubase = uaddr // ueb
                        for j in uop_loads:
                            insns[j] = dataclasses.replace(
                                insns[j], dram_base=insns[j].dram_base + ubase)
                        regions[uaddr] = Buffer(uaddr, words.nbytes)
                    prog = encode_program(self.cfg, insns)
                    iaddr = ibuf.addr + io
                    self.device.write(ibuf, prog, offset=io)
                    regions[iaddr] = Buffer(iaddr, prog.nbytes)
                    region_list = sorted(regions.values(), key=lambda b: b.addr)
                    self._verify(iaddr, prog, region_list,
                                 (uaddr, words) if words is not None else None)
                    launches.append((iaddr, len(insns), region_list))
                    stats.launches += 1
                    stats.insns += len(insns)
            except BaseException:
                for bf in (ubuf, ibuf):
                    if bf is not None:
                        self.device.free(bf)
                raise
            counters = dataclasses.asdict(stats)
            self.stats = BuilderStats()
            return RecordedProgram(self.device, launches, [bf for bf in (ubuf, ibuf) if bf],
                                   counters, self.timeout_cycles, self.last_launch_steps)
        finally:
            self._reset_program()

    finish = synchronize

    def _result(self, total: RunResult) -> RunResult:
        for k, v in dataclasses.asdict(self.stats).items():
            total.stats[k] = v
        self.stats = BuilderStats()
        return total

    def _verify(self, insn_addr: int, prog: np.ndarray, regions: list[Buffer],
                uops: tuple[int, np.ndarray] | None) -> None:
        """Static verifier (``runtime.verify``, when present) on a sparse DRAM image holding
        only this launch's instructions and micro-ops (all it reads)."""
        if not self.verify or getattr(self.device, "checks_in_run", False):
            return
        try:
            from .verify import verify_program  # noqa: PLC0415 - optional module
        except ImportError:
            return
        top = max(b.end for b in regions)
        image = np.zeros(top, dtype=np.uint8)   # calloc: untouched pages cost nothing
        flat = prog.reshape(-1)
        image[insn_addr:insn_addr + flat.size] = flat
        if uops is not None:
            a, w = uops
            raw = w.view(np.uint8)
            image[a:a + raw.size] = raw
        verify_program(self.cfg, image, insn_addr, prog.shape[0], regions)

    # ------------------------------------------------------------------ helpers
    def disassemble(self) -> list[str]:
        """Disassembly of the last launch (needs ``debug=True``)."""
        from ..hw.isa import disassemble

        if self.last_program is None:
            raise BuilderError("no program kept: create the builder with debug=True")
        return disassemble(self.cfg, self.last_program)
