"""Exec bundles (raw DRAM image + program location) and the target registry.

Bundle format (``.npz``, read with ``allow_pickle=False``):

- ``dram``: ``uint8`` 1-D array, the initial DRAM image (byte address = index);
- ``insn_addr``: integer scalar, byte address of the first instruction;
- ``insn_count``: integer scalar, number of 16-byte instructions;
- ``config_fingerprint`` (optional; written by :func:`save_bundle` when given the config):
  integer scalar, ``VTAConfig.fingerprint`` of the config the program was built for.  A
  bundle with one runs only under that config (:func:`load_bundle` with ``config``
  refuses another); a bundle without one runs under any.

Result format (``.npz``): ``dram`` (``uint8`` 1-D, final image, same length), ``cycles``
(``int64`` scalar; 0 for fsim) and ``stats`` (a JSON string of the statistics dict).

Targets: ``fsim`` (:func:`.fsim.simulate`), ``rtl`` (``vtaforge.runtime.rtl.run_raw``,
imported lazily so that fsim users need no Verilator) and ``pynq``
(``vtaforge.runtime.pynq.run_raw``: a board with the ``pynq`` package, the image relocated
into a contiguous buffer).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np

from ..hw.config import VTAConfig
from .device import Device, DeviceError, RunResult
from .npz import atomic_open, open_npz

__all__ = ["BundleError", "TARGETS", "FINGERPRINT_KEY", "load_bundle", "save_bundle", "save_result",
           "load_result", "make_device", "run_raw"]

#: The bundle key holding the fingerprint of the config a program was built for.
FINGERPRINT_KEY = "config_fingerprint"

#: Targets known to :func:`make_device` and :func:`run_raw`.
TARGETS = ("fsim", "rtl", "pynq")


class BundleError(DeviceError):
    """A bundle file that cannot be used (missing, not an npz, missing keys, wrong dtypes)."""


def _scalar(z, key: str, path: str) -> int:
    v = z[key]
    if v.ndim != 0 and v.shape != (1,):
        raise BundleError(f"bundle {path!r}: {key!r} must be an integer scalar, got shape "
                          f"{v.shape}")
    if v.dtype.kind not in "iu":
        raise BundleError(f"bundle {path!r}: {key!r} must be an integer scalar, got dtype "
                          f"{v.dtype}")
    return int(v.reshape(()))


def load_bundle(path: str | Path, *, config: VTAConfig | None = None
                ) -> tuple[np.ndarray, int, int]:
    """Read an exec bundle.

    Args:
        config: the config the bundle is to run under; a bundle that records another
            config's fingerprint is refused (``None``: not checked).

    Returns:
        ``(dram, insn_addr, insn_count)``: a writeable ``uint8`` 1-D copy of the image and
        two ints.

    Raises:
        BundleError: unreadable file, not an npz archive, a missing key, or a wrong dtype or
            shape (the message names the file and the key); its ``config_fingerprint``
            differs from ``config.fingerprint`` (both named).
    """
    p = str(path)
    z = open_npz(p, "bundle", BundleError)
    with z:
        missing = [k for k in ("dram", "insn_addr", "insn_count") if k not in z.files]
        if missing:
            raise BundleError(f"bundle {p!r} lacks key {missing[0]!r} (needs dram, insn_addr, "
                              f"insn_count; has {', '.join(z.files) or 'none'})")
        try:
            dram = z["dram"]
        except ValueError as e:
            raise BundleError(f"bundle {p!r}: 'dram' cannot be read ({e})") from None
        if dram.dtype != np.uint8 or dram.ndim != 1:
            raise BundleError(f"bundle {p!r}: 'dram' must be a 1-D uint8 array, got "
                              f"{dram.dtype} with shape {dram.shape}")
        try:
            insn_addr = _scalar(z, "insn_addr", p)
            insn_count = _scalar(z, "insn_count", p)
            fp = _scalar(z, FINGERPRINT_KEY, p) if FINGERPRINT_KEY in z.files else None
        except ValueError as e:
            raise BundleError(f"bundle {p!r}: cannot read a scalar ({e})") from None
    if fp is not None and not 0 <= fp < 1 << 32:
        raise BundleError(f"bundle {p!r}: {FINGERPRINT_KEY!r} = {fp} is not a 32-bit "
                          f"fingerprint")
    if fp is not None and config is not None and fp != config.fingerprint:
        raise BundleError(f"bundle {p!r} was built for the config with fingerprint "
                          f"0x{fp:08x}, not this config (0x{config.fingerprint:08x}); run it "
                          f"with the config it was built for")
    return np.array(dram, dtype=np.uint8, copy=True), insn_addr, insn_count


def save_bundle(path: str | Path, dram: np.ndarray, insn_addr: int, insn_count: int, *,
                config: VTAConfig | None = None) -> None:
    """Write an exec bundle (see the module docstring) to exactly ``path`` (no ``.npz``
    is appended); with ``config``, its fingerprint too (the bundle then runs only under
    that config)."""
    extra = {} if config is None else {FINGERPRINT_KEY: np.int64(config.fingerprint)}
    with atomic_open(path) as f:
        np.savez(f, dram=np.ascontiguousarray(dram, dtype=np.uint8).reshape(-1),
                 insn_addr=np.int64(insn_addr), insn_count=np.int64(insn_count), **extra)


def save_result(path: str | Path, dram: np.ndarray, result: RunResult) -> None:
    """Write a result file to exactly ``path`` (no ``.npz`` is appended): final ``dram``,
    ``cycles`` (int64) and ``stats`` (JSON string)."""
    with atomic_open(path) as f:
        np.savez(f, dram=np.ascontiguousarray(dram, dtype=np.uint8).reshape(-1),
                 cycles=np.int64(result.cycles),
                 stats=np.array(json.dumps(result.stats, sort_keys=True)))


def load_result(path: str | Path) -> tuple[np.ndarray, int, dict[str, Any]]:
    """Read a result file written by :func:`save_result`.

    Returns:
        ``(dram, cycles, stats)``: the final image (``uint8`` 1-D copy), the cycle count
        (int; 0 for fsim) and the statistics dict.

    Raises:
        BundleError: missing or unreadable file, not an ``.npz`` archive, a missing key
            (``dram``, ``cycles``, ``stats``) or a ``stats`` entry that is not JSON (the
            message names the file).
    """
    p = str(path)
    with open_npz(p, "result file", BundleError) as z:
        missing = [k for k in ("dram", "cycles", "stats") if k not in z.files]
        if missing:
            raise BundleError(f"result file {p!r} lacks key {missing[0]!r} (needs dram, "
                              f"cycles, stats)")
        try:
            return (np.array(z["dram"], dtype=np.uint8), int(z["cycles"]),
                    json.loads(str(z["stats"])))
        except (ValueError, TypeError) as e:
            raise BundleError(f"result file {p!r} is malformed ({e})") from None


def _unknown(target: str) -> DeviceError:
    return DeviceError(f"unknown target {target!r}; allowed: {', '.join(TARGETS)}")


def make_device(target: str, cfg: VTAConfig, **kw: Any) -> Device:
    """A :class:`Device` for ``target`` ("fsim" → :class:`.fsim.FsimDevice`, "rtl" →
    ``vtaforge.runtime.rtl.RtlDevice``, "pynq" → ``vtaforge.runtime.pynq.PynqDevice``);
    ``kw`` go to the constructor.

    Raises:
        DeviceError: unknown target (or the backend's own construction errors).
    """
    if target == "fsim":
        from .fsim import FsimDevice

        return FsimDevice(cfg, **kw)
    if target == "rtl":
        try:
            from .rtl import RtlDevice
        except ImportError as e:
            raise DeviceError(f"target 'rtl' is not available: {e}") from None
        return RtlDevice(cfg, **kw)
    if target == "pynq":
        from .pynq import PynqDevice

        return PynqDevice(cfg, **kw)
    raise _unknown(target)


def run_raw(target: str, cfg: VTAConfig, dram: np.ndarray, insn_addr: int, insn_count: int,
            **kw: Any) -> RunResult:
    """Run a program on a raw DRAM image on ``target``, modifying ``dram`` in place, with
    the whole image as the memory the program may touch.

    ``kw`` go to the backend (fsim: ``max_steps``; rtl: ``timeout_cycles``, ``trace`` (a
    ``.vcd`` or ``.fst`` waveform path) and the other ``RtlDevice`` options).

    Raises:
        DeviceError / ProgramError / DeadlockError: as the backend reports them.
    """
    if target == "fsim":
        from .fsim import simulate

        return simulate(cfg, dram, insn_addr, insn_count, **kw)
    if target == "rtl":
        try:
            from .rtl import run_raw as rtl_run_raw
        except ImportError as e:
            raise DeviceError(f"target 'rtl' is not available: {e}") from None
        return rtl_run_raw(cfg, dram, insn_addr, insn_count, **kw)
    if target == "pynq":
        from .pynq import run_raw as pynq_run_raw

        return pynq_run_raw(cfg, dram, insn_addr, insn_count, **kw)
    raise _unknown(target)
