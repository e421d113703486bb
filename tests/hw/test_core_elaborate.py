"""Elaboration of the core at every preset, the top-level port contract, and deterministic
Verilog emission."""

from __future__ import annotations

import re

import pytest
from amaranth.back import rtlil

from vtaforge.hw.config import PRESETS, preset
from vtaforge.hw.core import DEBUG_STATE_NAMES, VTACore, emit_verilog
from vtaforge.hw.core.axi import axi_lite_members, axi_master_members


BIG = {"pynq", "ultra96", "zcu104"}  # 256 multipliers: ~10 s each to elaborate


@pytest.mark.parametrize("name", [pytest.param(p, marks=[pytest.mark.slow] if p in BIG else [])
                                  for p in PRESETS])
def test_elaborates_at_every_preset(name):
    text = rtlil.convert(VTACore(preset(name)), name="vta_core")
    assert "module \\vta_core" in text


@pytest.fixture(scope="module")
def tiny_verilog():
    return emit_verilog(preset("tiny"))


def _port_widths(verilog: str) -> dict[str, int]:
    top = verilog[verilog.index("module vta_core("):]
    top = top[:top.index("endmodule")]
    out = {}
    for mm in re.finditer(r"^\s*(input|output)\s+(?:wire\s+|reg\s+)?(?:\[(\d+):0\]\s*)?(\w+);",
                          top, re.M):
        out[mm.group(3)] = int(mm.group(2)) + 1 if mm.group(2) else 1
    return out


def test_port_contract(tiny_verilog):
    cfg = preset("tiny")
    ports = _port_widths(tiny_verilog)
    expect = {"clk": 1, "rst": 1, "irq": 1, "dbg_state": 32}
    for name, member in {**axi_lite_members(), **axi_master_members(cfg.BUS_WIDTH)}.items():
        from amaranth.hdl import Shape
        expect[name] = Shape.cast(member.shape).width
    assert ports == expect
    assert expect["m_axi_rdata"] == cfg.BUS_WIDTH and expect["m_axi_wstrb"] == cfg.BUS_WIDTH // 8
    assert expect["s_axi_awaddr"] == 8 and expect["m_axi_araddr"] == 32


def test_emit_deterministic(tiny_verilog):
    assert emit_verilog(preset("tiny")) == tiny_verilog


def test_emit_name_and_errors():
    text = emit_verilog(preset("tiny"), name="my_vta")
    assert "module my_vta(" in text
    with pytest.raises(ValueError, match="not a Verilog identifier"):
        emit_verilog(preset("tiny"), name="bad name")
    with pytest.raises(TypeError, match="VTAConfig"):
        emit_verilog("tiny")


def test_debug_state_names():
    assert set(DEBUG_STATE_NAMES) == {"fetch", "load", "compute", "store"}
    for unit, names in DEBUG_STATE_NAMES.items():
        assert names[0] == "IDLE"
        assert all(0 <= k < 16 for k in names), unit


def test_cli_hw_verilog_writes_three_files(tmp_path, tiny_verilog):
    import json

    from click.testing import CliRunner

    from vtaforge.cli import main

    res = CliRunner().invoke(main, ["hw", "verilog", "--config", "tiny", "-o", str(tmp_path)])
    assert res.exit_code == 0, res.output
    assert (tmp_path / "vta_core.v").read_text() == tiny_verilog
    rm = json.loads((tmp_path / "regmap.json").read_text())
    assert rm["fingerprint"] == preset("tiny").fingerprint
    assert "#define VTA_REG_CTRL 0x00u" in (tmp_path / "vta_regs.h").read_text()


def test_cli_hw_resources_unknown_part():
    from click.testing import CliRunner

    from vtaforge.cli import main

    res = CliRunner().invoke(main, ["hw", "resources", "--config", "tiny", "--part", "xc9"])
    assert res.exit_code != 0 and "unknown part" in res.output


@pytest.mark.parametrize("name", ["tiny", "batch2"])
def test_core_instantiates_exactly_the_memory_inventory(name, monkeypatch):
    """The scratchpads and command queues the elaborated core builds are exactly
    ``VTAConfig.memories()`` (the inventory the DSE's block-RAM estimate reads), counted
    by hooking the two classes' constructors during elaboration."""
    from vtaforge.hw.core import compute, queues, scratchpad, top

    built = []
    real_sp, real_cq = scratchpad.Scratchpad.__init__, queues.CommandQueue.__init__

    def sp_init(self, width, depth):
        built.append(("scratchpad", depth, width))
        real_sp(self, width, depth)

    def cq_init(self, width, depth):
        built.append(("fifo", depth, width))
        real_cq(self, width, depth)

    monkeypatch.setattr(scratchpad.Scratchpad, "__init__", sp_init)
    monkeypatch.setattr(queues.CommandQueue, "__init__", cq_init)
    assert top.Scratchpad is compute.Scratchpad is scratchpad.Scratchpad
    cfg = preset(name)
    rtlil.convert(VTACore(cfg), name="vta_core")
    want = sorted((m.kind, m.depth, m.width) for m in cfg.memories())
    assert sorted(built) == want


def test_dse_memory_map_reads_the_inventory():
    """The DSE's memory map has one row per inventory entry (FIFOs hold depth - 1)."""
    from vtaforge.dse.resources import memory_map

    cfg = preset("pynq")
    rows = {r["name"]: (r["depth"], r["width"]) for r in memory_map(cfg)}
    assert rows == {m.name: (m.depth - (m.kind == "fifo"), m.width) for m in cfg.memories()}
    assert rows["acc"] == (cfg.ACC_DEPTH, cfg.BATCH * cfg.BLOCK_OUT * cfg.ACC_WIDTH)
