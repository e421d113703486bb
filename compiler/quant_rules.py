"""The quantizer's per-op rules, its configuration and its report.

:class:`QuantRules` holds the state of one quantization (the float graph, the quantized
graph being built, the calibrated exps) and one ``q_<op>`` rule per float IR op; the op
registry (:data:`~.ops.REGISTRY`) points each float op's ``quantize`` facet at its rule, and
:class:`~.quantize._Quantizer` (:func:`~.quantize.quantize`) applies them node by node.  The
scheme the rules implement is described in :mod:`.quantize`.  This module imports no
dispatcher (``ops``, ``quantize``, ``partition``, ``compile``): the registry imports it.
"""

from __future__ import annotations

import math
import numbers
from dataclasses import dataclass, field

import numpy as np

from .errors import CompileError, node_error
from .ir import Graph, Node, TensorType, qrange
from .requant import MULT_MAX, avg_reciprocal, mult_plan, requant_round

__all__ = ["QuantConfig", "QuantReport", "QDQApprox", "MultChoice", "QuantRules", "exp_for_range",
           "choose_multiplier", "OUTPUT_AGREEMENT_TARGET", "linear_worst", "bias_cap",
           "clip_bias"]

INT32_MAX = (1 << 31) - 1

#: The default output agreement (mean cosine of the float outputs against the float graph's,
#: :func:`~.quantize.output_agreement`) under which ``QuantConfig.adaptive_floor`` raises
#: the per-layer error floor (:attr:`QuantConfig.agreement_target`).
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
            float below ``agreement_target`` on the calibration samples, raise
            the floor to keep the fewest worst-measured layers real that reach it
            (:func:`~.compile.search_floor`); a model whose
            outputs already agree keeps every layer the plain floor keeps on VTA.
            ``compile_model``'s default QuantConfig turns it on.
        agreement_target: the output agreement ``adaptive_floor`` aims at, in (0, 1]
            (default :data:`OUTPUT_AGREEMENT_TARGET`, 0.99).  Higher trades VTA layers for
            accuracy: on PP-OCRv4 rec (``docs/compiler.md`` "Real pretrained models")
            0.997 keeps 16 of 87 layers on VTA and decodes 22 instead of 14 of 24
            held-out lines as float does.
        channel_act_exps: per-channel activation exps (``ir`` "Per-channel activations")
            for the int8 input of a depthwise or dense (groups 1) conv that a CPU
            ``quantize`` makes (its producer runs real-valued on the CPU, or it is a graph
            input): a depthwise conv's channel ``c`` at ``min(exp, exp_for_range(max
            |x[:, c]|))`` over the calibration set (:func:`~.quantize.calibrate` records them
            in ``graph.meta["channel_exps"]``), a dense conv's part of the way there
            (:meth:`QuantRules.input_channel_exps`), folded into the conv's per-channel
            weights.  ``compile_model``'s default
            QuantConfig turns it on.
    Raises:
        CompileError: ``act_bits`` not 4, 8 or 16, ``wgt_bits`` not 4, 8 or 16,
            ``per_channel`` not one of auto / on / off, ``agreement_target`` not in (0, 1].
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
    channel_act_exps: bool = False
    agreement_target: float = OUTPUT_AGREEMENT_TARGET

    def __post_init__(self) -> None:
        t = self.agreement_target
        if isinstance(t, bool) or not isinstance(t, numbers.Real) or not 0 < t <= 1:
            raise CompileError(f"QuantConfig.agreement_target = {t!r}: give a cosine in (0, 1] "
                               f"(default {OUTPUT_AGREEMENT_TARGET})")
        object.__setattr__(self, "agreement_target", float(t))   # a numpy scalar too
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


def linear_worst(wq: np.ndarray, bq: np.ndarray, shift, half: int) -> int:
    """The int32 proof of a conv/dense with integer weights ``wq`` (``[O, ...]``), bias
    ``bq`` (``[O]``) and requantize ``shift`` (an int, or one per output channel), over
    every input whose values lie in ``[-half, half - 1]`` (``half = 2**(act_bits-1)``):
    ``max_o sum_k |wq[o, k]| * half + max_o |bq[o]| + max_o round[o]`` (``round`` of each
    shift, :func:`~.requant.requant_round`).  It bounds ``|acc + bias + round|`` and every
    partial sum of it, in any order of accumulation; the result must not exceed
    ``2**31 - 1``.  The same sum as the placement's check of a wide conv/dense
    (:func:`~.placement.linear_acc_bound` plus its largest ``round``), so a node the
    quantizer proves is a node VTA may take."""
    w = np.asarray(wq).astype(np.int64).reshape(wq.shape[0], -1)
    l1 = int(np.abs(w).sum(axis=1).max(initial=0))
    bmax = int(np.abs(np.asarray(bq, np.float64)).max(initial=0)) if np.size(bq) else 0
    sh = np.atleast_1d(np.asarray(shift, np.int64))
    rmax = max(requant_round(int(v)) for v in sh)
    return l1 * half + bmax + rmax


def bias_cap(g: Graph, n: Node) -> int:
    """The largest ``|bias[o]|`` that keeps the int16-activation conv/dense ``n`` of
    quantized graph ``g`` within :func:`linear_worst`'s ``2**31 - 1`` (its weights and
    shifts as they are): what :func:`~.quantize.bias_correct` may move its biases to."""
    wq = g.constants[n.inputs[1]]
    half = -qrange(g.types[n.inputs[0]].dtype)[0]
    return INT32_MAX - linear_worst(wq, np.zeros(0), n.attrs["shift"], half)


def clip_bias(g: Graph, n: Node, b: np.ndarray, b_old: np.ndarray) -> np.ndarray:
    """A corrected bias ``b`` (int64 ``[O]``) for conv/dense ``n`` of quantized graph ``g``,
    whose bias is ``b_old``: clipped to int32, and for int16 activations to ``[-cap, cap]``
    with ``cap =`` :func:`bias_cap`, so that a bias correction keeps the int32 proof; a
    correction never moves a channel past its old bias's own magnitude (where the old bias
    already lies outside ``[-cap, cap]``, as the quantizer proved it, the channel keeps
    it)."""
    b = np.clip(np.asarray(b, np.int64), -(1 << 31), INT32_MAX)
    if g.types[n.inputs[0]].dtype == "int16":
        old = np.asarray(b_old, np.int64)
        cap = bias_cap(g, n)
        b = np.clip(b, np.minimum(-cap, old), np.maximum(cap, old))
    return b


#: Migration strengths a dense conv's per-channel input exps are chosen from
#: (:meth:`QuantRules.input_channel_exps`): 0 keeps the input per tensor, 1 gives every
#: channel its own calibrated exp.
MIGRATION_STRENGTHS = (0.0, 0.5)


def migrate(ce: np.ndarray, exp: int, strength: float) -> np.ndarray:
    """Per-channel exps (int64 ``[C]``) ``exp - floor(strength * (exp - ce))``: channel
    ``c`` moved ``strength`` of the way from the tensor's ``exp`` to its own ``ce[c]``
    (``ce <= exp``), so a result is never finer than ``ce`` (no channel clips)."""
    return (exp - np.floor(strength * (exp - ce))).astype(np.int64)


def fold_error(w: np.ndarray, exp: int, ce: np.ndarray, ms: np.ndarray) -> float:
    """The estimated output error variance (summed over output channels, in the input's
    and weights' real units squared) of a dense conv ``w`` (float ``[O, C, kh, kw]``) whose
    input channel ``c`` (mean square ``ms[c]``) is quantized at ``2**ce[c]``, with
    ``2**(ce[c] - exp)`` folded into weight column ``c`` and each output channel's folded
    weights on their own int8 grid ``2**ceil(log2(max|w'[o]| / 127))``.  Uniform rounding
    noise (variance step²/12) on both operands, independent terms:
    ``sum_o sum_{c,k} w[o,c,k]^2 4^ce[c] / 12 + sum_o 4^g[o] / 12 * sum_{c,k} ms[c] 4^(exp - ce[c])``.
    Padding and clipping are ignored (they do not change the choice between exps)."""
    wf = w.astype(np.float64)
    col = 2.0 ** (np.asarray(ce, np.float64) - exp)
    folded = wf * col.reshape(1, -1, 1, 1)
    mx = np.abs(folded).reshape(w.shape[0], -1).max(axis=1)
    with np.errstate(divide="ignore"):
        g = np.where(mx > 0, np.ceil(np.log2(np.maximum(mx, 1e-300) / 127)), 0.0)
    taps = w.shape[2] * w.shape[3]
    act = float(((wf ** 2).sum(axis=(2, 3)) * 4.0 ** np.asarray(ce, np.float64)).sum())
    wgt = float((4.0 ** g).sum() * taps * (np.asarray(ms, np.float64) / col ** 2).sum())
    return (act + wgt) / 12.0


class QuantRules:
    """The quantizer's state while it rewrites one float graph, its helpers, and one rule
    per float op: ``q_<op>(node)`` adds the integer nodes of a float node to the quantized
    graph ``q`` (the registry's ``quantize`` facet, :data:`~.ops.REGISTRY`, names these
    methods; an op defined elsewhere gives a function ``rule(quantizer, node)``).

    State a rule reads and writes: ``fg`` (the float graph), ``q`` (the quantized graph
    being built), ``exps`` / ``scales`` (calibrated exp and exact QDQ scale per float
    tensor), ``qname`` / ``fname`` (float tensor -> its integer / real-valued tensor in
    ``q``), ``rep`` (the :class:`QuantReport`), ``adt`` (activation dtype), ``qlo`` /
    ``qhi`` / ``half`` (its range and ``2**(bits-1)``).  Helpers: :meth:`qin` / :meth:`fin`
    (the integer / real-valued version of a float tensor), :meth:`add` (append a node),
    :meth:`int_name`, :meth:`otype`, :meth:`requant_for`, :meth:`to_p2`,
    :meth:`const_int8`.  A rule that cannot express its node raises
    :class:`~.errors.CompileError`; the quantizer then keeps a real-valued op float
    (``q_real``) and re-raises for any other.
    """

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
        self.qname_ch: dict[tuple, str] = {}  # (float tensor, channel exps) -> int8 tensor
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

    def qin_channels(self, t: str, ce: np.ndarray) -> str:
        """The int8 tensor of float tensor ``t`` quantized per channel at exps ``ce``
        (int64 ``[C]``, max = the tensor's exp): a ``quantize`` with ``channel_exps``
        (``ir`` "Per-channel activations"), one per tensor and exps."""
        key = (t, tuple(int(e) for e in ce))
        if key in self.qname_ch:
            return self.qname_ch[key]
        out = self.q.fresh(f"{t}_qc")
        attrs = {"exp": int(ce.max()), "channel_exps": key[1]}
        self.add(self.q.fresh(f"{t}_quantize_channels"), "quantize", [self.fname[t]], out, attrs,
                 TensorType("int8", self.q.types[self.fname[t]].shape, int(ce.max()),
                            channel_exps=key[1]))
        self.qname_ch[key] = out
        return out

    def input_channel_exps(self, n: Node, w: np.ndarray) -> np.ndarray | None:
        """Per-channel activation exps (int64 ``[C]``) for the int8 input of conv ``n``
        (``QuantConfig.channel_act_exps``; ``ir`` "Per-channel activations"), or None to
        quantize it per tensor.

        A depthwise conv (groups = C, one weight channel each) takes each channel's
        calibrated exp ``ce[c]`` (:func:`~.quantize.calibrate`): the fold scales whole
        output channels, which their per-channel weight grid absorbs exactly.  A dense conv
        (groups = 1) sums over input channels, so the fold moves a channel's range into a
        column of the weights, which each output channel's one weight grid then rounds
        coarser (the SmoothQuant trade; Xiao et al., 2023): the exps
        ``exp - floor(a * (exp - ce[c]))`` are taken for the migration strength ``a`` of
        :data:`MIGRATION_STRENGTHS` that minimises the estimated output error variance
        (:func:`fold_error`), and None where ``a = 0`` (no fold) wins.

        None also for: another group count, an input that is not a float tensor a
        ``quantize`` converts (its producer an int8 node), no calibration record, an exact
        (non-power-of-two) scale or weight hint, a non-int8 core, or every channel at the
        tensor's exp."""
        t = n.inputs[0]
        ce = self.fg.meta.get("channel_exps", {}).get(t)
        if (not self.cfg.channel_act_exps or ce is None or self.adt != "int8"
                or self.cfg.wgt_bits != 8 or self.cfg.per_channel == "off"):
            return None
        c = self.fg.types[t].shape[1] if self.fg.types[t].rank == 4 else None
        if n.op != "conv2d" or len(ce) != c or w.ndim != 4:
            return None
        groups = n.attrs.get("groups", 1)
        depthwise = groups == c and w.shape[0] == c and w.shape[1] == 1
        if not (depthwise or (groups == 1 and w.shape[1] == c)):
            return None
        if (t in self.qname or t not in self.fname or t in self.scales
                or self.hints.get(n.inputs[1]) is not None or n.outputs[0] in self.scales):
            return None
        prod = self.q.producers().get(self.fname[t])
        if prod is not None and prod.op == "dequantize":
            return None         # an int8 node's output: re-quantizing it would cost a trip
        ex = self.exps[t]
        ce = np.asarray(ce, np.int64)
        if not depthwise:
            ms = self.fg.meta.get("channel_ms", {}).get(t)
            if ms is None or len(ms) != c or not np.all(np.isfinite(ms)):
                return None
            with np.errstate(over="ignore", invalid="ignore"):     # a float64 model's range
                est = [fold_error(w, ex, migrate(ce, ex, a), ms) for a in MIGRATION_STRENGTHS]
            if not all(np.isfinite(est)):
                return None
            best = MIGRATION_STRENGTHS[int(np.argmin(est))]
            ce = migrate(ce, ex, best)
        if np.all(ce == ex):
            return None
        return ce

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

    def qdq_exps(self) -> None:
        """Before the rules run: each per-tensor QDQ pair (``fake_quant``) fixes the exp (and,
        with ``exact_multiply``, the exact scale) of its output, and of its input tensor when
        the pair is that tensor's only consumer and a node computes it."""
        fg = self.fg
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
        if n.inputs[1] not in fg.constants:
            raise node_error(n.name, n.op, "weight must be a constant")
        w = fg.constants[n.inputs[1]]
        ce = self.input_channel_exps(n, w)
        if ce is not None:
            # per-channel activation: channel c's 2**(ce[c] - exp) folded into its weights
            # (a power of two: the per-channel weight grid below absorbs it exactly for a
            # depthwise conv, where the channel is a whole output channel)
            ex = int(ce.max())
            fold = (-1, 1, 1, 1) if n.attrs.get("groups", 1) > 1 else (1, -1, 1, 1)
            wc = (w.astype(np.float64) * 2.0 ** (ce - ex).reshape(fold)).astype(w.dtype)
            ew, sw = self.weight_exp(n.inputs[1], wc)
            if self.channel_exps(n.inputs[1], wc, ew, self.exps[n.outputs[0]] - ex) is None:
                ce = None       # no per-channel weight grid to absorb the fold: per tensor
            else:
                x, w = self.qin_channels(n.inputs[0], ce), wc
        if ce is None:
            x = self.qin(n.inputs[0])
            ex = self.q.types[x].exp
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
            self._linear_per_channel(n, qop, x, w, b, ex, pc, ce)
            return
        if self.adt == "int8" and self.cfg.wgt_bits == 8:
            wq = self.const_int8(f"{n.inputs[1]}_q", w, ew, lo=-127 if sw is None else -128, scale=sw)
            s_acc = None if sx is None and sw is None else self.rscale(x) * self.q.types[wq].real_scale
            bq = np.rint(b.astype(np.float64) / (2.0 ** (ex + ew) if s_acc is None else s_acc))
            worst = k * 128 * 128 + float(np.abs(bq).max(initial=0))
            if worst > INT32_MAX:
                raise node_error(n.name, n.op, f"accumulator may overflow int32 (worst case {worst:.3g})")
        elif (self.adt == "int16" and self.cfg.wgt_bits == 8 and sx is None and sw is None
              and out not in self.scales):
            got = self._linear_wide(n, qop, x, w, b, ex, ew)
            if got is None:         # per-channel grids: emitted
                return
            wq, ew, bq, worst = got
            s_acc = None
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
        if mode == "auto" and not isinstance(hint, tuple) and self.adt != "int16":
            # (int16 activations: the int8 weights are all the error left, so every layer
            # whose channels' exps differ takes them; PP-OCRv4 rec: 18 -> 20 of 24 lines)
            def rel_err(ex):
                q = np.clip(np.rint(wf / 2.0 ** ex[:, None]), -127, 127) * 2.0 ** ex[:, None]
                energy = np.maximum((wf ** 2).sum(axis=1), 1e-300)
                return float(np.mean(((q - wf) ** 2).sum(axis=1) / energy))
            if rel_err(pc) > 0.5 * rel_err(np.full_like(pc, ew)):
                return None
        return pc

    def _linear_per_channel(self, n: Node, qop: str, x: str, w: np.ndarray, b: np.ndarray,
                            ex: int, pc: np.ndarray, ce: np.ndarray | None = None) -> None:
        """``qconv2d`` / ``qdense`` with per-channel weight exps ``pc`` (ir "Per-channel
        weights"): weights ``clip(rint(w[o] / 2**pc[o]), -127, 127)``, bias at
        ``ex + pc[o]``, one shift per channel; ``ce``: the input's per-channel activation
        exps, already folded into ``w`` (recorded as ``x_exps``)."""
        o = w.shape[0]
        shp = (o,) + (1,) * (w.ndim - 1)
        wq = np.clip(np.rint(w.astype(np.float64) / 2.0 ** pc.reshape(shp)), -127, 127)
        bq = np.rint(b.astype(np.float64) / 2.0 ** (ex + pc))
        k = int(np.prod(w.shape[1:]))
        worst = k * 128 * 128 + float(np.abs(bq).max(initial=0))
        if worst > INT32_MAX:
            raise node_error(n.name, n.op, f"accumulator may overflow int32 (worst case {worst:.3g})")
        self._emit_per_channel(n, qop, x, wq, bq, ex, pc, ce)

    def _emit_per_channel(self, n: Node, qop: str, x: str, wq: np.ndarray, bq: np.ndarray,
                          ex: int, pc: np.ndarray, ce: np.ndarray | None = None) -> None:
        """Add the per-channel ``qconv2d`` / ``qdense`` of int8 weights ``wq`` (values, any
        dtype) and int32 bias ``bq`` at weight exps ``pc`` (``_linear_per_channel``)."""
        fg = self.fg
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
        if ce is not None:
            attrs["x_exps"] = tuple(int(e) for e in ce)
            self.rep.notes.append(f"'{n.name}': per-channel input exps 2^{int(ce.min())}.."
                                  f"2^{int(ce.max())} (folded into its weights)")
        qo = self.int_name(out)
        self.add(n.name, qop, [x, wname, bname], qo, attrs, self.otype(out, fg.types[out].shape))
        self.qname[out] = qo

    def _linear_wide(self, n: Node, qop: str, x: str, w: np.ndarray, b: np.ndarray, ex: int,
                     ew: int) -> tuple | None:
        """``qconv2d`` / ``qdense`` with int16 activations and int8 weights.

        The weight grids are the int8 path's: per output channel where :meth:`channel_exps`
        finds it pays (``QuantConfig.per_channel``), else ``ew`` for every channel.  Where
        the int32 proof (:func:`linear_worst`: the largest channel's ``sum|w_q| * 2**15``
        plus the largest ``|b_q|`` and ``round``) fails on them, only some channels are
        coarsened (:meth:`_coarsen`): those whose weights or bias are the largest, each by
        the fewest bits, so one large-K or large-bias channel no longer costs the whole
        layer its precision (a 1x1 conv over 480 channels of PP-OCRv4 rec kept its median
        channel at 3 levels on the per-tensor grid of its one outlier: cosine 0.83; an
        all-but-dead channel's bias at the finest grid alone nearly fills int32).  Channels
        that end equal give the per-tensor form, else the per-channel one (``ir``
        "Per-channel weights").  Coarsenings are noted in the report.

        Returns:
            For one grid ``(weight constant name, exp, int bias [O], worst case)``, which
            :meth:`_linear` emits as its per-tensor form (as for :meth:`_wide_weights`);
            None once the per-channel node is emitted.

        Raises:
            CompileError: no grid fits with shifts in ``[-31, 31]`` (the node then stays a
                float CPU node).
        """
        out = n.outputs[0]
        eo = self.exps[out]
        rel = eo - ex
        o = w.shape[0]
        pc = self.channel_exps(n.inputs[1], w, ew, rel)
        pc0 = np.full(o, ew, np.int64) if pc is None else pc.astype(np.int64)
        wf, bf = w.astype(np.float64), b.astype(np.float64)
        shp = (o,) + (1,) * (w.ndim - 1)

        def grid(pc):
            return (np.clip(np.rint(wf / 2.0 ** pc.reshape(shp)), -127, 127).astype(np.int64),
                    np.rint(bf / 2.0 ** (ex + pc)))
        wq, bq = grid(pc0)
        pc = pc0
        if linear_worst(wq, bq, rel - pc, self.half) > INT32_MAX:
            pc = self._coarsen(wf, bf, ex, rel, pc0, uniform=self.cfg.per_channel == "off")
            if pc is None:
                raise node_error(n.name, n.op, "accumulator may overflow int32 at every weight "
                                 "grid with requantize shifts in [-31, 31]")
            wq, bq = grid(pc)
            worst = linear_worst(wq, bq, rel - pc, self.half)
            if worst > INT32_MAX:        # _coarsen proves it: an internal error
                raise CompileError(f"internal: '{n.name}' coarsened grid overflows ({worst})")
            moved = pc != pc0
            self.rep.notes.append(
                f"'{n.name}': {int(moved.sum())} of {o} output channel(s) on a coarser weight "
                f"grid (up to {int((pc - pc0).max())} bit(s)) so that {self.adt} inputs "
                f"cannot overflow the int32 accumulator (worst case {worst})")
        if np.all(pc == pc[0]):     # one grid: _linear's per-tensor form emits it
            e = int(pc[0])
            wname = self.q.fresh(f"{n.inputs[1]}_q")
            self.q.add_constant(wname, wq.astype(np.int8), e, None)
            return wname, e, bq, linear_worst(wq, bq, rel - pc, self.half)
        self._emit_per_channel(n, qop, x, wq, bq, ex, pc)
        return None

    def _coarsen(self, wf: np.ndarray, bf: np.ndarray, ex: int, rel: int, pc0: np.ndarray,
                 uniform: bool = False) -> np.ndarray | None:
        """Per-channel weight exps ``pc >= pc0`` (int64 ``[O]``) on which
        :func:`linear_worst` fits int32, or None (no such grid with every shift
        ``rel - pc`` in ``[-31, 31]``).  ``wf`` / ``bf``: float weights ``[O, ...]`` and bias
        ``[O]``; ``ex``: the input's exp.

        A split of the budget ``2**31 - 1 - max round(pc0)`` between the weights' part
        ``T >= max_o sum|w_q[o]| * half`` and the bias's ``max_o |b_q[o]|``: for each
        candidate ``T`` (each channel's weight part at each coarsening), each channel takes
        the fewest extra bits that bring its weight part under ``T`` and its bias under the
        rest; the split with the fewest bits on channels with non-zero int8 weights wins
        (then the fewest in all; then the larger ``T``).  Coarsening only shrinks each part
        and the rounds, so the pick fits.  ``uniform``: one extra bit for every channel at a
        time instead (``per_channel="off"``)."""
        o = wf.shape[0]
        w2 = wf.reshape(o, -1)
        jmax = np.clip(rel + 31 - pc0, -1, 40)          # bits each channel may still take
        nj = int(jmax.max(initial=-1)) + 1
        if nj <= 0:
            return None
        j = np.arange(nj)
        e = pc0[:, None] + j[None, :]                  # [O, J] candidate exps
        ok = j[None, :] <= jmax[:, None]
        l1 = np.stack([np.abs(np.clip(np.rint(w2 / 2.0 ** e[:, k:k + 1]), -127, 127)).sum(axis=1)
                       for k in range(nj)], axis=1) * float(self.half)
        bj = np.abs(np.rint(bf[:, None] / 2.0 ** (ex + e)))
        rmax = max(requant_round(int(v)) for v in rel - pc0)
        budget = float(INT32_MAX - rmax)
        live = l1[:, 0] > 0
        if uniform:
            for k in range(nj):
                if ok[:, k].all() and l1[:, k].max() + bj[:, k].max() <= budget:
                    return pc0 + k
            return None
        l1 = np.where(ok, l1, np.inf)
        cands = np.unique(l1[ok & (l1 <= budget)])[::-1]
        if len(cands) > 512:    # the 128 largest (the least weight coarsening), then a sample
            cands = np.concatenate([cands[:128], cands[128::-(-(len(cands) - 128) // 384)]])
        best, pick = None, None
        for t in cands:
            fit = (l1 <= t) & (bj <= budget - t)
            if not fit.any(axis=1).all():
                continue
            need = fit.argmax(axis=1)                  # first fitting coarsening per channel
            cost = (int(need[live].sum()), int(need.sum()), -float(t))
            if best is None or cost < best:
                best, pick = cost, pc0 + need
        return pick

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
