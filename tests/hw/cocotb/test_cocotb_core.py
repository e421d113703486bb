"""cocotb test benches of the generated VTA core under Verilator, as pytest tests.

Each test names one cocotb bench of ``benches.py`` on one preset, with or without random
AXI back-pressure.  The session builds each preset's core once (cached across sessions
outside the repository, see ``conftest.py``) and runs every selected bench of a
(preset, back-pressure) pair in one simulator process; each test then reports its own
bench's outcome, with the bench's failure message (first differing DRAM address, the AXI
rule broken, or the watchdog with each unit's state).

``tiny`` is the main preset (fast build); ``pynq`` runs the micro-op loads that need a
UOP buffer deeper than 1025 entries and a few benches at the default shape (``slow``).
"""

from __future__ import annotations

import pytest

pytestmark = [pytest.mark.cocotb, pytest.mark.rtl]

#: The benches, in run order (the register ping first: BR-25).
BENCHES = (
    "test_register_ping",
    "test_dispatch",
    "test_load_padding_inp",
    "test_load_padding_acc",
    "test_uop_loads",
    "test_gemm_accumulate",
    "test_alu_ops",
    "test_store",
    "test_handshake",
    "test_watchdog_on_deadlock",
)

#: pynq benches (slow: the pynq core takes minutes to verilate and compile).
PYNQ_BENCHES = ("test_register_ping", "test_uop_loads", "test_gemm_accumulate",
                "test_load_padding_inp")


def _check(run, cfg_name: str, bench: str, bp: bool) -> None:
    r = run(cfg_name, bp, bench)
    if r.status == "skip":
        pytest.skip(r.message)
    assert r.status == "pass", (f"{bench} on {cfg_name} (back-pressure {bp}): {r.status}\n"
                                f"{r.message}")


def _params(cfg_name: str, benches, marks=()):
    out = []
    for bp in (False, True):
        for b in benches:
            out.append(pytest.param(cfg_name, b, bp, id=f"{cfg_name}-{b[5:]}-{'bp' if bp else 'nobp'}",
                                    marks=[pytest.mark.bench(cfg_name, b, bp), *marks]))
    return out


@pytest.mark.parametrize("cfg_name,bench,bp", _params("tiny", BENCHES))
def test_tiny(cocotb_bench, cfg_name, bench, bp):
    _check(cocotb_bench, cfg_name, bench, bp)


@pytest.mark.parametrize("cfg_name,bench,bp",
                         _params("pynq", PYNQ_BENCHES, marks=(pytest.mark.slow,)))
def test_pynq(cocotb_bench, cfg_name, bench, bp):
    _check(cocotb_bench, cfg_name, bench, bp)
