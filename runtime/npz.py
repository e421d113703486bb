"""Opening ``.npz`` archives (exec bundles, result files, ``.vtapkg`` artifacts) with one
clear error per failure instead of numpy's messages (numpy reports a file that is neither a
zip nor a ``.npy`` as "contains pickled data")."""

from __future__ import annotations

import contextlib
import os
import tempfile
import zipfile
from pathlib import Path
from typing import BinaryIO, Iterator

import numpy as np

from .device import DeviceError

__all__ = ["open_npz", "atomic_open"]


def open_npz(path: str | Path, what: str,
             error: type[DeviceError] = DeviceError) -> np.lib.npyio.NpzFile:
    """Open ``path`` as an ``.npz`` archive with ``allow_pickle=False``.

    Args:
        path: the file.
        what: what the file should be, used in messages (e.g. ``"bundle"``, ``"artifact"``).
        error: the exception class raised (a :class:`DeviceError` subclass).
    Returns:
        The open ``NpzFile`` (use it as a context manager to close it).
    Raises:
        error: ``"cannot read <what> '<path>': no such file"`` (or the OS reason);
            ``"<what> '<path>' is not an .npz archive"`` for any other content (a damaged
            zip adds the reason); ``"... is a single .npy array, not an .npz archive"``.
    """
    p = str(path)
    try:
        z = np.load(p, allow_pickle=False)
    except FileNotFoundError:
        raise error(f"cannot read {what} {p!r}: no such file") from None
    except (zipfile.BadZipFile, EOFError) as e:
        raise error(f"{what} {p!r} is not an .npz archive (damaged zip: {e})") from None
    except ValueError:  # numpy: neither zip nor .npy magic -> "pickled data"
        raise error(f"{what} {p!r} is not an .npz archive") from None
    except OSError as e:
        raise error(f"cannot read {what} {p!r}: {e.strerror or e}") from None
    if not isinstance(z, np.lib.npyio.NpzFile):
        raise error(f"{what} {p!r} is a single .npy array, not an .npz archive")
    return z


@contextlib.contextmanager
def atomic_open(path: str | Path) -> Iterator[BinaryIO]:
    """Open ``path`` for binary writing through a temporary file in the same directory that
    replaces ``path`` only when the ``with`` block succeeds: a failed or interrupted write
    never leaves a truncated file nor overwrites an existing one.  The file is written to
    exactly ``path`` (no suffix appended).

    Raises:
        OSError: the directory cannot be written (the temporary file is removed).
    """
    p = Path(path)
    fd, tmp = tempfile.mkstemp(dir=str(p.parent) if str(p.parent) else ".",
                               prefix=f".{p.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            yield f
        os.replace(tmp, p)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
