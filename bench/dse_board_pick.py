"""The DSE's pick on a board's default space: ``vtaforge dse run --board B --workloads W``
(cycle model, analytic resources; estimates, not RTL-verified), printed under the run's
record (commit and date) that docs/dse.md and README.md cite beside the pick.

``--fast``: the sweep behind the board's fast preset (hw/config.py ``FAST_PRESETS``,
docs/dse.md "Presets"): the board space with ``REQ_ENGINE`` and ``ALU_FORWARD`` as two more
axes (``ALU_REQUANT`` is on in every board space), the whole networks
``resnet18-net,mobilenet-net`` at full size; then the fastest estimate, the best-latency
pick and where the fast preset stands (its latency, rank and resources in the report).

Run time: about 1 min per board on two shared cores (pynq-z2 144 points, ultra96 and
zcu104 256 points each, ResNet-18 C2-C11 at the DSE's default size 14); ``--fast`` about
5 s per feasible point (pynq-z2: 576 points, 368 feasible, 33 min).

Usage: python bench/dse_board_pick.py [--fast [--blocks 4,5,6] [--axis KEY=V,...]] [BOARD ...]
[-- EXTRA dse run ARGS] (default boards: ultra96; with --fast: pynq-z2; ``--blocks``
keeps those log2 BLOCK_IN / BLOCK_OUT values: the ZynqMP boards' spaces with 8-wide arrays
cost hours on whole networks, and those arrays are the slowest; ``--axis`` adds an axis,
e.g. ``--blocks 4 --axis DEPTHWISE_TAPS=0,3 --axis DMA_OUTSTANDING=4``: the fast preset's
neighbours with and without depthwise GEMMs, 128 points)
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from _record import header

from vtaforge.hw.parts import board_names


def fast_space(board: str, blocks: list[int] | None = None,
               axes_extra: dict[str, list] | None = None) -> dict:
    """The JSON space of ``--fast`` for ``board``: :func:`~vtaforge.dse.space.board_space`'s
    base (its preset; ``--board`` sets part, bus and clock again) and axes, plus
    ``REQ_ENGINE`` and ``ALU_FORWARD`` off/on; ``blocks``: the log2 BLOCK_IN / BLOCK_OUT
    values kept (default: the board space's); ``axes_extra``: more axes (``--axis``), a
    one-value axis an override of the base."""
    from vtaforge.dse.space import board_setup, board_space

    sp = board_space(board)
    axes = {k: list(v) for k, v in sp.axes.items()}
    if blocks:
        for k in ("LOG_BLOCK_IN", "LOG_BLOCK_OUT"):
            axes[k] = [b for b in axes[k] if b in blocks]
    over = {"ALU_REQUANT": True, "DSP_PACKING": sp.base.DSP_PACKING}
    axes = {**axes, "REQ_ENGINE": [False, True], "ALU_FORWARD": [False, True]}
    for k, vals in (axes_extra or {}).items():
        if len(vals) == 1:
            over[k] = vals[0]
            axes.pop(k, None)
        else:
            axes[k] = list(vals)
    return {"base": board_setup(board)["base"], "overrides": over, "axes": axes}


def _axis_value(v: str) -> int | bool:
    """An ``--axis`` value: ``true`` / ``false`` (a boolean option) or an integer; raises
    ValueError otherwise."""
    t = v.strip().lower()
    if t in ("true", "false"):
        return t == "true"
    return int(t)


def where_fast(report: Path, board: str) -> None:
    """Print the fastest estimate, the pick and the board's fast preset in ``report``."""
    from vtaforge.dse.space import board_setup
    from vtaforge.hw.config import preset

    rep = json.loads(report.read_text())
    pts = [p for p in rep["points"] if p.get("feasible")]
    pts.sort(key=lambda p: p["latency_us"])
    name = board_setup(board)["fast_preset"]
    fp = f"0x{preset(name).fingerprint:08x}" if name else None
    pick = rep["best"].get("latency")
    for what, p in (("fastest estimate", pts[0] if pts else None),
                    ("best-latency pick", next((q for q in pts if q["fingerprint"] == pick),
                                               None)),
                    (f"fast preset {name}", next((q for q in pts if q["fingerprint"] == fp),
                                                 None))):
        if p is None:
            print(f"  {what}: not a feasible point of the sweep")
            continue
        r = p["resources"]
        print(f"  {what}: {p['fingerprint']} {p['bitstream']}: {p['latency_us']:,.1f} us "
              f"(rank {pts.index(p) + 1} of {len(pts)}), LUT {r['lut']:,}, FF {r['ff']:,}, "
              f"DSP {r['dsp']}, BRAM36 {r['bram36']}")


def main(argv: list[str]) -> None:
    extra: list[str] = []
    if "--" in argv:
        i = argv.index("--")
        argv, extra = argv[:i], argv[i + 1:]
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                 epilog="arguments after -- go to vtaforge dse run")
    ap.add_argument("boards", nargs="*", metavar="BOARD",
                    help=f"boards, of {', '.join(board_names(aliases=True))} "
                         f"(default: ultra96; pynq-z2 with --fast)")
    ap.add_argument("--fast", action="store_true",
                    help="the sweep behind the board's fast preset (REQ_ENGINE and "
                         "ALU_FORWARD axes, whole networks at full size)")
    ap.add_argument("--blocks", default=None, metavar="L,...",
                    help="with --fast: keep only these log2 BLOCK_IN / BLOCK_OUT values")
    ap.add_argument("--axis", action="append", default=[], metavar="KEY=V,...",
                    help="with --fast: one more axis of integer or true/false config values "
                         "(repeatable; one value: an override), e.g. DEPTHWISE_TAPS=0,3, "
                         "DMA_OUTSTANDING=4 or REQ_LANE_SHIFT=false,true")
    a = ap.parse_args(argv)
    fast = a.fast
    try:
        blocks = [int(v) for v in a.blocks.split(",")] if a.blocks else None
    except ValueError:
        ap.error(f"--blocks {a.blocks!r}: comma-separated integers")
    axes_extra: dict[str, list] = {}
    for spec in a.axis:
        key, _, vals = spec.partition("=")
        try:
            axes_extra[key.strip()] = [_axis_value(v) for v in vals.split(",")]
        except ValueError:
            ap.error(f"--axis {spec!r}: KEY=V1,V2,... with integer or true/false values")
        if len({type(v) for v in axes_extra[key.strip()]}) > 1:
            ap.error(f"--axis {spec!r}: all values true/false or all integers")
        if not key.strip():
            ap.error(f"--axis {spec!r}: KEY=V1,V2,... with integer or true/false values")
    if axes_extra and not fast:
        ap.error("--axis applies to --fast")
    boards = a.boards or (["pynq-z2"] if fast else ["ultra96"])
    bad = [b for b in boards if b not in board_names(aliases=True)]
    if bad:
        ap.error(f"unknown board {bad[0]!r} (choose from {', '.join(board_names(aliases=True))})")
    print(header(__file__))
    exe = Path(sys.executable).with_name("vtaforge")
    tmp = Path(tempfile.mkdtemp(prefix="dse-board-pick-"))
    for board in boards:
        cmd = [str(exe), "dse", "run", "--board", board, "--workloads", "resnet18"]
        if fast:
            space = tmp / f"{board}.json"
            space.write_text(json.dumps(fast_space(board, blocks, axes_extra)))
            cmd = [str(exe), "dse", "run", "--board", board, "--space", str(space),
                   "--workloads", "resnet18-net,mobilenet-net", "--size", "full",
                   "-o", str(tmp / f"{board}-report.json"), "--no-progress"]
        cmd += extra
        print("$", " ".join(cmd[1:]), flush=True)
        t = time.time()
        r = subprocess.run(cmd)
        if r.returncode:        # dse run printed its error line
            sys.exit(r.returncode)
        print(f"  ({time.time() - t:.1f} s wall)", flush=True)
        if fast:
            where_fast(tmp / f"{board}-report.json", board)
        print(flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
