"""The conv emitter: :func:`emit_conv` turns a :class:`~.conv_plan.ConvPlan` into LOAD, GEMM,
ALU, STORE and token instructions on a :class:`~vtaforge.runtime.artifact.TraceBuilder`,
in the plan's order; it decides nothing (every choice is in the plan)."""

from __future__ import annotations

import numpy as np

from ..hw.config import MemType, VTAConfig
from ..hw.isa import LIMITS, REQ_LANE, AluOp, Module, req_imm
from ..runtime.artifact import TraceBuilder
from .conv_plan import ConvLayer, ConvPlan, TilePlan
from .conv_schedule import Gemm, StepPlan, TileEnd, TileSetup
from .lower_common import emit_kernel, requant_alu
from .options import ConvOptions

__all__ = ["emit_conv"]

L, C, S = Module.LOAD, Module.COMPUTE, Module.STORE


def _engine_reset(tb: TraceBuilder, base: int, n: int) -> None:
    """Clear accumulator entries ``[base, base + n)`` with ALU resets of one micro-op each
    (``LIMITS.max("iter")`` entries per instruction), the kind the REQ engine runs."""
    for e0 in range(0, n, LIMITS.max("iter")):
        mm = min(LIMITS.max("iter"), n - e0)
        emit_kernel(tb, "alu", [(mm, 1, 1, 0)], [base + e0], [base + e0], op=AluOp.ADD, imm=0,
                    reset=True)


def _emit_gemm(tb: TraceBuilder, ly: ConvLayer, tile: TilePlan, g: Gemm) -> None:
    """One planned GEMM: one micro-op per (entry, kh, kw) under the tile's rows x cols loop
    nest (a depthwise GEMM, ``ly.taps``: per (entry, kh, tap chunk)), or (``g.ob_loop``)
    one per input block under an output-block loop."""
    per_ib = tile.rows_l * tile.cols
    if g.ob_loop is not None:
        obs_n, dw, ibs, a0, w0 = g.ob_loop
        emit_kernel(tb, "gemm", [(obs_n, tile.n_t, 0, dw), (tile.n_t, 1, ly.sw, 0)],
                    [a0] * len(ibs), [g.inp_base + (ib - g.i0) * per_ib for ib in ibs], w0)
        return
    # one micro-op per kernel tap (ki, kj), or with depthwise GEMMs per kernel row ki and
    # tap chunk kj: its taps are the taps consecutive INP entries from column kj * taps
    ki, kj = np.meshgrid(np.arange(ly.kh), np.arange(ly.kcols), indexing="ij")
    ki, kj = ki.reshape(-1), kj.reshape(-1)
    d, sr, wg = [], [], []
    for ob, ib, bi in g.entries:
        d.append(np.full(ly.kk, tile.blk_addr[ob]))
        sr.append(g.inp_base + (ib - g.i0) * per_ib + ki * tile.cols + kj * max(1, ly.taps))
        wg.append(g.widx[bi] + ki * ly.kcols + kj)
    emit_kernel(tb, "gemm", [(tile.th, tile.tw, tile.ystep, 0), (tile.tw, 1, ly.sw, 0)],
                np.concatenate(d), np.concatenate(sr), np.concatenate(wg),
                depthwise=bool(ly.taps))


def _shift_rows(tb: TraceBuilder, ly: ConvLayer, tile: TilePlan, a: int, b: int) -> None:
    """The tensor SHR of an aligned per-channel requantize (``ly.pc_shift``) over the
    side-by-side blocks ``[a, b)``: each entry by its block's shift row (entry ``OB + ob``,
    ``shift[o] - pc_shift <= 0``: a left shift), skipping blocks whose rows are all 0."""
    n_t, ob = tile.n_t, a
    while ob < b:
        if not ly.pc_shr[ob]:
            ob += 1
            continue
        e = ob
        while e < b and ly.pc_shr[e]:
            e += 1
        emit_kernel(tb, "alu", [(e - ob, n_t, 1, 0), (n_t, 1, 0, 0)], [tile.blk_addr[ob]],
                    [ly.nob + ob], op=AluOp.SHR)
        ob = e


def _emit_requant(cfg: VTAConfig, tb: TraceBuilder, ly: ConvLayer, tile: TilePlan, b0: int,
                  b1: int, attrs: dict, mplan, opt: ConvOptions) -> None:
    """Requantize output blocks ``[b0, b1)`` of ``tile`` (:func:`~.lower_common.requant_alu`,
    per run of adjacent blocks); checks the clear agrees with the plan's ``clears``.

    Per-channel, aligned (``ly.pc_shift``): the tensor SHR by the shift rows, then the
    scalar requantize with shift ``pc_shift`` (the bias rows were scaled to match), so on an
    ``ALU_REQUANT`` core one bias-fused (clearing) REQ; not aligned: ADD bias, SHR by the
    shift rows, clip (one REQ of shift 0 on an ``ALU_REQUANT`` core, else MAX, MIN).
    Per-lane (``ly.pc_lane``): one REQ of shift field ``REQ_LANE`` whose tensor operand is
    each entry's block's lane-word row (entry ``ob``), clearing as a scalar one."""
    n_t = tile.n_t
    lo, hi = int(attrs["clip_lo"]), int(attrs["clip_hi"])
    for a, b in tile.blk_runs(b0, b1):
        bloops = [(b - a, n_t, 1, 0), (n_t, 1, 0, 0)]
        if ly.pc_lane:
            clr = opt.clearing_req and not ly.bias_load
            emit_kernel(tb, "alu", bloops, [tile.blk_addr[a]], [a], op=AluOp.REQ, imm=None,
                        params=req_imm(REQ_LANE, lo, hi), reset=clr)
            assert clr == ly.clears, "requant_clears disagrees with the per-lane REQ"
            continue
        bias_add = None if ly.bias_load else (bloops, [tile.blk_addr[a]], [a])
        if ly.per_channel and ly.pc_shift is None:
            requant_alu(tb, tile.blk_addr[a], (b - a) * n_t, 0, lo, hi, bias=bias_add,
                        fused=cfg.ALU_REQUANT,
                        shift_src=(bloops, [tile.blk_addr[a]], [ly.nob + a]))
            continue
        if ly.per_channel:
            _shift_rows(tb, ly, tile, a, b)
        shift = ly.pc_shift if ly.per_channel else int(attrs["shift"])
        clr = requant_alu(tb, tile.blk_addr[a], (b - a) * n_t, shift, lo, hi,
                          plan=mplan, bias=bias_add, fused=cfg.ALU_REQUANT,
                          clear=opt.clearing_req and not ly.bias_load,
                          lane_core=cfg.REQ_LANE_SHIFT)
        assert clr == ly.clears, "requant_clears disagrees with requant_alu"


def _store_runs(ly: ConvLayer, tile: TilePlan, end: TileEnd,
                opt: ConvOptions) -> list[tuple[int, int]]:
    """The STOREs of a tile's output blocks, in ``end.store_order``: ``[a, b)`` runs of
    blocks, one STORE each.  One block per STORE unless ``opt.merge_stores``, the tile is
    stored after one REQ pass (not streamed: its order is ``ob0 .. ob1 - 1``) and spans
    whole rows, and the DRAM pitch of its blocks ``hpl * wo`` fits the ``x_stride``
    field: then each run of blocks side by side in ACC (:meth:`TilePlan.blk_runs`, at
    most ``LIMITS.max("size")`` blocks) is one STORE of ``b - a`` rows."""
    if (not opt.merge_stores or end.streamed or tile.tw != ly.wo
            or ly.hpl * ly.wo > LIMITS.max("stride")):
        return [(ob, ob + 1) for ob in end.store_order]
    cap = LIMITS.max("size")
    return [(a0, min(a0 + cap, b)) for a, b in tile.blk_runs(tile.ob0, tile.ob1)
            for a0 in range(a, b, cap)]


def _emit_setup(tb: TraceBuilder, tile: TilePlan, su: TileSetup) -> None:
    """A tile's accumulator set-up (before the wait for its first step's loads)."""
    if su.wait_store:
        tb.dep_pop(S, C)
    if su.kind == "bias":
        for ob in range(tile.ob0, tile.ob1):
            tb.load_2d("b", ob, MemType.ACC, tile.blk_addr[ob], tile.n_t, 1, 0)
    elif su.kind == "engine":
        for e0, n in su.engine:
            _engine_reset(tb, e0, n)
    elif su.kind == "gemm":
        emit_kernel(tb, "gemm", [(tile.th, tile.tw, 0, 0), (tile.tw, 1, 0, 0)],
                    [tile.blk_addr[ob] for ob in range(tile.ob0, tile.ob1)],
                    np.zeros(tile.obn), reset=True)
    for base, n in su.regions:
        _engine_reset(tb, base, n)


def _emit_step(cfg: VTAConfig, tb: TraceBuilder, plan: ConvPlan, sp: StepPlan, attrs: dict,
               mplan) -> None:
    """One planned step: input and weight LOADs, tokens, set-up, GEMMs, stream, REQs."""
    ly, tile, wp = plan.layer, plan.tiles[sp.t], plan.weights
    i0, i1 = sp.red
    if sp.pop_inp:
        tb.dep_pop(C, L)
    hp, wp_ = ly.hp, ly.wp
    if tile.full:
        tb.load_2d("x", i0 * hp * wp_, MemType.INP, sp.inp_base, i1 - i0, hp * wp_, hp * wp_)
    else:
        for ib in range(i0, i1):
            tb.load_2d("x", (ib * hp + tile.ry0) * wp_ + tile.rx0, MemType.INP,
                       sp.inp_base + (ib - i0) * tile.rows_l * tile.cols,
                       tile.th if ly.row_skip else tile.ry1 - tile.ry0, tile.rx1 - tile.rx0,
                       ly.sh * wp_ if ly.row_skip else wp_, pad=tile.padv)
    groups = wp.groups[sp.s]
    for k, grp in enumerate(groups):
        if k:
            tb.dep_push(L, C)
        for ld in grp:
            tb.load_2d("w", ld.dram, MemType.WGT, ld.sram, 1, ld.n, ld.n)
    tb.dep_push(L, C)
    for ld in wp.prefetch[sp.s]:
        tb.load_2d("w", ld.dram, MemType.WGT, ld.sram, 1, ld.n, ld.n)
    if sp.red == tile.reds[0]:
        _emit_setup(tb, tile, plan.setups[sp.t])
    tb.dep_pop(L, C)
    for k, g in enumerate(sp.gemms):
        if k:
            tb.dep_pop(L, C)
        _emit_gemm(tb, ly, tile, g)
    for kind, x in sp.stream:
        if kind == "gemm":
            _emit_gemm(tb, ly, tile, x)
        else:
            _emit_requant(cfg, tb, ly, tile, x, x + 1, attrs, mplan, plan.options)
            tb.dep_push(C, S)
    for ob in sp.reqs_after:
        _emit_requant(cfg, tb, ly, tile, ob, ob + 1, attrs, mplan, plan.options)
        tb.dep_push(C, S)
    for _ in range(sp.frees):
        tb.dep_push(C, L)


def emit_conv(cfg: VTAConfig, tb: TraceBuilder, plan: ConvPlan, attrs: dict, mplan) -> None:
    """Turn ``plan`` into instructions on ``tb``; decides nothing.

    ``attrs``: the node's requantize attributes (``shift``, ``clip_lo``, ``clip_hi``;
    scalar unless ``plan.layer.per_channel``); ``mplan``: the multiplier plan
    (:func:`~.lower_common.plan_for`) or None.  Order: the bias (and shift amounts) LOAD, then per tile its steps
    (:class:`StepPlan`), its requantize unless streamed, its STOREs; at the end the token
    waits still owed.
    """
    ly, tl = plan.layer, plan.tiling.tiling
    if not ly.bias_load:
        # the bias (+round), and the shift amounts of a per-channel requantize (or the
        # lane words of a per-lane one, instead of the bias): one LOAD
        tb.load_2d("b", 0, MemType.ACC, 0, 1, ly.reserved, ly.reserved)
    elif ly.pc_lane:
        # bias_load: the tiles load the bias themselves; the lane words (bias 0) stay
        tb.load_2d("b", ly.nob, MemType.ACC, 0, 1, ly.nob, ly.nob)
    elif ly.per_channel:
        # bias_load: the tiles load the bias themselves; the shift amounts stay for the conv
        tb.load_2d("b", ly.nob, MemType.ACC, ly.nob, 1, ly.nob, ly.nob)
    by_tile: dict = {}
    for sp in plan.steps:
        by_tile.setdefault(sp.t, []).append(sp)
    for tile, end in zip(plan.tiles, plan.ends):
        for sp in by_tile[tile.t]:
            _emit_step(cfg, tb, plan, sp, attrs, mplan)
        if not end.streamed:
            _emit_requant(cfg, tb, ly, tile, tile.ob0, tile.ob1, attrs, mplan, plan.options)
            tb.dep_push(C, S)
            tb.dep_pop(C, S)
        for a, b in _store_runs(ly, tile, end, plan.options):
            if end.streamed:
                tb.dep_pop(C, S)
            if tile.tw == ly.wo:    # rows of th * wo elements, one per block, hpl * wo apart
                tb.store_2d(tile.blk_addr[a], "y", (a * ly.hpl + tile.y0) * ly.wo, b - a,
                            tile.th * ly.wo, ly.hpl * ly.wo if b - a > 1 else tile.th * ly.wo)
            else:
                tb.store_2d(tile.blk_addr[a], "y", (a * ly.hpl + tile.y0) * ly.wo + tile.x0,
                            tile.th, tile.tw, ly.wo)
        tb.dep_push(S, C)
    for _ in range(plan.pops_owed):
        tb.dep_pop(C, L)
    for _ in range(min(len(plan.tiles), tl.acc_nvt)):
        tb.dep_pop(S, C)
