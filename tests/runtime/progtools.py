"""Moved: the program and image helpers live in ``tests/support/programs.py`` (one module
for every test); this name stays for imports written before the move."""

from programs import *  # noqa: F401,F403
