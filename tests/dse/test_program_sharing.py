"""The cycle-model evaluation's shortcuts against their oracles: fsim's data-free machine
against the data-path simulator, and the program memo (configs whose lowering produced
the same programs share one run) against a fresh run of each config."""

from __future__ import annotations

import pytest

from vtaforge.dse import parse_workloads
from vtaforge.dse import performance as perf
from vtaforge.dse.performance import ModelPerformance
from vtaforge.dse.space import Space
from vtaforge.dse.workloads import compile_workload
from vtaforge.hw.config import preset
from vtaforge.runtime.fsim import FsimDevice

TINY = Space(preset("tiny"), {})


def _cfg(**params):
    pt = TINY.make_point(params)
    assert pt.cfg is not None, pt.error
    return pt.cfg


class _DataPathFsim(ModelPerformance):
    """The oracle: the same evaluation on fsim's data path (the ISA's living definition)."""

    def _device(self, cfg):
        return perf._recording_device(FsimDevice, self.cycle_model)(cfg)


@pytest.fixture(autouse=True)
def _fresh_memo(monkeypatch):
    monkeypatch.setattr(perf, "_PROGRAM_MEMO", {})


@pytest.mark.parametrize("cfg_name,wl", [("tiny", "resnet18-c5"), ("batch2", "resnet18-c9"),
                                         ("tiny", "digits")])
def test_counting_fsim_records_equal_the_data_path(cfg_name, wl):
    cfg = preset(cfg_name)
    w = parse_workloads(wl, 7)[0]
    got = ModelPerformance().run_workload(cfg, w)
    perf._PROGRAM_MEMO.clear()
    want = _DataPathFsim().run_workload(cfg, w)
    assert got == want
    assert got["gemm_uops"] > 0 and got["insns"] > 0


def test_memo_hit_equals_a_fresh_run_and_needs_the_same_programs():
    w = parse_workloads("resnet18-c5", 7)[0]
    # 4x the micro-op buffer, which the c5 tiling at 7x7 on tiny's scratchpads does not use
    small = _cfg(LOG_UOP_DEPTH=10, LOG_INP_DEPTH=9, LOG_ACC_DEPTH=9)
    big = _cfg(LOG_UOP_DEPTH=12, LOG_INP_DEPTH=9, LOG_ACC_DEPTH=9)
    mp = ModelPerformance()
    keys = {}
    for c in (small, big):
        cm, _ = compile_workload(c, w)
        assert perf.scratchpad_extents_fit(cm, c)
        keys[c] = perf.program_memo_key(c, cm, 0, mp.cycle_model)
    assert keys[small] == keys[big]
    fresh = mp.run_workload(big, w)
    perf._PROGRAM_MEMO.clear()
    mp.run_workload(small, w)
    assert len(perf._PROGRAM_MEMO) == 1
    assert mp.run_workload(big, w) == fresh          # served from the memo
    # the oracle for the shared record: the data path on the big config itself
    perf._PROGRAM_MEMO.clear()
    assert _DataPathFsim().run_workload(big, w) == fresh


def test_memo_key_separates_different_programs():
    w = parse_workloads("resnet18-c5", 14)[0]
    mp = ModelPerformance()
    a, b = _cfg(LOG_INP_DEPTH=8), _cfg(LOG_INP_DEPTH=11)
    cma, _ = compile_workload(a, w)
    cmb, _ = compile_workload(b, w)
    tiles = [s.trace.stats.get("tiles") for cm in (cma, cmb) for s in cm.steps if s.trace]
    assert tiles[0] != tiles[1]                      # the bigger INP buffer tiles differently
    assert perf.program_memo_key(a, cma, 0, mp.cycle_model) != \
        perf.program_memo_key(b, cmb, 0, mp.cycle_model)
    # and a change of cycle model or seed is another key
    assert perf.program_memo_key(a, cma, 1, mp.cycle_model) != \
        perf.program_memo_key(a, cma, 0, mp.cycle_model)
    assert perf.program_memo_key(a, cma, 0, perf.CycleModel(dram_latency=40)) != \
        perf.program_memo_key(a, cma, 0, mp.cycle_model)


def test_extents_guard_refuses_programs_that_do_not_fit():
    w = parse_workloads("resnet18-c5", 14)[0]
    big = _cfg(LOG_INP_DEPTH=11, LOG_ACC_DEPTH=11)
    cm, _ = compile_workload(big, w)
    assert perf.scratchpad_extents_fit(cm, big)
    top = {}
    for s in cm.steps:
        if s.trace is not None:
            for m, v in perf._trace_extents(s.trace).items():
                top[m] = max(top.get(m, 0), v)
    assert 0 < top[perf.MemType.INP] <= big.depth(perf.MemType.INP)
    # a config whose INP (or micro-op) buffer is smaller than what these programs use
    small_inp = _cfg(LOG_INP_DEPTH=(top[perf.MemType.INP] - 1).bit_length() - 1,
                     LOG_ACC_DEPTH=11)
    assert not perf.scratchpad_extents_fit(cm, small_inp)
    small_uop = _cfg(LOG_INP_DEPTH=11, LOG_ACC_DEPTH=11,
                     LOG_UOP_DEPTH=(top[perf.MemType.UOP] - 1).bit_length() - 1)
    assert not perf.scratchpad_extents_fit(cm, small_uop)
