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

from programs import Image, acc_bytes, alu, finish, ld, read_out, st  # tests/support

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
        for lo in (-128, 0):
            for hi in range(lo, 128, 7):
                imm = req_imm(shift, lo, hi)
                assert -32768 <= imm <= 32767
                assert req_fields(imm) == (shift, lo, hi, True)
                seen.add(imm)
                triples += 1
    assert len(seen) == triples     # distinct triples give distinct immediates


@pytest.mark.parametrize("args,msg", [((32, 0, 127), "shift 32"), ((-33, 0, 127), "shift -33"),
                                      ((3, -5, 127), "lower bound -5"),
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
    (REQ_CFG, AluOp.REQ, req_imm(3, 0, 127) | 0x80, "bit 7 is reserved"),
    (REQ_CFG, 6, 0, "unknown ALU opcode 6"),
])
def test_verifier_refuses_bad_req(cfg, op, imm, msg):
    dram, ia, n = _one_alu(cfg, op, imm)
    with pytest.raises(ProgramError, match=msg):
        simulate(cfg, dram, ia, n)
