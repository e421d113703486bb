"""ResNet-18 C2-C11 (full size, batch 1, pynq) lowered and run on fsim, one by one.

Per layer: tiling (output blocks, input blocks per step, rows, cols, virtual threads,
resident weights), GEMM micro-ops executed vs ideal (MACs / (BATCH*BLOCK_IN*BLOCK_OUT)),
DRAM bytes moved by the core vs the minimum (input + weights + bias + output once each),
instructions, wall seconds of the run, and bit-exactness against a numpy integer conv.

Run: ``/work/venv/bin/python bench/resnet18_layers.py``
"""

from __future__ import annotations

import argparse
import sys
import time

import numpy as np
from _record import header

from vtaforge.compiler.compile import lower_graph
from vtaforge.compiler.partition import partition
from vtaforge.compiler.quantize import quantize
from vtaforge.compiler.onnx_frontend import import_onnx
from vtaforge.compiler.reference import run_quantized
from vtaforge.compiler.zoo import RESNET18_WORKLOADS, workload_model
from vtaforge.hw.config import preset
from vtaforge.runtime.executor import Executor
from vtaforge.runtime.fsim import FsimDevice


def main(argv: list[str]) -> None:
    argparse.ArgumentParser(description=__doc__.splitlines()[0]).parse_args(argv)
    print(header(__file__), flush=True)
    cfg = preset("pynq")
    print(f"{'layer':<5} {'tiling obn/ibn/th/tw/vt/res':<28} {'GEMM uops':>10} {'ideal':>10} "
          f"{'ratio':>6} {'DRAM B':>10} {'min B':>10} {'ratio':>6} {'insns':>6} {'run s':>6} exact")
    for wl in RESNET18_WORKLOADS[1:]:
        m = workload_model(wl, relu=True)
        x = np.random.default_rng(0).standard_normal(
            (1, wl.in_channels, wl.height, wl.width)).astype(np.float32)
        q = quantize(import_onnx(m), x)
        cm = lower_graph(q, partition(q, cfg))
        ex = Executor(cm, FsimDevice(cfg, mem_bytes=1 << 28))
        ex.run(x)                                  # warm the kernel cache
        for s in ex.stats.values():
            s.__init__()
        t0 = time.perf_counter()
        out = ex.run(x, keep=True)
        dt = time.perf_counter() - t0
        ref = run_quantized(q, {"input": x}, keep_all=True)
        conv = [s for s in cm.steps if s.op == "qconv2d"][0]
        st = ex.stats[conv.name]
        ts = conv.trace.stats
        macs = (wl.out_height * wl.out_width * wl.in_channels * wl.out_channels
                * wl.kernel_h * wl.kernel_w)
        ideal = macs // cfg.macs_per_cycle
        mn = ts["min_dram_bytes"]
        ok = np.array_equal(out[conv.outputs[0]], ref[conv.outputs[0]])
        til = "/".join(str(v) for v in ts["tiling"])
        print(f"{wl.name:<5} {til:<28} {st.gemm_uops:>10} {ideal:>10} {st.gemm_uops / ideal:>6.3f} "
              f"{st.dram_bytes:>10} {mn:>10} {st.dram_bytes / mn:>6.3f} {st.insns:>6} "
              f"{dt:>6.3f} {ok}")


if __name__ == "__main__":
    main(sys.argv[1:])
