"""The lowerings that bring MobileNet-v1 under 3.5 M cycles on the REQ-engine core
(bench/RESULTS.md "MobileNet-v1 under 3.5 M cycles"): streamed weights stored
input-block-major (one LOAD per one-block step), resident weights re-tiled when the first
tile's steps would be load-bound, the output blocks of a whole-row 1x1 step as a GEMM loop
(one micro-op per input block), four bank-aligned ACC regions for store-heavy convs,
engine resets only for the entries no clearing REQ left at 0, and per-step REQs in a
depthwise conv's last tile.

Oracle: numpy integer convolution (fsim, pynq-sized layers whose trace statistics show
each lowering was used; the module flags off for the counts they change).  The same
lowerings at tiny's sizes run on the Verilated tiny engine core in
tests/runtime/test_req_engine.py (``test_roofline_lowerings_on_the_engine``,
``test_compiled_depthwise_on_the_engine``).
"""

from __future__ import annotations

import pytest

from _lower_util import conv_case
from vtaforge.compiler import tiling
from vtaforge.compiler.options import ConvOptions, LowerOptions
from vtaforge.hw.config import preset

ENG = preset("pynq").replace(ALU_REQUANT=True, REQ_ENGINE=True)


_conv = conv_case


def _options(**fields) -> LowerOptions:
    """The whole-graph lowering's options with ``ConvOptions(**fields)``."""
    return LowerOptions(conv=ConvOptions(**fields))


def test_resident_retile_and_ob_loop():
    """14x14 512 -> 512 1x1 (MobileNet-v1's middle pointwise convs): the tiler's 32 output
    blocks x 2 rows load 1,024 weight beats per 896-cycle first-tile step, so the tile
    becomes 16 blocks x 4 rows; every step's GEMM is one micro-op under an output-block
    loop."""
    st = _conv(ENG, 512, 512, 14, 1, 1)
    assert st["retiled"] and st["tiling"][0] == 16 and st["tiling"][2] == 4
    # (the streamed steps run per output block; the first step in weight groups)
    assert st["ob_loop_gemms"] >= st["steps"] - st["stream_steps"]


def test_ob_loop_off_is_the_same_conv():
    """Without the loop the same conv (exact either way) has one micro-op per block."""
    st = _conv(ENG, 64, 64, 8, 1, 1, options=_options(ob_loop=False))
    assert st["ob_loop_gemms"] == 0


def test_streamed_weights_one_load_per_step():
    """7x7 256 -> 256 3x3 (streamed: 2,304 weight elements > 1,024): stored input-block-
    major, a one-block step's weights for all its output blocks are one LOAD."""
    st = _conv(ENG, 256, 256, 7, 3, 1)
    assert not st["tiling"][5] and st["w_loads"] == st["steps"]
    st_off = _conv(ENG, 256, 256, 7, 3, 1, options=_options(streamed_ib_major=False))
    assert st_off["w_loads"] > st["w_loads"]


def test_quad_acc_regions_for_a_store_heavy_conv():
    """32 -> 64 1x1 (two input blocks: as many STORE beats as GEMM cycles) takes four ACC
    regions, two per bank."""
    st = _conv(ENG, 32, 64, 28, 1, 1)
    assert st["acc_regions"] == 4


def test_acc_regions_bank_aligned():
    """Four regions alternate banks and stay inside them; one and two regions tile the
    accumulator after the bias."""
    cfg, nob = ENG, 4
    half = cfg.ACC_DEPTH // 2
    bases, size = tiling.acc_regions(cfg, nob, 4)
    assert bases[0] == nob and bases[1] == half
    for i, b in enumerate(bases):
        lo = b >= half
        assert lo == (i % 2 == 1) and (b + size <= half) == (not lo)
        assert b + size <= cfg.ACC_DEPTH
    assert tiling.acc_regions(cfg, nob, 2) == ([nob, nob + (cfg.ACC_DEPTH - nob) // 2],
                                             (cfg.ACC_DEPTH - nob) // 2)


@pytest.mark.parametrize("keep", [True, False])
def test_keep_cleared_skips_resets(keep):
    """112x112 32-channel depthwise 3x3 (MobileNet-v1's first): rows of 38, 38, 36 columns;
    the next row's first tile needs no reset when the clear of the 36-column tile keeps the
    zeros the 38-column tile's clear left (exact either way)."""
    st = _conv(ENG, 32, 32, 112, 3, 1, groups=32, options=_options(keep_cleared=keep))
    if keep:
        assert st["resets_skipped"] == st["tiles"] - 1     # all but the first tile
    else:
        assert st["resets_skipped"] < st["tiles"] - 1 and st["partial_resets"] > 0


def test_depthwise_last_tile_requantizes_per_step():
    """7x7 1024-channel depthwise 3x3 (MobileNet-v1's last), tiled by several output blocks
    (``tile_span=False``; the default tiles one block each): every output block of the last
    tile completes in its own step, so it is requantized right after it (no deferred
    steps); the stream of deferred steps without it (exact either way)."""
    st = _conv(ENG, 1024, 1024, 7, 3, 1, groups=1024, options=_options(tile_span=False))
    assert st["step_req"] and st["stream_steps"] == 0
    st = _conv(ENG, 1024, 1024, 7, 3, 1, groups=1024,
               options=_options(step_req=False, tile_span=False))
    assert not st["step_req"] and st["stream_steps"] >= 1
