"""Bundled example models for the vtaforge compiler.

Currently one model ships here: a small CNN trained on scikit-learn's bundled
handwritten-digits dataset (``sklearn.datasets.load_digits``: 1797 grey-scale
images of 8x8 pixels, integer values 0..16, 10 classes).

Public API
----------
``DIGITS_ONNX``
    :class:`pathlib.Path` of the bundled ONNX model ``digits.onnx``.
``load_digits_split()``
    The deterministic train / held-out split used to train that model.
``DIGITS_SPLIT_SEED``, ``DIGITS_N_TRAIN``, ``DIGITS_N_TEST``
    The constants defining that split.

The model (opset 17, float32, NCHW) is
``Conv(1->16,3x3,pad1) -> Relu -> MaxPool(2x2,s2) -> Conv(16->32,3x3,pad1)
-> Relu -> MaxPool(2x2,s2) -> Flatten -> Gemm(128->64) -> Relu
-> Gemm(64->10)``, with input ``"input"`` of shape ``["N", 1, 8, 8]`` (pixels
scaled to ``[0, 1]``, i.e. ``x / 16``) and output ``"logits"`` of shape
``["N", 10]`` (raw logits, no softmax). ``N`` is a symbolic batch dimension.
It is produced by ``train_digits.py`` in this directory, which is
deterministic (re-running it gives a byte-identical file).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

__all__ = [
    "DIGITS_ONNX",
    "DIGITS_SPLIT_SEED",
    "DIGITS_N_TRAIN",
    "DIGITS_N_TEST",
    "load_digits_split",
]

#: Path of the bundled digits CNN (``digits.onnx``, next to this module).
DIGITS_ONNX: Path = Path(__file__).resolve().parent / "digits.onnx"

#: Seed of the ``numpy.random.RandomState`` permutation defining the split.
DIGITS_SPLIT_SEED: int = 0
#: Number of training images (the first ``DIGITS_N_TRAIN`` of the permutation).
DIGITS_N_TRAIN: int = 1297
#: Number of held-out test images (the last ``DIGITS_N_TEST`` of the permutation).
DIGITS_N_TEST: int = 500


def load_digits_split() -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Return the deterministic digits train / held-out split.

    Uses scikit-learn's bundled copy of the dataset (no download). The 1797
    images are shuffled with ``numpy.random.RandomState(0).permutation(1797)``;
    the first 1297 form the training set and the last 500 the held-out test
    set. This is exactly the split used to train :data:`DIGITS_ONNX`.

    Returns:
        ``(x_train, y_train, x_test, y_test)`` where

        * ``x_train``: ``float32`` array of shape ``(1297, 1, 8, 8)`` (NCHW),
          values in ``[0, 1]`` (raw pixel value / 16);
        * ``y_train``: ``int64`` array of shape ``(1297,)``, labels 0..9;
        * ``x_test``: ``float32`` array of shape ``(500, 1, 8, 8)``, in ``[0, 1]``;
        * ``y_test``: ``int64`` array of shape ``(500,)``, labels 0..9.
    """
    from sklearn.datasets import load_digits  # imported lazily: heavy

    digits = load_digits()
    images = np.asarray(digits.images, dtype=np.float64)  # (1797, 8, 8), 0..16
    labels = np.asarray(digits.target, dtype=np.int64)  # (1797,)
    n = images.shape[0]
    assert n == DIGITS_N_TRAIN + DIGITS_N_TEST, n

    x = (images / 16.0).astype(np.float32).reshape(n, 1, 8, 8)
    perm = np.random.RandomState(DIGITS_SPLIT_SEED).permutation(n)
    tr, te = perm[:DIGITS_N_TRAIN], perm[DIGITS_N_TRAIN:]
    return (
        np.ascontiguousarray(x[tr]),
        np.ascontiguousarray(labels[tr]),
        np.ascontiguousarray(x[te]),
        np.ascontiguousarray(labels[te]),
    )
