"""Streamed execution on the ``rtl`` target (a core built with ``INSN_RING > 0``): the
methods :class:`~vtaforge.runtime.rtl.device.RtlDevice` takes from :class:`RtlStreamMixin`.

The ring protocol is :class:`~vtaforge.runtime.mmio.CoreDriver`'s.  By default a clock
thread runs the simulation freely while the session is open, as a board's clock runs: the
host appends segments and does its own work while the core executes them (each
``vh_step`` call releases the GIL).  One lock serialises the harness between the thread and
the host's register and memory accesses.
"""

from __future__ import annotations

import threading
import time
from typing import Any, Sequence

from ...hw import regs
from ..device import Buffer, DeviceError, RunResult, check_ring
from ..mmio import CoreDriver, CoreFault, CoreTimeout, RingFull, Watchdog
from .harness import HarnessError, _LockedPort

#: Cycles the stream clock thread runs per call into the harness (the lock is released
#: between two calls, so the host waits at most this long for a register access).
STREAM_CHUNK = 256


class RtlStreamMixin:
    """The streamed-execution methods of :class:`~vtaforge.runtime.rtl.device.RtlDevice`
    (``stream_open``, ``stream_append``, ``stream_wait``, ``stream_close``,
    ``finish_count``); they use the device's ``harness``, ``config``, ``driver``, memory
    access and allocator."""

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
        check_ring(self.config)
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
