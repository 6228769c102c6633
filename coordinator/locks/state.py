"""The lockbox's state and its fold over the decision log (``locks`` topic).

``LockboxState.apply(event)`` is the only way state changes, both when the
lockbox decides (it applies each decision as it emits it) and on replay; so
folding the emitted decisions over an empty state rebuilds the same state,
except the waiting requests, which are never persisted (tasks re-send them).

State is partitioned by data source (the ``locks`` topic is keyed by it):
a decision about one data source reads the task registry and that data
source's part only.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from itertools import islice
from typing import Any

from coordinator.locks.offsets import plus
from coordinator.timeline.index import IntervalIndex
from events.interval import Interval
from events.locks import (
    LockGranted,
    LockReleased,
    LockRevoked,
    PublishAccepted,
    SegmentAllocated,
    SegmentsImported,
    TaskDeregistered,
    TaskLock,
    TaskRegistered,
)
from events.registry import Event
from events.segment import OVERWRITE_PARTITION_START, SegmentDescriptor, SegmentId
from events.tasks import LockRequested

ChunkVersion = tuple[int, int, str]  # (interval start, interval end, version)
AllocationKey = tuple[str, str, str]


@dataclass(frozen=True, slots=True)
class TaskInfo:
    task_id: str
    group_id: str
    task_type: str
    data_source: str
    priority: int


@dataclass(frozen=True, slots=True)
class Waiter:
    """A lock request waiting for conflicting locks to go; ``at`` is its event time (for its version)."""

    request: LockRequested
    at: int


def overwrites(lock: TaskLock) -> bool:
    """Whether allocations under ``lock`` overwrite (write its version): REPLACE locks, and exclusive
    timeChunk locks the task requested itself (Druid's batch overwrite); the others append."""
    return lock.lock_type == "replace" or (lock.lock_type == "exclusive" and lock.granularity == "timeChunk"
                                           and not lock.for_allocation)


@dataclass
class SourceState:
    """One data source's locks, published segments, allocations and stream metadata."""

    locks: dict[str, TaskLock] = field(default_factory=dict)  # live: granted, not released (revoked included)
    holders: dict[str, frozenset[str]] = field(default_factory=dict)  # lock id -> task ids holding it
    lock_seq: int = 0
    segments: dict[SegmentId, SegmentDescriptor] = field(default_factory=dict)  # published
    allocations: dict[AllocationKey, SegmentAllocated] = field(default_factory=dict)
    metadata: Any = None  # stream offsets committed with the last publish
    appended_under: dict[str, tuple[SegmentDescriptor, ...]] = field(default_factory=dict)  # replace lock -> appends
    committed_replaces: frozenset[str] = frozenset()
    waiters: list[Waiter] = field(default_factory=list)
    # (start, end, version) of every chunk a REPLACE publish committed: appends committed later, at an
    # older version inside one of these, are upgraded into it (the replace lock may be gone by then).
    replace_chunks: frozenset[ChunkVersion] = frozenset()
    # ids of overwriting locks (see :func:`overwrites`) released by their last holder while a running task's
    # allocation was made under them: that allocation stays (a repeated request gets its id back) but never
    # steers an appending allocation again, whatever locks its task holds later (an overwriting version is not
    # data until it commits). Kept only while such an allocation of a running task remains.
    released_overwrites: frozenset[str] = frozenset()
    # group id -> the tasks of that group that allocated here (running or ended): when the group's last
    # running task ends, their allocations are deleted (Druid deletes a task allocator's pending segments)
    allocators: dict[str, frozenset[str]] = field(default_factory=dict)
    # derived from ``segments`` (never stored, not compared): the partitions of each chunk and the segments by
    # interval, so a publish's checks cost its own segments' neighbourhood, not the data source's size
    chunk_partitions: dict[ChunkVersion, set[int]] = field(init=False, compare=False, repr=False)
    by_interval: IntervalIndex[SegmentId, SegmentDescriptor] = field(init=False, compare=False, repr=False)
    # derived from ``segments`` and ``allocations`` (never stored, not compared): the next root and overwrite
    # (Druid's numbered_overwrite, from 32768) partition id of each (interval, version), one above every
    # published id and every id an allocation record names, as Druid's createNewSegment counts used and pending
    # segments. The counters are pruned with the allocation records: an id allocated to a group that went idle
    # and never published may be handed out again (none of its tasks can publish any more), as in Druid.
    next_partition: dict[ChunkVersion, int] = field(init=False, compare=False, repr=False)
    next_overwrite: dict[ChunkVersion, int] = field(init=False, compare=False, repr=False)

    def __post_init__(self) -> None:
        self.chunk_partitions = {}
        self.by_interval = IntervalIndex()
        self.next_partition, self.next_overwrite = {}, {}
        for seg in self.segments.values():
            self._index(seg)
        for a in self.allocations.values():
            self.reserve(a.segment)

    def _index(self, seg: SegmentDescriptor) -> None:
        iv = seg.interval
        self.chunk_partitions.setdefault((iv.start, iv.end, seg.version), set()).add(seg.partition_id)
        self.by_interval.add(seg.id, iv, seg)
        self.reserve(seg)

    def record_allocation(self, key: AllocationKey, event: SegmentAllocated) -> None:
        """An allocation record (the only way ``allocations`` grows: the partition counters follow)."""
        self.allocations[key] = event
        self.reserve(event.segment)

    def drop_allocations(self, tasks: frozenset[str]) -> None:
        """Delete the allocation records of ``tasks``; the counters of their chunks fall back to what the
        published segments and the remaining records name."""
        kept: dict[AllocationKey, SegmentAllocated] = {}
        touched: set[ChunkVersion] = set()
        for k, a in self.allocations.items():
            if a.task_id in tasks:
                iv = a.segment.interval
                touched.add((iv.start, iv.end, a.segment.version))
            else:
                kept[k] = a
        self.allocations = kept
        if not touched:
            return
        for key in touched:
            self.next_partition.pop(key, None)
            self.next_overwrite.pop(key, None)
            for pid in self.chunk_partitions.get(key, ()):
                self._reserve_id(key, pid)
        for a in kept.values():
            iv = a.segment.interval
            key = (iv.start, iv.end, a.segment.version)
            if key in touched:
                self._reserve_id(key, a.segment.partition_id)

    def add_segment(self, seg: SegmentDescriptor) -> None:
        """A committed segment (the only way ``segments`` grows: the derived indexes follow).

        ``segments`` is append-only: nothing removes or replaces a committed segment, and an id committed again
        keeps its first descriptor and its place (the lockbox never decides that: a publish or an import of a
        committed id with other contents is refused, one with the same contents is answered without committing;
        only a foreign decision log could name it twice, and the first commit wins, as the metadata store's
        primary key would have it). So the n-th committed segment stays the n-th: :meth:`segments_since`."""
        if seg.id in self.segments:
            return
        self.segments[seg.id] = seg
        self._index(seg)

    def segments_since(self, count: int) -> list[SegmentDescriptor]:
        """The segments committed after the first ``count`` (``segments`` is append-only), in commit order.

        Costs the new segments only (read backwards from the end of the dict), not the data source's size."""
        new = len(self.segments) - count
        if new <= 0:
            return []
        tail = list(islice(reversed(self.segments.values()), new))
        tail.reverse()
        return tail

    def copy(self) -> SourceState:
        return SourceState(
            dict(self.locks), dict(self.holders), self.lock_seq, dict(self.segments), dict(self.allocations),
            self.metadata, dict(self.appended_under), self.committed_replaces, list(self.waiters),
            self.replace_chunks, self.released_overwrites, dict(self.allocators),
        )

    def persistent(self) -> tuple[Any, ...]:
        """Everything but the waiters, for comparing a replayed state with the live one."""
        return (self.locks, self.holders, self.lock_seq, self.segments, self.allocations, self.metadata,
                self.appended_under, self.committed_replaces, self.replace_chunks, self.released_overwrites,
                self.allocators)

    def locks_of(self, task_id: str) -> list[TaskLock]:
        return [self.locks[i] for i, tasks in self.holders.items() if task_id in tasks]

    def next_partition_id(self, interval: Interval, version: str) -> int:
        """The next root partition id of (interval, version) (does not reserve it: apply does)."""
        return self.next_partition.get((interval.start, interval.end, version), 0)

    def next_overwrite_id(self, interval: Interval, version: str) -> int:
        """The next overwrite partition id of (interval, version), from Druid's 32768 (not reserved here)."""
        return self.next_overwrite.get((interval.start, interval.end, version), OVERWRITE_PARTITION_START)

    def reserve(self, seg: SegmentDescriptor) -> None:
        """Partition ids up to this published or recorded segment's are used in its (interval, version) (root
        and overwrite ids counted apart)."""
        self._reserve_id((seg.interval.start, seg.interval.end, seg.version), seg.partition_id)

    def _reserve_id(self, key: ChunkVersion, pid: int) -> None:
        if pid >= OVERWRITE_PARTITION_START:
            self.next_overwrite[key] = max(self.next_overwrite.get(key, OVERWRITE_PARTITION_START), pid + 1)
        else:
            self.next_partition[key] = max(self.next_partition.get(key, 0), pid + 1)


def allocation_key(sequence_name: str, previous: str | None, interval: Interval, skip_lineage: bool) -> AllocationKey:
    """Idempotency key: (sequenceName, previousSegmentId) or, skipping the lineage check, (sequenceName, interval)."""
    if skip_lineage:
        return ("interval", sequence_name, interval.iso())
    return ("lineage", sequence_name, previous or "")  # the interval is checked against the allocation found


def replace_locks_used(task_locks: list[TaskLock], own: list[SegmentDescriptor]) -> list[TaskLock]:
    """The task's live REPLACE locks a replace publish of ``own`` commits under: for each segment, the
    covering lock of its version, else the narrowest covering one (a task may hold several)."""
    used: dict[str, TaskLock] = {}
    for seg in own:
        covering = [lk for lk in task_locks if lk.lock_type == "replace" and not lk.revoked
                    and lk.interval.contains(seg.interval) and seg.version <= lk.version]
        if covering:
            lock = min(covering, key=lambda lk: (lk.version != seg.version, lk.interval.duration, lk.lock_id))
            used[lock.lock_id] = lock
    return [lk for lk in task_locks if lk.lock_id in used]


class LockboxState:
    """The task registry plus every data source's :class:`SourceState`."""

    def __init__(self) -> None:
        self.tasks: dict[str, TaskInfo] = {}
        self.sources: dict[str, SourceState] = {}
        self.lock_source: dict[str, str] = {}  # lock id -> data source
        # derived, rebuilt on first use after a restore: running tasks per group (from ``tasks``), and the data
        # sources where each group allocated (from the sources' ``allocators``)
        self._running: dict[str, int] | None = None
        self._allocated_in: dict[str, set[str]] | None = None

    def source(self, data_source: str) -> SourceState:
        src = self.sources.get(data_source)
        if src is None:
            src = self.sources[data_source] = SourceState()
        return src

    def copy(self) -> LockboxState:
        other = type(self)()
        other.tasks = dict(self.tasks)
        other.sources = {ds: src.copy() for ds, src in self.sources.items()}
        other.lock_source = dict(self.lock_source)
        other._running = dict(self._running) if self._running is not None else None
        return other

    def persistent(self) -> tuple[Any, ...]:
        """Everything a replay rebuilds: data sources with nothing persistent (only waiters) are left out."""
        empty = SourceState().persistent()
        sources = {ds: p for ds, src in sorted(self.sources.items()) if (p := src.persistent()) != empty}
        return (self.tasks, sources, self.lock_source)

    def segment_counts(self) -> dict[str, int]:
        """How many segments each data source committed (sources with none left out)."""
        return {ds: n for ds, src in self.sources.items() if (n := len(src.segments))}

    def segments_since(self, counts: Mapping[str, int]) -> dict[str, list[SegmentDescriptor]]:
        """Per data source, the segments committed after the first ``counts[ds]`` (0 when absent), in commit
        order; sources with none new left out. With ``counts`` = :meth:`segment_counts` taken earlier: exactly
        what was committed since (each once), whatever happened in between, since ``segments`` only grows at
        its end (:meth:`SourceState.add_segment`). Costs the data sources plus the new segments."""
        out: dict[str, list[SegmentDescriptor]] = {}
        for ds, src in self.sources.items():
            if len(src.segments) > counts.get(ds, 0):
                out[ds] = src.segments_since(counts.get(ds, 0))
        return out

    def has_ended(self, task_id: str) -> bool:
        """Whether ``task_id`` ended while its group still runs and keeps its allocation records (the only ended
        tasks anything still refers to: the rest are forgotten, see :meth:`_prune_allocations`)."""
        return task_id not in self.tasks and any(task_id in tasks for src in self.sources.values()
                                                 for tasks in src.allocators.values())

    @property
    def ended(self) -> frozenset[str]:
        """The ended tasks still referred to (see :meth:`has_ended`); derived, never stored."""
        return frozenset(t for src in self.sources.values() for tasks in src.allocators.values() for t in tasks
                         if t not in self.tasks)

    def live_locks(self) -> list[TaskLock]:
        """Every granted, unreleased lock (revoked ones included), by data source then lock id order of grant."""
        return [lock for ds in sorted(self.sources) for lock in self.sources[ds].locks.values()]

    # -- the fold -------------------------------------------------------------------
    def apply(self, event: Event) -> None:
        """Fold one decision. Unknown references are ignored, so a replay never fails part way."""
        if isinstance(event, TaskRegistered):
            if event.task_id in self.tasks:
                self._running = None  # registered again: recount on next use
            elif self._running is not None:
                self._running[event.group_id] = self._running.get(event.group_id, 0) + 1
            self.tasks[event.task_id] = TaskInfo(event.task_id, event.group_id, event.task_type, event.data_source,
                                                 event.priority)
        elif isinstance(event, TaskDeregistered):
            info = self.tasks.pop(event.task_id, None)
            if info is not None and self._running is not None:
                left = self._running.pop(info.group_id, 1) - 1
                if left > 0:
                    self._running[info.group_id] = left
            if info is not None and info.data_source in self.sources:
                src = self.sources[info.data_source]
                src.waiters = [w for w in src.waiters if w.request.task_id != event.task_id]
            if info is not None:
                self._prune_allocations(info)
        elif isinstance(event, LockGranted):
            lock = event.lock
            src = self.source(lock.data_source)
            if lock.lock_id not in src.locks:
                src.locks[lock.lock_id] = lock
                src.lock_seq += 1
                self.lock_source[lock.lock_id] = lock.data_source
            holders = src.holders.get(lock.lock_id, frozenset()) | {event.task_id}
            for absorbed in event.absorbed_lock_ids or ():  # the wider APPEND lock takes over their holders
                if absorbed in src.locks and absorbed != lock.lock_id:
                    holders |= src.holders.pop(absorbed, frozenset())
                    del src.locks[absorbed]
                    self.lock_source.pop(absorbed, None)
            src.holders[lock.lock_id] = holders
            src.waiters = [w for w in src.waiters if w.request.request_id != event.request_id]
        elif isinstance(event, LockRevoked):
            for lock_id in event.lock_ids:
                ds = self.lock_source.get(lock_id)
                if ds is not None:
                    src = self.sources[ds]
                    src.locks[lock_id] = replace(src.locks[lock_id], revoked=True)
        elif isinstance(event, LockReleased):
            for lock_id in event.lock_ids:
                ds = self.lock_source.get(lock_id)
                if ds is None:
                    continue
                src = self.sources[ds]
                remaining = src.holders.get(lock_id, frozenset()) - {event.task_id}
                if remaining:
                    src.holders[lock_id] = remaining
                    continue
                src.holders.pop(lock_id, None)
                gone = src.locks.pop(lock_id, None)
                if gone is not None and overwrites(gone) and any(
                        a.lock_id == lock_id and a.task_id in self.tasks for a in src.allocations.values()):
                    src.released_overwrites |= {lock_id}
                src.appended_under.pop(lock_id, None)
                src.committed_replaces -= {lock_id}
                del self.lock_source[lock_id]
        elif isinstance(event, SegmentAllocated):
            src = self.source(event.segment.data_source)
            if event.sequence_name is not None:  # (a decision logged before allocations were recorded: no record)
                key = allocation_key(event.sequence_name, event.previous_segment_id, event.segment.interval,
                                     event.skip_lineage_check)
                if key not in src.allocations:
                    src.record_allocation(key, event)
                    info = self.tasks.get(event.task_id)
                    group = info.group_id if info is not None else event.task_id
                    tasks = src.allocators.get(group, frozenset())
                    if event.task_id not in tasks:
                        src.allocators[group] = tasks | {event.task_id}
                    if self._allocated_in is not None:
                        self._allocated_in.setdefault(group, set()).add(event.segment.data_source)
        elif isinstance(event, PublishAccepted):
            self._apply_publish(event)
        elif isinstance(event, SegmentsImported) and not event.already_imported:
            src = self.source(event.segments[0].data_source)
            for seg in event.segments:
                src.add_segment(seg)

    def _running_per_group(self) -> dict[str, int]:
        if self._running is None:
            self._running = {}
            for info in self.tasks.values():
                self._running[info.group_id] = self._running.get(info.group_id, 0) + 1
        return self._running

    def _prune_allocations(self, ended: TaskInfo) -> None:
        """After ``ended`` deregistered: once its group has no running task, delete the allocations its tasks
        made (Druid deletes a task allocator's pending segments when its last task ends; until then a repeated
        request of any member gets the same id back). Allocations of ended tasks never steer a decision (see
        ``allocation._pending``), so released overwriting lock ids that no running task's allocation names are
        dropped too. Both stay bounded by what running tasks (and their groups) allocated."""
        group = ended.group_id
        if group not in self._running_per_group():  # ``ended`` has left ``tasks`` and the counts already
            if self._allocated_in is None:
                self._allocated_in = {}
                for ds, other in self.sources.items():
                    for g in other.allocators:
                        self._allocated_in.setdefault(g, set()).add(ds)
            for ds in sorted(self._allocated_in.pop(group, ())):
                other = self.sources[ds]
                tasks = other.allocators.pop(group, None)
                if tasks is not None:
                    other.drop_allocations(tasks)
        src = self.sources.get(ended.data_source)  # a task allocates in its own data source only
        if src is not None and src.released_overwrites:
            named = {a.lock_id for a in src.allocations.values() if a.task_id in self.tasks}
            src.released_overwrites &= named

    def _apply_publish(self, event: PublishAccepted) -> None:
        if event.already_published:
            return  # a re-sent publish: answered, changes nothing
        info = self.tasks.get(event.task_id)
        ds = event.segments[0].data_source
        src = self.source(ds)
        upgraded = set(event.upgraded_segment_ids)
        # (no id texts built when nothing was upgraded: every plain publish)
        own = [s for s in event.segments if str(s.id) not in upgraded] if upgraded else list(event.segments)
        task_locks = src.locks_of(event.task_id)
        kind = event.kind
        if kind is None:  # a decision logged before publishes named their kind: infer it as that lockbox did
            kind = "replace" if any(lk.lock_type == "replace" for lk in task_locks) else "append"
        for seg in event.segments:
            src.add_segment(seg)
        if event.end_metadata is not None:
            src.metadata = plus(src.metadata, event.end_metadata)
        if kind == "replace":
            # The commit upgraded what was appended under its locks; later appends are upgraded at their commit.
            for lock in replace_locks_used(task_locks, own):
                src.appended_under.pop(lock.lock_id, None)
                src.committed_replaces |= {lock.lock_id}
            src.replace_chunks |= {(s.interval.start, s.interval.end, s.version) for s in own}
            return
        group = info.group_id if info is not None else None
        appends = [lk for lk in task_locks if lk.lock_type == "append"]  # none for an insert under its own locks
        # (the upgraded copies' sources, by id text: built only when something was upgraded)
        copied = {(src_id, c.version) for c, src_id in zip(
            (s for s in event.segments if str(s.id) in upgraded), event.upgraded_from_segment_ids or (),
            strict=False)} if appends and upgraded else set()
        for seg in own if appends else ():
            if not any(lk.interval.contains(seg.interval) for lk in appends):
                continue
            for lock in src.locks.values():
                # a REPLACE lock that committed already may commit again (another member of its group): an append
                # older than the lock's version that its commit did not copy into it waits for that next commit
                # (one at the lock's version, appended into its committed chunk, is visible already)
                if (lock.lock_type == "replace" and not lock.revoked and lock.group_id != group
                        and lock.interval.contains(seg.interval) and seg.version < lock.version
                        and (str(seg.id), lock.version) not in copied):
                    src.appended_under[lock.lock_id] = (*src.appended_under.get(lock.lock_id, ()), seg)
