"""``RtlDevice``: the ``rtl`` target, a cycle-accurate Verilator simulation of the core.

The device memory is the harness's DRAM model (C++, byte-addressed, an AXI4 slave on the
core's master port); the host reads and writes it with ``memmove`` through a numpy view.
Runs follow the one launch protocol of :mod:`vtaforge.runtime.mmio` (``CoreDriver``): its
register port is the harness's AXI4-Lite master (:class:`Harness`), and its watchdog counts
simulated cycles, clocking the core ``poll_interval`` cycles between two polls of
``STATUS.DONE``, until the run completes, a bus rule is broken, or the watchdog fires.

:class:`Harness` (one simulated core with its DRAM model, as a register port with a
clock) is also what ``tests/runtime/fakepynq`` builds its simulated PYNQ board on.

Streamed execution (a core built with ``INSN_RING > 0``; :meth:`RtlDevice.stream_open`):
the ring protocol of :class:`~vtaforge.runtime.mmio.CoreDriver`.  By default a clock
thread runs the simulation freely while the session is open, as a board's clock runs: the
host appends segments and does its own work while the core executes them (each
``vh_step`` call releases the GIL).  One lock serialises the harness between the thread and
the host's register and memory accesses.
"""

from __future__ import annotations

import threading
import time
from typing import Any, Mapping, Sequence

import ctypes
import numpy as np

from ...hw import regs
from ...hw.config import VTAConfig
from ..device import Buffer, Device, DeviceError, ProgramError, RunResult
from ..mmio import STAT_REGISTERS, CoreDriver, CoreFault, CoreIdentityError, CoreTimeout, RingFull, Watchdog, field_mask  # noqa: F401
from .build import TRACE_FORMATS, RtlModel, build_model

#: Default watchdog, cycles from START (``timeout_cycles`` overrides it per device or run).
DEFAULT_TIMEOUT_CYCLES = 50_000_000
#: Cycles between two polls of STATUS.DONE.
DEFAULT_POLL_INTERVAL = 256
#: Cycles the wait may clock past the watchdog limit: a STATUS read (AXI4-Lite) takes a
#: few cycles, and CYCLES (the limit's unit) starts at START, before the wait begins.
WATCHDOG_SLACK = 16
#: Reset length in cycles.
RESET_CYCLES = 8
#: Cycles the stream clock thread runs per call into the harness (the lock is released
#: between two calls, so the host waits at most this long for a register access).
STREAM_CHUNK = 256

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


class HarnessError(DeviceError):
    """The harness reported an error (``rc``: -1 bus/protocol rule broken, -3 usage)."""

    def __init__(self, msg: str, rc: int):
        super().__init__(msg)
        self.rc = rc


class Harness:
    """One Verilated core with its DRAM model and AXI4-Lite master (``harness.cpp``).

    A register port for :class:`~vtaforge.runtime.mmio.CoreDriver` (:meth:`read`,
    :meth:`write`: one AXI4-Lite transaction each, a few cycles) plus the simulation's
    clock (:meth:`step`, :attr:`cycle`).

    Args:
        model: the built model.
        mem_bytes: size of the DRAM model (zero-filled).
        mem_base: byte address of its first byte: the model answers bursts to
            ``[mem_base, mem_base + mem_bytes)`` and flags any other as a bus error.

    Raises:
        DeviceError: the model cannot be loaded, or was compiled against another
            register map than ``hw/regs.py``'s; the DRAM model cannot be allocated.
    """

    def __init__(self, model: RtlModel, mem_bytes: int, *, mem_base: int = 0):
        self._h = None
        self.model = model
        self._lib = model.load()
        got = int(self._lib.vh_regmap_version())
        if got != regs.REGMAP_VERSION:
            raise DeviceError(f"model {model.path} was compiled against register map "
                              f"0x{got:08x}, hw/regs.py has 0x{regs.REGMAP_VERSION:08x}; "
                              f"rebuild it")
        self._h = self._lib.vh_create(int(mem_bytes))
        if not self._h:
            raise DeviceError(f"cannot allocate a {mem_bytes}-byte DRAM model")
        if mem_base:
            self._lib.vh_set_mem_base(self._h, int(mem_base))

    @property
    def bus_bytes(self) -> int:
        """AXI master data width of the model, bytes."""
        return int(self._lib.vh_bus_bytes())

    @property
    def last_error(self) -> str:
        """The harness's last error message."""
        return self._lib.vh_last_error(self._h).decode(errors="replace")

    def _check(self, rc: int, what: str) -> None:
        if rc != 0:
            raise HarnessError(f"{what}: {self.last_error}", int(rc))

    def read(self, offset: int) -> int:
        """Read the 32-bit register at byte ``offset`` over AXI4-Lite.

        Raises:
            HarnessError: a bus error (earlier or now), or an offset outside the map.
        """
        out = ctypes.c_uint32()
        self._check(self._lib.vh_reg_read(self._h, int(offset), ctypes.byref(out)),
                    f"register read 0x{int(offset):02x}")
        return out.value

    def write(self, offset: int, value: int) -> None:
        """Write the 32-bit register at byte ``offset`` over AXI4-Lite."""
        self._check(self._lib.vh_reg_write(self._h, int(offset), int(value) & 0xFFFFFFFF),
                    f"register write 0x{int(offset):02x}")

    def step(self, cycles: int) -> None:
        """Run the clock for ``cycles`` cycles (the DRAM model stays active).

        Raises:
            HarnessError: a bus rule was broken.
        """
        self._check(self._lib.vh_step(self._h, int(cycles)), "step")

    def poll(self, offset: int, mask: int, interval: int, stop: int) -> int:
        """Clock ``interval`` cycles at a time, reading the register at ``offset`` after
        each stretch, until a read has a bit of ``mask`` set or :attr:`cycle` reaches
        ``stop`` (the last stretch is shortened to end there; at least one cycle is
        clocked), all in one call into the harness.  Returns the last value read (0 when
        the first stretch already reached ``stop``).

        Raises:
            HarnessError: a bus rule was broken, or an offset outside the map.
        """
        out = ctypes.c_uint32()
        self._check(self._lib.vh_poll(self._h, int(offset), int(mask), max(1, int(interval)),
                                      max(0, int(stop)), ctypes.byref(out)),
                    f"polling register 0x{int(offset):02x}")
        return out.value

    def reset(self, cycles: int = 8) -> None:
        """Hold the core in reset for ``cycles`` cycles; clears bus state and recorded
        errors.  The DRAM model is kept."""
        self._lib.vh_reset(self._h, int(cycles))

    def set_bus(self, lat_min: int, lat_max: int, backpressure: float, seed: int) -> None:
        """Random DRAM-model timing (see ``harness.cpp``, ``vh_set_bus``)."""
        self._lib.vh_set_bus(self._h, int(lat_min), int(lat_max), float(backpressure),
                             int(seed))

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
    def mem_base(self) -> int:
        """Byte address of the DRAM model's first byte."""
        return int(self._lib.vh_mem_base(self._h))

    @property
    def mem(self) -> np.ndarray:
        """The whole DRAM model as a writable ``uint8`` view (index 0 is :attr:`mem_base`;
        invalid after :meth:`resize`)."""
        n = int(self._lib.vh_mem_size(self._h))
        return np.ctypeslib.as_array(self._lib.vh_mem_ptr(self._h), shape=(n,))

    def resize(self, nbytes: int) -> None:
        """Resize the DRAM model to ``nbytes`` bytes (contents kept, new bytes zero)."""
        if self._lib.vh_mem_resize(self._h, int(nbytes)) != 0:
            raise DeviceError(f"cannot resize the DRAM model to {nbytes} bytes")

    def stat(self, which: int) -> int:
        """Harness statistic ``which`` (0 read bursts, 1 write bursts, 2 read beats, 3 write
        beats, 4 evals that skipped the input-combinational pass)."""
        return int(self._lib.vh_stat(self._h, int(which)))

    def trace_open(self, path: str) -> int:
        """Start a waveform (trace builds only); 0 on success."""
        return int(self._lib.vh_trace_open(self._h, str(path).encode()))

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
            ProgramError: rejected by the verifier, a bus rule broken, or the watchdog.
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


class _LockedPort:
    """The harness as a register port, each access under the stream lock."""

    def __init__(self, harness: Harness, lock: threading.RLock):
        self.h, self.lock = harness, lock

    def read(self, offset: int) -> int:
        with self.lock:
            return self.h.read(offset)

    def write(self, offset: int, value: int) -> None:
        with self.lock:
            self.h.write(offset, value)


def _stream_methods():
    """The streamed-execution methods of :class:`RtlDevice` (kept together here)."""

    def stream_open(self, *, clock: bool | str | None = None) -> None:
        """Start a streamed-execution session: allocate the ring (``INSN_RING`` slots of
        16 bytes) in device memory and open it (``CoreDriver.ring_open``).

        Args:
            clock: ``True``/``"free"``: a background thread clocks the simulation freely
                while the session is open (the core executes while the host works, and
                idles as on a board: ``RING_IDLE`` counts the cycles it waited);
                ``"busy"``: the thread parks while every appended segment is done (no
                simulated idle cycles: the wall time the host would see if idle cycles
                cost nothing); ``False``: no thread, the core is clocked only while the
                host waits (:meth:`stream_wait`, a full ring).  ``None``: the device's
                ``stream_clock`` attribute (default ``"free"``).
        Raises:
            DeviceError: the core has no ring (``INSN_RING = 0``), or a session is open.
        """
        from ..fsim import _check_ring  # noqa: PLC0415

        _check_ring(self.config)
        if getattr(self, "_stream", None) is not None:
            raise DeviceError("RTL core: a stream session is already open")
        ring = self.alloc(self.config.INSN_RING * 16)
        lock = threading.RLock()
        drv = CoreDriver(_LockedPort(self.harness, lock), where="RTL core",
                         config=self.config, read_program=self._read_mem)
        st = {"ring": ring, "lock": lock, "driver": drv, "stop": threading.Event(),
              "thread": None, "c0": self.harness.cycle, "work": threading.Event(),
              "park": False, "appending": False}
        self._stream = st
        try:
            drv.ring_open(ring.addr, self.config.INSN_RING, write_ring=self._write_mem,
                          irq=None)
        except BaseException:
            self._stream = None
            self.free(ring)
            raise
        if clock is None:
            clock = getattr(self, "stream_clock", "free")
        if clock not in (True, False, "free", "busy"):
            raise DeviceError(f"clock must be True, False, 'free' or 'busy', got {clock!r}")
        st["park"] = clock == "busy"
        if clock:
            t = threading.Thread(target=self._stream_clock, args=(st,), daemon=True,
                                 name="vtaforge-rtl-clock")
            st["thread"] = t
            t.start()

    def _stream_clock(self, st: dict) -> None:
        h, lock, stop, work = self.harness, st["lock"], st["stop"], st["work"]
        fin = regs.offset("FINISH_COUNT")
        drv = st["driver"]
        while not stop.is_set():
            with lock:
                try:
                    h.step(STREAM_CHUNK)
                    idle = (st["park"] and not st.get("closing") and not st["appending"]
                            and h.read(fin) >= drv._ring["appended"])
                    if idle:
                        work.clear()
                except HarnessError as e:
                    st["error"] = e
                    return
            if idle:
                work.wait()
            else:
                time.sleep(0)

    def _stream_dog(self, st: dict, limit: int) -> Watchdog:
        h = self.harness
        if st["thread"] is not None:
            def idle() -> None:
                if "error" in st:
                    raise st["error"]
                time.sleep(50e-6)
        else:
            def idle() -> None:
                with st["lock"]:
                    h.step(self.poll_interval)
        return Watchdog(limit, lambda: h.cycle, idle, "cycles")

    def _stream_fail(self, st: dict, err: Exception, limit: int) -> None:
        self._stream_stop(st)
        self._stream = None
        self.free(st["ring"])
        if isinstance(err, CoreFault):
            self.reset()
            raise err
        self._raise_run_error(err, limit)

    def _stream_wake(self, st: dict, **flags: Any) -> None:
        # under the lock: the clock thread decides to park (and clears ``work``) inside
        # one locked block, so a wake-up is never lost between its check and its clear
        with st["lock"]:
            st.update(flags)
            st["work"].set()

    def _stream_stop(self, st: dict) -> None:
        st["stop"].set()
        st["work"].set()
        t = st["thread"]
        if t is not None:
            t.join()
            st["thread"] = None

    def stream_append(self, insn_addr: int, insn_count: int, *,
                      regions: Sequence[Buffer] | None = None,
                      timeout_cycles: int | None = None) -> int:
        """Verify a segment (``verify.verify_segment``, unless ``verify=False``) and append
        it: its instructions, read from device memory at ``insn_addr``, are written into
        the ring and the doorbell is rung.  Returns the segment's number ``k``.

        Raises:
            ProgramError: refused by the verifier (nothing appended); the ring stayed full
                past the watchdog; a fault the core reported meanwhile.
            DeviceError: no session is open.
        """
        st = self._stream_session()
        if self.verify:
            from ..verify import verify_segment  # noqa: PLC0415

            regs = [b for b in (self.buffers() if regions is None else list(regions))
                    if b != st["ring"]]
            with st["lock"]:
                verify_segment(self.config, self.mem, insn_addr, insn_count, regs)
        prog = self._read_mem(int(insn_addr), int(insn_count) * 16)
        limit = int(timeout_cycles or self.timeout_cycles)
        try:
            self._stream_wake(st, appending=True)
            k = st["driver"].ring_append(prog, self._stream_dog(st, limit))
            self._stream_wake(st, appending=False)
            return k
        except (HarnessError, RingFull, CoreFault) as e:
            self._stream_fail(st, e if not isinstance(e, RingFull) else CoreTimeout(
                str(e), 0, limit, limit, "cycles"), limit)

    def stream_wait(self, k: int, *, timeout_cycles: int | None = None) -> RunResult:
        """Wait until segment ``k`` is done (``FINISH_COUNT >= k``), with the cycle
        watchdog (``timeout_cycles`` from this call, default the device's).

        Returns:
            a :class:`RunResult`: ``cycles`` = the session's CYCLES so far; ``stats``:
            ``finish_count``, ``ring_head``, ``ring_idle`` (cycles the core waited for
            the host).
        Raises:
            ProgramError: the watchdog (the session is closed and the core reset; the
                message names each unit's state) or a fault report (``CoreFault``, its
                message starts with ``segment <k>:``).
        """
        st = self._stream_session()
        limit = int(timeout_cycles or self.timeout_cycles)
        drv = st["driver"]
        try:
            drv.ring_wait(int(k), self._stream_dog(st, limit))
            stats = {"finish_count": drv.finish_count(), "ring_head": drv.read("RING_HEAD"),
                     "ring_idle": drv.read("RING_IDLE")}
            cyc = drv.read("CYCLES_LO") | (drv.read("CYCLES_HI") << 32)
        except (HarnessError, CoreTimeout, CoreFault) as e:
            self._stream_fail(st, e, limit)
        return RunResult(cycles=cyc, stats=stats)

    @property
    def finish_count(self) -> int:
        """``FINISH_COUNT`` of the open session."""
        return self._stream_session()["driver"].finish_count()

    def stream_close(self, *, timeout_cycles: int | None = None) -> RunResult:
        """End the session (``CoreDriver.ring_close``: the ring drains, DONE rises), stop
        the clock thread and free the ring.  Returns the session's counters (``cycles``,
        the unit counters, ``ring_idle``, ``finish_count``).

        Raises:
            ProgramError: as :meth:`stream_wait`.
        """
        st = self._stream_session()
        limit = int(timeout_cycles or self.timeout_cycles)
        drv = st["driver"]
        drv.check_write("RING_CTRL", 0)     # refused: the session stays open
        st["closing"] = True
        self._stream_wake(st)
        try:
            drv.ring_close(self._stream_dog(st, limit))
        except (HarnessError, CoreTimeout, CoreFault) as e:
            self._stream_fail(st, e, limit)
        self._stream_stop(st)
        stats: dict[str, Any] = dict(self.driver.counters())
        stats["ring_idle"] = self.driver.read("RING_IDLE")
        stats["finish_count"] = self.driver.read("FINISH_COUNT")
        stats["sim_cycles"] = self.harness.cycle - st["c0"]
        self._stream = None
        self.free(st["ring"])
        return RunResult(cycles=stats["cycles"], stats=stats)

    def _stream_session(self) -> dict:
        st = getattr(self, "_stream", None)
        if st is None:
            raise DeviceError("RTL core: no stream session is open (stream_open first)")
        return st

    return {f.__name__: f for f in (stream_open, _stream_clock, _stream_dog, _stream_fail,
                                    _stream_wake, _stream_stop, stream_append, stream_wait, stream_close,
                                    _stream_session)} | {"finish_count": finish_count}


for _name, _fn in _stream_methods().items():
    setattr(RtlDevice, _name, _fn)
del _name, _fn


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
