"""``PynqDevice``: the ``pynq`` target, a generated core on a Zynq board (PYNQ image).

On a board every hardware access goes through the ``pynq`` package:

- **registers**: ``pynq.MMIO(reg_base, REGMAP_SIZE)`` (``pynq`` maps ``/dev/mem`` and adds
  the base's in-page offset itself), driven by the shared
  :class:`~vtaforge.runtime.mmio.CoreDriver`: identity check (``FINGERPRINT``/``VERSION``,
  BR-24), launch, ``STATUS.DONE`` polling under a wall-clock watchdog, counters.  The
  register base is the ``phys_addr`` of the overlay's ``ip_dict`` entry whose ``type`` is
  the wrapper's module reference (``xilinx.com:module_ref:vta_wrapper:1.0``), else the
  board family's default (0x43C00000 Zynq-7000, 0xA0000000 ZynqMP);
- **memory**: ``pynq.allocate(..., cacheable=True)``, never for fewer than
  :data:`MIN_ALLOC_BYTES`: buffers up to a quarter of :data:`POOL_CHUNK_BYTES` are
  sub-allocated from pooled chunks (:class:`BufferPool`), larger ones get their own
  allocation.  PYNQ 3.1 with XRT 2.17 places buffers of 4 KiB or less above 4 GiB on
  64-bit boards, and the core's AXI addresses are 32-bit: an allocation that lies above
  4 GiB anyway is refused with an error naming it;
- **PL clock**: ``pynq.Clocks.fclk0_mhz`` (the clock the core runs on) against
  ``CLOCK_MHZ``: faster (beyond 1 %) is refused, since the bitstream was timed for
  ``CLOCK_MHZ``; slower gives a ``RuntimeWarning`` (correct, slower; cycle-based timeouts
  use the measured clock).

Each piece can be replaced, so the driver runs against fakes and simulations
(``tests/runtime/test_pynq_fake.py``, ``tests/runtime/test_pynq_sim.py``): ``mmio`` (a
ready register port), ``mmio_factory`` (called like ``pynq.MMIO(base, length)``),
``allocator`` (``allocate(nbytes) -> HostBuffer``), ``pl_clock_mhz``.

Cache discipline (field-faults BR-22): every device buffer has a state,

- ``CLEAN``: the CPU's view and DRAM agree;
- ``HOST_DIRTY``: the host wrote it (inputs, instructions, micro-ops, a zero-filled
  output) and the lines may sit in the CPU cache;
- ``DEVICE_WRITTEN``: a run may have stored into it; the CPU's view may be stale.

Before a launch every chunk holding a ``HOST_DIRTY`` buffer is flushed (``auto_cache=True``,
the default) and the launch is refused if a buffer the program may touch is still
host-dirty (with ``auto_cache=False`` the caller flushes with :meth:`PynqDevice.flush`).
After a run, every buffer the program's STOREs reach is invalidated (``auto_cache``) or
marked ``DEVICE_WRITTEN``, in which state host reads are refused (manual mode) and host
writes invalidate first, so a partial write never merges stale lines that a later flush
would write back over the device's results.

Maintenance is per ``pynq`` allocation, as XRT does it (whole buffers): flushing a chunk
cleans every buffer in it; invalidating a chunk first flushes it when any buffer in it holds
host writes (an invalidate drops dirty lines; on Zynq-7000 the PL310 does not write them
back), and leaves every buffer in it clean.  Sub-buffers are aligned to 64 bytes (a cache
line), so no line is shared by two buffers.  Every flush and invalidate goes through the
module functions :func:`_flush` and :func:`_invalidate`.

The static verifier (:func:`vtaforge.runtime.verify.verify_program`) runs before every
launch on a :class:`~vtaforge.runtime.verify.SparseImage` holding only the instructions
and the micro-op buffers: its memory is sized by the program's buffers, whatever their
physical addresses.  With ``verify`` on, :attr:`PynqDevice.checks_in_run` is True, so the
program builder does not run a second dry run of its own.
"""

from __future__ import annotations

import enum
import os
import time
import warnings
from dataclasses import dataclass, field
from typing import Any, Callable, Protocol, Sequence

import numpy as np

from ..hw import regs
from ..hw.config import MemType, VTAConfig
from ..hw.isa import ISAError, Opcode, decode_program, encode_program, isa_layout
from .device import Allocator as _SubAllocator
from .device import Buffer, Device, DeviceError, ProgramError, RunResult
from .mmio import STAT_REGISTERS, CoreDriver, CoreTimeout, RegisterPort, Watchdog

__all__ = ["PynqDevice", "PynqAllocator", "BufferPool", "HostBuffer", "MMIO", "Allocator",
           "CacheState", "run_raw", "find_core", "STAT_REGISTERS", "DEFAULT_TIMEOUT_S",
           "MIN_ALLOC_BYTES", "POOL_CHUNK_BYTES", "CACHE_LINE_BYTES"]

#: Default wall-clock timeout of one run, seconds.
DEFAULT_TIMEOUT_S = 10.0
#: Seconds between two polls of STATUS.DONE.
DEFAULT_POLL_S = 20e-6
#: The smallest ``pynq.allocate`` this backend makes (PYNQ 4.0 also allocates at least
#: 8 KiB: XRT 2.17 gave buffers <= 4 KiB addresses above 4 GiB on 64-bit boards).
MIN_ALLOC_BYTES = 8192
#: Size of one pooled chunk; buffers up to a quarter of it are sub-allocated.
POOL_CHUNK_BYTES = 256 << 10
#: Alignment of sub-allocated buffers: a cache line (64 B on Cortex-A53, 32 B on A9/PL310).
CACHE_LINE_BYTES = 64
#: Relative PL-clock deviation from CLOCK_MHZ that is accepted silently.
CLOCK_TOLERANCE = 0.01
#: The core's DMA reach: AXI addresses are 32-bit.
ADDR_LIMIT = 1 << 32

MMIO = RegisterPort  # the register-port protocol (``pynq.MMIO`` has this shape)


@dataclass
class HostBuffer:
    """A physically contiguous buffer as the allocator hands it out.

    Attributes:
        phys_addr: physical byte address (what the core's DMA uses).
        array: the CPU's ``uint8`` view (at least the requested size; cacheable).
        flush: write the CPU's dirty cache lines of the buffer back to DRAM.
        invalidate: drop the buffer's cache lines (the next CPU read comes from DRAM).
        free: release the buffer.
    """

    phys_addr: int
    array: np.ndarray
    flush: Callable[[], None]
    invalidate: Callable[[], None]
    free: Callable[[], None] = lambda: None


class Allocator(Protocol):
    """Hands out :class:`HostBuffer` s of contiguous, DMA-able memory."""

    def allocate(self, nbytes: int) -> HostBuffer: ...


class CacheState(enum.Enum):
    """Ownership of one buffer's bytes (see the module docstring)."""

    CLEAN = "clean"
    HOST_DIRTY = "host-dirty"
    DEVICE_WRITTEN = "device-written"


def _flush(host: HostBuffer) -> None:
    """Write the CPU's dirty lines of one allocation back to DRAM (every flush of this
    backend goes through here)."""
    host.flush()


def _invalidate(host: HostBuffer) -> None:
    """Drop the CPU's lines of one allocation (every invalidate goes through here)."""
    host.invalidate()


def _import_pynq(why: str):
    try:
        import pynq  # noqa: PLC0415 - only on a board
    except ImportError as e:
        raise DeviceError(f"target 'pynq' needs the pynq package for {why} (run on a board "
                          f"with the PYNQ image, or pip install pynq): {e}") from None
    return pynq


# ---------------------------------------------------------------------------- memory
class PynqAllocator:
    """Cacheable contiguous buffers from ``pynq.allocate`` (CMA on the PYNQ image).

    Raises:
        DeviceError: the ``pynq`` package is missing or the allocation fails.
    """

    def __init__(self, pynq_module=None):
        self._pynq = pynq_module if pynq_module is not None else _import_pynq("memory")

    def allocate(self, nbytes: int) -> HostBuffer:
        try:
            b = self._pynq.allocate(shape=(int(nbytes),), dtype=np.uint8, cacheable=True)
        except Exception as e:  # noqa: BLE001 - pynq raises several kinds
            raise DeviceError(f"pynq.allocate of {nbytes} bytes failed: {e}") from None
        return HostBuffer(phys_addr=int(b.physical_address), array=b, flush=b.flush,
                          invalidate=b.invalidate, free=b.freebuffer)


@dataclass(eq=False)
class _Chunk:
    """One allocation from the allocator: a pooled chunk (``sub`` set) or a dedicated
    buffer."""

    host: HostBuffer
    nbytes: int
    sub: _SubAllocator | None
    entries: dict = field(default_factory=dict)  # addr -> _Entry living in this chunk

    @property
    def phys(self) -> int:
        return int(self.host.phys_addr)


class BufferPool:
    """Device buffers carved out of few, large allocations.

    A request of at most ``chunk_bytes // 4`` bytes is placed first-fit, aligned to
    ``align``, in a pooled chunk of ``chunk_bytes`` (a new chunk when none has room); a
    larger one gets its own allocation, rounded up to 4 KiB.  No allocation is smaller
    than :data:`MIN_ALLOC_BYTES`.  A chunk is returned to the allocator when its last
    buffer is freed.

    Raises:
        DeviceError: the allocator fails, or returns memory at address 0, misaligned,
            smaller than asked, or beyond the core's 32-bit reach (the message names it).
    """

    def __init__(self, allocator: Allocator, *, align: int,
                 chunk_bytes: int = POOL_CHUNK_BYTES):
        self.allocator = allocator
        self.align = max(int(align), CACHE_LINE_BYTES)
        self.chunk_bytes = max(-(-int(chunk_bytes) // 4096) * 4096, MIN_ALLOC_BYTES)
        self.max_sub = self.chunk_bytes // 4
        self.chunks: list[_Chunk] = []
        self.allocations = 0  # calls to the allocator (statistics)

    def _new(self, n: int, pooled: bool) -> _Chunk:
        hb = self.allocator.allocate(n)
        self.allocations += 1
        a = int(hb.phys_addr)
        bad = None
        if a == 0:
            bad = "is the null address"
        elif a % self.align:
            bad = f"is not aligned to {self.align} bytes"
        elif a + n > ADDR_LIMIT:
            bad = (f"lies above 4 GiB, beyond the core's 32-bit AXI addresses (PYNQ 3.1 "
                   f"with XRT 2.17 puts buffers of 4 KiB or less there on 64-bit boards; "
                   f"this runtime never asks for less than {MIN_ALLOC_BYTES} bytes, so "
                   f"the board's CMA region itself seems to lie above 4 GiB)")
        elif hb.array.size * hb.array.itemsize < n:
            bad = f"has a {hb.array.size * hb.array.itemsize}-byte view, fewer than {n}"
        if bad:
            hb.free()
            raise DeviceError(f"the allocator returned {n} bytes at physical 0x{a:x}, "
                              f"which {bad}")
        arr = hb.array if hb.array.dtype == np.uint8 else hb.array.view(np.uint8)
        hb = HostBuffer(a, arr.reshape(-1), hb.flush, hb.invalidate, hb.free)
        c = _Chunk(hb, n, _SubAllocator(n, self.align, base=a) if pooled else None)
        self.chunks.append(c)
        return c

    def alloc(self, nbytes: int) -> tuple[int, _Chunk]:
        """Physical address and chunk of a new ``nbytes`` buffer."""
        n = -(-int(nbytes) // self.align) * self.align
        if n > self.max_sub:
            c = self._new(max(-(-n // 4096) * 4096, MIN_ALLOC_BYTES), pooled=False)
            return c.phys, c
        for c in self.chunks:
            if c.sub is not None:
                try:
                    return c.sub.alloc(n), c
                except DeviceError:
                    continue
        c = self._new(self.chunk_bytes, pooled=True)
        return c.sub.alloc(n), c

    def free(self, addr: int, c: _Chunk) -> None:
        """Release the buffer at ``addr`` in chunk ``c`` (and the chunk when it empties)."""
        if c.sub is not None:
            c.sub.free(addr)
            if c.sub.live:
                return
        self.chunks.remove(c)
        c.host.free()

    def close(self) -> None:
        """Release every chunk."""
        for c in self.chunks:
            c.host.free()
        self.chunks.clear()


# ---------------------------------------------------------------------------- the core
def find_core(ip_dict: dict) -> tuple[str, dict] | None:
    """The vtaforge core in an overlay's ``ip_dict``: the entry whose ``type`` is the
    wrapper's module reference (``xilinx.com:module_ref:vta_wrapper:<version>``), as
    ``(name, entry)``; None when there is none.

    Raises:
        DeviceError: several entries match (pass ``reg_base`` to pick one).
    """
    from ..hw.vivado import WRAPPER_NAME  # noqa: PLC0415

    prefix = f"xilinx.com:module_ref:{WRAPPER_NAME}:"
    hits = [(n, ip) for n, ip in ip_dict.items()
            if str(ip.get("type", "")).startswith(prefix) and "phys_addr" in ip]
    if len(hits) > 1:
        raise DeviceError(f"the overlay has {len(hits)} vtaforge cores "
                          f"({', '.join(n for n, _ in hits)}); pass reg_base to pick one")
    return hits[0] if hits else None


def _read_pl_clock(pynq) -> float:
    """``fclk0_mhz`` of pynq's ``Clocks`` (the PL clock the core runs on)."""
    clocks = getattr(pynq, "Clocks", None)
    if clocks is None:
        clocks = pynq.ps.Clocks
    return float(clocks.fclk0_mhz)


@dataclass(eq=False)
class _Entry:
    chunk: _Chunk
    addr: int
    nbytes: int
    view: np.ndarray  # the CPU's view, rounded-up length
    state: CacheState = CacheState.CLEAN


class PynqDevice(Device):
    """A VTA core on a Zynq board as a :class:`Device` (target ``"pynq"``).

    Args:
        config: the core's configuration; the bitstream's FINGERPRINT must equal
            ``config.fingerprint``.
        bitstream: the overlay to program with ``pynq.Overlay`` (a ``.bit`` path with its
            ``.hwh`` beside it, or an installed overlay's name); ``None``: the environment
            variable ``VTAFORGE_BITSTREAM`` if set (how ``vtaforge run/exec --target pynq``
            pick it up), else the PL is taken as already programmed.
        mmio: a ready register port (``read(offset)``, ``write(offset, value)``).
        mmio_factory: called as ``mmio_factory(reg_base, REGMAP_SIZE)`` for the port
            (default ``pynq.MMIO``); ignored when ``mmio`` is given.
        allocator: an :class:`Allocator` (default: :class:`PynqAllocator`).
        reg_base: physical address of the register window (default: the overlay's core,
            see :func:`find_core`, else the board family's: 0x43C00000 Zynq-7000,
            0xA0000000 ZynqMP).
        timeout_s: wall-clock watchdog per run, seconds.
        poll_s: seconds between polls of STATUS.DONE.
        auto_cache: flush host-dirty buffers before a launch and invalidate device-written
            ones after it (default).  ``False``: the caller calls :meth:`flush` /
            :meth:`invalidate`; launches over host-dirty buffers and reads of
            device-written ones are refused.
        verify: run the static verifier before every launch (default True).
        pool_chunk_bytes: size of a pooled chunk (see :class:`BufferPool`).
        pl_clock_mhz: the PL clock, MHz (default: read ``pynq.Clocks.fclk0_mhz`` when the
            ``pynq`` package is in use; unknown otherwise).
        check_clock: compare the PL clock with ``CLOCK_MHZ`` (see the module docstring).
        sleep, clock: injectable ``time.sleep`` / ``time.monotonic`` (tests).

    Raises:
        DeviceError: no ``pynq`` package and no fakes given; the overlay cannot be loaded
            or holds several cores; the register window does not hold a vtaforge core, or
            its fingerprint or register-map version differs from the config's (the
            message names both fingerprints); the PL clock is faster than ``CLOCK_MHZ``.
    """

    target = "pynq"

    def __init__(self, config: VTAConfig, *, bitstream: str | None = None,
                 mmio: RegisterPort | None = None,
                 mmio_factory: Callable[[int, int], RegisterPort] | None = None,
                 allocator: Allocator | None = None, reg_base: int | None = None,
                 timeout_s: float = DEFAULT_TIMEOUT_S, poll_s: float = DEFAULT_POLL_S,
                 auto_cache: bool = True, verify: bool = True,
                 pool_chunk_bytes: int = POOL_CHUNK_BYTES, pl_clock_mhz: float | None = None,
                 check_clock: bool = True,
                 sleep: Callable[[float], None] = time.sleep,
                 clock: Callable[[], float] = time.monotonic):
        super().__init__(config, mem_bytes=1 << 32)
        self._bufs: dict[int, _Entry] = {}
        self.pool: BufferPool | None = None
        self.mmio = None
        self.timeout_s = float(timeout_s)
        self.poll_s = float(poll_s)
        self.auto_cache = bool(auto_cache)
        self.verify = bool(verify)
        self._sleep, self._clock = sleep, clock
        self.overlay = None
        self.core_name: str | None = None
        pynq = None
        if bitstream is None and mmio is None:
            bitstream = os.environ.get("VTAFORGE_BITSTREAM") or None
        if bitstream is not None:
            pynq = _import_pynq(f"programming {bitstream!r}")
            try:
                self.overlay = pynq.Overlay(bitstream)
            except Exception as e:  # noqa: BLE001 - pynq raises several kinds
                raise DeviceError(f"pynq.Overlay({bitstream!r}) failed: "
                                  f"{type(e).__name__}: {e}") from None
            if reg_base is None:
                ip_dict = getattr(self.overlay, "ip_dict", None) or {}
                hit = find_core(ip_dict)
                if hit is None:
                    from ..hw.vivado import WRAPPER_NAME  # noqa: PLC0415

                    raise DeviceError(
                        f"overlay {bitstream!r} has no vtaforge core: no ip_dict entry of "
                        f"type xilinx.com:module_ref:{WRAPPER_NAME}:* (entries: "
                        f"{', '.join(sorted(ip_dict)) or 'none'}); pass reg_base if the "
                        f"core is there under another type")
                self.core_name, ip = hit
                reg_base = int(ip["phys_addr"])
                if int(ip.get("addr_range", regs.REGMAP_SIZE)) < regs.REGMAP_SIZE:
                    raise DeviceError(f"the overlay maps only {ip['addr_range']} bytes for "
                                      f"{self.core_name}; its register map needs "
                                      f"{regs.REGMAP_SIZE}")
        if reg_base is None:
            from ..hw.parts import FlowError, board_spec  # noqa: PLC0415

            try:
                reg_base = board_spec(config).reg_base
            except FlowError as e:
                raise DeviceError(str(e)) from None
        self.reg_base = int(reg_base)
        # memory first: without the pynq package nothing touches the registers
        if allocator is None:
            pynq = pynq or _import_pynq("memory")
            allocator = PynqAllocator(pynq)
        self.host_allocator = allocator
        self.pool = BufferPool(allocator, align=config.dram_alignment,
                               chunk_bytes=pool_chunk_bytes)
        if mmio is None:
            if mmio_factory is None:
                pynq = pynq or _import_pynq("register access")
                mmio_factory = pynq.MMIO
            try:
                mmio = mmio_factory(self.reg_base, regs.REGMAP_SIZE)
            except Exception as e:  # noqa: BLE001
                raise DeviceError(f"cannot map the registers at 0x{self.reg_base:08x}: "
                                  f"{type(e).__name__}: {e}") from None
        self.mmio = mmio
        # the program reader lets a fault report name the instruction as fsim does
        self.driver = CoreDriver(mmio, where=f"register window 0x{self.reg_base:08x}",
                                 read_program=lambda a, n: self._program_bytes(a, n // 16))
        self.driver.identify(config)
        self.pl_clock_mhz = pl_clock_mhz
        if self.pl_clock_mhz is None and check_clock and pynq is not None:
            try:
                self.pl_clock_mhz = _read_pl_clock(pynq)
            except Exception as e:  # noqa: BLE001
                warnings.warn(f"cannot read the PL clock (pynq Clocks.fclk0_mhz: {e}); it is "
                              f"not checked against CLOCK_MHZ = {config.CLOCK_MHZ:g}",
                              RuntimeWarning, stacklevel=2)
        if check_clock and self.pl_clock_mhz is not None:
            self._check_clock(float(self.pl_clock_mhz))

    def _check_clock(self, mhz: float) -> None:
        want = float(self.config.CLOCK_MHZ)
        if mhz > want * (1 + CLOCK_TOLERANCE):
            raise DeviceError(f"the PL clock fclk0 runs at {mhz:g} MHz, faster than the "
                              f"CLOCK_MHZ = {want:g} the bitstream was built and timed for "
                              f"(results could be wrong); refusing to run: set "
                              f"pynq.Clocks.fclk0_mhz = {want:g}, or rebuild for this clock")
        if mhz < want * (1 - CLOCK_TOLERANCE):
            warnings.warn(f"the PL clock fclk0 runs at {mhz:g} MHz, below CLOCK_MHZ = "
                          f"{want:g}: results are right but runs take {want / mhz:.2f}x "
                          f"longer; cycle-based timeouts use {mhz:g} MHz", RuntimeWarning,
                          stacklevel=3)

    @property
    def clock_mhz(self) -> float:
        """The core's clock: the measured PL clock when known, else ``CLOCK_MHZ``."""
        return float(self.pl_clock_mhz or self.config.CLOCK_MHZ)

    @property
    def checks_in_run(self) -> bool:
        """True with ``verify``: :meth:`run` runs the whole static verifier before it
        launches (nothing reaches the core unverified), so the program builder skips its
        own dry run."""
        return self.verify

    # ------------------------------------------------------------------ registers
    def reg_read(self, name_or_offset: str | int) -> int:
        """A control register (name from ``hw/regs.py`` or byte offset)."""
        off = regs.offset(name_or_offset) if isinstance(name_or_offset, str) else name_or_offset
        return int(self.mmio.read(off)) & 0xFFFFFFFF

    def reg_write(self, name_or_offset: str | int, value: int, *, raw: bool = False) -> None:
        """Write a control register.  A ring register named by its name is checked by the
        driver first (``CoreDriver.check_write``, against the open stream session);
        ``raw=True`` writes it unchecked (the core then refuses what is unsafe: a ring
        fault).

        Raises:
            DeviceError: the driver refused the write (nothing was written).
        """
        if isinstance(name_or_offset, str) and not raw:
            self.driver.write(name_or_offset, value)
            return
        off = regs.offset(name_or_offset) if isinstance(name_or_offset, str) else name_or_offset
        self.mmio.write(off, int(value) & 0xFFFFFFFF)

    # ------------------------------------------------------------------ memory
    def alloc(self, nbytes: int) -> Buffer:
        """Allocate ``nbytes`` of contiguous device memory (cacheable on the CPU side),
        from the pool (see :class:`BufferPool`).

        Raises:
            DeviceError: non-positive size; the allocator fails or returns unusable
                memory (null, misaligned, above the core's 32-bit reach).
        """
        if nbytes <= 0:
            raise DeviceError(f"allocation size must be positive, got {nbytes}")
        a, c = self.pool.alloc(int(nbytes))
        if a % self.config.dram_alignment:  # pragma: no cover - the pool aligns
            raise DeviceError(f"buffer at 0x{a:x} is not aligned to "
                              f"{self.config.dram_alignment} bytes")
        n = -(-int(nbytes) // self.pool.align) * self.pool.align
        off = a - c.phys
        e = _Entry(c, a, int(nbytes), c.host.array[off:off + n])
        c.entries[a] = e
        self._bufs[a] = e
        return Buffer(a, int(nbytes))

    def free(self, buf: Buffer) -> None:
        """Release a buffer."""
        e = self._bufs.pop(buf.addr, None)
        if e is None:
            raise DeviceError(f"free of address 0x{buf.addr:x} that is not allocated")
        del e.chunk.entries[e.addr]
        self.pool.free(e.addr, e.chunk)

    def buffers(self) -> list[Buffer]:
        """All live buffers."""
        return [Buffer(a, e.nbytes) for a, e in sorted(self._bufs.items())]

    def allocation_of(self, buf: Buffer) -> Buffer:
        """The ``pynq`` allocation (pooled chunk or dedicated buffer) holding ``buf``."""
        c = self._entry(buf).chunk
        return Buffer(c.phys, c.nbytes)

    def _entry(self, buf: Buffer) -> _Entry:
        e = self._bufs.get(buf.addr)
        if e is None or buf.nbytes > e.nbytes:
            raise DeviceError(f"buffer at 0x{buf.addr:x} ({buf.nbytes} bytes) was not "
                              f"allocated on this device")
        return e

    def state(self, buf: Buffer) -> CacheState:
        """The cache state of ``buf``."""
        return self._entry(buf).state

    def _flush_chunk(self, c: _Chunk) -> None:
        _flush(c.host)
        for e in c.entries.values():
            if e.state is CacheState.HOST_DIRTY:
                e.state = CacheState.CLEAN

    def _invalidate_chunk(self, c: _Chunk) -> None:
        if any(e.state is CacheState.HOST_DIRTY for e in c.entries.values()):
            self._flush_chunk(c)  # the invalidate drops dirty lines of the whole chunk
        _invalidate(c.host)
        for e in c.entries.values():
            e.state = CacheState.CLEAN

    def flush(self, buf: Buffer) -> None:
        """Write the CPU's cached bytes of ``buf`` to DRAM (host-dirty → clean); the
        whole allocation holding it is flushed."""
        e = self._entry(buf)
        if e.state is CacheState.HOST_DIRTY:
            self._flush_chunk(e.chunk)

    def invalidate(self, buf: Buffer) -> None:
        """Drop the CPU's cached lines of ``buf`` so reads see what the device wrote
        (device-written → clean).  Host writes to other buffers of the same allocation
        are flushed first.

        Raises:
            DeviceError: ``buf`` holds unflushed host writes (they would be lost).
        """
        e = self._entry(buf)
        if e.state is CacheState.HOST_DIRTY:
            raise DeviceError(f"invalidating buffer at 0x{buf.addr:x} would discard host "
                              f"writes that were never flushed")
        self._invalidate_chunk(e.chunk)

    def host_view(self, buf: Buffer) -> np.ndarray:
        """The CPU's ``uint8`` view of ``buf`` for zero-copy writes; marks it host-dirty
        (so it is flushed before the next launch)."""
        e = self._entry(buf)
        self._before_host_write(buf, e)
        e.state = CacheState.HOST_DIRTY
        return e.view[:buf.nbytes]

    def _before_host_write(self, buf: Buffer, e: _Entry) -> None:
        if e.state is CacheState.DEVICE_WRITTEN:
            # stale lines merged with new bytes would be written back over the device's data
            if not self.auto_cache:
                raise DeviceError(f"buffer at 0x{buf.addr:x} was written by the device and "
                                  f"not invalidated; invalidate it before writing")
            self._invalidate_chunk(e.chunk)

    def write(self, buf: Buffer, data: bytes | np.ndarray, offset: int = 0) -> None:
        """Copy host ``data`` (raw bytes of any dtype) into ``buf`` at byte ``offset``;
        the buffer becomes host-dirty."""
        raw = np.ascontiguousarray(data).reshape(-1).view(np.uint8)
        self._check_host_access(buf, offset, raw.size)
        e = self._entry(buf)
        self._before_host_write(buf, e)
        e.view[offset:offset + raw.size] = raw
        e.state = CacheState.HOST_DIRTY

    def read(self, buf: Buffer, nbytes: int | None = None, offset: int = 0) -> np.ndarray:
        """Copy bytes of ``buf`` to the host (``uint8``).

        Raises:
            DeviceError: out of range; or (``auto_cache=False``) the buffer was written by
                the device and not invalidated.
        """
        n = buf.nbytes - offset if nbytes is None else nbytes
        self._check_host_access(buf, offset, n)
        e = self._entry(buf)
        if e.state is CacheState.DEVICE_WRITTEN:
            if not self.auto_cache:
                raise DeviceError(f"buffer at 0x{buf.addr:x} was written by the device and "
                                  f"not invalidated; reading it could return stale cache "
                                  f"lines")
            self.invalidate(buf)
        return np.array(e.view[offset:offset + n], dtype=np.uint8, copy=True)

    def _write_mem(self, addr: int, data: np.ndarray) -> None:  # pragma: no cover
        raise DeviceError("PynqDevice writes go through write(buf, ...)")

    def _read_mem(self, addr: int, nbytes: int) -> np.ndarray:  # pragma: no cover
        raise DeviceError("PynqDevice reads go through read(buf, ...)")

    def _owner(self, start: int, end: int) -> _Entry | None:
        """The live buffer holding ``[start, end)`` entirely, or None."""
        for a, e in self._bufs.items():
            if a <= start and end <= a + e.nbytes:
                return e
        return None

    def _overlapping(self, start: int, end: int) -> list[_Entry]:
        return [e for a, e in self._bufs.items() if a < end and start < a + e.nbytes]

    # ------------------------------------------------------------------ runs
    def _program_bytes(self, insn_addr: int, insn_count: int) -> np.ndarray:
        end = insn_addr + 16 * insn_count
        e = self._owner(insn_addr, end)
        if e is None:
            raise ProgramError(f"instruction fetch [0x{insn_addr:x}, 0x{end:x}) is outside "
                               f"every allocated buffer")
        return e.view[insn_addr - e.addr:end - e.addr]

    def _verify(self, insn_addr: int, insn_count: int, regions: list[Buffer],
                prog_bytes: np.ndarray, cols: dict, segment: bool = False) -> dict[str, Any]:
        """Static verifier on a sparse image: the instructions and the buffers the
        program's micro-op loads read (all it reads), at their physical addresses
        (``segment``: :func:`.verify.verify_segment`, for a streamed segment)."""
        from .verify import SparseImage, verify_program, verify_segment  # noqa: PLC0415

        segs: dict[int, np.ndarray] = {}
        ue = self.config.elem_bytes(MemType.UOP)
        sel = ((cols["opcode"] == Opcode.LOAD) & (cols["memory_type"] == MemType.UOP)
               & (cols["x_size"] > 0))
        for base, xs in zip(cols["dram_base"][sel], cols["x_size"][sel]):
            s, t = int(base) * ue, (int(base) + int(xs)) * ue
            for e in self._overlapping(s, t):
                segs[e.addr] = e.view[:e.nbytes]
        image = SparseImage([*segs.items(), (insn_addr, prog_bytes)])
        self.last_verify_image_bytes = image.nbytes
        check = verify_segment if segment else verify_program
        report = check(self.config, image, insn_addr, insn_count, regions)
        return dict(report.stats)

    def _store_targets(self, cols: dict) -> list[_Entry]:
        """Buffers the program's STOREs may write."""
        oe = self.config.elem_bytes(MemType.OUT)
        sel = (cols["opcode"] == Opcode.STORE) & (cols["x_size"] > 0)
        hit: dict[int, _Entry] = {}
        for base, ys, xs, st in zip(cols["dram_base"][sel], cols["y_size"][sel],
                                    cols["x_size"][sel], cols["x_stride"][sel]):
            s = int(base) * oe
            t = s + ((max(int(ys), 1) - 1) * int(st) + int(xs)) * oe
            for e in self._overlapping(s, t):
                hit[e.addr] = e
        return list(hit.values())

    def run(self, insn_addr: int, insn_count: int, *,
            regions: Sequence[Buffer] | None = None, timeout_cycles: int | None = None
            ) -> RunResult:
        """Flush, verify, launch, wait, invalidate (see :meth:`Device.run`).

        ``timeout_cycles`` (if given) becomes a wall-clock limit of ``timeout_cycles`` at
        :attr:`clock_mhz` (at least 10 ms), else :attr:`timeout_s`.  ``stats``: the
        verifier's data-independent counters, overridden by the counter registers
        (``cycles``, ``fetch_busy`` ... ``dram_write_nbytes``), plus ``board_seconds``
        (wall time from START to DONE).

        Raises:
            ProgramError: rejected by the verifier, or the run did not finish in time
                (``insn_index`` None).
            CoreFault: a ``ProgramError``: the core reported a scratchpad fault; its
                ``insn_index`` is the instruction the error registers name (``ERR_INSN``).
            DeviceError: a region outside the allocated buffers; a host-dirty buffer in the
                regions (manual cache mode); the core still busy from an earlier run.
        """
        if insn_count <= 0:
            raise ProgramError(f"insn_count must be positive, got {insn_count}")
        regions = self.buffers() if regions is None else list(regions)
        if not regions:
            raise DeviceError("no device memory: allocate buffers before running")
        for r in regions:
            a, n = (r.addr, r.nbytes) if isinstance(r, Buffer) else (int(r[0]), int(r[1]))
            if self._owner(a, a + n) is None:
                raise DeviceError(f"region [0x{a:x}, 0x{a + n:x}) is not inside an allocated "
                                  f"buffer; the core could DMA into foreign memory")
        regions = [r if isinstance(r, Buffer) else Buffer(int(r[0]), int(r[1]))
                   for r in regions]
        prog_bytes = np.array(self._program_bytes(insn_addr, insn_count), copy=True)
        cols = decode_program(self.config, prog_bytes)
        # 1. host-written buffers reach DRAM before the core reads them (BR-22)
        if self.auto_cache:
            for c in list(self.pool.chunks):
                if any(e.state is CacheState.HOST_DIRTY for e in c.entries.values()):
                    self._flush_chunk(c)
        for r in regions:
            for e in self._overlapping(r.addr, r.end):
                if e.state is CacheState.HOST_DIRTY:
                    raise DeviceError(f"refusing to launch: buffer at 0x{e.addr:x} "
                                      f"({e.nbytes} bytes) holds host writes not flushed to "
                                      f"DRAM; call flush() on it first")
        # 2. static verifier
        static: dict[str, Any] = {}
        if self.verify:
            static = self._verify(insn_addr, insn_count, regions, prog_bytes, cols)
        written = self._store_targets(cols)
        region_bufs = {e.addr: e for r in regions for e in self._overlapping(r.addr, r.end)}
        limit = self.timeout_s
        if timeout_cycles:
            limit = max(0.01, float(timeout_cycles) / (self.clock_mhz * 1e6))
        # 3. launch (refused while the core is busy), 4. wait for DONE
        self.driver.launch(insn_addr, insn_count, irq=False)  # this driver polls
        dog = Watchdog.wall_clock(limit, self.poll_s, sleep=self._sleep, clock=self._clock)
        try:
            wall = self.driver.wait(dog)
        except CoreTimeout as t:
            for e in region_bufs.values():  # the core may still be writing anything
                if e.state is CacheState.CLEAN:
                    e.state = CacheState.DEVICE_WRITTEN
            cyc = self.driver.read("CYCLES_LO")
            raise ProgramError(f"board run not done after {limit:g} s "
                               f"(STATUS=0x{t.status:x}, cycle counter {cyc}); the core is "
                               f"stalled or its DMA is blocked: reprogram the bitstream "
                               f"to reset it") from None
        # 5. the device's stores become visible to the CPU (BR-22)
        for e in written:
            e.state = CacheState.DEVICE_WRITTEN
        if self.auto_cache:
            for c in {id(e.chunk): e.chunk for e in written}.values():
                self._invalidate_chunk(c)
        stats: dict[str, Any] = dict(self.driver.counters())
        stats["board_seconds"] = wall
        return RunResult(cycles=stats["cycles"], stats={**static, **stats})

    # ------------------------------------------------------------------ streaming
    def stream_open(self) -> None:
        """Start a streamed-execution session: a ring of ``INSN_RING`` 16-byte slots is
        allocated in device memory and opened (``CoreDriver.ring_open``); ring writes are
        flushed from the CPU cache before the doorbell.

        Raises:
            DeviceError: the core has no ring (``INSN_RING = 0``), a session is open, or
                the core is busy.
        """
        from .device import check_ring  # noqa: PLC0415

        check_ring(self.config)
        if getattr(self, "_stream", None) is not None:
            raise DeviceError("board: a stream session is already open")
        ring = self.alloc(self.config.INSN_RING * 16)
        e = self._entry(ring)

        def write_ring(addr: int, data: np.ndarray) -> None:
            self.write(ring, data, offset=addr - ring.addr)
            self._flush_chunk(e.chunk)

        self._stream = {"ring": ring, "written": {}}
        try:
            self.driver.ring_open(ring.addr, self.config.INSN_RING, write_ring=write_ring)
        except BaseException:
            self._stream = None
            self.free(ring)
            raise

    def _stream_limit(self, timeout_cycles: int | None) -> Watchdog:
        limit = self.timeout_s
        if timeout_cycles:
            limit = max(0.01, float(timeout_cycles) / (self.clock_mhz * 1e6))
        return Watchdog.wall_clock(limit, self.poll_s, sleep=self._sleep, clock=self._clock)

    def stream_append(self, insn_addr: int, insn_count: int, *,
                      regions: Sequence[Buffer] | None = None,
                      timeout_cycles: int | None = None) -> int:
        """Flush host-dirty buffers, verify the segment (``verify_segment``) and append it
        to the ring.  Returns its number ``k``.

        Raises:
            ProgramError: refused by the verifier, or the ring stayed full past the
                watchdog.
            DeviceError: no session; a region outside the allocated buffers.
        """
        st = getattr(self, "_stream", None)
        if st is None:
            raise DeviceError("board: no stream session is open (stream_open first)")
        regions = [b for b in (self.buffers() if regions is None else list(regions))
                   if b != st["ring"]]
        for r in regions:
            if self._owner(r.addr, r.end) is None:
                raise DeviceError(f"region [0x{r.addr:x}, 0x{r.end:x}) is not inside an "
                                  f"allocated buffer; the core could DMA into foreign memory")
        prog = np.array(self._program_bytes(insn_addr, insn_count), copy=True)
        cols = decode_program(self.config, prog)
        if self.auto_cache:
            for c in list(self.pool.chunks):
                if any(e.state is CacheState.HOST_DIRTY for e in c.entries.values()):
                    self._flush_chunk(c)
        if self.verify:
            self._verify(insn_addr, insn_count, regions, prog, cols, segment=True)
        try:
            k = self.driver.ring_append(prog, self._stream_limit(timeout_cycles))
        except ProgramError as e:   # a CoreFault while waiting for slots: class and index kept
            raise e.with_message(f"board: {e}") from None
        except DeviceError as e:
            raise ProgramError(f"board: {e}") from None
        st["written"][k] = self._store_targets(cols)
        return k

    def stream_wait(self, k: int, *, timeout_cycles: int | None = None) -> RunResult:
        """Wait for segment ``k`` (``FINISH_COUNT >= k``); the buffers its segments stored
        to become readable (invalidated).  Returns ``cycles`` so far and ``finish_count``.

        Raises:
            ProgramError: the watchdog fired (reprogram the bitstream), or a fault report.
        """
        st = getattr(self, "_stream", None)
        if st is None:
            raise DeviceError("board: no stream session is open (stream_open first)")
        try:
            self.driver.ring_wait(int(k), self._stream_limit(timeout_cycles))
        except CoreTimeout as t:
            raise ProgramError(f"board: {t}; the core is stalled: reprogram the bitstream "
                               f"to reset it") from None
        done = [j for j in st["written"] if j <= k]
        written = {e.addr: e for j in done for e in st["written"].pop(j)}
        for e in written.values():
            e.state = CacheState.DEVICE_WRITTEN
        if self.auto_cache:
            for c in {id(e.chunk): e.chunk for e in written.values()}.values():
                self._invalidate_chunk(c)
        fin = self.driver.finish_count()
        return RunResult(cycles=self.driver.read("CYCLES_LO"), stats={"finish_count": fin})

    @property
    def finish_count(self) -> int:
        """``FINISH_COUNT`` of the open session."""
        return self.driver.finish_count()

    def stream_close(self, *, timeout_cycles: int | None = None) -> RunResult:
        """End the session (the ring drains, DONE rises) and free the ring; returns the
        session's counters plus ``ring_idle`` and ``finish_count``."""
        st = getattr(self, "_stream", None)
        if st is None:
            raise DeviceError("board: no stream session is open (stream_open first)")
        if st["written"]:
            self.stream_wait(max(st["written"]), timeout_cycles=timeout_cycles)
        self.driver.check_write("RING_CTRL", 0)  # refused: the session stays open
        try:
            self.driver.ring_close(self._stream_limit(timeout_cycles))
        except CoreTimeout as t:
            raise ProgramError(f"board: {t}; reprogram the bitstream to reset it") from None
        finally:
            self._stream = None
            self.free(st["ring"])
        stats: dict[str, Any] = dict(self.driver.counters())
        stats["ring_idle"] = self.driver.read("RING_IDLE")
        stats["finish_count"] = self.driver.read("FINISH_COUNT")
        return RunResult(cycles=stats["cycles"], stats=stats)

    def close(self) -> None:
        """Free every buffer and close the register port."""
        self._bufs.clear()
        if self.pool is not None:
            self.pool.close()
        close = getattr(self.mmio, "close", None)
        if callable(close):
            close()


# ---------------------------------------------------------------------------- raw images
def _relocate(cfg: VTAConfig, prog: np.ndarray, phys: int) -> np.ndarray:
    """The program with every LOAD/STORE ``dram_base`` moved by ``phys`` bytes.

    Raises:
        ProgramError: a relocated field does not fit (names the instruction; its
            ``insn_index``).
    """
    cols = decode_program(cfg, prog)
    mem = (cols["opcode"] == Opcode.LOAD) | (cols["opcode"] == Opcode.STORE)
    sel = mem & (cols["x_size"] > 0)
    for i in np.nonzero(sel)[0]:
        mt = MemType.OUT if cols["opcode"][i] == Opcode.STORE else MemType(int(cols["memory_type"][i]))
        cols["dram_base"][i] += phys // cfg.elem_bytes(mt)
    try:
        return encode_program(cfg, cols).reshape(-1)
    except ISAError as e:
        # only dram_base moved: the encoder names the first LOAD/STORE whose relocated
        # dram_base does not fit its field
        wide = sel & (cols["dram_base"] > isa_layout(cfg).field("mem", "dram_base").mask)
        first = np.flatnonzero(wide)
        raise ProgramError(f"cannot relocate the program to 0x{phys:x}: {e}",
                           insn_index=int(first[0]) if first.size else None) from None


def run_raw(cfg: VTAConfig, dram: np.ndarray, insn_addr: int, insn_count: int, *,
            device: PynqDevice | None = None, max_steps: int | None = None,
            timeout_cycles: int | None = None, **kw: Any) -> RunResult:
    """Run a raw DRAM image on the board (``vtaforge exec --target pynq``).

    The image's byte addresses start at 0, a board's memory does not: the image is copied
    into one contiguous buffer at physical address ``P`` and every LOAD/STORE
    ``dram_base`` is moved by ``P`` (in its memory type's elements); instruction fetch
    starts at ``P + insn_addr``.  The program is first verified on the image as given
    (same messages as fsim).  Afterwards ``dram`` receives the buffer's contents, with the
    original instruction bytes put back where the relocated ones remain.

    Args:
        dram: 1-D C-contiguous writeable ``uint8`` image; updated in place on success.
        device: a :class:`PynqDevice` to use (default: a new one from ``kw``).
        max_steps / timeout_cycles: watchdog in core cycles (``vtaforge exec --max-steps``).

    Raises:
        ProgramError: the verifier rejects the program; the run times out.
        DeviceError: bad ``dram``; board access failures.
    """
    if not isinstance(dram, np.ndarray) or dram.dtype != np.uint8 or dram.ndim != 1:
        raise DeviceError("dram must be a 1-D numpy uint8 array")
    if not dram.flags.c_contiguous or not dram.flags.writeable:
        raise DeviceError("dram must be C-contiguous and writeable")
    if insn_count <= 0:
        raise ProgramError(f"insn_count must be positive, got {insn_count}")
    from .verify import verify_program  # noqa: PLC0415

    verify_program(cfg, dram, insn_addr, insn_count, None, max_steps=max_steps)
    own = device is None
    dev = device if device is not None else PynqDevice(cfg, **kw)
    try:
        buf = dev.alloc(dram.size)
        p = buf.addr
        image = dram.copy()
        orig = dram[insn_addr:insn_addr + 16 * insn_count].copy()
        moved = _relocate(cfg, orig, p)
        image[insn_addr:insn_addr + moved.size] = moved
        dev.write(buf, image)
        res = dev.run(p + insn_addr, insn_count, regions=[buf],
                      timeout_cycles=timeout_cycles or max_steps)
        out = dev.read(buf)
        seg = out[insn_addr:insn_addr + moved.size]
        seg[seg == moved] = orig[seg == moved]
        dram[:] = out
        dev.free(buf)
        return res
    finally:
        if own:
            dev.close()
