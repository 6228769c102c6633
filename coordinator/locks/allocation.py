"""Segment allocation (Druid's SegmentAllocateAction): new segment ids, consecutive per (dataSource, interval,
version): one above every published id and every id an allocation record names (see
``SourceState.next_partition``).

**Which time chunk.** Appending must never hide what a chunk already holds.
(Overwriting allocations, under a REPLACE lock or an exclusive timeChunk lock
the task requested itself, as Druid's batch overwrite, write that lock's version
in the existing chunk of that version holding the row, else in the requested
interval, or a finer bucket where the group's own chunks of that version are in
the way. No allocation makes two overlapping intervals of one version.) Appending allocations, under APPEND and shared
locks or locks the allocation took itself:

- If published segments contain the row's timestamp, the segment goes into
  their chunk (the newest version's interval), whatever interval was asked for;
  if the newest version there has several intervals, the allocation is refused,
  and so it is when a newer published version overlaps part of that chunk (the
  interval shows more than one version: Druid's "already has [n] versions"; a
  segment there would be partly hidden at once).
- Otherwise the requested interval is tried, then ever finer buckets holding
  the row (month, day, 6 h, hour, 30/15/10/5 min, minute, second), skipping any
  that overlaps an existing chunk (published, or allocated to a running task
  under a non-revoked lock that does not overwrite, released or not) of another interval. If none
  fits, or none can be locked, the allocation is refused.

**Which version.** A segment appended into an existing chunk takes the chunk's
version (its newest, published or pending, see :func:`_pending`): the
second streaming task of a group gets the next partition of the first one's
version. Under a timeChunk lock that version must not be newer than the lock's.
Into an empty chunk: the lock's version, except under an APPEND lock: Druid's
epoch version, which every REPLACE supersedes. Overwriting allocations use
their lock's version. With **segment** lock granularity the lock and the id
are made atomically: the new partition gets its own exclusive segment lock;
overwriting with segment locks (the group holds segment locks on existing
partitions of the chunk) keeps the version, takes Druid's overwrite partition
ids (from 32768) with a ``numbered_overwrite`` shard spec (root partition range
of the inputs, one minor version above theirs, atomic update group size), and
fills ``overshadowedSegments`` with those inputs and ``atomicUpdateGroup`` with
the outputs of that chunk (the proposal's list form of the same facts).

**Idempotency.** Per (sequenceName, previousSegmentId), or per (sequenceName,
interval) for requests that skip the lineage check. A repeated request gets the
same segment id back only if that segment's interval holds the row and overlaps
the requested interval (else it is refused, as Druid does), and only after doing
what a fresh request does: a member of the same group joins the lock (so it can
publish), a task whose lock was revoked is refused, a released lock is acquired
again. An allocation never waits: if the lock cannot be had it is denied. The
records last while the allocating task's group has a running task (the fold
deletes them when its last task ends, as Druid deletes a task allocator's
pending segments; see ``LockboxState._prune_allocations``).

**Beside the group's REPLACE lock** an allocation under an exclusive or shared
lock that does not overwrite is refused (Druid never lets them coexist): an
APPEND of the group would join its newer pending version and hide the REPLACE's
rows once both commit.
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING

from coordinator.locks.conflicts import Blocked, Emit
from coordinator.locks.state import SourceState, TaskInfo, allocation_key, overwrites
from events.instant import (
    MILLIS_PER_DAY,
    MILLIS_PER_HOUR,
    MILLIS_PER_MINUTE,
    MILLIS_PER_SECOND,
    fields_from_instant,
    format_instant,
    instant_from_fields,
)
from events.interval import Interval
from events.locks import LockDenied, LockGranted, SegmentAllocated, TaskLock
from events.schema import JsonValue
from events.segment import OVERWRITE_PARTITION_START, SegmentDescriptor, SegmentId
from events.tasks import LockRequested, SegmentAllocationRequested

if TYPE_CHECKING:
    from coordinator.locks.lockbox import Lockbox

#: Finer fixed buckets tried after the requested interval (all divide a UTC day).
_FINER = (MILLIS_PER_DAY, 6 * MILLIS_PER_HOUR, MILLIS_PER_HOUR, 30 * MILLIS_PER_MINUTE, 15 * MILLIS_PER_MINUTE,
          10 * MILLIS_PER_MINUTE, 5 * MILLIS_PER_MINUTE, MILLIS_PER_MINUTE, MILLIS_PER_SECOND)


def allocate(box: Lockbox, req: SegmentAllocationRequested, at: int, emit: Emit) -> None:
    def deny(reason: str) -> None:
        emit(LockDenied(request_id=req.request_id, task_id=req.task_id, reason=reason))

    info = box.check_task(req.task_id, req.data_source)
    if isinstance(info, str):
        return deny(info)
    if req.lock_granularity == "segment" and req.lock_type in ("append", "replace"):
        return deny(f"{req.lock_type} locks exist for timeChunk granularity only")
    src = box.source(req.data_source)
    if not req.skip_lineage_check:
        prior = src.allocations.get(allocation_key(req.sequence_name, req.previous_segment_id, Interval(0, 0), False))
        if prior is not None:
            iv = prior.segment.interval
            if not iv.contains_instant(req.timestamp) or (req.interval is not None and not req.interval.overlaps(iv)):
                asked = req.interval.iso() if req.interval is not None else format_instant(req.timestamp)
                return deny(f"sequence {req.sequence_name!r} after {req.previous_segment_id or 'its start'} was "
                            f"allocated {prior.segment_id} for {iv.iso()}, not for {asked}")
            return _repeat(box, src, req, info, prior, at, emit)
    chosen = candidate_intervals(box, src, req)
    if isinstance(chosen, str):
        return deny(chosen)
    if req.skip_lineage_check:
        for interval in chosen:
            prior = src.allocations.get(allocation_key(req.sequence_name, None, interval, True))
            if prior is not None:
                return _repeat(box, src, req, info, prior, at, emit)
    problems = []
    for interval in chosen:
        problem = _allocate_in(box, src, req, info, interval, at, emit)
        if problem is None:
            return None
        problems.append(problem)
    return deny("; ".join(problems))


def candidate_intervals(box: Lockbox, src: SourceState, req: SegmentAllocationRequested) -> list[Interval] | str:
    """The intervals to try, in order, or why none can hold the row (see the module docstring)."""
    ts = req.timestamp
    if req.lock_type == "replace" or (req.interval is not None and _overwrite_lock(box, src, req) is not None):
        return _overwrite_candidates(box, src, req)
    containing = [s for s in src.segments.values() if s.interval.contains_instant(ts)]
    if containing:
        top = max(s.version for s in containing)
        intervals = sorted({s.interval for s in containing if s.version == top}, key=lambda iv: (iv.start, iv.end))
        if len(intervals) > 1:
            return (f"the row at {format_instant(ts)} lies in chunks of version {top} with different intervals: "
                    + ", ".join(iv.iso() for iv in intervals))
        newer = sorted((s for s in src.by_interval.overlapping(intervals[0]) if s.version > top),
                       key=lambda s: (s.version, s.interval.start, s.interval.end))
        if newer:  # Druid: "Cannot allocate new segment ... as it already has [n] versions" (refused, no fallback)
            return (f"chunk {intervals[0].iso()} of version {top} holding the row at {format_instant(ts)} is partly "
                    f"overshadowed by version {newer[-1].version} of {newer[-1].interval.iso()}: an interval with "
                    "more than one visible version takes no new segment")
        return intervals
    if req.interval is None:
        return "no interval given and no existing chunk contains the timestamp"
    if req.interval.is_empty() or not req.interval.contains_instant(ts):
        return f"interval {req.interval.iso()} does not contain the timestamp of the row"
    chunks = chunk_intervals(box, src)
    tried = [req.interval, *finer_buckets(req.interval, ts)]
    fit = [iv for iv in tried if not any(c != iv and c.overlaps(iv) for c in chunks)]
    if not fit:
        return (f"no time chunk can hold the row at {format_instant(ts)}: {req.interval.iso()} and every finer "
                f"bucket overlap existing chunks of other intervals")
    return fit


def _overwrite_lock(box: Lockbox, src: SourceState, req: SegmentAllocationRequested) -> TaskLock | None:
    """The live lock an allocation in the requested interval would use, if it overwrites (see
    :func:`overwrites`): the task's own covering lock, else the group's lock :meth:`Lockbox.acquire` hands
    back. The same lock :func:`_allocate_in` takes, so the candidates are judged with the version written."""
    if req.interval is None:
        return None
    info = box.tasks.get(req.task_id)
    group = info.group_id if info is not None else req.task_id
    lock = None
    if req.lock_granularity == "timeChunk":
        lock = _covering_lock(src, req.task_id, req.interval, req.lock_type)
        if lock is None:
            lock = next((lk for lk in src.locks.values() if lk.group_id == group and lk.granularity == "timeChunk"
                         and lk.lock_type == req.lock_type and lk.interval.contains(req.interval)), None)
    else:
        found = [lk for lk in src.locks.values() if lk.group_id == group and lk.lock_type == req.lock_type
                 and not lk.revoked and overwrites(lk) and lk.interval.contains(req.interval)]
        lock = max(found, key=lambda lk: lk.version) if found else None
    return lock if lock is not None and not lock.revoked and overwrites(lock) else None


def _same_version_chunks(box: Lockbox, src: SourceState, version: str) -> set[Interval]:
    """Intervals of the chunks of ``version``: published, or allocated to a running task (Druid's used and
    pending segments of that version)."""
    found = {s.interval for s in src.segments.values() if s.version == version}
    found.update(a.segment.interval for a in src.allocations.values()
                 if a.segment.version == version and a.task_id in box.tasks)
    return found


def _overwrite_candidates(box: Lockbox, src: SourceState, req: SegmentAllocationRequested) -> list[Interval] | str:
    """An overwriting allocation writes its lock's version, so only chunks of that same version with another
    interval are in its way (its group's earlier allocations). As Druid's SegmentAllocateAction, a chunk of
    that version holding the row wins: the segment goes into its interval, with its next partition. Else the
    requested interval, then finer buckets, that overlap none of them."""
    if req.interval is None or req.interval.is_empty() or not req.interval.contains_instant(req.timestamp):
        return f"a {req.lock_type} allocation that overwrites needs an interval containing the timestamp of the row"
    lock = _overwrite_lock(box, src, req)
    version = lock.version if lock is not None else None
    same = _same_version_chunks(box, src, version) if version is not None else set()
    holding = sorted((iv for iv in same if iv.contains_instant(req.timestamp)), key=lambda iv: (iv.start, iv.end))
    if len(holding) > 1:
        return (f"the row at {format_instant(req.timestamp)} lies in chunks of version {version} with different "
                "intervals: " + ", ".join(iv.iso() for iv in holding))
    if holding:
        return holding
    tried = [req.interval, *finer_buckets(req.interval, req.timestamp)]
    fit = [iv for iv in tried if not any(c != iv and c.overlaps(iv) for c in same)]
    return fit or "every bucket for the row overlaps this group's chunks of its lock's version"


def finer_buckets(preferred: Interval, ts: int) -> list[Interval]:
    """Buckets holding ``ts`` that are shorter than ``preferred``, coarsest first.

    >>> [iv.iso() for iv in finer_buckets(Interval.parse("2026-01-01/P1D"), 5 * 3_600_000 + 1_767_225_660_000)][:2]
    ['2026-01-01T00:00:00.000Z/2026-01-01T06:00:00.000Z', '2026-01-01T05:00:00.000Z/2026-01-01T06:00:00.000Z']
    """
    out = []
    if preferred.duration > 31 * MILLIS_PER_DAY:
        y, m = fields_from_instant(ts)[:2]
        month = Interval(instant_from_fields(y, m, 1), instant_from_fields(y + m // 12, m % 12 + 1, 1))
        if month.duration < preferred.duration:
            out.append(month)
    for size in _FINER:
        if size < preferred.duration:
            start = ts - ts % size
            out.append(Interval(start, start + size))
    return out


def _pending(box: Lockbox, src: SourceState) -> list[SegmentDescriptor]:
    """Segments allocated to running tasks under a lock that does not overwrite and was not revoked (an
    overwriting version is not data until it commits: appends inside it go on as if it were not there). An
    allocation made under an overwriting lock that was released is never pending, even if its task holds an
    APPEND lock over it later: else appends would take the uncommitted overwrite version and, once published,
    hide the rows committed at the chunk's real version. One made under an appending lock stays pending after
    that lock is released (or absorbed): its task may lock again and commit it, and Druid's createNewSegment
    counts every pending segment of the interval; else another appending allocation would open a newer
    version over it and the rows, committed later, would be hidden at once."""
    out = []
    for a in src.allocations.values():
        if a.task_id not in box.tasks:
            continue
        own = src.locks.get(a.lock_id) if a.lock_id is not None else None
        if own is not None:
            live = not own.revoked and not overwrites(own)
        elif a.lock_id is not None and a.lock_id in src.released_overwrites:
            live = False
        else:  # its appending lock was released, or absorbed by a wider APPEND lock of the group
            live = True
        if live:
            out.append(a.segment)
    return out


def chunk_intervals(box: Lockbox, src: SourceState) -> set[Interval]:
    """Intervals of published segments and of pending ones (see :func:`_pending`)."""
    found = {s.interval for s in src.segments.values()}
    found.update(s.interval for s in _pending(box, src))
    return found


def chunk_version(box: Lockbox, src: SourceState, interval: Interval) -> str | None:
    """The newest version of the chunk with exactly this interval: published, or pending (see :func:`_pending`)."""
    versions = [s.version for s in src.segments.values() if s.interval == interval]
    versions.extend(s.version for s in _pending(box, src) if s.interval == interval)
    return max(versions, default=None)


def _lock_request(req: SegmentAllocationRequested, info: TaskInfo, interval: Interval) -> LockRequested:
    return LockRequested(
        request_id=req.request_id, task_id=req.task_id, group_id=info.group_id, task_type=info.task_type,
        data_source=req.data_source, interval=interval, granularity=req.lock_granularity, lock_type=req.lock_type,
    )


def _allocate_in(box: Lockbox, src: SourceState, req: SegmentAllocationRequested, info: TaskInfo,
                 interval: Interval, at: int, emit: Emit) -> str | None:
    """Allocate in ``interval`` (emitting the lock and the id) or return why not (having emitted nothing,
    except a lock granted before a version check failed)."""
    lock_req = _lock_request(req, info, interval)
    overshadowed: tuple[int, ...] = ()
    group: tuple[int, ...] = ()
    shard_spec: dict[str, JsonValue] | None = None
    replace_lock = _groups_replace_lock(src, req, info, interval)
    if replace_lock is not None:  # Druid's TaskLockbox: exclusive and shared locks never coexist with a REPLACE
        return (f"{interval.iso()} overlaps REPLACE lock {replace_lock.lock_id} ({replace_lock.interval.iso()}) of "
                f"group {info.group_id!r}: a {req.lock_granularity} {req.lock_type} allocation would append above "
                "its uncommitted version")
    if req.lock_granularity == "segment":
        version = box.version_for(src, lock_req, at)
        problem = _version_clash(box, src, interval, version)
        if problem is not None:
            return problem
        inputs = overwritten_inputs(src, info.group_id, interval, version)
        partition = src.next_overwrite_id(interval, version) if inputs else src.next_partition_id(interval, version)
        lock_req = replace(lock_req, partition_ids=(partition,), version=version)
        if inputs:
            outputs = {a.segment.partition_id for a in src.allocations.values()
                       if a.segment.interval == interval and a.segment.version == version
                       and a.segment.partition_id >= OVERWRITE_PARTITION_START
                       and _group_of(box, a.task_id) == info.group_id}
            overshadowed, group = inputs, tuple(sorted(outputs | {partition}))
            shard_spec = overwrite_shard_spec(src, req.data_source, interval, version, partition, inputs, len(group))
        try:
            lock = box.acquire(src, lock_req, at, emit, for_allocation=True)
        except Blocked as blocked:
            return f"cannot lock partition {partition} of {interval.iso()}: held by {', '.join(blocked.blocking)}"
    else:
        held = _covering_lock(src, req.task_id, interval, req.lock_type)
        if held is None:
            try:
                held = box.acquire(src, lock_req, at, emit, for_allocation=True)
            except Blocked as blocked:
                return f"cannot lock {interval.iso()}: held by {', '.join(blocked.blocking)}"
        lock = held
        if lock.revoked:
            return f"lock {lock.lock_id} was revoked"
        existing = chunk_version(box, src, interval)
        if overwrites(lock):
            version = lock.version
        elif req.lock_type == "append":
            version = existing if existing is not None else lock.version
        elif existing is not None and existing > lock.version:
            return f"chunk {interval.iso()} has version {existing}, newer than lock {lock.lock_id} ({lock.version})"
        else:
            version = existing if existing is not None else lock.version
        problem = _version_clash(box, src, interval, version)
        if problem is not None:
            return problem
        partition = src.next_partition_id(interval, version)
    if lock.revoked:
        return f"lock {lock.lock_id} was revoked"
    segment = SegmentDescriptor(
        data_source=req.data_source, interval=interval, version=version, partition_id=partition,
        overshadowed_segments=overshadowed, atomic_update_group=group,
        shard_spec=shard_spec or {"type": "numbered", "partitionNum": partition, "partitions": 0},
    )
    emit(SegmentAllocated(request_id=req.request_id, task_id=req.task_id, segment_id=str(segment.id),
                          segment=segment, lock_id=lock.lock_id, sequence_name=req.sequence_name,
                          previous_segment_id=req.previous_segment_id, skip_lineage_check=req.skip_lineage_check))
    return None


def _version_clash(box: Lockbox, src: SourceState, interval: Interval, version: str) -> str | None:
    """Why a segment of ``version`` in ``interval`` would overlap a chunk of that version with another interval
    (Druid's createNewSegment: "conflicting segment"), if it would: the timeline keeps one interval per version
    and time chunk, so one of the two would be hidden."""
    clash = sorted((iv for iv in _same_version_chunks(box, src, version)
                    if iv != interval and iv.overlaps(interval)), key=lambda iv: (iv.start, iv.end))
    if clash:
        return (f"chunk {clash[0].iso()} of version {version} overlaps {interval.iso()}: "
                "a version has one interval per time chunk")
    return None


def _groups_replace_lock(src: SourceState, req: SegmentAllocationRequested, info: TaskInfo,
                         interval: Interval) -> TaskLock | None:
    """A live REPLACE lock of the task's group overlapping ``interval`` that an appending allocation under an
    exclusive or shared lock (a segment lock, a lock the allocation takes, or a held one that does not
    overwrite) would sit beside, if there is one. Druid's TaskLockbox never lets such locks coexist with a
    REPLACE lock (the group's own included, at equal priority); here a group never blocks itself, so the
    allocation is refused instead: its lock's version is newer than the REPLACE's, an APPEND of the group
    would join that pending chunk, and once published it would hide the REPLACE's rows."""
    if req.lock_type not in ("exclusive", "shared"):
        return None
    if req.lock_granularity == "timeChunk":
        held = _covering_lock(src, req.task_id, interval, req.lock_type)
        if held is not None and overwrites(held):
            return None
    for lock in src.locks.values():
        if (lock.lock_type == "replace" and lock.group_id == info.group_id and not lock.revoked
                and lock.interval.overlaps(interval)):
            return lock
    return None


def _repeat(box: Lockbox, src: SourceState, req: SegmentAllocationRequested, info: TaskInfo,
            prior: SegmentAllocated, at: int, emit: Emit) -> None:
    """Answer a repeated allocation with its segment, after doing what a fresh one does for the lock."""
    def deny(reason: str) -> None:
        emit(LockDenied(request_id=req.request_id, task_id=req.task_id, reason=reason))

    seg = prior.segment
    lock = src.locks.get(prior.lock_id) if prior.lock_id is not None else None
    if lock is not None and req.task_id not in src.holders.get(lock.lock_id, frozenset()):
        if lock.group_id != info.group_id:
            return deny(f"segment {prior.segment_id} was allocated under lock {lock.lock_id} of group "
                        f"{lock.group_id!r}, not {info.group_id!r}")
        if not lock.revoked:
            emit(LockGranted(request_id=req.request_id, task_id=req.task_id, lock=lock,
                             reason=f"joins its group's lock for {prior.segment_id}"))
    if lock is None:
        lock = _covering_lock(src, req.task_id, seg.interval, req.lock_type) if req.lock_granularity == "timeChunk" \
            else None
    if lock is None:
        lock_req = _lock_request(req, info, seg.interval)
        if req.lock_granularity == "segment":
            lock_req = replace(lock_req, partition_ids=(seg.partition_id,), version=seg.version)
        try:
            lock = box.acquire(src, lock_req, at, emit, for_allocation=True)
        except Blocked as blocked:
            return deny(f"cannot lock {seg.interval.iso()} again for {prior.segment_id}: held by "
                        + ", ".join(blocked.blocking))
    if lock.revoked:
        return deny(f"lock {lock.lock_id} was revoked")
    emit(SegmentAllocated(request_id=req.request_id, task_id=req.task_id, segment_id=prior.segment_id,
                          segment=seg, lock_id=lock.lock_id, sequence_name=req.sequence_name,
                          previous_segment_id=req.previous_segment_id, skip_lineage_check=req.skip_lineage_check))
    return None


def _group_of(box: Lockbox, task_id: str) -> str | None:
    info = box.tasks.get(task_id)
    return info.group_id if info is not None else None


def _covering_lock(src: SourceState, task_id: str, interval: Interval, lock_type: str) -> TaskLock | None:
    for lock in src.locks_of(task_id):
        if lock.granularity == "timeChunk" and lock.lock_type == lock_type and lock.interval.contains(interval):
            return lock
    return None


def overwritten_inputs(src: SourceState, group_id: str, interval: Interval, version: str) -> tuple[int, ...]:
    """Partitions of (interval, version) that exist and that the group holds exclusive segment locks on,
    except the locks allocations made for the group's own new partitions (those are outputs, not inputs)."""
    existing = src.chunk_partitions.get((interval.start, interval.end, version), set())
    allocated = {a.lock_id for a in src.allocations.values()
                 if a.segment.interval == interval and a.segment.version == version}
    locked: set[int] = set()
    for lock in src.locks.values():
        if (lock.group_id == group_id and lock.granularity == "segment" and lock.lock_type == "exclusive"
                and not lock.revoked and lock.interval == interval and lock.version == version
                and lock.lock_id not in allocated):
            locked.update(lock.partition_ids)
    return tuple(sorted(existing & locked))


def overwrite_shard_spec(src: SourceState, data_source: str, interval: Interval, version: str, partition: int,
                         inputs: tuple[int, ...], group_size: int) -> dict[str, JsonValue]:
    """Druid's ``numbered_overwrite`` shard spec of an output overwriting ``inputs`` of (interval, version):
    the root partition range its inputs cover, one minor version above theirs, the atomic update group's size.

    >>> src = SourceState()
    >>> overwrite_shard_spec(src, "wiki", Interval(0, 10), "v", 32768, (0, 1), 2)["endRootPartitionId"]
    2
    """
    lows, highs, minors = [], [], [0]
    for p in inputs:
        seg = src.segments.get(SegmentId(data_source, interval, version, p))
        spec = seg.overwrite_spec if seg is not None else None
        if spec is not None:
            lows.append(spec[0])
            highs.append(spec[1])
            minors.append(spec[2])
        else:
            lows.append(p)
            highs.append(p + 1)
    return {"type": "numbered_overwrite", "partitionId": partition, "startRootPartitionId": min(lows),
            "endRootPartitionId": max(highs), "minorVersion": max(minors) + 1, "atomicUpdateGroupSize": group_size}
