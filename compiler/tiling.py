"""Tile choice: split an operator so every tile fits the INP/WGT/ACC/UOP scratchpads.

:func:`conv_tiling` picks, for a conv (dense is a 1x1 conv on a 1x1 image), the output
channel blocks per tile ``obn``, the reduction chunk ``ibn`` (input channel blocks per
GEMM step; the reduction is split when the input window of all channels does not fit),
the output rows ``th`` and columns ``tw`` per tile, and the number of virtual threads
(2 = double buffering: load of step s+1 overlaps compute of step s; 1 when two copies do
not fit).  No layer is rejected for being large: the minimum tile is one output pixel,
one output block, one input block.  A layer is rejected only when even that minimum does
not fit (a kernel window larger than the INP scratchpad).

Constraints per virtual thread (elements): INP ``ibn * rows * cols`` with
``rows = (th-1)*sh + KH`` (``th`` with ``row_skip``: a 1x1 kernel of vertical stride > 1
without vertical padding loads only the rows it reads), ``cols = (tw-1)*sw + KW``; ACC
``obn * th * tw`` per ACC region (+ the bias region, shared, and for a per-channel
requantize the shift amounts after it; :func:`acc_regions`: two, one, or four
bank-aligned); WGT ``obn * ibn * KH * KW`` unless all weights fit at once (then they are
loaded once and stay resident); UOP: ``obn * ibn * KH * KW`` GEMM micro-ops (longer
kernels are split by the builder, exactly).  A depthwise conv lowered with depthwise GEMMs
(``taps``) has ``kh * ceil(kw/taps)`` in place of ``KH * KW`` in the WGT, UOP and cost terms
and ``ceil(kw/taps)*taps`` in place of ``KW`` in ``cols``.  Cost model (smaller is better): DRAM bytes
moved + ``STEP_COST`` bytes-equivalent per instruction-heavy step (+ ``ROW_COST`` per DMA
row, input rows loaded and output rows stored, for ``row_skip`` tilings).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from ..hw.config import MemType, VTAConfig
from ..hw.isa import LIMITS
from .errors import CompileError

__all__ = ["ConvTiling", "conv_tiling", "candidates", "acc_regions", "MAX_EXTENT"]

MAX_EXTENT = LIMITS.max("iter")  # loop extent field limit (14 bits)
STEP_COST = 4096            # bytes-equivalent of one GEMM step (instructions, launches)
ROW_COST = 24               # bytes-equivalent of one DMA row (~3 cycles of row overhead x 8 B)
#: bytes-equivalent of one STORE instruction: its wait for the write responses, ~50 cycles
#: of DRAM latency x 8 B (the tilings it moves are the same from 200 to 800: MobileNet-v1's
#: 112x112 1x1 conv from 9x14 column strips to whole rows, bench/RESULTS.md 2026-12-08)
STORE_COST = 400
#: On a REQ engine core, a conv whose output takes more than ``QUAD_ACC_RATIO`` times as
#: many STORE bus beats as GEMM cycles, and whose bias takes at most an eighth of the
#: accumulator, gets four ACC regions, two per accumulator bank, taken in turn low, high,
#: low, high (:func:`acc_regions`): a tile's GEMMs then wait for the STORE of the tile four
#: back, not two, and the engine's REQ of the previous tile reads the other bank.  The
#: default of ``ConvOptions.quad_acc_ratio`` (:func:`conv_tiling`'s ``quad_acc_ratio``).
QUAD_ACC_RATIO = 0.5


@dataclass(frozen=True)
class ConvTiling:
    """Tile sizes of a conv: ``obn``, ``ibn``, ``th``, ``tw``, ``nvt`` (virtual threads),
    ``resident`` (all weights loaded once), ``cost`` (model units)."""

    obn: int
    ibn: int
    th: int
    tw: int
    nvt: int
    resident: bool
    cost: float
    #: ACC regions (virtual threads of the accumulator, :func:`acc_regions`): ``nvt``, 1
    #: when the whole output fits the accumulator in one tile while INP/WGT stay
    #: double-buffered, or 4 for a store-heavy conv on a REQ engine core (:data:`QUAD_ACC_RATIO`).
    acc_nvt: int = 0

    def __post_init__(self):
        if not self.acc_nvt:
            object.__setattr__(self, "acc_nvt", self.nvt)


def acc_regions(cfg: VTAConfig, nob: int, acc_nvt: int,
                reserved: int | None = None) -> tuple[list[int], int]:
    """First accumulator entry of each of ``acc_nvt`` ACC regions and their size (entries),
    after the ``reserved`` entries at entry 0 (default ``nob``: the bias; ``2 * nob`` for a
    per-channel requantize, whose shift amounts follow the bias).  One or two regions:
    ``reserved + k * size`` with ``size = (ACC_DEPTH - reserved) // acc_nvt``.  Four
    (:data:`QUAD_ACC_RATIO`): two in each bank of ``ACC_DEPTH / 2`` entries, in the order low,
    high, low, high, each ``(ACC_DEPTH / 2 - reserved) // 2`` entries."""
    res = nob if reserved is None else int(reserved)
    if acc_nvt == 4:
        half = cfg.ACC_DEPTH // 2
        size = (half - res) // 2
        return [res, half, res + size, half + size], size
    size = (cfg.ACC_DEPTH - res) // acc_nvt
    return [res + k * size for k in range(acc_nvt)], size


def candidates(n: int, limit: int = 24) -> list[int]:
    """Sizes ``ceil(n/k)`` for k = 1.. (distinct, descending), at most ``limit`` of them
    plus 1."""
    out = []
    k = 1
    while len(out) < limit:
        v = -(-n // k)
        if not out or v < out[-1]:
            out.append(v)
        if v == 1:
            break
        k += 1
    if out[-1] != 1:
        out.append(1)
    return out


def conv_tiling(cfg: VTAConfig, nob: int, nib_span: int, ho: int, wo: int, kh: int, kw: int,
                sh: int, sw: int, n_wgt_blocks: int, blocks_per_ob: int,
                row_skip: bool = False, reserved: int | None = None, *,
                quad_acc_ratio: float = QUAD_ACC_RATIO, taps: int = 0,
                tile_span: Callable[[int], int] | None = None,
                merge_stores: bool = False) -> ConvTiling:
    """Choose the tiling of a conv (see the module docstring).

    Args:
        nob: output channel blocks; nib_span: input channel blocks one output block chunk
            reads (all of them for groups 1); ho, wo: output size; kh, kw, sh, sw: kernel
            and strides; n_wgt_blocks: stored weight blocks; blocks_per_ob: stored blocks
            per output block (max); row_skip: a tile holds ``th`` input rows, not
            ``(th-1)*sh + kh`` (the lowering loads every ``sh``-th row; ``kh == 1`` only);
            reserved: accumulator entries kept at entry 0 (default ``nob``, the bias;
            ``2 * nob`` with a per-channel requantize's shift amounts, :func:`acc_regions`);
            quad_acc_ratio: STORE beats per GEMM cycle above which a REQ engine core gets
            four ACC regions (:data:`QUAD_ACC_RATIO`); taps: a depthwise conv lowered with
            depthwise GEMMs of that many taps (0: not): a stored block is then
            ``kh * ceil(kw/taps)`` WGT entries and GEMM micro-ops per output pixel, and a
            window spans ``(tw-1)*sw + ceil(kw/taps)*taps`` columns (the last micro-op's
            taps).
        tile_span: input blocks a tile of ``obn`` output blocks reads (the union of its
            output blocks' input blocks; default ``nib_span``, a groups-1 conv's).  A
            depthwise or grouped conv's tile reads ``obn`` times its one output block's
            blocks (up to all of them), in that many reduction steps: without it the
            cost counted one block's window and one step per tile, and chose tiles of
            many output blocks and few pixels (MobileNet-v1's 56x56 depthwise: 8 blocks of
            7x8 pixels, load-bound).
        merge_stores: cost each STORE (:data:`STORE_COST`): one per tile when it spans
            whole rows (its blocks in one STORE, ``ConvOptions.merge_stores``), one per
            output block and tile otherwise.
    Raises:
        CompileError: not even a one-pixel tile fits this config.
    """
    inp_d, wgt_d, acc_d = cfg.INP_DEPTH, cfg.WGT_DEPTH, cfg.ACC_DEPTH
    uop_d = cfg.UOP_DEPTH
    eb_inp = cfg.elem_bytes(MemType.INP)
    eb_wgt = cfg.elem_bytes(MemType.WGT)
    res = nob if reserved is None else int(reserved)
    acc_free = acc_d - res
    kcols = -(-kw // taps) if taps else kw      # weight entries / micro-ops per kernel row
    kwin = kcols * taps if taps else kw         # window columns per output column run
    kk = kh * kcols
    resident = n_wgt_blocks * kk <= wgt_d
    # STORE beats per output element (bits / BUS_WIDTH) against GEMM cycles per output
    # element (1x1 convs of few input channels, im2col first layers)
    out_bits = cfg.elem_bytes(MemType.OUT) * 8
    quad = bool(cfg.REQ_ENGINE and res <= acc_d // 8
                and out_bits > quad_acc_ratio * nib_span * kk * cfg.BUS_WIDTH)
    best = None
    for nvt in (2, 1):
        for obn in candidates(nob):
            for ibn in candidates(nib_span):
                wg = min(ibn, blocks_per_ob) * obn * kk
                if not resident and wg > wgt_d // nvt:
                    continue
                for tw in candidates(wo, 12):
                    cols = (tw - 1) * sw + kwin
                    # largest th fitting INP and ACC
                    if row_skip:
                        th_inp = (inp_d // nvt) // (ibn * cols)
                    else:
                        th_inp = ((inp_d // nvt) // (ibn * cols) - kh) // sh + 1 if ibn * cols else 0
                    acc_nvt = 4 if quad and nvt == 2 else nvt
                    th_acc = acc_regions(cfg, nob, acc_nvt, res)[1] // (obn * tw)
                    th_max = min(ho, th_inp, MAX_EXTENT // tw if tw else 0)
                    th = min(th_max, th_acc)
                    if (nvt > 1 and obn == nob and tw == wo
                            and th < th_max == ho and ho * obn * tw <= acc_free):
                        # the whole output in one tile of the full accumulator: nothing
                        # to overlap its ACC with, so one ACC region (INP stays doubled)
                        th, acc_nvt = ho, 1
                    if th < 1:
                        continue
                    rows = th if row_skip else (th - 1) * sh + kh
                    n_sp = -(-ho // th) * -(-wo // tw)
                    n_ob = -(-nob // obn)
                    n_red = -(-(tile_span(obn) if tile_span else nib_span) // ibn)
                    inp_bytes = n_ob * n_sp * n_red * ibn * rows * cols * eb_inp
                    wbytes = n_wgt_blocks * kk * eb_wgt
                    wgt_bytes = wbytes if resident else n_sp * wbytes
                    steps = n_ob * n_sp * n_red
                    uops = obn * min(ibn, blocks_per_ob) * kk
                    cost = inp_bytes + wgt_bytes + STEP_COST * steps * (1 + ibn / 8 + obn / 16)
                    if row_skip or tile_span is not None:
                        # DMA rows: INP rows per input block, OUT rows per output block (one
                        # per tile when it spans whole rows).  Without this term row-skip
                        # tilings pick column strips of short rows, each row paying its
                        # request overhead.  Also applied to depthwise / grouped convs
                        # (tile_span), whose one-block tiles would otherwise be column
                        # strips; not to groups-1 convs, where it only reshuffled tilings
                        # (figures: docs/compiler.md "Tiling").
                        dma_rows = (n_ob * n_sp * n_red * ibn * rows
                                    + nob * -(-wo // tw) * (-(-ho // th) if tw == wo else ho))
                        cost += ROW_COST * dma_rows
                    cost += 2 * max(0, uops - uop_d // 2) * steps   # split kernels reload
                    if merge_stores:
                        # STOREs: each waits for its write responses (about one DRAM
                        # latency); a tile of whole rows stores its blocks with one
                        # (ConvOptions.merge_stores), a column strip one per block
                        cost += STORE_COST * (n_ob * n_sp if tw == wo else nob * n_sp)
                    cand = ConvTiling(obn, ibn, th, tw, nvt, resident, float(cost), acc_nvt)
                    if best is None or cand.cost < best.cost:
                        best = cand
        if best is not None:
            return best
    raise CompileError(f"conv {kh}x{kw} stride {sh}x{sw}: even a one-pixel tile does not fit "
                       f"the scratchpads of {cfg.bitstream_name} (INP {inp_d}, WGT {wgt_d}, "
                       f"ACC {acc_d} entries)")
