"""ResNet-18 (224x224, batch 1) compiled for pynq and run end to end on fsim.

Prints compile wall seconds (aim < 5 s), fsim run wall seconds (anchor: upstream's C++
fsim ~1 s for ResNet-18), totals of instructions / GEMM micro-ops / DRAM bytes, the
device-memory footprint (resident weights, liveness-planned activations vs one buffer per
step and slot, cached programs), whether
every VTA step equals the integer reference bit for bit, and the cosine similarity of the
logits to onnxruntime's float output.  Figures, not a pass/fail test.

Run: ``/work/venv/bin/python bench/compile_resnet18.py [size]``
"""

from __future__ import annotations

import argparse
import sys
import time

import numpy as np
import onnxruntime as ort
from _record import header

from vtaforge.compiler.compile import compile_model
from vtaforge.compiler.reference import run_quantized
from vtaforge.compiler.zoo import resnet18
from vtaforge.runtime.executor import Executor
from vtaforge.runtime.fsim import FsimDevice


def main(argv: list[str]) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("size", nargs="?", type=int, default=224,
                    help="input height and width (default 224)")
    size = ap.parse_args(argv).size
    print(header(__file__), flush=True)
    m = resnet18(size)
    x = np.random.default_rng(0).standard_normal((2, 3, size, size)).astype(np.float32)
    t0 = time.perf_counter()
    cm = compile_model(m, x, "pynq")
    t_all = time.perf_counter() - t0
    # the back half alone (quantization/calibration excluded)
    from vtaforge.compiler.compile import lower_graph
    t0 = time.perf_counter()
    lower_graph(cm.qgraph, cm.partition)
    t_lower = time.perf_counter() - t0
    ex = Executor(cm, FsimDevice(cm.config, mem_bytes=1 << 30))
    t0 = time.perf_counter()
    out = ex.run(x[:1], keep=True)
    t_run1 = time.perf_counter() - t0
    t0 = time.perf_counter()
    ex.run(x[:1])
    t_run2 = time.perf_counter() - t0
    ref = run_quantized(cm.qgraph, {"input": x[:1]}, keep_all=True)
    exact = all(np.array_equal(out[s.outputs[0]], ref[s.outputs[0]])
                for s in cm.steps if s.target == "vta")
    sess = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"])
    fl = sess.run(None, {"input": x[:1]})[0].reshape(-1)
    v = out[cm.outputs[0]].reshape(-1)
    cos = float(fl @ v / np.linalg.norm(fl) / np.linalg.norm(v))
    st = [ex.stats[s.name] for s in cm.steps]
    n_vta = sum(1 for s in cm.steps if s.target == "vta")
    print(f"ResNet-18 {size}x{size}, batch 1, pynq preset, fsim")
    print(f"  compile (import+quantize+partition+lower) : {t_all:.2f} s   (aim < 5 s)")
    print(f"  lowering alone                            : {t_lower:.2f} s")
    print(f"  fsim end to end, first run                : {t_run1:.2f} s   "
          f"(anchor: upstream C++ fsim ~1 s)")
    print(f"  fsim end to end, second run (cached)      : {t_run2:.2f} s")
    print(f"  steps on VTA                              : {n_vta}/{len(cm.steps)}  "
          f"CPU: {[s.name for s in cm.steps if s.target == 'cpu']}")
    print(f"  instructions / GEMM uops / DRAM bytes     : {sum(s.insns for s in st) // 2} / "
          f"{sum(s.gemm_uops for s in st) // 2} / {sum(s.dram_bytes for s in st) // 2}")
    mr = ex.memory_report()
    mib = 1 << 20
    print(f"  device memory: weights/biases (resident)  : {mr['constants'] / mib:.2f} MiB")
    print(f"  device memory: activations, liveness plan : {mr['activations'] / mib:.2f} MiB   "
          f"(one buffer per step and slot: {mr['activations_unshared'] / mib:.2f} MiB; "
          f"most live at one step: {mr['activations_peak_live'] / mib:.2f} MiB)")
    print(f"  device memory: cached programs            : {mr['programs'] / mib:.2f} MiB")
    print(f"  device memory: total                      : {mr['total'] / mib:.2f} MiB   "
          f"(unshared activations: "
          f"{(mr['total'] - mr['activations'] + mr['activations_unshared']) / mib:.2f} MiB)")
    print(f"  bit-exact vs integer reference            : {exact}")
    print(f"  cosine(logits, onnxruntime float)         : {cos:.4f}")


if __name__ == "__main__":
    main(sys.argv[1:])
