"""BYOC completed: every valid model runs -- VTA where it can, the host CPU elsewhere.

Oracles: ONNX's own node-test generators (``onnx.backend.test.case.node``: each case has
inputs and the expected outputs computed by ONNX's reference code) and onnxruntime.
"""

from __future__ import annotations

import numpy as np
import pytest
from click.testing import CliRunner
from onnx import TensorProto, helper

from _onnx_util import make_model, rand, run_ort
from vtaforge.cli import main
from vtaforge.compiler.compile import compile_model
from vtaforge.runtime import float_ops
from vtaforge.runtime.artifact import ArtifactError, load_artifact, save_artifact
from vtaforge.runtime.executor import Executor
from vtaforge.runtime.fsim import FsimDevice


def _cases():
    import onnx.backend.test.case.node as node_cases

    out = []
    for c in node_cases.collect_testcases(""):
        m = c.model
        if len(m.graph.node) != 1 or m.graph.node[0].domain not in ("", "ai.onnx"):
            continue
        ins, outs = ([np.asarray(v) if np.isscalar(v) or isinstance(v, np.generic) else v for v in vs]
                     for vs in c.data_sets[0])
        gi = [vi for vi in m.graph.input if vi.name not in {i.name for i in m.graph.initializer}]
        if not ins or len(ins) != len(gi) or any(not isinstance(x, np.ndarray) for x in ins) or \
                ins[0].dtype != np.float32 or ins[0].ndim == 0 or ins[0].size == 0 or \
                any(not vi.type.HasField("tensor_type") for vi in gi):
            continue
        if any(not isinstance(y, np.ndarray) for y in outs):
            continue
        out.append(c)
    return out


CASES = _cases()
# a spread of ops: the first case of every op type (keeps the test to a few seconds)
_seen: dict = {}
for _c in CASES:
    _seen.setdefault(_c.model.graph.node[0].op_type, _c)
PICK = sorted(_seen.values(), key=lambda c: c.name)


@pytest.mark.parametrize("case", PICK, ids=[c.name for c in PICK])
def test_onnx_node_case_runs_through_vtaforge(case):
    """Compile the one-node model (calibrated on its own inputs) and run it on fsim: it must
    not be refused, and must match the expected outputs within int8 tolerance (real-valued
    outputs) or exactly (integer and boolean outputs)."""
    ins, want = ([np.asarray(v) if isinstance(v, np.generic) else v for v in vs] for vs in case.data_sets[0])
    m = case.model
    try:        # the property is "every model onnxruntime runs": skip what it cannot load
        import onnxruntime as ort

        ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"])
    except Exception as e:  # noqa: BLE001
        pytest.skip(f"onnxruntime cannot run it either ({type(e).__name__})")
    feeds = {vi.name: x for vi, x in zip(
        [vi for vi in m.graph.input if vi.name not in {i.name for i in m.graph.initializer}], ins)}
    cm = compile_model(m, feeds, "pynq")
    got = Executor(cm, FsimDevice(cm.config)).run(feeds)
    for name, w in zip(cm.outputs, want):
        y = got[name]
        assert y.shape == w.shape, (name, y.shape, w.shape)
        if w.dtype.kind in "biu":
            np.testing.assert_array_equal(y, w)
        else:
            fin = np.isfinite(w)
            np.testing.assert_array_equal(np.isfinite(y), fin)
            tol = 0.05 * float(np.abs(w[fin]).max(initial=0)) + 1e-4
            np.testing.assert_allclose(y[fin], w[fin], atol=tol, rtol=0.02)


def test_node_cases_cover_the_issue_ops():
    ops = {c.model.graph.node[0].op_type for c in PICK}
    for op in ("HardSwish", "HardSigmoid", "Sigmoid", "LeakyRelu", "Resize", "Pad", "ConvTranspose",
               "ReduceMean", "Squeeze", "Unsqueeze", "MatMul", "Gemm", "AveragePool", "Concat"):
        assert op in ops, op


def _sin_relu_model():
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1], name="conv"),
             helper.make_node("Sin", ["c"], ["s"], name="sin"),
             helper.make_node("Relu", ["s"], ["r"], name="relu"),
             helper.make_node("Conv", ["r", "w2"], ["y"], name="conv2")]
    return make_model(nodes, [("x", ["N", 3, 8, 8])], [("y", ["N", 4, 8, 8])],
                      {"w": rand(8, 3, 3, 3, seed=1, scale=0.3), "w2": rand(4, 8, 1, 1, seed=2, scale=0.3)})


def test_unsupported_op_runs_on_cpu_between_vta_regions():
    m = _sin_relu_model()
    x = rand(6, 3, 8, 8, seed=3)
    cm = compile_model(m, x, "pynq")
    where = {s.name: cm.where(s) for s in cm.steps}
    assert where["sin"] == "CPU (numpy)" and where["conv"] == "VTA" and where["conv2"] == "VTA"
    table = cm.placement_table()
    assert "no IR conversion for ONNX op Sin" in table
    assert "nodes on VTA, 100.0% of MACs on VTA" in table.splitlines()[-1]
    y = Executor(cm, FsimDevice(cm.config)).run(x)["y"]
    (want,) = run_ort(m, {"x": x})
    cos = float(np.sum(y * want) / (np.linalg.norm(y) * np.linalg.norm(want)))
    assert cos > 0.99, cos


def _ort_only_model():
    """A com.microsoft op (no numpy kernel): runs on onnxruntime."""
    g = helper.make_graph(
        [helper.make_node("Relu", ["x"], ["r"], name="relu"),
         helper.make_node("FastGelu", ["r"], ["y"], name="gelu", domain="com.microsoft")], "t",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 8])])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17),
                                            helper.make_opsetid("com.microsoft", 1)])
    m.ir_version = 8
    return m


def test_onnxruntime_op_is_recorded_and_refused_without_onnxruntime(tmp_path, monkeypatch):
    m = _ort_only_model()
    x = rand(2, 8, seed=4)
    cm = compile_model(m, x, "pynq")
    assert cm.requires() == {"onnxruntime": ["FastGelu"]}
    assert {s.name: cm.where(s) for s in cm.steps}["gelu"] == "CPU (onnxruntime)"
    y = Executor(cm, FsimDevice(cm.config)).run(x)["y"]
    (want,) = run_ort(m, {"x": x})
    np.testing.assert_allclose(y, want, atol=0.05)
    p = tmp_path / "m.vtapkg"
    save_artifact(cm, p)
    monkeypatch.setattr(float_ops, "onnxruntime_available", lambda: False)
    with pytest.raises(ArtifactError, match=r"runs CPU op\(s\) FastGelu on onnxruntime, which is not "
                                            r"installed \(pip install onnxruntime\)"):
        load_artifact(p)
    np.save(tmp_path / "x.npy", x)
    r = CliRunner().invoke(main, ["run", "--model", str(p), "--input", str(tmp_path / "x.npy")])
    assert r.exit_code != 0
    assert r.output.strip().splitlines()[-1].startswith("error: ") and "FastGelu" in r.output


def test_run_prints_the_placement_table(tmp_path):
    m = _sin_relu_model()
    (tmp_path / "m.onnx").write_bytes(m.SerializeToString())
    np.save(tmp_path / "x.npy", rand(2, 3, 8, 8, seed=5))
    r = CliRunner().invoke(main, ["run", "--model", str(tmp_path / "m.onnx"), "--input",
                                  str(tmp_path / "x.npy")])
    assert r.exit_code == 0, r.output
    lines = r.output.splitlines()
    assert any(ln.strip().startswith("CPU (numpy)") and " sin " in ln for ln in lines)
    assert any("3/" in ln and "nodes on VTA" in ln and "% of MACs on VTA" in ln for ln in lines)


def test_cli_multi_input_npz_int64_indices_and_fixed_batch_chunks(tmp_path):
    """A model with a float input and an int64 index input runs from the CLI with a .npz
    (arrays by input name); a fixed-batch-1 model runs 3 samples one at a time."""
    g = helper.make_graph(
        [helper.make_node("Relu", ["x"], ["r"]), helper.make_node("Gather", ["r", "idx"], ["y"], axis=1)],
        "t", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 6]),
              helper.make_tensor_value_info("idx", TensorProto.INT64, [3])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 3])])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    (tmp_path / "g.onnx").write_bytes(m.SerializeToString())
    x, idx = rand(1, 6, seed=6), np.array([5, 0, 2], np.int64)
    np.savez(tmp_path / "in.npz", x=x, idx=idx)
    r = CliRunner().invoke(main, ["run", "--model", str(tmp_path / "g.onnx"), "--input",
                                  str(tmp_path / "in.npz"), "--output", str(tmp_path / "y.npy")])
    assert r.exit_code == 0, r.output
    (want,) = run_ort(m, {"x": x, "idx": idx})
    np.testing.assert_allclose(np.load(tmp_path / "y.npy"), want, atol=0.05)
    m1 = make_model([helper.make_node("Sin", ["x"], ["y"])], [("x", [1, 3, 4, 4])], [("y", [1, 3, 4, 4])])
    (tmp_path / "s.onnx").write_bytes(m1.SerializeToString())
    x3 = rand(3, 3, 4, 4, seed=7)
    np.save(tmp_path / "x3.npy", x3)
    r = CliRunner().invoke(main, ["run", "--model", str(tmp_path / "s.onnx"), "--input",
                                  str(tmp_path / "x3.npy"), "--output", str(tmp_path / "y3.npy")])
    assert r.exit_code == 0, r.output
    np.testing.assert_allclose(np.load(tmp_path / "y3.npy"), np.sin(x3), atol=0.05)


def test_input_that_is_also_an_output_passes_through():
    m = make_model([helper.make_node("Relu", ["x"], ["r"])], [("x", [2, 4])], [("r", [2, 4]), ("x", [2, 4])])
    x = rand(2, 4, seed=8)
    cm = compile_model(m, x, "pynq")
    out = Executor(cm, FsimDevice(cm.config)).run(x)
    np.testing.assert_array_equal(out["x"], x)
    np.testing.assert_allclose(out["r"], np.maximum(x, 0), atol=0.05)


@pytest.mark.parametrize("alu_mul", [False, True])
def test_tensor_multiply_squeeze_excite_and_hard_swish(alu_mul):
    """Mul of two tensors (a squeeze-excite scale [N,C,1,1] and x * hardsigmoid(x)) is an
    int8 ``qmul``: on VTA with a tensor-operand ALU MUL where the core has ALU_MUL, on the
    CPU's integer kernel otherwise; bit-exact against the integer reference either way."""
    from vtaforge.compiler.reference import run_quantized
    from vtaforge.hw.config import preset

    nodes = [helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1], name="conv"),
             helper.make_node("HardSigmoid", ["c"], ["hs"], name="hsig"),
             helper.make_node("Mul", ["c", "hs"], ["hw"], name="hswish"),
             helper.make_node("GlobalAveragePool", ["hw"], ["g"], name="gap"),
             helper.make_node("Conv", ["g", "w2"], ["e"], name="excite"),
             helper.make_node("Sigmoid", ["e"], ["s"], name="sig"),
             helper.make_node("Mul", ["s", "hw"], ["y"], name="se")]
    m = make_model(nodes, [("x", ["N", 3, 8, 8])], [("y", ["N", 16, 8, 8])],
                   {"w": rand(16, 3, 3, 3, seed=1, scale=0.4), "w2": rand(16, 16, 1, 1, seed=2, scale=0.3)})
    cfg = preset("pynq").replace(ALU_MUL=True) if alu_mul else preset("pynq")
    x = rand(4, 3, 8, 8, seed=3)
    cm = compile_model(m, x, cfg)
    where = {s.name: cm.where(s) for s in cm.steps}
    want = "VTA" if alu_mul else "CPU (numpy)"
    assert where["hswish"] == want and where["se"] == want, cm.placement_table()
    got = Executor(cm, FsimDevice(cfg)).run(x, keep=True)
    ref = run_quantized(cm.qgraph, {"x": x}, keep_all=True)
    for s in cm.steps:
        if s.op == "qmul":
            np.testing.assert_array_equal(got[s.outputs[0]], ref[s.outputs[0]], err_msg=s.name)
    (y_ort,) = run_ort(m, {"x": x})
    y = got["y"]
    cos = float(np.sum(y * y_ort) / (np.linalg.norm(y) * np.linalg.norm(y_ort)))
    assert cos > 0.99, cos


def _add_const_model():
    nodes = [helper.make_node("MaxPool", ["x"], ["p"], kernel_shape=[2, 2], strides=[2, 2]),
             helper.make_node("Add", ["p", "pc"], ["a"], name="add_pc"),          # per channel
             helper.make_node("Relu", ["a"], ["r"]),
             helper.make_node("Add", ["r", "three"], ["s"], name="add_3"),        # scalar (hard-swish)
             helper.make_node("Clip", ["s", "lo", "hi"], ["y"], name="relu6")]
    return make_model(nodes, [("x", ["N", 20, 6, 6])], [("y", ["N", 20, 3, 3])],
                      {"pc": rand(1, 20, 1, 1, seed=9), "three": np.array(3.0, np.float32),
                       "lo": np.array(0.0, np.float32), "hi": np.array(6.0, np.float32)})


@pytest.mark.parametrize("cfg", ["pynq", "tiny"])
def test_add_of_a_constant_runs_on_vta(cfg):
    """x + scalar and x + per-channel constant (not after a conv, so not folded into a bias)
    are int8 qadd on VTA: the scalar as an ALU immediate, the per-channel constant as a
    resident ACC constant broadcast over H*W; bit-exact against the integer reference."""
    from vtaforge.compiler.reference import run_quantized

    m = _add_const_model()
    x = rand(5, 20, 6, 6, seed=10)
    cm = compile_model(m, x, cfg)
    where = {s.name: cm.where(s) for s in cm.steps}
    assert where["add_pc"] == "VTA" and where["add_3"] == "VTA", cm.placement_table()
    got = Executor(cm, FsimDevice(cm.config)).run(x, keep=True)
    ref = run_quantized(cm.qgraph, {"x": x}, keep_all=True)
    for s in cm.steps:
        if s.target == "vta":
            np.testing.assert_array_equal(got[s.outputs[0]], ref[s.outputs[0]], err_msg=s.name)
    (want,) = run_ort(m, {"x": x})
    assert np.abs(got["y"] - want).max() < 0.1 * np.abs(want).max()


@pytest.mark.parametrize("ctm,nm,opset", [("asymmetric", "floor", 13), ("half_pixel", "round_prefer_floor", 13),
                                          ("asymmetric", "floor", 18)])
def test_nearest_resize_and_zero_pad_stay_int8(ctm, nm, opset):
    """Nearest Resize by integer factors (the coordinate/rounding modes under which it is a
    pixel repeat) and zero Pad are int8 layout ops on the host between VTA convs: no
    dequantize/quantize around them, equal to onnxruntime up to the int8 error."""
    from vtaforge.compiler.reference import run_quantized

    scales = np.array([1, 1, 2, 2], np.float32)
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1]),
             helper.make_node("Relu", ["c"], ["r"]),
             helper.make_node("Resize", ["r", "", "sc"], ["u"], mode="nearest",
                              coordinate_transformation_mode=ctm, nearest_mode=nm, name="up"),
             helper.make_node("Pad", ["u", "pads"], ["p"], mode="constant", name="pad"),
             helper.make_node("Conv", ["p", "w2"], ["y"])]
    m = make_model(nodes, [("x", ["N", 3, 5, 5])], [("y", ["N", 4, 10, 10])],
                   {"w": rand(8, 3, 3, 3, seed=1, scale=0.4), "sc": scales,
                    "pads": np.array([0, 0, 1, 1, 0, 0, 1, 1], np.int64), "w2": rand(4, 8, 3, 3, seed=2, scale=0.3)},
                   opset=opset)
    x = rand(3, 3, 5, 5, seed=3)
    cm = compile_model(m, x, "pynq")
    ops = {s.name: s.op for s in cm.steps}
    assert ops["up"] == "upsample" and ops["pad"] == "pad", cm.placement_table()
    assert [s.op for s in cm.steps].count("dequantize") == 1      # only the graph output
    got = Executor(cm, FsimDevice(cm.config)).run(x, keep=True)
    ref = run_quantized(cm.qgraph, {"x": x}, keep_all=True)
    for s in cm.steps:
        if s.target == "vta" or s.op in ("upsample", "pad"):
            np.testing.assert_array_equal(got[s.outputs[0]], ref[s.outputs[0]], err_msg=s.name)
    (want,) = run_ort(m, {"x": x})
    cos = float(np.sum(got["y"] * want) / (np.linalg.norm(got["y"]) * np.linalg.norm(want)))
    assert cos > 0.99, cos
