"""The commands' input boundary (``vtaforge/commands/_inputs.py`` over
``vtaforge/runtime/npz.py``): good files read unchanged, bad ones refused in one line."""

from __future__ import annotations

import zipfile

import numpy as np
import pytest
from vtaforge.commands._inputs import (InputError, check_arity, read_array, read_json,
                                       read_onnx)
from vtaforge.runtime.npz import check_npz, load_npy


@pytest.mark.parametrize("arr", [np.arange(12, dtype=np.float32).reshape(3, 4),
                                 np.asfortranarray(np.ones((3, 5), np.int16)),
                                 np.float64(2.5), np.zeros((0, 3), np.uint8)])
def test_load_npy_round_trip(tmp_path, arr):
    np.save(tmp_path / "a.npy", arr)
    got = load_npy(tmp_path / "a.npy", "input")
    assert got.dtype == arr.dtype and np.array_equal(got, arr)


def test_read_array_npz_and_compressed(tmp_path):
    a, b = np.ones((2, 3), np.float32), np.arange(4)
    np.savez_compressed(tmp_path / "c.npz", a=a, b=b)
    d = read_array(str(tmp_path / "c.npz"))
    assert set(d) == {"a", "b"} and np.array_equal(d["a"], a) and np.array_equal(d["b"], b)
    assert check_npz(tmp_path / "c.npz", "x") == ["a", "b"]


def test_compressed_member_declaring_more_than_it_holds(tmp_path):
    import io

    buf = io.BytesIO()
    np.lib.format.write_array_header_1_0(buf, {"descr": "<f8", "fortran_order": False,
                                               "shape": (1000,)})
    with zipfile.ZipFile(tmp_path / "z.npz", "w", zipfile.ZIP_DEFLATED) as z:
        z.writestr("x.npy", buf.getvalue() + bytes(80))
    with pytest.raises(InputError, match=r"member 'x': declares \[1000\] float64 \(7.8 KiB\) "
                                         r"but holds 80 bytes of data"):
        read_array(str(tmp_path / "z.npz"))


def test_read_json_bom_and_errors(tmp_path):
    p = tmp_path / "a.json"
    p.write_bytes(b'\xef\xbb\xbf{"a": 1}')
    assert read_json(str(p), "thing") == {"a": 1}
    p.write_text('{"a": ')
    with pytest.raises(InputError, match=r"thing '.*a.json' is not valid JSON: Expecting value "
                                         r"\(line 1, column 7\)"):
        read_json(str(p), "thing")


def test_read_onnx_accepts_model_local_functions_and_ort_domains(tmp_path):
    import onnx
    from onnx import TensorProto, helper

    fn = helper.make_function("my.funcs", "Twice", ["x"], ["y"],
                              [helper.make_node("Add", ["x", "x"], ["y"])],
                              [helper.make_opsetid("", 17)])
    nodes = [helper.make_node("Twice", ["x"], ["t"], domain="my.funcs"),
             helper.make_node("Gelu", ["t"], ["y"], domain="com.microsoft")]
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT,
                                                                     [1, 4])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4])])
    m = helper.make_model(g, functions=[fn], opset_imports=[
        helper.make_opsetid("", 17), helper.make_opsetid("my.funcs", 1),
        helper.make_opsetid("com.microsoft", 1)])
    onnx.save(m, str(tmp_path / "f.onnx"))
    assert read_onnx(str(tmp_path / "f.onnx")).inputs == ("x",)


def test_read_onnx_finds_a_custom_op_in_a_subgraph(tmp_path):
    import onnx
    from onnx import TensorProto, helper

    vi = helper.make_tensor_value_info
    body = helper.make_graph([helper.make_node("Zap", ["x"], ["z"], domain="com.example")],
                             "then", [], [vi("z", TensorProto.FLOAT, [1])])
    other = helper.make_graph([helper.make_node("Identity", ["x"], ["w"])], "else", [],
                              [vi("w", TensorProto.FLOAT, [1])])
    g = helper.make_graph([helper.make_node("If", ["c"], ["y"], then_branch=body,
                                            else_branch=other)], "g",
                          [vi("c", TensorProto.BOOL, []), vi("x", TensorProto.FLOAT, [1])],
                          [vi("y", TensorProto.FLOAT, [1])])
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]),
              str(tmp_path / "s.onnx"))
    with pytest.raises(InputError, match=r"a Zap node is in operator domain 'com.example'"):
        read_onnx(str(tmp_path / "s.onnx"))


def test_check_arity():
    check_arity(np.ones(3), "x.npy", "input", ["a"])
    check_arity({"a": 1, "b": 2}, "x.npz", "input", ["a", "b"])
    with pytest.raises(InputError, match=r"input 'x.npy' is one array, but the model has 3 "
                                         r"inputs \(a, b, c\)"):
        check_arity(np.ones(3), "x.npy", "input", ["a", "b", "c"])
