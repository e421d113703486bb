"""vtaforge.compiler: ONNX models to VTA programs.

Front half (this package's public API so far):

* :func:`import_onnx` (:mod:`.onnx_frontend`): ONNX -> float :class:`Graph`.
* :func:`optimize` / :func:`run_passes` (:mod:`.passes`): constant folding,
  BatchNorm folding, conv+bias+relu/clip fusion.
* :func:`quantize` (:mod:`.quantize`): float graph + calibration data ->
  quantized int8 graph with power-of-two scales (format: :mod:`.ir`).
* :func:`run_quantized` (:mod:`.reference`): the independent integer oracle;
  :func:`run_float`: the float executor.
* :func:`partition` (:mod:`.partition`): VTA / CPU placement and regions.
* :mod:`.zoo`: ResNet-18, MobileNet-v1 and the upstream conv workloads.
* :class:`CompileError` (:mod:`.errors`).

:func:`compile_front` chains import, optimize, quantize and partition.
"""

from __future__ import annotations

from .errors import CompileError
from .ir import Graph, Node, TensorType, dump, infer_types, validate
from .onnx_frontend import import_onnx
from .partition import Partition, Placement, Region, capability_table, partition
from .passes import optimize, run_passes
from .quantize import Agreement, QuantConfig, QuantReport, compare, quantize
from .reference import run_float, run_quantized

__all__ = [
    "CompileError", "Graph", "Node", "TensorType", "dump", "infer_types", "validate",
    "import_onnx", "optimize", "run_passes", "quantize", "QuantConfig", "QuantReport", "compare",
    "Agreement", "run_float", "run_quantized", "partition", "Partition", "Placement", "Region",
    "capability_table", "compile_front",
]


def compile_front(model, calib_data, config=None, quant_config: QuantConfig | None = None
                  ) -> tuple[Graph, Partition]:
    """Import ``model`` (path, bytes or ModelProto), optimize, quantize and partition it.

    Args:
        model: the ONNX model.
        calib_data: calibration inputs (``ndarray`` or ``{input: ndarray}``).
        config: VTAConfig, preset name or config path (default ``pynq``).
        quant_config: :class:`QuantConfig` (default: max calibration).
    Returns:
        ``(quantized graph, partition)``.
    Raises:
        CompileError: see each stage.
    """
    q = quantize(import_onnx(model), calib_data, quant_config or QuantConfig())
    return q, partition(q, config)
