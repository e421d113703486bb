"""``vtaforge board package`` / ``board verify`` and the package's run.sh, verify.py and
notebook, without a board: run.sh and the notebook really run, on fsim, through their
documented test hooks (``VTAFORGE_RUN_TARGET=fsim``, ``VTAFORGE_SKIP_INSTALL=1``).

Bitstreams are a Vivado-format ``.bit`` header with a few data bytes and a small ``.hwh``
of the vtaforge block design (``tests/fake_ssh/boardkit.py``); the wheel is a tiny stand-in
except in the one test that builds the real one (``slow``)."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from fake_ssh import boardkit as bk
from vtaforge.cli import main
from vtaforge.hw import parts, vivado
from vtaforge.hw.config import load_config, preset

PYNQ = preset("pynq")
TINY = preset("tiny")
DATA = Path(__file__).resolve().parent / "hw" / "data"


@pytest.fixture(scope="module")
def kit(tmp_path_factory):
    """A pynq board project with its bitstream, the digits model for pynq and for tiny, a
    stand-in wheel and an input batch."""
    d = tmp_path_factory.mktemp("kit")
    k = {"dir": d, "bit": bk.write_project(d / "proj", PYNQ),
         "model": bk.compile_digits(d / "digits.vtapkg", "pynq"),
         "tiny_model": bk.compile_digits(d / "tiny" / "digits.vtapkg", "tiny"),
         "wheel": bk.fake_wheel(d), "x": d / "x.npy"}
    np.save(k["x"], np.random.default_rng(0).random((3, 1, 8, 8), dtype=np.float32))
    return k


def _package(kit, out, *extra, bit=None, model=None):
    args = ["board", "package", "--config", "pynq", "--bitstream", str(bit or kit["bit"]),
            "--model", str(model or kit["model"]), "-o", str(out), "--wheel", str(kit["wheel"]),
            *extra]
    return CliRunner().invoke(main, args)


def _error(r) -> str:
    """The single ``error:`` line of a failed invocation (exit status 2)."""
    assert r.exit_code == 2, (r.exit_code, r.output)
    lines = [ln for ln in r.output.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: "), r.output
    return lines[0]


@pytest.fixture(scope="module")
def pkg(kit, tmp_path_factory):
    out = tmp_path_factory.mktemp("pkg") / "pynq-digits"
    r = _package(kit, out)
    assert r.exit_code == 0, r.output
    return out


def _hooks(**extra) -> dict:
    env = dict(os.environ, VTAFORGE_RUN_TARGET="fsim", VTAFORGE_SKIP_INSTALL="1",
               VTAFORGE_PYTHON=sys.executable, VTAFORGE_PYNQ_VENV="/nonexistent-venv")
    env.update(extra)
    return env


def _sha(p: Path) -> str:
    return hashlib.sha256(p.read_bytes()).hexdigest()


# ------------------------------------------------------------------ layout
def test_package_layout_and_manifest(kit, pkg):
    files = sorted(p.relative_to(pkg).as_posix() for p in pkg.rglob("*") if p.is_file())
    assert files == ["README.md", "config.json", "manifest.json", "models/digits.vtapkg",
                     "overlay/vta.bit", "overlay/vta.hwh", "overlay/vta.json", "run.sh",
                     "verify.py", "vtaforge.ipynb", "wheel/vtaforge-0.1.0-py3-none-any.whl"]
    man = json.loads((pkg / "manifest.json").read_text())
    assert man["format"] == "vtaforge-board-package" and man["version"] == 1
    # what the board runs is checked; the notebook and README are the user's (Jupyter saves)
    assert set(man["files"]) == set(files) - {"manifest.json", "README.md", "vtaforge.ipynb"}
    assert set(man["user_files"]) == {"README.md", "vtaforge.ipynb"}
    for rel, f in {**man["files"], **man["user_files"]}.items():
        assert f == {"sha256": _sha(pkg / rel), "size": (pkg / rel).stat().st_size}, rel
    assert man["config"]["fingerprint"] == f"0x{PYNQ.fingerprint:08x}"
    assert load_config(str(pkg / "config.json")).fingerprint == PYNQ.fingerprint
    # the overlay: same base name, the inputs' bytes
    assert (pkg / "overlay/vta.bit").read_bytes() == kit["bit"].read_bytes()
    assert (pkg / "overlay/vta.hwh").read_bytes() == (kit["bit"].parent / "vta.hwh").read_bytes()
    side = json.loads((pkg / "overlay/vta.json").read_text())
    assert side["fingerprint"] == PYNQ.fingerprint
    assert side["bitstream_sha256"] == _sha(pkg / "overlay/vta.bit")
    assert man["overlay"]["fingerprint_from"].endswith("board.json")
    assert man["overlay"]["reg_base"] == parts.board_spec(PYNQ).reg_base
    (m,) = man["models"]
    assert (m["name"], m["file"], m["steps"], m["steps_on_vta"]) == ("digits",
                                                                     "models/digits.vtapkg", 9, 6)
    assert man["wheel"]["file"] == "wheel/vtaforge-0.1.0-py3-none-any.whl"
    assert os.access(pkg / "run.sh", os.X_OK)
    assert subprocess.run(["sh", "-n", str(pkg / "run.sh")]).returncode == 0


def test_package_cli_output(kit, tmp_path):
    r = _package(kit, tmp_path / "p")
    assert r.exit_code == 0, r.output
    out = r.output
    assert f"fingerprint 0x{PYNQ.fingerprint:08x}" in out
    assert "model digits (digits_cnn) -> models/digits.vtapkg: 6/9 steps on VTA" in out
    assert "wheel wheel/vtaforge-0.1.0-py3-none-any.whl (passed with --wheel)" in out
    assert "registers at 0x43C00000" in out
    # packaging again into an earlier package replaces it
    r = _package(kit, tmp_path / "p")
    assert r.exit_code == 0, r.output


def test_verify_passes_and_detects_corruption(pkg, tmp_path):
    r = CliRunner().invoke(main, ["board", "verify", str(pkg)])
    assert r.exit_code == 0 and "verify: 8 files" in r.output, r.output
    bad = tmp_path / "bad"
    shutil.copytree(pkg, bad)
    p = bad / "models" / "digits.vtapkg"
    b = bytearray(p.read_bytes())
    b[100] ^= 1
    p.write_bytes(bytes(b))
    (bad / "overlay" / "vta.hwh").unlink()
    line = _error(CliRunner().invoke(main, ["board", "verify", str(bad)]))
    assert "2 of 8 files do not match manifest.json" in line
    assert "models/digits.vtapkg (sha256 differs)" in line and "overlay/vta.hwh (missing)" in line
    # the package's own verify.py, run on the board before install: standard library only
    # (-S: no site-packages, so neither numpy nor vtaforge), the same verdict
    v = subprocess.run([sys.executable, "-I", "-S", str(bad / "verify.py")],
                       capture_output=True, text=True)
    assert v.returncode == 1 and v.stdout == ""
    assert v.stderr.strip().splitlines() == ["error: verify: " + line.split(": ", 2)[2]]
    v = subprocess.run([sys.executable, "-I", "-S", str(pkg / "verify.py")],
                       capture_output=True, text=True)
    assert v.returncode == 0 and v.stdout.startswith("verify: 8 files match"), v.stderr


# ------------------------------------------------------------------ refusals
def test_model_for_another_config_is_refused(kit, tmp_path):
    out = tmp_path / "p"
    line = _error(_package(kit, out, model=kit["tiny_model"]))
    assert f"0x{TINY.fingerprint:08x}" in line and f"0x{PYNQ.fingerprint:08x}" in line
    assert "recompile it for this config" in line
    assert not out.exists()


def test_bitstream_for_another_config_is_refused(kit, tmp_path):
    """A tiny core's bitstream (same part, same block design) is refused by fingerprint,
    whichever file carries it: its project's board.json, a sidecar, or the .bit's UserID."""
    tbit = bk.write_project(tmp_path / "tiny_proj", TINY)
    line = _error(_package(kit, tmp_path / "p", bit=tbit))
    assert (f"was built for config {TINY.bitstream_name} (fingerprint 0x{TINY.fingerprint:08x}, "
            f"per {tmp_path / 'tiny_proj' / 'board.json'}) but the config is "
            f"{PYNQ.bitstream_name} (fingerprint 0x{PYNQ.fingerprint:08x})") in line
    assert not (tmp_path / "p").exists()
    # a sidecar beside the .bit
    d = tmp_path / "side"
    d.mkdir()
    shutil.copy(tbit, d / "core.bit")
    shutil.copy(tbit.with_suffix(".hwh"), d / "core.hwh")
    (d / "core.json").write_text(json.dumps({"format": "vtaforge-bitstream", "version": 1,
                                             "fingerprint": TINY.fingerprint,
                                             "config": TINY.to_dict()}))
    line = _error(_package(kit, tmp_path / "p", bit=d / "core.bit"))
    assert f"0x{TINY.fingerprint:08x}, per {d / 'core.json'}" in line
    # the .bit header's UserID (Vivado BITSTREAM.CONFIG.USERID), even with a matching sidecar
    proj = tmp_path / "uid"
    bit = bk.write_project(proj, PYNQ, bit=bk.bit_bytes(user_id=TINY.fingerprint))
    line = _error(_package(kit, tmp_path / "p", bit=bit))
    assert "per the UserID of vta.bit's header" in line


def test_bitstream_without_a_fingerprint_is_refused(kit, tmp_path):
    d = tmp_path / "bare"
    d.mkdir()
    shutil.copy(kit["bit"], d / "vta.bit")
    shutil.copy(kit["bit"].with_suffix(".hwh"), d / "vta.hwh")
    line = _error(_package(kit, tmp_path / "p", bit=d / "vta.bit"))
    assert line.startswith(f"error: no fingerprint for bitstream {str(d / 'vta.bit')!r}")
    assert "--bitstream-info" in line
    r = _package(kit, tmp_path / "p", "--bitstream-info", str(kit["bit"].parent.parent /
                                                               "board.json"), bit=d / "vta.bit")
    assert r.exit_code == 0, r.output


def test_board_build_writes_a_sidecar_that_package_checks(kit, tmp_path, monkeypatch):
    """`board build` prints exactly what `board timing` prints and leaves out/vta.json
    (fingerprint, config, sha256s, timing); package reads it, refuses a bitstream it does
    not describe, and one that missed timing unless --allow-unmet-timing."""
    proj = tmp_path / "proj"
    bit = bk.write_project(proj, PYNQ)
    for rpt, met in (("timing_met.rpt", True), ("timing_failed.rpt", False)):
        res = vivado.parse_timing_summary((DATA / rpt).read_text())
        monkeypatch.setattr(vivado, "run_vivado", lambda d, res=res: res)
        a = CliRunner().invoke(main, ["board", "timing", str(DATA / rpt)])
        b = CliRunner().invoke(main, ["board", "build", str(proj)])
        assert a.exit_code == b.exit_code == (0 if met else 1) and a.output == b.output
        side = json.loads((proj / "out" / "vta.json").read_text())
        assert side["format"] == "vtaforge-bitstream" and side["fingerprint"] == PYNQ.fingerprint
        assert side["bitstream_sha256"] == _sha(bit)
        assert side["hwh_sha256"] == _sha(proj / "out" / "vta.hwh")
        assert side["timing"]["met"] is met
        r = _package(kit, tmp_path / "p", bit=bit)
        if met:
            assert r.exit_code == 0, r.output
            assert f"from {proj / 'out' / 'vta.json'}; timing met, WNS +" in r.output
        else:
            line = _error(r)
            assert "did not meet timing" in line and "--allow-unmet-timing" in line
            r = _package(kit, tmp_path / "p", "--allow-unmet-timing", bit=bit)
            assert r.exit_code == 0 and "note: packaged although timing was not met" in r.output
    # a rebuilt bitstream that the sidecar does not describe
    bit.write_bytes(bk.bit_bytes(nbytes=512))
    line = _error(_package(kit, tmp_path / "p", "--allow-unmet-timing", bit=bit))
    assert "describes another bitstream" in line


def test_board_build_without_a_project_writes_nothing(tmp_path, monkeypatch):
    res = vivado.parse_timing_summary((DATA / "timing_met.rpt").read_text())
    monkeypatch.setattr(vivado, "run_vivado", lambda d: res)
    r = CliRunner().invoke(main, ["board", "build", str(tmp_path)])
    assert r.exit_code == 0 and list(tmp_path.iterdir()) == [], r.output


@pytest.mark.parametrize("case, message", [
    ("raw", "is not a Vivado .bit file (no bitstream header"),
    ("part", "is for part 7z010clg400, but the config's PART is xc7z020clg484-1"),
    ("hwh_xml", "is not a Vivado .hwh (not XML"),
    ("hwh_core", "has no vta_wrapper module: not the hand-off of a vtaforge block design"),
    ("hwh_clock", "sets the PL clock to 150 MHz, but the config's CLOCK_MHZ is 100"),
    ("hwh_device", "is for device 7z010, but the config's PART is xc7z020clg484-1"),
    ("no_hwh", "does not exist (PYNQ needs the .hwh of the bitstream; pass --hwh)"),
    # a copy cut short was packaged (the header was whole): PYNQ would load part of a design
    ("truncated", "is truncated: its header declares 256 bytes of configuration data, the "
                  "file holds 100"),
])
def test_bit_and_hwh_checks(kit, tmp_path, case, message):
    proj = tmp_path / "proj"
    bit = bk.write_project(proj, PYNQ)
    hwh = proj / "out" / "vta.hwh"
    if case == "raw":
        bit.write_bytes(b"\xff" * 64 + b"\xaa\x99\x55\x66" + bytes(64))
    elif case == "part":
        bit.write_bytes(bk.bit_bytes("7z010clg400"))
    elif case == "hwh_xml":
        hwh.write_text("<EDKSYSTEM><MODULES>")
    elif case == "hwh_core":
        hwh.write_text(bk.hwh_text(PYNQ, core="axi_gpio"))
    elif case == "hwh_clock":
        hwh.write_text(bk.hwh_text(PYNQ, clock_mhz=150))
    elif case == "hwh_device":
        hwh.write_text(bk.hwh_text(PYNQ, device="7z010"))
    elif case == "no_hwh":
        hwh.unlink()
    elif case == "truncated":
        whole = bit.read_bytes()
        bit.write_bytes(whole[:len(whole) - 256 + 100])
    line = _error(_package(kit, tmp_path / "p", bit=bit))
    assert message in line, line
    assert not (tmp_path / "p").exists()


def test_zynqmp_bitstream_check(tmp_path):
    """The UltraScale+ branch: zynq_ultra_ps_e, PL0 clock parameter, HPM0 register base."""
    from vtaforge.runtime.board import check_bitstream

    cfg = preset("ultra96")
    bit = bk.write_project(tmp_path / "proj", cfg)
    r = check_bitstream(cfg, bit, bit.with_suffix(".hwh"))
    assert r["fingerprint"] == cfg.fingerprint and r["hwh"]["ps_ip"] == "zynq_ultra_ps_e"
    assert r["hwh"]["pl_clock_mhz"] == bk.pl_clock_mhz(cfg) and r["hwh"]["reg_base"] == 0xA0000000
    (tmp_path / "proj" / "out" / "vta.hwh").write_text(bk.hwh_text(PYNQ))
    with pytest.raises(Exception, match="for device 7z020, but the config's PART is xczu3eg"):
        check_bitstream(cfg, bit, bit.with_suffix(".hwh"))


def test_wheel_and_folder_checks(kit, tmp_path):
    def pkg_with(wheel):
        return CliRunner().invoke(main, ["board", "package", "--config", "pynq", "--bitstream",
                                         str(kit["bit"]), "--model", str(kit["model"]), "-o",
                                         str(tmp_path / "p"), "--wheel", str(wheel)])

    assert "does not exist" in _error(pkg_with(tmp_path / "vtaforge-0.1.0-py3-none-any.whl"))
    (tmp_path / "other-1.0-py3-none-any.whl").write_bytes(b"PK")
    assert "is not a vtaforge wheel" in _error(pkg_with(tmp_path / "other-1.0-py3-none-any.whl"))
    w = tmp_path / "w" / "vtaforge-0.1.0-py3-none-any.whl"
    w.parent.mkdir()
    w.write_bytes(b"not a zip")
    assert "not a zip archive" in _error(pkg_with(w))
    with zipfile.ZipFile(w, "w") as z:
        z.writestr("vtaforge/__init__.py", "")
    assert "has no vtaforge-*.dist-info/METADATA" in _error(pkg_with(w))
    busy = tmp_path / "busy"
    busy.mkdir()
    (busy / "notes.txt").write_text("mine")
    line = _error(_package(kit, busy))
    assert "exists and is not an earlier package" in line
    assert (busy / "notes.txt").read_text() == "mine"
    bad = tmp_path / "digits v2.vtapkg"
    shutil.copy(kit["model"], bad)
    assert "rename it" in _error(_package(kit, tmp_path / "p", model=bad))
    args = ["board", "package", "--config", "pynq", "--bitstream", str(kit["bit"]), "--model",
            str(kit["model"]), "--model", str(kit["model"]), "-o", str(tmp_path / "p"),
            "--wheel", str(kit["wheel"])]
    assert "two models named 'digits'" in _error(CliRunner().invoke(main, args))


# ------------------------------------------------------------------ run.sh and the notebook
def test_run_sh_runs_the_model_like_vtaforge_run(kit, pkg, tmp_path):
    """`sh run.sh run` (test hooks: fsim, no pip) writes the same output as `vtaforge run`
    and the run's statistics."""
    work = tmp_path / "work"
    shutil.copytree(pkg, work)
    r = subprocess.run(["sh", str(work / "run.sh"), "run", "--out", "res", str(kit["x"])],
                       cwd=tmp_path, env=_hooks(), capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "VTAFORGE_RUN_TARGET=fsim: running on fsim, not on the board (test hook)" in r.stdout
    assert "VTAFORGE_SKIP_INSTALL=1: not installing" in r.stdout
    ref = tmp_path / "ref.npy"
    d = CliRunner().invoke(main, ["run", "--model", str(kit["model"]), "--input", str(kit["x"]),
                                  "--config", "pynq", "--target", "fsim", "--output", str(ref)])
    assert d.exit_code == 0, d.output
    res = tmp_path / "res"  # --out is relative to the caller's folder
    assert np.array_equal(np.load(res / "output.npy"), np.load(ref))
    st = json.loads((res / "stats.json").read_text())
    assert st["model"] == "digits" and st["target"] == "fsim"
    assert st["test_hook"] == "VTAFORGE_RUN_TARGET=fsim"
    assert (st["steps"], st["steps_on_vta"], st["exit_status"], st["error"]) == (9, 6, 0, None)
    assert st["input_shape"] == [3, 1, 8, 8] and st["output_shape"] == [3, 10]
    assert st["config_fingerprint"] == f"0x{PYNQ.fingerprint:08x}"
    assert st["wall_s"] > 0 and st["run_s"] is not None
    assert "digits_cnn: 3 sample(s) on fsim" in (res / "run.log").read_text()


def test_run_sh_failures(kit, pkg, tmp_path):
    work = tmp_path / "work"
    shutil.copytree(pkg, work)
    bad = tmp_path / "bad.npy"
    np.save(bad, np.zeros((2, 3), np.float32))

    def sh(*args):
        return subprocess.run(["sh", str(work / "run.sh"), *args], cwd=tmp_path, env=_hooks(),
                              capture_output=True, text=True, timeout=120)

    r = sh("run", "--model", "nope", str(kit["x"]))
    assert r.returncode == 2 and r.stderr.strip() == ("error: run.sh: no model nope in this "
                                                      "package (digits)")
    r = sh("run", str(tmp_path / "missing.npy"))
    assert r.returncode == 2 and "does not exist" in r.stderr
    r = sh("frobnicate")
    assert r.returncode == 2 and r.stderr.startswith("error: run.sh: usage:")
    # vtaforge run refuses the input: its exit status, and stats.json records the error
    r = sh("run", "--out", "res", str(bad))
    assert r.returncode == 2, r.stdout + r.stderr
    st = json.loads((tmp_path / "res" / "stats.json").read_text())
    assert st["exit_status"] == 2 and st["error"].startswith("error: ")
    assert st["output_shape"] is None
    # a corrupted file stops the run before anything is installed or run
    (work / "config.json").write_text((work / "config.json").read_text() + " ")
    r = sh("run", "--out", "res2", str(kit["x"]))
    assert r.returncode == 1 and "config.json (" in r.stderr
    assert not (tmp_path / "res2").exists()


def test_run_sh_install_runs_pip_once(pkg, tmp_path, kit):
    """Without the skip hook, `install` runs `pip install --no-deps` of the package's wheel
    in the chosen Python and records it; `run` then does not install again."""
    work = tmp_path / "work"
    shutil.copytree(pkg, work)
    calls = tmp_path / "calls.txt"
    fake_py = tmp_path / "python3"
    fake_py.write_text(f'#!/bin/sh\nif [ "$1" = -m ] && [ "$2" = pip ]; then echo "$@" >> {calls}; '
                       f'exit 0; fi\nexec {sys.executable} "$@"\n')
    fake_py.chmod(0o755)
    env = _hooks(VTAFORGE_PYTHON=str(fake_py))
    del env["VTAFORGE_SKIP_INSTALL"]
    r = subprocess.run(["sh", "run.sh", "install"], cwd=work, env=env, capture_output=True,
                       text=True, timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr
    assert calls.read_text().splitlines() == [
        "-m pip install --no-deps --no-index --force-reinstall --quiet "
        "wheel/vtaforge-0.1.0-py3-none-any.whl"]
    assert "run.sh: installed vtaforge" in r.stdout
    r = subprocess.run(["sh", "run.sh", "run", str(kit["x"])], cwd=work, env=env,
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr
    assert len(calls.read_text().splitlines()) == 1
    assert (work / "results" / "digits" / "output.npy").is_file()
    # --no-deps installs no dependencies: the board's runner needs no click (an image may
    # lack it; the vtaforge CLI needs it, run.sh does not)
    blocked = tmp_path / "noclick"
    blocked.mkdir()
    (blocked / "sitecustomize.py").write_text(
        "import importlib.abc, sys\n"
        "class B(importlib.abc.MetaPathFinder):\n"
        "    def find_spec(self, name, path=None, target=None):\n"
        "        if name == 'click':\n"
        "            raise ModuleNotFoundError(name, name=name)\n"
        "sys.meta_path.insert(0, B())\n")
    r = subprocess.run(["sh", "run.sh", "run", str(kit["x"])], cwd=work,
                       env=dict(env, PYTHONPATH=str(blocked)), capture_output=True, text=True,
                       timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "digits_cnn: 3 sample(s) on fsim" in r.stdout


def test_notebook_is_nbformat4_and_its_cells_run(kit, pkg, tmp_path):
    nb = json.loads((pkg / "vtaforge.ipynb").read_text())
    assert nb["nbformat"] == 4 and nb["nbformat_minor"] >= 5
    assert nb["metadata"]["kernelspec"]["name"] == "python3"
    ids = set()
    for c in nb["cells"]:
        assert c["cell_type"] in ("markdown", "code") and isinstance(c["source"], list)
        assert isinstance(c["metadata"], dict) and c["id"] not in ids
        ids.add(c["id"])
        if c["cell_type"] == "code":
            assert c["execution_count"] is None and c["outputs"] == []
    code = "\n".join("".join(c["source"]) for c in nb["cells"] if c["cell_type"] == "code")
    compile(code, "vtaforge.ipynb", "exec")
    assert "verify.py" in code and "pip" in code and "Executor(model, device)" in code
    work = tmp_path / "work"
    shutil.copytree(pkg, work)
    shutil.copy(kit["x"], work / "input.npy")
    r = subprocess.run([sys.executable, "-c", code], cwd=work, env=_hooks(),
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "VTAFORGE_SKIP_INSTALL=1: not installing" in r.stdout
    y = np.load(work / "results" / "notebook" / "output.npy")
    ref = tmp_path / "ref.npy"
    d = CliRunner().invoke(main, ["run", "--model", str(kit["model"]), "--input", str(kit["x"]),
                                  "--config", "pynq", "--output", str(ref)])
    assert d.exit_code == 0 and np.array_equal(y, np.load(ref))
    st = json.loads((work / "results" / "notebook" / "stats.json").read_text())
    assert st["steps_on_vta"] == 6 and st["per_step"]["conv1"]["insns"] > 0


# ------------------------------------------------------------------ the real wheel
@pytest.mark.slow
def test_wheel_is_built_once_and_cached(tmp_path):
    """`python -m build --wheel` on a copy of the source tree (the tree gets no build/),
    cached by content; the wheel carries the board modules and installs with --no-deps."""
    from vtaforge.runtime import board as deploy

    root = deploy.source_tree()
    assert root is not None

    def leftovers():  # what building in the tree itself would leave (others share the tree)
        return {n for n in os.listdir(root) if n in ("build", "dist") or n.endswith(".egg-info")}

    before = leftovers()
    whl, cached = deploy.build_wheel(cache_dir=tmp_path / "cache")
    assert not cached and whl.name == "vtaforge-0.1.0-py3-none-any.whl", (whl, cached)
    assert leftovers() == before
    again, cached = deploy.build_wheel(cache_dir=tmp_path / "cache")
    assert cached and again == whl
    names = zipfile.ZipFile(whl).namelist()
    for n in ("vtaforge/runtime/board/run.py", "vtaforge/commands/board.py", "vtaforge/hw/config.py",
              "vtaforge/hw/build.tcl.in",
              "vtaforge/runtime/pynq.py", "vtaforge/compiler/models/digits.onnx"):
        assert n in names, n
    # a pure-Python wheel imports as a zip: the board's modules come from it, not from here
    p = subprocess.run([sys.executable, "-I", "-c", f"import sys; sys.path.insert(0, {str(whl)!r}); "
                        "import vtaforge, vtaforge.runtime.board, vtaforge.runtime.pynq, vtaforge.hw.vivado; "
                        "assert 'stage 6' in vtaforge.hw.vivado.build_tcl(vtaforge.preset('pynq')); "
                        "print(vtaforge.runtime.board.__file__)"], cwd=tmp_path, capture_output=True,
                       text=True, timeout=120)
    assert p.returncode == 0 and p.stdout.startswith(str(whl)), p.stdout + p.stderr


def test_wheel_without_the_build_package(tmp_path, monkeypatch):
    """Without PyPA's build (CI's venv has none) the wheel comes from ``pip wheel``; a
    Python with neither gets one line naming both and --wheel."""
    from vtaforge.runtime.board import wheel as deploy

    real = deploy._call

    def no_build(cmd, **kw):
        if cmd[1:3] == ["-m", "build"]:
            return subprocess.CompletedProcess(cmd, 1, "", f"{cmd[0]}: No module named build")
        return real(cmd, **kw)

    monkeypatch.setattr(deploy, "_call", no_build)
    whl, cached = deploy.build_wheel(cache_dir=tmp_path / "cache")
    assert not cached and whl.name == "vtaforge-0.1.0-py3-none-any.whl"
    assert "vtaforge/runtime/pynq.py" in zipfile.ZipFile(whl).namelist()

    def neither(cmd, **kw):
        return subprocess.CompletedProcess(cmd, 1, "", f"No module named {cmd[2]}")

    monkeypatch.setattr(deploy, "_call", neither)
    with pytest.raises(deploy.DeployError, match="build or pip package"):
        deploy.build_wheel(cache_dir=tmp_path / "other")


def test_package_and_board_side_without_the_extras(kit, pkg, tmp_path):
    """What runs on a board needs only the base install: with onnx, onnxruntime, sklearn and
    amaranth unimportable, `board package`, `board verify` and run.sh's statistics helper
    work (`vtaforge run --model X.vtapkg` is tests/test_base_install.py's)."""
    blocker = (
        "import importlib.abc, sys\n"
        "class B(importlib.abc.MetaPathFinder):\n"
        "    def find_spec(self, name, path=None, target=None):\n"
        "        if name.split('.')[0] in ('onnx', 'onnxruntime', 'sklearn', 'amaranth'):\n"
        "            raise ModuleNotFoundError(name, name=name)\n"
        "sys.meta_path.insert(0, B())\n")
    out = tmp_path / "p"
    code = blocker + (
        "from vtaforge.cli import main\n"
        f"main(['board', 'package', '--config', 'pynq', '--bitstream', {str(kit['bit'])!r}, "
        f"'--model', {str(kit['model'])!r}, '-o', {str(out)!r}, '--wheel', "
        f"{str(kit['wheel'])!r}])\n")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert r.returncode == 0 and "6/9 steps on VTA" in r.stdout, r.stderr
    r = subprocess.run([sys.executable, "-c", blocker + "from vtaforge.cli import main\n"
                        f"main(['board', 'verify', {str(out)!r}])"], capture_output=True,
                       text=True, timeout=120)
    assert r.returncode == 0 and "verify: 8 files" in r.stdout, r.stderr
    st = tmp_path / "st.json"
    r = subprocess.run([sys.executable, "-c", blocker + "import sys\nfrom vtaforge.runtime.board import main\n"
                        "sys.exit(main(sys.argv[1:]))", "stats", "--model",
                        str(out / "models" / "digits.vtapkg"), "--config", str(out / "config.json"),
                        "--input", str(kit["x"]), "--output", str(tmp_path / "none.npy"),
                        "--target", "pynq", "--start", "1", "--end", "2.5", "-o", str(st)],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    d = json.loads(st.read_text())
    assert (d["steps_on_vta"], d["wall_s"], d["error"], d["test_hook"]) == (6, 1.5, None, None)
    assert d["output_shape"] is None and d["input_shape"] == [3, 1, 8, 8]


def test_verify_refuses_unlisted_files(pkg, tmp_path):
    """A file the manifest does not list where the package keeps its own (a planted model, a
    script at the top) fails verify; inputs beside it and what a run leaves do not."""
    import shutil

    from vtaforge.runtime.board import DeployError, verify_package

    copy = tmp_path / "copy"
    shutil.copytree(pkg, copy)
    (copy / "results" / "m").mkdir(parents=True)
    (copy / "results" / "m" / "output.npy").write_bytes(b"x")
    (copy / ".installed").write_text("sha python\n")
    (copy / "input.npy").write_bytes(b"x")
    verify_package(copy)
    (copy / "models" / "evil.vtapkg").write_bytes(b"x")
    with pytest.raises(DeployError, match=r"unlisted: models/evil\.vtapkg"):
        verify_package(copy)
    (copy / "models" / "evil.vtapkg").unlink()
    (copy / "evil.sh").write_text("rm -rf ~\n")
    with pytest.raises(DeployError, match=r"unlisted: evil\.sh"):
        verify_package(copy)


# ------------------------------------------------------------------ issue #22 item 4
_NO_CLICK = ("import importlib.abc, sys\n"
             "class B(importlib.abc.MetaPathFinder):\n"
             "    def find_spec(self, name, path=None, target=None):\n"
             "        if name.split('.')[0] == 'click':\n"
             "            raise ModuleNotFoundError(name, name=name)\n"
             "sys.meta_path.insert(0, B())\n")


def test_saved_notebook_and_user_files_do_not_break_the_package(kit, pkg, tmp_path):
    """Jupyter saves the notebook (outputs, execution counts, checkpoints) and users add
    notebooks and edit the README: verify, run.sh and the notebook's own verify cell still
    pass, verify notes the changed user files; a changed runtime file still fails.  The
    notebook and run.sh run with click unimportable (a board image may lack it)."""
    work = tmp_path / "work"
    shutil.copytree(pkg, work)
    nbp = work / "vtaforge.ipynb"
    nb = json.loads(nbp.read_text())
    for i, c in enumerate(nb["cells"]):
        if c["cell_type"] == "code":
            c["execution_count"] = i
            c["outputs"] = [{"output_type": "stream", "name": "stdout", "text": ["ok\n"]}]
    nbp.write_text(json.dumps(nb, indent=1))
    (work / ".ipynb_checkpoints").mkdir()
    (work / ".ipynb_checkpoints" / "vtaforge-checkpoint.ipynb").write_text(nbp.read_text())
    (work / "vtaforge-Copy1.ipynb").write_text(nbp.read_text())
    (work / "README.md").unlink()
    r = CliRunner().invoke(main, ["board", "verify", str(work)])
    assert r.exit_code == 0, r.output
    assert r.output.splitlines()[1:] == [
        "verify: note: README.md (a user file) is missing; the package runs without it",
        "verify: note: vtaforge.ipynb (a user file) changed since packaging; not checked"]
    v = subprocess.run([sys.executable, "-I", "-S", str(work / "verify.py")],
                       capture_output=True, text=True)
    assert v.returncode == 0 and "vtaforge.ipynb (a user file) changed" in v.stdout, v.stderr
    blocked = tmp_path / "noclick"
    blocked.mkdir()
    (blocked / "sitecustomize.py").write_text(_NO_CLICK)
    env = _hooks(PYTHONPATH=str(blocked))
    r = subprocess.run(["sh", "run.sh", "run", "--out", str(tmp_path / "res"), str(kit["x"])],
                       cwd=work, env=env, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr
    assert json.loads((tmp_path / "res" / "stats.json").read_text())["error"] is None
    shutil.copy(kit["x"], work / "input.npy")
    code = "\n".join("".join(c["source"]) for c in nb["cells"] if c["cell_type"] == "code")
    r = subprocess.run([sys.executable, "-c", _NO_CLICK + code], cwd=work, env=_hooks(),
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr
    assert np.array_equal(np.load(work / "results" / "notebook" / "output.npy"),
                          np.load(tmp_path / "res" / "output.npy"))
    # what the board runs is still checked
    (work / "run.sh").write_text((work / "run.sh").read_text() + "\n# edited\n")
    line = _error(CliRunner().invoke(main, ["board", "verify", str(work)]))
    assert "1 of 8 files do not match manifest.json: run.sh (" in line


def test_board_runner_errors_without_click(kit, tmp_path):
    """``python -m vtaforge.runtime.board run`` (run.sh's runner) reports bad input as one error
    line, exit status 2, with click unimportable."""
    bad = tmp_path / "bad.npy"
    bad.write_bytes(b"not npy")
    r = subprocess.run([sys.executable, "-c", _NO_CLICK + "import sys\nfrom vtaforge.runtime.board "
                        "import main\nsys.exit(main(sys.argv[1:]))", "run", "--model",
                        str(kit["model"]), "--input", str(bad), "--config", "pynq",
                        "--target", "fsim"], capture_output=True, text=True, timeout=120)
    assert r.returncode == 2 and r.stderr.startswith(f"error: input '{bad}' is neither a .npy "
                                                     f"array nor a .npz archive"), r.stderr


@pytest.mark.parametrize("where, message", [
    ("under_file", "--output '{p}': directory '{d}' does not exist"),
    ("dir", "--output '{p}' is a directory, not a file"),
    ("missing_dir", "--output '{p}': directory '{d}' does not exist"),
    ("empty", "--output '': the path is empty"),
], ids=["under_file", "dir", "missing_dir", "empty"])
def test_board_runner_checks_output_before_running(kit, tmp_path, capsys, monkeypatch,
                                                   where, message):
    """``python -m vtaforge.runtime.board run --output Y`` refuses an unwritable Y before it
    loads the model or makes a device (it used to run the model, then fail writing Y)."""
    from vtaforge.runtime import board as deploy
    from vtaforge.runtime import bundle

    (tmp_path / "afile").write_text("x")
    (tmp_path / "adir").mkdir()
    out = {"under_file": tmp_path / "afile" / "y.npy", "dir": tmp_path / "adir",
           "missing_dir": tmp_path / "nodir" / "y.npy", "empty": ""}[where]

    def no_device(*a, **kw):
        raise AssertionError("the model ran before --output was checked")

    monkeypatch.setattr(bundle, "make_device", no_device)
    capsys.readouterr()
    assert deploy.main(["run", "--model", str(kit["model"]), "--input", str(kit["x"]),
                        "--config", "pynq", "--target", "fsim", "--output", str(out)]) == 2
    err = capsys.readouterr().err
    want = message.format(p=out, d=Path(out).parent)
    assert err.strip() == f"error: {want}", err


def test_board_stats_checks_its_output_first(kit, tmp_path, capsys):
    """``stats -o STATS.json`` in a missing directory: one error line, nothing written."""
    from vtaforge.runtime import board as deploy

    out = tmp_path / "nodir" / "stats.json"
    capsys.readouterr()
    assert deploy.main(["stats", "--model", str(kit["model"]), "--config", "pynq", "--input",
                        str(kit["x"]), "--output", str(tmp_path / "y.npy"), "--target", "fsim",
                        "--start", "0", "--end", "1", "-o", str(out)]) == 2
    err = capsys.readouterr().err
    assert err.strip() == f"error: -o '{out}': directory '{out.parent}' does not exist", err


@pytest.mark.parametrize("cli", [True, False])
def test_verify_names_a_missing_package_directory(tmp_path, capsys, cli):
    """``board verify`` / ``python -m vtaforge.runtime.board verify`` / ``verify_package`` on a
    path that does not exist: the message names that path, not a manifest.json inside it;
    an empty folder: "no manifest.json (not a board package)"."""
    from vtaforge.runtime import board as deploy

    missing = tmp_path / "nopkg"
    (tmp_path / "empty").mkdir()
    with pytest.raises(deploy.DeployError,
                       match=rf"^package directory '{missing}' does not exist$"):
        deploy.verify_package(missing)
    if cli:
        line = _error(CliRunner().invoke(main, ["board", "verify", str(missing)]))
        assert line == f"error: package directory '{missing}' does not exist"
        line = _error(CliRunner().invoke(main, ["board", "verify", str(tmp_path / "empty")]))
        assert line == (f"error: verify '{tmp_path / 'empty'}': no manifest.json (not a board "
                        f"package)")
    else:
        capsys.readouterr()
        assert deploy.main(["verify", str(missing)]) == 2
        assert capsys.readouterr().err == f"error: package directory '{missing}' does not exist\n"


@pytest.fixture
def specials(tmp_path):
    """FIFOs where the board runner takes files, a deeply nested and a FIFO manifest."""
    d = {}
    for name in ("in.npy", "cfg.json", "m.vtapkg", "run.log"):
        os.mkfifo(tmp_path / name)
        d[name] = str(tmp_path / name)
    for name, make in (("deep", lambda p: p.write_text("[" * 100000 + "]" * 100000)),
                       ("fifo", lambda p: os.mkfifo(p))):
        (tmp_path / name).mkdir()
        make(tmp_path / name / "manifest.json")
        d[name] = str(tmp_path / name)
    return d


def _board_main(argv, capsys) -> tuple[int, str]:
    """``python -m vtaforge.runtime.board ARGV`` in process, a hang failing after 30 s."""
    import signal

    from vtaforge.runtime import board as deploy

    def hang(*a):
        raise AssertionError(f"hung: {argv}")

    old = signal.signal(signal.SIGALRM, hang)
    signal.alarm(30)
    capsys.readouterr()
    try:
        try:
            rc = deploy.main(argv)
        except SystemExit as e:
            rc = e.code
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)
    return rc, capsys.readouterr().err


def test_board_runner_refuses_fifos_and_odd_files(kit, specials, tmp_path, capsys):
    """The board runner opened FIFOs (input, config, model, run log, manifest) and blocked
    for ever, and a 100000-deep manifest was a RecursionError traceback: each is one error
    line now (``stats`` still writes its statistics, with the error in them)."""
    run = ["run", "--model", str(kit["model"]), "--input", str(kit["x"]), "--config", "pynq",
           "--target", "fsim"]
    for flag, key, what in (("--input", "in.npy", "input"), ("--config", "cfg.json",
                            "config file"), ("--model", "m.vtapkg", "artifact")):
        argv = list(run)
        argv[argv.index(flag) + 1] = specials[key]
        rc, err = _board_main(argv, capsys)
        assert (rc, err) == (2, f"error: {what} '{specials[key]}' is not a regular file (a "
                                f"FIFO or a device)\n"), (flag, err)
    for key, msg in (("deep", "manifest.json is nested too deeply (not a package manifest)"),
                     ("fifo", "manifest.json is not a regular file")):
        rc, err = _board_main(["verify", specials[key]], capsys)
        assert (rc, err) == (2, f"error: verify '{specials[key]}': {msg}\n"), err
    out = tmp_path / "stats.json"
    stats = ["stats", "--model", specials["m.vtapkg"], "--config", specials["cfg.json"],
             "--input", specials["in.npy"], "--output", str(tmp_path / "y.npy"), "--target",
             "fsim", "--start", "0", "--end", "1", "--log", specials["run.log"], "-o", str(out)]
    assert _board_main(stats, capsys)[0] == 0
    d = json.loads(out.read_text())
    assert d["error"] == (f"error: config '{specials['cfg.json']}' is not a regular file (a "
                          f"FIFO or a device)"), d["error"]
    assert d["input_shape"] is None and d["run_s"] is None


@pytest.mark.parametrize("argv, message", [
    (["stats", "--model", "m", "--config", "pynq", "--input", "x", "--output", "y",
      "--target", "fsim", "--start", "nan", "--end", "1", "-o", "s.json"],
     "stats: argument --start: invalid finite number of seconds value: 'nan'"),
    (["stats", "--model", "m", "--config", "pynq", "--input", "x", "--output", "y",
      "--target", "fsim", "--start", "0", "--end", "inf", "-o", "s.json"],
     "stats: argument --end: invalid finite number of seconds value: 'inf'"),
    (["verify", "p", "--bogus"], "unrecognized arguments: --bogus"),
    (["nosuch"], "argument cmd: invalid choice: 'nosuch'"),
    ([], "the following arguments are required: cmd"),
], ids=["start-nan", "end-inf", "unknown-option", "unknown-command", "no-command"])
def test_board_runner_usage_errors_are_one_line(argv, message, capsys):
    """argparse's usage errors (two lines: usage, then ``prog: error:``) are one ``error:``
    line; an infinite --end was an OverflowError traceback in time.gmtime."""
    rc, err = _board_main(argv, capsys)
    assert rc == 2 and err.count("\n") == 1 and err.startswith("error: python -m "
                                                                "vtaforge.runtime.board"), err
    assert message in err, err


def test_bitstream_info_nested_too_deeply_is_one_error_line(kit, tmp_path):
    """``--bitstream-info`` of a 100000-deep JSON was a RecursionError: internal error,
    exit 3."""
    deep = tmp_path / "deep.json"
    deep.write_text("[" * 100000 + "]" * 100000)
    line = _error(_package(kit, tmp_path / "p", "--bitstream-info", str(deep)))
    assert line == f"error: --bitstream-info '{deep}' is not a readable JSON object", line


@pytest.mark.parametrize("edit, message", [
    (lambda d: d.pop("config"), "manifest.json has no config fingerprint"),
    (lambda d: d.update(models="digits"), "manifest.json's models are not a list of {name, "
                                          "file} objects"),
    (lambda d: d.update(models=[{"name": 1}]), "manifest.json's models are not a list"),
    (lambda d: d.update(user_files=["README.md"]), "files or user_files entries are not"),
    (lambda d: d["files"].update({"run.sh": "abc"}), "files or user_files entries are not"),
], ids=["no-config", "models-str", "model-no-file", "user-files-list", "file-entry-str"])
def test_verify_refuses_a_malformed_manifest(pkg, tmp_path, edit, message):
    """manifest.json fields that verify did not look at but the tools read after it: a
    missing config was a KeyError in ``board verify``, a models string a TypeError in
    ``board deploy`` (internal errors, exit 3)."""
    work = tmp_path / "pkg"
    shutil.copytree(pkg, work)
    d = json.loads((work / "manifest.json").read_text())
    edit(d)
    (work / "manifest.json").write_text(json.dumps(d))
    for argv in (["board", "verify", str(work)], ["board", "deploy", str(work), "--host", "u@h"]):
        line = _error(CliRunner().invoke(main, argv))
        assert line.startswith(f"error: verify '{work}': ") and message in line, (argv, line)


def test_package_prints_the_boards_part(kit, pkg, tmp_path):
    """The pynq preset's PART is upstream's clg484, the PYNQ-Z1/Z2 are clg400: the package
    names the board's part (the one the bitstream was built for)."""
    r = _package(kit, tmp_path / "p")
    assert r.exit_code == 0, r.output
    assert "PYNQ-Z1, part xc7z020clg400-1, 100 MHz" in r.output and "clg484" not in r.output
    man = json.loads((pkg / "manifest.json").read_text())
    assert man["board"] == {"name": "pynq-z1", "title": "PYNQ-Z1", "part": "xc7z020clg400-1"}
    assert man["config"]["part"] == "xc7z020clg400-1"
    assert man["config"]["config_part"] == PYNQ.PART
    assert json.loads((pkg / "overlay" / "vta.json").read_text())["part"] == "xc7z020clg400-1"
    assert "part xc7z020clg400-1" in (pkg / "README.md").read_text()


def test_board_part_is_checked(tmp_path):
    r = CliRunner().invoke(main, ["board", "project", "--config", "pynq", "-o",
                                  str(tmp_path / "a"), "--board-part", "xc9999"])
    line = _error(r)
    assert "--board-part 'xc9999' is not a Vivado board part (VENDOR:BOARD:part0:VERSION" in line
    assert "known parts: xc7z020clg484-1, xc7z020clg400-1" in line
    assert "known boards: PYNQ-Z1: VENDOR:pynq-z1:part0:VERSION" in line
    assert not (tmp_path / "a").exists()
    line = _error(CliRunner().invoke(main, [
        "board", "project", "--config", "zcu104", "-o", str(tmp_path / "b"),
        "--board-part", "tul.com.tw:pynq-z2:part0:1.0"]))
    assert "is for board 'pynq-z2', not the ZCU104 (VENDOR:zcu104:part0:VERSION)" in line
    r = CliRunner().invoke(main, ["board", "project", "--config", "zcu104", "-o",
                                  str(tmp_path / "c"), "--board-part",
                                  "xilinx.com:zcu104:part0:1.0"])
    assert r.exit_code == 0, r.output
    assert "board_part xilinx.com:zcu104:part0:1.0" in (tmp_path / "c" / "build.tcl").read_text()


_CLK = 'NAME="FCLK_CLK0" SIGIS="clk" SIGNAME="ps_FCLK_CLK0"/>'


def _con(inst: str, port: str) -> str:
    """The PS's FCLK_CLK0 port of boardkit's .hwh, connected to ``inst``/``port``."""
    return _CLK[:-2] + (f'><CONNECTIONS><CONNECTION INSTANCE="{inst}" PORT="{port}"/>'
                        '</CONNECTIONS></PORT>')


@pytest.mark.parametrize("old, new, message", [
    ("<EXTERNALPORTS/>", "", "has no EXTERNALPORTS element"),
    ('IS_PL="FALSE" ', "", 'does not mark the PS MODULE ps IS_PL="FALSE"'),
    ('<PARAMETER NAME="PCW_FCLK3_PERIPHERAL_DIVISOR1" VALUE="1"/>', "",
     "has no usable PS parameter PCW_FCLK3_PERIPHERAL_DIVISOR1 (missing)"),
    ('NAME="PCW_FCLK1_PERIPHERAL_DIVISOR0" VALUE="1"', 'NAME="PCW_FCLK1_PERIPHERAL_DIVISOR0" '
     'VALUE="0x1"', "PCW_FCLK1_PERIPHERAL_DIVISOR0 ('0x1', not an integer)"),
    ('NAME="PCW_FPGA_FCLK0_ENABLE" VALUE="1"', 'NAME="PCW_FPGA_FCLK0_ENABLE" VALUE="0"',
     "leaves PL clock 0 disabled"),
    ('NAME="PCW_FCLK0_PERIPHERAL_DIVISOR1" VALUE="1"',
     'NAME="PCW_FCLK0_PERIPHERAL_DIVISOR1" VALUE="2"',
     "by 20 for PL clock 0: 50 MHz, which PYNQ programs, but the config's CLOCK_MHZ is 100"),
    ("xilinx.com:module_ref:vta_wrapper:1.0", "user.org:user:vta_wrapper:1.0",
     "gives the core vta_0 the VLNV 'user.org:user:vta_wrapper:1.0', not "
     "xilinx.com:module_ref:vta_wrapper:X.Y"),
    ("xilinx.com:module_ref:vta_wrapper:1.0", "xilinx.com:module_ref:vta_wrapper",
     "expected vendor:library:name:X.Y"),
    ('BASEVALUE="0x43C00000"', 'BASEVALUE="base"', "address range BASEVALUE='base'"),
    ('SLAVEBUSINTERFACE="s_axi"', 'SLAVEBUSINTERFACE="S_AXI_LITE"',
     "through bus interface 'S_AXI_LITE', which its MODULE does not declare"),
    ('MEMTYPE="REGISTER"', 'MEMTYPE="MEMORY"', "MEMTYPE 'MEMORY', not REGISTER"),
    ('FULLNAME="/vta_0" ', "", "has no FULLNAME on MODULE vta_0"),
    ('PHYSICAL="s_axi_awvalid"', 'PHYSICAL="s_axi_awready"',
     "maps bus interface vta_0/s_axi to port 's_axi_awready'"),
    ("INSTANCE=\"vta_0\"\n                  IS_DATA", "INSTANCE=\"vta_1\"\n                  IS_DATA",
     "has no MEMRANGE for the core vta_0"),
    # found by comparing with pynq 3.0.1 and pynqmetadata 0.2.0 on every one-element and
    # one-attribute deletion of this .hwh and of tests/runtime/fakepynq's: each one they
    # cannot load is refused
    ('NAME="vta_bd" ', "", "has no SYSTEMINFO NAME"),
    ('NAME="M_AXI_GP0" TYPE="MASTER"', 'NAME="M_AXI_GP0" TYPE="SLAVE"',
     "from the PS's bus interface 'M_AXI_GP0', which is not a MASTER AXI-MM BUSINTERFACE"),
    ('MASTERBUSINTERFACE="M_AXI_GP0"', 'MASTERBUSINTERFACE="M_AXI_GP1"',
     "from the PS's bus interface 'M_AXI_GP1', which is not a MASTER AXI-MM"),
    ('NAME="s_axi" TYPE="SLAVE"', 'NAME="s_axi" TYPE="MASTER"',
     "through bus interface 's_axi', which is not a SLAVE AXI-MM BUSINTERFACE"),
    (_CLK, _con("vta_0", "clk"), None),
    (_CLK, _con("vta_0", "aclk"),
     "connects port ps/FCLK_CLK0 to vta_0/aclk, which MODULE vta_0 does not declare"),
    (_CLK, _con("rst_ps", "slowest_sync_clk"),
     "connects port ps/FCLK_CLK0 to rst_ps/slowest_sync_clk, but there is no MODULE rst_ps"),
    (_CLK, _con("vta_0", "irq"), "connects port ps/FCLK_CLK0 to vta_0/irq (DIR 'O' to a port "
     "of the same direction)"),
    (_CLK, _con("External_Ports", "FCLK"), "to External_Ports/FCLK, which EXTERNALPORTS does "
     "not declare"),
    ('NAME="irq" SENSITIVITY', 'LEFT="0" NAME="irq" SENSITIVITY',
     "gives PORT 'irq' LEFT='0' RIGHT=None (expected two integers)"),
])
def test_hwh_that_pynq_cannot_load_is_refused(kit, tmp_path, old, new, message):
    """What PYNQ 3.x's overlay loader needs of a .hwh (the PS with IS_PL and the four PL
    clocks' enables and divisors, the core as a module reference with a register MEMRANGE
    on one of its bus interfaces, EXTERNALPORTS, named modules and ports)."""
    proj = tmp_path / "proj"
    bit = bk.write_project(proj, PYNQ)
    hwh = proj / "out" / "vta.hwh"
    text = hwh.read_text()
    assert old in text, old
    hwh.write_text(text.replace(old, new, 1))
    if message is None:                              # a well-formed variant: packaged
        assert _package(kit, tmp_path / "p", bit=bit).exit_code == 0
        return
    line = _error(_package(kit, tmp_path / "p", bit=bit))
    assert message in line, line
    assert "PYNQ's overlay loader cannot use it" in line or "PYNQ programs" in line, line
    assert not (tmp_path / "p").exists()


def _installed_layout(site: Path, with_dist_info: bool = True) -> None:
    """What ``pip install .`` (not editable) leaves: the package-dir mapping's folders under
    site/vtaforge and a vtaforge-VERSION.dist-info, no pyproject.toml."""
    root = Path(__file__).resolve().parent.parent
    ign = shutil.ignore_patterns("__pycache__", "*.pyc")
    shutil.copytree(root / "vtaforge", site / "vtaforge", ignore=ign)
    for sub in ("hw", "runtime", "compiler", "dse"):
        shutil.copytree(root / sub, site / "vtaforge" / sub, ignore=ign)
    if with_dist_info:
        di = site / "vtaforge-0.1.0.dist-info"
        di.mkdir()
        (di / "METADATA").write_text("Metadata-Version: 2.1\nName: vtaforge\nVersion: 0.1.0\n"
                                     "Requires-Dist: numpy\n")
        (di / "entry_points.txt").write_text("[console_scripts]\nvtaforge = vtaforge.cli:main\n")
        (di / "RECORD").write_text("")


def test_package_after_a_plain_pip_install(kit, tmp_path):
    """`pip install .` leaves no source tree: `board package` without --wheel packs the
    installed vtaforge as a pure-Python wheel that pip installs and that imports; without
    the .dist-info it gives the exact command to build one."""
    site = tmp_path / "site"
    _installed_layout(site)
    out = tmp_path / "p"
    code = (f"import sys; sys.path.insert(0, {str(site)!r})\n"
            "import vtaforge.runtime.board.wheel as d\n"
            f"assert d.__file__.startswith({str(site)!r}) and d.source_tree() is None\n"
            "from vtaforge.cli import main\n"
            "main(sys.argv[1:])")
    args = ["board", "package", "--config", "pynq", "--bitstream", str(kit["bit"]),
            "--model", str(kit["model"]), "-o", str(out)]
    env = dict(os.environ, VTAFORGE_CACHE=str(tmp_path / "cache"))
    r = subprocess.run([sys.executable, "-I", "-c", code, *args], env=env, cwd=tmp_path,
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "wheel wheel/vtaforge-0.1.0-py3-none-any.whl (packed from the installed vtaforge)" \
        in r.stdout
    assert "note: no source tree (vtaforge installed with pip install .)" in r.stdout
    whl = out / "wheel" / "vtaforge-0.1.0-py3-none-any.whl"
    names = zipfile.ZipFile(whl).namelist()
    for n in ("vtaforge/runtime/board/run.py", "vtaforge/runtime/pynq.py", "vtaforge/hw/config.py",
              "vtaforge/compiler/models/digits.onnx", "vtaforge-0.1.0.dist-info/METADATA",
              "vtaforge-0.1.0.dist-info/WHEEL", "vtaforge-0.1.0.dist-info/RECORD",
              "vtaforge-0.1.0.dist-info/entry_points.txt"):
        assert n in names, n
    assert not any("__pycache__" in n for n in names)
    # again: from the cache
    r = subprocess.run([sys.executable, "-I", "-c", code, *args], env=env, cwd=tmp_path,
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0 and "(from the cache)" in r.stdout, r.stdout + r.stderr
    # pip takes it (RECORD hashes checked) and the installed copy imports
    target = tmp_path / "target"
    p = subprocess.run([sys.executable, "-m", "pip", "install", "--no-deps", "--no-index",
                        "--quiet", "--target", str(target), str(whl)], capture_output=True,
                       text=True, timeout=120)
    assert p.returncode == 0, p.stdout + p.stderr
    p = subprocess.run([sys.executable, "-I", "-c", f"import sys; sys.path.insert(0, "
                        f"{str(target)!r}); import vtaforge.runtime.board, vtaforge.runtime.pynq; "
                        "print(vtaforge.runtime.board.__file__)"], capture_output=True, text=True,
                       timeout=120)
    assert p.returncode == 0 and p.stdout.startswith(str(target)), p.stdout + p.stderr
    # no .dist-info beside the installed package: the command to run instead
    bare = tmp_path / "bare"
    _installed_layout(bare, with_dist_info=False)
    r = subprocess.run([sys.executable, "-I", "-c", code.replace(str(site), str(bare)), *args[:-1],
                        str(tmp_path / "p2")], env=env, cwd=tmp_path, capture_output=True,
                       text=True, timeout=120)
    assert r.returncode == 2, r.stdout + r.stderr
    assert r.stderr.startswith("error: no source tree and no vtaforge-0.1.0.dist-info/METADATA "
                               "beside the installed "), r.stderr
    assert ("python -m pip wheel --no-deps --wheel-dir wheels SRC, then pass --wheel "
            "wheels/vtaforge-0.1.0-py3-none-any.whl") in r.stderr, r.stderr
    assert len(r.stderr.strip().splitlines()) == 1 and "Traceback" not in r.stderr, r.stderr


@pytest.mark.parametrize("target", ["fsim", "pynq"])
def test_board_runner_prints_what_vtaforge_run_prints(kit, tmp_path, capsys, monkeypatch, target):
    """run.sh's runner (``python -m vtaforge.runtime.board run``, no click) and ``vtaforge run
    --model X.vtapkg`` print the same lines (timings aside: run_stats reads them) and write
    the same output; on pynq (here a device reporting the cycle model's cycles) also the
    core cycles per VTA step."""
    import re

    from vtaforge.runtime import board as deploy
    from vtaforge.commands.profile import model_cycles_device
    from vtaforge.runtime import bundle

    if target == "pynq":
        monkeypatch.setattr(bundle, "make_device", lambda t, cfg, **kw: model_cycles_device(cfg))
    args = ["--model", str(kit["model"]), "--input", str(kit["x"]), "--config", "pynq",
            "--target", target]
    r = CliRunner().invoke(main, ["run", *args, "--output", str(tmp_path / "cli.npy")])
    assert r.exit_code == 0, r.output
    capsys.readouterr()
    assert deploy.main(["run", *args, "--output", str(tmp_path / "board.npy")]) == 0
    got = capsys.readouterr().out

    def norm(text, out):
        text = text.replace(str(tmp_path / out), "OUT")
        return re.sub(r"\d+\.\d+ s\b", "T s", text).splitlines()

    assert norm(got, "board.npy") == norm(r.output, "cli.npy")
    assert f"digits_cnn: 3 sample(s) on {target}" in got
    assert ("core cycles: " in got) == (target == "pynq"), got
    assert np.array_equal(np.load(tmp_path / "board.npy"), np.load(tmp_path / "cli.npy"))


@pytest.mark.slow
def test_package_after_the_readmes_plain_install(kit, tmp_path):
    """The README's plain install (pip install ., not editable: pip builds the wheel and
    installs it) leaves no source tree; `board package` without --wheel packs what pip
    installed, a wheel with the same modules as the real one, and says so."""
    from vtaforge.runtime import board as deploy

    real, _ = deploy.build_wheel(cache_dir=tmp_path / "cache")
    site = tmp_path / "site"
    p = subprocess.run([sys.executable, "-m", "pip", "install", "--no-deps", "--no-index",
                        "--quiet", "--target", str(site), str(real)], capture_output=True,
                       text=True, timeout=300)
    assert p.returncode == 0, p.stdout + p.stderr
    out = tmp_path / "p"
    code = (f"import sys; sys.path.insert(0, {str(site)!r})\n"
            "import vtaforge.runtime.board.wheel as d\n"
            f"assert d.__file__.startswith({str(site)!r}) and d.source_tree() is None\n"
            "from vtaforge.cli import main\n"
            "main(sys.argv[1:])")
    r = subprocess.run([sys.executable, "-I", "-c", code, "board", "package", "--config", "pynq",
                        "--bitstream", str(kit["bit"]), "--model", str(kit["model"]), "-o",
                        str(out)], env=dict(os.environ, VTAFORGE_CACHE=str(tmp_path / "c2")),
                       cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr
    assert "(packed from the installed vtaforge)" in r.stdout, r.stdout
    packed = out / "wheel" / real.name
    mods = {n for n in zipfile.ZipFile(real).namelist() if ".dist-info/" not in n}
    assert {n for n in zipfile.ZipFile(packed).namelist() if ".dist-info/" not in n} == mods
    got = json.loads((out / "manifest.json").read_text())["wheel"]
    assert got["file"] == f"wheel/{real.name}" and got["version"] == "0.1.0"
