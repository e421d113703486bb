"""Compiler errors.

:class:`CompileError` is the one exception the compiler raises for bad or
unsupported input (malformed ONNX, unsupported operator, a shape that does not
check out, an invalid graph between passes). It subclasses :class:`ValueError`;
the ``vtaforge`` CLI prints it as a single ``error: ...`` line (exit status 2).

Messages about a node have the form ``node 'NAME' (OpType): reason`` so the
user sees at once which node, which operator, and why.
"""

from __future__ import annotations

__all__ = ["CompileError", "node_error"]


class CompileError(ValueError):
    """Bad or unsupported model / graph. ``str(e)`` is one line.

    Attributes:
        node: name of the offending node, or ``None``.
        op_type: its operator type (ONNX op type or IR op name), or ``None``.
        reason: the reason alone, without the node prefix.
    """

    def __init__(self, message: str, *, node: str | None = None, op_type: str | None = None,
                 reason: str | None = None) -> None:
        super().__init__(" ".join(str(message).split("\n")))
        self.node = node
        self.op_type = op_type
        self.reason = reason if reason is not None else message


def node_error(node: str, op_type: str, reason: str) -> CompileError:
    """Build ``CompileError("node 'NODE' (OP_TYPE): REASON")``."""
    return CompileError(f"node '{node}' ({op_type}): {reason}", node=node, op_type=op_type,
                        reason=reason)
