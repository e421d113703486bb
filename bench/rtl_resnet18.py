"""ResNet-18 (or MobileNet-v1: ``--model mobilenet_v1``) whole network (batch 1, ``pynq``
or ``--config``) on the Verilator simulation of the core: cycles per VTA step beside its
bound, and the totals.

The model is ``compiler.zoo.resnet18(size)`` compiled with ``compile_model`` (calibrated on
one seeded N(0,1) input), run through the executor on ``RtlDevice`` once to record the
programs and once more for the figures.  Every VTA step's output is compared with fsim's
bit for bit.

Bound per step: convs ``max(MACs / (BATCH*BLOCK_IN*BLOCK_OUT), min DRAM bytes / bus
bytes)``; pooling and element-wise steps ``min DRAM bytes / bus bytes`` (each operand read
and the output written once, at the bus width per cycle).

Run: ``.venv/bin/python bench/rtl_resnet18.py [--size 224] [--steps] [--config FILE]
[--model mobilenet_v1] [--latency 40,60] [--per-channel auto|on|off] [--fuse]`` (``--steps``
prints every step, otherwise one line per op kind; ``--latency`` sets the DRAM model's
random first-beat latency per burst; ``--fuse`` runs each run of consecutive VTA steps as
one launch, ``Executor(fuse=True)``, and reports the total).
"""

from __future__ import annotations

import argparse
import time
from collections import defaultdict

import numpy as np
from _record import header

from vtaforge.compiler.compile import compile_model
from vtaforge.compiler.quantize import QuantConfig
from vtaforge.compiler.zoo import mobilenet_v1, resnet18
from vtaforge.hw.config import load_config
from vtaforge.runtime.executor import Executor
from vtaforge.runtime.fsim import FsimDevice
from vtaforge.runtime.rtl import RtlDevice


class RecordingRtl(RtlDevice):
    """RtlDevice that records the cycles of every run while ``recording`` is set."""

    recording = False

    def run(self, *a, **kw):
        res = super().run(*a, **kw)
        if self.recording:
            self.log.append(res.cycles)
        return res


def step_bound(cfg, step) -> tuple[int, int]:
    """``(ideal MAC cycles, bound cycles)`` of one VTA step (batch 1): ``Step.bounds``."""
    ideal, mem = step.bounds(cfg)
    return ideal, max(ideal, mem)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--config", default="pynq",
                    help="preset name or vta_config.json (e.g. pynq with ALU_REQUANT)")
    ap.add_argument("--size", type=int, default=224)
    ap.add_argument("--steps", action="store_true")
    ap.add_argument("--model", choices=["resnet18", "mobilenet_v1"], default="resnet18")
    ap.add_argument("--latency", default="0,0", metavar="MIN,MAX",
                    help="DRAM model's random first-beat latency per burst, cycles "
                         "(board-like: 40,60; default 0,0 = ideal bus)")
    ap.add_argument("--per-channel", choices=["auto", "on", "off"], default=None,
                    help="QuantConfig.per_channel for compile_model's default quantization "
                         "(default: compile_model's own)")
    ap.add_argument("--fuse", action="store_true",
                    help="Executor(fuse=True): each run of consecutive VTA steps is one "
                         "launch (per-step cycles then are per launch: the totals only)")
    args = ap.parse_args()
    print(header(__file__), flush=True)
    lat = tuple(int(v) for v in args.latency.split(","))
    bus = "ideal bus" if lat == (0, 0) else f"DRAM latency {lat[0]}-{lat[1]} cycles per burst"
    cfg = load_config(args.config)
    x = np.random.default_rng(0).standard_normal((1, 3, args.size, args.size)).astype(np.float32)
    t0 = time.perf_counter()
    build = {"resnet18": resnet18, "mobilenet_v1": mobilenet_v1}[args.model]
    qc = None
    if args.per_channel is not None:
        qc = QuantConfig(exact_multiply=bool(cfg.ALU_MUL), calibration="mse",
                         min_layer_cosine=0.99, bias_correction=True,
                         per_channel=args.per_channel)
    cm = compile_model(build(args.size), x, cfg, quant_config=qc)
    tc = time.perf_counter() - t0
    vta = [s for s in cm.steps if s.target == "vta"]
    dev = RecordingRtl(cfg, 512 << 20, progress=False, latency=lat)
    ex = Executor(cm, dev, fuse=args.fuse)
    ex.run(x)                                         # record the programs
    dev.log = []
    dev.recording = True
    t0, c0, s0 = time.perf_counter(), time.process_time(), dev.cycle
    out = ex.run(x, keep=True)
    wall, cpu, sim = time.perf_counter() - t0, time.process_time() - c0, dev.cycle - s0
    dev.recording = False
    ex.close()
    dev.close()
    if args.fuse:           # one figure per launch: the totals only
        total = sum(dev.log)
        dev.log = [0] * len(vta)
    assert len(dev.log) == len(vta), (len(dev.log), len(vta))
    ref = Executor(cm, FsimDevice(cfg, mem_bytes=512 << 20)).run(x, keep=True)
    print(f"{args.model} {args.size}x{args.size}, {args.config} ({cfg.bitstream_name}, "
          f"0x{cfg.fingerprint:08x}), batch 1, {bus}; "
          f"{len(vta)} of {len(cm.steps)} steps on VTA; compile {tc:.1f} s, rtl run {wall:.1f} s")
    kinds = defaultdict(lambda: [0, 0, 0, 0])
    tot = [0, 0, 0]
    all_exact = True
    if args.steps:
        print(f"{'step':<28} {'op':<12} {'cycles':>10} {'ideal':>10} {'bound':>10} {'eff':>6} exact")
    for step, cyc in zip(vta, dev.log):
        ideal, bound = step_bound(cfg, step)
        exact = bool(np.array_equal(out[step.outputs[0]], ref[step.outputs[0]]))
        all_exact &= exact
        k = step.op if step.op != "qconv2d" else f"qconv2d {step.attrs['kernel'][0]}x{step.attrs['kernel'][1]}"
        kk = kinds[k]
        kk[0] += 1
        kk[1] += cyc
        kk[2] += ideal
        kk[3] += bound
        tot[0] += cyc
        tot[1] += ideal
        tot[2] += bound
        if args.steps:
            print(f"{step.name:<28} {step.op:<12} {cyc:>10} {ideal:>10} {bound:>10} "
                  f"{(bound / cyc if cyc else 0):>6.2f} {exact}")
    print(f"{'kind':<16} {'n':>3} {'cycles':>10} {'ideal':>10} {'bound':>10} {'eff':>6}")
    for k, (n, cyc, ideal, bound) in sorted(kinds.items()):
        print(f"{k:<16} {n:>3} {cyc:>10} {ideal:>10} {bound:>10} {(bound / cyc if cyc else 0):>6.2f}")
    if args.fuse:
        tot[0] = total
        print(f"fused: {len(set(s.fused for s in ex.stats.values() if s.fused))} fused "
              f"launch(es), {sum(1 for s in ex.stats.values() if s.fused)} steps in them; "
              f"per-step and per-kind cycles above are not measured (0)")
    print(f"{'total':<16} {len(vta):>3} {tot[0]:>10} {tot[1]:>10} {tot[2]:>10} "
          f"{tot[2] / tot[0]:>6.2f}   all exact: {all_exact}; "
          f"{tot[0] / wall / 1e6:.2f} M cycles/s wall")
    print(f"simulation: {sim} cycles simulated (runs plus reset and polls) in {cpu:.1f} CPU-s "
          f"for the whole network (executor, verifier and host steps included; target <= 10 s) "
          f"= {sim / cpu / 1e6:.2f} M cycles per CPU-second; anchor: upstream tsim 7.73 M "
          f"cycles in ~228 s (~0.12 M cycles/s)")


if __name__ == "__main__":
    main()
