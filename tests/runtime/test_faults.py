"""Regression tests for the faults of issue 10 (item 5), each with its reproduction.

F1: a STORE over the program's own instructions is refused statically (fsim, the verifier
and the rtl backend, one message).  F2: micro-ops the program STOREs and then LOADs index
past a scratchpad: fsim refuses at run time, and the core reports it (STATUS.ERROR) with
fsim's message instead of wrapping the index.  F3: rtl runs images whose size is not a multiple of the
bus beat.  F4: ``--max-steps``/``timeout_cycles`` on rtl is exact.  F5: the builder honours
the command- and token-queue capacities.  Bundles carry the config fingerprint.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from programs import AluOp, Image, MemType, alu, finish, gemm, ld, st
from vtaforge.cli import main
from vtaforge.hw.config import preset
from vtaforge.runtime.bundle import load_bundle
from vtaforge.runtime.device import Buffer, ProgramError
from vtaforge.runtime.fsim import simulate
from vtaforge.runtime.verify import verify_program

DATA = Path(__file__).parent / "data"
TINY = preset("tiny")
SELF_STORE = "overlaps the program's own instructions"


def _rtl():
    rtl = pytest.importorskip("vtaforge.runtime.rtl")
    pytest.importorskip("vtaforge.hw.core")
    return rtl


def cli(args):
    r = CliRunner().invoke(main, args)
    return r.exit_code, r.stdout, r.stderr


# ------------------------------------------------------------------------------ F1
def self_store_program(cfg, store_row_end_gap: int):
    """LOAD ACC, STORE 16 bytes ending ``store_row_end_gap`` bytes before the first
    instruction (negative: inside the instruction area), FINISH."""
    img = Image(cfg)
    acc = img.put((np.arange(cfg.elem_bytes(MemType.ACC), dtype=np.uint8) % 50) + 7)
    eo = cfg.elem_bytes(MemType.OUT)
    n_out = 16 // eo if eo <= 16 else 1
    ia = -(-(img.cursor + 64) // img.align) * img.align
    img.cursor = ia  # the program goes right here (no guard)
    dst = ia - n_out * eo - store_row_end_gap
    insns = [ld(MemType.ACC, 0, img.base(acc, MemType.ACC), 1, 1, push_next=1),
             st(0, dst // eo, 1, n_out, pop_prev=1, push_prev=1),
             finish(pop_next=1)]
    dram, got, n = img.build(insns)
    assert got == ia
    return dram, ia, n


def test_f1_bundle_refused_by_fsim_and_verifier():
    dram, ia, n = load_bundle(DATA / "f1_selfstore.npz")
    before = dram.copy()
    with pytest.raises(ProgramError, match=SELF_STORE) as e1:
        simulate(TINY, dram, ia, n)
    np.testing.assert_array_equal(dram, before)  # static: nothing ran
    with pytest.raises(ProgramError) as e2:
        verify_program(TINY, dram, ia, n)
    assert str(e1.value) == str(e2.value)
    assert str(e1.value).startswith("instruction 2 (STORE")


@pytest.mark.parametrize("elems", [1, 4])
def test_f1_overlap_edges_refused(elems):
    """The last element (1) or the whole store (4 of 4) over the first instruction."""
    dram, ia, n = self_store_program(TINY, -elems * TINY.elem_bytes(MemType.OUT))
    with pytest.raises(ProgramError, match=SELF_STORE):
        verify_program(TINY, dram, ia, n)


def test_f1_store_just_below_instructions_accepted():
    dram, ia, n = self_store_program(TINY, 0)
    verify_program(TINY, dram, ia, n)
    simulate(TINY, dram, ia, n)


def test_f1_strided_rows_straddling_instructions_accepted():
    """Only the bytes a STORE writes count: rows that skip over the program are legal."""
    cfg = TINY
    eo = cfg.elem_bytes(MemType.OUT)
    img = Image(cfg)
    acc = img.put(np.ones(2 * cfg.elem_bytes(MemType.ACC), dtype=np.uint8))
    ia = -(-(img.cursor + 64) // img.align) * img.align
    img.cursor = ia
    insns = [ld(MemType.ACC, 0, img.base(acc, MemType.ACC), 1, 2, push_next=1),
             None, finish(pop_next=1)]
    prog_bytes = 16 * len(insns)
    row0 = ia - eo  # row 0 ends at ia, row 1 starts just after the program
    stride = (prog_bytes + eo) // eo + 1
    insns[1] = st(0, row0 // eo, 2, 1, stride=stride, pop_prev=1, push_prev=1)
    dram, got, n = img.build(insns, tail=stride * eo + 64)
    verify_program(cfg, dram, got, n)
    # the same store with a stride that lands row 1 inside the program is refused
    insns[1] = st(0, row0 // eo, 2, 1, stride=2, pop_prev=1, push_prev=1)
    img2 = Image(cfg)
    img2.put(np.ones(2 * cfg.elem_bytes(MemType.ACC), dtype=np.uint8))
    img2.cursor = ia
    dram2, _, _ = img2.build(insns, tail=64)
    with pytest.raises(ProgramError, match=r"\(row 1\) " + SELF_STORE):
        verify_program(cfg, dram2, ia, n)


def test_f1_exec_cli_exit_2(tmp_path):
    code, out, err = cli(["exec", str(DATA / "f1_selfstore.npz"), "--config", "tiny"])
    assert code == 2 and SELF_STORE in err, (code, err)


@pytest.mark.rtl
def test_f1_rtl_refuses_with_fsim_message():
    rtl = _rtl()
    dram, ia, n = load_bundle(DATA / "f1_selfstore.npz")
    before = dram.copy()
    with pytest.raises(ProgramError) as e:
        rtl.run_raw(TINY, dram, ia, n, progress=False, timeout_cycles=100_000)
    ref = dram.copy()
    with pytest.raises(ProgramError) as e2:
        simulate(TINY, ref, ia, n)
    assert str(e.value) == str(e2.value)
    np.testing.assert_array_equal(dram, before)


# ------------------------------------------------------------------------------ F2
F2_MSG = ("instruction 5 (ALU ADD   [---N] uop[1:2] out=2(d511,s0) in=1(d0,s0) imm=0): "
          "computed dst index 768 is outside the ACC scratchpad (depth 512)")


def self_made_uop_program(cfg):
    """The F2 reproduction (tiny: an OUT element is one 4-byte micro-op word).

    The program makes ACC 0 hold 1 in every lane, STOREs it over a zero micro-op word,
    LOADs that word back as micro-op 1 (now ``dst = 0x101 & 0x1ff = 257``) and runs an
    ALU over it with ``iter_out = 2``, ``dst_factor_out = 511``: the last iteration's
    ``dst`` is 257 + 511 = 768, past the 512-entry ACC.  Against the initial image (a zero
    word: ``dst`` 0 + 511) every index is in range, so the static verifier passes it.  A
    last STORE (ACC 0 to ``probe``) comes after the fault.

    Returns ``(dram, insn_addr, insn_count, probe_addr)``.
    """
    assert cfg.elem_bytes(MemType.OUT) == 4 == cfg.elem_bytes(MemType.UOP)
    img = Image(cfg)
    u0 = img.uops([0], [0])
    u1 = img.zeros(64)
    probe = img.put(np.full(64, 0xA5, np.uint8))
    insns = [ld(MemType.UOP, 0, img.base(u0, MemType.UOP), 1, 1),
             alu(AluOp.ADD, 0, 1, imm=0, reset=1),
             alu(AluOp.ADD, 0, 1, imm=1, push_next=1),
             st(0, img.base(u1, MemType.OUT), 1, 1, pop_prev=1, push_prev=1),
             ld(MemType.UOP, 1, img.base(u1, MemType.UOP), 1, 1, pop_next=1),
             alu(AluOp.ADD, 1, 2, iter_out=2, dfo=511, imm=0, push_next=1),
             st(0, img.base(probe, MemType.OUT), 1, 1, pop_prev=1, push_prev=1),
             finish(pop_next=1)]
    dram, ia, n = img.build(insns)
    return dram, ia, n, probe


def test_f2_verifier_passes_fsim_refuses_at_run_time():
    dram, ia, n, _ = self_made_uop_program(TINY)
    verify_program(TINY, dram.copy(), ia, n)  # sees only the initial (zero) micro-op
    with pytest.raises(ProgramError) as e:
        simulate(TINY, dram.copy(), ia, n)
    assert str(e.value) == F2_MSG


@pytest.mark.rtl
def test_f2_rtl_reports_the_fault_with_fsim_message():
    rtl = _rtl()
    dram, ia, n, probe = self_made_uop_program(TINY)
    before = dram.copy()
    with pytest.raises(ProgramError) as e:
        rtl.run_raw(TINY, dram, ia, n, progress=False, timeout_cycles=100_000)
    assert str(e.value) == F2_MSG
    np.testing.assert_array_equal(dram, before)  # run_raw keeps the image on error
    # on the device itself: the run completed, the report is in the registers, and
    # nothing was written after the fault (the probe STORE left DRAM as it was)
    dev = rtl.RtlDevice(TINY, 1 << 16, progress=False)
    try:
        dev.resize(dram.size + 64)
        dev.mem[:dram.size] = dram
        with pytest.raises(ProgramError) as e2:
            dev.run(ia, n, regions=[Buffer(0, dram.size)])
        assert str(e2.value) == F2_MSG
        from vtaforge.hw.isa import Module
        from vtaforge.hw.regs import ErrorKind
        assert e2.value.unit == Module.COMPUTE and e2.value.kind == ErrorKind.ACC_DST
        assert (e2.value.index, e2.value.insn_index) == (768, 5)
        assert dev.reg_read("STATUS") & 0b110 == 0b110  # DONE and ERROR
        np.testing.assert_array_equal(dev.mem[probe:probe + 64], before[probe:probe + 64])
        # the micro-op word the program stored is there (the fault came after it)
        assert dev.mem[probe - 64:probe - 60].tolist() == [1, 1, 1, 1]
        # START clears the report: a clean program on the same core runs
        ok, ia2, n2 = Image(TINY).build([finish()])
        dev.mem[:ok.size] = ok
        dev.run(ia2, n2, regions=[Buffer(0, ok.size)])
        assert dev.reg_read("STATUS") & 0b100 == 0 and dev.reg_read("ERROR") == 0
    finally:
        dev.close()


def _hw_fault_cases(cfg):
    """Programs with an out-of-range index that the static verifier would refuse; run with
    ``verify=False`` they show each hardware check: (name, dram, ia, n)."""
    out = []

    def case(name, uops, insns):
        img = Image(cfg)
        u = img.uops(*uops)
        d = img.zeros(4 * cfg.elem_bytes(MemType.ACC))
        body = [ld(MemType.UOP, 0, img.base(u, MemType.UOP), 1, len(uops[0]))]
        body += [i(img.base(d, MemType.ACC), img.base(d, MemType.OUT)) for i in insns]
        body.append(finish())
        dram, ia, n = img.build(body)
        out.append((name, dram, ia, n))

    # GEMM dst: micro-ops dst [10, 500], iter_out 3, dst_factor_out 20: the first
    # out-of-range index is 520 (i=1, k=1), not the largest (540)
    case("gemm_dst_first_not_max", ([10, 500], [0, 0], [0, 0]),
         [lambda a, o: gemm(0, 2, iter_out=3, d=(20, 0))])
    case("gemm_src", ([0], [1000], [0]), [lambda a, o: gemm(0, 1, iter_in=2, s=(0, 30))])
    case("gemm_wgt", ([0], [0], [500]), [lambda a, o: gemm(0, 1, iter_in=3, w=(0, 6))])
    case("gemm_dst_and_src_same_uop", ([511], [1023], [0]),
         [lambda a, o: gemm(0, 1, iter_out=2, d=(1, 0), s=(1, 0))])
    case("alu_tensor_src", ([0], [510], [0]),
         [lambda a, o: alu(AluOp.MAX, 0, 1, iter_in=4, sfi=1)])
    case("alu_reset_dst", ([0], [0], [0]),
         [lambda a, o: alu(AluOp.ADD, 0, 1, iter_out=3, iter_in=2, dfo=256, dfi=1,
                           reset=1)])
    case("uop_range", ([0], [0], [0]), [lambda a, o: gemm(1020, 1026)])
    case("acc_load_range", ([0], [0], [0]), [lambda a, o: ld(MemType.ACC, 510, a, 1, 4)])
    case("inp_load_range_pad", ([0], [0], [0]),
         [lambda a, o: ld(MemType.INP, 1020, a, 1, 1, pads=(1, 0, 1, 1))])
    case("store_range", ([0], [0], [0]),
         [lambda a, o: ld(MemType.ACC, 0, a, 1, 4),
          lambda a, o: gemm(0, 1, reset=1, push_next=1),
          lambda a, o: st(509, o, 1, 4, pop_prev=1)])
    return out


def test_hw_fault_cases_are_refused_by_fsim():
    for name, dram, ia, n in _hw_fault_cases(TINY):
        with pytest.raises(ProgramError, match="index|range"):
            simulate(TINY, dram.copy(), ia, n)
    dram, ia, n = _hw_fault_cases(TINY)[0][1:]
    with pytest.raises(ProgramError, match=r"computed dst index 520 is outside the ACC"):
        simulate(TINY, dram, ia, n)


@pytest.mark.rtl
def test_hw_fault_checks_match_fsim_messages():
    """Every unit's check, without the static verifier: the core's report formats to
    fsim's message, word for word."""
    rtl = _rtl()
    for name, dram, ia, n in _hw_fault_cases(TINY):
        with pytest.raises(ProgramError) as ref:
            simulate(TINY, dram.copy(), ia, n)
        with pytest.raises(ProgramError) as got:
            rtl.run_raw(TINY, dram.copy(), ia, n, progress=False, verify=False,
                        timeout_cycles=200_000)
        assert str(got.value) == str(ref.value), name


@pytest.mark.rtl
def test_f2_simulated_pynq_board_reports_the_fault(tmp_path, monkeypatch):
    """The pynq backend on the simulated board (fakepynq): the run ends in a ProgramError
    with fsim's text exactly (the backend gives the driver its program reader); without a
    reader the instruction is named by its unit and ordinal."""
    _rtl()
    pytest.importorskip("vtaforge.runtime.pynq")
    import test_pynq_sim as ps  # noqa: PLC0415  (skips without the core)

    monkeypatch.delenv("VTAFORGE_BITSTREAM", raising=False)
    b = ps.fakepynq.SimBoard(*ps.model_of("tiny"))
    ps.fakepynq.use(monkeypatch, b)
    try:
        bit = ps.write_overlay(tmp_path)
        dram, ia, n, _ = self_made_uop_program(TINY)
        dev = ps.device(TINY, bit)
        with pytest.raises(ProgramError) as e:
            ps.backend.run_raw(TINY, dram.copy(), ia, n, device=dev)
        assert str(e.value) == F2_MSG
        dev.driver.read_program = None
        with pytest.raises(ProgramError) as e2:
            ps.backend.run_raw(TINY, dram.copy(), ia, n, device=dev)
        detail = F2_MSG.split(": ", 1)[1]
        assert str(e2.value) == f"compute instruction #4 of the run: {detail}"
    finally:
        ps.fakepynq.detach()
        b.close()


# ------------------------------------------------------------------------------ F3
@pytest.mark.rtl
def test_f3_rtl_runs_image_not_whole_beats(tmp_path):
    """The image is 204 bytes (tiny's beat is 8) and a LOAD reads its last 8 bytes, from an
    address that is not beat-aligned: rtl refused it ("AXI read burst outside the DRAM
    image"); now both backends run it and agree on every byte."""
    _rtl()
    b = DATA / "f3_partial_beat.npz"
    dram, _, _ = load_bundle(b)
    assert dram.size % (TINY.BUS_WIDTH // 8)
    finals = {}
    for target in ("fsim", "rtl"):
        out = tmp_path / f"{target}.npz"
        code, _, err = cli(["exec", str(b), "--config", "tiny", "--target", target,
                            "-o", str(out)])
        assert code == 0, err
        with np.load(out) as z:
            finals[target] = z["dram"].copy()
    assert finals["rtl"].size == dram.size
    np.testing.assert_array_equal(finals["rtl"], finals["fsim"])


# ------------------------------------------------------------------------------ F4
@pytest.mark.rtl
def test_f4_rtl_max_steps_is_exact(tmp_path):
    """``--max-steps N`` on rtl was checked only every 256 cycles (a 37-cycle run passed
    with N = 5); now a run passes iff its CYCLES <= N."""
    _rtl()
    b = str(DATA / "f3_partial_beat.npz")
    code, out, err = cli(["exec", b, "--config", "tiny", "--target", "rtl"])
    assert code == 0, err
    cycles = json.loads(out)["cycles"]
    assert cycles > 5
    code, out, err = cli(["exec", b, "--config", "tiny", "--target", "rtl",
                          "--max-steps", str(cycles)])
    assert code == 0, err
    assert json.loads(out)["stats"]["sim_cycles"] <= cycles + 64  # not a whole poll past
    for n in (5, cycles - 1):
        code, out, err = cli(["exec", b, "--config", "tiny", "--target", "rtl",
                              "--max-steps", str(n)])
        assert code == 2 and "RTL watchdog" in err, (n, err)
        assert f"after {n} cycles" in err or f"watchdog's {n}" in err, (n, err)


@pytest.mark.rtl
def test_f4_watchdog_stops_the_clock_at_the_limit():
    """A hung core is clocked up to the limit (plus a STATUS read), not to the next poll."""
    rtl = _rtl()
    dram, ia, n = load_bundle(DATA / "f3_partial_beat.npz")
    dev = rtl.RtlDevice(TINY, 1 << 16, progress=False, poll_interval=100_000)
    try:
        dev.resize(rtl.device._whole_beats(TINY, dram.size))
        dev.mem[:dram.size] = dram
        from vtaforge.runtime.device import Buffer

        c0 = dev.cycle
        with pytest.raises(ProgramError, match="RTL watchdog"):
            dev.run(ia, n, regions=[Buffer(0, dram.size)], timeout_cycles=10)
        assert dev.cycle - c0 < 100
    finally:
        dev.close()


# ------------------------------------------------------------------------------ F5
def _shallow(name, insn_q=1, tok_q=1):
    import dataclasses

    return dataclasses.replace(preset(name), INSN_QUEUE_DEPTH=insn_q, TOKEN_QUEUE_DEPTH=tok_q)


@pytest.mark.parametrize("depths", [(1, 1), (2, 1), (1, 2), (3, 1)])
def test_f5_builder_pipeline_on_shallow_queues(depths):
    """The double-buffered GEMM of test_builder_e2e deadlocked with one-entry queues."""
    from test_builder_e2e import emit_two_thread_gemm, gemm_data, gemm_oracle, read_out, upload
    from vtaforge.runtime.builder import ProgramBuilder
    from vtaforge.runtime.fsim import FsimDevice

    cfg = _shallow("tiny", *depths)
    dev = FsimDevice(cfg, mem_bytes=16 << 20)
    o, n, m = 4, 1, 4
    inp, wgt = gemm_data(cfg, o, n, m, seed=3)
    ib, wb = upload(dev, inp), upload(dev, wgt)
    ob = dev.alloc(o * m * cfg.elem_bytes(MemType.OUT))
    b = ProgramBuilder(dev, debug=True)
    emit_two_thread_gemm(b, ib, wb, ob, o, n, m)
    res = b.synchronize()
    assert res.stats["reordered_launches"] == 1
    got = read_out(dev, ob, o * m).reshape(o, m, cfg.BATCH, cfg.BLOCK_OUT)
    np.testing.assert_array_equal(got, gemm_oracle(inp, wgt))
    # the same program on the deep-queue preset keeps its order
    dev2 = FsimDevice(preset("tiny"), mem_bytes=16 << 20)
    ib, wb = upload(dev2, inp), upload(dev2, wgt)
    ob = dev2.alloc(o * m * cfg.elem_bytes(MemType.OUT))
    b2 = ProgramBuilder(dev2)
    emit_two_thread_gemm(b2, ib, wb, ob, o, n, m)
    assert b2.synchronize().stats["reordered_launches"] == 0


def test_f5_compiled_conv_on_one_entry_queues():
    """A compiled 3x3 conv (32 -> 32 channels, 16x16) on tiny with INSN_QUEUE_DEPTH = 1 and
    TOKEN_QUEUE_DEPTH = 1 deadlocked ("compute stalled ... g2l is full"); now it is exact."""
    pytest.importorskip("onnx")
    from vtaforge.compiler.compile import lower_graph
    from vtaforge.compiler.ir import Graph, Node, TensorType, validate
    from vtaforge.compiler.requant import requant_round
    from vtaforge.compiler.partition import partition
    from vtaforge.runtime.executor import Executor
    from vtaforge.runtime.fsim import FsimDevice

    rng = np.random.default_rng(0)
    cin = cout = 32
    h, k, shift = 16, 3, 8
    x = rng.integers(-128, 128, (1, cin, h, h)).astype(np.int8)
    w = rng.integers(-127, 128, (cout, cin, k, k)).astype(np.int8)
    bias = rng.integers(-5000, 5000, cout).astype(np.int32)
    g = Graph(name="conv", kind="quantized")
    g.inputs, g.outputs = ["input"], ["out"]
    g.types["input"] = TensorType("float32", ("N", cin, h, h))
    g.add_constant("w", w, 0)
    g.add_constant("b", bias, 0)
    attrs = {"kernel": (k, k), "strides": (1, 1), "pads": (1, 1, 1, 1), "groups": 1,
             "shift": shift, "round": requant_round(shift), "mult": 1, "clip_lo": -128,
             "clip_hi": 127, "exp_out": shift}
    for name, op, ins, at, t, out in [
            ("q", "quantize", ["input"], {"exp": 0}, TensorType("int8", ("N", cin, h, h), 0), "xq"),
            ("c", "qconv2d", ["xq", "w", "b"], attrs, TensorType("int8", ("N", cout, h, h), shift), "y"),
            ("d", "dequantize", ["y"], {}, TensorType("float32", ("N", cout, h, h)), "out")]:
        g.nodes.append(Node(name, op, ins, [out], at))
        g.types[out] = t
    validate(g)
    # numpy oracle: direct loops over the window, round-half-up requantization
    xp = np.pad(x.astype(np.int64), ((0, 0), (0, 0), (1, 1), (1, 1)))
    acc = np.zeros((1, cout, h, h), np.int64)
    for i in range(k):
        for j in range(k):
            acc += np.einsum("nchw,oc->nohw", xp[:, :, i:i + h, j:j + h], w[:, :, i, j].astype(np.int64))
    acc += bias.reshape(1, -1, 1, 1)
    want = np.clip((acc + (1 << (shift - 1))) >> shift, -128, 127).astype(np.int8)
    cfg = _shallow("tiny")
    cm = lower_graph(g, partition(g, cfg))
    got = Executor(cm, FsimDevice(cfg)).run(x.astype(np.float32), keep=True)["y"]
    np.testing.assert_array_equal(got, want)


def test_f5_impossible_capacity_refused_with_reason():
    """Load pushes two l2g before popping g2l; compute pushes two g2l before popping l2g:
    fine with deep token queues, impossible with one-token queues in any order."""
    from vtaforge.hw.isa import Insn, Opcode
    from vtaforge.runtime.kernels import BuilderError
    from vtaforge.runtime.launch import capacity_order

    inp, uop = int(MemType.INP), int(MemType.UOP)
    insns = [Insn(Opcode.LOAD, memory_type=inp, push_next=1),
             Insn(Opcode.LOAD, memory_type=uop, push_prev=1),
             Insn(Opcode.LOAD, memory_type=inp, push_next=1),
             Insn(Opcode.LOAD, memory_type=uop, push_prev=1),
             Insn(Opcode.LOAD, memory_type=inp, pop_next=1),
             Insn(Opcode.LOAD, memory_type=inp, pop_next=1),
             Insn(Opcode.LOAD, memory_type=uop, pop_prev=1),
             Insn(Opcode.FINISH, pop_prev=1)]
    assert capacity_order(insns, 2) is None
    with pytest.raises(BuilderError, match=r"TOKEN_QUEUE_DEPTH = 1.*token queue (g2l|l2g)"):
        capacity_order(insns, 1)


# ------------------------------------------------------------------------------ bundles
def test_bundle_fingerprint_refuses_another_config(tmp_path):
    """A pynq bundle run with ``--config tiny`` ran and returned zeros; a bundle written
    with its config now records the fingerprint and refuses another config (exit 2)."""
    from vtaforge.runtime.bundle import FINGERPRINT_KEY, BundleError, save_bundle

    dram, ia, n = self_store_program(TINY, 0)
    b = tmp_path / "tiny.npz"
    save_bundle(b, dram, ia, n, config=TINY)
    with np.load(b) as z:
        assert int(z[FINGERPRINT_KEY]) == TINY.fingerprint
    load_bundle(b, config=TINY)
    with pytest.raises(BundleError, match=f"0x{TINY.fingerprint:08x}.*not this config"):
        load_bundle(b, config=preset("pynq"))
    code, _, err = cli(["exec", str(b), "--config", "pynq"])
    assert code == 2 and "not this config" in err, err
    code, out, err = cli(["exec", str(b), "--config", "tiny"])
    assert code == 0, err
    # a bundle without a fingerprint runs under any config (here: its own)
    b2 = tmp_path / "plain.npz"
    save_bundle(b2, dram, ia, n)
    with np.load(b2) as z:
        assert FINGERPRINT_KEY not in z.files
    code, _, err = cli(["exec", str(b2), "--config", "tiny"])
    assert code == 0, err


def test_bundle_bad_fingerprint_is_a_bundle_error(tmp_path):
    from vtaforge.runtime.bundle import BundleError

    b = tmp_path / "bad.npz"
    np.savez(b, dram=np.zeros(64, np.uint8), insn_addr=np.int64(0), insn_count=np.int64(1),
             config_fingerprint=np.int64(-1))
    with pytest.raises(BundleError, match="not a 32-bit fingerprint"):
        load_bundle(b, config=TINY)
    np.savez(b, dram=np.zeros(64, np.uint8), insn_addr=np.int64(0), insn_count=np.int64(1),
             config_fingerprint=np.float64(1.0))
    with pytest.raises(BundleError, match="config_fingerprint"):
        load_bundle(b)


# ------------------------------------------------------------------------------ HW_VER 0.0.0
def test_hw_ver_000_config_loads(tmp_path):
    """Upstream's older vta_config.json (HW_VER 0.0.0, with HW_FREQ and HW_CLK_TARGET) was
    refused ("unknown config key 'HW_CLK_TARGET'"); it is the pynq preset at 100 MHz."""
    import json as _json

    from vtaforge.hw.config import ConfigError, load_config

    path = DATA / "vta_config_hw000.json"
    c = load_config(str(path))
    assert c.HW_VER == "0.0.0" and c.CLOCK_MHZ == 100
    assert c.fingerprint == preset("pynq").fingerprint
    code, out, err = cli(["config", "show", str(path)])
    assert code == 0, err
    d = _json.loads(path.read_text())
    for bad, msg in [({"HW_FREQ": 0}, "HW_FREQ = 0 must be a positive number"),
                     ({"HW_CLK_TARGET": "8"}, "HW_CLK_TARGET = '8' must be a positive"),
                     ({"CLOCK_MHZ": 125}, "HW_FREQ = 100 contradicts CLOCK_MHZ = 125")]:
        p = tmp_path / "c.json"
        p.write_text(_json.dumps({**d, **bad}))
        with pytest.raises(ConfigError, match=msg):
            load_config(str(p))


# ------------------------------------------------------------------------------ file modes
def test_written_files_are_0644(tmp_path):
    """Outputs of ``exec -o`` and bundles were written with mode 0600 (mkstemp's)."""
    import os

    from vtaforge.runtime.bundle import save_bundle

    old = os.umask(0o022)
    try:
        dram, ia, n = self_store_program(TINY, 0)
        b, out = tmp_path / "b.npz", tmp_path / "out.npz"
        save_bundle(b, dram, ia, n, config=TINY)
        code, _, err = cli(["exec", str(b), "--config", "tiny", "-o", str(out)])
        assert code == 0, err
    finally:
        os.umask(old)
    assert {p.name: p.stat().st_mode & 0o777 for p in (b, out)} == {"b.npz": 0o644,
                                                                    "out.npz": 0o644}


@pytest.mark.rtl
@pytest.mark.slow
def test_f5_builder_pipeline_on_rtl_one_entry_queues():
    """The reordered launch runs on the generated core with one-entry queues (the model
    for this config builds in about half a minute)."""
    rtl = _rtl()
    from test_builder_e2e import emit_two_thread_gemm, gemm_data, gemm_oracle, read_out, upload
    from vtaforge.runtime.builder import ProgramBuilder

    cfg = _shallow("tiny")
    dev = rtl.RtlDevice(cfg, 16 << 20, progress=False, timeout_cycles=200_000)
    try:
        o, n, m = 4, 1, 4
        inp, wgt = gemm_data(cfg, o, n, m, seed=3)
        ib, wb = upload(dev, inp), upload(dev, wgt)
        ob = dev.alloc(o * m * cfg.elem_bytes(MemType.OUT))
        b = ProgramBuilder(dev)
        emit_two_thread_gemm(b, ib, wb, ob, o, n, m)
        res = b.synchronize()
        assert res.stats["reordered_launches"] == 1 and res.cycles > 0
        got = read_out(dev, ob, o * m).reshape(o, m, cfg.BATCH, cfg.BLOCK_OUT)
        np.testing.assert_array_equal(got, gemm_oracle(inp, wgt))
    finally:
        dev.close()
