"""``vtaforge run --memory-budget``: the DTR budget from the command line (one line of
report, outputs identical to the unbudgeted run, bad budgets one ``error:`` line)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import numpy as np
import onnx
import pytest
from click.testing import CliRunner

from vtaforge.cli import main

_BENCH = Path(__file__).resolve().parents[1] / "bench" / "dtr_budget.py"


@pytest.fixture(scope="module")
def unet_files(tmp_path_factory):
    spec = importlib.util.spec_from_file_location("dtr_budget_bench_cli", _BENCH)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    d = tmp_path_factory.mktemp("unet")
    onnx.save(mod.unet(32, skips=4), str(d / "unet.onnx"))
    np.save(d / "x.npy", np.random.default_rng(0).standard_normal((1, 3, 32, 32)).astype(np.float32))
    return d


def _run(d, *extra):
    return CliRunner().invoke(main, ["run", "--model", str(d / "unet.onnx"), "--input",
                                     str(d / "x.npy"), *extra])


def test_budget_run_is_identical_and_reported(unet_files):
    d = unet_files
    r0 = _run(d, "--output", str(d / "y0.npy"))
    assert r0.exit_code == 0, r0.output
    assert "memory budget" not in r0.output
    r1 = _run(d, "--output", str(d / "y1.npy"), "--memory-budget", "60KiB")
    assert r1.exit_code == 0, r1.output
    line = [ln for ln in r1.output.splitlines() if ln.startswith("memory budget")]
    assert len(line) == 1, r1.output
    assert "memory budget 61,440 B: peak" in line[0]
    peak = int(line[0].split("peak ")[1].split(" B")[0].replace(",", ""))
    assert peak <= 61440
    evictions = int(line[0].split("; ")[1].split(" eviction")[0])
    assert evictions > 0, line[0]       # 60 KiB is about half this U-Net's liveness peak
    assert np.array_equal(np.load(d / "y0.npy"), np.load(d / "y1.npy"))


@pytest.mark.parametrize("budget, msg", [
    ("1K", "below the"),
    ("3XB", "is not a byte count"),
])
def test_bad_budget_is_one_error_line(unet_files, budget, msg):
    r = _run(unet_files, "--memory-budget", budget)
    assert r.exit_code != 0
    assert msg in r.output and "Traceback" not in r.output, r.output


def test_budget_needs_a_model():
    r = CliRunner().invoke(main, ["run", "--memory-budget", "1M"])
    assert r.exit_code == 2 and "need --model" in r.output, r.output
