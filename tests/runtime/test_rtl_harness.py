"""The Verilator harness (C++ DRAM model, AXI4-Lite master, run loop, watchdog, build cache)
against a hand-written stand-in core (tests/runtime/data/vta_core_stub.v), independent of
the Amaranth core.

The stub, on START, reads INSN_COUNT x 16 bytes at INSN_ADDR in bursts of at most 16 beats
(never split at 4 KiB), then writes their bitwise complement right after the region; the
first write beat has WSTRB 0x55.. (every other byte).  INSN_COUNT == 0 hangs; INSN_COUNT
bit 31 drops WLAST.  Expected memory is computed here with numpy.
"""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np
import pytest

from vtaforge.hw import regs
from vtaforge.hw.config import preset
from vtaforge.runtime.device import DeviceError, ProgramError

pytestmark = pytest.mark.rtl

rtl = pytest.importorskip("vtaforge.runtime.rtl")

STUB = Path(__file__).parent / "data" / "vta_core_stub.v"
STUB_STATES = {"fetch": {0: "IDLE", 1: "RD_ADDR", 2: "RD_DATA", 3: "WR_ADDR", 4: "WR_DATA",
                         5: "WR_RESP", 6: "HANG"},
               "load": {0: "IDLE"}, "compute": {0: "IDLE"}, "store": {0: "IDLE"}}


def build_stub(cfg, cache_dir, **kw):
    return rtl.build_model(cfg, verilog=STUB.read_text(), cache_dir=cache_dir,
                           params={"BUS_WIDTH": cfg.BUS_WIDTH,
                                   "FINGERPRINT": f"32'h{cfg.fingerprint:08x}"},
                           progress=False, **kw)


@pytest.fixture(scope="module")
def cache_dir(tmp_path_factory):
    return tmp_path_factory.mktemp("rtl-cache")


@pytest.fixture(scope="module")
def tiny():
    return preset("tiny")


@pytest.fixture(scope="module")
def stub(tiny, cache_dir):
    return build_stub(tiny, cache_dir)


def make_dev(cfg, model, **kw):
    kw.setdefault("verify", False)  # the stub's "instructions" are random bytes
    return rtl.RtlDevice(cfg, 1 << 20, model=model, state_names=STUB_STATES,
                         progress=False, **kw)


def expected_copy(before: np.ndarray, nbytes: int, bus_bytes: int) -> np.ndarray:
    """What the stub leaves at [nbytes, 2 nbytes) of a region whose old contents are
    ``before`` (2 nbytes long)."""
    exp = ~before[:nbytes]
    keep = np.arange(bus_bytes) % 2 == 1  # first beat: WSTRB 0x55.. writes even bytes only
    exp[:bus_bytes][keep] = before[nbytes:nbytes + bus_bytes][keep]
    return exp


# ------------------------------------------------------------------------------------ BR-25
def test_register_ping_within_100_cycles(tiny, stub):
    """BR-25: one AXI-Lite write and one read complete within 100 cycles."""
    with make_dev(tiny, stub) as dev:
        c0 = dev.cycle
        dev.reg_write("INSN_COUNT", 0x1234)
        assert dev.reg_read("INSN_COUNT") == 0x1234
        assert dev.cycle - c0 < 100
        assert dev.reg_read("FINGERPRINT") == tiny.fingerprint
        assert dev.reg_read("VERSION") == 0x00010000


@pytest.mark.parametrize("bus", [
    pytest.param(dict(), id="ideal"),
    pytest.param(dict(latency=(1, 30), backpressure=0.5, seed=3), id="random-bp"),
])
def test_dma_copy_and_strobes(tiny, stub, bus):
    rng = np.random.default_rng(1)
    with make_dev(tiny, stub, **bus) as dev:
        buf = dev.alloc(1024)
        data = rng.integers(0, 256, 1024, dtype=np.uint8)
        dev.write(buf, data)
        res = dev.run(buf.addr, 24)  # 384 bytes = 48 beats = 3 read + 3 write bursts
        out = dev.read(buf)
        np.testing.assert_array_equal(out[:384], data[:384])
        np.testing.assert_array_equal(out[384:768], expected_copy(data, 384, 8))
        np.testing.assert_array_equal(out[768:], data[768:])
        assert res.stats["dram_read_nbytes"] == 384
        assert res.stats["dram_write_nbytes"] == 384
        assert res.stats["axi_rd_bursts"] == 3 and res.stats["axi_wr_bursts"] == 3
        assert 0 < res.cycles <= res.stats["sim_cycles"]


def test_random_bus_is_seeded_and_slower(tiny, stub):
    cycles = []
    for kw in (dict(), dict(latency=(5, 40), backpressure=0.6, seed=7),
               dict(latency=(5, 40), backpressure=0.6, seed=7)):
        with make_dev(tiny, stub, **kw) as dev:
            buf = dev.alloc(1024)
            dev.write(buf, np.arange(1024, dtype=np.uint16).astype(np.uint8))
            cycles.append(dev.run(buf.addr, 32).cycles)
    assert cycles[1] == cycles[2]
    assert cycles[1] > cycles[0]


def test_wide_bus_128(cache_dir):
    """A 128-bit AXI bus (ultra96) exercises the wide-port (VlWide) path of the harness."""
    cfg = preset("ultra96")
    model = build_stub(cfg, cache_dir)
    rng = np.random.default_rng(2)
    with make_dev(cfg, model, latency=(0, 9), backpressure=0.3, seed=1) as dev:
        buf = dev.alloc(2048)
        data = rng.integers(0, 256, 2048, dtype=np.uint8)
        dev.write(buf, data)
        dev.run(buf.addr, 40)  # 640 bytes = 40 beats of 16 bytes
        out = dev.read(buf)
        np.testing.assert_array_equal(out[640:1280], expected_copy(data, 640, 16))


# ------------------------------------------------------------------------------ handshake
def test_done_low_from_start_until_done_and_second_run(tiny, stub):
    """BR-17 on the harness path: DONE is 0 right after START on every run."""
    with make_dev(tiny, stub, latency=(20, 20)) as dev:
        buf = dev.alloc(1024)
        for run in range(2):
            dev.launch(buf.addr, 32)
            st = dev.reg_read("STATUS")
            assert st & 2 == 0, f"run {run}: DONE still set after START"
            assert st & 1 == 1
            res = dev.wait()
            assert dev.reg_read("STATUS") & 2
            assert res.cycles > 40


def test_irq_line(tiny, stub):
    with make_dev(tiny, stub) as dev:
        buf = dev.alloc(512)
        dev.reg_write("CTRL", 2)  # IRQ_EN
        dev.run(buf.addr, 4)
        assert dev.irq
        dev.reg_write("IRQ_STATUS", 1)
        assert not dev.irq


# ------------------------------------------------------------------------------- checks
def test_4k_crossing_detected(tiny, stub):
    """BR-26: a burst over a 4 KiB boundary stops the run with a named error."""
    with make_dev(tiny, stub) as dev:
        with pytest.raises(ProgramError, match=r"crosses a 4 KiB boundary: "
                                               r"0x00000fc0\.\.0x0000103f"):
            dev.run(0xFC0, 16)  # 16 beats x 8 B from 0xFC0
        # the device recovers: a run after the error works
        assert dev.run(0x2000, 8).cycles > 0


def test_burst_ending_exactly_at_4k_is_legal(tiny, stub):
    """BR-26 (a): 16 beats x 8 B from 0xF80 end exactly at 0xFFF."""
    with make_dev(tiny, stub) as dev:
        dev.mem[0xF80:0x1000] = 0x5A
        dev.run(0xF80, 8)  # read 0xF80..0xFFF, write from 0x1000
        assert (dev.mem[0x1008:0x1080] == 0xA5).all()
        assert (dev.mem[0x1000:0x1008:2] == 0xA5).all()


def test_out_of_range_detected(tiny, stub):
    with make_dev(tiny, stub) as dev:
        size = dev.mem.size
        with pytest.raises(ProgramError, match="outside the DRAM image"):
            dev.run(size - 64, 16)  # the read runs past the end of the image


def test_wlast_mismatch_detected(tiny, stub):
    with make_dev(tiny, stub) as dev:
        dev.launch(0x1000, (1 << 31) | 8)
        with pytest.raises(ProgramError, match=r"write burst at 0x00001080 \(16 beats\): WLAST missing on beat 15"):
            dev.wait()


def test_watchdog_names_unit_states(tiny, stub):
    with make_dev(tiny, stub) as dev:
        dev.launch(0x1000, 0)  # the stub hangs
        t0 = time.monotonic()
        with pytest.raises(ProgramError, match=r"watchdog: run not done after 5000 cycles; "
                                               r"fetch=HANG\(6\), load=IDLE\(0\), "
                                               r"compute=IDLE\(0\), store=IDLE\(0\)"):
            dev.wait(timeout_cycles=5000)
        assert time.monotonic() - t0 < 5


def test_fingerprint_mismatch_refused(stub):
    other = preset("pynq")  # same 64-bit bus, other fingerprint
    with pytest.raises(DeviceError, match=r"fingerprint 0x[0-9a-f]{8} differs from the "
                                          r"config's 0x[0-9a-f]{8}.*refusing"):
        rtl.RtlDevice(other, 1 << 20, model=stub, progress=False)


def test_bad_options(tiny, stub):
    with pytest.raises(DeviceError, match="latency"):
        make_dev(tiny, stub, latency=(5, 1))
    with pytest.raises(DeviceError, match="backpressure"):
        make_dev(tiny, stub, backpressure=1.5)


def test_run_raw_updates_image_in_place(tiny, stub):
    dram = np.random.default_rng(5).integers(0, 256, 8192, dtype=np.uint8)
    before = dram.copy()
    res = rtl.run_raw(tiny, dram, 0x400, 16, model=stub, verify=False,
                      state_names=STUB_STATES, progress=False)
    assert res.cycles > 0
    np.testing.assert_array_equal(dram[0x500:0x600], expected_copy(before[0x400:], 256, 8))
    np.testing.assert_array_equal(dram[:0x500], before[:0x500])
    np.testing.assert_array_equal(dram[0x600:], before[0x600:])


# ---------------------------------------------------------------------------------- build
def test_build_cache_hit(tiny, stub, cache_dir):
    assert not stub.cached
    t0 = time.monotonic()
    again = build_stub(tiny, cache_dir)
    assert again.cached and again.path == stub.path
    assert time.monotonic() - t0 < 2.0
    # any change to the Verilog, the flags or the config is a different key
    text = STUB.read_text()
    k = rtl.build.build_key(tiny, text)
    assert rtl.build.build_key(tiny, text) == k
    assert rtl.build.build_key(tiny, text + "\n// changed\n") != k
    assert rtl.build.build_key(tiny, text, trace="vcd") != k
    assert rtl.build.build_key(tiny, text, trace="fst") not in (
        k, rtl.build.build_key(tiny, text, trace="vcd"))
    assert rtl.build.build_key(tiny, text, trace=True) == rtl.build.build_key(
        tiny, text, trace="vcd")
    assert rtl.build.build_key(tiny, text, params={"MAX_BURST": 8}) != k
    assert rtl.build.build_key(preset("pynq"), text) != k
    assert not list(cache_dir.glob(".tmp-*")), "temporary build directories left behind"


def test_build_options_are_in_the_key(tiny):
    text = STUB.read_text()
    k = rtl.build.build_key(tiny, text)
    assert rtl.build.build_key(tiny, text, extra_vflags=("-O3",)) != k
    assert rtl.build.build_key(tiny, text, cxx_opt=("-O3",)) != k
    assert rtl.build.build_key(tiny, text, cxx_opt=rtl.build.CXX_FAST) == k
    assert rtl.build.verilator_flags(None, {"A": 1}, ("-O3",))[-2:] == ["-O3", "-GA=1"]


# ------------------------------------------------------------------------ poll in the harness
def python_poll(h, offset: int, mask: int, interval: int, stop: int) -> int:
    """The oracle of ``Harness.poll``: the same loop from Python, one ctypes call per
    stretch and per read."""
    while True:
        h.step(max(1, min(interval, stop - h.cycle)))
        if h.cycle >= stop:
            return 0
        v = h.read(offset)
        if v & mask:
            return v


@pytest.mark.parametrize("interval, latency", [(256, (0, 0)), (7, (3, 9)), (1, (0, 0))])
def test_poll_in_the_harness_matches_the_python_loop(tiny, stub, interval, latency):
    """vh_poll clocks and reads in exactly the cycles the Python loop does: DONE is seen
    at the same cycle, the memory and the core's CYCLES agree."""
    status, done = regs.offset("STATUS"), 2
    seen = []
    for poll in (python_poll, None):
        with make_dev(tiny, stub, latency=latency, seed=5) as dev:
            buf = dev.alloc(1024)
            dev.write(buf, np.arange(1024, dtype=np.uint32).astype(np.uint8))
            dev.launch(buf.addr, 24)
            h = dev.harness
            stop = h.cycle + 100_000
            v = (poll(h, status, done, interval, stop) if poll else
                 h.poll(status, done, interval, stop))
            assert v & done
            seen.append((h.cycle, dev.reg_read("CYCLES_LO"), dev.read(buf).tobytes()))
    assert seen[0] == seen[1]


def test_poll_stops_exactly_at_the_limit(tiny, stub):
    status = regs.offset("STATUS")
    with make_dev(tiny, stub) as dev:
        dev.launch(0x1000, 0)  # the stub hangs
        h = dev.harness
        c0 = h.cycle
        assert h.poll(status, 2, 300, c0 + 1000) == 1  # BUSY, not DONE, in the last read
        assert h.cycle == c0 + 1000                     # the last stretch is shortened
        assert h.poll(status, 2, 300, c0) == 0 and h.cycle == c0 + 1001  # at least one cycle
        with pytest.raises(rtl.harness.HarnessError, match="outside the 0x[0-9a-f]+-byte register map"):
            h.poll(0x1001, 2, 300, c0 + 5000)


def test_idle_cycles_skip_the_input_combinational_pass(tiny, stub):
    """The build patches Verilator's eval so that evals with unchanged inputs skip the
    input-combinational pass: on an idle bus both evals of a cycle skip it, and a run
    after such idle stretches is still exact (test_dma_copy_and_strobes checks the data)."""
    import json
    assert json.loads((stub.path.parent / "build.json").read_text())["ico_patched"] is True
    with make_dev(tiny, stub) as dev:
        lib = dev._lib
        s0 = lib.vh_stat(dev._h, 4)
        dev.step(100)
        assert lib.vh_stat(dev._h, 4) - s0 >= 196  # 2 evals per cycle, bar the first
        dev.reg_write("INSN_COUNT", 7)  # inputs change: the falling-edge evals run it
        s1 = lib.vh_stat(dev._h, 4)
        c1 = dev.cycle
        dev.reg_write("INSN_COUNT", 9)
        assert lib.vh_stat(dev._h, 4) - s1 < 2 * (dev.cycle - c1)
        assert dev.reg_read("INSN_COUNT") == 9


@pytest.mark.slow
def test_concurrent_builds_of_one_key(tiny, stub, cache_dir):
    """Two processes building the same (new) key at once both get a working library."""
    import subprocess
    import sys
    code = (
        "import sys; from vtaforge.hw.config import preset; "
        "from vtaforge.runtime.rtl import build_model; cfg = preset('tiny'); "
        f"m = build_model(cfg, verilog=open({str(STUB)!r}).read() + '// concurrent\\n', "
        "cache_dir=sys.argv[1], "
        "params={'BUS_WIDTH': 64, 'FINGERPRINT': \"32'h%08x\" % cfg.fingerprint}, "
        "progress=False); m.load(); print(m.path)")
    procs = [subprocess.Popen([sys.executable, "-c", code, str(cache_dir)],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for _ in range(2)]
    outs = [p.communicate(timeout=300) for p in procs]
    assert all(p.returncode == 0 for p in procs), outs
    paths = {o[0].strip() for o in outs}
    assert len(paths) == 1 and Path(paths.pop()).is_file()
    assert not list(cache_dir.glob(".tmp-*"))


# ------------------------------------------------------------------------------ waveforms
def read_vcd_header(path: Path) -> tuple[set[str], str]:
    """(signal names declared in a VCD file, text after ``$enddefinitions``)."""
    text = path.read_text()
    head, _, body = text.partition("$enddefinitions")
    names = set()
    for line in head.splitlines():
        f = line.split()
        if len(f) >= 5 and f[0] == "$var":
            names.add(f[4])
    return names, body


def check_vcd(path: Path, min_cycles: int) -> None:
    """A VCD of a run: declares clk and m_axi_* signals, has >= 2 timestamps per cycle and
    clk toggles."""
    names, body = read_vcd_header(path)
    assert "clk" in names, sorted(names)[:20]
    assert any(n.startswith("m_axi_") for n in names), sorted(names)[:20]
    assert "m_axi_arvalid" in names and "m_axi_rdata" in names
    times = [ln for ln in body.splitlines() if ln.startswith("#")]
    assert len(times) >= 2 * min_cycles
    ident = None
    for line in path.read_text().partition("$enddefinitions")[0].splitlines():
        f = line.split()
        if len(f) >= 5 and f[0] == "$var" and f[4] == "clk":
            ident = f[3]
            break
    toggles = sum(1 for ln in body.splitlines() if ln in (f"0{ident}", f"1{ident}"))
    assert toggles >= 2 * min_cycles


def test_vcd_trace_stub(tiny, cache_dir, tmp_path):
    """VCD needs no library beyond the C++ compiler: always built and tested."""
    model = build_stub(tiny, cache_dir, trace="vcd")
    assert model.trace == "vcd" and "-vcd" in model.path.parent.name
    assert model.load().vh_has_trace() == 1
    wave = tmp_path / "run.vcd"
    with make_dev(tiny, model, trace=str(wave)) as dev:
        res = dev.run(0x1000, 8)
    check_vcd(wave, res.stats["sim_cycles"])


def test_trace_option_errors(tiny, stub, cache_dir, tmp_path):
    with pytest.raises(DeviceError, match=r"must end in \.vcd or \.fst"):
        make_dev(tiny, stub, trace=str(tmp_path / "x.wave"))
    with pytest.raises(DeviceError, match="needs a model built with trace='vcd'"):
        make_dev(tiny, stub, trace=str(tmp_path / "x.vcd"))  # stub has no trace support
    with pytest.raises(rtl.RtlBuildError, match="unknown waveform format 'lxt'"):
        build_stub(tiny, cache_dir, trace="lxt")
    model = build_stub(tiny, cache_dir, trace="vcd")
    with pytest.raises(DeviceError, match="needs a model built with trace='fst'"):
        make_dev(tiny, model, trace=str(tmp_path / "x.fst"))
    with pytest.raises(DeviceError, match="cannot start VCD waveform"):
        make_dev(tiny, model, trace=str(tmp_path / "no" / "such" / "dir" / "x.vcd"))


def test_cli_trace_only_for_rtl(tmp_path):
    from click.testing import CliRunner
    from vtaforge.cli import main as cli_main
    from vtaforge.runtime.bundle import save_bundle
    b = tmp_path / "p.npz"
    save_bundle(b, np.zeros(8192, dtype=np.uint8), 0x1000, 1)
    r = CliRunner().invoke(cli_main, ["exec", str(b), "--config", "tiny", "--target", "fsim",
                                      "--trace", str(tmp_path / "w.vcd")])
    assert r.exit_code == 2 and "--trace writes a waveform of the rtl target only" in r.output


@pytest.mark.slow
def test_vcd_trace_tiny_core(tmp_path):
    """The generated tiny core writes a VCD too (a full core build with --trace, about a
    minute; cached afterwards)."""
    cfg = preset("tiny")
    wave = tmp_path / "tiny.vcd"
    dram = np.zeros(1 << 16, dtype=np.uint8)
    from vtaforge.hw.isa import Insn, Opcode, encode_program
    prog = encode_program(cfg, [Insn(Opcode.FINISH)]).reshape(-1)
    dram[0x1000:0x1000 + prog.size] = prog
    res = rtl.run_raw(cfg, dram, 0x1000, 1, trace=str(wave), progress=False)
    check_vcd(wave, res.stats["sim_cycles"])


@pytest.mark.slow
def test_fst_trace(tiny, cache_dir, tmp_path):
    cxx = rtl.build._cxx()
    if not all(rtl.build._has_header(cxx, h) for h in ("lz4.h", "zlib.h")):
        with pytest.raises(rtl.RtlBuildError, match="liblz4-dev"):
            build_stub(tiny, cache_dir, trace="fst")
        pytest.skip("FST tracing needs the lz4 and zlib development headers (liblz4-dev)")
    model = build_stub(tiny, cache_dir, trace="fst")
    assert model.trace == "fst" and model.load().vh_has_trace() == 2
    wave = tmp_path / "run.fst"
    with make_dev(tiny, model, trace=str(wave)) as dev:
        dev.run(0x1000, 8)
    assert wave.stat().st_size > 100
    assert wave.read_bytes()[:1] != b"$"  # binary FST, not VCD text
