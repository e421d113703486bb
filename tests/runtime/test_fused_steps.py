"""Fused launches (``Executor(fuse=True)``, ``ProgramBuilder.begin_step``): a run of
consecutive VTA steps is one program, the steps joined by dependency tokens.

Oracles: the unfused executor (one launch per step, the reference every other test checks
against numpy and onnxruntime) for the values, bit for bit, every intermediate tensor
kept; :func:`vtaforge.runtime.race.race_check` for the schedule independence of the fused
programs (every DRAM and scratchpad access pair between the steps ordered by tokens), with
a negative control: without the barrier the same program races.
"""

from __future__ import annotations

import numpy as np
import pytest

from small_models import four_step_model
from vtaforge.compiler.compile import compile_model
from vtaforge.hw.config import MemType, preset
from vtaforge.hw.isa import Module, Opcode, decode_program
from vtaforge.runtime.builder import ProgramBuilder
from vtaforge.runtime.device import Buffer, ProgramError
from vtaforge.runtime.executor import Executor, fused_groups
from vtaforge.runtime.fsim import FsimDevice
from vtaforge.runtime.kernels import BuilderError
from vtaforge.runtime.race import RaceError, race_check


@pytest.fixture(scope="module", params=["tiny", "pynq-fast"])
def compiled(request):
    pytest.importorskip("onnx")
    cfg = preset(request.param)
    x = np.random.default_rng(1).standard_normal((2, 8, 9, 9)).astype(np.float32)
    return compile_model(four_step_model(), x, cfg), x


def _fused_runs(cm):
    return [g for g in fused_groups(cm) if g[1] > g[0]]


def test_fused_outputs_equal_unfused_on_fsim(compiled):
    """Every kept tensor of a fused run equals the unfused run's, bit for bit, at batch 2
    and at batch 1 (a second shape: programs instantiated again), with and without keep."""
    cm, x = compiled
    runs = _fused_runs(cm)
    assert runs and max(b - a for a, b in runs) >= 2, fused_groups(cm)
    for xx in (x, x[:1]):
        ref = Executor(cm, FsimDevice(cm.config, mem_bytes=16 << 20)).run(xx, keep=True)
        ex = Executor(cm, FsimDevice(cm.config, mem_bytes=16 << 20), fuse=True)
        got = ex.run(xx, keep=True)
        assert set(got) == set(ref)
        for k in ref:
            np.testing.assert_array_equal(got[k], ref[k], err_msg=k)
        out = ex.run(xx)
        for k in cm.outputs:
            np.testing.assert_array_equal(out[k], ref[k], err_msg=k)
    first, last = runs[0]
    names = [cm.steps[i].name for i in range(first, last + 1)]
    assert all(ex.stats[n].fused == names[0] for n in names)
    assert all(ex.stats[n].insns > 0 and ex.stats[n].runs == 2 for n in names)
    assert ex.stats[names[0]].launches >= 2 and ex.stats[names[1]].launches == 0


def _fused_programs(cm, x):
    dev = FsimDevice(cm.config, mem_bytes=16 << 20)
    ex = Executor(cm, dev, fuse=True)
    ex.run(x)
    progs = [p for k, p in ex._progs.items() if k[0] == "fused"]
    assert progs
    return dev, progs


def test_fused_programs_are_race_free(compiled):
    """race_check on each fused launch: every access pair of two modules to one DRAM byte
    or scratchpad entry, across the steps too, is ordered by tokens; no deadlock."""
    cm, x = compiled
    for xx in (x, x[:1]):
        dev, progs = _fused_programs(cm, xx)
        for p in progs:
            for addr, n, _ in p.launches:
                race_check(cm.config, dev.mem, addr, n)


def test_without_the_barrier_the_fused_program_races(compiled, monkeypatch):
    """Negative control: the same steps joined with their token state closed but no
    barrier tokens (t1, t2, t3) race (the next step's loads read what the previous one
    may not have stored yet)."""
    cm, x = compiled

    def no_barrier(self):
        for mod in Module:
            if self._pending[mod]:
                self._nop(mod)
        bal = self._prefix()[-1]
        for _ in range(int(bal[1])):
            self.dep_pop(Module.COMPUTE, Module.LOAD)
        for _ in range(int(bal[2])):
            self.dep_pop(Module.COMPUTE, Module.STORE)
        for _ in range(int(bal[0])):
            self.dep_pop(Module.LOAD, Module.COMPUTE)
        for _ in range(int(bal[3])):
            self.dep_pop(Module.STORE, Module.COMPUTE)

    monkeypatch.setattr(ProgramBuilder, "_step_barrier", no_barrier)
    dev, progs = _fused_programs(cm, x[:1])     # batch 1: no later block orders them
    with pytest.raises(RaceError):
        for p in progs:
            for addr, n, _ in p.launches:
                race_check(cm.config, dev.mem, addr, n)


def _two_steps(b: ProgramBuilder, bufs) -> None:
    """Steps "copy1" and "copy2", each an ACC load of 4 elements and a store of them:
    ``bufs`` = ``[(source, destination)]`` per step."""
    for name, (frm, to) in zip(("copy1", "copy2"), bufs):
        b.begin_step(name)
        b.load_2d(frm, 0, MemType.ACC, 0, 1, 4, 4)
        b.dep_push(Module.COMPUTE, Module.STORE)
        b.dep_pop(Module.COMPUTE, Module.STORE)
        b.store_2d(0, to, 0, 1, 4, 4)
        b.dep_push(Module.STORE, Module.COMPUTE)
        b.dep_pop(Module.STORE, Module.COMPUTE)


def test_a_fault_in_a_fused_launch_names_its_step():
    """A fault in the second step of a fused launch (its store writes over the program's
    own instructions, which every backend refuses): the device's error, with the step it
    is about named first, of the device error's class, its ``insn_index`` the position of
    that STORE in the launched program (found by decoding the launched bytes)."""
    cfg = preset("tiny")
    dev = FsimDevice(cfg, mem_bytes=1 << 20)
    b = ProgramBuilder(dev, debug=True)
    src = dev.alloc(4 * cfg.elem_bytes(MemType.ACC))
    dev.write(src, np.zeros(src.nbytes, np.uint8))
    dst = dev.alloc(4 * cfg.elem_bytes(MemType.OUT))
    _two_steps(b, [(src, dst), (src, dst)])
    res = b.synchronize()
    assert res.stats["launches"] == 1
    assert set(b.last_launch_steps[0]) == {"copy1", "copy2"}
    insns = Buffer(b._insn_buf.addr, 4 * cfg.elem_bytes(MemType.OUT))
    _two_steps(b, [(src, dst), (src, insns)])
    with pytest.raises(ProgramError, match=r"^step 'copy2' \(fused launch of 'copy1', "
                                           r"'copy2'\): instruction \d+ \(STORE") as e:
        b.synchronize()
    cols = decode_program(cfg, b.last_programs[-1].reshape(-1))
    over = np.flatnonzero((cols["opcode"] == Opcode.STORE) & (cols["x_size"] > 0)
                          & (cols["dram_base"] * cfg.elem_bytes(MemType.OUT) == insns.addr))
    assert over.size == 1 and type(e.value) is ProgramError
    assert e.value.insn_index == int(over[0])
    assert f": instruction {int(over[0])} (STORE" in str(e.value)


def test_a_step_with_more_pops_than_pushes_is_refused_at_the_boundary():
    cfg = preset("tiny")
    b = ProgramBuilder(FsimDevice(cfg, mem_bytes=1 << 20))
    b.begin_step("bad")
    b.dep_pop(Module.LOAD, Module.COMPUTE)
    b.dep_push(Module.COMPUTE, Module.STORE)
    with pytest.raises(BuilderError, match=r"step 'bad': token queue l2g has 1 more pop"):
        b.begin_step("next")


def test_fuse_option_checks(compiled):
    cm, _ = compiled
    dev = FsimDevice(cm.config, mem_bytes=16 << 20)
    with pytest.raises(ValueError, match="fuse must be True or False, got 1"):
        Executor(cm, dev, fuse=1)
    with pytest.raises(ValueError, match="fuse=True runs on the liveness plan"):
        Executor(cm, dev, fuse=True, memory_budget=1 << 20)


@pytest.mark.rtl
def test_fused_layers_on_tiny_rtl_equal_fsim_and_take_fewer_cycles():
    """The layers model on the Verilated tiny core with a board-like DRAM latency, fused:
    every kept tensor equals fsim's unfused run, and the fused run takes fewer core
    cycles than one launch per step."""
    pytest.importorskip("onnx")
    rtl = pytest.importorskip("vtaforge.runtime.rtl")
    cfg = preset("tiny")
    x = np.random.default_rng(1).standard_normal((1, 8, 9, 9)).astype(np.float32)
    cm = compile_model(four_step_model(), x, cfg)
    ref = Executor(cm, FsimDevice(cfg, mem_bytes=16 << 20)).run(x, keep=True)
    cycles = {}
    for fuse in (False, True):
        dev = rtl.RtlDevice(cfg, 16 << 20, progress=False, latency=(40, 60))
        try:
            ex = Executor(cm, dev, fuse=fuse)
            got = ex.run(x, keep=True)
        finally:
            dev.close()
        for k in ref:
            np.testing.assert_array_equal(got[k], ref[k], err_msg=f"fuse={fuse}: {k}")
        cycles[fuse] = sum(s.cycles for s in ex.stats.values())
    assert 0 < cycles[True] < cycles[False], cycles


@pytest.mark.rtl
def test_cycle_model_on_fused_launches_follows_the_rtl():
    """dse/performance.py's cycle model on the fused program of the layers model (tiny,
    ideal bus) within 3 % of the RTL's cycles, and below its own unfused sum, as the RTL
    is (measured 2026-12-07: RTL 8,774 unfused -> 8,708 fused; model 8,868 -> 8,774)."""
    pytest.importorskip("onnx")
    rtl = pytest.importorskip("vtaforge.runtime.rtl")
    from vtaforge.dse.performance import CycleModel, _recording_device

    cfg = preset("tiny")
    x = np.random.default_rng(1).standard_normal((1, 8, 9, 9)).astype(np.float32)
    cm = compile_model(four_step_model(), x, cfg)
    (first, last), = _fused_runs(cm)
    got = {}
    for fuse in (False, True):
        dev = _recording_device(rtl.RtlDevice, CycleModel())(cfg, 16 << 20, progress=False)
        try:
            Executor(cm, dev, fuse=fuse).run(x)
        finally:
            dev.close()
        recs = dev.records[:last - first + 1] if not fuse else dev.records[:1]
        got[fuse] = (sum(r["cycles"] for r in recs), sum(r["model"]["cycles"] for r in recs))
    (rtl_u, mod_u), (rtl_f, mod_f) = got[False], got[True]
    assert rtl_f < rtl_u and mod_f < mod_u, got
    assert abs(mod_f / rtl_f - 1) <= 0.03, got
