"""One coordinator run (seed 004): load, replicate, broadcast, drain, balance and unload, in priority order.

``plan(view)`` is pure: the same view gives the same plan. Stages (seed 004),
after stage 0 cancels the loads queued on decommissioning servers:

1. one copy of every unreplicated segment, newest first (never throttled: no
   replication throttle, only the full queue limit);
2. broadcast segments to every active server;
3-4. the remaining replicas per tier (``replicationThrottleLimit`` caps replica
   loads in flight per tier; a load is a *replica* load when the tier served the
   segment at the start of the run);
5. segments on decommissioning servers move to active ones (drains: see *Moves* below);
6. stages 1-4 again within (loading + decommissioning)% of the queue;
7. balancing: random segments (an order hashed from run, tier and stage) move to a
   strictly cheaper server among the top B (Druid's rule; see
   :mod:`coordinator.balancer.strategy`), until 80 of the last 100 iterations
   failed or the tier's balancing moves are used up (see *Moves* below);
8. stages 1-4 again with the full queue; 9. stage 5 within decommissioningMax%;
10. segments that could not move for queue room; 11. balancing with the full queue;
12. unloading: cancel excess queued loads before dropping loaded copies, drop
   decommissioning copies first, then from the fullest server (ranked again after
   every queued drop), never below the replication reachable while
   replacement copies are only queued; unused segments lose every copy;
13. broadcast-only decommissioning servers are emptied.

Moves: per tier and run, drains (5, 9) plus balancing moves (7, 10, 11) stay within the
tier's ``maxSegmentsToMove`` (with smart loading computed per tier from the replicas on its
servers), drains first: the segments held on the tier's decommissioning servers are reserved
out of it, at most ``decommissioningMaxPercentOfMaxSegmentsToMove`` percent (Druid 27; smart
loading: all of it, Druid 28+), and balancing gets the rest.

Queue limits: each server's load queue holds at most ``maxSegmentsInNodeLoadingQueue``
items (0: unlimited); stages marked *relative* count only their own purpose's
items against their share (loadingMinPercent 70, decommissioningMinPercent 10,
balancingMinPercent 20 by default). Decommissioning servers receive nothing and
their queued loads are cancelled; their data stays until a copy elsewhere exists.
Overshadowed used segments are marked unused only when what overshadows them is
served (or needs no replicas) and ``millisToWaitBeforeDeleting`` has passed since
the coordinator started (Druid's rule).
"""

from __future__ import annotations

import hashlib
import math
import operator
from collections import Counter, deque
from collections.abc import Callable, Collection, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Literal

import numpy as np

from coordinator.balancer.cost_cache import ServerCostCache
from coordinator.balancer.strategy import TIE_TOLERANCE, num_best_servers
from coordinator.placement.state import PlacementState
from coordinator.planner.cluster import ClusterView, Purpose
from coordinator.planner.cost_shelf import CostCacheShelf
from coordinator.rules.rule import Rule
from coordinator.timeline.timeline import Timeline
from events.commands import CommandPurpose
from events.compiled import constructor
from events.segment import SegmentDescriptor, SegmentId

FULL_RUN_EVERY_MS = 15 * 60_000  # an incremental planner looks at every segment at least this often (event time)
CommandType = Literal["load", "drop", "move", "cancel"]
_ID = operator.attrgetter("sort_key")  # segment ids in their own order, compared as plain tuples
_CHUNK = operator.attrgetter("interval.start", "interval.end", "version")  # a segment's (or id's) time chunk
_START = operator.attrgetter("interval.start")
_END = operator.attrgetter("interval.end")


@dataclass(frozen=True, slots=True)
class PlanCommand:
    type: CommandType
    server: str
    segment: SegmentId
    tier: str
    stage: int
    reason: str
    replica: bool = False
    source: str | None = None
    move_id: str | None = None
    command_id: str | None = None  # the load's, drop's or cancel's id (a move's: its load half's, = move_id)
    cancels: str | None = None  # a cancel: the id of the queued load it withdraws
    purpose: CommandPurpose | None = None  # why a load, move or drop was issued (a cancel: None)

    def to_json(self) -> dict[str, object]:
        out: dict[str, object] = {"type": self.type, "server": self.server, "segment": str(self.segment),
                                  "tier": self.tier, "stage": self.stage, "reason": self.reason,
                                  "replica": self.replica}
        if self.purpose is not None:
            out["purpose"] = self.purpose
        if self.type == "move":
            out.update({"from": self.source, "to": self.server, "moveId": self.move_id})
        return out


@dataclass(frozen=True, slots=True)
class Plan:
    commands: tuple[PlanCommand, ...]
    mark_unused: tuple[tuple[SegmentId, str], ...]
    metrics: dict[str, object]
    unknown_tiers: tuple[str, ...] = ()
    deferred: frozenset[SegmentId] = frozenset()  # segments left short (no room, throttled, stuck): plan again


# PlanCommand(...) with every field given positionally, without the frozen __init__'s setattr calls (a full run makes
# one per load)
_new_command = constructor(PlanCommand)


@dataclass(slots=True)
class _Target:
    """A rule's target for the segments it applies to (one shared instance per rule and run: never mutated)."""

    kind: Literal["load", "broadcast", "drop", "none"]
    replicants: dict[str, int] = field(default_factory=dict)
    by_tier: tuple[tuple[str, int], ...] = field(init=False, default=())  # (tier, want) in tier order
    primary_first: tuple[str, ...] = field(init=False, default=())  # most replicas first, then tier name

    def __post_init__(self) -> None:
        wants = self.replicants
        self.by_tier = tuple(sorted(wants.items()))
        self.primary_first = tuple(sorted(wants, key=lambda t: (-wants[t], t)))

    @property
    def total(self) -> int:
        return sum(self.replicants.values())


def _newest_first(sid: SegmentId) -> tuple[int, int, str, int, str]:
    """The loading stages' order: newest interval first, then version, partition and data source (a total order:
    the id's own order breaks the ties of the first four)."""
    interval = sid.interval
    return (-interval.end, -interval.start, sid.version, sid.partition_id, sid.data_source)


_TIE_BREAK = operator.attrgetter("version", "partition_id", "data_source")


def _newest_first_order(sids: Iterable[SegmentId]) -> list[SegmentId]:
    """``sorted(sids, key=_newest_first)``, the interval part in NumPy: the ids' bounds read in C, sorted by
    (end, start) descending with one ``lexsort``; only the ids sharing an interval (data sources, versions,
    partitions of one hour) are sorted by the tie-break in Python, each group apart. Few ids: the plain sort.

    >>> from events import Interval
    >>> ids = [SegmentId(ds, Interval(s, s + 10), v, p) for ds in "ba" for s in (0, 10, 5) for v in ("v2", "v1")
    ...        for p in (1, 0)] * 30
    >>> _newest_first_order(ids) == sorted(ids, key=_newest_first)
    True
    """
    out = list(sids)
    n = len(out)
    if n < 256:
        out.sort(key=_newest_first)
        return out
    end = np.fromiter(map(_END, out), dtype=np.int64, count=n)
    start = np.fromiter(map(_START, out), dtype=np.int64, count=n)
    order = np.lexsort((start, end))[::-1]  # (end, start) descending
    end, start = end[order], start[order]
    out = list(map(out.__getitem__, order.tolist()))
    cuts = (np.flatnonzero((end[1:] != end[:-1]) | (start[1:] != start[:-1])) + 1).tolist()
    for lo, hi in zip([0, *cuts], [*cuts, n], strict=True):
        if hi - lo > 1:  # one interval: the tie-break decides, ascending
            out[lo:hi] = sorted(out[lo:hi], key=_TIE_BREAK)
    return out


# a segment's loaded_in, holders and pending entries as a caller just read them (see _Run.load)
_Copies = tuple["Counter[str] | None", "set[str] | None", "set[str] | None"]


class _Run:
    """One planning run over a :class:`PlacementState`, which it updates after every decision (each decision is
    folded in as the command it becomes, so the state a run leaves is the state its commands make).

    ``scope`` (incremental runs): the segments whose planning inputs changed; the loading, broadcast,
    replication, draining and unloading stages look at those alone, in the same order and under the same
    limits as a full run, which looks at every segment. ``deferred`` collects the segments a run left short
    (no room, throttled, stuck, unsafe to drop): the caller keeps them in the next run's scope.
    """

    def __init__(self, state: PlacementState, *, now: int, run: int, start: int, compute_cost: bool,
                 balancing: bool = True, only_tier: str | None = None, scope: set[SegmentId] | None = None,
                 mark_overshadowed: bool = True, per_server_caches: bool = False,
                 drained: Counter[str] | None = None, mark_sources: Collection[str] | None = None) -> None:
        self.p = state
        # the reference cost source (benchmarks' baseline, tests): one ServerCostCache tree walk per server instead
        # of one query of the tier's ClusterCostIndex; the same costs to ~1e-15, so the same decisions
        self.per_server_caches = per_server_caches
        self.now, self.run_number, self.start = now, run, start
        self.rules, self.config = state.rules, state.config
        self.balancing = balancing  # False: stages 7, 10, 11 are someone else's (the Spark balancer)
        self.only_tier = only_tier  # balance this tier alone (None: every tier)
        self.scope = scope
        self.marking = mark_overshadowed
        self.mark_sources = mark_sources  # data sources a scoped marking judges whole (a sweep's marking slices)
        self.limits = self.config.effective(len(state.used), len(state.tier_of))
        shares = self.config.queue_shares()
        self.shares = {"loading": shares.loading, "decommissioning": shares.decommissioning,
                       "balancing": shares.balancing}
        self.decommissioning_max = self.config.decommissioning_max_percent / 100
        self.log_base = float(self.config.num_best_servers_log_base)
        self.commands: list[PlanCommand] = []
        self.unused: list[tuple[SegmentId, str]] = []
        self.metrics: Counter[str] = Counter()
        self._assigned: dict[str, str] = {}  # tier -> its segment/assigned/count key (made once, not per load)
        self.moves_made: Counter[str] = Counter()  # balancing moves per tier
        # moves off decommissioning servers per tier (a sweep's slices share one counter: one budget per sweep)
        self.drained: Counter[str] = Counter() if drained is None else drained
        self._budgets: dict[str, tuple[int, int]] | None = None  # tier -> (maxSegmentsToMove, drains reserved)
        self.cursor: dict[str, int] = {}  # round robin: tier -> next position for a first copy (see rotation)
        self._rr_order: dict[str, dict[str, int]] = {}  # round robin: tier -> server -> position in the tier
        self.to_be_balanced: dict[str, list[SegmentId]] = {}
        self.visited: dict[str, set[SegmentId]] = {}
        self.compute_cost = compute_cost
        # planned segments' targets, in no particular order (passes sort what they visit); a full run keeps those of
        # interval-free data sources in ``_fixed`` instead (:meth:`planned_target` reads both)
        self.targets: dict[SegmentId, _Target] = {}
        self._outside: dict[SegmentId, _Target] = {}  # targets of segments outside a run's scope, when needed
        self.deferred: set[SegmentId] = set()
        self._match = self.rules.matcher(now)
        self._by_rule: dict[int, _Target] = {}  # id(rule) -> its target, shared by every segment it applies to
        # the planned segments by target (id(target) -> (target, members)): the passes find the segments that need
        # something with set arithmetic over these classes instead of asking every segment
        self._classes: dict[int, tuple[_Target, set[SegmentId]]] = {}
        # the segments a pass of stage 1 / stages 3-4 may still act on (computed at the first pass; copies only grow
        # before stage 12, so a segment served or at its target stays so and later passes skip it)
        self._unserved: list[SegmentId] | None = None  # in the loading order (newest first)
        self._short: list[SegmentId] | None = None
        self._unheld: set[SegmentId] | None = None  # a full run's load-rule segments with no holder, at its start
        self._under: dict[str, str] = {}  # tier -> stages 3-4's reason (made once, not per load)
        self._queue_cap = self.queue_cap()  # the limits are the run's
        # a full run's interval-free data sources (see below): data source -> the one target of its used segments
        self._fixed: dict[str, _Target] = {}
        # a full run's used segments by data source when the fold's used index could not give them (marking reads them)
        self._used_by_source: dict[str, list[SegmentId]] | None = None
        if scope is None and len(state.used) == sum(len(index) for index in state.used_index.values()):
            # every used segment is in the fold's used index (its keys are the used set): the segments by data source
            # without a pass over them, and the classes filled from the index's dicts (stored hashes, no Python-level
            # SegmentId.__hash__ per segment)
            for source, index in state.used_index.items():
                fixed, rule = self.rules.interval_free(source)
                keyed = index.keyed()
                if fixed:  # one target for the whole data source: no per-segment matching, no per-segment entry
                    shared = self._fixed[source] = self._target_of_rule(rule)
                    self._member_set(shared).update(keyed)
                else:
                    for sid in keyed:
                        target = self.targets[sid] = self.target(sid)
                        self._member_set(target).add(sid)
        else:
            planned = state.used if scope is None else scope & state.used
            by_source: dict[str, list[SegmentId]] = {}
            for sid in planned:
                by_source.setdefault(sid.data_source, []).append(sid)
            if scope is None:
                self._used_by_source = by_source
            for source, sids in by_source.items():
                fixed, rule = self.rules.interval_free(source)
                if fixed:  # one target for the whole data source: no per-segment matching
                    shared = self._target_of_rule(rule)
                    self.targets.update(dict.fromkeys(sids, shared))
                    self._member_set(shared).update(sids)
                else:
                    for sid in sids:
                        target = self.targets[sid] = self.target(sid)
                        self._member_set(target).add(sid)

    def planned_target(self, sid: SegmentId) -> _Target | None:
        """The target of a segment the run plans (None: not planned: unused, or outside a scoped run's scope)."""
        target = self.targets.get(sid)
        if target is None and self._fixed:
            target = self._fixed.get(sid.data_source)
            if target is not None and sid not in self.p.used:  # a full run plans the used segments (as of its start)
                return None
        return target

    def target_of(self, sid: SegmentId) -> _Target:
        """The rule's target for any used segment (scoped runs compute those outside the scope on demand)."""
        known = self.planned_target(sid)
        if known is None:
            known = self._outside.get(sid)
            if known is None:
                known = self._outside[sid] = self.target(sid)
        return known

    def target(self, sid: SegmentId) -> _Target:
        seg = self.p.segments[sid]
        return self._target_of_rule(self._match(seg.data_source, seg.interval))

    def _target_of_rule(self, rule: Rule | None) -> _Target:
        """The target a rule sets (one shared, never mutated instance per rule and run)."""
        key = id(rule)
        known = self._by_rule.get(key)
        if known is None:
            if rule is None:
                known = _Target("none")
            elif rule.kind == "load":
                known = _Target("load", {t: n for t, n in rule.tiered_replicants.items() if n > 0})
            elif rule.kind == "broadcast":
                known = _Target("broadcast")
            else:
                known = _Target("drop")
            self._by_rule[key] = known
        return known

    def _member_set(self, target: _Target) -> set[SegmentId]:
        entry = self._classes.get(id(target))
        if entry is None:
            entry = self._classes[id(target)] = (target, set())
        return entry[1]

    def classes(self, kind: str) -> list[tuple[_Target, set[SegmentId]]]:
        """The planned segments' target classes of one kind (``load``: those wanting at least one copy)."""
        return [(t, m) for t, m in self._classes.values()
                if t.kind == kind and (kind != "load" or t.total > 0) and m]

    def members(self, kind: str) -> set[SegmentId]:
        out: set[SegmentId] = set()
        for _, m in self.classes(kind):
            out |= m
        return out

    def copy_levels(self, tier: str, depth: int, pending: bool = True) -> list[set[SegmentId]]:
        """``levels[k]``: the segments with at least ``k + 1`` copies in the tier: holders (loaded, not being
        dropped), plus plain queued loads when ``pending`` (what :meth:`Projected.copies` counts), as of now.
        Set arithmetic over each server's sets: O(copies) in C, not a Python step per segment."""
        p = self.p
        levels: list[set[SegmentId]] = [set() for _ in range(depth)]
        if depth <= 0:
            return levels
        for name in p.tiers.get(tier, ()):
            dropping = p.dropping[name]  # the parts are only read: a server dropping nothing lends its own set
            parts = [p.loaded[name] - dropping if dropping else p.loaded[name]]
            loads = p.loading[name]
            if pending and loads:
                plain = set(loads)  # the dict's keys with their stored hashes (no Python-level hashing)
                plain.difference_update([s for s, q in loads.items() if q.move_id is not None])
                parts.append(plain)
            for part in parts:
                for k in range(depth - 1, 0, -1):
                    levels[k] |= levels[k - 1] & part
                levels[0] |= part
        return levels

    # -- limits --------------------------------------------------------------------
    def queue_cap(self) -> float:
        q = self.limits.max_segments_in_node_loading_queue
        return math.inf if q <= 0 else float(q)

    def room(self, name: str, purpose: Purpose, share: float | None, relative: bool) -> bool:
        """Whether one more load fits the server's queue under a stage's limit."""
        cap = self.queue_cap()
        total = self.p.queue_size(name)
        if total >= cap:
            return False
        if share is None:
            return True
        if relative:
            return self.p.queued[name][purpose] < cap * share
        return total < cap * share

    def can_take(self, name: str, sid: SegmentId) -> bool:
        return (name not in self.p.decommissioning and not self.p.present(sid, name)
                and self.p.free_bytes(name) >= self.p.size(sid))

    # -- choosing servers --------------------------------------------------------------
    def pick(self, sid: SegmentId, tier: str, purpose: Purpose, share: float | None, relative: bool,
             copies: _Copies | None = None) -> str | None:
        """A server of the tier for one more copy: round robin (Druid's default) or the cheapest of the top B.
        ``copies``: as :meth:`load` takes them."""
        p = self.p
        all_names = p.tiers.get(tier, [])
        if self.limits.use_round_robin:  # the next server that can take it, from the copies or the tier's cursor
            if copies is None:
                holders, pending = p.holders.get(sid), p.pending.get(sid)
            else:
                holders, pending = copies[1], copies[2]
            after = None
            if holders or pending:  # after_copies, written out
                order = self._rr_order.get(tier)
                if order is None:
                    order = self._rr_order[tier] = {n: i for i, n in enumerate(all_names)}
                last = -1
                for group in (holders, pending):
                    if group:
                        for n in group:
                            at = order.get(n)
                            if at is not None and at > last:
                                last = at
                if last >= 0:
                    after = last + 1
            start = after if after is not None else self.cursor.get(tier)
            if start is None:
                start = self.rotation(tier, all_names)
            # can_take and room, written out (a full run asks them for every load it makes)
            seg = p.segments.get(sid)
            cap, size = self._queue_cap, seg.size if seg is not None else 0
            held_by: Collection[str] = holders if holders is not None else ()
            limit = None if share is None else cap * share
            draining, loading, used_bytes, servers, queued = p.decommissioning, p.loading, p.used_bytes, p.servers, \
                p.queued
            count = len(all_names)
            for k in range(count):
                i = (start + k) % count
                n = all_names[i]
                queue = loading[n]
                if n in draining or n in held_by or sid in queue or servers[n].max_size_bytes - used_bytes[n] < size:
                    continue  # not can_take
                total = len(queue)
                if total >= cap or (limit is not None and not (queued[n][purpose] if relative else total) < limit):
                    continue  # not room (``not <``, as room asks: a limit of inf * 0 is NaN, which nothing is below)
                if after is None:  # the segment's first copy in the tier: its replicas take the next servers
                    # (only planned segments are picked for: a full run's interval-free ones by their data source)
                    target = self._fixed.get(sid.data_source) or self.target_of(sid)
                    want = target.replicants.get(tier, 1)
                    self.cursor[tier] = (i + max(1, want)) % len(all_names)
                return n
            return None
        names = [n for n in all_names if self.can_take(n, sid)]
        if not names:
            return None
        costs = self.server_costs(tier, sid, names)
        best = num_best_servers(max(1, (self.planned_target(sid) or _Target("none")).replicants.get(tier, 1)),
                                self.p.active.get(tier, 0), self.log_base)
        ranked = self.rank(names, costs)[:best]
        for n in ranked:
            if self.room(n, purpose, share, relative):
                return n
        return None

    def rotation(self, tier: str, names: Sequence[str]) -> int:
        """Where round robin starts in a run for a segment with no copy in the tier: the copies loaded or queued
        on the tier's servers, modulo their number. Druid's cursor lives across one run (every segment); ours
        must also live across runs (an incremental run plans one publish), so it is derived from the fold
        instead of restarting at the first server (which sent every load of a 2-replica rule on 3 servers to
        the first two): every load adds one copy, so the count moves on as a cursor kept forever would. A pure
        function of the state (same log, same loads); O(servers of the tier), once per tier and run."""
        loaded, loading = self.p.loaded, self.p.loading
        copies = sum(len(loaded.get(n, ())) + len(loading.get(n, ())) for n in names)
        return copies % len(names) if names else 0

    def after_copies(self, sid: SegmentId, tier: str, names: Sequence[str]) -> int | None:
        """Where round robin starts for another copy of a segment the tier already holds or loads: just after the
        last of its servers in the tier's order (None: no copy there). A segment's copies take consecutive
        servers from its first, as one cursor gives them when a run plans one segment; a run that places many
        first copies before their replicas (stage 1, then 3-4) would otherwise hand the replicas a shared cursor
        that skips each segment's own server, the same servers on every run of that shape."""
        holders, pending = self.p.holders.get(sid), self.p.pending.get(sid)
        if not holders and not pending:
            return None
        order = self._rr_order.get(tier)
        if order is None:
            order = self._rr_order[tier] = {n: i for i, n in enumerate(names)}
        last = max((order[n] for group in (holders, pending) if group for n in group if n in order), default=None)
        return None if last is None else last + 1

    def server_costs(self, tier: str, sid: SegmentId, names: Sequence[str],
                     bar_for: Sequence[str] = ()) -> dict[str, float]:
        """The segment's cost on each server of the tier (the segment itself excluded): one query of the tier's
        :class:`~coordinator.balancer.cost_index.ClusterCostIndex` (every server at once). The reference
        (``per_server_caches``) walks each named server's cost cache instead; for ``bar_for`` (balancing's
        destinations) it skips a server's second tree walk once its cost clears every one of ``names`` (the
        holders), leaving that server out (it could never be a destination)."""
        seg = self.p.segment(sid)
        if not self.per_server_caches:
            return self.p.costs_in(tier, seg)
        out = {n: self.p.cache(n).cost_of(seg) for n in names}
        if bar_for:
            bar = max(c * (1 - TIE_TOLERANCE) for c in out.values())
            for n in bar_for:
                cost = self.p.cache(n).cost_below(seg, bar)
                if cost is not None:
                    out[n] = cost
        return out

    def rank(self, names: Sequence[str], costs: dict[str, float]) -> list[str]:
        """Cheapest first; costs equal within ``TIE_TOLERANCE`` (relative) are a tie, broken by the most free bytes,
        then the name. Two sums of the same terms in another order (the index's static part and its delta, a tree
        and a vector) differ in the last bits; a tie in the maths stays a tie in the ranking whichever way they
        were summed, so the cost source never changes a decision."""
        order = sorted(names, key=lambda n: (costs[n], n))
        out: list[str] = []
        i = 0
        while i < len(order):
            lead = costs[order[i]]
            j = i + 1
            while j < len(order) and costs[order[j]] - lead <= TIE_TOLERANCE * abs(lead):
                j += 1
            out.extend(sorted(order[i:j], key=lambda n: (-self.p.free_bytes(n), n)) if j > i + 1 else order[i:j])
            i = j
        return out

    def emit(self, command: PlanCommand) -> None:
        self.commands.append(command)

    def load(self, sid: SegmentId, tier: str, stage: int, reason: str, share: float | None,
             relative: bool = True, throttle: bool = True, copies: _Copies | None = None) -> bool:
        """One more copy of ``sid`` in ``tier``, if the throttle and a server's queue allow. ``copies``: the segment's
        ``loaded_in``, ``holders`` and ``pending`` entries as the caller read them since the last load (None: read
        them here)."""
        loaded = self.p.loaded_in.get(sid) if copies is None else copies[0]
        replica = bool(loaded) and loaded.get(tier, 0) > 0  # type: ignore[union-attr]  # p.is_replica, written out
        if replica and throttle and self.p.replica_loads[tier] >= self.limits.replication_throttle_limit:
            self.metrics[f"segment/replicationThrottled/count/{tier}"] += 1
            self.deferred.add(sid)
            return False
        name = self.pick(sid, tier, "loading", share, relative, copies)
        if name is None:
            self.metrics[f"segment/assignSkipped/count/{tier}"] += 1  # no server with room (or queue share) now
            self.deferred.add(sid)
            return False
        purpose: CommandPurpose = "replica" if replica else "loading"
        cid = self.p.plan_load(name, sid, purpose, self.now)
        key = self._assigned.get(tier)
        if key is None:
            key = self._assigned[tier] = f"segment/assigned/count/{tier}"
        metrics = self.metrics
        metrics[key] = metrics.get(key, 0) + 1
        self.commands.append(_new_command("load", name, sid, tier, stage, reason, replica, None, None, cid, None,
                                          purpose))  # emit, written out
        return True

    # -- stages 1-4: loading -----------------------------------------------------------
    def unreplicated(self, stage: int) -> None:
        """One copy of every segment served nowhere, primary tier first; never throttled.

        The segments a load rule wants copies of, newest first; those served (a copy loaded or queued) are skipped.
        A served segment stays served until stage 12, so the first pass finds the unserved ones (set arithmetic
        on the fold's indexes) and every pass visits those alone, in the same order: the same loads."""
        p = self.p
        todo = self._unserved
        if todo is None:
            unheld = self._unheld  # the start metrics' (holders change in no stage before this one)
            if unheld is None:
                unheld = self.members("load").difference(p.holders)
            self._unheld = None
            todo = _newest_first_order(unheld.difference(p.pending))
        left: list[SegmentId] = []  # what the next pass visits (in this order): the segments still unserved
        holders, pending, fixed, targets = p.holders, p.pending, self._fixed, self.targets
        for sid in todo:
            held, queued_on = holders.get(sid), pending.get(sid)
            if held or queued_on:  # served (p.anywhere)
                continue
            # no holder, so no loaded copy in any tier (loaded_in counts holders); valid until a load succeeds
            copies = (None, held, queued_on)
            for tier in (fixed.get(sid.data_source) or targets[sid]).primary_first:
                if self.load(sid, tier, stage, "unavailable: first copy", None, throttle=False, copies=copies):
                    break  # served now, so until stage 12: a revisit would skip it
            else:
                left.append(sid)
        self._unserved = left

    def broadcast(self, stage: int, share: float | None, relative: bool) -> None:
        for sid in sorted(self.members("broadcast"), key=_ID):
            for name in sorted(self.p.tier_of):
                if not self.can_take(name, sid):
                    continue
                if not self.room(name, "loading", share, relative):
                    self.deferred.add(sid)
                    continue
                tier = self.p.tier_of[name]
                cid = self.p.plan_load(name, sid, "broadcast", self.now)
                self.metrics[f"segment/assigned/count/{tier}"] += 1
                self.emit(PlanCommand("load", name, sid, tier, stage, "broadcast", False, command_id=cid,
                                         purpose="broadcast"))

    def replicate(self, stage: int, share: float | None, relative: bool) -> None:
        """Every load-rule segment short of its target in a tier, newest first, gets copies up to it; a segment
        served nowhere is stage 1's business (first copies before any second).

        Copies only grow before stage 12, so a segment at its target stays there: the first pass finds the short
        ones (set arithmetic, :meth:`short_segments`) and every pass visits those alone, in the same order."""
        todo = self._short
        if todo is None:
            todo = _newest_first_order(self.short_segments())
        left: list[SegmentId] = []  # what the next pass visits (in this order): the segments still short
        p = self.p
        holders, pending, loaded_in, pending_in = p.holders, p.pending, p.loaded_in, p.pending_in
        fixed, targets, reasons = self._fixed, self.targets, self._under
        for sid in todo:
            held, queued_on = holders.get(sid), pending.get(sid)
            if not held and not queued_on:  # served nowhere (not p.anywhere): stage 1's, perhaps in a later pass
                left.append(sid)
                continue
            short = False
            loaded, queued = loaded_in.get(sid), pending_in.get(sid)
            fresh = True  # held, queued_on, loaded, queued read since the segment's last load
            for tier, want in (fixed.get(sid.data_source) or targets[sid]).by_tier:
                if not fresh:  # p.copies(sid, tier).total, unboxed: read again after a load
                    held, queued_on = holders.get(sid), pending.get(sid)
                    loaded, queued = loaded_in.get(sid), pending_in.get(sid)
                    fresh = True
                need = want - (loaded.get(tier, 0) if loaded else 0) - (queued.get(tier, 0) if queued else 0)
                reason = reasons.get(tier)
                if reason is None:
                    reason = reasons[tier] = f"under-replicated in {tier}"
                copies: _Copies | None = (loaded, held, queued_on)  # load and pick read them, until a load succeeds
                while need > 0 and self.load(sid, tier, stage, reason, share, relative, copies=copies):
                    need -= 1
                    copies, fresh = None, False
                short = short or need > 0
            if short:
                left.append(sid)
        self._short = left

    def short_segments(self) -> set[SegmentId]:
        """The load-rule segments with fewer copies (loaded or queued) than their target in some tier."""
        p = self.p
        classes = self.classes("load")
        if self.scope is not None:  # a few segments: ask each (the per-tier sets would cost the whole cluster)
            loaded_in, pending_in = p.loaded_in, p.pending_in
            short: set[SegmentId] = set()
            for t, m in classes:
                wants = t.by_tier
                for sid in m:  # p.copies(sid, tier).total < want for some tier, unboxed
                    loaded, queued = loaded_in.get(sid), pending_in.get(sid)
                    for tier, want in wants:
                        if (loaded[tier] if loaded else 0) + (queued[tier] if queued else 0) < want:
                            short.add(sid)
                            break
            return short
        depth: dict[str, int] = {}
        for t, _ in classes:
            for tier, want in t.replicants.items():
                depth[tier] = max(depth.get(tier, 0), want)
        levels = {tier: self.copy_levels(tier, d) for tier, d in sorted(depth.items())}
        out: set[SegmentId] = set()
        for t, m in classes:
            for tier, want in t.replicants.items():
                out |= m - levels[tier][want - 1]
        return out

    def loading_stages(self, stage: int, share: float | None, relative: bool) -> None:
        """Stages 1, 2, 3-4 on the first pass; their revisits (6, 8) carry the revisit's number."""
        first = stage == 1
        self.unreplicated(stage)
        self.broadcast(2 if first else stage, share, relative)
        self.replicate(3 if first else stage, share, relative)

    # -- stages 5, 9: decommissioning ---------------------------------------------------
    def drain(self, stage: int, share: float | None) -> None:
        for name in sorted(self.p.decommissioning):
            tier = self.p.tier_of[name]
            held = self.p.loaded[name] if self.scope is None else self.p.loaded[name] & self.scope
            for sid in sorted((s for s in held if name in self.p.holders.get(s, ())), key=_ID):
                target = self.planned_target(sid)
                if target is None or target.kind != "load" or name in self.p.move_sources.get(sid, ()):
                    continue
                active = sum(1 for n in self.p.holders.get(sid, ()) if self.p.tier_of[n] == tier
                             and n not in self.p.decommissioning) + self.p.copies(sid, tier).pending
                if active >= target.replicants.get(tier, 0):
                    continue  # enough copies elsewhere: stage 12 drops this one
                if self.drained[tier] >= self.budget(tier)[1]:
                    self.metrics[f"segment/drainThrottled/count/{tier}"] += 1  # maxSegmentsToMove reached
                    self.deferred.add(sid)
                    continue
                dest = self.pick(sid, tier, "decommissioning", share, True)
                if dest is None:
                    self.metrics["segment/decommissioningStuck/count"] += 1
                    self.deferred.add(sid)
                    continue
                self.move(sid, name, dest, tier, stage, "decommissioning", f"draining {name}")
                self.drained[tier] += 1

    def budget(self, tier: str) -> tuple[int, int]:
        """The tier's (maxSegmentsToMove, moves reserved for draining) in this run. Drains and balancing moves
        together stay within maxSegmentsToMove, drains first (Druid 28's ``TierSegmentBalancer``): the drains
        reserved are the segments held on the tier's decommissioning servers, at most
        ``decommissioningMaxPercentOfMaxSegmentsToMove`` of maxSegmentsToMove, none without an active server;
        balancing moves get the rest. Computed for every tier at once after the first loading stages (as Druid
        computes them after its rules ran; :func:`balance_tier`: at its start), from the replicas loaded or
        queued on each tier's servers (smart loading's per-tier ``computeMaxSegmentsToMove``)."""
        if self._budgets is None:
            p, budgets = self.p, {}
            for t, names in p.tiers.items():
                count = sum(len(p.loaded[n]) + len(p.loading[n]) + len(p.dropping[n]) for n in names)
                cap = self.limits.max_segments_to_move_in(count)
                draining = sum(len(p.loaded[n]) - len(p.dropping[n]) for n in names if n in p.decommissioning)
                reserve = min(draining, self.limits.max_drains_in(cap), cap) if p.active.get(t) else 0
                budgets[t] = (cap, reserve)
            self._budgets = budgets
        return self._budgets.get(tier, (0, 0))

    def balance_cap(self, tier: str) -> int:
        """Balancing moves the tier may still make in this run: maxSegmentsToMove less the drains reserved."""
        cap, reserve = self.budget(tier)
        return cap - max(reserve, self.drained[tier])

    def move(self, sid: SegmentId, source: str, dest: str, tier: str, stage: int, purpose: Purpose,
             reason: str) -> None:
        move_id = self.p.plan_load(dest, sid, purpose, self.now, source)
        self.metrics[f"segment/moved/count/{tier}"] += 1
        self.emit(PlanCommand("move", dest, sid, tier, stage, reason, False, source, move_id, command_id=move_id,
                              purpose=purpose))

    # -- stages 7, 10, 11: balancing ------------------------------------------------------
    def balance_candidates(self, tier: str) -> Sequence[SegmentId]:
        """The segments an active server of the tier holds, in id order with O(log n) access by rank (the fold
        keeps this index). It is the same from the start of a run through stage 11 (holders change only by
        stage 12's drops), so every balancing stage draws from the run's starting placement (seed 004)."""
        ranked: Sequence[SegmentId] = self.p.balanceable.get(tier, ())
        return ranked

    def movable(self, sid: SegmentId, tier: str) -> bool:
        """A drawn candidate is balanced when it is used and its rule wants copies in the tier."""
        if sid not in self.p.used:
            return False
        target = self.target_of(sid)
        return target.kind == "load" and target.replicants.get(tier, 0) > 0

    def try_move(self, sid: SegmentId, tier: str, stage: int, share: float | None, relative: bool) -> str:
        """'moved', 'stay' or 'full' (a cheaper server exists but its queue is full)."""
        p = self.p
        best = num_best_servers(self.target_of(sid).replicants.get(tier, 1), p.active.get(tier, 0), self.log_base)
        holders = sorted(n for n in p.holders.get(sid, ()) if p.tier_of[n] == tier
                         and n not in p.decommissioning and n not in p.move_sources.get(sid, ()))
        if not holders or p.pending.get(sid):
            return "stay"
        # the reference walks the trees of the servers that can take the segment; the index answers for all
        dests = [n for n in p.tiers[tier] if n not in p.decommissioning and self.can_take(n, sid)] \
            if self.per_server_caches else []
        every = self.server_costs(tier, sid, holders, dests)
        staying = {h: every[h] for h in holders}
        # A server whose cost is at least every holder's bar can never be a destination, and every server ranked
        # after it costs at least as much: leaving such servers out of the ranking changes no outcome. Whether a
        # server can take the segment is asked in ranking order, of the few cheapest only.
        bar = max(c * (1 - TIE_TOLERANCE) for c in staying.values())
        costs = {n: c for n, c in every.items() if c < bar and n not in p.decommissioning}
        ranked: list[str] = []
        for n in self.rank(list(costs), costs):
            if len(ranked) == best:
                break
            if self.can_take(n, sid):
                ranked.append(n)
        blocked = False
        for holder in holders:
            for n in ranked:
                if not costs[n] < staying[holder] * (1 - TIE_TOLERANCE):
                    break
                if self.room(n, "balancing", share, relative):
                    self.move(sid, holder, n, tier, stage, "balancing", f"cheaper than {holder}")
                    return "moved"
                blocked = True
        return "full" if blocked else "stay"

    def balance(self, stage: int, share: float | None, relative: bool, record: bool) -> None:
        for _ in self.balance_steps(stage, share, relative, record):
            pass

    def balance_steps(self, stage: int, share: float | None, relative: bool, record: bool) -> Iterator[None]:
        """Stage 7 or 11, one step per candidate drawn (a :class:`BalancingRun` stops between any two steps and
        lets events in; the candidates are the ranked index as it is at each draw, so a segment announced or
        unannounced in between is seen as the fold has it)."""
        if not self.balancing:
            return
        for tier in sorted(self.p.tiers):
            if self.only_tier is not None and tier != self.only_tier:
                continue
            cap = self.balance_cap(tier)
            if self.moves_made[tier] >= cap:
                continue
            candidates = self.balance_candidates(tier)
            if not candidates:
                continue
            seed = f"{self.run_number}/{tier}/{stage}"
            visited = self.visited.setdefault(tier, set())
            window: deque[bool] = deque(maxlen=100)
            for i in _draws(seed, len(candidates)):
                if self.moves_made[tier] >= cap or tier not in self.p.tiers:
                    break
                candidates = self.balance_candidates(tier)  # the same index, unless a slice boundary passed
                if i >= len(candidates):
                    yield
                    continue  # the index shrank since the run drew its permutation
                sid = candidates[i]
                if sid in visited:
                    window.append(False)
                elif not self.movable(sid, tier):
                    yield
                    continue  # not a candidate: its rule does not load it here (stage 12 drops it) or unused
                else:
                    visited.add(sid)
                    outcome = self.try_move(sid, tier, stage, share, relative)
                    if outcome == "moved":
                        self.moves_made[tier] += 1
                    elif outcome == "full" and record:
                        self.to_be_balanced.setdefault(tier, []).append(sid)
                    window.append(outcome == "moved")
                yield
                if len(window) == 100 and sum(1 for ok in window if not ok) >= 80:
                    break

    def balance_blocked(self, stage: int) -> None:
        for _ in self.balance_blocked_steps(stage):
            pass

    def balance_blocked_steps(self, stage: int) -> Iterator[None]:
        """Stage 10, one step per segment retried."""
        if not self.balancing:
            return
        for tier in sorted(self.to_be_balanced):
            for sid in self.to_be_balanced[tier]:
                if self.moves_made[tier] >= self.balance_cap(tier) or tier not in self.p.tiers:
                    break
                if self.try_move(sid, tier, stage, None, False) == "moved":
                    self.moves_made[tier] += 1
                yield

    def balancing_steps(self) -> Iterator[None]:
        """The balancing stages of a run (7 within the balancing share, 10, then 11 with the full queue)."""
        yield from self.balance_steps(7, self.shares["balancing"], True, record=True)
        yield from self.balance_blocked_steps(10)
        yield from self.balance_steps(11, None, False, record=False)

    # -- stage 12-13: unloading -----------------------------------------------------------
    def unload(self, stage: int) -> None:
        p = self.p
        for sid in sorted(self.unload_candidates(), key=_ID):
            target = self.planned_target(sid)
            if sid not in p.used or target is None or target.kind == "drop":
                reason = "unused" if sid not in p.used or target is None else "drop rule"
                for name in sorted(n for n in p.tier_of if sid in p.loading[n]):
                    self.cancel(name, sid, stage, reason)
                for name in sorted(p.holders.get(sid, set())):
                    self.drop(name, sid, stage, reason)
                continue
            if sid not in p.segments or target.kind != "load":
                continue
            if any(p.copies(sid, t).total > target.replicants.get(t, 0) for t in p.tiers_with_copies(sid)):
                self.trim(sid, target.replicants, stage)

    def unload_candidates(self) -> set[SegmentId]:
        """The segments stage 12 may act on: in a scoped run, those of its scope that are unused, not under a load
        rule, or have more copies (loaded or queued) in a tier than their target there; in a full run, those with a
        copy or a queued
        load that are unused or under a drop rule, or have more copies in a tier than their target there (set
        arithmetic over the tiers' copies as stage 12 starts; what it does to one segment changes no other's
        copies, so the others it would visit do nothing)."""
        p = self.p
        if self.scope is not None:  # the scope, less the load-rule segments at or under their target in every tier
            out: set[SegmentId] = set()
            used, segments, loaded_in, pending_in = p.used, p.segments, p.loaded_in, p.pending_in
            for sid in self.scope:
                target = self.planned_target(sid)
                if sid not in used or target is None or target.kind != "load":
                    out.add(sid)  # unused, drop rule (every copy goes) or broadcast (unload skips those)
                    continue
                loaded, queued = loaded_in.get(sid), pending_in.get(sid)
                if sid not in segments or not (loaded or queued):
                    continue
                targeted = target.replicants  # a tier with a copy whose total (loaded + queued) is above its target:
                over = False
                if loaded:
                    for t, n in loaded.items():
                        if n + (queued[t] if queued else 0) > targeted.get(t, 0):
                            over = True
                            break
                if queued and not over:
                    for t, n in queued.items():
                        if n + (loaded[t] if loaded else 0) > targeted.get(t, 0):
                            over = True
                            break
                if over:
                    out.add(sid)
            return out
        everywhere: set[SegmentId] = set(p.holders)
        everywhere.update(p.pending)
        for name in p.tier_of:
            everywhere.update(p.loading[name])
        out = everywhere - p.used
        out |= everywhere & self.members("drop")
        classes = [(t, m) for t, m in self._classes.values() if t.kind == "load" and m]
        for tier in sorted(p.tiers):
            wants = [(t.replicants.get(tier, 0), m) for t, m in classes]
            if not wants:
                continue
            levels = self.copy_levels(tier, max(w for w, _ in wants) + 1)
            for want, m in wants:
                out |= m & levels[want]
        return out

    def cancel_on_decommissioning(self, stage: int) -> None:
        """Decommissioning servers get nothing new: their queued loads go before any assignment, so the
        segments are assigned elsewhere in this same run."""
        for name in sorted(self.p.decommissioning):
            queued = self.p.loading[name] if self.scope is None else self.p.loading[name].keys() & self.scope
            for sid in sorted(queued, key=_ID):
                self.cancel(name, sid, stage, f"{name} is decommissioning")

    def trim(self, sid: SegmentId, replicants: dict[str, int], stage: int) -> None:
        p = self.p
        tiers = p.tiers_with_copies(sid)
        reachable = {t: min(n, p.active.get(t, 0)) for t, n in replicants.items()}
        for tier in sorted(tiers):
            want = replicants.get(tier, 0)
            for name in sorted(n for n in p.pending.get(sid, set()) if p.tier_of[n] == tier):
                if p.copies(sid, tier).total <= want:
                    break
                self.cancel(name, sid, stage, f"over-replicated in {tier}")  # queued loads go first
            holders = {n for n in p.holders.get(sid, set()) if p.tier_of[n] == tier
                       and n not in p.move_sources.get(sid, ())}
            while holders and p.copies(sid, tier).loaded > want:
                name = min(holders, key=self.drop_rank)  # re-read after every drop: the projection moved
                if not self.safe_to_drop(sid, tier, reachable):
                    self.deferred.add(sid)
                    break
                self.drop(name, sid, stage, f"over-replicated in {tier}")
                holders.discard(name)

    def drop_rank(self, name: str) -> tuple[bool, int, int, str]:
        """Surplus copies go from decommissioning servers first, then from the fullest (least free bytes of the
        projection, then most segments held), name last: the projection after every queued drop decides."""
        p = self.p
        return (name not in p.decommissioning, p.free_bytes(name), len(p.dropping[name]) - len(p.loaded[name]), name)

    def safe_to_drop(self, sid: SegmentId, tier: str, reachable: dict[str, int]) -> bool:
        """Dropping one copy from ``tier`` keeps what the rules can reach with loaded copies."""
        p = self.p
        loaded = p.loaded_in.get(sid, Counter())
        if all(loaded[t] >= n for t, n in reachable.items()):
            return True
        return sum(loaded.values()) - 1 >= sum(reachable.values())

    def broadcast_only_decommissioning(self, stage: int) -> None:
        for name in sorted(self.p.decommissioning):
            held = [s for s in self.p.loaded[name] if name in self.p.holders.get(s, ())]
            if held and all(self.target(s).kind == "broadcast" for s in held if s in self.p.used):
                for sid in sorted(held, key=_ID):
                    self.drop(name, sid, stage, f"{name} is decommissioning")

    def cancel(self, name: str, sid: SegmentId, stage: int, reason: str) -> None:
        cid, cancels, item = self.p.plan_cancel(name, sid)
        self.metrics[f"segment/cancelled/count/{self.p.tier_of[name]}"] += 1
        self.emit(PlanCommand("cancel", name, sid, self.p.tier_of[name], stage, reason, False, item.source,
                              item.move_id, command_id=cid, cancels=cancels))

    def drop(self, name: str, sid: SegmentId, stage: int, reason: str) -> None:
        cid = self.p.plan_drop(name, sid, self.now)
        self.metrics[f"segment/dropped/count/{self.p.tier_of[name]}"] += 1
        self.emit(PlanCommand("drop", name, sid, self.p.tier_of[name], stage, reason, command_id=cid,
                              purpose="unloading"))

    # -- overshadowed ---------------------------------------------------------------------
    def mark_overshadowed(self) -> None:
        """Mark used segments unused that what is served overshadows (after ``millisToWaitBeforeDeleting``).

        A full run (or the first marking run after a start or after the wait passed) looks at every data source
        whose versions overlap. A scoped run looks only around the segments whose used flag or holders changed
        since the last marking run (``mark_pending``): whether a segment is overshadowed depends only on the
        used segments that share an instant with it, so the candidates are the used segments overlapping a
        changed one, each judged on a timeline of everything overlapping the candidates. Rules decide which
        segments need no replicas (they count as served); rule changes and the passing of time come with
        full runs, so the neighbourhoods of changed segments are all that can change in between. A sweep's
        marking slices (``mark_sources``) judge their data sources whole: over the sweep, every data source."""
        p = self.p
        if not self.marking or self.now < self.start + self.config.millis_to_wait_before_deleting:
            if p.mark_all:
                p.mark_pending.clear()  # a full marking comes first anyway
            return
        pending, p.mark_pending = p.mark_pending, set()
        if self.scope is None or (p.mark_all and self.mark_sources is None):
            p.mark_all = False
            by_source = self._used_by_source  # the run's used segments: nothing left the used set since
            if by_source is None and len(p.used) == sum(len(index) for index in p.used_index.values()):
                by_source = {source: list(index.keyed()) for source, index in p.used_index.items()}
            if by_source is None:
                by_source = {}
                for sid in p.used:
                    by_source.setdefault(sid.data_source, []).append(sid)
            for source, sids in sorted(by_source.items()):
                if _versions_overlap(sids):  # asked of the ids: descriptors only where something may be hidden
                    self._mark_in(source, [p.segments[sid] for sid in sids], None)
            return
        if self.mark_sources is not None:  # these sources whole (a full marking's part), the others around changes
            judged = self.mark_sources
            for source in sorted(judged):
                index = p.used_index.get(source)
                if index is not None:
                    sids = list(index.keyed())
                    if _versions_overlap(sids):
                        self._mark_in(source, [p.segments[sid] for sid in sids], None)
            pending = {sid for sid in pending if sid.data_source not in judged}
        candidates: dict[str, set[SegmentId]] = {}
        for sid in pending:
            index = p.used_index.get(sid.data_source)
            seg = p.segments.get(sid)
            if index is not None and seg is not None:
                candidates.setdefault(sid.data_source, set()).update(index.overlapping(seg.interval))
        for source, near in sorted(candidates.items()):
            index = p.used_index[source]
            context = set(near)
            for sid in near:
                context.update(index.overlapping(p.segments[sid].interval))
            self._mark_in(source, [p.segments[sid] for sid in sorted(context)], near)

    def _mark_in(self, source: str, segments: list[SegmentDescriptor], only: set[SegmentId] | None) -> None:
        if not _versions_overlap(segments):
            return  # nothing can be overshadowed
        online: dict[SegmentId, tuple[SegmentDescriptor, Iterable[str]]] = {}
        for seg in segments:
            sid = seg.id
            servers = sorted(self.p.holders.get(sid, ()))
            target = self.target_of(sid)
            if not servers and target is not None and target.kind == "load" and target.total == 0:
                servers = ["(needs no replicas)"]
            if servers:
                online[sid] = (seg, servers)
        timeline = Timeline.build(source, segments, online)
        for sid in timeline.overshadowed_used():
            if only is None or sid in only:
                self.unused.append((sid, "overshadowed by served segments"))

    # -- the run ----------------------------------------------------------------------------
    def metrics_at_start(self) -> None:
        if self.scope is None:
            self._metrics_at_start_full()
            return
        holders, loaded_in, metrics = self.p.holders, self.p.loaded_in, self.metrics
        unavailable = 0
        for sid, target in self.targets.items():
            if target.kind != "load" or not target.replicants:  # (a load target's replicants are all above 0)
                continue
            if not holders.get(sid):
                unavailable += 1
                continue  # no holder: no loaded copy in any tier
            loaded = loaded_in.get(sid)
            for tier, want in target.by_tier:
                if want > 1 and loaded and 0 < loaded[tier] < want:  # p.copies(sid, tier).loaded, unboxed
                    metrics[f"segment/underReplicated/count/{tier}"] += 1
        if unavailable:
            metrics["segment/unavailable/count"] += unavailable

    def _metrics_at_start_full(self) -> None:
        """:meth:`metrics_at_start` for every segment at once: set arithmetic over the tiers' loaded copies."""
        p = self.p
        classes = self.classes("load")
        # stage 1 starts from the same set (no stage before it changes a holder): computed once
        self._unheld = self.members("load").difference(p.holders)
        unavailable = len(self._unheld)
        if unavailable:
            self.metrics["segment/unavailable/count"] += unavailable
        depth: dict[str, int] = {}
        for t, _ in classes:
            for tier, want in t.replicants.items():
                depth[tier] = max(depth.get(tier, 0), want)
        for tier, d in sorted(depth.items()):
            if d < 2:
                continue  # only targets of 2 or more copies can be under-replicated with a copy loaded
            levels = self.copy_levels(tier, d, pending=False)
            under = sum(len(m & levels[0]) - len(m & levels[want - 1])
                        for t, m in classes for tt, want in t.replicants.items() if tt == tier and want > 1)
            if under:
                self.metrics[f"segment/underReplicated/count/{tier}"] += under

    def total_cost(self) -> float:
        total = 0.0
        for tier, names in self.p.tiers.items():
            del tier
            for n in names:
                cache = self.p.cache(n)
                for sid in cache.segment_ids():
                    total += cache.cost_of(self.p.segment(sid))
        return total / 2

    def tier_cost(self, tier: str) -> float:
        """The joint cost of every pair of segments sharing a server of the tier (projected placement)."""
        total = 0.0
        for n in self.p.tiers.get(tier, []):
            cache = self.p.cache(n)
            for sid in cache.segment_ids():
                total += cache.cost_of(self.p.segment(sid))
        return total / 2

    def run(self) -> Plan:
        p = self.p
        unknown = tuple(self.rules.unknown_tiers(set(p.tiers)))
        if self.config.pause_coordination:
            return Plan((), (), {"coordination/paused": 1}, unknown)
        self.metrics_at_start()
        cost_before = self.total_cost() if self.compute_cost else None
        self.cancel_on_decommissioning(0)                                           # 0
        loading = self.shares["loading"]
        self.loading_stages(1, loading, True)                                       # 1-4
        if self.balancing or p.decommissioning:
            self.budget("")  # every tier's move budget, as of the end of the first loading stages
        self.drain(5, self.shares["decommissioning"])                              # 5
        self.loading_stages(6, loading + self.shares["decommissioning"], False)    # 6
        self.balance(7, self.shares["balancing"], True, record=True)               # 7
        self.loading_stages(8, None, False)                                        # 8
        self.drain(9, self.decommissioning_max)                                     # 9
        self.balance_blocked(10)                                                    # 10
        self.balance(11, None, False, record=False)                                 # 11
        self.unload(12)                                                             # 12
        self.broadcast_only_decommissioning(13)                                     # 13
        self.mark_overshadowed()
        self.unused.extend((sid, "drop rule") for sid in sorted(self.members("drop"), key=_ID))
        for sid, _reason in self.unused:
            p.mark_unused(sid)
        metrics: dict[str, object] = {}
        for key, value in sorted(self.metrics.items()):
            _put(metrics, key, value)
        if self.scope is None or self.balancing or self.marking:  # full and timer runs: not a publish's own run
            for name in sorted(p.tier_of):  # O(servers): an event's scoped run costs its segments alone
                _put(metrics, f"segment/loadQueue/count/{name}", p.queue_size(name))
                _put(metrics, f"segment/dropQueue/count/{name}", len(p.dropping[name]))
                _put(metrics, f"segment/loadQueue/size/{name}", p.loading_bytes[name])
        metrics["segment/markedUnused/count"] = len(self.unused)
        if cost_before is not None:
            metrics["balancer/cost/before"] = cost_before
            metrics["balancer/cost/after"] = self.total_cost()
        metrics["decisions"] = len(self.commands) + len(self.unused)
        return Plan(tuple(self.commands), tuple(self.unused), metrics, unknown, frozenset(self.deferred))


def _draws(seed: str, n: int) -> Iterator[int]:
    """A pseudo-random permutation of ``range(n)`` for ``seed`` ("run/tier/stage"), drawn lazily in O(1) per
    element (a sparse Fisher-Yates shuffle): a balancing run that stops after a few hundred draws costs those
    draws, not ``n``.

    Draw ``k`` swaps position ``k`` with ``k + h mod (n - k)`` where ``h`` is the first 8 bytes of
    ``blake2b(seed/k)``: the order is a pure function of (run, tier, stage) and the candidates' ids (they are
    ranked in segment id order), the same on every machine, Python and NumPy build (NumPy's generators promise
    no stream stability across versions). Hashing each candidate's id instead and sorting would give the same
    guarantee but cost O(n log n) per run even when the run stops early. The modulo bias (below 2**-40 for
    n < 2**24) is irrelevant to balancing.

    >>> sorted(_draws("1/hot/7", 5))
    [0, 1, 2, 3, 4]
    >>> list(_draws("1/hot/7", 6)) == list(_draws("1/hot/7", 6)) != list(_draws("2/hot/7", 6))
    True
    """
    moved: dict[int, int] = {}
    prefix = seed.encode() + b"/"
    for k in range(n):
        h = int.from_bytes(hashlib.blake2b(prefix + str(k).encode(), digest_size=8).digest(), "big")
        j = k + h % (n - k)
        at_j = moved.get(j, j)
        moved[j] = moved.pop(k, k)
        yield at_j


def _versions_overlap(segments: Sequence[SegmentDescriptor] | Sequence[SegmentId]) -> bool:
    """Whether two segments of different time chunks (interval and version) share an instant; when none do,
    nothing can overshadow anything (partitions of one chunk never hide each other).

    The distinct chunks in (start, end) order: one shares an instant with an earlier one exactly when it starts
    before the latest end so far (two chunks of one interval: when the interval is not empty). Vectorised: a
    data source of a million hourly segments costs two reads of their bounds in C and a few NumPy passes; the set
    of chunks is only built when some ids share an interval (partitions, or versions of one interval).

    >>> from events import Interval
    >>> ids = [SegmentId("w", Interval(0, 10), "v1"), SegmentId("w", Interval(10, 20), "v1", 1)]
    >>> _versions_overlap(ids), _versions_overlap(ids + [SegmentId("w", Interval(5, 15), "v2")])
    (False, True)
    >>> _versions_overlap(ids + [SegmentId("w", Interval(0, 10), "v0")])
    True
    >>> _versions_overlap(ids + [SegmentId("w", Interval(0, 10), "v1", 2)])  # a partition of a chunk: no overlap
    False
    """
    n = len(segments)
    if n < 2:
        return False
    # first without building the chunks: every id's interval in C (no per-id Python step); when no two ids share an
    # interval every id is its own chunk and the test below is the same one on the same (start, end) pairs
    start = np.fromiter(map(_START, segments), dtype=np.int64, count=n)
    end = np.fromiter(map(_END, segments), dtype=np.int64, count=n)
    order = np.lexsort((end, start))
    start, end = start[order], end[order]
    if not np.any((start[1:] == start[:-1]) & (end[1:] == end[:-1])):
        return bool(np.any(start[1:] < np.maximum.accumulate(end)[:-1]))
    chunks = set(map(_CHUNK, segments))  # ids sharing an interval: partitions of one chunk, or versions of it
    if len(chunks) < 2:
        return False
    starts, ends, _versions = zip(*chunks, strict=True)
    start = np.array(starts, dtype=np.int64)
    end = np.array(ends, dtype=np.int64)
    order = np.lexsort((end, start))
    start, end = start[order], end[order]
    return bool(np.any(start[1:] < np.maximum.accumulate(end)[:-1]))


def _put(metrics: dict[str, object], key: str, value: int) -> None:
    """'segment/assigned/count/hot' -> metrics['segment/assigned/count'] = {'hot': n, ...}; plain keys stay flat."""
    parts = key.split("/")
    if len(parts) == 4:
        name = "/".join(parts[:3])
        bucket = metrics.setdefault(name, {})
        assert isinstance(bucket, dict)
        bucket[parts[3]] = value
    else:
        metrics[key] = value


def plan(view: ClusterView, compute_cost: bool = True, *, balance: bool = True,
         shelf: CostCacheShelf | None = None) -> Plan:
    """One coordinator run over a snapshot of the cluster (the reference: every segment is looked at).

    ``balance=False`` skips the balancing stages 7, 10 and 11 (while the Spark balancer runs, moves come
    from it alone); every other stage is unchanged. ``shelf`` keeps the per-server cost caches between runs
    (reconciled to each run's projected placement): the same plan, with cost work proportional to what
    changed since the last run.
    """
    state = view.placement()
    if shelf is not None:
        shelf.forget(state.tier_of)
        for name in sorted(state.tier_of):
            state.caches[name] = shelf.cache_for(name, (state.segments[s] for s in state.projected_segments(name)))
    return plan_state(state, view.now, view.run, view.coordinator_start, compute_cost, balance=balance)


def plan_state(state: PlacementState, now: int, run: int, start: int, compute_cost: bool = False, *,
               balance: bool = True, scope: set[SegmentId] | None = None, mark_overshadowed: bool = True,
               per_server_caches: bool = False, drained: Counter[str] | None = None,
               mark_sources: Collection[str] | None = None) -> Plan:
    """One run over a live placement state, which it updates with every decision (the commands are folded in
    with their ids, sent at ``now``; marks leave the used set).

    ``scope=None`` is a full run. With a scope (the segments an event touched, plus the segments earlier runs
    left short: ``Plan.deferred``), the per-segment stages (1-4, 5, 6, 8, 9, 12 and the cancels of stage 0)
    look at those segments alone, under the same throttles and queue shares as a full run: a publish costs its
    own loading decisions, not the cluster's. Balancing (7, 10, 11) and marking overshadowed segments unused
    look at the whole cluster whenever asked for (``balance``, ``mark_overshadowed``). ``per_server_caches``: the
    reference cost source (see :meth:`_Run.server_costs`), the same decisions more slowly. ``drained``: the
    drains (stages 5, 9) already made per tier by earlier runs that share this run's ``maxSegmentsToMove``
    budget (the slices of one :class:`~coordinator.planner.sweep.Sweep`), counted on by this run in place.
    ``mark_sources`` (a scoped run that marks): data sources judged whole, as a full run judges every one (a
    sweep's marking slices), besides the neighbourhoods of what changed in the others.
    """
    return _Run(state, now=now, run=run, start=start, compute_cost=compute_cost, balancing=balance, scope=scope,
                mark_overshadowed=mark_overshadowed, per_server_caches=per_server_caches, drained=drained,
                mark_sources=mark_sources).run()


def balance_tier(view: ClusterView, tier: str, caches: dict[str, ServerCostCache] | None = None,
                 compute_cost: bool = False) -> Plan:
    """Seed 004's balancing stages alone (7 within the balancing share, 10, then 11 with the full queue) for one
    tier of a snapshot: :func:`balance_state` on the snapshot's placement, i.e. the same code and the same seeded
    draws as :func:`plan`, whose moves it returns for a view in which no other stage has anything to do (every
    segment at its target replication, nothing to drain).

    ``caches`` (optional, per server of the tier) lets a caller keep cost caches alive across runs: a cache
    given must hold the server's *projected* placement (loaded minus queued drops and move sources, plus
    queued loads); missing ones are built; on return the dict holds every server's cache *after* the moves
    (the placement the next view will project, once the moves are queued in it).

    >>> from coordinator.planner.cluster import Server, ServerState
    >>> from coordinator.rules.ruleset import RuleSet
    >>> from events import Interval, SegmentDescriptor
    >>> segs = [SegmentDescriptor("wiki", Interval(h * 3_600_000, (h + 1) * 3_600_000), "v1") for h in range(4)]
    >>> servers = {"a": ServerState(Server("a", "hot", 10**9), frozenset(s.id for s in segs)),
    ...            "b": ServerState(Server("b", "hot", 10**9))}
    >>> rules = RuleSet.parse({"_default": [{"type": "loadForever", "tieredReplicants": {"hot": 1}}]})
    >>> view = ClusterView(0, servers, {s.id: s for s in segs}, frozenset(s.id for s in segs), rules)
    >>> [(c.type, c.source, c.server) for c in balance_tier(view, "hot").commands]
    [('move', 'a', 'b'), ('move', 'a', 'b')]
    """
    state = view.placement()
    names = state.tiers.get(tier, [])
    if caches:
        state.caches.update((n, c) for n, c in caches.items() if n in names)
    out = balance_state(state, tier, now=view.now, run=view.run, start=view.coordinator_start,
                        compute_cost=compute_cost)
    if caches is not None:
        caches.clear()
        caches.update((n, state.cache(n)) for n in names)
    return out


def balance_state(state: PlacementState, tier: str, *, now: int, run: int, start: int | None = None,
                  compute_cost: bool = False) -> Plan:
    """The balancing stages (7, 10, 11) for one tier of a live placement state, which gets the moves folded in
    (as :func:`plan_state` does). Cost: O(draws x servers x log n) with the fold's candidate index and cost
    caches (built on first use, then kept current by the fold), never a pass over the tier's segments; a run
    draws at most ``maxSegmentsToMove`` successes plus the failures the 80-of-100 window allows.

    Metrics: the tier's ``segment/moved/count``, its ``balancer/cost/before|after`` when ``compute_cost``
    (O(n log n)).
    """
    if state.config.pause_coordination:
        return Plan((), (), {"coordination/paused": 1})
    r = _Run(state, now=now, run=run, start=now if start is None else start, compute_cost=compute_cost,
             only_tier=tier, scope=set(), mark_overshadowed=False)
    cost_before = r.tier_cost(tier) if compute_cost else None
    r.balance(7, r.shares["balancing"], True, record=True)
    r.balance_blocked(10)
    r.balance(11, None, False, record=False)
    metrics: dict[str, object] = {"segment/moved/count": {tier: r.moves_made[tier]}}
    if cost_before is not None:
        metrics["balancer/cost/before"] = cost_before
        metrics["balancer/cost/after"] = r.tier_cost(tier)
    metrics["decisions"] = len(r.commands)
    return Plan(tuple(r.commands), (), metrics)


Planner = Callable[[ClusterView], Plan]
