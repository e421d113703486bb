"""Invalid programs: fsim and the static verifier reject them with the same one-line
message (never a hang, never silent corruption)."""

from __future__ import annotations

import re
import time

import numpy as np
import pytest

from programs import (AluOp, Image, MemType, acc_bytes, alu, finish, gemm, ld, nop,
                       read_out, st, wrap)
from vtaforge.hw.config import preset
from vtaforge.runtime.device import DeadlockError, DeviceError, ProgramError
from vtaforge.runtime.fsim import simulate
from vtaforge.runtime.verify import verify_program

UOP, INP, WGT, ACC, OUT, ACC8 = (MemType.UOP, MemType.INP, MemType.WGT, MemType.ACC,
                                 MemType.OUT, MemType.ACC8)
TINY = preset("tiny")


def both(cfg, dram, ia, n, exc, pattern, regions=None, device=None, **kw):
    """Assert that verify_program and the backend (``device``, default fsim) raise ``exc``
    with matching one-line messages, that verify did not touch the image, and that a
    Verilated backend (which refuses before launch) left it unchanged.  The Verilated
    backends skip a case they cannot run (see tests/runtime/conftest.py)."""
    if device is not None:
        device.check(cfg, regions, **kw)
    before = dram.copy()
    with pytest.raises(exc) as ev:
        verify_program(cfg, dram, ia, n, regions, **kw)
    np.testing.assert_array_equal(dram, before)
    run = simulate if device is None else device.run
    with pytest.raises(exc) as es:
        run(cfg, dram, ia, n, regions=regions, **kw)
    if device is not None and device.verilated:  # refused before launch: image unchanged
        np.testing.assert_array_equal(dram, before)
    assert str(ev.value) == str(es.value)
    msg = str(es.value)
    assert "\n" not in msg
    assert re.search(pattern, msg), msg
    return msg


def simple(cfg=TINY, mid=None, acc_n=2, out_n=2, tail=None, **kw):
    """uop load, ACC load, ``mid`` compute insns, SHR copy (push g2s), store, finish."""
    im = Image(cfg, **kw)
    u = im.uops([0], [0])
    a = im.put(acc_bytes(cfg, np.ones((acc_n, cfg.BATCH, cfg.BLOCK_OUT), np.int64)))
    o = im.zeros(out_n * cfg.elem_bytes(OUT))
    insns = [ld(UOP, 0, im.base(u, UOP), 1, 1), ld(ACC, 0, im.base(a, ACC), 1, acc_n)]
    insns += list(mid or [])
    insns += [alu(AluOp.SHR, 0, 1, 1, out_n, dfi=1, imm=0, push_next=1),
              st(0, im.base(o, OUT), 1, out_n, pop_prev=1, push_prev=1)]
    insns += list(tail if tail is not None else [finish(pop_next=1)])
    dram, ia, n = im.build(insns)
    return dram, ia, n, im, (u, a, o)


def test_valid_baseline():
    dram, ia, n, *_ = simple()
    rep = verify_program(TINY, dram, ia, n, None)
    assert rep.pushes == rep.pops == (0, 0, 1, 1)
    simulate(TINY, dram, ia, n)


def test_missing_token_deadlocks_quickly(device):
    # the store pops g2s, but compute never pushes it
    im = Image(TINY)
    o = im.zeros(64)
    insns = [ld(INP, 0, im.base(o, INP), 1, 1, push_next=1),
             gemm(0, 0, 1, 1, pop_prev=1),
             st(0, im.base(o, OUT), 1, 1, pop_prev=1, push_prev=1),
             finish(pop_next=1)]
    dram, ia, n = im.build(insns)
    t0 = time.perf_counter()
    msg = both(TINY, dram, ia, n, DeadlockError, r"^deadlock: ", device=device)
    assert time.perf_counter() - t0 < 5
    assert "compute stalled at instruction 3 'FINISH" in msg
    assert "waits for a s2g token" in msg
    assert "store stalled at instruction 2 'STORE OUT" in msg
    assert "waits for a g2s token" in msg
    assert "load" not in msg.split(";")[0]
    assert msg.endswith("token queues l2g=0 g2l=0 g2s=0 s2g=0")


def test_fetch_stall_deadlock(device):
    """INSN_QUEUE_DEPTH 1: a load blocked on a full token queue blocks fetch of the compute
    instruction that would drain it."""
    cfg = TINY.replace(TOKEN_QUEUE_DEPTH=1, INSN_QUEUE_DEPTH=1)
    im = Image(cfg)
    d = im.zeros(256)
    insns = [ld(INP, 0, im.base(d, INP), 1, 1, push_next=1),
             ld(INP, 1, im.base(d, INP), 1, 1, push_next=1),
             ld(INP, 2, im.base(d, INP), 1, 1, push_next=1),
             nop(UOP, pop_prev=1), nop(UOP, pop_prev=1), nop(UOP, pop_prev=1), finish()]
    dram, ia, n = im.build(insns)
    msg = both(cfg, dram, ia, n, DeadlockError, r"l2g is full", device=device)
    assert "fetch stalled at instruction 2" in msg and "l2g=1" in msg
    # one more slot in each queue and it completes
    ok = TINY.replace(TOKEN_QUEUE_DEPTH=2, INSN_QUEUE_DEPTH=1)
    dram2, ia2, n2 = Image(ok).build([])[0], None, None
    im = Image(ok)
    d = im.zeros(256)
    insns[0].dram_base = insns[1].dram_base = insns[2].dram_base = im.base(d, INP)
    dram2, ia2, n2 = im.build(insns)
    verify_program(ok, dram2, ia2, n2, None)


def test_unbalanced_tokens(device):
    dram, ia, n, im, _ = simple(mid=[nop(UOP, push_prev=1)])  # g2l pushed, never popped
    msg = both(TINY, dram, ia, n, ProgramError, r"unbalanced dependency tokens", device=device)
    assert "g2l: 1 pushes, 0 pops" in msg


@pytest.mark.parametrize("what", ["load", "store", "uop", "fetch", "region"])
def test_dma_out_of_range(what, device):
    im = Image(TINY)
    u = im.uops([0], [0])
    a = im.put(acc_bytes(TINY, np.ones((2, 1, 4), np.int64)))
    o = im.zeros(2 * TINY.elem_bytes(OUT))
    ab, ob, ub = im.base(a, ACC), im.base(o, OUT), im.base(u, UOP)
    big = 1 << 20
    insns = [ld(UOP, 0, ub + (big if what == "uop" else 0), 1, 1),
             ld(ACC, 0, ab + (big if what == "load" else 0), 1, 2),
             alu(AluOp.SHR, 0, 1, 1, 2, dfi=1, imm=0, push_next=1),
             st(0, ob + (big if what == "store" else 0), 1, 2, pop_prev=1, push_prev=1),
             finish(pop_next=1)]
    dram, ia, n = im.build(insns)
    if what == "fetch":
        msg = both(TINY, dram, ia, n + 10, ProgramError, r"^instruction fetch of bytes", device=device)
        assert "outside the memory the program may touch" in msg
        return
    if what == "region":  # inside the image, outside the given regions (store target)
        regions = [(u, 4), (a, 2 * TINY.elem_bytes(ACC)), (ia, 16 * n)]
        msg = both(TINY, dram, ia, n, ProgramError, r"^instruction 3 \(STORE .*DMA write of "
                   r"OUT bytes", regions=regions, device=device)
        assert f"[0x{o:x}, 0x{o + 2 * TINY.elem_bytes(OUT):x})" in msg
        return
    idx = {"uop": 0, "load": 1, "store": 3}[what]
    kind = {"uop": "read of UOP", "load": "read of ACC", "store": "write of OUT"}[what]
    msg = both(TINY, dram, ia, n, ProgramError, rf"^instruction {idx} \(.*\): DMA {kind} bytes", device=device)
    assert "allowed: [0x0, " in msg


def test_strided_dma_row_out_of_range(device):
    """Only the last row of a strided load leaves the image (BR-03 class: stride in
    elements)."""
    im = Image(TINY)
    a = im.zeros(64)
    ab = im.base(a, ACC)
    dram, ia, n = im.build([ld(ACC, 0, ab, 3, 1, stride=100), finish()])
    both(TINY, dram, ia, n, ProgramError, r"\(row 1\) is outside", device=device)


def patch_field(dram, ia, i, lsb, width, value):
    """Overwrite bits [lsb, lsb+width) of instruction i in the image."""
    word = int.from_bytes(dram[ia + 16 * i: ia + 16 * i + 16].tobytes(), "little")
    word &= ~(((1 << width) - 1) << lsb)
    word |= value << lsb
    dram[ia + 16 * i: ia + 16 * i + 16] = np.frombuffer(word.to_bytes(16, "little"), np.uint8)


@pytest.mark.parametrize("opc", [5, 6, 7])
def test_bad_opcode(opc, device):
    dram, ia, n, *_ = simple()
    patch_field(dram, ia, 2, 0, 3, opc)
    both(TINY, dram, ia, n, ProgramError,
         rf"^instruction 2 \(INVALID opcode={opc}\): unknown opcode {opc}", device=device)


@pytest.mark.parametrize("mt", [6, 7])
def test_bad_memory_type(mt, device):
    dram, ia, n, *_ = simple()
    patch_field(dram, ia, 1, 7, 3, mt)
    both(TINY, dram, ia, n, ProgramError, rf"^instruction 1 .*unknown memory type {mt}", device=device)


@pytest.mark.parametrize("case,pattern", [
    ("load_acc", r"scratchpad range \[\d+, \d+\) exceeds the ACC depth"),
    ("load_uop", r"scratchpad range \[\d+, \d+\) exceeds the UOP depth"),
    ("store", r"scratchpad range \[\d+, \d+\) exceeds the OUT depth"),
    ("gemm_dst", r"computed dst index \d+ is outside the ACC scratchpad"),
    ("gemm_src", r"computed src index \d+ is outside the INP scratchpad"),
    ("gemm_wgt", r"computed wgt index \d+ is outside the WGT scratchpad"),
    ("alu_src", r"computed src index \d+ is outside the ACC scratchpad"),
    ("uop_range", r"micro-op range \[\d+, \d+\) exceeds the UOP depth"),
    ("pad", r"exceeds the ACC depth"),
])
def test_scratchpad_index_out_of_range(case, pattern, device):
    c = TINY
    D = c.ACC_DEPTH
    mid = {
        "load_acc": [ld(ACC, D - 1, 1, 1, 2)],
        "load_uop": [ld(UOP, c.UOP_DEPTH - 1, 1, 1, 2)],
        "gemm_dst": [gemm(0, 1, 2, D // 2 + 1, d=(D // 2, 1), reset=1)],
        "gemm_src": [gemm(0, 1, 1, c.INP_DEPTH + 1, s=(0, 1))],
        "gemm_wgt": [gemm(0, 1, c.WGT_DEPTH + 1, 1, w=(1, 0))],
        "alu_src": [alu(AluOp.ADD, 0, 1, 1, 3, sfi=D - 1)],
        "uop_range": [alu(AluOp.ADD, c.UOP_DEPTH - 1, c.UOP_DEPTH + 1, imm=1)],
        "pad": [ld(ACC, D - 20, 1, 1, 2, pads=(2, 2, 2, 2))],
        "store": [],
    }[case]
    dram, ia, n, im, (u, a, o) = simple(mid=mid)
    if case == "store":
        dram, ia, n, *_ = simple(out_n=D + 1, acc_n=2)
    both(c, dram, ia, n, ProgramError, pattern, device=device)


def test_no_finish(device):
    dram, ia, n, *_ = simple(tail=[nop(UOP, pop_next=1)])
    both(TINY, dram, ia, n, ProgramError, r"^the program has no FINISH instruction", device=device)


@pytest.mark.parametrize("insn,flag", [
    (ld(INP, 0, 1, 1, 1, pop_prev=1), "pop_prev"), (ld(WGT, 0, 1, 1, 1, push_prev=1), "push_prev"),
    (nop(INP, push_prev=1), "push_prev"), (st(0, 1, 1, 1, pop_next=1), "pop_next"),
    (nop(store=True, push_next=1), "push_next")])
def test_invalid_flag_for_module(insn, flag, device):
    dram, ia, n, *_ = simple(mid=[insn])
    both(TINY, dram, ia, n, ProgramError,
         rf"^instruction 2 .*: flag {flag} is invalid for a (load|store)-module instruction", device=device)


@pytest.mark.parametrize("case,pattern", [
    ("store_acc", r"STORE of memory type ACC is invalid"),
    ("load_out", r"LOAD of memory type OUT is invalid"),
    ("uop_2d", r"a UOP load must have y_size 1 and no padding"),
    ("store_pad", r"STORE padding must be zero"),
    ("mul", r"ALU MUL needs a config with ALU_MUL"),
    ("acc8", r"LOAD of memory type ACC8 needs a config with ACC_8BIT"),
])
def test_invalid_instruction_forms(case, pattern, device):
    cfg = TINY.replace(ACC_8BIT=False) if case == "acc8" else TINY
    mid = {
        "store_acc": [st(0, 1, 1, 1)],
        "load_out": [ld(OUT, 0, 1, 1, 1)],
        "uop_2d": [ld(UOP, 0, 1, 2, 1)],
        "store_pad": [st(0, 1, 1, 1)],
        "mul": [alu(AluOp.MUL, 0, 1, imm=2)],
        "acc8": [ld(ACC8, 0, 1, 1, 1)],
    }[case]
    if case == "store_acc":
        mid[0].memory_type = int(ACC)
    if case == "store_pad":
        mid[0].x_pad_1 = 1
    dram, ia, n, *_ = simple(cfg=cfg, mid=mid)
    both(cfg, dram, ia, n, ProgramError, rf"^instruction 2 .*{pattern}", device=device)


def _mul_program(cfg, a, b, imm, shift):
    """acc[j] = a[j]; acc[n + j] = b[j]; acc[j] *= acc[n + j] (tensor MUL); acc[j] *= imm;
    acc[j] >>= shift; store OUT j (the low OUT_WIDTH bits)."""
    n = a.shape[0]
    im = Image(cfg)
    u = im.uops([0], [n])
    x = im.put(acc_bytes(cfg, np.concatenate([a, b])))
    o = im.zeros(n * cfg.elem_bytes(OUT))
    insns = [ld(UOP, 0, im.base(u, UOP), 1, 1), ld(ACC, 0, im.base(x, ACC), 1, 2 * n),
             alu(AluOp.MUL, 0, 1, 1, n, dfi=1, sfi=1),
             alu(AluOp.MUL, 0, 1, 1, n, dfi=1, imm=imm),
             alu(AluOp.SHR, 0, 1, 1, n, dfi=1, imm=shift, push_next=1),
             st(0, im.base(o, OUT), 1, n, pop_prev=1, push_prev=1), finish(pop_next=1)]
    dram, ia, cnt = im.build(insns)
    return dram, ia, cnt, o


def test_mul_allowed_with_alu_mul():
    """MUL (tensor and immediate) against a numpy oracle wrapping at ACC_WIDTH: the full
    32-bit products are read back 8 bits at a time (SHR 0/8/16/24), and SHR 31 gives the
    sign of the *wrapped* product (an unwrapped product would give +1, not -1)."""
    cfg = TINY.replace(ALU_MUL=True)
    assert cfg.ACC_WIDTH == 32 and cfg.OUT_WIDTH == 8
    rng = np.random.default_rng(7)
    n = 8
    shape = (n, cfg.BATCH, cfg.BLOCK_OUT)
    a = rng.integers(-(1 << 20), 1 << 20, shape)
    b = rng.integers(-(1 << 20), 1 << 20, shape)
    a[0, 0, 0], b[0, 0, 0] = 70000, 40000   # 2.8e9 * imm: wraps
    a[1, 0, 0], b[1, 0, 0] = -3, 5          # small, no wrap
    imm = -12345
    # oracle: each product wrapped to ACC_WIDTH as the ALU computes it
    want = wrap(wrap(a * b, 32) * imm, 32)
    got = np.zeros(shape, np.int64)
    for shift in (0, 8, 16, 24):
        dram, ia, cnt, o = _mul_program(cfg, a, b, imm, shift)
        res = simulate(cfg, dram, ia, cnt)
        assert res.stats["alu_counter"] == 3 * n
        got |= (read_out(cfg, dram, o, n) & 0xFF) << shift
    got = wrap(got, 32)
    np.testing.assert_array_equal(got, want)
    dram, ia, cnt, o = _mul_program(cfg, a, b, imm, 31)
    simulate(cfg, dram, ia, cnt)
    np.testing.assert_array_equal(read_out(cfg, dram, o, n), np.where(want < 0, -1, 0))


@pytest.mark.parametrize("shift", [4, 8, 1])
def test_misaligned_insn_addr_refused(shift, device):
    """The core fetches 16-byte instructions from aligned addresses; a program placed at a
    misaligned address must be refused (by fsim and the verifier alike), not decoded."""
    dram, ia, n, *_ = simple()
    prog = dram[ia:ia + 16 * n].copy()
    moved = np.zeros(dram.size + 32, np.uint8)
    moved[:dram.size] = dram
    moved[ia + shift:ia + shift + prog.size] = prog
    assert simulate(TINY, dram, ia, n).stats["insn_count"] == n  # the aligned original runs
    both(TINY, moved, ia + shift, n, ProgramError,
         rf"^insn_addr = 0x{ia + shift:x} is not a multiple of 16 bytes", device=device)


def test_generated_programs_are_aligned():
    from randprog import generate

    for cfg in (TINY, preset("pynq")):
        for seed in range(5):
            assert generate(cfg, seed, max_insns=8).insn_addr % 16 == 0


def test_nop_ignores_other_fields():
    """x_size == 0: memory type, sizes and addresses are ignored (only tokens move)."""
    weird = ld(OUT, 60000, 1 << 30, 9, 0)
    weird2 = st(60000, 1 << 30, 9, 0)
    weird2.memory_type = int(ACC)
    dram, ia, n, *_ = simple(mid=[weird, weird2])
    assert simulate(TINY, dram, ia, n).stats["nop_insns"] == 2


def test_watchdog(device):
    dram, ia, n, *_ = simple(mid=[gemm(0, 1, 100, 100, reset=1)])
    both(TINY, dram, ia, n, ProgramError, r"^timeout: instruction 2 would exceed the "
         r"watchdog of 1000 steps", max_steps=1000, device=device)


def test_bad_image_and_regions():
    dram, ia, n, *_ = simple()
    with pytest.raises(DeviceError, match="1-D numpy uint8"):
        simulate(TINY, dram.astype(np.int16), ia, n)
    with pytest.raises(DeviceError, match="extends past"):
        simulate(TINY, dram, ia, n, regions=[(0, dram.size + 1)])
    with pytest.raises(ProgramError, match="at least one instruction"):
        simulate(TINY, dram, ia, 0)


def test_static_error_leaves_dram_untouched():
    """A statically invalid instruction late in the program is caught before anything runs."""
    dram, ia, n, *_ = simple(mid=[ld(ACC, 0, 1 << 24, 1, 1)])
    before = dram.copy()
    with pytest.raises(ProgramError):
        simulate(TINY, dram, ia, n)
    np.testing.assert_array_equal(dram, before)


def test_first_out_of_range_is_the_first_in_execution_order():
    """``first_out_of_range`` (the index fsim and the core report) against a brute-force
    walk of the loop nest: i outer, j inner, micro-op innermost."""
    from vtaforge.runtime.fsim import first_out_of_range

    rng = np.random.default_rng(7)
    for _ in range(400):
        U = int(rng.integers(1, 5))
        base = rng.integers(0, 64, U)
        I, J = (int(x) for x in rng.integers(1, 6, 2))
        fo, fi = (int(x) for x in rng.integers(0, 20, 2))
        depth = int(rng.integers(8, 120))
        want = None
        for pos, (i, j, k) in enumerate((i, j, k) for i in range(I) for j in range(J)
                                        for k in range(U)):
            v = int(base[k]) + i * fo + j * fi
            if v >= depth:
                want = (pos, v)
                break
        assert first_out_of_range(base, I, J, fo, fi, depth) == want, (base, I, J, fo, fi,
                                                                        depth)
