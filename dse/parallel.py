"""Where evaluations run: in this process, or on a Dask cluster.

An *executor* has ``map_unordered(fn, args_list)``, yielding ``(index, value)`` as each
call finishes, and ``close()``.  :func:`make_executor` picks one:

- ``jobs`` ``None``, 0 or 1 and no scheduler: :class:`SerialExecutor` (in process, in
  order; what ``vtaforge dse run`` did before).
- ``jobs = N >= 2``: a Dask ``distributed.LocalCluster`` of N worker processes with one
  thread each (the evaluations are numpy- and Python-bound; processes, not threads).
- ``scheduler = "tcp://host:port"``: a ``distributed.Client`` on that scheduler (its
  workers need vtaforge installed; nothing else is shipped but the task arguments).

Each worker keeps its own per-process caches (:func:`~.workloads.compile_workload`'s
quantized graphs, the Verilator build cache on disk), so a task's cost falls after the
first few on a worker.  A task that raises, or whose worker dies, yields an
:class:`TaskFailure` instead of a value: the caller records it, the sweep goes on.
"""

from __future__ import annotations

import os
from typing import Any, Callable, Iterator, Sequence

__all__ = ["SerialExecutor", "DaskExecutor", "TaskFailure", "make_executor"]


class TaskFailure:
    """A task that did not return: ``message`` is ``"<Type>: <first line>"``."""

    def __init__(self, exc: BaseException):
        msg = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
        self.message = f"{type(exc).__name__}: {msg}"

    def __repr__(self) -> str:
        return f"TaskFailure({self.message!r})"


class SerialExecutor:
    """Runs every call in this process, in order (exceptions propagate)."""

    workers = 1
    description = "serial, in process"

    def map_unordered(self, fn: Callable, args_list: Sequence[tuple]) -> Iterator[tuple[int, Any]]:
        """Yield ``(i, fn(*args_list[i]))`` for each ``i`` in order."""
        for i, args in enumerate(args_list):
            yield i, fn(*args)

    def close(self) -> None:
        """Nothing to release."""


class DaskExecutor:
    """Runs calls on a Dask cluster: a new ``LocalCluster`` of ``jobs`` worker processes,
    or the scheduler at ``scheduler``.

    Raises:
        ValueError: ``distributed`` is not installed (``pip install vtaforge[dse]``), or
            the scheduler cannot be reached (the message names the address).
    """

    def __init__(self, jobs: int | None = None, scheduler: str | None = None,
                 connect_timeout_s: float = 20.0):
        try:
            from distributed import Client, LocalCluster
        except ImportError:
            raise ValueError("parallel evaluation needs dask[distributed]: pip install "
                             "'vtaforge[dse]'") from None
        self._cluster = None
        if scheduler:
            try:
                self.client = Client(scheduler, timeout=connect_timeout_s)
            except (OSError, TimeoutError) as e:
                raise ValueError(f"cannot reach the Dask scheduler {scheduler!r}: "
                                 f"{str(e).splitlines()[0] if str(e) else type(e).__name__}") \
                    from None
            self.description = f"Dask scheduler {scheduler}"
        else:
            # one BLAS thread per worker: the workers are the parallelism
            env = {"OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
            for k, v in env.items():
                os.environ.setdefault(k, v)
            import dask

            # the workers' own periodic work (stack profiler every 10 ms, system and memory
            # monitors) costs CPU the evaluations need on a small machine; the Nanny hands
            # this config to the worker processes
            dask.config.set({"distributed.worker.profile.enabled": False,
                             "distributed.admin.system-monitor.interval": "5s",
                             "distributed.worker.memory.monitor-interval": "1s"})
            self._cluster = LocalCluster(n_workers=int(jobs or 1), threads_per_worker=1,
                                         processes=True, dashboard_address=None,
                                         silence_logs=40)
            self.client = Client(self._cluster)
            self.description = f"Dask LocalCluster, {int(jobs or 1)} worker processes"
        self.workers = max(1, len(self.client.scheduler_info().get("workers", {})))

    def map_unordered(self, fn: Callable, args_list: Sequence[tuple]) -> Iterator[tuple[int, Any]]:
        """Submit every call; yield ``(i, value or TaskFailure)`` as each finishes.  On
        an interrupt (or when the consumer stops) the calls not finished are cancelled."""
        from distributed import as_completed

        if not args_list:
            return
        futs = [self.client.submit(fn, *args, pure=False) for args in args_list]
        index = {f.key: i for i, f in enumerate(futs)}
        try:
            for f in as_completed(futs):
                try:
                    v = f.result()
                except Exception as e:  # noqa: BLE001 - a failed task or a dead worker
                    v = TaskFailure(e)
                yield index[f.key], v
        finally:
            pending = [f for f in futs if not f.done()]
            if pending:
                self.client.cancel(pending)

    def close(self) -> None:
        """Close the client, and the LocalCluster if this executor started it."""
        try:
            self.client.close()
        finally:
            if self._cluster is not None:
                self._cluster.close()


def make_executor(jobs: int | None = None, scheduler: str | None = None):
    """:class:`SerialExecutor` for ``jobs`` in (None, 0, 1) without a scheduler, else a
    :class:`DaskExecutor` (see the module docstring).

    Raises:
        ValueError: ``jobs < 0``, a scheduler address that is not ``tcp://``/``tls://``/
            ``inproc://``, or :class:`DaskExecutor`'s errors.
    """
    if jobs is not None and (isinstance(jobs, bool) or not isinstance(jobs, int) or jobs < 0):
        raise ValueError(f"--jobs {jobs!r} must be an integer >= 0")
    if scheduler:
        if not scheduler.startswith(("tcp://", "tls://", "inproc://", "ucx://", "ws://",
                                     "wss://")):
            raise ValueError(f"--scheduler {scheduler!r} must be an address such as "
                             f"tcp://host:8786")
        return DaskExecutor(scheduler=scheduler)
    if not jobs or jobs == 1:
        return SerialExecutor()
    return DaskExecutor(jobs=jobs)
