"""runtime/npz.open_npz, shared by bundles, result files and artifacts: a file that is
neither zip nor .npy is "not an .npz archive" naming the file (never numpy's "contains
pickled data"); a .npy, a damaged zip and a missing file each get one clear message."""

from __future__ import annotations

import numpy as np
import pytest

from vtaforge.runtime.artifact import ArtifactError, load_artifact
from vtaforge.runtime.bundle import BundleError, load_bundle, load_result, save_bundle
from vtaforge.runtime.npz import open_npz


@pytest.fixture
def files(tmp_path):
    junk = tmp_path / "junk.dat"
    junk.write_bytes(b"hello, not an archive\n" * 4)
    npy = tmp_path / "arr.npy"
    np.save(npy, np.zeros(4, np.uint8))
    damaged = tmp_path / "cut.npz"
    np.savez(damaged, a=np.arange(1000))
    damaged.write_bytes(damaged.read_bytes()[:50])
    return junk, npy, damaged, tmp_path / "missing.npz"


@pytest.mark.parametrize("loader,exc,what", [
    (load_bundle, BundleError, "bundle"),
    (load_artifact, ArtifactError, "artifact"),
    (load_result, BundleError, "result file"),
    (lambda p: open_npz(p, "thing"), Exception, "thing"),
])
def test_open_errors_name_the_file(files, loader, exc, what):
    junk, npy, damaged, missing = files
    for p, msg in ((junk, "is not an .npz archive"), (npy, "is a single .npy array"),
                   (damaged, "is not an .npz archive (damaged zip"),
                   (missing, "no such file")):
        with pytest.raises(exc) as ei:
            loader(p)
        text = str(ei.value)
        assert p.name in text and msg in text and what in text, text
        assert "pickled" not in text and "\n" not in text


def test_load_result_missing_key(tmp_path):
    p = tmp_path / "r.npz"
    save_bundle(p, np.zeros(16, np.uint8), 0, 1)  # a bundle, not a result file
    with pytest.raises(BundleError, match=r"r\.npz' lacks key 'cycles'"):
        load_result(p)


@pytest.mark.parametrize("reader", ["load_array", "load_npy", "open_npz", "load_artifact",
                                    "load_bundle"])
def test_a_fifo_or_device_is_refused_before_it_is_opened(tmp_path, reader):
    """Opening a FIFO blocks until a writer comes (the board runner hung on one); a device
    never ends: every reader refuses both by their type, naming the file."""
    import os

    from vtaforge.runtime import npz

    fifo = tmp_path / "p.npz"
    os.mkfifo(fifo)
    fn = {"load_array": lambda p: npz.load_array(p, "input"),
          "load_npy": lambda p: npz.load_npy(p, "input"),
          "open_npz": lambda p: npz.open_npz(p, "input"),
          "load_artifact": load_artifact, "load_bundle": load_bundle}[reader]
    for p in (fifo, "/dev/zero"):
        with pytest.raises(Exception, match=r"is not a regular file \(a FIFO or a device\)"):
            fn(str(p))
