"""``ProgramError.insn_index``: every backend names the instruction an error is about as
data, not only in the message.

Oracle: the position where each test put the faulting instruction in a hand-built program
(and, for the board, the error registers the test's fake core reports).  Where the message
says ``instruction <N>``, ``insn_index == N`` too; errors about no single instruction carry
None.  A fused launch names its step from the index, keeping the error's class.
"""

from __future__ import annotations

import copy
import pickle

import numpy as np
import pytest

from programs import Image, MemType, finish, gemm, ld, nop, st
from vtaforge.hw import regs
from vtaforge.hw.config import preset
from vtaforge.hw.isa import Module, encode_program
from vtaforge.runtime.builder import _name_fault
from vtaforge.runtime.device import DeadlockError, ProgramError
from vtaforge.runtime.fsim import simulate
from vtaforge.runtime.kernels import BuilderError
from vtaforge.runtime.mmio import CoreFault, CoreTimeout
from vtaforge.runtime.race import RaceError, race_check
from vtaforge.runtime.verify import verify_program, verify_segment

TINY = preset("tiny")
UOP, INP, WGT, ACC = MemType.UOP, MemType.INP, MemType.WGT, MemType.ACC


def _data(img: Image, cfg, mem, n: int = 1) -> int:
    return img.base(img.zeros(n * cfg.elem_bytes(mem)), mem)


def bad_gemm_program(cfg, pos: int, *, src: int | None = None):
    """A GEMM at ``pos`` (>= 3) whose computed INP index leaves the scratchpad (micro-op
    ``src = INP_DEPTH - 1``, ``iter_in = 2``, ``src_factor_in = 1``: index ``INP_DEPTH``),
    after a UOP load (compute), an INP and a WGT load (load module, the WGT one pushing
    the token the GEMM pops) and compute NOPs.  ``src``: another micro-op ``src``.

    Returns ``(dram, insn_addr, insn_count, ordinal)``, ``ordinal`` the GEMM's index among
    the compute module's instructions (the hardware's ``ERR_INSN``)."""
    assert pos >= 3
    img = Image(cfg)
    u = img.uops([0], [cfg.INP_DEPTH - 1 if src is None else src], [0])
    insns = [ld(UOP, 0, img.base(u, UOP), 1, 1),
             ld(INP, 0, _data(img, cfg, INP), 1, 1),
             ld(WGT, 0, _data(img, cfg, WGT), 1, 1, push_next=1)]
    insns += [nop() for _ in range(pos - 3)]
    insns += [gemm(0, 1, iter_in=2, s=(0, 1), pop_prev=1), finish()]
    dram, ia, n = img.build(insns)
    return dram, ia, n, 1 + (pos - 3)


# ------------------------------------------------------------------ fsim and the verifier
@pytest.mark.parametrize("pos", [3, 6])
def test_fsim_and_verifier_name_the_gemm_whose_index_leaves_inp(pos):
    dram, ia, n, _ = bad_gemm_program(TINY, pos)
    for run in (simulate, verify_program):
        with pytest.raises(ProgramError) as e:
            run(TINY, dram.copy(), ia, n)
        assert e.value.insn_index == pos, run
        assert str(e.value).startswith(f"instruction {pos} (GEMM"), str(e.value)
        assert f"computed src index {TINY.INP_DEPTH} is outside the INP" in str(e.value)


def test_an_in_range_gemm_passes():
    """Control: the same program with the micro-op's src in range runs."""
    dram, ia, n, _ = bad_gemm_program(TINY, 4, src=0)
    verify_program(TINY, dram, ia, n)
    simulate(TINY, dram, ia, n)


@pytest.mark.parametrize("pos", [2, 5])
def test_a_deadlock_names_the_stalled_instruction(pos):
    """A STORE at ``pos`` pops a compute->store token nobody pushes: the only stalled
    module is the store, at ``pos``."""
    img = Image(TINY)
    o = img.zeros(64)
    insns = [ld(ACC, 0, _data(img, TINY, ACC), 1, 1)] + [nop() for _ in range(pos - 1)]
    insns += [st(0, img.base(o, MemType.OUT), 1, 1, pop_prev=1), finish()]
    dram, ia, n = img.build(insns)
    for run in (simulate, verify_program):
        with pytest.raises(DeadlockError) as e:
            run(TINY, dram.copy(), ia, n)
        assert e.value.insn_index == pos
        assert f"store stalled at instruction {pos} " in str(e.value)


def test_the_watchdog_names_the_instruction_that_exceeds_it():
    pos = 4
    img = Image(TINY)
    u = img.uops([0], [0], [0])
    insns = [ld(UOP, 0, img.base(u, UOP), 1, 1)] + [nop() for _ in range(pos - 1)]
    insns += [gemm(0, 1, iter_out=50, reset=1), finish()]
    dram, ia, n = img.build(insns)
    for run in (simulate, verify_program):
        with pytest.raises(ProgramError) as e:
            run(TINY, dram.copy(), ia, n, max_steps=pos + 10)
        assert e.value.insn_index == pos
        assert str(e.value).startswith(f"timeout: instruction {pos} ")


def test_errors_about_no_single_instruction_carry_none():
    img = Image(TINY)
    no_finish = img.build([nop(), nop()])
    img = Image(TINY)
    leftover = img.build([ld(INP, 0, _data(img, TINY, INP), 1, 1, push_next=1), finish()])
    for (dram, ia, n), pattern in ((no_finish, "no FINISH"), (leftover, "unbalanced")):
        for run in (simulate, verify_program):
            with pytest.raises(ProgramError, match=pattern) as e:
                run(TINY, dram.copy(), ia, n)
            assert e.value.insn_index is None


def test_verify_segment_names_the_first_finish_before_the_end():
    img = Image(TINY)
    dram, ia, n = img.build([nop(), finish(), nop(), finish()])
    with pytest.raises(ProgramError, match="found FINISH at 1, 3") as e:
        verify_segment(TINY, dram, ia, n)
    assert e.value.insn_index == 1


def test_a_failed_fsim_segment_keeps_its_index():
    """A streamed segment that fails at run time (test_faults' F2 program: micro-ops it
    stores and loads back index past ACC, at instruction 5): the segment's error and the
    session's later refusal both carry 5."""
    from test_faults import self_made_uop_program  # noqa: PLC0415

    from vtaforge.runtime.fsim import FsimDevice  # noqa: PLC0415

    cfg = TINY.replace(INSN_RING=16)
    dram, ia, n, _ = self_made_uop_program(cfg)
    dev = FsimDevice(cfg, mem_bytes=1 << 16)
    buf = dev.alloc(dram.size - cfg.dram_alignment)
    assert buf.addr == cfg.dram_alignment       # the image's addresses hold on the device
    dev.write(buf, dram[buf.addr:])
    dev.stream_open()
    dev.stream_append(ia, n, regions=[buf])
    with pytest.raises(ProgramError, match=r"^segment 1: instruction 5 \(ALU") as e:
        dev.stream_wait(1)
    assert e.value.insn_index == 5
    with pytest.raises(ProgramError, match="stopped at a failed segment") as e2:
        dev.stream_append(ia, n, regions=[buf])
    assert e2.value.insn_index == 5


# ------------------------------------------------------------------ race checker
def race_program(cfg, pos: int, *, token: bool = False, acc: bool = True):
    """A GEMM at ``pos`` (>= 4) reading INP entry 0, which a load-module LOAD (instruction
    3) writes with no token ordering the two (``token``: with one); ``acc`` False: the
    ACC entry the GEMM accumulates into is never written."""
    img = Image(cfg)
    u = img.uops([0], [0], [0])
    insns = [ld(UOP, 0, img.base(u, UOP), 1, 1),
             ld(ACC, 0, _data(img, cfg, ACC), 1, 1) if acc else nop(),
             ld(WGT, 0, _data(img, cfg, WGT), 1, 1),
             ld(INP, 0, _data(img, cfg, INP), 1, 1, push_next=int(token))]
    insns += [nop() for _ in range(pos - 4)]
    insns += [gemm(0, 1, pop_prev=int(token)), finish()]
    return img.build(insns)


@pytest.mark.parametrize("pos", [4, 7])
def test_race_checker_names_the_reader(pos):
    dram, ia, n = race_program(TINY, pos)
    verify_program(TINY, dram, ia, n)               # a valid program, only racy
    with pytest.raises(RaceError) as e:
        race_check(TINY, dram, ia, n)
    assert e.value.insn_index == pos
    assert str(e.value).startswith(f"race: instruction {pos} (compute) reads INP entry 0 "
                                   f"written by instruction 3 (load)")
    dram, ia, n = race_program(TINY, pos, token=True)
    race_check(TINY, dram, ia, n)                   # control: the token orders them


def test_race_checker_names_a_read_before_any_write():
    dram, ia, n = race_program(TINY, 5, token=True, acc=False)
    with pytest.raises(RaceError, match=r"^instruction 5 \(compute\) reads ACC entry 0 "
                                        r"before") as e:
        race_check(TINY, dram, ia, n)
    assert e.value.insn_index == 5


def test_race_checker_pop_without_push_and_deadlock():
    img = Image(TINY)
    dram, ia, n = img.build([nop(), nop(), gemm(0, 0, pop_prev=1), finish()])
    with pytest.raises(RaceError, match=r"^instruction 2: pop number 1 of l2g") as e:
        race_check(TINY, dram, ia, n)
    assert e.value.insn_index == 2
    # compute waits for load's token, load for compute's: no single instruction to blame
    img = Image(TINY)
    dram, ia, n = img.build([gemm(0, 0, pop_prev=1, push_prev=1),
                             ld(INP, 0, _data(img, TINY, INP), 1, 1, pop_next=1,
                                push_next=1), finish()])
    with pytest.raises(RaceError, match="deadlock on every schedule") as e:
        race_check(TINY, dram, ia, n)
    assert e.value.insn_index is None


# ------------------------------------------------------------------ the error classes
def _errors():
    return [ProgramError("p"), ProgramError("p", insn_index=3),
            DeadlockError("d", insn_index=np.int64(2)), RaceError("r", insn_index=1),
            BuilderError("b"), CoreFault("c", 2, 2, 4096, 1, 5),
            CoreTimeout("t", 1, 2.0, 2.5, "s")]


@pytest.mark.parametrize("err", _errors(), ids=lambda e: type(e).__name__)
def test_errors_pickle_copy_and_reword_keeping_class_and_attributes(err):
    for got in (pickle.loads(pickle.dumps(err)), copy.copy(err)):
        assert type(got) is type(err) and str(got) == str(err)
        assert vars(got) == vars(err)
    new = err.with_message("other text")
    assert type(new) is type(err) and str(new) == "other text"
    assert vars(new) == vars(err)
    assert err.insn_index is None or type(err.insn_index) is int
    if isinstance(err, BuilderError):
        assert isinstance(new, ValueError)


def test_name_fault_keeps_class_index_and_attributes():
    """The fused launch's step from ``insn_index`` (owner of that instruction), for a class
    whose constructor takes other arguments; no index: every step."""
    names = ["a", "a", "b", "b", "c"]
    err = CoreFault("instruction 3 (GEMM ...): computed src index 1024 ...", 2, 2, 1024, 1, 3)
    got = _name_fault(err, names)
    assert type(got) is CoreFault and vars(got) == vars(err)
    assert str(got) == f"step 'b' (fused launch of 3 steps, 'a' ... 'c'): {err}"
    t = CoreTimeout("watchdog", 1, 2.0, 2.5, "s")
    got = _name_fault(t, names[:3])
    assert type(got) is CoreTimeout and got.insn_index is None and got.limit == 2.0
    assert str(got) == "one of the steps 'a', 'b' (fused launch of 'a', 'b'): watchdog"
    assert _name_fault(err, None) is err


# ------------------------------------------------------------------ board (fake core)
def _error_word(unit: int, kind: int) -> int:
    f = {x.name: x for x in regs.reg("ERROR").fields}
    return (1 << f["VALID"].lsb) | (unit << f["UNIT"].lsb) | (kind << f["KIND"].lsb)


def test_board_core_fault_carries_the_index_from_the_error_registers():
    """test_pynq_fake's fake core, reporting a compute-unit INP_SRC fault at ERR_INSN =
    the GEMM's compute ordinal: ``CoreFault.insn_index`` is the GEMM's position (the driver
    maps the unit's ordinal to the program's index), and the message names it."""
    import test_pynq_fake as pf  # noqa: PLC0415

    from vtaforge.runtime.pynq import run_raw  # noqa: PLC0415

    cfg, pos = TINY, 6
    dram, ia, n, ordinal = bad_gemm_program(cfg, pos, src=0)   # passes the verifier
    assert ordinal != pos

    class FaultingCore(pf.FakeCore):
        def _start(self):
            super()._start()
            r = self.regs
            r[regs.offset("STATUS")] = 2 | 4                 # DONE, ERROR
            r[regs.offset("ERROR")] = _error_word(int(Module.COMPUTE),
                                                  int(regs.ErrorKind.INP_SRC))
            r[regs.offset("ERR_INSN")] = ordinal
            r[regs.offset("ERR_INDEX")] = cfg.INP_DEPTH

    dev, core, mem, _ = pf.board(cfg)
    core.__class__ = FaultingCore
    with pytest.raises(CoreFault) as e:
        run_raw(cfg, dram, ia, n, device=dev)
    err = e.value
    assert err.insn_index == pos and err.ordinal == ordinal
    assert (err.unit, err.kind, err.index) == (Module.COMPUTE, regs.ErrorKind.INP_SRC,
                                               cfg.INP_DEPTH)
    assert str(err).startswith(f"instruction {pos} (GEMM")


def test_board_relocation_failure_names_the_instruction():
    """A relocation that pushes only the UOP load's dram_base (4-byte elements) past 32
    bits, not the ACC load's (16-byte elements): its position, as the message says."""
    from vtaforge.runtime.pynq import _relocate  # noqa: PLC0415

    prog = encode_program(TINY, [ld(ACC, 0, 0, 1, 1), nop(), ld(UOP, 0, 0, 1, 1),
                                 finish()]).reshape(-1)
    assert TINY.elem_bytes(ACC) == 16
    with pytest.raises(ProgramError, match=r"instruction 2: field dram_base") as e:
        _relocate(TINY, prog, 1 << 34)
    assert e.value.insn_index == 2


# ------------------------------------------------------------------ rtl (cached tiny core)
@pytest.mark.rtl
def test_rtl_core_fault_names_the_gemm():
    """The Verilated tiny core (``verify=False``: the core's own index check): the fault it
    latches is raised as a CoreFault whose index is the GEMM's position."""
    rtl = pytest.importorskip("vtaforge.runtime.rtl")
    pytest.importorskip("vtaforge.hw.core")
    pos = 5
    dram, ia, n, ordinal = bad_gemm_program(TINY, pos)
    with pytest.raises(CoreFault) as e:
        rtl.run_raw(TINY, dram, ia, n, progress=False, verify=False, timeout_cycles=200_000,
                    model=rtl.build_model(TINY, progress=False))
    assert e.value.insn_index == pos and e.value.ordinal == ordinal
    assert str(e.value).startswith(f"instruction {pos} (GEMM")
