"""The task lockbox: requests in, decisions out.

``Lockbox.handle(envelope)`` answers one request event (task_started,
lock_requested, segment_allocation_requested, publish_requested, task_finished)
with decision events, applying each to its state as it is emitted; the pure form
is :func:`decide`, which works on a copy. Folding the decisions over an empty
lockbox (:meth:`Lockbox.replay`) rebuilds the state exactly, waiting requests
aside: they are never persisted and their tasks re-send them.

Rules (seed 001 and Druid's TaskLockbox with APPEND/REPLACE locks):

- A task is known from ``task_started`` until ``task_finished``; requests from
  unknown or finished tasks, for another data source, or with empty intervals
  are denied with a reason. Priorities default by task type (streaming 75, batch
  50, compaction 25, else 0); a task or a request may override.
- **Idempotency**: a request by the same group, granularity and type whose
  interval lies inside a lock the group holds gets that lock back (a revoked one
  stays revoked, and the answer says so).
- **A group never blocks itself** (Druid's lock posse): locks held by tasks of
  the request's group are never incompatible with it. A new APPEND lock absorbs
  the group's APPEND locks inside it (``absorbedLockIds``).
- **Conflicts and compatibility**: see :mod:`coordinator.locks.conflicts`. A
  request with no incompatible live lock is granted; if every incompatible live
  lock has a strictly lower priority, they are all revoked (one event lists
  them) and the request is granted; otherwise a ``try`` request is denied at
  once and a blocking one waits, for at most its ``timeoutMs`` of event time.
  Waiters are re-examined in arrival order whenever a release or a revocation
  frees something; expired ones are denied when the next request arrives.
- **Versions**: a new lock's version is the request's event time (or its
  preferred ``version``), raised above every existing segment version of its
  interval if the clock lags; an APPEND lock has Druid's epoch version (it
  covers segments of any version); a segment lock carries its segments' version
  (the requested ``version``, else the chunk's).
- **Release**: ``lock_release_requested`` releases the task's locks on exactly
  that interval; **task end** releases all of them. A lock shared by a group is
  released when its last member lets go.
"""

from __future__ import annotations

from collections.abc import Iterable

from coordinator.locks.allocation import allocate
from coordinator.locks.conflicts import Blocked, Emit, scopes_conflict, types_compatible
from coordinator.locks.imports import import_segments
from coordinator.locks.marks import mark_unused, mark_used
from coordinator.locks.priority import default_priority
from coordinator.locks.publish import publish
from coordinator.locks.state import LockboxState, SourceState, TaskInfo, Waiter
from events.envelope import Envelope
from events.instant import format_instant, parse_instant
from events.locks import (
    LockDenied,
    LockGranted,
    LockReleased,
    LockRevoked,
    LockWaiting,
    TaskDeregistered,
    TaskLock,
    TaskRegistered,
)
from events.registry import Event
from events.tasks import (
    LockReleaseRequested,
    LockRequested,
    PublishRequested,
    SegmentAllocationRequested,
    SegmentsImportRequested,
    SegmentsMarkUnusedRequested,
    SegmentsMarkUsedRequested,
    TaskFinished,
    TaskStarted,
)

__all__ = ["EPOCH_VERSION", "Blocked", "Emit", "Lockbox", "decide", "next_version"]

#: Druid's version of APPEND locks and of segments appended where no data exists: any REPLACE supersedes it.
EPOCH_VERSION = "1970-01-01T00:00:00.000Z"


def next_version(candidate: str, existing: Iterable[str]) -> str:
    """``candidate`` unless some existing version is not older; then just above the newest existing one.

    >>> next_version("2026-01-02T00:00:00.000Z", ["2026-01-01T00:00:00.000Z"])
    '2026-01-02T00:00:00.000Z'
    >>> next_version("2026-01-01T00:00:00.000Z", ["2026-01-03T00:00:00.000Z"])
    '2026-01-03T00:00:00.001Z'
    """
    newest = max(existing, default=None)
    if newest is None or newest < candidate:
        return candidate
    try:
        return format_instant(parse_instant(newest) + 1)
    except ValueError:
        return newest + "_1"


class Lockbox(LockboxState):
    """See the module docstring for the rules."""

    @classmethod
    def replay(cls, decisions: Iterable[Event]) -> Lockbox:
        box = cls()
        for event in decisions:
            box.apply(event)
        return box

    def handle(self, envelope: Envelope[Event]) -> list[Event]:
        """Decide on one request and apply the decisions; returns them in emission order."""
        out: list[Event] = []

        def emit(event: Event) -> None:
            self.apply(event)
            out.append(event)

        event = envelope.event
        at = envelope.occurred_at
        self._expire_waiters(at, emit)
        if isinstance(event, TaskStarted):
            self._task_started(event, emit)
        elif isinstance(event, TaskFinished):
            self._task_finished(event, emit)
        elif isinstance(event, LockRequested):
            self._lock_requested(event, at, emit)
        elif isinstance(event, SegmentAllocationRequested):
            allocate(self, event, at, emit)
        elif isinstance(event, PublishRequested):
            publish(self, event, emit)
        elif isinstance(event, LockReleaseRequested):
            self._release_requested(event, emit)
        elif isinstance(event, SegmentsImportRequested):
            import_segments(self, event, emit)
        elif isinstance(event, SegmentsMarkUnusedRequested):
            mark_unused(self, event, emit)
        elif isinstance(event, SegmentsMarkUsedRequested):
            mark_used(self, event, emit)
        return out

    # -- task lifecycle -----------------------------------------------------------------
    def _task_started(self, event: TaskStarted, emit: Emit) -> None:
        if event.task_id in self.tasks:
            return  # a duplicate start changes nothing
        priority = event.priority if event.priority is not None else default_priority(event.task_type)
        emit(TaskRegistered(task_id=event.task_id, group_id=event.group_id, task_type=event.task_type,
                            data_source=event.data_source, priority=priority))

    def _task_finished(self, event: TaskFinished, emit: Emit) -> None:
        info = self.tasks.get(event.task_id)
        if info is None:
            return
        src = self.sources.get(info.data_source)
        held = [lock.lock_id for lock in src.locks_of(event.task_id)] if src is not None else []
        emit(TaskDeregistered(task_id=event.task_id, status=event.status))
        if src is not None and held:
            emit(LockReleased(task_id=event.task_id, lock_ids=tuple(held), reason=f"task {event.status}"))
            self._reexamine(src, emit)

    def _release_requested(self, req: LockReleaseRequested, emit: Emit) -> None:
        info = self.check_task(req.task_id, req.data_source)
        if isinstance(info, str):
            emit(LockDenied(request_id=req.request_id, task_id=req.task_id, reason=info))
            return
        src = self.source(req.data_source)
        held = [lock.lock_id for lock in src.locks_of(req.task_id) if lock.interval == req.interval]
        if not held:
            emit(LockDenied(request_id=req.request_id, task_id=req.task_id,
                            reason=f"task {req.task_id} holds no lock on {req.interval.iso()}"))
            return
        emit(LockReleased(task_id=req.task_id, lock_ids=tuple(held), reason="released by the task",
                          request_id=req.request_id))
        self._reexamine(src, emit)

    #: Data sources that may have waiters with a timeout (None: not known yet, e.g. after a copy or a restore).
    _timed: set[str] | None = None

    def _expire_waiters(self, now: int, emit: Emit) -> None:
        """Deny blocking requests whose ``timeoutMs`` has passed by ``now`` (event time)."""
        if self._timed is None:
            self._timed = {ds for ds, src in self.sources.items()
                           if any(w.request.timeout_ms is not None for w in src.waiters)}
        for ds in sorted(self._timed):
            src = self.sources[ds]
            if not any(w.request.timeout_ms is not None for w in src.waiters):
                self._timed.discard(ds)
                continue
            for waiter in list(src.waiters):
                timeout = waiter.request.timeout_ms
                if timeout is not None and waiter.at + timeout <= now:
                    src.waiters.remove(waiter)
                    emit(LockDenied(request_id=waiter.request.request_id, task_id=waiter.request.task_id,
                                    reason=f"timed out after {timeout} ms waiting for the lock"))

    # -- validation -------------------------------------------------------------------------
    def check_task(self, task_id: str, data_source: str) -> TaskInfo | str:
        """The task's info, or the reason a request from it must be refused."""
        info = self.tasks.get(task_id)
        if info is None:
            if self.has_ended(task_id):
                return f"task {task_id} has finished"
            return f"task {task_id} is unknown (no task_started, or it finished and is forgotten)"
        if info.data_source != data_source:
            return f"task {task_id} works on {info.data_source!r}, not {data_source!r}"
        return info

    # -- lock requests ------------------------------------------------------------------------
    def _lock_requested(self, req: LockRequested, at: int, emit: Emit) -> None:
        info = self.check_task(req.task_id, req.data_source)
        reason = info if isinstance(info, str) else self._request_problem(req, info)
        if reason is not None:
            emit(LockDenied(request_id=req.request_id, task_id=req.task_id, reason=reason))
            return
        src = self.source(req.data_source)
        try:
            self.acquire(src, req, at, emit)
        except Blocked as blocked:
            if req.mode == "try":
                emit(LockDenied(request_id=req.request_id, task_id=req.task_id,
                                reason="try-lock: held by " + ", ".join(blocked.blocking)))
                return
            if all(w.request.request_id != req.request_id for w in src.waiters):
                src.waiters.append(Waiter(req, at))
                if req.timeout_ms is not None and self._timed is not None:
                    self._timed.add(req.data_source)
            emit(LockWaiting(request_id=req.request_id, task_id=req.task_id,
                             reason="waiting for " + ", ".join(blocked.blocking),
                             blocking_lock_ids=tuple(blocked.blocking)))

    def _request_problem(self, req: LockRequested, info: TaskInfo) -> str | None:
        if req.group_id != info.group_id:
            return f"task {req.task_id} belongs to group {info.group_id!r}, not {req.group_id!r}"
        if req.interval.is_empty():
            return f"interval {req.interval.iso()} is empty"
        if req.granularity == "segment":
            if req.lock_type in ("append", "replace"):
                return f"{req.lock_type} locks exist for timeChunk granularity only"
            if not req.partition_ids:
                return "a segment lock needs partitionIds"
        return None

    def priority_of(self, req: LockRequested) -> int:
        if req.priority is not None:
            return req.priority
        info = self.tasks.get(req.task_id)
        return info.priority if info is not None else default_priority(req.task_type)

    def acquire(self, src: SourceState, req: LockRequested, at: int, emit: Emit,
                for_allocation: bool = False) -> TaskLock:
        """Grant ``req`` (revoking strictly lower-priority incompatible locks) or raise :class:`Blocked`."""
        partitions = tuple(sorted(set(req.partition_ids or ()))) if req.granularity == "segment" else ()
        for lock in src.locks.values():  # idempotent re-request: the group's own lock back
            if (lock.group_id == req.group_id and lock.granularity == req.granularity
                    and lock.lock_type == req.lock_type and lock.interval.contains(req.interval)
                    and set(partitions) <= set(lock.partition_ids)):
                emit(LockGranted(request_id=req.request_id, task_id=req.task_id, lock=lock,
                                 reason=f"lock {lock.lock_id} was revoked; it stays revoked" if lock.revoked else None))
                return lock
        priority = self.priority_of(req)
        blocking = [
            lock for lock in src.locks.values()
            if not lock.revoked and lock.group_id != req.group_id
            and scopes_conflict(lock.granularity, lock.interval, lock.partition_ids,
                                req.granularity, req.interval, partitions)
            and not types_compatible(lock.lock_type, lock.interval, req.lock_type, req.interval)
        ]
        if any(lock.priority >= priority for lock in blocking):
            raise Blocked([lock.lock_id for lock in blocking])
        revoked = tuple(lock.lock_id for lock in blocking)
        if revoked:
            emit(LockRevoked(lock_ids=revoked, request_id=req.request_id,
                             reason=f"revoked by a priority {priority} {req.lock_type} request of {req.task_id}"))
        lock = TaskLock(
            lock_id=f"{req.data_source}#{src.lock_seq}",
            task_id=req.task_id,
            group_id=req.group_id,
            data_source=req.data_source,
            interval=req.interval,
            granularity=req.granularity,
            lock_type=req.lock_type,
            version=self.version_for(src, req, at),
            priority=priority,
            partition_ids=partitions,
            for_allocation=True if for_allocation else None,
        )
        absorbed = tuple(
            held.lock_id for held in src.locks.values()
            if req.lock_type == "append" and req.granularity == "timeChunk" and held.group_id == req.group_id
            and held.lock_type == "append" and held.granularity == "timeChunk" and not held.revoked
            and req.interval.contains(held.interval)
        ) or None
        emit(LockGranted(request_id=req.request_id, task_id=req.task_id, lock=lock, revoked_lock_ids=revoked,
                         absorbed_lock_ids=absorbed))
        if revoked:
            self._reexamine(src, emit)
        return lock

    def version_for(self, src: SourceState, req: LockRequested, at: int) -> str:
        """The version of a new lock (see the module docstring).

        Allocated (pending) segments count as existing data, as Druid's pending
        segments do: a segment lock on a chunk that only has pending segments
        joins their version, so partition ids stay consecutive per version. A
        chunk with published segments is the newest published version's (as
        Druid's createNewSegment: the used chunk's version wins over pending
        ones), so an uncommitted overwrite's version, e.g. of a released
        REPLACE lock's allocation, never becomes the chunk's for new partitions.
        """
        iv = req.interval
        known = list(src.next_partition)  # published and allocated (start, end, version)
        if req.granularity == "segment":
            if req.version is not None:
                return req.version
            published = [v for (s, e, v) in src.chunk_partitions if s == iv.start and e == iv.end]
            if published:
                return max(published)
            same = [v for (s, e, v) in known if s == iv.start and e == iv.end]
            if same:
                return max(same)
            posse = [lk.version for lk in src.locks.values()  # inside its group's timeChunk lock: that version
                     if lk.group_id == req.group_id and lk.granularity == "timeChunk" and not lk.revoked
                     and lk.lock_type in ("exclusive", "shared", "replace") and lk.interval.contains(iv)]
            if posse:
                return max(posse)
        if req.lock_type == "append":
            return EPOCH_VERSION
        overlapping = [v for (s, e, v) in known if s < iv.end and iv.start < e]
        if req.version is not None and all(v < req.version for v in overlapping):
            return req.version
        return next_version(format_instant(at), overlapping)

    def _reexamine(self, src: SourceState, emit: Emit) -> None:
        """Grant waiters, in arrival order, that can be granted now; the others keep waiting."""
        for waiter in list(src.waiters):
            if waiter not in src.waiters:
                continue
            req = waiter.request
            info = self.check_task(req.task_id, req.data_source)
            if isinstance(info, str):
                src.waiters.remove(waiter)
                emit(LockDenied(request_id=req.request_id, task_id=req.task_id, reason=info))
                continue
            try:
                self.acquire(src, req, waiter.at, emit)
            except Blocked:
                continue


def decide(box: Lockbox, envelope: Envelope[Event]) -> list[Event]:
    """The decisions for one request, leaving ``box`` untouched (works on a copy)."""
    scratch = box.copy()
    assert isinstance(scratch, Lockbox)
    return scratch.handle(envelope)
