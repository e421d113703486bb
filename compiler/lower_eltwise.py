"""Lowering of ``qmax_pool``, ``qavg_pool`` (power-of-two window), ``qadd`` and
``qrequant`` to relocatable VTA programs.  All operands are int8 loaded into the
accumulator with ACC8 loads (sign-extended), processed on the ALU and stored.

Pooling: tiles of (channel blocks x output rows), full width; per channel block one ACC8
LOAD of the input rows with zero padding (exact for max-pool only on non-negative inputs,
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
from .lower_common import dram_stats, fit_queues
from .lower_conv import LoweredOp, act_layout, emit_kernel, plan_for, requant_alu, window_geometry
from .pack import pack_bias
from .tiling import MAX_EXTENT, candidates

__all__ = ["lower_pool", "lower_eltwise", "lower_mul", "lower_add_const", "gemm_add_ok"]

L, C, S = Module.LOAD, Module.COMPUTE, Module.STORE

def lower_pool(cfg: VTAConfig, uid: str, in_chw: tuple, attrs: dict, kind: str, *,
               separable: bool = True) -> LoweredOp:
    """Lower ``qmax_pool`` (``kind="max"``) or ``qavg_pool`` (``kind="avg"``) for one batch
    block; slots ``x`` (ACC8, NCHW{B}n{BLOCK_OUT}c) and ``y`` (OUT).  ``separable``: a max
    window with ``k < 2·s`` on both axes runs as a column pass in place, then a row pass
    (:func:`_max_pool_separable`; False: reset, copy and MAX per window element).

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
    # overlapping rows (kh > sh): output row i goes to input row i*sh, dead after the
    # column pass, so the tile needs no output region (larger tiles, fewer reloaded rows)
    in_rows = sep and kh > sh
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
            break
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
                            plan=plan, fused=cfg.ALU_REQUANT)
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
                   fused: bool = False) -> None:
    """The tail of one element-wise tile: the ALU requantize of ACC ``[base, base+m)``, then
    :func:`_store_tail`."""
    requant_alu(tb, base, m, int(attrs["shift"]), int(attrs["clip_lo"]), int(attrs["clip_hi"]),
                extra_round=int(attrs["round"]) if plan is None else plan.pre_add, plan=plan,
                fused=fused)
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
        _requant_store(tb, a_base, e0, m, attrs, plan, cfg.ALU_REQUANT)
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
    round_row = (cfg.ALU_REQUANT and plan is None and -32 <= shift <= 31 and lo in REQ_LOWER_BOUNDS
                 and lo <= hi <= 127)
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
            _requant_store(tb, acc_base, e0, m, attrs, plan, cfg.ALU_REQUANT)
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
        _requant_store(tb, a_base, e0, m, attrs, plan, cfg.ALU_REQUANT)
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
        _requant_store(tb, a_base, e0, m, attrs, plan, cfg.ALU_REQUANT)
        t += 1
    for _ in range(min(t, nvt)):
        tb.dep_pop(S, C)
    tb.trace.stats = {"tiles": t, "gemm_uops_ideal": 0,
                      **dram_stats(B * int(np.prod(chw)), B * int(np.prod(chw)))}
    return fit_queues(cfg, LoweredOp(tb.trace, consts, {"a": lay, "y": lay}))
