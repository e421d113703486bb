"""Bad input through the CLI: one ``error:`` line, exit status 2, nothing written wrongly.

Cases found in a review of the installed CLI (each failed before its fix: internal errors,
silently garbage models, outputs written under another name).
"""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest
from vtaforge.compiler.models import DIGITS_ONNX
from vtaforge.runtime.bundle import save_bundle


def _run(*args: str, pre: str = "") -> subprocess.CompletedProcess:
    code = f"{pre}\nfrom vtaforge.cli import main\nmain({list(args)!r})"
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=120)


def _error(r: subprocess.CompletedProcess, pattern: str) -> None:
    assert r.returncode == 2, (r.returncode, r.stderr)
    lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: "), r.stderr
    assert "internal error" not in lines[0] and pattern in lines[0], lines[0]


@pytest.fixture(scope="module")
def digits_inputs(tmp_path_factory):
    d = tmp_path_factory.mktemp("inputs")
    x = np.random.default_rng(0).random((4, 1, 8, 8), dtype=np.float32)
    np.save(d / "x.npy", x)
    bad = x.copy()
    bad[1, 0, 2, 3] = np.nan
    np.save(d / "nan.npy", bad)
    bad = x.copy()
    bad[0, 0, 0, 0] = np.inf
    np.save(d / "inf.npy", bad)
    np.save(d / "empty.npy", np.zeros((0, 1, 8, 8), np.float32))
    return d


def _finish_only_bundle(path, insn_addr, insn_count):
    save_bundle(path, np.zeros(64, np.uint8), 0, 1)
    with np.load(path) as z:
        dram = z["dram"]
    np.savez(path, dram=dram, insn_addr=insn_addr, insn_count=insn_count)


@pytest.mark.parametrize("addr,count", [(np.uint64(2**64 - 1), np.int64(1)),
                                        (np.int64(0), np.uint64(2**64 - 1)),
                                        (np.int64(2**62), np.int64(2**60))])
def test_exec_huge_insn_location_is_a_program_error(tmp_path, addr, count):
    b = tmp_path / "b.npz"
    _finish_only_bundle(b, addr, count)
    _error(_run("exec", str(b)), "instruction fetch")


def test_exec_output_written_to_the_exact_path(tmp_path):
    from vtaforge.hw.isa import Insn, Opcode, encode_program
    from vtaforge.hw.config import preset

    dram = np.zeros(64, np.uint8)
    dram[16:32] = encode_program(preset("pynq"), [Insn(Opcode.FINISH)]).reshape(-1)
    b = tmp_path / "b.npz"
    save_bundle(b, dram, 16, 1)
    out = tmp_path / "final.bin"
    r = _run("exec", str(b), "-o", str(out))
    assert r.returncode == 0, r.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["b.npz", "final.bin"]
    with np.load(out) as z:
        assert np.array_equal(z["dram"], dram)


@pytest.mark.parametrize("name", ["nan.npy", "inf.npy"])
def test_run_rejects_non_finite_input(digits_inputs, tmp_path, name):
    # calibrated on clean data, so the input check itself is what refuses
    r = _run("run", "--model", str(DIGITS_ONNX), "--input", str(digits_inputs / name),
             "--calibrate", str(digits_inputs / "x.npy"), "--output", str(tmp_path / "y.npy"))
    _error(r, "NaN or infinity")
    assert not (tmp_path / "y.npy").exists()


@pytest.mark.parametrize("name,pattern", [("nan.npy", "NaN or infinity"),
                                          ("inf.npy", "NaN or infinity"),
                                          ("empty.npy", "no samples")])
def test_compile_rejects_bad_calibration(digits_inputs, tmp_path, name, pattern):
    out = tmp_path / "m.vtapkg"
    out.write_bytes(b"keep")
    r = _run("compile", str(DIGITS_ONNX), "-o", str(out), "--calibrate",
             str(digits_inputs / name))
    _error(r, pattern)
    assert out.read_bytes() == b"keep"


def test_run_output_written_to_the_exact_path(digits_inputs, tmp_path):
    out = tmp_path / "logits"
    r = _run("run", "--model", str(DIGITS_ONNX), "--input", str(digits_inputs / "x.npy"),
             "--output", str(out))
    assert r.returncode == 0, r.stderr
    assert [p.name for p in tmp_path.iterdir()] == ["logits"]
    assert np.load(out).shape == (4, 10)


def test_run_calibrate_with_artifact_is_refused(digits_inputs, tmp_path):
    pkg = tmp_path / "m.vtapkg"
    r = _run("compile", str(DIGITS_ONNX), "-o", str(pkg), "--calibrate",
             str(digits_inputs / "x.npy"))
    assert r.returncode == 0, r.stderr
    r = _run("run", "--model", str(pkg), "--input", str(digits_inputs / "x.npy"),
             "--calibrate", str(digits_inputs / "x.npy"))
    _error(r, "--calibrate applies to ONNX models")


@pytest.mark.parametrize("name", ["bad name", "", "../up", "1abc"])
def test_hw_verilog_bad_module_name(tmp_path, name):
    out = tmp_path / "rtl"
    _error(_run("hw", "verilog", "--config", "tiny", "-o", str(out), "--name", name),
           "Verilog identifier")
    assert not out.exists()


def test_hw_verilog_without_the_hw_extra(tmp_path):
    pre = "import sys; sys.modules['amaranth'] = None"  # as if not installed
    _error(_run("hw", "verilog", "--config", "tiny", "-o", str(tmp_path / "rtl"), pre=pre),
           "vtaforge[hw]")


def test_board_timing_binary_file(tmp_path):
    p = tmp_path / "r.rpt"
    p.write_bytes(bytes(range(256)) * 4)
    _error(_run("board", "timing", str(p)), "not a text file")


@pytest.mark.parametrize("args, pattern", [
    (["--within", "nan"], "--within nan must be a finite percentage"),
    (["--within", "inf"], "--within inf must be a finite percentage"),
    (["--jobs", "1000000"], "is not in the range 0<=x<=256"),
])
def test_dse_run_refuses_before_the_sweep(args, pattern, tmp_path):
    """Found in review: --within nan failed after the whole sweep with an internal error;
    --jobs 1000000 hung starting a LocalCluster.  Both are refused before any evaluation."""
    out = tmp_path / "r.json"
    r = _run("dse", "run", "--board", "pynq-z2", "--workloads", "resnet18-c2", "--size", "7",
             "--no-progress", "-o", str(out), *args)
    _error(r, pattern)
    assert not out.exists()


def test_dse_plot_without_matplotlib_refused_up_front(tmp_path):
    """Found in review: --plot without matplotlib failed after the sweep, leaving the report
    and the cache behind."""
    out = tmp_path / "r.json"
    block = "import sys\nsys.modules['matplotlib'] = None"    # import matplotlib fails
    r = _run("dse", "run", "--board", "pynq-z2", "--workloads", "resnet18-c2", "--size", "7",
             "--no-progress", "-o", str(out), "--plot", str(tmp_path / "p.png"), pre=block)
    _error(r, "--plot needs matplotlib")
    assert not out.exists() and not list(tmp_path.glob("*.jsonl"))


# ---------------------------------------------------------------------------------------
# Issue 22, items 2 and 8: decode and size errors of every input file are one line naming
# the file and the cause (each was an internal error, exit 3, or a misleading message).
# In process (CliRunner), on the files of the bad-input sweep (tests/support/bad_inputs.py).

@pytest.fixture(scope="module")
def bad(tmp_path_factory):
    from bad_inputs import make_files

    return make_files(tmp_path_factory.mktemp("bad"))


def _invoke(*args: str):
    from click.testing import CliRunner
    from vtaforge.cli import main

    return CliRunner().invoke(main, [str(a) for a in args])


def _line(r, *needles: str) -> str:
    assert r.exit_code == 2, (r.exit_code, r.output, r.exception)
    lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: "), r.stderr
    line = lines[0]
    assert "internal error" not in line and "allow_pickle" not in line, line
    for n in needles:
        assert n in line, (n, line)
    return line


def test_corrupt_npz_bad_crc(bad):
    _line(_invoke("run", "--model", DIGITS_ONNX, "--input", bad["crc_npz"]),
          "input '", "crc.npz' is damaged: member 'input': Bad CRC-32")
    _line(_invoke("exec", bad["crc_bundle_npz"]), "crc_bundle.npz' is damaged", "Bad CRC-32")


@pytest.mark.parametrize("name", ["huge_npy", "huge_npz"])
def test_one_tib_array_refused_by_its_declared_size(bad, name, monkeypatch):
    # the refusal comes from the header: reading the data would need the terabyte
    def no_read(*a, **k):
        raise AssertionError("the array was read before its declared size was checked")

    monkeypatch.setattr(np.lib.format, "read_array", no_read)
    _line(_invoke("run", "--model", DIGITS_ONNX, "--input", bad[name]),
          "declares [274877906944] float32 (1.0 TiB)")
    _line(_invoke("disasm", bad["huge_npy"]), "huge.npy", "1.0 TiB")
    _line(_invoke("exec", bad["huge_dram_npz"]), "member 'dram'", "2.0 TiB")


def test_truncated_inputs(bad):
    _line(_invoke("run", "--model", DIGITS_ONNX, "--input", bad["trunc_npz"]),
          "trunc.npz' is not an .npz archive (damaged zip")
    _line(_invoke("run", "--model", DIGITS_ONNX, "--input", bad["trunc_npy"]),
          "trunc.npy' is damaged: declares [4, 1, 8, 8] float32", "(truncated?)")


@pytest.mark.parametrize("cmd", [["config", "show"], ["hw", "verilog", "-o", "unused",
                                                      "--config"]])
def test_config_json_not_utf8_or_too_deep(bad, cmd):
    _line(_invoke(*cmd, bad["nonutf8_json"]), "nonutf8.json' is not a text file",
          "byte 0xff at offset 12")
    _line(_invoke(*cmd, bad["deep_json"]), "deep.json' is nested too deeply to parse")


def test_custom_domain_op_refused_naming_the_node(bad, tmp_path):
    for args in (["run", "--model", bad["custom_named_onnx"], "--input", bad["x14_npy"]],
                 ["compile", bad["custom_named_onnx"], "-o", tmp_path / "m.vtapkg"]):
        _line(_invoke(*args), "custom_named.onnx': node 'bar0' (Bar) is in operator domain "
              "'org.acme', which neither vtaforge nor onnxruntime implements")
    assert not (tmp_path / "m.vtapkg").exists()


def test_gather_index_out_of_range(bad):
    # calibrating on the input runs the float model on it: the refusal names the data
    _line(_invoke("run", "--model", bad["gather_onnx"], "--input", bad["idx_bad_npy"]),
          "gather.onnx' cannot run on input '", "idx_bad.npy'", "index out of range [-4, 4)")
    # calibrated on good indices: the executor's CPU step refuses the bad ones
    _line(_invoke("run", "--model", bad["gather_onnx"], "--input", bad["idx_bad_npy"],
                  "--calibrate", bad["idx_ok_npy"]), "Gather", "index out of range [-4, 4)")


def test_disasm_insn_addr_past_the_end(bad):
    line = _line(_invoke("disasm", bad["prog_npy"], "--insn-addr", "1600"),
                 "insn_addr = 1600 is past the end of its 160 bytes")
    assert "negative" not in line


@pytest.mark.parametrize("bit,needle", [("missing", "does not exist"),
                                        ("empty", "is an empty file, not a Vivado .bit")])
def test_board_package_bitstream_named_not_its_hwh(bad, tmp_path, bit, needle):
    path = tmp_path / "nope.bit" if bit == "missing" else bad["empty_bit"]
    line = _line(_invoke("board", "package", "--config", "pynq", "--bitstream", path,
                         "--model", bad["garbage_vtapkg"], "-o", tmp_path / "pkg"),
                 f"--bitstream '{path}' {needle}")
    assert ".hwh" not in line


@pytest.mark.parametrize("cmd", ["run", "compile"])
def test_one_array_for_a_two_input_model_names_the_inputs(bad, tmp_path, cmd):
    args = (["run", "--model", bad["two_onnx"], "--input", bad["two_npz"]] if cmd == "run"
            else ["compile", bad["two_onnx"], "-o", tmp_path / "m.vtapkg"])
    line = _line(_invoke(*args, "--calibrate", bad["x14_npy"]),
                 "calibration data '", "x14.npy' is one array, but the model has 2 inputs "
                 "(a, b): give a .npz with one array per input, named a, b")
    assert "must be a dict" not in line
    _line(_invoke("run", "--model", bad["two_onnx"], "--input", bad["x14_npy"]),
          "input '", "x14.npy' is one array, but the model has 2 inputs (a, b)")


@pytest.mark.parametrize("name,needle", [
    ("strblock_json", "LOG_BLOCK = '4' must be an integer in 1..7"),
    ("strout_json", "LOG_OUT_WIDTH = '3' must be an integer equal to LOG_INP_WIDTH"),
    ("strint_json", "LOG_BATCH = '1' must be an integer in 0..4"),
    ("strclock_json", "CLOCK_MHZ = '100' must be a number"),
])
def test_config_type_errors_name_the_type(bad, name, needle):
    line = _line(_invoke("config", "show", bad[name]), needle)
    assert "out of range" not in line


@pytest.mark.parametrize("name,needle", [
    ("text_txt", "is neither a .npy array nor a .npz archive"),
    ("obj_npy", "holds Python objects (dtype object)"),
    ("obj_npz", "holds Python objects (dtype object)"),
])
def test_no_allow_pickle_advice(bad, name, needle):
    for cmd in (["run", "--model", DIGITS_ONNX, "--input"], ["disasm"]):
        line = _line(_invoke(*cmd, bad[name]))
        assert "pickle" not in line.lower(), line
    _line(_invoke("run", "--model", DIGITS_ONNX, "--input", bad[name]), needle)


def test_exec_trace_path_checked_before_the_run(bad, monkeypatch):
    import vtaforge.runtime.bundle as rb

    def must_not_run(*a, **k):
        raise AssertionError("the run started before --trace was checked")

    monkeypatch.setattr(rb, "run_raw", must_not_run)
    _line(_invoke("exec", bad["ok_npz"], "--target", "rtl", "--trace", "/nonexistent/dir/t.vcd"),
          "--trace '/nonexistent/dir/t.vcd': directory '/nonexistent/dir' does not exist")


def test_output_in_a_missing_directory_fails_before_compiling(monkeypatch):
    import vtaforge.compiler.compile as cc

    def must_not_run(*a, **k):
        raise AssertionError("compiled before --output was checked")

    monkeypatch.setattr(cc, "compile_model", must_not_run)
    _line(_invoke("run", "--model", DIGITS_ONNX, "--input", "/nonexistent/x.npy", "--output",
                  "/nonexistent/dir/y.npy"), "--output '/nonexistent/dir/y.npy': directory")
