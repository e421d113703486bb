"""Test-suite set-up: ``tests/support`` (test-only code such as the random-program
generator) is importable from every test."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent / "support"))
