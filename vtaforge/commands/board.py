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
- ``vtaforge board package --config C --bitstream X.bit [--hwh X.hwh] --model M.vtapkg
  ... -o DIR [--wheel W.whl]``: a self-contained folder for one board (overlay, config,
  models, wheel, manifest.json with sha256s, run.sh, verify.py, a notebook); refuses a
  model or a bitstream built for another config (:mod:`vtaforge.runtime.board`).
- ``vtaforge board verify DIR``: checks a package's files against its manifest.
- ``vtaforge board deploy DIR --host USER@HOST [--run X.npy] [--model NAME]``: copies a
  package over ssh (rsync or scp), verifies and installs it there, optionally runs a model
  and fetches the output and the run's statistics.

(``vtaforge hw`` is another module's group, so these live under ``board``.)
"""

from __future__ import annotations

import json
import sys
import warnings
from pathlib import Path

import click

from ..hw.parts import board_names
from ..hw.vivado import MAX_VIVADO_JOBS


def board_list() -> str:
    """The boards of hw/parts.py and their aliases as ``--board``'s help names them
    (``a, b, c or d``)."""
    names = board_names(aliases=True)
    return ", ".join(names[:-1]) + " or " + names[-1] if len(names) > 1 else names[0]


@click.group("board")
def board_group() -> None:
    """Zynq boards: bitstreams, board packages, deployment.

    Vivado projects (project), their builds (build) and timing reports (timing);
    self-contained board packages (package, verify) and their deployment over ssh
    (deploy)."""


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
              help=f"{board_list()} (default: the config's target board)")
@click.option("--board-part", default=None,
              help="Vivado board part (e.g. xilinx.com:zcu104:part0:1.1) to apply its PS preset")
@click.option("--jobs", default=2, show_default=True,
              type=click.IntRange(min=1, max=MAX_VIVADO_JOBS),
              help=f"Vivado run jobs (1..{MAX_VIVADO_JOBS})")
def project_cmd(spec: str, out_dir: str, board: str | None, board_part: str | None,
                jobs: int) -> None:
    """Write the Vivado project for the config into OUT (run OUT/build.sh where Vivado is)."""
    from ..hw.parts import FlowError, board_spec, check_board_part, pl_clock
    from ..hw.vivado import FlowWarning, write_project
    from ._inputs import read_config
    from ._output import check_output_dir

    cfg = read_config(spec)
    check_output_dir(out_dir, "-o/--out")
    try:
        spec_b = board_spec(cfg, board)
        if board_part is not None:
            check_board_part(spec_b, board_part)
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
    from ..hw.parts import FlowError
    from ..hw.vivado import parse_timing_summary
    from ._inputs import check_regular

    check_regular(report, "timing report", _FlowFailure)
    try:
        if Path(report).is_file() and Path(report).stat().st_size > (256 << 20):
            raise _FlowFailure(f"{report!r} is larger than 256 MiB: not a Vivado timing "
                               f"summary")
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
    from ..hw.parts import FlowError
    from ..hw.vivado import run_vivado

    try:
        res = run_vivado(project_dir)
    except FlowError as e:
        raise _flow_error(e) from None
    _write_sidecar(project_dir, res)
    _report_verdict(res, as_json)


def _write_sidecar(project_dir: str, res) -> None:
    """Best effort, silent: ``out/vta.json`` beside the bitstream (fingerprint, config,
    sha256, timing), which ``board package`` checks; the project's board.json stands in
    when it is missing, so a failure here does not fail the build."""
    from ..runtime.board import DeployError, write_bitstream_sidecar

    try:
        write_bitstream_sidecar(project_dir, res)
    except (DeployError, OSError, ValueError):
        pass


# ---------------------------------------------------------------------------- packages
class _DeployFailure(click.ClickException):
    """A package or deploy error: one ``error:`` line, exit status 2."""

    exit_code = 2


def _deploy_error(e: Exception) -> click.ClickException:
    return _DeployFailure((str(e).strip().splitlines() or [type(e).__name__])[0])


def _mb(nbytes: int) -> str:
    return f"{nbytes / 1e6:.1f} MB" if nbytes >= 1e5 else f"{nbytes / 1e3:.1f} kB"


@board_group.command("package")
@click.option("--config", "spec", required=True, help="preset name or vta_config.json file")
@click.option("--bitstream", required=True, type=click.Path(dir_okay=False),
              help="the .bit (out/vta.bit of a board project)")
@click.option("--hwh", default=None, type=click.Path(dir_okay=False),
              help="its .hwh (default: the .bit's name with .hwh)")
@click.option("--model", "models", multiple=True, required=True,
              type=click.Path(dir_okay=False), help="a .vtapkg compiled for the config "
              "(repeat for several)")
@click.option("-o", "--out", "out_dir", required=True, type=click.Path(file_okay=False),
              help="package folder (new, empty, or an earlier package, which is replaced)")
@click.option("--wheel", default=None, type=click.Path(dir_okay=False),
              help="a vtaforge wheel to ship (default: build one from this source tree, or pack "
              "the installed vtaforge; cached)")
@click.option("--bitstream-info", default=None, type=click.Path(dir_okay=False),
              help="the bitstream's sidecar NAME.json or its project's board.json "
              "(default: found beside or above the .bit)")
@click.option("--allow-unmet-timing", is_flag=True,
              help="package a bitstream whose sidecar says timing was not met")
def package_cmd(spec, bitstream, hwh, models, out_dir, wheel, bitstream_info,
                allow_unmet_timing) -> None:
    """Write a self-contained folder for one board: overlay, config, models, the vtaforge
    wheel, manifest.json (sha256s), run.sh, verify.py and a Jupyter notebook."""
    from ..runtime.board import DeployError, make_package, source_tree
    from ._inputs import check_regular
    from ._output import check_output_dir

    for opt, paths in (("--bitstream", [bitstream]), ("--hwh", [hwh]), ("--model", models),
                       ("--wheel", [wheel]), ("--bitstream-info", [bitstream_info]),
                       ("--config", [spec])):
        for p in paths:
            if p is not None:
                check_regular(p, opt, _DeployFailure)
    check_output_dir(out_dir, "-o/--out")
    try:
        r = make_package(spec, bitstream, hwh, list(models), out_dir, wheel=wheel,
                         bitstream_info=bitstream_info, allow_unmet_timing=allow_unmet_timing)
    except DeployError as e:
        raise _deploy_error(e) from None
    m = r.manifest
    total = sum(f["size"] for f in m["files"].values())
    click.echo(f"package {r.out}: {len(m['files'])} files, {_mb(total)} (manifest.json)")
    c, o, b = m["config"], m["overlay"], m["board"]
    click.echo(f"  config {c['bitstream_name']} (fingerprint {c['fingerprint']}), "
               f"{b['title']}, part {b['part']}, {c['clock_mhz']:g} MHz")
    t = o["timing"]
    tim = "" if not t else (f"; timing {'met' if t.get('met') else 'NOT met'}"
                            + (f", WNS {t['wns_ns']:+.3f} ns" if t.get("wns_ns") is not None
                               else ""))
    base = "" if o["reg_base"] is None else f"; registers at 0x{o['reg_base']:08X}"
    click.echo(f"  overlay {o['bitstream']} + vta.hwh: fingerprint {o['fingerprint']} from "
               f"{o['fingerprint_from']}{tim}{base}")
    for e in m["models"]:
        click.echo(f"  model {e['name']} ({e['model']}) -> {e['file']}: "
                   f"{e['steps_on_vta']}/{e['steps']} steps on VTA")
    how = ("passed with --wheel" if r.wheel_cached is None else
           "from the cache" if r.wheel_cached else "built from the source tree"
           if source_tree() is not None else "packed from the installed vtaforge")
    click.echo(f"  wheel {m['wheel']['file']} ({how})")
    for n in r.notes:
        click.echo(f"  note: {n}")
    click.echo(f"next: vtaforge board deploy {r.out} --host xilinx@BOARD --run INPUT.npy   "
               f"(or on the board: sh run.sh run INPUT.npy)")


@board_group.command("verify")
@click.argument("package_dir", type=click.Path(file_okay=False))
def verify_cmd(package_dir) -> None:
    """Check every file of a package against its manifest.json (sha256, size)."""
    from ..runtime.board import DeployError, verify_package
    from ._inputs import read_json

    manifest = Path(package_dir) / "manifest.json"
    if manifest.exists():       # not JSON, too deeply nested, a FIFO: one line
        read_json(str(manifest), "package manifest")
    notes: list[str] = []
    try:
        m = verify_package(package_dir, notes)
    except DeployError as e:
        raise _deploy_error(e) from None
    click.echo(f"verify: {len(m['files'])} files of {package_dir} match manifest.json "
               f"(config fingerprint {m['config']['fingerprint']})")
    for n in notes:
        click.echo(f"verify: note: {n}")


@board_group.command("deploy")
@click.argument("package_dir", type=click.Path(file_okay=False))
@click.option("--host", required=True, help="USER@HOST (or an ssh config alias)")
@click.option("--run", "run_input", default=None, type=click.Path(dir_okay=False),
              help="run a model on this input .npy on the board and fetch the results")
@click.option("--model", default=None, help="the model to run (default: the only one)")
@click.option("--remote-dir", default=None,
              help="the package's folder on the board (default: vtaforge/PACKAGE under "
              "the remote home)")
@click.option("-o", "--out", "out_dir", default=None, type=click.Path(file_okay=False),
              help="local folder for output.npy, stats.json, run.log (default: "
              "PACKAGE-results/MODEL-INPUT)")
@click.option("--copy", default="auto", show_default=True,
              type=click.Choice(["auto", "rsync", "scp"]),
              help="how to copy (auto: rsync when both sides have it, else scp -r)")
@click.option("--sudo", is_flag=True, help="run run.sh with sudo -n on the board")
@click.option("--timeout", "timeout_s", default=600.0, show_default=True,
              type=click.FloatRange(min=1), help="seconds allowed for each ssh/scp/rsync")
def deploy_cmd(package_dir, host, run_input, model, remote_dir, out_dir, copy, sudo,
               timeout_s) -> None:
    """Copy a package to a board over ssh, verify and install it there, optionally run a
    model on an input and fetch the output and the run's statistics."""
    import math

    from ..runtime.board import DeployError, deploy
    from ._inputs import check_regular
    from ._output import check_output_dir

    if not math.isfinite(timeout_s):
        raise click.BadParameter(f"{timeout_s} is not a finite number of seconds",
                                 param_hint="'--timeout'")
    if run_input is not None:
        check_regular(run_input, "--run", _DeployFailure)
    if out_dir is not None:     # fetched into after the run on the board: checked first
        check_output_dir(out_dir, "-o/--out")
    try:
        r = deploy(package_dir, host, run_input=run_input, model=model, remote_dir=remote_dir,
                   out_dir=out_dir, copy=copy, sudo=sudo, timeout_s=timeout_s,
                   echo=click.echo)
    except DeployError as e:
        raise _deploy_error(e) from None
    if r.stats is None:
        click.echo(f"deployed to {r.remote}")
        return
    s = r.stats
    wall = s.get("wall_s")
    wall_s = f"{wall:.2f} s wall" if isinstance(wall, (int, float)) else "wall time n/a"
    click.echo(f"ran {s.get('model')} on {s.get('target')}: output {s.get('output_shape')}, "
               f"{s.get('steps_on_vta')}/{s.get('steps')} steps on VTA, {wall_s}")
    click.echo(f"fetched into {r.out}: output.npy, stats.json, run.log")


COMMANDS = [board_group]
