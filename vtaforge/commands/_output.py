"""Output helpers shared by the commands: output-path checks for the commands that write a
file after a (possibly long) run (``run --output``, ``exec -o``, ``compile -o``, ``dse run
-o``) and for the output folders (``hw verilog -o``, ``board project -o``, ``board package
-o``, ``board deploy -o``, ``hw timing --workdir``): a missing or unwritable directory is
reported before anything runs, not after; and
the progress bars of the long commands (stderr, a terminal only, ``--no-progress``)."""

from __future__ import annotations

import sys
from contextlib import contextmanager
from typing import Iterator

import click

from ..runtime.board._common import DeployError, check_output_file
from ..runtime.board._common import check_output_dir as _check_dir


class OutputPathError(click.ClickException):
    """An unusable output path: one ``error:`` line, exit status 2."""

    exit_code = 2


def check_output_path(path: str, option: str) -> None:
    """Check that ``path`` can be written: its directory exists and takes a new file, and
    the path is not a directory (nor an existing irregular or read-only file) --
    :func:`vtaforge.runtime.board._common.check_output_file`, the check the board runner
    uses too.

    Args:
        path: the output file the command will write.
        option: the option that named it (e.g. ``-o/--output``), for the message.
    Raises:
        OutputPathError: the message names the option, the path and the cause.
    """
    try:
        check_output_file(path, option)
    except DeployError as e:
        raise OutputPathError(str(e)) from None


def check_output_dir(path: str, option: str) -> None:
    """Check that the output folder ``path`` can be made and written: not empty, not an
    existing file, its nearest existing ancestor a writable directory (the command creates
    the missing ones) -- :func:`vtaforge.runtime.board._common.check_output_dir`.

    Raises:
        OutputPathError: the message names the option, the path and the cause.
    """
    try:
        _check_dir(path, option)
    except DeployError as e:
        raise OutputPathError(str(e)) from None


# ------------------------------------------------------------------------ progress bars
#: Progress bars are drawn on stderr only when it is a terminal: piped or redirected
#: output, CI logs and click's CliRunner get none (and ``--no-progress`` turns them off).


def stderr_is_tty() -> bool:
    """Whether stderr is a terminal (where progress bars go)."""
    return bool(getattr(sys.stderr, "isatty", lambda: False)())


def progress_enabled(no_progress: bool = False) -> bool:
    """Whether to draw progress: not with ``--no-progress``, and only on a terminal."""
    return not no_progress and stderr_is_tty()


def progress_bar(*, total: int | None, desc: str, unit: str, enabled: bool,
                 leave: bool = True, bar_format: str | None = None):
    """A tqdm bar on stderr (``disable``\\ d unless ``enabled``): the one helper the long
    commands share (``run``'s main job and ``--model``, ``dse run`` and its ``--verify``).

    Args:
        total: units of work (images, samples, evaluations); ``None``: unknown.
        desc: what runs (the bar's label).
        unit: the unit's name.
        enabled: :func:`progress_enabled`'s answer.
        leave: keep the finished bar on the terminal.
        bar_format: tqdm's format (default: tqdm's bar).
    """
    from tqdm import tqdm

    return tqdm(total=total, desc=desc, unit=unit, disable=not enabled, file=sys.stderr,
                leave=leave, dynamic_ncols=True, bar_format=bar_format)


def step_postfix(bar, enabled: bool):
    """An ``on_step(done, total)`` hook (:attr:`~vtaforge.runtime.executor.Executor.on_step`)
    that writes ``step DONE/TOTAL`` after ``bar``: progress inside one long run, whose
    samples the bar counts only once the run returns.  None when the bar is not drawn."""
    if not enabled:
        return None
    return lambda done, total: bar.set_postfix_str(f"step {done}/{total}")


@contextmanager
def progress_ticker(desc: str, enabled: bool, *, interval: float = 1.0) -> Iterator[None]:
    """Elapsed time on stderr while one opaque step runs (a Yosys or nextpnr child process
    that reports nothing until it ends): ``desc: 1:23 elapsed``, redrawn every ``interval``
    seconds from a daemon thread, removed when the step ends.  Nothing when not
    ``enabled``."""
    if not enabled:
        yield
        return
    import threading

    bar = progress_bar(total=None, desc=desc, unit="s", enabled=True, leave=False,
                       bar_format="{desc}: {elapsed} elapsed")
    stop = threading.Event()

    def tick() -> None:
        while not stop.wait(interval):
            bar.refresh()

    t = threading.Thread(target=tick, name="vtaforge-progress", daemon=True)
    t.start()
    try:
        yield
    finally:
        stop.set()
        t.join()
        bar.close()


def echo_over(bar, line: str) -> None:
    """``click.echo(line)`` on stdout without tearing a running progress bar."""
    if bar is None or getattr(bar, "disable", True):
        click.echo(line)
        return
    with bar.external_write_mode():
        click.echo(line)
