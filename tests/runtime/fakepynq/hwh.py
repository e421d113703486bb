"""Read a Vivado hardware handoff (.hwh) the way the simulated board needs it.

- ``ip_dict``: the processor's address map.  Every ``MEMRANGE`` of the processing system's
  ``MEMORYMAP`` names a slave instance; the entry is keyed by that module's ``FULLNAME``
  without the leading slash and holds ``phys_addr`` (``BASEVALUE``), ``addr_range``
  (``HIGHVALUE - BASEVALUE + 1``), ``type`` (the module's ``VLNV``), ``fullpath``,
  ``mem_id`` (the slave interface), ``memtype``, ``parameters``, ``registers`` (empty),
  ``state`` (None), ``gpio`` and ``interrupts`` (empty).  The processing system itself is
  an entry too (``type`` and ``parameters``), as in pynq.
- ``clocks``: per PL clock ``i``, ``enable`` and ``divisor0``/``divisor1`` from the PS
  parameters (Zynq-7000 ``PCW_FPGA_FCLK<i>_ENABLE`` / ``PCW_FCLK<i>_PERIPHERAL_DIVISOR<j>``,
  ZynqMP ``PSU__FPGA_PL<i>_ENABLE`` / ``PSU__CRL_APB__PL<i>_REF_CTRL__DIVISOR<j>``).
"""

from __future__ import annotations

import xml.etree.ElementTree as ET
from dataclasses import dataclass, field
from pathlib import Path

PS_TYPES = {"processing_system7": "zynq", "zynq_ultra_ps_e": "zynq_us+"}


@dataclass
class Handoff:
    family: str
    ps_name: str
    ip_dict: dict = field(default_factory=dict)
    clocks: dict = field(default_factory=dict)
    ps_parameters: dict = field(default_factory=dict)


def _params(mod: ET.Element) -> dict[str, str]:
    return {p.get("NAME"): p.get("VALUE") for p in mod.findall("./PARAMETERS/PARAMETER")
            if p.get("NAME") is not None}


def _int(v: str | None, default: int = 0) -> int:
    try:
        return int(str(v), 0)
    except (TypeError, ValueError):
        return default


def parse(path: str | Path) -> Handoff:
    """The address map and PL clocks of the .hwh at ``path``.

    Raises:
        ValueError: no processing system in the design.
    """
    root = ET.parse(str(path)).getroot()
    modules = {m.get("INSTANCE"): m for m in root.iter("MODULE")}
    ps = next((m for m in modules.values() if m.get("MODTYPE") in PS_TYPES), None)
    if ps is None:
        raise ValueError(f"{path}: no processing system (processing_system7 or "
                         f"zynq_ultra_ps_e) in the design")
    family = PS_TYPES[ps.get("MODTYPE")]
    hw = Handoff(family=family, ps_name=ps.get("FULLNAME").lstrip("/"))
    hw.ps_parameters = _params(ps)
    for r in ps.iter("MEMRANGE"):
        mod = modules.get(r.get("INSTANCE"))
        if mod is None:
            continue
        name = mod.get("FULLNAME").lstrip("/")
        base, high = _int(r.get("BASEVALUE")), _int(r.get("HIGHVALUE"))
        hw.ip_dict[name] = {
            "fullpath": name, "type": mod.get("VLNV"), "phys_addr": base,
            "addr_range": high - base + 1, "mem_id": r.get("SLAVEBUSINTERFACE"),
            "memtype": r.get("MEMTYPE"), "parameters": _params(mod), "registers": {},
            "state": None, "gpio": {}, "interrupts": {},
        }
    hw.ip_dict[hw.ps_name] = {"type": ps.get("VLNV"), "parameters": hw.ps_parameters,
                              "gpio": {}, "interrupts": {}}
    p = hw.ps_parameters
    for i in range(4):
        if family == "zynq":
            en, div = f"PCW_FPGA_FCLK{i}_ENABLE", f"PCW_FCLK{i}_PERIPHERAL_DIVISOR{{}}"
        else:
            en, div = f"PSU__FPGA_PL{i}_ENABLE", f"PSU__CRL_APB__PL{i}_REF_CTRL__DIVISOR{{}}"
        hw.clocks[i] = {"enable": _int(p.get(en)),
                        "divisor0": _int(p.get(div.format(0)), 1),
                        "divisor1": _int(p.get(div.format(1)), 1)}
    return hw
