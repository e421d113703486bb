"""Program identity (issue 23): the conv, dense and pooling lowerings emit exactly the
programs recorded in ``program_identity.json`` -- instruction streams, micro-op kernels,
packed constants and slot layouts, by SHA-256 (``tests/support/program_identity.py``).

This test recompiles the cheap cases (every config family the tests use: pynq, ALU_REQUANT,
REQ_ENGINE, tiny, batch2, 16-bit and 4-bit widths, token queue depths 1 and 2; the lowering
variants tests flip; per-channel requantize; row bands; pooling); ``bench/program_identity.py``
checks all of them, ResNet-18 and MobileNet-v1 layer tables and whole compiled models
included.  A lowering change that is meant to change programs re-records with
``python bench/program_identity.py --record``.
"""

from __future__ import annotations

import pytest

import program_identity as pi

RECORDED = pi.load()
CHEAP = [c for c in pi.cases() if c.cheap]


def test_enough_cheap_cases_are_pinned():
    assert len(CHEAP) >= 100
    assert all(c.name in RECORDED for c in CHEAP)


@pytest.mark.parametrize("case", CHEAP, ids=lambda c: c.name)
def test_program_identical_to_recorded(case):
    assert pi.hashes_of(case) == RECORDED[case.name]
