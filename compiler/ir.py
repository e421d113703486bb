"""Graph IR: a typed dataflow graph with symbolic dimensions.

Structure
=========
A :class:`Graph` holds

* ``inputs`` / ``outputs``: ordered lists of tensor names;
* ``nodes``: a list of :class:`Node` in topological order (the validator
  checks it), each with a unique ``name``, an ``op`` (one of :data:`OPS`),
  ``inputs`` / ``outputs`` (tensor names) and ``attrs`` (plain Python values:
  ``int``, ``float``, ``str``, ``None`` or tuples of them);
* ``types``: ``name -> TensorType`` for every tensor (graph inputs, constants,
  node outputs);
* ``constants``: ``name -> numpy.ndarray`` (weights, biases; never graph
  inputs);
* ``kind``: ``"float"`` (the frontend's output) or ``"quantized"`` (the
  quantizer's output);
* ``meta``: free-form ``dict`` (e.g. ``"scale_hints"`` from QDQ models).

Every tensor is written once (SSA). A :class:`TensorType` has a ``dtype``
(``float32``, ``int8``, ``int32``, ``int64``), a ``shape`` (a tuple whose
entries are ``int`` or a ``str`` naming a symbolic dimension such as the batch
``"N"``) and, for quantized tensors, ``exp``: the power-of-two scale exponent,
so that ``real_value = integer_value * 2**exp``. Symbolic dims flow through
type inference (:func:`infer_types`): a conv on ``[N,1,8,8]`` gives
``[N,16,8,8]``; ``flatten`` gives ``[N,128]``. Only leading (batch-like) dims
may be symbolic in a graph; a symbolic spatial dim is a :class:`CompileError` here.
A model declared ``[N,3,H,W]`` is instead compiled once by
:func:`~.dynamic.compile_dynamic` and specialised per concrete input shape (type
inference re-run at that shape), so every graph the back half sees has concrete H, W.

:func:`validate` is run between passes; it checks SSA, topological order,
known ops and required attributes, that each stored type equals the type
inferred from the node's inputs, constants' arrays against their types, and
(for quantized graphs) every integer rule listed below.
:func:`dump` gives a readable text form (one line per node).

Layouts
=======
Activations are NCHW (4-D) or NC (2-D), batch first. Conv weights are OIHW
with ``I = C_in / groups`` (ONNX layout). Dense weights are ``[M, K]``
(out_features, in_features), i.e. ``y = x @ w.T`` (ONNX ``Gemm`` with
``transB=1``). Biases are ``[O]``. The quantized graph keeps these logical
layouts; packing into VTA's blocked layouts is the back half's job.

Float ops (``kind == "float"``)
===============================
``conv2d`` (x, w[, b]) attrs ``kernel=(kh,kw)``, ``strides=(sh,sw)``,
``pads=(top,left,bottom,right)``, ``groups``, ``act`` (``"none"``, ``"relu"``,
``"clip"``), ``act_min``, ``act_max`` (floats or ``None``: the fused
activation); ``dense`` (x[N,K], w[M,K][, b[M]]) with ``act``/``act_min``/``act_max``;
``relu``; ``clip`` (``min``, ``max``, floats or ``None``); ``add`` (two tensors,
numpy broadcasting; ``act`` as above); ``mul`` (by a constant, broadcast); ``max`` /
``min`` (element-wise maximum / minimum of two operands, the second -- a tensor or a
constant -- equal to or broadcast against the first);
``batch_norm`` (x, scale, bias, mean, var; ``epsilon``); ``max_pool`` /
``avg_pool`` (``kernel``, ``strides``, ``pads``; avg also
``count_include_pad``); ``global_avg_pool``; ``flatten`` (``axis``);
``reshape`` (``shape``: the ONNX target with 0 / -1 entries); ``transpose``
(``perm``); ``concat`` (``axis``); ``upsample`` (``scales=(sh, sw)``, integers:
nearest-neighbour repeat of each pixel); ``pad`` (``pads=(top,left,bottom,right)``, zeros);
``softmax`` (``axis``); ``fake_quant``
(a QDQ pair: ``scale``, ``zero_point``, ``qmin``, ``qmax``; computes
``(clip(round_half_even(x/scale)+zp, qmin, qmax) - zp) * scale``).

Quantized-graph format (``kind == "quantized"``) -- the back half's input
=========================================================================
All activations between ``quantize`` and ``dequantize`` are ``int8`` with an
``exp``; weights are ``int8`` constants with an ``exp``; biases are ``int32``
constants at ``exp = exp_in + exp_w``.  A graph quantized for 16-bit cores
(``QuantConfig.act_bits`` / ``wgt_bits`` 16) has ``int16`` activations (``quantize``
carries ``dtype="int16"``; every integer op's output has its activation input's dtype)
and ``int16`` (or ``int8``) weights; clips and the max-pool padding then use the int16
range (:func:`qrange`), and the sentences below that say int8 read int16.  A graph
quantized for int4 activations (``act_bits`` 4, ``LOG_INP_WIDTH`` 2 cores) types its
activations with the logical dtype ``int4`` (range ``[-8, 7]``), held in numpy int8 arrays
(:func:`storage_dtype`; numpy has no int4); its weights are int8 constants (int4 weights:
values in ``[-8, 7]``). Integer rules, exact (``>>`` is an
arithmetic shift right, i.e. floor division by a power of two;
``clip(v, lo, hi) = min(max(v, lo), hi)``; all intermediate values fit int32
-- the quantizer checks the worst case and refuses otherwise):

``requantize(acc)`` (shared by every op with ``shift``/``round``/``mult``/``clip_lo``/``clip_hi``)::

    acc = acc * mult                  # mult == 1 unless the ALU_MUL hook is used
    if shift > 0:  acc = (acc + round) >> shift    # round == 1 << (shift - 1)
    if shift < 0:  acc = acc << -shift             # round == 0
    out = clip(acc, clip_lo, clip_hi)              # int8 range; [0, 127] after ReLU

``mult`` (1..32767, a 16-bit ALU immediate) is 1 for power-of-two scales.  A
requantize by a real ratio ``r = scale_acc / scale_out`` that is not a power
of two (QDQ models, ``QuantConfig.exact_multiply``) has ``mult * 2**-shift ~ r``
(``|mult - r * 2**shift| <= 0.5``; ``shift >= 0``); the quantizer proves
``|acc| * mult + round < 2**31`` for the worst-case ``|acc|`` or, failing that,
that the exact pre-clip of :class:`MultPlan` bounds it, so VTA's 32-bit
wrapping ALU MUL and this int64 rule agree.  Such a node needs ``ALU_MUL`` on
VTA (else CPU).  Tensors with a non-power-of-two scale carry
``TensorType.scale`` (``real = int * scale``; ``exp`` is then its nearest
power-of-two exponent, kept for bookkeeping); nodes producing them carry
``scale_out``.  ``quantize`` with a ``scale`` attribute computes
``floor(x * 2.0**-log2(scale) + 0.5)``; ``dequantize`` ``q * 2.0**log2(scale)``
(``TensorType.scale_exp``).  ``qadd`` operands must have power-of-two scales.

``round`` is stored (the validator checks ``round == 1 << (shift-1)`` for
``shift > 0``, else 0): adding it before the floor shift rounds to nearest,
ties toward +infinity. ``clip_lo``/``clip_hi`` are within [-128, 127] and carry
any fused ReLU (``lo = 0``) or Clip (``lo = max(-128, ceil(min/2**exp_out))``,
``hi = min(127, floor(max/2**exp_out))``).

Node kinds (inputs; attributes; semantics):

``quantize`` (x float32) -> int8; ``exp``:
    ``q = clip(floor(x * 2**-exp + 0.5), -128, 127)``. CPU.
``dequantize`` (q int8/int32) -> float32: ``x = q * 2**exp_in``. CPU.
``qconv2d`` (x int8 NCHW, w int8 OIHW, bias int32 [O]) -> int8 NCHW;
    ``kernel``, ``strides``, ``pads=(top,left,bottom,right)`` (zero padding,
    i.e. the int8 value 0 = real 0), ``groups`` (1, grouped or depthwise),
    ``shift``, ``round``, ``mult``, ``clip_lo``, ``clip_hi``::

        acc[n,o,y,x] = sum_{c in group(o), i, j} x_pad[n, c, y*sh+i, x*sw+j] * w[o, c', i, j]
        out = requantize(acc + bias[o])

    with ``shift = exp_out - (exp_in + exp_w)``.
``qdense`` (x int8 [N,K], w int8 [M,K], bias int32 [M]) -> int8 [N,M]; same
    requantize attributes: ``out = requantize(x @ w.T + bias)``.
Per-channel weights (``qconv2d`` / ``qdense`` with the optional ``w_exps``): output channel
    ``o``'s weights are at their own exp ``w_exps[o]`` (a tuple of O ints; the weight
    constant's ``exp`` is ``max(w_exps)``, its bias's ``exp_in + max(w_exps)``, bookkeeping
    only), ``bias[o]`` is at ``exp_in + w_exps[o]``, and ``shift`` / ``round`` are tuples of
    O ints: channel ``o`` requantizes with ``shift[o] = exp_out - (exp_in + w_exps[o])`` and
    ``round[o] = requant_round(shift[o])``; ``mult`` is 1 and every scale a power of two.
    On VTA the shifts are an ACC constant and the SHR takes it as a tensor operand
    (on ``ALU_REQUANT`` cores aligned to one fused REQ: ``lower_conv.channel_align``).
Per-channel activations (a ``quantize`` with the optional ``channel_exps``, feeding
    depthwise ``qconv2d`` nodes with ``x_exps`` equal to them): input channel ``c`` is
    quantized at its own exp ``channel_exps[c]`` (the tensor's ``exp`` is their maximum).
    Each reader folds ``2**(channel_exps[c] - exp)`` into channel ``c``'s float weights
    before quantizing them per channel, so its integer rule is the per-channel-weight rule
    above at ``exp_in = exp``, exactly (a depthwise channel reads one input channel, and
    the fold is a power of two).  A narrow channel beside a wide one thus keeps its
    precision (PicoDet's depthwise inputs span 700x across channels).  No other node may
    read such a tensor (the validator checks).
``qadd`` (a int8, b int8: same shape, or a constant broadcast against a) -> int8; ``lshift_a``, ``lshift_b``
    (>= 0), ``shift``, ``round``, ``mult``, ``clip_lo``, ``clip_hi`` (operands: power-of-two scales)::

        acc = (a << lshift_a) + (b << lshift_b)    # aligned to exp_c = min(exp_a, exp_b)
        out = requantize(acc)                      # shift = exp_out - exp_c

``qmul`` (x int8, c int8 constant broadcastable to x) -> int8; requantize
    attrs: ``out = requantize(x * c)``; needs ``ALU_MUL`` on VTA, else CPU.
``qmax`` / ``qmin`` (a int8, b int8 tensor or constant: same shape, or broadcast against
    a) -> int8; no attributes: ``out = max(a, b)`` / ``min(a, b)`` element-wise, exact:
    both operands and the output have one exp and scale (the quantizer requantizes an
    operand at another one with ``qrequant`` first, and quantizes a constant at the
    output's; a requantize is monotone, so ``max(r(a), r(b)) == r(max(a, b))``).
``qrequant`` (x int8) -> int8; requantize attrs: ``out = requantize(x)``
    (standalone ReLU/Clip with ``shift = 0``; scale alignment for concat and
    QDQ rescaling).  Optional ``exp_scale = k`` (default 0): the node also multiplies
    the real value by ``2**k`` (a Mul by 0.5 or a Div by 2), so
    ``shift = exp_out - (exp_in + k)``.
``qmax_pool`` (x int8) -> int8; ``kernel``, ``strides``, ``pads``: window
    maximum, padded positions hold -128 (never chosen over a real value, so
    exact). ``exp_out == exp_in``.
``qavg_pool`` (x int8) -> int8; ``kernel``, ``strides``, ``pads`` (zero
    padding, counted), ``divisor`` (= kh*kw), ``shift`` (= log2(divisor) when
    divisor is a power of two, else ``None``), ``round``, ``clip_lo``, ``clip_hi``::

        acc = window sum
        out = clip(floor((2*acc + divisor) / (2*divisor)), clip_lo, clip_hi)

    which equals ``requantize(acc)`` with ``shift = log2(divisor)``,
    ``round = divisor/2`` when divisor is a power of two (VTA, ``mult`` 1 or
    absent).  Otherwise ``mult``, ``shift``, ``round`` hold a fixed-point
    reciprocal (:func:`avg_reciprocal`) and the rule is
    ``clip((acc*mult + round) >> shift, clip_lo, clip_hi)``, which the validator
    checks equals the rounding division for every int8 window sum (zero
    deviation; VTA with ``ALU_MUL``), or are ``None`` (no exact reciprocal:
    CPU). Global average pooling is ``qavg_pool`` with
    ``kernel = (H, W)``. ``exp_out == exp_in``.
``flatten``, ``reshape``, ``transpose``, ``concat``, ``upsample``, ``pad``: layout
    only, int8 in and out, same ``exp`` (concat inputs are aligned to one exp by
    ``qrequant``; ``pad``'s zeros are the real value 0 at any scale).
``softmax`` (float32): after a ``dequantize``; CPU.

Graph inputs are float32 and go through ``quantize``; each graph output is
produced by ``dequantize`` from an int8 tensor named ``<output>_q``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from typing import Any, Callable, Union

import numpy as np

from .errors import CompileError, node_error
from .requant import MULT_MAX, avg_exact, requant_round

__all__ = [
    "Dim", "TensorType", "Node", "Graph", "OPS", "FLOAT_OPS", "QUANT_OPS", "LAYOUT_OPS",
    "REAL_OPS", "infer_types", "validate", "dump", "QINT_DTYPES", "qrange", "qbits",
    "storage_dtype", "channel_shifts",
]

Dim = Union[int, str]
DTYPES = ("float32", "int8", "int32", "int64", "uint8", "int16", "uint16", "uint32", "uint64", "bool",
          "float16", "float64")
#: dtypes the quantized VTA path and the integer rules use; the others only flow through
#: CPU ``onnx`` nodes (shape computations, indices, masks, a QOperator model's uint8 tensors).
CORE_DTYPES = ("float32", "int4", "int8", "int16", "int32", "int64")
#: activation / weight dtypes of a quantized graph (``QuantConfig.act_bits`` / ``wgt_bits``:
#: int8 for the int8 cores, int16 for ``LOG_INP_WIDTH`` / ``LOG_WGT_WIDTH`` 4, the logical
#: ``int4`` for the activations of ``LOG_INP_WIDTH`` 2 cores, held in int8 arrays; a
#: logical dtype of quantized graphs only, not in :data:`DTYPES`, which names numpy / ONNX
#: element types)
QINT_DTYPES = ("int8", "int16", "int4")
_QBITS = {"int4": 4, "int8": 8, "int16": 16}


def qrange(dtype: str) -> tuple[int, int]:
    """``(min, max)`` of a quantized integer dtype: int4 ``(-8, 7)``, int8 ``(-128, 127)``,
    int16 ``(-32768, 32767)``.

    Raises:
        CompileError: ``dtype`` not in :data:`QINT_DTYPES`.
    """
    if dtype not in QINT_DTYPES:
        raise CompileError(f"{dtype!r} is not a quantized activation/weight dtype "
                           f"{QINT_DTYPES}")
    b = _QBITS[dtype]
    return -(1 << (b - 1)), (1 << (b - 1)) - 1


def qbits(dtype: str) -> int:
    """Bits of a quantized integer dtype (``int4`` 4, ``int8`` 8, ``int16`` 16); 0 for any
    other dtype (float, int32 ...)."""
    return _QBITS.get(dtype, 0)


def storage_dtype(dtype: str) -> str:
    """The numpy dtype name that holds values of IR dtype ``dtype``: ``"int8"`` for the
    logical ``"int4"`` (numpy has no 4-bit integer), else ``dtype`` itself."""
    return "int8" if dtype == "int4" else dtype


@dataclass(frozen=True)
class TensorType:
    """Type of a tensor: ``dtype``, ``shape`` (ints or symbolic ``str`` dims), ``exp``.

    ``exp`` is the power-of-two scale exponent of a quantized tensor
    (``real = int * 2**exp``) or ``None`` for float tensors.  ``channel_exps`` (an int8
    activation made by a per-channel ``quantize``, see "Per-channel activations" in the
    module docstring): one exp per channel of axis 1, ``real[:, c] = int[:, c] *
    2**channel_exps[c]``; ``exp`` is then their maximum, the exp its consumers' integer
    rules are written at.
    """

    dtype: str
    shape: tuple[Dim, ...]
    exp: int | None = None
    scale: float | None = None
    channel_exps: tuple[int, ...] | None = None

    def __post_init__(self) -> None:
        if self.dtype not in DTYPES and self.dtype != "int4":
            raise CompileError(f"unknown dtype {self.dtype!r}")
        object.__setattr__(self, "shape", tuple(self.shape))
        if self.channel_exps is not None:
            ce = tuple(int(e) for e in self.channel_exps)
            c = self.shape[1] if len(self.shape) >= 2 else None
            if (self.exp is None or self.scale is not None or not ce or max(ce) != self.exp
                    or (isinstance(c, int) and c != len(ce))):
                raise CompileError(f"channel exps {list(ce)[:8]} need a power-of-two exp equal "
                                   f"to their maximum and one exp per channel of {self.shape}")
            object.__setattr__(self, "channel_exps", ce)
        if self.scale is not None:
            if self.exp is None or not (isinstance(self.scale, float) and self.scale > 0
                                        and math.isfinite(self.scale)):
                raise CompileError(f"scale {self.scale!r} needs a positive float and an exp")
            object.__setattr__(self, "scale", float(self.scale))

    @property
    def real_scale(self) -> float | None:
        """The real scale: ``scale`` when set, else ``2**exp`` (``None`` for float tensors)."""
        if self.scale is not None:
            return self.scale
        return None if self.exp is None else 2.0 ** self.exp

    @property
    def scale_exp(self) -> float | int | None:
        """``exp`` or, for a non-power-of-two ``scale``, the float ``log2(scale)``.

        Every executor computes the float conversions of ``quantize`` / ``dequantize`` as
        ``x * 2.0 ** -scale_exp`` / ``q * 2.0 ** scale_exp`` with this same number, so they
        agree bit for bit.
        """
        return self.exp if self.scale is None else math.log2(self.scale)

    @property
    def rank(self) -> int:
        return len(self.shape)

    def is_concrete(self) -> bool:
        return all(isinstance(d, int) for d in self.shape)

    def __str__(self) -> str:
        dims = ",".join(str(d) for d in self.shape)
        e = f"@2^{self.exp}" if self.exp is not None else ""
        if self.channel_exps is not None:
            e = f"@2^({min(self.channel_exps)}..{self.exp} per channel)"
        if self.scale is not None:
            e = f"@{self.scale:.6g}"
        return f"{self.dtype}[{dims}]{e}"


@dataclass
class Node:
    """One operation: ``name`` (unique), ``op`` (a key of :data:`OPS`), tensor names, attributes."""

    name: str
    op: str
    inputs: list[str]
    outputs: list[str]
    attrs: dict[str, Any] = field(default_factory=dict)

    def copy(self) -> "Node":
        return Node(self.name, self.op, list(self.inputs), list(self.outputs), dict(self.attrs))


@dataclass
class Graph:
    """A typed dataflow graph (see the module docstring)."""

    name: str = "graph"
    inputs: list[str] = field(default_factory=list)
    outputs: list[str] = field(default_factory=list)
    nodes: list[Node] = field(default_factory=list)
    types: dict[str, TensorType] = field(default_factory=dict)
    constants: dict[str, np.ndarray] = field(default_factory=dict)
    kind: str = "float"
    meta: dict[str, Any] = field(default_factory=dict)

    def copy(self) -> "Graph":
        """Copy the structure (constants arrays are shared, treat them as immutable)."""
        return Graph(self.name, list(self.inputs), list(self.outputs), [n.copy() for n in self.nodes],
                     dict(self.types), dict(self.constants), self.kind, dict(self.meta))

    def producers(self) -> dict[str, Node]:
        """``tensor name -> node`` producing it."""
        return {o: n for n in self.nodes for o in n.outputs}

    def consumers(self) -> dict[str, list[Node]]:
        """``tensor name -> nodes`` reading it (graph outputs not included)."""
        out: dict[str, list[Node]] = {}
        for n in self.nodes:
            for i in n.inputs:
                out.setdefault(i, []).append(n)
        return out

    def node(self, name: str) -> Node:
        for n in self.nodes:
            if n.name == name:
                return n
        raise KeyError(name)

    def fresh(self, base: str) -> str:
        """A tensor/node name not used yet, derived from ``base``."""
        used = set(self.types) | {n.name for n in self.nodes}
        if base not in used:
            return base
        i = 1
        while f"{base}_{i}" in used:
            i += 1
        return f"{base}_{i}"

    def add_constant(self, name: str, value: np.ndarray, exp: int | None = None,
                     scale: float | None = None) -> str:
        value = np.asarray(value)
        dt = value.dtype.name if value.dtype.name in DTYPES else None
        if dt is None:
            value = value.astype(np.float32)
            dt = "float32"
        self.constants[name] = value
        self.types[name] = TensorType(dt, value.shape, exp, scale)
        return name

    def __str__(self) -> str:
        return dump(self)


# ---------------------------------------------------------------------------
# Type inference
# ---------------------------------------------------------------------------

def _err(node: Node, reason: str) -> CompileError:
    return node_error(node.name, node.op, reason)


def _spatial(node: Node, t: TensorType) -> tuple[int, int]:
    if t.rank != 4:
        raise _err(node, f"expects a 4-D NCHW input, got {t}")
    h, w = t.shape[2], t.shape[3]
    if not isinstance(h, int) or not isinstance(w, int):
        raise _err(node, f"symbolic spatial dims are not supported, got {t}")
    return h, w


def _window_out(node: Node, h: int, w: int, kernel, strides, pads) -> tuple[int, int]:
    kh, kw = kernel
    sh, sw = strides
    pt, pl, pb, pr = pads
    if min(kh, kw, sh, sw) < 1 or min(pads) < 0:
        raise _err(node, f"bad kernel {kernel} / strides {strides} / pads {pads}")
    ho = (h + pt + pb - kh) // sh + 1
    wo = (w + pl + pr - kw) // sw + 1
    if h + pt + pb < kh or w + pl + pr < kw or ho < 1 or wo < 1:
        e = _err(node, f"kernel {kh}x{kw} larger than the padded input {h + pt + pb}x{w + pl + pr}")
        e.infeasible = True     # no implementation can take this shape (no CPU fallback)
        raise e
    return ho, wo


def _same_dim(a: Dim, b: Dim) -> bool:
    return a == b


def _broadcast(node: Node, a: tuple, b: tuple) -> tuple:
    out = []
    for i in range(max(len(a), len(b))):
        da = a[len(a) - 1 - i] if i < len(a) else 1
        db = b[len(b) - 1 - i] if i < len(b) else 1
        if da == db or db == 1:
            out.append(da)
        elif da == 1:
            out.append(db)
        else:
            raise _err(node, f"shapes {list(a)} and {list(b)} do not broadcast")
    return tuple(reversed(out))


def _prod(dims) -> int:
    p = 1
    for d in dims:
        p *= d
    return p


def _infer_conv(node, ts, quant):
    x, w = ts[0], ts[1]
    h, wd = _spatial(node, x)
    if w.rank != 4:
        raise _err(node, f"weight must be 4-D OIHW, got {w}")
    o, ig, kh, kw = w.shape
    g = node.attrs.get("groups", 1)
    c = x.shape[1]
    if tuple(node.attrs["kernel"]) != (kh, kw):
        raise _err(node, f"kernel attribute {tuple(node.attrs['kernel'])} != weight kernel {(kh, kw)}")
    if not isinstance(c, int) or g < 1 or c % g or o % g or c // g != ig:
        raise _err(node, f"input channels {c} with groups {g} do not match weight {list(w.shape)}")
    if len(ts) > 2 and tuple(ts[2].shape) != (o,):
        raise _err(node, f"bias shape {list(ts[2].shape)} != [{o}]")
    ho, wo = _window_out(node, h, wd, (kh, kw), node.attrs["strides"], node.attrs["pads"])
    shape = (x.shape[0], o, ho, wo)
    if quant:
        _check_q(node, ts, ("int8", "int8", "int32"))
        return [_qout(node, shape, x.dtype)]
    return [TensorType("float32", shape)]


def _qout(node, shape, dtype: str = "int8") -> TensorType:
    """The output type of a requantizing node: the dtype of its activation input (int8, or
    int16 in an int16 graph), ``exp_out``, ``scale_out``."""
    return TensorType(dtype, shape, node.attrs.get("exp_out"), node.attrs.get("scale_out"))


def _infer_dense(node, ts, quant):
    x, w = ts[0], ts[1]
    if x.rank != 2 or w.rank != 2:
        raise _err(node, f"expects x [N,K] and w [M,K], got {x} and {w}")
    if x.shape[1] != w.shape[1]:
        raise _err(node, f"inner dims differ: x {list(x.shape)} vs w {list(w.shape)} (K)")
    if len(ts) > 2 and tuple(ts[2].shape) != (w.shape[0],):
        raise _err(node, f"bias shape {list(ts[2].shape)} != [{w.shape[0]}]")
    shape = (x.shape[0], w.shape[0])
    if quant:
        _check_q(node, ts, ("int8", "int8", "int32"))
        return [_qout(node, shape, x.dtype)]
    return [TensorType("float32", shape)]


def _check_q(node, ts, dtypes):
    """Quantized operands: ``"int8"`` in ``dtypes`` stands for any of :data:`QINT_DTYPES`
    (an int16 graph has int16 activations and int8 or int16 weights)."""
    for t, d in zip(ts, dtypes):
        if t.dtype != d and not (d == "int8" and t.dtype in QINT_DTYPES):
            raise _err(node, f"operand dtype {t.dtype}, expected {d}")
        if t.exp is None:
            raise _err(node, f"quantized operand {t} has no scale exponent")


def _infer_pool(node, ts, quant):
    x = ts[0]
    h, w = _spatial(node, x)
    ho, wo = _window_out(node, h, w, node.attrs["kernel"], node.attrs["strides"], node.attrs["pads"])
    if quant:
        _check_q(node, ts, ("int8",))
    return [TensorType(x.dtype, (x.shape[0], x.shape[1], ho, wo), x.exp, x.scale)]


def _infer_gap(node, ts, quant):
    x = ts[0]
    _spatial(node, x)
    return [TensorType(x.dtype, (x.shape[0], x.shape[1], 1, 1), x.exp, x.scale)]


def _infer_same(node, ts, quant):
    return [ts[0]]


def _infer_add(node, ts, quant):
    a, b = ts
    if quant:
        _check_q(node, ts, ("int8", "int8"))
        if a.shape != b.shape and _broadcast(node, a.shape, b.shape) != tuple(a.shape):
            raise _err(node, f"quantized add needs b equal to or broadcast against a, got {a} and {b}")
        return [_qout(node, a.shape, a.dtype)]
    return [TensorType("float32", _broadcast(node, a.shape, b.shape))]


def _infer_mul(node, ts, quant):
    a, b = ts
    shape = _broadcast(node, a.shape, b.shape)
    if shape != a.shape:
        raise _err(node, f"the operand {list(b.shape)} may not enlarge the tensor {list(a.shape)}")
    if quant:
        _check_q(node, ts, ("int8", "int8"))
        return [_qout(node, a.shape, a.dtype)]
    return [TensorType("float32", a.shape)]


def _infer_max(node, ts, quant):
    """``max`` / ``min`` / ``qmax`` / ``qmin``: ``b`` equal to or broadcast against ``a`` (never larger); a
    quantized output keeps ``a``'s dtype, exp and scale (the operands share them)."""
    a, b = ts
    if _broadcast(node, a.shape, b.shape) != tuple(a.shape):
        raise _err(node, f"the operand {list(b.shape)} may not enlarge the tensor {list(a.shape)}")
    if quant:
        _check_q(node, ts, ("int8", "int8"))
        return [TensorType(a.dtype, a.shape, a.exp, a.scale)]
    return [TensorType("float32", a.shape)]


def _infer_bn(node, ts, quant):
    x = ts[0]
    if x.rank < 2:
        raise _err(node, f"expects [N,C,...], got {x}")
    for t in ts[1:]:
        if tuple(t.shape) != (x.shape[1],):
            raise _err(node, f"parameter shape {list(t.shape)} != [{x.shape[1]}]")
    return [x]


def _infer_flatten(node, ts, quant):
    x = ts[0]
    axis = node.attrs.get("axis", 1)
    if axis < 0:
        axis += x.rank
    if not 0 <= axis <= x.rank:
        raise _err(node, f"axis {node.attrs.get('axis')} out of range for {x}")
    lead, tail = x.shape[:axis], x.shape[axis:]
    if any(isinstance(d, str) for d in tail) or sum(isinstance(d, str) for d in lead) > 1 or (
            any(isinstance(d, str) for d in lead) and len(lead) > 1):
        raise _err(node, f"cannot flatten symbolic dims of {x} at axis {axis}")
    d0 = lead[0] if len(lead) == 1 else _prod(lead)
    return [TensorType(x.dtype, (d0, _prod(tail)), x.exp, x.scale)]


def _infer_reshape(node, ts, quant):
    x = ts[0]
    target = list(node.attrs["shape"])
    out: list[Dim] = []
    for i, d in enumerate(target):
        if d == 0:
            if i >= x.rank:
                raise _err(node, f"target {target}: 0 at position {i} but input {x} has rank {x.rank}")
            out.append(x.shape[i])
        else:
            out.append(d)
    if sum(1 for d in out if d == -1) > 1:
        raise _err(node, f"target {target} has more than one -1")
    sym_in = [d for d in x.shape if isinstance(d, str)]
    sym_out = [d for d in out if isinstance(d, str)]
    known_in = _prod(d for d in x.shape if isinstance(d, int))
    known_out = _prod(d for d in out if isinstance(d, int) and d != -1)
    if -1 in out:
        k = out.index(-1)
        rest_sym = [d for d in sym_in if d not in sym_out]
        if not rest_sym:
            if sorted(sym_in) != sorted(sym_out) or known_out == 0 or known_in % known_out:
                raise _err(node, f"cannot reshape {x} to {target}")
            out[k] = known_in // known_out
        elif len(rest_sym) == 1 and known_in == known_out:
            out[k] = rest_sym[0]
        else:
            raise _err(node, f"cannot reshape {x} to {target} (symbolic dims)")
    else:
        if sorted(sym_in) != sorted(sym_out) or known_in != known_out:
            raise _err(node, f"cannot reshape {x} ({known_in} known elements) to {target}")
    if any(isinstance(d, int) and d < 1 for d in out):
        raise _err(node, f"bad target shape {target}")
    return [TensorType(x.dtype, tuple(out), x.exp, x.scale)]


def _infer_transpose(node, ts, quant):
    x = ts[0]
    perm = tuple(node.attrs["perm"])
    if sorted(perm) != list(range(x.rank)):
        raise _err(node, f"perm {list(perm)} is not a permutation of {x.rank} axes")
    return [TensorType(x.dtype, tuple(x.shape[p] for p in perm), x.exp, x.scale)]


def _infer_concat(node, ts, quant):
    axis = node.attrs["axis"]
    r = ts[0].rank
    if axis < 0:
        axis += r
    if not 0 <= axis < r:
        raise _err(node, f"axis {node.attrs['axis']} out of range for rank {r}")
    total = 0
    for t in ts:
        if t.rank != r or any(t.shape[i] != ts[0].shape[i] for i in range(r) if i != axis):
            raise _err(node, f"inputs {[str(t) for t in ts]} differ outside axis {axis}")
        if not isinstance(t.shape[axis], int):
            raise _err(node, f"cannot concatenate along symbolic dim of {t}")
        total += t.shape[axis]
        if t.dtype != ts[0].dtype or t.exp != ts[0].exp or t.scale != ts[0].scale:
            raise _err(node, f"inputs differ in dtype/scale: {[str(t) for t in ts]}")
    shape = list(ts[0].shape)
    shape[axis] = total
    return [TensorType(ts[0].dtype, tuple(shape), ts[0].exp, ts[0].scale)]


def _infer_upsample(node, ts, quant):
    x = ts[0]
    h, w = _spatial(node, x)
    sh, sw = node.attrs["scales"]
    if not (isinstance(sh, int) and isinstance(sw, int) and sh >= 1 and sw >= 1):
        raise _err(node, f"scales {node.attrs['scales']} must be integers >= 1")
    return [TensorType(x.dtype, (x.shape[0], x.shape[1], h * sh, w * sw), x.exp, x.scale)]


def _infer_pad(node, ts, quant):
    x = ts[0]
    h, w = _spatial(node, x)
    pt, pl, pb, pr = node.attrs["pads"]
    if min(pt, pl, pb, pr) < 0:
        raise _err(node, f"pads {node.attrs['pads']} must be >= 0")
    return [TensorType(x.dtype, (x.shape[0], x.shape[1], h + pt + pb, w + pl + pr), x.exp, x.scale)]


def _infer_softmax(node, ts, quant):
    if ts[0].dtype != "float32":
        raise _err(node, f"softmax runs on float32, got {ts[0]}")
    if not 0 <= node.attrs["axis"] < max(ts[0].rank, 1):
        raise _err(node, f"axis {node.attrs['axis']} out of range for rank {ts[0].rank}")
    return [ts[0]]


def _infer_quantize(node, ts, quant):
    if ts[0].dtype != "float32":
        raise _err(node, f"quantize expects float32, got {ts[0]}")
    dt = node.attrs.get("dtype", "int8")
    if dt not in QINT_DTYPES:
        raise _err(node, f"quantize dtype {dt!r} is not one of {QINT_DTYPES}")
    ce = node.attrs.get("channel_exps")
    if ce is not None and (dt != "int8" or ts[0].rank != 4):
        raise _err(node, f"per-channel quantize needs an int8 NCHW output, got {dt}{list(ts[0].shape)}")
    return [TensorType(dt, ts[0].shape, node.attrs["exp"], node.attrs.get("scale"),
                       None if ce is None else tuple(ce))]


def _infer_dequantize(node, ts, quant):
    if ts[0].dtype not in QINT_DTYPES + ("int32",) or ts[0].exp is None:
        raise _err(node, f"dequantize expects a quantized int tensor, got {ts[0]}")
    return [TensorType("float32", ts[0].shape)]


def _infer_requant(node, ts, quant):
    _check_q(node, ts, ("int8",))
    return [_qout(node, ts[0].shape, ts[0].dtype)]


def _infer_onnx(node, ts, quant):
    """An ONNX node kept as is (CPU: numpy kernel or onnxruntime).  The frontend inferred
    its output types with ONNX shape inference and stored them with the input types it saw
    (``in_types`` / ``out_types``: ``(dtype, shape)`` pairs); the inputs must still have
    those types (the graph around it may not change them)."""
    a = node.attrs
    want = a["in_types"]
    if len(want) != len(ts):
        raise _err(node, f"{a['op_type']}: {len(ts)} inputs, the frontend typed {len(want)}")
    for k, (t, (dt, shp)) in enumerate(zip(ts, want)):
        if t.dtype != dt or tuple(t.shape) != tuple(shp):
            raise _err(node, f"{a['op_type']}: input {k} is {t}, the frontend typed "
                       f"{dt}[{','.join(str(d) for d in shp)}]")
        if dt != "float32" or t.exp is not None:
            if quant and t.exp is not None:
                raise _err(node, f"{a['op_type']}: input {k} is quantized ({t}); ONNX nodes "
                           f"take real values (dequantize first)")
    outs = a["out_types"]
    if len(outs) != len(node.outputs):
        raise _err(node, f"{a['op_type']}: {len(node.outputs)} outputs, typed {len(outs)}")
    return [TensorType(dt, tuple(shp)) for dt, shp in outs]


def channel_shifts(attrs: dict) -> np.ndarray | None:
    """The per-output-channel requantize shifts of a ``qconv2d`` / ``qdense`` with
    per-channel weight exps (``w_exps``): int64 ``[O]``, or None for a per-tensor node
    (``shift`` an int)."""
    s = attrs.get("shift")
    return np.asarray(s, np.int64) if isinstance(s, tuple) else None


def _check_per_channel(node: Node, types: dict[str, TensorType]) -> None:
    """The integer rules of a per-channel ``qconv2d`` / ``qdense`` (module docstring)."""
    a = node.attrs
    x, w, b = (types[i] for i in node.inputs)
    out = types[node.outputs[0]]
    we, s, r = a["w_exps"], a["shift"], a["round"]
    o = w.shape[0]
    if not (isinstance(we, tuple) and isinstance(s, tuple) and isinstance(r, tuple)
            and len(we) == len(s) == len(r) == o
            and all(isinstance(v, int) for v in we + s + r)):
        raise _err(node, f"w_exps, shift and round must be tuples of {o} ints (one per output "
                   f"channel)")
    if a["mult"] != 1 or any(t.scale is not None for t in (x, w, b, out)):
        raise _err(node, "per-channel weight exps need power-of-two scales and mult 1")
    if max(we) != w.exp or b.exp != x.exp + w.exp:
        raise _err(node, f"weight exp {w.exp} / bias exp {b.exp} must be max(w_exps) "
                   f"{max(we)} / exp_in + max(w_exps) {x.exp + max(we)}")
    for k in range(o):
        if s[k] != out.exp - x.exp - we[k] or r[k] != requant_round(s[k]) or abs(s[k]) > 31:
            raise _err(node, f"channel {k}: shift {s[k]} / round {r[k]} != exp_out - exp_in - "
                       f"w_exps = {out.exp - x.exp - we[k]} (within [-31, 31]) and its round")


def _check_requant(node: Node) -> None:
    """The per-tensor requantize attributes: ``round`` matches ``shift``, ``mult`` a 16-bit
    immediate (and 1 with a left shift), ``|shift| <= 31``."""
    a = node.attrs
    s = a["shift"]
    if not isinstance(s, int) or a["round"] != requant_round(s):
        raise _err(node, f"round {a['round']} does not match shift {s}")
    if not isinstance(a["mult"], int) or not 1 <= a["mult"] <= MULT_MAX:
        raise _err(node, f"mult must be an int in [1, {MULT_MAX}] (16-bit ALU immediate), "
                   f"got {a['mult']}")
    if a["mult"] != 1 and s < 0:
        raise _err(node, f"mult {a['mult']} with a left shift {s}: use a larger mult")
    if abs(s) > 31:
        raise _err(node, f"shift {s} outside [-31, 31]")


def _check_linear(node: Node, types: dict[str, TensorType]) -> None:
    """``qconv2d`` / ``qdense``: per-channel weights (:func:`_check_per_channel`), or the
    requantize attributes, ``bias exp == exp_in + exp_w`` (scale ``scale_in * scale_w``)
    and the requantize ratio."""
    if "w_exps" in node.attrs:
        _check_per_channel(node, types)
        return
    _check_requant(node)
    x, w, b = (types[i] for i in node.inputs)
    if b.exp != x.exp + w.exp:
        raise _err(node, f"bias exp {b.exp} != exp_in + exp_w = {x.exp + w.exp}")
    exact = x.scale is None and w.scale is None and b.scale is None
    if not exact and abs(b.real_scale / (x.real_scale * w.real_scale) - 1) > 1e-9:
        raise _err(node, f"bias scale {b.real_scale:.6g} != scale_in * scale_w")
    _check_ratio(node, b, types[node.outputs[0]])


def _check_qadd(node: Node, types: dict[str, TensorType]) -> None:
    """``qadd``: power-of-two operand scales, ``lshift_a`` / ``lshift_b`` align the operand
    exps to the smaller one, the requantize ratio from it."""
    a = node.attrs
    _check_requant(node)
    ea, eb = types[node.inputs[0]].exp, types[node.inputs[1]].exp
    c = min(ea, eb)
    if types[node.inputs[0]].scale is not None or types[node.inputs[1]].scale is not None:
        raise _err(node, "qadd operands need power-of-two scales (align them with qrequant)")
    if (a["lshift_a"], a["lshift_b"]) != (ea - c, eb - c):
        raise _err(node, "lshift_a/lshift_b do not align the operand exps")
    _check_ratio(node, TensorType("int32", (), c), types[node.outputs[0]])


def _check_qrequant(node: Node, types: dict[str, TensorType]) -> None:
    """``qrequant``: ``exp_scale`` an int in ``[-31, 31]``, the requantize ratio from
    ``exp_in + exp_scale``."""
    _check_requant(node)
    x, k = types[node.inputs[0]], node.attrs.get("exp_scale", 0)
    if not isinstance(k, int) or abs(k) > 31:
        raise _err(node, f"exp_scale must be an int in [-31, 31], got {k!r}")
    acc = x if k == 0 else TensorType("int32", (), x.exp + k,
                                      None if x.scale is None else x.scale * 2.0 ** k)
    _check_ratio(node, acc, types[node.outputs[0]])


def _check_qmul(node: Node, types: dict[str, TensorType]) -> None:
    """``qmul``: the requantize ratio from ``scale_x * scale_c``."""
    _check_requant(node)
    x, cc = types[node.inputs[0]], types[node.inputs[1]]
    acc = TensorType("int32", (), x.exp + cc.exp, None if x.scale is None and cc.scale is None
                     else x.real_scale * cc.real_scale)
    _check_ratio(node, acc, types[node.outputs[0]])


def _check_qavg_pool(node: Node, types: dict[str, TensorType]) -> None:
    """``qavg_pool``: a power-of-two divisor's shift and round, or an exact fixed-point
    reciprocal (zero deviation from the rounding division for every int8 window sum), or
    no ``mult`` / ``shift`` (CPU division)."""
    a = node.attrs
    d = a["divisor"]
    p2 = d & (d - 1) == 0
    if p2 and (a["shift"] != d.bit_length() - 1 or a["round"] != d // 2):
        raise _err(node, f"divisor {d} needs shift {d.bit_length() - 1} and round {d // 2}")
    m = a.get("mult")
    if p2 and m not in (None, 1):
        raise _err(node, f"divisor {d} is a power of two: mult must be 1 or absent")
    if not p2 and m is None and a["shift"] is not None:
        raise _err(node, f"divisor {d} is not a power of two: shift must be None without mult")
    if not p2 and m is not None:
        if not (isinstance(m, int) and 1 <= m <= MULT_MAX and isinstance(a["shift"], int)
                and 0 < a["shift"] <= 31 and isinstance(a["round"], int)
                and 0 <= a["round"] < (1 << a["shift"])):
            raise _err(node, f"reciprocal mult {m} / shift {a['shift']} / round "
                       f"{a['round']} out of range")
        acc, want = avg_exact(d)
        if 128 * d * m + a["round"] >= 1 << 31 or not np.array_equal(
                (acc * m + a["round"]) >> a["shift"], want):
            raise _err(node, f"reciprocal (acc*{m} + {a['round']}) >> {a['shift']} is not "
                       f"the rounding division by {d} for every int8 window sum")


def _check_qmax(node: Node, types: dict[str, TensorType]) -> None:
    """``qmax`` / ``qmin``: both operands of one dtype, exp and scale (the quantizer aligns
    them with ``qrequant``), so the element-wise maximum / minimum needs no requantize and
    is exact."""
    a, b = (types[i] for i in node.inputs)
    if (a.dtype, a.exp, a.scale) != (b.dtype, b.exp, b.scale):
        raise _err(node, f"operands {a} and {b} differ in dtype or scale (align them with qrequant)")


def _check_quant_node(node: Node, types: dict[str, TensorType]) -> None:
    """The integer rules of one node of a quantized graph: the clip range every op with a
    clip shares, then the op's own rules (its :class:`OpSpec`'s ``check``)."""
    a = node.attrs
    spec = OPS[node.op]
    if "w_exps" in a and spec.check is not _check_linear:
        raise _err(node, "w_exps (per-channel weight exps) is for qconv2d / qdense only")
    odt = types[node.outputs[0]].dtype if node.outputs[0] in types else "int8"
    qlo, qhi = qrange(odt) if odt in QINT_DTYPES else (-128, 127)
    if "clip_lo" in a and not qlo <= a["clip_lo"] <= a["clip_hi"] <= qhi:
        raise _err(node, f"clip [{a['clip_lo']}, {a['clip_hi']}] outside the {odt} range")
    if spec.check is not None:
        spec.check(node, types)


def _check_ratio(node: Node, acc: TensorType, out: TensorType) -> None:
    """``mult * 2**-shift`` must be the real ratio ``scale_acc / scale_out``: exactly
    (``mult == 1``, ``shift == exp_out - exp_acc``) for power-of-two scales, else to within
    half a unit of ``mult`` (``|mult - ratio * 2**shift| <= 0.5``)."""
    a = node.attrs
    if acc.scale is None and out.scale is None and a["mult"] == 1:
        if a["shift"] != out.exp - acc.exp:
            raise _err(node, f"shift {a['shift']} != exp_out - exp_acc = {out.exp - acc.exp}")
        return
    r = acc.real_scale / out.real_scale
    if abs(a["mult"] - r * 2.0 ** a["shift"]) > 0.5 + 1e-9 * a["mult"]:
        raise _err(node, f"mult {a['mult']} * 2^-{a['shift']} does not approximate the scale "
                   f"ratio {r:.6g} to half a unit of mult")


@dataclass(frozen=True)
class OpSpec:
    """Operator description, the IR facets of an op: ``n_in`` (input count range),
    ``attrs`` (required attributes), ``infer`` (type inference ``(node, input types,
    quantized) -> [output types]``), ``kinds`` (the graph kinds it may appear in) and
    ``check`` (its integer rules in a quantized graph, ``(node, types) -> None`` raising
    :class:`CompileError`; :func:`validate` runs it after the clip range every op shares;
    None: no rules of its own)."""

    n_in: tuple[int, int]
    attrs: tuple[str, ...]
    infer: Callable
    kinds: tuple[str, ...]  # graph kinds it may appear in
    check: Callable | None = None


_REQ = ("shift", "round", "mult", "clip_lo", "clip_hi", "exp_out")
_CONV = ("kernel", "strides", "pads", "groups")
_POOL = ("kernel", "strides", "pads")
F, Q, FQ = ("float",), ("quantized",), ("float", "quantized")

OPS: dict[str, OpSpec] = {
    "conv2d": OpSpec((2, 3), _CONV + ("act",), _infer_conv, F),
    "dense": OpSpec((2, 3), ("act",), _infer_dense, F),
    "relu": OpSpec((1, 1), (), _infer_same, F),
    "clip": OpSpec((1, 1), ("min", "max"), _infer_same, F),
    "add": OpSpec((2, 2), ("act",), _infer_add, F),
    "mul": OpSpec((2, 2), (), _infer_mul, F),
    "max": OpSpec((2, 2), (), _infer_max, F),
    "min": OpSpec((2, 2), (), _infer_max, F),
    "batch_norm": OpSpec((5, 5), ("epsilon",), _infer_bn, F),
    "max_pool": OpSpec((1, 1), _POOL, _infer_pool, F),
    "avg_pool": OpSpec((1, 1), _POOL + ("count_include_pad",), _infer_pool, F),
    "global_avg_pool": OpSpec((1, 1), (), _infer_gap, F),
    "fake_quant": OpSpec((1, 1), ("scale", "zero_point", "qmin", "qmax"), _infer_same, F),
    "flatten": OpSpec((1, 1), ("axis",), _infer_flatten, FQ),
    "reshape": OpSpec((1, 1), ("shape",), _infer_reshape, FQ),
    "transpose": OpSpec((1, 1), ("perm",), _infer_transpose, FQ),
    "upsample": OpSpec((1, 1), ("scales",), _infer_upsample, FQ),
    "pad": OpSpec((1, 1), ("pads",), _infer_pad, FQ),
    "concat": OpSpec((1, 64), ("axis",), _infer_concat, FQ),
    "softmax": OpSpec((1, 1), ("axis",), _infer_softmax, FQ),
    "quantize": OpSpec((1, 1), ("exp",), _infer_quantize, Q),
    "dequantize": OpSpec((1, 1), (), _infer_dequantize, Q),
    "qconv2d": OpSpec((3, 3), _CONV + _REQ, _infer_conv, Q, _check_linear),
    "qdense": OpSpec((3, 3), _REQ, _infer_dense, Q, _check_linear),
    "qadd": OpSpec((2, 2), ("lshift_a", "lshift_b") + _REQ, _infer_add, Q, _check_qadd),
    "qmul": OpSpec((2, 2), _REQ, _infer_mul, Q, _check_qmul),
    "qrequant": OpSpec((1, 1), _REQ, _infer_requant, Q, _check_qrequant),
    "qmax": OpSpec((2, 2), (), _infer_max, Q, _check_qmax),
    "qmin": OpSpec((2, 2), (), _infer_max, Q, _check_qmax),
    "qmax_pool": OpSpec((1, 1), _POOL, _infer_pool, Q),
    "qavg_pool": OpSpec((1, 1), _POOL + ("divisor", "shift", "round", "clip_lo", "clip_hi"),
                        _infer_pool, Q, _check_qavg_pool),
    "onnx": OpSpec((0, 1024), ("op_type", "domain", "opset", "onnx_attrs", "in_types", "out_types",
                               "in_slots", "model"), _infer_onnx, FQ),
}
#: float IR ops that may also appear in a quantized graph: a node the quantizer cannot
#: express in int8 stays float there and runs on the CPU between a dequantize and a quantize.
REAL_OPS = frozenset({"conv2d", "dense", "relu", "clip", "add", "mul", "batch_norm", "max_pool",
                      "avg_pool", "global_avg_pool", "fake_quant"})
for _k in REAL_OPS:
    OPS[_k] = replace(OPS[_k], kinds=FQ)
del _k
FLOAT_OPS = frozenset(k for k, v in OPS.items() if "float" in v.kinds)
QUANT_OPS = frozenset(k for k, v in OPS.items() if "quantized" in v.kinds)
LAYOUT_OPS = frozenset({"flatten", "reshape", "transpose", "concat", "upsample", "pad"})


def _infer_node(graph: Graph, node: Node, types: dict[str, TensorType]) -> list[TensorType]:
    spec = OPS.get(node.op)
    if spec is None:
        raise _err(node, f"unknown IR op {node.op!r}")
    if graph.kind not in spec.kinds:
        raise _err(node, f"op {node.op!r} may not appear in a {graph.kind} graph")
    lo, hi = spec.n_in
    if not lo <= len(node.inputs) <= hi or (len(node.outputs) != 1 and node.op != "onnx") \
            or not node.outputs:
        raise _err(node, f"takes {lo}..{hi} inputs and 1 output, got {len(node.inputs)} and "
                   f"{len(node.outputs)}")
    for a in spec.attrs:
        if a not in node.attrs:
            raise _err(node, f"missing attribute {a!r}")
    ts = []
    for i in node.inputs:
        if i not in types:
            raise _err(node, f"input {i!r} is not defined before use")
        ts.append(types[i])
    if node.op != "onnx" and (graph.kind == "float" or node.op in REAL_OPS):
        for t in ts:
            if t.dtype != "float32":
                raise _err(node, f"float operand {t} is not float32")
    return spec.infer(node, ts, graph.kind == "quantized" and node.op not in REAL_OPS)


def infer_types(graph: Graph) -> Graph:
    """Recompute every node output's type in place from the graph inputs and constants.

    Returns the same graph. Raises :class:`CompileError` naming the node on any
    shape or dtype inconsistency.
    """
    types = {n: graph.types[n] for n in graph.inputs}
    for c, v in graph.constants.items():
        types[c] = graph.types[c]
    for node in graph.nodes:
        for name, t in zip(node.outputs, _infer_node(graph, node, types)):
            types[name] = t
    graph.types = types
    return graph


def validate(graph: Graph) -> Graph:
    """Check every structural and typing invariant; return the graph or raise CompileError.

    Checks: unique node names, SSA (each tensor written once, never a graph
    input or constant), topological order, known ops valid for ``graph.kind``,
    required attributes, constants' arrays agree with their types, every stored
    type equals the inferred type, graph outputs are defined, and for quantized
    graphs the integer rules of the module docstring (round/shift, clip range,
    exponent bookkeeping).
    """
    if graph.kind not in ("float", "quantized"):
        raise CompileError(f"graph '{graph.name}': unknown kind {graph.kind!r}")
    names: set[str] = set()
    written = set(graph.inputs) | set(graph.constants)
    if set(graph.inputs) & set(graph.constants):
        both = sorted(set(graph.inputs) & set(graph.constants))
        raise CompileError(f"graph '{graph.name}': inputs {both} are also constants")
    for c, v in graph.constants.items():
        t = graph.types.get(c)
        if t is None or tuple(v.shape) != t.shape or np.dtype(v.dtype).name != storage_dtype(t.dtype):
            raise CompileError(f"graph '{graph.name}': constant {c!r} array {v.dtype}{list(v.shape)} "
                               f"does not match its type {t}")
    for i in graph.inputs:
        if i not in graph.types:
            raise CompileError(f"graph '{graph.name}': input {i!r} has no type")
    types = {n: graph.types[n] for n in written}
    for node in graph.nodes:
        if node.name in names:
            raise _err(node, "duplicate node name")
        names.add(node.name)
        inferred = _infer_node(graph, node, types)
        for o, t in zip(node.outputs, inferred):
            if o in written:
                raise _err(node, f"tensor {o!r} is written twice")
            written.add(o)
            stored = graph.types.get(o)
            if stored != t:
                raise _err(node, f"stored type {stored} of {o!r} differs from the inferred {t}")
            types[o] = t
        if graph.kind == "quantized":
            _check_quant_node(node, types)
    for o in graph.outputs:
        if o not in written:
            raise CompileError(f"graph '{graph.name}': output {o!r} is never produced")
    if graph.kind == "quantized":
        _check_channel_exps(graph, types)
    return graph


def _check_channel_exps(graph: Graph, types: dict[str, TensorType]) -> None:
    """A per-channel activation (``channel_exps``) is read only by depthwise ``qconv2d``
    nodes that folded the same exps into their weights (``x_exps``) and is no graph
    output: any other reader would take ``exp`` for every channel."""
    for node in graph.nodes:
        for k, i in enumerate(node.inputs):
            ce = types[i].channel_exps if i in types else None
            if ce is None:
                continue
            if not (k == 0 and node.op == "qconv2d"
                    and tuple(node.attrs.get("x_exps", ())) == ce):
                raise _err(node, f"reads per-channel activation {i!r} without its exps "
                                 f"(only a depthwise qconv2d with x_exps may)")
    for o in graph.outputs:
        if types.get(o) is not None and types[o].channel_exps is not None:
            raise CompileError(f"graph '{graph.name}': output {o!r} is a per-channel activation")


def _fmt_attr(v: Any) -> str:
    if isinstance(v, float):
        return f"{v:g}"
    if isinstance(v, (tuple, list)):
        return "(" + ",".join(_fmt_attr(x) for x in v) + ")"
    return str(v)


def dump(graph: Graph) -> str:
    """Readable text form: header, inputs, constants (type only), one line per node, outputs."""
    lines = [f"graph {graph.name} ({graph.kind})"]
    for i in graph.inputs:
        lines.append(f"  input  %{i}: {graph.types[i]}")
    for c in graph.constants:
        lines.append(f"  const  %{c}: {graph.types[c]}")
    for n in graph.nodes:
        outs = ", ".join(f"%{o}: {graph.types.get(o)}" for o in n.outputs)
        attrs = " ".join(f"{k}={_fmt_attr(v)}" for k, v in n.attrs.items())
        ins = ", ".join(f"%{i}" for i in n.inputs)
        lines.append(f"  {outs} = {n.op}({ins}) {attrs}  # {n.name}".rstrip())
    lines.append("  return " + ", ".join(f"%{o}" for o in graph.outputs))
    return "\n".join(lines)
