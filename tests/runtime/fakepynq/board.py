"""The simulated PYNQ board behind ``fakepynq``: the Verilated core on the PL, its DRAM,
a CMA allocator, the CPU's data cache, and the PL clocks.

- **DRAM**: the RTL harness's DRAM model placed at the top of a PYNQ-Z2's 512 MiB DDR
  (``[ddr_top - dram_bytes, ddr_top)``); the core's DMA reaches exactly that (any other
  address is a bus fault of the harness).  Fresh memory holds pseudo-random bytes, as
  DRAM left over from earlier users does, so a missing flush shows.
- **CMA allocator**: page-granular, first fit from the top of DDR down (buffers land near
  the top, as on a PYNQ image).  ``small_above_4g=N`` models PYNQ 3.1 with XRT 2.17 on a
  64-bit board: allocations of at most ``N`` bytes get physical addresses above 4 GiB
  (backed by host memory only: the core cannot reach them).
- **CPU cache** (cacheable buffers): per buffer, the CPU's view and DRAM are separate
  arrays, with 64-byte lines.  CPU stores change the CPU's view only; ``flush`` writes
  the lines that differ from their last synchronised contents back to DRAM (whole lines);
  ``invalidate`` reloads every line from DRAM, dropping dirty lines without writing them
  back (as the Zynq-7000's PL310 does); lines the core rewrites stay stale in the CPU's
  view until invalidated.  So unflushed CPU writes are invisible to the core and the
  core's results are invisible to the CPU until an invalidate.  Non-cacheable buffers
  are DRAM itself.
- **Time**: the PL runs only while the host touches the bus: before each register access
  the core is clocked ``access_ns`` of PL time (50 cycles at 100 MHz), then the AXI4-Lite
  transaction itself takes its few cycles.  A run therefore never completes inside the
  START write; the host sees ``STATUS`` busy and polls.
- **Overlay**: programming resets the core (DRAM is kept), maps each ``ip_dict`` entry of
  the vtaforge wrapper's module-reference type to the core's register window, and sets
  the PL clocks from the .hwh's divisors (PYNQ 3.x behaviour) over the IO PLL.
"""

from __future__ import annotations

import numpy as np

from vtaforge.hw import regs
from vtaforge.runtime.rtl.harness import Harness, HarnessError

DDR_TOP = 0x2000_0000  # PYNQ-Z2: 512 MiB of DDR from 0
HIGH_BASE = 0x1_0000_0000  # where the XRT quirk puts small buffers on 64-bit boards
IO_PLL_MHZ = 1000.0
PAGE = 4096
LINE = 64
CORE_TYPE = "xilinx.com:module_ref:vta_wrapper:"

_START = next(f for f in regs.reg("CTRL").fields if f.name == "START")
_DONE = next(f for f in regs.reg("STATUS").fields if f.name == "DONE")


class BusFault(RuntimeError):
    """An access the simulated board cannot complete (nothing mapped there, or the core's
    bus faulted)."""


class CacheLines:
    """One buffer's CPU view (``cpu``) and DRAM bytes (``dram``), line-granular sync."""

    def __init__(self, cpu: np.ndarray, dram: np.ndarray):
        self.cpu, self.dram = cpu, dram
        self.clean = cpu.copy()  # each line's contents when it was last in sync
        self.flushed_lines = 0

    def flush(self) -> None:
        lines = self.cpu.size // LINE
        c = self.cpu[:lines * LINE].reshape(lines, LINE)
        dirty = (c != self.clean[:lines * LINE].reshape(lines, LINE)).any(axis=1)
        self.dram[:lines * LINE].reshape(lines, LINE)[dirty] = c[dirty]
        self.flushed_lines += int(dirty.sum())
        self.clean[:] = self.cpu

    def invalidate(self) -> None:
        self.cpu[:] = self.dram
        self.clean[:] = self.dram


class SimBoard:
    """See the module docstring.

    Args:
        cfg: the config of the core on the PL (the model's).
        model: its built :class:`~vtaforge.runtime.rtl.RtlModel`.
        dram_bytes: DRAM the simulation holds (the top of DDR).
        ddr_top: one past the last DDR byte.
        access_ns: PL time that passes before each register access.
        small_above_4g: the XRT quirk's threshold in bytes (0: off).
        seed: seed of the leftover DRAM contents.
    """

    def __init__(self, cfg, model, *, dram_bytes: int = 16 << 20, ddr_top: int = DDR_TOP,
                 access_ns: float = 500.0, small_above_4g: int = 0, seed: int = 0):
        self.cfg = cfg
        self.base = ddr_top - dram_bytes
        self.harness = Harness(model, dram_bytes, mem_base=self.base)
        self.harness.reset()
        self.dram = self.harness.mem
        self.dram[:] = np.random.default_rng(seed).integers(0, 256, dram_bytes, dtype=np.uint8)
        self._free = [(self.base, ddr_top)]  # sorted free intervals
        self.live: dict[int, int] = {}
        self._high = HIGH_BASE
        self.small_above_4g = int(small_above_4g)
        self.access_ns = float(access_ns)
        self.fclk_mhz = [100.0, 100.0, 100.0, 100.0]  # what the image boots with
        self.windows: list[tuple[int, int]] = []  # (base, size) of the core's registers
        self.loaded = None
        # statistics
        self.allocations: list[tuple[int, int]] = []  # (nbytes asked, phys)
        self.accesses = 0
        self.starts = 0
        self.busy_polls: list[int] = []  # per run: STATUS reads that saw it not done
        self._running = False

    # ------------------------------------------------------------------ PL
    def program(self, handoff) -> None:
        """Load an overlay: reset the core, map its register windows, set the clocks."""
        self.harness.reset()
        self.windows = [(int(ip["phys_addr"]), int(ip["addr_range"]))
                        for ip in handoff.ip_dict.values()
                        if str(ip.get("type", "")).startswith(CORE_TYPE)]
        for i, c in handoff.clocks.items():
            if c["enable"]:
                self.fclk_mhz[i] = IO_PLL_MHZ / (c["divisor0"] * c["divisor1"])
        self._running = False
        self.loaded = handoff

    def set_fclk(self, i: int, mhz: float) -> None:
        """Set PL clock ``i`` to the nearest frequency the IO PLL's two 6-bit dividers
        make."""
        best = min(((d0, d1) for d0 in range(1, 64) for d1 in range(1, 64)),
                   key=lambda d: abs(IO_PLL_MHZ / (d[0] * d[1]) - mhz))
        self.fclk_mhz[i] = IO_PLL_MHZ / (best[0] * best[1])

    def _core_offset(self, addr: int) -> int:
        for base, size in self.windows:
            if base <= addr < base + size:
                return (addr - base) % regs.REGMAP_SIZE  # the core decodes 8 address bits
        raise BusFault(f"bus access at 0x{addr:08x}: nothing is mapped there "
                       f"(windows {[hex(b) for b, _ in self.windows]})")

    def _advance(self) -> None:
        cycles = max(1, int(self.access_ns * self.fclk_mhz[0] / 1000.0))
        try:
            self.harness.step(cycles)
        except HarnessError as e:
            raise BusFault(f"the core's AXI master faulted: {e}") from None

    def bus_read(self, addr: int) -> int:
        off = self._core_offset(addr)
        self._advance()
        self.accesses += 1
        try:
            v = self.harness.read(off)
        except HarnessError as e:
            raise BusFault(str(e)) from None
        if off == regs.offset("STATUS") and self._running:
            if (v >> _DONE.lsb) & 1:
                self._running = False
            else:
                self.busy_polls[-1] += 1
        return v

    def bus_write(self, addr: int, value: int) -> None:
        off = self._core_offset(addr)
        self._advance()
        self.accesses += 1
        try:
            self.harness.write(off, int(value) & 0xFFFFFFFF)
        except HarnessError as e:
            raise BusFault(str(e)) from None
        if off == regs.offset("CTRL") and (value >> _START.lsb) & 1:
            self.starts += 1
            self.busy_polls.append(0)
            self._running = True

    # ------------------------------------------------------------------ memory
    def cma_alloc(self, nbytes: int) -> tuple[int, np.ndarray]:
        """Physical address and DRAM bytes of a new page-rounded buffer."""
        n = -(-max(int(nbytes), 1) // PAGE) * PAGE
        if self.small_above_4g and nbytes <= self.small_above_4g:
            phys = self._high
            self._high += n
            dram = np.random.default_rng(phys).integers(0, 256, n, dtype=np.uint8)
        else:
            for i in range(len(self._free) - 1, -1, -1):
                s, e = self._free[i]
                if e - s >= n:
                    phys = e - n
                    self._free[i] = (s, phys)
                    if s == phys:
                        del self._free[i]
                    break
            else:
                raise MemoryError(f"simulated CMA exhausted: {nbytes} bytes asked")
            dram = self.dram[phys - self.base:phys - self.base + n]
        self.live[phys] = n
        self.allocations.append((int(nbytes), phys))
        return phys, dram

    def cma_free(self, phys: int) -> None:
        n = self.live.pop(phys)
        if phys >= HIGH_BASE:
            return
        self._free.append((phys, phys + n))
        self._free.sort()
        merged: list[tuple[int, int]] = []
        for s, e in self._free:
            if merged and merged[-1][1] == s:
                merged[-1] = (merged[-1][0], e)
            else:
                merged.append((s, e))
        self._free = merged

    def close(self) -> None:
        self.harness.close()
