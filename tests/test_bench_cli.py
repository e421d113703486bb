"""The bench scripts' command lines: ``--help`` prints the usage and exits 0 without
running the bench (``digits_widths.py --help`` raised KeyError; others ran the whole
bench or failed on ``int('--help')``), and an unknown argument is one argparse error (exit
status 2), never a traceback.  Each script runs in process through ``runpy`` with
``sys.argv`` set, so the test measures nothing and takes seconds."""

from __future__ import annotations

import runpy
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[1] / "bench"
SCRIPTS = sorted(p.name for p in BENCH.glob("*.py") if not p.name.startswith("_"))


def _run(script: str, *args: str) -> int:
    old_argv, old_path = sys.argv, list(sys.path)
    sys.argv = [str(BENCH / script), *args]
    sys.path.insert(0, str(BENCH))
    try:
        runpy.run_path(str(BENCH / script), run_name="__main__")
    except SystemExit as e:
        return 0 if e.code is None else e.code
    finally:
        sys.argv, sys.path[:] = old_argv, old_path
    return 0


@pytest.mark.parametrize("script", SCRIPTS)
def test_help_prints_the_usage_and_runs_nothing(script, capsys):
    pytest.importorskip("onnxruntime")
    assert _run(script, "--help") == 0
    out = capsys.readouterr().out
    assert out.startswith(f"usage: {script}"), out[:300]
    assert "commit" not in out.split("\n\n")[0], out[:300]     # no run record printed


@pytest.mark.parametrize("script", SCRIPTS)
def test_unknown_option_is_one_argparse_error(script, capsys):
    pytest.importorskip("onnxruntime")
    assert _run(script, "--no-such-option") == 2
    err = capsys.readouterr().err
    assert f"{script}: error: " in err and "Traceback" not in err, err


@pytest.mark.parametrize("script, arg, message", [
    ("digits_widths.py", "9", "unknown width '9'"),
    ("hw_timing.py", "nosuch", "unknown config 'nosuch'"),
    ("dse_board_pick.py", "nosuch", "unknown board 'nosuch'"),
    ("compile_resnet18.py", "big", "invalid int value: 'big'"),
])
def test_bad_argument_is_one_argparse_error(script, arg, message, capsys):
    assert _run(script, arg) == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err, err
