"""vtaforge.runtime: the Device interface and backends, and the program builder (JIT).

Public API: :class:`Device`, :class:`Buffer`, :class:`RunResult`, :class:`DeviceError`,
:class:`ProgramError`, :class:`DeadlockError`, :class:`ProgramBuilder` (with
:class:`KernelRecorder`, :class:`UopKernel`, :class:`BuilderError`), and
:class:`FsimDevice` (imported lazily from ``runtime.fsim`` on first access).
"""

from .builder import ProgramBuilder
from .device import Buffer, DeadlockError, Device, DeviceError, ProgramError, RunResult
from .kernels import BuilderError, KernelRecorder, UopKernel

__all__ = ["Device", "Buffer", "RunResult", "DeviceError", "ProgramError", "DeadlockError",
           "ProgramBuilder", "KernelRecorder", "UopKernel", "BuilderError", "FsimDevice"]


def __getattr__(name: str):
    if name == "FsimDevice":
        try:
            from .fsim import FsimDevice
        except ImportError as e:
            raise AttributeError(f"FsimDevice is not available: {e}") from None
        return FsimDevice
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
