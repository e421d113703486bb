"""Bitstream checks: a Vivado ``.bit`` header and ``.hwh`` hand-off read back, the JSON that
gives a bitstream's fingerprint found (:func:`find_bitstream_info`), a ``.bit`` + ``.hwh``
checked against a config (:func:`check_bitstream`) and the sidecar ``vtaforge board build``
writes (:func:`write_bitstream_sidecar`); the rules are in :mod:`vtaforge.runtime.board`."""

from __future__ import annotations

import re
import struct
from pathlib import Path
from typing import Any
from xml.etree import ElementTree

from ...hw.config import ConfigError, VTAConfig
from ...hw.parts import FlowError, board_spec, device_of, pl_clock
from ._common import SIDECAR_FORMAT, DeployError, _load_json, _sha256, _write_json

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
        DeployError: unreadable, not a ``.bit`` (a raw ``.bin`` has no header), or
            shorter than the configuration data its header declares.
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
            held = size - (pos + 4)
            if held < fields["e"]:      # a copy cut short: PYNQ would load a partial design
                raise DeployError(f"bitstream {str(p)!r} is truncated: its header declares "
                                  f"{fields['e']} bytes of configuration data, the file holds "
                                  f"{max(held, 0)}")
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
    is one of the core's bus interfaces; that ``MEMRANGE`` in the PS's memory map, from a
    ``MASTER`` AXI-MM bus interface of the PS to a ``SLAVE`` AXI-MM one of the core (else
    the core is missing from ``ip_dict``); a ``SYSTEMINFO`` ``NAME``; every ``CONNECTION``
    naming a declared port (:func:`_check_hwh_connections`).  Facts from board-notes.md and the pynq source;
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
    _check_hwh_connections(root, insts, bad)
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
    if cores:  # else read_hwh names the missing core module
        _check_core_window(root, psm, cores[0], core, bad)
    _check_hwh_fields(root, bad)


def _check_core_window(root, psm, cm, core: str, bad) -> None:
    """The core's module: a module reference of ``core`` whose register window the PS
    addresses (see :func:`_check_hwh_for_pynq`)."""
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
    _check_core_bus(psm, cm, bad)


def _aximm(bus, types: tuple[str, ...]) -> bool:
    """Whether ``bus`` is an AXI memory-mapped bus interface of one of ``types``."""
    vlnv = (bus.get("VLNV") or "").split(":")
    return bus.get("TYPE") in types and len(vlnv) > 2 and vlnv[2] == "aximm"


def _check_hwh_connections(root, insts: dict, bad) -> None:
    """The design is named (``SYSTEMINFO NAME``) and every ``CONNECTION`` of a module's
    ``PORT`` names a port that exists, a ``PORT`` of the named ``MODULE`` (or of
    ``EXTERNALPORTS`` for ``External_Ports``), with the polarity the loader needs: one of
    two module ports an output (``DIR="O"``), a module port and an external one both or
    neither.  The pynqmetadata frontend of PYNQ 3.x connects each one and stops on one it
    cannot find or whose polarity is wrong."""
    info = root.find("SYSTEMINFO")
    if info is None or not info.get("NAME"):
        raise bad("has no SYSTEMINFO NAME (the block design's name, which the loader's "
                  "addresses start with)")
    outer = {"External_Ports", f"{info.get('NAME')}_imp"}
    ext = {pm.get("PHYSICAL"): False for e in root.iter("EXTERNALINTERFACES")
           for pm in e.iter("PORTMAP")}
    ext.update({q.get("NAME"): q.get("DIR") == "O" for e in root.iter("EXTERNALPORTS")
                for q in e.iter("PORT")})
    ports = {i: {q.get("NAME"): q.get("DIR") == "O" for q in m.iter("PORT")}
             for i, m in insts.items()}
    for inst, m in insts.items():
        for prt in m.iter("PORT"):
            for c in prt.iter("CONNECTION"):
                dst, name = c.get("INSTANCE"), c.get("PORT")
                what = f"connects port {inst}/{prt.get('NAME')} to {dst}/{name}"
                if dst not in outer and dst not in ports:
                    raise bad(f"{what}, but there is no MODULE {dst}")
                there = ext if dst in outer else ports[dst]
                if name not in there:
                    where = "EXTERNALPORTS" if dst in outer else f"MODULE {dst}"
                    raise bad(f"{what}, which {where} does not declare")
                if (there[name] == ports[inst][prt.get("NAME")]) != (dst in outer):
                    raise bad(f"{what} (DIR {prt.get('DIR')!r} to a port of "
                              f"{'the same' if dst not in outer else 'another'} direction)")


def _check_hwh_fields(root, bad) -> None:
    """The attributes the loader reads without a default: a ``PORT`` or ``PORTMAP``'s
    ``RIGHT`` where it has a ``LEFT`` (both integers), a register or memory
    ``ADDRESSBLOCK``'s ``INTERFACE``, and each ``MEMRANGE``'s ``INSTANCE`` (a module),
    ``MEMTYPE`` and hexadecimal ``BASEVALUE`` and ``HIGHVALUE``."""
    for e in (*root.iter("PORT"), *root.iter("PORTMAP")):
        lr = (e.get("LEFT"), e.get("RIGHT"))
        if lr[0] is not None and not all(v is not None and re.fullmatch(r"\d+", v)
                                         for v in lr):
            raise bad(f"gives {e.tag} {e.get('NAME') or e.get('PHYSICAL')!r} LEFT={lr[0]!r} "
                      f"RIGHT={lr[1]!r} (expected two integers)")
    for e in root.iter("ADDRESSBLOCK"):
        if e.get("USAGE") in ("register", "memory") and not e.get("INTERFACE"):
            raise bad(f"has an ADDRESSBLOCK {e.get('NAME')!r} without INTERFACE")
    mods = {m.get("INSTANCE") for m in root.iter("MODULE")}
    for e in root.iter("MEMRANGE"):
        if e.get("INSTANCE") not in mods or not e.get("MEMTYPE"):
            raise bad(f"has a MEMRANGE with INSTANCE {e.get('INSTANCE')!r} and MEMTYPE "
                      f"{e.get('MEMTYPE')!r} (expected a MODULE's instance and a type)")
        if e.get("MEMTYPE") in ("REGISTER", "MEMORY") and (
                _hex(e.get("BASEVALUE")) is None or _hex(e.get("HIGHVALUE")) is None):
            raise bad(f"gives the MEMRANGE of {e.get('INSTANCE')} BASEVALUE="
                      f"{e.get('BASEVALUE')!r} HIGHVALUE={e.get('HIGHVALUE')!r} (expected "
                      f"hexadecimal)")


def _check_core_bus(psm, cm, bad) -> None:
    """The PS reaches the core's registers: a ``MEMRANGE`` of the PS's memory map names
    the core, through a master AXI-MM bus interface of the PS and a slave AXI-MM one of the
    core (PYNQ 3.x lists in ``ip_dict`` only what a PS master port addresses)."""
    inst = cm.get("INSTANCE")
    rngs = [r for r in psm.iter("MEMRANGE") if r.get("INSTANCE") == inst]
    if not rngs:
        raise bad(f"has no MEMRANGE for the core {inst} in the memory map of the PS "
                  f"{psm.get('INSTANCE')} (the loader lists only what the PS addresses)")
    masters = {b.get("NAME"): b for b in psm.iter("BUSINTERFACE")}
    slaves = {b.get("NAME"): b for b in cm.iter("BUSINTERFACE")}
    for r in rngs:
        m, s = r.get("MASTERBUSINTERFACE"), r.get("SLAVEBUSINTERFACE")
        if m not in masters or not _aximm(masters[m], ("MASTER", "INITIATOR")):
            raise bad(f"addresses the core {inst} from the PS's bus interface {m!r}, which is "
                      f"not a MASTER AXI-MM BUSINTERFACE of MODULE {psm.get('INSTANCE')}")
        if not _aximm(slaves[s], ("SLAVE", "TARGET")):
            raise bad(f"addresses the core {inst} through bus interface {s!r}, which is not "
                      f"a SLAVE AXI-MM BUSINTERFACE (TYPE {slaves[s].get('TYPE')!r}, VLNV "
                      f"{slaves[s].get('VLNV')!r})")


def _fingerprint_of(d: dict, src: str) -> tuple[int, Any]:
    """``(fingerprint, VTAConfig or None)`` of a sidecar or board.json dict."""
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
        clocks.append(float(pl_clock(spec, mhz).mhz))
    except FlowError:
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
    :class:`~vtaforge.hw.vivado.TimingResult` or None).

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
