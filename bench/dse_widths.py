"""Per-width summary of a DSE report with a width axis (docs/dse.md "Widths and accuracy").

The report comes from a sweep such as::

    vtaforge dse run --board pynq-z2 --widths 8,a4,a4w4 --workloads digits,resnet18 \\
        --accuracy digits -o widths.json

and this prints, per operand width (``i8w8a32``, ``i4w8a32``, ...): the points, how many
fit and are feasible, the accuracy, then two rows: the width's own pick (the DSE's
best-latency rule, :func:`vtaforge.dse.report.best_designs`, applied to that width's
points alone) and the point with the int8 pick's shape and depths in that width, each
with the digits and ResNet-18 latency (µs at the point's clock), LUT, FF, DSP, BRAM36 and
the binding utilization (%).

    python bench/dse_widths.py widths.json
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from vtaforge.dse.report import best_designs


def _width(p: dict) -> str:
    c = p["config"]
    return f"i{1 << c.get('LOG_INP_WIDTH', 3)}w{1 << c.get('LOG_WGT_WIDTH', 3)}a" \
           f"{1 << c.get('LOG_ACC_WIDTH', 5)}"


def _shape(p: dict) -> tuple:
    """The point's axis values other than the width (shape and depths)."""
    return tuple((k, json.dumps(v)) for k, v in p["params"].items() if k != "LOG_WIDTH")


def _us(p: dict, prefix: str) -> float:
    cyc = sum(w["cycles"] for n, w in p["workloads"].items() if n.startswith(prefix))
    return cyc / p["clock_mhz"]


def _row(label: str, p: dict) -> str:
    r = p["resources"]
    return (f"| {label} | {p['bitstream']} | {_us(p, 'digits'):,.1f} | "
            f"{_us(p, 'resnet18'):,.0f} | {p['gops']:.1f} | {r['lut']:,} | {r['ff']:,} | "
            f"{r['dsp']} | {r['bram36']:g} | {100 * p['utilization']['max']:.1f} |")


def summarize(report: dict) -> str:
    """Markdown: one accuracy line per width, then the per-width table (module docstring).

    Raises:
        KeyError: a report without points' ``params``/``workloads`` (not a DSE report)."""
    pts = [p for p in report["points"] if p.get("valid")]
    by_w: dict[str, list] = {}
    for p in pts:
        by_w.setdefault(_width(p), []).append(p)
    acc = {a["widths"]: a for a in report.get("accuracy") or []}
    picks = {w: best_designs(ps)["latency"] for w, ps in by_w.items()}
    ref = next((p for p in by_w.get("i8w8a32", []) if p["fingerprint"] == picks["i8w8a32"]),
               None)
    lines = ["| width | points | fit | feasible | accuracy (digits) | CPU steps |",
             "|---|---|---|---|---|---|"]
    for w, ps in by_w.items():
        a = acc.get(w, {})
        accuracy = f"{100 * a['accuracy']:.1f} %" if a.get("accuracy") is not None else "-"
        lines.append(f"| {w} | {len(ps)} | {sum(bool(p.get('fits')) for p in ps)} | "
                     f"{sum(bool(p.get('feasible')) for p in ps)} | {accuracy} | "
                     f"{', '.join(a.get('cpu_steps') or []) or '-'} |")
    lines += ["", "| row | design | digits µs | ResNet-18 µs | GOPS | LUT | FF | DSP | BRAM36 "
              "| binding % |", "|---|---|---|---|---|---|---|---|---|---|"]
    for w, ps in by_w.items():
        pick = next((p for p in ps if p["fingerprint"] == picks[w]), None)
        if pick is not None:
            lines.append(_row(f"{w} pick", pick))
        if ref is not None and w != "i8w8a32":
            same = next((p for p in ps if _shape(p) == _shape(ref)), None)
            if same is not None and same is not pick:
                lines.append(_row(f"{w}, int8 pick's shape", same)
                             + ("" if same.get("feasible") else " (infeasible)"))
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("report", type=Path)
    a = ap.parse_args()
    print(summarize(json.loads(a.report.read_text())))


if __name__ == "__main__":
    main()
