"""The extra bad-input sweep (``tests/support/bad_inputs_extra.py``): every case on every
command and subcommand either fails as bad input (exit status 2, one ``error:`` line, no
traceback, no internal error, no hang) or is valid (exit 0, its output checked against
onnxruntime or its expected shape).  In process through click's CliRunner, under an
address-space limit so that a reader that never stops fails instead of taking the memory.
Known failures are ``xfail(strict=True)`` with the reason (``XFAIL``)."""

from __future__ import annotations

import click
import pytest
from bad_inputs_extra import CASES, XFAIL, expand, make_files, memory_limit, run_case

from vtaforge.cli import main as cli_main


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    return make_files(tmp_path_factory.mktemp("bad_inputs_extra"))


@pytest.fixture(scope="module")
def limited():
    with memory_limit():
        yield


def _commands(group: click.Group, prefix: str = "") -> set[str]:
    out = set()
    for name, cmd in group.commands.items():
        path = f"{prefix}{name}"
        out.add(path)
        if isinstance(cmd, click.Group):
            out |= _commands(cmd, path + " ")
    return out


def test_extra_sweep_covers_every_command():
    from bad_inputs import CASES as BASE

    ids = [c[0] for c in CASES]
    assert len(ids) == len(set(ids))
    assert len(CASES) + len(BASE) >= 300
    covered = set()
    for _cid, cmd, _e in CASES:
        words = [w for w in cmd.split() if not w.startswith("-")]
        for n in (1, 2):
            covered.add(" ".join(words[:n]))
    missing = _commands(cli_main) - covered
    assert not missing, missing


@pytest.mark.parametrize(
    "cmd,expect",
    [pytest.param(c, e, marks=pytest.mark.xfail(strict=True, reason=XFAIL[i]))
     if i in XFAIL else (c, e) for i, c, e in CASES],
    ids=[i for i, _c, _e in CASES])
def test_extra_bad_input(files, limited, cmd, expect):
    verdict, code, detail = run_case(expand(cmd, files), expect, files)
    assert verdict == "ok", (verdict, code, detail)
