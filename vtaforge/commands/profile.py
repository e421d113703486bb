"""``vtaforge profile``: where a model's cycles go, step by step, beside each step's bound.

On ``rtl`` the cycles and the per-unit busy/stall counters are the core's own registers;
on ``fsim`` they are the DSE cycle model's estimate (``vtaforge.dse.performance.CycleModel``)
of every program the functional simulator ran, so a profile needs no Verilator build.
"""

from __future__ import annotations

import json
from pathlib import Path

import click

from ._inputs import agreement_option

#: Units of the core in a profile, and whether the core counts their stall cycles.
UNITS = (("fetch", False), ("load", True), ("compute", True), ("store", True))


def unit_breakdown(cycles: int, extra: dict) -> dict:
    """Per-unit ``{"busy", "stall", "idle"}`` cycles of one step from its summed counters
    (``StepStats.extra``: ``fetch_busy``, ``load_stall`` ...).

    ``stall`` is ``None`` where nothing counted it (the fetch unit has no stall counter;
    the fsim cycle model has none at all); ``idle`` is the rest of the step's cycles,
    ``cycles - busy - stall``, at least 0.  A unit whose busy counter is absent is left out.
    """
    out = {}
    for unit, has_stall in UNITS:
        if f"{unit}_busy" not in extra:
            continue
        busy = int(extra[f"{unit}_busy"])
        stall = int(extra[f"{unit}_stall"]) if has_stall and f"{unit}_stall" in extra else None
        out[unit] = {"busy": busy, "stall": stall,
                     "idle": max(0, int(cycles) - busy - (stall or 0))}
    return out


def profile_records(cm, stats: dict, cfg) -> dict:
    """The profile of one executor run as JSON-able data.

    Args:
        cm: the :class:`~vtaforge.runtime.artifact.CompiledModel` that ran.
        stats: the executor's ``stats`` (step name -> ``StepStats``).
        cfg: the core's :class:`~vtaforge.hw.config.VTAConfig`.

    Returns:
        ``{"config": cfg.to_dict(), "total_cycles": N, "steps": [...]}``; each step is
        ``{"name", "placement", "cycles", "ideal_cycles", "bound_cycles", "efficiency",
        "dram_bytes", "units"}``: ``ideal_cycles`` the step's MACs over the array's MACs
        per cycle, ``bound_cycles`` the larger of that and its minimum DRAM bytes over the
        bus width (``Step.bounds``: the busier AXI channel's, reads or writes, where the
        step records them apart), ``efficiency`` ``bound_cycles / cycles`` (``None``
        without cycles), ``dram_bytes`` what the core read and wrote, ``units`` from
        :func:`unit_breakdown`.  CPU steps have zero cycles and bounds and no units.
        ``total_cycles`` sums the VTA steps' cycles.
    """
    steps, total = [], 0
    for s in cm.steps:
        st = stats[s.name]
        rec = {"name": s.name, "placement": cm.where(s), "cycles": 0, "ideal_cycles": 0,
               "bound_cycles": 0, "efficiency": None, "dram_bytes": 0, "units": {}}
        if s.target == "vta":
            comp, mem = s.bounds(cfg, st.blocks)
            bound = max(comp, mem)
            rec.update(cycles=int(st.cycles), ideal_cycles=int(comp), bound_cycles=int(bound),
                       efficiency=round(bound / st.cycles, 4) if st.cycles else None,
                       dram_bytes=int(st.dram_bytes), units=unit_breakdown(st.cycles, st.extra))
            total += int(st.cycles)
        steps.append(rec)
    return {"config": cfg.to_dict(), "total_cycles": total, "steps": steps}


def step_cycles_lines(cm, stats: dict) -> list[str]:
    """Lines for ``vtaforge run --target rtl``: the total core cycles of the VTA steps,
    then one line per VTA step with its cycles and share (``stats``: the executor's
    ``stats``, step name -> ``StepStats``)."""
    vta = [s for s in cm.steps if s.target == "vta"]
    total = sum(int(stats[s.name].cycles) for s in vta)
    w = max((len(s.name) for s in vta), default=4)
    lines = [f"core cycles: {total} in {len(vta)} VTA step(s)"]
    for s in vta:
        c = int(stats[s.name].cycles)
        lines.append(f"  {s.name:<{w}}  {c:>10}  {_pct(c, total)}")
    return lines


def model_cycles_device(cfg, **kw):
    """An fsim device whose runs report the DSE cycle model's estimate as their cycles,
    with the model's per-module busy cycles as ``load_busy``/``compute_busy``/
    ``store_busy`` (``kw`` go to :class:`~vtaforge.runtime.fsim.FsimDevice`)."""
    from ..dse.performance import CycleModel, _recording_device
    from ..runtime.device import RunResult
    from ..runtime.fsim import FsimDevice

    class ModelCyclesFsim(_recording_device(FsimDevice, CycleModel())):
        def run(self, *a, **k):
            res = super().run(*a, **k)
            est = self.records[-1]["model"]
            busy = {f"{m}_busy": int(round(v)) for m, v in est["busy"].items()}
            return RunResult(cycles=int(round(est["cycles"])), stats={**res.stats, **busy})

    return ModelCyclesFsim(cfg, **kw)


def _pct(part, whole) -> str:
    return f"{100 * part / whole:4.0f}%" if whole and part is not None else "   - "


def format_profile(prof: dict, cm, target: str, cfg, wall: float, host: dict) -> str:
    """The profile as a text table (one line per step, then the totals)."""
    steps = prof["steps"]
    w = max((len(s["name"]) for s in steps), default=4)
    unit_hdr = "  ".join(f"{u + ' b/s/i':>17}" for u, _ in UNITS)
    what = "core cycles" if target == "rtl" else "model cycles (DSE cycle model)"
    lines = [f"{cm.name} on {target} ({cfg.bitstream_name}), {wall:.2f} s wall; {what} at "
             f"{cfg.CLOCK_MHZ:g} MHz",
             f"  {'step':<{w}}  {'where':<17} {'cycles':>10} {'share':>6} {'ideal':>10} "
             f"{'bound':>10} {'eff':>5} {'bound by':>8} {'DRAM B':>10}  {unit_hdr}  host s"]
    tot, tot_i, tot_b = prof["total_cycles"], 0, 0
    for s in steps:
        if s["placement"] != "VTA":
            lines.append(f"  {s['name']:<{w}}  {s['placement']:<17} {'':>10} {'':>6} {'':>10} "
                         f"{'':>10} {'':>5} {'':>8} {'':>10}  {'':>{len(unit_hdr)}}  "
                         f"{host[s['name']]:.4f}")
            continue
        cyc = s["cycles"]
        tot_i += s["ideal_cycles"]
        tot_b += s["bound_cycles"]
        kind = "compute" if s["bound_cycles"] == s["ideal_cycles"] else "memory"
        eff = f"{s['efficiency']:5.2f}" if s["efficiency"] is not None else "  -  "
        cells = []
        for u, _ in UNITS:
            d = s["units"].get(u)
            cells.append(f"{_pct(d['busy'], cyc)}/{_pct(d['stall'], cyc)}/{_pct(d['idle'], cyc)}"
                         .replace(" ", "").rjust(17) if d else f"{'-':>17}")
        lines.append(f"  {s['name']:<{w}}  {s['placement']:<17} {cyc:>10} {_pct(cyc, tot):>6} "
                     f"{s['ideal_cycles']:>10} {s['bound_cycles']:>10} {eff:>5} {kind:>8} "
                     f"{s['dram_bytes']:>10}  {'  '.join(cells)}")
    eff = f"{tot_b / tot:.2f}" if tot else "-"
    lines.append(f"  total VTA: {tot} cycles ({tot / cfg.CLOCK_MHZ:.1f} us at {cfg.CLOCK_MHZ:g} "
                 f"MHz), ideal {tot_i}, bound {tot_b}, efficiency {eff}; CPU steps "
                 f"{sum(host.values()):.3f} s on the host")
    lines.append("  units: busy/stall/idle share of the step's cycles (- where not counted)")
    if target == "fsim":
        lines.append("  (fsim: cycles are the DSE cycle model's estimate of each program; use "
                     "--target rtl for cycles and counters measured on the core)")
    return "\n".join(lines)


def write_roofline(prof: dict, cfg, path: str, title: str) -> int:
    """Write a roofline plot (PNG) of the profile's VTA steps: one point per step with
    MACs, at its operational intensity (MACs per DRAM byte) and attained MACs per cycle,
    under the compute roof (the array's MACs per cycle) and the bandwidth roof (bus bytes
    per cycle x intensity).  Returns the number of points plotted."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    peak = cfg.BATCH * cfg.BLOCK_IN * cfg.BLOCK_OUT
    bus = cfg.BUS_WIDTH // 8
    pts = [(s["name"], s["ideal_cycles"] * peak / s["dram_bytes"], s["ideal_cycles"] * peak
            / s["cycles"]) for s in prof["steps"]
           if s["placement"] == "VTA" and s["ideal_cycles"] and s["cycles"] and s["dram_bytes"]]
    skipped = sum(1 for s in prof["steps"] if s["placement"] == "VTA") - len(pts)
    fig, ax = plt.subplots(figsize=(8, 5.5), dpi=100)
    xs = [p[1] for p in pts] or [peak / bus]
    lo, hi = min(min(xs), peak / bus) / 4, max(max(xs), peak / bus) * 4
    ax.plot([lo, peak / bus, hi], [bus * lo, peak, peak], color="black", lw=1.5,
            label=f"roofs: {peak} MACs/cycle, {bus} B/cycle")
    if pts:
        ax.scatter([p[1] for p in pts], [p[2] for p in pts], s=18, color="tab:blue",
                   zorder=3, label=f"{len(pts)} steps")
        for name, x, y in pts:
            ax.annotate(name, (x, y), fontsize=6, xytext=(3, 2), textcoords="offset points")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("operational intensity (MACs per DRAM byte)")
    ax.set_ylabel("attained MACs per cycle")
    ax.set_title(title + (f" ({skipped} steps without MACs not shown)" if skipped else ""),
                 fontsize=9)
    ax.grid(True, which="both", lw=0.3)
    ax.legend(fontsize=8, loc="lower right")
    fig.tight_layout()
    fig.savefig(path, format="png")
    plt.close(fig)
    return len(pts)


def _default_inputs(model_path: str, calib_path):
    """``(input, calibration)`` when no ``--input`` is given: one seeded uniform [0, 1)
    sample of the model's input shape (symbolic dimensions 1), and ``--calibrate``'s data
    or 16 such samples (as ``vtaforge compile`` does)."""
    import numpy as np

    from ..compiler.errors import CompileError
    from ..compiler.onnx_frontend import import_onnx
    from ._inputs import read_array

    g = import_onnx(model_path)
    if len(g.inputs) != 1:
        raise CompileError(f"a model with several inputs ({', '.join(g.inputs)}) needs "
                           f"--input DATA.npz with one array per input, named "
                           f"{', '.join(g.inputs)}")
    dims = g.types[g.inputs[0]].shape
    rng = np.random.default_rng(0)
    x = rng.random([d if isinstance(d, int) else 1 for d in dims], dtype=np.float32)
    calib = (read_array(calib_path, "calibration data") if calib_path else
             rng.random([d if isinstance(d, int) else 16 for d in dims], dtype=np.float32))
    return x, calib


@click.command("profile")
@click.argument("model", required=False)
@click.option("--model", "model_opt", default=None, hidden=True,
              help="FILE.onnx or MODEL.vtapkg (same as the MODEL argument)")
@click.option("--input", "input_path", default=None,
              help="input .npy or .npz (as for run); default one seeded uniform [0, 1) sample")
@click.option("--calibrate", "calib_path", default=None, help="calibration data (ONNX models)")
@click.option("--config", "config_spec", default=None,
              help="preset name or vta_config.json file  [default: a .vtapkg's own config, "
                   "else pynq]")
@click.option("--target", default="rtl", show_default=True,
              help="rtl (core cycles and counters) or fsim (the DSE cycle model's cycles)")
@click.option("--json", "json_path", default=None, help="write the profile as JSON to this file")
@click.option("--plot", "plot_path", default=None, help="write a roofline plot (PNG) to this file")
@agreement_option
def profile_cmd(model, model_opt, input_path, calib_path, config_spec, target, json_path,
                plot_path, agreement_target) -> None:
    """Run MODEL (FILE.onnx or MODEL.vtapkg) once and print, per step: where it ran, its
    cycles (rtl: the core's; fsim: the DSE cycle model's), its share, its ideal MAC cycles
    (MACs / array size), its bound (the larger of those and its minimum DRAM bytes / bus
    width), efficiency (bound / cycles), the DRAM bytes the core moved and each unit's
    busy/stall/idle share; CPU steps their host time.  --json and --plot write the same
    figures as JSON and as a roofline."""
    import time

    from ..runtime.bundle import TARGETS, make_device
    from ..runtime.device import DeviceError
    from ..runtime.executor import Executor
    from ._inputs import check_agreement, check_arity, compiling, read_array, read_config, read_onnx
    from ._output import OutputPathError, check_output_path
    from .run import _artifact_config, _fixed_batch, _get_model, _run_batches

    if model and model_opt and model != model_opt:
        raise click.UsageError("give the model once: as MODEL or as --model")
    model = model or model_opt
    if not model:
        raise click.UsageError("missing argument MODEL (FILE.onnx or MODEL.vtapkg)")
    if target not in TARGETS:
        raise DeviceError(f"unknown target {target!r}; allowed: fsim, rtl")
    check_agreement(model, agreement_target)
    if target not in ("fsim", "rtl"):
        raise DeviceError(f"profile runs on fsim or rtl, not on {target!r} (on a board, "
                          "vtaforge run reports the core's cycles)")
    if json_path is not None:
        check_output_path(json_path, "--json")
    if plot_path is not None:
        check_output_path(plot_path, "--plot")
        if Path(plot_path).suffix.lower() != ".png":
            raise OutputPathError(f"--plot {plot_path!r}: the roofline is a PNG; the name "
                                  "must end in .png")
        try:
            import matplotlib  # noqa: F401
        except ImportError:
            raise OutputPathError("--plot needs matplotlib (pip install 'vtaforge[dse]')") \
                from None
    # as for run: a .vtapkg is profiled on the config it was compiled for unless told
    cfg = read_config(config_spec if config_spec is not None
                      else _artifact_config(model) or "pynq")
    if input_path is not None:
        x = read_array(input_path, "input")
        cm = _get_model(model, cfg, calib_path, x, input_path, agreement_target)
    elif Path(model).suffix == ".vtapkg":
        import numpy as np

        cm = _get_model(model, cfg, calib_path, None)
        shape = cm.types[cm.inputs[0]][1]
        x = np.random.default_rng(0).random([d if isinstance(d, int) else 1 for d in shape],
                                            dtype=np.float32)
    else:
        info = read_onnx(model)
        from ..compiler.compile import compile_model

        x, calib = _default_inputs(model, calib_path)
        if calib_path:
            check_arity(calib, calib_path, "calibration data", info.inputs)
        data = (f"calibration data {calib_path!r}" if calib_path
                else "uniform random calibration data")
        with compiling(model, data):
            cm = compile_model(model, calib, cfg, calib_label=data,
                               agreement_target=agreement_target)
    dev = model_cycles_device(cfg) if target == "fsim" else make_device(target, cfg)
    ex = Executor(cm, dev)
    t0 = time.perf_counter()
    with compiling(model, f"input {input_path!r}" if input_path else "a random input"):
        _run_batches(ex.run, _fixed_batch(cm), x)
    wall = time.perf_counter() - t0
    prof = profile_records(cm, ex.stats, cfg)
    host = {s.name: ex.stats[s.name].host_seconds for s in cm.steps if s.target != "vta"}
    click.echo(format_profile(prof, cm, target, cfg, wall, host))
    if json_path is not None:
        Path(json_path).write_text(json.dumps(prof, indent=1) + "\n")
        click.echo(f"  profile -> {json_path}")
    if plot_path is not None:
        n = write_roofline(prof, cfg, plot_path, f"{cm.name} on {target} ({cfg.bitstream_name})")
        click.echo(f"  roofline ({n} points) -> {plot_path}")


COMMANDS = [profile_cmd]
