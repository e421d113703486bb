"""What the board-package modules share: :class:`DeployError`, the package's constants,
file helpers (sha256, atomic JSON) and running an external command with a timeout."""

from __future__ import annotations

import hashlib
import json
import os
import re
import signal
import subprocess
import tempfile
from pathlib import Path
from typing import Any, Sequence

#: ``format`` of a package's manifest.json (``version`` 1).
PACKAGE_FORMAT = "vtaforge-board-package"
#: ``format`` of a bitstream sidecar ``NAME.json`` (``version`` 1).
SIDECAR_FORMAT = "vtaforge-bitstream"
#: Files of a package that its user may edit (Jupyter saves the notebook when it is run):
#: listed in the manifest's ``user_files``, never checked; ``verify`` notes a change.
#: ``files`` holds what the board runs: overlay, config, models, wheel, scripts.
USER_FILES = ("vtaforge.ipynb", "README.md")
#: Base name of the overlay files in a package (``overlay/vta.bit`` + ``overlay/vta.hwh``).
OVERLAY_STEM = "vta"
#: Default seconds for one external command (ssh, scp, rsync, the wheel build).
DEFAULT_TIMEOUT_S = 600.0
#: The PYNQ 3.x image's Python environment.
PYNQ_VENV = "/usr/local/share/pynq-venv"
#: Model names in a package: file stems that are safe in a shell word and a path.
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")
#: Remote directories and hosts that need no quoting anywhere (ssh, scp, rsync).
_REMOTE_DIR = re.compile(r"^[A-Za-z0-9_.~/+-]+$")
_HOST = re.compile(r"^(?:[A-Za-z0-9_][A-Za-z0-9_.+-]*@)?[A-Za-z0-9][A-Za-z0-9_.-]*$")


class DeployError(RuntimeError):
    """A package or a deployment that cannot proceed (the message is one line)."""


def _sha256(path: str | Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def _first_line(text: str) -> str:
    return (str(text).strip().splitlines() or [""])[0]


def _write_json(path: Path, data: Any) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(json.dumps(data, indent=2, sort_keys=False) + "\n")
    os.replace(tmp, path)


def check_output_file(path: str | Path, what: str) -> None:
    """Check, before a run, that ``path`` can be written as a new file renamed over it
    (what :func:`_write_json`, ``run --output`` and the CLI's ``-o`` options do): not
    empty, not a directory, its directory exists and takes a new file (created and removed
    to know: ``os.access`` says yes to root on ``/proc`` or a read-only mount), and an
    existing ``path`` is a writable regular file.  The one check the board runner and the
    CLI (``vtaforge.commands._output``) share.

    Raises:
        DeployError: one line naming ``what`` (the option, e.g. ``--output``), the path and
            the cause.
    """
    if not str(path).strip():
        raise DeployError(f"{what} {str(path)!r}: the path is empty")
    p = Path(path)
    d = p.parent if str(p.parent) else Path(".")
    if p.is_dir():
        raise DeployError(f"{what} {str(path)!r} is a directory, not a file")
    if not d.is_dir():
        raise DeployError(f"{what} {str(path)!r}: directory {str(d)!r} does not exist")
    _probe(d, what, path)
    if p.exists() and not p.is_file():
        raise DeployError(f"{what} {str(path)!r} exists and is not a regular file (a FIFO or "
                          f"a device), which the new file would replace")
    if p.exists() and not os.access(p, os.W_OK):
        raise DeployError(f"{what} {str(path)!r} exists and is not writable")


def _probe(d: Path, what: str, path: str | Path) -> None:
    """Create and remove a new file in directory ``d`` (a unique name: nothing of the
    caller's is touched).

    Raises:
        DeployError: ``d`` takes no new file (the OS's reason in the message).
    """
    try:
        fd, name = tempfile.mkstemp(prefix=".vtaforge-probe-", dir=str(d))
    except OSError as e:
        raise DeployError(f"{what} {str(path)!r}: directory {str(d)!r} is not writable "
                          f"({e.strerror or e})") from None
    os.close(fd)
    os.unlink(name)


def check_output_dir(path: str | Path, what: str) -> None:
    """Check, before anything runs, that folder ``path`` can be made and written: not
    empty, not an existing file, its nearest existing ancestor a directory that takes a new
    file (the caller creates the missing ones); a broken symbolic link on the way is named.

    Raises:
        DeployError: one line naming ``what``, the path and the cause.
    """
    if not str(path).strip():
        raise DeployError(f"{what} {str(path)!r}: the path is empty")
    p = Path(path)
    if p.exists() and not p.is_dir():
        raise DeployError(f"{what} {str(path)!r} exists and is not a directory")
    up = p
    while not up.exists():
        if up.is_symlink():
            raise DeployError(f"{what} {str(path)!r}: {str(up)!r} is a broken symbolic link")
        nxt = up.parent if str(up.parent) else Path(".")
        if nxt == up:
            break
        up = nxt
    if not up.is_dir():
        raise DeployError(f"{what} {str(path)!r}: {str(up)!r} is a file, not a directory")
    _probe(up, what, path)


def _load_json(p: Path) -> dict | None:
    """The JSON object in file ``p``, or None (missing, not a regular file, not UTF-8, not
    JSON, nested too deeply for the parser, not an object)."""
    try:
        if not p.is_file():             # a FIFO would block read_text
            return None
        d = json.loads(p.read_text())
    except (OSError, UnicodeDecodeError, ValueError, RecursionError):
        return None
    return d if isinstance(d, dict) else None


def _call(cmd: Sequence[str], *, timeout_s: float, what: str, check: bool = True
          ) -> subprocess.CompletedProcess:
    """Run ``cmd`` (its own process group, stdin closed, output captured) with a timeout.

    Raises:
        DeployError: the program is missing, it ran past ``timeout_s`` (its process group
            is killed), or (``check``) it exited non-zero (the last error-looking line).
    """
    try:
        p = subprocess.Popen(list(cmd), stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True, start_new_session=True)
    except FileNotFoundError:
        raise DeployError(f"{cmd[0]} is not installed (needed to {what})") from None
    except OSError as e:
        raise DeployError(f"cannot run {cmd[0]} to {what}: {e.strerror or e}") from None
    try:
        out, err = p.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        try:
            os.killpg(p.pid, signal.SIGKILL)
        except OSError:
            p.kill()
        p.communicate()
        raise DeployError(f"{Path(cmd[0]).name} did not finish within {timeout_s:g} s (to "
                          f"{what}); raise --timeout") from None
    r = subprocess.CompletedProcess(list(cmd), p.returncode, out, err)
    if check and r.returncode != 0:
        raise DeployError(f"{what}: {Path(cmd[0]).name} failed (exit {r.returncode}): "
                          f"{_last_error(out, err)}")
    return r


def _last_error(out: str, err: str) -> str:
    """The most telling line of a failed command: its last ``error:`` line, else the last
    non-empty line of stderr, else of stdout."""
    lines = [ln.strip() for ln in (out + "\n" + err).splitlines() if ln.strip()]
    errs = [ln for ln in lines if ln.lower().startswith("error")]
    if errs:
        return errs[-1]
    elines = [ln.strip() for ln in err.splitlines() if ln.strip()]
    return (elines or lines or ["no output"])[-1]
