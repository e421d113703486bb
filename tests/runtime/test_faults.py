"""Regression tests for the faults of issue 10 (item 5), each with its reproduction.

F1: a STORE over the program's own instructions is refused statically (fsim, the verifier
and the rtl backend, one message).  F3: rtl runs images whose size is not a multiple of the
bus beat.  F4: ``--max-steps``/``timeout_cycles`` on rtl is exact.  F5: the builder honours
the command- and token-queue capacities.  Bundles carry the config fingerprint.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from progtools import Image, MemType, finish, ld, st
from vtaforge.cli import main
from vtaforge.hw.config import preset
from vtaforge.runtime.bundle import load_bundle
from vtaforge.runtime.device import ProgramError
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
    from vtaforge.compiler.ir import Graph, Node, TensorType, requant_round, validate
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
    from vtaforge.runtime.builder import BuilderError, _capacity_order

    inp, uop = int(MemType.INP), int(MemType.UOP)
    insns = [Insn(Opcode.LOAD, memory_type=inp, push_next=1),
             Insn(Opcode.LOAD, memory_type=uop, push_prev=1),
             Insn(Opcode.LOAD, memory_type=inp, push_next=1),
             Insn(Opcode.LOAD, memory_type=uop, push_prev=1),
             Insn(Opcode.LOAD, memory_type=inp, pop_next=1),
             Insn(Opcode.LOAD, memory_type=inp, pop_next=1),
             Insn(Opcode.LOAD, memory_type=uop, pop_prev=1),
             Insn(Opcode.FINISH, pop_prev=1)]
    assert _capacity_order(insns, 2) is None
    with pytest.raises(BuilderError, match=r"TOKEN_QUEUE_DEPTH = 1.*token queue (g2l|l2g)"):
        _capacity_order(insns, 1)


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
