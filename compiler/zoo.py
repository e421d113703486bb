"""Model and workload builders (no downloads): ONNX models with seeded random weights.

* :func:`resnet18` -- ResNet-18 (He et al. 2016, the torchvision topology:
  7x7/2 conv, 3x3/2 max-pool, four stages of two basic blocks with 64, 128,
  256, 512 channels, 1x1/2 projection shortcuts, global average pool, FC),
  Conv + BatchNormalization + Relu, residual Add.
* :func:`mobilenet_v1` -- MobileNet-v1 (Howard et al. 2017: 3x3/2 conv then 13
  depthwise-separable blocks, ReLU6 as ``Clip(0, 6)``, global average pool,
  FC), with an optional width multiplier ``alpha``.
* :data:`RESNET18_WORKLOADS` (C1-C11) and :data:`MOBILENET_WORKLOADS` (D1-D9):
  the upstream VTA benchmark layer tables (``vta-anchor.md`` section 7.2), as
  :class:`Workload` records; :func:`workload_model` builds a single-conv ONNX
  model for one of them.

Weights: He-normal (std ``sqrt(2 / fan_in)``) from ``numpy.random.default_rng(seed)``;
BatchNormalization parameters gamma U(0.5, 1), beta N(0, 0.1), mean N(0, 0.1),
var U(0.5, 1.5). All models are float32, opset 17, NCHW, input ``"input"``
of shape ``[N, 3, size, size]`` (``N`` symbolic) and output ``"logits"``.
``size`` must be a multiple of 32 (five stride-2 stages).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

__all__ = ["Workload", "RESNET18_WORKLOADS", "MOBILENET_WORKLOADS", "WORKLOADS", "workload_model",
           "resnet18", "mobilenet_v1"]

OPSET = 17


@dataclass(frozen=True)
class Workload:
    """One conv2d layer shape (upstream ``Workload`` fields; NCHW; pads symmetric).

    ``groups == 1`` is a plain conv; ``groups == in_channels == out_channels``
    is depthwise.
    """

    name: str
    batch: int
    height: int
    width: int
    in_channels: int
    out_channels: int
    groups: int
    kernel_h: int
    kernel_w: int
    pad_h: int
    pad_w: int
    stride_h: int
    stride_w: int

    @property
    def out_height(self) -> int:
        return (self.height + 2 * self.pad_h - self.kernel_h) // self.stride_h + 1

    @property
    def out_width(self) -> int:
        return (self.width + 2 * self.pad_w - self.kernel_w) // self.stride_w + 1

    @property
    def macs(self) -> int:
        """Multiply-accumulates of the layer (per the whole batch)."""
        return (self.batch * self.out_channels * self.out_height * self.out_width
                * (self.in_channels // self.groups) * self.kernel_h * self.kernel_w)

    @property
    def gops(self) -> float:
        """Giga-operations, counting a MAC as 2 operations."""
        return 2 * self.macs / 1e9


def _r(name, hw, ic, oc, k, p, s):
    return Workload(name, 1, hw, hw, ic, oc, 1, k, k, p, p, s, s)


#: ResNet-18 conv layers C1-C11 (upstream ``test_benchmark_topi_conv2d.py``; C1 ran on the CPU there).
RESNET18_WORKLOADS: tuple[Workload, ...] = (
    _r("C1", 224, 3, 64, 7, 3, 2), _r("C2", 56, 64, 64, 3, 1, 1), _r("C3", 56, 64, 128, 3, 1, 2),
    _r("C4", 56, 64, 128, 1, 0, 2), _r("C5", 28, 128, 128, 3, 1, 1), _r("C6", 28, 128, 256, 3, 1, 2),
    _r("C7", 28, 128, 256, 1, 0, 2), _r("C8", 14, 256, 256, 3, 1, 1), _r("C9", 14, 256, 512, 3, 1, 2),
    _r("C10", 14, 256, 512, 1, 0, 2), _r("C11", 7, 512, 512, 3, 1, 1),
)


def _d(name, hw, c, g, s):
    return Workload(name, 1, hw, hw, c, c, g, 3, 3, 1, 1, s, s)


#: MobileNet-style grouped conv layers D1-D9 (upstream ``test_benchmark_topi_group_conv2d.py``).
MOBILENET_WORKLOADS: tuple[Workload, ...] = (
    _d("D1", 112, 32, 2, 1), _d("D2", 112, 64, 4, 2), _d("D3", 56, 128, 8, 1), _d("D4", 56, 128, 8, 2),
    _d("D5", 28, 256, 16, 1), _d("D6", 28, 256, 16, 2), _d("D7", 14, 512, 32, 1),
    _d("D8", 14, 512, 32, 2), _d("D9", 7, 1024, 64, 1),
)

WORKLOADS: tuple[Workload, ...] = RESNET18_WORKLOADS + MOBILENET_WORKLOADS


class _Builder:
    def __init__(self, seed: int):
        self.rng = np.random.default_rng(seed)
        self.nodes = []
        self.inits = []
        self.n = 0

    def name(self, base: str) -> str:
        self.n += 1
        return f"{base}{self.n}"

    def init(self, name: str, arr: np.ndarray) -> str:
        from onnx import numpy_helper

        self.inits.append(numpy_helper.from_array(np.array(arr, order="C"), name))
        return name

    def node(self, op, ins, attrs=None, base=None):
        from onnx import helper

        nm = self.name(base or op.lower())
        self.nodes.append(helper.make_node(op, ins, [nm], name=nm, **(attrs or {})))
        return nm

    def conv(self, x, cin, cout, k, s, p, groups=1, bias=False):
        kh, kw = (k, k) if isinstance(k, int) else k
        sh, sw = (s, s) if isinstance(s, int) else s
        ph, pw = (p, p) if isinstance(p, int) else p
        fan_in = cin // groups * kh * kw
        w = self.rng.normal(0, np.sqrt(2.0 / fan_in), (cout, cin // groups, kh, kw)).astype(np.float32)
        ins = [x, self.init(self.name("w"), w)]
        if bias:
            ins.append(self.init(self.name("b"), self.rng.normal(0, 0.1, cout).astype(np.float32)))
        return self.node("Conv", ins, {"kernel_shape": [kh, kw], "strides": [sh, sw], "pads": [ph, pw, ph, pw],
                                       "group": groups}, "conv")

    def bn(self, x, c):
        r = self.rng
        ps = [r.uniform(0.5, 1.0, c), r.normal(0, 0.1, c), r.normal(0, 0.1, c), r.uniform(0.5, 1.5, c)]
        ins = [x] + [self.init(self.name(n), v.astype(np.float32)) for n, v in zip(("g", "beta", "mean", "var"), ps)]
        return self.node("BatchNormalization", ins, {"epsilon": 1e-5}, "bn")

    def relu6(self, x):
        lo = self.init(self.name("lo"), np.array(0.0, np.float32))
        hi = self.init(self.name("hi"), np.array(6.0, np.float32))
        return self.node("Clip", [x, lo, hi], None, "relu6")

    def head(self, x, c, classes):
        x = self.node("GlobalAveragePool", [x], None, "gap")
        x = self.node("Flatten", [x], {"axis": 1}, "flatten")
        w = self.rng.normal(0, np.sqrt(1.0 / c), (classes, c)).astype(np.float32)
        b = np.zeros(classes, np.float32)
        from onnx import helper

        self.nodes.append(helper.make_node("Gemm", [x, self.init("fc_w", w), self.init("fc_b", b)],
                                           ["logits"], name="fc", transB=1))

    def model(self, graph_name: str, size: int, classes: int, batch):
        from onnx import TensorProto, helper

        inp = helper.make_tensor_value_info("input", TensorProto.FLOAT, [batch, 3, size, size])
        out = helper.make_tensor_value_info("logits", TensorProto.FLOAT, [batch, classes])
        g = helper.make_graph(self.nodes, graph_name, [inp], [out], self.inits)
        m = helper.make_model(g, opset_imports=[helper.make_opsetid("", OPSET)], producer_name="vtaforge.zoo")
        m.ir_version = 8
        return m


def _check_size(size: int) -> None:
    if not isinstance(size, int) or size < 32 or size % 32:
        raise ValueError(f"size {size!r} must be a positive multiple of 32")


def resnet18(size: int = 224, *, num_classes: int = 1000, seed: int = 0, batch="N"):
    """ResNet-18 as an ``onnx.ModelProto`` (input ``[batch,3,size,size]``, output ``[batch,num_classes]``).

    Raises:
        ValueError: ``size`` not a positive multiple of 32.
    """
    _check_size(size)
    b = _Builder(seed)
    x = b.node("Relu", [b.bn(b.conv("input", 3, 64, 7, 2, 3), 64)], None, "relu")
    x = b.node("MaxPool", [x], {"kernel_shape": [3, 3], "strides": [2, 2], "pads": [1, 1, 1, 1]}, "maxpool")
    cin = 64
    for stage, cout in enumerate((64, 128, 256, 512)):
        for blk in range(2):
            s = 2 if stage > 0 and blk == 0 else 1
            y = b.node("Relu", [b.bn(b.conv(x, cin, cout, 3, s, 1), cout)], None, "relu")
            y = b.bn(b.conv(y, cout, cout, 3, 1, 1), cout)
            sc = x if (s == 1 and cin == cout) else b.bn(b.conv(x, cin, cout, 1, s, 0), cout)
            x = b.node("Relu", [b.node("Add", [y, sc], None, "add")], None, "relu")
            cin = cout
    b.head(x, 512, num_classes)
    return b.model("resnet18", size, num_classes, batch)


def mobilenet_v1(size: int = 224, *, num_classes: int = 1000, alpha: float = 1.0, seed: int = 0,
                 batch="N"):
    """MobileNet-v1 as an ``onnx.ModelProto`` (width multiplier ``alpha``; channels ``int(c*alpha)``).

    Raises:
        ValueError: ``size`` not a positive multiple of 32.
    """
    _check_size(size)
    b = _Builder(seed)
    ch = lambda c: max(8, int(c * alpha))  # noqa: E731
    c0 = ch(32)
    x = b.relu6(b.bn(b.conv("input", 3, c0, 3, 2, 1), c0))
    cfg = [(64, 1), (128, 2), (128, 1), (256, 2), (256, 1), (512, 2)] + [(512, 1)] * 5 + [(1024, 2), (1024, 1)]
    cin = c0
    for cout, s in cfg:
        cout = ch(cout)
        x = b.relu6(b.bn(b.conv(x, cin, cin, 3, s, 1, groups=cin), cin))
        x = b.relu6(b.bn(b.conv(x, cin, cout, 1, 1, 0), cout))
        cin = cout
    b.head(x, cin, num_classes)
    return b.model("mobilenet_v1", size, num_classes, batch)


def workload_model(wl: Workload, *, seed: int = 0, bias: bool = True, relu: bool = True, batch=None):
    """A single-conv ONNX model for ``wl``: Conv (+ bias) (+ Relu).

    Input ``"input"`` ``[batch or wl.batch, IC, H, W]``, output ``"output"``
    ``[.., OC, out_height, out_width]``; weights seeded He-normal.
    """
    from onnx import TensorProto, helper

    b = _Builder(seed)
    x = b.conv("input", wl.in_channels, wl.out_channels, (wl.kernel_h, wl.kernel_w),
               (wl.stride_h, wl.stride_w), (wl.pad_h, wl.pad_w), groups=wl.groups, bias=bias)
    if relu:
        x = b.node("Relu", [x], None, "relu")
    b.nodes[-1].output[0] = "output"
    nb = wl.batch if batch is None else batch
    inp = helper.make_tensor_value_info("input", TensorProto.FLOAT, [nb, wl.in_channels, wl.height, wl.width])
    out = helper.make_tensor_value_info("output", TensorProto.FLOAT,
                                        [nb, wl.out_channels, wl.out_height, wl.out_width])
    g = helper.make_graph(b.nodes, f"workload_{wl.name}", [inp], [out], b.inits)
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", OPSET)], producer_name="vtaforge.zoo")
    m.ir_version = 8
    return m
