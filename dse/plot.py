"""Plots of a DSE report (matplotlib, Agg canvas, imported only when a plot is asked for).

:func:`plot_report` writes one PNG: the Pareto plot of the report's part (latency against
the binding resource's utilization; every feasible point, the Pareto front as a step line,
the preset and the best-latency pick marked, fitting-but-infeasible points greyed), and,
when the report holds a verification (``--verify rtl``), a second panel: model cycles
against RTL-measured cycles per verified point, with the y = x line and the model's error
band.
"""

from __future__ import annotations

from pathlib import Path
from typing import Mapping

__all__ = ["plot_report"]


def _verified_pairs(report: Mapping) -> list[tuple[str, float, float]]:
    """``(fingerprint, model cycles, rtl cycles)`` of the points the rtl rung measured."""
    out = []
    for v in (report.get("verify") or {}).get("points", []):
        rtl = v.get("rtl") or {}
        if rtl.get("status") == "ran" and rtl.get("cycles"):
            out.append((v["fingerprint"], float(v["model"]["cycles"]), float(rtl["cycles"])))
    return out


def plot_report(report: Mapping, path: str | Path, *, dpi: int = 110) -> None:
    """Write the report's plots as one PNG at ``path`` (module docstring).

    Raises:
        ValueError: matplotlib is not installed (``pip install 'vtaforge[dse]'``).
        OSError: the file cannot be written.
    """
    try:
        from matplotlib.backends.backend_agg import FigureCanvasAgg
        from matplotlib.figure import Figure
    except ImportError:
        raise ValueError("--plot needs matplotlib: pip install 'vtaforge[dse]'") from None

    pts = [p for p in report["points"] if p.get("valid")]
    feas = [p for p in pts if p.get("feasible") and p.get("latency_us")]
    other = [p for p in pts if p.get("fits") and not p.get("feasible") and p.get("cycles_total")]
    pairs = _verified_pairs(report)
    fig = Figure(figsize=(11 if pairs else 6.5, 4.6))
    FigureCanvasAgg(fig)
    ax = fig.add_subplot(1, 2 if pairs else 1, 1)
    u = lambda p: 100 * p["utilization"]["max"]  # noqa: E731
    if other:
        ax.scatter([u(p) for p in other],
                   [p["cycles_total"] / p["clock_mhz"] for p in other], s=12, c="0.8",
                   label="fits, infeasible", zorder=1)
    if feas:
        ver = {p["fingerprint"] for p in feas if (p.get("rungs") or {}).get("cycles", {})
               .get("ran") == "rtl"}
        ax.scatter([u(p) for p in feas if p["fingerprint"] not in ver],
                   [p["latency_us"] for p in feas if p["fingerprint"] not in ver],
                   s=16, c="tab:blue", label="feasible (model)", zorder=2)
        if ver:
            ax.scatter([u(p) for p in feas if p["fingerprint"] in ver],
                       [p["latency_us"] for p in feas if p["fingerprint"] in ver],
                       s=26, c="tab:green", marker="s", label="RTL-verified", zorder=3)
        front = sorted((p for p in feas if p.get("pareto")), key=u)
        if front:
            ax.step([u(p) for p in front], [p["latency_us"] for p in front], where="post",
                    c="tab:orange", lw=1.2, label="Pareto front", zorder=2)
    byfp = {p.get("fingerprint"): p for p in pts}
    pre = byfp.get(report.get("preset"))
    if pre is not None and pre.get("latency_us"):
        ax.scatter([u(pre)], [pre["latency_us"]], s=140, marker="*", c="tab:purple",
                   label=f"preset {pre['bitstream']}", zorder=4)
    pick = byfp.get((report.get("best") or {}).get("latency"))
    if pick is not None:
        ax.scatter([u(pick)], [pick["latency_us"]], s=150, facecolors="none",
                   edgecolors="tab:red", linewidths=2, label=f"pick {pick['bitstream']}",
                   zorder=5)
    ax.set_xlabel("binding resource utilization (%)")
    ax.set_ylabel("latency (us, at target clock)")
    ax.set_title(f"{report['part']}: {len(feas)} feasible of {len(pts)} valid points")
    ax.grid(True, alpha=0.3)
    if feas or other:
        ax.legend(fontsize=7, loc="upper right")
    if pairs:
        bx = fig.add_subplot(1, 2, 2)
        m = [a for _, a, _ in pairs]
        r = [b for _, _, b in pairs]
        bx.scatter(r, m, s=22, c="tab:green", zorder=3)
        lo, hi = min(m + r) * 0.95, max(m + r) * 1.05
        band = float((report.get("verify") or {}).get("band", 0.025))
        bx.plot([lo, hi], [lo, hi], c="k", lw=0.8, label="model = RTL")
        bx.fill_between([lo, hi], [lo * (1 - band), hi * (1 - band)],
                        [lo * (1 + band), hi * (1 + band)], color="tab:green", alpha=0.12,
                        label=f"±{100 * band:g} % band")
        bx.set_xlabel("RTL cycles (Verilator)")
        bx.set_ylabel("cycle model")
        bx.set_title(f"model vs RTL, {len(pairs)} verified points")
        bx.grid(True, alpha=0.3)
        bx.legend(fontsize=7, loc="upper left")
    fig.tight_layout()
    import io

    from ..runtime.npz import atomic_open

    buf = io.BytesIO()
    fig.savefig(buf, dpi=dpi, format="png")
    with atomic_open(path) as f:  # a failed write never truncates an existing plot
        f.write(buf.getvalue())
