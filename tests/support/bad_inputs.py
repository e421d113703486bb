"""A sweep of bad inputs across every ``vtaforge`` command, run in process.

Each case is a command line with ``{name}`` placeholders for files that :func:`make_files`
writes (corrupt, truncated, oversized, mistyped, non-UTF-8, deeply nested ...).  Every
case must fail as bad input: exit status 2, one ``error: ...`` line on stderr, no
traceback and no ``internal error``, within :data:`TIMEOUT_S`.

Used by ``tests/test_cli_bad_input_sweep.py`` (one test per case) and runnable alone::

    python tests/support/bad_inputs.py          # prints one line per case and the counts
"""

from __future__ import annotations

import io
import json
import signal
import sys
import zipfile
from contextlib import contextmanager
from pathlib import Path

import numpy as np

#: The longest a case may run (seconds) before it counts as a hang.
TIMEOUT_S = 60


def _npy_header(shape, descr="<f4") -> bytes:
    buf = io.BytesIO()
    np.lib.format.write_array_header_1_0(buf, {"descr": descr, "fortran_order": False,
                                               "shape": tuple(shape)})
    return buf.getvalue()


def _onnx_files(d: Path) -> None:
    import onnx
    from onnx import TensorProto, helper

    def save(name, nodes, inputs, outputs, inits=(), extra_opsets=()):
        g = helper.make_graph(nodes, "g", inputs, outputs, list(inits))
        m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17), *extra_opsets])
        onnx.save(m, str(d / name))

    f = TensorProto.FLOAT
    vi = helper.make_tensor_value_info
    save("custom.onnx", [helper.make_node("Foo", ["x"], ["y"], domain="com.example")],
         [vi("x", f, [1, 4])], [vi("y", f, [1, 4])],
         extra_opsets=[helper.make_opsetid("com.example", 1)])
    save("custom_named.onnx", [helper.make_node("Relu", ["x"], ["t"], name="r"),
                               helper.make_node("Bar", ["t"], ["y"], name="bar0",
                                                domain="org.acme")],
         [vi("x", f, [1, 4])], [vi("y", f, [1, 4])],
         extra_opsets=[helper.make_opsetid("org.acme", 1)])
    data = helper.make_tensor("data", f, [4, 3], np.arange(12, dtype=np.float32).tolist())
    save("gather.onnx", [helper.make_node("Gather", ["data", "idx"], ["y"], axis=0)],
         [vi("idx", TensorProto.INT64, [2])], [vi("y", f, [2, 3])], [data])
    save("two.onnx", [helper.make_node("Add", ["a", "b"], ["y"])],
         [vi("a", f, [1, 4]), vi("b", f, [1, 4])], [vi("y", f, [1, 4])])
    save("relu.onnx", [helper.make_node("Relu", ["x"], ["y"])],
         [vi("x", f, [1, 4])], [vi("y", f, [1, 4])])


def make_files(d: Path) -> dict[str, str]:
    """Write the sweep's files into ``d``; returns ``{placeholder: path}``."""
    from vtaforge.compiler.models import DIGITS_ONNX
    from vtaforge.hw.config import preset
    from vtaforge.hw.isa import Insn, Opcode, encode_program
    from vtaforge.runtime.bundle import save_bundle

    d = Path(d)
    d.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(0)
    x = rng.random((4, 1, 8, 8), dtype=np.float32)
    np.save(d / "x.npy", x)
    np.savez(d / "x.npz", input=x)
    raw = (d / "x.npz").read_bytes()
    b = bytearray(raw)
    b[raw.find(b"\x93NUMPY") + 200] ^= 0xFF            # a data byte: bad CRC
    (d / "crc.npz").write_bytes(bytes(b))
    (d / "trunc.npz").write_bytes(raw[:300])
    (d / "trunc.npy").write_bytes((d / "x.npy").read_bytes()[:200])
    huge = _npy_header([1 << 38])                       # 1 TiB of float32
    (d / "huge.npy").write_bytes(huge + bytes(64))
    with zipfile.ZipFile(d / "huge.npz", "w") as z:
        z.writestr("input.npy", huge + bytes(64))
    with zipfile.ZipFile(d / "huge_dram.npz", "w") as z:
        z.writestr("dram.npy", _npy_header([1 << 41], "|u1") + bytes(64))
        z.writestr("insn_addr.npy", _npy_header([], "<i8") + bytes(8))
        z.writestr("insn_count.npy", _npy_header([], "<i8") + (1).to_bytes(8, "little"))
    (d / "badhdr.npy").write_bytes(b"\x93NUMPY\x01\x00\x10\x00{'descr': zzz}    \n")
    np.save(d / "obj.npy", np.array([{"a": 1}], dtype=object), allow_pickle=True)
    np.savez(d / "obj.npz", input=np.array([{"a": 1}], dtype=object))
    np.save(d / "str.npy", np.array(["a", "b"]))
    np.save(d / "cplx.npy", np.ones((4, 1, 8, 8), np.complex64))
    np.save(d / "int.npy", np.ones((4, 1, 8, 8), np.int64))
    np.save(d / "bool.npy", np.ones((4, 1, 8, 8), bool))
    np.save(d / "scalar.npy", np.float32(1))
    np.save(d / "shape.npy", np.ones((4, 3, 8, 8), np.float32))
    np.save(d / "rank.npy", np.ones((4, 64), np.float32))
    np.save(d / "empty_samples.npy", np.zeros((0, 1, 8, 8), np.float32))
    bad = x.copy()
    bad[0, 0, 0, 0] = np.nan
    np.save(d / "nan.npy", bad)
    np.savez(d / "empty.npz")
    np.savez(d / "wrongname.npz", nosuch=x)
    (d / "empty.bin").write_bytes(b"")
    (d / "text.txt").write_text("hello\n")
    (d / "binary.bin").write_bytes(bytes(range(256)) * 4)
    (d / "adir").mkdir(exist_ok=True)
    # JSON
    (d / "nonutf8.json").write_bytes(b'{"TARGET": "\xff\xfe"}')
    (d / "latin1.json").write_bytes('{"PART": "xc7z020\xe9"}'.encode("latin-1"))
    (d / "deep.json").write_text("[" * 100000 + "]" * 100000)
    (d / "deepobj.json").write_text('{"a":' * 50000 + "1" + "}" * 50000)
    (d / "broken.json").write_text('{"LOG_BATCH": ')
    (d / "list.json").write_text("[1, 2]")
    (d / "null.json").write_text("null")
    for name, cfg in {"strint": {"LOG_BATCH": "1"}, "strblock": {"LOG_BLOCK": "4"},
                      "strbuf": {"LOG_INP_BUFF_SIZE": "15"}, "strout": {"LOG_OUT_WIDTH": "3"},
                      "floatint": {"LOG_BATCH": 1.5}, "bigint": {"LOG_BATCH": 10 ** 400},
                      "nanclock": {"CLOCK_MHZ": float("nan")}, "listtarget": {"TARGET": ["x"]},
                      "strflag": {"ALU_MUL": "yes"}, "unknownkey": {"LOG_BLOCKS": 4},
                      "intpart": {"PART": 7020}, "strclock": {"CLOCK_MHZ": "100"},
                      "dictval": {"LOG_BATCH": {"a": 1}}}.items():
        (d / f"{name}.json").write_text(json.dumps(cfg))
    # ONNX
    _onnx_files(d)
    onnx_bytes = Path(DIGITS_ONNX).read_bytes()
    (d / "trunc.onnx").write_bytes(onnx_bytes[: len(onnx_bytes) // 3])
    (d / "garbage.onnx").write_bytes(bytes(range(256)) * 16)
    (d / "empty.onnx").write_bytes(b"")
    np.save(d / "x14.npy", np.ones((1, 4), np.float32))
    np.save(d / "idx_ok.npy", np.array([0, 1], np.int64))
    np.save(d / "idx_bad.npy", np.array([0, 99], np.int64))
    np.savez(d / "two.npz", a=np.ones((1, 4), np.float32), b=np.ones((1, 4), np.float32))
    # bundles and programs
    dram = np.zeros(64, np.uint8)
    dram[16:32] = encode_program(preset("pynq"), [Insn(Opcode.FINISH)]).reshape(-1)
    save_bundle(d / "ok.npz", dram, 16, 1)
    braw = (d / "ok.npz").read_bytes()
    bb = bytearray(braw)
    bb[braw.find(b"\x93NUMPY") + 140] ^= 0xFF
    (d / "crc_bundle.npz").write_bytes(bytes(bb))
    (d / "trunc_bundle.npz").write_bytes(braw[: len(braw) // 2])
    np.savez(d / "dram_f32.npz", dram=np.zeros(64, np.float32), insn_addr=16, insn_count=1)
    np.savez(d / "addr_str.npz", dram=dram, insn_addr=np.array("x"), insn_count=1)
    np.savez(d / "addr_obj.npz", dram=dram, insn_addr=np.array([None], dtype=object),
             insn_count=1)
    np.save(d / "prog.npy", np.zeros(160, np.uint8))
    np.save(d / "prog2d.npy", np.zeros((10, 16), np.uint8))
    (d / "prog.bin").write_bytes(bytes(160))
    (d / "odd.bin").write_bytes(bytes(17))
    # artifacts
    (d / "garbage.vtapkg").write_bytes(bytes(range(256)) * 4)
    (d / "empty.vtapkg").write_bytes(b"")
    (d / "npy.vtapkg").write_bytes((d / "x.npy").read_bytes())
    np.savez(d / "nomanifest.npz", a=np.zeros(3))
    (d / "nomanifest.vtapkg").write_bytes((d / "nomanifest.npz").read_bytes())
    np.savez(d / "badmanifest.npz", manifest=np.array("{" * 5000))
    (d / "badmanifest.vtapkg").write_bytes((d / "badmanifest.npz").read_bytes())
    np.savez(d / "deepmanifest.npz", manifest=np.array("[" * 100000 + "]" * 100000))
    (d / "deepmanifest.vtapkg").write_bytes((d / "deepmanifest.npz").read_bytes())
    with zipfile.ZipFile(d / "huge.vtapkg", "w") as z:
        z.writestr("manifest.npy", _npy_header([1 << 40], "<U1") + bytes(64))
    from vtaforge.compiler.compile import compile_model
    from vtaforge.runtime.artifact import save_artifact

    two = {"a": np.ones((1, 4), np.float32), "b": np.ones((1, 4), np.float32)}
    save_artifact(compile_model(str(d / "two.onnx"), two, preset("pynq")), d / "two.vtapkg")
    np.savez(d / "two_batches.npz", a=np.ones((1, 4), np.float32),
             b=np.ones((2, 4), np.float32))
    praw = (d / "two.vtapkg").read_bytes()
    pb = bytearray(praw)
    at = praw.rfind(b"\x93NUMPY")           # the last member's data: a constant or kernel
    pb[at + 130] ^= 0xFF
    (d / "crc_pkg.vtapkg").write_bytes(bytes(pb))
    # bitstreams, reports, DSE
    (d / "empty.bit").write_bytes(b"")
    (d / "garbage.bit").write_bytes(bytes(range(256)))
    (d / "deep.jsonl").write_text("[" * 100000 + "]" * 100000 + "\n")
    (d / "nonutf8.jsonl").write_bytes(b'{"a": "\xff"}\n')
    files = {p.stem.replace(".", "_") + "_" + p.suffix.lstrip("."): str(p)
             for p in d.iterdir()}
    files.update(digits=str(DIGITS_ONNX), dir=str(d / "adir"), missing=str(d / "nope.npy"),
                 nodir=str(d / "nodir" / "out.npy"), d=str(d))
    return files


M = "{digits}"
#: ``(id, command line)``: every one is bad input.
CASES: list[tuple[str, str]] = [
    # ---- config show: config JSON
    *[(f"config-{k}", f"config show {{{k}_json}}") for k in (
        "nonutf8", "latin1", "deep", "deepobj", "broken", "list", "null", "strint", "strblock",
        "strbuf", "strout", "floatint", "bigint", "nanclock", "listtarget", "strflag",
        "unknownkey", "intpart", "strclock", "dictval")],
    ("config-devzero", "config show /dev/zero"),
    ("config-empty", "config show {empty_bin}"),
    ("config-dir", "config show {dir}"),
    ("config-missing-json", "config show {d}/nope.json"),
    ("config-not-preset", "config show nosuchpreset"),
    ("config-binary", "config show {binary_bin}"),
    ("config-presets-extra", "config presets extra"),
    # ---- run: inputs
    *[(f"run-input-{k}", f"run --model {M} --input {{{k}}}") for k in (
        "crc_npz", "trunc_npz", "trunc_npy", "huge_npy", "huge_npz", "badhdr_npy", "obj_npy",
        "obj_npz", "str_npy", "cplx_npy", "scalar_npy", "shape_npy", "rank_npy",
        "empty_samples_npy", "nan_npy", "empty_npz", "wrongname_npz", "empty_bin", "text_txt",
        "binary_bin", "dir", "missing", "x14_npy", "int_npy", "bool_npy")],
    ("run-calib-crc", f"run --model {M} --input {{x_npy}} --calibrate {{crc_npz}}"),
    ("run-calib-huge", f"run --model {M} --input {{x_npy}} --calibrate {{huge_npy}}"),
    ("run-calib-obj", f"run --model {M} --input {{x_npy}} --calibrate {{obj_npy}}"),
    ("run-calib-text", f"run --model {M} --input {{x_npy}} --calibrate {{text_txt}}"),
    ("run-calib-nan", f"run --model {M} --input {{x_npy}} --calibrate {{nan_npy}}"),
    ("run-many-crc", f"run --model {M} --input {{x_npy}} --input {{crc_npz}}"),
    ("run-many-huge", f"run --model {M} --input {{x_npy}} --input {{huge_npy}}"),
    ("run-many-output", f"run --model {M} --input {{x_npy}} --input {{x_npy}} --output y.npy"),
    # ---- run: models
    *[(f"run-model-{k}", f"run --model {{{k}}} --input {{x14_npy}}") for k in (
        "custom_onnx", "custom_named_onnx", "trunc_onnx", "garbage_onnx", "empty_onnx",
        "text_txt", "dir", "garbage_vtapkg", "empty_vtapkg", "npy_vtapkg", "nomanifest_vtapkg",
        "badmanifest_vtapkg", "deepmanifest_vtapkg", "huge_vtapkg")],
    ("run-model-missing", "run --model {d}/nope.onnx --input {x14_npy}"),
    ("run-model-missing-vtapkg", "run --model {d}/nope.vtapkg --input {x14_npy}"),
    ("run-custom-many", "run --model {custom_onnx} --input {x14_npy} --input {x14_npy}"),
    ("run-gather-calib", "run --model {gather_onnx} --input {idx_bad_npy}"),
    ("run-gather-runtime",
     "run --model {gather_onnx} --input {idx_bad_npy} --calibrate {idx_ok_npy}"),
    ("run-two-npy", "run --model {two_onnx} --input {x14_npy}"),
    ("run-two-calib-npy", "run --model {two_onnx} --input {two_npz} --calibrate {x14_npy}"),
    ("run-two-wrongname", "run --model {two_onnx} --input {wrongname_npz}"),
    ("run-two-batches", "run --model {two_onnx} --input {two_batches_npz}"),
    ("run-pkg-npy", "run --model {two_vtapkg} --input {x14_npy}"),
    ("run-pkg-other-config", "run --model {two_vtapkg} --input {two_npz} --config tiny"),
    ("run-pkg-crc", "run --model {crc_pkg_vtapkg} --input {two_npz}"),
    ("run-pkg-calibrate", "run --model {two_vtapkg} --input {two_npz} --calibrate {two_npz}"),
    ("run-pkg-wrongname", "run --model {two_vtapkg} --input {wrongname_npz}"),
    ("run-pkg-many-npy", "run --model {two_vtapkg} --input {two_npz} --input {x14_npy}"),
    ("run-pkg-budget", "run --model {two_vtapkg} --input {two_npz} --memory-budget 1"),
    ("run-budget-1", f"run --model {M} --input {{x_npy}} --memory-budget 1"),
    ("profile-pkg-npy", "profile {two_vtapkg} --target fsim --input {x14_npy}"),
    ("disasm-pkg", "disasm {two_vtapkg}"),
    ("exec-pkg", "exec {two_vtapkg}"),
    # ---- run: options
    ("run-output-nodir", f"run --model {M} --input {{x_npy}} --output /nonexistent/dir/y.npy"),
    ("run-output-dir", f"run --model {M} --input {{x_npy}} --output {{dir}}"),
    ("run-config-nonutf8", f"run --model {M} --input {{x_npy}} --config {{nonutf8_json}}"),
    ("run-config-deep", f"run --model {M} --input {{x_npy}} --config {{deep_json}}"),
    ("run-target", f"run --model {M} --input {{x_npy}} --target bogus"),
    ("run-budget-garbage", f"run --model {M} --input {{x_npy}} --memory-budget lots"),
    ("run-budget-negative", f"run --model {M} --input {{x_npy}} --memory-budget -5"),
    ("run-cache-size-0", f"run --model {M} --input {{x_npy}} --cache-size 0"),
    ("run-no-input", f"run --model {M}"),
    ("run-input-no-model", "run --input {x_npy}"),
    # ---- compile
    *[(f"compile-{k}", f"compile {{{k}}} -o {{d}}/m.vtapkg") for k in (
        "custom_onnx", "trunc_onnx", "garbage_onnx", "empty_onnx", "text_txt", "two_onnx",
        "missing")],
    *[(f"compile-calib-{k}", f"compile {M} -o {{d}}/m.vtapkg --calibrate {{{k}}}") for k in (
        "crc_npz", "trunc_npz", "huge_npy", "huge_npz", "obj_npy", "str_npy", "empty_npz",
        "nan_npy", "text_txt")],
    ("compile-two-calib-npy", "compile {two_onnx} -o {d}/m.vtapkg --calibrate {x14_npy}"),
    ("compile-gather", "compile {gather_onnx} -o {d}/m.vtapkg --calibrate {idx_bad_npy}"),
    ("compile-output-nodir", f"compile {M} -o /nonexistent/dir/m.vtapkg"),
    ("compile-config-nonutf8", f"compile {M} -o {{d}}/m.vtapkg --config {{nonutf8_json}}"),
    # ---- profile
    ("profile-input-crc", f"profile {M} --target fsim --input {{crc_npz}}"),
    ("profile-input-huge", f"profile {M} --target fsim --input {{huge_npy}}"),
    ("profile-custom", "profile {custom_onnx} --target fsim"),
    ("profile-two", "profile {two_onnx} --target fsim"),
    ("profile-calib-obj", f"profile {M} --target fsim --calibrate {{obj_npy}}"),
    ("profile-json-nodir", f"profile {M} --target fsim --json /nonexistent/dir/p.json"),
    ("profile-plot-txt", f"profile {M} --target fsim --plot {{d}}/p.txt"),
    ("profile-target", f"profile {M} --target pynq"),
    ("profile-garbage-vtapkg", "profile {garbage_vtapkg} --target fsim"),
    ("profile-missing", "profile {d}/nope.onnx --target fsim"),
    # ---- exec
    *[(f"exec-{k}", f"exec {{{k}}}") for k in (
        "crc_bundle_npz", "trunc_bundle_npz", "huge_dram_npz", "huge_npz", "x_npy", "text_txt",
        "empty_bin", "dram_f32_npz", "addr_str_npz", "addr_obj_npz", "missing", "x_npz")],
    ("exec-max-steps-0", "exec {ok_npz} --max-steps 0"),
    ("exec-target", "exec {ok_npz} --target bogus"),
    ("exec-trace-fsim", "exec {ok_npz} --trace {d}/t.vcd"),
    ("exec-output-nodir", "exec {ok_npz} -o /nonexistent/dir/r.npz"),
    ("exec-output-dir", "exec {ok_npz} -o {dir}"),
    ("exec-config-deep", "exec {ok_npz} --config {deep_json}"),
    # ---- disasm
    *[(f"disasm-{k}", f"disasm {{{k}}}") for k in (
        "huge_npy", "trunc_npy", "obj_npy", "badhdr_npy", "crc_bundle_npz", "trunc_bundle_npz",
        "huge_dram_npz", "x_npy", "prog2d_npy", "odd_bin", "empty_bin", "missing")],
    ("disasm-devzero", "disasm /dev/zero"),
    ("disasm-addr-past-end", "disasm {prog_npy} --insn-addr 1600"),
    ("disasm-addr-past-end-bin", "disasm {prog_bin} --insn-addr 1600 --insn-count 1"),
    ("disasm-addr-negative", "disasm {prog_bin} --insn-addr -16"),
    ("disasm-addr-misaligned", "disasm {prog_bin} --insn-addr 8"),
    ("disasm-count-huge", "disasm {prog_bin} --insn-count 1000000000000000000000"),
    ("disasm-count-past-end", "disasm {ok_npz} --insn-count 100"),
    ("disasm-config-nonutf8", "disasm {prog_bin} --config {nonutf8_json}"),
    # ---- hw
    ("hw-verilog-config-deep", "hw verilog --config {deep_json} -o {d}/rtl"),
    ("hw-verilog-config-nonutf8", "hw verilog --config {nonutf8_json} -o {d}/rtl"),
    ("hw-verilog-name", "hw verilog --config tiny -o {d}/rtl --name 1x"),
    ("hw-verilog-out-file", "hw verilog --config tiny -o {x_npy}"),
    ("hw-resources-config", "hw resources --config {strblock_json}"),
    ("hw-resources-part", "hw resources --config tiny --part xc0000"),
    ("hw-timing-config", "hw timing --config {nonutf8_json}"),
    ("hw-timing-device", "hw timing --device 12k"),
    ("hw-timing-workdir-file", "hw timing --config tiny --workdir {x_npy}"),
    # ---- dse
    ("dse-space-nonutf8", "dse run --space {nonutf8_json} --no-progress"),
    ("dse-space-deep", "dse run --space {deep_json} --no-progress"),
    ("dse-space-missing", "dse run --space {d}/nope.json --no-progress"),
    ("dse-space-list", "dse run --space {list_json} --no-progress"),
    ("dse-base-nonutf8", "dse run --base {nonutf8_json} --no-progress"),
    ("dse-base-deep", "dse run --base {deep_json} --no-progress"),
    ("dse-timing-nonutf8", "dse run --timing {nonutf8_json} --no-progress"),
    ("dse-timing-deep", "dse run --timing {deepobj_json} --no-progress"),
    ("dse-workloads", "dse run --workloads nosuch --no-progress"),
    ("dse-size", "dse run --size 0 --no-progress"),
    ("dse-accuracy-custom", "dse run --accuracy {custom_onnx}:{x_npz} --size 7 --no-progress"),
    ("dse-accuracy-crc", "dse run --accuracy {relu_onnx}:{crc_npz} --size 7 --no-progress"),
    ("dse-accuracy-huge", "dse run --accuracy {relu_onnx}:{huge_npz} --size 7 --no-progress"),
    ("dse-accuracy-missing", "dse run --accuracy {d}/nope.onnx:{x_npz} --size 7 --no-progress"),
    ("dse-accuracy-spec", "dse run --accuracy nosuchset --size 7 --no-progress"),
    ("dse-cache-deep", "dse run --cache {deep_jsonl} --workloads resnet18-c2 --size 7 "
                       "--no-progress"),
    ("dse-cache-nonutf8", "dse run --cache {nonutf8_jsonl} --workloads resnet18-c2 --size 7 "
                          "--no-progress"),
    ("dse-out-nodir", "dse run -o /nonexistent/dir/r.json --no-progress"),
    ("dse-show-nonutf8", "dse show {nonutf8_json}"),
    ("dse-show-deep", "dse show {deep_json}"),
    ("dse-show-missing", "dse show {d}/nope.json"),
    ("dse-show-dir", "dse show {dir}"),
    ("dse-show-devzero", "dse show /dev/zero"),
    # ---- board (vtaforge/commands/board.py, runtime/board/)
    ("board-timing-binary", "board timing {binary_bin}"),
    ("board-timing-missing", "board timing {d}/nope.rpt"),
    ("board-project-config", "board project --config {deep_json} -o {d}/proj"),
    ("board-package-empty-bit", "board package --config pynq --bitstream {empty_bit} "
                                "--model {garbage_vtapkg} -o {d}/pkg"),
    ("board-package-missing-bit", "board package --config pynq --bitstream {d}/nope.bit "
                                  "--model {garbage_vtapkg} -o {d}/pkg"),
    ("board-package-devzero", "board package --config pynq --bitstream /dev/zero "
                              "--hwh {text_txt} --model {garbage_vtapkg} -o {d}/pkg"),
    ("board-package-config", "board package --config {nonutf8_json} --bitstream {garbage_bit} "
                             "--model {garbage_vtapkg} -o {d}/pkg"),
    ("board-verify-missing", "board verify {d}/nopkg"),
    # ---- usage
    ("usage-unknown-command", "nosuchcommand"),
    ("usage-unknown-option", "run --bogus"),
]


class _Hang(BaseException):
    """Raised by the alarm: not an Exception, so the CLI boundary does not report it."""


@contextmanager
def _deadline(seconds: int):
    def on_alarm(signum, frame):
        raise _Hang()

    old = signal.signal(signal.SIGALRM, on_alarm)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)


def run_case(args: list[str], timeout: int = TIMEOUT_S) -> tuple[str, int | None, str]:
    """Run one command line in process.  Returns ``(verdict, exit status, stderr)``:
    verdict ``"ok"`` (exit 2, one ``error:`` line, no traceback or internal error), or
    ``"hang"``, ``"traceback"``, ``"internal"`` (exit 3), ``"exit N"``, ``"lines"``."""
    from click.testing import CliRunner

    from vtaforge.cli import main

    try:
        with _deadline(timeout):
            r = CliRunner().invoke(main, args, catch_exceptions=True)
    except _Hang:
        return "hang", None, ""
    err = r.stderr
    if r.exception is not None and not isinstance(r.exception, SystemExit):
        import traceback

        tb = "".join(traceback.format_exception(r.exception))
        return "traceback", r.exit_code, tb
    if "Traceback" in err:
        return "traceback", r.exit_code, err
    if r.exit_code == 3 or "internal error" in err:
        return "internal", r.exit_code, err
    if r.exit_code != 2:
        return f"exit {r.exit_code}", r.exit_code, err
    lines = [ln for ln in err.splitlines() if ln.strip()]
    if len(lines) != 1 or not lines[0].startswith("error: "):
        return "lines", r.exit_code, err
    return "ok", r.exit_code, err


def expand(cmd: str, files: dict[str, str]) -> list[str]:
    """The argument list of a case's command line with its placeholders filled in."""
    return [a.format(**files) for a in cmd.split()]


def main() -> int:
    import tempfile
    import time
    from collections import Counter

    with tempfile.TemporaryDirectory(prefix="vtaforge-bad-inputs-") as tmp:
        files = make_files(Path(tmp))
        counts: Counter = Counter()
        for cid, cmd in CASES:
            t0 = time.perf_counter()
            verdict, code, err = run_case(expand(cmd, files))
            counts[verdict] += 1
            last = (err.strip().splitlines() or [""])[-1]
            print(f"{verdict:<9} {time.perf_counter() - t0:6.2f}s {cid:<28} {last[:150]}")
            sys.stdout.flush()
    print(f"{len(CASES)} cases: " + ", ".join(f"{k} {v}" for k, v in counts.most_common()))
    return 0 if counts["ok"] == len(CASES) else 1


if __name__ == "__main__":
    sys.exit(main())
