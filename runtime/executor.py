"""The executor: runs a :class:`~.artifact.CompiledModel` on a :class:`~.device.Device`.

- CPU steps run in numpy (:mod:`.cpu_ops`).
- VTA steps replay their relocatable :class:`~.artifact.Trace` once per batch block
  (``ceil(N / BATCH)`` blocks) on one :class:`~.builder.ProgramBuilder`; the lowered,
  encoded program (instructions and micro-op staging, in device memory) is kept as a
  :class:`~.builder.RecordedProgram` per (step, batch blocks, addresses of the buffers it
  touches) and relaunched as is by every later run of the same shape (instantiated once
  per shape; statically verified once, when the device needs it).  The trace is
  independent of N, so a model with a symbolic batch is compiled once and runs any batch
  size (1, 2, 7 ...); one program per step is kept (a new shape replaces it).
- Device memory: packed constants (weights, biases) are copied once per executor and stay
  resident.  Activations are planned by liveness (:class:`MemoryPlan`, one per batch-block
  count): every device tensor (a VTA step's output, or an input the host packs for a step)
  lives from the step that writes it to the last step that reads it (on the device, or on
  the host when a CPU step or a repacking consumer reads it back; graph outputs to the
  end), and tensors whose lifetimes do not overlap share one device buffer (greedy
  interval assignment in step order, best fit).  The buffers are allocated once per shape
  and reused by every later run, so the cached programs stay valid.  A VTA output stays on
  the device and feeds the next VTA step directly when the packed layouts agree (same
  channel block, no host padding, no im2col); otherwise the host unpacks and repacks it.
  :meth:`Executor.memory_report` gives the footprint.
- Memory budget (``memory_budget=BYTES``): the activations live in one arena of at most
  that many bytes, run by a DTR schedule (:mod:`.dtr`, planned once per batch-block count):
  when a tensor would not fit, others are evicted and rematerialized later by re-running
  their producer steps.  Every tensor the host reads is read back right after it is first
  computed.  Programs are cached per address set as above (a recomputed step may have
  several); results are bit-exact against the unbudgeted run.  A step with row-band
  variants (:class:`~.artifact.RowBands`, a conv whose input the host packs) may run in
  row bands where the schedule says so: one band buffer holds each band's packed input in
  turn, and each band's program writes its rows of the full output.
  :meth:`Executor.dtr_report` gives the figures.  ``None``: the liveness plan above,
  unchanged.

- Streamed execution (``stream=True``, a core with ``INSN_RING > 0``): each run is one
  ring session on the device (``stream_open`` ... ``stream_close``).  A VTA step's
  program is appended to the ring as soon as it is built (each launch one segment) and the
  executor goes on at once: the host waits (``stream_wait``) only before it reads a device
  tensor (a CPU step's input, a repacked input, the outputs), before it writes a device
  buffer an appended segment may still use (host packing into a reused buffer), and
  before it frees a cached program; so CPU steps, packing and program building overlap
  the core.  Per-step ``cycles`` are then not measured (the session's totals are in
  :attr:`Executor.last_stream`); results are bit-exact against ``stream=False``.

Errors: wrong input name, shape or dtype raise :class:`~.device.DeviceError` with one
line; device faults propagate as :class:`~.device.ProgramError`.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Callable, Sequence

import numpy as np

from . import dtr
from ..hw.config import MemType
from .artifact import CompiledModel, SlotLayout, replay
from .builder import ProgramBuilder
from .cpu_float import REAL_OPS, run_float_op, run_onnx_node
from .cpu_ops import run_cpu_op
from .device import Buffer, Device, DeviceError, ProgramError, RunResult

__all__ = ["Executor", "StepStats", "MemoryPlan", "plan_memory", "fused_groups",
           "UNIT_COUNTERS"]


@dataclass
class StepStats:
    """Counters of one step summed over runs: ``runs``, ``images``, ``insns``,
    ``gemm_uops`` (GEMM micro-ops executed), ``alu_uops``, ``dram_bytes`` (read + written
    by the core), ``launches``, ``host_seconds`` (wall seconds of CPU steps' kernels),
    ``cycles`` (core cycles: rtl and board backends; 0 on fsim), ``blocks`` (batch blocks run),
    ``extra`` (sums of the core's per-unit counters :data:`UNIT_COUNTERS` where the backend
    reports them), ``recomputes`` (re-runs of the step under a memory budget to
    rematerialize its evicted output; their counters are in the sums above, not in
    ``runs``/``images``/``blocks``), ``fused`` (``fuse=True``: the name of the first step
    of the fused launch the step last ran in, ``""`` when it ran in a launch of its own;
    a fused launch's ``cycles``, ``launches``, micro-op, DRAM and unit counters are counted
    on its first step only, ``insns`` on each step exactly)."""

    runs: int = 0
    images: int = 0
    insns: int = 0
    gemm_uops: int = 0
    alu_uops: int = 0
    dram_bytes: int = 0
    launches: int = 0
    host_seconds: float = 0.0
    cycles: int = 0
    blocks: int = 0
    extra: dict = field(default_factory=dict)
    recomputes: int = 0
    fused: str = ""


#: per-unit counters of the core's statistics (``docs/regs.md``), summed per step
UNIT_COUNTERS = ("fetch_busy", "load_busy", "compute_busy", "store_busy", "load_stall",
                 "compute_stall", "store_stall")

_HOST = ("host copies",)       # env key of the per-run host cache (never a tensor name)


@dataclass(frozen=True)
class _Sub(Buffer):
    """A slice of a DTR arena: programs address it directly; host reads and writes go
    through the arena's own allocation (``parent`` at byte ``offset``), which every
    backend knows (the board tracks caches per allocation)."""

    parent: Buffer | None = None
    offset: int = 0


@dataclass
class _Dev:
    buf: object                 # None: evicted under a memory budget (host copy or nothing)
    layout: SlotLayout
    n: int


@dataclass
class MemoryPlan:
    """Device activation memory of one batch-block count (see the module docstring).

    Attributes:
        nblk: batch blocks (``ceil(N / BATCH)``).
        assign: ``(step index, slot) -> buffer index`` for every device activation (slot
            ``"y"``: the step's output; other slots: inputs the host packs).
        sizes: bytes of each shared buffer.
        lifetimes: ``(step index, slot) -> (first step, last step)`` (``len(steps)``: read
            after the last step).
        unshared_bytes: bytes one buffer per ``(step, slot)`` would take (no sharing).
        peak_live_bytes: the largest sum of tensors live at one step (a lower bound of any
            plan), each tensor's bytes rounded up to the plan's ``align``.
    """

    nblk: int
    assign: dict
    sizes: list
    lifetimes: dict
    unshared_bytes: int
    peak_live_bytes: int = 0

    @property
    def nbytes(self) -> int:
        return sum(self.sizes)


def fused_groups(model: CompiledModel) -> list[tuple[int, int]]:
    """Runs ``(first, last)`` (inclusive step indices) of consecutive VTA steps that can run
    as one fused launch (``Executor(fuse=True)``): a VTA step joins the run of the VTA step
    before it when every input it reads is a constant or a device tensor in its packed
    layout (no host packing, no host read-back between the two).  Single steps are runs of
    one."""
    steps = model.steps
    producer = {t: i for i, st in enumerate(steps) for t in st.outputs}
    runs: list[list[int]] = []
    for i, st in enumerate(steps):
        join = False
        if st.target == "vta" and i and steps[i - 1].target == "vta":
            join = True
            for slot, src in st.slots.items():
                if slot == "y" or slot not in st.layouts:
                    continue
                j = producer.get(src)
                if j is None or steps[j].target != "vta" or steps[j].layouts["y"] != st.layouts[slot]:
                    join = False
                    break
        if join:
            runs[-1][1] = i
        else:
            runs.append([i, i])
    return [tuple(r) for r in runs]


def plan_memory(model: CompiledModel, nblk: int, align: int = 1,
                hold: Sequence[tuple[int, int]] = ()) -> MemoryPlan:
    """Liveness plan of the activation buffers of ``model`` for ``nblk`` batch blocks.

    ``align``: bytes each tensor is rounded up to in ``peak_live_bytes`` (a device's
    ``dram_alignment``, as its allocator and :mod:`.dtr` count; default 1: exact bytes).
    ``hold``: step runs ``(first, last)`` (:func:`fused_groups`) whose tensors are read
    back after the run's last step: a tensor live at a step of a run lives to its end.

    A VTA step's input slot reads its producer's output buffer on the device when the
    producer is a VTA step with the same packed layout; otherwise the host packs the input
    into a buffer that lives for that step only.  Two tensors share a buffer only when
    their lifetimes ``[first, last]`` (inclusive step indices) are disjoint.
    """
    steps = model.steps
    end = len(steps)
    producer = {}
    for i, st in enumerate(steps):
        for t in st.outputs:
            producer[t] = i
    life: dict = {}
    size: dict = {}
    for i, st in enumerate(steps):
        if st.target != "vta":
            continue
        ylay = st.layouts["y"]
        life[(i, "y")] = [i, i]
        size[(i, "y")] = nblk * ylay.block_bytes
    for i, st in enumerate(steps):
        for slot_or_in in (st.inputs if st.target != "vta" else
                           [s for s in st.slots if s in st.layouts and s != "y"]):
            if st.target != "vta":
                src = slot_or_in
                j = producer.get(src)
                if j is not None and steps[j].target == "vta":
                    life[(j, "y")][1] = max(life[(j, "y")][1], i)      # read back to host
                continue
            slot = slot_or_in
            src, lay = st.slots[slot], st.layouts[slot]
            j = producer.get(src)
            if j is not None and steps[j].target == "vta":
                life[(j, "y")][1] = max(life[(j, "y")][1], i)          # on device or read back
                if steps[j].layouts["y"] == lay:
                    continue
            life[(i, slot)] = [i, i]
            size[(i, slot)] = nblk * lay.block_bytes
    for t in model.outputs:
        j = producer.get(t)
        if j is not None and steps[j].target == "vta":
            life[(j, "y")][1] = end
    for f, last in hold:
        for v in life.values():
            if f <= v[1] < last and v[0] <= last:
                v[1] = last
    order = sorted(life, key=lambda k: (life[k][0], k[1] != "y", k))
    sizes: list[int] = []
    busy: list[int] = []            # last step each buffer's current tensor is live
    assign = {}
    for k in order:
        first, last = life[k]
        need = size[k]
        free = [b for b in range(len(sizes)) if busy[b] < first]
        fit = [b for b in free if sizes[b] >= need]
        if fit:
            b = min(fit, key=lambda b: sizes[b])
        elif free:
            b = max(free, key=lambda b: sizes[b])
            sizes[b] = need
        else:
            b = len(sizes)
            sizes.append(need)
            busy.append(-1)
        busy[b] = last
        assign[k] = b
    peak = max((sum(-(-size[k] // align) * align for k in life
                    if life[k][0] <= i <= life[k][1]) for i in range(end + 1)), default=0)
    return MemoryPlan(nblk, assign, sizes, {k: tuple(v) for k, v in life.items()},
                      sum(size.values()), peak)


class Executor:
    """Run a compiled model on a device.

    Args:
        model: the :class:`CompiledModel` (from the compiler or ``load_artifact``).
        device: a :class:`Device` whose config has the model's fingerprint.
        max_insns_per_launch: forwarded to the :class:`ProgramBuilder`.
        memory_budget: ``None`` (activations planned by liveness) or the most bytes of
            device activation memory (VTA outputs and host-packed VTA inputs; not weights
            or programs) live at once: a DTR schedule (:mod:`.dtr`) evicts and recomputes
            tensors to stay under it, bit-exact.
        dtr_heuristic: the eviction heuristic under a budget (``"dtr"``: DTR's h_DTR with
            the evicted neighbourhood's cost; ``"local"``: the producer's cost only;
            ``"auto"``: both simulated, the cheaper schedule kept; ``"next_use"``: an
            offline rule for comparison; see :mod:`.dtr`).
        stream: ``True``: streamed execution (see the module docstring); ``"step"``: the
            same session, but the host waits for every step right after appending it (the
            one-shot schedule, for measurements); ``False`` (default): one launch per
            program.
        fuse: ``True``: every run of consecutive VTA steps that :func:`fused_groups`
            finds is one program (one FINISH; :meth:`.ProgramBuilder.begin_step` joins the
            steps with dependency tokens), so the next step's fetch and first loads overlap
            this one's tail; bit-exact against ``False`` (default: one program per step).
            A fault names its step.  Per-step ``cycles`` of a fused run are the launch's,
            counted on its first step (:class:`StepStats` ``fused``).
    Raises:
        DeviceError: the device's config differs from the model's; a budget below the
            smallest working set (the largest step's device inputs + host-packed inputs +
            output, at the model's batch or one batch block when it is symbolic), or one
            under which the policy finds no schedule (:class:`~.dtr.BudgetError`, naming
            the bytes; planned here, so refused up front).  A larger symbolic batch is
            planned at its first run and refused there the same way.
        ValueError: a budget that is not a positive int, an unknown heuristic, an unknown
            ``stream`` value, ``stream`` with ``memory_budget``, ``fuse`` not a bool or with
            ``stream`` or ``memory_budget``.
        DeviceError (stream): the device has no streaming support or its core no ring.
    """

    def __init__(self, model: CompiledModel, device: Device, *,
                 max_insns_per_launch: int = 65536, memory_budget: int | None = None,
                 dtr_heuristic: str = "auto", stream: bool | str = False,
                 fuse: bool = False):
        if device.config.fingerprint != model.config.fingerprint:
            raise DeviceError(
                f"model '{model.name}' was compiled for {model.config.bitstream_name} "
                f"(fingerprint 0x{model.config.fingerprint:08x}) but the device is "
                f"{device.config.bitstream_name} (0x{device.config.fingerprint:08x})")
        model.check_requires()
        # inputs converted to int8 (NaN/inf have no int8 value); others go to CPU float ops
        self._quantized_inputs = {s.inputs[0] for s in model.steps if s.op == "quantize"}
        self.model = model
        self.device = device
        self.cfg = device.config
        self.builder = ProgramBuilder(device, max_insns_per_launch=max_insns_per_launch)
        self._consts: dict[str, object] = {}
        self._plans: dict[int, tuple[MemoryPlan, list]] = {}     # nblk -> (plan, buffers)
        # encoded programs per (step, batch blocks, buffer addresses): see module docstring
        self._progs: dict[tuple, object] = {}
        self._prog_keys: dict[tuple, list] = {}   # (step, nblk) -> keys, oldest first
        self.stats: dict[str, StepStats] = {s.name: StepStats() for s in model.steps}
        if memory_budget is not None and (isinstance(memory_budget, bool) or
                                          not isinstance(memory_budget, (int, np.integer))
                                          or memory_budget < 1):
            raise ValueError(f"memory_budget must be a positive int of bytes or None, got "
                             f"{memory_budget!r}")
        if dtr_heuristic not in dtr.HEURISTICS:
            raise ValueError(f"dtr_heuristic must be one of {dtr.HEURISTICS}, got "
                             f"{dtr_heuristic!r}")
        self.memory_budget = None if memory_budget is None else int(memory_budget)
        self.dtr_heuristic = dtr_heuristic
        if stream not in (False, True, "step"):
            raise ValueError(f"stream must be True, False or 'step', got {stream!r}")
        if stream and memory_budget is not None:
            raise ValueError("stream=True with a memory_budget is not supported (the DTR "
                             "schedule runs one launch at a time)")
        if stream and not hasattr(device, "stream_append"):
            raise DeviceError(f"device {type(device).__name__} does not support streamed "
                              f"execution")
        if stream and not self.cfg.INSN_RING:
            raise DeviceError(f"stream=True needs a core with an instruction ring; "
                              f"{self.cfg.bitstream_name} has INSN_RING = 0")
        self.stream = stream
        if not isinstance(fuse, bool):
            raise ValueError(f"fuse must be True or False, got {fuse!r}")
        if fuse and (stream or memory_budget is not None):
            raise ValueError("fuse=True runs on the liveness plan without streaming: not "
                             "with stream or memory_budget")
        self.fuse = fuse
        self._groups = fused_groups(model) if fuse else []
        #: called as ``on_step(done, total)`` after each model step of a run (``total``: the
        #: model's steps; recomputes under a memory budget not counted), e.g. to show
        #: progress within one long run; None: not called
        self.on_step: Callable[[int, int], object] | None = None
        self._inflight: list[tuple[int, list[tuple[int, int]]]] | None = None
        #: the last streamed run's session figures (device counters, waits, host seconds)
        self.last_stream: dict = {}
        self._schedules: dict[int, tuple[dtr.Schedule, object]] = {}   # nblk -> (schedule, arena)
        self._planned: dict[int, dtr.Schedule] = {}    # planned up front, arena not yet allocated
        self._last_nblk: int | None = None
        self._last_run: dict[int, dict] = {}       # nblk -> measured totals of the last run
        if self.memory_budget is not None:         # refuse a budget no order fits, up front
            first = model.types[model.inputs[0]][1] if model.inputs else ()
            nb = (-(-first[0] // self.cfg.BATCH) if first and isinstance(first[0], int)
                  else 1)
            self._planned[nb] = dtr.plan(dtr.nodes_from_model(model, nb), self.memory_budget,
                                         align=self.cfg.dram_alignment,
                                         heuristic=dtr_heuristic)

    # ----------------------------------------------------------------- memory
    def _const_buf(self, name: str):
        b = self._consts.get(name)
        if b is None:
            arr = np.ascontiguousarray(self.model.constants[name])
            b = self.device.alloc(max(arr.nbytes, 1))
            self.device.write(b, arr)
            self._consts[name] = b
        return b

    def _plan(self, nblk: int, hold: tuple = ()) -> tuple[MemoryPlan, list]:
        key = (nblk, hold) if hold else nblk
        pb = self._plans.get(key)
        if pb is None:
            plan = plan_memory(self.model, nblk, hold=hold)
            bufs = []
            try:
                for n in plan.sizes:
                    bufs.append(self.device.alloc(max(n, 1)))
            except BaseException:
                for b in bufs:
                    self.device.free(b)
                raise
            pb = self._plans[key] = (plan, bufs)
        return pb

    def plan_budget(self, n_images: int) -> dtr.Schedule:
        """Plan now (and keep for the run) the memory-budget schedule of a run of
        ``n_images`` images (``ceil(n_images / BATCH)`` batch blocks), so a budget too small
        for that run is refused before any work with the figure for that many images
        (the constructor checks only the model's declared batch; a symbolic one counts 1).

        Raises:
            BudgetError: the budget is below what the run needs (names the step, bytes).
            DeviceError: the executor has no memory budget, or ``n_images < 1``.
        """
        if self.memory_budget is None:
            raise DeviceError("plan_budget needs an executor with a memory_budget")
        if isinstance(n_images, bool) or not isinstance(n_images, int) or n_images < 1:
            raise DeviceError(f"plan_budget: n_images = {n_images!r} must be a positive integer")
        nblk = -(-n_images // self.cfg.BATCH)
        if nblk in self._schedules:
            return self._schedules[nblk][0]
        if nblk not in self._planned:
            self._planned[nblk] = dtr.plan(dtr.nodes_from_model(self.model, nblk),
                                           self.memory_budget, align=self.cfg.dram_alignment,
                                           heuristic=self.dtr_heuristic)
        return self._planned[nblk]

    def _schedule(self, nblk: int) -> tuple[dtr.Schedule, object]:
        sa = self._schedules.get(nblk)
        if sa is None:
            sched = self._planned.pop(nblk, None) or dtr.plan(
                dtr.nodes_from_model(self.model, nblk), self.memory_budget,
                align=self.cfg.dram_alignment, heuristic=self.dtr_heuristic)
            arena = self.device.alloc(max(sched.arena_bytes, 1))
            sa = self._schedules[nblk] = (sched, arena)
        return sa

    def dtr_report(self, n_blocks: int | None = None) -> dict:
        """Figures of the memory-budget schedule of ``n_blocks`` batch blocks (default: the
        last run's), bytes and core cycles:

        ``budget``; ``liveness_peak`` (``plan_memory``'s most bytes live at one step, each
        tensor rounded up to the device's ``dram_alignment`` as every figure here is);
        ``free_peak`` (the schedule's own peak with no budget: host reads done at once);
        ``min_working_set`` (no order fits below it); ``peak`` (most device activation
        bytes live at once, <= budget); ``arena`` (bytes allocated for them, <= budget);
        ``heuristic`` (the eviction rule of the schedule kept);
        ``evictions``; ``recomputes`` (steps re-run) and ``recomputed`` (step name ->
        times); ``bands`` (step name -> row bands, for steps run in row bands) and
        ``banded_runs`` (runs and recomputes done in row bands); ``est_cycles`` /
        ``est_cycles_base`` (``Step.bounds`` max(compute, memory) summed over the device
        runs, a banded run as the sum over its bands; budgeted / unbudgeted) and
        ``est_overhead`` (their ratio - 1); ``mac_cycles`` / ``mac_cycles_base`` /
        ``mac_overhead`` (the ideal GEMM cycles alone); and of the last run measured on
        the device: ``cycles`` and ``cycles_base`` (every VTA launch / the first run of
        each step: rtl and board; 0 on fsim), ``gemm_uops`` / ``gemm_uops_base`` (GEMM
        micro-ops executed), ``dram_bytes`` / ``dram_bytes_base`` (bytes the core read and
        wrote), with ``cycles_overhead``, ``gemm_uops_overhead`` and
        ``dram_bytes_overhead``.  The ``_base`` figures count each step's first run as
        scheduled (banded where it ran banded).

        Raises:
            DeviceError: no memory budget, or no run at that batch-block count yet.
        """
        if self.memory_budget is None:
            raise DeviceError("dtr_report: this executor has no memory_budget")
        nb = self._last_nblk if n_blocks is None else n_blocks
        if nb is None or nb not in self._schedules:
            raise DeviceError(f"dtr_report: no run at {nb} batch block(s) yet")
        sched, arena = self._schedules[nb]
        steps = self.model.steps
        mac = [st.bounds(self.cfg, nb)[0] for st in steps]
        mac_base = sum(mac)
        mac_all = mac_base + sum(mac[i] * k for i, k in sched.recomputed.items())
        meas = self._last_run.get(nb, {})

        def ratio(a, b):
            return (a - b) / b if b else 0.0

        al = self.cfg.dram_alignment
        rep = {"budget": sched.budget,
               "liveness_peak": plan_memory(self.model, nb, al).peak_live_bytes,
               "free_peak": sched.free_peak_bytes, "min_working_set": sched.min_bytes,
               "peak": sched.peak_bytes, "arena": sched.arena_bytes,
               "heuristic": sched.heuristic,
               "evictions": sched.evictions, "recomputes": sched.recomputes,
               "recomputed": {steps[i].name: k for i, k in sorted(sched.recomputed.items())},
               "bands": {steps[i].name: k for i, k in sorted(sched.bands.items())},
               "banded_runs": sched.banded_runs,
               "est_cycles": sched.cost, "est_cycles_base": sched.base_cost,
               "est_overhead": sched.overhead, "mac_cycles": mac_all,
               "mac_cycles_base": mac_base, "mac_overhead": ratio(mac_all, mac_base)}
        for k in ("cycles", "gemm_uops", "dram_bytes"):
            a, b = meas.get(k, 0), meas.get(k + "_base", 0)
            rep[k], rep[k + "_base"], rep[k + "_overhead"] = a, b, ratio(a, b)
        return rep

    def memory_report(self) -> dict[str, int]:
        """Device-memory footprint in bytes: ``constants`` (packed weights/biases, resident),
        ``activations`` (the liveness-planned buffers of every shape run so far),
        ``activations_unshared`` (what one buffer per (step, slot, shape) would take),
        ``activations_peak_live`` (the most bytes live at one step: a lower bound),
        ``programs`` (cached instruction and micro-op buffers), ``total``
        (constants + activations + programs).  Under a memory budget ``activations`` is
        the DTR arenas' bytes, the liveness figures are of the same shapes, and
        ``budget`` and ``activations_peak`` (the schedules' most bytes live at once) are
        added."""
        c = sum(b.nbytes for b in self._consts.values())
        a = sum(p.nbytes for p, _ in self._plans.values())
        a += sum(s.arena_bytes for s, _ in self._schedules.values())
        liv = [p for p, _ in self._plans.values()] + [plan_memory(self.model, nb)
                                                       for nb in self._schedules]
        u = sum(p.unshared_bytes for p in liv)
        pk = sum(p.peak_live_bytes for p in liv)
        pr = sum(b.nbytes for p in self._progs.values() for b in (p.buffers or ()))
        rep = {"constants": c, "activations": a, "activations_unshared": u,
               "activations_peak_live": pk, "programs": pr, "total": c + a + pr}
        if self.memory_budget is not None:
            rep["budget"] = self.memory_budget
            rep["activations_peak"] = max((s.peak_bytes for s, _ in self._schedules.values()),
                                          default=0)
        return rep

    def _shape(self, tensor: str, n: int) -> tuple:
        shape = self.model.types[tensor][1]
        return tuple(n if not isinstance(d, int) else d for d in shape)

    def _host(self, env: dict, tensor: str, n: int) -> np.ndarray:
        """The host (logical int8, or int16 for 16-bit activations; int4 activations as int8
        in ``[-8, 7]``) value of ``tensor``; a
        device tensor is read back once per run (the host copy is cached in
        ``env[_HOST]``; the device copy stays valid for its planned lifetime)."""
        v = env[tensor]
        if isinstance(v, _Dev):
            hc = env[_HOST]
            x = hc.get(tensor)
            if x is None:
                if v.buf is None:
                    raise DeviceError(f"internal: {tensor!r} was evicted before the host "
                                      f"read it (memory-budget schedule)")
                lay = v.layout
                self._sync(v.buf)
                raw = self._read(v.buf, lay.nbytes(v.n))
                x = lay.unpack(raw, v.n)        # int4 slots: nibbles -> int8 in [-8, 7]
                x = hc[tensor] = x.reshape(self._shape(tensor, n))
            return x
        return v

    # ----------------------------------------------------------------- streaming
    def _sync(self, b: Buffer | None = None) -> None:
        """Streamed runs: wait for the last appended segment that touches ``b``'s bytes
        (``None``: every appended segment)."""
        fl = self._inflight
        if not fl:
            return
        if b is None:
            k = fl[-1][0]
        else:
            lo, hi = b.addr, b.addr + b.nbytes
            k = max((k for k, spans in fl if any(a < hi and lo < e for a, e in spans)),
                    default=0)
            if not k:
                return
        t0 = time.perf_counter()
        self.device.stream_wait(k)
        self.last_stream["waits"] = self.last_stream.get("waits", 0) + 1
        self.last_stream["wait_seconds"] = (self.last_stream.get("wait_seconds", 0.0)
                                            + time.perf_counter() - t0)
        self._inflight = [f for f in fl if f[0] > k]

    def _append(self, prog) -> None:
        """Streamed runs: append each launch of ``prog`` as a ring segment."""
        for addr, n, regions in prog.launches:
            k = self.device.stream_append(addr, n, regions=regions,
                                          timeout_cycles=prog.timeout_cycles)
            self._inflight.append((k, [(r.addr, r.addr + r.nbytes) for r in regions]))
        if self.stream == "step":
            self._sync()

    # ----------------------------------------------------------------- running
    def _read(self, b: Buffer, nbytes: int) -> np.ndarray:
        if isinstance(b, _Sub):
            return self.device.read(b.parent, nbytes, offset=b.offset)
        return self.device.read(b, nbytes)

    def _write(self, b: Buffer, data: np.ndarray) -> None:
        if isinstance(b, _Sub):
            self.device.write(b.parent, data, offset=b.offset)
        else:
            self.device.write(b, data)

    def _check_feeds(self, feeds) -> dict:
        m = self.model
        if isinstance(feeds, np.ndarray):
            if len(m.inputs) != 1:
                raise DeviceError(f"model has {len(m.inputs)} inputs: pass a dict")
            feeds = {m.inputs[0]: feeds}
        out = {}
        n = None
        for name in m.inputs:
            if name not in feeds:
                raise DeviceError(f"missing input {name!r}")
            x = np.asarray(feeds[name])
            dtype, shape = m.types[name][0], m.types[name][1]
            real = dtype == "float32"
            if real and x.dtype.kind != "f":
                raise DeviceError(f"input {name!r} has dtype {x.dtype}, expected float32")
            if not real and x.dtype != np.dtype(dtype) and not (
                    x.dtype.kind == np.dtype(dtype).kind and np.can_cast(x.dtype, dtype)):
                raise DeviceError(f"input {name!r} has dtype {x.dtype}, expected {dtype}")
            if x.ndim != len(shape) or any(isinstance(d, int) and d != s
                                           for d, s in zip(shape, x.shape)):
                raise DeviceError(f"input {name!r} has shape {list(x.shape)}, expected "
                                  f"{list(shape)}")
            if x.ndim and x.shape[0] < 1:
                raise DeviceError(f"input {name!r} has an empty batch")
            if real and name in self._quantized_inputs and not np.isfinite(x).all():
                raise DeviceError(f"input {name!r} contains NaN or infinity "
                                  f"({int(np.count_nonzero(~np.isfinite(x)))} value(s)); "
                                  f"int8 quantization has no value for them")
            if not (shape and isinstance(shape[0], str)):
                n = n if n is not None else (x.shape[0] if x.ndim else 1)
            elif n is not None and x.shape[0] != n:
                raise DeviceError("inputs disagree on the batch size")
            else:
                n = x.shape[0]
            out[name] = x.astype(np.float32 if real else dtype)
        return out, n

    def run(self, feeds, *, keep: bool = False) -> dict[str, np.ndarray]:
        """Run the model.

        Args:
            feeds: ``ndarray`` (single-input models) or ``{input name: ndarray}``, float,
                batch first, any batch size where the model's batch is symbolic.
            keep: also return every intermediate tensor (int8 on the host).
        Returns:
            ``name -> array`` for the graph outputs (float32), plus intermediates with keep.
        Raises:
            DeviceError: bad feeds; ProgramError: device faults.
        """
        feeds, n = self._check_feeds(feeds)
        env: dict = dict(feeds)
        env[_HOST] = {}
        m = self.model
        nblk = -(-n // self.cfg.BATCH)
        self._last_nblk = nblk
        if self.stream:
            return self._run_streamed(env, n, nblk, keep)
        if self.memory_budget is not None:
            self._run_schedule(env, n, nblk, keep)
        else:
            self._run_liveness(env, n, nblk, keep)
        names = list(env) if keep else m.outputs
        out = {}
        for k in names:
            if k in m.types:
                out[k] = self._host(env, k, n)
        return out

    def _run_liveness(self, env: dict, n: int, nblk: int, keep: bool) -> None:
        """Every step in model order on the liveness-planned buffers of ``nblk`` blocks."""
        if self.fuse:
            self._run_fused(env, n, nblk, keep)
            return
        plan, pool = self._plan(nblk)
        for i, step in enumerate(self.model.steps):
            if step.target == "cpu":
                self._cpu_step(step, env, n)
                self._stepped(i + 1)
                continue
            packed = {slot: pool[plan.assign[(i, slot)]] for slot in step.layouts
                      if (i, slot) in plan.assign and slot != "y"}
            self._vta_step(step, env, n, nblk, packed, pool[plan.assign[(i, "y")]], 1)
            if keep:        # read back before a later step may reuse the buffer
                self._host(env, step.outputs[0], n)
            self._stepped(i + 1)

    def _run_fused(self, env: dict, n: int, nblk: int, keep: bool) -> None:
        """:meth:`_run_liveness` with every run of :func:`fused_groups` one program (with
        ``keep``, on a plan whose tensors live to the end of their run: read back after
        it)."""
        runs = [g for g in self._groups if g[1] > g[0]]
        plan, pool = self._plan(nblk, tuple(runs) if keep else ())
        steps = self.model.steps
        for first, last in self._groups:
            if steps[first].target == "cpu":
                self._cpu_step(steps[first], env, n)
                self._stepped(first + 1)
                continue
            parts = []
            for i in range(first, last + 1):
                step = steps[i]
                packed = {slot: pool[plan.assign[(i, slot)]] for slot in step.layouts
                          if (i, slot) in plan.assign and slot != "y"}
                yb = pool[plan.assign[(i, "y")]]
                if first == last:
                    self._vta_step(step, env, n, nblk, packed, yb, 1)
                else:
                    bufs = self._step_bufs(step, env, n, packed, 0)[0]
                    bufs["y"] = yb
                    parts.append((step, bufs))
                    env[step.outputs[0]] = _Dev(yb, step.layouts["y"], n)
            if parts:
                self._launch_fused(parts, n, nblk)
            for i in range(first, last + 1):
                if keep:
                    self._host(env, steps[i].outputs[0], n)
                self._stepped(i + 1)

    def _launch_fused(self, parts: list, n: int, nblk: int) -> None:
        """Run the steps ``parts`` (``[(step, {slot: Buffer})]``) as one fused program
        (cached per address set, one per run of steps and batch blocks) and count it."""
        names = tuple(st.name for st, _ in parts)
        key = ("fused", names, nblk,
               tuple((st.trace.uid, tuple(sorted((k, b.addr, b.nbytes) for k, b in bufs.items())))
                     for st, bufs in parts))
        prog = self._progs.get(key)
        if prog is None:
            try:
                for st, bufs in parts:
                    self.builder.begin_step(st.name)
                    replay(self.builder, st.trace, bufs, nblk)
            except DeviceError as e:
                self.builder.discard()
                text = f"step {st.name!r}: {e}"
                raise (e.with_message(text) if isinstance(e, ProgramError)
                       else type(e)(text)) from None
            prog = self.builder.record_program()
            keys = self._prog_keys.setdefault((names, nblk), [])
            while keys:
                old = self._progs.pop(keys.pop(0), None)
                if old is not None:
                    old.free()
            self._progs[key] = prog
            keys.append(key)
        res = prog.run()
        per = {}
        for launch in prog.launch_steps:
            for nm in launch or ():
                per[nm] = per.get(nm, 0) + 1
        for j, (st, _) in enumerate(parts):
            s = dict(res.stats) if j == 0 else {}
            s["insns"] = per.get(st.name, 0)
            self._count(st, RunResult(cycles=res.cycles if j == 0 else 0, stats=s), n, nblk,
                        False)
            self.stats[st.name].fused = names[0]

    def _run_streamed(self, env: dict, n: int, nblk: int, keep: bool) -> dict:
        """:meth:`run` as one ring session (``stream=True``)."""
        m = self.model
        t0 = time.perf_counter()
        self.last_stream = {"waits": 0, "wait_seconds": 0.0}
        self.device.stream_open()
        self._inflight = []
        try:
            self._run_liveness(env, n, nblk, keep)
            names = list(env) if keep else m.outputs
            out = {k: self._host(env, k, n) for k in names if k in m.types}
            self._sync()
        except BaseException:
            self._inflight = None
            try:
                self.device.stream_close()
            except Exception:
                pass
            raise
        self._inflight = None
        res = self.device.stream_close()
        self.last_stream.update(res.stats)
        self.last_stream["cycles"] = res.cycles
        self.last_stream["host_seconds"] = time.perf_counter() - t0
        return out

    def _run_schedule(self, env: dict, n: int, nblk: int, keep: bool) -> None:
        """Replay the memory-budget schedule of ``nblk`` batch blocks (:mod:`.dtr`)."""
        sched, arena = self._schedule(nblk)
        m = self.model
        uses: dict[int, int] = {}       # step -> programs its runs need (one per band)
        for a in sched.actions:
            if a.kind in ("run", "recompute") and m.steps[a.step].target == "vta":
                k = len(self._band(m.steps[a.step], a.rows).spans(
                    m.steps[a.step].layouts["y"].shape[1])) if a.rows else 1
                uses[a.step] = uses.get(a.step, 0) + k
        tot = {"cycles": 0, "cycles_base": 0, "gemm_uops": 0, "gemm_uops_base": 0,
               "dram_bytes": 0, "dram_bytes_base": 0}
        ran = 0
        for act in sched.actions:
            step = m.steps[act.step]
            if act.kind == "run":
                ran += 1
            if act.kind == "run" and step.target == "cpu":
                self._cpu_step(step, env, n)
            elif act.kind in ("run", "recompute"):
                views = {slot: _Sub(arena.addr + off, act.sizes[slot], arena, off)
                         for slot, off in act.offsets.items()}
                yb = views.pop("y")
                res = self._vta_step(step, env, n, nblk, views, yb, uses[act.step],
                                     recompute=act.kind == "recompute", rows=act.rows)
                got = {"cycles": int(res.cycles or 0),
                       "gemm_uops": int(res.stats.get("gemm_counter", 0)),
                       "dram_bytes": int(res.stats.get("dram_read_nbytes", 0))
                       + int(res.stats.get("dram_write_nbytes", 0))}
                for k, v in got.items():
                    tot[k] += v
                    if act.kind == "run":
                        tot[k + "_base"] += v
                if act.kind == "run" and keep:   # read back before the arena slot is reused
                    self._host(env, step.outputs[0], n)
            elif act.kind == "readback":
                self._host(env, step.outputs[0], n)
            else:                                   # evict / free: the buffer may be reused
                v = env[step.outputs[0]]
                env[step.outputs[0]] = _Dev(None, v.layout, v.n)
            if act.kind == "run":
                self._stepped(ran)
        self._last_run[nblk] = tot

    def _stepped(self, done: int) -> None:
        """Tell :attr:`on_step` that ``done`` of the model's steps have run."""
        if self.on_step is not None:
            self.on_step(done, len(self.model.steps))

    def _cpu_step(self, step, env: dict, n: int) -> None:
        """Run one CPU step on the host values of its inputs (outputs into ``env``)."""
        m = self.model
        st = self.stats[step.name]
        ins = [m.constants[i] if i in m.constants else self._host(env, i, n)
               for i in step.inputs]
        t0 = time.perf_counter()
        try:
            if step.op == "onnx":
                vals = run_onnx_node(step.attrs, ins, step.attrs.get("backend"))
            elif step.op in REAL_OPS:
                vals = [run_float_op(step.op, step.attrs, ins)]
            else:
                scales = {"in": m.types[step.inputs[0]][3]} if step.inputs else {}
                vals = [run_cpu_op(step.op, step.attrs, ins, scales)]
        except ValueError as e:     # a kernel's refusal (float_ops.CpuKernelError too)
            what = step.attrs.get("op_type", step.op) if step.op == "onnx" else step.op
            raise DeviceError(f"CPU step {step.name!r} ({what}): {e}") from None
        for o, v in zip(step.outputs, vals):
            env[o] = v
        st.host_seconds += time.perf_counter() - t0
        st.runs += 1

    @staticmethod
    def _band(step, rows: int):
        for b in step.bands:
            if b.rows == rows:
                return b
        raise DeviceError(f"internal: step {step.name!r} has no row bands of {rows} rows")

    def _step_bufs(self, step, env: dict, n: int, packed: dict, rows: int) -> tuple[dict, dict]:
        """The buffers of ``step``'s input slots: device tensors in place, constants, host
        values packed into ``packed[slot]``; with ``rows``, ``banded`` (slot -> (layout,
        host value)) of the inputs packed per band instead."""
        bufs = {}
        banded = {}                 # slot -> (layout, host value) packed per band
        for slot, src in step.slots.items():
            if slot in step.layouts and slot != "y":
                lay = step.layouts[slot]
                v = env[src]
                if isinstance(v, _Dev) and v.layout == lay:
                    if v.buf is None:
                        raise DeviceError(f"internal: step {step.name!r} reads {src!r}, "
                                          f"evicted (memory-budget schedule)")
                    bufs[slot] = v.buf
                    continue
                x = self._host(env, src, n)
                x = x.reshape((n,) + tuple(lay.shape)) if x.ndim == 2 else x
                if rows:
                    banded[slot] = (lay, x)
                    continue
                # host layout step: (im2col and) packing, pure data movement
                p = lay.pack(x)
                b = packed[slot]
                self._sync(b)       # streamed: an appended segment may still read it
                self._write(b, p)
                bufs[slot] = b
            elif slot != "y":
                bufs[slot] = self._const_buf(src)
        return bufs, banded

    def _vta_step(self, step, env: dict, n: int, nblk: int, packed: dict, yb, keep_progs: int,
                  recompute: bool = False, rows: int = 0):
        """Run one VTA step: inputs in device memory are used in place, the others packed
        by the host into ``packed[slot]``; the output goes to ``yb``.  ``rows``: run it in
        row bands of that height (:class:`~.artifact.RowBands`): ``packed["x"]`` holds one
        band's packed input at a time.  Programs are cached per address set, at most
        ``keep_progs`` per (step, batch blocks)."""
        bufs, banded = self._step_bufs(step, env, n, packed, rows)
        if not rows:
            bufs["y"] = yb
            res = self._launch(step, step.trace, bufs, nblk, keep_progs)
        else:
            band = self._band(step, rows)
            ylay = step.layouts["y"]
            eb = self.cfg.elem_bytes(MemType.OUT)
            parent, base = (yb.parent, yb.offset) if isinstance(yb, _Sub) else (yb, 0)
            res = RunResult(cycles=0, stats={})
            for r0, r1 in band.spans(ylay.shape[1]):
                for slot, (lay, x) in banded.items():
                    b = packed[slot]
                    self._sync(b)
                    self._write(b, lay.pack_rows(x, r0, r1))
                    bufs[slot] = b
                sh = r0 * ylay.hw[1] * eb       # the band's first row in every plane
                bufs["y"] = _Sub(yb.addr + sh, yb.nbytes - sh, parent, base + sh)
                r = self._launch(step, band.trace_of(r1 - r0), bufs, nblk, keep_progs)
                res.cycles += int(r.cycles or 0)
                for k, v in r.stats.items():
                    if isinstance(v, (int, np.integer)):
                        res.stats[k] = res.stats.get(k, 0) + int(v)
        self._count(step, res, n, nblk, recompute)
        env[step.outputs[0]] = _Dev(yb, step.layouts["y"], n)
        return res

    def _count(self, step, res: RunResult, n: int, nblk: int, recompute: bool) -> None:
        """Add one run of ``step`` (its launch result ``res``) to :attr:`stats`."""
        st = self.stats[step.name]
        s = res.stats
        if recompute:
            st.recomputes += 1
        else:
            st.runs += 1
            st.images += n
            st.blocks += nblk
        st.insns += int(s.get("insns", 0))
        st.launches += int(s.get("launches", 0))
        st.gemm_uops += int(s.get("gemm_counter", 0))
        st.alu_uops += int(s.get("alu_counter", 0))
        st.dram_bytes += int(s.get("dram_read_nbytes", 0)) + int(s.get("dram_write_nbytes", 0))
        st.cycles += int(res.cycles or 0)
        for k in UNIT_COUNTERS:         # the core's per-unit counters (rtl, pynq)
            if k in s:
                st.extra[k] = st.extra.get(k, 0) + int(s[k])

    def _launch(self, step, trace, bufs: dict, nblk: int, keep_progs: int) -> RunResult:
        """Run ``trace`` on ``bufs`` (its program instantiated once per address set, at
        most ``keep_progs`` kept per (step, batch blocks))."""
        key = (step.name, trace.uid, nblk, tuple(sorted((k, b.addr, b.nbytes)
                                                        for k, b in bufs.items())))
        prog = self._progs.get(key)
        if prog is None:
            replay(self.builder, trace, bufs, nblk)
            prog = self.builder.record_program()
            keys = self._prog_keys.setdefault((step.name, nblk), [])
            while len(keys) >= max(keep_progs, 1):
                old = self._progs.pop(keys.pop(0), None)
                if old is not None:
                    self._sync()    # streamed: its micro-ops may still be read
                    old.free()
            self._progs[key] = prog
            keys.append(key)
        if self._inflight is not None:
            self._append(prog)      # segments run in order: no wait for buffer reuse
            return RunResult(cycles=0, stats=dict(prog.counters))
        return prog.run()

    def close(self) -> None:
        """Free the device buffers this executor allocated (cached programs included)."""
        for p in self._progs.values():
            p.free()
        self._progs.clear()
        self._prog_keys.clear()
        acts = [b for _, bufs in self._plans.values() for b in bufs]
        acts += [arena for _, arena in self._schedules.values()]
        for b in list(self._consts.values()) + acts:
            try:
                self.device.free(b)
            except DeviceError:
                pass
        self._consts.clear()
        self._plans.clear()
        self._schedules.clear()
        self.builder.close()
