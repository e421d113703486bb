"""4-bit weights: a ``LOG_WGT_WIDTH`` 2 core (int4 weights, int8 activations and outputs).

Oracles are independent of the code under test: the nibble layout is written here with
Python integers, the GEMM with ``np.einsum`` in int64, the conv model with the int64
executor of test_widths16.py (conv windows of ``_lower_util.conv_oracle``); the VTA outputs
come from fsim.
"""

from __future__ import annotations

import numpy as np
import pytest

from programs import Image, MemType, finish, gemm, ld, read_out, st, wrap
from vtaforge.compiler.compile import compile_model
from vtaforge.compiler.errors import CompileError
from vtaforge.compiler.lower_conv import lower_conv, weights_fit
from vtaforge.compiler.models import DIGITS_ONNX, load_digits_split
from vtaforge.compiler.quantize import QuantConfig
from vtaforge.hw.config import ConfigError, preset
from vtaforge.hw.isa import encode_uops
from vtaforge.runtime.cpu_ops import pack_int4, unpack_int4
from vtaforge.runtime.executor import Executor
from vtaforge.runtime.fsim import FsimDevice, simulate

from _onnx_util import rand
from test_widths16 import _assert_exact, _conv_model

TINY4 = preset("tiny").replace(LOG_WGT_WIDTH=2, LOG_WGT_BUFF_SIZE=12)
PYNQ4 = preset("pynq").replace(LOG_WGT_WIDTH=2, LOG_WGT_BUFF_SIZE=17)


def _nibbles(vals) -> bytes:
    """Independent int4 packing: value ``2k`` in bits [3:0] of byte ``k``, ``2k+1`` above."""
    v = [int(a) & 0xF for a in np.asarray(vals).reshape(-1)]
    return bytes(v[i] | (v[i + 1] << 4) for i in range(0, len(v), 2))


# ------------------------------------------------------------------ config and layout
def test_config_int4_weights():
    assert TINY4.WGT_WIDTH == 4 and TINY4.elem_bits(MemType.WGT) == 4 * 4 * 4
    assert TINY4.elem_bytes(MemType.WGT) == 8
    assert PYNQ4.elem_bytes(MemType.WGT) == 128 and PYNQ4.WGT_DEPTH == preset("pynq").WGT_DEPTH
    assert TINY4.fingerprint != preset("tiny").fingerprint
    with pytest.raises(ConfigError, match=r"LOG_WGT_WIDTH = 1 is out of range; allowed: integers 2\.\.4"):
        preset("tiny").replace(LOG_WGT_WIDTH=1)
    with pytest.raises(ConfigError, match=r"LOG_WGT_WIDTH = 2 \(int4 weights\) needs "
                                          r"LOG_INP_WIDTH = 2 or 3"):
        preset("tiny").replace(LOG_WGT_WIDTH=2, LOG_INP_WIDTH=4, LOG_INP_BUFF_SIZE=13)
    with pytest.raises(ConfigError, match=r"GEMM instruction fields need"):
        preset("pynq").replace(LOG_WGT_WIDTH=2)    # 256 KiB of int4 weights: 2048 entries


def test_pack_int4_layout_and_range():
    a = np.array([[-8, 7, 0, -1], [3, -5, 1, 2]])
    assert pack_int4(a).tobytes() == _nibbles(a)
    np.testing.assert_array_equal(unpack_int4(np.frombuffer(_nibbles(a), np.uint8)), a.reshape(-1))
    rng = np.random.default_rng(0)
    b = rng.integers(-8, 8, (5, 16))
    np.testing.assert_array_equal(unpack_int4(pack_int4(b)), b)
    with pytest.raises(ValueError, match=r"as int4: out of range"):
        pack_int4(np.array([8, 0]))
    with pytest.raises(ValueError, match=r"even last axis"):
        pack_int4(np.zeros(3, np.int8))


# ------------------------------------------------------------------ raw GEMM on fsim
def gemm_int4_program(cfg):
    """A raw GEMM program on ``cfg``: random int4 weights (-8 included) against int8 inputs
    (-128 included), three micro-ops into one accumulator entry, the weights packed by
    :func:`_nibbles`.  Returns ``(dram, insn_addr, insn_count, out_addr, expected OUT
    element [BATCH, BLOCK_OUT] int64)``."""
    rng = np.random.default_rng(4)
    K = 3
    x = rng.integers(-128, 128, (K, cfg.BATCH, cfg.BLOCK_IN))
    x[0] = -128
    w = rng.integers(-8, 8, (K, cfg.BLOCK_OUT, cfg.BLOCK_IN))
    w[0] = -8
    im = Image(cfg)
    ax = im.put(x.astype(np.int8))
    aw = im.put(np.frombuffer(_nibbles(w), np.uint8))
    ao = im.zeros(cfg.elem_bytes(MemType.OUT))
    u = im.put(encode_uops(cfg, np.zeros(K), np.arange(K), np.arange(K)).astype("<u4"))
    insns = [ld(MemType.INP, 0, im.base(ax, MemType.INP), 1, K),
             ld(MemType.WGT, 0, im.base(aw, MemType.WGT), 1, K, push_next=1),
             ld(MemType.UOP, 0, im.base(u, MemType.UOP), 1, K), gemm(0, K, 1, 1, reset=1),
             gemm(0, K, 1, 1, pop_prev=1, push_next=1),
             st(0, im.base(ao, MemType.OUT), 1, 1, pop_prev=1, push_prev=1), finish(pop_next=1)]
    dram, ia, n = im.build(insns)
    return dram, ia, n, ao, wrap(np.einsum("kbi,koi->bo", x, w), 8)


def test_gemm_int4_weights_fsim():
    dram, ia, n, ao, want = gemm_int4_program(TINY4)
    simulate(TINY4, dram, ia, n)
    np.testing.assert_array_equal(read_out(TINY4, dram, ao, 1)[0], want)


# ------------------------------------------------------------------ compiler
@pytest.fixture(scope="module")
def conv4():
    m = _conv_model()
    return m, rand(16, 3, 10, 10, seed=7), rand(4, 3, 10, 10, seed=8, scale=1.3)


def test_conv_model_int4_weights_on_vta_bit_exact(conv4):
    m, calib, x = conv4
    cm = compile_model(m, calib, TINY4)
    q = cm.qgraph
    wts = [q.constants[n.inputs[1]] for n in q.nodes if n.op in ("qconv2d", "qdense")]
    assert all(w.dtype == np.int8 and -7 <= w.min() and w.max() <= 7 for w in wts)
    assert max(int(abs(w).max()) for w in wts) == 7
    places = {s.op: s.target for s in cm.steps}
    assert places["qconv2d"] == places["qdense"] == places["qmax_pool"] == "vta"
    out = Executor(cm, FsimDevice(TINY4)).run(x, keep=True)
    _assert_exact(cm, out, x, min_vta=4, bits=8)


def test_int4_lowering_refuses_weights_outside_int4():
    w = np.zeros((4, 4, 1, 1), np.int8)
    assert weights_fit(TINY4, w)
    w[0, 0, 0, 0] = 8
    assert not weights_fit(TINY4, w) and not weights_fit(TINY4, w.astype(np.int16))
    attrs = {"kernel": (1, 1), "strides": (1, 1), "pads": (0, 0, 0, 0), "groups": 1,
             "shift": 4, "round": 8, "clip_lo": -128, "clip_hi": 127}
    with pytest.raises(CompileError, match=r"c: int8 weights on a core with WGT_WIDTH 4 "
                                           r"\(int4: int8 values in \[-8, 7\]\)"):
        lower_conv(TINY4, "c", (4, 2, 2), w, np.zeros(4, np.int32), attrs)


def test_int8_weights_outside_int4_run_on_the_cpu(conv4):
    """An int8-quantized graph on an int4-weight core: convs whose weights do not fit int4
    stay on the CPU with the reason; element-wise ops still run on VTA."""
    m, calib, x = conv4
    from vtaforge.compiler.compile import lower_graph
    from vtaforge.compiler.onnx_frontend import import_onnx
    from vtaforge.compiler.partition import partition
    from vtaforge.compiler.quantize import quantize

    q = quantize(import_onnx(m), {"x": calib}, QuantConfig())
    part = partition(q, TINY4)
    why = {p.op: (p.target, p.reason) for p in part.placements.values()}
    assert why["qconv2d"][0] == why["qdense"][0] == "cpu"
    assert "int8 weights outside int4 [-8, 7] on a core with WGT_WIDTH 4" in why["qconv2d"][1]
    assert why["qmax_pool"][0] == "vta"
    cm = lower_graph(q, part)
    out = Executor(cm, FsimDevice(TINY4)).run(x)
    ref = Executor(lower_graph(q, partition(q, preset("tiny"))), FsimDevice(preset("tiny"))).run(x)
    np.testing.assert_array_equal(out[cm.outputs[0]], ref[cm.outputs[0]])


def test_quant_config_int4():
    assert QuantConfig(wgt_bits=4).wgt_bits == 4
    with pytest.raises(CompileError, match=r"^QuantConfig.act_bits = 2: only 4 \(int4\), 8 "
                                           r"\(int8\) and 16 \(int16\) are supported$"):
        QuantConfig(act_bits=2)     # act_bits 4 is int4 activations (test_widths4a.py)
    with pytest.raises(CompileError, match=r"wgt_bits = 2: only 4 \(int4\), 8 \(int8\) and 16 "
                                           r"\(int16\) are supported$"):
        QuantConfig(wgt_bits=2)


def test_qdq_model_refuses_int4_quantization():
    """A QDQ model's int8 weight scales cannot be re-gridded to int4 silently: the explicit
    QuantConfig is refused; compile_model's default keeps it int8 (its layers then run on
    the CPU of an int4 core unless their weights fit)."""
    import sys
    sys.path.insert(0, __file__.rsplit("/", 1)[0])
    from test_qdq_mul import _qdq_model
    from vtaforge.compiler.onnx_frontend import import_onnx
    from vtaforge.compiler.quantize import quantize

    m = _qdq_model()
    calib = np.random.default_rng(5).uniform(-1.5, 1.5, (8, 4, 8, 8)).astype(np.float32)
    with pytest.raises(CompileError, match=r"QDQ model carries int8 weight scales: quantize it "
                                           r"with wgt_bits 8, not 4"):
        quantize(import_onnx(m), calib, QuantConfig(wgt_bits=4))
    with pytest.raises(CompileError, match=r"wgt_bits 8, not 4"):
        compile_model(m, calib, TINY4, quant_config=QuantConfig(wgt_bits=4))
    cm = compile_model(m, calib, TINY4)
    x = calib[:2]
    ref = Executor(compile_model(m, calib, preset("tiny")), FsimDevice(preset("tiny"))).run(x)
    out = Executor(cm, FsimDevice(TINY4)).run(x)
    np.testing.assert_array_equal(out[cm.outputs[0]], ref[cm.outputs[0]])


def test_digits_int4_weights_accuracy_and_exact():
    xtr, _ytr, xte, yte = load_digits_split()
    cm = compile_model(str(DIGITS_ONNX), xtr, PYNQ4)
    assert [s.name for s in cm.steps if s.target == "vta"] == ["conv1", "pool1", "conv2", "pool2",
                                                               "fc1", "fc2"]
    x, y = xte[:128], yte[:128]
    out = Executor(cm, FsimDevice(PYNQ4)).run(x, keep=True)
    _assert_exact(cm, out, x, min_vta=6, bits=8)
    assert np.mean(out[cm.outputs[0]].argmax(1) == y) >= 0.93
