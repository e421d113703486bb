"""``vtaforge exec`` and ``vtaforge disasm``: round trip on a tiny program (vs a numpy oracle)
and every error class → non-zero exit and exactly one ``error:`` line on stderr."""

from __future__ import annotations

import json

import numpy as np
import pytest
from click.testing import CliRunner

from programs import AluOp, Image, MemType, acc_bytes, alu, finish, gemm, ld, st
from vtaforge.cli import main
from vtaforge.hw.config import preset
from vtaforge.runtime.bundle import load_result, save_bundle

TINY = preset("tiny")
UOP, ACC, OUT, INP = MemType.UOP, MemType.ACC, MemType.OUT, MemType.INP


def tiny_program(n=6, mid=(), seed=0):
    rng = np.random.default_rng(seed)
    x = rng.integers(-1000, 1000, (n, TINY.BATCH, TINY.BLOCK_OUT))
    im = Image(TINY)
    u = im.uops([0], [0])
    a = im.put(acc_bytes(TINY, x))
    o = im.zeros(n * TINY.elem_bytes(OUT))
    insns = [ld(UOP, 0, im.base(u, UOP), 1, 1), ld(ACC, 0, im.base(a, ACC), 1, n), *mid,
             alu(AluOp.ADD, 0, 1, 1, n, dfi=1, imm=3),
             alu(AluOp.SHR, 0, 1, 1, n, dfi=1, imm=1, push_next=1),
             st(0, im.base(o, OUT), 1, n, pop_prev=1, push_prev=1), finish(pop_next=1)]
    dram, ia, cnt = im.build(insns)
    return dram, ia, cnt, x, o


def run(args):
    r = CliRunner().invoke(main, args)
    return r.exit_code, r.stdout, r.stderr


def one_error_line(code, err):
    assert code != 0
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), err
    assert "Traceback" not in err
    return lines[0]


def test_exec_round_trip(tmp_path):
    dram, ia, n, x, o = tiny_program()
    b = tmp_path / "prog.npz"
    save_bundle(b, dram, ia, n)
    out = tmp_path / "out.npz"
    code, stdout, err = run(["exec", str(b), "--config", "tiny", "-o", str(out)])
    assert code == 0, err
    summary = json.loads(stdout)
    assert summary["cycles"] == 0 and summary["stats"]["alu_counter"] == 2 * 6
    final, cycles, stats = load_result(out)
    assert final.dtype == np.uint8 and final.shape == dram.shape and cycles == 0
    assert stats == summary["stats"]
    exp = dram.copy()
    eb = TINY.elem_bytes(OUT)
    exp[o:o + 6 * eb] = (((x + 3) >> 1).astype(np.int8)).reshape(-1).view(np.uint8)
    np.testing.assert_array_equal(final, exp)
    with np.load(out, allow_pickle=False) as z:
        assert z["cycles"].dtype == np.int64 and z["cycles"].ndim == 0


def test_exec_stdout_only(tmp_path):
    dram, ia, n, *_ = tiny_program()
    b = tmp_path / "prog.npz"
    save_bundle(b, dram, ia, n)
    code, stdout, err = run(["exec", str(b), "--config", "tiny", "--target", "fsim"])
    assert code == 0 and err == ""
    assert json.loads(stdout)["stats"]["insn_count"] == n
    assert sorted(p.name for p in tmp_path.iterdir()) == ["prog.npz"]


def _bundle(tmp_path, name="b.npz", **arrays):
    p = tmp_path / name
    np.savez(p, **arrays)
    return str(p)


def error_cases(tmp_path):
    dram, ia, n, *_ = tiny_program()
    cases = {}
    cases["missing file"] = ([str(tmp_path / "nope.npz")], r"no such file")
    bad = tmp_path / "junk.npz"
    bad.write_bytes(b"not a zip")
    cases["not npz"] = ([str(bad)], r"junk\.npz. is not an \.npz archive$")
    cases["missing key"] = ([_bundle(tmp_path, "k.npz", dram=dram, insn_addr=np.int64(ia))],
                            r"lacks key 'insn_count'")
    cases["dram dtype"] = ([_bundle(tmp_path, "d.npz", dram=dram.astype(np.int32),
                                    insn_addr=np.int64(ia), insn_count=np.int64(n))],
                           r"'dram' must be a 1-D uint8")
    cases["scalar dtype"] = ([_bundle(tmp_path, "s.npz", dram=dram, insn_addr=np.float64(ia),
                                      insn_count=np.int64(n))], r"'insn_addr' must be an integer")
    # unknown opcode
    d2 = dram.copy()
    d2[ia + 32] = (d2[ia + 32] & 0xF8) | 7
    cases["opcode"] = ([_bundle(tmp_path, "o.npz", dram=d2, insn_addr=np.int64(ia),
                                insn_count=np.int64(n))], r"unknown opcode 7")
    # unknown memory type (bits 7..9 of instruction 1)
    d3 = dram.copy()
    w = int.from_bytes(d3[ia + 16:ia + 32].tobytes(), "little")
    w = (w & ~(7 << 7)) | (6 << 7)
    d3[ia + 16:ia + 32] = np.frombuffer(w.to_bytes(16, "little"), np.uint8)
    cases["memtype"] = ([_bundle(tmp_path, "m.npz", dram=d3, insn_addr=np.int64(ia),
                                 insn_count=np.int64(n))], r"unknown memory type 6")
    # DMA outside the image
    dd, ia4, n4, *_ = tiny_program(mid=[ld(ACC, 0, 1 << 20, 1, 1)])
    cases["dma"] = ([_bundle(tmp_path, "dma.npz", dram=dd, insn_addr=np.int64(ia4),
                             insn_count=np.int64(n4))], r"DMA read of ACC bytes .* outside")
    cases["fetch"] = ([_bundle(tmp_path, "f.npz", dram=dram, insn_addr=np.int64(ia),
                               insn_count=np.int64(n + 100))], r"instruction fetch")
    # deadlock: a store waiting for a token nobody pushes
    im = Image(TINY)
    o = im.zeros(64)
    dl, ia5, n5 = im.build([st(0, im.base(o, OUT), 1, 1, pop_prev=1), finish()])
    cases["deadlock"] = ([_bundle(tmp_path, "dl.npz", dram=dl, insn_addr=np.int64(ia5),
                                  insn_count=np.int64(n5))], r"deadlock: store stalled")
    # timeout
    dt, ia6, n6, *_ = tiny_program(mid=[gemm(0, 1, 50, 50, reset=1)])
    cases["timeout"] = ([_bundle(tmp_path, "t.npz", dram=dt, insn_addr=np.int64(ia6),
                                 insn_count=np.int64(n6)), "--max-steps", "100"], r"timeout")
    cases["target"] = ([_bundle(tmp_path, "ok.npz", dram=dram, insn_addr=np.int64(ia),
                                insn_count=np.int64(n)), "--target", "board9"],
                       r"unknown target 'board9'")
    cases["config"] = ([_bundle(tmp_path, "ok2.npz", dram=dram, insn_addr=np.int64(ia),
                                insn_count=np.int64(n)), "--config", "nosuch"], r"nosuch")
    return cases


CASE_NAMES = ["missing file", "not npz", "missing key", "dram dtype", "scalar dtype", "opcode",
              "memtype", "dma", "fetch", "deadlock", "timeout", "target", "config"]


@pytest.mark.parametrize("name", CASE_NAMES)
def test_exec_errors(tmp_path, name):
    args, pattern = error_cases(tmp_path)[name]
    if "--config" not in args:
        args = args + ["--config", "tiny"]
    code, stdout, err = run(["exec", *args])
    line = one_error_line(code, err)
    assert code == 2
    import re
    assert re.search(pattern, line), line


def test_exec_subprocess_error(tmp_path):
    """The installed entry point: one stderr line, no traceback."""
    import shutil
    import subprocess
    import sys
    from pathlib import Path

    exe = shutil.which("vtaforge") or str(Path(sys.executable).parent / "vtaforge")
    p = subprocess.run([exe, "exec", str(tmp_path / "missing.npz")], capture_output=True,
                       text=True, timeout=60)
    one_error_line(p.returncode, p.stderr)


def test_disasm_bundle_and_bin(tmp_path):
    dram, ia, n, *_ = tiny_program()
    b = tmp_path / "p.npz"
    save_bundle(b, dram, ia, n)
    code, out, err = run(["disasm", str(b), "--config", "tiny"])
    assert code == 0, err
    lines = out.strip().splitlines()
    assert len(lines) == n
    assert "LOAD UOP" in lines[0] and "FINISH" in lines[-1]
    assert lines[3].rstrip().endswith("l2g=0 g2l=0 g2s=1 s2g=0")
    assert lines[4].rstrip().endswith("l2g=0 g2l=0 g2s=0 s2g=1")
    assert lines[-1].rstrip().endswith("l2g=0 g2l=0 g2s=0 s2g=0")
    binf = tmp_path / "p.bin"
    dram[ia:ia + 16 * n].tofile(binf)
    code, out2, err = run(["disasm", str(binf), "--config", "tiny"])
    assert code == 0 and out2 == out
    code, out3, _ = run(["disasm", str(binf), "--config", "tiny", "--insn-addr", "16",
                         "--insn-count", "2"])
    l3 = out3.strip().splitlines()
    assert code == 0 and len(l3) == 2 and "LOAD ACC" in l3[0] and "ALU ADD" in l3[1]


def test_disasm_errors(tmp_path):
    f = tmp_path / "odd.bin"
    f.write_bytes(b"\0" * 17)
    one_error_line(*run(["disasm", str(f)])[::2])
    one_error_line(*run(["disasm", str(tmp_path / "none.bin")])[::2])
    g = tmp_path / "ok.bin"
    g.write_bytes(b"\0" * 32)
    one_error_line(*run(["disasm", str(g), "--insn-count", "3"])[::2])


def test_disasm_npy(tmp_path):
    """A .npy is never disassembled as raw bytes (its header is not a program): a 1-D uint8
    array is the program bytes, any other array is refused."""
    dram, ia, n, *_ = tiny_program()
    prog = dram[ia:ia + 16 * n]
    binf = tmp_path / "p.bin"
    prog.tofile(binf)
    code, want, err = run(["disasm", str(binf), "--config", "tiny"])
    assert code == 0, err
    good = tmp_path / "prog.npy"
    np.save(good, prog)
    code, out, err = run(["disasm", str(good), "--config", "tiny"])
    assert code == 0 and out == want, err
    bad = tmp_path / "x.npy"
    np.save(bad, np.arange(64, dtype=np.int32))
    line = one_error_line(*run(["disasm", str(bad), "--config", "tiny"])[::2])
    assert "x.npy" in line and ".npy array of dtype int32" in line
    # a bundle renamed to .bin is still read as a bundle (content, not name)
    b = tmp_path / "bundle.bin"
    save_bundle(b, dram, ia, n)
    code, out, err = run(["disasm", str(b), "--config", "tiny"])
    assert code == 0 and out == want, err


def test_disasm_count_zero_negative_and_misaligned(tmp_path):
    dram, ia, n, *_ = tiny_program()
    b0 = tmp_path / "zero.npz"
    save_bundle(b0, dram, ia, 0)
    assert "insn_count = 0" in one_error_line(*run(["exec", str(b0), "--config", "tiny"])[::2])
    line = one_error_line(*run(["disasm", str(b0), "--config", "tiny"])[::2])
    assert "insn_count = 0" in line
    bneg = tmp_path / "neg.npz"
    save_bundle(bneg, dram, ia, -3)
    line = one_error_line(*run(["disasm", str(bneg), "--config", "tiny"])[::2])
    assert "insn_count = -3 is negative" in line
    b = tmp_path / "ok.npz"
    save_bundle(b, dram, ia, n)
    line = one_error_line(*run(["disasm", str(b), "--config", "tiny", "--insn-count", "-1"])[::2])
    assert "insn_count = -1 is negative" in line
    line = one_error_line(*run(["disasm", str(b), "--config", "tiny", "--insn-addr", "8"])[::2])
    assert "insn_addr = 0x8 is not a multiple of 16" in line
    empty = tmp_path / "empty.bin"
    empty.write_bytes(b"")
    assert "insn_count = 0" in one_error_line(*run(["disasm", str(empty)])[::2])
