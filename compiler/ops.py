"""The op registry: one entry per IR op, every facet of the op in one place.

FINN keeps an op's shape inference, execution and estimates in one class; tinygrad keeps
rewrites in pattern tables.  Here each IR op has one :class:`OpDef` in :data:`REGISTRY`
naming its

* **spec** -- arity, required attributes, type/shape inference, graph kinds
  (``compiler/ir.py``'s :data:`~.ir.OPS`, which the validator runs between passes);
* **quantize** -- the quantizer rule that turns the float op into int8 ops
  (a :class:`~.quantize._Quantizer` method) and the ops it ``produces``; a float op the
  rule refuses stays real-valued on the CPU (``q_real``, the BYOC fallback);
* **vta** -- the VTA predicate ``(node, graph, config, producers) -> (ok, reason)``
  (``compiler/partition.py``), run after the checks every VTA op shares; ``None``: the op
  always runs on the CPU, for ``cpu_reason``;
* **lower** -- the VTA lowering ``(config, graph, node, uid) -> (LoweredOp, slots)``
  (``compiler/compile.py``);
* **reference** -- the integer oracle ``(node, inputs, graph) -> array``
  (``compiler/reference.py``; real-valued ops run the runtime's float kernels instead);
* **cpu** -- the runtime kernel that runs the op on the host: ``"int"``
  (``runtime/cpu_ops.CPU_KERNELS``), ``"real"`` (``runtime/cpu_float.run_float_op``) or
  ``"onnx"`` (``runtime/cpu_float.run_onnx_node``: numpy kernel or onnxruntime).

The dispatchers (:func:`~.partition.vta_support`, :func:`~.compile.lower_node`,
``reference._q_node``, the quantizer's main loop) look ops up here; ``tests/compiler/
test_ops_registry.py`` checks that no op can be placed on VTA without a lowering, that
every quantized op has an integer reference and a runtime CPU kernel, and that every op a
quantizer rule produces is registered with both.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from . import reference as _r
from .compile import lower_qadd, lower_qconv2d, lower_qdense, lower_qmul, lower_qpool, lower_qrequant
from .ir import OPS, OpSpec
from .partition import vta_avg_pool, vta_eltwise, vta_linear, vta_max_pool, vta_mul

__all__ = ["OpDef", "REGISTRY"]

_LAYOUT = "layout op: the host rearranges the data between device calls (no arithmetic)"
_FLOAT = "float arithmetic runs on the CPU"


@dataclass(frozen=True)
class OpDef:
    """One IR op's facets (see the module docstring)."""

    name: str
    quantize: str | None = None
    produces: tuple[str, ...] = ()
    vta: Callable | None = None
    lower: Callable | None = None
    reference: Callable | None = None
    cpu: str = ""
    cpu_reason: str = ""

    @property
    def spec(self) -> OpSpec:
        """The op's :class:`~.ir.OpSpec` (arity, attributes, inference, graph kinds)."""
        return OPS[self.name]


def _defs() -> dict[str, OpDef]:
    d = [
        # float ops: a quantizer rule each; kept real-valued (CPU) when the rule refuses
        OpDef("conv2d", "q_conv2d", ("qconv2d",), cpu="real"),
        OpDef("dense", "q_dense", ("qdense",), cpu="real"),
        OpDef("relu", "q_relu", ("qrequant",), cpu="real"),
        OpDef("clip", "q_clip", ("qrequant",), cpu="real"),
        OpDef("add", "q_add", ("qadd", "qrequant"), cpu="real"),
        OpDef("mul", "q_mul", ("qmul", "qrequant"), cpu="real"),
        OpDef("batch_norm", "q_batch_norm", (), cpu="real"),   # folded by the passes first
        OpDef("max_pool", "q_max_pool", ("qmax_pool",), cpu="real"),
        OpDef("avg_pool", "q_avg_pool", ("qavg_pool",), cpu="real"),
        OpDef("global_avg_pool", "q_global_avg_pool", ("qavg_pool",), cpu="real"),
        OpDef("fake_quant", "q_fake_quant", ("qrequant",), cpu="real"),
        # layout ops (float and quantized graphs): data movement on the host
        OpDef("flatten", "q_flatten", ("flatten",), reference=_r.ref_layout, cpu="int", cpu_reason=_LAYOUT),
        OpDef("reshape", "q_reshape", ("reshape",), reference=_r.ref_layout, cpu="int", cpu_reason=_LAYOUT),
        OpDef("transpose", "q_transpose", ("transpose",), reference=_r.ref_layout, cpu="int",
              cpu_reason=_LAYOUT),
        OpDef("concat", "q_concat", ("concat", "qrequant"), reference=_r.ref_layout, cpu="int",
              cpu_reason=_LAYOUT),
        OpDef("upsample", "q_upsample", ("upsample",), reference=_r.ref_layout, cpu="int", cpu_reason=_LAYOUT),
        OpDef("pad", "q_pad", ("pad",), reference=_r.ref_layout, cpu="int", cpu_reason=_LAYOUT),
        OpDef("softmax", "q_softmax", ("softmax", "dequantize"), cpu="int", cpu_reason=_FLOAT),
        # an ONNX node kept as is: always real-valued, on the CPU
        OpDef("onnx", "q_real", (), cpu="onnx"),
        # quantized ops
        OpDef("quantize", reference=_r.ref_quantize, cpu="int", cpu_reason=_FLOAT),
        OpDef("dequantize", reference=_r.ref_dequantize, cpu="int", cpu_reason=_FLOAT),
        OpDef("qconv2d", vta=vta_linear, lower=lower_qconv2d, reference=_r.ref_qconv2d, cpu="int"),
        OpDef("qdense", vta=vta_linear, lower=lower_qdense, reference=_r.ref_qdense, cpu="int"),
        OpDef("qadd", vta=vta_eltwise, lower=lower_qadd, reference=_r.ref_qadd, cpu="int"),
        OpDef("qrequant", vta=vta_eltwise, lower=lower_qrequant, reference=_r.ref_qrequant, cpu="int"),
        OpDef("qmax_pool", vta=vta_max_pool, lower=lower_qpool, reference=_r.ref_qmax_pool, cpu="int"),
        OpDef("qavg_pool", vta=vta_avg_pool, lower=lower_qpool, reference=_r.ref_qavg_pool, cpu="int"),
        OpDef("qmul", vta=vta_mul, lower=lower_qmul, reference=_r.ref_qmul, cpu="int"),
    ]
    return {o.name: o for o in d}


#: ``IR op -> OpDef``: the single table every stage dispatches through.
REGISTRY: dict[str, OpDef] = _defs()
