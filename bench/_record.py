"""Where a bench figure comes from: the commit and date printed beside it.

Every figure quoted in ``README.md`` and ``docs/*.md`` cites the bench script, the commit
and the date of the run that printed it, as ``(bench/X.py, commit abc1234, 2026-12-07)``.
:func:`header` is the line a bench script prints first; :func:`stamp` is the same
record as a dict for scripts that write JSON.  A working tree with uncommitted changes
(Markdown aside) is marked ``+dirty``: a figure from such a run does not belong to the commit it names.
"""

from __future__ import annotations

import datetime
import subprocess
from pathlib import Path

_ROOT = Path(__file__).resolve().parent.parent


def _git(*args: str) -> str | None:
    try:
        out = subprocess.run(["git", *args], cwd=_ROOT, capture_output=True, text=True,
                             timeout=30, check=True)
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip()


def commit() -> str:
    """``git rev-parse --short HEAD``, ``+dirty`` appended when tracked files other than
    Markdown differ from it (untracked files and doc edits do not change a figure);
    ``unknown`` outside a git checkout."""
    rev = _git("rev-parse", "--short", "HEAD")
    if rev is None:
        return "unknown"
    dirty = _git("status", "--porcelain", "--untracked-files=no", "--", ".", ":!*.md")
    return rev + ("+dirty" if dirty else "")


def stamp(script: str) -> dict[str, str]:
    """The record of one run: ``{"bench": "bench/X.py", "commit": ..., "date": ...}``
    (date in UTC, ``YYYY-MM-DD``)."""
    return {"bench": f"bench/{Path(script).name}", "commit": commit(),
            "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d")}


def header(script: str) -> str:
    """``(bench/X.py, commit abc1234, 2026-12-07)``: the citation the docs copy."""
    s = stamp(script)
    return f"({s['bench']}, commit {s['commit']}, {s['date']})"
