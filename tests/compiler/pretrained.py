"""Helpers for tests and benches on a real pretrained CNN shipped inside a pip package.

The PyPI package ``rapidocr-onnxruntime`` (1.4.4) carries PaddleOCR's ONNX models in its
wheel, under ``rapidocr_onnxruntime/models/``:

* ``ch_ppocr_mobile_v2.0_cls_infer.onnx`` (0.59 MB): the text-direction classifier, a
  MobileNetV3-small (scale 0.35); input ``x`` [N,3,48,192] float, output [N,2] softmax over
  the labels ``['0', '180']``.
* ``ch_PP-OCRv4_det_infer.onnx`` (4.7 MB): the DB text detector; [N,3,H,W] -> [N,1,H,W].
* ``ch_PP-OCRv4_rec_infer.onnx`` (10.9 MB): the CTC recogniser; [N,3,48,W] -> [N,W/8,6625].

Nothing here imports the package (its ``__init__`` imports cv2): :func:`find_ocr_model`
locates the file through ``importlib.util.find_spec``.  The test inputs are text lines
rendered with Pillow (a dependency of the package) in its own scalable default font, so no
data set is downloaded.  :func:`preprocess_cls` follows the package's
``ch_ppocr_cls/text_cls.py`` ``TextClassifier.resize_norm_img`` with Pillow's bilinear
resize in place of ``cv2.resize``.
"""

from __future__ import annotations

import importlib.util
import math
from pathlib import Path

import numpy as np

__all__ = ["OCR_PACKAGE", "OCR_MODELS", "CLS_LABELS", "CLS_SHAPE", "find_ocr_model",
           "render_text_lines", "preprocess_cls", "run_ort_float", "onnx_macs"]

OCR_PACKAGE = "rapidocr_onnxruntime"
OCR_MODELS = {
    "cls": "ch_ppocr_mobile_v2.0_cls_infer.onnx",
    "det": "ch_PP-OCRv4_det_infer.onnx",
    "rec": "ch_PP-OCRv4_rec_infer.onnx",
}
CLS_LABELS = ("0", "180")           # config.yaml  Cls.label_list
CLS_SHAPE = (3, 48, 192)            # config.yaml  Cls.cls_image_shape

_WORDS = (
    "the quick brown fox jumps over lazy dog river stone paper table window garden "
    "market street north south east west light green yellow purple orange silver "
    "invoice total amount price date order number customer address phone email "
    "monday friday june april coffee water bread apple tiger eagle rocket planet "
    "signal vector matrix kernel buffer memory engine sample result summary report"
).split()


def find_ocr_model(kind: str = "cls") -> Path | None:
    """Path of one of the package's ONNX models (``kind``: ``cls``, ``det`` or ``rec``),
    or None when ``rapidocr_onnxruntime`` is not installed or lacks the file.  Does not
    import the package (which would import cv2)."""
    if kind not in OCR_MODELS:
        raise ValueError(f"kind must be one of {sorted(OCR_MODELS)}, not {kind!r}")
    try:
        spec = importlib.util.find_spec(OCR_PACKAGE)
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.submodule_search_locations:
        return None
    for loc in spec.submodule_search_locations:
        p = Path(loc) / "models" / OCR_MODELS[kind]
        if p.is_file():
            return p
    return None


def _font(size: int):
    from PIL import ImageFont
    try:
        return ImageFont.load_default(size=size)      # Pillow >= 10.1: scalable (FreeType)
    except TypeError as e:                             # pragma: no cover - old Pillow
        raise RuntimeError("render_text_lines needs Pillow >= 10.1 "
                           "(ImageFont.load_default(size=...))") from e


def _line_text(rng: np.random.Generator) -> str:
    parts = []
    for _ in range(int(rng.integers(1, 4))):
        r = rng.random()
        if r < 0.6:
            w = str(rng.choice(_WORDS))
            parts.append(w.capitalize() if rng.random() < 0.4 else (w.upper() if rng.random() < 0.15 else w))
        elif r < 0.85:
            parts.append(str(int(rng.integers(0, 100000))))
        else:
            parts.append(f"{int(rng.integers(1, 29)):02d}/{int(rng.integers(1, 13)):02d}/20{int(rng.integers(10, 30))}")
    return " ".join(parts)


def _render_one(text: str, rng: np.random.Generator) -> np.ndarray:
    """One upright text line, RGB uint8 [H, W, 3]."""
    from PIL import Image, ImageDraw, ImageFilter
    size = int(rng.integers(22, 40))
    font = _font(size)
    x0, y0, x1, y1 = font.getbbox(text)
    mx, my = int(rng.integers(3, 12)), int(rng.integers(3, 10))
    w, h = x1 - x0 + 2 * mx, y1 - y0 + 2 * my
    style = int(rng.integers(0, 4))
    if style == 0:                                 # black on white
        bg = np.full((h, w, 3), 255, np.float32)
        fg = (0, 0, 0)
    elif style == 1:                               # dark ink on a light colour
        bg = np.broadcast_to(rng.integers(170, 256, 3).astype(np.float32), (h, w, 3)).copy()
        fg = tuple(int(v) for v in rng.integers(0, 80, 3))
    elif style == 2:                               # horizontal colour gradient
        a, b = rng.integers(150, 256, 3), rng.integers(150, 256, 3)
        t = np.linspace(0, 1, w, dtype=np.float32)[None, :, None]
        bg = np.broadcast_to(a * (1 - t) + b * t, (h, w, 3)).astype(np.float32)
        fg = tuple(int(v) for v in rng.integers(0, 100, 3))
    else:                                          # light text on a dark colour
        bg = np.broadcast_to(rng.integers(0, 90, 3).astype(np.float32), (h, w, 3)).copy()
        fg = tuple(int(v) for v in rng.integers(190, 256, 3))
    img = Image.fromarray(bg.astype(np.uint8), "RGB")
    ImageDraw.Draw(img).text((mx - x0, my - y0), text, font=font, fill=fg)
    if rng.random() < 0.3:
        img = img.filter(ImageFilter.GaussianBlur(radius=float(rng.uniform(0.3, 1.0))))
    a = np.asarray(img).astype(np.float32)
    if rng.random() < 0.5:                         # sensor-like noise
        a = a + rng.normal(0.0, float(rng.uniform(3, 14)), a.shape)
    return np.clip(np.rint(a), 0, 255).astype(np.uint8)


def render_text_lines(n: int, seed: int = 0, *, rotated: bool = True
                      ) -> tuple[list[np.ndarray], np.ndarray]:
    """Render ``n`` short text lines (English words, numbers, dates; the font size, colours,
    background, blur and noise drawn per line from ``seed``).

    Returns ``(images, labels)``: ``images`` is a list of uint8 [H, W, 3] arrays in **BGR**
    order (what the package's ``LoadImage`` hands its models: it converts Pillow's RGB to
    BGR); with ``rotated`` (default) the list holds the ``n`` upright lines followed by the
    same ``n`` lines rotated by 180 degrees, ``2n`` images.  ``labels`` (int64) is the index
    into :data:`CLS_LABELS`: 0 for upright ('0'), 1 for rotated ('180').
    """
    rng = np.random.default_rng(seed)
    up = [np.ascontiguousarray(_render_one(_line_text(rng), rng)[:, :, ::-1]) for _ in range(n)]
    if not rotated:
        return up, np.zeros(n, np.int64)
    rot = [np.ascontiguousarray(im[::-1, ::-1]) for im in up]
    return up + rot, np.array([0] * n + [1] * n, np.int64)


def preprocess_cls(images, shape: tuple[int, int, int] = CLS_SHAPE) -> np.ndarray:
    """The classifier's input batch, float32 [N, 3, 48, 192].

    As ``TextClassifier.resize_norm_img``: resize to height 48 keeping the aspect ratio
    (width ``ceil(48 * w / h)``, at most 192), scale to [-1, 1] by ``(x / 255 - 0.5) / 0.5``,
    channels first, zero-padded on the right to width 192.  Resizing is Pillow's bilinear
    (the package uses ``cv2.resize``, default INTER_LINEAR; values differ slightly, which
    does not matter as every model under comparison sees the same batch).
    """
    from PIL import Image
    c, th, tw = shape
    out = np.zeros((len(images), c, th, tw), np.float32)
    for i, im in enumerate(images):
        im = np.asarray(im)
        if im.dtype != np.uint8 or im.ndim != 3 or im.shape[2] != c:
            raise ValueError(f"image {i}: expected uint8 [H, W, {c}], got {im.dtype} {im.shape}")
        h, w = im.shape[:2]
        rw = min(tw, int(math.ceil(th * w / float(h))))
        r = np.asarray(Image.fromarray(im).resize((rw, th), Image.BILINEAR), np.float32)
        out[i, :, :, :rw] = (r.transpose(2, 0, 1) / 255.0 - 0.5) / 0.5
    return out


def run_ort_float(model_path, x: np.ndarray) -> np.ndarray:
    """The float model's first output on ``x`` with onnxruntime (CPU, one thread)."""
    import onnxruntime as ort
    so = ort.SessionOptions()
    so.intra_op_num_threads = 1
    so.inter_op_num_threads = 1
    s = ort.InferenceSession(str(model_path), so, providers=["CPUExecutionProvider"])
    return s.run(None, {s.get_inputs()[0].name: x})[0]


def onnx_macs(model, input_shape) -> dict[str, tuple[str, int | None]]:
    """Multiply-accumulates of every Conv, ConvTranspose, Gemm and MatMul node, for one input
    of ``input_shape`` (the model's first input fixed to it, then ONNX shape inference).

    Returns ``{node name: (op_type, MACs)}`` in graph order (a nameless node is keyed
    ``OpType_index``, the frontend's naming); MACs is None where shape inference left a
    needed dimension unknown.  Conv: ``prod(output) * Cin/groups * kh * kw``; ConvTranspose:
    ``prod(input) * Cout/groups * kh * kw``; Gemm/MatMul: ``prod(output) * K``.
    """
    import onnx
    from onnx import numpy_helper, shape_inference

    m = onnx.load(str(model)) if not isinstance(model, onnx.ModelProto) else model.__deepcopy__()
    dims = m.graph.input[0].type.tensor_type.shape.dim
    if len(dims) != len(input_shape):
        raise ValueError(f"input has rank {len(dims)}, input_shape {list(input_shape)}")
    for d, v in zip(dims, input_shape):
        d.Clear()
        d.dim_value = int(v)
    mi = shape_inference.infer_shapes(m)

    def dims_of(v):
        return [d.dim_value if d.HasField("dim_value") else None for d in v.type.tensor_type.shape.dim]

    shapes = {v.name: dims_of(v)
              for v in list(mi.graph.value_info) + list(mi.graph.output) + list(mi.graph.input)}
    for i in m.graph.initializer:
        shapes[i.name] = list(i.dims)
    for n in m.graph.node:
        if n.op_type == "Constant" and n.attribute and n.attribute[0].name == "value":
            shapes[n.output[0]] = list(numpy_helper.to_array(n.attribute[0].t).shape)

    def known(s):
        return s is not None and len(s) > 0 and all(isinstance(d, int) and d > 0 for d in s)

    mac_nodes = [n for n in m.graph.node if n.op_type in ("Conv", "ConvTranspose", "Gemm", "MatMul")]
    missing = sorted({v for n in mac_nodes for v in (n.input[0], n.input[1], n.output[0])
                      if not known(shapes.get(v))})
    if missing:      # shape inference stopped (e.g. at a Shape -> Slice -> Reshape): run once
        shapes.update(_ort_shapes(m, input_shape, missing))

    out: dict[str, tuple[str, int | None]] = {}
    for k, n in enumerate(m.graph.node):
        if n.op_type not in ("Conv", "ConvTranspose", "Gemm", "MatMul"):
            continue
        name = n.name or f"{n.op_type}_{k}"
        x, w, y = shapes.get(n.input[0]), shapes.get(n.input[1]), shapes.get(n.output[0])
        macs = None
        if n.op_type == "Conv" and known(y) and known(w):
            macs = int(np.prod(y)) * int(np.prod(w[1:]))
        elif n.op_type == "ConvTranspose" and known(x) and known(w):
            macs = int(np.prod(x)) * int(np.prod(w[1:]))      # w: [Cin, Cout/groups, kh, kw]
        elif n.op_type in ("Gemm", "MatMul") and known(y) and known(x):
            ta = next((a.i for a in n.attribute if a.name == "transA"), 0)
            kdim = x[-2] if (n.op_type == "Gemm" and ta) else x[-1]
            macs = int(np.prod(y)) * int(kdim)
        out[name] = (n.op_type, macs)
    return out


def _ort_shapes(m, input_shape, names) -> dict[str, list[int]]:
    """Shapes of the float tensors ``names`` from one onnxruntime run on zeros."""
    import onnx
    import onnxruntime as ort
    from onnx import helper

    mm = onnx.ModelProto()
    mm.CopyFrom(m)
    have = {o.name for o in mm.graph.output}
    for v in names:
        if v not in have:
            mm.graph.output.append(helper.make_tensor_value_info(v, onnx.TensorProto.FLOAT, None))
    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    s = ort.InferenceSession(mm.SerializeToString(), so, providers=["CPUExecutionProvider"])
    x = np.zeros(tuple(int(d) for d in input_shape), np.float32)
    res = s.run(list(names), {s.get_inputs()[0].name: x})
    return {v: list(r.shape) for v, r in zip(names, res)}
