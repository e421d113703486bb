"""Resource evaluators of one design point (docs/dse.md "Resource model"): block RAM from the
core's memory inventory (:func:`memory_map`, :func:`bram36_for_memory`), DSPs from the
MAC count and packing, LUT/FF from a calibrated linear model
(:class:`AnalyticResources`), or Yosys counts (:class:`YosysResources`)."""

from __future__ import annotations

import math
from typing import Any, Mapping, Sequence

from ..hw.config import VTAConfig
from ..hw.estimate import EstimateError, part_info


from .result import DSEError, Result, _fp
from .workloads import DseWorkload

__all__ = [
    "BRAM_SHAPES", "LUTRAM_MAX_DEPTH", "bram36_for_memory", "memory_map",
    "LUT_FF_CALIBRATION", "LUT_FF_TERMS", "LUT_COEFFS", "FF_COEFFS", "lut_ff_features",
    "ALU_REQUANT_LUT_PER_LANE", "ALU_REQUANT_FF", "width_terms",
    "REQ_ENGINE_LUT", "REQ_ENGINE_LUT_PER_LANE", "REQ_ENGINE_FF", "REQ_ENGINE_DSP",
    "req_engine_terms", "ALU_FORWARD_LUT", "ALU_FORWARD_FF", "REQ_LANE_SHIFT_LUT",
    "REQ_LANE_SHIFT_FF", "DMA_OUTSTANDING_LUT",
    "DMA_OUTSTANDING_FF", "LOAD_AHEAD_LUT", "LOAD_AHEAD_FF", "DEPTHWISE_LUT",
    "DEPTHWISE_LUT_PER_PRODUCT", "DEPTHWISE_FF",
    "DEPTHWISE_FF_PER_PRODUCT", "depthwise_terms",
    "DSP_MIN_PRODUCT_BITS", "SOFT_MUL4X4_LUTS", "soft_products", "gemm_dsp",
    "LUTS_PER_LUT_MULTIPLIER", "ALU_MUL_DSP_PER_LANE",
    "AnalyticResources", "YosysResources", "resource_record", "resources_fit",
]


# =============================================================================== resources
#: Block-RAM aspect ratios in simple dual-port mode (UG473): (depth, width, RAMB36 equiv.).
BRAM_SHAPES: tuple[tuple[int, int, float], ...] = (
    # RAMB36E1
    (32768, 1, 1.0), (16384, 2, 1.0), (8192, 4, 1.0), (4096, 9, 1.0), (2048, 18, 1.0),
    (1024, 36, 1.0), (512, 72, 1.0),
    # RAMB18E1
    (16384, 1, 0.5), (8192, 2, 0.5), (4096, 4, 0.5), (2048, 9, 0.5), (1024, 18, 0.5),
    (512, 36, 0.5),
)


#: Memories at most this deep are assumed to map to LUT RAM / flip-flops, not block RAM
#: (heuristic; e.g. fetch's 8-entry buffer).  Not exercised by the two calibration points.
LUTRAM_MAX_DEPTH = 64


def bram36_for_memory(depth: int, width: int) -> float:
    """RAMB36 equivalents of a ``depth × width``-bit 1-write/1-read memory.

    Rule (derived from hardware-notes.md "Scratchpads", the Yosys mapping of the pynq
    core): Yosys tiles the memory with one block-RAM aspect ratio of :data:`BRAM_SHAPES`
    and picks the cheapest, ``ceil(depth / d) × ceil(width / w) × size``; ties go to
    RAMB36.  It reproduces every row of that table: 1024×2048 → 57 RAMB36 (1K×36);
    2048×512 → 57 RAMB18 = 28.5 (2K×9); 2048×128 → 15 RAMB18 = 7.5; 8192×32 → 8 RAMB36
    (8K×4).  Memories at most :data:`LUTRAM_MAX_DEPTH` deep cost 0 (LUT RAM).
    """
    if depth <= LUTRAM_MAX_DEPTH:
        return 0.0
    return min(math.ceil(depth / d) * math.ceil(width / w) * s for d, w, s in BRAM_SHAPES)


def memory_map(cfg: VTAConfig) -> list[dict]:
    """The core's block-RAM candidates: ``name``, ``depth``, ``width`` (bits), ``bram36``.

    The core's inventory (:meth:`VTAConfig.memories`, what hw/core instantiates): the UOP,
    INP, WGT, ACC and OUT scratchpads and three command queues of INSN_QUEUE_DEPTH × 128
    bits (``SyncFIFOBuffered``: one entry is a register, the memory holds depth − 1).
    With ``REQ_ENGINE`` the ACC and OUT scratchpads are two half-depth banks each
    (hw/core/scratchpad.py ``BankedScratchpad``: ``acc.bank0``, ``acc.bank1``, ...), each
    mapped on its own (the Yosys points of tests/dse/data/yosys_points.json confirm the
    extra BRAM36; docs/dse.md "Resource model").  With ``DEPTHWISE_TAPS`` T the INP
    scratchpad is P banks of ``depth / P`` entries (P the least power of two >= T,
    hw/core/scratchpad.py ``TapScratchpad``: ``inp.bank0`` ...).
    """
    out = []
    for mem in cfg.memories():      # the core's own inventory (hw/config.py)
        d = max(mem.depth - 1, 0) if mem.kind == "fifo" else mem.depth
        if cfg.DEPTHWISE_TAPS and mem.name == "inp":
            nb = 1 << (cfg.DEPTHWISE_TAPS - 1).bit_length()
            for b in range(nb):
                out.append({"name": f"inp.bank{b}", "depth": d // nb, "width": mem.width,
                            "bram36": bram36_for_memory(d // nb, mem.width)})
            continue
        if cfg.REQ_ENGINE and mem.name in ("acc", "out"):
            for b in (0, 1):
                out.append({"name": f"{mem.name}.bank{b}", "depth": d // 2, "width": mem.width,
                            "bram36": bram36_for_memory(d // 2, mem.width)})
            continue
        out.append({"name": mem.name, "depth": d, "width": mem.width,
                    "bram36": bram36_for_memory(d, mem.width)})
    return out


#: Terms of the LUT/FF model, in the order of :data:`LUT_COEFFS` / :data:`FF_COEFFS`
#: (:func:`lut_ff_features`): a constant (control, fetch, the queues' logic), the GEMM
#: multipliers (their adder trees), the GEMM DSP slices (per-slice glue: with packing 2 one
#: slice serves two products), the ALU lanes (BATCH × BLOCK_OUT: per-lane control and the
#: OUT path), the lane bits (lanes × ACC_WIDTH: the ALU datapath and the accumulator
#: ports), the input element bits (BATCH × BLOCK_IN × INP_WIDTH: the input operand path)
#: and the AXI data width.
LUT_FF_TERMS = ("1", "macs", "gemm_dsp", "lanes", "lane_bits", "inp_bits", "bus_bits")


#: Least-squares fit (on the relative error) of the terms to the Yosys points of
#: tests/dse/data/yosys_points.json marked ``fit`` (``bench/dse_resource_fit.py fit``;
#: docs/dse.md "Resource model" has the error per point, fit and held out).
LUT_COEFFS = (2390.99, 58.09, -28.63, -218.87, 22.79, -1.68, 9.56)


FF_COEFFS = (2565.01, 42.55, -33.99, -25.63, 6.24, -0.52, -1.71)


#: What the fused requantize (``ALU_REQUANT``) adds: LUTs per ALU lane (BATCH × BLOCK_OUT:
#: the shifter's input muxes and the 8-bit clip of hw/core/compute.py) and FFs in all (the
#: immediate and opcode carried to stage D).  Fitted through the origin on the Yosys
#: differences of tests/dse/data/yosys_points.json's ``option`` points against their bases
#: (a 4-lane and a 16-lane core; the differences are in docs/dse.md "Resource model").
ALU_REQUANT_LUT_PER_LANE = 146.0
ALU_REQUANT_FF = 13.0


#: What the requantize engine (``REQ_ENGINE``, hw/core/compute.py ``_req_engine``) adds
#: beside ``ALU_REQUANT``: per ALU lane its own adder, shifter and 8-bit clip, its stage-C
#: operand mux, and the bank muxes on the accumulator (two write and two read ports over two
#: half-depth banks) and on the OUT view; once, the range comparators, loop counters and
#: latched fields.  LUT: a line through the two ``option`` points' Yosys differences
#: against their ALU_REQUANT bases (tests/dse/data/yosys_points.json: a 4-lane and a
#: 16-lane core), solved for a per-lane and a constant term.  FF: structural per lane, the
#: two ACC_WIDTH-bit registers per lane (``ee_src_reg``, ``ee_shifted``), and a constant:
#: the mean of what the same differences leave after those registers.
REQ_ENGINE_LUT = 627.0
REQ_ENGINE_LUT_PER_LANE = 435.7
REQ_ENGINE_FF = 237.0
#: DSP48s of ``REQ_ENGINE``: the four loop-bound products of EPREP (``ee_d_last``,
#: ``ee_s_last``: (iter - 1) x factor, wider than :data:`DSP_MIN_PRODUCT_BITS`), one slice
#: each, whatever the lanes (the same on the 4-lane and the 16-lane Yosys point).
REQ_ENGINE_DSP = 4


#: What ALU result forwarding (``ALU_FORWARD``, hw/core/compute.py ``fwd``) adds: two
#: operand multiplexers per ALU lane, two index comparators, three stage-C registers.  The
#: Yosys differences of the two ``option`` points against their ALU_REQUANT + REQ_ENGINE
#: bases (tests/dse/data/yosys_points.json ``tiny_alu_forward``, ``pynq_alu_forward``) are
#: +332 and -129 LUT (4 and 16 lanes: inside Yosys's run-to-run spread for a change this
#: small, so no per-lane term is fitted) and +36 / +38 FF: the LUT term is their mean, the
#: FF term theirs.  No DSP or BRAM.
ALU_FORWARD_LUT = 102.0
ALU_FORWARD_FF = 37.0


#: What per-lane REQ shifts (``REQ_LANE_SHIFT``, hw/core/compute.py ``_req_lane_operands``)
#: add: per ALU lane, in the main ALU and in the REQ engine's C stage, a 2:1 multiplexer on
#: the adder's operand (``b >> 6`` or ``b``, which Yosys packs into the adder's own LUTs)
#: and a 6-bit one on the shift amount; once, a 6-bit comparator on the immediate; no
#: register.  The Yosys differences of the three ``option`` points against their bases
#: synthesized from the same RTL (tests/dse/data/yosys_points.json ``tiny_lane``,
#: ``tiny_lane_engine``, ``pynq_fast_lane`` against ``tiny_lane_off``,
#: ``tiny_lane_engine_off`` and ``pynq_fast_dw3``, the pynq-fast preset, which synthesizes
#: to the same counts from this RTL; 4, 4 + 4 and 16 + 16 lanes; bench/dse_resource_fit.py
#: record, 2026-12-08) are -214 / +30 / -234 LUT, inside what Yosys moves between
#: near-identical netlists (the compute unit alone: -46 without the engine, +45 with it;
#: one ``AluLane`` alone: -11), and 0 / 0 / 0 FF: no term for either.  No DSP or BRAM.
REQ_LANE_SHIFT_LUT = 0.0
REQ_LANE_SHIFT_FF = 0.0


#: What outstanding DMA reads (``DMA_OUTSTANDING`` > 1: each tensor loader's
#: row-descriptor queue and the read side's in-flight bookkeeping, hw/core/load.py and
#: hw/core/axi.py) add.  The Yosys differences of the ``option`` points against their
#: ALU_REQUANT + REQ_ENGINE + ALU_FORWARD bases (tests/dse/data/yosys_points.json
#: ``tiny_dma2``, ``tiny_dma4``, ``pynq_dma4`` against ``tiny_alu_forward``,
#: ``pynq_alu_forward``; bench/dse_resource_fit.py record, 2026-12-07) are +12 / -16 / +93
#: LUT (inside Yosys's run-to-run spread: no depth or lane term is fitted) and +208 / +211
#: / +209 FF (the same at depth 2 and 4, on 4 and 16 lanes): the LUT term is their mean,
#: the FF term theirs.  No DSP or BRAM.
DMA_OUTSTANDING_LUT = 30.0
DMA_OUTSTANDING_FF = 209.0


#: What the load unit's look-ahead (``LOAD_AHEAD``, hw/core/load.py: the loader's second
#: set of LOAD fields and the queued LOAD's request row length, the unit's two-entry
#: push-flag queue and LOAD count) adds.  The Yosys differences of the two ``option``
#: points against the same cores without it (tests/dse/data/yosys_points.json
#: ``tiny_ahead``, ``pynq_fast_ahead`` against ``tiny_dma4``, ``pynq_fast_lane``, the
#: pynq-fast preset; bench/dse_resource_fit.py record, 2026-12-08) are +141 / +160 LUT and
#: +116 / +108 FF; the load unit synthesized alone (bench/dse_resource_fit.py
#: ``synth_unit``) +149 / +143 LUT and +116 / +108 FF, so the difference is the load
#: unit's and does not grow with the lanes: the terms are the two points' means.  No DSP
#: or BRAM.
LOAD_AHEAD_LUT = 150.5
LOAD_AHEAD_FF = 112.0


#: What the depthwise GEMM (``DEPTHWISE_TAPS`` T, hw/core/compute.py
#: ``_depthwise_products``, hw/core/scratchpad.py ``TapScratchpad``) adds: per depthwise
#: product (BATCH × BLOCK_OUT × T) its operand wiring, its share of the T-input adder tree and
#: of the stage-D multiplexer against the array's sum; once, the index adder of the fault
#: check and the flag's pipeline bits; and the tap scratchpad's bank address adders and
#: output rotation (INP element bits × T).  LUT and FF: a line through the two ``option``
#: points' Yosys differences (tests/dse/data/yosys_points.json ``tiny_dw3``, ``pynq_dw3``
#: against ``tiny_dma4``, ``pynq_dma4``; 12 and 48 products: +633 and +1190 LUT), solved
#: for a per-product and a constant term.  FF: +36 and +4 (Yosys puts the product registers
#: into the DSP48s' M/P registers), no per-product term: their mean.  DSP: one DSP48 per
#: product (a 16-bit product, wider than :data:`DSP_MIN_PRODUCT_BITS`; LUT-built with the
#: whole array, ``LUT_MULTIPLIERS`` = MACs, then :data:`LUTS_PER_LUT_MULTIPLIER` each), less
#: one per batch row where the array's product ``(b, 0, 0)`` is an unpacked DSP: lane 0's
#: tap 0 multiplies the same operands (``inp[src][b][0] × wgt[0][0]``) and Yosys merges the
#: two multipliers (tiny: +11 DSP for 12 products; pynq, packed: +48 for 48).  BRAM:
#: :func:`memory_map` (the banks: +1 RAMB36 on tiny, +0.5 on pynq, as measured).
DEPTHWISE_LUT = 447.3
DEPTHWISE_LUT_PER_PRODUCT = 15.47
DEPTHWISE_FF = 20.0
DEPTHWISE_FF_PER_PRODUCT = 0.0


def depthwise_terms(cfg: VTAConfig) -> tuple[float, float, int]:
    """``(LUT, FF, DSP)`` that ``DEPTHWISE_TAPS`` adds to the same config without it
    (:data:`DEPTHWISE_LUT`, :data:`DEPTHWISE_LUT_PER_PRODUCT`, :data:`DEPTHWISE_FF`,
    :data:`DEPTHWISE_FF_PER_PRODUCT`; products = BATCH × BLOCK_OUT × DEPTHWISE_TAPS, one
    DSP48 each unless the whole array is LUT-built, less those Yosys merges with the
    array's: :data:`DEPTHWISE_LUT`); all 0 without the option.  Its BRAM is in
    :func:`memory_map` (the INP banks)."""
    if not cfg.DEPTHWISE_TAPS:
        return 0.0, 0.0, 0
    n = cfg.BATCH * cfg.BLOCK_OUT * cfg.DEPTHWISE_TAPS
    lut_built = cfg.LUT_MULTIPLIERS == cfg.macs_per_cycle
    # the array's product (b, 0, 0) is multiplier b·BLOCK_IN·BLOCK_OUT (hw/core/compute.py
    # _gemm_products: b, i, o order); an unpacked $mul there is the same as lane 0's tap 0
    per_b = cfg.BLOCK_IN * cfg.BLOCK_OUT
    merged = sum(1 for b in range(cfg.BATCH) if b * per_b >= cfg.LUT_MULTIPLIERS
                 and not (cfg.packs_dsp_pairs and cfg.BLOCK_OUT > 1))
    return (DEPTHWISE_LUT + DEPTHWISE_LUT_PER_PRODUCT * n
            + (LUTS_PER_LUT_MULTIPLIER * n if lut_built else 0.0),
            DEPTHWISE_FF + DEPTHWISE_FF_PER_PRODUCT * n, 0 if lut_built else n - merged)


#: Yosys ``synth_xilinx`` maps a multiply to a DSP48 only when its product is at least this
#: many bits wide (``mul2dsp`` ``-D DSP_Y_MINWIDTH=9``: "small multiplies are those 4x4 and
#: smaller", UG901); narrower products are built from LUTs.  Of the core's widths only an
#: unpacked int4 × int4 product (8 bits) is narrower: the Yosys point ``1x16x8_a4w4_p1``
#: (tests/dse/data/yosys_points.json) has no DSP48 at all.
DSP_MIN_PRODUCT_BITS = 9


#: LUTs of one registered int4 × int4 signed product built from LUTs: Yosys (the same
#: ``synth_xilinx -family xc7`` flow) on a module holding one such product alone
#: (docs/dse.md "Resource model").
SOFT_MUL4X4_LUTS = 26


def _adder_tree_bits(n: int, width: int) -> int:
    """Bits of the adders that sum ``n`` ``width``-bit terms pairwise as hw/core/compute.py
    does (each level adds neighbours; a sum is one bit wider than its wider operand; an
    odd term moves up unchanged)."""
    terms, bits = [width] * n, 0
    while len(terms) > 1:
        nxt = [max(terms[t], terms[t + 1]) + 1 for t in range(0, len(terms) - 1, 2)]
        bits += sum(nxt)
        terms = nxt + ([terms[-1]] if len(terms) % 2 else [])
    return bits


def soft_products(cfg: VTAConfig) -> bool:
    """Whether Yosys builds the GEMM products from LUTs instead of DSP48s: unpacked products
    (``packs_dsp_pairs`` false) narrower than :data:`DSP_MIN_PRODUCT_BITS` (int4 × int4
    with ``DSP_PACKING = 1``).  A packed pair is one 25 × INP_WIDTH product: always a DSP."""
    return not cfg.packs_dsp_pairs and cfg.INP_WIDTH + cfg.WGT_WIDTH < DSP_MIN_PRODUCT_BITS


def _loader_shreg_bits(cfg: VTAConfig, inp_width: int, wgt_width: int) -> int:
    """Flip-flops of the INP and WGT loaders' beat-assembly registers with ``inp_width`` /
    ``wgt_width``-bit operands (hw/core/load.py: an element wider than the bus is gathered
    from ``elem_bits / BUS_WIDTH`` beats in an ``elem_bits − BUS_WIDTH``-bit shift register;
    narrower elements need none)."""
    inp = cfg.BATCH * cfg.BLOCK_IN * inp_width
    wgt = cfg.BLOCK_OUT * cfg.BLOCK_IN * wgt_width
    return max(0, inp - cfg.BUS_WIDTH) + max(0, wgt - cfg.BUS_WIDTH)


def width_terms(cfg: VTAConfig) -> tuple[int, int]:
    """``(LUT, FF)`` that ``cfg``'s operand widths add to the same config with int8
    operands (the fitted terms of :data:`LUT_FF_TERMS` were measured on int8 cores; both
    are 0 for ``INP_WIDTH = WGT_WIDTH = 8`` and negative for narrower operands).

    Not fitted, counted from the RTL's structure (hw/core/compute.py, hw/core/load.py) and
    checked unit by unit (``bench/dse_resource_fit.py units``: Yosys on one unit alone):

    * Loaders (LUT and FF alike): an INP or WGT element wider than the bus is gathered in
      an ``elem_bits − BUS_WIDTH``-bit shift register (:func:`_loader_shreg_bits`), one FF
      and one LUT (the zero-padding gate of the assembled word) per bit; minus those of
      the int8 config (checked on the load unit alone: docs/dse.md "Resource model").
    * DSP-packed products (``packs_dsp_pairs``: int8 or int4 operands, ``DSP_PACKING =
      2``) are split in fabric, so their adder trees are fabric adders:
      ``BATCH·BLOCK_OUT·(BLOCK_IN − 1)`` adders whose operands are ``INP_WIDTH +
      WGT_WIDTH``-bit products instead of 16-bit ones, one LUT per bit, the pair's
      high-product fix-up add ``(P >> 16) + P[15]`` as wide, and one FF per product bit
      (the product registers): LUT ``(adders + pairs)·(INP_WIDTH + WGT_WIDTH − 16)``, FF
      ``products·(INP_WIDTH + WGT_WIDTH − 16)`` (checked on the compute unit alone).
    * Unpacked products (int16, or ``DSP_PACKING = 1``) stay in the DSP48 (P register)
      and Yosys folds their adds into the DSP's post-adder: the product width adds no
      LUT there (compute unit, int16 against int8 unpacked: about the same LUTs, the same
      FFs) and no FF.  The final add into the ACC_WIDTH lane does not change.
    * Products built from LUTs (:func:`soft_products`: unpacked int4 × int4) have no DSP to
      hold them or fold their adds: :data:`SOFT_MUL4X4_LUTS` LUTs and ``INP_WIDTH +
      WGT_WIDTH`` FFs (the product register) per product, and the whole adder tree in
      fabric, one LUT per adder bit (:func:`_adder_tree_bits`), per lane.

    Checked on held-out Yosys points (tests/dse/data/yosys_points.json ``*_w16``,
    ``*_w4*``, ``*_a4*``)."""
    extra = cfg.INP_WIDTH + cfg.WGT_WIDTH - 16      # product bits beyond int8's 16
    shreg = _loader_shreg_bits(cfg, cfg.INP_WIDTH, cfg.WGT_WIDTH) - _loader_shreg_bits(cfg, 8, 8)
    lut, ff = shreg, shreg
    if cfg.packs_dsp_pairs:     # packed products: fabric adder trees and registers
        adders = cfg.BATCH * cfg.BLOCK_OUT * (cfg.BLOCK_IN - 1)
        paired = 2 * ((cfg.macs_per_cycle - cfg.LUT_MULTIPLIERS) // 2)
        lut += (adders + paired // 2) * extra
        ff += paired * extra
    elif soft_products(cfg):    # LUT multipliers, their registers and adder trees in fabric
        pw = cfg.INP_WIDTH + cfg.WGT_WIDTH
        soft = cfg.macs_per_cycle - cfg.LUT_MULTIPLIERS
        lut += soft * SOFT_MUL4X4_LUTS + cfg.BATCH * cfg.BLOCK_OUT * _adder_tree_bits(
            cfg.BLOCK_IN, pw)
        ff += soft * pw
    return lut, ff


def req_engine_terms(cfg: VTAConfig) -> tuple[float, float, int]:
    """``(LUT, FF, DSP)`` that ``REQ_ENGINE`` adds to the same config without it
    (:data:`REQ_ENGINE_LUT`, :data:`REQ_ENGINE_LUT_PER_LANE`, :data:`REQ_ENGINE_FF`,
    :data:`REQ_ENGINE_DSP`; lanes = BATCH × BLOCK_OUT, FF 2 × ACC_WIDTH per lane); all 0
    without the engine.  Its BRAM is in :func:`memory_map` (the banks)."""
    if not cfg.REQ_ENGINE:
        return 0.0, 0.0, 0
    lanes = cfg.BATCH * cfg.BLOCK_OUT
    return (REQ_ENGINE_LUT + REQ_ENGINE_LUT_PER_LANE * lanes,
            REQ_ENGINE_FF + 2 * cfg.ACC_WIDTH * lanes, REQ_ENGINE_DSP)


#: Where the LUT/FF constants come from (the cache key of :class:`AnalyticResources`
#: names it: a refit is a new key).
LUT_FF_CALIBRATION = {
    "points": "tests/dse/data/yosys_points.json", "fit": "bench/dse_resource_fit.py",
    "terms": LUT_FF_TERMS, "lut": LUT_COEFFS, "ff": FF_COEFFS, "version": 10,
    "alu_requant": [ALU_REQUANT_LUT_PER_LANE, ALU_REQUANT_FF],
    "req_engine": [REQ_ENGINE_LUT, REQ_ENGINE_LUT_PER_LANE, REQ_ENGINE_FF, REQ_ENGINE_DSP,
                   "acc/out banks"],
    "alu_forward": [ALU_FORWARD_LUT, ALU_FORWARD_FF],
    "req_lane_shift": [REQ_LANE_SHIFT_LUT, REQ_LANE_SHIFT_FF],
    "dma_outstanding": [DMA_OUTSTANDING_LUT, DMA_OUTSTANDING_FF],
    "load_ahead": [LOAD_AHEAD_LUT, LOAD_AHEAD_FF],
    "depthwise": [DEPTHWISE_LUT, DEPTHWISE_LUT_PER_PRODUCT, DEPTHWISE_FF,
                  DEPTHWISE_FF_PER_PRODUCT, "inp banks"],
    "width_terms": "structural (width_terms) v3", "soft_mul4x4": SOFT_MUL4X4_LUTS,
}


def _gemm_slices(cfg: VTAConfig) -> tuple[int, int]:
    """``(slices, packing)`` of the GEMM array as DSP48s: ``ceil((MACs − LUT_MULTIPLIERS) /
    p)``, ``p = 2`` when ``packs_dsp_pairs`` else 1."""
    packing = 2 if cfg.packs_dsp_pairs else 1
    return math.ceil((cfg.macs_per_cycle - cfg.LUT_MULTIPLIERS) / packing), packing


def gemm_dsp(cfg: VTAConfig) -> tuple[int, int]:
    """``(DSP48 slices of the GEMM array, effective packing)``: ``ceil((MACs −
    LUT_MULTIPLIERS) / p)`` with ``p = DSP_PACKING`` when the packing rule holds (int8 or
    int4 activations, int8 or int4 weights, :attr:`VTAConfig.packs_dsp_pairs`), else 1: an
    unpacked 8×8, 8×4, 4×8 or 16×16 product fits one DSP48E1 (25×18), and Yosys maps even
    the 8×4 one to a DSP (measured: tests/dse/data/yosys_points.json ``tiny_w4``,
    ``1x16x8_w4_p1``, ``tiny_a4``); but an unpacked 4×4 product is narrower than
    :data:`DSP_MIN_PRODUCT_BITS` and built from LUTs (:func:`soft_products`): 0 slices."""
    if soft_products(cfg):
        return 0, 1
    return _gemm_slices(cfg)


def lut_ff_features(cfg: VTAConfig) -> tuple[float, ...]:
    """The values of :data:`LUT_FF_TERMS` for ``cfg`` (floats: 1, multipliers, GEMM DSP
    slices, ALU lanes, lane bits, input element bits, bus bits); the LUT/FF estimate is
    their dot product with :data:`LUT_COEFFS` / :data:`FF_COEFFS`.  The slices are the
    array's as DSP48s (:func:`_gemm_slices`) even where Yosys builds the products from
    LUTs: :func:`width_terms` adds what that costs."""
    lanes = cfg.BATCH * cfg.BLOCK_OUT
    return (1.0, float(cfg.macs_per_cycle), float(_gemm_slices(cfg)[0]), float(lanes),
            float(lanes * cfg.ACC_WIDTH), float(cfg.BATCH * cfg.BLOCK_IN * cfg.INP_WIDTH),
            float(cfg.BUS_WIDTH))


#: LUTs of one int8×int8 multiplier built from LUTs: hardware-notes.md, 16×16 GEMM with
#: DSPs disabled ≈ 66,000 LUTs / 256 products.
LUTS_PER_LUT_MULTIPLIER = 66000 / 256


#: DSP48E1 per ALU MUL lane by accumulator width (Yosys splits a 32×32 product into
#: 18×25 tiles; an assumption, not measured here).
ALU_MUL_DSP_PER_LANE = {16: 1, 32: 4}


class AnalyticResources:
    """The analytic resource model (see module docstring and docs/dse.md).

    Result ``resources``: ``lut``, ``ff``, ``dsp`` (ints), ``bram36`` (float),
    ``source = "analytic"``, ``breakdown`` (per-memory BRAM, DSP terms).
    """

    name = "analytic"
    #: Microseconds per point: run in the driver process, never shipped to a worker.
    cheap = True

    def __init__(self, part: str = "xc7z020"):
        try:
            part_info(part)
        except EstimateError as e:
            raise DSEError(str(e)) from None
        self.part = part

    @property
    def key(self) -> dict:
        """The cache key part of this evaluator (model and part)."""
        return {"resources": "analytic", "part": self.part,
                "lut_ff": LUT_FF_CALIBRATION["version"]}

    def resources(self, cfg: VTAConfig) -> dict:
        """Estimated ``{"lut", "ff", "dsp", "bram36", "source", "breakdown"}`` of ``cfg``
        (counts; ``bram36`` in 36 Kb blocks, halves for 18 Kb) from the memory map, the DSP
        rule and the fitted LUT/FF terms (:func:`lut_ff_features`; module docstring)."""
        mems = memory_map(cfg)
        g_dsp, packing = gemm_dsp(cfg)
        lanes = cfg.BATCH * cfg.BLOCK_OUT
        alu_dsp = lanes * ALU_MUL_DSP_PER_LANE[cfg.ACC_WIDTH] if cfg.ALU_MUL else 0
        f = lut_ff_features(cfg)
        w_lut, w_ff = width_terms(cfg)
        e_lut, e_ff, e_dsp = req_engine_terms(cfg)
        dw_lut, dw_ff, dw_dsp = depthwise_terms(cfg)
        lut = sum(c * x for c, x in zip(LUT_COEFFS, f)) + w_lut \
            + LUTS_PER_LUT_MULTIPLIER * cfg.LUT_MULTIPLIERS \
            + (ALU_REQUANT_LUT_PER_LANE * lanes if cfg.ALU_REQUANT else 0.0) + e_lut \
            + (ALU_FORWARD_LUT if cfg.ALU_FORWARD else 0.0) \
            + (REQ_LANE_SHIFT_LUT if cfg.REQ_LANE_SHIFT else 0.0) \
            + (DMA_OUTSTANDING_LUT if cfg.DMA_OUTSTANDING > 1 else 0.0) + dw_lut \
            + (LOAD_AHEAD_LUT if cfg.LOAD_AHEAD else 0.0)
        ff = sum(c * x for c, x in zip(FF_COEFFS, f)) + w_ff \
            + (ALU_REQUANT_FF if cfg.ALU_REQUANT else 0.0) + e_ff \
            + (ALU_FORWARD_FF if cfg.ALU_FORWARD else 0.0) \
            + (REQ_LANE_SHIFT_FF if cfg.REQ_LANE_SHIFT else 0.0) \
            + (DMA_OUTSTANDING_FF if cfg.DMA_OUTSTANDING > 1 else 0.0) + dw_ff \
            + (LOAD_AHEAD_FF if cfg.LOAD_AHEAD else 0.0)
        out = {
            "lut": int(round(lut)), "ff": int(round(ff)), "dsp": g_dsp + alu_dsp + e_dsp + dw_dsp,
            "bram36": float(sum(m["bram36"] for m in mems)), "source": "analytic",
            "breakdown": {"memories": mems, "gemm_dsp": g_dsp, "alu_mul_dsp": alu_dsp,
                          "dsp_packing_effective": packing,
                          "width_lut_ff": [w_lut, w_ff]},
        }
        if cfg.REQ_ENGINE:
            out["breakdown"]["req_engine_lut_ff_dsp"] = [e_lut, e_ff, e_dsp]
        if cfg.DEPTHWISE_TAPS:
            out["breakdown"]["depthwise_lut_ff_dsp"] = [dw_lut, dw_ff, dw_dsp]
        return out

    def evaluate(self, cfg: VTAConfig, workloads: Sequence[DseWorkload] = ()) -> Result:
        """A :class:`Result` with only ``resources`` set (workloads are ignored)."""
        return Result(_fp(cfg), cfg.to_dict(), resources=self.resources(cfg))


class YosysResources(AnalyticResources):
    """Yosys ``synth_xilinx`` counts (``hw/estimate.py``) for configs with at most
    ``max_macs`` GEMM multipliers; larger configs fall back to the analytic model with a
    note (synthesis time grows with the GEMM array: minutes for a 256-MAC core)."""

    name = "yosys"
    cheap = False

    def __init__(self, part: str = "xc7z020", max_macs: int | None = 64):
        super().__init__(part)
        self.max_macs = max_macs

    @property
    def key(self) -> dict:
        """The cache key part of this evaluator (part, MAC limit)."""
        return {"resources": "yosys", "part": self.part, "max_macs": self.max_macs,
                "lut_ff": LUT_FF_CALIBRATION["version"]}

    def evaluate(self, cfg: VTAConfig, workloads: Sequence[DseWorkload] = ()) -> Result:
        """A :class:`Result` with Yosys resources; a config above ``max_macs`` or a failed
        Yosys run falls back to the analytic model (recorded in ``notes`` / ``errors``,
        never raised)."""
        from ..hw.estimate import estimate_resources

        r = Result(_fp(cfg), cfg.to_dict())
        if self.max_macs is not None and cfg.macs_per_cycle > self.max_macs:
            r.resources = self.resources(cfg)
            r.notes.append(f"yosys skipped ({cfg.macs_per_cycle} MACs > {self.max_macs}): "
                           f"analytic resources")
            return r
        try:
            res = estimate_resources(cfg, self.part)
        except EstimateError as e:
            r.resources = self.resources(cfg)
            r.errors.append(f"yosys failed, analytic resources used: {str(e).splitlines()[0]}")
            return r
        r.resources = {"lut": res.lut, "ff": res.ff, "dsp": res.dsp, "bram36": res.bram36,
                       "source": "yosys", "breakdown": {"cells": res.cells}}
        return r


def resource_record(res_eval: Any, cfg: VTAConfig) -> dict:
    """One resource evaluation as the cache stores it: ``{"resources", "notes",
    "errors"}`` (a Dask task: module-level so that workers can import it)."""
    r = res_eval.evaluate(cfg, ())
    return {"resources": r.resources, "notes": list(r.notes), "errors": list(r.errors)}


def resources_fit(res: Mapping | None, capacity: Mapping) -> bool:
    """Every resource within capacity."""
    return bool(res) and all(res[k] <= capacity[k] for k in ("lut", "ff", "dsp", "bram36"))
