"""``vtaforge dse``: design-space exploration of VTA configurations.

- ``vtaforge dse run [--board BOARD] [--space default|FILE.json]
  [--base pynq] [--workloads resnet18-c2,c5] [--size 14] [--part xc7z020] [--samples N]
  [--seed S] [--resources analytic|yosys]
  [--perf model|rtl|none] [--timing FILE.json] [--cache FILE.jsonl] [-o report.json]
  [--csv points.csv] [--jobs N | --scheduler tcp://host:port] [--verify rtl,yosys]
  [--budget N] [--within PCT] [--plot OUT.png] [--accuracy digits|MODEL.onnx:DATA.npz]
  [--widths 8,16,w4,a4,a4w4] [--accuracy-floor PCT] [--no-progress]``:
  evaluate the space, print the table and best designs, write the JSON report.
  ``BOARD``: a name from :func:`~vtaforge.hw.parts.board_names` (with aliases; the
  ``--board`` help lists them).
- ``vtaforge dse show report.json [--all] [--feasible]``: print a saved report.

See docs/dse.md.  Bad input (space, workload list, part, timing file, accuracy model or
labelled data, a space whose every config is refused) is one ``error:`` line, exit status 2.
"""

from __future__ import annotations

import math
import sys

import click

from ..hw.parts import board_names


#: The largest ``--jobs``: a LocalCluster on one machine (Dask starts every worker process
#: up front; a million of them never came up).  More workers: a ``--scheduler``.
MAX_JOBS = 256


def _fail(msg: str) -> None:
    click.echo(f"error: {msg}", err=True)
    sys.exit(2)


@click.group("dse")
def dse_group() -> None:
    """Explore VTA hardware parameters against workloads."""


@dse_group.command("run")
@click.option("--board", default=None,
              help=f"{' | '.join(board_names(aliases=True))} (hw/parts.py): sets part, bus, "
                   "clock and the space")
@click.option("--space", "space_spec", default="default", show_default=True,
              help="'default' (around --base) or a space JSON file")
@click.option("--base", default="pynq", show_default=True,
              help="base config of the default space (preset or JSON file)")
@click.option("--workloads", "wl_spec", default="resnet18-c2,c5", show_default=True,
              help="e.g. resnet18-c2,c5 | resnet18 | resnet18-c2..c11 | mobilenet-d1 | digits | "
                   "resnet18-net,mobilenet-net (whole networks)")
@click.option("--size", default="14", show_default=True,
              help="cap on layer height/width (reduced spatial size), or 'full'")
@click.option("--part", default=None,
              help="part to fit (xc7z020, xczu3eg, xczu7ev); default: the board's, else "
                   "xc7z020")
@click.option("--samples", type=click.IntRange(min=1), default=None,
              help="random sample of N grid points (N >= 1)")
@click.option("--seed", type=click.IntRange(min=0), default=0, show_default=True,
              help="sampling seed (>= 0)")
@click.option("--resources", "res_mode", type=click.Choice(["analytic", "yosys"]),
              default="analytic", show_default=True)
@click.option("--perf", "perf_mode", type=click.Choice(["model", "rtl", "none"]),
              default="model", show_default=True)
@click.option("--dram-latency", type=float, default=0.0, show_default=True,
              help="cycle model: cycles of DRAM latency per row burst (finite, >= 0)")
@click.option("--timing", "timing_file", default=None,
              help="JSON: fingerprint or bitstream -> {slack_ns | fmax_mhz}")
@click.option("--cache", "cache_file", default=None,
              help="append-only result cache, JSON lines (default: next to -o as "
                   "<report>.cache.jsonl)")
@click.option("-o", "--out", "out_file", default=None, help="write the JSON report here")
@click.option("--csv", "csv_file", default=None, help="write every point as a CSV row here")
@click.option("--limit", type=click.IntRange(min=1), default=30, show_default=True,
              help="table rows shown (>= 1)")
@click.option("--jobs", "-j", type=click.IntRange(min=0, max=MAX_JOBS), default=None,
              help=f"evaluate on a Dask LocalCluster of N worker processes (0 or 1, or no "
                   f"--jobs: serial, in process; at most {MAX_JOBS}: a larger pool is a "
                   f"--scheduler's job)")
@click.option("--scheduler", default=None,
              help="evaluate on the Dask scheduler at this address (tcp://host:8786)")
@click.option("--verify", "verify_spec", default=None,
              help="promote the Pareto front and the points within the model's error band "
                   "to these rungs: rtl, yosys or rtl,yosys (no MAC cap)")
@click.option("--budget", type=click.IntRange(min=0), default=None,
              help="at most N points promoted by --verify (default 4)")
@click.option("--within", "within_pct", type=click.FloatRange(min=0), default=None,
              help="also pick the smallest design within PCT % of the best latency "
                   "(finite, >= 0)")
@click.option("--plot", "plot_file", default=None,
              help="write a PNG: Pareto plot of the part (preset and pick marked), and "
                   "model vs RTL when --verify rtl ran")
@click.option("--accuracy", "accuracy_set", default=None, metavar="digits|MODEL.onnx:DATA.npz",
              help="also measure top-1 accuracy per width on fsim (an objective): 'digits' "
                   "(the bundled digits CNN, 500 held-out images) or your single-input ONNX "
                   "model with a .npz of labelled inputs: x [N, ...] (the model's input), y "
                   "(integer labels [N], against the argmax over the first output's last axis), "
                   "optional "
                   "calib [M, ...] (default: the first 256 of x)")
@click.option("--widths", "widths_spec", default=None,
              help="add a width axis: comma-separated operand widths, 8, 16, w4, a4 and/or "
                   "a4w4 (int8 / int16 activations and weights: LOG_WIDTH 3 / 4; w4: int8 "
                   "activations, int4 weights: LOG_INP_WIDTH 3, LOG_WGT_WIDTH 2; a4: int4 "
                   "activations and outputs, int8 weights: 2, 3; a4w4: int4 both: 2, 2)")
@click.option("--accuracy-floor", "accuracy_floor", type=click.FloatRange(min=0, max=100),
              default=None, metavar="PCT",
              help="with --accuracy: pick (for latency, resources, --within) only designs "
                   "of at least PCT % top-1 accuracy  [default: 1 point below the best "
                   "feasible accuracy]")
@click.option("--no-progress", is_flag=True,
              help="no progress bar (none either when stderr is not a terminal)")
def run_cmd(board, space_spec, base, wl_spec, size, part, samples, seed, res_mode, perf_mode,
            dram_latency, timing_file, cache_file, out_file, csv_file, limit, jobs, scheduler,
            verify_spec, budget, within_pct, plot_file, accuracy_set, widths_spec,
            accuracy_floor, no_progress) -> None:
    """Evaluate a space of configs against workloads and report the best designs."""
    from ..dse import DSEError
    from ..dse.promote import parse_verify
    from ..dse.space import SpaceError
    from ..hw.config import ConfigError

    _check_files(out_file, cache_file, csv_file, plot_file, within_pct, base, space_spec,
                 timing_file)
    try:
        verify = parse_verify(verify_spec)
        _check_flag_pairs(verify, budget, accuracy_set, accuracy_floor)
        sz = _parse_size(size)
        if samples is not None and samples < 1:
            raise DSEError(f"--samples {samples} must be a positive integer")
        space, part = _space_and_part(board, space_spec, base, part, widths_spec)
        wls, ev, timing = _evaluation(wl_spec, sz, part, res_mode, perf_mode, dram_latency,
                                      accuracy_set, timing_file)
    except (DSEError, SpaceError, ConfigError) as e:
        _fail(str(e))
        return
    if jobs is not None and scheduler:
        _fail("--jobs and --scheduler are exclusive (the scheduler's workers are the jobs)")
        return
    cache_file = _cache_file(cache_file, out_file)
    _announce(space, samples, wls, part, board, timing)
    floor = None if accuracy_floor is None else accuracy_floor / 100.0
    results, vsec = _sweep(space, wls, ev, cache_file, timing, samples, seed, no_progress,
                           jobs, scheduler, verify, budget, within_pct, floor)
    from ..dse.report import build_report

    rep = build_report(results, wls, ev, preset=space.base, verify=vsec, within=within_pct,
                       accuracy_floor=floor)
    _write_outputs(rep, limit, out_file, csv_file, plot_file)


def _check_files(out_file, cache_file, csv_file, plot_file, within_pct, base, space_spec,
                 timing_file) -> None:
    """Before any work: the output paths (writable, a ``.png`` plot with matplotlib
    installed), a finite ``--within``, and the JSON inputs through the input boundary (one
    line for a file that is not UTF-8 JSON or is nested too deeply, before the readers of
    dse/ see it).  Exits with status 2 (or a ClickException) on the first problem."""
    from ._inputs import check_regular, read_json
    from ._output import check_output_path

    for path, flag in ((out_file, "-o/--out"), (cache_file, "--cache"), (csv_file, "--csv"),
                       (plot_file, "--plot")):
        if path is not None:
            check_output_path(path, flag)
    if plot_file is not None:
        if not str(plot_file).lower().endswith(".png"):
            _fail(f"--plot {plot_file!r}: the plot is a PNG; the name must end in .png")
        try:    # before the sweep, not after it
            import matplotlib  # noqa: F401
        except ImportError:
            _fail("--plot needs matplotlib: pip install 'vtaforge[dse]'")
    if within_pct is not None and not math.isfinite(within_pct):
        _fail(f"--within {within_pct} must be a finite percentage (>= 0)")
    check_regular(base, "base config", click.ClickException)
    if space_spec != "default":
        read_json(space_spec, "space file")
    if timing_file:
        read_json(timing_file, "timing file")


def _check_flag_pairs(verify, budget, accuracy_set, accuracy_floor) -> None:
    """Flags that need another one.  Raises DSEError: ``--budget`` without ``--verify``,
    ``--accuracy-floor`` without ``--accuracy`` or not finite."""
    from ..dse import DSEError

    if budget is not None and not verify:
        raise DSEError("--budget needs --verify (e.g. --verify rtl --budget 4)")
    if accuracy_floor is not None and not accuracy_set:
        raise DSEError("--accuracy-floor needs --accuracy (e.g. --accuracy digits "
                       "--accuracy-floor 97)")
    if accuracy_floor is not None and not math.isfinite(accuracy_floor):
        raise DSEError(f"--accuracy-floor {accuracy_floor} must be a finite percentage")


def _parse_size(size: str) -> int | None:
    """``--size``: None for ``full``, else a positive int.  Raises DSEError otherwise."""
    from ..dse import DSEError

    if size == "full":
        return None
    try:
        sz = int(size)
    except ValueError:
        raise DSEError(f"--size {size!r} must be a positive integer or 'full'") from None
    if sz < 1:
        raise DSEError(f"--size {size!r} must be a positive integer or 'full'")
    return sz


def _space_and_part(board, space_spec, base, part, widths_spec):
    """``(Space, part)``: the board's space and part (a ``--space`` file re-based on the
    board's part, bus and clock), else the default space around ``base`` or the file, on
    ``part`` (default xc7z020); with a width axis for ``--widths``.

    Raises:
        DSEError: a ``--part`` that is not the board's, an empty ``--widths``;
        SpaceError / ConfigError: a bad space, board or base.
    """
    from ..dse import DSEError
    from ..dse.space import Space, board_setup, board_space, default_space, with_width_axis

    if board is not None:
        bs = board_setup(board)
        if part is not None and part.lower() != bs["part"].lower() \
                and not bs["part"].lower().startswith(part.lower()):
            raise DSEError(f"--part {part} is not the {bs['title']}'s part "
                           f"({bs['part']}); drop --part or --board")
        part = bs["part"]
        if space_spec == "default":
            space = board_space(board)
        else:
            space = Space.from_json(space_spec)
            space = Space(space.base.replace(PART=bs["part"],
                                             LOG_BUS_WIDTH=bs["log_bus_width"],
                                             CLOCK_MHZ=bs["clock_mhz"]), space.axes)
    else:
        part = part or "xc7z020"
        space = default_space(base, part) if space_spec == "default" \
            else Space.from_json(space_spec)
    if widths_spec is not None and not widths_spec.strip(" ,"):
        raise DSEError("--widths is empty; give operand widths such as 8,16,w4,a4,a4w4")
    if widths_spec is not None:
        space = with_width_axis(space, widths_spec)
    return space, part


def _evaluation(wl_spec, sz, part, res_mode, perf_mode, dram_latency, accuracy_set,
                timing_file):
    """``(workloads, DesignEvaluator, timing or None)`` of the flags.  Raises DSEError /
    ConfigError: a bad workload list, accuracy set or timing file."""
    from ..dse import CycleModel, DesignEvaluator, parse_workloads
    from ..dse.evaluate import load_timing

    wls = parse_workloads(wl_spec, sz)
    ev = DesignEvaluator(part, res_mode, perf_mode, CycleModel(dram_latency=dram_latency),
                         accuracy=accuracy_set)
    return wls, ev, (load_timing(timing_file) if timing_file else None)


def _cache_file(cache_file, out_file):
    """The cache path (default ``<report>.cache.jsonl`` next to ``-o``), checked to be a
    DSE cache before the sweep's first line (exit status 2 otherwise); None: no cache."""
    from ._inputs import check_json_lines

    if cache_file is None and out_file:
        cache_file = str(out_file) + ".cache.jsonl"
    if cache_file:
        check_json_lines(cache_file, "DSE cache", "; delete it to start over")
        from ..dse.search import ResultCache

        try:    # a file that is not a cache: one line, before the sweep's first line
            ResultCache(cache_file)
        except ValueError as e:
            _fail(str(e))
    return cache_file


def _announce(space, samples, wls, part, board, timing) -> None:
    """The sweep's first line on stderr (points, valid share, workloads, part, board) and
    a note for ``--timing`` entries that name no point; exits with status 2 when no config
    of the space is valid."""
    nv = space.n_valid
    if nv == 0:
        _fail(f"no valid point: all {space.size} config(s) of the space are refused "
              f"({_refusal(space)})")
    n = space.size if samples is None else min(samples, nv)
    what = "points" if samples is None else "valid points sampled"
    click.echo(f"dse: {n} {what} of {space.size} ({nv} valid, {100 * nv / space.size:.0f} %) "
               f"x {len(wls)} workloads ({', '.join(w.name for w in wls)}), part {part}"
               + (f", board {board}" if board else ""), err=True)
    if timing:
        from ..dse.evaluate import unmatched_timing

        odd = unmatched_timing(timing, (p for p in space.grid() if p.valid))
        if odd:
            more = f" (and {len(odd) - 5} more)" if len(odd) > 5 else ""
            click.echo(f"dse: note: --timing entries naming no point of the space (by "
                       f"fingerprint or bitstream name) apply to nothing: "
                       f"{', '.join(odd[:5])}{more}", err=True)


def _sweep(space, wls, ev, cache_file, timing, samples, seed, no_progress, jobs, scheduler,
           verify, budget, within_pct, floor):
    """Run the search on the executor of ``jobs`` / ``scheduler`` and, with ``verify``,
    promote (:func:`~vtaforge.dse.promote.promote`); prints what ran.  Returns ``(results,
    verify seconds or None)``; exits with status 2 on a bad scheduler or a corrupt cache."""
    from ..dse import DSEError
    from ..dse.parallel import make_executor
    from ..dse.promote import promote
    from ..dse.search import SearchStats, run_search
    from ._output import progress_enabled

    stats = SearchStats()
    vsec = None
    try:
        ex = make_executor(jobs, scheduler)
    except ValueError as e:  # bad or unreachable scheduler
        _fail(str(e))
    try:
        results = run_search(space, wls, ev, cache=cache_file, timing=timing, samples=samples,
                             seed=seed, progress=progress_enabled(no_progress), executor=ex,
                             stats=stats)
        acc = (f", {stats.accuracy_runs} accuracy measurement(s)" if ev.accuracy_eval
               else "")
        ncached = stats.perf_cached + stats.resource_cached + stats.accuracy_cached
        click.echo(f"dse: {stats.perf_runs} performance and {stats.resource_runs} resource "
                   f"evaluations run{acc} ({ncached} from cache, "
                   f"{stats.perf_shared} shared) in {stats.seconds:.1f} s, {ex.description}",
                   err=True)
        if verify:
            vsec = promote(results, wls, ev, verify, 4 if budget is None else budget,
                           cache=cache_file, timing=timing, executor=ex,
                           progress=progress_enabled(no_progress), within=within_pct,
                           accuracy_floor=floor)
    except (ValueError, DSEError) as e:  # corrupt cache
        _fail(str(e))
    finally:
        ex.close()
    return results, vsec


def _write_outputs(rep, limit, out_file, csv_file, plot_file) -> None:
    """Print the report's table and write the report, CSV and plot that were asked for
    (exit status 2 when the plot cannot be drawn)."""
    from ..dse.plot import plot_report
    from ..dse.report import format_table, write_csv, write_report

    click.echo(format_table(rep, limit=limit))
    if out_file:
        write_report(rep, out_file)
        click.echo(f"wrote {out_file}", err=True)
    if csv_file:
        write_csv(rep, csv_file)
        click.echo(f"wrote {csv_file}", err=True)
    if plot_file:
        try:
            plot_report(rep, plot_file)
        except ValueError as e:  # matplotlib missing
            _fail(str(e))
        click.echo(f"wrote {plot_file}", err=True)


def _refusal(space) -> str:
    """Why the points of a space are refused: the most common ConfigError, with how many
    points it refused when not all."""
    from collections import Counter

    errs = Counter(str(p.error).splitlines()[0] if p.error else "refused"
                   for p in space.grid())
    (msg, n), = errs.most_common(1)
    return msg if n == space.size else f"{n} of them: {msg}"


@dse_group.command("show")
@click.argument("report_file")
@click.option("--all", "show_all", is_flag=True, help="every point, not only the first 30")
@click.option("--feasible", is_flag=True, help="only feasible points")
def show_cmd(report_file, show_all, feasible) -> None:
    """Print a saved DSE report as a table with the best designs."""
    from ..dse.report import format_table, load_report
    from ._inputs import read_json

    read_json(report_file, "DSE report")
    try:
        rep = load_report(report_file)
    except ValueError as e:
        _fail(str(e))
        return
    try:
        table = format_table(rep, limit=None if show_all else 30, only_feasible=feasible)
    except (KeyError, TypeError, ValueError, AttributeError, IndexError) as e:
        # an edited report, or one of another version: the table reads every field
        what = (f"it refers to {e}, which it lacks" if isinstance(e, KeyError)
                else str(e).splitlines()[0])
        _fail(f"{report_file}: malformed DSE report ({what})")
        return
    click.echo(table)


COMMANDS = [dse_group]
