"""The import rules between the product's packages, checked statically (issue 10, item 4).

- ``vtaforge.hw`` imports nothing of ``runtime``, ``compiler``, ``dse`` or the CLI
  (``vtaforge.cli``, ``vtaforge.commands``);
- ``vtaforge.runtime`` never imports ``compiler`` or ``dse`` (a board runs it: its board side,
  ``runtime.board``, included), and neither it nor ``hw`` imports click;
- ``vtaforge.compiler`` never imports ``dse``.

Every module's source is parsed with :mod:`ast` (nothing is imported or run): every
``import`` and ``from ... import`` anywhere in the file counts (inside functions, ``try``
blocks and ``if TYPE_CHECKING`` too), relative imports are resolved against the module's
package, and ``from P import name`` counts as importing both ``P`` and ``P.name``.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

#: source folder -> package name (pyproject's package-dir).
PACKAGES = {"hw": "vtaforge.hw", "runtime": "vtaforge.runtime",
            "compiler": "vtaforge.compiler", "dse": "vtaforge.dse"}

CLI = ("vtaforge.cli", "vtaforge.commands")

#: package -> the packages it must never import.
FORBIDDEN = {
    "vtaforge.hw": ("vtaforge.runtime", "vtaforge.compiler", "vtaforge.dse", *CLI, "click"),
    "vtaforge.runtime": ("vtaforge.compiler", "vtaforge.dse", *CLI, "click"),
    "vtaforge.compiler": ("vtaforge.dse", *CLI),
}


def modules(folder: str) -> list[tuple[str, Path, bool]]:
    """``(dotted name, path, is_package)`` of every ``.py`` file under ``folder``."""
    base = PACKAGES[folder]
    out = []
    for p in sorted((ROOT / folder).rglob("*.py")):
        rel = p.relative_to(ROOT / folder).with_suffix("").parts
        is_pkg = rel[-1] == "__init__"
        parts = rel[:-1] if is_pkg else rel
        out.append((".".join((base, *parts)), p, is_pkg))
    return out


def imported_names(name: str, path: Path, is_pkg: bool) -> list[tuple[int, str]]:
    """``(line, absolute module name)`` of every import in the file."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    package = name if is_pkg else name.rpartition(".")[0]
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [(node.lineno, a.name) for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                parts = package.split(".")
                if node.level - 1 > len(parts) - 1:
                    raise AssertionError(f"{path}:{node.lineno}: relative import beyond the "
                                         f"top-level package")
                anchor = ".".join(parts[:len(parts) - (node.level - 1)])
                mod = f"{anchor}.{node.module}" if node.module else anchor
            else:
                mod = node.module or ""
            found.append((node.lineno, mod))
            found += [(node.lineno, f"{mod}.{a.name}") for a in node.names if a.name != "*"]
    return found


def _under(mod: str, pkg: str) -> bool:
    return mod == pkg or mod.startswith(pkg + ".")


def violations(folder: str) -> list[str]:
    pkg = PACKAGES[folder]
    bad = []
    for name, path, is_pkg in modules(folder):
        for line, mod in imported_names(name, path, is_pkg):
            for f in FORBIDDEN[pkg]:
                if _under(mod, f):
                    bad.append(f"{path.relative_to(ROOT)}:{line}: {name} imports {mod} "
                               f"({pkg} must not import {f})")
    return bad


@pytest.mark.parametrize("folder", ["hw", "runtime", "compiler"])
def test_import_contract(folder):
    bad = violations(folder)
    assert not bad, "\n".join(bad)


def test_checker_sees_relative_and_lazy_imports(tmp_path):
    """The checker itself: a lazy relative import from a nested module is resolved."""
    src = tmp_path / "hw" / "core"
    src.mkdir(parents=True)
    (src / "__init__.py").write_text("from . import unit\n")
    (src / "unit.py").write_text("def f():\n    from ...runtime import fsim\n"
                                 "    from ..config import VTAConfig\n")
    old = globals()["ROOT"]
    globals()["ROOT"] = tmp_path
    try:
        bad = violations("hw")
    finally:
        globals()["ROOT"] = old
    assert len(bad) == 2, bad  # vtaforge.runtime and vtaforge.runtime.fsim, line 2
    assert all("unit.py:2: vtaforge.hw.core.unit imports vtaforge.runtime" in b for b in bad)


def test_checker_resolves_the_real_tree():
    """Sanity: the runtime's relative imports of hw resolve to vtaforge.hw modules."""
    seen = {mod for name, path, pkg in modules("runtime")
            for _, mod in imported_names(name, path, pkg)}
    assert "vtaforge.hw.config" in seen and "vtaforge.runtime.fsim" in seen
