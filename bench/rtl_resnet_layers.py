"""Cycles per ResNet-18 layer (C2-C11, batch 1) on the Verilator simulation of the core at
``pynq``, next to the ideal GEMM cycle count MACs / (BATCH * BLOCK_IN * BLOCK_OUT).

Each layer is the single Conv + bias + ReLU model of ``compiler.zoo.workload_model``,
compiled with ``compile_model`` (calibrated on one random input), run through the executor
on ``RtlDevice`` once to record the programs and once more for the figures (cycles and
counters summed over every launch of the conv step; CPU steps such as quantize excluded).
The output of the conv step is compared with fsim's bit for bit.

Columns: ``cycles`` (the core's CYCLES register, summed over launches), ``ideal``,
``ratio`` = cycles / ideal, ``gemm`` (GEMM micro-ops) and ``gemm/ideal``, then per unit the
busy and stall (waiting for a dependency token) cycles as percentages of ``cycles``, the
number of launches, simulated cycles per wall second, and ``exact``.

Run: ``/work/venv/bin/python bench/rtl_resnet_layers.py [--div N] [LAYER ...]``
(``--div N`` divides the spatial size by N, at least the kernel size; default 1 = full size).
"""

from __future__ import annotations

import argparse
import time
from collections import Counter

import numpy as np

from vtaforge.compiler.compile import compile_model
from vtaforge.compiler.zoo import RESNET18_WORKLOADS, Workload, workload_model
from vtaforge.hw.config import load_config
from vtaforge.runtime.executor import Executor
from vtaforge.runtime.fsim import FsimDevice
from vtaforge.runtime.rtl import RtlDevice

UNITS = ("fetch", "load", "compute", "store")


class CountingRtl(RtlDevice):
    """RtlDevice that sums the stats of every run while ``counting`` is set."""

    counting = False

    def run(self, *a, **kw):
        res = super().run(*a, **kw)
        if self.counting:
            self.totals["launches"] += 1
            self.totals["cycles"] += res.cycles
            for k, v in res.stats.items():
                if isinstance(v, (int, float)) and k != "cycles":
                    self.totals[k] += v
        return res


def _scaled(wl: Workload, div: int) -> Workload:
    if div == 1:
        return wl
    h = max(wl.height // div, wl.kernel_h)
    return Workload(wl.name, 1, h, h, wl.in_channels, wl.out_channels, 1, wl.kernel_h,
                    wl.kernel_w, wl.pad_h, wl.pad_w, wl.stride_h, wl.stride_w)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--config", default="pynq",
                    help="preset name or vta_config.json (e.g. pynq with ALU_REQUANT)")
    ap.add_argument("--div", type=int, default=1)
    ap.add_argument("layers", nargs="*")
    args = ap.parse_args()
    cfg = load_config(args.config)
    wls = [w for w in RESNET18_WORKLOADS[1:] if not args.layers or w.name in args.layers]
    dev = CountingRtl(cfg, 256 << 20, progress=True)
    print(f"{args.config} ({cfg.bitstream_name}, 0x{cfg.fingerprint:08x}), "
          f"spatial size / {args.div}, batch 1, ideal bus")
    hdr = (f"{'layer':<5} {'HxW':>7} {'cycles':>10} {'ideal':>9} {'ratio':>6} {'gemm/id':>7} "
           + " ".join(f"{u[:5] + ' b/s %':>12}" for u in UNITS)
           + f" {'launch':>6} {'Mcyc/s':>6} exact")
    print(hdr)
    tot_c = tot_i = 0
    for wl0 in wls:
        wl = _scaled(wl0, args.div)
        x = np.random.default_rng(0).standard_normal(
            (1, wl.in_channels, wl.height, wl.width)).astype(np.float32)
        cm = compile_model(workload_model(wl, relu=True), x, cfg)
        conv = [s for s in cm.steps if s.op == "qconv2d"][0]
        assert conv.target == "vta", conv.reason
        ex = Executor(cm, dev)
        ex.run(x)                                     # record the programs
        dev.totals = Counter()
        dev.counting = True
        t0 = time.perf_counter()
        out = ex.run(x, keep=True)
        wall = time.perf_counter() - t0
        dev.counting = False
        ex.close()
        ref = Executor(cm, FsimDevice(cfg, mem_bytes=256 << 20)).run(x, keep=True)
        exact = np.array_equal(out[conv.outputs[0]], ref[conv.outputs[0]])
        t = dev.totals
        macs = (wl.out_height * wl.out_width * wl.in_channels * wl.out_channels
                * wl.kernel_h * wl.kernel_w)
        ideal = macs // cfg.macs_per_cycle
        cyc = t["cycles"]
        tot_c += cyc
        tot_i += ideal
        units = " ".join(f"{100 * t[u + '_busy'] / cyc:>5.1f}/{100 * t.get(u + '_stall', 0) / cyc:>5.1f} "
                         .rjust(12) if u != "fetch" else f"{100 * t['fetch_busy'] / cyc:>5.1f}/    - ".rjust(12)
                         for u in UNITS)
        print(f"{wl.name:<5} {wl.height:>3}x{wl.width:<3} {cyc:>10} {ideal:>9} {cyc / ideal:>6.2f} "
              f"{t['gemm_counter'] / ideal:>7.3f} {units} {t['launches']:>6} "
              f"{t['sim_cycles'] / wall / 1e6:>6.2f} {exact}", flush=True)
    print(f"total {'':>7} {tot_c:>10} {tot_i:>9} {tot_c / tot_i:>6.2f}")
    dev.close()


if __name__ == "__main__":
    main()
