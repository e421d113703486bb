"""One driver for a memory-mapped vtaforge core: the launch protocol of ``hw/regs.py``.

Every backend that drives a core through its AXI4-Lite registers (``rtl``: the Verilator
harness; ``pynq``: ``pynq.MMIO`` on a board; the tests' fakes) uses :class:`CoreDriver`, so
the protocol is written once.  A backend supplies two small things:

- a **register port**: any object with ``read(offset) -> int`` and
  ``write(offset, value)``, 32-bit registers at byte offsets from the core's register
  base (``pynq.MMIO`` has exactly this shape; so does ``rtl.harness.Harness``);
- a :class:`Watchdog` for :meth:`CoreDriver.wait`: what "time" is (wall-clock seconds on
  a board, simulated cycles for ``rtl``), the limit, and what the host does between two
  polls of ``STATUS`` (sleep; clock the simulation).

Offsets and bit masks come from :mod:`vtaforge.hw.regs` only (:func:`reg_offset`,
:func:`field_mask`); nothing here or in the backends spells a literal offset or bit.

The protocol (``docs/regs.md``):

1. :meth:`CoreDriver.identify` once, before the first launch: ``FINGERPRINT`` must equal
   ``VTAConfig.fingerprint`` and the ``VERSION`` major must equal this runtime's, else
   :class:`CoreIdentityError` (both fingerprints named);
2. :meth:`CoreDriver.launch`: refuse when ``STATUS.BUSY`` (:class:`CoreBusyError`); write
   ``INSN_ADDR_LO``, ``INSN_ADDR_HI``, ``INSN_COUNT``, then ``CTRL.START`` (with
   ``CTRL.IRQ_EN`` as asked, or as it was);
3. :meth:`CoreDriver.wait`: poll ``STATUS.DONE``; a run that is not done within the
   watchdog's limit raises :class:`CoreTimeout` (a hang becomes an error, never a hung
   host);
4. :meth:`CoreDriver.counters`: ``CYCLES_LO/HI`` and the per-unit counters, under the
   ``RunResult.stats`` keys shared with fsim (:data:`STAT_REGISTERS`).

Streamed execution (cores with ``VTAConfig.INSN_RING > 0``; ``docs/runtime.md``
"Streamed execution"): :meth:`CoreDriver.ring_open` starts a ring session,
:meth:`CoreDriver.ring_append` writes a segment's instructions into the ring's free slots
(through the backend's ``write_ring(addr, data)``, which flushes the CPU cache on a board)
and rings the doorbell (``RING_TAIL``), :meth:`CoreDriver.ring_wait` polls
``FINISH_COUNT`` under the same watchdog, fault report and timeout rules as
:meth:`CoreDriver.wait`, and :meth:`CoreDriver.ring_close` ends the session.

Scratchpad faults: when the core reports one (``STATUS.ERROR``; ``ERROR``, ``ERR_INSN``,
``ERR_INDEX``), :meth:`CoreDriver.wait` raises :class:`CoreFault` (a ``ProgramError``)
instead of returning, also when the run then did not finish in time.  Its message is
:func:`vtaforge.hw.regs.fault_message`, the formatter fsim uses for the same fault, so a
program refused by fsim at run time gets the same words from the RTL and from a board.
Naming the instruction (``instruction <i> (<disassembly>)``) needs the program: the
backend passes ``read_program(addr, nbytes)``; without it the message names the unit and
the unit's instruction ordinal instead.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any, Callable, Protocol

import numpy as np

from ..hw import regs
from ..hw.config import MemType, VTAConfig
from ..hw.isa import INSN_BYTES, INSN_FIELDS, Insn, Module, Opcode, decode_program
from .device import DeviceError, ProgramError

__all__ = ["CoreDriver", "RegisterPort", "Watchdog", "CoreIdentityError", "CoreBusyError",
           "CoreTimeout", "CoreFault", "STAT_REGISTERS", "reg_offset", "field_mask",
           "ring_pieces", "RingFull", "ring_write_refusal", "RING_CHECKED"]

#: RunResult.stats key -> counter register (keys match fsim's where they overlap).
STAT_REGISTERS = {
    "fetch_busy": "FETCH_BUSY", "load_busy": "LOAD_BUSY", "compute_busy": "COMPUTE_BUSY",
    "store_busy": "STORE_BUSY", "load_stall": "LOAD_STALL", "compute_stall": "COMPUTE_STALL",
    "store_stall": "STORE_STALL", "gemm_counter": "GEMM_COUNT", "alu_counter": "ALU_COUNT",
    "dram_read_nbytes": "DMA_RD_BYTES", "dram_write_nbytes": "DMA_WR_BYTES",
}

_WORD = 0xFFFFFFFF


def reg_offset(name: str) -> int:
    """Byte offset of register ``name`` (``hw/regs.py``)."""
    return regs.offset(name)


def field_mask(reg_name: str, field_name: str) -> int:
    """The bit mask of field ``field_name`` of register ``reg_name`` (``hw/regs.py``).

    Raises:
        KeyError: no such register or field.
    """
    for f in regs.reg(reg_name).fields:
        if f.name == field_name:
            return ((1 << f.width) - 1) << f.lsb
    raise KeyError(f"register {reg_name} has no field {field_name}")


_START = field_mask("CTRL", "START")
_IRQ_EN = field_mask("CTRL", "IRQ_EN")
_BUSY = field_mask("STATUS", "BUSY")
_DONE = field_mask("STATUS", "DONE")
_IRQ_DONE = field_mask("IRQ_STATUS", "DONE")
_ERROR = field_mask("STATUS", "ERROR")
_ERR_VALID = field_mask("ERROR", "VALID")
_RING_ENABLE = field_mask("RING_CTRL", "ENABLE")


def ring_pieces(tail: int, count: int, size: int) -> list[tuple[int, int, int]]:
    """Where ``count`` instructions appended after ``tail`` (instructions appended so far)
    go in a ring of ``size`` slots: ``(slot, first instruction of the segment, n)`` runs,
    split at the end of the ring (wrap-around)."""
    out, done = [], 0
    while done < count:
        slot = (tail + done) % size
        n = min(count - done, size - slot)
        out.append((slot, done, n))
        done += n
    return out


#: Ring registers whose host writes the driver checks (:func:`ring_write_refusal`).
RING_CHECKED = ("RING_BASE_LO", "RING_TAIL", "RING_CTRL")


def ring_write_refusal(cfg: VTAConfig, name: str, value: int, *, tail: int | None,
                       head: int = 0, open_segment: bool = False) -> str | None:
    """Why a host write of ring register ``name`` would make the core run stale or
    garbage slots, or None when it is safe: the same rule and words as the core's ring
    faults (:func:`vtaforge.hw.regs.ring_tail_fault`, :func:`~vtaforge.hw.regs.ring_fault_text`).

    Args:
        tail: ``RING_TAIL`` of the open session (None: no session is open; a tail is then
            checked against a START's ``RING_HEAD = 0``).
        head: ``RING_HEAD`` now (in a session).
        open_segment: the session's published instructions end without a FINISH.
    """
    value = int(value) & _WORD
    kind, aux = None, 0
    if name == "RING_BASE_LO" and value % INSN_BYTES:
        kind = regs.ErrorKind.RING_BASE
    elif name == "RING_TAIL":
        if tail is None:
            kind = regs.ErrorKind.RING_OVERFLOW if value > cfg.INSN_RING else None
        else:
            kind, aux = regs.ring_tail_fault(cfg.INSN_RING, head, tail, value), tail
    elif name == "RING_CTRL" and tail is not None and open_segment and \
            not value & _RING_ENABLE:
        return ("closing the session would leave a segment published without its FINISH "
                f"(RING_TAIL {tail}): append its FINISH first")
    if kind is None:
        return None
    return regs.ring_fault_text(cfg, kind, value, aux)


class RingFull(DeviceError):
    """A segment does not fit the ring's free slots within the watchdog's limit."""


class RegisterPort(Protocol):
    """32-bit register access at byte offsets from the core's register base."""

    def read(self, offset: int) -> int: ...

    def write(self, offset: int, value: int) -> None: ...


class CoreIdentityError(DeviceError):
    """The register window does not hold a core of this config (fingerprint or
    register-map version differ).  Attributes ``found`` and ``expected`` (fingerprints)."""

    def __init__(self, msg: str, found: int, expected: int):
        super().__init__(msg)
        self.found, self.expected = found, expected


class CoreBusyError(DeviceError):
    """A launch while ``STATUS.BUSY`` is set (an earlier run has not finished)."""

    def __init__(self, msg: str, status: int):
        super().__init__(msg)
        self.status = status


class CoreTimeout(ProgramError):
    """The watchdog fired: the run was not done within ``limit`` (in ``unit``).

    Attributes:
        status: the last ``STATUS`` value read; limit, elapsed: in the watchdog's unit;
        insn_index: None (no instruction is to blame).
    """

    def __init__(self, msg: str, status: int, limit: float, elapsed: float, unit: str):
        super().__init__(msg)
        self.status, self.limit, self.elapsed, self.unit = status, limit, elapsed, unit


class CoreFault(ProgramError):
    """The core reported a scratchpad fault (``STATUS.ERROR``).

    Attributes:
        unit: the :class:`~vtaforge.hw.isa.Module` that found it; kind: a
        :class:`~vtaforge.hw.regs.ErrorKind`; index: ``ERR_INDEX``; ordinal: ``ERR_INSN``
        (the unit's instruction count); insn_index (:class:`ProgramError`'s): the
        instruction's index in the program (in a session: within its segment), the
        ``ERR_INSN``-th instruction of ``unit``; None when the driver could not read the
        program or the fault is a ring fault.
    """

    def __init__(self, msg: str, unit: int, kind: int, index: int, ordinal: int,
                 insn_index: int | None):
        super().__init__(msg, insn_index=insn_index)
        self.unit, self.kind, self.index = unit, kind, index
        self.ordinal = ordinal


def _field(value: int, reg_name: str, field_name: str) -> int:
    f = next(f for f in regs.reg(reg_name).fields if f.name == field_name)
    return (value >> f.lsb) & ((1 << f.width) - 1)


def unit_instruction(cfg: VTAConfig, program, unit: int, ordinal: int
                     ) -> tuple[int, Insn] | None:
    """The ``ordinal``-th instruction (0-based) that module ``unit`` executes in
    ``program`` (encoded bytes), as ``(index in the program, Insn)``; None past the end.

    The module of each instruction follows :func:`vtaforge.hw.isa.insn_module` (STORE →
    store; LOAD of INP/WGT → load; everything else → compute), as fetch dispatches them.
    """
    cols = decode_program(cfg, np.frombuffer(bytes(program), dtype=np.uint8))
    op, mt = cols["opcode"], cols["memory_type"]
    load = (op == Opcode.LOAD) & ((mt == MemType.INP) | (mt == MemType.WGT))
    mod = np.where(op == Opcode.STORE, int(Module.STORE),
                   np.where(load, int(Module.LOAD), int(Module.COMPUTE)))
    idx = np.flatnonzero(mod == int(unit))
    if not 0 <= ordinal < idx.size:
        return None
    i = int(idx[ordinal])
    return i, Insn(**{k: int(cols[k][i]) for k in INSN_FIELDS})


@dataclass
class Watchdog:
    """How :meth:`CoreDriver.wait` keeps time.

    Attributes:
        limit: give up once ``now() - start >= limit``.
        now: the current time (any monotonic unit: seconds, cycles).
        idle: what the host does between two polls of ``STATUS`` (must let time pass).
        unit: the unit's name for messages (``"s"``, ``"cycles"``).
    """

    limit: float
    now: Callable[[], float]
    idle: Callable[[], None]
    unit: str = "s"

    @classmethod
    def wall_clock(cls, limit_s: float, poll_s: float = 20e-6, *,
                   sleep: Callable[[float], None] = time.sleep,
                   clock: Callable[[], float] = time.monotonic) -> "Watchdog":
        """Seconds of host time; sleeps ``poll_s`` between polls (a board)."""
        return cls(float(limit_s), clock, lambda: sleep(poll_s), "s")

    @classmethod
    def cycles(cls, limit_cycles: int, *, step: Callable[[int], None],
               cycle: Callable[[], int], poll_cycles: int = 256) -> "Watchdog":
        """Simulated clock cycles; clocks the simulation ``poll_cycles`` between polls."""
        n = max(1, int(poll_cycles))
        return cls(int(limit_cycles), cycle, lambda: step(n), "cycles")


class CoreDriver:
    """The ``hw/regs.py`` protocol over a register port (see the module docstring).

    Args:
        port: the register port (``read(offset)``, ``write(offset, value)``).
        where: how messages name the register window (e.g. ``"register window
            0x43c00000"``, ``"RTL core"``).
        config: the core's config (also set by :meth:`identify`); fault messages need it.
        read_program: ``read_program(addr, nbytes) -> bytes-like``, the device memory
            holding the instructions of the last launch (fault messages name the
            instruction with it).
    """

    def __init__(self, port: RegisterPort, *, where: str = "the core",
                 config: VTAConfig | None = None,
                 read_program: Callable[[int, int], Any] | None = None):
        self.port = port
        self.where = where
        self.config = config
        self.read_program = read_program
        self._launched: tuple[int, int] | None = None
        self._ring: dict | None = None

    # ------------------------------------------------------------------ registers
    def read(self, name: str) -> int:
        """Register ``name`` (``hw/regs.py``)."""
        return int(self.port.read(regs.offset(name))) & _WORD

    def write(self, name: str, value: int) -> None:
        """Write register ``name``; a host write of a ring register (:data:`RING_CHECKED`)
        is checked first (:meth:`check_write`).

        Raises:
            DeviceError: the write would make the core run stale or garbage ring slots
                (nothing is written).
        """
        if name in RING_CHECKED and self.config is not None and self.config.INSN_RING:
            self.check_write(name, value)
            if name == "RING_TAIL" and self._ring is not None:
                self._host_published(int(value) & _WORD)
        self._write(name, value)

    def _write(self, name: str, value: int) -> None:
        self.port.write(regs.offset(name), int(value) & _WORD)

    def check_write(self, name: str, value: int) -> None:
        """Refuse a ring-register write the core would report as a ring fault
        (:func:`ring_write_refusal`, against this driver's open session).

        Raises:
            DeviceError: ``<where>: refusing to write <name> = <value>: <why>``.
        """
        r = self._ring
        tail = None if r is None else r["tail"]
        head = self.read("RING_HEAD") if r is not None and name == "RING_TAIL" else 0
        why = ring_write_refusal(self.config, name, value, tail=tail, head=head,
                                 open_segment=bool(r and r.get("open")))
        if why is not None:
            raise DeviceError(f"{self.where}: refusing to write {name} = {int(value)}: {why}")

    def _host_published(self, tail: int) -> None:
        """The host rang the doorbell itself: note the new tail and whether the
        instructions it published end with a FINISH (read back when the driver can)."""
        r = self._ring
        n = (tail - r["tail"]) & _WORD
        if n and self.read_program is not None and self.config is not None:
            last = (tail - 1) % r["size"]
            try:
                raw = np.frombuffer(bytes(self.read_program(r["addr"] + last * INSN_BYTES,
                                                            INSN_BYTES)), dtype=np.uint8)
                r["open"] = int(decode_program(self.config, raw)["opcode"][0]) != Opcode.FINISH
            except (DeviceError, ValueError):
                r["open"] = False
        r["tail"] = tail

    def status(self) -> int:
        """``STATUS`` now."""
        return self.read("STATUS")

    @staticmethod
    def is_busy(status: int) -> bool:
        """``STATUS.BUSY`` of a status value."""
        return bool(status & _BUSY)

    @staticmethod
    def is_done(status: int) -> bool:
        """``STATUS.DONE`` of a status value."""
        return bool(status & _DONE)

    # ------------------------------------------------------------------ protocol
    def identify(self, config: VTAConfig) -> None:
        """Check ``FINGERPRINT`` against ``config.fingerprint`` and the ``VERSION`` major
        against :data:`vtaforge.hw.regs.REGMAP_VERSION`.

        Raises:
            CoreIdentityError: either differs (the message names both fingerprints, and
                hints at a missing bitstream / wrong base when the window reads as 0 or
                all-ones).
        """
        self.config = config
        fp = self.read("FINGERPRINT")
        want = config.fingerprint
        if fp != want:
            if fp in (0, _WORD):
                hint = ("it reads as 0/all-ones: is the bitstream loaded and the register "
                        "base right?")
            else:
                hint = ("the core was built for another configuration (build it for this "
                        "config, or pass the config it was built for)")
            raise CoreIdentityError(
                f"{self.where}: fingerprint 0x{fp:08x} differs from the config's "
                f"0x{want:08x}; {hint}; refusing to run", fp, want)
        ver = self.read("VERSION")
        if ver >> 16 != regs.REGMAP_VERSION >> 16:
            raise CoreIdentityError(
                f"{self.where}: register-map version 0x{ver:08x} is incompatible with this "
                f"runtime's 0x{regs.REGMAP_VERSION:08x}; refusing to run", fp, want)

    def _irq_ctrl(self, irq: bool | None) -> int:
        """The CTRL IRQ-enable bits for a start: kept as they are (``None``), set or clear."""
        if irq is None:
            return self.read("CTRL") & _IRQ_EN
        return _IRQ_EN if irq else 0

    def launch(self, insn_addr: int, insn_count: int, *, irq: bool | None = False) -> None:
        """Start a run of ``insn_count`` instructions at byte address ``insn_addr``.

        Args:
            irq: ``CTRL.IRQ_EN`` for this run; ``None`` keeps the value the host last set.

        On a core with the ring (``config.INSN_RING > 0``) ``RING_CTRL.ENABLE`` is cleared
        first, so the start is a one-shot run.

        Raises:
            DeviceError: ``insn_addr`` or ``insn_count`` do not fit their registers.
            CoreBusyError: ``STATUS.BUSY`` is set (an earlier run is still going).
        """
        insn_addr, insn_count = int(insn_addr), int(insn_count)
        if not 0 <= insn_addr < 1 << 64:
            raise DeviceError(f"instruction address 0x{insn_addr:x} does not fit INSN_ADDR")
        if not 0 <= insn_count <= _WORD:
            raise DeviceError(f"instruction count {insn_count} does not fit INSN_COUNT")
        status = self.status()
        if self.is_busy(status):
            raise CoreBusyError(
                f"{self.where}: the core is still busy (STATUS=0x{status:x}) from an earlier "
                f"run; reset it (on a board: reprogram the bitstream)", status)
        ctrl = self._irq_ctrl(irq)
        self.write("INSN_ADDR_LO", insn_addr & _WORD)
        self.write("INSN_ADDR_HI", insn_addr >> 32)
        self.write("INSN_COUNT", insn_count)
        if self.config is not None and self.config.INSN_RING:
            self._write("RING_CTRL", 0)   # a one-shot run, even after an aborted session
        self.write("CTRL", ctrl | _START)
        self._launched = (insn_addr, insn_count)
        self._ring = None

    def wait(self, watchdog: Watchdog) -> float:
        """Poll ``STATUS.DONE`` until it is set.

        Returns:
            the time from the call until DONE was seen, in the watchdog's unit.
        Raises:
            CoreFault: the core reported a scratchpad fault (checked when DONE is seen and
                before a timeout is reported).
            CoreTimeout: not done within ``watchdog.limit`` (the core is left as it is:
                the caller resets it or reports that it must be reset).
        """
        t0 = watchdog.now()
        while True:
            status = self.status()
            elapsed = watchdog.now() - t0
            if self.is_done(status) or elapsed >= watchdog.limit:
                fault = self.fault(status)
                if fault is not None:
                    raise fault
            if self.is_done(status):
                return elapsed
            if elapsed >= watchdog.limit:
                raise CoreTimeout(
                    f"{self.where}: run not done after {watchdog.limit:g} {watchdog.unit} "
                    f"(STATUS=0x{status:x})", status, watchdog.limit, elapsed, watchdog.unit)
            watchdog.idle()

    def fault(self, status: int | None = None) -> CoreFault | None:
        """The core's scratchpad-fault report as a :class:`CoreFault` (not raised), or None
        when ``STATUS.ERROR`` is clear.

        Args:
            status: a ``STATUS`` value already read (else it is read now).
        """
        if status is None:
            status = self.status()
        if not status & _ERROR:
            return None
        err = self.read("ERROR")
        if not err & _ERR_VALID:
            return None
        unit = _field(err, "ERROR", "UNIT")
        kind = _field(err, "ERROR", "KIND")
        ordinal = self.read("ERR_INSN")
        index = self.read("ERR_INDEX")
        found = None
        seg = None
        if kind in regs.RING_KINDS:
            pass                # about the ring, not an instruction (hw/regs.py)
        elif self._ring is not None and self.config is not None:
            # a session: ERR_INSN counts the unit's instructions over every segment so far
            segs = self._ring["segments"]
            try:
                found = unit_instruction(self.config, b"".join(b for _, b in segs), unit,
                                         ordinal)
            except ValueError:
                found = None
            if found is not None:
                i = found[0]
                for k, b in segs:
                    n = len(b) // INSN_BYTES
                    if i < n:
                        seg, found = k, (i, found[1])
                        break
                    i -= n
        elif self.read_program is not None and self._launched is not None and \
                self.config is not None:
            addr, count = self._launched
            try:
                found = unit_instruction(self.config, self.read_program(addr, count * INSN_BYTES),
                                         unit, ordinal)
            except (DeviceError, ValueError):
                found = None
        i, insn = found if found is not None else (None, None)
        try:
            kind_ok = regs.ErrorKind(kind)
        except ValueError:
            kind_ok = None
        if self.config is None or kind_ok is None:
            msg = (f"{self.where}: scratchpad fault (ERROR=0x{err:x}, ERR_INSN={ordinal}, "
                   f"ERR_INDEX={index})")
        else:
            msg = regs.fault_message(self.config, kind_ok, index, insn, i, unit, ordinal)
            if seg is not None:
                msg = f"segment {seg}: {msg}"
        return CoreFault(msg, unit, kind, index, ordinal, i)

    # ------------------------------------------------------------------ ring protocol
    def ring_open(self, ring_addr: int, size: int, *, write_ring: Callable[[int, Any], None],
                  irq: bool | None = False) -> None:
        """Start a streamed-execution session on the ring of ``size`` instruction slots at
        byte address ``ring_addr`` (16-byte aligned): ``RING_BASE``, ``RING_TAIL = 0``,
        ``RING_CTRL.ENABLE``, then ``CTRL.START``.

        Args:
            write_ring: ``write_ring(addr, data)`` writes bytes into device memory where the
                core reads them (a board flushes the CPU cache for the range).
        Raises:
            DeviceError: the core has no ring (``RING_SIZE`` reads another size), or a bad
                address.
            CoreBusyError: ``STATUS.BUSY`` (a run or session is going).
        """
        ring_addr, size = int(ring_addr), int(size)
        if ring_addr % INSN_BYTES or not 0 <= ring_addr < 1 << 64:
            raise DeviceError(f"ring address 0x{ring_addr:x} is not a 16-byte aligned address")
        got = self.read("RING_SIZE")
        if got != size:
            raise DeviceError(f"{self.where}: RING_SIZE reads {got}, expected {size} (is the "
                              f"core built with INSN_RING = {size}?)")
        status = self.status()
        if self.is_busy(status):
            raise CoreBusyError(f"{self.where}: the core is still busy (STATUS=0x{status:x}); "
                                f"cannot open a ring session", status)
        ctrl = self._irq_ctrl(irq)
        self._write("RING_BASE_LO", ring_addr & _WORD)
        self.write("RING_BASE_HI", ring_addr >> 32)
        self._write("RING_TAIL", 0)
        self._write("RING_CTRL", _RING_ENABLE)
        self.write("CTRL", ctrl | _START)
        self._ring = {"addr": ring_addr, "size": size, "tail": 0, "write": write_ring,
                      "segments": [], "appended": 0, "open": False}
        self._launched = None

    def ring_free(self) -> int:
        """Ring slots the host may write now: ``RING_SIZE - (TAIL - HEAD)``."""
        r = self._ring
        head = self.read("RING_HEAD")
        return r["size"] - ((r["tail"] - head) & _WORD)

    def ring_append(self, program, watchdog: Watchdog) -> int:
        """Append one segment (encoded instructions, a multiple of 16 bytes, ending with its
        FINISH) to the open session: the instructions go into the free slots (a segment
        longer than the free space is written in pieces as fetch frees slots), then
        ``RING_TAIL`` is written after each piece.

        Returns:
            the segment's number ``k`` (1-based): it is done when ``FINISH_COUNT >= k``.
        Raises:
            DeviceError: no session is open, or the program is not whole instructions.
            CoreFault: the core reported a fault while the host waited for free slots.
            RingFull: no free slot appeared within ``watchdog.limit`` (the core stalls).
        """
        r = self._ring
        if r is None:
            raise DeviceError(f"{self.where}: no ring session is open")
        raw = np.ascontiguousarray(np.frombuffer(bytes(program), dtype=np.uint8)
                                   if not isinstance(program, np.ndarray) else program
                                   ).reshape(-1).view(np.uint8)
        if raw.size == 0 or raw.size % INSN_BYTES:
            raise DeviceError(f"a segment is whole 16-byte instructions, got {raw.size} bytes")
        if self.config is not None and \
                int(decode_program(self.config, raw[-INSN_BYTES:])["opcode"][0]) != Opcode.FINISH:
            raise DeviceError(f"{self.where}: refusing to append a segment whose last "
                              f"instruction is not its FINISH (the session could only close "
                              f"with it unfinished)")
        count = raw.size // INSN_BYTES
        done = 0
        t0 = watchdog.now()
        while done < count:
            free = self.ring_free()
            if free == 0:
                elapsed = watchdog.now() - t0
                fault = self.fault()
                if fault is not None:
                    raise fault
                if elapsed >= watchdog.limit:
                    raise RingFull(f"{self.where}: the ring stayed full for {watchdog.limit:g} "
                                   f"{watchdog.unit} (HEAD={self.read('RING_HEAD')}, "
                                   f"TAIL={r['tail']})")
                watchdog.idle()
                continue
            n = min(free, count - done)
            for slot, first, k in ring_pieces(r["tail"], n, r["size"]):
                lo = (done + first) * INSN_BYTES
                r["write"](r["addr"] + slot * INSN_BYTES, raw[lo:lo + k * INSN_BYTES])
            r["tail"] = (r["tail"] + n) & _WORD
            self._write("RING_TAIL", r["tail"])
            done += n
        r["appended"] += 1
        r["segments"].append((r["appended"], bytes(raw)))
        return r["appended"]

    def finish_count(self) -> int:
        """``FINISH_COUNT``: segments completed in this session."""
        return self.read("FINISH_COUNT")

    def ring_wait(self, k: int, watchdog: Watchdog) -> float:
        """Poll ``FINISH_COUNT`` until segment ``k`` is done (``FINISH_COUNT >= k``).

        Returns:
            the time waited, in the watchdog's unit.
        Raises:
            DeviceError: ``k`` was never appended.
            CoreFault: the core reported a scratchpad fault (checked when the segment is
                seen done and before a timeout is reported; the message names the
                instruction within its segment).
            CoreTimeout: not done within ``watchdog.limit``.
        """
        r = self._ring
        if r is None or not 1 <= int(k) <= r["appended"]:
            raise DeviceError(f"{self.where}: segment {k} was not appended in this session")
        t0 = watchdog.now()
        while True:
            fin = self.finish_count()
            elapsed = watchdog.now() - t0
            if fin >= k or elapsed >= watchdog.limit:
                fault = self.fault()
                if fault is not None:
                    raise fault
            if fin >= k:
                return elapsed
            status = self.status()
            if self.is_done(status) and self.finish_count() < k:  # the session ended first
                fault = self.fault(status)  # (a ring fault ends it)
                if fault is not None:
                    raise fault
                raise DeviceError(f"{self.where}: the session ended with segment {k} not done "
                                  f"(FINISH_COUNT={fin}, STATUS=0x{status:x})")
            if self.is_done(status):
                return elapsed
            if elapsed >= watchdog.limit:
                raise CoreTimeout(
                    f"{self.where}: segment {k} not done after {watchdog.limit:g} "
                    f"{watchdog.unit} (FINISH_COUNT={fin}, RING_HEAD="
                    f"{self.read('RING_HEAD')}, RING_TAIL={r['tail']}, STATUS=0x{status:x})",
                    status, watchdog.limit, elapsed, watchdog.unit)
            watchdog.idle()

    def ring_close(self, watchdog: Watchdog) -> float:
        """End the session: clear ``RING_CTRL.ENABLE`` and wait for ``STATUS.DONE`` (the
        ring drained) as :meth:`wait` does.

        Raises:
            DeviceError: the host published a segment without its FINISH (rung the doorbell
                itself): refused before the write, the session stays open.
        """
        self.write("RING_CTRL", 0)
        try:
            return self.wait(watchdog)
        finally:
            self._ring = None

    @property
    def ring_open_now(self) -> bool:
        """A ring session is open on this driver."""
        return self._ring is not None

    def counters(self) -> dict[str, int]:
        """``cycles`` (``CYCLES_HI:LO``) and every :data:`STAT_REGISTERS` counter of the
        last run."""
        lo = self.read("CYCLES_LO")
        out = {"cycles": lo | (self.read("CYCLES_HI") << 32)}
        for key, name in STAT_REGISTERS.items():
            out[key] = self.read(name)
        return out

    def clear_irq(self) -> None:
        """Clear ``IRQ_STATUS.DONE`` (write-1-to-clear)."""
        self.write("IRQ_STATUS", _IRQ_DONE)
