"""The texts of a board package: ``verify.py`` (stdlib only), ``run.sh`` (POSIX sh), the
notebook (nbformat 4.5) and the README."""

from __future__ import annotations

from typing import Any

from ._common import PYNQ_VENV

#: The package's ``verify.py``: checks every file against manifest.json (stdlib only).
VERIFY_PY = '''#!/usr/bin/env python3
"""Check this package against manifest.json (sha256 and size of every file) before
anything is installed or run.  Standard library only (vtaforge need not be installed).

    python3 verify.py [PACKAGE_DIR]     exit 0: all files match; 1: one error line
"""
import hashlib
import json
import os
import sys

FORMAT = "vtaforge-board-package"


def sha256(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def verify(root):
    """Return the manifest when every file it lists matches; raise ValueError (one line)."""
    return check(root)[0]


def check(root):
    """(manifest, notes): the manifest when every file in its "files" matches (else
    ValueError, one line); notes name the user files ("user_files": the notebook, the
    README, which Jupyter and the user may save) that changed since packaging."""
    if not os.path.isdir(root):
        raise ValueError("package directory %r does not exist" % root
                         if not os.path.exists(root) else
                         "%r is not a directory (a package is a folder)" % root)
    path = os.path.join(root, "manifest.json")
    if not os.path.exists(path):
        raise ValueError("no manifest.json (not a board package)")
    if not os.path.isfile(path):    # a FIFO would block the open
        raise ValueError("manifest.json is not a regular file")
    if os.path.getsize(path) > (64 << 20):
        raise ValueError("manifest.json is larger than 64 MiB (not a package manifest)")
    try:
        with open(path) as f:
            man = json.load(f)
    except OSError as e:
        raise ValueError("cannot read manifest.json: %s" % (e.strerror or e))
    except RecursionError:
        raise ValueError("manifest.json is nested too deeply (not a package manifest)")
    except ValueError:
        raise ValueError("manifest.json is not valid JSON")
    if not isinstance(man, dict) or man.get("format") != FORMAT:
        raise ValueError("manifest.json is not a vtaforge board package manifest")
    files = man.get("files")
    if not isinstance(files, dict) or not files:
        raise ValueError("manifest.json lists no files")
    # the fields the tools read after verify: malformed ones are refused here, in one line
    cfg = man.get("config")
    if not isinstance(cfg, dict) or not isinstance(cfg.get("fingerprint"), str):
        raise ValueError("manifest.json has no config fingerprint (not a package manifest "
                         "of this version)")
    models = man.get("models", [])
    if not isinstance(models, list) or not all(
            isinstance(m, dict) and isinstance(m.get("name"), str)
            and isinstance(m.get("file"), str) for m in models):
        raise ValueError("manifest.json's models are not a list of {name, file} objects")
    user = man.get("user_files") or {}
    if not isinstance(user, dict) or not all(isinstance(v, dict) for v in user.values()) \
            or not all(isinstance(v, dict) for v in files.values()):
        raise ValueError("manifest.json's files or user_files entries are not "
                         "{size, sha256} objects")
    bad = []
    for rel in sorted(files):
        want = files[rel]
        if os.path.isabs(rel) or ".." in rel.split("/"):
            bad.append("%s (unsafe path)" % rel)
            continue
        p = os.path.join(root, *rel.split("/"))
        if not os.path.isfile(p):
            bad.append("%s (%s)" % (rel, "not a regular file" if os.path.lexists(p)
                                    else "missing"))
            continue
        size = os.path.getsize(p)
        if size != want.get("size"):
            bad.append("%s (%d bytes, manifest says %s)" % (rel, size, want.get("size")))
        elif sha256(p) != want.get("sha256"):
            bad.append("%s (sha256 differs)" % rel)
    notes = []
    for rel in sorted(user):
        p = os.path.join(root, *rel.split("/"))
        if not os.path.isfile(p):
            notes.append("%s (a user file) is missing; the package runs without it" % rel)
        elif sha256(p) != user[rel].get("sha256"):
            notes.append("%s (a user file) changed since packaging; not checked" % rel)
    # unlisted files where the package keeps its own (overlay/, models/, wheel/, and scripts,
    # configs, models at the top) are refused; inputs a user drops beside it, notebooks and
    # what a run leaves (inputs/, results/, .installed, caches) are not
    own = {r.split("/")[0] for r in files if "/" in r}
    kinds = (".sh", ".py", ".json", ".vtapkg", ".bit", ".hwh", ".whl")
    extra = []
    for d in sorted(own):
        for dd, dirs, names in os.walk(os.path.join(root, d)):
            dirs[:] = [x for x in dirs if x not in (".ipynb_checkpoints", "__pycache__")]
            for n in names:
                rel = os.path.relpath(os.path.join(dd, n), root).replace(os.sep, "/")
                if rel not in files:
                    extra.append(rel)
    for n in os.listdir(root):
        if os.path.isfile(os.path.join(root, n)) and n.endswith(kinds) and n not in files \
                and n not in user and n != "manifest.json":
            extra.append(n)
    if extra:
        bad.append("unlisted: " + ", ".join(sorted(extra)))
    if bad:
        raise ValueError("%d of %d files do not match manifest.json: %s"
                         % (len(bad), len(files), ", ".join(bad)))
    return man, notes


def main(argv):
    root = argv[1] if len(argv) > 1 else os.path.dirname(os.path.abspath(__file__))
    try:
        man, notes = check(root)
    except ValueError as e:
        sys.stderr.write("error: verify: %s\\n" % e)
        return 1
    print("verify: %d files match manifest.json (sha256, size); config fingerprint %s"
          % (len(man["files"]), man.get("config", {}).get("fingerprint")))
    for n in notes:
        print("verify: note: " + n)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
'''


#: The commands of ``run.sh`` (verify, install, run), after its settings.
_RUN_SH_COMMANDS = '''die() { echo "error: run.sh: $*" >&2; exit 2; }
abspath() { case "$1" in /*) echo "$1" ;; *) echo "$HERE0/$1" ;; esac; }

do_verify() { "$PY" verify.py; }

# pip install --no-deps brings no dependencies: the image's Python must have these (the
# runner, python -m vtaforge.runtime.board, needs numpy only; the vtaforge CLI also needs click).
do_check_deps() {
  MISSING=$("$PY" -c '
import importlib
missing = []
for m in ("numpy",):
    try:
        importlib.import_module(m)
    except ImportError:
        missing.append(m)
print(" ".join(missing))')
  [ -z "$MISSING" ] || die "$PY lacks $MISSING (pip install --no-deps installs no dependencies): pip install $MISSING"
}

do_install() {
  if [ "${VTAFORGE_SKIP_INSTALL:-}" = 1 ]; then
    echo "run.sh: VTAFORGE_SKIP_INSTALL=1: not installing $WHEEL (test hook)"
    return 0
  fi
  "$PY" -m pip install --no-deps --no-index --force-reinstall --quiet "$WHEEL"
  echo "$WHEEL_SHA $("$PY" -c 'import sys; print(sys.executable)')" > .installed
  "$PY" -c 'import sys, vtaforge; print("run.sh: installed vtaforge", vtaforge.__version__, "for", sys.executable)'
  do_check_deps
}

do_run() {
  MODEL=""; OUT=""; INPUT=""
  while [ $# -gt 0 ]; do
    case "$1" in
      --model) [ $# -ge 2 ] || die "--model needs a name"; MODEL="$2"; shift 2 ;;
      --out) [ $# -ge 2 ] || die "--out needs a folder"; OUT=$(abspath "$2"); shift 2 ;;
      -*) die "unknown option $1 (usage: sh run.sh run [--model NAME] [--out DIR] INPUT.npy)" ;;
      *) [ -z "$INPUT" ] || die "one INPUT.npy only"; INPUT=$(abspath "$1"); shift ;;
    esac
  done
  [ -n "$INPUT" ] || die "usage: sh run.sh run [--model NAME] [--out DIR] INPUT.npy"
  [ -f "$INPUT" ] || die "input $INPUT does not exist"
  if [ -z "$MODEL" ]; then
    set -- $MODELS
    [ $# -eq 1 ] || die "this package has several models ($MODELS): pass --model NAME"
    MODEL="$1"
  fi
  case " $MODELS " in *" $MODEL "*) ;; *) die "no model $MODEL in this package ($MODELS)" ;; esac
  [ -n "$OUT" ] || OUT="$PWD/results/$MODEL"
  do_verify
  INSTALLED=$(cat .installed 2>/dev/null || true)
  if [ "$INSTALLED" != "$WHEEL_SHA $("$PY" -c 'import sys; print(sys.executable)')" ]; then
    do_install
  fi
  do_check_deps
  TARGET="${VTAFORGE_RUN_TARGET:-pynq}"
  if [ "$TARGET" = pynq ]; then
    export VTAFORGE_BITSTREAM="$PWD/overlay/vta.bit"
  else
    echo "run.sh: VTAFORGE_RUN_TARGET=$TARGET: running on $TARGET, not on the board (test hook)"
  fi
  mkdir -p "$OUT"
  rm -f "$OUT/output.npy" "$OUT/stats.json"
  T0=$("$PY" -c 'import time; print(repr(time.time()))')
  set +e
  "$PY" -m vtaforge.runtime.board run --model "models/$MODEL.vtapkg" --input "$INPUT" \\
      --target "$TARGET" --config config.json --output "$OUT/output.npy" >"$OUT/run.log" 2>&1
  RC=$?
  set -e
  T1=$("$PY" -c 'import time; print(repr(time.time()))')
  cat "$OUT/run.log"
  "$PY" -m vtaforge.runtime.board stats --model "models/$MODEL.vtapkg" --config config.json \\
      --input "$INPUT" --output "$OUT/output.npy" --log "$OUT/run.log" --target "$TARGET" \\
      --start "$T0" --end "$T1" --exit-status "$RC" -o "$OUT/stats.json"
  echo "run.sh: $OUT/stats.json"
  exit $RC
}

cmd="${1:-}"
[ $# -gt 0 ] && shift
case "$cmd" in
  verify) do_verify ;;
  install) do_verify; do_install ;;
  run) do_run "$@" ;;
  *) die "usage: sh run.sh verify | install | run [--model NAME] [--out DIR] INPUT.npy" ;;
esac
'''


def run_sh(cfg, wheel_rel: str, wheel_sha: str, models: list[str], version: str) -> str:
    """The package's ``run.sh`` (POSIX sh): ``verify``, ``install`` (the wheel at
    ``wheel_rel``, sha256 ``wheel_sha``) and ``run`` one of ``models`` on an input."""
    models_s = " ".join(models)
    return f'''#!/bin/sh
# Generated by vtaforge {version} (vtaforge board package) for config {cfg.bitstream_name}
# (fingerprint 0x{cfg.fingerprint:08x}).  On the board, in any folder, as root (the pynq
# target maps /dev/mem; PYNQ's venv belongs to root):
#
#   sh run.sh verify            check every file against manifest.json (sha256, size)
#   sh run.sh install           verify, then pip install --no-deps the vtaforge wheel
#   sh run.sh run [--model NAME] [--out DIR] INPUT.npy
#                               verify, install unless this wheel is installed, run NAME
#                               on INPUT.npy: DIR/output.npy, DIR/stats.json, DIR/run.log
#                               (DIR: results/NAME)
#
# Models: {models_s}
# Environment (test hooks, for running this package without a board; unset on a board):
#   VTAFORGE_RUN_TARGET=fsim     run on this vtaforge target instead of pynq
#   VTAFORGE_SKIP_INSTALL=1      do not pip install the wheel (vtaforge is importable)
#   VTAFORGE_PYTHON=PATH         the Python to use (default: python3 of the PYNQ venv)
#   VTAFORGE_PYNQ_VENV=DIR       the venv to activate (default {PYNQ_VENV})
set -e
HERE0=$(pwd)
cd "$(dirname "$0")"
WHEEL="{wheel_rel}"
WHEEL_SHA="{wheel_sha}"
MODELS="{models_s}"
VENV="${{VTAFORGE_PYNQ_VENV:-{PYNQ_VENV}}}"
# PYNQ 3.x: XRT's environment and the venv with the pynq package (if present).
for f in /etc/profile.d/xrt_setup.sh "$VENV/bin/activate"; do
  if [ -f "$f" ]; then . "$f" || true; fi
done
PY="${{VTAFORGE_PYTHON:-python3}}"

''' + _RUN_SH_COMMANDS


def _cell(kind: str, i: int, text: str) -> dict:
    lines = text.strip("\n").split("\n")
    src = [ln + "\n" for ln in lines[:-1]] + [lines[-1]]
    c: dict[str, Any] = {"cell_type": kind, "id": f"vtaforge-{i}", "metadata": {},
                         "source": src}
    if kind == "code":
        c["execution_count"] = None
        c["outputs"] = []
    return c


def notebook(cfg, wheel_rel: str, models: list[str], name: str) -> dict:
    """The package's notebook (nbformat 4.5, plain JSON): the steps of ``run.sh run`` as
    cells, with the Python API (per-step statistics) instead of the CLI."""
    cells = [
        ("markdown", f"""
# vtaforge on PYNQ: `{name}`

Config `{cfg.bitstream_name}` (fingerprint `0x{cfg.fingerprint:08x}`), models: {', '.join(models)}.
The overlay is `overlay/vta.bit` + `overlay/vta.hwh`. Run the cells in order, as root (PYNQ's
Jupyter does): check the files, install the vtaforge wheel into this kernel's Python, run a
model on your input. `sh run.sh run INPUT.npy` does the same from a shell.
After installing a new wheel, restart the kernel if vtaforge was imported before.
"""),
        ("code", f"""
import json, os, subprocess, sys, time
import numpy as np

PACKAGE = os.path.abspath(".")           # this notebook's folder: the package
MODEL = {models[0]!r}                         # one of: {', '.join(models)}
INPUT = "input.npy"                      # your input (.npy, float32, batch first)
OUT = os.path.join("results", "notebook")
WHEEL = {wheel_rel!r}
# Test hook: VTAFORGE_RUN_TARGET=fsim runs on the functional simulator (no board).
TARGET = os.environ.get("VTAFORGE_RUN_TARGET", "pynq")
"""),
        ("code", """
# 1. Verify: every file against manifest.json (sha256, size).
r = subprocess.run([sys.executable, "verify.py"], capture_output=True, text=True)
print(r.stdout + r.stderr)
assert r.returncode == 0, "the package does not match its manifest: copy it again"
"""),
        ("code", """
# 2. Install the wheel (no dependencies: numpy and pynq come with the image).
# Test hook: VTAFORGE_SKIP_INSTALL=1 skips pip (vtaforge already importable).
if os.environ.get("VTAFORGE_SKIP_INSTALL") == "1":
    print("VTAFORGE_SKIP_INSTALL=1: not installing", WHEEL, "(test hook)")
else:
    subprocess.run([sys.executable, "-m", "pip", "install", "--no-deps", "--no-index",
                    "--force-reinstall", "--quiet", WHEEL], check=True)
import vtaforge
print("vtaforge", vtaforge.__version__, "from", os.path.dirname(vtaforge.__file__))
"""),
        ("code", """
# 3. Load the config and the model; open the device (programs the bitstream on pynq).
from vtaforge.hw.config import load_config
from vtaforge.runtime.artifact import load_artifact
from vtaforge.runtime.bundle import make_device
from vtaforge.runtime.executor import Executor

cfg = load_config("config.json")
model = load_artifact(os.path.join("models", MODEL + ".vtapkg"), cfg)
print(model.placement_table())
kw = {"bitstream": os.path.join(PACKAGE, "overlay", "vta.bit")} if TARGET == "pynq" else {}
device = make_device(TARGET, cfg, **kw)
"""),
        ("code", """
# 4. Run the model on INPUT; write OUT/output.npy and OUT/stats.json.
x = np.load(INPUT, allow_pickle=False)
ex = Executor(model, device)
t0 = time.perf_counter()
out = ex.run(x)
wall = time.perf_counter() - t0
y = np.asarray(out[model.outputs[0]], np.float32)
os.makedirs(OUT, exist_ok=True)
np.save(os.path.join(OUT, "output.npy"), y)
vta = [s.name for s in model.steps if s.target == "vta"]
stats = {"model": MODEL, "target": TARGET, "config_fingerprint": "0x%08x" % cfg.fingerprint,
         "input_shape": list(x.shape), "output_shape": list(y.shape),
         "steps": len(model.steps), "steps_on_vta": len(vta), "run_s": wall,
         "per_step": {n: {k: v for k, v in vars(ex.stats[n]).items() if k != "extra"}
                      for n in vta}}
with open(os.path.join(OUT, "stats.json"), "w") as f:
    json.dump(stats, f, indent=2)
print("output", model.outputs[0], list(y.shape), "; %d/%d steps on VTA; %.3f s"
      % (len(vta), len(model.steps), wall))
"""),
    ]
    return {"cells": [_cell(k, i, t) for i, (k, t) in enumerate(cells)],
            "metadata": {"kernelspec": {"display_name": "Python 3", "language": "python",
                                        "name": "python3"},
                         "language_info": {"name": "python"}},
            "nbformat": 4, "nbformat_minor": 5}


def readme(cfg, models: list[str], name: str, board: dict) -> str:
    """The package's README.md: what it is for and how to run it, on the board or with
    ``vtaforge board deploy``."""
    return f"""# Board package `{name}`

For a VTA core with config `{cfg.bitstream_name}` (fingerprint `0x{cfg.fingerprint:08x}`,
{board['title']}, part {board['part']}, {float(cfg.CLOCK_MHZ):g} MHz). Models:
{', '.join(models)}.

On the board (PYNQ 3.x image), as root, in this folder:

    sh run.sh verify                 # every file against manifest.json
    sh run.sh install                # verify + pip install --no-deps wheel/*.whl
    sh run.sh run INPUT.npy          # verify + run: results/MODEL/output.npy, stats.json

or open `vtaforge.ipynb` in PYNQ's Jupyter. From a workstation:
`vtaforge board deploy {name} --host xilinx@BOARD --run INPUT.npy`.
"""
