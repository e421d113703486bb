"""Real-exporter models (``tests/compiler/real_models``: PyTorch TorchScript and dynamo
exports, onnxruntime ``quantize_static`` QDQ and QOperator output) compiled for ``pynq``
and run on fsim: where the nodes and MACs ran (VTA vs CPU numpy vs CPU onnxruntime), the
cosine of the outputs to onnxruntime (float files: default session; quantized files: graph
optimizations off, exact fake-quant) and the largest error relative to max |output|, and
host seconds spent in CPU steps vs the whole
run.  The ideal is 100 % of MACs on VTA and cosine 1.0.  Figures, not a pass/fail test.

Run: ``.venv/bin/python bench/real_models.py [substring ...]``
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np
import onnxruntime as ort

from vtaforge.compiler.compile import compile_model
from vtaforge.compiler.partition import node_macs
from vtaforge.runtime.executor import Executor
from vtaforge.runtime.fsim import FsimDevice

HERE = Path(__file__).resolve().parent.parent / "tests" / "compiler" / "real_models"


def _cos(a, b) -> float:
    a, b = a.ravel().astype(np.float64), b.ravel().astype(np.float64)
    return float(a @ b / max(np.linalg.norm(a) * np.linalg.norm(b), 1e-30))


def main(argv: list[str]) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("pick", nargs="*", metavar="SUBSTRING",
                    help="only the model files whose name contains one of these")
    pick = ap.parse_args(argv).pick
    man = json.loads((HERE / "manifest.json").read_text())
    inputs = np.load(HERE / "inputs.npz")
    print(f"{'model':<50} {'nodes VTA/np/ort':>17} {'MACs on VTA':>12} {'cosine':>7} "
          f"{'max err':>8} {'CPU s':>7} {'run s':>7}")
    for f in man["files"]:
        if pick and not any(p in f["file"] for p in pick):
            continue
        path = HERE / f["file"]
        x = inputs[f["source_net"]]
        calib = np.random.default_rng(7).normal(0, 1, (16,) + x.shape[2:]).astype(np.float32)
        cm = compile_model(str(path), calib, "pynq")
        g = cm.qgraph
        where = [cm.where(s) for s in cm.steps]
        nv, nn, no = (where.count(w) for w in ("VTA", "CPU (numpy)", "CPU (onnxruntime)"))
        macs = {n.name: node_macs(n, g) for n in g.nodes}
        tot = sum(macs.values())
        vta = sum(macs[s.name] for s in cm.steps if s.target == "vta")
        so = ort.SessionOptions()
        if f["quantization"] is not None:
            so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
        sess = ort.InferenceSession(str(path), so, providers=["CPUExecutionProvider"])
        ex = Executor(cm, FsimDevice(cm.config))
        cos, rel, t0 = [], [], time.perf_counter()
        for xi in x:
            y = ex.run(xi)[cm.outputs[0]]
            want = sess.run(None, {sess.get_inputs()[0].name: xi})[0]
            cos.append(_cos(y, want))
            rel.append(float(np.abs(y - want).max() / max(np.abs(want).max(), 1e-30)))
        run = time.perf_counter() - t0
        host = sum(st.host_seconds for st in ex.stats.values())
        print(f"{f['file']:<50} {f'{nv}/{nn}/{no}':>17} {100 * vta / max(tot, 1):>11.1f}% "
              f"{min(cos):>7.4f} {max(rel):>7.1%} {host:>7.3f} {run:>7.3f}")


if __name__ == "__main__":
    main(sys.argv[1:])
