"""fsim's recorded plans (``runtime/fsim.py`` ``_Plan``): a second run of the same program
replays the recorded data work instead of decoding and checking it again.

Every replay is compared with :func:`vtaforge.runtime.fsim.simulate`, the plain path that
never replays: DRAM after the run, the statistics, and the error (type and message) where
the run fails.  Cases: random legal programs (``tests/support/randprog.py``) replayed on
the same image and on images whose data (INP, WGT, ACC, ACC8, OUT regions) changed; the
micro-op bytes or instruction bytes changed (the plan must not be used); a watchdog below
the program's steps; a program whose STORE overwrites its own micro-ops (never recorded);
a failing program (never recorded); and a compiled model through the executor on
:class:`FsimDevice` with and without plans.
"""

from __future__ import annotations

import numpy as np
import pytest

from programs import AluOp, Image, MemType, acc_bytes, alu, finish, gemm, ld, read_out, st
from randprog import generate
from vtaforge.hw.config import preset
from vtaforge.hw.isa import encode_uops
from vtaforge.runtime import fsim
from vtaforge.runtime.device import ProgramError
from vtaforge.runtime.fsim import FsimDevice, simulate

UOP, INP, WGT, ACC, OUT = MemType.UOP, MemType.INP, MemType.WGT, MemType.ACC, MemType.OUT

CONFIGS = {
    "tiny": preset("tiny"),
    "pynq": preset("pynq"),
    "batch2": preset("batch2"),
    "tiny_mul_noacc8": preset("tiny").replace(ALU_MUL=True, ACC_8BIT=False),
    # fewer seeds (SEEDS) for the unusual widths and shapes
    "acc16": preset("tiny").replace(LOG_ACC_WIDTH=4, LOG_ACC_BUFF_SIZE=8),
    "inp16_wgt16": preset("tiny").replace(LOG_INP_WIDTH=4, LOG_WGT_WIDTH=4,
                                          LOG_INP_BUFF_SIZE=9, LOG_WGT_BUFF_SIZE=9),
    "a4w4": preset("tiny").replace(LOG_INP_WIDTH=2, LOG_WGT_WIDTH=2, LOG_INP_BUFF_SIZE=9,
                                   LOG_WGT_BUFF_SIZE=9, DSP_PACKING=2),
    "batch4_bus128": preset("batch2").replace(LOG_BUS_WIDTH=7, LOG_BATCH=2),
}
SEEDS = {"tiny": 20, "pynq": 20, "batch2": 20, "tiny_mul_noacc8": 12}


def plain(cfg, dram, ia, n, regions=None, max_steps=None):
    """``(dram after, stats or None, error text or None)`` of the plain path."""
    d = dram.copy()
    try:
        return d, dict(simulate(cfg, d, ia, n, regions=regions, max_steps=max_steps).stats), None
    except ProgramError as e:
        return d, None, f"{type(e).__name__}: {e}"


def planned(plans, cfg, dram, ia, n, regions=None, max_steps=None):
    """As :func:`plain`, through a plan cache (records on a miss, replays on a hit)."""
    d = dram.copy()
    try:
        st_ = fsim._run_planned(cfg, d, ia, n, regions, max_steps=max_steps, plans=plans)
        return d, dict(st_), None
    except ProgramError as e:
        return d, None, f"{type(e).__name__}: {e}"


def same(got, want, what: str) -> None:
    assert got[2] == want[2], what
    assert got[1] == want[1], what
    if not np.array_equal(got[0], want[0]):
        diff = np.flatnonzero(got[0] != want[0])
        raise AssertionError(f"{what}: {diff.size} DRAM bytes differ, first at "
                             f"0x{int(diff[0]):x}")


@pytest.mark.parametrize("name", list(CONFIGS))
def test_random_programs_replay_as_plain(name):
    """Per random program: the recording run and the replay give the plain path's DRAM and
    statistics; a replay on new data (every data region rewritten) gives the plain path's
    answer on that data; a flipped micro-op or instruction bit gives the plain path's
    result or error (the plan is not used)."""
    cfg = CONFIGS[name]
    for seed in range(SEEDS.get(name, 6)):
        p = generate(cfg, seed)
        rng = np.random.default_rng(seed)
        plans = fsim._PlanCache()
        want = plain(cfg, p.dram, p.insn_addr, p.insn_count)
        assert want[2] is None
        same(planned(plans, cfg, p.dram, p.insn_addr, p.insn_count), want, f"seed {seed} first")
        assert plans.hits == 0 and len(plans.plans) == 1
        same(planned(plans, cfg, p.dram, p.insn_addr, p.insn_count), want, f"seed {seed} replay")
        assert plans.hits == 1
        d2 = p.dram.copy()
        for k in ("inp", "wgt", "acc", "acc8", "out"):
            a, ln = p.regions[k]
            d2[a:a + ln] = rng.integers(0, 256, ln, dtype=np.uint8)
        same(planned(plans, cfg, d2, p.insn_addr, p.insn_count),
             plain(cfg, d2, p.insn_addr, p.insn_count), f"seed {seed} new data")
        assert plans.hits == 2
        for part in ("uop", "insn"):
            a, ln = p.regions[part]
            if not ln:
                continue
            d3 = p.dram.copy()
            d3[a + int(rng.integers(0, ln))] ^= np.uint8(1 << int(rng.integers(0, 8)))
            same(planned(plans, cfg, d3, p.insn_addr, p.insn_count),
                 plain(cfg, d3, p.insn_addr, p.insn_count), f"seed {seed} {part} bit flip")
        # the original program still replays after all that
        hits = plans.hits
        same(planned(plans, cfg, p.dram, p.insn_addr, p.insn_count), want, f"seed {seed} again")
        assert plans.hits == hits + 1


def test_watchdog_below_recorded_steps_takes_the_plain_path():
    cfg = CONFIGS["tiny"]
    p = generate(cfg, 3)
    rep = fsim._dry_run(cfg, p.dram, p.insn_addr, p.insn_count, None)
    plans = fsim._PlanCache()
    planned(plans, cfg, p.dram, p.insn_addr, p.insn_count)
    for ms in (rep.steps, rep.steps - 1, 5):
        got = planned(plans, cfg, p.dram, p.insn_addr, p.insn_count, max_steps=ms)
        same(got, plain(cfg, p.dram, p.insn_addr, p.insn_count, max_steps=ms), f"steps {ms}")
    assert "timeout" in got[2]


def _gemm_program(cfg, uops_dst, x, w):
    """LOAD INP ``x`` and WGT ``w``, micro-ops (dst ``uops_dst[k]``, src k, wgt k), a GEMM
    nest with reset then one that accumulates, both over two outer iterations (destination
    factor ``n``), STORE the ``2n`` results."""
    im = Image(cfg)
    n = len(uops_dst)
    ax = im.put(x.astype(np.int8))
    aw = im.put(w.astype(np.int8))
    au = im.uops(uops_dst, np.arange(n), np.arange(n))
    ao = im.zeros(2 * n * cfg.elem_bytes(OUT))
    insns = [ld(INP, 0, im.base(ax, INP), 1, n), ld(WGT, 0, im.base(aw, WGT), 1, n, push_next=1),
             ld(UOP, 0, im.base(au, UOP), 1, n, pop_prev=1),
             gemm(0, n, 2, 1, d=(n, 0), reset=1), gemm(0, n, 2, 1, d=(n, 0), push_next=1),
             st(0, im.base(ao, OUT), 1, 2 * n, pop_prev=1, push_prev=1), finish(pop_next=1)]
    dram, ia, cnt = im.build(insns)
    return dram, ia, cnt, au, ao, ax


def test_changed_input_and_changed_uops_give_the_new_answer():
    cfg = CONFIGS["tiny"]
    rng = np.random.default_rng(5)
    B, BI, BO = cfg.BATCH, cfg.BLOCK_IN, cfg.BLOCK_OUT
    n = 4
    x = rng.integers(-128, 128, (n, B, BI))
    w = rng.integers(-128, 128, (n, BO, BI))
    dram, ia, cnt, au, ao, ax = _gemm_program(cfg, np.arange(n), x, w)
    plans = fsim._PlanCache()

    def out(d):
        return read_out(cfg, d, ao, 2 * n)

    def oracle(xv, dst):
        acc = np.zeros((2 * n, B, BO), dtype=np.int64)
        for i in range(2):
            for k in range(n):
                acc[dst[k] + i * n] += xv[k] @ w[k].T
        return ((acc + 128) & 255) - 128

    got = planned(plans, cfg, dram, ia, cnt)
    assert np.array_equal(out(got[0]), oracle(x, np.arange(n)))
    # new input bytes: replayed, new answer
    x2 = rng.integers(-128, 128, (n, B, BI))
    d2 = dram.copy()
    d2[ax:ax + x2.size] = x2.astype(np.int8).view(np.uint8).reshape(-1)
    got = planned(plans, cfg, d2, ia, cnt)
    assert plans.hits == 1
    assert np.array_equal(out(got[0]), oracle(x2, np.arange(n)))
    # new micro-ops (every product into entry 0, then n): not replayed, new answer
    d3 = dram.copy()
    u = encode_uops(cfg, np.zeros(n, np.int64), np.arange(n), np.arange(n)).astype("<u4")
    d3[au:au + u.nbytes] = u.view(np.uint8)
    got = planned(plans, cfg, d3, ia, cnt)
    assert plans.hits == 1
    want = oracle(x, np.zeros(n, np.int64))
    assert np.array_equal(out(got[0])[[0, n]], want[[0, n]])
    same(got, plain(cfg, d3, ia, cnt), "changed uops")
    # both micro-op variants are kept: each replays now
    same(planned(plans, cfg, dram, ia, cnt), plain(cfg, dram, ia, cnt), "first uops again")
    same(planned(plans, cfg, d3, ia, cnt), plain(cfg, d3, ia, cnt), "second uops again")
    assert plans.hits == 3
    # micro-ops whose second iteration is out of range: the plain path's error
    d4 = dram.copy()
    u = encode_uops(cfg, np.full(n, cfg.ACC_DEPTH - 1), np.arange(n), np.arange(n))
    d4[au:au + u.nbytes] = u.astype("<u4").view(np.uint8)
    got = planned(plans, cfg, d4, ia, cnt)
    want = plain(cfg, d4, ia, cnt)
    assert want[2] is not None and want[2].startswith("ProgramError")
    same(got, want, "uops out of range")
    assert plans.hits == 3


def test_store_over_own_uops_and_failing_programs_are_not_recorded():
    cfg = CONFIGS["tiny"]
    n = 2
    im = Image(cfg)
    a = im.put(acc_bytes(cfg, np.arange(n * cfg.BATCH * cfg.BLOCK_OUT).reshape(
        n, cfg.BATCH, cfg.BLOCK_OUT)))
    au = im.uops([0], [0])
    # the STORE writes OUT bytes over the micro-op words (a later run decodes new uops)
    insns = [ld(ACC, 0, im.base(a, ACC), 1, n), ld(UOP, 0, im.base(au, UOP), 1, 1),
             alu(AluOp.ADD, 0, 1, 1, n, dfi=1, imm=1, push_next=1),
             st(0, au // cfg.elem_bytes(OUT), 1, 1, pop_prev=1, push_prev=1),
             finish(pop_next=1)]
    dram, ia, cnt = im.build(insns)
    plans = fsim._PlanCache()
    d = dram.copy()
    for _ in range(3):     # each run sees the micro-ops the last one stored
        got = planned(plans, cfg, d, ia, cnt)
        want = plain(cfg, d, ia, cnt)
        same(got, want, "store over uops")
        d = got[0]
    assert not plans.plans and plans.hits == 0
    bad = dram.copy()
    u = encode_uops(cfg, [cfg.ACC_DEPTH - 1], [0], [0]).astype("<u4")
    bad[au:au + 4] = u.view(np.uint8)
    for _ in range(2):
        got = planned(plans, cfg, bad, ia, cnt)
        assert got[2] is not None and got[2] == plain(cfg, bad, ia, cnt)[2]
    assert not plans.plans


def test_regions_and_image_size_are_part_of_the_key():
    cfg = CONFIGS["pynq"]
    p = generate(cfg, 7)
    plans = fsim._PlanCache()
    whole = [(0, p.dram.size)]
    planned(plans, cfg, p.dram, p.insn_addr, p.insn_count, regions=whole)
    # other regions (here: the instructions left out): not the recorded plan
    a, ln = p.regions["insn"]
    regs = [(0, a)]
    same(planned(plans, cfg, p.dram, p.insn_addr, p.insn_count, regions=regs),
         plain(cfg, p.dram, p.insn_addr, p.insn_count, regions=regs), "other regions")
    assert plans.hits == 0
    # a smaller image with the same regions: the plain path's DeviceError
    from vtaforge.runtime.device import DeviceError
    with pytest.raises(DeviceError):
        fsim._run_planned(cfg, p.dram[:-1].copy(), p.insn_addr, p.insn_count, whole,
                          max_steps=None, plans=plans)
    assert plans.hits == 0


def test_compiled_model_on_fsim_device_replays_bit_exact():
    """A small conv model through the executor: images 2.. replay every program and give
    the outputs of a device without plans, image by image."""
    pytest.importorskip("onnx")
    from vtaforge.compiler import zoo
    from vtaforge.compiler.compile import compile_model
    from vtaforge.runtime.executor import Executor

    rng = np.random.default_rng(0)
    m = zoo.resnet18(32, num_classes=10)
    cm = compile_model(m, rng.normal(0, 1, (4, 3, 32, 32)).astype(np.float32), "pynq")
    with_plans = FsimDevice(cm.config)
    ex_a = Executor(cm, with_plans)
    ex_b = Executor(cm, FsimDevice(cm.config, plans=False))
    for k in range(3):
        x = rng.normal(0, 1, (1, 3, 32, 32)).astype(np.float32)
        a, b = ex_a.run(x), ex_b.run(x)
        for name in b:
            assert np.array_equal(a[name], b[name]), (k, name)
    assert with_plans.plans.hits >= 2 * sum(s.target == "vta" for s in cm.steps)
    for name, sa in ex_a.stats.items():     # the cores' counters, summed over the runs
        sb = ex_b.stats[name]
        assert (sa.gemm_uops, sa.alu_uops, sa.dram_bytes, sa.insns) == \
            (sb.gemm_uops, sb.alu_uops, sb.dram_bytes, sb.insns), name


def test_clearing_req_programs_replay_as_plain():
    """The clearing REQ (OUT apart from ACC until the entry is written again) replays as
    the plain path runs it, on the recorded data and on new ACC values."""
    from test_alu_requant import N, REQ_CFG, clearing_program

    cfg = REQ_CFG
    for tensor in (True, False):
        rng = np.random.default_rng(3 + tensor)
        dram, ia, n, out1, out2, want1, want2 = clearing_program(cfg, rng, tensor)
        plans = fsim._PlanCache()
        for k in range(3):
            d = dram.copy()
            if k == 2:      # new ACC values (the first ACC LOAD's 2N entries)
                first = fsim._dry_run(cfg, dram, ia, n, None)
                a = int(first.cols["dram_base"][2]) * cfg.elem_bytes(ACC)
                ln = 2 * N * cfg.elem_bytes(ACC)
                d[a:a + ln] = rng.integers(0, 256, ln, dtype=np.uint8)
            got = planned(plans, cfg, d, ia, n)
            same(got, plain(cfg, d, ia, n), f"tensor={tensor} run {k}")
            if k < 2:
                assert np.array_equal(read_out(cfg, got[0], out1, N), want1)
                assert np.array_equal(read_out(cfg, got[0], out2, N), want2)
        assert plans.hits == 2


@pytest.mark.parametrize("name,G,K,R", [("tiny", 3, 5, 4), ("batch2", 4, 3, 2),
                                        ("pynq", 4, 80, 3)])
def test_gemm_groups_sharing_sources(name, G, K, R):
    """A 1x1-convolution-like nest: G destination groups read the same K sources with
    their own weights, over R rows (pynq with K = 80: the contraction is split into float
    sub-sums); plain run and replay against a numpy oracle."""
    cfg = preset(name) if name != "tiny" else CONFIGS["tiny"]
    rng = np.random.default_rng(G * 100 + K)
    B, BI, BO = cfg.BATCH, cfg.BLOCK_IN, cfg.BLOCK_OUT
    x = rng.integers(-128, 128, (R * K, B, BI))
    w = rng.integers(-128, 128, (G * K, BO, BI))
    g, k = np.divmod(np.arange(G * K), K)
    im = Image(cfg)
    ax = im.put(x.astype(np.int8))
    aw = im.put(w.astype(np.int8))
    au = im.uops(g, k, g * K + k)
    ao = im.zeros(G * R * cfg.elem_bytes(OUT))
    insns = [ld(INP, 0, im.base(ax, INP), 1, R * K),
             ld(WGT, 0, im.base(aw, WGT), 1, G * K, push_next=1),
             ld(UOP, 0, im.base(au, UOP), 1, G * K, pop_prev=1),
             gemm(0, G * K, R, 1, d=(G, 0), reset=1),
             gemm(0, G * K, R, 1, d=(G, 0), s=(K, 0), push_next=1),
             st(0, im.base(ao, OUT), 1, G * R, pop_prev=1, push_prev=1), finish(pop_next=1)]
    dram, ia, n = im.build(insns)
    acc = np.einsum("rkbi,gkoi->rgbo", x.reshape(R, K, B, BI), w.reshape(G, K, BO, BI))
    want = (((acc + 128) & 255) - 128).reshape(R * G, B, BO)
    plans = fsim._PlanCache()
    for _ in range(2):
        got = planned(plans, cfg, dram, ia, n)
        assert np.array_equal(read_out(cfg, got[0], ao, G * R), want)
    assert plans.hits == 1


def test_plan_cache_limits():
    """Past ``size`` keys the least recently used is dropped; a plan over ``max_bytes``
    is not kept; every run still gives the plain path's result."""
    cfg = CONFIGS["tiny"]
    progs = [generate(cfg, s) for s in (1, 2)]
    plans = fsim._PlanCache(size=1)
    for p in progs + progs:
        same(planned(plans, cfg, p.dram, p.insn_addr, p.insn_count),
             plain(cfg, p.dram, p.insn_addr, p.insn_count), f"seed {p.seed}")
    assert plans.hits == 0 and len(plans.plans) == 1 and plans.records == 4
    p = progs[0]
    plans = fsim._PlanCache(max_bytes=0)
    planned(plans, cfg, p.dram, p.insn_addr, p.insn_count)
    assert not plans.plans and plans.nbytes == 0
    plans = fsim._PlanCache()
    planned(plans, cfg, p.dram, p.insn_addr, p.insn_count)
    assert plans.nbytes == sum(q.nbytes for ps in plans.plans.values() for q in ps) > 0
    plans.clear()
    assert not plans.plans and plans.nbytes == 0
