"""The compiler driver: ONNX -> front half -> partition -> pack/tile/lower -> CompiledModel.

:func:`compile_model` imports and quantizes the model (:func:`~vtaforge.compiler.compile_front`),
places each node (:mod:`.partition`), lowers every VTA node to a relocatable program
(:mod:`.lower_conv`, :mod:`.lower_eltwise`) and returns a
:class:`~vtaforge.runtime.artifact.CompiledModel` that the runtime executor runs and
``save_artifact`` writes as a ``.vtapkg``.  :func:`lower_graph` does the back half alone on
an already quantized and partitioned graph.

Scales: the compiled model's tensor types are ``(dtype, shape, exp, scale)`` with the
integer ``exp`` and the float real ``scale`` (``TensorType.real_scale``: ``2**exp``, or the
exact non-power-of-two scale a QDQ model quantized with ``exact_multiply`` keeps); a CPU
``quantize`` step gets both as attributes.  The runtime's CPU kernels derive their float
factor from ``scale`` (:func:`~vtaforge.runtime.cpu_ops.scale_factor`), bit-exact with the
integer reference.

Host layout steps: a conv lowered over an im2col'd input (few input channels, see
:func:`~.lower_conv.lower_conv`) has its patch tensor built by the executor on the host;
its placement reason and the placement report say "im2col on host".

Row bands (``row_bands=True``, default): a ``qconv2d`` whose only activation input the host
packs (an im2col conv, or a 1x1 stride-1 unpadded conv fed by a CPU step or a graph input)
also gets :class:`~vtaforge.runtime.artifact.RowBands` variants
(:func:`~.lower_conv.lower_conv_bands`, ``Step.bands``): the executor runs it a band of
output rows at a time when a memory budget is below its whole working set.

A VTA node whose lowering fails is not dropped silently: the error propagates
(:class:`CompileError`), unless ``fallback=True``, in which case the node runs on the CPU
and its placement reason says why.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace

import numpy as np

from ..hw.config import VTAConfig, load_config
from ..runtime.artifact import CompiledModel, Step
from .errors import CompileError
from .ir import FLOAT_OPS, LAYOUT_OPS, QUANT_OPS, REAL_OPS, Graph
from .partition import Partition, partition
from .ops import REGISTRY
from .options import LowerOptions
from .passes import optimize
from .quantize import (DEFAULT_MIN_LAYER_COSINE, OUTPUT_AGREEMENT_TARGET,
                       QuantConfig, _Quantizer, bias_correct, calibrate, layer_errors,
                       output_agreement)
from .quant_rules import clip_bias
from .reference import run_float
from .onnx_frontend import _load, declared_input_shapes, import_onnx

__all__ = ["compile_model", "lower_graph", "lower_node", "quant_widths"]


def lower_node(cfg: VTAConfig, graph: Graph, node, uid: str,
               options: LowerOptions | None = None):
    """Lower one VTA-placed node with its registry entry's lowering
    (:data:`~.ops.REGISTRY`) and ``options`` (:class:`~.options.LowerOptions`, default
    ``LowerOptions.for_config(cfg)``); returns ``(LoweredOp, {slot: tensor})``.

    Raises:
        CompileError: the op has no VTA lowering, or the lowering refuses the node.
    """
    d = REGISTRY.get(node.op)
    if d is None or d.lower is None:
        raise CompileError(f"node '{node.name}' ({node.op}): no VTA lowering")
    for t in list(node.inputs) + list(node.outputs):
        shape = graph.types[t].shape if t in graph.types else ()
        sym = [x for x in shape[1:] if not isinstance(x, int)]
        if sym:     # a program has static tile counts: only the batch may stay symbolic
            raise CompileError(f"node '{node.name}' ({node.op}): tensor {t!r} has symbolic "
                               f"dim(s) {sym} beyond the batch")
    return d.lower(cfg, graph, node, uid, LowerOptions.resolve(options, cfg))


def _bands(cfg: VTAConfig, graph: Graph, node, lo, uid: str, vta_y: dict,
           options: LowerOptions | None = None) -> list:
    """The row-band variants of a VTA-placed node (its op's ``bands`` facet,
    :data:`~.ops.REGISTRY`, with ``options`` as for :func:`lower_node`), else ``[]``."""
    spec = REGISTRY.get(node.op)
    return (spec.bands(cfg, graph, node, lo, uid, vta_y, LowerOptions.resolve(options, cfg))
            if spec and spec.bands else [])


def lower_graph(graph: Graph, part: Partition, *, fallback: bool = True,
                name: str | None = None, row_bands: bool = True,
                options: LowerOptions | None = None) -> CompiledModel:
    """Back half: lower a quantized, partitioned graph to a :class:`CompiledModel`
    (``row_bands``: add row-band variants, see the module docstring; ``options``: the
    lowering's :class:`~.options.LowerOptions`, default ``LowerOptions.for_config``)."""
    cfg = part.config
    options = LowerOptions.resolve(options, cfg)
    steps, consts = [], {}
    vta_y: dict = {}                    # tensor -> packed layout of the VTA step writing it
    host_notes: list[str] = []
    failed: dict[str, str] = {}         # node -> why its VTA lowering failed (now CPU)
    for node in graph.nodes:
        pl = part.placements[node.name]
        target, reason = pl.target, pl.reason
        if target == "vta":
            try:
                lo, act = lower_node(cfg, graph, node, f"{graph.name}/{node.name}", options)
            except CompileError as e:
                if not fallback:
                    raise
                target, reason = "cpu", f"VTA lowering failed: {e}"
                failed[node.name] = reason
        if target == "vta":
            slots = dict(act)
            for slot, arr in lo.consts.items():
                cname = f"{node.name}/{slot}"
                consts[cname] = arr
                slots[slot] = cname
            slots["y"] = node.outputs[0]
            ic = lo.layouts["x"].im2col if "x" in lo.layouts else None
            if ic is not None:
                c = lo.layouts["x"].shape[0]
                note = (f"im2col on host ({c}x{ic[0]}x{ic[1]} patch -> "
                        f"{c * ic[0] * ic[1]} channels, {lo.layouts['x'].cb} GEMM block(s) "
                        f"per pixel instead of {-(-c // cfg.BLOCK_IN) * ic[0] * ic[1]})")
                reason = f"{reason}; {note}"
                host_notes.append(f"  host layout step before VTA '{node.name}': {note}")
            bands = (_bands(cfg, graph, node, lo, f"{graph.name}/{node.name}", vta_y, options)
                     if row_bands else [])
            steps.append(Step(node.name, node.op, "vta", list(node.inputs), list(node.outputs),
                              dict(node.attrs), [], slots, lo.layouts, lo.trace, reason,
                              bands))
            vta_y[node.outputs[0]] = lo.layouts["y"]
        else:
            cs = [i for i in node.inputs if i in graph.constants]
            for c in cs:
                consts[c] = graph.constants[c]
            attrs = dict(node.attrs)
            if node.op == "onnx":
                attrs["backend"] = pl.backend
            if node.op == "quantize":
                t = graph.types[node.outputs[0]]
                attrs["exp"], attrs["scale"] = t.exp, t.real_scale
            steps.append(Step(node.name, node.op, "cpu", list(node.inputs), list(node.outputs),
                              attrs, cs, {}, {}, None, reason))
    types = {k: (t.dtype, tuple(t.shape), t.exp, t.real_scale)
             for k, t in graph.types.items() if k not in graph.constants}
    part = part.with_cpu(failed)      # the report and summary say where each node ran
    report = "\n".join([part.report()] + host_notes
                       + [f"  note: {t}" for t in graph.meta.get("notes", [])])
    m = CompiledModel(cfg, name or graph.name, list(graph.inputs), list(graph.outputs), types,
                      steps, consts, {"placement_report": report, "summary": part.summary(),
                                      "notes": list(graph.meta.get("notes", []))})
    return m


def with_agreement_target(qc: QuantConfig, target) -> QuantConfig:
    """``qc`` with ``agreement_target`` replaced by ``target`` (``None``: ``qc`` as is), for
    :func:`compile_model` and :func:`~.dynamic.compile_dynamic`.

    Raises:
        CompileError: ``target`` outside (0, 1], or ``qc`` without the adaptive floor
            (``adaptive_floor`` and ``min_layer_cosine > 0``), which alone uses it.
    """
    if target is None:
        return qc
    qc = replace(qc, agreement_target=target)
    if not (qc.adaptive_floor and qc.min_layer_cosine > 0):
        raise CompileError("agreement_target is the adaptive error floor's goal: the given "
                           "QuantConfig has no adaptive floor (set adaptive_floor=True and "
                           "min_layer_cosine > 0, or leave quant_config to the default)")
    return qc


def compile_model(model, calib_data, config=None, *, quant_config: QuantConfig | None = None,
                  fallback: bool = True, calib_label: str = "calibration data",
                  row_bands: bool = True, options: LowerOptions | None = None,
                  agreement_target: float | None = None) -> CompiledModel:
    """Compile an ONNX model (path, bytes or ModelProto) for a VTA config.

    Args:
        calib_data: calibration inputs (``ndarray`` or ``{input: ndarray}``, batch first).
        config: VTAConfig, preset name or JSON path (default ``pynq``).
        quant_config: quantizer options; default ``QuantConfig(exact_multiply=cfg.ALU_MUL,
            calibration="mse", min_layer_cosine=0.99, bias_correction=True,
            adaptive_floor=True, channel_act_exps=True)`` (exact non-power-of-two QDQ scales where the core has ALU
            MUL, nearest powers of two otherwise; per-channel weight exps where they halve a
            layer's weight error; an int8 layer whose measured cosine against float is below
            0.99 stays a float CPU node, a stricter floor where the model's outputs agree with
            float below 0.99 and it helps; int8 biases corrected on calibration samples)
            with the config's widths (:func:`quant_widths`: int16
            activations / weights on a ``LOG_INP_WIDTH`` / ``LOG_WGT_WIDTH`` 4 core, int4
            activations (the IR dtype ``int4``) on a ``LOG_INP_WIDTH`` 2 core, int4 weights
            on a ``LOG_WGT_WIDTH`` 2 core).
        row_bands: give convs with a host-packed input row-band variants (see the module
            docstring; they let a memory budget go below such a step's working set).
        options: the lowering's choices (:class:`~.options.LowerOptions`; default
            ``LowerOptions.for_config(cfg)``).
        agreement_target: where given, the output agreement with float (cosine, in (0, 1])
            that the per-layer floor aims at (``QuantConfig.agreement_target``, default
            0.99), replacing that of ``quant_config`` or of the default: higher keeps more
            layers float on the CPU, for answers closer to float.  A ``quant_config``
            without the adaptive floor is refused with it (:func:`with_agreement_target`).
    Returns:
        The :class:`CompiledModel`; its attributes ``qgraph`` (quantized graph) and
        ``partition`` are set for in-process use (not saved in artifacts).
    Raises:
        CompileError: unsupported model, bad calibration data, a lowering failure, an
            ``agreement_target`` outside (0, 1] or with a ``quant_config`` that has no
            adaptive floor.
    """
    cfg = load_config(config)
    options = LowerOptions.resolve(options, cfg)
    calib = calib_data
    if isinstance(model, (bytes, bytearray)) or not hasattr(model, "SerializeToString"):
        model = _load(model)
    # symbolic non-batch dims (an OCR model's [N,3,?,?], an audio model's [batch, sequence]):
    # taken from the data, before the import, so that nodes typed by running them (control
    # flow) run at the real sizes
    arrs = calib if isinstance(calib, dict) else (
        {next(iter(declared_input_shapes(model)), ""): calib} if isinstance(calib, np.ndarray) else {})
    shapes = {i: (None,) + tuple(np.shape(arrs[i])[1:])
              for i, dims in declared_input_shapes(model).items()
              if None in dims[1:] and i in arrs and isinstance(arrs[i], np.ndarray)
              and np.ndim(arrs[i]) == len(dims)}
    fg = import_onnx(model, input_shapes=shapes) if shapes else import_onnx(model)
    if not fg.inputs:
        raise CompileError("the model has no inputs (its outputs are constants): there is "
                           "nothing to calibrate or to run on VTA")
    _check_zero_dims(fg, calib, calib_label)
    if isinstance(calib, np.ndarray):
        if len(fg.inputs) != 1:
            raise CompileError(f"model has {len(fg.inputs)} inputs: calibration must be a dict")
        t = fg.types[fg.inputs[0]]
        _check_calib(fg.inputs[0], t.shape, calib, calib_label, t.dtype)
        if t.rank == 0:
            # a scalar input carries no batch: the array is the one sample, run as given
            calib, n_samples = {fg.inputs[0]: calib}, None
        else:
            n_samples = len(calib)
    elif isinstance(calib, dict) and _one_static_sample(fg, calib):
        n_samples = None     # all inputs static, the data has exactly their shapes: one run
    elif isinstance(calib, dict):
        n_samples = _check_calib_dict(fg, calib, calib_label)
    else:
        raise CompileError(f"{calib_label} must be an ndarray or a dict {{input name: "
                           f"ndarray}}, not {type(calib).__name__}")
    qc = quant_config or QuantConfig(exact_multiply=bool(cfg.ALU_MUL), calibration="mse",
                                     min_layer_cosine=DEFAULT_MIN_LAYER_COSINE, bias_correction=True,
                                     adaptive_floor=True, channel_act_exps=True,
                                     **quant_widths(cfg, fg))
    qc = with_agreement_target(qc, agreement_target)
    b0 = fg.types[fg.inputs[0]].shape[0] if fg.types[fg.inputs[0]].shape else None
    if n_samples is None:
        qc = replace(qc, batch_size=1 << 62)
    elif isinstance(b0, int):
        # a fixed-batch model: feed the calibration samples in model-sized batches
        n = (n_samples // b0) * b0
        if n == 0:
            raise CompileError(f"{calib_label} has {n_samples} sample(s); the model's batch "
                               f"is {b0}")
        calib = (calib[:n] if isinstance(calib, np.ndarray)
                 else {k: v[:n] for k, v in calib.items()})
        qc = replace(qc, batch_size=b0)
    fg.meta.setdefault("notes", []).extend(calib_range_notes(fg, calib, calib_label))
    fg = optimize(fg)
    q, part = quantize_placed(fg, calibrate(fg, calib, qc), qc, cfg,
                              feeds=_error_feeds(fg, calib, b0 if isinstance(b0, int) else None,
                                                 n_samples is None))
    cm = lower_graph(q, part, fallback=fallback, row_bands=row_bands, options=options)
    cm.qgraph = q
    cm.partition = part
    return cm


def quantize_placed(fg: Graph, exps: dict, qc: QuantConfig, cfg: VTAConfig,
                    max_rounds: int = 4, feeds: dict | None = None,
                    measured: dict | None = None) -> tuple[Graph, Partition]:
    """Quantize an optimized float graph with calibrated ``exps`` and partition it, keeping
    real-valued every node whose int8 form the partitioner would place on the CPU, or whose
    int8 form is measured too inexact.

    BYOC order: VTA takes what it can, and only what VTA runs needs its integer form (for
    a float model quantized to int8; a QDQ model, 4-bit widths and 16-bit weights are
    quantized as they are, in one round; int16 activations with int8 weights take the
    measured fallbacks below, but their CPU steps stay integer: at 16 bits an integer CPU
    step is exact to float within ``2**-15`` of its range, and it is the bit-exact
    reference of the VTA steps around it).  An
    int8 node on the CPU (a multiply on a core without ALU_MUL, an add on a rank-3 tensor,
    a LayerNorm's arithmetic) would only add rounding error, so such a node (an op of
    :data:`~.ir.REAL_OPS`) is quantized again as a float CPU node, and the partition is
    redone until no new node moves (at most ``max_rounds`` rounds; each is one quantizer
    rewrite, no calibration run).  The placement reason of a node kept real says why its
    int8 form was not placed on VTA.

    Per-layer error fallback: with ``feeds`` (a few calibration samples) and
    ``qc.min_layer_cosine > 0``, each integer node's local error is measured
    (:func:`~.quantize.layer_errors`: its output against the float node's, both fed the
    float graph's inputs) and a node below ``min_layer_cosine`` is kept real-valued on the
    CPU too, its reason naming the measured cosine; with ``qc.adaptive_floor``, where the
    graph's outputs then agree with float below
    ``qc.agreement_target`` on those samples
    (:func:`~.quantize.output_agreement`), the floor is raised until they do: the fewest
    worst-measured layers kept real that reach it (:func:`search_floor`); with
    ``qc.bias_correction`` the int8 biases are corrected on them
    (:func:`~.quantize.bias_correct`, guarded end to end).  ``q.meta["measured"]``
    records both (``{"keep": {node: reason}, "bias": {node: int64 delta [O]}}``); passing
    such a record as ``measured`` (and no ``feeds``) applies it instead of measuring: a
    :class:`~.dynamic.DynamicModel` measures at its calibration shape and applies the result
    at every shape it specialises (node names do not depend on the shape).

    Returns:
        ``(quantized graph, partition)``.
    Raises:
        CompileError: as :func:`~.quantize.quantize` and :func:`~.partition.partition`.
    """
    qdq = any(n.op == "fake_quant" for n in fg.nodes)
    wide = (qc.act_bits, qc.wgt_bits) == (16, 8)
    if qdq or ((qc.act_bits, qc.wgt_bits) != (8, 8) and not wide):
        # a QDQ model's integer CPU steps are what onnxruntime's QDQ kernels compute, and a
        # 4-bit or 16-bit-weight core's integer CPU steps are its bit-exact reference: keep
        # them integer
        q = _Quantizer(fg, exps, qc).run()
        return q, partition(q, cfg)
    form = "int16-activation" if wide else "int8"
    real_ok = {n.name for n in fg.nodes if n.op in REAL_OPS}
    keep: dict[str, str] = {}
    if measured is not None:
        keep.update({n: why for n, why in measured.get("keep", {}).items() if n in real_ok})

    def settle():
        for k in range(max_rounds + 1):
            q = _Quantizer(fg, exps, qc, frozenset(keep)).run()
            part = partition(q, cfg)
            more = {p.node: p.reason for p in part.placements.values()
                    if p.target == "cpu" and p.node in real_ok and p.node not in keep
                    and p.op in QUANT_OPS and p.op not in FLOAT_OPS}
            if wide:
                more = {}       # int16 CPU steps stay integer: exact, and no less accurate
            if not more or k == max_rounds:
                return q
            keep.update({n: f"kept real-valued: its int8 form runs on the CPU ({why})"
                         for n, why in more.items()})

    _keep_layout_between_real(fg, keep)
    q = settle()
    if _keep_layout_between_real(fg, keep):
        q = settle()
    err_keep: dict[str, str] = {}
    batches = feeds if isinstance(feeds, list) else [feeds]
    fenvs = ([run_float(fg, f, keep_all=True) for f in batches]    # once: floor and correction
             if feeds is not None and (qc.adaptive_floor or qc.bias_correction) else None)
    if feeds is not None and qc.min_layer_cosine > 0:
        errs = layer_errors(fg, q, feeds)
        before = dict(keep)

        def floored(thr: float) -> tuple[Graph, dict, dict]:
            k2 = dict(before)
            bad = {n: f"kept real-valued: its {form} error is too large (cosine {c:.4f} < {thr:.4g} "
                      f"against float on calibration data)"
                   for n, c in errs.items() if c < thr and n in real_ok and n not in before}
            k2.update(bad)
            if bad:
                _keep_layout_between_real(fg, k2)
            keep.clear()
            keep.update(k2)
            return (settle() if bad else q), k2, bad
        q, keep_now, err_keep = floored(qc.min_layer_cosine)
        if qc.adaptive_floor:
            best = output_agreement(q, batches, fenvs)
            eligible = {n for n in real_ok if n not in keep_now}

            def trial(thr: float):
                r = floored(thr)
                return output_agreement(r[0], batches, fenvs), r
            pick = search_floor(errs, eligible, qc.min_layer_cosine, best, trial,
                                qc.agreement_target)
            if pick is not None:
                q, keep_now, err_keep = pick
            keep.clear()
            keep.update(keep_now)
    elif measured is not None:
        err_keep = {n: keep[n] for n in measured.get("keep", {}) if n in keep}
    rep = q.meta["quant_report"]
    deltas = _correct_biases(fg, q, qc, feeds, fenvs, measured)
    q.meta["measured"] = {"keep": err_keep, "bias": deltas}
    for k, why in keep.items():
        rep.fallbacks.setdefault(k, why)
    # the reasons reach the placement table through the quantizer's report
    return q, partition(q, cfg)


def search_floor(errs: dict[str, float], eligible: set, floor: float, base: float,
                 trial: Callable[[float], tuple[float, object]],
                 target: float = OUTPUT_AGREEMENT_TARGET) -> object:
    """The loosest per-layer error floor above ``floor`` whose graph's outputs agree with
    float at ``target`` (``QuantConfig.adaptive_floor`` and ``agreement_target``; default
    :data:`~.quantize.OUTPUT_AGREEMENT_TARGET`).

    ``errs``: each integer node's local cosine (:func:`~.quantize.layer_errors`);
    ``eligible``: the nodes that may be kept real-valued; ``base``: the agreement at
    ``floor``; ``trial(thr)`` quantizes with every eligible node below ``thr`` kept real and
    returns ``(agreement, result)``.  The candidate floors lie just above each eligible
    node's cosine (midway to the next), so the k-th keeps the k worst layers real.  With every candidate layer
    real the agreement is ``a_all``; the goal is ``min(target, a_all - 0.002)``, and the
    fewest worst layers that reach it are found by bisection (agreement rises with the
    layers kept real, near enough: ``log2`` of the candidates' count trials).  Returns the
    chosen trial's ``result``, or None to keep ``floor``: the outputs already agree, no
    layer is eligible, or keeping all of them real gains less than 0.005.
    """
    cands = sorted({c for n, c in errs.items() if n in eligible and c >= floor})
    if base >= target or not cands:
        return None
    thr = [(a + b) / 2 for a, b in zip(cands, cands[1:] + [1.0])]
    top_a, top = trial(thr[-1])
    if top_a < base + 0.005:
        return None
    goal = min(target, top_a - 0.002)
    lo, hi, pick = 0, len(thr) - 1, top
    while lo < hi:
        mid = (lo + hi) // 2
        a, r = trial(thr[mid])
        if a >= goal:
            hi, pick = mid, r
        else:
            lo = mid + 1
    return pick


def _correct_biases(fg: Graph, q: Graph, qc: QuantConfig, feeds, fenvs, measured) -> dict:
    """:func:`quantize_placed`'s bias step, in place on ``q``: measured on ``feeds``
    (:func:`~.quantize.bias_correct`, with the float runs ``fenvs``) where
    ``qc.bias_correction``, else a ``measured`` record's deltas applied; a note in the
    report.  Returns ``node -> int64 [O]``, the amounts subtracted."""
    deltas: dict = {}
    if feeds is not None and qc.bias_correction:
        bias_correct(fg, q, feeds, deltas=deltas, fenvs=fenvs)
    elif measured is not None:
        deltas = _apply_bias_deltas(q, measured.get("bias", {}))
    if deltas:
        q.meta["quant_report"].notes.append(
            f"bias correction: {sum(int(np.count_nonzero(d)) for d in deltas.values())} "
            f"channel(s) of {len(deltas)} conv/dense layer(s)")
    return deltas


def _apply_bias_deltas(q: Graph, deltas: dict) -> dict:
    """Subtract recorded bias corrections (``node -> int64 [O]``, :func:`quantize_placed`'s
    ``measured``) from the int32 biases of the conv/dense nodes of ``q`` of that name and
    output-channel count (clipped by :func:`~.quant_rules.clip_bias`: int32, and for int16
    activations the accumulator proof); returns ``node -> int64 [O]``, the amounts
    subtracted after the clip."""
    done = {}
    for n in q.nodes:
        d = deltas.get(n.name)
        if d is None or n.op not in ("qconv2d", "qdense"):
            continue
        b = q.constants[n.inputs[2]]
        if b.shape != np.shape(d):
            continue
        old = b.astype(np.int64)
        new = clip_bias(q, n, old - d, old)
        q.constants[n.inputs[2]] = new.astype(np.int32)
        done[n.name] = old - new
    return done


def _keep_layout_between_real(fg: Graph, keep: dict) -> bool:
    """Add to ``keep`` (node -> reason) every layout op (reshape, flatten, transpose,
    concat, pad, upsample) whose inputs come from real-valued nodes (kept float, or ONNX
    nodes) and whose consumers are real-valued or graph outputs, directly or through other
    such layout ops: in int8 it would only add a quantize / dequantize round trip between
    float CPU nodes (or before the model's float output: a detector's box regression
    reshaped and transposed to the output lost a quarter of its cosine to that rounding).
    The largest such set (candidates with a non-real neighbour are dropped until none
    is).  Returns whether any node was added."""
    prod = fg.producers()
    cons = fg.consumers()
    outs = set(fg.outputs)
    cand = {n.name for n in fg.nodes if n.op in LAYOUT_OPS and n.name not in keep}

    def real(n) -> bool:
        return n.op == "onnx" or n.name in keep or n.name in cand
    nodes = [n for n in fg.nodes if n.name in cand]
    changed = True
    while changed:
        changed = False
        for n in nodes:
            if n.name not in cand:
                continue
            ins = [prod.get(i) for i in n.inputs if i not in fg.constants]
            users = [c for o in n.outputs for c in cons.get(o, [])]
            # a graph output counts as a real-valued consumer: the model returns floats
            to_output = any(o in outs for o in n.outputs)
            if not (ins and (users or to_output) and all(p is not None and real(p) for p in ins)
                    and all(real(c) for c in users)):
                cand.discard(n.name)
                changed = True
    for n in nodes:
        if n.name in cand:
            keep[n.name] = "kept real-valued: a layout op between real-valued CPU nodes"
    return bool(cand)


def _error_feeds(fg: Graph, calib, fixed_batch: int | None, one_run: bool,
                 n: int = 4) -> dict | list:
    """The calibration samples :func:`quantize_placed` measures layer errors on: the first
    ``n`` (a fixed-batch model's first ``ceil(n / batch)`` batches, as a list of feeds; all
    of static data calibrated in one run)."""
    data = calib if isinstance(calib, dict) else {fg.inputs[0]: calib}
    if one_run:
        return dict(data)
    if fixed_batch is not None:
        m = min(-(-n // fixed_batch), max(1, min(len(np.asarray(v)) for v in data.values())
                                          // fixed_batch))
        return [{i: np.asarray(v)[j * fixed_batch:(j + 1) * fixed_batch] for i, v in data.items()}
                for j in range(m)]
    k = n

    def batched(i) -> bool:     # inputs whose dim 0 is the batch (not a state or a scalar)
        t = fg.types.get(i)
        return t is not None and t.rank > 0 and (isinstance(t.shape[0], str)
                                                  or t.shape[0] == fixed_batch)
    return {i: np.asarray(v)[:k] if batched(i) else v for i, v in data.items()}


def quant_widths(cfg: VTAConfig, fg: Graph | None = None) -> dict:
    """``{"act_bits", "wgt_bits"}`` for quantizing to ``cfg``: its ``INP_WIDTH`` and
    ``WGT_WIDTH`` (4, 8 or 16).  A QDQ float graph (``fake_quant`` nodes: int8 scales) gets 8
    and 8 whatever the core: its int8 nodes then run on the CPU of a 16-bit core, each with
    the width reason (a valid model is never refused)."""
    if fg is not None and any(n.op == "fake_quant" for n in fg.nodes):
        return {"act_bits": 8, "wgt_bits": 8}
    return {"act_bits": int(cfg.INP_WIDTH), "wgt_bits": int(cfg.WGT_WIDTH)}


def _one_static_sample(fg, calib: dict) -> bool:
    """True when every model input has a static shape and ``calib`` holds exactly one array
    of that shape and dtype kind per input (a model whose inputs are not batch-aligned, such
    as a node test with a data tensor and a parameter tensor, is calibrated in one run)."""
    if set(calib) != set(fg.inputs):
        return False
    for k in fg.inputs:
        t, x = fg.types[k], calib[k]
        if not (isinstance(x, np.ndarray) and t.is_concrete() and tuple(x.shape) == tuple(t.shape)):
            return False
        if (t.dtype == "float32") != (x.dtype.kind == "f"):
            return False
    return True


def _check_calib_dict(fg, calib: dict, label: str) -> int:
    """Check ``{input name: ndarray}`` calibration data: exactly the graph's inputs, each
    one passing :func:`_check_calib` (float dtype, shape, non-empty, finite), all with the
    same number of samples.  Returns that number, or None when some input carries no samples
    (a scalar, or a fixed dim 0 beside a batched input: a recurrent model's state), which
    calibrates in one run on the data as given.  Raises CompileError naming the input."""
    missing = [k for k in fg.inputs if k not in calib]
    if missing:
        raise CompileError(f"{label} lacks model input(s) {missing}; it has {sorted(calib)}")
    extra = [k for k in calib if k not in fg.inputs]
    if extra:
        raise CompileError(f"{label} has unknown input(s) {extra}; inputs: {list(fg.inputs)}")
    counts = {}
    batched = any(fg.types[j].shape and not isinstance(fg.types[j].shape[0], int) for j in fg.inputs)
    for k in fg.inputs:
        x = calib[k]
        if not isinstance(x, np.ndarray):
            raise CompileError(f"{label} for {k!r} must be an ndarray, not {type(x).__name__}")
        _check_calib(k, fg.types[k].shape, x, label, fg.types[k].dtype)
        shape = fg.types[k].shape
        if x.ndim and not (batched and isinstance(shape[0], int)):
            counts[k] = int(x.shape[0])     # a scalar (a sample rate) or a fixed-dim-0 state
    if len(set(counts.values())) > 1:       # beside a batched input carries no samples
        raise CompileError(f"{label} inputs have different sample counts: {counts}")
    if len(counts) < len(fg.inputs):        # such inputs: one calibration run on the data as given
        return None
    return next(iter(counts.values()))


def _check_zero_dims(fg, calib, label: str) -> None:
    """Refuse a model input declared with a fixed dimension of 0 (a zero-size tensor, such
    as ``[0, 4]``): it carries no values to calibrate the quantizer on, and onnxruntime
    takes no other size for it (a ``[1, 4]`` input is refused there as well).  Raises
    CompileError naming the input, the zero dim and the data's shape."""
    for k in fg.inputs:
        shape = fg.types[k].shape
        zero = [j for j, d in enumerate(shape) if isinstance(d, int) and d == 0]
        if not zero:
            continue
        x = calib.get(k) if isinstance(calib, dict) else calib if len(fg.inputs) == 1 else None
        got = (f"; {label} has shape {list(np.shape(x))}" if isinstance(x, np.ndarray)
               and tuple(np.shape(x)) != tuple(shape) else "")
        raise CompileError(f"model input {k!r} is declared {list(shape)}: dim {zero[0]} is 0 "
                           f"(a zero-size tensor), which has no values to calibrate or run on "
                           f"VTA{got}")


#: Calibration magnitudes above this are noted as a likely unit error (raw int16 audio
#: reaches 32,768 and 8-bit images 255; a range of 1e6 or more is rarely meant).
CALIB_RANGE_NOTE = 1e6


def calib_range_notes(fg: Graph, calib, label: str = "calibration data") -> list[str]:
    """Notes (for the placement report) on float calibration inputs whose range makes the
    int8 steps meaningless: every value 0 (each activation range is 0, so every step is
    the smallest one and real inputs clip at its +-127 steps), or a largest magnitude of
    :data:`CALIB_RANGE_NOTE` or more (real inputs much smaller than that round to 0).
    ``calib``: an ndarray (a one-input model) or ``{input name: ndarray}``; inputs of
    other dtypes (indices, masks) are not checked."""
    arrs = calib if isinstance(calib, dict) else {fg.inputs[0]: calib}
    notes = []
    for k, x in arrs.items():
        if k not in fg.types or fg.types[k].dtype != "float32" or not np.size(x):
            continue
        m = float(np.max(np.abs(x)))
        if m == 0:
            notes.append(f"{label} for {k!r} is all zeros: every int8 range derived from it "
                         f"is empty, so real inputs will clip; calibrate on real samples")
        elif m >= CALIB_RANGE_NOTE:
            notes.append(f"{label} for {k!r} reaches {m:.3g}: inputs much smaller than that "
                         f"round to 0 in int8; check the data's units (calibrate on samples "
                         f"like those the model will run on)")
    return notes


def _check_calib(name, shape, x: np.ndarray, label: str = "calibration data",
                 dtype: str = "float32") -> None:
    if dtype == "float32" and x.dtype.kind != "f":
        raise CompileError(f"{label} for {name!r} has dtype {x.dtype}, expected float")
    if dtype != "float32":          # indices, masks: only CPU ONNX nodes read them
        if x.dtype.kind != np.dtype(dtype).kind:
            raise CompileError(f"{label} for {name!r} has dtype {x.dtype}, expected {dtype}")
        if x.ndim != len(shape) or (x.ndim and x.shape[0] == 0):
            raise CompileError(f"{label} for {name!r} has shape {list(x.shape)}, expected "
                               f"{list(shape)}")
        return
    if x.ndim != len(shape) or any(isinstance(d, int) and d != s
                                   for d, s in zip(shape[1:], x.shape[1:])):
        raise CompileError(f"{label} for {name!r} has shape {list(x.shape)}, expected "
                           + (f"{list(shape)} (any number of samples first)" if shape
                              else "a scalar (shape [], one sample)"))
    if x.ndim and x.shape[0] == 0:     # (a scalar input's array is its one sample)
        raise CompileError(f"{label} for {name!r} has no samples (shape {list(x.shape)})")
    if not np.isfinite(x).all():
        raise CompileError(f"{label} for {name!r} contains NaN or infinity "
                           f"({int(np.count_nonzero(~np.isfinite(x)))} value(s)); the "
                           f"quantization ranges would be meaningless")
