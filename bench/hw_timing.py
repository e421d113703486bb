"""Print the open-source fmax proxy (Yosys synth_ecp5 + nextpnr-ecp5 on an ECP5-85F,
``hw/timing.py``) of the generated core for ``tiny`` and for the largest configs that fit
the ECP5-85F (83,640 LUT4, 208 DP16KD, 156 MULT18X18D), next to each config's CLOCK_MHZ.

These figures are a PROXY for the Zynq, not a Zynq timing result: the ECP5 (speed grade 6)
is a slower fabric than a Zynq-7000 and nextpnr is not Vivado.  Use them to compare configs
and to read the critical path.

Usage: python bench/hw_timing.py [NAME ...]   (names of PLAN; several minutes each)
"""

from __future__ import annotations

import argparse
import sys

from _record import header

from vtaforge.hw.config import VTAConfig, preset
from vtaforge.hw.timing import DoesNotFitError, estimate_fmax, format_estimate

# The pynq core (448 KiB of scratchpad, 256 multipliers) does not fit the 85F (416 KiB of
# block RAM, 156 multipliers); these reduced configs do.
_BIG = dict(TARGET="pynq", DSP_PACKING=1, LOG_UOP_BUFF_SIZE=12, LOG_INP_BUFF_SIZE=13,
            LOG_ACC_BUFF_SIZE=14)
PLAN: dict[str, VTAConfig] = {
    "tiny": preset("tiny"),
    # 1x8x8: 64 products, all on MULT18X18D
    "1x8x8": VTAConfig.from_dict(dict(_BIG, LOG_BLOCK=3, LOG_WGT_BUFF_SIZE=14)),
    # 1x16x16 (pynq's GEMM shape): 128 products on MULT18X18D, 128 in LUTs
    "1x16x16": VTAConfig.from_dict(dict(_BIG, LOG_BLOCK=4, LOG_WGT_BUFF_SIZE=15,
                                        LUT_MULTIPLIERS=128)),
}


def main(argv: list[str]) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("names", nargs="*", metavar="NAME",
                    help=f"configs of the plan, of {', '.join(PLAN)} (default: all)")
    names = ap.parse_args(argv).names or list(PLAN)
    bad = [n for n in names if n not in PLAN]
    if bad:
        ap.error(f"unknown config {bad[0]!r} (choose from {', '.join(PLAN)})")
    print(header(__file__), flush=True)
    for name in names:
        cfg = PLAN[name]
        try:
            est = estimate_fmax(cfg, timeout_s=5400)
        except DoesNotFitError as e:
            print(f"{name}: {e}\n")
            continue
        print(format_estimate(f"{name} ({cfg.bitstream_name})", est))
        print(f"  fmax proxy {est.fmax_mhz:.1f} MHz vs CLOCK_MHZ {est.target_mhz:g} MHz")
        print()


if __name__ == "__main__":
    main(sys.argv[1:])
