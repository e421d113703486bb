"""Output paths are checked before the (possibly long) run: ``-o``/``--output`` in a missing
directory is one ``error:`` line naming the directory, and the run never starts (the run
function is replaced by one that fails the test).  Writes go through a temporary file, so a
failed write leaves an existing output untouched."""

from __future__ import annotations

import numpy as np
import pytest
from click.testing import CliRunner

from vtaforge.cli import main
from vtaforge.compiler.models import DIGITS_ONNX
from vtaforge.hw.config import preset
from vtaforge.hw.isa import Insn, Opcode, encode_program
from vtaforge.runtime.bundle import save_bundle


def _must_not_run(*a, **k):
    raise AssertionError("the run started before the output path was checked")


def _error_line(r, *needles):
    assert r.exit_code == 2, (r.exit_code, r.output)
    lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: "), r.stderr
    for n in needles:
        assert n in lines[0], lines[0]


@pytest.fixture
def bundle(tmp_path):
    dram = np.zeros(64, np.uint8)
    dram[16:32] = encode_program(preset("pynq"), [Insn(Opcode.FINISH)]).reshape(-1)
    b = tmp_path / "b.npz"
    save_bundle(b, dram, 16, 1)
    return b


def test_exec_missing_output_dir(tmp_path, bundle, monkeypatch):
    import vtaforge.runtime.bundle as rb

    monkeypatch.setattr(rb, "run_raw", _must_not_run)
    out = tmp_path / "nodir" / "r.npz"
    r = CliRunner().invoke(main, ["exec", str(bundle), "-o", str(out)])
    _error_line(r, "-o/--output", "nodir", "does not exist")


def test_compile_missing_output_dir(tmp_path, monkeypatch):
    import vtaforge.compiler.compile as cc

    monkeypatch.setattr(cc, "compile_model", _must_not_run)
    r = CliRunner().invoke(main, ["compile", str(DIGITS_ONNX), "-o",
                                  str(tmp_path / "nodir" / "m.vtapkg")])
    _error_line(r, "-o/--output", "nodir", "does not exist")


def test_run_missing_output_dir(tmp_path, monkeypatch):
    import vtaforge.compiler.compile as cc

    monkeypatch.setattr(cc, "compile_model", _must_not_run)
    x = tmp_path / "x.npy"
    np.save(x, np.zeros((1, 1, 8, 8), np.float32))
    r = CliRunner().invoke(main, ["run", "--model", str(DIGITS_ONNX), "--input", str(x),
                                  "--output", str(tmp_path / "nodir" / "y.npy")])
    _error_line(r, "--output", "nodir", "does not exist")


def test_dse_run_missing_output_dir(tmp_path, monkeypatch):
    import vtaforge.dse.search as ds

    monkeypatch.setattr(ds, "run_search", _must_not_run)
    r = CliRunner().invoke(main, ["dse", "run", "--no-progress", "-o",
                                  str(tmp_path / "nodir" / "rep.json")])
    _error_line(r, "-o/--out", "nodir", "does not exist")


def test_output_is_a_directory(tmp_path, bundle):
    r = CliRunner().invoke(main, ["exec", str(bundle), "-o", str(tmp_path)])
    _error_line(r, "is a directory")


def test_failed_write_keeps_existing_file(tmp_path):
    from vtaforge.runtime.npz import atomic_open

    p = tmp_path / "keep.npz"
    p.write_bytes(b"old contents")
    with pytest.raises(RuntimeError):
        with atomic_open(p) as f:
            f.write(b"partial")
            raise RuntimeError("disk full")
    assert p.read_bytes() == b"old contents"
    assert sorted(x.name for x in tmp_path.iterdir()) == ["keep.npz"]  # no temp file left
    with atomic_open(p) as f:
        f.write(b"new")
    assert p.read_bytes() == b"new"


def test_exec_output_still_written(tmp_path, bundle):
    out = tmp_path / "r.npz"
    out.write_bytes(b"old")
    r = CliRunner().invoke(main, ["exec", str(bundle), "-o", str(out)])
    assert r.exit_code == 0, r.output
    from vtaforge.runtime.bundle import load_result

    assert load_result(out)[0].shape == (64,)


#: A directory that refuses new files even to root (os.access says it is writable).
_NO_NEW_FILES = "/proc"


@pytest.mark.parametrize("args, option", [
    (["compile", str(DIGITS_ONNX), "-o", "{d}/m.vtapkg"], "-o/--output"),
    (["run", "--model", str(DIGITS_ONNX), "--input", "{x}", "--output", "{d}/y.npy"],
     "--output"),
    (["exec", "{bundle}", "-o", "{d}/r.npz"], "-o/--output"),
    (["exec", "{bundle}", "--target", "rtl", "--trace", "{d}/t.vcd"], "--trace"),
    (["profile", str(DIGITS_ONNX), "--target", "fsim", "--json", "{d}/p.json"], "--json"),
    (["dse", "run", "--no-progress", "--size", "7", "--workloads", "resnet18-c2", "-o",
      "{d}/r.json"], "-o/--out"),
    (["hw", "verilog", "--config", "tiny", "-o", "{d}/rtl"], "-o/--out"),
    (["hw", "verilog", "--config", "tiny", "-o", "{d}/a/b/rtl"], "-o/--out"),
    (["hw", "timing", "--no-progress", "--workdir", "{d}/w"], "--workdir"),
    (["board", "project", "--config", "tiny", "-o", "{d}/proj"], "-o/--out"),
], ids=["compile", "run", "exec", "exec-trace", "profile-json", "dse", "hw-verilog",
        "hw-verilog-deep", "hw-timing", "board-project"])
def test_a_directory_that_takes_no_new_file_is_refused_first(tmp_path, bundle, args, option):
    """``os.access`` says yes to root on /proc: the check creates a file to know, so the
    command fails at once naming the option, not after its run with a bare errno line."""
    import os

    if not os.path.isdir(_NO_NEW_FILES):
        pytest.skip("no /proc")
    x = tmp_path / "x.npy"
    np.save(x, np.zeros((1, 1, 8, 8), np.float32))
    argv = [a.format(d=_NO_NEW_FILES, x=x, bundle=bundle) for a in args]
    r = CliRunner().invoke(main, argv)
    _error_line(r, f"{option} '{_NO_NEW_FILES}/", f"directory '{_NO_NEW_FILES}' is not writable")


def test_output_folder_under_a_file(tmp_path):
    (tmp_path / "afile").write_text("x")
    r = CliRunner().invoke(main, ["hw", "verilog", "--config", "tiny", "-o",
                                  str(tmp_path / "afile" / "rtl")])
    _error_line(r, "-o/--out", "afile' is a file, not a directory")


def test_cli_and_board_share_one_output_check(tmp_path):
    """The CLI's ``-o`` checks are the board runner's (``runtime/board/_common.py``): the
    same bad path gives the same one-line message from both, for files and for folders."""
    import os

    from vtaforge.commands._output import OutputPathError, check_output_dir, check_output_path
    from vtaforge.runtime.board._common import DeployError, check_output_file
    from vtaforge.runtime.board._common import check_output_dir as board_dir

    (tmp_path / "afile").write_text("x")
    os.mkfifo(tmp_path / "fifo")
    files = ["", str(tmp_path), str(tmp_path / "nodir" / "y.npy"), str(tmp_path / "fifo"),
             f"{_NO_NEW_FILES}/y.npy"]
    dirs = ["", str(tmp_path / "afile"), str(tmp_path / "afile" / "sub"), f"{_NO_NEW_FILES}/out"]
    for cli, board, paths in ((check_output_path, check_output_file, files), (check_output_dir, board_dir, dirs)):
        for p in paths:
            with pytest.raises(OutputPathError) as a:
                cli(p, "-o")
            with pytest.raises(DeployError) as b:
                board(p, "-o")
            assert a.value.message == str(b.value) and a.value.exit_code == 2, p
    check_output_path(str(tmp_path / "new.npy"), "-o")
    check_output_dir(str(tmp_path / "a" / "b"), "-o")
