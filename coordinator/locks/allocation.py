"""Segment allocation: new segment ids, consecutive per (dataSource, interval, version), never reused.

- Idempotent per (sequenceName, previousSegmentId), and per (sequenceName,
  interval) for streaming tasks that skip the lineage check: a repeated request
  gets the same segment id back.
- With **segment** lock granularity the lock and the id are made atomically:
  the new partition gets its own exclusive segment lock. Appending into an
  existing chunk takes its visible version; overwriting with segment locks
  (the group holds segment locks on existing partitions of the chunk) keeps the
  version and fills ``overshadowedSegments`` with those inputs and
  ``atomicUpdateGroup`` with the outputs of that chunk.
- With **timeChunk** granularity the segment takes the version of the task's
  lock of the requested type covering the interval (acquired if the task has
  none). An allocation never waits: if the lock cannot be had it is denied.
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING

from coordinator.locks.conflicts import Blocked, Emit
from coordinator.locks.state import SourceState, allocation_key
from events.interval import Interval
from events.locks import LockDenied, SegmentAllocated, TaskLock
from events.segment import SegmentDescriptor
from events.tasks import LockRequested, SegmentAllocationRequested

if TYPE_CHECKING:
    from coordinator.locks.lockbox import Lockbox


def allocate(box: Lockbox, req: SegmentAllocationRequested, at: int, emit: Emit) -> None:
    def deny(reason: str) -> None:
        emit(LockDenied(request_id=req.request_id, task_id=req.task_id, reason=reason))

    info = box.check_task(req.task_id, req.data_source)
    if isinstance(info, str):
        return deny(info)
    src = box.source(req.data_source)
    interval = req.interval or _chunk_containing(src, req.timestamp)
    if interval is None:
        return deny("no interval given and no existing chunk contains the timestamp")
    if interval.is_empty() or not interval.contains_instant(req.timestamp):
        return deny(f"interval {interval.iso()} does not contain the timestamp of the row")
    if req.lock_granularity == "segment" and req.lock_type in ("append", "replace"):
        return deny(f"{req.lock_type} locks exist for timeChunk granularity only")

    key = allocation_key(req.sequence_name, req.previous_segment_id, interval, req.skip_lineage_check)
    prior = src.allocations.get(key)
    if prior is not None:
        emit(SegmentAllocated(request_id=req.request_id, task_id=req.task_id, segment_id=prior.segment_id,
                              segment=prior.segment, lock_id=prior.lock_id, sequence_name=req.sequence_name,
                              previous_segment_id=req.previous_segment_id,
                              skip_lineage_check=req.skip_lineage_check))
        return None

    lock_req = LockRequested(
        request_id=req.request_id, task_id=req.task_id, group_id=info.group_id, task_type=info.task_type,
        data_source=req.data_source, interval=interval, granularity=req.lock_granularity, lock_type=req.lock_type,
    )
    overshadowed: tuple[int, ...] = ()
    group: tuple[int, ...] = ()
    if req.lock_granularity == "segment":
        version = box.version_for(src, lock_req, at)
        partition = src.next_partition_id(interval, version)
        lock_req = replace(lock_req, partition_ids=(partition,))
        inputs = overwritten_inputs(src, info.group_id, interval, version)
        if inputs:
            outputs = {a.segment.partition_id for a in src.allocations.values()
                       if a.segment.interval == interval and a.segment.version == version
                       and _group_of(box, a.task_id) == info.group_id}
            overshadowed, group = inputs, tuple(sorted(outputs | {partition}))
        try:
            lock = box.acquire(src, lock_req, at, emit)
        except Blocked as blocked:
            return deny(f"cannot lock partition {partition} of {interval.iso()}: held by {', '.join(blocked.blocking)}")
    else:
        held = _covering_lock(src, req.task_id, interval, req.lock_type)
        if held is None:
            try:
                held = box.acquire(src, lock_req, at, emit)
            except Blocked as blocked:
                return deny(f"cannot lock {interval.iso()}: held by {', '.join(blocked.blocking)}")
        lock = held
        version = lock.version
        partition = src.next_partition_id(interval, version)
    if lock.revoked:
        return deny(f"lock {lock.lock_id} was revoked")
    segment = SegmentDescriptor(
        data_source=req.data_source, interval=interval, version=version, partition_id=partition,
        overshadowed_segments=overshadowed, atomic_update_group=group,
        shard_spec={"type": "numbered", "partitionNum": partition, "partitions": 0},
    )
    emit(SegmentAllocated(request_id=req.request_id, task_id=req.task_id, segment_id=str(segment.id),
                          segment=segment, lock_id=lock.lock_id, sequence_name=req.sequence_name,
                          previous_segment_id=req.previous_segment_id, skip_lineage_check=req.skip_lineage_check))
    return None


def _group_of(box: Lockbox, task_id: str) -> str | None:
    info = box.tasks.get(task_id)
    return info.group_id if info is not None else None


def _chunk_containing(src: SourceState, timestamp: int) -> Interval | None:
    found = [s.interval for s in src.segments.values() if s.interval.contains_instant(timestamp)]
    return min(found, key=lambda iv: (iv.duration, iv.start)) if found else None


def _covering_lock(src: SourceState, task_id: str, interval: Interval, lock_type: str) -> TaskLock | None:
    for lock in src.locks_of(task_id):
        if lock.granularity == "timeChunk" and lock.lock_type == lock_type and lock.interval.contains(interval):
            return lock
    return None


def overwritten_inputs(src: SourceState, group_id: str, interval: Interval, version: str) -> tuple[int, ...]:
    """Partitions of (interval, version) that exist and that the group holds exclusive segment locks on."""
    existing = {s.partition_id for s in src.segments.values() if s.interval == interval and s.version == version}
    locked: set[int] = set()
    for lock in src.locks.values():
        if (lock.group_id == group_id and lock.granularity == "segment" and lock.lock_type == "exclusive"
                and not lock.revoked and lock.interval == interval and lock.version == version):
            locked.update(lock.partition_ids)
    return tuple(sorted(existing & locked))
