"""The vtaforge wheel a board package carries: built from the source tree once per
content and cached (:func:`build_wheel`), or packed from an installed vtaforge
(:func:`installed_wheel`), and checked (:func:`check_wheel`)."""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import sys
import tempfile
import zipfile
from pathlib import Path

from ... import __version__
from ._common import DEFAULT_TIMEOUT_S, DeployError, _call

#: The source folders of the vtaforge distribution (pyproject's package-dir).
_SOURCE_DIRS = ("vtaforge", "hw", "runtime", "compiler", "dse")
_SOURCE_FILES = ("pyproject.toml", "README.md", "LICENSE", "LICENSE.txt")


def _vtaforge_dir() -> Path:
    """The folder of the ``vtaforge`` package this module belongs to (in a source tree the
    repository's ``vtaforge/``, installed ``site-packages/vtaforge``)."""
    return Path(sys.modules[__name__.split(".")[0]].__file__).resolve().parent


def source_tree() -> Path | None:
    """The source tree this vtaforge runs from (editable install or checkout), or None
    for an installed wheel."""
    root = _vtaforge_dir().parent
    pp = root / "pyproject.toml"
    try:
        if (root / "hw" / "config.py").is_file() and 'name = "vtaforge"' in pp.read_text():
            return root
    except OSError:
        pass
    return None


def _source_files(root: Path) -> list[Path]:
    out = [root / n for n in _SOURCE_FILES if (root / n).is_file()]
    for top in _SOURCE_DIRS:
        for p in sorted((root / top).rglob("*")):
            rel = p.relative_to(root)
            if (p.is_file() and "__pycache__" not in rel.parts and p.suffix not in (".pyc", ".pyo")
                    and not any(part.startswith(".") for part in rel.parts)):
                out.append(p)
    return out


def _cache_root() -> Path:
    base = os.environ.get("VTAFORGE_CACHE")
    return (Path(base) if base else Path.home() / ".cache" / "vtaforge") / "wheels"


def build_wheel(src: str | Path | None = None, *, cache_dir: str | Path | None = None,
                timeout_s: float = DEFAULT_TIMEOUT_S, python: str | None = None
                ) -> tuple[Path, bool]:
    """The vtaforge wheel of a source tree, built once per content and cached.

    ``python -m build --wheel`` (``pip wheel --no-deps`` when ``build`` is absent) runs on
    a copy of the tree, so the tree gets no build/ or egg-info; the wheel is cached in
    ``$VTAFORGE_CACHE/wheels/<sha256 of the sources>/`` (default ``~/.cache/vtaforge``).

    Without a source tree (``pip install .``, not editable) the wheel is packed from the
    installed package instead (:func:`installed_wheel`).

    Returns:
        ``(wheel path, True if it came from the cache)``.
    Raises:
        DeployError: neither ``build`` nor ``pip`` installed, the build failing or timing
            out; an installed vtaforge without its ``.dist-info``.
    """
    root = Path(src) if src is not None else source_tree()
    if root is None:
        return installed_wheel(cache_dir=cache_dir)
    files = _source_files(root)
    h = hashlib.sha256()
    for p in files:
        h.update(str(p.relative_to(root)).encode() + b"\0" + p.read_bytes() + b"\0")
    cache = (Path(cache_dir) if cache_dir is not None else _cache_root()) / h.hexdigest()[:20]
    hits = sorted(cache.glob("vtaforge-*.whl")) if cache.is_dir() else []
    if hits:
        return hits[0], True
    with tempfile.TemporaryDirectory(prefix="vtaforge-wheel-") as tmp:
        work = Path(tmp) / "src"
        for p in files:
            dst = work / p.relative_to(root)
            dst.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(p, dst)
        py = python or sys.executable
        dist = str(Path(tmp) / "dist")
        # PyPA's build when it is installed; pip (always in a venv) otherwise: both run
        # the same isolated setuptools build backend from pyproject.toml
        for tool, cmd in (("python -m build --wheel",
                           [py, "-m", "build", "--wheel", "--outdir", dist, str(work)]),
                          ("pip wheel", [py, "-m", "pip", "wheel", "--no-deps", "-q",
                                         "--wheel-dir", dist, str(work)])):
            p = _call(cmd, timeout_s=timeout_s, what="build the vtaforge wheel", check=False)
            text = (p.stdout + "\n" + p.stderr)
            if p.returncode != 0 and re.search(r"No module named '?(build|pip)\b", text):
                continue  # that tool is not installed: try the next
            break
        else:
            raise DeployError("building the wheel needs the build or pip package in "
                              f"{py}, or pass an existing wheel with --wheel")
        if p.returncode != 0:
            lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
            errs = [ln for ln in lines if "error" in ln.lower()]
            raise DeployError(f"{tool} failed (exit {p.returncode}): "
                              f"{(errs or lines or ['no output'])[-1]}; or pass --wheel")
        built = sorted((Path(tmp) / "dist").glob("vtaforge-*.whl"))
        if not built:
            raise DeployError(f"{tool} wrote no vtaforge-*.whl")
        cache.mkdir(parents=True, exist_ok=True)
        dst = cache / built[0].name
        part = cache / f".{built[0].name}.tmp"
        shutil.copyfile(built[0], part)
        os.replace(part, dst)
    return dst, False


def installed_wheel(*, cache_dir: str | Path | None = None) -> tuple[Path, bool]:
    """A pure-Python wheel of the installed vtaforge (the ``vtaforge`` folder this module
    runs from, with every subpackage and data file, and its ``.dist-info`` metadata and
    entry points), for a ``pip install .`` without the source tree: vtaforge is pure
    Python, so the installed files are the wheel's contents.  Cached by content like
    :func:`build_wheel`.

    Returns:
        ``(wheel path, True if it came from the cache)``.
    Raises:
        DeployError: the installed package has no ``vtaforge-VERSION.dist-info`` beside it
            (the message gives the ``pip wheel`` command to build one instead).
    """
    import base64

    pkg = _vtaforge_dir()
    dist = pkg.parent / f"vtaforge-{__version__}.dist-info"
    how = ("build the wheel from the vtaforge source folder SRC (the one with pyproject.toml): "
           "python -m pip wheel --no-deps --wheel-dir wheels SRC, then pass --wheel "
           f"wheels/vtaforge-{__version__}-py3-none-any.whl")
    if not (dist / "METADATA").is_file():
        raise DeployError(f"no source tree and no {dist.name}/METADATA beside the installed "
                          f"{pkg}: {how}")
    files = sorted(p for p in pkg.rglob("*") if p.is_file() and "__pycache__" not in
                   p.relative_to(pkg).parts and p.suffix not in (".pyc", ".pyo"))
    meta = {n: (dist / n).read_bytes() for n in ("METADATA", "entry_points.txt",
                                                  "top_level.txt") if (dist / n).is_file()}
    h = hashlib.sha256()
    for p in files:
        h.update(p.relative_to(pkg).as_posix().encode() + b"\0" + p.read_bytes() + b"\0")
    for n, b in sorted(meta.items()):
        h.update(n.encode() + b"\0" + b + b"\0")
    cache = ((Path(cache_dir) if cache_dir is not None else _cache_root())
             / ("installed-" + h.hexdigest()[:20]))
    name = f"vtaforge-{__version__}-py3-none-any.whl"
    if (cache / name).is_file():
        return cache / name, True
    di = f"vtaforge-{__version__}.dist-info"
    meta["WHEEL"] = (b"Wheel-Version: 1.0\nGenerator: vtaforge.runtime.board (installed files)\n"
                     b"Root-Is-Purelib: true\nTag: py3-none-any\n")
    record = []
    cache.mkdir(parents=True, exist_ok=True)
    part = cache / f".{name}.tmp"
    with zipfile.ZipFile(part, "w", zipfile.ZIP_DEFLATED) as z:
        def put(arc: str, data: bytes) -> None:
            z.writestr(arc, data)
            digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=")
            record.append(f"{arc},sha256={digest.decode()},{len(data)}")

        for p in files:
            put("vtaforge/" + p.relative_to(pkg).as_posix(), p.read_bytes())
        for n, b in meta.items():
            put(f"{di}/{n}", b)
        record.append(f"{di}/RECORD,,")
        z.writestr(f"{di}/RECORD", "\n".join(record) + "\n")
    os.replace(part, cache / name)
    return cache / name, False


def check_wheel(path: str | Path) -> str:
    """Check that ``path`` is a vtaforge wheel; return its version.

    Raises:
        DeployError: missing, not named ``vtaforge-VERSION-...whl``, not a zip, or without
            ``vtaforge-*.dist-info/METADATA``.
    """
    p = Path(path)
    m = re.fullmatch(r"vtaforge-([^-]+)-.+\.whl", p.name)
    if not p.is_file():
        raise DeployError(f"--wheel {str(p)!r} does not exist")
    if not m:
        raise DeployError(f"--wheel {str(p)!r} is not a vtaforge wheel (expected a file "
                          f"named vtaforge-VERSION-py3-none-any.whl)")
    try:
        with zipfile.ZipFile(p) as z:
            names = z.namelist()
    except (OSError, zipfile.BadZipFile):
        raise DeployError(f"--wheel {str(p)!r} is not a wheel (not a zip archive)") from None
    if not any(re.fullmatch(r"vtaforge-[^/]+\.dist-info/METADATA", n) for n in names):
        raise DeployError(f"--wheel {str(p)!r} has no vtaforge-*.dist-info/METADATA")
    return m.group(1)
