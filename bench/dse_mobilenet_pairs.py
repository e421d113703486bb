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

With ``--depthwise-taps T`` (or ``--config CONFIG``, a preset or a vta_config.json,
``--depthwise-taps`` set on top of it) the script records MobileNet-v1 224's layers on that
core instead, by default ``pynq-fast`` + ``"DEPTHWISE_TAPS": T`` with the DRAM model's
40-60 cycles of first-beat latency per burst (``--latency``): its nine depthwise convs, its
first conv and its seven 1x1 shapes (workloads ``mbv1dw-*``), to
``tests/dse/data/latency_pairs_dw3_mobilenet.json``; with ``--net`` also the whole network,
one pair per launch (workload ``mobilenet_v1-224``), to
``latency_pairs_dw3_mobilenet_net.json`` (both: tests/dse/test_depthwise_pairs.py).  It
prints the model (``CycleModel``, at the mean of the recorded latency range) beside the rtl
cycles per layer (and per launch).  ``--only NAME`` records one layer (repeatable;
full-size layers take seconds each on Verilator, the network ~20 s)::

    python bench/dse_mobilenet_pairs.py --depthwise-taps 3 [--net] [--only mbv1dw-dw14s2]
"""

from __future__ import annotations

import argparse
import dataclasses
from pathlib import Path

from _record import header

from vtaforge.compiler.zoo import Workload
from vtaforge.dse import CycleModel
from vtaforge.dse.calibrate import (layer_errors, load_pairs, model_cycles, record_pairs,
                                    save_pairs)
from vtaforge.dse.workloads import DseWorkload
from vtaforge.hw.config import load_config, preset

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


#: The nine depthwise convs of MobileNet-v1 224 (name, height, channels, stride), each once.
DW_LAYERS = (
    ("mbv1dw-dw112", 112, 32, 1), ("mbv1dw-dw112s2", 112, 64, 2),
    ("mbv1dw-dw56", 56, 128, 1), ("mbv1dw-dw56s2", 56, 128, 2),
    ("mbv1dw-dw28", 28, 256, 1), ("mbv1dw-dw28s2", 28, 256, 2),
    ("mbv1dw-dw14", 14, 512, 1), ("mbv1dw-dw14s2", 14, 512, 2),
    ("mbv1dw-dw7", 7, 1024, 1),
)

#: The other convs of MobileNet-v1 224 on the same core (name, height, in, out channels,
#: groups, kernel, stride): the first conv and the seven 1x1 shapes, each once.
DW_CORE_OTHERS = (
    ("mbv1dw-conv1", 224, 3, 32, 1, 3, 2), ("mbv1dw-pw112", 112, 32, 64, 1, 1, 1),
    ("mbv1dw-pw56a", 56, 64, 128, 1, 1, 1), ("mbv1dw-pw56", 56, 128, 128, 1, 1, 1),
    ("mbv1dw-pw28a", 28, 128, 256, 1, 1, 1), ("mbv1dw-pw28", 28, 256, 256, 1, 1, 1),
    ("mbv1dw-pw14a", 14, 256, 512, 1, 1, 1), ("mbv1dw-pw14", 14, 512, 512, 1, 1, 1),
    ("mbv1dw-pw7a", 7, 512, 1024, 1, 1, 1), ("mbv1dw-pw7", 7, 1024, 1024, 1, 1, 1),
)

DW_OUT = OUT.parent / "latency_pairs_dw3_mobilenet.json"
NET_OUT = OUT.parent / "latency_pairs_dw3_mobilenet_net.json"


def workloads(layers=None) -> list[DseWorkload]:
    if layers is None:
        layers = LAYERS
    out = []
    for name, hw, ci, co, g, k, s in layers:
        wl = Workload(name, 1, hw, hw, ci, co, g, k, k, k // 2, k // 2, s, s)
        ho = (hw + 2 * (k // 2) - k) // s + 1
        out.append(DseWorkload(name, "conv", wl, full_macs=ho * ho * co * (ci // g) * k * k))
    return out


def dw_workloads() -> list[DseWorkload]:
    """The depthwise convs of :data:`DW_LAYERS` (3x3, pad 1), then
    :data:`DW_CORE_OTHERS`."""
    return workloads([(n, h, c, c, c, 3, s) for n, h, c, s in DW_LAYERS]
                     + list(DW_CORE_OTHERS))


def _recorded_on(pair: dict, fp: str, lat: tuple[int, int]) -> bool:
    """Whether ``pair`` was recorded on the core of fingerprint ``fp`` ("0x%08x") at DRAM
    latency ``lat`` (min, max cycles; a pair without one: the ideal bus)."""
    return pair["fingerprint"] == fp and tuple(pair.get("dram_latency", (0, 0))) == lat


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=None)
    ap.add_argument("--force", action="store_true")
    ap.add_argument("--config", default=None,
                    help="record the depthwise layers on this core (preset or JSON file)")
    ap.add_argument("--depthwise-taps", type=int, default=None,
                    help="DEPTHWISE_TAPS on top of --config (default pynq-fast)")
    ap.add_argument("--latency", default="40,60",
                    help="DRAM first-beat latency range with --config/--depthwise-taps "
                         "(cycles, MIN,MAX; 0,0: the ideal bus)")
    ap.add_argument("--only", action="append", default=None,
                    help="record only this workload (repeatable)")
    ap.add_argument("--net", action="store_true",
                    help="with --config/--depthwise-taps: also the whole network per launch")
    a = ap.parse_args()
    dw = a.config is not None or a.depthwise_taps is not None
    if a.net and not dw:
        ap.error("--net needs --config or --depthwise-taps")
    try:
        lat = tuple(int(v) for v in a.latency.split(","))
    except ValueError:
        lat = ()
    if len(lat) != 2 or not 0 <= lat[0] <= lat[1]:
        ap.error(f"--latency {a.latency!r}: MIN,MAX cycles, 0 <= MIN <= MAX")
    if dw:
        cfg = load_config(a.config or "pynq-fast")
        if a.depthwise_taps is not None:
            cfg = dataclasses.replace(cfg, DEPTHWISE_TAPS=a.depthwise_taps)
        wls, out = dw_workloads(), Path(a.out or DW_OUT)
        note = (f"MobileNet-v1 224x224 depthwise convs, {cfg.bitstream_name}, Verilator DRAM "
                f"latency {lat[0]}-{lat[1]}; bench/dse_mobilenet_pairs.py --config/"
                f"--depthwise-taps")
    else:
        cfg = dataclasses.replace(preset("pynq"), ALU_REQUANT=True, REQ_ENGINE=True)
        lat, wls, out = (0, 0), workloads(), Path(a.out or OUT)
        note = ("MobileNet-v1 224x224 layers, pynq + ALU_REQUANT + REQ_ENGINE, Verilator "
                "zero-latency DRAM; bench/dse_mobilenet_pairs.py")
    unknown = sorted(set(a.only or ()) - {wl.name for wl in wls})
    if unknown:
        ap.error(f"--only {unknown[0]!r}: not one of {', '.join(wl.name for wl in wls)}")
    print(header(__file__), flush=True)
    fp = f"0x{cfg.fingerprint:08x}"
    pairs = [] if a.force else load_pairs(out) if out.exists() else []

    def same(p) -> bool:
        return _recorded_on(p, fp, lat)
    for wl in wls:
        if a.only and wl.name not in a.only:
            continue
        if any(p["workload"] == wl.name and same(p) for p in pairs):
            continue
        pairs += record_pairs(cfg, [wl], log=lambda s: print(s, flush=True), latency=lat)
        save_pairs(pairs, out, note=note)
    print(f"{'workload':<14} {'rtl':>9} {'model':>11} {'error':>8} {'lower':>9}")
    for e in layer_errors(CycleModel(), [p for p in pairs if same(p)]):
        print(f"{e['workload']:<14} {e['rtl']:>9} {e['model']:>11.0f} {100 * e['error']:+7.2f} % "
              f"{e['lower']:>9.0f} {'<=' if e['lower'] <= e['rtl'] else '>'} rtl")
    if dw and a.net:
        net_pairs(cfg, lat, Path(a.out).with_name(NET_OUT.name) if a.out else NET_OUT, a.force)


def net_pairs(cfg, lat: tuple[int, int], out: Path, force: bool) -> None:
    """Record (unless ``out`` has them, or ``force``) and print the whole network's pairs,
    one per launch, on core ``cfg`` with DRAM first-beat latency ``lat`` (min, max cycles):
    rtl cycles beside the cycle model's."""
    fp = f"0x{cfg.fingerprint:08x}"
    pairs = [] if force or not out.exists() else load_pairs(out)

    def same(p) -> bool:
        return _recorded_on(p, fp, lat)
    if not any(same(p) for p in pairs):
        wl = DseWorkload("mobilenet_v1-224", "net", "mobilenet_v1", size=224)
        pairs += record_pairs(cfg, [wl], log=lambda s: print(s, flush=True), latency=lat)
        save_pairs(pairs, out, note=f"MobileNet-v1 224x224, whole network, one pair per "
                                    f"launch, {cfg.bitstream_name}, Verilator DRAM latency "
                                    f"{lat[0]}-{lat[1]}; bench/dse_mobilenet_pairs.py --net")
    rtl = model = 0.0
    print(f"{'launch':>6} {'insns':>6} {'rtl':>9} {'model':>11} {'error':>8}")
    for p in (q for q in pairs if same(q)):
        est = model_cycles(CycleModel(), p)["cycles"]
        rtl, model = rtl + p["rtl_cycles"], model + est
        print(f"{p['launch']:>6} {p['n_insns']:>6} {p['rtl_cycles']:>9} {est:>11.0f} "
              f"{100 * (est / p['rtl_cycles'] - 1):+7.2f} %")
    print(f"{'total':>13} {rtl:>9.0f} {model:>11.0f} {100 * (model / rtl - 1):+7.2f} %")


if __name__ == "__main__":
    main()
