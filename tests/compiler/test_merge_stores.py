"""Merged STOREs (``ConvOptions.merge_stores``): a conv tile of whole output rows that is
requantized in one pass stores each run of its side-by-side output blocks with one STORE,
a row per block ``hpl * wo`` elements apart in DRAM, so the write responses are waited for
once per run; the tiler costs each STORE (``tiling.STORE_COST``).

Oracle: the integer reference's requantize rule on the exact int64 conv sum
(:func:`vtaforge.compiler.reference.requantize`), independent of the lowering.
"""

from __future__ import annotations

import numpy as np
import pytest

from test_lower_perchannel import _run, _scalar_attrs
from vtaforge.compiler.lower_conv import lower_conv
from vtaforge.compiler.options import ConvOptions
from vtaforge.compiler.reference import conv2d_nchw, requantize
from vtaforge.hw.config import preset

FAST = preset("pynq-fast")
PYNQ = preset("pynq")


def _stores(lo):
    """The STOREs of a lowered conv's trace, as ``(y_size, x_size, x_stride)``."""
    return [(op[4], op[5], op[6]) for op in lo.trace.ops if op[0] == "S"]


def _conv(cfg, cin, cout, h, k, s, opt=None, seed=0):
    rng = np.random.default_rng(seed)
    x = rng.integers(-128, 128, (1, cin, h, h)).astype(np.int8)
    w = rng.integers(-127, 128, (cout, cin, k, k)).astype(np.int8)
    b = rng.integers(-20000, 20000, cout).astype(np.int32)
    attrs = _scalar_attrs(k, s, k // 2, 1, 9, lo=0)
    lo = lower_conv(cfg, "ms", (cin, h, h), w, b, attrs, options=opt)
    acc = np.rint(conv2d_nchw(x, w, attrs["strides"], attrs["pads"], 1)).astype(np.int64)
    want = requantize(acc + b.astype(np.int64).reshape(1, -1, 1, 1), attrs)
    np.testing.assert_array_equal(_run(cfg, lo, x), want)
    return lo


@pytest.mark.parametrize("cfg", [FAST, PYNQ], ids=["pynq-fast", "pynq"])
def test_whole_row_tiles_store_their_blocks_in_one_store(cfg):
    """MobileNet-v1's 112x112 1x1 conv (32 -> 64): tiles of whole rows, each run of blocks
    one STORE of a row per block (``hpl * wo`` apart); every output element stored once,
    in fewer STOREs than without the option; exact (both)."""
    on = _stores(_conv(cfg, 32, 64, 112, 1, 1))
    off = _stores(_conv(cfg, 32, 64, 112, 1, 1, ConvOptions(merge_stores=False)))
    merged = [s for s in on if s[0] > 1]
    assert merged and all(s[2] == 112 * 112 and s[1] % 112 == 0 for s in merged)
    assert all(s[0] == 1 or s[2] == 112 for s in off)     # one block's rows per STORE
    total = 64 // cfg.BLOCK_OUT * 112 * 112
    assert sum(s[0] * s[1] for s in on) == sum(s[0] * s[1] for s in off) == total
    assert len(on) < len(off)


@pytest.mark.parametrize("args", [(64, 128, 28, 3, 1), (64, 128, 28, 1, 2), (16, 64, 14, 3, 1)],
                         ids=["3x3", "1x1s2", "3x3-small"])
def test_other_shapes_stay_exact(args):
    """Convs whose tiles are column strips or streamed keep one STORE per block; every
    program is exact either way."""
    for opt in (None, ConvOptions(merge_stores=False)):
        _conv(FAST, *args, opt=opt)
