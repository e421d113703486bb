"""Every CLI failure is one ``error:`` line on stderr with a non-zero exit, no traceback."""

from __future__ import annotations

import subprocess
import sys

import pytest


def _run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "vtaforge.cli", *args], capture_output=True,
                          text=True, timeout=120)


@pytest.mark.parametrize("args", [
    ("nosuchcommand",),
    ("run", "--bogus-option"),
    ("config", "show", "no-such-preset"),
    ("hw", "resources", "--config", "tiny", "--part", "xc0000"),
    ("exec", "/nonexistent/bundle.npz"),
    ("run", "--model", "/nonexistent/model.onnx", "--input", "/nonexistent/x.npy"),
])
def test_one_error_line(args):
    r = _run(*args)
    assert r.returncode != 0
    lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1, r.stderr
    assert lines[0].startswith("error: ")
    assert "Traceback" not in r.stderr


def test_version_and_help_exit_zero():
    assert _run("--version").returncode == 0
    r = _run("--help")
    assert r.returncode == 0 and "run" in r.stdout
