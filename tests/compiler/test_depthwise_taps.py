"""Depthwise convs on depthwise GEMMs (``DEPTHWISE_TAPS``, docs/isa.md "Depthwise GEMM";
docs/compiler.md "Depthwise GEMMs").

Small ONNX models built with ``onnx.helper`` (depthwise 3x3 / 5x5 / 7x7, strides 1 and 2,
symmetric and asymmetric pads, channel counts that are not a multiple of the block, a
MobileNet-like depthwise + pointwise block; batch 1 and 2) compiled for ``tiny`` and
``pynq-fast`` with ``DEPTHWISE_TAPS`` 3.  Oracles: the compiler's independent integer
reference (:func:`vtaforge.compiler.reference.run_quantized`) for every VTA step's
output, bit for bit; :func:`vtaforge.runtime.race.race_check` on every launched program;
the decoded programs themselves (depthwise GEMMs counted from the instruction words) and
the simulator's ``gemm_counter`` against the same model on the config without the option.
"""

from __future__ import annotations

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
from onnx import helper  # noqa: E402

from _onnx_util import make_model  # noqa: E402
from vtaforge.compiler.compile import compile_model  # noqa: E402
from vtaforge.compiler.reference import run_quantized  # noqa: E402
from vtaforge.hw.config import preset  # noqa: E402
from vtaforge.hw.isa import Opcode, decode_program  # noqa: E402
from vtaforge.runtime.executor import Executor  # noqa: E402
from vtaforge.runtime.fsim import FsimDevice  # noqa: E402
from vtaforge.runtime.race import race_check  # noqa: E402

TAPS = 3
BASES = ("tiny", "pynq-fast")


def _without(name: str):
    """The preset ``name`` without depthwise GEMMs (``pynq-fast`` has ``DEPTHWISE_TAPS`` 3):
    the side each test compares against."""
    return preset(name).replace(DEPTHWISE_TAPS=0)


class CheckingFsim(FsimDevice):
    """fsim that race-checks every program it runs and counts its depthwise GEMMs (from the
    decoded instruction words)."""

    def __init__(self, cfg):
        super().__init__(cfg)
        self.dw_gemms = 0
        self.gemms = 0
        self.programs = 0

    def run(self, insn_addr, insn_count, **kw):
        race_check(self.config, self.mem, insn_addr, insn_count)
        f = decode_program(self.config, self._read_mem(insn_addr, insn_count * 16))
        gemm = f["opcode"] == int(Opcode.GEMM)
        self.gemms += int(gemm.sum())
        if "depthwise" in f:
            self.dw_gemms += int((gemm & (f["depthwise"] != 0)).sum())
        self.programs += 1
        return super().run(insn_addr, insn_count, **kw)


def _dw_model(n: int, c: int, h: int, k: int, s: int, pads: tuple, dil: int = 1,
              seed: int = 0):
    """Input ``[n, c, h, h]`` -> depthwise ``k x k`` conv (stride ``s``, ONNX ``pads``
    top, left, bottom, right, dilation ``dil``) + bias -> Relu."""
    rng = np.random.default_rng(seed)
    w = rng.normal(0, 0.3, (c, 1, k, k)).astype(np.float32)
    b = rng.normal(0, 0.1, c).astype(np.float32)
    pt, pl, pb, pr = pads
    nodes = [helper.make_node("Conv", ["x", "w", "b"], ["c"], group=c, kernel_shape=[k, k],
                              strides=[s, s], pads=[pt, pl, pb, pr], dilations=[dil, dil]),
             helper.make_node("Relu", ["c"], ["y"])]
    return make_model(nodes, [("x", [n, c, h, h])], [("y", None)], {"w": w, "b": b})


def _block_model(n: int, c_in: int, c: int, c_out: int, h: int, seed: int = 0):
    """MobileNet-like: 3x3 conv ``c_in -> c`` stride 2 + Relu, depthwise 3x3 + Relu,
    pointwise 1x1 ``c -> c_out`` + Relu, depthwise 3x3 stride 2 + Relu."""
    rng = np.random.default_rng(seed)
    inits = {"w0": rng.normal(0, 0.3, (c, c_in, 3, 3)), "b0": rng.normal(0, 0.1, c),
             "w1": rng.normal(0, 0.3, (c, 1, 3, 3)), "b1": rng.normal(0, 0.1, c),
             "w2": rng.normal(0, 0.2, (c_out, c, 1, 1)), "b2": rng.normal(0, 0.1, c_out),
             "w3": rng.normal(0, 0.3, (c_out, 1, 3, 3)), "b3": rng.normal(0, 0.1, c_out)}
    inits = {k: v.astype(np.float32) for k, v in inits.items()}
    conv = helper.make_node
    nodes = [conv("Conv", ["x", "w0", "b0"], ["c0"], kernel_shape=[3, 3], strides=[2, 2],
                  pads=[1, 1, 1, 1]), conv("Relu", ["c0"], ["r0"]),
             conv("Conv", ["r0", "w1", "b1"], ["c1"], group=c, kernel_shape=[3, 3],
                  pads=[1, 1, 1, 1]), conv("Relu", ["c1"], ["r1"]),
             conv("Conv", ["r1", "w2", "b2"], ["c2"], kernel_shape=[1, 1]),
             conv("Relu", ["c2"], ["r2"]),
             conv("Conv", ["r2", "w3", "b3"], ["c3"], group=c_out, kernel_shape=[3, 3],
                  strides=[2, 2], pads=[1, 1, 1, 1]), conv("Relu", ["c3"], ["y"])]
    return make_model(nodes, [("x", [n, c_in, h, h])], [("y", None)], inits)


def _run(model, x, cfg, options=None):
    """Compile ``model`` for ``cfg`` (calibrated on ``x``; ``options``: a
    ``LowerOptions``), run ``x`` on a :class:`CheckingFsim`; every VTA step's output must
    equal the integer reference.  Returns ``(compiled model, executor, device)``."""
    cm = compile_model(model, x, cfg, **({} if options is None else {"options": options}))
    dev = CheckingFsim(cm.config)
    ex = Executor(cm, dev)
    out = ex.run(x, keep=True)
    ref = run_quantized(cm.qgraph, {cm.inputs[0]: x}, keep_all=True)
    vta = [s for s in cm.steps if s.target == "vta"]
    assert any(s.op == "qconv2d" for s in vta)
    for s in vta:
        np.testing.assert_array_equal(out[s.outputs[0]], ref[s.outputs[0]], err_msg=s.name)
    return cm, ex, dev


def _dw_steps(cm):
    return [s for s in cm.steps if s.op == "qconv2d" and s.target == "vta"
            and s.attrs.get("groups", 1) > 1]


#: (name, channels, size, kernel, stride, pads[, dilation]): 3x3 / 5x5 / 7x7, strides 1 and
#: 2, dilation 2, channel
#: counts off the block (4 on tiny, 16 on pynq-fast), symmetric, asymmetric and no padding
CASES = [
    ("3x3s1", 16, 9, 3, 1, (1, 1, 1, 1)),
    ("3x3s2", 20, 10, 3, 2, (1, 1, 1, 1)),
    ("3x3s1-nopad", 10, 8, 3, 1, (0, 0, 0, 0)),
    ("5x5s1", 24, 9, 5, 1, (2, 2, 2, 2)),
    ("5x5s2", 8, 11, 5, 2, (2, 2, 2, 2)),
    ("5x5s2-asym", 40, 12, 5, 2, (1, 2, 2, 1)),
    ("7x7s1", 7, 9, 7, 1, (3, 3, 3, 3)),
    ("3x3s1-dil2", 16, 10, 3, 1, (2, 2, 2, 2), 2),    # the frontend's 5x5 with zero taps
]


@pytest.mark.parametrize("base", BASES)
@pytest.mark.parametrize("case", CASES, ids=lambda c: c[0])
def test_depthwise_conv_bit_exact_race_free_fewer_gemms(base, case):
    """Each depthwise conv on the ``DEPTHWISE_TAPS`` 3 config: the reference's values bit
    for bit, race-free programs with depthwise GEMMs, and ``kw / ceil(kw/3)`` times fewer
    GEMM micro-ops than on the config without the option (which has no depthwise GEMM)."""
    name, c, h, k, s, pads, *dil = case
    dil = dil[0] if dil else 1
    k_eff = (k - 1) * dil + 1
    x = np.random.default_rng(1).standard_normal((2 if k == 3 else 1, c, h, h)) \
        .astype(np.float32)
    cfg0 = _without(base)
    cfg = cfg0.replace(DEPTHWISE_TAPS=TAPS)
    m = _dw_model(len(x), c, h, k, s, pads, dil)
    cm, ex, dev = _run(m, x, cfg)
    cm0, ex0, dev0 = _run(m, x, cfg0)
    assert dev.dw_gemms > 0 and dev0.dw_gemms == 0
    (st,), (st0,) = _dw_steps(cm), _dw_steps(cm0)
    assert st.trace.stats["depthwise_taps"] == TAPS
    assert "depthwise_taps" not in st0.trace.stats
    assert "depthwise GEMMs of 3 taps" in st.reason and "depthwise GEMMs" not in st0.reason
    got, was = ex.stats[st.name].gemm_uops, ex0.stats[st0.name].gemm_uops
    want = k_eff / -(-k_eff // TAPS)
    assert 0.85 * want <= was / got <= 1.02 * want, (was, got, want)
    # the planned micro-ops are exactly kh * ceil(kw/T) per output pixel and block
    ho = (h + pads[0] + pads[2] - k_eff) // s + 1
    wo = (h + pads[1] + pads[3] - k_eff) // s + 1
    blocks = -(-c // cfg.BLOCK_OUT)
    assert st.trace.stats["gemm_uops_planned"] == blocks * k_eff * -(-k_eff // TAPS) * ho * wo


@pytest.mark.parametrize("batch", [1, 2])
@pytest.mark.parametrize("base", BASES)
def test_mobilenet_like_block(base, batch):
    """3x3 stem, depthwise 3x3, pointwise 1x1, depthwise 3x3 stride 2 (24 and 40 channels):
    every VTA step bit-exact and race-free; only the two depthwise convs use depthwise
    GEMMs, and the program has fewer GEMM micro-ops than without the option."""
    x = np.random.default_rng(2).standard_normal((batch, 3, 18, 18)).astype(np.float32)
    cfg0 = _without(base)
    m = _block_model(batch, 3, 24, 40, 18)
    cm, ex, dev = _run(m, x, cfg0.replace(DEPTHWISE_TAPS=TAPS))
    cm0, ex0, dev0 = _run(m, x, cfg0)
    dws = _dw_steps(cm)
    assert len(dws) == 2 and all(s.trace.stats.get("depthwise_taps") == TAPS for s in dws)
    others = [s for s in cm.steps if s.target == "vta" and s not in dws]
    assert all("depthwise_taps" not in s.trace.stats for s in others)
    assert dev.dw_gemms > 0 and dev0.dw_gemms == 0
    for s, s0 in zip(dws, _dw_steps(cm0)):
        assert ex.stats[s.name].gemm_uops * 2.5 < ex0.stats[s0.name].gemm_uops
    for s, s0 in zip(others, [s for s in cm0.steps if s.target == "vta"
                              and s not in _dw_steps(cm0)]):
        assert ex.stats[s.name].gemm_uops == ex0.stats[s0.name].gemm_uops, s.name


def test_plan_shows_depthwise_taps():
    """The conv plan (``vtaforge compile --explain``) says the lowering chose depthwise
    GEMMs, and how many micro-ops per pixel."""
    from vtaforge.compiler.lower_conv import lower_conv

    cfg = _without("pynq-fast").replace(DEPTHWISE_TAPS=TAPS)
    rng = np.random.default_rng(0)
    w = rng.integers(-127, 128, (32, 1, 5, 5)).astype(np.int8)
    b = np.zeros(32, np.int32)
    attrs = {"kernel": (5, 5), "strides": (1, 1), "pads": (2, 2, 2, 2), "groups": 32,
             "shift": 6, "round": 32, "mult": 1, "clip_lo": 0, "clip_hi": 127}
    plans: list = []
    lower_conv(cfg, "dw", (32, 12, 12), w, b, attrs, explain=plans)
    assert plans[-1].depthwise_taps == TAPS
    assert "depthwise GEMMs of 3 taps (10 micro-ops per pixel, not 25)" in str(plans[-1])
    plans0: list = []
    lower_conv(_without("pynq-fast"), "dw", (32, 12, 12), w, b, attrs, explain=plans0)
    assert plans0[-1].depthwise_taps == 0 and "depthwise GEMMs" not in str(plans0[-1])
    plans_fast: list = []       # the pynq-fast preset has the option
    lower_conv(preset("pynq-fast"), "dw", (32, 12, 12), w, b, attrs, explain=plans_fast)
    assert plans_fast[-1].depthwise_taps == TAPS


def test_pack_depthwise_layout():
    """Tile ``(cb, ky, kc)`` row ``o`` column ``t`` holds ``w[cb*16 + o, 0, ky, kc*3 + t]``;
    zeros past the kernel, in columns 3 and up and in padded channels (checked entry by
    entry against the definition)."""
    from vtaforge.compiler.pack import pack_depthwise

    w = np.random.default_rng(3).integers(-127, 128, (20, 1, 5, 5)).astype(np.int8)
    pk = pack_depthwise(w, 16, 3)
    assert pk.data.shape == (2, 5, 2, 16, 16)
    assert [tuple(p) for p in pk.blocks] == [(0, 0), (1, 1)]
    for cb in range(2):
        for ky in range(5):
            for kc in range(2):
                for o in range(16):
                    for t in range(16):
                        ch, kx = cb * 16 + o, kc * 3 + t
                        want = w[ch, 0, ky, kx] if (t < 3 and kx < 5 and ch < 20) else 0
                        assert pk.data[cb, ky, kc, o, t] == want


def test_mobilenet_v1_on_depthwise_gemms():
    """MobileNet-v1 at 64x64 (``zoo.mobilenet_v1``: its 13 depthwise convs, strides 1 and
    2) on ``pynq-fast`` + ``DEPTHWISE_TAPS`` 3: every VTA step bit-exact against the
    integer reference, every program race-free, all 13 depthwise convs on depthwise GEMMs
    with about 3x fewer GEMM micro-ops each."""
    from vtaforge.compiler.zoo import mobilenet_v1

    x = np.random.default_rng(0).random((1, 3, 64, 64), dtype=np.float32)
    cfg0 = _without("pynq-fast")
    m = mobilenet_v1(64, batch=1)
    cm, ex, dev = _run(m, x, cfg0.replace(DEPTHWISE_TAPS=TAPS))
    dws = _dw_steps(cm)
    assert len(dws) == 13 and all(s.trace.stats.get("depthwise_taps") == TAPS for s in dws)
    cm0 = compile_model(m, x, cfg0)
    ex0 = Executor(cm0, FsimDevice(cfg0))
    ex0.run(x)
    for s, s0 in zip(dws, _dw_steps(cm0)):
        ratio = ex0.stats[s0.name].gemm_uops / ex.stats[s.name].gemm_uops
        assert 2.5 < ratio <= 3.0, (s.name, ratio)


def test_artifact_keeps_the_depthwise_flag(tmp_path):
    """A compiled model saved and loaded (``.vtapkg``) keeps its kernels' depthwise flag:
    the loaded model's programs run depthwise GEMMs and give the same outputs."""
    from vtaforge.runtime.artifact import load_artifact, save_artifact

    cfg = preset("tiny").replace(DEPTHWISE_TAPS=TAPS)
    x = np.random.default_rng(5).standard_normal((1, 12, 8, 8)).astype(np.float32)
    cm, ex, dev = _run(_dw_model(1, 12, 8, 5, 1, (2, 2, 2, 2)), x, cfg)
    save_artifact(cm, tmp_path / "dw.vtapkg")
    cm2 = load_artifact(tmp_path / "dw.vtapkg")
    (st,), (st2,) = _dw_steps(cm), _dw_steps(cm2)
    assert [k.depthwise for k in st2.trace.kernels] == [k.depthwise for k in st.trace.kernels]
    assert any(k.depthwise for k in st2.trace.kernels)
    dev2 = CheckingFsim(cfg)
    out2 = Executor(cm2, dev2).run(x, keep=True)
    assert dev2.dw_gemms == dev.dw_gemms > 0
    np.testing.assert_array_equal(out2[st2.outputs[0]], ex.run(x, keep=True)[st.outputs[0]])


def test_builder_depthwise_kernels():
    """The program builder's depthwise GEMM kernel: refused on a config without the
    option and as an ALU kernel; its INP bound is the last tap's (``src + T - 1`` below
    the INP depth); its instruction has the flag; a key recorded as depthwise and as an
    ordinary GEMM gives two kernels."""
    from vtaforge.runtime.builder import ProgramBuilder
    from vtaforge.runtime.kernels import BuilderError

    def rec(src):
        return lambda k: k.uop(0, src, 0)

    with pytest.raises(BuilderError, match="DEPTHWISE_TAPS > 0"):
        ProgramBuilder(FsimDevice(preset("tiny"))).kernel("k", rec(0), "gemm", depthwise=True)
    cfg = preset("tiny").replace(DEPTHWISE_TAPS=TAPS)
    b = ProgramBuilder(FsimDevice(cfg))
    with pytest.raises(BuilderError, match="must be a GEMM"):
        b.kernel("a", rec(0), "alu", depthwise=True)
    top = cfg.INP_DEPTH - TAPS
    k = b.kernel("ok", rec(top), "gemm", depthwise=True)
    assert k.depthwise and not b.kernel("ok", rec(top), "gemm").depthwise
    with pytest.raises(BuilderError, match=f"src index reaches {cfg.INP_DEPTH}"):
        b.kernel("far", rec(top + 1), "gemm", depthwise=True)
    b.run_kernel(k)
    assert b._recs[-1].insn.depthwise == 1


@pytest.mark.parametrize("opts", [{"bias_load": True}, {"step_req": False},
                                  {"clearing_req": False}, {"quad_acc_ratio": 1000.0}],
                         ids=lambda o: ",".join(o))
def test_depthwise_gemms_under_conv_options(opts):
    """The lowering's other choices (bias loads, no per-step REQ, no clearing REQ, no four
    ACC regions) with depthwise GEMMs: still bit-exact and race-free on ``pynq-fast``."""
    from vtaforge.compiler.options import ConvOptions, LowerOptions

    cfg = _without("pynq-fast").replace(DEPTHWISE_TAPS=TAPS)
    x = np.random.default_rng(6).standard_normal((1, 40, 12, 12)).astype(np.float32)
    cm, _, dev = _run(_dw_model(1, 40, 12, 5, 1, (2, 2, 2, 2)), x, cfg,
                      LowerOptions(conv=ConvOptions(**opts)))
    assert dev.dw_gemms > 0
