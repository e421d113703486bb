"""The ring registers of :class:`~vtaforge.runtime.fsim.FsimDevice` (``hw/regs.py``
"Streamed execution" and "Ring faults"), the methods it takes from :class:`FsimRingMixin`:
the host rings the doorbell itself.  fsim's fetch is instant (it reads every published slot
at once, so ``RING_HEAD`` = ``RING_TAIL``); published instructions run, lazily, once a
FINISH closes their segment."""

from __future__ import annotations

from collections import deque

import numpy as np

from ..hw.isa import INSN_BYTES, Opcode, decode_program
from .device import Buffer, DeviceError, ProgramError, check_ring


def ring_session_extra(ring: Buffer) -> dict:
    """Ring-register state of a stream session (:class:`FsimRingMixin`)."""
    return {"own": True, "carry": b"", "fault": None, "reported": False,
            "driver_open": False}


class FsimRingMixin:
    """``reg_read``/``reg_write`` of the ring registers and the session's ring state, for
    :class:`~vtaforge.runtime.fsim.FsimDevice` (its ``_stream`` session, memory access and
    ``_run_segment``)."""

    def reg_read(self, name: str) -> int:
        """``STATUS``, ``ERROR``, ``ERR_INSN``, ``ERR_INDEX`` of the ring session, or a
        ring register (``RING_*``, ``FINISH_COUNT``)."""
        from ..hw import regs as hw  # noqa: PLC0415

        check_ring(self.config)
        rr, st = self._ring_regs(), getattr(self, "_stream", None)
        fault = st["fault"] if st is not None else getattr(self, "_ring_last_fault", None)
        if name == "STATUS":
            busy = st is not None and fault is None
            return int(busy) | int(not busy) << 1 | int(fault is not None) << 2
        if name in ("ERROR", "ERR_INSN", "ERR_INDEX"):
            kind, index, aux = fault or (0, 0, 0)
            return {"ERROR": (int(kind) << 4) | int(fault is not None), "ERR_INSN": aux,
                    "ERR_INDEX": index}[name]
        if name == "RING_SIZE":
            return self.config.INSN_RING
        if name == "RING_TAIL" and st is not None and st["fault"] is None:
            return st["tail"]
        if name in ("RING_HEAD", "FINISH_COUNT"):
            if st is None:
                return 0
            return st["tail"] if name == "RING_HEAD" else st["finish"]
        if name in rr:
            return rr[name]
        hw.reg(name)
        raise DeviceError(f"fsim: register {name} is not modelled (ring registers only)")

    def reg_write(self, name: str, value: int, *, raw: bool = False) -> None:
        """Write a ring register (or ``CTRL.START`` with ``RING_CTRL.ENABLE``: a session
        on the host's ring at ``RING_BASE``).  Checked as the driver checks it
        (``mmio.ring_write_refusal``) unless ``raw``; a raw write the core refuses
        becomes the session's ring fault (``STATUS.ERROR``; raised by
        :meth:`stream_wait` / :meth:`stream_close`).

        Raises:
            DeviceError: refused by the driver's check (nothing written); a register fsim
                does not model.
        """
        from ..hw import regs as hw  # noqa: PLC0415
        from .mmio import ring_write_refusal  # noqa: PLC0415

        check_ring(self.config)
        value = int(value) & 0xFFFFFFFF
        rr, st = self._ring_regs(), getattr(self, "_stream", None)
        if not raw:
            if st is not None and st["failed"] is not None:
                self._session()
            why = ring_write_refusal(
                self.config, name, value, tail=None if st is None else st["tail"],
                head=0 if st is None else st["tail"],
                open_segment=st is not None and st["driver_open"])
            if why is not None:
                raise DeviceError(f"fsim: refusing to write {name} = {value}: {why}")
        if name == "CTRL":
            if value & 1:
                self._ring_start()
            return
        if name not in rr:
            hw.reg(name)
            raise DeviceError(f"fsim: register {name} is not modelled (ring registers only)")
        rr[name] = value
        if st is None or st["fault"] is not None:
            return
        if name == "RING_TAIL":
            self._ring_drain(st)        # what was published has run (instant fetch)
            kind = hw.ring_tail_fault(self.config.INSN_RING, st["tail"], st["tail"], value)
            if kind is not None:
                self._ring_fault(st, kind, value, st["tail"])
            else:
                self._ring_publish(st, value)
                if not raw:             # what the driver knows of the published slots
                    st["driver_open"] = bool(st["carry"])
        elif name == "RING_CTRL" and not value & 1:
            self._ring_close(st)

    def _ring_regs(self) -> dict:
        rr = getattr(self, "_ringregs", None)
        if rr is None:
            rr = self._ringregs = {"RING_CTRL": 0, "RING_BASE_LO": 0, "RING_BASE_HI": 0,
                                   "RING_TAIL": 0}
        return rr

    def _ring_start(self) -> None:
        from ..hw import regs as hw  # noqa: PLC0415

        rr = self._ring_regs()
        if not rr["RING_CTRL"] & 1:
            raise DeviceError("fsim: CTRL.START without RING_CTRL.ENABLE: one-shot runs use "
                              "run()")
        if getattr(self, "_stream", None) is not None:
            raise DeviceError("fsim: a stream session is already open")
        base = rr["RING_BASE_LO"] | rr["RING_BASE_HI"] << 32
        self._ring_last_fault = None
        if base % INSN_BYTES:       # refused at START: the session is over at once
            self._ring_last_fault = (int(hw.ErrorKind.RING_BASE), rr["RING_BASE_LO"], 0)
            return
        if rr["RING_TAIL"] > self.config.INSN_RING:
            self._ring_last_fault = (int(hw.ErrorKind.RING_OVERFLOW), rr["RING_TAIL"], 0)
            return
        ring = Buffer(base, self.config.INSN_RING * INSN_BYTES)
        st = {"ring": ring, "tail": 0, "head": 0, "finish": 0, "pending": deque(),
              "appended": 0, "failed": None}
        st.update(ring_session_extra(ring), own=False)
        self._stream = st
        self._ring_publish(st, rr["RING_TAIL"])

    def _ring_publish(self, st: dict, tail: int) -> None:
        """The host published slots ``[st.tail, tail)``: fetch reads them (their bytes
        are taken now; the slots are free again) and each segment a FINISH closes is
        appended to the pending segments."""
        from .mmio import ring_pieces  # noqa: PLC0415

        n = (tail - st["tail"]) & 0xFFFFFFFF
        ring, size = st["ring"], self.config.INSN_RING
        self._ensure(ring.end)
        raw = b"".join(self._read_mem(ring.addr + slot * INSN_BYTES, k * INSN_BYTES).tobytes()
                       for slot, _, k in ring_pieces(st["tail"], n, size))
        st["tail"] = tail
        carry = st["carry"] + raw
        if carry:
            op = decode_program(self.config, np.frombuffer(carry, np.uint8))["opcode"]
            ends = [i + 1 for i, o in enumerate(op) if o == Opcode.FINISH]
            first = 0
            regions = [b for b in self.buffers() if b != ring]
            for e in ends:
                seg = np.frombuffer(carry[first * INSN_BYTES:e * INSN_BYTES], np.uint8).copy()
                st["appended"] += 1
                st["pending"].append((st["appended"], seg, regions, None))
                first = e
            carry = carry[first * INSN_BYTES:]
        st["carry"] = carry

    def _ring_fault(self, st: dict, kind, index: int, aux: int) -> None:
        from ..hw import regs as hw  # noqa: PLC0415

        st["fault"] = (int(kind), int(index) & 0xFFFFFFFF, int(aux) & 0xFFFFFFFF)
        if st["failed"] is None:
            st["failed"] = hw.fault_message(self.config, kind, index, None, None, 0, aux)

    def _ring_close(self, st: dict, checked: bool = False) -> None:
        """A close: a segment left without its FINISH is a ring fault (``checked``: the
        driver's refusal, the session stays open); a ring fault not yet raised is raised
        (the session ends)."""
        from ..hw import regs as hw  # noqa: PLC0415
        from .mmio import ring_write_refusal  # noqa: PLC0415

        if checked and st["failed"] is None and st["carry"] and st["driver_open"]:
            why = ring_write_refusal(self.config, "RING_CTRL", 0, tail=st["tail"],
                                     open_segment=True)
            raise DeviceError(f"fsim: refusing to write RING_CTRL = 0: {why}")
        self._ring_last_fault = None
        if st["failed"] is None and st["carry"]:
            self._ring_drain(st)        # the complete segments ran before the close
            if st["failed"] is None:
                self._ring_fault(st, hw.ErrorKind.RING_FINISH, st["tail"], st["appended"])
        if st["fault"] is not None and not st["reported"]:
            st["reported"] = True
            self._ring_last_fault = st["fault"]
            if st.get("own", True):
                self.free(st["ring"])
            self._stream = None
            raise ProgramError(f"fsim: {st['failed']}", insn_index=st.get("failed_insn"))

    def _ring_drain(self, st: dict) -> None:
        """Run every pending segment (a failure is kept in ``st["failed"]``, raised by
        the next session call)."""
        while st["pending"] and st["failed"] is None:
            try:
                self._run_segment(st)
            except ProgramError:
                break
