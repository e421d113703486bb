"""The RTL-vs-fsim comparison the compiled-model RTL tests share: run one compiled model
through the executor on fsim and on the Verilated core of its config, every kept tensor
bit for bit equal, and hand back the core's launches (their cycles) for the caller's own
checks (``tests/compiler/test_rtl_pool.py``, ``test_rtl_presets.py``,
``tests/runtime/test_req_engine.py``)."""

from __future__ import annotations

import numpy as np

from vtaforge.runtime.executor import Executor
from vtaforge.runtime.fsim import FsimDevice


def rtl_equals_fsim(cm, x, *, mem_bytes: int = 16 << 20, fsim_mem_bytes: int | None = None,
                    model=None, **device_kw) -> tuple[dict, list]:
    """Run compiled model ``cm`` on ``x`` (``keep=True``: every intermediate tensor) on
    fsim and on ``vtaforge.runtime.rtl.RtlDevice(cm.config, mem_bytes, model=model)``;
    assert every tensor fsim kept equal, bit for bit, to the RTL run's.

    Args:
        cm: a :class:`~vtaforge.runtime.artifact.CompiledModel`.
        x: its input (an array, or ``{name: array}``).
        mem_bytes: the RTL device's memory, bytes.
        fsim_mem_bytes: fsim's memory, bytes (``None``: FsimDevice's default).
        model: a built ``RtlModel`` to reuse (``None``: the build cache's for the config).
        device_kw: further ``RtlDevice`` options (``latency``, ``seed``, ``backpressure``).
    Returns:
        ``(rtl outputs, [the RTL device's run result per launch, in order])``; a result's
        ``cycles`` is that launch's core cycles.
    Raises:
        AssertionError: a tensor differs (its name in the message).
    """
    from vtaforge.runtime import rtl

    cfg = cm.config
    fsim = FsimDevice(cfg) if fsim_mem_bytes is None else FsimDevice(cfg, mem_bytes=fsim_mem_bytes)
    ref = Executor(cm, fsim).run(x, keep=True)
    dev = rtl.RtlDevice(cfg, mem_bytes, progress=False, model=model, **device_kw)
    runs = []
    run = dev.run

    def counted(*a, **kw):
        res = run(*a, **kw)
        runs.append(res)
        return res

    dev.run = counted
    try:
        got = Executor(cm, dev).run(x, keep=True)
    finally:
        dev.close()
    for k in ref:
        np.testing.assert_array_equal(np.asarray(got[k]), np.asarray(ref[k]), err_msg=k)
    return got, runs
