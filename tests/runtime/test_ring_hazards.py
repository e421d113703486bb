"""Instruction-ring hazards when the host writes the ring registers itself (issue 22 item 1).

Four hazards, each on fsim, the RTL core and the simulated PYNQ-Z2 board, each twice:
through the driver's check (``reg_write``: refused before anything is written, one clear
``DeviceError``) and raw (``reg_write(..., raw=True)``: the core refuses, ``STATUS.DONE``
with ``STATUS.ERROR`` and a ring ``ERROR.KIND``, formatted by ``regs.fault_message``):

(a) ``RING_TAIL`` more than ``RING_SIZE`` ahead of ``RING_HEAD`` (stale slots would run);
(b) a segment published without its FINISH, then the ring closed;
(c) ``RING_TAIL`` moved below ``RING_HEAD`` (stale slots, then BUSY for ever);
(d) a misaligned ``RING_BASE`` (garbage fetched).

Oracle: the rule ``regs.ring_tail_fault`` and the texts of ``regs.ring_fault_text``; after
a refused hazard the next launch works without a reset.
"""

from __future__ import annotations

import re
import shutil

import numpy as np
import pytest

from vtaforge.hw import regs
from vtaforge.hw.config import preset
from vtaforge.hw.isa import encode_program
from vtaforge.runtime.device import DeviceError, ProgramError
from vtaforge.runtime.fsim import FsimDevice

from programs import finish, nop  # tests/support

RING = 16
RING_CFG = preset("tiny").replace(INSN_RING=RING)
BUSY, DONE, ERROR = 1, 2, 4


# ------------------------------------------------------------------ backends
@pytest.fixture(scope="module")
def ring_model():
    rtl = pytest.importorskip("vtaforge.runtime.rtl")
    pytest.importorskip("vtaforge.hw.core")
    return rtl.build_model(RING_CFG, progress=False)


@pytest.fixture(params=["fsim", pytest.param("rtl", marks=pytest.mark.rtl),
                        pytest.param("board", marks=pytest.mark.rtl)])
def dev(request, monkeypatch, tmp_path):
    if request.param == "fsim":
        yield FsimDevice(RING_CFG)
        return
    model = request.getfixturevalue("ring_model")
    if request.param == "rtl":
        from vtaforge.runtime.rtl.device import RtlDevice

        d = RtlDevice(RING_CFG, 1 << 20, model=model)
        d.stream_clock = False          # clocked only while the host waits: deterministic
        yield d
        d.close()
        return
    fakepynq = pytest.importorskip("fakepynq")
    from vtaforge.runtime import pynq as backend

    board = fakepynq.SimBoard(RING_CFG, model)
    fakepynq.use(monkeypatch, board)
    try:
        d = tmp_path / "overlay"
        d.mkdir()
        (d / "vta.bit").write_bytes(b"\x00\x09\x0f\xf0" * 64)
        shutil.copy(fakepynq.SAMPLE_HWH, d / "vta.hwh")
        yield backend.PynqDevice(RING_CFG, bitstream=str(d / "vta.bit"), timeout_s=30)
    finally:
        fakepynq.detach()
        board.close()


def settle(dev, want=DONE) -> int:
    """``STATUS`` once ``want`` is set (the RTL core is clocked, the board's PL runs
    while the host polls; fsim is instant)."""
    for _ in range(200):
        status = dev.reg_read("STATUS")
        if status & want:
            return status
        if hasattr(dev, "step"):
            dev.step(100)
    return status


def report(dev) -> str:
    """The core's fault report, decoded from the registers with the one formatter."""
    err = dev.reg_read("ERROR")
    assert err & 1, f"no fault reported (ERROR=0x{err:x})"
    kind = (err >> 4) & 0xF
    assert regs.ErrorKind(kind) in regs.RING_KINDS and (err >> 1) & 3 == 0
    return regs.fault_message(RING_CFG, kind, dev.reg_read("ERR_INDEX"), None, None, 0,
                              dev.reg_read("ERR_INSN"))


def ring_of(dev):
    return dev._stream["ring"]


def put_ring(dev, slot: int, insns) -> None:
    """The host writes instructions into ring slots itself (flushed on a board)."""
    ring = ring_of(dev)
    dev.write(ring, encode_program(dev.config, insns), offset=slot * 16)
    if hasattr(dev, "flush"):
        dev.flush(ring)


def segment(dev, insns):
    prog = encode_program(dev.config, insns)
    buf = dev.alloc(prog.nbytes)
    dev.write(buf, prog)
    return buf, len(insns)


def one_shot_works(dev) -> None:
    """A launch after the hazard runs (no reset needed)."""
    buf, n = segment(dev, [nop(), finish()])
    dev.run(buf.addr, n, regions=[buf])


def open_session(dev) -> None:
    dev.stream_open()


# ------------------------------------------------------------------ the rule
def test_ring_rule_and_texts():
    K = regs.ErrorKind
    assert regs.ring_tail_fault(16, 0, 0, 16) is None
    assert regs.ring_tail_fault(16, 0, 0, 17) is K.RING_OVERFLOW
    assert regs.ring_tail_fault(16, 5, 10, 21) is None
    assert regs.ring_tail_fault(16, 5, 10, 22) is K.RING_OVERFLOW
    assert regs.ring_tail_fault(16, 10, 10, 9) is K.RING_REWIND
    assert regs.ring_tail_fault(16, 5, 10, 7) is K.RING_REWIND     # above HEAD, still back
    assert regs.ring_tail_fault(16, 0xFFFFFFF8, 0xFFFFFFF8, 4) is None  # modulo 2**32
    assert max(regs.ErrorKind) < 16                                   # ERROR.KIND: 4 bits
    assert regs.fault_message(RING_CFG, K.RING_BASE, 0x1008, None, None) == (
        "instruction ring: RING_BASE 0x1008 is not 16-byte aligned (the core would fetch "
        "from 0x1000)")


# ------------------------------------------------------------------ (a)
def test_a_tail_past_ring_size_refused_by_driver(dev):
    open_session(dev)
    with pytest.raises(DeviceError, match=r"refusing to write RING_TAIL = 17: RING_TAIL 17 "
                                          r"\(was 0\) is more than RING_SIZE 16 instructions "
                                          r"ahead of RING_HEAD"):
        dev.reg_write("RING_TAIL", RING + 1)
    assert dev.reg_read("RING_TAIL") == 0            # nothing was written
    buf, n = segment(dev, [nop(), finish()])
    k = dev.stream_append(buf.addr, n, regions=[buf])
    dev.stream_wait(k)
    dev.stream_close()


def test_a_tail_past_ring_size_refused_by_core(dev):
    open_session(dev)
    dev.reg_write("RING_TAIL", RING + 1, raw=True)
    status = settle(dev)
    assert status & (DONE | ERROR) == DONE | ERROR and not status & BUSY
    assert dev.reg_read("RING_HEAD") == 0            # no stale slot ran
    want = ("instruction ring: RING_TAIL 17 (was 0) is more than RING_SIZE 16 instructions "
            "ahead of RING_HEAD: the core would run stale ring slots")
    assert report(dev) == want
    with pytest.raises(ProgramError, match=re.escape(want)):
        dev.stream_close()
    one_shot_works(dev)


def test_a_tail_past_ring_size_at_start_refused(dev):
    buf = dev.alloc(RING * 16)
    with pytest.raises(DeviceError, match="refusing to write RING_TAIL = 17"):
        dev.reg_write("RING_TAIL", RING + 1)
    for name, v in (("RING_BASE_LO", buf.addr), ("RING_BASE_HI", 0), ("RING_TAIL", RING + 1),
                    ("RING_CTRL", 1), ("CTRL", 1)):
        dev.reg_write(name, v, raw=True)
    status = settle(dev)
    assert status & (DONE | ERROR) == DONE | ERROR and not status & BUSY
    assert report(dev).startswith("instruction ring: RING_TAIL 17 (was 0) is more than")
    one_shot_works(dev)


# ------------------------------------------------------------------ (b)
def test_b_close_without_finish_refused_by_driver(dev):
    open_session(dev)
    put_ring(dev, 0, [nop(), nop()])
    dev.reg_write("RING_TAIL", 2)                    # in range: published
    with pytest.raises(DeviceError, match=r"refusing to write RING_CTRL = 0: closing the "
                                          r"session would leave a segment published "
                                          r"without its FINISH \(RING_TAIL 2\)"):
        dev.stream_close()
    put_ring(dev, 2, [finish()])                     # the host completes it ...
    dev.reg_write("RING_TAIL", 3)
    res = dev.stream_close()                         # ... and the close goes through
    assert res.stats["finish_count"] == 1


def test_b_close_without_finish_refused_by_core(dev):
    open_session(dev)
    buf, n = segment(dev, [nop(), finish()])
    dev.stream_wait(dev.stream_append(buf.addr, n, regions=[buf]))
    put_ring(dev, 2, [nop(), nop()])
    dev.reg_write("RING_TAIL", 4, raw=True)
    want = ("instruction ring: the session was closed after FINISH 1 with a segment "
            "published without its FINISH (RING_HEAD 4)")
    with pytest.raises(ProgramError, match=re.escape(want)):
        dev.stream_close()
    one_shot_works(dev)


def test_b_driver_refuses_to_append_a_segment_without_finish(dev):
    if isinstance(dev, FsimDevice):
        pytest.skip("fsim verifies every segment (verify_segment) before the ring")
    dev.verify = False
    open_session(dev)
    buf, n = segment(dev, [nop(), nop()])
    with pytest.raises(DeviceError, match="refusing to append a segment whose last "
                                          "instruction is not its FINISH"):
        dev.stream_append(buf.addr, n, regions=[buf])
    dev.stream_close()


# ------------------------------------------------------------------ (c)
def _ran_two(dev):
    open_session(dev)
    buf, n = segment(dev, [nop(), finish()])
    dev.stream_wait(dev.stream_append(buf.addr, n, regions=[buf]))
    assert dev.reg_read("RING_HEAD") == 2


def test_c_tail_below_head_refused_by_driver(dev):
    _ran_two(dev)
    with pytest.raises(DeviceError, match=r"refusing to write RING_TAIL = 1: RING_TAIL 1 "
                                          r"moves back from 2"):
        dev.reg_write("RING_TAIL", 1)
    assert dev.reg_read("RING_TAIL") == 2
    dev.stream_close()


def test_c_tail_below_head_refused_by_core(dev):
    _ran_two(dev)
    dev.reg_write("RING_TAIL", 1, raw=True)
    status = settle(dev)
    assert status & (DONE | ERROR) == DONE | ERROR and not status & BUSY   # not BUSY for ever
    assert dev.reg_read("RING_HEAD") == 2
    want = ("instruction ring: RING_TAIL 1 moves back from 2: the doorbell counts "
            "instructions appended and only moves forward")
    assert report(dev) == want
    with pytest.raises(ProgramError, match=re.escape(want)):
        dev.stream_close()
    one_shot_works(dev)                              # a launch without a reset


# ------------------------------------------------------------------ (d)
def test_d_misaligned_base_refused_by_driver(dev):
    buf = dev.alloc(RING * 16 + 16)
    with pytest.raises(DeviceError, match=rf"refusing to write RING_BASE_LO = {buf.addr + 8}: "
                                          rf"RING_BASE 0x{buf.addr + 8:x} is not 16-byte "
                                          r"aligned"):
        dev.reg_write("RING_BASE_LO", buf.addr + 8)
    assert dev.reg_read("RING_BASE_LO") != buf.addr + 8
    dev.reg_write("RING_BASE_LO", buf.addr)          # aligned: fine


def test_d_misaligned_base_refused_by_core(dev):
    buf = dev.alloc(RING * 16 + 16)
    dev.write(buf, np.full(buf.nbytes, 0x5A, np.uint8))   # garbage, if it were fetched
    for name, v in (("RING_BASE_LO", buf.addr + 8), ("RING_BASE_HI", 0), ("RING_TAIL", 0),
                    ("RING_CTRL", 1), ("CTRL", 1)):
        dev.reg_write(name, v, raw=True)
    status = settle(dev)
    assert status & (DONE | ERROR) == DONE | ERROR and not status & BUSY
    assert report(dev) == (f"instruction ring: RING_BASE 0x{buf.addr + 8:x} is not 16-byte "
                           f"aligned (the core would fetch from 0x{buf.addr:x})")
    one_shot_works(dev)


def test_wait_after_a_ring_fault_raises_it(dev):
    """A wait for a segment the refused doorbell would have published ends with the
    fault at once, not at the watchdog."""
    open_session(dev)
    buf, n = segment(dev, [nop(), finish()])
    k = dev.stream_append(buf.addr, n, regions=[buf])
    dev.stream_wait(k)
    dev.reg_write("RING_TAIL", 1, raw=True)
    settle(dev)
    with pytest.raises(ProgramError, match=r"instruction ring: RING_TAIL 1 moves back from 2"):
        dev.stream_wait(k)
