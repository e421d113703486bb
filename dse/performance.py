"""Performance evaluators of one design point: the cycle model on the compiler's real
programs (:class:`CycleModel`, :class:`ModelPerformance`), measured RTL cycles
(:class:`RtlPerformance`) and accumulator safety (:class:`AccSafety`)."""

from __future__ import annotations

import contextlib
import copy
import math
from collections import deque
from dataclasses import asdict, dataclass
from typing import Any, Mapping, Sequence

import numpy as np

from ..hw.config import MemType, VTAConfig
from ..hw.isa import Module, module_tokens
from .result import DSEError, Result, _fp
from .workloads import DseWorkload, compile_workload, workload_layers

__all__ = [
    "MODEL_ERROR_BAND", "CycleModel", "uop_loads_of", "ModelPerformance", "RtlPerformance",
    "AccSafety", "perf_record", "perf_records", "perf_records_of", "run_closing",
    "TRACE_BOUND_FIELDS",
    "program_memo_key", "scratchpad_extents_fit",
]


#: Instructions per fetch DMA request (hw/core/fetch.py ``FETCH_BATCH``).
FETCH_BATCH = 4

#: Cycles from the REQ engine's end to the end of a GEMM micro-op it held in stage B
#: (hw/core/compute.py: the engine's busy drops, then the micro-op goes through B, C, D).
ENGINE_HOLD_DRAIN = 3

#: The cycle model's stated error against the RTL: a bound on the per-layer error of the
#: recorded pairs of tests/dse/data after the fit, with a margin since the pairs are all on
#: the ideal bus (docs/dse.md "Calibration" has the measured errors per config, their
#: record and the one larger REQ_ENGINE outlier, ``fetch_yields``); latencies within this
#: fraction of each other are ties for "best latency".
MODEL_ERROR_BAND = 0.025

#: Per module (index ``Module - 1``: 0 load, 1 compute, 2 store), the ``(flag, queue)`` of
#: each token queue it pops / pushes, in queue order: derived from hw/isa.py
#: ``TOKEN_ROUTES`` (queues 0 l2g, 1 g2l, 2 g2s, 3 s2g).
TOKEN_POPS: dict[int, tuple[tuple[str, int], ...]] = {
    int(m) - 1: tuple((r.pop_flag, int(r.queue)) for r in module_tokens(m)[0]) for m in Module}
TOKEN_PUSHES: dict[int, tuple[tuple[str, int], ...]] = {
    int(m) - 1: tuple((r.push_flag, int(r.queue)) for r in module_tokens(m)[1]) for m in Module}


# =============================================================================== cycles
@dataclass(frozen=True)
class CycleModel:
    """Cycles of one instruction, and of a whole program through the token pipeline.

    Per instruction (docs/hardware.md "Compute pipeline" and "Measured"):

    - GEMM: ``insn_overhead + gemm_uop_cycles × iter_out × iter_in × (uop_end − uop_bgn)``
      (one micro-op per cycle in steady state; ~8 cycles for a one-micro-op GEMM → 7
      cycles of overhead).  Reset micro-ops count like GEMM micro-ops, and so do depthwise
      ones (``DEPTHWISE_TAPS``, docs/isa.md "Depthwise GEMM": one micro-op, T INP entries
      read side by side, per cycle); nothing here reads a GEMM's INP indices (the token
      order is the program's, the REQ engine's holds look at accumulator entries only), and
      the extents a depthwise trace needs count its last tap (:func:`_trace_extents`).
    - ALU: ``insn_overhead + N × (alu_imm_uop_cycles if use_imm or reset else
      alu_tensor_uop_cycles)`` (a tensor operand takes a second accumulator read: 2 cycles;
      a clearing REQ, reset on ALU REQ, is no reset: it reads like REQ).
    - LOAD/STORE (and UOP/ACC loads on compute): ``insn_overhead`` + per row ``dram_latency
      + max(beats, elements)`` + ``row_overhead`` (``store_row_overhead`` for a STORE row)
      where beats are the bus beats covering the row's bytes at its address (bus =
      BUS_WIDTH/8 bytes per cycle) and the scratchpad takes one element per cycle; padding
      costs one cycle per padded element and ``pad_row_overhead`` per row of a LOAD with
      horizontal padding.  An instruction-fetch request (FETCH_BATCH instructions) costs
      its beats + ``fetch_overhead`` + ``dram_latency``.  ``x_size == 0`` (token-only)
      and FINISH cost ``insn_overhead``.

    Per program: ``lower`` = max(busiest module, read-channel beats incl. instruction
    fetch, write-channel beats) — perfect overlap; ``upper`` = the sum of every
    instruction's cycles plus the instruction fetch — no overlap at all; ``cycles`` (the
    estimate) = a list schedule of the three modules in program order, each instruction
    starting when its module is free, its popped dependency tokens were pushed and it was
    dispatched, raised to at least the bus bound.  With :attr:`read_arbitration` (default)
    the schedule also models the one AXI read channel (:meth:`_schedule`): the fetch unit
    (batches of four instructions, ahead of execution up to the command-queue depth), the
    compute module's UOP/ACC/ACC8 loads and the load module's INP/WGT loads take it one DMA
    row at a time in that priority, so a 1-beat UOP load behind a 1,024-beat INP row
    waits for the row, and so does the next instruction fetch.  It ignores token-queue
    capacity and write-channel contention; the upper bound does not depend on them.
    ``dram_latency`` defaults to 0, like the Verilator harness's DRAM model: a board has
    tens of cycles per burst.  On a ``DMA_OUTSTANDING`` > 1 core a LOAD's rows after its
    first overlap their latency with the rows before, a STORE pays it once
    (:meth:`_row_cycles`), and a LOAD's top padding and first left padding are written
    while its first row's latency runs (:meth:`_dma_costs`).

    With ``REQ_ENGINE`` (:meth:`_engine_plan`) the requantize engine is a fourth resource
    beside the compute module: an ALU REQ or ALU reset of one micro-op starts when the
    pipeline is empty (the compute module free) and the engine idle, takes
    ``engine_overhead`` + its entries' cycles (one per entry, the source misses and
    read-after-write stalls as on the pipeline) on the engine, pushes its tokens at its
    end, and holds the compute module only ``engine_take`` cycles; while it runs, the
    compute module's next ALU, FINISH, ACC/ACC8 LOAD, instruction that pushes to the store
    unit (its STOREs read the OUT view the engine writes) or that pushes to the load unit
    when the engine's instruction does waits for the engine's end, and a GEMM whose
    accumulator entries meet the engine's destination (or tensor source) range holds its
    first such micro-op until then.  ``lower`` counts the engine's entries apart from the
    pipeline's.  Without ``REQ_ENGINE`` nothing changes.
    """

    gemm_uop_cycles: float = 1.0
    alu_imm_uop_cycles: float = 1.0
    alu_tensor_uop_cycles: float = 2.0
    #: Fitted (dse/calibrate.py ``fit``) on the recorded pairs of tests/dse/data with
    #: ``compute_overhead``, ``row_overhead``, ``fetch_overhead`` and ``dma_lead``; was 11 /
    #: 10.125 / 3 before the read channel and the fetch were modelled, 7 / 7 / 0 before any
    #: fit (docs/dse.md "Calibration").
    insn_overhead: float = 7.0
    dram_latency: float = 0.0
    #: Stall cycles of an ALU micro-op that reads (dst or tensor src) the entry the
    #: previous micro-op writes (pipeline B -> D: 2); one slot further back, that minus 1
    #: minus the delay already paid.  Only with micro-ops (``uop_loads``).
    alu_hazard_cycles: float = 2.0
    #: Fixed cycles of a GEMM/ALU instruction (``None``: ``insn_overhead``): the sequencer
    #: starts when the instruction is taken and the next GEMM/ALU enters behind the last
    #: micro-op, so it is smaller than a DMA's.
    compute_overhead: float | None = 6.0
    #: Fixed cycles of a GEMM/ALU that follows a GEMM/ALU pushing no token (``None``: the
    #: compute overhead): the compute FSM starts it behind the previous one's last
    #: micro-op (hw/core/compute.py "EXEC"), but the recorded pairs do not yet support a
    #: smaller value (the schedule ignores bus contention; docs/dse.md "Calibration").
    chain_overhead: float | None = None
    #: Cycles per DMA row (one AXI burst) on top of its beats/elements, with the
    #: zero-latency DRAM model (burst handshake); ``dram_latency`` adds a board's latency.
    row_overhead: float = 3.0
    #: Cycles per STORE row beyond its beats (``None``: ``row_overhead``): the store unit
    #: issues the next row's write burst while this one's beats go out, so a row costs
    #: about its beats (fitted on MobileNet-v1's store-bound 112x112 32->64 1x1 on the
    #: engine core's rtl: bench/RESULTS.md 2026-12-02 "Cycle-model row terms").
    store_row_overhead: float | None = 0.0
    #: Extra cycles per row of a LOAD with horizontal padding (the loader writes a row's
    #: pad elements around its DMA beats, so the next row's request does not overlap this
    #: row); fitted on the MobileNet-v1 depthwise pairs (pynq rtl; bench/RESULTS.md
    #: 2026-12-02 "Cycle-model row terms").
    pad_row_overhead: float = 2.5
    #: Model the one AXI read channel shared by the instruction fetch and the compute and
    #: load modules' DMA reads, and the fetch itself (:meth:`_schedule`); ``False``: every
    #: instruction is there at cycle 0 and reads never wait for each other (the model
    #: before, which underestimated the residual adds: bench/RESULTS.md 2026-12-02
    #: "Cycle-model row terms").
    read_arbitration: bool = True
    #: Cycles of one instruction-fetch request beyond its beats (hw/core/fetch.py: request
    #: and first-beat latency, NEXT), with :attr:`read_arbitration`; fitted.
    fetch_overhead: float = 6.5
    #: Cycles from a DMA instruction's start to its first row request (decode), with
    #: :attr:`read_arbitration`: a read arriving in them finds the channel free; fitted.
    dma_lead: float = 6.0
    #: ``REQ_ENGINE`` cores only: fixed cycles of an instruction on the requantize engine
    #: beyond its entries (micro-op read in EPREP, the take, the three stages' fill, the
    #: token push; hw/core/compute.py ``_req_engine``); fitted on the engine pairs.
    engine_overhead: float = 5.0
    #: ``REQ_ENGINE`` cores only: cycles the compute FSM spends handing an instruction to
    #: the engine (IDLE -> EPREP -> IDLE) before the pipeline takes the next one; fitted.
    engine_take: float = 2.0
    #: With :attr:`read_arbitration`: a fetch request yields the channel to a compute or
    #: load read that arrived while the fetch's previous request held it (hw/core/fetch.py
    #: leaves a cycle between requests, in which the arbiter grants the waiting read).
    #: ``False`` (default, the model as fitted): the fetch keeps the channel through a run
    #: of requests and the read waits for the whole run, which overestimates a layer whose
    #: UOP loads wait behind long fetch runs (tiny + REQ_ENGINE C4; figures: docs/dse.md
    #: "REQ engine").
    fetch_yields: bool = False
    #: ``DMA_OUTSTANDING`` > 1 cores only: cycles per LOAD row beyond its beats/elements
    #: when its request was made ahead (the loader's ROW, LZ and RZ states; no request
    #: handshake in the row); fitted on the tiny LOAD rows of tests/dse/test_dma_model.py.
    queued_row_overhead: float = 3.0
    #: ``DMA_OUTSTANDING`` = N > 1 cores only: cycles of the request loop beyond the DRAM
    #: latency and a row's beats/elements ``d``: row ``k + N``'s last element comes at
    #: least ``dram_latency + d + queued_loop_cycles`` after row ``k``'s (its request goes
    #: out when row ``k`` is written); fitted like :attr:`queued_row_overhead`.
    queued_loop_cycles: float = 2.0
    #: ``LOAD_AHEAD`` cores only: fixed cycles of a LOAD the load unit took ahead (its
    #: requests made behind the LOAD before it; :meth:`_ahead_loads`), in place of
    #: ``insn_overhead``: the loader's BOT -> TOP -> ROW -> LZ between the two LOADs' data;
    #: fitted on the tiny LOAD runs of tests/dse/test_dma_model.py.
    ahead_overhead: float = 3.0

    def __post_init__(self) -> None:
        """Raises :class:`DSEError` when a parameter is not a finite number >= 0 (a
        negative or NaN latency would silently rank designs wrongly)."""
        for name in ("gemm_uop_cycles", "alu_imm_uop_cycles", "alu_tensor_uop_cycles",
                     "insn_overhead", "dram_latency", "alu_hazard_cycles",
                     "row_overhead", "fetch_overhead", "dma_lead", "engine_overhead",
                     "engine_take", "pad_row_overhead", "queued_row_overhead",
                     "queued_loop_cycles", "ahead_overhead") + tuple(
                         k for k in ("compute_overhead", "chain_overhead", "store_row_overhead")
                         if getattr(self, k) is not None):
            v = getattr(self, name)
            opt = "--dram-latency" if name == "dram_latency" else name
            if isinstance(v, bool) or not isinstance(v, (int, float)) \
                    or not math.isfinite(float(v)) or float(v) < 0:
                raise DSEError(f"{opt} = {v!r} must be a finite number of cycles >= 0")

    def alu_cycles(self, cfg: VTAConfig, cols: Mapping[str, np.ndarray], i: int,
                   uops: np.ndarray) -> float:
        """Micro-op cycles of ALU instruction ``i`` given the micro-op buffer (uint32
        words): one per micro-op, plus ``alu_tensor_uop_cycles - 1`` per tensor operand
        that misses the one-entry source cache (hit: same source as the previous
        micro-op, not written by it), plus the read-after-write stalls
        (:attr:`alu_hazard_cycles`).  Without overhead (cycles)."""
        from ..hw.isa import AluOp, decode_uops

        b, e = int(cols["uop_bgn"][i]), int(cols["uop_end"][i])
        I, J = int(cols["iter_out"][i]), int(cols["iter_in"][i])
        if e <= b or I <= 0 or J <= 0:
            return 0.0
        u = decode_uops(cfg, uops[b:e])
        oi = np.arange(I, dtype=np.int64)[:, None, None]
        oj = np.arange(J, dtype=np.int64)[None, :, None]
        dst = (u["dst"][None, None, :] + oi * int(cols["dst_factor_out"][i])
               + oj * int(cols["dst_factor_in"][i])).ravel()
        n = dst.size
        # a clearing REQ (reset on ALU REQ) reads dst/src like REQ: not a reset
        clear = cols["reset"][i] and cols["alu_opcode"][i] == AluOp.REQ
        tensor = not (cols["use_imm"][i] or (cols["reset"][i] and not clear))
        c1 = np.zeros(n, bool)
        c2 = np.zeros(n, bool)
        same = np.zeros(n, bool)
        same[1:] = dst[1:] == dst[:-1]
        # ALU_FORWARD: a micro-op on the previous one's destination takes its result (an
        # ALU op other than REQ, or a reset): no stall and no destination read
        fwd = same if cfg.ALU_FORWARD and (cols["alu_opcode"][i] != AluOp.REQ
                                            or (cols["reset"][i] and not clear)) \
            else np.zeros(n, bool)
        c1[:] = same & ~fwd
        c2[2:] = dst[2:] == dst[:-2]
        c2 &= ~fwd
        miss = np.zeros(n, bool)
        if tensor:
            src = (u["src"][None, None, :] + oi * int(cols["src_factor_out"][i])
                   + oj * int(cols["src_factor_in"][i])).ravel()
            c1[1:] |= src[1:] == dst[:-1]
            c2[2:] |= src[2:] == dst[:-2]
            miss[:] = True
            miss[1:] = ~((src[1:] == src[:-1]) & (dst[:-1] != src[1:]))
            miss &= ~fwd    # a forwarded micro-op reads only its source: one cycle
        H = self.alu_hazard_cycles
        d = miss * (self.alu_tensor_uop_cycles - self.alu_imm_uop_cycles) + c1 * H
        for k in np.nonzero(c2 & ~c1)[0]:
            d[k] += max(0.0, H - 1 - d[k - 1])
        return float(n * self.alu_imm_uop_cycles + d.sum())

    def program_cycles(self, cfg: VTAConfig, cols: Mapping[str, np.ndarray],
                       uop_loads: Sequence[tuple[int, np.ndarray]] | None = None) -> dict:
        """Cycles of a decoded program (``decode_program`` columns).

        Args:
            uop_loads: ``[(instruction index, uint32 micro-op words)]`` of the program's
                UOP LOADs (in order): with them, ALU instructions are costed micro-op by
                micro-op (:meth:`alu_cycles`: source cache and hazard stalls); without,
                ``alu_imm_uop_cycles``/``alu_tensor_uop_cycles`` per micro-op.

        Returns ``{"cycles", "lower", "upper", "busy": {load, compute, store},
        "read_beats", "write_beats"}`` (floats, cycles).  ``lower`` counts no overhead,
        latency, padding or stall: one micro-op per cycle, one element or bus beat per
        cycle, the busiest module or bus channel.
        """
        from ..hw.isa import Opcode

        op = np.asarray(cols["opcode"])
        n = len(op)
        mt = np.asarray(cols["memory_type"])
        cost = np.full(n, self.insn_overhead, dtype=np.float64)
        bus = cfg.BUS_WIDTH // 8
        read_beats = math.ceil(16 * n / bus)
        write_beats = 0
        floor = np.zeros(n, dtype=np.float64)  # cycles no instruction can beat
        _, chain_co = self._exec_costs(cfg, cols, uop_loads, cost, floor)
        engine = self._engine_plan(cfg, cols, uop_loads) if cfg.REQ_ENGINE else None
        if engine is not None:
            # the engine's instructions: its fixed cost instead of the pipeline's
            e = np.nonzero(engine["eligible"])[0]
            cost[e] += self.engine_overhead - chain_co[e]
        dma = self._dma_costs(cfg, cols, cost, floor)
        read_beats += dma["read_beats"]
        write_beats += dma["write_beats"]
        # modules
        store = op == Opcode.STORE
        load = (op == Opcode.LOAD) & ((mt == MemType.INP) | (mt == MemType.WGT))
        module = np.where(store, 2, np.where(load, 0, 1))
        # the lower bound's and busy figures' units: 3 = the REQ engine
        unit = module if engine is None else np.where(engine["eligible"], 3, module)
        busy = [float(cost[unit == k].sum()) for k in range(4)]
        lower = float(max(max(float(floor[unit == k].sum()) for k in range(4)),
                          read_beats, write_beats))
        # every instruction alone plus its fetch (beats, and per request of FETCH_BATCH the
        # fetch overhead and DRAM latency: the schedule charges them too)
        upper = float(cost.sum()) + math.ceil(16 * n / bus) + math.ceil(n / FETCH_BATCH) * (
            self.fetch_overhead + self.dram_latency)
        rd = np.zeros(n, np.int8)
        rows_of: dict[int, np.ndarray] = {}
        sel = dma["sel"]
        if len(sel):
            is_load, rows, y = dma["is_load"], dma["rows"], dma["y"]
            rsel = sel[is_load]
            rd[rsel] = np.where(module[rsel] == 0, 2, 1)
            cum = np.cumsum(rows)
            hi = np.cumsum(y)
            lo = hi - y
            # per read: its rows' end times from its first row's start
            rows_of = {int(sel[k]): cum[lo[k]:hi[k]] - (cum[lo[k] - 1] if lo[k] else 0.0)
                       for k in np.nonzero(is_load)[0]}
        sched = self._schedule(cols, module, cost, rd, rows_of, fetch_beats=-(-16 // bus),
                               queue_depth=int(cfg.INSN_QUEUE_DEPTH), engine=engine,
                               lat_q=self.dram_latency if cfg.DMA_OUTSTANDING > 1 else 0.0,
                               ahead=dma["ahead"] if cfg.LOAD_AHEAD else None)
        out = {"cycles": max(sched, read_beats, write_beats), "lower": lower, "upper": upper,
               "busy": {"load": busy[0], "compute": busy[1], "store": busy[2]},
               "read_beats": read_beats, "write_beats": write_beats}
        if engine is not None:
            out["busy"]["engine"] = busy[3]
        return out

    def _exec_costs(self, cfg: VTAConfig, cols: Mapping[str, np.ndarray],
                    uop_loads: Sequence[tuple[int, np.ndarray]] | None, cost: np.ndarray,
                    floor: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """:meth:`program_cycles`' GEMM/ALU costs, added in place to ``cost`` (with their
        fixed cost: the compute or chain overhead instead of ``insn_overhead``) and their
        micro-op counts to ``floor``.  Returns ``(chained, overhead)`` per instruction: a
        GEMM/ALU behind one that pushes no token, and the fixed cost it was charged."""
        from ..hw.isa import AluOp, Opcode

        op = np.asarray(cols["opcode"])
        n = len(op)
        mt = np.asarray(cols["memory_type"])
        co = self.insn_overhead if self.compute_overhead is None else self.compute_overhead
        is_exec = (op == Opcode.GEMM) | (op == Opcode.ALU)
        on_compute = ~((op == Opcode.STORE) | ((op == Opcode.LOAD) & (
            (mt == MemType.INP) | (mt == MemType.WGT))))
        pushes = (np.asarray(cols["push_prev"]) != 0) | (np.asarray(cols["push_next"]) != 0)
        ci = np.nonzero(on_compute)[0]
        chained = np.zeros(n, bool)
        if len(ci) > 1:
            prev = ci[:-1]
            chained[ci[1:]] = is_exec[ci[1:]] & is_exec[prev] & ~pushes[prev]
        for o in (Opcode.GEMM, Opcode.ALU):
            sel = np.nonzero(op == o)[0]
            if not len(sel):
                continue
            cost[sel] = np.where(chained[sel], co if self.chain_overhead is None
                                 else self.chain_overhead, co)
            I = np.maximum(cols["iter_out"][sel], 0)
            J = np.maximum(cols["iter_in"][sel], 0)
            U = np.maximum(cols["uop_end"][sel] - cols["uop_bgn"][sel], 0)
            N = (I * J * U).astype(np.float64)
            floor[sel] = N
            if o == Opcode.GEMM:
                cost[sel] += N * self.gemm_uop_cycles
            elif uop_loads is None:
                cheap = (cols["use_imm"][sel] != 0) | ((cols["reset"][sel] != 0)
                                                       & (cols["alu_opcode"][sel] != AluOp.REQ))
                cost[sel] += N * np.where(cheap, self.alu_imm_uop_cycles,
                                          self.alu_tensor_uop_cycles)
            else:
                buf = np.zeros(cfg.UOP_DEPTH, np.uint32)
                loads = sorted(uop_loads, key=lambda t: t[0])
                li = 0
                for i in sel:
                    while li < len(loads) and loads[li][0] < i:
                        j, words = loads[li]
                        base = int(cols["sram_base"][j])
                        buf[base:base + len(words)] = words[:max(0, cfg.UOP_DEPTH - base)]
                        li += 1
                    cost[i] += self.alu_cycles(cfg, cols, int(i), buf)
        chain = co if self.chain_overhead is None else self.chain_overhead
        return chained, np.where(chained, chain, co)

    def _dma_costs(self, cfg: VTAConfig, cols: Mapping[str, np.ndarray], cost: np.ndarray,
                   floor: np.ndarray) -> dict:
        """:meth:`program_cycles`' LOAD/STORE costs, vectorised over every DMA row, added
        in place to ``cost`` (beats or elements per row: ``floor``).  A LOAD's padding
        costs one cycle per zero it writes and ``pad_row_overhead`` per row with horizontal
        padding; on a ``DMA_OUTSTANDING`` > 1 core the loader requests its first row the
        cycle after it starts, before it writes the ``y_pad_0`` top rows and that row's
        ``x_pad_0`` left zeros (hw/core/load.py ``TensorLoader._row_requests`` and
        ``_fsm``: TOP and its TOPZ zeros per top row, then LZ), so those ``P = y_pad_0 ×
        (x_pad_0 + x_size + x_pad_1 + 1) + x_pad_0`` cycles overlap the row's DRAM
        latency L: they cost ``max(0, P - L)`` instead of their zeros (with one request
        at a time the request waits for them: the REQ state).  Measured on the
        pynq-fast + DEPTHWISE_TAPS 3 rtl (one 14x14 INP LOAD, latency 50, against no
        padding): ``y_pad_0`` 1, 2, 3 +0 cycles, 4 +10, ``x_pad_0`` 2 with ``y_pad_0`` 3
        +29 (13 later rows x 2, and 3 over L), the model exactly that (it charged +14,
        +28, +42, +56 and +76 before); latency 0: +15 per top row
        (tests/dse/test_depthwise_pairs.py).  Returns ``sel`` (the LOAD/STOREs with
        rows), ``is_load``, ``y`` (their rows), ``rows`` (each row's cycles,
        :meth:`_row_cycles`), ``read_beats`` and ``write_beats``."""
        from ..hw.isa import Opcode

        op = np.asarray(cols["opcode"])
        mt = np.asarray(cols["memory_type"])
        bus = cfg.BUS_WIDTH // 8
        ahead, prev_y = self._ahead_loads(cfg, cols)
        out = {"sel": np.zeros(0, np.int64), "read_beats": 0, "write_beats": 0,
               "ahead": ahead}
        sel = np.nonzero(((op == Opcode.LOAD) | (op == Opcode.STORE)) & (cols["x_size"] > 0))[0]
        if len(sel):
            is_load = op[sel] == Opcode.LOAD
            m = np.where(is_load, mt[sel], int(MemType.OUT))
            eb_of = np.zeros(max(int(t) for t in MemType) + 1, np.int64)
            for t in MemType:
                with contextlib.suppress(Exception):  # a type the config lacks: never DMA'd
                    eb_of[int(t)] = cfg.elem_bytes(t)
            eb = eb_of[np.clip(m, 0, len(eb_of) - 1)]
            y = np.asarray(cols["y_size"])[sel].astype(np.int64)
            x = np.asarray(cols["x_size"])[sel].astype(np.int64)
            stride = np.asarray(cols["x_stride"])[sel].astype(np.int64)
            base = np.asarray(cols["dram_base"])[sel].astype(np.int64)
            ins = np.repeat(np.arange(len(sel)), y)
            first = np.concatenate(([0], np.cumsum(y)[:-1]))
            r = np.arange(int(y.sum()), dtype=np.int64) - first[ins]
            start = (base[ins] + r * stride[ins]) * eb[ins]
            end = start + x[ins] * eb[ins]
            beats = -(-end // bus) - start // bus
            row_ov = np.where(is_load, self.row_overhead, self.row_overhead
                              if self.store_row_overhead is None else self.store_row_overhead)
            rows = self._row_cycles(cfg, cols, sel, is_load, ins, r, beats, x, row_ov,
                                    ahead[sel], prev_y[sel])
            c = np.bincount(ins, weights=rows, minlength=len(sel))
            b = np.bincount(ins, weights=beats, minlength=len(sel))
            xp = np.asarray(cols["x_pad_0"])[sel] + np.asarray(cols["x_pad_1"])[sel]
            yp = np.asarray(cols["y_pad_0"])[sel] + np.asarray(cols["y_pad_1"])[sel]
            floor[sel] = np.bincount(ins, weights=np.maximum(beats, x[ins]),
                                     minlength=len(sel))
            c = c + np.where(is_load, xp * y + yp * (x + xp)
                             + np.where(xp > 0, self.pad_row_overhead * y, 0), 0)
            if cfg.DMA_OUTSTANDING > 1:
                # the first row's request goes out before the top padding is written
                # (hw/core/load.py ``_row_requests``): that padding (a TOP cycle and its
                # zeros per row) and the row's left zeros cost only what exceeds the
                # row's DRAM latency, instead of the zeros charged above
                yp0 = np.asarray(cols["y_pad_0"])[sel]
                xp0 = np.asarray(cols["x_pad_0"])[sel]
                pre = yp0 * (x + xp + 1) + xp0
                c = c - np.where(is_load & (y > 0) & ~ahead[sel], yp0 * (x + xp) + xp0
                                 - np.maximum(0.0, pre - self.dram_latency), 0)
            # a LOAD taken ahead: the loader's cycles between the two LOADs' data instead
            # of an instruction's fixed cost
            c = c + np.where(ahead[sel], self.ahead_overhead - self.insn_overhead, 0.0)
            cost[sel] += c
            out.update(sel=sel, is_load=is_load, y=y, rows=rows,
                       read_beats=int(round(b[is_load].sum())),
                       write_beats=int(round(b[~is_load].sum())))
        return out

    def _ahead_loads(self, cfg: VTAConfig,
                     cols: Mapping[str, np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
        """The LOADs a ``LOAD_AHEAD`` core's load unit takes ahead (hw/core/load.py
        ``LoadUnit``): an INP/WGT LOAD with data (``x_size`` > 0) whose predecessor in the
        load module is one too, not both pushing a token.  A LOAD that pops is counted
        ahead too (its token is taken to be there in time: the double-buffered programs'
        tokens come from a compute step long done).  Returns
        ``(ahead, prev_y)`` per instruction: bool, and the predecessor's ``y_size`` (0
        where not ahead).  Without the option nothing is."""
        from ..hw.isa import Opcode

        op = np.asarray(cols["opcode"])
        n = len(op)
        ahead = np.zeros(n, bool)
        prev_y = np.zeros(n, np.int64)
        if not cfg.LOAD_AHEAD:
            return ahead, prev_y
        mt = np.asarray(cols["memory_type"])
        li = np.nonzero((op == Opcode.LOAD) & ((mt == MemType.INP) | (mt == MemType.WGT)))[0]
        if len(li) < 2:
            return ahead, prev_y
        moves = np.asarray(cols["x_size"])[li] > 0
        pushes = np.zeros(len(li), bool)
        for f, _ in TOKEN_PUSHES[0]:
            pushes |= np.asarray(cols[f])[li] != 0
        ok = moves[1:] & moves[:-1] & ~(pushes[1:] & pushes[:-1])
        k = li[1:][ok]
        ahead[k] = True
        prev_y[k] = np.asarray(cols["y_size"])[li[:-1][ok]]
        return ahead, prev_y

    def _row_cycles(self, cfg: VTAConfig, cols: Mapping[str, np.ndarray], sel: np.ndarray,
                    is_load: np.ndarray, ins: np.ndarray, r: np.ndarray, beats: np.ndarray,
                    x: np.ndarray, row_ov: np.ndarray, ahead: np.ndarray | None = None,
                    prev_y: np.ndarray | None = None) -> np.ndarray:
        """Cycles of each DMA row of ``program_cycles``' DMA section (float64; padding
        excluded, as there): the LOAD/STORE ``sel[k]`` of row ``i`` is ``ins[i]``, ``r[i]``
        the row's index in it, ``beats[i]`` its bus beats; ``x`` and ``row_ov`` per
        instruction.  With ``DMA_OUTSTANDING`` = 1: ``dram_latency + max(beats,
        elements) + row_ov`` each (the class docstring).

        With N = ``DMA_OUTSTANDING`` > 1, a LOAD's rows are requested up to N ahead of
        their data (hw/core/load.py ``TensorLoader._row_requests``), so only its first row
        waits the whole DRAM latency L: row 0 costs ``L + t`` and each later row
        ``max(t, (L + d + queued_loop_cycles) / N)``, where ``d = max(beats, elements)``
        and ``t = d + queued_row_overhead`` plus the row's pad elements (no
        ``pad_row_overhead``: the next row's request does not wait for this row's
        padding; ``program_cycles`` adds both per padded row afterwards, so they are
        taken off here, and a latency-bound row hides its padding).  A STORE waits for no
        write response between rows (hw/core/axi.py write side): each of its rows costs
        ``d`` + its row overhead, and the last B response's latency L is paid once, on
        row 0.  Rows of different instructions never overlap (the next LOAD starts after
        this one's last element).

        ``ahead``/``prev_y`` (per instruction, :meth:`_ahead_loads`; ``LOAD_AHEAD``
        cores): a LOAD taken ahead has its requests behind the LOAD before it, so its row
        0 is a later row too, with at most ``1 + prev_y`` rows in flight when the
        predecessor has fewer than N (the loader queues one LOAD): ``max(t, (L + d +
        queued_loop_cycles) / min(N, 1 + prev_y) - ahead_overhead)`` (the fixed cost runs
        in the latency's shadow)."""
        rows = np.maximum(beats, x[ins]) + self.dram_latency + row_ov[ins]
        L, N = self.dram_latency, cfg.DMA_OUTSTANDING
        store_rows = rows - L + np.where(r == 0, L, 0.0)
        if N == 1:
            return np.where(is_load[ins], rows, store_rows)
        d = np.maximum(beats, x[ins]).astype(np.float64)
        ld = is_load[ins]
        xp = (np.asarray(cols["x_pad_0"])[sel] + np.asarray(cols["x_pad_1"])[sel])[ins]
        t = d + self.queued_row_overhead + np.where(ld, xp, 0)
        later = np.maximum(t, (L + d + self.queued_loop_cycles) / N)
        first = L + t
        if ahead is not None and ahead.any():
            win = np.minimum(N, 1 + prev_y[ins]).astype(np.float64)
            first = np.where(ahead[ins], np.maximum(
                t, (L + d + self.queued_loop_cycles) / win - self.ahead_overhead), first)
        load_rows = (np.where(r == 0, first, later)
                     - np.where(ld & (xp > 0), xp + self.pad_row_overhead, 0.0))
        return np.where(ld, load_rows, store_rows)

    def _engine_plan(self, cfg: VTAConfig, cols: Mapping[str, np.ndarray],
                     uop_loads: Sequence[tuple[int, np.ndarray]] | None) -> dict:
        """What the schedule needs of a ``REQ_ENGINE`` program (hw/core/compute.py
        ``_req_engine``): ``eligible`` (bool per instruction: an ALU REQ or ALU reset of
        exactly one micro-op with work, which the engine runs), ``blocks`` (bool: an ALU,
        FINISH, ACC/ACC8 LOAD or instruction pushing to the store unit, which the pipeline
        does not take while the engine runs; one pushing to the load unit waits when the
        engine's instruction pushes there too)
        and ``holds`` (GEMM index -> ``(engine instruction, k, n)``: the GEMM's ``k``-th of
        ``n`` micro-ops, in loop order, is the first whose accumulator entry lies in that
        engine instruction's destination or tensor-source range; only GEMMs between the
        engine instruction and the next one that waits for the engine anyway).  Ranges need
        the micro-ops (``uop_loads``); without them no GEMM is held."""
        from ..hw.isa import AluOp, Opcode, decode_uops

        op = np.asarray(cols["opcode"])
        mt = np.asarray(cols["memory_type"])
        one = (np.asarray(cols["uop_end"]) - np.asarray(cols["uop_bgn"])) == 1
        work = (np.asarray(cols["iter_out"]) > 0) & (np.asarray(cols["iter_in"]) > 0)
        req = np.asarray(cols["alu_opcode"]) == AluOp.REQ
        eligible = (op == Opcode.ALU) & (req | (np.asarray(cols["reset"]) != 0)) & one & work
        blocks = (op == Opcode.ALU) | (op == Opcode.FINISH) | ((op == Opcode.LOAD) & (
            (mt == MemType.ACC) | (mt == MemType.ACC8))) | (np.asarray(cols["push_next"]) != 0)
        holds: dict[int, tuple[int, int, int]] = {}
        if uop_loads is not None and eligible.any():
            pp = np.asarray(cols["push_prev"]) != 0
            loads = sorted(uop_loads, key=lambda t: t[0])
            buf = np.zeros(cfg.UOP_DEPTH, np.uint32)
            li = 0

            def entries(i: int, name: str, fo: str, fi: str) -> np.ndarray:
                u = decode_uops(cfg, buf[int(cols["uop_bgn"][i]):int(cols["uop_end"][i])])
                oi = np.arange(int(cols["iter_out"][i]), dtype=np.int64)[:, None, None]
                oj = np.arange(int(cols["iter_in"][i]), dtype=np.int64)[None, :, None]
                return (u[name][None, None, :] + oi * int(cols[fo][i])
                        + oj * int(cols[fi][i])).ravel()

            rng = None     # (engine instruction, dst lo, hi, src lo, hi or None)
            for i in range(len(op)):
                while li < len(loads) and loads[li][0] < i:
                    j, words = loads[li]
                    base = int(cols["sram_base"][j])
                    buf[base:base + len(words)] = words[:max(0, cfg.UOP_DEPTH - base)]
                    li += 1
                if eligible[i]:
                    d = entries(i, "dst", "dst_factor_out", "dst_factor_in")
                    tensor = not (cols["use_imm"][i] or (cols["reset"][i] and not req[i]))
                    s_ = entries(i, "src", "src_factor_out", "src_factor_in") if tensor else None
                    rng = (i, int(d.min()), int(d.max()),
                           None if s_ is None else (int(s_.min()), int(s_.max())))
                    ep = pp[i]
                    continue
                if rng is None or op[i] in (Opcode.STORE,) or (
                        op[i] == Opcode.LOAD and mt[i] in (MemType.INP, MemType.WGT)):
                    continue
                if blocks[i] or (pp[i] and ep):
                    rng = None      # waits for the engine's end; so does all behind it
                    continue
                if op[i] == Opcode.GEMM and int(cols["uop_end"][i]) > int(cols["uop_bgn"][i]) \
                        and work[i]:
                    d = entries(i, "dst", "dst_factor_out", "dst_factor_in")
                    hit = (d >= rng[1]) & (d <= rng[2])
                    if rng[3] is not None:
                        hit |= (d >= rng[3][0]) & (d <= rng[3][1])
                    if hit.any():
                        holds[i] = (rng[0], int(np.argmax(hit)), int(d.size))
        return {"eligible": eligible, "blocks": blocks, "holds": holds}

    def _schedule(self, cols, module: np.ndarray, cost: np.ndarray,
                  rd: np.ndarray | None = None, rows: Mapping[int, np.ndarray] | None = None,
                  trace: list | None = None, fetch_beats: int = 2, queue_depth: int = 512,
                  engine: Mapping | None = None, lat_q: float = 0.0,
                  ahead: np.ndarray | None = None) -> float:
        """List schedule of the three modules through the four token queues (module order =
        program order; a pop takes the oldest pushed token), events committed in order of
        their start time: :class:`_ListSchedule` (its docstring has the rules).

        ``rd`` (per instruction: 1 = a DMA read of the compute module, UOP/ACC/ACC8; 2 = a
        DMA read of the load module, INP/WGT; 0 = none), ``rows`` (instruction -> end of
        each of its DMA rows, cycles from the first row's start, a float array): with
        :attr:`read_arbitration`, the one AXI read channel is a resource.  ``trace`` (a
        list) receives ``(instruction, start, end)`` per instruction (cycles; ``end`` as
        first committed; fetch batches as ``(-1 - batch, start, end)``).  ``fetch_beats``:
        bus beats of one instruction; ``queue_depth``: each module's command queue;
        ``engine``: :meth:`_engine_plan` (``REQ_ENGINE`` only); ``lat_q``
        (``DMA_OUTSTANDING`` > 1: the DRAM latency): a read holds the channel from its
        first beat, ``lat_q`` after its request.  Returns the last module's end, cycles
        (a deadlock: the sum of ``cost``; the functional simulator reports it).
        ``ahead`` (``LOAD_AHEAD``: :meth:`_ahead_loads`): a LOAD taken ahead holds the
        channel from its start (its requests went out before)."""
        return _ListSchedule(self, cols, module, cost, rd, rows, trace, fetch_beats,
                             queue_depth, engine, lat_q, ahead).run()


    def as_dict(self) -> dict:
        """The parameters as a dict (cache key, report)."""
        return asdict(self)


class _ListSchedule:
    """The list schedule of :meth:`CycleModel._schedule`.

    The three modules run their instructions in program order through the four token
    queues (a pop takes the oldest pushed token); events are committed in order of their
    start time.  With ``rd``, ``rows`` and :attr:`CycleModel.read_arbitration`, the one AXI
    read channel (hw/core/axi.py) is a resource: the fetch unit (``FETCH_BATCH``
    instructions of ``fetch_beats`` beats each per request, the next request when the
    previous one is in, hw/core/fetch.py), the compute module and the load module share
    it with that fixed priority, and a granted client keeps it to the end of its request
    (one DMA row).  A read that arrives while a lower-priority row is in flight waits for
    that row to end and the lower-priority instruction's later rows move behind it; one
    that arrives while a higher-priority read is in flight waits for all of that read's
    rows.  An instruction starts no earlier than it was dispatched: its fetch batch is in
    (the first batch is in at cycle ``dram_latency``: its request and beats are a
    per-launch constant in the fitted overheads, its DRAM latency is not) and its command
    queue (``queue_depth`` instructions) has room; the fetch reads a batch only when the
    batch two before it has been dispatched (a buffer of two batches).  ``engine``
    (``REQ_ENGINE`` only): the engine's instructions end (and push) ``cost`` after their
    start but free the compute module after ``engine_take``; the rules of the
    :class:`CycleModel` docstring hold the others.  ``lat_q`` (``DMA_OUTSTANDING`` > 1:
    the DRAM latency): a read holds the channel from its first beat, ``lat_q`` after its
    request (other requests queue meanwhile); the arbitration stays per row (the engine's
    is per burst).
    """

    def __init__(self, model: CycleModel, cols, module: np.ndarray, cost: np.ndarray,
                 rd, rows, trace, fetch_beats: int, queue_depth: int, engine, lat_q: float,
                 ahead=None):
        self.m, self.cost, self.rows, self.trace, self.lat_q = model, cost, rows, trace, lat_q
        self.ahead = ahead.tolist() if ahead is not None else None
        self.flags = {k: np.asarray(cols[k]).tolist() for k in ("pop_prev", "pop_next",
                                                                "push_prev", "push_next")}
        n = self.n = len(cost)
        self.arb = model.read_arbitration and rd is not None and rows is not None
        self.rdl = rd.tolist() if self.arb else [0] * n
        self.need_of = [tuple(q for f, q in TOKEN_POPS[int(module[i])] if self.flags[f][i])
                        for i in range(n)]
        self.order = [np.nonzero(module == k)[0].tolist() for k in range(3)]
        self.free = [0.0, 0.0, 0.0]
        self.end = [0.0] * n
        # read clients by priority: 0 fetch, 1 compute, 2 load; in flight: [instruction
        # (-1: a fetch batch), module, first row's start, absolute row end times, arrival]
        self.fly: list[list | None] = [None, None, None]
        # dispatch from the fetch buffer (two batches) into the command queues, in program
        # order: an instruction enters when its batch is in and its queue has room (the
        # instruction queue_depth places ahead of it in its module has started)
        self.room = [-1] * n
        for lst in self.order:
            for p in range(queue_depth, len(lst)):
                self.room[lst[p]] = lst[p - queue_depth]
        self.fetch_cost = (FETCH_BATCH * fetch_beats + model.fetch_overhead
                           + model.dram_latency)
        # the REQ engine: its instructions, what waits for it, the held GEMMs
        self.e_on = engine["eligible"].tolist() if engine is not None else None
        self.e_blk = engine["blocks"].tolist() if engine is not None else None
        self.e_hold = engine["holds"] if engine is not None else {}

    def acquire(self, c: int, t: float, busy: float) -> float:
        """Wait of client ``c``'s read arriving at ``t`` for the channel (a read another
        client holds then, or a higher-priority one that takes it first); moves the later
        rows of lower-priority reads in flight behind its ``busy`` cycles."""
        fly, end, free = self.fly, self.end, self.free
        ready = t
        if c == 0 and self.m.fetch_yields:
            for o in (1, 2):    # a read that waited since before this request goes first
                f = fly[o]
                if f is not None and f[2] >= t and f[4] < t:
                    ready = max(ready, float(f[3][0]))
        for _ in range(3):
            for o in range(3):
                f = fly[o]
                if o == c or f is None or f[3][-1] <= ready or f[2] > ready:
                    continue
                if o < c:
                    ready = float(f[3][-1])
                else:
                    ready = float(f[3][int(np.searchsorted(f[3], ready, side="right"))])
        for o in range(c + 1, 3):
            f = fly[o]
            if f is None or f[3][-1] <= ready:
                continue
            if f[2] >= ready:  # not started yet: all of it goes behind
                f[2] += busy
                f[3] += busy
            else:
                k = int(np.searchsorted(f[3], ready, side="right"))
                if k + 1 >= len(f[3]):
                    continue
                f[3][k + 1:] += busy
            end[f[0]] += busy
            free[f[1]] = max(free[f[1]], end[f[0]])
        return ready - t

    def run(self) -> float:  # noqa: C901 - the event loop, kept in one piece for speed
        """The schedule's length, cycles (see :meth:`CycleModel._schedule`)."""
        mdl, n, arb, order, flags = self.m, self.n, self.arb, self.order, self.flags
        need_of, room, free, end, fly = self.need_of, self.room, self.free, self.end, self.fly
        costl, rdl, rows, trace, lat_q = self.cost.tolist(), self.rdl, self.rows, self.trace, \
            self.lat_q
        e_on, e_blk, e_hold = self.e_on, self.e_blk, self.e_hold
        ahead_l = self.ahead
        acquire, fetch_cost = self.acquire, self.fetch_cost
        push_of = TOKEN_PUSHES
        ptr = [0, 0, 0]
        toks: list[deque] = [deque(), deque(), deque(), deque()]
        nb = -(-n // FETCH_BATCH) if arb else 0
        fetched = [0.0] * nb
        fb = 0
        fetch_next = 0.0
        started = [-1.0] * n
        disp = [0.0] * n
        dp = 0
        eng_end, eng_pp = 0.0, 0

        def dispatch() -> int:
            d = dp
            while d < n and d // FETCH_BATCH < fb:
                r = room[d]
                if r >= 0 and started[r] < 0:
                    break
                disp[d] = max(disp[d - 1] if d else 0.0, fetched[d // FETCH_BATCH],
                              started[r] if r >= 0 else 0.0)
                d += 1
            return d

        while True:
            best, bm = None, -1
            if fb < nb and (fb < 2 or dp >= (fb - 1) * FETCH_BATCH):
                best, bm = fetch_next, 3
                if fb >= 2:
                    best = max(best, disp[(fb - 1) * FETCH_BATCH - 1])
            for m in (1, 0, 2):
                if ptr[m] == len(order[m]):
                    continue
                i = order[m][ptr[m]]
                if arb and i >= dp:
                    continue
                need = need_of[i]
                if need and any(not toks[q] for q in need):
                    continue
                start = free[m]
                if arb:
                    start = max(start, disp[i])
                for q in need:
                    start = max(start, end[toks[q][0]])
                if e_on is not None and m == 1 and (e_blk[i] or (flags["push_prev"][i]
                                                                 and eng_pp)):
                    start = max(start, eng_end)
                if best is None or start < best:
                    best, bm = start, m
            if bm < 0:
                if all(ptr[m] == len(order[m]) for m in range(3)):
                    return max(max(free), eng_end)
                return float(self.cost.sum())  # a deadlock: the functional simulator reports it
            start = best
            if bm == 3 and fb == 0:  # the first batch: in after the DRAM latency (above)
                fetched[0] = mdl.dram_latency
                fb = 1
                dp = dispatch()
                continue
            if bm == 3:
                wait = acquire(0, start + lat_q, fetch_cost - lat_q)
                fetch_next = start + wait + fetch_cost
                fly[0] = [-1, -1, start + wait + lat_q, np.array([fetch_next]), start]
                fetched[fb] = fetch_next
                if trace is not None:
                    trace.append((-1 - fb, start, fetched[fb]))
                fb += 1
                dp = dispatch()
                continue
            m = bm
            i = order[m][ptr[m]]
            for q in need_of[i]:
                toks[q].popleft()
            c = costl[i]
            if rdl[i]:
                cl = 1 if rdl[i] == 1 else 2
                rel = rows[i]
                lead, lq = mdl.dma_lead, lat_q
                if ahead_l is not None and ahead_l[i]:
                    lead, lq = 0.0, 0.0     # requested behind the LOAD before it
                wait = acquire(cl, start + lead + lq, float(rel[-1]) - lq)
                c += wait
                fly[cl] = [i, m, start + lead + wait + lq, start + lead + wait + rel,
                           start + lead]
            end[i] = start + c
            free[m] = end[i]
            if e_on is not None:
                if e_on[i]:
                    free[m] = start + mdl.engine_take
                    eng_end, eng_pp = end[i], flags["push_prev"][i]
                elif i in e_hold:
                    # its k-th micro-op waits in stage B for the engine's end (then B, C, D)
                    e, k, nu = e_hold[i]
                    end[i] = max(end[i], end[e] + ENGINE_HOLD_DRAIN
                                 + (nu - k) * mdl.gemm_uop_cycles)
                    free[m] = end[i]
            started[i] = start
            if arb:
                dp = dispatch()
            if trace is not None:
                trace.append((i, start, end[i]))
            for f, q in push_of[m]:
                if flags[f][i]:
                    toks[q].append(i)
            ptr[m] += 1


def uop_loads_of(dev, cfg: VTAConfig, cols: Mapping[str, np.ndarray]) -> list:
    """``[(instruction index, uint32 micro-op words)]`` of every UOP LOAD of a decoded
    program, read from the device's memory before the run (what
    :meth:`CycleModel.program_cycles` takes as ``uop_loads``)."""
    from ..hw.isa import Opcode

    eb = cfg.elem_bytes(MemType.UOP)
    out = []
    for i in np.nonzero((cols["opcode"] == Opcode.LOAD) & (cols["memory_type"] == MemType.UOP)
                        & (cols["x_size"] > 0))[0]:
        raw = np.asarray(dev._read_mem(int(cols["dram_base"][i]) * eb,
                                       int(cols["x_size"][i]) * eb), np.uint8)
        out.append((int(i), raw.view(np.uint32).copy()))
    return out


def _recording_device(base_cls, model: CycleModel):
    """A subclass of a Device backend that decodes each launched program, applies the cycle
    model and keeps the backend's RunResult."""
    from ..hw.isa import INSN_BYTES, decode_program

    class _Recording(base_cls):  # type: ignore[misc, valid-type]
        def __init__(self, *a, **k):
            super().__init__(*a, **k)
            self.records: list[dict] = []

        def run(self, insn_addr, insn_count, **kw):
            prog = self._read_mem(insn_addr, insn_count * INSN_BYTES)
            cols = decode_program(self.config, prog)
            est = model.program_cycles(self.config, cols,
                                       uop_loads=uop_loads_of(self, self.config, cols))
            res = super().run(insn_addr, insn_count, **kw)
            self.records.append({"model": est, "cycles": int(res.cycles or 0),
                                 "stats": dict(res.stats)})
            return res

    _Recording.__name__ = f"Recording{base_cls.__name__}"
    return _Recording


_COUNTING_FSIM: list = []


def _counting_fsim():
    """``CountingFsimDevice``: the fsim backend whose :meth:`run` is fsim's data-free
    machine (``runtime.verify.verify_program``: the same decoder, static and computed-index
    checks, command/token-queue scheduler, deadlock detection and counters as
    ``fsim.simulate``, with the same fault messages) instead of the data path.  Nothing the
    cycle model or the performance record reads depends on data — the counters are
    data-independent and the micro-ops the builder wrote are in device memory — so the
    records equal a data-path run's; the outputs in device memory are not computed (the
    executor's later CPU steps see zeros)."""
    if not _COUNTING_FSIM:
        from ..runtime.device import RunResult
        from ..runtime.fsim import FsimDevice
        from ..runtime.verify import verify_program

        class CountingFsimDevice(FsimDevice):
            def run(self, insn_addr, insn_count, *, regions=None, timeout_cycles=None):
                regs = self.buffers() if regions is None else list(regions)
                self._ensure(max((r.end for r in regs), default=0))
                rep = verify_program(self.config, self.mem, insn_addr, insn_count, regs,
                                     max_steps=timeout_cycles)
                return RunResult(cycles=0, stats=dict(rep.stats))

        _COUNTING_FSIM.append(CountingFsimDevice)
    return _COUNTING_FSIM[0]


def run_closing(ex, dev, x) -> None:
    """Run ``x`` once through the executor ``ex`` on ``dev``, then close both (the device's
    recorded programs stay readable)."""
    try:
        ex.run(x)
    finally:
        ex.close()
        dev.close()


#: ``VTAConfig`` fields a compiled model's programs depend on only through the lowering
#: (the tiles and placement it chose, so through the traces :func:`program_memo_key`
#: hashes) and through range checks (:func:`scratchpad_extents_fit`): the scratchpad and
#: micro-op buffer sizes.
TRACE_BOUND_FIELDS = ("LOG_UOP_BUFF_SIZE", "LOG_INP_BUFF_SIZE", "LOG_WGT_BUFF_SIZE",
                      "LOG_ACC_BUFF_SIZE")


#: Per process (a Dask worker keeps its own): :func:`program_memo_key` -> the
#: :meth:`ModelPerformance.run_workload` dict of the first config that ran those programs.
_PROGRAM_MEMO: dict[str, dict] = {}


_PROGRAM_MEMO_MAX = 4096


def _trace_part(t) -> tuple | None:
    if t is None:
        return None
    return (t.uid, t.ops, [(k.mode, k.reset, k.alu_op, k.use_imm, k.imm, k.loops)
                           + (("depthwise",) if getattr(k, "depthwise", False) else ())
                           for k in t.kernels], t.block_bytes, t.stats)


def program_memo_key(cfg: VTAConfig, cm, seed: int, model: CycleModel) -> str:
    """Key of everything a functional-simulator run of the compiled model ``cm`` and its
    cycle model depend on, except the buffer sizes of :data:`TRACE_BOUND_FIELDS`: the
    config without those and without ``PROGRAM_NEUTRAL_FIELDS`` (DSP_PACKING,
    LUT_MULTIPLIERS, CLOCK_MHZ, PART), the cycle model's parameters, the seed, and the
    compiled model itself (steps with their targets, slots, layouts and traces — every
    LOAD, STORE, token move and micro-op kernel with its index arrays, row-band variants
    too —, tensor types, constant shapes and dtypes; not the constants' values, which no
    instruction, counter or cycle depends on, nor ``meta``).  Two configs whose lowerings
    chose the same tiles and placement (e.g. a larger accumulator the tiling does not use)
    get the same key; under :func:`scratchpad_extents_fit` their programs are instruction
    for instruction the same, and so are the simulator's counters and the cycle model's
    figures.  A 40-character hex string (SHA-1); equal models built differently (another
    dict order) may get different keys, never the reverse."""
    import hashlib
    import pickle

    from .evaluate import PROGRAM_NEUTRAL_FIELDS

    d = {k: v for k, v in asdict(cfg).items()
         if k not in PROGRAM_NEUTRAL_FIELDS and k not in TRACE_BOUND_FIELDS}
    steps = [(s.name, s.op, s.target, s.inputs, s.outputs, s.attrs, s.consts, s.slots,
              {k: v.to_json() for k, v in s.layouts.items()}, _trace_part(s.trace),
              [(b.rows, _trace_part(b.trace), _trace_part(b.tail)) for b in s.bands])
             for s in cm.steps]
    head = (sorted(d.items()), seed, sorted(model.as_dict().items()), cm.name, cm.inputs,
            cm.outputs, cm.types, steps,
            sorted((k, v.shape, str(v.dtype)) for k, v in cm.constants.items()))
    h = hashlib.sha1(pickle.dumps(head, protocol=4))
    for s in cm.steps:
        for t in [s.trace] + [t for b in s.bands for t in (b.trace, b.tail)]:
            for k in (t.kernels if t is not None else ()):
                for a in (k.dst, k.src, k.wgt):
                    a = np.ascontiguousarray(a)
                    h.update(f"{a.dtype}{a.shape}".encode())
                    h.update(a.tobytes())
    return h.hexdigest()


def _trace_extents(trace, taps: int = 0) -> dict[MemType, int]:
    """One past the largest index each scratchpad of ``trace`` touches (LOADs with their
    padding, STOREs in the OUT view, every micro-op of every loop iteration as the
    builder's kernel check counts them; a depthwise GEMM's INP index is its last tap's,
    ``src + taps - 1``, ``taps`` = the config's ``DEPTHWISE_TAPS``) and, under
    ``MemType.UOP``, its kernels' micro-ops summed (the most micro-op buffer one launch of
    it can use); raises ValueError on a negative index."""
    top = {MemType.UOP: 0, MemType.INP: 0, MemType.WGT: 0, MemType.ACC: 0, MemType.OUT: 0}
    for o in trace.ops:
        if o[0] == "L":
            _, _, _, mem, sb, y, x, _, (y0, y1, x0, x1) = o
            mem = MemType.ACC if MemType(mem) == MemType.ACC8 else MemType(mem)
            top[mem] = max(top[mem], sb + (y0 + y + y1) * (x0 + x + x1))
        elif o[0] == "S":
            top[MemType.OUT] = max(top[MemType.OUT], o[1] + o[4] * o[5])
    for k in trace.kernels:
        top[MemType.UOP] += int(k.dst.size)
        if not k.dst.size:
            continue
        # as the builder's kernel check (runtime/kernels.py): GEMM dst/src/wgt into
        # ACC/INP/WGT, ALU dst/src into ACC, whatever reset or use_imm say
        mems = ((0, k.dst, MemType.ACC), (1, k.src, MemType.INP), (2, k.wgt, MemType.WGT)) \
            if k.mode == "gemm" else ((0, k.dst, MemType.ACC), (1, k.src, MemType.ACC))
        for j, arr, mem in mems:
            lo = int(arr.min()) + sum((lp[0] - 1) * min(lp[1 + j], 0) for lp in k.loops)
            hi = int(arr.max()) + sum((lp[0] - 1) * max(lp[1 + j], 0) for lp in k.loops)
            if lo < 0:
                raise ValueError("negative scratchpad index")
            if mem == MemType.INP and getattr(k, "depthwise", False):
                hi += max(0, taps - 1)
            top[mem] = max(top[mem], hi + 1)
    return top


def scratchpad_extents_fit(cm, cfg: VTAConfig) -> bool:
    """True when every trace of the compiled model (row-band variants included) fits
    ``cfg``'s buffers: every INP, WGT, ACC and OUT index it touches is within the depth
    (the builder and the simulator fault exactly when one is not), and all micro-ops of
    its kernels fit the micro-op buffer at once (so the builder splits no kernel into
    chunks and never wraps its micro-op placement: the program does not depend on
    ``UOP_DEPTH``).  The condition under which a :func:`program_memo_key` hit stands for
    a run."""
    depth = {m: cfg.depth(m) for m in (MemType.INP, MemType.WGT, MemType.ACC, MemType.OUT)}
    depth[MemType.UOP] = cfg.UOP_DEPTH
    for s in cm.steps:
        traces = ([s.trace] if s.trace is not None else []) + [
            t for b in s.bands for t in (b.trace, b.tail) if t is not None]
        for t in traces:
            try:
                top = _trace_extents(t, cfg.DEPTHWISE_TAPS)
            except ValueError:
                return False
            if any(top[m] > depth[m] for m in top):
                return False
    return True


class ModelPerformance:
    """Compile every workload for the config, run it on fsim (batch 1), and estimate cycles
    with :class:`CycleModel`.

    Per workload: ``cycles`` (estimate), ``cycles_lower``, ``cycles_upper``, fsim counters
    summed over launches (``gemm_uops``, ``alu_uops``, ``insns``, ``launches``,
    ``dram_read_bytes``, ``dram_write_bytes``, per-memory load bytes), ``macs`` of the
    layers (per image) and ``cpu_compute_ops`` (conv/dense nodes the partitioner left on
    the CPU: their time is *not* counted, so such a workload is marked incomplete).  Other
    integer steps on the CPU (an int16 core's max-pools and adds: ACC8 loads int8 only) are
    listed in ``cpu_integer_ops`` (only when there are any); their time is not counted
    either, but the workload stays complete (no MACs).
    """

    name = "model"
    backend = "fsim"
    #: Relative error of its latency (see :data:`MODEL_ERROR_BAND`).
    error_band = MODEL_ERROR_BAND
    #: Points that differ only in :data:`PROGRAM_NEUTRAL_FIELDS` share one evaluation.
    shares_programs = True

    def __init__(self, cycle_model: CycleModel | None = None, seed: int = 0,
                 fuse: bool = False):
        self.cycle_model = cycle_model or CycleModel()
        self.seed = seed
        #: run the workloads with ``Executor(fuse=True)``: each run of consecutive VTA
        #: steps is one program, which the cycle model costs as a whole (the next step's
        #: fetch and first loads overlapping this one's tail, one FINISH)
        self.fuse = bool(fuse)

    @property
    def key(self) -> dict:
        """The cache key part of this evaluator (backend, cycle-model parameters, seed;
        ``fuse`` only when on, so the keys of unfused evaluations stay as they were)."""
        k = {"performance": self.name, "cycle_model": self.cycle_model.as_dict(),
             "seed": self.seed}
        if self.fuse:
            k["fuse"] = True
        return k

    def _device(self, cfg: VTAConfig):
        return _recording_device(_counting_fsim(), self.cycle_model)(cfg)

    def run_workload(self, cfg: VTAConfig, wl: DseWorkload) -> dict:
        """Compile ``wl`` for ``cfg``, run it on the backend and sum over launches:
        ``cycles``/``cycles_lower``/``cycles_upper`` (cycle model, cycles), ``macs``,
        micro-op and instruction counts, DRAM bytes per memory type, the GEMM layers left
        on the CPU, and (rtl) ``cycles_measured``.

        Raises:
            whatever compilation or the run raises (:meth:`evaluate` records it).
        """
        from ..runtime.executor import Executor

        cm, x = compile_workload(cfg, wl, self.seed)
        memo = None
        # the same programs as a config run before (only when they fit this config's
        # buffers, and were memoised only where they fitted that one's): its record
        if self.backend == "fsim" and scratchpad_extents_fit(cm, cfg):
            memo = program_memo_key(cfg, cm, self.seed, self.cycle_model) + (
                ":fused" if self.fuse else "")
            hit = _PROGRAM_MEMO.get(memo)
            if hit is not None:
                return copy.deepcopy(hit)
        dev = self._device(cfg)
        run_closing(Executor(cm, dev, fuse=self.fuse), dev, x)
        recs = dev.records
        cpu_ops = [s.name for s in cm.steps if s.target == "cpu"
                   and s.op in ("qconv2d", "qdense")]
        tot = lambda k: int(sum(int(r["stats"].get(k, 0)) for r in recs))  # noqa: E731
        out = {
            "cycles": float(sum(r["model"]["cycles"] for r in recs)),
            "cycles_lower": float(sum(r["model"]["lower"] for r in recs)),
            "cycles_upper": float(sum(r["model"]["upper"] for r in recs)),
            "macs": int(sum(L["macs"] for L in workload_layers(wl))),
            "gemm_uops": tot("gemm_counter"), "alu_uops": tot("alu_counter"),
            "insns": tot("insn_count"), "launches": len(recs),
            "dram_read_bytes": tot("dram_read_nbytes"),
            "dram_write_bytes": tot("dram_write_nbytes"),
            "inp_load_bytes": tot("inp_load_nbytes"), "wgt_load_bytes": tot("wgt_load_nbytes"),
            "acc_load_bytes": tot("acc_load_nbytes"), "uop_load_bytes": tot("uop_load_nbytes"),
            "out_store_bytes": tot("out_store_nbytes"),
            "cpu_compute_ops": cpu_ops,
        }
        cpu_int = [s.name for s in cm.steps if s.target == "cpu" and s.op.startswith("q")
                   and s.op not in ("quantize", "qconv2d", "qdense")]
        if cpu_int:
            out["cpu_integer_ops"] = cpu_int
        if self.backend == "rtl":
            out["cycles_measured"] = int(sum(r["cycles"] for r in recs))
        if memo is not None:
            if len(_PROGRAM_MEMO) >= _PROGRAM_MEMO_MAX:
                _PROGRAM_MEMO.pop(next(iter(_PROGRAM_MEMO)))
            _PROGRAM_MEMO[memo] = copy.deepcopy(out)
        return out

    def workload_record(self, cfg: VTAConfig, wl: DseWorkload) -> dict:
        """One performance evaluation, the unit that runs on a Dask worker and that the
        cache stores: ``{"source": evaluator name, "workload": run_workload's dict or
        {"error": "<Type>: <first line>"}, "notes": [...], "by": fingerprint "0x…" of the
        config that ran it}`` (a failure is recorded, never raised)."""
        try:
            w = self.run_workload(cfg, wl)
        except Exception as e:  # noqa: BLE001 - recorded per workload, never a crash
            msg = str(e).strip().splitlines()[0] if str(e).strip() else ""
            w = {"error": f"{type(e).__name__}: {msg}"}
        return {"source": self.name, "workload": w, "notes": [], "by": _fp(cfg)}

    def evaluate(self, cfg: VTAConfig, workloads: Sequence[DseWorkload]) -> Result:
        """A :class:`Result` with ``workloads[name]`` = :meth:`run_workload`'s dict, or
        ``{"error": "<Type>: <first line>"}`` for a workload that failed (never raised)."""
        r = Result(_fp(cfg), cfg.to_dict(), performance_source=self.name)
        for wl in workloads:
            rec = self.workload_record(cfg, wl)
            r.workloads[wl.name] = rec["workload"]
            r.performance_source = rec["source"]
            r.notes += [n for n in rec["notes"] if n not in r.notes]
        return r


class RtlPerformance(ModelPerformance):
    """Like :class:`ModelPerformance` but on the Verilator backend: ``cycles_measured`` is
    the core's CYCLES register summed over launches (zero-latency DRAM model).  Configs
    with more than ``max_macs`` multipliers fall back to the model (a note says so): a
    Verilator build of a large core takes minutes."""

    name = "rtl"
    backend = "rtl"
    error_band = 0.0  # measured; a point that fell back to the model carries the model's
    shares_programs = False

    def __init__(self, cycle_model: CycleModel | None = None, seed: int = 0,
                 max_macs: int | None = 64, fuse: bool = False):
        super().__init__(cycle_model, seed, fuse)
        self.max_macs = max_macs

    @property
    def key(self) -> dict:
        """The cache key part of this evaluator (adds the MAC limit)."""
        return {**super().key, "max_macs": self.max_macs}

    def _device(self, cfg: VTAConfig):
        from ..runtime.rtl.device import RtlDevice

        return _recording_device(RtlDevice, self.cycle_model)(cfg, progress=False)

    def workload_record(self, cfg: VTAConfig, wl: DseWorkload) -> dict:
        """As :meth:`ModelPerformance.workload_record` on Verilator; above ``max_macs``
        (``None``: no cap) the cycle model's record instead, with a note."""
        if self.max_macs is not None and cfg.macs_per_cycle > self.max_macs:
            rec = ModelPerformance(self.cycle_model, self.seed, self.fuse).workload_record(cfg, wl)
            rec["notes"].append(f"rtl skipped ({cfg.macs_per_cycle} MACs > {self.max_macs}): "
                                f"cycle-model estimate")
            return rec
        return super().workload_record(cfg, wl)


# =============================================================================== BR-29
class AccSafety:
    """Accumulator overflow check (BR-29).

    A GEMM reduction of length ``K`` (input channels per group × kernel area, or input
    features) of ``INP_WIDTH``-bit by ``WGT_WIDTH``-bit signed products reaches at worst
    ``K × 2^(INP_WIDTH−1) × 2^(WGT_WIDTH−1)`` in magnitude (all operands at the negative
    extreme), which needs ``bits_needed = ceil(log2(K × 2^(INP+WGT−2) + 1)) + 1`` signed
    bits.  A workload is unsafe when ``bits_needed > ACC_WIDTH``: the accumulator wraps
    (DESIGN.md semantics) and the result is silently wrong.  The bias added into the
    accumulator and the requantization shift are not part of the bound.

    Wider operands (``INP_WIDTH`` or ``WGT_WIDTH`` 16) with a 32-bit accumulator: the
    data-independent bound above fails for any ``K >= 2``, but the compiler does not rely
    on it there: the quantizer coarsens each layer's weight grid until the exact worst case
    for its constant weights, ``max_o sum_k |w[o,k]| * 2**(INP_WIDTH-1) + max|bias|``,
    fits int32, and the partitioner re-checks it (docs/compiler.md "Widths").  Such a
    workload is ``safe`` with ``"proof": "weights"``; the int8 rule is unchanged
    (``"proof": "widths"``).
    """

    @staticmethod
    def bits_needed(k: int, inp_width: int, wgt_width: int) -> int:
        """Signed bits to hold a reduction of ``k`` worst-case products (formula above)."""
        worst = k * (1 << (inp_width - 1)) * (1 << (wgt_width - 1))
        return math.ceil(math.log2(worst + 1)) + 1

    def evaluate(self, cfg: VTAConfig, workloads: Sequence[DseWorkload]) -> dict:
        """``{"acc_width", "safe", "unsafe_workloads", "workloads": {name: {"max_reduction",
        "bits_needed", "safe"}}}`` for ``cfg``."""
        per = {}
        for wl in workloads:
            layers = workload_layers(wl)
            kmax = max((L["k"] for L in layers), default=0)
            need = self.bits_needed(kmax, cfg.INP_WIDTH, cfg.WGT_WIDTH) if kmax else 0
            per[wl.name] = {"max_reduction": kmax, "bits_needed": need,
                            "safe": need <= cfg.ACC_WIDTH}
            if need > cfg.ACC_WIDTH and cfg.ACC_WIDTH == 32 and \
                    (cfg.INP_WIDTH, cfg.WGT_WIDTH) != (8, 8):
                per[wl.name].update(safe=True, proof="weights")
        unsafe = [n for n, v in per.items() if not v["safe"]]
        return {"acc_width": cfg.ACC_WIDTH, "safe": not unsafe, "unsafe_workloads": unsafe,
                "workloads": per}


def perf_record(perf_eval: Any, cfg: VTAConfig, wl: DseWorkload) -> dict:
    """One performance evaluation as the cache stores it (a Dask task; see
    :meth:`ModelPerformance.workload_record`)."""
    return perf_eval.workload_record(cfg, wl)


def perf_records(perf_eval: Any, cfg: VTAConfig, wls: Sequence[DseWorkload]) -> list[dict]:
    """:func:`perf_record` of each workload of ``wls`` for one config, in order (one Dask
    task per point instead of one per workload)."""
    return [perf_record(perf_eval, cfg, wl) for wl in wls]


def perf_records_of(perf_eval: Any, jobs: Sequence[tuple[VTAConfig, Sequence[DseWorkload]]]
                    ) -> list[list[dict]]:
    """:func:`perf_records` of each ``(config, workloads)`` of ``jobs``, in order (one Dask
    task for several configs of a program family: the worker's program memo shares what
    their lowerings have in common)."""
    return [perf_records(perf_eval, cfg, wls) for cfg, wls in jobs]
