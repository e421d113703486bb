"""Passes 4-6 of the conv plan (:mod:`.conv_plan`): weight streaming
(:func:`plan_weights`), accumulator set-up and resets (:func:`plan_resets`) and the step
schedule (:func:`schedule_steps`: token waits and pushes, GEMMs, the stream of per-block
GEMMs and REQs with its lag, the stores).  Each returns frozen, printable plans."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from ..hw.config import MemType, VTAConfig
from ..hw.isa import LIMITS

if TYPE_CHECKING:  # pragma: no cover
    from .conv_plan import ConvLayer, InpPlan, TilingPlan, _Blocks
    from .options import ConvOptions

__all__ = ["WeightLoad", "WeightPlan", "plan_weights", "TileSetup", "plan_resets", "Gemm",
           "StepPlan", "TileEnd", "schedule_steps"]


def _beats(cfg: VTAConfig, mem: MemType) -> int:
    """Bus beats per element of ``mem`` (at least 1)."""
    return max(1, cfg.elem_bytes(mem) * 8 // cfg.BUS_WIDTH)

def _runs(ids) -> list[tuple[int, int]]:
    """Maximal runs ``[a, b)`` of consecutive integers in ``ids``, in order."""
    out: list[list[int]] = []
    for i in ids:
        if out and out[-1][1] == i:
            out[-1][1] = i + 1
        else:
            out.append([i, i + 1])
    return [(a, b) for a, b in out]

# ------------------------------------------------------------------ 4. weights
@dataclass(frozen=True)
class WeightLoad:
    """One weight LOAD: ``n`` WGT elements from element ``dram`` of the stored weights to
    WGT entry ``sram``."""

    dram: int
    sram: int
    n: int


@dataclass(frozen=True, eq=False)
class WeightPlan:
    """Weight streaming: the stored block ``order`` (input-block-major when ``ib_major``),
    each block's WGT position ``wpos`` (in blocks), resident LOADs in requests of at most
    ``chunk`` elements; per step, its GEMM groups ``subs`` (the first step of resident
    weights in groups of about ``w_chunk_beats``, each behind its own data-ready token),
    the LOADs of each group ``groups``, the next step's weights ``prefetch``-ed behind this
    step's token, and ``widx`` (stored block -> WGT entry)."""

    resident: bool
    ib_major: bool
    order: np.ndarray
    wpos: np.ndarray
    chunk: int
    subs: tuple
    groups: tuple
    prefetch: tuple
    widx: tuple

    @property
    def n_loads(self) -> int:
        return sum(len(g) for gs in self.groups for g in gs) + sum(map(len, self.prefetch))

    def __str__(self) -> str:
        first = len(self.subs[0]) if self.subs else 1
        return (f"weights: {'resident' if self.resident else 'streamed per step'}, "
                f"{'input' if self.ib_major else 'output'}-block-major, {self.n_loads} LOAD(s)"
                + (f" of <= {self.chunk} elements, next step's prefetched" if self.resident else "")
                + (f", first step in {first} groups" if first > 1 else ""))


def plan_weights(cfg: VTAConfig, ly: ConvLayer, tp: TilingPlan, tiles: tuple, wb: _Blocks,
                 opt: ConvOptions) -> WeightPlan:
    """Pass 4: weight order and LOADs.  Weights are stored input-block-major (``(ib, ob)``
    order, in DRAM and WGT) when resident or ``streamed_ib_major``: a one-block step's
    weights for every output block of its tile are one contiguous run (one LOAD).  The
    order depends on the weights only, so row bands agree with the whole conv's
    constants.  Resident weights load block run by block run as the steps first need
    them (on the load module, overlapping the GEMMs before), the next step's behind this
    step's data-ready token."""
    tl, kk = tp.tiling, ly.kk
    blocks = wb.wpk.blocks
    ib_major = tl.resident or opt.streamed_ib_major
    order = (np.lexsort((blocks[:, 0], blocks[:, 1])) if ib_major else np.arange(len(blocks)))
    wpos = np.empty(len(order), np.int64)
    wpos[order] = np.arange(len(order))
    w_beats = _beats(cfg, MemType.WGT)
    per_group = max(1, opt.w_chunk_beats // (w_beats * kk))
    chunk = min(LIMITS.max("size"), per_group * kk)
    loaded = np.zeros(len(blocks), dtype=bool)
    wgt_half = cfg.WGT_DEPTH // tl.nvt

    def load(bis) -> tuple:
        new = sorted({bi for bi in bis if not loaded[bi]})
        out = []
        for a, b in _runs(sorted(int(wpos[bi]) for bi in new)):
            for e0 in range(a * kk, b * kk, chunk):
                out.append(WeightLoad(e0, e0, min(chunk, b * kk - e0)))
        loaded[new] = True
        return tuple(out)

    subs_l, groups_l, pre_l, widx_l = [], [], [], []
    for s, (t, (i0, i1)) in enumerate(tp.steps):
        tile = tiles[t]
        sel = wb.entries(tile.ob0, tile.ob1, i0, i1)
        streamed_r = tile.reds.index((i0, i1)) >= len(tile.reds) - tile.n_stream \
            if tile.n_stream else False
        subs = [sel]
        if tl.resident and s == 0 and sel and not streamed_r:
            subs = []
            for e in sel:
                if not subs or (len(subs[-1]) >= per_group and e[0] != subs[-1][-1][0]):
                    subs.append([])
                subs[-1].append(e)
        if tl.resident:
            widx = {bi: int(wpos[bi]) * kk for _, _, bi in sel}
            groups = tuple(load([bi for _, _, bi in sub]) for sub in subs)
            pre = ()
            if s + 1 < len(tp.steps):
                tn, (a_n, b_n) = tp.steps[s + 1]
                pre = load([bi for _, _, bi in wb.entries(tiles[tn].ob0, tiles[tn].ob1, a_n, b_n)])
        else:
            wbase = (s % tl.nvt) * wgt_half
            widx, runs, pos = {}, [], 0
            for a, b in _runs(sorted(int(wpos[bi]) for _, _, bi in sel)):
                runs.append(WeightLoad(a * kk, wbase + pos * kk, (b - a) * kk))
                for p_ in range(a, b):
                    widx[int(order[p_])] = wbase + (pos + p_ - a) * kk
                pos += b - a
            groups, pre = (tuple(runs),), ()
        subs_l.append(tuple(tuple(x) for x in subs))
        groups_l.append(groups)
        pre_l.append(pre)
        widx_l.append(widx)
    return WeightPlan(tl.resident, ib_major, order, wpos, chunk, tuple(subs_l), tuple(groups_l),
                      tuple(pre_l), tuple(widx_l))


# ------------------------------------------------------------------ 5. resets
@dataclass(frozen=True)
class TileSetup:
    """How tile ``t``'s accumulator starts: ``wait_store`` (its ACC region's previous tile
    must be stored first), ``kind`` ("bias": broadcast ACC LOADs of the bias; "skip": the
    previous clearing REQ left its entries at 0; "engine": one-micro-op ALU resets of
    ``engine`` ``(entry, n)`` ranges that the REQ engine runs; "gemm": a GEMM reset), and
    ``regions``: on the first tile, the first tile of every other ACC region reset at once
    by engine resets."""

    t: int
    wait_store: bool
    kind: str
    engine: tuple = ()
    regions: tuple = ()

    def __str__(self) -> str:
        return f"{self.kind}" + (f"+{len(self.regions)} region(s)" if self.regions else "")


def plan_resets(cfg: VTAConfig, ly: ConvLayer, tp: TilingPlan, tiles: tuple,
                opt: ConvOptions) -> tuple[tuple, int, int]:
    """Pass 5: ``(setups, resets skipped, partial resets)``, one :class:`TileSetup` per
    tile.  Per ACC region the pass tracks the entries ``[acc_base, acc_base + n)`` its last
    tile's clearing REQ left at 0: a tile of at most ``n`` entries needs no reset, and an
    engine reset covers only the entries beyond them (a tile wider than the one before
    it).  A clearing REQ of a tile smaller than the cleared extent keeps it
    (``keep_cleared``, not for bank-split tiles)."""
    tl = tp.tiling
    cleared = [0] * tl.acc_nvt
    out, skipped, partial = [], 0, 0
    for tile in tiles:
        t, avt, n = tile.t, tile.avt, tile.obn * tile.n_t
        kind, eng, regions = "gemm", [], []
        if ly.bias_load:
            kind = "bias"
        elif n <= cleared[avt]:
            kind = "skip"
            skipped += 1
        elif cfg.REQ_ENGINE:
            kind = "engine"
            done = tile.acc_base + cleared[avt]
            for a, b in tile.blk_runs(tile.ob0, tile.ob1):
                e0, e1 = tile.blk_addr[a], tile.blk_addr[a] + (b - a) * tile.n_t
                if tile.acc_base <= e0 < done:
                    e0 = min(e1, done)
                    partial += 1
                if e1 > e0:
                    eng.append((e0, e1 - e0))
        if t == 0 and cfg.REQ_ENGINE and opt.clearing_req and not ly.bias_load:
            for v in range(1, min(tl.acc_nvt, len(tiles))):
                tv = tiles[v]
                nv = tv.obn * tv.n_t
                regions.append((tp.acc_bases[v], nv))
                cleared[v] = max(cleared[v], nv)
        out.append(TileSetup(t, t >= tl.acc_nvt, kind, tuple(eng), tuple(regions)))
        if ly.clears:
            cleared[avt] = max(n, cleared[avt]) if opt.keep_cleared and not tile.split else n
        else:
            cleared[avt] = 0
    return tuple(out), skipped, partial


# ------------------------------------------------------------------ 6. step schedule
def _ob_loop(cfg: VTAConfig, grp, blk_addr: dict, widx: dict, n_t: int, th: int, tw: int,
             ystep: int, sw: int, kk: int):
    """A step's GEMM with the output blocks as a loop: for a 1x1 kernel whose tile pixels
    are one arithmetic run in INP (``ystep == tw * sw``), when every input block of
    ``grp`` ((ob, ib, stored block)) has the same output blocks, lying ``n_t`` accumulator
    entries apart, with weights a constant ``dw`` WGT entries apart: one micro-op per
    input block under the loops ``(obs, n_t, 0, dw)`` and ``(th*tw, 1, sw, 0)`` -- the same
    (acc, inp, wgt) triples as one micro-op per entry, in another order, with ``obs``
    times fewer micro-ops to load.  Returns ``(obs, dw, ibs, acc entry, [wgt entry per
    ib])`` or None."""
    if not (grp and kk == 1 and ystep == tw * sw and th * tw <= LIMITS.max("iter")):
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


@dataclass(frozen=True, eq=False)
class Gemm:
    """One GEMM of a step over ``entries`` ((ob, ib, stored block)): input blocks from
    ``i0`` at INP entry ``inp_base``, WGT entries ``widx``; ``ob_loop`` (the output blocks
    as a loop, :func:`_ob_loop`) or None (one micro-op per entry and tap)."""

    i0: int
    inp_base: int
    entries: tuple
    widx: dict
    ob_loop: tuple | None


@dataclass(frozen=True, eq=False)
class StepPlan:
    """Step ``s`` (tile ``t``, input blocks ``red``): its input at INP ``inp_base``, loaded
    after a compute->load wait when ``pop_inp``; the GEMMs run now (``gemms``, a
    load->compute wait before each but the first; empty when deferred to the stream);
    ``stream``: on the tile's last step, ``("gemm", Gemm)`` and ``("req", ob)`` items (the
    streamed steps per output block, each REQ followed by a compute->store push); the
    blocks ``reqs_after`` requantized after this step; ``frees`` compute->load pushes."""

    s: int
    t: int
    red: tuple
    inp_base: int
    pop_inp: bool
    gemms: tuple
    stream: tuple
    reqs_after: tuple
    frees: int


@dataclass(frozen=True)
class TileEnd:
    """After tile ``t``'s steps: ``streamed`` (requantized per block during the steps:
    a compute->store wait before each block's STORE) or one requantize of the whole tile;
    ``store_order`` (output blocks, the order they are stored); ``lag`` (blocks whose
    GEMMs the first streamed REQ follows)."""

    t: int
    streamed: bool
    store_order: tuple
    lag: int = 0


def schedule_steps(cfg: VTAConfig, ly: ConvLayer, tp: TilingPlan, inp: InpPlan | None,
                   tiles: tuple, wp: WeightPlan, wb: _Blocks, opt: ConvOptions) -> dict:
    """Pass 6: the step schedule.  Returns ``{"steps": (StepPlan, ...), "ends": (TileEnd,
    ...), "pops_owed": compute->load waits at the end, "gemm_uops": planned GEMM
    micro-ops, "stream_steps", "step_req", "ob_loop_gemms"}``.

    Streamed steps (a REQ engine core's last tile) run per output block: each block's REQ
    (on the engine) beside the next block's GEMMs, its STORE beside the rest.  The engine
    may still run the previous tile's REQ (``backlog`` entries): the first block REQs
    follow that many blocks' GEMMs (the stream lag), a block's GEMM cycles being the
    deferred steps' average per output block.  With ``done_at`` each block is requantized
    once its step is done and this tile's GEMM cycles so far cover the backlog.  Compute
    frees a step's input region after its GEMMs (a deferred step's after the stream)."""
    tl = tp.tiling
    nvt, kk = tl.nvt, ly.kk
    inp_half = cfg.INP_DEPTH // nvt
    s, pops_owed, backlog, planned = 0, 0, 0, 0
    steps, ends = [], []
    stats = {"stream_steps": 0, "step_req": False, "ob_loop_gemms": 0}

    def gemm(tile, i0, inp_base, grp, widx):
        lp = _ob_loop(cfg, grp, tile.blk_addr, widx, tile.n_t, tile.th, tile.tw, tile.ystep,
                      ly.sw, kk) if opt.ob_loop and not ly.taps else None
        stats["ob_loop_gemms"] += lp is not None
        return Gemm(i0, inp_base, tuple(grp), widx, lp)

    for tile in tiles:
        reds, obn, n_px = tile.reds, tile.obn, tile.n_t
        tile_gemm, lag = 0, 0
        deferred, req_order, pending = [], [], []
        stats["step_req"] |= bool(tile.done_at)
        for r, (i0, i1) in enumerate(reds):
            last = r == len(reds) - 1
            if inp is None:
                inp_base, pop = (s % nvt) * inp_half, s >= nvt
            else:
                inp_base, pop = inp.base[s], inp.pop_before[s]
            pops_owed -= pop
            sel = wb.entries(tile.ob0, tile.ob1, i0, i1)
            widx = wp.widx[s]
            is_deferred = bool(sel) and r >= len(reds) - tile.n_stream
            gemms = (tuple(gemm(tile, i0, inp_base, sub, widx) for sub in wp.subs[s])
                     if sel and not is_deferred else ())
            if is_deferred:
                deferred.append((i0, inp_base, widx, sel, s))
            stream = []
            if last and deferred:
                stats["stream_steps"] = max(stats["stream_steps"], len(deferred))
                blk = max(1, sum(len(f[3]) for f in deferred) * kk * n_px // obn)
                lag = min(obn - 1, -(-max(0, backlog - tile_gemm) // blk))
                order = list(tile.ob_order)
                for gi, ob in enumerate(order + [None] * lag):
                    for f in (deferred if ob is not None else ()):
                        grp = [e for e in f[3] if e[0] == ob]
                        if grp:
                            stream.append(("gemm", gemm(tile, f[0], f[1], grp, f[2])))
                    if gi >= lag:
                        stream.append(("req", order[gi - lag]))
            if sel:
                planned += len(sel) * kk * n_px
                if not is_deferred:
                    tile_gemm += len(sel) * kk * n_px
            reqs = []
            if tile.done_at:
                pending += tile.done_at.get(r, ())
                while pending and (tile_gemm >= backlog or last):
                    reqs.append(pending.pop(0))
                req_order += reqs
            frees = ([] if is_deferred else [s]) + ([f[4] for f in deferred] if last else [])
            nfree = sum(1 for f_s in frees if inp is None or inp.push_after[f_s])
            pops_owed += nfree
            steps.append(StepPlan(s, tile.t, (i0, i1), inp_base, bool(pop), gemms,
                                  tuple(stream), tuple(reqs), nfree))
            s += 1
        streamed = bool(deferred) or bool(tile.done_at)
        order = tuple(req_order) if tile.done_at else tile.ob_order
        ends.append(TileEnd(tile.t, streamed, order if streamed else
                            tuple(range(tile.ob0, tile.ob1)), lag))
        backlog = 0 if streamed else obn * n_px
    return dict(stats, steps=tuple(steps), ends=tuple(ends), pops_owed=pops_owed,
                gemm_uops=planned)
