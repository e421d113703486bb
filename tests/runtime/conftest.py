"""Fixtures for the runtime tests; program-building helpers live in ``tests/support/programs.py``.

``device``: the backend a behavioural or error test runs its raw programs on, one test per
backend (DESIGN.md "Testing": the same matrix on every backend):

- ``fsim``: ``fsim.simulate``, the executable form of the semantics;
- ``rtl`` (marker ``rtl``): the Verilated core (``rtl.run_raw``);
- ``pynq-sim`` (marker ``rtl``): the unchanged ``pynq`` backend on the simulated PYNQ-Z2 of
  ``fakepynq`` (the Verilated core behind PYNQ's Overlay/MMIO/allocate, with its cache).

The Verilated backends run the cores of :data:`RTL_CONFIGS` only (tiny, and tiny with
one-entry queues): each model is built once per session (and cached on disk, shared with
test_rtl_programs, test_pynq_sim and test_faults); a case on another config is skipped
there with the reason, since each further core build costs minutes of CI.
Backend-specific arguments are skipped likewise (``regions``: an allowed-DMA list inside
the image, an fsim argument; ``max_steps``: a step budget, checked by fsim and the
verifier).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from vtaforge.hw.config import preset

#: The configs the Verilated backends run (one core build each per session, cached on
#: disk): tiny, and tiny with one-entry queues (test_faults' F5 builds it too).
RTL_CONFIGS = {"tiny": preset("tiny"),
               "tiny with one-entry queues": preset("tiny").replace(INSN_QUEUE_DEPTH=1,
                                                                    TOKEN_QUEUE_DEPTH=1)}


@pytest.fixture(params=["tiny", "pynq", "batch2"])
def cfg(request):
    return preset(request.param)


class Backend:
    """Runs raw DRAM images on one backend: ``run(cfg, dram, ia, n, regions=None, **kw)``
    updates ``dram`` in place and returns the run's ``RunResult`` (or raises the
    backend's ``ProgramError``/``DeviceError``)."""

    name = "fsim"
    verilated = False

    def run(self, cfg, dram, ia, n, regions=None, **kw):
        """Run on fsim."""
        from vtaforge.runtime.fsim import simulate

        return simulate(cfg, dram, ia, n, regions=regions, **kw)

    def check(self, cfg, regions=None, **kw) -> None:
        """Skip the calling test (with the reason) when this backend cannot run the case."""
        if not self.verilated:
            return
        if not any(cfg == c for c in RTL_CONFIGS.values()):
            pytest.skip(f"{self.name}: the Verilated backends run only the cores of "
                        f"{', '.join(RTL_CONFIGS)} (one build per config costs minutes of "
                        f"CI); this case needs {cfg.bitstream_name}")
        if regions is not None:
            pytest.skip(f"{self.name}: regions (allowed DMA areas inside the image) is an "
                        f"fsim argument; the board and rtl backends allow the whole image")
        if kw:
            pytest.skip(f"{self.name}: {', '.join(sorted(kw))} is an fsim/verifier argument")


class _Rtl(Backend):
    name = "rtl"
    verilated = True

    def __init__(self, rtl, models):
        self.rtl, self.models = rtl, models

    def run(self, cfg, dram, ia, n, regions=None, **kw):
        """Run on the Verilated core (``rtl.run_raw`` with the session's model)."""
        self.check(cfg, regions, **kw)
        return self.rtl.run_raw(cfg, dram, ia, n, progress=False, model=self.models(cfg))


class _PynqSim(Backend):
    name = "pynq-sim"
    verilated = True

    def __init__(self, models, tmp: Path):
        self.models, self.tmp = models, tmp
        self.boards: dict = {}

    def _device(self, cfg, mp):
        import fakepynq

        from vtaforge.runtime import pynq as backend

        key = cfg.fingerprint
        if key not in self.boards:
            board = fakepynq.SimBoard(cfg, self.models(cfg))
            d = self.tmp / f"overlay-{key:08x}"
            d.mkdir(parents=True, exist_ok=True)
            (d / "vta.bit").write_bytes(b"\x00\x09\x0f\xf0" * 64)
            (d / "vta.hwh").write_bytes(fakepynq.SAMPLE_HWH.read_bytes())
            fakepynq.use(mp, board)
            dev = backend.PynqDevice(cfg, bitstream=str(d / "vta.bit"), timeout_s=60)
            self.boards[key] = (board, dev)
        board, dev = self.boards[key]
        fakepynq.use(mp, board)  # other tests attach their own boards in between
        return dev

    def run(self, cfg, dram, ia, n, regions=None, **kw):
        """Run through the ``pynq`` backend on the simulated board (``pynq.run_raw``)."""
        from vtaforge.runtime import pynq as backend

        self.check(cfg, regions, **kw)
        with pytest.MonkeyPatch.context() as mp:
            dev = self._device(cfg, mp)
            try:
                return backend.run_raw(cfg, dram, ia, n, device=dev)
            finally:
                import fakepynq

                fakepynq.detach()

    def close(self) -> None:
        """Close every simulated board."""
        for board, _dev in self.boards.values():
            board.close()


@pytest.fixture(scope="session")
def rtl_models():
    """``models(cfg)``: the session's Verilator model of ``cfg`` (built at most once)."""
    rtl = pytest.importorskip("vtaforge.runtime.rtl")
    cache: dict = {}

    def models(cfg):
        if cfg.fingerprint not in cache:
            cache[cfg.fingerprint] = rtl.build_model(cfg, progress=False)
        return cache[cfg.fingerprint]

    return models


@pytest.fixture(scope="session")
def _rtl_backend(rtl_models):
    return _Rtl(pytest.importorskip("vtaforge.runtime.rtl"), rtl_models)


@pytest.fixture(scope="session")
def _pynq_sim_backend(rtl_models, tmp_path_factory):
    b = _PynqSim(rtl_models, tmp_path_factory.mktemp("pynq-sim"))
    yield b
    b.close()


@pytest.fixture(params=["fsim", pytest.param("rtl", marks=pytest.mark.rtl),
                        pytest.param("pynq-sim", marks=pytest.mark.rtl)])
def device(request):
    """The backend of this test (see the module docstring)."""
    if request.param == "fsim":
        return Backend()
    try:
        from vtaforge.hw.core import emit_verilog  # noqa: F401
    except ImportError:  # pragma: no cover
        pytest.skip("the Amaranth core (vtaforge.hw.core) is not available")
    backend = request.getfixturevalue("_rtl_backend" if request.param == "rtl"
                                      else "_pynq_sim_backend")
    backend.models(RTL_CONFIGS["tiny"])  # a first build counts as set-up, not test time
    return backend

