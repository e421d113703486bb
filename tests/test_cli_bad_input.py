"""Bad input through the CLI: one ``error:`` line, exit status 2, nothing written wrongly.

Cases found in a review of the installed CLI (each failed before its fix: internal errors,
silently garbage models, outputs written under another name).
"""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest
from vtaforge.compiler.models import DIGITS_ONNX
from vtaforge.runtime.bundle import save_bundle


def _run(*args: str, pre: str = "") -> subprocess.CompletedProcess:
    code = f"{pre}\nfrom vtaforge.cli import main\nmain({list(args)!r})"
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=120)


def _error(r: subprocess.CompletedProcess, pattern: str) -> None:
    assert r.returncode == 2, (r.returncode, r.stderr)
    lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: "), r.stderr
    assert "internal error" not in lines[0] and pattern in lines[0], lines[0]


@pytest.fixture(scope="module")
def digits_inputs(tmp_path_factory):
    d = tmp_path_factory.mktemp("inputs")
    x = np.random.default_rng(0).random((4, 1, 8, 8), dtype=np.float32)
    np.save(d / "x.npy", x)
    bad = x.copy()
    bad[1, 0, 2, 3] = np.nan
    np.save(d / "nan.npy", bad)
    bad = x.copy()
    bad[0, 0, 0, 0] = np.inf
    np.save(d / "inf.npy", bad)
    np.save(d / "empty.npy", np.zeros((0, 1, 8, 8), np.float32))
    return d


def _finish_only_bundle(path, insn_addr, insn_count):
    save_bundle(path, np.zeros(64, np.uint8), 0, 1)
    with np.load(path) as z:
        dram = z["dram"]
    np.savez(path, dram=dram, insn_addr=insn_addr, insn_count=insn_count)


@pytest.mark.parametrize("addr,count", [(np.uint64(2**64 - 1), np.int64(1)),
                                        (np.int64(0), np.uint64(2**64 - 1)),
                                        (np.int64(2**62), np.int64(2**60))])
def test_exec_huge_insn_location_is_a_program_error(tmp_path, addr, count):
    b = tmp_path / "b.npz"
    _finish_only_bundle(b, addr, count)
    _error(_run("exec", str(b)), "instruction fetch")


def test_exec_output_written_to_the_exact_path(tmp_path):
    from vtaforge.hw.isa import Insn, Opcode, encode_program
    from vtaforge.hw.config import preset

    dram = np.zeros(64, np.uint8)
    dram[16:32] = encode_program(preset("pynq"), [Insn(Opcode.FINISH)]).reshape(-1)
    b = tmp_path / "b.npz"
    save_bundle(b, dram, 16, 1)
    out = tmp_path / "final.bin"
    r = _run("exec", str(b), "-o", str(out))
    assert r.returncode == 0, r.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["b.npz", "final.bin"]
    with np.load(out) as z:
        assert np.array_equal(z["dram"], dram)


@pytest.mark.parametrize("name", ["nan.npy", "inf.npy"])
def test_run_rejects_non_finite_input(digits_inputs, tmp_path, name):
    # calibrated on clean data, so the input check itself is what refuses
    r = _run("run", "--model", str(DIGITS_ONNX), "--input", str(digits_inputs / name),
             "--calibrate", str(digits_inputs / "x.npy"), "--output", str(tmp_path / "y.npy"))
    _error(r, "NaN or infinity")
    assert not (tmp_path / "y.npy").exists()


@pytest.mark.parametrize("name,pattern", [("nan.npy", "NaN or infinity"),
                                          ("inf.npy", "NaN or infinity"),
                                          ("empty.npy", "no samples")])
def test_compile_rejects_bad_calibration(digits_inputs, tmp_path, name, pattern):
    out = tmp_path / "m.vtapkg"
    out.write_bytes(b"keep")
    r = _run("compile", str(DIGITS_ONNX), "-o", str(out), "--calibrate",
             str(digits_inputs / name))
    _error(r, pattern)
    assert out.read_bytes() == b"keep"


def test_run_output_written_to_the_exact_path(digits_inputs, tmp_path):
    out = tmp_path / "logits"
    r = _run("run", "--model", str(DIGITS_ONNX), "--input", str(digits_inputs / "x.npy"),
             "--output", str(out))
    assert r.returncode == 0, r.stderr
    assert [p.name for p in tmp_path.iterdir()] == ["logits"]
    assert np.load(out).shape == (4, 10)


def test_run_calibrate_with_artifact_is_refused(digits_inputs, tmp_path):
    pkg = tmp_path / "m.vtapkg"
    r = _run("compile", str(DIGITS_ONNX), "-o", str(pkg), "--calibrate",
             str(digits_inputs / "x.npy"))
    assert r.returncode == 0, r.stderr
    r = _run("run", "--model", str(pkg), "--input", str(digits_inputs / "x.npy"),
             "--calibrate", str(digits_inputs / "x.npy"))
    _error(r, "--calibrate applies to ONNX models")


@pytest.mark.parametrize("name", ["bad name", "", "../up", "1abc"])
def test_hw_verilog_bad_module_name(tmp_path, name):
    out = tmp_path / "rtl"
    _error(_run("hw", "verilog", "--config", "tiny", "-o", str(out), "--name", name),
           "Verilog identifier")
    assert not out.exists()


def test_hw_verilog_without_the_hw_extra(tmp_path):
    pre = "import sys; sys.modules['amaranth'] = None"  # as if not installed
    _error(_run("hw", "verilog", "--config", "tiny", "-o", str(tmp_path / "rtl"), pre=pre),
           "vtaforge[hw]")


def test_board_timing_binary_file(tmp_path):
    p = tmp_path / "r.rpt"
    p.write_bytes(bytes(range(256)) * 4)
    _error(_run("board", "timing", str(p)), "not a text file")


@pytest.mark.parametrize("args, pattern", [
    (["--within", "nan"], "--within nan must be a finite percentage"),
    (["--within", "inf"], "--within inf must be a finite percentage"),
    (["--jobs", "1000000"], "is not in the range 0<=x<=256"),
])
def test_dse_run_refuses_before_the_sweep(args, pattern, tmp_path):
    """Found in review: --within nan failed after the whole sweep with an internal error;
    --jobs 1000000 hung starting a LocalCluster.  Both are refused before any evaluation."""
    out = tmp_path / "r.json"
    r = _run("dse", "run", "--board", "pynq-z2", "--workloads", "resnet18-c2", "--size", "7",
             "--no-progress", "-o", str(out), *args)
    _error(r, pattern)
    assert not out.exists()


def test_dse_plot_without_matplotlib_refused_up_front(tmp_path):
    """Found in review: --plot without matplotlib failed after the sweep, leaving the report
    and the cache behind."""
    out = tmp_path / "r.json"
    block = "import sys\nsys.modules['matplotlib'] = None"    # import matplotlib fails
    r = _run("dse", "run", "--board", "pynq-z2", "--workloads", "resnet18-c2", "--size", "7",
             "--no-progress", "-o", str(out), "--plot", str(tmp_path / "p.png"), pre=block)
    _error(r, "--plot needs matplotlib")
    assert not out.exists() and not list(tmp_path.glob("*.jsonl"))
