"""Post-training int8 (or int16, or int4-activation) quantization with power-of-two scales.

:func:`quantize` turns a float graph (after :func:`~.passes.optimize`) into a
quantized graph (format: :mod:`.ir` docstring) using calibration data.

Scheme (exact integer rules in :mod:`.ir` and ``docs/compiler.md``):

* every scale is a power of two, ``real = int * 2**exp``, so requantization is
  ``(acc + bias + round) >> shift`` then a clip (ALU ADD, SHR by an
  immediate, MAX, MIN on VTA; no multiply);
* activations: one ``exp`` per tensor, from calibration. For a range ``r``
  (see :class:`QuantConfig.calibration`), ``exp = ceil(log2(r / 127))``: the
  smallest power of two whose int8 grid covers ``r``. Default statistic:
  ``"max"`` (the calibration maximum of ``|x|``); ``compile_model`` uses ``"mse"``, which
  measured better on real pretrained models (``docs/compiler.md``);
* weights: one ``exp`` per tensor, ``exp_w = ceil(log2(max|w| / 127))``,
  ``w_q = clip(round_half_even(w / 2**exp_w), -127, 127)``; or one per output channel of
  an int8 conv/dense (:attr:`QuantConfig.per_channel`, :meth:`_Quantizer.channel_exps`;
  the ``ir`` "Per-channel weights" rule: a shift per channel);
* bias: int32 at ``exp_in + exp_w``, ``b_q = round_half_even(b / 2**(exp_in+exp_w))``,
  added in the accumulator;
* a fused ReLU / Clip becomes the clip bounds of the requantize step;
* residual add: both operands are shifted left to the smaller exp, added,
  then requantized; max-pool is exact on int8; average pool is a window sum
  then a rounding division by the window size (a shift when it is a power of
  two); flatten / reshape / transpose are layout only; concat aligns its
  inputs to the largest exp with ``qrequant``;
* QDQ models, default (``exact_multiply=False``, cores without ``ALU_MUL``):
  the scale of a QuantizeLinear/DequantizeLinear pair is approximated by the
  nearest power of two in the log domain, ``exp = round(log2(scale))``; the
  relative error ``|2**exp - scale| / scale`` is reported per tensor
  (:attr:`QuantReport.qdq`). Weight scales from a DequantizeLinear of an
  integer constant are treated alike (per-tensor; per-channel hints are
  reported and the max-based exp is used).
* QDQ models with ``exact_multiply=True`` (what ``compile_model`` uses for a
  core with ``ALU_MUL``): QDQ scales are kept exactly (``TensorType.scale``),
  and a requantize whose real ratio ``r = scale_acc / scale_out`` is not a
  power of two gets an integer multiplier: ``r ~ mult * 2**-shift`` with
  ``1 <= mult <= 32767`` (a 16-bit ALU immediate) and the largest ``shift``
  whose products provably fit int32 (:func:`choose_multiplier`, using
  :func:`~.requant.mult_plan`: from the worst-case accumulator bound, or, when that
  is too large, from an exact pre-clip of the accumulator to the range that
  does not saturate).  Every choice and its relative error is reported
  (:attr:`QuantReport.multipliers`).  Non-QDQ tensors keep power-of-two scales.
* average pools whose window ``d`` is not a power of two get an exact
  fixed-point reciprocal (:func:`~.requant.avg_reciprocal`): ``(sum*mult + round)
  >> shift`` equals the rounding division for every int8 window sum.

The quantizer checks that no accumulator can overflow int32 (worst case
``K * 127 * 128 + max|bias|``) and raises :class:`CompileError` otherwise.

Widths (``QuantConfig.act_bits`` / ``wgt_bits``, 8 or 16; ``compile_model`` takes them from
the config's ``INP_WIDTH`` / ``WGT_WIDTH``): with 16-bit activations every activation is
int16 (``exp = smallest e with r / 2**e <= 32767``, clips in ``[-32768, 32767]``, ReLU
``[0, 32767]``); with 16-bit weights ``w_q`` is in ``[-32767, 32767]``, with 4-bit weights
(``LOG_WGT_WIDTH`` 2) in ``[-7, 7]``, one power-of-two grid per tensor (the exponent of
least squared error among the max-range one and the two finer ones, which clip), stored as
int8 constants (the lowering packs them two per byte).  Then the int8
worst case ``K*128*128`` is replaced by the exact one for the constant weights,
``max_o sum_k |w_q[o,k]| * 2**(act_bits-1) + max|b_q|``, and where that exceeds int32 the
weight grid is coarsened (``exp_w + 1``, reported in ``QuantReport.notes``) until it fits:
the result never overflows a 32-bit accumulator, for any input.  Average pools whose window
is not a power of two divide on the CPU at 16 bits (the exact reciprocal is proved for int8
window sums only).  With 4-bit activations (``act_bits`` 4, ``LOG_INP_WIDTH`` 2) every
activation has the logical dtype ``int4`` (numpy int8 arrays holding ``[-8, 7]``; ``exp =
smallest e with r / 2**e <= 7``, clips in ``[-8, 7]``, ReLU ``[0, 7]``), the overflow bound
is the exact one above with ``2**(act_bits-1) = 8``, and the constant operand of an add or
multiply stays an int8 constant (such ops run on the CPU at int4); the exact average-pool
reciprocal covers int4 window sums (a subset of the int8 ones).  QDQ models carry
int8 scales and are quantized at 8 bits only (:class:`CompileError` otherwise).  At
``act_bits = wgt_bits = 8`` every rule above is the int8 one, unchanged.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from ..runtime.cpu_float import REAL_OPS as FLOAT_KERNELS
from ..runtime.cpu_float import conv2d_nchw
from .errors import CompileError, node_error
from .ir import LAYOUT_OPS, REAL_OPS, Graph, Node, TensorType, qrange, storage_dtype, validate
from .requant import MULT_MAX, avg_reciprocal, mult_plan, requant_round
from .passes import optimize as run_optimize
from .reference import _bind, _float_node, _q_node, run_float, run_quantized

__all__ = ["QuantConfig", "QuantReport", "QDQApprox", "MultChoice", "Agreement", "quantize",
           "compare", "calibrate", "exp_for_range", "choose_multiplier", "layer_errors",
           "bias_correct"]

INT32_MAX = (1 << 31) - 1
#: ops ``keep_real`` may keep float: the float ops with a real-valued CPU form, and layout
#: ops (data movement of whatever dtype) between two real-valued nodes
KEEPABLE_OPS = REAL_OPS | LAYOUT_OPS

#: The per-layer error floor of ``compile_model`` / ``compile_dynamic`` (local cosine of an
#: int8 layer's output against float; below it the layer stays a float CPU node).
DEFAULT_MIN_LAYER_COSINE = 0.99
#: Stricter floors tried in turn when a model's outputs agree with float below
#: :data:`OUTPUT_AGREEMENT_TARGET` on the calibration samples (``QuantConfig.adaptive_floor``).
TIGHTER_FLOORS = (0.995, 0.998)
#: The output agreement (mean cosine of the float outputs, :func:`output_agreement`) under
#: which the error floor is tightened.
OUTPUT_AGREEMENT_TARGET = 0.99


@dataclass(frozen=True)
class QuantConfig:
    """Quantizer options.

    Attributes:
        calibration: ``"max"`` (max |x| over the calibration set), ``"percentile"``
            (the ``percentile``-th percentile of |x|) or ``"mse"`` (of the four
            exps ``e_max-3 .. e_max``, the one with the least quantization MSE
            on the calibration values).  Graph outputs always take ``"max"``: a model's
            peaks (logits, box scores) are its answer, so they are never clipped.
        percentile: used by ``"percentile"``.
        batch_size: calibration batch size (images per float run).
        max_samples: per-tensor cap on stored |x| samples for percentile/MSE.
        exact_multiply: keep non-power-of-two QDQ scales exactly and requantize with an
            integer multiplier (``mult``, ALU MUL on VTA); ``False`` approximates every QDQ
            scale by the nearest power of two.  ``compile_model`` sets it from the
            config's ``ALU_MUL`` unless a QuantConfig is given.
        act_bits: activation width, 4 (int4: the logical IR dtype ``int4``, values in
            ``[-8, 7]`` held in int8 arrays), 8 (int8) or 16 (int16); ``compile_model``
            uses the config's ``INP_WIDTH``.
        wgt_bits: conv/dense weight width, 4, 8 or 16; ``compile_model`` uses ``WGT_WIDTH``.
            int4 weights are int8 constants with values in ``[-7, 7]`` (numpy has no int4;
            the lowering packs them two per byte).
        per_channel: per-output-channel power-of-two weight exps for int8 conv/dense
            (``ir`` "Per-channel weights"): ``"auto"`` where it at least halves the
            layer's weight quantization MSE (relative to each channel's energy) or the
            model's QDQ weight scales are per-channel, ``"on"`` wherever channels'
            exps differ, ``"off"`` never.  int8 activations and weights with power-of-two
            scales only; other layers stay per-tensor.
        min_layer_cosine: per-layer error fallback (``compile_model``,
            :func:`~.compile.quantize_placed`): an int8 conv/dense/add/mul/pool whose output
            cosine against float, measured on calibration samples with float inputs
            (:func:`layer_errors`), is below this stays a float CPU node; 0 disables.
            ``compile_model``'s default QuantConfig uses :data:`DEFAULT_MIN_LAYER_COSINE`.
        bias_correction: empirical bias correction of int8 convs/denses on calibration
            samples (:func:`bias_correct`; :func:`~.compile.quantize_placed`);
            ``compile_model``'s default QuantConfig turns it on.
        adaptive_floor: with ``min_layer_cosine > 0``, where the model's outputs agree with
            float below :data:`OUTPUT_AGREEMENT_TARGET` on the calibration samples, try the
            stricter floors :data:`TIGHTER_FLOORS` in turn and keep each that raises the
            agreement by at least 0.005 (:func:`~.compile.quantize_placed`); a model whose
            outputs already agree keeps every layer the plain floor keeps on VTA.
            ``compile_model``'s default QuantConfig turns it on.
    Raises:
        CompileError: ``act_bits`` not 4, 8 or 16, ``wgt_bits`` not 4, 8 or 16,
            ``per_channel`` not one of auto / on / off.
    """

    calibration: str = "max"
    percentile: float = 99.99
    batch_size: int = 256
    max_samples: int = 200_000
    exact_multiply: bool = False
    act_bits: int = 8
    wgt_bits: int = 8
    per_channel: str = "auto"
    min_layer_cosine: float = 0.0
    bias_correction: bool = False
    adaptive_floor: bool = False

    def __post_init__(self) -> None:
        if self.per_channel not in ("auto", "on", "off"):
            raise CompileError(f"QuantConfig.per_channel = {self.per_channel!r}: use 'auto', "
                               f"'on' or 'off'")
        for k, ok in (("act_bits", (4, 8, 16)), ("wgt_bits", (4, 8, 16))):
            v = getattr(self, k)
            if isinstance(v, bool) or v not in ok:
                names = [f"{b} (int{b})" for b in ok]
                names = ", ".join(names[:-1]) + " and " + names[-1]
                raise CompileError(f"QuantConfig.{k} = {v!r}: only {names} are supported")

    @property
    def qmax(self) -> int:
        """Largest activation value: 7 (int4), 127 (int8) or 32767 (int16)."""
        return (1 << (self.act_bits - 1)) - 1


@dataclass(frozen=True)
class QDQApprox:
    """A QDQ scale replaced by a power of two: ``tensor``, ``scale``, ``exp``, ``rel_error``
    ``|2**exp - scale| / scale``, ``clipped`` (weights: the fraction of values beyond the
    int8 range at ``2**exp``, saturated)."""

    tensor: str
    scale: float
    exp: int
    rel_error: float
    clipped: float = 0.0


@dataclass(frozen=True)
class MultChoice:
    """A requantize by a non-power-of-two ratio: ``node``, the real ``ratio``
    (``scale_acc / scale_out``), ``mult``, ``shift`` (``ratio ~ mult * 2**-shift``),
    ``rel_error`` ``|mult*2**-shift - ratio| / ratio``, ``acc_bound`` (worst-case
    ``|acc|``) and ``pre_clip`` (the exact pre-clip bounds the overflow proof needs, or None)."""

    node: str
    ratio: float
    mult: int
    shift: int
    rel_error: float
    acc_bound: int
    pre_clip: tuple[int, int] | None


@dataclass
class QuantReport:
    """What the quantizer chose.

    Attributes:
        exps: ``tensor name -> exp`` for every int8/int32 tensor of the quantized graph.
        shifts: ``node name -> shift`` for every requantizing node.
        qdq: QDQ scales approximated by powers of two.
        multipliers: requantizes by a non-power-of-two ratio (``exact_multiply``).
        notes: free-text remarks (e.g. per-channel hints ignored).
        fallbacks: ``node name -> reason`` for float nodes kept float (CPU), because the
            quantizer cannot express them in int8; their inputs are dequantized and their
            outputs quantized again with calibrated scales.
    """

    exps: dict[str, int] = field(default_factory=dict)
    shifts: dict[str, int] = field(default_factory=dict)
    qdq: list[QDQApprox] = field(default_factory=list)
    multipliers: list[MultChoice] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    fallbacks: dict[str, str] = field(default_factory=dict)

    def __str__(self) -> str:
        lines = ["quantization report"]
        for n, s in self.shifts.items():
            lines.append(f"  {n}: shift {s}")
        for q in self.qdq:
            clip = f", {q.clipped:.2%} of weights clipped" if q.clipped else ""
            lines.append(f"  QDQ {q.tensor}: scale {q.scale:.6g} -> 2^{q.exp} "
                         f"(relative error {q.rel_error:.2%}{clip})")
        for m in self.multipliers:
            clip = f", pre-clip {list(m.pre_clip)}" if m.pre_clip else ""
            lines.append(f"  {m.node}: ratio {m.ratio:.6g} -> {m.mult} * 2^-{m.shift} "
                         f"(relative error {m.rel_error:.2e}, |acc| <= {m.acc_bound}{clip})")
        lines.extend(f"  note: {n}" for n in self.notes)
        lines.extend(f"  float on CPU: {k}: {v}" for k, v in self.fallbacks.items())
        return "\n".join(lines)


def exp_for_range(r: float, qmax: int = 127) -> int:
    """Smallest ``e`` with ``r / 2**e <= qmax`` (``qmax`` 7 for int4, 127 for int8, 32767
    for int16; ``-3`` for ``r == 0`` at int4, ``-7`` at int8, ``-15`` at int16)."""
    if not r > 0 or not math.isfinite(r):
        return -7 if qmax == 127 else -(int(qmax).bit_length())
    q = float(qmax)
    e = math.ceil(math.log2(r / q))
    while r / 2.0 ** e > q:
        e += 1
    while r / 2.0 ** (e - 1) <= q:
        e -= 1
    return e


def _p2(s: float) -> bool:
    return s > 0 and math.log2(s).is_integer()


def choose_multiplier(ratio: float, acc_bound: int, lo: int = -128, hi: int = 127
                      ) -> tuple[int, int, float, tuple[int, int] | None]:
    """Integer multiplier for a requantize by ``ratio`` (> 0, not a power of two).

    Picks the largest ``shift`` (<= 31) with ``mult = round(ratio * 2**shift)`` in
    ``[1, 32767]`` for which :func:`~.requant.mult_plan` proves that
    ``acc * mult + 2**(shift-1)`` fits int32 for ``|acc| <= acc_bound`` (directly, or after
    an exact pre-clip).  Returns ``(mult, shift, rel_error, pre_clip)``.

    Raises:
        CompileError: no such pair (ratio below ``2**-31``, or 32767 times it overflows).
    """
    for k in range(31, -1, -1):
        m = int(round(ratio * 2.0 ** k))
        if m > MULT_MAX:
            continue
        if m < 1:
            break
        plan = mult_plan(m, k, requant_round(k), lo, hi, acc_bound, 32)
        if plan is None:
            continue
        return m, k, abs(m * 2.0 ** -k - ratio) / ratio, plan.clip
    raise CompileError(f"no 16-bit multiplier for the requantize ratio {ratio:.6g} with "
                       f"|acc| <= {acc_bound}")


def _feeds_batches(graph: Graph, data, batch: int):
    if isinstance(data, np.ndarray):
        if len(graph.inputs) != 1:
            raise CompileError(f"graph has {len(graph.inputs)} inputs: pass calibration data as a dict")
        data = {graph.inputs[0]: data}
    if batch >= 1 << 62:        # one calibration run on the data as given (static-shape models)
        yield data
        return
    n = len(next(iter(data.values())))
    for s in range(0, n, batch):
        yield {k: v[s:s + batch] for k, v in data.items()}


def calibrate(graph: Graph, data, config: QuantConfig = QuantConfig()) -> dict[str, int]:
    """Run the float graph on ``data`` and choose an exp for every float tensor.

    Args:
        graph: optimized float graph.
        data: ``ndarray`` (single-input graphs) or ``{input name: ndarray}``, batch first.
    Returns:
        ``tensor name -> exp`` for graph inputs and node outputs.
    """
    maxabs: dict[str, float] = {}
    samples: dict[str, list[np.ndarray]] = {}
    rng = np.random.default_rng(0)
    for feeds in _feeds_batches(graph, data, config.batch_size):
        env = run_float(graph, feeds, keep_all=True)
        for name, v in env.items():
            if name in graph.constants:
                continue
            if v.dtype.kind != "f":
                continue        # indices, shapes, masks: never quantized
            a = np.abs(v.astype(np.float64)).ravel()
            a = a[np.isfinite(a)]
            maxabs[name] = max(maxabs.get(name, 0.0), float(a.max()) if a.size else 0.0)
            if config.calibration != "max":
                k = min(a.size, max(1, config.max_samples // 8))
                samples.setdefault(name, []).append(a if a.size <= k else rng.choice(a, k, replace=False))
    exps = {}
    qm = config.qmax
    outputs = set(graph.outputs)
    for name, m in maxabs.items():
        e = exp_for_range(m, qm)
        if name in outputs:
            pass    # a model output keeps its peaks (logits, box scores): never clipped
        elif config.calibration == "percentile":
            e = exp_for_range(float(np.percentile(np.concatenate(samples[name]), config.percentile)), qm)
        elif config.calibration == "mse":
            # errors in units of the max-range grid's step 2**e (the same argmin, and no
            # overflow for a float64 model's huge values)
            a = np.concatenate(samples[name]) / 2.0 ** e
            best = None
            for cand in range(e - 3, e + 1):
                st = 2.0 ** (cand - e)
                q = np.clip(np.floor(a / st + 0.5), -qm - 1, qm) * st
                err = float(np.mean((q - a) ** 2))
                if best is None or err < best[0]:
                    best = (err, cand)
            e = best[1]
        elif config.calibration != "max":
            raise CompileError(f"unknown calibration statistic {config.calibration!r}")
        exps[name] = e
    return exps


def _act_bounds(node: Node, exp_out: int, scale: float | None = None, qmax: int = 127
                ) -> tuple[int, int]:
    a = node.attrs
    sc = 2.0 ** exp_out if scale is None else scale
    act = a.get("act", "none")
    qmin = -qmax - 1
    if act == "relu":
        return 0, qmax
    if act == "clip":
        lo, hi = qmin, qmax
        if a.get("act_min") is not None:
            lo = max(lo, math.ceil(a["act_min"] / sc))
        if a.get("act_max") is not None:
            hi = min(hi, math.floor(a["act_max"] / sc))
        lo, hi = min(lo, qmax), max(hi, qmin)
        if lo > hi:
            raise node_error(node.name, node.op, f"clip [{a.get('act_min')}, {a.get('act_max')}] "
                             f"is empty at scale 2^{exp_out}")
        return lo, hi
    return qmin, qmax


class _Quantizer:
    def __init__(self, fg: Graph, exps: dict[str, int], config: QuantConfig,
                 keep_real: frozenset = frozenset()):
        self.fg = fg
        self.keep_real = keep_real      # float node names kept real-valued (CPU-placed)
        self.exps = dict(exps)
        self.cfg = config
        self.q = Graph(name=fg.name, kind="quantized",
                       meta={"notes": list(fg.meta.get("notes", []))})
        self.rep = QuantReport()
        self.qname: dict[str, str] = {}   # float tensor -> int8 tensor
        self.fname: dict[str, str] = {}   # float tensor -> float tensor in q graph
        self.hints = fg.meta.get("scale_hints", {})
        self.scales: dict[str, float] = {}   # float tensor -> exact non-power-of-two scale
        self.adt = {4: "int4", 8: "int8", 16: "int16"}[config.act_bits]   # activation dtype
        # dtype and largest value of an add / multiply constant: int4 graphs keep int8 ones
        self.cdt, self.cmax = ("int8", 127) if self.adt == "int4" else (self.adt, config.qmax)
        self.qhi = config.qmax
        self.qlo = -self.qhi - 1
        self.half = self.qhi + 1                                  # 2**(act_bits-1)
        self.wdt = "int16" if config.wgt_bits == 16 else "int8"    # int4: int8 storage
        self.wmax = (1 << (config.wgt_bits - 1)) - 1
        if any(n.op == "fake_quant" for n in fg.nodes):
            if self.adt != "int8":
                raise CompileError(f"a QDQ model carries int8 scales: quantize it with "
                                   f"act_bits 8, not {config.act_bits}")
            if config.wgt_bits != 8:
                raise CompileError(f"a QDQ model carries int8 weight scales: quantize it "
                                   f"with wgt_bits 8, not {config.wgt_bits}")

    def otype(self, out: str, shape) -> TensorType:
        """int8 (int16) type of the quantized value of float tensor ``out``."""
        return TensorType(self.adt, shape, self.exps[out], self.scales.get(out))

    def rscale(self, qt: str) -> float:
        return self.q.types[qt].real_scale

    def requant_for(self, node: Node, ratio: float, acc_bound: int, out: str, lo=None, hi=None
                    ) -> dict:
        """Requantize attributes for ``ratio = scale_acc / scale_out`` (float tensor ``out``)."""
        eo, so = self.exps[out], self.scales.get(out)
        e = math.log2(ratio)
        if e.is_integer():
            attrs = self._requant_attrs(node, -int(e), eo, lo, hi)
        else:
            m, k, rel, clip = choose_multiplier(ratio, acc_bound, self.qlo if lo is None else lo,
                                                self.qhi if hi is None else hi)
            self.rep.multipliers.append(MultChoice(node.name, ratio, m, k, rel, acc_bound, clip))
            attrs = self._requant_attrs(node, k, eo, lo, hi, mult=m)
        if so is not None:
            attrs["scale_out"] = so
        return attrs

    def to_p2(self, node: Node, qt: str) -> str:
        """A power-of-two-scaled version of int8 tensor ``qt`` (itself if it already is)."""
        t = self.q.types[qt]
        if t.scale is None:
            return qt
        e = math.ceil(math.log2(t.scale))
        m, k, rel, clip = choose_multiplier(t.scale / 2.0 ** e, 128)
        self.rep.multipliers.append(MultChoice(f"{node.name}_p2", t.scale / 2.0 ** e, m, k, rel,
                                               128, clip))
        self.rep.notes.append(f"'{qt}' (scale {t.scale:.6g}) rescaled to 2^{e} for "
                              f"'{node.name}' ({node.op} needs power-of-two operand scales)")
        out = self.q.fresh(f"{qt}_p2")
        self.add(self.q.fresh(f"{node.name}_p2"), "qrequant", [qt], out,
                 self._requant_attrs(node, k, e, mult=m), TensorType("int8", t.shape, e))
        return out

    # -- helpers ---------------------------------------------------------------
    def add(self, name, op, inputs, out, attrs, t: TensorType):
        name = self.q.fresh(name) if name in {n.name for n in self.q.nodes} else name
        self.q.nodes.append(Node(name, op, inputs, [out], attrs))
        self.q.types[out] = t
        if t.exp is not None:
            self.rep.exps[out] = t.exp
        if "shift" in attrs and attrs["shift"] is not None:
            self.rep.shifts[name] = attrs["shift"]
        return out

    def int_name(self, t: str) -> str:
        return self.q.fresh(f"{t}_q") if t in self.fg.outputs or t in self.q.types else t

    def qin(self, t: str) -> str:
        if t in self.qname:
            return self.qname[t]
        if t in self.fname:  # a float tensor (graph input or softmax output): quantize it
            e = self.exps[t]
            out = self.q.fresh(f"{t}_q")
            attrs = {"exp": e}
            if t in self.scales:
                attrs["scale"] = self.scales[t]
            if self.adt != "int8":
                attrs["dtype"] = self.adt
            self.add(self.q.fresh(f"{t}_quantize"), "quantize", [self.fname[t]], out, attrs,
                     self.otype(t, self.q.types[self.fname[t]].shape))
            self.qname[t] = out
            return out
        raise CompileError(f"tensor '{t}' has no quantized value")

    def fin(self, t: str) -> str:
        if t in self.fname:
            return self.fname[t]
        qi = self.qname[t]
        out = self.q.fresh(f"{t}_float")
        self.add(self.q.fresh(f"{t}_dequantize"), "dequantize", [qi], out, {},
                 TensorType("float32", self.q.types[qi].shape))
        self.fname[t] = out
        return out

    def weight_exp(self, wname: str, w: np.ndarray) -> tuple[int, float | None]:
        """``(exp, scale)`` of a weight: ``scale`` is the exact QDQ scale (exact mode) or None."""
        e = exp_for_range(float(np.abs(w).max()), self.wmax)
        hint = self.hints.get(wname)
        if hint is None and self.cfg.wgt_bits == 4:
            # 15 levels: a finer grid that clips the few largest weights usually loses less
            # than the max-range grid; take the exponent of least squared error
            wf = w.astype(np.float64)

            def err4(ex):
                q = np.clip(np.rint(wf / 2.0 ** ex), -self.wmax, self.wmax) * 2.0 ** ex
                return float(np.mean((q - wf) ** 2))

            best = min((e, e - 1, e - 2), key=err4)
            if best != e:
                self.rep.notes.append(f"'{wname}': int4 weight grid 2^{best} (least squared "
                                      f"error; max-range grid 2^{e} clips none)")
            e = best
        if hint is not None:
            if isinstance(hint, tuple):
                if self.cfg.per_channel == "off" or self.adt != "int8" or self.cfg.wgt_bits != 8:
                    self.rep.notes.append(f"per-channel QDQ scales of '{wname}' replaced by one "
                                          f"power-of-two exp 2^{e} from max|w|")
            elif self.cfg.exact_multiply and not _p2(hint):
                return round(math.log2(hint)), float(hint)
            else:
                # floor or ceil of log2(scale): the one with the smaller quantization error on
                # the weights (floor keeps resolution but may clip the largest ones)
                lo_e, hi_e = math.floor(math.log2(hint)), math.ceil(math.log2(hint))
                wf = w.astype(np.float64)

                def err(ex):
                    q = np.clip(np.rint(wf / 2.0 ** ex), -127, 127) * 2.0 ** ex
                    return float(np.mean((q - wf) ** 2))

                he = min((lo_e, hi_e), key=err)
                clipped = float(np.mean(np.abs(np.rint(wf / 2.0 ** he)) > 127))
                if not _p2(hint):
                    self.rep.qdq.append(QDQApprox(wname, hint, he, abs(2.0 ** he - hint) / hint, clipped))
                e = he
        return e, None

    def const_int8(self, base: str, v: np.ndarray, e: int, lo: int = -127,
                   scale: float | None = None, dtype: str = "int8") -> str:
        """A quantized constant ``clip(rint(v / scale), lo, max)`` of ``dtype`` (int8: max
        127; int16: max 32767, ``lo`` scaled alike: -127 -> -32767, -128 -> -32768)."""
        sc = 2.0 ** e if scale is None else scale
        hi = 127 if dtype == "int8" else 32767
        if dtype != "int8":
            lo = -hi if lo == -127 else -hi - 1
        q = np.clip(np.rint(v.astype(np.float64) / sc), lo, hi).astype(dtype)
        name = self.q.fresh(base)
        self.q.add_constant(name, q, e, scale)
        return name

    # -- main ----------------------------------------------------------------------
    def run(self) -> Graph:
        fg = self.fg
        for i in fg.inputs:
            self.q.inputs.append(i)
            self.q.types[i] = fg.types[i]
            self.fname[i] = i
        # fake_quant fixes the exp of its input tensor when the producer computes it
        prod = fg.producers()
        cons = fg.consumers()
        for n in fg.nodes:
            if n.op == "fake_quant" and not isinstance(n.attrs["scale"], tuple):
                s, lo_r, hi_r = self._fq_range(n)
                # nearest power of two that does not clip what calibration saw inside the
                # pair's range: floor(log2 s) when the data fits it, else ceil
                cal = self.exps.get(n.outputs[0], math.ceil(math.log2(s)))
                e = min(math.ceil(math.log2(s)), max(math.floor(math.log2(s)), cal))
                exact = self.cfg.exact_multiply and not _p2(s)
                if exact:
                    self.scales[n.outputs[0]] = float(s)
                elif not _p2(s):
                    self.rep.qdq.append(QDQApprox(n.outputs[0], s, e, abs(2.0 ** e - s) / s))
                self.exps[n.outputs[0]] = e
                x = n.inputs[0]
                src = x in prod or (exact and x in fg.inputs)
                if src and len(cons.get(x, [])) == 1 and x not in fg.outputs:
                    self.exps[x] = e
                    if exact:
                        self.scales[x] = float(s)
        from .ops import REGISTRY

        for n in fg.nodes:
            rule = REGISTRY[n.op].quantize if n.op in REGISTRY else None
            if rule == "q_real" or (n.name in self.keep_real and n.op in KEEPABLE_OPS):
                self.q_real(n)
                continue
            state = (len(self.q.nodes), set(self.q.types), dict(self.qname), dict(self.fname),
                     len(self.rep.qdq), len(self.rep.multipliers), len(self.rep.notes),
                     dict(self.rep.exps), dict(self.rep.shifts))
            try:
                if rule is None:
                    self.unsupported(n)
                getattr(self, rule)(n)
            except CompileError as e:
                if n.op not in REAL_OPS:
                    raise
                self._rollback(state)
                self.rep.fallbacks[n.name] = getattr(e, "reason", str(e))
                self.q_real(n)
        for o in fg.outputs:
            if o in fg.inputs:          # passed through unchanged
                self.q.outputs.append(o)
                continue
            if o in self.qname:
                qi = self.qname[o]
                if qi == o:
                    raise CompileError(f"internal: output '{o}' named like its int8 tensor")
                self.add(self.q.fresh(f"{o}_dequantize"), "dequantize", [qi], o, {},
                         TensorType("float32", self.q.types[qi].shape))
            elif self.fname.get(o) != o:
                raise CompileError(f"output '{o}' was not produced")
            self.q.outputs.append(o)
        self.q.meta["quant_report"] = self.rep
        # integer tensor -> the float tensor it holds (for :func:`layer_errors`)
        self.q.meta["float_of"] = {v: k for k, v in self.qname.items()}
        return validate(self.q)

    def unsupported(self, n: Node):
        raise node_error(n.name, n.op, "the quantizer does not support this op")

    def _rollback(self, state) -> None:
        """Undo what a failed ``q_<op>`` added to the quantized graph."""
        nn, types, qname, fname, nq, nm, nnotes, exps, shifts = state
        del self.q.nodes[nn:]
        for t in set(self.q.types) - types:
            del self.q.types[t]
            self.q.constants.pop(t, None)
        self.qname, self.fname = qname, fname
        self.rep.exps, self.rep.shifts = exps, shifts
        del self.rep.qdq[nq:], self.rep.multipliers[nm:], self.rep.notes[nnotes:]

    def real_in(self, t: str) -> str:
        """The real-valued (float or other non-quantized dtype) version of ``t`` in the
        quantized graph: a constant as is, a quantized tensor dequantized."""
        if t in self.fg.constants:
            if t not in self.q.constants:
                self.q.add_constant(t, self.fg.constants[t])
            return t
        return self.fin(t)

    def q_real(self, n: Node):
        """Keep a node real-valued (CPU): an ``onnx`` node, or a float op the quantizer
        cannot express in int8.  Inputs are dequantized, outputs stay real; a later int8
        consumer quantizes them with their calibrated exps (a VTA/CPU boundary)."""
        ins = [self.real_in(i) for i in n.inputs]
        for o in n.outputs:
            self.q.types[o] = self.fg.types[o]
            self.fname[o] = o
        name = self.q.fresh(n.name) if n.name in {m.name for m in self.q.nodes} else n.name
        self.q.nodes.append(Node(name, n.op, ins, list(n.outputs), dict(n.attrs)))

    def _requant_attrs(self, node, shift, exp_out, lo=None, hi=None, mult=1):
        lo = self.qlo if lo is None else lo
        hi = self.qhi if hi is None else hi
        if not 1 <= mult <= MULT_MAX:
            raise node_error(node.name, node.op, f"multiplier {mult} outside [1, {MULT_MAX}]")
        if abs(shift) > 31:
            raise node_error(node.name, node.op, f"requantize shift {shift} outside [-31, 31]")
        return {"shift": int(shift), "round": requant_round(int(shift)), "mult": mult,
                "clip_lo": int(lo), "clip_hi": int(hi), "exp_out": int(exp_out)}

    def _linear(self, n: Node, qop: str):
        fg = self.fg
        x = self.qin(n.inputs[0])
        ex = self.q.types[x].exp
        if n.inputs[1] not in fg.constants:
            raise node_error(n.name, n.op, "weight must be a constant")
        w = fg.constants[n.inputs[1]]
        ew, sw = self.weight_exp(n.inputs[1], w)
        b = fg.constants[n.inputs[2]] if len(n.inputs) > 2 else np.zeros(w.shape[0], np.float32)
        sx = self.q.types[x].scale
        k = int(np.prod(w.shape[1:]))
        out = n.outputs[0]
        pc = None
        if (self.adt == "int8" and self.cfg.wgt_bits == 8 and sx is None and sw is None
                and out not in self.scales):
            pc = self.channel_exps(n.inputs[1], w, ew, self.exps[out] - ex)
        if pc is not None:
            # (a finer bias that may overflow int32 raises: the node stays a float CPU node,
            # which measured better than its per-tensor int8 form on PP-OCR rec and
            # orientation)
            self._linear_per_channel(n, qop, x, w, b, ex, pc)
            return
        if self.adt == "int8" and self.cfg.wgt_bits == 8:
            wq = self.const_int8(f"{n.inputs[1]}_q", w, ew, lo=-127 if sw is None else -128, scale=sw)
            s_acc = None if sx is None and sw is None else self.rscale(x) * self.q.types[wq].real_scale
            bq = np.rint(b.astype(np.float64) / (2.0 ** (ex + ew) if s_acc is None else s_acc))
            worst = k * 128 * 128 + float(np.abs(bq).max(initial=0))
            if worst > INT32_MAX:
                raise node_error(n.name, n.op, f"accumulator may overflow int32 (worst case {worst:.3g})")
        else:
            wq, ew, bq, worst = self._wide_weights(n, w, b, ex, ew)
            s_acc = None
        bname = self.q.fresh(f"{n.name}_bias_q")
        self.q.add_constant(bname, bq.astype(np.int32), ex + ew, s_acc)
        eo = self.exps[out]
        lo, hi = _act_bounds(n, eo, self.scales.get(out), self.qhi)
        attrs = {}
        if qop == "qconv2d":
            attrs = {k2: n.attrs[k2] for k2 in ("kernel", "strides", "pads", "groups")}
        ratio = self.q.types[bname].real_scale / (2.0 ** eo if out not in self.scales
                                                  else self.scales[out])
        attrs.update(self.requant_for(n, ratio, int(worst), out, lo, hi))
        qo = self.int_name(out)
        self.add(n.name, qop, [x, wq, bname], qo, attrs, self.otype(out, fg.types[out].shape))
        self.qname[out] = qo

    def channel_exps(self, wname: str, w: np.ndarray, ew: int, rel_out: int
                     ) -> np.ndarray | None:
        """Per-output-channel weight exps (int64 ``[O]``) of int8 weights ``w`` (``[O, ...]``,
        float) whose per-tensor exp is ``ew``, or None to stay per-tensor
        (:attr:`QuantConfig.per_channel`).  Each channel's exp is
        ``ceil(log2(max|w[o]| / 127))`` (an all-zero channel keeps ``ew``), or, for a QDQ
        model's per-channel scales, the floor or ceil of ``log2(scale[o])`` with the smaller
        error on that channel.  ``rel_out = exp_out - exp_in``: every channel's shift
        ``rel_out - exp[o]`` must lie in [-31, 31], so exps are clamped to
        ``[rel_out - 31, rel_out + 31]`` (and never coarser than ``ew``)."""
        mode = self.cfg.per_channel
        hint = self.hints.get(wname)
        if mode == "off" or w.ndim < 2 or w.shape[0] < 2:
            return None
        wf = w.astype(np.float64).reshape(w.shape[0], -1)
        mx = np.abs(wf).max(axis=1)
        if isinstance(hint, tuple) and len(hint) == w.shape[0]:
            sc = np.maximum(np.asarray(hint, np.float64), 1e-30)
            lo_e, hi_e = np.floor(np.log2(sc)), np.ceil(np.log2(sc))

            def err_rows(ex):
                q = np.clip(np.rint(wf / 2.0 ** ex[:, None]), -127, 127) * 2.0 ** ex[:, None]
                return ((q - wf) ** 2).sum(axis=1)
            pc = np.where(err_rows(lo_e) <= err_rows(hi_e), lo_e, hi_e).astype(np.int64)
        else:
            with np.errstate(divide="ignore"):
                pc = np.where(mx > 0, np.ceil(np.log2(np.maximum(mx, 1e-300) / 127)), ew)
            pc = pc.astype(np.int64)
        pc = np.clip(np.minimum(pc, ew), rel_out - 31, rel_out + 31)
        if np.all(pc == pc[0]):
            return None
        if mode == "auto" and not isinstance(hint, tuple):
            def rel_err(ex):
                q = np.clip(np.rint(wf / 2.0 ** ex[:, None]), -127, 127) * 2.0 ** ex[:, None]
                energy = np.maximum((wf ** 2).sum(axis=1), 1e-300)
                return float(np.mean(((q - wf) ** 2).sum(axis=1) / energy))
            if rel_err(pc) > 0.5 * rel_err(np.full_like(pc, ew)):
                return None
        return pc

    def _linear_per_channel(self, n: Node, qop: str, x: str, w: np.ndarray, b: np.ndarray,
                            ex: int, pc: np.ndarray) -> None:
        """``qconv2d`` / ``qdense`` with per-channel weight exps ``pc`` (ir "Per-channel
        weights"): weights ``clip(rint(w[o] / 2**pc[o]), -127, 127)``, bias at
        ``ex + pc[o]``, one shift per channel."""
        fg = self.fg
        o = w.shape[0]
        shp = (o,) + (1,) * (w.ndim - 1)
        wq = np.clip(np.rint(w.astype(np.float64) / 2.0 ** pc.reshape(shp)), -127, 127)
        bq = np.rint(b.astype(np.float64) / 2.0 ** (ex + pc))
        k = int(np.prod(w.shape[1:]))
        worst = k * 128 * 128 + float(np.abs(bq).max(initial=0))
        if worst > INT32_MAX:
            raise node_error(n.name, n.op, f"accumulator may overflow int32 (worst case {worst:.3g})")
        ew = int(pc.max())
        wname = self.q.fresh(f"{n.inputs[1]}_q")
        self.q.add_constant(wname, wq.astype(np.int8), ew, None)
        bname = self.q.fresh(f"{n.name}_bias_q")
        self.q.add_constant(bname, bq.astype(np.int32), ex + ew, None)
        out = n.outputs[0]
        eo = self.exps[out]
        lo, hi = _act_bounds(n, eo, None, self.qhi)
        shifts = tuple(int(eo - ex - e) for e in pc)
        attrs = {}
        if qop == "qconv2d":
            attrs = {k2: n.attrs[k2] for k2 in ("kernel", "strides", "pads", "groups")}
        attrs.update({"shift": shifts, "round": tuple(requant_round(s) for s in shifts),
                      "mult": 1, "clip_lo": int(lo), "clip_hi": int(hi), "exp_out": int(eo),
                      "w_exps": tuple(int(e) for e in pc)})
        self.rep.notes.append(f"'{n.name}': per-channel weight exps 2^{int(pc.min())}..2^{ew}")
        qo = self.int_name(out)
        self.add(n.name, qop, [x, wname, bname], qo, attrs, self.otype(out, fg.types[out].shape))
        self.qname[out] = qo

    def _wide_weights(self, n: Node, w: np.ndarray, b: np.ndarray, ex: int, ew: int):
        """Weights and bias of a conv/dense with int16 activations or weights, or int4
        weights (``wmax`` 7): the finest
        weight grid ``exp_w >= ew`` whose exact worst case ``max_o sum_k |w_q[o,k]| * 2**(act_bits-1)
        + max|b_q|`` fits int32 (coarser grids noted in the report).  Returns
        ``(weight constant name, exp_w, b_q, worst)``.

        Raises:
            CompileError: no grid fits (the bias alone overflows).
        """
        wf = w.astype(np.float64)
        lo_w = -self.wmax
        e0 = ew
        for _ in range(40):
            wq = np.clip(np.rint(wf / 2.0 ** ew), lo_w, self.wmax).astype(np.int64)
            bq = np.rint(b.astype(np.float64) / 2.0 ** (ex + ew))
            l1 = int(np.abs(wq).reshape(wq.shape[0], -1).sum(1).max(initial=0))
            worst = l1 * self.half + float(np.abs(bq).max(initial=0))
            if worst <= INT32_MAX:
                break
            ew += 1
        else:
            raise node_error(n.name, n.op, f"accumulator may overflow int32 at every weight "
                             f"grid (worst case {worst:.3g})")
        if ew != e0:
            self.rep.notes.append(
                f"'{n.name}': weight grid 2^{e0} -> 2^{ew} ({ew - e0} bit(s) coarser) so that "
                f"{self.adt} inputs cannot overflow the int32 accumulator (worst case "
                f"{int(worst)})")
        name = self.q.fresh(f"{n.inputs[1]}_q")
        self.q.add_constant(name, wq.astype(self.wdt), ew, None)
        return name, ew, bq, worst

    def q_conv2d(self, n):
        self._linear(n, "qconv2d")

    def q_dense(self, n):
        self._linear(n, "qdense")

    def q_add(self, n: Node):
        fg = self.fg
        if n.inputs[0] in fg.constants:
            raise node_error(n.name, n.op, "the first operand of an add is a constant")
        a = self.to_p2(n, self.qin(n.inputs[0]))
        if n.inputs[1] in fg.constants:
            # x + constant (hard-swish's x + 3, a BatchNorm shift after an add): the constant
            # as int8 at its own power-of-two exp, broadcast against x
            cv = fg.constants[n.inputs[1]].astype(np.float64)
            ta = self.q.types[a]
            if cv.ndim > ta.rank or any(d not in (1, s) for d, s in zip(cv.shape[::-1], ta.shape[::-1])):
                raise node_error(n.name, n.op, f"constant {list(cv.shape)} does not broadcast to {ta}")
            b = self.const_int8(f"{n.inputs[1]}_q", cv,
                                exp_for_range(float(np.abs(cv).max(initial=0)), self.cmax),
                                lo=-128, dtype=self.cdt)
        else:
            b = self.to_p2(n, self.qin(n.inputs[1]))
            if self.q.types[a].shape != self.q.types[b].shape:
                raise node_error(n.name, n.op, "quantized add needs operands of equal shape (no broadcast)")
        ea, eb = self.q.types[a].exp, self.q.types[b].exp
        c = min(ea, eb)
        out = n.outputs[0]
        eo = self.exps[out]
        lo, hi = _act_bounds(n, eo, self.scales.get(out), self.qhi)
        attrs = {"lshift_a": ea - c, "lshift_b": eb - c}
        so = 2.0 ** eo if out not in self.scales else self.scales[out]
        hb = 128 if n.inputs[1] in fg.constants and self.adt == "int4" else self.half
        attrs.update(self.requant_for(n, 2.0 ** c / so, self.half * (1 << (ea - c)) + hb * (1 << (eb - c)),
                                      out, lo, hi))
        qo = self.int_name(out)
        self.add(n.name, "qadd", [a, b], qo, attrs, self.otype(out, fg.types[out].shape))
        self.qname[out] = qo

    def q_mul(self, n: Node):
        fg = self.fg
        x = self.to_p2(n, self.qin(n.inputs[0]))
        ex = self.q.types[x].exp
        if n.inputs[1] not in fg.constants:     # two tensors: acc = a * b at exp_a + exp_b
            y = self.to_p2(n, self.qin(n.inputs[1]))
            out = n.outputs[0]
            so = 2.0 ** self.exps[out] if out not in self.scales else self.scales[out]
            qo = self.int_name(out)
            self.add(n.name, "qmul", [x, y], qo,
                     self.requant_for(n, 2.0 ** (ex + self.q.types[y].exp) / so, self.half * self.half, out),
                     self.otype(out, fg.types[out].shape))
            self.qname[out] = qo
            return
        c = fg.constants[n.inputs[1]].astype(np.float64)
        out = n.outputs[0]
        qo = self.int_name(out)
        if c.size == 1 and c.reshape(()) > 0 and math.log2(float(c.reshape(()))).is_integer():
            # x * 2**k (a Mul by 0.5, a Div by 2): the int8 values at exp_x + k, requantized
            # to the calibrated output exp (``exp_scale`` = k tells the checker the real value
            # is scaled, not only requantized)
            k = int(math.log2(float(c.reshape(()))))
            so = 2.0 ** self.exps[out] if out not in self.scales else self.scales[out]
            attrs = self.requant_for(n, 2.0 ** (ex + k) / so, self.half, out)
            attrs["exp_scale"] = k
            self.add(n.name, "qrequant", [x], qo, attrs, self.otype(out, fg.types[out].shape))
        else:
            ec = exp_for_range(float(np.abs(c).max()), self.cmax)
            cq = self.const_int8(f"{n.inputs[1]}_q", c, ec, dtype=self.cdt)
            so = 2.0 ** self.exps[out] if out not in self.scales else self.scales[out]
            cmax = int(np.abs(self.q.constants[cq].astype(np.int64)).max(initial=1))
            self.add(n.name, "qmul", [x, cq], qo,
                     self.requant_for(n, 2.0 ** (ex + ec) / so, self.half * cmax, out),
                     self.otype(out, fg.types[out].shape))
        self.qname[out] = qo

    def _standalone_clip(self, n: Node, lo_f, hi_f):
        x = self.qin(n.inputs[0])
        t = self.q.types[x]
        ex, sx = t.exp, t.real_scale
        ql, qh = self.qlo, self.qhi
        lo = ql if lo_f is None else max(ql, math.ceil(lo_f / sx))
        hi = qh if hi_f is None else min(qh, math.floor(hi_f / sx))
        out = n.outputs[0]
        qo = self.int_name(out)
        attrs = self._requant_attrs(n, 0, ex, min(lo, qh), max(hi, ql))
        if t.scale is not None:
            attrs["scale_out"] = t.scale
        self.add(n.name, "qrequant", [x], qo, attrs, TensorType(t.dtype, t.shape, ex, t.scale))
        self.qname[out] = qo

    def q_relu(self, n):
        self._standalone_clip(n, 0.0, None)

    def q_clip(self, n):
        self._standalone_clip(n, n.attrs["min"], n.attrs["max"])

    def _same_exp(self, n: Node, op: str, attrs: dict, shape):
        x = self.qin(n.inputs[0])
        out = n.outputs[0]
        qo = self.int_name(out)
        t = self.q.types[x]
        self.add(n.name, op, [x], qo, attrs, TensorType(t.dtype, shape, t.exp, t.scale))
        self.qname[out] = qo

    def q_max_pool(self, n):
        self._same_exp(n, "qmax_pool", dict(n.attrs), self.fg.types[n.outputs[0]].shape)

    def _avg(self, n, kernel, strides, pads):
        d = kernel[0] * kernel[1]
        p2 = d & (d - 1) == 0
        if p2:
            mult, shift, rnd = 1, d.bit_length() - 1, d // 2
        elif self.adt == "int16":
            mult, shift, rnd = None, None, None
            self.rep.notes.append(f"'{n.name}': window size {d} is not a power of two and the "
                                  f"exact reciprocal is proved for int8 sums only; it divides "
                                  f"on the CPU")
        else:
            mult, shift, rnd = avg_reciprocal(d) or (None, None, None)
            if mult is None:
                self.rep.notes.append(f"'{n.name}': no exact 16-bit reciprocal of the window "
                                      f"size {d}; it divides on the CPU")
        attrs = {"kernel": tuple(kernel), "strides": tuple(strides), "pads": tuple(pads), "divisor": d,
                 "shift": shift, "round": rnd, "mult": mult, "clip_lo": self.qlo, "clip_hi": self.qhi}
        self._same_exp(n, "qavg_pool", attrs, self.fg.types[n.outputs[0]].shape)

    def q_avg_pool(self, n):
        if any(n.attrs["pads"]) and not n.attrs["count_include_pad"]:
            raise node_error(n.name, n.op, "padded average pool with count_include_pad=0 is not "
                             "supported by the quantizer")
        self._avg(n, n.attrs["kernel"], n.attrs["strides"], n.attrs["pads"])

    def q_global_avg_pool(self, n):
        t = self.fg.types[n.inputs[0]]
        self._avg(n, (t.shape[2], t.shape[3]), (1, 1), (0, 0, 0, 0))

    def _layout(self, n):
        self._same_exp(n, n.op, dict(n.attrs), self.fg.types[n.outputs[0]].shape)

    q_flatten = q_reshape = q_transpose = q_upsample = q_pad = _layout

    def q_concat(self, n: Node):
        ins = [self.to_p2(n, self.qin(i)) for i in n.inputs]
        eo = max(self.q.types[i].exp for i in ins)
        aligned = []
        for i in ins:
            ei = self.q.types[i].exp
            if ei != eo:
                r = self.q.fresh(f"{i}_align")
                self.add(self.q.fresh(f"{n.name}_align"), "qrequant", [i], r,
                         self._requant_attrs(n, eo - ei, eo), TensorType(self.adt, self.q.types[i].shape, eo))
                i = r
            aligned.append(i)
        out = n.outputs[0]
        qo = self.int_name(out)
        self.add(n.name, "concat", aligned, qo, dict(n.attrs), TensorType(self.adt, self.fg.types[out].shape, eo))
        self.qname[out] = qo

    def q_softmax(self, n: Node):
        x = self.fin(n.inputs[0])
        out = n.outputs[0]
        self.add(n.name, "softmax", [x], out, dict(n.attrs), TensorType("float32", self.fg.types[out].shape))
        self.fname[out] = out

    def _fq_range(self, n: Node) -> tuple[float, float, float]:
        """``(int8 scale, lo, hi)`` for a per-tensor QDQ pair: the real range it passes is
        ``[(qmin - zp)*s, (qmax - zp)*s]``.  A symmetric int8 pair keeps its scale ``s``;
        an asymmetric or uint8 one (onnxruntime's default) gets the smallest symmetric int8
        scale covering that range (``max(|lo|, |hi|) / 127``; after a ReLU a uint8 scale
        doubles: one bit of resolution less, reported)."""
        a = n.attrs
        s, zp = float(a["scale"]), int(a["zero_point"])
        lo_r, hi_r = (a["qmin"] - zp) * s, (a["qmax"] - zp) * s
        if zp == 0 and a["qmin"] == -128 and a["qmax"] == 127:
            return s, lo_r, hi_r
        s8 = max(abs(lo_r), abs(hi_r)) / 127.0
        note = (f"QDQ '{n.outputs[0]}' ({'uint8' if a['qmin'] == 0 else 'int8'} scale {s:.6g}, "
                f"zero point {zp}: range [{lo_r:.6g}, {hi_r:.6g}]) -> symmetric int8 scale "
                f"{s8:.6g} ({s8 / s:.2f}x coarser)")
        if note not in self.rep.notes:
            self.rep.notes.append(note)
        return s8, lo_r, hi_r

    def q_fake_quant(self, n: Node):
        if isinstance(n.attrs["scale"], tuple):
            raise node_error(n.name, n.op, "per-channel activation QDQ")
        x = self.qin(n.inputs[0])
        t = self.q.types[x]
        out = n.outputs[0]
        eo, so = self.exps[out], self.scales.get(out)
        _s, lo_r, hi_r = self._fq_range(n)
        so_r = 2.0 ** eo if so is None else so
        lo, hi = -128, 127      # a symmetric int8 pair: int8 at its (possibly rounded) scale
        if (n.attrs["zero_point"], n.attrs["qmin"], n.attrs["qmax"]) != (0, -128, 127):
            lo = max(-128, math.ceil(lo_r / so_r - 1e-9))     # else clip to the pair's range
            hi = min(127, math.floor(hi_r / so_r + 1e-9))
        prod = next((m for m in self.q.nodes if x in m.outputs), None)
        plo, phi = ((prod.attrs.get("clip_lo"), prod.attrs.get("clip_hi")) if prod is not None
                    else (None, None))
        inside = (lo, hi) == (-128, 127) or (plo is not None and plo >= lo and phi <= hi)
        if eo == t.exp and so == t.scale and inside:
            self.qname[out] = x
            return
        sole = (len(self.fg.consumers().get(n.inputs[0], [])) == 1 and n.inputs[0] not in self.fg.outputs)
        if eo == t.exp and so == t.scale and sole and plo is not None and prod.op in (
                "qconv2d", "qdense", "qadd", "qrequant"):
            # the pair's clip (a uint8 pair's [0, ...] after a dropped ReLU) joins the producer's
            prod.attrs["clip_lo"], prod.attrs["clip_hi"] = max(plo, lo), min(phi, hi)
            self.qname[out] = x
            return
        qo = self.int_name(out)
        ratio = t.real_scale / so_r
        self.add(n.name, "qrequant", [x], qo, self.requant_for(n, ratio, 128, out, lo, hi),
                 self.otype(out, t.shape))
        self.qname[n.outputs[0]] = qo

    def q_batch_norm(self, n):
        raise node_error(n.name, n.op, "batch_norm must be folded before quantization (run optimize())")


def quantize(graph: Graph, calib_data, config: QuantConfig = QuantConfig(), *,
             optimize: bool = True) -> Graph:
    """Quantize a float graph to the int8 power-of-two format.

    Args:
        graph: float graph from :func:`~.onnx_frontend.import_onnx`.
        calib_data: calibration inputs, ``ndarray`` for single-input graphs or
            ``{input name: ndarray}``, batch first, float32.
        config: :class:`QuantConfig`.
        optimize: run :func:`~.passes.optimize` first (BN folding, activation
            fusion, constant folding). Leave ``True`` unless already done.
    Returns:
        A validated ``kind == "quantized"`` graph; ``graph.meta["quant_report"]``
        holds the :class:`QuantReport`.
    Raises:
        CompileError: an op the quantizer cannot express, overflow risk, etc.
    """
    fg = run_optimize(graph) if optimize else validate(graph)
    exps = calibrate(fg, calib_data, config)
    return _Quantizer(fg, exps, config).run()


@dataclass(frozen=True)
class Agreement:
    """int8-vs-float agreement on one data set.

    Attributes:
        top1_agreement: fraction of samples whose argmax (last axis) agrees.
        cosine: mean cosine similarity of the output vectors.
        max_abs_error: max |int8 output - float output|.
        float_accuracy / int8_accuracy: accuracies against labels, or None.
    """

    top1_agreement: float
    cosine: float
    max_abs_error: float
    float_accuracy: float | None
    int8_accuracy: float | None

    def __str__(self) -> str:
        s = (f"top-1 agreement {self.top1_agreement:.2%}, mean cosine {self.cosine:.4f}, "
             f"max |error| {self.max_abs_error:.4g}")
        if self.float_accuracy is not None:
            s += f", accuracy float {self.float_accuracy:.2%} / int8 {self.int8_accuracy:.2%}"
        return s


def compare(float_graph: Graph, qgraph: Graph, data, labels: np.ndarray | None = None,
            output: str | None = None) -> Agreement:
    """Run both graphs on ``data`` and report their agreement (see :class:`Agreement`)."""
    out = output or float_graph.outputs[0]
    feeds = data if isinstance(data, dict) else {float_graph.inputs[0]: data}
    f = run_float(float_graph, feeds)[out].reshape(len(next(iter(feeds.values()))), -1).astype(np.float64)
    q = run_quantized(qgraph, feeds)[out].reshape(f.shape).astype(np.float64)
    cos = np.sum(f * q, 1) / np.maximum(np.linalg.norm(f, axis=1) * np.linalg.norm(q, axis=1), 1e-30)
    fa = qa = None
    if labels is not None:
        fa = float(np.mean(f.argmax(1) == labels))
        qa = float(np.mean(q.argmax(1) == labels))
    return Agreement(float(np.mean(f.argmax(1) == q.argmax(1))), float(cos.mean()),
                     float(np.abs(f - q).max()), fa, qa)


#: integer ops whose local error :func:`layer_errors` measures (those a float node becomes)
MEASURED_OPS = frozenset({"qconv2d", "qdense", "qadd", "qmul", "qavg_pool", "qrequant"})


def _cosine(f: np.ndarray, v: np.ndarray) -> float:
    """Cosine similarity of two float64 vectors; two all-zero vectors count as 1."""
    nf, nv = float(np.linalg.norm(f)), float(np.linalg.norm(v))
    return 1.0 if nf == nv == 0 else float(f @ v) / max(nf * nv, 1e-300)


def layer_errors(float_graph: Graph, qgraph: Graph, feeds: dict | list
                 ) -> dict[str, float]:
    """The local quantization error of each integer node of :data:`MEASURED_OPS`: the
    cosine similarity between its dequantized output and the float node's output, both fed
    the float graph's own inputs (the integer node's quantized at its input exps with the
    ``quantize`` rule), so errors of earlier layers do not count.

    Args:
        float_graph: the float graph ``qgraph`` was quantized from (after ``optimize``).
        qgraph: its quantized graph (:func:`quantize`; ``meta["float_of"]`` maps integer
            tensors to the float tensors they hold).
        feeds: ``input name -> array``, a few calibration samples, or a list of such
            batches (a fixed-batch model's: the mean cosine over them).
    Returns:
        ``node name -> cosine`` in [-1, 1] (1 = no error) for each measured node whose
        inputs and output map to float tensors; an all-zero float output with a zero
        integer output counts as 1.
    """
    if isinstance(feeds, list):     # batches of a fixed-batch model: their mean cosine
        per = [layer_errors(float_graph, qgraph, f) for f in feeds]
        return {k: float(np.mean([p[k] for p in per if k in p])) for k in per[0]} if per else {}
    fenv = run_float(float_graph, feeds, keep_all=True)
    float_of = qgraph.meta.get("float_of", {})
    out: dict[str, float] = {}
    for n in qgraph.nodes:
        f_out = float_of.get(n.outputs[0])
        if n.op not in MEASURED_OPS or f_out not in fenv:
            continue
        xs = []
        for i in n.inputs:
            if i in qgraph.constants:
                xs.append(qgraph.constants[i])
                continue
            fi, t = float_of.get(i), qgraph.types[i]
            if fi not in fenv or t.exp is None:
                break
            lo, hi = qrange(t.dtype)
            xs.append(np.clip(np.floor(fenv[fi].astype(np.float64) / t.real_scale + 0.5), lo, hi)
                      .astype(storage_dtype(t.dtype)))
        else:
            t = qgraph.types[n.outputs[0]]
            v = _q_node(n, xs, qgraph).astype(np.float64).ravel() * t.real_scale
            out[n.name] = _cosine(fenv[f_out].astype(np.float64).ravel(), v)
    return out


def _bc_delta(node: Node, fn: Node, float_graph: Graph, qgraph: Graph, envs: list,
              fenvs: list, min_samples: int) -> np.ndarray | None:
    """The rounded mean pre-activation error per output channel of one int8 conv/dense
    (:func:`bias_correct`), int64 ``[O]`` in accumulator units, or None where the samples
    give fewer than ``min_samples`` positions per channel."""
    a = node.attrs
    wq = qgraph.constants[node.inputs[1]].astype(np.int64)
    bq = qgraph.constants[node.inputs[2]].astype(np.int64)
    ex = qgraph.types[node.inputs[0]].exp
    o = wq.shape[0]
    ew = np.asarray(a["w_exps"] if "w_exps" in a else [qgraph.types[node.inputs[1]].exp] * o,
                    np.float64)
    wf = float_graph.constants[fn.inputs[1]].astype(np.float64)
    bf = (float_graph.constants[fn.inputs[2]].astype(np.float64) if len(fn.inputs) > 2
          else np.zeros(o))
    err_sum, count = np.zeros(o), 0
    for env, fenv in zip(envs, fenvs):
        x, xf = env[node.inputs[0]].astype(np.int64), fenv[fn.inputs[0]].astype(np.float64)
        if node.op == "qconv2d":
            sa = (a["strides"], a["pads"], a["groups"])
            acc = np.rint(conv2d_nchw(x, wq, *sa)) + bq.reshape(1, -1, 1, 1)
            real_f = conv2d_nchw(xf, wf, *sa) + bf.reshape(1, -1, 1, 1)
            axes, scale = (0, 2, 3), (2.0 ** (ex + ew)).reshape(1, -1, 1, 1)
        else:
            acc = x.astype(np.float64) @ wq.T.astype(np.float64) + bq
            real_f = xf @ wf.T + bf
            # every axis but the last: a dense on [N, T, C] (a sequence model's
            # projection) has one bias per output feature, not per position
            axes, scale = tuple(range(acc.ndim - 1)), 2.0 ** (ex + ew)
        err_sum += (acc * scale - real_f).sum(axis=axes)
        count += acc.size // o
    if count < min_samples:
        return None
    return np.rint(err_sum / count / (2.0 ** (ex + ew))).astype(np.int64)


def _bc_pass(float_graph: Graph, qgraph: Graph, batches: list, fenvs: list, fnodes: dict,
             only: set, min_samples: int) -> dict[str, np.ndarray]:
    """One sequential pass of :func:`bias_correct` over the nodes named in ``only`` (each
    measured on the integer graph as corrected so far); returns their non-zero deltas."""
    envs = [_bind(qgraph, f) for f in batches]
    left = set(only)
    out: dict[str, np.ndarray] = {}
    for node in qgraph.nodes:
        if not left:
            break
        if node.name in left:
            left.discard(node.name)
            delta = _bc_delta(node, fnodes[node.name], float_graph, qgraph, envs, fenvs,
                              min_samples)
            if delta is not None and np.any(delta):
                bq = qgraph.constants[node.inputs[2]].astype(np.int64)
                qgraph.constants[node.inputs[2]] = np.clip(
                    bq - delta, -(1 << 31), (1 << 31) - 1).astype(np.int32)
                out[node.name] = delta
        for env in envs:
            ins = [env[i] for i in node.inputs]
            if node.op == "onnx" or node.op in FLOAT_KERNELS:     # as run_quantized does
                for o_, y in zip(node.outputs, _float_node(node, ins, qgraph)):
                    env[o_] = np.asarray(y)
            else:
                env[node.outputs[0]] = _q_node(node, ins, qgraph)
    return out


def output_agreement(qgraph: Graph, batches: list, fenvs: list) -> float:
    """The mean over ``qgraph``'s float outputs of the cosine similarity between its
    output on ``batches`` (all samples flattened) and the float graph's (``fenvs``: the
    float runs of the same batches, keeping the output names); 1.0 = identical."""
    runs = [run_quantized(qgraph, f) for f in batches]
    cos = []
    for name in qgraph.outputs:
        if not all(name in fe for fe in fenvs):
            continue
        v = np.concatenate([np.ravel(r[name]).astype(np.float64) for r in runs])
        f = np.concatenate([np.ravel(fe[name]).astype(np.float64) for fe in fenvs])
        if not (np.all(np.isfinite(v)) and np.all(np.isfinite(f))):
            continue
        cos.append(_cosine(f, v))
    return float(np.mean(cos)) if cos else 1.0


def bias_correct(float_graph: Graph, qgraph: Graph, feeds: dict | list,
                 min_samples: int = 32, deltas: dict | None = None,
                 groups: int = 8, fenvs: list | None = None) -> dict[str, int]:
    """Empirical bias correction, in place: for each int8 ``qconv2d`` / ``qdense`` (power-of-two
    scales, ``mult`` 1), in graph order, the mean per output channel of its pre-activation
    error -- its exact integer accumulator ``acc + bias`` at exp ``exp_in + exp_w[o]``
    minus the float node's ``conv(x, w) + b`` on the float graph's own input -- is
    subtracted from its int32 bias (rounded to the accumulator's grid).  Earlier layers'
    corrections are in the integer inputs of later ones (the run is sequential), so each
    layer also absorbs the mean shift its inputs' errors cause.  A channel is corrected
    only where the calibration samples give at least ``min_samples`` output positions
    (``N*H*W``).  Technique: Nagel et al., "Data-Free Quantization Through Weight
    Equalization and Bias Correction" (ICCV 2019), the empirical variant.

    Guard: a mean shift is not always the error that matters (after accumulated upstream
    error a layer's mean error is mostly other layers', and its correction can move later
    activations the wrong way; measured on PP-OCRv4 rec, correcting every layer took the
    output cosine from 0.89 to 0.64).  So with ``groups > 0`` the layers are corrected in
    ``groups`` consecutive groups in graph order, and a group's corrections are kept only
    where they raise the agreement of the graph's outputs with float on the same samples
    (:func:`output_agreement`); ``groups=0`` corrects every layer unconditionally.

    Args:
        float_graph: the float graph ``qgraph`` was quantized from (after ``optimize``).
        qgraph: its quantized graph; bias constants are replaced (int32, same shape).
        feeds: ``input name -> array``, calibration samples, or a list of such batches (a
            fixed-batch model's; the mean error is over all of them).
        deltas: if given, filled with ``node name -> int64 [O]``, the amounts subtracted.
        groups: number of guarded groups (costs two integer runs of the samples each).
        fenvs: the float graph's runs of those batches (``run_float(..., keep_all=True)``),
            where the caller has them already.
    Returns:
        ``node name -> number of channels whose bias changed``.
    """
    batches = feeds if isinstance(feeds, list) else [feeds]
    if fenvs is None:
        fenvs = [run_float(float_graph, f, keep_all=True) for f in batches]
    fnodes = {n.name: n for n in float_graph.nodes}
    cands = []
    for node in qgraph.nodes:
        fn = fnodes.get(node.name)
        if (node.op in ("qconv2d", "qdense") and fn is not None and fn.op in ("conv2d", "dense")
                and node.attrs.get("mult", 1) == 1 and "scale_out" not in node.attrs
                and all(qgraph.types[i].scale is None for i in node.inputs)
                and qgraph.types[node.inputs[0]].dtype == "int8"
                and all(fn.inputs[0] in fe for fe in fenvs)):
            cands.append(node.name)
    if groups <= 0:
        chunks, base = [cands], None
    else:
        size = max(1, -(-len(cands) // groups))
        chunks = [cands[i:i + size] for i in range(0, len(cands), size)]
        base = output_agreement(qgraph, batches, fenvs) if chunks else None
    done: dict[str, np.ndarray] = {}
    for chunk in chunks:
        members = set(chunk)
        saved = {n.inputs[2]: qgraph.constants[n.inputs[2]] for n in qgraph.nodes
                 if n.name in members}
        got = _bc_pass(float_graph, qgraph, batches, fenvs, fnodes, members, min_samples)
        if not got:
            continue
        if base is not None:
            score = output_agreement(qgraph, batches, fenvs)
            if score <= base:         # the group does not help end to end: undone
                qgraph.constants.update(saved)
                continue
            base = score
        done.update(got)
    if deltas is not None:
        deltas.update(done)
    return {k: int(np.count_nonzero(d)) for k, d in done.items()}
