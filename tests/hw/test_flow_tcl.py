"""The generated Vivado flow, executed: build.tcl runs under ``tclsh`` with stub Vivado
commands (tests/hw/tcl/vivado_stub.tcl), which check option, property, cell and pin names
and record what was set; build.sh runs with the stub as ``vivado`` on PATH.

Asserted per board (PYNQ-Z1, PYNQ-Z2, Ultra96-V2, ZCU104, and a generic Zynq-7000 part):
the part, the PL clock the PS is asked for and the one it makes, the ports and nets, the
address map (register window; DMA sees DDR only), the AXI outstanding counts, the flow
order, the outputs (``out/vta.bit`` + ``out/vta.hwh``) and the failure exits (timing not
met, no bitstream, a PS whose PLL differs, Vivado missing).

Needs ``tclsh`` (Debian package ``tcl``); skipped without it.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from vtaforge.hw import parts, vivado
from vtaforge.hw.config import preset

TCL = Path(__file__).parent / "tcl"
TCLSH = shutil.which("tclsh")
pytestmark = pytest.mark.skipif(TCLSH is None, reason="tclsh not found: install Tcl "
                                "(Debian/Ubuntu: apt-get install tcl) to run the generated "
                                "Vivado TCL against the stub")

VERILOG = "module vta_core(); endmodule\n"

#: board -> (preset, board argument or None for the preset's own board)
CASES = {
    "pynq-z1": ("pynq", None),
    "pynq-z2": ("pynq", "pynq-z2"),
    "ultra96-v2": ("ultra96", None),
    "zcu104": ("zcu104", None),
    "zynq7": ("tiny", None),          # a sim-target config: generic Zynq-7000, its own part
}
PARTS = {"pynq-z1": "xc7z020clg400-1", "pynq-z2": "xc7z020clg400-1",
         "ultra96-v2": "xczu3eg-sbva484-1-i", "zcu104": "xczu7ev-ffvc1156-2-e",
         "zynq7": "xc7z020clg484-1"}


def _project(d: Path, name: str) -> Path:
    cfg_name, board = CASES[name]
    cfg = preset(cfg_name)
    with pytest.warns(vivado.FlowWarning) if cfg.CLOCK_MHZ == 333 else contextlib.nullcontext():
        vivado.write_project(cfg, d, board=board, verilog=VERILOG)
    return d


def _env(record: Path, **knobs: str) -> dict[str, str]:
    env = dict(os.environ)
    for k in list(env):
        if k.startswith("VTA_STUB_"):
            del env[k]
    env["VTA_STUB_RECORD"] = str(record)
    env.update({f"VTA_STUB_{k}": v for k, v in knobs.items()})
    return env


def _run_tcl(d: Path, **knobs: str) -> tuple[subprocess.CompletedProcess, list[list[str]]]:
    """Run build.tcl in ``d`` the way Vivado's batch mode does (stub commands loaded)."""
    rec = d / "stub_record.tsv"
    rec.unlink(missing_ok=True)
    (d / "reports").mkdir(exist_ok=True)
    p = subprocess.run([TCLSH, str(TCL / "vivado_batch.tcl"), "-mode", "batch", "-notrace",
                        "-source", "build.tcl", "-log", "reports/vivado.log"],
                       cwd=d, env=_env(rec, **knobs), capture_output=True, text=True,
                       timeout=60)
    events = [l.split("\t") for l in rec.read_text().splitlines()] if rec.exists() else []
    return p, events


def _of(events, kind):
    return [e[1:] for e in events if e[0] == kind]


@pytest.fixture(scope="module", params=list(CASES))
def built(request, tmp_path_factory):
    """(board key, project dir, process, events) of one successful stub build."""
    name = request.param
    d = _project(tmp_path_factory.mktemp(name), name)
    p, events = _run_tcl(d)
    assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-2000:]
    return name, d, p, events


# ------------------------------------------------------------------ per board
def test_part_and_ps(built):
    name, d, p, ev = built
    assert _of(ev, "project")[0][2] == PARTS[name]
    spec = parts.BOARDS.get(name) or parts.board_spec(preset("tiny"))
    cells = dict(_of(ev, "cell"))
    assert cells["vta_0"] == "module:vta_wrapper"
    assert cells["ps"].startswith(f"xilinx.com:ip:{spec.ps_ip}:")
    assert cells["mem_smc"].startswith("xilinx.com:ip:smartconnect:")
    # the wrapper and the core are the files Vivado reads
    assert {Path(f[1]).name for f in _of(ev, "file") if f[0] == "source"} >= {
        "vta_core.v", "vta_wrapper.v"}


def test_clock(built):
    name, d, p, ev = built
    props = {(c, k): v for c, k, v in _of(ev, "prop")}
    zynq7 = PARTS[name].startswith("xc7z")
    want = "100" if zynq7 else "300"           # CLOCK_MHZ 333 is unreachable on ZynqMP
    if zynq7:
        assert props[("ps", "PCW_FPGA0_PERIPHERAL_FREQMHZ")] == want
        assert props[("ps", "PCW_FCLK0_PERIPHERAL_CLKSRC")] == "IO PLL"
        assert "vtaforge: PL clock 100.000000 MHz" in p.stdout
    else:
        assert props[("ps", "PSU__CRL_APB__PL0_REF_CTRL__FREQMHZ")] == want
        assert props[("ps", "PSU__CRL_APB__PL0_REF_CTRL__SRCSEL")] == "IOPLL"
        assert "vtaforge: PL clock 299.997000 MHz (asked for 300 MHz)" in p.stdout
    # the routed clock and timing verdict the stub reports are read back by the parser
    res = vivado.parse_timing_summary((d / "reports" / "timing_summary.rpt").read_text())
    assert res.met and res.clock == ("clk_fpga_0" if zynq7 else "clk_pl_0")
    assert res.period_ns == pytest.approx(1000 / int(want), abs=1e-3)
    assert json.loads((d / "board.json").read_text())["clock_mhz"] == int(want)


def test_ports_and_nets(built):
    name, d, p, ev = built
    spec = parts.BOARDS.get(name) or parts.board_spec(preset("tiny"))
    intf = {tuple(e) for e in _of(ev, "intf")}
    assert intf == {(f"ps/{spec.ctrl_port}", "ctrl_smc/S00_AXI"),
                    ("ctrl_smc/M00_AXI", "vta_0/s_axi"),
                    ("vta_0/m_axi", "mem_smc/S00_AXI"),
                    ("mem_smc/M00_AXI", f"ps/{spec.mem_port}")}
    assert spec.mem_port in ("S_AXI_HP0", "S_AXI_HP0_FPD")     # HP: flush-invalidate
    nets = {e[0]: set(e[1:]) for e in _of(ev, "net")}
    assert nets[f"ps/{spec.clk_pin}"] >= {"vta_0/clk", "ctrl_smc/aclk", "mem_smc/aclk",
                                          *(f"ps/{c}" for c in spec.aclk_pins)}
    assert nets["rst_ps/peripheral_reset"] == {"vta_0/rst"}
    assert nets["vta_0/irq"] == {f"ps/{spec.irq_pin}"}
    props = {(c, k): v for c, k, v in _of(ev, "prop")}
    if spec.family == "zynq7":
        assert props[("ps", "PCW_USE_S_AXI_HP0")] == "1"
        assert props[("ps", "PCW_S_AXI_HP0_DATA_WIDTH")] == "64"
        assert ("ps", "PCW_USE_S_AXI_ACP") not in props
    else:
        assert props[("ps", "PSU__USE__S_AXI_GP2")] == "1"      # S_AXI_HP0_FPD
        assert props[("ps", "PSU__SAXIGP2__DATA_WIDTH")] == "128"
        assert props[("ps", "PSU__USE__S_AXI_GP0")] == "0"      # no HPC0
    assert _of(ev, "validate") == [["ok"]]


def test_address_map_ddr_only(built):
    name, d, p, ev = built
    spec = parts.BOARDS.get(name) or parts.board_spec(preset("tiny"))
    assigns = _of(ev, "assign")
    reg = [a for a in assigns if a[0] == "ps/Data"]
    assert reg == [["ps/Data", "vta_0/s_axi/reg0", f"0x{spec.reg_base:08X}", "0x00001000"]]
    dma = [a for a in assigns if a[0] == "vta_0/m_axi"]
    ddr_range = "0x20000000" if spec.family == "zynq7" else "0x80000000"
    assert dma == [["vta_0/m_axi", f"ps/{spec.mem_seg}", "0x00000000", ddr_range]]
    box = spec.mem_seg.split("/")[0]
    excluded = {e[1] for e in _of(ev, "exclude")}
    if spec.family == "zynq7":
        assert excluded == {f"ps/{box}/HP0_HIGH_OCM"}
    else:
        assert excluded == {f"ps/{box}/HP0_{s}" for s in
                            ("DDR_HIGH", "LPS_OCM", "QSPI", "PCIE_LOW")}
    assert _of(ev, "unmapped") == []            # nothing left for Vivado to complain about


def test_outstanding_counts(built):
    name, d, p, ev = built
    params = {(i, k): v for i, k, v in _of(ev, "iface_param")}
    assert params[("m_axi", "NUM_READ_OUTSTANDING")] == "4"
    assert params[("m_axi", "NUM_WRITE_OUTSTANDING")] == "15"
    assert params[("s_axi", "NUM_READ_OUTSTANDING")] == "1"
    assert params[("s_axi", "NUM_WRITE_OUTSTANDING")] == "1"
    assert params[("m_axi", "PROTOCOL")] == "AXI4" and params[("s_axi", "PROTOCOL")] == "AXI4LITE"
    assert params[("clk", "ASSOCIATED_BUSIF")] == "s_axi:m_axi"
    assert params[("rst", "POLARITY")] == "ACTIVE_HIGH"


def test_stages_and_outputs(built):
    name, d, p, ev = built
    stages = [l.split("stage ")[1] for l in p.stdout.splitlines() if "] stage " in l]
    assert stages == [f"{i}/6: {s}" for i, s in enumerate(vivado.BUILD_STAGES, 1)]
    assert _of(ev, "run") == [["synth_1"], ["impl_1"]]
    assert (d / "out" / "vta.bit").read_text() == "stub bitstream"
    assert (d / "out" / "vta.hwh").is_file()
    for r in ("timing_summary.rpt", "utilization.rpt", "clocks.rpt"):
        assert (d / "reports" / r).is_file(), r


# ------------------------------------------------------------------ the stub is strict
@pytest.mark.parametrize("edit,error", [
    (("CONFIG.PCW_USE_S_AXI_HP0 {1}", "CONFIG.PCW_USE_S_AXI_HPO {1}"),
     "has no parameter CONFIG.PCW_USE_S_AXI_HPO"),
    (("-target_address_space $dma_space $ddr_seg", "-target_address_spac $dma_space $ddr_seg"),
     "unknown option '-target_address_spac'"),
    (("CONFIG.PCW_USE_S_AXI_HP0 {1}", "CONFIG.PCW_USE_S_AXI_HP0 {0}"),
     "ps has no interface pin 'S_AXI_HP0'"),
    (("[get_bd_pins rst_ps/peripheral_reset] [get_bd_pins vta_0/rst]",
      "[get_bd_pins rst_ps/peripheral_reset] [get_bd_pins vta_0/irq]"),
     "exactly one driver"),
    (("-offset 0x43C00000 -range 4K", "-offset 0x43C00800 -range 4K"), "not aligned"),
    (("-part $part", "-part xc7z020clg485-1"), "is not a Zynq part"),
])
def test_stub_rejects_broken_tcl(tmp_path, edit, error):
    d = _project(tmp_path, "pynq-z1")
    t = (d / "build.tcl").read_text()
    assert edit[0] in t
    (d / "build.tcl").write_text(t.replace(edit[0], edit[1], 1))
    p, ev = _run_tcl(d)
    assert p.returncode == 1 and error in p.stdout, p.stdout[-2000:]
    assert not (d / "out" / "vta.bit").exists()


def test_stub_reproduces_the_old_address_map(tmp_path):
    """A bare `assign_bd_address` (the old flow) maps every segment the port reaches."""
    d = _project(tmp_path, "zcu104")
    t = (d / "build.tcl").read_text()
    t = t.replace("validate_bd_design\n", "assign_bd_address\nvalidate_bd_design\n", 1)
    t = t.replace("exclude_bd_addr_seg -target_address_space $dma_space $seg",
                  "puts skipped", 1)
    (d / "build.tcl").write_text(t)
    p, ev = _run_tcl(d)
    assert p.returncode == 0, p.stdout[-2000:]
    dma = {a[1] for a in _of(ev, "assign") if a[0] == "vta_0/m_axi"}
    assert dma == {"ps/SAXIGP2/HP0_DDR_LOW", "ps/SAXIGP2/HP0_LPS_OCM", "ps/SAXIGP2/HP0_QSPI",
                   "ps/SAXIGP2/HP0_PCIE_LOW"}


# ------------------------------------------------------------------ failures stop the build
def test_timing_failure_exits_nonzero_and_leaves_no_bitstream(tmp_path):
    d = _project(tmp_path, "ultra96-v2")
    p, ev = _run_tcl(d, WNS="-0.3")
    assert p.returncode == 1
    assert "timing NOT met at 300 MHz (WNS -0.3 ns" in p.stdout
    assert not (d / "out" / "vta.bit").exists() and not (d / "out" / "vta.hwh").exists()
    res = vivado.parse_timing_summary((d / "reports" / "timing_summary.rpt").read_text())
    assert not res.met and res.wns_ns == pytest.approx(-0.3)


def test_missing_bitstream_exits_nonzero(tmp_path):
    d = _project(tmp_path, "pynq-z1")
    p, ev = _run_tcl(d, NO_BIT="1")
    assert p.returncode == 1 and "vtaforge: no bitstream at" in p.stdout
    assert not (d / "out" / "vta.hwh").exists()


def test_ps_clock_checked_before_synthesis(tmp_path):
    """A PS whose PLL is not the one assumed (e.g. a board preset) stops the build at the
    block design, naming what the PS makes and what is reachable, before any run."""
    d = _project(tmp_path, "zcu104")
    p, ev = _run_tcl(d, PLL_MHZ="1400")
    assert p.returncode == 1
    assert "the PS makes a 280.000000 MHz PL clock, not 300 MHz" in p.stdout
    assert "reaches 375, 300, 250" in p.stdout
    assert _of(ev, "run") == []


def test_old_vivado_hwh_layout(tmp_path):
    d = _project(tmp_path, "pynq-z1")
    p, ev = _run_tcl(d, HWH="srcs")
    assert p.returncode == 0, p.stdout[-2000:]
    assert (d / "out" / "vta.hwh").is_file()


# ------------------------------------------------------------------ build.sh and run_vivado
def _build_sh(d: Path, path: str | None = None, **knobs: str) -> subprocess.CompletedProcess:
    env = _env(d / "stub_record.tsv", **knobs)
    env["PATH"] = path if path is not None else f"{TCL}{os.pathsep}{env['PATH']}"
    return subprocess.run(["sh", str(d / "build.sh")], env=env, capture_output=True,
                          text=True, timeout=60)


def test_build_sh(tmp_path):
    d = _project(tmp_path, "pynq-z1")
    assert not (d / "reports").exists()
    p = _build_sh(d)
    assert p.returncode == 0, p.stdout[-2000:] + p.stderr[-2000:]
    assert (d / "reports" / "vivado.log").is_file()      # the folder exists before Vivado
    assert (d / "out" / "vta.bit").is_file() and (d / "out" / "vta.hwh").is_file()
    lines = p.stdout.splitlines()
    assert "running Vivado on build.tcl" in lines[0]
    assert "done: out/vta.bit and out/vta.hwh (timing met)" in lines[-1]
    # a failing rebuild removes the earlier outputs and exits 1
    p = _build_sh(d, WNS="-0.05")
    assert p.returncode == 1 and "FAILED" in p.stderr and "timing NOT met" in p.stdout
    assert not (d / "out" / "vta.bit").exists()
    p = _build_sh(d, NO_BIT="1")
    assert p.returncode == 1 and "no bitstream" in p.stdout


def test_build_sh_without_vivado(tmp_path):
    d = _project(tmp_path, "pynq-z1")
    empty = tmp_path / "empty"
    empty.mkdir()
    p = _build_sh(d, path=f"{empty}{os.pathsep}/usr/bin{os.pathsep}/bin")
    assert p.returncode == 2 and "vivado is not on PATH" in p.stderr


def test_run_vivado_and_board_build(tmp_path, monkeypatch):
    from click.testing import CliRunner

    from vtaforge.commands.board import board_group

    d = _project(tmp_path, "zcu104")
    monkeypatch.setenv("PATH", f"{TCL}{os.pathsep}{os.environ['PATH']}")
    for k in [k for k in os.environ if k.startswith("VTA_STUB_")]:
        monkeypatch.delenv(k)
    monkeypatch.setenv("VTA_STUB_RECORD", str(d / "stub_record.tsv"))
    res = vivado.run_vivado(d)
    assert res.met and res.clock == "clk_pl_0" and res.period_ns == pytest.approx(3.333)
    # timing fails: Vivado exits 1, and the verdict is "not met", not a tool failure
    monkeypatch.setenv("VTA_STUB_WNS", "-0.2")
    res = vivado.run_vivado(d)
    assert not res.met and res.wns_ns == pytest.approx(-0.2)
    r = CliRunner().invoke(board_group, ["build", str(d)])
    assert r.exit_code == 1 and "timing: NOT MET" in r.output and "WNS: -0.200 ns" in r.output
    # any other failure is an error (exit 2)
    monkeypatch.setenv("VTA_STUB_WNS", "0.1")
    monkeypatch.setenv("VTA_STUB_NO_BIT", "1")
    r = CliRunner().invoke(board_group, ["build", str(d)])
    assert r.exit_code == 2 and "vivado failed (exit 1): ERROR: vtaforge: no bitstream" in r.output
