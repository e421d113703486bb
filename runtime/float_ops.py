"""Host-CPU kernels for ONNX nodes that do not run on VTA: numpy kernels, and onnxruntime for the rest.

The compiler keeps an ONNX node it cannot lower to the accelerator as is and runs it on the
host.  On a board only numpy is installed, so the common ops have numpy kernels here
(:func:`run_numpy`, :data:`NUMPY_OPS`, :func:`numpy_supports`); any other node runs on
onnxruntime's CPU provider when that is installed (:func:`run_onnxruntime`).

The kernels live by op family, each module with its ``KERNELS`` table, which this module
joins: :mod:`.float_elementwise`, :mod:`.float_layout` (layout, shape, indexing),
:mod:`.float_reduce` (reductions, softmax, normalisation), :mod:`.float_window` (conv,
pooling, GEMM), :mod:`.float_resize`, :mod:`.float_quant`; :mod:`.float_common` holds the
errors (:class:`~.float_common.CpuKernelError`, :class:`~.float_common.UnsupportedKernel`),
the dtype tables, :func:`~.float_common.tensor_attr` and the shared helpers.  This module
decides support (:func:`numpy_supports`) and runs a node (:func:`run_numpy`).

Conventions of the numpy kernels:

* ``attrs`` is the node's attribute dict in the JSON form of
  :func:`vtaforge.compiler.onnx_attrs.attrs_to_json` (``INT`` -> int, ``FLOATS`` -> list,
  ``TENSOR`` -> ``{"tensor": {...}}``, see :func:`~.float_common.tensor_attr`); an absent attribute takes the
  ONNX default of that opset.
* ``inputs`` are positional (``None`` or a missing trailing entry for an omitted optional
  input); ``opset`` is the default-domain opset of the model, which selects the operator
  version (e.g. Clip bounds are attributes before opset 11 and inputs from 11).
* Floating-point ops compute in float32 like onnxruntime (float16 inputs are computed in
  float32 and rounded back; float64 stays float64; a few kernels use float64 intermediates
  for accuracy).  Layout and integer ops keep the input dtype.
* Integer ops (``QLinearConv``, ``QLinearMatMul``, ``ConvInteger``, ``MatMulInteger``,
  ``QuantizeLinear``, ``DequantizeLinear``) are bit exact: int32 accumulation (computed in
  float64, exact for any realistic reduction length) and onnxruntime's requantization
  ``saturate(round_half_even(float32(acc) * float32(x_scale * w_scale / y_scale)) + zp)``.
* Every output of the op is returned in ONNX order, optional ones included (MaxPool's
  ``Indices``, Dropout's ``mask``, TopK's ``Indices``, LayerNormalization's ``Mean`` and
  ``InvStdDev``); outputs may be views of the inputs, so do not modify them in place.
* ``Split`` without sizes (no ``split`` attribute/input) needs ``attrs["num_outputs"]``, which
  ``attrs_to_json`` fills in from the node's output count.

Where onnxruntime and the ONNX reference implementation disagree, the kernels follow
onnxruntime: Resize ``align_corners`` divides by ``out - 1`` (not ``scale * in - 1``);
``tf_crop_and_resize`` with scales gives ``floor(in * scale)`` outputs; linear Resize blends in
float32 like onnxruntime's bilinear kernel and truncates integer outputs.  Integer
accumulation is exact; onnxruntime's AVX2 u8 x s8 GEMM saturates byte-pair sums to int16 and
so differs for full-range int8 weights (its quantizer's 7-bit ``reduce_range`` weights agree).

Only numpy and the standard library are imported at module level; onnxruntime is imported
when :func:`run_onnxruntime` first needs it.
"""

from __future__ import annotations

import hashlib
import threading
from collections import OrderedDict
from typing import Callable

import numpy as np

from . import float_elementwise, float_layout, float_quant, float_reduce, float_resize, float_window
from .float_common import _ONNX_TYPE_NAMES, NUMPY_DTYPES, ONNX_DTYPES, CpuKernelError, Kernel, UnsupportedKernel
from .float_quant import _QTYPES

__all__ = ["NUMPY_OPS", "numpy_supports", "run_numpy", "onnxruntime_available", "run_onnxruntime"]


#: ONNX op_types (default domain) -> numpy kernel, from the op families' tables.
_KERNELS: dict[str, Kernel] = {**float_elementwise.KERNELS, **float_layout.KERNELS,
                               **float_reduce.KERNELS, **float_window.KERNELS,
                               **float_resize.KERNELS, **float_quant.KERNELS}

#: ONNX op_types (default domain) with a numpy kernel.
NUMPY_OPS: frozenset[str] = frozenset(_KERNELS)

# ------------------------------------------------------------------ static support checks
def _chk_cast(a, opset):
    to = a.get("to")
    if to is None:
        return "Cast needs attribute 'to'"
    if int(to) not in ONNX_DTYPES:
        return f"Cast to {_ONNX_TYPE_NAMES.get(int(to), f'TensorProto type {to}')} has no numpy kernel"
    return ""


def _chk_resize(a, opset):
    mode = a.get("mode", "nearest")
    if mode not in (("nearest", "linear") if opset < 11 else ("nearest", "linear", "cubic")):
        return f"Resize mode {mode!r} has no numpy kernel"
    ctm = a.get("coordinate_transformation_mode", "half_pixel")
    if opset >= 11 and ctm not in ("half_pixel", "half_pixel_symmetric", "pytorch_half_pixel", "align_corners",
                                   "asymmetric", "tf_half_pixel_for_nn", "tf_crop_and_resize"):
        return f"Resize coordinate_transformation_mode {ctm!r} has no numpy kernel"
    nm = a.get("nearest_mode", "round_prefer_floor")
    if opset >= 11 and nm not in ("round_prefer_floor", "round_prefer_ceil", "floor", "ceil"):
        return f"Resize nearest_mode {nm!r} has no numpy kernel"
    if opset >= 18 and a.get("antialias", 0) and mode != "nearest":
        return f"Resize antialias with mode {mode!r} has no numpy kernel"
    if a.get("keep_aspect_ratio_policy", "stretch") not in ("stretch", "not_larger", "not_smaller"):
        return f"Resize keep_aspect_ratio_policy {a['keep_aspect_ratio_policy']!r} has no numpy kernel"
    return ""


def _chk_upsample(a, opset):
    mode = a.get("mode", "nearest")
    return "" if mode in ("nearest", "linear") else f"Upsample mode {mode!r} has no numpy kernel"


def _chk_pad(a, opset):
    mode = a.get("mode", "constant")
    if mode not in ("constant", "reflect", "edge", "wrap"):
        return f"Pad mode {mode!r} has no numpy kernel"
    return ""


def _chk_auto_pad(a, opset):
    ap = a.get("auto_pad", "NOTSET")
    return "" if ap in ("NOTSET", "VALID", "SAME_UPPER", "SAME_LOWER") else f"auto_pad {ap!r} is not known"


def _chk_quantize(a, opset):
    od = int(a.get("output_dtype", 0)) if opset >= 21 else 0
    if od and od not in _QTYPES:
        return f"QuantizeLinear output_dtype {_ONNX_TYPE_NAMES.get(od, od)} has no numpy kernel"
    return ""


def _chk_dequantize(a, opset):
    od = int(a.get("output_dtype", 0)) if opset >= 23 else 0
    if od and od not in (1, 10, 11):
        return f"DequantizeLinear output_dtype {_ONNX_TYPE_NAMES.get(od, od)} has no numpy kernel"
    return ""


def _chk_stash(a, opset):
    st = int(a.get("stash_type", 1))
    return "" if st in (1, 11) else f"stash_type {_ONNX_TYPE_NAMES.get(st, st)} has no numpy kernel"


def _chk_eyelike(a, opset):
    dt = a.get("dtype")
    return "" if dt is None or int(dt) in ONNX_DTYPES else f"EyeLike dtype {_ONNX_TYPE_NAMES.get(int(dt), dt)}"


def _chk_dropout(a, opset):
    return "Dropout before opset 7 (is_test) has no numpy kernel" if opset < 7 and not a.get("is_test", 0) else ""


def _chk_bn(a, opset):
    if opset < 7 and not a.get("is_test", 0):
        return "BatchNormalization training (is_test=0, opset < 7) has no numpy kernel"
    return ""


def _chk_einsum(a, opset):
    return "" if isinstance(a.get("equation"), str) else "Einsum needs attribute 'equation'"


def _chk_scatter(a, opset):
    red = a.get("reduction", "none")
    return "" if red in ("none", "add", "mul", "max", "min") else f"scatter reduction {red!r} is not known"


_CHECKS: dict[str, Callable[[dict, int], str]] = {
    "Cast": _chk_cast, "Resize": _chk_resize, "Upsample": _chk_upsample, "Pad": _chk_pad,
    "Conv": _chk_auto_pad, "ConvTranspose": _chk_auto_pad, "MaxPool": _chk_auto_pad, "AveragePool": _chk_auto_pad,
    "LpPool": _chk_auto_pad, "ConvInteger": _chk_auto_pad, "QLinearConv": _chk_auto_pad,
    "QuantizeLinear": _chk_quantize, "DequantizeLinear": _chk_dequantize,
    "LayerNormalization": _chk_stash, "RMSNormalization": _chk_stash, "GroupNormalization": _chk_stash,
    "EyeLike": _chk_eyelike, "Dropout": _chk_dropout, "BatchNormalization": _chk_bn, "Einsum": _chk_einsum,
    "ScatterElements": _chk_scatter, "ScatterND": _chk_scatter,
}


def numpy_supports(op_type: str, attrs: dict, opset: int) -> tuple[bool, str]:
    """Whether :func:`run_numpy` can run a node, decided from its op, attributes and opset alone.

    Args:
        op_type: ONNX op type (default domain).
        attrs: the node's attributes in the ``attrs_to_json`` form.
        opset: default-domain opset of the model.
    Returns:
        ``(True, "")`` when there is a numpy kernel for this op and attribute combination, else
        ``(False, reason)`` with a one-line reason, e.g. ``"Resize antialias with mode 'linear' has
        no numpy kernel"``.  A True answer can still meet an input dtype numpy cannot run
        (strings, bfloat16, float8, int4): :func:`run_numpy` then raises :class:`UnsupportedKernel`.
    """
    if op_type not in _KERNELS:
        return False, f"{op_type} has no numpy kernel"
    for name, v in (attrs or {}).items():
        if isinstance(v, dict) and "unsupported" in v:
            return False, f"{op_type} attribute {name!r} of type {v['unsupported']} has no numpy form"
    chk = _CHECKS.get(op_type)
    why = chk(attrs or {}, int(opset)) if chk else ""
    return (not why), why


def _one_line(e: BaseException) -> str:
    s = str(e).strip().splitlines()
    return (s[0] if s else type(e).__name__)[:300]


def run_numpy(op_type: str, attrs: dict, inputs: list, opset: int) -> list[np.ndarray]:
    """Run one ONNX node (default domain) with numpy.

    Args:
        op_type: ONNX op type, one of :data:`NUMPY_OPS`.
        attrs: the node's attributes in the JSON form of ``compiler.onnx_attrs.attrs_to_json``;
            absent attributes take the ONNX defaults of ``opset``.
        inputs: positional input arrays (any shape, the dtypes the op allows), ``None`` (or a
            missing trailing entry) for an omitted optional input.
        opset: default-domain opset of the model; selects the operator version.
    Returns:
        every output of the op, in ONNX order (optional outputs included), as numpy arrays of the
        ONNX output dtypes (float outputs keep the float input dtype; Shape/Size/ArgMax/indices are
        int64; comparisons are bool; integer ops keep their integer dtypes).  Outputs may be views of
        the inputs.
    Raises:
        UnsupportedKernel: :func:`numpy_supports` is False for this node, or an input dtype has no
            numpy kernel (strings, bfloat16, float8, int4 ...), or the node needs randomness.
        CpuKernelError: bad inputs or attributes (wrong shapes, out-of-range indices, integer
            division by zero ...); the message is one line.
    """
    ok, why = numpy_supports(op_type, attrs, opset)
    if not ok:
        raise UnsupportedKernel(why)
    ins = []
    for i, v in enumerate(inputs):
        if v is None:
            ins.append(None)
            continue
        arr = np.asarray(v)
        if arr.dtype not in NUMPY_DTYPES:
            raise UnsupportedKernel(f"{op_type} input {i} of dtype {arr.dtype} has no numpy kernel")
        ins.append(arr)
    if not ins or ins[0] is None:
        if op_type not in ("Max", "Min", "Sum", "Mean", "Concat"):
            raise CpuKernelError(f"{op_type} needs input 0")
    try:
        with np.errstate(all="ignore"):
            outs = _KERNELS[op_type](attrs or {}, ins, int(opset))
    except CpuKernelError as e:
        raise type(e)(f"{op_type}: {_one_line(e)}" if not str(e).startswith(op_type) else _one_line(e)) from None
    except (ValueError, IndexError, TypeError, ZeroDivisionError, OverflowError, KeyError, AttributeError) as e:
        raise CpuKernelError(f"{op_type}: {_one_line(e)}") from None
    return [np.asarray(o) for o in outs]


# ============================================================================ onnxruntime
_ORT_MISSING = "needs onnxruntime, which is not installed (pip install onnxruntime)"
_SESSION_CACHE_SIZE = 64
_sessions: OrderedDict[str, object] = OrderedDict()
_sessions_lock = threading.Lock()


def onnxruntime_available() -> bool:
    """True when ``import onnxruntime`` works (imported lazily, never at module import)."""
    try:
        import onnxruntime  # noqa: F401
    except ImportError:
        return False
    return True


def _session(model_bytes: bytes):
    try:
        import onnxruntime as ort
    except ImportError:
        raise CpuKernelError(f"this node {_ORT_MISSING}") from None
    key = hashlib.sha256(model_bytes).hexdigest()
    with _sessions_lock:
        sess = _sessions.get(key)
        if sess is not None:
            _sessions.move_to_end(key)
            return sess
    so = ort.SessionOptions()
    so.log_severity_level = 3
    try:
        sess = ort.InferenceSession(model_bytes, so, providers=["CPUExecutionProvider"])
    except Exception as e:  # noqa: BLE001  (onnxruntime raises its own exception types)
        raise CpuKernelError(f"onnxruntime cannot load the model: {_one_line(e)}") from None
    with _sessions_lock:
        _sessions[key] = sess
        _sessions.move_to_end(key)
        while len(_sessions) > _SESSION_CACHE_SIZE:
            _sessions.popitem(last=False)
    return sess


def run_onnxruntime(model_bytes: bytes, inputs: list) -> list[np.ndarray]:
    """Run a serialized ONNX model on onnxruntime's CPU provider.

    Args:
        model_bytes: a serialized ``ModelProto`` (a node or sub-graph wrapped as a model).
        inputs: arrays bound positionally to the graph inputs (initializers are not inputs);
            ``None`` entries are dropped only when there are more entries than graph inputs
            (an omitted optional input the model does not declare).
    Returns:
        all graph outputs, in graph order, as numpy arrays.
    Raises:
        CpuKernelError: onnxruntime is not installed ("... needs onnxruntime, which is not
            installed (pip install onnxruntime)"), cannot load the model, gets the wrong number
            of inputs, or fails while running (one-line message).

    Sessions are cached by the SHA-256 of ``model_bytes`` (least recently used, 64 entries).
    """
    sess = _session(bytes(model_bytes))
    names = [i.name for i in sess.get_inputs()]
    arrs = list(inputs)
    if len(arrs) > len(names):
        arrs = [v for v in arrs if v is not None]
    if len(arrs) != len(names) or any(v is None for v in arrs):
        raise CpuKernelError(f"onnxruntime model has {len(names)} inputs, got "
                             f"{sum(v is not None for v in inputs)} arrays for {len(inputs)} positions")
    try:
        outs = sess.run(None, {n: np.asarray(v) for n, v in zip(names, arrs)})
    except Exception as e:  # noqa: BLE001
        raise CpuKernelError(f"onnxruntime failed: {_one_line(e)}") from None
    return [np.asarray(o) for o in outs]
