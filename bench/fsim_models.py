"""fsim speed on real models: per-image host time of a model's VTA steps on fsim vs the
whole model on onnxruntime, single-threaded (issue 21's goal: <= 20x).

For each model (``compiler/models/*.onnx``, the tiny real-exporter models of
``tests/compiler/real_models`` and the zoo's ResNet-18 / MobileNet-v1 at ``--size``
pixels, default 224), compiled for ``pynq`` with the executor on a :class:`~vtaforge.runtime.fsim.FsimDevice`:

- ``ort ms``: onnxruntime (``intra_op_num_threads = inter_op_num_threads = 1``, default
  graph optimizations) per image, the best of ``--reps`` runs after a warm-up (every
  figure is the best of its runs: the least disturbed by other work on the host);
- ``vta ms``: host time per image inside the executor's VTA steps (packing the host's
  inputs, launching the programs, the simulation itself), after a warm-up image (the first
  run of each program decodes and checks it and records its plan; later runs replay it);
- ``sim ms``: of that, the time inside ``FsimDevice.run`` (the simulation alone);
- ``first ms``: the warm-up image's VTA-step time (the plain path: decode, checks and
  data work); ``x ort``: ``vta ms / ort ms``, the figure the goal is about.

``--no-plans`` runs every launch on the plain path (no replay); ``--fsim FILE`` takes
``FsimDevice`` from another copy of ``runtime/fsim.py`` (for before/after figures:
``git show HEAD~3:runtime/fsim.py > /tmp/fsim_old.py``).  Figures, not a pass/fail test.

Run: ``.venv/bin/python bench/fsim_models.py [--reps 5] [--no-plans] [--fsim FILE]
[substring ...]``
"""

from __future__ import annotations

import argparse
import importlib.util
import sys
import time
from pathlib import Path

import numpy as np
import onnxruntime as ort

from vtaforge.compiler import zoo
from vtaforge.compiler.compile import compile_model
from vtaforge.runtime.executor import Executor
from vtaforge.runtime.fsim import FsimDevice

ROOT = Path(__file__).resolve().parent.parent
REAL = ROOT / "tests" / "compiler" / "real_models"


def models(size: int) -> list[tuple[str, object, tuple[int, ...] | None]]:
    """``(name, model (path or ModelProto), input shape without the batch or None: the
    model's)`` per model; the zoo's at ``size`` x ``size`` pixels."""
    out: list[tuple[str, object, tuple[int, ...]]] = []
    for p in sorted((ROOT / "compiler" / "models").glob("*.onnx")):
        out.append((p.stem, str(p), None))
    for f in ("resnet_tiny.ts_op13.onnx", "mobilenetv2_tiny.ts_op13.onnx",
              "mbv3_tiny.ts_op13.onnx"):
        if (REAL / f).exists():
            out.append((f.split(".")[0], str(REAL / f), None))
    out.append((f"resnet18@{size}", zoo.resnet18(size), (3, size, size)))
    out.append((f"mobilenet_v1@{size}", zoo.mobilenet_v1(size), (3, size, size)))
    return out


def _input_shape(sess: ort.InferenceSession) -> tuple[int, ...]:
    shape = sess.get_inputs()[0].shape
    return tuple(int(d) if isinstance(d, int) else 1 for d in shape[1:])


def _device_class(path: str | None):
    """``FsimDevice`` of this tree, or of the fsim module file ``path``."""
    if path is None:
        return FsimDevice
    spec = importlib.util.spec_from_file_location("vtaforge.runtime._fsim_bench", path)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod
    spec.loader.exec_module(mod)
    return mod.FsimDevice


def bench(name: str, model, shape, reps: int, device) -> dict:
    """Time one model; returns the row's figures (milliseconds per image)."""
    so = ort.SessionOptions()
    so.intra_op_num_threads = 1
    so.inter_op_num_threads = 1
    blob = model if isinstance(model, str) else model.SerializeToString()
    sess = ort.InferenceSession(blob, so, providers=["CPUExecutionProvider"])
    shape = shape or _input_shape(sess)
    rng = np.random.default_rng(0)
    xs = rng.normal(0, 1, (reps + 1, 1) + shape).astype(np.float32)
    iname = sess.get_inputs()[0].name
    sess.run(None, {iname: xs[0]})
    t_ort = []
    for x in xs[1:]:
        t0 = time.perf_counter()
        sess.run(None, {iname: x})
        t_ort.append(time.perf_counter() - t0)
    calib = rng.normal(0, 1, (8,) + shape).astype(np.float32)
    cm = compile_model(model, calib, "pynq")
    dev = device(cm.config)
    ex = Executor(cm, dev)
    t_vta = [0.0]
    t_sim = [0.0]
    vta_step, dev_run = ex._vta_step, dev.run

    def timed_step(*a, **k):
        t0 = time.perf_counter()
        try:
            return vta_step(*a, **k)
        finally:
            t_vta[0] += time.perf_counter() - t0

    def timed_run(*a, **k):
        t0 = time.perf_counter()
        try:
            return dev_run(*a, **k)
        finally:
            t_sim[0] += time.perf_counter() - t0

    ex._vta_step = timed_step
    dev.run = timed_run
    ex.run(xs[0])
    first = t_vta[0]
    vta, sim = [], []
    for x in xs[1:]:
        t_vta[0] = t_sim[0] = 0.0
        ex.run(x)
        vta.append(t_vta[0])
        sim.append(t_sim[0])
    ex.close()
    o = min(t_ort)
    v = min(vta)
    nv = sum(s.target == "vta" for s in cm.steps)
    return {"model": name, "vta_steps": nv, "ort_ms": o * 1e3, "vta_ms": v * 1e3,
            "sim_ms": min(sim) * 1e3, "first_ms": first * 1e3,
            "ratio": v / o}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--reps", type=int, default=5, help="timed images per model")
    ap.add_argument("--no-plans", action="store_true",
                    help="no replay: every launch takes fsim's plain path")
    ap.add_argument("--size", type=int, default=224, help="the zoo models' input size")
    ap.add_argument("--fsim", metavar="FILE", help="an fsim module file to take FsimDevice from")
    ap.add_argument("pick", nargs="*", help="substrings of model names to run")
    args = ap.parse_args()
    cls = _device_class(args.fsim)
    device = (lambda cfg: cls(cfg, plans=False)) if args.no_plans else cls
    print(f"fsim (pynq) VTA steps vs onnxruntime single-thread, per image, "
          f"{'plain path' if args.no_plans else 'replay'}{' (' + args.fsim + ')' if args.fsim else ''}"
          f"; best of {args.reps}")
    print(f"{'model':<18} {'steps':>5} {'ort ms':>8} {'vta ms':>9} {'sim ms':>9} "
          f"{'first ms':>9} {'x ort':>7}")
    for name, model, shape in models(args.size):
        if args.pick and not any(p in name for p in args.pick):
            continue
        r = bench(name, model, shape, args.reps, device)
        print(f"{r['model']:<18} {r['vta_steps']:>5d} {r['ort_ms']:>8.3f} {r['vta_ms']:>9.2f} "
              f"{r['sim_ms']:>9.2f} {r['first_ms']:>9.1f} {r['ratio']:>7.1f}", flush=True)


if __name__ == "__main__":
    main()
