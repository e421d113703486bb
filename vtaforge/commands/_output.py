"""Output-path checks shared by the commands that write a file after a (possibly long) run
(``run --output``, ``exec -o``, ``compile -o``, ``dse run -o``): a missing or unwritable
directory is reported before anything runs, not after."""

from __future__ import annotations

import os
from pathlib import Path

import click


class OutputPathError(click.ClickException):
    """An unusable output path: one ``error:`` line, exit status 2."""

    exit_code = 2


def check_output_path(path: str, option: str) -> None:
    """Check that ``path`` can be written: its directory exists and is writable, and the
    path is not a directory (nor an existing read-only file).

    Args:
        path: the output file the command will write.
        option: the option that named it (e.g. ``-o/--output``), for the message.
    Raises:
        OutputPathError: the message names the option, the path and the cause.
    """
    p = Path(path)
    d = p.parent if str(p.parent) else Path(".")
    if p.is_dir():
        raise OutputPathError(f"{option} {path!r} is a directory, not a file")
    if not d.is_dir():
        raise OutputPathError(f"{option} {path!r}: directory {str(d)!r} does not exist")
    if not os.access(d, os.W_OK | os.X_OK):
        raise OutputPathError(f"{option} {path!r}: directory {str(d)!r} is not writable")
    if p.exists() and not os.access(p, os.W_OK):
        raise OutputPathError(f"{option} {path!r} exists and is not writable")
