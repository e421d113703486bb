"""``RtlDevice``: the ``rtl`` target, a cycle-accurate Verilator simulation of the core.

The device memory is the harness's DRAM model (C++, byte-addressed, an AXI4 slave on the
core's master port); the host reads and writes it with ``memmove`` through a numpy view.
A run writes the launch registers over AXI4-Lite (``hw/regs.py`` protocol), then the C++
run loop clocks the core and polls ``STATUS.DONE`` every ``poll_interval`` cycles without
returning to Python, until the run completes, a bus rule is broken, or the watchdog fires.
"""

from __future__ import annotations

import time
from typing import Any, Mapping, Sequence

import ctypes
import numpy as np

from ...hw import regs
from ...hw.config import VTAConfig
from ..device import Buffer, Device, DeviceError, ProgramError, RunResult
from .build import TRACE_FORMATS, RtlModel, build_model

#: Default watchdog, cycles from START (``timeout_cycles`` overrides it per device or run).
DEFAULT_TIMEOUT_CYCLES = 50_000_000
#: Cycles between two polls of STATUS.DONE.
DEFAULT_POLL_INTERVAL = 256
#: Reset length in cycles.
RESET_CYCLES = 8

#: RunResult.stats key -> register name; keys match fsim's where they overlap.
STAT_REGISTERS = {
    "fetch_busy": "FETCH_BUSY", "load_busy": "LOAD_BUSY", "compute_busy": "COMPUTE_BUSY",
    "store_busy": "STORE_BUSY", "load_stall": "LOAD_STALL", "compute_stall": "COMPUTE_STALL",
    "store_stall": "STORE_STALL", "gemm_counter": "GEMM_COUNT", "alu_counter": "ALU_COUNT",
    "dram_read_nbytes": "DMA_RD_BYTES", "dram_write_nbytes": "DMA_WR_BYTES",
}
#: dbg_state fields: unit -> (lsb, width).
DBG_FIELDS = {"fetch": (0, 4), "load": (4, 4), "compute": (8, 4), "store": (12, 4)}

_MODELS: dict[tuple[int, str], RtlModel] = {}


def trace_format_of(path: str) -> str:
    """The waveform format of a file name: ``"vcd"`` for ``*.vcd``, ``"fst"`` for ``*.fst``.

    Raises:
        DeviceError: any other suffix.
    """
    fmt = str(path).rsplit(".", 1)[-1].lower() if "." in str(path) else ""
    if fmt not in TRACE_FORMATS:
        raise DeviceError(f"waveform file {str(path)!r}: name must end in "
                          f"{' or '.join('.' + f for f in TRACE_FORMATS)} (the format)")
    return fmt


def _model_for(cfg: VTAConfig, trace: str, progress: bool) -> RtlModel:
    """The generated core's model, built or fetched once per process per (config, waveform
    format ``""``/``"vcd"``/``"fst"``)."""
    k = (cfg.fingerprint, trace)
    if k not in _MODELS:
        _MODELS[k] = build_model(cfg, trace=trace, progress=progress)
    return _MODELS[k]


def _default_state_names() -> Mapping | None:
    try:
        from ...hw.core import DEBUG_STATE_NAMES  # guarded: written by another engineer
    except ImportError:
        return None
    return DEBUG_STATE_NAMES


def describe_dbg_state(dbg: int, names: Mapping | None = None) -> str:
    """One line naming each unit's state in a ``dbg_state`` word.

    Layout (port contract): [3:0] fetch, [7:4] load, [11:8] compute, [15:12] store,
    [23:16] low bits of the fetch unit's instruction index.  ``names[unit][code]`` gives a
    state's name (``DEBUG_STATE_NAMES`` of ``vtaforge.hw.core``); unknown codes print as
    numbers.
    """
    parts = []
    for unit, (lsb, width) in DBG_FIELDS.items():
        code = (dbg >> lsb) & ((1 << width) - 1)
        name = None
        try:
            name = names[unit][code] if names is not None else None
        except (KeyError, IndexError, TypeError):
            name = None
        parts.append(f"{unit}={name}({code})" if name is not None else f"{unit}=state {code}")
    parts.append(f"fetch insn index low bits={(dbg >> 16) & 0xFF}")
    return ", ".join(parts)


class RtlDevice(Device):
    """The Verilator simulation of the core as a :class:`Device` (target ``"rtl"``).

    Args:
        config: the core's configuration.
        mem_bytes: allocatable device memory in bytes (default 64 MiB); the DRAM model
            holds ``config.dram_alignment + mem_bytes`` bytes (address 0 is never handed
            out).  :meth:`resize` grows it.
        latency: ``(min, max)`` random first-beat latency of the DRAM model, cycles.
        backpressure: probability in [0, 0.99] that the DRAM model withholds each
            ready/valid it drives on each cycle (seeded by ``seed``).
        seed: seed of the bus randomisation.
        trace: path of a waveform to write: ``*.vcd`` (VCD, always available) or ``*.fst``
            (FST, needs liblz4-dev and zlib1g-dev to build); uses the separately built
            trace variant of the model (slower).  Both clock edges of every cycle from
            the end of reset are dumped.  Closed by :meth:`close`.
        timeout_cycles: watchdog for each run, cycles (default 50 M).
        poll_interval: cycles between polls of ``STATUS.DONE``.
        model: a prebuilt :class:`RtlModel` (default: build or fetch the generated core's).
        state_names: ``names[unit][code]`` for watchdog messages (default: the core's
            ``DEBUG_STATE_NAMES``).
        progress: print build progress on stderr when a build runs.
        verify: run the static verifier before every launch (default True; harness
            tests that drive a stub core with non-program data turn it off).

    Raises:
        DeviceError: a ``trace`` name with another suffix, or a ``model`` built for
            another waveform format; the core's FINGERPRINT register differs from
            ``config.fingerprint`` (a model built for another config), or the model
            cannot be built or loaded.
    """

    target = "rtl"

    def __init__(self, config: VTAConfig, mem_bytes: int = 64 << 20, *,
                 latency: tuple[int, int] = (0, 0), backpressure: float = 0.0, seed: int = 0,
                 trace: str | None = None, timeout_cycles: int | None = None,
                 poll_interval: int = DEFAULT_POLL_INTERVAL, model: RtlModel | None = None,
                 state_names: Mapping | None = None, progress: bool = True,
                 verify: bool = True):
        super().__init__(config, mem_bytes)
        self._h = None
        lat = tuple(int(x) for x in latency)
        if len(lat) != 2 or lat[0] < 0 or lat[1] < lat[0]:
            raise DeviceError(f"latency must be (min, max) cycles with 0 <= min <= max, "
                              f"got {latency!r}")
        if not 0.0 <= backpressure <= 0.99:
            raise DeviceError(f"backpressure must be a probability in [0, 0.99], "
                              f"got {backpressure}")
        fmt = trace_format_of(trace) if trace is not None else ""
        if model is None:
            model = _model_for(config, fmt, progress)
        if fmt and model.trace != fmt:
            raise DeviceError(f"trace={str(trace)!r} needs a model built with trace={fmt!r}, "
                              f"this one has {model.trace or 'no'} waveform support")
        self.model = model
        self.verify = verify
        self.timeout_cycles = int(timeout_cycles or DEFAULT_TIMEOUT_CYCLES)
        self.poll_interval = max(1, int(poll_interval))
        self.state_names = state_names if state_names is not None else _default_state_names()
        self._lib = model.load()
        if self._lib.vh_bus_bytes() != config.BUS_WIDTH // 8:
            raise DeviceError(f"model has a {self._lib.vh_bus_bytes() * 8}-bit AXI bus, "
                              f"config {config.BUS_WIDTH}-bit")
        self._h = self._lib.vh_create(self.allocator.base + mem_bytes)
        if not self._h:
            raise DeviceError(f"cannot allocate a {mem_bytes}-byte DRAM model")
        self._lib.vh_set_bus(self._h, lat[0], lat[1], float(backpressure), int(seed))
        self.reset()
        if trace is not None and self._lib.vh_trace_open(self._h, str(trace).encode()) != 0:
            msg = self._error()
            self.close()
            raise DeviceError(f"cannot start {fmt.upper()} waveform {str(trace)!r}: {msg}")
        fp = self.reg_read("FINGERPRINT")
        if fp != config.fingerprint:
            self.close()
            raise DeviceError(f"RTL core fingerprint 0x{fp:08x} differs from the config's "
                              f"0x{config.fingerprint:08x}: the model was built for another "
                              f"configuration; refusing to run")

    # ------------------------------------------------------------------ low level
    def _error(self) -> str:
        return self._lib.vh_last_error(self._h).decode(errors="replace")

    def _check(self, rc: int, what: str) -> None:
        if rc != 0:
            raise DeviceError(f"{what}: {self._error()}")

    def reset(self) -> None:
        """Hold the core in reset for a few cycles; clears bus state and recorded errors.
        Device memory is kept."""
        self._lib.vh_reset(self._h, RESET_CYCLES)

    def reg_read(self, name_or_offset: str | int) -> int:
        """Read a control register (name from ``hw/regs.py`` or byte offset) over AXI4-Lite."""
        off = regs.offset(name_or_offset) if isinstance(name_or_offset, str) else name_or_offset
        out = ctypes.c_uint32()
        self._check(self._lib.vh_reg_read(self._h, off, ctypes.byref(out)),
                    f"register read 0x{off:02x}")
        return out.value

    def reg_write(self, name_or_offset: str | int, value: int) -> None:
        """Write a control register over AXI4-Lite."""
        off = regs.offset(name_or_offset) if isinstance(name_or_offset, str) else name_or_offset
        self._check(self._lib.vh_reg_write(self._h, off, value & 0xFFFFFFFF),
                    f"register write 0x{off:02x}")

    def step(self, cycles: int) -> None:
        """Run the clock for ``cycles`` cycles (the DRAM model stays active)."""
        self._check(self._lib.vh_step(self._h, cycles), "step")

    @property
    def cycle(self) -> int:
        """Cycles simulated since the harness was created (reset included)."""
        return int(self._lib.vh_cycle(self._h))

    @property
    def dbg_state(self) -> int:
        """The core's ``dbg_state`` output now."""
        return int(self._lib.vh_dbg_state(self._h))

    @property
    def irq(self) -> bool:
        """The core's interrupt line now."""
        return bool(self._lib.vh_irq(self._h))

    @property
    def mem(self) -> np.ndarray:
        """The whole DRAM model as a writable ``uint8`` view (invalid after :meth:`resize`)."""
        n = int(self._lib.vh_mem_size(self._h))
        return np.ctypeslib.as_array(self._lib.vh_mem_ptr(self._h), shape=(n,))

    def resize(self, nbytes: int) -> None:
        """Resize the DRAM model to ``nbytes`` bytes (contents kept, new bytes zero)."""
        if self._lib.vh_mem_resize(self._h, int(nbytes)) != 0:
            raise DeviceError(f"cannot resize the DRAM model to {nbytes} bytes")

    def _write_mem(self, addr: int, data: np.ndarray) -> None:
        m = self.mem
        if addr < 0 or addr + data.size > m.size:
            raise DeviceError(f"write [0x{addr:x}, 0x{addr + data.size:x}) outside the "
                              f"{m.size}-byte DRAM model")
        m[addr:addr + data.size] = data

    def _read_mem(self, addr: int, nbytes: int) -> np.ndarray:
        m = self.mem
        if addr < 0 or addr + nbytes > m.size:
            raise DeviceError(f"read [0x{addr:x}, 0x{addr + nbytes:x}) outside the "
                              f"{m.size}-byte DRAM model")
        return m[addr:addr + nbytes].copy()

    # ------------------------------------------------------------------ runs
    def launch(self, insn_addr: int, insn_count: int) -> None:
        """Write the launch registers and CTRL.START, keeping CTRL.IRQ_EN (no waiting, no
        verification).

        Raises:
            ProgramError: the bus failed while the registers were written (the core may
                already be running a previous launch's DMA).
        """
        ctrl = ctypes.c_uint32()
        rc = self._lib.vh_reg_read(self._h, regs.offset("CTRL"), ctypes.byref(ctrl))
        if rc != 0:
            self._raise_run_error(rc, 0)
        start = 1 | (ctrl.value & 2)  # keep IRQ_EN as the host set it
        for name, value in (("INSN_ADDR_LO", insn_addr & 0xFFFFFFFF),
                            ("INSN_ADDR_HI", insn_addr >> 32), ("INSN_COUNT", insn_count),
                            ("CTRL", start)):
            rc = self._lib.vh_reg_write(self._h, regs.offset(name), value & 0xFFFFFFFF)
            if rc != 0:
                self._raise_run_error(rc, 0)

    def _raise_run_error(self, rc: int, limit: int) -> None:
        msg = self._error()
        dbg = self.dbg_state
        self.reset()
        units = describe_dbg_state(dbg, self.state_names)
        if rc == -2:
            raise ProgramError(f"RTL watchdog: run not done after {limit} cycles; {units}")
        raise ProgramError(f"RTL run failed: {msg}; {units}")

    def wait(self, timeout_cycles: int | None = None) -> RunResult:
        """Clock the core until STATUS.DONE, then read CYCLES and the counters.

        Raises:
            ProgramError: a bus rule broken (4 KiB crossing, access outside the DRAM image,
                WLAST mismatch, ...) or the watchdog fired (message names each unit's
                state).  The core is reset afterwards; device memory is kept.
        """
        limit = int(timeout_cycles or self.timeout_cycles)
        c0, t0 = self.cycle, time.perf_counter()
        rc = self._lib.vh_run_until_done(self._h, limit, self.poll_interval)
        wall = time.perf_counter() - t0
        if rc != 0:
            self._raise_run_error(rc, limit)
        sim_cycles = self.cycle - c0
        cycles = self.reg_read("CYCLES_LO") | (self.reg_read("CYCLES_HI") << 32)
        stats: dict[str, Any] = {"cycles": cycles}
        for key, reg_name in STAT_REGISTERS.items():
            stats[key] = self.reg_read(reg_name)
        stats["axi_rd_bursts"] = int(self._lib.vh_stat(self._h, 0))
        stats["axi_wr_bursts"] = int(self._lib.vh_stat(self._h, 1))
        stats["sim_cycles"] = sim_cycles
        stats["sim_seconds"] = wall
        stats["sim_cycles_per_second"] = sim_cycles / wall if wall > 0 else 0.0
        return RunResult(cycles=cycles, stats=stats)

    def run(self, insn_addr: int, insn_count: int, *,
            regions: Sequence[Buffer] | None = None, timeout_cycles: int | None = None
            ) -> RunResult:
        """Verify, launch and complete one program (see :meth:`Device.run`).

        The static verifier (``vtaforge.runtime.verify.verify_program``) runs first (unless
        ``verify=False``) on the memory the program may touch (``regions``, default every
        live buffer); then the core runs until DONE.  ``stats`` holds the register
        counters (``cycles``, ``fetch_busy`` ... ``store_stall``, ``gemm_counter``,
        ``alu_counter``, ``dram_read_nbytes``, ``dram_write_nbytes``), the harness's
        ``axi_rd_bursts``/``axi_wr_bursts``/``sim_cycles``/``sim_seconds``/
        ``sim_cycles_per_second``, and the verifier's data-independent fsim counters.

        Raises:
            ProgramError: rejected by the verifier, a bus rule broken, or the watchdog.
        """
        if insn_count <= 0:
            raise ProgramError(f"insn_count must be positive, got {insn_count}")
        if regions is None:
            regions = self.buffers()
        static: dict[str, Any] = {}
        if self.verify:
            try:
                from ..verify import verify_program  # guarded: another engineer's module
            except ImportError:
                verify_program = None
            if verify_program is not None:
                report = verify_program(self.config, self.mem, insn_addr, insn_count,
                                        list(regions))
                static = dict(getattr(report, "stats", {}) or {})
        self.launch(insn_addr, insn_count)
        res = self.wait(timeout_cycles)
        # data-independent counts from the verifier (per-opcode, bytes per memory type),
        # overridden by what the hardware counted where both exist
        res.stats = {**static, **res.stats}
        return res

    def close(self) -> None:
        """Close the waveform and free the simulation."""
        if self._h is not None:
            self._lib.vh_trace_close(self._h)
            self._lib.vh_destroy(self._h)
            self._h = None

    def __del__(self):
        try:
            self.close()
        except Exception:
            pass


def run_raw(cfg: VTAConfig, dram: np.ndarray, insn_addr: int, insn_count: int,
            **kw: Any) -> RunResult:
    """Run a whole raw DRAM image on the RTL simulation (``vtaforge exec --target rtl``).

    Args:
        cfg: the core's configuration.
        dram: the device memory image, a 1-D C-contiguous ``uint8`` array; the program may
            touch all of it (it is the only region).  On success it is updated in place
            with the memory after the run; on error it is left unchanged.
        insn_addr: byte address of the first instruction in ``dram``.
        insn_count: number of 16-byte instructions.
        **kw: :class:`RtlDevice` options (``latency``, ``backpressure``, ``seed``,
            ``trace``, ``timeout_cycles``, ``poll_interval``, ``model``, ``progress``).

    Returns:
        the run's :class:`RunResult`.

    Raises:
        ProgramError: as :meth:`RtlDevice.run`.
        DeviceError: bad ``dram`` array, build or fingerprint failure.
    """
    if not isinstance(dram, np.ndarray) or dram.dtype != np.uint8 or dram.ndim != 1:
        raise DeviceError("dram must be a 1-D numpy uint8 array")
    if not dram.flags.c_contiguous or not dram.flags.writeable:
        raise DeviceError("dram must be C-contiguous and writeable")
    align = cfg.dram_alignment
    dev = RtlDevice(cfg, max(align, dram.size - align), **kw)
    try:
        dev.resize(dram.size)
        dev.mem[:] = dram
        res = dev.run(insn_addr, insn_count, regions=[Buffer(0, dram.size)])
        dram[:] = dev.mem
        return res
    finally:
        dev.close()
