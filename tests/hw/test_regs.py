"""Tests for ``vtaforge.hw.regs``: the register map, its JSON export and its C header."""

from __future__ import annotations

import json
import re
import shutil
import subprocess

import pytest

from vtaforge.hw.config import PRESETS, preset
from vtaforge.hw.regs import (
    REGISTERS,
    REGMAP_SIZE,
    REGMAP_VERSION,
    c_header,
    offset,
    reg,
    regmap_dict,
    regmap_json,
)


def test_offsets_unique_aligned_within_window():
    offs = [r.offset for r in REGISTERS]
    assert len(set(offs)) == len(offs)
    assert all(o % 4 == 0 for o in offs)
    assert all(0 <= o and o + 4 <= REGMAP_SIZE for o in offs)
    assert len({r.name for r in REGISTERS}) == len(REGISTERS)


def test_access_kinds_and_bitfields():
    for r in REGISTERS:
        assert r.access in ("rw", "ro", "wo", "w1c"), r.name
        assert r.doc, r.name
        used = 0
        for f in r.fields:
            assert f.width >= 1 and 0 <= f.lsb and f.lsb + f.width <= 32, (r.name, f.name)
            mask = ((1 << f.width) - 1) << f.lsb
            assert used & mask == 0, f"{r.name}.{f.name} overlaps"
            used |= mask


def test_launch_protocol_registers_exist():
    for name in ("CTRL", "STATUS", "IRQ_STATUS", "INSN_ADDR_LO", "INSN_ADDR_HI", "INSN_COUNT",
                 "CYCLES_LO", "CYCLES_HI", "FINGERPRINT", "VERSION"):
        assert reg(name).name == name
    assert reg("FINGERPRINT").access == "ro"
    assert reg("IRQ_STATUS").access == "w1c"
    assert {f.name for f in reg("CTRL").fields} >= {"START", "IRQ_EN"}
    assert {f.name for f in reg("STATUS").fields} >= {"BUSY", "DONE"}
    assert offset("CTRL") == 0
    with pytest.raises(KeyError):
        reg("NOPE")


@pytest.mark.parametrize("name", PRESETS)
def test_json_has_every_register_and_fingerprint(name):
    cfg = preset(name)
    d = json.loads(regmap_json(cfg))
    assert d == regmap_dict(cfg)
    assert d["fingerprint"] == cfg.fingerprint
    assert d["version"] == REGMAP_VERSION and d["size"] == REGMAP_SIZE
    assert [(r["name"], r["offset"], r["access"]) for r in d["registers"]] == [
        (r.name, r.offset, r.access) for r in REGISTERS]
    assert d["config"] == cfg.to_dict()


@pytest.mark.parametrize("name", PRESETS)
def test_c_header_has_every_register_and_fingerprint(name):
    cfg = preset(name)
    h = c_header(cfg)
    defs = dict(re.findall(r"^#define (\w+) (\S+)", h, re.M))
    assert defs["VTA_FINGERPRINT"] == f"0x{cfg.fingerprint:08x}u"
    for r in REGISTERS:
        assert int(defs[f"VTA_REG_{r.name}"].rstrip("u"), 16) == r.offset
        for f in r.fields:
            assert int(defs[f"VTA_{r.name}_{f.name}"].rstrip("u"), 16) == \
                ((1 << f.width) - 1) << f.lsb
    assert int(defs["VTA_INP_DEPTH"]) == cfg.INP_DEPTH
    assert int(defs["VTA_MACS_PER_CYCLE"]) == cfg.macs_per_cycle


@pytest.mark.skipif(shutil.which("gcc") is None, reason="no gcc")
@pytest.mark.parametrize("name", ["pynq", "batch2"])
def test_c_header_compiles(name, tmp_path):
    cfg = preset(name)
    (tmp_path / "vta_regs.h").write_text(c_header(cfg))
    src = tmp_path / "t.c"
    src.write_text(
        '#include "vta_regs.h"\n#include "vta_regs.h"\n'  # include guard works
        "_Static_assert(VTA_REG_FINGERPRINT == 0x20u, \"offset\");\n"
        f"_Static_assert(VTA_FINGERPRINT == {cfg.fingerprint}u, \"fingerprint\");\n"
        "int main(void) { return (int)(VTA_REG_CTRL + VTA_CTRL_START); }\n")
    r = subprocess.run(["gcc", "-std=c11", "-Wall", "-Werror", "-fsyntax-only", str(src)],
                       capture_output=True, text=True, cwd=tmp_path, timeout=60)
    assert r.returncode == 0, r.stderr


def test_fault_registers_and_message():
    """The scratchpad-fault report: STATUS.ERROR, ERROR (VALID/UNIT/KIND), ERR_INSN,
    ERR_INDEX in the map and the header; fault_message in fsim's words."""
    from vtaforge.hw.isa import Insn, Module, Opcode
    from vtaforge.hw.regs import ErrorKind, fault_message, reg

    cfg = preset("tiny")
    st = {f.name: (f.lsb, f.width) for f in reg("STATUS").fields}
    assert st["ERROR"] == (2, 1)
    er = {f.name: (f.lsb, f.width) for f in reg("ERROR").fields}
    assert er == {"VALID": (0, 1), "UNIT": (1, 2), "KIND": (4, 4)}
    assert [reg(n).offset for n in ("ERROR", "ERR_INSN", "ERR_INDEX")] == [0x54, 0x58, 0x5C]
    h = c_header(cfg)
    assert "#define VTA_REG_ERROR 0x54u" in h and "#define VTA_STATUS_ERROR 0x00000004u" in h
    assert max(k.value for k in ErrorKind) < 16  # fits KIND
    g = Insn(Opcode.GEMM, uop_bgn=0, uop_end=1, iter_out=2, dst_factor_out=300)
    assert fault_message(cfg, ErrorKind.ACC_DST, 600, g, 3) == (
        "instruction 3 (GEMM      [----] uop[0:1] out=2(d300,s0,w0) in=0(d0,s0,w0)): "
        "computed dst index 600 is outside the ACC scratchpad (depth 512)")
    assert fault_message(cfg, ErrorKind.WGT, 512, None, None, Module.COMPUTE, 7) == (
        "compute instruction #7 of the run: computed wgt index 512 is outside the WGT "
        "scratchpad (depth 512)")
    s = Insn(Opcode.STORE, memory_type=4, sram_base=509, y_size=1, x_size=4, x_stride=4)
    assert fault_message(cfg, ErrorKind.SRAM, 512, s, 0).endswith(
        "scratchpad range [509, 513) exceeds the OUT depth 512")
