"""The Vivado project of a VTAConfig: wrapper Verilog, build script, board.json, and
Vivado's timing report read back.


Nothing here needs Vivado to *generate*; only :func:`run_vivado` runs it.  The generated
files (written by :func:`write_project`):

- ``vta_core.v``: the Amaranth core (:func:`vtaforge.hw.core.emit_verilog`);
- ``vta_wrapper.v``: a thin Verilog wrapper, module ``vta_wrapper``, carrying the
  ``X_INTERFACE_INFO``/``X_INTERFACE_PARAMETER`` attributes (hardware-notes.md: attributes
  on Amaranth signals can be copied by Yosys onto unrelated wires, so they live here).  It
  declares ``clk`` (clock, bus interfaces ``s_axi:m_axi``), ``rst`` (reset,
  ``POLARITY ACTIVE_HIGH``: Vivado only infers polarity from names ending in ``n``),
  ``irq`` (interrupt, level high), the AXI4-Lite slave ``s_axi`` (12-bit address: the 4 KiB
  window; the core decodes the low 8 bits, so its 256-byte register map repeats 16 times)
  and the AXI4 master ``m_axi`` (outstanding counts as the core's DMA engine keeps them:
  :data:`M_AXI_READ_OUTSTANDING`, :data:`M_AXI_WRITE_OUTSTANDING`), whose ``AxCACHE`` it
  drives to the board's value (``0011``: normal, non-cacheable, bufferable; the DMA port is
  not coherent) and ``AxPROT`` likewise (``000`` on Zynq-7000, ``010`` on Zynq UltraScale+;
  vta-anchor.md §1.3);
- ``build.tcl``: creates the project for the board's part, the block design (PS, reset,
  two SmartConnects, the core), the address map, synthesis, implementation, the timing
  summary and utilization reports, the bitstream and the ``.hwh`` hand-off, copied to
  ``out/vta.bit`` / ``out/vta.hwh`` (PYNQ's ``Overlay`` wants them side by side, same stem);
  it stops with an error when the PS cannot make the PL clock, when timing is not met
  (WNS < 0) or when the bitstream or ``.hwh`` is missing, and prints each stage;
- ``build.sh`` (creates ``reports/`` and ``out/``, runs ``vivado -mode batch -source
  build.tcl``, exits non-zero unless the bitstream, the ``.hwh`` and a met timing report are
  there), ``regmap.json``, ``vta_regs.h`` (:mod:`vtaforge.hw.regs`) and ``board.json``
  (board, family, register base, coherence rule, PL clock, fingerprint: what the board
  runtime reads).

The board (its part, PS, ports, register base and PL clock) comes from
:func:`vtaforge.hw.parts.board_spec`; hw/parts.py says which boards there are, how the
PL clock is made (:func:`~vtaforge.hw.parts.pl_clock`) and why the DMA port is not
coherent.

Block design, Zynq-7000: ``processing_system7``; the core's ``m_axi`` → SmartConnect →
``S_AXI_HP0`` (64 bit, DDR only), ``M_AXI_GP0`` → SmartConnect → ``s_axi`` at 0x43C00000
(4 KiB), ``FCLK_CLK0``, ``irq`` → ``IRQ_F2P``.  Zynq UltraScale+: ``zynq_ultra_ps_e``;
``m_axi`` → ``S_AXI_HP0_FPD`` (128 bit, DDR only), ``M_AXI_HPM0_FPD`` → ``s_axi`` at
0xA0000000 (4 KiB), ``pl_clk0``, ``pl_ps_irq0``.  The SmartConnects convert the data width
(``cfg.BUS_WIDTH`` vs the port's) and AXI4 bursts to the PS's AXI3.

Not covered: board presets (DDR/MIO) are applied only when ``board_part`` is given
(PYNQ's Linux image configures the PS at boot; an overlay only sets PL clocks).
"""

from __future__ import annotations

import functools
import importlib.resources
import json
import re
import shutil
import string
import subprocess
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Sequence

from .config import VTAConfig
from .parts import BoardSpec, FlowError, PLClock, board_spec, pl_clock, reachable_pl_clocks
from .regs import REGMAP_SIZE, REGMAP_VERSION, c_header, regmap_json

__all__ = ["FlowError", "FlowWarning", "wrapper_verilog", "build_tcl", "build_sh",
           "board_json", "write_project", "TimingResult", "parse_timing_summary",
           "run_vivado", "REG_WINDOW_BYTES", "WRAPPER_NAME", "CORE_NAME", "BD_NAME",
           "OVERLAY_NAME", "BUILD_STAGES", "M_AXI_READ_OUTSTANDING", "m_axi_read_outstanding",
           "M_AXI_WRITE_OUTSTANDING"]

#: Size of the register window the block design assigns (bytes): the smallest Zynq segment.
REG_WINDOW_BYTES = 4096
#: Module names in the generated project.
WRAPPER_NAME = "vta_wrapper"
CORE_NAME = "vta_core"
BD_NAME = "vta_bd"
#: Base name of the outputs: ``out/vta.bit`` and ``out/vta.hwh`` (PYNQ overlay convention).
OVERLAY_NAME = "vta"
#: Address width of the wrapper's AXI4-Lite slave (the 4 KiB window).
S_AXI_ADDR_BITS = 12
#: Address width the core decodes (hw/core/axi.py ``axi_lite_members``).
CORE_S_AXI_ADDR_BITS = 8
assert (1 << CORE_S_AXI_ADDR_BITS) >= REGMAP_SIZE
#: Read bursts the core's DMA engine keeps in flight: hw/core/axi.py ``R_OUTSTANDING`` (the
#: bursts of one request; ARs wait while 4 await their last R beat).  A number here so
#: that generating the project needs no Amaranth; tests/hw/test_flow.py checks it.
M_AXI_READ_OUTSTANDING = 4
#: Write bursts whose B response may be pending: hw/core/axi.py ``B_OUTSTANDING`` (AW waits
#: while 15 are outstanding).  Kept here as a number so that generating the project needs
#: no Amaranth; tests/hw/test_flow.py checks it against the core.
M_AXI_WRITE_OUTSTANDING = 15


def m_axi_read_outstanding(cfg: VTAConfig) -> int:
    """Read bursts the core's DMA engine keeps in flight for ``cfg``:
    :data:`M_AXI_READ_OUTSTANDING`, or ``DMA_OUTSTANDING`` where that is larger (the
    queued read side of hw/core/axi.py ``DMAEngine._read_queued`` keeps
    ``max(R_OUTSTANDING, DMA_OUTSTANDING)`` bursts awaiting RLAST)."""
    return max(M_AXI_READ_OUTSTANDING, cfg.DMA_OUTSTANDING)


#: The AXI4-Lite slave completes one read and one write at a time (``AXILiteRegs``).
S_AXI_OUTSTANDING = 1


class FlowWarning(UserWarning):
    """The project differs from what the config asks (e.g. the PL clock is rounded down to
    one the PS can make)."""


#: The most Vivado run jobs ``board project --jobs`` takes (as ``dse run --jobs``): more
#: than any host's cores, and a larger integer overflows Vivado's Tcl.
MAX_VIVADO_JOBS = 256

def _clock_note(spec: BoardSpec, clk: PLClock) -> str:
    """One line on a request the PS cannot make (empty when it can)."""
    if clk.exact:
        return ""
    near = f"{_fmt_mhz(clk.below)} MHz (below)"
    if clk.above is not None:
        near += f" or {_fmt_mhz(clk.above)} MHz (above)"
    return (f"CLOCK_MHZ {clk.requested_mhz:g} is not a PL clock the {spec.title} PS can make "
            f"({spec.pll} {spec.pll_mhz:g} MHz over two 6-bit dividers); the project uses "
            f"{_fmt_mhz(clk.mhz)} MHz. Nearest reachable: {near}; set CLOCK_MHZ to one of "
            f"them to match")


# ---------------------------------------------------------------------------- wrapper
def _m_axi_ports(bw: int) -> list[tuple[str, str, int]]:
    """(direction, name, width) of the core's AXI4 master, hw/core/axi.py order."""
    return [
        ("output", "m_axi_araddr", 32), ("output", "m_axi_arlen", 8),
        ("output", "m_axi_arsize", 3), ("output", "m_axi_arburst", 2),
        ("output", "m_axi_arvalid", 1), ("input", "m_axi_arready", 1),
        ("input", "m_axi_rdata", bw), ("input", "m_axi_rresp", 2),
        ("input", "m_axi_rlast", 1), ("input", "m_axi_rvalid", 1),
        ("output", "m_axi_rready", 1),
        ("output", "m_axi_awaddr", 32), ("output", "m_axi_awlen", 8),
        ("output", "m_axi_awsize", 3), ("output", "m_axi_awburst", 2),
        ("output", "m_axi_awvalid", 1), ("input", "m_axi_awready", 1),
        ("output", "m_axi_wdata", bw), ("output", "m_axi_wstrb", bw // 8),
        ("output", "m_axi_wlast", 1), ("output", "m_axi_wvalid", 1),
        ("input", "m_axi_wready", 1),
        ("input", "m_axi_bresp", 2), ("input", "m_axi_bvalid", 1),
        ("output", "m_axi_bready", 1),
    ]


def _s_axi_ports() -> list[tuple[str, str, int]]:
    a = S_AXI_ADDR_BITS
    return [
        ("input", "s_axi_awaddr", a), ("input", "s_axi_awprot", 3),
        ("input", "s_axi_awvalid", 1), ("output", "s_axi_awready", 1),
        ("input", "s_axi_wdata", 32), ("input", "s_axi_wstrb", 4),
        ("input", "s_axi_wvalid", 1), ("output", "s_axi_wready", 1),
        ("output", "s_axi_bresp", 2), ("output", "s_axi_bvalid", 1),
        ("input", "s_axi_bready", 1),
        ("input", "s_axi_araddr", a), ("input", "s_axi_arprot", 3),
        ("input", "s_axi_arvalid", 1), ("output", "s_axi_arready", 1),
        ("output", "s_axi_rdata", 32), ("output", "s_axi_rresp", 2),
        ("output", "s_axi_rvalid", 1), ("input", "s_axi_rready", 1),
    ]


def _decl(direction: str, name: str, width: int) -> str:
    rng = f" [{width - 1}:0]" if width > 1 else ""
    return f"{direction} wire{rng} {name}"


def wrapper_verilog(cfg: VTAConfig, core_name: str = CORE_NAME, *,
                    board: str | None = None) -> str:
    """Verilog text of ``vta_wrapper``: the core plus Vivado interface attributes.

    Ports: ``clk``, ``rst`` (active high), ``irq``, ``s_axi_*`` (AXI4-Lite, 12-bit address,
    32-bit data, with ``AxPROT`` inputs that are ignored; one read and one write
    outstanding), ``m_axi_*`` (AXI4, 32-bit address, ``cfg.BUS_WIDTH``-bit data,
    :func:`m_axi_read_outstanding` reads and :data:`M_AXI_WRITE_OUTSTANDING` writes in
    flight, plus ``m_axi_arcache``/``m_axi_awcache`` driven to the board's ``axcache`` and
    ``m_axi_arprot``/``m_axi_awprot`` to its ``axprot``).  The core's ``dbg_state`` output
    is left unconnected.

    Raises:
        FlowError: ``cfg.PART`` is not a Zynq part (or not the ``board``'s device).
    """
    spec = board_spec(cfg, board)
    bw = cfg.BUS_WIDTH
    lines = [
        f"// Generated by vtaforge (hw/vivado.py) for config fingerprint 0x{cfg.fingerprint:08x}"
        f" ({cfg.bitstream_name}, {cfg.PART}); do not edit.",
        "// Thin wrapper: Vivado interface attributes, AxCACHE/AxPROT of the DMA master.",
        "`default_nettype none",
        f"module {WRAPPER_NAME} (",
    ]
    ports: list[str] = []

    def port(attrs: list[str], decl: str) -> None:
        ports.append("".join(f"  {a}\n" for a in attrs) + f"  {decl}")

    port(['(* X_INTERFACE_INFO = "xilinx.com:signal:clock:1.0 clk CLK" *)',
          '(* X_INTERFACE_PARAMETER = "ASSOCIATED_BUSIF s_axi:m_axi, ASSOCIATED_RESET rst" *)'],
         "input wire clk")
    port(['(* X_INTERFACE_INFO = "xilinx.com:signal:reset:1.0 rst RST" *)',
          '(* X_INTERFACE_PARAMETER = "POLARITY ACTIVE_HIGH" *)'],
         "input wire rst")
    port(['(* X_INTERFACE_INFO = "xilinx.com:signal:interrupt:1.0 irq INTERRUPT" *)',
          '(* X_INTERFACE_PARAMETER = "SENSITIVITY LEVEL_HIGH" *)'],
         "output wire irq")
    s_param = (f"PROTOCOL AXI4LITE, DATA_WIDTH 32, ADDR_WIDTH {S_AXI_ADDR_BITS}, "
               f"HAS_PROT 1, HAS_WSTRB 1, HAS_BRESP 1, HAS_RRESP 1, "
               f"NUM_READ_OUTSTANDING {S_AXI_OUTSTANDING}, "
               f"NUM_WRITE_OUTSTANDING {S_AXI_OUTSTANDING}")
    for i, (d, n, w) in enumerate(_s_axi_ports()):
        attrs = [f'(* X_INTERFACE_INFO = "xilinx.com:interface:aximm:1.0 s_axi '
                 f'{n[len("s_axi_"):].upper()}" *)']
        if i == 0:
            attrs.append(f'(* X_INTERFACE_PARAMETER = "{s_param}" *)')
        port(attrs, _decl(d, n, w))
    m_param = (f"PROTOCOL AXI4, DATA_WIDTH {bw}, ADDR_WIDTH 32, ID_WIDTH 0, "
               f"MAX_BURST_LENGTH 256, HAS_BURST 1, HAS_CACHE 1, HAS_PROT 1, HAS_LOCK 0, "
               f"HAS_QOS 0, HAS_REGION 0, HAS_WSTRB 1, HAS_BRESP 1, HAS_RRESP 1, "
               f"SUPPORTS_NARROW_BURST 0, NUM_READ_OUTSTANDING {m_axi_read_outstanding(cfg)}, "
               f"NUM_WRITE_OUTSTANDING {M_AXI_WRITE_OUTSTANDING}")
    m_ports = _m_axi_ports(bw) + [("output", "m_axi_arcache", 4), ("output", "m_axi_arprot", 3),
                                  ("output", "m_axi_awcache", 4), ("output", "m_axi_awprot", 3)]
    for i, (d, n, w) in enumerate(m_ports):
        attrs = [f'(* X_INTERFACE_INFO = "xilinx.com:interface:aximm:1.0 m_axi '
                 f'{n[len("m_axi_"):].upper()}" *)']
        if i == 0:
            attrs.append(f'(* X_INTERFACE_PARAMETER = "{m_param}" *)')
        port(attrs, _decl(d, n, w))
    lines.append(",\n".join(ports))
    lines.append(");")
    lines += [
        "",
        f"  // DMA through a non-coherent HP port ({spec.coherence}: the host flushes and",
        "  // invalidates its caches): normal, non-cacheable, bufferable.",
        f"  assign m_axi_arcache = 4'b{spec.axcache:04b};",
        f"  assign m_axi_awcache = 4'b{spec.axcache:04b};",
        f"  assign m_axi_arprot = 3'b{spec.axprot:03b};",
        f"  assign m_axi_awprot = 3'b{spec.axprot:03b};",
        "",
        "  wire [31:0] dbg_state_unused;",
        "",
        f"  {core_name} core (",
    ]
    conns = ["    .clk(clk)", "    .rst(rst)", "    .irq(irq)", "    .dbg_state(dbg_state_unused)"]
    lo = CORE_S_AXI_ADDR_BITS
    for d, n, w in _s_axi_ports():
        if n.endswith("prot"):
            continue  # the core has no AxPROT inputs
        if n in ("s_axi_awaddr", "s_axi_araddr"):
            conns.append(f"    .{n}({n}[{lo - 1}:0])")
        else:
            conns.append(f"    .{n}({n})")
    for d, n, w in _m_axi_ports(bw):
        conns.append(f"    .{n}({n})")
    lines.append(",\n".join(conns))
    lines += ["  );", "", "endmodule", "`default_nettype wire", ""]
    return "\n".join(lines)


# ---------------------------------------------------------------------------- TCL
def _fmt_mhz(mhz: float) -> str:
    """A frequency as TCL/text: at most 3 decimals, no trailing zeros (300, 142.857)."""
    return f"{float(mhz):.3f}".rstrip("0").rstrip(".")


# Every user-supplied string that goes into build.tcl (part, board part, file names) must
# be one plain TCL word: no whitespace, quotes, braces, brackets, ``$``, ``;`` or ``\\``
# (a ``[...]`` in a board part would otherwise run as a TCL command inside Vivado).
_TCL_WORD = re.compile(r"^[A-Za-z0-9_.:-]+$")


def _tcl_word(value: str, what: str) -> str:
    """``value`` if it is a plain TCL word (letters, digits, ``_ . : -``).

    Raises:
        FlowError: anything else, naming ``what`` (e.g. ``--board-part``).
    """
    if not isinstance(value, str) or not _TCL_WORD.fullmatch(value):
        raise FlowError(f"{what} {value!r} is not a valid name: only letters, digits and "
                        f"_ . : - are allowed")
    return value


def _tcl_brace(value: str) -> str:
    """``value`` quoted as a literal TCL word (``{...}``; no substitution inside).

    Raises:
        FlowError: ``value`` holds a brace or backslash (cannot be brace-quoted safely).
    """
    if any(c in value for c in "{}\\\n"):
        raise FlowError(f"path {value!r} cannot be quoted for TCL (braces, backslashes "
                        f"and newlines are not allowed)")
    return "{" + value + "}"


#: Stages build.tcl announces (``vtaforge: [HH:MM:SS] stage N/6: ...``).
BUILD_STAGES = ("project and block design", "block-design outputs", "synthesis",
                "implementation and bitstream", "reports and checks", "outputs")


def _ps_props(spec: BoardSpec, clk: PLClock) -> list[tuple[str, str]]:
    """CONFIG.* settings of the PS: ports, PL clock (PLL and frequency), interrupt."""
    mhz = _fmt_mhz(clk.mhz)
    if spec.family == "zynq7":
        return [
            ("PCW_USE_S_AXI_HP0", "1"), ("PCW_S_AXI_HP0_DATA_WIDTH", str(spec.mem_port_width)),
            ("PCW_USE_M_AXI_GP0", "1"), ("PCW_EN_CLK0_PORT", "1"),
            ("PCW_FCLK0_PERIPHERAL_CLKSRC", spec.pll), ("PCW_FPGA0_PERIPHERAL_FREQMHZ", mhz),
            ("PCW_USE_FABRIC_INTERRUPT", "1"), ("PCW_IRQ_F2P_INTR", "1"),
        ]
    return [
        ("PSU__USE__S_AXI_GP2", "1"),  # S_AXI_HP0_FPD
        ("PSU__SAXIGP2__DATA_WIDTH", str(spec.mem_port_width)),
        ("PSU__USE__S_AXI_GP0", "0"),  # no S_AXI_HPC0_FPD (not coherent: flush/invalidate)
        ("PSU__USE__M_AXI_GP0", "1"),  # M_AXI_HPM0_FPD
        ("PSU__USE__M_AXI_GP1", "0"), ("PSU__USE__M_AXI_GP2", "0"),
        ("PSU__FPGA_PL0_ENABLE", "1"), ("PSU__CRL_APB__PL0_REF_CTRL__SRCSEL", spec.pll),
        ("PSU__CRL_APB__PL0_REF_CTRL__FREQMHZ", mhz), ("PSU__USE__IRQ0", "1"),
    ]


def _act_freq_prop(spec: BoardSpec) -> str:
    """The PS parameter holding the PL clock it actually makes."""
    return ("PCW_ACT_FPGA0_PERIPHERAL_FREQMHZ" if spec.family == "zynq7"
            else "PSU__CRL_APB__PL0_REF_CTRL__ACT_FREQMHZ")


def _ps_clock_name(spec: BoardSpec) -> str:
    """Vivado's name for the PS's first PL clock."""
    return "clk_fpga_0" if spec.family == "zynq7" else "clk_pl_0"


class _TclTemplate(string.Template):
    """``@{name}`` placeholders: TCL's own ``$`` and braces stay as they are."""

    delimiter = "@"


#: The template of build.tcl (package data beside this module).
_BUILD_TCL = "build.tcl.in"
#: A placeholder value that removes its line (an optional line left out).
_DROP_LINE = "\x00drop"


@functools.lru_cache(maxsize=1)
def _build_tcl_template() -> str:
    """The text of :data:`_BUILD_TCL` (through importlib.resources: a wheel on sys.path
    imports as a zip)."""
    return importlib.resources.files(__package__).joinpath(_BUILD_TCL).read_text(encoding="utf-8")


def _ps_automation(spec: BoardSpec, board_part: str | None) -> str:
    """The ``apply_bd_automation`` line of the PS (:data:`_DROP_LINE` when none): Zynq-7000
    always (DDR and FIXED_IO made external; the board preset only with a board part),
    UltraScale+ only to apply a board part's preset."""
    if spec.family == "zynq7":
        rule = "xilinx.com:bd_rule:processing_system7"
        auto = ('{make_external "FIXED_IO, DDR" apply_board_preset "%s" '
                'Master "Disable" Slave "Disable"}' % ("1" if board_part else "0"))
    elif board_part:
        rule, auto = "xilinx.com:bd_rule:zynq_ultra_ps_e", '{apply_board_preset "1"}'
    else:
        return _DROP_LINE
    return f"apply_bd_automation -rule {rule} -config {auto} [get_bd_cells ps]"


def build_tcl(cfg: VTAConfig, *, board: str | None = None, board_part: str | None = None,
              jobs: int = 2, core_file: str = f"{CORE_NAME}.v",
              wrapper_file: str = f"{WRAPPER_NAME}.v", overlay_name: str = OVERLAY_NAME
              ) -> str:
    """The Vivado batch script (``vivado -mode batch -source build.tcl``, run in the
    project directory; Vivado 2020.2 or newer).

    Steps (each announced as ``vtaforge: [time] stage N/6: ...``): ``create_project`` for
    the board's part (and ``board_part`` when given, with the board preset applied to the
    PS); add the core and the wrapper; a block design with the PS (HP memory port, control
    port, PL clock from :func:`pl_clock`, interrupt), a ``proc_sys_reset`` (its active-high
    ``peripheral_reset`` drives ``rst``), a SmartConnect from the PS to ``s_axi`` and one
    from ``m_axi`` to the PS; the register window at the board's base (4 KiB); the DMA
    address space holds the port's DDR segment only (every other segment of the port is
    excluded); ``validate_bd_design``; the PS's actual PL clock checked against the one
    asked for (before hours of synthesis); synthesis; implementation to
    ``write_bitstream``; ``report_timing_summary``, ``report_utilization`` and
    ``report_clocks`` in ``reports/``; the routed clock and timing checked; the bitstream
    and the ``.hwh`` copied to ``out/<overlay_name>.bit`` and ``.hwh``.

    The script stops with an error (Vivado exits 1) when a run fails, the PS or the routed
    design has another PL clock, timing is not met (setup or hold slack < 0, or no "All
    user specified timing constraints are met." in the report), or the bitstream or the
    ``.hwh`` is missing; ``out/`` then holds no stale files.

    Raises:
        FlowError: ``cfg.PART`` is not a Zynq part (or not the board's device); an unknown
            board; ``jobs`` < 1; ``board_part``, the part, a file name or ``overlay_name``
            is not a plain TCL word (letters, digits, ``_ . : -``), so nothing
            user-supplied can inject TCL.
    """
    spec = board_spec(cfg, board)
    if (isinstance(jobs, bool) or not isinstance(jobs, int) or jobs < 1
            or jobs > MAX_VIVADO_JOBS):
        raise FlowError(f"--jobs must be an integer in 1..{MAX_VIVADO_JOBS}, got {jobs!r}")
    part = _tcl_word(spec.part or cfg.PART, "part (PART)")
    _tcl_word(cfg.PART, "part (PART)")
    if board_part is not None:
        _tcl_word(board_part, "--board-part")
    core_q = _tcl_brace(_tcl_word(core_file, "core file name"))
    wrapper_q = _tcl_brace(_tcl_word(wrapper_file, "wrapper file name"))
    name = _tcl_word(overlay_name, "overlay name")
    clk = pl_clock(spec, cfg.CLOCK_MHZ)
    near = reachable_pl_clocks(spec, clk.mhz / 2, clk.mhz * 1.5)
    clock_pins = [f"ps/{spec.clk_pin}", "vta_0/clk", *(f"ps/{p}" for p in spec.aclk_pins),
                  "ctrl_smc/aclk", "mem_smc/aclk", "rst_ps/slowest_sync_clk"]
    values = {
        "config_name": cfg.bitstream_name, "fingerprint": f"0x{cfg.fingerprint:08x}",
        "regmap_version": f"0x{REGMAP_VERSION:08x}", "title": spec.title, "part": part,
        "mhz": _fmt_mhz(clk.mhz), "pll": spec.pll, "pll_mhz": _fmt_mhz(spec.pll_mhz),
        "divisor": clk.divisor, "clock_request": f"{cfg.CLOCK_MHZ:g}",
        "mem_port": spec.mem_port, "coherence": spec.coherence,
        "proj": f"vta_{cfg.bitstream_name}", "overlay": name,
        "jobs": int(jobs), "n_stages": len(BUILD_STAGES),
        **{f"stage{i}": what for i, what in enumerate(BUILD_STAGES, 1)},
        "board_part_line": (f"set_property board_part {board_part} [current_project]"
                            if board_part else _DROP_LINE),
        "core_file": core_q, "wrapper_file": wrapper_q,
        "bd": BD_NAME, "wrapper": WRAPPER_NAME, "ps_ip": spec.ps_ip,
        "automation_line": _ps_automation(spec, board_part),
        "ps_props": "\n".join(f"  CONFIG.{k} {{{v}}} \\" for k, v in _ps_props(spec, clk)),
        "ctrl_port": spec.ctrl_port, "bus_width": cfg.BUS_WIDTH,
        "mem_port_width": spec.mem_port_width,
        "clock_pins": " ".join(f"[get_bd_pins {p}]" for p in clock_pins),
        "resetn_pin": spec.resetn_pin, "irq_pin": spec.irq_pin,
        "reg_base": f"0x{spec.reg_base:08X}", "mem_seg": spec.mem_seg,
        "mem_box": spec.mem_seg.split("/")[0], "act_freq_prop": _act_freq_prop(spec),
        "near": ", ".join(_fmt_mhz(f) for f in near), "ps_clock": _ps_clock_name(spec),
    }
    text = _TclTemplate(_build_tcl_template()).substitute(values)
    return "".join(ln for ln in text.splitlines(keepends=True) if ln != _DROP_LINE + "\n")


def build_sh(overlay_name: str = OVERLAY_NAME) -> str:
    """A shell script that runs the Vivado batch flow in its own directory.

    It creates ``reports/`` and ``out/`` (Vivado opens its log there before the script
    runs), prints what it does, and exits 0 only when Vivado succeeded, the timing report
    says every constraint is met and ``out/<name>.bit`` and ``out/<name>.hwh`` exist; 1 when
    the build or timing failed, 2 when Vivado is not on PATH.
    """
    n = _tcl_word(overlay_name, "overlay name")
    return f"""#!/bin/sh
# Generated by vtaforge (hw/vivado.py): build the bitstream with Vivado.
# Exit status: 0 built and timing met (out/{n}.bit, out/{n}.hwh); 1 build or timing
# failed; 2 vivado is not on PATH.
cd "$(dirname "$0")" || exit 2
say() {{ echo "vtaforge: [$(date +%H:%M:%S)] $*"; }}
if ! command -v vivado >/dev/null 2>&1; then
  echo 'error: vivado is not on PATH (source <Vivado>/settings64.sh first)' >&2
  exit 2
fi
mkdir -p reports out || exit 2
rm -f out/{n}.bit out/{n}.hwh
say "running Vivado on build.tcl (takes long; log: reports/vivado.log)"
vivado -mode batch -notrace -source build.tcl -log reports/vivado.log -journal reports/vivado.jou
status=$?
if [ "$status" -ne 0 ]; then
  say "FAILED: Vivado exited with status $status (see the ERROR above and reports/vivado.log)" >&2
  exit 1
fi
if ! grep -q "All user specified timing constraints are met." reports/timing_summary.rpt 2>/dev/null; then
  say "FAILED: timing is not met (reports/timing_summary.rpt)" >&2
  exit 1
fi
for f in out/{n}.bit out/{n}.hwh; do
  if [ ! -s "$f" ]; then say "FAILED: $f is missing" >&2; exit 1; fi
done
say "done: out/{n}.bit and out/{n}.hwh (timing met)"
"""


def board_json(cfg: VTAConfig, *, board: str | None = None,
               overlay_name: str = OVERLAY_NAME) -> str:
    """JSON text describing the board build: board, family, PS ports, register base and
    window, coherence rule, PL clock, fingerprint, output file names (read by
    ``vtaforge.runtime.pynq``)."""
    spec = board_spec(cfg, board)
    clk = pl_clock(spec, cfg.CLOCK_MHZ)
    d = {"board": spec.name, "board_title": spec.title, "family": spec.family,
         "ps_ip": spec.ps_ip, "mem_port": spec.mem_port, "mem_seg": spec.mem_seg,
         "ctrl_port": spec.ctrl_port, "reg_base": spec.reg_base,
         "reg_window": REG_WINDOW_BYTES, "axcache": spec.axcache, "axprot": spec.axprot,
         "coherence": spec.coherence,
         "clock_mhz": round(clk.mhz, 6), "clock_actual_mhz": round(clk.actual_mhz, 6),
         "config_clock_mhz": float(cfg.CLOCK_MHZ),
         "part": spec.part or cfg.PART, "config_part": cfg.PART,
         "fingerprint": cfg.fingerprint, "bitstream_name": cfg.bitstream_name,
         "bitstream": f"out/{overlay_name}.bit", "hwh": f"out/{overlay_name}.hwh",
         "config": cfg.to_dict()}
    return json.dumps(d, indent=2) + "\n"


def write_project(cfg: VTAConfig, out_dir: str | Path, *, board: str | None = None,
                  board_part: str | None = None, jobs: int = 2, verilog: str | None = None,
                  overlay_name: str = OVERLAY_NAME) -> dict[str, Path]:
    """Write every file of the Vivado project into ``out_dir`` (created if missing).

    Args:
        board: a key of :data:`BOARDS` (default: the config's target board, see
            :func:`board_spec`).
        verilog: the core's Verilog text (default: :func:`vtaforge.hw.core.emit_verilog`
            with module name ``vta_core``; tests pass a cached text).

    Returns:
        ``{role: path}`` for ``core``, ``wrapper``, ``tcl``, ``sh``, ``regmap``, ``header``,
        ``board``.

    Warns:
        FlowWarning: ``cfg.CLOCK_MHZ`` is not a PL clock the PS can make; the project uses
            the nearest one below (the message names the reachable neighbours).

    Raises:
        FlowError: ``cfg.PART`` is not a Zynq part (or not the board's device); an unknown
            board; ``board_part``, the part or ``overlay_name`` is not a plain TCL word;
            ``jobs`` < 1.
        OSError: the directory cannot be written.
    """
    spec = board_spec(cfg, board)  # fail before writing anything
    tcl = build_tcl(cfg, board=board, board_part=board_part, jobs=jobs,
                    overlay_name=overlay_name)
    note = _clock_note(spec, pl_clock(spec, cfg.CLOCK_MHZ))
    if note:
        warnings.warn(note, FlowWarning, stacklevel=2)
    d = Path(out_dir)
    d.mkdir(parents=True, exist_ok=True)
    if verilog is None:
        from .core import emit_verilog

        verilog = emit_verilog(cfg, CORE_NAME)
    files = {
        "core": (f"{CORE_NAME}.v", verilog),
        "wrapper": (f"{WRAPPER_NAME}.v", wrapper_verilog(cfg, board=board)),
        "tcl": ("build.tcl", tcl),
        "sh": ("build.sh", build_sh(overlay_name)),
        "regmap": ("regmap.json", regmap_json(cfg)),
        "header": ("vta_regs.h", c_header(cfg)),
        "board": ("board.json", board_json(cfg, board=board, overlay_name=overlay_name)),
    }
    out: dict[str, Path] = {}
    for role, (name, text) in files.items():
        p = d / name
        p.write_text(text)
        out[role] = p
    out["sh"].chmod(0o755)
    return out


# ---------------------------------------------------------------------------- timing
@dataclass(frozen=True)
class TimingResult:
    """What a Vivado ``report_timing_summary`` says.

    Attributes:
        wns_ns: worst negative (setup) slack in ns; ``None`` when the design has no
            constrained path ("inf" in the report).
        whs_ns: worst hold slack in ns, or ``None``.
        met: every user timing constraint is met *and* the design is constrained
            (an unconstrained clock never counts as met: field-faults BR-31).
        fmax_mhz: ``1000 / (period - wns)`` for the worst clock of the intra-clock table
            (the frequency the placed design would close at), ``None`` if unconstrained.
        clock: that clock's name; period_ns: its constrained period.
        reason: one line explaining ``met``.
    """

    wns_ns: float | None
    met: bool
    fmax_mhz: float | None
    whs_ns: float | None = None
    clock: str | None = None
    period_ns: float | None = None
    reason: str = ""


_NUM = r"(-?\d+(?:\.\d+)?|inf|-inf|NA)"


def _num(s: str) -> float | None:
    return None if s in ("inf", "-inf", "NA") else float(s)


def _section(text: str, title: str) -> str | None:
    """The body of the ``| title`` section, up to the next section's ``| Title`` line."""
    m = re.search(r"^\|\s*" + re.escape(title) + r"\s*$", text, re.M)
    if not m:
        return None
    rest = text[m.end():]
    n = re.search(r"^\|\s*[A-Za-z]", rest, re.M)
    return rest[:n.start()] if n else rest


def parse_timing_summary(text: str) -> TimingResult:
    """Parse the text of Vivado's ``report_timing_summary``.

    Reads the "Design Timing Summary" row (WNS, TNS, WHS, ...), the "Clock Summary" table
    (periods) and the "Intra Clock Table" (per-clock WNS), and the verdict line ("All user
    specified timing constraints are met." / "Timing constraints are not met." / "There
    are no user specified timing constraints.").

    Returns:
        a :class:`TimingResult`.

    Raises:
        FlowError: the text is not a timing summary (no "Design Timing Summary" table).
    """
    if not isinstance(text, str):
        raise FlowError("timing summary must be text")
    body = _section(text, "Design Timing Summary")
    if body is None:
        raise FlowError("not a Vivado timing summary: no 'Design Timing Summary' section "
                        "(make it with report_timing_summary)")
    header = re.search(r"^\s*WNS\(ns\)\s+TNS\(ns\).*$", body, re.M)
    if not header:
        raise FlowError("timing summary has no WNS/TNS header row")
    wns = whs = None
    for line in body[header.end():].splitlines():
        s = line.strip()
        if not s or set(s) <= set("- "):
            continue
        vals = s.split()
        # values: WNS, TNS, TNS failing, TNS total, WHS, THS, ... (header words differ)
        if not re.fullmatch(_NUM, vals[0]):
            break
        wns = _num(vals[0])
        whs = _num(vals[4]) if len(vals) > 4 and re.fullmatch(_NUM, vals[4]) else None
        break
    no_constraints = "There are no user specified timing constraints" in text
    not_met = "Timing constraints are not met" in text
    all_met = "All user specified timing constraints are met" in text

    periods: dict[str, float] = {}
    clk_body = _section(text, "Clock Summary")
    if clk_body:
        for m in re.finditer(r"^\s*(\S+)\s+\{[^}]*\}\s+(\d+(?:\.\d+)?)\s+(\d+(?:\.\d+)?)",
                             clk_body, re.M):
            periods[m.group(1)] = float(m.group(2))
    worst_clock, worst = None, None
    intra = _section(text, "Intra Clock Table")
    if intra:
        for m in re.finditer(r"^\s*(\S+)\s+" + _NUM + r"\s+" + _NUM, intra, re.M):
            name, w = m.group(1), _num(m.group(2))
            if name in ("Clock", "-----") or w is None:
                continue
            if worst is None or w < worst:
                worst_clock, worst = name, w
    if worst_clock is None and periods:
        worst_clock = min(periods, key=periods.get)
    period = periods.get(worst_clock) if worst_clock else None

    if no_constraints or wns is None or not periods:
        return TimingResult(wns_ns=None, met=False, fmax_mhz=None, whs_ns=whs,
                            clock=worst_clock, period_ns=period,
                            reason="the design has no clock constraint (unconstrained "
                                   "clock): timing was not checked, so it is not met")
    w = worst if worst is not None else wns
    fmax = 1000.0 / (period - w) if period is not None and period - w > 0 else None
    bad_hold = whs is not None and whs < 0
    met = (wns >= 0) and not bad_hold and not not_met
    if met:
        reason = (f"met: WNS {wns:+.3f} ns" + (f" at {1000.0 / period:g} MHz ({worst_clock})"
                                                if period else ""))
    elif wns < 0:
        reason = f"failed: setup WNS {wns:+.3f} ns" + (f" on {worst_clock}" if worst_clock else "")
    elif bad_hold:
        reason = f"failed: hold WHS {whs:+.3f} ns"
    else:
        reason = "failed: Vivado reports the timing constraints are not met"
    if met and not all_met:
        reason += " (no 'constraints are met' line in the report)"
    return TimingResult(wns_ns=wns, met=met, fmax_mhz=fmax, whs_ns=whs, clock=worst_clock,
                        period_ns=period, reason=reason)


# ---------------------------------------------------------------------------- running
def run_vivado(project_dir: str | Path, *, vivado: str = "vivado", timeout_s: float | None = None,
               extra_args: Sequence[str] = ()) -> TimingResult:
    """Run ``vivado -mode batch -source build.tcl`` in ``project_dir`` (written by
    :func:`write_project`), then parse ``reports/timing_summary.rpt``.

    ``reports/`` and ``out/`` are created first and a timing report left by an earlier
    run is removed, so the verdict is always this run's.

    Returns:
        the :class:`TimingResult` of the routed design; also when Vivado stopped because
        timing was not met (build.tcl exits 1 then, after writing the report), so that the
        caller reports "not met" rather than a tool failure.

    Raises:
        FlowError: ``vivado`` is not on PATH (the message says how to get it), the project
            has no ``build.tcl``, Vivado exits non-zero for another reason (first line: its
            first ``ERROR``; then the last lines of its output), it times out, or the
            timing report is missing.
    """
    d = Path(project_dir)
    if not (d / "build.tcl").is_file():
        raise FlowError(f"{str(d)!r} has no build.tcl; write the project first "
                        f"(vtaforge board project --config PRESET -o DIR)")
    exe = shutil.which(vivado)
    if exe is None:
        raise FlowError(f"{vivado!r} is not on PATH: install Vivado (with Zynq device support) "
                        f"and source its settings64.sh, or copy {d} to a machine that has it "
                        f"and run build.sh there")
    (d / "reports").mkdir(exist_ok=True)
    (d / "out").mkdir(exist_ok=True)
    rpt = d / "reports" / "timing_summary.rpt"
    rpt.unlink(missing_ok=True)
    cmd = [exe, "-mode", "batch", "-notrace", "-source", "build.tcl",
           "-log", str(Path("reports") / "vivado.log"),
           "-journal", str(Path("reports") / "vivado.jou"), *extra_args]
    try:
        p = subprocess.run(cmd, cwd=d, capture_output=True, text=True, timeout=timeout_s)
    except subprocess.TimeoutExpired:
        raise FlowError(f"vivado did not finish within {timeout_s} s") from None
    if p.returncode != 0:
        if rpt.is_file():
            try:
                res = parse_timing_summary(rpt.read_text())
            except FlowError:
                res = None
            if res is not None and not res.met:
                return res
        out = (p.stdout + "\n" + p.stderr).strip().splitlines()
        errs = [l.strip() for l in out if l.lstrip().startswith("ERROR")]
        first = errs[0] if errs else (out[-1].strip() if out else "no output")
        tail = "\n".join(out[-15:])
        raise FlowError(f"vivado failed (exit {p.returncode}): {first} (log: "
                        f"{d / 'reports' / 'vivado.log'})\n{tail}")
    if not rpt.is_file():
        raise FlowError(f"vivado finished but wrote no {rpt}")
    return parse_timing_summary(rpt.read_text())
