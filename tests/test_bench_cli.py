"""The bench scripts' command lines: ``--help`` prints the usage and exits 0 without
running the bench, and an unknown argument is one argparse error (exit status 2), never a
traceback.  Each script runs in process through ``runpy`` with ``sys.argv`` set, so the
test measures nothing and takes seconds."""

from __future__ import annotations

import runpy
import sys
from pathlib import Path

BENCH = Path(__file__).resolve().parents[1] / "bench"


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


def test_digits_widths_help(capsys):
    assert _run("digits_widths.py", "--help") == 0
    out = capsys.readouterr().out
    assert "usage:" in out and "a4w4" in out


def test_digits_widths_unknown_width(capsys):
    assert _run("digits_widths.py", "9") == 2
    err = capsys.readouterr().err
    assert "unknown width '9'" in err and "Traceback" not in err
