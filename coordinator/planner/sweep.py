"""The periodic full run taken in slices: a *sweep* walks every segment in chunks, each chunk a scoped run.

An incremental planner looks at every segment at least every ``FULL_RUN_EVERY_MS`` (period rules move segments
between rules as time passes; a run left something short that no event brings back). At a million segments one
full run holds the planner's thread for about 20 s, and every publish arriving meanwhile waited for it. A
:class:`Sweep` does the same work in **slices**: :meth:`Sweep.next_slice` hands out the next ``size`` segments,
the caller runs :func:`~coordinator.planner.planner.plan_state` with that chunk as its scope (the stages a full
run does for those segments, 0-6, 8, 9, 12, 13, under the same throttles and queue shares: those are read from the
live placement) and folds and plans events between any two slices.

**Order.** Data sources in name order; within one, its used segments newest first (the loading stages' order,
so the first chunks take the newest segments, as a full run's stage 1 does). A source's order is computed when the
sweep reaches it, from the fold's used index as it is then; segments published into a source after that are
planned by their own runs, not by this sweep. With the last used segments, the **tail**: every segment with a copy
or a queued load that is not used (what stage 12 drops as unused), and any used segment the used index misses.
Then the **marking** slices: data sources in name order, whole sources of at least ``MARK_FACTOR * size`` used
segments in all per slice (judging a source whose versions do not overlap reads its ids' bounds and no more: far
cheaper per segment than planning; the factor was not tuned apart), with an empty scope; the last of them is the
sweep's last slice (``final``). A data source is never split: one of a million segments makes one slice sort a
million ids (its newest-first order: 0.4 s of CPU per 200k ids as measured in docs/planner.md) and one marking
slice judge them all (not measured).

**What is whole-cluster in a full run**, and where the sweep does it:

- per segment (stages 0-6, 8, 9, 12, the drop-rule marks): in the chunk holding the segment;
- the drain budget (``maxSegmentsToMove`` less balancing, stages 5 and 9): one :attr:`drained` counter for the
  whole sweep, passed to every slice's run, so a sweep drains no more than one full run;
- stage 13 (broadcast-only decommissioning servers emptied): every scoped run does it whole (O(their holdings));
- marking overshadowed segments unused: every data source judged whole, as the full run did, a few per marking
  slice (``mark_sources``); slices before them do not mark (the timer's own runs mark around what changed
  meanwhile). :attr:`Sweep.judged` says whether every marking slice could judge (``millisToWaitBeforeDeleting``
  had passed): then the sweep did what the state's ``mark_all`` asks for;
- replication throttle, queue limits and shares: state, not run, counters; the same in every slice.

**Progress** is the cursor (``source``, ``after``): every segment of the sources before ``source`` was handed
out, and of ``source`` those up to ``after`` in its newest-first order (``after`` None: all of it); ``tail``: the
used segments and the tail are done, and ``marked``: the data sources up to it were judged. It is a pure value
(:meth:`progress`, stored by the caller with the slice's effects), and a sweep rebuilt from it (:meth:`resume`) on
the same state hands out the same chunks as the one that stored it.

>>> from coordinator.planner.cluster import ClusterView, Server, ServerState
>>> from coordinator.rules.ruleset import RuleSet
>>> from events import Interval, SegmentDescriptor
>>> segs = [SegmentDescriptor(ds, Interval(h * 3_600_000, (h + 1) * 3_600_000), "v1") for ds in "ab" for h in range(3)]
>>> servers = {"s": ServerState(Server("s", "hot", 10**9))}
>>> rules = RuleSet.parse({"_default": [{"type": "loadForever", "tieredReplicants": {"hot": 1}}]})
>>> state = ClusterView(0, servers, {s.id: s for s in segs}, frozenset(s.id for s in segs), rules).placement()
>>> sweep = Sweep(run=1, started=0)
>>> first = sweep.next_slice(state, 4)
>>> sorted((s.data_source, s.interval.start // 3_600_000) for s in first.scope), first.mark_sources, first.final
([('a', 0), ('a', 1), ('a', 2), ('b', 2)], None, False)
>>> again = Sweep.resume(sweep.progress())
>>> rest = again.next_slice(state, 4)
>>> sorted((s.data_source, s.interval.start // 3_600_000) for s in rest.scope), rest.mark_sources, again.tail
([('b', 0), ('b', 1)], None, True)
>>> again.next_slice(state, 4), again.done
(SweepSlice(scope=set(), mark_sources=('a', 'b'), final=True), True)
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from collections import Counter
from typing import Any, NamedTuple

from coordinator.placement.state import PlacementState
from coordinator.planner.planner import _newest_first, _newest_first_order
from events.segment import SegmentId

SWEEP_CHUNK = 4000  # segments a sweep slice plans (docs/planner.md, "The periodic full run as a sweep")
MARK_FACTOR = 10  # a marking slice judges whole data sources of about this many times a chunk's segments
_Key = tuple[int, int, str, int, str]


class SweepSlice(NamedTuple):
    """One slice: the segments to plan (the run's scope), the data sources to judge whole for overshadowed
    segments (None: the run does not mark), and whether it is the sweep's last."""

    scope: set[SegmentId]
    mark_sources: tuple[str, ...] | None
    final: bool


class Sweep:
    """One periodic full run in slices over a live :class:`PlacementState` (see the module docstring)."""

    def __init__(self, *, run: int, started: int) -> None:
        self.run_number = run  # sweeps begun by the caller (informational: a sweep seeds nothing)
        self.started = started  # the time it began: the next is due FULL_RUN_EVERY_MS after
        self.source: str | None = None
        self.after: _Key | None = None
        self.tail = False  # the used segments and the tail were handed out: marking slices follow
        self.marked: str | None = None  # the last data source judged by a marking slice
        self.judged = True  # every marking slice so far judged (False: one came before the wait for deleting)
        self.done = False
        self.drained: Counter[str] = Counter()  # drains made by its slices, per tier (one budget for the sweep)
        self.slices = 0
        self._sources: list[str] | None = None  # the sources left, in name order, from the first needed
        self._next_source = 0
        self._order: list[SegmentId] | None = None  # the current source's used segments, newest first
        self._at = 0
        self._mark_names: list[str] | None = None  # the sources left to judge, in name order
        self._next_mark = 0

    def progress(self) -> dict[str, Any]:
        """The cursor and counters as a JSON value (:meth:`resume` takes it back)."""
        return {"run": self.run_number, "started": self.started, "source": self.source,
                "after": None if self.after is None else list(self.after), "tail": self.tail,
                "marked": self.marked, "judged": self.judged,
                "drained": dict(sorted(self.drained.items())), "slices": self.slices}

    @classmethod
    def resume(cls, progress: dict[str, Any]) -> Sweep:
        sweep = cls(run=progress["run"], started=progress["started"])
        sweep.source, sweep.tail, sweep.slices = progress["source"], progress["tail"], progress["slices"]
        sweep.marked, sweep.judged = progress["marked"], progress["judged"]
        after = progress["after"]
        sweep.after = None if after is None else (int(after[0]), int(after[1]), str(after[2]), int(after[3]),
                                                  str(after[4]))
        sweep.drained.update(progress["drained"])
        return sweep

    def next_slice(self, state: PlacementState, size: int) -> SweepSlice:
        """The next slice: at most ``size`` used segments (``size`` >= 1; the tail with the last of them), or once
        they are done, the next data sources to judge for overshadowed segments; the last sets :attr:`done`. The
        cursor moves past what it hands out."""
        if size < 1:
            raise ValueError(f"size: at least 1, got {size}")
        if self.done:
            return SweepSlice(set(), None, True)
        self.slices += 1
        if self.tail:
            return self._marking(state, size * MARK_FACTOR)
        chunk: list[SegmentId] = []
        while len(chunk) < size:
            if self._order is None and not self._enter(state):
                break
            assert self._order is not None
            take = self._order[self._at:self._at + size - len(chunk)]
            chunk.extend(take)
            self._at += len(take)
            if self._at >= len(self._order):
                self._order, self.after = None, None  # the whole source handed out
            elif take:
                self.after = _newest_first(take[-1])
        out = set(chunk)
        if self._order is None and not self._more_sources(state):
            self.tail = True  # the last source ended with this chunk: the tail goes with it
            out |= self._tail(state)
        return SweepSlice(out, None, False)

    def _marking(self, state: PlacementState, budget: int) -> SweepSlice:
        """Whole data sources after :attr:`marked`, in name order, until they hold ``budget`` used segments."""
        if self._mark_names is None:  # from the cursor; a source first published later is judged around its changes
            names = sorted(state.used_index)
            self._mark_names = names[0 if self.marked is None else bisect_right(names, self.marked):]
        names, count = self._mark_names, 0
        taken: list[str] = []
        while self._next_mark < len(names) and count < budget:
            name = names[self._next_mark]
            self._next_mark += 1
            index = state.used_index.get(name)
            if index is not None:
                taken.append(name)
                count += len(index)
        if taken:
            self.marked = taken[-1]
        self.done = self._next_mark >= len(names)
        return SweepSlice(set(), tuple(taken), self.done)

    def _more_sources(self, state: PlacementState) -> bool:
        names = self._names(state)
        return any(name in state.used_index for name in names[self._next_source:])

    def _names(self, state: PlacementState) -> list[str]:
        if self._sources is None:  # from the cursor: the current source again when it is only partly done
            names = sorted(state.used_index)
            if self.source is None:
                first = 0
            elif self.after is None:
                first = bisect_right(names, self.source)
            else:
                first = bisect_left(names, self.source)
            self._sources, self._next_source = names[first:], 0
        return self._sources

    def _enter(self, state: PlacementState) -> bool:
        """Move to the next source with something left to hand out (False: none)."""
        names = self._names(state)
        while self._next_source < len(names):
            name = names[self._next_source]
            self._next_source += 1
            index = state.used_index.get(name)
            if index is None or not len(index):
                continue
            order = _newest_first_order(index.keyed())
            at = 0
            if name == self.source and self.after is not None:  # resumed inside it
                at = bisect_right(order, self.after, key=_newest_first)
            if at >= len(order):
                continue
            self._order, self._at, self.source, self.after = order, at, name, None
            return True
        return False

    @staticmethod
    def _tail(state: PlacementState) -> set[SegmentId]:
        """The segments a full run looks at beyond the used ones in the used index: copies and queued loads of
        unused segments, and used segments the index misses (none while every used segment's descriptor is
        known). O(copies) in set operations."""
        used = state.used
        out: set[SegmentId] = state.holders.keys() - used  # key views: the stored hashes, no set of every copy
        out |= state.pending.keys() - used
        for name in state.tier_of:
            loading = state.loading[name]
            if loading:
                out |= loading.keys() - used
        if len(state.used) != sum(len(index) for index in state.used_index.values()):
            out.update(sid for sid in state.used
                       if sid not in state.used_index.get(sid.data_source, ()))
        return out
