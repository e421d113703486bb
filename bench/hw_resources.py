"""Print Yosys resource estimates of the generated core for pynq, tiny and ultra96, next to
each part's capacity (hardware-notes.md: the xc7z020 has 53,200 LUT, 106,400 FF, 220 DSP48E1,
140 RAMB36; upstream's HLS build of the pynq configuration used 277 DSPs on a ZU3EG).

Usage: python bench/hw_resources.py [PRESET ...]   (pynq takes minutes on two cores)
"""

from __future__ import annotations

import sys
import time

from vtaforge.hw.config import preset
from vtaforge.hw.estimate import estimate_resources, format_report

PLAN = (("pynq", "xc7z020"), ("tiny", "xc7z020"), ("ultra96", "xczu3eg"))


def main(argv: list[str]) -> None:
    plan = [p for p in PLAN if not argv or p[0] in argv]
    for name, part in plan:
        t = time.time()
        res = estimate_resources(preset(name), part)
        print(format_report(name, res, part))
        print(f"  (yosys synth_xilinx, {time.time() - t:.0f} s)")
        print()


if __name__ == "__main__":
    main(sys.argv[1:])
