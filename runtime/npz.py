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

__all__ = ["open_npz", "read_npz", "atomic_open"]


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


def read_npz(z: np.lib.npyio.NpzFile, path: str | Path, what: str,
             error: type[DeviceError] = DeviceError, skip: tuple = ()) -> dict:
    """Read every array of an open archive, checking each member's header first.

    A member whose header declares more bytes than the member holds (a corrupt file asking
    for a 1 TiB array), an object dtype, a bad header, a CRC or zlib error all raise
    ``error`` with one line naming the member, instead of a MemoryError or numpy's message.

    Args:
        z: from :func:`open_npz`; path, what, error: as there; skip: member names not read.
    Returns:
        ``{name: ndarray}``.
    """
    import zlib

    p = str(path)
    out = {}
    names = set(z.zip.namelist())
    for name in z.files:
        if name in skip:
            continue
        member = name + ".npy" if name + ".npy" in names else name
        try:
            info = z.zip.getinfo(member)
            with z.zip.open(info) as f:
                major, _minor = np.lib.format.read_magic(f)
                hdr = (np.lib.format.read_array_header_1_0 if major == 1
                       else np.lib.format.read_array_header_2_0)
                shape, _fortran, dtype = hdr(f)
            if dtype.hasobject:
                raise ValueError("object arrays are not allowed")
            n = int(np.prod(shape, dtype=object)) * dtype.itemsize
            if n > info.file_size:
                raise ValueError(f"declares {list(shape)} {dtype} ({n} bytes) but holds "
                                 f"{info.file_size} bytes")
            out[name] = z[name]
        except (zipfile.BadZipFile, zlib.error, EOFError, OSError, ValueError, KeyError) as e:
            raise error(f"{what} {p!r} is damaged: member {name!r}: {e}") from None
    return out


@contextlib.contextmanager
def atomic_open(path: str | Path) -> Iterator[BinaryIO]:
    """Open ``path`` for binary writing through a temporary file in the same directory that
    replaces ``path`` only when the ``with`` block succeeds: a failed or interrupted write
    never leaves a truncated file nor overwrites an existing one.  The file is written to
    exactly ``path`` (no suffix appended), with the mode a plain ``open`` would give
    (``0666 & ~umask``, 0644 by default).

    Raises:
        OSError: the directory cannot be written (the temporary file is removed).
    """
    p = Path(path)
    fd, tmp = tempfile.mkstemp(dir=str(p.parent) if str(p.parent) else ".",
                               prefix=f".{p.name}.", suffix=".tmp")
    try:
        m = os.umask(0)             # mkstemp makes 0600; written files get 0666 & ~umask (0644)
        os.umask(m)
        os.fchmod(fd, 0o666 & ~m)
        with os.fdopen(fd, "wb") as f:
            yield f
        os.replace(tmp, p)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
