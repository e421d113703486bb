"""Row bands under a memory budget (``RowBands``, ``compiler.lower_conv.lower_conv_bands``,
``runtime/dtr.py``): a conv whose input the host packs runs one band of output rows at a
time when its whole working set does not fit the budget.

Oracles: the unbudgeted executor run and the compiler's integer reference
(``run_quantized``), bit for bit; working sets and band counts derived here from the slot
layouts' fields (channels, rows, columns, batch, channel block); the full ``im2col`` for a
row range of it.
"""

from __future__ import annotations

import json

import numpy as np
import onnx
import pytest
from click.testing import CliRunner
from onnx import TensorProto, helper, numpy_helper

from vtaforge.cli import main
from vtaforge.compiler.compile import compile_model
from vtaforge.compiler.lower_conv import band_rows
from vtaforge.compiler.reference import run_quantized
from vtaforge.runtime import dtr
from vtaforge.runtime.artifact import ArtifactError, load_artifact, save_artifact
from vtaforge.runtime.cpu_ops import im2col
from vtaforge.runtime.device import DeviceError
from vtaforge.runtime.executor import Executor
from vtaforge.runtime.fsim import FsimDevice


def _model(kind: str):
    """``"stem"``: a 7x7/2 pad-3 conv 3 -> 16 channels (im2col on the host) + ReLU, then a
    2x2 max-pool, on ``[N, 3, 32, 32]`` (16 output rows); ``"stem13"``: the same on
    ``[N, 3, 26, 26]`` (13 output rows: bands with a shorter last band); ``"1x1"``: a 1x1
    conv 16 -> 16 + ReLU fed by the graph input ``[N, 16, 16, 16]`` (the host packs it)."""
    rng = np.random.default_rng(7)
    cin, k, s, p, size = {"stem": (3, 7, 2, 3, 32), "stem13": (3, 7, 2, 3, 26),
                          "1x1": (16, 1, 1, 0, 16)}[kind]
    w = rng.normal(0, np.sqrt(2 / (cin * k * k)), (16, cin, k, k)).astype(np.float32)
    b = rng.normal(0, 0.1, 16).astype(np.float32)
    nodes = [helper.make_node("Conv", ["input", "w", "b"], ["c"], kernel_shape=[k, k],
                              strides=[s, s], pads=[p] * 4),
             helper.make_node("Relu", ["c"], ["r" if kind != "1x1" else "y"])]
    ho = (size + 2 * p - k) // s + 1
    if kind != "1x1":
        nodes.append(helper.make_node("MaxPool", ["r"], ["y"], kernel_shape=[2, 2],
                                      strides=[2, 2]))
        ho //= 2
    g = helper.make_graph(
        nodes, kind.replace("1x1", "pointwise"), [helper.make_tensor_value_info("input", TensorProto.FLOAT,
                                                    ["N", cin, size, size])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 16, ho, ho])],
        [numpy_helper.from_array(w, "w"), numpy_helper.from_array(b, "b")])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])
    m.ir_version = 8
    return m, cin, size


@pytest.fixture(scope="module", params=["stem", "stem13", "1x1"])
def compiled(request):
    m, cin, size = _model(request.param)
    x = np.random.default_rng(3).standard_normal((2, cin, size, size)).astype(np.float32)
    return request.param, m, compile_model(m, x, "pynq"), x


def _al(n: int, al: int) -> int:
    return -(-n // al) * al


def _layout_bytes(lay, rows=None):
    """Bytes of one batch block of a packed slot (``rows`` of it), from its fields."""
    c, h, w = lay.shape
    if lay.im2col is not None:
        kh, kw, sh, sw, pt, pl, pb, pr = lay.im2col
        c, h, w = c * kh * kw, (h + pt + pb - kh) // sh + 1, (w + pl + pr - kw) // sw + 1
    return -(-c // lay.cblk) * lay.cblk * (h if rows is None else rows) * w * lay.batch


def _conv(cm):
    st = [s for s in cm.steps if s.target == "vta"][0]
    assert st.op == "qconv2d"
    return st


def test_bands_offered(compiled):
    kind, _, cm, _ = compiled
    st = _conv(cm)
    ho = st.layouts["y"].shape[1]
    assert [b.rows for b in st.bands] == band_rows(ho)
    assert band_rows(16) == [8, 4, 2, 1] and band_rows(13) == [7, 4, 2, 1]
    assert (st.layouts["x"].im2col is not None) == (kind != "1x1")
    for b in st.bands:
        assert (b.tail is None) == (ho % b.rows == 0)
        spans = b.spans(ho)
        assert spans[0][0] == 0 and spans[-1][1] == ho and len(spans) == -(-ho // b.rows)
        assert all(a1 == b0 for (_, a1), (b0, _) in zip(spans, spans[1:]))
    if kind == "stem13":
        assert [b.tail is not None for b in st.bands] == [True, True, True, False]
    odd = band_rows(7)                 # 7 rows: 4 + 3, 2 x 3 + 1, 1 x 7
    assert odd == [4, 2, 1]
    # a VTA step fed in place (the max-pool) and a dense layer get none
    assert all(not s.bands for s in cm.steps if s is not st)


def test_im2col_rows_is_a_slice_of_the_full_patch_tensor():
    x = np.random.default_rng(0).integers(-128, 128, (2, 3, 11, 9)).astype(np.int8)
    full = im2col(x, (7, 5), (2, 1), (3, 2, 3, 2))
    for r0, r1 in [(0, 1), (0, 3), (2, 6), (5, 6)]:
        assert np.array_equal(im2col(x, (7, 5), (2, 1), (3, 2, 3, 2), rows=(r0, r1)),
                              full[:, :, r0:r1])
    with pytest.raises(ValueError, match="not a band of the 6 output rows"):
        im2col(x, (7, 5), (2, 1), (3, 2, 3, 2), rows=(4, 7))


def _expected_rows(st, nblk, budget, al):
    """The band height the policy should pick for the first step (nothing else live):
    whole when it fits, else the fewest bands that fit."""
    y = _al(nblk * _layout_bytes(st.layouts["y"]), al)
    if y + _al(nblk * _layout_bytes(st.layouts["x"]), al) <= budget:
        return 0
    for b in st.bands:
        if y + _al(nblk * _layout_bytes(st.layouts["x"], b.rows), al) <= budget:
            return b.rows
    return None


@pytest.mark.parametrize("n", [2, 1])
def test_budget_below_the_step_runs_in_bands_bit_exact(compiled, n):
    kind, _, cm, x = compiled
    x = x[:n]
    st = _conv(cm)
    al = cm.config.dram_alignment
    ref = Executor(cm, FsimDevice(cm.config)).run(x, keep=True)
    quant = run_quantized(cm.qgraph, {"input": x}, keep_all=True)
    y = _al(n * _layout_bytes(st.layouts["y"]), al)
    ho = st.layouts["y"].shape[1]
    # the whole step's working set, then exactly each band variant's (the tightest fit)
    budgets = [y + _al(n * _layout_bytes(st.layouts["x"]), al)] + [
        y + _al(n * _layout_bytes(st.layouts["x"], b.rows), al) for b in st.bands]
    seen = []
    for budget in budgets:
        want = _expected_rows(st, n, budget, al)
        ex = Executor(cm, FsimDevice(cm.config), memory_budget=budget)
        out = ex.run(x, keep=True)
        for k in ("y", st.outputs[0]):
            assert np.array_equal(out[k], ref[k]), (budget, k)
        assert np.array_equal(out[st.outputs[0]], quant[st.outputs[0]])
        r = ex.dtr_report()
        assert r["peak"] == budget and r["arena"] <= budget
        assert r["evictions"] == 0 and r["recomputes"] == 0
        assert r["bands"] == ({} if not want else {st.name: -(-ho // want)}), (budget, r)
        assert r["gemm_uops"] == r["gemm_uops_base"]     # the same MACs, banded or not
        seen.append(want)
        ex.close()
    assert seen == [0] + [b.rows for b in st.bands]


def test_budget_below_the_banded_minimum_is_refused_with_the_figure(compiled):
    kind, _, cm, x = compiled
    st = _conv(cm)
    al = cm.config.dram_alignment
    lo = (_al(2 * _layout_bytes(st.layouts["y"]), al)
          + _al(2 * _layout_bytes(st.layouts["x"], 1), al))
    nodes = dtr.nodes_from_model(cm, 2)
    assert dtr.min_budget(nodes, al) == lo
    ho = st.layouts["y"].shape[1]
    with pytest.raises(DeviceError, match=rf"budget {lo - 1} bytes is below the {lo} bytes "
                                          rf"that step '{st.name}' alone needs in {ho} row "
                                          rf"bands of 1 row "):
        Executor(cm, FsimDevice(cm.config), memory_budget=lo - 1).run(x)
    ex = Executor(cm, FsimDevice(cm.config), memory_budget=lo)      # the minimum itself
    assert np.array_equal(ex.run(x)["y"], Executor(cm, FsimDevice(cm.config)).run(x)["y"])
    assert ex.dtr_report()["bands"] == {st.name: ho}


def test_without_bands_the_whole_step_is_the_minimum():
    m, cin, size = _model("stem")
    x = np.random.default_rng(3).standard_normal((1, cin, size, size)).astype(np.float32)
    cm = compile_model(m, x, "pynq", row_bands=False)
    st = _conv(cm)
    assert st.bands == []
    al = cm.config.dram_alignment
    whole = _al(_layout_bytes(st.layouts["x"]), al) + _al(_layout_bytes(st.layouts["y"]), al)
    assert dtr.min_budget(dtr.nodes_from_model(cm, 1), al) == whole
    with pytest.raises(DeviceError, match=rf"below the {whole} bytes that step "
                                          rf"'{st.name}' alone needs \(its"):
        Executor(cm, FsimDevice(cm.config), memory_budget=whole - 1)


def test_artifact_keeps_the_bands_and_reads_version_3(compiled, tmp_path):
    kind, _, cm, x = compiled
    p = tmp_path / "m.vtapkg"
    save_artifact(cm, p)
    back = load_artifact(p, cm.config)
    st, st2 = _conv(cm), _conv(back)
    assert [b.rows for b in st2.bands] == [b.rows for b in st.bands]
    al = cm.config.dram_alignment
    budget = (_al(2 * _layout_bytes(st.layouts["y"]), al)          # 2 bands fit, whole not
              + _al(2 * _layout_bytes(st.layouts["x"], st.bands[0].rows), al))
    a = Executor(back, FsimDevice(cm.config), memory_budget=budget)
    assert np.array_equal(a.run(x)["y"], Executor(cm, FsimDevice(cm.config)).run(x)["y"])
    assert a.dtr_report()["bands"] == {st.name: 2}
    # a version-3 artifact (no bands) still loads and runs whole
    with np.load(p) as z:
        arrays = {k: z[k] for k in z.files}
    man = json.loads(str(arrays["manifest"]))
    man["version"] = 3
    for s in man["model"]["steps"]:
        for b in s.pop("bands", []):
            for t in (b["trace"], b["tail"]):
                for k in [k for k in man["arrays"] if t and k.startswith(f"k/{t['uid']}/")]:
                    del man["arrays"][k]
                    del arrays[k]
    arrays["manifest"] = np.array(json.dumps(man))
    old = tmp_path / "v3.vtapkg"
    with open(old, "wb") as f:
        np.savez(f, **arrays)
    v3 = load_artifact(old, cm.config)
    assert _conv(v3).bands == []
    assert np.array_equal(Executor(v3, FsimDevice(cm.config)).run(x)["y"],
                          Executor(cm, FsimDevice(cm.config)).run(x)["y"])
    man["version"] = 2
    arrays["manifest"] = np.array(json.dumps(man))
    with open(old, "wb") as f:
        np.savez(f, **arrays)
    with pytest.raises(ArtifactError, match="version 2, this runtime reads version 4"):
        load_artifact(old, cm.config)


@pytest.fixture(scope="module")
def stem_files(tmp_path_factory):
    d = tmp_path_factory.mktemp("stem")
    m, cin, size = _model("stem")
    onnx.save(m, str(d / "stem.onnx"))
    np.save(d / "x.npy", np.random.default_rng(5).standard_normal((1, cin, size, size))
            .astype(np.float32))
    return d


def _cli(d, *extra):
    return CliRunner().invoke(main, ["run", "--model", str(d / "stem.onnx"), "--input",
                                     str(d / "x.npy"), *extra])


def test_cli_budget_below_the_stem_runs_in_bands(stem_files):
    d = stem_files
    r0 = _cli(d, "--output", str(d / "y0.npy"))
    assert r0.exit_code == 0, r0.output
    # stem: patch 10 x 16 x 16 x 16 = 40,960 B + output 4,096 B; 16 KiB needs 4 bands
    r1 = _cli(d, "--output", str(d / "y1.npy"), "--memory-budget", "16KiB")
    assert r1.exit_code == 0, r1.output
    line = [ln for ln in r1.output.splitlines() if ln.startswith("memory budget")]
    assert len(line) == 1, r1.output
    assert "memory budget 16,384 B: peak 14,336 B" in line[0], line[0]
    assert "0 eviction(s), 0 recomputed step(s), 1 step(s) in row bands (" in line[0], line[0]
    assert ": 4 bands)" in line[0], line[0]
    assert np.array_equal(np.load(d / "y0.npy"), np.load(d / "y1.npy"))
    r2 = _cli(d, "--memory-budget", "6000")
    assert r2.exit_code != 0 and "Traceback" not in r2.output
    assert "below the 6656 bytes that step" in r2.output and "16 row bands of 1 row" in r2.output


def test_policy_bands_only_when_needed():
    """A (host-fed, 8 B out) ... B (host-packed input 16 B, 8 B out; 2 bands of 8 B or 4
    of 4 B) -> C -> D reads A and C.  32 B: B runs whole beside A; 28 B: in 2 bands, no
    eviction; 20 B: in 4 bands beside A; 16 B: no variant fits beside A, so A is evicted
    and B runs in the fewest bands that fit alone (2, 8 + 8 B), A recomputed for D."""
    from test_dtr import check_schedule

    N = dtr.Node
    bands = ((2, 2, (("x", 8),), 12), (1, 4, (("x", 4),), 14))
    nodes = [N("A", True, 8, (("x", 4),), (), (), 5),
             N("B", True, 8, (("x", 16),), (), (), 10, bands=bands),
             N("C", True, 4, (), (1,), (), 1),
             N("D", True, 4, (), (0, 2), (), 1, output=True)]
    assert dtr.min_budget(nodes) == 16             # D: A + C + D; B alone 8 + 4
    # budget -> (bands, evictions, B's cost, B's band height)
    want = {32: ({}, 0, 10, 0), 28: ({1: 2}, 0, 12, 2), 20: ({1: 4}, 0, 14, 1),
            16: ({1: 2}, 1, 12, 2)}
    for budget, (b, ev, cost_b, rows) in want.items():
        s = dtr.plan(nodes, budget)
        check_schedule(nodes, s, budget)
        assert (s.bands, s.evictions, s.recomputed) == (b, ev, {0: 1} if ev else {}), \
            (budget, s)
        assert s.cost == 5 * (1 + ev) + cost_b + 2, (budget, s.cost)
        assert [a.rows for a in s.actions if a.kind == "run" and a.step == 1] == [rows]
        assert s.peak_bytes <= budget
    with pytest.raises(dtr.BudgetError, match="below the 16 bytes that step 'D'"):
        dtr.plan(nodes, 15)


def test_bands_on_the_pynq_backend():
    """Band buffers and the output's band views through the board backend (fake PYNQ core
    over the functional simulator, caches tracked per allocation): bit-exact against
    fsim unbudgeted."""
    from test_pynq_fake import board as fake_board

    from vtaforge.hw.config import preset

    cfg = preset("tiny")
    m, cin, size = _model("1x1")
    x = np.random.default_rng(4).standard_normal((2, cin, size, size)).astype(np.float32)
    cm = compile_model(m, x, cfg)
    st = _conv(cm)
    al = cfg.dram_alignment
    budget = (_al(2 * _layout_bytes(st.layouts["y"]), al)
              + _al(2 * _layout_bytes(st.layouts["x"], st.bands[1].rows), al))
    ref = Executor(cm, FsimDevice(cfg)).run(x)
    dev, core, mem, log = fake_board(cfg)
    ex = Executor(cm, dev, memory_budget=budget)
    assert np.array_equal(ex.run(x)["y"], ref["y"])
    assert ex.dtr_report()["bands"] == {st.name: len(st.bands[1].spans(16))}
    assert not core.faults


def test_artifact_with_inconsistent_bands_refused(compiled, tmp_path):
    """Found in review: a manifest whose bands do not divide the output height but carry no
    last-band program loaded, and failed later inside the builder."""
    _, _, cm, _ = compiled
    p = tmp_path / "m.vtapkg"
    save_artifact(cm, p)
    with np.load(p) as z:
        arrays = {k: z[k] for k in z.files}
    man = json.loads(str(arrays["manifest"]))
    step = next(s for s in man["model"]["steps"] if s.get("bands"))
    h = _conv(cm).layouts["y"].shape[1]
    b = step["bands"][0]
    if b["tail"] is not None:       # bands that leave a remainder, its program dropped
        b["tail"] = None
    else:                           # bands that divide H made into ones that do not
        b["rows"] = next(r for r in range(2, h) if h % r)
    arrays["manifest"] = np.array(json.dumps(man))
    bad = tmp_path / "bad.vtapkg"
    with open(bad, "wb") as f:
        np.savez(f, **arrays)
    with pytest.raises(ArtifactError, match="last-band program for an output of"):
        load_artifact(bad, cm.config)
