"""Per-shape specialisation at run time: a bounded LRU cache of executors on one device.

A shape-polymorphic model (the compiler's ``DynamicModel``: a model declared
``[N, 3, H, W]``, compiled once) is run by :class:`ShapeRunner`.  For every run the
concrete input shape (batch excluded) is the key; on a miss the model's
``specialise(key)`` gives a static :class:`~.artifact.CompiledModel` for that shape
(partition + lowering with tiling chosen for it) and the runner makes an
:class:`~.executor.Executor` for it on the shared device.  At most ``capacity`` shapes
are kept; the least recently used one is evicted and its executor closed, which frees
its device buffers (activations, cached programs, micro-op kernels).

Packed constants (weights, biases) do not depend on the spatial size: a constant whose
bytes equal one already resident for another shape is not copied again; the runner
hands the resident buffer to the new executor and frees it when the last shape using it
is evicted (reference counts).

The runtime never imports the compiler: the runner takes any object with the
:class:`Specialiser` interface.
"""

from __future__ import annotations

import hashlib
import time
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Callable, Protocol

import numpy as np

from .artifact import CompiledModel
from .device import Device, DeviceError
from .executor import Executor

__all__ = ["ShapeCacheStats", "ShapeCache", "ShapeRunner", "Specialiser"]


class Specialiser(Protocol):
    """What :class:`ShapeRunner` needs of a shape-polymorphic model."""

    inputs: list

    def shape_key(self, feeds) -> tuple:
        """The per-input concrete shapes (batch excluded) of ``feeds``; raises ValueError
        (the compiler's ``CompileError``) for a shape the model cannot take."""

    def specialise(self, key: tuple) -> CompiledModel:
        """The static compiled model of the shapes ``key``."""


@dataclass
class ShapeCacheStats:
    """Counters of a :class:`ShapeCache`.

    Attributes:
        capacity: entries kept at most.
        hits / misses / evictions: lookups found, lookups that specialised, entries dropped.
        failures: misses whose specialisation raised (nothing cached).
        specialise_seconds: wall seconds spent in ``make`` (all misses).
        per_key: ``key -> {"specialise_s": float, "hits": int, "misses": int}``, every key
            seen, evicted ones included.
    """

    capacity: int
    hits: int = 0
    misses: int = 0
    evictions: int = 0
    failures: int = 0
    specialise_seconds: float = 0.0
    per_key: dict = field(default_factory=dict)

    def as_dict(self) -> dict:
        """The counters as a JSON-friendly dict (keys ``"HxW"``-style strings)."""
        return {"capacity": self.capacity, "hits": self.hits, "misses": self.misses,
                "evictions": self.evictions, "failures": self.failures,
                "specialise_seconds": self.specialise_seconds,
                "per_shape": {format_key(k): dict(v) for k, v in self.per_key.items()}}

    def __str__(self) -> str:
        return (f"shape cache: {self.hits} hit(s), {self.misses} miss(es), {self.evictions} "
                f"eviction(s), {self.failures} failure(s), capacity {self.capacity}; "
                f"{self.specialise_seconds:.3f} s specialising")


def format_key(key: tuple) -> str:
    """``((3, 17, 23),)`` -> ``"3x17x23"`` (inputs joined by ``+``)."""
    return "+".join("x".join(str(d) for d in k) for k in key)


class ShapeCache:
    """A bounded LRU map ``key -> value`` whose misses call ``make(key)``.

    Args:
        capacity: entries kept at most (``>= 1``).
        on_evict: called with ``(key, value)`` for every entry dropped (also by
            :meth:`clear`).
    Raises:
        ValueError: ``capacity < 1``.
    """

    def __init__(self, capacity: int = 8, on_evict: Callable | None = None):
        if not isinstance(capacity, int) or capacity < 1:
            raise ValueError(f"shape cache capacity must be an int >= 1, got {capacity!r}")
        self.capacity = capacity
        self.on_evict = on_evict
        self._d: OrderedDict = OrderedDict()
        self.stats = ShapeCacheStats(capacity)

    def __len__(self) -> int:
        return len(self._d)

    def __contains__(self, key) -> bool:
        return key in self._d

    def peek(self, key):
        """The cached value of ``key`` or ``None``; counts nothing, moves nothing."""
        return self._d.get(key)

    def keys(self) -> list:
        """Cached keys, least recently used first."""
        return list(self._d)

    def get(self, key, make: Callable):
        """The value of ``key``; on a miss ``make(key)`` (timed, in wall seconds) and, once
        ``make`` has succeeded and if the cache is full, evict the least recently used
        entry.  A failing ``make`` evicts nothing and caches nothing (counted in
        ``failures``); its exception propagates."""
        pk = self.stats.per_key.setdefault(key, {"specialise_s": 0.0, "hits": 0, "misses": 0})
        if key in self._d:
            self._d.move_to_end(key)
            self.stats.hits += 1
            pk["hits"] += 1
            return self._d[key]
        self.stats.misses += 1
        pk["misses"] += 1
        t0 = time.perf_counter()
        try:
            v = make(key)
        except BaseException:
            self.stats.failures += 1
            raise
        finally:
            dt = time.perf_counter() - t0
            self.stats.specialise_seconds += dt
            pk["specialise_s"] += dt
        while len(self._d) >= self.capacity:
            self._evict()
        self._d[key] = v
        return v

    def _evict(self) -> None:
        k, v = self._d.popitem(last=False)
        self.stats.evictions += 1
        if self.on_evict is not None:
            self.on_evict(k, v)

    def clear(self) -> None:
        """Drop every entry (``on_evict`` for each; not counted as evictions)."""
        while self._d:
            k, v = self._d.popitem(last=False)
            if self.on_evict is not None:
                self.on_evict(k, v)


@dataclass
class _Entry:
    model: CompiledModel
    executor: Executor
    shared: dict = field(default_factory=dict)      # constant name -> digest it borrows


class ShapeRunner:
    """Run a shape-polymorphic model on one device, one executor per concrete shape.

    Args:
        model: a :class:`Specialiser` (the compiler's ``DynamicModel``).
        device: the :class:`Device` every shape runs on.
        capacity: shapes kept at most (LRU, default 8).
        share_constants: reuse a resident packed constant for another shape when its bytes
            are equal (default True).
        executor_kwargs: forwarded to each :class:`Executor` (``memory_budget`` ...).
    Attributes:
        cache: the :class:`ShapeCache` of ``key -> (model, executor)``.
        shared_bytes: packed-constant bytes not copied to the device thanks to sharing.
        run_seconds: ``key -> [first run s, later runs s (sum), later runs]`` (wall seconds
            of :meth:`Executor.run`; specialisation excluded).
        on_step: ``on_step(done, total)`` after each step of a run, whichever shape's
            executor runs it (:attr:`Executor.on_step`), or None.
    Raises:
        ValueError: ``capacity < 1``.
    """

    def __init__(self, model: Specialiser, device: Device, *, capacity: int = 8,
                 share_constants: bool = True, **executor_kwargs):
        self.model = model
        self.device = device
        self.share_constants = share_constants
        self._kw = executor_kwargs
        self.cache = ShapeCache(capacity, on_evict=self._drop)
        self._pool: dict = {}           # digest -> [Buffer, refs]
        self.shared_bytes = 0           # bytes not copied thanks to sharing (all shapes)
        self.run_seconds: dict = {}     # key -> [first run s, later runs s, later runs]
        self.on_step = None

    # ---------------------------------------------------------------- shapes
    @property
    def stats(self) -> ShapeCacheStats:
        """The cache's :class:`ShapeCacheStats`."""
        return self.cache.stats

    def _make(self, key) -> _Entry:
        cm = self.model.specialise(key)
        ex = Executor(cm, self.device, **self._kw)
        ex.on_step = self._stepped
        e = _Entry(cm, ex)
        consts = getattr(ex, "_consts", None)
        if self.share_constants and isinstance(consts, dict):
            for name in self._vta_constants(cm):
                d = _digest(cm.constants[name])
                slot = self._pool.get(d)
                if slot is not None:
                    consts[name] = slot[0]
                    slot[1] += 1
                    e.shared[name] = d
                    self.shared_bytes += int(np.asarray(cm.constants[name]).nbytes)
        return e

    def _stepped(self, done: int, total: int) -> None:
        if self.on_step is not None:
            self.on_step(done, total)

    @staticmethod
    def _vta_constants(cm: CompiledModel) -> list:
        names = []
        for s in cm.steps:
            if s.target == "vta":
                names += [v for k, v in s.slots.items() if k not in s.layouts and k != "y"
                          and v in cm.constants]
        return names

    def _adopt(self, e: _Entry) -> None:
        """After a run: put the constants the executor copied itself into the pool."""
        consts = getattr(e.executor, "_consts", None)
        if not self.share_constants or not isinstance(consts, dict):
            return
        for name in self._vta_constants(e.model):
            if name in e.shared or name not in consts:
                continue
            d = _digest(e.model.constants[name])
            if d in self._pool:
                continue
            self._pool[d] = [consts[name], 1]
            e.shared[name] = d

    def _drop(self, key, e: _Entry) -> None:
        consts = getattr(e.executor, "_consts", None)
        for name, d in e.shared.items():
            if isinstance(consts, dict):
                consts.pop(name, None)
            slot = self._pool[d]
            slot[1] -= 1
            if slot[1] == 0:
                del self._pool[d]
                self.device.free(slot[0])
        e.executor.close()

    def _entry(self, feeds_or_key) -> _Entry:
        key = (feeds_or_key if isinstance(feeds_or_key, tuple)
               else self.model.shape_key(feeds_or_key))
        e = self.cache.peek(key)           # a look-up that does not run counts nothing
        return e if e is not None else self.cache.get(key, self._make)

    def executor(self, feeds_or_key) -> Executor:
        """The executor for the shapes of ``feeds_or_key`` (feeds, or a key tuple as
        :meth:`shape_key` gives), specialising on a miss (a cached one is not counted as a
        hit: only :meth:`run` counts).  Raises as :meth:`run` does for a shape the model
        cannot take."""
        return self._entry(feeds_or_key).executor

    def compiled(self, feeds_or_key) -> CompiledModel:
        """The specialised :class:`CompiledModel` for a shape, as :meth:`executor`."""
        return self._entry(feeds_or_key).model

    def shape_key(self, feeds) -> tuple:
        """The cache key of ``feeds``: the model's ``shape_key``."""
        return self.model.shape_key(feeds)

    # ---------------------------------------------------------------- running
    def run(self, feeds, *, keep: bool = False) -> dict:
        """Run ``feeds`` (``ndarray`` or ``{input: ndarray}``, float, batch first) at their
        shape.

        Returns:
            what :meth:`Executor.run` returns (``name -> array``).
        Raises:
            ValueError (the compiler's CompileError): a shape the model cannot take;
            DeviceError: bad feeds (dtype ...); ProgramError: device faults.
        """
        key = self.model.shape_key(feeds)
        e = self.cache.get(key, self._make)
        t0 = time.perf_counter()
        out = e.executor.run(feeds, keep=keep)
        dt = time.perf_counter() - t0
        self._adopt(e)
        r = self.run_seconds.setdefault(key, [None, 0.0, 0])
        if r[0] is None:
            r[0] = dt
        else:
            r[1] += dt
            r[2] += 1
        return out

    def memory_report(self) -> dict:
        """Device bytes of the cached shapes: ``shapes`` (cached), ``constants_resident``
        (distinct packed constants held), ``constants_shared`` (bytes not copied thanks to
        sharing, all shapes so far), ``executors`` (sum of each executor's
        ``memory_report()["total"]``, shared constants counted once per shape)."""
        tot = 0
        for k in self.cache.keys():
            ex = self.cache._d[k].executor
            rep = getattr(ex, "memory_report", None)
            if rep is not None:
                tot += int(rep().get("total", 0))
        return {"shapes": len(self.cache), "constants_resident":
                sum(b.nbytes for b, _ in self._pool.values()),
                "constants_shared": self.shared_bytes, "executors": tot}

    def close(self) -> None:
        """Evict every shape (closing its executor, freeing its device buffers)."""
        self.cache.clear()
        for b, _ in self._pool.values():
            try:
                self.device.free(b)
            except DeviceError:
                pass
        self._pool.clear()

    def __enter__(self) -> "ShapeRunner":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def _digest(arr) -> tuple:
    a = np.ascontiguousarray(arr)
    return (a.dtype.str, a.shape, hashlib.sha256(a.view(np.uint8).reshape(-1)).hexdigest())
