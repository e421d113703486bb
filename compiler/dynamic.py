"""Symbolic spatial dims: compile once, specialise per concrete input shape (Relax / Nimble).

A model declared ``[N, 3, H, W]`` (ONNX ``dim_param``, or an unnamed / ``-1`` / ``?``
dim) is compiled once by :func:`compile_dynamic` into a :class:`DynamicModel`:

- the ONNX model is loaded (parsed) once;
- calibration runs once: the float graph is evaluated on the calibration data, which may
  come at one or several sizes (one array per size), and one ``exp`` is chosen per tensor.
  Exps are per tensor and do not depend on the spatial size; with several sizes the exp
  of a tensor is the largest one any size asked for (for the ``max`` statistic this is
  exactly the exp of the maximum over all sizes, ``exp_for_range`` being monotonic).

Per concrete input shape, :meth:`DynamicModel.specialise` re-runs what depends on the
shape, with no data: the frontend's type inference at the concrete input shape (the
ONNX import, which also folds exporters' ``Shape -> Gather -> Reshape`` chains and types
CPU ONNX nodes with ONNX shape inference), the float passes, the quantizer's rewrite with
the frozen exps (shape-dependent attributes such as a global average pool's window
``H x W`` and its exact reciprocal are recomputed here), partitioning (an op may move
between VTA and CPU with the shape, e.g. a pool window with no exact 16-bit reciprocal),
and lowering, whose tiling is chosen for that shape.  The result is an ordinary static
:class:`~vtaforge.runtime.artifact.CompiledModel` (its ``qgraph`` is the specialised
quantized graph, the integer reference's input), so padding and stride edge cases (odd
sizes, sizes that are not a multiple of a stride) are exactly those of a static compile.

The runtime side, :class:`~vtaforge.runtime.shapes.ShapeRunner`, keeps the specialised
models and one executor per shape in a bounded LRU cache on one device; this module
never runs anything on a device.

Errors: a shape the model cannot take (too small for a kernel, wrong rank or a fixed dim
that differs) raises :class:`~.errors.CompileError` with one line naming the shape.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field, replace

import numpy as np

from ..hw.config import VTAConfig, load_config
from ..runtime.artifact import CompiledModel
from .compile import (_check_calib_dict, _error_feeds, lower_graph, quantize_placed,
                      with_agreement_target)
from .errors import CompileError
from .onnx_frontend import _load, declared_input_shapes, import_onnx
from .options import LowerOptions
from .passes import optimize
from .quantize import DEFAULT_MIN_LAYER_COSINE, QuantConfig, calibrate

__all__ = ["DynamicModel", "compile_dynamic", "declared_input_shapes"]


def _fmt(dims) -> str:
    return "x".join("?" if d is None else str(d) for d in dims)


@dataclass
class DynamicModel:
    """A model compiled once for every input size; :meth:`specialise` gives the static
    :class:`CompiledModel` of one concrete shape.

    Attributes:
        config: the :class:`VTAConfig`.
        name: model name (specialised models are named ``NAME@CxHxW``).
        inputs: graph input names, in order.
        input_dims: ``{input: dims}``, the declared shapes: ``int`` for a fixed dim,
            ``None`` for a symbolic one (dim 0 is the batch).
        exps: ``float tensor name -> exp`` chosen by calibration (shape-independent).
        calib_shapes: the input shapes (batch excluded) calibration ran at.
        calib_seconds: wall seconds of import + calibration (the one-time cost).
        quant_config: the :class:`QuantConfig` used.
        fallback: forwarded to :func:`~.compile.lower_graph`.
        options: the lowering's :class:`~.options.LowerOptions`, forwarded to
            :func:`~.compile.lower_graph` at every shape.
    """

    config: VTAConfig
    name: str
    inputs: list
    input_dims: dict
    exps: dict = field(repr=False)
    calib_shapes: list
    calib_seconds: float
    quant_config: QuantConfig
    fallback: bool = True
    _proto: object = field(default=None, repr=False)
    options: LowerOptions = field(default_factory=LowerOptions)
    #: the per-layer error fallbacks and bias corrections measured at the first calibration
    #: shape (:func:`~.compile.quantize_placed`'s ``measured``), applied at every shape
    measured: dict | None = field(default=None, repr=False)
    #: per-channel activation exps (``QuantConfig.channel_act_exps``; tensor -> int64
    #: [C]), the coarsest over the calibration shapes, applied at every shape
    channel_exps: dict = field(default_factory=dict, repr=False)
    #: per-channel mean squares (tensor -> float64 [C], the first calibration shape's),
    #: which a dense conv's choice of input exps weighs
    channel_ms: dict = field(default_factory=dict, repr=False)

    @property
    def symbolic(self) -> bool:
        """True when some non-batch input dim is symbolic."""
        return any(d is None for dims in self.input_dims.values() for d in dims[1:])

    def shape_key(self, feeds) -> tuple:
        """The cache key of ``feeds`` (``ndarray`` or ``{input: ndarray}``): per input, in
        order, its shape without dim 0 (the batch stays symbolic inside a specialised
        model).

        Raises:
            CompileError: a missing input, a wrong rank, or a fixed non-batch dim that
                differs from the declaration (one line naming the input and both shapes).
        """
        if not isinstance(feeds, dict):
            if len(self.inputs) != 1:
                raise CompileError(f"model has {len(self.inputs)} inputs: pass a dict")
            feeds = {self.inputs[0]: feeds}
        key = []
        for name in self.inputs:
            if name not in feeds:
                raise CompileError(f"missing input {name!r}")
            shape = tuple(int(s) for s in np.shape(feeds[name]))
            key.append(self.check_shape(name, shape))
        return tuple(key)

    def check_shape(self, name: str, shape: tuple) -> tuple:
        """Check a concrete input shape (batch first) against the declaration; returns the
        shape without dim 0.  Raises CompileError (rank, fixed dims, non-positive dims)."""
        want = self.input_dims[name]
        if len(shape) != len(want) or any(w is not None and w != s for w, s in
                                          zip(want[1:], shape[1:])):
            raise CompileError(f"input {name!r} has shape {list(shape)}, the model takes "
                               f"{_fmt(want)}")
        if any(s < 1 for s in shape[1:]):
            raise CompileError(f"input {name!r} has shape {list(shape)}: dims must be >= 1")
        return tuple(shape[1:])

    def specialise(self, key: tuple) -> CompiledModel:
        """The static compiled model for the input shapes ``key`` (see :meth:`shape_key`:
        per input, its shape without the batch dim).

        Runs the frontend's type inference at those shapes, the float passes, the
        quantizer's rewrite with the frozen :attr:`exps`, partitioning and lowering; no
        calibration, no device.  The returned model's ``qgraph`` / ``partition`` attributes
        are set as :func:`~.compile.compile_model` sets them, and ``meta["input_shape"]``
        holds ``key``.

        Raises:
            CompileError: the model cannot take that shape (a kernel larger than its
                padded input, a reshape that does not fit ...), prefixed with the shape.
        """
        key = tuple(tuple(int(d) for d in k) for k in key)
        if len(key) != len(self.inputs):
            raise CompileError(f"shape key has {len(key)} entries, the model {len(self.inputs)} "
                               f"inputs")
        shapes = {}
        for name, dims in zip(self.inputs, key):
            want = self.input_dims[name]
            self.check_shape(name, (1,) + dims if want[0] is None else (want[0],) + dims)
            shapes[name] = (None,) + dims
        what = ", ".join(f"{n} [{_fmt((self.input_dims[n][0],) + k)}]"
                         for n, k in zip(self.inputs, key))
        tag = "+".join(_fmt(k) for k in key)
        try:
            fg = optimize(import_onnx(self._proto, name=f"{self.name}@{tag}",
                                      input_shapes=shapes))
            if self.channel_exps:
                fg.meta["channel_exps"] = dict(self.channel_exps)
                fg.meta["channel_ms"] = dict(self.channel_ms)
            missing = [t for t in _float_tensors(fg) if t not in self.exps]
            if missing:
                raise CompileError(f"tensor(s) {missing[:4]} did not exist at the calibration "
                                   f"shape(s); calibrate at this size too")
            q, part = quantize_placed(fg, self.exps, self.quant_config, self.config,
                                      measured=self.measured)
            cm = lower_graph(q, part, fallback=self.fallback, name=f"{self.name}@{tag}",
                             options=self.options)
        except CompileError as e:
            raise CompileError(f"input shape {what}: {e}", node=e.node, op_type=e.op_type,
                               reason=e.reason) from None
        cm.qgraph = q
        cm.partition = part
        cm.meta["input_shape"] = key
        return cm


def _float_tensors(fg) -> list[str]:
    """The float tensors whose exp the quantizer reads: graph inputs and float node outputs."""
    out = [i for i in fg.inputs if fg.types[i].dtype == "float32"]
    for n in fg.nodes:
        out += [o for o in n.outputs if fg.types[o].dtype == "float32"]
    return out


def _calib_groups(inputs: list, calib, label) -> tuple[list[dict], list[str]]:
    """Calibration data as a list of ``{input: ndarray}``, one per size, and how errors
    name each (``label`` itself for one size given alone, ``label #k`` for a list, or the
    k-th of a list of labels)."""
    many = isinstance(calib, (list, tuple))
    items = calib if many else [calib]
    if isinstance(label, str):
        labels = [f"{label} #{k + 1}" if many else label for k in range(len(items))]
    else:
        labels = list(label)
        if len(labels) != len(items):
            raise ValueError(f"calib_label: {len(labels)} label(s) for {len(items)} "
                             f"calibration set(s)")
    if not items:
        raise CompileError("calibration data is empty (no arrays)")
    groups = []
    for x, lab in zip(items, labels):
        if isinstance(x, np.ndarray):
            if len(inputs) != 1:
                raise CompileError(f"{lab} is one array; the model has {len(inputs)} inputs "
                                   f"{inputs}: pass {{input name: ndarray}} (an .npz)")
            x = {inputs[0]: x}
        if not isinstance(x, dict):
            raise CompileError(f"{lab} must be an ndarray or a dict, not "
                               f"{type(x).__name__}")
        groups.append(x)
    return groups, labels


def compile_dynamic(model, calib_data, config=None, *,
                    quant_config: QuantConfig | None = None, fallback: bool = True,
                    calib_label: str | list[str] = "calibration data",
                    options: LowerOptions | None = None,
                    agreement_target: float | None = None) -> DynamicModel:
    """Compile an ONNX model whose input dims may be symbolic (``[N, 3, H, W]``) once.

    Args:
        model: path, bytes or ``onnx.ModelProto``.
        calib_data: calibration inputs at one size (``ndarray`` or ``{input: ndarray}``,
            float, batch first) or at several (a list of those; each entry one size).
        config: VTAConfig, preset name or JSON path (default ``pynq``).
        quant_config, agreement_target: as for :func:`~.compile.compile_model`.
        fallback: a VTA lowering that fails runs on the CPU instead.
        calib_label: how error messages name the calibration data: one name (a list of
            sizes is then named ``NAME #k``), or a list of names, one per entry of a
            ``calib_data`` list.
        options: the lowering's choices (:class:`~.options.LowerOptions`; default
            ``LowerOptions.for_config(cfg)``), used at every shape.
    Returns:
        A :class:`DynamicModel`; run it with :class:`~vtaforge.runtime.shapes.ShapeRunner`
        (or call :meth:`DynamicModel.specialise` and an ordinary executor).
    Raises:
        CompileError: malformed or unsupported model, bad calibration data (wrong rank,
            a fixed dim that differs, NaN ...), a calibration size the model cannot take.
        ValueError: a list ``calib_label`` whose length differs from ``calib_data``'s.
    """
    t0 = time.perf_counter()
    cfg = load_config(config)
    options = LowerOptions.resolve(options, cfg)
    proto = _load(model)
    if proto is model:          # the caller's ModelProto: keep a copy it cannot change
        proto = type(model)()
        proto.CopyFrom(model)
    dims = declared_input_shapes(proto)
    inputs = list(dims)
    qc = quant_config or QuantConfig(exact_multiply=bool(cfg.ALU_MUL), calibration="mse",
                                     min_layer_cosine=DEFAULT_MIN_LAYER_COSINE, bias_correction=True,
                                     adaptive_floor=True, channel_act_exps=True)
    qc = with_agreement_target(qc, agreement_target)
    name = proto.graph.name or "model"
    exps: dict = {}
    chx: dict = {}      # tensor -> per-channel activation exps (coarsest over the shapes)
    chms: dict = {}     # tensor -> per-channel mean squares (the first shape's)
    shapes = []
    first = None        # (float graph, data, batch) of the first calibration shape
    for data, label in zip(*_calib_groups(inputs, calib_data, calib_label)):
        for i in (i for i in inputs if i in data):
            shp, want = tuple(np.shape(data[i])), dims[i]
            if len(shp) != len(want) or any(w is not None and w != d
                                            for w, d in zip(want[1:], shp[1:])):
                raise CompileError(f"{label} for {i!r} has shape {list(shp)}, expected "
                                   f"{_fmt(want)} (any number of samples first)")
            if any(d < 1 for d in shp[1:]):
                raise CompileError(f"{label} for {i!r} has shape {list(shp)}: dims after "
                                   f"the batch must be >= 1")
        fixed = {i: (None,) + tuple(np.shape(data[i])[1:]) for i in inputs if i in data}
        try:
            fg = optimize(import_onnx(proto, name=name, input_shapes=fixed))
        except CompileError as e:
            what = ", ".join(f"{i} [{_fmt(s)}]" for i, s in fixed.items())
            raise CompileError(f"{label}: input shape {what}: {e}") from None
        n = _check_calib_dict(fg, data, label)
        b0 = fg.types[inputs[0]].shape[0] if fg.types[inputs[0]].shape else None
        qk = qc
        if n is None:       # an input without samples (a scalar): one run on the data as given
            qk = replace(qc, batch_size=1 << 62)
        elif isinstance(b0, int):
            m = (n // b0) * b0
            if m == 0:
                raise CompileError(f"{label} has {n} sample(s); the model's batch is {b0}")
            data = {i: v[:m] for i, v in data.items()}
            qk = replace(qc, batch_size=b0)
        for t, e in calibrate(fg, data, qk).items():
            exps[t] = max(e, exps.get(t, e))
        for t, ce in fg.meta.get("channel_exps", {}).items():
            chx[t] = np.maximum(chx[t], ce) if t in chx and len(chx[t]) == len(ce) else ce
        for t, ms in fg.meta.get("channel_ms", {}).items():
            chms.setdefault(t, ms)
        shapes.append(tuple(tuple(np.shape(data[i])[1:]) for i in inputs))
        if first is None:
            first = (fg, data, b0)
    measured = None
    if first is not None and (qc.min_layer_cosine > 0 or qc.bias_correction):
        fg, data, b0 = first
        # per-channel exps never finer than any shape's (a channel's exp <= the tensor's)
        chx = {t: np.minimum(ce, exps[t]) for t, ce in chx.items() if t in exps}
        if chx:
            fg.meta["channel_exps"] = chx
            fg.meta["channel_ms"] = chms
        feeds = _error_feeds(fg, data, b0 if isinstance(b0, int) else None, False)
        q, _ = quantize_placed(fg, exps, qc, cfg, feeds=feeds)
        measured = q.meta.get("measured")
    return DynamicModel(cfg, name, inputs, dims, exps, shapes, time.perf_counter() - t0, qc,
                        fallback, proto, measured=measured,
                        channel_exps={t: np.minimum(ce, exps[t]) for t, ce in chx.items()
                                      if t in exps},
                        channel_ms=chms, options=options)
