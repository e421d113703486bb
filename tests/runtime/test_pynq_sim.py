"""The unchanged ``pynq`` backend on a simulated PYNQ board: the Verilated core behind a
PYNQ-compatible stand-in (``fakepynq``, imported as ``pynq`` for these tests only).

What is real here: the backend's own code paths (``pynq.Overlay`` and the ``.hwh``'s
``ip_dict`` for the register base, ``pynq.MMIO`` for the registers, ``pynq.allocate``
for memory, ``pynq.Clocks`` for the PL clock) and the core (the generated RTL, Verilated).
What is simulated (``fakepynq/board.py``): DRAM at the top of a PYNQ-Z2's 512 MiB DDR,
the CMA allocator, a write-back CPU cache with 64-byte lines (unflushed CPU writes are
invisible to the core, stale lines stay until invalidated), the PL clocks, and time: the
core runs only while the host polls, so no run finishes inside the START write.

Checked: the behavioural programs of ``test_rtl_programs`` (relocated, through
``run_raw``) and the digits CNN equal fsim bit for bit; skipping the backend's flush of an
input or its invalidate of an output makes them differ; XRT's above-4-GiB small buffers;
the PL-clock check; a hung run becomes an error and reprogramming recovers.
"""

from __future__ import annotations

import re
import shutil

import numpy as np
import pytest

from vtaforge.hw.config import MemType, preset
from vtaforge.hw.isa import Module
from vtaforge.runtime.builder import ProgramBuilder
from vtaforge.runtime.device import DeviceError, ProgramError
from vtaforge.runtime.fsim import FsimDevice, simulate

pytestmark = pytest.mark.rtl

rtl = pytest.importorskip("vtaforge.runtime.rtl")
try:
    from vtaforge.hw.core import emit_verilog  # noqa: F401
except ImportError:  # pragma: no cover
    pytest.skip("the Amaranth core (vtaforge.hw.core) is not available", allow_module_level=True)

import fakepynq  # noqa: E402
from programs import dot_gemm_oracle, finish, gemm, record_dot_gemm  # noqa: E402
from test_rtl_programs import PROGRAMS  # noqa: E402
from vtaforge.runtime import pynq as backend  # noqa: E402

C, S, L = Module.COMPUTE, Module.STORE, Module.LOAD
CORE_BASE = 0x43C0_0000


_MODELS: dict = {}


def model_of(name: str):
    """(config, built model) of a preset, once per session (the build is cached on disk
    and shared with test_rtl_programs)."""
    if name not in _MODELS:
        c = preset(name)
        _MODELS[name] = (c, rtl.build_model(c, progress=False))
    return _MODELS[name]


@pytest.fixture
def cfg():
    return model_of("tiny")[0]


def write_overlay(tmp_path, text=None, name="vta"):
    """A .bit (its content is not looked at) with a .hwh beside it."""
    d = tmp_path / "overlay"
    d.mkdir(exist_ok=True)
    (d / f"{name}.bit").write_bytes(b"\x00\x09\x0f\xf0" * 64)
    if text is None:
        shutil.copy(fakepynq.SAMPLE_HWH, d / f"{name}.hwh")
    else:
        (d / f"{name}.hwh").write_text(text)
    return d / f"{name}.bit"


@pytest.fixture
def make_board(monkeypatch):
    boards = []
    monkeypatch.delenv("VTAFORGE_BITSTREAM", raising=False)

    def make(preset_name="tiny", **kw):
        b = fakepynq.SimBoard(*model_of(preset_name), **kw)
        fakepynq.use(monkeypatch, b)
        boards.append(b)
        return b

    yield make
    fakepynq.detach()
    for b in boards:
        b.close()


@pytest.fixture
def board(make_board):
    return make_board()


@pytest.fixture
def bit(tmp_path):
    return write_overlay(tmp_path)


def device(cfg, bit, **kw):
    kw.setdefault("timeout_s", 60)  # wall clock: the simulation is ~1000x slower than a PL
    return backend.PynqDevice(cfg, bitstream=str(bit), **kw)


def sample_variant(**subs):
    text = fakepynq.SAMPLE_HWH.read_text()
    for a, b in subs.items():
        assert a in text, a
        text = text.replace(a, b)
    return text


# ------------------------------------------------------------------ overlay, base, clock
def test_overlay_ip_dict_and_device_lookup(board, bit, cfg):
    ov = fakepynq.Overlay(str(bit))
    e = ov.ip_dict["vta_0"]
    assert (e["phys_addr"], e["addr_range"], e["memtype"]) == (CORE_BASE, 0x1000, "REGISTER")
    assert e["type"] == "xilinx.com:module_ref:vta_wrapper:1.0" and e["mem_id"] == "s_axi"
    assert ov.ip_dict["ps"]["type"].startswith("xilinx.com:ip:processing_system7:")
    assert fakepynq.Clocks.fclk0_mhz == 100.0
    dev = device(cfg, bit)
    assert (dev.reg_base, dev.core_name, dev.pl_clock_mhz) == (CORE_BASE, "vta_0", 100.0)
    # an installed overlay's name resolves too (no file path needed)
    fakepynq.install_overlay("vta-tiny", bit)
    assert device(cfg, "vta-tiny").reg_base == CORE_BASE


def test_core_found_by_type_not_by_name(make_board, tmp_path, cfg, monkeypatch):
    """The core under a hierarchical name at another base, a distractor with "vta" in its
    name first: the backend maps exactly the module reference's window."""
    leds = ('<MODULE FULLNAME="/vta_leds" HWVERSION="2.0" INSTANCE="vta_leds" '
            'IPTYPE="PERIPHERAL" IS_ENABLE="1" MODCLASS="PERIPHERAL" MODTYPE="axi_gpio" '
            'VLNV="xilinx.com:ip:axi_gpio:2.0"><PARAMETERS/></MODULE>\n    ')
    text = sample_variant(**{
        'FULLNAME="/vta_0"': 'FULLNAME="/accel/core"',
        'INSTANCE="vta_0" IPTYPE': 'INSTANCE="accel_core" IPTYPE',
        'BASEVALUE="0x43C00000" HIGHNAME="C_HIGHADDR" HIGHVALUE="0x43C00FFF" INSTANCE="vta_0"':
            'BASEVALUE="0x43C40000" HIGHNAME="C_HIGHADDR" HIGHVALUE="0x43C40FFF" '
            'INSTANCE="accel_core"',
        "  <MODULES>\n    ": "  <MODULES>\n    " + leds,
        '      <MEMORYMAP>\n        <MEMRANGE ADDRESSBLOCK="reg0"':
            '      <MEMORYMAP>\n        <MEMRANGE ADDRESSBLOCK="Reg" BASENAME="C_BASEADDR" '
            'BASEVALUE="0x41200000" HIGHNAME="C_HIGHADDR" HIGHVALUE="0x4120FFFF" '
            'INSTANCE="vta_leds" IS_DATA="TRUE" IS_INSTRUCTION="TRUE" '
            'MASTERBUSINTERFACE="M_AXI_GP0" MEMTYPE="REGISTER" SLAVEBUSINTERFACE="S_AXI"/>\n'
            '        <MEMRANGE ADDRESSBLOCK="reg0"'})
    board = make_board()
    opened = []

    class SpyMMIO(fakepynq.MMIO):
        def __init__(self, base_addr, length=4, device=None):
            opened.append((base_addr, length))
            super().__init__(base_addr, length, device)

    monkeypatch.setattr(fakepynq, "MMIO", SpyMMIO)
    dev = device(cfg, write_overlay(tmp_path, text))
    assert dev.core_name == "accel/core" and dev.reg_base == 0x43C40000
    assert opened == [(0x43C40000, 0x100)]
    dram, ia, n = PROGRAMS[1](cfg, np.random.default_rng(0))
    ref = dram.copy()
    simulate(cfg, ref, ia, n)
    backend.run_raw(cfg, dram, ia, n, device=dev)
    np.testing.assert_array_equal(dram, ref)
    assert board.windows == [(0x43C40000, 0x1000)]


def test_overlay_without_a_core_refused(board, tmp_path, cfg):
    text = re.sub(r'\s*<MEMRANGE ADDRESSBLOCK="reg0"[^>]*/>', "", sample_variant())
    with pytest.raises(DeviceError, match=r"has no vtaforge core: no ip_dict entry of type "
                                          r"xilinx.com:module_ref:vta_wrapper:\* \(entries: ps\)"):
        device(cfg, write_overlay(tmp_path, text))


def test_pl_clock_checked_against_clock_mhz(board, tmp_path, cfg):
    """A bitstream whose .hwh sets FCLK0 to 50 MHz (1000 / (10 * 2)): a warning; the clock
    then set to 125 MHz (above the 100 MHz the core was timed for): refused."""
    text = sample_variant(**{
        '"PCW_FCLK0_PERIPHERAL_DIVISOR0" VALUE="5"': '"PCW_FCLK0_PERIPHERAL_DIVISOR0" VALUE="10"'})
    with pytest.warns(RuntimeWarning, match=r"fclk0 runs at 50 MHz, below CLOCK_MHZ = 100"):
        dev = device(cfg, write_overlay(tmp_path, text))
    assert dev.pl_clock_mhz == 50.0
    fakepynq.Clocks.fclk0_mhz = 125
    with pytest.raises(DeviceError, match=r"fclk0 runs at 125 MHz, faster than the "
                                          r"CLOCK_MHZ = 100"):
        backend.PynqDevice(cfg)  # the PL as already programmed, the family's base


# ------------------------------------------------------------------ programs vs fsim
@pytest.mark.parametrize("prog", PROGRAMS, ids=lambda p: p.__name__[5:])
def test_program_matches_fsim(board, bit, cfg, prog):
    rng = np.random.default_rng(hash((cfg.fingerprint, prog.__name__)) & 0xFFFF)
    dram, ia, n = prog(cfg, rng)
    ref = dram.copy()
    simulate(cfg, ref, ia, n)
    dev = device(cfg, bit)
    got = dram.copy()
    res = backend.run_raw(cfg, got, ia, n, device=dev)
    diff = np.flatnonzero(ref != got)
    assert diff.size == 0, f"{diff.size} bytes differ, first at 0x{diff[0]:x}"
    assert board.starts == 1 and board.busy_polls[0] > 0, "the run finished in the START write"
    assert res.cycles > 0 and res.stats["board_seconds"] > 0
    phys = [p for _, p in board.allocations]
    assert min(phys) >= board.base and all(p + 4096 <= fakepynq.board.DDR_TOP for p in phys)
    assert min(nb for nb, _ in board.allocations) >= backend.MIN_ALLOC_BYTES


# ------------------------------------------------------------------ cache maintenance
def gemm_program(dev, x, w, big=80 << 10):
    """out = int8(sum_i x[i] @ w[i].T) through the builder; x lives in a dedicated
    allocation (``big`` bytes, beyond the pool's sub-allocation size)."""
    cfg = dev.config
    n_in = x.shape[0]
    xb, wb = dev.alloc(max(x.nbytes, big)), dev.alloc(w.nbytes)
    dev.write(xb, x)
    dev.write(wb, w)
    ob = dev.alloc(cfg.elem_bytes(MemType.OUT))
    dev.write(ob, np.zeros(cfg.elem_bytes(MemType.OUT), np.uint8))
    b = ProgramBuilder(dev)
    record_dot_gemm(b, xb, wb, ob, n_in)
    b.synchronize()
    return dev.read(ob).view(np.int8).reshape(cfg.BATCH, cfg.BLOCK_OUT), xb, ob


gemm_oracle = dot_gemm_oracle


def test_builder_gemm_and_removed_flush_or_invalidate(board, bit, cfg, monkeypatch):
    r = np.random.default_rng(5)
    x = r.integers(-128, 128, (6, cfg.BATCH, cfg.BLOCK_IN)).astype(np.int8)
    w = r.integers(-128, 128, (6, cfg.BLOCK_OUT, cfg.BLOCK_IN)).astype(np.int8)
    want = gemm_oracle(x, w)
    assert want.any()
    dev = device(cfg, bit)
    out, xb, ob = gemm_program(dev, x, w)
    np.testing.assert_array_equal(out, want)
    assert dev.allocation_of(xb).nbytes == 80 << 10  # x's own allocation, nothing else
    # the input's flush removed: the core reads what DRAM held before
    real_flush, real_inv = backend._flush, backend._invalidate
    monkeypatch.setattr(backend, "_flush",
                        lambda h: None if h.array.size == 80 << 10 else real_flush(h))
    out2, *_ = gemm_program(device(cfg, bit), x, w)
    assert not np.array_equal(out2, want), "a missing flush went unnoticed"
    # the output's invalidate removed: the CPU reads its stale zeros
    monkeypatch.setattr(backend, "_flush", real_flush)
    monkeypatch.setattr(backend, "_invalidate", lambda h: None)
    out3, *_ = gemm_program(device(cfg, bit), x, w)
    assert not np.array_equal(out3, want), "a missing invalidate went unnoticed"
    monkeypatch.setattr(backend, "_invalidate", real_inv)
    out4, *_ = gemm_program(device(cfg, bit), x, w)
    np.testing.assert_array_equal(out4, want)


# ------------------------------------------------------------------ the digits model
@pytest.mark.parametrize("preset_name", ["tiny", pytest.param("pynq", marks=pytest.mark.slow)])
def test_digits_matches_fsim(make_board, bit, preset_name, monkeypatch):
    from vtaforge.compiler.compile import compile_model
    from vtaforge.compiler.models import DIGITS_ONNX, load_digits_split
    from vtaforge.runtime.executor import Executor

    board = make_board(preset_name)
    cfg = board.cfg
    xtr, _, xte, _ = load_digits_split()
    cm = compile_model(str(DIGITS_ONNX), xtr[:100], cfg)
    x = xte[:3]
    ref = Executor(cm, FsimDevice(cm.config)).run(x)["logits"]
    dev = device(cfg, bit)
    got = Executor(cm, dev).run(x)["logits"]
    np.testing.assert_array_equal(got, ref)
    assert board.starts > 0 and min(board.busy_polls) > 0
    assert min(nb for nb, _ in board.allocations) >= backend.MIN_ALLOC_BYTES
    assert len(board.allocations) < len(dev.buffers())  # pooled
    assert dev.last_verify_image_bytes < 64 << 10  # sized by buffers, not by 0x1fxxxxxx
    # without invalidates the CPU reads stale results
    monkeypatch.setattr(backend, "_invalidate", lambda h: None)
    bad = Executor(cm, device(cfg, bit)).run(x)["logits"]
    assert not np.array_equal(bad, ref), "missing invalidates went unnoticed"


# ------------------------------------------------------------------ 64-bit boards, hangs
def test_small_buffers_above_4gib(make_board, tmp_path, cfg):
    """XRT 2.17 on a 64-bit board: buffers of <= 4 KiB land above 4 GiB.  The pool never
    asks for those, so programs run; an allocation above 4 GiB anyway is refused."""
    make_board(small_above_4g=4096)
    bit = write_overlay(tmp_path)
    tiny_buf = fakepynq.allocate((64,), "u1", cacheable=True)
    assert tiny_buf.physical_address >= 1 << 32
    dram, ia, n = PROGRAMS[2](cfg, np.random.default_rng(1))
    ref = dram.copy()
    simulate(cfg, ref, ia, n)
    backend.run_raw(cfg, dram, ia, n, device=device(cfg, bit))
    np.testing.assert_array_equal(dram, ref)
    make_board(small_above_4g=1 << 20)
    dev = device(cfg, bit)
    with pytest.raises(DeviceError, match=r"lies above 4 GiB, beyond the core's 32-bit AXI"):
        dev.alloc(64)


def test_hang_times_out_and_reprogramming_recovers(board, bit, cfg):
    """A program that waits for a token nobody pushes (verifier off): the watchdog turns
    the hang into an error, the next launch is refused while the core is busy, and
    programming the overlay again resets it."""
    dev = device(cfg, bit, verify=False, timeout_s=0.3)
    from vtaforge.hw.isa import encode_program

    ib = dev.alloc(32)
    dev.write(ib, encode_program(cfg, [gemm(0, 0, pop_prev=1), finish()]).reshape(-1))
    with pytest.raises(ProgramError, match=r"board run not done after 0.3 s \(STATUS=0x1"):
        dev.run(ib.addr, 2)
    with pytest.raises(DeviceError, match="still busy"):
        dev.run(ib.addr, 2)
    fakepynq.Overlay(str(bit))  # reprogram: resets the core
    dram, ia, n = PROGRAMS[0](cfg, np.random.default_rng(2))
    ref = dram.copy()
    simulate(cfg, ref, ia, n)
    backend.run_raw(cfg, dram, ia, n, device=dev)
    np.testing.assert_array_equal(dram, ref)


def test_harness_register_window_from_generated_header(board):
    """The harness checks offsets against vta_regs.h's window (hw/regs.py's map), and the
    library reports the register-map version it was compiled with."""
    from vtaforge.hw import regs
    from vtaforge.runtime.rtl.harness import HarnessError

    h = board.harness
    assert h._lib.vh_regmap_version() == regs.REGMAP_VERSION
    assert h.read(regs.offset("FINGERPRINT")) == board.cfg.fingerprint
    for off in (regs.REGMAP_SIZE, 0x2):
        with pytest.raises(HarnessError, match=r"outside the 0x100-byte register map"):
            h.read(off)
    assert h.mem_base == board.base == fakepynq.board.DDR_TOP - (16 << 20)
