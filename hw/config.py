"""`VTAConfig`: the one description of a VTA core that every part of vtaforge obeys.

A config is a frozen dataclass whose fields follow upstream VTA's ``vta_config.json`` keys
(HW_VER 0.0.2), plus the knobs upstream hard-coded (AXI data width, queue depths, clock
target, FPGA part, optional ALU MUL and int8-to-accumulator load, DSP packing).  Everything
else (element sizes, buffer depths, ISA field widths, MACs per cycle) is derived, with the
formulas of upstream's ``hw_spec_const.h`` / ``pkg_config.py`` (see
``shared/reference/vta-anchor.md`` §1.2).

Errors: every invalid value raises :class:`ConfigError` (a ``ValueError``) whose message names
the key, the value and the allowed range.
"""

from __future__ import annotations

import dataclasses
import json
import os
import zlib
from dataclasses import dataclass
from enum import IntEnum
from functools import cached_property
from pathlib import Path
from typing import Any, Mapping, NamedTuple

from .parts import BOARDS, TARGET_BOARDS, target_defaults


class ConfigError(ValueError):
    """An invalid configuration value or file; the message names key, value and range."""


class CoreMemory(NamedTuple):
    """One memory of the core (:meth:`VTAConfig.memories`): ``depth`` entries of ``width``
    bits; ``kind`` ``"scratchpad"`` (one write, one read port) or ``"fifo"`` (a command
    queue)."""

    name: str
    depth: int
    width: int
    kind: str


class MemType(IntEnum):
    """Memory types of LOAD/STORE instructions (upstream ``VTA_MEM_ID_*``, HW_VER 0.0.2)."""

    UOP = 0
    WGT = 1
    INP = 2
    ACC = 3
    OUT = 4
    ACC8 = 5


#: Upstream's user keys, in upstream's order (vta_config.json, HW_VER 0.0.2).
UPSTREAM_KEYS = (
    "TARGET", "HW_VER", "LOG_INP_WIDTH", "LOG_WGT_WIDTH", "LOG_ACC_WIDTH", "LOG_BATCH",
    "LOG_BLOCK", "LOG_UOP_BUFF_SIZE", "LOG_INP_BUFF_SIZE", "LOG_WGT_BUFF_SIZE",
    "LOG_ACC_BUFF_SIZE",
)

#: Per-target FPGA facts (upstream pkg_config.py): part, clock MHz, log2 AXI data bits;
#: a view of hw/parts.py's TARGETS (the one table of parts and boards).
TARGETS: dict[str, dict[str, Any]] = target_defaults()

#: Allowed inclusive integer ranges of the integer keys.
RANGES: dict[str, tuple[int, int]] = {
    "LOG_INP_WIDTH": (2, 4),
    "LOG_WGT_WIDTH": (2, 4),
    "LOG_ACC_WIDTH": (4, 5),
    "LOG_BATCH": (0, 4),
    "LOG_BLOCK_IN": (1, 7),
    "LOG_BLOCK_OUT": (1, 7),
    "LOG_UOP_BUFF_SIZE": (8, 20),
    "LOG_INP_BUFF_SIZE": (8, 22),
    "LOG_WGT_BUFF_SIZE": (8, 24),
    "LOG_ACC_BUFF_SIZE": (8, 22),
    "LOG_BUS_WIDTH": (5, 9),
    "INSN_QUEUE_DEPTH": (1, 4096),
    "TOKEN_QUEUE_DEPTH": (1, 1024),
    "DSP_PACKING": (1, 2),
    "DMA_OUTSTANDING": (1, 8),
    "DEPTHWISE_TAPS": (0, 16),
}

#: Datapath options off by default and the suffix each adds to
#: :attr:`VTAConfig.bitstream_name` when it is on (``INSN_RING`` adds ``_ring<N>``).
OPTION_SUFFIXES = (("ALU_MUL", "mul"), ("ALU_REQUANT", "req"), ("REQ_ENGINE", "eng"),
                   ("ALU_FORWARD", "fwd"), ("REQ_LANE_SHIFT", "lane"), ("LOAD_AHEAD", "ahead"))

#: Instruction and micro-op widths in bits (fixed by the ISA).
INSN_BITS = 128
UOP_BITS = 32
#: Loop trip count field width (upstream VTA_LOOP_ITER_WIDTH).
LOOP_ITER_BITS = 14
#: Allowed ``INSN_RING`` sizes (instructions) when the ring is on: powers of two in this
#: inclusive range (the low end holds two fetch batches; the high end keeps the ring a
#: 1 MiB buffer).
INSN_RING_RANGE = (16, 1 << 16)
#: Smallest scratchpad depth accepted (entries).
MIN_DEPTH = 2
#: LOAD/STORE sram_base is 16 bits wide: no scratchpad may be deeper than this.
MAX_DEPTH = 1 << 16


def depthwise_possible(fields: Mapping[str, Any]) -> bool:
    """Whether a core of these VTAConfig field values (a dict with ``LOG_BLOCK_IN``,
    ``LOG_BLOCK_OUT``, ``LOG_INP_WIDTH``, ``LOG_WGT_WIDTH``) can have ``DEPTHWISE_TAPS``:
    ``BLOCK_IN == BLOCK_OUT`` (lane o reads input channel o) and int8 operands."""
    return (fields["LOG_BLOCK_IN"] == fields["LOG_BLOCK_OUT"]
            and (fields["LOG_INP_WIDTH"], fields["LOG_WGT_WIDTH"]) == (3, 3))


def _log2_exact(n: int) -> int:
    return n.bit_length() - 1


@dataclass(frozen=True)
class VTAConfig:
    """A VTA core configuration (frozen; validated at construction).

    Integer fields are log2 values as in upstream's JSON: widths in bits
    (``LOG_INP_WIDTH = 3`` is int8), tensor-intrinsic dims, and buffer sizes in bytes
    (``LOG_INP_BUFF_SIZE = 15`` is 32 KiB).  Operand widths: ``LOG_INP_WIDTH`` 2..4 (int4,
    int8, int16 activations; outputs have the input width; int4 with int4 or int8 weights
    only), ``LOG_WGT_WIDTH`` 2..4 (int4, int8, int16 weights; int4 with int4 or int8
    activations only).  An int4 element (INP, WGT or OUT) packs two values per byte, lane
    ``2k`` in the low nibble, as every element packs its lanes from bit 0.  Non-upstream knobs:

    - ``LOG_BUS_WIDTH``: log2 of the AXI4 master data width in bits (6 = 64 bits).
    - ``INSN_QUEUE_DEPTH``: depth of each of the three command queues (instructions).
    - ``TOKEN_QUEUE_DEPTH``: capacity of each dependency-token queue (tokens); a push onto
      a full queue stalls the pushing module.
    - ``CLOCK_MHZ``: clock target; ``PART``: FPGA part name.
    - ``ACC_8BIT``: the ACC8 LOAD (int8 into the accumulator, sign-extended) exists.
    - ``ALU_MUL``: the ALU MUL opcode exists.
    - ``ALU_REQUANT``: the ALU REQ opcode exists (the fused requantize: add, shift and
      clip to int8 in one micro-op, :func:`vtaforge.hw.isa.req_imm`); off (default), the
      core, its Verilog and its fingerprint are exactly those of a config without the key.
    - ``REQ_ENGINE``: a requantize engine beside the GEMM pipeline (needs ``ALU_REQUANT``):
      an ALU REQ or ALU reset of one micro-op runs on it while the GEMM pipeline goes on
      with the following instructions (the accumulator and its OUT view in two banks;
      results as if in order, docs/hardware.md "REQ engine"); off (default), the core,
      its Verilog and its fingerprint are exactly those of a config without the key.
    - ``ALU_FORWARD``: ALU result forwarding: an ALU micro-op whose destination is the one
      the micro-op before it writes (an ALU micro-op other than REQ, still in the
      pipeline) takes that result instead of reading the accumulator, so a chain of
      micro-ops on one destination runs at one per cycle, tensor operands included
      (docs/hardware.md "ALU forwarding"); a timing option only (results are those of the
      ISA); off (default), the core, its Verilog and its fingerprint are exactly those of
      a config without the key.
    - ``REQ_LANE_SHIFT``: per-lane requantize shifts (needs ``ALU_REQUANT``): an ALU REQ
      with the tensor operand and the shift field :data:`~vtaforge.hw.isa.REQ_LANE` (-32)
      takes each lane's shift, and its bias, from that lane's operand word
      (:func:`~vtaforge.hw.isa.req_lane_word`), so a per-channel requantize is one REQ
      instead of a tensor SHR and a REQ (docs/isa.md "REQ").  Off (default), the core, its
      Verilog and its fingerprint are exactly those of a config without the key (and a
      shift of -32 keeps SHR's meaning).
    - ``DSP_PACKING``: int8 GEMM products per DSP48 slice (1 or 2).
    - ``LUT_MULTIPLIERS``: how many of the BATCH×BLOCK_IN×BLOCK_OUT GEMM multipliers are
      built from LUTs instead of DSPs.
    - ``INSN_RING``: size in instructions of the streamed-execution instruction ring
      (``docs/runtime.md`` "Streamed execution"; registers ``RING_*`` in ``hw/regs.py``);
      0 (default) builds no ring: the core, its register map and its fingerprint are then
      exactly those of a config without the key.
    - ``DMA_OUTSTANDING``: DMA read requests (rows) a tensor loader may have outstanding
      at once, 1..8: with more than one, a LOAD's next rows are requested while this
      row's beats arrive, so the DRAM latency is paid about once per LOAD instead of once
      per row (docs/hardware.md "DMA engine"); a timing option only.  1 (default): one
      request at a time, and the core, its Verilog and its fingerprint are exactly those
      of a config without the key.
    - ``LOAD_AHEAD``: the load unit takes its next INP/WGT LOAD while the current one's
      data is still arriving (needs ``DMA_OUTSTANDING`` > 1): the next LOAD's row requests
      go out behind the current's, sharing the ``DMA_OUTSTANDING`` window, so the DRAM
      latency is paid about once per run of back-to-back LOADs instead of once per LOAD
      (docs/hardware.md "DMA engine").  A LOAD runs ahead only when it pops no token and
      the LOAD before it pushes none; data is written in instruction order.  A timing
      option only; off (default), the core, its Verilog and its fingerprint are exactly
      those of a config without the key.
    - ``DEPTHWISE_TAPS``: 0 (default: off) or 2..16, at most ``BLOCK_IN``: the GEMM
      instruction's ``depthwise`` flag exists, and a depthwise GEMM micro-op reads that many
      consecutive INP entries, lane ``o`` of each (a channel times one kernel tap per entry),
      so one micro-op does a row of kernel taps of ``BLOCK_OUT`` channels
      (docs/isa.md "Depthwise GEMM"; 3 for 3x3 kernels).  Needs ``BLOCK_IN == BLOCK_OUT`` and
      int8 activations and weights.  0: the core, its ISA, Verilog and fingerprint are
      exactly those of a config without the key.

    Raises:
        ConfigError: any value out of range, with key, value and allowed range named; or
            a config whose ISA fields do not fit 128 bits (micro-op fields 32 bits).
    """

    TARGET: str = "pynq"
    HW_VER: str = "0.0.2"
    LOG_INP_WIDTH: int = 3
    LOG_WGT_WIDTH: int = 3
    LOG_ACC_WIDTH: int = 5
    LOG_BATCH: int = 0
    LOG_BLOCK_IN: int = 4
    LOG_BLOCK_OUT: int = 4
    LOG_UOP_BUFF_SIZE: int = 15
    LOG_INP_BUFF_SIZE: int = 15
    LOG_WGT_BUFF_SIZE: int = 18
    LOG_ACC_BUFF_SIZE: int = 17
    LOG_BUS_WIDTH: int = None  # type: ignore[assignment]  # None: the TARGET's value
    INSN_QUEUE_DEPTH: int = 512
    TOKEN_QUEUE_DEPTH: int = 255
    CLOCK_MHZ: float = None  # type: ignore[assignment]  # None: the TARGET's value
    PART: str = None  # type: ignore[assignment]  # None: the TARGET's value
    ACC_8BIT: bool = True
    ALU_MUL: bool = False
    ALU_REQUANT: bool = False
    REQ_ENGINE: bool = False
    ALU_FORWARD: bool = False
    REQ_LANE_SHIFT: bool = False
    DSP_PACKING: int = 2
    LUT_MULTIPLIERS: int = 0
    INSN_RING: int = 0
    DMA_OUTSTANDING: int = 1
    DEPTHWISE_TAPS: int = 0
    LOAD_AHEAD: bool = False

    # ------------------------------------------------------------------ validation
    def __post_init__(self) -> None:
        if not isinstance(self.TARGET, str) or self.TARGET not in TARGETS:
            raise ConfigError(
                f"TARGET = {self.TARGET!r} is not supported; allowed: {', '.join(sorted(TARGETS))}")
        # Target-dependent knobs left unset take the target's upstream values.
        for key, value in TARGETS[self.TARGET].items():
            if getattr(self, key) is None:
                object.__setattr__(self, key, value)
        if not isinstance(self.HW_VER, str):
            raise ConfigError(f"HW_VER = {self.HW_VER!r} must be a string such as '0.0.2'")
        for key, (lo, hi) in RANGES.items():
            v = getattr(self, key)
            if isinstance(v, bool) or not isinstance(v, int):
                raise ConfigError(f"{key} = {v!r} must be an integer in {lo}..{hi}")
            if not lo <= v <= hi:
                raise ConfigError(f"{key} = {v!r} is out of range; allowed: integers {lo}..{hi}")
        for key in ("ACC_8BIT", "ALU_MUL", "ALU_REQUANT", "REQ_ENGINE", "ALU_FORWARD",
                    "REQ_LANE_SHIFT", "LOAD_AHEAD"):
            v = getattr(self, key)
            if not isinstance(v, bool):
                raise ConfigError(f"{key} = {v!r} must be a boolean (true or false)")
        if isinstance(self.CLOCK_MHZ, bool) or not isinstance(self.CLOCK_MHZ, (int, float)):
            raise ConfigError(f"CLOCK_MHZ = {self.CLOCK_MHZ!r} must be a number in 1..1000 (MHz)")
        if not 1.0 <= float(self.CLOCK_MHZ) <= 1000.0:
            raise ConfigError(f"CLOCK_MHZ = {self.CLOCK_MHZ!r} is out of range; allowed: 1..1000")
        if not isinstance(self.PART, str) or not self.PART:
            raise ConfigError(f"PART = {self.PART!r} must be a non-empty part name")
        if self.REQ_ENGINE and not self.ALU_REQUANT:
            raise ConfigError("REQ_ENGINE = true needs ALU_REQUANT = true (the engine runs "
                              "ALU REQ instructions)")
        if self.REQ_LANE_SHIFT and not self.ALU_REQUANT:
            raise ConfigError("REQ_LANE_SHIFT = true needs ALU_REQUANT = true (it is a form "
                              "of ALU REQ)")
        if self.LOAD_AHEAD and self.DMA_OUTSTANDING < 2:
            raise ConfigError(f"LOAD_AHEAD = true needs DMA_OUTSTANDING > 1 (the next LOAD's "
                              f"row requests share the outstanding-request window), got "
                              f"DMA_OUTSTANDING = {self.DMA_OUTSTANDING}")
        if self.LOG_WGT_WIDTH == 2 and self.LOG_INP_WIDTH == 4:
            raise ConfigError(f"LOG_WGT_WIDTH = 2 (int4 weights) needs LOG_INP_WIDTH = 2 or 3 "
                              f"(int4 or int8 activations), got LOG_INP_WIDTH = "
                              f"{self.LOG_INP_WIDTH}: the compiler has no int16-activation / "
                              f"int4-weight path")
        if self.LOG_INP_WIDTH == 2 and self.LOG_WGT_WIDTH == 4:
            raise ConfigError(f"LOG_INP_WIDTH = 2 (int4 activations) needs LOG_WGT_WIDTH = 2 or "
                              f"3 (int4 or int8 weights), got LOG_WGT_WIDTH = "
                              f"{self.LOG_WGT_WIDTH}: the compiler has no int4-activation / "
                              f"int16-weight path")
        for key in ("LOG_INP_WIDTH", "LOG_WGT_WIDTH"):
            if getattr(self, key) > self.LOG_ACC_WIDTH:
                raise ConfigError(
                    f"{key} = {getattr(self, key)} is out of range; allowed: at most "
                    f"LOG_ACC_WIDTH = {self.LOG_ACC_WIDTH}")
        n_mul = self.BATCH * self.BLOCK_IN * self.BLOCK_OUT
        if isinstance(self.LUT_MULTIPLIERS, bool) or not isinstance(self.LUT_MULTIPLIERS, int):
            raise ConfigError(f"LUT_MULTIPLIERS = {self.LUT_MULTIPLIERS!r} must be an integer "
                              f"in 0..{n_mul} (BATCH*BLOCK_IN*BLOCK_OUT)")
        if not 0 <= self.LUT_MULTIPLIERS <= n_mul:
            raise ConfigError(
                f"LUT_MULTIPLIERS = {self.LUT_MULTIPLIERS!r} is out of range; allowed: "
                f"integers 0..{n_mul} (BATCH*BLOCK_IN*BLOCK_OUT)")
        t = self.DEPTHWISE_TAPS
        if t == 1 or t > self.BLOCK_IN:
            raise ConfigError(f"DEPTHWISE_TAPS = {t} is out of range; allowed: 0 (off) or "
                              f"2..{min(16, self.BLOCK_IN)} (at most BLOCK_IN)")
        if t and not depthwise_possible(dataclasses.asdict(self)):
            raise ConfigError(f"DEPTHWISE_TAPS = {t} needs BLOCK_IN == BLOCK_OUT (got "
                              f"{self.BLOCK_IN}, {self.BLOCK_OUT}) and int8 activations and "
                              f"weights (LOG_INP_WIDTH = LOG_WGT_WIDTH = 3, got "
                              f"{self.LOG_INP_WIDTH}, {self.LOG_WGT_WIDTH}): lane o of a "
                              f"depthwise GEMM reads input channel o")
        r = self.INSN_RING
        lo, hi = INSN_RING_RANGE
        if isinstance(r, bool) or not isinstance(r, int):
            raise ConfigError(f"INSN_RING = {r!r} must be an integer: 0 (off) or a power of "
                              f"two in {lo}..{hi} (instructions)")
        if r != 0 and not (lo <= r <= hi and r & (r - 1) == 0):
            raise ConfigError(f"INSN_RING = {r!r} is out of range; allowed: 0 (off) or a "
                              f"power of two in {lo}..{hi} (instructions)")
        # Scratchpad depths: each buffer must hold at least MIN_DEPTH elements and be
        # addressable by the 16-bit sram_base field.
        for key, mem in (("LOG_UOP_BUFF_SIZE", MemType.UOP), ("LOG_INP_BUFF_SIZE", MemType.INP),
                         ("LOG_WGT_BUFF_SIZE", MemType.WGT), ("LOG_ACC_BUFF_SIZE", MemType.ACC)):
            lo_log = _log2_exact(self.elem_bytes(mem)) + _log2_exact(MIN_DEPTH)
            hi_log = _log2_exact(self.elem_bytes(mem)) + _log2_exact(MAX_DEPTH)
            v = getattr(self, key)
            if not lo_log <= v <= hi_log:
                raise ConfigError(
                    f"{key} = {v} is out of range for this element size "
                    f"({self.elem_bytes(mem)} B): allowed {lo_log}..{hi_log} "
                    f"(depth {MIN_DEPTH}..{MAX_DEPTH} elements)")
        # The ISA layout must fit: 128-bit instructions, 32-bit micro-ops.
        from .isa import check_layout_fits  # local import: isa depends on config

        check_layout_fits(self)

    # ------------------------------------------------------------------ basic dims
    @property
    def BATCH(self) -> int:
        """Rows of the GEMM intrinsic (A in (A,B)x(B,C))."""
        return 1 << self.LOG_BATCH

    @property
    def BLOCK_IN(self) -> int:
        """Reduction dim of the GEMM intrinsic (input channels per element)."""
        return 1 << self.LOG_BLOCK_IN

    @property
    def BLOCK_OUT(self) -> int:
        """Output channels per element."""
        return 1 << self.LOG_BLOCK_OUT

    @property
    def LOG_OUT_WIDTH(self) -> int:
        """Output width equals input width (upstream PkgConfig)."""
        return self.LOG_INP_WIDTH

    @property
    def INP_WIDTH(self) -> int:
        return 1 << self.LOG_INP_WIDTH

    @property
    def WGT_WIDTH(self) -> int:
        return 1 << self.LOG_WGT_WIDTH

    @property
    def ACC_WIDTH(self) -> int:
        return 1 << self.LOG_ACC_WIDTH

    @property
    def OUT_WIDTH(self) -> int:
        return 1 << self.LOG_OUT_WIDTH

    @property
    def BUS_WIDTH(self) -> int:
        """AXI4 master data width in bits."""
        return 1 << self.LOG_BUS_WIDTH

    @property
    def LOG_OUT_BUFF_SIZE(self) -> int:
        """Output view size: ACC buffer depth × OUT element (upstream: ACC + OUT − ACC_WIDTH)."""
        return self.LOG_ACC_BUFF_SIZE + self.LOG_OUT_WIDTH - self.LOG_ACC_WIDTH

    # ------------------------------------------------------------------ elements
    def elem_bits(self, mem: MemType | int) -> int:
        """Bits of one scratchpad element (one row) of memory type ``mem``.

        UOP 32; WGT BLOCK_OUT·BLOCK_IN·WGT_WIDTH; INP BATCH·BLOCK_IN·INP_WIDTH;
        ACC BATCH·BLOCK_OUT·ACC_WIDTH; OUT BATCH·BLOCK_OUT·OUT_WIDTH; ACC8 BATCH·BLOCK_OUT·8
        (the DRAM side of an int8-to-accumulator load).

        Raises:
            ConfigError: unknown memory type.
        """
        m = int(mem)
        if m == MemType.UOP:
            return UOP_BITS
        if m == MemType.WGT:
            return self.BLOCK_OUT * self.BLOCK_IN * self.WGT_WIDTH
        if m == MemType.INP:
            return self.BATCH * self.BLOCK_IN * self.INP_WIDTH
        if m == MemType.ACC:
            return self.BATCH * self.BLOCK_OUT * self.ACC_WIDTH
        if m == MemType.OUT:
            return self.BATCH * self.BLOCK_OUT * self.OUT_WIDTH
        if m == MemType.ACC8:
            return self.BATCH * self.BLOCK_OUT * 8
        raise ConfigError(f"memory type {mem!r} is unknown; allowed: 0..5 (UOP..ACC8)")

    def memories(self) -> tuple[CoreMemory, ...]:
        """The core's memories, the one inventory the RTL instantiates and the DSE's
        block-RAM estimate reads: the UOP, INP, WGT, ACC and OUT scratchpads (depth in
        elements, width :meth:`elem_bits`; OUT is ACC_DEPTH deep) and the load, compute
        and store command queues (INSN_QUEUE_DEPTH × 128-bit instructions)."""
        sp = [("uop", self.UOP_DEPTH, MemType.UOP), ("inp", self.INP_DEPTH, MemType.INP),
              ("wgt", self.WGT_DEPTH, MemType.WGT), ("acc", self.ACC_DEPTH, MemType.ACC),
              ("out", self.ACC_DEPTH, MemType.OUT)]
        return tuple([CoreMemory(n, d, self.elem_bits(t), "scratchpad") for n, d, t in sp]
                     + [CoreMemory(f"{q}_cmd_queue", self.INSN_QUEUE_DEPTH, 128, "fifo")
                        for q in ("load", "compute", "store")])

    def memory(self, name: str) -> CoreMemory:
        """The memory ``name`` of :meth:`memories` (``"inp"``, ``"load_cmd_queue"``, ...).

        Raises:
            ConfigError: no such memory.
        """
        for mem in self.memories():
            if mem.name == name:
                return mem
        raise ConfigError(f"the core has no memory {name!r}; it has "
                          f"{', '.join(m.name for m in self.memories())}")

    def elem_bytes(self, mem: MemType | int) -> int:
        """Bytes of one element of memory type ``mem`` (DRAM addresses count these)."""
        return self.elem_bits(mem) // 8

    @property
    def dram_alignment(self) -> int:
        """Byte alignment that makes any buffer addressable by every memory type: the
        largest element size (all are powers of two), and at least 64 bytes."""
        return max(64, *(self.elem_bytes(m) for m in MemType))

    def log_depth(self, mem: MemType | int) -> int:
        """log2 of the scratchpad depth (elements) for ``mem``; OUT mirrors ACC; ACC8 is ACC."""
        m = int(mem)
        if m == MemType.UOP:
            return self.LOG_UOP_BUFF_SIZE - _log2_exact(UOP_BITS // 8)
        if m == MemType.INP:
            return self.LOG_INP_BUFF_SIZE - _log2_exact(self.elem_bytes(MemType.INP))
        if m == MemType.WGT:
            return self.LOG_WGT_BUFF_SIZE - _log2_exact(self.elem_bytes(MemType.WGT))
        if m in (MemType.ACC, MemType.OUT, MemType.ACC8):
            return self.LOG_ACC_BUFF_SIZE - _log2_exact(self.elem_bytes(MemType.ACC))
        raise ConfigError(f"memory type {mem!r} is unknown; allowed: 0..5 (UOP..ACC8)")

    def depth(self, mem: MemType | int) -> int:
        """Scratchpad depth in elements for ``mem``."""
        return 1 << self.log_depth(mem)

    @property
    def LOG_UOP_DEPTH(self) -> int:
        return self.log_depth(MemType.UOP)

    @property
    def LOG_INP_DEPTH(self) -> int:
        return self.log_depth(MemType.INP)

    @property
    def LOG_WGT_DEPTH(self) -> int:
        return self.log_depth(MemType.WGT)

    @property
    def LOG_ACC_DEPTH(self) -> int:
        return self.log_depth(MemType.ACC)

    @property
    def UOP_DEPTH(self) -> int:
        return self.depth(MemType.UOP)

    @property
    def INP_DEPTH(self) -> int:
        return self.depth(MemType.INP)

    @property
    def WGT_DEPTH(self) -> int:
        return self.depth(MemType.WGT)

    @property
    def ACC_DEPTH(self) -> int:
        return self.depth(MemType.ACC)

    @property
    def OUT_DEPTH(self) -> int:
        return self.depth(MemType.OUT)

    # ------------------------------------------------------------------ totals
    @property
    def macs_per_cycle(self) -> int:
        """GEMM multiply-accumulates per cycle: BATCH × BLOCK_IN × BLOCK_OUT."""
        return self.BATCH * self.BLOCK_IN * self.BLOCK_OUT

    @property
    def packs_dsp_pairs(self) -> bool:
        """Whether the GEMM array puts two products in one DSP48 (hw/core/compute.py): with
        ``DSP_PACKING == 2``, int8 or int4 activations and int8 or int4 weights (int4
        sign-extended into the same multiplier; hardware-notes.md "Multipliers").  The resource model
        counts DSPs from the same rule."""
        return self.DSP_PACKING == 2 and self.INP_WIDTH in (4, 8) and self.WGT_WIDTH in (4, 8)

    @property
    def peak_gops(self) -> float:
        """Peak GOPS at CLOCK_MHZ (2 ops per MAC)."""
        return 2 * self.macs_per_cycle * self.CLOCK_MHZ / 1000.0

    @property
    def sram_bytes(self) -> dict[str, int]:
        """On-chip scratchpad bytes per buffer (uop, inp, wgt, acc, out) and ``total``."""
        d = {
            "uop": 1 << self.LOG_UOP_BUFF_SIZE,
            "inp": 1 << self.LOG_INP_BUFF_SIZE,
            "wgt": 1 << self.LOG_WGT_BUFF_SIZE,
            "acc": 1 << self.LOG_ACC_BUFF_SIZE,
            "out": 1 << self.LOG_OUT_BUFF_SIZE,
        }
        d["total"] = sum(d.values())
        return d

    @property
    def bitstream_name(self) -> str:
        """Upstream's bitstream string, e.g. ``1x16_i8w8a32_15_15_18_17``, followed by one
        suffix per datapath option that is on (:data:`OPTION_SUFFIXES`: ``_mul``, ``_req``,
        ``_eng``, ``_fwd``, ``_lane``, ``_ahead``, ``_ring<N>``; ``_dma<N>`` for ``DMA_OUTSTANDING`` > 1, ``_dw<T>``
        for ``DEPTHWISE_TAPS`` T > 0), so a
        core with options is not named like the
        upstream core of its shape (``1x16_i8w8a32_15_15_18_17_req_eng_fwd``); a config
        without them has upstream's name."""
        blk = (f"{self.BLOCK_IN}" if self.LOG_BLOCK_IN == self.LOG_BLOCK_OUT
               else f"{self.BLOCK_IN}x{self.BLOCK_OUT}")
        opts = "".join(f"_{tag}" for key, tag in OPTION_SUFFIXES if getattr(self, key))
        ring = f"_ring{self.INSN_RING}" if self.INSN_RING else ""
        if self.DMA_OUTSTANDING > 1:
            ring += f"_dma{self.DMA_OUTSTANDING}"
        if self.DEPTHWISE_TAPS:
            ring += f"_dw{self.DEPTHWISE_TAPS}"
        return (f"{self.BATCH}x{blk}_i{self.INP_WIDTH}w{self.WGT_WIDTH}a{self.ACC_WIDTH}_"
                f"{self.LOG_UOP_BUFF_SIZE}_{self.LOG_INP_BUFF_SIZE}_{self.LOG_WGT_BUFF_SIZE}_"
                f"{self.LOG_ACC_BUFF_SIZE}{opts}{ring}")

    # ------------------------------------------------------------------ identity
    def hardware_dict(self) -> dict[str, Any]:
        """Every field that shapes the hardware or the ISA (all but TARGET and HW_VER)."""
        d = dataclasses.asdict(self)
        d.pop("TARGET")
        d.pop("HW_VER")
        d["CLOCK_MHZ"] = float(d["CLOCK_MHZ"])
        return d

    @property
    def ring(self) -> bool:
        """True when the core has the streamed-execution instruction ring (``INSN_RING``)."""
        return self.INSN_RING > 0

    @cached_property
    def fingerprint(self) -> int:
        """Stable 32-bit hash (CRC-32 of the canonical JSON of :meth:`hardware_dict`).

        Stored in the core's read-only FINGERPRINT register and in every compiled program;
        equal fingerprints mean equal hardware and ISA.
        """
        hw = self.hardware_dict()
        for key in ("INSN_RING", "ALU_REQUANT", "REQ_ENGINE", "ALU_FORWARD", "DEPTHWISE_TAPS",
                    "REQ_LANE_SHIFT", "LOAD_AHEAD"):
            if not hw[key]:     # off: the fingerprint of a config without the key
                del hw[key]
        if hw["DMA_OUTSTANDING"] == 1:     # default: as without the key
            del hw["DMA_OUTSTANDING"]
        canon = json.dumps(hw, sort_keys=True, separators=(",", ":"))
        return zlib.crc32(canon.encode()) & 0xFFFFFFFF

    # ------------------------------------------------------------------ JSON
    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> "VTAConfig":
        """Build from an upstream-style dict (``vta_config.json`` content).

        Accepts upstream's keys unchanged (``LOG_BLOCK`` or ``LOG_BLOCK_IN``/``LOG_BLOCK_OUT``,
        ``TARGET``, ``HW_VER``) plus every extension field of this class.  Target-dependent
        knobs (part, clock, bus width) default to the target's upstream values.  Older
        upstream files (HW_VER 0.0.0) are accepted too: their ``HW_FREQ`` (MHz) is the
        clock (``CLOCK_MHZ``; both given must agree) and their ``HW_CLK_TARGET`` (the HLS
        clock-period target in ns, which shapes nothing here) is checked and dropped.

        Raises:
            ConfigError: an unknown key, a missing required key, or an invalid value.
        """
        if not isinstance(d, Mapping):
            raise ConfigError(f"config must be a JSON object, got {type(d).__name__}")
        d = dict(d)
        _legacy_clock_keys(d)
        names = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(k for k in d if k not in names and k not in ("LOG_BLOCK", "LOG_OUT_WIDTH"))
        if unknown:
            raise ConfigError(f"unknown config key {unknown[0]!r}; allowed: "
                              f"{', '.join(sorted(names | {'LOG_BLOCK'}))}")
        if "LOG_BLOCK" in d:
            lb = d.pop("LOG_BLOCK")
            lo, hi = RANGES["LOG_BLOCK_IN"]
            if isinstance(lb, bool) or not isinstance(lb, int):
                raise ConfigError(f"LOG_BLOCK = {lb!r} must be an integer in {lo}..{hi}")
            if not lo <= lb <= hi:
                raise ConfigError(f"LOG_BLOCK = {lb!r} is out of range; allowed: integers {lo}..{hi}")
            for k in ("LOG_BLOCK_IN", "LOG_BLOCK_OUT"):
                if k in d and d[k] != lb:
                    raise ConfigError(f"{k} = {d[k]!r} contradicts LOG_BLOCK = {lb!r}")
                d.setdefault(k, lb)
        if "LOG_OUT_WIDTH" in d:
            ow = d.pop("LOG_OUT_WIDTH")
            if isinstance(ow, bool) or not isinstance(ow, int):
                raise ConfigError(f"LOG_OUT_WIDTH = {ow!r} must be an integer equal to "
                                  f"LOG_INP_WIDTH")
            if ow != d.get("LOG_INP_WIDTH", cls.LOG_INP_WIDTH):
                raise ConfigError(f"LOG_OUT_WIDTH = {ow!r} is out of range; allowed: equal to "
                                  f"LOG_INP_WIDTH")
        target = d.get("TARGET", cls.TARGET)
        if not isinstance(target, str) or target not in TARGETS:
            raise ConfigError(
                f"TARGET = {target!r} is not supported; allowed: {', '.join(sorted(TARGETS))}")
        merged = dict(TARGETS[target])
        merged.update(d)
        return cls(**merged)

    def to_dict(self) -> dict[str, Any]:
        """Upstream-style dict: upstream keys in upstream's order (``LOG_BLOCK`` when
        BLOCK_IN == BLOCK_OUT), then only the extension keys that differ from the target's
        defaults, so that a config loaded from an upstream JSON round-trips unchanged."""
        out: dict[str, Any] = {}
        for k in UPSTREAM_KEYS:
            if k == "LOG_BLOCK":
                if self.LOG_BLOCK_IN == self.LOG_BLOCK_OUT:
                    out["LOG_BLOCK"] = self.LOG_BLOCK_IN
                else:
                    out["LOG_BLOCK_IN"] = self.LOG_BLOCK_IN
                    out["LOG_BLOCK_OUT"] = self.LOG_BLOCK_OUT
            else:
                out[k] = getattr(self, k)
        base = VTAConfig.from_dict({"TARGET": self.TARGET})
        for f in dataclasses.fields(self):
            if f.name in out or f.name in ("LOG_BLOCK_IN", "LOG_BLOCK_OUT"):
                continue
            v = getattr(self, f.name)
            if v != getattr(base, f.name):
                out[f.name] = v
        return out

    def to_json(self) -> str:
        """JSON text of :meth:`to_dict`, indented like upstream's file."""
        return json.dumps(self.to_dict(), indent=2) + "\n"

    @classmethod
    def from_json_file(cls, path: str | Path) -> "VTAConfig":
        """Load a ``vta_config.json``-style file.

        Raises:
            ConfigError: unreadable file, invalid JSON, or invalid content (the message
                names the file).
        """
        import stat

        p = Path(path)
        try:        # a FIFO would block the open until a writer came; a device never ends
            mode = os.stat(p).st_mode
        except (OSError, ValueError):
            mode = None     # missing, a bad name: the open below names the cause
        if mode is not None and not (stat.S_ISREG(mode) or stat.S_ISDIR(mode)):
            raise ConfigError(f"config file {str(p)!r} is not a regular file (a FIFO or a "
                              f"device)")
        try:
            with open(p, "rb") as f:
                data = f.read(_MAX_CONFIG_BYTES + 1)
        except OSError as e:
            raise ConfigError(f"cannot read config file {str(p)!r}: {e.strerror or e}") from None
        if len(data) > _MAX_CONFIG_BYTES:
            raise ConfigError(f"config file {str(p)!r} is larger than "
                              f"{_MAX_CONFIG_BYTES >> 20} MiB; not a vta_config.json")
        d = decode_json(data, f"config file {str(p)!r}", ConfigError)
        try:
            return cls.from_dict(d)
        except ConfigError as e:
            raise ConfigError(f"{p}: {e}") from None

    def replace(self, **changes: Any) -> "VTAConfig":
        """A copy with ``changes`` applied (validated)."""
        return dataclasses.replace(self, **changes)

    # ------------------------------------------------------------------ reporting
    def derived(self) -> dict[str, Any]:
        """All derived quantities, as a flat dict (used by ``vtaforge config show``)."""
        d: dict[str, Any] = {
            "BATCH": self.BATCH, "BLOCK_IN": self.BLOCK_IN, "BLOCK_OUT": self.BLOCK_OUT,
            "INP_WIDTH": self.INP_WIDTH, "WGT_WIDTH": self.WGT_WIDTH,
            "ACC_WIDTH": self.ACC_WIDTH, "OUT_WIDTH": self.OUT_WIDTH,
            "BUS_WIDTH": self.BUS_WIDTH, "LOG_OUT_BUFF_SIZE": self.LOG_OUT_BUFF_SIZE,
        }
        for m in MemType:
            d[f"{m.name}_ELEM_BITS"] = self.elem_bits(m)
            d[f"{m.name}_ELEM_BYTES"] = self.elem_bytes(m)
        for m in (MemType.UOP, MemType.INP, MemType.WGT, MemType.ACC, MemType.OUT):
            d[f"LOG_{m.name}_DEPTH"] = self.log_depth(m)
            d[f"{m.name}_DEPTH"] = self.depth(m)
        from .isa import isa_layout

        lay = isa_layout(self)
        d["UOP_DST_BITS"] = lay.uop_field("dst").width
        d["UOP_SRC_BITS"] = lay.uop_field("src").width
        d["UOP_WGT_BITS"] = lay.uop_field("wgt").width
        d["GEMM_INSN_BITS_USED"] = lay.used_bits("gemm")
        d["ALU_INSN_BITS_USED"] = lay.used_bits("alu")
        d["MACS_PER_CYCLE"] = self.macs_per_cycle
        d["PEAK_GOPS"] = round(self.peak_gops, 2)
        for k, v in self.sram_bytes.items():
            d[f"SRAM_{k.upper()}_BYTES"] = v
        d["DRAM_ALIGNMENT"] = self.dram_alignment
        d["BITSTREAM"] = self.bitstream_name
        d["FINGERPRINT"] = f"0x{self.fingerprint:08x}"
        return d


#: The largest config file read (a ``vta_config.json`` is a few hundred bytes; a device
#: such as ``/dev/zero`` given as a config is refused instead of read forever).
_MAX_CONFIG_BYTES = 16 << 20


def _preset_dicts() -> dict[str, dict[str, Any]]:
    return {
        # The fast core of each board (FAST_PRESETS), first: the DSE's fastest design on the
        # whole networks (vtaforge dse run --board B --workloads resnet18-net,mobilenet-net
        # --size full over the board space with REQ_ENGINE and ALU_FORWARD as axes;
        # docs/dse.md "Presets"): pynq's 1x16x16 with a 16 KiB micro-op buffer, the fused
        # requantize, the REQ engine and ALU forwarding, on the PYNQ-Z1/Z2's part; with
        # four outstanding DMA reads per client (DMA_OUTSTANDING 4: ResNet-18 on rtl with a
        # board's 40-60 cycles of DRAM latency 7,903,358 -> 7,807,506 cycles, on the ideal
        # bus 7,795,057 -> 7,783,821, for +30 LUT / +209 FF; bench/RESULTS.md 2026-12-07);
        # and depthwise GEMMs of 3 taps (DEPTHWISE_TAPS 3: the fastest of the 128 points
        # around it with the option as an axis, bench/dse_board_pick.py --fast --blocks 4
        # --axis DEPTHWISE_TAPS=0,3 --axis DMA_OUTSTANDING=4, 110,100 us against 116,064
        # on both networks; MobileNet-v1 on rtl with latency 3,832,974 -> 3,273,761 cycles,
        # for +48 DSP / +1,611 LUT; bench/RESULTS.md 2026-12-07); and per-lane requantize
        # shifts (REQ_LANE_SHIFT: the fastest of the 128 points around it with the option as
        # an axis, --axis DEPTHWISE_TAPS=3 --axis DMA_OUTSTANDING=4 --axis
        # REQ_LANE_SHIFT=false,true, 105,317 us against 109,857; MobileNet-v1 on rtl with
        # latency 3,212,701 -> 2,964,380 cycles, ResNet-18 7,792,399 -> 7,645,909, for no
        # measurable LUT / FF; bench/RESULTS.md 2026-12-08); and LOADs taken ahead
        # (LOAD_AHEAD: again the fastest of the sweep with the option as an axis, 105,140 us
        # against 105,317; MobileNet-v1 on rtl with latency 2,944,514 -> 2,910,724, ResNet-18
        # 7,645,909 -> 7,632,869, for +150 LUT / +112 FF; bench/RESULTS.md 2026-12-08).
        "pynq-fast": {"TARGET": "pynq", "PART": BOARDS[TARGET_BOARDS["pynq"]].part,
                      "LOG_UOP_BUFF_SIZE": 14, "ALU_REQUANT": True, "REQ_ENGINE": True,
                      "ALU_FORWARD": True, "DMA_OUTSTANDING": 4, "DEPTHWISE_TAPS": 3,
                      "REQ_LANE_SHIFT": True, "LOAD_AHEAD": True},
        # The Ultra96-V2's: 1x16x32 (uop/inp/wgt/acc depths 2^12/2^10/2^9/2^11) with the
        # fused requantize and the REQ engine on its xczu3eg-sbva484-1-i (the sweep's arrays
        # of 16 to 64 per side; forwarding adds nothing where BLOCK_IN != BLOCK_OUT: the
        # max-pool keeps its ACC8 form there).
        "ultra96-fast": {"TARGET": "ultra96", "PART": BOARDS[TARGET_BOARDS["ultra96"]].part,
                         "LOG_BLOCK_IN": 4, "LOG_BLOCK_OUT": 5, "LOG_UOP_BUFF_SIZE": 14,
                         "LOG_INP_BUFF_SIZE": 14, "LOG_WGT_BUFF_SIZE": 18,
                         "LOG_ACC_BUFF_SIZE": 18, "ALU_REQUANT": True, "REQ_ENGINE": True},
        # The ZCU104's: 1x64x32 (depths 2^12/2^10/2^9/2^10) with the fused requantize, the
        # REQ engine and ALU forwarding on its xczu7ev.
        "zcu104-fast": {"TARGET": "zcu104", "PART": BOARDS[TARGET_BOARDS["zcu104"]].part,
                        "LOG_BLOCK_IN": 6, "LOG_BLOCK_OUT": 5, "LOG_UOP_BUFF_SIZE": 14,
                        "LOG_INP_BUFF_SIZE": 16, "LOG_WGT_BUFF_SIZE": 20,
                        "LOG_ACC_BUFF_SIZE": 17, "ALU_REQUANT": True, "REQ_ENGINE": True,
                        "ALU_FORWARD": True},
        # Upstream default (HW_VER 0.0.2): 1x16x16, i8 w8 a32, 32/32/256/128 KiB, 64-bit bus.
        "pynq": {"TARGET": "pynq"},
        "ultra96": {"TARGET": "ultra96"},
        "zcu104": {"TARGET": "zcu104"},
        # A small core for fast tests: 1x4x4, elements narrower than a bus beat.
        "tiny": {"TARGET": "sim", "LOG_BLOCK": 2, "LOG_UOP_BUFF_SIZE": 12,
                 "LOG_INP_BUFF_SIZE": 12, "LOG_WGT_BUFF_SIZE": 13, "LOG_ACC_BUFF_SIZE": 13,
                 "DSP_PACKING": 1},
        # Batch-2, BLOCK_IN != BLOCK_OUT: the shapes that break naive code.
        "batch2": {"TARGET": "sim", "LOG_BATCH": 1, "LOG_BLOCK_IN": 3, "LOG_BLOCK_OUT": 2,
                   "LOG_UOP_BUFF_SIZE": 12, "LOG_INP_BUFF_SIZE": 13, "LOG_WGT_BUFF_SIZE": 13,
                   "LOG_ACC_BUFF_SIZE": 14, "DSP_PACKING": 1},
    }


PRESETS: tuple[str, ...] = tuple(_preset_dicts())

#: Per TARGET with a board, the preset of its fast core (the DSE's pick for that board on
#: whole networks; docs/dse.md "Presets"); the TARGET's own preset stays upstream's core.
FAST_PRESETS: dict[str, str] = {"pynq": "pynq-fast", "ultra96": "ultra96-fast",
                                 "zcu104": "zcu104-fast"}


def preset(name: str) -> VTAConfig:
    """The named preset config (see :data:`PRESETS`).

    Raises:
        ConfigError: unknown preset name.
    """
    d = _preset_dicts().get(name)
    if d is None:
        raise ConfigError(f"unknown preset {name!r}; allowed: {', '.join(PRESETS)}")
    return VTAConfig.from_dict(d)


def _legacy_clock_keys(d: dict[str, Any]) -> None:
    """Map the clock keys of upstream's older ``vta_config.json`` (HW_VER 0.0.0) in place:
    ``HW_FREQ`` (MHz) -> ``CLOCK_MHZ``; ``HW_CLK_TARGET`` (HLS period target, ns) dropped
    after a range check.

    Raises:
        ConfigError: a value that is not a positive number, or ``HW_FREQ`` contradicting
            ``CLOCK_MHZ``.
    """
    for key in ("HW_FREQ", "HW_CLK_TARGET"):
        v = d.get(key)
        if key in d and (isinstance(v, bool) or not isinstance(v, (int, float)) or not v > 0):
            unit = "MHz" if key == "HW_FREQ" else "ns"
            raise ConfigError(f"{key} = {v!r} must be a positive number ({unit})")
    d.pop("HW_CLK_TARGET", None)
    if "HW_FREQ" in d:
        f = d.pop("HW_FREQ")
        if "CLOCK_MHZ" in d and d["CLOCK_MHZ"] != f:
            raise ConfigError(f"HW_FREQ = {f!r} contradicts CLOCK_MHZ = {d['CLOCK_MHZ']!r}")
        d["CLOCK_MHZ"] = f


def load_config(spec: str | Path | VTAConfig | None = None) -> VTAConfig:
    """Resolve a preset name, a JSON file path, or a config (``None`` means ``pynq``).

    Raises:
        ConfigError: neither a preset nor a readable, valid config file.
    """
    if spec is None:
        return preset("pynq")
    if isinstance(spec, VTAConfig):
        return spec
    s = str(spec)
    if s in PRESETS:
        return preset(s)
    if not s.strip():
        raise ConfigError(f"config {s!r} is empty: give a preset ({', '.join(PRESETS)}) or a "
                          f"config file")
    if s.endswith(".json") or os.sep in s or Path(s).exists():
        return VTAConfig.from_json_file(s)
    raise ConfigError(f"{s!r} is neither a preset ({', '.join(PRESETS)}) nor a config file")


def decode_json(data: bytes, label: str, error: type[Exception] = ValueError):
    """The JSON value of ``data`` (UTF-8, a BOM allowed), for the file named ``label``.

    Raises:
        error: (one line naming ``label``) not UTF-8 text (the offset of the first bad
            byte), not JSON (message, line, column), or nested too deeply for the parser.
    """
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as e:
        raise error(f"{label} is not a text file (byte 0x{data[e.start]:02x} at offset "
                    f"{e.start} is not UTF-8; JSON is UTF-8 text)") from None
    try:
        return json.loads(text)
    except json.JSONDecodeError as e:
        raise error(f"{label} is not valid JSON: {e.msg} (line {e.lineno}, column "
                    f"{e.colno})") from None
    except RecursionError:
        raise error(f"{label} is nested too deeply to parse (arrays or objects inside each "
                    f"other thousands of levels deep)") from None
