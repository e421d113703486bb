"""PaddleOCR's text-direction classifier (a real pretrained CNN) compiled for pynq, run on fsim.

The model ships inside the PyPI wheel of ``rapidocr-onnxruntime`` (1.4.4):
``rapidocr_onnxruntime/models/ch_ppocr_mobile_v2.0_cls_infer.onnx``, MobileNetV3-small x0.35,
input [N,3,48,192], output softmax over ``['0', '180']``.  The inputs are text lines rendered
with Pillow (``tests/compiler/pretrained.py``), upright and rotated by 180 degrees; the
calibration lines come from another seed than the test lines.

Prints: the float model's orientation accuracy (anchor: 99-100 % on these lines), compile
seconds, steps on VTA vs CPU (and the CPU steps' ops), Conv/MatMul MACs placed on VTA vs
CPU (from ONNX shape inference at 48x192), the compiled model's agreement with
onnxruntime's float decisions (the test asks >= 90 %) and its orientation accuracy, the
cosine of its softmax outputs to float, and the host seconds spent in CPU steps vs the
whole fsim run.  With ``--all`` also the detector and recogniser the wheel carries: their
ops the frontend lacks, MACs, and what compiling them gives.  Figures, not a pass/fail
test; whatever fails (the compile, the run) is printed and the rest still reported.

Run: ``.venv/bin/python bench/pretrained_ocr.py [--lines 16] [--calib-lines 8] [--all] [--model F]``
(needs ``pip install rapidocr-onnxruntime==1.4.4``).
"""

from __future__ import annotations

import argparse
import collections
import sys
import time
import traceback
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "compiler"))

from pretrained import (find_ocr_model, onnx_macs, preprocess_cls,  # noqa: E402
                        render_text_lines, run_ort_float)

MAC_OPS = ("qconv2d", "conv2d", "qdense", "dense")


def _err(e: BaseException) -> str:
    s = str(e).splitlines()[0] if str(e) else ""
    return f"{type(e).__name__}: {s[:300]}"


def _cos(a: np.ndarray, b: np.ndarray) -> float:
    a, b = a.reshape(-1).astype(np.float64), b.reshape(-1).astype(np.float64)
    d = np.linalg.norm(a) * np.linalg.norm(b)
    return float(a @ b / d) if d > 0 else float("nan")


def _step_macs(cm, step) -> int | None:
    """MACs of one conv/dense step for one image, from the compiled model's types."""
    try:
        x, y = cm.types[step.inputs[0]][1], cm.types[step.outputs[0]][1]
        if step.op in ("qconv2d", "conv2d"):
            kh, kw = step.attrs["kernel"]
            return int(np.prod(y[1:])) * (x[1] // int(step.attrs.get("groups", 1))) * kh * kw
        if step.op in ("qdense", "dense"):
            return int(y[1]) * int(x[1])
    except (KeyError, TypeError, ValueError, IndexError):
        return None
    return None


class _CpuTimer:
    """Wraps the CPU kernels the executor calls (``run_cpu_op`` and any other ``run*``
    function it imported from ``vtaforge.runtime.cpu_*``) to sum their host seconds."""

    def __init__(self):
        from vtaforge.runtime import executor as exmod
        self.mod = exmod
        self.saved = {}
        self.seconds = collections.Counter()
        self.calls = collections.Counter()
        for name, fn in vars(exmod).items():
            if callable(fn) and name.startswith("run") and \
                    getattr(fn, "__module__", "").startswith("vtaforge.runtime.cpu"):
                self.saved[name] = fn

    def __enter__(self):
        for name, fn in self.saved.items():
            setattr(self.mod, name, self._wrap(name, fn))
        return self

    def _wrap(self, name, fn):
        def timed(*args, **kw):
            key = args[0] if args and isinstance(args[0], str) else name
            t0 = time.perf_counter()
            try:
                return fn(*args, **kw)
            finally:
                self.seconds[key] += time.perf_counter() - t0
                self.calls[key] += 1
        return timed

    def __exit__(self, *exc):
        for name, fn in self.saved.items():
            setattr(self.mod, name, fn)


def bench_cls(n_lines: int, n_calib: int, path: Path | None = None) -> None:
    path = path or find_ocr_model("cls")
    print(f"PP-OCR text-direction classifier ({path.name}, {path.stat().st_size / 1e6:.2f} MB), "
          f"pynq preset, fsim")
    calib_imgs, _ = render_text_lines(n_calib, seed=1)
    test_imgs, labels = render_text_lines(n_lines, seed=0)
    calib, x = preprocess_cls(calib_imgs), preprocess_cls(test_imgs)
    t0 = time.perf_counter()
    fl = run_ort_float(path, x)
    t_ort = time.perf_counter() - t0
    pf = fl.argmax(1)
    acc_f = float(np.mean(pf == labels))
    print(f"  rendered lines: {len(calib)} calibration (seed 1), {len(x)} test (seed 0; half "
          f"upright, half rotated 180)")
    print(f"  float (onnxruntime) accuracy             : {acc_f:.3f}  (upright "
          f"{np.mean(pf[labels == 0] == 0):.3f}, rotated {np.mean(pf[labels == 1] == 1):.3f}; "
          f"anchor 0.99-1.00)   {t_ort * 1e3:.0f} ms")

    macs = onnx_macs(path, (1,) + x.shape[1:])
    total = sum(m for _, m in macs.values() if m)
    print(f"  Conv/MatMul nodes / MACs per image       : {len(macs)} / {total / 1e6:.2f} M")

    from vtaforge.compiler.compile import compile_model
    t0 = time.perf_counter()
    try:
        cm = compile_model(str(path), calib, "pynq")
    except Exception as e:  # noqa: BLE001 - a bench reports whatever happens
        print(f"  compile                                  : FAILED after "
              f"{time.perf_counter() - t0:.2f} s: {_err(e)}")
        return
    print(f"  compile (import+quantize+partition+lower): {time.perf_counter() - t0:.2f} s")

    pl = cm.placement()
    tg = collections.Counter(p[2] for p in pl)
    cpu_ops = collections.Counter(p[1] for p in pl if p[2] != "vta")
    print(f"  steps on VTA / CPU                       : {tg.get('vta', 0)} / "
          f"{len(pl) - tg.get('vta', 0)}   CPU ops: {dict(cpu_ops.most_common())}")
    by_name = {s.name: s for s in cm.steps}
    split = collections.Counter()
    unmatched = []
    for name, (op, m) in macs.items():
        s = by_name.get(name)
        if s is None:
            unmatched.append(name)
        elif m is not None:
            split[s.target] += m
    if unmatched:       # names changed by the compiler: count from the compiled steps
        split = collections.Counter()
        for s in cm.steps:
            m = _step_macs(cm, s) if s.op in MAC_OPS else None
            if m:
                split[s.target] += m
        how = f"from the compiled steps ({len(unmatched)} ONNX node names not found)"
    else:
        how = "ONNX nodes matched to steps by name"
    tot = sum(split.values()) or 1
    print(f"  MACs on VTA / CPU                        : {split['vta'] / 1e6:.2f} M / "
          f"{sum(v for k, v in split.items() if k != 'vta') / 1e6:.2f} M  "
          f"({100 * split['vta'] / tot:.1f} % on VTA; {how})")

    from vtaforge.runtime.executor import Executor
    from vtaforge.runtime.fsim import FsimDevice
    try:
        ex = Executor(cm, FsimDevice(cm.config))
        with _CpuTimer() as ct:
            t0 = time.perf_counter()
            out = ex.run(x)[cm.outputs[0]]
            t_run = time.perf_counter() - t0
    except Exception as e:  # noqa: BLE001
        print(f"  fsim run                                 : FAILED: {_err(e)}")
        traceback.print_exc(limit=3)
        return
    pc = out.argmax(1)
    cos_img = [_cos(a, b) for a, b in zip(out, fl)]
    print(f"  agreement with float decisions           : {np.mean(pc == pf):.3f}  "
          f"(test asks >= 0.90; disagree: {np.flatnonzero(pc != pf).tolist()})")
    print(f"  compiled accuracy                        : {np.mean(pc == labels):.3f}  "
          f"(float {acc_f:.3f})")
    print(f"  cosine(softmax, float): batch / min image: {_cos(out, fl):.4f} / "
          f"{min(cos_img):.4f}   max |diff| {np.max(np.abs(out - fl)):.4f}")
    cpu_s = sum(ct.seconds.values())
    top = ", ".join(f"{k} {v:.2f}s/{ct.calls[k]}" for k, v in ct.seconds.most_common(6))
    print(f"{f'  fsim run, {len(x)} images':<43}: {t_run:.2f} s; host CPU steps "
          f"{cpu_s:.2f} s ({100 * cpu_s / max(t_run, 1e-9):.0f} %)"
          + (f"  [{top}]" if ct.saved else "  [no CPU kernel found to time]"))
    st = [ex.stats[s.name] for s in cm.steps if s.target == "vta"]
    print(f"  VTA instructions / GEMM uops / DRAM bytes: {sum(s.insns for s in st)} / "
          f"{sum(s.gemm_uops for s in st)} / {sum(s.dram_bytes for s in st)}")
    ex.close()


def bench_other(kind: str, shape: tuple) -> None:
    import onnx
    from vtaforge.compiler.onnx_frontend import SUPPORTED_ONNX_OPS

    path = find_ocr_model(kind)
    if path is None:
        print(f"{kind}: not found in the package")
        return
    m = onnx.load(str(path))
    ops = collections.Counter(n.op_type for n in m.graph.node)
    lack = {k: v for k, v in ops.items() if k not in SUPPORTED_ONNX_OPS}
    macs = onnx_macs(m, shape)
    print(f"PP-OCR {kind} ({path.name}, {path.stat().st_size / 1e6:.2f} MB, opset "
          f"{[o.version for o in m.opset_import if o.domain in ('', 'ai.onnx')]})")
    print(f"  nodes {len(m.graph.node)}; ops the frontend lists as unsupported: {lack}")
    print(f"  MACs at {list(shape)}: {sum(v for _, v in macs.values() if v) / 1e6:.1f} M")
    if kind == "rec":
        calib = preprocess_cls(render_text_lines(2, seed=1, rotated=False)[0], (3, 48, 320))
    else:
        calib = np.random.default_rng(0).uniform(-1, 1, (1,) + tuple(shape[1:])).astype(np.float32)
    from vtaforge.compiler.compile import compile_model
    t0 = time.perf_counter()
    try:
        cm = compile_model(str(path), calib, "pynq")
    except Exception as e:  # noqa: BLE001
        print(f"  compile: FAILED after {time.perf_counter() - t0:.2f} s: {_err(e)}")
        return
    tg = collections.Counter(p[2] for p in cm.placement())
    print(f"  compile: {time.perf_counter() - t0:.2f} s; steps on VTA / CPU: {tg.get('vta', 0)} / "
          f"{sum(tg.values()) - tg.get('vta', 0)}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--lines", type=int, default=16, help="test lines (x2: upright + rotated)")
    ap.add_argument("--calib-lines", type=int, default=8, help="calibration lines (x2)")
    ap.add_argument("--all", action="store_true", help="also the detector and the recogniser")
    ap.add_argument("--model", type=Path, help="another classifier file of the same interface "
                    "(default: the package's)")
    a = ap.parse_args()
    if a.model is None and find_ocr_model("cls") is None:
        print("rapidocr-onnxruntime is not installed (pip install rapidocr-onnxruntime==1.4.4): "
              "it ships the models")
        sys.exit(2)
    bench_cls(a.lines, a.calib_lines, a.model)
    if a.all:
        bench_other("rec", (1, 3, 48, 320))
        bench_other("det", (1, 3, 64, 256))


if __name__ == "__main__":
    main()
