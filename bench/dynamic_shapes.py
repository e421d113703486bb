"""Dynamic input shapes: the cost of a new H x W against a cached one.

One :func:`~vtaforge.compiler.dynamic.compile_dynamic` per model (import + calibration,
once), then per input size, through a :class:`~vtaforge.runtime.shapes.ShapeRunner` on
fsim:

- ``specialise s``: the compiler's per-shape work (type inference at the shape, quantizer
  rewrite with the frozen exps, partition, lowering with tiling for the shape);
- ``1st run s``: the first run at that shape (the executor instantiates and encodes every
  step's program, allocates the activation buffers, copies the weights it does not share);
- ``cached run s``: later runs at that shape (median of ``REPS``; programs replayed);
- ``static s``: what the old way cost, a full ``compile_model`` at that size (import,
  calibration on the same data, quantization, partition, lowering).

Models: the PyTorch export with dynamic H/W (``tests/compiler/real_models``) at ``tiny``
and ``pynq``, and ResNet-18 (``compiler/zoo.py``, its input dims made symbolic) at
``pynq``.  Figures, not a pass/fail test.

Run: ``.venv/bin/python bench/dynamic_shapes.py [--quick]`` (``--quick``: no ResNet-18).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import numpy as np
from _record import header

from vtaforge.compiler.compile import compile_model
from vtaforge.compiler.dynamic import compile_dynamic
from vtaforge.runtime.fsim import FsimDevice
from vtaforge.runtime.shapes import ShapeRunner

HERE = Path(__file__).resolve().parent.parent / "tests" / "compiler" / "real_models"
REPS = 3


def _symbolic_hw(model):
    """A copy of ``model`` whose first input's dims 2 and 3 are ``H`` and ``W``."""
    import onnx

    m = onnx.ModelProto()
    m.CopyFrom(model)
    dims = m.graph.input[0].type.tensor_type.shape.dim
    for k, p in ((2, "H"), (3, "W")):
        dims[k].ClearField("dim_value")
        dims[k].dim_param = p
    return m


def bench(label: str, model, config: str, calib_hw, sizes, *, n_calib: int = 8,
          mem: int = 256 << 20) -> None:
    rng = np.random.default_rng(0)
    calib = rng.standard_normal((n_calib, 3) + calib_hw).astype(np.float32)
    t0 = time.perf_counter()
    dm = compile_dynamic(model, calib, config)
    t_once = time.perf_counter() - t0
    print(f"\n{label} at {config}: compile_dynamic {t_once:.3f} s once "
          f"(calibrated at {calib_hw[0]}x{calib_hw[1]}, {n_calib} samples)")
    print(f"  {'H x W':>9} {'specialise s':>12} {'1st run s':>10} {'cached run s':>12} "
          f"{'static s':>9} {'VTA steps':>9}")
    with ShapeRunner(dm, FsimDevice(dm.config, mem_bytes=mem)) as warm:   # imports, caches
        warm.run(rng.standard_normal((1, 3) + calib_hw).astype(np.float32))
    dev = FsimDevice(dm.config, mem_bytes=mem)
    with ShapeRunner(dm, dev) as runner:
        for hw in sizes:
            x = rng.standard_normal((1, 3) + hw).astype(np.float32)
            s0 = runner.stats.specialise_seconds
            t0 = time.perf_counter()
            runner.run(x)
            first = time.perf_counter() - t0
            spec = runner.stats.specialise_seconds - s0
            reps = []
            for _ in range(REPS):
                t0 = time.perf_counter()
                runner.run(x)
                reps.append(time.perf_counter() - t0)
            t0 = time.perf_counter()
            compile_model(model, rng.standard_normal((n_calib, 3) + hw).astype(np.float32),
                          config)
            static = time.perf_counter() - t0
            cm = runner.compiled(x)
            nv = sum(1 for s in cm.steps if s.target == "vta")
            print(f"  {hw[0]:>4} x {hw[1]:<3} {spec:>12.3f} {first - spec:>10.3f} "
                  f"{statistics.median(reps):>12.3f} {static:>9.3f} {nv:>4}/{len(cm.steps):<4}")
        st = runner.stats
        mem_r = runner.memory_report()
        print(f"  {st}; packed constants shared across shapes: {mem_r['constants_shared']} "
              f"bytes not copied again")


def main(argv: list[str]) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="skip ResNet-18")
    quick = ap.parse_args(argv).quick
    print(header(__file__), flush=True)
    torch_model = str(HERE / "dynhw_cnn.ts_op17_dynhw.onnx")
    sizes = [(16, 16), (17, 23), (33, 21), (64, 48)]
    bench("dynhw_cnn (PyTorch, dynamic_axes N/H/W)", torch_model, "tiny", (16, 16), sizes)
    bench("dynhw_cnn (PyTorch, dynamic_axes N/H/W)", torch_model, "pynq", (16, 16), sizes)
    if not quick:
        from vtaforge.compiler.zoo import resnet18

        m = _symbolic_hw(resnet18(64))
        bench("ResNet-18 (input N x 3 x H x W)", m, "pynq", (64, 64),
              [(64, 64), (96, 80), (112, 112)], n_calib=2)


if __name__ == "__main__":
    main(sys.argv[1:])
