"""A board package written (:func:`make_package`) and checked against its manifest
(:func:`verify_package`); the layout is in :mod:`vtaforge.runtime.board`."""

from __future__ import annotations

import json
import os
import shutil
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Sequence

from ... import __version__
from ...hw.config import load_config
from ..artifact import ArtifactError, load_artifact
from ._common import (_NAME, DEFAULT_TIMEOUT_S, OVERLAY_STEM, PACKAGE_FORMAT, SIDECAR_FORMAT,
                      USER_FILES, DeployError, _first_line, _load_json, _sha256, _write_json)
from .bitstream import check_bitstream
from .texts import VERIFY_PY, notebook, readme, run_sh
from .wheel import build_wheel, check_wheel, source_tree

@dataclass
class PackageResult:
    """What :func:`make_package` wrote: ``out`` (the folder), ``manifest`` (its dict),
    ``wheel_cached`` (the wheel came from the cache; None when passed with ``--wheel``),
    ``notes`` (lines worth printing: onnxruntime needs, a timing override)."""

    out: Path
    manifest: dict
    wheel_cached: bool | None
    notes: list[str] = field(default_factory=list)


def _is_package(d: Path) -> bool:
    m = _load_json(d / "manifest.json")
    return m is not None and m.get("format") == PACKAGE_FORMAT


def _check_models(models: Sequence[str | Path], cfg) -> tuple[list[dict], list[str]]:
    """The manifest entries of the ``.vtapkg`` files (each loaded for ``cfg``; ``src``: its
    path) and the notes they raise (onnxruntime needed on the board).

    Raises:
        DeployError: not a ``.vtapkg``, a name that is no shell word, two models of one
            name, a model compiled for another config or unreadable.
    """
    notes: list[str] = []
    entries = []
    names: dict[str, str] = {}
    for m in models:
        mp = Path(m)
        name = mp.stem
        if mp.suffix != ".vtapkg":
            raise DeployError(f"--model {str(mp)!r} is not a .vtapkg (compile it first: "
                              f"vtaforge compile MODEL.onnx -o MODEL.vtapkg --config ...)")
        if not _NAME.fullmatch(name):
            raise DeployError(f"--model {str(mp)!r}: rename it; a model name may hold only "
                              f"letters, digits and _ . - (it is a shell word on the board)")
        if name in names:
            raise DeployError(f"two models named {name!r} ({names[name]} and {mp}); rename one")
        names[name] = str(mp)
        try:
            cm = load_artifact(mp, cfg)
        except ArtifactError as e:
            raise DeployError(_first_line(str(e))) from None
        vta = [s.name for s in cm.steps if s.target == "vta"]
        req = cm.requires()
        if req:
            notes.append(f"model {name} needs onnxruntime on the board for "
                         f"{', '.join(req.get('onnxruntime', []))} (no 32-bit ARM wheel: "
                         f"PYNQ-Z1/Z2 images cannot run it)")
        entries.append({"name": name, "file": f"models/{name}.vtapkg", "model": cm.name,
                        "inputs": list(cm.inputs), "outputs": list(cm.outputs),
                        "input_shapes": {k: list(cm.types[k][1]) for k in cm.inputs
                                         if k in cm.types},
                        "steps": len(cm.steps), "steps_on_vta": len(vta), "requires": req,
                        "src": mp})
    return entries, notes


def _check_overlay_files(bitstream: str | Path, hwh: str | Path | None) -> tuple[Path, Path]:
    """The ``.bit`` and ``.hwh`` to package (``hwh`` None: the ``.bit``'s name with ``.hwh``).

    Raises:
        DeployError: a missing, irregular or empty ``.bit``; a missing ``.hwh``.
    """
    bit = Path(bitstream)
    if not bit.exists():        # before the .hwh, whose default name is the .bit's
        raise DeployError(f"--bitstream {str(bit)!r} does not exist (the .bit of a board "
                          f"project: out/vta.bit)")
    if not bit.is_file():
        raise DeployError(f"--bitstream {str(bit)!r} is not a regular file (a Vivado .bit)")
    if bit.stat().st_size == 0:
        raise DeployError(f"--bitstream {str(bit)!r} is an empty file, not a Vivado .bit")
    hwh_p = Path(hwh) if hwh is not None else bit.with_suffix(".hwh")
    if not hwh_p.is_file():
        raise DeployError(f".hwh {str(hwh_p)!r} does not exist (PYNQ needs the .hwh of the "
                          f"bitstream; pass --hwh)")
    return bit, hwh_p


def _sidecar(cfg, bit: Path, hwh_p: Path, bcheck: dict) -> dict:
    """The package's ``overlay/vta.json``: what :func:`check_bitstream` found, with the
    sha256 of the ``.bit`` and ``.hwh``."""
    h, board = bcheck["hwh"], bcheck["board"]
    return {
        "format": SIDECAR_FORMAT, "version": 1, "written_by": "vtaforge board package",
        "fingerprint": cfg.fingerprint, "fingerprint_hex": f"0x{cfg.fingerprint:08x}",
        "bitstream_name": cfg.bitstream_name, "part": board["part"],
        "clock_mhz": float(cfg.CLOCK_MHZ), "config": cfg.to_dict(),
        "bitstream": f"{OVERLAY_STEM}.bit", "bitstream_sha256": _sha256(bit),
        "hwh": f"{OVERLAY_STEM}.hwh", "hwh_sha256": _sha256(hwh_p),
        "timing": bcheck["timing"], "fingerprint_from": bcheck["source"],
        "bit_header": bcheck["header"], "reg_base": h["reg_base"]}


def make_package(config: str, bitstream: str | Path, hwh: str | Path | None,
                 models: Sequence[str | Path], out_dir: str | Path, *,
                 wheel: str | Path | None = None, bitstream_info: str | Path | None = None,
                 allow_unmet_timing: bool = False,
                 wheel_timeout_s: float = DEFAULT_TIMEOUT_S) -> PackageResult:
    """Write a board package (layout in the module docstring) into ``out_dir``.

    Everything is checked before anything is written; the folder is assembled beside
    ``out_dir`` and renamed into place, replacing a previous package there.

    Args:
        config: preset name or config JSON file.
        bitstream, hwh: the ``.bit`` and its ``.hwh`` (None: ``bitstream`` with ``.hwh``).
        models: ``.vtapkg`` files (at least one; distinct file stems).
        wheel: an existing vtaforge wheel; None builds one (:func:`build_wheel`).
        bitstream_info: the sidecar or board.json to take the fingerprint from.
    Raises:
        DeployError: no model, a model or bitstream for another config, an unusable file,
            ``out_dir`` exists and is neither empty nor a package.
        ConfigError: an invalid config; ArtifactError: an unreadable ``.vtapkg``.
    """
    cfg = load_config(config)
    out = Path(out_dir)
    if out.exists() and (not out.is_dir() or (any(out.iterdir()) and not _is_package(out))):
        raise DeployError(f"-o {str(out)!r} exists and is not an earlier package (nor an "
                          f"empty folder); choose another folder")
    if not models:
        raise DeployError("a package needs at least one --model MODEL.vtapkg")
    bit, hwh_p = _check_overlay_files(bitstream, hwh)
    entries, notes = _check_models(models, cfg)
    bcheck = check_bitstream(cfg, bit, hwh_p, info=bitstream_info,
                             allow_unmet_timing=allow_unmet_timing)
    if bcheck["timing"] and bcheck["timing"].get("met") is False:
        notes.append(f"packaged although timing was not met ({bcheck['timing'].get('reason')})")
    cached: bool | None = None
    if wheel is None:
        if source_tree() is None:
            notes.append("no source tree (vtaforge installed with pip install .): the wheel "
                         "holds the installed vtaforge files")
        wheel_p, cached = build_wheel(timeout_s=wheel_timeout_s)
    else:
        wheel_p = Path(wheel)
    wheel_ver = check_wheel(wheel_p)

    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{out.name}.", dir=str(out.parent)))
    try:
        for sub in ("overlay", "models", "wheel"):
            (tmp / sub).mkdir()
        shutil.copyfile(bit, tmp / "overlay" / f"{OVERLAY_STEM}.bit")
        shutil.copyfile(hwh_p, tmp / "overlay" / f"{OVERLAY_STEM}.hwh")
        for e in entries:
            shutil.copyfile(e.pop("src"), tmp / e["file"])
        shutil.copyfile(wheel_p, tmp / "wheel" / wheel_p.name)
        (tmp / "config.json").write_text(cfg.to_json())
        h = bcheck["hwh"]
        board = bcheck["board"]
        _write_json(tmp / "overlay" / f"{OVERLAY_STEM}.json", _sidecar(cfg, bit, hwh_p, bcheck))
        wheel_rel = f"wheel/{wheel_p.name}"
        wheel_sha = _sha256(tmp / wheel_rel)
        model_names = [e["name"] for e in entries]
        (tmp / "verify.py").write_text(VERIFY_PY)
        (tmp / "run.sh").write_text(run_sh(cfg, wheel_rel, wheel_sha, model_names, __version__))
        (tmp / "vtaforge.ipynb").write_text(
            json.dumps(notebook(cfg, wheel_rel, model_names, out.name), indent=1) + "\n")
        (tmp / "README.md").write_text(readme(cfg, model_names, out.name,
                                               bcheck["board"]))
        files, user_files = {}, {}
        for p in sorted(tmp.rglob("*")):
            if p.is_file():
                p.chmod(0o755 if p.name == "run.sh" else 0o644)
                rel = p.relative_to(tmp).as_posix()
                (user_files if rel in USER_FILES else files)[rel] = {
                    "sha256": _sha256(p), "size": p.stat().st_size}
        manifest = {
            "format": PACKAGE_FORMAT, "version": 1, "created_by": f"vtaforge {__version__}",
            "created_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "config": {"file": "config.json", "fingerprint": f"0x{cfg.fingerprint:08x}",
                       "bitstream_name": cfg.bitstream_name, "part": board["part"],
                       "config_part": cfg.PART, "clock_mhz": float(cfg.CLOCK_MHZ)},
            "board": board,
            "overlay": {"bitstream": f"overlay/{OVERLAY_STEM}.bit",
                        "hwh": f"overlay/{OVERLAY_STEM}.hwh",
                        "info": f"overlay/{OVERLAY_STEM}.json",
                        "fingerprint": f"0x{cfg.fingerprint:08x}",
                        "fingerprint_from": bcheck["source"], "part": bcheck["header"]["part"],
                        "reg_base": h["reg_base"], "timing": bcheck["timing"]},
            "models": entries,
            "wheel": {"file": wheel_rel, "version": wheel_ver, "sha256": wheel_sha},
            "files": files,
            "user_files": user_files,
        }
        _write_json(tmp / "manifest.json", manifest)
        (tmp / "manifest.json").chmod(0o644)
        tmp.chmod(0o755)
        if out.exists():
            shutil.rmtree(out)
        os.replace(tmp, out)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return PackageResult(out, manifest, cached, notes)


def _load_verifier() -> dict:
    ns: dict = {"__name__": "vtaforge_package_verify"}
    exec(compile(VERIFY_PY, "verify.py", "exec"), ns)  # noqa: S102 - our own constant
    return ns


def verify_package(package_dir: str | Path, notes: list[str] | None = None) -> dict:
    """Check every file of a package against its manifest.json (the code of the package's
    own ``verify.py``).  User files (:data:`USER_FILES`: the notebook, the README) are not
    checked; a changed or missing one is appended to ``notes``.

    Returns:
        the manifest.
    Raises:
        DeployError: ``package_dir`` missing or not a directory, no manifest, or files
            missing or differing (one line naming them).
    """
    root = Path(package_dir)
    if not root.is_dir():
        raise DeployError(f"package directory {str(package_dir)!r} does not exist"
                          if not root.exists() else
                          f"{str(package_dir)!r} is not a directory (a package is a folder)")
    try:
        man, found = _load_verifier()["check"](str(package_dir))
        if notes is not None:
            notes.extend(found)
        return man
    except ValueError as e:
        raise DeployError(f"verify {str(package_dir)!r}: {e}") from None
