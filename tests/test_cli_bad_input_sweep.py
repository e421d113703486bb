"""The bad-input sweep (``tests/support/bad_inputs.py``): every case, on every command, is
one ``error:`` line with exit status 2 -- no traceback, no internal error (exit 3), no hang.
In process through click's CliRunner; the whole sweep takes a few seconds."""

from __future__ import annotations

import pytest
from bad_inputs import CASES, expand, make_files, run_case


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    return make_files(tmp_path_factory.mktemp("bad_inputs"))


def test_sweep_is_broad():
    commands = {cmd.split()[0] for _cid, cmd in CASES}
    assert len(CASES) >= 100
    assert {"config", "run", "compile", "profile", "exec", "disasm", "hw", "dse",
            "board"} <= commands


@pytest.mark.parametrize("cmd", [c for _i, c in CASES], ids=[i for i, _c in CASES])
def test_bad_input_is_one_error_line(files, cmd):
    verdict, code, err = run_case(expand(cmd, files))
    assert verdict == "ok", (verdict, code, err)
    assert "allow_pickle" not in err and "codec" not in err
