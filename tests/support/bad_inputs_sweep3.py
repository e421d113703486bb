"""A third bad-input sweep (issue 22's done criterion), beside ``bad_inputs.py`` and
``bad_inputs_extra.py``, for the code paths those two do not reach: ``vtaforge compile
--explain``; the board side ``python -m vtaforge.runtime.board run|stats|verify`` (what a
package's run.sh calls; no click); ``board package`` / ``verify`` / ``deploy`` on real and
damaged packages; output paths in directories that refuse new files even to root
(``/proc``), under a file, FIFOs and devices; path names with a newline or 300 characters;
and every other command's odd option values.

Each case is ``(id, command line, expect)``: the command line starts with ``vtaforge``
(the click CLI, in process through CliRunner) or ``board-runner`` (``runtime.board.main``,
in process, stdout and stderr captured); placeholders name the files :func:`make_files`
writes (``{a[...]}``: bad_inputs.py's, ``{b[...]}``: bad_inputs_extra.py's, ``{c[...]}``:
this sweep's, ``{d}``: the folder).  ``expect`` is ``"error"`` (exit status 2, one
``error: ...`` line on stderr, no traceback, no ``internal error``), ``"either"`` (that or
exit 0), or a check of :data:`CHECKS` (exit 0 and the output is right).  A case running past
:data:`TIMEOUT_S` is a hang.

Every case's record: command, exit status, whether stderr holds a traceback, the first
error line, the verdict.  ``tests/test_cli_bad_input_sweep3.py`` checks that the cases
reach every command and runs a sample; the whole sweep (about 480 cases, 15 s on two
shared cores) runs alone::

    python tests/support/bad_inputs_sweep3.py [--json RECORDS.json] [ID-PREFIX ...]
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import shlex
import shutil
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bad_inputs import _deadline, _Hang  # noqa: E402

#: The longest a case may run (seconds) before it counts as a hang.
TIMEOUT_S = int(os.environ.get("BAD_INPUTS_TIMEOUT", "60"))

#: A directory that refuses new files even to root (``os.access`` says it is writable).
NO_NEW_FILES = "/proc"


# ----------------------------------------------------------------------------- files
def _package(c: Path) -> None:
    """A real board package for ``tiny`` (stub bitstream, stand-in wheel) and damaged
    copies of it."""
    from click.testing import CliRunner

    from fake_ssh import boardkit as bk
    from vtaforge.cli import main
    from vtaforge.hw.config import preset

    tiny = preset("tiny")
    bit = bk.write_project(c / "proj", tiny)        # proj/out/vta.bit, .hwh; proj/board.json
    wheel = bk.fake_wheel(c)        # c/vtaforge-0.1.0-py3-none-any.whl
    r = CliRunner().invoke(main, ["board", "package", "--config", "tiny", "--bitstream",
                                  str(bit), "--model", str(c / "relu_tiny.vtapkg"), "-o",
                                  str(c / "pkg"), "--wheel", str(wheel)])
    assert r.exit_code == 0, r.output
    pkg = c / "pkg"
    man = json.loads((pkg / "manifest.json").read_text())

    def copy(name: str) -> Path:
        p = c / name
        shutil.copytree(pkg, p)
        return p

    m = next(iter(sorted(f for f in man["files"] if f.startswith("models/"))))
    p = copy("pkg_tampered")
    with open(p / m, "r+b") as f:
        f.seek(40)
        f.write(b"\xff\xff")
    p = copy("pkg_missing_file")
    (p / m).unlink()
    p = copy("pkg_unlisted")
    (p / "models" / "extra.vtapkg").write_bytes(b"x")
    p = copy("pkg_fifo_file")
    (p / m).unlink()
    os.mkfifo(p / m)
    for name, edit in {
        "pkg_files_list": lambda d: d.update(files=list(d["files"])),
        "pkg_files_empty": lambda d: d.update(files={}),
        "pkg_unsafe": lambda d: d["files"].update({"../escape": {"size": 1, "sha256": "0"}}),
        "pkg_abs": lambda d: d["files"].update({"/etc/passwd": {"size": 1, "sha256": "0"}}),
        "pkg_size_str": lambda d: d["files"][m].update(size="big"),
        "pkg_format": lambda d: d.update(format="something-else"),
        "pkg_no_config": lambda d: d.pop("config"),
        "pkg_models_str": lambda d: d.update(models="digits"),
    }.items():
        p = copy(name)
        d = json.loads((p / "manifest.json").read_text())
        edit(d)
        (p / "manifest.json").write_text(json.dumps(d))
    bitb = bit.read_bytes()
    (bit.parent / "trunc.bit").write_bytes(bitb[: len(bitb) // 2])
    (c / "empty.hwh").write_bytes(b"")
    (c / "garbage.hwh").write_text("<not xml")
    hwh = (bit.parent / "vta.hwh").read_text()
    for name, (old, new) in _PYNQ_REJECTS.items():   # what PYNQ 3.x's loader cannot load
        assert old in hwh, name
        (c / f"{name}.hwh").write_text(hwh.replace(old, new, 1))
    (c / "empty.whl").write_bytes(b"")
    (c / "info_list.json").write_text("[1]")


#: .hwh variants that pynq 3.0.1 with pynqmetadata 0.2.0 cannot load (or loads without the
#: core in ip_dict): ``name -> (text of boardkit's .hwh, its replacement)``
_PYNQ_REJECTS = {
    "hwh_no_name": ('NAME="vta_bd" ', ""),
    "hwh_ps_slave": ('TYPE="MASTER"', 'TYPE="SLAVE"'),
    "hwh_bad_connection": ('SIGNAME="ps_FCLK_CLK0"/>', 'SIGNAME="ps_FCLK_CLK0"><CONNECTIONS>'
                           '<CONNECTION INSTANCE="vta_0" PORT="aclk"/></CONNECTIONS></PORT>'),
    "hwh_left_only": ('NAME="irq" SENSITIVITY', 'LEFT="0" NAME="irq" SENSITIVITY'),
}


def _layer_models(c: Path) -> None:
    """:data:`_LAYERS`: one conv (+ ReLU) or dense layer each, symbolic batch, and an input."""
    import onnx
    from onnx import TensorProto as T
    from onnx import helper, numpy_helper

    rng = np.random.default_rng(0)
    vi = helper.make_tensor_value_info

    def save(name, nodes, x_shape, rank, inits):
        g = helper.make_graph(nodes, "g", [vi("x", T.FLOAT, ["N", *x_shape])],
                              [vi("y", T.FLOAT, [None] * rank)], inits)
        onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 17)]),
                  str(c / f"{name}.onnx"))
        np.save(c / f"{name}_x.npy", rng.random((2, *x_shape), dtype=np.float32))

    def conv(name, cin, cout, k, hw=8, **attrs):
        w = rng.standard_normal((cout, cin // attrs.get("group", 1), k, k)).astype(np.float32)
        b = rng.standard_normal(cout).astype(np.float32)
        save(name, [helper.make_node("Conv", ["x", "w", "b"], ["t"], **attrs),
                    helper.make_node("Relu", ["t"], ["y"])], (cin, hw, hw), 4,
             [numpy_helper.from_array(w, "w"), numpy_helper.from_array(b, "b")])

    conv("k1", 16, 32, 1)
    conv("k7s2", 3, 16, 7, hw=32, strides=[2, 2], pads=[3, 3, 3, 3])
    conv("dw", 16, 16, 3, group=16, pads=[1, 1, 1, 1])
    conv("grp2", 16, 32, 3, group=2, pads=[1, 1, 1, 1])
    conv("dil", 8, 8, 3, hw=16, dilations=[2, 2], pads=[2, 2, 2, 2])
    conv("asym", 8, 8, 3, hw=9, pads=[0, 1, 2, 0])
    conv("odd", 5, 7, 3, hw=5)
    conv("k5s3", 4, 12, 5, hw=17, strides=[3, 3])
    conv("hw1", 32, 32, 1, hw=1)
    w = numpy_helper.from_array(rng.standard_normal((10, 20)).astype(np.float32), "w")
    save("gemmT", [helper.make_node("Gemm", ["x", "w"], ["y"], transB=1)], (20,), 2, [w])
    w = numpy_helper.from_array(rng.standard_normal((20, 1000)).astype(np.float32), "w")
    save("mm1000", [helper.make_node("MatMul", ["x", "w"], ["y"])], (20,), 2, [w])


def _reports(c: Path) -> None:
    """A real DSE report (tiny's space, one layer) and :data:`_REPORTS` damaged copies."""
    import copy

    from click.testing import CliRunner

    from vtaforge.cli import main

    (c / "space.json").write_text(json.dumps({"base": "tiny", "axes": {"LOG_BLOCK": [2, 3]}}))
    r = CliRunner().invoke(main, ["dse", "run", "--no-progress", "--size", "4", "--workloads",
                                  "resnet18-c2", "--space", str(c / "space.json"), "-o",
                                  str(c / "report.json")])
    assert r.exit_code == 0, r.output
    rep = json.loads((c / "report.json").read_text())

    def nums(d, v):
        for p in d["points"]:
            for k in p:
                if isinstance(p[k], (int, float)) and not isinstance(p[k], bool):
                    p[k] = v
    edits = {
        "no_points": lambda d: d.pop("points"),
        "points_nondict": lambda d: d.update(points=[1, "a", None]),
        "point_no_params": lambda d: d["points"][0].pop("params"),
        "points_empty": lambda d: d.update(points=[]),
        "numbers_str": lambda d: nums(d, "x"),
        "summary_null": lambda d: d.update(summary=None),
        "best_unknown": lambda d: d["best"].update(latency="0xdeadbeef"),
        "nan_values": lambda d: nums(d, float("nan")),
        "negative_values": lambda d: nums(d, -1),
        "capacity_list": lambda d: d.update(capacity=[1]),
        "points_none": lambda d: d.update(points=None),
    }
    for name, edit in edits.items():
        d = copy.deepcopy(rep)
        edit(d)
        (c / f"report_{name}.json").write_text(json.dumps(d))


def make_files(d: Path) -> dict:
    """Write the sweep's files into ``d``: ``{"a": ..., "b": ..., "c": ..., "d": folder}``."""
    import bad_inputs
    import bad_inputs_extra

    from vtaforge.compiler.compile import compile_model
    from vtaforge.hw.config import preset
    from vtaforge.runtime.artifact import save_artifact

    d = Path(d)
    a = bad_inputs.make_files(d / "a")
    b = bad_inputs_extra.make_files(d / "b")
    c = d / "c"
    c.mkdir(parents=True, exist_ok=True)
    x = np.random.default_rng(3).standard_normal((1, 4)).astype(np.float32)
    save_artifact(compile_model(b["relu_onnx"], x, preset("tiny")), c / "relu_tiny.vtapkg")
    _package(c)
    _layer_models(c)
    _reports(c)
    np.save(c / "x14.npy", x)
    os.mkfifo(c / "fifo_out.npy")
    (c / "run.log").write_text("placement:\n")
    (c / "failed.log").write_text("placement:\nerror: the run failed\n")
    (c / "afile").write_text("a file\n")
    cf = {p.name.replace(".", "_"): str(p) for p in c.iterdir()}
    out = c / "proj" / "out"
    cf.update(wheel_whl=str(next(c.glob("vtaforge-*.whl"))), vta_bit=str(out / "vta.bit"), vta_hwh=str(out / "vta.hwh"),
              trunc_bit=str(out / "trunc.bit"))
    cf.update(nl="missing\nname", long="n" * 300, proc=NO_NEW_FILES)
    return {"a": a, "b": b, "c": cf, "d": str(d)}


# ----------------------------------------------------------------------------- cases
RELU, X = "{b[relu_onnx]}", "{b[x14_npy]}"
PKG = "{b[relu_vtapkg]}"                           # relu compiled for pynq
BR = f"board-runner run --model {PKG} --config pynq --target fsim --input"
STATS = ("board-runner stats --model {c[relu_tiny_vtapkg]} --config tiny --input {c[x14_npy]} "
         "--output {d}/y.npy --target fsim --log {c[run_log]}")
EXPLAIN = "vtaforge compile --explain"
PACKAGE = ("vtaforge board package --config tiny --bitstream {c[vta_bit]} --hwh {c[vta_hwh]} "
           "--model {c[relu_tiny_vtapkg]} --wheel {c[wheel_whl]}")
DSE = "vtaforge dse run --no-progress --size 7 --workloads resnet18-c2"

_ODD_MODELS = (
    "a[empty_onnx]", "a[trunc_onnx]", "a[garbage_onnx]", "a[custom_onnx]", "a[custom_named_onnx]",
    "a[text_txt]", "b[no_outputs_onnx]", "b[no_inputs_onnx]", "b[opset99_onnx]",
    "b[ir99_onnx]", "b[if_missing_branch_onnx]", "b[nonodes_onnx]", "b[cycle_onnx]",
    "b[dup_output_onnx]", "b[unknown_op_onnx]", "b[ms_unknown_onnx]", "b[custom_sub_onnx]",
    "b[string_in_onnx]", "b[seq_in_onnx]", "b[ext_missing_onnx]", "b[bad_raw_onnx]",
    "b[matmul_mismatch_onnx]", "b[conv_mismatch_onnx]", "b[conv_group_onnx]",
    "b[reshape_bad_onnx]", "b[softmax_axis_onnx]", "b[concat_axis_onnx]", "b[prototxt_onnx]",
    "b[fifo_onnx]", "b[zero_onnx]", "b[sparse_onnx]", "b[adir_onnx]", "b[loop_onnx]",
    "b[bf16_onnx]", "b[int8_in_onnx]", "b[bool_in_onnx]", "b[relu_vtapkg_onnx]",
    "b[two_onnx]", "c[nl]", "c[long]")
_ODD_DATA = (
    "a[crc_npz]", "a[trunc_npz]", "a[trunc_npy]", "a[huge_npy]", "a[huge_npz]",
    "a[badhdr_npy]", "a[obj_npy]", "a[obj_npz]", "a[str_npy]", "a[cplx_npy]", "a[empty_npz]",
    "a[wrongname_npz]", "a[empty_bin]", "a[text_txt]", "a[binary_bin]", "b[x15_npy]",
    "b[x141_npy]", "b[x04_npy]", "b[x10_npy]", "b[x14_inf_npy]", "b[x14_allnan_npy]",
    "b[x14_c64_npy]", "b[x14_struct_npy]", "b[x14_dt64_npy]", "b[x14_void_npy]", "b[v9_npy]",
    "b[negshape_npy]", "b[listshape_npy]", "b[nodescr_npy]", "b[magiconly_npy]",
    "b[onebyte_npy]", "b[empty_npy]", "b[shortdata_npy]", "b[textmember_npz]",
    "b[othermember_npz]", "b[gz_npy]", "b[fifo_npy]", "b[zero_npy]", "b[two_npz]",
    "b[adir]", "b[missing]", "c[nl]", "c[long]")
_ODD_PACKAGES = ("garbage_vtapkg", "empty_vtapkg", "npy_vtapkg", "nomanifest_vtapkg",
                 "badmanifest_vtapkg", "deepmanifest_vtapkg", "huge_vtapkg", "crc_pkg_vtapkg")
_ODD_CONFIGS = ("a[nonutf8_json]", "a[deep_json]", "a[broken_json]", "a[list_json]",
                "a[null_json]", "a[strint_json]", "a[bigint_json]", "a[nanclock_json]",
                "a[unknownkey_json]", "b[cfg_block0_json]", "b[cfg_inpbuf40_json]",
                "b[cfg_utf16_json]", "b[fifo_json]", "b[zero_json]", "b[adir]",
                "b[missing]", "c[nl]")
_BAD_OUTPUTS = {"proc": "{c[proc]}/y.npy", "under-file": "{c[afile]}/y.npy",
                "dir": "{b[adir]}", "fifo": "{c[fifo_out_npy]}", "devfull": "/dev/full",
                "nodir": "{d}/nodir/y.npy", "nl": "{d}/a\nb/y.npy"}
_PKGS_BAD = ("pkg_tampered", "pkg_missing_file", "pkg_unlisted", "pkg_fifo_file",
             "pkg_files_list", "pkg_files_empty", "pkg_unsafe", "pkg_abs", "pkg_size_str",
             "pkg_format", "pkg_no_config", "pkg_models_str")
#: Conv / dense layers of unusual shapes (:func:`_layer_models`): ``--explain`` prints one
#: plan each, and ``run`` matches onnxruntime.
_LAYERS = ("k1", "k7s2", "dw", "grp2", "dil", "asym", "odd", "k5s3", "hw1", "gemmT", "mm1000")
#: Damaged copies of a real DSE report (:func:`_reports`): ``dse show`` refuses each in one
#: line, except the two whose values are odd but well-typed.
_REPORTS = {"no_points": "error", "points_nondict": "error", "point_no_params": "error",
            "points_empty": "error", "numbers_str": "error", "summary_null": "error",
            "best_unknown": "error", "nan_values": "either", "negative_values": "either",
            "capacity_list": "error", "points_none": "error"}


def _k(key: str) -> str:
    return key.split("[")[1].rstrip("]")


CASES: list[tuple[str, str, str]] = [
    # ---- compile --explain: odd models, data, configs, outputs; valid models checked
    *[(f"explain-model-{_k(m)}", f"{EXPLAIN} {{{m}}} -o {{d}}/m.vtapkg --config tiny", "error")
      for m in _ODD_MODELS],
    *[(f"explain-calib-{_k(x)}", f"{EXPLAIN} {RELU} -o {{d}}/m.vtapkg --calibrate {{{x}}}",
       "error") for x in _ODD_DATA],
    *[(f"explain-config-{_k(cfg)}", f"{EXPLAIN} {RELU} -o {{d}}/m.vtapkg --config {{{cfg}}}",
       "error") for cfg in _ODD_CONFIGS],
    *[(f"explain-out-{k}", f"{EXPLAIN} {RELU} -o {shlex.quote(o.replace('y.npy', 'm.vtapkg'))}",
       "error")
      for k, o in _BAD_OUTPUTS.items()],
    ("explain-out-empty", f"{EXPLAIN} {RELU} -o ''", "error"),
    ("explain-with-value", f"vtaforge compile --explain=yes {RELU} -o {{d}}/m.vtapkg", "error"),
    ("explain-conv-tiny", f"{EXPLAIN} {{b[conv_onnx]}} -o {{d}}/e1.vtapkg --config tiny",
     "explain_1"),
    ("explain-conv-pynq", f"{EXPLAIN} {{b[conv_onnx]}} -o {{d}}/e2.vtapkg --calibrate "
                          "{b[x1188_npy]}", "explain_1"),
    ("explain-gemm-tiny", f"{EXPLAIN} {{b[gemm_onnx]}} -o {{d}}/e3.vtapkg --config tiny",
     "explain_1"),
    ("explain-relu", f"{EXPLAIN} {RELU} -o {{d}}/e4.vtapkg", "explain_0"),
    ("explain-rank0", f"{EXPLAIN} {{b[rank0_onnx]}} -o {{d}}/e5.vtapkg", "explain_0"),
    ("explain-f16", f"{EXPLAIN} {{b[f16_onnx]}} -o {{d}}/e6.vtapkg", "explain_0"),
    ("explain-dyn", f"{EXPLAIN} {{b[relu_dyn_onnx]}} -o {{d}}/e7.vtapkg", "explain_0"),
    ("explain-two", f"{EXPLAIN} {{b[two_onnx]}} -o {{d}}/e8.vtapkg --calibrate {{b[two_npz]}}",
     "explain_0"),
    ("explain-digits-tiny", f"{EXPLAIN} {{a[digits]}} -o {{d}}/e9.vtapkg --config tiny",
     "explain_n"),
    *[(f"explain-layer-{m}-{cfg}", f"{EXPLAIN} {{c[{m}_onnx]}} -o {{d}}/el_{m}_{cfg}.vtapkg "
                                   f"--config {cfg}", "explain_1")
      for m in _LAYERS for cfg in ("tiny", "pynq")],
    *[(f"run-layer-{m}-{cfg}", f"vtaforge run --no-progress --model {{c[{m}_onnx]}} --input "
                               f"{{c[{m}_x_npy]}} --calibrate {{c[{m}_x_npy]}} --config {cfg} "
                               f"--output {{d}}/y_{m}_{cfg}.npy", "ort_layer")
      for m in _LAYERS for cfg in ("tiny", "batch2")],
    *[(f"dse-show-{k}", f"vtaforge dse show {{c[report_{k}_json]}}", expect)
      for k, expect in _REPORTS.items()],
    ("dse-show-ok", "vtaforge dse show {c[report_json]}", "either"),
    # ---- board runner: run
    *[(f"br-run-input-{_k(x)}", f"{BR} {{{x}}}", "error") for x in _ODD_DATA],
    *[(f"br-run-model-{m}", f"board-runner run --model {{a[{m}]}} --config pynq --target fsim "
                            f"--input {X}", "error") for m in _ODD_PACKAGES],
    *[(f"br-run-model-{m}", f"board-runner run --model {{b[{m}]}} --config pynq --target fsim "
                            f"--input {X}", "error")
      for m in ("fifo_vtapkg", "zero_vtapkg", "adir_vtapkg", "relu_trunc_vtapkg",
                "relu_onnx_vtapkg", "man_list_vtapkg", "man_obj_vtapkg", "man_fmt_vtapkg",
                "missing", "relu_onnx")],
    ("br-run-model-other-config", f"board-runner run --model {{c[relu_tiny_vtapkg]}} --config "
                                  f"pynq --target fsim --input {X}", "error"),
    *[(f"br-run-config-{_k(cfg)}", f"board-runner run --model {PKG} --config {{{cfg}}} "
                                   f"--target fsim --input {X}", "error") for cfg in _ODD_CONFIGS],
    ("br-run-config-empty", f"board-runner run --model {PKG} --config '' --target fsim "
                            f"--input {X}", "error"),
    ("br-run-config-preset", f"board-runner run --model {PKG} --config nosuchpreset "
                             f"--target fsim --input {X}", "error"),
    *[(f"br-run-target-{t or 'empty'}", f"board-runner run --model {PKG} --config pynq "
                                        f"--target '{t}' --input {X}", "error")
      for t in ("bogus", "", "FSIM", "pynq")],
    *[(f"br-run-output-{k}", f"{BR} {X} --output {shlex.quote(o)}", "error")
      for k, o in _BAD_OUTPUTS.items()],
    ("br-run-output-empty", f"{BR} {X} --output ''", "error"),
    ("br-run-ok", f"{BR} {X} --output {{d}}/br_y.npy", "br_relu"),
    ("br-run-no-args", "board-runner run", "error"),
    ("br-run-unknown-option", f"{BR} {X} --bogus 1", "error"),
    ("br-no-command", "board-runner", "error"),
    ("br-unknown-command", "board-runner nosuch", "error"),
    # ---- board runner: stats
    *[(f"br-stats-o-{k}", f"{STATS} --start 0 --end 1 -o {shlex.quote(o)}", "error")
      for k, o in _BAD_OUTPUTS.items()],
    *[(f"br-stats-{which}-{v or 'empty'}", f"{STATS} --start {s} --end {e} -o {{d}}/s.json",
       "error") for which, v, s, e in (
        ("start", "nan", "nan", "1"), ("start", "x", "x", "1"), ("start", "", "''", "1"),
        ("end", "inf", "0", "inf"), ("end", "-inf", "0", "-inf"), ("end", "1e999", "0", "1e999"))],
    ("br-stats-exit-status-x", f"{STATS} --start 0 --end 1 --exit-status x -o {{d}}/s.json",
     "error"),
    ("br-stats-missing-o", f"{STATS} --start 0 --end 1", "error"),
    *[(f"br-stats-file-{k}", STATS.replace("{c[" + k + "]}", v) + " --start 0 --end 1 -o "
       "{d}/s_" + k + ".json", "stats_error") for k, v in (
        ("relu_tiny_vtapkg", "{b[fifo_vtapkg]}"),)],
    ("br-stats-log-fifo", STATS.replace("{c[run_log]}", "{b[fifo_bin]}")
     + " --start 0 --end 1 -o {d}/s_lf.json", "stats_ok"),
    ("br-stats-config-fifo", STATS.replace("--config tiny", "--config {b[fifo_json]}")
     + " --start 0 --end 1 -o {d}/s_cfg.json", "stats_error"),
    ("br-stats-input-fifo", STATS.replace("--input {c[x14_npy]}", "--input {b[fifo_npy]}")
     + " --start 0 --end 1 -o {d}/s_in.json", "stats_ok"),
    ("br-stats-log-sparse", STATS.replace("{c[run_log]}", "{b[sparse_rpt]}")
     + " --start 0 --end 1 -o {d}/s_sp.json", "stats_ok"),
    ("br-stats-ok", f"{STATS} --start 0 --end 1 -o {{d}}/s_ok.json", "stats_ok"),
    ("br-stats-failed-log", STATS.replace("{c[run_log]}", "{c[failed_log]}")
     + " --exit-status 2 --start 0 --end 1 -o {d}/s_failed.json", "stats_failed"),
    ("br-stats-model-missing", STATS.replace("{c[relu_tiny_vtapkg]}", "{b[missing]}")
     + " --start 0 --end 1 -o {d}/s_nomodel.json", "stats_nomodel"),
    # ---- verify, both sides
    *[(f"{side}-verify-{k}", f"{cmd} {{{path}}}", "error")
      for side, cmd in (("br", "board-runner verify"), ("cli", "vtaforge board verify"))
      for k, path in (("missing", "b[missing]"), ("file", "b[afile]"), ("emptydir", "b[emptydir]"),
                      ("garbage", "b[pkg_garbage]"), ("deep", "b[pkg_deep]"),
                      ("fifo", "b[pkg_fifo]"), ("empty-manifest", "b[pkg_empty_manifest]"),
                      ("nl", "c[nl]"), ("long", "c[long]"),
                      *((p, f"c[{p}]") for p in _PKGS_BAD))],
    ("br-verify-ok", "board-runner verify {c[pkg]}", "verify_ok"),
    ("cli-verify-ok", "vtaforge board verify {c[pkg]}", "verify_ok"),
    # ---- board package
    *[(f"package-out-{k}", f"{PACKAGE} -o "
       f"{shlex.quote(o.replace('/y.npy', '/pkg').replace('{d}/', '{d}/new-'))}",
       "either" if k in ("nodir", "nl") else "error")     # a new folder's parents are made
      for k, o in _BAD_OUTPUTS.items() if k not in ("dir",)],
    ("package-out-empty", f"{PACKAGE} -o ''", "error"),
    ("package-out-nonempty-dir", f"{PACKAGE} -o {{b[adir_onnx]}}/..", "error"),
    *[(f"package-model-{m}", PACKAGE.replace("{c[relu_tiny_vtapkg]}", f"{{a[{m}]}}")
       + " -o {d}/pkgx", "error") for m in _ODD_PACKAGES],
    ("package-model-other-config", PACKAGE.replace("{c[relu_tiny_vtapkg]}", PKG)
     + " -o {d}/pkgx", "error"),
    ("package-model-twice", f"{PACKAGE} --model {{c[relu_tiny_vtapkg]}} -o {{d}}/pkgx", "error"),
    ("package-bit-trunc", PACKAGE.replace("{c[vta_bit]}", "{c[trunc_bit]}") + " -o {d}/pkgx",
     "error"),
    ("package-bit-trunc-info", PACKAGE.replace("{c[vta_bit]}", "{c[trunc_bit]}")
     + " --bitstream-info {c[proj]}/board.json -o {d}/pkgx", "error"),
    ("package-bit-hwh-swapped", PACKAGE.replace("--hwh {c[vta_hwh]}", "--hwh {c[vta_bit]}")
     + " -o {d}/pkgx", "error"),
    ("package-bit-other-config", PACKAGE.replace("--config tiny", "--config pynq")
     + " -o {d}/pkgx", "error"),
    *[(f"package-hwh-{k}", PACKAGE.replace("{c[vta_hwh]}", f"{{c[{k}]}}") + " -o {d}/pkgx",
       "error") for k in ("empty_hwh", "garbage_hwh", "nl", "long",
                          *(f"{n}_hwh" for n in _PYNQ_REJECTS))],
    *[(f"package-wheel-{k}", PACKAGE.replace("{c[wheel_whl]}", v) + " -o {d}/pkgx", "error")
      for k, v in (("empty", "{c[empty_whl]}"), ("dir", "{b[adir]}"), ("missing", "{b[missing]}"),
                   ("onnx", RELU))],
    *[(f"package-info-{k}", f"{PACKAGE} --bitstream-info {v} -o {{d}}/pkgx", "error")
      for k, v in (("list", "{c[info_list_json]}"), ("deep", "{a[deep_json]}"),
                   ("nonutf8", "{a[nonutf8_json]}"), ("missing", "{b[missing]}"))],
    *[(f"package-config-{_k(cfg)}", PACKAGE.replace("--config tiny", f"--config {{{cfg}}}")
       + " -o {d}/pkgx", "error") for cfg in _ODD_CONFIGS[:8]],
    ("package-ok", f"{PACKAGE} -o {{d}}/pkg_ok", "package_ok"),
    # ---- board deploy: refused before any ssh
    *[(f"deploy-out-{k}", f"vtaforge board deploy {{c[pkg]}} --host u@nohost --run {X} -o "
                          f"{shlex.quote(o.replace('/y.npy', '/res'))}", "error")
      for k, o in _BAD_OUTPUTS.items() if k not in ("dir", "nodir", "fifo", "devfull")],
    *[(f"deploy-pkg-{p}", f"vtaforge board deploy {{c[{p}]}} --host u@nohost", "error")
      for p in _PKGS_BAD],
    *[(f"deploy-remote-dir-{i}", f"vtaforge board deploy {{c[pkg]}} --host u@nohost "
                                 f"--remote-dir {shlex.quote(v)}", "error")
      for i, v in enumerate(("", "a b", "$(id)", "-x", "a\nb"))],
    ("deploy-model-unknown", f"vtaforge board deploy {{c[pkg]}} --host u@nohost --run {X} "
                             "--model nosuch", "error"),
    ("deploy-run-bad-input", "vtaforge board deploy {c[pkg]} --host u@nohost --run "
                             "{b[fifo_npy]}", "error"),
    ("deploy-host-newline", "vtaforge board deploy {c[pkg]} --host 'u@h\nx'", "error"),
    # ---- output folders and files of every other command
    *[(f"out-{cmd.split()[0]}-{k}", "vtaforge " + cmd.replace("OUT", shlex.quote(o)), "error")
      for cmd in (f"run --no-progress --model {RELU} --input {X} --output OUT",
                  "exec {b[ok_npz]} -o OUT", f"profile {RELU} --target fsim --json OUT",
                  "dse run --no-progress --size 7 --workloads resnet18-c2 -o OUT")
      for k, o in (("proc", "{c[proc]}/y.npy"), ("nl", "{d}/a\nb/y.npy"),
                   ("long", "{d}/{c[long]}/y.npy"))],
    *[(f"outdir-{name}-{k}", f"vtaforge {cmd} {shlex.quote(o)}", "error")
      for name, cmd in (("hw-verilog", "hw verilog --config tiny -o"),
                        ("board-project", "board project --config tiny -o"),
                        ("hw-timing", "hw timing --no-progress --workdir"))
      for k, o in (("proc", "{c[proc]}/out"), ("under-file", "{c[afile]}/out"),
                   ("long", "{d}/{c[long]}/out"))],
    ("out-profile-plot-proc", f"vtaforge profile {RELU} --target fsim --plot {{c[proc]}}/p.png",
     "error"),
    ("out-exec-trace-proc", "vtaforge exec {b[ok_npz]} --target rtl --trace {c[proc]}/t.vcd",
     "error"),
    *[(f"out-dse-{opt}-proc", f"{DSE} --{opt} {{c[proc]}}/r.{ext}", "error")
      for opt, ext in (("csv", "csv"), ("plot", "png"), ("cache", "jsonl"))],
    # ---- odd names and flag values on every command
    *[(f"name-{'-'.join(cmd.split()[:2 if cmd.startswith(('board', 'dse', 'config', 'hw')) else 1])}-{k}",
       "vtaforge " + cmd.replace("PATH", p), "error")
      for cmd in ("run --no-progress --model PATH --input " + X, "compile PATH -o {d}/m.vtapkg",
                  "profile PATH --target fsim", "exec PATH", "disasm PATH", "config show PATH",
                  "dse show PATH", "board timing PATH", "board build PATH",
                  "hw resources --config PATH")
      for k, p in (("nl", "{c[nl]}"), ("long", "{d}/{c[long]}"))],
    *[(f"flag-{i}", f"vtaforge {cmd}", expect) for i, (cmd, expect) in enumerate((
        (f"run --no-progress --model {RELU} --input {X} --cache-size 99999999999999999999999",
         "either"),
        (f"run --no-progress --model {RELU} --input {X} --memory-budget 1e30", "either"),
        (f"run --no-progress --model {RELU} --input {X} --memory-budget 1KiB", "either"),
        (f"run --no-progress --model {RELU} --input {X} --target", "error"),
        (f"run --no-progress --model {RELU} --input {X} --config ''", "error"),
        ("exec {b[ok_npz]} --max-steps -1", "error"),
        ("exec {b[ok_npz]} --target ''", "error"),
        ("disasm {b[fin_bin]} --insn-count 999999999999999999999", "error"),
        ("disasm {b[fin_bin]} --insn-addr -1", "error"),
        ("hw resources --config tiny --part xc7z020 --part ''", "error"),
        ("hw verilog --config tiny -o {d}/rtl9 --name 'ä'", "error"),
        ("board project --config tiny -o {d}/proj9 --jobs 999999999999999999999", "error"),
        ("board project --config tiny -o {d}/proj9 --board ''", "error"),
        ("board timing {b[garbage_rpt]} --json --json", "error"),
        ("board deploy {c[pkg]} --host u@nohost --timeout 1e400", "error"),
        ("board deploy {c[pkg]} --host u@nohost --copy ''", "error"),
        (f"{DSE[9:]} --samples 99999999999999999999999", "either"),
        (f"{DSE[9:]} --within 1e400", "error"),
        (f"{DSE[9:]} --widths a4w4,a4w4,x", "error"),
        (f"{DSE[9:]} --accuracy {RELU}", "error"),
        (f"{DSE[9:]} --accuracy :{{b[acc_badlen_npz]}}", "error"),
        ("dse run --no-progress --size 7 --workloads resnet18-c2,resnet18-c2,", "either"),
        ("config show pynq --json --bogus", "error"),
        ("config presets --bogus", "error"),
        ("--bogus", "error"),
        ("run --no-progress --model", "error"),
        ("compile", "error"),
    ))],
]


# ----------------------------------------------------------------------------- checks
def _explain(n: str):
    def check(files, out, err):
        lines = [ln for ln in out.splitlines() if ln.startswith("conv plans (")]
        assert len(lines) == 1, out[-500:]
        k = int(lines[0].split("(")[1].split()[0])
        assert (k == 0) if n == "0" else (k == 1) if n == "1" else (k >= 2), lines[0]
    return check


def _br_relu(files, out, err):
    y = np.load(f"{files['d']}/br_y.npy")
    x = np.load(files["b"]["x14_npy"])
    err_ = float(np.abs(y - np.maximum(x, 0)).max()) / max(float(np.abs(x).max()), 1e-6)
    assert y.shape == x.shape and err_ < 0.05, (y, x)


def _stats(path: str, expect: str) -> None:
    """The stats.json a ``stats`` case wrote: its ``error`` says what went wrong (or None)."""
    d = json.loads(Path(path).read_text())
    err = d["error"] or ""
    want = {"stats_ok": "", "stats_error": "is not a regular file (a FIFO or a device)",
            "stats_failed": "error: the run failed", "stats_nomodel": "no such file"}[expect]
    assert (want in err) if want else not err, (expect, d["error"])
    if expect == "stats_ok":
        assert d["input_shape"] in (None, [1, 4]) and d["config_fingerprint"], d


def _ort_layer(files, args):
    """``run --model M --input X --output Y``: Y matches onnxruntime's float output."""
    import onnxruntime as ort

    m, x, y = (args[args.index(k) + 1] for k in ("--model", "--input", "--output"))
    want = ort.InferenceSession(m, providers=["CPUExecutionProvider"]).run(
        None, {"x": np.load(x)})[0].astype(np.float64)
    got = np.load(y).astype(np.float64)
    assert got.shape == want.shape, (got.shape, want.shape)
    cos = float(got.ravel() @ want.ravel() / (np.linalg.norm(got) * np.linalg.norm(want)))
    assert cos > 0.99, f"cosine {cos:.4f} vs onnxruntime"


def _verify_ok(files, out, err):
    assert "match" in out, out


def _package_ok(files, out, err):
    assert (Path(files["d"]) / "pkg_ok" / "manifest.json").is_file(), out


CHECKS = {
    "explain_0": _explain("0"), "explain_1": _explain("1"), "explain_n": _explain("n"),
    "br_relu": _br_relu, "verify_ok": _verify_ok, "package_ok": _package_ok,
}


# ----------------------------------------------------------------------------- running
def expand(cmd: str, files: dict) -> list[str]:
    """The argument list of a case's command line (shell-quoted), placeholders filled."""
    return [a.format(**files) for a in shlex.split(cmd)]


def _invoke(args: list[str]) -> tuple[int | None, str, str, BaseException | None]:
    """``(exit status, stdout, stderr, uncaught exception)`` of one command line."""
    if args[0] == "vtaforge":
        from click.testing import CliRunner

        from vtaforge.cli import main

        r = CliRunner().invoke(main, args[1:], catch_exceptions=True)
        exc = r.exception if not isinstance(r.exception, SystemExit) else None
        return r.exit_code, r.stdout, r.stderr, exc
    from vtaforge.runtime import board

    out, err = io.StringIO(), io.StringIO()
    code, exc = None, None
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            code = board.main(args[1:])
        except SystemExit as e:
            code = e.code if isinstance(e.code, int) else (0 if e.code is None else 1)
        except Exception as e:  # noqa: BLE001 - the sweep records it
            exc, code = e, 1
    return code, out.getvalue(), err.getvalue(), exc


def run_case(args: list[str], expect: str, files: dict, timeout: int = TIMEOUT_S) -> dict:
    """Run one case; its record: ``code``, ``traceback``, ``first_error``, ``verdict``
    (``ok``, ``hang``, ``traceback``, ``internal``, ``exit N``, ``lines``, ``wrong``)."""
    rec = {"command": shlex.join(args), "code": None, "traceback": False, "first_error": ""}
    t0 = time.perf_counter()
    try:
        with _deadline(timeout):
            code, out, err, exc = _invoke(args)
    except _Hang:
        rec.update(verdict="hang", seconds=round(time.perf_counter() - t0, 2))
        return rec
    rec["seconds"] = round(time.perf_counter() - t0, 2)
    if exc is not None:
        import traceback

        err = err + "".join(traceback.format_exception(exc))
    lines = [ln for ln in err.splitlines() if ln.strip()]
    rec.update(code=code, traceback="Traceback" in err,
               first_error=next((ln for ln in lines if "error" in ln.lower()),
                                lines[0] if lines else ""))
    if rec["traceback"]:
        rec["verdict"] = "traceback"
    elif code == 3 or "internal error" in err:
        rec["verdict"] = "internal"
    elif code == 0 and expect != "error":
        try:
            if expect.startswith("stats_"):
                _stats(args[args.index("-o") + 1], expect)
            elif expect == "ort_layer":
                _ort_layer(files, args)
            else:
                CHECKS.get(expect, lambda f, o, e: None)(files, out, err)
            rec["verdict"] = "ok"
        except Exception as e:  # noqa: BLE001 - a wrong or unreadable output
            rec.update(verdict="wrong", first_error=f"{type(e).__name__}: {e}"[:300])
    elif expect not in ("error", "either"):
        rec["verdict"] = f"exit {code}"
    elif code != 2:
        rec["verdict"] = f"exit {code}"
    elif len(lines) != 1 or not lines[0].startswith("error: "):
        rec["verdict"] = "lines"
    else:
        rec["verdict"] = "ok"
    return rec


def main(argv: list[str] | None = None) -> int:
    import argparse
    import tempfile
    from collections import Counter

    from bad_inputs_extra import memory_limit

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--json", help="write every case's record to this file")
    ap.add_argument("prefixes", nargs="*", help="only the cases whose id starts with one")
    a = ap.parse_args(argv)
    sys.setrecursionlimit(max(sys.getrecursionlimit(), 1000))
    cases = [c for c in CASES if not a.prefixes or c[0].startswith(tuple(a.prefixes))]
    records = []
    with tempfile.TemporaryDirectory(prefix="vtaforge-sweep3-") as tmp:
        files = make_files(Path(tmp))
        with memory_limit():
            for cid, cmd, expect in cases:
                rec = {"id": cid, "expect": expect, **run_case(expand(cmd, files), expect,
                                                                files)}
                rec["command"] = rec["command"].replace(tmp, "$D")
                rec["first_error"] = rec["first_error"].replace(tmp, "$D")
                records.append(rec)
                print(f"{rec['verdict']:<9} {rec['seconds']:6.2f}s {str(rec['code']):>4} "
                      f"{cid:<34} {rec['first_error'][:140]}", flush=True)
    verdicts = Counter(r["verdict"] for r in records)
    codes = Counter(str(r["code"]) for r in records)
    print(f"{len(records)} cases: " + ", ".join(f"{k} {v}" for k, v in verdicts.most_common()))
    print("exit codes: " + ", ".join(f"{k} {v}" for k, v in codes.most_common()))
    print(f"tracebacks: {sum(r['traceback'] for r in records)}, hangs: {verdicts['hang']}")
    if a.json:
        Path(a.json).write_text(json.dumps(records, indent=1) + "\n")
    return 0 if verdicts["ok"] == len(records) else 1


if __name__ == "__main__":
    sys.exit(main())
