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

from dataclasses import dataclass

import numpy as np

from ..runtime.cpu_float import conv2d_nchw
from .errors import CompileError, node_error
from .ir import LAYOUT_OPS, REAL_OPS, Graph, Node, TensorType, qrange, storage_dtype, validate
from .ops import REGISTRY
from .passes import optimize as run_optimize
from .quant_rules import (OUTPUT_AGREEMENT_TARGET, MultChoice, QDQApprox, QuantConfig,
                          QuantReport, QuantRules, choose_multiplier, clip_bias, exp_for_range)
from .reference import _bind, _q_node, run_float, run_node, run_quantized

__all__ = ["QuantConfig", "QuantReport", "QDQApprox", "MultChoice", "Agreement", "quantize",
           "compare", "calibrate", "exp_for_range", "choose_multiplier", "layer_errors",
           "bias_correct", "OUTPUT_AGREEMENT_TARGET"]

#: ops ``keep_real`` may keep float: the float ops with a real-valued CPU form, and layout
#: ops (data movement of whatever dtype) between two real-valued nodes
KEEPABLE_OPS = REAL_OPS | LAYOUT_OPS

#: The per-layer error floor of ``compile_model`` / ``compile_dynamic`` (local cosine of an
#: int8 layer's output against float; below it the layer stays a float CPU node).
DEFAULT_MIN_LAYER_COSINE = 0.99


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
        ``tensor name -> exp`` for graph inputs and node outputs.  With
        ``config.channel_act_exps``, also sets ``graph.meta["channel_exps"]`` to
        ``tensor name -> int64 [C]`` for each 4-D (NCHW) float tensor: channel ``c``'s exp
        ``min(exp, exp_for_range(max |x[:, c]|))`` (an all-zero channel keeps ``exp``), and
        ``graph.meta["channel_ms"]`` to each such tensor's per-channel mean square
        (float64 ``[C]``, ``mean(x[:, c]**2)``), the statistic a conv's choice of input exps
        weighs (:meth:`~.quant_rules.QuantRules.input_channel_exps`).
    """
    maxabs: dict[str, float] = {}
    chmax: dict[str, np.ndarray] = {}
    chsq: dict[str, list] = {}          # per channel: [sum of squares, elements per channel]
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
            if config.channel_act_exps and v.ndim == 4 and v.size and np.isfinite(v).all():
                cm = np.abs(v.astype(np.float64)).max(axis=(0, 2, 3))
                chmax[name] = np.maximum(chmax[name], cm) if name in chmax else cm
                with np.errstate(over="ignore"):    # a float64 model's huge values: inf
                    sq = np.square(v.astype(np.float64)).sum(axis=(0, 2, 3))
                n_c = v.size // v.shape[1]
                if name in chsq:
                    chsq[name][0] = chsq[name][0] + sq
                    chsq[name][1] += n_c
                else:
                    chsq[name] = [sq, n_c]
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
    if config.channel_act_exps:
        graph.meta["channel_exps"] = {
            name: np.array([min(exps[name], exp_for_range(float(c), qm)) if c > 0
                            else exps[name] for c in cm], np.int64)
            for name, cm in chmax.items() if name in exps}
        graph.meta["channel_ms"] = {name: sq / max(n_c, 1) for name, (sq, n_c) in chsq.items()
                                    if name in exps}
    return exps


class _Quantizer(QuantRules):
    """The quantizer: :class:`~.quant_rules.QuantRules` (its state and every op's rule)
    and :meth:`run`, which applies each float node's rule from its registry entry."""

    def run(self) -> Graph:
        fg = self.fg
        for i in fg.inputs:
            self.q.inputs.append(i)
            self.q.types[i] = fg.types[i]
            self.fname[i] = i
        self.qdq_exps()
        for n in fg.nodes:
            rule = REGISTRY[n.op].quantize if n.op in REGISTRY else None
            if rule is QuantRules.q_real or (n.name in self.keep_real and n.op in KEEPABLE_OPS):
                self.q_real(n)
                continue
            state = (len(self.q.nodes), set(self.q.types), dict(self.qname), dict(self.fname),
                     len(self.rep.qdq), len(self.rep.multipliers), len(self.rep.notes),
                     dict(self.rep.exps), dict(self.rep.shifts))
            try:
                if rule is None:
                    self.unsupported(n)
                rule(self, n)
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
        self.q.meta["float_of"] = ({v: k for k, v in self.qname.items()}
                                   | {v: k[0] for k, v in self.qname_ch.items()})
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
        self.qname_ch = {k: v for k, v in self.qname_ch.items() if v in self.q.types}
        self.rep.exps, self.rep.shifts = exps, shifts
        del self.rep.qdq[nq:], self.rep.multipliers[nm:], self.rep.notes[nnotes:]

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
            sc = (t.real_scale if t.channel_exps is None
                  else 2.0 ** np.asarray(t.channel_exps, np.float64).reshape(1, -1, 1, 1))
            xs.append(np.clip(np.floor(fenv[fi].astype(np.float64) / sc + 0.5), lo, hi)
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
                new = clip_bias(qgraph, node, bq - delta, bq)
                qgraph.constants[node.inputs[2]] = new.astype(np.int32)
                if np.any(new != bq):
                    out[node.name] = bq - new       # what was subtracted, after the clip
        for env in envs:
            for o_, y in zip(node.outputs, run_node(node, [env[i] for i in node.inputs], qgraph)):
                env[o_] = y
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
    """Empirical bias correction, in place: for each ``qconv2d`` / ``qdense`` with int8 or int16
    inputs (power-of-two scales, ``mult`` 1), in graph order, the mean per output channel of its
    pre-activation error -- its exact integer accumulator ``acc + bias`` at exp ``exp_in + exp_w[o]``
    minus the float node's ``conv(x, w) + b`` on the float graph's own input -- is
    subtracted from its int32 bias (rounded to the accumulator's grid; clipped by
    :func:`~.quant_rules.clip_bias`, which keeps an int16 layer's int32 proof).  Earlier layers'
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
                and qgraph.types[node.inputs[0]].dtype in ("int8", "int16")
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
