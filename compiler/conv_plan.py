"""The conv lowering's plan: small planning passes, each returning a typed, printable plan,
that :func:`plan_conv` chains into one :class:`ConvPlan`; :func:`~.conv_emit.emit_conv`
emits it.  Passes, in order (each a pure function of the layer and the plans before it):

1. :func:`plan_tiling` -- tile sizes (:func:`~.tiling.conv_tiling`, retiled for resident
   weights), the tiles and their reduction steps (one input block per step where that
   hides the loads): :class:`TilingPlan`.
2. :func:`plan_inputs` -- INP placement by tile (:class:`InpPlan`) or by step (``None``).
3. :func:`plan_acc` -- per tile: its ACC region, each output block's first accumulator
   entry (side by side or split over the banks), the input window, and on a REQ engine
   core how its end overlaps the engine's requantize: :class:`TilePlan`.
4. :func:`~.conv_schedule.plan_weights` -- weight order and per-step weight LOADs.
5. :func:`~.conv_schedule.plan_resets` -- how each tile's accumulator starts.
6. :func:`~.conv_schedule.schedule_steps` -- per step the token waits and pushes, GEMMs,
   the stream of per-block GEMMs and REQs (with its lag), the REQs after it.

:class:`~.options.ConvOptions` holds the lowering's choices (passed in by the caller,
:meth:`~.options.ConvOptions.for_config` gives a config's defaults).  ``str(plan)`` of any
plan is a short readable description; ``vtaforge compile --explain`` prints one per conv.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

import numpy as np

from ..hw.config import MemType, VTAConfig
from ..hw.isa import LIMITS
from .conv_schedule import (Gemm, StepPlan, TileEnd, TileSetup, WeightLoad, WeightPlan, _beats,
                            plan_resets, plan_weights, schedule_steps)
from .options import ConvOptions
from .tiling import ConvTiling, acc_regions, candidates, conv_tiling

__all__ = ["ConvLayer", "TilingPlan", "InpPlan", "TilePlan", "WeightPlan",
           "WeightLoad", "TileSetup", "StepPlan", "Gemm", "TileEnd", "ConvPlan", "plan_conv",
           "plan_tiling", "plan_inputs", "plan_acc", "plan_weights", "plan_resets",
           "schedule_steps"]


@dataclass(frozen=True)
class ConvLayer:
    """The facts of one conv that the passes read (elements, blocks; after im2col and
    pre-padding): input ``c x h x wd`` (``hp x wp`` as stored, pads still to apply
    ``pads`` = (top, left, bottom, right)), output ``o x ho x wo`` into planes of ``hpl``
    rows, kernel ``kh x kw`` stride ``sh x sw``, ``groups``; ``nob``/``nib`` output/input
    channel blocks, ``kk = kh*kw``; ``reserved`` accumulator entries before the ACC regions;
    ``row_skip`` (a 1x1 conv of vertical stride > 1 loads only the rows it reads);
    ``per_channel`` requantize; ``bias_load``; ``clears`` (each tile's requantize is one
    clearing REQ); ``mac_cycles`` / ``bus_cycles`` (ideal GEMM and DRAM cycles);
    ``pc_shift`` (a per-channel requantize aligned to one fused REQ: its common shift
    ``max(shift)``, else None) and ``pc_shr`` (then, per output block, whether its shift
    rows are not all 0, i.e. it needs the tensor SHR before the REQ); ``pc_lane``: a
    per-channel requantize as one per-lane REQ (``REQ_LANE_SHIFT`` core: ``pc_shift`` is
    :data:`~vtaforge.hw.isa.REQ_LANE`, ``pc_shr`` all False, the ``nob`` reserved rows hold
    the lane words, :func:`~vtaforge.hw.isa.req_lane_word`), planned as a scalar
    requantize; ``taps``: a depthwise
    conv lowered with depthwise GEMMs of ``DEPTHWISE_TAPS`` taps (docs/isa.md "Depthwise
    GEMM"; 0: not), whose stored block is ``kh x kcols`` WGT entries (``kcols =
    ceil(kw/taps)`` tap chunks per kernel row; ``kk = kh * kcols``) and whose window spans
    ``kwin = kcols * taps`` kernel columns."""

    uid: str
    c: int
    h: int
    wd: int
    o: int
    kh: int
    kw: int
    sh: int
    sw: int
    groups: int
    pads: tuple
    hp: int
    wp: int
    ho: int
    wo: int
    hpl: int
    pre_pad: bool
    row_skip: bool
    nob: int
    nib: int
    kk: int
    span: int
    per_ob: int
    reserved: int
    per_channel: bool
    bias_load: bool
    clears: bool
    mac_cycles: int
    bus_cycles: int
    pc_shift: int | None = None
    pc_shr: tuple = ()
    taps: int = 0
    pc_lane: bool = False

    @property
    def kcols(self) -> int:
        """Weight entries (and GEMM micro-ops) per kernel row: ``kw``, or with depthwise
        GEMMs the tap chunks ``ceil(kw / taps)``."""
        return -(-self.kw // self.taps) if self.taps else self.kw

    @property
    def kwin(self) -> int:
        """Kernel columns an output pixel's micro-ops read: ``kw``, or with depthwise GEMMs
        ``kcols * taps`` (the last chunk's taps past ``kw`` read real or padded entries
        that zero weights multiply)."""
        return self.kcols * self.taps if self.taps else self.kw

    def __str__(self) -> str:
        return (f"conv {self.uid!r}: {self.c}x{self.h}x{self.wd} -> {self.o}x{self.ho}x{self.wo}, "
                f"{self.kh}x{self.kw}/{self.sh}x{self.sw}"
                + (f" groups {self.groups}" if self.groups > 1 else "")
                + f", {self.nob} out x {self.nib} in blocks"
                + (", row skip" if self.row_skip else "") + (", pre-padded" if self.pre_pad else "")
                + (", per-channel requantize" if self.per_channel else "")
                + (" (one per-lane REQ)" if self.pc_lane else
                   f" (aligned to REQ shift {self.pc_shift})" if self.pc_shift is not None
                   else "")
                + (", bias load" if self.bias_load else "")
                + (f", depthwise GEMMs of {self.taps} taps ({self.kk} micro-ops per pixel, "
                   f"not {self.kh * self.kw})" if self.taps else ""))

def _window(th: int, tw: int, sh: int, sw: int, kh: int, kw: int,
            row_skip: bool) -> tuple[int, int]:
    """INP rows held per input block and columns of a tile of ``th`` x ``tw`` outputs:
    with ``row_skip`` the window's every ``sh``-th row (one per output row), else every
    row of the window; the LOADs and the token plan both place inputs by these."""
    return (th if row_skip else (th - 1) * sh + kh), (tw - 1) * sw + kw

# ------------------------------------------------------------------ 1. tiling
def _one_block_step_hides(cfg: VTAConfig, tile, kk: int, sh: int, sw: int, kh: int,
                          kw: int, request_cycles: int, whole_image: bool = False,
                          w_runs: int = 1) -> bool:
    """Whether a one-input-block step of ``tile`` (streamed weights) loads its weights and
    input window in no more cycles than its GEMMs take, allowing ``request_cycles`` per DMA
    request (``w_runs`` weight runs; one per input row, or one when the window is the
    whole unpadded image, ``whole_image``).  Cycles: bus beats (``BUS_WIDTH`` bits each)
    against one GEMM micro-op per cycle."""
    ob0, ob1, y0, y1, x0, x1, _ = tile
    obn, th, tw = ob1 - ob0, y1 - y0, x1 - x0
    rows, cols = (th - 1) * sh + kh, (tw - 1) * sw + kw
    load = (obn * kk * _beats(cfg, MemType.WGT) + rows * cols * _beats(cfg, MemType.INP)
            + (w_runs + (1 if whole_image else rows)) * request_cycles)
    return load <= obn * kk * th * tw


def _resident_retile(cfg: VTAConfig, tl: ConvTiling, ly: ConvLayer,
                     opt: ConvOptions) -> ConvTiling:
    """A tiling with resident weights whose first tile's one-input-block steps do not hide
    their loads on the ideal bus (:func:`_one_block_step_hides`, weights in requests of
    ``w_chunk_beats``, ``retile_request_cycles`` per request): the same tiling with the
    most output blocks per tile ``obn' < obn`` whose tile, as tall as the ACC region and
    one input block's window in an INP region allow and taller than ``tl.th``, hides them
    (the input is then read once per output block chunk).  ``tl`` when it hides, or when
    no such ``obn'`` does."""
    kk, sh, sw, kh, kw = ly.kk, ly.sh, ly.sw, ly.kh, ly.kwin
    w_beats = _beats(cfg, MemType.WGT)
    acc_half = acc_regions(cfg, ly.nob, tl.acc_nvt, ly.reserved)[1]
    inp_half = cfg.INP_DEPTH // tl.nvt

    def hides(obn, th):
        runs = -(-obn * kk * w_beats // opt.w_chunk_beats)
        return _one_block_step_hides(cfg, (0, obn, 0, th, 0, tl.tw, None), kk, sh, sw, kh, kw,
                                     opt.retile_request_cycles, w_runs=runs)
    if hides(tl.obn, tl.th):
        return tl
    for obn in [v for v in candidates(ly.nob) if v < tl.obn]:
        th = min(ly.ho, acc_half // (obn * tl.tw), LIMITS.max("iter") // tl.tw)
        rows_l, cols = _window(th, tl.tw, sh, sw, kh, kw, ly.row_skip)
        while th > tl.th and rows_l * cols > inp_half:
            th -= 1
            rows_l, cols = _window(th, tl.tw, sh, sw, kh, kw, ly.row_skip)
        if th > tl.th and hides(obn, th):
            return replace(tl, obn=obn, th=th)
    return tl


@dataclass(frozen=True)
class TilingPlan:
    """Tile sizes and tiles: ``tiling`` (:class:`~.tiling.ConvTiling`), whether it was
    ``retiled`` for resident weights, ``tiles`` ``(ob0, ob1, y0, y1, x0, x1, reds)`` with
    ``reds`` the reduction steps ``(i0, i1)`` (input blocks), ``one_block`` ("no", "first"
    or "all": which tiles reduce one input block per step), ``acc_bases`` (first entry of
    each ACC region) and ``steps`` ``(tile, (i0, i1))`` in order."""

    tiling: ConvTiling
    retiled: bool
    tiles: tuple
    one_block: str
    acc_bases: tuple
    steps: tuple

    def __str__(self) -> str:
        tl = self.tiling
        return (f"tiling: {tl.obn} out blocks x {tl.ibn} in blocks x {tl.th} rows x {tl.tw} "
                f"cols per tile, {tl.nvt} INP/WGT thread(s), {tl.acc_nvt} ACC region(s), "
                f"weights {'resident' if tl.resident else 'streamed'}"
                + (" (retiled)" if self.retiled else "")
                + f"; {len(self.tiles)} tile(s), {len(self.steps)} step(s)"
                + ("" if self.one_block == "no" else f", one-block steps: {self.one_block} tile(s)"))


def _tile_span(ly: ConvLayer, wpk):
    """A function ``obn -> int``: the most input blocks a tile of ``obn`` output blocks
    reads (the union of its output blocks' blocks, as :func:`_tiles` makes its reduction
    steps), for :func:`~.tiling.conv_tiling`'s cost of a grouped or depthwise conv."""
    ibs = [wpk.ibs(ob) for ob in range(ly.nob)]
    memo: dict[int, int] = {}

    def span(obn: int) -> int:
        if obn not in memo:
            memo[obn] = max(int(np.unique(np.concatenate(ibs[o0:o0 + obn])).size)
                            for o0 in range(0, ly.nob, obn))
        return memo[obn]
    return span


def _tiles(tl: ConvTiling, ly: ConvLayer, wpk) -> list:
    """The output tiles of ``tl`` and their reduction steps of ``tl.ibn`` input blocks."""
    tiles = []
    for ob0 in range(0, ly.nob, tl.obn):
        ob1 = min(ly.nob, ob0 + tl.obn)
        ibs = np.unique(np.concatenate([wpk.ibs(ob) for ob in range(ob0, ob1)]))
        if ibs.size == 0:
            ibs = np.array([0])
        lo, hi = int(ibs.min()), int(ibs.max()) + 1
        reds = tuple((i0, min(hi, i0 + tl.ibn)) for i0 in range(lo, hi, tl.ibn))
        for y0 in range(0, ly.ho, tl.th):
            for x0 in range(0, ly.wo, tl.tw):
                tiles.append((ob0, ob1, y0, min(ly.ho, y0 + tl.th), x0,
                              min(ly.wo, x0 + tl.tw), reds))
    return tiles


def plan_tiling(cfg: VTAConfig, ly: ConvLayer, wpk, opt: ConvOptions,
                max_acc_regions: int | None = None) -> TilingPlan:
    """Pass 1: the tiling (at most ``max_acc_regions`` ACC regions) and its tiles.

    The first tile reduces one input block per step, so its first GEMM waits for one
    block's input and weights, unless the layer's DRAM traffic takes over twice its MAC
    cycles (more, smaller loads only add request overhead there).  With resident weights
    every tile does; with streamed weights every tile does when such a step hides its load
    (:func:`_one_block_step_hides`).

    Raises:
        CompileError: no tile fits (:func:`~.tiling.conv_tiling`).
    """
    tl = tl0 = conv_tiling(cfg, ly.nob, ly.span, ly.ho, ly.wo, ly.kh, ly.kw, ly.sh, ly.sw,
                           len(wpk.blocks), ly.per_ob, ly.row_skip, ly.reserved,
                           quad_acc_ratio=opt.quad_acc_ratio, taps=ly.taps,
                           tile_span=(_tile_span(ly, wpk) if ly.groups > 1 and opt.tile_span
                                      else None),
                           merge_stores=opt.merge_stores and ly.hpl * ly.wo <= LIMITS.max("stride"))
    light = ly.bus_cycles <= 2 * ly.mac_cycles
    if tl.resident and ly.groups == 1 and light:
        tl = _resident_retile(cfg, tl, ly, opt)
    retiled = tl != tl0
    if max_acc_regions is not None and tl.acc_nvt > max_acc_regions:
        tl = replace(tl, acc_nvt=max_acc_regions)      # shallow token queues
    tiles = _tiles(tl, ly, wpk)

    def one_block_steps(tile):
        return tile[:6] + (tuple((i, i + 1) for a, b in tile[6] for i in range(a, b)),)

    one_block = "no"
    if light and len(tiles[0][6]) and max(b - a for a, b in tiles[0][6]) > 1:
        tiles[0] = one_block_steps(tiles[0])
        one_block = "first"
        whole = (opt.streamed_ib_major and ly.pads == (0, 0, 0, 0)
                 and _window(ly.ho, ly.wo, ly.sh, ly.sw, ly.kh, ly.kwin, ly.row_skip)
                 == (ly.hp, ly.wp) and tiles[0][2:6] == (0, ly.ho, 0, ly.wo))
        if tl.resident or _one_block_step_hides(
                cfg, tiles[0], ly.kk, ly.sh, ly.sw, ly.kh, ly.kwin, opt.stream_request_cycles,
                whole, 1 if opt.streamed_ib_major else tiles[0][1] - tiles[0][0]):
            tiles = [one_block_steps(tile) for tile in tiles]
            one_block = "all"
    acc_bases, _ = acc_regions(cfg, ly.nob, tl.acc_nvt, ly.reserved)
    steps = tuple((t, red) for t, tile in enumerate(tiles) for red in tile[6])
    return TilingPlan(tl, retiled, tuple(tiles), one_block, tuple(acc_bases), steps)


# ------------------------------------------------------------------ 2. inputs
@dataclass(frozen=True)
class InpPlan:
    """Input placement by tile (:func:`plan_inputs`): per step, its INP ``base`` entry,
    whether its loads first wait for a compute->load token (``pop_before``), and whether
    compute pushes one after it (``push_after``)."""

    base: tuple
    pop_before: tuple
    push_after: tuple

    def __str__(self) -> str:
        return (f"inputs: by tile ({sum(self.pop_before)} load wait(s) on compute over "
                f"{len(self.base)} steps)")


def plan_inputs(cfg: VTAConfig, ly: ConvLayer, tp: TilingPlan,
                tile_inp: bool = True) -> InpPlan | None:
    """Pass 2: place inputs by tile instead of by step when every tile's whole input window
    fits one INP region and the weights are resident (and ``tile_inp``): tile ``t`` uses
    region ``t % nvt`` and its steps lie side by side in it, so the next tile's loads need
    not wait for this tile's steps.

    Tokens: step ``s``'s loads wait for the latest earlier step ``j`` whose INP entries
    they overwrite, when no earlier wait covered ``j`` (compute runs in order); compute
    pushes a token after exactly those steps ``j`` and after the last step (the conv's end
    pops every token still owed).  ``None`` when placement by step applies (step ``s`` in
    region ``s % nvt``)."""
    tl = tp.tiling
    if not (tile_inp and tl.resident):
        return None
    inp_half = cfg.INP_DEPTH // tl.nvt
    spans = []          # per step: [lo, hi) INP entries
    for t, (ob0, ob1, y0, y1, x0, x1, reds) in enumerate(tp.tiles):
        rows_l, cols = _window(y1 - y0, x1 - x0, ly.sh, ly.sw, ly.kh, ly.kwin, ly.row_skip)
        per = rows_l * cols
        lo = reds[0][0]
        if (reds[-1][1] - lo) * per > inp_half:
            return None
        base0 = (t % tl.nvt) * inp_half
        spans += [(base0 + (i0 - lo) * per, base0 + (i1 - lo) * per) for i0, i1 in reds]
    n = len(spans)
    pop_before, push_after = [False] * n, [False] * n
    waited = -1
    for s_, (a, b) in enumerate(spans):
        j = max((k for k in range(s_) if spans[k][0] < b and a < spans[k][1]), default=-1)
        if j > waited:
            pop_before[s_], push_after[j], waited = True, True, j
    # and after the last step, which the end of the conv waits for
    push_after[-1] = True
    return InpPlan(tuple(a for a, _ in spans), tuple(pop_before), tuple(push_after))


# ------------------------------------------------------------------ 3. ACC regions
def _bank_order(cfg: VTAConfig, blk_addr: dict, n: int) -> list[int]:
    """Output blocks (``blk_addr``: block -> first accumulator entry, ``n`` entries each)
    in the order a streamed step runs them on a ``REQ_ENGINE`` core: blocks of the low and
    the high accumulator bank alternating while both last (the engine's REQ of one block
    then runs beside the next block's GEMMs on the other bank), then the rest, then the
    blocks that straddle the banks, each group ascending.  All in one bank: ascending."""
    half = cfg.ACC_DEPTH // 2
    lo, hi, mid = [], [], []
    for ob in sorted(blk_addr):
        a = blk_addr[ob]
        (lo if a + n <= half else hi if a >= half else mid).append(ob)
    k = min(len(lo), len(hi))
    return [ob for pair in zip(lo, hi) for ob in pair] + lo[k:] + hi[k:] + mid


@dataclass(frozen=True)
class TilePlan:
    """One output tile: output blocks ``[ob0, ob1)``, rows ``[y0, y1)``, columns
    ``[x0, x1)``, reduction steps ``reds``; ACC region ``avt`` from ``acc_base``;
    ``blk_addr`` (output block -> first accumulator entry, ``n_t = th*tw`` entries each;
    ``split`` over the two banks); its input window (``rows_l`` x ``cols`` per input block,
    from stored row ``ry0`` / column ``rx0``, ``ry1 - ry0`` x ``rx1 - rx0`` of them loaded
    with pads ``padv``; ``ystep`` INP entries per output row; ``full``: the whole stored
    image); ``ob_order`` (the order streamed blocks run); on a REQ engine core the last
    tile's ``n_stream`` final steps streamed per output block, or ``done_at`` (step ->
    output blocks it completes: each requantized after its step)."""

    t: int
    ob0: int
    ob1: int
    y0: int
    y1: int
    x0: int
    x1: int
    reds: tuple
    avt: int
    acc_base: int
    blk_addr: dict
    split: bool
    rows_l: int
    cols: int
    ry0: int
    ry1: int
    rx0: int
    rx1: int
    padv: tuple
    ystep: int
    full: bool
    ob_order: tuple
    n_stream: int
    done_at: dict = field(default_factory=dict)

    @property
    def obn(self) -> int:
        return self.ob1 - self.ob0

    @property
    def th(self) -> int:
        return self.y1 - self.y0

    @property
    def tw(self) -> int:
        return self.x1 - self.x0

    @property
    def n_t(self) -> int:
        return self.th * self.tw

    def blk_runs(self, b0: int, b1: int) -> list[tuple[int, int]]:
        """Runs ``[a, b)`` of output blocks in ``[b0, b1)`` that lie side by side."""
        out, a = [], b0
        for ob in range(b0 + 1, b1 + 1):
            if ob == b1 or self.blk_addr[ob] != self.blk_addr[ob - 1] + self.n_t:
                out.append((a, ob))
                a = ob
        return out

    def __str__(self) -> str:
        end = (f", REQ per step of {sum(map(len, self.done_at.values()))} block(s)"
               if self.done_at else f", last {self.n_stream} step(s) streamed per block"
               if self.n_stream else "")
        return (f"tile {self.t}: blocks {self.ob0}..{self.ob1 - 1} rows {self.y0}..{self.y1 - 1} "
                f"cols {self.x0}..{self.x1 - 1}, ACC region {self.avt} @ {self.acc_base}"
                + (" (bank split)" if self.split else "") + end)


def plan_acc(cfg: VTAConfig, ly: ConvLayer, tp: TilingPlan, inp: InpPlan | None,
             wb: _Blocks, opt: ConvOptions) -> tuple:
    """Pass 3: a :class:`TilePlan` per tile.

    Output blocks lie side by side from the region's first entry, or (a conv of one tile
    in one ACC region on a REQ engine core) the first half from there and the rest from
    the high bank's first entry, so the stream alternates banks.  On a REQ engine core
    (scalar requantize, or per-channel aligned to one REQ, or per-lane: ``pc_shift``)
    the last tile either requantizes each output block right after the
    step that completes it (``step_req``, when every block has entries in one step only)
    or streams as many final steps as it takes for their GEMMs to cover the output's
    write beats (at most one per INP region when regions alternate by step).

    Raises:
        _EmptyWindow: a tile's input window lies entirely in the padding (the caller
            lowers again with the input pre-padded).
    """
    tl, tiles = tp.tiling, tp.tiles
    pt, pl, _, _ = ly.pads
    half = cfg.ACC_DEPTH // 2
    engine_req = cfg.REQ_ENGINE and (not ly.per_channel or ly.pc_shift is not None)
    out = []
    for t, (ob0, ob1, y0, y1, x0, x1, reds) in enumerate(tiles):
        avt = t % tl.acc_nvt
        obn, th, tw = ob1 - ob0, y1 - y0, x1 - x0
        acc_base = tp.acc_bases[avt]
        rows = (th - 1) * ly.sh + ly.kh
        rows_l, cols = _window(th, tw, ly.sh, ly.sw, ly.kh, ly.kwin, ly.row_skip)
        iy0, ix0 = y0 * ly.sh - pt, x0 * ly.sw - pl
        ry0, ry1 = max(0, iy0), min(ly.hp, iy0 + rows)
        rx0, rx1 = max(0, ix0), min(ly.wp, ix0 + cols)
        if ry1 <= ry0 or rx1 <= rx0:
            raise _EmptyWindow(ly.uid)
        padv = (ry0 - iy0, iy0 + rows - ry1, rx0 - ix0, ix0 + cols - rx1)
        n_t = th * tw
        h_ = -(-obn // 2)
        split = bool(engine_req and len(tiles) == 1 and tl.acc_nvt == 1 and obn > 1
                     and acc_base + h_ * n_t <= half and half + (obn - h_) * n_t <= cfg.ACC_DEPTH)
        blk_addr = {ob: (half + (ob - ob0 - h_) * n_t if split and ob - ob0 >= h_
                         else acc_base + (ob - ob0) * n_t) for ob in range(ob0, ob1)}
        last = t == len(tiles) - 1
        done_at: dict = {}
        if opt.step_req and engine_req and last and obn > 1 and not ly.bias_load:
            steps_of: dict = {}
            for r_, (a_, b_) in enumerate(reds):
                for ob_, _, _ in wb.entries(ob0, ob1, a_, b_):
                    steps_of.setdefault(ob_, set()).add(r_)
            if len(steps_of) == obn and all(len(v) == 1 for v in steps_of.values()):
                for ob_, v in sorted(steps_of.items()):
                    done_at.setdefault(next(iter(v)), []).append(ob_)
        n_stream = 0
        if not done_at and engine_req and last and obn > 1:
            out_beats = obn * n_t * _beats(cfg, MemType.OUT)
            cap = len(reds) if inp is not None else min(len(reds), tl.nvt)
            covered = 0
            while n_stream < cap and (n_stream == 0 or covered < out_beats):
                a_, b_ = reds[len(reds) - 1 - n_stream]
                covered += ly.kk * n_t * len(wb.entries(ob0, ob1, a_, b_))
                n_stream += 1
        out.append(TilePlan(
            t, ob0, ob1, y0, y1, x0, x1, reds, avt, acc_base, blk_addr, split, rows_l, cols,
            ry0, ry1, rx0, rx1, padv, cols if ly.row_skip else ly.sh * cols,
            padv == (0, 0, 0, 0) and rows_l == ly.hp and cols == ly.wp,
            tuple(_bank_order(cfg, blk_addr, n_t)), n_stream,
            {k: tuple(v) for k, v in done_at.items()}))
    return tuple(out)


class _EmptyWindow(Exception):
    """A tile's input window lies entirely in the LOAD padding."""


class _Blocks:
    """The stored weight blocks of a packed conv (:func:`~.pack.pack_weights`) and each
    one's index, by ``(ob, ib)``."""

    def __init__(self, wpk):
        self.wpk = wpk
        self.index = {(int(a), int(b)): i for i, (a, b) in enumerate(wpk.blocks)}

    def entries(self, ob0: int, ob1: int, i0: int, i1: int) -> list:
        """A step's stored weight blocks: ``(ob, ib, block index)`` for output blocks
        ``[ob0, ob1)`` and input blocks ``[i0, i1)``, output-block-major."""
        return [(ob, ib, self.index[(ob, ib)]) for ob in range(ob0, ob1)
                for ib in self.wpk.ibs(ob) if i0 <= ib < i1]

# ------------------------------------------------------------------ the whole plan
_START = {"bias": "bias load", "skip": "already zero", "engine": "engine reset",
          "gemm": "GEMM reset"}


@dataclass(frozen=True, eq=False)
class ConvPlan:
    """Everything the emitter (:func:`~.conv_emit.emit_conv`) needs, decided: the layer,
    the options, and the plans of the passes (:func:`plan_conv`).  ``pops_owed``:
    compute->load waits at the end of the conv; ``stats``: what the lowering did (trace
    statistics).  ``str(plan)`` is :meth:`describe`."""

    layer: ConvLayer
    options: ConvOptions
    tiling: TilingPlan
    inputs: InpPlan | None
    tiles: tuple
    weights: WeightPlan
    setups: tuple
    steps: tuple
    ends: tuple
    pops_owed: int
    stats: dict

    def describe(self) -> str:
        """A short block: the layer, each pass's plan in a line, the options if not the
        defaults."""
        kinds: dict = {}
        for su in self.setups:
            kinds[su.kind] = kinds.get(su.kind, 0) + 1
        last, end = self.tiles[-1], self.ends[-1]
        tail = ("REQ per step" if last.done_at else
                f"{last.n_stream} step(s) streamed per block, lag {end.lag}" if last.n_stream
                else "one requantize per tile")
        lines = [str(self.layer), "  " + str(self.tiling),
                 "  " + (str(self.inputs) if self.inputs else
                         f"inputs: by step ({self.tiling.tiling.nvt} region(s))"),
                 f"  ACC: regions at {list(self.tiling.acc_bases)}, "
                 f"{'clearing REQ' if self.layer.clears else 'no clearing REQ'}"
                 + (", bank split" if self.stats["bank_split"] else "")
                 + "; tile starts: " + ", ".join(f"{v} {_START[k]}" for k, v in kinds.items())
                 + (f" ({self.stats['partial_resets']} partial)"
                    if self.stats["partial_resets"] else ""),
                 "  " + str(self.weights),
                 f"  last tile: {tail}; {self.stats['gemm_uops']} GEMM micro-op cycles planned"
                 + (f", {self.stats['ob_loop_gemms']} output-block-loop GEMMs"
                    if self.stats["ob_loop_gemms"] else "")]
        if self.options != ConvOptions():
            lines.append("  " + str(self.options))
        return "\n".join(lines)

    __str__ = describe

    @property
    def depthwise_taps(self) -> int:
        """The depthwise GEMM's taps this conv is lowered with (``DEPTHWISE_TAPS``; 0: its
        GEMMs are ordinary, block-diagonal ones for a depthwise conv)."""
        return self.layer.taps


def plan_conv(cfg: VTAConfig, ly: ConvLayer, wpk, opt: ConvOptions, *, tile_inp: bool = True,
              max_acc_regions: int | None = None) -> ConvPlan:
    """Run the passes (module docstring) for layer ``ly`` with packed weights ``wpk``.

    Raises:
        CompileError: no tile fits.
        _EmptyWindow: a tile's window lies in the padding (lower with ``pre_pad``).
    """
    wb = _Blocks(wpk)
    tp = plan_tiling(cfg, ly, wpk, opt, max_acc_regions)
    inp = plan_inputs(cfg, ly, tp, tile_inp)
    tiles = plan_acc(cfg, ly, tp, inp, wb, opt)
    wp = plan_weights(cfg, ly, tp, tiles, wb, opt)
    setups, skipped, partial = plan_resets(cfg, ly, tp, tiles, opt)
    sch = schedule_steps(cfg, ly, tp, inp, tiles, wp, wb, opt)
    stats = {"bank_split": any(t.split for t in tiles), "stream_steps": sch["stream_steps"],
             "first_step_groups": max([1] + [len(x) for x in wp.subs]),
             "inp_by_tile": inp is not None, "ob_loop_gemms": sch["ob_loop_gemms"],
             "retiled": tp.retiled, "partial_resets": partial, "w_loads": wp.n_loads,
             "step_req": sch["step_req"], "resets_skipped": skipped,
             "gemm_uops": sch["gemm_uops"]}
    return ConvPlan(ly, opt, tp, inp, tiles, wp, setups, sch["steps"], sch["ends"],
                    sch["pops_owed"], stats)

