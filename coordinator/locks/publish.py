"""Publish validation (Druid's transactional insert / append / replace actions): which segments a task may
commit, with what stream offsets, and the upgrades it causes.

The request names its kind; it is never inferred from the locks the task holds:

- **insert**: every segment covered by a live exclusive or shared timeChunk
  lock, or a segment lock on its partition, of the task, with a version not
  newer than the lock's. ``segmentsToBeOverwritten`` must be published segments
  the task has locked; with segment locks they are the overwritten inputs.
- **append**: every segment covered by a live APPEND lock of the task (any
  version: APPEND locks have the epoch version).
- **replace**: every segment covered by a live REPLACE lock of the task, version
  not newer than the lock's; no stream offsets.

A segment covered only by revoked locks is rejected with a reason naming the
lock. Stream offsets (insert and append) compare and merge per partition, see
:mod:`coordinator.locks.offsets`: ``startMetadata`` must match the stored
offsets where both name a partition, no end offset may fall below its start or
stored offset, and ``endMetadata`` is merged into the stored offsets.

**Upgrades** (every committed appended row visible exactly once, the replaced
data hidden): a replace commit upgrades each segment appended under its lock
into its own version and into the interval of its own segment containing it,
exactly once; an append committed at a version older than a chunk some replace
has already committed around it gets a copy in that chunk at once. Copies take
fresh partition ids and name the segment they copy (``upgradedFromSegmentIds``).

Overwriting with segment locks: the chunk's published outputs get the locked
inputs as ``overshadowedSegments`` and each other as ``atomicUpdateGroup``, and
outputs in Druid's ``numbered_overwrite`` form (partition ids from 32768) get
the matching shard spec: root partition range, minor version, group size (what
allocation wrote there was provisional: later outputs were not known yet).

A replace commit is refused while an uncommitted appending allocation of an
older version (a pending segment of a group that still runs) overlaps one of its
segments without lying inside it (Druid: "Replacing with a finer segment
granularity than a concurrent append is unsupported").

A segment that a newer committed version already hides over some of its
interval (and that gets no upgraded copy there) is refused: those rows would
never be seen.

Re-publishing exactly what is already published is accepted again with
``alreadyPublished`` and changes nothing (a retried request); publishing
different contents under a published id is rejected.
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING

from coordinator.locks.allocation import overwrite_shard_spec, overwritten_inputs
from coordinator.locks.conflicts import Emit
from coordinator.locks.offsets import matches, moves_backwards
from coordinator.locks.state import SourceState, overwrites, replace_locks_used
from events.interval import Interval
from events.locks import PublishAccepted, PublishRejected, TaskLock
from events.segment import OVERWRITE_PARTITION_START, SegmentDescriptor, SegmentId, SegmentIdError
from events.tasks import PublishKind, PublishRequested

if TYPE_CHECKING:
    from coordinator.locks.lockbox import Lockbox


def publish(box: Lockbox, req: PublishRequested, emit: Emit) -> None:
    def reject(reason: str) -> None:
        emit(PublishRejected(request_id=req.request_id, task_id=req.task_id, reason=reason))

    kind: PublishKind = req.kind or "insert"
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
        problem = _coverage_problem(seg, task_locks, req.task_id, data_source, kind)
        if problem is not None:
            return reject(problem)
    overwritten = _overwritten(src, req, task_locks, kind)
    if isinstance(overwritten, str):
        return reject(overwritten)
    already = [s for s in req.segments if s.id in src.segments]
    if already:
        if len(already) == len(req.segments) and all(src.segments[s.id] == s for s in already):
            emit(PublishAccepted(request_id=req.request_id, task_id=req.task_id, segments=req.segments,
                                 start_metadata=req.start_metadata, end_metadata=req.end_metadata,
                                 kind=req.kind, already_published=True))
            return None
        return reject(f"segment {already[0].id} is already published")
    if kind == "replace" and (req.start_metadata is not None or req.end_metadata is not None):
        return reject("a replace publish carries no stream metadata")
    if req.start_metadata is not None and src.metadata is not None and not matches(src.metadata, req.start_metadata):
        return reject(f"startMetadata {req.start_metadata!r} does not match the stored metadata {src.metadata!r}")
    if req.end_metadata is not None:
        back = moves_backwards(src.metadata, req.start_metadata, req.end_metadata)
        if back is not None:
            return reject(f"endMetadata would move the offset of partition {back} backwards "
                          f"(stored {src.metadata!r}, start {req.start_metadata!r}, end {req.end_metadata!r})")

    own = _fill_overwrite_lineage(src, info.group_id, req.segments, overwritten) if kind == "insert" \
        else list(req.segments)
    if kind == "replace":
        straddled = _straddled_pending_append(src, own)
        if straddled is not None:
            return reject(straddled)
        copies = _replace_upgrades(src, own, task_locks)
    elif kind == "append":
        copies = _append_upgrades(src, own)
    else:
        copies = []
    if isinstance(copies, str):
        return reject(copies)
    hidden = _born_hidden(src, own, copies)
    if hidden is not None:
        return reject(hidden)
    emit(PublishAccepted(
        request_id=req.request_id, task_id=req.task_id, segments=(*own, *(c for c, _ in copies)),
        upgraded_segment_ids=tuple(str(c.id) for c, _ in copies),
        start_metadata=req.start_metadata, end_metadata=req.end_metadata,
        upgraded_from_segment_ids=tuple(str(o.id) for _, o in copies) or None, kind=req.kind,
    ))
    return None


def _born_hidden(src: SourceState, own: list[SegmentDescriptor], copies: list[Copy]) -> str | None:
    """Why a segment would be committed already hidden, in whole or in part, if one would: a newer version,
    committed or in this publish, overlaps it and no upgraded copy of it reaches that version. Refused rather
    than committing rows no query sees (only a task group's own overlapping locks can lead here)."""
    for seg in own:
        over = [s for s in (*src.by_interval.overlapping(seg.interval), *own)
                if s.version > seg.version and s.interval.overlaps(seg.interval)]
        if not over:
            continue
        newest = max(over, key=lambda s: s.version)
        if not any(o is seg and c.version >= newest.version for c, o in copies):
            where = "this publish's version" if any(s is newest for s in own) else "the committed version"
            return (f"segment {seg.id} would be hidden at once by {where} {newest.version} of "
                    f"{newest.interval.iso()}")
    return None


def _coverage_problem(seg: SegmentDescriptor, locks: list[TaskLock], task_id: str, data_source: str,
                      kind: PublishKind) -> str | None:
    if seg.data_source != data_source:
        return f"segment {seg.id} is not of data source {data_source!r}"
    covering = [lk for lk in locks if lk.interval.contains(seg.interval)]
    if not covering:
        return f"segment {seg.id} is not covered by a lock of task {task_id}"
    wanted = {"append": ("append",), "replace": ("replace",), "insert": ("exclusive", "shared")}[kind]
    fitting = [lk for lk in covering if lk.lock_type in wanted]
    if not fitting:
        types = sorted({lk.lock_type.upper() for lk in covering})
        return (f"a {kind} publish needs {' or '.join(t.upper() for t in wanted)} locks: segment {seg.id} is "
                f"covered only by {', '.join(types)} locks of task {task_id}")
    live = [lk for lk in fitting if not lk.revoked]
    if not live:
        return f"lock {fitting[0].lock_id} covering segment {seg.id} was revoked"
    if kind == "append":
        return None  # APPEND locks cover segments of any version
    if not any(seg.version <= lk.version for lk in live):
        return f"segment {seg.id} has version {seg.version}, newer than lock {live[0].lock_id} ({live[0].version})"
    ok = [lk for lk in live if seg.version <= lk.version
          and (lk.granularity != "segment" or seg.partition_id in lk.partition_ids)]
    if not ok:
        return f"partition {seg.partition_id} of segment {seg.id} is not locked by task {task_id}"
    return None


def _overwritten(src: SourceState, req: PublishRequested, locks: list[TaskLock],
                 kind: PublishKind) -> list[SegmentDescriptor] | str:
    """The published segments ``segmentsToBeOverwritten`` names, each locked by the task; or the reason not."""
    out: list[SegmentDescriptor] = []
    for i, text in enumerate(req.segments_to_be_overwritten or ()):
        where = f"segmentsToBeOverwritten[{i}]"
        if kind != "insert":
            return f"{where}: only an insert publish overwrites named segments"
        try:
            sid = SegmentId.parse(text, req.segments[0].data_source)
        except SegmentIdError as e:
            return f"{where}: {e}"
        seg = src.segments.get(sid)
        if seg is None:
            return f"{where}: segment {text} is not published"
        if not any(not lk.revoked and lk.interval.contains(seg.interval) and seg.version <= lk.version
                   and (lk.granularity != "segment" or seg.partition_id in lk.partition_ids) for lk in locks):
            return f"{where}: segment {text} is not locked by task {req.task_id}"
        out.append(seg)
    return out


def _fill_overwrite_lineage(src: SourceState, group_id: str, segments: tuple[SegmentDescriptor, ...],
                            overwritten: list[SegmentDescriptor]) -> list[SegmentDescriptor]:
    out = []
    by_chunk: dict[tuple[int, int, str], list[int]] = {}
    for seg in segments:
        by_chunk.setdefault((seg.interval.start, seg.interval.end, seg.version), []).append(seg.partition_id)
    named: dict[tuple[int, int, str], list[int]] = {}
    for old in overwritten:
        named.setdefault((old.interval.start, old.interval.end, old.version), []).append(old.partition_id)
    for seg in segments:
        key = (seg.interval.start, seg.interval.end, seg.version)
        inputs = tuple(sorted(named[key])) if key in named else overwritten_inputs(src, group_id, seg.interval,
                                                                                   seg.version)
        if inputs:
            overwrite = seg.partition_id >= OVERWRITE_PARTITION_START
            outputs = tuple(sorted(p for p in by_chunk[key] if (p >= OVERWRITE_PARTITION_START) == overwrite))
            spec = seg.shard_spec
            if seg.partition_id >= OVERWRITE_PARTITION_START:  # Druid's form, final now that the group is known
                spec = overwrite_shard_spec(src, seg.data_source, seg.interval, seg.version, seg.partition_id,
                                            inputs, len(outputs))
            seg = replace(seg, overshadowed_segments=inputs, atomic_update_group=outputs, shard_spec=spec)
        out.append(seg)
    return out


Copy = tuple[SegmentDescriptor, SegmentDescriptor]  # (upgraded copy, the appended segment it copies)


class _Fresh:
    """Fresh partition ids per (interval, version): above every reserved id and the publish's own segments."""

    def __init__(self, src: SourceState, own: list[SegmentDescriptor]) -> None:
        self.src, self.own, self.taken = src, own, dict[tuple[int, int, str], int]()

    def copy(self, seg: SegmentDescriptor, interval: Interval, version: str) -> SegmentDescriptor:
        key = (interval.start, interval.end, version)
        mine = [s.partition_id + 1 for s in self.own if (s.interval.start, s.interval.end, s.version) == key
                and s.partition_id < OVERWRITE_PARTITION_START]
        pid = max([self.taken.get(key, 0), self.src.next_partition.get(key, 0), *mine])
        self.taken[key] = pid + 1
        spec = dict(seg.shard_spec) if seg.shard_spec is not None else None
        if spec is not None and "partitionNum" in spec:
            spec["partitionNum"] = pid
        return replace(seg, interval=interval, version=version, partition_id=pid, overshadowed_segments=(),
                       atomic_update_group=(), shard_spec=spec)


def _replace_upgrades(src: SourceState, own: list[SegmentDescriptor], task_locks: list[TaskLock]) -> list[Copy] | str:
    """Each segment appended under the REPLACE locks this publish commits under (see
    :func:`~coordinator.locks.state.replace_locks_used`), copied into the lock's version and into the
    interval of the smallest committed segment of that version containing it (its own interval when the
    publish writes nothing of that version over it)."""
    fresh = _Fresh(src, own)
    copies: list[Copy] = []
    for lock in replace_locks_used(task_locks, own):
        mine = [s for s in own if s.version == lock.version]
        for seg in src.appended_under.get(lock.lock_id, ()):
            holders = sorted((s.interval for s in mine if s.interval.contains(seg.interval)),
                             key=lambda iv: (iv.duration, iv.start))
            if holders:
                interval = holders[0]
            elif any(s.interval.overlaps(seg.interval) for s in mine):
                return (f"appended segment {seg.id} straddles this publish's segments of version {lock.version}: "
                        f"no single one can take its upgraded copy")
            else:
                interval = seg.interval
            copies.append((fresh.copy(seg, interval, lock.version), seg))
    return copies


def _straddled_pending_append(src: SourceState, own: list[SegmentDescriptor]) -> str | None:
    """Why a replace commit is refused, if it is: an uncommitted appending allocation (a pending segment of a
    group that still runs: Druid's concurrent append) of an older version overlaps one of its segments without
    lying inside it. Druid refuses this commit ("Replacing with a finer segment granularity than a concurrent
    append is unsupported"): the pending segment's upgraded copy would need one replace interval holding it, and
    committed later it would be partly hidden at once, its rows there lost. Allocations under overwriting locks
    (live, or released while their task runs) are not appends: an overwrite is not data until it commits."""
    if not src.allocations:
        return None
    lo, hi = min(s.interval.start for s in own), max(s.interval.end for s in own)
    for a in src.allocations.values():
        pending = a.segment
        iv = pending.interval
        if iv.end <= lo or hi <= iv.start or pending.id in src.segments:
            continue
        lock = src.locks.get(a.lock_id) if a.lock_id is not None else None
        if (lock is not None and overwrites(lock)) or (lock is None and a.lock_id in src.released_overwrites):
            continue
        for seg in own:
            if pending.version < seg.version and iv.overlaps(seg.interval) and not seg.interval.contains(iv):
                return ("Replacing with a finer segment granularity than a concurrent append is unsupported: "
                        f"cannot upgrade pending segment {pending.id} to version {seg.version} as the replace "
                        f"interval {seg.interval.iso()} does not fully contain its interval {iv.iso()}")
    return None


def _append_upgrades(src: SourceState, own: list[SegmentDescriptor]) -> list[Copy]:
    """Copies of appended segments into every chunk a REPLACE committed around them at a newer version."""
    fresh = _Fresh(src, own)
    copies: list[Copy] = []
    for seg in own:
        for start, end, version in sorted(src.replace_chunks):
            chunk = Interval(start, end)
            if version > seg.version and chunk.contains(seg.interval):
                copies.append((fresh.copy(seg, chunk, version), seg))
    return copies
