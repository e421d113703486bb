"""Reading ``.npy`` arrays and ``.npz`` archives (inputs, exec bundles, result files,
``.vtapkg`` artifacts) with one clear error per failure instead of numpy's messages (numpy
reports a file that is neither a zip nor a ``.npy`` as "contains pickled data" and advises
``allow_pickle``; a header declaring a 1 TiB array is a ``MemoryError``).

Every array's header is read first and refused by its declared size -- more bytes than the
file (or zip member) holds, or more than this machine's memory -- before anything is
allocated.  Object arrays are refused without mentioning pickles."""

from __future__ import annotations

import contextlib
import os
import re
import tempfile
import zipfile
from pathlib import Path
from typing import BinaryIO, Iterator

import numpy as np

from .device import DeviceError

__all__ = ["open_npz", "read_npz", "check_npz", "load_npy", "load_array", "atomic_open",
           "check_regular", "NPY_MAGIC", "ZIP_MAGIC"]

#: The first bytes of a ``.npy`` file and of a zip archive (``.npz``, ``.vtapkg``).
NPY_MAGIC = b"\x93NUMPY"
ZIP_MAGIC = b"PK\x03\x04"


def _memory_bytes() -> int | None:
    """This machine's physical memory in bytes, or None where it cannot be read."""
    try:
        return os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    except (ValueError, OSError, AttributeError):
        return None


def _size(n: int) -> str:
    """``n`` bytes for a message: ``1.0 TiB``, ``192 bytes``."""
    for unit, k in (("TiB", 1 << 40), ("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= k:
            return f"{n / k:.1f} {unit}"
    return f"{n} bytes"


def _read_header(f) -> tuple[tuple, bool, np.dtype]:
    """``(shape, fortran_order, dtype)`` of the ``.npy`` stream ``f`` (at its start).

    Raises:
        ValueError: not a ``.npy`` header, or one numpy cannot parse (one line).
    """
    try:
        major, _minor = np.lib.format.read_magic(f)
        hdr = (np.lib.format.read_array_header_1_0 if major == 1
               else np.lib.format.read_array_header_2_0)
        return hdr(f)
    except (ValueError, EOFError, SyntaxError, TypeError, KeyError, OverflowError) as e:
        msg = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
        msg = re.sub(r"<[\w.]+ object at 0x[0-9a-fA-F]+>", "?", msg)    # numpy's ast nodes
        raise ValueError(f"bad .npy header ({msg})") from None


def _check_declared(shape, dtype: np.dtype, holds: int) -> None:
    """Refuse an array by its header: object dtype, or more bytes than the file (or zip
    member) ``holds`` after its header, or more than this machine's memory.

    Raises:
        ValueError: one line naming the declared shape, dtype and size.
    """
    if dtype.hasobject:
        raise ValueError(f"holds Python objects (dtype {dtype}); only numeric arrays are read")
    n = int(np.prod(shape, dtype=object)) * dtype.itemsize
    what = f"{list(shape)} {dtype} ({_size(n)})"
    mem = _memory_bytes()
    if mem is not None and n > mem:
        raise ValueError(f"declares {what}, more than this machine's {_size(mem)} of memory")
    if n > holds:
        raise ValueError(f"declares {what} but holds {_size(holds)} of data (truncated?)")


def load_npy(path: str | Path, what: str, error: type[Exception] = DeviceError) -> np.ndarray:
    """Read the ``.npy`` array in ``path``, checking its header before allocating.

    Args:
        path: the file; what: what it should be, for messages (``"input"``).
        error: the exception class raised.
    Raises:
        error: ``"cannot read <what> '<path>': no such file"`` (or the OS reason);
            ``"<what> '<path>' is not a .npy array"`` (another kind of file);
            ``"<what> '<path>' is damaged: <cause>"`` (bad header, object dtype, a declared
            size larger than the file or the memory, data shorter than declared).
    """
    p = str(path)
    check_regular(p, what, error)
    try:
        with open(p, "rb") as f:
            if f.read(len(NPY_MAGIC)) != NPY_MAGIC:
                raise error(f"{what} {p!r} is not a .npy array (no NUMPY header)")
            f.seek(0)
            try:
                shape, fortran, dtype = _read_header(f)
                _check_declared(shape, dtype, os.fstat(f.fileno()).st_size - f.tell())
                f.seek(0)
                return np.lib.format.read_array(f, allow_pickle=False)
            except (ValueError, EOFError) as e:
                msg = str(e).strip().splitlines()[0] if str(e).strip() else "truncated"
                raise error(f"{what} {p!r} is damaged: {msg}") from None
    except OSError as e:
        raise error(f"cannot read {what} {p!r}: {os_reason(e)}") from None


def load_array(path: str | Path, what: str, error: type[Exception] = DeviceError):
    """A ``.npy`` array, or for a ``.npz`` archive ``{name: array}``, told apart by content.

    Raises:
        error: as :func:`load_npy` and :func:`read_npz`; ``"<what> '<path>' is neither a
            .npy array nor a .npz archive"``; an empty archive.
    """
    p = str(path)
    head = _head(p, what, error)
    if head.startswith(NPY_MAGIC):
        return load_npy(p, what, error)
    if not head.startswith(ZIP_MAGIC[:2]):     # PK: an empty archive starts PK\x05\x06
        kind = "an empty file" if not head else "no NUMPY or zip header"
        raise error(f"{what} {p!r} is neither a .npy array nor a .npz archive ({kind})")
    with open_npz(p, what, error) as z:
        d = read_npz(z, p, what, error)
    if not d:
        raise error(f"{what} {p!r} is an empty .npz archive")
    return d


def check_npz(path: str | Path, what: str, error: type[Exception] = DeviceError) -> list[str]:
    """Check every member of the ``.npz`` archive ``path`` without keeping any array: its
    ``.npy`` header (as :func:`read_npz`) and its CRC, reading the data in chunks.  For a
    reader that then loads the archive by itself (``load_bundle``).

    Returns:
        the archive's array names.
    Raises:
        error: as :func:`open_npz` and :func:`read_npz`.
    """
    import zlib

    p = str(path)
    with open_npz(p, what, error) as z:
        names = set(z.zip.namelist())
        for name in z.files:
            try:
                with _checked_member(z, name, names) as f:
                    while f.read(1 << 20):
                        pass
            except (zipfile.BadZipFile, zlib.error, EOFError, OSError, ValueError,
                    KeyError) as e:
                raise error(f"{what} {p!r} is damaged: member {name!r}: "
                            f"{_one_line(e)}") from None
        return list(z.files)


def check_regular(p: str, what: str, error: type[Exception]) -> None:
    """Refuse an existing ``p`` that is neither a regular file nor a directory (a FIFO, a
    device such as ``/dev/zero``, a socket) before it is opened: opening a FIFO blocks until
    a writer comes, reading a device may never end.  Missing paths and directories are left
    to the reader, whose message names them."""
    import stat

    try:
        mode = os.stat(p).st_mode
    except (OSError, ValueError):
        return
    if not (stat.S_ISREG(mode) or stat.S_ISDIR(mode)):
        raise error(f"{what} {p!r} is not a regular file (a FIFO or a device)")


def _head(p: str, what: str, error: type[Exception]) -> bytes:
    """The first bytes of the file ``p`` (enough for either magic)."""
    check_regular(p, what, error)
    try:
        with open(p, "rb") as f:
            return f.read(max(len(NPY_MAGIC), len(ZIP_MAGIC)))
    except OSError as e:
        raise error(f"cannot read {what} {p!r}: {os_reason(e)}") from None


def _checked_member(z, name: str, names: set):
    """The open zip member of array ``name`` of ``.npz`` ``z``, its ``.npy`` header read and
    its declared size checked against the member's size (:func:`_check_declared`) before
    any data is read; the caller reads on or closes it.

    Raises:
        ValueError, EOFError, zipfile errors: a bad header or a size the member cannot hold.
    """
    info = z.zip.getinfo(name + ".npy" if name + ".npy" in names else name)
    f = z.zip.open(info)
    try:
        shape, _fortran, dtype = _read_header(f)
        _check_declared(shape, dtype, info.file_size - f.tell())
    except BaseException:
        f.close()
        raise
    return f


def _one_line(e: BaseException) -> str:
    s = str(e).strip()
    return s.splitlines()[0] if s else type(e).__name__


def os_reason(e: OSError) -> str:
    """Why a file could not be read, in a few words: ``"no such file"``, ``"it is a
    directory"``, or the OS's reason."""
    if isinstance(e, FileNotFoundError):
        return "no such file"
    if isinstance(e, IsADirectoryError):
        return "it is a directory"
    return e.strerror or _one_line(e)


def open_npz(path: str | Path, what: str,
             error: type[Exception] = DeviceError) -> np.lib.npyio.NpzFile:
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
    head = _head(p, what, error)
    if head.startswith(NPY_MAGIC):      # not loaded: its header may ask for 1 TiB
        raise error(f"{what} {p!r} is a single .npy array, not an .npz archive")
    if not head.startswith(ZIP_MAGIC[:2]):
        raise error(f"{what} {p!r} is not an .npz archive" + ("" if head else " (an empty file)"))
    try:
        z = np.load(p, allow_pickle=False)
    except FileNotFoundError:
        raise error(f"cannot read {what} {p!r}: no such file") from None
    except IsADirectoryError:
        raise error(f"cannot read {what} {p!r}: it is a directory") from None
    except (zipfile.BadZipFile, EOFError) as e:
        raise error(f"{what} {p!r} is not an .npz archive (damaged zip: "
                    f"{_one_line(e)})") from None
    except ValueError:  # numpy: neither zip nor .npy magic -> "pickled data"
        raise error(f"{what} {p!r} is not an .npz archive") from None
    except OSError as e:
        raise error(f"cannot read {what} {p!r}: {e.strerror or e}") from None
    if not isinstance(z, np.lib.npyio.NpzFile):
        raise error(f"{what} {p!r} is a single .npy array, not an .npz archive")
    return z


def read_npz(z: np.lib.npyio.NpzFile, path: str | Path, what: str,
             error: type[Exception] = DeviceError, skip: tuple = ()) -> dict:
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
        try:
            with _checked_member(z, name, names):
                pass
            out[name] = z[name]
        except (zipfile.BadZipFile, zlib.error, EOFError, OSError, ValueError, KeyError) as e:
            raise error(f"{what} {p!r} is damaged: member {name!r}: {_one_line(e)}") from None
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
