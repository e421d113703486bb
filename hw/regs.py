"""The control register map of a vtaforge VTA core (AXI4-Lite slave, 32-bit registers).

One table, used by the Amaranth core, the Verilator harness, the board driver, the JSON
export and the C header, so that no address is copied by hand.  Offsets are in bytes from
the core's register base; every register is 32 bits wide and 4-byte aligned.

Launch protocol (every backend):
 1. write ``INSN_ADDR_LO``/``INSN_ADDR_HI`` (byte address of the first instruction) and
    ``INSN_COUNT``;
 2. write ``CTRL.START = 1`` (self-clearing).  ``STATUS.DONE`` drops to 0 in the same
    cycle the start is accepted and rises only when *this* run's FINISH has executed and
    every module has drained: it is never stale (upstream BR-17);
 3. poll ``STATUS.DONE`` (or wait for the interrupt when ``CTRL.IRQ_EN`` is set;
    ``IRQ_STATUS`` is write-1-to-clear);
 4. read ``CYCLES_LO/HI`` and the per-unit counters (valid until the next start).

``FINGERPRINT`` holds ``VTAConfig.fingerprint``: a runtime refuses to drive a core whose
fingerprint differs from its config.

Scratchpad faults (DESIGN.md "Semantics": an out-of-range scratchpad index is an error,
never a wrap): every unit that forms a scratchpad index checks it against the buffer's
depth.  The first violation of a run sets ``STATUS.ERROR`` and latches ``ERROR`` (unit and
:class:`ErrorKind`), ``ERR_INSN`` (which of that unit's instructions) and ``ERR_INDEX``
(the offending index); the offending write is dropped, and from then on the core writes
nothing (no scratchpad entry, no DRAM byte) but still moves every token and DMA beat, so
the run completes (``STATUS.DONE``) and the host never hangs.  START clears the report.
:func:`fault_message` formats it exactly as the functional simulator reports the same
fault (one formatter for both).

Streamed execution (only in a core built with ``VTAConfig.INSN_RING > 0``; the
:data:`RING_REGISTERS` exist only there, so a core without the option keeps the map above
bit for bit): the host keeps a ring of ``RING_SIZE`` 16-byte instruction slots in DRAM at
``RING_BASE``.  Instruction ``n`` of the session (0-based) lives in slot ``n mod
RING_SIZE``.

 1. write ``RING_BASE_LO``/``RING_BASE_HI``, ``RING_TAIL = 0``, ``RING_CTRL.ENABLE = 1``,
    then ``CTRL.START``: the session starts with ``RING_HEAD = 0`` and ``FINISH_COUNT =
    0`` (``INSN_COUNT`` is ignored);
 2. to append a segment (a program of whole instructions ending with its one FINISH, its
    tokens balanced): write its instructions into the free slots (at most ``RING_SIZE -
    (TAIL - HEAD)``), then write the new ``RING_TAIL`` (the total number of instructions
    appended, modulo 2**32): the doorbell;
 3. fetch reads while ``RING_HEAD != RING_TAIL``; ``RING_HEAD`` counts the instructions it
    has read (their slots may be overwritten);
 4. segment ``k`` (1-based) is done when ``FINISH_COUNT >= k`` (its stores are in DRAM);
 5. ``RING_CTRL.ENABLE = 0`` closes the session: once the ring is empty and every unit
    has drained, ``STATUS.DONE`` rises as at the end of a one-shot run.

Ring faults (the core refuses ring-register writes that would run stale or garbage slots;
:func:`ring_tail_fault` is the rule every backend applies): ``ERROR.UNIT = 0`` (fetch) and
a ring :class:`ErrorKind`; ``ERR_INDEX`` holds the offending value and ``ERR_INSN`` the
context :func:`ring_fault_text` names.  The offending ``RING_TAIL`` write is dropped, fetch
takes nothing more from the ring, what it already read drains (writing nothing, as after
a scratchpad fault) and the session completes on its own: ``STATUS.DONE`` with
``STATUS.ERROR``, no close needed.

- ``RING_BASE``: a START with ``RING_CTRL.ENABLE`` and ``RING_BASE_LO`` not 16-byte
  aligned (nothing is fetched); ``ERR_INDEX`` = ``RING_BASE_LO``.
- ``RING_OVERFLOW``: ``RING_TAIL`` more than ``RING_SIZE`` ahead of ``RING_HEAD`` (at the
  START, or by a write during the session); ``ERR_INDEX`` = the value, ``ERR_INSN`` = the
  tail it would replace (0 at START).
- ``RING_REWIND``: a write moving ``RING_TAIL`` back (``(new - old) mod 2**32 >=
  2**31``), below ``RING_HEAD`` included; ``ERR_INDEX`` = the value, ``ERR_INSN`` = the old
  tail.
- ``RING_FINISH``: the session closed (ENABLE cleared, ring drained) with instructions
  read after its last FINISH; ``ERR_INDEX`` = ``RING_HEAD``, ``ERR_INSN`` =
  ``FINISH_COUNT``.  The ``STATUS.DONE`` rises with it.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from enum import IntEnum

from .config import MemType, VTAConfig
from .isa import Insn, Module, Opcode, format_insn

#: Value of the VERSION register: major << 16 | minor << 8 | patch of the register map.
REGMAP_VERSION = (1 << 16) | (0 << 8) | 0


@dataclass(frozen=True)
class BitField:
    """A named bit range ``[lsb, lsb+width)`` inside a register."""

    name: str
    lsb: int
    width: int = 1
    doc: str = ""


@dataclass(frozen=True)
class Register:
    """One 32-bit register: byte ``offset``, ``access`` ("rw", "ro", "wo", "w1c")."""

    name: str
    offset: int
    access: str
    doc: str
    fields: tuple[BitField, ...] = field(default_factory=tuple)


REGISTERS: tuple[Register, ...] = (
    Register("CTRL", 0x00, "rw", "Control. START is self-clearing; reads back 0.",
             (BitField("START", 0, 1, "write 1 to launch a run"),
              BitField("IRQ_EN", 1, 1, "raise the interrupt line when a run completes"))),
    Register("STATUS", 0x04, "ro", "Status.",
             (BitField("BUSY", 0, 1, "a run is in progress"),
              BitField("DONE", 1, 1, "the last run completed; 0 from START until its FINISH"),
              BitField("ERROR", 2, 1, "the run hit a scratchpad fault (details in ERROR); "
                       "sticky until the next START"))),
    Register("IRQ_STATUS", 0x08, "w1c", "Interrupt status; write 1 to clear.",
             (BitField("DONE", 0, 1, "a run completed"),)),
    Register("INSN_ADDR_LO", 0x0C, "rw", "Byte address of the first instruction, bits 31:0."),
    Register("INSN_ADDR_HI", 0x10, "rw", "Byte address of the first instruction, bits 63:32."),
    Register("INSN_COUNT", 0x14, "rw", "Number of 16-byte instructions to fetch."),
    Register("CYCLES_LO", 0x18, "ro", "Cycles from START to completion, bits 31:0."),
    Register("CYCLES_HI", 0x1C, "ro", "Cycles from START to completion, bits 63:32."),
    Register("FINGERPRINT", 0x20, "ro", "VTAConfig.fingerprint of the generated core."),
    Register("VERSION", 0x24, "ro", "Register-map version (major<<16 | minor<<8 | patch)."),
    Register("FETCH_BUSY", 0x28, "ro", "Cycles the fetch unit was busy during the last run."),
    Register("LOAD_BUSY", 0x2C, "ro", "Cycles the load unit executed an instruction."),
    Register("COMPUTE_BUSY", 0x30, "ro", "Cycles the compute unit executed an instruction."),
    Register("STORE_BUSY", 0x34, "ro", "Cycles the store unit executed an instruction."),
    Register("LOAD_STALL", 0x38, "ro", "Cycles the load unit waited for a dependency token."),
    Register("COMPUTE_STALL", 0x3C, "ro", "Cycles the compute unit waited for a token."),
    Register("STORE_STALL", 0x40, "ro", "Cycles the store unit waited for a token."),
    Register("GEMM_COUNT", 0x44, "ro", "Non-reset GEMM micro-ops executed in the last run."),
    Register("ALU_COUNT", 0x48, "ro", "Non-reset ALU micro-ops executed in the last run."),
    Register("DMA_RD_BYTES", 0x4C, "ro", "Bytes of instructions and elements read in the last run (padding excluded)."),
    Register("DMA_WR_BYTES", 0x50, "ro", "Bytes written (strobed) in the last run."),
    Register("ERROR", 0x54, "ro", "First scratchpad fault of the run (0: none); cleared by "
             "START.",
             (BitField("VALID", 0, 1, "a fault was recorded (the same bit as STATUS.ERROR)"),
              BitField("UNIT", 1, 2, "the unit: 1 load, 2 compute, 3 store (isa.Module); "
                       "0 fetch (a ring fault)"),
              BitField("KIND", 4, 4, "what was out of range (regs.ErrorKind)"))),
    Register("ERR_INSN", 0x58, "ro", "Which of the faulting unit's instructions (0-based, "
             "in the order the unit took them this run)."),
    Register("ERR_INDEX", 0x5C, "ro", "The out-of-range scratchpad index (computed index, "
             "micro-op index or scratchpad address)."),
)


#: Registers of the streamed-execution ring (present only when ``cfg.INSN_RING > 0``).
RING_REGISTERS: tuple[Register, ...] = (
    Register("RING_CTRL", 0x60, "rw", "Streamed-execution control.",
             (BitField("ENABLE", 0, 1, "CTRL.START starts a ring session while set; "
                       "clearing it closes the session once the ring is empty"),)),
    Register("RING_BASE_LO", 0x64, "rw", "Byte address of ring slot 0, bits 31:0 (16-byte "
             "aligned)."),
    Register("RING_BASE_HI", 0x68, "rw", "Byte address of ring slot 0, bits 63:32."),
    Register("RING_SIZE", 0x6C, "ro", "Ring slots (16-byte instructions): INSN_RING."),
    Register("RING_TAIL", 0x70, "rw", "Doorbell: instructions appended this session "
             "(modulo 2**32)."),
    Register("RING_HEAD", 0x74, "ro", "Instructions fetch has read this session (their "
             "slots are free again)."),
    Register("FINISH_COUNT", 0x78, "ro", "FINISH instructions retired this session."),
    Register("RING_IDLE", 0x7C, "ro", "Cycles of this session with the ring empty and "
             "every unit drained (the core waiting for the host)."),
)


def registers(cfg: VTAConfig | None = None) -> tuple[Register, ...]:
    """The registers of ``cfg``'s core: :data:`REGISTERS`, plus :data:`RING_REGISTERS`
    when ``cfg.INSN_RING > 0`` (``None``: the base map)."""
    if cfg is not None and cfg.INSN_RING:
        return REGISTERS + RING_REGISTERS
    return REGISTERS


class ErrorKind(IntEnum):
    """``ERROR.KIND``: what a unit found out of range.

    ``ACC_DST``, ``INP_SRC``, ``ACC_SRC``, ``WGT``: a GEMM/ALU index computed from a
    micro-op and the loop factors (``dst`` in ACC, GEMM ``src`` in INP, tensor-ALU ``src``
    in ACC, GEMM ``wgt`` in WGT); ``UOP``: the micro-op index of a GEMM/ALU loop;
    ``SRAM``: a LOAD or STORE scratchpad address (``sram_base`` plus the extent).
    ``RING_*`` (:data:`RING_KINDS`, ``ERROR.UNIT`` 0): a ring-register value fetch refuses
    (module docstring "Ring faults").
    """

    NONE = 0
    ACC_DST = 1
    INP_SRC = 2
    ACC_SRC = 3
    WGT = 4
    UOP = 5
    SRAM = 6
    RING_BASE = 7
    RING_OVERFLOW = 8
    RING_REWIND = 9
    RING_FINISH = 10


#: The ring kinds (``ERROR.UNIT`` 0: reported by fetch; module docstring "Ring faults").
RING_KINDS = frozenset({ErrorKind.RING_BASE, ErrorKind.RING_OVERFLOW, ErrorKind.RING_REWIND,
                        ErrorKind.RING_FINISH})

_M32 = 0xFFFFFFFF


def ring_tail_fault(size: int, head: int, old: int, new: int) -> ErrorKind | None:
    """The ring rule for a ``RING_TAIL`` write (32-bit counters, modulo 2**32):
    ``RING_REWIND`` when ``new`` moves back from ``old``, ``RING_OVERFLOW`` when it is more
    than ``size`` slots ahead of ``head``; None when the write is fine."""
    if (int(new) - int(old)) & _M32 >= 1 << 31:
        return ErrorKind.RING_REWIND
    if (int(new) - int(head)) & _M32 > int(size):
        return ErrorKind.RING_OVERFLOW
    return None


def ring_fault_text(cfg: VTAConfig, kind: int, index: int, aux: int) -> str:
    """The message of a ring fault (``kind`` in :data:`RING_KINDS`; ``index`` =
    ``ERR_INDEX``, ``aux`` = ``ERR_INSN``), the same from the driver's refusal and from
    the core's report."""
    kind, index, aux = ErrorKind(int(kind)), int(index), int(aux)
    size = cfg.INSN_RING
    if kind is ErrorKind.RING_BASE:
        return (f"RING_BASE 0x{index:x} is not 16-byte aligned (the core would fetch "
                f"from 0x{index & ~15:x})")
    if kind is ErrorKind.RING_OVERFLOW:
        return (f"RING_TAIL {index} (was {aux}) is more than RING_SIZE {size} instructions "
                f"ahead of RING_HEAD: the core would run stale ring slots")
    if kind is ErrorKind.RING_REWIND:
        return (f"RING_TAIL {index} moves back from {aux}: the doorbell counts instructions "
                f"appended and only moves forward")
    return (f"the session was closed after FINISH {aux} with a segment published without "
            f"its FINISH (RING_HEAD {index})")


#: For the computed-index kinds: (micro-op field, scratchpad) of the index.
INDEX_KINDS: dict[ErrorKind, tuple[str, MemType]] = {
    ErrorKind.ACC_DST: ("dst", MemType.ACC),
    ErrorKind.INP_SRC: ("src", MemType.INP),
    ErrorKind.ACC_SRC: ("src", MemType.ACC),
    ErrorKind.WGT: ("wgt", MemType.WGT),
}


def index_fault_text(cfg: VTAConfig, kind: ErrorKind, index: int) -> str:
    """The message of a computed GEMM/ALU index out of range (``kind`` in
    :data:`INDEX_KINDS`)."""
    name, mem = INDEX_KINDS[ErrorKind(kind)]
    return (f"computed {name} index {int(index)} is outside the {mem.name} scratchpad "
            f"(depth {cfg.depth(mem)})")


def uop_range_text(cfg: VTAConfig, bgn: int, end: int) -> str:
    """The message of a GEMM/ALU micro-op range past the UOP depth."""
    return f"micro-op range [{int(bgn)}, {int(end)}) exceeds the UOP depth {cfg.UOP_DEPTH}"


def sram_range_text(mem: int, base: int, end: int, depth: int) -> str:
    """The message of a LOAD/STORE scratchpad range ``[base, end)`` past ``depth``."""
    return (f"scratchpad range [{int(base)}, {int(end)}) exceeds the "
            f"{MemType(int(mem)).name} depth {int(depth)}")


def sram_range(insn: Insn) -> tuple[int, int]:
    """``(mem, end)``: the memory type a LOAD/STORE addresses and one past the last
    scratchpad entry it touches (a LOAD writes its padding too)."""
    if insn.opcode == Opcode.STORE:
        return int(MemType.OUT), insn.sram_base + insn.y_size * insn.x_size
    rows = insn.y_pad_0 + insn.y_size + insn.y_pad_1
    cols = insn.x_pad_0 + insn.x_size + insn.x_pad_1
    return int(insn.memory_type), insn.sram_base + rows * cols


def insn_fault_text(i: int, insn: Insn, msg: str) -> str:
    """``instruction <i> (<disassembly>): <msg>``: how every backend names the instruction
    an error is about."""
    return f"instruction {int(i)} ({format_insn(insn).strip()}): {msg}"


def fault_message(cfg: VTAConfig, kind: int, index: int, insn: Insn | None,
                  insn_index: int | None, unit: int = 0, unit_ordinal: int = 0) -> str:
    """The text of a scratchpad fault, the same on every backend.

    Args:
        kind: an :class:`ErrorKind`.
        index: the offending index (``ERR_INDEX``).
        insn: the faulting instruction, or None when the reporter cannot read it.
        insn_index: its index in the program (None: unknown, then the unit and
            ``unit_ordinal`` name it).

    A ring kind (:data:`RING_KINDS`) is about no instruction: the text is
    ``instruction ring: <ring_fault_text>`` with ``unit_ordinal`` as its ``aux``.
    """
    kind = ErrorKind(int(kind))
    if kind in RING_KINDS:
        return f"instruction ring: {ring_fault_text(cfg, kind, index, unit_ordinal)}"
    if kind in INDEX_KINDS:
        msg = index_fault_text(cfg, kind, index)
    elif kind is ErrorKind.UOP and insn is not None:
        msg = uop_range_text(cfg, insn.uop_bgn, insn.uop_end)
    elif kind is ErrorKind.SRAM and insn is not None:
        mem, end = sram_range(insn)
        msg = sram_range_text(mem, insn.sram_base, end, cfg.depth(mem))
    elif kind is ErrorKind.UOP:
        msg = f"micro-op index {int(index)} exceeds the UOP depth {cfg.UOP_DEPTH}"
    else:
        msg = f"scratchpad address {int(index)} is out of range"
    if insn is not None and insn_index is not None:
        return insn_fault_text(insn_index, insn, msg)
    try:
        who = Module(int(unit)).name.lower()
    except ValueError:
        who = f"unit {int(unit)}"
    return f"{who} instruction #{int(unit_ordinal)} of the run: {msg}"


#: Size of the register window in bytes.
REGMAP_SIZE = 0x100

_BY_NAME = {r.name: r for r in REGISTERS + RING_REGISTERS}


def reg(name: str) -> Register:
    """The register called ``name``.

    Raises:
        KeyError: no such register.
    """
    return _BY_NAME[name]


def offset(name: str) -> int:
    """Byte offset of register ``name``."""
    return _BY_NAME[name].offset


def bitfield(register: str, name: str) -> BitField:
    """The field ``name`` of register ``register`` (e.g. ``bitfield("CTRL", "START")``).

    Raises:
        KeyError: no such register or field.
    """
    for f in _BY_NAME[register].fields:
        if f.name == name:
            return f
    raise KeyError(f"register {register} has no field {name}")


def regmap_dict(cfg: VTAConfig) -> dict:
    """The register map as a JSON-ready dict, with the config's fingerprint value."""
    return {
        "version": REGMAP_VERSION,
        "size": REGMAP_SIZE,
        "fingerprint": cfg.fingerprint,
        "config": cfg.to_dict(),
        "registers": [
            {"name": r.name, "offset": r.offset, "access": r.access, "doc": r.doc,
             "fields": [{"name": f.name, "lsb": f.lsb, "width": f.width, "doc": f.doc}
                        for f in r.fields]}
            for r in registers(cfg)
        ],
    }


def regmap_json(cfg: VTAConfig) -> str:
    """JSON text of :func:`regmap_dict`."""
    return json.dumps(regmap_dict(cfg), indent=2) + "\n"


def c_header(cfg: VTAConfig) -> str:
    """A C header with the register offsets, bit masks and the config's constants."""
    g = "VTAFORGE_REGS_H"
    lines = [
        "/* Generated by vtaforge from hw/regs.py; do not edit. */",
        f"#ifndef {g}", f"#define {g}", "",
        f"#define VTA_REGMAP_VERSION 0x{REGMAP_VERSION:08x}u",
        f"#define VTA_REGMAP_SIZE 0x{REGMAP_SIZE:x}u",
        f"#define VTA_FINGERPRINT 0x{cfg.fingerprint:08x}u", "",
    ]
    for r in registers(cfg):
        lines.append(f"#define VTA_REG_{r.name} 0x{r.offset:02x}u  /* {r.access}: {r.doc} */")
        for f in r.fields:
            mask = ((1 << f.width) - 1) << f.lsb
            lines.append(f"#define VTA_{r.name}_{f.name} 0x{mask:08x}u")
    lines.append("")
    for k, v in cfg.derived().items():
        if isinstance(v, int):
            lines.append(f"#define VTA_{k} {v}")
    if cfg.INSN_RING:
        lines.append(f"#define VTA_INSN_RING {cfg.INSN_RING}")
    if cfg.ALU_REQUANT:
        lines.append("#define VTA_ALU_REQUANT 1  /* ALU opcode 5: REQ, the fused requantize */")
    if cfg.REQ_ENGINE:
        lines.append("#define VTA_REQ_ENGINE 1  /* one-micro-op REQs run beside the GEMM pipeline */")
    if cfg.ALU_FORWARD:
        lines.append("#define VTA_ALU_FORWARD 1  /* an ALU micro-op takes the previous one's "
                     "result on the same destination */")
    if cfg.REQ_LANE_SHIFT:
        lines.append("#define VTA_REQ_LANE_SHIFT 1  /* an ALU REQ with shift field -32 takes "
                     "each lane's bias and shift from its tensor operand */")
    if cfg.LOAD_AHEAD:
        lines.append("#define VTA_LOAD_AHEAD 1  /* the load unit requests the next INP/WGT "
                     "LOAD's rows while this one's data arrives */")
    lines += ["", f"#endif /* {g} */", ""]
    return "\n".join(lines)
