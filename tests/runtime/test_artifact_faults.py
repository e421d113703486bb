"""Damaged or edited ``.vtapkg`` artifacts and inputs are refused before anything runs, with
one ``error:`` line and exit status 2 (issue 10, F6 and F7): a constant of another dtype or
with other bytes (every array carries its dtype, shape and sha256 in the manifest), a CRC
error inside a member, a member declaring a huge array, a manifest that is not UTF-8 JSON,
nested too deep or missing keys, an empty ``.npy`` input."""

from __future__ import annotations

import io
import json
import zipfile

import numpy as np
import pytest
from click.testing import CliRunner
from onnx import TensorProto, helper, numpy_helper

from vtaforge.cli import main
from vtaforge.compiler.compile import compile_model
from vtaforge.runtime.artifact import save_artifact


@pytest.fixture(scope="module")
def art(tmp_path_factory):
    d = tmp_path_factory.mktemp("art")
    rng = np.random.default_rng(0)
    g = helper.make_graph(
        [helper.make_node("Conv", ["x", "w"], ["c"], pads=[1, 1, 1, 1]), helper.make_node("Relu", ["c"], ["y"])],
        "t", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 3, 6, 6])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 8, 6, 6])],
        [numpy_helper.from_array((rng.standard_normal((8, 3, 3, 3)) * 0.3).astype(np.float32), "w")])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)])
    m.ir_version = 8
    x = rng.standard_normal((2, 3, 6, 6)).astype(np.float32)
    cm = compile_model(m, x, "pynq")
    p = d / "m.vtapkg"
    save_artifact(cm, p)
    np.save(d / "x.npy", x)
    return d, p


def _members(p):
    with zipfile.ZipFile(p) as z:
        return {n: z.read(n) for n in z.namelist()}


def _write(p, members):
    with zipfile.ZipFile(p, "w", zipfile.ZIP_STORED) as z:
        for n, b in members.items():
            z.writestr(n, b)


def _npy(a) -> bytes:
    f = io.BytesIO()
    np.save(f, a)
    return f.getvalue()


def _run(d, p):
    r = CliRunner().invoke(main, ["run", "--model", str(p), "--input", str(d / "x.npy")])
    lines = [ln for ln in r.output.splitlines() if ln.strip()]
    assert r.exit_code == 2, r.output
    assert len(lines) == 1 and lines[0].startswith("error: "), r.output
    return lines[0]


def test_constant_of_another_dtype_is_refused(art, tmp_path):
    d, p = art
    mem = _members(p)
    k = next(n for n in mem if n.startswith("c/"))
    a = np.load(io.BytesIO(mem[k]))
    mem[k] = _npy(a.astype(np.int16))
    q = tmp_path / "dtype.vtapkg"
    _write(q, mem)
    assert "do not match the manifest" in _run(d, q) and "int16" in _run(d, q)


def test_constant_with_other_bytes_is_refused(art, tmp_path):
    d, p = art
    mem = _members(p)
    k = next(n for n in mem if n.startswith("c/"))
    a = np.load(io.BytesIO(mem[k])).copy()
    a.reshape(-1)[0] ^= 1
    mem[k] = _npy(a)
    q = tmp_path / "bytes.vtapkg"
    _write(q, mem)
    assert "(checksum)" in _run(d, q)


def test_crc_error_inside_a_member_is_exit_2(art, tmp_path):
    d, p = art
    b = bytearray(p.read_bytes())
    with zipfile.ZipFile(p) as z:
        info = max(z.infolist(), key=lambda i: i.compress_size)
    off = info.header_offset + 30 + len(info.filename) + len(info.extra) + info.compress_size // 2
    b[off] ^= 0x40
    q = tmp_path / "crc.vtapkg"
    q.write_bytes(bytes(b))
    assert "damaged" in _run(d, q) or "not an .npz" in _run(d, q)


def test_member_declaring_a_huge_array_is_exit_2(art, tmp_path):
    d, p = art
    mem = _members(p)
    k = next(n for n in mem if n.startswith("c/"))
    hdr = b"{'descr': '<f8', 'fortran_order': False, 'shape': (1099511627776,), }"
    hdr = hdr + b" " * (118 - len(hdr)) + b"\n"
    mem[k] = b"\x93NUMPY\x01\x00" + len(hdr).to_bytes(2, "little") + hdr + b"\0" * 64
    q = tmp_path / "huge.vtapkg"
    _write(q, mem)
    assert "declares" in _run(d, q)


@pytest.mark.parametrize("manifest", [b"\xff\xfe not utf-8", "[" * 100000 + "]" * 100000, "{}",
                                      '{"format": "vtapkg", "version": 3}'],
                         ids=["non-utf8", "deep", "empty", "no-keys"])
def test_bad_manifest_is_exit_2(art, tmp_path, manifest):
    d, p = art
    mem = _members(p)
    mem["manifest.npy"] = _npy(np.array(manifest if isinstance(manifest, str) else manifest.decode("latin-1")))
    q = tmp_path / "man.vtapkg"
    _write(q, mem)
    _run(d, q)


def test_empty_npy_input_is_exit_2(art, tmp_path):
    d, p = art
    (tmp_path / "empty.npy").write_bytes(b"")
    r = CliRunner().invoke(main, ["run", "--model", str(p), "--input", str(tmp_path / "empty.npy")])
    assert r.exit_code == 2 and r.output.strip().startswith("error: "), r.output


def test_intact_artifact_runs(art):
    d, p = art
    r = CliRunner().invoke(main, ["run", "--model", str(p), "--input", str(d / "x.npy")])
    assert r.exit_code == 0, r.output
    assert json.loads(str(np.load(p)["manifest"]))["arrays"]
