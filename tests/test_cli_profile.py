"""``vtaforge profile``: per-step cycles beside their bound, as text, JSON and a roofline.

Oracles: each conv/FC step's ideal MAC cycles are recomputed here from the ONNX graph
(``onnx.shape_inference``: ``Cout * Cin/groups * kh * kw * Hout * Wout`` MACs over the
array's MACs per cycle); the PNG is checked by its signature and IHDR chunk and decoded by
matplotlib; cycles are checked against their lower bounds and their sums.
"""

from __future__ import annotations

import json
import re
import struct
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from vtaforge.cli import main
from vtaforge.commands.profile import step_cycles_lines
from vtaforge.hw.config import preset

MODEL = Path(__file__).parent / "compiler" / "real_models" / "resnet_tiny.ts_op13.onnx"
STEP_KEYS = {"name", "placement", "cycles", "ideal_cycles", "bound_cycles", "efficiency",
             "dram_bytes", "units"}


@pytest.fixture(scope="module")
def x_path(tmp_path_factory):
    p = tmp_path_factory.mktemp("prof") / "x.npy"
    np.save(p, np.load(MODEL.parent / "inputs.npz")["resnet_tiny"][0])
    return p


def onnx_ideal_cycles(path: Path, macs_per_cycle: int) -> dict[str, int]:
    """node name -> ceil(MACs / macs_per_cycle) of every Conv and Gemm node (batch 1)."""
    onnx = pytest.importorskip("onnx")
    m = onnx.shape_inference.infer_shapes(onnx.load(str(path)))
    shapes = {}
    for vi in list(m.graph.value_info) + list(m.graph.input) + list(m.graph.output):
        shapes[vi.name] = [d.dim_value for d in vi.type.tensor_type.shape.dim]
    for t in m.graph.initializer:
        shapes[t.name] = list(t.dims)
    out = {}
    for n in m.graph.node:
        if n.op_type == "Conv":
            w = shapes[n.input[1]]                    # [Cout, Cin/g, kh, kw]
            y = shapes[n.output[0]]                   # [N, Cout, Ho, Wo]
            macs = w[0] * w[1] * w[2] * w[3] * y[2] * y[3]
        elif n.op_type == "Gemm":
            w = shapes[n.input[1]]
            macs = w[0] * w[1]
        else:
            continue
        out[n.name] = -(-macs // macs_per_cycle)
    return out


def check_profile(d: dict, cfg, *, measured: bool) -> None:
    """Schema and internal consistency of a ``--json`` profile."""
    assert set(d) == {"config", "total_cycles", "steps"}
    assert d["config"] == cfg.to_dict()
    vta = [s for s in d["steps"] if s["placement"] == "VTA"]
    assert len(vta) >= 8
    for s in d["steps"]:
        assert set(s) == STEP_KEYS, s
        assert isinstance(s["name"], str) and isinstance(s["units"], dict)
        for k in ("cycles", "ideal_cycles", "bound_cycles", "dram_bytes"):
            assert isinstance(s[k], int) and s[k] >= 0
    assert d["total_cycles"] == sum(s["cycles"] for s in vta)
    ideal = onnx_ideal_cycles(MODEL, cfg.BATCH * cfg.BLOCK_IN * cfg.BLOCK_OUT)
    assert {s["name"] for s in vta if s["ideal_cycles"]} == set(ideal)
    for s in vta:
        assert s["cycles"] > 0 and s["dram_bytes"] > 0
        assert s["ideal_cycles"] == ideal.get(s["name"], 0), s["name"]
        assert s["bound_cycles"] >= s["ideal_cycles"] and s["bound_cycles"] > 0
        assert s["efficiency"] == pytest.approx(s["bound_cycles"] / s["cycles"], abs=1e-4)
        assert s["cycles"] >= s["ideal_cycles"]       # MACs / array is a true lower bound
        if measured:
            assert s["efficiency"] <= 1.0              # and so is the DRAM bound on the core
        assert {"load", "compute", "store"} <= set(s["units"])
        for unit, u in s["units"].items():
            assert set(u) == {"busy", "stall", "idle"}
            assert 0 <= u["busy"] <= s["cycles"], (s["name"], unit)
            assert u["idle"] == max(0, s["cycles"] - u["busy"] - (u["stall"] or 0))
            if not measured:
                assert u["stall"] is None
        assert s["units"]["compute"]["busy"] >= s["ideal_cycles"]
    for s in d["steps"]:
        if s["placement"] != "VTA":
            assert s["placement"].startswith("CPU") and s["cycles"] == 0 and s["units"] == {}


def check_png(path: Path) -> None:
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    length, kind = struct.unpack(">I4s", data[8:16])
    assert kind == b"IHDR" and length == 13
    w, h = struct.unpack(">II", data[16:24])
    assert w >= 200 and h >= 200
    img = pytest.importorskip("matplotlib.image").imread(str(path))
    assert img.shape[:2] == (h, w)
    assert float(np.ptp(img[..., :3])) > 0.5           # not a blank canvas


@pytest.fixture(scope="module")
def fsim_profile(x_path, tmp_path_factory):
    pytest.importorskip("matplotlib")
    d = tmp_path_factory.mktemp("prof_out")
    js, png = d / "p.json", d / "roof.png"
    r = CliRunner().invoke(main, ["profile", str(MODEL), "--input", str(x_path), "--config",
                                  "tiny", "--target", "fsim", "--json", str(js),
                                  "--plot", str(png)])
    assert r.exit_code == 0, r.output
    return r.output, json.loads(js.read_text()), png


def test_profile_fsim_json_matches_schema_and_onnx_macs(fsim_profile):
    out, d, _ = fsim_profile
    check_profile(d, preset("tiny"), measured=False)
    assert "DSE cycle model" in out and "use --target rtl for cycles" in out


def test_profile_fsim_text_table_agrees_with_json(fsim_profile):
    out, d, _ = fsim_profile
    rows = {ln.split()[0]: ln.split() for ln in out.splitlines() if re.match(r"^\s+\S+\s+VTA\s", ln)}
    vta = [s for s in d["steps"] if s["placement"] == "VTA"]
    assert set(rows) == {s["name"] for s in vta}
    for s in vta:
        row = rows[s["name"]]
        assert int(row[2]) == s["cycles"] and int(row[4]) == s["ideal_cycles"]
        assert int(row[5]) == s["bound_cycles"] and int(row[8]) == s["dram_bytes"]
    total = re.search(r"total VTA: (\d+) cycles .* ideal (\d+), bound (\d+)", out)
    assert total and int(total.group(1)) == d["total_cycles"]
    assert int(total.group(2)) == sum(s["ideal_cycles"] for s in vta)
    assert any(ln.strip().startswith("input_quantize") and "CPU (numpy)" in ln for ln in out.splitlines())


def test_profile_plot_is_a_valid_png_with_one_point_per_mac_step(fsim_profile):
    out, d, png = fsim_profile
    check_png(png)
    n = sum(1 for s in d["steps"] if s["placement"] == "VTA" and s["ideal_cycles"])
    assert f"roofline ({n} points)" in out


def test_profile_without_input_uses_a_seeded_sample(tmp_path):
    js = tmp_path / "p.json"
    args = ["profile", str(MODEL), "--config", "tiny", "--target", "fsim", "--json", str(js)]
    r = CliRunner().invoke(main, args)
    assert r.exit_code == 0, r.output
    first = json.loads(js.read_text())
    check_profile(first, preset("tiny"), measured=False)
    r = CliRunner().invoke(main, args)
    assert r.exit_code == 0 and json.loads(js.read_text()) == first   # deterministic


@pytest.mark.rtl
def test_profile_on_rtl_reports_measured_cycles_and_counters(x_path, tmp_path):
    pytest.importorskip("vtaforge.runtime.rtl")
    js = tmp_path / "rtl.json"
    r = CliRunner().invoke(main, ["profile", "--model", str(MODEL), "--input", str(x_path),
                                  "--config", "tiny", "--target", "rtl", "--json", str(js)])
    assert r.exit_code == 0, r.output
    d = json.loads(js.read_text())
    check_profile(d, preset("tiny"), measured=True)
    for s in d["steps"]:
        if s["placement"] == "VTA":
            assert set(s["units"]) == {"fetch", "load", "compute", "store"}
            assert s["units"]["fetch"]["stall"] is None
            for unit in ("load", "compute", "store"):
                u = s["units"][unit]
                assert u["busy"] + u["stall"] + u["idle"] == s["cycles"], (s["name"], unit)
    assert "core cycles" in r.output


@pytest.mark.parametrize("extra, message", [
    (["--json", "/nonexistent/dir/p.json"], "error: --json '/nonexistent/dir/p.json': directory"),
    (["--plot", "/nonexistent/dir/r.png"], "error: --plot '/nonexistent/dir/r.png': directory"),
    (["--plot", "{tmp}/r.jpg"], "the name must end in .png"),
    (["--plot", "{tmp}"], "is a directory, not a file"),
    (["--json", "{tmp}"], "is a directory, not a file"),
    (["--target", "gpu"], "error: unknown target 'gpu'"),
    (["--target", "pynq"], "error: profile runs on fsim or rtl, not on 'pynq'"),
    (["--input", "{tmp}/missing.npy"], "error: cannot read input"),
])
def test_profile_bad_paths_and_options_are_one_error_line(tmp_path, extra, message):
    extra = [a.replace("{tmp}", str(tmp_path)) for a in extra]
    r = CliRunner().invoke(main, ["profile", str(MODEL), "--config", "tiny", "--target",
                                  "fsim", *extra])
    assert r.exit_code == 2, r.output
    assert message in r.output and r.output.strip().startswith("error:"), r.output
    assert "Traceback" not in r.output and len(r.output.strip().splitlines()) == 1
    assert not list(tmp_path.iterdir())                # nothing written


def test_profile_missing_model_is_one_error_line(tmp_path):
    r = CliRunner().invoke(main, ["profile", str(tmp_path / "none.onnx"), "--target", "fsim"])
    assert r.exit_code == 2 and r.output.startswith("error: cannot read model"), r.output
    r = CliRunner().invoke(main, ["profile", "--target", "fsim"])
    assert r.exit_code == 2 and r.output.startswith("error: missing argument MODEL"), r.output


def test_step_cycles_lines_for_run():
    from types import SimpleNamespace as NS

    steps = [NS(name="q", target="cpu"), NS(name="conv", target="vta"),
             NS(name="pool", target="vta")]
    stats = {"q": NS(cycles=0), "conv": NS(cycles=300), "pool": NS(cycles=100)}
    lines = step_cycles_lines(NS(steps=steps), stats)
    assert lines[0] == "core cycles: 400 in 2 VTA step(s)"
    assert [ln.split() for ln in lines[1:]] == [["conv", "300", "75%"], ["pool", "100", "25%"]]


@pytest.mark.rtl
def test_run_on_rtl_prints_core_cycles_per_step(x_path):
    """`vtaforge run --target rtl` ends with the core's cycles: a total and one line per
    VTA step whose figures sum to it."""
    pytest.importorskip("vtaforge.runtime.rtl")
    r = CliRunner().invoke(main, ["run", "--model", str(MODEL), "--input", str(x_path),
                                  "--config", "tiny", "--target", "rtl"])
    assert r.exit_code == 0, r.output
    lines = r.output.splitlines()
    i = next(k for k, ln in enumerate(lines) if ln.startswith("core cycles: "))
    total = int(lines[i].split()[2])
    steps = [ln.split() for ln in lines[i + 1:] if ln.startswith("  ")]
    assert total > 0 and steps and sum(int(s[1]) for s in steps) == total, r.output


@pytest.fixture(scope="module")
def resnet18_224(tmp_path_factory):
    onnx = pytest.importorskip("onnx")
    from vtaforge.compiler import zoo

    p = tmp_path_factory.mktemp("r18") / "resnet18.onnx"
    onnx.save(zoo.resnet18(224, num_classes=1000), str(p))
    return p


@pytest.mark.parametrize("extra", [{}, {"ALU_REQUANT": True, "REQ_ENGINE": True}],
                         ids=["pynq", "pynq+engine"])
def test_profile_fsim_every_step_within_its_bound_with_residual_adds(resnet18_224, tmp_path,
                                                                     extra):
    """ResNet-18's residual adds read two operands and write one, on separate AXI channels:
    their bound summed both (pynq: add42 1.13, add83 1.07; with the REQ engine 1.04-1.42).
    The cycle model's lower bound is the busier channel, so no step may beat its bound."""
    cfg = preset("pynq").replace(**extra)
    cfg_path = tmp_path / "cfg.json"
    cfg_path.write_text(cfg.to_json())
    js = tmp_path / "p.json"
    r = CliRunner().invoke(main, ["profile", str(resnet18_224), "--config", str(cfg_path),
                                  "--target", "fsim", "--json", str(js)])
    assert r.exit_code == 0, r.output
    steps = [s for s in json.loads(js.read_text())["steps"] if s["placement"] == "VTA"]
    adds = [s for s in steps if s["name"].startswith("add")]
    assert len(adds) == 8
    for s in steps:
        assert s["efficiency"] <= 1.0, (s["name"], s["cycles"], s["bound_cycles"])
    # the adds' bound is the read channel's: two int8 operands over the 8-byte bus
    hw = {64: 56, 128: 28, 256: 14, 512: 7}
    for s, c in zip(adds, [64, 64, 128, 128, 256, 256, 512, 512]):
        assert s["bound_cycles"] == 2 * c * hw[c] ** 2 // 8, s["name"]


def test_profile_memory_bound_convs_within_their_bound(tmp_path):
    """zcu104-fast (2,048 MACs per cycle on a 128-bit bus) makes MobileNet-v1's pointwise
    convs memory-bound: their bound summed input and output on one channel, so the cycle
    model beat it (conv22: 56,486 cycles against 75,424, efficiency 1.34).  The bound is
    the busier channel: every step within it, and some convs bound by their writes
    (the output bytes over 16 bytes per cycle, from the graph's shapes)."""
    onnx = pytest.importorskip("onnx")
    from vtaforge.compiler import zoo

    p = tmp_path / "mobilenet.onnx"
    onnx.save(zoo.mobilenet_v1(96, num_classes=10), str(p))
    js = tmp_path / "p.json"
    r = CliRunner().invoke(main, ["profile", str(p), "--config", "zcu104-fast",
                                  "--target", "fsim", "--json", str(js)])
    assert r.exit_code == 0, r.output
    steps = [s for s in json.loads(js.read_text())["steps"] if s["placement"] == "VTA"]
    for s in steps:
        assert s["efficiency"] <= 1.0, (s["name"], s["cycles"], s["bound_cycles"])
    # the first pointwise conv, 32 -> 64 channels at 48x48: bound by its 147,456 B of writes
    assert any(s["bound_cycles"] == 64 * 48 * 48 // 16 > s["ideal_cycles"] for s in steps)


def test_profile_vtapkg_defaults_to_its_own_config(tmp_path):
    """As for run: a .vtapkg compiled for another core, profiled without --config, runs on
    that core (it was refused: compiled for another config than pynq)."""
    from vtaforge.compiler.models import DIGITS_ONNX

    cfg = preset("pynq").replace(TOKEN_QUEUE_DEPTH=2)
    cfg_path = tmp_path / "cfg.json"
    cfg_path.write_text(cfg.to_json())
    pkg = tmp_path / "digits.vtapkg"
    r = CliRunner().invoke(main, ["compile", str(DIGITS_ONNX), "-o", str(pkg), "--config",
                                  str(cfg_path)])
    assert r.exit_code == 0, r.output
    js = tmp_path / "p.json"
    r = CliRunner().invoke(main, ["profile", str(pkg), "--target", "fsim", "--json", str(js)])
    assert r.exit_code == 0, r.output
    d = json.loads(js.read_text())
    assert d["config"] == cfg.to_dict()
    assert sum(s["placement"] == "VTA" for s in d["steps"]) == 6
    # --config still wins, and another config is refused in one error line
    r = CliRunner().invoke(main, ["profile", str(pkg), "--target", "fsim", "--config", "pynq"])
    assert r.exit_code != 0
    assert "fingerprint" in r.output or "config" in r.output
