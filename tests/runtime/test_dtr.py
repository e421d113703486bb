"""DTR rematerialization under a device-memory budget (``runtime/dtr.py`` and
``Executor(memory_budget=...)``).

Oracles: the unbudgeted executor run and the compiler's integer reference
(``run_quantized``) for outputs and intermediates, bit for bit; a schedule checker written
here (residency of every input at each run, live bytes and arena placement against the
budget, every step run once in order); hand-derived figures for the policy's choice on a
small chain and for the smallest working sets.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

import numpy as np
import pytest

from vtaforge.compiler.compile import compile_model
from vtaforge.compiler.reference import run_quantized
from vtaforge.compiler.zoo import resnet18
from vtaforge.runtime import dtr
from vtaforge.runtime.device import DeviceError
from vtaforge.runtime.executor import Executor, plan_memory
from vtaforge.runtime.fsim import FsimDevice

_BENCH = Path(__file__).resolve().parents[2] / "bench" / "dtr_budget.py"


def _bench():
    spec = importlib.util.spec_from_file_location("dtr_budget_bench", _BENCH)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def check_schedule(nodes, sched, budget):
    """Replay ``sched`` on ``nodes``: every device input resident when a step runs, live
    bytes and placed buffers within ``budget``, no two live buffers overlapping, every
    model step run exactly once and in order."""
    resident = {}                                    # step -> (offset, size)
    order = []
    for a in sched.actions:
        nd = nodes[a.step]
        if a.kind in ("run", "recompute"):
            if a.kind == "run":
                order.append(a.step)
            if not nd.device:
                assert a.kind == "run"
                continue
            for j in nd.dev_inputs:
                assert j in resident, (a, j)
            new = [(a.offsets[s], a.sizes[s]) for s in a.sizes]
            live = list(resident.values()) + new
            assert sum(z for _, z in live) <= budget
            spans = sorted(live)
            for (o1, z1), (o2, _) in zip(spans, spans[1:]):
                assert o1 + z1 <= o2, (a, spans)
            assert max(o + z for o, z in live) <= budget
            resident[a.step] = (a.offsets["y"], a.sizes["y"])
        elif a.kind == "readback":
            assert a.step in resident
        else:
            assert resident.pop(a.step, None) is not None, a
    assert order == list(range(len(nodes)))


# ---------------------------------------------------------------- the policy alone
def chain():
    """P (host-fed, 4 bytes) feeds A (cheap), B (expensive) and M, 8 bytes each; M -> Y1;
    A + Y1 -> Y2; B + Y2 -> Y3.  Under 24 bytes, when M is computed P, A, B and M (28
    bytes) do not fit and P and M cannot go: one of A and B must, at least its own cost
    again (1 or 50).  Keeping the dead P (P + B + Y1 + A = 24 bytes at Y2) A's recompute
    needs nothing else: the optimum is 1 extra cycle.  Freeing P as soon as it is dead,
    A's recompute needs P again: 1 + 5 = 6."""
    N = dtr.Node
    return [N("P", True, 4, (("x", 4),), (), (), 5),
            N("A", True, 8, (), (0,), (), 1),
            N("B", True, 8, (), (0,), (), 50),
            N("M", True, 8, (), (0,), (), 1),
            N("Y1", True, 4, (), (3,), (), 1),
            N("Y2", True, 4, (), (1, 4), (), 1),
            N("Y3", True, 4, (), (2, 5), (), 1, output=True)]


@pytest.mark.parametrize("heuristic", dtr.HEURISTICS)
def test_chain_evicts_the_cheap_tensor(heuristic):
    nodes = chain()
    s = dtr.plan(nodes, 24, heuristic=heuristic)
    check_schedule(nodes, s, 24)
    assert s.evictions == 1
    assert s.recomputed == {1: 1} and s.keep_dead     # A again, never B
    assert s.cost - s.base_cost == 1
    assert s.peak_bytes <= 24 and s.arena_bytes <= 24
    assert s.free_peak_bytes == 28                    # P + A + B + M with no budget
    eager = dtr._attempt1(nodes, 24, 24, 16, 1, "dtr" if heuristic == "auto" else heuristic,
                          0, False)[0]               # the variant that frees P at once
    assert eager.recomputed == {0: 1, 1: 1} and eager.cost - s.base_cost == 6
    assert dtr.search_optimum(nodes, 24) == (s.base_cost + 1, True)


def test_chain_unbudgeted_and_minimum():
    nodes = chain()
    # working sets: P 8, A/B/M 12, Y1 12, Y2 8+4+4, Y3 8+4+4 -> 16
    assert dtr.min_budget(nodes) == 16
    s = dtr.plan(nodes, 28)
    check_schedule(nodes, s, 28)
    assert (s.evictions, s.recomputes, s.cost) == (0, 0, s.base_cost)
    with pytest.raises(dtr.BudgetError, match=r"budget 15 bytes is below the 16 bytes .*'Y2'"):
        dtr.plan(nodes, 15)
    with pytest.raises(ValueError, match="positive int"):
        dtr.plan(nodes, 0)


def test_recursive_rematerialization():
    """c0 (host-fed) -> c1 -> c2 -> c3 -> c4, each of c2..c4 with a host-packed input too,
    and a long skip c1 + c4.  Under the smallest working set (24 bytes) c1 is evicted at
    c3 and rematerialized for the skip: c0 (dead by then) is recomputed first, then c1."""
    N = dtr.Node
    nodes = [N("c0", True, 8, (("x", 8),), (), (), 3), N("c1", True, 8, (), (0,), (), 3)]
    for k in range(2, 5):
        nodes.append(N(f"c{k}", True, 8, (("w", 8),), (k - 1,), (), 3))
    nodes.append(N("skip_add", True, 8, (), (1, 4), (), 1, output=True))
    assert dtr.min_budget(nodes) == 24
    s = dtr.plan(nodes, 24)
    check_schedule(nodes, s, 24)
    assert s.free_peak_bytes == 32 and s.evictions == 1
    assert s.recomputed == {0: 1, 1: 1}
    rec = [a.step for a in s.actions if a.kind == "recompute"]
    assert rec == [0, 1]
    # c0 cannot stay beside c1 + w + c2 (32 bytes): 3 + 3 is the least any choice costs
    assert dtr.search_optimum(nodes, 24) == (s.base_cost + 6, True)


@pytest.mark.parametrize("text,want", [("3MiB", 3 << 20), ("2.5 MiB", 5 << 19), ("512k", 512 * 1024),
                                       ("3000000", 3000000), ("1.5KB", 1500), ("2GB", 2 * 10 ** 9),
                                       (7, 7)])
def test_parse_bytes(text, want):
    assert dtr.parse_bytes(text) == want


@pytest.mark.parametrize("text", ["0", "1.3B", "x", "3 MiBs", "-1", ""])
def test_parse_bytes_refuses(text):
    with pytest.raises(ValueError, match="byte"):
        dtr.parse_bytes(text)


# ---------------------------------------------------------------- models on fsim
def _band_bytes(lay, rows):
    """Bytes of one batch block of ``rows`` output rows of a conv's packed input (its
    patch tensor for an im2col layout), from the layout's fields."""
    c, _, w = lay.shape
    if lay.im2col is not None:
        kh, kw, _, sw, _, pl, _, pr = lay.im2col
        c, w = c * kh * kw, (w + pl + pr - kw) // sw + 1
    return -(-c // lay.cblk) * lay.cblk * rows * w * lay.batch


def _working_set(cm, nblk):
    """The largest VTA step's device inputs + host-packed inputs (of its thinnest row
    band when it has row bands and the host packs its input) + output, in bytes
    (computed here from the step layouts)."""
    al = cm.config.dram_alignment
    best = 0
    ylay = {s.outputs[0]: s.layouts["y"] for s in cm.steps if s.target == "vta"}
    for s in cm.steps:
        if s.target != "vta":
            continue
        srcs = {}
        for slot, lay in s.layouts.items():
            srcs.setdefault(s.slots[slot] if slot != "y" else "<y>", []).append(lay)
        size = {k: nblk * max(l.block_bytes for l in ls) for k, ls in srcs.items()}
        x = s.slots.get("x")
        if s.bands and ylay.get(x) != s.layouts["x"]:
            size[x] = nblk * min(_band_bytes(s.layouts["x"], b.rows) for b in s.bands)
        best = max(best, sum(-(-v // al) * al for v in size.values()))
    return best


def _run_budgets(cm, x, fractions):
    n = x.shape[0]
    nblk = -(-n // cm.config.BATCH)
    ref_ex = Executor(cm, FsimDevice(cm.config))
    ref = ref_ex.run(x, keep=True)
    quant = run_quantized(cm.qgraph, {cm.inputs[0]: x}, keep_all=True)
    peak = plan_memory(cm, nblk, cm.config.dram_alignment).peak_live_bytes
    lo = _working_set(cm, nblk)
    got = {}
    for f in fractions:
        budget = int(f * peak)
        if budget < lo:
            with pytest.raises(DeviceError, match=rf"below the {lo} bytes"):
                Executor(cm, FsimDevice(cm.config), memory_budget=budget)
            got[f] = None
            continue
        ex = Executor(cm, FsimDevice(cm.config), memory_budget=budget)
        out = ex.run(x)
        kept = ex.run(x, keep=True)
        for k in cm.outputs:
            assert np.array_equal(out[k], ref[k]), (f, k)
            assert np.array_equal(kept[k], ref[k]), (f, k)
        for s in cm.steps:
            if s.target == "vta":
                assert np.array_equal(kept[s.outputs[0]], quant[s.outputs[0]]), (f, s.name)
        r = ex.dtr_report()
        assert r["liveness_peak"] == peak and r["min_working_set"] == lo
        assert r["peak"] <= budget and r["arena"] <= budget
        mr = ex.memory_report()
        assert mr["activations"] == r["arena"] <= budget and mr["budget"] == budget
        check_schedule(dtr.nodes_from_model(cm, nblk), ex._schedules[nblk][0], budget)
        assert sum(st.recomputes for st in ex.stats.values()) == 2 * r["recomputes"]
        if r["recomputes"]:
            assert r["gemm_uops"] > r["gemm_uops_base"] and r["est_overhead"] > 0
        ex.close()
        got[f] = r
    return peak, lo, got


@pytest.fixture(scope="module")
def resnet():
    x = np.random.default_rng(0).standard_normal((1, 3, 32, 32)).astype(np.float32)
    return compile_model(resnet18(32), x, "pynq"), x


def test_resnet18_budgets(resnet):
    """ResNet-18's liveness peak is the stem's working set (the im2col'd input + the
    conv's output): 100 % runs the stem whole, without eviction; 70 % and 50 % run it in
    row bands (one band of the patch tensor at a time), still without eviction; 30 % is
    below the max-pool's working set (its input and output) and refused up front."""
    cm, x = resnet
    stem = next(s for s in cm.steps if s.target == "vta")
    assert stem.layouts["x"].im2col is not None and stem.bands
    peak, lo, got = _run_budgets(cm, x, (1.0, 0.7, 0.5, 0.3))
    assert lo < 0.5 * peak
    assert got[1.0]["evictions"] == 0 and got[1.0]["peak"] == peak and got[1.0]["bands"] == {}
    for f in (0.7, 0.5):
        assert got[f]["bands"].keys() == {stem.name} and got[f]["evictions"] == 0, got[f]
    assert got[0.5]["bands"][stem.name] > got[0.7]["bands"][stem.name] >= 2
    assert got[0.3] is None


@pytest.fixture(scope="module")
def unet4():
    x = np.random.default_rng(1).standard_normal((2, 3, 32, 32)).astype(np.float32)
    m = _bench().unet(32, skips=4)
    return compile_model(m, x[:1], "pynq"), x


def test_unet_budgets(unet4):
    cm, x = unet4
    ops = {s.op: s.target for s in cm.steps}
    assert ops["qadd"] == "vta" and ops["upsample"] == "cpu", cm.placement_table()
    peak, lo, got = _run_budgets(cm, x, (1.0, 0.7, 0.5))
    assert lo <= 0.5 * peak
    assert got[1.0]["evictions"] == 0 and got[1.0]["recomputes"] == 0
    for f in (0.7, 0.5):
        assert got[f]["evictions"] > 0 and got[f]["recomputes"] > 0, got[f]
    assert got[0.5]["recomputes"] >= got[0.7]["recomputes"]


def test_unet_too_small_budget_and_batches(unet4):
    cm, x = unet4
    lo = _working_set(cm, 1)
    with pytest.raises(DeviceError, match=rf"budget {lo - 1} bytes is below the {lo} bytes"):
        Executor(cm, FsimDevice(cm.config), memory_budget=lo - 1)
    with pytest.raises(ValueError, match="memory_budget"):
        Executor(cm, FsimDevice(cm.config), memory_budget=-5)
    # one budget, two batch sizes: a schedule per batch-block count
    budget = int(0.6 * plan_memory(cm, 2).peak_live_bytes)
    ex = Executor(cm, FsimDevice(cm.config), memory_budget=budget)
    ref = Executor(cm, FsimDevice(cm.config))
    for n in (2, 1, 2):
        a, b = ex.run(x[:n]), ref.run(x[:n])
        assert all(np.array_equal(a[k], b[k]) for k in cm.outputs)
        assert ex.dtr_report()["peak"] <= budget
    assert sorted(ex._schedules) == [1, 2]
    with pytest.raises(DeviceError, match="below the"):   # 4 images: 2 blocks -> larger
        ex.run(np.concatenate([x, x, x]))
    # plan_budget refuses up front with the figure of the run's own batch (the
    # constructor could only check the declared one)
    lo1 = _working_set(cm, 1)
    lo4 = _working_set(cm, -(-4 // cm.config.BATCH))
    assert lo4 > lo1
    ex1 = Executor(cm, FsimDevice(cm.config), memory_budget=lo1)
    with pytest.raises(DeviceError, match=rf"below the {lo4} bytes"):
        ex1.plan_budget(4)
    assert ex1.plan_budget(1).peak_bytes <= lo1
    with pytest.raises(DeviceError, match="positive integer"):
        ex1.plan_budget(0)
    with pytest.raises(DeviceError, match="needs an executor with a memory_budget"):
        ref.plan_budget(1)


def test_unet_budget_on_the_pynq_backend():
    """The arena's slices through the board backend (fake PYNQ core over the functional
    simulator, with its per-allocation cache states): bit-exact against fsim."""
    from test_pynq_fake import board as fake_board

    from vtaforge.hw.config import preset

    cfg = preset("tiny")
    x = np.random.default_rng(2).standard_normal((1, 3, 16, 16)).astype(np.float32)
    cm = compile_model(_bench().unet(16, skips=4), x, cfg)
    ref = Executor(cm, FsimDevice(cfg)).run(x)
    budget = int(0.6 * plan_memory(cm, 1).peak_live_bytes)
    dev, core, mem, log = fake_board(cfg)
    ex = Executor(cm, dev, memory_budget=budget)
    out = ex.run(x)
    assert np.array_equal(out["y"], ref["y"])
    r = ex.dtr_report()
    assert r["recomputes"] > 0 and r["arena"] <= budget
    assert not core.faults


def test_liveness_peak_counts_aligned_bytes():
    """The report's liveness peak counts every tensor in device-aligned bytes, as the
    minimum working set and the allocator do: at 9 x 13 on ``tiny`` the exact bytes
    (1,680) were below the minimum (1,728), so a budget at the reported liveness peak was
    refused as 'below' the minimum."""
    model = Path(__file__).resolve().parents[1] / "compiler" / "real_models" / \
        "dynhw_cnn.ts_op17_dynhw.onnx"
    x = np.random.default_rng(3).standard_normal((1, 3, 9, 13)).astype(np.float32)
    cm = compile_model(str(model), x, "tiny")
    al = cm.config.dram_alignment
    assert plan_memory(cm, 1).peak_live_bytes % al != 0       # the case: unaligned tensors
    ex = Executor(cm, FsimDevice(cm.config), memory_budget=1 << 20)
    ex.run(x)
    r = ex.dtr_report()
    assert r["liveness_peak"] == plan_memory(cm, 1, al).peak_live_bytes
    assert r["liveness_peak"] % al == 0 and r["liveness_peak"] >= r["min_working_set"]
    tight = Executor(cm, FsimDevice(cm.config), memory_budget=r["liveness_peak"])
    assert np.array_equal(tight.run(x)["output"], ex.run(x)["output"])
    assert tight.dtr_report()["evictions"] == 0
