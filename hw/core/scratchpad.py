"""Scratchpads: simple dual-port (one write, one synchronous read) on-chip memories.

Each scratchpad is one :class:`amaranth.lib.memory.Memory` with one write port and one
synchronous read port, the form Yosys maps to block RAM (hardware-notes.md "Scratchpads").
Widths and depths come from the config: ``cfg.elem_bits(mem)`` × ``cfg.depth(mem)``.
Contents are undefined at reset (DESIGN.md: a program must write what it reads); the
simulation initial value is zero.
"""

from __future__ import annotations

from amaranth.hdl import Module
from amaranth.lib import wiring
from amaranth.lib.memory import Memory
from amaranth.lib.wiring import In, Out

__all__ = ["Scratchpad"]


class Scratchpad(wiring.Component):
    """``depth`` × ``width``-bit RAM.

    Ports: ``w_addr``, ``w_data``, ``w_en`` (In; written at the clock edge);
    ``r_addr``, ``r_en`` (In) and ``r_data`` (Out), valid one cycle after the address was
    presented with ``r_en`` high; with ``r_en`` low ``r_data`` holds.  A read in the same
    cycle as a write to the same address returns the old contents.
    """

    def __init__(self, width: int, depth: int):
        if depth < 2 or depth & (depth - 1):
            raise ValueError(f"scratchpad depth must be a power of two >= 2, got {depth}")
        self.width = width
        self.depth = depth
        aw = depth.bit_length() - 1
        super().__init__({"w_addr": In(aw), "w_data": In(width), "w_en": In(1),
                          "r_addr": In(aw), "r_en": In(1), "r_data": Out(width)})

    @classmethod
    def of(cls, mem) -> "Scratchpad":
        """The scratchpad of one entry of :meth:`VTAConfig.memories` (a ``CoreMemory``)."""
        return cls(mem.width, mem.depth)

    def elaborate(self, platform):
        m = Module()
        m.submodules.mem = mem = Memory(shape=self.width, depth=self.depth, init=[])
        wp = mem.write_port()
        rp = mem.read_port(domain="sync")
        m.d.comb += [wp.addr.eq(self.w_addr), wp.data.eq(self.w_data), wp.en.eq(self.w_en),
                     rp.addr.eq(self.r_addr), rp.en.eq(self.r_en), self.r_data.eq(rp.data)]
        return m
