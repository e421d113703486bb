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

Errors: wrong input name, shape or dtype raise :class:`~.device.DeviceError` with one
line; device faults propagate as :class:`~.device.ProgramError`.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import numpy as np

from .artifact import CompiledModel, SlotLayout, replay
from .builder import ProgramBuilder
from .cpu_float import REAL_OPS, run_float_op, run_onnx_node
from .cpu_ops import run_cpu_op, unpack_act
from .device import Device, DeviceError

__all__ = ["Executor", "StepStats", "MemoryPlan", "plan_memory", "UNIT_COUNTERS"]


@dataclass
class StepStats:
    """Counters of one step summed over runs: ``runs``, ``images``, ``insns``,
    ``gemm_uops`` (GEMM micro-ops executed), ``alu_uops``, ``dram_bytes`` (read + written
    by the core), ``launches``, ``host_seconds`` (wall seconds of CPU steps' kernels),
    ``cycles`` (core cycles: rtl and board backends; 0 on fsim), ``blocks`` (batch blocks run),
    ``extra`` (sums of the core's per-unit counters :data:`UNIT_COUNTERS` where the backend
    reports them)."""

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


#: per-unit counters of the core's statistics (``docs/regs.md``), summed per step
UNIT_COUNTERS = ("fetch_busy", "load_busy", "compute_busy", "store_busy", "load_stall",
                 "compute_stall", "store_stall")

_HOST = ("host copies",)       # env key of the per-run host cache (never a tensor name)


@dataclass
class _Dev:
    buf: object
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
            plan).
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


def plan_memory(model: CompiledModel, nblk: int) -> MemoryPlan:
    """Liveness plan of the activation buffers of ``model`` for ``nblk`` batch blocks.

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
    peak = max((sum(size[k] for k in life if life[k][0] <= i <= life[k][1])
                for i in range(end + 1)), default=0)
    return MemoryPlan(nblk, assign, sizes, {k: tuple(v) for k, v in life.items()},
                      sum(size.values()), peak)


class Executor:
    """Run a compiled model on a device.

    Args:
        model: the :class:`CompiledModel` (from the compiler or ``load_artifact``).
        device: a :class:`Device` whose config has the model's fingerprint.
        max_insns_per_launch: forwarded to the :class:`ProgramBuilder`.
    Raises:
        DeviceError: the device's config differs from the model's.
    """

    def __init__(self, model: CompiledModel, device: Device, *,
                 max_insns_per_launch: int = 65536):
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
        self._prog_keys: dict[tuple, tuple] = {}
        self.stats: dict[str, StepStats] = {s.name: StepStats() for s in model.steps}

    # ----------------------------------------------------------------- memory
    def _const_buf(self, name: str):
        b = self._consts.get(name)
        if b is None:
            arr = np.ascontiguousarray(self.model.constants[name])
            b = self.device.alloc(max(arr.nbytes, 1))
            self.device.write(b, arr)
            self._consts[name] = b
        return b

    def _plan(self, nblk: int) -> tuple[MemoryPlan, list]:
        pb = self._plans.get(nblk)
        if pb is None:
            plan = plan_memory(self.model, nblk)
            bufs = []
            try:
                for n in plan.sizes:
                    bufs.append(self.device.alloc(max(n, 1)))
            except BaseException:
                for b in bufs:
                    self.device.free(b)
                raise
            pb = self._plans[nblk] = (plan, bufs)
        return pb

    def memory_report(self) -> dict[str, int]:
        """Device-memory footprint in bytes: ``constants`` (packed weights/biases, resident),
        ``activations`` (the liveness-planned buffers of every shape run so far),
        ``activations_unshared`` (what one buffer per (step, slot, shape) would take),
        ``activations_peak_live`` (the most bytes live at one step: a lower bound),
        ``programs`` (cached instruction and micro-op buffers), ``total``
        (constants + activations + programs)."""
        c = sum(b.nbytes for b in self._consts.values())
        a = sum(p.nbytes for p, _ in self._plans.values())
        u = sum(p.unshared_bytes for p, _ in self._plans.values())
        pk = sum(p.peak_live_bytes for p, _ in self._plans.values())
        pr = sum(b.nbytes for p in self._progs.values() for b in (p.buffers or ()))
        return {"constants": c, "activations": a, "activations_unshared": u,
                "activations_peak_live": pk, "programs": pr,
                "total": c + a + pr}

    def _shape(self, tensor: str, n: int) -> tuple:
        shape = self.model.types[tensor][1]
        return tuple(n if not isinstance(d, int) else d for d in shape)

    def _host(self, env: dict, tensor: str, n: int) -> np.ndarray:
        """The host (logical int8) value of ``tensor``; a device tensor is read back once per
        run (the host copy is cached in ``env[_HOST]``; the device copy stays valid
        for its planned lifetime)."""
        v = env[tensor]
        if isinstance(v, _Dev):
            hc = env[_HOST]
            x = hc.get(tensor)
            if x is None:
                lay = v.layout
                c, h, w = lay.shape
                raw = self.device.read(v.buf, lay.nbytes(v.n))
                x = unpack_act(raw, v.n, c, h, w, lay.batch, lay.cblk)
                x = hc[tensor] = x.reshape(self._shape(tensor, n))
            return x
        return v

    # ----------------------------------------------------------------- running
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
        plan, pool = self._plan(nblk)
        for i, step in enumerate(m.steps):
            st = self.stats[step.name]
            if step.target == "cpu":
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
                continue
            bufs = {}
            for slot, src in step.slots.items():
                if slot in step.layouts and slot != "y":
                    lay = step.layouts[slot]
                    v = env[src]
                    if isinstance(v, _Dev) and v.layout == lay:
                        bufs[slot] = v.buf
                        continue
                    x = self._host(env, src, n)
                    # host layout step: (im2col and) packing, pure data movement
                    p = lay.pack(x.reshape((n,) + tuple(lay.shape)) if x.ndim == 2 else x)
                    b = pool[plan.assign[(i, slot)]]
                    self.device.write(b, p)
                    bufs[slot] = b
                elif slot != "y":
                    bufs[slot] = self._const_buf(src)
            ylay = step.layouts["y"]
            yb = pool[plan.assign[(i, "y")]]
            bufs["y"] = yb
            key = (step.name, nblk, tuple(sorted((k, b.addr, b.nbytes)
                                                 for k, b in bufs.items())))
            prog = self._progs.get(key)
            if prog is None:
                replay(self.builder, step.trace, bufs, nblk)
                prog = self.builder.record_program()
                old = self._progs.pop(self._prog_keys.get((step.name, nblk)), None)
                if old is not None:
                    old.free()
                self._progs[key] = prog
                self._prog_keys[(step.name, nblk)] = key
            res = prog.run()
            s = res.stats
            st.runs += 1
            st.images += n
            st.insns += int(s.get("insns", 0))
            st.launches += int(s.get("launches", 0))
            st.gemm_uops += int(s.get("gemm_counter", 0))
            st.alu_uops += int(s.get("alu_counter", 0))
            st.dram_bytes += int(s.get("dram_read_nbytes", 0)) + int(s.get("dram_write_nbytes", 0))
            st.cycles += int(res.cycles or 0)
            for k in UNIT_COUNTERS:         # the core's per-unit counters (rtl, pynq)
                if k in s:
                    st.extra[k] = st.extra.get(k, 0) + int(s[k])
            st.blocks += nblk
            env[step.outputs[0]] = _Dev(yb, ylay, n)
            if keep:        # read back before a later step may reuse the buffer
                self._host(env, step.outputs[0], n)
        names = list(env) if keep else m.outputs
        out = {}
        for k in names:
            if k in m.types:
                out[k] = self._host(env, k, n)
        return out

    def close(self) -> None:
        """Free the device buffers this executor allocated (cached programs included)."""
        for p in self._progs.values():
            p.free()
        self._progs.clear()
        self._prog_keys.clear()
        acts = [b for _, bufs in self._plans.values() for b in bufs]
        for b in list(self._consts.values()) + acts:
            try:
                self.device.free(b)
            except DeviceError:
                pass
        self._consts.clear()
        self._plans.clear()
        self.builder.close()
