"""The static program verifier, run before every launch by the program builder and by
backends that cannot stop mid-run (RTL, board).

It runs the functional simulator's machine (:mod:`.fsim`) in a data-free "dry" mode: the same
decoder, the same static checks, the same scheduler (command queues, token queues,
deadlock detection) and the same index checks, so every rule and every message is shared
with :func:`.fsim.simulate`.  Only micro-ops are read from DRAM (to check the computed
GEMM/ALU indices); nothing is written.

The DRAM image is either a numpy array (byte address = index) or a :class:`SparseImage`:
the bytes the verifier reads (instructions, micro-ops) as segments at their absolute
addresses.  A board backend uses the latter, so the verifier's memory is sized by the
program's buffers and never by their physical addresses (a buffer near the top of a
512 MiB DDR costs its own size, not 512 MiB of address space); messages keep the physical
addresses.

Limitation: micro-ops are read from the DRAM image as given; a program whose own STOREs
produce micro-ops that it later loads is checked against the image's initial contents.
Such a program is still never silently wrong: fsim checks the computed indices when it
runs, and the core checks every scratchpad index it forms and reports the first
violation (``STATUS.ERROR``, ``hw/regs.py``), which the RTL and board backends raise with
fsim's message (issue 10, F2).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Sequence

import numpy as np

from ..hw.config import VTAConfig
from ..hw.isa import INSN_BYTES, Opcode, decode_program
from .device import Buffer, DeviceError, ProgramError
from .fsim import Regions, _dry_run, _Machine

__all__ = ["verify_program", "verify_segment", "VerifyReport", "SparseImage"]


class SparseImage:
    """Device memory known only in pieces: ``segments`` of bytes at absolute addresses.

    Overlapping or adjacent segments are merged (a later segment's bytes win where they
    overlap).  Reading bytes outside every segment raises :class:`DeviceError`; only the
    slice reads the verifier makes (``image[start:stop]``) are supported.

    Args:
        segments: ``(addr, data)`` pairs; ``data`` is anything ``numpy.asarray`` turns
            into bytes (its raw bytes are used).
    """

    def __init__(self, segments):
        parts = []
        for addr, data in segments:
            raw = np.ascontiguousarray(data).reshape(-1).view(np.uint8)
            if int(addr) < 0:
                raise DeviceError(f"segment address {addr} is negative")
            if raw.size:
                parts.append((int(addr), raw))
        spans: list[list[int]] = []
        for addr, raw in sorted(parts, key=lambda p: p[0]):
            if spans and addr <= spans[-1][1]:
                spans[-1][1] = max(spans[-1][1], addr + raw.size)
            else:
                spans.append([addr, addr + raw.size])
        merged = [(s0, np.zeros(e0 - s0, dtype=np.uint8)) for s0, e0 in spans]
        for addr, raw in parts:  # input order: a later segment wins where they overlap
            for a0, buf in merged:
                if a0 <= addr < a0 + buf.size:
                    buf[addr - a0:addr - a0 + raw.size] = raw
                    break
        self._starts = [a for a, _ in merged]
        self._data = [b for _, b in merged]

    @property
    def nbytes(self) -> int:
        """Bytes held (the memory this image costs)."""
        return sum(b.size for b in self._data)

    @property
    def end(self) -> int:
        """One past the highest byte address held (0 when empty)."""
        return max((a + b.size for a, b in zip(self._starts, self._data)), default=0)

    def segments(self) -> list[tuple[int, int]]:
        """``(addr, nbytes)`` of each merged segment."""
        return [(a, b.size) for a, b in zip(self._starts, self._data)]

    def __getitem__(self, key) -> np.ndarray:
        if not isinstance(key, slice) or key.step not in (None, 1):
            raise TypeError("SparseImage supports byte-range slices image[start:stop] only")
        start, stop = int(key.start or 0), int(key.stop)
        for a, b in zip(self._starts, self._data):
            if a <= start and stop <= a + b.size:
                return b[start - a:stop - a]
        raise DeviceError(f"the verifier read bytes [0x{start:x}, 0x{stop:x}), which its "
                          f"image does not hold (segments {self.segments()})")


@dataclass
class VerifyReport:
    """What the verifier found about a valid program.

    Attributes:
        insn_count: instructions in the program.
        stats: the statistics :func:`.fsim.simulate` would return (same keys; every counter
            is data-independent).
        pushes, pops: tokens pushed / popped per queue, in order ``(l2g, g2l, g2s, s2g)``
            (equal for a valid program).
        peak_tokens: the largest occupancy of each token queue under fsim's schedule.
        steps: watchdog steps the run takes (one per instruction and per micro-op).
    """

    insn_count: int
    stats: dict[str, Any] = field(default_factory=dict)
    pushes: tuple[int, int, int, int] = (0, 0, 0, 0)
    pops: tuple[int, int, int, int] = (0, 0, 0, 0)
    peak_tokens: tuple[int, int, int, int] = (0, 0, 0, 0)
    steps: int = 0


def verify_program(cfg: VTAConfig, dram: np.ndarray, insn_addr: int, insn_count: int,
                   regions: Sequence[Buffer | tuple[int, int]] | None = None, *,
                   max_steps: int | None = None) -> VerifyReport:
    """Check a program statically, without executing its data path.

    Checks: opcodes, memory types, ALU opcodes and enabled features; flags valid for each
    module; a FINISH exists; instruction fetch and every DMA range inside ``regions``; no
    STORE writes over the program's own instructions (backends fetch them at different
    times, so such a program has no single result); every
    LOAD/STORE scratchpad range and every computed GEMM/ALU index inside its depth; the
    program completes without deadlock under the command- and token-queue capacities; each
    token queue balances (pushes == pops); the watchdog budget.

    Args:
        cfg: the core configuration.
        dram: the 1-D ``uint8`` DRAM image (read only: instructions and micro-ops), or a
            :class:`SparseImage` holding at least the instructions and every micro-op the
            program loads.
        insn_addr: byte address of the first instruction; insn_count: instructions.
        regions: ``(addr, nbytes)`` pairs or :class:`Buffer` s the program may touch
            (``None``: the whole image; for a :class:`SparseImage`, its segments).  With a
            :class:`SparseImage` the regions may lie anywhere, outside its segments too.
        max_steps: watchdog, as for :func:`.fsim.simulate`.

    Returns:
        A :class:`VerifyReport`.

    Raises:
        ProgramError / DeadlockError: with the same one-line messages and the same
            ``insn_index`` (the instruction the error is about) as :func:`.fsim.simulate`.
        DeviceError: a :class:`SparseImage` lacks bytes the program reads.
    """
    if isinstance(dram, SparseImage):
        m = _dry_run_sparse(cfg, dram, insn_addr, insn_count, regions, max_steps)
    else:
        m = _dry_run(cfg, dram, insn_addr, insn_count, regions, max_steps=max_steps)
    return VerifyReport(insn_count=int(insn_count), stats=dict(m.stats),
                        pushes=tuple(m.pushes), pops=tuple(m.pops),
                        peak_tokens=tuple(m.peak), steps=m.steps)


def verify_segment(cfg: VTAConfig, dram, insn_addr: int, insn_count: int,
                   regions: Sequence[Buffer | tuple[int, int]] | None = None, *,
                   max_steps: int | None = None) -> VerifyReport:
    """Check one segment of a streamed session before it is appended to the ring.

    A segment runs after the ones before it with no reset in between, so beyond
    :func:`verify_program` (every static rule, DMA ranges inside ``regions``, no deadlock,
    and each token queue balanced within the segment: it leaves every queue empty for the
    next one) its last instruction must be its only FINISH: the host reads the segment's
    results once ``FINISH_COUNT`` counts it, so nothing may run after it.

    Args: as :func:`verify_program`.

    Returns:
        the :class:`VerifyReport`.
    Raises:
        ProgramError / DeadlockError: the segment is refused (the message names the rule;
            ``insn_index``: as :func:`verify_program`'s, or the first FINISH that is not the
            segment's last instruction).
        DeviceError: as :func:`verify_program`.
    """
    n = int(insn_count)
    if n > 0:
        raw = np.asarray(dram[int(insn_addr):int(insn_addr) + n * INSN_BYTES])
        if raw.size == n * INSN_BYTES:
            op = decode_program(cfg, raw)["opcode"]
            fin = np.flatnonzero(op == Opcode.FINISH)
            if fin.size and (fin.size > 1 or fin[-1] != n - 1):
                raise ProgramError(
                    f"segment of {n} instructions: a streamed segment ends with its one "
                    f"FINISH, found FINISH at {', '.join(str(int(i)) for i in fin[:4])}"
                    f"{' ...' if fin.size > 4 else ''}",
                    insn_index=int(fin[0]))     # the first FINISH before the segment's end
    return verify_program(cfg, dram, insn_addr, insn_count, regions, max_steps=max_steps)


def _dry_run_sparse(cfg: VTAConfig, image: SparseImage, insn_addr: int, insn_count: int,
                    regions, max_steps: int | None) -> _Machine:
    """fsim's dry machine reading a :class:`SparseImage` (it only slices ``self.dram``)."""
    if regions is None:
        regions = image.segments()
    ends = [(r.end if isinstance(r, Buffer) else int(r[0]) + int(r[1])) for r in regions]
    bound = max([image.end, *ends])
    m = _Machine(cfg, np.zeros(0, dtype=np.uint8), Regions(regions, bound), dry=True,
                 max_steps=max_steps)
    m.dram = image
    m.load_program(insn_addr, insn_count)
    m.run()
    return m
