"""The load unit and the tensor loader it shares with compute.

:class:`TensorLoader` executes the data movement of one LOAD instruction (DESIGN.md
"Semantics", LOAD): ``y_pad_0`` rows of zeros, then ``y_size`` rows of ``x_pad_0`` zeros,
``x_size`` elements from DRAM and ``x_pad_1`` zeros, then ``y_pad_1`` rows of zeros, written
to consecutive scratchpad entries from ``sram_base``.  Row ``r`` comes from byte address
``(dram_base + r × x_stride) × elem_bytes``.  One element is written per cycle.

Elements narrower than a bus beat are picked out of each beat by lane; wider elements are
assembled from ``elem_bits / BUS_WIDTH`` consecutive beats (first beat = lowest bytes).

:class:`LoadUnit` runs INP and WGT loads from its command queue, with the dependency-token
protocol (pop G2L before, push L2G after); on a ``LOAD_AHEAD`` core it hands the next LOAD
to the loader while the current one's data arrives (docs/hardware.md "DMA").
"""

from __future__ import annotations

from enum import IntEnum
from types import SimpleNamespace

from amaranth.hdl import Cat, Module, Mux, Signal
from amaranth.lib import wiring
from amaranth.lib.memory import Memory
from amaranth.lib.wiring import In, Out

from ..config import MemType, VTAConfig
from ..isa import Module as Unit
from ..isa import LIMITS, Opcode
from .axi import ReadClientSignature
from ..isa import module_tokens
from .fields import (header_view, insn_field, pop_tokens, push_tokens, pushes_any,
                     token_members, tokens_ready)

__all__ = ["TensorLoader", "LoadUnit", "insn_field", "LoadState"]


def _comb_read(m, mem, k):
    """Entry ``k`` of ``mem`` through an asynchronous read port (a constant address)."""
    rp = mem.read_port(domain="comb")
    m.d.comb += rp.addr.eq(k)
    return rp.data


class LoadState(IntEnum):
    """Load unit FSM encodings (the ``state`` port, for ``dbg_state``).  WAIT_TOKEN: the
    next instruction is at the head of the command queue but waits for a token to pop or
    for room to push one."""

    IDLE = 0
    WAIT_TOKEN = 1
    EXEC = 2
    PUSH = 3



MEM_FIELDS = ("memory_type", "sram_base", "dram_base", "y_size", "x_size", "x_stride",
              "y_pad_0", "y_pad_1", "x_pad_0", "x_pad_1")


class TensorLoader(wiring.Component):
    """Padded 2-D DMA from DRAM into one of several scratchpads.

    Args:
        cfg: the core's config.
        elems: element widths in bits of the memories this loader serves, in ``sel`` order.
        depths: the entries of each memory, in ``sel`` order (the ``oob`` check), or None.
        ahead: take one LOAD more while busy (below).

    Raises:
        ValueError: ``depths`` not one per memory, or ``ahead`` on a core with
            ``DMA_OUTSTANDING`` = 1.

    Ports: ``start`` (pulse) with the LOAD fields (``sel`` chooses the memory, ``sram_base``,
    ``dram_base``, ``y_size``, ``x_size``, ``x_stride``, ``y_pad_0``, ``y_pad_1``, ``x_pad_0``,
    ``x_pad_1``); ``busy``; ``done`` (pulse); ``dma`` (a read client); ``w_addr`` (16) and per
    memory ``w_en{i}``, ``w_data{i}`` (zero for padding); ``rd_bytes`` (32): bytes of the
    element received from DRAM this cycle (0 for padding and idle cycles), for the
    DMA_RD_BYTES counter, which counts the bytes a program asked for, as fsim's
    ``dram_read_nbytes`` does, not whole bus beats.

    With ``depths`` (the entries of each memory, in ``sel`` order) every write is checked:
    a write at an address ``>= depth`` is dropped and pulses ``oob`` with the address on
    ``oob_addr`` (17 bits: the address counter never wraps before it passes any depth).
    While ``halt`` is high no write is made.  The data movement itself (DMA beats, the
    ``done`` pulse) is unchanged either way.

    With ``ahead`` (needs ``DMA_OUTSTANDING`` > 1; the load unit's loader on a
    ``LOAD_AHEAD`` core) the loader takes one LOAD more while busy: ``ready`` (Out) is high
    when ``start`` is taken, i.e. when idle, or when busy with no LOAD queued and every row
    request of the current LOAD made.  A LOAD taken while busy is queued (its fields
    latched); its row requests go out behind the current's at once, sharing the window
    of ``DMA_OUTSTANDING`` rows, and its writes start after the current's last write (the
    current's ``done`` pulse), so data is written in order.  ``done`` pulses once per
    LOAD, in order.
    """

    def __init__(self, cfg: VTAConfig, elems: list[int], depths: list[int] | None = None,
                 ahead: bool = False):
        self.cfg = cfg
        self.ahead = bool(ahead)
        if self.ahead and cfg.DMA_OUTSTANDING < 2:
            raise ValueError("TensorLoader: ahead needs DMA_OUTSTANDING > 1")
        self.elems = list(elems)
        self.depths = list(depths) if depths is not None else None
        if self.depths is not None and len(self.depths) != len(self.elems):
            raise ValueError(f"TensorLoader: {len(self.depths)} depths for "
                             f"{len(self.elems)} memories")
        members = {
            "start": In(1), "sel": In(range(max(2, len(elems)))),
            "sram_base": In(LIMITS.sram_base_bits), "dram_base": In(LIMITS.dram_base_bits),
            "y_size": In(LIMITS.size_bits), "x_size": In(LIMITS.size_bits),
            "x_stride": In(LIMITS.stride_bits),
            **{p: In(LIMITS.pad_bits) for p in ("y_pad_0", "y_pad_1", "x_pad_0", "x_pad_1")},
            "busy": Out(1), "done": Out(1),
            "dma": Out(ReadClientSignature(cfg.BUS_WIDTH)), "w_addr": Out(16),
            "rd_bytes": Out(32),
            "halt": In(1), "oob": Out(1), "oob_addr": Out(17),
        }
        if self.ahead:
            members["ready"] = Out(1)
        for i, eb in enumerate(elems):
            members[f"w_en{i}"] = Out(1)
            members[f"w_data{i}"] = Out(eb)
        super().__init__(members)

    def elaborate(self, platform):
        m = Module()
        cfg = self.cfg
        bw = cfg.BUS_WIDTH
        bb = bw // 8
        lbb = bb.bit_length() - 1
        r = self._registers(m)
        self._scaling(m, r)
        self._write_path(m, r)

        # element extraction per memory
        in_data = Signal()
        lane_init = Signal()  # load lane/beat counters at request time
        self._extract(m, r.sel, r.row_addr, in_data, lane_init, r.zero_write, r.elem_valid,
                      r.elem_last)

        n_out = cfg.DMA_OUTSTANDING
        if n_out == 1:
            m.d.comb += [self.dma.req_addr.eq(r.row_addr),
                         self.dma.req_beats.eq((r.row_addr[:lbb] + r.nbytes + (bb - 1)) >> lbb)]
            ahead = None
        else:
            ahead = self._row_requests(m, n_out, r, lbb, bb, r.elem_valid & r.elem_last)
        self._fsm(m, r, in_data, lane_init, ahead)
        return m

    def _leb_of(self, i: int) -> int:
        """log2 of memory ``i``'s element size in bytes."""
        return (self.elems[i] // 8).bit_length() - 1

    def _registers(self, m: Module) -> SimpleNamespace:
        """The LOAD's fields latched at ``start`` and the FSM's counters (``zc`` zeros,
        ``ecnt`` elements of the row, ``waddr`` the next write address, 17 bits)."""
        sel = Signal.like(self.sel)
        y_size = Signal(LIMITS.size_bits)
        x_size = Signal(LIMITS.size_bits)
        x_pad_0 = Signal(LIMITS.pad_bits)
        x_pad_1 = Signal(LIMITS.pad_bits)
        ytop = Signal(LIMITS.pad_bits)
        ybot = Signal(LIMITS.pad_bits)
        width = Signal(18)
        row_addr = Signal(32)
        row_step = Signal(32)
        rows = Signal(LIMITS.size_bits)
        zc = Signal(18)
        ecnt = Signal(LIMITS.size_bits)
        waddr = Signal(17)
        m.d.comb += self.w_addr.eq(waddr[:16])
        return SimpleNamespace(sel=sel, y_size=y_size, x_size=x_size, x_pad_0=x_pad_0,
                               x_pad_1=x_pad_1, ytop=ytop, ybot=ybot, width=width,
                               row_addr=row_addr, row_step=row_step, rows=rows, zc=zc,
                               ecnt=ecnt, waddr=waddr)

    def _scaling(self, m: Module, r) -> None:
        """Per-memory address scaling, elements to bytes: the first row's and the row
        step's byte addresses of the LOAD at the ports (``base_bytes``, ``step_bytes``) and
        the latched row's length (``nbytes``)."""
        base_bytes = Signal(32)
        step_bytes = Signal(32)
        for i in range(len(self.elems)):
            with m.If(self.sel == i):
                m.d.comb += [base_bytes.eq(self.dram_base << self._leb_of(i)),
                             step_bytes.eq(self.x_stride << self._leb_of(i))]
        nbytes = Signal(32)
        for i in range(len(self.elems)):
            with m.If(r.sel == i):
                m.d.comb += nbytes.eq(r.x_size << self._leb_of(i))
        vars(r).update(base_bytes=base_bytes, step_bytes=step_bytes, nbytes=nbytes)
        if self.ahead:
            # the row length of the LOAD at the ports, for its requests (made while the
            # data side may still be on the LOAD before it)
            port_nbytes = Signal(32)
            for i in range(len(self.elems)):
                with m.If(self.sel == i):
                    m.d.comb += port_nbytes.eq(self.x_size << self._leb_of(i))
            r.port_nbytes = port_nbytes

    def _write_path(self, m: Module, r) -> None:
        """The scratchpad write: one element (``elem_valid``) or padding zero
        (``zero_write``) per cycle at ``waddr``, checked against the memory's depth
        (``oob``), and the ``rd_bytes`` count of the DRAM elements written."""
        sel, waddr = r.sel, r.waddr
        zero_write = Signal()
        elem_valid = Signal()
        elem_last = Signal()
        m.d.comb += elem_last.eq(r.ecnt == 1)
        writing = Signal()
        m.d.comb += writing.eq(zero_write | elem_valid)
        blocked = Signal()
        if self.depths is not None:
            for i, d in enumerate(self.depths):
                with m.If((sel == i) & (waddr >= d)):
                    m.d.comb += blocked.eq(1)
            m.d.comb += [self.oob.eq(writing & blocked & ~self.halt),
                         self.oob_addr.eq(waddr)]
        for i in range(len(self.elems)):
            m.d.comb += getattr(self, f"w_en{i}").eq(writing & (sel == i) & ~blocked
                                                     & ~self.halt)
        with m.If(zero_write | elem_valid):
            m.d.sync += waddr.eq(waddr + 1)
        for i, eb in enumerate(self.elems):
            with m.If(elem_valid & (sel == i)):
                m.d.comb += self.rd_bytes.eq(eb // 8)
        vars(r).update(zero_write=zero_write, elem_valid=elem_valid, elem_last=elem_last)

    def _fsm(self, m: Module, r, in_data, lane_init, ahead) -> None:
        """The row FSM: ``y_pad_0`` rows of zeros (TOP/TOPZ), then per row ``x_pad_0``
        zeros (LZ), the DRAM request (REQ, only with one request at a time: ``ahead`` is
        None), ``x_size`` elements (DATA) and ``x_pad_1`` zeros (RZ), then ``y_pad_1`` rows
        of zeros (BOT/BOTZ) and ``done``."""
        zc, ecnt, ytop, ybot, rows = r.zc, r.ecnt, r.ytop, r.ybot, r.rows
        zero_write = r.zero_write
        data_regs = [r.sel, r.y_size, r.x_size, r.x_pad_0, r.x_pad_1, ytop, ybot, r.width,
                     r.row_addr, r.row_step, rows, r.waddr]
        port_vals = [self.sel, self.y_size, self.x_size, self.x_pad_0, self.x_pad_1,
                     self.y_pad_0, self.y_pad_1, self.x_pad_0 + self.x_size + self.x_pad_1,
                     r.base_bytes, r.step_bytes, self.y_size, self.sram_base]
        if self.ahead:
            # the queued LOAD's fields, latched when it is taken while busy
            queued = Signal()
            q_regs = [Signal.like(d, name=f"nx_{i}") for i, d in enumerate(data_regs)]
            with m.If(self.start & self.busy & ~self.done):
                m.d.sync += [q.eq(v) for q, v in zip(q_regs, port_vals)]
                m.d.sync += queued.eq(1)
            m.d.comb += r.queued_any.eq(queued)
        with m.FSM(name="ld_fsm"):
            with m.State("IDLE"):
                with m.If(self.start):
                    m.d.sync += [d.eq(v) for d, v in zip(data_regs, port_vals)]
                    m.next = "TOP"
            with m.State("TOP"):
                m.d.comb += self.busy.eq(1)
                m.d.sync += zc.eq(r.width)
                with m.If(ytop == 0):
                    m.next = "ROW"
                with m.Else():
                    m.next = "TOPZ"
            with m.State("TOPZ"):
                m.d.comb += [self.busy.eq(1), zero_write.eq(1)]
                m.d.sync += zc.eq(zc - 1)
                with m.If(zc == 1):
                    m.d.sync += ytop.eq(ytop - 1)
                    m.next = "TOP"
            with m.State("ROW"):
                m.d.comb += self.busy.eq(1)
                m.d.sync += zc.eq(r.x_pad_0)
                with m.If(rows == 0):
                    m.next = "BOT"
                with m.Else():
                    m.next = "LZ"
            with m.State("LZ"):
                m.d.comb += self.busy.eq(1)
                with m.If(zc == 0):
                    if ahead is None:
                        m.next = "REQ"
                    else:
                        # the row's request is made by _row_requests, ahead of its data
                        m.d.comb += lane_init.eq(1)
                        m.d.sync += ecnt.eq(r.x_size)
                        m.next = "DATA"
                with m.Else():
                    m.d.comb += zero_write.eq(1)
                    m.d.sync += zc.eq(zc - 1)
            if ahead is None:
                with m.State("REQ"):
                    m.d.comb += [self.busy.eq(1), self.dma.req_valid.eq(1)]
                    with m.If(self.dma.req_ready):
                        m.d.comb += lane_init.eq(1)
                        m.d.sync += ecnt.eq(r.x_size)
                        m.next = "DATA"
            with m.State("DATA"):
                m.d.comb += [self.busy.eq(1), in_data.eq(1)]
                with m.If(r.elem_valid):
                    m.d.sync += ecnt.eq(ecnt - 1)
                    with m.If(r.elem_last):
                        m.d.sync += [zc.eq(r.x_pad_1), rows.eq(rows - 1),
                                     r.row_addr.eq(r.row_addr + r.row_step)]
                        m.next = "RZ"
            with m.State("RZ"):
                m.d.comb += self.busy.eq(1)
                with m.If(zc == 0):
                    m.next = "ROW"
                with m.Else():
                    m.d.comb += zero_write.eq(1)
                    m.d.sync += zc.eq(zc - 1)
            with m.State("BOT"):
                m.d.comb += self.busy.eq(1)
                m.d.sync += zc.eq(r.width)
                with m.If(ybot == 0):
                    m.d.comb += self.done.eq(1)
                    m.next = "IDLE"
                    if self.ahead:
                        # the next LOAD's writes follow at once: the queued one, or one
                        # taken in this cycle
                        with m.If(queued):
                            m.d.sync += [d.eq(q) for d, q in zip(data_regs, q_regs)]
                            m.d.sync += queued.eq(0)
                            m.next = "TOP"
                        with m.Elif(self.start):
                            m.d.sync += [d.eq(v) for d, v in zip(data_regs, port_vals)]
                            m.next = "TOP"
                with m.Else():
                    m.next = "BOTZ"
            with m.State("BOTZ"):
                m.d.comb += [self.busy.eq(1), zero_write.eq(1)]
                m.d.sync += zc.eq(zc - 1)
                with m.If(zc == 1):
                    m.d.sync += ybot.eq(ybot - 1)
                    m.next = "BOT"

    def _extract(self, m: Module, sel, row_addr, in_data, lane_init, zero_write, elem_valid,
                 elem_last) -> None:
        """Element extraction per memory: ``data_ready``, ``elem_valid`` and ``w_data{i}``
        from the DMA beats (lanes of a beat for narrow elements, consecutive beats for wide
        ones), the lane/beat counters loaded at ``lane_init`` from ``row_addr``."""
        bw = self.cfg.BUS_WIDTH
        lbb = (bw // 8).bit_length() - 1
        for i, eb in enumerate(self.elems):
            wd = getattr(self, f"w_data{i}")
            active = Signal(name=f"active{i}")
            m.d.comb += active.eq(in_data & (sel == i))
            if eb < bw:
                epb = bw // eb
                lane = Signal(range(epb), name=f"lane{i}")
                with m.If(lane_init & (sel == i)):
                    m.d.sync += lane.eq(row_addr[self._leb_of(i):lbb])
                with m.If(active):
                    m.d.comb += [self.dma.data_ready.eq((lane == epb - 1) | elem_last),
                                 elem_valid.eq(self.dma.data_valid)]
                    with m.If(self.dma.data_valid):
                        m.d.sync += lane.eq(lane + 1)
                with m.If(~zero_write):
                    m.d.comb += wd.eq(self.dma.data.word_select(lane, eb))
            else:
                bpe = eb // bw
                if bpe == 1:
                    with m.If(active):
                        m.d.comb += [self.dma.data_ready.eq(1), elem_valid.eq(self.dma.data_valid)]
                    with m.If(~zero_write):
                        m.d.comb += wd.eq(self.dma.data)
                else:
                    bc = Signal(range(bpe), name=f"bc{i}")
                    if bpe > 2:
                        # the element's beats before the last, each written into its own
                        # bus-wide register at its index: a small memory with a read port
                        # per entry (the flip-flops of the shift register it replaces, each
                        # loaded from the bus under a decode of bc instead of from its
                        # neighbour), so a simulator writes one entry per beat instead of
                        # copying the whole (bpe - 1) x BUS_WIDTH bits every cycle
                        bmem = Memory(shape=bw, depth=bpe - 1, init=[])
                        m.submodules[f"beats{i}"] = bmem
                        wp = bmem.write_port()
                        m.d.comb += [wp.addr.eq(bc), wp.data.eq(self.dma.data),
                                     wp.en.eq(active & self.dma.data_valid & (bc != bpe - 1))]
                        shreg = Cat(*[_comb_read(m, bmem, k) for k in range(bpe - 1)])
                    else:
                        shreg = Signal(bw, name=f"shreg{i}")
                    with m.If(lane_init & (sel == i)):
                        m.d.sync += bc.eq(0)
                    with m.If(active):
                        m.d.comb += self.dma.data_ready.eq(1)
                        with m.If(self.dma.data_valid):
                            if bpe == 2:
                                m.d.sync += shreg.eq(self.dma.data)
                            m.d.sync += bc.eq(Mux(bc == bpe - 1, 0, bc + 1))
                            m.d.comb += elem_valid.eq(bc == bpe - 1)
                    with m.If(~zero_write):
                        m.d.comb += wd.eq(Cat(shreg, self.dma.data))

    def _row_requests(self, m: Module, n_out: int, r, lbb: int, bb: int, row_done) -> Signal:
        """The row requests of a LOAD with ``DMA_OUTSTANDING = n_out > 1``: from the cycle
        after ``start``, one request per DRAM row (``y_size`` of them, address ``dram_base
        + r × x_stride`` in bytes, its beats covering the row's ``nbytes``), each made as
        soon as fewer than ``n_out`` requested rows have not had their last element
        written (``row_done``, a pulse); the DMA engine returns each row's beats in
        request order, which the loader takes in its DATA state, as with one request at a
        time.  With ``ahead`` the requests of a LOAD taken while busy follow the current's
        last request (``ready`` needs every request of the current LOAD made), with their
        own row length.  Returns the count of outstanding rows (for tests and debug)."""
        base_bytes, step_bytes = r.base_bytes, r.step_bytes
        q_addr = Signal(32)                          # byte address of the next row
        q_step = Signal(32)
        q_rows = Signal(LIMITS.size_bits)            # rows not yet requested
        inflight = Signal(range(n_out + 1))          # requested, last element not written
        fire = Signal()
        if self.ahead:
            nbytes = Signal(32)                      # row length of the requesting LOAD
            # taken: idle, or busy with nothing queued and every request made (the queued
            # flag is the FSM's; a LOAD taken in the cycle of the current's done is not
            # queued but started, see _fsm)
            queued_any = Signal()
            m.d.comb += self.ready.eq(~self.busy | (~queued_any & (q_rows == 0)))
            r.queued_any = queued_any
        else:
            nbytes = r.nbytes
        m.d.comb += [self.dma.req_addr.eq(q_addr),
                     self.dma.req_beats.eq((q_addr[:lbb] + nbytes + (bb - 1)) >> lbb),
                     self.dma.req_valid.eq(self.busy & (q_rows != 0) & (inflight != n_out)),
                     fire.eq(self.dma.req_valid & self.dma.req_ready)]
        take = (self.start & self.ready) if self.ahead else (self.start & ~self.busy)
        with m.If(take):
            m.d.sync += [q_addr.eq(base_bytes), q_step.eq(step_bytes), q_rows.eq(self.y_size)]
            if self.ahead:
                m.d.sync += nbytes.eq(r.port_nbytes)
        with m.Elif(fire):
            m.d.sync += [q_addr.eq(q_addr + q_step), q_rows.eq(q_rows - 1)]
        m.d.sync += inflight.eq(inflight + fire - row_done)
        return inflight


def CommandPortSignature() -> wiring.Signature:
    """A unit's side of its command queue (``Out`` = driven by the unit)."""
    return wiring.Signature({"data": In(128), "valid": In(1), "ready": Out(1)})


class LoadUnit(wiring.Component):
    """Executes INP and WGT LOADs (and load-module NOPs) in order.

    Ports: ``cmd`` (command queue head), token ports ``g2l_nonempty``/``g2l_pop`` and
    ``l2g_has_room``/``l2g_push``, ``dma`` (read client), INP write port ``inp_w_*`` and WGT
    write port ``wgt_w_*``, ``state`` (4 bits, :class:`LoadState`), ``busy``, ``stall``,
    ``rd_bytes`` (32, bytes of DRAM elements received this cycle); scratchpad faults:
    ``err`` (pulse: a write past the INP/WGT depth, dropped) with ``err_index`` (32, the
    address), and ``halt`` (In: the core has faulted, write nothing).

    On a ``LOAD_AHEAD`` core the unit takes the next instruction from its queue while one
    LOAD's data still arrives, when it is an INP/WGT LOAD (``x_size`` > 0) whose tokens are
    there to pop and whose pushes have room, and not both it and the running LOAD push: it
    pops its tokens then (before any of its row requests), is handed to the loader
    (queued there, its requests behind the running LOAD's), and each LOAD's tokens are
    pushed in the cycle of its ``done`` (after its last write, padding included).  Any
    other instruction (a NOP, a token-only LOAD) is taken only once the loader is done, as
    without the option.
    """

    def __init__(self, cfg: VTAConfig):
        self.cfg = cfg
        super().__init__({
            "cmd": In(CommandPortSignature()),
            **token_members(Unit.LOAD),
            "dma": Out(ReadClientSignature(cfg.BUS_WIDTH)),
            "inp_w_addr": Out(cfg.LOG_INP_DEPTH), "inp_w_data": Out(cfg.elem_bits(MemType.INP)),
            "inp_w_en": Out(1),
            "wgt_w_addr": Out(cfg.LOG_WGT_DEPTH), "wgt_w_data": Out(cfg.elem_bits(MemType.WGT)),
            "wgt_w_en": Out(1),
            "state": Out(4), "busy": Out(1), "stall": Out(1), "rd_bytes": Out(32),
            "halt": In(1), "err": Out(1), "err_index": Out(32),
        })

    def elaborate(self, platform):
        m = Module()
        cfg = self.cfg
        m.submodules.loader = ld = TensorLoader(
            cfg, [cfg.elem_bits(MemType.INP), cfg.elem_bits(MemType.WGT)],
            [cfg.INP_DEPTH, cfg.WGT_DEPTH], ahead=cfg.LOAD_AHEAD)
        m.d.comb += [ld.halt.eq(self.halt), self.err.eq(ld.oob),
                     self.err_index.eq(ld.oob_addr)]
        wiring.connect(m, wiring.flipped(self.dma), ld.dma)
        m.d.comb += [self.inp_w_addr.eq(ld.w_addr), self.inp_w_data.eq(ld.w_data0),
                     self.inp_w_en.eq(ld.w_en0),
                     self.wgt_w_addr.eq(ld.w_addr), self.wgt_w_data.eq(ld.w_data1),
                     self.wgt_w_en.eq(ld.w_en1), self.rd_bytes.eq(ld.rd_bytes)]
        insn = Signal(128)
        head = self.cmd.data

        def f(v, name):
            return insn_field(cfg, v, "mem", name)

        m.d.comb += [ld.sel.eq(f(insn, "memory_type") == MemType.WGT)]
        for name in MEM_FIELDS[1:]:
            m.d.comb += getattr(ld, name).eq(f(insn, name))
        ih = header_view(insn)
        hh = header_view(head)

        def is_load(v, vh):
            """An INP/WGT LOAD that moves data (the loader's work)."""
            mt = f(v, "memory_type")
            return ((vh.opcode == Opcode.LOAD) & (f(v, "x_size") != 0)
                    & ((mt == MemType.INP) | (mt == MemType.WGT)))

        if cfg.LOAD_AHEAD:
            # LOADs handed to the loader and not yet done (one running, one queued), and
            # their push flags in that order: each LOAD's tokens are pushed in the cycle
            # of its ``done`` (after its last write)
            outstanding = Signal(2)
            m.d.sync += outstanding.eq(outstanding + ld.start - ld.done)
            _, pushes = module_tokens(Unit.LOAD)
            run_pf = SimpleNamespace(**{r.push_flag: Signal(name=f"run_{r.push_flag}")
                                        for r in pushes})
            q_pf = SimpleNamespace(**{r.push_flag: Signal(name=f"q_{r.push_flag}")
                                      for r in pushes})
            run_pushes = pushes_any(Unit.LOAD, run_pf)
            with m.If(ld.done):
                m.d.comb += push_tokens(self, Unit.LOAD, run_pf)
                m.d.sync += [getattr(run_pf, r.push_flag).eq(getattr(q_pf, r.push_flag))
                             for r in pushes]
            with m.If(ld.start):
                first = (outstanding == 0) | ((outstanding == 1) & ld.done)
                with m.If(first):
                    m.d.sync += [getattr(run_pf, r.push_flag).eq(getattr(ih, r.push_flag))
                                 for r in pushes]
                with m.Else():
                    m.d.sync += [getattr(q_pf, r.push_flag).eq(getattr(ih, r.push_flag))
                                 for r in pushes]
        with m.FSM(name="load_fsm"):
            with m.State("IDLE"):
                m.d.comb += self.state.eq(LoadState.IDLE)
                with m.If(self.cmd.valid):
                    with m.If(tokens_ready(self, Unit.LOAD, hh)):
                        m.d.comb += [self.cmd.ready.eq(1), *pop_tokens(self, Unit.LOAD, hh)]
                        m.d.sync += insn.eq(head)
                        m.next = "START"
                    with m.Else():
                        m.d.comb += [self.stall.eq(1), self.state.eq(LoadState.WAIT_TOKEN)]
            with m.State("START"):
                m.d.comb += [self.state.eq(LoadState.EXEC), self.busy.eq(1)]
                with m.If(is_load(insn, ih)):
                    if cfg.LOAD_AHEAD:
                        # the loader takes it when idle or when the running LOAD's row
                        # requests are all made
                        with m.If(ld.ready):
                            m.d.comb += ld.start.eq(1)
                            m.next = "EXEC"
                    else:
                        m.d.comb += ld.start.eq(1)
                        m.next = "EXEC"
                with m.Else():
                    # a NOP is taken only with the loader idle (from IDLE)
                    m.next = "PUSH"
            with m.State("EXEC"):
                m.d.comb += [self.state.eq(LoadState.EXEC), self.busy.eq(1)]
                if cfg.LOAD_AHEAD:
                    with m.If(ld.done & (outstanding == 1)):
                        # the last LOAD handed to the loader is done (its tokens pushed
                        # above)
                        m.next = "IDLE"
                    with m.Elif(self.cmd.valid & (outstanding == 1) & is_load(head, hh)
                                & tokens_ready(self, Unit.LOAD, hh)
                                & ~(run_pushes & pushes_any(Unit.LOAD, hh))):
                        # the next LOAD, its tokens popped now (before any of its
                        # requests); one push pending at most, so the room each push
                        # found when its LOAD was taken stays its own
                        m.d.comb += [self.cmd.ready.eq(1), *pop_tokens(self, Unit.LOAD, hh)]
                        m.d.sync += insn.eq(head)
                        m.next = "START"
                else:
                    with m.If(ld.done):
                        m.next = "PUSH"
            with m.State("PUSH"):
                m.d.comb += [self.state.eq(LoadState.PUSH), self.busy.eq(1)]
                if cfg.LOAD_AHEAD:
                    # a NOP (the LOADs push at their done)
                    with m.If(~is_load(insn, ih)):
                        m.d.comb += push_tokens(self, Unit.LOAD, ih)
                else:
                    m.d.comb += push_tokens(self, Unit.LOAD, ih)
                m.next = "IDLE"
        return m
