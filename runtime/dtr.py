"""DTR-style rematerialization under a device-memory budget, planned offline.

The step sequence of a compiled model and the size of every device tensor are fixed for
a batch-block count, so the policy of Dynamic Tensor Rematerialization (Kirisame et al.,
"Dynamic Tensor Rematerialization", ICLR 2021) is simulated here once per batch-block
count, before anything runs.  The simulation yields a :class:`Schedule`: the actions the
executor replays (run a step, recompute an evicted tensor by re-running its producer,
read a tensor back to the host, evict, free) and the byte offset of every device buffer in
one arena.  Offsets are fixed per schedule, so the executor's programs (which embed DRAM
addresses) stay cacheable.

The policy (:func:`plan`):

- Steps run in model order.  Before a device step runs, each device tensor it reads is
  made resident; an evicted (or already freed) one is rematerialized by re-running its
  producer, recursively (its own inputs first), as DTR does.  The inputs of the step
  being run are locked; inputs already materialized for a pending consumer are evicted
  only when nothing else can be (the consumer then materializes them again).
- When an output (or a host-packed input buffer) would not fit, resident unlocked tensors
  are evicted one at a time, the one of smallest

      h(t) = c(t) / (m(t) * s(t))

  first, where ``m(t)`` is its size in bytes, ``s(t)`` its staleness (actions since its
  last use, plus one) and ``c(t)`` the estimated cycles to recompute it: with
  ``heuristic="dtr"`` its producer's cost plus the costs of its evicted
  neighbourhood (the evicted ancestors its recomputation needs and the evicted
  descendants whose recomputation needs it), DTR's ``h_DTR``; with ``"local"`` its
  producer's cost only.  ``"next_use"`` is an offline variant for comparison, not DTR:
  the staleness is replaced by the number of model steps until the tensor's next device
  read (known here because the schedule is planned ahead; Belady's rule weighted by
  cost per byte).  ``"auto"`` (default) simulates both DTR rules (``"dtr"`` and
  ``"local"``) and keeps the cheaper schedule: planning offline makes that affordable.
- A tensor the host needs (a CPU step reads it, a consumer repacks it, or it is a graph
  output) is read back right after its first computation; the host copy lives for the
  run (host memory is not counted), so the device copy is needed only by device readers.
- A tensor no later step reads on the device is freed (liveness).
- Row bands: a step with row-band variants (``Node.bands``: a conv whose host-packed input
  is packed and run one band of output rows at a time, :class:`~.artifact.RowBands`)
  needs only its output plus one band of that input.  It runs whole when that fits
  without evicting anything; else with the fewest bands that fit without eviction; else
  with the fewest bands whose working set fits beside its locked inputs (evicting as
  above).  A banded run costs the sum of its bands' estimates (each band reloads the
  weights).

Accounting: every device buffer counts ``align``-rounded bytes; the live sum never
exceeds the budget (checked again on the finished schedule).  The arena placement
(offline, largest first at the lowest free offset) may fragment; if the arena would
exceed the budget the policy is re-run under a budget smaller by the excess, a few times,
and the smallest arena is kept; the schedule is refused when no arena fits.

Errors: :class:`BudgetError` (a :class:`~.device.DeviceError`) for a budget below
:func:`min_budget` or one under which no schedule was found; the message names the bytes.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from .device import DeviceError

__all__ = ["Node", "Action", "Schedule", "BudgetError", "min_budget", "plan",
           "nodes_from_model", "HEURISTICS", "parse_bytes", "search_optimum"]

#: eviction heuristics of :func:`plan`
HEURISTICS = ("auto", "dtr", "local", "next_use")


class BudgetError(DeviceError):
    """A device-memory budget under which the model cannot run (names the bytes)."""


_UNITS = {"": 1, "b": 1, "k": 1 << 10, "kib": 1 << 10, "m": 1 << 20, "mib": 1 << 20,
          "g": 1 << 30, "gib": 1 << 30, "kb": 10 ** 3, "mb": 10 ** 6, "gb": 10 ** 9}


def parse_bytes(text: str | int) -> int:
    """A byte count from ``"3MiB"``, ``"2.5 MiB"``, ``"512k"``, ``"3000000"`` or an int.

    Units (case-insensitive): none or ``B``; ``K``/``KiB``, ``M``/``MiB``, ``G``/``GiB``
    (powers of 1024); ``KB``, ``MB``, ``GB`` (powers of 1000).  A fractional count is
    allowed when the bytes come out whole.

    Raises:
        ValueError: not a number with a known unit, not a whole number of bytes, or < 1.
    """
    import re
    from fractions import Fraction

    if isinstance(text, int) and not isinstance(text, bool):
        v = Fraction(text)
    else:
        mt = re.fullmatch(r"\s*([0-9]+(?:\.[0-9]*)?|\.[0-9]+)\s*([A-Za-z]*)\s*", str(text))
        unit = mt.group(2).lower() if mt else None
        if mt is None or unit not in _UNITS:
            raise ValueError(f"{text!r} is not a byte count (e.g. 3145728, 3MiB, 2.5MB, 512K)")
        v = Fraction(mt.group(1)) * _UNITS[unit]
    if v.denominator != 1 or v < 1:
        raise ValueError(f"{text!r} is not a whole number of bytes >= 1")
    return int(v)


@dataclass(frozen=True)
class Node:
    """One step of a model as the planner sees it.

    Attributes:
        name: step name (for messages).
        device: True for a step that runs on the core (its output is a device tensor).
        out_bytes: bytes of the device output (0 for host steps).
        staged: ``(slot, bytes)`` of each host-packed input buffer (device memory live
            only while the step runs).
        dev_inputs: indices of the device steps whose output this step reads in device
            memory (the packed layouts agree).
        host_inputs: indices of the device steps whose output this step reads on the
            host (a CPU step, or a repacking device step).
        cost: estimated cycles of one execution (the recomputation cost).
        output: the output is a graph output (read back to the host).
        bands: row-band variants, fewest bands first: ``(rows, n_bands, staged, cost)``
            each (band height in output rows, number of bands, the host-packed input
            buffers of one band replacing ``staged``, estimated cycles of every band).
    """

    name: str
    device: bool
    out_bytes: int = 0
    staged: tuple = ()
    dev_inputs: tuple = ()
    host_inputs: tuple = ()
    cost: int = 0
    output: bool = False
    bands: tuple = ()

    def variants(self) -> list[tuple]:
        """``(rows, n_bands, staged, cost)`` of the whole step (``rows`` 0) then of each
        row-band variant."""
        return [(0, 1, self.staged, self.cost)] + list(self.bands)


@dataclass(frozen=True)
class Action:
    """One entry of a :class:`Schedule`.

    ``kind``: ``"run"`` (a step in model order; host steps too), ``"recompute"`` (a device
    step re-run to rematerialize its evicted output), ``"readback"`` (copy a device
    tensor to the host), ``"evict"`` (drop a tensor that a later step still needs),
    ``"free"`` (drop a tensor nothing needs any more).  ``step``: the step index.
    ``offsets`` / ``sizes``: for run/recompute of a device step, ``slot ->`` arena byte
    offset / ``align``-rounded bytes of the output (``"y"``) and of each host-packed input
    (of one band when banded).  ``rows``: 0, or the band height of a run in row bands
    (:attr:`Node.bands`).
    """

    kind: str
    step: int
    offsets: dict = field(default_factory=dict)
    sizes: dict = field(default_factory=dict)
    rows: int = 0


@dataclass
class Schedule:
    """A planned DTR schedule for one batch-block count.

    Attributes:
        budget: the budget in bytes it was planned for.
        actions: the :class:`Action` s in order.
        arena_bytes: bytes of the arena holding every device activation (<= budget).
        peak_bytes: the most device activation bytes live at one action (<= budget).
        min_bytes: :func:`min_budget` of the nodes (no schedule can go below it).
        free_peak_bytes: the peak of the same policy with no budget (no eviction).
        evictions: tensors evicted while a later step still needed them.
        recomputes: device steps re-run to rematerialize a tensor.
        recomputed: ``step index -> times re-run``.
        cost: estimated cycles of every device run and recompute.
        base_cost: estimated cycles of every device step once (the unbudgeted run).
        budget_used: the budget the policy was finally simulated under (smaller than
            ``budget`` when the arena placement needed room for fragmentation).
        heuristic: the eviction rule of the kept schedule; keep_dead: whether dead tensors
            that may serve a recomputation were kept until memory was needed.
        bands: ``step index -> bands`` of the steps run in row bands (the most bands of
            any of its runs); banded_runs: runs and recomputes done in row bands.
    """

    budget: int
    actions: list
    arena_bytes: int
    peak_bytes: int
    min_bytes: int
    free_peak_bytes: int
    evictions: int
    recomputes: int
    recomputed: dict
    cost: int
    base_cost: int
    budget_used: int
    heuristic: str = "dtr"
    keep_dead: bool = False
    bands: dict = field(default_factory=dict)
    banded_runs: int = 0

    @property
    def overhead(self) -> float:
        """Estimated extra cycles over the unbudgeted run, as a fraction of it."""
        return (self.cost - self.base_cost) / self.base_cost if self.base_cost else 0.0

    def uses(self, step: int) -> int:
        """How many times ``step`` runs (original run plus recomputes)."""
        return int(any(a.kind == "run" and a.step == step for a in self.actions)) + \
            self.recomputed.get(step, 0)


def _round(n: int, align: int) -> int:
    return -(-max(int(n), 1) // align) * align


def min_budget(nodes: list[Node], align: int = 1) -> int:
    """The smallest device working set any evaluation order needs, in bytes: the largest,
    over device steps, of its distinct device inputs + host-packed inputs (of one band,
    for its variant in the most row bands) + output (each rounded up to ``align``).  0
    when no step runs on the device."""
    return max((_ws(nodes, i, align)[0] for i, nd in enumerate(nodes) if nd.device),
               default=0)


class _Infeasible(Exception):
    pass


class _Sim:
    """One run of the policy under one budget (see the module docstring)."""

    def __init__(self, nodes: list[Node], budget: int | None, align: int, heuristic: str,
                 keep_dead: bool = False):
        self.nodes = nodes
        self.keep_dead = keep_dead
        self.budget = budget
        self.align = align
        self.heuristic = heuristic
        n = len(nodes)
        self.size = [_round(nd.out_bytes, align) if nd.device else 0 for nd in nodes]
        self.consumers: list[list[int]] = [[] for _ in range(n)]
        self.dev_uses: list[list[int]] = [[] for _ in range(n)]
        for i, nd in enumerate(nodes):
            for j in set(nd.dev_inputs):
                self.consumers[j].append(i)
                self.dev_uses[j].append(i)
        self.host_need = [nd.output for nd in nodes]
        for nd in nodes:
            for j in nd.host_inputs:
                self.host_need[j] = True
        self.resident = [False] * n
        self.last = [0] * n
        self.lock = [0] * n
        self.soft = [0] * n
        self.pos = -1                   # index of the model step being run
        self.clock = 0
        self.live = 0
        self.peak = 0
        self.actions: list[Action] = []
        self.evictions = 0
        self.recomputed: dict[int, int] = {}
        self.cost = 0
        self.bands: dict[int, int] = {}
        self.banded_runs = 0

    # ---- liveness
    def alive(self, j: int) -> bool:
        """A later model step reads ``j`` on the device."""
        return any(c > self.pos for c in self.dev_uses[j])

    def _drop(self, j: int, kind: str) -> None:
        self.resident[j] = False
        self.live -= self.size[j]
        self.actions.append(Action(kind, j))
        if kind == "evict":
            self.evictions += 1

    def useful(self, j: int) -> bool:
        """A dead ``j`` may still serve the recomputation of a tensor a later step reads."""
        seen = set()
        stack = list(self.consumers[j])
        while stack:
            c = stack.pop()
            if c in seen or c > self.pos:
                continue
            seen.add(c)
            if self.alive(c):
                return True
            stack.extend(self.consumers[c])
        return False

    # ---- heuristic
    def _neighbourhood_cost(self, t: int) -> int:
        seen = {t}
        total = 0
        stack = [p for p in self.nodes[t].dev_inputs]
        while stack:                         # evicted ancestors needed to recompute t
            p = stack.pop()
            if p in seen or self.resident[p]:
                continue
            seen.add(p)
            total += self.nodes[p].cost
            stack.extend(self.nodes[p].dev_inputs)
        stack = list(self.consumers[t])
        while stack:                         # evicted descendants whose recompute needs t
            c = stack.pop()
            if c in seen or self.resident[c] or c > self.pos or not self.alive(c):
                continue
            seen.add(c)
            total += self.nodes[c].cost
            stack.extend(self.consumers[c])
        return total

    def score(self, t: int) -> float:
        c = max(self.nodes[t].cost, 1)
        if self.heuristic != "local":
            c += self._neighbourhood_cost(t)
        if self.heuristic == "next_use":        # offline: steps until the next device read
            nxt = min((u for u in self.dev_uses[t] if u > self.pos), default=None)
            return 0.0 if nxt is None else c / (self.size[t] * (nxt - self.pos))
        return c / (self.size[t] * (self.clock - self.last[t] + 1))

    def make_room(self, need: int) -> None:
        if self.budget is None:
            return
        while self.live + need > self.budget:
            cand = [t for t in range(len(self.nodes)) if self.resident[t] and not self.lock[t]]
            plain = [t for t in cand if not self.soft[t]]
            pool = plain or cand
            if not pool:
                raise _Infeasible(need)
            victim = self.choose(pool)
            self._drop(victim, "evict" if self.alive(victim) else "free")

    def boundary(self, i: int) -> None:
        """Called after model step ``i`` (a hook for :func:`search_optimum`)."""

    def choose(self, pool: list[int]) -> int:
        """The victim: the smallest h (ties: the lowest step index)."""
        return min(pool, key=lambda t: (self.score(t), t))

    def variant(self, i: int) -> tuple:
        """How step ``i`` runs (its inputs locked): whole when that fits without eviction;
        else in the fewest row bands that fit without eviction; else in the fewest that
        fit beside the locked tensors (see the module docstring)."""
        vs = self.nodes[i].variants()
        if self.budget is None or len(vs) == 1:
            return vs[0]
        needs = [self.size[i] + sum(_round(b, self.align) for _, b in v[2]) for v in vs]
        for v, need in zip(vs, needs):
            if self.live + need <= self.budget:
                return v
        locked = sum(self.size[t] for t in range(len(self.nodes))
                     if self.resident[t] and self.lock[t])
        for v, need in zip(vs, needs):
            if locked + need <= self.budget:
                return v
        return vs[needs.index(min(needs))]

    # ---- execution
    def materialize(self, i: int, kind: str, depth: int = 0) -> None:
        nd = self.nodes[i]
        if depth > 4 * len(self.nodes):
            raise _Infeasible(0)
        ins = list(dict.fromkeys(nd.dev_inputs))
        for p in ins:                         # evicted only when nothing else can be
            self.soft[p] += 1
        try:
            for _ in range(len(ins) + 2):
                missing = [p for p in ins if not self.resident[p]]
                if not missing:
                    break
                for p in missing:
                    if not self.resident[p]:
                        self.materialize(p, "recompute", depth + 1)
            else:
                raise _Infeasible(0)
        finally:
            for p in ins:
                self.soft[p] -= 1
        for p in ins:
            self.lock[p] += 1
        rows, nb, staged, cost = self.variant(i)
        staged = [(s, _round(b, self.align)) for s, b in staged]
        need = self.size[i] + sum(b for _, b in staged)
        self.make_room(need)
        self.clock += 1
        self.live += need
        self.peak = max(self.peak, self.live)
        self.actions.append(Action(kind, i, sizes={"y": self.size[i], **dict(staged)},
                                   rows=rows))
        self.live -= sum(b for _, b in staged)
        for p in ins:
            self.lock[p] -= 1
            self.last[p] = self.clock
        self.resident[i] = True
        self.last[i] = self.clock
        self.cost += cost
        if rows:
            self.bands[i] = max(self.bands.get(i, 0), nb)
            self.banded_runs += 1
        if kind == "recompute":
            self.recomputed[i] = self.recomputed.get(i, 0) + 1

    def run(self) -> None:
        for i, nd in enumerate(self.nodes):
            self.pos = i
            if not nd.device:
                self.actions.append(Action("run", i))
                continue
            self.pos = i - 1                  # step i still reads its inputs
            self.materialize(i, "run")
            self.pos = i
            if self.host_need[i]:
                self.actions.append(Action("readback", i))
            for j in range(i + 1):
                if self.resident[j] and not self.alive(j) and not (
                        self.keep_dead and self.useful(j)):
                    self._drop(j, "free")
            self.boundary(i)
        for j in range(len(self.nodes)):
            if self.resident[j]:
                self._drop(j, "free")


class _Branch(Exception):
    def __init__(self, n: int):
        self.n = n


class _Pruned(Exception):
    pass


class _ChoiceSim(_Sim):
    """A simulation whose evictions follow ``prefix`` (indices into the candidates in h
    order) and stop at the first choice beyond it (:func:`search_optimum`).  At each step
    boundary the state (step, resident set) is looked up in ``memo``: reached before by
    another choice sequence at no higher cost, this one cannot do better."""

    def __init__(self, *a, prefix, memo, **kw):
        super().__init__(*a, **kw)
        self.prefix = prefix
        self.d = 0
        self.memo = memo

    def boundary(self, i: int) -> None:
        key = (i, self.keep_dead, tuple(self.resident))
        path = tuple(self.prefix[:self.d])
        seen = self.memo.get(key)
        if seen is not None and seen[1] != path and seen[0] <= self.cost:
            raise _Pruned
        if seen is None or self.cost < seen[0]:
            self.memo[key] = (self.cost, path)

    def choose(self, pool: list[int]) -> int:
        order = sorted(pool, key=lambda t: (self.score(t), t))
        if self.d == len(self.prefix):
            raise _Branch(len(order))
        self.d += 1
        return order[self.prefix[self.d - 1]]


def search_optimum(nodes: list[Node], budget: int, *, align: int = 1, time_limit: float = 10.0,
                   upper: int | None = None) -> tuple[int | None, bool]:
    """The least total estimated cost (cycles) over every sequence of eviction choices
    under ``budget`` bytes (live-sum accounting, arena placement not included), both
    freeing variants, by depth-first branch and bound from the h_DTR order (``upper``: a
    known schedule's cost to prune against), with states at step boundaries that another
    choice sequence reached more cheaply cut off.  A reference
    for judging the heuristic (exponential; for benchmarks), not used by the executor:
    the order of steps and of recomputations is the policy's own, so this is the optimum
    of the eviction choices, not of every possible schedule.

    Returns:
        ``(cost or None when nothing fits, True when the search finished within
        time_limit seconds)``.
    """
    import time

    t_end = time.perf_counter() + time_limit
    suffix = [0] * (len(nodes) + 1)
    for j in range(len(nodes) - 1, -1, -1):
        suffix[j] = suffix[j + 1] + (nodes[j].cost if nodes[j].device else 0)
    best = [upper]
    done = [True]
    memo: dict = {}

    def dfs(prefix: list[int], keep_dead: bool) -> None:
        if time.perf_counter() > t_end:
            done[0] = False
            return
        sim = _ChoiceSim(nodes, budget, align, "dtr", keep_dead, prefix=prefix, memo=memo)
        try:
            sim.run()
        except (_Infeasible, _Pruned):
            return
        except _Branch as b:
            if best[0] is not None and sim.cost + suffix[sim.pos + 1] >= best[0]:
                return
            for k in range(b.n):
                dfs(prefix + [k], keep_dead)
            return
        if best[0] is None or sim.cost < best[0]:
            best[0] = sim.cost

    for kd in (True, False):
        dfs([], kd)
    return best[0], done[0]


def _place(actions: list[Action], align: int) -> tuple[list[Action], int]:
    """Arena offsets for every buffer of a simulated schedule: each allocation lives from
    its run/recompute action to the action that evicts or frees it (host-packed inputs:
    that one action).  Offline placement (dynamic storage allocation with the lifetimes
    known): the allocations are taken in one of three orders (largest first, longest-lived
    first, by start) and each is put at the lowest ``align``-ed offset free over its
    lifetime; the smallest arena wins.  Returns the actions with byte offsets and the
    arena's size in bytes."""
    allocs = []                               # [start, end, size, action index, slot]
    open_out: dict[int, int] = {}
    for k, a in enumerate(actions):
        if a.kind in ("run", "recompute") and a.sizes:
            for slot, size in a.sizes.items():
                allocs.append([k, k + 1, size, k, slot])
                if slot == "y":
                    open_out[a.step] = len(allocs) - 1
        elif a.kind in ("evict", "free"):
            allocs[open_out.pop(a.step)][1] = k
    orders = (lambda q: (-allocs[q][2], allocs[q][0], q),
              lambda q: (allocs[q][0] - allocs[q][1], -allocs[q][2], q),
              lambda q: (allocs[q][0], -allocs[q][2], q))
    best = None
    for key in orders:
        placed: list[tuple[int, int, int, int]] = []      # (start, end, off, size)
        offs = {}
        top = 0
        for q in sorted(range(len(allocs)), key=key):
            s, e, size = allocs[q][:3]
            busy = sorted((o, o + z) for (s2, e2, o, z) in placed if s2 < e and s < e2)
            off = 0
            for lo, hi in busy:
                if off + size <= lo:
                    break
                off = max(off, -(-hi // align) * align)
            placed.append((s, e, off, size))
            offs[q] = off
            top = max(top, off + size)
        if best is None or top < best[1]:
            best = (offs, top)
    offs, top = best
    out = list(actions)
    for q, (_, _, _, k, slot) in enumerate(allocs):
        a = out[k]
        out[k] = Action(a.kind, a.step, dict(a.offsets, **{slot: offs[q]}), a.sizes,
                        a.rows)
    return out, top


def _attempt(nodes, budget, limit, lo, align, heuristic, retries):
    """The cheapest schedule that fits ``budget`` over the freeing variants
    (:func:`_attempt1`) and, for ``"auto"``, the heuristics ``"dtr"`` and ``"local"``."""
    hs = ("dtr", "local") if heuristic == "auto" else (heuristic,)
    got = [_attempt1(nodes, budget, limit, lo, align, h, retries, k)
           for h in hs for k in (False, True)]
    ok = [g for g in got if g is not None and g[1] <= budget]
    if ok:
        return min(ok, key=lambda g: (g[0].cost, g[1]))
    return min((g for g in got if g is not None), key=lambda g: g[1], default=None)


def _attempt1(nodes, budget, limit, lo, align, heuristic, retries, keep_dead):
    """Simulate under ``limit`` then smaller limits until the arena fits ``budget``;
    ``(sim, arena, actions, limit)`` of the smallest arena, or None."""
    best = None
    b = limit
    for _ in range(retries + 1):
        sim = _Sim(nodes, b, align, heuristic, keep_dead)
        try:
            sim.run()
        except _Infeasible:
            break
        actions, arena = _place(sim.actions, align)
        if best is None or arena < best[1]:
            best = (sim, arena, actions, b)
        if arena <= budget:
            break
        b -= arena - budget
        if b < lo:
            break
    return best


def plan(nodes: list[Node], budget: int, *, align: int = 1, heuristic: str = "auto",
         retries: int = 8) -> Schedule:
    """Plan the DTR schedule of ``nodes`` (model order) under ``budget`` bytes.

    Args:
        nodes: the model's steps (:func:`nodes_from_model`).
        budget: device activation bytes that may be live at once (``int`` >= 1).
        align: every buffer's size and arena offset is a multiple of it (bytes).
        heuristic: ``"dtr"``, ``"local"``, ``"next_use"`` (see the module docstring) or
            ``"auto"``: both DTR rules simulated, the cheaper schedule kept
            (:attr:`Schedule.heuristic` says which).
        retries: re-plans under a smaller budget when the arena would not fit.
    Returns:
        The :class:`Schedule` (offsets in ``Action.offsets``).
    Raises:
        BudgetError: ``budget`` below :func:`min_budget` (message: both figures in bytes),
            or no schedule found whose arena fits.
        ValueError: an unknown heuristic or a budget that is not a positive ``int``.
    """
    if heuristic not in HEURISTICS:
        raise ValueError(f"heuristic must be one of {HEURISTICS}, got {heuristic!r}")
    if isinstance(budget, bool) or not isinstance(budget, int) or budget < 1:
        raise ValueError(f"budget must be a positive int of bytes, got {budget!r}")
    lo = min_budget(nodes, align)
    if budget < lo:
        worst = max((i for i, nd in enumerate(nodes) if nd.device),
                    key=lambda i: _ws(nodes, i, align)[0])
        _, rows, nb = _ws(nodes, worst, align)
        how = f" in {nb} row bands of {rows} row{'s' if rows > 1 else ''}" if rows else ""
        raise BudgetError(f"memory budget {budget} bytes is below the {lo} bytes that step "
                          f"{nodes[worst].name!r} alone needs{how} (its device inputs, "
                          f"host-packed inputs and output); no evaluation order fits")
    free = _Sim(nodes, None, align, "local")
    free.run()
    base_cost = sum(nd.cost for nd in nodes if nd.device)
    best = _attempt(nodes, budget, budget, lo, align, heuristic, retries)
    if best is None or best[1] > budget:
        hi = _place(free.actions, align)[1]       # no eviction: fits at its own arena
        lo_b = max(lo, budget)
        while hi - lo_b > align:                  # the smallest budget the policy fits
            mid = (lo_b + hi) // 2 // align * align
            got = _attempt(nodes, mid, mid, lo, align, heuristic, retries)
            if got is not None and got[1] <= mid:
                hi = mid
            else:
                lo_b = mid
        raise BudgetError(f"memory budget {budget} bytes: no DTR schedule fits (the "
                          f"smallest budget this policy fits is about {hi} bytes; no "
                          f"order fits below {lo} bytes)")
    sim, arena, actions, b = best
    return Schedule(budget=budget, actions=actions, arena_bytes=arena, peak_bytes=sim.peak,
                    min_bytes=lo, free_peak_bytes=free.peak, evictions=sim.evictions,
                    recomputes=sum(sim.recomputed.values()), recomputed=dict(sim.recomputed),
                    cost=sim.cost, base_cost=base_cost, budget_used=b,
                    heuristic=sim.heuristic, keep_dead=sim.keep_dead, bands=dict(sim.bands),
                    banded_runs=sim.banded_runs)


def _ws(nodes: list[Node], i: int, align: int) -> tuple[int, int, int]:
    """``(bytes, rows, bands)``: the smallest working set of step ``i`` over its variants
    (device inputs + host-packed inputs + output) and the variant's band height and count
    (``0, 1``: whole); of variants with equal bytes, the one with the fewest bands."""
    nd = nodes[i]
    dev = _round(nd.out_bytes, align) + sum(_round(nodes[j].out_bytes, align)
                                            for j in set(nd.dev_inputs))
    return min(((dev + sum(_round(b, align) for _, b in v[2]), v[0], v[1])
                for v in nd.variants()), key=lambda t: (t[0], t[2]))


def nodes_from_model(model, nblk: int) -> list[Node]:
    """The planner's view of a :class:`~.artifact.CompiledModel` at ``nblk`` batch blocks.

    A VTA step reads a VTA producer's output in device memory when the packed layouts
    agree (as :func:`~.executor.plan_memory` and the executor decide); otherwise the host
    packs that input (``staged``).  Cost: ``max(compute, memory)`` of
    :meth:`~.artifact.Step.bounds` (core cycles over ``nblk`` blocks), at least 1.  A step
    with :attr:`~.artifact.Step.bands` whose ``x`` input the host packs gets one
    :attr:`Node.bands` entry per variant (one band's ``x`` bytes,
    :meth:`~.artifact.RowBands.bounds` as its cost).
    """
    cfg = model.config
    steps = model.steps
    producer = {t: i for i, st in enumerate(steps) for t in st.outputs}
    outs = set(model.outputs)
    nodes = []
    for i, st in enumerate(steps):
        host_in = []
        if st.target != "vta":
            for t in st.inputs:
                j = producer.get(t)
                if j is not None and steps[j].target == "vta":
                    host_in.append(j)
            nodes.append(Node(st.name, False, host_inputs=tuple(host_in)))
            continue
        dev_in, staged = [], []
        for slot, lay in st.layouts.items():
            if slot == "y":
                continue
            j = producer.get(st.slots[slot])
            if j is not None and steps[j].target == "vta":
                if steps[j].layouts["y"] == lay:
                    dev_in.append(j)
                    continue
                host_in.append(j)
            staged.append((slot, nblk * lay.block_bytes))
        comp, mem = st.bounds(cfg, nblk)
        bands = []
        if getattr(st, "bands", None) and any(s == "x" for s, _ in staged):
            ho = st.layouts["y"].shape[1]
            xl = st.layouts["x"]
            for b in st.bands:
                bs = tuple((s, nblk * xl.rows_block_bytes(b.rows)) if s == "x" else (s, v)
                           for s, v in staged)
                bands.append((b.rows, len(b.spans(ho)), bs, b.bounds(cfg, ho, nblk)))
        nodes.append(Node(st.name, True, nblk * st.layouts["y"].block_bytes, tuple(staged),
                          tuple(dev_in), tuple(host_in), max(comp, mem, 1),
                          output=any(t in outs for t in st.outputs), bands=tuple(bands)))
    return nodes
