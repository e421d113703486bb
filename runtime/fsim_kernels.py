"""fsim's data kernels: the numpy work the machine (:mod:`vtaforge.runtime.fsim`) records
and replays, with the index arithmetic it is built from.

- index helpers: loop-nest boxes and their indices (:func:`_nest_boxes`,
  :func:`_nest_index`), ascending runs as slices (:func:`_fast_index`), index bytes;
- ALU: one lane function over arrays (:func:`_alu_eval`), hazard-free in-place steps and
  their fusion (:func:`_alu_step`, :func:`_fuse_alu`), read-after-write waves
  (:func:`_prev_conflict`, :func:`_waves`);
- GEMM: a nest as virtual micro-ops and rows (:func:`_gemm_nest`), its work chunks
  (:func:`_gemm_chunks`), the matmul kernel (:func:`_gemm_kernel`) and the depthwise one
  (:func:`_gemm_dw_kernel`);
- wrapping at the accumulator width (:func:`_wrap`, :func:`_wrap_`).

Every function here is a pure function of its arguments or, for the returned kernels, of
the machine they are called with.
"""

from __future__ import annotations

from types import SimpleNamespace
from typing import TYPE_CHECKING

import numpy as np

from ..hw.config import VTAConfig
from ..hw.isa import AluOp, req_fields, req_lane_fields

if TYPE_CHECKING:
    from .fsim import _Machine


#: Micro-ops evaluated per numpy chunk (bounds temporary memory).
CHUNK = 1 << 15


_SIGNED = {8: np.int8, 16: np.int16, 32: np.int32}


def _wrap(x: np.ndarray, bits: int) -> np.ndarray:
    """Wrap int64 values to signed ``bits``-bit two's complement (a new array, int64)."""
    t = _SIGNED.get(bits)
    if t is not None and isinstance(x, np.ndarray):    # integer casts keep the low bits
        return x.astype(t).astype(np.int64)
    half = np.int64(1 << (bits - 1))
    mask = np.int64((1 << bits) - 1)
    return ((x + half) & mask) - half


def _int_dtype(bits: int) -> str:
    return {4: "int4", 8: "<i1", 16: "<i2", 32: "<i4"}[bits]


def _uint_dtype(bits: int) -> str:
    return {8: "<u1", 16: "<u2", 32: "<u4"}[bits]


def _nest_boxes(I: int, J: int, U: int, chunk: int = CHUNK):
    """Split the loop nest ``I x J x U`` (in execution order) into boxes
    ``(i0, i1, j0, j1, k0, k1)`` of at most about ``chunk`` micro-ops."""
    if J * U <= chunk:
        step = max(1, chunk // (J * U))
        for i0 in range(0, I, step):
            yield i0, min(I, i0 + step), 0, J, 0, U
    elif U <= chunk:
        step = max(1, chunk // U)
        for i in range(I):
            for j0 in range(0, J, step):
                yield i, i + 1, j0, min(J, j0 + step), 0, U
    else:
        for i in range(I):
            for j in range(J):
                for k0 in range(0, U, chunk):
                    yield i, i + 1, j, j + 1, k0, min(U, k0 + chunk)


def _box_index(base: np.ndarray, box, f_out: int, f_in: int) -> np.ndarray:
    i0, i1, j0, j1, k0, k1 = box
    b = base[k0:k1]
    io = np.arange(i0, i1, dtype=np.int64) * f_out
    jo = np.arange(j0, j1, dtype=np.int64) * f_in
    return (io[:, None, None] + jo[None, :, None] + b[None, None, :]).reshape(-1)


def _prev_conflict(dst: np.ndarray, src: np.ndarray | None) -> np.ndarray:
    """For each micro-op n, the largest m < n whose destination equals dst[n] or src[n]
    (−1 if none): the last earlier micro-op that n must follow."""
    n = dst.size
    order = np.argsort(dst, kind="stable")
    sd = dst[order]
    prev = np.full(n, -1, dtype=np.int64)
    same = sd[1:] == sd[:-1]
    prev[order[1:][same]] = order[:-1][same]
    if src is not None:
        keys = sd * n + order
        q = src * n + np.arange(n, dtype=np.int64)
        pos = np.searchsorted(keys, q, side="left") - 1
        valid = pos >= 0
        pos = np.maximum(pos, 0)
        hit = valid & (sd[pos] == src)
        cand = np.where(hit, order[pos], -1)
        prev = np.maximum(prev, cand)
    return prev


def _waves(prev: np.ndarray):
    """Maximal contiguous runs ``[a, b)`` in which no micro-op depends on an earlier one of
    the same run (``prev[x] < a`` for every x in the run)."""
    n = prev.size
    a = 0
    while a < n:
        w = 64
        b = n
        lo = a + 1
        while lo < n:
            hi = min(n, lo + w)
            hit = np.flatnonzero(prev[lo:hi] >= a)
            if hit.size:
                b = lo + int(hit[0])
                break
            lo = hi
            w *= 2
        yield a, b
        a = b


def _same(x):
    return x


def _dram_view(dram: np.ndarray, base: int, y: int, xb: int, stride: int, *,
               writeable: bool = False) -> np.ndarray:
    """``y`` rows of ``xb`` bytes of ``dram`` from byte ``base``, ``stride`` bytes apart, as
    a ``(y, xb)`` uint8 view (bounds already checked)."""
    if dram.flags.c_contiguous:     # the ndarray constructor is far cheaper than as_strided
        return np.ndarray((y, xb), np.uint8, dram, base, (stride, 1))
    return np.lib.stride_tricks.as_strided(dram[base:], shape=(y, xb), strides=(stride, 1),
                                           writeable=writeable)


def _wrap_(v: np.ndarray, bits: int) -> None:
    """:func:`_wrap` in place (``v``: int64)."""
    t = _SIGNED.get(bits)
    if t is not None:
        np.copyto(v, v.astype(t))
        return
    v += np.int64(1 << (bits - 1))
    v &= np.int64((1 << bits) - 1)
    v -= np.int64(1 << (bits - 1))


def _alu_step(aop: int, imm: int, use_imm: bool, bits: int, log_acc: int,
              lane: bool = False):
    """The ALU operation as an in-place step ``g(v, b)``: ``v[...] = op(v, b)`` for the
    int64 destination values ``v`` and the source values ``b`` (ignored with
    ``use_imm``), exactly as :func:`_alu_eval`; accumulator values are always wrapped, so
    REQ's add of 0 is the identity.  ``lane``: a per-lane REQ (:func:`_alu_eval`)."""
    if lane and use_imm:    # the operand is 0: bias 0, shift 0, the clip alone
        _, lo, hi, _ = req_fields(imm)
        lo, hi = np.int64(lo), np.int64(hi)

        def clip(v, b):
            np.maximum(v, lo, out=v)
            np.minimum(v, hi, out=v)

        return clip
    if use_imm:
        bi = np.int64(imm)
        if aop == AluOp.MIN:
            return lambda v, b: np.minimum(v, bi, out=v)
        if aop == AluOp.MAX:
            return lambda v, b: np.maximum(v, bi, out=v)
        if aop in (AluOp.ADD, AluOp.MUL):
            uf = np.add if aop == AluOp.ADD else np.multiply

            def addmul(v, b):
                uf(v, bi, out=v)
                _wrap_(v, bits)

            return addmul
        if aop in (AluOp.SHR, AluOp.REQ):
            mb = log_acc + 1
            sh = req_fields(imm)[0] if aop == AluOp.REQ else imm
            sh = ((sh & ((1 << mb) - 1)) ^ (1 << (mb - 1))) - (1 << (mb - 1))
            if sh < 0:
                k = np.int64(min(-sh, 63))

                def shl(v, b):
                    np.left_shift(v, k, out=v)
                    _wrap_(v, bits)

                shift = shl
            else:
                k = np.int64(min(sh, 63))

                def shift(v, b):
                    np.right_shift(v, k, out=v)

            if aop == AluOp.SHR:
                return shift
            _, lo, hi, _ = req_fields(imm)
            lo, hi = np.int64(lo), np.int64(hi)

            def req(v, b):
                shift(v, b)
                np.maximum(v, lo, out=v)
                np.minimum(v, hi, out=v)

            return req
    else:
        if aop == AluOp.MIN:
            return lambda v, b: np.minimum(v, b, out=v)
        if aop == AluOp.MAX:
            return lambda v, b: np.maximum(v, b, out=v)
        if aop in (AluOp.ADD, AluOp.MUL):
            uf = np.add if aop == AluOp.ADD else np.multiply

            def addmul_src(v, b):
                uf(v, b, out=v)
                _wrap_(v, bits)

            return addmul_src

    def general(v, b):
        v[...] = _alu_eval(aop, v, np.int64(0 if aop == AluOp.REQ else imm) if use_imm
                           else b, imm, bits, log_acc, lane)

    return general


def _alu_fused(d, steps: list):
    """The data work of ALU steps ``(g, s)`` applied in order to the distinct accumulator
    entries ``d`` (a slice: in place; an index array: gathered, then written back), each
    reading its source ``acc[s]`` (None: immediate).  With a slice every step sees the
    writes of the ones before it (ufuncs read overlapping operands as if copied first);
    with an index array only the first step may read a source (:func:`_fuse_alu`)."""
    if isinstance(d, slice):
        def alu(m: _Machine) -> None:
            acc = m.acc
            v = acc[d]
            for g, s in steps:
                g(v, None if s is None else acc[s])
    else:
        def alu(m: _Machine) -> None:
            acc = m.acc
            v = acc[d]
            for g, s in steps:
                g(v, None if s is None else acc[s])
            acc[d] = v
    alu.fuse = (d, steps)
    return alu


def _same_index(a, b) -> bool:
    if isinstance(a, slice) or isinstance(b, slice):
        return isinstance(a, slice) and isinstance(b, slice) and a == b
    return a is b or (a.shape == b.shape and bool(np.array_equal(a, b)))


def _fuse_alu(ops: list) -> list:
    """Merge runs of consecutive ALU steps on the same entries (:func:`_alu_fused`) into
    one function each; the results are those of running them one after another."""
    out: list = []
    for fn in ops:
        fu = getattr(fn, "fuse", None)
        prev = getattr(out[-1], "fuse", None) if out else None
        if fu is not None and prev is not None and _same_index(prev[0], fu[0]) and \
                (isinstance(fu[0], slice) or all(s is None for _, s in fu[1])):
            out[-1] = _alu_fused(prev[0], prev[1] + fu[1])
        else:
            out.append(fn)
    return out


def _gemm_nest(I: int, J: int, dst_b, src_b, wgt_b, dfo, dfi, sfo, sfi, wfo, wfi):
    """A GEMM nest as virtual micro-ops and rows: the loop levels with a weight factor
    are expanded into the micro-ops (``vd``, ``vs``, ``vw``: int64 destination, source
    and weight indices), the others into row offsets of the destination and source
    (``rd``, ``rs``)."""
    vd, vs, vw = dst_b, src_b, wgt_b
    rd = np.zeros(1, dtype=np.int64)
    rs = np.zeros(1, dtype=np.int64)
    for n, fd, fs, fw in ((I, dfo, sfo, wfo), (J, dfi, sfi, wfi)):
        if n == 1:
            continue
        ar = np.arange(n, dtype=np.int64)
        if fw:
            vd = (ar[:, None] * fd + vd[None, :]).reshape(-1)
            vs = (ar[:, None] * fs + vs[None, :]).reshape(-1)
            vw = (ar[:, None] * fw + vw[None, :]).reshape(-1)
        else:
            rd = (rd[:, None] + ar[None, :] * fd).reshape(-1)
            rs = (rs[:, None] + ar[None, :] * fs).reshape(-1)
    return vd, vs, vw, rd, rs


def _gemm_chunks(g: SimpleNamespace, rd: np.ndarray, rs: np.ndarray) -> list:
    """The work items of a grouped GEMM nest (:meth:`_Machine._gemm_groups`), in chunks
    of about ``CHUNK`` slots: per chunk of groups ``(g0, g1, ng, shared, items)``, each
    item ``(xi, nr, dst, o, first)`` the source rows of ``nr`` rows, the destinations
    (an index or a slice) and, where destinations repeat, the sort ``o`` and the
    ``reduceat`` starts ``first``."""
    G, Kp, ps, gd = g.G, g.Kp, g.ps, g.gd
    R = rd.size
    gc = max(1, CHUNK // Kp)
    chunks = []
    for g0 in range(0, G, gc):
        g1 = min(G, g0 + gc)
        ng = g1 - g0
        # every group of the chunk reads the same sources (e.g. a 1x1 convolution's
        # output-channel blocks): the sources are gathered once and broadcast over the
        # groups' weights
        shared = ng > 1 and bool((ps[g0:g1] == ps[g0]).all())
        rc = max(1, CHUNK // (ng * Kp))
        items = []
        for r0 in range(0, R, rc):
            r1 = min(R, r0 + rc)
            nr = r1 - r0
            pg = ps[g0:g0 + 1] if shared else ps[g0:g1]
            xi = pg + rs[None, None, r0:r1, None]       # (ng or 1, S, nr, Ks)
            dst = (gd[g0:g1, None] + rd[None, r0:r1]).reshape(-1)
            if (R == 1 and g.distinct) or _unique(dst):
                items.append((xi, nr, _fast_index(dst), None, None))
            else:
                o = np.argsort(dst, kind="stable")
                sdst = dst[o]
                first = np.flatnonzero(np.concatenate(([True], sdst[1:] != sdst[:-1])))
                items.append((xi, nr, _fast_index(sdst[first]), o, first))
        chunks.append((g0, g1, ng, shared, items))
    return chunks


def _gemm_kernel(cfg: VTAConfig, fdt, bits: int, g: SimpleNamespace, chunks: list,
                 wrap: bool):
    """The data work of a grouped GEMM nest as a function of the machine: the weights
    gathered into slot order (zeros in padding slots), then per item one batched matmul
    in the float dtype ``fdt``, summed over sub-groups in int64, reduced over repeated
    destinations and added into ``acc`` (wrapped at ``bits`` when ``wrap``)."""
    B, BI, BO = cfg.BATCH, cfg.BLOCK_IN, cfg.BLOCK_OUT
    G, S, Ks, Kp, slot, wsel, padded = g.G, g.S, g.Ks, g.Kp, g.slot, g.wsel, g.padded

    def gemm(m: _Machine) -> None:
        if not padded:
            W = np.take(m.wgt_t, wsel, axis=0) if not isinstance(wsel, slice) \
                else m.wgt_t[wsel]
        else:
            W = np.zeros((G * Kp, BI, BO), dtype=fdt)
            W[slot] = m.wgt_t[wsel] if isinstance(wsel, slice) \
                else np.take(m.wgt_t, wsel, axis=0)
        W = W.reshape(G, S, Ks * BI, BO)
        acc, inp = m.acc, m.inp
        for g0, g1, ng, shared, items in chunks:
            # shared: (ng, S, Ks*BI, BO), the sources broadcast over the groups
            Wg = W[g0:g1] if shared else W[g0:g1].reshape(ng * S, Ks * BI, BO)
            for xi, nr, dst, o, first in items:
                x = np.take(inp, xi, axis=0)                # (ng or 1, S, nr, Ks, B, BI)
                if B > 1:
                    x = x.transpose(0, 1, 2, 4, 3, 5)
                if shared:
                    x = x.reshape(1, S, nr * B, Ks * BI)
                else:
                    x = x.reshape(ng * S, nr * B, Ks * BI)
                p = np.matmul(x, Wg).astype(np.int64)     # (ng*S or ng x S, nr*B, BO)
                p = p.reshape(ng, S, nr * B * BO)
                p = p.sum(axis=1) if S > 1 else p[:, 0]
                p = p.reshape(ng * nr, B, BO)
                if o is not None:
                    p = np.add.reduceat(p[o], first, axis=0)
                if isinstance(dst, slice):
                    v = acc[dst]
                    v += p
                    if wrap:
                        _wrap_(v, bits)
                elif wrap:
                    acc[dst] = _wrap(acc[dst] + p, bits)
                else:
                    acc[dst] += p
    return gemm


def _gemm_dw_kernel(taps: int, bits: int, vd, vs, vw, rd, rs, wrap: bool):
    """The data work of a depthwise GEMM nest (virtual micro-ops ``vd``/``vs``/``vw`` and
    rows ``rd``/``rs`` of :func:`_gemm_nest`) and its index bytes: in chunks of about
    ``CHUNK`` micro-ops, the ``taps`` source entries of each gathered lane-wise against
    the first ``taps`` columns of its weight tile, the products summed in int64 per
    destination (sorted, ``reduceat``) and added into ``acc`` (wrapped at ``bits``)."""
    dst = (vd[:, None] + rd[None, :]).reshape(-1)
    src = (vs[:, None] + rs[None, :]).reshape(-1)
    wsel = np.repeat(vw, rd.size)
    order = np.argsort(dst, kind="stable")
    dst, src, wsel = dst[order], src[order], wsel[order]
    items = []
    step = max(1, CHUNK // taps)
    a = 0
    while a < dst.size:
        # chunk boundaries fall between destinations, so each is reduced within one chunk
        b = min(dst.size, a + step)
        while b < dst.size and dst[b] == dst[b - 1]:
            b += 1
        d = dst[a:b]
        first = np.flatnonzero(np.concatenate(([True], d[1:] != d[:-1])))
        items.append((src[a:b, None] + np.arange(taps), wsel[a:b], d[first], first))
        a = b
    nbytes = sum(t.nbytes + w.nbytes + d.nbytes + f.nbytes for t, w, d, f in items)

    def gemm(m: _Machine) -> None:
        for tap_idx, w_idx, d, first in items:
            x = np.take(m.inp, tap_idx, axis=0)                  # (n, taps, B, BI)
            w = np.take(m.wgt_t, w_idx, axis=0)[:, :taps, :]     # (n, taps, BO): [t][o]
            p = np.einsum("ntbo,nto->nbo", x, w).astype(np.int64)
            p = np.add.reduceat(p, first, axis=0)
            m.acc[d] = _wrap(m.acc[d] + p, bits) if wrap else m.acc[d] + p
    return gemm, nbytes


def _unique(dst: np.ndarray) -> bool:
    if dst.size <= 1:
        return True
    return int(np.bincount(dst, minlength=1).max()) <= 1


def _fast_index(idx: np.ndarray):
    """``idx`` as a ``slice`` when it is an ascending run of consecutive entries (basic
    indexing, much faster than a gather), else unchanged."""
    n = idx.size
    if n and int(idx[-1]) - int(idx[0]) == n - 1 and (
            n == 1 or bool((idx[1:] - idx[:-1] == 1).all())):
        return slice(int(idx[0]), int(idx[0]) + n)
    return idx


def _nest_index(base: np.ndarray, I: int, J: int, U: int, f_out: int, f_in: int):
    """Every index of a loop nest (execution order), as one array or a slice."""
    idx = np.concatenate([_box_index(base, box, f_out, f_in) for box in _nest_boxes(I, J, U)])
    return _fast_index(idx)


def _put(m: _Machine, dst, res: np.ndarray, clear: bool) -> None:
    """Write ALU results of distinct entries ``dst``: into ACC (OUT follows), or with
    ``clear`` (a clearing REQ) into OUT alone, ACC set to 0."""
    if clear:
        m.out_val[dst] = res
        m.out_set[dst] = True
        m.acc[dst] = 0
    else:
        m.acc[dst] = res


def _alu_eval(aop: int, a: np.ndarray, b, imm: int, bits: int, log_acc: int,
              lane: bool = False) -> np.ndarray:
    """One ALU operation on int64 operands ``a`` (destination) and ``b`` (source or
    immediate), wrapped at ``bits`` (ACC_WIDTH); ``log_acc``: LOG_ACC_WIDTH.  ``lane``: a
    per-lane REQ (``REQ_LANE_SHIFT`` core, shift field ``REQ_LANE``): ``b`` holds each
    lane's bias and shift (:func:`~vtaforge.hw.isa.req_lane_word`)."""
    if aop == AluOp.REQ and lane:
        _, lo, hi, _ = req_fields(imm)
        bias, shift = req_lane_fields(b)
        t = _alu_eval(AluOp.SHR, _alu_eval(AluOp.ADD, a, bias, imm, bits, log_acc),
                      shift, imm, bits, log_acc)
        return np.minimum(np.maximum(t, lo), hi)
    if aop == AluOp.REQ:    # b: the tensor operand, or 0 with use_imm (hw.isa.req_imm)
        shift, lo, hi, _ = req_fields(imm)
        t = _alu_eval(AluOp.SHR, _alu_eval(AluOp.ADD, a, b, imm, bits, log_acc),
                      np.int64(shift), imm, bits, log_acc)
        return np.minimum(np.maximum(t, lo), hi)
    if aop == AluOp.MIN:
        return np.minimum(a, b)
    if aop == AluOp.MAX:
        return np.maximum(a, b)
    if aop == AluOp.ADD:
        return _wrap(a + b, bits)
    if aop == AluOp.MUL:
        return _wrap(a * b, bits)
    # SHR: shift amount = low LOG_ACC_WIDTH+1 bits of b, read as signed
    mb = log_acc + 1
    b = np.asarray(b, dtype=np.int64)
    s = ((b & ((1 << mb) - 1)) ^ (1 << (mb - 1))) - (1 << (mb - 1))
    right = a >> np.clip(s, 0, 63)
    left = _wrap(a << np.clip(-s, 0, 63), bits)
    return np.where(s >= 0, right, left)


def _index_bytes(idx) -> int:
    """Bytes of an index (an array; 0 for a slice)."""
    return idx.nbytes if isinstance(idx, np.ndarray) else 0
