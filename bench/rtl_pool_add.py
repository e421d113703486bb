"""ResNet-18's max-pool (3x3/2 pad 1 on 64x112x112) and residual adds (+ReLU) on the
Verilator simulation of the core at ``pynq`` (batch 1, ideal bus), beside their memory
bound (each operand read and the output written once at the bus width per cycle), and bit
for bit against fsim.

Run: ``.venv/bin/python bench/rtl_pool_add.py [--config F.json] [--div N] [--record FILE]``
(``--div`` divides the spatial sizes; default 1 = ResNet-18 224 sizes).  ``--record FILE``
appends each pool/add step's launched programs as calibration pairs (the format of
``vtaforge.dse.calibrate``: instructions, UOP-load payloads, RTL cycles; workloads
``resnet18-maxpool`` (the ACC8 form), ``resnet18-maxpool-copy`` (the INP-load and
identity-GEMM form, compiler/lower_eltwise.py ``_max_pool_copy``) and
``resnet18-add-CxH``; full size only, ``--div 1``) to FILE,
replacing that config's earlier pairs of the same workloads; the cycle model's estimate is
printed beside the RTL either way.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np
from onnx import TensorProto, helper

from vtaforge.compiler.compile import compile_model
from vtaforge.dse import CycleModel
from vtaforge.dse.calibrate import load_pairs, save_pairs
from vtaforge.dse.performance import uop_loads_of
from vtaforge.hw.config import load_config
from vtaforge.hw.isa import INSN_BYTES, decode_program
from vtaforge.runtime.executor import Executor
from vtaforge.runtime.fsim import FsimDevice

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _record import header  # noqa: E402
from rtl_resnet18 import RecordingRtl  # noqa: E402 - bench/ scripts run from bench/ or the repo root


def _b64(a: np.ndarray) -> str:
    import base64
    import zlib

    return base64.b64encode(zlib.compress(np.ascontiguousarray(a).tobytes(), 9)).decode()


class PairRtl(RecordingRtl):
    """RecordingRtl that also keeps, while ``recording``, each launched program as a
    calibration pair body (instructions, UOP-load payloads, cycles, counters) in ``pairs``
    and the cycle model's estimate in ``est``."""

    def run(self, insn_addr, insn_count, **kw):
        if not self.recording:
            return super().run(insn_addr, insn_count, **kw)
        prog = self._read_mem(insn_addr, insn_count * INSN_BYTES)
        cols = decode_program(self.config, prog)
        uops = uop_loads_of(self, self.config, cols)
        self.est.append(CycleModel().program_cycles(self.config, cols, uop_loads=uops))
        res = super().run(insn_addr, insn_count, **kw)
        st = {k: int(v) for k, v in res.stats.items()
              if isinstance(v, (int, np.integer)) and not isinstance(v, bool)}
        self.pairs.append({"insns": _b64(np.asarray(prog, np.uint8)), "n_insns": int(insn_count),
                           "uop_loads": [[i, _b64(w.view(np.uint8))] for i, w in uops],
                           "rtl_cycles": int(res.cycles), "rtl_stats": st})
        return res


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
    ap.add_argument("--record", metavar="FILE", help="append the steps' programs as pairs")
    args = ap.parse_args()
    cfg = load_config(args.config)
    bus = (1 << cfg.LOG_BUS_WIDTH) // 8
    dev = PairRtl(cfg, 256 << 20, progress=False)
    fp = f"0x{cfg.fingerprint:08x}"
    print(header(__file__))
    print(f"{args.config} ({fp}), ideal bus, spatial size / {args.div}")
    print(f"{'step':<26} {'op':<10} {'cycles':>9} {'bound':>9} {'eff':>6} exact "
          f"{'model':>9} {'error':>7} {'lower':>9}")
    new = []
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
        dev.log, dev.pairs, dev.est, dev.recording = [], [], [], True
        out = ex.run(x, keep=True)
        dev.recording = False
        ex.close()
        ref = Executor(cm, FsimDevice(cfg, mem_bytes=256 << 20)).run(x, keep=True)
        assert len(dev.log) == len(vta), "one launch per VTA step expected"
        wl = "resnet18-" + name.replace(" ", "-").replace("-64x112", "")
        for s, cyc, pair, est in zip(vta, dev.log, dev.pairs, dev.est):
            if s.op != want:
                continue
            if s.trace.stats.get("gemm_copy"):    # the INP-load / identity-GEMM form
                wl = "resnet18-maxpool-copy"
            bound = -(-s.trace.stats["min_dram_bytes"] // bus)
            ok = np.array_equal(out[s.outputs[0]], ref[s.outputs[0]])
            err = est["cycles"] / cyc - 1
            print(f"{name:<26} {s.op:<10} {cyc:>9} {bound:>9} {bound / cyc:>6.2f} {ok!s:<5} "
                  f"{est['cycles']:>9.0f} {100 * err:>+6.2f}% {est['lower']:>9.0f}", flush=True)
            if args.div == 1:
                new.append({"config": cfg.to_dict(), "fingerprint": fp, "workload": wl,
                            "launch": 0, **pair, "sim_seconds": 0.0})
    dev.close()
    if args.record:
        names = {p["workload"] for p in new}
        keep = [p for p in load_pairs(args.record)
                if not (p["fingerprint"] == fp and p["workload"] in names)]
        save_pairs(keep + new, args.record,
                   note="ResNet-18 max-pool and residual adds at full size, Verilator ideal bus; "
                        "bench/rtl_pool_add.py --record")
        print(f"recorded {len(new)} pairs ({fp}) in {args.record}")


if __name__ == "__main__":
    main()
