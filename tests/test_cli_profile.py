"""``vtaforge profile``: per-step cycles beside their bound, from the core's counters."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from vtaforge.cli import main

MODEL = Path(__file__).parent / "compiler" / "real_models" / "resnet_tiny.ts_op13.onnx"


@pytest.fixture(scope="module")
def x_path(tmp_path_factory):
    p = tmp_path_factory.mktemp("prof") / "x.npy"
    np.save(p, np.load(MODEL.parent / "inputs.npz")["resnet_tiny"][0])
    return p


@pytest.mark.rtl
def test_profile_on_rtl_reports_cycles_bounds_and_counters(x_path):
    pytest.importorskip("vtaforge.runtime.rtl")
    r = CliRunner().invoke(main, ["profile", "--model", str(MODEL), "--input", str(x_path),
                                  "--config", "tiny", "--target", "rtl"])
    assert r.exit_code == 0, r.output
    rows = [ln.split() for ln in r.output.splitlines() if re.match(r"^\s+\S+\s+VTA\s", ln)]
    assert len(rows) >= 8
    for row in rows:
        cycles, share, bound, eff = int(row[2]), float(row[3].rstrip("%")), int(row[4]), float(row[5])
        assert cycles > 0 and bound > 0 and 0 < share <= 100
        assert eff == pytest.approx(bound / cycles, abs=0.006)
        assert eff <= 1.0          # a bound is a lower bound on the cycles
    total = re.search(r"total VTA: (\d+) cycles .* bound (\d+), efficiency ([\d.]+)", r.output)
    assert total and int(total.group(1)) == sum(int(row[2]) for row in rows)
    assert any(ln.strip().startswith("input_quantize") and "CPU (numpy)" in ln for ln in r.output.splitlines())


def test_profile_on_fsim_says_cycles_need_rtl(x_path):
    r = CliRunner().invoke(main, ["profile", "--model", str(MODEL), "--input", str(x_path),
                                  "--config", "tiny", "--target", "fsim"])
    assert r.exit_code == 0, r.output
    assert "use --target rtl for cycles" in r.output


def test_profile_bad_target_is_one_error_line(x_path):
    r = CliRunner().invoke(main, ["profile", "--model", str(MODEL), "--input", str(x_path),
                                  "--target", "gpu"])
    assert r.exit_code == 2 and r.output.strip().startswith("error: unknown target"), r.output
