"""The one table of parts and boards (hw/parts.py) and every view derived from it.

Each part, board and target fact is written once, in hw/parts.py; ``config.TARGETS``,
``estimate.PARTS`` and ``timing.DEVICES`` are views of it.
These tests fail when a view disagrees with the table, when the table disagrees with
itself (a board whose preset is for another device, a bus wider than the board's port),
or when a part fact is written again as a literal somewhere in the product.
"""

from __future__ import annotations

import ast
import dataclasses
from pathlib import Path

import pytest

from vtaforge.hw import config, estimate, parts, timing, vivado
from vtaforge.hw.config import preset

ROOT = Path(__file__).resolve().parents[2]
PRODUCT = ("hw", "runtime", "compiler", "dse", "vtaforge")


def test_config_targets_are_the_parts_targets():
    assert config.TARGETS == parts.target_defaults()
    for name, t in parts.TARGETS.items():
        cfg = config.VTAConfig(TARGET=name)
        assert (cfg.PART, cfg.CLOCK_MHZ, cfg.LOG_BUS_WIDTH) == (t.part, t.clock_mhz,
                                                                t.log_bus_width)
        assert t.part in parts.PARTS, f"target {name}: part {t.part} not in PARTS"


def test_presets_take_their_targets_part():
    for name in ("pynq", "ultra96", "zcu104"):
        cfg = preset(name)
        assert cfg.PART == parts.TARGETS[cfg.TARGET].part


def test_estimate_parts_are_the_xilinx_devices():
    xilinx = {k: d for k, d in parts.DEVICES.items() if d.family in ("zynq7", "zynqmp")}
    assert set(estimate.PARTS) == set(xilinx)
    for k, d in xilinx.items():
        assert estimate.PARTS[k] == {"lut": d.lut, "ff": d.ff, "dsp": d.dsp, "bram36": d.bram,
                                     "family": d.synth_family}


def test_timing_devices_are_the_ecp5_devices():
    ecp5 = {d.nextpnr: d for d in parts.DEVICES.values() if d.family == "ecp5"}
    assert set(timing.DEVICES) == set(ecp5) == {"25k", "45k", "85k"}
    for k, d in ecp5.items():
        assert timing.DEVICES[k] == {"lut": d.lut, "bram": d.bram, "mult": d.dsp, "ff": d.ff}
    assert parts.ECP5_SPEEDS == (6, 7, 8)


def test_the_flow_has_two_halves_and_no_shim():
    """hw/parts.py (boards, clocks) and hw/vivado.py (the project) are imported by their own
    names: the old ``hw.flow`` re-export module is gone."""
    import importlib.util

    assert importlib.util.find_spec("vtaforge.hw.flow") is None
    assert vivado.FlowError is parts.FlowError


@pytest.mark.parametrize("key", sorted(parts.BOARDS))
def test_every_board_agrees_with_its_part_family_and_preset(key):
    b = parts.BOARDS[key]
    assert b.name == key
    part = parts.PARTS[b.part]
    assert part.device == b.device
    dev = parts.DEVICES[b.device]
    assert dev.family == b.family
    generic = parts.FAMILIES[b.family]
    # a board differs from its family only in what is the board's own
    own = {"name", "title", "part", "ddr_bytes", "preset", "pll_actual_mhz", "board_ids"}
    for f in dataclasses.fields(parts.BoardSpec):
        if f.name not in own:
            assert getattr(b, f.name) == getattr(generic, f.name), (key, f.name)
    assert abs(b.pll_actual_mhz - b.pll_mhz) < 1e-3 * b.pll_mhz
    # the preset it builds by default targets this device and fits its memory port
    t = parts.TARGETS[b.preset]
    assert parts.device_of(t.part) == b.device
    assert 1 << t.log_bus_width == b.mem_port_width
    assert b.default_clock_mhz == parts.pl_clock(b, t.clock_mhz).mhz
    assert b.default_clock_mhz in parts.reachable_pl_clocks(b)
    # resource capacity reachable from the board's part name
    assert estimate.part_info(b.part)["dsp"] == dev.dsp


def test_target_boards_and_board_spec_agree():
    for target, board in parts.TARGET_BOARDS.items():
        b = parts.BOARDS[board]
        assert b.preset == target
        assert parts.board_spec(config.VTAConfig(TARGET=target)) is b
    for key, b in parts.BOARDS.items():
        cfg = preset(b.preset).replace(PART=b.part)
        assert parts.board_spec(cfg, key) is b


def test_board_spec_resolves_aliases():
    """``board_spec`` takes the :data:`BOARD_ALIASES` names as ``dse run --board`` does
    (``dse.space.board_setup``), and names them when it refuses a board."""
    for alias, key in parts.BOARD_ALIASES.items():
        b = parts.BOARDS[key]
        cfg = preset(b.preset).replace(PART=b.part)
        assert parts.board_spec(cfg, alias) is b
    with pytest.raises(parts.FlowError, match=r"unknown board 'kv260'; supported: .*ultra96, "):
        parts.board_spec(preset("pynq"), "kv260")


def test_generic_family_board_for_an_untabulated_part():
    cfg = preset("pynq").replace(PART="xc7z010clg400-1")
    spec = parts.board_spec(cfg)
    assert (spec.family, spec.part, spec.device) == ("zynq7", "xc7z010clg400-1", "xc7z010")
    with pytest.raises(parts.FlowError, match="not a Zynq-7000"):
        parts.board_spec(config.VTAConfig(TARGET="de10nano"))


def test_parse_part():
    assert parts.parse_part("xczu3eg-sbva484-1-e") == parts.PARTS["xczu3eg-sbva484-1-e"]
    p = parts.parse_part("xc7z010clg400-1")
    assert (p.device, p.package, p.speed) == (None, "clg400", "-1")
    p = parts.parse_part("xczu9eg-ffvb1156-2-e")
    assert (p.package, p.speed) == ("ffvb1156", "-2-e")
    with pytest.raises(parts.FlowError, match="neither a known part"):
        parts.parse_part("lfe5u-85f-6bg381c")
    for name, p in parts.PARTS.items():
        assert p.device is None or p.device in parts.DEVICES
        if p.device is not None:
            assert parts.part_device(name) is parts.DEVICES[p.device]


def test_dse_views_read_the_table():
    from vtaforge.dse.space import board_setup

    for key, b in parts.BOARDS.items():
        s = board_setup(key)
        assert (s["part"], s["base"], s["clock_mhz"]) == (b.part, b.preset, b.default_clock_mhz)
        assert 1 << s["log_bus_width"] == b.mem_port_width


def _code_constants(path: Path) -> set:
    """String and int constants of a module, docstrings left out."""
    tree = ast.parse(path.read_text())
    docs = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            body = node.body
            if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
                docs.add(id(body[0].value))
    return {n.value for n in ast.walk(tree)
            if isinstance(n, ast.Constant) and id(n) not in docs
            and isinstance(n.value, (str, int)) and not isinstance(n.value, bool)}


def test_no_part_fact_is_written_twice():
    facts: set = set(parts.PARTS)
    for d in parts.DEVICES.values():
        facts |= {d.lut, d.ff, d.bram if d.bram > 300 else None}
    facts.discard(None)
    hits = []
    for pkg in PRODUCT:
        for f in sorted((ROOT / pkg).rglob("*.py")):
            if f == ROOT / "hw" / "parts.py":
                continue
            for c in _code_constants(f) & facts:
                hits.append(f"{f.relative_to(ROOT)}: {c!r}")
    assert not hits, "part facts copied outside hw/parts.py:\n" + "\n".join(hits)


@pytest.mark.parametrize("mhz", [float("nan"), 0.0, -100.0, float("inf")])
def test_pl_clock_refuses_a_request_that_is_not_a_frequency(mhz):
    """NaN was reported as 'CLOCK_MHZ nan is below the slowest PL clock' and infinity
    gave the PLL itself; both, zero and negatives are refused as what they are."""
    with pytest.raises(parts.FlowError, match="not a positive finite frequency"):
        parts.pl_clock(parts.BOARDS["pynq-z1"], mhz)


@pytest.mark.parametrize("board, bp", [
    ("pynq-z2", "tul.com.tw:pynq-z2:part0:1.0"), ("pynq-z1", "www.digilentinc.com:pynq-z1:part0:1.0"),
    ("ultra96-v2", "avnet.com:ultra96v2:part0:1.2"), ("zcu104", "xilinx.com:zcu104:part0:1.1"),
    ("zcu104", "xilinx.com:ZCU104:part0:1.1"), ("zynq7", "tul.com.tw:pynq-z2:part0:1.0")])
def test_check_board_part_takes_the_boards_own(board, bp):
    spec = parts.BOARDS.get(board) or parts.FAMILIES[board]
    assert parts.check_board_part(spec, bp) == bp


@pytest.mark.parametrize("board, bp, message", [
    ("pynq-z1", "xc9999", r"'xc9999' is not a Vivado board part .*looks like a part name"),
    ("pynq-z1", "xc7z020clg400-1", r"not a Vivado board part .*known parts: .*xc7z020clg400-1"),
    ("zcu104", "zcu104", r"'zcu104' is not a Vivado board part \(VENDOR:BOARD:part0:VERSION"),
    ("zcu104", "xilinx.com:zcu104:part0:1.1 [exec rm]", r"is not a Vivado board part"),
    ("zcu104", "tul.com.tw:pynq-z2:part0:1.0", r"for board 'pynq-z2', not the ZCU104 "
     r"\(VENDOR:zcu104:part0:VERSION\); known boards: PYNQ-Z1: VENDOR:pynq-z1:part0:VERSION"),
    ("pynq-z1", "tul.com.tw:pynq-z2:part0:1.0", r"for board 'pynq-z2', not the PYNQ-Z1")])
def test_check_board_part_refuses_anything_else(board, bp, message):
    """``--board-part xc9999`` went into build.tcl unchecked; a part name, a bare board name
    and another board's board part are refused, naming the form and the known boards."""
    with pytest.raises(parts.FlowError, match=message):
        parts.check_board_part(parts.BOARDS[board], bp)
