"""Progress on stderr for the long commands (issue 22, item 6) and the core cycles of the
main job on rtl (item 7): through click's CliRunner, with the slow tools (Yosys, nextpnr,
Verilator) replaced by fakes.  CliRunner's stderr is not a terminal, so "a terminal" is
``_output.stderr_is_tty`` patched to True."""

from __future__ import annotations

import re

import numpy as np
import pytest
from click.testing import CliRunner

from vtaforge.cli import main
from vtaforge.commands import _output
from vtaforge.hw.config import preset


def _invoke(args, tty, monkeypatch):
    monkeypatch.setattr(_output, "stderr_is_tty", lambda: tty)
    return CliRunner().invoke(main, [str(a) for a in args])


@pytest.fixture
def small_digits(monkeypatch):
    """The main job on the first 100 held-out images (the split's other parts unchanged)."""
    import vtaforge.compiler.models as models

    real = models.load_digits_split

    def split():
        xtr, ytr, xte, yte = real()
        return xtr, ytr, xte[:100], yte[:100]

    monkeypatch.setattr(models, "load_digits_split", split)


def test_progress_enabled_only_on_a_terminal_and_without_no_progress(monkeypatch):
    monkeypatch.setattr(_output, "stderr_is_tty", lambda: False)
    assert not _output.progress_enabled()
    monkeypatch.setattr(_output, "stderr_is_tty", lambda: True)
    assert _output.progress_enabled()
    assert not _output.progress_enabled(no_progress=True)


@pytest.mark.parametrize("tty,flag,shown", [(True, [], True), (True, ["--no-progress"], False),
                                            (False, [], False)])
def test_main_job_progress(small_digits, monkeypatch, tty, flag, shown):
    r = _invoke(["run", *flag], tty, monkeypatch)
    assert r.exit_code == 0, r.output
    assert ("VTA (fsim, " in r.stderr) == shown, r.stderr
    if shown:
        assert re.search(r"100/100 \[", r.stderr), r.stderr
    assert "VTA (fsim, " not in r.stdout      # the bar never goes to stdout


class _FakeCyclesDevice:
    """``--target rtl`` without Verilator: fsim reporting the cycle model's cycles."""

    def __new__(cls, cfg, **kw):
        from vtaforge.commands.profile import model_cycles_device

        return model_cycles_device(cfg)


def test_main_job_on_rtl_prints_core_cycles_last(small_digits, monkeypatch):
    import vtaforge.runtime.bundle as bundle

    real = bundle.make_device
    monkeypatch.setattr(bundle, "make_device", lambda target, cfg, **kw:
                        _FakeCyclesDevice(cfg) if target == "rtl" else real(target, cfg, **kw))
    r = _invoke(["run", "--target", "rtl"], False, monkeypatch)
    assert r.exit_code == 0, r.output
    lines = r.stdout.strip().splitlines()
    # docs/cli.md: ends with `core cycles: N in K VTA step(s)` and one line per VTA step
    head = [i for i, ln in enumerate(lines) if ln.startswith("core cycles:")]
    assert len(head) == 1, r.stdout
    m = re.fullmatch(r"core cycles: (\d+) in (\d+) VTA step\(s\) for 100 images "
                     r"\(([\d,]+) per image\)", lines[head[0]])
    assert m, lines[head[0]]
    total, k = int(m[1]), int(m[2])
    steps = lines[head[0] + 1:]
    assert len(steps) == k == 6, steps           # conv1 pool1 conv2 pool2 fc1 fc2
    per = [int(ln.split()[1]) for ln in steps]
    assert sum(per) == total > 0
    assert int(m[3].replace(",", "")) == round(total / 100)
    assert [ln.split()[0] for ln in steps] == ["conv1", "pool1", "conv2", "pool2", "fc1", "fc2"]


def test_main_job_on_fsim_prints_no_core_cycles(small_digits, monkeypatch):
    r = _invoke(["run"], False, monkeypatch)
    assert r.exit_code == 0 and "core cycles" not in r.stdout


def _digits_input(tmp_path, n):
    from vtaforge.compiler.models import load_digits_split

    x = load_digits_split()[2][:n]
    p = tmp_path / "x.npy"
    np.save(p, x)
    return p


def test_run_model_progress_counts_samples(tmp_path, monkeypatch):
    from vtaforge.compiler.models import DIGITS_ONNX

    x = _digits_input(tmp_path, 40)
    r = _invoke(["run", "--model", DIGITS_ONNX, "--input", x], True, monkeypatch)
    assert r.exit_code == 0, r.output
    assert re.search(r"40/40 \[", r.stderr), r.stderr
    # one run of a symbolic batch: the steps show progress inside it (digits: 9 steps)
    assert [int(m) for m in re.findall(r"step (\d+)/9\]", r.stderr)][:9] == list(range(1, 10))
    r = _invoke(["run", "--model", DIGITS_ONNX, "--input", x, "--no-progress"], True,
                monkeypatch)
    assert r.exit_code == 0 and r.stderr == "", r.stderr


def test_run_vtapkg_progress_shows_the_steps(tmp_path, monkeypatch):
    from vtaforge.compiler.models import DIGITS_ONNX

    x = _digits_input(tmp_path, 40)
    pkg = tmp_path / "d.vtapkg"
    assert _invoke(["compile", DIGITS_ONNX, "-o", pkg], False, monkeypatch).exit_code == 0
    for extra in ([], ["--input", x]):               # one --input, and two
        r = _invoke(["run", "--model", pkg, "--input", x, *extra], True, monkeypatch)
        assert r.exit_code == 0, r.output
        assert "step 9/9]" in r.stderr and re.search(r"/(40|80) \[", r.stderr), r.stderr


@pytest.mark.parametrize("budget", [None, 1 << 20], ids=["liveness", "memory-budget"])
def test_executor_on_step_counts_the_models_steps(budget):
    """``Executor.on_step`` is called once per model step, in order, with the model's step
    count (under a memory budget recomputes are not counted), and does not change the
    outputs (compared with the integer reference)."""
    from vtaforge.compiler.compile import compile_model
    from vtaforge.compiler.models import DIGITS_ONNX, load_digits_split
    from vtaforge.compiler.reference import run_quantized
    from vtaforge.runtime.executor import Executor
    from vtaforge.runtime.fsim import FsimDevice

    xtr, _, xte, _ = load_digits_split()
    cm = compile_model(str(DIGITS_ONNX), xtr[:64], preset("pynq"))
    ex = Executor(cm, FsimDevice(cm.config), memory_budget=budget)
    seen = []
    ex.on_step = lambda done, total: seen.append((done, total))
    out = ex.run(xte[:5])
    k = len(cm.steps)
    assert seen == [(i, k) for i in range(1, k + 1)]
    ref = run_quantized(cm.qgraph, {cm.inputs[0]: xte[:5]})
    assert np.array_equal(out[cm.outputs[0]], ref[cm.outputs[0]])


def test_run_batches_advances_the_bar_per_fixed_batch():
    from vtaforge.commands.run import _run_batches

    class Bar:
        n = 0

        def update(self, k):
            self.n += k
            seen.append(k)

    seen: list = []
    bar = Bar()
    out = _run_batches(lambda x: {"y": x * 2}, 2, np.arange(6.0).reshape(6, 1), bar)
    assert seen == [2, 2, 2] and out["y"].ravel().tolist() == [0, 2, 4, 6, 8, 10]
    seen.clear()
    _run_batches(lambda x: {"y": x}, None, np.zeros((5, 1)), bar)   # symbolic batch: one run
    assert seen == [5]


@pytest.mark.parametrize("tty,flag,shown", [(True, [], True), (True, ["--no-progress"], False),
                                            (False, [], False)])
def test_hw_resources_shows_elapsed_time(monkeypatch, tty, flag, shown):
    import vtaforge.hw.estimate as est

    def fake(cfg, part="xc7z020", **kw):
        return est.Resources(lut=100, ff=200, dsp=1, bram36=2.0, cells={})

    monkeypatch.setattr(est, "estimate_resources", fake)
    r = _invoke(["hw", "resources", "--config", "tiny", "--json", *flag], tty, monkeypatch)
    assert r.exit_code == 0, r.output
    assert '"lut": 100' in r.stdout
    assert bool(re.search(r"hw resources \S+: yosys synth_xilinx \(xc7z020\): "
                          r"\d\d:\d\d elapsed", r.stderr)) == shown, r.stderr


@pytest.mark.parametrize("tty,flag,shown", [(True, [], True), (True, ["--no-progress"], False),
                                            (False, [], False)])
def test_hw_timing_shows_elapsed_time(monkeypatch, tty, flag, shown):
    import vtaforge.hw.timing as tm

    def fake(cfg, **kw):
        raise tm.TimingError("fake nextpnr: no frequency")

    monkeypatch.setattr(tm, "estimate_fmax", fake)
    r = _invoke(["hw", "timing", "--config", "tiny", *flag], tty, monkeypatch)
    assert r.exit_code == 2
    assert "error: fake nextpnr: no frequency" in r.stderr
    assert bool(re.search(r"hw timing \S+: yosys synth_ecp5 \+ nextpnr-ecp5 \(85k\): "
                          r"\d\d:\d\d elapsed", r.stderr)) == shown, r.stderr


def test_progress_ticker_redraws_while_the_step_runs(monkeypatch, capsys):
    import time

    with _output.progress_ticker("step", True, interval=0.01):
        time.sleep(0.1)
    err = capsys.readouterr().err
    assert err.count("step: 00:00 elapsed") >= 3, err
    with _output.progress_ticker("step", False):
        pass
    assert capsys.readouterr().err == ""
