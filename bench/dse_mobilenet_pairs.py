"""Record calibration pairs (config, layer program, RTL cycles) of MobileNet-v1 layers on the
pynq + ALU_REQUANT + REQ_ENGINE core, full size, and print the DSE cycle model's error on
each: the layers whose programs use this project's MobileNet lowerings (bench/RESULTS.md
"MobileNet-v1 under 3.5 M cycles": the output-block GEMM loop, four bank-aligned ACC
regions, re-tiled resident weights, streamed weights stored input-block-major, partial
resets and kept clears), so the model is checked on those program shapes too
(tests/dse/test_calibration.py ``test_mobilenet_lowerings_pairs``).

Pairs go to ``tests/dse/data/rtl_pairs_engine_mobilenet.json`` (workloads ``mbv1-*``);
layers already in the file are skipped (``--force`` re-records all).

    python bench/dse_mobilenet_pairs.py [--force] [--out FILE]
"""

from __future__ import annotations

import argparse
import dataclasses
from pathlib import Path

from vtaforge.compiler.zoo import Workload
from vtaforge.dse import CycleModel
from vtaforge.dse.calibrate import layer_errors, load_pairs, record_pairs, save_pairs
from vtaforge.dse.workloads import DseWorkload
from vtaforge.hw.config import preset

OUT = Path(__file__).resolve().parent.parent / "tests" / "dse" / "data" / \
    "rtl_pairs_engine_mobilenet.json"

#: (name, height, in channels, out channels, groups, kernel, stride): MobileNet-v1 224x224
#: layers, one of each program shape the lowerings produce.
LAYERS = (
    ("mbv1-conv1", 224, 3, 32, 1, 3, 2),          # im2col, four ACC regions
    ("mbv1-pw112", 112, 32, 64, 1, 1, 1),         # four ACC regions, output-block loop
    ("mbv1-pw56", 56, 128, 128, 1, 1, 1),         # output-block loop
    ("mbv1-pw14a", 14, 256, 512, 1, 1, 1),        # re-tiled resident weights
    ("mbv1-pw14", 14, 512, 512, 1, 1, 1),         # re-tiled resident weights
    ("mbv1-pw7", 7, 1024, 1024, 1, 1, 1),         # streamed, input-block-major
    ("mbv1-dw112", 112, 32, 32, 32, 3, 1),        # kept clears
    ("mbv1-dw56s2", 56, 128, 128, 128, 3, 2),
    ("mbv1-dw14s2", 14, 512, 512, 512, 3, 2),
    ("mbv1-dw7", 7, 1024, 1024, 1024, 3, 1),
)


def workloads() -> list[DseWorkload]:
    out = []
    for name, hw, ci, co, g, k, s in LAYERS:
        wl = Workload(name, 1, hw, hw, ci, co, g, k, k, k // 2, k // 2, s, s)
        ho = (hw + 2 * (k // 2) - k) // s + 1
        out.append(DseWorkload(name, "conv", wl, full_macs=ho * ho * co * (ci // g) * k * k))
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=str(OUT))
    ap.add_argument("--force", action="store_true")
    a = ap.parse_args()
    out = Path(a.out)
    cfg = dataclasses.replace(preset("pynq"), ALU_REQUANT=True, REQ_ENGINE=True)
    pairs = [] if a.force else load_pairs(out) if out.exists() else []
    for wl in workloads():
        if any(p["workload"] == wl.name for p in pairs):
            continue
        pairs += record_pairs(cfg, [wl], log=lambda s: print(s, flush=True))
        save_pairs(pairs, out, note="MobileNet-v1 224x224 layers, pynq + ALU_REQUANT + "
                                    "REQ_ENGINE, Verilator zero-latency DRAM; "
                                    "bench/dse_mobilenet_pairs.py")
    print(f"{'workload':<14} {'rtl':>9} {'model':>11} {'error':>8} {'lower':>9}")
    for e in layer_errors(CycleModel(), pairs):
        print(f"{e['workload']:<14} {e['rtl']:>9} {e['model']:>11.0f} {100 * e['error']:+7.2f} % "
              f"{e['lower']:>9.0f} {'<=' if e['lower'] <= e['rtl'] else '>'} rtl")


if __name__ == "__main__":
    main()
