"""ALU REQ, the fused requantize (config option ``ALU_REQUANT``, ``hw.isa.req_imm``).

Oracle: numpy int64 arithmetic of the four-instruction sequence REQ replaces (ADD wrapping
at ACC_WIDTH, SHR by a signed amount, MAX lo, MIN hi), written here independently of fsim.
The raw programs run on fsim and on the Verilated core (marker ``rtl``; one extra core
build: tiny with the option); compiled models compare against the integer reference.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from vtaforge.hw import regs
from vtaforge.hw.config import MemType, VTAConfig, preset
from vtaforge.hw.isa import AluOp, ISAError, req_fields, req_imm
from vtaforge.runtime.device import ProgramError
from vtaforge.runtime.fsim import simulate

from programs import Image, acc_bytes, alu, finish, gemm, ld, read_out, st  # tests/support

TINY = preset("tiny")
REQ_CFG = TINY.replace(ALU_REQUANT=True)


def oracle(a: np.ndarray, b, shift: int, lo: int, hi: int, bits: int = 32) -> np.ndarray:
    """``MIN(MAX(SHR(ADD(a, b), shift), lo), hi)`` in int64 with ``bits``-bit wrapping."""
    m, h = 1 << bits, 1 << (bits - 1)
    w = lambda v: ((v + h) % m) - h  # noqa: E731
    t = w(a.astype(np.int64) + np.asarray(b, np.int64))
    t = t >> shift if shift >= 0 else w(t << -shift)
    return np.minimum(np.maximum(t, lo), hi)


# ------------------------------------------------------------------ encoding
def test_req_imm_round_trips_every_encodable_triple():
    seen, triples = set(), 0
    for shift in range(-32, 32):
        for lo in (-128, 0, -8):
            for hi in range(lo, 128, 7):
                imm = req_imm(shift, lo, hi)
                assert -32768 <= imm <= 32767
                assert req_fields(imm) == (shift, lo, hi, True)
                seen.add(imm)
                triples += 1
    assert len(seen) == triples     # distinct triples give distinct immediates


@pytest.mark.parametrize("args,msg", [((32, 0, 127), "shift 32"), ((-33, 0, 127), "shift -33"),
                                      ((3, -5, 127), "lower bound -5"), ((3, -8, -9), "upper bound -9"),
                                      ((3, 0, -1), "upper bound -1"),
                                      ((3, -128, 128), "upper bound 128")])
def test_req_imm_refuses_what_it_cannot_hold(args, msg):
    with pytest.raises(ISAError, match=msg):
        req_imm(*args)


def test_option_off_is_the_same_core():
    assert VTAConfig.from_dict({**TINY.to_dict(), "ALU_REQUANT": False}) == TINY
    assert "ALU_REQUANT" not in TINY.to_dict()
    assert REQ_CFG.to_dict()["ALU_REQUANT"] is True
    assert REQ_CFG.fingerprint != TINY.fingerprint
    assert "ALU_REQUANT" not in regs.c_header(TINY)
    assert "#define VTA_ALU_REQUANT 1" in regs.c_header(REQ_CFG)
    core = pytest.importorskip("vtaforge.hw.core")
    assert core.emit_verilog(VTAConfig.from_dict({**TINY.to_dict(), "ALU_REQUANT": False})) \
        == core.emit_verilog(TINY)


# ------------------------------------------------------------------ programs
N = 24   # entries per operand region


def req_program(cfg, rng, params):
    """acc[0:N] = a, acc[N:2N] = b; then, per ``(shift, lo, hi, tensor, bias_rows)`` in
    ``params``, an ALU REQ over acc[0:N] (tensor: source acc[N + (i // bias_rows)], the
    bias pattern that hits the source cache), each over the previous result (back to
    back: the hazard path); STORE acc[0:N].  Returns the image and the expected OUT."""
    lanes = cfg.BATCH * cfg.BLOCK_OUT
    a = rng.integers(-(1 << 31), 1 << 31, (N, lanes))
    b = rng.integers(-(1 << 31), 1 << 31, (N, lanes))
    a[:4] = rng.integers(-3000, 3000, (4, lanes))   # some values that land inside the clip
    img = Image(cfg)
    src_addr = img.put(acc_bytes(cfg, np.concatenate([a, b])))
    out_addr = img.zeros(N * cfg.elem_bytes(MemType.OUT))
    want = a.astype(np.int64)
    insns = [ld(MemType.ACC, 0, img.base(src_addr, MemType.ACC), 1, 2 * N)]
    uop_at = 0
    for shift, lo, hi, tensor, rows in params:
        src = N + np.arange(N) // rows if tensor else np.arange(N)
        ua = img.uops(np.arange(N), src)
        insns.append(ld(MemType.UOP, uop_at, img.base(ua, MemType.UOP), 1, N))
        ins = alu(AluOp.REQ, uop_at, uop_at + N, imm=None if tensor else 0)
        insns.append(dataclasses.replace(ins, imm=req_imm(shift, lo, hi)))
        operand = b[np.arange(N) // rows] if tensor else 0
        want = oracle(want, operand, shift, lo, hi, cfg.ACC_WIDTH)
        uop_at += N
    insns[-1] = dataclasses.replace(insns[-1], push_next=1)     # results ready: to store
    insns += [st(0, img.base(out_addr, MemType.OUT), 1, N, pop_prev=1), finish()]
    dram, ia, n = img.build(insns)
    return dram, ia, n, out_addr, want.reshape(N, cfg.BATCH, cfg.BLOCK_OUT)


PARAMS = {
    "tensor-bias": [(7, 0, 127, True, 4)],
    "tensor-each": [(0, -128, 127, True, 1)],
    "imm-left-shift": [(-3, -128, 127, False, 1)],
    "chain": [(12, -128, 127, True, 6), (-2, 0, 100, False, 1), (1, 0, 6, True, 24)],
    "extremes": [(31, -128, 127, True, 2), (-32, 0, 127, False, 1)],
    "int4-clip": [(8, -8, 7, True, 3), (0, -8, 3, False, 1), (1, -8, -8, True, 5)],
}


@pytest.fixture(params=["fsim", pytest.param("rtl", marks=pytest.mark.rtl)])
def run(request):
    if request.param == "fsim":
        return lambda cfg, dram, ia, n: simulate(cfg, dram, ia, n)
    rtl = pytest.importorskip("vtaforge.runtime.rtl")
    models = request.getfixturevalue("rtl_models")
    return lambda cfg, dram, ia, n: rtl.run_raw(cfg, dram, ia, n, progress=False,
                                                model=models(cfg))


@pytest.mark.parametrize("case", list(PARAMS))
def test_req_matches_the_sequence_oracle(run, case):
    rng = np.random.default_rng(sorted(PARAMS).index(case))
    dram, ia, n, out_addr, want = req_program(REQ_CFG, rng, PARAMS[case])
    run(REQ_CFG, dram, ia, n)
    np.testing.assert_array_equal(read_out(REQ_CFG, dram, out_addr, N), want)


def _one_alu(cfg, op, imm, use_imm=1):
    img = Image(cfg)
    ua = img.uops([0], [0])
    ins = dataclasses.replace(alu(op, 0, 1, imm=0), use_imm=use_imm, imm=imm)
    return img.build([ld(MemType.UOP, 0, img.base(ua, MemType.UOP), 1, 1), ins, finish()])


@pytest.mark.parametrize("cfg,op,imm,msg", [
    (TINY, AluOp.REQ, req_imm(3, 0, 127), "ALU REQ needs a config with ALU_REQUANT"),
    (REQ_CFG, AluOp.REQ, req_imm(3, 0, 127) | 0x80, "bits 7:6 = 11 are reserved"),
    (REQ_CFG, 6, 0, "unknown ALU opcode 6"),
])
def test_verifier_refuses_bad_req(cfg, op, imm, msg):
    dram, ia, n = _one_alu(cfg, op, imm)
    with pytest.raises(ProgramError, match=msg):
        simulate(cfg, dram, ia, n)


# ------------------------------------------------------------------ clearing REQ
# REQ with the reset flag: the REQ result goes to OUT only, 0 to the ACC entry (docs/isa.md
# "REQ").  OUT[e] is the low OUT_WIDTH bits of the last value written to entry e.
def _trunc(cfg, x):
    """Low OUT_WIDTH bits of ``x``, signed (what a STORE writes)."""
    m, h = 1 << cfg.OUT_WIDTH, 1 << (cfg.OUT_WIDTH - 1)
    return ((np.asarray(x, np.int64) + h) % m) - h


def _req_insn(bgn, end, imm, tensor, **kw):
    ins = alu(AluOp.REQ, bgn, end, imm=None if tensor else 0, reset=1, **kw)
    return dataclasses.replace(ins, imm=imm)


def clearing_program(cfg, rng, tensor):
    """acc[0:N] = a, acc[N:2N] = b; a clearing REQ over acc[0:N]; STORE (out1); then ADD imm
    5 on entries [0, 6), an ACC LOAD of c on [6, 12), a GEMM on [12, 18), nothing on
    [18, 24); STORE (out2).  Returns the image, both addresses and the expected OUTs."""
    B, BI, BO = cfg.BATCH, cfg.BLOCK_IN, cfg.BLOCK_OUT
    lanes = B * BO
    a = rng.integers(-(1 << 31), 1 << 31, (N, lanes))
    a[:8] = rng.integers(-3000, 3000, (8, lanes))
    b = rng.integers(-(1 << 31), 1 << 31, (N, lanes))
    c = rng.integers(-(1 << 31), 1 << 31, (6, lanes))
    x = rng.integers(-128, 128, (6, B, BI))
    w = rng.integers(-128, 128, (1, BO, BI))
    shift, lo, hi = 9, -128, 127
    img = Image(cfg)
    acc_addr = img.put(acc_bytes(cfg, np.concatenate([a, b])))
    c_addr = img.put(acc_bytes(cfg, c))
    x_addr = img.put(x.astype(np.int8))
    w_addr = img.put(w.astype(np.int8))
    out1 = img.zeros(N * cfg.elem_bytes(MemType.OUT))
    out2 = img.zeros(N * cfg.elem_bytes(MemType.OUT))
    src = N + np.arange(N) // 4
    u_req = img.uops(np.arange(N), src if tensor else np.arange(N))
    u_add = img.uops(np.arange(6), np.arange(6))
    u_gemm = img.uops(12 + np.arange(6), np.arange(6), np.zeros(6, int))
    insns = [
        ld(MemType.INP, 0, img.base(x_addr, MemType.INP), 1, 6),
        ld(MemType.WGT, 0, img.base(w_addr, MemType.WGT), 1, 1, push_next=1),
        ld(MemType.ACC, 0, img.base(acc_addr, MemType.ACC), 1, 2 * N),
        ld(MemType.UOP, 0, img.base(u_req, MemType.UOP), 1, N),
        _req_insn(0, N, req_imm(shift, lo, hi), tensor, push_next=1),
        st(0, img.base(out1, MemType.OUT), 1, N, pop_prev=1, push_prev=1),
        ld(MemType.UOP, N, img.base(u_add, MemType.UOP), 1, 6, pop_next=1),
        alu(AluOp.ADD, N, N + 6, imm=5),
        ld(MemType.ACC, 6, img.base(c_addr, MemType.ACC), 1, 6),
        ld(MemType.UOP, N + 6, img.base(u_gemm, MemType.UOP), 1, 6),
        gemm(N + 6, N + 12, pop_prev=1, push_next=1),
        st(0, img.base(out2, MemType.OUT), 1, N, pop_prev=1),
        finish(),
    ]
    dram, ia, n = img.build(insns)
    r = oracle(a, b[np.arange(N) // 4] if tensor else 0, shift, lo, hi, cfg.ACC_WIDTH)
    want1 = _trunc(cfg, r)
    want2 = want1.copy()
    want2[:6] = 5                                   # ACC was 0: 0 + 5
    want2[6:12] = _trunc(cfg, c)
    want2[12:18] = _trunc(cfg, (x.astype(np.int64) @ w[0].T.astype(np.int64)).reshape(6, -1))
    shape = (N, B, BO)
    return dram, ia, n, out1, out2, want1.reshape(shape), want2.reshape(shape)


@pytest.mark.parametrize("tensor", [True, False], ids=["tensor", "imm"])
def test_clearing_req_writes_out_and_zeroes_acc(run, tensor):
    """OUT holds the REQ result; a later ADD / ACC LOAD / GEMM shows the entry's ACC was 0
    and OUT follows ACC again; an entry nothing writes keeps the REQ result in OUT."""
    rng = np.random.default_rng(11 + tensor)
    dram, ia, n, out1, out2, want1, want2 = clearing_program(REQ_CFG, rng, tensor)
    run(REQ_CFG, dram, ia, n)
    np.testing.assert_array_equal(read_out(REQ_CFG, dram, out1, N), want1)
    np.testing.assert_array_equal(read_out(REQ_CFG, dram, out2, N), want2)


def _clear_reference(cfg, acc, nest, dst, src, imm, tensor):
    """Micro-op by micro-op reference of a clearing REQ nest: returns (acc, out, out_set)."""
    shift, lo, hi, _ = req_fields(imm)
    acc = acc.astype(np.int64).copy()
    out = np.zeros_like(acc)
    mark = np.zeros(acc.shape[0], bool)
    (I, dfo, sfo), (J, dfi, sfi) = nest
    for i in range(I):
        for j in range(J):
            for d0, s0 in zip(dst, src):
                d, s = d0 + i * dfo + j * dfi, s0 + i * sfo + j * sfi
                operand = acc[s] if tensor else 0
                out[d] = oracle(acc[d], operand, shift, lo, hi, cfg.ACC_WIDTH)
                mark[d] = True
                acc[d] = 0
    return acc, out, mark


REPEAT_CASES = {
    # (tensor, nest ((I, dfo, sfo), (J, dfi, sfi)), dst, src)
    "same-dst-twice": (True, ((1, 0, 0), (1, 0, 0)), [0, 0, 1, 1], [30, 31, 32, 33]),
    "src-cleared-earlier": (True, ((1, 0, 0), (1, 0, 0)), [0, 1, 2, 3], [30, 0, 1, 40]),
    "src-is-dst": (True, ((1, 0, 0), (1, 0, 0)), [4, 5, 5, 6], [4, 30, 5, 6]),
    "loop-repeats": (True, ((3, 0, 1), (2, 8, 0)), [0, 1, 2], [24, 25, 1]),
    "imm-loop-repeats": (False, ((2, 0, 0), (2, 1, 0)), [0, 2, 2, 7], [0, 0, 0, 0]),
    "random": None,
}


@pytest.mark.parametrize("case", list(REPEAT_CASES))
def test_clearing_req_repeated_destinations(run, case):
    """Repeated destinations inside one clearing REQ follow micro-op order: a later
    micro-op on the entry (or reading it as its source) sees the 0 the earlier one left."""
    cfg = REQ_CFG
    rng = np.random.default_rng(sorted(REPEAT_CASES).index(case) + 100)
    lanes = cfg.BATCH * cfg.BLOCK_OUT
    M = 2 * N
    if REPEAT_CASES[case] is None:
        tensor, nest = True, ((2, 0, 3), (1, 0, 0))
        dst = rng.integers(0, 10, 64)
        src = rng.integers(0, 20, 64)
    else:
        tensor, nest, dst, src = REPEAT_CASES[case]
    acc0 = rng.integers(-(1 << 20), 1 << 20, (M, lanes))
    imm = req_imm(4, 0, 90)
    img = Image(cfg)
    acc_addr = img.put(acc_bytes(cfg, acc0))
    out_addr = img.zeros(M * cfg.elem_bytes(MemType.OUT))
    u = img.uops(dst, src)
    (I, dfo, sfo), (J, dfi, sfi) = nest
    insns = [ld(MemType.ACC, 0, img.base(acc_addr, MemType.ACC), 1, M),
             ld(MemType.UOP, 0, img.base(u, MemType.UOP), 1, len(dst)),
             _req_insn(0, len(dst), imm, tensor, iter_out=I, iter_in=J, d=(dfo, dfi),
                       s=(sfo, sfi), push_next=1),
             st(0, img.base(out_addr, MemType.OUT), 1, M, pop_prev=1), finish()]
    dram, ia, n = img.build(insns)
    acc, out, mark = _clear_reference(cfg, acc0, nest, np.asarray(dst), np.asarray(src), imm,
                                      tensor)
    want = np.where(mark[:, None], out, _trunc(cfg, acc))
    res = run(cfg, dram, ia, n)
    np.testing.assert_array_equal(read_out(cfg, dram, out_addr, M),
                                  want.reshape(M, cfg.BATCH, cfg.BLOCK_OUT))
    if "alu_counter" in res.stats:     # a clearing REQ counts as ALU micro-ops
        assert res.stats["alu_counter"] == I * J * len(dst)


def test_clearing_req_checks_its_source_and_counts_as_alu():
    """The verifier checks a clearing REQ's tensor source like REQ's (a plain reset reads
    none), and counts its micro-ops as ALU micro-ops; both agree with fsim."""
    from vtaforge.runtime.verify import verify_program

    cfg = REQ_CFG
    img = Image(cfg)
    u = img.uops([0, 1], [2, cfg.ACC_DEPTH - 1])
    prog = [ld(MemType.UOP, 0, img.base(u, MemType.UOP), 1, 2),
            _req_insn(0, 2, req_imm(3, 0, 127), True, iter_out=2, s=(1, 0)), finish()]
    dram, ia, n = img.build(prog)
    for check in (simulate, verify_program):
        with pytest.raises(ProgramError, match=f"src index {cfg.ACC_DEPTH} is outside the "
                                               f"ACC scratchpad"):
            check(cfg, dram.copy(), ia, n)
    plain = [prog[0], dataclasses.replace(prog[1], alu_opcode=int(AluOp.ADD)), finish()]
    dram, ia, n = img.build(plain)
    assert simulate(cfg, dram, ia, n).stats["alu_counter"] == 0     # a reset: no src read
    ok = [prog[0], dataclasses.replace(prog[1], iter_out=1), finish()]
    dram, ia, n = img.build(ok)
    res = simulate(cfg, dram.copy(), ia, n)
    assert res.stats["alu_counter"] == 2
    assert verify_program(cfg, dram, ia, n).stats == res.stats


def _builder_tiles(dev, limit, tiles=6, n=5):
    """Per tile: one ACC LOAD of ``n`` entries and a bias row, a clearing REQ reading the
    row, a STORE; ``max_insns_per_launch = limit``.  Returns the result and the outputs."""
    from vtaforge.hw.isa import Module
    from vtaforge.runtime.builder import ProgramBuilder

    C_, S_ = Module.COMPUTE, Module.STORE
    cfg = dev.config
    rng = np.random.default_rng(5)
    lanes = cfg.BATCH * cfg.BLOCK_OUT
    data = rng.integers(-(1 << 16), 1 << 16, (tiles, n + 1, lanes)).astype(np.int32)
    src_buf = dev.alloc(data.nbytes)
    dev.write(src_buf, data)
    ob = dev.alloc(tiles * n * cfg.elem_bytes(MemType.OUT))
    b = ProgramBuilder(dev, max_insns_per_launch=limit)
    imm = req_imm(6, -128, 100)
    for t in range(tiles):
        if t:
            b.dep_pop(S_, C_)
        b.load_2d(src_buf, t * (n + 1), MemType.ACC, 0, 1, n + 1, n + 1)
        b.alu(("req-clear", n), lambda k: k.uops(np.arange(n), np.full(n, n)), AluOp.REQ,
              imm=imm, reset=True)
        b.dep_push(C_, S_)
        b.dep_pop(C_, S_)
        b.store_2d(0, ob, t * n, 1, n, n)
        b.dep_push(S_, C_)
    b.dep_pop(S_, C_)
    res = b.synchronize()
    got = dev.read(ob, tiles * n * cfg.elem_bytes(MemType.OUT)).view(np.int8)
    want = oracle(data[:, :n].astype(np.int64), data[:, n:n + 1].astype(np.int64), 6, -128,
                  100, cfg.ACC_WIDTH)
    return res, got.reshape(want.shape), want


@pytest.mark.parametrize("limit", [9, 10, 11, 12, 13, 14])
def test_clearing_req_builder_splits_only_between_tiles(limit):
    """The builder's liveness counts a clearing REQ's reads (dst and src): a program split
    into several launches gives the one-launch result (no launch boundary between the ACC
    LOAD and the REQ that reads it)."""
    from vtaforge.runtime.fsim import FsimDevice

    dev = FsimDevice(REQ_CFG, mem_bytes=1 << 20)
    res, got, want = _builder_tiles(dev, limit)
    assert res.stats["launches"] >= 2
    np.testing.assert_array_equal(got, want)


def test_clearing_req_race_checker_counts_its_reads():
    """The race checker sees a clearing REQ read its destination (it is no reset): the
    clearing program passes, and one whose REQ reads entries never written is refused."""
    from vtaforge.runtime.race import RaceError, race_check

    cfg = REQ_CFG
    dram, ia, n, *_ = clearing_program(cfg, np.random.default_rng(3), True)
    race_check(cfg, dram, ia, n)
    img = Image(cfg)
    u = img.uops(np.arange(4), np.arange(4))
    out = img.zeros(4 * cfg.elem_bytes(MemType.OUT))
    dram, ia, n = img.build([ld(MemType.UOP, 0, img.base(u, MemType.UOP), 1, 4),
                             _req_insn(0, 4, req_imm(2, 0, 127), False, push_next=1),
                             st(0, img.base(out, MemType.OUT), 1, 4, pop_prev=1), finish()])
    with pytest.raises(RaceError, match="reads ACC entry 0 before this program wrote it"):
        race_check(cfg, dram, ia, n)


def test_clearing_req_costs_like_req_in_the_cycle_model():
    """The DSE cycle model (dse.performance.CycleModel) costs a clearing REQ like the REQ it
    is (tensor operand: source-cache misses and hazards), not like a cheap reset."""
    dse = pytest.importorskip("vtaforge.dse.performance")
    from vtaforge.hw.isa import decode_program

    cfg = REQ_CFG
    img = Image(cfg)
    u = img.uops(np.arange(N), N + np.arange(N))
    words = np.frombuffer(img.parts[-1][1], dtype="<u4")
    model = dse.CycleModel()
    cost = {}
    for name, reset, op in (("req", 0, AluOp.REQ), ("clear", 1, AluOp.REQ),
                            ("reset", 1, AluOp.ADD)):
        ins = dataclasses.replace(_req_insn(0, N, req_imm(3, 0, 127), True), reset=reset,
                                  alu_opcode=int(op))
        dram, ia, n = img.build([ld(MemType.UOP, 0, img.base(u, MemType.UOP), 1, N), ins,
                                 finish()])
        cols = decode_program(cfg, dram[ia:ia + 16 * n])
        cost[name] = (model.alu_cycles(cfg, cols, 1, words),
                      model.program_cycles(cfg, cols)["cycles"])
    assert cost["clear"] == cost["req"]
    assert cost["reset"][0] < cost["req"][0] and cost["reset"][1] < cost["req"][1]
