"""The compute unit: micro-op and accumulator loads, the GEMM array, the tensor ALU and the
accumulator scratchpad (with its truncated OUT view, which the store unit reads).

GEMM and ALU run the two-level affine loop of DESIGN.md "Semantics" through a four-stage
pipeline, one micro-op per cycle in steady state (ALU with a tensor operand: one per two
cycles, since both operands come from the one accumulator read port):

- A: loop sequencer; reads the micro-op at index ``k``.
- B: forms ``dst``/``src``/``wgt`` = micro-op field + loop offset (wrapping at the buffer
  depth); issues the scratchpad reads.  An ALU micro-op stalls while an older micro-op in C
  or D still has to write an entry it reads (read-after-write through the accumulator);
  a GEMM micro-op never stalls.
- C: multiplies (GEMM) or evaluates the ALU lanes; registers the result.
- D: sums each dot product into the accumulator value, which is forwarded from the two
  newest accumulator writes when they hit the same entry (so consecutive GEMM micro-ops
  updating one entry give the sum of both at one micro-op per cycle); writes ACC and OUT
  (the same value, except a clearing REQ: its result to OUT, 0 to ACC; ``ALU_REQUANT``).

A tensor-operand ALU micro-op whose source entry equals the last one read (and not written
since) reuses the kept value and runs at one micro-op per cycle.  The sequencer starts in
the cycle an instruction is taken from the queue; after the last micro-op of a GEMM/ALU that
pushes no token, the next GEMM/ALU enters behind it (its controls travel with each micro-op).

``REQ_ENGINE``: a second, three-stage pipeline (``ComputeUnit._req_engine``) runs ALU REQs
and ALU resets of one micro-op beside this one, on the second ports of the banked
accumulator and OUT view, with results as if in order (docs/hardware.md "REQ engine").

``REQ_LANE_SHIFT``: a REQ whose shift field is ``REQ_LANE`` takes each lane's bias and
shift from its operand word, in the main ALU's lanes (:func:`alu_lane`, stage C) and in the
engine's C stage alike, through the lanes' own adder and shifter
(:func:`_req_lane_operands`; docs/hardware.md "Per-lane REQ").

Element layouts (little-endian, row-major, as numpy arrays of the element): INP
``[BATCH][BLOCK_IN]``, WGT ``[BLOCK_OUT][BLOCK_IN]``, ACC/OUT ``[BATCH][BLOCK_OUT]``.

DSP packing (``cfg.DSP_PACKING == 2``, 8-bit activations, 8-bit or 4-bit weights, the latter
used sign-extended, so the same multiplier): two weights that share an activation
go into one multiplier as ``A = (w_hi << 16) + w_lo``; with ``P = A × a``, the low product is
``sext16(P[0:16])`` and the high one ``(P >> 16) + P[15]``; k = 17 would overflow the 25-bit
A port for ``w_hi = -128, w_lo < 0`` (hardware-notes.md "Multipliers";
:func:`packed_pair_model` is the pure-Python model, checked exhaustively in the tests).
``cfg.LUT_MULTIPLIERS`` products are built from shift-and-add logic (no ``$mul`` cell), so
Yosys maps them to LUTs.

Depthwise GEMM (``cfg.DEPTHWISE_TAPS`` T > 0, docs/hardware.md "Depthwise GEMM"): a GEMM
micro-op with the instruction's ``depthwise`` flag reads INP entries ``src .. src+T-1`` in
its one stage-B read (the INP scratchpad is a :class:`~.scratchpad.TapScratchpad`, port
``inp_r_taps``); stage C registers ``BATCH × BLOCK_OUT × T`` products ``inp[src+t][b][o] ×
wgt[o][t]`` in multipliers of their own (:meth:`ComputeUnit._depthwise_products`) and stage
D adds their sum instead of the array's, through the same forwarding, so a depthwise
micro-op also runs at one per cycle.  Stage B checks the last tap ``src + T - 1`` against the
INP depth (and reports it), as fsim.
"""

from __future__ import annotations

from enum import IntEnum
from types import SimpleNamespace

from amaranth.hdl import Cat, Const, Module, Mux, Signal, signed
from amaranth.lib import wiring
from amaranth.lib.wiring import In, Out

from ..config import MemType, VTAConfig
from ..isa import LANE_SHIFT_BITS, LIMITS, REQ_LANE, REQ_SHIFT_BITS, AluOp, Opcode
from ..regs import ErrorKind
from .axi import ReadClientSignature
from ..isa import Module as Unit
from .fields import (header_view, insn_field, pop_tokens, push_tokens, pushes_any,
                     token_members, tokens_ready)
from .load import CommandPortSignature, TensorLoader
from .scratchpad import BankedScratchpad, Scratchpad

__all__ = ["ComputeUnit", "AluLane", "alu_lane", "req_clip", "PackedMulPair", "packed_pair_model",
           "lut_multiply", "ComputeState", "PACK_SHIFT"]

class ComputeState(IntEnum):
    """Compute unit FSM encodings (the ``state`` port, for ``dbg_state``).  WAIT_TOKEN: the
    next instruction waits for a token to pop or for room in a token queue it will push
    to.  (Code 5 is unused: FINISH executes in DECODE and leaves through PUSH.)"""

    IDLE = 0
    WAIT_TOKEN = 1
    LOAD = 2
    GEMM_ALU = 3
    PUSH = 4
    DECODE = 6


#: Bit offset of the high weight in a packed DSP operand (hardware-notes.md).
PACK_SHIFT = 16


def packed_pair_model(a: int, w_lo: int, w_hi: int) -> tuple[int, int]:
    """Pure-Python model of the packed multiplier: returns ``(a*w_lo, a*w_hi)`` computed the
    way the hardware does, from the one product ``P = ((w_hi << 16) + w_lo) * a``."""
    p = ((w_hi << PACK_SHIFT) + w_lo) * a
    lo = p & ((1 << PACK_SHIFT) - 1)
    if lo >> (PACK_SHIFT - 1):
        lo -= 1 << PACK_SHIFT
    hi = (p >> PACK_SHIFT) + ((p >> (PACK_SHIFT - 1)) & 1)
    return lo, hi


def lut_multiply(a, w):
    """Signed ``a × w`` built from shifted partial products (no ``$mul`` cell, so synthesis
    uses LUTs).  ``a`` and ``w`` are signed Amaranth values; result width ``len(a)+len(w)``."""
    n = len(a) + len(w)
    a_ext = a.as_signed()
    terms = []
    for k in range(len(w)):
        t = Mux(w[k], a_ext << k, 0)
        terms.append(t)
    acc = Const(0, signed(n))
    for k, t in enumerate(terms):
        if k == len(w) - 1:
            acc = acc - t
        else:
            acc = acc + t
    return acc[:n].as_signed()


class PackedMulPair(wiring.Component):
    """One DSP-packed multiplier pair: ``a`` (signed 8) × ``w_lo``, ``w_hi`` (signed 8) →
    ``p_lo``, ``p_hi`` (signed 16), combinational."""

    def __init__(self):
        super().__init__({"a": In(signed(8)), "w_lo": In(signed(8)), "w_hi": In(signed(8)),
                          "p_lo": Out(signed(16)), "p_hi": Out(signed(16))})

    def elaborate(self, platform):
        m = Module()
        lo, hi = _packed_mul(m, self.a, self.w_lo, self.w_hi)
        m.d.comb += [self.p_lo.eq(lo), self.p_hi.eq(hi)]
        return m


def _packed_mul(m, a, w_lo, w_hi):
    # w_hi above 16 zero bits as a 24-bit signed value (not a shift, which Amaranth
    # sign-extends to 39 bits first: the same adder after synthesis, a longer one in
    # Verilator's C++); P is the 33-bit product
    packed = Signal(signed(25))
    m.d.comb += packed.eq(Cat(Const(0, PACK_SHIFT), w_hi).as_signed() + w_lo.as_signed())
    p = Signal(signed(33))
    m.d.comb += p.eq(packed * a.as_signed())
    lo = p[:PACK_SHIFT].as_signed()
    # the low 16 bits of (P >> 16) + P[15]: an unsigned 16-bit add, the same cell after
    # synthesis as the signed form and cheaper to simulate (no sign extensions)
    hi = (p[PACK_SHIFT:PACK_SHIFT + 16] + p[PACK_SHIFT - 1])[:16].as_signed()
    return lo, hi


def _offset_sum(terms):
    """The exact signed sum of signed ``terms`` (a balanced adder tree, one bit wider per
    level) computed in offset binary: an N-bit signed ``v`` is carried as the unsigned
    ``v + 2**(N-1)`` (its sign bit inverted), and the unsigned sum of two N-bit offset
    values is the (N+1)-bit offset value of the signed sum, so every adder is unsigned and
    only the leaves' and the root's sign bits are inverted (free in a LUT or carry chain:
    the same adders as the signed tree).  Verilator's C++ for it has no sign extension per
    adder input; a leaf's sign bit is inverted as ``+ 2**(N-1)`` modulo ``2**N`` (the same
    inversion for synthesis, one add in Verilator's C++ instead of a mask-and-merge of the
    bit).  Returns the signed sum (two's complement, ``len(terms[0]) +
    ceil(log2(len(terms)))`` bits for equal-width terms)."""
    def widen(u, n):    # offset value u to n bits: sign-extension in offset binary
        k = len(u)
        return u if n == k else Cat(u[:k - 1], (~u[k - 1]).replicate(n - k), u[k - 1])
    us = [(t.as_unsigned() + (1 << (len(t) - 1)))[:len(t)] for t in terms]
    while len(us) > 1:
        nxt = []
        for t in range(0, len(us) - 1, 2):
            n = max(len(us[t]), len(us[t + 1]))
            nxt.append(widen(us[t], n) + widen(us[t + 1], n))
        if len(us) % 2:
            nxt.append(us[-1])
        us = nxt
    u = us[0]
    return (u ^ (1 << (len(u) - 1))).as_signed()


def _shr(cfg: VTAConfig, a, b):
    """SHR of signed ``a`` by the low LOG_ACC_WIDTH+1 bits of ``b`` read as a signed amount
    (negative: left shift), ACC_WIDTH bits."""
    w = cfg.ACC_WIDTH
    sbits = cfg.LOG_ACC_WIDTH + 1
    s = b[:sbits].as_signed()
    right = (a >> s[:sbits - 1])[:w]
    neg = (-s)[:sbits]
    left = (a << neg)[:w]
    return Mux(s[sbits - 1], left, right)


def req_clip(cfg: VTAConfig, x, imm, m=None, name=None):
    """The clip of ALU REQ: ``MIN(MAX(x, lo), hi)`` of signed ACC_WIDTH ``x`` with ``lo``,
    ``hi`` from the 16-bit immediate ``imm`` (:func:`vtaforge.hw.isa.req_imm`: bits [7:6]
    lo = -128 (00), 0 (01, and the reserved 11, which the verifier refuses) or -8 (10),
    bits [15:8] hi signed) → ACC_WIDTH-bit expression, exact for every valid immediate
    (``hi < lo`` gives ``hi``, as the MAX/MIN pair does).  The result is always an int8
    value, so the comparisons and muxes are 8 bits wide plus one range test of ``x[7:]``
    (sign-extended 8-bit ``x``).  With a module ``m``, the 8-bit result is a comb signal
    of ``m`` (``name``) and the expression its sign extension; the signal is driven in
    the control block of the call, so call it outside any ``m.If`` (else it reads 0 where
    the condition is false)."""
    w = cfg.ACC_WIDTH
    sign = x[w - 1]
    top = x[7:]
    in8 = (top == 0) | (top == (1 << (w - 7)) - 1)
    x8 = x[:8].as_signed()
    hi = imm[8:16].as_signed()
    relu = imm[6]
    i4 = imm[7] & ~imm[6]                           # lo = -8 (int4 outputs)
    below8 = ~in8 & sign                            # x < -128
    below = Mux(relu, sign, Mux(i4, below8 | (in8 & (x8 < -8)), below8))   # x < lo
    above = Mux(in8, x8 > hi, ~sign)                # x > hi
    # MAX(x, lo) > hi when x < lo: lo > hi (never for -128)
    over = Mux(below, Mux(relu, imm[15], i4 & (hi < -8)), above)
    lo8 = Mux(relu, Const(0, signed(8)), Mux(i4, Const(-8, signed(8)), Const(-128, signed(8))))
    r8 = Mux(over, hi, Mux(below, lo8, x8))
    if m is None:
        return Cat(r8, *([r8[7]] * (w - 8)))
    # the 8-bit result as one signal, sign-extended from its top bit: the same logic once
    # synthesis has merged the copies, and a replication of one bit for Verilator instead
    # of ACC_WIDTH - 8 copies of the mux chain
    s8 = Signal(signed(8), name=name)
    m.d.comb += s8.eq(r8)
    return Cat(s8, s8[7].replicate(w - 8))


def _is_lane_imm(imm):
    """Whether a REQ immediate's shift field (``imm[5:0]``) is
    :data:`~vtaforge.hw.isa.REQ_LANE`: the per-lane form (``REQ_LANE_SHIFT``) → 1 bit."""
    return imm[:REQ_SHIFT_BITS] == (REQ_LANE & ((1 << REQ_SHIFT_BITS) - 1))


def _req_lane_operands(lane, b, imm):
    """The addend and the shift amount of a REQ on one lane (``REQ_LANE_SHIFT``): with
    ``lane`` (a per-lane REQ) the lane's operand word ``b`` (signed ACC_WIDTH) gives both,
    ``b >> 6`` (arithmetic, the bias) and ``b[5:0]`` read as signed (the shift,
    :func:`vtaforge.hw.isa.req_lane_word`); else ``b`` and the immediate's ``imm[5:0]``.
    → ``(addend, shift)``, signed expressions, for the lane's one adder and one
    shifter."""
    return (Mux(lane, b >> LANE_SHIFT_BITS, b),
            Mux(lane, b[:LANE_SHIFT_BITS].as_signed(), imm[:REQ_SHIFT_BITS].as_signed()))


def alu_lane(cfg: VTAConfig, op, a, b, imm=None, clip=True):
    """The ALU function on one lane (DESIGN.md "Semantics"): signed ``a``, ``b`` of
    ACC_WIDTH bits, 3-bit ``op`` → ACC_WIDTH-bit result expression.  MIN/MAX signed; ADD
    (and MUL when ``cfg.ALU_MUL``) wrap; SHR shifts by the low LOG_ACC_WIDTH+1 bits of ``b``
    as a signed amount (negative: left shift).  REQ (``cfg.ALU_REQUANT``; ``imm`` the
    instruction's 16-bit immediate, ``b`` the tensor operand or 0): ``SHR(ADD(a, b),
    imm[5:0])`` then :func:`req_clip` (``clip=False``: the unclipped value, which the
    pipeline clips one stage later).  With ``cfg.REQ_LANE_SHIFT`` a REQ whose shift field
    is :data:`~vtaforge.hw.isa.REQ_LANE` is per-lane (:func:`_req_lane_operands`): the same
    adder and shifter take ``b >> 6`` and ``b[5:0]`` instead of ``b`` and ``imm[5:0]``."""
    w = cfg.ACC_WIDTH
    a = a.as_signed()
    b = b.as_signed()
    if cfg.ALU_REQUANT and cfg.REQ_LANE_SHIFT:
        is_req = op == AluOp.REQ
        addend, req_shift = _req_lane_operands(is_req & _is_lane_imm(imm), b, imm)
        total = (a + addend)[:w]
        shr = _shr(cfg, Mux(is_req, total.as_signed(), a), Mux(is_req, req_shift, b))
    elif cfg.ALU_REQUANT:     # one shifter: SHR shifts a by b, REQ the sum by imm[5:0]
        total = (a + b)[:w]
        is_req = op == AluOp.REQ
        shr = _shr(cfg, Mux(is_req, total.as_signed(), a),
                   Mux(is_req, imm[:REQ_SHIFT_BITS].as_signed(), b))
    else:
        total = (a + b)[:w]
        shr = _shr(cfg, a, b)
    res = Mux(op == AluOp.MIN, Mux(a < b, a, b),
          Mux(op == AluOp.MAX, Mux(a > b, a, b),
          Mux(op == AluOp.ADD, total,
          shr if not cfg.ALU_MUL else Mux(op == AluOp.SHR, shr, (a * b)[:w]))))
    if cfg.ALU_REQUANT:
        res = Mux(is_req, req_clip(cfg, shr, imm) if clip else shr, res)
    return res[:w]


class AluLane(wiring.Component):
    """One ALU lane as a component (for unit tests): ``op`` (3), ``a``, ``b`` (signed
    ACC_WIDTH) → ``res``."""

    def __init__(self, cfg: VTAConfig):
        self.cfg = cfg
        super().__init__({"op": In(3), "a": In(signed(cfg.ACC_WIDTH)),
                          "b": In(signed(cfg.ACC_WIDTH)), "imm": In(LIMITS.imm_bits),
                          "res": Out(signed(cfg.ACC_WIDTH))})

    def elaborate(self, platform):
        m = Module()
        m.d.comb += self.res.eq(alu_lane(self.cfg, self.op, self.a, self.b, self.imm))
        return m


class ComputeUnit(wiring.Component):
    """Executes compute-module instructions: UOP/ACC/ACC8 LOADs, GEMM, ALU, FINISH.

    Ports: ``cmd`` (command queue head); tokens ``l2g_nonempty``/``l2g_pop``,
    ``s2g_nonempty``/``s2g_pop``, ``g2l_has_room``/``g2l_push``, ``g2s_has_room``/
    ``g2s_push``; ``dma`` (read client); INP/WGT scratchpad read ports ``inp_r_*``,
    ``wgt_r_*`` (with ``DEPTHWISE_TAPS`` T also ``inp_r_taps``, In, T × the INP element
    bits: entries ``inp_r_addr .. + T - 1``, tap t at bits ``[t·E, (t+1)·E)``); OUT view
    write port ``out_w_*``; ``finish`` (pulse when FINISH executes);
    ``state`` (4, :class:`ComputeState`), ``busy``, ``stall``, ``gemm_uop``/``alu_uop``
    (pulse per executed non-reset micro-op: reset micro-ops count in neither, as in fsim's
    ``gemm_counter``/``alu_counter``; a clearing REQ is no reset), ``rd_bytes`` (bytes of DRAM elements its loads
    received this cycle).

    Scratchpad faults (``hw/regs.py``): ``err`` pulses on the first violation this unit
    sees, with ``err_kind`` (4, :class:`vtaforge.hw.regs.ErrorKind`), ``err_index`` (32)
    and ``err_ord`` (32, the instruction's ``ord_next`` value when it was taken).
    Stage A checks the micro-op index, stage B the computed ``dst``/``src``/``wgt`` (for a
    depthwise GEMM the last tap ``src + DEPTHWISE_TAPS - 1``, as fsim) against their
    scratchpads (in full width: the loop offsets carry two extra bits, so the
    first offending index is exact), the loader its write addresses.  The offending micro-op
    or write is dropped and the sequencer stops; while ``halt`` (In: the core has faulted)
    is high no micro-op runs and nothing is written.  ``ord_next`` (In, 32): the ordinal
    the instruction at the queue head gets when taken.
    """

    def __init__(self, cfg: VTAConfig):
        self.cfg = cfg
        super().__init__({
            "cmd": In(CommandPortSignature()),
            **token_members(Unit.COMPUTE),
            "dma": Out(ReadClientSignature(cfg.BUS_WIDTH)),
            "inp_r_addr": Out(cfg.LOG_INP_DEPTH), "inp_r_data": In(cfg.elem_bits(MemType.INP)),
            **({"inp_r_taps": In(cfg.DEPTHWISE_TAPS * cfg.elem_bits(MemType.INP))}
               if cfg.DEPTHWISE_TAPS else {}),
            "wgt_r_addr": Out(cfg.LOG_WGT_DEPTH), "wgt_r_data": In(cfg.elem_bits(MemType.WGT)),
            "out_w_addr": Out(cfg.LOG_ACC_DEPTH), "out_w_data": Out(cfg.elem_bits(MemType.OUT)),
            "out_w_en": Out(1),
            **({"out_w1_addr": Out(cfg.LOG_ACC_DEPTH),
                "out_w1_data": Out(cfg.elem_bits(MemType.OUT)), "out_w1_en": Out(1)}
               if cfg.REQ_ENGINE else {}),
            "finish": Out(1), "state": Out(4), "busy": Out(1), "stall": Out(1),
            "gemm_uop": Out(1), "alu_uop": Out(1), "rd_bytes": Out(32),
            "halt": In(1), "ord_next": In(32), "err": Out(1), "err_kind": Out(4),
            "err_index": Out(32), "err_ord": Out(32),
        })

    # ------------------------------------------------------------------ helpers
    def _truncate(self, acc_elem):
        cfg = self.cfg
        lanes = cfg.BATCH * cfg.BLOCK_OUT
        return Cat(*[acc_elem.word_select(i, cfg.ACC_WIDTH)[:cfg.OUT_WIDTH] for i in range(lanes)])

    def elaborate(self, platform):
        m = Module()
        p = self._memories(m)
        self._decode(m, p)
        self._load_path(m, p)
        self._stage_a(m, p)
        self._stage_b_index(m, p)
        self._stage_b_hazard(m, p)
        self._stage_c(m, p)
        self._stage_d(m, p)
        self._control(m, p)
        return m

    def _memories(self, m) -> SimpleNamespace:
        """The unit's memories: the UOP scratchpad, the accumulator (two banks with
        ``REQ_ENGINE``: ``acc_mem`` is then a view of bank port 0, the GEMM pipeline's) and
        the tensor loader that fills both.  Returns the namespace the pipeline stages
        share (``p``)."""
        cfg = self.cfg
        acc_bits = cfg.elem_bits(MemType.ACC)
        m.submodules.uop_mem = uop_mem = Scratchpad.of(cfg.memory("uop"))  # VTAConfig.memories
        eng = cfg.REQ_ENGINE
        acc_bank = None
        if eng:     # two banks: the GEMM pipeline on ports 0, the REQ engine on ports 1
            m.submodules.acc_mem = acc_bank = BankedScratchpad(acc_bits, cfg.ACC_DEPTH)
            acc_mem = SimpleNamespace(r_addr=acc_bank.r0_addr, r_en=acc_bank.r0_en,
                                      r_data=acc_bank.r0_data, w_addr=acc_bank.w0_addr,
                                      w_data=acc_bank.w0_data, w_en=acc_bank.w0_en)
        else:
            m.submodules.acc_mem = acc_mem = Scratchpad.of(cfg.memory("acc"))
        elems = [32, acc_bits] + ([cfg.elem_bits(MemType.ACC8)] if cfg.ACC_8BIT else [])
        depths = [cfg.UOP_DEPTH, cfg.ACC_DEPTH] + ([cfg.ACC_DEPTH] if cfg.ACC_8BIT else [])
        m.submodules.loader = ld = TensorLoader(cfg, elems, depths)
        wiring.connect(m, wiring.flipped(self.dma), ld.dma)
        m.d.comb += [self.rd_bytes.eq(ld.rd_bytes), ld.halt.eq(self.halt)]
        return SimpleNamespace(uop_mem=uop_mem, acc_bank=acc_bank, acc_mem=acc_mem, ld=ld,
                               eng=eng, fw=cfg.ALU_FORWARD, acc_bits=acc_bits,
                               lanes=cfg.BATCH * cfg.BLOCK_OUT)

    def _decode(self, m, p) -> None:
        """Instruction decode: the register ``insn`` holding the running instruction (its
        ordinal ``insn_ord``), the field accessors of it (``mf``/``gf``/``af``) and of the
        queue head (``hgf``), and the GEMM/ALU fields the sequencer and the micro-op
        controls use (a clearing REQ is told apart from a reset here)."""
        cfg = self.cfg
        insn = Signal(128)
        insn_ord = Signal(32)  # ordinal of the instruction in ``insn``
        head = self.cmd.data
        with m.If(self.cmd.ready):
            m.d.sync += insn_ord.eq(self.ord_next)
        opcode = header_view(insn).opcode

        def mf(name):
            return insn_field(cfg, insn, "mem", name)

        def gf(name):
            return insn_field(cfg, insn, "gemm", name)

        def af(name):
            return insn_field(cfg, insn, "alu", name)

        def hgf(name):
            return insn_field(cfg, head, "gemm", name)

        is_alu = opcode == Opcode.ALU
        reset = gf("reset")
        alu_op = af("alu_opcode")
        use_imm = af("use_imm")
        clear = None
        if cfg.ALU_REQUANT:
            # A clearing REQ (reset on ALU REQ, docs/isa.md "REQ") reads dst/src like REQ and
            # is no reset anywhere (hazards, index checks, source cache, counters); only its
            # stage-D write differs: the result goes to OUT, 0 to ACC.
            clear = is_alu & reset & (alu_op == AluOp.REQ)
            reset = reset & ~clear
        # DEPTHWISE_TAPS: the GEMM's depthwise flag (the same bit is an ALU factor's)
        dw = (~is_alu & gf("depthwise")) if cfg.DEPTHWISE_TAPS else None
        vars(p).update(
            insn=insn, insn_ord=insn_ord, head=head, ih=header_view(insn),
            hh=header_view(head), opcode=opcode, mf=mf, hgf=hgf, mt=mf("memory_type"),
            is_alu=is_alu, reset=reset, clear=clear, dw=dw, alu_op=alu_op, use_imm=use_imm,
            imm=af("imm"), alu_tensor=is_alu & ~use_imm & ~reset,
            uop_bgn=gf("uop_bgn"), uop_end=gf("uop_end"), iter_out=gf("iter_out"),
            iter_in=gf("iter_in"), dfo=gf("dst_factor_out"), dfi=gf("dst_factor_in"),
            sfo=Mux(is_alu, af("src_factor_out"), gf("src_factor_out")),
            sfi=Mux(is_alu, af("src_factor_in"), gf("src_factor_in")),
            wfo=gf("wgt_factor_out"), wfi=gf("wgt_factor_in"))

    def _load_path(self, m, p) -> None:
        """The LOAD path: the running instruction's fields to the tensor loader, its UOP
        writes, and its accumulator write (``ld_acc_en``/``ld_acc_data``: ACC as is, ACC8
        sign-extended per lane), which stage D's write port gives way to."""
        cfg = self.cfg
        ld, mf, mt, lanes = p.ld, p.mf, p.mt, p.lanes
        AW = cfg.ACC_WIDTH
        for name in ("sram_base", "dram_base", "y_size", "x_size", "x_stride", "y_pad_0",
                     "y_pad_1", "x_pad_0", "x_pad_1"):
            m.d.comb += getattr(ld, name).eq(mf(name))
        m.d.comb += ld.sel.eq(Mux(mt == MemType.UOP, 0, Mux(mt == MemType.ACC, 1, 2)))

        # loader writes
        m.d.comb += [p.uop_mem.w_addr.eq(ld.w_addr), p.uop_mem.w_data.eq(ld.w_data0),
                     p.uop_mem.w_en.eq(ld.w_en0)]
        ld_acc_en = Signal()
        ld_acc_data = Signal(p.acc_bits)
        if cfg.ACC_8BIT:
            acc8_ext = Signal(p.acc_bits)
            for i in range(lanes):
                m.d.comb += acc8_ext.word_select(i, AW).eq(ld.w_data2.word_select(i, 8).as_signed())
            m.d.comb += [ld_acc_en.eq(ld.w_en1 | ld.w_en2),
                         ld_acc_data.eq(Mux(ld.w_en2, acc8_ext, ld.w_data1))]
        else:
            m.d.comb += [ld_acc_en.eq(ld.w_en1), ld_acc_data.eq(ld.w_data1)]
        vars(p).update(ld_acc_en=ld_acc_en, ld_acc_data=ld_acc_data)

    def _stage_a(self, m, p) -> None:
        """Stage A, the loop sequencer: started by ``seq_start`` with the queue head's
        fields, it walks micro-op ``k`` and the two loop counters, reads the micro-op and
        hands it with its loop offsets and the instruction's controls to stage B."""
        cfg = self.cfg
        uop_mem, hgf = p.uop_mem, p.hgf
        LA, LS, LWd = cfg.LOG_ACC_DEPTH, max(cfg.LOG_ACC_DEPTH, cfg.LOG_INP_DEPTH), cfg.LOG_WGT_DEPTH
        k = Signal(cfg.LOG_UOP_DEPTH + 1)
        i_cnt = Signal(LIMITS.iter_bits)
        j_cnt = Signal(LIMITS.iter_bits)
        # loop offsets, two bits wider than the indices: up to the first out-of-range index
        # every offset is below twice the depth and the sequencer runs at most one offset
        # ahead of stage B, so the offsets that reach B before a fault are exact
        d_o, d_c = Signal(LA + 2), Signal(LA + 2)
        s_o, s_c = Signal(LS + 2), Signal(LS + 2)
        w_o, w_c = Signal(LWd + 2), Signal(LWd + 2)
        gen_active = Signal()
        seq_start = Signal()
        advance_a = Signal()

        b_valid = Signal()
        b_doff, b_soff, b_woff = Signal(LA + 2), Signal(LS + 2), Signal(LWd + 2)
        b_ord = Signal(32)
        kill_b = Signal()   # the micro-op in B is dropped (out of range, or the core halted)
        a_oob = Signal()    # the micro-op index in A is past the UOP depth
        advance_b = Signal()
        phase = Signal()

        m.d.comb += [uop_mem.r_addr.eq(k), uop_mem.r_en.eq(advance_a)]
        # seq_start comes with the acceptance of the instruction at the queue head (``insn``
        # is loaded at the same edge), so the first micro-op is read in the next cycle.
        with m.If(seq_start):
            m.d.sync += [k.eq(hgf("uop_bgn")), i_cnt.eq(0), j_cnt.eq(0), d_o.eq(0), d_c.eq(0),
                         s_o.eq(0), s_c.eq(0), w_o.eq(0), w_c.eq(0),
                         gen_active.eq((hgf("iter_out") != 0) & (hgf("iter_in") != 0)
                                       & (hgf("uop_end") > hgf("uop_bgn")))]
        m.d.comb += a_oob.eq(k[cfg.LOG_UOP_DEPTH])
        a_ready = gen_active & (~b_valid | advance_b)
        m.d.comb += advance_a.eq(a_ready & ~a_oob & ~self.halt)
        # per-instruction controls travel with the micro-op, so the next GEMM/ALU can enter
        # stage A while the previous one's micro-ops are still in B..D
        b_alu, b_tensor, b_reset, b_imm_sel = Signal(), Signal(), Signal(), Signal()
        b_op = Signal(LIMITS.alu_opcode_bits)
        b_imm = Signal(signed(LIMITS.imm_bits))
        b_clear = None
        if cfg.ALU_REQUANT:
            b_clear = Signal()
            with m.If(advance_a):
                m.d.sync += b_clear.eq(p.clear)
        b_dw = None
        if cfg.DEPTHWISE_TAPS:
            b_dw = Signal()
            with m.If(advance_a):
                m.d.sync += b_dw.eq(p.dw)
        with m.If(advance_a):
            m.d.sync += [b_doff.eq(d_c), b_soff.eq(s_c), b_woff.eq(w_c), b_ord.eq(p.insn_ord),
                         b_alu.eq(p.is_alu), b_tensor.eq(p.alu_tensor), b_reset.eq(p.reset),
                         b_imm_sel.eq(p.use_imm), b_op.eq(p.alu_op), b_imm.eq(p.imm)]
            with m.If(k != p.uop_end - 1):
                m.d.sync += k.eq(k + 1)
            with m.Else():
                m.d.sync += k.eq(p.uop_bgn)
                with m.If(j_cnt != p.iter_in - 1):
                    m.d.sync += [j_cnt.eq(j_cnt + 1), d_c.eq(d_c + p.dfi), s_c.eq(s_c + p.sfi),
                                 w_c.eq(w_c + p.wfi)]
                with m.Else():
                    m.d.sync += [j_cnt.eq(0), d_o.eq(d_o + p.dfo), d_c.eq(d_o + p.dfo),
                                 s_o.eq(s_o + p.sfo), s_c.eq(s_o + p.sfo), w_o.eq(w_o + p.wfo),
                                 w_c.eq(w_o + p.wfo)]
                    with m.If(i_cnt != p.iter_out - 1):
                        m.d.sync += i_cnt.eq(i_cnt + 1)
                    with m.Else():
                        m.d.sync += gen_active.eq(0)
        with m.If(advance_a):
            m.d.sync += b_valid.eq(1)
        with m.Elif(advance_b):
            m.d.sync += b_valid.eq(0)
        # a fault (here or anywhere in the core) stops the sequencer
        with m.If((a_ready & a_oob) | kill_b | self.halt):
            m.d.sync += gen_active.eq(0)
        vars(p).update(
            LA=LA, LS=LS, LWd=LWd, k=k, gen_active=gen_active, seq_start=seq_start,
            a_ready=a_ready, a_oob=a_oob, b_valid=b_valid, b_doff=b_doff, b_soff=b_soff,
            b_woff=b_woff, b_ord=b_ord, kill_b=kill_b, advance_b=advance_b, phase=phase,
            b_alu=b_alu, b_tensor=b_tensor, b_reset=b_reset, b_imm_sel=b_imm_sel, b_op=b_op,
            b_imm=b_imm, b_clear=b_clear, b_dw=b_dw)

    def _stage_b_index(self, m, p) -> None:
        """Stage B, indices and faults: ``dst``/``src``/``wgt`` = micro-op field + loop
        offset, checked in full width against their scratchpads (the same set as fsim); the
        unit's fault report (``err*``): stage B's index, else stage A's micro-op index,
        else the loader's write address."""
        cfg = self.cfg
        LA, LS, LWd, b_valid, b_tensor, b_alu, b_reset = (p.LA, p.LS, p.LWd, p.b_valid,
                                                           p.b_tensor, p.b_alu, p.b_reset)
        uop = p.uop_mem.r_data
        dst = Signal(LA)
        src = Signal(LS)
        wgt = Signal(LWd)
        dst_full, src_full, wgt_full = Signal(LA + 2), Signal(LS + 2), Signal(LWd + 2)
        m.d.comb += [dst_full.eq(insn_uop(cfg, uop, "dst") + p.b_doff),
                     src_full.eq(insn_uop(cfg, uop, "src") + p.b_soff),
                     wgt_full.eq(insn_uop(cfg, uop, "wgt") + p.b_woff),
                     dst.eq(dst_full), src.eq(src_full), wgt.eq(wgt_full)]
        # index checks (the same set as fsim: dst always; GEMM src in INP and wgt unless
        # reset; tensor-ALU src in ACC), reported dst before src before wgt
        v_dst = dst_full >= cfg.ACC_DEPTH
        v_src_acc = b_tensor & (src_full >= cfg.ACC_DEPTH)
        inp_full = src_full
        if cfg.DEPTHWISE_TAPS:  # a depthwise GEMM reads src..src+T-1: the last is checked
            inp_full = Signal(LS + 3)
            m.d.comb += inp_full.eq(src_full + Mux(p.b_dw, cfg.DEPTHWISE_TAPS - 1, 0))
        v_src_inp = ~b_alu & ~b_reset & (inp_full >= cfg.INP_DEPTH)
        v_wgt = ~b_alu & ~b_reset & (wgt_full >= cfg.WGT_DEPTH)
        b_fault = Signal()
        m.d.comb += [b_fault.eq(b_valid & (v_dst | v_src_acc | v_src_inp | v_wgt)),
                     p.kill_b.eq(b_valid & (b_fault | self.halt))]
        with m.If(b_fault & ~self.halt):
            m.d.comb += [self.err.eq(1), self.err_ord.eq(p.b_ord)]
            with m.If(v_dst):
                m.d.comb += [self.err_kind.eq(ErrorKind.ACC_DST), self.err_index.eq(dst_full)]
            with m.Elif(v_src_acc):
                m.d.comb += [self.err_kind.eq(ErrorKind.ACC_SRC), self.err_index.eq(src_full)]
            with m.Elif(v_src_inp):
                m.d.comb += [self.err_kind.eq(ErrorKind.INP_SRC), self.err_index.eq(inp_full)]
            with m.Else():
                m.d.comb += [self.err_kind.eq(ErrorKind.WGT), self.err_index.eq(wgt_full)]
        with m.Elif(p.a_ready & p.a_oob & ~self.halt):
            m.d.comb += [self.err.eq(1), self.err_ord.eq(p.insn_ord),
                         self.err_kind.eq(ErrorKind.UOP), self.err_index.eq(p.k)]
        with m.Elif(p.ld.oob):
            m.d.comb += [self.err.eq(1), self.err_ord.eq(p.insn_ord),
                         self.err_kind.eq(ErrorKind.SRAM), self.err_index.eq(p.ld.oob_addr)]
        vars(p).update(dst=dst, src=src, wgt=wgt)

    def _stage_b_hazard(self, m, p) -> None:
        """Stage B, hazards and reads: the read-after-write wait of an ALU micro-op (less
        what ``ALU_FORWARD`` forwards), the tensor-operand cache, the two-read phase, the
        scratchpad reads, and the controls registered into stage C."""
        cfg = self.cfg
        LA, b_valid, b_alu, b_tensor, phase, dst, src = (p.LA, p.b_valid, p.b_alu, p.b_tensor,
                                                         p.phase, p.dst, p.src)
        kill_b, advance_b, acc_mem, fw = p.kill_b, p.advance_b, p.acc_mem, p.fw
        c_valid, c_dst = Signal(), Signal(LA)
        d_valid, d_dst = Signal(), Signal(LA)
        hazard = Signal()
        # ALU_FORWARD (docs/hardware.md "ALU forwarding"): ``fwd`` = the micro-op in C, an
        # ALU one but REQ, writes this one's destination: C takes D's ``d_res`` instead.
        dst_wait = (c_valid & (c_dst == dst)) | (d_valid & (d_dst == dst))
        if fw:
            fwd, c_fwdable = Signal(), Signal()
            m.d.comb += fwd.eq(b_valid & b_alu & c_valid & c_fwdable & (c_dst == dst))
            dst_wait = dst_wait & ~fwd
        # GEMM never stalls: stage D forwards the accumulator writes its read missed (see
        # below).  ALU evaluates its lanes in C from the read value, so it still waits until
        # an older micro-op writing its destination (or tensor source) has left D.
        m.d.comb += hazard.eq(b_alu & (
            dst_wait |
            (b_tensor & ((c_valid & (c_dst == src[:LA])) | (d_valid & (d_dst == src[:LA]))))))
        # Tensor-operand cache: ``src_reg`` keeps the last tensor operand read (entry
        # ``src_tag``) until any accumulator write to that entry.  A tensor ALU micro-op whose
        # source hits it skips the extra read cycle (the bias add reads one source entry
        # for a whole row of destinations).  Writes still in C/D are covered by the hazard
        # check above, so a hit is always the current contents.
        src_reg = Signal(p.acc_bits)
        src_tag = Signal(LA)
        src_tag_v = Signal()
        need_src = Signal()
        # a forwarded micro-op reads its source in its one B cycle and C keeps it: while C
        # holds one (``c_rd_src``), its entry is the cache's next content, the only hit
        if fw:
            c_rd_src, c_src = Signal(), Signal(LA)
            pending = c_valid & c_rd_src
            m.d.comb += need_src.eq(b_tensor & ~Mux(pending, c_src == src[:LA],
                                                    src_tag_v & (src_tag == src[:LA])))
        else:
            c_rd_src = None
            m.d.comb += need_src.eq(b_tensor & ~(src_tag_v & (src_tag == src[:LA])))
        # two reads (source, then destination: the phase cycle) or at most one
        two = (need_src & ~fwd) if fw else need_src
        one = ~two
        ee_block = None
        if p.eng:
            # the REQ engine holds this micro-op's entry, or takes its bank's read port
            ee_block = Signal()
            m.d.comb += advance_b.eq(b_valid & (kill_b | ((phase | (~hazard & one))
                                                          & ~ee_block)))
            with m.If(b_valid & two & ~phase & ~hazard & ~kill_b & ~ee_block):
                m.d.sync += phase.eq(1)
        else:
            m.d.comb += advance_b.eq(b_valid & (kill_b | phase | (~hazard & one)))
            with m.If(b_valid & two & ~phase & ~hazard & ~kill_b):
                m.d.sync += phase.eq(1)
        with m.If(advance_b):
            m.d.sync += phase.eq(0)
        with m.If(acc_mem.w_en & (acc_mem.w_addr == src_tag)):
            m.d.sync += src_tag_v.eq(0)
        with m.If(phase):
            m.d.sync += [src_reg.eq(acc_mem.r_data), src_tag.eq(src[:LA]), src_tag_v.eq(1)]
        m.d.comb += [acc_mem.r_addr.eq(Mux(phase | ~need_src, dst, src[:LA])),
                     acc_mem.r_en.eq(1),
                     self.inp_r_addr.eq(src[:cfg.LOG_INP_DEPTH]), self.wgt_r_addr.eq(p.wgt)]
        c_alu, c_reset, c_imm_sel = Signal(), Signal(), Signal()
        c_op = Signal(LIMITS.alu_opcode_bits)
        c_imm = Signal(signed(LIMITS.imm_bits))
        m.d.sync += [c_valid.eq(advance_b & ~kill_b), c_dst.eq(dst), c_alu.eq(b_alu), c_reset.eq(p.b_reset),
                     c_imm_sel.eq(p.b_imm_sel), c_op.eq(p.b_op), c_imm.eq(p.b_imm)]
        c_clear = None
        if cfg.ALU_REQUANT:
            c_clear = Signal()
            m.d.sync += c_clear.eq(p.b_clear)
        c_dw = None
        if cfg.DEPTHWISE_TAPS:
            c_dw = Signal()
            m.d.sync += c_dw.eq(p.b_dw)
        c_fwd = None
        if fw:
            c_fwd = Signal()
            m.d.sync += [c_fwd.eq(fwd), c_rd_src.eq(fwd & need_src), c_src.eq(src[:LA])]
            fwd_ok = c_alu & ((c_op != AluOp.REQ) | c_reset) if cfg.ALU_REQUANT else c_alu
            m.d.comb += c_fwdable.eq(fwd_ok)
            with m.If(c_valid & c_rd_src):  # the source this micro-op read: the cache's
                m.d.sync += [src_reg.eq(acc_mem.r_data), src_tag.eq(c_src), src_tag_v.eq(1)]
        vars(p).update(
            c_valid=c_valid, c_dst=c_dst, d_valid=d_valid, d_dst=d_dst, src_reg=src_reg,
            src_tag_v=src_tag_v, need_src=need_src, ee_block=ee_block, c_alu=c_alu,
            c_reset=c_reset, c_imm_sel=c_imm_sel, c_op=c_op, c_imm=c_imm, c_clear=c_clear,
            c_fwd=c_fwd, c_rd_src=c_rd_src, c_dw=c_dw)

    def _stage_c(self, m, p) -> None:
        """Stage C: the ALU lanes (operands: the accumulator read, or with ``ALU_FORWARD``
        stage D's result; the immediate, the tensor read or the cache) and the GEMM
        array's products, each registered only for its kind of micro-op."""
        cfg = self.cfg
        AW, lanes, fw = cfg.ACC_WIDTH, p.lanes, p.fw
        c_valid, c_alu, c_op, c_imm = p.c_valid, p.c_alu, p.c_op, p.c_imm
        # Datapath registers (products, lane results, read and forwarded values) have no
        # reset: every use is qualified by a valid bit that has one.  The products load
        # only when C holds a GEMM micro-op and the lane results only for an ALU one (D
        # reads each only for that kind), so an idle or other-kind cycle evaluates neither.
        acc_in = p.acc_mem.r_data
        d_acc = Signal(p.acc_bits, reset_less=True)
        d_res = Signal(p.acc_bits, reset_less=True)
        c_gemm = Signal()
        m.d.comb += c_gemm.eq(c_valid & ~c_alu & ~p.c_reset)
        m.d.sync += [p.d_valid.eq(c_valid), p.d_dst.eq(p.c_dst), d_acc.eq(acc_in)]
        # ALU lanes
        b_elem = Signal(p.acc_bits)
        imm_ext = Signal(signed(AW))
        m.d.comb += imm_ext.eq(c_imm)
        if cfg.ALU_REQUANT:     # REQ's immediate is its parameters: with use_imm, b = 0
            imm_lanes = Mux(c_op == AluOp.REQ, 0, Cat(*([imm_ext] * lanes)))
        else:
            imm_lanes = Cat(*([imm_ext] * lanes))
        d_reset = Signal() if fw else None
        if fw:
            # a: D's result (0 for a reset) or the read; b: the source read now or the cache
            a_elem = Signal(p.acc_bits)
            m.d.comb += [a_elem.eq(Mux(p.c_fwd, Mux(d_reset, 0, d_res), acc_in)),
                         b_elem.eq(Mux(p.c_imm_sel, imm_lanes,
                                       Mux(p.c_rd_src, acc_in, p.src_reg)))]
        else:
            a_elem = acc_in
            m.d.comb += b_elem.eq(Mux(p.c_imm_sel, imm_lanes, p.src_reg))
        with m.If(c_valid & c_alu):
            for ln in range(lanes):
                m.d.sync += d_res.word_select(ln, AW).eq(
                    alu_lane(cfg, c_op, a_elem.word_select(ln, AW), b_elem.word_select(ln, AW),
                             c_imm, clip=False))
        prod = self._gemm_products(m, c_gemm)  # (b, o, i) -> registered product
        dw_prod, d_dw = None, None
        if cfg.DEPTHWISE_TAPS:
            c_dwp = Signal()
            d_dw = Signal()
            m.d.comb += c_dwp.eq(c_gemm & p.c_dw)
            m.d.sync += d_dw.eq(p.c_dw)
            dw_prod = self._depthwise_products(m, c_dwp)
        if not fw:
            d_reset = Signal()
        d_alu = Signal()
        m.d.sync += [d_reset.eq(p.c_reset), d_alu.eq(c_alu)]
        vars(p).update(d_acc=d_acc, d_res=d_res, prod=prod, d_reset=d_reset, d_alu=d_alu,
                       dw_prod=dw_prod, d_dw=d_dw)

    def _stage_d(self, m, p) -> None:
        """Stage D: each dot product summed into the accumulator value (forwarded from the
        two newest accumulator writes), the REQ clip, and the ACC and OUT writes (the
        loader's write first)."""
        cfg = self.cfg
        B, BI, BO = cfg.BATCH, cfg.BLOCK_IN, cfg.BLOCK_OUT
        AW, lanes, acc_bits = cfg.ACC_WIDTH, p.lanes, p.acc_bits
        LA, acc_mem, d_dst, d_res, prod = p.LA, p.acc_mem, p.d_dst, p.d_res, p.prod
        # Forwarding: the accumulator value a micro-op in D adds to was read when it left B,
        # two cycles ago; the writes of those two cycles (w2: two cycles ago, w1: last
        # cycle) are not in it.  Every accumulator write is remembered for two cycles and
        # the newest one to the same entry replaces the read value, so back-to-back GEMM
        # micro-ops updating one entry sum correctly at one micro-op per cycle.
        w1_v, w1_a, w1_d = Signal(), Signal(LA), Signal(acc_bits)
        w2_v, w2_a, w2_d = Signal(), Signal(LA), Signal(acc_bits)
        m.d.sync += [w1_v.eq(acc_mem.w_en), w1_a.eq(acc_mem.w_addr), w1_d.eq(acc_mem.w_data),
                     w2_v.eq(w1_v), w2_a.eq(w1_a), w2_d.eq(w1_d)]
        d_base = Signal(acc_bits)
        m.d.comb += d_base.eq(Mux(w1_v & (w1_a == d_dst), w1_d,
                                  Mux(w2_v & (w2_a == d_dst), w2_d, p.d_acc)))
        gemm_res = Signal(acc_bits)
        for b in range(B):
            for o in range(BO):
                # the lane's accumulator value plus the tree's signed sum: a signed add (Yosys
                # maps it to fewer LUTs than an unsigned add of the sign-extended sum)
                tree = _offset_sum([prod[(b, o, i)] for i in range(BI)])
                if cfg.DEPTHWISE_TAPS:  # a depthwise micro-op: its T taps' sum instead
                    dw_tree = _offset_sum([p.dw_prod[(b, o, t)]
                                           for t in range(cfg.DEPTHWISE_TAPS)])
                    tree = Mux(p.d_dw, dw_tree, tree)
                lane = d_base.word_select(b * BO + o, AW).as_signed()
                m.d.comb += gemm_res.word_select(b * BO + o, AW).eq((lane + tree)[:AW])
        alu_res = d_res
        if cfg.ALU_REQUANT:     # REQ: C shifted the sum, D clips it (two shorter paths)
            d_req = Signal()
            d_clear = Signal()
            d_imm = Signal(LIMITS.imm_bits)
            m.d.sync += [d_req.eq(p.c_alu & (p.c_op == AluOp.REQ)), d_clear.eq(p.c_clear),
                         d_imm.eq(p.c_imm)]
            alu_res = Signal(acc_bits)
            m.d.comb += alu_res.eq(Mux(d_req, Cat(*[req_clip(cfg, d_res.word_select(ln, AW),
                                                             d_imm, m, f"d_clip_{ln}")
                                                    for ln in range(lanes)]),
                                       d_res))
        result = Signal(acc_bits)
        m.d.comb += result.eq(Mux(p.d_reset, 0, Mux(p.d_alu, alu_res, gemm_res)))
        ld_acc_en, ld_acc_data = p.ld_acc_en, p.ld_acc_data
        acc_w_data = Mux(ld_acc_en, ld_acc_data, result)
        if cfg.ALU_REQUANT:     # OUT gets every write's value; ACC gets 0 from a clearing REQ
            out_data = Signal(acc_bits)
            m.d.comb += out_data.eq(acc_w_data)
            acc_w_data = Mux(ld_acc_en, ld_acc_data, Mux(d_clear, 0, result))
        m.d.comb += [
            acc_mem.w_en.eq(Mux(ld_acc_en, 1, p.d_valid)),
            acc_mem.w_addr.eq(Mux(ld_acc_en, p.ld.w_addr, d_dst)),
            acc_mem.w_data.eq(acc_w_data),
        ]
        m.d.comb += [self.out_w_en.eq(acc_mem.w_en), self.out_w_addr.eq(acc_mem.w_addr),
                     self.out_w_data.eq(self._truncate(out_data if cfg.ALU_REQUANT
                                                       else acc_mem.w_data))]
        m.d.comb += [self.gemm_uop.eq(p.d_valid & ~p.d_alu & ~p.d_reset),
                     self.alu_uop.eq(p.d_valid & p.d_alu & ~p.d_reset)]

    def _control(self, m, p) -> None:
        """The control FSM (:class:`ComputeState`): takes instructions from the queue head
        when their tokens are ready, runs LOADs and FINISH in DECODE/LOAD, GEMM/ALU in EXEC
        (a following one entering the sequencer behind it) and pushes tokens; with
        ``REQ_ENGINE`` it hands the engine's kind of instruction to :meth:`_req_engine`."""
        cfg = self.cfg
        eng, hh, head, ih, ld, mt = p.eng, p.hh, p.head, p.ih, p.ld, p.mt
        insn, seq_start, gen_active = p.insn, p.seq_start, p.gen_active
        pipe_empty = ~gen_active & ~p.b_valid & ~p.c_valid & ~p.d_valid
        head_exec = (hh.opcode == Opcode.GEMM) | (hh.opcode == Opcode.ALU)
        head_ok = tokens_ready(self, Unit.COMPUTE, hh)

        def accept_main():
            m.d.comb += [self.cmd.ready.eq(1), *pop_tokens(self, Unit.COMPUTE, hh)]
            m.d.sync += insn.eq(head)
            with m.If(head_exec):
                m.d.comb += seq_start.eq(1)
                m.next = "EXEC"
            with m.Else():
                m.next = "DECODE"

        if eng:
            ee = self._req_engine(m, p, pipe_empty)
        with m.FSM(name="compute_fsm"):
            with m.State("IDLE"):
                m.d.comb += self.state.eq(ComputeState.IDLE)
                with m.If(self.cmd.valid):
                    if eng:
                        with m.If(head_ok & ~ee.block_head):
                            with m.If(ee.candidate):
                                m.d.comb += ee.prep.eq(1)
                                m.next = "EPREP"
                            with m.Else():
                                accept_main()
                        with m.Elif(~head_ok):
                            m.d.comb += [self.stall.eq(1),
                                         self.state.eq(ComputeState.WAIT_TOKEN)]
                    else:
                        with m.If(head_ok):
                            accept_main()
                        with m.Else():
                            m.d.comb += [self.stall.eq(1),
                                         self.state.eq(ComputeState.WAIT_TOKEN)]
            if eng:
                with m.State("EPREP"):
                    # the micro-op of a one-micro-op REQ was read in IDLE; in range, the
                    # engine takes the instruction, else the pipeline runs it (and faults)
                    m.d.comb += [self.state.eq(ComputeState.DECODE), self.busy.eq(1)]
                    with m.If(ee.in_range):
                        m.d.comb += [self.cmd.ready.eq(1), *pop_tokens(self, Unit.COMPUTE, hh),
                                     ee.take.eq(1)]
                        m.next = "IDLE"
                    with m.Else():
                        accept_main()
            with m.State("DECODE"):
                m.d.comb += [self.state.eq(ComputeState.DECODE), self.busy.eq(1)]
                load_ok = (mt == MemType.UOP) | (mt == MemType.ACC)
                if cfg.ACC_8BIT:
                    load_ok = load_ok | (mt == MemType.ACC8)
                with m.If((p.opcode == Opcode.LOAD) & (p.mf("x_size") != 0) & load_ok):
                    m.d.comb += ld.start.eq(1)
                    m.next = "LOAD"
                with m.Elif(p.opcode == Opcode.FINISH):
                    m.d.comb += self.finish.eq(1)
                    m.next = "PUSH"
                with m.Else():
                    m.next = "PUSH"
            with m.State("LOAD"):
                m.d.comb += [self.state.eq(ComputeState.LOAD), self.busy.eq(1)]
                with m.If(ld.done):
                    m.next = "PUSH"
            with m.State("EXEC"):
                # Once the sequencer has issued the last micro-op, a following GEMM/ALU is
                # accepted and started behind it, unless this instruction pushes a token
                # (it must first drain: its writes have to land before the push).  The
                # hazard check and the accumulator forwarding work across instructions.
                m.d.comb += [self.state.eq(ComputeState.GEMM_ALU), self.busy.eq(1)]
                with m.If(~gen_active):
                    # with the REQ engine an instruction of the engine's kind is taken in
                    # IDLE (where the engine takes it), never behind another instruction
                    cont = (~pushes_any(Unit.COMPUTE, ih) & self.cmd.valid & head_exec
                            & head_ok)
                    if eng:
                        cont = cont & ~ee.block_head & ~ee.kind
                    with m.If(cont):
                        m.d.comb += [self.cmd.ready.eq(1), *pop_tokens(self, Unit.COMPUTE, hh),
                                     seq_start.eq(1)]
                        m.d.sync += insn.eq(head)
                    with m.Elif(pipe_empty):
                        m.d.comb += push_tokens(self, Unit.COMPUTE, ih)
                        if eng:
                            m.d.comb += ee.main_push.eq(1)
                        m.next = "IDLE"
            with m.State("PUSH"):
                m.d.comb += [self.state.eq(ComputeState.PUSH), self.busy.eq(1),
                             *push_tokens(self, Unit.COMPUTE, ih)]
                if eng:
                    m.d.comb += ee.main_push.eq(1)
                m.next = "IDLE"
        if eng:
            self._req_engine_overrides(m, p, ee)


    def _gemm_products(self, m, c_gemm) -> dict:
        """The GEMM array's products, registered in stage C while it holds a GEMM micro-op
        (``c_gemm``): ``(b, o, i) -> signed INP_WIDTH + WGT_WIDTH-bit signal``; DSP-packed
        pairs (:func:`_packed_mul`) where ``cfg.packs_dsp_pairs``, the first
        ``LUT_MULTIPLIERS`` from LUTs (:func:`lut_multiply`)."""
        cfg = self.cfg
        B, BI, BO = cfg.BATCH, cfg.BLOCK_IN, cfg.BLOCK_OUT
        IW, WW = cfg.INP_WIDTH, cfg.WGT_WIDTH
        inp_e = self.inp_r_data
        wgt_e = self.wgt_r_data
        prod = {}  # (b, o, i) -> registered signed product
        pw = IW + WW
        n_lut = cfg.LUT_MULTIPLIERS
        packing = cfg.packs_dsp_pairs    # int4 weights: sign-extended into the same pair
        idx = 0
        for b in range(B):
            for i in range(BI):
                a = inp_e.word_select(b * BI + i, IW).as_signed()
                o = 0
                while o < BO:
                    pair = packing and o + 1 < BO and idx >= n_lut and idx + 1 >= n_lut
                    if pair:
                        wl = wgt_e.word_select(o * BI + i, WW).as_signed()
                        wh = wgt_e.word_select((o + 1) * BI + i, WW).as_signed()
                        lo, hi = _packed_mul(m, a, wl, wh)
                        for oo, v in ((o, lo), (o + 1, hi)):
                            r = Signal(signed(pw), name=f"p_{b}_{oo}_{i}", reset_less=True)
                            with m.If(c_gemm):
                                m.d.sync += r.eq(v)
                            prod[(b, oo, i)] = r
                        idx += 2
                        o += 2
                        continue
                    w_ = wgt_e.word_select(o * BI + i, WW).as_signed()
                    r = Signal(signed(pw), name=f"p_{b}_{o}_{i}", reset_less=True)
                    with m.If(c_gemm):
                        if idx < n_lut:
                            m.d.sync += r.eq(lut_multiply(a, w_))
                        else:
                            m.d.sync += r.eq(a * w_)
                    prod[(b, o, i)] = r
                    idx += 1
                    o += 1
        return prod

    def _depthwise_products(self, m, c_dwp) -> dict:
        """The depthwise products (``DEPTHWISE_TAPS`` T), registered in stage C while it
        holds a depthwise GEMM micro-op (``c_dwp``): ``(b, o, t) -> inp[src + t][b][o] ×
        wgt[o][t]``, signed 16-bit, from the INP scratchpad's T taps (``inp_r_taps``) and
        the weight tile's first T columns.  A set of ``BATCH × BLOCK_OUT × T`` multipliers
        of their own (the array's DSP-packed pairs share an activation, which no two
        depthwise products do): LUT-built (:func:`lut_multiply`) when the whole array is
        (``LUT_MULTIPLIERS`` = BATCH × BLOCK_IN × BLOCK_OUT), else ``$mul`` cells (DSPs)."""
        cfg = self.cfg
        B, BI, BO, T = cfg.BATCH, cfg.BLOCK_IN, cfg.BLOCK_OUT, cfg.DEPTHWISE_TAPS
        IW, WW = cfg.INP_WIDTH, cfg.WGT_WIDTH
        ebits = cfg.elem_bits(MemType.INP)
        lut = cfg.LUT_MULTIPLIERS == B * BI * BO
        prod = {}
        for t in range(T):
            tap = self.inp_r_taps[t * ebits:(t + 1) * ebits]
            for b in range(B):
                for o in range(BO):
                    a = tap.word_select(b * BI + o, IW).as_signed()
                    w_ = self.wgt_r_data.word_select(o * BI + t, WW).as_signed()
                    r = Signal(signed(IW + WW), name=f"dwp_{b}_{o}_{t}", reset_less=True)
                    with m.If(c_dwp):
                        m.d.sync += r.eq(lut_multiply(a, w_) if lut else a * w_)
                    prod[(b, o, t)] = r
        return prod

    # ------------------------------------------------------------------ REQ engine
    def _req_engine(self, m, p, pipe_empty) -> SimpleNamespace:
        """The requantize engine (``REQ_ENGINE``): runs one ALU REQ instruction of one
        micro-op, or one ALU reset of one micro-op, beside the GEMM pipeline.  Returns a
        namespace of the signals the control FSM uses (``candidate``, ``prep``,
        ``in_range``, ``take``, ``block_head``, ``main_push``, ``kind``); the overrides
        emitted after the FSM are :meth:`_req_engine_overrides`.

        Order (results as if in order, docs/hardware.md "REQ engine"): the engine takes an
        instruction only with the pipeline empty, so every older write has landed; while
        it runs, a pipeline micro-op whose accumulator entry lies in the engine's
        destination or source range waits in stage B, and the pipeline takes no ALU
        instruction, no FINISH, no ACC/ACC8 LOAD, no instruction pushing to the store unit
        (whose STOREs read the OUT view the engine writes) and none pushing to the load
        unit when the engine's instruction does.  Ports: the engine reads through bank
        port 1 first (the pipeline's stage B waits that cycle if it wanted the same bank)
        and writes through port 1 two cycles after stage B held that bank's micro-op, so
        stage D never writes it then.  One entry per cycle (two when the tensor source misses the engine's
        source register)."""
        cfg = self.cfg
        LA = cfg.LOG_ACC_DEPTH
        hgf, head = p.hgf, p.head

        def haf(name):
            return insn_field(cfg, head, "alu", name)

        ns = SimpleNamespace(candidate=Signal(name="ee_candidate"), prep=Signal(name="ee_prep"),
                             in_range=Signal(name="ee_in_range"), take=Signal(name="ee_take"),
                             block_head=Signal(name="ee_block_head"),
                             main_push=Signal(name="ee_main_push"), haf=haf)
        busy = Signal(name="ee_busy")
        ns.busy = busy
        # instruction fields, latched when taken
        io, ii = Signal(len(hgf("iter_out"))), Signal(len(hgf("iter_in")))
        dfo, dfi = Signal(len(hgf("dst_factor_out"))), Signal(len(hgf("dst_factor_in")))
        sfo, sfi = Signal(len(haf("src_factor_out"))), Signal(len(haf("src_factor_in")))
        tensor, clear = Signal(name="ee_tensor"), Signal(name="ee_clear")
        zero = Signal(name="ee_zero")
        imm = Signal(LIMITS.imm_bits, name="ee_imm")
        push = SimpleNamespace(push_prev=Signal(name="ee_push_prev"),
                               push_next=Signal(name="ee_push_next"))
        d0, s0 = Signal(LA, name="ee_d0"), Signal(LA, name="ee_s0")
        dhi, shi = Signal(LA, name="ee_dhi"), Signal(LA, name="ee_shi")
        vars(ns).update(io=io, ii=ii, dfo=dfo, dfi=dfi, sfo=sfo, sfi=sfi, tensor=tensor,
                        clear=clear, zero=zero, imm=imm, push=push, d0=d0, s0=s0, dhi=dhi,
                        shi=shi)
        self._req_engine_take(m, p, ns, pipe_empty)
        self._req_engine_guard(m, p, ns)
        self._req_engine_pipeline(m, ns)
        return ns

    def _req_engine_take(self, m, p, ns, pipe_empty) -> None:
        """How the engine takes an instruction: ``kind``/``candidate`` (a one-micro-op REQ
        or ALU reset with work, the engine idle, the pipeline empty), the micro-op read in
        IDLE (``prep``), the range check of EPREP (``in_range``: the nest's last indices,
        as its factors are unsigned) and the fields latched at ``take``."""
        cfg = self.cfg
        LA = cfg.LOG_ACC_DEPTH
        hh, hgf, haf, uop_mem = p.hh, p.hgf, ns.haf, p.uop_mem
        # candidate: a one-micro-op REQ or ALU reset with work, the engine idle, the
        # pipeline empty
        h_req = haf("alu_opcode") == AluOp.REQ
        h_zero = haf("reset") & ~h_req      # a reset: zeros, no source read
        ns.kind = Signal(name="ee_kind")    # the engine's kind of instruction
        m.d.comb += [ns.kind.eq((hh.opcode == Opcode.ALU) & (h_req | haf("reset"))
                                & (hgf("uop_end") == hgf("uop_bgn") + 1)
                                & (hgf("iter_out") != 0) & (hgf("iter_in") != 0)),
                     ns.candidate.eq(ns.kind & ~ns.busy & pipe_empty)]
        with m.If(ns.prep):     # the pipeline's stage A is idle: borrow the micro-op read
            m.d.comb += [uop_mem.r_addr.eq(hgf("uop_bgn")), uop_mem.r_en.eq(1)]
        # EPREP: last indices of the nest (factors are unsigned, so first and last bound it)
        u_dst = insn_uop(cfg, uop_mem.r_data, "dst")
        u_src = insn_uop(cfg, uop_mem.r_data, "src")
        h_tensor = ~haf("use_imm") & ~h_zero
        d_last = Signal(LA + 28, name="ee_d_last")
        s_last = Signal(LA + 28, name="ee_s_last")
        m.d.comb += [
            d_last.eq(u_dst + (hgf("iter_out") - 1) * hgf("dst_factor_out")
                      + (hgf("iter_in") - 1) * hgf("dst_factor_in")),
            s_last.eq(u_src + (hgf("iter_out") - 1) * haf("src_factor_out")
                      + (hgf("iter_in") - 1) * haf("src_factor_in")),
            ns.in_range.eq((d_last < cfg.ACC_DEPTH) & (~h_tensor | (s_last < cfg.ACC_DEPTH))),
        ]
        with m.If(ns.take):
            m.d.sync += [ns.busy.eq(1), ns.io.eq(hgf("iter_out")), ns.ii.eq(hgf("iter_in")),
                         ns.dfo.eq(hgf("dst_factor_out")), ns.dfi.eq(hgf("dst_factor_in")),
                         ns.sfo.eq(haf("src_factor_out")), ns.sfi.eq(haf("src_factor_in")),
                         ns.tensor.eq(h_tensor), ns.clear.eq(haf("reset")), ns.zero.eq(h_zero),
                         ns.imm.eq(haf("imm")),
                         ns.push.push_prev.eq(hh.push_prev), ns.push.push_next.eq(hh.push_next),
                         ns.d0.eq(u_dst), ns.s0.eq(u_src), ns.dhi.eq(d_last),
                         ns.shi.eq(s_last)]

    def _req_engine_guard(self, m, p, ns) -> None:
        """What the pipeline may not do while the engine runs: take a head instruction that
        could break the order (``block_head``), or move a stage-B micro-op whose entries
        lie in the engine's ranges or whose bank's read port the engine takes this cycle
        (``ee_block``, ``steal``)."""
        cfg = self.cfg
        LA = cfg.LOG_ACC_DEPTH
        hh, busy, dst, src = p.hh, ns.busy, p.dst, p.src
        # what the pipeline may not take while the engine runs: a push to the store unit
        # (a STORE popping it reads OUT, which the engine may still be writing), a push
        # to the load unit when the engine's instruction pushes there too (in order), an
        # ALU instruction, FINISH, an ACC/ACC8 LOAD
        mt = insn_field(cfg, p.head, "mem", "memory_type")
        acc_load = (hh.opcode == Opcode.LOAD) & ((mt == MemType.ACC) | (mt == MemType.ACC8))
        m.d.comb += ns.block_head.eq(busy & (
            (hh.opcode == Opcode.ALU) | (hh.opcode == Opcode.FINISH) | acc_load
            | hh.push_next | (hh.push_prev & ns.push.push_prev)))

        # the pipeline's stage-B micro-op against the engine: its entries in the engine's
        # ranges wait; so does its read, and its write two cycles later, when the engine
        # reads the same bank this cycle (the engine writes that entry two cycles later)
        def held(e):
            return (((e >= ns.d0) & (e <= ns.dhi))
                    | (ns.tensor & (e >= ns.s0) & (e <= ns.shi)))
        rd_en = Signal(name="ee_rd_en")
        rd_addr = Signal(LA, name="ee_rd_addr")
        main_rd = Signal(LA, name="ee_main_rd")
        steal = Signal(name="ee_steal")
        m.d.comb += [main_rd.eq(Mux(p.phase | ~p.need_src, dst, src[:LA])),
                     steal.eq(rd_en & ((main_rd[LA - 1] == rd_addr[LA - 1])
                                       | (dst[LA - 1] == rd_addr[LA - 1]))),
                     p.ee_block.eq(steal | (busy & p.b_valid & (held(dst)
                                                               | (p.b_tensor & held(src[:LA]))))),
                     p.acc_bank.r1_addr.eq(rd_addr), p.acc_bank.r1_en.eq(rd_en)]
        vars(ns).update(steal=steal, rd_en=rd_en, rd_addr=rd_addr, acc_bank=p.acc_bank)

    def _req_engine_pipeline(self, m, ns) -> None:
        """The engine, a three-stage pipeline: I (issue: the tensor source's read when it
        misses the source register, else the destination's read and the next loop index)
        -> C (add, shift) -> W (clip; write ACC and OUT).  One entry per cycle, two on a
        source miss; I waits while C or W will write an entry it reads.  When every write
        has landed it pushes the instruction's tokens and releases its ranges."""
        cfg = self.cfg
        LA, AW = cfg.LOG_ACC_DEPTH, cfg.ACC_WIDTH
        lanes = cfg.BATCH * cfg.BLOCK_OUT
        acc_bits = cfg.elem_bits(MemType.ACC)
        acc_bank, io, ii, tensor, imm, busy = (ns.acc_bank, ns.io, ns.ii, ns.tensor, ns.imm,
                                               ns.busy)
        i_cnt, j_cnt = Signal(len(io)), Signal(len(ii))
        d_o, d_c = Signal(LA, name="ee_d_o"), Signal(LA, name="ee_d_c")
        s_o, s_c = Signal(LA, name="ee_s_o"), Signal(LA, name="ee_s_c")
        e_dst, e_src = Signal(LA, name="ee_dst"), Signal(LA, name="ee_src")
        m.d.comb += [e_dst.eq(ns.d0 + d_c), e_src.eq(ns.s0 + s_c)]
        issuing = Signal(name="ee_issuing")
        src_reg = Signal(acc_bits, name="ee_src_reg")
        src_pend = Signal(name="ee_src_pend")
        tag, tag_v = Signal(LA, name="ee_tag"), Signal(name="ee_tag_v")
        c_v, c_d = Signal(name="ee_c_valid"), Signal(LA, name="ee_c_dst")
        w_v, w_d = Signal(name="ee_w_valid"), Signal(LA, name="ee_w_dst")
        shifted = Signal(acc_bits, name="ee_shifted", reset_less=True)
        wr = Signal(name="ee_wr")
        ns.wr = wr
        rd = acc_bank.r1_data
        need = tensor & ~(tag_v & (tag == e_src))

        def inflight(e):
            return (c_v & (c_d == e)) | (w_v & (w_d == e))
        hazard = inflight(e_dst) | (tensor & inflight(e_src))
        go = issuing & ~hazard & ~self.halt
        with m.If(ns.take):
            m.d.sync += [issuing.eq(1), i_cnt.eq(0), j_cnt.eq(0), d_o.eq(0), d_c.eq(0),
                         s_o.eq(0), s_c.eq(0), tag_v.eq(0)]
        # I
        m.d.sync += [src_pend.eq(0), c_v.eq(0)]
        with m.If(go & need):
            m.d.comb += [ns.rd_en.eq(1), ns.rd_addr.eq(e_src)]
            m.d.sync += [src_pend.eq(1), tag.eq(e_src), tag_v.eq(1)]
        with m.Elif(go):
            m.d.comb += [ns.rd_en.eq(1), ns.rd_addr.eq(e_dst)]
            m.d.sync += [c_v.eq(1), c_d.eq(e_dst)]
            with m.If(j_cnt != ii - 1):
                m.d.sync += [j_cnt.eq(j_cnt + 1), d_c.eq(d_c + ns.dfi), s_c.eq(s_c + ns.sfi)]
            with m.Else():
                m.d.sync += [j_cnt.eq(0), d_o.eq(d_o + ns.dfo), d_c.eq(d_o + ns.dfo),
                             s_o.eq(s_o + ns.sfo), s_c.eq(s_o + ns.sfo)]
                with m.If(i_cnt != io - 1):
                    m.d.sync += i_cnt.eq(i_cnt + 1)
                with m.Else():
                    m.d.sync += issuing.eq(0)
        with m.If(src_pend):
            m.d.sync += src_reg.eq(rd)
        # C
        b_elem = Mux(tensor, src_reg, 0)
        if cfg.REQ_LANE_SHIFT:  # a per-lane REQ: the latched immediate's shift field
            e_lane = Signal(name="ee_lane")
            m.d.comb += e_lane.eq(_is_lane_imm(imm))
        with m.If(c_v):
            for ln in range(lanes):
                a = rd.word_select(ln, AW).as_signed()
                b = b_elem.word_select(ln, AW).as_signed()
                if cfg.REQ_LANE_SHIFT:  # the bias and shift from the lane's word
                    addend, req_shift = _req_lane_operands(e_lane, b, imm)
                    total = (a + addend)[:AW]
                    m.d.sync += shifted.word_select(ln, AW).eq(
                        _shr(cfg, total.as_signed(), req_shift))
                    continue
                total = (a + b)[:AW]
                m.d.sync += shifted.word_select(ln, AW).eq(
                    _shr(cfg, total.as_signed(), imm[:REQ_SHIFT_BITS].as_signed()))
        m.d.sync += [w_v.eq(c_v & ~self.halt), w_d.eq(c_d)]
        # W: stage B held this bank's micro-op two cycles ago, so stage D does not write it
        res = Signal(acc_bits, name="ee_res")
        m.d.comb += res.eq(Cat(*[req_clip(cfg, shifted.word_select(ln, AW), imm, m,
                                          f"ee_clip_{ln}") for ln in range(lanes)]))
        with m.If(w_v & ~self.halt):
            m.d.comb += [wr.eq(~ns.zero), acc_bank.w1_en.eq(1), acc_bank.w1_addr.eq(w_d),
                         acc_bank.w1_data.eq(Mux(ns.clear, 0, res)),
                         self.out_w1_en.eq(1), self.out_w1_addr.eq(w_d),
                         self.out_w1_data.eq(Mux(ns.zero, 0, self._truncate(res)))]
            with m.If(w_d == tag):
                m.d.sync += tag_v.eq(0)
        # done: every write has landed; push when the pipeline is not pushing (never to the
        # same queue: block_head), then release the ranges
        with m.If(busy & ~issuing & ~c_v & ~w_v & ~ns.main_push):
            m.d.comb += push_tokens(self, Unit.COMPUTE, ns.push)
            m.d.sync += busy.eq(0)
        with m.If(self.halt):   # a fault anywhere: drop the instruction
            m.d.sync += [busy.eq(0), issuing.eq(0)]

    def _req_engine_overrides(self, m, p, ns) -> None:
        """The engine's overrides of the pipeline's outputs, emitted after the control FSM
        (later statements win): bank port 0's read enable, the ALU micro-op count, ``busy``,
        and the pipeline's source cache dropped when the engine takes an instruction (it
        may hold an entry the engine will write)."""
        m.d.comb += [p.acc_bank.r0_en.eq(~ns.steal),
                     self.alu_uop.eq((p.d_valid & p.d_alu & ~p.d_reset) | ns.wr)]
        with m.If(ns.busy):
            m.d.comb += self.busy.eq(1)
        with m.If(ns.take):     # the pipeline's source cache may hold an entry the
            m.d.sync += p.src_tag_v.eq(0)     # engine will write


def insn_uop(cfg: VTAConfig, uop, name: str):
    """Slice micro-op field ``name`` (``dst``, ``src``, ``wgt``) out of a 32-bit value."""
    from ..isa import isa_layout

    f = isa_layout(cfg).uop_field(name)
    return uop[f.lsb:f.lsb + f.width]
