"""The VTA two-level ISA: 128-bit task instructions and 32-bit micro-ops.

Layouts are computed from a :class:`~vtaforge.hw.config.VTAConfig` with upstream's rule
(C bit-fields over two little-endian 64-bit words: fields in order from bit 0; a field that
does not fit in the rest of the current word starts at bit 64).  Field widths follow the
config (upstream ``hw_spec.h`` formulas, vta-anchor.md §2.2, §3.1); at the ``pynq`` preset
the bit positions equal upstream HW_VER 0.0.2 exactly.  The same :class:`ISALayout` tables
drive encode/decode here, the functional simulator, and the Amaranth decoders.

An encoded program is a ``numpy.ndarray`` of ``uint8`` with shape ``(N, 16)`` (or flat
``N*16`` bytes): instruction ``i`` occupies bytes ``16*i .. 16*i+15``, little-endian.
Micro-ops are ``uint32`` words.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from enum import IntEnum
from functools import lru_cache
from typing import Iterable, Mapping, Sequence

import numpy as np

from .config import INSN_BITS, LOOP_ITER_BITS, UOP_BITS, ConfigError, MemType, VTAConfig

__all__ = [
    "Opcode", "MemType", "AluOp", "Module", "Queue", "Field", "ISALayout", "Insn",
    "isa_layout", "check_layout_fits", "encode_insn", "decode_insn", "encode_program",
    "decode_program", "encode_uops", "decode_uops", "insn_module", "disassemble",
    "ISAError", "INSN_BYTES", "INSN_FIELDS", "req_imm", "req_fields", "REQ_SHIFT_BITS",
    "REQ_RESERVED_BIT", "REQ_LOWER_BOUNDS", "REQ_LANE", "LANE_SHIFT_BITS", "req_lane_word",
    "req_lane_fields",
]

INSN_BYTES = INSN_BITS // 8


class ISAError(ValueError):
    """An instruction that cannot be encoded or decoded (message names field and value)."""


class Opcode(IntEnum):
    """Task opcodes (3 bits at [2:0])."""

    LOAD = 0
    STORE = 1
    GEMM = 2
    FINISH = 3
    ALU = 4


class AluOp(IntEnum):
    """ALU opcodes (3 bits, HW_VER 0.0.2). MUL exists only when ``ALU_MUL`` is set, REQ (the
    fused requantize, :func:`req_imm`) only when ``ALU_REQUANT`` is set."""

    MIN = 0
    MAX = 1
    ADD = 2
    SHR = 3
    MUL = 4
    REQ = 5


#: REQ's immediate: bits [5:0] the shift (signed), bits [7:6] the lower bound (00: -128,
#: 01: 0, a ReLU; 10: -8, the int4 minimum; 11 reserved), bits [15:8] the upper bound
#: (signed 8 bits).
REQ_SHIFT_BITS = 6
#: Bit 7 of REQ's immediate: with bit 6 clear, the lower bound is -8 (int4 outputs); with
#: bit 6 set, the combination is reserved (the verifier refuses it).
REQ_RESERVED_BIT = 7
#: The lower bounds REQ encodes, by bits [7:6] (index 3 reserved).
REQ_LOWER_BOUNDS = (-128, 0, -8)


#: REQ's shift field value that, on a ``REQ_LANE_SHIFT`` core, takes each lane's shift and
#: bias from the lane's tensor operand word (:func:`req_lane_word`).  Elsewhere (and on a
#: core without the option) -32 is an ordinary shift: SHR's rule, a left shift by 32.
REQ_LANE = -32
#: The low bits of a per-lane REQ operand word that hold the lane's shift (signed).
LANE_SHIFT_BITS = 6


def req_lane_word(bias, shift, acc_width: int = 32):
    """The tensor operand word of a per-lane ``REQ`` (``REQ_LANE_SHIFT``, shift field
    :data:`REQ_LANE`): ``bias << 6 | shift & 63``, one per lane, as a signed
    ``acc_width``-bit value (int64 arrays or ints).

    The lane then computes ``MIN(MAX(SHR(ADD(dst, bias), shift), lo), hi)``: the bias is the
    word shifted right arithmetically by :data:`LANE_SHIFT_BITS`, the shift its low 6 bits
    read as signed and applied with SHR's rule (its low ``LOG_ACC_WIDTH + 1`` bits).

    Args:
        bias: per-lane biases, ``-2**(acc_width-7) .. 2**(acc_width-7) - 1``
            (32-bit accumulator: ±2**25).
        shift: per-lane shifts, -32..31 (negative: a left shift).
        acc_width: ``ACC_WIDTH`` in bits.
    Returns:
        The words (int64 array, or int for int arguments).
    Raises:
        ISAError: a bias or shift outside its range (names the first).
    """
    b, sh = np.asarray(bias, np.int64), np.asarray(shift, np.int64)
    lim = 1 << (acc_width - LANE_SHIFT_BITS - 1)
    bad = (b < -lim) | (b >= lim)
    if bad.any():
        raise ISAError(f"per-lane REQ bias {int(b[bad].flat[0])} is out of "
                       f"range; allowed: {-lim}..{lim - 1}")
    half = 1 << (LANE_SHIFT_BITS - 1)
    bad = (sh < -half) | (sh >= half)
    if bad.any():
        raise ISAError(f"per-lane REQ shift {int(sh[bad].flat[0])} is out of "
                       f"range; allowed: {-half}..{half - 1}")
    w = (b << LANE_SHIFT_BITS) | (sh & ((1 << LANE_SHIFT_BITS) - 1))
    return int(w) if np.ndim(bias) == 0 and np.ndim(shift) == 0 else w


def req_lane_fields(word):
    """``(bias, shift)`` of per-lane REQ operand words (inverse of :func:`req_lane_word`;
    int64 arrays of the signed words)."""
    w = np.asarray(word, np.int64)
    half = 1 << (LANE_SHIFT_BITS - 1)
    return w >> LANE_SHIFT_BITS, ((w & ((1 << LANE_SHIFT_BITS) - 1)) ^ half) - half


def req_imm(shift: int, lo: int, hi: int) -> int:
    """The signed 16-bit ALU immediate of a fused requantize ``REQ`` (needs ``ALU_REQUANT``).

    ``ALU REQ`` computes, per lane and in the accumulator's wrapping ``ACC_WIDTH``-bit
    arithmetic, exactly the four-instruction sequence it replaces::

        dst = MIN(MAX(SHR(ADD(dst, b), shift), lo), hi)

    with ``b`` the tensor operand ``acc[src]`` (``use_imm = 0``: the bias row) or 0
    (``use_imm = 1``), and ``shift``, ``lo``, ``hi`` from this immediate (layout in
    :data:`REQ_SHIFT_BITS`; SHR's rule: a negative shift shifts left).

    Args:
        shift: -32..31 (the field); the core applies it with SHR's rule, its low
            ``LOG_ACC_WIDTH + 1`` bits as a signed amount, so a 16-bit accumulator takes
            -16..15 and wraps the rest, exactly as an ALU SHR of the same value does.
        lo: -128 (int8), 0 (a ReLU) or -8 (int4 outputs).  hi: -128..127, ``hi >= lo``.

    Returns:
        The immediate as a signed int16 (the ``imm`` field).

    Raises:
        ISAError: a value the layout cannot hold (names it).
    """
    half = 1 << (REQ_SHIFT_BITS - 1)
    if not -half <= shift < half:
        raise ISAError(f"REQ shift {shift} is out of range; allowed: {-half}..{half - 1}")
    if lo not in REQ_LOWER_BOUNDS:
        raise ISAError(f"REQ lower bound {lo} is not encodable; allowed: -128, 0 or -8")
    if not lo <= hi <= 127:
        raise ISAError(f"REQ upper bound {hi} is out of range; allowed: {lo}..127")
    u = (shift & ((1 << REQ_SHIFT_BITS) - 1)) | (REQ_LOWER_BOUNDS.index(lo) << 6) \
        | ((hi & 0xFF) << 8)
    return u - (1 << 16) if u >= 1 << 15 else u


def req_fields(imm: int) -> tuple[int, int, int, bool]:
    """Decode a REQ immediate into ``(shift, lo, hi, reserved_ok)`` (inverse of
    :func:`req_imm`; ``reserved_ok`` is False when bits [7:6] are both set, which the
    verifier rejects; ``lo`` is then 0).  ``imm``: the signed or unsigned 16-bit field
    value."""
    u = int(imm) & 0xFFFF
    half = 1 << (REQ_SHIFT_BITS - 1)
    shift = (u & ((1 << REQ_SHIFT_BITS) - 1) ^ half) - half
    code = (u >> 6) & 3
    lo = REQ_LOWER_BOUNDS[code] if code < 3 else 0
    hi = ((u >> 8) ^ 0x80) - 0x80
    return shift, lo, hi, code != 3


class Module(IntEnum):
    """The three in-order modules (upstream runtime ids)."""

    LOAD = 1
    COMPUTE = 2
    STORE = 3


class Queue(IntEnum):
    """The four dependency-token queues."""

    L2G = 0  # load -> compute (RAW: data loaded)
    G2L = 1  # compute -> load (WAR: inp/wgt buffer free)
    G2S = 2  # compute -> store (RAW: results ready)
    S2G = 3  # store -> compute (WAR: out buffer free)


#: The four dependency flags of the instruction header, in header order.
DEP_FLAGS = ("pop_prev", "pop_next", "push_prev", "push_next")


@dataclass(frozen=True)
class TokenRoute:
    """One dependency-token queue: the module that pushes onto it and the header flag it
    pushes with, the module that pops it and the flag it pops with.

    Upstream's prev/next naming is relative to the module carrying the flag, in the
    order load → compute → store: ``*_next`` talks to the module after it, ``*_prev`` to
    the one before (vta-anchor.md §2.4).
    """

    queue: Queue
    producer: Module
    push_flag: str
    consumer: Module
    pop_flag: str


#: Producer/consumer table of the token queues: the one source of which module pushes or
#: pops which queue with which flag.  :data:`FLAG_QUEUES`, the RTL units and ``top.py``,
#: the program builder and fsim derive from it.
TOKEN_ROUTES: dict[Queue, TokenRoute] = {
    Queue.L2G: TokenRoute(Queue.L2G, Module.LOAD, "push_next", Module.COMPUTE, "pop_prev"),
    Queue.G2L: TokenRoute(Queue.G2L, Module.COMPUTE, "push_prev", Module.LOAD, "pop_next"),
    Queue.G2S: TokenRoute(Queue.G2S, Module.COMPUTE, "push_next", Module.STORE, "pop_prev"),
    Queue.S2G: TokenRoute(Queue.S2G, Module.STORE, "push_prev", Module.COMPUTE, "pop_next"),
}


def token_route(producer: Module, consumer: Module) -> TokenRoute:
    """The queue from ``producer`` to ``consumer``.

    Raises:
        ISAError: no queue links them (load and store never exchange tokens).
    """
    for r in TOKEN_ROUTES.values():
        if r.producer == producer and r.consumer == consumer:
            return r
    raise ISAError(f"no token queue from {Module(producer).name} to {Module(consumer).name}")


def module_tokens(module: Module) -> tuple[list[TokenRoute], list[TokenRoute]]:
    """``(pops, pushes)``: the routes ``module`` consumes and the ones it produces, in
    queue order."""
    pops = [r for r in TOKEN_ROUTES.values() if r.consumer == module]
    pushes = [r for r in TOKEN_ROUTES.values() if r.producer == module]
    return pops, pushes


def _flag_queues() -> dict[Module, dict[str, Queue | None]]:
    out: dict[Module, dict[str, Queue | None]] = {}
    for mod in Module:
        pops, pushes = module_tokens(mod)
        fq: dict[str, Queue | None] = {f: None for f in DEP_FLAGS}
        for r in pops:
            fq[r.pop_flag] = r.queue
        for r in pushes:
            fq[r.push_flag] = r.queue
        out[mod] = fq
    return out


#: For each module, the queue each flag refers to (None: the flag is invalid there).
#: Keys: pop_prev, pop_next, push_prev, push_next.  Derived from :data:`TOKEN_ROUTES`.
FLAG_QUEUES: dict[Module, dict[str, Queue | None]] = _flag_queues()


@dataclass(frozen=True)
class Field:
    """One bit field: ``name``, absolute ``lsb`` within the 128-bit instruction (or the
    32-bit micro-op) and ``width`` in bits. ``signed`` fields are two's complement."""

    name: str
    lsb: int
    width: int
    signed: bool = False

    @property
    def msb(self) -> int:
        return self.lsb + self.width - 1

    @property
    def mask(self) -> int:
        return (1 << self.width) - 1


@dataclass(frozen=True)
class ISALimits:
    """The fixed-width instruction fields, the same in every config (vta-anchor.md §2.2):
    widths in bits, and the value ranges they allow (:meth:`max`, ``imm_min``,
    ``imm_max``)."""

    opcode_bits: int = 3
    memory_type_bits: int = 3
    sram_base_bits: int = 16
    dram_base_bits: int = 32
    size_bits: int = 16       # y_size, x_size
    stride_bits: int = 16     # x_stride
    pad_bits: int = 4         # y_pad_0, y_pad_1, x_pad_0, x_pad_1
    iter_bits: int = LOOP_ITER_BITS  # iter_out, iter_in
    alu_opcode_bits: int = 3
    imm_bits: int = 16        # signed ALU immediate

    def max(self, kind: str) -> int:
        """Largest value of the unsigned field kind ``kind`` (``"pad"``: 15, ``"size"``,
        ``"stride"``: 65535, ``"iter"``: 16383, ...)."""
        return (1 << getattr(self, f"{kind}_bits")) - 1

    @property
    def imm_min(self) -> int:
        """Smallest ALU immediate (-32768)."""
        return -(1 << (self.imm_bits - 1))

    @property
    def imm_max(self) -> int:
        """Largest ALU immediate (32767)."""
        return (1 << (self.imm_bits - 1)) - 1


#: The ISA's fixed field limits (one object; layouts, RTL and software read it).
LIMITS = ISALimits()

HEADER = (("opcode", LIMITS.opcode_bits), ("pop_prev", 1), ("pop_next", 1), ("push_prev", 1),
          ("push_next", 1))

#: Every field name an instruction may carry (the union over formats), in a stable order.
INSN_FIELDS = (
    "opcode", "pop_prev", "pop_next", "push_prev", "push_next",
    "memory_type", "sram_base", "dram_base", "y_size", "x_size", "x_stride",
    "y_pad_0", "y_pad_1", "x_pad_0", "x_pad_1",
    "reset", "uop_bgn", "uop_end", "iter_out", "iter_in",
    "dst_factor_out", "dst_factor_in", "src_factor_out", "src_factor_in",
    "wgt_factor_out", "wgt_factor_in", "alu_opcode", "use_imm", "imm", "depthwise",
)


def _pack(spec: Sequence[tuple[str, int] | tuple[str, int, bool]], word_bits: int = 64,
          total_bits: int = INSN_BITS) -> tuple[tuple[Field, ...], int]:
    """Place fields with C bit-field rules over ``word_bits`` words. Returns the fields and
    the end bit of the last field (may exceed ``total_bits``: the caller rejects that)."""
    fields = []
    pos = 0
    for item in spec:
        name, width = item[0], item[1]
        signed = bool(item[2]) if len(item) > 2 else False
        used = pos % word_bits
        if used + width > word_bits:
            pos += word_bits - used
        fields.append(Field(name, pos, width, signed))
        pos += width
    return tuple(fields), pos


@dataclass(frozen=True)
class ISALayout:
    """Bit layouts of one config: ``mem`` (LOAD/STORE), ``gemm``, ``alu``, ``finish`` and
    the micro-op ``uop``. Each is a tuple of :class:`Field` with absolute bit positions."""

    mem: tuple[Field, ...]
    gemm: tuple[Field, ...]
    alu: tuple[Field, ...]
    finish: tuple[Field, ...]
    uop: tuple[Field, ...]
    ends: Mapping[str, int]

    def formats(self) -> dict[str, tuple[Field, ...]]:
        return {"mem": self.mem, "gemm": self.gemm, "alu": self.alu, "finish": self.finish}

    def format_of(self, opcode: int) -> tuple[Field, ...]:
        """The field table for ``opcode``.

        Raises:
            ISAError: unknown opcode.
        """
        if opcode in (Opcode.LOAD, Opcode.STORE):
            return self.mem
        if opcode == Opcode.GEMM:
            return self.gemm
        if opcode == Opcode.ALU:
            return self.alu
        if opcode == Opcode.FINISH:
            return self.finish
        raise ISAError(f"unknown opcode {opcode}; allowed: 0..4 (LOAD, STORE, GEMM, FINISH, ALU)")

    def field(self, fmt: str, name: str) -> Field:
        for f in self.formats()[fmt]:
            if f.name == name:
                return f
        raise KeyError(f"{fmt} has no field {name!r}")

    def uop_field(self, name: str) -> Field:
        for f in self.uop:
            if f.name == name:
                return f
        raise KeyError(f"micro-op has no field {name!r}")

    def used_bits(self, fmt: str) -> int:
        """Sum of field widths of a format (bits that carry information)."""
        return sum(f.width for f in self.formats()[fmt])


def _layout_spec(cfg: VTAConfig):
    uop_w = cfg.LOG_UOP_DEPTH
    acc_w, inp_w, wgt_w = cfg.LOG_ACC_DEPTH, cfg.LOG_INP_DEPTH, cfg.LOG_WGT_DEPTH
    lim = LIMITS
    mem = HEADER + (
        ("memory_type", lim.memory_type_bits), ("sram_base", lim.sram_base_bits),
        ("dram_base", lim.dram_base_bits), ("y_size", lim.size_bits),
        ("x_size", lim.size_bits), ("x_stride", lim.stride_bits), ("y_pad_0", lim.pad_bits),
        ("y_pad_1", lim.pad_bits), ("x_pad_0", lim.pad_bits), ("x_pad_1", lim.pad_bits))
    loop = (("reset", 1), ("uop_bgn", uop_w), ("uop_end", uop_w + 1),
            ("iter_out", lim.iter_bits), ("iter_in", lim.iter_bits))
    # the depthwise flag sits after the loop fields, in the first word's spare bits on the
    # presets (the factors start the second word either way)
    gemm = HEADER + loop + ((("depthwise", 1),) if cfg.DEPTHWISE_TAPS else ()) + (
        ("dst_factor_out", acc_w), ("dst_factor_in", acc_w), ("src_factor_out", inp_w),
        ("src_factor_in", inp_w), ("wgt_factor_out", wgt_w), ("wgt_factor_in", wgt_w))
    alu = HEADER + loop + (
        ("dst_factor_out", acc_w), ("dst_factor_in", acc_w), ("src_factor_out", acc_w),
        ("src_factor_in", acc_w), ("alu_opcode", lim.alu_opcode_bits), ("use_imm", 1),
        ("imm", lim.imm_bits, True))
    uop = (("dst", acc_w), ("src", max(acc_w, inp_w)), ("wgt", wgt_w))
    return {"mem": mem, "gemm": gemm, "alu": alu, "finish": HEADER}, uop


def check_layout_fits(cfg: VTAConfig) -> None:
    """Raise :class:`ConfigError` if any instruction format of ``cfg`` needs more than 128
    bits, or the micro-op fields more than 32 bits (message names the format and sizes)."""
    specs, uop = _layout_spec(cfg)
    for name, spec in specs.items():
        _, end = _pack(spec)
        if end > INSN_BITS:
            raise ConfigError(
                f"{name.upper()} instruction fields need {end} bits with this config "
                f"(> {INSN_BITS}); reduce buffer sizes (LOG_*_BUFF_SIZE) so that the index "
                f"fields fit (depths: uop 2^{cfg.LOG_UOP_DEPTH}, inp 2^{cfg.LOG_INP_DEPTH}, "
                f"wgt 2^{cfg.LOG_WGT_DEPTH}, acc 2^{cfg.LOG_ACC_DEPTH})")
    ubits = sum(w for _, w in uop)
    if ubits > UOP_BITS:
        raise ConfigError(
            f"micro-op fields need {ubits} bits with this config (> {UOP_BITS}): "
            f"dst {uop[0][1]} + src {uop[1][1]} + wgt {uop[2][1]}; reduce LOG_ACC_BUFF_SIZE, "
            f"LOG_INP_BUFF_SIZE or LOG_WGT_BUFF_SIZE")


@lru_cache(maxsize=64)
def isa_layout(cfg: VTAConfig) -> ISALayout:
    """The :class:`ISALayout` of ``cfg`` (cached per config)."""
    specs, uop = _layout_spec(cfg)
    packed = {k: _pack(v) for k, v in specs.items()}
    uop_fields, _ = _pack(uop, word_bits=32, total_bits=32)
    return ISALayout(mem=packed["mem"][0], gemm=packed["gemm"][0], alu=packed["alu"][0],
                     finish=packed["finish"][0], uop=uop_fields,
                     ends={k: v[1] for k, v in packed.items()})


@dataclass
class Insn:
    """One task instruction, all formats in one record (fields absent from the opcode's
    format are ignored on encode and zero on decode).

    Units: ``sram_base`` in scratchpad elements; ``dram_base`` and ``x_stride`` in DRAM
    elements of ``memory_type`` (byte address = ``dram_base × elem_bytes``); sizes in
    elements/rows; ``imm`` a signed 16-bit value.
    """

    opcode: int
    pop_prev: int = 0
    pop_next: int = 0
    push_prev: int = 0
    push_next: int = 0
    memory_type: int = 0
    sram_base: int = 0
    dram_base: int = 0
    y_size: int = 0
    x_size: int = 0
    x_stride: int = 0
    y_pad_0: int = 0
    y_pad_1: int = 0
    x_pad_0: int = 0
    x_pad_1: int = 0
    reset: int = 0
    uop_bgn: int = 0
    uop_end: int = 0
    iter_out: int = 0
    iter_in: int = 0
    dst_factor_out: int = 0
    dst_factor_in: int = 0
    src_factor_out: int = 0
    src_factor_in: int = 0
    wgt_factor_out: int = 0
    wgt_factor_in: int = 0
    alu_opcode: int = 0
    use_imm: int = 0
    imm: int = 0
    #: GEMM only, on a ``DEPTHWISE_TAPS`` config: the micro-ops are depthwise (docs/isa.md)
    depthwise: int = 0

    def asdict(self) -> dict[str, int]:
        return dataclasses.asdict(self)

    @property
    def module(self) -> Module:
        return insn_module(self.opcode, self.memory_type)

    @property
    def is_nop(self) -> bool:
        """LOAD/STORE with ``x_size == 0``: only moves dependency tokens."""
        return self.opcode in (Opcode.LOAD, Opcode.STORE) and self.x_size == 0


def insn_module(opcode: int, memory_type: int = 0) -> Module:
    """The module that executes an instruction (vta-anchor.md §2.3): STORE → store; LOAD of
    INP or WGT → load; every other LOAD, GEMM, ALU and FINISH → compute.

    Raises:
        ISAError: unknown opcode.
    """
    if opcode == Opcode.STORE:
        return Module.STORE
    if opcode == Opcode.LOAD:
        return Module.LOAD if memory_type in (MemType.INP, MemType.WGT) else Module.COMPUTE
    if opcode in (Opcode.GEMM, Opcode.ALU, Opcode.FINISH):
        return Module.COMPUTE
    raise ISAError(f"unknown opcode {opcode}; allowed: 0..4 (LOAD, STORE, GEMM, FINISH, ALU)")


def _check_value(f: Field, v: int) -> int:
    v = int(v)
    if f.signed:
        lo, hi = -(1 << (f.width - 1)), (1 << (f.width - 1)) - 1
    else:
        lo, hi = 0, f.mask
    if not lo <= v <= hi:
        raise ISAError(f"field {f.name} = {v} does not fit {f.width} bits "
                       f"({'signed' if f.signed else 'unsigned'} range {lo}..{hi})")
    return v & f.mask


def _check_names(names: Iterable[str]) -> None:
    for k in names:
        if k not in INSN_FIELDS:
            raise ISAError(f"unknown instruction field {k!r}; allowed: {', '.join(INSN_FIELDS)}")


def _check_depthwise(cfg: VTAConfig, i: int) -> None:
    if not cfg.DEPTHWISE_TAPS:
        raise ISAError(f"instruction {i}: a depthwise GEMM needs a config with "
                       f"DEPTHWISE_TAPS > 0 (this one has none)")


def encode_insn(cfg: VTAConfig, insn: Insn | Mapping[str, int]) -> bytes:
    """Encode one instruction to 16 little-endian bytes.

    Raises:
        ISAError: unknown opcode, a field name not in :data:`INSN_FIELDS`, a field value
            that does not fit its width, or a depthwise GEMM on a config without
            ``DEPTHWISE_TAPS``.
    """
    d = insn.asdict() if isinstance(insn, Insn) else dict(insn)
    _check_names(d)
    lay = isa_layout(cfg)
    fmt = lay.format_of(int(d.get("opcode", 0)))
    if d.get("depthwise", 0) and int(d.get("opcode", 0)) == Opcode.GEMM:
        _check_depthwise(cfg, 0)
    word = 0
    for f in fmt:
        word |= _check_value(f, d.get(f.name, 0)) << f.lsb
    return word.to_bytes(INSN_BYTES, "little")


def decode_insn(cfg: VTAConfig, data: bytes | np.ndarray) -> Insn:
    """Decode 16 bytes into an :class:`Insn`.

    Raises:
        ISAError: wrong length or unknown opcode.
    """
    b = bytes(np.asarray(data, dtype=np.uint8).reshape(-1)) if not isinstance(data, bytes) else data
    if len(b) != INSN_BYTES:
        raise ISAError(f"an instruction is {INSN_BYTES} bytes, got {len(b)}")
    word = int.from_bytes(b, "little")
    lay = isa_layout(cfg)
    fmt = lay.format_of(word & 0x7)
    vals = {}
    for f in fmt:
        v = (word >> f.lsb) & f.mask
        if f.signed and v >> (f.width - 1):
            v -= 1 << f.width
        vals[f.name] = v
    return Insn(**vals)


def _as_words(data: np.ndarray | bytes) -> tuple[np.ndarray, np.ndarray]:
    a = np.frombuffer(data, dtype=np.uint8) if isinstance(data, (bytes, bytearray)) \
        else np.ascontiguousarray(data, dtype=np.uint8).reshape(-1)
    if a.size % INSN_BYTES:
        raise ISAError(f"program length {a.size} bytes is not a multiple of {INSN_BYTES}")
    w = a.view("<u8").reshape(-1, 2)
    return w[:, 0], w[:, 1]


def _extract(lo: np.ndarray, hi: np.ndarray, f: Field) -> np.ndarray:
    src = lo if f.lsb < 64 else hi
    v = (src >> np.uint64(f.lsb % 64)) & np.uint64(f.mask)
    v = v.astype(np.int64)
    if f.signed:
        v = np.where(v >> (f.width - 1) != 0, v - (1 << f.width), v)
    return v


def decode_program(cfg: VTAConfig, data: np.ndarray | bytes) -> dict[str, np.ndarray]:
    """Vectorised decode of a whole program.

    Args:
        data: ``uint8`` array of shape ``(N, 16)`` or ``(N*16,)``, or bytes.

    Returns:
        A dict mapping every name of :data:`INSN_FIELDS` to an ``int64`` array of length N.
        Each instruction's fields come from its opcode's format; fields outside it are 0.
        Unknown opcodes decode with only the header set (the caller validates ``opcode``).
    """
    lo, hi = _as_words(data)
    lay = isa_layout(cfg)
    n = lo.size
    out = {name: np.zeros(n, dtype=np.int64) for name in INSN_FIELDS}
    opcode = (lo & np.uint64(7)).astype(np.int64)
    masks = {
        "mem": (opcode == Opcode.LOAD) | (opcode == Opcode.STORE),
        "gemm": opcode == Opcode.GEMM,
        "alu": opcode == Opcode.ALU,
    }
    for f in lay.finish:
        out[f.name] = _extract(lo, hi, f)
    for fmt, sel in masks.items():
        if not sel.any():
            continue
        for f in lay.formats()[fmt]:
            if f.name in out and fmt != "finish" and f.lsb >= 7:
                v = _extract(lo, hi, f)
                out[f.name] = np.where(sel, v, out[f.name])
    return out


def encode_program(cfg: VTAConfig, insns: Iterable[Insn] | Mapping[str, np.ndarray]) -> np.ndarray:
    """Vectorised encode of a whole program.

    Args:
        insns: a sequence of :class:`Insn`, or a dict of field arrays as returned by
            :func:`decode_program` (missing fields are 0).

    Returns:
        ``uint8`` array of shape ``(N, 16)``.

    Raises:
        ISAError: unknown opcode, a field value out of range or a depthwise GEMM on a config
            without ``DEPTHWISE_TAPS`` (names the instruction index);
            for a dict of columns also an unknown field name, a missing ``opcode`` column or
            columns of unequal length.
    """
    if isinstance(insns, Mapping):
        _check_names(insns)
        if "opcode" not in insns:
            raise ISAError("field opcode is missing from the instruction columns")
        cols = {k: np.asarray(v, dtype=np.int64).reshape(-1) for k, v in insns.items()}
        for k, v in cols.items():
            if v.size != cols["opcode"].size:
                raise ISAError(f"field {k} has {v.size} values, opcode has "
                               f"{cols['opcode'].size}; columns must have equal lengths")
    else:
        lst = list(insns)
        cols = {k: np.fromiter((getattr(i, k) for i in lst), dtype=np.int64, count=len(lst))
                for k in INSN_FIELDS}
    n = len(cols["opcode"])
    lay = isa_layout(cfg)
    dw = cols.get("depthwise")
    if dw is not None and not cfg.DEPTHWISE_TAPS:
        hit = np.flatnonzero((dw != 0) & (cols["opcode"] == Opcode.GEMM))
        if hit.size:
            _check_depthwise(cfg, int(hit[0]))
    lo = np.zeros(n, dtype=np.uint64)
    hi = np.zeros(n, dtype=np.uint64)
    opcode = cols["opcode"]
    bad = ~np.isin(opcode, [int(o) for o in Opcode])
    if bad.any():
        i = int(np.flatnonzero(bad)[0])
        raise ISAError(f"instruction {i}: unknown opcode {int(opcode[i])}; allowed: 0..4")
    sels = {
        "mem": (opcode == Opcode.LOAD) | (opcode == Opcode.STORE),
        "gemm": opcode == Opcode.GEMM,
        "alu": opcode == Opcode.ALU,
        "finish": opcode == Opcode.FINISH,
    }
    for fmt, sel in sels.items():
        if not sel.any():
            continue
        for f in lay.formats()[fmt]:
            v = cols.get(f.name)
            if v is None:
                continue
            v = v[sel]
            lo_ok, hi_ok = ((-(1 << (f.width - 1)), (1 << (f.width - 1)) - 1) if f.signed
                            else (0, f.mask))
            badv = (v < lo_ok) | (v > hi_ok)
            if badv.any():
                j = int(np.flatnonzero(sel)[np.flatnonzero(badv)[0]])
                raise ISAError(f"instruction {j}: field {f.name} = {int(cols[f.name][j])} does "
                               f"not fit {f.width} bits (range {lo_ok}..{hi_ok})")
            u = (v & f.mask).astype(np.uint64)
            if f.lsb < 64:
                lo[sel] |= u << np.uint64(f.lsb)
            else:
                hi[sel] |= u << np.uint64(f.lsb - 64)
    words = np.empty((n, 2), dtype="<u8")
    words[:, 0] = lo
    words[:, 1] = hi
    return words.view(np.uint8).reshape(n, INSN_BYTES)


def encode_uops(cfg: VTAConfig, dst, src, wgt) -> np.ndarray:
    """Encode micro-ops: ``dst`` (acc index), ``src`` (inp index for GEMM, acc index for ALU)
    and ``wgt`` (weight index) as arrays of equal length → ``uint32`` array.

    Raises:
        ISAError: an index that does not fit its field, or arrays of unequal length.
    """
    lay = isa_layout(cfg)
    cols = {"dst": np.asarray(dst, dtype=np.int64).reshape(-1),
            "src": np.asarray(src, dtype=np.int64).reshape(-1),
            "wgt": np.asarray(wgt, dtype=np.int64).reshape(-1)}
    if not cols["dst"].size == cols["src"].size == cols["wgt"].size:
        raise ISAError(f"dst, src and wgt must have equal lengths, got {cols['dst'].size}, "
                       f"{cols['src'].size} and {cols['wgt'].size}")
    out = np.zeros(cols["dst"].size, dtype=np.uint32)
    for f in lay.uop:
        v = cols[f.name]
        bad = (v < 0) | (v > f.mask)
        if bad.any():
            j = int(np.flatnonzero(bad)[0])
            raise ISAError(f"micro-op {j}: {f.name} = {int(v[j])} does not fit {f.width} bits")
        out |= (v.astype(np.uint32) << np.uint32(f.lsb))
    return out


def decode_uops(cfg: VTAConfig, words) -> dict[str, np.ndarray]:
    """Decode ``uint32`` micro-ops into ``{"dst", "src", "wgt"}`` int64 arrays."""
    w = np.asarray(words, dtype=np.uint32).reshape(-1).astype(np.int64)
    return {f.name: (w >> f.lsb) & f.mask for f in isa_layout(cfg).uop}


# ---------------------------------------------------------------------- disassembly
_MEM_NAMES = {m.value: m.name for m in MemType}
_ALU_NAMES = {a.value: a.name for a in AluOp}


def format_insn(insn: Insn) -> str:
    """One-line text of an instruction (upstream-like mnemonics)."""
    flags = "".join(c if getattr(insn, n) else "-" for c, n in
                    (("p", "pop_prev"), ("n", "pop_next"), ("P", "push_prev"), ("N", "push_next")))
    op = insn.opcode
    if op in (Opcode.LOAD, Opcode.STORE):
        mod = insn_module(op, insn.memory_type)
        name = "LOAD" if op == Opcode.LOAD else "STORE"
        mem = _MEM_NAMES.get(insn.memory_type, f"mem{insn.memory_type}")
        if insn.x_size == 0:
            return f"NOP-{mod.name}  [{flags}]"
        pads = ""
        if insn.y_pad_0 or insn.y_pad_1 or insn.x_pad_0 or insn.x_pad_1:
            pads = (f" pad(y0={insn.y_pad_0},y1={insn.y_pad_1},x0={insn.x_pad_0},"
                    f"x1={insn.x_pad_1})")
        return (f"{name} {mem:<4} [{flags}] sram={insn.sram_base} dram={insn.dram_base} "
                f"y={insn.y_size} x={insn.x_size} stride={insn.x_stride}{pads}")
    if op in (Opcode.GEMM, Opcode.ALU):
        loops = (f"uop[{insn.uop_bgn}:{insn.uop_end}] out={insn.iter_out}"
                 f"(d{insn.dst_factor_out},s{insn.src_factor_out}"
                 + (f",w{insn.wgt_factor_out}" if op == Opcode.GEMM else "")
                 + f") in={insn.iter_in}(d{insn.dst_factor_in},s{insn.src_factor_in}"
                 + (f",w{insn.wgt_factor_in}" if op == Opcode.GEMM else "") + ")")
        rst = " reset" if insn.reset else ""
        if op == Opcode.GEMM:
            return f"GEMM{' DW' if insn.depthwise else '   '}   [{flags}] {loops}{rst}"
        alu = _ALU_NAMES.get(insn.alu_opcode, f"op{insn.alu_opcode}")
        operand = f" imm={insn.imm}" if insn.use_imm else " tensor"
        if insn.alu_opcode == AluOp.REQ:
            sh, lo, hi, ok = req_fields(insn.imm)
            operand = ((" imm" if insn.use_imm else " tensor")
                       + f" shr={sh} clip=[{lo if ok else 'reserved'},{hi}]")
        return f"ALU {alu:<5} [{flags}] {loops}{operand}{rst}"
    if op == Opcode.FINISH:
        return f"FINISH    [{flags}]"
    return f"INVALID opcode={op}"


def disassemble(cfg: VTAConfig, data: np.ndarray | bytes) -> list[str]:
    """One line per instruction, followed by the running token balance of the four queues
    after the instruction (``l2g g2l g2s s2g``; a negative balance means a pop that no
    earlier push provides in program order)."""
    cols = decode_program(cfg, data)
    n = len(cols["opcode"])
    bal = [0, 0, 0, 0]
    lines = []
    for i in range(n):
        insn = Insn(**{k: int(cols[k][i]) for k in INSN_FIELDS})
        try:
            mod = insn_module(insn.opcode, insn.memory_type)
            for flag, q in FLAG_QUEUES[mod].items():
                if q is None or not getattr(insn, flag):
                    continue
                bal[q] += 1 if flag.startswith("push") else -1
        except ISAError:
            pass
        text = format_insn(insn)
        lines.append(f"{i:6d}  {text:<96} l2g={bal[0]} g2l={bal[1]} g2s={bal[2]} s2g={bal[3]}")
    return lines
