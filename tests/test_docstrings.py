"""Public API named in review has docstrings (units, shapes, errors)."""

from __future__ import annotations

import inspect

import pytest

from vtaforge.compiler import passes
from vtaforge.dse import evaluate, performance, resources, result, search, workloads
from vtaforge.runtime import artifact, bundle, device


def _members():
    out = [artifact.TraceBuilder.load_2d, artifact.TraceBuilder.store_2d,
           device.Allocator.alloc, device.Allocator.free,
           search.ResultCache.get, search.ResultCache.put, bundle.load_result]
    out += [getattr(artifact.SlotLayout, n) for n in
            ("cb", "hw", "nbytes", "to_json", "from_json")]
    out += [getattr(passes, n) for n in
            ("FoldConstants", "FoldBatchNorm", "FoldAffineIntoConv", "FuseActivation",
             "DeadCode")]
    for mod in (evaluate, workloads, resources, performance, result):
        for name, obj in vars(mod).items():
            if name.startswith("_") or getattr(obj, "__module__", None) != mod.__name__:
                continue
            out.append(obj)
            if inspect.isclass(obj):
                out += [m for n, m in vars(obj).items()
                        if not n.startswith("_") and (callable(m) or isinstance(
                            m, (property, staticmethod, classmethod)))]
    return out


@pytest.mark.parametrize("obj", _members(), ids=lambda o: getattr(
    getattr(o, "fget", o), "__qualname__", repr(o)))
def test_has_docstring(obj):
    f = obj.fget if isinstance(obj, property) else getattr(obj, "__func__", obj)
    assert (inspect.getdoc(f) or "").strip(), f"{f!r} has no docstring"


def test_load_result_documents_raises():
    assert "Raises:" in bundle.load_result.__doc__ and "BundleError" in bundle.load_result.__doc__
