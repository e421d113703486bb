"""Numeric CLI options that make no sense negative, zero or non-finite are refused before
anything runs (review): dse run --dram-latency/--samples/--limit/--seed, exec --max-steps,
board project --jobs; and the cycle model refuses them from Python too."""

from __future__ import annotations

import math

import pytest
from click.testing import CliRunner

from vtaforge.cli import main
from vtaforge.dse import CycleModel, DSEError


@pytest.mark.parametrize("args,name", [
    (["--dram-latency", "-5"], "--dram-latency"),
    (["--dram-latency", "nan"], "--dram-latency"),
    (["--dram-latency", "inf"], "--dram-latency"),
    (["--samples", "0"], "--samples"),
    (["--samples", "-1"], "--samples"),
    (["--limit", "0"], "--limit"),
    (["--limit", "-3"], "--limit"),
    (["--seed", "-1"], "--seed"),
])
def test_dse_run_numeric_options(tmp_path, args, name):
    out = tmp_path / "r.json"
    r = CliRunner().invoke(main, ["dse", "run", "--no-progress", "--workloads", "resnet18-c2",
                                  "-o", str(out), *args])
    assert r.exit_code == 2, r.output
    assert name in r.output + r.stderr
    assert not out.exists()


@pytest.mark.parametrize("v", [-1.0, math.nan, math.inf, -math.inf])
def test_cycle_model_refuses_bad_latency(v):
    with pytest.raises(DSEError, match="dram-latency"):
        CycleModel(dram_latency=v)
    with pytest.raises(DSEError, match="insn_overhead"):
        CycleModel(insn_overhead=v)
    assert CycleModel(dram_latency=0.0).dram_latency == 0.0


@pytest.mark.parametrize("v", ["-1", "0"])
def test_exec_max_steps_must_be_positive(tmp_path, v):
    r = CliRunner().invoke(main, ["exec", str(tmp_path / "missing.npz"), "--max-steps", v])
    assert r.exit_code == 2 and "--max-steps" in r.output + r.stderr


@pytest.mark.parametrize("v", ["0", "257", "999999999999999999999"])
def test_board_project_jobs_out_of_range(tmp_path, v):
    """--jobs 0 and --jobs 10**21 (written into build.tcl, where Vivado's Tcl overflows)."""
    r = CliRunner().invoke(main, ["board", "project", "--config", "tiny", "-o",
                                  str(tmp_path / "p"), "--jobs", v])
    assert r.exit_code == 2 and "'--jobs'" in r.stderr and "1<=x<=256" in r.stderr, r.stderr
    assert not (tmp_path / "p").exists()
