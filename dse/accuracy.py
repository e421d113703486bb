"""Accuracy as a DSE objective: top-1 accuracy on a labelled set, per width of the core.

What a core's numerics change is the quantizer's grid: ``compile_model`` quantizes to the
config's ``INP_WIDTH`` / ``WGT_WIDTH`` (int8, or int16 on ``LOG_*_WIDTH`` 4 cores,
docs/compiler.md "Widths"), and every VTA step is bit-exact against the integer
reference.  So accuracy depends on the config only through :func:`accuracy_key` (the widths,
``ACC_WIDTH`` and ``ALU_MUL``, which decides exact multipliers), not on the GEMM shape or
the buffers: one measurement per key, shared by every point with that key.

A measurement (:meth:`AccuracyEvaluator.measure`) compiles the labelled model for the
config, runs the whole labelled set on the functional simulator (the VTA programs, not a
float model), and records top-1 accuracy, the float model's accuracy (onnxruntime, the same
inputs) and whether every VTA step equalled the integer reference bit for bit.

Labelled sets (``--accuracy SPEC``):

- ``digits`` -- the bundled digits CNN (:data:`~vtaforge.compiler.models.DIGITS_ONNX`),
  calibrated on its 1297 training images and measured on its 500 held-out images
  (:func:`~vtaforge.compiler.models.load_digits_split`, the split it was trained on).
- ``MODEL.onnx:DATA.npz`` -- a user's single-input ONNX model and a NumPy ``.npz`` archive
  with ``x`` (the inputs, ``[N, ...]`` matching the model's input, cast to float32), ``y``
  (integer labels ``[N]``, in ``0 .. C-1`` for a first output ``[N, C]``) and optionally
  ``calib`` (calibration inputs ``[M, ...]``; without it the model is calibrated on
  ``x[:256]``, the first :data:`DEFAULT_CALIB` inputs).  The prediction is the argmax over
  the last axis of the model's first output.  The path is split at the ``:`` whose left side
  is an existing file (else the last ``:``).  Both files are read and checked when the
  evaluator is made (:class:`~.result.DSEError`, one line, on bad input), and the cache key
  holds their SHA-256, not their paths.
"""

from __future__ import annotations

import hashlib
import io
import time
from pathlib import Path
from typing import Any, Mapping

import numpy as np

from ..hw.config import VTAConfig
from .result import DSEError

__all__ = ["AccuracyEvaluator", "accuracy_key", "DATASETS", "DEFAULT_CALIB", "USER_SPEC",
           "make_accuracy", "split_user_spec"]

#: Bundled labelled sets the DSE can measure accuracy on.
DATASETS = ("digits",)
#: How a user's model and labelled data are named (``--accuracy MODEL.onnx:DATA.npz``).
USER_SPEC = "MODEL.onnx:DATA.npz"
#: Calibration inputs of a user set without ``calib``: the first this many of ``x``.
DEFAULT_CALIB = 256
#: Samples per onnxruntime call for the float accuracy (bounds its memory).
_ORT_CHUNK = 1024


def accuracy_key(cfg: VTAConfig) -> dict:
    """The config fields accuracy depends on: ``INP_WIDTH``, ``WGT_WIDTH``, ``ACC_WIDTH``,
    ``ALU_MUL`` (JSON-ready)."""
    return {"inp": int(cfg.INP_WIDTH), "wgt": int(cfg.WGT_WIDTH), "acc": int(cfg.ACC_WIDTH),
            "alu_mul": bool(cfg.ALU_MUL)}


def width_label(key: Mapping) -> str:
    """``i8w8a32`` style label of an :func:`accuracy_key`."""
    return f"i{key['inp']}w{key['wgt']}a{key['acc']}" + ("+mul" if key["alu_mul"] else "")


def _unknown(spec: str) -> DSEError:
    return DSEError(f"unknown accuracy data set {spec!r}; allowed: {', '.join(DATASETS)}, "
                    f"or {USER_SPEC} (a model and its labelled inputs)")


def split_user_spec(spec: str) -> tuple[str, str]:
    """``"MODEL.onnx:DATA.npz"`` -> ``(model path, data path)``: split at the first ``:``
    whose left side is an existing file, else at the last ``:`` (so a path may hold ``:``).

    Raises:
        DSEError: no ``:``, or an empty side.
    """
    cuts = [i for i, c in enumerate(spec) if c == ":"]
    if not cuts:
        if spec.lower().endswith((".onnx", ".npz")):
            raise DSEError(f"--accuracy {spec!r}: give the model and its labelled data as "
                           f"{USER_SPEC}")
        raise _unknown(spec)
    i = next((i for i in cuts if Path(spec[:i]).expanduser().is_file()), cuts[-1])
    model, data = spec[:i], spec[i + 1:]
    if not model or not data:
        raise DSEError(f"--accuracy {spec!r}: give the model and its labelled data as "
                       f"{USER_SPEC}")
    return model, data


def _first_line(e: BaseException) -> str:
    s = str(e).strip()
    return s.splitlines()[0] if s else type(e).__name__


def _onnx_dims(vi) -> list:
    """The dims of an ONNX ValueInfo: ints, or names / None for symbolic ones."""
    tt = vi.type.tensor_type
    if not tt.HasField("shape"):
        return None
    return [d.dim_value if d.HasField("dim_value") else (d.dim_param or None)
            for d in tt.shape.dim]


def _fmt_shape(dims) -> str:
    return "[" + ", ".join(str(d) if d is not None else "?" for d in dims) + "]"


def _float_inputs(a: np.ndarray, label: str, name: str, dims: list | None) -> np.ndarray:
    """Check ``a`` (the array ``name`` of the data file ``label``) against the model input
    dims; returns it as float32.  Raises DSEError."""
    if a.dtype.kind not in "fiu" or a.dtype == np.bool_:
        raise DSEError(f"{label}: {name} has dtype {a.dtype}; expected numbers (float32)")
    if a.ndim == 0 or a.shape[0] == 0:
        raise DSEError(f"{label}: {name} has no samples (shape {list(a.shape)})")
    if dims is not None and (a.ndim != len(dims) or any(
            isinstance(d, int) and d > 0 and d != s for d, s in zip(dims[1:], a.shape[1:]))):
        raise DSEError(f"{label}: {name} has shape {list(a.shape)}; the model's input is "
                       f"{_fmt_shape(dims)} (samples first)")
    if a.dtype.kind == "f" and np.isfinite(a).all() and a.size and \
            float(np.abs(a).max()) > float(np.finfo(np.float32).max):
        raise DSEError(f"{label}: {name} holds values beyond float32's range (max "
                       f"|{name}| = {float(np.abs(a).max()):.3g}); the model takes float32")
    a = np.ascontiguousarray(a, dtype=np.float32)
    if not np.isfinite(a).all():
        raise DSEError(f"{label}: {name} contains NaN or infinity "
                       f"({int(np.count_nonzero(~np.isfinite(a)))} value(s))")
    return a


def _load_user(model_path: str, data_path: str) -> dict:
    """Read and check a user's model and labelled data (the checks of the module docstring).

    Returns:
        ``{"model": bytes, "calib": float32 [M, ...], "x": float32 [N, ...], "y": int64 [N],
        "batch": int or None (the model's static batch), "float_pred": int64 [N] (argmax
        of onnxruntime's first output), "classes": int, "calibration": "calib" or "x[:256]",
        "model_sha256", "data_sha256", "name": "model.onnx:data.npz"}``.
    Raises:
        DSEError: one line naming the cause.
    """
    import onnx

    mp, dp = Path(model_path).expanduser(), Path(data_path).expanduser()
    ml, dl = f"accuracy model '{mp}'", f"accuracy data '{dp}'"
    for p, lab in ((mp, ml), (dp, dl)):
        if not p.exists():
            raise DSEError(f"{lab}: no such file")
        if not p.is_file():
            raise DSEError(f"{lab}: not a file")
    try:
        mbytes, dbytes = mp.read_bytes(), dp.read_bytes()
    except OSError as e:
        raise DSEError(f"cannot read --accuracy file: {_first_line(e)}") from None
    try:
        model = onnx.ModelProto()
        model.ParseFromString(mbytes)
        ok = model.HasField("graph") and len(model.graph.node) > 0
    except Exception:  # noqa: BLE001 - protobuf raises several types
        ok = False
    if not ok:
        raise DSEError(f"{ml}: not an ONNX model (no graph with nodes could be read)")
    g = model.graph
    inits = {t.name for t in g.initializer}
    inputs = [i for i in g.input if i.name not in inits]
    if len(inputs) != 1:
        names = ", ".join(i.name for i in inputs) or "none"
        raise DSEError(f"{ml} has {len(inputs)} inputs ({names}); accuracy needs a model with "
                       f"one input")
    if not g.output:
        raise DSEError(f"{ml}: no graph outputs")
    inp, out0 = inputs[0], g.output[0].name
    if inp.type.tensor_type.elem_type != onnx.TensorProto.FLOAT:
        raise DSEError(f"{ml}: input {inp.name!r} is not float32; accuracy needs a float "
                       f"input")
    dims = _onnx_dims(inp)
    batch = dims[0] if dims and isinstance(dims[0], int) and dims[0] > 0 else None
    if dbytes.startswith(b"\x93NUMPY"):
        raise DSEError(f"{dl}: not a .npz archive (a single .npy array); write it with "
                       f"numpy.savez(path, x=..., y=...)")
    if not dbytes.startswith((b"PK\x03\x04", b"PK\x05\x06")):
        raise DSEError(f"{dl}: not a .npz archive (no zip header); write it with "
                       f"numpy.savez(path, x=..., y=...)")
    try:
        z = np.load(io.BytesIO(dbytes), allow_pickle=False)
    except Exception as e:  # noqa: BLE001 - zipfile / numpy raise several types
        raise DSEError(f"{dl}: not a readable .npz archive ({_first_line(e)})") from None
    try:
        have = list(z.files)
        arrs = {k: z[k] for k in ("x", "y", "calib") if k in have}
    except Exception as e:  # noqa: BLE001 - a corrupt member, an object array
        raise DSEError(f"{dl}: not a readable .npz archive ({_first_line(e)})") from None
    finally:
        z.close()
    for k in ("x", "y"):
        if k not in arrs:
            raise DSEError(f"{dl} has no array {k!r} (it has: {', '.join(have) or 'none'}); "
                           f"it needs x (inputs [N, ...]) and y (integer labels [N])")
    x = _float_inputs(arrs["x"], dl, "x", dims)
    n = len(x)
    y = arrs["y"]
    if y.dtype.kind not in "iu":
        raise DSEError(f"{dl}: y has dtype {y.dtype}; expected integer class labels")
    if y.shape != (n,):
        raise DSEError(f"{dl}: y has shape {list(y.shape)}; expected [{n}] (one label per "
                       f"input of x)")
    if batch is not None and n % batch:
        raise DSEError(f"{dl}: x has {n} samples; the model's batch is {batch}, so N must be "
                       f"a multiple of {batch}")
    if "calib" in arrs:
        calib = _float_inputs(arrs["calib"], dl, "calib", dims)
        if batch is not None and len(calib) < batch:
            raise DSEError(f"{dl}: calib has {len(calib)} samples, fewer than the model's "
                           f"batch {batch}")
        cname = "calib"
    else:
        m = min(n, DEFAULT_CALIB)
        m = m - m % batch if batch else m
        calib, cname = x[:m], f"x[:{m}]"
    import onnxruntime as ort

    try:
        sess = ort.InferenceSession(mbytes, providers=["CPUExecutionProvider"])
    except Exception as e:  # noqa: BLE001 - onnxruntime raises its own types
        raise DSEError(f"{ml}: onnxruntime cannot load it ({_first_line(e)})") from None
    step = batch or _ORT_CHUNK
    try:
        fl = [sess.run([out0], {inp.name: x[i:i + step]})[0] for i in range(0, n, step)]
    except Exception as e:  # noqa: BLE001
        raise DSEError(f"{ml}: onnxruntime failed on x ({_first_line(e)})") from None
    fo = np.concatenate([np.asarray(f) for f in fl]) if fl else None
    if fo is None or fo.ndim < 1 or fo.shape[0] != n or fo.shape[-1] < 1:
        raise DSEError(f"{ml}: first output {out0!r} has shape "
                       f"{list(getattr(fo, 'shape', []))} on {n} inputs; expected [N, ..., C]")
    per = int(np.prod(fo.shape[1:-1], dtype=np.int64)) if fo.ndim > 1 else 1
    if fo.ndim < 2 or per != 1:
        raise DSEError(f"{ml}: first output {out0!r} has shape {list(fo.shape)}; the argmax "
                       f"over its last axis gives {per if fo.ndim > 1 else 0} values per "
                       f"sample, accuracy needs one (e.g. [N, classes])")
    classes = int(fo.shape[-1])
    lo, hi = int(y.min()), int(y.max())      # Python ints: no wrap of huge unsigned labels
    y = y.astype(np.int64) if lo >= 0 and hi < classes else y
    if lo < 0 or hi >= classes:
        raise DSEError(f"{dl}: labels y span {lo}..{hi}; the model's first output {out0!r} "
                       f"has {classes} classes, so labels must be in 0..{classes - 1}")
    return {"model": mbytes, "calib": calib, "x": x, "y": y, "batch": batch,
            "float_pred": fo.reshape(n, classes).argmax(1), "classes": classes,
            "calibration": cname, "name": f"{mp.name}:{dp.name}",
            "model_sha256": hashlib.sha256(mbytes).hexdigest(),
            "data_sha256": hashlib.sha256(dbytes).hexdigest()}


class AccuracyEvaluator:
    """Top-1 accuracy of a labelled model compiled for a config, on fsim.

    Args:
        dataset: one of :data:`DATASETS` or ``"MODEL.onnx:DATA.npz"`` (module docstring).
        samples: measure on the first ``samples`` labelled inputs (default: all: the 500
            held-out digits, or the whole ``x``).
        model, data: the paths of a user's model and labelled data, instead of
            ``dataset`` (for paths that a ``:`` split would not separate).

    Raises:
        DSEError: unknown data set, ``samples`` not a positive int, or a bad user model or
            data file (one line: missing file, not an ONNX model, npz without x or y, shape
            mismatch with the model's input, labels out of range, no samples, a model
            with several inputs ...).
    """

    def __init__(self, dataset: str | None = "digits", samples: int | None = None, *,
                 model: str | Path | None = None, data: str | Path | None = None):
        if samples is not None and (isinstance(samples, bool) or not isinstance(samples, int)
                                    or samples < 1):
            raise DSEError(f"accuracy samples must be a positive int, got {samples!r}")
        self.samples = samples
        self._data = None
        self._user = None
        if model is not None or data is not None:
            if model is None or data is None:
                raise DSEError(f"accuracy needs both a model and its labelled data "
                               f"({USER_SPEC})")
            paths = (str(model), str(data))
        elif not isinstance(dataset, str):
            raise DSEError(f"accuracy must be a data set name ({', '.join(DATASETS)}) or "
                           f"{USER_SPEC}, got {dataset!r}")
        elif dataset in DATASETS:
            paths = None
        else:
            paths = split_user_spec(dataset)
        if paths is None:
            self.dataset = dataset
            return
        u = self._user = _load_user(*paths)
        self.dataset = u["name"]
        if samples is not None and u["batch"] and min(samples, len(u["x"])) % u["batch"]:
            raise DSEError(f"accuracy samples {samples} must be a multiple of the model's "
                           f"batch {u['batch']}")

    @property
    def key(self) -> dict:
        """The cache key part of this evaluator: the data set and ``samples``; for a user's
        set the SHA-256 of the model and data files (their contents, not their paths)."""
        if self._user is None:
            return {"accuracy": self.dataset, "samples": self.samples, "v": 1}
        u = self._user
        return {"accuracy": "onnx+npz", "model_sha256": u["model_sha256"],
                "data_sha256": u["data_sha256"], "samples": self.samples,
                "calib": u["calibration"], "v": 2}

    def _load(self):
        """``(model, calib, x, y, float accuracy, batch or None, calibration label)``."""
        if self._data is None:
            if self._user is not None:
                u = self._user
                k = len(u["x"]) if self.samples is None else self.samples
                x, y, fp = u["x"][:k], u["y"][:k], u["float_pred"][:k]
                self._data = (u["model"], u["calib"], x, y, float(np.mean(fp == y)),
                              u["batch"], u["calibration"])
                return self._data
            from ..compiler.models import DIGITS_ONNX, load_digits_split

            xtr, _ytr, xte, yte = load_digits_split()
            if self.samples is not None:
                xte, yte = xte[:self.samples], yte[:self.samples]
            import onnxruntime as ort

            sess = ort.InferenceSession(str(DIGITS_ONNX), providers=["CPUExecutionProvider"])
            fl = sess.run(None, {sess.get_inputs()[0].name: xte})[0]
            self._data = (str(DIGITS_ONNX), xtr, xte, yte, float(np.mean(fl.argmax(1) == yte)),
                          None, "digits train (1297)")
        return self._data

    def measure(self, cfg: VTAConfig) -> dict:
        """One measurement for ``cfg`` (a failure is recorded, never raised).

        Returns:
            ``{"accuracy": float in [0, 1], "float_accuracy", "samples": int, "widths":
            "i16w16a32", "exact": bool (every VTA step equals the integer reference),
            "vta_steps", "cpu_steps": [names of integer steps placed on the CPU],
            "dataset": "digits" or "model.onnx:data.npz", "calibration": what it was
            calibrated on, "seconds", "by": "0x..." (fingerprint of the config measured)}``,
            or ``{"error": "<Type>: <first line>", "widths", "by", "dataset"}``.
        """
        from ..compiler.compile import compile_model
        from ..compiler.reference import run_quantized
        from ..runtime.executor import Executor
        from ..runtime.fsim import FsimDevice

        key = accuracy_key(cfg)
        base = {"widths": width_label(key), "by": f"0x{cfg.fingerprint:08x}",
                "dataset": self.dataset}
        t0 = time.perf_counter()
        try:
            model, calib, x, y, facc, batch, cname = self._load()
            cm = compile_model(model, calib, cfg, row_bands=False)
            vta = [s for s in cm.steps if s.target == "vta"]
            step = batch or len(x)
            dev = FsimDevice(cfg)
            preds, exact = [], True
            try:
                ex = Executor(cm, dev)
                for i in range(0, len(x), step):
                    xb = x[i:i + step]
                    out = ex.run(xb, keep=True)
                    ref = run_quantized(cm.qgraph, {cm.inputs[0]: xb}, keep_all=True)
                    exact = exact and all(np.array_equal(out[s.outputs[0]], ref[s.outputs[0]])
                                          for s in vta)
                    o = np.asarray(out[cm.outputs[0]])
                    preds.append(o.reshape(len(xb), -1, o.shape[-1])[:, 0].argmax(-1))
            finally:
                close = getattr(dev, "close", None)
                if close is not None:
                    close()
            acc = float(np.mean(np.concatenate(preds) == y))
        except Exception as e:  # noqa: BLE001 - recorded, never a crash of the sweep
            return {**base, "error": f"{type(e).__name__}: {_first_line(e)}"}
        cpu = [s.name for s in cm.steps if s.target == "cpu" and s.op.startswith("q")
               and s.op != "quantize"]
        return {**base, "accuracy": acc, "float_accuracy": facc, "samples": int(len(y)),
                "exact": bool(exact), "vta_steps": len(vta), "cpu_steps": cpu,
                "calibration": cname, "seconds": round(time.perf_counter() - t0, 3)}


def make_accuracy(spec: Any) -> AccuracyEvaluator | None:
    """``None`` / an :class:`AccuracyEvaluator` / a data set name (``"digits"``) or
    ``"MODEL.onnx:DATA.npz"`` -> the evaluator or None.

    Raises:
        DSEError: unknown data set name, or a bad user model / data file.
    """
    if spec is None or isinstance(spec, AccuracyEvaluator):
        return spec
    if isinstance(spec, str):
        return AccuracyEvaluator(spec)
    raise DSEError(f"accuracy must be a data set name ({', '.join(DATASETS)}) or {USER_SPEC}, "
                   f"got {spec!r}")
