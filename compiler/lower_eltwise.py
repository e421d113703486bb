"""Lowering of ``qmax_pool``, ``qavg_pool`` (power-of-two window), ``qadd`` and
``qrequant`` to relocatable VTA programs.  Operands are int8 loaded into the accumulator
with ACC8 loads (sign-extended) or, for the GEMM forms (the separable max-pool where
:func:`pool_copy_ok` holds: :func:`_max_pool_copy`; ``qadd``), INP loads multiplied by
resident diagonal weights; processed on the ALU and stored.

Pooling, the ACC8 form: tiles of (channel blocks x output rows), full width; per channel
block one ACC8 LOAD of the input rows with zero padding (exact for max-pool only on non-negative inputs,
which the partitioner checks; exact for average pooling, whose padding counts as zero).
Max: ALU reset of the output, ADD of the first window element (a copy), MAX of the others.
Average: reset, ADD of every window element, ADD round, SHR shift, MAX/MIN clip; a window
that is not a power of two (``mult`` set, ``ALU_MUL``): reset, ADD of the window, then the
fixed-point reciprocal ``(sum*mult + round) >> shift`` as ADD ``round // mult``, MUL
``mult``, ADD ``round % mult``, SHR ``shift``, MAX/MIN (exact: :func:`~.requant.avg_reciprocal`).

Window elements are outermost: one ALU instruction per window element over every
destination of the tile, so consecutive micro-ops never write one entry (the ALU has no
forwarding; a micro-op waits until an older write to its destination has landed).

``qadd`` with ``BLOCK_IN == BLOCK_OUT`` and both ``lshift`` <= 6 runs as a GEMM: ``a`` and
``b`` are INP loads (load module, overlapping the previous chunk's compute), multiplied by
two resident diagonal weight blocks ``1 << lshift``, then the requantize on the ALU.
Otherwise, element-wise (flat over one batch block, chunks of at most 16383 elements): ``qadd``
loads ``a`` and ``b``, shifts each left by its ``lshift`` (SHR by a negative immediate),
ADD, then requantize (ADD round, SHR shift, MAX, MIN); ``qrequant`` is the requantize
alone.  ACC regions alternate between two virtual threads; store->compute tokens guard
their reuse.
"""

from __future__ import annotations

import numpy as np

from ..hw.config import MemType, VTAConfig
from ..hw.isa import LIMITS, REQ_LOWER_BOUNDS, AluOp, Module
from ..runtime.artifact import SlotLayout, TraceBuilder
from .errors import CompileError
from ..runtime.cpu_ops import pack_int4
from .lower_common import dram_stats, fit_queues, req_shift_fits
from .lower_conv import LoweredOp, act_layout, emit_kernel, plan_for, requant_alu, window_geometry
from .pack import pack_bias
from .tiling import MAX_EXTENT, candidates

__all__ = ["lower_pool", "lower_eltwise", "lower_mul", "lower_add_const", "gemm_add_ok",
           "pool_copy_ok"]

L, C, S = Module.LOAD, Module.COMPUTE, Module.STORE

def lower_pool(cfg: VTAConfig, uid: str, in_chw: tuple, attrs: dict, kind: str, *,
               separable: bool = True, gemm_copy: bool = True) -> LoweredOp:
    """Lower ``qmax_pool`` (``kind="max"``) or ``qavg_pool`` (``kind="avg"``) for one batch
    block; slots ``x`` (ACC8, NCHW{B}n{BLOCK_OUT}c) and ``y`` (OUT).  ``separable``: a max
    window with ``k < 2·s`` on both axes runs as a column pass in place, then a row pass
    (:func:`_max_pool_separable`; False: reset, copy and MAX per window element).
    ``gemm_copy``: on a core where :func:`pool_copy_ok` holds, the separable max-pool
    loads its input with INP loads and copies it into the accumulator with an identity
    GEMM (:func:`_max_pool_copy`; False: ACC8 loads, the form before).

    Raises:
        CompileError: ACC_8BIT off, non-power-of-two average window without a reciprocal
            ``mult`` or without ALU_MUL, pads > 15, a window that does not fit the
            accumulator.
    """
    if not cfg.ACC_8BIT:
        raise CompileError(f"{uid}: pooling on VTA needs ACC_8BIT")
    plan = None
    if kind == "avg":
        plan = plan_for(cfg, uid, attrs, 128 * int(attrs["divisor"]))
    B, BO = cfg.BATCH, cfg.BLOCK_OUT
    c, h, w = in_chw
    kh, kw = attrs["kernel"]
    sh, sw = attrs["strides"]
    pt, pl, pb, pr = attrs["pads"]
    geo = window_geometry(uid, (c, h, w), c, (kh, kw), (sh, sw), (pt, pl, pb, pr), B, BO, BO)
    if kind == "avg" and attrs.get("shift") is None:
        raise CompileError(f"{uid}: average window {kh}x{kw} is not a power of two")
    xl, yl, ho, wo = geo.xl, geo.yl, geo.ho, geo.wo
    pt, pl, pb, pr = geo.pads
    hp, wp = xl.hw
    # the columns the windows read: the padded row, less a right pad (or a floor-mode
    # remainder) no window reaches (3x3/2 pad 1 on 112: 113 of 114)
    cols = min(wp + pl + pr, (wo - 1) * sw + kw)
    xs = min(wp, cols - pl)                  # input columns loaded per row
    ncb = xl.cb
    sep = separable and kind == "max" and kw < 2 * sw and kh < 2 * sh
    if sep and gemm_copy and pool_copy_ok(cfg):
        lo = _max_pool_copy(cfg, uid, (c, h, w), geo, (kh, kw), (sh, sw), cols, xs)
        if lo is not None:
            return lo
    # overlapping rows (kh > sh): output row i goes to input row i*sh, dead after the
    # column pass, so the tile needs no output region (larger tiles, fewer reloaded rows)
    in_rows = sep and kh > sh
    best = _acc8_tiling(cfg, ncb, ho, wo, (kh, sh), cols, in_rows)
    if best is None:
        raise CompileError(f"{uid}: a pooling window row does not fit the accumulator of "
                           f"{cfg.bitstream_name}")
    _, cbn, TH, nvt = best
    half = cfg.ACC_DEPTH // nvt
    tb = TraceBuilder(uid, {"x": xl.block_bytes, "y": yl.block_bytes})
    t = 0
    for cb0 in range(0, ncb, cbn):
        cb1 = min(ncb, cb0 + cbn)
        n_cb = cb1 - cb0
        for y0 in range(0, ho, TH):
            y1 = min(ho, y0 + TH)
            th = y1 - y0
            rows = (th - 1) * sh + kh
            vt = t % nvt
            in_base = vt * half
            out_base = in_base + n_cb * rows * cols
            if t >= nvt:
                tb.dep_pop(S, C)
            iy0 = y0 * sh - pt
            ry0, ry1 = max(0, iy0), min(hp, iy0 + rows)
            if ry1 <= ry0:
                raise CompileError(f"{uid}: empty pooling window")  # pragma: no cover
            padv = (ry0 - iy0, iy0 + rows - ry1, pl, cols - pl - xs)
            for cb in range(cb0, cb1):
                tb.load_2d("x", (cb * hp + ry0) * wp, MemType.ACC8,
                           in_base + (cb - cb0) * rows * cols, ry1 - ry0, xs, wp, pad=padv)
            src0 = in_base + np.arange(n_cb) * rows * cols
            # output (i, j) of block b at dst[b] + i*pitch + j
            dst, pitch = (src0, sh * cols) if in_rows else (out_base + np.arange(n_cb) * th * wo, wo)
            loops = [(th, pitch, sh * cols, 0), (wo, 1, sw, 0)]
            if not in_rows:     # (in the input rows: reset after the column pass)
                emit_kernel(tb, "alu", loops, dst, np.zeros(n_cb), op=AluOp.ADD, reset=True)
            if sep:
                _max_pool_separable(tb, (kh, kw), (sh, sw), rows, cols, th, wo, dst, pitch, src0,
                                    in_rows)
            else:
                # Window-outermost: one ALU pass over every destination per window element,
                # so consecutive micro-ops never write the same entry (the ALU has no
                # forwarding: a micro-op waits for an older write to its destination).
                ki, kj = np.meshgrid(np.arange(kh), np.arange(kw), indexing="ij")
                for j, off in enumerate((ki * cols + kj).reshape(-1)):
                    op = AluOp.MAX if kind == "max" and j > 0 else AluOp.ADD
                    emit_kernel(tb, "alu", loops, dst, src0 + off, op=op)
            if kind != "max":
                requant_alu(tb, out_base, n_cb * th * wo, int(attrs["shift"]),
                            int(attrs["clip_lo"]), int(attrs["clip_hi"]),
                            extra_round=int(attrs["round"]) if plan is None else plan.pre_add,
                            plan=plan, fused=cfg.ALU_REQUANT, lane_core=cfg.REQ_LANE_SHIFT)
            tb.dep_push(C, S)
            tb.dep_pop(C, S)
            for cb in range(cb0, cb1):
                if in_rows:       # one STORE per output row (rows sh*cols apart)
                    for i in range(th):
                        tb.store_2d(int(dst[cb - cb0]) + i * pitch, "y",
                                    (cb * ho + y0 + i) * wo, 1, wo, wo)
                else:
                    tb.store_2d(out_base + (cb - cb0) * th * wo, "y", (cb * ho + y0) * wo, 1,
                                th * wo, th * wo)
            tb.dep_push(S, C)
            t += 1
    for _ in range(min(t, nvt)):
        tb.dep_pop(S, C)
    tb.trace.stats = {"tiling": [cbn, TH, nvt], "tiles": t, "gemm_uops_ideal": 0,
                      **dram_stats(B * c * h * w, B * c * ho * wo)}
    return fit_queues(cfg, LoweredOp(tb.trace, {}, {"x": xl, "y": yl}))


def _acc8_tiling(cfg: VTAConfig, ncb: int, ho: int, wo: int, rows_of, cols: int,
                 in_rows: bool):
    """``(steps, blocks per tile, output rows per tile, regions)`` of the ACC8 form's
    fewest tiles (two ACC regions if they fit, else one), or None; ``rows_of``:
    ``(kh, sh)``."""
    kh, sh = rows_of
    best = None
    for nvt in (2, 1):
        half = cfg.ACC_DEPTH // nvt
        for cbn in candidates(ncb):
            th = 0
            for cand in range(ho, 0, -1):
                rows = (cand - 1) * sh + kh
                out_n = 0 if in_rows else cbn * cand * wo
                if cbn * rows * cols + out_n <= half and cand * wo <= MAX_EXTENT:
                    th = cand
                    break
            if th:
                steps = -(-ncb // cbn) * -(-ho // th)
                if best is None or steps < best[0]:
                    best = (steps, cbn, th, nvt)
        if best:
            return best
    return None


def _copy_tiling(cfg: VTAConfig, ncb: int, ho: int, wo: int, kernel, strides, cols: int):
    """``(blocks per tile, output rows per tile)`` of :func:`_max_pool_copy`'s fewest tiles:
    a tile's input rows in half the INP scratchpad, its :class:`_CopyLayout` in half the
    accumulator; None when none fits."""
    best = None
    for cbn in candidates(ncb):
        for th in range(ho, 0, -1):
            lay = _CopyLayout(kernel, strides, th, wo, cols)
            if (cbn * lay.rows * cols <= cfg.INP_DEPTH // 2 and cbn * lay.size <= cfg.ACC_DEPTH // 2
                    and th * wo <= MAX_EXTENT and lay.rows <= MAX_EXTENT):
                steps = -(-ncb // cbn) * -(-ho // th)
                if best is None or steps < best[0]:
                    best = (steps, cbn, th)
                break
    return None if best is None or cols > MAX_EXTENT else best[1:]


def _zero(tb: TraceBuilder, lo: int, hi: int, one_uop: bool) -> None:
    """ALU resets of ACC ``[lo, hi)``: one micro-op per instruction (``one_uop``: the REQ
    engine's kind) or two (the pipeline's, on an engine core)."""
    for a in range(lo, hi, MAX_EXTENT):
        m = min(MAX_EXTENT, hi - a)
        if one_uop or m < 2:
            emit_kernel(tb, "alu", [(m, 1, 0, 0)], [a], [0], op=AluOp.ADD, reset=True)
            continue
        emit_kernel(tb, "alu", [(m // 2, 1, 0, 0)], [a, a + m // 2], [0, 0], op=AluOp.ADD,
                    reset=True)
        if m % 2:
            emit_kernel(tb, "alu", [(1, 1, 0, 0)], [a + m - 1], [0], op=AluOp.ADD, reset=True)


def pool_copy_ok(cfg: VTAConfig) -> bool:
    """Whether the separable max-pool can take its input through INP loads and an identity
    GEMM (:func:`_max_pool_copy`): INP and ACC elements hold the same channels
    (``BLOCK_IN == BLOCK_OUT``), int8 activations (the values an ACC8 load gives) and a
    weight width that holds 1 (int8 or int4)."""
    return cfg.BLOCK_IN == cfg.BLOCK_OUT and cfg.INP_WIDTH == 8 and cfg.WGT_WIDTH in (4, 8)


class _CopyLayout:
    """Where one channel block's tile lives in the accumulator in :func:`_max_pool_copy`
    (``th`` output rows, ``rows`` × ``cols`` input entries), in entries from the block's
    own bases: ``o`` (the outputs: row ``i`` of the column pass, column phase ``u``, at
    ``o + i·wo + j``, contiguous for the STORE) and ``rest`` (everything else: the other
    column phases ``p`` of the column-pass rows at ``eo[p] + i·ns + j``, then the source
    rows of each row phase ``q`` at ``srow[q] + i·cols + c``, natural column order).

    Column ``c = j·sw + p`` is in phase ``p``, row ``r = i·sh + q`` in row phase ``q``; the
    column pass writes row phase ``v = kh - sh`` (one row per window no neighbour reads),
    the row pass column phase ``u = kw - sw``."""

    def __init__(self, kernel, strides, th: int, wo: int, cols: int):
        (kh, kw), (sh, sw) = kernel, strides
        self.u, self.v = kw - sw, kh - sh
        self.th, self.wo, self.cols = th, wo, cols
        self.rows = (th - 1) * sh + kh
        self.n_col = [len(range(p, cols, sw)) for p in range(sw)]
        self.ns = max([n for p, n in enumerate(self.n_col) if p != self.u], default=0)
        self.n_row = [len(range(q, self.rows, sh)) for q in range(sh)]
        self.out = th * wo
        self.eo, off = {}, 0
        for p in range(sw):
            if p != self.u:
                self.eo[p] = off
                off += th * self.ns
        self.srow = {}
        for q in range(sh):
            if q != self.v:
                self.srow[q] = off
                off += self.n_row[q] * cols
        self.rest = off

    @property
    def size(self) -> int:
        return self.out + self.rest


def _max_pool_copy(cfg: VTAConfig, uid: str, chw: tuple, geo, kernel, strides, cols: int,
                   xs: int) -> LoweredOp | None:
    """The separable max-pool (``k < 2·s`` on both axes) with its input through INP loads
    on the load module (double-buffered, so they overlap the previous tile's compute) and
    an identity GEMM that copies each input element to its place in the accumulator
    (:class:`_CopyLayout`: the rows the column pass writes apart from the rows it reads,
    and in those rows the output column phase apart from the others), then both passes in
    place: the column pass MAXes each window's other rows into its row ``i·sh + v``, the
    row pass the other columns of that row into column ``j·sw + u``, which then holds the
    output, contiguous per channel block: one STORE per block and tile, no copy, no
    output region.  The input ACC region is zeroed before its copy (the GEMM adds): on a
    ``REQ_ENGINE`` core by the engine, beside the previous tile's copy (the part the last
    STORE does not read first, then the outputs once that STORE is done), else by an ALU
    reset on the pipeline.  With ``ALU_FORWARD`` each output's micro-ops run back to back
    (the destination forwarded, one cycle each); without, the window offsets neighbours
    share go as micro-op pairs on one source (:func:`_window_pass`).  Exact: the copy
    gives the ACC8 load's values (an int8 times 1 in every lane), the MAXes are those of
    the separable form.  Returns None when no tile fits or the token queues are too shallow
    for the program (the caller uses the ACC8 form).
    """
    sh = strides[0]
    xl, yl, ho, wo = geo.xl, geo.yl, geo.ho, geo.wo
    pt, pl, _, _ = geo.pads
    hp, wp = xl.hw
    ncb = xl.cb
    nvt = 2
    inp_half, acc_half = cfg.INP_DEPTH // nvt, cfg.ACC_DEPTH // nvt
    best = _copy_tiling(cfg, ncb, ho, wo, kernel, strides, cols)
    if best is None:
        return None
    cbn, TH = best
    eng, fwd = cfg.REQ_ENGINE, cfg.ALU_FORWARD
    tiles = [(cb0, min(ncb, cb0 + cbn), y0, min(ho, y0 + TH))
             for cb0 in range(0, ncb, cbn) for y0 in range(0, ho, TH)]
    lays = [_CopyLayout(kernel, strides, y1 - y0, wo, cols) for _, _, y0, y1 in tiles]
    tb = TraceBuilder(uid, {"x": xl.block_bytes, "y": yl.block_bytes})
    wbase = cfg.WGT_DEPTH - 1
    eye = np.eye(cfg.BLOCK_IN, dtype=np.int8)[None]
    tb.load_2d("w", 0, MemType.WGT, wbase, 1, 1, 1)
    consts = {"w": pack_int4(eye) if cfg.WGT_WIDTH == 4 else eye}

    def region(t: int) -> tuple[int, int]:
        """ACC bases of tile ``t``'s outputs and of the rest (blocks one after another);
        the rest starts behind the outputs of a full tile, so a smaller tile's rest, zeroed
        before the STORE of the region's previous tile, never meets that tile's outputs."""
        base = (t % nvt) * acc_half
        return base, base + cbn * lays[0].out

    def reset(t: int, outputs: bool | None, engine: bool) -> None:
        """Zero tile ``t``'s ACC region (``outputs``: only the outputs, False: only the
        rest, None: all); one micro-op (the engine's kind) or two (the pipeline's)."""
        n = tiles[t][1] - tiles[t][0]
        o_base, r_base = region(t)
        lo, hi = {True: (o_base, r_base), False: (r_base, r_base + n * lays[t].rest),
                  None: (o_base, r_base + n * lays[t].rest)}[outputs]
        _zero(tb, lo, hi, engine or not eng)

    for t, ((cb0, cb1, y0, y1), lay) in enumerate(zip(tiles, lays)):
        n_cb, th = cb1 - cb0, y1 - y0
        rows = lay.rows
        inp_base = (t % nvt) * inp_half
        o_base, r_base = region(t)
        iy0 = y0 * sh - pt
        ry0, ry1 = max(0, iy0), min(hp, iy0 + rows)
        if ry1 <= ry0:
            raise CompileError(f"{uid}: empty pooling window")  # pragma: no cover
        # load module: the tile's input rows, padded, into its INP region
        if t >= nvt:
            tb.dep_pop(C, L)
        padv = (ry0 - iy0, iy0 + rows - ry1, pl, cols - pl - xs)
        for cb in range(cb0, cb1):
            tb.load_2d("x", (cb * hp + ry0) * wp, MemType.INP,
                       inp_base + (cb - cb0) * rows * cols, ry1 - ry0, xs, wp, pad=padv)
        tb.dep_push(L, C)
        # compute: the region zeroed, the copy, both passes
        if not eng and t >= nvt:
            tb.dep_pop(S, C)
        if t == 0 or not eng:
            reset(t, None, engine=False)
        tb.dep_pop(L, C)
        nxt = t + 1 < len(tiles) and eng
        if nxt:
            reset(t + 1, False, engine=True)      # the next region but its outputs
        real = (ry0 - iy0, ry1 - iy0, pl, pl + xs)     # real rows and columns of the tile
        ib = [inp_base + b * rows * cols for b in range(n_cb)]
        ob = [o_base + b * lay.out for b in range(n_cb)]
        rb = [r_base + b * lay.rest for b in range(n_cb)]
        # part 1 (beside the engine's first reset): source rows, other column phases
        _copy_gemm(tb, lay, kernel, strides, ib, ob, rb, real, wbase, outputs=False)
        if nxt:     # the next region's outputs, once the STORE that reads them is done
            if t >= 1:
                tb.dep_pop(S, C)
            reset(t + 1, True, engine=True)
        # part 2: the output column phase
        _copy_gemm(tb, lay, kernel, strides, ib, ob, rb, real, wbase, outputs=True)
        tb.dep_push(C, L)
        for bl in ([[b] for b in range(n_cb)] if fwd else [list(range(n_cb))]):
            _pool_passes(tb, fwd, lay, kernel, strides, [ob[b] for b in bl],
                         [rb[b] for b in bl])
        tb.dep_push(C, S)
        tb.dep_pop(C, S)
        for b, cb in enumerate(range(cb0, cb1)):
            tb.store_2d(ob[b], "y", (cb * ho + y0) * wo, 1, th * wo, th * wo)
        tb.dep_push(S, C)
    T = len(tiles)
    for _ in range(min(T, nvt)):
        tb.dep_pop(C, L)
    # the STOREs the engine's resets did not wait for: the last two (the first T - 2
    # were popped before resetting their regions' outputs), every one without the engine
    for _ in range(min(T, nvt)):
        tb.dep_pop(S, C)
    c, h, w = chw
    tb.trace.stats = {"tiling": [cbn, TH, nvt], "tiles": T, "gemm_uops_ideal": 0,
                      "gemm_copy": True, **dram_stats(cfg.BATCH * c * h * w,
                                                      cfg.BATCH * c * ho * wo)}
    try:
        return fit_queues(cfg, LoweredOp(tb.trace, consts, {"x": xl, "y": yl}))
    except CompileError:    # more tokens outstanding than the queues hold: the ACC8 form
        return None


def _span(first: int, step: int, lo: int, hi: int, n: int) -> tuple[int, int]:
    """``(k0, count)`` of the indices k in [0, n) with ``lo <= first + k·step < hi``."""
    k0 = max(0, -(-(lo - first) // step))
    return k0, max(0, min(n, -(-(hi - first) // step)) - k0)


def _copy_gemm(tb: TraceBuilder, lay: "_CopyLayout", kernel, strides, ib, ob, rb, real,
               wbase: int, *, outputs: bool) -> None:
    """The identity GEMMs of one tile of :func:`_max_pool_copy` (one micro-op per channel
    block each): ``outputs`` False, the source rows (natural columns) and the column
    phases of the column-pass rows other than the output one; True, the output phase.
    ``ib``/``ob``/``rb``: per block the INP tile base and the ACC bases of the outputs and
    the rest; ``real``: the rows and columns ``(r_lo, r_hi, c_lo, c_hi)`` that are not
    padding (the zeroed region holds the padding already)."""
    (_, _), (sh, sw) = kernel, strides
    r_lo, r_hi, c_lo, c_hi = real
    cols, n = lay.cols, len(ib)

    def emit(loops, dst, src):
        emit_kernel(tb, "gemm", loops, dst, src, [wbase] * n)

    def phase(p: int, base, stride: int, count: int) -> None:
        i0, ni = _span(lay.v, sh, r_lo, r_hi, lay.th)
        j0, nj = _span(p, sw, c_lo, c_hi, count)
        if ni and nj:
            emit([(ni, stride, sh * cols, 0), (nj, 1, sw, 0)],
                 [base[b] + i0 * stride + j0 for b in range(n)],
                 [ib[b] + (i0 * sh + lay.v) * cols + j0 * sw + p for b in range(n)])

    if outputs:
        phase(lay.u, ob, lay.wo, lay.wo)
        return
    for q, off in lay.srow.items():
        i0, ni = _span(q, sh, r_lo, r_hi, lay.n_row[q])
        if ni and c_hi > c_lo:
            emit([(ni, cols, sh * cols, 0), (c_hi - c_lo, 1, 1, 0)],
                 [rb[b] + off + i0 * cols + c_lo for b in range(n)],
                 [ib[b] + (i0 * sh + q) * cols + c_lo for b in range(n)])
    for p, off in lay.eo.items():
        phase(p, [r + off for r in rb], lay.ns, lay.n_col[p])


def _pool_passes(tb: TraceBuilder, fwd: bool, lay: "_CopyLayout", kernel, strides, ob,
                 rb) -> None:
    """Both MAX passes of one tile of :func:`_max_pool_copy` for the channel blocks whose
    ACC bases are ``ob`` (outputs) and ``rb`` (the rest): the column pass over each column
    phase (the output phase into the outputs), then the row pass of the other phases into
    the output phase, in place."""
    (kh, kw), (sh, sw) = kernel, strides
    cols = lay.cols
    ob, rb = np.asarray(ob), np.asarray(rb)

    def col_src(p: int):
        return lambda o: rb + lay.srow[o % sh] + (o // sh) * cols + p

    for p in range(sw):
        out = p == lay.u
        _pool_pass(tb, fwd, kh, sh, lay.th, lay.wo if out else lay.n_col[p],
                   ob if out else rb + lay.eo[p], 1, lay.wo if out else lay.ns, col_src(p),
                   sw, cols, skip=lay.v)
    _pool_pass(tb, fwd, kw, sw, lay.wo, lay.th, ob, lay.wo, 1,
               lambda o: rb + lay.eo[o % sw] + o // sw, lay.ns, 1, skip=lay.u)


def _pool_pass(tb: TraceBuilder, fwd: bool, k: int, s: int, n_out: int, lines: int, dst0,
               line_dst: int, dstep: int, src_of, line_src: int, sstep: int,
               skip: int) -> None:
    """MAX over one window axis in place (:func:`_window_pass`'s arguments): with
    ``fwd`` (``ALU_FORWARD``), one instruction whose micro-ops per output are every offset
    but ``skip``, back to back on the output (the forwarded destination: one cycle each),
    offset 0 first and offset ``s`` last, so an output's first source is the one its
    neighbour read last (the source cache); without, :func:`_window_pass`."""
    if not fwd:
        _window_pass(tb, k, s, n_out, lines, dst0, line_dst, dstep, src_of, line_src,
                     sstep, skip)
        return
    offs = [o for o in range(k) if o != skip]
    if not offs:
        return
    if s in offs and len(offs) > 1:
        offs = [o for o in offs if o != s] + [s]
    dst = np.repeat(np.asarray(dst0), len(offs))
    src = np.stack([np.asarray(src_of(o)) for o in offs], axis=1).reshape(-1)
    emit_kernel(tb, "alu", [(lines, line_dst, line_src, 0), (n_out, dstep, sstep, 0)], dst,
                src, op=AluOp.MAX)


def _max_pool_separable(tb: TraceBuilder, kernel, strides, rows: int, cols: int, th: int,
                        wo: int, dst, pitch: int, src0, in_rows: bool = False) -> None:
    """The ALU part of one max-pool tile as a column pass then a row pass (``k < 2·s`` on
    both axes).

    The tile's input is ``rows × cols`` accumulator entries per channel block at ``src0``
    (array over blocks), its ``th × wo`` outputs at ``dst + i·pitch + j``: a separate region
    reset by the caller (``pitch = wo``), or with ``in_rows`` (rows overlap, ``kh > sh``)
    input row ``i·sh`` itself (``dst = src0``, ``pitch = sh·cols``), which the column pass
    leaves dead; the row pass then starts with a reset of those entries.  With ``kh < 2·sh``
    every window has a row ``v = max(0, kh - sh)`` no neighbour covers, so the column pass maxes row
    ``i·sh + v`` of every column with the window's other rows in place (the input is not
    needed after); the row pass then copies column ``j·sw + u`` (``u = max(0, kw - sw)``)
    of that row into output ``(i, j)`` (ADD onto the reset) and maxes the other columns in.
    Micro-ops for a 3×3/2 window: 2 per column-pass entry (two per output) and 3 per output,
    against 9 per output; column first, because the input has more columns per output than
    rows (a tile's rows overlap its neighbour's by ``kh - sh``).

    Window offsets shared by neighbours (``o < k - s`` with ``o + s`` of the previous
    window) are issued as micro-op pairs reading one source for two destinations
    (``[j+1], [j]``): the second hits the tensor-operand cache (1 cycle instead of 2), and
    no two micro-ops closer than 3 write one entry, so the ALU's hazard check never waits.
    """
    (kh, kw), (sh, sw) = kernel, strides
    u, v = max(0, kw - sw), max(0, kh - sh)
    # column pass in place: lines = the tile's columns, outputs i at rows i*sh + v
    _window_pass(tb, kh, sh, th, cols, src0 + v * cols, 1, sh * cols,
                 lambda o: src0 + o * cols, 1, sh * cols, skip=v)
    # row pass over rows i*sh + v: output (i, j) = copy of column j*sw + u, then MAX
    row = lambda o: src0 + v * cols + o  # noqa: E731 - one-line address map
    if in_rows:          # outputs in the dead rows i*sh: reset them now (they were sources)
        emit_kernel(tb, "alu", [(th, pitch, 0, 0), (wo, 1, 0, 0)], dst, np.zeros_like(dst),
                    op=AluOp.ADD, reset=True)
    emit_kernel(tb, "alu", [(th, pitch, sh * cols, 0), (wo, 1, sw, 0)], dst, row(u), op=AluOp.ADD)
    _window_pass(tb, kw, sw, wo, th, dst, pitch, 1, row, sh * cols, sw, skip=u)


def _window_pass(tb: TraceBuilder, k: int, s: int, n_out: int, lines: int, dst0, line_dst: int,
                 dstep: int, src_of, line_src: int, sstep: int, skip: int) -> None:
    """MAX over one window axis (``k`` taps, stride ``s``, ``k < 2·s``) for ``lines`` lines of
    ``n_out`` outputs: entry ``dst0 + l·line_dst + j·dstep`` |= ``src_of(o) + l·line_src +
    j·sstep`` for every offset ``o != skip`` (``dst0``, ``src_of(o)``: arrays over channel
    blocks; ``src_of(o + s) == src_of(o) + sstep``).

    Offsets ``o < k - s`` are issued with ``o + s`` as pairs ``(j+1, o), (j, o + s)`` on one
    source entry, then the two edge outputs ``(0, o)`` and ``(n_out - 1, o + s)``; the offsets
    in ``[k - s, s)`` other than ``skip`` as plain passes."""
    outer = (lines, line_dst, line_src, 0)
    for o in range(max(0, k - s), min(k, s)):
        if o != skip:
            emit_kernel(tb, "alu", [outer, (n_out, dstep, sstep, 0)], dst0, src_of(o),
                        op=AluOp.MAX)
    for o in range(max(0, k - s)):
        if n_out > 1:
            pair = np.stack([dst0 + dstep, dst0], axis=1).reshape(-1)
            emit_kernel(tb, "alu", [outer, (n_out - 1, dstep, sstep, 0)], pair,
                        np.repeat(src_of(o) + sstep, 2), op=AluOp.MAX)
        ends = np.stack([dst0, dst0 + (n_out - 1) * dstep], axis=1).reshape(-1)
        srcs = np.stack([src_of(o), src_of(o + s) + (n_out - 1) * sstep], axis=1).reshape(-1)
        emit_kernel(tb, "alu", [outer], ends, srcs, op=AluOp.MAX)


def _requant_store(tb: TraceBuilder, base: int, e0: int, m: int, attrs: dict, plan,
                   fused: bool = False, lane_core: bool = False) -> None:
    """The tail of one element-wise tile: the ALU requantize of ACC ``[base, base+m)``
    (``fused``, ``lane_core``: the config's ``ALU_REQUANT``, ``REQ_LANE_SHIFT``), then
    :func:`_store_tail`."""
    requant_alu(tb, base, m, int(attrs["shift"]), int(attrs["clip_lo"]), int(attrs["clip_hi"]),
                extra_round=int(attrs["round"]) if plan is None else plan.pre_add, plan=plan,
                fused=fused, lane_core=lane_core)
    _store_tail(tb, base, e0, m)


def _store_tail(tb: TraceBuilder, base: int, e0: int, m: int) -> None:
    """The compute->store token, STORE of OUT ``[base, base+m)`` to ``y`` at element ``e0``,
    the store->compute token that frees the region."""
    tb.dep_push(C, S)
    tb.dep_pop(C, S)
    tb.store_2d(base, "y", e0, 1, m, m)
    tb.dep_push(S, C)


def lower_eltwise(cfg: VTAConfig, uid: str, chw: tuple, op: str, attrs: dict) -> LoweredOp:
    """Lower ``qadd`` (slots ``a``, ``b``, ``y``) or ``qrequant`` (slots ``a``, ``y``) for
    one batch block of logical shape ``chw``.

    On a ``LOG_INP_WIDTH`` 2 core (int4 activations, nibble-packed in DRAM, which ACC8
    loads cannot read) only the GEMM form of ``qadd`` (:func:`gemm_add_ok`) exists.

    Raises:
        CompileError: ACC_8BIT off, ``mult != 1`` without ALU_MUL or without an
            overflow-free sequence, a rounding constant beyond the 16-bit immediate
            (``mult == 1``); int4 activations without the GEMM form.
    """
    if not cfg.ACC_8BIT:
        raise CompileError(f"{uid}: {op} on VTA needs ACC_8BIT")
    if cfg.INP_WIDTH != 8 and not (op == "qadd" and gemm_add_ok(cfg, attrs)):
        raise CompileError(f"{uid}: {op} of int{cfg.INP_WIDTH} activations: ACC8 loads int8 "
                           f"values only (a qadd runs as a GEMM only with BLOCK_IN == "
                           f"BLOCK_OUT and both lshift <= {cfg.WGT_WIDTH - 2})")
    bound = 128 * ((1 << int(attrs["lshift_a"])) + (1 << int(attrs["lshift_b"]))) \
        if op == "qadd" else 128
    plan = plan_for(cfg, uid, attrs, bound)
    if plan is None and int(attrs["round"]) > LIMITS.imm_max:
        raise CompileError(f"{uid}: rounding constant {attrs['round']} exceeds the ALU immediate")
    B, BO = cfg.BATCH, cfg.BLOCK_OUT
    lay = SlotLayout(tuple(chw), B, BO)
    if op == "qadd" and gemm_add_ok(cfg, attrs):
        return _lower_add_gemm(cfg, uid, act_layout(cfg, lay), attrs, plan)
    h, w = lay.hw
    n_el = lay.cb * h * w
    nops = 2 if op == "qadd" else 1
    nvt = 2 if cfg.ACC_DEPTH // (2 * nops) >= 1 else 1
    chunk = max(1, min(MAX_EXTENT, LIMITS.max("size"), cfg.ACC_DEPTH // (nvt * nops)))
    half = cfg.ACC_DEPTH // nvt
    slots = {"a": lay.block_bytes, "y": lay.block_bytes}
    if nops == 2:
        slots["b"] = lay.block_bytes
    tb = TraceBuilder(uid, slots)
    t = 0
    for e0 in range(0, n_el, chunk):
        m = min(chunk, n_el - e0)
        vt = t % nvt
        a_base = vt * half
        b_base = a_base + m
        if t >= nvt:
            tb.dep_pop(S, C)
        tb.load_2d("a", e0, MemType.ACC8, a_base, 1, m, m)
        loops = [(m, 1, 1, 0)]
        if nops == 2:
            tb.load_2d("b", e0, MemType.ACC8, b_base, 1, m, m)
            if attrs["lshift_a"]:
                emit_kernel(tb, "alu", loops, [a_base], [a_base], op=AluOp.SHR,
                            imm=-int(attrs["lshift_a"]))
            if attrs["lshift_b"]:
                emit_kernel(tb, "alu", loops, [b_base], [b_base], op=AluOp.SHR,
                            imm=-int(attrs["lshift_b"]))
            emit_kernel(tb, "alu", loops, [a_base], [b_base], op=AluOp.ADD)
        _requant_store(tb, a_base, e0, m, attrs, plan, cfg.ALU_REQUANT,
                       cfg.REQ_LANE_SHIFT)
        t += 1
    for _ in range(min(t, nvt)):
        tb.dep_pop(S, C)
    tb.trace.stats = {"tiles": t, "gemm_uops_ideal": 0,
                      **dram_stats(B * nops * int(np.prod(chw)), B * int(np.prod(chw)))}
    layouts = {"a": lay, "y": lay}
    if nops == 2:
        layouts["b"] = lay
    return fit_queues(cfg, LoweredOp(tb.trace, {}, layouts))


def gemm_add_ok(cfg: VTAConfig, attrs: dict) -> bool:
    """Whether ``qadd`` (``attrs``: its ``lshift_a`` / ``lshift_b``) can run as a GEMM: the
    INP and OUT layouts coincide (``BLOCK_IN == BLOCK_OUT``), the widths are int8 / int8 or
    int4 activations with int8 or int4 weights, and both alignment factors ``1 << lshift``
    are weights of ``WGT_WIDTH`` bits (``lshift <= 6`` for int8, ``<= 2`` for int4)."""
    widths = (cfg.INP_WIDTH == 8 and cfg.WGT_WIDTH == 8) or (
        cfg.INP_WIDTH == 4 and cfg.WGT_WIDTH in (4, 8))
    top = cfg.WGT_WIDTH - 2
    return (cfg.BLOCK_IN == cfg.BLOCK_OUT and widths
            and 0 <= int(attrs["lshift_a"]) <= top and 0 <= int(attrs["lshift_b"]) <= top)


def _lower_add_gemm(cfg: VTAConfig, uid: str, lay: SlotLayout, attrs: dict, plan) -> LoweredOp:
    """``qadd`` as a GEMM: ``acc = a * (1 << lshift_a) + b * (1 << lshift_b)`` with two
    resident diagonal weight blocks, then the ALU requantize.  ``a`` and ``b`` are INP loads
    on the load module, so they overlap the compute of the previous chunk (double-buffered
    INP and ACC regions, the conv's token pattern); ACC8 loads run on the compute module
    and never overlap its ALU passes.  Exact: the same integer sum before the requantize.
    int4 activations (``lay.int4``): the same program over nibble-packed INP and OUT
    elements; int4 weights are packed two per byte."""
    B, BI = cfg.BATCH, cfg.BLOCK_IN
    h, w = lay.hw
    n_el = lay.cb * h * w
    nvt = 2
    shift, lo, hi = int(attrs["shift"]), int(attrs["clip_lo"]), int(attrs["clip_hi"])
    rnd = int(attrs["round"])
    # With ALU_REQUANT the rounding constant is a "bias row" (one ACC entry of ``round`` in
    # every lane, at the top of the accumulator), so the requantize is one clearing REQ per
    # entry (instead of ADD round + REQ) and the next chunk of the same ACC region skips its
    # reset: 3 compute cycles per entry (2 GEMM + REQ) against 4 beats of a + b on pynq's bus.
    round_row = (cfg.ALU_REQUANT and plan is None and req_shift_fits(shift, cfg.REQ_LANE_SHIFT)
                 and lo in REQ_LOWER_BOUNDS and lo <= hi <= 127)
    rrow = cfg.ACC_DEPTH - 1
    inp_half = cfg.INP_DEPTH // nvt
    acc_half = (cfg.ACC_DEPTH - int(round_row)) // nvt
    chunk = max(1, min(MAX_EXTENT, inp_half // 2, acc_half))
    wgt = np.zeros((2, cfg.BLOCK_OUT, BI), np.int8)
    wgt[0] = np.eye(BI, dtype=np.int8) * (1 << int(attrs["lshift_a"]))
    wgt[1] = np.eye(BI, dtype=np.int8) * (1 << int(attrs["lshift_b"]))
    slots = {"a": lay.block_bytes, "b": lay.block_bytes, "y": lay.block_bytes}
    tb = TraceBuilder(uid, slots)
    wbase = cfg.WGT_DEPTH - 2
    tb.load_2d("w", 0, MemType.WGT, wbase, 1, 2, 2)
    consts = {"w": pack_int4(wgt) if cfg.WGT_WIDTH == 4 else wgt}
    if round_row:
        tb.load_2d("r", 0, MemType.ACC, rrow, 1, 1, 1)
        consts["r"] = pack_bias(np.zeros(cfg.BLOCK_OUT, np.int32), rnd, B, cfg.BLOCK_OUT)
    cleared = [0] * nvt          # entries of each ACC region the last clearing REQ zeroed
    t = 0
    for e0 in range(0, n_el, chunk):
        m = min(chunk, n_el - e0)
        vt = t % nvt
        inp_base, acc_base = vt * inp_half, vt * acc_half
        if t >= nvt:
            tb.dep_pop(C, L)
        tb.load_2d("a", e0, MemType.INP, inp_base, 1, m, m)
        tb.load_2d("b", e0, MemType.INP, inp_base + m, 1, m, m)
        tb.dep_push(L, C)
        tb.dep_pop(L, C)
        if t >= nvt:
            tb.dep_pop(S, C)
        if m > cleared[vt]:
            emit_kernel(tb, "gemm", [(m, 1, 0, 0)], [acc_base], [0], reset=True)
        emit_kernel(tb, "gemm", [(m, 1, 1, 0)], [acc_base, acc_base],
                    [inp_base, inp_base + m], [wbase, wbase + 1])
        tb.dep_push(C, L)
        if round_row:
            clr = requant_alu(tb, acc_base, m, shift, lo, hi,
                              bias=([(m, 1, 0, 0)], [acc_base], [rrow]), fused=True, clear=True)
            cleared[vt] = m if clr else 0
            _store_tail(tb, acc_base, e0, m)
        else:
            _requant_store(tb, acc_base, e0, m, attrs, plan, cfg.ALU_REQUANT,
                           cfg.REQ_LANE_SHIFT)
        t += 1
    for _ in range(min(t, nvt)):
        tb.dep_pop(C, L)
    for _ in range(min(t, nvt)):
        tb.dep_pop(S, C)
    tb.trace.stats = {"tiles": t, "gemm_uops_ideal": 0, "gemm_add": True,
                      "round_row": bool(round_row),
                      **dram_stats(B * 2 * int(np.prod(lay.shape)) * lay.bits // 8,
                                   B * int(np.prod(lay.shape)) * lay.bits // 8)}
    return fit_queues(cfg, LoweredOp(tb.trace, consts, {"a": lay, "b": lay, "y": lay}))


def lower_mul(cfg: VTAConfig, uid: str, chw: tuple, chw_b: tuple, attrs: dict) -> LoweredOp:
    """Lower ``qmul`` of two int8 tensors (slots ``a``, ``b``, ``y``) for one batch block:
    ACC8 loads of both, ALU MUL by the tensor operand (``use_imm`` 0), then the requantize.
    ``b`` has ``a``'s shape, or is per channel (``[C, 1, 1]`` against ``[C, H, W]``: the
    squeeze-excite scale), broadcast by a zero source factor in the inner loop of the MUL
    micro-op (``dst = a + i*HW + j``, ``src = b + i``).

    Raises:
        CompileError: ACC_8BIT or ALU_MUL off, another broadcast, a channel block whose
            ``H*W`` does not fit half the accumulator, a requantize without an overflow-free
            sequence.
    """
    if not cfg.ACC_8BIT or not cfg.ALU_MUL:
        raise CompileError(f"{uid}: a tensor multiply on VTA needs ACC_8BIT and ALU_MUL")
    plan = plan_for(cfg, uid, attrs, 128 * 128)
    if plan is None and int(attrs["round"]) > LIMITS.imm_max:
        raise CompileError(f"{uid}: rounding constant {attrs['round']} exceeds the ALU immediate")
    B, BO = cfg.BATCH, cfg.BLOCK_OUT
    lay, lay_b = SlotLayout(tuple(chw), B, BO), SlotLayout(tuple(chw_b), B, BO)
    h, w = lay.hw
    hw = h * w
    bcast = tuple(chw_b) != tuple(chw)
    if bcast and (tuple(chw_b) != (chw[0], 1, 1)):
        raise CompileError(f"{uid}: multiply of {list(chw)} by {list(chw_b)}: only equal shapes or a "
                           f"per-channel [C,1,1] operand run on VTA")
    nvt = 2
    half = cfg.ACC_DEPTH // nvt
    if bcast:
        per = hw + 1                       # one channel block of a and its scale
        k = min(half // per, MAX_EXTENT)
        if k < 1 or hw > MAX_EXTENT:
            raise CompileError(f"{uid}: a {h}x{w} channel block does not fit half the accumulator")
        chunks = [(c0, min(k, lay.cb - c0)) for c0 in range(0, lay.cb, k)]
    else:
        m_max = max(1, min(MAX_EXTENT, LIMITS.max("size"), half // 2))
        n_el = lay.cb * hw
        chunks = [(e0, min(m_max, n_el - e0)) for e0 in range(0, n_el, m_max)]
    tb = TraceBuilder(uid, {"a": lay.block_bytes, "b": lay_b.block_bytes, "y": lay.block_bytes})
    t = 0
    for s0, cnt in chunks:
        vt = t % nvt
        a_base = vt * half
        m = cnt * hw if bcast else cnt
        b_base = a_base + m
        if t >= nvt:
            tb.dep_pop(S, C)
        e0 = s0 * hw if bcast else s0
        tb.load_2d("a", e0, MemType.ACC8, a_base, 1, m, m)
        if bcast:
            tb.load_2d("b", s0, MemType.ACC8, b_base, 1, cnt, cnt)
            emit_kernel(tb, "alu", [(cnt, hw, 1, 0), (hw, 1, 0, 0)], [a_base], [b_base], op=AluOp.MUL)
        else:
            tb.load_2d("b", e0, MemType.ACC8, b_base, 1, m, m)
            emit_kernel(tb, "alu", [(m, 1, 1, 0)], [a_base], [b_base], op=AluOp.MUL)
        _requant_store(tb, a_base, e0, m, attrs, plan, cfg.ALU_REQUANT,
                       cfg.REQ_LANE_SHIFT)
        t += 1
    for _ in range(min(t, nvt)):
        tb.dep_pop(S, C)
    tb.trace.stats = {"tiles": t, "gemm_uops_ideal": 0,
                      **dram_stats(B * (int(np.prod(chw)) + int(np.prod(chw_b))),
                                   B * int(np.prod(chw)))}
    return fit_queues(cfg, LoweredOp(tb.trace, {}, {"a": lay, "b": lay_b, "y": lay}))


def lower_add_const(cfg: VTAConfig, uid: str, chw: tuple, vals: np.ndarray, attrs: dict,
                    alu: AluOp = AluOp.ADD) -> LoweredOp:
    """Lower ``qadd`` of a tensor and a constant, or (``alu=MUL``, ``ALU_MUL``) ``qmul`` by a
    constant (slots ``a``, ``y``; a per-channel constant is the packed ACC constant ``c``)
    for one batch block: ACC8 load of ``a``, SHR by ``-lshift_a`` (add only), then ADD / MUL
    by the constant prepared on the host (``vals``: ``c << lshift_b`` for an add, ``c`` for
    a multiply; int32): one value as an immediate, or one per channel loaded into the
    accumulator and broadcast over H*W by a zero source factor; then the requantize.

    Raises:
        CompileError: ACC_8BIT off, a scalar beyond the 16-bit immediate, a channel block
            whose ``H*W`` does not fit half the accumulator, no overflow-free requantize.
    """
    if not cfg.ACC_8BIT or (alu == AluOp.MUL and not cfg.ALU_MUL):
        raise CompileError(f"{uid}: this op on VTA needs ACC_8BIT" + (" and ALU_MUL" if alu == AluOp.MUL else ""))
    la = int(attrs.get("lshift_a", 0))
    vmax = int(np.abs(vals).max(initial=0))
    bound = 128 * vmax if alu == AluOp.MUL else 128 * (1 << la) + vmax
    plan = plan_for(cfg, uid, attrs, bound)
    if plan is None and int(attrs["round"]) > LIMITS.imm_max:
        raise CompileError(f"{uid}: rounding constant {attrs['round']} exceeds the ALU immediate")
    B, BO = cfg.BATCH, cfg.BLOCK_OUT
    lay = SlotLayout(tuple(chw), B, BO)
    h, w = lay.hw
    hw = h * w
    scalar = vals.size == 1
    if scalar and not LIMITS.imm_min <= int(vals[0]) <= LIMITS.imm_max:
        raise CompileError(f"{uid}: the aligned constant {int(vals[0])} exceeds the ALU immediate")
    nvt = 2
    half = cfg.ACC_DEPTH // nvt
    consts = {}
    if scalar:
        m_max = max(1, min(MAX_EXTENT, LIMITS.max("size"), half))
        n_el = lay.cb * hw
        chunks = [(e0, min(m_max, n_el - e0)) for e0 in range(0, n_el, m_max)]
    else:
        if hw > MAX_EXTENT or half < hw + 1:
            raise CompileError(f"{uid}: a {h}x{w} channel block does not fit half the accumulator")
        k = min((half - lay.cb) // hw if half > lay.cb else 0, MAX_EXTENT)
        if k < 1:
            raise CompileError(f"{uid}: {lay.cb} channel blocks of constants and a {h}x{w} block "
                               f"do not fit half the accumulator")
        chunks = [(c0, min(k, lay.cb - c0)) for c0 in range(0, lay.cb, k)]
        consts["c"] = pack_bias(vals, 0, B, BO)
    tb = TraceBuilder(uid, {"a": lay.block_bytes, "y": lay.block_bytes})
    if not scalar:      # the constants, resident at the top of each thread's region
        for vt in range(nvt):
            tb.load_2d("c", 0, MemType.ACC, vt * half + half - lay.cb, 1, lay.cb, lay.cb)
    t = 0
    for s0, cnt in chunks:
        vt = t % nvt
        a_base = vt * half
        m = cnt if scalar else cnt * hw
        e0 = s0 if scalar else s0 * hw
        if t >= nvt:
            tb.dep_pop(S, C)
        tb.load_2d("a", e0, MemType.ACC8, a_base, 1, m, m)
        loops = [(m, 1, 1, 0)]
        if la:
            emit_kernel(tb, "alu", loops, [a_base], [a_base], op=AluOp.SHR, imm=-la)
        if scalar:
            if int(vals[0]) or alu == AluOp.MUL:
                emit_kernel(tb, "alu", loops, [a_base], [a_base], op=alu, imm=int(vals[0]))
        else:
            c_base = vt * half + half - lay.cb + s0
            emit_kernel(tb, "alu", [(cnt, hw, 1, 0), (hw, 1, 0, 0)], [a_base], [c_base], op=alu)
        _requant_store(tb, a_base, e0, m, attrs, plan, cfg.ALU_REQUANT,
                       cfg.REQ_LANE_SHIFT)
        t += 1
    for _ in range(min(t, nvt)):
        tb.dep_pop(S, C)
    tb.trace.stats = {"tiles": t, "gemm_uops_ideal": 0,
                      **dram_stats(B * int(np.prod(chw)), B * int(np.prod(chw)))}
    return fit_queues(cfg, LoweredOp(tb.trace, consts, {"a": lay, "y": lay}))
