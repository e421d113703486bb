"""Packaging: every Python package directory is installed, and the bundled model ships."""

from __future__ import annotations

import fnmatch
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
TOP = ("hw", "runtime", "compiler", "dse", "vtaforge")


@pytest.fixture(scope="module")
def setuptools_cfg() -> dict:
    with open(ROOT / "pyproject.toml", "rb") as f:
        return tomllib.load(f)["tool"]["setuptools"]


def _dir_of(pkg: str, package_dir: dict[str, str]) -> Path:
    """Directory of dotted package ``pkg`` under setuptools' ``package-dir`` mapping."""
    parts = pkg.split(".")
    for i in range(len(parts), 0, -1):
        prefix = ".".join(parts[:i])
        if prefix in package_dir:
            return ROOT / package_dir[prefix] / Path(*parts[i:])
    return ROOT / Path(*parts)


def _pkg_of(d: Path, package_dir: dict[str, str]) -> str:
    rel = d.relative_to(ROOT)
    by_dir = {v: k for k, v in package_dir.items()}
    top = rel.parts[0]
    assert top in by_dir, f"{top}/ has no package-dir entry"
    return ".".join([by_dir[top], *rel.parts[1:]])


def _package_dirs() -> list[Path]:
    out = []
    for top in TOP:
        for init in (ROOT / top).rglob("__init__.py"):
            if "__pycache__" in init.parts:
                continue
            out.append(init.parent)
    return sorted(out)


def test_top_level_mapping(setuptools_cfg):
    pd = setuptools_cfg["package-dir"]
    assert pd["vtaforge"] == "vtaforge"
    for top in ("hw", "runtime", "compiler", "dse"):
        assert pd[f"vtaforge.{top}"] == top


def test_every_package_dir_is_listed(setuptools_cfg):
    pd = setuptools_cfg["package-dir"]
    listed = set(setuptools_cfg["packages"])
    missing = [f"{d.relative_to(ROOT)} -> {_pkg_of(d, pd)}" for d in _package_dirs()
               if _pkg_of(d, pd) not in listed]
    assert not missing, f"add to [tool.setuptools] packages: {missing}"


def test_every_listed_package_exists(setuptools_cfg):
    pd = setuptools_cfg["package-dir"]
    for pkg in setuptools_cfg["packages"]:
        d = _dir_of(pkg, pd)
        assert (d / "__init__.py").is_file(), f"{pkg} maps to {d}, which has no __init__.py"


def test_digits_model_is_package_data(setuptools_cfg):
    onnx = ROOT / "compiler" / "models" / "digits.onnx"
    assert onnx.is_file()
    pd = setuptools_cfg["package-dir"]
    pkg = _pkg_of(onnx.parent, pd)
    assert pkg == "vtaforge.compiler.models"
    assert pkg in setuptools_cfg["packages"]
    data = setuptools_cfg.get("package-data", {})
    patterns = list(data.get("*", [])) + list(data.get(pkg, []))
    assert any(fnmatch.fnmatch(onnx.name, p) for p in patterns), patterns


def test_every_data_file_is_package_data(setuptools_cfg):
    """Every non-Python file in a package folder (the bundled model, the RTL harness) matches
    a package-data pattern, so the wheel carries it."""
    pd = setuptools_cfg["package-dir"]
    data = setuptools_cfg.get("package-data", {})
    missing = []
    for d in _package_dirs():
        pkg = _pkg_of(d, pd)
        patterns = list(data.get("*", [])) + list(data.get(pkg, []))
        for f in d.iterdir():
            if f.is_file() and f.suffix not in (".py", ".pyc") and not f.name.startswith("."):
                if not any(fnmatch.fnmatch(f.name, p) for p in patterns):
                    missing.append(str(f.relative_to(ROOT)))
    assert not missing, f"add to [tool.setuptools.package-data]: {missing}"
