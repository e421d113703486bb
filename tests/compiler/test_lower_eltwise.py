"""qmax_pool / qavg_pool / qadd / qrequant lowered to VTA on fsim vs numpy integer oracles."""

from __future__ import annotations

import numpy as np
import pytest

from vtaforge.compiler.ir import TensorType
from vtaforge.compiler.options import LowerOptions
from vtaforge.hw.config import preset

from _lower_util import QG, maxpool_oracle, requant, run_graph

CONFIGS = ("pynq", "tiny", "batch2")


@pytest.mark.parametrize("cfg", CONFIGS)
@pytest.mark.parametrize("k,s,p,c,h,n", [(2, 2, 0, 16, 8, 1), (3, 2, 1, 17, 9, 2),
                                          (3, 1, 1, 3, 6, 1), (2, 2, 0, 64, 7, 2),
                                          (3, 2, 0, 255, 5, 1)])
def test_max_pool(cfg, k, s, p, c, h, n):
    rng = np.random.default_rng(c + h)
    lo = 0 if p else -128          # padded max-pool on VTA needs non-negative input
    x = rng.integers(lo, 128, (n, c, h, h)).astype(np.int8)
    qg = QG(("N", c, h, h))
    src = "xq"
    if p:   # make the input provably non-negative: a ReLU (qrequant clip_lo 0) first
        src = qg.add("qrequant", ["xq"], qg.req(0, 0, 127), TensorType("int8", ("N", c, h, h), 0),
                     "r")
    ho = (h + 2 * p - k) // s + 1
    y = qg.add("qmax_pool", [src], {"kernel": (k, k), "strides": (s, s), "pads": (p,) * 4},
               TensorType("int8", ("N", c, ho, ho), 0), "y")
    out, _, _ = run_graph(qg.finish(y), cfg, x.astype(np.float32))
    np.testing.assert_array_equal(out["y"], maxpool_oracle(x, (k, k), (s, s), (p,) * 4))


#: The separable max-pool's forms (compiler/lower_eltwise.py ``_max_pool_copy``): INP loads
#: and an identity GEMM into the accumulator, the region zeroed by the pipeline or (engine)
#: beside the previous tile, the passes as pairs or (ALU_FORWARD) chains per output.
POOL_CFGS = {"tiny": preset("tiny"), "pynq": preset("pynq"),
             "tiny+eng": preset("tiny").replace(ALU_REQUANT=True, REQ_ENGINE=True),
             "tiny+fwd": preset("tiny").replace(ALU_FORWARD=True),
             "tiny+eng+fwd": preset("tiny").replace(ALU_REQUANT=True, REQ_ENGINE=True,
                                                    ALU_FORWARD=True),
             "pynq+eng+fwd": preset("pynq").replace(ALU_REQUANT=True, REQ_ENGINE=True,
                                                    ALU_FORWARD=True),
             "tiny+w4": preset("tiny").replace(LOG_WGT_WIDTH=2)}


def _pool_graph(c, hw, kern, st, pads):
    qg = QG(("N", c) + hw)
    src = qg.add("qrequant", ["xq"], qg.req(0, 0, 127), TensorType("int8", ("N", c) + hw, 0),
                 "r")
    ho = (hw[0] + pads[0] + pads[2] - kern[0]) // st[0] + 1
    wo = (hw[1] + pads[1] + pads[3] - kern[1]) // st[1] + 1
    y = qg.add("qmax_pool", [src], {"kernel": kern, "strides": st, "pads": pads},
               TensorType("int8", ("N", c, ho, wo), 0), "y")
    return qg.finish(y)


@pytest.mark.parametrize("cfg", list(POOL_CFGS))
@pytest.mark.parametrize("kern,st,pads,c,hw", [
    ((3, 3), (2, 2), (1, 1, 1, 1), 16, (30, 23)), ((3, 2), (2, 2), (1, 0, 0, 1), 5, (11, 8)),
    ((5, 5), (3, 3), (2, 2, 2, 2), 3, (13, 14)), ((3, 3), (3, 3), (0, 0, 0, 0), 8, (9, 12)),
    ((2, 2), (2, 2), (0, 0, 0, 0), 16, (8, 8)), ((2, 3), (2, 2), (1, 0, 0, 1), 9, (7, 9)),
    ((1, 1), (1, 1), (0, 0, 0, 0), 4, (5, 5)), ((4, 5), (3, 3), (1, 2, 1, 0), 6, (17, 19)),
    ((3, 3), (2, 2), (1, 1, 1, 1), 64, (56, 56))])
def test_max_pool_gemm_copy(cfg, kern, st, pads, c, hw):
    """The GEMM-copy forms against the oracle on every tile shape: several tiles per channel
    block with a smaller last one (its zeroed rest must not meet the outputs the region's
    previous tile still has to store), several blocks per tile, overlapping and disjoint
    windows, pads on some sides, stride 3, a 1x1 window."""
    x = np.random.default_rng(c + hw[0]).integers(0, 128, (1, c) + hw).astype(np.int8)
    out, _, cm = run_graph(_pool_graph(c, hw, kern, st, pads), POOL_CFGS[cfg],
                           x.astype(np.float32))
    np.testing.assert_array_equal(out["y"], maxpool_oracle(x, kern, st, pads))
    step = [s for s in cm.steps if s.op == "qmax_pool"][0]
    assert step.trace.stats.get("gemm_copy"), step.trace.stats


def test_max_pool_acc8_form_kept():
    """``gemm_copy=False`` (and a core where the copy does not apply: BLOCK_IN != BLOCK_OUT)
    keeps the ACC8 form; its programs are unchanged (tests/compiler/program_identity.json)."""
    from vtaforge.compiler.lower_eltwise import lower_pool, pool_copy_ok

    attrs = {"kernel": (3, 3), "strides": (2, 2), "pads": (1, 1, 1, 1)}
    lo = lower_pool(preset("pynq"), "p", (16, 30, 23), attrs, "max", gemm_copy=False)
    assert not lo.trace.stats.get("gemm_copy")
    assert not pool_copy_ok(preset("batch2"))
    assert pool_copy_ok(preset("pynq")) and pool_copy_ok(preset("tiny"))
    assert not pool_copy_ok(preset("pynq").replace(LOG_INP_WIDTH=4, LOG_WGT_WIDTH=4,
                                                   LOG_INP_BUFF_SIZE=16, LOG_WGT_BUFF_SIZE=19))


@pytest.mark.parametrize("cfg", CONFIGS)
@pytest.mark.parametrize("k,c,h", [(2, 16, 4), (4, 17, 4), (2, 64, 6)])
def test_avg_pool(cfg, k, c, h):
    rng = np.random.default_rng(k * c)
    n = 2
    x = rng.integers(-128, 128, (n, c, h, h)).astype(np.int8)
    qg = QG(("N", c, h, h))
    ho = (h - k) // k + 1
    d = k * k
    y = qg.add("qavg_pool", ["xq"], {"kernel": (k, k), "strides": (k, k), "pads": (0,) * 4,
                                     "divisor": d, "shift": d.bit_length() - 1, "round": d // 2,
                                     "clip_lo": -128, "clip_hi": 127},
               TensorType("int8", ("N", c, ho, ho), 0), "y")
    out, _, _ = run_graph(qg.finish(y), cfg, x.astype(np.float32))
    acc = x.astype(np.int64)[:, :, :ho * k, :ho * k].reshape(n, c, ho, k, ho, k).sum(axis=(3, 5))
    want = np.clip(np.floor_divide(2 * acc + d, 2 * d), -128, 127).astype(np.int8)
    np.testing.assert_array_equal(out["y"], want)


@pytest.mark.parametrize("cfg", CONFIGS + ("pynq+req", "tiny+req"))
@pytest.mark.parametrize("shape,la,lb,shift,lo", [((16, 5, 5), 0, 1, 1, 0), ((3, 7, 7), 2, 0, 3, -128),
                                                   ((255, 3, 3), 0, 0, 0, -128),
                                                   ((64, 40, 40), 1, 0, 2, 0)])
def test_residual_add(cfg, shape, la, lb, shift, lo):
    """qadd against the integer oracle; ``+req``: with ``ALU_REQUANT`` the GEMM add's
    rounding constant is an ACC row and each chunk ends with a clearing REQ (the next chunk
    of its region skips the reset)."""
    rng = np.random.default_rng(sum(shape))
    n = 2
    a = rng.integers(-128, 128, (n,) + shape).astype(np.int8)
    b = rng.integers(-128, 128, (n,) + shape).astype(np.int8)
    # two graph inputs are not needed: feed a and b through two quantize nodes of one input
    qg = QG(("N", 2) + shape)
    g = qg.g
    ea, eb = -la, -lb   # exps so that lshift_a = ea - min, lshift_b = eb - min
    c = min(ea, eb)
    # split the input along axis 1 on the host: use reshape-free slicing via two inputs
    g.nodes.clear()
    g.inputs = ["ia", "ib"]
    g.types = {"ia": TensorType("float32", ("N",) + shape), "ib": TensorType("float32", ("N",) + shape)}
    qg.add("quantize", ["ia"], {"exp": ea}, TensorType("int8", ("N",) + shape, ea), "qa")
    qg.add("quantize", ["ib"], {"exp": eb}, TensorType("int8", ("N",) + shape, eb), "qb")
    att = {"lshift_a": ea - c, "lshift_b": eb - c}
    att.update(qg.req(shift, lo, 127))
    att["exp_out"] = c + shift
    y = qg.add("qadd", ["qa", "qb"], att, TensorType("int8", ("N",) + shape, c + shift), "y")
    gr = qg.finish(y)
    from vtaforge.compiler.compile import lower_graph
    from vtaforge.compiler.partition import partition
    from vtaforge.hw.config import preset
    from vtaforge.runtime.executor import Executor
    from vtaforge.runtime.fsim import FsimDevice
    core = preset(cfg.split("+")[0]).replace(ALU_REQUANT=cfg.endswith("+req"))
    cm = lower_graph(gr, partition(gr, core))
    assert [s.target for s in cm.steps if s.op == "qadd"] == ["vta"]
    st = [s for s in cm.steps if s.op == "qadd"][0].trace.stats
    assert st.get("round_row", False) == (cfg.endswith("+req") and st.get("gemm_add", False))
    ex = Executor(cm, FsimDevice(core))
    out = ex.run({"ia": a.astype(np.float32) * 2.0 ** ea, "ib": b.astype(np.float32) * 2.0 ** eb},
                 keep=True)
    acc = (a.astype(np.int64) << (ea - c)) + (b.astype(np.int64) << (eb - c))
    np.testing.assert_array_equal(out["y"], requant(acc, shift, lo, 127))


@pytest.mark.parametrize("cfg", CONFIGS)
@pytest.mark.parametrize("shift,lo,hi", [(0, 0, 127), (2, -128, 127), (-1, -20, 90)])
def test_requant(cfg, shift, lo, hi):
    rng = np.random.default_rng(shift + 5)
    x = rng.integers(-128, 128, (3, 17, 5, 4)).astype(np.int8)
    qg = QG(("N", 17, 5, 4))
    y = qg.add("qrequant", ["xq"], qg.req(shift, lo, hi), TensorType("int8", ("N", 17, 5, 4), shift),
               "y")
    out, _, _ = run_graph(qg.finish(y), cfg, x.astype(np.float32))
    np.testing.assert_array_equal(out["y"], requant(x, shift, lo, hi))


@pytest.mark.parametrize("cfg", ("tiny", "pynq"))
@pytest.mark.parametrize("k,s,pads,c,hw", [
    ((3, 3), (2, 2), (1, 1, 1, 1), 16, (30, 23)),   # ResNet's 3x3/2, several tiles (tiny)
    ((3, 2), (2, 2), (1, 0, 0, 1), 5, (11, 8)),      # non-square window, asymmetric pads
    ((2, 3), (2, 2), (0, 1, 1, 1), 20, (9, 10)),
    ((5, 5), (3, 3), (2, 2, 2, 2), 3, (13, 14)),     # paired offsets 0,1 / 3,4; unique 2
    ((3, 3), (2, 2), (2, 2, 2, 2), 16, (7, 7)),      # output row 0's unique row is padding
    ((3, 3), (3, 3), (0, 0, 0, 0), 8, (9, 12)),      # non-overlapping windows
    ((1, 3), (1, 2), (0, 1, 0, 1), 16, (4, 9)),      # one axis trivial
    ((3, 3), (2, 2), (1, 1, 1, 1), 16, (3, 3)),      # one output per axis
])
@pytest.mark.parametrize("sep", (True, False))
def test_max_pool_separable_shapes(cfg, k, s, pads, c, hw, sep):
    """The separable max-pool (column pass in place, then row pass; ``sep``) and the per-window
    one against the numpy window oracle, on non-square windows, windows that start in
    padding, several tiles, one output per axis."""
    h, w = hw
    rng = np.random.default_rng(c * h + w)
    x = rng.integers(-128, 128, (1, c, h, w)).astype(np.int8)
    qg = QG(("N", c, h, w))
    src = qg.add("qrequant", ["xq"], qg.req(0, 0, 127), TensorType("int8", ("N", c, h, w), 0), "r")
    pt, pl, pb, pr = pads
    ho, wo = (h + pt + pb - k[0]) // s[0] + 1, (w + pl + pr - k[1]) // s[1] + 1
    y = qg.add("qmax_pool", [src], {"kernel": k, "strides": s, "pads": pads},
               TensorType("int8", ("N", c, ho, wo), 0), "y")
    out, _, _ = run_graph(qg.finish(y), cfg, x.astype(np.float32),
                          options=LowerOptions(pool_separable=sep))
    np.testing.assert_array_equal(out["y"], maxpool_oracle(np.maximum(x, 0), k, s, pads))
