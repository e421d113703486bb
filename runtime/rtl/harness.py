"""``Harness``: one Verilated core with its DRAM model, as a register port with a clock
(the C++ side is ``harness.cpp``).  :class:`~vtaforge.runtime.rtl.device.RtlDevice` drives
runs through it, and ``tests/runtime/fakepynq`` builds its simulated PYNQ board on it."""

from __future__ import annotations

import threading

import ctypes
import numpy as np

from ...hw import regs
from ..device import DeviceError
from .build import RtlModel

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
