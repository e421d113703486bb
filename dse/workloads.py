"""DSE workloads: named layer tables (ResNet-18 C1-C11, MobileNet D1-D9), ONNX models and
the bundled digits CNN, parsed from ``--workloads`` and compiled per config
(:func:`compile_workload`, front half cached per model)."""

from __future__ import annotations

import json
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from ..hw.config import VTAConfig


from .result import DSEError

__all__ = ['DseWorkload', 'workload_layers', 'parse_workloads', 'compile_workload', 'NETWORKS',
           'net_size']


# =============================================================================== workloads
@dataclass(frozen=True)
class DseWorkload:
    """A workload to evaluate: a name, an ONNX model builder and its inputs.

    ``kind`` is ``"conv"`` (a zoo layer, ``layer`` holds the possibly reduced
    :class:`~vtaforge.compiler.zoo.Workload`), ``"digits"`` (the bundled digits CNN) or
    ``"net"`` (a whole zoo network, ``layer`` its name ``"resnet18"`` / ``"mobilenet_v1"``,
    ``size`` its input height and width: convs, pools, adds, dense layers; the steps the
    partitioner leaves on the CPU are not counted).  ``full_macs`` is the unreduced layer's
    MACs (for reference only).
    """

    name: str
    kind: str
    layer: Any = None
    full_macs: int = 0
    size: int = 0

    def model_and_inputs(self, seed: int = 0):
        """``(onnx ModelProto, calibration float32 array, run input float32 array (batch 1))``."""
        if self.kind == "digits":
            import onnx

            from ..compiler.models import DIGITS_ONNX, load_digits_split

            x_tr, _, x_te, _ = load_digits_split()
            return onnx.load(str(DIGITS_ONNX)), x_tr[:64], x_te[:1]
        if self.kind == "net":
            from ..compiler import zoo

            rng = np.random.default_rng(seed)
            x = rng.standard_normal((2, 3, self.size, self.size)).astype(np.float32)
            return getattr(zoo, self.layer)(self.size, seed=seed), x, x[:1]
        from ..compiler.zoo import workload_model

        wl = self.layer
        rng = np.random.default_rng(seed)
        x = rng.normal(0, 1, (4, wl.in_channels, wl.height, wl.width)).astype(np.float32)
        return workload_model(wl, seed=seed), x, x[:1]

    def describe(self) -> dict:
        """JSON description for the report: name, kind and (for a layer) its shape."""
        d: dict[str, Any] = {"name": self.name, "kind": self.kind}
        if self.kind == "net":
            d.update(network=self.layer, size=self.size)
            return d
        if self.layer is not None:
            wl = self.layer
            d.update(height=wl.height, width=wl.width, in_channels=wl.in_channels,
                     out_channels=wl.out_channels, groups=wl.groups, kernel=wl.kernel_h,
                     stride=wl.stride_h, pad=wl.pad_h, macs=wl.macs, full_macs=self.full_macs)
        return d


def _onnx_layers(model) -> list[dict]:
    """Per Conv/Gemm/MatMul node of an ONNX model: ``name``, reduction length ``k``
    (input channels per group × kernel area, or input features) and ``macs`` per image."""
    import onnx
    from onnx import numpy_helper

    m = onnx.shape_inference.infer_shapes(model)
    inits = {i.name: numpy_helper.to_array(i).shape for i in m.graph.initializer}
    shapes = {}
    for vi in list(m.graph.value_info) + list(m.graph.output) + list(m.graph.input):
        dims = [d.dim_value if d.HasField("dim_value") else 1 for d in vi.type.tensor_type.shape.dim]
        shapes[vi.name] = dims
    out = []
    for n in m.graph.node:
        if n.op_type == "Conv" and n.input[1] in inits:
            ws = inits[n.input[1]]
            k = int(np.prod(ws[1:]))
            o = shapes.get(n.output[0])
            macs = int(np.prod(o[1:])) * k if o else 0
            out.append({"name": n.name or n.output[0], "k": k, "macs": macs})
        elif n.op_type in ("Gemm", "MatMul") and len(n.input) > 1 and n.input[1] in inits:
            ws = inits[n.input[1]]
            trans_b = any(a.name == "transB" and a.i for a in n.attribute)
            k = int(ws[1] if trans_b else ws[0])
            nout = int(ws[0] if trans_b else ws[1])
            out.append({"name": n.name or n.output[0], "k": k, "macs": k * nout})
    return out


_LAYER_CACHE: dict[str, list[dict]] = {}


def workload_layers(wl: DseWorkload) -> list[dict]:
    """Cached :func:`_onnx_layers` of a workload (``k`` and ``macs`` per layer)."""
    key = json.dumps(wl.describe(), sort_keys=True)
    if key not in _LAYER_CACHE:
        if wl.kind == "conv":
            L = wl.layer
            _LAYER_CACHE[key] = [{"name": L.name,
                                  "k": L.in_channels // L.groups * L.kernel_h * L.kernel_w,
                                  "macs": L.macs}]
        else:
            _LAYER_CACHE[key] = _onnx_layers(wl.model_and_inputs()[0])
    return _LAYER_CACHE[key]


def _reduce(layer, size: int | None):
    if size is None or (layer.height <= size and layer.width <= size):
        return layer
    return replace(layer, height=min(layer.height, size), width=min(layer.width, size))


#: The whole networks of ``--workloads resnet18-net,mobilenet-net`` (compiler/zoo.py).
NETWORKS = {"resnet18-net": "resnet18", "mobilenet-net": "mobilenet_v1"}


def net_size(size: int | None) -> int:
    """Input height and width of a whole-network workload under the layer cap ``size``:
    224 at full size (``None``), else the input whose 56×56 stage (ResNet-18's C2) is
    capped at ``size``, ``224·size/56``, rounded up to a multiple of 32 (the zoo networks'
    input step) and at most 224 (size 14: 64)."""
    if size is None:
        return 224
    return min(224, max(32, -(-(224 * size // 56) // 32) * 32))


def parse_workloads(spec: str, size: int | None = 14) -> list[DseWorkload]:
    """Parse a workload list such as ``resnet18-c2,c5``, ``resnet18`` (C2–C11),
    ``resnet18-c2..c11``, ``mobilenet-d1,d3``, ``mobilenet`` (D1–D9), ``digits``, and the
    whole networks ``resnet18-net``, ``mobilenet-net`` (:data:`NETWORKS`, at
    :func:`net_size`).

    A bare layer name (``c5``, ``d3``) continues the previous family.  ``size`` caps the
    layers' height and width (reduced spatial size; ``None`` keeps the full layer):
    per-pixel work is unchanged, so cycles scale roughly with the pixel count.

    Raises:
        DSEError: an unknown family or layer name, or an empty list.
    """
    from ..compiler.zoo import MOBILENET_WORKLOADS, RESNET18_WORKLOADS

    fams = {"resnet18": {w.name.lower(): w for w in RESNET18_WORKLOADS},
            "mobilenet": {w.name.lower(): w for w in MOBILENET_WORKLOADS}}
    defaults = {"resnet18": [f"c{i}" for i in range(2, 12)],
                "mobilenet": [f"d{i}" for i in range(1, 10)]}
    out: list[DseWorkload] = []
    fam = None
    if not isinstance(spec, str) or not spec.strip():
        raise DSEError("empty workload list; e.g. resnet18-c2,c5 or digits")
    for raw in spec.split(","):
        item = raw.strip().lower()
        if not item:
            continue
        if item == "digits":
            out.append(DseWorkload("digits", "digits"))
            continue
        if item in NETWORKS:
            out.append(DseWorkload(item, "net", NETWORKS[item], size=net_size(size)))
            continue
        names: list[str]
        if item in fams:
            fam, names = item, defaults[item]
        elif "-" in item and item.split("-", 1)[0] in fams:
            fam, rest = item.split("-", 1)
            names = [rest]
        elif fam is not None:
            names = [item]
        else:
            raise DSEError(f"unknown workload {raw.strip()!r}; allowed: resnet18[-cN], "
                           f"mobilenet[-dN], digits, resnet18-net, mobilenet-net (a bare "
                           f"cN/dN continues the previous family)")
        expanded = []
        for nm in names:
            if ".." in nm:
                a, b = nm.split("..", 1)
                keys = list(fams[fam])
                if a not in fams[fam] or b not in fams[fam]:
                    raise DSEError(f"unknown layer range {nm!r} in {fam}; layers: "
                                   f"{', '.join(keys)}")
                expanded += keys[keys.index(a):keys.index(b) + 1]
            else:
                expanded.append(nm)
        for nm in expanded:
            if nm not in fams[fam]:
                raise DSEError(f"unknown layer {nm!r} in {fam}; layers: "
                               f"{', '.join(fams[fam])}")
            L = fams[fam][nm]
            out.append(DseWorkload(f"{fam}-{L.name.lower()}", "conv", _reduce(L, size), L.macs))
    if not out:
        raise DSEError("empty workload list; e.g. resnet18-c2,c5 or digits")
    return out


#: Per process (a Dask worker keeps its own): workload key -> (quantized graph, run input).
_FRONT_CACHE: dict[tuple, tuple] = {}


_FRONT_CACHE_MAX = 64


def compile_workload(cfg: VTAConfig, wl: DseWorkload, seed: int = 0):
    """``(CompiledModel, run input)`` of ``wl`` for ``cfg``: ``compile_model`` on the first
    call for a workload; later calls in the same process reuse its quantized graph (ONNX
    import and quantization depend on the workload, the seed, ``ALU_MUL`` and the
    input/weight widths only: a sizeable share
    of a point's time) and redo only partitioning and lowering for the new config.

    Raises:
        whatever compilation raises (``CompileError`` ...).
    """
    from ..compiler.compile import compile_model, lower_graph
    from ..compiler.partition import partition

    key = (json.dumps(wl.describe(), sort_keys=True), seed, bool(cfg.ALU_MUL),
           int(cfg.INP_WIDTH), int(cfg.WGT_WIDTH))
    hit = _FRONT_CACHE.get(key)
    if hit is None:
        model, calib, x = wl.model_and_inputs(seed)
        cm = compile_model(model, calib, cfg, row_bands=False)    # no memory budget here
        if len(_FRONT_CACHE) >= _FRONT_CACHE_MAX:
            _FRONT_CACHE.pop(next(iter(_FRONT_CACHE)))
        _FRONT_CACHE[key] = (cm.qgraph, x)
        return cm, x
    q, x = hit
    part = partition(q, cfg)
    cm = lower_graph(q, part, row_bands=False)
    cm.qgraph, cm.partition = q, part
    return cm, x
