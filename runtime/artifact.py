"""The compiled-model format: relocatable program traces and the ``.vtapkg`` artifact.

Program traces
==============
A :class:`Trace` is a VTA program for **one batch block** (``BATCH`` images) of one
operator, recorded against *slots* (named placeholder buffers) instead of device
buffers.  :class:`TraceBuilder` has the :class:`~.builder.ProgramBuilder` recording API
(``load_2d``, ``store_2d``, ``gemm``, ``alu``, ``dep_push``, ``dep_pop``) with a slot
name where the builder takes a :class:`~.device.Buffer`.  :func:`replay` emits a trace
onto a real ``ProgramBuilder`` once per batch block ``nb``, with every DMA of an
*activation* slot relocated by ``nb × block_bytes / elem_bytes(mem)`` elements
(``block_bytes``: bytes of one batch block of that tensor in its packed layout; 0 for
constant slots such as weights and biases).  A trace is token-balanced (every push has
its pop inside the trace), so repeating it in one program is sound.  Micro-op kernels are
stored as plain arrays (loops, dst/src/wgt indices) and re-recorded into the builder's
kernel cache under the key ``(trace.uid, kernel index)``.

Artifact (``.vtapkg``)
======================
A ``numpy.savez`` zip archive (no pickle):

- ``manifest``: a JSON string: ``format`` (``"vtapkg"``), ``version`` (4,
  :data:`FORMAT_VERSION`; 3 is read too, any other version is refused), ``requires`` (``{"onnxruntime":
  [ONNX op types]}`` when CPU steps need onnxruntime; a runtime without it refuses the
  artifact up front, naming the ops), ``arrays`` (dtype, shape and sha256 of every array:
  a constant edited, truncated or of another dtype is refused before anything runs),
  ``config``
  (the ``VTAConfig.to_dict()``), ``fingerprint`` (``config.fingerprint``), and the
  ``model`` dict of :class:`CompiledModel` (steps, tensor types, slot layouts, traces
  without their arrays);
- one array per constant (``c/<name>``) and per trace kernel
  (``k/<trace uid>/<index>/<dst|src|wgt>``).

:func:`load_artifact` refuses an archive built for another config (different
fingerprint) with a :class:`ArtifactError` naming both fingerprints.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import numpy as np

from ..hw.config import MemType, VTAConfig
from ..hw.isa import AluOp, Module, Queue, token_route
from .device import DeviceError
from .npz import atomic_open, open_npz, read_npz

__all__ = ["Trace", "TraceBuilder", "TraceKernel", "SlotLayout", "CompiledModel", "Step",
           "RowBands", "ArtifactError", "replay", "token_fault", "memory_cycles", "save_artifact", "load_artifact",
           "FORMAT_VERSION"]

FORMAT_VERSION = 4
"""Version history: 1 -- tensor types ``(dtype, shape, exp)`` with a float ``log2(scale)``
in the exponent slot for non-power-of-two scales; 2 -- tensor types ``(dtype, shape, exp,
scale)`` with an explicit float real scale, slot layouts may carry ``im2col``; 3 -- CPU
steps may be real-valued IR ops or ``onnx`` nodes kept as is (several outputs, any dtype),
and the manifest lists the CPU backends the model needs (``requires``); 4 -- a VTA step may
carry row-band variants (``bands``: :class:`RowBands`, for memory budgets below its working
set).  Version 3 is still read (no bands); older versions are refused (recompile the
model)."""

#: versions :func:`load_artifact` reads
READ_VERSIONS = (3, 4)


class ArtifactError(DeviceError):
    """A ``.vtapkg`` that cannot be used (unreadable, malformed, built for another config)."""


@dataclass(frozen=True)
class SlotLayout:
    """Packed DRAM layout of an activation tensor for one VTA operator input/output.

    The logical tensor is int8 ``[N, C, H, W]`` (2-D ``[N, C]`` is ``H = W = 1``).  It is
    stored as ``[ceil(N/batch), ceil(C/cblk), H + pt + pb, W + pl + pr, batch, cblk]``
    int8 (NCHW{batch}n{cblk}c), channels and batch zero-padded, with an optional host-side
    spatial zero padding ``pre_pad = (pt, pb, pl, pr)`` baked in.

    With ``im2col = (kh, kw, sh, sw, pt, pl, pb, pr)`` the packed tensor is instead the
    patch tensor of a convolution's input (:func:`~.cpu_ops.im2col`): ``[N, C*kh*kw, Ho,
    Wo]``, channel ``(c*kh + i)*kw + j`` at ``(oy, ox)`` holding the zero-padded input
    ``x[c, oy*sh + i - pt, ox*sw + j - pl]``; a conv with few input channels then runs as a
    1x1 conv over it (one GEMM block per ``BLOCK_IN`` patch entries instead of one per
    kernel tap).  The host builds it (pure data movement) before the VTA call.

    Attributes:
        shape: logical ``(C, H, W)`` (batch excluded).
        batch: BATCH of the config.
        cblk: channel block (BLOCK_IN for GEMM inputs, BLOCK_OUT for outputs and ACC8).
        pre_pad: host-side spatial padding.
        im2col: ``None`` or the conv window ``(kh, kw, sh, sw, pt, pl, pb, pr)``.
        elem_bytes: bytes per value on the host: 1 (int8, every int8 core; int4) or 2
            (int16 activations of a ``LOG_INP_WIDTH`` 4 core); :attr:`block_bytes` counts
            bytes.
        int4: the values are int4 (a ``LOG_INP_WIDTH`` 2 core; int8 on the host, values in
            ``[-8, 7]``), stored two per byte in DRAM: each element's ``batch*cblk`` lanes
            (``[batch, cblk]``, ``cblk`` innermost) packed from bit 0, lane ``2k`` in the low
            nibble of byte ``k`` (:func:`~.cpu_ops.pack_int4`); :attr:`bits` is 4.
    Raises:
        ArtifactError: a malformed ``im2col`` or ``im2col`` with ``pre_pad``; ``elem_bytes``
            not 1 or 2; ``int4`` with ``elem_bytes`` 2 or an odd ``batch*cblk``.
    """

    shape: tuple[int, int, int]
    batch: int
    cblk: int
    pre_pad: tuple[int, int, int, int] = (0, 0, 0, 0)
    im2col: tuple[int, ...] | None = None
    elem_bytes: int = 1
    int4: bool = False

    @property
    def dtype(self):
        """numpy dtype of the host values: int8 (int8, int4) or int16."""
        return np.int16 if self.elem_bytes == 2 else np.int8

    @property
    def bits(self) -> int:
        """Bits per value in DRAM: 4 (``int4``), 8 or 16."""
        return 4 if self.int4 else 8 * self.elem_bytes

    def __post_init__(self) -> None:
        if self.elem_bytes not in (1, 2):
            raise ArtifactError(f"slot layout: elem_bytes {self.elem_bytes!r} must be 1 (int8) "
                                f"or 2 (int16)")
        if self.int4 not in (False, True):
            raise ArtifactError(f"slot layout: int4 {self.int4!r} must be a bool")
        if self.int4 and (self.elem_bytes != 1 or self.batch * self.cblk % 2):
            raise ArtifactError(f"slot layout: int4 values need elem_bytes 1 and an even "
                                f"batch*cblk (two lanes per byte), got elem_bytes "
                                f"{self.elem_bytes}, batch*cblk {self.batch * self.cblk}")
        if self.im2col is not None:
            if len(self.im2col) != 8 or self.pre_pad != (0, 0, 0, 0):
                raise ArtifactError(f"slot layout: im2col {self.im2col!r} needs 8 values "
                                    f"(kh, kw, sh, sw, pt, pl, pb, pr) and no pre_pad")
            object.__setattr__(self, "im2col", tuple(int(v) for v in self.im2col))

    @property
    def packed_chw(self) -> tuple[int, int, int]:
        """``(C, H, W)`` of the tensor that is packed: the logical shape, or for an im2col
        slot the patch tensor ``(C*kh*kw, Ho, Wo)``."""
        if self.im2col is None:
            return tuple(self.shape)
        c, h, w = self.shape
        kh, kw, sh, sw, pt, pl, pb, pr = self.im2col
        return c * kh * kw, (h + pt + pb - kh) // sh + 1, (w + pl + pr - kw) // sw + 1

    @property
    def cb(self) -> int:
        """Channel blocks: ``ceil(C / cblk)`` of the packed tensor."""
        return -(-self.packed_chw[0] // self.cblk)

    @property
    def hw(self) -> tuple[int, int]:
        """``(height, width)`` in elements of the stored tensor, pre-padding included."""
        pt, pb, pl, pr = self.pre_pad
        _, h, w = self.packed_chw
        return h + pt + pb, w + pl + pr

    @property
    def block_bytes(self) -> int:
        """Bytes of one batch block."""
        h, w = self.hw
        return self.cb * h * w * self.batch * self.cblk * self.bits // 8

    def nbytes(self, n: int) -> int:
        """Bytes of the slot for ``n`` samples: ``ceil(n / batch)`` batch blocks of
        :attr:`block_bytes` each."""
        return -(-n // self.batch) * self.block_bytes

    def pack(self, x: np.ndarray) -> np.ndarray:
        """Logical int8 ``[N, C, H, W]`` (or ``[N, C]``) -> this packed layout (host-side
        data movement only: im2col when set, then :func:`~.cpu_ops.pack_act`)."""
        from .cpu_ops import im2col, pack_act

        if self.im2col is not None:
            kh, kw, sh, sw, pt, pl, pb, pr = self.im2col
            x = im2col(x, (kh, kw), (sh, sw), (pt, pl, pb, pr))
        return pack_act(x, self.batch, self.cblk, self.pre_pad, self.dtype, self.bits)

    def unpack(self, raw: np.ndarray, n: int) -> np.ndarray:
        """Packed bytes of ``n`` samples (no pre-padding, not im2col) -> the logical
        ``[n, C, H, W]`` values (:attr:`dtype`; int4: int8 in ``[-8, 7]``)."""
        from .cpu_ops import unpack_act

        c, h, w = self.shape
        return unpack_act(raw, n, c, h, w, self.batch, self.cblk, self.dtype, self.bits)

    def rows_block_bytes(self, n_rows: int) -> int:
        """Bytes of one batch block of ``n_rows`` rows of the packed tensor (a row band,
        :meth:`pack_rows`): ``cb * n_rows * W * batch * cblk`` values of :attr:`bits`."""
        return self.cb * int(n_rows) * self.hw[1] * self.batch * self.cblk * self.bits // 8

    def pack_rows(self, x: np.ndarray, r0: int, r1: int) -> np.ndarray:
        """Rows ``[r0, r1)`` of the packed tensor alone, packed as a tensor of ``r1 - r0``
        rows (``[ceil(N/batch), cb, r1 - r0, W, batch, cblk]``): of the patch tensor for an
        im2col slot (only those patch rows are built), else of the logical tensor.

        Raises:
            ArtifactError: a pre-padded layout (its rows are not the tensor's), or rows
                not a non-empty range of the packed rows.
        """
        from .cpu_ops import im2col, pack_act

        h = self.packed_chw[1]
        if self.pre_pad != (0, 0, 0, 0) or not 0 <= r0 < r1 <= h:
            raise ArtifactError(f"slot layout {self.to_json()}: rows [{r0}, {r1}) are not a "
                                f"row band of its {h} rows (or it is pre-padded)")
        if x.ndim == 2:
            x = x[:, :, None, None]
        if self.im2col is not None:
            kh, kw, sh, sw, pt, pl, pb, pr = self.im2col
            x = im2col(x, (kh, kw), (sh, sw), (pt, pl, pb, pr), rows=(r0, r1))
        else:
            x = x[:, :, r0:r1]
        return pack_act(x, self.batch, self.cblk, dtype=self.dtype, bits=self.bits)

    def to_json(self) -> list:
        """``[shape, batch, cblk, pre_pad, im2col or None]`` (the artifact manifest form),
        then ``elem_bytes`` when it is not 1 (so int8 manifests are unchanged), and for int4
        values ``elem_bytes`` and the bits ``4``."""
        v = [list(self.shape), self.batch, self.cblk, list(self.pre_pad),
             None if self.im2col is None else list(self.im2col)]
        if self.int4:
            return v + [self.elem_bytes, 4]
        return v if self.elem_bytes == 1 else v + [self.elem_bytes]

    @classmethod
    def from_json(cls, v) -> "SlotLayout":
        """Inverse of :meth:`to_json` (a 4-element list from older writers has no im2col).

        Raises:
            ArtifactError: invalid values (from the constructor's checks; a bits entry
                other than 4).
        """
        ic = v[4] if len(v) > 4 else None
        if len(v) > 6 and v[6] != 4:
            raise ArtifactError(f"slot layout {v!r}: bits {v[6]!r} must be 4 (int4 values) "
                                f"when given")
        return cls(tuple(v[0]), int(v[1]), int(v[2]), tuple(v[3]),
                   None if ic is None else tuple(ic), int(v[5]) if len(v) > 5 else 1,
                   len(v) > 6)


@dataclass
class TraceKernel:
    """A micro-op kernel: ``mode`` (``"gemm"``/``"alu"``), ``reset``, ALU fields, ``loops``
    (up to two ``(extent, dst_factor, src_factor, wgt_factor)``, outer first), int64
    index arrays ``dst``/``src``/``wgt`` (scratchpad elements) and ``depthwise`` (a GEMM
    whose micro-ops are depthwise, docs/isa.md "Depthwise GEMM"; a ``DEPTHWISE_TAPS``
    config only)."""

    mode: str
    reset: bool
    alu_op: int
    use_imm: bool
    imm: int
    loops: list
    dst: np.ndarray
    src: np.ndarray
    wgt: np.ndarray
    depthwise: bool = False

    @property
    def n_uops(self) -> int:
        return int(self.dst.size)

    @property
    def iterations(self) -> int:
        n = 1
        for lp in self.loops:
            n *= lp[0]
        return n


class _Rec:
    """Minimal kernel recorder with the ``KernelRecorder`` API (loop / loop_begin /
    loop_end / uop / uops); the real builder validates when the trace is replayed."""

    def __init__(self) -> None:
        self.loops: list = []
        self.parts: list = []

    def loop_begin(self, extent, dst_factor, src_factor, wgt_factor=0):
        self.loops.append((int(extent), int(dst_factor), int(src_factor), int(wgt_factor)))

    def loop_end(self):
        pass

    def loop(self, extent, dst_factor, src_factor, wgt_factor=0):
        import contextlib

        @contextlib.contextmanager
        def cm():
            self.loop_begin(extent, dst_factor, src_factor, wgt_factor)
            yield self
        return cm()

    def uop(self, dst, src, wgt=0):
        self.uops([dst], [src], [wgt])

    def uops(self, dst, src, wgt=None):
        d = np.asarray(dst, np.int64).reshape(-1)
        s = np.asarray(src, np.int64).reshape(-1)
        w = np.zeros_like(d) if wgt is None else np.asarray(wgt, np.int64).reshape(-1)
        self.parts.append((d, s, w))


@dataclass
class Trace:
    """A relocatable single-batch-block program (see the module docstring).

    Attributes:
        uid: unique name (kernel cache keys).
        ops: list of tuples: ``("L", slot, elem_offset, mem, sram_base, y, x, stride,
            (y0, y1, x0, x1))``, ``("S", sram_base, slot, elem_offset, y, x, stride)``,
            ``("K", kernel index)``, ``("P", from, to)`` push, ``("W", from, to)`` pop.
        kernels: the :class:`TraceKernel` s.
        block_bytes: ``slot -> bytes per batch block`` (0: constant slot, no relocation).
        stats: free-form figures of the lowering (ideal GEMM micro-ops, minimum DRAM
            bytes, tile shape ...).
    """

    uid: str
    ops: list = field(default_factory=list)
    kernels: list = field(default_factory=list)
    block_bytes: dict = field(default_factory=dict)
    stats: dict = field(default_factory=dict)

    def to_json(self) -> dict:
        ks = [{"mode": k.mode, "reset": k.reset, "alu_op": k.alu_op, "use_imm": k.use_imm,
               "imm": k.imm, "loops": [list(lp) for lp in k.loops],
               **({"depthwise": True} if k.depthwise else {})} for k in self.kernels]
        ops = [[o[0], *[list(v) if isinstance(v, tuple) else v for v in o[1:]]]
               for o in self.ops]
        return {"uid": self.uid, "ops": ops, "kernels": ks, "block_bytes": self.block_bytes,
                "stats": self.stats}

    def arrays(self) -> dict[str, np.ndarray]:
        out = {}
        for i, k in enumerate(self.kernels):
            for nm in ("dst", "src", "wgt"):
                out[f"k/{self.uid}/{i}/{nm}"] = getattr(k, nm)
        return out

    @classmethod
    def from_json(cls, d: dict, arrays) -> "Trace":
        uid = d["uid"]
        ks = []
        for i, k in enumerate(d["kernels"]):
            ks.append(TraceKernel(k["mode"], bool(k["reset"]), int(k["alu_op"]),
                                  bool(k["use_imm"]), int(k["imm"]),
                                  [tuple(lp) for lp in k["loops"]],
                                  *(np.asarray(arrays[f"k/{uid}/{i}/{nm}"], np.int64)
                                    for nm in ("dst", "src", "wgt")),
                                  bool(k.get("depthwise", False))))
        ops = []
        for o in d["ops"]:
            if o[0] == "L":
                o = list(o)
                o[8] = tuple(o[8])
            ops.append(tuple(o))
        return cls(uid, ops, ks, dict(d["block_bytes"]), dict(d.get("stats", {})))


class TraceBuilder:
    """Records a :class:`Trace` with the ``ProgramBuilder`` API (slots instead of buffers).

    Args:
        uid: the trace's unique name.
        block_bytes: ``slot -> bytes per batch block`` for activation slots; any other slot
            used is a constant (not relocated).
    """

    def __init__(self, uid: str, block_bytes: dict[str, int] | None = None):
        self.trace = Trace(uid, block_bytes=dict(block_bytes or {}))
        self._kid: dict = {}

    def load_2d(self, slot: str, elem_offset: int, mem, sram_base: int, y_size: int,
                x_size: int, x_stride: int, pad=(0, 0, 0, 0)) -> None:
        """Record a 2-D LOAD of ``y_size`` rows × ``x_size`` elements from ``slot``.

        Args:
            slot: the DRAM slot (activation or constant), relocated at replay.
            elem_offset: first element in the slot, in elements of ``mem`` (from the slot's
                base; for activations, within one batch block).
            mem: the ``MemType`` loaded (element size ``cfg.elem_bytes(mem)`` bytes).
            sram_base: destination scratchpad index (elements).
            y_size, x_size: rows and elements per row; x_stride: DRAM row pitch (elements).
            pad: ``(y_pad_0, y_pad_1, x_pad_0, x_pad_1)`` zero padding in elements (0..15).
        """
        self.trace.ops.append(("L", slot, int(elem_offset), int(mem), int(sram_base),
                               int(y_size), int(x_size), int(x_stride),
                               tuple(int(p) for p in pad)))

    def store_2d(self, sram_base: int, slot: str, elem_offset: int, y_size: int, x_size: int,
                 x_stride: int) -> None:
        """Record a 2-D STORE of ``y_size`` rows × ``x_size`` OUT elements from scratchpad
        index ``sram_base`` to ``slot`` at ``elem_offset`` (elements of OUT,
        ``cfg.elem_bytes(OUT)`` bytes each), DRAM row pitch ``x_stride`` elements."""
        self.trace.ops.append(("S", int(sram_base), slot, int(elem_offset), int(y_size),
                               int(x_size), int(x_stride)))

    def _kernel(self, key, record_fn, mode, reset, alu_op, use_imm, imm, depthwise=False):
        full = (key, mode, bool(reset), int(alu_op), bool(use_imm), int(imm)) + (
            ("depthwise",) if depthwise else ())
        kid = self._kid.get(full)
        if kid is None:
            r = _Rec()
            record_fn(r)
            d = np.concatenate([p[0] for p in r.parts])
            s = np.concatenate([p[1] for p in r.parts])
            w = np.concatenate([p[2] for p in r.parts])
            kid = len(self.trace.kernels)
            self.trace.kernels.append(TraceKernel(mode, bool(reset), int(alu_op),
                                                  bool(use_imm), int(imm), list(r.loops),
                                                  d, s, w, bool(depthwise)))
            self._kid[full] = kid
        self.trace.ops.append(("K", kid))
        return self.trace.kernels[kid]

    def gemm(self, key, record_fn=None, reset: bool = False,
             depthwise: bool = False) -> TraceKernel:
        """Record a GEMM kernel (``depthwise``: its micro-ops are depthwise GEMMs)."""
        return self._kernel(key, record_fn, "gemm", reset, 0, False, 0, depthwise)

    def alu(self, key, record_fn, op, use_imm: bool = False, imm: int = 0,
            reset: bool = False) -> TraceKernel:
        return self._kernel(key, record_fn, "alu", reset, int(op), use_imm,
                            imm if use_imm or int(op) == AluOp.REQ else 0)

    def dep_push(self, frm, to) -> None:
        self.trace.ops.append(("P", int(frm), int(to)))

    def dep_pop(self, frm, to) -> None:
        self.trace.ops.append(("W", int(frm), int(to)))


def token_fault(trace: Trace, cap: int) -> str | None:
    """Why ``trace`` cannot run with token queues of ``cap`` tokens (``TOKEN_QUEUE_DEPTH``),
    or None when it can.

    Each module's token moves (``"P"`` pushes, ``"W"`` pops) are taken in the module's
    order, one at a time, whichever module can move: a pop needs a token, a push room.  This
    is how the program builder runs a launch on shallow queues (its capacity order, with
    pushes moved off popping instructions, :func:`.launch.split_pushes`), so a trace that
    fits here fits there; greedy is complete (a move that can happen stays possible while
    other modules move: each queue has one producer and one consumer).  Repeating a
    token-balanced trace (batch blocks) needs no more room than one copy.
    """
    moves: dict[int, list[tuple[bool, int]]] = {int(m): [] for m in Module}
    for o in trace.ops:
        if o[0] in ("P", "W"):
            q = int(token_route(Module(o[1]), Module(o[2])).queue)
            moves[o[1] if o[0] == "P" else o[2]].append((o[0] == "P", q))
    head = {m: 0 for m in moves}
    tok = [0, 0, 0, 0]
    moved = True
    while moved:
        moved = False
        for m, mv in moves.items():
            while head[m] < len(mv):
                push, q = mv[head[m]]
                if (tok[q] >= cap) if push else (tok[q] < 1):
                    break
                tok[q] += 1 if push else -1
                head[m] += 1
                moved = True
    stuck = [mv[head[m]] for m, mv in moves.items() if head[m] < len(mv)]
    if not stuck:
        return None
    full = sorted({Queue(q).name.lower() for push, q in stuck if push})
    if not full:
        return (f"{trace.uid}: the program pops token queue "
                f"{', '.join(sorted({Queue(q).name.lower() for _, q in stuck}))} more often "
                f"than it pushes it")
    return (f"{trace.uid}: the program needs more than {cap} token(s) outstanding in token "
            f"queue {', '.join(full)} (TOKEN_QUEUE_DEPTH = {cap})")


def _replay_kernel(k: TraceKernel) -> Callable:
    def rec(r):
        loops = list(k.loops)
        for lp in loops:
            r.loop_begin(*lp)
        r.uops(k.dst, k.src, k.wgt)
        for _ in loops:
            r.loop_end()
    return rec


def replay(builder, trace: Trace, buffers: dict, n_blocks: int) -> None:
    """Emit ``trace`` onto ``builder`` (a ``ProgramBuilder``) for batch blocks
    ``0 .. n_blocks-1``.

    Args:
        buffers: ``slot -> Buffer``; activation buffers hold ``n_blocks`` batch blocks.
    Raises:
        ArtifactError: a slot without a buffer, a relocation that is not a whole number of
            elements.
    """
    cfg = builder.cfg
    ops = trace.ops
    for s in {o[1] for o in ops if o[0] == "L"} | {o[2] for o in ops if o[0] == "S"}:
        if s not in buffers:
            raise ArtifactError(f"trace {trace.uid!r}: no buffer for slot {s!r}")
    eb = {m: cfg.elem_bytes(m) for m in MemType}
    for nb in range(n_blocks):
        for o in ops:
            t = o[0]
            if t == "L":
                _, slot, off, mem, sb, y, x, st, pad = o
                bb = trace.block_bytes.get(slot, 0)
                if bb:
                    q, rem = divmod(nb * bb, eb[MemType(mem)])
                    if rem:
                        raise ArtifactError(f"trace {trace.uid!r}: slot {slot!r} block of "
                                            f"{bb} bytes is not whole {MemType(mem).name} "
                                            f"elements")
                    off += q
                builder.load_2d(buffers[slot], off, MemType(mem), sb, y, x, st, pad=pad)
            elif t == "S":
                _, sb, slot, off, y, x, st = o
                bb = trace.block_bytes.get(slot, 0)
                if bb:
                    q, rem = divmod(nb * bb, eb[MemType.OUT])
                    if rem:
                        raise ArtifactError(f"trace {trace.uid!r}: slot {slot!r} block is "
                                            f"not whole OUT elements")
                    off += q
                builder.store_2d(sb, buffers[slot], off, y, x, st)
            elif t == "K":
                k = trace.kernels[o[1]]
                kern = builder.kernel((trace.uid, o[1]), _replay_kernel(k), k.mode,
                                      reset=k.reset, alu_op=AluOp(k.alu_op) if k.mode == "alu"
                                      else 0, use_imm=k.use_imm, imm=k.imm,
                                      **({"depthwise": True} if k.depthwise else {}))
                builder.run_kernel(kern)
            elif t == "P":
                builder.dep_push(Module(o[1]), Module(o[2]))
            elif t == "W":
                builder.dep_pop(Module(o[1]), Module(o[2]))
            else:
                raise ArtifactError(f"trace {trace.uid!r}: unknown op {t!r}")


@dataclass
class RowBands:
    """A row-band variant of a VTA conv step: the same conv computed ``rows`` output rows
    at a time, so that only one band of its host-packed input (``x``) is in device memory
    at once (a memory budget below the step's working set).

    Each band's program stores into the step's full output tensor: its trace is the conv
    lowered for a band's shape with the output's full plane height, and the executor
    points its ``y`` slot ``r0 * W`` OUT elements into the output for the band of rows
    ``[r0, r1)``; its ``x`` slot holds that band alone (:meth:`SlotLayout.pack_rows` of the
    step's ``x`` layout).  Results are identical to the whole step (the same integer sums
    per output element).

    Attributes:
        rows: output rows of every band but the last (``>= 1``).
        trace: the program of a band of ``rows`` rows (one batch block).
        tail: the program of the last band (``H % rows`` rows), or ``None`` when ``rows``
            divides the output height ``H``.
    """

    rows: int
    trace: Trace
    tail: Trace | None = None

    def spans(self, height: int) -> list[tuple[int, int]]:
        """The bands ``[(r0, r1), ...]`` of an output of ``height`` rows."""
        return [(r0, min(height, r0 + self.rows)) for r0 in range(0, height, self.rows)]

    def trace_of(self, n_rows: int) -> Trace:
        """The program of a band of ``n_rows`` rows (``rows`` or the tail's)."""
        return self.trace if n_rows == self.rows or self.tail is None else self.tail

    def bounds(self, cfg: VTAConfig, height: int, blocks: int = 1) -> int:
        """Estimated core cycles of every band over ``blocks`` batch blocks: the sum over
        bands of ``max(compute, memory)`` (:meth:`Step.bounds` of each band program)."""
        tot = 0
        for r0, r1 in self.spans(height):
            st = self.trace_of(r1 - r0).stats
            comp = int(st.get("gemm_uops_ideal", 0)) * blocks
            tot += max(comp, memory_cycles(cfg, st, blocks), 1)
        return tot

    def to_json(self) -> dict:
        return {"rows": self.rows, "trace": self.trace.to_json(),
                "tail": None if self.tail is None else self.tail.to_json()}

    def arrays(self) -> dict[str, np.ndarray]:
        out = self.trace.arrays()
        if self.tail is not None:
            out.update(self.tail.arrays())
        return out

    @classmethod
    def from_json(cls, d: dict, arrays) -> "RowBands":
        rows = int(d["rows"])
        if rows < 1:
            raise ArtifactError(f"row bands of {rows} rows")
        return cls(rows, Trace.from_json(d["trace"], arrays),
                   None if d.get("tail") is None else Trace.from_json(d["tail"], arrays))


def memory_cycles(cfg: VTAConfig, stats: dict, blocks: int = 1) -> int:
    """Memory lower bound (core cycles) of a program with trace statistics ``stats`` over
    ``blocks`` batch blocks, at one bus beat (``BUS_WIDTH / 8`` bytes) per cycle and
    channel.  Reads and writes take separate AXI channels, so a program that records them
    apart (``min_dram_read_bytes``, ``min_dram_write_bytes``: convs, dense layers, adds,
    pools) is bound by the busier channel; otherwise (artifacts written before convs
    recorded them) by ``min_dram_bytes`` on one channel."""
    bus = cfg.BUS_WIDTH // 8
    if "min_dram_read_bytes" in stats and "min_dram_write_bytes" in stats:
        nbytes = max(int(stats["min_dram_read_bytes"]), int(stats["min_dram_write_bytes"]))
    else:
        nbytes = int(stats.get("min_dram_bytes", 0))
    return -(-nbytes * blocks // bus)


@dataclass
class Step:
    """One operator of a compiled model, in execution order.

    Attributes:
        name: node name; op: IR op (``qconv2d``, ``flatten`` ...); target: ``"vta"`` or
        ``"cpu"``; inputs/outputs: tensor names; attrs: JSON-able attributes;
        consts: constant tensor names the step reads (CPU steps: in logical layout);
        slots: VTA steps: ``slot -> tensor name`` for activation slots and
        ``slot -> constant name`` for packed constants; layouts: ``slot ->``
        :class:`SlotLayout` of activation slots; trace: the VTA :class:`Trace`;
        bands: :class:`RowBands` variants of a VTA conv whose only activation input is
        host-packed, fewest bands first (empty: none).
    """

    name: str
    op: str
    target: str
    inputs: list
    outputs: list
    attrs: dict = field(default_factory=dict)
    consts: list = field(default_factory=list)
    slots: dict = field(default_factory=dict)
    layouts: dict = field(default_factory=dict)
    trace: Trace | None = None
    reason: str = ""
    bands: list = field(default_factory=list)

    def bounds(self, cfg: VTAConfig, blocks: int = 1) -> tuple[int, int]:
        """``(compute, memory)`` lower bounds in core cycles of this VTA step over ``blocks``
        batch blocks, from its trace statistics: the ideal GEMM micro-ops (MACs over the
        array's MACs per cycle) and the minimum DRAM bytes at one bus beat
        (``BUS_WIDTH / 8`` bytes) per cycle (:func:`memory_cycles`).  ``(0, 0)`` for a
        CPU step."""
        st = self.trace.stats if self.trace is not None else {}
        comp = int(st.get("gemm_uops_ideal", 0)) * blocks
        return comp, memory_cycles(cfg, st, blocks)


@dataclass
class CompiledModel:
    """A model compiled for one VTA config (what the executor runs and the artifact holds).

    Attributes:
        config: the :class:`VTAConfig`.
        name: model name.
        inputs / outputs: graph input / output names.
        types: ``tensor -> (dtype, shape, exp, scale)`` (shape entries int or symbolic
            str; ``exp`` the integer power-of-two exponent of quantized tensors, ``scale``
            their float real scale, ``2**exp`` unless the quantizer kept an exact
            non-power-of-two scale; both ``None`` for float tensors).
        steps: :class:`Step` s in execution order.
        constants: ``name -> ndarray`` (logical constants of CPU steps and packed
            constants of VTA steps).
        meta: free-form (placement report text, quantization report text...).
    """

    config: VTAConfig
    name: str
    inputs: list
    outputs: list
    types: dict
    steps: list
    constants: dict
    meta: dict = field(default_factory=dict)

    def placement(self) -> list[tuple[str, str, str, str]]:
        """``(node, op, target, reason)`` per step."""
        return [(s.name, s.op, s.target, s.reason) for s in self.steps]

    def where(self, step: "Step") -> str:
        """``VTA``, ``CPU (numpy)`` or ``CPU (onnxruntime)`` for one step."""
        if step.target == "vta":
            return "VTA"
        return f"CPU ({step.attrs.get('backend', 'numpy') if step.op == 'onnx' else 'numpy'})"

    def placement_table(self) -> str:
        """The placement table: one line per step (where, name, op, reason), then the
        summary ``N/M nodes on VTA, K% of MACs on VTA`` and the notes (``note: ...``:
        the frontend's rewrites, a suspicious calibration range) the compiler recorded."""
        w = max((len(s.name) for s in self.steps), default=4)
        lines = []
        for s in self.steps:
            op = s.op if s.op != "onnx" else f"onnx:{s.attrs.get('op_type')}"
            lines.append(f"  {self.where(s):<17}  {s.name:<{w}}  {op:<14}  {s.reason}")
        nv = sum(1 for s in self.steps if s.target == "vta")
        lines.append("  " + str(self.meta.get("summary") or f"{nv}/{len(self.steps)} steps on VTA"))
        lines += [f"  note: {t}" for t in self.meta.get("notes", [])]
        return "\n".join(lines)

    def requires(self) -> dict[str, list[str]]:
        """CPU backends beyond numpy that the steps need: ``{"onnxruntime": [op types]}``
        (empty when numpy runs every CPU step)."""
        ops = sorted({s.attrs["op_type"] for s in self.steps
                      if s.op == "onnx" and s.attrs.get("backend") == "onnxruntime"})
        return {"onnxruntime": ops} if ops else {}

    def check_requires(self) -> None:
        """Refuse to run when a needed CPU backend is missing.

        Raises:
            ArtifactError: one line naming the ops and the package to install.
        """
        ops = self.requires().get("onnxruntime")
        if not ops:
            return
        from .float_ops import onnxruntime_available

        if not onnxruntime_available():
            raise ArtifactError(f"model '{self.name}' runs CPU op(s) {', '.join(ops)} on "
                                f"onnxruntime, which is not installed (pip install onnxruntime)")

    def to_json(self) -> dict:
        steps = []
        for s in self.steps:
            steps.append({"name": s.name, "op": s.op, "target": s.target, "inputs": s.inputs,
                          "outputs": s.outputs, "attrs": _jsonable(s.attrs),
                          "consts": s.consts, "slots": s.slots,
                          "layouts": {k: v.to_json() for k, v in s.layouts.items()},
                          "trace": s.trace.to_json() if s.trace else None,
                          "reason": s.reason,
                          **({"bands": [b.to_json() for b in s.bands]} if s.bands else {})})
        return {"name": self.name, "inputs": self.inputs, "outputs": self.outputs,
                "types": {k: [t[0], list(t[1]), t[2], t[3]] for k, t in self.types.items()},
                "steps": steps, "meta": _jsonable(self.meta)}


def _jsonable(v: Any) -> Any:
    if isinstance(v, dict):
        return {str(k): _jsonable(x) for k, x in v.items()}
    if isinstance(v, (list, tuple)):
        return [_jsonable(x) for x in v]
    if isinstance(v, (np.integer,)):
        return int(v)
    if isinstance(v, (np.floating,)):
        return float(v)
    if isinstance(v, (int, float, str, bool)) or v is None:
        return v
    return str(v)


_TUPLE_ATTRS = ("kernel", "strides", "pads", "perm", "shape", "scales")


def save_artifact(model: CompiledModel, path: str | Path) -> None:
    """Write ``model`` as a ``.vtapkg`` (see the module docstring)."""
    arrays = {f"c/{k}": np.ascontiguousarray(v) for k, v in model.constants.items()}
    for s in model.steps:
        if s.trace is not None:
            arrays.update(s.trace.arrays())
        for b in s.bands:
            arrays.update(b.arrays())
    manifest = {"format": "vtapkg", "version": FORMAT_VERSION, "requires": model.requires(),
                "config": model.config.to_dict(), "fingerprint": model.config.fingerprint,
                "arrays": {k: _array_record(v) for k, v in arrays.items()},
                "model": model.to_json()}
    with atomic_open(path) as f:
        np.savez(f, manifest=np.array(json.dumps(manifest)), **arrays)


def load_artifact(path: str | Path, config: VTAConfig | None = None) -> CompiledModel:
    """Read a ``.vtapkg``.

    Args:
        config: the config of the device it will run on; when given, an artifact built for
            another config (different fingerprint) is refused.
    Raises:
        ArtifactError: unreadable or malformed file, or a config mismatch.
    """
    p = str(path)
    z = open_npz(p, "artifact", ArtifactError)
    if "manifest" not in z.files:
        z.close()
        raise ArtifactError(f"artifact {p!r} is not a .vtapkg (no manifest)")
    with z:
        raw = read_npz(z, p, "artifact", ArtifactError, skip=tuple(k for k in z.files if k != "manifest"))
        try:
            man = json.loads(str(raw["manifest"]))
        except (ValueError, TypeError, RecursionError) as e:
            raise ArtifactError(f"artifact {p!r}: malformed manifest ({type(e).__name__}: "
                                f"{str(e)[:200]})") from None
        if not isinstance(man, dict) or man.get("format") != "vtapkg":
            raise ArtifactError(f"artifact {p!r}: unknown format "
                                f"{man.get('format') if isinstance(man, dict) else man!r} (expected vtapkg)")
        ver = man.get("version")
        if ver not in READ_VERSIONS:
            why = ("an older vtaforge wrote it; " if isinstance(ver, int) and ver < FORMAT_VERSION
                   else "")
            raise ArtifactError(f"artifact {p!r} has vtapkg format version {ver!r}, this "
                                f"runtime reads version {FORMAT_VERSION} (and 3) only "
                                f"({why}recompile the model)")
        try:
            cfg = VTAConfig.from_dict(dict(man["config"]))
            fp = man["fingerprint"]
            table = man["arrays"]
        except KeyError as e:
            raise ArtifactError(f"artifact {p!r}: malformed manifest (no {e})") from None
        except (TypeError, ValueError) as e:
            raise ArtifactError(f"artifact {p!r}: malformed manifest config ({e})") from None
        if cfg.fingerprint != fp:
            raise ArtifactError(f"artifact {p!r}: config does not match its fingerprint")
        if config is not None and config.fingerprint != cfg.fingerprint:
            a, b = cfg.hardware_dict(), config.hardware_dict()
            diff = ", ".join(f"{k} {a[k]!r} vs {b[k]!r}" for k in sorted(a) if a[k] != b.get(k))
            raise ArtifactError(
                f"artifact {p!r} was compiled for config {cfg.bitstream_name} (fingerprint "
                f"0x{cfg.fingerprint:08x}) but the device is {config.bitstream_name} "
                f"(fingerprint 0x{config.fingerprint:08x}; differs in {diff or 'nothing'}); "
                f"recompile it for this config")
        arrays = read_npz(z, p, "artifact", ArtifactError, skip=("manifest",))
    _check_arrays(p, arrays, table)
    try:
        cm = _model_from_json(cfg, man["model"], arrays)
    except ArtifactError as e:
        raise ArtifactError(f"artifact {p!r}: {e}") from None
    except (KeyError, IndexError, TypeError, ValueError, AttributeError) as e:
        raise ArtifactError(f"artifact {p!r}: malformed model in the manifest ({type(e).__name__}: "
                            f"{str(e)[:200]})") from None
    try:
        _check_steps(cm)
        cm.check_requires()
    except ArtifactError as e:
        raise ArtifactError(f"artifact {p!r}: {e}") from None
    return cm


def _array_record(a: np.ndarray) -> dict:
    """``{"dtype", "shape", "sha256"}`` of an array (the checksum covers its bytes)."""
    import hashlib

    a = np.ascontiguousarray(a)
    return {"dtype": a.dtype.name, "shape": list(a.shape), "sha256": hashlib.sha256(a.tobytes()).hexdigest()}


def _check_arrays(p: str, arrays: dict, table) -> None:
    """Every array the manifest lists is present with its dtype, shape and checksum, and
    nothing else is: a constant edited or swapped for another dtype is refused, never run.

    Raises:
        ArtifactError: one line naming the arrays.
    """
    if not isinstance(table, dict):
        raise ArtifactError(f"artifact {p!r}: malformed manifest (arrays)")
    missing = sorted(set(table) - set(arrays))
    extra = sorted(set(arrays) - set(table))
    if missing or extra:
        raise ArtifactError(f"artifact {p!r}: arrays {missing} missing, {extra} not in the manifest")
    bad = []
    for k, rec in table.items():
        got = _array_record(arrays[k])
        rec = rec if isinstance(rec, dict) else {}
        if any(rec.get(f) != got[f] for f in ("dtype", "shape", "sha256")):
            same = rec.get("dtype") == got["dtype"] and rec.get("shape") == got["shape"]
            bad.append(f"{k} (checksum)" if same else
                       f"{k} ({got['dtype']}{got['shape']}, manifest says {rec.get('dtype')}{rec.get('shape')})")
    if bad:
        raise ArtifactError(f"artifact {p!r}: {len(bad)} array(s) do not match the manifest: "
                            f"{', '.join(bad[:5])}{' ...' if len(bad) > 5 else ''}")


def _model_from_json(cfg: VTAConfig, m: dict, arrays: dict) -> CompiledModel:
    consts = {k[2:]: v for k, v in arrays.items() if k.startswith("c/")}
    steps = []
    for s in m["steps"]:
        attrs = {k: (tuple(v) if k in _TUPLE_ATTRS and isinstance(v, list) else v)
                 for k, v in s["attrs"].items()}
        steps.append(Step(s["name"], s["op"], s["target"], s["inputs"], s["outputs"], attrs,
                          s["consts"], s["slots"],
                          {k: SlotLayout.from_json(v) for k, v in s["layouts"].items()},
                          Trace.from_json(s["trace"], arrays) if s["trace"] else None,
                          s.get("reason", ""),
                          [RowBands.from_json(b, arrays) for b in s.get("bands", [])]))
    try:
        types = {k: (t[0], tuple(t[1]), t[2], None if t[3] is None else float(t[3]))
                 for k, t in m["types"].items()}
    except (IndexError, TypeError, ValueError) as e:
        raise ArtifactError(f"malformed tensor types ({e})") from None
    return CompiledModel(cfg, m["name"], m["inputs"], m["outputs"], types, steps, consts, m.get("meta", {}))


def _check_steps(cm: CompiledModel) -> None:
    """Every step is one this runtime can run, reads only tensors defined before it, and an
    ``onnx`` step's embedded model is the op its attributes name.

    Raises:
        ArtifactError: naming the step.
    """
    import base64

    from .cpu_float import REAL_OPS
    from .cpu_ops import CPU_OPS
    from .float_ops import numpy_supports

    defined = set(cm.inputs) | set(cm.constants)
    for s in cm.steps:
        where = f"step {s.name!r} ({s.op})"
        if s.target not in ("vta", "cpu"):
            raise ArtifactError(f"{where}: unknown target {s.target!r}")
        if s.target == "vta" and s.trace is None:
            raise ArtifactError(f"{where}: a VTA step without a program trace")
        if s.bands and (s.target != "vta" or "x" not in s.layouts):
            raise ArtifactError(f"{where}: row bands on a step without a packed input 'x'")
        if s.bands and "y" in s.layouts:
            h = s.layouts["y"].shape[1]
            for b in s.bands:       # a tail program exactly when the bands do not divide H
                if b.rows >= h or (b.tail is None) != (h % b.rows == 0):
                    raise ArtifactError(f"{where}: row bands of {b.rows} rows "
                                        f"{'with' if b.tail is not None else 'without'} a "
                                        f"last-band program for an output of {h} rows")
        if s.target == "cpu" and s.op not in CPU_OPS and s.op not in REAL_OPS and s.op != "onnx":
            raise ArtifactError(f"{where}: no CPU kernel for op {s.op!r}")
        if s.target == "vta":       # activation slots are tensors, the others packed constants
            reads = [v for k, v in s.slots.items() if k != "y" and k in s.layouts]
            consts = [v for k, v in s.slots.items() if k != "y" and k not in s.layouts]
        else:
            reads, consts = [i for i in s.inputs if i not in cm.constants], []
        undefined = [i for i in reads if i not in defined] + [c for c in consts if c not in cm.constants]
        if undefined:
            raise ArtifactError(f"{where}: reads {undefined}, which nothing defines before it")
        if s.op == "onnx":
            a = s.attrs
            need = ("op_type", "domain", "opset", "onnx_attrs", "in_slots", "out_types", "model", "backend")
            miss = [k for k in need if k not in a]
            if miss:
                raise ArtifactError(f"{where}: missing attributes {miss}")
            if a["backend"] == "numpy":
                ok, why = numpy_supports(a["op_type"], a["onnx_attrs"], int(a["opset"])) \
                    if a["domain"] in ("", "ai.onnx") else (False, f"domain {a['domain']!r}")
                if not ok:
                    raise ArtifactError(f"{where}: {a['op_type']} has no numpy kernel ({why})")
            elif a["backend"] != "onnxruntime":
                raise ArtifactError(f"{where}: unknown CPU backend {a['backend']!r}")
            try:
                blob = base64.b64decode(a["model"], validate=True)
            except (ValueError, TypeError):
                raise ArtifactError(f"{where}: its embedded ONNX model is not base64") from None
            if a["op_type"].encode() not in blob or (a["domain"] and a["domain"].encode() not in blob):
                raise ArtifactError(f"{where}: its embedded ONNX model is not a {a['op_type']} node")
        defined.update(s.outputs)
    missing = [o for o in cm.outputs if o not in defined]
    if missing:
        raise ArtifactError(f"outputs {missing} are never produced")
