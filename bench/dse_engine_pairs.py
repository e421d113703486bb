"""Record calibration pairs (config, layer program, RTL cycles) on ``REQ_ENGINE`` cores.

Configs: pynq + ALU_REQUANT + REQ_ENGINE (the config the engine was measured on) and tiny +
ALU_REQUANT + REQ_ENGINE.  Layers: ResNet-18 C2-C11 at the DSE's default size 14
(``tests/dse/data/rtl_pairs_engine.json``) and, with ``--size full``, at full size
(``tests/dse/data/rtl_pairs_engine_full.json``; the workloads are named
``resnet18-cN-full`` so that they do not add into the size-14 pairs of the same config,
which :func:`vtaforge.dse.calibrate.layer_errors` groups by name).  Pairs are appended after
each layer (an interrupted run keeps what it recorded); layers already in the file are
skipped.  Then prints the cycle model's per-layer error on every pair of the file.

With ``--latency 40,60`` the RTL's DRAM model has that first-beat latency range per burst
(a board's), pairs go to ``tests/dse/data/latency_pairs_engine.json`` (each pair keeps its
range; a layer is recorded once per range) and the model runs each pair with
``dram_latency`` at its range's mean (``calibrate.layer_errors``;
tests/dse/test_calibration.py ``test_latency_pairs``).

    python bench/dse_engine_pairs.py [--size 14|full] [--configs pynq,tiny] [--layers c2,c4]
                                     [--latency MIN,MAX] [--dma N]

With ``--dma N`` every config has ``DMA_OUTSTANDING = N`` (several outstanding DMA read
requests per loader) and pairs go to ``tests/dse/data/latency_pairs_dma.json``
(tests/dse/test_dma_model.py).  ``--configs`` takes preset names (``pynq-fast``
already has ALU_REQUANT and REQ_ENGINE).
"""

from __future__ import annotations

import argparse
import dataclasses
import time
from pathlib import Path

from vtaforge.dse import CycleModel, parse_workloads
from vtaforge.dse.calibrate import layer_errors, load_pairs, record_pairs, save_pairs
from vtaforge.hw.config import preset

DATA = Path(__file__).resolve().parent.parent / "tests" / "dse" / "data"
OUT = {"14": DATA / "rtl_pairs_engine.json", "full": DATA / "rtl_pairs_engine_full.json"}
#: pairs recorded with DRAM latency (``--latency``): not ``rtl_pairs*`` (the zero-latency
#: files every calibration test reads)
LAT_OUT = DATA / "latency_pairs_engine.json"
#: pairs recorded with ``--dma N`` (DMA_OUTSTANDING = N > 1 on every config)
DMA_OUT = DATA / "latency_pairs_dma.json"


def engine_config(base: str):
    """``base`` preset with ALU_REQUANT and REQ_ENGINE on."""
    return dataclasses.replace(preset(base), ALU_REQUANT=True, REQ_ENGINE=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--size", default="14", choices=("14", "full"))
    ap.add_argument("--configs", default="pynq,tiny")
    ap.add_argument("--layers", default="c2,c3,c4,c5,c6,c7,c8,c9,c10,c11")
    ap.add_argument("--out", default=None)
    ap.add_argument("--no-record", action="store_true")
    ap.add_argument("--latency", default="0,0", metavar="MIN,MAX",
                    help="the DRAM model's first-beat latency range per burst (cycles); "
                         "not 0,0: pairs go to tests/dse/data/latency_pairs_engine.json and "
                         "the model runs each pair with dram_latency = its range's mean")
    ap.add_argument("--dma", type=int, default=1, metavar="N",
                    help="DMA_OUTSTANDING of every config (default 1: off); N > 1: pairs go "
                         "to tests/dse/data/latency_pairs_dma.json")
    a = ap.parse_args()
    lat = tuple(int(v) for v in a.latency.split(","))
    out = Path(a.out) if a.out else (DMA_OUT if a.dma > 1 else OUT[a.size] if lat == (0, 0)
                                     else LAT_OUT)
    size = None if a.size == "full" else int(a.size)
    wls = parse_workloads("resnet18-" + ",".join(a.layers.split(",")), size)
    if size is None:
        wls = [dataclasses.replace(w, name=f"{w.name}-full") for w in wls]
    pairs = load_pairs(out)
    if not a.no_record:
        for base in a.configs.split(","):
            cfg = engine_config(base).replace(DMA_OUTSTANDING=a.dma)
            for wl in wls:
                if any(p["fingerprint"] == f"0x{cfg.fingerprint:08x}" and p["workload"] == wl.name
                       and tuple(p.get("dram_latency", (0, 0))) == lat for p in pairs):
                    continue
                t0 = time.perf_counter()
                pairs += record_pairs(cfg, [wl], log=lambda s: print(s, flush=True),
                                      latency=lat)
                dram = ("zero-latency DRAM" if lat == (0, 0) else
                        f"DRAM first-beat latency {lat[0]}-{lat[1]} cycles per burst")
                dma = f" + DMA_OUTSTANDING {a.dma}" if a.dma > 1 else ""
                save_pairs(pairs, out, note=f"ResNet-18 at size {a.size}, {a.configs} + "
                                            f"ALU_REQUANT + REQ_ENGINE{dma}, Verilator {dram}; "
                                            f"bench/dse_engine_pairs.py")
                print(f"    {time.perf_counter() - t0:.0f} s", flush=True)
    for e in layer_errors(CycleModel(), pairs):     # each pair at its own DRAM latency
        print(f"{e['bitstream']:<28} {e['workload']:<20} rtl {e['rtl']:>9} model "
              f"{e['model']:>11.0f} {100 * e['error']:+6.2f} %  lower {e['lower']:>9.0f} "
              f"{'<=' if e['lower'] <= e['rtl'] else '>'} rtl")


if __name__ == "__main__":
    main()
