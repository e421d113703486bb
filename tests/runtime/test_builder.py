"""Structure of the instruction streams ProgramBuilder emits (decoded with hw.isa), on a
recording device that runs nothing: token coalescing, NOP placement, micro-op loads,
kernel cache and keys, eviction, argument validation."""

from __future__ import annotations

import numpy as np
import pytest

from vtaforge.hw.config import MemType, preset
from vtaforge.hw.isa import AluOp, Module, Opcode, decode_program, decode_uops
from vtaforge.runtime.builder import ProgramBuilder
from vtaforge.runtime.kernels import BuilderError
from vtaforge.runtime.device import Device, RunResult

L, C, S = Module.LOAD, Module.COMPUTE, Module.STORE


class RecordingDevice(Device):
    """Keeps memory in a dict-backed array and records each run's program and uops."""

    target = "recording"

    def __init__(self, cfg, mem_bytes=4 << 20):
        super().__init__(cfg, mem_bytes)
        self.mem = np.zeros(mem_bytes + 4096, np.uint8)
        self.runs = []

    def _write_mem(self, addr, data):
        self.mem[addr:addr + data.size] = data

    def _read_mem(self, addr, nbytes):
        return self.mem[addr:addr + nbytes].copy()

    def run(self, insn_addr, insn_count, *, regions=None, timeout_cycles=None):
        raw = self.mem[insn_addr:insn_addr + 16 * insn_count]
        self.runs.append((decode_program(self.config, raw), list(regions)))
        return RunResult(cycles=10, stats={"insn_count": insn_count})


@pytest.fixture
def dev():
    return RecordingDevice(preset("tiny"))


def builder(dev, **kw):
    kw.setdefault("verify", False)
    return ProgramBuilder(dev, **kw)


def rows(prog):
    n = len(prog["opcode"])
    return [{k: int(v[i]) for k, v in prog.items()} for i in range(n)]


def simple_alu(b, key="k", n=4, op=AluOp.ADD, imm=1):
    return b.alu(key, lambda k: k.uops(np.arange(n), np.arange(n)), op, use_imm=True, imm=imm)


def test_serial_program_flags_coalesced(dev):
    a = dev.alloc(4096)
    o = dev.alloc(4096)
    b = builder(dev)
    b.load_2d(a, 0, MemType.INP, 0, 1, 4, 4)
    b.dep_push(L, C)
    b.dep_pop(L, C)
    b.gemm("g", lambda k: k.uops([0], [0], [0]), reset=True)
    b.dep_push(C, S)
    b.dep_pop(C, S)
    b.store_2d(0, o, 0, 1, 1, 1)
    res = b.synchronize()
    assert res.stats["launches"] == 1 and res.cycles == 10
    prog, regions = dev.runs[0]
    r = rows(prog)
    ops = [x["opcode"] for x in r]
    # LOAD INP(push l2g), LOAD UOP, GEMM(pop l2g, push g2s), STORE(pop g2s, push s2g),
    # NOP-load? no: the INP load already pushed l2g -> drain adds a load NOP, FINISH
    assert ops[:4] == [Opcode.LOAD, Opcode.LOAD, Opcode.GEMM, Opcode.STORE]
    assert r[0]["push_next"] == 1 and r[0]["memory_type"] == MemType.INP
    assert r[1]["memory_type"] == MemType.UOP and r[1]["x_size"] == 1 and r[1]["y_size"] == 1
    assert r[2]["pop_prev"] == 1 and r[2]["push_next"] == 1
    assert r[3]["pop_prev"] == 1 and r[3]["push_prev"] == 1     # drain push on the store
    assert ops[-1] == Opcode.FINISH and r[-1]["pop_prev"] == 1 and r[-1]["pop_next"] == 1
    # exactly one NOP (the load module already used its push_next flag)
    nops = [x for x in r if x["opcode"] in (Opcode.LOAD, Opcode.STORE) and x["x_size"] == 0]
    assert len(nops) == 1 and nops[0]["push_next"] == 1
    # regions: the two data buffers + instruction and micro-op buffers
    assert {x.addr for x in regions} >= {a.addr, o.addr} and len(regions) == 4


def test_nop_when_push_flag_taken(dev):
    b = builder(dev)
    simple_alu(b)
    b.dep_push(C, S)
    b.dep_push(C, S)          # flag taken: a compute NOP carries the second push
    b.dep_pop(C, S)
    b.dep_pop(C, S)           # second pop pending on store: first committed as a NOP
    b.synchronize()
    r = rows(dev.runs[0][0])
    comp_nops = [x for x in r if x["opcode"] == Opcode.LOAD and x["memory_type"] == MemType.UOP
                 and x["x_size"] == 0]
    assert any(x["push_next"] for x in comp_nops)
    store_nops = [x for x in r if x["opcode"] == Opcode.STORE]
    assert sum(x["pop_prev"] for x in store_nops) == 2


def test_pending_pops_committed_before_push(dev):
    b = builder(dev)
    simple_alu(b)
    b.dep_push(C, S)
    b.dep_pop(C, S)
    b.dep_push(S, C)          # store has a pending pop: NOP pops, then pushes
    b.dep_pop(S, C)
    simple_alu(b)
    b.synchronize()
    r = rows(dev.runs[0][0])
    st = [x for x in r if x["opcode"] == Opcode.STORE]
    assert st[0]["pop_prev"] == 1 and st[0]["push_prev"] == 1
    alus = [x for x in r if x["opcode"] == Opcode.ALU]
    assert alus[1]["pop_next"] == 1


def test_load_store_dependency_rejected(dev):
    b = builder(dev)
    with pytest.raises(BuilderError, match="no load<->store"):
        b.dep_push(L, S)
    with pytest.raises(BuilderError, match="no load<->store"):
        b.dep_pop(S, L)
    with pytest.raises(BuilderError, match="itself"):
        b.dep_pop(C, C)


def test_unbalanced_pops_rejected(dev):
    b = builder(dev)
    b.dep_pop(L, C)
    simple_alu(b)
    with pytest.raises(BuilderError, match="l2g has 1 more pop"):
        b.synchronize()


def test_kernel_cache_hit_and_uop_load_placement(dev):
    b = builder(dev)
    calls = []

    def rec(k):
        calls.append(1)
        k.uops(np.arange(4), np.arange(4))

    for _ in range(3):
        b.alu("same", rec, AluOp.ADD, use_imm=True, imm=1)
    res = b.synchronize()
    assert len(calls) == 1 and res.stats["kernel_hits"] == 2
    r = rows(dev.runs[0][0])
    uop_loads = [i for i, x in enumerate(r) if x["opcode"] == Opcode.LOAD
                 and x["memory_type"] == MemType.UOP and x["x_size"]]
    assert len(uop_loads) == 1
    assert r[uop_loads[0] + 1]["opcode"] == Opcode.ALU      # just before its first use
    alus = [x for x in r if x["opcode"] == Opcode.ALU]
    assert all((x["uop_bgn"], x["uop_end"]) == (0, 4) for x in alus)


def test_kernel_keys_distinct(dev):
    b = builder(dev)
    rec = lambda k: k.uops(np.arange(4), np.arange(4))       # noqa: E731
    ks = [b.kernel("k", rec, "alu", alu_op=AluOp.ADD, use_imm=True, imm=1),
          b.kernel("k", rec, "alu", alu_op=AluOp.ADD, use_imm=True, imm=2),
          b.kernel("k", rec, "alu", alu_op=AluOp.MAX, use_imm=True, imm=1),
          b.kernel("k", rec, "alu", alu_op=AluOp.ADD, use_imm=False),
          b.kernel("k", rec, "alu", alu_op=AluOp.ADD, use_imm=True, imm=1, reset=True),
          b.kernel("k", rec, "gemm")]
    assert len({k.key for k in ks}) == len(ks)
    assert len({id(k) for k in ks}) == len(ks)


def test_check_keys_catches_reused_key(dev):
    b = builder(dev, check_keys=True)
    b.gemm(("conv", 1), lambda k: k.uops([0], [0], [0]))
    with pytest.raises(BuilderError, match="reused for different micro-ops"):
        b.gemm(("conv", 1), lambda k: k.uops([1], [0], [0]))


def test_content_keyed_residency(dev):
    """Two keys with identical micro-ops share the scratchpad copy; different content
    never aliases even if a caller's keys collide."""
    b = builder(dev)
    b.alu("a", lambda k: k.uops(np.arange(4), np.arange(4)), AluOp.ADD, use_imm=True, imm=1)
    b.alu("b", lambda k: k.uops(np.arange(4), np.arange(4)), AluOp.MAX, use_imm=True, imm=1)
    b.alu("c", lambda k: k.uops(np.arange(4) + 1, np.arange(4)), AluOp.ADD, use_imm=True,
          imm=1)
    res = b.synchronize()
    # two distinct contents, placed side by side (the first LOAD of a launch is never
    # extended, so each has its own here)
    assert res.stats["uop_loads"] + res.stats["uop_loads_merged"] == 2
    assert res.stats["uop_words_loaded"] == 8


def test_uop_load_merge_never_overwrites_a_kernel_in_use():
    """Kernels placed right after the previous micro-op LOAD join it, unless an instruction
    between that LOAD and the kernel's first use still runs micro-ops the kernel would
    overwrite.  Oracle: replay the LOADs into a model scratchpad and check that every ALU
    instruction finds its own micro-ops there."""
    cfg = preset("tiny").replace(LOG_UOP_BUFF_SIZE=8)       # 64 micro-ops
    dev = RecordingDevice(cfg)
    b = builder(dev, debug=True)
    kern = {"k0": (4, 500), "k1": (36, 0), "k2": (24, 100), "k3": (30, 200), "k4": (20, 300)}

    def rec(name):
        n, o = kern[name]
        return lambda k: k.uops(np.arange(n) + o, np.arange(n))
    for name in ("k0", "k1", "k2", "k3", "k2", "k4"):
        # k0 [0,4) the launch's first LOAD, never extended; k1 [4,40) LOAD; k2 [40,64) joins
        # it; k3 wraps to [0,30): LOAD; k2 still resident runs; k4 [30,50) follows k3's LOAD
        # but overlaps k2, used since: a LOAD of its own
        b.alu(name, rec(name), AluOp.ADD, use_imm=True, imm=1)
    res = b.synchronize()
    r = rows(dev.runs[0][0])
    loads = [(x["sram_base"], x["x_size"]) for x in r
             if x["opcode"] == Opcode.LOAD and x["memory_type"] == MemType.UOP and x["x_size"]]
    assert loads == [(0, 4), (4, 60), (0, 30), (30, 20)]
    assert res.stats["uop_loads_merged"] == 1
    sram = np.full(64, -1, np.int64)
    words = b.last_uops[0]
    base = min(x["dram_base"] for x in r if x["opcode"] == Opcode.LOAD
               and x["memory_type"] == MemType.UOP and x["x_size"])
    for x in r:
        if x["opcode"] == Opcode.LOAD and x["memory_type"] == MemType.UOP and x["x_size"]:
            off = x["dram_base"] - base
            sram[x["sram_base"]:x["sram_base"] + x["x_size"]] = words[off:off + x["x_size"]]
        if x["opcode"] == Opcode.ALU:
            got = decode_uops(cfg, sram[x["uop_bgn"]:x["uop_end"]].astype(np.uint32))
            n = x["uop_end"] - x["uop_bgn"]
            o = {n_: o_ for n_, o_ in kern.values()}[n]
            np.testing.assert_array_equal(got["dst"], np.arange(n) + o)


def test_eviction_ring_tiny_uop_buffer():
    cfg = preset("tiny").replace(LOG_UOP_BUFF_SIZE=8)       # 64 micro-ops
    dev = RecordingDevice(cfg)
    b = builder(dev, debug=True)
    ka = lambda k: k.uops(np.arange(40), np.arange(40))      # noqa: E731
    kb = lambda k: k.uops(np.arange(30), np.arange(30) + 1)  # noqa: E731
    b.alu("a", ka, AluOp.ADD, use_imm=True, imm=1)           # [0, 40)
    b.alu("b", kb, AluOp.ADD, use_imm=True, imm=1)           # wraps to [0, 30): evicts a
    b.alu("a", ka, AluOp.ADD, use_imm=True, imm=1)           # reload at [30, 70)? no: wrap
    b.alu("b", kb, AluOp.ADD, use_imm=True, imm=1)
    res = b.synchronize()
    r = rows(dev.runs[0][0])
    loads = [(x["sram_base"], x["x_size"]) for x in r
             if x["opcode"] == Opcode.LOAD and x["memory_type"] == MemType.UOP and x["x_size"]]
    assert res.stats["uop_loads"] == len(loads) == 4
    assert all(s + n <= 64 for s, n in loads)
    # staging holds each kernel once (bounded, BR-18)
    assert b.last_uops[0].size == 70
    # every ALU's range holds its own micro-ops at that point of the stream
    sram = np.full(64, -1, np.int64)
    words = b.last_uops[0]
    for x in r:
        if x["opcode"] == Opcode.LOAD and x["memory_type"] == MemType.UOP and x["x_size"]:
            off = x["dram_base"] - min(y["dram_base"] for y in r if y["opcode"] == Opcode.LOAD
                                       and y["memory_type"] == MemType.UOP and y["x_size"])
            sram[x["sram_base"]:x["sram_base"] + x["x_size"]] = words[off:off + x["x_size"]]
        if x["opcode"] == Opcode.ALU:
            got = decode_uops(cfg, sram[x["uop_bgn"]:x["uop_end"]].astype(np.uint32))
            n = x["uop_end"] - x["uop_bgn"]
            assert n in (40, 30)
            if n == 40:
                np.testing.assert_array_equal(got["dst"], np.arange(40))
            else:
                np.testing.assert_array_equal(got["src"], np.arange(30) + 1)


def test_uop_cache_reset_every_launch(dev):
    b = builder(dev)
    simple_alu(b)
    b.synchronize()
    simple_alu(b)
    res = b.synchronize()
    assert res.stats["uop_loads"] == 1       # reloaded in the second launch (BR-18)


def test_kernel_structure_errors(dev):
    b = builder(dev)

    def three_loops(k):
        with k.loop(2, 1, 1):
            with k.loop(2, 1, 1):
                with k.loop(2, 1, 1):
                    k.uop(0, 0)

    def uop_outside(k):
        k.uop(0, 0)
        with k.loop(2, 1, 1):
            k.uop(1, 1)

    def sibling(k):
        with k.loop(2, 1, 1):
            k.uop(0, 0)
        k.uop(1, 1)

    for fn, msg in ((three_loops, "at most 2 nested loops"), (uop_outside, "loop_begin after"),
                    (sibling, "innermost loop body"), (lambda k: None, "no micro-ops")):
        with pytest.raises(BuilderError, match=msg):
            b.gemm(("bad", fn.__name__), fn)
    with pytest.raises(BuilderError, match="ACC scratchpad has"):
        b.gemm("oob", lambda k: k.uop(dev.config.ACC_DEPTH, 0))
    with pytest.raises(BuilderError, match="loop extent"):
        b.gemm("ext", lambda k: (k.loop_begin(1 << 14, 0, 0), k.uop(0, 0), k.loop_end()))
    with pytest.raises(BuilderError, match="src_factor = 4096 is out of range"):
        b.gemm("wide", lambda k: (k.loop_begin(2, 0, 4096), k.uop(0, 0), k.loop_end()))
    # a one-iteration loop never applies its factors: any non-negative one is accepted and
    # recorded as 0; a negative one is still refused
    kern = b.gemm("one", lambda k: (k.loop_begin(1, 1 << 20, 4096, 7), k.uop(0, 0), k.loop_end()))
    assert kern.loops == ((1, 0, 0, 0),)
    with pytest.raises(BuilderError, match="dst_factor = -1 is out of range"):
        b.gemm("neg", lambda k: (k.loop_begin(1, -1, 0), k.uop(0, 0), k.loop_end()))
    with pytest.raises(BuilderError, match="ALU_MUL"):
        simple_alu(b, op=AluOp.MUL)
    with pytest.raises(BuilderError, match="imm"):
        simple_alu(b, imm=1 << 15)


def test_load_store_validation(dev):
    cfg = dev.config
    b = builder(dev)
    buf = dev.alloc(16 * cfg.elem_bytes(MemType.INP))
    with pytest.raises(BuilderError, match="pad x1 = 16 is out of range"):
        b.load_2d(buf, 0, MemType.INP, 0, 1, 4, 4, pad=(0, 0, 0, 16))
    with pytest.raises(BuilderError, match="y_size = 70000 is out of range"):
        b.load_2d(buf, 0, MemType.INP, 0, 70000, 1, 1)
    with pytest.raises(BuilderError, match="exceed the buffer"):
        b.load_2d(buf, 0, MemType.INP, 0, 2, 4, 16)
    with pytest.raises(BuilderError, match="UOP is not allowed"):
        b.load_2d(buf, 0, MemType.UOP, 0, 1, 4, 4)
    with pytest.raises(BuilderError, match="OUT is not allowed"):
        b.load_2d(buf, 0, MemType.OUT, 0, 1, 4, 4)
    with pytest.raises(BuilderError, match="exceeds the INP scratchpad"):
        b.load_2d(buf, 0, MemType.INP, cfg.INP_DEPTH - 2, 1, 4, 4)
    with pytest.raises(BuilderError, match="store_2d x_size = 0"):
        b.store_2d(0, buf, 0, 1, 0, 0)
    assert b.pending_insns == 0


def test_load_module_and_dram_base(dev):
    cfg = dev.config
    b = builder(dev)
    buf = dev.alloc(64 * cfg.elem_bytes(MemType.ACC))
    for mem in (MemType.INP, MemType.WGT, MemType.ACC, MemType.ACC8):
        b.load_2d(buf, 3, mem, 0, 1, 2, 2, pad=(1, 0, 0, 1))
    b.synchronize()
    r = rows(dev.runs[0][0])
    loads = [x for x in r if x["opcode"] == Opcode.LOAD and x["x_size"]]
    for x, mem in zip(loads, (MemType.INP, MemType.WGT, MemType.ACC, MemType.ACC8)):
        assert x["memory_type"] == mem
        assert x["dram_base"] == buf.addr // cfg.elem_bytes(mem) + 3
        assert (x["y_pad_0"], x["x_pad_1"]) == (1, 1)


def test_split_launches_structure():
    dev = RecordingDevice(preset("tiny"))
    b = builder(dev, max_insns_per_launch=12)
    a = dev.alloc(4096)
    o = dev.alloc(4096)
    for t in range(6):                # 6 independent serial tiles
        b.load_2d(a, t, MemType.ACC, 0, 1, 1, 1)
        simple_alu(b, n=1)
        b.dep_push(C, S)
        b.dep_pop(C, S)
        b.store_2d(0, o, t, 1, 1, 1)
    res = b.synchronize()
    assert res.stats["launches"] == len(dev.runs) >= 2
    assert res.cycles == 10 * len(dev.runs)
    for prog, _ in dev.runs:
        assert len(prog["opcode"]) <= 12
        assert prog["opcode"][-1] == Opcode.FINISH
        # every launch reloads its micro-ops before use
        ops = list(prog["opcode"])
        first_alu = ops.index(Opcode.ALU)
        assert any(prog["memory_type"][i] == MemType.UOP and prog["x_size"][i]
                   for i in range(first_alu))


def test_no_split_when_scratchpad_state_carried():
    """Accumulator state carried across the whole program: no safe split point, one
    (oversized) launch rather than a wrong result."""
    dev = RecordingDevice(preset("tiny"))
    b = builder(dev, max_insns_per_launch=8)
    a = dev.alloc(4096)
    o = dev.alloc(4096)
    b.load_2d(a, 0, MemType.ACC, 0, 1, 1, 1)
    for i in range(10):
        simple_alu(b, key=("k", i), n=1, imm=i)
    b.dep_push(C, S)
    b.dep_pop(C, S)
    b.store_2d(0, o, 0, 1, 1, 1)
    res = b.synchronize()
    assert res.stats["launches"] == 1 and res.stats["oversized_launches"] == 1


def test_debug_keeps_program(dev):
    b = builder(dev, debug=True)
    simple_alu(b)
    b.synchronize()
    assert b.last_program.dtype == np.uint8 and b.last_program.shape[1] == 16
    assert "FINISH" in b.disassemble()[-1]
    b2 = builder(dev)
    simple_alu(b2)
    b2.synchronize()
    with pytest.raises(BuilderError, match="debug=True"):
        b2.disassemble()


def test_empty_synchronize(dev):
    res = builder(dev).synchronize()
    assert res.stats["launches"] == 0 and not dev.runs
