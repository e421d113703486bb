"""Top-1 accuracy of the bundled digits CNN per operand width of the core, on fsim.

For each width (``8``: int8 both, ``16``: int16 both, ``w4``: int4 weights, ``a4``: int4 activations, ``a4w4``:
int4 both) a ``pynq``-based config of that width is measured with the DSE's accuracy
evaluator (``dse/accuracy.py`` ``make_accuracy("digits")``: calibrated on the 1297
training images, 500 held-out test images, every VTA step checked against the integer
reference).  Accuracy depends only on the widths (``accuracy_key``), not on the GEMM shape
or the buffers, so the buffers are shrunk where a narrower element would not fit the ISA
fields.  Printed under the run's record (commit and date) that README.md and
docs/compiler.md cite.  Run time: about a minute per width on two shared cores.

Usage: python bench/digits_widths.py [8 16 w4 a4 a4w4 ...]
"""

from __future__ import annotations

import argparse
import sys
import time

from _record import header

from vtaforge.dse.accuracy import make_accuracy
from vtaforge.hw.config import ConfigError, VTAConfig

WIDTHS = {"8": (3, 3), "16": (4, 4), "w4": (3, 2), "a4": (2, 3), "a4w4": (2, 2)}


def _config(inp: int, wgt: int) -> VTAConfig:
    base = {"TARGET": "pynq", "LOG_INP_WIDTH": inp, "LOG_WGT_WIDTH": wgt}
    for shrink in range(0, 4):            # narrower elements: more entries per byte
        try:
            return VTAConfig.from_dict({**base, "LOG_INP_BUFF_SIZE": 15 - shrink,
                                        "LOG_WGT_BUFF_SIZE": 18 - shrink})
        except ConfigError:
            continue
    raise SystemExit(f"no pynq-based config of widths {inp}/{wgt} fits the ISA")


def main(argv: list[str]) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("widths", nargs="*", metavar="WIDTH",
                    help=f"widths to measure, of {', '.join(WIDTHS)} (default: all)")
    args = ap.parse_args(argv)
    bad = [w for w in args.widths if w not in WIDTHS]
    if bad:     # not choices=: argparse rejects an empty nargs="*" list against choices
        ap.error(f"unknown width {bad[0]!r} (choose from {', '.join(WIDTHS)})")
    print(header(__file__), flush=True)
    ev = make_accuracy("digits")
    for name in args.widths or list(WIDTHS):
        cfg = _config(*WIDTHS[name])
        t = time.time()
        r = ev.measure(cfg)
        if "error" in r:
            print(f"{name:>5}: error {r['error']}")
            continue
        print(f"{name:>5} ({cfg.bitstream_name}): digits {100 * r['accuracy']:.1f} % "
              f"(float {100 * r['float_accuracy']:.1f} %, {r['samples']} images, "
              f"exact {r.get('exact')}) in {time.time() - t:.0f} s", flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
