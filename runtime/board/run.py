"""The board side: run a compiled model (:func:`run_model`), its statistics
(:func:`run_stats`) and the command line ``python -m vtaforge.runtime.board`` that
``run.sh`` calls (:func:`main`).  Needs numpy only: no click, no compiler."""

from __future__ import annotations

import math
import os
import re
import stat
import sys
import time
from pathlib import Path
from typing import Any, Callable, Sequence

from ... import __version__
from ...hw.config import ConfigError, load_config
from ..artifact import ArtifactError, load_artifact
from ..device import DeviceError
from ._common import DeployError, _first_line, _write_json, check_output_file
from .package import verify_package

#: The end of a run log that ``stats`` reads (its summary and ``error:`` lines are last).
_LOG_TAIL_BYTES = 1 << 20

_SUMMARY = re.compile(r"sample\(s\) on \S+ \(.*?\) in ([0-9.]+) s; (\d+)/(\d+) steps on VTA, "
                      r"([0-9.]+) s in CPU steps")


def run_stats(*, model: str, config: str, input: str, output: str, log: str | None,
              target: str, start: float, end: float, exit_status: int) -> dict[str, Any]:
    """The statistics of one ``vtaforge run`` on the board (``run.sh`` writes them as
    ``stats.json``): model, target, config fingerprint, input and output shapes, steps
    (on VTA / all), ``wall_s`` (the ``vtaforge run`` process, start to exit), ``run_s`` and
    ``cpu_steps_s`` (from its summary line), the exit status and its ``error:`` line."""
    import platform

    import numpy as np


    d: dict[str, Any] = {"model": Path(model).stem, "model_file": model, "target": target,
                         "test_hook": None if target == "pynq" else
                         f"VTAFORGE_RUN_TARGET={target}",
                         "exit_status": int(exit_status), "error": None,
                         "wall_s": round(float(end) - float(start), 6)}
    try:
        for what, path in (("config", config), ("model", model)):
            if Path(path).exists() and not _regular_file(path) and not Path(path).is_dir():
                raise DeployError(f"{what} {path!r} is not a regular file (a FIFO or a device)")
        cfg = load_config(config)
        d["config_fingerprint"] = f"0x{cfg.fingerprint:08x}"
        d["bitstream_name"] = cfg.bitstream_name
        cm = load_artifact(model, cfg)
        vta = [s.name for s in cm.steps if s.target == "vta"]
        d.update(model_name=cm.name, steps=len(cm.steps), steps_on_vta=len(vta),
                 vta_steps=vta)
    except Exception as e:  # noqa: BLE001 - statistics of a failed run still get written
        d["error"] = f"error: {_first_line(str(e))}"
    for key, path in (("input", input), ("output", output)):
        d[key] = path
        d[f"{key}_shape"] = d[f"{key}_dtype"] = None
        if not _regular_file(path):     # a FIFO would block np.load
            continue
        try:
            a = np.load(path, mmap_mode="r", allow_pickle=False)
            d[f"{key}_shape"], d[f"{key}_dtype"] = list(a.shape), str(a.dtype)
        except (OSError, ValueError, EOFError):
            pass
    text = ""
    if log and _regular_file(log):
        try:
            with open(log, "rb") as f:      # the summary and error lines are at the end
                f.seek(max(0, os.fstat(f.fileno()).st_size - _LOG_TAIL_BYTES))
                text = f.read().decode(errors="replace")
        except OSError:
            pass
    m = _SUMMARY.search(text)
    d["run_s"] = float(m.group(1)) if m else None
    d["cpu_steps_s"] = float(m.group(4)) if m else None
    errs = [ln.strip() for ln in text.splitlines() if ln.strip().startswith("error:")]
    if errs:
        d["error"] = errs[-1]
    d.update(host=platform.node(), machine=platform.machine(),
             python=platform.python_version(), vtaforge=__version__,
             finished_at=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(float(end)))
             if math.isfinite(float(end)) and abs(float(end)) < 1e11 else None)
    return d


def _regular_file(path: str) -> bool:
    try:
        return stat.S_ISREG(os.stat(path).st_mode)
    except (OSError, ValueError):
        return False


def run_model(*, model: str, input: str, config: str, target: str = "pynq",
              output: str | None = None, echo: Callable[[str], None] = print) -> None:
    """Run a ``.vtapkg`` on one input: what ``vtaforge run --model M.vtapkg --input X
    --config C --target T --output Y`` does, without click (the board's Python may lack
    it: ``run.sh`` calls this through ``python -m vtaforge.runtime.board run``).  It prints the
    same placement table and summary line (``run_stats`` reads it), on ``rtl``/``pynq``
    the core cycles per VTA step, and writes the first output (float32) to ``output``.

    Raises:
        DeployError: an unreadable input; an ``output`` that cannot be written (checked
            before anything runs); the runtime's errors (ConfigError, ArtifactError,
            DeviceError) pass through.
    """
    import numpy as np

    from ..bundle import make_device
    from ..executor import Executor

    if output is not None:
        check_output_file(output, "--output")
    from ..npz import load_array

    cfg = load_config(config)
    cm = load_artifact(model, cfg)
    x = load_array(input, "input", DeployError)    # headers checked, FIFOs refused
    if isinstance(x, dict):
        extra = [k for k in x if k not in cm.inputs]
        if extra:
            raise DeployError(f"input {input!r} has unknown input(s) {extra}; the model's "
                              f"inputs: {list(cm.inputs)}")
    echo("placement:")
    echo(cm.placement_table())
    ex = Executor(cm, make_device(target, cfg))
    vals = list(x.values()) if isinstance(x, dict) else [x]
    ns = {int(np.shape(v)[0]) if np.ndim(v) else None for v in vals}
    n = ns.pop() if len(ns) == 1 else None
    shape = cm.types[cm.inputs[0]][1]
    b = shape[0] if shape and isinstance(shape[0], int) else None
    t0 = time.perf_counter()
    if not isinstance(b, int) or b < 1 or not n or n == b or n % b:
        out = ex.run(x)
    else:  # a fixed model batch: b samples at a time, outputs concatenated
        outs = [ex.run({k: v[i:i + b] for k, v in x.items()} if isinstance(x, dict)
                       else x[i:i + b]) for i in range(0, n, b)]
        out = {k: np.concatenate([o[k] for o in outs]) for k in outs[0]}
    dt = time.perf_counter() - t0
    host = sum(st.host_seconds for st in ex.stats.values())
    y = np.asarray(out[cm.outputs[0]], np.float32)
    if output is not None:
        tmp = Path(output).with_name(f".{Path(output).name}.tmp")
        with open(tmp, "wb") as f:
            np.save(f, y)
        os.replace(tmp, output)
    vta = [s for s in cm.steps if s.target == "vta"]
    nsamp = n if n is not None else 1
    echo(f"{cm.name}: {nsamp} sample(s) on {target} ({cfg.bitstream_name}) in {dt:.2f} s; "
         f"{len(vta)}/{len(cm.steps)} steps on VTA, {host:.3f} s in CPU steps; output "
         f"{cm.outputs[0]} {list(y.shape)}" + (f" -> {output}" if output else ""))
    if target in ("rtl", "pynq"):  # the lines of vtaforge run (commands.profile, which needs click)
        total = sum(int(ex.stats[s.name].cycles) for s in vta)
        w = max((len(s.name) for s in vta), default=4)
        echo(f"core cycles: {total} in {len(vta)} VTA step(s)")
        for s in vta:
            c = int(ex.stats[s.name].cycles)
            echo(f"  {s.name:<{w}}  {c:>10}  " + (f"{100 * c / total:4.0f}%" if total else "   - "))


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m vtaforge.runtime.board run ...`` and ``stats ... -o STATS.json`` (what
    ``run.sh`` calls: no click) and ``python -m vtaforge.runtime.board verify PACKAGE_DIR``."""
    import argparse

    class _Parser(argparse.ArgumentParser):
        """Usage errors as one ``error:`` line, exit status 2 (run.sh's logs and stats
        take the last ``error:`` line)."""

        def error(self, message):
            self.exit(2, f"error: {self.prog}: {message} (--help for the usage)\n")

    def _seconds(text: str) -> float:
        v = float(text)
        if not math.isfinite(v):
            raise ValueError(text)
        return v

    _seconds.__name__ = "finite number of seconds"
    ap = _Parser(prog="python -m vtaforge.runtime.board")
    sub = ap.add_subparsers(dest="cmd", required=True)
    s = sub.add_parser("stats", help="write the statistics of a vtaforge run")
    for k in ("--model", "--config", "--input", "--output", "--target", "-o"):
        s.add_argument(k, required=True)
    s.add_argument("--log")
    s.add_argument("--start", type=_seconds, required=True)
    s.add_argument("--end", type=_seconds, required=True)
    s.add_argument("--exit-status", type=int, default=0)
    v = sub.add_parser("verify", help="check a package against its manifest")
    v.add_argument("package")
    r = sub.add_parser("run", help="run a .vtapkg on an input (vtaforge run, without click)")
    for k in ("--model", "--input", "--config"):
        r.add_argument(k, required=True)
    r.add_argument("--target", default="pynq")
    r.add_argument("--output")
    a = ap.parse_args(argv)
    if a.cmd == "run":
        try:
            run_model(model=a.model, input=a.input, config=a.config, target=a.target,
                      output=a.output)
        except (DeployError, ConfigError, ArtifactError, DeviceError, OSError,
                ValueError) as e:
            if os.environ.get("VTAFORGE_DEBUG") == "1":
                raise
            print(f"error: {_first_line(str(e))}", file=sys.stderr)
            return 2
        return 0
    try:
        if a.cmd == "verify":
            verify_package(a.package)
            print(f"verify: {a.package}: every file matches manifest.json")
            return 0
        check_output_file(a.o, "-o")
        d = run_stats(model=a.model, config=a.config, input=a.input, output=a.output,
                      log=a.log, target=a.target, start=a.start, end=a.end,
                      exit_status=a.exit_status)
        _write_json(Path(a.o), d)
    except (DeployError, OSError) as e:
        print(f"error: {_first_line(str(e))}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
