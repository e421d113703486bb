"""What every lowering shares: the :class:`LoweredOp` result, :func:`emit_kernel` (a micro-op
kernel keyed by its content), the multiplier plan of a requantize (:func:`plan_for`) and the
ALU requantize epilogue (:func:`requant_alu`, :func:`req_shift_fits`).
"""

from __future__ import annotations

import hashlib

import numpy as np

from ..hw.config import VTAConfig
from ..hw.isa import LIMITS, REQ_LANE, REQ_LOWER_BOUNDS, AluOp, req_imm
from ..runtime.artifact import Trace, TraceBuilder, token_fault
from .errors import CompileError
from .ir import Graph
from .requant import MultPlan, mult_plan

__all__ = ["LoweredOp", "emit_kernel", "plan_for", "requant_alu", "fit_queues", "dram_stats",
           "operand_chw", "req_shift_fits"]


def req_shift_fits(shift: int, lane_core: bool = False) -> bool:
    """Whether a scalar requantize ``shift`` fits a fused ``ALU REQ``'s shift field:
    ``-32 .. 31``, less :data:`~vtaforge.hw.isa.REQ_LANE` (-32) on a ``REQ_LANE_SHIFT``
    core (``lane_core``), where that field value means a per-lane REQ (the shift and bias
    taken from the tensor operand) and an ordinary shift of -32 takes SHR instead."""
    return -32 <= shift <= 31 and not (lane_core and shift == REQ_LANE)


def operand_chw(graph: Graph, tensor: str) -> tuple:
    """The per-sample shape ``(C, H, W)`` of a VTA operand: NCHW ``[N, C, H, W]`` gives
    ``(C, H, W)``, NC ``[N, C]`` gives ``(C, 1, 1)``.

    Raises:
        CompileError: another rank.
    """
    shape = graph.types[tensor].shape
    if len(shape) == 4:
        return tuple(shape[1:])
    if len(shape) == 2:
        return (shape[1], 1, 1)
    raise CompileError(f"tensor {tensor!r}: VTA operands are NCHW or NC, got {shape}")


class LoweredOp:
    """Result of a lowering: ``trace``, ``consts`` (slot -> packed array),
    ``layouts`` (activation slot -> :class:`SlotLayout`)."""

    def __init__(self, trace: Trace, consts: dict, layouts: dict):
        self.trace, self.consts, self.layouts = trace, consts, layouts


def dram_stats(read: int, write: int) -> dict:
    """Trace statistics of a program's minimum DRAM traffic: ``min_dram_bytes`` (both
    directions) and, apart, ``min_dram_read_bytes`` and ``min_dram_write_bytes``.  Reads
    and writes take separate AXI channels, each one bus beat per cycle, so the memory
    bound of the program is the busier channel's beats
    (:meth:`~vtaforge.runtime.artifact.Step.bounds`), not the sum: an add reads two
    operands while it writes one, so its cycles can lie below the summed bound
    (docs/cli.md "vtaforge profile")."""
    return {"min_dram_bytes": int(read) + int(write), "min_dram_read_bytes": int(read),
            "min_dram_write_bytes": int(write)}


def fit_queues(cfg: VTAConfig, lo: LoweredOp) -> LoweredOp:
    """``lo``, checked against the config's token queues: a program needing more tokens
    outstanding than ``TOKEN_QUEUE_DEPTH`` holds cannot run in any order, so it is refused
    here, at compile time (the node then runs on the CPU with this reason), not by the
    runtime.

    Raises:
        CompileError: :func:`~vtaforge.runtime.artifact.token_fault`'s reason.
    """
    why = token_fault(lo.trace, cfg.TOKEN_QUEUE_DEPTH)
    if why is not None:
        raise CompileError(why)
    return lo


def emit_kernel(tb: TraceBuilder, mode: str, loops, dst, src, wgt=None, *, reset=False,
                op=0, imm=None, params=None, depthwise=False):
    """Emit a kernel whose cache key is derived from its content (never aliases).

    ALU: ``imm`` set → immediate operand (``use_imm``); ``params`` set (with ``imm`` None)
    → a tensor operand and ``params`` in the immediate field (ALU REQ's parameters).
    GEMM: ``depthwise`` → depthwise GEMM micro-ops (docs/isa.md "Depthwise GEMM")."""
    dst = np.asarray(dst, np.int64)
    src = np.asarray(src, np.int64)
    wgt = np.zeros_like(dst) if wgt is None else np.asarray(wgt, np.int64)
    h = hashlib.blake2b(digest_size=12)
    for a in (dst, src, wgt):
        h.update(a.tobytes())
        h.update(b"|")
    key = (mode, tuple(tuple(lp) for lp in loops), h.hexdigest())

    def rec(k):
        for lp in loops:
            k.loop_begin(*lp)
        k.uops(dst, src, wgt)
        for _ in loops:
            k.loop_end()
    if mode == "gemm":
        return tb.gemm(key, rec, reset=reset, **({"depthwise": True} if depthwise else {}))
    field = imm if imm is not None else params
    return tb.alu(key, rec, op, use_imm=imm is not None, imm=0 if field is None else int(field),
                  reset=reset)


def plan_for(cfg: VTAConfig, uid: str, attrs: dict, acc_bound: int) -> MultPlan | None:
    """The :class:`~.requant.MultPlan` of a requantize with ``mult != 1`` (None for ``mult == 1``).

    Raises:
        CompileError: ``ALU_MUL`` missing, or no overflow-free sequence at ``ACC_WIDTH``.
    """
    m = attrs.get("mult")
    if m in (None, 1):
        return None
    if not cfg.ALU_MUL:
        raise CompileError(f"{uid}: requantize multiplier {m} needs ALU_MUL")
    plan = mult_plan(int(m), int(attrs["shift"]), int(attrs["round"]), int(attrs["clip_lo"]),
                     int(attrs["clip_hi"]), int(acc_bound), cfg.ACC_WIDTH)
    if plan is None:
        raise CompileError(f"{uid}: multiplier {m} (shift {attrs['shift']}) may overflow "
                           f"ACC_WIDTH {cfg.ACC_WIDTH} for |acc| <= {acc_bound}")
    return plan


def _add_imm(tb, loops, d, s, value: int) -> None:
    while value:
        step = max(LIMITS.imm_min, min(LIMITS.imm_max, value))
        emit_kernel(tb, "alu", loops, d, s, op=AluOp.ADD, imm=step)
        value -= step


def requant_alu(tb: TraceBuilder, base: int, n: int, shift: int, lo: int, hi: int,
                extra_round: int = 0, plan: MultPlan | None = None, bias=None,
                fused: bool = False, clear: bool = False, shift_src=None,
                lane_core: bool = False) -> bool:
    """ALU requantize of ACC entries ``[base, base+n)``: ADD bias (a tensor operand, when
    ``bias = (loops, dst, src)`` is given: the bias row of each entry), ADD round (if
    given), SHR shift, MAX lo, MIN hi (skipping no-ops).  With a ``plan`` (multiplier):
    ``extra_round`` is the plan's ``pre_add`` when not already merged into the bias (ADD
    in 16-bit immediate steps), then pre-clip MAX/MIN, MUL, ADD ``post_add``, SHR, MAX,
    MIN.

    ``fused`` (the config's ``ALU_REQUANT``): SHR, MAX, MIN become one ``ALU REQ``
    (:func:`vtaforge.hw.isa.req_imm`) when ``lo`` is -128, 0 or -8 (int4 outputs) and ``hi`` an int8, and
    with a bias and nothing between it and the shift (no plan, no ``extra_round``) the
    bias ADD joins it: one tensor-operand micro-op per entry instead of four.  The result
    is the same integers (REQ is defined as that sequence).  An int16 output's clip
    (``hi`` 32767, ``lo`` 0 or -32768: 16-bit activation cores) never qualifies, since
    REQ's clip immediates are 8-bit: it takes SHR, MAX, MIN (16-bit immediates).

    ``clear`` (with that one bias-fused REQ only): the REQ is a *clearing* REQ (the reset
    flag, docs/isa.md "REQ"): its results go to OUT only and the ACC entries it covers
    become 0, so the next tile accumulating there needs no reset.  The bias ``dst``/loops
    must then cover the entries ``[base, base+n)`` exactly once each.

    ``shift_src = (loops, dst, src)`` (a per-output-channel requantize): the shift is a
    tensor operand, the shift row of each entry's output block (laid out as ``bias``; the
    SHR reads its low ``LOG_ACC_WIDTH + 1`` bits as signed, negative = left) instead of
    the immediate ``shift``: ADD bias, SHR by the rows, MAX lo, MIN hi; with ``fused`` and
    a REQ clip the MAX/MIN are one ``REQ`` of shift 0 (immediate operand: clip only).
    Never with a ``plan`` or ``extra_round``.  (The conv lowering's aligned per-channel
    form, one bias-fused REQ, does its tensor SHR itself and calls this as scalar; its
    per-lane form on a ``REQ_LANE_SHIFT`` core emits its one REQ itself.)

    ``lane_core`` (the config's ``REQ_LANE_SHIFT``): a scalar ``shift`` of -32 is no fused
    REQ there (:func:`req_shift_fits`).

    Returns whether the entries were cleared (a clearing REQ was emitted)."""
    req = None
    if shift_src is not None:
        if plan is not None or extra_round:
            raise ValueError("a per-channel (tensor-operand) shift takes no multiplier plan "
                             "or extra rounding")
        if bias is not None:
            emit_kernel(tb, "alu", bias[0], bias[1], bias[2], op=AluOp.ADD)
        emit_kernel(tb, "alu", shift_src[0], shift_src[1], shift_src[2], op=AluOp.SHR)
        clip_req = fused and lo in REQ_LOWER_BOUNDS and lo <= hi <= 127
        for e0 in range(0, n, LIMITS.max("iter")):
            m = min(LIMITS.max("iter"), n - e0)
            loops, d = [(m, 1, 1, 0)], [base + e0]
            if clip_req:
                emit_kernel(tb, "alu", loops, d, d, op=AluOp.REQ, imm=req_imm(0, lo, hi))
                continue
            if lo > -(1 << 31):
                emit_kernel(tb, "alu", loops, d, d, op=AluOp.MAX, imm=lo)
            if hi < (1 << 31) - 1:
                emit_kernel(tb, "alu", loops, d, d, op=AluOp.MIN, imm=hi)
        return False
    if fused and req_shift_fits(shift, lane_core) and lo in REQ_LOWER_BOUNDS and lo <= hi <= 127:
        req = req_imm(shift, lo, hi)
        if bias is not None and plan is None and not extra_round:
            emit_kernel(tb, "alu", bias[0], bias[1], bias[2], op=AluOp.REQ, imm=None,
                        params=req, reset=clear)
            return clear
    if bias is not None:
        emit_kernel(tb, "alu", bias[0], bias[1], bias[2], op=AluOp.ADD)
    for e0 in range(0, n, LIMITS.max("iter")):
        m = min(LIMITS.max("iter"), n - e0)
        loops = [(m, 1, 1, 0)]
        d, s = [base + e0], [base + e0]
        if plan is not None:
            _add_imm(tb, loops, d, s, extra_round)
            if plan.clip is not None:
                emit_kernel(tb, "alu", loops, d, s, op=AluOp.MAX, imm=plan.clip[0])
                emit_kernel(tb, "alu", loops, d, s, op=AluOp.MIN, imm=plan.clip[1])
            emit_kernel(tb, "alu", loops, d, s, op=AluOp.MUL, imm=plan.mult)
            if plan.post_add:
                emit_kernel(tb, "alu", loops, d, s, op=AluOp.ADD, imm=plan.post_add)
        elif extra_round:
            emit_kernel(tb, "alu", loops, d, s, op=AluOp.ADD, imm=extra_round)
        if req is not None:
            emit_kernel(tb, "alu", loops, d, s, op=AluOp.REQ, imm=req)
            continue
        if shift:
            emit_kernel(tb, "alu", loops, d, s, op=AluOp.SHR, imm=shift)
        if lo > -(1 << 31):
            emit_kernel(tb, "alu", loops, d, s, op=AluOp.MAX, imm=lo)
        if hi < (1 << 31) - 1:
            emit_kernel(tb, "alu", loops, d, s, op=AluOp.MIN, imm=hi)
    return False
