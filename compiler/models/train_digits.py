#!/usr/bin/env python3
"""Train the bundled digits CNN (pure numpy) and export it as ONNX.

Usage::

    python compiler/models/train_digits.py [--out-dir DIR] [--epochs N]

Writes ``digits.onnx`` next to this script (or into ``--out-dir``).

Data: ``sklearn.datasets.load_digits`` (bundled, no download), pixels scaled to
float32 ``x / 16``, split by :func:`load_digits_split` from this package's
``__init__.py`` (``RandomState(0)`` permutation; first 1297 train, last 500
held out). The held-out set is never used for training or model selection; it
is only evaluated and printed at the end.

Network (NCHW)::

    Conv(1->16, 3x3, pad 1) + b -> Relu -> MaxPool(2x2, s2)
    Conv(16->32, 3x3, pad 1) + b -> Relu -> MaxPool(2x2, s2)
    Flatten -> Gemm(128->64) + b -> Relu -> Gemm(64->10) + b  => "logits"

Training: He init, Adam with cosine learning-rate decay, light L2 weight decay,
minibatches from a seeded ``RandomState``, random +-1 pixel shifts as data
augmentation. Everything is float32 with a single BLAS thread, so a re-run
produces a byte-identical ONNX file.
"""

from __future__ import annotations

import os

# A single BLAS thread makes float32 GEMM results independent of the machine's
# core count (threaded partitioning can change summation order). Must happen
# before numpy is imported.
for _var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ[_var] = "1"

import argparse  # noqa: E402
import importlib.util  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402

import numpy as np  # noqa: E402

HERE = Path(__file__).resolve().parent
SEED = 1234
F32 = np.float32


def _load_split_function():
    """Import ``load_digits_split`` from the sibling ``__init__.py`` by path.

    The script must run standalone (``python compiler/models/train_digits.py``)
    whether or not the ``vtaforge`` package is installed, and the split must
    come from exactly the same code that library users call.
    """
    spec = importlib.util.spec_from_file_location("_vtaforge_models", HERE / "__init__.py")
    mod = importlib.util.module_from_spec(spec)
    assert spec.loader is not None
    spec.loader.exec_module(mod)
    return mod.load_digits_split


# --------------------------------------------------------------------------
# Layers (forward returns output and a cache; backward returns gradients)
# --------------------------------------------------------------------------


def im2col_3x3(x: np.ndarray) -> np.ndarray:
    """(N, C, H, W) -> (N*H*W, C*9), pad 1, column order (c, kh, kw)."""
    n, c, h, w = x.shape
    xp = np.pad(x, ((0, 0), (0, 0), (1, 1), (1, 1)))
    cols = np.empty((n, h, w, c, 3, 3), dtype=x.dtype)
    for i in range(3):
        for j in range(3):
            cols[:, :, :, :, i, j] = xp[:, :, i : i + h, j : j + w].transpose(0, 2, 3, 1)
    return cols.reshape(n * h * w, c * 9)


def col2im_3x3(dcols: np.ndarray, shape: tuple[int, int, int, int]) -> np.ndarray:
    """Adjoint of :func:`im2col_3x3`."""
    n, c, h, w = shape
    d = dcols.reshape(n, h, w, c, 3, 3)
    dxp = np.zeros((n, c, h + 2, w + 2), dtype=dcols.dtype)
    for i in range(3):
        for j in range(3):
            dxp[:, :, i : i + h, j : j + w] += d[:, :, :, :, i, j].transpose(0, 3, 1, 2)
    return dxp[:, :, 1:-1, 1:-1]


def conv_fwd(x, w, b):
    n, _, h, wd = x.shape
    cout = w.shape[0]
    cols = im2col_3x3(x)
    y = cols @ w.reshape(cout, -1).T + b  # (N*H*W, Cout)
    y = y.reshape(n, h, wd, cout).transpose(0, 3, 1, 2)
    return np.ascontiguousarray(y), (x.shape, cols, w)


def conv_bwd(dy, cache, need_dx=True):
    xshape, cols, w = cache
    cout = w.shape[0]
    dy2 = dy.transpose(0, 2, 3, 1).reshape(-1, cout)  # (N*H*W, Cout)
    dw = (dy2.T @ cols).reshape(w.shape)
    db = dy2.sum(axis=0)
    dx = col2im_3x3(dy2 @ w.reshape(cout, -1), xshape) if need_dx else None
    return dx, dw, db


def maxpool_fwd(x):
    n, c, h, w = x.shape
    blocks = x.reshape(n, c, h // 2, 2, w // 2, 2).transpose(0, 1, 2, 4, 3, 5)
    blocks = blocks.reshape(n, c, h // 2, w // 2, 4)
    idx = blocks.argmax(axis=-1)
    y = np.take_along_axis(blocks, idx[..., None], axis=-1)[..., 0]
    return y, (x.shape, idx)


def maxpool_bwd(dy, cache):
    (n, c, h, w), idx = cache
    d = np.zeros((n, c, h // 2, w // 2, 4), dtype=dy.dtype)
    np.put_along_axis(d, idx[..., None], dy[..., None], axis=-1)
    d = d.reshape(n, c, h // 2, w // 2, 2, 2).transpose(0, 1, 2, 4, 3, 5)
    return d.reshape(n, c, h, w)


def forward(p, x, train=False):
    caches = {}
    a, caches["c1"] = conv_fwd(x, p["conv1_w"], p["conv1_b"])
    caches["r1"] = a > 0
    a = a * caches["r1"]
    a, caches["p1"] = maxpool_fwd(a)
    a, caches["c2"] = conv_fwd(a, p["conv2_w"], p["conv2_b"])
    caches["r2"] = a > 0
    a = a * caches["r2"]
    a, caches["p2"] = maxpool_fwd(a)
    f = a.reshape(a.shape[0], -1)  # ONNX Flatten(axis=1) order: (c, h, w)
    caches["f"] = f
    h = f @ p["fc1_w"].T + p["fc1_b"]
    caches["r3"] = h > 0
    h = h * caches["r3"]
    caches["h"] = h
    logits = h @ p["fc2_w"].T + p["fc2_b"]
    return (logits, caches) if train else logits


def backward(p, caches, dlogits):
    g = {}
    h = caches["h"]
    g["fc2_w"] = dlogits.T @ h
    g["fc2_b"] = dlogits.sum(axis=0)
    dh = (dlogits @ p["fc2_w"]) * caches["r3"]
    g["fc1_w"] = dh.T @ caches["f"]
    g["fc1_b"] = dh.sum(axis=0)
    df = dh @ p["fc1_w"]
    n = df.shape[0]
    da = df.reshape(n, 32, 2, 2)
    da = maxpool_bwd(da, caches["p2"]) * caches["r2"]
    da, g["conv2_w"], g["conv2_b"] = conv_bwd(da, caches["c2"])
    da = maxpool_bwd(da, caches["p1"]) * caches["r1"]
    _, g["conv1_w"], g["conv1_b"] = conv_bwd(da, caches["c1"], need_dx=False)
    return g


def softmax_xent(logits, y):
    z = logits - logits.max(axis=1, keepdims=True)
    e = np.exp(z)
    prob = e / e.sum(axis=1, keepdims=True)
    n = logits.shape[0]
    loss = float(-np.log(prob[np.arange(n), y] + 1e-12).mean())
    d = prob.copy()
    d[np.arange(n), y] -= 1.0
    return loss, (d / n).astype(F32)


# --------------------------------------------------------------------------
# Training
# --------------------------------------------------------------------------


def init_params(rng: np.random.RandomState) -> dict[str, np.ndarray]:
    def he(shape, fan_in):
        return (rng.standard_normal(shape) * np.sqrt(2.0 / fan_in)).astype(F32)

    return {
        "conv1_w": he((16, 1, 3, 3), 9),
        "conv1_b": np.zeros(16, F32),
        "conv2_w": he((32, 16, 3, 3), 16 * 9),
        "conv2_b": np.zeros(32, F32),
        "fc1_w": he((64, 128), 128),
        "fc1_b": np.zeros(64, F32),
        "fc2_w": (rng.standard_normal((10, 64)) * np.sqrt(1.0 / 64)).astype(F32),
        "fc2_b": np.zeros(10, F32),
    }


def random_shift(x: np.ndarray, rng: np.random.RandomState) -> np.ndarray:
    """Shift each image by dy, dx in {-1, 0, 1} (zero fill)."""
    n = x.shape[0]
    xp = np.pad(x, ((0, 0), (0, 0), (1, 1), (1, 1)))
    sh = rng.randint(0, 3, size=(n, 2))
    out = np.empty_like(x)
    for k in range(n):
        i, j = sh[k]
        out[k] = xp[k, :, i : i + 8, j : j + 8]
    return out


def train(x_tr, y_tr, epochs=40, batch=32, lr=3e-3, wd=1e-4, log=print):
    rng = np.random.RandomState(SEED)
    p = init_params(rng)
    m = {k: np.zeros_like(v) for k, v in p.items()}
    v = {k: np.zeros_like(v) for k, v in p.items()}
    b1, b2, eps = 0.9, 0.999, 1e-8
    n = x_tr.shape[0]
    steps_per_epoch = (n + batch - 1) // batch
    total = epochs * steps_per_epoch
    t = 0
    for ep in range(epochs):
        perm = rng.permutation(n)
        xa = random_shift(x_tr[perm], rng)
        ya = y_tr[perm]
        losses = []
        for s in range(0, n, batch):
            xb, yb = xa[s : s + batch], ya[s : s + batch]
            logits, caches = forward(p, xb, train=True)
            loss, dl = softmax_xent(logits, yb)
            losses.append(loss)
            g = backward(p, caches, dl)
            t += 1
            lr_t = lr * 0.5 * (1.0 + np.cos(np.pi * (t - 1) / total))
            c1 = 1.0 - b1**t
            c2 = 1.0 - b2**t
            for k in p:
                gk = g[k].astype(F32)
                if k.endswith("_w"):
                    gk = gk + F32(wd) * p[k]  # L2 on weights only
                m[k] = F32(b1) * m[k] + F32(1 - b1) * gk
                v[k] = F32(b2) * v[k] + F32(1 - b2) * gk * gk
                step = (lr_t / c1) * m[k] / (np.sqrt(v[k] / F32(c2)) + F32(eps))
                p[k] = (p[k] - step).astype(F32)
        if (ep + 1) % 5 == 0 or ep == 0:
            acc = accuracy(p, x_tr, y_tr)
            log(f"epoch {ep + 1:3d}  loss {np.mean(losses):.4f}  train acc {acc:.4f}")
    return p


def accuracy(p, x, y) -> float:
    return float((forward(p, x).argmax(axis=1) == y).mean())


# --------------------------------------------------------------------------
# ONNX export
# --------------------------------------------------------------------------


def to_onnx(p: dict[str, np.ndarray]):
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    inits = [numpy_helper.from_array(np.ascontiguousarray(p[k], dtype=F32), name=k) for k in sorted(p)]
    nodes = [
        helper.make_node("Conv", ["input", "conv1_w", "conv1_b"], ["conv1"], name="conv1",
                         kernel_shape=[3, 3], pads=[1, 1, 1, 1], strides=[1, 1]),
        helper.make_node("Relu", ["conv1"], ["relu1"], name="relu1"),
        helper.make_node("MaxPool", ["relu1"], ["pool1"], name="pool1",
                         kernel_shape=[2, 2], strides=[2, 2]),
        helper.make_node("Conv", ["pool1", "conv2_w", "conv2_b"], ["conv2"], name="conv2",
                         kernel_shape=[3, 3], pads=[1, 1, 1, 1], strides=[1, 1]),
        helper.make_node("Relu", ["conv2"], ["relu2"], name="relu2"),
        helper.make_node("MaxPool", ["relu2"], ["pool2"], name="pool2",
                         kernel_shape=[2, 2], strides=[2, 2]),
        helper.make_node("Flatten", ["pool2"], ["flat"], name="flatten", axis=1),
        helper.make_node("Gemm", ["flat", "fc1_w", "fc1_b"], ["fc1"], name="fc1", transB=1),
        helper.make_node("Relu", ["fc1"], ["relu3"], name="relu3"),
        helper.make_node("Gemm", ["relu3", "fc2_w", "fc2_b"], ["logits"], name="fc2", transB=1),
    ]
    graph = helper.make_graph(
        nodes,
        "digits_cnn",
        [helper.make_tensor_value_info("input", TensorProto.FLOAT, ["N", 1, 8, 8])],
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["N", 10])],
        initializer=inits,
    )
    model = helper.make_model(
        graph,
        opset_imports=[helper.make_opsetid("", 17)],
        producer_name="vtaforge.compiler.models.train_digits",
        producer_version="1",
        doc_string="8x8 sklearn digits CNN; input = pixels/16 in [0,1], NCHW; output raw logits.",
    )
    model.ir_version = 8  # the IR version that introduced opset 17; widely loadable
    onnx.checker.check_model(model, full_check=True)
    model = onnx.shape_inference.infer_shapes(model, check_type=True, strict_mode=True)
    onnx.checker.check_model(model, full_check=True)
    return model


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out-dir", type=Path, default=HERE)
    ap.add_argument("--epochs", type=int, default=40)
    args = ap.parse_args(argv)

    load_digits_split = _load_split_function()
    x_tr, y_tr, x_te, y_te = load_digits_split()
    print(f"train {x_tr.shape} test {x_te.shape}")

    t0 = time.perf_counter()
    p = train(x_tr, y_tr, epochs=args.epochs)
    dt = time.perf_counter() - t0
    print(f"training time {dt:.1f} s")
    print(f"train acc {accuracy(p, x_tr, y_tr):.4f}  held-out acc {accuracy(p, x_te, y_te):.4f}")
    for k in sorted(p):
        a = np.abs(p[k])
        print(f"  {k:8s} {str(p[k].shape):16s} max|w| {a.max():.3f}  std {p[k].std():.3f}  "
              f"max/std {a.max() / max(p[k].std(), 1e-12):.1f}")

    import onnx

    model = to_onnx(p)
    args.out_dir.mkdir(parents=True, exist_ok=True)
    out = args.out_dir / "digits.onnx"
    data = model.SerializeToString(deterministic=True)
    out.write_bytes(data)
    onnx.checker.check_model(str(out), full_check=True)
    print(f"wrote {out} ({len(data)} bytes)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
