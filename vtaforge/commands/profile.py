"""``vtaforge profile``: where a model's cycles go, step by step, beside each step's bound."""

from __future__ import annotations

import click


@click.command("profile")
@click.option("--model", "model_path", required=True, help="FILE.onnx or MODEL.vtapkg")
@click.option("--input", "input_path", required=True, help="input .npy or .npz (as for run)")
@click.option("--calibrate", "calib_path", default=None, help="calibration data (ONNX models)")
@click.option("--config", "config_spec", default="pynq", show_default=True,
              help="preset name or vta_config.json file")
@click.option("--target", default="rtl", show_default=True,
              help="rtl (cycles and per-unit counters) or fsim (micro-op counts only)")
def profile_cmd(model_path, input_path, calib_path, config_spec, target) -> None:
    """Run MODEL once and print, per step: where it ran, core cycles (rtl), its share, its
    bound (max of MACs / array size and minimum DRAM bytes / bus width), efficiency, the
    compute unit's busy share and the load/store stalls; CPU steps their host time."""
    import time

    from ..hw.config import load_config
    from ..runtime.bundle import TARGETS, make_device
    from ..runtime.device import DeviceError
    from ..runtime.executor import Executor
    from .run import _get_model, _load_npy, _run_chunked

    if target not in TARGETS:
        raise DeviceError(f"unknown target {target!r}; allowed: {', '.join(TARGETS)}")
    cfg = load_config(config_spec)
    x = _load_npy(input_path, "input")
    cm = _get_model(model_path, cfg, calib_path, x)
    ex = Executor(cm, make_device(target, cfg))
    t0 = time.perf_counter()
    _run_chunked(ex, cm, x)
    wall = time.perf_counter() - t0
    rows, tot_c, tot_b, host = [], 0, 0, 0.0
    for s in cm.steps:
        st = ex.stats[s.name]
        if s.target == "vta":
            comp, mem = s.bounds(cfg, st.blocks)
            bound = max(comp, mem)
            tot_c += st.cycles
            tot_b += bound
            rows.append((s, st, bound, "compute" if comp >= mem else "memory"))
        else:
            host += st.host_seconds
            rows.append((s, st, None, ""))
    w = max((len(s.name) for s in cm.steps), default=4)
    click.echo(f"{cm.name} on {target} ({cfg.bitstream_name}), {wall:.2f} s wall; cycles at "
               f"{cfg.CLOCK_MHZ:g} MHz")
    click.echo(f"  {'step':<{w}}  {'where':<17} {'cycles':>10} {'share':>6} {'bound':>10} {'eff':>5} "
               f"{'bound by':>8} {'compute busy':>12} {'load stall':>10} {'store stall':>11}  host s")
    for s, st, bound, kind in rows:
        where = cm.where(s)
        if s.target == "vta":
            cyc = st.cycles
            share = f"{100 * cyc / tot_c:5.1f}%" if tot_c else "   - "
            eff = f"{bound / cyc:5.2f}" if cyc else "  -  "
            busy = f"{100 * st.extra.get('compute_busy', 0) / cyc:11.1f}%" if cyc else f"{'-':>12}"
            ls = f"{st.extra.get('load_stall', 0):>10}" if cyc else f"{'-':>10}"
            ss = f"{st.extra.get('store_stall', 0):>11}" if cyc else f"{'-':>11}"
            click.echo(f"  {s.name:<{w}}  {where:<17} {cyc:>10} {share:>6} {bound:>10} {eff:>5} {kind:>8} "
                       f"{busy} {ls} {ss}")
        else:
            click.echo(f"  {s.name:<{w}}  {where:<17} {'':>10} {'':>6} {'':>10} {'':>5} {'':>8} "
                       f"{'':>12} {'':>10} {'':>11}  {st.host_seconds:.4f}")
    eff = f"{tot_b / tot_c:.2f}" if tot_c else "-"
    click.echo(f"  total VTA: {tot_c} cycles ({tot_c / cfg.CLOCK_MHZ:.1f} us at {cfg.CLOCK_MHZ:g} MHz), "
               f"bound {tot_b}, efficiency {eff}; CPU steps {host:.3f} s on the host")
    if target == "fsim":
        click.echo("  (fsim counts micro-ops, not cycles: use --target rtl for cycles and counters)")


COMMANDS = [profile_cmd]
