"""Micro-op kernels of the program builder: :class:`KernelRecorder` records a loop nest of
micro-ops (GEMM or ALU) once per kernel key into a :class:`UopKernel`; the builder places
kernels in the UOP scratchpad per launch (see :mod:`.builder`).  :class:`BuilderError`
is the builder's one-line argument error (a ``ProgramError`` and a ``ValueError``)."""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from typing import Any, Iterator

import numpy as np

from ..hw.config import MemType, VTAConfig
from ..hw.isa import LIMITS, Module, encode_uops, isa_layout
from .device import ProgramError

__all__ = ["GEMM", "ALU", "BuilderError", "UopKernel", "KernelRecorder"]


#: Kernel modes.
GEMM = "gemm"


ALU = "alu"


_MAX_ITER = LIMITS.max("iter")


class BuilderError(ProgramError, ValueError):
    """A builder call with invalid arguments; the message names the argument and range."""


def _module(m: Module | int) -> Module:
    try:
        return Module(int(m))
    except ValueError:
        raise BuilderError(f"module {m!r} is unknown; allowed: Module.LOAD (1), "
                           f"Module.COMPUTE (2), Module.STORE (3)") from None


def _check_int(name: str, v: Any, lo: int, hi: int) -> int:
    if isinstance(v, (bool, np.bool_)) or not isinstance(v, (int, np.integer)):
        raise BuilderError(f"{name} = {v!r} must be an integer in {lo}..{hi}")
    v = int(v)
    if not lo <= v <= hi:
        raise BuilderError(f"{name} = {v} is out of range; allowed: {lo}..{hi}")
    return v


@dataclass(frozen=True, eq=False)
class UopKernel:
    """A recorded micro-op kernel (immutable).

    Attributes:
        key: the full cache key ``(user_key, mode, reset, alu_opcode, use_imm, imm)``.
        mode: ``"gemm"`` or ``"alu"``.
        reset: the instruction's reset flag (destination entries set to zero).
        alu_opcode, use_imm, imm: ALU fields (0 for GEMM).
        loops: up to two ``(extent, dst_factor, src_factor, wgt_factor)``, outer first.
        dst, src, wgt: ``int64`` micro-op index arrays (acc; inp for GEMM or acc for ALU;
            wgt), length = number of micro-ops.
        words: the encoded micro-ops, ``uint32``.
        chunks: ``bytes`` of the encoded micro-ops per scratchpad-sized chunk (one chunk
            unless the kernel is longer than the UOP scratchpad).
        depthwise: a depthwise GEMM (docs/isa.md "Depthwise GEMM"): each micro-op reads
            ``DEPTHWISE_TAPS`` INP entries from ``src``.
    """

    key: tuple
    mode: str
    reset: bool
    alu_opcode: int
    use_imm: bool
    imm: int
    loops: tuple[tuple[int, int, int, int], ...]
    dst: np.ndarray
    src: np.ndarray
    wgt: np.ndarray
    words: np.ndarray
    chunks: tuple[bytes, ...]
    depthwise: bool = False

    @property
    def n_uops(self) -> int:
        return int(self.words.size)

    @property
    def iterations(self) -> int:
        """Loop-nest trip count (product of extents; 1 without loops)."""
        n = 1
        for ext, *_ in self.loops:
            n *= ext
        return n

    def same_code(self, other: "UopKernel") -> bool:
        return (self.loops == other.loops and self.words.size == other.words.size
                and bool(np.array_equal(self.words, other.words)))


class KernelRecorder:
    """What a kernel's ``record_fn(k)`` receives: records the loop nest and micro-ops.

    The ISA runs every micro-op of a kernel inside the whole loop nest, so a kernel is:
    zero, one or two nested loops (outer first), and micro-ops only in the innermost
    body.  ``dst`` indexes the accumulator; ``src`` the input buffer (GEMM) or the
    accumulator (ALU); ``wgt`` the weight buffer (GEMM only; ignored by ALU).  Indices and
    factors are scratchpad elements.

    Example::

        def rec(k):
            with k.loop(4, dst_factor=1, src_factor=0, wgt_factor=1):   # outer
                with k.loop(2, 4, 1, 0):                                 # inner
                    k.uops(dst=np.arange(8), src=np.zeros(8, int), wgt=np.arange(8))
    """

    def __init__(self, cfg: VTAConfig, mode: str):
        self._cfg = cfg
        self._mode = mode
        self._loops: list[tuple[int, int, int, int]] = []
        self._depth = 0          # currently open loops
        self._closed = False     # a loop has been closed: nothing else may be added
        self._parts: list[tuple[np.ndarray, np.ndarray, np.ndarray]] = []
        self._n = 0

    # -- loops
    def loop_begin(self, extent: int, dst_factor: int, src_factor: int,
                   wgt_factor: int = 0) -> None:
        """Open a loop of ``extent`` iterations adding the factors to the indices per
        iteration.  At most two levels; all loops must be opened before any micro-op.  A
        one-iteration loop never applies its factors, so they are recorded as 0 (any
        non-negative value is accepted, even one wider than its instruction field)."""
        lay = isa_layout(self._cfg)
        if self._n or self._closed:
            raise BuilderError("loop_begin after micro-ops or after a closed loop: a kernel "
                               "is at most two nested loops with micro-ops only in the "
                               "innermost body")
        if len(self._loops) >= 2:
            raise BuilderError("a kernel has at most 2 nested loops (the ISA's iter_out and "
                               "iter_in)")
        extent = _check_int("loop extent", extent, 1, _MAX_ITER)
        if extent == 1:
            for name, v in (("dst_factor", dst_factor), ("src_factor", src_factor),
                            ("wgt_factor", wgt_factor)):
                _check_int(name, v, 0, 1 << 62)
            dst_factor = src_factor = wgt_factor = 0
        src_w = lay.field(self._mode, "src_factor_out").width
        dst_factor = _check_int("dst_factor", dst_factor, 0,
                                (1 << lay.field(self._mode, "dst_factor_out").width) - 1)
        src_factor = _check_int("src_factor", src_factor, 0, (1 << src_w) - 1)
        if self._mode == GEMM:
            wgt_factor = _check_int("wgt_factor", wgt_factor, 0,
                                    (1 << lay.field(GEMM, "wgt_factor_out").width) - 1)
        else:
            wgt_factor = 0
        self._loops.append((extent, dst_factor, src_factor, wgt_factor))
        self._depth += 1

    def loop_end(self) -> None:
        """Close the innermost open loop."""
        if self._depth == 0:
            raise BuilderError("loop_end without an open loop")
        self._depth -= 1
        self._closed = True

    @contextlib.contextmanager
    def loop(self, extent: int, dst_factor: int, src_factor: int,
             wgt_factor: int = 0) -> Iterator["KernelRecorder"]:
        """Context-manager form of :meth:`loop_begin` / :meth:`loop_end`."""
        self.loop_begin(extent, dst_factor, src_factor, wgt_factor)
        yield self
        self.loop_end()

    # -- micro-ops
    def uop(self, dst: int, src: int, wgt: int = 0) -> None:
        """Record one micro-op."""
        self.uops(np.array([dst]), np.array([src]), np.array([wgt]))

    def uops(self, dst, src, wgt=None) -> None:
        """Record many micro-ops at once from equal-length integer arrays (``wgt`` defaults
        to zeros).  This is the cheap path for large kernels."""
        if self._closed or self._depth != len(self._loops):
            raise BuilderError("micro-ops must be recorded in the innermost loop body (a "
                               "kernel is at most two nested loops around its micro-ops)")
        d = np.asarray(dst, dtype=np.int64).reshape(-1)
        s = np.asarray(src, dtype=np.int64).reshape(-1)
        w = np.zeros_like(d) if wgt is None else np.asarray(wgt, dtype=np.int64).reshape(-1)
        if not (d.size == s.size == w.size):
            raise BuilderError(f"micro-op arrays differ in length: dst {d.size}, src {s.size}, "
                               f"wgt {w.size}")
        if self._mode == ALU:
            w = np.zeros_like(d)
        self._parts.append((d, s, w))
        self._n += d.size

    # -- result
    def _finish(self, key: tuple, reset: bool, alu_opcode: int, use_imm: bool,
                imm: int, depthwise: bool = False) -> UopKernel:
        cfg = self._cfg
        if self._depth:
            raise BuilderError(f"kernel {key[0]!r}: {self._depth} loop(s) left open")
        if self._n == 0:
            raise BuilderError(f"kernel {key[0]!r} has no micro-ops")
        d = np.concatenate([p[0] for p in self._parts])
        s = np.concatenate([p[1] for p in self._parts])
        w = np.concatenate([p[2] for p in self._parts])
        # Static bounds of every computed index (clear error before any run).
        src_mem = MemType.INP if self._mode == GEMM else MemType.ACC
        for name, arr, pos, mem in (("dst", d, 1, MemType.ACC), ("src", s, 2, src_mem),
                                    ("wgt", w, 3, MemType.WGT)):
            if self._mode == ALU and name == "wgt":
                continue
            if arr.min() < 0:
                raise BuilderError(f"kernel {key[0]!r}: micro-op {name} index "
                                   f"{int(arr.min())} is negative")
            top = int(arr.max()) + sum((lp[0] - 1) * lp[pos] for lp in self._loops)
            if depthwise and name == "src":     # the last tap's entry
                top += cfg.DEPTHWISE_TAPS - 1
            if top >= cfg.depth(mem):
                raise BuilderError(
                    f"kernel {key[0]!r}: {name} index reaches {top} (micro-op max "
                    f"{int(arr.max())} plus loop offsets) but the {mem.name} scratchpad has "
                    f"{cfg.depth(mem)} entries")
        words = encode_uops(cfg, d, s, w)
        depth = cfg.UOP_DEPTH
        iters = 1
        for ext, *_ in self._loops:
            iters *= ext
        if words.size > depth and self._mode == ALU and iters > 1:
            raise BuilderError(
                f"kernel {key[0]!r}: {words.size} micro-ops do not fit the {depth}-entry UOP "
                f"scratchpad, and an ALU kernel with a {iters}-iteration loop nest cannot be "
                f"split exactly; split it into smaller kernels")
        chunks = tuple(words[i:i + depth].tobytes() for i in range(0, words.size, depth))
        return UopKernel(key=key, mode=self._mode, reset=bool(reset), alu_opcode=alu_opcode,
                         use_imm=bool(use_imm), imm=imm, loops=tuple(self._loops),
                         dst=d, src=s, wgt=w, words=words, chunks=chunks,
                         depthwise=bool(depthwise))
