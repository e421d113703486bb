"""``vtaforge hw``: generate the core's RTL and estimate its resources and timing.

- ``vtaforge hw verilog --config PRESET|FILE -o DIR``: writes ``DIR/vta_core.v``,
  ``DIR/regmap.json`` and ``DIR/vta_regs.h``.
- ``vtaforge hw resources --config PRESET|FILE [--part xc7z020] [--json] [--no-progress]``:
  Yosys ``synth_xilinx`` estimate of LUT, FF, DSP48 and BRAM next to the part's capacity.
- ``vtaforge hw timing --config PRESET|FILE [--device 85k] [--json] [--no-progress]``: fmax
  proxy from yosys ``synth_ecp5`` + nextpnr-ecp5 place and route (an ECP5 figure, not a
  Zynq result).

Both run for minutes (tiny: 155 s and 210 s) in a child process that reports nothing until
it ends, so on a terminal they show the elapsed time on stderr (``--no-progress``: none).
"""

from __future__ import annotations

import json
from pathlib import Path

import click


@click.group("hw")
def hw_group() -> None:
    """Generate and measure the VTA core's hardware."""


#: Verilog-2005 reserved words (IEEE 1364-2005 annex B): not usable as a module name.
_VERILOG_KEYWORDS = frozenset("""
always and assign automatic begin buf bufif0 bufif1 case casex casez cell cmos config deassign
default defparam design disable edge else end endcase endconfig endfunction endgenerate
endmodule endprimitive endspecify endtable endtask event for force forever fork function
generate genvar highz0 highz1 if ifnone incdir include initial inout input instance integer
join large liblist library localparam macromodule medium module nand negedge nmos nor
noshowcancelled not notif0 notif1 or output parameter pmos posedge primitive pull0 pull1
pulldown pullup pulsestyle_onevent pulsestyle_ondetect rcmos real realtime reg release repeat
rnmos rpmos rtran rtranif0 rtranif1 scalared showcancelled signed small specify specparam
strong0 strong1 supply0 supply1 table task time tran tranif0 tranif1 tri tri0 tri1 triand
trior trireg unsigned use uwire vectored wait wand weak0 weak1 while wire wor xnor xor
""".split())


@hw_group.command("verilog")
@click.option("--config", "spec", default="pynq", show_default=True,
              help="preset name or vta_config.json file")
@click.option("-o", "--out", "out_dir", required=True, type=click.Path(file_okay=False),
              help="output directory (created if missing)")
@click.option("--name", default="vta_core", show_default=True, help="top module name")
def verilog_cmd(spec: str, out_dir: str, name: str) -> None:
    """Write the core's Verilog, register map JSON and C header into OUT."""
    import re

    from ._inputs import read_config

    if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", name):  # before creating OUT
        raise click.BadParameter(f"{name!r} is not a Verilog identifier",
                                 param_hint="'--name'")
    if name in _VERILOG_KEYWORDS:
        raise click.BadParameter(f"{name!r} is a Verilog keyword, not a module name",
                                 param_hint="'--name'")
    if not out_dir.strip():
        raise click.BadParameter("the output directory is empty", param_hint="'-o/--out'")
    cfg = read_config(spec)
    from ._output import check_output_dir

    check_output_dir(out_dir, "-o/--out")
    from ..hw.core import emit_verilog
    from ..hw.regs import c_header, regmap_json

    d = Path(out_dir)
    d.mkdir(parents=True, exist_ok=True)
    text = emit_verilog(cfg, name=name)
    (d / f"{name}.v").write_text(text)
    (d / "regmap.json").write_text(regmap_json(cfg))
    (d / "vta_regs.h").write_text(c_header(cfg))
    click.echo(f"wrote {d / (name + '.v')} ({len(text)} bytes), {d / 'regmap.json'}, "
               f"{d / 'vta_regs.h'} (fingerprint 0x{cfg.fingerprint:08x})")


@hw_group.command("resources")
@click.option("--config", "spec", default="pynq", show_default=True,
              help="preset name or vta_config.json file")
@click.option("--part", default="xc7z020", show_default=True,
              help="part whose capacity to compare with (xc7z020, xczu3eg, xczu7ev)")
@click.option("--json", "as_json", is_flag=True, help="print JSON instead of a table")
@click.option("--no-progress", is_flag=True,
              help="no elapsed-time line (none either when stderr is not a terminal)")
def resources_cmd(spec: str, part: str, as_json: bool, no_progress: bool) -> None:
    """Estimate LUT/FF/DSP/BRAM with Yosys synth_xilinx (minutes for the pynq core)."""
    from ._inputs import read_config
    from ._output import progress_enabled, progress_ticker
    from ..hw.estimate import EstimateError, estimate_resources, format_report, part_info

    cfg = read_config(spec)
    try:
        cap = part_info(part)
        with progress_ticker(f"hw resources {cfg.bitstream_name}: yosys synth_xilinx "
                             f"({part})", progress_enabled(no_progress)):
            res = estimate_resources(cfg, part)
    except EstimateError as e:
        raise click.ClickException(str(e)) from None
    if as_json:
        d = res.as_dict()
        d.update({"config": spec, "part": part, "capacity": {k: cap[k] for k in
                                                            ("lut", "ff", "dsp", "bram36")},
                  "fits": res.fits(part)})
        click.echo(json.dumps(d, indent=2, sort_keys=True))
    else:
        click.echo(format_report(spec, res, part))


@hw_group.command("timing")
@click.option("--config", "spec", default="tiny", show_default=True,
              help="preset name or vta_config.json file")
@click.option("--device", default="85k", show_default=True,
              type=click.Choice(["25k", "45k", "85k"]), help="ECP5 device for nextpnr")
@click.option("--seed", default=1, show_default=True, type=int, help="placer seed")
@click.option("--timeout", "timeout_s", default=3600.0, show_default=True,
              type=click.FloatRange(min=1.0), help="wall-time budget in seconds")
@click.option("--workdir", default=None, type=click.Path(file_okay=False),
              help="keep the netlist, logs and report here")
@click.option("--json", "as_json", is_flag=True, help="print JSON instead of text")
@click.option("--no-progress", is_flag=True,
              help="no elapsed-time line (none either when stderr is not a terminal)")
def timing_cmd(spec: str, device: str, seed: int, timeout_s: float, workdir: str | None,
               as_json: bool, no_progress: bool) -> None:
    """Open-source fmax proxy: Yosys synth_ecp5 + nextpnr-ecp5 (minutes; not a Zynq result)."""
    from ._inputs import read_config
    from ._output import progress_enabled, progress_ticker
    from ..hw.timing import TimingError, estimate_fmax, format_estimate

    import math

    if not math.isfinite(timeout_s):
        raise click.BadParameter(f"{timeout_s} is not a finite number of seconds",
                                 param_hint="'--timeout'")
    cfg = read_config(spec)
    if workdir is not None and Path(workdir).exists() and not Path(workdir).is_dir():
        raise click.BadParameter(f"{workdir!r} exists and is not a directory",
                                 param_hint="'--workdir'")
    if workdir is not None:
        from ._output import check_output_dir

        check_output_dir(workdir, "--workdir")
    try:
        with progress_ticker(f"hw timing {cfg.bitstream_name}: yosys synth_ecp5 + "
                             f"nextpnr-ecp5 ({device})", progress_enabled(no_progress)):
            est = estimate_fmax(cfg, device=device, workdir=workdir, seed=seed,
                                timeout_s=timeout_s)
    except TimingError as e:
        raise click.ClickException(str(e)) from None
    if as_json:
        d = est.as_dict()
        d.update({"config": spec, "fingerprint": f"0x{cfg.fingerprint:08x}"})
        click.echo(json.dumps(d, indent=2, sort_keys=True))
    else:
        click.echo(format_estimate(spec, est))


COMMANDS = [hw_group]
