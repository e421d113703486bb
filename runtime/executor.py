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
- Device memory: packed constants (weights, biases) are copied once per executor;
  activation buffers are allocated per (step, slot, batch blocks) on first use and reused
  by every later run of the same shape.  A VTA output stays on the device and feeds the
  next VTA step directly when the packed layouts agree (same channel block, no host
  padding); otherwise the host unpacks and repacks it.

Errors: wrong input name, shape or dtype raise :class:`~.device.DeviceError` with one
line; device faults propagate as :class:`~.device.ProgramError`.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from .artifact import CompiledModel, SlotLayout, replay
from .builder import ProgramBuilder
from .cpu_ops import run_cpu_op, unpack_act
from .device import Device, DeviceError

__all__ = ["Executor", "StepStats"]


@dataclass
class StepStats:
    """Counters of one step summed over runs: ``runs``, ``images``, ``insns``,
    ``gemm_uops`` (GEMM micro-ops executed), ``alu_uops``, ``dram_bytes`` (read + written
    by the core), ``launches``, ``host_seconds`` is not tracked."""

    runs: int = 0
    images: int = 0
    insns: int = 0
    gemm_uops: int = 0
    alu_uops: int = 0
    dram_bytes: int = 0
    launches: int = 0
    extra: dict = field(default_factory=dict)


@dataclass
class _Dev:
    buf: object
    layout: SlotLayout
    n: int


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
        self.model = model
        self.device = device
        self.cfg = device.config
        self.builder = ProgramBuilder(device, max_insns_per_launch=max_insns_per_launch)
        self._consts: dict[str, object] = {}
        self._acts: dict[tuple, object] = {}
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

    def _act_buf(self, key: tuple, nbytes: int):
        b = self._acts.get(key)
        if b is None or b.nbytes < nbytes:
            if b is not None:
                self.device.free(b)
            b = self.device.alloc(nbytes)
            self._acts[key] = b
        return b

    def _shape(self, tensor: str, n: int) -> tuple:
        shape = self.model.types[tensor][1]
        return tuple(n if not isinstance(d, int) else d for d in shape)

    def _host(self, env: dict, tensor: str, n: int) -> np.ndarray:
        v = env[tensor]
        if isinstance(v, _Dev):
            lay = v.layout
            c, h, w = lay.shape
            raw = self.device.read(v.buf, lay.nbytes(v.n))
            x = unpack_act(raw, v.n, c, h, w, lay.batch, lay.cblk)
            x = x.reshape(self._shape(tensor, n))
            env[tensor] = x
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
            shape = m.types[name][1]
            if x.dtype.kind != "f":
                raise DeviceError(f"input {name!r} has dtype {x.dtype}, expected float32")
            if x.ndim != len(shape) or any(isinstance(d, int) and d != s
                                           for d, s in zip(shape, x.shape)):
                raise DeviceError(f"input {name!r} has shape {list(x.shape)}, expected "
                                  f"{list(shape)}")
            if x.shape[0] < 1:
                raise DeviceError(f"input {name!r} has an empty batch")
            if n is not None and x.shape[0] != n:
                raise DeviceError("inputs disagree on the batch size")
            n = x.shape[0]
            out[name] = x.astype(np.float32)
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
        m = self.model
        nblk = -(-n // self.cfg.BATCH)
        for step in m.steps:
            st = self.stats[step.name]
            if step.target == "cpu":
                ins = [m.constants[i] if i in m.constants else self._host(env, i, n)
                       for i in step.inputs]
                scales = {"in": m.types[step.inputs[0]][3]}
                env[step.outputs[0]] = run_cpu_op(step.op, step.attrs, ins, scales)
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
                    b = self._act_buf((step.name, slot, nblk), p.nbytes)
                    self.device.write(b, p)
                    bufs[slot] = b
                elif slot != "y":
                    bufs[slot] = self._const_buf(src)
            ylay = step.layouts["y"]
            yb = self._act_buf((step.name, "y", nblk), ylay.nbytes(n))
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
            env[step.outputs[0]] = _Dev(yb, ylay, n)
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
        for b in list(self._consts.values()) + list(self._acts.values()):
            try:
                self.device.free(b)
            except DeviceError:
                pass
        self._consts.clear()
        self._acts.clear()
        self.builder.close()
