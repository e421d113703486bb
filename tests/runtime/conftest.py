"""Fixtures for the runtime tests; program-building helpers live in ``progtools``."""

from __future__ import annotations

import pytest

from progtools import *  # noqa: F401,F403  (re-exported for older imports)
from vtaforge.hw.config import preset


@pytest.fixture(params=["tiny", "pynq", "batch2"])
def cfg(request):
    return preset(request.param)

