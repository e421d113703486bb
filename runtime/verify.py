"""The static program verifier, run before every launch by the program builder and by
backends that cannot stop mid-run (RTL, board).

It runs the functional simulator's machine (:mod:`.fsim`) in a data-free "dry" mode: the same
decoder, the same static checks, the same scheduler (command queues, token queues,
deadlock detection) and the same index checks, so every rule and every message is shared
with :func:`.fsim.simulate`.  Only micro-ops are read from DRAM (to check the computed
GEMM/ALU indices); nothing is written.

Limitation: micro-ops are read from the DRAM image as given; a program whose own STOREs
produce micro-ops that it later loads is checked against the image's initial contents.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Sequence

import numpy as np

from ..hw.config import VTAConfig
from .device import Buffer
from .fsim import _dry_run

__all__ = ["verify_program", "VerifyReport"]


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
    module; a FINISH exists; instruction fetch and every DMA range inside ``regions``; every
    LOAD/STORE scratchpad range and every computed GEMM/ALU index inside its depth; the
    program completes without deadlock under the command- and token-queue capacities; each
    token queue balances (pushes == pops); the watchdog budget.

    Args:
        cfg: the core configuration.
        dram: the 1-D ``uint8`` DRAM image (read only: instructions and micro-ops).
        insn_addr: byte address of the first instruction; insn_count: instructions.
        regions: ``(addr, nbytes)`` pairs or :class:`Buffer` s the program may touch
            (``None``: the whole image).
        max_steps: watchdog, as for :func:`.fsim.simulate`.

    Returns:
        A :class:`VerifyReport`.

    Raises:
        ProgramError / DeadlockError: with the same one-line messages as
            :func:`.fsim.simulate`.
    """
    m = _dry_run(cfg, dram, insn_addr, insn_count, regions, max_steps=max_steps)
    return VerifyReport(insn_count=int(insn_count), stats=dict(m.stats),
                        pushes=tuple(m.pushes), pops=tuple(m.pops),
                        peak_tokens=tuple(m.peak), steps=m.steps)
