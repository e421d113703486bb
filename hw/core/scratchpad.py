"""Scratchpads: simple dual-port (one write, one synchronous read) on-chip memories.

Each scratchpad is one :class:`amaranth.lib.memory.Memory` with one write port and one
synchronous read port, the form Yosys maps to block RAM (hardware-notes.md "Scratchpads").
Widths and depths come from the config: ``cfg.elem_bits(mem)`` × ``cfg.depth(mem)``.
Contents are undefined at reset (DESIGN.md: a program must write what it reads); the
simulation initial value is zero.
"""

from __future__ import annotations

from amaranth.hdl import Array, Cat, Module, Mux, Signal
from amaranth.lib import wiring
from amaranth.lib.memory import Memory
from amaranth.lib.wiring import In, Out

__all__ = ["Scratchpad", "BankedScratchpad", "TapScratchpad"]


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


class BankedScratchpad(wiring.Component):
    """``depth`` × ``width``-bit RAM in two banks (the low and the high half of the
    addresses, one :class:`Scratchpad` each), with two write ports and two read ports that
    each address the whole depth: ``w0_*``/``w1_*`` and ``r0_*``/``r1_*`` (as
    :class:`Scratchpad`'s ports; ``r{p}_data`` is valid one cycle after port ``p``
    presented an address with ``r{p}_en`` high).

    Ports of one kind may not address the same bank in the same cycle (the user
    arbitrates; ``REQ_ENGINE``: the compute unit's requantize engine defers to the GEMM
    pipeline's writes and takes the read port it needs first).  Then ``w0`` wins the
    bank, so a collision loses the ``w1`` write, never corrupts another entry.  Port
    ``p``'s read data comes from the bank port ``p`` read last; it holds only while no
    port reads that bank.

    Raises:
        ValueError: ``depth`` not a power of two >= 4.
    """

    def __init__(self, width: int, depth: int):
        if depth < 4 or depth & (depth - 1):
            raise ValueError(f"banked scratchpad depth must be a power of two >= 4, got {depth}")
        self.width = width
        self.depth = depth
        aw = depth.bit_length() - 1
        ports = {}
        for p in (0, 1):
            ports.update({f"w{p}_addr": In(aw), f"w{p}_data": In(width), f"w{p}_en": In(1),
                          f"r{p}_addr": In(aw), f"r{p}_en": In(1), f"r{p}_data": Out(width)})
        super().__init__(ports)

    def elaborate(self, platform):
        m = Module()
        aw = self.depth.bit_length() - 1
        banks = [Scratchpad(self.width, self.depth // 2) for _ in (0, 1)]
        m.submodules.bank0, m.submodules.bank1 = banks
        for b, bank in enumerate(banks):
            w0 = self.w0_en & (self.w0_addr[aw - 1] == b)
            w1 = self.w1_en & (self.w1_addr[aw - 1] == b)
            r0 = self.r0_en & (self.r0_addr[aw - 1] == b)
            m.d.comb += [bank.w_en.eq(w0 | w1),
                         bank.w_addr.eq(Mux(w0, self.w0_addr, self.w1_addr)[:aw - 1]),
                         bank.w_data.eq(Mux(w0, self.w0_data, self.w1_data)),
                         bank.r_en.eq(r0 | (self.r1_en & (self.r1_addr[aw - 1] == b))),
                         bank.r_addr.eq(Mux(r0, self.r0_addr, self.r1_addr)[:aw - 1])]
        for p in (0, 1):
            sel = Signal(name=f"r{p}_bank")
            addr, en = getattr(self, f"r{p}_addr"), getattr(self, f"r{p}_en")
            with m.If(en):
                m.d.sync += sel.eq(addr[aw - 1])
            m.d.comb += getattr(self, f"r{p}_data").eq(Mux(sel, banks[1].r_data,
                                                             banks[0].r_data))
        return m


class TapScratchpad(wiring.Component):
    """``depth`` × ``width``-bit RAM whose one read delivers ``taps`` consecutive entries
    (``DEPTHWISE_TAPS``: the INP scratchpad of a depthwise GEMM, docs/hardware.md
    "Depthwise GEMM").

    The entries are interleaved over ``P`` banks (``P`` the least power of two >= ``taps``):
    entry ``e`` lives in bank ``e % P`` at ``e // P``, so the same bits as one
    ``depth`` × ``width`` RAM.  A read of ``r_addr = a`` presents bank ``k`` the address of
    entry ``a + ((k - a) % P)`` (the first entry at or after ``a`` in that bank) and the
    outputs are rotated by ``a % P``.

    Ports: ``w_addr``, ``w_data``, ``w_en`` (In, as :class:`Scratchpad`); ``r_addr``,
    ``r_en`` (In); ``r_data`` (Out, ``width``: entry ``a``, one cycle after ``a`` was
    presented with ``r_en`` high, as :class:`Scratchpad`'s) and ``r_taps`` (Out,
    ``taps * width``: entries ``a .. a + taps - 1``, tap ``t`` at bits ``[t*width,
    (t+1)*width)``; entries past the last one wrap to entry 0).  With ``r_en`` low both
    hold.  A read in the same cycle as a write to the same entry returns the old contents.

    Raises:
        ValueError: ``taps`` < 2, or ``depth`` not a power of two >= ``2 * P``.
    """

    def __init__(self, width: int, depth: int, taps: int):
        if taps < 2:
            raise ValueError(f"tap scratchpad needs taps >= 2, got {taps}")
        nb = 1 << (taps - 1).bit_length()
        if depth < 2 * nb or depth & (depth - 1):
            raise ValueError(f"tap scratchpad depth must be a power of two >= {2 * nb} "
                             f"(taps {taps}), got {depth}")
        self.width, self.depth, self.taps, self.banks = width, depth, taps, nb
        aw = depth.bit_length() - 1
        super().__init__({"w_addr": In(aw), "w_data": In(width), "w_en": In(1),
                          "r_addr": In(aw), "r_en": In(1), "r_data": Out(width),
                          "r_taps": Out(taps * width)})

    def elaborate(self, platform):
        m = Module()
        nb, lb = self.banks, self.banks.bit_length() - 1
        banks = [Scratchpad(self.width, self.depth // nb) for _ in range(nb)]
        for k, bank in enumerate(banks):
            m.submodules[f"bank{k}"] = bank
            off = (k - self.r_addr[:lb])[:lb]       # (k - a) mod P
            m.d.comb += [bank.w_en.eq(self.w_en & (self.w_addr[:lb] == k)),
                         bank.w_addr.eq(self.w_addr[lb:]), bank.w_data.eq(self.w_data),
                         bank.r_en.eq(self.r_en),
                         bank.r_addr.eq((self.r_addr + off)[lb:len(self.r_addr)])]
        rot = Signal(lb, name="r_rot")
        with m.If(self.r_en):
            m.d.sync += rot.eq(self.r_addr[:lb])
        data = Array([b.r_data for b in banks])
        taps = [data[(rot + t)[:lb]] for t in range(self.taps)]
        m.d.comb += [self.r_taps.eq(Cat(*taps)), self.r_data.eq(self.r_taps[:self.width])]
        return m
