"""Test material for the board package/deploy tests: a Vivado-format ``.bit`` header with
a few bytes of configuration data, a small ``.hwh`` of the vtaforge block design, a
board project without the core's Verilog, a tiny stand-in wheel, the digits model compiled
for a config, and an environment that puts the fake ssh/scp/rsync first on PATH."""

from __future__ import annotations

import os
import struct
import sys
import warnings
import zipfile
from pathlib import Path

HERE = Path(__file__).resolve().parent

#: Vivado's .bit preamble: a 9-byte magic field, then the key of field ``a``.
_MAGIC = b"\x0f\xf0\x0f\xf0\x0f\xf0\x0f\xf0\x00"


def bit_bytes(part: str = "7z020clg484", user_id: int = 0xFFFFFFFF, nbytes: int = 256) -> bytes:
    """A ``.bit``: header fields a (design;UserID;Version), b (part), c (date), d (time),
    e (data length) and ``nbytes`` of data starting with the sync word."""
    def f(key: bytes, s: str) -> bytes:
        b = s.encode() + b"\x00"
        return key + struct.pack(">H", len(b)) + b

    a = f"vta_bd_wrapper;UserID=0X{user_id:08X};Version=2022.2".encode() + b"\x00"
    data = (b"\xff" * 16 + b"\x00\x00\x00\xbb\x11\x22\x00\x44" + b"\xff" * 8
            + b"\xaa\x99\x55\x66" + bytes(range(256)) * (nbytes // 256 + 1))[:nbytes]
    return (struct.pack(">H", 9) + _MAGIC + struct.pack(">H", 1) + b"a"
            + struct.pack(">H", len(a)) + a + f(b"b", part) + f(b"c", "2025/12/01")
            + f(b"d", "09:00:00") + b"e" + struct.pack(">I", len(data)) + data)


def board_part(cfg) -> str:
    """The part Vivado builds for: the board's (hw/parts.py ``BoardSpec.part``), else
    ``cfg.PART`` (a generic board of the part's family)."""
    from vtaforge.hw.parts import board_spec

    return board_spec(cfg).part or cfg.PART


def pl_clock_mhz(cfg) -> float:
    """The PL clock the project asks the PS for (the flow may round CLOCK_MHZ down to one
    the PS can make)."""
    from vtaforge.hw import parts

    return float(parts.pl_clock(parts.board_spec(cfg), cfg.CLOCK_MHZ).mhz)


def hwh_text(cfg, *, core: str = "vta_wrapper", clock_mhz: float | None = None,
             device: str | None = None) -> str:
    """A Vivado hardware hand-off of the block design ``board project`` builds for
    ``cfg`` (PS, reset, SmartConnects elided to what the package checks read)."""
    from vtaforge.hw.parts import board_spec

    spec = board_spec(cfg)
    part = board_part(cfg).lower()
    mhz = f"{float(clock_mhz if clock_mhz is not None else pl_clock_mhz(cfg)):g}"
    if spec.family == "zynq7":
        dev, pkg = part[2:].split("-")[0][:5], part[2:].split("-")[0][5:]
        arch, clk = "zynq", "PCW_FPGA0_PERIPHERAL_FREQMHZ"
        vlnv, ctrl = "xilinx.com:ip:processing_system7:5.5", "M_AXI_GP0"
    else:
        dev, pkg = part.split("-")[0], part.split("-")[1]
        arch, clk = "zynquplus", "PSU__CRL_APB__PL0_REF_CTRL__FREQMHZ"
        vlnv, ctrl = "xilinx.com:ip:zynq_ultra_ps_e:3.4", "M_AXI_HPM0_FPD"
    dev = device or dev
    base = spec.reg_base
    # PL clocks 0-3 as the PS IP writes them (enable, two divisors): clock 0 at the request
    div = round(spec.pll_mhz / float(mhz))
    d0 = next(a for a in range(min(div, 63), 0, -1) if div % a == 0 and div // a <= 63)
    ens, dvs = ({"zynq7": ("PCW_FPGA_FCLK{i}_ENABLE", "PCW_FCLK{i}_PERIPHERAL_DIVISOR{j}")}
                .get(spec.family, ("PSU__FPGA_PL{i}_ENABLE",
                                   "PSU__CRL_APB__PL{i}_REF_CTRL__DIVISOR{j}")))
    clocks = "\n".join(
        f'        <PARAMETER NAME="{ens.format(i=i)}" VALUE="{1 if i == 0 else 0}"/>\n'
        f'        <PARAMETER NAME="{dvs.format(i=i, j=0)}" VALUE="{d0 if i == 0 else 1}"/>\n'
        f'        <PARAMETER NAME="{dvs.format(i=i, j=1)}" VALUE="{div // d0 if i == 0 else 1}"/>'
        for i in range(4))
    return f"""<?xml version="1.0" encoding="UTF-8" standalone="no" ?>
<EDKSYSTEM EDWVERSION="1.2" TIMESTAMP="Mon Dec  1 09:00:00 2025" VIVADOVERSION="2022.2">

  <SYSTEMINFO ARCH="{arch}" BOARD="" DEVICE="{dev}" NAME="vta_bd" PACKAGE="{pkg}" SPEEDGRADE="-1"/>

  <EXTERNALPORTS/>

  <MODULES>
    <MODULE COREREVISION="1" FULLNAME="/ps" HWVERSION="5.5" INSTANCE="ps" IPTYPE="PERIPHERAL"
            IS_ENABLE="1" IS_PL="FALSE" MODCLASS="PROCESSOR" MODTYPE="{spec.ps_ip}" VLNV="{vlnv}">
      <PARAMETERS>
        <PARAMETER NAME="Component_Name" VALUE="vta_bd_ps_0"/>
        <PARAMETER NAME="{clk}" VALUE="{mhz}"/>
{clocks}
      </PARAMETERS>
      <MEMORYMAP>
        <MEMRANGE ADDRESSBLOCK="reg0" BASENAME="C_BASEADDR" BASEVALUE="0x{base:08X}"
                  HIGHNAME="C_HIGHADDR" HIGHVALUE="0x{base + 0xFFF:08X}" INSTANCE="vta_0"
                  IS_DATA="TRUE" IS_INSTRUCTION="TRUE" MASTERBUSINTERFACE="{ctrl}"
                  MEMTYPE="REGISTER" SLAVEBUSINTERFACE="s_axi"/>
      </MEMORYMAP>
      <PORTS>
        <PORT CLKFREQUENCY="{int(float(mhz) * 1e6)}" DIR="O" NAME="FCLK_CLK0" SIGIS="clk" SIGNAME="ps_FCLK_CLK0"/>
        <PORT DIR="O" NAME="{ctrl}_AWVALID" SIGIS="undef" SIGNAME="ctrl_awvalid"/>
      </PORTS>
      <BUSINTERFACES>
        <BUSINTERFACE BUSNAME="ctrl" NAME="{ctrl}" TYPE="MASTER" VLNV="xilinx.com:interface:aximm:1.0">
          <PORTMAPS>
            <PORTMAP LOGICAL="AWVALID" PHYSICAL="{ctrl}_AWVALID"/>
          </PORTMAPS>
        </BUSINTERFACE>
      </BUSINTERFACES>
    </MODULE>
    <MODULE BDTYPE="" COREREVISION="1" FULLNAME="/vta_0" HWVERSION="1.0" INSTANCE="vta_0"
            IPTYPE="PERIPHERAL" IS_ENABLE="1" MODCLASS="PERIPHERAL" MODTYPE="{core}"
            VLNV="xilinx.com:module_ref:{core}:1.0">
      <PARAMETERS>
        <PARAMETER NAME="Component_Name" VALUE="vta_bd_vta_0_0"/>
      </PARAMETERS>
      <PORTS>
        <PORT DIR="I" NAME="clk" SIGIS="clk" SIGNAME="ps_FCLK_CLK0"/>
        <PORT DIR="O" NAME="irq" SENSITIVITY="LEVEL_HIGH" SIGIS="INTERRUPT" SIGNAME="vta_0_irq"/>
        <PORT DIR="I" NAME="s_axi_awvalid" SIGIS="undef" SIGNAME="ctrl_awvalid"/>
      </PORTS>
      <BUSINTERFACES>
        <BUSINTERFACE BUSNAME="ctrl" NAME="s_axi" TYPE="SLAVE" VLNV="xilinx.com:interface:aximm:1.0">
          <PORTMAPS>
            <PORTMAP LOGICAL="AWVALID" PHYSICAL="s_axi_awvalid"/>
          </PORTMAPS>
        </BUSINTERFACE>
      </BUSINTERFACES>
    </MODULE>
  </MODULES>

</EDKSYSTEM>
"""


def write_project(d: Path, cfg, *, bit: bytes | None = None) -> Path:
    """A board project (``vtaforge board project`` files, a stub core) with the outputs
    Vivado leaves: ``out/vta.bit`` and ``out/vta.hwh``.  Returns the ``.bit``."""
    from vtaforge.hw.vivado import write_project as wp

    with warnings.catch_warnings():  # a rounded PL clock (FlowWarning) is the flow's business
        warnings.simplefilter("ignore")
        wp(cfg, d, verilog="// stub core (tests)\n")
    (d / "out").mkdir(exist_ok=True)
    b = d / "out" / "vta.bit"
    part = board_part(cfg)
    b.write_bytes(bit if bit is not None else bit_bytes(part[2:].split("-")[0]
                                                        if part.startswith("xc7z") else part))
    (d / "out" / "vta.hwh").write_text(hwh_text(cfg))
    return b


def fake_wheel(d: Path, version: str = "0.1.0") -> Path:
    """A tiny valid wheel archive named like vtaforge's (never installed by the tests)."""
    p = d / f"vtaforge-{version}-py3-none-any.whl"
    di = f"vtaforge-{version}.dist-info"
    with zipfile.ZipFile(p, "w") as z:
        z.writestr("vtaforge/__init__.py", f'__version__ = "{version}"\n')
        z.writestr(f"{di}/METADATA", f"Metadata-Version: 2.1\nName: vtaforge\nVersion: {version}\n")
        z.writestr(f"{di}/WHEEL", "Wheel-Version: 1.0\nRoot-Is-Purelib: true\nTag: py3-none-any\n")
        z.writestr(f"{di}/RECORD", "")
    return p


def compile_digits(out: Path, config: str = "pynq") -> Path:
    """``vtaforge compile compiler/models/digits.onnx -o OUT --config CONFIG`` (in process)."""
    from click.testing import CliRunner

    from vtaforge.cli import main
    from vtaforge.compiler.models import DIGITS_ONNX

    out.parent.mkdir(parents=True, exist_ok=True)
    r = CliRunner().invoke(main, ["compile", str(DIGITS_ONNX), "-o", str(out), "--config", config])
    assert r.exit_code == 0, r.output
    return out


def fake_env(root: Path, log: Path | None = None, **extra: str) -> dict[str, str]:
    """The environment of a test that runs ``vtaforge board deploy``: the fakes first on
    PATH, the fake remote at ``root``, and run.sh's test hooks (fsim, no pip, this Python)."""
    env = dict(os.environ)
    env.update(PATH=f"{HERE}{os.pathsep}{env.get('PATH', '')}", FAKE_SSH_ROOT=str(root),
               VTAFORGE_RUN_TARGET="fsim", VTAFORGE_SKIP_INSTALL="1",
               VTAFORGE_PYTHON=sys.executable, VTAFORGE_PYNQ_VENV=str(root / "no-venv"))
    if log is not None:
        env["FAKE_SSH_LOG"] = str(log)
    env.update(extra)
    return env
