"""Executor: symbolic batch (1, 2, 7) on one compiled model, artifact round trip and
wrong-config refusal, CLI run/compile contract (one ``error:`` line on bad input)."""

from __future__ import annotations

import re
import subprocess
import sys

import numpy as np
import pytest
from click.testing import CliRunner

from vtaforge.cli import main
from vtaforge.compiler.compile import compile_model
from vtaforge.compiler.models import DIGITS_ONNX, load_digits_split
from vtaforge.compiler.reference import run_quantized
from vtaforge.hw.config import preset
from vtaforge.runtime.artifact import ArtifactError, load_artifact, save_artifact
from vtaforge.runtime.executor import Executor
from vtaforge.runtime.fsim import FsimDevice


@pytest.fixture(scope="module")
def data():
    xtr, ytr, xte, yte = load_digits_split()
    return xtr[:300], xte[:20]


@pytest.fixture(scope="module", params=["pynq", "batch2"])
def compiled(request, data):
    return compile_model(str(DIGITS_ONNX), data[0], request.param)


def test_batches_1_2_7_one_compiled_model(compiled, data):
    ex = Executor(compiled, FsimDevice(compiled.config))
    x = data[1]
    for n in (1, 2, 7, 2, 1):
        out = ex.run(x[:n])["logits"]
        ref = run_quantized(compiled.qgraph, {"input": x[:n]})["logits"]
        assert out.shape == (n, 10)
        np.testing.assert_array_equal(out, ref)
    # weights were copied once: one device buffer per packed constant
    assert len(ex._consts) == len([c for c in compiled.constants if "/" in c])


def test_artifact_round_trip(compiled, data, tmp_path):
    p = tmp_path / "m.vtapkg"
    save_artifact(compiled, p)
    cm2 = load_artifact(p, compiled.config)
    x = data[1][:7]
    a = Executor(compiled, FsimDevice(compiled.config)).run(x)["logits"]
    b = Executor(cm2, FsimDevice(cm2.config)).run(x)["logits"]
    np.testing.assert_array_equal(a, b)
    assert [s.target for s in cm2.steps] == [s.target for s in compiled.steps]


def test_artifact_other_config_refused(compiled, tmp_path):
    p = tmp_path / "m.vtapkg"
    save_artifact(compiled, p)
    other = preset("tiny")
    with pytest.raises(ArtifactError, match="compiled for"):
        load_artifact(p, other)
    with pytest.raises(Exception, match="compiled for"):
        Executor(compiled, FsimDevice(other))


def test_bad_input_shape_and_dtype(compiled, data):
    from vtaforge.runtime.device import DeviceError
    ex = Executor(compiled, FsimDevice(compiled.config))
    with pytest.raises(DeviceError, match="shape"):
        ex.run(np.zeros((2, 1, 7, 8), np.float32))
    with pytest.raises(DeviceError, match="dtype"):
        ex.run(np.zeros((2, 1, 8, 8), np.int32))


def _cli(args):
    r = CliRunner().invoke(main, args)
    return r.exit_code, r.output


def test_cli_compile_run_artifact(data, tmp_path):
    calib = tmp_path / "c.npy"
    np.save(calib, data[0][:100])
    x = tmp_path / "x.npy"
    np.save(x, data[1][:5])
    pkg = tmp_path / "m.vtapkg"
    code, out = _cli(["compile", str(DIGITS_ONNX), "-o", str(pkg), "--calibrate", str(calib)])
    assert code == 0, out
    y = tmp_path / "y.npy"
    code, out = _cli(["run", "--model", str(pkg), "--input", str(x), "--output", str(y)])
    assert code == 0, out
    got = np.load(y)
    assert got.shape == (5, 10) and got.dtype == np.float32
    # the ONNX path with the same calibration gives the same result
    y2 = tmp_path / "y2.npy"
    code, out = _cli(["run", "--model", str(DIGITS_ONNX), "--input", str(x), "--calibrate",
                      str(calib), "--output", str(y2)])
    assert code == 0, out
    np.testing.assert_array_equal(got, np.load(y2))
    # artifact for another config is refused with one error line
    code, out = _cli(["run", "--model", str(pkg), "--input", str(x), "--config", "tiny"])
    assert code != 0 and out.strip().startswith("error:") and "compiled for" in out
    assert len(out.strip().splitlines()) == 1


@pytest.mark.parametrize("bad", ["shape", "dtype", "missing", "notnpy"])
def test_cli_run_bad_input_one_error_line(data, tmp_path, bad):
    x = tmp_path / "x.npy"
    if bad == "shape":
        np.save(x, np.zeros((2, 1, 8, 7), np.float32))
    elif bad == "dtype":
        np.save(x, np.zeros((2, 1, 8, 8), np.int64))
    elif bad == "notnpy":
        x.write_text("hello")
    args = ["run", "--model", str(DIGITS_ONNX), "--input", str(x)]
    if bad in ("shape", "dtype"):
        c = tmp_path / "c.npy"
        np.save(c, data[0][:50])
        args += ["--calibrate", str(c)]
    r = subprocess.run([sys.executable, "-m", "vtaforge.cli", *args], capture_output=True,
                       text=True)
    assert r.returncode != 0
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error:"), r.stderr
    assert "internal error" not in lines[0]


def test_cli_compile_bad_model(tmp_path):
    p = tmp_path / "bad.onnx"
    p.write_text("not onnx")
    r = subprocess.run([sys.executable, "-m", "vtaforge.cli", "compile", str(p), "-o",
                        str(tmp_path / "o.vtapkg")], capture_output=True, text=True)
    assert r.returncode != 0
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error:"), r.stderr


def test_cli_main_job():
    code, out = _cli(["run"])
    assert code == 0, out
    assert "bit for bit: yes" in out
    assert re.search(r"^\s*VTA\s+conv1\s", out, re.M) and re.search(r"^\s*VTA\s+fc2\s", out, re.M)
    assert re.search(r"nodes on VTA, [\d.]+% of MACs on VTA", out)
