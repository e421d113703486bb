"""Lowering of ``qconv2d`` and ``qdense`` to a relocatable VTA program (:class:`Trace`).

:func:`lower_conv` describes the layer (:class:`~.conv_plan.ConvLayer`), runs the planning
passes of :mod:`.conv_plan` (:func:`~.conv_plan.plan_conv`, a printable
:class:`~.conv_plan.ConvPlan`; the caller's choices are :class:`~.options.ConvOptions`)
and emits the plan with :func:`~.conv_emit.emit_conv`, which decides nothing.

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
   under an output-block loop, :func:`~.conv_schedule._ob_loop`).  INP/WGT regions alternate between two
   virtual threads per step, or INP regions per tile (:func:`~.conv_plan.plan_inputs`), and ACC
   regions per tile (two, or four bank-aligned ones for a store-heavy conv on a REQ engine
   core: :func:`~.tiling.acc_regions`), with the token pattern of docs/runtime.md.  On a
   REQ engine core the last steps of the last tile run per output block (GEMMs, REQ on
   the engine, STORE), or, when every output block completes in one step (depthwise),
   each block's REQ follows its step; docs/compiler.md.
3. Requantize on the ALU: ADD bias (+round), SHR by ``shift`` (negative = left), MAX
   ``clip_lo``, MIN ``clip_hi``; STORE (the truncation to ``OUT_WIDTH`` is lossless after
   the clip).
   With ``ALU_REQUANT`` the four are one bias-fused ALU REQ, a clearing one
   (``ConvOptions.clearing_req``): results to OUT for the STORE, the tile's ACC entries to 0.
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
on the ALU (with ``ALU_REQUANT`` the MAX/MIN are one REQ of shift 0).  On an
``ALU_REQUANT`` core, when no value can wrap (:func:`channel_align`), the shifts are
aligned to ``s_max = max(shift)`` instead: the shift rows hold ``shift[o] - s_max <= 0``
(a left shift by ``k[o]``), the bias rows ``(bias + round) << k[o]``, and the epilogue is
the tensor SHR (blocks whose rows are all 0 skip it) then the scalar one with shift
``s_max``: one bias-fused clearing REQ, with the REQ engine forms (the REQ per step, the
streamed last steps, the bank split).  ``bias_load`` works too: the shift amounts are
loaded once to ``[OB, 2*OB)``, the tiles start at the (unscaled) bias.  On a
``REQ_LANE_SHIFT`` core (:func:`channel_lanes`) the ``b`` constant is instead ``OB`` blocks
of lane words ``req_lane_word(bias + round[o], shift[o])`` (``OB`` reserved entries) and
the epilogue one per-lane REQ (shift field ``REQ_LANE``) reading them, planned exactly as
a scalar requantize (clearing, the REQ engine forms); with ``bias_load`` the lane words
(bias 0) follow the bias blocks and are loaded once to ``[0, OB)``; a channel whose
``bias + round`` does not fit its word sends the layer to the forms above.  Tuples whose
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
and multiplied.  On a ``DEPTHWISE_TAPS`` = T core a depthwise conv (:func:`depthwise_taps`)
runs on depthwise GEMMs instead (docs/isa.md "Depthwise GEMM"): one weight tile per
(channel block, kernel row ``ky``, tap chunk ``kc``) holding ``w[c, ky, kc*T + t]`` in row
``c``, column ``t`` (:func:`~.pack.pack_depthwise`), and per output pixel one micro-op per
``(ky, kc)`` reading the T consecutive INP entries from input pixel ``(y*sy + ky, x*sx +
kc*T)``: the tile's input window holds each input row's pixels side by side (as for every
conv), ``ceil(KW/T)*T - KW`` columns wider, so the last chunk's taps lie in it (LOADed or
padded: their weights are 0).  ``kh * ceil(kw/T)`` micro-ops per pixel instead of
``kh * kw`` (3x3, T 3: 3 instead of 9; 5x5: 10 instead of 25).
"""

from __future__ import annotations

from dataclasses import replace
from typing import NamedTuple

import numpy as np

from ..hw.config import VTAConfig
from ..hw.isa import LIMITS, REQ_LANE, REQ_LOWER_BOUNDS, ISAError, req_lane_word
from ..runtime.artifact import RowBands, SlotLayout, TraceBuilder, token_fault
from ..runtime.cpu_ops import pack_int4
from .errors import CompileError
from .lower_common import (LoweredOp, dram_stats, emit_kernel, fit_queues, plan_for, requant_alu,
                           req_shift_fits)
from .conv_emit import emit_conv
from .conv_plan import ConvLayer, ConvPlan, _EmptyWindow, plan_conv
from .options import ConvOptions, LowerOptions
from .pack import ceil_div, pack_bias, pack_depthwise, pack_weights

__all__ = ["lower_conv", "lower_dense", "ConvPlan", "emit_conv", "act_layout",
           "LoweredOp", "emit_kernel", "requant_alu", "plan_for", "use_im2col", "lower_conv_bands",
           "band_rows", "bandable", "channel_requant", "channel_align", "channel_lanes",
           "explain_node", "depthwise_taps"]


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


def channel_align(cfg: VTAConfig, w: np.ndarray, bias: np.ndarray, attrs: dict,
                  pcq) -> np.ndarray | None:
    """The aligned form of a per-channel requantize (``pcq = (shift, round)`` of
    :func:`channel_requant`), or None: ``k[o] = max(shift) - shift[o]`` (int64 ``[O]``).

    ``clip((acc + B[o]) >> s[o]) == clip(((acc << k[o]) + (B[o] << k[o])) >> max(s))``
    exactly (``B = bias + round``; for ``s[o] > 0`` the floor shifts compose, for
    ``s[o] <= 0`` both sides are ``(acc + B) << -s[o]``), so the epilogue is a tensor SHR
    by ``-k[o]`` (a left shift) and one fused REQ of shift ``max(s)`` with the bias rows
    ``B << k`` (or, with the bias loaded first, REQ on ``(acc + B) << k``).  Only on an
    ``ALU_REQUANT`` core with a REQ clip and a REQ shift, and only when no value can wrap
    at ``ACC_WIDTH``: for every channel ``(G[o] + |B[o]|) << (k[o] + max(0, -max(s)))``
    below ``2**(ACC_WIDTH-1)``, ``G[o] = sum|w[o]| * 2**(INP_WIDTH-1)`` (every input),
    which bounds every partial sum too.  (On a ``REQ_LANE_SHIFT`` core ``max(s) = -32``
    is no REQ shift: :func:`~.lower_common.req_shift_fits`.)"""
    lo, hi = int(attrs["clip_lo"]), int(attrs["clip_hi"])
    shifts, rounds = pcq
    smax = int(shifts.max())
    if not (cfg.ALU_REQUANT and lo in REQ_LOWER_BOUNDS and lo <= hi <= 127
            and req_shift_fits(smax, cfg.REQ_LANE_SHIFT)):
        return None
    k = smax - shifts
    g = np.abs(w.astype(np.int64)).reshape(w.shape[0], -1).sum(axis=1) << (cfg.INP_WIDTH - 1)
    bnd = g + np.abs(bias.astype(np.int64) + rounds)
    lift = np.minimum(k + max(0, -smax), 62)
    if (bnd > np.right_shift((1 << (cfg.ACC_WIDTH - 1)) - 1, lift)).any():
        return None
    return k


def channel_lanes(cfg: VTAConfig, bias: np.ndarray, attrs: dict, pcq,
                  bias_load: bool = False) -> np.ndarray | None:
    """The per-lane REQ form of a per-channel requantize (``pcq = (shift, round)`` of
    :func:`channel_requant`) on a ``REQ_LANE_SHIFT`` core, or None: the int64 ``[O]``
    lane words ``req_lane_word(bias[o] + round[o], shift[o])``
    (:func:`~vtaforge.hw.isa.req_lane_word`; with ``bias_load``, the tiles starting at
    ``bias + round``, ``req_lane_word(0, shift[o])``), so the epilogue is one REQ of shift
    field :data:`~vtaforge.hw.isa.REQ_LANE` reading them as its tensor operand:
    ``clip((acc + B[o]) >> s[o])``, the unaligned sequence (ADD bias, SHR by the shift
    rows, clip) in one instruction, so exact wherever that is.  None without the option,
    without a REQ clip (``clip_lo`` -128, 0 or -8, ``clip_hi`` <= 127), or when a
    channel's ``bias + round`` (±``2**(ACC_WIDTH-7)``) or shift does not fit its word
    (the lowering then takes the aligned or unaligned form)."""
    lo, hi = int(attrs["clip_lo"]), int(attrs["clip_hi"])
    if not (cfg.REQ_LANE_SHIFT and lo in REQ_LOWER_BOUNDS and lo <= hi <= 127):
        return None
    shifts, rounds = pcq
    b = np.zeros_like(shifts) if bias_load else np.asarray(bias, np.int64) + rounds
    try:
        return np.asarray(req_lane_word(b, shifts, cfg.ACC_WIDTH), np.int64)
    except ISAError:
        return None


def _planned_bias_bytes(o: int, per_channel: bool, lane: bool, bias_load: bool) -> int:
    """DRAM bytes of a conv's bias constant before it is packed (:func:`_bias_bytes` counts
    the packed one): ``o`` int32 words, twice that with per-channel shift rows (a
    per-channel requantize without lane words, or with ``bias_load``, whose lane words sit
    behind the bias rows)."""
    return 4 * o * (2 if per_channel and (not lane or bias_load) else 1)


def lower_conv(cfg: VTAConfig, uid: str, in_chw: tuple, w: np.ndarray, bias: np.ndarray,
               attrs: dict, *, pre_pad: bool | None = None,
               im2col: bool | None = None, out_rows: int | None = None, tile_inp: bool = True,
               max_acc_regions: int | None = None, options: ConvOptions | None = None,
               explain: list | None = None) -> LoweredOp:
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
        out_rows: the height (rows) of the destination's channel planes, ``>=`` this conv's
            output height ``Ho`` (default ``Ho``): the program stores its ``Ho`` rows at the
            top of planes of ``out_rows`` rows (the ``y`` slot and its batch-block
            relocation are of that taller tensor), so a row band's program writes into the
            full output once its ``y`` slot is pointed at the band's first row
            (:func:`lower_conv_bands`).
        tile_inp, max_acc_regions: token-queue room.  Placing inputs by tile
            (:func:`~.conv_plan.plan_inputs`) can need more tokens outstanding than shallow
            token queues hold (a tile's every step frees its input region for the tile after
            next: ``steps per tile`` compute->load tokens), and so can ``k`` ACC regions
            (the store frees each for the tile ``k`` tiles later: with one-token queues
            four regions deadlock).  A conv whose trace does not fit ``TOKEN_QUEUE_DEPTH``
            (:func:`~vtaforge.runtime.artifact.token_fault`) is lowered again with inputs
            placed by step (``tile_inp=False``), then with at most half as many ACC
            regions (``max_acc_regions``) each time, down to one; deep queues (every
            preset) never take these steps, so their programs are unchanged.
        options: the lowering's choices (:class:`~.options.ConvOptions`, ``bias_load``
            among them; default ``ConvOptions.for_config(cfg)``).
        explain: a list to which the final :class:`ConvPlan` is appended (``vtaforge compile
            --explain``).
    Raises:
        CompileError: ``mult != 1`` without ``ALU_MUL`` or without an overflow-free
            sequence, pads > 15, no tile fits, ``out_rows < Ho``; a per-channel
            requantize refused by :func:`channel_requant`.
    """
    opt = ConvOptions.for_config(cfg) if options is None else options
    if not weights_fit(cfg, w):
        raise CompileError(f"{uid}: {w.dtype} weights on a core with WGT_WIDTH "
                           f"{cfg.WGT_WIDTH}" + (" (int4: int8 values in [-8, 7])"
                                                 if cfg.WGT_WIDTH == 4 else ""))
    c, h, wd = in_chw
    o, _, kh, kw = w.shape
    groups = int(attrs.get("groups", 1))
    if im2col is None:
        im2col = use_im2col(cfg, c, groups, kh, kw)
    if im2col:
        return _lower_im2col(cfg, uid, in_chw, w, bias, attrs, out_rows=out_rows,
                             options=opt, explain=explain)
    kw_ = dict(out_rows=out_rows, options=opt, explain=explain)
    node_attrs = attrs
    attrs, pcq = channel_requant(cfg, uid, attrs, o)
    mplan = plan_for(cfg, uid, attrs, int(np.prod(w.shape[1:])) * (1 << (cfg.INP_WIDTH - 1)) * (
        1 << (cfg.WGT_WIDTH - 1)) + int(np.abs(np.asarray(bias, np.int64)).max(initial=0)))
    lanes = None if pcq is None else channel_lanes(cfg, bias, attrs, pcq, opt.bias_load)
    align = None if pcq is None or lanes is not None else channel_align(cfg, w, bias, attrs,
                                                                        pcq)
    ly, xl, yl, wpk = _layer(cfg, uid, in_chw, w, attrs, pcq is not None, mplan, pre_pad,
                             out_rows, opt, align, lanes is not None)
    try:
        plan = plan_conv(cfg, ly, wpk, opt, tile_inp=tile_inp, max_acc_regions=max_acc_regions)
    except _EmptyWindow:
        if ly.pre_pad:
            raise CompileError(f"{uid}: empty input window") from None  # pragma: no cover
        return lower_conv(cfg, uid, in_chw, w, bias, attrs, pre_pad=True, im2col=False,
                          tile_inp=tile_inp, max_acc_regions=max_acc_regions, **kw_)
    tb = TraceBuilder(uid, {"x": xl.block_bytes, "y": yl.block_bytes})
    emit_conv(cfg, tb, plan, attrs, mplan)
    tr = tb.trace
    tl = plan.tiling.tiling
    if (plan.inputs is not None or tl.acc_nvt > 1) and token_fault(tr, cfg.TOKEN_QUEUE_DEPTH):
        return lower_conv(cfg, uid, in_chw, w, bias, node_attrs, pre_pad=pre_pad, im2col=False,
                          tile_inp=False, max_acc_regions=tl.acc_nvt if plan.inputs is not None
                          else tl.acc_nvt // 2, **kw_)
    if explain is not None:
        explain.append(plan)
    tr.stats = _stats(cfg, plan, w)
    # the bias carries the rounding constant (the plan's pre_add with a multiplier; one
    # per channel, and the shift amounts behind the bias blocks, for a per-channel one)
    wdata = np.ascontiguousarray(wpk.data[plan.weights.order])
    if lanes is not None:   # per-lane REQ: the lane words (behind the bias, with bias_load)
        bconst = pack_bias(lanes, 0, cfg.BATCH, cfg.BLOCK_OUT)
        if opt.bias_load:
            bconst = np.concatenate([pack_bias(bias, pcq[1], cfg.BATCH, cfg.BLOCK_OUT), bconst])
    elif pcq is None:
        rnd = int(attrs["round"]) if mplan is None else mplan.pre_add
        bconst = pack_bias(bias, rnd, cfg.BATCH, cfg.BLOCK_OUT)
    elif align is None:
        bconst = pack_bias(bias, pcq[1], cfg.BATCH, cfg.BLOCK_OUT, shift=pcq[0])
    else:   # aligned: the bias rows B << k (unless the tiles load B), shift rows -k
        b64 = bias.astype(np.int64) + pcq[1]
        bconst = pack_bias(b64 if opt.bias_load else b64 << align, np.zeros(o, np.int64),
                           cfg.BATCH, cfg.BLOCK_OUT, shift=-align)
    consts = {"w": pack_int4(wdata) if cfg.WGT_WIDTH == 4 else wdata, "b": bconst}
    return fit_queues(cfg, LoweredOp(tr, consts, {"x": xl, "y": yl}))


def _lower_im2col(cfg: VTAConfig, uid: str, in_chw: tuple, w: np.ndarray, bias: np.ndarray,
                  attrs: dict, **kwargs) -> LoweredOp:
    """:func:`lower_conv` as a 1x1 conv over the im2col'd input (``[C*kh*kw, Ho, Wo]``,
    built on the host); the ``x`` slot's layout carries ``im2col``."""
    c, h, wd = in_chw
    o, _, kh, kw = w.shape
    groups = int(attrs.get("groups", 1))
    if groups != 1:
        raise CompileError(f"{uid}: im2col lowering needs groups == 1, got {groups}")
    sh, sw = attrs["strides"]
    pt, pl, pb, pr = attrs["pads"]
    B = cfg.BATCH
    k = c * kh * kw
    ho = (h + pt + pb - kh) // sh + 1
    wo = (wd + pl + pr - kw) // sw + 1
    a1 = dict(attrs, kernel=(1, 1), strides=(1, 1), pads=(0, 0, 0, 0), groups=1)
    lo = lower_conv(cfg, uid, (k, ho, wo), np.ascontiguousarray(w.reshape(o, k, 1, 1)),
                    bias, a1, pre_pad=False, im2col=False, **kwargs)
    xl = act_layout(cfg, SlotLayout((c, h, wd), B, cfg.BLOCK_IN,
                                    im2col=(kh, kw, sh, sw, pt, pl, pb, pr)))
    assert xl.block_bytes == lo.layouts["x"].block_bytes
    lo.layouts["x"] = xl
    bias_bytes = _bias_bytes(cfg, lo, o)
    st = lo.trace.stats
    st["im2col"] = [c, kh, kw]
    st.update(dram_stats(B * c * h * wd * cfg.INP_WIDTH // 8 + weight_bytes(cfg, w)
                         + bias_bytes, B * o * ho * wo * cfg.INP_WIDTH // 8))
    st["host_im2col_bytes"] = int(xl.block_bytes)
    return lo


def _bias_bytes(cfg: VTAConfig, lo: LoweredOp, o: int) -> int:
    """DRAM bytes of a lowered conv's bias constant as the stats count them: 4 per output
    channel and row of ``b`` per output block (1, or 2 with the shift or lane rows)."""
    return 4 * o * (lo.consts["b"].shape[0] // ceil_div(o, cfg.BLOCK_OUT))


def _layer(cfg: VTAConfig, uid: str, in_chw: tuple, w: np.ndarray, attrs: dict,
           per_channel: bool, mplan, pre_pad, out_rows, opt: ConvOptions,
           align: np.ndarray | None = None, lane: bool = False):
    """``(ConvLayer, x layout, y layout, packed weights)`` of a direct (not im2col) conv;
    ``align``: :func:`channel_align`'s ``k`` of an aligned per-channel requantize;
    ``lane``: a per-channel requantize as one per-lane REQ (:func:`channel_lanes`).

    Raises:
        CompileError: pads > 15 (:func:`window_geometry`), ``out_rows`` below ``Ho``.
    """
    B, BI, BO = cfg.BATCH, cfg.BLOCK_IN, cfg.BLOCK_OUT
    c, h, wd = in_chw
    o, _, kh, kw = w.shape
    groups = int(attrs.get("groups", 1))
    sh, sw = attrs["strides"]
    geo = window_geometry(uid, (c, h, wd), o, (kh, kw), (sh, sw), tuple(attrs["pads"]), B, BI,
                          BO, pre_pad)
    xl, yl, ho, wo = act_layout(cfg, geo.xl), act_layout(cfg, geo.yl), geo.ho, geo.wo
    hpl = ho if out_rows is None else int(out_rows)
    if hpl < ho:
        raise CompileError(f"{uid}: out_rows {hpl} is below the output height {ho}")
    if hpl != ho:
        yl = act_layout(cfg, SlotLayout((o, hpl, wo), B, BO))
    pt, pl, pb, pr = geo.pads
    hp, wp = xl.hw
    taps = depthwise_taps(cfg, c, w.shape, groups, pr)
    wpk = pack_depthwise(w, BO, taps) if taps else pack_weights(w, groups, BO, BI)
    nob = wpk.n_ob
    span = wpk.n_ib if groups == 1 else max(int(wpk.ibs(ob).max() - wpk.ibs(ob).min() + 1)
                                            for ob in range(nob) if wpk.ob_ranges[ob][1] > 0)
    # (the skipping LOAD's row pitch sh*wp must fit the x_stride field)
    row_skip = (kh == 1 and sh > 1 and pt == 0 and pb == 0 and sh * wp <= LIMITS.max("stride"))
    bias_bytes = _planned_bias_bytes(o, per_channel, lane, opt.bias_load)
    pc_shift, pc_shr = None, ()
    if lane:
        pc_shift, pc_shr = REQ_LANE, (False,) * nob
    elif align is not None:
        kb = np.zeros(nob * BO, np.int64)
        kb[:o] = align
        pc_shift = int(attrs["shift"][int(np.argmin(align))])
        pc_shr = tuple(bool(v) for v in kb.reshape(nob, BO).any(axis=1))
    mac_cycles = o * (c // groups) * kh * kw * ho * wo * B // cfg.macs_per_cycle
    bus_cycles = (((B * c * h * wd + B * o * ho * wo) * cfg.INP_WIDTH // 8
                   + weight_bytes(cfg, w) + bias_bytes) * 8 // cfg.BUS_WIDTH)
    ly = ConvLayer(uid, c, h, wd, o, kh, kw, sh, sw, groups, (pt, pl, pb, pr), hp, wp, ho, wo,
                   hpl, geo.pre_pad, row_skip, nob, wpk.n_ib,
                   kh * (-(-kw // taps) if taps else kw), span,
                   max(b - a for a, b in wpk.ob_ranges),
                   nob if lane else 2 * nob if per_channel else nob,
                   per_channel, bool(opt.bias_load),
                   requant_clears(cfg, attrs if pc_shift is None else dict(attrs, shift=pc_shift),
                                  mplan, per_channel and pc_shift is None, opt, lane),
                   mac_cycles, bus_cycles, pc_shift, pc_shr, taps, lane)
    return ly, xl, yl, wpk


def depthwise_taps(cfg: VTAConfig, c: int, w_shape: tuple, groups: int, pad_right: int) -> int:
    """The taps of the depthwise GEMMs a conv is lowered with, or 0 for ordinary GEMMs:
    ``cfg.DEPTHWISE_TAPS`` = T when it is set and the conv is depthwise (``groups == C ==
    O``, weights ``[C, 1, KH, KW]``) with ``KW >= 2`` (a 1-wide kernel gains nothing), and
    the window's right LOAD padding ``pad_right + ceil(KW/T)*T - KW`` (the last micro-op's
    taps past the kernel) fits the pad field (15)."""
    t = cfg.DEPTHWISE_TAPS
    o, cg, kh, kw = w_shape
    if not (t and groups == c == o and cg == 1 and kw >= 2):
        return 0
    ext = -(-kw // t) * t - kw
    return t if pad_right + ext <= LIMITS.max("pad") else 0


def _stats(cfg: VTAConfig, plan: ConvPlan, w: np.ndarray) -> dict:
    """The trace statistics of a lowered conv (tiling, features, ideal and planned GEMM
    micro-ops, minimum DRAM bytes)."""
    ly, tl, st = plan.layer, plan.tiling.tiling, plan.stats
    B = cfg.BATCH
    macs = ly.o * (ly.c // ly.groups) * ly.kh * ly.kw * ly.ho * ly.wo
    feat = {k: st[k] for k in ("bank_split", "stream_steps", "first_step_groups",
                               "inp_by_tile", "ob_loop_gemms", "retiled", "partial_resets",
                               "w_loads", "step_req")}
    bias_bytes = _planned_bias_bytes(ly.o, ly.per_channel, ly.pc_lane, ly.bias_load)
    return {"tiling": [tl.obn, tl.ibn, tl.th, tl.tw, tl.nvt, int(tl.resident)],
            "tiles": len(plan.tiles), "steps": len(plan.steps), "pre_pad": bool(ly.pre_pad),
            "row_skip": ly.row_skip, "acc_regions": tl.acc_nvt,
            "gemm_uops_ideal": -(-macs * B // cfg.macs_per_cycle),
            "gemm_uops_planned": st["gemm_uops"], "resets_skipped": st["resets_skipped"], **feat,
            **({"depthwise_taps": ly.taps} if ly.taps else {}),
            **dram_stats(B * ly.c * _read_extent(ly.h, ly.ho, ly.kh, ly.sh)
                         * _read_extent(ly.wd, ly.wo, ly.kw, ly.sw) * cfg.INP_WIDTH // 8
                         + weight_bytes(cfg, w) + bias_bytes,
                         B * ly.o * ly.ho * ly.wo * cfg.INP_WIDTH // 8)}


def requant_clears(cfg: VTAConfig, attrs: dict, mult_plan, per_channel: bool,
                   opt: ConvOptions, lane: bool = False) -> bool:
    """Whether each tile's requantize is one clearing bias-fused REQ (``ALU_REQUANT``, an
    8-bit clip, a shift in ``[-32, 31]`` (:func:`~.lower_common.req_shift_fits`), no
    multiplier, scalar or per-lane (``lane``), the bias not loaded): the condition under
    which :func:`~.lower_common.requant_alu` (or the per-lane REQ) clears (the emitter
    checks the two agree)."""
    lo, hi, shift = int(attrs["clip_lo"]), int(attrs["clip_hi"]), attrs["shift"]
    return bool(opt.clearing_req and cfg.ALU_REQUANT and not per_channel and not opt.bias_load
                and mult_plan is None and (lane or req_shift_fits(int(shift), cfg.REQ_LANE_SHIFT))
                and lo in REQ_LOWER_BOUNDS and lo <= hi <= 127)


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
                     bias: np.ndarray, attrs: dict, rows: list[int] | None = None, *,
                     options: ConvOptions | None = None) -> list[RowBands]:
    """Row-band variants of a :func:`bandable` conv (:class:`~.artifact.RowBands`).

    A band of ``r`` output rows is the same conv lowered as a 1x1 conv over ``r`` rows of
    its (im2col'd) input, ``[K, r, Wo]`` (``K = C*kh*kw``, or ``C`` for a 1x1 conv), with
    ``out_rows = Ho`` so it stores into the full ``[O, Ho, Wo]`` output; its packed
    constants are those of :func:`lower_conv` of the whole conv (the same reshaped
    weights and bias, and the shift amounts of a per-channel requantize).  Trace
    statistics per band: ``gemm_uops_ideal`` of the band's MACs and the minimum DRAM
    traffic (:func:`~.lower_common.dram_stats`): reads of the input rows it reads (raw input
    rows for im2col), weights and bias, writes of its output rows.

    Args:
        in_chw, w, bias, attrs: as for :func:`lower_conv`.
        rows: band heights (default :func:`band_rows` of ``Ho``), each ``1 <= r < Ho``.
        options: as for :func:`lower_conv`.
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
                            pre_pad=False, im2col=False, out_rows=ho,
                            **({} if options is None else {"options": options}))
            st = lo.trace.stats
            bias_bytes = _bias_bytes(cfg, lo, o)
            in_rows = min(h, (n - 1) * sh + kh) if kh * kw > 1 else n
            st["band"] = [r, n]
            st["gemm_uops_ideal"] = -(-o * cg * kh * kw * n * wo * B // cfg.macs_per_cycle)
            st.update(dram_stats(B * c * in_rows * wd * cfg.INP_WIDTH // 8
                                 + weight_bytes(cfg, w) + bias_bytes,
                                 B * o * n * wo * cfg.INP_WIDTH // 8))
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
                attrs: dict, **kwargs) -> LoweredOp:
    """Lower ``qdense`` (x ``[N, k]``, w ``[M, k]``) as a 1x1 conv on a 1x1 image (``attrs``
    as for :func:`lower_conv`, per-channel ``shift``/``round`` of ``M`` ints included;
    ``kwargs``: :func:`lower_conv`'s ``options`` and ``explain``)."""
    a = dict(attrs)
    a.update(kernel=(1, 1), strides=(1, 1), pads=(0, 0, 0, 0), groups=1)
    return lower_conv(cfg, uid, (k, 1, 1), w.reshape(w.shape[0], k, 1, 1), bias, a, **kwargs)


def explain_node(cfg: VTAConfig, graph, node, options: LowerOptions | None = None) -> str:
    """The plan of a VTA-placed ``qconv2d`` / ``qdense`` node of a quantized graph, as
    :meth:`~.conv_plan.ConvPlan.describe` prints it (the node lowered again, as
    :func:`~.compile.lower_graph` lowers it with ``options``, default
    ``LowerOptions.for_config(cfg)``; ``vtaforge compile --explain``).

    Raises:
        CompileError: the node is not a conv or dense layer, or its lowering fails.
    """
    x, w, b = node.inputs
    shape = graph.types[x].shape
    out: list = []
    opt = LowerOptions.resolve(options, cfg).conv
    if node.op == "qconv2d":
        lower_conv(cfg, node.name, tuple(shape[1:]), graph.constants[w], graph.constants[b],
                   node.attrs, options=opt, explain=out)
    elif node.op == "qdense":
        lower_dense(cfg, node.name, shape[1], graph.constants[w], graph.constants[b],
                    node.attrs, options=opt, explain=out)
    else:
        raise CompileError(f"node '{node.name}' ({node.op}) is not a conv or dense layer")
    text = out[-1].describe()
    if node.op == "qconv2d" and out[-1].layer.c != shape[1]:
        kh, kw = graph.constants[w].shape[2:]
        text += f"\n  (im2col on the host: {shape[1]}x{kh}x{kw} patches as {out[-1].layer.c} channels)"
    return text
