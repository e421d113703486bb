"""ONNX node attributes as JSON-able Python, the form the host-CPU kernels of the runtime take.

:func:`attrs_to_json` turns a ``NodeProto``'s attributes into plain ints, floats, strings, lists
and ``{"tensor": ...}`` dicts, so that a node kept for the host CPU can be stored in a compiled
artifact and run by :func:`vtaforge.runtime.float_ops.run_numpy` on a board where only numpy is
installed.  :func:`vtaforge.runtime.float_common.tensor_attr` is its inverse for TENSOR
attributes.
"""

from __future__ import annotations

import onnx
from onnx import numpy_helper

from ..runtime.float_common import NUMPY_DTYPES

__all__ = ["attrs_to_json"]

_A = onnx.AttributeProto


def _tensor_json(t: onnx.TensorProto) -> dict:
    try:
        arr = numpy_helper.to_array(t)
    except Exception as e:  # noqa: BLE001  (onnx raises several types for exotic tensors)
        return {"unsupported": f"TENSOR({onnx.TensorProto.DataType.Name(t.data_type)}: {e})"}
    if arr.dtype not in NUMPY_DTYPES:
        return {"unsupported": f"TENSOR({onnx.TensorProto.DataType.Name(t.data_type)})"}
    return {"tensor": {"dtype": arr.dtype.name, "shape": [int(d) for d in arr.shape],
                       "data": arr.reshape(-1).tolist()}}


def attrs_to_json(node: onnx.NodeProto) -> dict:
    """Attributes of an ONNX node as JSON-able Python.

    Args:
        node: any ONNX node.
    Returns:
        ``{name: value}`` with ``INT`` -> int, ``FLOAT`` -> float, ``STRING`` -> str (utf-8),
        ``INTS``/``FLOATS``/``STRINGS`` -> lists, ``TENSOR`` ->
        ``{"tensor": {"dtype": numpy dtype name, "shape": [...], "data": flat list}}`` (a tensor
        numpy cannot hold, e.g. bfloat16 or strings, -> ``{"unsupported": "TENSOR(<type>)"}``), and
        ``GRAPH``/``GRAPHS``/``SPARSE_TENSOR``/``TYPE_PROTO`` (and their lists) ->
        ``{"unsupported": "<attribute type name>"}``; such nodes only run on onnxruntime
        (:func:`~vtaforge.runtime.float_ops.numpy_supports` says so).

        One normalisation: a default-domain ``Split`` given neither a ``split`` attribute, a
        ``split`` input nor ``num_outputs`` (equal split into as many parts as the node has
        outputs) gets ``"num_outputs": len(node.output)``, the opset-18 attribute with that
        meaning, because the numpy kernel sees attributes and inputs but not the output count.
        Strip it if you rebuild an opset < 18 node from these attributes.
    Raises:
        UnicodeDecodeError: a STRING attribute is not utf-8.
    """
    out: dict = {}
    for at in node.attribute:
        t = at.type
        if t == _A.INT:
            v = int(at.i)
        elif t == _A.FLOAT:
            v = float(at.f)
        elif t == _A.STRING:
            v = at.s.decode("utf-8")
        elif t == _A.INTS:
            v = [int(i) for i in at.ints]
        elif t == _A.FLOATS:
            v = [float(f) for f in at.floats]
        elif t == _A.STRINGS:
            v = [s.decode("utf-8") for s in at.strings]
        elif t == _A.TENSOR:
            v = _tensor_json(at.t)
        else:
            v = {"unsupported": _A.AttributeType.Name(t)}
        out[at.name] = v
    if (node.op_type == "Split" and node.domain in ("", "ai.onnx") and "split" not in out
            and "num_outputs" not in out and (len(node.input) < 2 or not node.input[1])):
        out["num_outputs"] = len(node.output)
    return out
