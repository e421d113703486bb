"""``PynqDevice``: the ``pynq`` target, a generated core on a Zynq board (PYNQ image).

Hardware access goes through two small interfaces, so the whole driver runs in tests with
fakes (``tests/runtime/test_pynq_fake.py``) and on a board with the real thing:

- an **MMIO** object: ``read(offset) -> int`` and ``write(offset, value)`` of 32-bit
  registers at byte offsets from the core's register base.  On a board:
  :class:`DevMemMMIO`, which maps the 4 KiB page(s) holding the window through
  ``/dev/mem`` and adds the base's in-page offset to every access (field-faults BR-23: a
  window at 0x41200080, offset 0x10, must hit 0x41200090);
- a **memory allocator**: ``allocate(nbytes) -> HostBuffer`` with ``phys_addr``,
  ``array`` (the CPU's ``uint8`` view, cacheable), ``flush()`` (write CPU cache lines back
  to DRAM), ``invalidate()`` (drop them so the next read comes from DRAM) and ``free()``.
  On a board: :class:`PynqAllocator` over ``pynq.allocate(..., cacheable=True)``.

Cache discipline (field-faults BR-22): every device buffer has a state,

- ``CLEAN``: the CPU's view and DRAM agree;
- ``HOST_DIRTY``: the host wrote it (inputs, instructions, micro-ops, a zero-filled
  output) and the lines may sit in the CPU cache;
- ``DEVICE_WRITTEN``: a run may have stored into it; the CPU's view may be stale.

Before a launch, every ``HOST_DIRTY`` buffer is flushed (``auto_cache=True``, the default)
and the launch is refused if a buffer the program may touch is still host-dirty (with
``auto_cache=False`` the caller flushes with :meth:`PynqDevice.flush`).  After a run, every
buffer the program's STOREs reach is invalidated (``auto_cache``) or marked
``DEVICE_WRITTEN``, in which state host reads are refused (manual mode) and host writes
invalidate first, so a partial write never merges stale lines that a later flush would
write back over the device's results.

Before the first run the core's ``FINGERPRINT`` register is compared with the config's
(field-faults BR-24; refusal names both); the static verifier
(:func:`vtaforge.runtime.verify.verify_program`) runs before every launch; the launch
follows :mod:`vtaforge.hw.regs`; ``STATUS.DONE`` is polled with a wall-clock timeout
(→ :class:`ProgramError`); statistics come from the counter registers, as for ``rtl``.
"""

from __future__ import annotations

import enum
import mmap
import os
import time
from dataclasses import dataclass
from typing import Any, Callable, Protocol, Sequence

import numpy as np

from ..hw import regs
from ..hw.config import MemType, VTAConfig
from ..hw.isa import ISAError, Opcode, decode_program, encode_program
from .device import Buffer, Device, DeviceError, ProgramError, RunResult

__all__ = ["PynqDevice", "DevMemMMIO", "PynqAllocator", "HostBuffer", "MMIO", "Allocator",
           "CacheState", "run_raw", "STAT_REGISTERS", "DEFAULT_TIMEOUT_S", "PAGE_BYTES"]

#: MMIO page size (bytes): what ``/dev/mem`` maps.
PAGE_BYTES = 4096
#: Default wall-clock timeout of one run, seconds.
DEFAULT_TIMEOUT_S = 10.0
#: Seconds between two polls of STATUS.DONE.
DEFAULT_POLL_S = 20e-6

#: RunResult.stats key -> register name (the same keys as the rtl backend and fsim).
STAT_REGISTERS = {
    "fetch_busy": "FETCH_BUSY", "load_busy": "LOAD_BUSY", "compute_busy": "COMPUTE_BUSY",
    "store_busy": "STORE_BUSY", "load_stall": "LOAD_STALL", "compute_stall": "COMPUTE_STALL",
    "store_stall": "STORE_STALL", "gemm_counter": "GEMM_COUNT", "alu_counter": "ALU_COUNT",
    "dram_read_nbytes": "DMA_RD_BYTES", "dram_write_nbytes": "DMA_WR_BYTES",
}

_DONE = 1 << 1   # STATUS.DONE
_BUSY = 1 << 0   # STATUS.BUSY
_START = 1 << 0  # CTRL.START


class MMIO(Protocol):
    """32-bit register access at byte offsets from the core's register base."""

    def read(self, offset: int) -> int: ...

    def write(self, offset: int, value: int) -> None: ...


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


# ---------------------------------------------------------------------------- board backends
class DevMemMMIO:
    """Registers through an ``mmap`` of ``/dev/mem`` (or any file standing in for it).

    The mapping starts at ``base`` rounded down to :data:`PAGE_BYTES`; every access adds
    ``base``'s in-page offset (BR-23).  Accesses are 32-bit and must be 4-byte aligned and
    inside ``[0, length)``.

    Raises:
        DeviceError: ``base`` not 4-byte aligned, bad ``length``, the file cannot be opened
            or mapped (``/dev/mem`` needs root), an access out of range or misaligned.
    """

    def __init__(self, base: int, length: int = PAGE_BYTES, path: str = "/dev/mem"):
        if base < 0 or base % 4:
            raise DeviceError(f"MMIO base 0x{base:x} must be a non-negative multiple of 4")
        if length <= 0 or length % 4:
            raise DeviceError(f"MMIO length {length} must be a positive multiple of 4")
        self.base, self.length, self.path = int(base), int(length), path
        self.page_base = self.base & ~(PAGE_BYTES - 1)
        self.page_offset = self.base - self.page_base
        map_len = -(-(self.page_offset + self.length) // PAGE_BYTES) * PAGE_BYTES
        try:
            fd = os.open(path, os.O_RDWR | getattr(os, "O_SYNC", 0))
        except OSError as e:
            raise DeviceError(f"cannot open {path} for the registers at 0x{base:x}: "
                              f"{e.strerror or e} (board access needs root)") from None
        try:
            self._mm = mmap.mmap(fd, map_len, mmap.MAP_SHARED,
                                 mmap.PROT_READ | mmap.PROT_WRITE, offset=self.page_base)
        except (OSError, ValueError) as e:
            raise DeviceError(f"cannot map {map_len} bytes of {path} at 0x{self.page_base:x}: "
                              f"{e}") from None
        finally:
            os.close(fd)
        self._words = np.frombuffer(self._mm, dtype=np.uint32)

    def _index(self, offset: int) -> int:
        if offset < 0 or offset + 4 > self.length or offset % 4:
            raise DeviceError(f"register offset 0x{offset:x} is outside the 0x{self.length:x}-"
                              f"byte window or not 4-byte aligned")
        return (self.page_offset + offset) >> 2

    def read(self, offset: int) -> int:
        """The 32-bit register at byte ``offset`` from the base."""
        return int(self._words[self._index(offset)])

    def write(self, offset: int, value: int) -> None:
        """Write the 32-bit register at byte ``offset`` from the base."""
        self._words[self._index(offset)] = int(value) & 0xFFFFFFFF

    def close(self) -> None:
        """Unmap."""
        if getattr(self, "_mm", None) is not None:
            self._words = None
            self._mm.close()
            self._mm = None


class PynqAllocator:
    """Cacheable contiguous buffers from ``pynq.allocate`` (CMA on the PYNQ image).

    Raises:
        DeviceError: the ``pynq`` package is missing or the allocation fails.
    """

    def __init__(self):
        try:
            import pynq  # noqa: PLC0415 - only on a board
        except ImportError as e:
            raise DeviceError(f"target 'pynq' needs the pynq package (run on a board with "
                              f"the PYNQ image, or pip install pynq): {e}") from None
        self._pynq = pynq

    def allocate(self, nbytes: int) -> HostBuffer:
        try:
            b = self._pynq.allocate(shape=(int(nbytes),), dtype=np.uint8, cacheable=True)
        except Exception as e:  # noqa: BLE001 - pynq raises several kinds
            raise DeviceError(f"pynq.allocate of {nbytes} bytes failed: {e}") from None
        return HostBuffer(phys_addr=int(b.physical_address), array=b, flush=b.flush,
                          invalidate=b.invalidate, free=b.freebuffer)


def _find_reg_base(ip_dict: dict) -> int | None:
    """The ``phys_addr`` of the VTA core in an Overlay's ``ip_dict`` (None if absent)."""
    for name, ip in ip_dict.items():
        if "vta" in name.lower() and "phys_addr" in ip:
            return int(ip["phys_addr"])
    return None


# ---------------------------------------------------------------------------- the device
@dataclass
class _Entry:
    host: HostBuffer
    nbytes: int
    state: CacheState = CacheState.CLEAN


class PynqDevice(Device):
    """A VTA core on a Zynq board as a :class:`Device` (target ``"pynq"``).

    Args:
        config: the core's configuration; the bitstream's FINGERPRINT must equal
            ``config.fingerprint``.
        bitstream: path of the ``.bit`` (its ``.hwh`` beside it) to program with
            ``pynq.Overlay``; ``None``: the environment variable ``VTAFORGE_BITSTREAM``
            if set (how ``vtaforge run/exec --target pynq`` pick it up), else the PL is
            taken as already programmed.
        mmio: an :class:`MMIO` (default: :class:`DevMemMMIO` at ``reg_base``).
        allocator: an :class:`Allocator` (default: :class:`PynqAllocator`).
        reg_base: physical address of the register window (default: the overlay's IP
            address, else the board family's: 0x43C00000 Zynq-7000, 0xA0000000 ZynqMP).
        timeout_s: wall-clock watchdog per run, seconds.
        poll_s: seconds between polls of STATUS.DONE.
        auto_cache: flush host-dirty buffers before a launch and invalidate device-written
            ones after it (default).  ``False``: the caller calls :meth:`flush` /
            :meth:`invalidate`; launches over host-dirty buffers and reads of
            device-written ones are refused.
        verify: run the static verifier before every launch (default True).
        sleep, clock: injectable ``time.sleep`` / ``time.monotonic`` (tests).

    Raises:
        DeviceError: no ``pynq`` package and no fakes given; the register window does not
            hold a vtaforge core, or its fingerprint or register-map version differs from
            the config's (the message names both fingerprints).
    """

    target = "pynq"

    def __init__(self, config: VTAConfig, *, bitstream: str | None = None,
                 mmio: MMIO | None = None, allocator: Allocator | None = None,
                 reg_base: int | None = None, timeout_s: float = DEFAULT_TIMEOUT_S,
                 poll_s: float = DEFAULT_POLL_S, auto_cache: bool = True, verify: bool = True,
                 sleep: Callable[[float], None] = time.sleep,
                 clock: Callable[[], float] = time.monotonic):
        super().__init__(config, mem_bytes=1 << 32)
        self._bufs: dict[int, _Entry] = {}
        self.timeout_s = float(timeout_s)
        self.poll_s = float(poll_s)
        self.auto_cache = bool(auto_cache)
        self.verify = bool(verify)
        self._sleep, self._clock = sleep, clock
        self.overlay = None
        if bitstream is None and mmio is None:
            bitstream = os.environ.get("VTAFORGE_BITSTREAM") or None
        if bitstream is not None:
            try:
                import pynq  # noqa: PLC0415
            except ImportError as e:
                raise DeviceError(f"programming {bitstream!r} needs the pynq package "
                                  f"(run on a board with the PYNQ image): {e}") from None
            if not os.path.isfile(bitstream):
                raise DeviceError(f"bitstream {bitstream!r} does not exist")
            self.overlay = pynq.Overlay(bitstream)
            if reg_base is None:
                reg_base = _find_reg_base(getattr(self.overlay, "ip_dict", {}) or {})
        if reg_base is None:
            from ..hw.flow import FlowError, board_spec  # noqa: PLC0415

            try:
                reg_base = board_spec(config).reg_base
            except FlowError as e:
                raise DeviceError(str(e)) from None
        self.reg_base = int(reg_base)
        # the allocator first: without the pynq package nothing touches /dev/mem
        self.host_allocator = allocator if allocator is not None else PynqAllocator()
        self.mmio = mmio if mmio is not None else DevMemMMIO(self.reg_base, regs.REGMAP_SIZE)
        self._check_core()

    # ------------------------------------------------------------------ registers
    def reg_read(self, name_or_offset: str | int) -> int:
        """A control register (name from ``hw/regs.py`` or byte offset)."""
        off = regs.offset(name_or_offset) if isinstance(name_or_offset, str) else name_or_offset
        return int(self.mmio.read(off)) & 0xFFFFFFFF

    def reg_write(self, name_or_offset: str | int, value: int) -> None:
        """Write a control register."""
        off = regs.offset(name_or_offset) if isinstance(name_or_offset, str) else name_or_offset
        self.mmio.write(off, int(value) & 0xFFFFFFFF)

    def _check_core(self) -> None:
        fp = self.reg_read("FINGERPRINT")
        want = self.config.fingerprint
        where = f"register window 0x{self.reg_base:08x}"
        if fp != want:
            hint = (" (reads as 0/all-ones: is the bitstream loaded and the base right?)"
                    if fp in (0, 0xFFFFFFFF) else
                    ": the bitstream was built for another configuration")
            raise DeviceError(f"bitstream fingerprint 0x{fp:08x} at {where} differs from the "
                              f"config's fingerprint 0x{want:08x}{hint}; refusing to run "
                              f"(build the bitstream for this config, or pass its config)")
        ver = self.reg_read("VERSION")
        if ver >> 16 != regs.REGMAP_VERSION >> 16:
            raise DeviceError(f"core register-map version 0x{ver:08x} at {where} is "
                              f"incompatible with this runtime's 0x{regs.REGMAP_VERSION:08x}")

    # ------------------------------------------------------------------ memory
    def alloc(self, nbytes: int) -> Buffer:
        """Allocate ``nbytes`` of contiguous device memory (cacheable on the CPU side).

        Raises:
            DeviceError: non-positive size; the allocator fails; the physical address is 0,
                not aligned to ``config.dram_alignment`` or above the core's 32-bit reach.
        """
        if nbytes <= 0:
            raise DeviceError(f"allocation size must be positive, got {nbytes}")
        align = self.config.dram_alignment
        n = -(-int(nbytes) // align) * align
        hb = self.host_allocator.allocate(n)
        a = int(hb.phys_addr)
        bad = None
        if a == 0:
            bad = "is the null address"
        elif a % align:
            bad = f"is not aligned to {align} bytes (config.dram_alignment)"
        elif a + n > 1 << 32:
            bad = "lies above 4 GiB, beyond the core's 32-bit AXI address"
        elif hb.array.size < n:
            bad = f"has a {hb.array.size}-byte view, fewer than {n}"
        if bad:
            hb.free()
            raise DeviceError(f"allocator returned buffer at 0x{a:x} that {bad}")
        arr = hb.array if hb.array.dtype == np.uint8 else hb.array.view(np.uint8)
        hb = HostBuffer(a, arr.reshape(-1), hb.flush, hb.invalidate, hb.free)
        self._bufs[a] = _Entry(hb, int(nbytes))
        return Buffer(a, int(nbytes))

    def free(self, buf: Buffer) -> None:
        """Release a buffer."""
        e = self._bufs.pop(buf.addr, None)
        if e is None:
            raise DeviceError(f"free of address 0x{buf.addr:x} that is not allocated")
        e.host.free()

    def buffers(self) -> list[Buffer]:
        """All live buffers."""
        return [Buffer(a, e.nbytes) for a, e in sorted(self._bufs.items())]

    def _entry(self, buf: Buffer) -> _Entry:
        e = self._bufs.get(buf.addr)
        if e is None or buf.nbytes > e.nbytes:
            raise DeviceError(f"buffer at 0x{buf.addr:x} ({buf.nbytes} bytes) was not "
                              f"allocated on this device")
        return e

    def state(self, buf: Buffer) -> CacheState:
        """The cache state of ``buf``."""
        return self._entry(buf).state

    def flush(self, buf: Buffer) -> None:
        """Write the CPU's cached bytes of ``buf`` to DRAM (host-dirty → clean)."""
        e = self._entry(buf)
        if e.state is CacheState.HOST_DIRTY:
            e.host.flush()
            e.state = CacheState.CLEAN

    def invalidate(self, buf: Buffer) -> None:
        """Drop the CPU's cached lines of ``buf`` so reads see what the device wrote
        (device-written → clean).

        Raises:
            DeviceError: ``buf`` holds unflushed host writes (they would be lost).
        """
        e = self._entry(buf)
        if e.state is CacheState.HOST_DIRTY:
            raise DeviceError(f"invalidating buffer at 0x{buf.addr:x} would discard host "
                              f"writes that were never flushed")
        e.host.invalidate()
        e.state = CacheState.CLEAN

    def host_view(self, buf: Buffer) -> np.ndarray:
        """The CPU's ``uint8`` view of ``buf`` for zero-copy writes; marks it host-dirty
        (so it is flushed before the next launch)."""
        e = self._entry(buf)
        self._before_host_write(buf, e)
        e.state = CacheState.HOST_DIRTY
        return e.host.array[:buf.nbytes]

    def _before_host_write(self, buf: Buffer, e: _Entry) -> None:
        if e.state is CacheState.DEVICE_WRITTEN:
            # stale lines merged with new bytes would be written back over the device's data
            if not self.auto_cache:
                raise DeviceError(f"buffer at 0x{buf.addr:x} was written by the device and "
                                  f"not invalidated; invalidate it before writing")
            e.host.invalidate()
            e.state = CacheState.CLEAN

    def write(self, buf: Buffer, data: bytes | np.ndarray, offset: int = 0) -> None:
        """Copy host ``data`` (raw bytes of any dtype) into ``buf`` at byte ``offset``;
        the buffer becomes host-dirty."""
        raw = np.ascontiguousarray(data).reshape(-1).view(np.uint8)
        self._check_host_access(buf, offset, raw.size)
        e = self._entry(buf)
        self._before_host_write(buf, e)
        e.host.array[offset:offset + raw.size] = raw
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
        return np.array(e.host.array[offset:offset + n], dtype=np.uint8, copy=True)

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

    def _overlapping(self, start: int, end: int) -> list[tuple[int, _Entry]]:
        return [(a, e) for a, e in self._bufs.items() if a < end and start < a + e.nbytes]

    # ------------------------------------------------------------------ runs
    def _program_bytes(self, insn_addr: int, insn_count: int) -> np.ndarray:
        end = insn_addr + 16 * insn_count
        e = self._owner(insn_addr, end)
        if e is None:
            raise ProgramError(f"instruction fetch [0x{insn_addr:x}, 0x{end:x}) is outside "
                               f"every allocated buffer")
        a = e.host.phys_addr
        return e.host.array[insn_addr - a:end - a]

    def _verify(self, insn_addr: int, insn_count: int, regions: list[Buffer],
                prog_bytes: np.ndarray, cols: dict) -> dict[str, Any]:
        """Static verifier on a sparse image with the instructions and the buffers the
        program's micro-op loads read (all it reads)."""
        from .verify import verify_program  # noqa: PLC0415

        top = max(r.end for r in regions)
        image = np.zeros(top, dtype=np.uint8)  # calloc: untouched pages cost nothing
        image[insn_addr:insn_addr + prog_bytes.size] = prog_bytes
        ue = self.config.elem_bytes(MemType.UOP)
        sel = ((cols["opcode"] == Opcode.LOAD) & (cols["memory_type"] == MemType.UOP)
               & (cols["x_size"] > 0))
        for base, xs in zip(cols["dram_base"][sel], cols["x_size"][sel]):
            s, t = int(base) * ue, (int(base) + int(xs)) * ue
            for a, e in self._overlapping(s, t):
                if a + e.nbytes <= top:
                    image[a:a + e.nbytes] = e.host.array[:e.nbytes]
        report = verify_program(self.config, image, insn_addr, insn_count, regions)
        return dict(getattr(report, "stats", {}) or {})

    def _store_targets(self, cols: dict) -> list[tuple[int, _Entry]]:
        """Buffers the program's STOREs may write."""
        oe = self.config.elem_bytes(MemType.OUT)
        sel = (cols["opcode"] == Opcode.STORE) & (cols["x_size"] > 0)
        hit: dict[int, _Entry] = {}
        for base, ys, xs, st in zip(cols["dram_base"][sel], cols["y_size"][sel],
                                    cols["x_size"][sel], cols["x_stride"][sel]):
            s = int(base) * oe
            t = s + ((max(int(ys), 1) - 1) * int(st) + int(xs)) * oe
            for a, e in self._overlapping(s, t):
                hit[a] = e
        return list(hit.items())

    def run(self, insn_addr: int, insn_count: int, *,
            regions: Sequence[Buffer] | None = None, timeout_cycles: int | None = None
            ) -> RunResult:
        """Flush, verify, launch, wait, invalidate (see :meth:`Device.run`).

        ``timeout_cycles`` (if given) becomes a wall-clock limit of
        ``timeout_cycles / CLOCK_MHZ`` µs (at least 10 ms), else :attr:`timeout_s`.
        ``stats``: the verifier's data-independent counters, overridden by the counter
        registers (``cycles``, ``fetch_busy`` ... ``dram_write_nbytes``), plus
        ``board_seconds`` (wall time from START to DONE).

        Raises:
            ProgramError: rejected by the verifier, or the run did not finish in time.
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
            for a, e in self._bufs.items():
                if e.state is CacheState.HOST_DIRTY:
                    e.host.flush()
                    e.state = CacheState.CLEAN
        for r in regions:
            for a, e in self._overlapping(r.addr, r.end):
                if e.state is CacheState.HOST_DIRTY:
                    raise DeviceError(f"refusing to launch: buffer at 0x{a:x} ({e.nbytes} "
                                      f"bytes) holds host writes not flushed to DRAM; call "
                                      f"flush() on it first")
        # 2. static verifier
        static: dict[str, Any] = {}
        if self.verify:
            static = self._verify(insn_addr, insn_count, regions, prog_bytes, cols)
        # 3. launch
        status = self.reg_read("STATUS")
        if status & _BUSY:
            raise DeviceError(f"the core is still busy (STATUS=0x{status:x}) from an earlier "
                              f"run; reprogram the bitstream to reset it")
        written = self._store_targets(cols)
        region_bufs = {a: e for r in regions for a, e in self._overlapping(r.addr, r.end)}
        limit = self.timeout_s
        if timeout_cycles:
            limit = max(0.01, float(timeout_cycles) / (float(self.config.CLOCK_MHZ) * 1e6))
        self.reg_write("INSN_ADDR_LO", insn_addr & 0xFFFFFFFF)
        self.reg_write("INSN_ADDR_HI", insn_addr >> 32)
        self.reg_write("INSN_COUNT", insn_count)
        t0 = self._clock()
        self.reg_write("CTRL", _START)  # IRQ_EN stays 0: this driver polls
        # 4. wait for DONE
        while True:
            status = self.reg_read("STATUS")
            if status & _DONE:
                break
            if self._clock() - t0 > limit:
                for e in region_bufs.values():  # the core may still be writing anything
                    if e.state is CacheState.CLEAN:
                        e.state = CacheState.DEVICE_WRITTEN
                cyc = self.reg_read("CYCLES_LO")
                raise ProgramError(f"board run not done after {limit:g} s "
                                   f"(STATUS=0x{status:x}, cycle counter {cyc}); the core is "
                                   f"stalled or its DMA is blocked: reprogram the bitstream "
                                   f"to reset it")
            self._sleep(self.poll_s)
        wall = self._clock() - t0
        # 5. the device's stores become visible to the CPU (BR-22)
        for a, e in written:
            e.state = CacheState.DEVICE_WRITTEN
            if self.auto_cache:
                e.host.invalidate()
                e.state = CacheState.CLEAN
        cycles = self.reg_read("CYCLES_LO") | (self.reg_read("CYCLES_HI") << 32)
        stats: dict[str, Any] = {"cycles": cycles}
        for key, name in STAT_REGISTERS.items():
            stats[key] = self.reg_read(name)
        stats["board_seconds"] = wall
        return RunResult(cycles=cycles, stats={**static, **stats})

    def close(self) -> None:
        """Free every buffer and unmap the registers."""
        for a in list(self._bufs):
            self._bufs.pop(a).host.free()
        close = getattr(self.mmio, "close", None)
        if callable(close):
            close()


# ---------------------------------------------------------------------------- raw images
def _relocate(cfg: VTAConfig, prog: np.ndarray, phys: int) -> np.ndarray:
    """The program with every LOAD/STORE ``dram_base`` moved by ``phys`` bytes.

    Raises:
        ProgramError: a relocated field does not fit (names the instruction).
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
        raise ProgramError(f"cannot relocate the program to 0x{phys:x}: {e}") from None


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
