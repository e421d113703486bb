"""Packing: logical int8 (int16 on 16-bit cores) / int32 tensors to VTA's blocked DRAM layouts and back.

Layouts (elements as the ISA sees them; sources: vta-anchor.md §2 memory types):

* activations: ``[ceil(N/BATCH), ceil(C/cblk), H', W', BATCH, cblk]`` int8,
  i.e. NCHW{BATCH}n{cblk}c with ``cblk = BLOCK_IN`` for GEMM inputs and ``BLOCK_OUT`` for
  outputs / ACC8 operands; batch and channels zero-padded, optional host-side spatial
  zero padding (:class:`~vtaforge.runtime.artifact.SlotLayout`);
* conv/dense weights: block-compressed OIHW{BLOCK_OUT}o{BLOCK_IN}i: the dense
  block-diagonal weight of a grouped conv is cut into ``BLOCK_OUT x BLOCK_IN`` blocks and
  only the blocks that the group structure can make non-zero are kept, ordered
  ``(ob, ib)``; each is ``[KH, KW, BLOCK_OUT, BLOCK_IN]``.  For ``groups == 1`` this is
  exactly ``[O/BO, C/BI, KH, KW, BO, BI]``; for depthwise convs it keeps one block per
  output channel block (so depthwise costs no extra GEMM work beyond the block diagonal);
* depthwise weights for the depthwise GEMM (a ``DEPTHWISE_TAPS`` = T core,
  :func:`pack_depthwise`): one block per channel block ``cb``, ``[KH, ceil(KW/T), BO, BI]``,
  row ``o`` column ``t`` of tile ``(ky, kc)`` holding ``w[cb*BO + o, 0, ky, kc*T + t]``
  (zero past ``KW``, in columns ``T`` and up and in padded channels);
* bias: ``[ceil(O/BLOCK_OUT), BATCH, BLOCK_OUT]`` int32 (ACC elements), the same values for
  every batch lane, with the requantize rounding constant added (``bias + round``: exact,
  the sum is formed before the shift either way); with per-output-channel requantization
  ``[2 * ceil(O/BLOCK_OUT), BATCH, BLOCK_OUT]``: those blocks, then each channel's shift
  amount in the same layout (:func:`pack_bias` ``shift``).

Channel counts that are not a multiple of the block (3, 17, 255) are zero-padded on
packing and sliced back on unpacking.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

__all__ = ["WeightPack", "pack_weights", "pack_depthwise", "pack_bias", "ceil_div"]


def ceil_div(a: int, b: int) -> int:
    return -(-a // b)


@dataclass
class WeightPack:
    """Block-compressed conv weights.

    Attributes:
        data: int8 (int16 weights: int16) ``[n_blocks, KH, KW, BO, BI]``.
        blocks: int64 ``[n_blocks, 2]``: ``(ob, ib)`` of each stored block, sorted.
        ob_ranges: ``ob -> (first, end)`` indices into ``blocks`` for that output block.
        n_ob, n_ib: block counts of the output / input channels (padded).
    """

    data: np.ndarray
    blocks: np.ndarray
    ob_ranges: list
    n_ob: int
    n_ib: int

    def ibs(self, ob: int) -> np.ndarray:
        a, b = self.ob_ranges[ob]
        return self.blocks[a:b, 1]


def block_mask(o: int, c: int, groups: int, bo: int, bi: int) -> np.ndarray:
    """``[ceil(o/bo), ceil(c/bi)]`` bool: blocks the group structure may make non-zero."""
    og, cg = o // groups, c // groups
    oo = np.arange(o) // og            # group of each output channel
    cc = np.arange(c) // cg
    nob, nib = ceil_div(o, bo), ceil_div(c, bi)
    m = np.zeros((nob, nib), bool)
    for g in range(groups):
        ob = np.unique(np.flatnonzero(oo == g) // bo)
        ib = np.unique(np.flatnonzero(cc == g) // bi)
        m[np.ix_(ob, ib)] = True
    return m


def pack_weights(w: np.ndarray, groups: int, bo: int, bi: int) -> WeightPack:
    """Pack int8 (or int16, for a ``LOG_WGT_WIDTH`` 4 core) OIHW weights (``I = C/groups``)
    into :class:`WeightPack` (of the same dtype).

    Raises:
        ValueError: not 4-D, or channels not divisible by ``groups``.
    """
    if w.ndim != 4:
        raise ValueError(f"weights must be 4-D OIHW, got shape {w.shape}")
    o, cg, kh, kw = w.shape
    c = cg * groups
    if o % groups:
        raise ValueError(f"{o} output channels not divisible by groups {groups}")
    nob, nib = ceil_div(o, bo), ceil_div(c, bi)
    og = o // groups
    full = np.zeros((nob * bo, nib * bi, kh, kw), w.dtype if w.dtype == np.int16 else np.int8)
    for g in range(groups):
        full[g * og:(g + 1) * og, g * cg:(g + 1) * cg] = w[g * og:(g + 1) * og]
    blk = full.reshape(nob, bo, nib, bi, kh, kw).transpose(0, 2, 4, 5, 1, 3)  # ob ib kh kw bo bi
    mask = block_mask(o, c, groups, bo, bi)
    pairs = np.argwhere(mask)                      # sorted (ob, ib)
    data = np.ascontiguousarray(blk[pairs[:, 0], pairs[:, 1]])
    ranges = []
    for ob in range(nob):
        idx = np.flatnonzero(pairs[:, 0] == ob)
        ranges.append((int(idx[0]), int(idx[-1]) + 1) if idx.size else (0, 0))
    return WeightPack(data, pairs.astype(np.int64), ranges, nob, nib)


def pack_depthwise(w: np.ndarray, bo: int, taps: int) -> WeightPack:
    """Pack int8 depthwise weights ``[C, 1, KH, KW]`` for the depthwise GEMM of ``taps``
    taps (docs/isa.md "Depthwise GEMM"): :class:`WeightPack` with ``data`` int8
    ``[ceil(C/bo), KH, ceil(KW/taps), bo, bo]``, ``data[cb, ky, kc, o, t] = w[cb*bo + o, 0,
    ky, kc*taps + t]`` for ``t < taps`` and ``kc*taps + t < KW``, zero elsewhere; one block
    ``(cb, cb)`` per channel block, as :func:`pack_weights` keeps for a depthwise conv.

    Raises:
        ValueError: not ``[C, 1, KH, KW]``, or ``taps`` not in ``2..bo``.
    """
    if w.ndim != 4 or w.shape[1] != 1:
        raise ValueError(f"depthwise weights must be [C, 1, KH, KW], got shape {w.shape}")
    if not 2 <= taps <= bo:
        raise ValueError(f"depthwise taps {taps} not in 2..{bo}")
    c, _, kh, kw = w.shape
    nb, nkc = ceil_div(c, bo), ceil_div(kw, taps)
    full = np.zeros((nb * bo, kh, nkc * taps), np.int8)
    full[:c, :, :kw] = w[:, 0]
    # [cb, o, ky, kc, t] -> [cb, ky, kc, o, t], then t padded to bo columns
    blk = full.reshape(nb, bo, kh, nkc, taps).transpose(0, 2, 3, 1, 4)
    data = np.zeros((nb, kh, nkc, bo, bo), np.int8)
    data[..., :taps] = blk
    pairs = np.stack([np.arange(nb), np.arange(nb)], axis=1).astype(np.int64)
    return WeightPack(data, pairs, [(i, i + 1) for i in range(nb)], nb, nb)


def pack_bias(bias: np.ndarray, round_, batch: int, bo: int,
              shift=None) -> np.ndarray:
    """int32 ``[O]`` -> ``[ceil(O/bo), batch, bo]`` int32 holding ``bias + round``.

    ``round_``: one int, or one per output channel (``[O]``, per-channel requantize).
    ``shift`` (per-channel requantize: ``[O]`` ints, negative = left shift): the result is
    ``[2 * ceil(O/bo), batch, bo]``, the ``bias + round`` blocks followed by the shift
    amounts in the same layout (the tensor operand of the ALU SHR; padded channels 0)."""
    o = bias.shape[0]
    nob = ceil_div(o, bo)
    b = np.zeros(nob * bo, np.int64)
    if np.ndim(round_):
        b[:o] = bias.astype(np.int64) + np.asarray(round_, np.int64).reshape(o)
    else:
        b[:o] = bias.astype(np.int64) + int(round_)
    if shift is not None:
        sh = np.zeros(nob * bo, np.int64)
        sh[:o] = np.asarray(shift, np.int64).reshape(o)
        b = np.concatenate([b, sh])
        nob *= 2
    b = b.reshape(nob, 1, bo).repeat(batch, axis=1)
    return np.ascontiguousarray(b.astype(np.int32))
