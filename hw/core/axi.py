"""AXI interfaces of the core: the AXI4 master DMA engine and the AXI4-Lite control slave.

The DMA engine owns the single shared AXI4 master port (32-bit addresses, data width
``cfg.BUS_WIDTH``, no IDs, INCR bursts only).  Clients ask for a run of *beats* starting at
a beat-aligned byte address; the engine splits the run into bursts of at most 256 beats that
never cross a 4 KiB boundary (AXI4 A3.4.1) and keeps up to :data:`R_OUTSTANDING` read
bursts of a request outstanding (one request at a time; with ``DMA_OUTSTANDING`` > 1,
requests are queued, see below).

Read side: several clients (fetch, load, compute) arbitrate with fixed priority; a granted
client keeps the read channel until every beat of its request has been delivered, so a client
must accept every beat it asked for (all clients here write into scratchpads or registers and
never block indefinitely).  With ``DMA_OUTSTANDING`` > 1 (:meth:`DMAEngine._read_queued`)
each client's next request is taken as soon as every AR of its previous one has gone out,
and the ARs go out burst by burst in client priority, up to ``max(R_OUTSTANDING,
DMA_OUTSTANDING)`` bursts in flight, each burst's R beats routed to its client in order.
Write side: one client (store); the engine issues the AWs of a
request's bursts (up to :data:`W_BURST_QUEUE` ahead of their W beats), forwards the client's
W beats back to back with WLAST at each burst end, and does not wait for B between bursts or
requests (up to :data:`B_OUTSTANDING` B responses pending).  ``idle`` reports that every B
has arrived, so the store unit pushes its dependency token only after its data is in DRAM.

A beat counts only on VALID && READY (field fault BR-21); single-beat bursts (``len = 0``)
are the common case for narrow elements.
"""

from __future__ import annotations

from amaranth.hdl import Cat, Const, Module, Mux, Signal
from amaranth.lib import wiring
from amaranth.lib.fifo import SyncFIFO
from amaranth.lib.wiring import In, Out

from ..config import VTAConfig
from .. import regs as regmap

__all__ = ["ReadClientSignature", "WriteClientSignature", "DMAEngine", "AXILiteRegs",
           "burst_beats"]

#: Bursts whose AW has been issued and whose W beats are not yet all sent (AW may run
#: this far ahead of W).
W_BURST_QUEUE = 4
#: Bursts whose B response may be outstanding at once.
B_OUTSTANDING = 15

#: Read bursts of one request that may await their data at once (the AR of the next burst
#: goes out before the R beats of the ones before it; A8.4: R data returns in order).
R_OUTSTANDING = 4

#: Width of a request's beat count (a row may be up to 65535 elements of 16 KiB).
BEATS_BITS = 32


def ReadClientSignature(bus_width: int) -> wiring.Signature:
    """A DMA read client, seen from the client (``Out`` = driven by the client).

    ``req_addr`` is a beat-aligned byte address, ``req_beats`` ≥ 1 the number of bus beats;
    the request is accepted when ``req_valid & req_ready``.  Beats then arrive on
    ``data``/``data_valid`` and are consumed when ``data_ready`` is high.
    """
    return wiring.Signature({
        "req_valid": Out(1), "req_addr": Out(32), "req_beats": Out(BEATS_BITS),
        "req_ready": In(1),
        "data": In(bus_width), "data_valid": In(1), "data_ready": Out(1),
    })


def WriteClientSignature(bus_width: int) -> wiring.Signature:
    """The DMA write client, seen from the client.  After the request is accepted the client
    supplies exactly ``req_beats`` beats on ``data``/``strb``/``data_valid`` (taken when
    ``data_ready``; ``data_valid`` must stay high until taken).  Requests may follow each
    other before the earlier ones' data is sent: the beats are consumed in request order.
    ``idle`` is high when every accepted request has been issued, its beats sent and all
    its write responses received (the data is in memory)."""
    return wiring.Signature({
        "req_valid": Out(1), "req_addr": Out(32), "req_beats": Out(BEATS_BITS),
        "req_ready": In(1),
        "data": Out(bus_width), "strb": Out(bus_width // 8), "data_valid": Out(1),
        "data_ready": In(1), "idle": In(1),
    })


def axi_master_members(bus_width: int) -> dict:
    """The flat AXI4 master members (``m_axi_*``) of the top-level signature."""
    bb = bus_width // 8
    return {
        "m_axi_araddr": Out(32), "m_axi_arlen": Out(8), "m_axi_arsize": Out(3),
        "m_axi_arburst": Out(2), "m_axi_arvalid": Out(1), "m_axi_arready": In(1),
        "m_axi_rdata": In(bus_width), "m_axi_rresp": In(2), "m_axi_rlast": In(1),
        "m_axi_rvalid": In(1), "m_axi_rready": Out(1),
        "m_axi_awaddr": Out(32), "m_axi_awlen": Out(8), "m_axi_awsize": Out(3),
        "m_axi_awburst": Out(2), "m_axi_awvalid": Out(1), "m_axi_awready": In(1),
        "m_axi_wdata": Out(bus_width), "m_axi_wstrb": Out(bb), "m_axi_wlast": Out(1),
        "m_axi_wvalid": Out(1), "m_axi_wready": In(1),
        "m_axi_bresp": In(2), "m_axi_bvalid": In(1), "m_axi_bready": Out(1),
    }


def axi_lite_members() -> dict:
    """The flat AXI4-Lite slave members (``s_axi_*``): 8-bit address, 32-bit data."""
    return {
        "s_axi_awaddr": In(8), "s_axi_awvalid": In(1), "s_axi_awready": Out(1),
        "s_axi_wdata": In(32), "s_axi_wstrb": In(4), "s_axi_wvalid": In(1),
        "s_axi_wready": Out(1), "s_axi_bresp": Out(2), "s_axi_bvalid": Out(1),
        "s_axi_bready": In(1),
        "s_axi_araddr": In(8), "s_axi_arvalid": In(1), "s_axi_arready": Out(1),
        "s_axi_rdata": Out(32), "s_axi_rresp": Out(2), "s_axi_rvalid": Out(1),
        "s_axi_rready": In(1),
    }


def burst_beats(addr: int, beats_left: int, bus_bytes: int) -> int:
    """Beats in the next burst (pure-Python model of the engine's split rule): at most 256,
    at most ``beats_left``, and not crossing the next 4 KiB boundary from ``addr``."""
    to_4k = (4096 - (addr % 4096)) // bus_bytes
    return min(256, beats_left, to_4k)


def _next_len(m: Module, addr, beats_left, bus_bytes: int):
    """Combinational burst length in beats (1..256) for the hardware engine."""
    lbb = bus_bytes.bit_length() - 1
    to_4k = Signal(range(4096 // bus_bytes + 1))
    m.d.comb += to_4k.eq((Const(4096, 13) - addr[:12]) >> lbb)
    n = Signal(9)
    lim = Signal(9)
    m.d.comb += lim.eq(Mux(to_4k < 256, to_4k, 256))
    m.d.comb += n.eq(Mux(beats_left < lim, beats_left, lim))
    return n


class DMAEngine(wiring.Component):
    """AXI4 master engine shared by ``n_read`` read clients and one write client.

    Ports: ``rd0 .. rd{n_read-1}`` (flipped :func:`ReadClientSignature`), ``wr`` (flipped
    :func:`WriteClientSignature`), the flat ``m_axi_*`` members, and per-cycle event outputs
    ``rd_beat``/``wr_beat`` (a beat was transferred) and ``wr_bytes`` (bytes with their
    strobe set in the write beat transferred this cycle, else 0) used by the byte counters.
    """

    def __init__(self, cfg: VTAConfig, n_read: int):
        self.cfg = cfg
        self.n_read = n_read
        bw = cfg.BUS_WIDTH
        members = {f"rd{i}": In(ReadClientSignature(bw)) for i in range(n_read)}
        members["wr"] = In(WriteClientSignature(bw))
        members.update(axi_master_members(bw))
        members["rd_beat"] = Out(1)
        members["wr_beat"] = Out(1)
        members["wr_bytes"] = Out(range(bw // 8 + 1))
        super().__init__(members)

    def elaborate(self, platform):
        m = Module()
        cfg = self.cfg
        bb = cfg.BUS_WIDTH // 8
        lbb = bb.bit_length() - 1
        clients = [getattr(self, f"rd{i}") for i in range(self.n_read)]

        if cfg.DMA_OUTSTANDING == 1:
            self._read_single(m, clients, bb, lbb)
        else:
            self._read_queued(m, clients, bb, lbb)

        # ---------------------------------------------------------------- write side
        # Three decoupled parts: the AW generator splits the accepted request into bursts
        # and queues each burst's length for the W side (so W beats follow their AW, with
        # WLAST at each burst end); the W side forwards the client's beats back to back; a
        # counter tracks the bursts whose B response is outstanding.  The next request is
        # accepted as soon as the AW generator has issued every burst of the previous one,
        # so AW of the next row overlaps W of this one and no B is waited for in between.
        w = self.wr
        aw_busy = Signal()
        w_addr = Signal(32)
        w_left = Signal(BEATS_BITS)
        w_len = _next_len(m, w_addr, w_left, bb)
        m.submodules.w_lens = lens = SyncFIFO(width=9, depth=W_BURST_QUEUE)
        b_out = Signal(range(B_OUTSTANDING + 1))  # AW issued, B not yet received
        w_idx = Signal(9)  # beats sent of the burst at the head of ``lens``
        m.d.comb += [self.m_axi_awsize.eq(lbb), self.m_axi_awburst.eq(1),
                     self.m_axi_awaddr.eq(w_addr), self.m_axi_awlen.eq(w_len - 1),
                     self.m_axi_wdata.eq(w.data), self.m_axi_wstrb.eq(w.strb)]
        wbeat = Signal()
        m.d.comb += wbeat.eq(self.m_axi_wvalid & self.m_axi_wready)
        m.d.comb += self.wr_beat.eq(wbeat)
        strb_count = sum(w.strb[i] for i in range(bb))
        m.d.comb += self.wr_bytes.eq(Mux(wbeat, strb_count, 0))
        # request acceptance
        m.d.comb += w.req_ready.eq(~aw_busy | (w_left == 0))
        with m.If(aw_busy & (w_left == 0)):
            m.d.sync += aw_busy.eq(0)
        with m.If(w.req_valid & w.req_ready):
            m.d.sync += [aw_busy.eq(1), w_addr.eq(w.req_addr & ~(bb - 1)),
                         w_left.eq(w.req_beats)]
        # AW: AWVALID never drops before AWREADY (the FIFO and the B count only free up)
        aw_fire = Signal()
        m.d.comb += [self.m_axi_awvalid.eq(aw_busy & (w_left != 0) & lens.w_rdy
                                           & (b_out != B_OUTSTANDING)),
                     aw_fire.eq(self.m_axi_awvalid & self.m_axi_awready),
                     lens.w_data.eq(w_len), lens.w_en.eq(aw_fire)]
        with m.If(aw_fire):
            m.d.sync += [w_left.eq(w_left - w_len), w_addr.eq(w_addr + (w_len << lbb))]
        # W: only beats of a burst whose AW has been issued
        w_last = Signal()
        m.d.comb += [w_last.eq(w_idx == lens.r_data - 1),
                     self.m_axi_wvalid.eq(lens.r_rdy & w.data_valid),
                     w.data_ready.eq(lens.r_rdy & self.m_axi_wready),
                     self.m_axi_wlast.eq(w_last), lens.r_en.eq(wbeat & w_last)]
        with m.If(wbeat):
            m.d.sync += w_idx.eq(Mux(w_last, 0, w_idx + 1))
        # B: always ready; count outstanding bursts
        b_fire = Signal()
        m.d.comb += [self.m_axi_bready.eq(1), b_fire.eq(self.m_axi_bvalid)]
        with m.If(aw_fire & ~b_fire):
            m.d.sync += b_out.eq(b_out + 1)
        with m.Elif(b_fire & ~aw_fire & (b_out != 0)):
            m.d.sync += b_out.eq(b_out - 1)
        m.d.comb += w.idle.eq(~aw_busy & ~lens.r_rdy & (b_out == 0))
        return m


    def _read_single(self, m: Module, clients: list, bb: int, lbb: int) -> None:
        """The read side with one request at a time (``DMA_OUTSTANDING = 1``)."""
        # A granted request's bursts: ARs go out while fewer than R_OUTSTANDING bursts of
        # it await their last R beat (RLAST), so each burst's latency overlaps the beats of
        # the ones before it; the R beats, in order, go to the granted client.
        grant = Signal(range(max(2, self.n_read)))
        ar_addr = Signal(32)
        ar_left = Signal(BEATS_BITS)        # beats of the request not yet asked for
        r_left = Signal(BEATS_BITS)         # beats of the request not yet delivered
        r_out = Signal(range(R_OUTSTANDING + 1))   # bursts asked for, RLAST not yet seen
        r_len = _next_len(m, ar_addr, ar_left, bb)
        m.d.comb += [self.m_axi_arsize.eq(lbb), self.m_axi_arburst.eq(1),
                     self.m_axi_araddr.eq(ar_addr), self.m_axi_arlen.eq(r_len - 1)]
        rbeat = Signal()
        m.d.comb += rbeat.eq(self.m_axi_rvalid & self.m_axi_rready)
        m.d.comb += self.rd_beat.eq(rbeat)
        for i, c in enumerate(clients):
            m.d.comb += c.data.eq(self.m_axi_rdata)
        ar_fire = Signal()
        with m.FSM(name="rd_fsm"):
            with m.State("IDLE"):
                # fixed priority: lowest index first
                for i in reversed(range(self.n_read)):
                    c = clients[i]
                    with m.If(c.req_valid):
                        m.d.sync += [grant.eq(i), ar_addr.eq(c.req_addr & ~(bb - 1)),
                                     ar_left.eq(c.req_beats), r_left.eq(c.req_beats)]
                # request acceptance: only the highest-priority requester sees ready
                taken = Const(0, 1)
                for i, c in enumerate(clients):
                    m.d.comb += c.req_ready.eq(c.req_valid & ~taken)
                    taken = taken | c.req_valid
                with m.If(taken):
                    m.next = "BUSY"
            with m.State("BUSY"):
                # ARVALID stays up until ARREADY: ar_left and the address change only on
                # the handshake, and r_out only falls meanwhile
                m.d.comb += self.m_axi_arvalid.eq((ar_left != 0) & (r_out != R_OUTSTANDING))
                m.d.comb += ar_fire.eq(self.m_axi_arvalid & self.m_axi_arready)
                with m.If(ar_fire):
                    m.d.sync += [ar_addr.eq(ar_addr + (r_len << lbb)),
                                 ar_left.eq(ar_left - r_len)]
                for i, c in enumerate(clients):
                    with m.If(grant == i):
                        m.d.comb += [c.data_valid.eq(self.m_axi_rvalid),
                                     self.m_axi_rready.eq(c.data_ready)]
                m.d.sync += r_out.eq(r_out + ar_fire - (rbeat & self.m_axi_rlast))
                with m.If(rbeat):
                    m.d.sync += r_left.eq(r_left - 1)
                with m.If((r_left == 0) | (rbeat & (r_left == 1))):
                    m.next = "IDLE"

    def _read_queued(self, m: Module, clients: list, bb: int, lbb: int) -> None:
        """The read side with queued requests (``DMA_OUTSTANDING = N > 1``).

        Each client has a pending-request register (address, beats not yet asked for); a
        request is accepted as soon as the client's register is empty, that is as soon as
        every AR of its previous request has gone out.  The AR issuer takes the next
        burst from the highest-priority client with beats pending (lowest index first),
        so a short request of a higher-priority client waits for the bursts in flight, not
        for the whole of a long lower-priority request; it holds the burst in an AR
        register until ARREADY (ARADDR and ARLEN never change while ARVALID is up), and
        keeps up to ``max(R_OUTSTANDING, N)`` bursts loaded and awaiting RLAST.  Each
        burst's client and length go into a route queue as it is loaded; the R side hands
        the beats, in order (A8.4: one ID), to the client at the head of the queue and
        pops the entry after the burst's last beat.  So the ARs of the next requests go
        out while this one's R beats arrive, and a client's beats of one request may come
        with other clients' bursts between them.
        """
        n_out = self.cfg.DMA_OUTSTANDING
        r_bursts = max(R_OUTSTANDING, n_out)
        cbits = max(1, (self.n_read - 1).bit_length())
        m.submodules.r_route = route = SyncFIFO(width=9 + cbits, depth=r_bursts)
        p_addr = [Signal(32, name=f"p_addr{i}") for i in range(self.n_read)]
        p_left = [Signal(BEATS_BITS, name=f"p_left{i}") for i in range(self.n_read)]
        # acceptance into each client's pending register
        for i, c in enumerate(clients):
            m.d.comb += c.req_ready.eq(p_left[i] == 0)
            with m.If(c.req_valid & c.req_ready):
                m.d.sync += [p_addr[i].eq(c.req_addr & ~(bb - 1)), p_left[i].eq(c.req_beats)]
        # the next burst: from the highest-priority client with beats pending
        sel = Signal(range(max(2, self.n_read)))
        any_left = Signal()
        sel_addr = Signal(32)
        sel_left = Signal(BEATS_BITS)
        for i in reversed(range(self.n_read)):
            with m.If(p_left[i] != 0):
                m.d.comb += [sel.eq(i), any_left.eq(1), sel_addr.eq(p_addr[i]),
                             sel_left.eq(p_left[i])]
        b_len = _next_len(m, sel_addr, sel_left, bb)
        ar_v = Signal()
        ar_a = Signal(32)
        ar_l = Signal(9)
        r_out = Signal(range(r_bursts + 1))  # bursts loaded, RLAST not yet seen
        m.d.comb += [self.m_axi_arsize.eq(lbb), self.m_axi_arburst.eq(1),
                     self.m_axi_arvalid.eq(ar_v), self.m_axi_araddr.eq(ar_a),
                     self.m_axi_arlen.eq(ar_l - 1)]
        ar_fire = Signal()
        load = Signal()
        m.d.comb += [ar_fire.eq(ar_v & self.m_axi_arready),
                     load.eq((~ar_v | ar_fire) & any_left & (r_out != r_bursts)),
                     route.w_data.eq(Cat(b_len, sel)), route.w_en.eq(load)]
        with m.If(load):
            m.d.sync += [ar_v.eq(1), ar_a.eq(sel_addr), ar_l.eq(b_len)]
            for i in range(self.n_read):
                with m.If(sel == i):
                    m.d.sync += [p_addr[i].eq(p_addr[i] + (b_len << lbb)),
                                 p_left[i].eq(p_left[i] - b_len)]
        with m.Elif(ar_fire):
            m.d.sync += ar_v.eq(0)
        rbeat = Signal()
        m.d.comb += [rbeat.eq(self.m_axi_rvalid & self.m_axi_rready), self.rd_beat.eq(rbeat)]
        m.d.sync += r_out.eq(r_out + load - (rbeat & self.m_axi_rlast))
        # R: beats to the client at the head of the route queue
        h_len = route.r_data[:9]
        h_client = route.r_data[9:]
        r_idx = Signal(8)                   # beats delivered of the head burst
        for i, c in enumerate(clients):
            mine = Signal(name=f"r_to{i}")
            m.d.comb += [c.data.eq(self.m_axi_rdata), mine.eq(route.r_rdy & (h_client == i)),
                         c.data_valid.eq(mine & self.m_axi_rvalid)]
            with m.If(mine):
                m.d.comb += self.m_axi_rready.eq(c.data_ready)
        r_end = Signal()
        m.d.comb += [r_end.eq(r_idx == h_len - 1), route.r_en.eq(rbeat & r_end)]
        with m.If(rbeat):
            m.d.sync += r_idx.eq(Mux(r_end, 0, r_idx + 1))

def _lsb(register: str, field: str) -> int:
    """Bit position of a one-bit field of hw/regs.py."""
    f = regmap.bitfield(register, field)
    assert f.width == 1, (register, field)
    return f.lsb


def _reg_value(register: str, **fields):
    """The read value of ``register`` from its hw/regs.py fields: each named field's value
    at its bit position, zeros for unnamed fields and gaps (``Cat`` from bit 0 to the last
    named field; a lone field at bit 0 is the value itself)."""
    last = max(regmap.bitfield(register, n).lsb for n in fields)
    parts, pos = [], 0
    for f in sorted(regmap.reg(register).fields, key=lambda f: f.lsb):
        if f.lsb > last:
            break
        if f.lsb > pos:
            parts.append(Const(0, f.lsb - pos))
        parts.append(fields[f.name] if f.name in fields else Const(0, f.width))
        pos = f.lsb + f.width
    return parts[0] if len(parts) == 1 else Cat(*parts)


class AXILiteRegs(wiring.Component):
    """AXI4-Lite control slave implementing :mod:`vtaforge.hw.regs`.

    Writes complete when both AW and W are valid (one transaction at a time, ``BRESP = OKAY``);
    reads return the register at ``araddr & ~3`` one cycle after acceptance (unmapped
    addresses read 0).  Core-side ports: ``start`` (combinational one-cycle pulse in the cycle
    a CTRL write with START = 1 is accepted), ``irq_en``,
    ``insn_addr`` (64), ``insn_count`` (32), inputs ``busy``/``done`` and the counters
    ``cnt_<NAME>`` (32 bits each, 64 for CYCLES), ``set_irq`` (pulse at completion), and
    the fault report ``err`` (the ERROR register's value, 32), ``err_insn``, ``err_index``
    (``STATUS.ERROR`` is ``err[0]``).
    """

    COUNTERS = ("FETCH_BUSY", "LOAD_BUSY", "COMPUTE_BUSY", "STORE_BUSY", "LOAD_STALL",
                "COMPUTE_STALL", "STORE_STALL", "GEMM_COUNT", "ALU_COUNT", "DMA_RD_BYTES",
                "DMA_WR_BYTES")

    def __init__(self, cfg: VTAConfig):
        self.cfg = cfg
        members = axi_lite_members()
        members.update({
            "start": Out(1), "irq_en": Out(1), "irq": Out(1), "insn_addr": Out(64),
            "insn_count": Out(32), "busy": In(1), "done": In(1), "set_irq": In(1),
            "cycles": In(64), "err": In(32), "err_insn": In(32), "err_index": In(32),
        })
        for n in self.COUNTERS:
            members[f"cnt_{n.lower()}"] = In(32)
        if cfg.INSN_RING:
            # the ring registers (hw/regs.py RING_REGISTERS): ring_enable, ring_base (64),
            # ring_tail out; ring_head, finish_count, ring_idle in
            members.update({"ring_enable": Out(1), "ring_base": Out(64), "ring_tail": Out(32),
                            "ring_head": In(32), "finish_count": In(32),
                            "ring_idle": In(32)})
        super().__init__(members)

    def elaborate(self, platform):
        m = Module()
        irq_status = Signal()
        insn_lo = Signal(32)
        insn_hi = Signal(32)
        m.d.comb += [self.insn_addr.eq(Cat(insn_lo, insn_hi)),
                     self.irq.eq(irq_status & self.irq_en)]
        with m.If(self.set_irq):
            m.d.sync += irq_status.eq(1)
        if self.cfg.INSN_RING:
            ring_lo = Signal(32)
            ring_hi = Signal(32)
            m.d.comb += self.ring_base.eq(Cat(ring_lo, ring_hi))

        # write channel
        bvalid = Signal()
        m.d.comb += [self.s_axi_bvalid.eq(bvalid), self.s_axi_bresp.eq(0)]
        wr_ok = Signal()
        m.d.comb += wr_ok.eq(self.s_axi_awvalid & self.s_axi_wvalid & ~bvalid)
        m.d.comb += [self.s_axi_awready.eq(wr_ok), self.s_axi_wready.eq(wr_ok)]
        with m.If(bvalid & self.s_axi_bready):
            m.d.sync += bvalid.eq(0)
        waddr = self.s_axi_awaddr[2:]
        wdata = self.s_axi_wdata
        with m.If(wr_ok):
            m.d.sync += bvalid.eq(1)
            with m.Switch(waddr):
                with m.Case(regmap.offset("CTRL") >> 2):
                    m.d.comb += self.start.eq(wdata[_lsb("CTRL", "START")])
                    m.d.sync += self.irq_en.eq(wdata[_lsb("CTRL", "IRQ_EN")])
                with m.Case(regmap.offset("IRQ_STATUS") >> 2):
                    with m.If(wdata[_lsb("IRQ_STATUS", "DONE")] & ~self.set_irq):
                        m.d.sync += irq_status.eq(0)
                with m.Case(regmap.offset("INSN_ADDR_LO") >> 2):
                    m.d.sync += insn_lo.eq(wdata)
                with m.Case(regmap.offset("INSN_ADDR_HI") >> 2):
                    m.d.sync += insn_hi.eq(wdata)
                with m.Case(regmap.offset("INSN_COUNT") >> 2):
                    m.d.sync += self.insn_count.eq(wdata)
                if self.cfg.INSN_RING:
                    with m.Case(regmap.offset("RING_CTRL") >> 2):
                        m.d.sync += self.ring_enable.eq(wdata[_lsb("RING_CTRL", "ENABLE")])
                    with m.Case(regmap.offset("RING_BASE_LO") >> 2):
                        m.d.sync += ring_lo.eq(wdata)
                    with m.Case(regmap.offset("RING_BASE_HI") >> 2):
                        m.d.sync += ring_hi.eq(wdata)
                    with m.Case(regmap.offset("RING_TAIL") >> 2):
                        m.d.sync += self.ring_tail.eq(wdata)

        # read channel
        rvalid = Signal()
        rdata = Signal(32)
        m.d.comb += [self.s_axi_rvalid.eq(rvalid), self.s_axi_rdata.eq(rdata),
                     self.s_axi_rresp.eq(0), self.s_axi_arready.eq(~rvalid)]
        with m.If(rvalid & self.s_axi_rready):
            m.d.sync += rvalid.eq(0)
        values = {
            # START reads back 0
            "CTRL": _reg_value("CTRL", IRQ_EN=self.irq_en),
            "STATUS": _reg_value("STATUS", BUSY=self.busy, DONE=self.done, ERROR=self.err[0]),
            "IRQ_STATUS": _reg_value("IRQ_STATUS", DONE=irq_status),
            "INSN_ADDR_LO": insn_lo, "INSN_ADDR_HI": insn_hi, "INSN_COUNT": self.insn_count,
            "CYCLES_LO": self.cycles[:32], "CYCLES_HI": self.cycles[32:],
            "FINGERPRINT": Const(self.cfg.fingerprint, 32),
            "VERSION": Const(regmap.REGMAP_VERSION, 32),
            "ERROR": self.err, "ERR_INSN": self.err_insn, "ERR_INDEX": self.err_index,
        }
        for n in self.COUNTERS:
            values[n] = getattr(self, f"cnt_{n.lower()}")
        if self.cfg.INSN_RING:
            values.update({
                "RING_CTRL": self.ring_enable << _lsb("RING_CTRL", "ENABLE"),
                "RING_BASE_LO": ring_lo,
                "RING_BASE_HI": ring_hi, "RING_SIZE": Const(self.cfg.INSN_RING, 32),
                "RING_TAIL": self.ring_tail, "RING_HEAD": self.ring_head,
                "FINISH_COUNT": self.finish_count, "RING_IDLE": self.ring_idle})
        with m.If(self.s_axi_arvalid & ~rvalid):
            m.d.sync += rvalid.eq(1)
            with m.Switch(self.s_axi_araddr[2:]):
                for name, v in values.items():
                    with m.Case(regmap.offset(name) >> 2):
                        m.d.sync += rdata.eq(v)
                with m.Default():
                    m.d.sync += rdata.eq(0)
        return m
