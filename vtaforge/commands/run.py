"""``vtaforge run``: compile and run a model on a VTA backend.

Without arguments it runs the main job on the bundled digits CNN (see docs/cli.md):
quantize with the training images, lower to VTA, run the 500 held-out images on fsim at the
``pynq`` preset, and report placement, int8-on-VTA vs float accuracy, bit-exactness against
the independent integer reference, and per-image statistics.
"""

from __future__ import annotations

import time
from pathlib import Path

import click
import numpy as np

from ._inputs import (agreement_option, check_agreement, check_arity, compiling, read_array,
                      read_artifact, read_config, read_onnx)
from ._output import echo_over, progress_bar, progress_enabled, step_postfix

CHUNK = 50   # images per executor run in the main job


def _n_samples(x) -> int:
    v = next(iter(x.values())) if isinstance(x, dict) else x
    return int(v.shape[0]) if getattr(v, "ndim", 0) else 1


def _check_names(xs: list, paths, inputs: list) -> None:
    """Every ``.npz`` input names only model inputs (an array under another name would be
    ignored: a misnamed input is refused, as calibration refuses it).  Raises DeviceError
    with one line naming the file, the unknown names and the model's inputs."""
    from ..runtime.device import DeviceError

    for x, path in zip(xs, paths):
        extra = [k for k in x if k not in inputs] if isinstance(x, dict) else []
        if extra:
            raise DeviceError(f"input {path!r} has unknown input(s) {extra}; the model's "
                              f"inputs: {list(inputs)}")


def _fixed_batch(cm) -> int | None:
    """The fixed batch of a compiled model's first input (an exporter's ``[1, 3, H, W]``),
    or ``None`` when it is symbolic."""
    shape = cm.types[cm.inputs[0]][1]
    return shape[0] if shape and isinstance(shape[0], int) else None


def _main_job(config_spec: str, target: str, progress: bool = False) -> None:
    import onnxruntime as ort

    from ..compiler.compile import compile_model
    from ..compiler.models import DIGITS_ONNX, load_digits_split
    from ..compiler.reference import run_quantized
    from ..runtime.bundle import make_device
    from ..runtime.executor import Executor

    cfg = read_config(config_spec)
    xtr, _ytr, xte, yte = load_digits_split()
    t0 = time.perf_counter()
    cm = compile_model(str(DIGITS_ONNX), xtr, cfg)
    t_compile = time.perf_counter() - t0
    click.echo(f"digits CNN: compiled for {cfg.bitstream_name} in {t_compile:.2f} s "
               f"(calibrated on {len(xtr)} training images)")
    click.echo("placement:")
    click.echo(cm.placement_table())
    dev = make_device(target, cfg)
    ex = Executor(cm, dev)
    outs = []
    t0 = time.perf_counter()
    with progress_bar(total=len(xte), desc=f"VTA ({target}, {cfg.bitstream_name})", unit="img",
                      enabled=progress) as bar:
        for i in range(0, len(xte), CHUNK):
            r = ex.run(xte[i:i + CHUNK], keep=True)
            outs.append(r)
            bar.update(len(xte[i:i + CHUNK]))
    t_run = time.perf_counter() - t0
    out_name = cm.outputs[0]
    q_name = [s for s in cm.steps if s.outputs[0] == out_name][0].inputs[0]
    vta_logits = np.concatenate([o[out_name] for o in outs])
    vta_q = np.concatenate([o[q_name] for o in outs])
    ref = run_quantized(cm.qgraph, {cm.inputs[0]: xte}, keep_all=True)
    sess = ort.InferenceSession(str(DIGITS_ONNX), providers=["CPUExecutionProvider"])
    fl = sess.run(None, {sess.get_inputs()[0].name: xte})[0]
    acc_f = float(np.mean(fl.argmax(1) == yte))
    acc_v = float(np.mean(vta_logits.argmax(1) == yte))
    exact = {}
    for s in cm.steps:
        if s.target == "vta":
            got = np.concatenate([o[s.outputs[0]] for o in outs])
            exact[s.name] = bool(np.array_equal(got, ref[s.outputs[0]]))
    all_exact = all(exact.values()) and np.array_equal(vta_q, ref[q_name])
    n = len(xte)
    c = cm.config
    wl = (f"int{c.INP_WIDTH}" if c.INP_WIDTH == c.WGT_WIDTH
          else f"int{c.INP_WIDTH} (weights int{c.WGT_WIDTH})")
    click.echo(f"accuracy on {n} held-out images: {wl} on VTA {acc_v:.2%}   "
               f"float (onnxruntime) {acc_f:.2%}   difference {100 * (acc_v - acc_f):+.1f} points")
    click.echo(f"VTA outputs equal the numpy integer reference bit for bit: "
               f"{'yes' if all_exact else 'NO'} "
               f"({', '.join(f'{k}={v}' for k, v in exact.items())})")
    click.echo(f"run: {t_run:.2f} s wall for {n} images ({1000 * t_run / n:.2f} ms/image)")
    click.echo("per-image statistics (VTA steps):")
    click.echo(f"  {'step':<10} {'insns':>8} {'GEMM uops':>10} {'ideal':>8} {'ALU uops':>9} "
               f"{'DRAM bytes':>11}")
    tot = [0, 0, 0, 0]
    for s in cm.steps:
        if s.target != "vta":
            continue
        st = ex.stats[s.name]
        ideal = s.trace.stats.get("gemm_uops_ideal", 0) / cfg.BATCH
        row = [st.insns / n, st.gemm_uops / n, st.alu_uops / n, st.dram_bytes / n]
        tot = [a + b for a, b in zip(tot, row)]
        click.echo(f"  {s.name:<10} {row[0]:>8.1f} {row[1]:>10.1f} {ideal:>8.0f} {row[2]:>9.1f} "
                   f"{row[3]:>11.1f}")
    click.echo(f"  {'total':<10} {tot[0]:>8.1f} {tot[1]:>10.1f} {'':>8} {tot[2]:>9.1f} "
               f"{tot[3]:>11.1f}")
    if target in ("rtl", "pynq"):      # the core's cycle counter per step (docs/cli.md)
        from .profile import step_cycles_lines

        lines = step_cycles_lines(cm, ex.stats)
        click.echo(f"{lines[0]} for {n} images ({_per_image(ex, cm, n)} per image)")
        for ln in lines[1:]:
            click.echo(ln)
    if not all_exact:
        raise SystemExit(1)


def _per_image(ex, cm, n: int) -> str:
    """The VTA steps' core cycles per image (``ex.stats`` summed over ``n`` images)."""
    tot = sum(int(ex.stats[s.name].cycles) for s in cm.steps if s.target == "vta")
    return f"{tot / n:,.0f}" if n else "-"


class _ByteSize(click.ParamType):
    """A byte count: 3145728, 3MiB, 2.5MB, 512K (``runtime.dtr.parse_bytes``)."""

    name = "BYTES"

    def convert(self, value, param, ctx):
        if value is None or isinstance(value, int):
            return value
        from ..runtime.dtr import parse_bytes

        try:
            return parse_bytes(value)
        except ValueError as e:
            self.fail(str(e), param, ctx)


def _budget_line(ex) -> str | None:
    """One line of the DTR report of an executor built with a memory budget."""
    if getattr(ex, "memory_budget", None) is None:
        return None
    r = ex.dtr_report()
    extra = (f"{100 * r['cycles_overhead']:+.1f} % core cycles" if r.get("cycles_base")
             else f"{100 * r['gemm_uops_overhead']:+.1f} % GEMM micro-ops")
    b = r.get("bands") or {}
    bands = (f", {len(b)} step(s) in row bands ("
             + ", ".join(f"{k}: {v} bands" for k, v in b.items()) + ")") if b else ""
    return (f"memory budget {r['budget']:,} B: peak {r['peak']:,} B (liveness peak "
            f"{r['liveness_peak']:,} B, minimum {r['min_working_set']:,} B); "
            f"{r['evictions']} eviction(s), {r['recomputes']} recomputed step(s){bands}; "
            f"overhead {100 * r['est_overhead']:+.1f} % estimated cycles, {extra}")


@click.command("run")
@click.option("--model", "model_path", default=None,
              help="FILE.onnx or MODEL.vtapkg (default: the main job on the bundled digits CNN)")
@click.option("--input", "input_paths", multiple=True,
              help="input .npy (float, batch first), or .npz with one array per model input; "
                   "repeat it to run several inputs (of different H x W for a model declared "
                   "[N,C,H,W]) from one compile")
@click.option("--calibrate", "calib_path", default=None,
              help="calibration .npy (any number of samples, batch first; default: the input)")
@click.option("--output", "output_path", default=None,
              help="write the first output to this .npy (float outputs in the model's dtype, others as float32)")
@click.option("--config", "config_spec", default=None,
              help="preset name or vta_config.json file  [default: a .vtapkg's own config, "
                   "else pynq]")
@click.option("--target", default="fsim", show_default=True, help="backend: fsim, rtl or pynq (on the board)")
@click.option("--cache-size", default=8, show_default=True, type=click.IntRange(min=1),
              help="input shapes kept specialised at once (several --input)")
@click.option("--memory-budget", "memory_budget", default=None, type=_ByteSize(),
              help="at most BYTES of device activation memory live at once (3MiB, 512K, "
                   "2.5MB or a plain count): activations are evicted and recomputed (DTR) "
                   "to stay under it, bit-exact; refused below the largest step's working set "
                   "(needs --model)")
@agreement_option
@click.option("--no-progress", is_flag=True,
              help="no progress bar (none either when stderr is not a terminal)")
def run_cmd(model_path, input_paths, calib_path, output_path, config_spec, target,
            cache_size, memory_budget, agreement_target, no_progress) -> None:
    """Compile (if ONNX) and run a model on VTA; without --model, run the digits main job."""
    from ..runtime.bundle import TARGETS, make_device
    from ..runtime.device import DeviceError

    if target not in TARGETS:
        raise DeviceError(f"unknown target {target!r}; allowed: {', '.join(TARGETS)}")
    if model_path is None:
        if (input_paths or calib_path or output_path is not None or memory_budget is not None
                or agreement_target is not None):
            raise DeviceError("--input/--calibrate/--output/--memory-budget/--agreement-target "
                              "need --model")
        _main_job(config_spec or "pynq", target, progress_enabled(no_progress))
        return
    if config_spec is None:
        config_spec = _artifact_config(model_path) or "pynq"
    if not input_paths:
        raise DeviceError("--model needs --input X.npy")
    check_agreement(model_path, agreement_target)
    if len(input_paths) > 1:
        if output_path is not None:
            raise DeviceError(f"--output takes one --input; got {len(input_paths)}")
        _run_many(model_path, read_config(config_spec), calib_path, input_paths, target,
                  cache_size, memory_budget, progress_enabled(no_progress), agreement_target)
        return
    input_path = input_paths[0]
    if output_path is not None:
        from ._output import check_output_path

        check_output_path(output_path, "--output")
    cfg = read_config(config_spec)
    x = read_array(input_path, "input")
    cm = _get_model(model_path, cfg, calib_path, x, input_path, agreement_target)
    _check_names([x], [input_path], cm.inputs)
    from ..runtime.executor import Executor

    click.echo("placement:")
    click.echo(cm.placement_table())
    ex = Executor(cm, make_device(target, cfg), memory_budget=memory_budget)
    if memory_budget is not None:   # refuse with the figure for this input, before any work
        ex.plan_budget(_fixed_batch(cm) or _n_samples(x))
    t0 = time.perf_counter()
    shown = progress_enabled(no_progress)
    with compiling(model_path, f"input {input_path!r}"), \
            progress_bar(total=_n_samples(x), desc=f"{cm.name} ({target})", unit="sample",
                         enabled=shown, leave=False) as bar:
        ex.on_step = step_postfix(bar, shown)
        out = _run_batches(ex.run, _fixed_batch(cm), x, bar)
    dt = time.perf_counter() - t0
    host = sum(st.host_seconds for st in ex.stats.values())
    y = _output_array(out[cm.outputs[0]])
    if output_path:
        from ..runtime.npz import atomic_open

        with atomic_open(output_path) as f:  # exactly this path (np.save(path) adds .npy)
            np.save(f, y)
    nv = sum(1 for s in cm.steps if s.target == "vta")
    click.echo(f"{cm.name}: {_n_samples(x)} sample(s) on {target} ({cfg.bitstream_name}) in {dt:.2f} s; "
               f"{nv}/{len(cm.steps)} steps on VTA, {host:.3f} s in CPU steps; output "
               f"{cm.outputs[0]} {list(y.shape)}" + (f" -> {output_path}" if output_path else ""))
    line = _budget_line(ex)
    if line:
        click.echo(line)
    if target in ("rtl", "pynq"):      # the core's cycle counter per step, last (docs/cli.md)
        from .profile import step_cycles_lines

        for ln in step_cycles_lines(cm, ex.stats):
            click.echo(ln)


def _output_array(v) -> np.ndarray:
    """A model output as written by ``--output``: a float output keeps its dtype (a float64
    model's output stays float64), any other is converted to float32."""
    y = np.asarray(v)
    return y if y.dtype.kind == "f" else y.astype(np.float32)


def _describe(y: np.ndarray) -> str:
    """A short summary of an output: its shape, and the argmax per sample for ``[N, K]``."""
    s = f"{list(y.shape)}"
    if y.ndim == 2 and y.shape[1] > 1:
        am = y.argmax(1)
        s += f" argmax {am[:8].tolist()}" + (" ..." if len(am) > 8 else "")
    else:
        s += f" mean {float(y.mean()):.4g} max |y| {float(np.abs(y).max()):.4g}"
    return s


def _shape_of(x) -> str:
    if isinstance(x, dict):
        return ", ".join(f"{k} {list(np.shape(v))}" for k, v in x.items())
    return "x".join(str(d) for d in np.shape(x))


def _run_many(model_path: str, cfg, calib_path, input_paths, target: str,
              cache_size: int, memory_budget: int | None = None,
              progress: bool = False, agreement_target: float | None = None) -> None:
    """Several ``--input`` files from one compile in one process.

    An ONNX model is compiled once with :func:`~vtaforge.compiler.dynamic.compile_dynamic`
    (calibrated on ``--calibrate`` or on every input, each at its own size) and run through
    a :class:`~vtaforge.runtime.shapes.ShapeRunner` (one specialised model and executor per
    input shape, at most ``cache_size`` kept, on one device); per input it prints the shape,
    the output and whether the shape was specialised or cached, then the cache statistics.
    A ``.vtapkg`` (one static shape) runs every input through one executor.
    """
    from ..runtime.bundle import make_device
    from ..runtime.device import DeviceError

    xs = [read_array(p, "input") for p in input_paths]
    p = Path(model_path)
    dev = None
    if p.suffix == ".vtapkg":
        if calib_path:
            raise DeviceError("--calibrate applies to ONNX models; a .vtapkg is already "
                              "quantized (recompile it with vtaforge compile --calibrate)")
        from ..runtime.executor import Executor

        cm = read_artifact(str(p), cfg)
        for x, path in zip(xs, input_paths):
            check_arity(x, path, "input", cm.inputs)
        _check_names(xs, input_paths, cm.inputs)
        click.echo("placement:")
        click.echo(cm.placement_table())
        dev = make_device(target, cfg)
        ex = Executor(cm, dev, memory_budget=memory_budget)
        if memory_budget is not None:
            for x in xs:
                ex.plan_budget(_fixed_batch(cm) or _n_samples(x))
        with progress_bar(total=sum(_n_samples(x) for x in xs), desc=f"{cm.name} ({target})",
                          unit="sample", enabled=progress, leave=False) as bar:
            ex.on_step = step_postfix(bar, progress)
            for path, x in zip(input_paths, xs):
                t0 = time.perf_counter()
                out = _run_batches(ex.run, _fixed_batch(cm), x, bar)
                y = _output_array(out[cm.outputs[0]])
                echo_over(bar, f"  {path}: input {_shape_of(x)} -> {cm.outputs[0]} "
                          f"{_describe(y)} in {time.perf_counter() - t0:.3f} s")
        line = _budget_line(ex)
        if line:
            click.echo(line)
        return
    info = read_onnx(model_path)
    for x, path in zip(xs, input_paths):
        check_arity(x, path, "input", info.inputs)
    from ..compiler.dynamic import compile_dynamic
    from ..runtime.shapes import ShapeRunner, format_key

    if calib_path:
        calib = read_array(calib_path, "calibration data")
        check_arity(calib, calib_path, "calibration data", info.inputs)
        data = label = f"calibration data {calib_path!r}"
    else:
        calib, label = _group_by_shape(xs, input_paths)
        data = "the inputs"
    with compiling(model_path, data):
        dm = compile_dynamic(str(p), calib, cfg, calib_label=label,
                             agreement_target=agreement_target)
    _check_names(xs, input_paths, dm.inputs)
    sizes = ", ".join(dict.fromkeys(format_key(k) for k in dm.calib_shapes))
    click.echo(f"{dm.name}: compiled once in {dm.calib_seconds:.2f} s (imported and calibrated "
               f"at {sizes}); input(s) "
               + ", ".join(f"{i} [{'x'.join('?' if d is None else str(d) for d in dm.input_dims[i])}]"
                           for i in dm.inputs))
    dev = make_device(target, cfg)
    runner = ShapeRunner(dm, dev, capacity=cache_size, **(
        {"memory_budget": memory_budget} if memory_budget is not None else {}))
    bar = progress_bar(total=sum(_n_samples(x) for x in xs), desc=f"{dm.name} ({target})",
                       unit="sample", enabled=progress, leave=False)
    runner.on_step = step_postfix(bar, progress)
    try:
        first = True
        for path, x in zip(input_paths, xs):
            key = dm.shape_key(x)
            new = key not in runner.cache
            s0 = runner.stats.specialise_seconds
            t0 = time.perf_counter()
            with compiling(model_path, f"input {path!r}"):
                out = _run_batches(runner.run, dm.input_dims[dm.inputs[0]][0], x, bar)
            dt = time.perf_counter() - t0
            cm, ex = runner.compiled(key), runner.executor(key)     # cached: not counted
            if first:
                echo_over(bar, f"placement (at {format_key(key)}):")
                echo_over(bar, cm.placement_table())
                first = False
            y = _output_array(out[cm.outputs[0]])
            nv = sum(1 for s in cm.steps if s.target == "vta")
            how = (f"new shape, specialised in {runner.stats.specialise_seconds - s0:.3f} s"
                   if new else "cached shape")
            host = sum(st.host_seconds for st in ex.stats.values())
            echo_over(bar, f"  {path}: input {_shape_of(x)} ({how}) -> {cm.outputs[0]} "
                      f"{_describe(y)}; {dt:.3f} s on {target}, {nv}/{len(cm.steps)} steps "
                      f"on VTA, {host:.3f} s in CPU steps (all runs of this shape)")
            line = _budget_line(ex)
            if line:
                echo_over(bar, "    " + line)
        bar.close()
        click.echo(str(runner.stats))
        mem = runner.memory_report()
        click.echo(f"device memory: {mem['shapes']} shape(s) cached, {mem['executors']} bytes; "
                   f"packed constants shared across shapes: {mem['constants_shared']} bytes "
                   f"not copied again")
    finally:
        bar.close()
        runner.close()
        if hasattr(dev, "close"):
            dev.close()


def _run_batches(run, b, x, bar=None) -> dict:
    """``run(x)``, or for a fixed model batch ``b`` (an int) and ``N`` samples, a multiple of
    ``b`` larger than it, ``run`` on ``b`` samples at a time with the outputs concatenated.
    ``bar`` (a progress bar, or None) advances by the samples of each run.

    ``x`` is an array (batch first) or ``{input: array}`` (an ``.npz``: every input is
    sliced alike).  Anything else (``N`` not a multiple of ``b``, no samples, inputs that
    disagree on ``N``) is passed to ``run`` whole, whose checks name the fault.
    """
    vals = list(x.values()) if isinstance(x, dict) else [x]
    ns = {int(np.shape(v)[0]) if np.ndim(v) else None for v in vals}
    n = ns.pop() if len(ns) == 1 else None
    if not isinstance(b, int) or b < 1 or not n or n == b or n % b:
        out = run(x)
        if bar is not None:
            bar.update(n or 0)
        return out
    outs = []
    for i in range(0, n, b):
        outs.append(run({k: v[i:i + b] for k, v in x.items()} if isinstance(x, dict)
                        else x[i:i + b]))
        if bar is not None:
            bar.update(b)
    return {k: np.concatenate([o[k] for o in outs]) for k in outs[0]}


def _group_by_shape(xs: list, paths) -> tuple[list, list]:
    """Calibration sets from the inputs and how errors name each: arrays of one dtype and
    shape (batch excluded) concatenated, one entry per distinct shape, in first-seen order;
    ``.npz`` dicts, and arrays holding NaN or infinity (so that the error names that one
    file), kept as they are.  Returns ``(sets, labels)``, one label per set naming its
    files (``input 'a.npy' + 'c.npy'``)."""
    groups: dict = {}
    out: list = []
    names: list = []
    for x, path in zip(xs, paths):
        k = (x.dtype.str, tuple(x.shape[1:])) if isinstance(x, np.ndarray) and x.ndim else None
        if k is not None and x.dtype.kind == "f" and not np.isfinite(x).all():
            k = None
        if k is not None and k in groups:
            out[groups[k]] = np.concatenate([out[groups[k]], x])
            names[groups[k]].append(path)
            continue
        if k is not None:
            groups[k] = len(out)
        out.append(x)
        names.append([path])
    return out, ["input " + " + ".join(repr(p) for p in ps) for ps in names]


def _artifact_config(model_path: str):
    """The config a ``.vtapkg`` was built for (``--config`` omitted), or None for another
    kind of model or a file that does not exist (whose error comes later, in one line).

    Raises:
        ArtifactError: an unreadable or malformed ``.vtapkg``."""
    p = Path(model_path)
    if p.suffix != ".vtapkg" or not p.is_file():
        return None
    return read_artifact(str(p)).config


def _get_model(model_path: str, cfg, calib_path, x, input_path: str | None = None,
               agreement_target: float | None = None):
    """The compiled model: a ``.vtapkg`` read, or an ONNX model compiled on ``--calibrate``'s
    data or on the input ``x`` (read from ``input_path``; ``None``: no input yet).  One array
    for a model of several inputs is refused naming them, and a kernel's refusal while
    calibrating names the data (:mod:`._inputs`)."""
    from ..runtime.device import DeviceError

    p = Path(model_path)
    if p.suffix == ".vtapkg":
        if calib_path:
            raise DeviceError("--calibrate applies to ONNX models; a .vtapkg is already "
                              "quantized (recompile it with vtaforge compile --calibrate)")
        cm = read_artifact(str(p), cfg)
        if x is not None:
            check_arity(x, input_path, "input", cm.inputs)
        return cm
    info = read_onnx(model_path)
    from ..compiler.compile import compile_model

    if x is not None:
        check_arity(x, input_path, "input", info.inputs)
    if calib_path:
        calib = read_array(calib_path, "calibration data")
        check_arity(calib, calib_path, "calibration data", info.inputs)
        data = f"calibration data {calib_path!r}"
    else:
        calib, data = x, f"input {input_path!r}"
    with compiling(model_path, data):
        return compile_model(str(p), calib, cfg, calib_label=data,
                             agreement_target=agreement_target)


COMMANDS = [run_cmd]
