"""DTR rematerialization under device-memory budgets: ResNet-18 and small U-Nets at 100 %,
70 % and 50 % of the liveness peak (``plan_memory``), on fsim.

For each model and budget: the planned schedule (``runtime/dtr.py``) and a run through
``Executor(memory_budget=...)``, checked bit for bit against the unbudgeted run.  Printed:
the liveness peak, the policy's own peak with no budget (graph-output/host reads done at
once), the minimum working set (the largest single step's device inputs + host-packed
inputs + output, a step with row bands counted at its thinnest band, below which no order
fits), then per budget: peak device activation bytes, arena bytes, evictions, recomputed
steps, the steps run in row bands (``name:bands``; a conv whose input the host packs,
such as ResNet-18's im2col stem, computed a band of output rows at a time so that only
one band of its input is in device memory), and the overhead in estimated cycles
(``Step.bounds``: max(MAC cycles, DRAM bytes / bus)) and in GEMM micro-ops the simulator
executed (MAC cycles) and in DRAM bytes the simulator moved (each band reloads the
weights), each relative to the unbudgeted run (the GEMM micro-ops and DRAM bytes as the
simulator counted them in both runs), for the executor's default
rule (``auto``: the cheaper of DTR's two cost definitions); beside them the estimated
overhead of each rule alone on the same budget (``dtr``: h_DTR, with the evicted
neighbourhood's cost; ``local``: the producer's cost only; ``next_use``: an offline rule
that knows each tensor's next read instead of its staleness).  A budget below the
minimum is refused, as the executor refuses it.

Models: ``compiler.zoo.resnet18(size)``; :func:`unet` (conv/ReLU/max-pool down, nearest
Resize up, Add skips), with ``skips`` encoder convs per level each feeding a long skip
(1: the classic U-Net; 3: every conv of a triple-conv level skipped).

With ``--optimum SECONDS``: the least estimated overhead over every sequence of eviction
choices under the same budget (branch and bound, ``runtime.dtr.search_optimum``; ``<=``
where the search did not finish), to judge how near the heuristic comes.

Run: ``.venv/bin/python bench/dtr_budget.py [--resnet-size 224] [--unet-size 64]
[--no-run] [--optimum 60]`` (``--no-run``: plans only, no simulation).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np


def unet(size: int = 32, *, chans=(16, 32, 64), skips: int = 1, stem: int = 1, cin: int = 3,
         seed: int = 0, batch="N"):
    """A small U-Net as an ``onnx.ModelProto``: input ``[batch, cin, size, size]``, output
    ``"y"`` ``[batch, 2, size, size]``.

    Encoder: a ``stem`` x ``stem`` conv + ReLU to ``chans[0]``; per level ``k < len(chans)
    - 1``, ``skips`` 3x3 conv + ReLU layers at ``chans[k]`` channels, each output kept for
    a long skip, then a 2x2 max-pool.  Bottleneck: one 3x3 conv + ReLU to ``chans[-1]``.
    Decoder, per level from the bottom: a 3x3 conv to ``chans[k]``, nearest 2x Resize, then
    ``Add`` of each skip of that level (last first), each followed by ReLU.  Head: a 1x1
    conv to 2.
    Weights are seeded He-normal, biases N(0, 0.1).

    Raises:
        ValueError: ``size`` not divisible by ``2 ** (len(chans) - 1)``, or ``skips < 1``.
    """
    from onnx import TensorProto, helper, numpy_helper

    if size % (1 << (len(chans) - 1)) or skips < 1:
        raise ValueError(f"size {size} must be divisible by {1 << (len(chans) - 1)} and "
                         f"skips {skips} >= 1")
    rng = np.random.default_rng(seed)
    nodes, inits = [], []
    count = [0]

    def name(base):
        count[0] += 1
        return f"{base}{count[0]}"

    def node(op, ins, out=None, **attrs):
        y = out or name(op.lower())
        nodes.append(helper.make_node(op, ins, [y], name=y, **attrs))
        return y

    def conv(x, ci, co, k=3, relu=True, out=None):
        w = rng.normal(0, np.sqrt(2.0 / (ci * k * k)), (co, ci, k, k)).astype(np.float32)
        b = rng.normal(0, 0.1, co).astype(np.float32)
        wn, bn = name("w"), name("b")
        inits.extend([numpy_helper.from_array(w, wn), numpy_helper.from_array(b, bn)])
        y = node("Conv", [x, wn, bn], out, kernel_shape=[k, k], pads=[k // 2] * 4)
        return node("Relu", [y]) if relu else y

    inits.append(numpy_helper.from_array(np.array([1, 1, 2, 2], np.float32), "up_scales"))
    x = conv("input", cin, chans[0], k=stem)
    cur = chans[0]
    levels = []
    for c in chans[:-1]:
        level = []
        for _ in range(skips):
            x = conv(x, cur, c)
            cur = c
            level.append(x)
        levels.append(level)
        x = node("MaxPool", [x], kernel_shape=[2, 2], strides=[2, 2])
    x = conv(x, cur, chans[-1])
    cur = chans[-1]
    for c, level in zip(reversed(chans[:-1]), reversed(levels)):
        x = conv(x, cur, c, relu=False)
        x = node("Resize", [x, "", "up_scales"], mode="nearest")
        cur = c
        for s in reversed(level):
            x = node("Relu", [node("Add", [x, s])])
    conv(x, cur, 2, k=1, relu=False, out="y")
    inp = helper.make_tensor_value_info("input", TensorProto.FLOAT, [batch, cin, size, size])
    out = helper.make_tensor_value_info("y", TensorProto.FLOAT, [batch, 2, size, size])
    g = helper.make_graph(nodes, f"unet{skips}", [inp], [out], inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)],
                          producer_name="vtaforge.bench")
    m.ir_version = 8
    return m


def _totals(ex) -> dict:
    """GEMM micro-ops and DRAM bytes the simulator counted over every step of ``ex``'s
    runs (recomputes and every band included)."""
    return {"gemm_uops": sum(st.gemm_uops for st in ex.stats.values()),
            "dram_bytes": sum(st.dram_bytes for st in ex.stats.values())}


def measure(label: str, cm, x, fractions, *, run: bool = True, optimum: float = 0.0) -> list[dict]:
    """Plan (and with ``run``, execute on fsim and check bit-exactness) ``cm`` at each
    fraction of its liveness peak; print one line per budget and return the reports.
    ``optimum`` > 0: also search the least overhead over every eviction choice
    (:func:`~vtaforge.runtime.dtr.search_optimum`, that many seconds per budget)."""
    from vtaforge.runtime import dtr
    from vtaforge.runtime.executor import Executor, plan_memory
    from vtaforge.runtime.fsim import FsimDevice

    n = x.shape[0]
    nblk = -(-n // cm.config.BATCH)
    peak = plan_memory(cm, nblk).peak_live_bytes
    nodes = dtr.nodes_from_model(cm, nblk)
    lo = dtr.min_budget(nodes, cm.config.dram_alignment)
    free = dtr.plan(nodes, peak, align=cm.config.dram_alignment)
    print(f"\n{label}: {sum(s.target == 'vta' for s in cm.steps)} VTA steps of "
          f"{len(cm.steps)}; liveness peak {peak:,} B; policy peak with no budget "
          f"{free.free_peak_bytes:,} B; minimum working set {lo:,} B "
          f"({100 * lo / peak:.0f} % of the peak)")
    print(f"  {'budget':>14} {'peak':>10} {'arena':>10} {'evict':>5} {'recomp':>6} "
          f"{'bands':>9} {'est cyc':>9} {'MAC cyc':>9} {'GEMM uops':>9} {'DRAM B':>8}  "
          f"exact  run s   "
          f"est cyc by rule: dtr / local / next_use" + ("; optimum" if optimum else ""))
    ref = None
    if run:
        ref_ex = Executor(cm, FsimDevice(cm.config, mem_bytes=1 << 29))
        ref = ref_ex.run(x)
        ref_tot = _totals(ref_ex)
    rows = []
    for f in fractions:
        budget = int(f * peak)
        head = f"  {100 * f:3.0f}% {budget:>9,}"
        ex = None
        try:
            if run:
                ex = Executor(cm, FsimDevice(cm.config, mem_bytes=1 << 29),
                              memory_budget=budget)
                t0 = time.perf_counter()
                out = ex.run(x)
                wall = time.perf_counter() - t0
                exact = all(np.array_equal(out[k], ref[k]) for k in cm.outputs)
                r = ex.dtr_report()
                tot = _totals(ex)           # measured against the unbudgeted run's
                r = dict(r, **{f"{k}_overhead": (tot[k] - ref_tot[k]) / ref_tot[k]
                               for k in tot}, dram_bytes_extra=tot["dram_bytes"]
                         - ref_tot["dram_bytes"])
                ex.close()
            else:
                s = dtr.plan(nodes, budget, align=cm.config.dram_alignment)
                r = {"peak": s.peak_bytes, "arena": s.arena_bytes, "evictions": s.evictions,
                     "recomputes": s.recomputes, "est_overhead": s.overhead,
                     "bands": {cm.steps[i].name: k for i, k in s.bands.items()},
                     "mac_overhead": float("nan"), "gemm_uops_overhead": float("nan"),
                     "dram_bytes_overhead": float("nan")}
                exact, wall = None, 0.0
        except dtr.BudgetError as e:
            print(f"{head}  refused: {e}")
            rows.append({"fraction": f, "budget": budget, "refused": str(e)})
            continue
        alt = []
        for h in ("dtr", "local", "next_use"):
            try:
                o = dtr.plan(nodes, budget, align=cm.config.dram_alignment,
                             heuristic=h).overhead
                alt.append(f"{100 * o:+.1f}%")
            except dtr.BudgetError:
                alt.append("none")
        opt = ""
        if optimum and r["recomputes"]:
            base = r["est_cycles_base"]
            c, done = dtr.search_optimum(nodes, budget, align=cm.config.dram_alignment,
                                         time_limit=optimum, upper=r["est_cycles"])
            opt = f"; {'' if done else '<='}{100 * (c - base) / base:+.1f}%"
            r = dict(r, optimum_overhead=(c - base) / base, optimum_complete=done)
        bands = ",".join(f"{k}:{v}" for k, v in r["bands"].items()) or "-"
        print(f"{head} {r['peak']:>10,} {r['arena']:>10,} {r['evictions']:>5} "
              f"{r['recomputes']:>6} {bands:>9} {100 * r['est_overhead']:>+8.1f}% "
              f"{100 * r['mac_overhead']:>+8.1f}% {100 * r['gemm_uops_overhead']:>+8.1f}% "
              f"{100 * r['dram_bytes_overhead']:>+7.2f}%  "
              f"{'yes' if exact else ('-' if exact is None else 'NO')}  {wall:5.1f}   "
              f"{' / '.join(alt)}{opt}")
        rows.append(dict(r, fraction=f, budget=budget, exact=exact, alternatives=alt))
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--resnet-size", type=int, default=224)
    ap.add_argument("--unet-size", type=int, default=64)
    ap.add_argument("--fractions", default="1.0,0.9,0.8,0.7,0.6,0.5")
    ap.add_argument("--no-run", action="store_true", help="plan only (no fsim run)")
    ap.add_argument("--optimum", type=float, default=0.0, metavar="SECONDS",
                    help="search the optimum over eviction choices, SECONDS per budget")
    ap.add_argument("--json", default=None, metavar="PATH",
                    help="also write every row (dtr_report keys) to this JSON file")
    args = ap.parse_args()
    sys.path.insert(0, str(Path(__file__).resolve().parent))   # the tests load this file
    from _record import header                                  # by path, bench/ not on it
    print(header(__file__), flush=True)
    from vtaforge.compiler.compile import compile_model
    from vtaforge.compiler.zoo import resnet18

    fr = [float(v) for v in args.fractions.split(",")]
    rng = np.random.default_rng(0)
    print("DTR under device-memory budgets, pynq preset, batch 1, fsim; overheads relative "
          "to the unbudgeted run (est cyc: Step.bounds max(MAC, DRAM/bus) cycles; MAC cyc: "
          "ideal GEMM cycles; GEMM uops: micro-ops the simulator executed)")
    x = rng.standard_normal((1, 3, args.resnet_size, args.resnet_size)).astype(np.float32)
    cm = compile_model(resnet18(args.resnet_size), x, "pynq")
    rows = {}
    label = f"ResNet-18 {args.resnet_size}x{args.resnet_size}"
    rows[label] = measure(label, cm, x, fr, run=not args.no_run, optimum=args.optimum)
    for skips in (1, 2, 4):
        x = rng.standard_normal((1, 3, args.unet_size, args.unet_size)).astype(np.float32)
        cm = compile_model(unet(args.unet_size, skips=skips), x, "pynq")
        label = f"U-Net {args.unet_size}x{args.unet_size}, {skips} long skip(s) per level"
        rows[label] = measure(label, cm, x, fr, run=not args.no_run, optimum=args.optimum)
    if args.json:
        import json

        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1, default=str)


if __name__ == "__main__":
    main()
