"""``VTACore``: the top-level component, generated from a :class:`VTAConfig` alone.

Ports (flat, so Vivado infers the interfaces; hardware-notes.md "Amaranth → Vivado"): clock
``clk``, synchronous active-high ``rst``; the AXI4-Lite slave ``s_axi_*`` (8-bit address,
32-bit data; registers of :mod:`vtaforge.hw.regs`); the AXI4 master ``m_axi_*`` (32-bit
address, ``cfg.BUS_WIDTH`` data); ``irq`` (IRQ_STATUS.DONE & CTRL.IRQ_EN); ``dbg_state``
(32): [3:0] fetch, [7:4] load, [11:8] compute, [15:12] store FSM states, [23:16] low bits of
fetch's instruction index (names in :data:`vtaforge.hw.core.DEBUG_STATE_NAMES`).

Structure: fetch → three command queues → load / compute / store; four token counters; INP
and WGT scratchpads (load writes, compute reads), the OUT view (compute writes, store
reads); UOP and ACC scratchpads live inside compute; one DMA engine owns the AXI master.

A run starts on CTRL.START (ignored while a run is busy): STATUS.DONE drops in the cycle the
write is accepted, the token queues are cleared, and fetch starts.  The run completes when a
FINISH has executed, fetch has dispatched every instruction, every command queue is empty and
every unit is idle; then DONE and IRQ_STATUS.DONE rise and the cycle counter stops.

Scratchpad faults: the first ``err`` pulse of a run from load, compute or store (compute
first, then load, then store within one cycle) is latched as the ERROR / ERR_INSN /
ERR_INDEX registers (:mod:`vtaforge.hw.regs`); from the next cycle every unit sees
``halt`` and writes nothing more, while the program still runs to completion (tokens and
DMA beats move as usual), so DONE rises and the host reads the report.  START clears it.

Streamed execution (only when ``cfg.INSN_RING > 0``; ``hw/regs.py``): a START with
``RING_CTRL.ENABLE`` set opens a ring session: fetch reads the ring as the host rings the
doorbell (``RING_TAIL``), ``FINISH_COUNT`` counts the FINISH instructions executed, and
``RING_IDLE`` the cycles the ring was empty with every unit drained.  The session completes
(DONE) when ENABLE has been cleared and the ring has drained.  Ring faults (``hw/regs.py``):
a START on a misaligned ``RING_BASE`` or with ``RING_TAIL`` past ``RING_SIZE``, a
``RING_TAIL`` write that moves back or runs more than ``RING_SIZE`` ahead of
``RING_HEAD`` (the write is dropped), and a close that leaves a segment without its
FINISH are latched in ERROR like a scratchpad fault; after the first two kinds fetch takes
nothing more from the ring and the session completes without a close.
"""

from __future__ import annotations

from types import SimpleNamespace

from amaranth.hdl import Cat, Const, Module, Mux, Signal
from amaranth.lib import wiring
from amaranth.lib.wiring import Out

from ..config import VTAConfig
from ..isa import Module as Unit
from ..isa import TOKEN_ROUTES, Queue
from ..regs import ErrorKind
from .axi import AXILiteRegs, DMAEngine, axi_lite_members, axi_master_members
from .compute import ComputeState, ComputeUnit
from .fetch import FetchUnit
from .fields import port_name
from .load import LoadState, LoadUnit
from .queues import CommandQueue, TokenQueue
from .scratchpad import BankedScratchpad, Scratchpad, TapScratchpad
from .store import StoreState, StoreUnit

__all__ = ["VTACore"]


class VTACore(wiring.Component):
    """The VTA core for ``cfg`` (see the module docstring for ports and behaviour).

    Raises:
        TypeError: ``cfg`` is not a :class:`VTAConfig`.
    """

    def __init__(self, cfg: VTAConfig):
        if not isinstance(cfg, VTAConfig):
            raise TypeError(f"VTACore needs a VTAConfig, got {type(cfg).__name__}")
        self.cfg = cfg
        members = {}
        members.update(axi_lite_members())
        members.update(axi_master_members(cfg.BUS_WIDTH))
        members["irq"] = Out(1)
        members["dbg_state"] = Out(32)
        super().__init__(members)

    def elaborate(self, platform):
        m = Module()
        c = self._units(m)
        self._command_queues(m, c)
        self._token_queues(m, c)
        self._scratchpads(m, c)
        self._faults(m, c)
        self._run_control(m, c)
        self._counters(m, c)
        m.d.comb += self.dbg_state.eq(Cat(c.fetch.state, c.load.state, c.comp.state,
                                          c.store.state, c.fetch.index[:8], Const(0, 8)))
        return m

    def _units(self, m) -> SimpleNamespace:
        """The register file on the AXI4-Lite slave, the DMA engine on the AXI4 master and
        the four units on the engine's clients; returns the namespace the other blocks
        share (``c``)."""
        cfg = self.cfg
        m.submodules.regs = regs = AXILiteRegs(cfg)
        for name in axi_lite_members():
            a, b = getattr(self, name), getattr(regs, name)
            if name in ("s_axi_awready", "s_axi_wready", "s_axi_bresp", "s_axi_bvalid",
                        "s_axi_arready", "s_axi_rdata", "s_axi_rresp", "s_axi_rvalid"):
                m.d.comb += a.eq(b)
            else:
                m.d.comb += b.eq(a)
        m.d.comb += self.irq.eq(regs.irq)

        m.submodules.dma = dma = DMAEngine(cfg, n_read=3)
        for name, member in axi_master_members(cfg.BUS_WIDTH).items():
            a, b = getattr(self, name), getattr(dma, name)
            if member.flow == Out:
                m.d.comb += a.eq(b)
            else:
                m.d.comb += b.eq(a)

        m.submodules.fetch = fetch = FetchUnit(cfg)
        m.submodules.load = load = LoadUnit(cfg)
        m.submodules.compute = comp = ComputeUnit(cfg)
        m.submodules.store = store = StoreUnit(cfg)
        wiring.connect(m, fetch.dma, dma.rd0)
        wiring.connect(m, comp.dma, dma.rd1)
        wiring.connect(m, load.dma, dma.rd2)
        wiring.connect(m, store.dma, dma.wr)
        return SimpleNamespace(regs=regs, dma=dma, fetch=fetch, load=load, comp=comp,
                               store=store)

    def _command_queues(self, m, c) -> None:
        """The three command queues, fetch to load, compute and store (``qs``)."""
        qs = {}
        for q, unit, qm in (("ld", c.load, "load"), ("gm", c.comp, "compute"),
                            ("st", c.store, "store")):
            mem = self.cfg.memory(f"{qm}_cmd_queue")
            cq = CommandQueue(mem.width, mem.depth)
            m.submodules[f"{q}_queue"] = cq
            qs[q] = cq
            m.d.comb += [cq.w_data.eq(getattr(c.fetch, f"{q}_data")),
                         cq.w_en.eq(getattr(c.fetch, f"{q}_en")),
                         getattr(c.fetch, f"{q}_rdy").eq(cq.w_rdy),
                         unit.cmd.data.eq(cq.r_data), unit.cmd.valid.eq(cq.r_rdy),
                         cq.r_en.eq(unit.cmd.ready)]
        c.qs = qs

    def _token_queues(self, m, c) -> None:
        """The four token queues, each between its producer and its consumer, all cleared
        at ``start`` (the run's start pulse, created here, driven by the run control)."""
        start = Signal()
        tq = {}
        for q in Queue:
            t = TokenQueue(self.cfg.TOKEN_QUEUE_DEPTH)
            m.submodules[f"tok_{q.name.lower()}"] = t
            tq[q] = t
        clear = Signal()
        # each queue between its producer and its consumer (hw/isa.py TOKEN_ROUTES)
        units = {Unit.LOAD: c.load, Unit.COMPUTE: c.comp, Unit.STORE: c.store}
        for q, r in TOKEN_ROUTES.items():
            prod, cons = units[r.producer], units[r.consumer]
            m.d.comb += [tq[q].push.eq(getattr(prod, port_name(r, "push"))),
                         tq[q].pop.eq(getattr(cons, port_name(r, "pop"))),
                         getattr(cons, port_name(r, "nonempty")).eq(tq[q].nonempty),
                         getattr(prod, port_name(r, "has_room")).eq(tq[q].has_room)]
        for t in tq.values():
            m.d.comb += t.clear.eq(clear)
        c.start, c.clear = start, clear

    def _scratchpads(self, m, c) -> None:
        """The scratchpads shared between units: INP and WGT (load writes, compute reads)
        and the OUT view (compute writes, store reads; two banks with ``REQ_ENGINE``)."""
        cfg = self.cfg
        load, comp, store = c.load, c.comp, c.store
        # scratchpads shared between units (their geometry: VTAConfig.memories)
        if cfg.DEPTHWISE_TAPS:  # T consecutive entries per read (docs/hardware.md)
            im = cfg.memory("inp")
            m.submodules.inp_mem = inp = TapScratchpad(im.width, im.depth, cfg.DEPTHWISE_TAPS)
            m.d.comb += comp.inp_r_taps.eq(inp.r_taps)
        else:
            m.submodules.inp_mem = inp = Scratchpad.of(cfg.memory("inp"))
        m.submodules.wgt_mem = wgt = Scratchpad.of(cfg.memory("wgt"))
        if cfg.REQ_ENGINE:  # the OUT view in two banks, like the accumulator (compute.py)
            om = cfg.memory("out")
            m.submodules.out_mem = ob = BankedScratchpad(om.width, om.depth)
            out = SimpleNamespace(w_addr=ob.w0_addr, w_data=ob.w0_data, w_en=ob.w0_en,
                                  r_addr=ob.r0_addr, r_en=ob.r0_en, r_data=ob.r0_data)
            m.d.comb += [ob.w1_addr.eq(comp.out_w1_addr), ob.w1_data.eq(comp.out_w1_data),
                         ob.w1_en.eq(comp.out_w1_en), ob.r1_en.eq(0)]
        else:
            m.submodules.out_mem = out = Scratchpad.of(cfg.memory("out"))
        m.d.comb += [
            inp.w_addr.eq(load.inp_w_addr), inp.w_data.eq(load.inp_w_data), inp.w_en.eq(load.inp_w_en),
            wgt.w_addr.eq(load.wgt_w_addr), wgt.w_data.eq(load.wgt_w_data), wgt.w_en.eq(load.wgt_w_en),
            inp.r_addr.eq(comp.inp_r_addr), inp.r_en.eq(1), comp.inp_r_data.eq(inp.r_data),
            wgt.r_addr.eq(comp.wgt_r_addr), wgt.r_en.eq(1), comp.wgt_r_data.eq(wgt.r_data),
            out.w_addr.eq(comp.out_w_addr), out.w_data.eq(comp.out_w_data), out.w_en.eq(comp.out_w_en),
            out.r_addr.eq(store.out_r_addr), out.r_en.eq(store.out_r_en),
            store.out_r_data.eq(out.r_data),
        ]

    def _faults(self, m, c) -> None:
        """The fault report: the instructions each unit has taken this run (``taken``,
        ERR_INSN counts in these), and the first ``err`` of the run (compute, then load,
        then store; ring faults with ``INSN_RING``) latched into ERROR / ERR_INSN /
        ERR_INDEX, which halts every unit."""
        cfg = self.cfg
        regs, fetch, load, comp, store, start = (c.regs, c.fetch, c.load, c.comp, c.store,
                                                 c.start)
        # instructions each unit has taken this run (ERR_INSN counts in these)
        taken = {}
        for q, unit in (("ld", load), ("gm", comp), ("st", store)):
            n = Signal(32, name=f"taken_{q}")
            with m.If(start):
                m.d.sync += n.eq(0)
            with m.Elif(unit.cmd.ready):
                m.d.sync += n.eq(n + 1)
            taken[q] = n
        m.d.comb += comp.ord_next.eq(taken["gm"])

        # scratchpad faults: the first report of the run is kept
        err_valid = Signal()
        err_unit = Signal(2)
        err_kind = Signal(4)
        err_insn = Signal(32)
        err_index = Signal(32)
        m.d.comb += [load.halt.eq(err_valid), comp.halt.eq(err_valid),
                     store.halt.eq(err_valid),
                     regs.err.eq(Cat(err_valid, err_unit, Const(0, 1), err_kind)),
                     regs.err_insn.eq(err_insn), regs.err_index.eq(err_index)]
        running = Signal()
        complete = Signal()
        ring = None
        if cfg.INSN_RING:
            ring = self._ring_guard(m, regs, fetch, start, running, complete)
        with m.If(start):
            m.d.sync += [err_valid.eq(0), err_unit.eq(0), err_kind.eq(0), err_insn.eq(0),
                         err_index.eq(0)]
            if cfg.INSN_RING:   # a ring session refused at START (nothing is fetched)
                with m.If(ring.bad_start):
                    m.d.sync += [err_valid.eq(1), err_kind.eq(ring.start_kind),
                                 err_index.eq(ring.start_index)]
        with m.Elif(~err_valid):
            with m.If(comp.err):
                m.d.sync += [err_valid.eq(1), err_unit.eq(Unit.COMPUTE),
                             err_kind.eq(comp.err_kind), err_insn.eq(comp.err_ord),
                             err_index.eq(comp.err_index)]
            with m.Elif(load.err):
                m.d.sync += [err_valid.eq(1), err_unit.eq(Unit.LOAD),
                             err_kind.eq(ErrorKind.SRAM), err_insn.eq(taken["ld"] - 1),
                             err_index.eq(load.err_index)]
            with m.Elif(store.err):
                m.d.sync += [err_valid.eq(1), err_unit.eq(Unit.STORE),
                             err_kind.eq(ErrorKind.SRAM), err_insn.eq(taken["st"] - 1),
                             err_index.eq(store.err_index)]
            if cfg.INSN_RING:   # ring faults during the session (unit 0: fetch)
                with m.Elif(ring.bad_write):
                    m.d.sync += [err_valid.eq(1), err_kind.eq(ring.write_kind),
                                 err_insn.eq(ring.tail_ok), err_index.eq(regs.ring_tail)]
                with m.Elif(ring.bad_close):
                    m.d.sync += [err_valid.eq(1), err_kind.eq(ErrorKind.RING_FINISH),
                                 err_insn.eq(ring.finish_count), err_index.eq(fetch.head)]
        vars(c).update(running=running, complete=complete, ring=ring)

    def _drained(self, c, fetch_side):
        """True when ``fetch_side`` holds, every command queue is empty and every unit is
        idle."""
        qs, load, comp, store = c.qs, c.load, c.comp, c.store
        return (fetch_side & (qs["ld"].level == 0) & (qs["gm"].level == 0)
                & (qs["st"].level == 0) & (load.state == LoadState.IDLE)
                & (comp.state == ComputeState.IDLE) & (store.state == StoreState.IDLE)
                & ~load.busy & ~comp.busy & ~store.busy)

    def _run_control(self, m, c) -> None:
        """Run control: START (ignored while running) starts fetch and clears the token
        queues; the run completes when a FINISH has executed and everything has drained
        (with ``INSN_RING``: a ring session, its FINISH count, idle cycles and segment
        barrier); then DONE and the interrupt rise and the cycle counter stops."""
        cfg = self.cfg
        regs, fetch, comp = c.regs, c.fetch, c.comp
        start, running, complete, ring = c.start, c.running, c.complete, c.ring
        done = Signal()
        finished = Signal()
        cycles = Signal(64)
        m.d.comb += [start.eq(regs.start & ~running), c.clear.eq(start),
                     fetch.start.eq(start), fetch.insn_addr.eq(regs.insn_addr[:32]),
                     fetch.insn_count.eq(regs.insn_count),
                     regs.busy.eq(running), regs.done.eq(done), regs.cycles.eq(cycles)]
        if cfg.INSN_RING:
            session = ring.session
            finish_count = ring.finish_count
            ring_idle = Signal(32)
            m.d.comb += [fetch.ring_base.eq(regs.ring_base[:32]),
                         regs.ring_head.eq(fetch.head),
                         regs.finish_count.eq(finish_count), regs.ring_idle.eq(ring_idle)]
            with m.If(start):
                m.d.sync += [session.eq(regs.ring_enable), finish_count.eq(0),
                             ring_idle.eq(0)]
            with m.Elif(comp.finish):
                m.d.sync += finish_count.eq(finish_count + 1)
            # segment barrier (fetch): released once the FINISH executed and all drained
            fin_pending = Signal()
            seg_done = Signal()
            m.d.comb += fetch.seg_done.eq(seg_done)
            with m.If(start | seg_done):
                m.d.sync += fin_pending.eq(0)
            with m.Elif(comp.finish):
                m.d.sync += fin_pending.eq(1)
        with m.If(comp.finish):
            m.d.sync += finished.eq(1)
        drained = Signal()
        m.d.comb += drained.eq(self._drained(c, fetch.idle))
        if cfg.INSN_RING:
            m.d.comb += complete.eq(running & (finished | session) & drained & ~start)
            waiting = Signal()      # the ring is empty and every unit has drained
            m.d.comb += waiting.eq(self._drained(c, fetch.ring_empty))
            with m.If(~start & running & session & waiting):
                m.d.sync += ring_idle.eq(ring_idle + 1)
            m.d.comb += seg_done.eq(self._drained(c, fin_pending))
        else:
            m.d.comb += complete.eq(running & finished & drained & ~start)
        m.d.comb += regs.set_irq.eq(complete)
        with m.If(start):
            m.d.sync += [running.eq(1), done.eq(0), finished.eq(0), cycles.eq(0)]
        with m.Elif(complete):
            m.d.sync += [running.eq(0), done.eq(1)]
        with m.Elif(running):
            m.d.sync += cycles.eq(cycles + 1)

    def _counters(self, m, c) -> None:
        """The performance counters: busy, stall and micro-op events counted while running,
        and the byte counters."""
        regs, fetch, load, comp, store = c.regs, c.fetch, c.load, c.comp, c.store
        start, running = c.start, c.running
        counters = {
            "fetch_busy": fetch.busy, "load_busy": load.busy, "compute_busy": comp.busy,
            "store_busy": store.busy, "load_stall": load.stall, "compute_stall": comp.stall,
            "store_stall": store.stall, "gemm_count": comp.gemm_uop, "alu_count": comp.alu_uop,
        }
        for name, ev in counters.items():
            cnt = Signal(32, name=f"cnt_{name}")
            m.d.comb += getattr(regs, f"cnt_{name}").eq(cnt)
            with m.If(start):
                m.d.sync += cnt.eq(0)
            with m.Elif(running & ev):
                m.d.sync += cnt.eq(cnt + 1)
        # byte counters: the bytes a program moves (instructions and elements read, bytes
        # written with their strobe set), as fsim's dram_read_nbytes/dram_write_nbytes count
        # them; not whole bus beats
        rd_inc = Signal(32)
        m.d.comb += rd_inc.eq(fetch.rd_bytes + load.rd_bytes + comp.rd_bytes)
        for name, inc in (("dma_rd_bytes", rd_inc), ("dma_wr_bytes", c.dma.wr_bytes)):
            cnt = Signal(32, name=f"cnt_{name}")
            m.d.comb += getattr(regs, f"cnt_{name}").eq(cnt)
            with m.If(start):
                m.d.sync += cnt.eq(0)
            with m.Elif(running):
                m.d.sync += cnt.eq(cnt + inc)

    def _ring_guard(self, m, regs, fetch, start, running, complete) -> SimpleNamespace:
        """The ring-register checks (``hw/regs.py`` "Ring faults"; the rule is
        :func:`vtaforge.hw.regs.ring_tail_fault`): fetch sees only the doorbell values that
        pass (``tail_ok``); a bad START or ``RING_TAIL`` write, or a close with a segment
        left open, is reported as a ring fault, after which fetch takes nothing more from
        the ring and the session completes on its own.  Comparators on register writes
        and two 32-bit registers."""
        size = self.cfg.INSN_RING
        r = SimpleNamespace(session=Signal(), finish_count=Signal(32), tail_ok=Signal(32),
                            bad_start=Signal(), start_kind=Signal(4), start_index=Signal(32),
                            bad_write=Signal(), write_kind=Signal(4), bad_close=Signal())
        tail_seen = Signal(32)      # RING_TAIL as last seen: a change is a write
        ring_err = Signal()         # a ring fault this run: fetch stops taking the ring
        ahead = Signal(32)          # new tail - RING_HEAD
        moved = Signal(32)          # new tail - accepted tail
        new = regs.ring_tail
        misaligned = regs.ring_base[:4] != 0
        m.d.comb += [
            ahead.eq(new - fetch.head), moved.eq(new - r.tail_ok),
            r.bad_start.eq(regs.ring_enable & (misaligned | (new > size))),
            r.start_kind.eq(Mux(misaligned, ErrorKind.RING_BASE, ErrorKind.RING_OVERFLOW)),
            r.start_index.eq(Mux(misaligned, regs.ring_base[:32], new)),
            r.bad_write.eq(running & r.session & ~start & ~ring_err & (new != tail_seen)
                           & (moved[31] | (ahead > size))),
            r.write_kind.eq(Mux(moved[31], ErrorKind.RING_REWIND, ErrorKind.RING_OVERFLOW)),
            r.bad_close.eq(complete & r.session & fetch.seg_open),
            fetch.ring_tail.eq(r.tail_ok),
            fetch.ring_enable.eq(regs.ring_enable & (start | ~ring_err)),
        ]
        m.d.sync += tail_seen.eq(new)
        with m.If(start):
            m.d.sync += [r.tail_ok.eq(Mux(r.bad_start, 0, new)), ring_err.eq(r.bad_start)]
        with m.Else():
            with m.If(r.bad_write):
                m.d.sync += ring_err.eq(1)
            with m.Elif(running & r.session & ~ring_err & (new != tail_seen)):
                m.d.sync += r.tail_ok.eq(new)
        return r
