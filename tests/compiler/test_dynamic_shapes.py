"""Symbolic H and W: one compile (import + calibration once), a specialised model and
executor per concrete input shape (``compiler/dynamic.py``, ``runtime/shapes.py``).

Oracles: the numpy integer reference (:func:`~vtaforge.compiler.reference.run_quantized`
on each specialised quantized graph), bit for bit, every VTA step's output included; and
onnxruntime on the float ONNX model, within the int8 tolerance, at every size.

Models: a conv net built with ``onnx.helper`` with input ``[1, 3, H, W]`` (conv stride 1
and 2 with padding, ReLU, a residual add, max-pool, with and without a global average
pool), and a PyTorch export with dynamic batch, height and width
(``real_models/dynhw_cnn.ts_op17_dynhw.onnx``, written by ``real_models/make_dynamic.py``).
Sizes include odd ones and ones that are not a multiple of the strides.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import vtaforge.compiler.quantize  # noqa: F401 - the module, not the function of that name
from vtaforge.compiler.dynamic import compile_dynamic, declared_input_shapes
from vtaforge.compiler.errors import CompileError
from vtaforge.compiler.reference import run_quantized
from vtaforge.runtime.fsim import FsimDevice
from vtaforge.runtime.shapes import ShapeCache, ShapeRunner

ort = pytest.importorskip("onnxruntime")

TORCH_MODEL = Path(__file__).parent / "real_models" / "dynhw_cnn.ts_op17_dynhw.onnx"
SIZES = [(16, 16), (9, 13), (17, 23), (12, 7)]


def _helper_model(gap: bool = True, seed: int = 0):
    """input [1,3,H,W] -> Conv 3x3/1 pad 1 (8) -> Relu -> Conv 3x3/2 pad 1 (16) -> Relu -> a;
    Conv 3x3/1 pad 1 (16) on a -> Add(a, .) -> Relu -> MaxPool 2x2/2 -> (GlobalAveragePool
    -> Flatten -> Gemm 16->10 | the feature map [1,16,H',W'])."""
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(seed)

    def init(name, shape, scale):
        return numpy_helper.from_array((rng.standard_normal(shape) * scale).astype(np.float32),
                                       name)

    inits = [init("w1", (8, 3, 3, 3), 0.3), init("b1", (8,), 0.1),
             init("w2", (16, 8, 3, 3), 0.15), init("b2", (16,), 0.1),
             init("w3", (16, 16, 3, 3), 0.1), init("b3", (16,), 0.1)]
    nodes = [
        helper.make_node("Conv", ["input", "w1", "b1"], ["c1"], kernel_shape=[3, 3],
                         pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c1"], ["r1"]),
        helper.make_node("Conv", ["r1", "w2", "b2"], ["c2"], kernel_shape=[3, 3],
                         pads=[1, 1, 1, 1], strides=[2, 2]),
        helper.make_node("Relu", ["c2"], ["a"]),
        helper.make_node("Conv", ["a", "w3", "b3"], ["c3"], kernel_shape=[3, 3],
                         pads=[1, 1, 1, 1]),
        helper.make_node("Add", ["a", "c3"], ["s"]),
        helper.make_node("Relu", ["s"], ["r"]),
        helper.make_node("MaxPool", ["r"], ["p" if gap else "out"], kernel_shape=[2, 2],
                         strides=[2, 2]),
    ]
    if gap:
        inits += [init("w4", (10, 16), 0.2), init("b4", (10,), 0.1)]
        nodes += [helper.make_node("GlobalAveragePool", ["p"], ["g"]),
                  helper.make_node("Flatten", ["g"], ["f"], axis=1),
                  helper.make_node("Gemm", ["f", "w4", "b4"], ["out"], transB=1)]
        out = helper.make_tensor_value_info("out", TensorProto.FLOAT, [1, 10])
    else:
        out = helper.make_tensor_value_info("out", TensorProto.FLOAT, [1, 16, "Ho", "Wo"])
    g = helper.make_graph(
        nodes, "dynhw_helper",
        [helper.make_tensor_value_info("input", TensorProto.FLOAT, [1, 3, "H", "W"])],
        [out], inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    return m


def _calib(rng, sizes, n=8):
    return [rng.standard_normal((n, 3, h, w)).astype(np.float32) for h, w in sizes]


def _check_at(runner, sess, x, *, tol=0.06):
    """Run ``x`` through the runner; every VTA step's output equals the integer reference
    on the specialised graph bit for bit, and the output is within ``tol`` (relative to
    the float output's range; measured: at most 0.035) of onnxruntime."""
    got = runner.run(x, keep=True)
    cm = runner.compiled(x)
    assert cm.meta["input_shape"] == (tuple(x.shape[1:]),)
    ref = run_quantized(cm.qgraph, {cm.inputs[0]: x}, keep_all=True)
    vta = [s for s in cm.steps if s.target == "vta"]
    assert vta, cm.placement_table()
    for s in vta:
        np.testing.assert_array_equal(got[s.outputs[0]], ref[s.outputs[0]], err_msg=s.name)
    out = cm.outputs[0]
    np.testing.assert_array_equal(got[out], ref[out])
    fl = sess.run(None, {sess.get_inputs()[0].name: x})[0]
    assert got[out].shape == fl.shape
    err = float(np.abs(got[out] - fl).max())
    assert err <= tol * float(np.abs(fl).max()), (x.shape, err, float(np.abs(fl).max()))
    return cm


@pytest.mark.parametrize("gap", [True, False], ids=["gap", "fmap"])
def test_helper_net_one_compile_every_size_fsim(gap, monkeypatch):
    m = _helper_model(gap)
    rng = np.random.default_rng(1)
    calls = []
    dmod = sys.modules["vtaforge.compiler.dynamic"]      # the caller's binding
    real = dmod.calibrate
    monkeypatch.setattr(dmod, "calibrate",
                        lambda *a, **k: calls.append(1) or real(*a, **k))
    dm = compile_dynamic(m, _calib(rng, [(16, 16), (11, 13)]), "tiny")
    assert len(calls) == 2 and dm.symbolic                  # one calibration run per size
    assert dm.input_dims == {"input": (1, 3, None, None)}
    sess = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"])
    with ShapeRunner(dm, FsimDevice(dm.config, mem_bytes=32 << 20)) as runner:
        tilings = set()
        for h, w in SIZES + [(16, 16)]:
            cm = _check_at(runner, sess, rng.standard_normal((1, 3, h, w)).astype(np.float32))
            tilings.add(tuple(s.layouts["y"].shape for s in cm.steps if s.target == "vta"))
        assert len(calls) == 2                              # specialising never calibrates
        st = runner.stats
        assert (st.misses, st.hits, st.evictions, st.failures) == (len(SIZES), 1, 0, 0)
        assert st.specialise_seconds > 0 and len(tilings) == len(SIZES)
        assert runner.memory_report()["constants_shared"] > 0   # weights copied once


def test_calibration_at_several_sizes_takes_the_largest_exp():
    """Exps are per tensor: calibrating at two sizes gives, per tensor, the larger of the
    exps each size alone gives (the max statistic: the exp of the overall max)."""
    rng = np.random.default_rng(9)
    a = rng.standard_normal((4, 3, 16, 16)).astype(np.float32)
    b = 3 * rng.standard_normal((4, 3, 9, 13)).astype(np.float32)    # a wider range
    m = _helper_model()
    ea = compile_dynamic(m, a, "tiny").exps
    eb = compile_dynamic(m, b, "tiny").exps
    both = compile_dynamic(m, [a, b], "tiny")
    assert set(ea) == set(eb) == set(both.exps)
    assert both.exps == {t: max(ea[t], eb[t]) for t in ea}
    assert ea != eb and both.calib_shapes == [((3, 16, 16),), ((3, 9, 13),)]


def test_torch_export_dynamic_axes_fsim():
    dims = declared_input_shapes(__import__("onnx").load(str(TORCH_MODEL)))
    assert dims == {"input": (None, 3, None, None)}
    rng = np.random.default_rng(2)
    dm = compile_dynamic(str(TORCH_MODEL), _calib(rng, [(16, 16)], n=16), "tiny")
    sess = ort.InferenceSession(str(TORCH_MODEL), providers=["CPUExecutionProvider"])
    with ShapeRunner(dm, FsimDevice(dm.config, mem_bytes=32 << 20)) as runner:
        for (h, w), n in zip(SIZES + [(5, 5)], (1, 2, 1, 3, 1)):   # batch symbolic too
            _check_at(runner, sess, rng.standard_normal((n, 3, h, w)).astype(np.float32))
        assert runner.stats.misses == len(SIZES) + 1


def test_shape_cache_eviction_frees_device_memory():
    dm = compile_dynamic(_helper_model(), _calib(np.random.default_rng(3), [(12, 12)]), "tiny")
    rng = np.random.default_rng(4)
    xs = {hw: rng.standard_normal((1, 3) + hw).astype(np.float32)
          for hw in [(8, 8), (9, 11), (13, 10)]}
    dev = FsimDevice(dm.config, mem_bytes=32 << 20)
    runner = ShapeRunner(dm, dev, capacity=2)
    a, b, c = xs
    for hw in (a, b, a, c, b):           # a b: misses; a: hit; c evicts b; b evicts a
        y = runner.run(xs[hw])["out"]
        np.testing.assert_array_equal(
            y, run_quantized(runner.compiled(xs[hw]).qgraph, {"input": xs[hw]})["out"])
    st = runner.stats
    assert (st.misses, st.hits, st.evictions) == (4, 1, 2)
    assert runner.cache.keys() == [((3,) + c,), ((3,) + b,)]
    assert st.per_key[((3,) + a,)] == {"specialise_s": st.per_key[((3,) + a,)]["specialise_s"],
                                       "hits": 1, "misses": 1}
    # what the two cached shapes hold equals what a fresh runner with just them holds
    held = sum(dev.allocator.live.values())
    dev2 = FsimDevice(dm.config, mem_bytes=32 << 20)
    fresh = ShapeRunner(dm, dev2, capacity=2)
    for hw in (c, b):
        fresh.run(xs[hw])
    assert held == sum(dev2.allocator.live.values())
    runner.close()
    fresh.close()
    assert dev.allocator.live == {} and dev2.allocator.live == {}   # nothing leaked
    # without sharing, every shape holds its own copy of the weights
    dev3 = FsimDevice(dm.config, mem_bytes=32 << 20)
    unshared = ShapeRunner(dm, dev3, capacity=2, share_constants=False)
    for hw in (c, b):
        unshared.run(xs[hw])
    assert sum(dev3.allocator.live.values()) > held
    unshared.close()


def test_shape_cache_lru_and_capacity():
    made = []
    evicted = []
    c = ShapeCache(2, on_evict=lambda k, v: evicted.append(k))
    for k in "abacb":
        c.get(k, lambda k: made.append(k) or k.upper())
    assert made == ["a", "b", "c", "b"] and evicted == ["b", "a"]
    assert (c.stats.hits, c.stats.misses, c.stats.evictions) == (1, 4, 2)
    with pytest.raises(RuntimeError):
        c.get("z", lambda k: (_ for _ in ()).throw(RuntimeError("no")))
    assert c.stats.failures == 1 and "z" not in c and len(c) == 2
    with pytest.raises(ValueError, match=r"capacity must be an int >= 1, got 0"):
        ShapeCache(0)


def test_bad_sizes_one_clear_error():
    dm = compile_dynamic(_helper_model(), _calib(np.random.default_rng(5), [(12, 12)]), "tiny")
    runner = ShapeRunner(dm, FsimDevice(dm.config, mem_bytes=16 << 20))
    x = np.zeros((1, 3, 1, 1), np.float32)       # 1x1 -> conv/2 -> 1x1: the 2x2 pool cannot
    with pytest.raises(CompileError, match=r"^input shape input \[1x3x1x1\]: node 'MaxPool_7' "
                       r"\(MaxPool\): kernel 2x2 larger than the padded input 1x1$"):
        runner.run(x)
    assert runner.stats.failures == 1 and len(runner.cache) == 0
    with pytest.raises(CompileError, match=r"input 'input' has shape \[1, 4, 8, 8\], the model "
                       r"takes 1x3x\?x\?"):
        runner.run(np.zeros((1, 4, 8, 8), np.float32))
    with pytest.raises(CompileError, match=r"has shape \[1, 3, 8\], the model takes"):
        runner.run(np.zeros((1, 3, 8), np.float32))
    # the smallest size that works still runs
    runner.run(np.ones((1, 3, 3, 3), np.float32))      # 3x3 -> 2x2 -> pool 1x1
    runner.close()
    with pytest.raises(CompileError, match=r"calibration data: input shape input \[\?x3x1x1\]: "
                       r"node 'MaxPool_7'"):
        compile_dynamic(_helper_model(), np.zeros((2, 3, 1, 1), np.float32), "tiny")


def _cli(*args) -> subprocess.CompletedProcess:
    code = f"from vtaforge.cli import main\nmain({list(args)!r})"
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=300)


def test_cli_run_several_sizes(tmp_path):
    rng = np.random.default_rng(6)
    paths = []
    for i, (h, w) in enumerate([(16, 16), (9, 13), (17, 23), (16, 16)]):
        p = tmp_path / f"x{i}.npy"
        np.save(p, rng.standard_normal((1, 3, h, w)).astype(np.float32))
        paths += ["--input", str(p)]
    r = _cli("run", "--model", str(TORCH_MODEL), *paths, "--config", "tiny", "--cache-size", "2")
    assert r.returncode == 0, r.stderr
    out = r.stdout
    assert "compiled once" in out and "3x16x16, 3x9x13, 3x17x23" in out
    assert out.count("(new shape, specialised in") == 4 and "cached shape" not in out
    assert "shape cache: 0 hit(s), 4 miss(es), 2 eviction(s), 0 failure(s), capacity 2" in out
    r = _cli("run", "--model", str(TORCH_MODEL), *paths, "--config", "tiny")
    assert r.returncode == 0, r.stderr
    assert r.stdout.count("(new shape") == 3 and r.stdout.count("(cached shape)") == 1
    assert "shape cache: 1 hit(s), 3 miss(es), 0 eviction(s)" in r.stdout


def test_cli_run_several_sizes_errors(tmp_path):
    good, bad = tmp_path / "good.npy", tmp_path / "bad.npy"
    np.save(good, np.ones((1, 3, 8, 8), np.float32))
    np.save(bad, np.ones((1, 3, 1, 1), np.float32))
    model = tmp_path / "m.onnx"
    model.write_bytes(_helper_model().SerializeToString())
    base = ["run", "--model", str(model), "--config", "tiny"]
    for args, msg in [
        (["--input", str(good), "--input", str(bad), "--calibrate", str(good)],
         "error: input shape input [1x3x1x1]: node 'MaxPool_7' (MaxPool): kernel 2x2 larger"),
        (["--input", str(good), "--input", str(good), "--output", str(tmp_path / "y.npy")],
         "error: --output takes one --input; got 2"),
        (["--input", str(good), "--input", str(tmp_path / "none.npy")],
         "error: cannot read input"),
    ]:
        r = _cli(*base, *args)
        lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
        assert r.returncode == 2 and len(lines) == 1 and lines[0].startswith(msg), r.stderr


# --------------------------------------------------------------------------- rtl

@pytest.mark.rtl
@pytest.mark.parametrize("which", ["helper", "torch"])
def test_dynamic_sizes_rtl_equal_reference(which):
    rtl = pytest.importorskip("vtaforge.runtime.rtl")
    rng = np.random.default_rng(7)
    if which == "helper":
        m = _helper_model()
        sess = ort.InferenceSession(m.SerializeToString(), providers=["CPUExecutionProvider"])
    else:
        m = str(TORCH_MODEL)
        sess = ort.InferenceSession(m, providers=["CPUExecutionProvider"])
    dm = compile_dynamic(m, _calib(rng, [(10, 10)]), "tiny")
    dev = rtl.RtlDevice(dm.config, 16 << 20, progress=False)
    try:
        with ShapeRunner(dm, dev, capacity=2) as runner:
            for h, w in [(8, 8), (9, 7), (11, 13)]:
                _check_at(runner, sess, rng.standard_normal((1, 3, h, w)).astype(np.float32))
            assert runner.stats.misses == 3 and runner.stats.evictions == 1
    finally:
        dev.close()


def test_cli_run_several_inputs_vtapkg(tmp_path):
    """A ``.vtapkg`` has one static H x W: several inputs of that shape run through one
    executor (batch sizes may differ); another size is the executor's one-line error."""
    from vtaforge.compiler.compile import compile_model
    from vtaforge.runtime.artifact import save_artifact

    rng = np.random.default_rng(8)
    cm = compile_model(str(TORCH_MODEL), rng.standard_normal((4, 3, 12, 12)).astype(np.float32),
                       "tiny")
    pkg = tmp_path / "m.vtapkg"
    save_artifact(cm, pkg)
    a, b, c = tmp_path / "a.npy", tmp_path / "b.npy", tmp_path / "c.npy"
    np.save(a, rng.standard_normal((1, 3, 12, 12)).astype(np.float32))
    np.save(b, rng.standard_normal((3, 3, 12, 12)).astype(np.float32))
    np.save(c, rng.standard_normal((1, 3, 9, 9)).astype(np.float32))
    r = _cli("run", "--model", str(pkg), "--input", str(a), "--input", str(b), "--config", "tiny")
    assert r.returncode == 0, r.stderr
    assert "a.npy: input 1x3x12x12 -> output [1, 10]" in r.stdout
    assert "b.npy: input 3x3x12x12 -> output [3, 10]" in r.stdout
    r = _cli("run", "--model", str(pkg), "--input", str(a), "--input", str(c), "--config", "tiny")
    lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
    assert r.returncode == 2 and len(lines) == 1, r.stderr
    assert lines[0].startswith("error: input 'input' has shape [1, 3, 9, 9], expected"), lines


def _one_error(r, msg):
    lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
    assert r.returncode == 2 and len(lines) == 1, r.stderr
    assert lines[0].startswith("error: ") and msg in lines[0], lines
    assert "internal error" not in lines[0] and "Traceback" not in r.stderr


def test_cli_run_npz_batch_on_a_fixed_batch_model(tmp_path):
    """A model declared ``[1, 3, H, W]`` runs a batch of 3 one sample at a time, from an
    ``.npy`` or from an ``.npz`` alike (the ``.npz`` was an internal TypeError), on the
    single-input and the several-input paths."""
    rng = np.random.default_rng(10)
    x = rng.standard_normal((3, 3, 8, 8)).astype(np.float32)
    model = tmp_path / "m.onnx"
    model.write_bytes(_helper_model().SerializeToString())
    np.save(tmp_path / "x.npy", x)
    np.savez(tmp_path / "x.npz", input=x)
    base = ["run", "--model", str(model), "--config", "tiny", "--calibrate", str(tmp_path / "x.npy")]
    ys = []
    for name in ("x.npy", "x.npz"):
        out = tmp_path / f"y_{name}.npy"
        r = _cli(*base, "--input", str(tmp_path / name), "--output", str(out))
        assert r.returncode == 0, r.stderr
        ys.append(np.load(out))
    assert ys[0].shape == (3, 10) and np.array_equal(ys[0], ys[1])
    r = _cli(*base, "--input", str(tmp_path / "x.npz"), "--input", str(tmp_path / "x.npy"))
    assert r.returncode == 0, r.stderr
    assert r.stdout.count("-> out [3, 10]") == 2, r.stdout


def test_cli_run_empty_batch_is_one_error(tmp_path):
    """An input with no samples (calibrated elsewhere) was an internal IndexError."""
    good, empty = tmp_path / "good.npy", tmp_path / "empty.npy"
    np.save(good, np.ones((1, 3, 8, 8), np.float32))
    np.save(empty, np.ones((0, 3, 8, 8), np.float32))
    model = tmp_path / "m.onnx"
    model.write_bytes(_helper_model().SerializeToString())
    base = ["run", "--model", str(model), "--config", "tiny", "--calibrate", str(good)]
    for inputs in ([empty], [good, empty]):
        r = _cli(*base, *[a for p in inputs for a in ("--input", str(p))])
        _one_error(r, "has shape [0, 3, 8, 8]")


def test_cli_run_several_inputs_errors_name_the_file(tmp_path):
    """Inputs of one shape are calibrated together; a bad one is still named by its file
    (it was 'input #1', the merged set), and an array for a two-input model says so."""
    rng = np.random.default_rng(11)
    model = tmp_path / "m.onnx"
    model.write_bytes(_helper_model().SerializeToString())
    a, b, c = (tmp_path / f"{k}.npy" for k in "abc")
    np.save(a, rng.standard_normal((1, 3, 8, 8)).astype(np.float32))
    x = rng.standard_normal((1, 3, 8, 8)).astype(np.float32)
    x[0, 1, 2, 3] = np.nan
    np.save(b, x)
    np.save(c, rng.standard_normal((1, 4, 8, 8)).astype(np.float32))
    base = ["run", "--model", str(model), "--config", "tiny", "--input", str(a)]
    _one_error(_cli(*base, "--input", str(a), "--input", str(b)),
               f"error: input {str(b)!r} for 'input' contains NaN or infinity (1 value(s))")
    _one_error(_cli(*base, "--input", str(c)),
               f"error: input {str(c)!r} for 'input' has shape [1, 4, 8, 8]")
    with pytest.raises(CompileError, match=r"^x is one array; the model has 2 inputs"):
        compile_dynamic(_two_input_model(), [np.ones((1, 3, 8, 8), np.float32)], "tiny",
                        calib_label=["x"])


def _two_input_model():
    """inputs a, b [N, 3, H, W] -> Conv(a) + Conv(b) -> Relu: two symbolic inputs."""
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(12)
    inits = [numpy_helper.from_array((rng.standard_normal(s) * 0.3).astype(np.float32), n)
             for n, s in [("w1", (16, 3, 3, 3)), ("b1", (16,)), ("w2", (16, 3, 3, 3)),
                          ("b2", (16,))]]
    nodes = [helper.make_node("Conv", ["a", "w1", "b1"], ["c1"], kernel_shape=[3, 3],
                              pads=[1, 1, 1, 1]),
             helper.make_node("Conv", ["b", "w2", "b2"], ["c2"], kernel_shape=[3, 3],
                              pads=[1, 1, 1, 1]),
             helper.make_node("Add", ["c1", "c2"], ["s"]),
             helper.make_node("Relu", ["s"], ["out"])]
    vi = helper.make_tensor_value_info
    g = helper.make_graph(nodes, "two_in", [vi("a", TensorProto.FLOAT, ["N", 3, "H", "W"]),
                                            vi("b", TensorProto.FLOAT, ["N", 3, "H", "W"])],
                          [vi("out", TensorProto.FLOAT, ["N", 16, "H", "W"])], inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    return m


def test_two_symbolic_inputs_every_size_bit_exact():
    """Two inputs with symbolic N, H, W, from .npz-style dicts at two sizes: each size
    equals the integer reference on its specialised graph."""
    rng = np.random.default_rng(13)

    def feeds(n, h, w):
        return {k: rng.standard_normal((n, 3, h, w)).astype(np.float32) for k in "ab"}

    dm = compile_dynamic(_two_input_model(), [feeds(2, 8, 8), feeds(2, 9, 7)], "tiny")
    assert dm.input_dims == {"a": (None, 3, None, None), "b": (None, 3, None, None)}
    with ShapeRunner(dm, FsimDevice(dm.config, mem_bytes=16 << 20)) as runner:
        for n, h, w in [(1, 8, 8), (3, 9, 7), (2, 5, 11)]:
            f = feeds(n, h, w)
            got = runner.run(f)["out"]
            ref = run_quantized(runner.compiled(f).qgraph, f)["out"]
            np.testing.assert_array_equal(got, ref)
        with pytest.raises(CompileError, match="do not broadcast"):
            runner.run({"a": f["a"], "b": np.ones((2, 3, 5, 10), np.float32)})


def test_cli_run_npz_with_an_unknown_name_is_one_error(tmp_path):
    """With --calibrate, an .npz array under a name the model lacks was ignored (without
    it calibration refused it): refused on both paths, before anything runs."""
    rng = np.random.default_rng(14)
    model = tmp_path / "m.onnx"
    model.write_bytes(_helper_model().SerializeToString())
    good, bad = tmp_path / "good.npy", tmp_path / "bad.npz"
    np.save(good, rng.standard_normal((1, 3, 8, 8)).astype(np.float32))
    np.savez(bad, input=rng.standard_normal((1, 3, 8, 8)).astype(np.float32),
             inptu=rng.standard_normal((1, 3, 8, 8)).astype(np.float32))
    base = ["run", "--model", str(model), "--config", "tiny", "--calibrate", str(good)]
    msg = f"error: input {str(bad)!r} has unknown input(s) ['inptu']; the model's inputs: ['input']"
    for inputs in ([bad], [good, bad]):
        r = _cli(*base, *[a for p in inputs for a in ("--input", str(p))])
        _one_error(r, msg)
        assert "->" not in r.stdout, r.stdout          # refused before any input ran


def test_calibration_shape_checked_against_the_declaration():
    """A zero spatial dim in the calibration data was imported and failed deep in a conv
    ('kernel 3x3 larger than the padded input 2x7'); a wrong channel count was reported
    against the shape the import inferred from the data.  Both are checked against the
    declaration first."""
    m = _helper_model()
    with pytest.raises(CompileError, match=r"^calibration data for 'input' has shape "
                       r"\[2, 3, 0, 5\]: dims after the batch must be >= 1$"):
        compile_dynamic(m, np.ones((2, 3, 0, 5), np.float32), "tiny")
    with pytest.raises(CompileError, match=r"^cal #2 for 'input' has shape \[1, 4, 8, 8\], "
                       r"expected 1x3x\?x\? \(any number of samples first\)$"):
        compile_dynamic(m, [np.ones((1, 3, 8, 8), np.float32), np.ones((1, 4, 8, 8), np.float32)],
                        "tiny", calib_label="cal")
