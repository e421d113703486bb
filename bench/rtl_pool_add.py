"""ResNet-18's max-pool (3x3/2 pad 1 on 64x112x112) and residual adds (+ReLU) on the
Verilator simulation of the core at ``pynq`` (batch 1, ideal bus), beside their memory
bound (each operand read and the output written once at the bus width per cycle), and bit
for bit against fsim.

Run: ``.venv/bin/python bench/rtl_pool_add.py [--div N]`` (``--div`` divides the spatial
sizes; default 1 = ResNet-18 224 sizes).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np
from onnx import TensorProto, helper

from vtaforge.compiler.compile import compile_model
from vtaforge.hw.config import load_config
from vtaforge.runtime.executor import Executor
from vtaforge.runtime.fsim import FsimDevice

sys.path.insert(0, str(Path(__file__).resolve().parent))
from rtl_resnet18 import RecordingRtl  # noqa: E402 - bench/ scripts run from bench/ or the repo root


def _pool_model(c, h):
    g = helper.make_graph(
        [helper.make_node("Relu", ["input"], ["r"]),
         helper.make_node("MaxPool", ["r"], ["y"], kernel_shape=[3, 3], strides=[2, 2],
                          pads=[1, 1, 1, 1])],
        "pool", [helper.make_tensor_value_info("input", TensorProto.FLOAT, [1, c, h, h])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, c, h // 2, h // 2])])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])


def _add_model(c, h):
    g = helper.make_graph(
        [helper.make_node("Relu", ["input"], ["a"]),
         helper.make_node("Add", ["a", "input"], ["s"]),
         helper.make_node("Relu", ["s"], ["y"])],
        "add", [helper.make_tensor_value_info("input", TensorProto.FLOAT, [1, c, h, h])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, c, h, h])])
    return helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--config", default="pynq",
                    help="preset name or vta_config.json (e.g. pynq with ALU_REQUANT)")
    ap.add_argument("--div", type=int, default=1)
    args = ap.parse_args()
    cfg = load_config(args.config)
    bus = (1 << cfg.LOG_BUS_WIDTH) // 8
    dev = RecordingRtl(cfg, 256 << 20, progress=False)
    print(f"{args.config} (0x{cfg.fingerprint:08x}), ideal bus, spatial size / {args.div}")
    print(f"{'step':<26} {'op':<10} {'cycles':>9} {'bound':>9} {'eff':>6} exact")
    cases = [("maxpool 64x112", _pool_model(64, 112 // args.div))]
    cases += [(f"add {c}x{h}", _add_model(c, h // args.div))
              for c, h in ((64, 56), (128, 28), (256, 14), (512, 7))]
    for name, m in cases:
        shape = [d.dim_value for d in m.graph.input[0].type.tensor_type.shape.dim]
        x = np.random.default_rng(0).standard_normal(shape).astype(np.float32)
        cm = compile_model(m, x, cfg)
        want = {"maxpool": "qmax_pool", "add": "qadd"}[name.split()[0]]
        st = [s for s in cm.steps if s.op == want and s.target == "vta"]
        assert st, [(s.op, s.target, s.reason) for s in cm.steps]
        vta = [s for s in cm.steps if s.target == "vta"]
        ex = Executor(cm, dev)
        ex.run(x)
        dev.log, dev.recording = [], True
        out = ex.run(x, keep=True)
        dev.recording = False
        ex.close()
        ref = Executor(cm, FsimDevice(cfg, mem_bytes=256 << 20)).run(x, keep=True)
        for s, cyc in zip(vta, dev.log):
            if s.op != want:
                continue
            bound = -(-s.trace.stats["min_dram_bytes"] // bus)
            ok = np.array_equal(out[s.outputs[0]], ref[s.outputs[0]])
            print(f"{name:<26} {s.op:<10} {cyc:>9} {bound:>9} {bound / cyc:>6.2f} {ok}",
                  flush=True)
    dev.close()


if __name__ == "__main__":
    main()
