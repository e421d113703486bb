"""Yosys resource estimates: the stat parser on canned reports (both Yosys layouts), the
parts table, and (slow) a real synthesis of the tiny core."""

from __future__ import annotations

import pytest

from vtaforge.hw.config import preset
from vtaforge.hw.estimate import (PARTS, EstimateError, Resources, estimate_resources,
                                  format_report, parse_yosys_stat, part_info)

NEW_STAT = """
3. Printing statistics.

=== vta_core ===

        +----------Local Count, excluding submodules.
        | 
     8049 wires
    20118 wire bits
       46 ports
     8428 cells
       24   $scopeinfo
        1   BUFG
      478   CARRY4
       16   DSP48E1
     2678   FDRE
       10   FDSE
      765   LUT2
      884   LUT3
      700   LUT6
        5   MUXF7
       32   RAM64M
        3   RAMB18E1
       12   RAMB36E1
        4   SRLC32E

"""

OLD_STAT = """
=== vta_core ===

   Number of wires:              12345
   Number of wire bits:         123456
   Number of cells:              20000
     BUFG                            1
     CARRY4                        100
     DSP48E1                       128
     FDRE                         3000
     FDCE                            7
     LUT1                           11
     LUT6                          500
     RAMB18E1                        4
     RAMB36E1                      100

End of script.
"""


def test_parse_new_layout():
    r = parse_yosys_stat(NEW_STAT)
    assert r.lut == 765 + 884 + 700 + 32 * 4 + 4
    assert r.ff == 2678 + 10
    assert r.dsp == 16
    assert r.bram36 == 12 + 1.5
    assert r.cells["CARRY4"] == 478 and r.cells["MUXF7"] == 5


def test_parse_old_layout():
    r = parse_yosys_stat(OLD_STAT)
    assert (r.lut, r.ff, r.dsp, r.bram36) == (511, 3007, 128, 102.0)


def test_parse_takes_last_section():
    r = parse_yosys_stat(OLD_STAT + NEW_STAT)
    assert r.dsp == 16


def test_parse_rejects_garbage():
    with pytest.raises(EstimateError, match="cell-count section"):
        parse_yosys_stat("nothing here")


def test_parts_and_fit():
    assert part_info("xc7z020clg484-1") == PARTS["xc7z020"]
    assert PARTS["xc7z020"] == {"lut": 53200, "ff": 106400, "dsp": 220, "bram36": 140,
                                "family": "xc7"}
    with pytest.raises(EstimateError, match="unknown part"):
        part_info("xc9999")
    ok = Resources(lut=53200, ff=1, dsp=220, bram36=140.0, cells={})
    assert ok.fits("xc7z020")
    assert not Resources(lut=1, ff=1, dsp=221, bram36=1.0, cells={}).fits("xc7z020")
    assert not Resources(lut=1, ff=1, dsp=1, bram36=140.5, cells={}).fits("xc7z020")
    text = format_report("tiny", ok, "xc7z020")
    assert "fits: yes" in text and "53200" in text


@pytest.mark.slow
def test_estimate_tiny_with_yosys(tmp_path):
    cfg = preset("tiny")
    r = estimate_resources(cfg, "xc7z020", workdir=tmp_path)
    assert (tmp_path / "stat.txt").exists()
    # 1x4x4 int8 GEMM without packing: one DSP per product
    assert r.dsp == cfg.macs_per_cycle
    assert 0 < r.lut < 53200 and 0 < r.ff < 106400
    # scratchpads: at least a few block RAMs, well under the part
    assert 1 <= r.bram36 <= 40
    assert r.fits("xc7z020")
