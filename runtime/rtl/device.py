"""``RtlDevice``: the ``rtl`` target, a cycle-accurate Verilator simulation of the core.

The device memory is the harness's DRAM model (C++, byte-addressed, an AXI4 slave on the
core's master port); the host reads and writes it with ``memmove`` through a numpy view.
Runs follow the one launch protocol of :mod:`vtaforge.runtime.mmio` (``CoreDriver``): its
register port is the harness's AXI4-Lite master (``Harness``), and its watchdog counts
simulated cycles, clocking the core ``poll_interval`` cycles between two polls of
``STATUS.DONE``, until the run completes, a bus rule is broken, or the watchdog fires.

:class:`~vtaforge.runtime.rtl.harness.Harness` (``harness.py``) is the simulated core;
streamed execution (a core built with ``INSN_RING > 0``; :meth:`RtlDevice.stream_open`) is
:class:`~vtaforge.runtime.rtl.stream.RtlStreamMixin`'s (``stream.py``).
"""

from __future__ import annotations

import time
from typing import Any, Mapping, Sequence

import numpy as np

from ...hw import regs
from ...hw.config import VTAConfig
from ..device import Buffer, Device, DeviceError, ProgramError, RunResult
from ..mmio import CoreDriver, CoreIdentityError, CoreTimeout, Watchdog, field_mask
from .build import TRACE_FORMATS, RtlModel, build_model
from .harness import Harness, HarnessError
from .stream import RtlStreamMixin

#: Default watchdog, cycles from START (``timeout_cycles`` overrides it per device or run).
DEFAULT_TIMEOUT_CYCLES = 50_000_000
#: Cycles between two polls of STATUS.DONE.
DEFAULT_POLL_INTERVAL = 256
#: Cycles the wait may clock past the watchdog limit: a STATUS read (AXI4-Lite) takes a
#: few cycles, and CYCLES (the limit's unit) starts at START, before the wait begins.
WATCHDOG_SLACK = 16
#: Reset length in cycles.
RESET_CYCLES = 8

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


class RtlDevice(RtlStreamMixin, Device):
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
        self.harness: Harness | None = None
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
        h = Harness(model, _whole_beats(config, self.allocator.base + mem_bytes))
        if h.bus_bytes != config.BUS_WIDTH // 8:
            h.close()
            raise DeviceError(f"model has a {h.bus_bytes * 8}-bit AXI bus, "
                              f"config {config.BUS_WIDTH}-bit")
        self.harness = h
        self._lib, self._h = h._lib, h._h  # for tests that read harness statistics
        h.set_bus(lat[0], lat[1], float(backpressure), int(seed))
        self.reset()
        if trace is not None and h.trace_open(str(trace)) != 0:
            msg = h.last_error
            self.close()
            raise DeviceError(f"cannot start {fmt.upper()} waveform {str(trace)!r}: {msg}")
        # fault reports name the instruction: the driver reads the program back
        self.driver = CoreDriver(h, where="RTL core", config=config,
                                 read_program=self._read_mem)
        try:
            self.driver.identify(config)
        except CoreIdentityError:
            self.close()
            raise

    @property
    def checks_in_run(self) -> bool:
        """True with ``verify``: :meth:`run` runs the whole static verifier before it
        launches, so the program builder skips its own dry run."""
        return bool(self.verify)

    # ------------------------------------------------------------------ low level
    def reset(self) -> None:
        """Hold the core in reset for a few cycles; clears bus state and recorded errors.
        Device memory is kept."""
        self.harness.reset(RESET_CYCLES)

    def reg_read(self, name_or_offset: str | int) -> int:
        """Read a control register (name from ``hw/regs.py`` or byte offset) over AXI4-Lite.

        Raises:
            DeviceError: the bus failed.
        """
        off = regs.offset(name_or_offset) if isinstance(name_or_offset, str) else name_or_offset
        return self.harness.read(off)

    def reg_write(self, name_or_offset: str | int, value: int, *, raw: bool = False) -> None:
        """Write a control register over AXI4-Lite.  A ring register named by its name is
        checked by the driver first (``CoreDriver.check_write``, against the open stream
        session); ``raw=True`` writes it unchecked, as a host bypassing the driver would
        (the core then refuses what is unsafe: a ring fault).

        Raises:
            DeviceError: the driver refused the write (nothing was written).
        """
        if isinstance(name_or_offset, str) and not raw:
            st = getattr(self, "_stream", None)
            (st["driver"] if st is not None else self.driver).write(name_or_offset, value)
            return
        off = regs.offset(name_or_offset) if isinstance(name_or_offset, str) else name_or_offset
        self.harness.write(off, value)

    def step(self, cycles: int) -> None:
        """Run the clock for ``cycles`` cycles (the DRAM model stays active)."""
        self.harness.step(cycles)

    @property
    def cycle(self) -> int:
        """Cycles simulated since the harness was created (reset included)."""
        return self.harness.cycle

    @property
    def dbg_state(self) -> int:
        """The core's ``dbg_state`` output now."""
        return self.harness.dbg_state

    @property
    def irq(self) -> bool:
        """The core's interrupt line now."""
        return self.harness.irq

    @property
    def mem(self) -> np.ndarray:
        """The whole DRAM model as a writable ``uint8`` view (invalid after :meth:`resize`)."""
        return self.harness.mem

    def resize(self, nbytes: int) -> None:
        """Resize the DRAM model to ``nbytes`` bytes (contents kept, new bytes zero)."""
        self.harness.resize(nbytes)

    def _write_mem(self, addr: int, data: np.ndarray) -> None:
        st = getattr(self, "_stream", None)
        if st is not None and st["thread"] is not None:
            with st["lock"]:
                return self._write_mem_now(addr, data)
        return self._write_mem_now(addr, data)

    def _write_mem_now(self, addr: int, data: np.ndarray) -> None:
        m = self.mem
        if addr < 0 or addr + data.size > m.size:
            raise DeviceError(f"write [0x{addr:x}, 0x{addr + data.size:x}) outside the "
                              f"{m.size}-byte DRAM model")
        m[addr:addr + data.size] = data

    def _read_mem(self, addr: int, nbytes: int) -> np.ndarray:
        st = getattr(self, "_stream", None)
        if st is not None and st["thread"] is not None:
            with st["lock"]:
                return self._read_mem_now(addr, nbytes)
        return self._read_mem_now(addr, nbytes)

    def _read_mem_now(self, addr: int, nbytes: int) -> np.ndarray:
        m = self.mem
        if addr < 0 or addr + nbytes > m.size:
            raise DeviceError(f"read [0x{addr:x}, 0x{addr + nbytes:x}) outside the "
                              f"{m.size}-byte DRAM model")
        return m[addr:addr + nbytes].copy()

    # ------------------------------------------------------------------ runs
    def launch(self, insn_addr: int, insn_count: int) -> None:
        """Start a run (``CoreDriver.launch``), keeping ``CTRL.IRQ_EN`` as the host set it
        (no waiting, no verification).

        Raises:
            ProgramError: the bus failed while the registers were written (the core may
                already be running a previous launch's DMA), or the core is still busy.
        """
        try:
            self.driver.launch(insn_addr, insn_count, irq=None)
        except HarnessError as e:
            self._raise_run_error(e, 0)
        except DeviceError as e:  # busy, or the values do not fit
            raise ProgramError(str(e)) from None

    def _raise_run_error(self, err: Exception, limit: int) -> None:
        msg = self.harness.last_error or str(err)
        dbg = self.dbg_state
        self.reset()
        units = describe_dbg_state(dbg, self.state_names)
        if isinstance(err, CoreTimeout):
            raise ProgramError(f"RTL watchdog: run not done after {limit} cycles; {units}")
        raise ProgramError(f"RTL run failed: {msg}; {units}")

    def wait(self, timeout_cycles: int | None = None) -> RunResult:
        """Clock the core until STATUS.DONE (``CoreDriver.wait`` with a cycle watchdog),
        then read CYCLES and the counters.

        Raises:
            ProgramError: a bus rule broken (4 KiB crossing, access outside the DRAM image,
                WLAST mismatch, ...) or the watchdog fired (message names each unit's
                state; the core is reset afterwards; device memory is kept), or the run
                completed but its CYCLES exceed ``timeout_cycles`` (the limit is exact:
                a run passes iff CYCLES <= limit).
        """
        limit = int(timeout_cycles or self.timeout_cycles)
        h = self.harness
        c0, t0 = h.cycle, time.perf_counter()
        # The watchdog is exact: the simulation is clocked at most up to the limit (plus
        # the few cycles a STATUS read takes, WATCHDOG_SLACK), never a whole poll interval
        # past it, and a run whose CYCLES counter exceeds the limit is refused even when
        # DONE was seen in the same poll (CYCLES counts from START, the unit the limit is
        # given in).
        stop = c0 + limit + WATCHDOG_SLACK
        poll = self.poll_interval
        status, done = regs.offset("STATUS"), field_mask("STATUS", "DONE")

        def idle() -> None:
            # CoreDriver.wait's loop of steps and STATUS reads, run inside the harness until
            # DONE (or the limit): the same cycles, no Python round trip per poll
            h.poll(status, done, poll, stop)

        dog = Watchdog(limit + WATCHDOG_SLACK, lambda: h.cycle, idle, "cycles")
        try:
            self.driver.wait(dog)
        except (HarnessError, CoreTimeout) as e:
            self._raise_run_error(e, limit)
        wall = time.perf_counter() - t0
        sim_cycles = h.cycle - c0
        stats: dict[str, Any] = dict(self.driver.counters())
        if stats["cycles"] > limit:
            raise ProgramError(f"RTL watchdog: the run took {stats['cycles']} cycles, more "
                               f"than the watchdog's {limit}")
        stats["axi_rd_bursts"] = h.stat(0)
        stats["axi_wr_bursts"] = h.stat(1)
        stats["sim_cycles"] = sim_cycles
        stats["sim_seconds"] = wall
        stats["sim_cycles_per_second"] = sim_cycles / wall if wall > 0 else 0.0
        return RunResult(cycles=stats["cycles"], stats=stats)

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
            ProgramError: rejected by the verifier, a bus rule broken, or the watchdog
                (``insn_index`` None: no instruction is decoded from a bus error or a hang).
            CoreFault: a ``ProgramError``: the core reported a scratchpad fault; its
                ``insn_index`` is the instruction the error registers name (``ERR_INSN``).
        """
        if insn_count <= 0:
            raise ProgramError(f"insn_count must be positive, got {insn_count}")
        if regions is None:
            regions = self.buffers()
        static: dict[str, Any] = {}
        if self.verify:
            from ..verify import verify_program  # noqa: PLC0415

            report = verify_program(self.config, self.mem, insn_addr, insn_count,
                                    list(regions))
            static = dict(report.stats)
        self.launch(insn_addr, insn_count)
        res = self.wait(timeout_cycles)
        # data-independent counts from the verifier (per-opcode, bytes per memory type),
        # overridden by what the hardware counted where both exist
        res.stats = {**static, **res.stats}
        return res

    def close(self) -> None:
        """Close the waveform and free the simulation."""
        if self.harness is not None:
            self.harness.close()
            self.harness = None

    def __del__(self):
        try:
            self.close()
        except Exception:
            pass


def _whole_beats(cfg: VTAConfig, nbytes: int) -> int:
    """``nbytes`` rounded up to whole AXI data beats of ``cfg``'s bus."""
    beat = cfg.BUS_WIDTH // 8
    return -(-int(nbytes) // beat) * beat


def run_raw(cfg: VTAConfig, dram: np.ndarray, insn_addr: int, insn_count: int,
            **kw: Any) -> RunResult:
    """Run a whole raw DRAM image on the RTL simulation (``vtaforge exec --target rtl``).

    Args:
        cfg: the core's configuration.
        dram: the device memory image, a 1-D C-contiguous ``uint8`` array; the program may
            touch all of it (it is the only region).  Its size need not be a multiple of
            the bus beat: the DRAM model is padded with zeros to whole beats (the core
            moves whole beats) and only the image's bytes come back.  On success it is
            updated in place with the memory after the run; on error it is left unchanged.
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
    # The DRAM model holds whole bus beats: the core reads and writes whole beats, so an
    # image whose size is not a multiple of the beat is padded with zeros (the program may
    # still touch only the image; the padding never comes back).
    padded = _whole_beats(cfg, dram.size)
    dev = RtlDevice(cfg, max(align, padded - align), **kw)
    try:
        dev.resize(padded)
        m = dev.mem
        m[:dram.size] = dram
        m[dram.size:] = 0
        res = dev.run(insn_addr, insn_count, regions=[Buffer(0, dram.size)])
        dram[:] = dev.mem[:dram.size]
        return res
    finally:
        dev.close()
