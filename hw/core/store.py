"""The store unit: OUT view rows to DRAM.

A STORE writes ``y_size`` rows of ``x_size`` OUT elements from scratchpad entries
``sram_base ..`` (consecutive) to DRAM; row ``r`` starts at byte
``(dram_base + r × x_stride) × elem_bytes(OUT)`` (DESIGN.md "Semantics", STORE).  The OUT view
holds the low OUT_WIDTH bits of every accumulator lane (written by compute alongside ACC).

Elements narrower than a beat are merged into beats with byte strobes (bytes outside the row
keep their DRAM contents); wider elements are sent as ``elem_bits / BUS_WIDTH`` full beats.
Rows are streamed back to back (one DMA request per row; the engine overlaps the next row's
AW with this row's W beats and does not wait for B in between).  The instruction finishes
when every write response has arrived, so the S2G token is pushed only after the data is in
memory.
"""

from __future__ import annotations

from enum import IntEnum
from types import SimpleNamespace

from amaranth.hdl import Const, Module, Mux, Signal
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from ..config import MemType, VTAConfig
from ..isa import Module as Unit
from ..isa import LIMITS, Opcode
from .axi import WriteClientSignature
from .fields import (header_layout, header_view, insn_field, pop_tokens, push_tokens,
                     token_members, tokens_ready)
from .load import CommandPortSignature

__all__ = ["StoreUnit", "StoreState"]

class StoreState(IntEnum):
    """Store unit FSM encodings (the ``state`` port, for ``dbg_state``).  WAIT_TOKEN: the
    next instruction waits for a token to pop or for room in a token queue it will push
    to.  STREAM: rows are being requested or their elements read and sent; WAIT_B: every
    beat is sent, write responses are outstanding."""

    IDLE = 0
    WAIT_TOKEN = 1
    STREAM = 2
    WAIT_B = 3



class StoreUnit(wiring.Component):
    """Executes STOREs (and store-module NOPs) in order.

    Ports: ``cmd``; tokens ``g2s_nonempty``/``g2s_pop``, ``s2g_has_room``/``s2g_push``;
    OUT view read port ``out_r_addr``/``out_r_en``/``out_r_data``; ``dma`` (write client);
    ``state`` (4, :class:`StoreState`), ``busy``, ``stall``.

    A STORE streams: a row issuer hands one DMA request per row to the engine (the next row's
    request is taken while this row's beats are still being sent), and a two-stage reader
    (R: OUT view read, one element per cycle; P: merge into the beat or send the element's
    beats) keeps the W channel busy.  With ``elem_bits >= BUS_WIDTH`` the bus is the limit
    (``elem_bits / BUS_WIDTH`` cycles per element); narrower elements take one cycle each.
    The instruction completes, and pushes its S2G token in the same cycle, when the engine
    reports every write response received.

    Scratchpad faults: reading an OUT entry past the depth pulses ``err`` with the entry on
    ``err_index`` (32); while ``halt`` (In: the core has faulted) is high every beat goes
    out with a zero strobe, so nothing reaches DRAM but the bus protocol runs to its end.
    """

    def __init__(self, cfg: VTAConfig):
        self.cfg = cfg
        super().__init__({
            "cmd": In(CommandPortSignature()),
            **token_members(Unit.STORE),
            "out_r_addr": Out(cfg.LOG_ACC_DEPTH), "out_r_en": Out(1),
            "out_r_data": In(cfg.elem_bits(MemType.OUT)),
            "dma": Out(WriteClientSignature(cfg.BUS_WIDTH)),
            "state": Out(4), "busy": Out(1), "stall": Out(1),
            "halt": In(1), "err": Out(1), "err_index": Out(32),
        })

    def elaborate(self, platform):
        m = Module()
        cfg = self.cfg
        bw = cfg.BUS_WIDTH
        bb = bw // 8
        eb = cfg.elem_bits(MemType.OUT)
        ebytes = eb // 8
        s = SimpleNamespace(bw=bw, bb=bb, lbb=bb.bit_length() - 1, eb=eb, ebytes=ebytes,
                            leb=ebytes.bit_length() - 1)
        self._issuer(m, s)
        self._reader(m, s)
        if eb < bw:
            self._narrow_beats(m, s)
        else:
            self._wide_beats(m, s)
        self._fsm(m, s)
        return m

    def _issuer(self, m: Module, s) -> None:
        """The row issuer: one DMA request per row left (``i_rows``) at ``i_addr``, its
        beats covering the row's ``x_size`` elements, the address stepping by
        ``row_step`` bytes."""
        lbb, bb, leb = s.lbb, s.bb, s.leb
        hdr = Signal(header_layout())  # the running instruction's header (its pushes)
        x_size = Signal(LIMITS.size_bits)
        row_step = Signal(32)  # bytes between row starts
        # row issuer
        i_rows = Signal(LIMITS.size_bits)
        i_addr = Signal(32)
        m.d.comb += [self.dma.req_addr.eq(i_addr),
                     self.dma.req_beats.eq(
                         (i_addr[:lbb] + (x_size << leb) + (bb - 1)) >> lbb),
                     self.dma.req_valid.eq(i_rows != 0)]
        with m.If(self.dma.req_valid & self.dma.req_ready):
            m.d.sync += [i_rows.eq(i_rows - 1), i_addr.eq(i_addr + row_step)]
        vars(s).update(hdr=hdr, x_size=x_size, row_step=row_step, i_rows=i_rows,
                       i_addr=i_addr)

    def _reader(self, m: Module, s) -> None:
        """The reader's stage R: reads the next OUT entry (``raddr``, checked against the
        depth: ``err``) whenever stage P is free (``p_adv``), counting the rows and the
        row's elements left."""
        cfg = self.cfg
        # reader, stage R (address) and stage P (data)
        p_rows = Signal(LIMITS.size_bits)  # rows whose elements are not all read
        p_ecnt = Signal(LIMITS.size_bits)  # elements of the current row not yet read
        raddr = Signal(17)  # never wraps before it passes the depth (sram_base: 16 bits)
        p_valid = Signal()
        p_adv = Signal()       # stage P is free or frees up this cycle
        rd_go = Signal()
        m.d.comb += [rd_go.eq((p_rows != 0) & p_adv),
                     self.out_r_addr.eq(raddr[:cfg.LOG_ACC_DEPTH]), self.out_r_en.eq(rd_go),
                     self.err.eq(rd_go & (raddr >= cfg.ACC_DEPTH) & ~self.halt),
                     self.err_index.eq(raddr)]
        with m.If(rd_go):
            m.d.sync += [raddr.eq(raddr + 1), p_valid.eq(1)]
            with m.If(p_ecnt == 1):
                m.d.sync += [p_rows.eq(p_rows - 1), p_ecnt.eq(s.x_size)]
            with m.Else():
                m.d.sync += p_ecnt.eq(p_ecnt - 1)
        with m.Elif(p_adv):
            m.d.sync += p_valid.eq(0)
        vars(s).update(p_rows=p_rows, p_ecnt=p_ecnt, raddr=raddr, p_valid=p_valid,
                       p_adv=p_adv, rd_go=rd_go)

    def _narrow_beats(self, m: Module, s) -> None:
        """Stage P for elements narrower than a beat: each element merged into the beat
        buffer at its lane with its byte strobes; the beat goes out when the element ends
        it (its last lane, or the row's last element); a row's first lane follows its
        byte address."""
        bw, bb, lbb, eb, ebytes, leb = s.bw, s.bb, s.lbb, s.eb, s.ebytes, s.leb
        p_valid, p_adv, p_ecnt = s.p_valid, s.p_adv, s.p_ecnt
        epb = bw // eb
        lane = Signal(range(epb))     # lane of the element read next
        p_lane = Signal(range(epb))
        p_bend = Signal()             # the element in P ends its beat
        row_lane = Signal(lbb)        # byte offset in the beat of the next row's start
        row_lane_step = Signal(lbb)
        wbuf = Signal(bw)
        wstrb = Signal(bb)
        mbuf = Signal(bw)
        mstrb = Signal(bb)
        m.d.comb += [mbuf.eq(wbuf), mstrb.eq(wstrb)]
        for ln in range(epb):
            with m.If(p_lane == ln):
                m.d.comb += [mbuf.word_select(ln, eb).eq(self.out_r_data),
                             mstrb.word_select(ln, ebytes).eq((1 << ebytes) - 1)]
        m.d.comb += [self.dma.data.eq(mbuf), self.dma.strb.eq(Mux(self.halt, 0, mstrb)),
                     self.dma.data_valid.eq(p_valid & p_bend),
                     p_adv.eq(~p_valid | ~p_bend | self.dma.data_ready)]
        with m.If(p_valid & p_adv):
            m.d.sync += [wbuf.eq(Mux(p_bend, 0, mbuf)), wstrb.eq(Mux(p_bend, 0, mstrb))]
        with m.If(s.rd_go):
            m.d.sync += [p_lane.eq(lane), p_bend.eq((lane == epb - 1) | (p_ecnt == 1))]
            with m.If(p_ecnt == 1):
                nxt = Signal(lbb)
                m.d.comb += nxt.eq(row_lane + row_lane_step)
                m.d.sync += [row_lane.eq(nxt), lane.eq(nxt[leb:lbb])]
            with m.Else():
                m.d.sync += lane.eq(lane + 1)
        vars(s).update(lane=lane, row_lane=row_lane, row_lane_step=row_lane_step, wbuf=wbuf,
                       wstrb=wstrb)

    def _wide_beats(self, m: Module, s) -> None:
        """Stage P for elements of a beat or wider: the element's ``elem_bits /
        BUS_WIDTH`` beats sent in order (``bc``), all strobes set."""
        bw, bb = s.bw, s.bb
        bpe = s.eb // bw
        bc = Signal(range(max(2, bpe)))
        last_beat = (bc == bpe - 1) if bpe > 1 else Const(1, 1)
        m.d.comb += [self.dma.data.eq(self.out_r_data.word_select(bc, bw)
                                      if bpe > 1 else self.out_r_data),
                     self.dma.strb.eq(Mux(self.halt, 0, (1 << bb) - 1)),
                     self.dma.data_valid.eq(s.p_valid),
                     s.p_adv.eq(~s.p_valid | (self.dma.data_ready & last_beat))]
        if bpe > 1:
            with m.If(s.p_valid & self.dma.data_ready):
                m.d.sync += bc.eq(Mux(last_beat, 0, bc + 1))
        vars(s).update(bpe=bpe, bc=bc)

    def _fsm(self, m: Module, s) -> None:
        """The instruction FSM (:class:`StoreState`): takes an instruction when its tokens
        are ready and starts the issuer and the reader on it (nothing to stream for a NOP
        or an empty STORE), then pushes its tokens once every row has been sent and every
        write response has arrived."""
        cfg = self.cfg
        lbb, leb = s.lbb, s.leb
        head = self.cmd.data

        def hf(name):
            return insn_field(cfg, head, "mem", name)

        hh = header_view(head)
        streaming = (s.i_rows != 0) | (s.p_rows != 0) | s.p_valid
        with m.FSM(name="store_fsm"):
            with m.State("IDLE"):
                m.d.comb += self.state.eq(StoreState.IDLE)
                with m.If(self.cmd.valid):
                    with m.If(tokens_ready(self, Unit.STORE, hh)):
                        m.d.comb += [self.cmd.ready.eq(1), *pop_tokens(self, Unit.STORE, hh)]
                        run = (hh.opcode == Opcode.STORE) & (hf("x_size") != 0)
                        base = Signal(32)
                        m.d.comb += base.eq(hf("dram_base") << leb)
                        m.d.sync += [s.hdr.eq(hh), s.x_size.eq(hf("x_size")),
                                     s.row_step.eq(hf("x_stride") << leb),
                                     s.i_addr.eq(base), s.raddr.eq(hf("sram_base")),
                                     s.p_ecnt.eq(hf("x_size")),
                                     s.i_rows.eq(Mux(run, hf("y_size"), 0)),
                                     s.p_rows.eq(Mux(run, hf("y_size"), 0))]
                        if s.eb < s.bw:
                            step_lo = Signal(32)
                            m.d.comb += step_lo.eq(hf("x_stride") << leb)
                            m.d.sync += [s.row_lane.eq(base[:lbb]), s.lane.eq(base[leb:lbb]),
                                         s.row_lane_step.eq(step_lo[:lbb]),
                                         s.wbuf.eq(0), s.wstrb.eq(0)]
                        else:
                            if s.bpe > 1:
                                m.d.sync += s.bc.eq(0)
                        m.next = "RUN"
                    with m.Else():
                        m.d.comb += [self.stall.eq(1), self.state.eq(StoreState.WAIT_TOKEN)]
            with m.State("RUN"):
                m.d.comb += [self.state.eq(Mux(streaming, StoreState.STREAM, StoreState.WAIT_B)), self.busy.eq(1)]
                with m.If(~streaming & self.dma.idle):
                    m.d.comb += push_tokens(self, Unit.STORE, s.hdr)
                    m.next = "IDLE"
