"""Local stand-ins for ``ssh``, ``scp``, ``rsync`` and ``sudo`` (tests only; never the network).

Put this folder first on ``PATH``.  The "remote" machine is the folder ``$FAKE_SSH_ROOT``:
a remote absolute path ``/p`` is ``$FAKE_SSH_ROOT/p``, a relative one (or ``~/p``) is under
``$FAKE_SSH_ROOT/home/USER`` (USER from ``USER@HOST``, default ``user``).

- ``ssh [opts] [USER@]HOST CMD...``: runs ``sh -c CMD`` in the remote home (``HOME`` set to
  it), with this process's environment (so a test's ``VTAFORGE_*`` hooks reach ``run.sh``);
- ``scp [-r] [opts] SRC... DST``: one side ``HOST:PATH``, copies like scp (into an existing
  folder, else to the new name);
- ``rsync [opts] SRC... DST``: ``-a`` copies, a trailing ``/`` on SRC copies its contents,
  ``--exclude=/NAME`` skips a top-level name; ``-e`` and other options are ignored;
- ``sudo [-n] [-E] CMD...``: runs CMD.

Environment: ``FAKE_SSH_ROOT`` (required: without it every command fails, exit 255),
``FAKE_SSH_LOG`` (append one JSON line ``{"prog", "argv"}`` per call), ``FAKE_SSH_FAIL=1``
(ssh/scp/rsync fail like an unreachable host, exit 255), ``FAKE_SSH_DELAY`` (seconds to
sleep first), ``FAKE_SSH_CORRUPT`` (a file name: after a copy, flip the last byte of every
copied file with that name).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

#: ssh/scp options that take a value.
_VALUE_OPTS = set("bcDEeFIiJLlmOoPpQRSWw")


def _root() -> Path:
    r = os.environ.get("FAKE_SSH_ROOT")
    if not r:
        sys.stderr.write("fake ssh: FAKE_SSH_ROOT is not set (refusing to run)\n")
        sys.exit(255)
    return Path(r)


def _log(prog: str, argv: list[str]) -> None:
    p = os.environ.get("FAKE_SSH_LOG")
    if p:
        with open(p, "a") as f:
            f.write(json.dumps({"prog": prog, "argv": argv}) + "\n")


def _common(prog: str, argv: list[str], host: str | None = None) -> None:
    _log(prog, argv)
    delay = float(os.environ.get("FAKE_SSH_DELAY") or 0)
    if delay:
        time.sleep(delay)
    if os.environ.get("FAKE_SSH_FAIL"):
        sys.stderr.write(f"ssh: connect to host {host or 'board'} port 22: Connection "
                         f"refused\n")
        sys.exit(255)


def _split_host(spec: str) -> tuple[str, str]:
    user, _, host = spec.rpartition("@")
    return (user or "user"), host


def _home(user: str) -> Path:
    h = _root() / "home" / user
    h.mkdir(parents=True, exist_ok=True)
    return h


def _remote_path(spec: str) -> Path:
    """``[USER@]HOST:PATH`` -> the local path standing in for it."""
    who, _, path = spec.partition(":")
    user, _ = _split_host(who)
    if path.startswith("~/"):
        path = path[2:]
    if path.startswith("/"):
        return _root() / path.lstrip("/")
    return _home(user) / path


def _is_remote(arg: str) -> bool:
    head = arg.split("/", 1)[0]
    return ":" in head


def _corrupt(dst: Path) -> None:
    name = os.environ.get("FAKE_SSH_CORRUPT")
    if not name:
        return
    for p in ([dst] if dst.is_file() else dst.rglob(name)):
        if p.is_file() and p.name == name:
            b = bytearray(p.read_bytes())
            if b:
                b[-1] ^= 0xFF
                p.write_bytes(bytes(b))


def _copy_into(src: Path, dst: Path, *, recursive: bool, contents: bool = False,
               exclude: tuple[str, ...] = ()) -> None:
    """Copy ``src`` to ``dst``: into ``dst`` when it is a folder (or ``contents``: the
    entries of ``src`` into ``dst``), else to the name ``dst``."""
    if not src.exists():
        sys.stderr.write(f"fake: {src}: No such file or directory\n")
        sys.exit(1)
    if src.is_dir():
        if not recursive:
            sys.stderr.write(f"fake: {src}: not a regular file\n")
            sys.exit(1)
        if contents:
            dst.mkdir(parents=True, exist_ok=True)
            for p in src.iterdir():
                if p.name not in exclude:
                    _copy_into(p, dst, recursive=True)
            return
        target = dst / src.name if dst.is_dir() else dst
        shutil.copytree(src, target, dirs_exist_ok=True)
        _corrupt(target)
        return
    target = dst / src.name if dst.is_dir() else dst
    if not target.parent.is_dir():
        sys.stderr.write(f"fake: {target.parent}: No such file or directory\n")
        sys.exit(1)
    shutil.copy2(src, target)
    _corrupt(target)


def _local_or_remote(arg: str) -> Path:
    return _remote_path(arg) if _is_remote(arg) else Path(arg)


def ssh(argv: list[str]) -> int:
    i = 0
    while i < len(argv) and argv[i].startswith("-"):
        opt = argv[i]
        i += 2 if (len(opt) == 2 and opt[1] in _VALUE_OPTS) else 1
    if i >= len(argv):
        sys.stderr.write("usage: ssh [options] destination command\n")
        return 255
    user, host = _split_host(argv[i])
    _common("ssh", argv, host)
    cmd = " ".join(argv[i + 1:])
    home = _home(user)
    env = dict(os.environ, HOME=str(home))
    return subprocess.call(["sh", "-c", cmd], cwd=home, env=env)


def scp(argv: list[str]) -> int:
    ops, recursive, i = [], False, 0
    while i < len(argv):
        a = argv[i]
        if a.startswith("-") and len(a) >= 2:
            if a[1] in _VALUE_OPTS and len(a) == 2:
                i += 2
                continue
            recursive = recursive or "r" in a[1:]
        else:
            ops.append(a)
        i += 1
    host = next((o.split(":")[0] for o in ops if _is_remote(o)), None)
    _common("scp", argv, host)
    if len(ops) < 2:
        sys.stderr.write("usage: scp [-r] source ... target\n")
        return 1
    dst = _local_or_remote(ops[-1])
    if len(ops) > 2 and not dst.is_dir():
        sys.stderr.write(f"scp: {ops[-1]}: Not a directory\n")
        return 1
    for s in ops[:-1]:
        _copy_into(_local_or_remote(s), dst, recursive=recursive)
    return 0


def rsync(argv: list[str]) -> int:
    ops, exclude, i = [], [], 0
    while i < len(argv):
        a = argv[i]
        if a in ("-e", "--rsh"):
            i += 2
            continue
        if a.startswith("--exclude="):
            exclude.append(a.split("=", 1)[1].strip("/"))
        elif not a.startswith("-"):
            ops.append(a)
        i += 1
    host = next((o.split(":")[0] for o in ops if _is_remote(o)), None)
    _common("rsync", argv, host)
    if len(ops) < 2:
        sys.stderr.write("rsync: need a source and a destination\n")
        return 1
    dst_arg = ops[-1]
    dst = _local_or_remote(dst_arg)
    for s in ops[:-1]:
        src = _local_or_remote(s)
        if src.is_dir() and s.endswith("/"):
            _copy_into(src, dst, recursive=True, contents=True, exclude=tuple(exclude))
        else:
            if dst_arg.endswith("/"):
                dst.mkdir(parents=True, exist_ok=True)
            _copy_into(src, dst, recursive=True)
    return 0


def sudo(argv: list[str]) -> int:
    while argv and argv[0].startswith("-"):
        argv = argv[1:]
    _log("sudo", argv)
    return subprocess.call(argv)


def main(prog: str) -> None:
    sys.exit({"ssh": ssh, "scp": scp, "rsync": rsync, "sudo": sudo}[prog](sys.argv[1:]))
