"""A PYNQ-compatible stand-in over the Verilated core: ``import pynq`` for tests.

The parts of the ``pynq`` package (3.x API) a driver of a memory-mapped accelerator
uses, with the same names and signatures, backed by a :class:`~.board.SimBoard` (the
Verilated core, its DRAM at the top of a PYNQ-Z2's DDR, a cache model, the PL clocks):

- ``allocate(shape, dtype="u4", target=None, **kwargs)`` → :class:`PynqBuffer`, a numpy
  array with ``physical_address`` (alias ``device_address``), ``flush()`` /
  ``invalidate()`` (aliases ``sync_to_device`` / ``sync_from_device``), ``freebuffer()``
  / ``close()``, ``cacheable``, ``coherent`` (always False, as XRT buffers);
- ``MMIO(base_addr, length=4, device=None)`` with ``read(offset=0, length=4)`` and
  ``write(offset, data)``, forwarded to the core's AXI4-Lite registers;
- ``Overlay(bitfile_name, dtbo=None, download=True, ignore_version=False, device=None,
  gen_cache=False)``: the ``.hwh`` beside the ``.bit`` gives ``ip_dict``; ``download()``
  programs the board; names registered with :func:`install_overlay` resolve like
  installed overlays;
- ``Clocks.fclk0_mhz`` … ``fclk3_mhz`` (read and set), also as ``ps.Clocks``;
  ``ps.ON_TARGET``.

Use :func:`use` (or ``attach`` + ``monkeypatch.setitem(sys.modules, "pynq", fakepynq)``)
so that the code under test finds it as ``pynq``; nothing is installed at import.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import numpy as np

from . import hwh as _hwh
from . import ps
from .board import BusFault, CacheLines, SimBoard
from .ps import Clocks

__all__ = ["allocate", "MMIO", "Overlay", "Clocks", "ps", "PynqBuffer", "SimBoard",
           "BusFault", "attach", "detach", "use", "install_overlay", "SAMPLE_HWH"]

#: The sample handoff of the vtaforge block design on a PYNQ-Z2 (tests/…/data).
SAMPLE_HWH = Path(__file__).parent / "data" / "vta_pynq_z2.hwh"

_BOARD: SimBoard | None = None
_OVERLAYS: dict[str, str] = {}


def _board() -> SimBoard:
    if _BOARD is None:
        raise RuntimeError("No Devices Found")  # what pynq says off a board
    return _BOARD


def attach(board: SimBoard) -> None:
    """Make ``board`` the board this module drives."""
    global _BOARD
    _BOARD = board
    ps._board = board


def detach() -> None:
    """Forget the board (and the registered overlays)."""
    global _BOARD
    _BOARD = None
    ps._board = None
    _OVERLAYS.clear()


def use(monkeypatch, board: SimBoard):
    """Attach ``board`` and make ``import pynq`` / ``import pynq.ps`` find this module for
    the rest of the test (``monkeypatch`` undoes it); returns the module."""
    attach(board)
    me = sys.modules[__name__]
    monkeypatch.setitem(sys.modules, "pynq", me)
    monkeypatch.setitem(sys.modules, "pynq.ps", ps)
    return me


def install_overlay(name: str, bitfile: str | os.PathLike) -> None:
    """Register ``name`` as an installed overlay (what pynq's ``pynq.overlays`` entry
    points provide), so that ``Overlay(name)`` finds ``bitfile``."""
    _OVERLAYS[name] = str(bitfile)


# ---------------------------------------------------------------------------- buffers
class PynqBuffer(np.ndarray):
    """A contiguous buffer of the simulated CMA (see :func:`allocate`)."""

    def __array_finalize__(self, obj):
        for k in ("_lines", "_phys", "_board", "cacheable", "_freed"):
            if not hasattr(self, k):
                setattr(self, k, getattr(obj, k, None))

    @property
    def physical_address(self) -> int:
        return self._phys

    @property
    def device_address(self) -> int:
        return self._phys

    @property
    def coherent(self) -> bool:
        return False

    def _live(self):
        if self._freed is None or self._freed[0]:
            raise RuntimeError(f"buffer at 0x{self._phys:x} was freed")

    def flush(self) -> None:
        """Write the CPU's dirty lines of the whole buffer back to DRAM."""
        self._live()
        if self._lines is not None:
            self._lines.flush()

    def invalidate(self) -> None:
        """Drop the CPU's lines of the whole buffer (dirty ones too)."""
        self._live()
        if self._lines is not None:
            self._lines.invalidate()

    sync_to_device = flush
    sync_from_device = invalidate

    def freebuffer(self) -> None:
        if self._freed is not None and not self._freed[0]:
            self._freed[0] = True
            self._board.cma_free(self._phys)

    close = freebuffer


def allocate(shape, dtype="u4", target=None, **kwargs) -> PynqBuffer:
    """A physically contiguous buffer of ``shape`` and ``dtype`` in the simulated CMA.

    ``cacheable`` (default False, as in pynq) selects the cache model; a non-cacheable
    buffer is the DRAM itself.
    """
    board = _board()
    dt = np.dtype(dtype)
    shape = (shape,) if np.isscalar(shape) else tuple(shape)
    nbytes = int(np.prod(shape, dtype=np.int64)) * dt.itemsize
    phys, dram = board.cma_alloc(nbytes)
    cacheable = bool(kwargs.get("cacheable", False))
    if cacheable:
        cpu = dram.copy()  # nothing cached yet: the CPU reads what DRAM holds
        lines = CacheLines(cpu, dram)
        backing = cpu
    else:
        lines, backing = None, dram
    buf = np.ndarray.__new__(PynqBuffer, shape, dtype=dt, buffer=backing[:nbytes])
    buf._lines, buf._phys, buf._board = lines, phys, board
    buf.cacheable, buf._freed = cacheable, [False]
    return buf


# ---------------------------------------------------------------------------- registers
class MMIO:
    """Register access at ``base_addr`` (``length`` bytes), forwarded to the board's bus."""

    def __init__(self, base_addr: int, length: int = 4, device=None, **kwargs):
        if base_addr < 0 or length < 0:
            raise ValueError("Base address or length cannot be negative.")
        self.base_addr, self.length = int(base_addr), int(length)
        self._board = _board()

    def _check(self, offset: int, length: int) -> None:
        if length != 4:
            raise ValueError("the simulated bus carries 32-bit accesses only")
        if offset < 0 or offset + length > self.length:
            raise ValueError(f"offset 0x{offset:x} is outside the 0x{self.length:x}-byte "
                             f"MMIO window")
        if offset % 4:
            raise MemoryError("Unaligned read: offset must be multiple of 4.")

    def read(self, offset: int = 0, length: int = 4, word_order: str = "little") -> int:
        self._check(int(offset), int(length))
        return self._board.bus_read(self.base_addr + int(offset))

    def write(self, offset: int, data) -> None:
        if isinstance(data, (bytes, bytearray)):
            if len(data) != 4:
                raise ValueError("the simulated bus carries 32-bit accesses only")
            data = int.from_bytes(data, "little")
        self._check(int(offset), 4)
        self._board.bus_write(self.base_addr + int(offset), int(data))


# ---------------------------------------------------------------------------- overlays
class Overlay:
    """An overlay: ``bitfile_name`` (a ``.bit`` path or an installed overlay's name) with
    the ``.hwh`` of the same stem beside it."""

    def __init__(self, bitfile_name, dtbo=None, download=True, ignore_version=False,
                 device=None, gen_cache=False):
        name = str(bitfile_name)
        path = name if os.path.isfile(name) else _OVERLAYS.get(name)
        if path is None or not os.path.isfile(path):
            raise OSError(f"Bitstream file {name} does not exist.")
        self.bitfile_name = os.path.abspath(path)
        hwh = os.path.splitext(self.bitfile_name)[0] + ".hwh"
        if not os.path.isfile(hwh):
            raise ValueError(f"Cannot find HWH file for {self.bitfile_name}.")
        self._handoff = _hwh.parse(hwh)
        self.ip_dict = self._handoff.ip_dict
        self.clock_dict = self._handoff.clocks
        self.device = _board()
        if download:
            self.download()

    def download(self, dtbo=None) -> None:
        """Program the PL (resets the core; sets the PL clocks from the .hwh)."""
        self.device.program(self._handoff)

    def is_loaded(self) -> bool:
        return self.device.loaded is self._handoff
