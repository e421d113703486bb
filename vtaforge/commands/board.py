"""``vtaforge board``: the Vivado bitstream flow for PYNQ-class Zynq boards.

- ``vtaforge board project --config PRESET|FILE -o DIR [--board B] [--board-part BP]
  [--jobs N]``:
  writes the Vivado project files (core Verilog, ``vta_wrapper.v``, ``build.tcl``,
  ``build.sh``, ``regmap.json``, ``vta_regs.h``, ``board.json``) into DIR.
- ``vtaforge board build DIR``: runs Vivado on DIR (needs ``vivado`` on PATH) and prints the
  timing verdict.
- ``vtaforge board timing REPORT.txt [--json]``: reads a Vivado ``report_timing_summary``
  and prints met / WNS / fmax; exit status 1 when timing is not met (or unconstrained),
  2 on errors (unreadable file, not a timing report, Vivado missing or failing).

(``vtaforge hw`` is another module's group, so these live under ``board``.)
"""

from __future__ import annotations

import json
import sys
import warnings
from pathlib import Path

import click


@click.group("board")
def board_group() -> None:
    """Build bitstreams for Zynq boards (Vivado project generation, timing reports)."""


class _FlowFailure(click.ClickException):
    """A flow error: one line, exit status 2 (exit 1 means "timing not met")."""

    exit_code = 2


def _flow_error(e: Exception) -> click.ClickException:
    return _FlowFailure(str(e).splitlines()[0])


@board_group.command("project")
@click.option("--config", "spec", default="pynq", show_default=True,
              help="preset name or vta_config.json file")
@click.option("-o", "--out", "out_dir", required=True, type=click.Path(file_okay=False),
              help="project directory (created if missing)")
@click.option("--board", default=None,
              help="pynq-z1, pynq-z2, ultra96-v2 or zcu104 (default: the config's target board)")
@click.option("--board-part", default=None,
              help="Vivado board part (e.g. xilinx.com:zcu104:part0:1.1) to apply its PS preset")
@click.option("--jobs", default=2, show_default=True, type=click.IntRange(min=1),
              help="Vivado run jobs (>= 1)")
def project_cmd(spec: str, out_dir: str, board: str | None, board_part: str | None,
                jobs: int) -> None:
    """Write the Vivado project for the config into OUT (run OUT/build.sh where Vivado is)."""
    from ..hw.config import load_config
    from ..hw.flow import FlowError, FlowWarning, board_spec, pl_clock, write_project

    cfg = load_config(spec)
    try:
        spec_b = board_spec(cfg, board)
        mhz = pl_clock(spec_b, cfg.CLOCK_MHZ).mhz
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always", FlowWarning)
            files = write_project(cfg, out_dir, board=board, board_part=board_part, jobs=jobs)
    except FlowError as e:
        raise _flow_error(e) from None
    for w in caught:
        click.echo(f"warning: {w.message}", err=True)
    click.echo(f"wrote {len(files)} files to {out_dir}: "
               + ", ".join(p.name for p in files.values()))
    click.echo(f"{spec_b.title}: part {spec_b.part or cfg.PART}, {spec_b.ps_ip}, clock "
               f"{mhz:.6g} MHz, registers at "
               f"0x{spec_b.reg_base:08X}, fingerprint 0x{cfg.fingerprint:08x}")
    click.echo(f"next: cd {out_dir} && ./build.sh   (needs Vivado; writes out/vta.bit, "
               f"out/vta.hwh)")


def _print_timing(res, as_json: bool) -> None:
    if as_json:
        click.echo(json.dumps({"met": res.met, "wns_ns": res.wns_ns, "whs_ns": res.whs_ns,
                               "fmax_mhz": res.fmax_mhz, "clock": res.clock,
                               "period_ns": res.period_ns, "reason": res.reason},
                              sort_keys=True))
        return
    wns = "n/a" if res.wns_ns is None else f"{res.wns_ns:+.3f} ns"
    fmax = "n/a" if res.fmax_mhz is None else f"{res.fmax_mhz:.1f} MHz"
    clk = "" if res.period_ns is None else f" (clock {res.clock}, {1000 / res.period_ns:g} MHz)"
    click.echo(f"timing: {'MET' if res.met else 'NOT MET'}{clk}")
    click.echo(f"WNS: {wns}")
    click.echo(f"fmax: {fmax}")
    click.echo(res.reason)


def _report_verdict(res, as_json: bool) -> None:
    """Print a timing verdict (:func:`_print_timing`) and exit with status 1 when timing is
    not met (shared tail of ``board timing`` and ``board build``)."""
    _print_timing(res, as_json)
    if not res.met:
        sys.exit(1)


@board_group.command("timing")
@click.argument("report", type=click.Path(dir_okay=False))
@click.option("--json", "as_json", is_flag=True, help="print JSON")
def timing_cmd(report: str, as_json: bool) -> None:
    """Read a Vivado report_timing_summary REPORT; print met, WNS and fmax (exit 1 if not
    met)."""
    from ..hw.flow import FlowError, parse_timing_summary

    try:
        text = Path(report).read_text()
    except OSError as e:
        raise _FlowFailure(f"cannot read {report!r}: {e.strerror or e}") from None
    except UnicodeDecodeError:
        raise _FlowFailure(f"{report!r} is not a text file (not a Vivado timing "
                           f"summary)") from None
    try:
        res = parse_timing_summary(text)
    except FlowError as e:
        raise _flow_error(e) from None
    _report_verdict(res, as_json)


@board_group.command("build")
@click.argument("project_dir", type=click.Path(file_okay=False))
@click.option("--json", "as_json", is_flag=True, help="print the timing verdict as JSON")
def build_cmd(project_dir: str, as_json: bool) -> None:
    """Run Vivado on a project written by `board project` (hours; needs vivado on PATH)."""
    from ..hw.flow import FlowError, run_vivado

    try:
        res = run_vivado(project_dir)
    except FlowError as e:
        raise _flow_error(e) from None
    _report_verdict(res, as_json)


COMMANDS = [board_group]
