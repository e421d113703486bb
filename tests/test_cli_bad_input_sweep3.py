"""The third bad-input sweep (``tests/support/bad_inputs_sweep3.py``, issue 22): its cases
reach every command and subcommand, the board runner (``python -m vtaforge.runtime.board
run|stats|verify``) and ``compile --explain`` included, and a sample of them -- one or
two per kind of bad input, each a bug this sweep found -- runs here.  The whole sweep
(about 480 cases) is ``python tests/support/bad_inputs_sweep3.py``."""

from __future__ import annotations

import click
import pytest
from bad_inputs_sweep3 import CASES, expand, make_files, run_case

from vtaforge.cli import main as cli_main

#: One case per bug the sweep found (and a few that guard the new paths); seconds in all.
SAMPLE = (
    "br-run-input-fifo_npy", "br-run-config-fifo_json", "br-run-model-fifo_vtapkg",
    "br-run-input-huge_npy", "br-run-output-proc", "br-run-output-under-file",
    "br-stats-end-inf", "br-stats-start-nan", "br-stats-config-fifo", "br-stats-log-sparse",
    "br-unknown-command", "br-verify-deep", "br-verify-fifo", "br-verify-missing",
    "cli-verify-pkg_no_config", "deploy-pkg-pkg_models_str", "deploy-out-under-file",
    "package-info-deep", "package-bit-trunc-info", "package-out-proc", "flag-11", "flag-4",
    "name-board-build-nl", "explain-model-no_inputs_onnx", "explain-out-proc",
    "explain-conv-tiny", "outdir-hw-verilog-proc", "out-exec-trace-proc",
    "dse-show-points_nondict", "dse-show-numbers_str", "run-layer-dw-tiny",
    "explain-layer-k7s2-pynq", "br-run-ok",
)


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    return make_files(tmp_path_factory.mktemp("sweep3"))


def _commands(group: click.Group, prefix: str = "") -> set[str]:
    out = set()
    for name, cmd in group.commands.items():
        out.add(f"{prefix}{name}")
        if isinstance(cmd, click.Group):
            out |= _commands(cmd, f"{prefix}{name} ")
    return out


def test_sweep3_is_broad():
    ids = [c[0] for c in CASES]
    assert len(ids) == len(set(ids)) and len(CASES) >= 300
    covered = set()
    for _cid, cmd, _e in CASES:
        words = [w for w in cmd.split() if not w.startswith(("-", "{", "'"))]
        if words[0] == "vtaforge":
            covered |= {" ".join(words[1:2]), " ".join(words[1:3])}
        else:
            covered.add("board-runner " + (words[1] if len(words) > 1 else ""))
    missing = _commands(cli_main) - covered
    assert not missing, missing
    assert {"board-runner run", "board-runner stats", "board-runner verify"} <= covered
    assert sum("--explain" in c[1] for c in CASES) >= 50
    assert set(SAMPLE) <= set(ids)


@pytest.mark.parametrize("cid", SAMPLE)
def test_sweep3_sample(files, cid):
    cmd, expect = next((c, e) for i, c, e in CASES if i == cid)
    rec = run_case(expand(cmd, files), expect, files)
    assert rec["verdict"] == "ok", rec
