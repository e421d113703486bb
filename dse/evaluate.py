"""Evaluators of one design point: resources, performance, accumulator safety.

Every evaluator has ``evaluate(cfg, workloads) -> Result`` and a ``key`` (a dict of its
settings, part of the cache key).  :class:`DesignEvaluator` combines a resource evaluator,
a performance evaluator and :class:`AccSafety`; :func:`judge` then applies the part's
capacity and an optional timing result (BR-31) to decide feasibility.

Resources (docs/dse.md "Resource model"):

- :class:`AnalyticResources` (default): BRAM from the scratchpad and command-queue
  geometry with the RAMB18/RAMB36 aspect-ratio rule of :func:`bram36_for_memory`
  (derived from hardware-notes.md "Scratchpads"; reproduces the measured Yosys figures
  exactly for pynq, 114.5, and tiny, 12.5); DSP = ceil((MACs − LUT_MULTIPLIERS) /
  packing); LUT and FF from a linear model in MACs calibrated on the two measured Yosys
  points (a *calibrated estimate*, two points, two coefficients).
- :class:`YosysResources`: real Yosys ``synth_xilinx`` counts via ``hw/estimate.py`` for
  configs up to ``max_macs`` multipliers (minutes each; larger ones fall back to the
  analytic model and say so).

Performance:

- :class:`ModelPerformance` (default): compiles each workload with ``compile_model`` for
  the config, runs it on the functional simulator, decodes every launched program and
  turns it into cycles with :class:`CycleModel` (an *estimate*; lower and upper bounds).
- :class:`RtlPerformance`: the same, on the cycle-accurate Verilator backend (measured
  cycles, zero-latency DRAM model) for small configs; the model figures are kept next to
  the measured ones.

Throughput is reported at ``cfg.CLOCK_MHZ``, labelled "at target clock, timing not
verified" unless a timing result is supplied; a point with negative slack (or fmax below
the clock) is infeasible and gets no throughput (BR-31).
"""

from __future__ import annotations

import copy
import dataclasses
import hashlib
import json
import math
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any, Mapping, Sequence

import numpy as np

from ..hw.config import MemType, VTAConfig
from ..hw.estimate import PARTS, EstimateError, part_info

__all__ = [
    "DSEError", "Result", "DseWorkload", "parse_workloads", "CycleModel", "bram36_for_memory",
    "memory_map", "AnalyticResources", "YosysResources", "ModelPerformance", "RtlPerformance",
    "AccSafety", "DesignEvaluator", "judge", "LUT_FF_CALIBRATION", "MODEL_VERSION",
    "UNVERIFIED_LABEL", "PROGRAM_NEUTRAL_FIELDS", "program_key", "MODEL_ERROR_BAND",
    "compile_workload", "resource_record", "perf_record", "perf_records", "resources_fit",
    "uop_loads_of",
]

#: Bump when a model changes: cached results of another version are not reused.
MODEL_VERSION = 2

UNVERIFIED_LABEL = "at target clock, timing not verified"

#: VTAConfig fields that change no instruction the compiler emits and nothing the
#: functional simulator does (the compiler and runtime never read them), hence no cycle of
#: the cycle model: points that differ only in these share one performance evaluation
#: (latency still scales with each point's own CLOCK_MHZ).  Not applied to ``--perf rtl``:
#: the RTL's pipeline may depend on packing or LUT multipliers.
PROGRAM_NEUTRAL_FIELDS = ("DSP_PACKING", "LUT_MULTIPLIERS", "CLOCK_MHZ", "PART")

#: The cycle model's stated error against the RTL: the recorded pairs of tests/dse/data
#: (ResNet-18 C2-C11 at size 14 and the digits CNN on several cores) are within 2.42 %
#: per layer after the fit (0.50 % mean over 82, 8 configs); latencies within this fraction
#: of each other are ties for "best latency".
MODEL_ERROR_BAND = 0.025


def program_key(cfg: VTAConfig) -> str:
    """Key of what the compiled programs depend on: the config without
    :data:`PROGRAM_NEUTRAL_FIELDS`."""
    d = {k: v for k, v in dataclasses.asdict(cfg).items() if k not in PROGRAM_NEUTRAL_FIELDS}
    return json.dumps(d, sort_keys=True)


class DSEError(ValueError):
    """Bad DSE input (workload spec, part, timing file, option); one line naming the cause."""


# =============================================================================== workloads
@dataclass(frozen=True)
class DseWorkload:
    """A workload to evaluate: a name, an ONNX model builder and its inputs.

    ``kind`` is ``"conv"`` (a zoo layer, ``layer`` holds the possibly reduced
    :class:`~vtaforge.compiler.zoo.Workload`) or ``"digits"`` (the bundled digits CNN).
    ``full_macs`` is the unreduced layer's MACs (for reference only).
    """

    name: str
    kind: str
    layer: Any = None
    full_macs: int = 0

    def model_and_inputs(self, seed: int = 0):
        """``(onnx ModelProto, calibration float32 array, run input float32 array (batch 1))``."""
        if self.kind == "digits":
            import onnx

            from ..compiler.models import DIGITS_ONNX, load_digits_split

            x_tr, _, x_te, _ = load_digits_split()
            return onnx.load(str(DIGITS_ONNX)), x_tr[:64], x_te[:1]
        from ..compiler.zoo import workload_model

        wl = self.layer
        rng = np.random.default_rng(seed)
        x = rng.normal(0, 1, (4, wl.in_channels, wl.height, wl.width)).astype(np.float32)
        return workload_model(wl, seed=seed), x, x[:1]

    def describe(self) -> dict:
        """JSON description for the report: name, kind and (for a layer) its shape."""
        d: dict[str, Any] = {"name": self.name, "kind": self.kind}
        if self.layer is not None:
            wl = self.layer
            d.update(height=wl.height, width=wl.width, in_channels=wl.in_channels,
                     out_channels=wl.out_channels, groups=wl.groups, kernel=wl.kernel_h,
                     stride=wl.stride_h, pad=wl.pad_h, macs=wl.macs, full_macs=self.full_macs)
        return d


def _onnx_layers(model) -> list[dict]:
    """Per Conv/Gemm/MatMul node of an ONNX model: ``name``, reduction length ``k``
    (input channels per group × kernel area, or input features) and ``macs`` per image."""
    import onnx
    from onnx import numpy_helper

    m = onnx.shape_inference.infer_shapes(model)
    inits = {i.name: numpy_helper.to_array(i).shape for i in m.graph.initializer}
    shapes = {}
    for vi in list(m.graph.value_info) + list(m.graph.output) + list(m.graph.input):
        dims = [d.dim_value if d.HasField("dim_value") else 1 for d in vi.type.tensor_type.shape.dim]
        shapes[vi.name] = dims
    out = []
    for n in m.graph.node:
        if n.op_type == "Conv" and n.input[1] in inits:
            ws = inits[n.input[1]]
            k = int(np.prod(ws[1:]))
            o = shapes.get(n.output[0])
            macs = int(np.prod(o[1:])) * k if o else 0
            out.append({"name": n.name or n.output[0], "k": k, "macs": macs})
        elif n.op_type in ("Gemm", "MatMul") and len(n.input) > 1 and n.input[1] in inits:
            ws = inits[n.input[1]]
            trans_b = any(a.name == "transB" and a.i for a in n.attribute)
            k = int(ws[1] if trans_b else ws[0])
            nout = int(ws[0] if trans_b else ws[1])
            out.append({"name": n.name or n.output[0], "k": k, "macs": k * nout})
    return out


_LAYER_CACHE: dict[str, list[dict]] = {}


def workload_layers(wl: DseWorkload) -> list[dict]:
    """Cached :func:`_onnx_layers` of a workload (``k`` and ``macs`` per layer)."""
    key = json.dumps(wl.describe(), sort_keys=True)
    if key not in _LAYER_CACHE:
        if wl.kind == "conv":
            L = wl.layer
            _LAYER_CACHE[key] = [{"name": L.name,
                                  "k": L.in_channels // L.groups * L.kernel_h * L.kernel_w,
                                  "macs": L.macs}]
        else:
            _LAYER_CACHE[key] = _onnx_layers(wl.model_and_inputs()[0])
    return _LAYER_CACHE[key]


def _reduce(layer, size: int | None):
    if size is None or (layer.height <= size and layer.width <= size):
        return layer
    return replace(layer, height=min(layer.height, size), width=min(layer.width, size))


def parse_workloads(spec: str, size: int | None = 14) -> list[DseWorkload]:
    """Parse a workload list such as ``resnet18-c2,c5``, ``resnet18`` (C2–C11),
    ``resnet18-c2..c11``, ``mobilenet-d1,d3``, ``mobilenet`` (D1–D9), ``digits``.

    A bare layer name (``c5``, ``d3``) continues the previous family.  ``size`` caps the
    layers' height and width (reduced spatial size; ``None`` keeps the full layer):
    per-pixel work is unchanged, so cycles scale roughly with the pixel count.

    Raises:
        DSEError: an unknown family or layer name, or an empty list.
    """
    from ..compiler.zoo import MOBILENET_WORKLOADS, RESNET18_WORKLOADS

    fams = {"resnet18": {w.name.lower(): w for w in RESNET18_WORKLOADS},
            "mobilenet": {w.name.lower(): w for w in MOBILENET_WORKLOADS}}
    defaults = {"resnet18": [f"c{i}" for i in range(2, 12)],
                "mobilenet": [f"d{i}" for i in range(1, 10)]}
    out: list[DseWorkload] = []
    fam = None
    if not isinstance(spec, str) or not spec.strip():
        raise DSEError("empty workload list; e.g. resnet18-c2,c5 or digits")
    for raw in spec.split(","):
        item = raw.strip().lower()
        if not item:
            continue
        if item == "digits":
            out.append(DseWorkload("digits", "digits"))
            continue
        names: list[str]
        if item in fams:
            fam, names = item, defaults[item]
        elif "-" in item and item.split("-", 1)[0] in fams:
            fam, rest = item.split("-", 1)
            names = [rest]
        elif fam is not None:
            names = [item]
        else:
            raise DSEError(f"unknown workload {raw.strip()!r}; allowed: resnet18[-cN], "
                           f"mobilenet[-dN], digits (a bare cN/dN continues the previous family)")
        expanded = []
        for nm in names:
            if ".." in nm:
                a, b = nm.split("..", 1)
                keys = list(fams[fam])
                if a not in fams[fam] or b not in fams[fam]:
                    raise DSEError(f"unknown layer range {nm!r} in {fam}; layers: "
                                   f"{', '.join(keys)}")
                expanded += keys[keys.index(a):keys.index(b) + 1]
            else:
                expanded.append(nm)
        for nm in expanded:
            if nm not in fams[fam]:
                raise DSEError(f"unknown layer {nm!r} in {fam}; layers: "
                               f"{', '.join(fams[fam])}")
            L = fams[fam][nm]
            out.append(DseWorkload(f"{fam}-{L.name.lower()}", "conv", _reduce(L, size), L.macs))
    if not out:
        raise DSEError("empty workload list; e.g. resnet18-c2,c5 or digits")
    return out


# =============================================================================== result
@dataclass
class Result:
    """What evaluating one config gives (JSON-serialisable through :meth:`to_dict`).

    - ``resources``: ``{"lut", "ff", "dsp", "bram36", "source", "breakdown"}`` or None.
    - ``workloads``: name -> ``{"cycles", "cycles_lower", "cycles_upper",
      "cycles_measured" (rtl only), "macs", "gemm_uops", "alu_uops", "insns", "launches",
      "dram_read_bytes", "dram_write_bytes", "cpu_compute_ops"}``, or ``{"error": msg}``.
    - ``acc``: accumulator-safety verdict (:class:`AccSafety`), or None.
    - ``notes``: strings explaining fallbacks; ``errors``: evaluation failures.
    """

    fingerprint: str
    config: dict
    resources: dict | None = None
    workloads: dict = field(default_factory=dict)
    acc: dict | None = None
    performance_source: str | None = None
    notes: list = field(default_factory=list)
    errors: list = field(default_factory=list)

    def to_dict(self) -> dict:
        """JSON-ready dict of every field (the cache and report form)."""
        return asdict(self)

    @classmethod
    def from_dict(cls, d: Mapping) -> "Result":
        """Inverse of :meth:`to_dict` (unknown keys ignored, missing ones defaulted)."""
        return cls(**{k: d[k] for k in ("fingerprint", "config", "resources", "workloads",
                                        "acc", "performance_source", "notes", "errors")
                      if k in d})


def _fp(cfg: VTAConfig) -> str:
    return f"0x{cfg.fingerprint:08x}"


# =============================================================================== resources
#: Block-RAM aspect ratios in simple dual-port mode (UG473): (depth, width, RAMB36 equiv.).
BRAM_SHAPES: tuple[tuple[int, int, float], ...] = (
    # RAMB36E1
    (32768, 1, 1.0), (16384, 2, 1.0), (8192, 4, 1.0), (4096, 9, 1.0), (2048, 18, 1.0),
    (1024, 36, 1.0), (512, 72, 1.0),
    # RAMB18E1
    (16384, 1, 0.5), (8192, 2, 0.5), (4096, 4, 0.5), (2048, 9, 0.5), (1024, 18, 0.5),
    (512, 36, 0.5),
)

#: Memories at most this deep are assumed to map to LUT RAM / flip-flops, not block RAM
#: (heuristic; e.g. fetch's 8-entry buffer).  Not exercised by the two calibration points.
LUTRAM_MAX_DEPTH = 64


def bram36_for_memory(depth: int, width: int) -> float:
    """RAMB36 equivalents of a ``depth × width``-bit 1-write/1-read memory.

    Rule (derived from hardware-notes.md "Scratchpads", the Yosys mapping of the pynq
    core): Yosys tiles the memory with one block-RAM aspect ratio of :data:`BRAM_SHAPES`
    and picks the cheapest, ``ceil(depth / d) × ceil(width / w) × size``; ties go to
    RAMB36.  It reproduces every row of that table: 1024×2048 → 57 RAMB36 (1K×36);
    2048×512 → 57 RAMB18 = 28.5 (2K×9); 2048×128 → 15 RAMB18 = 7.5; 8192×32 → 8 RAMB36
    (8K×4).  Memories at most :data:`LUTRAM_MAX_DEPTH` deep cost 0 (LUT RAM).
    """
    if depth <= LUTRAM_MAX_DEPTH:
        return 0.0
    return min(math.ceil(depth / d) * math.ceil(width / w) * s for d, w, s in BRAM_SHAPES)


def memory_map(cfg: VTAConfig) -> list[dict]:
    """The core's block-RAM candidates: ``name``, ``depth``, ``width`` (bits), ``bram36``.

    The core's inventory (:meth:`VTAConfig.memories`, what hw/core instantiates): the UOP,
    INP, WGT, ACC and OUT scratchpads and three command queues of INSN_QUEUE_DEPTH × 128
    bits (``SyncFIFOBuffered``: one entry is a register, the memory holds depth − 1).
    """
    out = []
    for mem in cfg.memories():      # the core's own inventory (hw/config.py)
        d = max(mem.depth - 1, 0) if mem.kind == "fifo" else mem.depth
        out.append({"name": mem.name, "depth": d, "width": mem.width,
                    "bram36": bram36_for_memory(d, mem.width)})
    return out


#: LUT/FF linear model ``c0 + c1 × MACs``, fitted exactly through the two Yosys points of
#: docs/hardware.md (same Yosys flow, xc7 family): tiny (16 MACs, packing 1) 4,947 LUT /
#: 3,008 FF and pynq (256 MACs, packing 2) 21,614 LUT / 11,428 FF.
LUT_FF_CALIBRATION = {
    "points": {"tiny": {"macs": 16, "lut": 4947, "ff": 3008},
               "pynq": {"macs": 256, "lut": 21614, "ff": 11428}},
}
_C1_LUT = (21614 - 4947) / (256 - 16)
_C0_LUT = 4947 - 16 * _C1_LUT
_C1_FF = (11428 - 3008) / (256 - 16)
_C0_FF = 3008 - 16 * _C1_FF
LUT_FF_CALIBRATION.update(lut=(_C0_LUT, _C1_LUT), ff=(_C0_FF, _C1_FF))

#: LUTs of one int8×int8 multiplier built from LUTs: hardware-notes.md, 16×16 GEMM with
#: DSPs disabled ≈ 66,000 LUTs / 256 products.
LUTS_PER_LUT_MULTIPLIER = 66000 / 256

#: DSP48E1 per ALU MUL lane by accumulator width (Yosys splits a 32×32 product into
#: 18×25 tiles; an assumption, not measured here).
ALU_MUL_DSP_PER_LANE = {16: 1, 32: 4}


class AnalyticResources:
    """The analytic resource model (see module docstring and docs/dse.md).

    Result ``resources``: ``lut``, ``ff``, ``dsp`` (ints), ``bram36`` (float),
    ``source = "analytic"``, ``breakdown`` (per-memory BRAM, DSP terms).
    """

    name = "analytic"
    #: Microseconds per point: run in the driver process, never shipped to a worker.
    cheap = True

    def __init__(self, part: str = "xc7z020"):
        try:
            part_info(part)
        except EstimateError as e:
            raise DSEError(str(e)) from None
        self.part = part

    @property
    def key(self) -> dict:
        """The cache key part of this evaluator (model and part)."""
        return {"resources": "analytic", "part": self.part}

    def resources(self, cfg: VTAConfig) -> dict:
        """Estimated ``{"lut", "ff", "dsp", "bram36", "source", "breakdown"}`` of ``cfg``
        (counts; ``bram36`` in 36 Kb blocks, halves for 18 Kb) from the memory map and the
        calibrated LUT/FF lines (module docstring)."""
        mems = memory_map(cfg)
        packing = 2 if (cfg.DSP_PACKING == 2 and cfg.INP_WIDTH == 8 and cfg.WGT_WIDTH == 8) else 1
        n_dsp_mul = cfg.macs_per_cycle - cfg.LUT_MULTIPLIERS
        gemm_dsp = math.ceil(n_dsp_mul / packing)
        lanes = cfg.BATCH * cfg.BLOCK_OUT
        alu_dsp = lanes * ALU_MUL_DSP_PER_LANE[cfg.ACC_WIDTH] if cfg.ALU_MUL else 0
        c0, c1 = LUT_FF_CALIBRATION["lut"]
        lut = c0 + c1 * cfg.macs_per_cycle + LUTS_PER_LUT_MULTIPLIER * cfg.LUT_MULTIPLIERS
        f0, f1 = LUT_FF_CALIBRATION["ff"]
        ff = f0 + f1 * cfg.macs_per_cycle
        return {
            "lut": int(round(lut)), "ff": int(round(ff)), "dsp": gemm_dsp + alu_dsp,
            "bram36": float(sum(m["bram36"] for m in mems)), "source": "analytic",
            "breakdown": {"memories": mems, "gemm_dsp": gemm_dsp, "alu_mul_dsp": alu_dsp,
                          "dsp_packing_effective": packing},
        }

    def evaluate(self, cfg: VTAConfig, workloads: Sequence[DseWorkload] = ()) -> Result:
        """A :class:`Result` with only ``resources`` set (workloads are ignored)."""
        return Result(_fp(cfg), cfg.to_dict(), resources=self.resources(cfg))


class YosysResources(AnalyticResources):
    """Yosys ``synth_xilinx`` counts (``hw/estimate.py``) for configs with at most
    ``max_macs`` GEMM multipliers; larger configs fall back to the analytic model with a
    note (the pynq core takes ~13 minutes)."""

    name = "yosys"
    cheap = False

    def __init__(self, part: str = "xc7z020", max_macs: int | None = 64):
        super().__init__(part)
        self.max_macs = max_macs

    @property
    def key(self) -> dict:
        """The cache key part of this evaluator (part, MAC limit)."""
        return {"resources": "yosys", "part": self.part, "max_macs": self.max_macs}

    def evaluate(self, cfg: VTAConfig, workloads: Sequence[DseWorkload] = ()) -> Result:
        """A :class:`Result` with Yosys resources; a config above ``max_macs`` or a failed
        Yosys run falls back to the analytic model (recorded in ``notes`` / ``errors``,
        never raised)."""
        from ..hw.estimate import estimate_resources

        r = Result(_fp(cfg), cfg.to_dict())
        if self.max_macs is not None and cfg.macs_per_cycle > self.max_macs:
            r.resources = self.resources(cfg)
            r.notes.append(f"yosys skipped ({cfg.macs_per_cycle} MACs > {self.max_macs}): "
                           f"analytic resources")
            return r
        try:
            res = estimate_resources(cfg, self.part)
        except EstimateError as e:
            r.resources = self.resources(cfg)
            r.errors.append(f"yosys failed, analytic resources used: {str(e).splitlines()[0]}")
            return r
        r.resources = {"lut": res.lut, "ff": res.ff, "dsp": res.dsp, "bram36": res.bram36,
                       "source": "yosys", "breakdown": {"cells": res.cells}}
        return r


# =============================================================================== cycles
@dataclass(frozen=True)
class CycleModel:
    """Cycles of one instruction, and of a whole program through the token pipeline.

    Per instruction (docs/hardware.md "Compute pipeline" and "Measured"):

    - GEMM: ``insn_overhead + gemm_uop_cycles × iter_out × iter_in × (uop_end − uop_bgn)``
      (one micro-op per cycle in steady state; ~8 cycles for a one-micro-op GEMM → 7
      cycles of overhead).  Reset micro-ops count like GEMM micro-ops.
    - ALU: ``insn_overhead + N × (alu_imm_uop_cycles if use_imm or reset else
      alu_tensor_uop_cycles)`` (a tensor operand takes a second accumulator read: 2 cycles).
    - LOAD/STORE (and UOP/ACC loads on compute): ``insn_overhead`` + per row ``dram_latency
      + max(beats, elements)`` where beats are the bus beats covering the row's bytes at
      its address (bus = BUS_WIDTH/8 bytes per cycle) and the scratchpad takes one element
      per cycle; padding costs one cycle per padded element.  ``x_size == 0`` (token-only)
      and FINISH cost ``insn_overhead``.

    Per program: ``lower`` = max(busiest module, read-channel beats incl. instruction
    fetch, write-channel beats) — perfect overlap; ``upper`` = the sum of every
    instruction's cycles plus the instruction fetch — no overlap at all; ``cycles`` (the
    estimate) = a list schedule of the three modules in program order, each instruction
    starting when its module is free and its popped dependency tokens were pushed, raised
    to at least the bus bound.  The schedule ignores token-queue and command-queue
    capacity and bus contention between modules, so it is optimistic; the upper bound is
    not.  ``dram_latency`` defaults to 0, like the Verilator harness's DRAM model: a board
    has tens of cycles per burst.
    """

    gemm_uop_cycles: float = 1.0
    alu_imm_uop_cycles: float = 1.0
    alu_tensor_uop_cycles: float = 2.0
    #: Fitted (dse/calibrate.py ``fit``) on the recorded pairs of tests/dse/data with
    #: ``compute_overhead`` and ``row_overhead``; was 7 / 7 / 0 (docs/dse.md "Calibration").
    insn_overhead: float = 11.0
    dram_latency: float = 0.0
    #: Stall cycles of an ALU micro-op that reads (dst or tensor src) the entry the
    #: previous micro-op writes (pipeline B -> D: 2); one slot further back, that minus 1
    #: minus the delay already paid.  Only with micro-ops (``uop_loads``).
    alu_hazard_cycles: float = 2.0
    #: Fixed cycles of a GEMM/ALU instruction (``None``: ``insn_overhead``): the sequencer
    #: starts when the instruction is taken and the next GEMM/ALU enters behind the last
    #: micro-op, so it is smaller than a DMA's.
    compute_overhead: float | None = 10.125
    #: Fixed cycles of a GEMM/ALU that follows a GEMM/ALU pushing no token (``None``: the
    #: compute overhead): the compute FSM starts it behind the previous one's last
    #: micro-op (hw/core/compute.py "EXEC"), but the recorded pairs do not yet support a
    #: smaller value (the schedule ignores bus contention; docs/dse.md "Calibration").
    chain_overhead: float | None = None
    #: Cycles per DMA row (one AXI burst) on top of its beats/elements, with the
    #: zero-latency DRAM model (burst handshake); ``dram_latency`` adds a board's latency.
    row_overhead: float = 3.0

    def __post_init__(self) -> None:
        """Raises :class:`DSEError` when a parameter is not a finite number >= 0 (a
        negative or NaN latency would silently rank designs wrongly)."""
        for name in ("gemm_uop_cycles", "alu_imm_uop_cycles", "alu_tensor_uop_cycles",
                     "insn_overhead", "dram_latency", "alu_hazard_cycles",
                     "row_overhead") + tuple(
                         k for k in ("compute_overhead", "chain_overhead")
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
        from ..hw.isa import decode_uops

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
        tensor = not (cols["use_imm"][i] or cols["reset"][i])
        c1 = np.zeros(n, bool)
        c2 = np.zeros(n, bool)
        c1[1:] = dst[1:] == dst[:-1]
        c2[2:] = dst[2:] == dst[:-2]
        miss = np.zeros(n, bool)
        if tensor:
            src = (u["src"][None, None, :] + oi * int(cols["src_factor_out"][i])
                   + oj * int(cols["src_factor_in"][i])).ravel()
            c1[1:] |= src[1:] == dst[:-1]
            c2[2:] |= src[2:] == dst[:-2]
            miss[:] = True
            miss[1:] = ~((src[1:] == src[:-1]) & (dst[:-1] != src[1:]))
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
        # compute loops
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
                cheap = (cols["use_imm"][sel] != 0) | (cols["reset"][sel] != 0)
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
        # DMA, vectorised over every row of every LOAD/STORE
        sel = np.nonzero(((op == Opcode.LOAD) | (op == Opcode.STORE)) & (cols["x_size"] > 0))[0]
        if len(sel):
            is_load = op[sel] == Opcode.LOAD
            m = np.where(is_load, mt[sel], int(MemType.OUT))
            eb_of = np.zeros(max(int(t) for t in MemType) + 1, np.int64)
            for t in MemType:
                try:
                    eb_of[int(t)] = cfg.elem_bytes(t)
                except Exception:  # noqa: BLE001 - a memory type the config lacks: never DMA'd
                    pass
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
            rows = np.maximum(beats, x[ins]) + self.dram_latency + self.row_overhead
            c = np.bincount(ins, weights=rows, minlength=len(sel))
            b = np.bincount(ins, weights=beats, minlength=len(sel))
            xp = np.asarray(cols["x_pad_0"])[sel] + np.asarray(cols["x_pad_1"])[sel]
            yp = np.asarray(cols["y_pad_0"])[sel] + np.asarray(cols["y_pad_1"])[sel]
            floor[sel] = np.bincount(ins, weights=np.maximum(beats, x[ins]),
                                     minlength=len(sel))
            c = c + np.where(is_load, xp * y + yp * (x + xp), 0)
            read_beats += int(round(b[is_load].sum()))
            write_beats += int(round(b[~is_load].sum()))
            cost[sel] += c
        # modules
        store = op == Opcode.STORE
        load = (op == Opcode.LOAD) & ((mt == MemType.INP) | (mt == MemType.WGT))
        module = np.where(store, 2, np.where(load, 0, 1))
        busy = [float(cost[module == k].sum()) for k in range(3)]
        lower = float(max(max(float(floor[module == k].sum()) for k in range(3)),
                          read_beats, write_beats))
        upper = float(cost.sum()) + math.ceil(16 * n / bus)
        sched = self._schedule(cols, module, cost)
        return {"cycles": max(sched, read_beats, write_beats), "lower": lower, "upper": upper,
                "busy": {"load": busy[0], "compute": busy[1], "store": busy[2]},
                "read_beats": read_beats, "write_beats": write_beats}

    @staticmethod
    def _schedule(cols, module: np.ndarray, cost: np.ndarray) -> float:
        """List schedule of the three modules through the four token queues (module order =
        program order; a pop takes the oldest pushed token)."""
        from collections import deque

        # queue ids: 0 l2g, 1 g2l, 2 g2s, 3 s2g (hw/isa.py FLAG_QUEUES)
        pops_of = {0: (("pop_next", 1),), 1: (("pop_prev", 0), ("pop_next", 3)),
                   2: (("pop_prev", 2),)}
        push_of = {0: (("push_next", 0),), 1: (("push_prev", 1), ("push_next", 2)),
                   2: (("push_prev", 3),)}
        flags = {k: np.asarray(cols[k]) for k in ("pop_prev", "pop_next", "push_prev",
                                                   "push_next")}
        order = [np.nonzero(module == k)[0].tolist() for k in range(3)]
        ptr = [0, 0, 0]
        free = [0.0, 0.0, 0.0]
        toks = [deque(), deque(), deque(), deque()]
        while True:
            progress = False
            for m in range(3):
                lst = order[m]
                while ptr[m] < len(lst):
                    i = lst[ptr[m]]
                    need = [q for f, q in pops_of[m] if flags[f][i]]
                    if any(not toks[q] for q in need):
                        break
                    start = free[m]
                    for q in need:
                        start = max(start, toks[q].popleft())
                    end = start + cost[i]
                    free[m] = end
                    for f, q in push_of[m]:
                        if flags[f][i]:
                            toks[q].append(end)
                    ptr[m] += 1
                    progress = True
            if all(ptr[m] == len(order[m]) for m in range(3)):
                return max(free)
            if not progress:  # the functional simulator would have reported the deadlock
                return float(cost.sum())

    def as_dict(self) -> dict:
        """The parameters as a dict (cache key, report)."""
        return asdict(self)


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


#: Per process (a Dask worker keeps its own): workload key -> (quantized graph, run input).
_FRONT_CACHE: dict[tuple, tuple] = {}
_FRONT_CACHE_MAX = 64


def compile_workload(cfg: VTAConfig, wl: DseWorkload, seed: int = 0):
    """``(CompiledModel, run input)`` of ``wl`` for ``cfg``: ``compile_model`` on the first
    call for a workload; later calls in the same process reuse its quantized graph (ONNX
    import and quantization depend on the workload, the seed and ``ALU_MUL`` only: ~20 %
    of a point's time) and redo only partitioning and lowering for the new config.

    Raises:
        whatever compilation raises (``CompileError`` ...).
    """
    from ..compiler.compile import compile_model, lower_graph
    from ..compiler.partition import partition

    key = (json.dumps(wl.describe(), sort_keys=True), seed, bool(cfg.ALU_MUL))
    hit = _FRONT_CACHE.get(key)
    if hit is None:
        model, calib, x = wl.model_and_inputs(seed)
        cm = compile_model(model, calib, cfg)
        if len(_FRONT_CACHE) >= _FRONT_CACHE_MAX:
            _FRONT_CACHE.pop(next(iter(_FRONT_CACHE)))
        _FRONT_CACHE[key] = (cm.qgraph, x)
        return cm, x
    q, x = hit
    part = partition(q, cfg)
    cm = lower_graph(q, part)
    cm.qgraph, cm.partition = q, part
    return cm, x


class ModelPerformance:
    """Compile every workload for the config, run it on fsim (batch 1), and estimate cycles
    with :class:`CycleModel`.

    Per workload: ``cycles`` (estimate), ``cycles_lower``, ``cycles_upper``, fsim counters
    summed over launches (``gemm_uops``, ``alu_uops``, ``insns``, ``launches``,
    ``dram_read_bytes``, ``dram_write_bytes``, per-memory load bytes), ``macs`` of the
    layers (per image) and ``cpu_compute_ops`` (conv/dense nodes the partitioner left on
    the CPU: their time is *not* counted, so such a workload is marked incomplete).
    """

    name = "model"
    backend = "fsim"
    #: Relative error of its latency (see :data:`MODEL_ERROR_BAND`).
    error_band = MODEL_ERROR_BAND
    #: Points that differ only in :data:`PROGRAM_NEUTRAL_FIELDS` share one evaluation.
    shares_programs = True

    def __init__(self, cycle_model: CycleModel | None = None, seed: int = 0):
        self.cycle_model = cycle_model or CycleModel()
        self.seed = seed

    @property
    def key(self) -> dict:
        """The cache key part of this evaluator (backend, cycle-model parameters, seed)."""
        return {"performance": self.name, "cycle_model": self.cycle_model.as_dict(),
                "seed": self.seed}

    def _device(self, cfg: VTAConfig):
        from ..runtime.fsim import FsimDevice

        return _recording_device(FsimDevice, self.cycle_model)(cfg)

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
        dev = self._device(cfg)
        ex = Executor(cm, dev)
        try:
            ex.run(x)
        finally:
            ex.close()
            dev.close()
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
        if self.backend == "rtl":
            out["cycles_measured"] = int(sum(r["cycles"] for r in recs))
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
                 max_macs: int | None = 64):
        super().__init__(cycle_model, seed)
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
            rec = ModelPerformance(self.cycle_model, self.seed).workload_record(cfg, wl)
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
        unsafe = [n for n, v in per.items() if not v["safe"]]
        return {"acc_width": cfg.ACC_WIDTH, "safe": not unsafe, "unsafe_workloads": unsafe,
                "workloads": per}


# =============================================================================== combined
class DesignEvaluator:
    """Resources, then performance (only for points that fit the part, unless
    ``perf_when_unfit``), then accumulator safety, as one :class:`Result`.

    Args:
        part: a key of ``hw.estimate.PARTS`` (or a full part name starting with one).
        resources: ``"analytic"`` or ``"yosys"`` (or an evaluator object).
        performance: ``"model"``, ``"rtl"``, ``"none"`` (or an evaluator object).
        cycle_model: parameters of :class:`CycleModel`.

    Raises:
        DSEError: unknown part or mode.
    """

    def __init__(self, part: str = "xc7z020", resources: Any = "analytic",
                 performance: Any = "model", cycle_model: CycleModel | None = None,
                 perf_when_unfit: bool = False, max_macs: int | None = 64):
        self.part = part
        self.cycle_model = cycle_model or CycleModel()
        if resources == "analytic":
            resources = AnalyticResources(part)
        elif resources == "yosys":
            resources = YosysResources(part, max_macs)
        elif isinstance(resources, str):
            raise DSEError(f"unknown resource evaluator {resources!r}; allowed: analytic, yosys")
        if performance == "model":
            performance = ModelPerformance(self.cycle_model)
        elif performance == "rtl":
            performance = RtlPerformance(self.cycle_model, max_macs=max_macs)
        elif performance in ("none", None):
            performance = None
        elif isinstance(performance, str):
            raise DSEError(f"unknown performance evaluator {performance!r}; allowed: model, "
                           f"rtl, none")
        self.res_eval = resources
        self.perf_eval = performance
        self.acc_eval = AccSafety()
        self.perf_when_unfit = perf_when_unfit
        self.capacity = {k: part_info(part)[k] for k in ("lut", "ff", "dsp", "bram36")}
        #: perf_key -> record, for :meth:`evaluate` called directly (run_search caches).
        self._perf_memo: dict[str, dict] = {}

    # ------------------------------------------------------------------ evaluation units
    def resource_key(self, cfg: VTAConfig) -> str:
        """Cache key of a resource evaluation: the model version, the resource evaluator's
        settings and the whole hardware config (every field)."""
        d = {"v": MODEL_VERSION, "res": self.res_eval.key,
             "cfg": dataclasses.asdict(cfg)}
        return hashlib.sha1(json.dumps(d, sort_keys=True).encode()).hexdigest()[:20]

    def perf_key(self, cfg: VTAConfig, wl: DseWorkload) -> str:
        """Cache key of one performance evaluation: the model version, the performance
        evaluator's settings, the workload (shape as run) and the ISA-visible config
        (:func:`program_key`: without :data:`PROGRAM_NEUTRAL_FIELDS`) when the evaluator
        ``shares_programs``, else the whole config (``--perf rtl``)."""
        pe = self.perf_eval
        cfgk = program_key(cfg) if getattr(pe, "shares_programs", False) \
            else json.dumps(dataclasses.asdict(cfg), sort_keys=True)
        d = {"v": MODEL_VERSION, "perf": pe.key if pe else None, "cfg": cfgk,
             "wl": wl.describe()}
        return hashlib.sha1(json.dumps(d, sort_keys=True).encode()).hexdigest()[:20]

    def run_resources(self, cfg: VTAConfig) -> dict:
        """One resource evaluation (:func:`resource_record`)."""
        return resource_record(self.res_eval, cfg)

    def run_perf(self, cfg: VTAConfig, wl: DseWorkload) -> dict:
        """One performance evaluation (:func:`perf_record`)."""
        return perf_record(self.perf_eval, cfg, wl)

    def wants_perf(self, res_record: Mapping) -> bool:
        """Performance is evaluated for this resource record: it fits the part (or
        ``perf_when_unfit``) and there is a performance evaluator."""
        return self.perf_eval is not None and (
            self.perf_when_unfit or resources_fit(res_record.get("resources"), self.capacity))

    def assemble(self, cfg: VTAConfig, res_record: Mapping, perf_records: Mapping,
                 workloads: Sequence[DseWorkload]) -> Result:
        """The :class:`Result` of one point from its resource record and its performance
        records (``workload name -> record``; ignored when :meth:`wants_perf` is false),
        plus accumulator safety (cheap, never cached)."""
        r = Result(_fp(cfg), cfg.to_dict(), resources=copy.deepcopy(res_record["resources"]),
                   notes=list(res_record.get("notes", [])),
                   errors=list(res_record.get("errors", [])))
        if self.wants_perf(res_record):
            shared = set()
            for wl in workloads:
                rec = perf_records[wl.name]
                r.workloads[wl.name] = copy.deepcopy(rec["workload"])
                r.performance_source = rec["source"] if r.performance_source in (
                    None, rec["source"]) else "model"
                r.notes += [n for n in rec.get("notes", []) if n not in r.notes]
                if rec.get("by") and rec["by"] != r.fingerprint:
                    shared.add(rec["by"])
            if shared:
                r.notes.append(f"performance shared with {', '.join(sorted(shared))}: same "
                               f"programs (differs only in {', '.join(PROGRAM_NEUTRAL_FIELDS)})")
        elif self.perf_eval is not None:
            r.notes.append("performance not evaluated: does not fit the part")
        r.acc = self.acc_eval.evaluate(cfg, workloads)
        return r

    def key(self, workloads: Sequence[DseWorkload]) -> str:
        """Hash of everything that changes an evaluation except the config itself."""
        d = {"v": MODEL_VERSION, "res": self.res_eval.key,
             "perf": self.perf_eval.key if self.perf_eval else None,
             "unfit": self.perf_when_unfit, "workloads": [w.describe() for w in workloads]}
        return hashlib.sha1(json.dumps(d, sort_keys=True).encode()).hexdigest()[:16]

    def evaluate(self, cfg: VTAConfig, workloads: Sequence[DseWorkload]) -> Result:
        """One point in this process: resources, performance if it fits (or
        ``perf_when_unfit``; records shared in memory by :meth:`perf_key`), and accumulator
        safety, as one :class:`Result` (failures are recorded, not raised)."""
        res = self.run_resources(cfg)
        perf = {}
        if self.wants_perf(res):
            for wl in workloads:
                k = self.perf_key(cfg, wl)
                if k not in self._perf_memo:
                    self._perf_memo[k] = self.run_perf(cfg, wl)
                perf[wl.name] = self._perf_memo[k]
        return self.assemble(cfg, res, perf, workloads)


def resource_record(res_eval: Any, cfg: VTAConfig) -> dict:
    """One resource evaluation as the cache stores it: ``{"resources", "notes",
    "errors"}`` (a Dask task: module-level so that workers can import it)."""
    r = res_eval.evaluate(cfg, ())
    return {"resources": r.resources, "notes": list(r.notes), "errors": list(r.errors)}


def perf_record(perf_eval: Any, cfg: VTAConfig, wl: DseWorkload) -> dict:
    """One performance evaluation as the cache stores it (a Dask task; see
    :meth:`ModelPerformance.workload_record`)."""
    return perf_eval.workload_record(cfg, wl)


def perf_records(perf_eval: Any, cfg: VTAConfig, wls: Sequence[DseWorkload]) -> list[dict]:
    """:func:`perf_record` of each workload of ``wls`` for one config, in order (one Dask
    task per point instead of one per workload)."""
    return [perf_record(perf_eval, cfg, wl) for wl in wls]


def resources_fit(res: Mapping | None, capacity: Mapping) -> bool:
    """Every resource within capacity."""
    return bool(res) and all(res[k] <= capacity[k] for k in ("lut", "ff", "dsp", "bram36"))


# =============================================================================== judge
def judge(result: Result, cfg_clock_mhz: float, capacity: Mapping,
          timing: Mapping | None = None, bitstream: str | None = None) -> dict:
    """Turn a :class:`Result` into the report's verdict for one point.

    Args:
        timing: optional ``{fingerprint hex "0x…" or bitstream name: {"slack_ns": float} or
            {"fmax_mhz": float}, optional "source": str}``.  Negative slack or fmax below
            the clock makes the point infeasible at that clock (BR-31).

    Returns:
        ``{"utilization": {lut, ff, dsp, bram36, max}, "fits", "timing": {"status":
        "met"|"failed"|"unverified", ...}, "cycles_total", "latency_us", "gops",
        "throughput_label", "feasible", "reasons": [...]}``.
    """
    res = result.resources or {}
    util = {k: (res[k] / capacity[k]) if res else None for k in ("lut", "ff", "dsp", "bram36")}
    util["max"] = max(util.values()) if res else None
    fits = resources_fit(res, capacity)
    reasons = []
    if not res:
        reasons.append("no resource estimate")
    elif not fits:
        over = [f"{k.upper()} {res[k]:g} > {capacity[k]}" for k in ("lut", "ff", "dsp", "bram36")
                if res[k] > capacity[k]]
        reasons.append("does not fit: " + ", ".join(over))
    t = None
    if timing:
        t = timing.get(result.fingerprint) or (timing.get(bitstream) if bitstream else None)
    tinfo: dict[str, Any] = {"status": "unverified"}
    if t is not None:
        tinfo = {k: t[k] for k in ("slack_ns", "fmax_mhz", "source") if k in t}
        failed = ("slack_ns" in t and float(t["slack_ns"]) < 0) or \
                 ("fmax_mhz" in t and float(t["fmax_mhz"]) < cfg_clock_mhz)
        tinfo["status"] = "failed" if failed else "met"
        if failed:
            reasons.append(f"timing failed at {cfg_clock_mhz:g} MHz"
                           + (f" (slack {float(t['slack_ns']):g} ns)" if "slack_ns" in t else
                              f" (fmax {float(t['fmax_mhz']):g} MHz)"))
    wls = result.workloads or {}
    errs = [f"{n}: {v['error']}" for n, v in wls.items() if "error" in v]
    cpu = [f"{n}: {', '.join(v['cpu_compute_ops'])} on CPU" for n, v in wls.items()
           if v.get("cpu_compute_ops")]
    reasons += [f"workload failed: {e}" for e in errs]
    reasons += [f"not offloaded: {c}" for c in cpu]
    if fits and not wls:
        reasons.append("no performance result")
    acc = result.acc or {}
    if acc and not acc.get("safe", True):
        reasons.append(f"accumulator may overflow ({acc['acc_width']}-bit) on "
                       f"{', '.join(acc['unsafe_workloads'])}")
    complete = bool(wls) and not errs and not cpu
    cyc = None
    if complete:
        cyc = float(sum(v.get("cycles_measured", v["cycles"]) for v in wls.values()))
    macs = sum(v.get("macs", 0) for v in wls.values()) if complete else 0
    latency_us = cyc / cfg_clock_mhz if cyc else None
    timing_ok = tinfo["status"] != "failed"
    gops = (2 * macs / (latency_us * 1e3)) if (latency_us and timing_ok) else None
    label = None
    if gops is not None:
        label = (f"at {cfg_clock_mhz:g} MHz, timing met" if tinfo["status"] == "met"
                 else f"{UNVERIFIED_LABEL} ({cfg_clock_mhz:g} MHz)")
    return {"utilization": util, "fits": fits, "timing": tinfo, "cycles_total": cyc,
            "latency_us": latency_us if timing_ok else None, "gops": gops,
            "throughput_label": label, "feasible": not reasons, "reasons": reasons}


def load_timing(path: str | Path) -> dict:
    """Read a timing file (see :func:`judge`).

    Raises:
        DSEError: unreadable, not JSON, or an entry without ``slack_ns``/``fmax_mhz``.
    """
    p = Path(path)
    try:
        d = json.loads(p.read_text())
    except OSError as e:
        raise DSEError(f"cannot read timing file {str(p)!r}: {e.strerror or e}") from None
    except json.JSONDecodeError as e:
        raise DSEError(f"timing file {str(p)!r} is not valid JSON: {e.msg} (line {e.lineno})") \
            from None
    if not isinstance(d, dict):
        raise DSEError(f"timing file {str(p)!r} must be an object: fingerprint -> "
                       f"{{\"slack_ns\": x}}")
    for k, v in d.items():
        if not isinstance(v, dict) or not ({"slack_ns", "fmax_mhz"} & set(v)):
            raise DSEError(f"timing file {str(p)!r}: entry {k!r} needs \"slack_ns\" or "
                           f"\"fmax_mhz\"")
    return d


def known_parts() -> list[str]:
    """Part names accepted by ``--part`` (keys of ``PARTS``)."""
    return list(PARTS)
