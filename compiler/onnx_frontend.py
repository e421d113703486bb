"""ONNX frontend: an ONNX model (file, bytes or ModelProto) -> float graph IR.

Every node of a model that ``onnx.checker`` accepts is imported (BYOC: nothing valid is
refused for an unsupported op).  Per node, in order (``docs/compiler.md`` has the table):

1. ``Constant`` nodes and nodes whose inputs are all constants are folded (ONNX's
   reference evaluator); ``Shape`` of a tensor with a symbolic batch is evaluated on
   symbolic dims, so exporters' ``Shape -> Gather -> Concat -> Reshape`` chains fold.
2. A QOperator op (``QLinearConv``, ``QLinearMatMul``, ``QGemm``, ``QLinearAdd``,
   ``QLinearGlobalAveragePool``) or a layout / max-pool op on a quantized tensor becomes
   its real-valued twin between fake-quant pairs (the QDQ form).
3. An op with an IR conversion (:data:`SUPPORTED_ONNX_OPS`: Conv incl. 1-D and dilated,
   Gemm, MatMul, Relu, Clip, Add, Sub, Mul, Div, Max / Min (of two tensors, or of
   a tensor and a constant; with a scalar: Clip), BatchNormalization, MaxPool, AveragePool,
   GlobalAveragePool, ReduceMean over H,W, Flatten, Reshape, Squeeze, Unsqueeze, Transpose,
   Concat, Softmax, Identity, Dropout, QuantizeLinear/DequantizeLinear) maps to IR ops.
4. Anything else -- or a form the converter refuses (its reason is kept) -- stays an
   ``onnx`` IR node, typed by ONNX shape inference (onnxruntime when ONNX cannot type it)
   and run on the host by a numpy kernel or onnxruntime.

A malformed file, a checker failure, a node neither ONNX nor onnxruntime can type, an
element type the IR has no dtype for, or a declared output shape that differs from the
computed one raises :class:`~.errors.CompileError` with ``node 'NAME' (OpType): reason``.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import numpy as np

from .errors import CompileError, node_error
from .ir import DTYPES, Graph, Node, TensorType, _infer_node, validate
from .onnx_attrs import attrs_to_json

__all__ = ["import_onnx", "declared_input_shapes", "SUPPORTED_ONNX_OPS"]

#: ONNX ops with an IR conversion (the others, and refused forms, stay ``onnx`` nodes)
SUPPORTED_ONNX_OPS = (
    "Conv", "Gemm", "MatMul", "Relu", "Clip", "Add", "Sub", "Mul", "Div", "Max", "Min", "BatchNormalization",
    "MaxPool", "AveragePool", "GlobalAveragePool", "ReduceMean", "Flatten", "Reshape", "Squeeze",
    "Unsqueeze", "Transpose", "Concat", "Softmax", "Identity", "Dropout", "Constant", "Resize",
    "Upsample", "Pad", "QuantizeLinear", "DequantizeLinear",
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


def declared_input_shapes(model) -> dict[str, tuple]:
    """The declared shape of every graph input of an ONNX ``ModelProto`` (initializers
    excluded): ``{name: dims}`` with an ``int`` per fixed dim and ``None`` per symbolic dim
    (``dim_param``, unnamed, ``?`` or negative)."""
    inits = {i.name for i in model.graph.initializer}
    out = {}
    for vi in model.graph.input:
        if vi.name in inits:
            continue
        tt = vi.type.tensor_type
        dims = []
        for d in (tt.shape.dim if tt.HasField("shape") else ()):
            dims.append(int(d.dim_value) if d.HasField("dim_value") and d.dim_value > 0 else None)
        out[vi.name] = tuple(dims)
    return out


def _dtype_name(elem_type: int) -> str | None:
    """The IR dtype name of an ONNX element type, or None when the IR has no such dtype."""
    from onnx import helper

    try:
        name = np.dtype(helper.tensor_dtype_to_np_dtype(elem_type)).name
    except (KeyError, TypeError, ValueError):
        return None
    return name if name in DTYPES else None


def _onnx_dtype(name: str) -> int:
    from onnx import helper

    return helper.np_dtype_to_tensor_dtype(np.dtype(name))


def _np(tensor) -> np.ndarray:
    from onnx import numpy_helper

    return numpy_helper.to_array(tensor)


def _outer_refs(onode) -> list[str]:
    """Names that the sub-graphs of a control-flow node (``If``, ``Loop``, ``Scan``) read
    from the enclosing scope (implicit inputs), in first-use order; ``[]`` for other nodes."""
    from onnx import AttributeProto

    def free(graph, bound: set) -> list[str]:
        bound = set(bound) | {i.name for i in graph.input} | {i.name for i in graph.initializer}
        out: list[str] = []
        for n in graph.node:
            for i in n.input:
                if i and i not in bound and i not in out:
                    out.append(i)
            for a in n.attribute:
                subs = [a.g] if a.type == AttributeProto.GRAPH else list(a.graphs) \
                    if a.type == AttributeProto.GRAPHS else []
                for sg in subs:
                    out += [v for v in free(sg, bound) if v not in out]
            bound |= {o for o in n.output if o}
        for o in graph.output:      # an output may be an outer value passed through
            if o.name not in bound and o.name not in out:
                out.append(o.name)
        return out

    refs: list[str] = []
    for a in onode.attribute:
        subs = [a.g] if a.type == AttributeProto.GRAPH else list(a.graphs) \
            if a.type == AttributeProto.GRAPHS else []
        for sg in subs:
            refs += [v for v in free(sg, set()) if v not in refs]
    return refs


class _Importer:
    def __init__(self, model, name: str | None, input_shapes: dict | None = None):
        import onnx

        self.input_shapes = input_shapes
        self.onnx = onnx
        self.model = model
        try:
            onnx.checker.check_model(model)
        except Exception as e:  # noqa: BLE001
            raise CompileError(f"malformed ONNX model: {str(e).splitlines()[0] if str(e) else e}") from None
        self.opset = 13
        self.opsets: dict[str, int] = {}
        for imp in model.opset_import:
            self.opsets["" if imp.domain == "ai.onnx" else imp.domain] = int(imp.version)
            if imp.domain in ("", "ai.onnx"):
                self.opset = imp.version
        self.opsets.setdefault("", self.opset)
        newest = onnx.defs.onnx_opset_version()
        if self.opset > newest:
            raise CompileError(f"model uses ONNX opset {self.opset}; the installed onnx "
                               f"{onnx.__version__} knows opsets up to {newest}")
        self.sym: dict[str, np.ndarray] = {}      # shape values with symbolic dims (object arrays)
        self.sym_src: dict[str, Any] = {}         # ... and the ONNX node computing each
        self.qnodes: dict[str, Any] = {}          # QuantizeLinear output -> its node
        self.twins: dict[str, str] = {}           # quantized tensor -> its real value (fake_quant)
        self.declared: dict[str, tuple] = {}      # declared value_info / output dims (None: unknown)
        self.declared_dtype: dict[str, str] = {}
        for vi in list(model.graph.value_info) + list(model.graph.output):
            tt = vi.type.tensor_type
            if tt.elem_type and _dtype_name(tt.elem_type):
                self.declared_dtype[vi.name] = _dtype_name(tt.elem_type)
            if tt.HasField("shape"):
                self.declared[vi.name] = tuple(int(d.dim_value) if d.HasField("dim_value") and d.dim_value >= 0
                                               else None for d in tt.shape.dim)
        self.g = Graph(name=name or model.graph.name or "model", kind="float")
        self.g.meta["scale_hints"] = {}
        self.alias: dict[str, str] = {}
        self.qlinear: dict[str, tuple[str, Any, Any, int]] = {}  # QuantizeLinear outputs
        self.int_consts: dict[str, np.ndarray] = {}
        self.orig_consts: dict[str, np.ndarray] = {}  # float16 / float64 constants as given

    def wrapper_model(self, graph, opsets=None):
        """A one-node model around ``graph`` (folding, typing, an ``onnx`` CPU step): the
        model's opsets and its model-local functions (``ModelProto.functions``, with the
        opsets their bodies import), so that a node calling such a function still runs."""
        from onnx import helper

        ids = dict(self.opsets) if opsets is None else {
            ("" if o.domain == "ai.onnx" else o.domain): o.version for o in opsets}
        for f in self.model.functions:
            for o in f.opset_import:
                ids.setdefault("" if o.domain == "ai.onnx" else o.domain, o.version)
        m = helper.make_model(graph, opset_imports=[helper.make_opsetid(d, v)
                                                    for d, v in ids.items()],
                              functions=list(self.model.functions))
        m.ir_version = self.model.ir_version
        return m

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

    def const_orig(self, v: str) -> np.ndarray | None:
        """A constant in the dtype the model gave it (float16 / float64 ones are float32 in
        :meth:`const`, the IR's real dtype)."""
        got = self.orig_consts.get(self.name(v))
        return got if got is not None else self.const(v)

    def add_const(self, name: str, arr: np.ndarray) -> None:
        arr = np.asarray(arr)
        if arr.dtype in (np.float16, np.float64):
            self.orig_consts[name] = arr    # what an ONNX node kept as is reads (its own dtype)
            with np.errstate(over="ignore"):
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
        dt = _dtype_name(tt.elem_type)
        if dt is None:
            raise CompileError(f"{what} '{vi.name}': element type "
                               f"{self.onnx.TensorProto.DataType.Name(tt.elem_type)} is not supported")
        if not tt.HasField("shape"):
            raise CompileError(f"{what} '{vi.name}': no shape")
        dims: list = []
        fix = (self.input_shapes or {}).get(vi.name)
        for k, d in enumerate(tt.shape.dim):
            if d.HasField("dim_value") and d.dim_value >= 0:
                dims.append(int(d.dim_value))
            elif fix is not None and k > 0 and k < len(fix) and fix[k] is not None:
                dims.append(int(fix[k]))      # a symbolic non-batch dim fixed by the caller
            elif d.HasField("dim_param") and d.dim_param and d.dim_param != "?":
                dims.append(d.dim_param)
            else:                             # unnamed, '?' or a negative placeholder
                dims.append("N" if k == 0 else f"{vi.name}_d{k}")
        return TensorType(dt, tuple(dims))

    def bind_output(self, vo) -> None:
        src = self.name(vo.name)
        if src == vo.name and src in self.g.inputs:
            self.g.outputs.append(vo.name)     # an input that is also an output: passed through
            return
        if src in self.g.constants or src in self.int_consts or src in self.g.inputs or src in self.sym:
            # a constant output or an input passed through: an Identity node computes it
            self._materialize_sym(src)
            if src in self.int_consts and src not in self.g.types:
                self.g.add_constant(src, self.int_consts[src])
            node = self.onnx.helper.make_node("Identity", [src], [vo.name], name=f"{vo.name}_identity")
            if src == vo.name:          # the output is itself an initializer: rename the constant
                c = self.g.fresh(f"{src}_value")
                self.g.add_constant(c, self.g.constants.pop(src))
                del self.g.types[src]
                self.int_consts.pop(src, None)
                node = self.onnx.helper.make_node("Identity", [c], [vo.name], name=f"{vo.name}_identity")
            self.alias.pop(vo.name, None)
            self.generic(node, node.name, "the output is a constant or a graph input")
            src = vo.name
        if src != vo.name:
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
            declared = [d.dim_value if d.HasField("dim_value") and d.dim_value >= 0 else None
                        for d in tt.shape.dim]
            ok = len(declared) == t.rank and all(
                d is None or (isinstance(s, int) and s == d) for d, s in zip(declared, t.shape))
            if not ok:
                # onnxruntime runs such a model (it warns, "Expected shape from model ... does
                # not match actual shape"): the computed shape is used, with a note
                prod = next(n for n in self.g.nodes if vo.name in n.outputs)
                self.g.meta.setdefault("notes", []).append(
                    f"output '{vo.name}' of node '{prod.name}' is declared "
                    f"{[d if d is not None else '?' for d in declared]} but computes "
                    f"{list(t.shape)}: the computed shape is used, as onnxruntime does")
        self.g.outputs.append(vo.name)

    def emit(self, onode, name: str, op: str, inputs: list[str], attrs: dict, out: str) -> None:
        node = Node(name, op, [self.name(i) for i in inputs], [out], attrs)
        try:
            (t,) = _infer_node(self.g, node, self.g.types)
        except CompileError as e:
            ne = node_error(name, onode.op_type, getattr(e, "reason", str(e)))
            ne.infeasible = getattr(e, "infeasible", False)
            raise ne from None
        self.g.nodes.append(node)
        self.g.types[out] = t

    # -- per-op conversion ----------------------------------------------------------
    def convert(self, onode, name: str) -> None:
        """Convert one ONNX node: fold it when its inputs are constants, map it to IR ops
        when a converter takes it, else keep it as an ``onnx`` node (CPU fallback)."""
        op = onode.op_type
        attrs = {a.name: self.onnx.helper.get_attribute_value(a) for a in onode.attribute}
        ins = list(onode.input)
        outs = list(onode.output)
        for i in ins:
            if i and self.name(i) not in self.g.types and self.name(i) not in self.int_consts \
                    and self.name(i) not in self.qlinear and self.name(i) not in self.sym:
                raise node_error(name, op, f"input '{i}' is not defined")
        err = lambda reason: node_error(name, op, reason)  # noqa: E731
        default = onode.domain in ("", "ai.onnx")
        if default and op == "Constant":
            self.op_Constant(name, onode, ins, outs, attrs, err)
            return
        if default and self._sym_op(onode, ins, outs, attrs):
            return
        if onode.domain in ("", "ai.onnx", "com.microsoft") and op in self._QOPS and \
                self._qoperator(onode, name, op, ins, outs, attrs, err):
            return
        for i in ins:       # a QuantizeLinear / shape value read by anything else: materialize
            if i and self.name(i) in self.qlinear and op != "DequantizeLinear":
                self._materialize_q(self.name(i))
            if i and self.name(i) in self.sym and not (op == "Reshape" and i == ins[1]):
                self._materialize_sym(self.name(i))
        if default and op == "CastLike" and self.const(ins[0]) is not None \
                and self.name(ins[1]) in self.g.types:
            self.add_const(outs[0], self.const(ins[0]).astype(self.g.types[self.name(ins[1])].dtype))
            return
        if self._foldable(onode, ins) and self._fold(onode, ins, outs):
            return
        fn = getattr(self, f"op_{op}", None) if default else None
        why = (f"no IR conversion for ONNX op {op}" if default else
               f"operator domain '{onode.domain}'")
        refused: CompileError | None = None     # the converter's own refusal, if any
        if fn is not None:
            if op != "MaxPool" and len([o for o in outs if o]) > 1:
                why = "more than one output"
            else:
                n_nodes, n_types = len(self.g.nodes), set(self.g.types)
                try:
                    fn(name, onode, ins, outs, attrs, err)
                    return
                except CompileError as e:
                    if getattr(e, "infeasible", False):
                        raise       # a shape no kernel takes (a window larger than its input)
                    why, refused = getattr(e, "reason", str(e)), e
                except (KeyError, IndexError, TypeError, ValueError, AttributeError) as e:
                    # a form the converter does not expect (a constant or shape value where
                    # it wants a tensor): the node runs as is on the host
                    why = f"the IR conversion does not take this form ({type(e).__name__}: {e})"
                del self.g.nodes[n_nodes:]      # a converter that failed half-way emits nothing
                for t in set(self.g.types) - n_types - set(self.g.constants):
                    del self.g.types[t]
        for i in ins:       # a shape value the converter would have read symbolically
            if i and self.name(i) in self.sym:
                self._materialize_sym(self.name(i))
        try:
            self.generic(onode, name, why)
        except CompileError:
            # ONNX cannot type it either: an invalid node; the converter's reason is the clearer one
            if refused is not None:
                raise refused from None
            raise

    # -- constant folding and shape values -------------------------------------------
    _NONDET = frozenset({"RandomNormal", "RandomUniform", "RandomNormalLike", "RandomUniformLike",
                         "Multinomial", "Bernoulli"})

    def _foldable(self, onode, ins) -> bool:
        if onode.op_type in self._NONDET or onode.domain not in ("", "ai.onnx"):
            return False
        if onode.op_type in ("QuantizeLinear", "DequantizeLinear"):
            return False     # converted: they carry the scales the quantizer uses
        given = [i for i in ins if i]
        return all(self.const(i) is not None for i in given) and (bool(given) or onode.op_type in (
            "ConstantOfShape", "Range", "EyeLike"))

    def _fold(self, onode, ins, outs) -> bool:
        """Evaluate a node whose inputs are all constants (ONNX's reference evaluator).
        Returns False when the evaluator cannot (the node is then converted or kept as an
        ``onnx`` node with constant inputs, and runs on the host)."""
        from onnx.reference import ReferenceEvaluator

        from onnx import TypeProto, helper

        if any(a.type in (a.GRAPH, a.GRAPHS) for a in onode.attribute):
            return False        # control flow: its sub-graphs may read outer-scope values
        feeds = {f"i{k}": self.const_orig(i) for k, i in enumerate(ins) if i}
        node = self.onnx.NodeProto()
        node.CopyFrom(onode)
        del node.input[:]
        node.input.extend([f"i{k}" if i else "" for k, i in enumerate(ins)])
        del node.output[:]
        node.output.extend([f"o{k}" if o else "" for k, o in enumerate(outs)])
        try:
            # a one-node model, so that the evaluator takes the op's version of the model's
            # opset (a bare node is run at the newest: opset-11 Unsqueeze axes would fail)
            graph = helper.make_graph(
                [node], "fold", [helper.make_value_info(k, TypeProto()) for k in feeds],
                [helper.make_value_info(o, TypeProto()) for o in node.output if o])
            fm = self.wrapper_model(graph)
            vals = ReferenceEvaluator(fm).run(None, feeds)
        except Exception:  # noqa: BLE001 - the evaluator raises many types
            return False
        for o, v in zip([o for o in outs if o], vals):
            self.add_const(o, np.asarray(v))
        return True

    def op_Constant(self, name, onode, ins, outs, attrs, err):
        from onnx import numpy_helper

        if len(attrs) != 1:
            raise err(f"Constant needs exactly one value attribute, got {sorted(attrs)}")
        ((key, v),) = attrs.items()
        if key == "value":
            arr = numpy_helper.to_array(v)
        elif key in ("value_float", "value_int"):
            arr = np.asarray(v, np.float32 if key == "value_float" else np.int64)
        elif key in ("value_floats", "value_ints"):
            arr = np.asarray(list(v), np.float32 if key == "value_floats" else np.int64)
        else:
            raise err(f"Constant attribute '{key}' is not supported")
        self.add_const(outs[0], arr)

    _SYM_OPS = frozenset({"Shape", "Gather", "Unsqueeze", "Squeeze", "Concat", "Slice", "Cast",
                          "Identity", "Mul", "Add", "Sub", "Div", "ReduceProd"})
    _SYM_ARITH = {"Mul": ("*", lambda a, b: a * b), "Add": ("+", lambda a, b: a + b),
                  "Sub": ("-", lambda a, b: a - b), "Div": ("/", lambda a, b: a // b)}

    @classmethod
    def _sym_arith(cls, op: str, a, b):
        """One element of ``a OP b`` on shape values: an int when both are ints, else a
        symbolic dim named by the expression (``"N*2"``); ``x*1``, ``x+0``, ``x-0``, ``x/1``
        stay ``x``."""
        sym, fn = cls._SYM_ARITH[op]
        if isinstance(a, (int, np.integer)) and isinstance(b, (int, np.integer)):
            if op == "Div" and int(b) == 0:
                raise ValueError("division by zero in a shape computation")
            return int(fn(int(a), int(b)))
        if isinstance(b, (int, np.integer)) and (int(b) == 1 and op in ("Mul", "Div") or
                                                  int(b) == 0 and op in ("Add", "Sub")):
            return a
        if isinstance(a, (int, np.integer)) and (int(a) == 1 and op == "Mul" or
                                                  int(a) == 0 and op == "Add"):
            return b
        return f"({a}{sym}{b})" if any(c in f"{a}{b}" for c in "*+-/") else f"{a}{sym}{b}"

    def _sym_op(self, onode, ins, outs, attrs) -> bool:
        """Shape computations on symbolic dims (``Shape -> Gather -> Concat -> Reshape`` of a
        tensor with a symbolic batch): evaluated on 1-D object arrays of dims, never run.
        Returns True when the node was handled this way."""
        op = onode.op_type
        if op not in self._SYM_OPS:
            return False
        if op == "Shape":
            t = self.g.types.get(self.name(ins[0]))
            if t is None:
                return False
            r = t.rank
            lo, hi = attrs.get("start", 0), attrs.get("end", r)
            dims = list(t.shape)[slice(lo + r if lo < 0 else lo, hi + r if hi < 0 else hi)]
            if all(isinstance(d, int) for d in dims):
                self.add_const(outs[0], np.asarray(dims, np.int64))
            else:
                self.sym[outs[0]] = np.asarray(dims, dtype=object)
                self.sym_src[outs[0]] = onode
            return True
        given = [i for i in ins if i]
        if not any(self.name(i) in self.sym for i in given):
            return False
        vals = []
        for i in given:
            v = self.sym.get(self.name(i))
            if v is None:
                v = self.const(i)
                if v is None:
                    return False
            vals.append(v)
        try:
            if op in ("Cast", "Identity"):
                if op == "Cast" and int(attrs.get("to", 7)) in (1, 10, 11, 16):
                    return False        # a shape cast to float (Resize scales): computed
                r = vals[0]
            elif op == "Gather":
                r = np.take(vals[0], np.asarray(vals[1], np.int64), axis=int(attrs.get("axis", 0)))
            elif op == "Concat":
                r = np.concatenate([np.asarray(v, dtype=object).reshape(-1) for v in vals])
            elif op == "Unsqueeze":
                axes = attrs.get("axes", None if len(vals) < 2 else list(np.asarray(vals[1]).reshape(-1)))
                r = np.asarray(vals[0], dtype=object)
                for a in sorted(int(a) + (r.ndim + len(axes) if a < 0 else 0) for a in axes):
                    r = np.expand_dims(r, a)
            elif op == "Squeeze":
                r = np.asarray(vals[0], dtype=object).reshape(-1) if vals[0].ndim <= 1 else None
                if r is None:
                    return False
                if r.size == 1:
                    r = r.reshape(())
            elif op in self._SYM_ARITH and len(vals) == 2:
                if any(np.asarray(v).dtype.kind == "f" for v in vals):
                    return False
                a, b = np.broadcast_arrays(np.asarray(vals[0], dtype=object),
                                           np.asarray(vals[1], dtype=object))
                r = np.asarray([self._sym_arith(op, u, v) for u, v in zip(a.reshape(-1), b.reshape(-1))],
                               dtype=object).reshape(a.shape)
            elif op == "ReduceProd" and vals[0].ndim == 1 and len(vals) == 1 and "axes" not in attrs:
                r = np.asarray(1, dtype=object)
                for d in vals[0]:
                    r = np.asarray(self._sym_arith("Mul", r.item(), d), dtype=object)
                if attrs.get("keepdims", 1):
                    r = r.reshape(1)
            elif op == "Slice" and vals[0].ndim == 1 and len(vals) >= 3:
                st = int(np.asarray(vals[1]).reshape(-1)[0])
                en = int(np.asarray(vals[2]).reshape(-1)[0])
                step = int(np.asarray(vals[4]).reshape(-1)[0]) if len(vals) > 4 else 1
                r = vals[0][slice(st, max(min(en, 1 << 62), -(1 << 62)), step)]
            else:
                return False
        except (ValueError, IndexError, TypeError):
            return False
        r = np.asarray(r, dtype=object)
        if all(isinstance(d, (int, np.integer)) for d in r.reshape(-1)):
            self.add_const(outs[0], r.astype(np.int64))
        else:
            self.sym[outs[0]] = r
            self.sym_src[outs[0]] = onode
        return True

    def _materialize_sym(self, v: str) -> None:
        """Emit the (so far only symbolically evaluated) shape nodes that compute ``v``."""
        if v not in self.sym:
            return
        onode = self.sym_src[v]
        for i in onode.input:
            if i and self.name(i) in self.sym:
                self._materialize_sym(self.name(i))
        del self.sym[v]
        self.generic(onode, onode.name or f"{onode.op_type}_{v}", "shape computation on a "
                     "symbolic dim (runs on the host)")

    def _materialize_q(self, v: str) -> None:
        """Emit the quantized tensor ``v`` (so far only known as ``Q(x_real, s, zp)``) as a
        QuantizeLinear ``onnx`` node, for a consumer that reads the integers themselves."""
        x, sc, zp, axis = self.qlinear.pop(v)
        onode = self.qnodes.get(v)
        if onode is None:       # the output of a QOperator op converted to its real twin
            sn, zn = self.g.fresh(f"{v}_scale"), self.g.fresh(f"{v}_zero_point")
            self.add_const(sn, np.asarray(sc, np.float32))
            self.g.add_constant(zn, np.asarray(zp))
            onode = self.onnx.helper.make_node("QuantizeLinear", [x, sn, zn], [v], name=f"{v}_quantize",
                                               axis=axis)
        self.generic(onode, onode.name or f"QuantizeLinear_{v}", "a quantized tensor read as integers "
                     "(QOperator format)")

    # -- QOperator models: each QLinear* op becomes its real-valued twin -----------------------
    _QOPS = frozenset({"QLinearConv", "QLinearMatMul", "QLinearAdd", "QLinearGlobalAveragePool", "QGemm",
                       "MaxPool", "Flatten", "Reshape", "Transpose", "Squeeze", "Unsqueeze", "Identity"})

    def _twin(self, v: str, onode, name: str) -> str:
        """The real value ``DQ(v)`` of a quantized tensor ``Q(x, s, zp)``: a ``fake_quant``
        of ``x`` (cached), exactly what a QDQ model writes."""
        v = self.name(v)
        got = self.twins.get(v)
        if got is None:
            x, sc, zp, axis = self.qlinear[v]
            info = np.iinfo(zp.dtype)
            a = {"scale": float(sc) if np.ndim(sc) == 0 else tuple(float(t) for t in sc),
                 "zero_point": int(zp) if np.ndim(zp) == 0 else tuple(int(t) for t in zp),
                 "qmin": int(info.min), "qmax": int(info.max), "axis": axis}
            got = self.twins[v] = self.g.fresh(f"{v}_real")
            self.emit(onode, self.g.fresh(f"{name}_dq"), "fake_quant", [x], a, got)
            self.g.meta["scale_hints"][got] = a["scale"]
        return got

    def _dq_const(self, q: str, sc, zp, axis: int, base: str) -> str:
        """A float constant ``(q - zp) * s`` of an integer initializer (per tensor or axis);
        its scale is kept as a hint for the quantizer."""
        qv = self.const(q).astype(np.float64)
        shp = [1] * qv.ndim
        if np.ndim(sc) == 1 and qv.ndim:
            shp[axis] = -1
        zpa = np.asarray(zp, np.float64)
        val = (qv - (zpa.reshape(shp) if zpa.ndim else zpa)) * np.asarray(sc).reshape(shp if np.ndim(sc) else ())
        n = self.g.fresh(base)
        self.add_const(n, val.astype(np.float32))
        self.g.meta["scale_hints"][n] = float(sc) if np.ndim(sc) == 0 else tuple(float(t) for t in sc)
        return n

    def _qoperator(self, onode, name, op, ins, outs, attrs, err) -> bool:
        """Convert a QOperator op (or a layout / max-pool op on a quantized tensor) to its
        real-valued twin between fake-quant pairs, the QDQ form the quantizer maps to VTA:
        ``QLinearConv(x, ...) = Q(conv(DQ(x), DQ(w)) + DQ(B), y_scale, y_zero_point)``.  Returns
        False when the node does not fit (it then runs as is on the CPU)."""
        q = lambda i: self.name(i) in self.qlinear  # noqa: E731
        c = lambda i: self.const(i) is not None  # noqa: E731
        try:
            if op in ("MaxPool", "Flatten", "Reshape", "Transpose", "Squeeze", "Unsqueeze", "Identity"):
                if not ins or not q(ins[0]) or len([o for o in outs if o]) != 1 or \
                        any(i and not c(i) for i in ins[1:]):
                    return False
                x, sc, zp, axis = self.qlinear[self.name(ins[0])]
                real = self.g.fresh(f"{outs[0]}_real")
                sub = self.onnx.NodeProto()
                sub.CopyFrom(onode)
                sub.input[0] = self._twin(ins[0], onode, name)
                sub.output[0] = real
                self.convert(sub, name)
                self.qlinear[outs[0]] = (self.name(real), sc, zp, axis)
                return True
            if op == "QLinearConv" or op == "QLinearMatMul":
                xq, xs, xz, wq, ws, wz, ys, yz = (list(ins) + [""] * 8)[:8]
                if not (q(xq) and c(wq) and all(c(i) for i in (xs, ws, ys) if i)):
                    return False
                sw, zw = self._qparams([wq, ws, wz], err)
                sy, zy = self._qparams([None, ys, yz], err)
                xr = self._twin(xq, onode, name)
                w = self._dq_const(wq, sw, zw, 0 if op == "QLinearConv" else 1, f"{name}_w")
                real = self.g.fresh(f"{outs[0]}_real")
                new = [xr, w]
                if op == "QLinearConv" and len(ins) > 8 and ins[8]:
                    sx, _ = self._qparams([None, xs, xz], err)
                    b = self.g.fresh(f"{name}_b")
                    self.add_const(b, (self.const(ins[8]).astype(np.float64) * sx * sw).astype(np.float32))
                    new.append(b)
                conv = self.onnx.helper.make_node("Conv" if op == "QLinearConv" else "MatMul", new, [real],
                                                  name=name, **{k: v for k, v in attrs.items()})
                self.convert(conv, name)
                self.qlinear[outs[0]] = (self.name(real), sy, zy, 1)
                return True
            if op == "QGemm":
                a, as_, az, bq, bs, bz = ins[:6]
                cq = ins[6] if len(ins) > 6 else ""
                ys = ins[7] if len(ins) > 7 else ""
                yz = ins[8] if len(ins) > 8 else ""
                if not (q(a) and c(bq) and (not cq or c(cq)) and ys and c(ys)):
                    return False
                sb, zb = self._qparams([bq, bs, bz], err)
                sa, _ = self._qparams([None, as_, az], err)
                sy, zy = self._qparams([None, ys, yz], err)
                tb = int(attrs.get("transB", 0))
                w = self._dq_const(bq, sb, zb, 0 if tb else 1, f"{name}_w")
                new = [self._twin(a, onode, name), w]
                if cq:
                    b = self.g.fresh(f"{name}_b")
                    self.add_const(b, (self.const(cq).astype(np.float64) * sa * sb).astype(np.float32))
                    new.append(b)
                real = self.g.fresh(f"{outs[0]}_real")
                gemm = self.onnx.helper.make_node("Gemm", new, [real], name=name, transB=tb,
                                                  transA=int(attrs.get("transA", 0)),
                                                  alpha=float(attrs.get("alpha", 1.0)))
                self.convert(gemm, name)
                self.qlinear[outs[0]] = (self.name(real), sy, zy, 1)
                return True
            if op == "QLinearAdd":
                a, as_, az, b, bs, bz, cs, cz = (list(ins) + [""] * 8)[:8]
                if not (q(a) and q(b) and c(cs)):
                    return False
                sy, zy = self._qparams([None, cs, cz], err)
                real = self.g.fresh(f"{outs[0]}_real")
                add = self.onnx.helper.make_node("Add", [self._twin(a, onode, name), self._twin(b, onode, name)],
                                                 [real], name=name)
                self.convert(add, name)
                self.qlinear[outs[0]] = (self.name(real), sy, zy, 1)
                return True
            if op == "QLinearGlobalAveragePool":
                x, xs, xz, ys, yz = (list(ins) + [""] * 5)[:5]
                if not (q(x) and c(ys)) or attrs.get("channels_last", 0):
                    return False
                sy, zy = self._qparams([None, ys, yz], err)
                real = self.g.fresh(f"{outs[0]}_real")
                gap = self.onnx.helper.make_node("GlobalAveragePool", [self._twin(x, onode, name)], [real], name=name)
                self.convert(gap, name)
                self.qlinear[outs[0]] = (self.name(real), sy, zy, 1)
                return True
        except CompileError:
            return False
        return False

    # -- the CPU fallback: an ONNX node kept as is ---------------------------------------
    def generic(self, onode, name: str, why: str) -> None:
        """Keep ``onode`` as an ``onnx`` IR node: typed by ONNX shape inference, run on the
        host by a numpy kernel or onnxruntime (``runtime/cpu_float.py``).

        Raises:
            CompileError: ONNX cannot type its outputs (an invalid node).
        """
        import base64

        from onnx import helper, shape_inference

        op = onode.op_type
        captured = _outer_refs(onode)       # values a control-flow body reads from this scope
        in_slots, names, feed_names = self._generic_inputs(onode, name, captured)
        in_types = [self.g.types[v] for v in names]
        flow = any(a.type in (a.GRAPH, a.GRAPHS) for a in onode.attribute)
        # a control-flow node's wrapper declares only ranks: onnxruntime types each branch
        # with the shapes it is given, and a branch that does not run at these shapes may
        # not type (silero-vad's 8 kHz branch at a 16 kHz frame size)
        vis = [helper.make_tensor_value_info(f, _onnx_dtype(t.dtype),
                                             [f"{f}_d{j}" for j in range(t.rank)] if flow
                                             else list(t.shape))
               for f, t in zip(feed_names, in_types)]
        if captured and why.startswith("no IR conversion"):
            why = (f"control flow ({op}): runs whole on onnxruntime as a sub-graph model "
                   f"(its bodies read {len(captured)} outer value(s))")
        elif any(a.type in (a.GRAPH, a.GRAPHS) for a in onode.attribute) and \
                why.startswith("no IR conversion"):
            why = f"control flow ({op}): runs whole on onnxruntime as a sub-graph model"
        node = self.onnx.NodeProto()
        node.CopyFrom(onode)
        del node.input[:]
        node.input.extend([f"i{k}" if i else "" for k, i in enumerate(onode.input)])
        out_slots = [k for k, o in enumerate(onode.output) if o]
        del node.output[:]
        node.output.extend([f"o{k}" if o else "" for k, o in enumerate(onode.output)])
        opsets = [helper.make_opsetid(d, v) for d, v in self.opsets.items()]
        # typing: shape inference with the constant inputs' values (data propagation)
        inits = [self.onnx.numpy_helper.from_array(np.asarray(self.const(v)), f)
                 for f, v in zip(feed_names, names) if self.const(v) is not None]
        probe = self.wrapper_model(helper.make_graph([node], "probe", vis, [], inits), opsets)
        failed = ""
        try:
            inferred = shape_inference.infer_shapes(probe, strict_mode=True, data_prop=True)
            vinfo = {vi.name: vi for vi in list(inferred.graph.value_info) + list(inferred.graph.output)}
        except Exception as e:  # noqa: BLE001 - ONNX's inference may not know the op's function body
            vinfo = {}
            failed = (f"ONNX shape inference fails on it "
                      f"({str(e).splitlines()[0] if str(e) else type(e).__name__})")
        out_types, probed = [], None
        for k in out_slots:
            vi = vinfo.get(f"o{k}")
            tt = vi.type.tensor_type if vi is not None else None
            dt = _dtype_name(tt.elem_type) if tt is not None and tt.elem_type else None
            out = onode.output[k]
            known = self.declared.get(out)
            if failed:      # ONNX cannot type it: onnxruntime must run it (an invalid node raises)
                if probed is None:
                    probed = self._probe(node, vis, feed_names, names, opsets, name, f"{why}; {failed}")
                dt, dims = probed[out_slots.index(k)]
                if known is not None and None not in known and len(known) == len(dims):
                    dims = list(known)  # a data-dependent shape: the model's declaration
            elif dt is not None and not tt.HasField("shape") and known is not None and None not in known:
                dims = list(known)      # the model declares what inference cannot derive
            elif dt is None and out in self.declared_dtype and known is not None and None not in known:
                dt, dims = self.declared_dtype[out], list(known)
            elif dt is None or not tt.HasField("shape"):
                # no ONNX schema (a com.microsoft op) or no static shape: ask onnxruntime
                if probed is None:
                    probed = self._probe(node, vis, feed_names, names, opsets, name, why)
                dt, dims = probed[out_slots.index(k)]
            else:
                known = self.declared.get(out, ())
                dims = [int(d.dim_value) if d.HasField("dim_value") else
                        (known[j] if j < len(known) and known[j] is not None else
                         (d.dim_param if d.dim_param and not d.dim_param.startswith("unk__")
                          else f"{out}_d{j}"))
                        for j, d in enumerate(tt.shape.dim)]
                concrete = all(self.g.types[v].is_concrete() for v in names)
                if any(isinstance(d, str) and d.startswith(f"{out}_d") for d in dims) and (
                        flow or concrete):
                    if probed is None:      # data-dependent shape (Resize by an input): run it once
                        try:
                            probed = self._probe(node, vis, feed_names, names, opsets, name, why)
                        except CompileError:
                            if concrete:
                                raise
                            probed = False  # symbolic dims it cannot run at: ONNX's dims
                    if probed:
                        dt, dims = probed[out_slots.index(k)]
            out_types.append(TensorType(dt, tuple(dims)))
        ovis = [helper.make_tensor_value_info(f"o{k}", _onnx_dtype(t.dtype), None if flow
                                              else list(t.shape))
                for k, t in zip(out_slots, out_types)]
        run_model = self.wrapper_model(helper.make_graph([node], op, vis, ovis), opsets)
        dom = onode.domain or ""
        attrs = {"op_type": op, "domain": dom, "opset": int(self.opsets.get(dom if dom != "ai.onnx" else "", 1)),
                 "onnx_attrs": attrs_to_json(onode),
                 "in_types": tuple((t.dtype, tuple(t.shape)) for t in in_types),
                 "out_types": tuple((t.dtype, tuple(t.shape)) for t in out_types),
                 "in_slots": tuple(in_slots), "out_slots": tuple(out_slots),
                 "model": base64.b64encode(run_model.SerializeToString()).decode("ascii"),
                 "why": why}
        outs = [onode.output[k] for k in out_slots]
        node_ir = Node(name if name not in {n.name for n in self.g.nodes} else self.g.fresh(name),
                       "onnx", names, outs, attrs)
        self.g.nodes.append(node_ir)
        for o, t in zip(outs, out_types):
            self.g.types[o] = t

    def _generic_inputs(self, onode, name: str, captured: list[str]) -> tuple[list, list, list]:
        """The inputs of an ONNX node kept as is (its own, then the outer values its bodies
        read, ``captured``), each made an IR tensor: a symbolic shape value or a QLinear
        tensor materialized, an integer constant added, a float16 / float64 constant in the
        model's dtype (``NAME__float64``).  Returns ``(slots, IR names, feed names)``: the
        input positions present, their IR tensors, and the wrapper model's input names
        (``iK``; a captured value keeps its name, by which the sub-graphs refer to it).

        Raises:
            CompileError: an input no node or initializer defines.
        """
        in_slots, names, feed_names = [], [], []
        for k, i in enumerate(list(onode.input) + captured):
            if not i:
                continue
            v = self.name(i)
            if v in self.sym:
                self._materialize_sym(v)
            if v in self.qlinear:
                self._materialize_q(v)
            if v in self.int_consts and v not in self.g.types:
                self.g.add_constant(v, self.int_consts[v])
            if v in self.orig_consts and v in self.g.constants:
                # the node reads the constant in the model's dtype (float64 stays float64)
                orig = self.orig_consts[v]
                c = f"{v}__{orig.dtype.name}"
                if c not in self.g.constants:
                    self.g.add_constant(c, orig)
                v = c
            if v not in self.g.types:
                raise node_error(name, onode.op_type, f"input '{i}' is not defined")
            in_slots.append(k)
            names.append(v)
            feed_names.append(f"i{k}" if k < len(onode.input) else i)
        return in_slots, names, feed_names

    def _probe(self, node, vis, feed_names, names, opsets, name, why) -> list:
        """Output ``(dtype, dims)`` of a node ONNX shape inference cannot type, from an
        onnxruntime run on its constant inputs and ones elsewhere (a symbolic batch is run
        at 1 and 2: an output dim 0 that follows it is the batch).  With symbolic dims in
        its inputs it runs twice, at two sizes for them: an output dim that differs between
        the runs is symbolic (``NAME_dK``), one that agrees is taken as fixed (where batch 2
        does not run, dim 0 is taken as the batch).  A ``Reshape`` whose
        target is computed (a shape value materialized on the host) gets its rank from the
        target's length and symbolic dims where the target is not constant."""
        from onnx import TypeProto, helper

        try:
            import onnxruntime as ort
        except ImportError:
            raise node_error(name, node.op_type, f"{why}; typing it needs onnxruntime") from None
        outs = [helper.make_value_info(f"o{k}", TypeProto()) for k, o in enumerate(node.output) if o]
        m = self.wrapper_model(helper.make_graph([node], "probe", vis, outs), opsets)
        batch, sym = None, []
        for v in names:
            t = self.g.types[v]
            if self.const(v) is None:
                if t.rank and isinstance(t.shape[0], str):
                    batch = t.shape[0]
                sym += [d for d in t.shape[1:] if isinstance(d, str) and d not in sym and d != batch]
        if node.op_type == "Reshape" and len(names) == 2 and self.const(names[1]) is None:
            tt = self.g.types[names[1]]
            x = self.g.types[names[0]]
            if tt.rank == 1 and isinstance(tt.shape[0], int):
                dims = [x.shape[0] if j == 0 and batch is not None else f"{node.output[0]}_d{j}"
                        for j in range(tt.shape[0])]
                return [(x.dtype, dims)]
        runs = []
        sizes = [((1, 32, 8))] + ([(2, 48, 8)] if sym or batch is not None else [])
        for bsz, base, step in sizes:
            val = {d: base + step * j for j, d in enumerate(sym)}
            feeds = {}
            for f, v in zip(feed_names, names):
                t = self.g.types[v]
                c = self.const(v)
                if c is None:
                    c = np.ones([(bsz if d == batch else val[d]) if isinstance(d, str) else d
                                 for d in t.shape], t.dtype)
                feeds[f] = np.asarray(c)
            try:
                so = ort.SessionOptions()
                so.log_severity_level = 4       # a failed probe is reported by the error below
                sess = ort.InferenceSession(m.SerializeToString(), so, providers=["CPUExecutionProvider"])
                runs.append([np.asarray(v) for v in sess.run(None, feeds)])
            except Exception as e:  # noqa: BLE001
                if runs and not sym:
                    break       # batch 2 does not fit (a state with a batch of its own)
                what = f" with symbolic dims {sym} at {list(val.values())}" if sym else ""
                raise node_error(name, node.op_type, f"{why}; onnxruntime cannot run it{what} "
                                 f"({str(e).splitlines()[0] if str(e) else type(e).__name__})") from None
        res = []
        for k, v in enumerate(runs[0]):
            if v.dtype.name not in DTYPES:
                raise node_error(name, node.op_type, f"{why}; output dtype {v.dtype} is not supported")
            dims: list = list(v.shape)
            if len(runs) > 1:
                w = runs[1][k]
                if w.ndim != v.ndim:
                    raise node_error(name, node.op_type, f"{why}; its output rank depends on "
                                     f"the symbolic dims {sym}")
                out = node.output[k] if k < len(node.output) else name
                dims = [d if d == e else batch if (j == 0 and batch is not None and (d, e) == (1, 2))
                        else f"{out}_d{j}" for j, (d, e) in enumerate(zip(v.shape, w.shape))]
            elif batch is not None and dims and dims[0] == 1:
                dims[0] = batch     # run at batch 1: a dim 0 of 1 follows the batch
            res.append((v.dtype.name, dims))
        return res

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
        e = err(f"auto_pad {ap!r} is not one of NOTSET, SAME_UPPER, SAME_LOWER, VALID")
        e.infeasible = True     # an invalid model (onnxruntime refuses it too)
        raise e

    def op_Conv(self, name, onode, ins, outs, attrs, err):
        x = self.g.types.get(self.name(ins[0]))
        w = self.need_const(ins[1], "weight", err)
        if x is not None and x.rank == 3 and w.ndim == 3:
            # 1-D conv: a 2-D conv of height 1 between two reshapes (exact)
            a = dict(attrs)
            for k, one in (("kernel_shape", 1), ("strides", 1), ("dilations", 1)):
                if k in a:
                    a[k] = [one] + list(a[k])
            if "pads" in a:
                p = list(a["pads"])
                a["pads"] = [0, p[0], 0, p[1]]
            x4, y4 = self.g.fresh(f"{name}_x2d"), self.g.fresh(f"{name}_y2d")
            self.emit(onode, self.g.fresh(f"{name}_to2d"), "reshape", [ins[0]], {"shape": (0, 0, 1, -1)}, x4)
            w4 = self.g.fresh(f"{name}_w2d")
            self.add_const(w4, w.reshape(w.shape[0], w.shape[1], 1, w.shape[2]))
            self.op_Conv(name, onode, [x4, w4] + list(ins[2:]), [y4], a, err)
            self.emit(onode, self.g.fresh(f"{name}_to1d"), "reshape", [y4], {"shape": (0, 0, -1)}, outs[0])
            return
        if x is None or x.rank != 4:
            raise err(f"only 1-D and 2-D convolution on a 3-D / 4-D input is supported, got {x}")
        if w.ndim != 4:
            raise err(f"weight must be 4-D, got shape {list(w.shape)}")
        dil = tuple(int(d) for d in attrs.get("dilations", [1, 1]))
        if any(d < 1 for d in dil) or len(dil) != 2:
            raise err(f"dilations {list(dil)} are not valid")
        if dil != (1, 1):
            # a dilated kernel is a larger dense kernel with zeros between the taps (exact;
            # (d*(k-1)+1)^2 / k^2 more MACs, on VTA instead of the CPU)
            o, ci, kh, kw = w.shape
            wd = np.zeros((o, ci, dil[0] * (kh - 1) + 1, dil[1] * (kw - 1) + 1), w.dtype)
            wd[:, :, ::dil[0], ::dil[1]] = w
            wn = self.g.fresh(f"{name}_w_dilated")
            self.add_const(wn, wd)
            hint = self.g.meta["scale_hints"].get(self.name(ins[1]))
            if hint is not None:
                self.g.meta["scale_hints"][wn] = hint
            ins = [ins[0], wn] + list(ins[2:])
            w = wd
            attrs = {k: v for k, v in attrs.items() if k != "dilations"}
            attrs["kernel_shape"] = list(wd.shape[2:])
        kernel = tuple(attrs.get("kernel_shape", w.shape[2:]))
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
            xt = self.g.fresh(f"{name}_xT")
            self.emit(onode, self.g.fresh(f"{name}_transA"), "transpose", [ins[0]], {"perm": (1, 0)}, xt)
            ins = [xt] + list(ins[1:])
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
        if lo is not None and hi is not None and lo > hi:
            # ONNX defines it, min(max(x, min), max): every output is max; the host computes
            # exactly that (an int8 clip to an empty range rounds to one)
            raise err(f"min {lo} > max {hi}: every output is max (runs on the host)")
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
        if self.const(b) is None:       # two tensors (squeeze-excite, hard-swish): the larger first
            ta, tb = self.g.types.get(self.name(a)), self.g.types.get(self.name(b))
            if ta is not None and tb is not None and tb.rank == ta.rank and \
                    all(x == y or x == 1 for x, y in zip(ta.shape, tb.shape)) and ta.shape != tb.shape:
                a, b = b, a
        self.emit(onode, name, "mul", [a, b], {}, outs[0])

    def op_Sub(self, name, onode, ins, outs, attrs, err):
        c = self.const(ins[1])
        if c is None or self.const(ins[0]) is not None or c.dtype.kind != "f":
            raise err("Sub of a computed tensor is kept as an ONNX node (only x - constant maps to add)")
        cn = self.g.fresh(f"{name}_neg")
        self.add_const(cn, -c.astype(np.float32))
        self.emit(onode, name, "add", [ins[0], cn], {"act": "none", "act_min": None, "act_max": None},
                  outs[0])

    def op_Div(self, name, onode, ins, outs, attrs, err):
        c = self.const(ins[1])
        if c is None or self.const(ins[0]) is not None or c.dtype.kind != "f" or not np.all(c != 0):
            raise err("Div by a computed tensor is kept as an ONNX node (only x / constant maps to mul)")
        cn = self.g.fresh(f"{name}_recip")
        self.add_const(cn, (1.0 / c.astype(np.float64)).astype(np.float32))
        self.emit(onode, name, "mul", [ins[0], cn], {}, outs[0])

    def op_Max(self, name, onode, ins, outs, attrs, err):
        """``Max`` -> ``max`` (:meth:`_extremum`; a float scalar constant: ``clip`` with that
        minimum)."""
        self._extremum("max", name, onode, ins, outs, err)

    def op_Min(self, name, onode, ins, outs, attrs, err):
        """``Min`` -> ``min`` (:meth:`_extremum`; a float scalar constant: ``clip`` with that
        maximum)."""
        self._extremum("min", name, onode, ins, outs, err)

    def _extremum(self, op, name, onode, ins, outs, err):
        """``Max`` / ``Min`` of two operands -> ``max`` / ``min``, the larger operand first and
        the other (a tensor or a float constant) equal to or broadcast against it; of a tensor
        and a float scalar constant -> ``clip`` (the ALU immediate of a standalone
        requantize); of one input -> identity.  More inputs, two constants, an integer
        constant or one that would enlarge the tensor stay an ONNX node."""
        ins = [i for i in ins if i]
        if len(ins) == 1:
            self.alias[outs[0]] = self.name(ins[0])
            return
        if len(ins) != 2:
            raise err(f"{onode.op_type} of {len(ins)} inputs is kept as an ONNX node (two map to {op})")
        a, b = ins
        if self.const(a) is not None and self.const(b) is None:
            a, b = b, a
        c, ta = self.const(b), self.g.types.get(self.name(a))
        if c is not None:
            if self.const(a) is not None or c.dtype.kind != "f" or self.name(b) not in self.g.constants:
                raise err(f"{onode.op_type} of two constants or with a {c.dtype} constant is kept as an "
                          f"ONNX node")
            if c.size == 1:
                v = float(c.reshape(()))
                lim = {"min": v, "max": None} if op == "max" else {"min": None, "max": v}
                self.emit(onode, name, "clip", [a], lim, outs[0])
                return
            if ta is None or c.ndim > ta.rank or \
                    any(d != 1 and d != t for d, t in zip(c.shape[::-1], ta.shape[::-1])):
                raise err(f"{onode.op_type} with a constant of shape {list(c.shape)} that enlarges the "
                          f"tensor is kept as an ONNX node")
            self.emit(onode, name, op, [a, b], {}, outs[0])
            return
        tb = self.g.types.get(self.name(b))
        if ta is not None and tb is not None and tb.rank >= ta.rank and ta.shape != tb.shape and \
                all(x == y or x == 1 for x, y in zip(ta.shape[::-1], tb.shape[::-1])):
            a, b = b, a
        self.emit(onode, name, op, [a, b], {}, outs[0])

    def op_Dropout(self, name, onode, ins, outs, attrs, err):
        if len([o for o in outs if o]) > 1:
            raise err("the mask output of Dropout is computed on the host")
        self.alias[outs[0]] = self.name(ins[0])     # inference: identity

    def _reshape_to(self, onode, name, x: str, dims: list, out: str, err) -> None:
        """Emit ``reshape`` of ``x`` to ``dims`` (ints, ``-1``, or symbolic dims: the input's
        own, or expressions of them such as ``"N*2"``).  A symbolic dim at the position of
        the same dim of the input is kept (``0``); at most one entry may be unknown (``-1``
        or another symbolic dim): it becomes ``-1``."""
        t = self.g.types[self.name(x)]
        tgt, unknown = [], 0
        for k, d in enumerate(dims):
            if isinstance(d, (int, np.integer)) and int(d) != -1:
                tgt.append(int(d))
            elif isinstance(d, str) and k < t.rank and t.shape[k] == d:
                tgt.append(0)
            else:
                tgt.append(-1)
                unknown += 1
        if unknown > 1:
            raise err(f"cannot express the target {[str(d) for d in dims]} of {t} as a reshape "
                      f"(more than one unknown dim)")
        self.emit(onode, name, "reshape", [x], {"shape": tuple(tgt)}, out)

    def _axes(self, ins, attrs, err, rank: int, pos: int = 1) -> list[int] | None:
        if "axes" in attrs:
            ax = list(attrs["axes"])
        elif len(ins) > pos and ins[pos]:
            ax = [int(a) for a in self.need_const(ins[pos], "axes", err).reshape(-1)]
        else:
            return None
        return sorted(a + rank if a < 0 else a for a in ax)

    def op_Squeeze(self, name, onode, ins, outs, attrs, err):
        t = self.g.types[self.name(ins[0])]
        ax = self._axes(ins, attrs, err, t.rank)
        if ax is None:
            ax = [k for k, d in enumerate(t.shape) if d == 1]
        if any(t.shape[a] != 1 for a in ax):
            raise err(f"squeezed axes {ax} of {t} are not all 1")
        self._reshape_to(onode, name, ins[0], [d for k, d in enumerate(t.shape) if k not in ax], outs[0], err)

    def op_Unsqueeze(self, name, onode, ins, outs, attrs, err):
        t = self.g.types[self.name(ins[0])]
        ax = self._axes(ins, attrs, err, t.rank + len(attrs.get("axes", ())) if "axes" in attrs else
                        t.rank + int(np.asarray(self.need_const(ins[1], "axes", err)).size))
        dims = list(t.shape)
        for a in ax:
            dims.insert(a, 1)
        self._reshape_to(onode, name, ins[0], dims, outs[0], err)

    def op_ReduceMean(self, name, onode, ins, outs, attrs, err):
        t = self.g.types[self.name(ins[0])]
        ax = self._axes(ins, attrs, err, t.rank)
        if t.rank != 4 or ax != [2, 3]:
            raise err(f"ReduceMean over axes {ax} of {t} (only H,W of NCHW maps to a global pool)")
        if attrs.get("keepdims", 1):
            self.emit(onode, name, "global_avg_pool", ins[:1], {}, outs[0])
            return
        mid = self.g.fresh(f"{name}_pool")
        self.emit(onode, name, "global_avg_pool", ins[:1], {}, mid)
        self.emit(onode, self.g.fresh(f"{name}_flat"), "reshape", [mid], {"shape": (0, 0)}, outs[0])

    @staticmethod
    def _str(v, default: str) -> str:
        v = default if v is None else v
        return v.decode() if isinstance(v, bytes) else str(v)

    def _int_scales(self, x: TensorType, sc, err) -> tuple[int, int]:
        """Integer H, W factors from a Resize/Upsample scales vector (N and C must be 1)."""
        sc = [float(v) for v in np.asarray(sc).reshape(-1)]
        if len(sc) != 4 or sc[0] != 1 or sc[1] != 1 or any(v < 1 or v != int(v) for v in sc[2:]):
            raise err(f"scales {sc}: only integer H/W factors map to a nearest-neighbour repeat")
        return int(sc[2]), int(sc[3])

    def op_Resize(self, name, onode, ins, outs, attrs, err):
        """Nearest Resize by integer H/W factors: a pixel repeat (exact, int8 on the host)
        for the coordinate / rounding modes under which it is one."""
        x = self.g.types[self.name(ins[0])]
        if x.rank != 4:
            raise err(f"Resize of {x}: only NCHW maps to upsample")
        if self._str(attrs.get("mode"), "nearest") != "nearest":
            raise err(f"Resize mode {self._str(attrs.get('mode'), 'nearest')!r} runs on the host")
        ctm = self._str(attrs.get("coordinate_transformation_mode"), "half_pixel")
        nm = self._str(attrs.get("nearest_mode"), "round_prefer_floor")
        ok = (ctm == "asymmetric" and nm in ("floor", "round_prefer_floor")) or (
            ctm in ("half_pixel", "pytorch_half_pixel") and nm in ("round_prefer_floor", "round_prefer_ceil"))
        if not ok or attrs.get("antialias", 0) or attrs.get("axes") is not None:
            raise err(f"Resize nearest with {ctm}/{nm} is not a pixel repeat")
        if self.opset < 11:
            sc = self.need_const(ins[1], "scales", err)
        else:
            sc = self.const(ins[2]) if len(ins) > 2 and ins[2] else None
            if sc is None or np.asarray(sc).size == 0:
                sizes = self.need_const(ins[3], "sizes", err) if len(ins) > 3 and ins[3] else None
                if sizes is None or not all(isinstance(d, int) for d in x.shape[2:]):
                    raise err("Resize without constant scales or sizes")
                sz = [int(v) for v in np.asarray(sizes).reshape(-1)]
                same_nc = len(sz) == 4 and sz[1] == x.shape[1] and (
                    not isinstance(x.shape[0], int) or sz[0] == x.shape[0])
                if not same_nc:
                    raise err(f"Resize sizes {sz} change N or C")
                if sz[2] % x.shape[2] or sz[3] % x.shape[3]:
                    raise err(f"Resize sizes {sz} are not integer multiples of {list(x.shape[2:])}")
                sc = [1, 1, sz[2] // x.shape[2], sz[3] // x.shape[3]]
        self.emit(onode, name, "upsample", ins[:1], {"scales": self._int_scales(x, sc, err)}, outs[0])

    def op_Upsample(self, name, onode, ins, outs, attrs, err):
        x = self.g.types[self.name(ins[0])]
        if self._str(attrs.get("mode"), "nearest") != "nearest" or x.rank != 4:
            raise err("only nearest Upsample of NCHW maps to upsample")
        sc = attrs["scales"] if "scales" in attrs else self.need_const(ins[1], "scales", err)
        self.emit(onode, name, "upsample", ins[:1], {"scales": self._int_scales(x, sc, err)}, outs[0])

    def op_Pad(self, name, onode, ins, outs, attrs, err):
        """Constant zero padding of H and W: a layout op (the int8 zero is the real 0)."""
        x = self.g.types[self.name(ins[0])]
        if self._str(attrs.get("mode"), "constant") != "constant" or x.rank != 4:
            raise err("only constant Pad of NCHW maps to pad")
        if self.opset < 11:
            pads, value = list(attrs.get("pads", [])), float(attrs.get("value", 0.0))
        else:
            pads = [int(v) for v in self.need_const(ins[1], "pads", err).reshape(-1)]
            value = float(np.asarray(self.const(ins[2])).reshape(-1)[0]) if len(ins) > 2 and ins[2] else 0.0
            if len(ins) > 3 and ins[3]:
                raise err("Pad with axes")
        if value != 0.0 or len(pads) != 8 or any(pads[k] for k in (0, 1, 4, 5)) or min(pads) < 0:
            raise err(f"Pad {pads} value {value}: only non-negative zero padding of H and W maps to pad")
        self.emit(onode, name, "pad", ins[:1], {"pads": (pads[2], pads[3], pads[6], pads[7])}, outs[0])

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
        shape = self.sym.get(self.name(ins[1]))
        if shape is not None:       # a shape value with symbolic dims: 0 / -1 entries
            self._reshape_to(onode, name, ins[0], list(shape), outs[0], err)
            return
        shape = self.need_const(ins[1], "shape", err)
        if attrs.get("allowzero", 0) and 0 in shape:
            raise err("allowzero=1 with a 0 in the target shape")
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
        if not -x.rank <= axis < x.rank:
            e = err(f"axis {axis} is out of range for its rank-{x.rank} input (ONNX takes "
                    f"[{-x.rank}, {x.rank - 1}])")
            e.infeasible = True     # an invalid model (onnxruntime refuses it too)
            raise e
        if axis < 0:
            axis += x.rank
        if self.opset < 13 and axis != x.rank - 1:
            raise err(f"opset {self.opset} Softmax flattens from axis {axis}; only the last axis is supported")
        self.emit(onode, name, "softmax", ins[:1], {"axis": axis}, outs[0])

    def op_Identity(self, name, onode, ins, outs, attrs, err):
        self.alias[outs[0]] = self.name(ins[0])

    def _qparams(self, ins, err):
        """``(scale, zero_point)`` of a Q/DQ node; one-element tensors (what onnxruntime's
        quantizer writes for per-tensor parameters) are scalars."""
        s = self.need_const(ins[1], "scale", err).astype(np.float64)
        zp = self.const(ins[2]) if len(ins) > 2 and ins[2] else np.zeros((), np.uint8)
        if zp is None:
            raise err("zero point must be a constant")
        if not (np.all(s > 0) and np.all(np.isfinite(s))):
            raise err("scale must be positive and finite")
        if s.size == 1:
            s = s.reshape(())
        if zp.size == 1:
            zp = zp.reshape(())
        if s.ndim > 1 or zp.ndim > 1:
            raise err("scale / zero point must be scalars or 1-D (per axis)")
        return s, zp

    def op_QuantizeLinear(self, name, onode, ins, outs, attrs, err):
        s, zp = self._qparams(ins, err)
        if zp.dtype not in (np.int8, np.uint8):
            raise err(f"zero point dtype {zp.dtype} is not supported (int8/uint8 only)")
        if s.ndim == 1 and self.const(ins[0]) is None:
            raise err("per-axis activation quantization")
        self.qlinear[outs[0]] = (self.name(ins[0]), s, zp, int(attrs.get("axis", 1)))
        self.qnodes[outs[0]] = onode

    def op_DequantizeLinear(self, name, onode, ins, outs, attrs, err):
        s, zp = self._qparams(ins, err)
        src = self.name(ins[0])
        axis = int(attrs.get("axis", 1))
        if src in self.qlinear:
            x, qs, qzp, qaxis = self.qlinear[src]
            if not (np.array_equal(qs, s) and np.array_equal(qzp, zp)):
                self._materialize_q(src)
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


def import_onnx(src, *, name: str | None = None, input_shapes: dict | None = None) -> Graph:
    """Import an ONNX model into a validated float :class:`~.ir.Graph`.

    Args:
        src: path (``str``/``Path``), serialized bytes, or an ``onnx.ModelProto``.
        name: graph name (default: the ONNX graph name).
        input_shapes: ``{input name: shape}`` fixing symbolic non-batch dims (e.g. a
            detector's ``[N,3,?,?]`` from the calibration images); dim 0 stays symbolic,
            entries ``None`` stay symbolic.
    Returns:
        A ``kind == "float"`` graph; symbolic input dims (``dim_param``) are kept
        as strings; constant sub-expressions are not yet folded (see
        :mod:`.passes`).
    Raises:
        CompileError: malformed model, unsupported operator or attribute, or
            inconsistent shapes (message ``node 'NAME' (OpType): reason``).
        OSError: the file cannot be read.
    """
    g = _Importer(_load(src), name, input_shapes).run()
    used = {i for n in g.nodes for i in n.inputs}
    for c in [c for c in g.constants if c not in used]:
        del g.constants[c], g.types[c]
    return validate(g)
