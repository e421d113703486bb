"""Reference executors: the independent integer oracle and a float executor.

:func:`run_quantized` executes a quantized graph (see :mod:`.ir`) with plain
numpy integer arithmetic, NCHW, following the integer rules of the
:mod:`.ir` docstring literally. It shares no code with the lowering / packing
/ VTA path of the back half: it is the oracle the VTA results are compared
against bit for bit.  Real-valued nodes the BYOC fallback keeps on the CPU (float IR ops,
``onnx`` nodes) run with the runtime's float kernels (``runtime/cpu_float.py``,
``runtime/float_ops.py``), which are tested against onnxruntime on their own.

Exactness note: the convolution / dense sums are formed with a float64 BLAS
matrix product of int8 (or int16) values and then converted to int64. This is exact:
each product is at most 128*128 = 2**14 (int16: 2**30) in magnitude, and every partial
sum of K products is an integer of magnitude <= K * 2**14 < 2**53 for any
K < 2**39 (int16: K < 2**23), so float64 represents every intermediate exactly (checked
at run time).  Every quantized tensor keeps its dtype (int8, or int16 in a graph quantized
with ``act_bits`` / ``wgt_bits`` 16; the logical int4 of ``act_bits`` 4 is held in int8
arrays, :func:`~.ir.storage_dtype`); clips and the max-pool padding use that dtype's
range (int4: ``[-8, 7]``). Everything after the sum (bias, multiplier, rounding, shifts, clips,
pooling, adds) is int64; the quantizer proves every product ``acc * mult``
fits int32, so int64 and VTA's wrapping 32-bit ALU agree.

Non-power-of-two scales (``TensorType.scale``, QDQ models with
``exact_multiply``): ``quantize`` computes ``floor(x * 2.0**-e + 0.5)`` and
``dequantize`` ``q * 2.0**e`` with ``e = TensorType.scale_exp`` (float
``log2(scale)``), the same float64 expression the runtime's CPU kernels
evaluate, so both agree bit for bit.

:func:`run_float` executes a float graph (the frontend's IR, before or after
the float passes) in float32/float64 numpy; it is used to check the frontend
against onnxruntime and to calibrate the quantizer.
"""

from __future__ import annotations

import numpy as np

from ..runtime.cpu_float import REAL_OPS, run_float_op, run_onnx_node
from .errors import CompileError, node_error
from .ir import Graph, Node
from .ops import REGISTRY
from .ref_kernels import conv2d_nchw, requantize

__all__ = ["run_float", "run_quantized", "run_node", "conv2d_nchw", "requantize"]


# ---------------------------------------------------------------------------
# Float executor
# ---------------------------------------------------------------------------

def _float_node(node: Node, x: list[np.ndarray], graph: Graph) -> list[np.ndarray]:
    """Outputs of one node of a float graph (or a real-valued node of a quantized graph):
    an ``onnx`` node by the runtime's ONNX kernels, a real-valued op by its runtime float
    kernel (``runtime/cpu_float.py``), any other op by its registry entry's ``reference``
    (the layout ops, whose kernels move data of any dtype, and float ops the quantizer
    always rewrites)."""
    d = REGISTRY.get(node.op)
    if d is not None and d.cpu == "onnx":
        return run_onnx_node(node.attrs, x)
    if node.op in REAL_OPS:
        return [run_float_op(node.op, node.attrs, x)]
    if d is not None and d.reference is not None:
        return [d.reference(node, x, graph)]
    raise node_error(node.name, node.op, "the float executor cannot run this op")


def run_float(graph: Graph, feeds: dict[str, np.ndarray], *, keep_all: bool = False
              ) -> dict[str, np.ndarray]:
    """Run a float graph on concrete inputs.

    Args:
        graph: a ``kind == "float"`` graph.
        feeds: ``input name -> float32 array`` (shapes must match the input types,
            symbolic dims take any size).
        keep_all: return every tensor, not only the graph outputs.
    Returns:
        ``name -> float32 array``.
    """
    if graph.kind != "float":
        raise CompileError(f"run_float needs a float graph, got a {graph.kind} graph")
    env = _bind(graph, feeds)
    for node in graph.nodes:
        for o, y in zip(node.outputs, _float_node(node, [env[i] for i in node.inputs], graph)):
            env[o] = np.asarray(y)
    names = env.keys() if keep_all else graph.outputs
    return {k: env[k] for k in names}


def _bind(graph: Graph, feeds) -> dict[str, np.ndarray]:
    env = dict(graph.constants)
    for i in graph.inputs:
        if i not in feeds:
            raise CompileError(f"graph '{graph.name}': missing input {i!r}")
        v = np.asarray(feeds[i])
        t = graph.types[i]
        if v.ndim != t.rank or any(isinstance(d, int) and d != s for d, s in zip(t.shape, v.shape)):
            raise CompileError(f"graph '{graph.name}': input {i!r} has shape {list(v.shape)}, "
                               f"expected {list(t.shape)}")
        env[i] = v.astype(np.float32) if t.dtype == "float32" else v
    return env


# ---------------------------------------------------------------------------
# Integer executor (the oracle)
# ---------------------------------------------------------------------------

def _q_node(node: Node, x: list[np.ndarray], graph: Graph) -> np.ndarray:
    """The output of one integer node of a quantized graph: its registry entry's
    ``reference`` (:mod:`.ref_kernels`)."""
    d = REGISTRY.get(node.op)
    if d is None or d.reference is None:
        raise node_error(node.name, node.op, "the integer reference cannot run this op")
    return d.reference(node, x, graph)


def run_node(node: Node, x: list[np.ndarray], graph: Graph) -> list[np.ndarray]:
    """The outputs of one node of a quantized graph (``x``: its input arrays, in order): a
    real-valued CPU node (an ``onnx`` node, a float op the BYOC fallback kept) by the float
    kernels, any other by its integer reference.  Returns one array per output."""
    if node.op == "onnx" or node.op in REAL_OPS:
        return [np.asarray(y) for y in _float_node(node, x, graph)]
    return [_q_node(node, x, graph)]


def run_quantized(graph: Graph, feeds: dict[str, np.ndarray], *, keep_all: bool = False
                  ) -> dict[str, np.ndarray]:
    """Run a quantized graph with numpy integer arithmetic (the bit-exact oracle).

    Args:
        graph: a ``kind == "quantized"`` graph (:func:`vtaforge.compiler.quantize.quantize`).
        feeds: ``input name -> float32 array`` (the graph's ``quantize`` nodes
            convert them to int8).
        keep_all: also return every intermediate tensor (int8 activations,
            e.g. ``"logits_q"``), for bit-for-bit comparison with VTA.
    Returns:
        ``name -> array`` (int8 for quantized tensors, float32 for dequantized).
    """
    if graph.kind != "quantized":
        raise CompileError(f"run_quantized needs a quantized graph, got a {graph.kind} graph")
    env = _bind(graph, feeds)
    for node in graph.nodes:
        for o, y in zip(node.outputs, run_node(node, [env[i] for i in node.inputs], graph)):
            env[o] = y
    names = env.keys() if keep_all else graph.outputs
    return {k: env[k] for k in names}
