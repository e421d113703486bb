"""Launch-level ordering of the program builder: the token moves of an instruction stream
and the capacity-respecting re-interleaving of a launch (:func:`capacity_order`), so
that a launch never pushes more tokens into a queue than ``TOKEN_QUEUE_DEPTH`` holds
before they are popped (see :mod:`.builder`), with :func:`split_pushes` for streams
that fit only when an instruction's pushes are taken apart from its pops."""

from __future__ import annotations

from typing import Sequence

import dataclasses

from ..hw.config import MemType
from ..hw.isa import FLAG_QUEUES, Insn, Module, Opcode, Queue
from .kernels import BuilderError

__all__ = ["token_moves", "capacity_order", "split_pushes"]

_PUSH_FLAGS = ("push_prev", "push_next")


def token_moves(insns: Sequence[Insn]) -> tuple[list[Module], list[tuple[int, ...]],
                                                   list[tuple[int, ...]]]:
    """Module, popped queues and pushed queues of each instruction."""
    mods, pops, pushes = [], [], []
    for insn in insns:
        m = insn.module
        fq = FLAG_QUEUES[m]
        mods.append(m)
        pops.append(tuple(int(fq[f]) for f in ("pop_prev", "pop_next")
                          if getattr(insn, f) and fq[f] is not None))
        pushes.append(tuple(int(fq[f]) for f in ("push_prev", "push_next")
                            if getattr(insn, f) and fq[f] is not None))
    return mods, pops, pushes


def capacity_order(insns: Sequence[Insn], cap: int) -> list[int] | None:
    """A fetch order of ``insns`` that runs on every backend whatever the queue depths.

    Executed one at a time in the returned order (each module's instructions keep their
    order), every pop finds a token and every push finds room in its token queue of
    capacity ``cap`` (``TOKEN_QUEUE_DEPTH``).  Such a stream cannot deadlock under any
    ``INSN_QUEUE_DEPTH`` >= 1: the earliest unexecuted instruction is always at the head
    of its command queue with its tokens and room available (the modules running ahead
    only add tokens it pops and free room it pushes into: each queue has one producer and
    one consumer module).

    Returns ``None`` when program order already has the property (the common case: deep
    queues), else the order built greedily, always taking the earliest ready module head.
    Greedy is complete because an instruction that is ready stays ready while other
    modules run (they can only add its tokens and free its room).

    Raises:
        BuilderError: no order exists: the program needs more tokens outstanding in a
            queue than it holds (the message names the queue and the capacity).
    """
    mods, pops, pushes = token_moves(insns)
    tok = [0, 0, 0, 0]
    for i in range(len(insns)):
        if any(tok[q] < 1 for q in pops[i]) or any(tok[q] >= cap for q in pushes[i]):
            break
        for q in pops[i]:
            tok[q] -= 1
        for q in pushes[i]:
            tok[q] += 1
    else:
        return None
    per_mod: dict[Module, list[int]] = {m: [] for m in Module}
    for i, m in enumerate(mods):
        per_mod[m].append(i)
    heads = {m: 0 for m in Module}
    tok = [0, 0, 0, 0]
    order: list[int] = []
    n = len(insns)
    while len(order) < n:
        best = None
        for m, idx in per_mod.items():
            h = heads[m]
            if h >= len(idx):
                continue
            i = idx[h]
            if any(tok[q] < 1 for q in pops[i]) or any(tok[q] >= cap for q in pushes[i]):
                continue
            if best is None or i < best[1]:
                best = (m, i)
        if best is None:
            full = sorted({Queue(q).name.lower() for m, idx in per_mod.items()
                           if heads[m] < len(idx) for q in pushes[idx[heads[m]]]
                           if tok[q] >= cap})
            raise BuilderError(
                f"the program cannot run with TOKEN_QUEUE_DEPTH = {cap}: it needs more "
                f"tokens outstanding in token queue {', '.join(full) or '?'} than the queue "
                f"holds, whatever the instruction order (use a config with deeper token "
                f"queues, or fewer outstanding dependencies)")
        m, i = best
        for q in pops[i]:
            tok[q] -= 1
        for q in pushes[i]:
            tok[q] += 1
        heads[m] += 1
        order.append(i)
    return order


def _nop(module: Module, **flags: int) -> Insn:
    """A no-op of ``module`` (LOAD/STORE with ``x_size == 0``) carrying ``flags``."""
    if module == Module.LOAD:
        return Insn(Opcode.LOAD, memory_type=int(MemType.INP), **flags)
    if module == Module.COMPUTE:
        return Insn(Opcode.LOAD, memory_type=int(MemType.UOP), **flags)
    return Insn(Opcode.STORE, memory_type=int(MemType.OUT), **flags)


def split_pushes(insns: Sequence[Insn]) -> tuple[list[Insn], list[int]]:
    """``insns`` with the pushes of every instruction that pops, or pushes two queues,
    moved onto NOPs of its module right behind it (one NOP per pushed queue).

    A module starts an instruction only when every queue it pops holds a token *and* every
    queue it pushes has room, so an instruction that pops one queue and pushes another
    ties the two together: with one-token queues, a GEMM that pops l2g and pushes g2l and
    a LOAD that pops g2l and pushes l2g (a double-buffered pipeline whose steps are one
    instruction each) wait for each other in every order.  Pushing later is always safe
    (a token only announces work already done), and taken apart the two can run.

    Returns the new stream and, for each instruction of ``insns``, its index in it.
    """
    out: list[Insn] = []
    where: list[int] = []
    mods, pops, pushes = token_moves(insns)
    for insn, m, po, pu in zip(insns, mods, pops, pushes):
        where.append(len(out))
        if not pu or (not po and len(pu) == 1):
            out.append(insn)
            continue
        flags = [f for f in _PUSH_FLAGS if getattr(insn, f)]
        out.append(dataclasses.replace(insn, **{f: 0 for f in flags}))
        out.extend(_nop(m, **{f: 1}) for f in flags)
    return out, where
