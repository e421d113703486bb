"""The DSE's pick on a board's default space: ``vtaforge dse run --board B --workloads W``
(cycle model, analytic resources; estimates, not RTL-verified), printed under the run's
record (commit and date) that docs/dse.md and README.md cite beside the pick.

Run time: about 1 min per board on two shared cores (pynq-z2 144 points, ultra96 and
zcu104 256 points each, ResNet-18 C2-C11 at the DSE's default size 14).

Usage: python bench/dse_board_pick.py [BOARD ...] [-- EXTRA dse run ARGS]
(default boards: ultra96)
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time
from pathlib import Path

from _record import header

from vtaforge.hw.parts import board_names


def main(argv: list[str]) -> None:
    extra: list[str] = []
    if "--" in argv:
        i = argv.index("--")
        argv, extra = argv[:i], argv[i + 1:]
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                 epilog="arguments after -- go to vtaforge dse run")
    ap.add_argument("boards", nargs="*", metavar="BOARD",
                    help=f"boards, of {', '.join(board_names(aliases=True))} (default: ultra96)")
    boards = ap.parse_args(argv).boards or ["ultra96"]
    bad = [b for b in boards if b not in board_names(aliases=True)]
    if bad:
        ap.error(f"unknown board {bad[0]!r} (choose from {', '.join(board_names(aliases=True))})")
    print(header(__file__))
    exe = Path(sys.executable).with_name("vtaforge")
    for board in boards:
        cmd = [str(exe), "dse", "run", "--board", board, "--workloads", "resnet18", *extra]
        print("$", " ".join(cmd[1:]), flush=True)
        t = time.time()
        subprocess.run(cmd, check=True)
        print(f"  ({time.time() - t:.1f} s wall)\n", flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
