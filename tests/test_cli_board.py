"""``vtaforge board``'s command line: the group's help names what the group does (projects
and builds, packages, deploy), ``--board`` takes and lists the hw/parts.py aliases, and the
command modules import each module once per scope (a second ``from M import ...`` of the
same module in one function is a merge left over)."""

from __future__ import annotations

import ast
import json
from pathlib import Path

from click.testing import CliRunner

from vtaforge.cli import main
from vtaforge.hw import parts

ROOT = Path(__file__).resolve().parents[1]


def test_board_group_help_names_every_subcommand():
    r = CliRunner().invoke(main, ["board", "--help"])
    assert r.exit_code == 0, r.output
    head = r.output.split("Commands:")[0]
    for sub in ("project", "build", "timing", "package", "verify", "deploy"):
        assert f"({sub}" in head or f" {sub}," in head or f"{sub})" in head, (sub, head)
    top = CliRunner().invoke(main, ["--help"]).output
    line = next(ln for ln in top.splitlines() if ln.strip().startswith("board "))
    assert "packages" in line and "..." not in line, line


def test_board_option_takes_and_lists_the_aliases(tmp_path):
    r = CliRunner().invoke(main, ["board", "project", "--help"])
    for name in parts.board_names(aliases=True):
        assert name in r.output, name
    alias, key = next(iter(parts.BOARD_ALIASES.items()))
    r = CliRunner().invoke(main, ["board", "project", "--config", parts.BOARDS[key].preset,
                                  "-o", str(tmp_path / "p"), "--board", alias])
    assert r.exit_code == 0, r.output
    assert json.loads((tmp_path / "p" / "board.json").read_text())["board"] == key


def _duplicate_imports(path: Path) -> list[str]:
    """``from M import a`` twice for the same M in one scope (aliased imports aside)."""
    tree = ast.parse(path.read_text())
    out = []
    scopes = [tree, *(n for n in ast.walk(tree)
                      if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)))]
    for scope in scopes:
        seen: dict[tuple, int] = {}
        for st in scope.body:
            if isinstance(st, ast.ImportFrom) and not any(a.asname for a in st.names):
                key = (st.level, st.module)
                if key in seen:
                    out.append(f"{path.relative_to(ROOT)}:{st.lineno}: {'.' * st.level}"
                               f"{st.module or ''} again (line {seen[key]})")
                seen.setdefault(key, st.lineno)
    return out


def test_command_modules_import_each_module_once_per_scope():
    found = [d for p in sorted((ROOT / "vtaforge").rglob("*.py")) for d in _duplicate_imports(p)]
    assert not found, found
