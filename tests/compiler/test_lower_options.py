"""The lowering's options are passed in (issue 23): ``LowerOptions`` reaches the program
builders through ``lower_graph`` / ``compile_model`` / ``compile_dynamic``, and no test
patches a builder's keyword defaults.

Oracle for the threading: the program builders called directly with the same choices as
explicit arguments (``lower_conv(options=)``, ``lower_pool(separable=, gemm_copy=)``),
compared by the digest of everything they emit (``tests/support/program_identity.py``).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from _lower_util import QG
from program_identity import digest
from vtaforge.compiler.compile import compile_model, lower_graph
from vtaforge.compiler.ir import TensorType
from vtaforge.compiler.lower_common import LoweredOp
from vtaforge.compiler.lower_conv import lower_conv
from vtaforge.compiler.lower_eltwise import lower_pool
from vtaforge.compiler.options import ConvOptions, LowerOptions
from vtaforge.compiler.partition import partition
from vtaforge.hw.config import preset

TESTS = Path(__file__).resolve().parent.parent
PYNQ = preset("pynq")


def test_no_test_patches_keyword_defaults():
    """Options are arguments: no test monkeypatches the keyword defaults of a function
    (the attribute named by ``needle``)."""
    needle = "__kw" + "defaults__"
    hits = [f"{p.relative_to(TESTS)}:{i}" for p in sorted(TESTS.rglob("*.py"))
            for i, line in enumerate(p.read_text().splitlines(), 1) if needle in line]
    assert not hits, f"tests patch keyword defaults (pass LowerOptions instead): {hits}"


def test_lower_options_defaults_and_errors():
    assert LowerOptions.for_config(PYNQ) == LowerOptions()
    assert LowerOptions.for_config(PYNQ).conv == ConvOptions.for_config(PYNQ)
    assert LowerOptions.for_config(PYNQ, pool_separable=False).pool_separable is False
    assert LowerOptions.resolve(None, PYNQ) == LowerOptions()
    opt = LowerOptions(pool_gemm_copy=False)
    assert LowerOptions.resolve(opt, PYNQ) is opt
    assert str(LowerOptions()) == "lower options: defaults"
    assert str(LowerOptions(conv=ConvOptions(bias_load=True), pool_separable=False)) == \
        "lower options: conv.bias_load=True, pool_separable=False"
    assert str(ConvOptions(bias_load=True)) == "options: bias_load=True"
    with pytest.raises(TypeError, match=r"unknown LowerOptions field\(s\) \['separable'\]"):
        LowerOptions.for_config(PYNQ, separable=False)
    with pytest.raises(TypeError, match="LowerOptions.conv must be a ConvOptions, got dict"):
        LowerOptions(conv={"bias_load": True})
    with pytest.raises(TypeError, match="options must be a LowerOptions, got ConvOptions"):
        LowerOptions.resolve(ConvOptions(), PYNQ)
    with pytest.raises(AttributeError):
        LowerOptions().pool_separable = False        # frozen


def _conv_pool_graph():
    """quantize -> 3x3 conv (16 -> 16, 12x12) -> 3x3/2 max-pool -> dequantize, with its
    conv constants and attributes."""
    rng = np.random.default_rng(3)
    w = rng.integers(-127, 128, (16, 16, 3, 3)).astype(np.int8)
    b = rng.integers(-5000, 5000, 16).astype(np.int32)
    qg = QG(("N", 16, 12, 12))
    wn, bn = qg.const("w", w), qg.const("b", b)
    ca = {"kernel": (3, 3), "strides": (1, 1), "pads": (1, 1, 1, 1), "groups": 1}
    ca.update(qg.req(9, 0, 127))
    y = qg.add("qconv2d", ["xq", wn, bn], ca, TensorType("int8", ("N", 16, 12, 12), 9), "c")
    pa = {"kernel": (3, 3), "strides": (2, 2), "pads": (1, 1, 1, 1)}
    z = qg.add("qmax_pool", [y], pa, TensorType("int8", ("N", 16, 6, 6), 9), "p")
    return qg.finish(z), w, b, ca, pa


def _step_digests(cm) -> dict:
    return {s.op: digest(LoweredOp(s.trace, {k: cm.constants[v] for k, v in s.slots.items()
                                             if v in cm.constants}, dict(s.layouts)))
            for s in cm.steps if s.target == "vta"}


@pytest.mark.parametrize("cfg_name", ["pynq", "tiny"])
def test_lower_graph_hands_each_builder_its_options(cfg_name):
    """``lower_graph(options=)`` gives the conv the programs of ``lower_conv`` with
    ``options.conv`` and the pool those of ``lower_pool`` with ``separable`` /
    ``gemm_copy``; the defaults give the builders' default programs, and the non-default
    options change them (so the check sees whether they arrive)."""
    cfg = preset(cfg_name)
    g, w, b, ca, pa = _conv_pool_graph()
    part = partition(g, cfg)
    conv_uid, pool_uid = (f"{g.name}/{n.name}" for n in g.nodes if n.op in ("qconv2d", "qmax_pool"))

    def direct(conv_opt, sep, copy):
        c = lower_conv(cfg, conv_uid, (16, 12, 12), w, b, ca, options=conv_opt)
        p = lower_pool(cfg, pool_uid, (16, 12, 12), pa, "max", separable=sep, gemm_copy=copy)
        return {"qconv2d": digest(c), "qmax_pool": digest(p)}

    default = _step_digests(lower_graph(g, part, row_bands=False))
    assert default == direct(None, True, True)
    opt = LowerOptions(conv=ConvOptions(bias_load=True), pool_separable=False)
    got = _step_digests(lower_graph(g, part, row_bands=False, options=opt))
    assert got == direct(ConvOptions(bias_load=True), False, True)
    assert got["qconv2d"] != default["qconv2d"] and got["qmax_pool"] != default["qmax_pool"]


def test_compile_model_checks_options_first():
    """A wrong ``options`` type fails at once, before the import and calibration."""
    with pytest.raises(TypeError, match="options must be a LowerOptions, got ConvOptions"):
        compile_model(b"not a model", np.zeros((1, 1), np.float32), "pynq",
                      options=ConvOptions())


def test_compile_dynamic_keeps_options_for_every_shape():
    """``compile_dynamic(options=)`` lowers each specialised shape with them: the pool of
    the digits model's specialisation runs per window (no separable passes) exactly
    when ``pool_separable`` is off."""
    pytest.importorskip("onnx")
    from vtaforge.compiler.dynamic import compile_dynamic
    from vtaforge.compiler.models import DIGITS_ONNX, load_digits_split

    x = load_digits_split()[0][:8]
    opt = LowerOptions(pool_separable=False)
    dm = compile_dynamic(str(DIGITS_ONNX), x, "pynq", options=opt)
    assert dm.options == opt
    key = dm.shape_key(x)
    on = compile_dynamic(str(DIGITS_ONNX), x, "pynq").specialise(key)
    off = dm.specialise(key)
    want = compile_model(str(DIGITS_ONNX), x, "pynq", options=opt)
    assert _step_digests(off) == _step_digests(want)
    assert _step_digests(off) != _step_digests(on)
