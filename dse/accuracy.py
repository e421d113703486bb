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
images) and whether every VTA step equalled the integer reference bit for bit.

Data sets (``--accuracy NAME``): ``digits`` -- the bundled digits CNN
(:data:`~vtaforge.compiler.models.DIGITS_ONNX`), calibrated on its 1297 training images and
measured on its 500 held-out images (:func:`~vtaforge.compiler.models.load_digits_split`,
the split it was trained on).
"""

from __future__ import annotations

import time
from typing import Any, Mapping

import numpy as np

from ..hw.config import VTAConfig
from .result import DSEError

__all__ = ["AccuracyEvaluator", "accuracy_key", "DATASETS", "make_accuracy"]

#: Labelled sets the DSE can measure accuracy on.
DATASETS = ("digits",)


def accuracy_key(cfg: VTAConfig) -> dict:
    """The config fields accuracy depends on: ``INP_WIDTH``, ``WGT_WIDTH``, ``ACC_WIDTH``,
    ``ALU_MUL`` (JSON-ready)."""
    return {"inp": int(cfg.INP_WIDTH), "wgt": int(cfg.WGT_WIDTH), "acc": int(cfg.ACC_WIDTH),
            "alu_mul": bool(cfg.ALU_MUL)}


def width_label(key: Mapping) -> str:
    """``i8w8a32`` style label of an :func:`accuracy_key`."""
    return f"i{key['inp']}w{key['wgt']}a{key['acc']}" + ("+mul" if key["alu_mul"] else "")


class AccuracyEvaluator:
    """Top-1 accuracy of a labelled model compiled for a config, on fsim.

    Args:
        dataset: one of :data:`DATASETS`.
        samples: measure on the first ``samples`` held-out images (default: all 500).

    Raises:
        DSEError: unknown data set, or ``samples`` not a positive int.
    """

    def __init__(self, dataset: str = "digits", samples: int | None = None):
        if dataset not in DATASETS:
            raise DSEError(f"unknown accuracy data set {dataset!r}; allowed: "
                           f"{', '.join(DATASETS)}")
        if samples is not None and (isinstance(samples, bool) or not isinstance(samples, int)
                                    or samples < 1):
            raise DSEError(f"accuracy samples must be a positive int, got {samples!r}")
        self.dataset = dataset
        self.samples = samples
        self._data = None

    @property
    def key(self) -> dict:
        """The cache key part of this evaluator."""
        return {"accuracy": self.dataset, "samples": self.samples, "v": 1}

    def _load(self):
        if self._data is None:
            from ..compiler.models import DIGITS_ONNX, load_digits_split

            xtr, _ytr, xte, yte = load_digits_split()
            if self.samples is not None:
                xte, yte = xte[:self.samples], yte[:self.samples]
            import onnxruntime as ort

            sess = ort.InferenceSession(str(DIGITS_ONNX), providers=["CPUExecutionProvider"])
            fl = sess.run(None, {sess.get_inputs()[0].name: xte})[0]
            self._data = (str(DIGITS_ONNX), xtr, xte, yte, float(np.mean(fl.argmax(1) == yte)))
        return self._data

    def measure(self, cfg: VTAConfig) -> dict:
        """One measurement for ``cfg`` (a failure is recorded, never raised).

        Returns:
            ``{"accuracy": float in [0, 1], "float_accuracy", "samples": int, "widths":
            "i16w16a32", "exact": bool (every VTA step equals the integer reference),
            "vta_steps", "cpu_steps": [names of integer steps placed on the CPU],
            "seconds", "by": "0x..." (fingerprint of the config measured)}``, or
            ``{"error": "<Type>: <first line>", "widths", "by"}``.
        """
        from ..compiler.compile import compile_model
        from ..compiler.reference import run_quantized
        from ..runtime.executor import Executor
        from ..runtime.fsim import FsimDevice

        key = accuracy_key(cfg)
        base = {"widths": width_label(key), "by": f"0x{cfg.fingerprint:08x}"}
        t0 = time.perf_counter()
        try:
            model, xtr, xte, yte, facc = self._load()
            cm = compile_model(model, xtr, cfg, row_bands=False)
            dev = FsimDevice(cfg)
            try:
                out = Executor(cm, dev).run(xte, keep=True)
            finally:
                close = getattr(dev, "close", None)
                if close is not None:
                    close()
            ref = run_quantized(cm.qgraph, {cm.inputs[0]: xte}, keep_all=True)
            vta = [s for s in cm.steps if s.target == "vta"]
            exact = all(np.array_equal(out[s.outputs[0]], ref[s.outputs[0]]) for s in vta)
            acc = float(np.mean(out[cm.outputs[0]].argmax(1) == yte))
        except Exception as e:  # noqa: BLE001 - recorded, never a crash of the sweep
            msg = str(e).strip().splitlines()[0] if str(e).strip() else ""
            return {**base, "error": f"{type(e).__name__}: {msg}"}
        cpu = [s.name for s in cm.steps if s.target == "cpu" and s.op.startswith("q")
               and s.op != "quantize"]
        return {**base, "accuracy": acc, "float_accuracy": facc, "samples": int(len(yte)),
                "exact": bool(exact), "vta_steps": len(vta), "cpu_steps": cpu,
                "seconds": round(time.perf_counter() - t0, 3)}


def make_accuracy(spec: Any) -> AccuracyEvaluator | None:
    """``None`` / an :class:`AccuracyEvaluator` / a data set name (``"digits"``) -> the
    evaluator or None.

    Raises:
        DSEError: unknown data set name.
    """
    if spec is None or isinstance(spec, AccuracyEvaluator):
        return spec
    if isinstance(spec, str):
        return AccuracyEvaluator(spec)
    raise DSEError(f"accuracy must be a data set name ({', '.join(DATASETS)}), got {spec!r}")
