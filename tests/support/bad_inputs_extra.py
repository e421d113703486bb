"""More bad inputs for every ``vtaforge`` command and subcommand, beyond
``tests/support/bad_inputs.py``: wrong types and out-of-range values for every numeric
option, special files (FIFOs, ``/dev/zero``, sparse multi-GiB files), unusual ONNX models
(custom domains, opset 1 / 22 / 99, an ``If`` missing a branch, no nodes, an output that is
an input, cycles, unknown ops), input shapes and dtypes that do not match the model,
NaN / infinity / zero-size arrays, odd ``.npy`` headers, conflicting options.

Each case is ``(id, command line, expect)``.  ``expect`` is ``"error"`` (exit status 2, one
``error: ...`` line on stderr, no traceback, no ``internal error``) or the name of a check in
:data:`CHECKS` (the input is valid: exit status 0, and the check compares what the command
wrote with onnxruntime, or looks at its output).  Every case must finish within
:data:`bad_inputs.TIMEOUT_S`.  :data:`XFAIL` lists the cases that fail today, with why.

Used by ``tests/test_cli_bad_input_extra.py`` and runnable alone::

    python tests/support/bad_inputs_extra.py     # one line per case, then counts by outcome
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import resource
import shlex
import sys
import zipfile
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

from bad_inputs import _deadline, _Hang, _npy_header  # noqa: E402

#: The longest a case may run (seconds) before it counts as a hang.
TIMEOUT_S = int(os.environ.get("BAD_INPUTS_TIMEOUT", "60"))

#: The address-space limit the sweep runs under: a reader that does not stop at the end of
#: ``/dev/zero`` fails with a MemoryError (an ``internal error``) instead of taking the
#: machine's memory.
MEMORY_LIMIT = 8 << 30


# ----------------------------------------------------------------------------- files
def _onnx_models(d: Path) -> None:
    import onnx
    from onnx import TensorProto as T
    from onnx import helper, numpy_helper

    f = T.FLOAT
    vi = helper.make_tensor_value_info

    def model(nodes, inputs, outputs, inits=(), opset=17, extra_opsets=(), ir=None, **kw):
        g = helper.make_graph(nodes, "g", inputs, outputs, list(inits))
        m = helper.make_model(g, opset_imports=[helper.make_opsetid("", opset), *extra_opsets],
                              **kw)
        if ir is not None:
            m.ir_version = ir
        return m

    def save(name, m):
        onnx.save(m, str(d / name))

    relu = lambda: [helper.make_node("Relu", ["x"], ["y"])]  # noqa: E731
    x14, y14 = vi("x", f, [1, 4]), vi("y", f, [1, 4])
    save("relu.onnx", model(relu(), [x14], [y14]))
    save("relu_dyn.onnx", model(relu(), [vi("x", f, ["N", 4])], [vi("y", f, ["N", 4])]))
    save("opset1.onnx", model(relu(), [x14], [y14], opset=1, ir=3))
    save("opset22.onnx", model(relu(), [x14], [y14], opset=22))
    save("opset99.onnx", model(relu(), [x14], [y14], opset=99))
    save("ir99.onnx", model(relu(), [x14], [y14], ir=99))
    then_g = helper.make_graph([helper.make_node("Relu", ["x"], ["t"])], "then", [],
                              [vi("t", f, [1, 4])])
    cond = numpy_helper.from_array(np.array(True), "c")
    save("if_missing_branch.onnx", model(
        [helper.make_node("If", ["c"], ["y"], then_branch=then_g)], [x14], [y14], [cond]))
    else_g = helper.make_graph([helper.make_node("Neg", ["x"], ["e"])], "else", [],
                              [vi("e", f, [1, 4])])
    save("if_ok.onnx", model(
        [helper.make_node("If", ["c"], ["y"], then_branch=then_g, else_branch=else_g)],
        [x14], [y14], [cond]))
    save("nonodes.onnx", model([], [x14], [vi("x", f, [1, 4])]))
    save("out_is_input.onnx", model(relu(), [x14], [vi("x", f, [1, 4]), y14]))
    save("no_outputs.onnx", model(relu(), [x14], []))
    save("no_inputs.onnx", model([helper.make_node(
        "Constant", [], ["y"], value=numpy_helper.from_array(np.ones((1, 4), np.float32)))],
        [], [y14]))
    save("undefined.onnx", model([helper.make_node("Add", ["x", "ghost"], ["y"])], [x14], [y14]))
    save("cycle.onnx", model([helper.make_node("Add", ["x", "b"], ["a"]),
                              helper.make_node("Relu", ["a"], ["b"]),
                              helper.make_node("Relu", ["a"], ["y"])], [x14], [y14]))
    save("dup_output.onnx", model([helper.make_node("Relu", ["x"], ["y"]),
                                   helper.make_node("Neg", ["x"], ["y"])], [x14], [y14]))
    save("unknown_op.onnx", model([helper.make_node("NoSuchOp", ["x"], ["y"])], [x14], [y14]))
    save("ms_unknown.onnx", model([helper.make_node("NoSuchOp", ["x"], ["y"],
                                                    domain="com.microsoft")], [x14], [y14],
                                  extra_opsets=[helper.make_opsetid("com.microsoft", 1)]))
    save("custom_sub.onnx", model(  # a custom op inside an If branch
        [helper.make_node("If", ["c"], ["y"], else_branch=else_g, then_branch=helper.make_graph(
            [helper.make_node("Zap", ["x"], ["t"], domain="my.ops")], "then", [],
            [vi("t", f, [1, 4])]))], [x14], [y14], [cond],
        extra_opsets=[helper.make_opsetid("my.ops", 1)]))
    fn = helper.make_function("local.ops", "MyRelu", ["a"], ["b"],
                              [helper.make_node("Relu", ["a"], ["b"])],
                              [helper.make_opsetid("", 17)])
    save("local_function.onnx", model(
        [helper.make_node("MyRelu", ["x"], ["y"], domain="local.ops")], [x14], [y14],
        extra_opsets=[helper.make_opsetid("local.ops", 1)], functions=[fn]))
    save("string_in.onnx", model([helper.make_node("Identity", ["x"], ["y"])],
                                 [vi("x", T.STRING, [1, 4])], [vi("y", T.STRING, [1, 4])]))
    save("int8_in.onnx", model(relu(), [vi("x", T.INT8, [1, 4])], [vi("y", T.INT8, [1, 4])]))
    save("f16.onnx", model(relu(), [vi("x", T.FLOAT16, [1, 4])], [vi("y", T.FLOAT16, [1, 4])]))
    save("bf16.onnx", model(relu(), [vi("x", T.BFLOAT16, [1, 4])],
                            [vi("y", T.BFLOAT16, [1, 4])]))
    save("bool_in.onnx", model([helper.make_node("Not", ["x"], ["y"])],
                               [vi("x", T.BOOL, [1, 4])], [vi("y", T.BOOL, [1, 4])]))
    seq = helper.make_tensor_sequence_value_info("x", f, [1, 4])
    save("seq_in.onnx", model([helper.make_node("SequenceLength", ["x"], ["y"])], [seq],
                              [vi("y", T.INT64, [])]))
    save("rank0.onnx", model(relu(), [vi("x", f, [])], [vi("y", f, [])]))
    save("zero_dim.onnx", model(relu(), [vi("x", f, [0, 4])], [vi("y", f, [0, 4])]))
    w = numpy_helper.from_array(np.ones((4, 3), np.float32), "w")
    w.ClearField("float_data")
    w.ClearField("raw_data")
    w.data_location = T.EXTERNAL
    w.external_data.add(key="location", value="missing_weights.bin")
    save("ext_missing.onnx", model([helper.make_node("MatMul", ["x", "w"], ["y"])], [x14],
                                   [vi("y", f, [1, 3])], [w]))
    bad = numpy_helper.from_array(np.ones((4, 3), np.float32), "w")
    bad.raw_data = bad.raw_data[:7]
    save("bad_raw.onnx", model([helper.make_node("MatMul", ["x", "w"], ["y"])], [x14],
                               [vi("y", f, [1, 3])], [bad]))
    w53 = numpy_helper.from_array(np.ones((5, 3), np.float32), "w")
    save("matmul_mismatch.onnx", model([helper.make_node("MatMul", ["x", "w"], ["y"])], [x14],
                                       [vi("y", f, [1, 3])], [w53]))
    wc = numpy_helper.from_array(np.ones((2, 3, 3, 3), np.float32), "w")
    save("conv_mismatch.onnx", model([helper.make_node("Conv", ["x", "w"], ["y"])],
                                     [vi("x", f, [1, 1, 8, 8])], [vi("y", f, [1, 2, 6, 6])], [wc]))
    wg = numpy_helper.from_array(np.ones((4, 2, 3, 3), np.float32), "w")
    save("conv_group.onnx", model([helper.make_node("Conv", ["x", "w"], ["y"], group=3)],
                                  [vi("x", f, [1, 4, 8, 8])], [vi("y", f, [1, 4, 6, 6])], [wg]))
    shp = numpy_helper.from_array(np.array([3], np.int64), "s")
    save("reshape_bad.onnx", model([helper.make_node("Reshape", ["x", "s"], ["y"])], [x14],
                                   [vi("y", f, [3])], [shp]))
    save("softmax_axis.onnx", model([helper.make_node("Softmax", ["x"], ["y"], axis=5)], [x14],
                                    [y14]))
    save("concat_axis.onnx", model([helper.make_node("Concat", ["x", "x"], ["y"], axis=7)],
                                   [x14], [vi("y", f, [2, 4])]))
    rng = np.random.default_rng(1)
    wg_ = numpy_helper.from_array(rng.standard_normal((4, 8)).astype(np.float32), "w")
    bg = numpy_helper.from_array(rng.standard_normal(8).astype(np.float32), "b")
    save("gemm.onnx", model([helper.make_node("Gemm", ["x", "w", "b"], ["y"])], [x14],
                            [vi("y", f, [1, 8])], [wg_, bg]))
    wcv = numpy_helper.from_array(rng.standard_normal((4, 1, 3, 3)).astype(np.float32), "w")
    save("conv.onnx", model([helper.make_node("Conv", ["x", "w"], ["t"], pads=[1, 1, 1, 1]),
                             helper.make_node("Relu", ["t"], ["y"])],
                            [vi("x", f, [1, 1, 8, 8])], [vi("y", f, [1, 4, 8, 8])], [wcv]))
    save("f64.onnx", model(relu(), [vi("x", T.DOUBLE, [1, 4])], [vi("y", T.DOUBLE, [1, 4])]))
    save("two.onnx", model([helper.make_node("Add", ["a", "b"], ["y"])],
                           [vi("a", f, [1, 4]), vi("b", f, [1, 4])], [y14]))
    (d / "prototxt.onnx").write_text('ir_version: 8\ngraph { node { op_type: "Relu" } }\n')


def make_files(d: Path) -> dict[str, str]:
    """Write the extra sweep's files into ``d``; returns ``{placeholder: path}``."""
    from vtaforge.compiler.compile import compile_model
    from vtaforge.hw.config import preset
    from vtaforge.hw.isa import Insn, Opcode, encode_program
    from vtaforge.runtime.artifact import save_artifact
    from vtaforge.runtime.bundle import save_bundle

    d = Path(d)
    d.mkdir(parents=True, exist_ok=True)
    _onnx_models(d)
    rng = np.random.default_rng(0)
    x = rng.standard_normal((1, 4)).astype(np.float32)
    np.save(d / "x14.npy", x)
    np.save(d / "x15.npy", np.ones((1, 5), np.float32))
    np.save(d / "x24.npy", rng.standard_normal((2, 4)).astype(np.float32))
    np.save(d / "x141.npy", np.ones((1, 4, 1), np.float32))
    np.save(d / "x4.npy", np.ones(4, np.float32))
    np.save(d / "x04.npy", np.zeros((0, 4), np.float32))
    np.save(d / "x10.npy", np.zeros((1, 0), np.float32))
    np.save(d / "x0d.npy", np.float32(1.0))
    for name, dt in {"f64": np.float64, "f16": np.float16, "i32": np.int32, "u8": np.uint8,
                     "i8": np.int8, "u64": np.uint64}.items():
        np.save(d / f"x14_{name}.npy", (x * 10).astype(dt))
    np.save(d / "x14_be.npy", x.astype(">f4"))
    np.save(d / "x24_fortran.npy", np.asfortranarray(rng.standard_normal((2, 4)).astype(np.float32)))
    np.save(d / "x14_inf.npy", np.array([[1, np.inf, 2, 3]], np.float32))
    np.save(d / "x14_ninf.npy", np.array([[1, -np.inf, 2, 3]], np.float32))
    np.save(d / "x14_allnan.npy", np.full((1, 4), np.nan, np.float32))
    np.save(d / "x14_big.npy", np.array([[1e38, -1e38, 3e38, 0]], np.float32))
    np.save(d / "x14_zero.npy", np.zeros((1, 4), np.float32))
    np.save(d / "x14_denorm.npy", np.full((1, 4), 1e-42, np.float32))
    np.save(d / "x14_c64.npy", np.ones((1, 4), np.complex64))
    np.save(d / "x14_struct.npy", np.zeros((1, 4), dtype=[("a", "<f4")]))
    np.save(d / "x14_dt64.npy", np.zeros((1, 4), dtype="datetime64[s]"))
    np.save(d / "x14_void.npy", np.zeros((1, 4), dtype="V4"))
    np.save(d / "x14_bool.npy", np.ones((1, 4), bool))
    np.save(d / "x1188.npy", rng.random((1, 1, 8, 8), dtype=np.float32))
    np.save(d / "x1888.npy", rng.random((1, 8, 8, 8), dtype=np.float32))
    buf = io.BytesIO()
    np.lib.format.write_array_header_2_0(buf, {"descr": "<f4", "fortran_order": False,
                                               "shape": (1, 4)})
    (d / "v2.npy").write_bytes(buf.getvalue() + x.tobytes())
    hdr = _npy_header([1, 4])
    (d / "v9.npy").write_bytes(b"\x93NUMPY\x09\x00" + hdr[8:] + x.tobytes())
    (d / "negshape.npy").write_bytes(_npy_header([-1, 4]) + x.tobytes())
    (d / "listshape.npy").write_bytes(hdr.replace(b"(1, 4)", b"[1, 4]") + x.tobytes())
    (d / "nodescr.npy").write_bytes(hdr.replace(b"'descr': '<f4', ", b"") + x.tobytes())
    (d / "magiconly.npy").write_bytes(b"\x93NUMPY")
    (d / "magicgarbage.npy").write_bytes(b"\x93NUMPY" + bytes(range(200)))
    (d / "onebyte.npy").write_bytes(b"\x93")
    (d / "empty.npy").write_bytes(b"")
    (d / "shortdata.npy").write_bytes(hdr + x.tobytes()[:9])
    (d / "longdata.npy").write_bytes(hdr + x.tobytes() + bytes(64))   # trailing bytes
    np.savez_compressed(d / "x14c.npz", x=x)
    np.savez(d / "x14_extra.npz", x=x, junk=x)
    np.savez(d / "x14_wrongshape.npz", x=np.ones((1, 5), np.float32))
    np.savez(d / "x14_str.npz", x=np.array(["a", "b", "c", "d"]).reshape(1, 4))
    with zipfile.ZipFile(d / "textmember.npz", "w") as z:
        z.writestr("x.npy", "hello, not an array\n")
    with zipfile.ZipFile(d / "othermember.npz", "w") as z:
        z.writestr("readme.txt", "no arrays here\n")
    with zipfile.ZipFile(d / "dirmember.npz", "w") as z:
        z.writestr("sub/", "")
        z.writestr("x.npy", (d / "x14.npy").read_bytes())
    with zipfile.ZipFile(d / "bz2.npz", "w", compression=zipfile.ZIP_BZIP2) as z:
        z.writestr("x.npy", (d / "x14.npy").read_bytes())
    import gzip

    (d / "gz.npy").write_bytes(gzip.compress((d / "x14.npy").read_bytes()))
    # two-input data
    np.savez(d / "two.npz", a=x, b=x)
    np.savez(d / "two_dtype.npz", a=x, b=x.astype(np.int64))
    np.savez(d / "two_shape.npz", a=x, b=np.ones((1, 5), np.float32))
    np.savez(d / "two_missing.npz", a=x)
    # special files
    for name in ("fifo.onnx", "fifo.npy", "fifo.npz", "fifo.json", "fifo.bin", "fifo.vtapkg",
                 "fifo.rpt", "fifo.jsonl", "fifo.bit", "fifo.hwh", "fifo.whl", "fifo_out.npy",
                 "fifo_out.vtapkg", "fifo_out.npz"):
        with contextlib.suppress(FileExistsError):
            os.mkfifo(d / name)
    for name in ("zero.onnx", "zero.vtapkg", "zero.json", "zero.npy", "zero.bit"):
        with contextlib.suppress(FileExistsError):
            os.symlink("/dev/zero", d / name)
    with contextlib.suppress(FileExistsError):
        os.symlink("loop.onnx", d / "loop.onnx")
    with open(d / "sparse.onnx", "wb") as fh:       # 3 GiB of holes: past protobuf's 2 GiB
        fh.truncate(3 << 30)
    with open(d / "sparse.rpt", "wb") as fh:
        fh.truncate(3 << 30)
    with open(d / "sparse.jsonl", "wb") as fh:
        fh.truncate(3 << 30)
    (d / "afile").write_text("a file, not a directory\n")
    (d / "adir").mkdir(exist_ok=True)
    (d / "adir.onnx").mkdir(exist_ok=True)
    (d / "adir.vtapkg").mkdir(exist_ok=True)
    (d / "emptydir").mkdir(exist_ok=True)
    # configs
    configs = {
        "cfg_empty": {}, "cfg_batch_neg": {"LOG_BATCH": -1}, "cfg_block0": {"LOG_BLOCK": 0},
        "cfg_block10": {"LOG_BLOCK": 10}, "cfg_inpw7": {"LOG_INP_WIDTH": 7},
        "cfg_wgtw1": {"LOG_WGT_WIDTH": 1}, "cfg_accw2": {"LOG_ACC_WIDTH": 2},
        "cfg_uop3": {"LOG_UOP_BUFF_SIZE": 3}, "cfg_inpbuf40": {"LOG_INP_BUFF_SIZE": 40},
        "cfg_bus2": {"LOG_BUS_WIDTH": 2}, "cfg_clock_neg": {"CLOCK_MHZ": -100},
        "cfg_clock0": {"CLOCK_MHZ": 0}, "cfg_target": {"TARGET": "nosuchboard"},
        "cfg_hwver": {"HW_VER": 7}, "cfg_alumul2": {"ALU_MUL": 2},
        "cfg_batch_true": {"LOG_BATCH": True}, "cfg_batch_null": {"LOG_BATCH": None},
        "cfg_part_empty": {"PART": ""}, "cfg_part_null": {"PART": None},
        "cfg_string": "pynq", "cfg_number": 5, "cfg_list_cfg": [{"LOG_BATCH": 0}],
    }
    for name, c in configs.items():
        (d / f"{name}.json").write_text(json.dumps(c))
    (d / "cfg_clock_inf.json").write_text('{"CLOCK_MHZ": Infinity}')
    (d / "cfg_clock_1e400.json").write_text('{"CLOCK_MHZ": 1e400}')
    (d / "cfg_nan_batch.json").write_text('{"LOG_BATCH": NaN}')
    (d / "cfg_dupkey.json").write_text('{"LOG_BATCH": 0, "LOG_BATCH": "x"}')
    (d / "cfg_trailing.json").write_text('{} trailing')
    (d / "cfg_bom.json").write_bytes(b"\xef\xbb\xbf" + json.dumps({"TARGET": "pynq"}).encode())
    (d / "cfg_utf16.json").write_bytes(json.dumps({"TARGET": "pynq"}).encode("utf-16"))
    (d / "cfg_whitespace.json").write_text("   \n\t ")
    # DSE files
    (d / "space_empty.json").write_text("{}")
    (d / "space_badaxis.json").write_text(json.dumps({"base": "pynq", "axes": {"NOPE": [1]}}))
    (d / "space_emptyaxis.json").write_text(json.dumps({"base": "pynq",
                                                        "axes": {"LOG_BLOCK": []}}))
    (d / "timing_list.json").write_text("[1, 2]")
    (d / "timing_badval.json").write_text(json.dumps({"0x1234": {"slack_ns": "abc"}}))
    (d / "report_empty.json").write_text("{}")
    (d / "report_list.json").write_text("[]")
    (d / "report_points_str.json").write_text(json.dumps({"points": "abc"}))
    (d / "cache_garbage.jsonl").write_text("not json at all\n{\"half\": \n")
    np.savez(d / "acc_noy.npz", x=rng.random((8, 1, 4), dtype=np.float32))
    np.savez(d / "acc_badlen.npz", x=rng.random((8, 4), dtype=np.float32),
             y=np.zeros(3, np.int64))
    np.savez(d / "acc_floaty.npz", x=rng.random((8, 4), dtype=np.float32),
             y=np.full(8, 0.5, np.float32))
    np.savez(d / "acc_noxy.npz", z=np.zeros(3))
    # bundles, programs
    cfg = preset("pynq")
    fin = encode_program(cfg, [Insn(Opcode.FINISH)]).reshape(-1)
    dram = np.zeros(64, np.uint8)
    dram[16:32] = fin
    save_bundle(d / "ok.npz", dram, 16, 1)
    save_bundle(d / "ok_fp.npz", dram, 16, 1, config=cfg)
    save_bundle(d / "count0.npz", dram, 16, 0)
    save_bundle(d / "countneg.npz", dram, 16, -1)
    save_bundle(d / "addrmis.npz", dram, 8, 1)
    save_bundle(d / "addrpast.npz", dram, 4096, 1)
    save_bundle(d / "addrneg.npz", dram, -16, 1)
    save_bundle(d / "counthuge.npz", dram, 16, 1 << 40)
    save_bundle(d / "nofinish.npz", np.zeros(64, np.uint8), 16, 2)
    garbage = np.frombuffer(rng.bytes(160), np.uint8).copy()
    save_bundle(d / "garbage_prog.npz", np.concatenate([np.zeros(16, np.uint8), garbage]), 16, 10)
    np.savez(d / "dram2d.npz", dram=dram.reshape(4, 16), insn_addr=16, insn_count=1)
    np.savez(d / "nodram.npz", insn_addr=16, insn_count=1)
    np.savez(d / "addr_arr.npz", dram=dram, insn_addr=np.array([16, 32]), insn_count=1)
    np.savez(d / "addr_float.npz", dram=dram, insn_addr=np.float64(16.5), insn_count=1)
    np.savez(d / "extra_member.npz", dram=dram, insn_addr=16, insn_count=1, junk=np.zeros(2))
    (d / "garbage.bin").write_bytes(garbage.tobytes())
    (d / "fin.bin").write_bytes(fin.tobytes())
    np.save(d / "prog_i8.npy", fin.view(np.int8))
    np.save(d / "prog_short.npy", np.zeros(2, np.uint8))
    # artifacts
    relu_cm = compile_model(str(d / "relu.onnx"), x, cfg)
    save_artifact(relu_cm, d / "relu.vtapkg")
    save_artifact(compile_model(str(d / "rank0.onnx"), np.array(0.5, np.float32),
                                cfg), d / "rank0.vtapkg")
    raw = (d / "relu.vtapkg").read_bytes()
    (d / "relu_trunc.vtapkg").write_bytes(raw[: len(raw) // 2])
    (d / "relu_vtapkg.onnx").write_bytes(raw)
    (d / "relu_onnx.vtapkg").write_bytes((d / "relu.onnx").read_bytes())
    for name, man in {"man_list": "[]", "man_obj": "{}", "man_fmt": '{"format": 99}'}.items():
        np.savez(d / f"{name}.npz", manifest=np.array(man))
        (d / f"{name}.vtapkg").write_bytes((d / f"{name}.npz").read_bytes())
    # board
    (d / "garbage.bit").write_bytes(bytes(range(256)) * 8)
    (d / "garbage.whl").write_bytes(bytes(range(256)))
    (d / "garbage.rpt").write_text("Timing summary? no.\nWNS(ns) abc\n")
    (d / "pkg_garbage").mkdir(exist_ok=True)
    (d / "pkg_garbage" / "manifest.json").write_text("{" * 10)
    (d / "pkg_deep").mkdir(exist_ok=True)
    (d / "pkg_deep" / "manifest.json").write_text("[" * 100000 + "]" * 100000)
    (d / "pkg_fifo").mkdir(exist_ok=True)
    with contextlib.suppress(FileExistsError):
        os.mkfifo(d / "pkg_fifo" / "manifest.json")
    (d / "pkg_empty_manifest").mkdir(exist_ok=True)
    (d / "pkg_empty_manifest" / "manifest.json").write_text("{}")

    files = {}
    for p in d.iterdir():
        files[p.name.replace(".", "_")] = str(p)
    files.update(d=str(d), missing=str(d / "nope"), longname="n" * 300)
    return files


# ----------------------------------------------------------------------------- cases
R = "{relu_onnx}"
X = "{x14_npy}"
RUN = f"run --no-progress --model {R} --input"
DSE = "dse run --no-progress --size 7 --workloads resnet18-c2"

CASES: list[tuple[str, str, str]] = [
    # ---- help and version: valid, exit 0, for every command and subcommand
    *[(f"help-{c.replace(' ', '-') or 'top'}", f"{c} --help".strip(), "help") for c in (
        "", "config", "config show", "config presets", "run", "compile", "profile", "exec",
        "disasm", "hw", "hw verilog", "hw resources", "hw timing", "board", "board project",
        "board timing", "board build", "board package", "board verify", "board deploy", "dse",
        "dse run", "dse show")],
    ("version", "--version", "version"),
    # ---- config show / presets
    *[(f"config-{k}", f"config show {{{k}_json}}", "error") for k in (
        "cfg_batch_neg", "cfg_block0", "cfg_block10", "cfg_inpw7", "cfg_wgtw1", "cfg_accw2",
        "cfg_uop3", "cfg_inpbuf40", "cfg_bus2", "cfg_clock_neg", "cfg_clock0", "cfg_target",
        "cfg_hwver", "cfg_alumul2", "cfg_batch_true", "cfg_batch_null", "cfg_part_empty",
        "cfg_string", "cfg_number", "cfg_list_cfg", "cfg_clock_inf",
        "cfg_clock_1e400", "cfg_nan_batch", "cfg_dupkey", "cfg_trailing", "cfg_utf16",
        "cfg_whitespace")],
    ("config-empty-object", "config show {cfg_empty_json}", "config_ok"),
    ("config-part-null", "config show {cfg_part_null_json}", "config_ok"),  # the TARGET's part
    ("config-bom", "config show {cfg_bom_json} --json", "config_ok"),
    ("config-fifo", "config show {fifo_json}", "error"),
    ("config-devzero-link", "config show {zero_json}", "error"),
    ("config-empty-arg", "config show ''", "error"),
    ("config-two-args", "config show pynq tiny", "error"),
    ("config-trailing-slash", "config show {cfg_empty_json}/", "either"),
    ("config-presets-option", "config presets --json", "error"),
    # ---- run: numeric options
    *[(f"run-cache-size-{v}", f"{RUN} {X} {X} --cache-size {v}", "error")
      for v in ("x", "1.5", "-1", "''")],
    *[(f"run-budget-{i}", f"{RUN} {X} --memory-budget {v}", "error") for i, v in enumerate(
        ("''", "nan", "inf", "-1MiB", "0", "1e999", "3XiB", "MiB", "0x10", "1.5.5"))],
    ("run-target-empty", f"{RUN} {X} --target ''", "error"),
    ("run-target-main-job", "run --target bogus", "error"),
    ("run-config-main-job", "run --config {cfg_block0_json}", "error"),
    ("run-output-no-model", "run --output {d}/y.npy", "error"),
    # ---- run: model files
    *[(f"run-model-{k}", f"run --no-progress --model {{{k}}} --input {X}", "error") for k in (
        "opset99_onnx", "ir99_onnx", "if_missing_branch_onnx", "nonodes_onnx",
        "no_outputs_onnx", "undefined_onnx", "cycle_onnx", "dup_output_onnx", "unknown_op_onnx",
        "ms_unknown_onnx", "custom_sub_onnx", "string_in_onnx", "seq_in_onnx", "rank0_onnx",
        "zero_dim_onnx", "ext_missing_onnx", "bad_raw_onnx", "matmul_mismatch_onnx",
        "reshape_bad_onnx", "softmax_axis_onnx", "concat_axis_onnx", "prototxt_onnx",
        "fifo_onnx", "zero_onnx", "loop_onnx", "sparse_onnx", "adir_onnx", "relu_vtapkg_onnx",
        "fifo_vtapkg", "zero_vtapkg", "adir_vtapkg", "relu_trunc_vtapkg", "relu_onnx_vtapkg",
        "man_list_vtapkg", "man_obj_vtapkg", "man_fmt_vtapkg", "two_onnx", "no_inputs_onnx",
        "int8_in_onnx", "bool_in_onnx", "bf16_onnx")],
    ("run-model-conv-mismatch", "run --no-progress --model {conv_mismatch_onnx} --input "
                                "{x1188_npy}", "error"),
    ("run-model-conv-group", "run --no-progress --model {conv_group_onnx} --input "
                             "{x1888_npy}", "error"),
    ("run-model-opset1", f"run --no-progress --model {{opset1_onnx}} --input {X} --output "
                         "{d}/y_opset1.npy", "either_relu_opset1"),
    ("run-model-opset22", f"run --no-progress --model {{opset22_onnx}} --input {X} --output "
                          "{d}/y_opset22.npy", "ort_opset22"),
    ("run-model-if-ok", f"run --no-progress --model {{if_ok_onnx}} --input {X} --output "
                        "{d}/y_if.npy", "ort_if_ok"),
    ("run-model-out-is-input", f"run --no-progress --model {{out_is_input_onnx}} --input {X} "
                               "--output {d}/y_oi.npy", "either_out_is_input"),
    ("run-model-local-function", f"run --no-progress --model {{local_function_onnx}} --input "
                                 f"{X} --output {{d}}/y_lf.npy", "ort_local_function"),
    ("run-model-f16", "run --no-progress --model {f16_onnx} --input {x14_f16_npy} --output "
                      "{d}/y_f16.npy", "either_f16"),
    ("run-model-f64", "run --no-progress --model {f64_onnx} --input {x14_f64_npy} --output "
                      "{d}/y_f64.npy", "ort_f64"),
    ("run-model-gemm", f"run --no-progress --model {{gemm_onnx}} --input {X} --output "
                       "{d}/y_gemm.npy", "ort_gemm"),
    ("run-model-conv", "run --no-progress --model {conv_onnx} --input {x1188_npy} --output "
                       "{d}/y_conv.npy", "ort_conv"),
    ("run-model-pkg-wrong-shape", "run --no-progress --model {relu_vtapkg} --input {x15_npy}",
     "error"),
    ("run-model-pkg-f64", "run --no-progress --model {relu_vtapkg} --input {x14_f64_npy}",
     "either"),
    ("run-model-path-slash", f"run --no-progress --model {R}/ --input {X}", "either"),
    ("run-model-empty-arg", f"run --no-progress --model '' --input {X}", "error"),
    ("run-model-longname", f"run --no-progress --model {{d}}/{{longname}}.onnx --input {X}",
     "error"),
    # ---- run: inputs
    *[(f"run-input-{k}", f"{RUN} {{{k}}}", "error") for k in (
        "x15_npy", "x141_npy", "x04_npy", "x10_npy", "x0d_npy", "x14_inf_npy", "x14_ninf_npy",
        "x14_allnan_npy", "x14_c64_npy", "x14_struct_npy", "x14_dt64_npy", "x14_void_npy",
        "v9_npy", "negshape_npy", "listshape_npy", "nodescr_npy", "magiconly_npy",
        "magicgarbage_npy", "onebyte_npy", "empty_npy", "shortdata_npy", "x14_wrongshape_npz",
        "x14_str_npz", "x14_extra_npz", "textmember_npz", "othermember_npz", "gz_npy",
        "fifo_npy", "fifo_npz", "zero_npy", "two_npz", "adir", "afile", "missing")],
    ("run-input-x4", f"{RUN} {{x4_npy}} --output {{d}}/y_x4.npy", "either_relu_x4"),
    ("run-input-x24", f"{RUN} {{x24_npy}} --output {{d}}/y_x24.npy", "ort_relu_x24"),
    ("run-input-fortran", "run --no-progress --model {relu_dyn_onnx} --input "
                          "{x24_fortran_npy} --output {d}/y_fortran.npy", "ort_relu_fortran"),
    ("run-input-be", f"{RUN} {{x14_be_npy}} --output {{d}}/y_be.npy", "ort_relu_be"),
    ("run-input-v2", f"{RUN} {{v2_npy}} --output {{d}}/y_v2.npy", "ort_relu_v2"),
    ("run-input-compressed", f"{RUN} {{x14c_npz}} --output {{d}}/y_c.npz.npy", "ort_relu_c"),
    ("run-input-dirmember", f"{RUN} {{dirmember_npz}}", "either"),
    ("run-input-bz2", f"{RUN} {{bz2_npz}}", "either"),
    ("run-input-longdata", f"{RUN} {{longdata_npy}}", "either"),
    ("run-input-zero", f"{RUN} {{x14_zero_npy}} --output {{d}}/y_zero.npy", "ort_relu_zero"),
    ("run-input-big", f"{RUN} {{x14_big_npy}} --output {{d}}/y_big.npy", "either_relu_big"),
    ("run-input-denorm", f"{RUN} {{x14_denorm_npy}}", "either"),
    *[(f"run-input-dtype-{k}", f"{RUN} {{x14_{k}_npy}} --output {{d}}/y_{k}.npy",
       f"either_relu_{k}") for k in ("f64", "f16", "i32", "u8", "i8", "u64", "bool")],
    ("run-input-inf-calib-ok", f"{RUN} {{x14_inf_npy}} --calibrate {X}", "error"),
    ("run-input-nan-calib-ok", f"{RUN} {{x14_allnan_npy}} --calibrate {X}", "error"),
    ("run-calib-inf", f"{RUN} {X} --calibrate {{x14_inf_npy}}", "error"),
    ("run-calib-zero-samples", f"{RUN} {X} --calibrate {{x04_npy}}", "error"),
    ("run-calib-wrong-shape", f"{RUN} {X} --calibrate {{x15_npy}}", "error"),
    ("run-calib-fifo", f"{RUN} {X} --calibrate {{fifo_npy}}", "error"),
    ("run-calib-missing", f"{RUN} {X} --calibrate {{missing}}", "error"),
    ("run-calib-dir", f"{RUN} {X} --calibrate {{adir}}", "error"),
    ("run-calib-str", f"{RUN} {X} --calibrate {{x14_str_npz}}", "error"),
    ("run-two-dtype", "run --no-progress --model {two_onnx} --input {two_dtype_npz}", "either"),
    ("run-two-shape", "run --no-progress --model {two_onnx} --input {two_shape_npz}", "error"),
    ("run-two-missing", "run --no-progress --model {two_onnx} --input {two_missing_npz}",
     "error"),
    ("run-many-one-bad", f"{RUN} {X} --input {{x15_npy}}", "error"),
    ("run-many-fifo", f"{RUN} {X} --input {{fifo_npy}}", "error"),
    # ---- run: outputs
    ("run-output-under-file", f"{RUN} {X} --output {{afile}}/y.npy", "error"),
    ("run-output-empty", f"{RUN} {X} --output ''", "error"),
    ("run-output-fifo", f"{RUN} {X} --output {{fifo_out_npy}}", "error"),
    ("run-output-longname", f"{RUN} {X} --output {{d}}/{{longname}}.npy", "error"),
    # ---- compile
    *[(f"compile-model-{k}", f"compile {{{k}}} -o {{d}}/m.vtapkg", "error") for k in (
        "opset99_onnx", "if_missing_branch_onnx", "nonodes_onnx", "cycle_onnx",
        "unknown_op_onnx", "custom_sub_onnx", "string_in_onnx", "ext_missing_onnx",
        "bad_raw_onnx", "fifo_onnx", "zero_onnx", "sparse_onnx", "adir_onnx",
        "relu_vtapkg_onnx", "prototxt_onnx", "loop_onnx", "zero_dim_onnx")],
    # a scalar input (onnxruntime runs it): its random calibration value is the one sample
    ("compile-model-rank0", "compile {rank0_onnx} -o {d}/r0.vtapkg", "rank0_pkg"),
    ("run-model-rank0-scalar", "run --no-progress --model {rank0_onnx} --input {x0d_npy} "
                               "--output {d}/y_r0.npy", "ort_rank0"),
    ("run-pkg-rank0-scalar", "run --no-progress --model {rank0_vtapkg} --input {x0d_npy} "
                             "--output {d}/y_r0p.npy", "ort_rank0_pkg"),
    *[(f"compile-calib-{k}", f"compile {R} -o {{d}}/m.vtapkg --calibrate {{{k}}}", "error")
      for k in ("x15_npy", "x04_npy", "x14_inf_npy", "x14_allnan_npy", "fifo_npy", "zero_npy",
                "v9_npy", "x14_dt64_npy")],
    ("compile-out-dir", f"compile {R} -o {{adir}}", "error"),
    ("compile-out-under-file", f"compile {R} -o {{afile}}/m.vtapkg", "error"),
    ("compile-out-empty", f"compile {R} -o ''", "error"),
    ("compile-out-fifo", f"compile {R} -o {{fifo_out_vtapkg}}", "error"),
    ("compile-no-out", f"compile {R}", "error"),
    ("compile-no-model", "compile -o {d}/m.vtapkg", "error"),
    ("compile-config-bad", f"compile {R} -o {{d}}/m.vtapkg --config {{cfg_block0_json}}",
     "error"),
    ("compile-config-fifo", f"compile {R} -o {{d}}/m.vtapkg --config {{fifo_json}}", "error"),
    ("compile-ok", f"compile {{gemm_onnx}} -o {{d}}/gemm.vtapkg --calibrate {X}",
     "compile_ok"),
    # ---- profile
    ("profile-no-model", "profile --target fsim", "error"),
    ("profile-two-models", f"profile {R} --model {{gemm_onnx}} --target fsim", "error"),
    ("profile-target-empty", f"profile {R} --target ''", "error"),
    ("profile-json-dir", f"profile {R} --target fsim --json {{adir}}", "error"),
    ("profile-json-under-file", f"profile {R} --target fsim --json {{afile}}/p.json", "error"),
    ("profile-plot-dir", f"profile {R} --target fsim --plot {{adir}}", "error"),
    ("profile-plot-no-suffix", f"profile {R} --target fsim --plot {{d}}/plot", "error"),
    ("profile-input-wrong-shape", f"profile {R} --target fsim --input {{x15_npy}}", "error"),
    ("profile-input-fifo", f"profile {R} --target fsim --input {{fifo_npy}}", "error"),
    ("profile-input-inf", f"profile {R} --target fsim --input {{x14_inf_npy}}", "error"),
    ("profile-model-fifo", "profile {fifo_onnx} --target fsim", "error"),
    ("profile-model-zero", "profile {zero_onnx} --target fsim", "error"),
    ("profile-model-opset99", "profile {opset99_onnx} --target fsim", "error"),
    ("profile-model-if-missing", "profile {if_missing_branch_onnx} --target fsim", "error"),
    ("profile-pkg-calibrate", f"profile {{relu_vtapkg}} --target fsim --calibrate {X}", "error"),
    ("profile-pkg-wrong-shape", "profile {relu_vtapkg} --target fsim --input {x15_npy}",
     "error"),
    ("profile-config-bad", f"profile {R} --target fsim --config {{cfg_inpw7_json}}", "error"),
    ("profile-ok", "profile {gemm_onnx} --target fsim --json {d}/prof.json", "profile_ok"),
    # ---- exec
    *[(f"exec-{k}", f"exec {{{k}}}", "error") for k in (
        "count0_npz", "countneg_npz", "addrmis_npz", "addrpast_npz", "addrneg_npz",
        "counthuge_npz", "dram2d_npz", "nodram_npz", "addr_arr_npz", "addr_float_npz",
        "fifo_npz", "zero_vtapkg", "adir", "relu_vtapkg", "garbage_bin")],
    ("exec-nofinish", "exec {nofinish_npz}", "error"),
    ("exec-garbage-prog", "exec {garbage_prog_npz}", "error"),
    ("exec-extra-member", "exec {extra_member_npz}", "either"),
    ("exec-fp-other-config", "exec {ok_fp_npz} --config tiny", "error"),
    *[(f"exec-max-steps-{i}", f"exec {{ok_npz}} --max-steps {v}", "error")
      for i, v in enumerate(("x", "1.5", "-3", "''", "1e3"))],
    ("exec-max-steps-huge", "exec {ok_npz} --max-steps " + "9" * 30, "exec_ok"),
    ("exec-ok-fp", "exec {ok_fp_npz}", "exec_ok"),
    ("exec-out-under-file", "exec {ok_npz} -o {afile}/r.npz", "error"),
    ("exec-out-empty", "exec {ok_npz} -o ''", "error"),
    ("exec-out-fifo", "exec {ok_npz} -o {fifo_out_npz}", "error"),
    ("exec-trace-rtl-nodir", "exec {ok_npz} --target rtl --trace /nonexistent/dir/t.vcd",
     "error"),
    ("exec-config-fifo", "exec {ok_npz} --config {fifo_json}", "error"),
    ("exec-config-bad", "exec {ok_npz} --config {cfg_bus2_json}", "error"),
    ("exec-no-arg", "exec", "error"),
    # ---- disasm
    *[(f"disasm-addr-{i}", f"disasm {{fin_bin}} --insn-addr {v}", "error")
      for i, v in enumerate(("x", "0x10", "1.5", "''", "9" * 30))],
    *[(f"disasm-count-{i}", f"disasm {{fin_bin}} --insn-count {v}", "error")
      for i, v in enumerate(("x", "-1", "0", "1.5", "''", "2"))],
    ("disasm-fifo-bin", "disasm {fifo_bin}", "error"),
    ("disasm-fifo-npz", "disasm {fifo_npz}", "error"),
    ("disasm-zero-link", "disasm {zero_npy}", "error"),
    ("disasm-dir", "disasm {adir}", "error"),
    ("disasm-prog-i8", "disasm {prog_i8_npy}", "error"),
    ("disasm-prog-short", "disasm {prog_short_npy}", "error"),
    ("disasm-count0-bundle", "disasm {count0_npz}", "error"),
    ("disasm-addrneg-bundle", "disasm {addrneg_npz}", "error"),
    ("disasm-relu-vtapkg", "disasm {relu_vtapkg}", "error"),
    ("disasm-config-fifo", "disasm {fin_bin} --config {fifo_json}", "error"),
    ("disasm-garbage", "disasm {garbage_bin}", "either"),
    ("disasm-ok", "disasm {fin_bin}", "disasm_ok"),
    ("disasm-ok-bundle", "disasm {ok_npz}", "disasm_ok"),
    # ---- hw
    ("hw-verilog-name-empty", "hw verilog --config tiny -o {d}/rtl1 --name ''", "error"),
    ("hw-verilog-name-space", "hw verilog --config tiny -o {d}/rtl1 --name 'a b'", "error"),
    ("hw-verilog-name-keyword", "hw verilog --config tiny -o {d}/rtl1 --name module", "error"),
    ("hw-verilog-out-under-file", "hw verilog --config tiny -o {afile}/rtl", "error"),
    ("hw-verilog-out-empty", "hw verilog --config tiny -o ''", "error"),
    ("hw-verilog-config-bad", "hw verilog --config {cfg_block10_json} -o {d}/rtl2", "error"),
    ("hw-verilog-config-fifo", "hw verilog --config {fifo_json} -o {d}/rtl2", "error"),
    ("hw-resources-part-empty", "hw resources --config tiny --part ''", "error"),
    ("hw-resources-config-fifo", "hw resources --config {fifo_json}", "error"),
    ("hw-resources-config-bad", "hw resources --config {cfg_inpbuf40_json}", "error"),
    *[(f"hw-timing-seed-{i}", f"hw timing --no-progress --seed {v}", "error")
      for i, v in enumerate(("x", "1.5", "''"))],
    *[(f"hw-timing-timeout-{i}", f"hw timing --no-progress --timeout {v}", "error")
      for i, v in enumerate(("x", "0.5", "-1", "nan", "inf", "''"))],
    ("hw-timing-device-empty", "hw timing --no-progress --device ''", "error"),
    ("hw-timing-workdir-under-file", "hw timing --no-progress --workdir {afile}/w", "error"),
    ("hw-timing-config-fifo", "hw timing --no-progress --config {fifo_json}", "error"),
    # ---- board project / timing / build
    *[(f"board-project-jobs-{i}", f"board project --config pynq -o {{d}}/proj1 --jobs {v}",
       "error") for i, v in enumerate(("0", "-1", "x", "1.5"))],
    ("board-project-board", "board project --config pynq -o {d}/proj1 --board nosuch", "error"),
    ("board-project-board-part", "board project --config pynq -o {d}/proj1 --board-part bogus",
     "error"),
    ("board-project-out-under-file", "board project --config pynq -o {afile}/p", "error"),
    ("board-project-config-fifo", "board project --config {fifo_json} -o {d}/proj1", "error"),
    ("board-project-config-bad", "board project --config {cfg_clock0_json} -o {d}/proj1",
     "error"),
    ("board-timing-fifo", "board timing {fifo_rpt}", "error"),
    ("board-timing-devzero", "board timing {zero_bit}", "error"),
    ("board-timing-sparse", "board timing {sparse_rpt}", "error"),
    ("board-timing-garbage", "board timing {garbage_rpt}", "error"),
    ("board-timing-empty", "board timing {empty_npy}", "error"),
    ("board-timing-dir", "board timing {adir}", "error"),
    ("board-build-missing", "board build {missing}", "error"),
    ("board-build-file", "board build {afile}", "error"),
    ("board-build-emptydir", "board build {emptydir}", "error"),
    # ---- board package / verify / deploy
    ("board-package-bit-fifo", "board package --config pynq --bitstream {fifo_bit} --hwh "
                               "{garbage_rpt} --model {relu_vtapkg} -o {d}/pkg1", "error"),
    ("board-package-hwh-fifo", "board package --config pynq --bitstream {garbage_bit} --hwh "
                               "{fifo_hwh} --model {relu_vtapkg} -o {d}/pkg1", "error"),
    ("board-package-model-fifo", "board package --config pynq --bitstream {garbage_bit} --hwh "
                                 "{garbage_rpt} --model {fifo_vtapkg} -o {d}/pkg1", "error"),
    ("board-package-wheel-fifo", "board package --config pynq --bitstream {garbage_bit} --hwh "
                                 "{garbage_rpt} --model {relu_vtapkg} --wheel {fifo_whl} "
                                 "-o {d}/pkg1", "error"),
    ("board-package-info-fifo", "board package --config pynq --bitstream {garbage_bit} --hwh "
                                "{garbage_rpt} --model {relu_vtapkg} --bitstream-info "
                                "{fifo_json} -o {d}/pkg1", "error"),
    ("board-package-bit-dir", "board package --config pynq --bitstream {adir} --model "
                              "{relu_vtapkg} -o {d}/pkg1", "error"),
    ("board-package-hwh-missing", "board package --config pynq --bitstream {garbage_bit} "
                                  "--hwh {missing} --model {relu_vtapkg} -o {d}/pkg1", "error"),
    ("board-package-wheel-garbage", "board package --config pynq --bitstream {garbage_bit} "
                                    "--hwh {garbage_rpt} --model {relu_vtapkg} --wheel "
                                    "{garbage_whl} -o {d}/pkg1", "error"),
    ("board-package-info-garbage", "board package --config pynq --bitstream {garbage_bit} "
                                   "--hwh {garbage_rpt} --model {relu_vtapkg} --bitstream-info "
                                   "{cfg_trailing_json} -o {d}/pkg1", "error"),
    ("board-package-model-onnx", "board package --config pynq --bitstream {garbage_bit} --hwh "
                                 "{garbage_rpt} --model {relu_onnx} -o {d}/pkg1", "error"),
    ("board-package-out-file", "board package --config pynq --bitstream {garbage_bit} --hwh "
                               "{garbage_rpt} --model {relu_vtapkg} -o {afile}", "error"),
    ("board-package-no-model", "board package --config pynq --bitstream {garbage_bit} "
                               "-o {d}/pkg1", "error"),
    ("board-package-config-fifo", "board package --config {fifo_json} --bitstream "
                                  "{garbage_bit} --model {relu_vtapkg} -o {d}/pkg1", "error"),
    ("board-verify-file", "board verify {afile}", "error"),
    ("board-verify-emptydir", "board verify {emptydir}", "error"),
    ("board-verify-garbage", "board verify {pkg_garbage}", "error"),
    ("board-verify-deep", "board verify {pkg_deep}", "error"),
    ("board-verify-fifo", "board verify {pkg_fifo}", "error"),
    ("board-verify-empty-manifest", "board verify {pkg_empty_manifest}", "error"),
    ("board-deploy-missing", "board deploy {missing} --host u@h", "error"),
    ("board-deploy-no-host", "board deploy {emptydir}", "error"),
    ("board-deploy-copy", "board deploy {emptydir} --host u@h --copy ftp", "error"),
    *[(f"board-deploy-timeout-{i}", f"board deploy {{pkg_empty_manifest}} --host u@h "
       f"--timeout {v}", "error") for i, v in enumerate(("0", "x", "nan", "inf", "-1"))],
    ("board-deploy-run-fifo", "board deploy {pkg_empty_manifest} --host u@h --run {fifo_npy}",
     "error"),
    ("board-deploy-run-dir", "board deploy {pkg_empty_manifest} --host u@h --run {adir}",
     "error"),
    # ---- dse run: numeric options
    *[(f"dse-samples-{v}", f"{DSE} --samples {v}", "error") for v in ("0", "x", "-1", "1.5")],
    *[(f"dse-seed-{v}", f"{DSE} --seed {v}", "error") for v in ("-1", "x", "1.5")],
    *[(f"dse-dram-latency-{v}", f"{DSE} --dram-latency {v}", "error")
      for v in ("nan", "inf", "-1", "x")],
    *[(f"dse-limit-{v}", f"{DSE} --limit {v}", "error") for v in ("0", "x", "-5")],
    *[(f"dse-jobs-{v}", f"{DSE} --jobs {v}", "error") for v in ("99999", "-1", "x")],
    *[(f"dse-budget-{v}", f"{DSE} --verify rtl --budget {v}", "error") for v in ("-1", "x")],
    ("dse-budget-no-verify", f"{DSE} --budget 2", "error"),
    *[(f"dse-within-{v}", f"{DSE} --within {v}", "error") for v in ("nan", "-1", "inf", "x")],
    *[(f"dse-floor-{v}", f"{DSE} --accuracy digits --accuracy-floor {v}", "error")
      for v in ("101", "-1", "nan", "x")],
    ("dse-floor-no-accuracy", f"{DSE} --accuracy-floor 90", "error"),
    *[(f"dse-size-{i}", f"dse run --no-progress --workloads resnet18-c2 --size {v}", "error")
      for i, v in enumerate(("x", "-3", "0.5", "''"))],
    ("dse-size-huge", "dse run --no-progress --workloads resnet18-c2 --size " + "9" * 30,
     "either"),    # a cap above every layer: the full size
    *[(f"dse-widths-{i}", f"{DSE} --widths {v}", "error")
      for i, v in enumerate(("9", "''", "8,x"))],
    ("dse-widths-trailing-commas", f"{DSE} --widths a4w4,,", "either"),
    ("dse-verify-bogus", f"{DSE} --verify bogus", "error"),
    ("dse-resources-bogus", f"{DSE} --resources bogus", "error"),
    ("dse-perf-bogus", f"{DSE} --perf bogus", "error"),
    ("dse-part-bogus", f"{DSE} --part bogus", "error"),
    ("dse-board-bogus", f"{DSE} --board bogus", "error"),
    ("dse-board-part-conflict", f"{DSE} --board zcu104 --part xc7z020", "error"),
    ("dse-jobs-scheduler", f"{DSE} --jobs 2 --scheduler tcp://127.0.0.1:1", "error"),
    ("dse-workloads-empty", "dse run --no-progress --size 7 --workloads ''", "error"),
    ("dse-workloads-range", "dse run --no-progress --size 7 --workloads resnet18-c5..c2",
     "error"),
    ("dse-workloads-c99", "dse run --no-progress --size 7 --workloads resnet18-c99", "error"),
    # ---- dse run: files
    ("dse-accuracy-noy", f"{DSE} --accuracy {{relu_onnx}}:{{acc_noy_npz}}", "error"),
    ("dse-accuracy-badlen", f"{DSE} --accuracy {{relu_onnx}}:{{acc_badlen_npz}}", "error"),
    ("dse-accuracy-floaty", f"{DSE} --accuracy {{relu_onnx}}:{{acc_floaty_npz}}", "error"),
    ("dse-accuracy-noxy", f"{DSE} --accuracy {{relu_onnx}}:{{acc_noxy_npz}}", "error"),
    ("dse-accuracy-two-inputs", f"{DSE} --accuracy {{two_onnx}}:{{acc_badlen_npz}}", "error"),
    ("dse-accuracy-fifo-model", f"{DSE} --accuracy {{fifo_onnx}}:{{acc_badlen_npz}}", "error"),
    ("dse-accuracy-fifo-data", f"{DSE} --accuracy {{relu_onnx}}:{{fifo_npz}}", "error"),
    ("dse-accuracy-zero-model", f"{DSE} --accuracy {{zero_onnx}}:{{acc_badlen_npz}}", "error"),
    ("dse-accuracy-colons", f"{DSE} --accuracy a:b:c", "error"),
    ("dse-accuracy-empty", f"{DSE} --accuracy ''", "error"),
    ("dse-cache-dir", f"{DSE} --cache {{adir}}", "error"),
    ("dse-cache-fifo", f"{DSE} --cache {{fifo_jsonl}}", "error"),
    ("dse-cache-devzero", f"{DSE} --cache {{zero_json}}", "error"),
    ("dse-cache-sparse", f"{DSE} --cache {{sparse_jsonl}}", "error"),
    ("dse-cache-garbage", f"{DSE} --cache {{cache_garbage_jsonl}}", "either"),
    ("dse-csv-dir", f"{DSE} --csv {{adir}}", "error"),
    ("dse-out-under-file", f"{DSE} -o {{afile}}/r.json", "error"),
    ("dse-plot-txt", f"{DSE} --plot {{d}}/p.txt", "error"),
    ("dse-out-empty", f"{DSE} -o ''", "error"),
    ("dse-csv-fifo", f"{DSE} --csv {{fifo_out_npz}}", "error"),
    ("dse-timing-list", f"{DSE} --timing {{timing_list_json}}", "error"),
    ("dse-timing-badval", f"{DSE} --timing {{timing_badval_json}}", "error"),
    ("dse-timing-fifo", f"{DSE} --timing {{fifo_json}}", "error"),
    ("dse-space-empty", f"{DSE} --space {{space_empty_json}}", "error"),
    ("dse-space-badaxis", f"{DSE} --space {{space_badaxis_json}}", "error"),
    ("dse-space-emptyaxis", f"{DSE} --space {{space_emptyaxis_json}}", "error"),
    ("dse-space-fifo", f"{DSE} --space {{fifo_json}}", "error"),
    ("dse-base-fifo", f"{DSE} --base {{fifo_json}}", "error"),
    ("dse-base-bad", f"{DSE} --base {{cfg_block0_json}}", "error"),
    # ---- dse show
    ("dse-show-empty-object", "dse show {report_empty_json}", "error"),
    ("dse-show-list", "dse show {report_list_json}", "error"),
    ("dse-show-points-str", "dse show {report_points_str_json}", "error"),
    ("dse-show-fifo", "dse show {fifo_json}", "error"),
    ("dse-show-empty-file", "dse show {empty_npy}", "error"),
    ("dse-show-no-arg", "dse show", "error"),
    # ---- usage
    *[(f"usage-no-subcommand-{g or 'top'}", g, "help") for g in ("", "config", "hw", "board",
                                                                  "dse")],
    ("usage-board-no-sub", "board nosuch", "error"),
    ("usage-hw-no-sub", "hw nosuch", "error"),
    ("usage-dse-no-sub", "dse nosuch", "error"),
    ("usage-double-dash", f"run --model {R} -- --input {X}", "error"),
]

#: Cases that fail today (``id: reason``); a test of each is ``xfail(strict=True)``.
XFAIL: dict[str, str] = {}


# ----------------------------------------------------------------------------- checks
def _ort(model: str, x) -> np.ndarray:
    import onnxruntime as ort

    s = ort.InferenceSession(model, providers=["CPUExecutionProvider"])
    feeds = x if isinstance(x, dict) else {s.get_inputs()[0].name: x}
    return s.run(None, feeds)[0]


def _close(got, want, what: str) -> None:
    got = np.asarray(got, np.float64)
    want = np.asarray(want, np.float64)
    assert got.shape == want.shape, f"{what}: shape {got.shape} != onnxruntime {want.shape}"
    scale = max(float(np.abs(want).max()), 1e-6)
    err = float(np.abs(got - want).max()) / scale
    assert err < 0.05, f"{what}: max error {err:.3g} of max |y| vs onnxruntime"


def _ort_check(model_key: str, input_key: str, out: str, ref_model: str | None = None):
    def check(files, stdout):
        x = np.load(files[input_key])
        want = _ort(files[ref_model or model_key], x)
        _close(np.load(f"{files['d']}/{out}"), want, model_key)
    return check


def _relu_check(input_key: str, out: str):
    def check(files, stdout):
        x = np.load(files[input_key]).astype(np.float32)
        y = np.load(f"{files['d']}/{out}")
        _close(y, np.maximum(x, 0).reshape(y.shape) if x.size == y.size else np.maximum(x, 0),
               f"relu on {input_key}")
    return check


def _help(files, stdout):
    assert "Usage:" in stdout, stdout[:200]


def _version(files, stdout):
    assert "vtaforge" in stdout and "0." in stdout, stdout


def _config_ok(files, stdout):
    assert "LOG_BLOCK" in stdout, stdout[:200]


def _compile_ok(files, stdout):
    from vtaforge.runtime.artifact import load_artifact

    cm = load_artifact(f"{files['d']}/gemm.vtapkg")
    assert cm.inputs == ["x"] or list(cm.inputs) == ["x"], cm.inputs


def _rank0_pkg(files, stdout):
    from vtaforge.runtime.artifact import load_artifact

    cm = load_artifact(f"{files['d']}/r0.vtapkg")
    assert list(cm.inputs) == ["x"] and cm.types["x"][1] == (), cm.types


def _profile_ok(files, stdout):
    prof = json.loads(Path(f"{files['d']}/prof.json").read_text())
    assert prof, "empty profile"


def _exec_ok(files, stdout):
    r = json.loads(stdout.strip().splitlines()[-1])
    assert r["target"] == "fsim" and r["cycles"] >= 0, r


def _disasm_ok(files, stdout):
    assert "FINISH" in stdout.upper(), stdout


CHECKS = {
    "help": _help, "version": _version, "config_ok": _config_ok, "compile_ok": _compile_ok,
    "profile_ok": _profile_ok, "exec_ok": _exec_ok, "disasm_ok": _disasm_ok,
    "ort_opset22": _ort_check("opset22_onnx", "x14_npy", "y_opset22.npy"),
    "either_relu_opset1": _relu_check("x14_npy", "y_opset1.npy"),
    "ort_if_ok": _ort_check("if_ok_onnx", "x14_npy", "y_if.npy"),
    "either_out_is_input": _ort_check("out_is_input_onnx", "x14_npy", "y_oi.npy"),
    "ort_local_function": _ort_check("local_function_onnx", "x14_npy", "y_lf.npy"),
    "either_f16": _ort_check("f16_onnx", "x14_f16_npy", "y_f16.npy"),
    "ort_f64": _ort_check("f64_onnx", "x14_f64_npy", "y_f64.npy"),
    "ort_gemm": _ort_check("gemm_onnx", "x14_npy", "y_gemm.npy"),
    "rank0_pkg": _rank0_pkg,
    "ort_rank0": _ort_check("rank0_onnx", "x0d_npy", "y_r0.npy"),
    "ort_rank0_pkg": _ort_check("rank0_onnx", "x0d_npy", "y_r0p.npy"),
    "ort_conv": _ort_check("conv_onnx", "x1188_npy", "y_conv.npy"),
    "either_relu_x4": _relu_check("x4_npy", "y_x4.npy"),
    "ort_relu_x24": _ort_check("relu_dyn_onnx", "x24_npy", "y_x24.npy"),
    "ort_relu_fortran": _ort_check("relu_dyn_onnx", "x24_fortran_npy", "y_fortran.npy"),
    "ort_relu_be": _relu_check("x14_be_npy", "y_be.npy"),
    "ort_relu_v2": _relu_check("x14_npy", "y_v2.npy"),
    "ort_relu_c": _relu_check("x14_npy", "y_c.npz.npy"),
    "ort_relu_zero": _relu_check("x14_zero_npy", "y_zero.npy"),
    "either_relu_big": _relu_check("x14_big_npy", "y_big.npy"),
    **{f"either_relu_{k}": _relu_check(f"x14_{k}_npy", f"y_{k}.npy")
       for k in ("f64", "f16", "i32", "u8", "i8", "u64", "bool")},
}


# ----------------------------------------------------------------------------- running
@contextlib.contextmanager
def memory_limit(nbytes: int = MEMORY_LIMIT):
    """Run under an address-space limit (restored after)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_AS)
    lim = nbytes if hard == resource.RLIM_INFINITY else min(nbytes, hard)
    resource.setrlimit(resource.RLIMIT_AS, (lim, hard))
    try:
        yield
    finally:
        resource.setrlimit(resource.RLIMIT_AS, (soft, hard))


def expand(cmd: str, files: dict[str, str]) -> list[str]:
    """The argument list of a case's command line (shell-quoted) with placeholders filled."""
    return [a.format(**files) for a in shlex.split(cmd)]


def run_case(args: list[str], expect: str, files: dict[str, str],
             timeout: int = TIMEOUT_S) -> tuple[str, int | None, str]:
    """Run one case in process.  Returns ``(verdict, exit status, detail)``: ``"ok"`` when it
    behaved as ``expect`` says, else ``"hang"``, ``"traceback"``, ``"internal"``,
    ``"exit N"``, ``"lines"`` or ``"wrong"`` (exit 0 with an output that fails its check)."""
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

        return "traceback", r.exit_code, "".join(traceback.format_exception(r.exception))
    if "Traceback" in err:
        return "traceback", r.exit_code, err
    if r.exit_code == 3 or "internal error" in err:
        return "internal", r.exit_code, err
    if r.exit_code == 0 and expect != "error":
        try:
            CHECKS.get(expect, lambda f, s: None)(files, r.stdout)
        except AssertionError as e:
            return "wrong", 0, str(e)
        except Exception as e:  # noqa: BLE001 - an unreadable output is wrong too
            return "wrong", 0, f"{type(e).__name__}: {e}"
        return "ok", 0, r.stdout[-300:]
    if expect in ("help", "version") or expect in CHECKS and not expect.startswith("either"):
        return f"exit {r.exit_code}", r.exit_code, err or r.stdout
    if r.exit_code != 2:
        return f"exit {r.exit_code}", r.exit_code, err
    lines = [ln for ln in err.splitlines() if ln.strip()]
    if len(lines) != 1 or not lines[0].startswith("error: "):
        return "lines", r.exit_code, err
    return "ok", 2, err


def main() -> int:
    import tempfile
    import time
    from collections import Counter

    sys.setrecursionlimit(max(sys.getrecursionlimit(), 1000))
    with tempfile.TemporaryDirectory(prefix="vtaforge-bad-extra-") as tmp, memory_limit():
        files = make_files(Path(tmp))
        counts: Counter = Counter()
        codes: Counter = Counter()
        for cid, cmd, expect in CASES:
            t0 = time.perf_counter()
            verdict, code, detail = run_case(expand(cmd, files), expect, files)
            if cid in XFAIL:
                verdict = "xfail" if verdict != "ok" else "XPASS"
            counts[verdict] += 1
            codes[code] += 1
            last = (detail.strip().splitlines() or [""])[-1]
            print(f"{verdict:<9} {time.perf_counter() - t0:6.2f}s {cid:<32} {last[:150]}")
            sys.stdout.flush()
    print(f"{len(CASES)} cases: " + ", ".join(f"{k} {v}" for k, v in counts.most_common()))
    print("exit codes: " + ", ".join(f"{k} {v}" for k, v in codes.most_common()))
    return 0 if counts["ok"] + counts["xfail"] == len(CASES) else 1


if __name__ == "__main__":
    sys.exit(main())
