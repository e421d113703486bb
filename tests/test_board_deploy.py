"""``vtaforge board deploy`` against a local fake board, never the network.

``tests/fake_ssh/`` holds stand-ins for ``ssh``, ``scp``, ``rsync`` and ``sudo``, put first
on PATH: ``ssh USER@HOST CMD`` runs CMD under ``sh`` in a folder standing in for the remote
home (``$FAKE_SSH_ROOT/home/USER``), ``scp``/``rsync`` copy into it.  The package's run.sh
really executes there, with its documented test hooks: ``VTAFORGE_RUN_TARGET=fsim`` (no
board), ``VTAFORGE_SKIP_INSTALL=1`` (this checkout's vtaforge is importable) and
``VTAFORGE_PYTHON`` (this Python)."""

from __future__ import annotations

import json
import shutil
import time
from dataclasses import dataclass

import numpy as np
import pytest
from click.testing import CliRunner

from fake_ssh import boardkit as bk
from vtaforge.cli import main
from vtaforge.hw.config import preset

PYNQ = preset("pynq")


@pytest.fixture(scope="module")
def pkg(tmp_path_factory):
    """A package for pynq with the digits model, and an input batch beside it."""
    d = tmp_path_factory.mktemp("deploykit")
    bit = bk.write_project(d / "proj", PYNQ)
    model = bk.compile_digits(d / "digits.vtapkg", "pynq")
    out = d / "pkg"
    r = CliRunner().invoke(main, ["board", "package", "--config", "pynq", "--bitstream",
                                  str(bit), "--model", str(model), "-o", str(out), "--wheel",
                                  str(bk.fake_wheel(d))])
    assert r.exit_code == 0, r.output
    np.save(d / "x.npy", np.random.default_rng(1).random((4, 1, 8, 8), dtype=np.float32))
    ref = d / "ref.npy"
    r = CliRunner().invoke(main, ["run", "--model", str(model), "--input", str(d / "x.npy"),
                                  "--config", "pynq", "--output", str(ref)])
    assert r.exit_code == 0, r.output
    return out


@dataclass
class Res:
    returncode: int
    stdout: str
    stderr: str


def _deploy(tmp_path, *args, **env):
    """``vtaforge board deploy`` (in process; the fakes and run.sh run as subprocesses)
    with the fakes first on PATH; returns ``(result, fake remote root, calls)``."""
    root, log = tmp_path / "remote", tmp_path / "ssh.log"
    if log.exists():
        log.unlink()
    with pytest.MonkeyPatch.context() as mp:
        for k, v in bk.fake_env(root, log, **env).items():
            mp.setenv(k, v)
        mp.chdir(tmp_path)
        r = CliRunner().invoke(main, ["board", "deploy", *args])
    if r.exception is not None and not isinstance(r.exception, SystemExit):
        raise r.exception
    calls = [json.loads(ln) for ln in log.read_text().splitlines()] if log.exists() else []
    return Res(r.exit_code, r.stdout, r.stderr), root, calls


def _error(r) -> str:
    assert r.returncode == 2, (r.returncode, r.stdout, r.stderr)
    lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: "), r.stderr
    return lines[0]


def test_deploy_with_rsync_runs_the_model_and_fetches_the_results(pkg, tmp_path):
    x = pkg.parent / "x.npy"
    r, root, calls = _deploy(tmp_path, str(pkg), "--host", "xilinx@pynq", "--run", str(x),
                             "-o", str(tmp_path / "res"))
    assert r.returncode == 0, r.stdout + r.stderr
    assert [c["prog"] for c in calls] == ["ssh", "rsync", "ssh", "rsync", "ssh", "rsync"]
    assert calls[1]["argv"][-2:] == [f"{pkg}/", "xilinx@pynq:vtaforge/pkg/"]
    assert calls[2]["argv"][-1] == "cd vtaforge/pkg && sh run.sh install"
    assert calls[4]["argv"][-1] == ("cd vtaforge/pkg && sh run.sh run --model digits --out "
                                    "results/digits-x inputs/x.npy")
    remote = root / "home" / "xilinx" / "vtaforge" / "pkg"
    man = json.loads((pkg / "manifest.json").read_text())
    for rel in man["files"]:
        assert (remote / rel).read_bytes() == (pkg / rel).read_bytes(), rel
    res = tmp_path / "res"
    assert sorted(p.name for p in res.iterdir()) == ["output.npy", "run.log", "stats.json"]
    assert np.array_equal(np.load(res / "output.npy"), np.load(pkg.parent / "ref.npy"))
    st = json.loads((res / "stats.json").read_text())
    assert (st["model"], st["target"], st["steps_on_vta"], st["steps"]) == ("digits", "fsim", 6, 9)
    assert st["output_shape"] == [4, 10] and st["wall_s"] > 0 and st["exit_status"] == 0
    out = r.stdout
    assert "copied" in out and "(rsync, 10 files)" in out
    assert "xilinx@pynq: verify: 8 files match manifest.json" in out
    assert "ran digits on fsim: output [4, 10], 6/9 steps on VTA" in out
    assert f"fetched into {res}" in out


def test_deploy_with_scp_sudo_and_a_remote_dir(pkg, tmp_path):
    """--copy scp copies each top-level entry into the remote folder; --sudo runs run.sh
    through sudo -n; results land in PACKAGE-results/RUN by default."""
    work = tmp_path / "w"
    shutil.copytree(pkg, work / "pkg")
    (work / "pkg" / "results").mkdir()  # local results are never copied
    (work / "pkg" / "results" / "old.txt").write_text("local")
    x = pkg.parent / "x.npy"
    r, root, calls = _deploy(tmp_path, str(work / "pkg"), "--host", "root@board", "--run",
                             str(x), "--copy", "scp", "--sudo", "--remote-dir", "~/deploy/a")
    assert r.returncode == 0, r.stdout + r.stderr
    progs = [c["prog"] for c in calls]
    assert "rsync" not in progs and progs.count("scp") == 3 and progs.count("sudo") == 2
    assert calls[2]["argv"][-1] == "cd deploy/a && sudo -n sh run.sh install"
    remote = root / "home" / "root" / "deploy" / "a"
    assert (remote / "run.sh").is_file() and not (remote / "results" / "old.txt").exists()
    res = work / "pkg-results" / "digits-x"
    assert np.array_equal(np.load(res / "output.npy"), np.load(pkg.parent / "ref.npy"))


def test_deploy_without_run_verifies_and_installs_only(pkg, tmp_path):
    r, root, calls = _deploy(tmp_path, str(pkg), "--host", "board")
    assert r.returncode == 0, r.stdout + r.stderr
    assert [c["prog"] for c in calls] == ["ssh", "rsync", "ssh"]
    assert "board: run.sh: VTAFORGE_SKIP_INSTALL=1: not installing" in r.stdout
    assert r.stdout.strip().splitlines()[-1] == "deployed to board:vtaforge/pkg"
    assert not (root / "home" / "user" / "vtaforge" / "pkg" / "results").exists()


def test_a_copy_corrupted_on_the_way_is_refused_before_install(pkg, tmp_path):
    x = pkg.parent / "x.npy"
    r, root, calls = _deploy(tmp_path, str(pkg), "--host", "b", "--run", str(x),
                             FAKE_SSH_CORRUPT="digits.vtapkg")
    line = _error(r)
    assert line.startswith("error: on b: run.sh install failed (exit 1): error: verify: 1 of "
                           "8 files do not match manifest.json: models/digits.vtapkg "
                           "(sha256 differs)"), line
    assert [c["prog"] for c in calls] == ["ssh", "rsync", "ssh"]


def test_a_failing_run_is_one_error_line_and_its_log_is_fetched(pkg, tmp_path):
    bad = tmp_path / "bad.npy"
    np.save(bad, np.zeros((2, 5), np.float32))
    r, _, _ = _deploy(tmp_path, str(pkg), "--host", "b", "--run", str(bad), "-o",
                      str(tmp_path / "res"))
    line = _error(r)
    assert line.startswith("error: on b: run.sh run failed (exit 2): error: "), line
    assert "fetched" in line and "run.log" in line
    st = json.loads((tmp_path / "res" / "stats.json").read_text())
    assert st["exit_status"] == 2 and st["error"].startswith("error: ")
    assert not (tmp_path / "res" / "output.npy").exists()


def test_unreachable_host_and_timeout(pkg, tmp_path):
    r, _, calls = _deploy(tmp_path, str(pkg), "--host", "b", FAKE_SSH_FAIL="1")
    assert _error(r) == ("error: reach b over ssh: ssh failed (exit 255): ssh: connect to host "
                         "b port 22: Connection refused")
    assert len(calls) == 1
    t0 = time.monotonic()
    r, _, _ = _deploy(tmp_path, str(pkg), "--host", "b", "--timeout", "1", FAKE_SSH_DELAY="20")
    assert time.monotonic() - t0 < 8
    assert _error(r) == ("error: ssh did not finish within 1 s (to reach b over ssh); "
                         "raise --timeout")


def test_bad_arguments_are_refused_before_any_ssh(pkg, tmp_path):
    x = pkg.parent / "x.npy"
    cases = [
        (["--host", "-oProxyCommand=touch pwned"], "is not USER@HOST"),
        (["--host", "-x"], "is not USER@HOST"),
        (["--host", "-l@b"], "is not USER@HOST"),
        (["--host", "b", "--remote-dir", "a;rm -rf x"], "--remote-dir"),
        (["--host", "b", "--run", str(tmp_path / "none.npy")], "does not exist"),
        (["--host", "b", "--run", str(x), "--model", "resnet"], "is not in the package"),
        (["--host", "b", "--model", "digits"], "--model needs --run INPUT.npy"),
        # the results folder is written after the run on the board: checked before any ssh
        (["--host", "b", "--run", str(x), "-o", str(x / "out")],
         f"-o/--out '{x / 'out'}': '{x}' is a file, not a directory"),
        (["--host", "b", "--run", str(x), "-o", "/proc/vtaforge-out"],
         "-o/--out '/proc/vtaforge-out': directory '/proc' is not writable"),
    ]
    for args, msg in cases:
        r, _, calls = _deploy(tmp_path, str(pkg), *args)
        assert msg in _error(r), (args, r.stderr)
        assert calls == [], args
    bad = tmp_path / "badpkg"
    shutil.copytree(pkg, bad)
    (bad / "config.json").write_text("{}")
    r, _, calls = _deploy(tmp_path, str(bad), "--host", "b")
    assert "config.json (" in _error(r) and calls == []
    r, _, calls = _deploy(tmp_path, str(tmp_path / "nope"), "--host", "b")
    assert "is not a folder" in _error(r) and calls == []


def test_deploy_checks_its_results_folder_before_any_ssh(pkg, tmp_path):
    """``runtime.board.deploy(out_dir=...)`` (the library call under the CLI) refuses a
    results folder it could not create before it copies or runs anything."""
    from vtaforge.runtime.board import DeployError, deploy

    (tmp_path / "afile").write_text("x")
    with pytest.raises(DeployError, match=r"^-o/--out '.*afile/r': '.*afile' is a file, not a "
                                          r"directory$"):      # the CLI's check, word for word
        deploy(pkg, "u@nohost", run_input=pkg.parent / "x.npy", out_dir=tmp_path / "afile" / "r")


def test_missing_ssh_is_one_error_line(pkg, tmp_path, monkeypatch):
    from vtaforge.runtime.board import DeployError, deploy

    empty = tmp_path / "bin"
    empty.mkdir()
    monkeypatch.setenv("PATH", str(empty))
    with pytest.raises(DeployError, match=r"^ssh is not installed \(needed to reach b over "
                                          r"ssh\)$"):
        deploy(pkg, "b")
