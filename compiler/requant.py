"""Integer requantize arithmetic shared by the quantizer, the partitioner, the lowerings
and the integer reference: the rounding constant of a shift, the overflow-free ALU
sequence for a multiply-then-shift requantize (:class:`MultPlan`, :func:`mult_plan`), and
the exact fixed-point reciprocal of a non-power-of-two average pool
(:func:`avg_reciprocal`).  Pure integer math on Python ints and numpy; the ISA's
immediate range comes from :data:`vtaforge.hw.isa.LIMITS`.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..hw.isa import LIMITS

__all__ = ["requant_round", "MULT_MAX", "IMM_MIN", "MultPlan", "mult_plan", "avg_reciprocal", "avg_exact"]


def requant_round(shift: int) -> int:
    """The rounding constant that goes with ``shift``: ``1 << (shift-1)`` if ``shift > 0`` else 0."""
    return (1 << (shift - 1)) if shift > 0 else 0


MULT_MAX = LIMITS.imm_max   # the largest ALU immediate (signed 16 bits): 32767
IMM_MIN = LIMITS.imm_min    # -32768


@dataclass(frozen=True)
class MultPlan:
    """How VTA's ALU computes ``clip((acc*mult + round) >> shift, lo, hi)`` without overflow.

    Sequence: ``ADD pre_add`` (or merged into the bias), optional pre-clip
    ``MAX clip[0]``, ``MIN clip[1]`` (on ``acc + pre_add``), ``MUL mult``, ``ADD post_add``,
    ``SHR shift``, ``MAX lo``, ``MIN hi``.  ``pre_add * mult + post_add == round``, so
    ``(acc + pre_add) * mult + post_add == acc * mult + round``.  The pre-clip is exact: it
    only replaces accumulators whose output saturates at ``lo`` / ``hi`` anyway by the
    nearest accumulator that saturates too.  ``bound``: the largest ``|value|`` the
    sequence can produce, ``< 2**(acc_width-1)`` (proved from the accumulator bound).
    """

    pre_add: int
    clip: tuple[int, int] | None
    mult: int
    post_add: int
    shift: int
    bound: int


def mult_plan(mult: int, shift: int, rnd: int, lo: int, hi: int, acc_bound: int,
              acc_width: int = 32) -> MultPlan | None:
    """Plan the ALU sequence for ``clip((acc*mult + rnd) >> shift, lo, hi)``.

    Args:
        mult: 1..32767; shift: 0..31 (``rnd`` 0 when ``shift == 0``); lo, hi: the int8 clip;
        acc_bound: a proven bound on ``|acc|`` (worst case over all int8 inputs).
        acc_width: the accumulator width (products wrap there on VTA).
    Returns:
        a :class:`MultPlan`, or ``None`` when no overflow-free sequence exists (the
        pre-clip bounds would not fit a 16-bit immediate, or even clipped values overflow).
    """
    top = 1 << (acc_width - 1)
    pre, post = divmod(int(rnd), int(mult))
    if acc_bound + pre < top and acc_bound * mult + rnd < top:
        return MultPlan(pre, None, mult, post, shift, acc_bound * mult + rnd)
    # pre-clip: smallest acc whose output is >= hi, largest whose output is <= lo
    c_hi = -((-(hi * (1 << shift) - rnd)) // mult)
    c_lo = ((lo + 1) * (1 << shift) - 1 - rnd) // mult
    c_lo, c_hi = c_lo + pre, c_hi + pre
    if not (IMM_MIN <= c_lo <= c_hi <= MULT_MAX):
        return None
    bound = max(abs(c_lo), abs(c_hi)) * mult + post
    if bound >= top or acc_bound + pre >= top:
        return None
    return MultPlan(pre, (c_lo, c_hi), mult, post, shift, bound)


def avg_exact(d: int) -> tuple[np.ndarray, np.ndarray]:
    """Every window sum of ``d`` int8 values (``int64 [255*d + 1]``, ``-128*d .. 127*d``)
    and its rounding division by ``d`` (ties up): the table a reciprocal must match."""
    acc = np.arange(-128 * d, 127 * d + 1, dtype=np.int64)
    return acc, np.floor_divide(2 * acc + d, 2 * d)


def avg_reciprocal(d: int) -> tuple[int, int, int] | None:
    """An exact fixed-point reciprocal for average pooling by ``d`` (not a power of two).

    Returns ``(mult, shift, round)`` with ``1 <= mult <= 32767``, ``shift <= 31`` such that
    ``(acc*mult + round) >> shift == floor((2*acc + d) / (2*d))`` (rounding division, ties
    up) for every window sum of int8 values, ``-128*d <= acc <= 127*d`` (checked
    exhaustively), and ``128*d*mult + round < 2**31``; the smallest such ``shift``.  ``None``
    when none exists (``d`` too large for a 16-bit multiplier).

    Candidates per shift ``k``: ``mult = ceil(2**k / d)`` (a slight over-estimate of
    ``1/d``) with ``round = 2**(k-1)``, or ``round = 2**(k-1) + 128*(d*mult - 2**k)`` which
    cancels the over-estimate on the negative side so that ties (even ``d``) round up.
    Why it can be exact: ``0 <= mult/2**k - 1/d < 2**-k``, so ``acc*mult/2**k`` is within
    ``128*d/2**k`` of ``acc/d``; for odd ``d`` every ``acc/d`` is at least ``1/(2d)`` from a
    rounding threshold, so any ``k`` with ``2**k > 256*d**2`` and ``mult <= 32767`` (i.e.
    ``2**k <= 32767*d``) is exact -- such a ``k`` exists for every ``d <= 63``.  Measured:
    every non-power-of-two ``d < 93`` (9, 25, 49, 36, 81, 100, 121 ... included) has one;
    ``93, 97, 108, 110, ...`` do not (those pools divide on the CPU).
    """
    if d < 1 or d & (d - 1) == 0:
        return None
    acc, want = avg_exact(d)
    for k in range(1, 32):
        m = -(-(1 << k) // d)
        if m > MULT_MAX:
            break
        for r in ((1 << (k - 1)), (1 << (k - 1)) + 128 * (d * m - (1 << k))):
            if 128 * d * m + r >= 1 << 31 or r >= 1 << k:
                continue
            if np.array_equal((acc * m + r) >> k, want):
                return m, k, r
    return None
