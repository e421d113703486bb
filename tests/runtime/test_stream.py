"""Streamed execution (``INSN_RING``): the ring protocol on fsim, rtl and the simulated
PYNQ-Z2 board, the per-segment verifier, the watchdog, ``Executor(stream=True)`` bit-exact
against one-shot launches, and the option off leaving the core and its map unchanged.

Oracles: numpy (``dot_gemm_oracle``), one-shot runs of the same programs, and fsim vs rtl.
The RTL tests share one tiny+ring build (a 16-slot ring, so a few segments wrap it).
"""

from __future__ import annotations

import numpy as np
import pytest

from vtaforge.hw import regs
from vtaforge.hw.config import ConfigError, VTAConfig, preset
from vtaforge.hw.isa import Insn, Opcode, encode_program
from vtaforge.runtime.builder import ProgramBuilder
from vtaforge.runtime.device import DeviceError, ProgramError
from vtaforge.runtime.fsim import FsimDevice
from vtaforge.runtime.verify import verify_segment

from programs import dot_gemm_oracle, finish, nop, record_dot_gemm  # tests/support

RING = 16
RING_CFG = preset("tiny").replace(INSN_RING=RING)


# ------------------------------------------------------------------ helpers
def make_segments(dev, n_progs: int = 6, seed: int = 0, big: int = 1):
    """``n_progs`` recorded dot-GEMM programs on ``dev`` (one launch each; program
    ``big`` holds three dot-GEMMs, longer than the ring): ``[(program, [(out buffer,
    expected)])]``."""
    from vtaforge.hw.isa import Module

    cfg = dev.config
    rng = np.random.default_rng(seed)
    b = ProgramBuilder(dev)
    out = []
    for t in range(n_progs):
        outs = []
        for j in range(3 if t == big else 1):
            if j:   # the next dot-GEMM reuses INP/WGT/ACC 0: order it after the last one
                b.dep_push(Module.STORE, Module.COMPUTE)
                b.dep_pop(Module.STORE, Module.COMPUTE)
                b.dep_push(Module.COMPUTE, Module.LOAD)
                b.dep_pop(Module.COMPUTE, Module.LOAD)
            n = int(rng.integers(1, 5))
            x = rng.integers(-8, 8, (n, cfg.BATCH, cfg.BLOCK_IN), dtype=np.int8)
            w = rng.integers(-8, 8, (n, cfg.BLOCK_OUT, cfg.BLOCK_IN), dtype=np.int8)
            xb, wb, ob = dev.alloc(x.nbytes), dev.alloc(w.nbytes), dev.alloc(64)
            dev.write(xb, x)
            dev.write(wb, w)
            record_dot_gemm(b, xb, wb, ob, n)
            outs.append((ob, dot_gemm_oracle(x, w)))
        out.append((b.record_program(), outs))
    return out


def append_all(dev, segs) -> list[int]:
    ks = []
    for prog, _ in segs:
        for addr, n, regions in prog.launches:
            ks.append(dev.stream_append(addr, n, regions=regions))
    return ks


def check_outputs(dev, segs) -> None:
    for _, outs in segs:
        for ob, exp in outs:
            got = dev.read(ob, exp.nbytes).view(np.int8).reshape(exp.shape)
            np.testing.assert_array_equal(got, exp)


def raw_segment(dev, insns):
    """Encoded ``insns`` in a fresh device buffer: ``(buffer, count)``."""
    prog = encode_program(dev.config, insns)
    buf = dev.alloc(prog.nbytes)
    dev.write(buf, prog)
    return buf, len(insns)


# ------------------------------------------------------------------ config, map, Verilog
def test_config_key_validated_and_off_by_default():
    assert preset("pynq").INSN_RING == 0 and not preset("pynq").ring
    for bad in (3, 8, 48, 1 << 17, -16):
        with pytest.raises(ConfigError, match=r"INSN_RING = .* allowed: 0 \(off\) or a power "
                                              r"of two in 16\.\.65536"):
            preset("tiny").replace(INSN_RING=bad)
    with pytest.raises(ConfigError, match="must be an integer"):
        preset("tiny").replace(INSN_RING=True)
    # an explicit 0 is the same core as no key; a ring is another core
    assert VTAConfig.from_dict({"TARGET": "pynq", "INSN_RING": 0}) == preset("pynq")
    assert RING_CFG.fingerprint != preset("tiny").fingerprint
    assert RING_CFG.to_dict()["INSN_RING"] == RING
    assert "INSN_RING" not in preset("tiny").to_dict()


def test_register_map_only_with_the_option():
    names = {r.name for r in regs.REGISTERS}
    ring_names = {r.name for r in regs.RING_REGISTERS}
    assert not names & ring_names
    used = {r.offset for r in regs.REGISTERS}
    assert not used & {r.offset for r in regs.RING_REGISTERS}
    assert all(r.offset < regs.REGMAP_SIZE for r in regs.RING_REGISTERS)
    off = preset("tiny")
    assert regs.registers(off) == regs.REGISTERS
    assert "RING" not in regs.c_header(off) and "RING" not in regs.regmap_json(off)
    h = regs.c_header(RING_CFG)
    assert f"#define VTA_INSN_RING {RING}" in h
    assert f"#define VTA_REG_RING_TAIL 0x{regs.offset('RING_TAIL'):02x}u" in h


def test_option_off_leaves_verilog_unchanged():
    core = pytest.importorskip("vtaforge.hw.core")
    off = core.emit_verilog(preset("tiny"))
    explicit = core.emit_verilog(VTAConfig.from_dict({**preset("tiny").to_dict(),
                                                      "INSN_RING": 0}))
    assert off == explicit
    assert "ring_tail" not in off and "finish_count" not in off
    on = core.emit_verilog(RING_CFG)
    assert "ring_tail" in on and "finish_count" in on


# ------------------------------------------------------------------ fsim
def test_fsim_segments_wrap_the_ring_bit_exact():
    dev = FsimDevice(RING_CFG)
    segs = make_segments(dev)
    dev.stream_open()
    ks = append_all(dev, segs)
    assert ks == list(range(1, len(ks) + 1))
    total = sum(n for p, _ in segs for _, n, _ in p.launches)
    assert total > 2 * RING and any(n > RING for p, _ in segs for _, n, _ in p.launches)
    dev.stream_wait(ks[1])
    assert dev.finish_count >= 2
    dev.stream_wait(ks[-1])
    assert dev.finish_count == len(ks)
    res = dev.stream_close()
    assert res.stats["ring_head"] == total
    check_outputs(dev, segs)


def test_stream_needs_a_ring_core():
    with pytest.raises(DeviceError, match=r"no instruction ring \(INSN_RING = 0\)"):
        FsimDevice(preset("tiny")).stream_open()


def bad_segments(dev):
    """(segment, message) pairs the verifier refuses before anything is appended."""
    two_finish = raw_segment(dev, [finish(), finish()])
    not_last = raw_segment(dev, [finish(), nop()])
    unbalanced = raw_segment(dev, [nop(push_next=1), finish()])
    return [(two_finish, "ends with its one FINISH"), (not_last, "ends with its one FINISH"),
            (unbalanced, "unbalanced|deadlock")]


def test_verifier_refuses_bad_segments_fsim():
    dev = FsimDevice(RING_CFG)
    segs = make_segments(dev, 2)
    dev.stream_open()
    for (buf, n), msg in bad_segments(dev):
        with pytest.raises(ProgramError, match=msg):
            dev.stream_append(buf.addr, n, regions=[buf])
    ks = append_all(dev, segs)            # nothing was appended by the refusals
    assert ks == [1, 2]
    dev.stream_close()
    check_outputs(dev, segs)


def test_verify_segment_dma_outside_regions():
    dev = FsimDevice(RING_CFG)
    (prog, _), = make_segments(dev, 1)
    addr, n, regions = prog.launches[0]
    verify_segment(RING_CFG, dev.mem, addr, n, regions)
    with pytest.raises(ProgramError, match="outside"):
        verify_segment(RING_CFG, dev.mem, addr, n, [r for r in regions if r.addr != addr][:1])


def test_fsim_refuses_a_segment_that_never_finishes():
    dev = FsimDevice(RING_CFG)
    dev.stream_open()
    # compute pops a store->compute token nobody pushes: a deadlock, refused up front
    buf, n = raw_segment(dev, [Insn(Opcode.FINISH, pop_next=1)])
    with pytest.raises(ProgramError, match="deadlock"):
        dev.stream_append(buf.addr, n, regions=[buf])
    assert dev.finish_count == 0
    dev.stream_close()


# ------------------------------------------------------------------ executor (fsim)
@pytest.fixture(scope="module")
def digits():
    from vtaforge.compiler.compile import compile_model
    from vtaforge.compiler.models import DIGITS_ONNX, load_digits_split

    xtr, _, xte, _ = load_digits_split()
    return compile_model(str(DIGITS_ONNX), xtr[:300], RING_CFG), xte[:5]


def test_executor_stream_bit_exact_fsim(digits):
    from vtaforge.runtime.executor import Executor

    cm, x = digits
    dev = FsimDevice(RING_CFG)
    ref = Executor(cm, dev).run(x)
    ex = Executor(cm, dev, stream=True)
    for _ in range(2):                       # programs built, then cached
        got = ex.run(x)
        for k in ref:
            np.testing.assert_array_equal(got[k], ref[k])
    n_vta = sum(s.target == "vta" for s in cm.steps)
    assert ex.last_stream["finish_count"] >= n_vta
    assert ex.last_stream["waits"] < n_vta   # the host did not wait after every step
    with pytest.raises(ValueError, match="stream"):
        Executor(cm, dev, stream="sometimes")
    with pytest.raises(ValueError, match="memory_budget"):
        Executor(cm, dev, stream=True, memory_budget=1 << 20)


def test_executor_stream_needs_a_ring(digits):
    import dataclasses

    from vtaforge.runtime.executor import Executor

    cm, _ = digits
    plain = dataclasses.replace(cm, config=preset("tiny"))
    with pytest.raises(DeviceError, match="INSN_RING = 0"):
        Executor(plain, FsimDevice(preset("tiny")), stream=True)


# ------------------------------------------------------------------ rtl
rtl_mark = pytest.mark.rtl


@pytest.fixture(scope="module")
def ring_model():
    rtl = pytest.importorskip("vtaforge.runtime.rtl")
    pytest.importorskip("vtaforge.hw.core")
    return rtl.build_model(RING_CFG, progress=False)


def rtl_device(model, **kw):
    from vtaforge.runtime.rtl.device import RtlDevice

    return RtlDevice(RING_CFG, 1 << 20, model=model, **kw)


@rtl_mark
@pytest.mark.parametrize("clock", ["free", "busy", False],
                         ids=["clock-thread", "parking-clock-thread", "clocked-in-wait"])
def test_rtl_vs_fsim_segments_wrap(ring_model, clock):
    dev = rtl_device(ring_model, latency=(0, 6), backpressure=0.2, seed=3)
    fs = FsimDevice(RING_CFG)
    segs, fsegs = make_segments(dev, seed=5), make_segments(fs, seed=5)
    one = segs[0][0].run()                      # one-shot launch on the ring core
    assert one.cycles > 0
    dev.stream_open(clock=clock)
    fs.stream_open()
    ks, fks = append_all(dev, segs), append_all(fs, fsegs)
    assert ks == fks
    r = dev.stream_wait(ks[2])
    assert r.stats["finish_count"] >= 3
    dev.stream_wait(ks[-1])
    fs.stream_wait(fks[-1])
    assert dev.finish_count == fs.finish_count == len(ks)
    res = dev.stream_close()
    fs.stream_close()
    assert res.stats["finish_count"] == len(ks)
    assert res.stats["gemm_counter"] > 0
    check_outputs(dev, segs)
    for (_, a), (_, b) in zip(segs, fsegs):      # fsim vs rtl, output by output
        for (ob, _), (fb, _) in zip(a, b):
            np.testing.assert_array_equal(dev.read(ob, 8), fs.read(fb, 8))
    assert segs[1][0].run().cycles > 0          # one-shot again after the session


@rtl_mark
def test_rtl_verifier_refuses_bad_segment(ring_model):
    dev = rtl_device(ring_model)
    segs = make_segments(dev, 2)
    dev.stream_open()
    for (buf, n), msg in bad_segments(dev):
        with pytest.raises(ProgramError, match=msg):
            dev.stream_append(buf.addr, n, regions=[buf])
    assert dev.stream_append(*segs[0][0].launches[0][:2],
                             regions=segs[0][0].launches[0][2]) == 1
    dev.stream_close()


@rtl_mark
def test_rtl_watchdog_on_a_segment_that_never_finishes(ring_model):
    dev = rtl_device(ring_model, verify=False)
    segs = make_segments(dev, 1)
    dev.stream_open()
    # compute waits for a store->compute token that never comes: FINISH never executes
    buf, n = raw_segment(dev, [Insn(Opcode.FINISH, pop_next=1)])
    k = dev.stream_append(buf.addr, n, regions=[buf])
    with pytest.raises(ProgramError, match="RTL watchdog: run not done after 5000 cycles"):
        dev.stream_wait(k, timeout_cycles=5000)
    # the core was reset and the session closed: a one-shot run works again
    with pytest.raises(DeviceError, match="no stream session"):
        dev.stream_wait(k)
    assert segs[0][0].run().cycles > 0
    check_outputs(dev, segs)


@rtl_mark
def test_rtl_executor_stream_bit_exact(ring_model, digits):
    from vtaforge.runtime.executor import Executor

    cm, x = digits
    dev = rtl_device(ring_model)
    ref = Executor(cm, FsimDevice(RING_CFG)).run(x)
    for stream in (False, True, "step"):
        got = Executor(cm, dev, stream=stream).run(x)
        for k in ref:
            np.testing.assert_array_equal(got[k], ref[k])


@rtl_mark
def test_simulated_board_streams(ring_model, digits, monkeypatch, tmp_path):
    import shutil

    fakepynq = pytest.importorskip("fakepynq")
    from vtaforge.runtime import pynq as backend

    board = fakepynq.SimBoard(RING_CFG, ring_model)
    fakepynq.use(monkeypatch, board)
    try:
        d = tmp_path / "overlay"
        d.mkdir()
        (d / "vta.bit").write_bytes(b"\x00\x09\x0f\xf0" * 64)
        shutil.copy(fakepynq.SAMPLE_HWH, d / "vta.hwh")
        dev = backend.PynqDevice(RING_CFG, bitstream=str(d / "vta.bit"), timeout_s=60)
        segs = make_segments(dev, 4)
        dev.stream_open()
        ks = append_all(dev, segs)
        dev.stream_wait(ks[-1])
        res = dev.stream_close()
        assert res.stats["finish_count"] == len(ks)
        check_outputs(dev, segs)
        # a compiled model, streamed on the board, against fsim one-shot
        from vtaforge.runtime.executor import Executor

        cm, x = digits
        ref = Executor(cm, FsimDevice(RING_CFG)).run(x)
        got = Executor(cm, dev, stream=True).run(x)
        for k in ref:
            np.testing.assert_array_equal(got[k], ref[k])
    finally:
        fakepynq.detach()
        board.close()


@rtl_mark
def test_rtl_one_shot_launch_clears_ring_enable(ring_model):
    dev = rtl_device(ring_model)
    segs = make_segments(dev, 1)
    dev.reg_write("RING_CTRL", 1)        # left set, as after an aborted session
    assert segs[0][0].run().cycles > 0   # still a one-shot run: DONE rises
    assert dev.reg_read("RING_CTRL") == 0
    assert dev.reg_read("RING_SIZE") == RING
    check_outputs(dev, segs)
