"""Board packages and deployment: ``vtaforge board package`` / ``verify`` / ``deploy``.

A **board package** is one self-contained folder for one board (:func:`make_package`)::

    overlay/vta.bit, overlay/vta.hwh   the PYNQ overlay (same base name, side by side)
    overlay/vta.json                   the bitstream's fingerprint, config and sha256
    config.json                        the core's config (``VTAConfig.to_json``)
    models/NAME.vtapkg                 compiled models, each checked against the config
    wheel/vtaforge-*.whl               the vtaforge wheel (base install; pip --no-deps)
    verify.py                          checks every file against manifest.json (stdlib only)
    run.sh                             verify / install / run a model (POSIX sh)
    vtaforge.ipynb                     the same steps as Jupyter cells
    README.md                          how to use it
    manifest.json                      sha256 and size of every other file, fingerprints

The manifest's ``files`` (what the board runs: overlay, config, models, wheel, verify.py,
run.sh) are checked before anything is installed or run; its ``user_files`` (the notebook,
which Jupyter saves, and the README) are not: ``verify`` notes when they changed.

Fingerprints.  Each ``.vtapkg`` records the config it was compiled for
(:func:`~vtaforge.runtime.artifact.load_artifact` refuses another one).  A bitstream
carries its config's fingerprint only inside the core (the read-only ``FINGERPRINT``
register, read on the board) -- neither the ``.bit`` nor the ``.hwh`` holds it -- so the
package takes it from a JSON file that travels with the bitstream (:func:`find_bitstream_info`):

1. the sidecar ``NAME.json`` beside ``NAME.bit`` (written by ``vtaforge board build``:
   config, fingerprint, sha256 of the ``.bit`` and ``.hwh``, the timing verdict), else
2. the ``board.json`` of the Vivado project (written by ``vtaforge board project``) whose
   ``bitstream`` entry is this file (``PROJECT/out/vta.bit``), else
3. a file named by ``--bitstream-info``.

Either must give the config's fingerprint.  A ``UserID`` in the ``.bit`` header other than
``0xFFFFFFFF`` (Vivado's ``BITSTREAM.CONFIG.USERID``) must equal it too.  The ``.bit``
header's part, the ``.hwh``'s device, PS and PL clock must match the config, and the
``.hwh`` must hold the ``vta_wrapper`` module.

**Deploy** (:func:`deploy`) copies a package to ``USER@HOST`` with ``rsync`` (or ``scp
-r``) over ``ssh``, runs ``sh run.sh install`` there (verify, then ``pip install --no-deps``
of the wheel), optionally ``sh run.sh run`` on an input, and fetches ``output.npy``,
``stats.json`` and ``run.log``.  Every external command runs through :mod:`subprocess` with
a timeout; every failure is a :class:`DeployError` with a one-line message.

Test hooks of ``run.sh`` and the notebook (environment variables, unset on a board):
``VTAFORGE_RUN_TARGET`` (run on this target instead of ``pynq``, e.g. ``fsim``: no board),
``VTAFORGE_SKIP_INSTALL=1`` (vtaforge is already importable: no pip), ``VTAFORGE_PYTHON``
(the Python to use) and ``VTAFORGE_PYNQ_VENV`` (the venv to activate, default
``/usr/local/share/pynq-venv``).

Board side, ``python -m vtaforge.deploy run ...`` runs a model (:func:`run_model`: what
``vtaforge run`` does, without click, which a board image may lack) and ``python -m
vtaforge.deploy stats ...`` writes the run's statistics; ``run.sh`` calls both and the
notebook imports no click either.  This module needs only numpy.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shlex
import shutil
import signal
import struct
import subprocess
import sys
import tempfile
import time
import zipfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Sequence
from xml.etree import ElementTree

__all__ = ["DeployError", "PACKAGE_FORMAT", "SIDECAR_FORMAT", "read_bit_header", "read_hwh",
           "find_bitstream_info", "check_bitstream", "write_bitstream_sidecar",
           "source_tree", "build_wheel", "installed_wheel", "check_wheel", "make_package", "PackageResult",
           "verify_package", "deploy", "DeployResult", "run_stats", "main"]

#: ``format`` of a package's manifest.json (``version`` 1).
PACKAGE_FORMAT = "vtaforge-board-package"
#: ``format`` of a bitstream sidecar ``NAME.json`` (``version`` 1).
SIDECAR_FORMAT = "vtaforge-bitstream"
#: Files of a package that its user may edit (Jupyter saves the notebook when it is run):
#: listed in the manifest's ``user_files``, never checked; ``verify`` notes a change.
#: ``files`` holds what the board runs: overlay, config, models, wheel, scripts.
USER_FILES = ("vtaforge.ipynb", "README.md")
#: Base name of the overlay files in a package (``overlay/vta.bit`` + ``overlay/vta.hwh``).
OVERLAY_STEM = "vta"
#: Default seconds for one external command (ssh, scp, rsync, the wheel build).
DEFAULT_TIMEOUT_S = 600.0
#: The PYNQ 3.x image's Python environment.
PYNQ_VENV = "/usr/local/share/pynq-venv"
#: Model names in a package: file stems that are safe in a shell word and a path.
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")
#: Remote directories and hosts that need no quoting anywhere (ssh, scp, rsync).
_REMOTE_DIR = re.compile(r"^[A-Za-z0-9_.~/+-]+$")
_HOST = re.compile(r"^(?:[A-Za-z0-9_][A-Za-z0-9_.+-]*@)?[A-Za-z0-9][A-Za-z0-9_.-]*$")


class DeployError(RuntimeError):
    """A package or a deployment that cannot proceed (the message is one line)."""


def _sha256(path: str | Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def _first_line(text: str) -> str:
    return (str(text).strip().splitlines() or [""])[0]


def _write_json(path: Path, data: Any) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(json.dumps(data, indent=2, sort_keys=False) + "\n")
    os.replace(tmp, path)


# ---------------------------------------------------------------------------- bitstream
def read_bit_header(path: str | Path) -> dict[str, Any]:
    """The header of a Vivado ``.bit`` file.

    Layout: a 2-byte length (9) and 9 magic bytes, a 2-byte length (1), then fields
    ``a`` (design name, ``;UserID=0X...;Version=...``), ``b`` (part, e.g. ``7z020clg400``),
    ``c`` (date), ``d`` (time), each a key byte, a big-endian 16-bit length and a
    NUL-terminated string, then ``e`` and a 32-bit length of the configuration data.

    Returns:
        ``{"design", "user_id" (int or None), "tool_version", "part", "date", "time",
        "data_bytes"}``.
    Raises:
        DeployError: unreadable, or not a ``.bit`` (a raw ``.bin`` has no header).
    """
    p = Path(path)
    try:
        with open(p, "rb") as f:        # the header only (a device file never ends)
            raw = f.read(4096)
        size = p.stat().st_size
    except OSError as e:
        raise DeployError(f"cannot read bitstream {str(p)!r}: {e.strerror or e}") from None
    bad = DeployError(f"{str(p)!r} is not a Vivado .bit file (no bitstream header; a raw "
                      f".bin cannot be packaged: PYNQ loads .bit files)")
    if len(raw) < 16 or struct.unpack(">H", raw[:2])[0] != 9 or raw[11:14] != b"\x00\x01a":
        raise bad
    pos, fields = 14, {}
    key = "a"
    while True:
        if key == "e":
            if pos + 4 > len(raw):
                raise bad
            fields["e"] = struct.unpack(">I", raw[pos:pos + 4])[0]
            break
        if pos + 2 > len(raw):
            raise bad
        n = struct.unpack(">H", raw[pos:pos + 2])[0]
        s = raw[pos + 2:pos + 2 + n]
        if len(s) != n:
            raise bad
        fields[key] = s.rstrip(b"\x00").decode("latin-1")
        pos += 2 + n
        if pos >= len(raw):
            raise bad
        key = chr(raw[pos])
        pos += 1
        if key not in "bcde" or key in fields:
            raise bad
    if "b" not in fields:
        raise bad
    design = fields.get("a", "")
    uid = re.search(r"UserID=0[xX]([0-9A-Fa-f]+)", design)
    ver = re.search(r"Version=([^;]+)", design)
    return {"design": design.split(";")[0], "user_id": int(uid.group(1), 16) if uid else None,
            "tool_version": ver.group(1) if ver else None, "part": fields["b"],
            "date": fields.get("c"), "time": fields.get("d"), "data_bytes": fields["e"],
            "file_bytes": size}


def _device(part: str | None) -> str | None:
    """The device of a part name, as ``hw.parts.device_of`` reads it: ``xc7z020clg400-1``
    and a bitstream header's ``7z020clg400`` -> ``xc7z020``, ``xczu3eg-sbva484-1-e`` ->
    ``xczu3eg`` (None if not a Zynq name)."""
    from .hw.parts import device_of

    if not part:
        return None
    p = part.strip().lower()
    return device_of(p if p.startswith("xc") else "xc" + p)


#: PL-clock parameters of the PS in a .hwh (requested MHz): Zynq-7000, Zynq UltraScale+.
_CLOCK_PARAMS = ("PCW_FPGA0_PERIPHERAL_FREQMHZ", "PSU__CRL_APB__PL0_REF_CTRL__FREQMHZ")
_PS_TYPES = ("processing_system7", "zynq_ultra_ps_e")


def read_hwh(path: str | Path, core: str = "vta_wrapper") -> dict[str, Any]:
    """What a Vivado hardware hand-off (``.hwh``) says about the block design.

    Reads ``SYSTEMINFO`` (device, package), the PS ``MODULE`` (its ``MODTYPE`` and the
    requested PL clock 0), the core's ``MODULE`` (``MODTYPE`` ``core``, a module
    reference) and the PS's ``MEMRANGE`` of the core (register base and range).

    Returns:
        ``{"device", "package", "ps_ip", "pl_clock_mhz", "pl_clock_divisor" (PL clock 0's
        two divisors multiplied), "core_instance", "core_vlnv", "reg_base", "reg_range",
        "vivado_version"}`` (None where absent).
    Raises:
        DeployError: unreadable, not XML, not a hand-off (root ``EDKSYSTEM``), no ``core``
            module (not a vtaforge block design), or missing what PYNQ's overlay loader
            needs (:func:`_check_hwh_for_pynq`).
    """
    p = Path(path)
    try:
        root = ElementTree.parse(p).getroot()
    except OSError as e:
        raise DeployError(f"cannot read .hwh {str(p)!r}: {e.strerror or e}") from None
    except ElementTree.ParseError as e:
        raise DeployError(f"{str(p)!r} is not a Vivado .hwh (not XML: {e})") from None
    if root.tag != "EDKSYSTEM":
        raise DeployError(f"{str(p)!r} is not a Vivado .hwh (root element {root.tag!r}, "
                          f"expected EDKSYSTEM)")
    info = root.find("SYSTEMINFO")
    out: dict[str, Any] = {
        "device": info.get("DEVICE") if info is not None else None,
        "package": info.get("PACKAGE") if info is not None else None,
        "vivado_version": root.get("VIVADOVERSION"), "ps_ip": None, "pl_clock_mhz": None,
        "core_instance": None, "core_vlnv": None, "reg_base": None, "reg_range": None,
        "pl_clock_divisor": None}
    mods = list(root.iter("MODULE"))
    _check_hwh_for_pynq(root, mods, str(p), core)
    for m in mods:
        if m.get("MODTYPE") == core:
            out["core_instance"] = m.get("INSTANCE")
            out["core_vlnv"] = m.get("VLNV")
            break
    if out["core_instance"] is None:
        raise DeployError(f"{str(p)!r} has no {core} module: not the hand-off of a vtaforge "
                          f"block design (vtaforge board project)")
    for m in mods:
        if m.get("MODTYPE") in _PS_TYPES:
            out["ps_ip"] = m.get("MODTYPE")
            div_t = _PS_CLOCK_PARAMS[m.get("MODTYPE")][1]
            prms = {q.get("NAME"): q.get("VALUE") for q in m.findall("./PARAMETERS/PARAMETER")}
            out["pl_clock_divisor"] = (int(prms[div_t.format(i=0, j=0)])
                                       * int(prms[div_t.format(i=0, j=1)]))
            for prm in m.iter("PARAMETER"):
                if prm.get("NAME") in _CLOCK_PARAMS:
                    try:
                        out["pl_clock_mhz"] = float(prm.get("VALUE"))
                    except (TypeError, ValueError):
                        pass
            for r in m.iter("MEMRANGE"):
                if r.get("INSTANCE") == out["core_instance"]:
                    try:
                        lo, hi = int(r.get("BASEVALUE"), 16), int(r.get("HIGHVALUE"), 16)
                    except (TypeError, ValueError):
                        continue
                    out["reg_base"], out["reg_range"] = lo, hi - lo + 1
            break
    return out


#: PS parameters of PL clock ``i``: enable flag and the two divisors, per PS type (the
#: overlay loader programs the PL clocks from these: all four clocks must be described).
_PS_CLOCK_PARAMS = {
    "processing_system7": ("PCW_FPGA_FCLK{i}_ENABLE", "PCW_FCLK{i}_PERIPHERAL_DIVISOR{j}"),
    "zynq_ultra_ps_e": ("PSU__FPGA_PL{i}_ENABLE", "PSU__CRL_APB__PL{i}_REF_CTRL__DIVISOR{j}"),
}
_VLNV = re.compile(r"^[^:]+:[^:]+:[^:]+:\d+\.\d+(?:\.\d+)*$")  # the loader reads X.Y


def _hex(v: str | None) -> int | None:
    try:
        return int(v, 16) if v is not None else None
    except ValueError:
        return None


def _check_hwh_for_pynq(root, mods: list, src: str, core: str) -> None:
    """Refuse a ``.hwh`` that PYNQ 3.x's overlay loader cannot use (one line naming what is
    missing).  What the loader needs (pynq 3.0.1's HWH parser and the pynqmetadata HWH
    frontend it uses for full bitstreams): an ``EXTERNALPORTS`` element; every ``MODULE``
    with ``INSTANCE``, ``FULLNAME`` and a ``VLNV`` ``vendor:library:name:X.Y``; every
    ``PORT`` named; every ``BUSINTERFACE`` with ``NAME``, ``TYPE`` and ``VLNV`` and its
    ``PORTMAP``\\s naming ports of their module; the PS module (``IS_PL="FALSE"``) with the
    enable and both divisors of PL clocks 0-3 as integers (clock 0 enabled: it clocks the
    core); the core's module, a module reference ``xilinx.com:module_ref:CORE:X.Y`` (how
    the runtime finds it in ``ip_dict``), addressed by a ``MEMRANGE`` (``MEMTYPE``
    ``REGISTER``, hexadecimal ``BASEVALUE`` <= ``HIGHVALUE``) whose ``SLAVEBUSINTERFACE``
    is one of the core's bus interfaces.  Facts from board-notes.md and the pynq source;
    the code is ours."""
    def bad(what: str) -> DeployError:
        return DeployError(f".hwh {src!r} {what}: PYNQ's overlay loader cannot use it "
                           f"(re-export the hand-off from Vivado)")

    if root.find("EXTERNALPORTS") is None:
        raise bad("has no EXTERNALPORTS element")
    insts: dict[str, Any] = {}
    for m in mods:
        inst = m.get("INSTANCE")
        if not inst:
            raise bad(f"has a MODULE without INSTANCE (MODTYPE {m.get('MODTYPE')!r})")
        if m.get("FULLNAME") is None:
            raise bad(f"has no FULLNAME on MODULE {inst}")
        if m.get("BDTYPE") != "BLOCK_CONTAINER" and not _VLNV.fullmatch(m.get("VLNV") or ""):
            raise bad(f"gives MODULE {inst} the VLNV {m.get('VLNV')!r} (expected "
                      f"vendor:library:name:X.Y)")
        insts[inst] = m
        ports = set()
        for prt in m.iter("PORT"):
            if not prt.get("NAME"):
                raise bad(f"has a PORT without NAME in MODULE {inst}")
            ports.add(prt.get("NAME"))
        for b in m.iter("BUSINTERFACE"):
            for k in ("NAME", "TYPE", "VLNV"):
                if not b.get(k):
                    raise bad(f"has a BUSINTERFACE without {k} in MODULE {inst}")
            for pm in b.iter("PORTMAP"):
                if pm.get("PHYSICAL") not in ports:
                    raise bad(f"maps bus interface {inst}/{b.get('NAME')} to port "
                              f"{pm.get('PHYSICAL')!r}, which MODULE {inst} does not have")
    ps = [m for m in mods if m.get("MODTYPE") in _PS_TYPES]
    if not ps:
        raise bad("has no processing_system7 or zynq_ultra_ps_e MODULE (the PS)")
    psm = ps[0]
    if psm.get("IS_PL") != "FALSE":
        raise bad(f"does not mark the PS MODULE {psm.get('INSTANCE')} IS_PL=\"FALSE\" (the "
                  f"loader would not take it for the PS nor set its PL clocks)")
    params = {q.get("NAME"): q.get("VALUE") for q in psm.findall("./PARAMETERS/PARAMETER")}
    en_t, div_t = _PS_CLOCK_PARAMS[psm.get("MODTYPE")]
    for i in range(4):
        for name in (en_t.format(i=i), *(div_t.format(i=i, j=j) for j in (0, 1))):
            v = params.get(name)
            if v is None or not re.fullmatch(r"\d+", v.strip()):
                got = "missing" if v is None else f"{v!r}, not an integer"
                raise bad(f"has no usable PS parameter {name} ({got})")
    if params[en_t.format(i=0)].strip() != "1":
        raise bad(f"leaves PL clock 0 disabled ({en_t.format(i=0)} = "
                  f"{params[en_t.format(i=0)]}); the core runs on it")
    cores = [m for m in mods if m.get("MODTYPE") == core]
    if not cores:
        return  # read_hwh names the missing core module
    cm = cores[0]
    inst = cm.get("INSTANCE")
    prefix = f"xilinx.com:module_ref:{core}:"
    if not (cm.get("VLNV") or "").startswith(prefix):
        raise bad(f"gives the core {inst} the VLNV {cm.get('VLNV')!r}, not {prefix}X.Y (the "
                  f"runtime finds the core in the overlay's ip_dict by that type)")
    buses = {b.get("NAME") for b in cm.iter("BUSINTERFACE")}
    rngs = [r for r in root.iter("MEMRANGE") if r.get("INSTANCE") == inst]
    if not rngs:
        raise bad(f"has no MEMRANGE for the core {inst} (its register window)")
    for r in rngs:
        lo, hi = _hex(r.get("BASEVALUE")), _hex(r.get("HIGHVALUE"))
        if lo is None or hi is None or hi < lo:
            raise bad(f"gives the core {inst} the address range BASEVALUE="
                      f"{r.get('BASEVALUE')!r} HIGHVALUE={r.get('HIGHVALUE')!r} (expected "
                      f"hexadecimal, base <= high)")
        if r.get("MEMTYPE") != "REGISTER":
            raise bad(f"gives the core {inst}'s MEMRANGE MEMTYPE {r.get('MEMTYPE')!r}, not "
                      f"REGISTER")
        if r.get("SLAVEBUSINTERFACE") not in buses:
            raise bad(f"addresses the core {inst} through bus interface "
                      f"{r.get('SLAVEBUSINTERFACE')!r}, which its MODULE does not declare "
                      f"(bus interfaces: {', '.join(sorted(n for n in buses if n)) or 'none'})")


def _fingerprint_of(d: dict, src: str) -> tuple[int, Any]:
    """``(fingerprint, VTAConfig or None)`` of a sidecar or board.json dict."""
    from .hw.config import ConfigError, VTAConfig

    fp = d.get("fingerprint")
    if isinstance(fp, str):
        try:
            fp = int(fp, 0)
        except ValueError:
            fp = None
    if isinstance(fp, bool) or not isinstance(fp, int):
        raise DeployError(f"{src}: no integer 'fingerprint'")
    cfg = None
    if d.get("config") is not None:
        try:
            cfg = VTAConfig.from_dict(d["config"])
        except ConfigError as e:
            raise DeployError(f"{src}: invalid 'config': {e}") from None
        if cfg.fingerprint != fp:
            raise DeployError(f"{src}: its config has fingerprint 0x{cfg.fingerprint:08x}, "
                              f"not the 0x{fp:08x} it states (edited by hand?)")
    return fp, cfg


def _load_json(p: Path) -> dict | None:
    try:
        d = json.loads(p.read_text())
    except (OSError, UnicodeDecodeError, ValueError):
        return None
    return d if isinstance(d, dict) else None


def find_bitstream_info(bit: str | Path, explicit: str | Path | None = None
                        ) -> tuple[Path, dict] | None:
    """The JSON that gives a bitstream's fingerprint (see the module docstring).

    Args:
        bit: the ``.bit`` file.
        explicit: a sidecar or ``board.json`` named by the user (``--bitstream-info``).
    Returns:
        ``(path, dict)``, or None when nothing describes the bitstream.
    Raises:
        DeployError: ``explicit`` is unreadable or not JSON; a sidecar of ours beside the
            ``.bit`` is malformed.
    """
    bit = Path(bit)
    if explicit is not None:
        p = Path(explicit)
        d = _load_json(p)
        if d is None:
            raise DeployError(f"--bitstream-info {str(p)!r} is not a readable JSON object")
        return p, d
    side = bit.with_suffix(".json")
    d = _load_json(side) if side.is_file() else None
    if d is not None and d.get("format") == SIDECAR_FORMAT:
        return side, d
    for proj in (bit.parent, bit.parent.parent):
        bj = proj / "board.json"
        d = _load_json(bj) if bj.is_file() else None
        if d is None or not isinstance(d.get("bitstream"), str):
            continue
        try:
            if (proj / d["bitstream"]).resolve() == bit.resolve():
                return bj, d
        except OSError:
            continue
    return None


def check_bitstream(cfg, bit: str | Path, hwh: str | Path, *, info: str | Path | None = None,
                    allow_unmet_timing: bool = False) -> dict[str, Any]:
    """Check that a ``.bit`` + ``.hwh`` were built for ``cfg`` (see the module docstring).

    Returns:
        what was found: ``{"fingerprint", "source", "header", "hwh", "timing", "board"}``
        (``board``: the board's ``name``, ``title`` and ``part``, the part the bitstream is
        built for: the board's, which may differ from ``cfg.PART`` in the package).
    Raises:
        DeployError: no fingerprint for the bitstream, a fingerprint that differs from
            ``cfg``'s (naming both), a part, PS or PL clock that differs, a sidecar whose
            sha256 is another file's, or a sidecar that says timing was not met (unless
            ``allow_unmet_timing``).
    """
    from .hw.flow import FlowError, board_spec

    bit, hwh = Path(bit), Path(hwh)
    want = cfg.fingerprint
    header = read_bit_header(bit)
    dev = _device(cfg.PART)
    if _device(header["part"]) != dev:
        raise DeployError(f"bitstream {str(bit)!r} is for part {header['part']}, but the "
                          f"config's PART is {cfg.PART}")
    h = read_hwh(hwh)
    if h["device"] and _device(h["device"]) != dev:
        raise DeployError(f".hwh {str(hwh)!r} is for device {h['device']}, but the config's "
                          f"PART is {cfg.PART}")
    try:
        spec = board_spec(cfg)
    except FlowError as e:
        raise DeployError(str(e)) from None
    if h["ps_ip"] is not None and h["ps_ip"] != spec.ps_ip:
        raise DeployError(f".hwh {str(hwh)!r} has a {h['ps_ip']} PS, but the config's part "
                          f"{cfg.PART} needs {spec.ps_ip}")
    mhz = float(cfg.CLOCK_MHZ)
    clocks = [mhz]
    try:  # the flow may round CLOCK_MHZ to a PL clock the PS can make (333 -> 300 MHz)
        from .hw.flow import pl_clock

        clocks.append(float(pl_clock(spec, mhz).mhz))
    except (ImportError, FlowError):
        pass
    got = h["pl_clock_mhz"]
    if got is not None and all(abs(got - c) > 0.01 * c for c in clocks):
        also = "" if len(set(clocks)) == 1 else f" (PL clock {clocks[1]:g} MHz)"
        raise DeployError(f".hwh {str(hwh)!r} sets the PL clock to {got:g} MHz, but the "
                          f"config's CLOCK_MHZ is {mhz:g}{also}")
    div = h.get("pl_clock_divisor")
    if div:  # PYNQ 3.x programs the PL clock from the divisors, not from the MHz figure
        made = spec.pll_mhz / div
        if all(abs(made - c) > 0.01 * c for c in clocks):
            raise DeployError(f".hwh {str(hwh)!r} divides the {spec.pll} ({spec.pll_mhz:g} MHz) "
                              f"by {div} for PL clock 0: {made:.6g} MHz, which PYNQ programs, "
                              f"but the config's CLOCK_MHZ is {mhz:g}")
    evidence: list[tuple[str, int, Any]] = []
    if header["user_id"] is not None and header["user_id"] != 0xFFFFFFFF:
        evidence.append((f"the UserID of {bit.name}'s header", header["user_id"], None))
    found = find_bitstream_info(bit, info)
    timing = None
    source = None
    if found is not None:
        path, d = found
        source = str(path)
        fp, bcfg = _fingerprint_of(d, source)
        evidence.append((source, fp, bcfg))
        if d.get("bitstream_sha256") not in (None, _sha256(bit)):
            raise DeployError(f"{source} describes another bitstream (its bitstream_sha256 is "
                              f"not the sha256 of {str(bit)!r})")
        if isinstance(d.get("timing"), dict):
            timing = d["timing"]
            if timing.get("met") is False and not allow_unmet_timing:
                raise DeployError(f"bitstream {str(bit)!r} did not meet timing "
                                  f"({timing.get('reason') or 'not met'}, per {source}): "
                                  f"rebuild at a lower CLOCK_MHZ, or pass "
                                  f"--allow-unmet-timing")
    if not evidence:
        raise DeployError(
            f"no fingerprint for bitstream {str(bit)!r}: no {bit.stem}.json sidecar beside it "
            f"(vtaforge board build writes one) and no board.json of its Vivado project above "
            f"it; pass --bitstream-info PROJECT/board.json (from vtaforge board project)")
    for src, fp, bcfg in evidence:
        if fp != want:
            built = f"config {bcfg.bitstream_name} (fingerprint" if bcfg else "(fingerprint"
            raise DeployError(f"bitstream {str(bit)!r} was built for {built} 0x{fp:08x}, per "
                              f"{src}) but the config is {cfg.bitstream_name} (fingerprint "
                              f"0x{want:08x}); build the bitstream for this config or package "
                              f"it with its own config")
    return {"fingerprint": want, "source": source or evidence[0][0], "header": header,
            "hwh": h, "timing": timing,
            "board": {"name": spec.name, "title": spec.title, "part": spec.part or cfg.PART}}


def write_bitstream_sidecar(project_dir: str | Path, timing=None) -> Path | None:
    """Write ``out/vta.json`` beside the bitstream of a Vivado project (``vtaforge board
    build`` calls this after Vivado): format, fingerprint, config, part, clock, the
    sha256 of the ``.bit`` and ``.hwh``, and the timing verdict (a
    :class:`~vtaforge.hw.flow.TimingResult` or None).

    Returns:
        the sidecar's path, or None when the project has no ``board.json`` or no bitstream.
    Raises:
        DeployError: ``board.json`` is malformed; OSError: the file cannot be written.
    """
    d = Path(project_dir)
    board = _load_json(d / "board.json")
    if board is None:
        return None
    bit = d / str(board.get("bitstream", "out/vta.bit"))
    if not bit.is_file():
        return None
    fp, cfg = _fingerprint_of(board, str(d / "board.json"))
    hwh = d / str(board.get("hwh", "out/vta.hwh"))
    data: dict[str, Any] = {
        "format": SIDECAR_FORMAT, "version": 1, "written_by": "vtaforge board build",
        "fingerprint": fp, "fingerprint_hex": f"0x{fp:08x}",
        "bitstream_name": cfg.bitstream_name if cfg else None,
        "part": board.get("part"), "clock_mhz": board.get("clock_mhz"),
        "config": board.get("config"),
        "bitstream": bit.name, "bitstream_sha256": _sha256(bit),
        "hwh": hwh.name if hwh.is_file() else None,
        "hwh_sha256": _sha256(hwh) if hwh.is_file() else None,
        "timing": None if timing is None else {
            "met": bool(timing.met), "wns_ns": timing.wns_ns, "whs_ns": timing.whs_ns,
            "fmax_mhz": timing.fmax_mhz, "clock": timing.clock, "reason": timing.reason},
    }
    side = bit.with_suffix(".json")
    _write_json(side, data)
    return side


# ---------------------------------------------------------------------------- wheel
#: The source folders of the vtaforge distribution (pyproject's package-dir).
_SOURCE_DIRS = ("vtaforge", "hw", "runtime", "compiler", "dse")
_SOURCE_FILES = ("pyproject.toml", "README.md", "LICENSE", "LICENSE.txt")


def source_tree() -> Path | None:
    """The source tree this vtaforge runs from (editable install or checkout), or None
    for an installed wheel."""
    root = Path(__file__).resolve().parent.parent
    pp = root / "pyproject.toml"
    try:
        if (root / "hw" / "config.py").is_file() and 'name = "vtaforge"' in pp.read_text():
            return root
    except OSError:
        pass
    return None


def _source_files(root: Path) -> list[Path]:
    out = [root / n for n in _SOURCE_FILES if (root / n).is_file()]
    for top in _SOURCE_DIRS:
        for p in sorted((root / top).rglob("*")):
            rel = p.relative_to(root)
            if (p.is_file() and "__pycache__" not in rel.parts and p.suffix not in (".pyc", ".pyo")
                    and not any(part.startswith(".") for part in rel.parts)):
                out.append(p)
    return out


def _cache_root() -> Path:
    base = os.environ.get("VTAFORGE_CACHE")
    return (Path(base) if base else Path.home() / ".cache" / "vtaforge") / "wheels"


def build_wheel(src: str | Path | None = None, *, cache_dir: str | Path | None = None,
                timeout_s: float = DEFAULT_TIMEOUT_S, python: str | None = None
                ) -> tuple[Path, bool]:
    """The vtaforge wheel of a source tree, built once per content and cached.

    ``python -m build --wheel`` (``pip wheel --no-deps`` when ``build`` is absent) runs on
    a copy of the tree, so the tree gets no build/ or egg-info; the wheel is cached in
    ``$VTAFORGE_CACHE/wheels/<sha256 of the sources>/`` (default ``~/.cache/vtaforge``).

    Without a source tree (``pip install .``, not editable) the wheel is packed from the
    installed package instead (:func:`installed_wheel`).

    Returns:
        ``(wheel path, True if it came from the cache)``.
    Raises:
        DeployError: neither ``build`` nor ``pip`` installed, the build failing or timing
            out; an installed vtaforge without its ``.dist-info``.
    """
    root = Path(src) if src is not None else source_tree()
    if root is None:
        return installed_wheel(cache_dir=cache_dir)
    files = _source_files(root)
    h = hashlib.sha256()
    for p in files:
        h.update(str(p.relative_to(root)).encode() + b"\0" + p.read_bytes() + b"\0")
    cache = (Path(cache_dir) if cache_dir is not None else _cache_root()) / h.hexdigest()[:20]
    hits = sorted(cache.glob("vtaforge-*.whl")) if cache.is_dir() else []
    if hits:
        return hits[0], True
    with tempfile.TemporaryDirectory(prefix="vtaforge-wheel-") as tmp:
        work = Path(tmp) / "src"
        for p in files:
            dst = work / p.relative_to(root)
            dst.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(p, dst)
        py = python or sys.executable
        dist = str(Path(tmp) / "dist")
        # PyPA's build when it is installed; pip (always in a venv) otherwise: both run
        # the same isolated setuptools build backend from pyproject.toml
        for tool, cmd in (("python -m build --wheel",
                           [py, "-m", "build", "--wheel", "--outdir", dist, str(work)]),
                          ("pip wheel", [py, "-m", "pip", "wheel", "--no-deps", "-q",
                                         "--wheel-dir", dist, str(work)])):
            p = _call(cmd, timeout_s=timeout_s, what="build the vtaforge wheel", check=False)
            text = (p.stdout + "\n" + p.stderr)
            if p.returncode != 0 and re.search(r"No module named '?(build|pip)\b", text):
                continue  # that tool is not installed: try the next
            break
        else:
            raise DeployError("building the wheel needs the build or pip package in "
                              f"{py}, or pass an existing wheel with --wheel")
        if p.returncode != 0:
            lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
            errs = [ln for ln in lines if "error" in ln.lower()]
            raise DeployError(f"{tool} failed (exit {p.returncode}): "
                              f"{(errs or lines or ['no output'])[-1]}; or pass --wheel")
        built = sorted((Path(tmp) / "dist").glob("vtaforge-*.whl"))
        if not built:
            raise DeployError(f"{tool} wrote no vtaforge-*.whl")
        cache.mkdir(parents=True, exist_ok=True)
        dst = cache / built[0].name
        part = cache / f".{built[0].name}.tmp"
        shutil.copyfile(built[0], part)
        os.replace(part, dst)
    return dst, False


def installed_wheel(*, cache_dir: str | Path | None = None) -> tuple[Path, bool]:
    """A pure-Python wheel of the installed vtaforge (the ``vtaforge`` folder this module
    runs from, with every subpackage and data file, and its ``.dist-info`` metadata and
    entry points), for a ``pip install .`` without the source tree: vtaforge is pure
    Python, so the installed files are the wheel's contents.  Cached by content like
    :func:`build_wheel`.

    Returns:
        ``(wheel path, True if it came from the cache)``.
    Raises:
        DeployError: the installed package has no ``vtaforge-VERSION.dist-info`` beside it
            (the message gives the ``pip wheel`` command to build one instead).
    """
    import base64

    from . import __version__

    pkg = Path(__file__).resolve().parent
    dist = pkg.parent / f"vtaforge-{__version__}.dist-info"
    how = ("build the wheel from the vtaforge source folder SRC (the one with pyproject.toml): "
           "python -m pip wheel --no-deps --wheel-dir wheels SRC, then pass --wheel "
           f"wheels/vtaforge-{__version__}-py3-none-any.whl")
    if not (dist / "METADATA").is_file():
        raise DeployError(f"no source tree and no {dist.name}/METADATA beside the installed "
                          f"{pkg}: {how}")
    files = sorted(p for p in pkg.rglob("*") if p.is_file() and "__pycache__" not in
                   p.relative_to(pkg).parts and p.suffix not in (".pyc", ".pyo"))
    meta = {n: (dist / n).read_bytes() for n in ("METADATA", "entry_points.txt",
                                                  "top_level.txt") if (dist / n).is_file()}
    h = hashlib.sha256()
    for p in files:
        h.update(p.relative_to(pkg).as_posix().encode() + b"\0" + p.read_bytes() + b"\0")
    for n, b in sorted(meta.items()):
        h.update(n.encode() + b"\0" + b + b"\0")
    cache = ((Path(cache_dir) if cache_dir is not None else _cache_root())
             / ("installed-" + h.hexdigest()[:20]))
    name = f"vtaforge-{__version__}-py3-none-any.whl"
    if (cache / name).is_file():
        return cache / name, True
    di = f"vtaforge-{__version__}.dist-info"
    meta["WHEEL"] = (b"Wheel-Version: 1.0\nGenerator: vtaforge.deploy (installed files)\n"
                     b"Root-Is-Purelib: true\nTag: py3-none-any\n")
    record = []
    cache.mkdir(parents=True, exist_ok=True)
    part = cache / f".{name}.tmp"
    with zipfile.ZipFile(part, "w", zipfile.ZIP_DEFLATED) as z:
        def put(arc: str, data: bytes) -> None:
            z.writestr(arc, data)
            digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=")
            record.append(f"{arc},sha256={digest.decode()},{len(data)}")

        for p in files:
            put("vtaforge/" + p.relative_to(pkg).as_posix(), p.read_bytes())
        for n, b in meta.items():
            put(f"{di}/{n}", b)
        record.append(f"{di}/RECORD,,")
        z.writestr(f"{di}/RECORD", "\n".join(record) + "\n")
    os.replace(part, cache / name)
    return cache / name, False


def check_wheel(path: str | Path) -> str:
    """Check that ``path`` is a vtaforge wheel; return its version.

    Raises:
        DeployError: missing, not named ``vtaforge-VERSION-...whl``, not a zip, or without
            ``vtaforge-*.dist-info/METADATA``.
    """
    p = Path(path)
    m = re.fullmatch(r"vtaforge-([^-]+)-.+\.whl", p.name)
    if not p.is_file():
        raise DeployError(f"--wheel {str(p)!r} does not exist")
    if not m:
        raise DeployError(f"--wheel {str(p)!r} is not a vtaforge wheel (expected a file "
                          f"named vtaforge-VERSION-py3-none-any.whl)")
    try:
        with zipfile.ZipFile(p) as z:
            names = z.namelist()
    except (OSError, zipfile.BadZipFile):
        raise DeployError(f"--wheel {str(p)!r} is not a wheel (not a zip archive)") from None
    if not any(re.fullmatch(r"vtaforge-[^/]+\.dist-info/METADATA", n) for n in names):
        raise DeployError(f"--wheel {str(p)!r} has no vtaforge-*.dist-info/METADATA")
    return m.group(1)


# ---------------------------------------------------------------------------- package
@dataclass
class PackageResult:
    """What :func:`make_package` wrote: ``out`` (the folder), ``manifest`` (its dict),
    ``wheel_cached`` (the wheel came from the cache; None when passed with ``--wheel``),
    ``notes`` (lines worth printing: onnxruntime needs, a timing override)."""

    out: Path
    manifest: dict
    wheel_cached: bool | None
    notes: list[str] = field(default_factory=list)


def _is_package(d: Path) -> bool:
    m = _load_json(d / "manifest.json")
    return m is not None and m.get("format") == PACKAGE_FORMAT


def make_package(config: str, bitstream: str | Path, hwh: str | Path | None,
                 models: Sequence[str | Path], out_dir: str | Path, *,
                 wheel: str | Path | None = None, bitstream_info: str | Path | None = None,
                 allow_unmet_timing: bool = False,
                 wheel_timeout_s: float = DEFAULT_TIMEOUT_S) -> PackageResult:
    """Write a board package (layout in the module docstring) into ``out_dir``.

    Everything is checked before anything is written; the folder is assembled beside
    ``out_dir`` and renamed into place, replacing a previous package there.

    Args:
        config: preset name or config JSON file.
        bitstream, hwh: the ``.bit`` and its ``.hwh`` (None: ``bitstream`` with ``.hwh``).
        models: ``.vtapkg`` files (at least one; distinct file stems).
        wheel: an existing vtaforge wheel; None builds one (:func:`build_wheel`).
        bitstream_info: the sidecar or board.json to take the fingerprint from.
    Raises:
        DeployError: no model, a model or bitstream for another config, an unusable file,
            ``out_dir`` exists and is neither empty nor a package.
        ConfigError: an invalid config; ArtifactError: an unreadable ``.vtapkg``.
    """
    from . import __version__
    from .hw.config import load_config
    from .runtime.artifact import ArtifactError, load_artifact

    cfg = load_config(config)
    out = Path(out_dir)
    if out.exists() and (not out.is_dir() or (any(out.iterdir()) and not _is_package(out))):
        raise DeployError(f"-o {str(out)!r} exists and is not an earlier package (nor an "
                          f"empty folder); choose another folder")
    if not models:
        raise DeployError("a package needs at least one --model MODEL.vtapkg")
    bit = Path(bitstream)
    if not bit.exists():        # before the .hwh, whose default name is the .bit's
        raise DeployError(f"--bitstream {str(bit)!r} does not exist (the .bit of a board "
                          f"project: out/vta.bit)")
    if not bit.is_file():
        raise DeployError(f"--bitstream {str(bit)!r} is not a regular file (a Vivado .bit)")
    if bit.stat().st_size == 0:
        raise DeployError(f"--bitstream {str(bit)!r} is an empty file, not a Vivado .bit")
    hwh_p = Path(hwh) if hwh is not None else bit.with_suffix(".hwh")
    if not hwh_p.is_file():
        raise DeployError(f".hwh {str(hwh_p)!r} does not exist (PYNQ needs the .hwh of the "
                          f"bitstream; pass --hwh)")
    notes: list[str] = []
    entries = []
    names: dict[str, str] = {}
    for m in models:
        mp = Path(m)
        name = mp.stem
        if mp.suffix != ".vtapkg":
            raise DeployError(f"--model {str(mp)!r} is not a .vtapkg (compile it first: "
                              f"vtaforge compile MODEL.onnx -o MODEL.vtapkg --config ...)")
        if not _NAME.fullmatch(name):
            raise DeployError(f"--model {str(mp)!r}: rename it; a model name may hold only "
                              f"letters, digits and _ . - (it is a shell word on the board)")
        if name in names:
            raise DeployError(f"two models named {name!r} ({names[name]} and {mp}); rename one")
        names[name] = str(mp)
        try:
            cm = load_artifact(mp, cfg)
        except ArtifactError as e:
            raise DeployError(_first_line(str(e))) from None
        vta = [s.name for s in cm.steps if s.target == "vta"]
        req = cm.requires()
        if req:
            notes.append(f"model {name} needs onnxruntime on the board for "
                         f"{', '.join(req.get('onnxruntime', []))} (no 32-bit ARM wheel: "
                         f"PYNQ-Z1/Z2 images cannot run it)")
        entries.append({"name": name, "file": f"models/{name}.vtapkg", "model": cm.name,
                        "inputs": list(cm.inputs), "outputs": list(cm.outputs),
                        "input_shapes": {k: list(cm.types[k][1]) for k in cm.inputs
                                         if k in cm.types},
                        "steps": len(cm.steps), "steps_on_vta": len(vta), "requires": req,
                        "src": mp})
    bcheck = check_bitstream(cfg, bit, hwh_p, info=bitstream_info,
                             allow_unmet_timing=allow_unmet_timing)
    if bcheck["timing"] and bcheck["timing"].get("met") is False:
        notes.append(f"packaged although timing was not met ({bcheck['timing'].get('reason')})")
    cached: bool | None = None
    if wheel is None:
        if source_tree() is None:
            notes.append("no source tree (vtaforge installed with pip install .): the wheel "
                         "holds the installed vtaforge files")
        wheel_p, cached = build_wheel(timeout_s=wheel_timeout_s)
    else:
        wheel_p = Path(wheel)
    wheel_ver = check_wheel(wheel_p)

    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.", dir=str(out.parent)))
    try:
        for sub in ("overlay", "models", "wheel"):
            (tmp / sub).mkdir()
        shutil.copyfile(bit, tmp / "overlay" / f"{OVERLAY_STEM}.bit")
        shutil.copyfile(hwh_p, tmp / "overlay" / f"{OVERLAY_STEM}.hwh")
        for e in entries:
            shutil.copyfile(e.pop("src"), tmp / e["file"])
        shutil.copyfile(wheel_p, tmp / "wheel" / wheel_p.name)
        (tmp / "config.json").write_text(cfg.to_json())
        h = bcheck["hwh"]
        board = bcheck["board"]
        sidecar = {
            "format": SIDECAR_FORMAT, "version": 1, "written_by": "vtaforge board package",
            "fingerprint": cfg.fingerprint, "fingerprint_hex": f"0x{cfg.fingerprint:08x}",
            "bitstream_name": cfg.bitstream_name, "part": board["part"],
            "clock_mhz": float(cfg.CLOCK_MHZ), "config": cfg.to_dict(),
            "bitstream": f"{OVERLAY_STEM}.bit", "bitstream_sha256": _sha256(bit),
            "hwh": f"{OVERLAY_STEM}.hwh", "hwh_sha256": _sha256(hwh_p),
            "timing": bcheck["timing"], "fingerprint_from": bcheck["source"],
            "bit_header": bcheck["header"], "reg_base": h["reg_base"]}
        _write_json(tmp / "overlay" / f"{OVERLAY_STEM}.json", sidecar)
        wheel_rel = f"wheel/{wheel_p.name}"
        wheel_sha = _sha256(tmp / wheel_rel)
        model_names = [e["name"] for e in entries]
        (tmp / "verify.py").write_text(_VERIFY_PY)
        (tmp / "run.sh").write_text(_run_sh(cfg, wheel_rel, wheel_sha, model_names, __version__))
        (tmp / "vtaforge.ipynb").write_text(
            json.dumps(_notebook(cfg, wheel_rel, model_names, out.name), indent=1) + "\n")
        (tmp / "README.md").write_text(_readme(cfg, model_names, out.name,
                                               bcheck["board"]))
        files, user_files = {}, {}
        for p in sorted(tmp.rglob("*")):
            if p.is_file():
                p.chmod(0o755 if p.name == "run.sh" else 0o644)
                rel = p.relative_to(tmp).as_posix()
                (user_files if rel in USER_FILES else files)[rel] = {
                    "sha256": _sha256(p), "size": p.stat().st_size}
        manifest = {
            "format": PACKAGE_FORMAT, "version": 1, "created_by": f"vtaforge {__version__}",
            "created_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "config": {"file": "config.json", "fingerprint": f"0x{cfg.fingerprint:08x}",
                       "bitstream_name": cfg.bitstream_name, "part": board["part"],
                       "config_part": cfg.PART, "clock_mhz": float(cfg.CLOCK_MHZ)},
            "board": board,
            "overlay": {"bitstream": f"overlay/{OVERLAY_STEM}.bit",
                        "hwh": f"overlay/{OVERLAY_STEM}.hwh",
                        "info": f"overlay/{OVERLAY_STEM}.json",
                        "fingerprint": f"0x{cfg.fingerprint:08x}",
                        "fingerprint_from": bcheck["source"], "part": bcheck["header"]["part"],
                        "reg_base": h["reg_base"], "timing": bcheck["timing"]},
            "models": entries,
            "wheel": {"file": wheel_rel, "version": wheel_ver, "sha256": wheel_sha},
            "files": files,
            "user_files": user_files,
        }
        _write_json(tmp / "manifest.json", manifest)
        (tmp / "manifest.json").chmod(0o644)
        tmp.chmod(0o755)
        if out.exists():
            shutil.rmtree(out)
        os.replace(tmp, out)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return PackageResult(out, manifest, cached, notes)


def _load_verifier() -> dict:
    ns: dict = {"__name__": "vtaforge_package_verify"}
    exec(compile(_VERIFY_PY, "verify.py", "exec"), ns)  # noqa: S102 - our own constant
    return ns


def verify_package(package_dir: str | Path, notes: list[str] | None = None) -> dict:
    """Check every file of a package against its manifest.json (the code of the package's
    own ``verify.py``).  User files (:data:`USER_FILES`: the notebook, the README) are not
    checked; a changed or missing one is appended to ``notes``.

    Returns:
        the manifest.
    Raises:
        DeployError: no manifest, or files missing or differing (one line naming them).
    """
    try:
        man, found = _load_verifier()["check"](str(package_dir))
        if notes is not None:
            notes.extend(found)
        return man
    except ValueError as e:
        raise DeployError(f"verify {str(package_dir)!r}: {e}") from None


# ---------------------------------------------------------------------------- texts
_VERIFY_PY = '''#!/usr/bin/env python3
"""Check this package against manifest.json (sha256 and size of every file) before
anything is installed or run.  Standard library only (vtaforge need not be installed).

    python3 verify.py [PACKAGE_DIR]     exit 0: all files match; 1: one error line
"""
import hashlib
import json
import os
import sys

FORMAT = "vtaforge-board-package"


def sha256(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def verify(root):
    """Return the manifest when every file it lists matches; raise ValueError (one line)."""
    return check(root)[0]


def check(root):
    """(manifest, notes): the manifest when every file in its "files" matches (else
    ValueError, one line); notes name the user files ("user_files": the notebook, the
    README, which Jupyter and the user may save) that changed since packaging."""
    path = os.path.join(root, "manifest.json")
    try:
        with open(path) as f:
            man = json.load(f)
    except OSError as e:
        raise ValueError("cannot read manifest.json: %s" % (e.strerror or e))
    except ValueError:
        raise ValueError("manifest.json is not valid JSON")
    if not isinstance(man, dict) or man.get("format") != FORMAT:
        raise ValueError("manifest.json is not a vtaforge board package manifest")
    files = man.get("files")
    if not isinstance(files, dict) or not files:
        raise ValueError("manifest.json lists no files")
    bad = []
    for rel in sorted(files):
        want = files[rel]
        if os.path.isabs(rel) or ".." in rel.split("/"):
            bad.append("%s (unsafe path)" % rel)
            continue
        p = os.path.join(root, *rel.split("/"))
        if not os.path.isfile(p):
            bad.append("%s (missing)" % rel)
            continue
        size = os.path.getsize(p)
        if size != want.get("size"):
            bad.append("%s (%d bytes, manifest says %s)" % (rel, size, want.get("size")))
        elif sha256(p) != want.get("sha256"):
            bad.append("%s (sha256 differs)" % rel)
    notes = []
    user = man.get("user_files") or {}
    for rel in sorted(user):
        p = os.path.join(root, *rel.split("/"))
        if not os.path.isfile(p):
            notes.append("%s (a user file) is missing; the package runs without it" % rel)
        elif sha256(p) != user[rel].get("sha256"):
            notes.append("%s (a user file) changed since packaging; not checked" % rel)
    # unlisted files where the package keeps its own (overlay/, models/, wheel/, and scripts,
    # configs, models at the top) are refused; inputs a user drops beside it, notebooks and
    # what a run leaves (inputs/, results/, .installed, caches) are not
    own = {r.split("/")[0] for r in files if "/" in r}
    kinds = (".sh", ".py", ".json", ".vtapkg", ".bit", ".hwh", ".whl")
    extra = []
    for d in sorted(own):
        for dd, dirs, names in os.walk(os.path.join(root, d)):
            dirs[:] = [x for x in dirs if x not in (".ipynb_checkpoints", "__pycache__")]
            for n in names:
                rel = os.path.relpath(os.path.join(dd, n), root).replace(os.sep, "/")
                if rel not in files:
                    extra.append(rel)
    for n in os.listdir(root):
        if os.path.isfile(os.path.join(root, n)) and n.endswith(kinds) and n not in files \
                and n not in user and n != "manifest.json":
            extra.append(n)
    if extra:
        bad.append("unlisted: " + ", ".join(sorted(extra)))
    if bad:
        raise ValueError("%d of %d files do not match manifest.json: %s"
                         % (len(bad), len(files), ", ".join(bad)))
    return man, notes


def main(argv):
    root = argv[1] if len(argv) > 1 else os.path.dirname(os.path.abspath(__file__))
    try:
        man, notes = check(root)
    except ValueError as e:
        sys.stderr.write("error: verify: %s\\n" % e)
        return 1
    print("verify: %d files match manifest.json (sha256, size); config fingerprint %s"
          % (len(man["files"]), man.get("config", {}).get("fingerprint")))
    for n in notes:
        print("verify: note: " + n)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
'''


def _run_sh(cfg, wheel_rel: str, wheel_sha: str, models: list[str], version: str) -> str:
    models_s = " ".join(models)
    return f'''#!/bin/sh
# Generated by vtaforge {version} (vtaforge board package) for config {cfg.bitstream_name}
# (fingerprint 0x{cfg.fingerprint:08x}).  On the board, in any folder, as root (the pynq
# target maps /dev/mem; PYNQ's venv belongs to root):
#
#   sh run.sh verify            check every file against manifest.json (sha256, size)
#   sh run.sh install           verify, then pip install --no-deps the vtaforge wheel
#   sh run.sh run [--model NAME] [--out DIR] INPUT.npy
#                               verify, install unless this wheel is installed, run NAME
#                               on INPUT.npy: DIR/output.npy, DIR/stats.json, DIR/run.log
#                               (DIR: results/NAME)
#
# Models: {models_s}
# Environment (test hooks, for running this package without a board; unset on a board):
#   VTAFORGE_RUN_TARGET=fsim     run on this vtaforge target instead of pynq
#   VTAFORGE_SKIP_INSTALL=1      do not pip install the wheel (vtaforge is importable)
#   VTAFORGE_PYTHON=PATH         the Python to use (default: python3 of the PYNQ venv)
#   VTAFORGE_PYNQ_VENV=DIR       the venv to activate (default {PYNQ_VENV})
set -e
HERE0=$(pwd)
cd "$(dirname "$0")"
WHEEL="{wheel_rel}"
WHEEL_SHA="{wheel_sha}"
MODELS="{models_s}"
VENV="${{VTAFORGE_PYNQ_VENV:-{PYNQ_VENV}}}"
# PYNQ 3.x: XRT's environment and the venv with the pynq package (if present).
for f in /etc/profile.d/xrt_setup.sh "$VENV/bin/activate"; do
  if [ -f "$f" ]; then . "$f" || true; fi
done
PY="${{VTAFORGE_PYTHON:-python3}}"

die() {{ echo "error: run.sh: $*" >&2; exit 2; }}
abspath() {{ case "$1" in /*) echo "$1" ;; *) echo "$HERE0/$1" ;; esac; }}

do_verify() {{ "$PY" verify.py; }}

# pip install --no-deps brings no dependencies: the image's Python must have these (the
# runner, python -m vtaforge.deploy, needs numpy only; the vtaforge CLI also needs click).
do_check_deps() {{
  MISSING=$("$PY" -c '
import importlib
missing = []
for m in ("numpy",):
    try:
        importlib.import_module(m)
    except ImportError:
        missing.append(m)
print(" ".join(missing))')
  [ -z "$MISSING" ] || die "$PY lacks $MISSING (pip install --no-deps installs no dependencies): pip install $MISSING"
}}

do_install() {{
  if [ "${{VTAFORGE_SKIP_INSTALL:-}}" = 1 ]; then
    echo "run.sh: VTAFORGE_SKIP_INSTALL=1: not installing $WHEEL (test hook)"
    return 0
  fi
  "$PY" -m pip install --no-deps --no-index --force-reinstall --quiet "$WHEEL"
  echo "$WHEEL_SHA $("$PY" -c 'import sys; print(sys.executable)')" > .installed
  "$PY" -c 'import sys, vtaforge; print("run.sh: installed vtaforge", vtaforge.__version__, "for", sys.executable)'
  do_check_deps
}}

do_run() {{
  MODEL=""; OUT=""; INPUT=""
  while [ $# -gt 0 ]; do
    case "$1" in
      --model) [ $# -ge 2 ] || die "--model needs a name"; MODEL="$2"; shift 2 ;;
      --out) [ $# -ge 2 ] || die "--out needs a folder"; OUT=$(abspath "$2"); shift 2 ;;
      -*) die "unknown option $1 (usage: sh run.sh run [--model NAME] [--out DIR] INPUT.npy)" ;;
      *) [ -z "$INPUT" ] || die "one INPUT.npy only"; INPUT=$(abspath "$1"); shift ;;
    esac
  done
  [ -n "$INPUT" ] || die "usage: sh run.sh run [--model NAME] [--out DIR] INPUT.npy"
  [ -f "$INPUT" ] || die "input $INPUT does not exist"
  if [ -z "$MODEL" ]; then
    set -- $MODELS
    [ $# -eq 1 ] || die "this package has several models ($MODELS): pass --model NAME"
    MODEL="$1"
  fi
  case " $MODELS " in *" $MODEL "*) ;; *) die "no model $MODEL in this package ($MODELS)" ;; esac
  [ -n "$OUT" ] || OUT="$PWD/results/$MODEL"
  do_verify
  INSTALLED=$(cat .installed 2>/dev/null || true)
  if [ "$INSTALLED" != "$WHEEL_SHA $("$PY" -c 'import sys; print(sys.executable)')" ]; then
    do_install
  fi
  do_check_deps
  TARGET="${{VTAFORGE_RUN_TARGET:-pynq}}"
  if [ "$TARGET" = pynq ]; then
    export VTAFORGE_BITSTREAM="$PWD/overlay/vta.bit"
  else
    echo "run.sh: VTAFORGE_RUN_TARGET=$TARGET: running on $TARGET, not on the board (test hook)"
  fi
  mkdir -p "$OUT"
  rm -f "$OUT/output.npy" "$OUT/stats.json"
  T0=$("$PY" -c 'import time; print(repr(time.time()))')
  set +e
  "$PY" -m vtaforge.deploy run --model "models/$MODEL.vtapkg" --input "$INPUT" \\
      --target "$TARGET" --config config.json --output "$OUT/output.npy" >"$OUT/run.log" 2>&1
  RC=$?
  set -e
  T1=$("$PY" -c 'import time; print(repr(time.time()))')
  cat "$OUT/run.log"
  "$PY" -m vtaforge.deploy stats --model "models/$MODEL.vtapkg" --config config.json \\
      --input "$INPUT" --output "$OUT/output.npy" --log "$OUT/run.log" --target "$TARGET" \\
      --start "$T0" --end "$T1" --exit-status "$RC" -o "$OUT/stats.json"
  echo "run.sh: $OUT/stats.json"
  exit $RC
}}

cmd="${{1:-}}"
[ $# -gt 0 ] && shift
case "$cmd" in
  verify) do_verify ;;
  install) do_verify; do_install ;;
  run) do_run "$@" ;;
  *) die "usage: sh run.sh verify | install | run [--model NAME] [--out DIR] INPUT.npy" ;;
esac
'''


def _cell(kind: str, i: int, text: str) -> dict:
    lines = text.strip("\n").split("\n")
    src = [ln + "\n" for ln in lines[:-1]] + [lines[-1]]
    c: dict[str, Any] = {"cell_type": kind, "id": f"vtaforge-{i}", "metadata": {},
                         "source": src}
    if kind == "code":
        c["execution_count"] = None
        c["outputs"] = []
    return c


def _notebook(cfg, wheel_rel: str, models: list[str], name: str) -> dict:
    """The package's notebook (nbformat 4.5, plain JSON): the steps of ``run.sh run`` as
    cells, with the Python API (per-step statistics) instead of the CLI."""
    cells = [
        ("markdown", f"""
# vtaforge on PYNQ: `{name}`

Config `{cfg.bitstream_name}` (fingerprint `0x{cfg.fingerprint:08x}`), models: {', '.join(models)}.
The overlay is `overlay/vta.bit` + `overlay/vta.hwh`. Run the cells in order, as root (PYNQ's
Jupyter does): check the files, install the vtaforge wheel into this kernel's Python, run a
model on your input. `sh run.sh run INPUT.npy` does the same from a shell.
After installing a new wheel, restart the kernel if vtaforge was imported before.
"""),
        ("code", f"""
import json, os, subprocess, sys, time
import numpy as np

PACKAGE = os.path.abspath(".")           # this notebook's folder: the package
MODEL = {models[0]!r}                         # one of: {', '.join(models)}
INPUT = "input.npy"                      # your input (.npy, float32, batch first)
OUT = os.path.join("results", "notebook")
WHEEL = {wheel_rel!r}
# Test hook: VTAFORGE_RUN_TARGET=fsim runs on the functional simulator (no board).
TARGET = os.environ.get("VTAFORGE_RUN_TARGET", "pynq")
"""),
        ("code", """
# 1. Verify: every file against manifest.json (sha256, size).
r = subprocess.run([sys.executable, "verify.py"], capture_output=True, text=True)
print(r.stdout + r.stderr)
assert r.returncode == 0, "the package does not match its manifest: copy it again"
"""),
        ("code", """
# 2. Install the wheel (no dependencies: numpy and pynq come with the image).
# Test hook: VTAFORGE_SKIP_INSTALL=1 skips pip (vtaforge already importable).
if os.environ.get("VTAFORGE_SKIP_INSTALL") == "1":
    print("VTAFORGE_SKIP_INSTALL=1: not installing", WHEEL, "(test hook)")
else:
    subprocess.run([sys.executable, "-m", "pip", "install", "--no-deps", "--no-index",
                    "--force-reinstall", "--quiet", WHEEL], check=True)
import vtaforge
print("vtaforge", vtaforge.__version__, "from", os.path.dirname(vtaforge.__file__))
"""),
        ("code", """
# 3. Load the config and the model; open the device (programs the bitstream on pynq).
from vtaforge.hw.config import load_config
from vtaforge.runtime.artifact import load_artifact
from vtaforge.runtime.bundle import make_device
from vtaforge.runtime.executor import Executor

cfg = load_config("config.json")
model = load_artifact(os.path.join("models", MODEL + ".vtapkg"), cfg)
print(model.placement_table())
kw = {"bitstream": os.path.join(PACKAGE, "overlay", "vta.bit")} if TARGET == "pynq" else {}
device = make_device(TARGET, cfg, **kw)
"""),
        ("code", """
# 4. Run the model on INPUT; write OUT/output.npy and OUT/stats.json.
x = np.load(INPUT, allow_pickle=False)
ex = Executor(model, device)
t0 = time.perf_counter()
out = ex.run(x)
wall = time.perf_counter() - t0
y = np.asarray(out[model.outputs[0]], np.float32)
os.makedirs(OUT, exist_ok=True)
np.save(os.path.join(OUT, "output.npy"), y)
vta = [s.name for s in model.steps if s.target == "vta"]
stats = {"model": MODEL, "target": TARGET, "config_fingerprint": "0x%08x" % cfg.fingerprint,
         "input_shape": list(x.shape), "output_shape": list(y.shape),
         "steps": len(model.steps), "steps_on_vta": len(vta), "run_s": wall,
         "per_step": {n: {k: v for k, v in vars(ex.stats[n]).items() if k != "extra"}
                      for n in vta}}
with open(os.path.join(OUT, "stats.json"), "w") as f:
    json.dump(stats, f, indent=2)
print("output", model.outputs[0], list(y.shape), "; %d/%d steps on VTA; %.3f s"
      % (len(vta), len(model.steps), wall))
"""),
    ]
    return {"cells": [_cell(k, i, t) for i, (k, t) in enumerate(cells)],
            "metadata": {"kernelspec": {"display_name": "Python 3", "language": "python",
                                        "name": "python3"},
                         "language_info": {"name": "python"}},
            "nbformat": 4, "nbformat_minor": 5}


def _readme(cfg, models: list[str], name: str, board: dict) -> str:
    return f"""# Board package `{name}`

For a VTA core with config `{cfg.bitstream_name}` (fingerprint `0x{cfg.fingerprint:08x}`,
{board['title']}, part {board['part']}, {float(cfg.CLOCK_MHZ):g} MHz). Models:
{', '.join(models)}.

On the board (PYNQ 3.x image), as root, in this folder:

    sh run.sh verify                 # every file against manifest.json
    sh run.sh install                # verify + pip install --no-deps wheel/*.whl
    sh run.sh run INPUT.npy          # verify + run: results/MODEL/output.npy, stats.json

or open `vtaforge.ipynb` in PYNQ's Jupyter. From a workstation:
`vtaforge board deploy {name} --host xilinx@BOARD --run INPUT.npy`.
"""


# ---------------------------------------------------------------------------- subprocess
def _call(cmd: Sequence[str], *, timeout_s: float, what: str, check: bool = True
          ) -> subprocess.CompletedProcess:
    """Run ``cmd`` (its own process group, stdin closed, output captured) with a timeout.

    Raises:
        DeployError: the program is missing, it ran past ``timeout_s`` (its process group
            is killed), or (``check``) it exited non-zero (the last error-looking line).
    """
    try:
        p = subprocess.Popen(list(cmd), stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True, start_new_session=True)
    except FileNotFoundError:
        raise DeployError(f"{cmd[0]} is not installed (needed to {what})") from None
    except OSError as e:
        raise DeployError(f"cannot run {cmd[0]} to {what}: {e.strerror or e}") from None
    try:
        out, err = p.communicate(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        try:
            os.killpg(p.pid, signal.SIGKILL)
        except OSError:
            p.kill()
        p.communicate()
        raise DeployError(f"{Path(cmd[0]).name} did not finish within {timeout_s:g} s (to "
                          f"{what}); raise --timeout") from None
    r = subprocess.CompletedProcess(list(cmd), p.returncode, out, err)
    if check and r.returncode != 0:
        raise DeployError(f"{what}: {Path(cmd[0]).name} failed (exit {r.returncode}): "
                          f"{_last_error(out, err)}")
    return r


def _last_error(out: str, err: str) -> str:
    """The most telling line of a failed command: its last ``error:`` line, else the last
    non-empty line of stderr, else of stdout."""
    lines = [ln.strip() for ln in (out + "\n" + err).splitlines() if ln.strip()]
    errs = [ln for ln in lines if ln.lower().startswith("error")]
    if errs:
        return errs[-1]
    elines = [ln.strip() for ln in err.splitlines() if ln.strip()]
    return (elines or lines or ["no output"])[-1]


# ---------------------------------------------------------------------------- deploy
@dataclass
class DeployResult:
    """What :func:`deploy` did: ``remote`` (``HOST:DIR``), ``method`` (``rsync``/``scp``),
    ``files`` (files in the package), ``out`` (local results folder or None), ``stats``
    (the run's stats.json or None)."""

    remote: str
    method: str
    files: int
    out: Path | None = None
    stats: dict | None = None


_SSH_OPTS = ("-o", "BatchMode=yes", "-o", "ConnectTimeout=20")
#: Never copied to the board: the install marker and local results.
_NO_COPY = (".installed", "results")


def deploy(package_dir: str | Path, host: str, *, run_input: str | Path | None = None,
           model: str | None = None, remote_dir: str | None = None,
           out_dir: str | Path | None = None, copy: str = "auto", sudo: bool = False,
           timeout_s: float = DEFAULT_TIMEOUT_S,
           echo: Callable[[str], None] = lambda s: None) -> DeployResult:
    """Copy a package to ``host``, verify and install it there, optionally run a model.

    Steps: verify the package locally; ``ssh HOST mkdir -p DIR/inputs`` (and ask whether
    the board has ``rsync``); copy with ``rsync -a`` (``copy="auto"`` when both sides have
    it) or ``scp -r``; ``ssh HOST 'cd DIR && sh run.sh install'``; with ``run_input``: copy
    it to ``DIR/inputs/``, ``sh run.sh run --model NAME --out results/RUN inputs/X.npy``
    and fetch ``results/RUN`` (``output.npy``, ``stats.json``, ``run.log``) into
    ``out_dir`` (default ``PACKAGE_DIR-results/RUN``; RUN is ``NAME-INPUTSTEM``).

    Args:
        host: ``USER@HOST`` or an ssh config alias.
        remote_dir: the package's folder on the board (default ``vtaforge/PACKAGE``,
            relative to the remote home).
        copy: ``auto``, ``rsync`` or ``scp``.
        sudo: run ``run.sh`` with ``sudo -n`` (a user with password-less sudo).
        timeout_s: the limit of each external command.
        echo: progress lines.
    Raises:
        DeployError: a bad package, host, model, input or remote folder; an ssh, scp or
            rsync failure or timeout; a failing verify, install or run on the board (after
            fetching what the run left).
    """
    pkg = Path(package_dir)
    if not pkg.is_dir():
        raise DeployError(f"package {str(pkg)!r} is not a folder (make one with vtaforge "
                          f"board package)")
    man = verify_package(pkg)
    if not isinstance(host, str) or not _HOST.fullmatch(host):
        raise DeployError(f"--host {host!r} is not USER@HOST (letters, digits and _ . + -, "
                          f"not starting with -)")
    rdir = remote_dir if remote_dir is not None else f"vtaforge/{pkg.resolve().name}"
    if rdir.startswith("~/"):
        rdir = rdir[2:]
    if not rdir or not _REMOTE_DIR.fullmatch(rdir) or rdir.startswith("-"):
        raise DeployError(f"--remote-dir {remote_dir!r} must be a plain path (letters, "
                          f"digits and _ . ~ / + -)")
    if copy not in ("auto", "rsync", "scp"):
        raise DeployError(f"--copy {copy!r}: allowed: auto, rsync, scp")
    names = [m["name"] for m in man.get("models", [])]
    inp = None
    if run_input is not None:
        inp = Path(run_input)
        if not inp.is_file():
            raise DeployError(f"--run {str(inp)!r} does not exist")
        if inp.suffix != ".npy" or not _NAME.fullmatch(inp.stem):
            raise DeployError(f"--run {str(inp)!r}: expected a .npy file named with letters, "
                              f"digits and _ . -")
        if model is None:
            if len(names) != 1:
                raise DeployError(f"the package has several models ({', '.join(names)}): "
                                  f"pass --model NAME")
            model = names[0]
    if model is not None and model not in names:
        raise DeployError(f"--model {model!r} is not in the package (models: "
                          f"{', '.join(names)})")
    if model is not None and inp is None:
        raise DeployError("--model needs --run INPUT.npy")

    ssh = ["ssh", *_SSH_OPTS]
    qd = shlex.quote(rdir)
    where = f"{host}:{rdir}"
    prep = _call([*ssh, host, f"mkdir -p {qd}/inputs && if command -v rsync >/dev/null 2>&1; "
                              f"then echo vtaforge-rsync-yes; else echo vtaforge-rsync-no; fi"],
                 timeout_s=timeout_s, what=f"reach {host} over ssh")
    remote_rsync = "vtaforge-rsync-yes" in prep.stdout
    if copy == "auto":
        method = "rsync" if (shutil.which("rsync") and remote_rsync) else "scp"
    else:
        method = copy
    if method == "rsync":
        cmd = ["rsync", "-a", f"--timeout={int(max(1, timeout_s))}",
               "-e", "ssh " + " ".join(_SSH_OPTS)]
        cmd += [f"--exclude=/{n}" for n in _NO_COPY]
        cmd += [f"{pkg}/", f"{where}/"]
    else:
        tops = sorted(p for p in pkg.iterdir() if p.name not in _NO_COPY)
        cmd = ["scp", "-r", "-q", *_SSH_OPTS, *[str(p) for p in tops], f"{where}/"]
    _call(cmd, timeout_s=timeout_s, what=f"copy the package to {where}")
    nfiles = len(man["files"]) + len(man.get("user_files") or {})
    echo(f"copied {pkg} -> {where} ({method}, {nfiles} files)")

    run_sh = ("sudo -n " if sudo else "") + "sh run.sh"
    r = _call([*ssh, host, f"cd {qd} && {run_sh} install"], timeout_s=timeout_s,
              what=f"run.sh install on {host}", check=False)
    if r.returncode != 0:
        raise DeployError(f"on {host}: run.sh install failed (exit {r.returncode}): "
                          f"{_last_error(r.stdout, r.stderr)}")
    lines = [ln for ln in r.stdout.splitlines() if ln.startswith(("verify:", "run.sh:"))]
    for ln in lines:
        echo(f"{host}: {ln}")
    res = DeployResult(where, method, nfiles)
    if inp is None:
        return res

    run_id = f"{model}-{inp.stem}"
    if method == "rsync":
        cmd = ["rsync", "-a", f"--timeout={int(max(1, timeout_s))}", "-e",
               "ssh " + " ".join(_SSH_OPTS), str(inp), f"{where}/inputs/{inp.name}"]
    else:
        cmd = ["scp", "-q", *_SSH_OPTS, str(inp), f"{where}/inputs/{inp.name}"]
    _call(cmd, timeout_s=timeout_s, what=f"copy {inp} to {where}/inputs")
    rq = shlex.quote(f"results/{run_id}")
    r = _call([*ssh, host, f"cd {qd} && {run_sh} run --model {shlex.quote(model)} --out {rq} "
                           f"{shlex.quote('inputs/' + inp.name)}"],
              timeout_s=timeout_s, what=f"run {model} on {host}", check=False)
    out = Path(out_dir) if out_dir is not None else pkg.parent / f"{pkg.name}-results" / run_id
    fetched = _fetch(method, f"{where}/results/{run_id}", out, timeout_s)
    res.out = out
    stats = _load_json(out / "stats.json") if (out / "stats.json").is_file() else None
    res.stats = stats
    if r.returncode != 0:
        got = f" (fetched {', '.join(fetched)} into {out})" if fetched else ""
        raise DeployError(f"on {host}: run.sh run failed (exit {r.returncode}): "
                          f"{_last_error(r.stdout, r.stderr)}{got}")
    if stats is None or not (out / "output.npy").is_file():
        raise DeployError(f"on {host}: the run left no output.npy and stats.json in "
                          f"{where}/results/{run_id}")
    return res


def _fetch(method: str, remote: str, out: Path, timeout_s: float) -> list[str]:
    """Copy the files of the remote folder ``remote`` (``HOST:DIR``) into ``out``; return
    their names (nothing when the remote folder is missing)."""
    out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix=".fetch-", dir=str(out)) as tmp:
        if method == "rsync":
            cmd = ["rsync", "-a", f"--timeout={int(max(1, timeout_s))}", "-e",
                   "ssh " + " ".join(_SSH_OPTS), f"{remote}/", f"{tmp}/"]
        else:
            cmd = ["scp", "-r", "-q", *_SSH_OPTS, remote, f"{tmp}/"]
        r = _call(cmd, timeout_s=timeout_s, what=f"fetch {remote}", check=False)
        if r.returncode != 0:
            return []
        src = Path(tmp) if method == "rsync" else Path(tmp) / remote.rsplit("/", 1)[-1]
        names = []
        for p in sorted(src.iterdir()) if src.is_dir() else []:
            if p.is_file():
                os.replace(p, out / p.name)
                names.append(p.name)
    return names


# ---------------------------------------------------------------------------- board side
_SUMMARY = re.compile(r"sample\(s\) on \S+ \(.*?\) in ([0-9.]+) s; (\d+)/(\d+) steps on VTA, "
                      r"([0-9.]+) s in CPU steps")


def run_stats(*, model: str, config: str, input: str, output: str, log: str | None,
              target: str, start: float, end: float, exit_status: int) -> dict[str, Any]:
    """The statistics of one ``vtaforge run`` on the board (``run.sh`` writes them as
    ``stats.json``): model, target, config fingerprint, input and output shapes, steps
    (on VTA / all), ``wall_s`` (the ``vtaforge run`` process, start to exit), ``run_s`` and
    ``cpu_steps_s`` (from its summary line), the exit status and its ``error:`` line."""
    import platform

    import numpy as np

    from . import __version__
    from .hw.config import load_config
    from .runtime.artifact import load_artifact

    d: dict[str, Any] = {"model": Path(model).stem, "model_file": model, "target": target,
                         "test_hook": None if target == "pynq" else
                         f"VTAFORGE_RUN_TARGET={target}",
                         "exit_status": int(exit_status), "error": None,
                         "wall_s": round(float(end) - float(start), 6)}
    try:
        cfg = load_config(config)
        d["config_fingerprint"] = f"0x{cfg.fingerprint:08x}"
        d["bitstream_name"] = cfg.bitstream_name
        cm = load_artifact(model, cfg)
        vta = [s.name for s in cm.steps if s.target == "vta"]
        d.update(model_name=cm.name, steps=len(cm.steps), steps_on_vta=len(vta),
                 vta_steps=vta)
    except Exception as e:  # noqa: BLE001 - statistics of a failed run still get written
        d["error"] = f"error: {_first_line(str(e))}"
    for key, path in (("input", input), ("output", output)):
        d[key] = path
        try:
            a = np.load(path, mmap_mode="r", allow_pickle=False)
            d[f"{key}_shape"], d[f"{key}_dtype"] = list(a.shape), str(a.dtype)
        except (OSError, ValueError):
            d[f"{key}_shape"] = d[f"{key}_dtype"] = None
    text = ""
    if log:
        try:
            text = Path(log).read_text(errors="replace")
        except OSError:
            pass
    m = _SUMMARY.search(text)
    d["run_s"] = float(m.group(1)) if m else None
    d["cpu_steps_s"] = float(m.group(4)) if m else None
    errs = [ln.strip() for ln in text.splitlines() if ln.strip().startswith("error:")]
    if errs:
        d["error"] = errs[-1]
    d.update(host=platform.node(), machine=platform.machine(),
             python=platform.python_version(), vtaforge=__version__,
             finished_at=time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(float(end))))
    return d


def run_model(*, model: str, input: str, config: str, target: str = "pynq",
              output: str | None = None, echo: Callable[[str], None] = print) -> None:
    """Run a ``.vtapkg`` on one input: what ``vtaforge run --model M.vtapkg --input X
    --config C --target T --output Y`` does, without click (the board's Python may lack
    it: ``run.sh`` calls this through ``python -m vtaforge.deploy run``).  It prints the
    same placement table and summary line (``run_stats`` reads it), on ``rtl``/``pynq``
    the core cycles per VTA step, and writes the first output (float32) to ``output``.

    Raises:
        DeployError: an unreadable input; the runtime's errors (ConfigError,
            ArtifactError, DeviceError) pass through.
    """
    import numpy as np

    from .hw.config import load_config
    from .runtime.artifact import load_artifact
    from .runtime.bundle import make_device
    from .runtime.executor import Executor

    cfg = load_config(config)
    cm = load_artifact(model, cfg)
    try:
        x = np.load(input, allow_pickle=False)
    except (OSError, ValueError, EOFError) as e:
        raise DeployError(f"cannot read input {input!r}: {e or 'empty file'}") from None
    if isinstance(x, np.lib.npyio.NpzFile):
        from .runtime.npz import read_npz

        with x:
            x = read_npz(x, input, "input")
        if not x:
            raise DeployError(f"input {input!r} is an empty .npz archive")
        extra = [k for k in x if k not in cm.inputs]
        if extra:
            raise DeployError(f"input {input!r} has unknown input(s) {extra}; the model's "
                              f"inputs: {list(cm.inputs)}")
    elif not isinstance(x, np.ndarray):
        raise DeployError(f"input {input!r} is not a single .npy array")
    echo("placement:")
    echo(cm.placement_table())
    ex = Executor(cm, make_device(target, cfg))
    vals = list(x.values()) if isinstance(x, dict) else [x]
    ns = {int(np.shape(v)[0]) if np.ndim(v) else None for v in vals}
    n = ns.pop() if len(ns) == 1 else None
    shape = cm.types[cm.inputs[0]][1]
    b = shape[0] if shape and isinstance(shape[0], int) else None
    t0 = time.perf_counter()
    if not isinstance(b, int) or b < 1 or not n or n == b or n % b:
        out = ex.run(x)
    else:  # a fixed model batch: b samples at a time, outputs concatenated
        outs = [ex.run({k: v[i:i + b] for k, v in x.items()} if isinstance(x, dict)
                       else x[i:i + b]) for i in range(0, n, b)]
        out = {k: np.concatenate([o[k] for o in outs]) for k in outs[0]}
    dt = time.perf_counter() - t0
    host = sum(st.host_seconds for st in ex.stats.values())
    y = np.asarray(out[cm.outputs[0]], np.float32)
    if output:
        tmp = Path(output).with_name(f".{Path(output).name}.tmp")
        with open(tmp, "wb") as f:
            np.save(f, y)
        os.replace(tmp, output)
    vta = [s for s in cm.steps if s.target == "vta"]
    nsamp = n if n is not None else 1
    echo(f"{cm.name}: {nsamp} sample(s) on {target} ({cfg.bitstream_name}) in {dt:.2f} s; "
         f"{len(vta)}/{len(cm.steps)} steps on VTA, {host:.3f} s in CPU steps; output "
         f"{cm.outputs[0]} {list(y.shape)}" + (f" -> {output}" if output else ""))
    if target in ("rtl", "pynq"):  # the lines of vtaforge run (commands.profile, which needs click)
        total = sum(int(ex.stats[s.name].cycles) for s in vta)
        w = max((len(s.name) for s in vta), default=4)
        echo(f"core cycles: {total} in {len(vta)} VTA step(s)")
        for s in vta:
            c = int(ex.stats[s.name].cycles)
            echo(f"  {s.name:<{w}}  {c:>10}  " + (f"{100 * c / total:4.0f}%" if total else "   - "))


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m vtaforge.deploy run ...`` and ``stats ... -o STATS.json`` (what
    ``run.sh`` calls: no click) and ``python -m vtaforge.deploy verify PACKAGE_DIR``."""
    import argparse

    ap = argparse.ArgumentParser(prog="python -m vtaforge.deploy")
    sub = ap.add_subparsers(dest="cmd", required=True)
    s = sub.add_parser("stats", help="write the statistics of a vtaforge run")
    for k in ("--model", "--config", "--input", "--output", "--target", "-o"):
        s.add_argument(k, required=True)
    s.add_argument("--log")
    s.add_argument("--start", type=float, required=True)
    s.add_argument("--end", type=float, required=True)
    s.add_argument("--exit-status", type=int, default=0)
    v = sub.add_parser("verify", help="check a package against its manifest")
    v.add_argument("package")
    r = sub.add_parser("run", help="run a .vtapkg on an input (vtaforge run, without click)")
    for k in ("--model", "--input", "--config"):
        r.add_argument(k, required=True)
    r.add_argument("--target", default="pynq")
    r.add_argument("--output")
    a = ap.parse_args(argv)
    if a.cmd == "run":
        from .hw.config import ConfigError
        from .runtime.artifact import ArtifactError
        from .runtime.device import DeviceError

        try:
            run_model(model=a.model, input=a.input, config=a.config, target=a.target,
                      output=a.output)
        except (DeployError, ConfigError, ArtifactError, DeviceError, OSError,
                ValueError) as e:
            if os.environ.get("VTAFORGE_DEBUG") == "1":
                raise
            print(f"error: {_first_line(str(e))}", file=sys.stderr)
            return 2
        return 0
    try:
        if a.cmd == "verify":
            verify_package(a.package)
            print(f"verify: {a.package}: every file matches manifest.json")
            return 0
        d = run_stats(model=a.model, config=a.config, input=a.input, output=a.output,
                      log=a.log, target=a.target, start=a.start, end=a.end,
                      exit_status=a.exit_status)
        _write_json(Path(a.o), d)
    except (DeployError, OSError) as e:
        print(f"error: {_first_line(str(e))}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
