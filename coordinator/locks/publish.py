"""Publish validation: which segments a task may commit, with what metadata, and the upgrades it causes.

- Every segment must be covered by a live lock the task holds: interval
  contained, version not newer than the lock's, and for segment locks the
  partition locked. A segment covered only by revoked locks is rejected with a
  reason naming the lock.
- Optional compare-and-swap of stream offsets: ``startMetadata`` must equal the
  stored metadata (anything is accepted while none is stored); ``endMetadata`` is
  stored.
- Overwriting with segment locks: the chunk's published outputs get the locked
  inputs as ``overshadowedSegments`` and each other as ``atomicUpdateGroup``
  (what allocation wrote there was provisional: later outputs were not known yet).
- A **replace** commit upgrades the segments appended under its lock into its
  version with fresh partition ids; an **append** committed while a replace lock
  that has already committed encloses it is published with its upgraded copy.
- Re-publishing exactly what is already published is accepted again (a retried
  request); publishing different contents under a published id is rejected.
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING

from coordinator.locks.allocation import overwritten_inputs
from coordinator.locks.conflicts import Emit
from coordinator.locks.state import SourceState
from events.locks import PublishAccepted, PublishRejected, TaskLock
from events.segment import SegmentDescriptor
from events.tasks import PublishRequested

if TYPE_CHECKING:
    from coordinator.locks.lockbox import Lockbox


def publish(box: Lockbox, req: PublishRequested, emit: Emit) -> None:
    def reject(reason: str) -> None:
        emit(PublishRejected(request_id=req.request_id, task_id=req.task_id, reason=reason))

    data_source = req.segments[0].data_source
    info = box.check_task(req.task_id, data_source)
    if isinstance(info, str):
        return reject(info)
    src = box.source(data_source)
    ids = [s.id for s in req.segments]
    if len(set(ids)) != len(ids):
        return reject("the request names a segment twice")
    task_locks = src.locks_of(req.task_id)
    for seg in req.segments:
        problem = _coverage_problem(seg, task_locks, req.task_id, data_source)
        if problem is not None:
            return reject(problem)
    already = [s for s in req.segments if s.id in src.segments]
    if already:
        if len(already) == len(req.segments) and all(src.segments[s.id] == s for s in already):
            emit(PublishAccepted(request_id=req.request_id, task_id=req.task_id, segments=req.segments,
                                 start_metadata=req.start_metadata, end_metadata=req.end_metadata))
            return None
        return reject(f"segment {already[0].id} is already published")
    if req.start_metadata is not None and src.metadata is not None and req.start_metadata != src.metadata:
        return reject(f"startMetadata {req.start_metadata!r} does not match the stored metadata {src.metadata!r}")

    own = _fill_overwrite_lineage(src, info.group_id, req.segments)
    copies = _upgraded_copies(src, info.group_id, own, task_locks)
    emit(PublishAccepted(
        request_id=req.request_id, task_id=req.task_id, segments=(*own, *copies),
        upgraded_segment_ids=tuple(str(c.id) for c in copies),
        start_metadata=req.start_metadata, end_metadata=req.end_metadata,
    ))
    return None


def _coverage_problem(seg: SegmentDescriptor, locks: list[TaskLock], task_id: str, data_source: str) -> str | None:
    if seg.data_source != data_source:
        return f"segment {seg.id} is not of data source {data_source!r}"
    covering = [lk for lk in locks if lk.interval.contains(seg.interval)]
    if not covering:
        return f"segment {seg.id} is not covered by a lock of task {task_id}"
    live = [lk for lk in covering if not lk.revoked]
    if not live:
        return f"lock {covering[0].lock_id} covering segment {seg.id} was revoked"
    if not any(seg.version <= lk.version for lk in live):
        return f"segment {seg.id} has version {seg.version}, newer than lock {live[0].lock_id} ({live[0].version})"
    ok = [lk for lk in live if seg.version <= lk.version
          and (lk.granularity != "segment" or seg.partition_id in lk.partition_ids)]
    if not ok:
        return f"partition {seg.partition_id} of segment {seg.id} is not locked by task {task_id}"
    return None


def _fill_overwrite_lineage(src: SourceState, group_id: str,
                            segments: tuple[SegmentDescriptor, ...]) -> list[SegmentDescriptor]:
    out = []
    by_chunk: dict[tuple[int, int, str], list[int]] = {}
    for seg in segments:
        by_chunk.setdefault((seg.interval.start, seg.interval.end, seg.version), []).append(seg.partition_id)
    for seg in segments:
        inputs = overwritten_inputs(src, group_id, seg.interval, seg.version)
        if inputs:
            outputs = tuple(sorted(by_chunk[(seg.interval.start, seg.interval.end, seg.version)]))
            seg = replace(seg, overshadowed_segments=inputs, atomic_update_group=outputs)
        out.append(seg)
    return out


def _upgraded_copies(src: SourceState, group_id: str, own: list[SegmentDescriptor],
                     task_locks: list[TaskLock]) -> list[SegmentDescriptor]:
    """Copies of appended segments in a replace lock's version, with fresh partition ids."""
    taken: dict[tuple[int, int, str], int] = {}

    def fresh(seg: SegmentDescriptor, version: str) -> SegmentDescriptor:
        key = (seg.interval.start, seg.interval.end, version)
        mine = [s.partition_id + 1 for s in own if (s.interval.start, s.interval.end, s.version) == key]
        pid = max([taken.get(key, 0), src.next_partition.get(key, 0), *mine])
        taken[key] = pid + 1
        spec = dict(seg.shard_spec) if seg.shard_spec is not None else None
        if spec is not None and "partitionNum" in spec:
            spec["partitionNum"] = pid
        return replace(seg, version=version, partition_id=pid, overshadowed_segments=(), atomic_update_group=(),
                       shard_spec=spec)

    copies: list[SegmentDescriptor] = []
    for lock in task_locks:  # a replace commit: upgrade what was appended under it
        if lock.lock_type == "replace" and not lock.revoked:
            copies.extend(fresh(seg, lock.version) for seg in src.appended_under.get(lock.lock_id, ()))
    appends = [s for s in own if any(lk.lock_type == "append" and lk.interval.contains(s.interval)
                                     for lk in task_locks)]
    for seg in appends:  # an append after a replace committed: its copy now
        for lock in src.locks.values():
            if (lock.lock_type == "replace" and not lock.revoked and lock.group_id != group_id
                    and lock.interval.contains(seg.interval) and lock.lock_id in src.committed_replaces):
                copies.append(fresh(seg, lock.version))
    return copies
