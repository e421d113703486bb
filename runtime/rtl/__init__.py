"""vtaforge.runtime.rtl: the ``rtl`` target, a cycle-accurate Verilator simulation.

- :func:`build_model` (``build.py``): emit, verilate and compile the core with the C++
  harness (``harness.cpp``) into a cached shared library.
- :class:`RtlDevice` (``device.py``): the :class:`~vtaforge.runtime.device.Device` on top of
  it; :func:`run_raw` runs a raw DRAM image (``vtaforge exec --target rtl``).
"""

from .build import RtlBuildError, RtlModel, build_model
from .device import RtlDevice, describe_dbg_state, run_raw

__all__ = ["RtlDevice", "run_raw", "build_model", "RtlModel", "RtlBuildError",
           "describe_dbg_state"]
