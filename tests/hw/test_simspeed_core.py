"""Exactness of the rewrites made for simulation speed (issue 9 item 3, bench/rtl_speed.py):
the offset-binary dot-product tree, the clip with one sign-extended 8-bit signal and the
build's unsigned rewrite of masked signed multiplies in Verilator's C++.  The loader's
indexed beat registers (a beat memory instead of a shift register) are covered by the
cores whose elements span more than two bus beats (pynq's WGT and ACC, the narrow-bus
configs of tests/hw/test_core_configs.py) against fsim."""

from __future__ import annotations

import random
import re
from pathlib import Path

import numpy as np
import pytest
from amaranth.hdl import Module, Signal, signed
from amaranth.sim import Simulator

from vtaforge.hw.config import VTAConfig
from vtaforge.hw.core.compute import _offset_sum, req_clip
from vtaforge.runtime.rtl.build import _MULS_MASKED, _patch_masked_muls


def _run(m, bench):
    sim = Simulator(m)
    sim.add_testbench(bench)
    sim.run()


@pytest.mark.parametrize("widths", [[16] * 16, [16] * 4, [16] * 5, [16] * 3, [16, 16, 16,
                                    16, 16, 16, 16], [8, 16, 12], [16]])
def test_offset_sum_is_the_signed_sum(widths):
    rng = random.Random(len(widths) * 100 + sum(widths))
    ins = [Signal(signed(w), name=f"t{k}") for k, w in enumerate(widths)]
    out = Signal(signed(48))
    m = Module()
    tree = _offset_sum(ins)
    m.d.comb += out.eq(tree)
    if len(set(widths)) == 1:
        n = len(widths)
        assert len(tree) == widths[0] + (n - 1).bit_length()

    async def bench(ctx):
        corners = [[-(1 << (w - 1)) for w in widths], [(1 << (w - 1)) - 1 for w in widths]]
        for vals in corners + [[rng.randint(-(1 << (w - 1)), (1 << (w - 1)) - 1)
                                for w in widths] for _ in range(300)]:
            for s, v in zip(ins, vals):
                ctx.set(s, v)
            assert ctx.get(out) == sum(vals), vals

    _run(m, bench)


def test_req_clip_signal_form_matches_expression():
    cfg = VTAConfig.from_dict({"TARGET": "pynq", "ALU_REQUANT": True})
    w = cfg.ACC_WIDTH
    x = Signal(signed(w))
    imm = Signal(16)
    a, b = Signal(w), Signal(w)
    m = Module()
    m.d.comb += [a.eq(req_clip(cfg, x, imm)), b.eq(req_clip(cfg, x, imm, m, "clip"))]
    rng = random.Random(5)
    imms = [(hi << 8) | lo for hi in (0, 127, 255, 128, 7, 250) for lo in (0x00, 0x40, 0x80)]

    async def bench(ctx):
        for im in imms:
            ctx.set(imm, im)
            for v in [0, -1, 127, 128, -128, -129, -8, -9, 1 << 30, -(1 << 31)] + [
                    rng.randint(-(1 << 31), (1 << 31) - 1) for _ in range(40)]:
                ctx.set(x, v)
                assert ctx.get(a) == ctx.get(b), (im, v)

    _run(m, bench)


def test_masked_signed_multiply_is_the_unsigned_product():
    # the argument of _patch_masked_muls: the low n bits of a product depend only on the
    # low n bits of the operands
    rng = np.random.default_rng(0)
    n = 33
    mask = (1 << n) - 1
    for _ in range(2000):
        a = int(rng.integers(-(1 << 24), 1 << 24))
        b = int(rng.integers(-128, 128))
        signed_prod = (a * b) & mask
        unsigned = ((a & mask) * (b & mask)) & ((1 << 64) - 1) & mask
        assert signed_prod == unsigned


def test_patch_masked_muls_rewrites_only_masked_ones(tmp_path: Path):
    src = ("#include \"Vvta_core__pch.h\"\n\nvoid f() {\n"
           "    x = (0x00000001ffffffffULL & VL_MULS_QQQ(33, a, b));\n"
           "    y = (0x03ffffffU & VL_MULS_III(26, c, d));\n"
           "    z = (0x0000ffffU & VL_MULS_III(26, c, d));\n"
           "    w = VL_MULS_QQQ(40, a, b);\n"
           "    v = (0x00000001ffffffffULL & VL_MULS_QQQ(33, a, b) >> 1);\n}\n")
    f = tmp_path / "Vvta_core___024root__1.cpp"
    f.write_text(src)
    assert _patch_masked_muls(tmp_path) == 2
    # the mask applies to more than the call: kept
    assert "(0x00000001ffffffffULL & VL_MULS_QQQ(33, a, b) >> 1)" in f.read_text()
    out = f.read_text()
    assert "vh_mul_qqq(33, a, b)" in out and "vh_mul_iii(26, c, d)" in out
    assert "(0x0000ffffU & VL_MULS_III(26, c, d))" in out      # mask narrower: kept
    assert "w = VL_MULS_QQQ(40, a, b)" in out                  # unmasked: kept
    assert out.index("vh_mul_iii(int") > out.index("#include")
    assert _MULS_MASKED.search("(0x1ffffffffULL & VL_MULS_QQQ(33,")
    assert re.search(r"static inline QData vh_mul_qqq", out)
