"""The fetch unit: reads ``insn_count`` 16-byte instructions from DRAM and dispatches them in
order to the load, compute and store command queues (module per
:func:`vtaforge.hw.isa.insn_module`).  It stalls while the target queue is full.

Fetch reads up to :data:`FETCH_BATCH` instructions per DMA request into a small local buffer,
and only when the buffer has room for the whole batch, so it never keeps the shared read
channel while waiting for command-queue space (which could deadlock against a unit whose own
loads need that channel).  Dispatch from the buffer overlaps the next read.  The instruction
address must be 16-byte aligned.

Ring mode (only in a core with ``cfg.INSN_RING > 0``; ``hw/regs.py`` "Streamed
execution"): a start with ``ring_enable`` set fetches from the instruction ring instead of
``insn_count`` instructions at ``insn_addr``: while ``head != ring_tail`` it reads from
``ring_base + (head mod INSN_RING) * 16`` (a batch never crosses the end of the ring, so
reads wrap to slot 0), ``head`` counting the instructions read.  With the ring empty it
waits (``RING_WAIT``, not busy); once ``ring_enable`` drops and every instruction read has
been dispatched it returns to IDLE.  Segments do not overlap: after dispatching a FINISH,
fetch dispatches nothing more until ``seg_done`` (that FINISH executed and every unit
drained), so a segment's loads never pass the previous segment's stores (the same order as
one launch after another).  ``seg_open`` is high while the session has dispatched
instructions after its last FINISH (the top level refuses a close then: a ring fault).
"""

from __future__ import annotations

from enum import IntEnum

from amaranth.hdl import Module, Mux, Signal
from amaranth.lib.fifo import SyncFIFOBuffered
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from ..config import MemType, VTAConfig
from ..isa import Opcode
from .axi import ReadClientSignature
from .fields import header_view, insn_field
from .load import TensorLoader

__all__ = ["FetchUnit", "FetchState"]

class FetchState(IntEnum):
    """Fetch FSM encodings (the ``state`` port, for ``dbg_state``).  WAIT_QUEUE: no read in
    flight and the oldest fetched instruction waits for room in its command queue (its
    unit is not taking instructions, e.g. because it waits for a dependency token)."""

    IDLE = 0
    READ = 1
    DRAIN = 2
    NEXT = 3
    WAIT_QUEUE = 4
    RING_WAIT = 5


#: Instructions per fetch DMA request (the local buffer holds two batches).
FETCH_BATCH = 4


class FetchUnit(wiring.Component):
    """Ports: ``start`` (pulse), ``insn_addr`` (32, byte address), ``insn_count`` (32);
    ``dma`` (read client); per queue ``{ld,gm,st}_data`` (128), ``{ld,gm,st}_en``,
    ``{ld,gm,st}_rdy``; ``idle``, ``busy``, ``state`` (4), ``index`` (32, instructions
    dispatched so far), ``rd_bytes`` (32, 16 in a cycle an instruction arrives from DRAM)."""

    def __init__(self, cfg: VTAConfig):
        self.cfg = cfg
        members = {"start": In(1), "insn_addr": In(32), "insn_count": In(32),
                   "dma": Out(ReadClientSignature(cfg.BUS_WIDTH)),
                   "idle": Out(1), "busy": Out(1), "state": Out(4), "index": Out(32),
                   "rd_bytes": Out(32)}
        for q in ("ld", "gm", "st"):
            members[f"{q}_data"] = Out(128)
            members[f"{q}_en"] = Out(1)
            members[f"{q}_rdy"] = In(1)
        if cfg.INSN_RING:
            # ring mode: ring_enable (sampled at start, then "keep going"), ring_base (32,
            # byte address of slot 0), ring_tail (32, instructions appended); head (32,
            # instructions read), ring_empty (nothing to fetch and nothing buffered),
            # seg_open (instructions dispatched since the last FINISH)
            members.update({"ring_enable": In(1), "ring_base": In(32), "ring_tail": In(32),
                            "head": Out(32), "ring_empty": Out(1), "seg_done": In(1),
                            "seg_open": Out(1)})
        super().__init__(members)

    def elaborate(self, platform):
        m = Module()
        cfg = self.cfg
        K = FETCH_BATCH
        m.submodules.reader = rd = TensorLoader(cfg, [128])
        m.submodules.buf = buf = SyncFIFOBuffered(width=128, depth=2 * K)
        wiring.connect(m, wiring.flipped(self.dma), rd.dma)
        base = Signal(28)
        count = Signal(32)
        req_index = Signal(32)
        batch = Signal(range(K + 1))
        if cfg.INSN_RING:
            in_ring = Signal()          # this run is a ring session
        left = Signal(32)
        ring = cfg.INSN_RING
        if ring:
            log_ring = ring.bit_length() - 1
            slot = Signal(log_ring)
            room = Signal(log_ring + 1)  # slots from ``slot`` to the end of the ring
            m.d.comb += [slot.eq(req_index[:log_ring]), room.eq(ring - slot),
                         self.head.eq(req_index),
                         left.eq(Mux(in_ring, self.ring_tail - req_index, count - req_index))]
            m.d.comb += rd.dram_base.eq(base + Mux(in_ring, slot, req_index))
            batch_next = Mux(left < K, left, K)
            batch_next = Mux(in_ring & (room < batch_next), room, batch_next)
            # session over: ring closed, everything read has been dispatched
            at_end = Mux(in_ring, ~self.ring_enable & (self.index == req_index),
                         self.index == count)
            m.d.comb += self.ring_empty.eq(in_ring & (left == 0) & (self.index == req_index))
        else:
            m.d.comb += left.eq(count - req_index)
            batch_next = Mux(left < K, left, K)
            at_end = self.index == count
        m.d.comb += [rd.sel.eq(0)] + ([] if ring else [rd.dram_base.eq(base + req_index)])
        m.d.comb += [rd.x_size.eq(batch), rd.y_size.eq(1), rd.x_stride.eq(K)]
        m.d.comb += [buf.w_data.eq(rd.w_data0), buf.w_en.eq(rd.w_en0),
                     self.rd_bytes.eq(rd.rd_bytes)]

        # dispatch: buffer head -> command queue (runs while the next batch is read)
        insn = buf.r_data
        for q in ("ld", "gm", "st"):
            m.d.comb += getattr(self, f"{q}_data").eq(insn)
        op = header_view(insn).opcode
        mt = insn_field(cfg, insn, "mem", "memory_type")
        to_st = op == Opcode.STORE
        to_ld = (op == Opcode.LOAD) & ((mt == MemType.INP) | (mt == MemType.WGT))
        to_gm = ~to_st & ~to_ld
        sent = Signal()
        if cfg.INSN_RING:
            # segment barrier: nothing is dispatched between a FINISH and its seg_done
            barrier = Signal()
            ok = buf.r_rdy & ~barrier
            with m.If(self.seg_done):
                m.d.sync += barrier.eq(0)
            with m.If(sent & (op == Opcode.FINISH) & in_ring):
                m.d.sync += barrier.eq(1)
            with m.If(sent & in_ring):
                m.d.sync += self.seg_open.eq(op != Opcode.FINISH)
        else:
            ok = buf.r_rdy
        m.d.comb += sent.eq(ok & ((to_ld & self.ld_rdy) | (to_gm & self.gm_rdy)
                                  | (to_st & self.st_rdy)))
        m.d.comb += [self.ld_en.eq(ok & to_ld & self.ld_rdy),
                     self.gm_en.eq(ok & to_gm & self.gm_rdy),
                     self.st_en.eq(ok & to_st & self.st_rdy),
                     buf.r_en.eq(sent)]
        with m.If(sent):
            m.d.sync += self.index.eq(self.index + 1)

        with m.FSM(name="fetch_fsm"):
            with m.State("IDLE"):
                m.d.comb += [self.state.eq(FetchState.IDLE), self.idle.eq(1)]
                with m.If(self.start):
                    first = (Mux(self.ring_enable, self.ring_base[4:], self.insn_addr[4:])
                             if ring else self.insn_addr[4:])
                    m.d.sync += [base.eq(first), count.eq(self.insn_count),
                                 self.index.eq(0), req_index.eq(0)]
                    if ring:
                        m.d.sync += [in_ring.eq(self.ring_enable), self.seg_open.eq(0)]
                    m.next = "NEXT"
            with m.State("NEXT"):
                m.d.comb += [self.state.eq(FetchState.NEXT), self.busy.eq(1)]
                with m.If(left == 0):
                    with m.If(at_end):
                        m.next = "IDLE"
                    with m.Elif(buf.r_rdy & ~sent):
                        m.d.comb += self.state.eq(FetchState.WAIT_QUEUE)
                    if ring:
                        with m.Elif(self.ring_empty):
                            m.d.comb += [self.state.eq(FetchState.RING_WAIT), self.busy.eq(0)]
                    with m.Else():
                        m.d.comb += self.state.eq(FetchState.DRAIN)
                with m.Elif(buf.level <= K):
                    m.d.sync += batch.eq(batch_next)
                    m.next = "START"
                with m.Elif(buf.r_rdy & ~sent):
                    m.d.comb += self.state.eq(FetchState.WAIT_QUEUE)
            with m.State("START"):
                m.d.comb += [self.state.eq(FetchState.READ), self.busy.eq(1), rd.start.eq(1)]
                m.next = "READ"
            with m.State("READ"):
                m.d.comb += [self.state.eq(FetchState.READ), self.busy.eq(1)]
                with m.If(rd.done):
                    m.d.sync += req_index.eq(req_index + batch)
                    m.next = "NEXT"
        return m
