"""A board package deployed over ssh (:func:`deploy`): copied with rsync or scp, verified
and installed on the board, optionally run there, its results fetched back."""

from __future__ import annotations

import os
import shlex
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from ._common import (_HOST, _NAME, _REMOTE_DIR, DEFAULT_TIMEOUT_S, DeployError, _call, _last_error,
                      _load_json, check_output_dir)
from .package import verify_package

@dataclass
class DeployResult:
    """What :func:`deploy` did: ``remote`` (``HOST:DIR``), ``method`` (``rsync``/``scp``),
    ``files`` (files in the package), ``out`` (local results folder or None), ``stats``
    (the run's stats.json or None)."""

    remote: str
    method: str
    files: int
    out: Path | None = None
    stats: dict | None = None


_SSH_OPTS = ("-o", "BatchMode=yes", "-o", "ConnectTimeout=20")
#: Never copied to the board: the install marker and local results.
_NO_COPY = (".installed", "results")


def _run_target(man: dict, run_input: str | Path | None, model: str | None
                ) -> tuple[Path | None, str | None]:
    """``(input, model)`` to run after the install (``(None, None)``: none).

    Raises:
        DeployError: a missing input or one not named ``NAME.npy``; no ``model`` for a
            package of several; a model not in the package; a model without an input.
    """
    names = [m["name"] for m in man.get("models", [])]
    inp = None
    if run_input is not None:
        inp = Path(run_input)
        if not inp.is_file():
            raise DeployError(f"--run {str(inp)!r} does not exist")
        if inp.suffix != ".npy" or not _NAME.fullmatch(inp.stem):
            raise DeployError(f"--run {str(inp)!r}: expected a .npy file named with letters, "
                              f"digits and _ . -")
        if model is None:
            if len(names) != 1:
                raise DeployError(f"the package has several models ({', '.join(names)}): "
                                  f"pass --model NAME")
            model = names[0]
    if model is not None and model not in names:
        raise DeployError(f"--model {model!r} is not in the package (models: "
                          f"{', '.join(names)})")
    if model is not None and inp is None:
        raise DeployError("--model needs --run INPUT.npy")
    return inp, model


def deploy(package_dir: str | Path, host: str, *, run_input: str | Path | None = None,
           model: str | None = None, remote_dir: str | None = None,
           out_dir: str | Path | None = None, copy: str = "auto", sudo: bool = False,
           timeout_s: float = DEFAULT_TIMEOUT_S,
           echo: Callable[[str], None] = lambda s: None) -> DeployResult:
    """Copy a package to ``host``, verify and install it there, optionally run a model.

    Steps: verify the package locally; ``ssh HOST mkdir -p DIR/inputs`` (and ask whether
    the board has ``rsync``); copy with ``rsync -a`` (``copy="auto"`` when both sides have
    it) or ``scp -r``; ``ssh HOST 'cd DIR && sh run.sh install'``; with ``run_input``: copy
    it to ``DIR/inputs/``, ``sh run.sh run --model NAME --out results/RUN inputs/X.npy``
    and fetch ``results/RUN`` (``output.npy``, ``stats.json``, ``run.log``) into
    ``out_dir`` (default ``PACKAGE_DIR-results/RUN``; RUN is ``NAME-INPUTSTEM``).

    Args:
        host: ``USER@HOST`` or an ssh config alias.
        remote_dir: the package's folder on the board (default ``vtaforge/PACKAGE``,
            relative to the remote home).
        copy: ``auto``, ``rsync`` or ``scp``.
        sudo: run ``run.sh`` with ``sudo -n`` (a user with password-less sudo).
        timeout_s: the limit of each external command.
        echo: progress lines.
    Raises:
        DeployError: a bad package, host, model, input or remote folder; an ssh, scp or
            rsync failure or timeout; a failing verify, install or run on the board (after
            fetching what the run left).
    """
    pkg = Path(package_dir)
    if not pkg.is_dir():
        raise DeployError(f"package {str(pkg)!r} is not a folder (make one with vtaforge "
                          f"board package)")
    man = verify_package(pkg)
    if out_dir is not None:     # fetched into after the run: checked before anything runs
        check_output_dir(out_dir, "-o/--out")
    if not isinstance(host, str) or not _HOST.fullmatch(host):
        raise DeployError(f"--host {host!r} is not USER@HOST (letters, digits and _ . + -, "
                          f"not starting with -)")
    rdir = remote_dir if remote_dir is not None else f"vtaforge/{pkg.resolve().name}"
    if rdir.startswith("~/"):
        rdir = rdir[2:]
    if not rdir or not _REMOTE_DIR.fullmatch(rdir) or rdir.startswith("-"):
        raise DeployError(f"--remote-dir {remote_dir!r} must be a plain path (letters, "
                          f"digits and _ . ~ / + -)")
    if copy not in ("auto", "rsync", "scp"):
        raise DeployError(f"--copy {copy!r}: allowed: auto, rsync, scp")
    inp, model = _run_target(man, run_input, model)

    ssh = ["ssh", *_SSH_OPTS]
    qd = shlex.quote(rdir)
    where = f"{host}:{rdir}"
    prep = _call([*ssh, host, f"mkdir -p {qd}/inputs && if command -v rsync >/dev/null 2>&1; "
                              f"then echo vtaforge-rsync-yes; else echo vtaforge-rsync-no; fi"],
                 timeout_s=timeout_s, what=f"reach {host} over ssh")
    remote_rsync = "vtaforge-rsync-yes" in prep.stdout
    if copy == "auto":
        method = "rsync" if (shutil.which("rsync") and remote_rsync) else "scp"
    else:
        method = copy
    if method == "rsync":
        cmd = ["rsync", "-a", f"--timeout={int(max(1, timeout_s))}",
               "-e", "ssh " + " ".join(_SSH_OPTS)]
        cmd += [f"--exclude=/{n}" for n in _NO_COPY]
        cmd += [f"{pkg}/", f"{where}/"]
    else:
        tops = sorted(p for p in pkg.iterdir() if p.name not in _NO_COPY)
        cmd = ["scp", "-r", "-q", *_SSH_OPTS, *[str(p) for p in tops], f"{where}/"]
    _call(cmd, timeout_s=timeout_s, what=f"copy the package to {where}")
    nfiles = len(man["files"]) + len(man.get("user_files") or {})
    echo(f"copied {pkg} -> {where} ({method}, {nfiles} files)")

    run_sh = ("sudo -n " if sudo else "") + "sh run.sh"
    r = _call([*ssh, host, f"cd {qd} && {run_sh} install"], timeout_s=timeout_s,
              what=f"run.sh install on {host}", check=False)
    if r.returncode != 0:
        raise DeployError(f"on {host}: run.sh install failed (exit {r.returncode}): "
                          f"{_last_error(r.stdout, r.stderr)}")
    lines = [ln for ln in r.stdout.splitlines() if ln.startswith(("verify:", "run.sh:"))]
    for ln in lines:
        echo(f"{host}: {ln}")
    res = DeployResult(where, method, nfiles)
    if inp is None:
        return res

    run_id = f"{model}-{inp.stem}"
    if method == "rsync":
        cmd = ["rsync", "-a", f"--timeout={int(max(1, timeout_s))}", "-e",
               "ssh " + " ".join(_SSH_OPTS), str(inp), f"{where}/inputs/{inp.name}"]
    else:
        cmd = ["scp", "-q", *_SSH_OPTS, str(inp), f"{where}/inputs/{inp.name}"]
    _call(cmd, timeout_s=timeout_s, what=f"copy {inp} to {where}/inputs")
    rq = shlex.quote(f"results/{run_id}")
    r = _call([*ssh, host, f"cd {qd} && {run_sh} run --model {shlex.quote(model)} --out {rq} "
                           f"{shlex.quote('inputs/' + inp.name)}"],
              timeout_s=timeout_s, what=f"run {model} on {host}", check=False)
    out = Path(out_dir) if out_dir is not None else pkg.parent / f"{pkg.name}-results" / run_id
    fetched = _fetch(method, f"{where}/results/{run_id}", out, timeout_s)
    res.out = out
    stats = _load_json(out / "stats.json") if (out / "stats.json").is_file() else None
    res.stats = stats
    if r.returncode != 0:
        got = f" (fetched {', '.join(fetched)} into {out})" if fetched else ""
        raise DeployError(f"on {host}: run.sh run failed (exit {r.returncode}): "
                          f"{_last_error(r.stdout, r.stderr)}{got}")
    if stats is None or not (out / "output.npy").is_file():
        raise DeployError(f"on {host}: the run left no output.npy and stats.json in "
                          f"{where}/results/{run_id}")
    return res


def _fetch(method: str, remote: str, out: Path, timeout_s: float) -> list[str]:
    """Copy the files of the remote folder ``remote`` (``HOST:DIR``) into ``out``; return
    their names (nothing when the remote folder is missing)."""
    out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix=".fetch-", dir=str(out)) as tmp:
        if method == "rsync":
            cmd = ["rsync", "-a", f"--timeout={int(max(1, timeout_s))}", "-e",
                   "ssh " + " ".join(_SSH_OPTS), f"{remote}/", f"{tmp}/"]
        else:
            cmd = ["scp", "-r", "-q", *_SSH_OPTS, remote, f"{tmp}/"]
        r = _call(cmd, timeout_s=timeout_s, what=f"fetch {remote}", check=False)
        if r.returncode != 0:
            return []
        src = Path(tmp) if method == "rsync" else Path(tmp) / remote.rsplit("/", 1)[-1]
        names = []
        for p in sorted(src.iterdir()) if src.is_dir() else []:
            if p.is_file():
                os.replace(p, out / p.name)
                names.append(p.name)
    return names
