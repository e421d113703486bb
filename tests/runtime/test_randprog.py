"""The random legal-program generator (``runtime/randprog.py``) on fsim: determinism per
seed, legality (the static verifier and the independent race checker accept every program,
fsim completes it), schedule independence (fsim with command-queue depth 1 runs a very
different schedule and must give the same DRAM), feature coverage, and the race checker and
shrinker themselves on hand-made programs."""

from __future__ import annotations

import re
from collections import Counter

import numpy as np
import pytest

from programs import AluOp, Image, MemType, acc_bytes, alu, finish, gemm, ld, nop, st
from vtaforge.hw.config import preset
from vtaforge.hw.isa import INSN_BYTES, Opcode, decode_program, disassemble
from vtaforge.runtime.device import ProgramError
from vtaforge.runtime.fsim import simulate
from randprog import (
    RaceError, generate, nopify, program_insns, race_check, rebuild, shrink,
)
from vtaforge.runtime.verify import verify_program

N_PROGRAMS = 200
#: fewer for the feature-variant config (it only needs to show MUL on / ACC8 off)
COUNTS = {"tiny_mul_noacc8": 80}
CONFIGS = {
    "tiny": preset("tiny"),
    "pynq": preset("pynq"),
    "batch2": preset("batch2"),
    # optional features flipped: MUL on, ACC8 off
    "tiny_mul_noacc8": preset("tiny").replace(ALU_MUL=True, ACC_8BIT=False),
}


def _run_all(name: str):
    """Generate, verify, race-check and run the programs of one config; returns
    (features, errors, opcode/memory-type counts)."""
    cfg = CONFIGS[name]
    serial = cfg.replace(INSN_QUEUE_DEPTH=1)  # same ISA layout, lock-step schedule
    feats: Counter = Counter()
    errors = []
    opcodes = Counter()
    for seed in range(COUNTS.get(name, N_PROGRAMS)):
        p = generate(cfg, seed)
        try:
            rep = verify_program(cfg, p.dram, p.insn_addr, p.insn_count)
            assert rep.pushes == rep.pops
            race_check(cfg, p.dram, p.insn_addr, p.insn_count)
            a = p.dram.copy()
            simulate(cfg, a, p.insn_addr, p.insn_count)
            b = p.dram.copy()
            simulate(serial, b, p.insn_addr, p.insn_count)
            if not np.array_equal(a, b):
                d = np.flatnonzero(a != b)
                raise AssertionError(f"schedule-dependent result: {d.size} bytes differ, "
                                     f"first at 0x{int(d[0]):x}")
        except (ProgramError, AssertionError) as e:
            errors.append(f"{p.description()}: {type(e).__name__}: {e}")
        feats.update({k: 1 for k in p.features})
        cols = decode_program(cfg, p.program_bytes())
        for op, mt, xs in zip(cols["opcode"].tolist(), cols["memory_type"].tolist(),
                              cols["x_size"].tolist()):
            opcodes[(op, mt if op == Opcode.LOAD and xs else None)] += 1
    return feats, errors, opcodes


@pytest.mark.parametrize("name", list(CONFIGS))
def test_random_programs_legal_schedule_independent_and_covering(name):
    """Every program passes the verifier and the race checker, completes on fsim, and gives
    the same DRAM under fsim's default schedule and under command-queue depth 1; together
    the programs hit every listed case."""
    cfg = CONFIGS[name]
    feats, errors, opcodes = _run_all(name)
    assert not errors, "\n".join(errors[:5])
    ops = ["MIN", "MAX", "ADD", "SHR"] + (["MUL"] if cfg.ALU_MUL else [])
    want = [f"alu_{o}_{k}" for o in ops for k in ("imm", "tensor")]
    want += ["pad", "load_y0", "load_stride_le_x", "gemm", "gemm_reset", "alu_reset",
             "empty_iter", "empty_uop_range", "long_loop", "repeated_dst", "uop_reuse",
             "uop_big", "store", "store_overlap", "store_y0", "nop", "nop_junk", "extra_push",
             "extra_pop", "roundtrip", "sync_via_compute", "vthread", "finish_sync",
             "finish_trailing", "load_INP", "load_WGT", "load_ACC", "load_UOP"]
    want += ["load_ACC8"] if cfg.ACC_8BIT else []
    missing = [w for w in want if feats[w] == 0]
    assert not missing, f"never generated in {COUNTS.get(name, N_PROGRAMS)} programs: {missing}"
    if not cfg.ALU_MUL:
        assert not any(k.startswith("alu_MUL") for k in feats)
    # the encoded streams agree with the features: ACC8 loads exist iff the config has them
    n_acc8 = opcodes[(int(Opcode.LOAD), int(MemType.ACC8))]
    assert (n_acc8 > 0) == cfg.ACC_8BIT


def test_generator_is_deterministic_per_seed():
    cfg = CONFIGS["batch2"]
    for seed in (0, 1, 12345):
        a, b = generate(cfg, seed), generate(cfg, seed)
        assert a.insn_addr == b.insn_addr and a.insn_count == b.insn_count
        np.testing.assert_array_equal(a.dram, b.dram)
        assert a.features == b.features and a.regions == b.regions
    imgs = {generate(cfg, s).dram.tobytes() for s in range(10)}
    assert len(imgs) == 10
    # another config, same seed: a different program (field widths and sizes differ)
    assert generate(CONFIGS["tiny"], 3).dram.tobytes() != generate(cfg, 3).dram.tobytes()


def test_program_shape_and_regions():
    cfg = CONFIGS["pynq"]
    p = generate(cfg, 7, max_insns=30)
    assert p.dram.dtype == np.uint8 and p.dram.ndim == 1
    assert p.insn_addr % cfg.dram_alignment == 0
    assert p.insn_addr + INSN_BYTES * p.insn_count <= p.dram.size
    assert p.regions["insn"] == (p.insn_addr, INSN_BYTES * p.insn_count)
    spans = sorted(p.regions.values())
    for (a0, n0), (a1, _) in zip(spans, spans[1:]):
        assert a0 + n0 <= a1, "regions overlap"
    for a, _ in spans:
        assert a % cfg.dram_alignment == 0
    lines = p.disassemble()
    assert len(lines) == p.insn_count and "FINISH" in "\n".join(lines)
    assert lines[-1].rstrip().endswith("l2g=0 g2l=0 g2s=0 s2g=0")
    # every pop is preceded in program order by its push (no negative running balance)
    for line in lines:
        bal = re.search(r"l2g=(-?\d+) g2l=(-?\d+) g2s=(-?\d+) s2g=(-?\d+)\s*$", line)
        assert bal and min(int(v) for v in bal.groups()) >= 0, line
    assert str(p.seed) in p.description()


def test_max_insns_bounds_the_body():
    cfg = CONFIGS["tiny"]
    small = [generate(cfg, s, max_insns=6).insn_count for s in range(20)]
    large = [generate(cfg, s, max_insns=120).insn_count for s in range(20)]
    assert max(small) < min(large)


# ----------------------------------------------------------------------------- race checker
def _ok_gemm_program(cfg, *, tokens: bool):
    """INP/WGT loaded by the load module, ACC reset + GEMM by compute, stored."""
    rng = np.random.default_rng(0)
    im = Image(cfg)
    u = im.uops([0], [0], [0])
    ib = im.put(rng.integers(-5, 5, cfg.elem_bytes(MemType.INP), dtype=np.int8))
    wb = im.put(rng.integers(-5, 5, cfg.elem_bytes(MemType.WGT), dtype=np.int8))
    o = im.zeros(cfg.elem_bytes(MemType.OUT))
    t = 1 if tokens else 0
    insns = [ld(MemType.INP, 0, im.base(ib, MemType.INP), 1, 1),
             ld(MemType.WGT, 0, im.base(wb, MemType.WGT), 1, 1, push_next=t),
             ld(MemType.UOP, 0, im.base(u, MemType.UOP), 1, 1),
             gemm(0, 1, reset=1),
             gemm(0, 1, pop_prev=t, push_next=t),
             st(0, im.base(o, MemType.OUT), 1, 1, pop_prev=t, push_prev=t),
             finish(pop_next=t)]
    return im.build(insns)


def test_race_check_accepts_synchronised_program():
    cfg = CONFIGS["tiny"]
    dram, ia, n = _ok_gemm_program(cfg, tokens=True)
    verify_program(cfg, dram, ia, n)
    rep = race_check(cfg, dram, ia, n)
    assert rep.per_module == (2, 4, 1) and rep.pushes == (1, 0, 1, 1)


def test_race_check_finds_missing_token():
    cfg = CONFIGS["tiny"]
    dram, ia, n = _ok_gemm_program(cfg, tokens=False)
    verify_program(cfg, dram, ia, n)  # balanced and deadlock-free: only racy
    with pytest.raises(RaceError, match=r"race: instruction 4 \(compute\) reads INP entry 0 "
                                        r"written by instruction 0 \(load\)"):
        race_check(cfg, dram, ia, n)


def test_race_check_finds_write_after_read():
    cfg = CONFIGS["tiny"]
    im = Image(cfg)
    a = im.put(acc_bytes(cfg, np.zeros((2, cfg.BATCH, cfg.BLOCK_OUT), np.int64)))
    u = im.uops([0], [0])
    o = im.zeros(2 * cfg.elem_bytes(MemType.OUT))
    insns = [ld(MemType.ACC, 0, im.base(a, MemType.ACC), 1, 2),
             ld(MemType.UOP, 0, im.base(u, MemType.UOP), 1, 1, push_next=1),
             st(0, im.base(o, MemType.OUT), 1, 1, pop_prev=1),
             alu(AluOp.ADD, 0, 1, imm=1),  # overwrites what the store may still read
             finish()]
    dram, ia, n = im.build(insns)
    verify_program(cfg, dram, ia, n)
    # either order of the two accesses may be the one reported
    with pytest.raises(RaceError, match=r"race: instruction (3 \(compute\) writes ACC entry 0 "
                                        r"accessed by instruction 2|2 \(store\) reads ACC "
                                        r"entry 0 written by instruction 3)"):
        race_check(cfg, dram, ia, n)


def test_race_check_finds_uninitialised_reads():
    cfg = CONFIGS["tiny"]
    im = Image(cfg)
    u = im.uops([3], [0])
    insns = [ld(MemType.UOP, 0, im.base(u, MemType.UOP), 1, 1), alu(AluOp.ADD, 0, 1, imm=1),
             finish()]
    dram, ia, n = im.build(insns)
    with pytest.raises(RaceError, match=r"reads ACC entry 3 before this program wrote it"):
        race_check(cfg, dram, ia, n)
    dram, ia, n = Image(cfg).build([gemm(0, 1, reset=1), finish()])
    with pytest.raises(RaceError, match=r"micro-op slot 0 is read before any UOP load"):
        race_check(cfg, dram, ia, n)


def test_race_check_finds_store_into_instructions_and_deadlock():
    cfg = CONFIGS["tiny"]
    im = Image(cfg)
    a = im.put(acc_bytes(cfg, np.zeros((1, cfg.BATCH, cfg.BLOCK_OUT), np.int64)))
    insns = [ld(MemType.ACC, 0, im.base(a, MemType.ACC), 1, 1, push_next=1),
             st(0, 0, 1, 1, pop_prev=1), finish()]
    dram, ia, n = im.build(insns)
    ins = program_insns(cfg, dram, ia, n)
    ins[1].dram_base = ia // cfg.elem_bytes(MemType.OUT)
    dram, ia, n = rebuild(cfg, dram, ia, ins)
    with pytest.raises(RaceError, match="STORE writes the instruction stream"):
        race_check(cfg, dram, ia, n)
    # store waits on g2s, compute on s2g, nothing pushed before either pop
    dram, ia, n = Image(cfg).build([st(0, 0, 1, 0, pop_prev=1, push_prev=1),
                                    finish(pop_next=1, push_next=1)])
    with pytest.raises(RaceError, match="deadlock on every schedule"):
        race_check(cfg, dram, ia, n)


def test_stripping_tokens_makes_generated_programs_racy():
    """The generator's tokens are what orders the modules: without them the race checker
    objects to nearly every program, and fsim's result changes with the schedule for many."""
    cfg = CONFIGS["tiny"]
    serial = cfg.replace(INSN_QUEUE_DEPTH=1)
    racy = dependent = 0
    for seed in range(30):
        p = generate(cfg, seed)
        ins = program_insns(cfg, p.dram, p.insn_addr, p.insn_count)
        for i in ins:
            i.pop_prev = i.pop_next = i.push_prev = i.push_next = 0
        d, ia, n = rebuild(cfg, p.dram, p.insn_addr, ins)
        verify_program(cfg, d, ia, n)
        try:
            race_check(cfg, d, ia, n)
        except RaceError:
            racy += 1
        a, b = d.copy(), d.copy()
        simulate(cfg, a, ia, n)
        simulate(serial, b, ia, n)
        dependent += not np.array_equal(a, b)
    assert racy >= 25 and dependent >= 10, (racy, dependent)


# ----------------------------------------------------------------------------- shrinker
def test_nopify_keeps_module_and_flags():
    cfg = CONFIGS["tiny"]
    for insn in (ld(MemType.INP, 3, 9, 2, 2, push_next=1),
                 ld(MemType.ACC, 1, 2, 1, 1, pop_prev=1, push_next=1),
                 gemm(0, 2, 3, 4, pop_next=1, push_prev=1),
                 alu(AluOp.SHR, 0, 1, imm=-3, push_next=1),
                 st(0, 5, 1, 4, pop_prev=1, push_prev=1)):
        n = nopify(insn, cfg)
        assert n.is_nop and n.module == insn.module
        assert (n.pop_prev, n.pop_next, n.push_prev, n.push_next) == \
            (insn.pop_prev, insn.pop_next, insn.push_prev, insn.push_next)
    f = finish(pop_next=1)
    assert nopify(f, cfg) is f
    assert nop(MemType.UOP).is_nop


def test_shrink_keeps_the_failure_and_legality():
    """Shrink against an artificial failure: "the byte the program's last STORE writes first
    ends up different from the initial image"."""
    cfg = CONFIGS["tiny"]
    for seed in range(40):
        p = generate(cfg, seed)
        a = p.dram.copy()
        simulate(cfg, a, p.insn_addr, p.insn_count)
        diff = np.flatnonzero(a != p.dram)
        if diff.size:
            break
    target = int(diff[0])

    def fails(d, ia, n):
        before = d[target]
        simulate(cfg, d, ia, n)
        return d[target] != before

    d, ia, n = shrink(cfg, p.dram, p.insn_addr, p.insn_count, fails)
    assert ia == p.insn_addr and n <= p.insn_count
    verify_program(cfg, d, ia, n)
    race_check(cfg, d, ia, n)
    assert fails(d.copy(), ia, n)
    work = lambda lines: sum("NOP" not in x for x in lines)  # noqa: E731
    before = work(disassemble(cfg, p.program_bytes()))
    after = work(disassemble(cfg, d[ia:ia + INSN_BYTES * n]))
    assert after < before and after <= 12, "\n".join(disassemble(cfg, d[ia:ia + 16 * n]))
    # the rest of the image is unchanged
    np.testing.assert_array_equal(np.delete(d, np.s_[ia:ia + 16 * p.insn_count]),
                                  np.delete(p.dram, np.s_[ia:ia + 16 * p.insn_count]))


ODD_CONFIGS = {
    # one token per queue per program: the generator must stay within the push budget
    "token_depth_1": preset("tiny").replace(TOKEN_QUEUE_DEPTH=1),
    "token_depth_2_insn_queue_1": preset("tiny").replace(TOKEN_QUEUE_DEPTH=2,
                                                         INSN_QUEUE_DEPTH=1),
    "acc16": preset("tiny").replace(LOG_ACC_WIDTH=4, LOG_ACC_BUFF_SIZE=8),
    "inp16_wgt16": preset("tiny").replace(LOG_INP_WIDTH=4, LOG_WGT_WIDTH=4,
                                          LOG_INP_BUFF_SIZE=9, LOG_WGT_BUFF_SIZE=9),
    "block2_min_buffers": preset("tiny").replace(LOG_BLOCK_IN=1, LOG_BLOCK_OUT=1,
                                                 LOG_UOP_BUFF_SIZE=8, LOG_INP_BUFF_SIZE=8,
                                                 LOG_WGT_BUFF_SIZE=8, LOG_ACC_BUFF_SIZE=8),
    "batch4_bus128": preset("batch2").replace(LOG_BUS_WIDTH=7, LOG_BATCH=2),
}


@pytest.mark.parametrize("name", list(ODD_CONFIGS))
def test_unusual_configs(name):
    """Narrow/wide data, 16-bit accumulators, minimum buffers, one-token queues: still
    legal, race-free and schedule-independent."""
    cfg = ODD_CONFIGS[name]
    serial = cfg.replace(INSN_QUEUE_DEPTH=1)
    for seed in range(25):
        p = generate(cfg, seed)
        rep = verify_program(cfg, p.dram, p.insn_addr, p.insn_count)
        assert max(rep.pushes) <= cfg.TOKEN_QUEUE_DEPTH
        race_check(cfg, p.dram, p.insn_addr, p.insn_count)
        a, b = p.dram.copy(), p.dram.copy()
        simulate(cfg, a, p.insn_addr, p.insn_count)
        simulate(serial, b, p.insn_addr, p.insn_count)
        np.testing.assert_array_equal(a, b, err_msg=p.description())
