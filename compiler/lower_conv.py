"""Lowering of ``qconv2d`` and ``qdense`` to a relocatable VTA program (:class:`Trace`).

One batch block (``BATCH`` images) per trace; the executor replays it per block.

Slots: ``x`` input activation (INP elements, NCHW{B}n{BLOCK_IN}c), ``w`` weights
(block-compressed, :mod:`.pack`), ``b`` bias + rounding constant (ACC elements; with a
per-channel requantize also the shift amounts, below), ``y`` output (OUT elements,
NCHW{B}n{BLOCK_OUT}c).

Schedule (tiles from :func:`.tiling.conv_tiling`):

1. ACC LOAD of the whole bias to accumulator entries ``[0, OB)`` (per-channel requantize:
   of ``[0, 2*OB)``, the shift amounts behind the bias); the weights, when they all fit
   the WGT scratchpad, are loaded once (resident).
2. For each output tile (output block chunk x row chunk x column chunk) and each reduction
   step (input block chunk): LOAD the input window of each input block (2-D load, zero
   padding at the borders, pads <= 15), LOAD the tile's weights unless resident (resident
   ones as the steps first need them, the next step's behind this step's), GEMM (reset on
   the tile's first step, unless the previous tile of its ACC region ended with a clearing
   REQ that left its entries at 0; on a REQ engine core the reset is an ALU reset the
   engine runs, on the entries no clearing REQ left at 0; one micro-op per (ob, ib, kh,
   kw) stored block under a (rows x cols) loop nest, or for a 1x1 conv one per input block
   under an output-block loop, :func:`_ob_loop`).  INP/WGT regions alternate between two
   virtual threads per step, or INP regions per tile (:func:`_tile_inp_plan`), and ACC
   regions per tile (two, or four bank-aligned ones for a store-heavy conv on a REQ engine
   core: :func:`~.tiling.acc_regions`), with the token pattern of docs/runtime.md.  On a
   REQ engine core the last steps of the last tile run per output block (GEMMs, REQ on
   the engine, STORE), or, when every output block completes in one step (depthwise),
   each block's REQ follows its step; docs/compiler.md.
3. Requantize on the ALU: ADD bias (+round), SHR by ``shift`` (negative = left), MAX
   ``clip_lo``, MIN ``clip_hi``; STORE (the truncation to ``OUT_WIDTH`` is lossless after
   the clip).
   With ``ALU_REQUANT`` the four are one bias-fused ALU REQ, a clearing one
   (:data:`CLEARING_REQ`): results to OUT for the STORE, the tile's ACC entries to 0.
   With a multiplier (``mult != 1``, needs ``ALU_MUL``) the sequence is that of
   :class:`~.requant.MultPlan`: ADD bias (+``pre_add``, merged into the packed bias), the exact
   pre-clip MAX/MIN when the overflow proof needs it, MUL ``mult``, ADD ``post_add``, SHR
   ``shift``, MAX, MIN -- ``(acc*mult + round) >> shift`` with no intermediate beyond
   ``ACC_WIDTH``.

Per-output-channel requantize (issue 21: ``shift`` and ``round`` tuples of one int per
output channel, ``mult`` 1, scalar clips; :func:`channel_requant`): the ``b`` constant is
``[2*OB, BATCH, BLOCK_OUT]`` int32, the bias + ``round[o]`` blocks (entries ``[0, OB)``)
then ``shift[o]`` in the same layout (entries ``[OB, 2*OB)``), loaded by one ACC LOAD, and
the ACC regions start after those ``2*OB`` entries (:func:`~.tiling.acc_regions`
``reserved``).  The epilogue is ADD bias (tensor operand, the bias row of each entry's
output block), SHR by the shift row of each entry's output block (tensor operand, entry
``OB + ob``; negative = left shift, docs/semantics.md), MAX ``clip_lo``, MIN ``clip_hi``
on the ALU: never the fused REQ (its shift is an immediate), so no clearing REQ either
(each tile resets its entries), and on a REQ engine core none of the forms that overlap
the engine's REQ with GEMMs (STEP_REQ, the ENGINE_STREAM last steps, BANK_SPLIT); the
engine still runs the ALU resets (ENGINE_RESETS).  ``bias_load`` works too: the shift
amounts are loaded once to ``[OB, 2*OB)``, the tiles start at the bias.  Tuples whose
channels all agree lower as the scalar requantize.

Few input channels (:func:`use_im2col`, e.g. 1 or 3 channels with a 3x3 / 7x7 kernel): the
conv is lowered as a 1x1 conv over the im2col'd input ``[C*kh*kw, Ho, Wo]`` (patch channels
padded to a multiple of ``BLOCK_IN`` instead of every tap's channels), weights reshaped to
``[O, C*kh*kw, 1, 1]``; the ``x`` slot's layout carries ``im2col`` and the executor builds
the patch tensor on the host (data movement only).

Widths: int8 cores (``LOG_INP_WIDTH`` = ``LOG_WGT_WIDTH`` = 3) take int8 activations and
weights; a ``LOG_INP_WIDTH`` 4 core int16 activations (``x`` and ``y`` slots of 2-byte
values, :attr:`~vtaforge.runtime.artifact.SlotLayout.elem_bytes`), a ``LOG_WGT_WIDTH`` 4
core int16 weights, a ``LOG_WGT_WIDTH`` 2 core int4 weights (int8 arrays with values in
``[-8, 7]``, packed two per byte into the ``w`` constant, :func:`~vtaforge.runtime.cpu_ops.pack_int4`).
A ``LOG_INP_WIDTH`` 2 core takes int4 activations (int8 arrays in ``[-8, 7]``; ``x`` and
``y`` slots of 4-bit values, two per byte, :attr:`~vtaforge.runtime.artifact.SlotLayout.int4`)
with int8 or int4 weights; its outputs are int4 too (the requantize clips to ``[-8, 7]``
or ``[0, 7]``, and the STORE keeps the low nibble of each lane).
The weight array must fit the config's ``WGT_WIDTH`` (:func:`weights_fit`; :class:`CompileError`
otherwise).  The fused REQ's clip immediates are 8-bit, so an int16
output's clip (``[-32768, 32767]`` or ``[0, 32767]``) always takes the SHR/MAX/MIN path
(:func:`~.lower_common.requant_alu`).

Dense layers are 1x1 convs on a 1x1 image.  Grouped and depthwise convs use the
block-compressed weights: only blocks the group structure can make non-zero are stored
and multiplied.
"""

from __future__ import annotations

from dataclasses import replace
from typing import NamedTuple

import numpy as np

from ..hw.config import MemType, VTAConfig
from ..hw.isa import LIMITS, AluOp, Module
from ..runtime.artifact import RowBands, SlotLayout, TraceBuilder, token_fault
from ..runtime.cpu_ops import pack_int4
from .errors import CompileError
from .lower_common import LoweredOp, emit_kernel, fit_queues, plan_for, requant_alu
from .pack import ceil_div, pack_bias, pack_weights
from .tiling import acc_regions, candidates, conv_tiling

__all__ = ["lower_conv", "lower_dense", "act_layout", "LoweredOp", "emit_kernel", "requant_alu", "plan_for",
           "use_im2col", "lower_conv_bands", "band_rows", "bandable", "channel_requant"]

L, C, S = Module.LOAD, Module.COMPUTE, Module.STORE

#: End each tile's bias-fused ALU REQ as a *clearing* REQ (docs/isa.md "REQ", with
#: ``ALU_REQUANT``) and skip the GEMM reset of the next tile of the same ACC region when
#: the clear covered its entries.  False lowers every tile with its reset (for comparison).
CLEARING_REQ = True

#: A 1x1 conv of vertical stride > 1 without vertical padding loads only the input rows
#: its output rows read (DRAM row stride ``sh`` rows), so a tile of ``th`` output rows holds
#: ``th`` input rows instead of ``(th-1)*sh + 1`` (False: every row of the window).
ROW_SKIP = True

#: Emit a tile's reset (or bias load) before the wait for its first step's loads, not after
#: (False: after, for comparison).
RESET_BEFORE_LOAD_WAIT = True
#: On a ``REQ_ENGINE`` core, reset the first tile of every ACC region but the first at the
#: start of the conv, with one-micro-op ALU resets that the engine runs beside the first
#: tile's GEMMs (instead of a GEMM reset on the pipeline when the tile starts), and every
#: other tile reset with such resets too (the first tile's runs while its loads arrive).
ENGINE_RESETS = True
#: On a ``REQ_ENGINE`` core, the last step(s) of a conv's last tile (ENGINE_STREAM_STEPS)
#: run their GEMMs, REQ and STORE per output block, so the engine's REQ of one block and
#: the STORE of the blocks before it overlap the GEMMs of the next (the tail is one
#: block's epilogue).
ENGINE_STREAM = True
#: In that streamed part, the first blocks' REQs follow as many blocks' GEMMs as cover the
#: previous tile's REQ still on the engine (pynq rtl C7: the first block REQ waited 667
#: cycles for the engine, holding the GEMMs behind it).
ENGINE_STREAM_LAG = True
#: With resident weights and every tile's input window fitting one INP region, place
#: inputs by tile (region ``t % nvt``, a tile's steps side by side) instead of by step
#: (:func:`_tile_inp_plan`; False: by step, for comparison).
TILE_INP_REGIONS = True
#: With resident weights, every tile of a conv whose first tile reduces one input block per
#: step does so too (its GEMMs start when one block's input is in, not all of them: pynq
#: rtl C4 28,221 -> 27,421 cycles, C7 27,829 -> 27,213; False: the first tile only).
RESIDENT_ONE_BLOCK_STEPS = True
#: The streamed part of a REQ engine core's last tile covers as many final steps as it
#: takes for their GEMMs to cover the tile's output write beats (False: the last step).
ENGINE_STREAM_STEPS = True
#: Resident weights: a step's LOADs are followed by the next step's new weight blocks
#: (behind the data-ready token), so they load while the step computes.
RESIDENT_W_PREFETCH = True
#: A conv of one tile in one ACC region on a REQ engine core places the first half of its
#: output blocks in the low accumulator bank and the rest in the high one (streamed in
#: alternation, :func:`_bank_order`; False: side by side).
BANK_SPLIT = True
#: A conv's first step with resident weights loads them in groups of output blocks, each
#: with its own data-ready token (False: one token for the step).
FIRST_STEP_SPLIT = True

#: Resident weight LOADs are split into requests of at most this many bus beats (whole
#: weight blocks, at least one): a request holds the read channel until its last beat.
W_CHUNK_BEATS = 256

#: Compute-bound convs with streamed (non-resident) weights reduce one input block per step
#: in every tile, not only the first, when such a step hides its load (False: the first
#: tile only, for comparison).
STREAM_ALL_TILES = True
#: Cycles allowed per DMA request when judging whether a one-block step hides its load
#: (``_one_block_step_hides``): a board's DRAM latency, 40-60 cycles per burst measured.
STREAM_REQUEST_CYCLES = 64
#: Resident weights whose first tile (one input block per step) would load more bus beats
#: per step than its GEMMs take -- the tile's pixels below the bus beats of a weight block
#: -- get fewer output blocks per tile and taller tiles, as the accumulator allows
#: (:func:`_resident_retile`; False: the tiler's choice).
RESIDENT_RETILE = True
#: An engine reset of a tile covers only the entries its ACC region's last clearing REQ
#: left non-zero (False: the whole tile).
PARTIAL_RESET = True
#: A clearing REQ of a tile smaller than its ACC region's cleared extent keeps that extent
#: (False: the extent becomes the tile's).
KEEP_CLEARED = True
#: The last tile of a conv whose output blocks each complete in one step (depthwise)
#: requantizes every block after its step (False: the stream of deferred steps).
STEP_REQ = True
#: 1x1 convs whose tile pixels are one arithmetic run in INP run a step's output blocks as
#: a GEMM loop, one micro-op per input block (:func:`_ob_loop`; False: one micro-op per
#: stored block).
OB_LOOP = True
#: Cycles per DMA request beyond its beats when judging that (the ideal bus's request
#: overhead; the first tile runs once, so a board's latency there costs little).
RETILE_REQUEST_CYCLES = 8
#: Streamed (non-resident) weights are stored input-block-major too, like resident ones,
#: so a step's blocks of one input block are one run (one LOAD) for all its output blocks
#: (False: output-block-major, one LOAD per output block of a one-block step).
STREAMED_IB_MAJOR = True


def _beats(cfg: VTAConfig, mem: MemType) -> int:
    """Bus beats per element of ``mem`` (at least 1)."""
    return max(1, cfg.elem_bytes(mem) * 8 // cfg.BUS_WIDTH)


def _window(th: int, tw: int, sh: int, sw: int, kh: int, kw: int,
            row_skip: bool) -> tuple[int, int]:
    """INP rows held per input block and columns of a tile of ``th`` x ``tw`` outputs:
    with ``row_skip`` the window's every ``sh``-th row (one per output row), else every
    row of the window; the LOADs and the token plan both place inputs by these."""
    return (th if row_skip else (th - 1) * sh + kh), (tw - 1) * sw + kw


def _one_block_step_hides(cfg: VTAConfig, tile, kk: int, sh: int, sw: int, kh: int,
                          kw: int, whole_image: bool = False, w_runs: int | None = None,
                          request_cycles: int | None = None) -> bool:
    """Whether a one-input-block step of ``tile`` (streamed weights) loads its weights and
    input window in no more cycles than its GEMMs take, allowing STREAM_REQUEST_CYCLES per
    DMA request (one weight run, or one per output block when the weights are stored
    output-block-major, or ``w_runs``; one per input row, or one when the window is the
    whole unpadded image, ``whole_image``) for a board's DRAM latency (``request_cycles``
    instead when given).  Cycles: bus beats (``BUS_WIDTH`` bits each) against one GEMM
    micro-op per cycle."""
    ob0, ob1, y0, y1, x0, x1, _ = tile
    obn, th, tw = ob1 - ob0, y1 - y0, x1 - x0
    rows, cols = (th - 1) * sh + kh, (tw - 1) * sw + kw
    if w_runs is None:
        w_runs = 1 if STREAMED_IB_MAJOR else obn
    load = (obn * kk * _beats(cfg, MemType.WGT) + rows * cols * _beats(cfg, MemType.INP)
            + (w_runs + (1 if whole_image else rows))
            * (STREAM_REQUEST_CYCLES if request_cycles is None else request_cycles))
    return load <= obn * kk * th * tw


def _resident_retile(cfg: VTAConfig, tl, nob: int, ho: int, wo: int, kk: int, sh: int,
                     sw: int, kh: int, kw: int, row_skip: bool, reserved: int | None = None):
    """A tiling with resident weights whose first tile's one-input-block steps do not hide
    their loads on the ideal bus (:func:`_one_block_step_hides`, weights in requests of
    ``W_CHUNK_BEATS``, RETILE_REQUEST_CYCLES per request): the same tiling with the most
    output blocks per tile ``obn' < obn`` whose tile, as tall as the ACC region and one
    input block's window in an INP region allow (ACC regions after ``reserved`` entries,
    default ``nob``: :func:`~.tiling.acc_regions`) and taller than ``tl.th``, hides them;
    the input is then read once per output block chunk.  Returns ``tl`` when it hides, or
    when no such ``obn'`` does (pynq rtl, 14x14 512->512 1x1: obn 32 x 2 rows, 1,024
    weight beats per 896-cycle step, 214,390 cycles -> obn 16 x 4 rows, 208,805)."""
    w_beats = _beats(cfg, MemType.WGT)
    acc_half = acc_regions(cfg, nob, tl.acc_nvt, reserved)[1]
    inp_half = cfg.INP_DEPTH // tl.nvt

    def hides(obn, th):
        runs = -(-obn * kk * w_beats // W_CHUNK_BEATS)
        return _one_block_step_hides(cfg, (0, obn, 0, th, 0, tl.tw, None), kk, sh, sw, kh, kw,
                                     w_runs=runs, request_cycles=RETILE_REQUEST_CYCLES)
    if hides(tl.obn, tl.th):
        return tl
    for obn in [v for v in candidates(nob) if v < tl.obn]:
        th = min(ho, acc_half // (obn * tl.tw), LIMITS.max("iter") // tl.tw)
        rows_l, cols = _window(th, tl.tw, sh, sw, kh, kw, row_skip)
        while th > tl.th and rows_l * cols > inp_half:
            th -= 1
            rows_l, cols = _window(th, tl.tw, sh, sw, kh, kw, row_skip)
        if th > tl.th and hides(obn, th):
            return replace(tl, obn=obn, th=th)
    return tl


def _ob_loop(cfg: VTAConfig, grp, blk_addr: dict, widx: dict, n_t: int, th: int, tw: int,
             ystep: int, sw: int, kk: int):
    """A step's GEMM with the output blocks as a loop (OB_LOOP): for a 1x1 kernel whose
    tile pixels are one arithmetic run in INP (``ystep == tw * sw``), when every input
    block of ``grp`` ((ob, ib, stored block)) has the same output blocks, lying ``n_t``
    accumulator entries apart, with weights a constant ``dw`` WGT entries apart: one
    micro-op per input block under the loops ``(obs, n_t, 0, dw)`` and
    ``(th*tw, 1, sw, 0)`` -- the same (acc, inp, wgt) triples as one micro-op per entry,
    in another order, with ``obs`` times fewer micro-ops to load (the compute unit loads
    them, stalling its GEMMs: pynq rtl 14x14 512->512, 14 micro-op LOADs of ~256 cycles).
    Returns ``(obs, dw, ibs, acc entry, [wgt entry per ib])`` or None."""
    if not (OB_LOOP and grp and kk == 1 and ystep == tw * sw
            and th * tw <= LIMITS.max("iter")):
        return None
    by_ib: dict = {}
    for ob, ib, bi in grp:
        by_ib.setdefault(ib, {})[ob] = bi
    ibs = sorted(by_ib)
    obs = sorted(by_ib[ibs[0]])
    n = len(obs)
    if n < 2 or n > LIMITS.max("iter") or any(sorted(by_ib[ib]) != obs for ib in ibs):
        return None
    if any(blk_addr[obs[j + 1]] - blk_addr[obs[j]] != n_t for j in range(n - 1)):
        return None
    dws = {widx[by_ib[ib][obs[j + 1]]] - widx[by_ib[ib][obs[j]]] for ib in ibs
           for j in range(n - 1)}
    if len(dws) != 1:
        return None
    dw = dws.pop()
    if not (0 <= dw < cfg.WGT_DEPTH and n_t < cfg.ACC_DEPTH):
        return None
    return n, dw, ibs, blk_addr[obs[0]], [widx[by_ib[ib][obs[0]]] for ib in ibs]


def _engine_reset(tb: TraceBuilder, base: int, n: int) -> None:
    """Clear accumulator entries ``[base, base + n)`` with ALU resets of one micro-op each
    (``LIMITS.max("iter")`` entries per instruction), the kind the REQ engine runs."""
    for e0 in range(0, n, LIMITS.max("iter")):
        mm = min(LIMITS.max("iter"), n - e0)
        emit_kernel(tb, "alu", [(mm, 1, 1, 0)], [base + e0], [base + e0], op=AluOp.ADD, imm=0,
                    reset=True)


class _StepInfo(NamedTuple):
    """What a step's GEMMs need when they are emitted (at once, or deferred to the
    stream): its first input block, INP base, WGT entry of each stored block, entries
    ``(ob, ib, stored block)`` and step index."""

    i0: int
    inp_base: int
    widx: dict
    sel: list
    s: int


class _InpPlan(NamedTuple):
    """Input placement by tile (:func:`_tile_inp_plan`): per step, its INP base entry,
    whether its loads first wait for a compute->load token, and whether compute pushes one
    after it."""

    base: list[int]
    pop_before: list[bool]
    push_after: list[bool]


def _tile_inp_plan(tiles, resident: bool, nvt: int, inp_half: int, sh: int, sw: int, kh: int,
                   kw: int, row_skip: bool) -> "_InpPlan | None":
    """Place inputs by tile instead of by step when every tile's whole input window fits
    one INP region and the weights are resident (TILE_INP_REGIONS): tile ``t`` uses region
    ``t % nvt`` and its steps (a first tile reduces one input block per step) lie side by
    side in it, so the next tile's loads need not wait for this tile's steps (by step,
    they alternate regions and the next tile waits for the one before this tile's last
    step: pynq rtl C7, 1,151 cycles between its first two tiles).

    Tokens: step ``s``'s loads wait for the latest earlier step ``j`` whose INP entries
    they overwrite, when no earlier wait covered ``j`` (compute runs in order); compute
    pushes a token after exactly those steps ``j`` and after the last step (the conv's end
    pops every token still owed), so pushes and pops pair in order.  Returns None when placement by step applies."""
    if not (TILE_INP_REGIONS and resident):
        return None
    spans = []          # per step: [lo, hi) INP entries
    for t, (ob0, ob1, y0, y1, x0, x1, reds) in enumerate(tiles):
        rows_l, cols = _window(y1 - y0, x1 - x0, sh, sw, kh, kw, row_skip)
        per = rows_l * cols
        lo = reds[0][0]
        if (reds[-1][1] - lo) * per > inp_half:
            return None
        base0 = (t % nvt) * inp_half
        spans += [(base0 + (i0 - lo) * per, base0 + (i1 - lo) * per) for i0, i1 in reds]
    n = len(spans)
    pop_before, push_after = [False] * n, [False] * n
    waited = -1
    for s_, (a, b) in enumerate(spans):
        j = max((k for k in range(s_) if spans[k][0] < b and a < spans[k][1]), default=-1)
        if j > waited:
            pop_before[s_], push_after[j], waited = True, True, j
    # and after the last step, which the end of the conv waits for (what runs next, the
    # same trace for the next batch block included, may load over any of them)
    push_after[-1] = True
    return _InpPlan([a for a, _ in spans], pop_before, push_after)


def _bank_order(cfg: VTAConfig, blk_addr: dict, n: int) -> list[int]:
    """Output blocks (``blk_addr``: block -> first accumulator entry, ``n`` entries each)
    in the order a streamed step runs them on a ``REQ_ENGINE`` core: blocks of the low and
    the high accumulator bank alternating while both last (the engine's REQ of one block
    then runs beside the next block's GEMMs on the other bank; on the same bank the two
    share its ports, the GEMMs losing a cycle per REQ entry: pynq rtl C10 29,535 -> 28,490
    cycles), then the rest, then the blocks that straddle the banks, each group ascending.
    All in one bank: ascending."""
    half = cfg.ACC_DEPTH // 2
    lo, hi, mid = [], [], []
    for ob in sorted(blk_addr):
        a = blk_addr[ob]
        (lo if a + n <= half else hi if a >= half else mid).append(ob)
    k = min(len(lo), len(hi))
    return [ob for pair in zip(lo, hi) for ob in pair] + lo[k:] + hi[k:] + mid


def _runs(ids) -> list[tuple[int, int]]:
    """Maximal runs ``[a, b)`` of consecutive integers in ``ids``, in order."""
    out: list[list[int]] = []
    for i in ids:
        if out and out[-1][1] == i:
            out[-1][1] = i + 1
        else:
            out.append([i, i + 1])
    return [(a, b) for a, b in out]


def use_im2col(cfg: VTAConfig, c: int, groups: int, kh: int, kw: int) -> bool:
    """Whether a conv should run as a 1x1 conv over its im2col'd input.

    The direct lowering spends ``ceil(C/BLOCK_IN) * kh * kw`` GEMM blocks per output pixel
    and output block (each tap's channels zero-padded to ``BLOCK_IN``); the im2col form
    spends ``ceil(C*kh*kw / BLOCK_IN)``.  im2col is chosen (``groups == 1``, ``kh*kw > 1``)
    when it at least halves that count (digits conv1: 1 vs 9; ResNet-18 C1, 3 channels
    7x7: 10 vs 49; 64 channels 3x3: 36 vs 36, never).  Its price: the host builds the
    patch tensor (``kh*kw/(sh*sw)`` times the input bytes) before the VTA call.
    """
    kk = kh * kw
    if groups != 1 or kk == 1:
        return False
    bi = cfg.BLOCK_IN
    return 2 * ceil_div(c * kk, bi) <= ceil_div(c, bi) * kk



class WindowGeometry(NamedTuple):
    """Layouts and sizes of a sliding-window layer (convolution, pooling).

    Attributes:
        xl, yl: the input and output :class:`SlotLayout` (the input pre-padded in DRAM when
            ``pre_pad``).
        ho, wo: output height and width (elements): ``(h + pt + pb - kh) // sh + 1`` and
            ``(w + pl + pr - kw) // sw + 1`` (ONNX Conv/MaxPool output size, floor mode).
        pads: ``(pt, pl, pb, pr)`` still to apply with LOAD padding (all 0 when pre-padded).
        pre_pad: whether the input slot carries the padding.
    """

    xl: SlotLayout
    yl: SlotLayout
    ho: int
    wo: int
    pads: tuple[int, int, int, int]
    pre_pad: bool


def window_geometry(uid: str, in_chw: tuple[int, int, int], out_c: int,
                    kernel: tuple[int, int], strides: tuple[int, int],
                    pads: tuple[int, int, int, int], batch: int, in_block: int,
                    out_block: int, pre_pad: bool | None = None) -> WindowGeometry:
    """The pad-limit check, output size and slot layouts shared by the conv and pooling
    lowerings.

    Args:
        in_chw: input ``(channels, height, width)`` in elements; out_c: output channels.
        kernel: ``(kh, kw)``; strides: ``(sh, sw)``; pads: ONNX order ``(pt, pl, pb, pr)``.
        batch, in_block, out_block: BATCH and the channel block of the input / output slot.
        pre_pad: pad the input slot in DRAM instead of with LOAD padding; ``None`` chooses it
            when a pad reaches the kernel size (a LOAD-padded tile would start in padding).
    Raises:
        CompileError: a pad above 15, the LOAD instruction's 4-bit pad field maximum.
    """
    (c, h, w), (kh, kw), (sh, sw) = in_chw, kernel, strides
    pt, pl, pb, pr = pads
    if max(pt, pl, pb, pr) > LIMITS.max("pad"):
        raise CompileError(f"{uid}: pads {tuple(pads)} exceed the LOAD pad maximum "
                           f"{LIMITS.max('pad')}")
    if pre_pad is None:
        pre_pad = pt >= kh or pb >= kh or pl >= kw or pr >= kw
    ho = (h + pt + pb - kh) // sh + 1
    wo = (w + pl + pr - kw) // sw + 1
    xl = SlotLayout((c, h, w), batch, in_block, (pt, pb, pl, pr) if pre_pad else (0, 0, 0, 0))
    yl = SlotLayout((out_c, ho, wo), batch, out_block)
    left = (0, 0, 0, 0) if pre_pad else (pt, pl, pb, pr)
    return WindowGeometry(xl, yl, ho, wo, left, bool(pre_pad))


def channel_requant(cfg: VTAConfig, uid: str, attrs: dict, o: int):
    """The per-output-channel requantize of a conv/dense node of ``o`` output channels:
    ``(attrs, (shift, round))`` with int64 ``[O]`` arrays when ``shift`` and ``round`` are
    sequences of one int per channel (``mult`` 1), else ``(attrs, None)``.  Sequences whose
    channels all agree come back as scalar attributes (the scalar lowering, with its
    fused REQ forms), with ``None``.

    Raises:
        CompileError: lengths other than ``o``, ``round`` scalar while ``shift`` is not (or
            the reverse), ``mult != 1``, or a shift outside the tensor SHR's range
            ``[-2**LOG_ACC_WIDTH, 2**LOG_ACC_WIDTH - 1]``.
    """
    sh, rn = attrs["shift"], attrs["round"]
    seq_s, seq_r = isinstance(sh, (list, tuple, np.ndarray)), isinstance(rn, (list, tuple, np.ndarray))
    if not seq_s and not seq_r:
        return attrs, None
    if not (seq_s and seq_r):
        raise CompileError(f"{uid}: per-channel requantize needs shift and round both per "
                           f"channel")
    shifts, rounds = np.asarray(sh, np.int64).reshape(-1), np.asarray(rn, np.int64).reshape(-1)
    if shifts.size != o or rounds.size != o:
        raise CompileError(f"{uid}: per-channel requantize of {o} output channels has "
                           f"{shifts.size} shifts and {rounds.size} rounds")
    if attrs.get("mult", 1) not in (None, 1):
        raise CompileError(f"{uid}: per-channel requantize needs mult 1, got {attrs['mult']}")
    lim = 1 << cfg.LOG_ACC_WIDTH
    if shifts.size and (int(shifts.min()) < -lim or int(shifts.max()) > lim - 1):
        raise CompileError(f"{uid}: per-channel shifts {int(shifts.min())} .. "
                           f"{int(shifts.max())} outside the ALU SHR range [{-lim}, {lim - 1}]")
    if shifts.size and (shifts == shifts[0]).all() and (rounds == rounds[0]).all():
        return dict(attrs, shift=int(shifts[0]), round=int(rounds[0])), None
    return attrs, (shifts, rounds)


def lower_conv(cfg: VTAConfig, uid: str, in_chw: tuple, w: np.ndarray, bias: np.ndarray,  # noqa: C901
               attrs: dict, *, pre_pad: bool | None = None,
               im2col: bool | None = None, bias_load: bool = False,
               out_rows: int | None = None, tile_inp: bool = True,
               max_acc_regions: int | None = None) -> LoweredOp:
    """Lower one ``qconv2d`` (one batch block) to a :class:`LoweredOp`.

    Args:
        in_chw: input ``(C, H, W)``; w: int8 ``[O, C/groups, KH, KW]``; bias: int32 ``[O]``;
        attrs: the node's ``kernel``, ``strides``, ``pads`` (top, left, bottom, right),
            ``groups``, ``shift``, ``round``, ``mult`` (1, or a multiplier on a config
            with ``ALU_MUL``), ``clip_lo``, ``clip_hi``.  ``shift`` and ``round`` may be
            sequences of ``O`` ints (per-output-channel requantize, ``mult`` 1; shifts in
            ``[-2**LOG_ACC_WIDTH, 2**LOG_ACC_WIDTH - 1]``, see the module docstring).
        pre_pad: bake the spatial padding into the packed input on the host instead of
            using LOAD padding (default: only when a tile window could lie entirely in the
            padding, i.e. a pad >= the kernel size).
        im2col: lower as a 1x1 conv over the input's patch tensor (``[C*kh*kw, Ho, Wo]``,
            built on the host: the ``x`` slot's :class:`SlotLayout` carries ``im2col``)
            with the weights reshaped to ``[O, C*kh*kw, 1, 1]`` (default:
            :func:`use_im2col`).  Exact: the same products, summed in another order
            (integer sums).  Pads then have no 15 limit.
        bias_load: start each tile's accumulator at the bias (+round) with one broadcast
            ACC LOAD per output block (``x_stride`` 0), instead of a GEMM reset and the
            bias ADD of the epilogue.  Exact, but slower on every preset: an ACC element
            (``BATCH*BLOCK_OUT*4`` bytes, pynq 64) is 8 bus beats on pynq's 8-byte bus and
            the compute unit waits for its own loads, against 2 micro-op cycles for reset +
            ADD (pynq rtl: C4 60,774 -> 132,407 cycles, C5 507,797 -> 580,448, C10 54,561 ->
            73,317).  Default off; kept for cores with a wider bus or a broadcast load.
        out_rows: the height (rows) of the destination's channel planes, ``>=`` this conv's
            output height ``Ho`` (default ``Ho``): the program stores its ``Ho`` rows at the
            top of planes of ``out_rows`` rows (the ``y`` slot and its batch-block
            relocation are of that taller tensor), so a row band's program writes into the
            full output once its ``y`` slot is pointed at the band's first row
            (:func:`lower_conv_bands`).
        tile_inp, max_acc_regions: token-queue room.  Placing inputs by tile
            (:func:`_tile_inp_plan`) can need more tokens outstanding than shallow token
            queues hold (a tile's every step frees its input region for the tile after
            next: ``steps per tile`` compute->load tokens), and so can ``k`` ACC regions
            (the store frees each for the tile ``k`` tiles later: with one-token queues
            four regions deadlock).  A conv whose trace does not fit ``TOKEN_QUEUE_DEPTH``
            (:func:`~vtaforge.runtime.artifact.token_fault`) is lowered again with inputs
            placed by step (``tile_inp=False``), then with at most half as many ACC
            regions (``max_acc_regions``) each time, down to one; deep queues (every
            preset) never take these steps, so their programs are unchanged.
    Raises:
        CompileError: ``mult != 1`` without ``ALU_MUL`` or without an overflow-free
            sequence, pads > 15, no tile fits, ``out_rows < Ho``; a per-channel
            requantize refused by :func:`channel_requant`.
    """
    k_red = int(np.prod(w.shape[1:]))
    if not weights_fit(cfg, w):
        raise CompileError(f"{uid}: {w.dtype} weights on a core with WGT_WIDTH "
                           f"{cfg.WGT_WIDTH}" + (" (int4: int8 values in [-8, 7])"
                                                 if cfg.WGT_WIDTH == 4 else ""))
    abits = cfg.INP_WIDTH                   # bits per activation value (4, 8 or 16)
    node_attrs = attrs
    attrs, pcq = channel_requant(cfg, uid, attrs, w.shape[0])
    bias_bytes = 4 * w.shape[0] * (1 if pcq is None else 2)     # the "b" constant
    plan = plan_for(cfg, uid, attrs, k_red * (1 << (cfg.INP_WIDTH - 1)) * (
        1 << (cfg.WGT_WIDTH - 1)) + int(np.abs(np.asarray(bias, np.int64)).max(initial=0)))
    B, BI, BO = cfg.BATCH, cfg.BLOCK_IN, cfg.BLOCK_OUT
    c, h, wd = in_chw
    o, cg, kh, kw = w.shape
    groups = int(attrs.get("groups", 1))
    sh, sw = attrs["strides"]
    pt, pl, pb, pr = attrs["pads"]
    if im2col is None:
        im2col = use_im2col(cfg, c, groups, kh, kw)
    if im2col:
        if groups != 1:
            raise CompileError(f"{uid}: im2col lowering needs groups == 1, got {groups}")
        k = c * kh * kw
        ho = (h + pt + pb - kh) // sh + 1
        wo = (wd + pl + pr - kw) // sw + 1
        a1 = dict(attrs, kernel=(1, 1), strides=(1, 1), pads=(0, 0, 0, 0), groups=1)
        lo = lower_conv(cfg, uid, (k, ho, wo), np.ascontiguousarray(w.reshape(o, k, 1, 1)),
                        bias, a1, pre_pad=False, im2col=False, bias_load=bias_load,
                        out_rows=out_rows)
        xl = act_layout(cfg, SlotLayout((c, h, wd), B, BI,
                                        im2col=(kh, kw, sh, sw, pt, pl, pb, pr)))
        assert xl.block_bytes == lo.layouts["x"].block_bytes
        lo.layouts["x"] = xl
        st = lo.trace.stats
        st["im2col"] = [c, kh, kw]
        st["min_dram_bytes"] = int((B * c * h * wd + B * o * ho * wo) * abits // 8
                                   + weight_bytes(cfg, w) + bias_bytes)
        st["host_im2col_bytes"] = int(xl.block_bytes)
        return lo
    geo = window_geometry(uid, (c, h, wd), o, (kh, kw), (sh, sw), (pt, pl, pb, pr), B, BI, BO,
                          pre_pad)
    xl, yl, ho, wo, pre_pad = geo.xl, geo.yl, geo.ho, geo.wo, geo.pre_pad
    xl, yl = act_layout(cfg, xl), act_layout(cfg, yl)
    hpl = ho if out_rows is None else int(out_rows)
    if hpl < ho:
        raise CompileError(f"{uid}: out_rows {hpl} is below the output height {ho}")
    if hpl != ho:
        yl = act_layout(cfg, SlotLayout((o, hpl, wo), B, BO))
    pt, pl, pb, pr = geo.pads
    hp, wp = xl.hw
    wpk = pack_weights(w, groups, BO, BI)
    nob, nib = wpk.n_ob, wpk.n_ib
    kk = kh * kw
    per_ob = max(b - a for a, b in wpk.ob_ranges)
    span = nib if groups == 1 else max(int(wpk.ibs(ob).max() - wpk.ibs(ob).min() + 1)
                                       for ob in range(nob) if wpk.ob_ranges[ob][1] > 0)
    # (the skipping LOAD's row pitch sh*wp must fit the x_stride field)
    row_skip = (ROW_SKIP and kh == 1 and sh > 1 and pt == 0 and pb == 0
                and sh * wp <= LIMITS.max("stride"))
    # accumulator entries before the ACC regions: the bias (+round), and for a per-channel
    # requantize the shift amounts (the SHR's tensor operand) behind it
    reserved = nob if pcq is None else 2 * nob
    tl = tl0 = conv_tiling(cfg, nob, span, ho, wo, kh, kw, sh, sw, len(wpk.blocks), per_ob,
                           row_skip, reserved)
    mac_cycles = o * (c // groups) * kh * kw * ho * wo * B // cfg.macs_per_cycle
    bus_cycles = (((B * c * h * wd + B * o * ho * wo) * abits // 8 + weight_bytes(cfg, w)
                   + bias_bytes) * 8 // cfg.BUS_WIDTH)
    if (RESIDENT_RETILE and tl.resident and RESIDENT_ONE_BLOCK_STEPS and groups == 1
            and bus_cycles <= 2 * mac_cycles):
        tl = _resident_retile(cfg, tl, nob, ho, wo, kk, sh, sw, kh, kw, row_skip, reserved)
    retiled = tl != tl0
    if max_acc_regions is not None and tl.acc_nvt > max_acc_regions:
        tl = replace(tl, acc_nvt=max_acc_regions)      # shallow token queues (see above)
    nvt = tl.nvt
    inp_half = cfg.INP_DEPTH // nvt
    wgt_half = cfg.WGT_DEPTH // nvt
    acc_bases, _ = acc_regions(cfg, nob, tl.acc_nvt, reserved)
    tb = TraceBuilder(uid, {"x": xl.block_bytes, "y": yl.block_bytes})
    bias_load = bool(bias_load)
    if not bias_load:
        # the bias (+round), and the shift amounts of a per-channel requantize: one LOAD
        tb.load_2d("b", 0, MemType.ACC, 0, 1, reserved, reserved)
    elif pcq is not None:
        # bias_load: the tiles load the bias themselves; the shift amounts stay for the conv
        tb.load_2d("b", nob, MemType.ACC, nob, 1, nob, nob)
    # Resident weights are loaded block run by block run as the steps first need them (on
    # the load module, so each load overlaps the GEMMs of the steps before it), not in one
    # request before the first GEMM (pynq rtl, C5: 18,400 beats the compute unit waited).
    w_loaded = np.zeros(len(wpk.blocks), dtype=bool)
    blk_index = {(int(a), int(b)): i for i, (a, b) in enumerate(wpk.blocks)}
    # Weights are stored input-block-major ((ib, ob) order, in DRAM and WGT): a one-block
    # step needs one input block's weights for every output block of its tile, one
    # contiguous run (one LOAD) instead of one LOAD per output block (pynq C10, resident:
    # 32 LOADs of one block per step, the first tile load-bound; a streamed 7x7 1024->1024
    # conv: 16 LOADs of one block per step, so only its first tile took one-block steps
    # and the second waited 9,189 cycles for a 16-block step's loads).  Depends on the
    # weights only, so row bands lowered separately agree with the whole conv's constants.
    ib_major = tl.resident or STREAMED_IB_MAJOR
    order = (np.lexsort((wpk.blocks[:, 0], wpk.blocks[:, 1])) if ib_major
             else np.arange(len(wpk.blocks)))
    wpos = np.empty(len(order), np.int64)
    wpos[order] = np.arange(len(order))
    # ... in requests of whole blocks up to W_CHUNK_BEATS bus beats, so the compute unit's
    # own loads (micro-op kernels) wait at most that long for the read channel
    w_beats = _beats(cfg, MemType.WGT)
    w_chunk = min(LIMITS.max("size"), max(1, W_CHUNK_BEATS // (w_beats * kk)) * kk)
    tiles = []
    for ob0 in range(0, nob, tl.obn):
        ob1 = min(nob, ob0 + tl.obn)
        ibs = np.unique(np.concatenate([wpk.ibs(ob) for ob in range(ob0, ob1)]))
        if ibs.size == 0:
            ibs = np.array([0])
        lo, hi = int(ibs.min()), int(ibs.max()) + 1
        reds = [(i0, min(hi, i0 + tl.ibn)) for i0 in range(lo, hi, tl.ibn)]
        for y0 in range(0, ho, tl.th):
            for x0 in range(0, wo, tl.tw):
                tiles.append((ob0, ob1, y0, min(ho, y0 + tl.th), x0, min(wo, x0 + tl.tw), reds))
    # The first tile reduces one input block per step: its first GEMM waits for one
    # block's input window and weights instead of ``ibn`` blocks' (nothing runs before it
    # to hide that load); later tiles' loads run ahead during the previous tile.  A layer
    # whose DRAM traffic takes over twice its MAC cycles (ResNet-18's fc: 32x) keeps its
    # steps: more, smaller loads only add per-request overhead there (pynq rtl, fc:
    # 70,338 -> 80,648 cycles split; C10, 1.04x: 49,807 -> 43,246).  With streamed
    # (non-resident) weights every tile does: after a one-block step, a step of ``ibn``
    # blocks loads ``ibn`` blocks' weights behind one block's GEMMs (C11: 13.8 k load
    # cycles behind 7.1 k; 470,886 -> 463,199 cycles, C9 245,713 -> 237,704).

    def one_block_steps(tile):
        return tile[:6] + ([(i, i + 1) for a, b in tile[6] for i in range(a, b)],)

    if bus_cycles <= 2 * mac_cycles and len(tiles[0][6]) and max(
            b - a for a, b in tiles[0][6]) > 1:
        tiles[0] = one_block_steps(tiles[0])
        whole = (STREAMED_IB_MAJOR and (pt, pl, pb, pr) == (0, 0, 0, 0)
                 and _window(ho, wo, sh, sw, kh, kw, row_skip) == (hp, wp)
                 and tiles[0][2:6] == (0, ho, 0, wo))
        if not tl.resident and STREAM_ALL_TILES and _one_block_step_hides(
                cfg, tiles[0], kk, sh, sw, kh, kw, whole):
            tiles = [one_block_steps(tile) for tile in tiles]
        elif tl.resident and RESIDENT_ONE_BLOCK_STEPS:
            tiles = [one_block_steps(tile) for tile in tiles]
    s = 0
    gemm_uops_ideal = 0
    step_list = [(t_, red) for t_, tile in enumerate(tiles) for red in tile[6]]

    def _entries(ob0, ob1, i0, i1):
        """A step's stored weight blocks: ``(ob, ib, block index)`` for output blocks
        ``[ob0, ob1)`` and input blocks ``[i0, i1)``, output-block-major."""
        return [(ob, ib, blk_index[(ob, ib)]) for ob in range(ob0, ob1)
                for ib in wpk.ibs(ob) if i0 <= ib < i1]

    def _load_weights(blocks):
        """Resident weights: LOAD the stored blocks of ``blocks`` not loaded yet (runs of
        consecutive WGT positions, requests of at most ``w_chunk`` elements)."""
        new_blocks = sorted({bi for bi in blocks if not w_loaded[bi]})
        for a, b in _runs(sorted(int(wpos[bi]) for bi in new_blocks)):
            for e0 in range(a * kk, b * kk, w_chunk):
                m = min(w_chunk, b * kk - e0)
                tb.load_2d("w", e0, MemType.WGT, e0, 1, m, m)
                feat["w_loads"] += 1
        w_loaded[new_blocks] = True
    # per ACC region (virtual thread): entries [acc_base, acc_base + n) its last tile left
    # at 0 with a clearing REQ (0: none), so a tile of at most n entries needs no reset
    cleared = [0] * tl.acc_nvt
    resets_skipped = 0
    backlog = 0
    inp_plan = (_tile_inp_plan(tiles, tl.resident, nvt, inp_half, sh, sw, kh, kw, row_skip)
                if tile_inp else None)
    pops_owed = 0
    # what the 1x1-roofline lowerings did (trace stats, for tests and profiles)
    feat = {"bank_split": False, "stream_steps": 0, "first_step_groups": 1,
            "inp_by_tile": inp_plan is not None, "ob_loop_gemms": 0, "retiled": retiled,
            "partial_resets": 0, "w_loads": 0, "step_req": False}
    for t, (ob0, ob1, y0, y1, x0, x1, reds) in enumerate(tiles):
        avt = t % tl.acc_nvt
        obn, th, tw = ob1 - ob0, y1 - y0, x1 - x0
        acc_base = acc_bases[avt]
        rows = (th - 1) * sh + kh
        rows_l, cols = _window(th, tw, sh, sw, kh, kw, row_skip)
        iy0, ix0 = y0 * sh - pt, x0 * sw - pl
        ry0, ry1 = max(0, iy0), min(hp, iy0 + rows)
        rx0, rx1 = max(0, ix0), min(wp, ix0 + cols)
        if ry1 <= ry0 or rx1 <= rx0:
            if not pre_pad:
                return lower_conv(cfg, uid, in_chw, w, bias, attrs, pre_pad=True, im2col=False,
                                  bias_load=bias_load, out_rows=out_rows, tile_inp=tile_inp,
                                  max_acc_regions=max_acc_regions)
            raise CompileError(f"{uid}: empty input window")  # pragma: no cover
        padv = (ry0 - iy0, iy0 + rows - ry1, rx0 - ix0, ix0 + cols - rx1)
        # rows held per input block: with row_skip the window's every sh-th row (padv has no
        # vertical padding then), one per output row
        ystep = cols if row_skip else sh * cols
        # accumulator entry of each output block's first element: side by side from
        # acc_base, or (BANK_SPLIT: a conv of one tile in one ACC region on a REQ engine
        # core, its blocks streamed) the first half of the blocks from acc_base and the
        # rest from the high bank's first entry, so the stream alternates banks
        n_t = th * tw
        h_ = -(-obn // 2)
        half = cfg.ACC_DEPTH // 2
        split = bool(BANK_SPLIT and cfg.REQ_ENGINE and ENGINE_STREAM and pcq is None
                     and len(tiles) == 1
                     and tl.acc_nvt == 1 and obn > 1 and acc_base + h_ * n_t <= half
                     and half + (obn - h_) * n_t <= cfg.ACC_DEPTH)
        feat["bank_split"] |= split
        blk_addr = {ob: (half + (ob - ob0 - h_) * n_t if split and ob - ob0 >= h_
                         else acc_base + (ob - ob0) * n_t) for ob in range(ob0, ob1)}

        def blk_runs(b0, b1, blk_addr=blk_addr, n_t=n_t):
            """Runs ``[a, b)`` of blocks in ``[b0, b1)`` that lie side by side."""
            out, a = [], b0
            for ob in range(b0 + 1, b1 + 1):
                if ob == b1 or blk_addr[ob] != blk_addr[ob - 1] + n_t:
                    out.append((a, ob))
                    a = ob
            return out

        def requant(b0, b1, blk_addr=blk_addr, n_t=n_t):
            """Requantize output blocks [b0, b1) of this tile; whether it cleared them."""
            clr_ = True
            for a, b in blk_runs(b0, b1):
                bloops = [(b - a, n_t, 1, 0), (n_t, 1, 0, 0)]
                bias_add = None if bias_load else (bloops, [blk_addr[a]], [a])
                if pcq is not None:
                    # per-channel: SHR by the shift row of each entry's block, on the ALU
                    clr_ &= requant_alu(tb, blk_addr[a], (b - a) * n_t, 0,
                                        int(attrs["clip_lo"]), int(attrs["clip_hi"]),
                                        bias=bias_add,
                                        shift_src=(bloops, [blk_addr[a]], [nob + a]))
                    continue
                clr_ &= requant_alu(tb, blk_addr[a], (b - a) * n_t, int(attrs["shift"]),
                                    int(attrs["clip_lo"]), int(attrs["clip_hi"]), plan=plan,
                                    bias=bias_add, fused=cfg.ALU_REQUANT,
                                    clear=CLEARING_REQ and not bias_load)
            return clr_
        stream = False
        clr = False
        tile_gemm = 0       # GEMM micro-ops of this tile so far
        # streamed steps (REQ engine, last tile): as many final steps as it takes for their
        # GEMMs to cover the output's write beats (ENGINE_STREAM_STEPS; pynq C10: one
        # step's 1,568 GEMM cycles against 3,136 beats), at most one per INP region when
        # regions alternate by step (a later step must not load over a deferred one)
        n_stream = 0
        # a last tile whose every output block has entries in one step only (depthwise:
        # one block per step) requantizes each block right after its step, on the engine
        # beside the next steps' GEMMs (STEP_REQ; instead of deferring steps to a stream:
        # with one block per step only as many blocks as deferred steps overlapped their
        # REQs, pynq rtl 7x7 1024-channel depthwise: 12 of 16 REQs back to back)
        done_at: dict = {}          # step r -> output blocks whose last entries it has
        engine_req = cfg.REQ_ENGINE and ENGINE_STREAM and pcq is None
        if (STEP_REQ and engine_req and t == len(tiles) - 1 and obn > 1
                and not bias_load):
            steps_of: dict = {}
            for r_, (a_, b_) in enumerate(reds):
                for ob_, _, _ in _entries(ob0, ob1, a_, b_):
                    steps_of.setdefault(ob_, set()).add(r_)
            if len(steps_of) == obn and all(len(v) == 1 for v in steps_of.values()):
                for ob_, v in sorted(steps_of.items()):
                    done_at.setdefault(v.pop(), []).append(ob_)
        step_req_order: list = []
        pending: list = []
        if done_at:
            feat["step_req"] = True
        elif engine_req and t == len(tiles) - 1 and obn > 1:
            out_beats = obn * th * tw * _beats(cfg, MemType.OUT)
            cap = len(reds) if inp_plan is not None else min(len(reds), nvt)
            n_stream, covered = 0, 0
            while n_stream < (cap if ENGINE_STREAM_STEPS else 1) and (
                    n_stream == 0 or covered < out_beats):
                a_, b_ = reds[len(reds) - 1 - n_stream]
                covered += kk * th * tw * len(_entries(ob0, ob1, a_, b_))
                n_stream += 1
        deferred: list = []
        ob_order = _bank_order(cfg, blk_addr, n_t)

        def _step_gemm(info, grp, blk_addr=blk_addr, th=th, tw=tw, rows_l=rows_l,
                       cols=cols, ystep=ystep, n_t=n_t):
            """The GEMM of step ``info`` (:class:`_StepInfo`) over its entries ``grp``
            ((ob, ib, stored block)): one micro-op per (entry, kh, kw) under the tile's
            rows x cols loop nest, or (:func:`_ob_loop`) one per input block under an
            output-block loop and one pixel loop."""
            i0_s, inp_b, widx_s = info.i0, info.inp_base, info.widx
            ob_loop = _ob_loop(cfg, grp, blk_addr, widx_s, n_t, th, tw, ystep, sw, kk)
            if ob_loop is not None:
                feat["ob_loop_gemms"] += 1
                obs_n, dw, ibs, a0, w0 = ob_loop
                emit_kernel(tb, "gemm", [(obs_n, n_t, 0, dw), (th * tw, 1, sw, 0)],
                            [a0] * len(ibs), [inp_b + (ib - i0_s) * rows_l * cols for ib in ibs],
                            w0)
                return
            ki, kj = np.meshgrid(np.arange(kh), np.arange(kw), indexing="ij")
            ki, kj = ki.reshape(-1), kj.reshape(-1)
            d, sr, wg = [], [], []
            for ob, ib, bi in grp:
                d.append(np.full(kk, blk_addr[ob]))
                sr.append(inp_b + (ib - i0_s) * rows_l * cols + ki * cols + kj)
                wg.append(widx_s[bi] + ki * kw + kj)
            emit_kernel(tb, "gemm", [(th, tw, ystep, 0), (tw, 1, sw, 0)], np.concatenate(d),
                        np.concatenate(sr), np.concatenate(wg))

        for r, (i0, i1) in enumerate(reds):
            ivt = s % nvt
            ibn = i1 - i0
            streamed_r = r >= len(reds) - n_stream   # its GEMMs deferred to the stream
            if inp_plan is None:
                inp_base = ivt * inp_half
                if s >= nvt:
                    tb.dep_pop(C, L)
                    pops_owed -= 1
            else:
                inp_base = inp_plan.base[s]
                if inp_plan.pop_before[s]:
                    tb.dep_pop(C, L)
                    pops_owed -= 1
            full = padv == (0, 0, 0, 0) and rows_l == hp and cols == wp
            if full:
                tb.load_2d("x", i0 * hp * wp, MemType.INP, inp_base, ibn, hp * wp, hp * wp)
            else:
                for ib in range(i0, i1):
                    tb.load_2d("x", (ib * hp + ry0) * wp + rx0, MemType.INP,
                               inp_base + (ib - i0) * rows_l * cols,
                               th if row_skip else ry1 - ry0, rx1 - rx0,
                               sh * wp if row_skip else wp, pad=padv)
            # stored weight blocks of this step
            sel = _entries(ob0, ob1, i0, i1)
            # the conv's first step, with many weight blocks to load: in groups of output
            # blocks of about W_CHUNK_BEATS bus beats of weights each, every group with its
            # own data-ready token, so the first GEMMs wait for one group's weights, not
            # all (FIRST_STEP_SPLIT; pynq rtl C10: 1,024 beats before the first GEMM)
            subs = [sel]
            if (FIRST_STEP_SPLIT and tl.resident and t == 0 and r == 0 and sel
                    and not streamed_r):
                per_group = max(1, W_CHUNK_BEATS // (w_beats * kk))
                subs = []
                for ob, ib, bi in sel:
                    if not subs or (len(subs[-1]) >= per_group and ob != subs[-1][-1][0]):
                        subs.append([])
                    subs[-1].append((ob, ib, bi))
            feat["first_step_groups"] = max(feat["first_step_groups"], len(subs))
            if tl.resident:
                widx = {bi: int(wpos[bi]) * kk for _, _, bi in sel}
                for sub in subs[:-1]:
                    _load_weights([bi for _, _, bi in sub])
                    tb.dep_push(L, C)
                _load_weights([bi for _, _, bi in subs[-1]])
            else:
                wbase = ivt * wgt_half
                widx = {}
                pos = 0
                # runs of consecutive stored positions, one LOAD each
                for a, b in _runs(sorted(int(wpos[bi]) for _, _, bi in sel)):
                    tb.load_2d("w", a * kk, MemType.WGT, wbase + pos * kk, 1, (b - a) * kk,
                               (b - a) * kk)
                    feat["w_loads"] += 1
                    for p_ in range(a, b):
                        widx[int(order[p_])] = wbase + (pos + p_ - a) * kk
                    pos += b - a
            tb.dep_push(L, C)
            if tl.resident and RESIDENT_W_PREFETCH and s + 1 < len(step_list):
                # the next step's new weights now, behind this step's data-ready token: they
                # never wait for a buffer (resident), so they load while this step computes
                # (the next step's INP load waits for its region) and that step waits for
                # its input only
                tn, (a_n, b_n) = step_list[s + 1]
                _load_weights([bi for _, _, bi in _entries(tiles[tn][0], tiles[tn][1], a_n, b_n)])
            # A tile's accumulator set-up (reset or bias load) touches only its ACC region,
            # so it goes before the wait for this step's loads (RESET_BEFORE_LOAD_WAIT): the
            # first tile's reset runs while its first input and weights arrive.
            if not RESET_BEFORE_LOAD_WAIT:
                tb.dep_pop(L, C)
            if r == 0:
                if t >= tl.acc_nvt:
                    tb.dep_pop(S, C)
                if bias_load:
                    for ob in range(ob0, ob1):
                        tb.load_2d("b", ob, MemType.ACC, blk_addr[ob],
                                   th * tw, 1, 0)
                elif obn * th * tw <= cleared[avt]:
                    resets_skipped += 1
                elif cfg.REQ_ENGINE and ENGINE_RESETS:
                    # one-micro-op ALU resets: the REQ engine clears the region while the
                    # pipeline waits for this step's loads (the GEMMs into it wait for it)
                    # only the entries the region's last clearing REQ did not clear (its
                    # entries [acc_base, acc_base + cleared)): a tile wider than the one
                    # before it (a row of column tiles whose last is narrower) resets the
                    # excess, not the whole tile, so the reset does not queue behind that
                    # REQ on the engine (PARTIAL_RESET; pynq rtl MobileNet-v1 112x112
                    # depthwise: 8 waits of 994 cycles)
                    done = acc_base + (cleared[avt] if PARTIAL_RESET else 0)
                    for a, b in blk_runs(ob0, ob1):
                        e0, e1 = blk_addr[a], blk_addr[a] + (b - a) * n_t
                        if acc_base <= e0 < done:
                            e0 = min(e1, done)
                            feat["partial_resets"] += 1
                        if e1 > e0:
                            _engine_reset(tb, e0, e1 - e0)
                else:
                    emit_kernel(tb, "gemm", [(th, tw, 0, 0), (tw, 1, 0, 0)],
                                [blk_addr[ob] for ob in range(ob0, ob1)], np.zeros(obn),
                                reset=True)
                if t == 0 and cfg.REQ_ENGINE and ENGINE_RESETS and CLEARING_REQ and not bias_load:
                    # the first tile of every other ACC region is reset here, by ALU resets of
                    # one micro-op that the REQ engine runs beside this tile's GEMMs
                    for v in range(1, min(tl.acc_nvt, len(tiles))):
                        tv = tiles[v]
                        nv = (tv[1] - tv[0]) * (tv[3] - tv[2]) * (tv[5] - tv[4])
                        _engine_reset(tb, acc_bases[v], nv)
                        cleared[v] = max(cleared[v], nv)
            if RESET_BEFORE_LOAD_WAIT:
                tb.dep_pop(L, C)
            # the last steps of the last tile on a REQ engine core (n_stream of them): their
            # GEMMs and the requantize run per output block, each block's REQ (on the
            # engine) beside the next block's GEMMs and its STORE beside the rest, so the
            # layer's tail is one block's, not a tile's
            info = _StepInfo(i0, inp_base, widx, sel, s)
            is_deferred = bool(sel) and streamed_r
            if sel and not is_deferred:
                for k_, sub in enumerate(subs):
                    if k_:
                        tb.dep_pop(L, C)
                    _step_gemm(info, sub)
            elif is_deferred:
                deferred.append(info)
            if r == len(reds) - 1 and deferred:
                stream = True
                feat["stream_steps"] = max(feat["stream_steps"], len(deferred))
                # the engine may still run the previous tile's REQ: the first block REQs
                # wait behind that many blocks' GEMMs (an engine instruction at the head of
                # the queue would hold every GEMM behind it until the engine is free);
                # a block's GEMM cycles: the deferred steps' average per output block
                lag = 0
                if ENGINE_STREAM_LAG:
                    blk = max(1, sum(len(f.sel) for f in deferred) * kk * th * tw // obn)
                    lag = min(obn - 1, -(-max(0, backlog - tile_gemm) // blk))
                reqd = 0
                for gi, ob in enumerate(ob_order + [None] * lag):
                    for f in (deferred if ob is not None else ()):
                        grp = [e for e in f.sel if e[0] == ob]
                        if grp:
                            _step_gemm(f, grp)
                    if gi >= lag:       # this block's GEMMs are in: the REQ lag blocks back
                        clr = requant(ob_order[reqd], ob_order[reqd] + 1)
                        tb.dep_push(C, S)
                        reqd += 1
            if sel:
                gemm_uops_ideal += len(sel) * kk * th * tw
                if not is_deferred:
                    tile_gemm += len(sel) * kk * th * tw
            if done_at:
                # the blocks this step completed, each REQ once the engine is through the
                # previous tile's REQ (``backlog`` entries: this tile's GEMM cycles so far
                # cover it), all of them after the last step
                pending += done_at.get(r, [])
                while pending and (tile_gemm >= backlog or r == len(reds) - 1):
                    ob_ = pending.pop(0)
                    clr = requant(ob_, ob_ + 1) and (clr or not step_req_order)
                    tb.dep_push(C, S)
                    step_req_order.append(ob_)
            # compute frees a step's buffers after its GEMMs: a deferred step's after the
            # stream
            frees = [] if is_deferred else [s]
            if r == len(reds) - 1:
                frees += [f.s for f in deferred]
            for f_s in frees:
                if inp_plan is None or inp_plan.push_after[f_s]:
                    tb.dep_push(C, L)
                    pops_owed += 1
            s += 1
        if done_at:         # every block requantized after its step: stored in that order
            stream, ob_order = True, step_req_order
        # requantize (done per output block above when streamed)
        n = obn * th * tw
        if not stream:
            clr = requant(ob0, ob1)
            tb.dep_push(C, S)
        # the tile wrote only its n entries from acc_base: a clearing REQ leaves the zeros
        # beyond them that an earlier, larger tile's clear left (KEEP_CLEARED; a row of
        # column tiles whose last is narrower: the next row's first tile needs no reset)
        cleared[avt] = (max(n, cleared[avt]) if KEEP_CLEARED and not split else n) if clr else 0
        backlog = 0 if stream else n      # entries the engine's REQ of this tile clears
        if not stream:
            tb.dep_pop(C, S)
        for ob in (ob_order if stream else range(ob0, ob1)):
            if stream:
                tb.dep_pop(C, S)
            if tw == wo:
                tb.store_2d(blk_addr[ob], "y", (ob * hpl + y0) * wo, 1,
                            th * wo, th * wo)
            else:
                tb.store_2d(blk_addr[ob], "y", (ob * hpl + y0) * wo + x0,
                            th, tw, wo)
        tb.dep_push(S, C)
    for _ in range(pops_owed):        # by step: min(steps, nvt)
        tb.dep_pop(C, L)
    for _ in range(min(len(tiles), tl.acc_nvt)):
        tb.dep_pop(S, C)
    tr = tb.trace
    if (inp_plan is not None or tl.acc_nvt > 1) and token_fault(tr, cfg.TOKEN_QUEUE_DEPTH):
        return lower_conv(cfg, uid, in_chw, w, bias, node_attrs, pre_pad=pre_pad,
                          im2col=False, bias_load=bias_load, out_rows=out_rows, tile_inp=False,
                          max_acc_regions=tl.acc_nvt if inp_plan is not None else tl.acc_nvt // 2)
    macs = o * (c // groups) * kh * kw * ho * wo
    tr.stats = {"tiling": [tl.obn, tl.ibn, tl.th, tl.tw, tl.nvt, int(tl.resident)],
                "tiles": len(tiles), "steps": s, "pre_pad": bool(pre_pad), "row_skip": row_skip,
                "acc_regions": tl.acc_nvt,
                "gemm_uops_ideal": -(-macs * B // cfg.macs_per_cycle),
                "gemm_uops_planned": gemm_uops_ideal, "resets_skipped": resets_skipped, **feat,
                "min_dram_bytes": int((B * c * _read_extent(h, ho, kh, sh) * _read_extent(wd, wo, kw, sw)
                                       + B * o * ho * wo) * abits // 8 + weight_bytes(cfg, w)
                                      + bias_bytes)}
    # the bias carries the rounding constant (the plan's pre_add with a multiplier; one
    # per channel, and the shift amounts behind the bias blocks, for a per-channel one)
    wdata = np.ascontiguousarray(wpk.data[order])
    if pcq is None:
        rnd = int(attrs["round"]) if plan is None else plan.pre_add
        bconst = pack_bias(bias, rnd, B, BO)
    else:
        bconst = pack_bias(bias, pcq[1], B, BO, shift=pcq[0])
    consts = {"w": pack_int4(wdata) if cfg.WGT_WIDTH == 4 else wdata, "b": bconst}
    return fit_queues(cfg, LoweredOp(tr, consts, {"x": xl, "y": yl}))


def weights_fit(cfg: VTAConfig, w: np.ndarray) -> bool:
    """Whether conv/dense weights ``w`` can be packed for ``cfg``: a signed integer array
    of ``WGT_WIDTH`` bits, or for ``WGT_WIDTH`` 4 (int4) an int8 array whose values all
    lie in ``[-8, 7]`` (numpy has no int4 dtype; the lowering packs two per byte)."""
    if cfg.WGT_WIDTH == 4:
        return w.dtype == np.int8 and (w.size == 0 or (int(w.min()) >= -8 and int(w.max()) <= 7))
    return np.dtype(w.dtype).itemsize * 8 == cfg.WGT_WIDTH and w.dtype.kind == "i"


def _read_extent(n_in: int, n_out: int, k: int, s: int) -> int:
    """Input rows (or columns) a conv's windows read along one axis: all ``n_in`` when
    windows touch (``k >= s``), else ``n_out * k`` at most (a 1x1 stride-2 conv reads every
    other row: its minimum DRAM traffic counts only those)."""
    return n_in if k >= s else min(n_in, n_out * k)


def weight_bytes(cfg: VTAConfig, w: np.ndarray) -> int:
    """DRAM bytes of the weights ``w`` at ``WGT_WIDTH`` bits per value (unpadded)."""
    return int(w.size) * cfg.WGT_WIDTH // 8


def bandable(cfg: VTAConfig, in_chw: tuple, w_shape: tuple, attrs: dict) -> bool:
    """Whether a conv can run in output row bands that each need only their own rows of
    the host-packed input (:func:`lower_conv_bands`): an im2col conv (:func:`use_im2col`;
    a band's patch rows are built alone) or a 1x1 conv with stride 1 and no padding (a
    band reads the same rows of the input), with at least 2 output rows.  Convs with a
    window halo are not banded."""
    c, h, _ = in_chw
    o, cg, kh, kw = w_shape
    groups = int(attrs.get("groups", 1))
    if use_im2col(cfg, c, groups, kh, kw):
        sh = attrs["strides"][0]
        pt, _, pb, _ = attrs["pads"]
        return (h + pt + pb - kh) // sh + 1 >= 2
    return ((kh, kw) == (1, 1) and tuple(attrs["strides"]) == (1, 1)
            and tuple(attrs["pads"]) == (0, 0, 0, 0) and h >= 2)


def band_rows(height: int) -> list[int]:
    """Band heights offered for an output of ``height`` rows: ``ceil(height / 2**k)`` for
    ``k = 1, 2, ...`` down to 1 row, distinct, largest (fewest bands) first."""
    out: list[int] = []
    k = 2
    while True:
        r = -(-height // k)
        if r < height and r not in out:
            out.append(r)
        if r == 1:
            return out
        k *= 2


def lower_conv_bands(cfg: VTAConfig, uid: str, in_chw: tuple, w: np.ndarray,
                     bias: np.ndarray, attrs: dict, rows: list[int] | None = None
                     ) -> list[RowBands]:
    """Row-band variants of a :func:`bandable` conv (:class:`~.artifact.RowBands`).

    A band of ``r`` output rows is the same conv lowered as a 1x1 conv over ``r`` rows of
    its (im2col'd) input, ``[K, r, Wo]`` (``K = C*kh*kw``, or ``C`` for a 1x1 conv), with
    ``out_rows = Ho`` so it stores into the full ``[O, Ho, Wo]`` output; its packed
    constants are those of :func:`lower_conv` of the whole conv (the same reshaped
    weights and bias, and the shift amounts of a per-channel requantize).  Trace
    statistics per band: ``gemm_uops_ideal`` of the band's MACs and ``min_dram_bytes`` of
    the input rows it reads (raw input rows for im2col), weights, bias and its output
    rows.

    Args:
        in_chw, w, bias, attrs: as for :func:`lower_conv`.
        rows: band heights (default :func:`band_rows` of ``Ho``), each ``1 <= r < Ho``.
    Returns:
        One :class:`RowBands` per height, in the order given.
    Raises:
        CompileError: the conv is not :func:`bandable`, a height out of range, or the
            band's lowering fails.
    """
    c, h, wd = in_chw
    o, cg, kh, kw = w.shape
    if not bandable(cfg, in_chw, w.shape, attrs):
        raise CompileError(f"{uid}: only im2col convs and 1x1 stride-1 unpadded convs run "
                           f"in row bands")
    sh, sw = attrs["strides"]
    pt, pl, pb, pr = attrs["pads"]
    ho = (h + pt + pb - kh) // sh + 1
    wo = (wd + pl + pr - kw) // sw + 1
    groups = int(attrs.get("groups", 1))
    k = c * kh * kw if kh * kw > 1 else c          # channels of the 1x1 conv's input
    w1 = np.ascontiguousarray(w.reshape(o, cg * kh * kw, 1, 1))
    a1 = dict(attrs, kernel=(1, 1), strides=(1, 1), pads=(0, 0, 0, 0),
              groups=1 if kh * kw > 1 else groups)
    B = cfg.BATCH
    bias_bytes = 4 * o * (1 if channel_requant(cfg, uid, attrs, o)[1] is None else 2)
    out = []
    for r in (band_rows(ho) if rows is None else rows):
        r = int(r)
        if not 1 <= r < ho:
            raise CompileError(f"{uid}: band of {r} rows is not within 1 .. {ho - 1}")
        traces = {}
        for n in dict.fromkeys((r, ho % r)):
            if n == 0:
                continue
            lo = lower_conv(cfg, f"{uid}@rows{r}x{n}", (k, n, wo), w1, bias, a1,
                            pre_pad=False, im2col=False, out_rows=ho)
            st = lo.trace.stats
            in_rows = min(h, (n - 1) * sh + kh) if kh * kw > 1 else n
            st["band"] = [r, n]
            st["gemm_uops_ideal"] = -(-o * cg * kh * kw * n * wo * B // cfg.macs_per_cycle)
            st["min_dram_bytes"] = int((B * c * in_rows * wd + B * o * n * wo) * cfg.INP_WIDTH // 8
                                       + weight_bytes(cfg, w) + bias_bytes)
            traces[n] = lo.trace
        out.append(RowBands(r, traces[r], traces.get(ho % r)))
    return out


def act_layout(cfg: VTAConfig, lay: SlotLayout) -> SlotLayout:
    """``lay`` (an int8 activation layout) with the values of ``cfg``'s ``INP_WIDTH`` (=
    ``OUT_WIDTH``): unchanged at 8 bits, ``elem_bytes`` 2 at 16, ``int4`` (two values per
    byte) at 4."""
    if cfg.INP_WIDTH == 16:
        return replace(lay, elem_bytes=2)
    if cfg.INP_WIDTH == 4:
        return replace(lay, int4=True)
    return lay


def lower_dense(cfg: VTAConfig, uid: str, k: int, w: np.ndarray, bias: np.ndarray,
                attrs: dict) -> LoweredOp:
    """Lower ``qdense`` (x ``[N, k]``, w ``[M, k]``) as a 1x1 conv on a 1x1 image (``attrs``
    as for :func:`lower_conv`, per-channel ``shift``/``round`` of ``M`` ints included)."""
    a = dict(attrs)
    a.update(kernel=(1, 1), strides=(1, 1), pads=(0, 0, 0, 0), groups=1)
    return lower_conv(cfg, uid, (k, 1, 1), w.reshape(w.shape[0], k, 1, 1), bias, a)
