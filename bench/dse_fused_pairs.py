"""The DSE cycle model against the RTL on one-launch-per-step and fused programs
(``Executor(fuse=True)``) of a whole network: ResNet-18 or MobileNet-v1 at 224x224, batch 1,
on the Verilator core with 40-60 cycles of DRAM latency per burst, the model
(``CycleModel(dram_latency=50)``, the range's mean) on every launch.

Run: ``.venv/bin/python bench/dse_fused_pairs.py CONFIG {resnet18,mobilenet_v1}``
(CONFIG: a preset name or a vta_config.json).
"""

from __future__ import annotations

import argparse

import numpy as np
from _record import header

from vtaforge.compiler.compile import compile_model
from vtaforge.compiler.zoo import mobilenet_v1, resnet18
from vtaforge.dse.performance import CycleModel, _recording_device
from vtaforge.hw.config import load_config
from vtaforge.runtime.executor import Executor
from vtaforge.runtime.rtl import RtlDevice


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("config")
    ap.add_argument("model", choices=["resnet18", "mobilenet_v1"])
    args = ap.parse_args()
    print(header(__file__), flush=True)
    cfg = load_config(args.config)
    x = np.random.default_rng(0).standard_normal((1, 3, 224, 224)).astype(np.float32)
    cm = compile_model({"resnet18": resnet18, "mobilenet_v1": mobilenet_v1}[args.model](224),
                       x, cfg)
    for fuse in (False, True):
        dev = _recording_device(RtlDevice, CycleModel(dram_latency=50))(
            cfg, 512 << 20, progress=False, latency=(40, 60))
        try:
            Executor(cm, dev, fuse=fuse).run(x)
        finally:
            dev.close()
        m = sum(r["model"]["cycles"] for r in dev.records)
        c = sum(r["cycles"] for r in dev.records)
        print(f"{args.model} fuse={fuse}: {len(dev.records)} launches, rtl {c}, model "
              f"{m:.0f} ({100 * (m - c) / c:+.2f} %)", flush=True)


if __name__ == "__main__":
    main()
