"""The store unit: OUT view rows to DRAM.

A STORE writes ``y_size`` rows of ``x_size`` OUT elements from scratchpad entries
``sram_base ..`` (consecutive) to DRAM; row ``r`` starts at byte
``(dram_base + r × x_stride) × elem_bytes(OUT)`` (DESIGN.md "Semantics", STORE).  The OUT view
holds the low OUT_WIDTH bits of every accumulator lane (written by compute alongside ACC).

Elements narrower than a beat are merged into beats with byte strobes (bytes outside the row
keep their DRAM contents); wider elements are sent as ``elem_bits / BUS_WIDTH`` full beats.
A row is finished when its last write response has arrived, so the S2G token is pushed only
after the data is in memory.
"""

from __future__ import annotations

from amaranth.hdl import Cat, Const, Module, Mux, Signal
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from ..config import MemType, VTAConfig
from ..isa import Opcode
from .axi import WriteClientSignature
from .load import CommandPortSignature, insn_field

__all__ = ["StoreUnit", "STORE_STATES"]

#: Store unit FSM encodings (for ``dbg_state``).  WAIT_TOKEN: the next instruction waits for a
#: token to pop or for room in a token queue it will push to.
STORE_STATES = {0: "IDLE", 1: "WAIT_TOKEN", 2: "START", 3: "ROW", 4: "READ", 5: "PLACE",
                6: "SEND", 7: "WAIT_B", 8: "PUSH"}


class StoreUnit(wiring.Component):
    """Executes STOREs (and store-module NOPs) in order.

    Ports: ``cmd``; tokens ``g2s_nonempty``/``g2s_pop``, ``s2g_has_room``/``s2g_push``;
    OUT view read port ``out_r_addr``/``out_r_en``/``out_r_data``; ``dma`` (write client);
    ``state`` (4, :data:`STORE_STATES`), ``busy``, ``stall``.
    """

    def __init__(self, cfg: VTAConfig):
        self.cfg = cfg
        super().__init__({
            "cmd": In(CommandPortSignature()),
            "g2s_nonempty": In(1), "g2s_pop": Out(1), "s2g_has_room": In(1), "s2g_push": Out(1),
            "out_r_addr": Out(cfg.LOG_ACC_DEPTH), "out_r_en": Out(1),
            "out_r_data": In(cfg.elem_bits(MemType.OUT)),
            "dma": Out(WriteClientSignature(cfg.BUS_WIDTH)),
            "state": Out(4), "busy": Out(1), "stall": Out(1),
        })

    def elaborate(self, platform):
        m = Module()
        cfg = self.cfg
        bw = cfg.BUS_WIDTH
        bb = bw // 8
        lbb = bb.bit_length() - 1
        eb = cfg.elem_bits(MemType.OUT)
        ebytes = eb // 8
        leb = ebytes.bit_length() - 1

        insn = Signal(128)
        head = self.cmd.data

        def f(name):
            return insn_field(cfg, insn, "mem", name)

        row_addr = Signal(32)
        row_step = Signal(32)
        rows = Signal(16)
        ecnt = Signal(16)
        raddr = Signal(16)
        m.d.comb += [self.out_r_addr.eq(raddr), self.dma.req_addr.eq(row_addr),
                     self.dma.req_beats.eq(
                         (row_addr[:lbb] + (f("x_size") << leb) + (bb - 1)) >> lbb)]

        wbuf = Signal(bw)
        wstrb = Signal(bb)
        m.d.comb += [self.dma.data.eq(wbuf), self.dma.strb.eq(wstrb)]
        if eb < bw:
            epb = bw // eb
            lane = Signal(range(epb))
        else:
            bpe = eb // bw
            ereg = Signal(eb)
            bc = Signal(range(max(2, bpe)))

        with m.FSM(name="store_fsm"):
            with m.State("IDLE"):
                m.d.comb += self.state.eq(0)
                with m.If(self.cmd.valid):
                    ok = (~head[3] | self.g2s_nonempty) & (~head[5] | self.s2g_has_room)
                    with m.If(ok):
                        m.d.comb += [self.cmd.ready.eq(1), self.g2s_pop.eq(head[3])]
                        m.d.sync += insn.eq(head)
                        m.next = "START"
                    with m.Else():
                        m.d.comb += [self.stall.eq(1), self.state.eq(1)]  # WAIT_TOKEN
            with m.State("START"):
                m.d.comb += [self.state.eq(2), self.busy.eq(1)]
                m.d.sync += [row_addr.eq(f("dram_base") << leb),
                             row_step.eq(f("x_stride") << leb),
                             rows.eq(f("y_size")), raddr.eq(f("sram_base"))]
                with m.If((insn[:3] == Opcode.STORE) & (f("x_size") != 0)):
                    m.next = "ROW"
                with m.Else():
                    m.next = "PUSH"
            with m.State("ROW"):
                m.d.comb += [self.state.eq(3), self.busy.eq(1)]
                with m.If(rows == 0):
                    m.next = "PUSH"
                with m.Else():
                    m.d.comb += self.dma.req_valid.eq(1)
                    with m.If(self.dma.req_ready):
                        m.d.sync += [ecnt.eq(f("x_size")), wstrb.eq(0), wbuf.eq(0)]
                        if eb < bw:
                            m.d.sync += lane.eq(row_addr[leb:lbb])
                        else:
                            m.d.sync += bc.eq(0)
                        m.next = "READ"
            with m.State("READ"):
                m.d.comb += [self.state.eq(4), self.busy.eq(1), self.out_r_en.eq(1)]
                m.d.sync += raddr.eq(raddr + 1)
                m.next = "PLACE"
            with m.State("PLACE"):
                m.d.comb += [self.state.eq(5), self.busy.eq(1)]
                if eb < bw:
                    for ln in range(epb):
                        with m.If(lane == ln):
                            m.d.sync += [wbuf.word_select(ln, eb).eq(self.out_r_data),
                                         wstrb.word_select(ln, ebytes).eq((1 << ebytes) - 1)]
                    with m.If((lane == epb - 1) | (ecnt == 1)):
                        m.next = "SEND"
                    with m.Else():
                        m.d.sync += [lane.eq(lane + 1), ecnt.eq(ecnt - 1)]
                        m.next = "READ"
                else:
                    m.d.sync += [ereg.eq(self.out_r_data), bc.eq(0)]
                    m.next = "SEND"
            with m.State("SEND"):
                m.d.comb += [self.state.eq(6), self.busy.eq(1)]
                if eb < bw:
                    m.d.comb += self.dma.data_valid.eq(1)
                    with m.If(self.dma.data_ready):
                        m.d.sync += [wstrb.eq(0), wbuf.eq(0), lane.eq(0), ecnt.eq(ecnt - 1)]
                        with m.If(ecnt == 1):
                            m.next = "WAIT_B"
                        with m.Else():
                            m.next = "READ"
                else:
                    m.d.comb += [self.dma.data.eq(ereg.word_select(bc, bw)),
                                 self.dma.strb.eq((1 << bb) - 1), self.dma.data_valid.eq(1)]
                    with m.If(self.dma.data_ready):
                        m.d.sync += bc.eq(bc + 1)
                        with m.If(bc == bpe - 1):
                            m.d.sync += ecnt.eq(ecnt - 1)
                            with m.If(ecnt == 1):
                                m.next = "WAIT_B"
                            with m.Else():
                                m.next = "READ"
            with m.State("WAIT_B"):
                m.d.comb += [self.state.eq(7), self.busy.eq(1)]
                with m.If(self.dma.done):
                    m.d.sync += [rows.eq(rows - 1), row_addr.eq(row_addr + row_step),
                                 raddr.eq(raddr)]
                    m.next = "ROW"
            with m.State("PUSH"):
                m.d.comb += [self.state.eq(8), self.busy.eq(1), self.s2g_push.eq(insn[5])]
                m.next = "IDLE"
        return m
