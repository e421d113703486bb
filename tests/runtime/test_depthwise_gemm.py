"""The depthwise GEMM (``DEPTHWISE_TAPS``, docs/isa.md "Depthwise GEMM") on fsim against a
numpy oracle written here: ``acc[dst][b][o] += sum_t inp[src + t][b][o] * wgt[w][o][t]`` for
every iteration of the loop nest and micro-op, in order, wrapping at ACC_WIDTH; its bounds
fault on the last tap; the ISA refuses the flag on a config without the option."""

from __future__ import annotations

import numpy as np
import pytest

from programs import Image, MemType, finish, gemm, ld, read_out, st, wrap
from vtaforge.hw.config import ConfigError, preset
from vtaforge.hw.isa import ISAError, Insn, Opcode, decode_program, encode_insn, \
    encode_program, encode_uops, format_insn
from vtaforge.runtime.device import ProgramError
from vtaforge.runtime.fsim import simulate

UOP, INP, WGT, ACC, OUT = MemType.UOP, MemType.INP, MemType.WGT, MemType.ACC, MemType.OUT


def dw_cfg(name="tiny", taps=3):
    if name == "tiny-batch2":
        return preset("tiny").replace(LOG_BATCH=1, DEPTHWISE_TAPS=taps)
    return preset(name).replace(DEPTHWISE_TAPS=taps)


def oracle(cfg, acc, x, w, uops, I, J, f, reset=False):
    """Sequential semantics of one depthwise GEMM nest (object ints, wrapped per micro-op)."""
    T = cfg.DEPTHWISE_TAPS
    acc = acc.astype(object).copy()
    for i in range(I):
        for j in range(J):
            for d0, s0, w0 in uops:
                d = d0 + i * f[0] + j * f[1]
                s = s0 + i * f[2] + j * f[3]
                k = w0 + i * f[4] + j * f[5]
                if reset:
                    acc[d] = 0
                    continue
                p = sum(x[s + t].astype(object) * w[k][:, t].astype(object) for t in range(T))
                acc[d] = wrap(acc[d] + p, cfg.ACC_WIDTH)
    return acc


def run_dw(cfg, acc0, x, w, uops, I, J, f, n_out):
    """LOAD ACC/INP/WGT/UOP, one depthwise GEMM nest, STORE ``n_out`` OUT entries; returns
    the OUT values and the run's result."""
    im = Image(cfg)
    aa = im.put(acc0.astype("<i4"))
    ax = im.put(x.astype("<i1"))
    aw = im.put(w.astype("<i1"))
    ao = im.zeros(n_out * cfg.elem_bytes(OUT))
    d, s, k = (np.array([u[c] for u in uops]) for c in range(3))
    u = im.put(encode_uops(cfg, d, s, k).astype("<u4"))
    insns = [ld(INP, 0, im.base(ax, INP), 1, x.shape[0]),
             ld(WGT, 0, im.base(aw, WGT), 1, w.shape[0], push_next=1),
             ld(UOP, 0, im.base(u, UOP), 1, len(uops)),
             ld(ACC, 0, im.base(aa, ACC), 1, acc0.shape[0]),
             gemm(0, len(uops), I, J, d=f[0:2], s=f[2:4], w=f[4:6], pop_prev=1,
                  push_next=1, depthwise=1),
             st(0, im.base(ao, OUT), 1, n_out, pop_prev=1, push_prev=1), finish(pop_next=1)]
    dram, ia, n = im.build(insns)
    res = simulate(cfg, dram, ia, n)
    return read_out(cfg, dram, ao, n_out), res


@pytest.mark.parametrize("name,taps,seed", [("tiny", 3, 0), ("tiny", 4, 1), ("pynq-fast", 3, 2),
                                            ("pynq", 5, 3), ("tiny-batch2", 3, 4)])
def test_depthwise_nest_matches_oracle(name, taps, seed):
    """Random nests: repeated destinations (taps of one output from several micro-ops),
    loop factors on every index, full-range int8 operands."""
    cfg = dw_cfg(name, taps)
    rng = np.random.default_rng(seed)
    B, BO = cfg.BATCH, cfg.BLOCK_OUT
    n_acc, n_inp, n_wgt = 24, 40, 6
    x = rng.integers(-128, 128, (n_inp, B, BO))
    x[0] = -128
    w = rng.integers(-128, 128, (n_wgt, BO, BO))
    w[0] = -128
    acc0 = rng.integers(-2**20, 2**20, (n_acc, B, BO))
    I, J = 2, 3
    f = (8, 2, 9, 3, 1, 0)          # dst, src, wgt (factor_out, factor_in)
    uops = [(int(rng.integers(0, 4)), int(rng.integers(0, n_inp - 9 - 6 - taps)),
             int(rng.integers(0, n_wgt - 1))) for _ in range(5)]
    got, res = run_dw(cfg, acc0, x, w, uops, I, J, f, n_acc)
    want = oracle(cfg, acc0, x, w, uops, I, J, f)
    np.testing.assert_array_equal(got, wrap(want, cfg.OUT_WIDTH))
    assert res.stats["gemm_counter"] == I * J * len(uops)


def test_depthwise_wraps_at_acc_width():
    cfg = dw_cfg("tiny", 4)
    B, BO = cfg.BATCH, cfg.BLOCK_OUT
    x = np.full((4, B, BO), -128)
    w = np.full((1, BO, BO), -128)
    acc0 = np.full((1, B, BO), 2**31 - 2**15)
    uops = [(0, 0, 0)] * 3
    got, _ = run_dw(cfg, acc0, x, w, uops, 1, 1, (0,) * 6, 1)
    np.testing.assert_array_equal(got, wrap(oracle(cfg, acc0, x, w, uops, 1, 1, (0,) * 6),
                                            cfg.OUT_WIDTH))


def test_depthwise_last_tap_out_of_range_faults():
    """The last tap ``src + T - 1`` is the index checked: src = depth - T reads, depth - T + 1
    faults and the message names the tap index."""
    cfg = dw_cfg("tiny", 3)
    depth = cfg.INP_DEPTH
    B, BO = cfg.BATCH, cfg.BLOCK_OUT
    x = np.zeros((depth, B, BO))
    w = np.zeros((1, BO, BO))
    acc0 = np.zeros((1, B, BO))
    run_dw(cfg, acc0, x, w, [(0, depth - 3, 0)], 1, 1, (0,) * 6, 1)
    with pytest.raises(ProgramError, match=f"src index {depth} is outside the INP"):
        run_dw(cfg, acc0, x, w, [(0, depth - 2, 0)], 1, 1, (0,) * 6, 1)


def test_depthwise_flag_needs_the_option():
    g = Insn(Opcode.GEMM, uop_end=1, iter_out=1, iter_in=1, depthwise=1)
    with pytest.raises(ISAError, match="DEPTHWISE_TAPS"):
        encode_insn(preset("tiny"), g)
    with pytest.raises(ISAError, match="instruction 1: a depthwise GEMM"):
        encode_program(preset("tiny"), [Insn(Opcode.FINISH), g])
    cfg = dw_cfg()
    got = decode_program(cfg, encode_program(cfg, [g, Insn(Opcode.GEMM, uop_end=1)]))
    assert list(got["depthwise"]) == [1, 0]
    assert "GEMM DW" in format_insn(g)


@pytest.mark.parametrize("kw,msg", [
    ({"DEPTHWISE_TAPS": 1}, "DEPTHWISE_TAPS = 1 is out of range"),
    ({"DEPTHWISE_TAPS": 5}, "at most BLOCK_IN"),            # tiny: BLOCK_IN 4
    ({"DEPTHWISE_TAPS": 3, "LOG_INP_WIDTH": 4}, "int8 activations"),
    ({"DEPTHWISE_TAPS": 3, "LOG_BLOCK_OUT": 3}, "BLOCK_IN == BLOCK_OUT"),
])
def test_config_refuses_bad_taps(kw, msg):
    with pytest.raises(ConfigError, match=msg):
        preset("tiny").replace(**kw)


def test_off_is_the_config_without_the_key():
    base = preset("pynq")
    assert base.replace(DEPTHWISE_TAPS=0).fingerprint == base.fingerprint
    on = base.replace(DEPTHWISE_TAPS=3)
    assert on.fingerprint != base.fingerprint and on.bitstream_name.endswith("_dw3")


@pytest.mark.parametrize("dw", [0, 1])
def test_race_check_sees_every_tap(dw):
    """INP entry 2 is loaded after the token the GEMM waits for: a depthwise GEMM at src 0
    (taps 0, 1, 2) races with that load, an ordinary one (entry 0 only) does not."""
    from vtaforge.runtime.race import RaceError, race_check

    cfg = dw_cfg("tiny", 3)
    B, BO = cfg.BATCH, cfg.BLOCK_OUT
    im = Image(cfg)
    ax = im.put(np.zeros((3, B, BO), "<i1"))
    aw = im.put(np.zeros((1, BO, BO), "<i1"))
    ao = im.zeros(cfg.elem_bytes(OUT))
    u = im.put(encode_uops(cfg, [0], [0], [0]).astype("<u4"))
    insns = [ld(INP, 0, im.base(ax, INP), 1, 2), ld(WGT, 0, im.base(aw, WGT), 1, 1, push_next=1),
             ld(INP, 2, im.base(ax, INP) + 2, 1, 1),
             ld(UOP, 0, im.base(u, UOP), 1, 1),
             gemm(0, 1, 1, 1, reset=1),
             gemm(0, 1, 1, 1, pop_prev=1, push_next=1, depthwise=dw),
             st(0, im.base(ao, OUT), 1, 1, pop_prev=1, push_prev=1), finish(pop_next=1)]
    dram, ia, n = im.build(insns)
    if dw:
        with pytest.raises(RaceError, match="INP"):
            race_check(cfg, dram, ia, n)
    else:
        race_check(cfg, dram, ia, n)
