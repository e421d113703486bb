"""ONNX frontend: an ONNX model (file, bytes or ModelProto) -> float graph IR.

Supported operators (default domain, opsets 7..23; see ``docs/compiler.md``):

=====================  ====================================================
ONNX op                IR
=====================  ====================================================
Conv                   ``conv2d`` (2-D, any kernel/stride/padding incl.
                       auto_pad, dilation 1, groups incl. depthwise;
                       weight and bias must be constants)
Gemm                   ``dense`` (transA=0; B and C constants; alpha/beta
                       folded into the constants; transB handled)
MatMul                 ``dense`` (A rank 2, B a constant [K, M])
Relu, Clip             ``relu``, ``clip`` (Clip bounds constant)
Add                    ``add`` (tensor + tensor or tensor + constant)
Mul                    ``mul`` (one operand constant)
BatchNormalization     ``batch_norm`` (inference mode; folded later)
MaxPool, AveragePool   ``max_pool``, ``avg_pool`` (2-D, ceil_mode 0)
GlobalAveragePool      ``global_avg_pool``
Flatten, Reshape       ``flatten``, ``reshape`` (shape constant)
Transpose, Concat      ``transpose``, ``concat``
Softmax                ``softmax``
Identity               (alias)
QuantizeLinear +       ``fake_quant`` with the pair's scale / zero point
DequantizeLinear       (a lone DequantizeLinear of an integer constant
                       becomes a float constant; the scale is kept in
                       ``graph.meta["scale_hints"]``)
=====================  ====================================================

Anything else, a malformed file, or a shape that does not check out raises
:class:`~.errors.CompileError` with ``node 'NAME' (OpType): reason``.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import numpy as np

from .errors import CompileError, node_error
from .ir import Graph, Node, TensorType, _infer_node

__all__ = ["import_onnx", "SUPPORTED_ONNX_OPS"]

SUPPORTED_ONNX_OPS = (
    "Conv", "Gemm", "MatMul", "Relu", "Clip", "Add", "Mul", "BatchNormalization", "MaxPool",
    "AveragePool", "GlobalAveragePool", "Flatten", "Reshape", "Transpose", "Concat", "Softmax",
    "Identity", "QuantizeLinear", "DequantizeLinear",
)


def _load(src) -> "Any":
    import onnx

    if isinstance(src, onnx.ModelProto):
        return src
    what = "model bytes"
    if isinstance(src, (str, Path)):
        what = str(src)
        data = Path(src).read_bytes()  # OSError propagates (the CLI reports it)
    elif isinstance(src, (bytes, bytearray)):
        data = bytes(src)
    else:
        raise CompileError(f"cannot import a model from {type(src).__name__}")
    try:
        model = onnx.ModelProto()
        model.ParseFromString(data)
    except Exception as e:  # noqa: BLE001 - protobuf raises several types
        raise CompileError(f"{what}: malformed ONNX model ({type(e).__name__}: {e})") from None
    if not model.HasField("graph") or len(model.graph.node) == 0:
        raise CompileError(f"{what}: malformed ONNX model (no graph or no nodes)")
    return model


def _np(tensor) -> np.ndarray:
    from onnx import numpy_helper

    return numpy_helper.to_array(tensor)


class _Importer:
    def __init__(self, model, name: str | None):
        import onnx

        self.onnx = onnx
        self.model = model
        try:
            onnx.checker.check_model(model)
        except Exception as e:  # noqa: BLE001
            raise CompileError(f"malformed ONNX model: {str(e).splitlines()[0] if str(e) else e}") from None
        self.opset = 13
        for imp in model.opset_import:
            if imp.domain in ("", "ai.onnx"):
                self.opset = imp.version
        self.g = Graph(name=name or model.graph.name or "model", kind="float")
        self.g.meta["scale_hints"] = {}
        self.alias: dict[str, str] = {}
        self.qlinear: dict[str, tuple[str, Any, Any, int]] = {}  # QuantizeLinear outputs
        self.int_consts: dict[str, np.ndarray] = {}

    # -- values -----------------------------------------------------------------
    def name(self, v: str) -> str:
        while v in self.alias:
            v = self.alias[v]
        return v

    def const(self, v: str) -> np.ndarray | None:
        v = self.name(v)
        if v in self.g.constants:
            return self.g.constants[v]
        return self.int_consts.get(v)

    def add_const(self, name: str, arr: np.ndarray) -> None:
        arr = np.asarray(arr)
        if arr.dtype in (np.float16, np.float64):
            arr = arr.astype(np.float32)
        if arr.dtype == np.float32:
            self.g.add_constant(name, arr)
        else:
            self.int_consts[name] = arr  # shapes, axes, quantized weights: used by folding only

    # -- main ---------------------------------------------------------------------
    def run(self) -> Graph:
        mg = self.model.graph
        for init in mg.initializer:
            self.add_const(init.name, _np(init))
        init_names = {i.name for i in mg.initializer}
        for vi in mg.input:
            if vi.name in init_names:
                continue
            self.g.inputs.append(vi.name)
            self.g.types[vi.name] = self.value_type(vi, "input")
        for i, onode in enumerate(mg.node):
            self.convert(onode, onode.name or f"{onode.op_type}_{i}")
        for vo in mg.output:
            self.bind_output(vo)
        return self.g

    def value_type(self, vi, what: str) -> TensorType:
        tt = vi.type.tensor_type
        if tt.elem_type != self.onnx.TensorProto.FLOAT:
            raise CompileError(f"{what} '{vi.name}': element type "
                               f"{self.onnx.TensorProto.DataType.Name(tt.elem_type)} is not supported "
                               f"(float32 only)")
        if not tt.HasField("shape"):
            raise CompileError(f"{what} '{vi.name}': no shape")
        dims: list = []
        for k, d in enumerate(tt.shape.dim):
            if d.HasField("dim_value"):
                dims.append(int(d.dim_value))
            elif d.HasField("dim_param") and d.dim_param:
                dims.append(d.dim_param)
            else:
                dims.append(f"{vi.name}_d{k}")
        return TensorType("float32", tuple(dims))

    def bind_output(self, vo) -> None:
        src = self.name(vo.name)
        if src in self.g.constants or src in self.int_consts:
            raise CompileError(f"output '{vo.name}' is a constant; nothing to compute")
        if src != vo.name:
            if src in self.g.inputs:
                raise CompileError(f"output '{vo.name}' is the graph input '{src}' unchanged")
            for n in self.g.nodes:
                n.inputs = [vo.name if i == src else i for i in n.inputs]
                n.outputs = [vo.name if o == src else o for o in n.outputs]
            self.g.types[vo.name] = self.g.types.pop(src)
            self.alias[src] = vo.name
        if vo.name not in self.g.types:
            raise CompileError(f"output '{vo.name}' is never produced")
        t = self.g.types[vo.name]
        tt = vo.type.tensor_type
        if tt.HasField("shape"):
            declared = [d.dim_value if d.HasField("dim_value") else None for d in tt.shape.dim]
            ok = len(declared) == t.rank and all(
                d is None or (isinstance(s, int) and s == d) for d, s in zip(declared, t.shape))
            if not ok:
                prod = next(n for n in self.g.nodes if vo.name in n.outputs)
                raise node_error(prod.name, prod.op, f"output '{vo.name}' is declared "
                                 f"{[d if d is not None else '?' for d in declared]} but computes "
                                 f"{list(t.shape)}")
        self.g.outputs.append(vo.name)

    def emit(self, onode, name: str, op: str, inputs: list[str], attrs: dict, out: str) -> None:
        node = Node(name, op, [self.name(i) for i in inputs], [out], attrs)
        try:
            (t,) = _infer_node(self.g, node, self.g.types)
        except CompileError as e:
            raise node_error(name, onode.op_type, getattr(e, "reason", str(e))) from None
        self.g.nodes.append(node)
        self.g.types[out] = t

    # -- per-op conversion ----------------------------------------------------------
    def convert(self, onode, name: str) -> None:
        op = onode.op_type
        if onode.domain not in ("", "ai.onnx"):
            raise node_error(name, op, f"operator domain '{onode.domain}' is not supported")
        attrs = {a.name: self.onnx.helper.get_attribute_value(a) for a in onode.attribute}
        ins = list(onode.input)
        outs = list(onode.output)
        fn = getattr(self, f"op_{op}", None)
        if fn is None:
            raise node_error(name, op, "unsupported operator (supported: "
                             + ", ".join(SUPPORTED_ONNX_OPS) + ")")
        for i in ins:
            if i and self.name(i) in self.qlinear and op != "DequantizeLinear":
                raise node_error(name, op, f"input '{i}' is a QuantizeLinear output; only "
                                 "QuantizeLinear -> DequantizeLinear pairs are supported")
            if i and self.name(i) not in self.g.types and self.name(i) not in self.int_consts \
                    and self.name(i) not in self.qlinear:
                raise node_error(name, op, f"input '{i}' is not defined")
        err = lambda reason: node_error(name, op, reason)  # noqa: E731
        if op != "MaxPool" and len([o for o in outs if o]) > 1:
            raise err("only one output is supported")
        fn(name, onode, ins, outs, attrs, err)  # all-constant nodes are folded by passes

    def need_const(self, v: str, what: str, err) -> np.ndarray:
        c = self.const(v)
        if c is None:
            raise err(f"{what} '{v}' must be a constant (initializer)")
        return c

    def _pads_auto(self, attrs, kernel, strides, in_hw, err):
        ap = attrs.get("auto_pad", b"NOTSET")
        ap = ap.decode() if isinstance(ap, bytes) else ap
        if ap in ("NOTSET", ""):
            p = list(attrs.get("pads", [0, 0, 0, 0]))
            if len(p) != 4:
                raise err(f"pads {p} must have 4 entries (2-D only)")
            return (p[0], p[1], p[2], p[3])
        if ap == "VALID":
            return (0, 0, 0, 0)
        if ap in ("SAME_UPPER", "SAME_LOWER"):
            pads = []
            for k, s, n in zip(kernel, strides, in_hw):
                if not isinstance(n, int):
                    raise err("auto_pad SAME needs static spatial dims")
                total = max((math.ceil(n / s) - 1) * s + k - n, 0)
                small = total // 2
                pads.append((small, total - small) if ap == "SAME_UPPER" else (total - small, small))
            return (pads[0][0], pads[1][0], pads[0][1], pads[1][1])
        raise err(f"auto_pad {ap!r} is not supported")

    def op_Conv(self, name, onode, ins, outs, attrs, err):
        x = self.g.types.get(self.name(ins[0]))
        if x is None or x.rank != 4:
            raise err(f"only 2-D convolution on a 4-D NCHW input is supported, got {x}")
        w = self.need_const(ins[1], "weight", err)
        if w.ndim != 4:
            raise err(f"weight must be 4-D, got shape {list(w.shape)}")
        kernel = tuple(attrs.get("kernel_shape", w.shape[2:]))
        if any(d != 1 for d in attrs.get("dilations", [1, 1])):
            raise err(f"dilations {list(attrs['dilations'])} are not supported (dilation 1 only)")
        strides = tuple(attrs.get("strides", [1, 1]))
        pads = self._pads_auto(attrs, kernel, strides, x.shape[2:], err)
        inputs = [ins[0], ins[1]]
        if len(ins) > 2 and ins[2]:
            self.need_const(ins[2], "bias", err)
            inputs.append(ins[2])
        self.emit(onode, name, "conv2d", inputs,
                  {"kernel": tuple(int(k) for k in kernel), "strides": tuple(int(s) for s in strides),
                   "pads": tuple(int(p) for p in pads), "groups": int(attrs.get("group", 1)),
                   "act": "none", "act_min": None, "act_max": None}, outs[0])

    def op_Gemm(self, name, onode, ins, outs, attrs, err):
        if attrs.get("transA", 0):
            raise err("transA=1 is not supported")
        b = self.need_const(ins[1], "B", err).astype(np.float32)
        if b.ndim != 2:
            raise err(f"B must be 2-D, got {list(b.shape)}")
        w = b if attrs.get("transB", 0) else b.T
        if attrs.get("transB", 0) and attrs.get("alpha", 1.0) == 1.0 and self.name(ins[1]) in self.g.constants:
            wn = self.name(ins[1])
        else:
            w = np.ascontiguousarray(w * np.float32(attrs.get("alpha", 1.0)))
            wn = self.g.fresh(f"{name}_w")
            self.add_const(wn, w)
        inputs = [ins[0], wn]
        if len(ins) > 2 and ins[2]:
            c = self.need_const(ins[2], "C", err).astype(np.float32) * np.float32(attrs.get("beta", 1.0))
            m = w.shape[0]
            if c.size == 1:
                c = np.full((m,), c.reshape(()), np.float32)
            elif c.shape in ((m,), (1, m)):
                c = c.reshape(m)
            else:
                raise err(f"C of shape {list(c.shape)} is not a per-output bias of {m}")
            if attrs.get("beta", 1.0) == 1.0 and self.name(ins[2]) in self.g.constants and \
                    self.g.constants[self.name(ins[2])].shape == (m,):
                bn = self.name(ins[2])
            else:
                bn = self.g.fresh(f"{name}_b")
                self.add_const(bn, c)
            inputs.append(bn)
        self.emit(onode, name, "dense", inputs, {"act": "none", "act_min": None, "act_max": None},
                  outs[0])

    def op_MatMul(self, name, onode, ins, outs, attrs, err):
        b = self.need_const(ins[1], "B", err)
        if b.ndim != 2:
            raise err(f"B must be a 2-D constant, got {list(b.shape)}")
        wn = self.g.fresh(f"{name}_w")
        self.add_const(wn, np.ascontiguousarray(b.astype(np.float32).T))
        self.emit(onode, name, "dense", [ins[0], wn], {"act": "none", "act_min": None, "act_max": None},
                  outs[0])

    def op_Relu(self, name, onode, ins, outs, attrs, err):
        self.emit(onode, name, "relu", ins[:1], {}, outs[0])

    def op_Clip(self, name, onode, ins, outs, attrs, err):
        lo, hi = attrs.get("min"), attrs.get("max")
        if self.opset >= 11:
            lo = self._scalar(self.need_const(ins[1], "min", err), "min", err) if len(ins) > 1 and ins[1] else None
            hi = self._scalar(self.need_const(ins[2], "max", err), "max", err) if len(ins) > 2 and ins[2] else None
        self.emit(onode, name, "clip", ins[:1], {"min": None if lo is None else float(lo),
                                                  "max": None if hi is None else float(hi)}, outs[0])

    @staticmethod
    def _scalar(v: np.ndarray, what: str, err) -> float:
        if v.size != 1:
            raise err(f"{what} must be a scalar, got shape {list(v.shape)}")
        return float(v.reshape(()))

    def op_Add(self, name, onode, ins, outs, attrs, err):
        a, b = ins
        if self.const(a) is not None and self.const(b) is None:
            a, b = b, a
        self.emit(onode, name, "add", [a, b], {"act": "none", "act_min": None, "act_max": None}, outs[0])

    def op_Mul(self, name, onode, ins, outs, attrs, err):
        a, b = ins
        if self.const(a) is not None and self.const(b) is None:
            a, b = b, a
        if self.const(b) is None:
            raise err("Mul of two non-constant tensors is not supported (Mul by a constant only)")
        self.emit(onode, name, "mul", [a, b], {}, outs[0])

    def op_BatchNormalization(self, name, onode, ins, outs, attrs, err):
        if attrs.get("training_mode", 0):
            raise err("training_mode=1 is not supported")
        for v, what in zip(ins[1:5], ("scale", "B", "mean", "var")):
            self.need_const(v, what, err)
        self.emit(onode, name, "batch_norm", ins[:5], {"epsilon": float(attrs.get("epsilon", 1e-5))},
                  outs[0])

    def _pool(self, name, onode, ins, outs, attrs, err, op):
        x = self.g.types.get(self.name(ins[0]))
        if x is None or x.rank != 4:
            raise err(f"only 2-D pooling on a 4-D NCHW input is supported, got {x}")
        if attrs.get("ceil_mode", 0):
            raise err("ceil_mode=1 is not supported")
        if any(d != 1 for d in attrs.get("dilations", [1, 1])):
            raise err("dilations are not supported")
        if len([o for o in outs if o]) > 1:
            raise err("the Indices output is not supported")
        kernel = tuple(int(k) for k in attrs["kernel_shape"])
        if len(kernel) != 2:
            raise err(f"kernel_shape {list(kernel)} is not 2-D")
        strides = tuple(int(s) for s in attrs.get("strides", [1, 1]))
        pads = tuple(int(p) for p in self._pads_auto(attrs, kernel, strides, x.shape[2:], err))
        a = {"kernel": kernel, "strides": strides, "pads": pads}
        if op == "avg_pool":
            a["count_include_pad"] = int(attrs.get("count_include_pad", 0))
        self.emit(onode, name, op, ins[:1], a, outs[0])

    def op_MaxPool(self, name, onode, ins, outs, attrs, err):
        if attrs.get("storage_order", 0):
            raise err("storage_order=1 is not supported")
        self._pool(name, onode, ins, outs, attrs, err, "max_pool")

    def op_AveragePool(self, name, onode, ins, outs, attrs, err):
        self._pool(name, onode, ins, outs, attrs, err, "avg_pool")

    def op_GlobalAveragePool(self, name, onode, ins, outs, attrs, err):
        self.emit(onode, name, "global_avg_pool", ins[:1], {}, outs[0])

    def op_Flatten(self, name, onode, ins, outs, attrs, err):
        self.emit(onode, name, "flatten", ins[:1], {"axis": int(attrs.get("axis", 1))}, outs[0])

    def op_Reshape(self, name, onode, ins, outs, attrs, err):
        if attrs.get("allowzero", 0):
            raise err("allowzero=1 is not supported")
        shape = self.need_const(ins[1], "shape", err)
        c = self.const(ins[0])
        if c is not None:
            tgt = [c.shape[i] if d == 0 else int(d) for i, d in enumerate(shape)]
            self.add_const(outs[0], c.reshape(tgt))
            return
        self.emit(onode, name, "reshape", ins[:1], {"shape": tuple(int(d) for d in shape)}, outs[0])

    def op_Transpose(self, name, onode, ins, outs, attrs, err):
        x = self.g.types.get(self.name(ins[0]))
        perm = attrs.get("perm")
        c = self.const(ins[0])
        if c is not None:
            self.add_const(outs[0], np.ascontiguousarray(np.transpose(c, perm)))
            return
        if perm is None:
            perm = list(range(x.rank))[::-1]
        self.emit(onode, name, "transpose", ins[:1], {"perm": tuple(int(p) for p in perm)}, outs[0])

    def op_Concat(self, name, onode, ins, outs, attrs, err):
        if "axis" not in attrs:
            raise err("missing attribute 'axis'")
        cs = [self.const(i) for i in ins]
        if all(c is not None for c in cs):
            self.add_const(outs[0], np.concatenate(cs, axis=attrs["axis"]))
            return
        if any(c is not None for c in cs):
            raise err("Concat of a constant with a computed tensor is not supported")
        self.emit(onode, name, "concat", ins, {"axis": int(attrs["axis"])}, outs[0])

    def op_Softmax(self, name, onode, ins, outs, attrs, err):
        x = self.g.types.get(self.name(ins[0]))
        axis = int(attrs.get("axis", -1 if self.opset >= 13 else 1))
        if axis < 0:
            axis += x.rank
        if self.opset < 13 and axis != x.rank - 1:
            raise err(f"opset {self.opset} Softmax flattens from axis {axis}; only the last axis is supported")
        self.emit(onode, name, "softmax", ins[:1], {"axis": axis}, outs[0])

    def op_Identity(self, name, onode, ins, outs, attrs, err):
        self.alias[outs[0]] = self.name(ins[0])

    def _qparams(self, ins, err):
        s = self.need_const(ins[1], "scale", err).astype(np.float64)
        zp = self.const(ins[2]) if len(ins) > 2 and ins[2] else np.zeros((), np.int8)
        if zp is None:
            raise err("zero point must be a constant")
        if np.any(s <= 0):
            raise err("scale must be positive")
        return s, zp

    def op_QuantizeLinear(self, name, onode, ins, outs, attrs, err):
        s, zp = self._qparams(ins, err)
        if zp.dtype not in (np.int8, np.uint8):
            raise err(f"zero point dtype {zp.dtype} is not supported (int8/uint8 only)")
        self.qlinear[outs[0]] = (self.name(ins[0]), s, zp, int(attrs.get("axis", 1)))

    def op_DequantizeLinear(self, name, onode, ins, outs, attrs, err):
        s, zp = self._qparams(ins, err)
        src = self.name(ins[0])
        axis = int(attrs.get("axis", 1))
        if src in self.qlinear:
            x, qs, qzp, qaxis = self.qlinear[src]
            if not (np.array_equal(qs, s) and np.array_equal(qzp, zp)):
                raise err("scale / zero point differ from the matching QuantizeLinear")
            info = np.iinfo(qzp.dtype)
            a = {"scale": float(s) if s.ndim == 0 else tuple(float(v) for v in s),
                 "zero_point": int(qzp) if qzp.ndim == 0 else tuple(int(v) for v in qzp),
                 "qmin": int(info.min), "qmax": int(info.max), "axis": axis}
            self.emit(onode, name, "fake_quant", [x], a, outs[0])
            self.g.meta["scale_hints"][outs[0]] = a["scale"]
            return
        q = self.int_consts.get(src)
        if q is None:
            raise err(f"input '{ins[0]}' is neither a QuantizeLinear output nor an integer constant")
        shp = [1] * q.ndim
        if s.ndim == 1:
            shp[axis] = -1
        val = (q.astype(np.float64) - np.asarray(zp, np.float64).reshape(shp if zp.ndim else ())) \
            * s.reshape(shp if s.ndim else ())
        self.add_const(outs[0], val.astype(np.float32))
        self.g.meta["scale_hints"][outs[0]] = float(s) if s.ndim == 0 else tuple(float(v) for v in s)


def import_onnx(src, *, name: str | None = None) -> Graph:
    """Import an ONNX model into a validated float :class:`~.ir.Graph`.

    Args:
        src: path (``str``/``Path``), serialized bytes, or an ``onnx.ModelProto``.
        name: graph name (default: the ONNX graph name).
    Returns:
        A ``kind == "float"`` graph; symbolic input dims (``dim_param``) are kept
        as strings; constant sub-expressions are not yet folded (see
        :mod:`.passes`).
    Raises:
        CompileError: malformed model, unsupported operator or attribute, or
            inconsistent shapes (message ``node 'NAME' (OpType): reason``).
        OSError: the file cannot be read.
    """
    from .ir import validate

    g = _Importer(_load(src), name).run()
    used = {i for n in g.nodes for i in n.inputs}
    for c in [c for c in g.constants if c not in used]:
        del g.constants[c], g.types[c]
    return validate(g)
