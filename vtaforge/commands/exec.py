"""``vtaforge exec BUNDLE.npz``: run a raw program (DRAM image + instruction location) on a
backend and report its statistics (see docs/cli.md for the bundle contract)."""

from __future__ import annotations

import json

import click


@click.command("exec")
@click.argument("bundle", type=click.Path(dir_okay=False))
@click.option("--config", "config_spec", default="pynq", show_default=True,
              help="preset name or vta_config.json file")
@click.option("--target", default="fsim", show_default=True, help="backend: fsim, rtl or pynq (on the board)")
@click.option("-o", "--output", type=click.Path(dir_okay=False), default=None,
              help="write the final image, cycles and stats to this .npz")
@click.option("--max-steps", type=click.IntRange(min=1), default=None,
              help="watchdog (>= 1): fsim steps (one per instruction and per micro-op); rtl "
                   "cycles (exact: the run's CYCLES must not exceed it)")
@click.option("--trace", "trace", type=click.Path(dir_okay=False), default=None,
              help="rtl only: write a waveform of the run to this file (.vcd, or .fst with "
                   "liblz4-dev installed)")
def exec_cmd(bundle: str, config_spec: str, target: str, output: str | None,
             max_steps: int | None, trace: str | None) -> None:
    """Run the program in BUNDLE (.npz with dram, insn_addr, insn_count) and print its
    statistics as JSON; with -o also save the final DRAM image.  A bundle that records
    the fingerprint of the config it was built for runs only under that config."""
    from ..runtime.bundle import TARGETS, run_raw, save_result
    from ..runtime.device import DeviceError
    from ._inputs import read_bundle, read_config
    from ._output import check_output_path

    cfg = read_config(config_spec)
    if target not in TARGETS:
        raise DeviceError(f"unknown target {target!r}; allowed: {', '.join(TARGETS)}")
    if trace is not None and target != "rtl":
        raise DeviceError(f"--trace writes a waveform of the rtl target only, not {target!r}")
    if output is not None:
        check_output_path(output, "-o/--output")
    if trace is not None:
        check_output_path(trace, "--trace")
    dram, insn_addr, insn_count = read_bundle(bundle, config=cfg)
    kw = {}
    if max_steps is not None:
        kw = {"timeout_cycles" if target == "rtl" else "max_steps": max_steps}
    if trace is not None:
        kw["trace"] = trace
    result = run_raw(target, cfg, dram, insn_addr, insn_count, **kw)
    if output:
        save_result(output, dram, result)
    click.echo(json.dumps({"target": target, "cycles": int(result.cycles),
                           "stats": result.stats}, sort_keys=True))


COMMANDS = [exec_cmd]
