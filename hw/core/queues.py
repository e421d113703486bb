"""Command queues (fetch → load/compute/store) and dependency-token queues.

A command queue is a synchronous FIFO of 128-bit instructions, ``cfg.INSN_QUEUE_DEPTH``
deep, built on :class:`amaranth.lib.fifo.SyncFIFOBuffered` (block RAM for deep queues).

A dependency-token queue carries no data, so it is a counter of capacity
``cfg.TOKEN_QUEUE_DEPTH`` (DESIGN.md "Semantics": a module pops before it executes and pushes
after; a push needs room).  Each queue has exactly one producer and one consumer, so a unit
that checks ``count < capacity`` before it starts can push at its end without overflow.
"""

from __future__ import annotations

from amaranth.hdl import Module
from amaranth.lib import wiring
from amaranth.lib.fifo import SyncFIFOBuffered
from amaranth.lib.wiring import In, Out

__all__ = ["TokenQueue", "CommandQueue"]


class TokenQueue(wiring.Component):
    """A dependency-token counter.

    Ports: ``push`` (In, 1: add a token this cycle), ``pop`` (In, 1: remove one),
    ``clear`` (In, 1: empty the queue; used at the start of a run),
    ``count`` (Out, ``range(capacity+1)``), ``nonempty`` and ``has_room`` (Out, 1).
    Pushing onto a full queue or popping an empty one is a protocol error of the caller; the
    counter then saturates instead of wrapping.
    """

    def __init__(self, capacity: int):
        if not isinstance(capacity, int) or capacity < 1:
            raise ValueError(f"TokenQueue capacity must be a positive integer, got {capacity!r}")
        self.capacity = capacity
        super().__init__({"push": In(1), "pop": In(1), "clear": In(1), "count": Out(range(capacity + 1)),
                          "nonempty": Out(1), "has_room": Out(1)})

    def elaborate(self, platform):
        m = Module()
        m.d.comb += [self.nonempty.eq(self.count != 0),
                     self.has_room.eq(self.count != self.capacity)]
        with m.If(self.clear):
            m.d.sync += self.count.eq(0)
        with m.Elif(self.push & ~self.pop & self.has_room):
            m.d.sync += self.count.eq(self.count + 1)
        with m.Elif(self.pop & ~self.push & self.nonempty):
            m.d.sync += self.count.eq(self.count - 1)
        return m


class CommandQueue(wiring.Component):
    """An instruction FIFO: ``w_data``/``w_en``/``w_rdy`` (write side), ``r_data``/``r_rdy``/
    ``r_en`` (read side, first-word fall-through), ``level``.  ``width`` bits, ``depth``
    entries."""

    def __init__(self, width: int, depth: int):
        self.width = width
        self.depth = depth
        super().__init__({"w_data": In(width), "w_en": In(1), "w_rdy": Out(1),
                          "r_data": Out(width), "r_en": In(1), "r_rdy": Out(1),
                          "level": Out(range(depth + 1))})

    def elaborate(self, platform):
        m = Module()
        m.submodules.fifo = fifo = SyncFIFOBuffered(width=self.width, depth=self.depth)
        m.d.comb += [fifo.w_data.eq(self.w_data), fifo.w_en.eq(self.w_en),
                     self.w_rdy.eq(fifo.w_rdy), self.r_data.eq(fifo.r_data),
                     fifo.r_en.eq(self.r_en), self.r_rdy.eq(fifo.r_rdy),
                     self.level.eq(fifo.level)]
        return m
