"""The ``Device`` interface every backend implements (fsim, rtl, pynq).

A device owns a byte-addressed device memory (DRAM as the core sees it).  The host
allocates :class:`Buffer` s in it, writes and reads them, and runs programs: an
instruction stream of 16-byte instructions at a byte address, ``insn_count`` long.

Address rules:
 - address 0 is never handed out (it is the null address);
 - every buffer is aligned to ``config.dram_alignment`` bytes: the largest element size of
   any memory type, so that any memory type may address it in element units
   (upstream fault BR-09).

Errors:
 - :class:`DeviceError`: bad allocation, out-of-range host access, failed run.
 - :class:`ProgramError` (a ``DeviceError``): a program that breaks the ISA's rules
   (unknown opcode or memory type, DMA outside the memory the program may touch,
   scratchpad index out of range, missing FINISH, deadlock, timeout).  Its message is
   one line naming the cause; its ``insn_index`` names the instruction it is about, as
   data (None when no single instruction is to blame).
"""

from __future__ import annotations

import abc
import bisect
from dataclasses import dataclass, field
from typing import Any, Sequence

import numpy as np

from ..hw.config import VTAConfig


class DeviceError(RuntimeError):
    """A device-level failure (allocation, host access, backend fault)."""


class ProgramError(DeviceError):
    """A program that violates the ISA semantics; the message names the cause.

    Args:
        *args: as for any exception (the first is the one-line message).
        insn_index: keyword only; see the attribute.

    Attributes:
        insn_index: the 0-based index, within the launched instruction stream (for a
            streamed segment: within the segment), of the instruction the error is about;
            None when no single instruction is to blame (missing FINISH, tokens left at
            completion, a watchdog or bus error with nothing decoded, a ring fault).  Where
            the message says ``instruction <N>`` (the first it names, for a deadlock: the
            first stalled module's), ``insn_index == N``.

    Subclasses with their own constructor pass ``insn_index`` on to this one.  An error
    pickles and copies without calling any constructor (every attribute kept), and
    :meth:`with_message` rewords it keeping its class and attributes.
    """

    insn_index: int | None = None

    def __init__(self, *args: object, insn_index: int | None = None):
        super().__init__(*args)
        self.insn_index = None if insn_index is None else int(insn_index)

    def with_message(self, msg: str) -> ProgramError:
        """A new error of this error's class with message ``msg`` and every attribute of
        this one (``insn_index`` included); no constructor is called, so it works for a
        subclass whose constructor takes other arguments."""
        return _restore_program_error(type(self), (msg,), self.__dict__)

    def __reduce__(self):
        return _restore_program_error, (type(self), self.args, self.__dict__)


def _restore_program_error(cls: type, args: tuple, state: dict) -> ProgramError:
    """Rebuild a :class:`ProgramError` (or subclass) from its ``args`` and ``__dict__``
    without its constructor (pickling, :meth:`ProgramError.with_message`)."""
    err = cls.__new__(cls, *args)
    err.__dict__.update(state)
    return err


class DeadlockError(ProgramError):
    """No module can make progress and the program has not finished."""


@dataclass(frozen=True)
class Buffer:
    """A region of device memory: byte ``addr`` and size ``nbytes``."""

    addr: int
    nbytes: int

    @property
    def end(self) -> int:
        return self.addr + self.nbytes

    def elem_offset(self, elem_bytes: int) -> int:
        """The buffer's start in element units of ``elem_bytes`` (for ``dram_base``)."""
        assert self.addr % elem_bytes == 0
        return self.addr // elem_bytes


@dataclass
class RunResult:
    """What a run returns: ``cycles`` (0 when the backend does not count cycles) and
    ``stats`` (counter name → value; upstream fsim's keys plus per-opcode counts)."""

    cycles: int = 0
    stats: dict[str, Any] = field(default_factory=dict)


class Allocator:
    """First-fit allocator over ``[base, base+size)``, aligned to ``align`` bytes.

    Raises:
        DeviceError: out of memory, zero or negative size, double free.
    """

    def __init__(self, size: int, align: int, base: int | None = None):
        self.align = align
        self.base = align if base is None else base
        self.size = size
        self._free: list[tuple[int, int]] = [(self.base, self.base + size)]
        self.live: dict[int, int] = {}

    def alloc(self, nbytes: int) -> int:
        """Reserve ``nbytes`` bytes (rounded up to ``align``), first fit.

        Returns:
            The byte address of the block (a multiple of ``align`` when ``base`` is).
        Raises:
            DeviceError: ``nbytes <= 0``; no free block is large enough (the message gives
                the capacity and the bytes in use).
        """
        if nbytes <= 0:
            raise DeviceError(f"allocation size must be positive, got {nbytes}")
        n = -(-nbytes // self.align) * self.align
        for i, (s, e) in enumerate(self._free):
            if e - s >= n:
                self._free[i] = (s + n, e)
                if s + n == e:
                    del self._free[i]
                self.live[s] = n
                return s
        raise DeviceError(f"device memory exhausted: cannot allocate {nbytes} bytes "
                          f"(capacity {self.size} bytes, {sum(self.live.values())} in use)")

    def free(self, addr: int) -> None:
        """Release the block at byte address ``addr`` (as returned by :meth:`alloc`) and
        merge it with free neighbours.

        Raises:
            DeviceError: ``addr`` is not the start of a live block (double free, bad address).
        """
        n = self.live.pop(addr, None)
        if n is None:
            raise DeviceError(f"free of address 0x{addr:x} that is not allocated")
        starts = [s for s, _ in self._free]
        i = bisect.bisect(starts, addr)
        self._free.insert(i, (addr, addr + n))
        # coalesce neighbours
        merged: list[tuple[int, int]] = []
        for s, e in self._free:
            if merged and merged[-1][1] == s:
                merged[-1] = (merged[-1][0], e)
            else:
                merged.append((s, e))
        self._free = merged

    @property
    def high_water(self) -> int:
        """End address of the highest live allocation (bytes)."""
        return max((a + n for a, n in self.live.items()), default=self.base)


class Device(abc.ABC):
    """A VTA backend.  Subclasses implement memory access and :meth:`run`.

    Attributes:
        config: the :class:`VTAConfig` the device implements.
        target: backend name ("fsim", "rtl", "pynq").
    """

    target: str = "abstract"
    #: True when :meth:`run` itself checks everything the static verifier checks before
    #: it changes device memory (fsim); the builder then skips its separate dry run.
    #: Backends that cannot stop mid-run (rtl, pynq) keep it False.
    checks_in_run: bool = False

    def __init__(self, config: VTAConfig, mem_bytes: int = 256 << 20):
        self.config = config
        self.allocator = Allocator(mem_bytes, config.dram_alignment)

    # ---- memory
    def alloc(self, nbytes: int) -> Buffer:
        """Allocate ``nbytes`` of device memory aligned to ``config.dram_alignment``."""
        return Buffer(self.allocator.alloc(nbytes), nbytes)

    def free(self, buf: Buffer) -> None:
        """Release a buffer."""
        self.allocator.free(buf.addr)

    def buffers(self) -> list[Buffer]:
        """All live buffers (the default set of memory a program may touch)."""
        return [Buffer(a, n) for a, n in sorted(self.allocator.live.items())]

    def _check_host_access(self, buf: Buffer, offset: int, nbytes: int) -> None:
        if offset < 0 or nbytes < 0 or offset + nbytes > buf.nbytes:
            raise DeviceError(f"host access [{offset}, {offset + nbytes}) is outside the "
                              f"{buf.nbytes}-byte buffer at 0x{buf.addr:x}")

    def write(self, buf: Buffer, data: bytes | np.ndarray, offset: int = 0) -> None:
        """Copy host ``data`` (any dtype; its raw bytes) into ``buf`` at byte ``offset``."""
        raw = np.ascontiguousarray(data).reshape(-1).view(np.uint8)
        self._check_host_access(buf, offset, raw.size)
        self._write_mem(buf.addr + offset, raw)

    def read(self, buf: Buffer, nbytes: int | None = None, offset: int = 0) -> np.ndarray:
        """Copy ``nbytes`` (default: to the end) of ``buf`` from byte ``offset`` to the host,
        as a ``uint8`` array."""
        n = buf.nbytes - offset if nbytes is None else nbytes
        self._check_host_access(buf, offset, n)
        return self._read_mem(buf.addr + offset, n)

    @abc.abstractmethod
    def _write_mem(self, addr: int, data: np.ndarray) -> None: ...

    @abc.abstractmethod
    def _read_mem(self, addr: int, nbytes: int) -> np.ndarray: ...

    # ---- execution
    @abc.abstractmethod
    def run(self, insn_addr: int, insn_count: int, *,
            regions: Sequence[Buffer] | None = None, timeout_cycles: int | None = None
            ) -> RunResult:
        """Run ``insn_count`` instructions starting at byte address ``insn_addr``.

        Args:
            regions: the device memory the program may touch (DMA bounds, instruction
                fetch included); default: every live buffer.
            timeout_cycles: a watchdog: clock cycles for cycle-accurate backends; for fsim,
                scheduler steps (one per instruction plus one per micro-op, about one
                hardware cycle each); default: backend-chosen.

        Raises:
            ProgramError: the program breaks the ISA rules (see module docstring).
        """

    def close(self) -> None:
        """Release backend resources."""

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


def check_ring(cfg) -> None:
    """Raise :class:`DeviceError` unless ``cfg`` (a ``VTAConfig``) has the instruction
    ring: streamed execution (``stream_open``) needs a core built with ``INSN_RING > 0``."""
    if not cfg.INSN_RING:
        raise DeviceError(f"{cfg.bitstream_name} has no instruction ring (INSN_RING = 0): "
                          f"streamed execution needs a core built with INSN_RING > 0")
