"""Print Yosys resource estimates of the generated core for pynq-fast, pynq, tiny and
ultra96, next to
each part's capacity (hardware-notes.md: the xc7z020 has 53,200 LUT, 106,400 FF, 220 DSP48E1,
140 RAMB36; upstream's HLS build of the pynq configuration used 277 DSPs on a ZU3EG), and
the size of the emitted Verilog (``emit_verilog``) of each.

The first line is the run's record (commit and date) that the docs cite beside the
figures.  Run time: tiny about 1-3 min, pynq and ultra96 several minutes each on two
shared cores; ``--verilog-only`` prints only the Verilog sizes (seconds per preset).

Usage: python bench/hw_resources.py [--verilog-only] [PRESET | CONFIG.json ...]
(a JSON config is synthesized for the xc7z020 unless its TARGET is an UltraScale+ board)
"""

from __future__ import annotations

import argparse
import sys
import time

from _record import header

from vtaforge.hw.config import load_config, preset
from vtaforge.hw.core import emit_verilog
from vtaforge.hw.estimate import estimate_resources, format_report

PLAN = (("pynq-fast", "xc7z020"), ("pynq", "xc7z020"), ("tiny", "xc7z020"),
        ("ultra96", "xczu3eg"))
VERILOG_PRESETS = ("tiny", "batch2", "pynq-fast", "pynq", "ultra96", "zcu104")


def main(argv: list[str]) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--verilog-only", action="store_true", help="print only the Verilog sizes")
    ap.add_argument("names", nargs="*", metavar="PRESET|CONFIG.json",
                    help="presets or config files (default: the plan's presets)")
    args = ap.parse_args(argv)
    verilog_only, names = args.verilog_only, args.names
    print(header(__file__))
    for name in [n for n in VERILOG_PRESETS if not names or n in names]:
        text = emit_verilog(preset(name), name="vta_core")
        print(f"{name}: Verilog {len(text.encode()) / 1e6:.2f} MB ({len(text.encode()):,} bytes)")
    print()
    if verilog_only:
        return
    plan = [p for p in PLAN if not names or p[0] in names]
    plan += [(n, None) for n in names if n.endswith(".json")]
    for name, part in plan:
        cfg = preset(name) if part else load_config(name)
        part = part or ("xczu3eg" if cfg.PART.startswith("xczu") else "xc7z020")
        t = time.time()
        res = estimate_resources(cfg, part)
        print(format_report(name, res, part))
        print(f"  (yosys synth_xilinx, {time.time() - t:.0f} s)")
        print()


if __name__ == "__main__":
    main(sys.argv[1:])
