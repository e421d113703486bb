"""Code-size ratchet (issue 23): no product function over 120 lines except the ones listed
here, each at most as long as it is now, so the list can only shrink (split a function
and delete its line).  Counts are lines from ``def`` to the function's last line, nested
functions counted in their parent too."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("compiler", "runtime", "hw", "dse", "vtaforge")
LIMIT = 120

#: functions over the limit when the ratchet was set, and their length then
KNOWN: dict[str, int] = {}


def _long_functions() -> dict[str, int]:
    out = {}
    for pkg in PACKAGES:
        for f in sorted((ROOT / pkg).rglob("*.py")):
            tree = ast.parse(f.read_text(), str(f))

            def walk(node, prefix, f=f):
                for ch in ast.iter_child_nodes(node):
                    if isinstance(ch, (ast.FunctionDef, ast.AsyncFunctionDef)):
                        n = ch.end_lineno - ch.lineno + 1
                        if n > LIMIT:
                            out[f"{f.relative_to(ROOT).as_posix()}::{prefix}{ch.name}"] = n
                        walk(ch, prefix + ch.name + ".")
                    elif isinstance(ch, ast.ClassDef):
                        walk(ch, prefix + ch.name + ".")
            walk(tree, "")
    return out


def test_no_new_function_over_120_lines_and_none_grows():
    found = _long_functions()
    new = {k: v for k, v in found.items() if k not in KNOWN}
    grown = {k: (KNOWN[k], v) for k, v in found.items() if k in KNOWN and v > KNOWN[k]}
    assert not new, f"functions over {LIMIT} lines (split them): {new}"
    assert not grown, f"listed functions that grew (was, now): {grown}"


def test_the_list_names_only_functions_still_over_the_limit():
    found = _long_functions()
    stale = sorted(k for k in KNOWN if k not in found)
    assert not stale, f"no longer over {LIMIT} lines: delete from KNOWN: {stale}"
