"""The requantize engine (``REQ_ENGINE``): one-micro-op ALU REQs and ALU resets run beside
the GEMM pipeline, with results as if every instruction ran in order.

Raw programs are built here so that the engine's instruction and the pipeline's overlap in
every way the ordering rules cover: a GEMM on the other bank (runs beside), a GEMM on the
engine's destinations (waits), a GEMM writing the engine's bias row (waits: write after
read), an ALU instruction behind the engine (waits), a STORE of the engine's results (its
token comes when the engine is done), an ALU reset on the engine.  The oracle of the
semantics is fsim (DRAM equal after the run) and, for the REQ values, the integer sequence
of test_alu_requant.py; a compiled conv model must equal fsim and take fewer cycles than
the same program on the core without the engine (simulated cycles: deterministic).
"""

from __future__ import annotations

import dataclasses
import sys
from pathlib import Path

import numpy as np
import pytest

from programs import Image, MemType, acc_bytes, alu, assert_same_dram, finish, gemm, ld, \
    read_out, st
from vtaforge.hw import regs
from vtaforge.hw.config import ConfigError, VTAConfig, preset
from vtaforge.hw.isa import AluOp, req_imm
from vtaforge.runtime.fsim import simulate

sys.path.insert(0, str(Path(__file__).parent))
from test_alu_requant import REQ_CFG, oracle  # noqa: E402

ENG_CFG = REQ_CFG.replace(REQ_ENGINE=True)
HALF = ENG_CFG.ACC_DEPTH // 2     # first entry of the second bank


def test_config_and_fingerprint():
    assert VTAConfig.from_dict({**REQ_CFG.to_dict(), "REQ_ENGINE": False}) == REQ_CFG
    assert "REQ_ENGINE" not in REQ_CFG.to_dict()
    assert ENG_CFG.to_dict()["REQ_ENGINE"] is True
    assert ENG_CFG.fingerprint != REQ_CFG.fingerprint
    assert "#define VTA_REQ_ENGINE 1" in regs.c_header(ENG_CFG)
    assert "REQ_ENGINE" not in regs.c_header(REQ_CFG)
    with pytest.raises(ConfigError, match=r"REQ_ENGINE = true needs ALU_REQUANT = true"):
        preset("tiny").replace(REQ_ENGINE=True)
    with pytest.raises(ConfigError, match=r"REQ_ENGINE = 1 must be a boolean"):
        REQ_CFG.replace(REQ_ENGINE=1)


def _req(bgn, imm, rows, cols, *, tensor=True, clear=True, **kw):
    """ALU REQ of one micro-op at ``bgn`` over ``rows`` x ``cols`` entries (dst factor
    ``cols``, 1), the tensor source moving one entry per row (the bias row pattern)."""
    ins = alu(AluOp.REQ, bgn, bgn + 1, rows, cols, d=(cols, 1), s=(1, 0),
              imm=None if tensor else 0, reset=int(clear), **kw)
    return dataclasses.replace(ins, imm=imm)


def engine_program(cfg, seed: int, *, clear: bool = True):
    """The overlap program (module docstring); returns (dram, insn_addr, count, outs) with
    ``outs`` the DRAM addresses of the four stored regions and the expected REQ output."""
    rng = np.random.default_rng(seed)
    B, BI, BO = cfg.BATCH, cfg.BLOCK_IN, cfg.BLOCK_OUT
    lanes = B * BO
    R, C = 6, 4                                      # REQ nest: 24 entries at [0, 24)
    a = rng.integers(-5000, 5000, (R * C, lanes))
    bias = rng.integers(-3000, 3000, (R, lanes))
    g = rng.integers(-(1 << 20), 1 << 20, (8, lanes))   # the second bank's starting values
    x = rng.integers(-128, 128, (8, B, BI))
    w = rng.integers(-128, 128, (2, BO, BI))
    img = Image(cfg)
    a_addr = img.put(acc_bytes(cfg, a))
    b_addr = img.put(acc_bytes(cfg, bias))
    g_addr = img.put(acc_bytes(cfg, g))
    x_addr = img.put(x.astype(np.int8))
    w_addr = img.put(w.astype(np.int8))
    outs = [img.zeros(n * cfg.elem_bytes(MemType.OUT)) for n in (R * C, 8, 8, R)]
    u_req = img.uops([0], [64])                                  # uop 0
    u_bank1 = img.uops(HALF + np.arange(8), np.arange(8), np.zeros(8, int))     # 1..8
    u_same = img.uops(np.arange(4), np.arange(4), np.ones(4, int))             # 9..12
    u_bias = img.uops([64, 65], [4, 5], [1, 1])                  # 13..14: writes the bias
    u_rst = img.uops([HALF + 16], [HALF + 16])                   # 15: an ALU reset nest
    imm = req_imm(7, -128, 127)
    L = MemType
    insns = [
        ld(L.INP, 0, img.base(x_addr, L.INP), 1, 8),
        ld(L.WGT, 0, img.base(w_addr, L.WGT), 1, 2, push_next=1),
        ld(L.ACC, 0, img.base(a_addr, L.ACC), 1, R * C),
        ld(L.ACC, 64, img.base(b_addr, L.ACC), 1, R),
        ld(L.ACC, HALF, img.base(g_addr, L.ACC), 1, 8),
        ld(L.UOP, 0, img.base(u_req, L.UOP), 1, 1),
        ld(L.UOP, 1, img.base(u_bank1, L.UOP), 1, 8),
        ld(L.UOP, 9, img.base(u_same, L.UOP), 1, 4),
        ld(L.UOP, 13, img.base(u_bias, L.UOP), 1, 2),
        ld(L.UOP, 15, img.base(u_rst, L.UOP), 1, 1, pop_prev=1),
        _req(0, imm, R, C, clear=clear, push_next=1),             # engine: bank 0, pushes
        gemm(1, 9, 3, 1),                                         # bank 1, beside it
        gemm(9, 13, 1, 1),                # entries 0..3: waits for the engine's writes
        gemm(13, 15, 1, 1),               # writes bias rows 64, 65: after the REQ read them
        alu(AluOp.ADD, 15, 16, 8, 1, d=(1, 0), s=(1, 0), reset=1),   # engine: a reset
        alu(AluOp.ADD, 1, 2, 1, 1, imm=3, push_next=1),           # ALU behind the engine
        st(4, img.base(outs[0], L.OUT) + 4, 1, R * C - 4,
           pop_prev=1),                   # entries 4..23 once the engine pushed
        st(HALF, img.base(outs[1], L.OUT), 1, 8, pop_prev=1),     # after the last ALU
        st(HALF + 16, img.base(outs[2], L.OUT), 1, 8),
        st(64, img.base(outs[3], L.OUT), 1, R, push_prev=1),
        finish(pop_next=1),
    ]
    dram, ia, n = img.build(insns)
    want = oracle(a, np.repeat(bias, C, axis=0), 7, -128, 127, cfg.ACC_WIDTH)
    return dram, ia, n, outs, want.reshape(R * C, B, BO)


@pytest.mark.parametrize("clear", [True, False], ids=["clearing", "plain"])
def test_overlap_program_fsim_oracle(clear):
    dram, ia, n, outs, want = engine_program(ENG_CFG, 1, clear=clear)
    simulate(ENG_CFG, dram, ia, n)
    got = read_out(ENG_CFG, dram, outs[0], want.shape[0])
    np.testing.assert_array_equal(got[4:], want[4:])
    assert not read_out(ENG_CFG, dram, outs[2], 8).any()     # the engine's reset


@pytest.fixture(scope="module")
def models(rtl_models):
    return rtl_models


@pytest.mark.rtl
@pytest.mark.parametrize("seed,clear", [(1, True), (2, False), (3, True)])
def test_overlap_program_rtl_equals_fsim(models, seed, clear):
    rtl = pytest.importorskip("vtaforge.runtime.rtl")
    dram, ia, n, outs, want = engine_program(ENG_CFG, seed, clear=clear)
    ref = dram.copy()
    r_f = simulate(ENG_CFG, ref, ia, n)
    r_eng = rtl.run_raw(ENG_CFG, dram, ia, n, progress=False, model=models(ENG_CFG))
    assert_same_dram(ref, dram, f"seed {seed}")
    assert r_eng.stats["alu_counter"] == r_f.stats["alu_counter"]
    # the same program on the core without the engine: same memory, more cycles
    d2 = engine_program(REQ_CFG, seed, clear=clear)[0]
    r_req = rtl.run_raw(REQ_CFG, d2, ia, n, progress=False, model=models(REQ_CFG))
    assert_same_dram(ref, d2, f"seed {seed} without the engine")
    assert r_eng.stats["alu_counter"] == r_req.stats["alu_counter"]
    assert r_eng.cycles < r_req.cycles, (r_eng.cycles, r_req.cycles)


def younger_push_program(cfg, variant: str, n: int = 256):
    """An engine REQ over entries [0, n) that pushes nothing, then a younger instruction
    that pushes to the store unit (a GEMM on the other bank, or a compute-side UOP LOAD),
    then a STORE popping that token of the REQ's last 8 entries: in order, the STORE sees
    the REQ's results (a reviewer's program: the pipeline's push overtook the engine).
    Returns ``(dram, insn_addr, insn_count, out_addr)``."""
    rng = np.random.default_rng(0)
    img = Image(cfg)
    a_addr = img.put(acc_bytes(cfg, rng.integers(-5000, 5000, (n, cfg.BATCH * cfg.BLOCK_OUT))))
    out = img.zeros(n * cfg.elem_bytes(MemType.OUT))
    u_req = img.uops([0], [0])
    u_g = img.uops([HALF], [0], [0])
    req = dataclasses.replace(alu(AluOp.REQ, 0, 1, n, 1, d=(1, 0), imm=0),
                              imm=req_imm(4, -128, 127))
    younger = (gemm(1, 2, 1, 1, reset=1, push_next=1) if variant == "gemm"
               else ld(MemType.UOP, 2, img.base(u_g, MemType.UOP), 1, 1, push_next=1))
    insns = [ld(MemType.ACC, 0, img.base(a_addr, MemType.ACC), 1, n),
             ld(MemType.UOP, 0, img.base(u_req, MemType.UOP), 1, 1),
             ld(MemType.UOP, 1, img.base(u_g, MemType.UOP), 1, 1),
             req, younger,
             st(n - 8, img.base(out, MemType.OUT) + n - 8, 1, 8, pop_prev=1, push_prev=1),
             finish(pop_next=1)]
    dram, ia, cnt = img.build(insns)
    return dram, ia, cnt, out


@pytest.mark.rtl
@pytest.mark.parametrize("variant", ["gemm", "uopload"])
def test_younger_store_push_waits_for_the_engine(models, variant):
    rtl = pytest.importorskip("vtaforge.runtime.rtl")
    dram, ia, n, out = younger_push_program(ENG_CFG, variant)
    ref = dram.copy()
    simulate(ENG_CFG, ref, ia, n)
    rtl.run_raw(ENG_CFG, dram, ia, n, progress=False, model=models(ENG_CFG))
    assert_same_dram(ref, dram, variant)


def _compiled_rtl_equals_fsim(models, cfg, wl, seed: int, options=None) -> int:
    """Compile the one-conv model of ``wl`` for ``cfg`` (lowering ``options``: a
    ``LowerOptions``, default the config's), run it on fsim and on the
    Verilated ``cfg`` core: every kept tensor must be equal
    (:func:`rtl_compare.rtl_equals_fsim`).  Returns the core's cycles summed over the
    run's launches."""
    pytest.importorskip("onnx")
    pytest.importorskip("vtaforge.runtime.rtl")
    from rtl_compare import rtl_equals_fsim
    from vtaforge.compiler.compile import compile_model
    from vtaforge.compiler.zoo import workload_model

    shape = (1, wl.in_channels, wl.height, wl.width)
    x = np.random.default_rng(seed).standard_normal(shape).astype(np.float32)
    cm = compile_model(workload_model(wl), x, cfg, options=options)
    assert any(s.target == "vta" and s.op == "qconv2d" for s in cm.steps)
    _, runs = rtl_equals_fsim(cm, x, model=models(cfg))
    return sum(r.cycles for r in runs)


def _workload(name, c, hw, k, s, groups=1, cout=None):
    from vtaforge.compiler.zoo import Workload
    return Workload(name, batch=1, height=hw, width=hw, in_channels=c,
                    out_channels=c if cout is None else cout,
                    groups=groups, kernel_h=k, kernel_w=k, pad_h=k // 2, pad_w=k // 2,
                    stride_h=s, stride_w=s)


@pytest.mark.rtl
def test_compiled_conv_on_the_engine(models):
    """A strided 1x1 conv compiled for the engine core equals fsim step for step, and its
    programs take fewer cycles than on the same core without the engine."""
    wl = _workload("c1x1", 16, 28, 1, 2)
    cycles = {cfg.REQ_ENGINE: _compiled_rtl_equals_fsim(models, cfg, wl, 5)
              for cfg in (ENG_CFG, REQ_CFG)}
    assert cycles[True] < cycles[False], cycles


@pytest.mark.rtl
def test_compiled_depthwise_on_the_engine(models):
    """A depthwise 3x3 conv (block-diagonal GEMMs; the last tile requantizes each output
    block right after its step, ConvOptions.step_req) compiled for the engine core equals fsim."""
    _compiled_rtl_equals_fsim(models, ENG_CFG, _workload("dw", 16, 14, 3, 1, groups=16), 6)


@pytest.mark.rtl
@pytest.mark.parametrize("cin,cout,k,s,hw", [(64, 64, 1, 2, 8), (32, 32, 1, 1, 8),
                                          (16, 16, 3, 1, 10), (4, 8, 1, 1, 20),
                                          (64, 64, 3, 1, 6)])
def test_roofline_lowerings_on_the_engine(models, cin, cout, k, s, hw):
    """The roofline lowerings (tests/compiler/test_lower_conv_roofline.py and
    test_lower_conv_mobilenet.py) at tiny's sizes: a one-tile conv split over the banks
    (64 ch, stride 2), inputs by tile with one-block steps in every tile and the output
    blocks as a GEMM loop (32 ch), a 3x3 conv; four bank-aligned ACC regions with the
    output-block loop (4 -> 8 ch: tiny's 32-bit OUT element is half a bus beat, so the
    store-heavy threshold is lowered to a quarter for it); streamed weights stored
    input-block-major (64 ch 3x3); weight groups of one block in the first step
    (``ConvOptions.w_chunk_beats`` small).  Every tensor equal to fsim."""
    from vtaforge.compiler.options import ConvOptions, LowerOptions
    opts = LowerOptions(conv=ConvOptions(w_chunk_beats=2, quad_acc_ratio=0.25))
    _compiled_rtl_equals_fsim(models, ENG_CFG, _workload("r", cin, hw, k, s, cout=cout), 3, opts)


# ------------------------------------------------------------------ random streams
def _entry(rng):
    """An entry of [0, 32) or [HALF, HALF + 32): both banks."""
    return int(rng.choice(np.r_[np.arange(32), HALF + np.arange(32)]))


def _random_insn(rng, uops):
    """One random compute instruction; its micro-ops are appended to ``uops``."""
    def add(lst):
        a = len(uops)
        uops.extend(lst)
        return a, len(uops)
    kind = rng.choice(["gemm", "req", "reset", "alu", "reqmulti"], p=[0.35, 0.3, 0.1, 0.15, 0.1])
    if kind == "gemm":
        n = int(rng.integers(1, 6))
        a, b = add([(_entry(rng), int(rng.integers(0, 16)), int(rng.integers(0, 4)))
                    for _ in range(n)])
        return gemm(a, b, int(rng.integers(1, 4)), 1)
    if kind in ("req", "reset"):       # one micro-op: the engine's instructions
        io, ii = int(rng.integers(1, 5)), int(rng.integers(1, 5))
        dfo, dfi = int(rng.integers(0, 5)), int(rng.integers(0, 3))
        span = (io - 1) * dfo + (ii - 1) * dfi
        d0 = int(rng.choice([0, HALF])) + int(rng.integers(0, 32 - span))
        s0 = int(rng.choice([0, HALF])) + int(rng.integers(0, 24))
        sfo, sfi = int(rng.integers(0, 3)), int(rng.integers(0, 2))
        a, b = add([(d0, s0, 0)])
        if kind == "reset":
            return alu(AluOp.ADD, a, b, io, ii, d=(dfo, dfi), s=(sfo, sfi), imm=0, reset=1)
        tensor = bool(rng.integers(0, 2))
        ins = alu(AluOp.REQ, a, b, io, ii, d=(dfo, dfi), s=(sfo, sfi),
                  imm=None if tensor else 0, reset=int(rng.integers(0, 2)))
        lo = int(rng.choice([-128, 0, -8]))
        return dataclasses.replace(ins, imm=req_imm(int(rng.integers(0, 9)), lo,
                                                    7 if lo == -8 else 127))
    a, b = add([(_entry(rng), _entry(rng), 0) for _ in range(int(rng.integers(1, 4)))])
    if kind == "reqmulti":              # several micro-ops: the pipeline's
        return dataclasses.replace(alu(AluOp.REQ, a, b, imm=None), imm=req_imm(3, -128, 127))
    op = int(rng.choice([AluOp.ADD, AluOp.MAX, AluOp.MIN]))
    return alu(op, a, b, imm=None if rng.integers(0, 2) else int(rng.integers(-50, 50)))


def random_engine_program(cfg, seed):
    """A random compute stream over entries [0, 32) and [HALF, HALF + 32) (both banks):
    GEMMs, one-micro-op REQ nests (tensor or immediate, clearing or not, every lower bound;
    spans up to 31 entries), one-micro-op ALU resets, REQs of several micro-ops and ALU ops,
    then a STORE of the whole OUT view.  Returns ``(dram, insn_addr, insn_count)``."""
    rng = np.random.default_rng(seed)
    lanes = cfg.BATCH * cfg.BLOCK_OUT
    img = Image(cfg)
    acc_lo = img.put(acc_bytes(cfg, rng.integers(-3000, 3000, (32, lanes))))
    acc_hi = img.put(acc_bytes(cfg, rng.integers(-3000, 3000, (32, lanes))))
    x = img.put(rng.integers(-128, 128, (16, cfg.BATCH, cfg.BLOCK_IN)).astype(np.int8))
    w = img.put(rng.integers(-128, 128, (4, cfg.BLOCK_OUT, cfg.BLOCK_IN)).astype(np.int8))
    out = img.zeros(cfg.ACC_DEPTH * cfg.elem_bytes(MemType.OUT))
    uops: list = []
    body = [_random_insn(rng, uops) for _ in range(int(rng.integers(4, 14)))]
    body[-1] = dataclasses.replace(body[-1], push_next=1)
    u = np.array(uops)
    ua = img.uops(u[:, 0], u[:, 1], u[:, 2])
    L = MemType
    insns = [ld(L.INP, 0, img.base(x, L.INP), 1, 16),
             ld(L.WGT, 0, img.base(w, L.WGT), 1, 4, push_next=1),
             ld(L.ACC, 0, img.base(acc_lo, L.ACC), 1, 32),
             ld(L.ACC, HALF, img.base(acc_hi, L.ACC), 1, 32),
             ld(L.UOP, 0, img.base(ua, L.UOP), 1, len(uops), pop_prev=1),
             *body,
             st(0, img.base(out, L.OUT), 1, cfg.ACC_DEPTH, pop_prev=1), finish()]
    return img.build(insns)


@pytest.mark.rtl
def test_random_streams_rtl_equals_fsim(models):
    """Seeded random compute streams (the engine takes most REQs and resets): the engine
    core's memory equals fsim's after every one (400 seeds ran clean while building)."""
    rtl = pytest.importorskip("vtaforge.runtime.rtl")
    for seed in range(16):
        dram, ia, n = random_engine_program(ENG_CFG, seed)
        ref = dram.copy()
        simulate(ENG_CFG, ref, ia, n)
        rtl.run_raw(ENG_CFG, dram, ia, n, progress=False, model=models(ENG_CFG))
        assert_same_dram(ref, dram, f"seed {seed}")
