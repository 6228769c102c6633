"""A complete, ordered snapshot of a lockbox: what a restored lockbox needs to decide exactly as the live one.

``LockboxState.persistent()`` is what the decision log rebuilds; it leaves out
the waiting requests, and it compares dicts without their order. A lockbox
restored from a snapshot must instead *behave* identically to the one it was
taken from: the same decisions, byte for byte, for every later request. So a
snapshot keeps everything, and keeps every order that a decision can observe:

- the task registry (insertion order), the lock -> data source index;
- per data source, in the dict orders the lockbox iterates them: live locks
  (the first matching lock answers an idempotent re-request; the blocking list
  names locks in this order), their holders (``locks_of`` follows it), the lock
  sequence, published segments, allocations, the stream metadata, appends under replace locks (tuple order),
  committed replace locks, the chunks replace publishes committed, the released overwriting locks, the
  tasks of each group that allocated (their allocations go when the group's last task ends) and
  the **waiting requests in arrival order** with their event times (they decide later grants and their
  versions).

Derived, so not written (format 5): the partition counters (from the published segments and the
allocation records) and the ended tasks still referred to (the ended members of groups that keep
allocation records). A format 4 snapshot is read too (its counters and ended tasks are dropped and
derived again: the fold keeps them exactly so since format 5), so a store written before needs no rebuild.

**The split form** (:func:`split_snapshot_to_json`, :func:`lockbox_from_split_json`): the same snapshot
without the committed segments, each data source's ``segmentCount`` instead. It is for a store that keeps the
committed segments apart, one entry per segment, appended as they are committed (the lockbox agent's store):
``segments`` is append-only (:meth:`SourceState.add_segment`), so the first ``segmentCount`` stored
segments of a data source, in commit order, are exactly its segments when the snapshot was taken, and the
split snapshot costs the rest of the state, not every segment ever committed. Invariant (unit-tested):
restoring the split form with the segments committed then, or with any later list of them (a longer list
in the same order), equals restoring the full form.

Sets are written sorted (only membership is ever read from them). Records go
through the events codec (``encode_record`` / ``decode_record``), so a
snapshot holds only JSON values and :func:`decode_snapshot` of
:func:`encode_snapshot` restores an equal, equally ordered state. Invariant
(a property test): for any request history ``h`` and any cut ``k``, restoring
the snapshot taken after ``h[:k]`` and handling ``h[k:]`` emits the decisions
the never-restored lockbox emits for ``h[k:]``, and ends in an equal snapshot.

>>> from events import Envelope, Instant, Interval, LockRequested, TaskStarted
>>> box = Lockbox()
>>> for i, t in enumerate(["a", "b"]):
...     _ = box.handle(Envelope(TaskStarted(task_id=t, group_id=t, task_type="index", data_source="wiki"),
...                             f"s{i}", Instant(0), "wiki"))
...     _ = box.handle(Envelope(LockRequested(request_id=f"r{t}", task_id=t, group_id=t, task_type="index",
...                             data_source="wiki", interval=Interval(0, 1000), granularity="timeChunk",
...                             lock_type="exclusive"), f"l{i}", Instant(5), "wiki"))
>>> restored = decode_snapshot(encode_snapshot(box))
>>> [w.request.request_id for w in restored.sources["wiki"].waiters]
['rb']
>>> snapshot_to_json(restored) == snapshot_to_json(box)
True
>>> split = split_snapshot_to_json(box)
>>> snapshot_to_json(lockbox_from_split_json(split, {})) == snapshot_to_json(box)  # no segment committed yet
True
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

import orjson

from coordinator.locks.lockbox import Lockbox
from coordinator.locks.state import LockboxState, SourceState, TaskInfo, Waiter
from events.locks import SegmentAllocated, TaskLock
from events.schema import decode_record, encode_record
from events.segment import SegmentDescriptor
from events.tasks import LockRequested

#: The layout of :func:`snapshot_to_json`; a reader refuses any other (2: ``replaceChunks``, ``nextOverwrite``;
#: 3: ``releasedOverwrites``; 4: ``allocators``, allocations and released locks pruned; 5: no ``ended``,
#: ``nextPartition``, ``nextOverwrite``: derived, pruned with the allocations). Format 4 is upcast on reading.
SNAPSHOT_VERSION = 5
_READABLE = (4, SNAPSHOT_VERSION)


class SnapshotError(ValueError):
    """The bytes are not a lockbox snapshot of this layout."""


#: The key of the split form (:func:`split_snapshot_to_json`): its segments are stored apart.
_APART = "segmentsApart"


def snapshot_to_json(box: LockboxState) -> dict[str, Any]:
    """The whole state as JSON values; equal snapshots mean equal states with equal iteration orders."""
    return {
        "version": SNAPSHOT_VERSION,
        "tasks": [[t.task_id, t.group_id, t.task_type, t.data_source, t.priority] for t in box.tasks.values()],
        "lockSource": [[lock_id, ds] for lock_id, ds in box.lock_source.items()],
        "sources": [[ds, _source_to_json(src)] for ds, src in box.sources.items()],
    }


def split_snapshot_to_json(box: LockboxState) -> dict[str, Any]:
    """:func:`snapshot_to_json` without the committed segments: per data source their number,
    ``segmentCount``, instead (see the module docstring); :func:`lockbox_from_split_json` reads it back."""
    return {
        "version": SNAPSHOT_VERSION,
        _APART: True,
        "tasks": [[t.task_id, t.group_id, t.task_type, t.data_source, t.priority] for t in box.tasks.values()],
        "lockSource": [[lock_id, ds] for lock_id, ds in box.lock_source.items()],
        "sources": [[ds, _source_to_json(src, apart=True)] for ds, src in box.sources.items()],
    }


def _source_to_json(src: SourceState, apart: bool = False) -> dict[str, Any]:
    return {
        "locks": [encode_record(lock) for lock in src.locks.values()],
        "holders": [[lock_id, sorted(tasks)] for lock_id, tasks in src.holders.items()],
        "lockSeq": src.lock_seq,
        **({"segmentCount": len(src.segments)} if apart
           else {"segments": [encode_record(seg) for seg in src.segments.values()]}),
        "allocations": [[list(key), encode_record(a)] for key, a in src.allocations.items()],
        "metadata": src.metadata,
        "appendedUnder": [[lock_id, [encode_record(s) for s in segs]] for lock_id, segs in src.appended_under.items()],
        "committedReplaces": sorted(src.committed_replaces),
        "replaceChunks": [list(key) for key in sorted(src.replace_chunks)],
        "releasedOverwrites": sorted(src.released_overwrites),
        "allocators": [[group, sorted(tasks)] for group, tasks in src.allocators.items()],
        "waiters": [[encode_record(w.request), w.at] for w in src.waiters],
    }


def lockbox_from_json(obj: Any) -> Lockbox:
    """The lockbox a :func:`snapshot_to_json` value describes (raises :class:`SnapshotError` on another layout).

    Format 4 is upcast: its ``ended``, ``nextPartition`` and ``nextOverwrite`` are left out, the lockbox derives
    them from the tasks, the published segments and the allocation records (what a replay of the same log by
    this code keeps, since allocation records were pruned the same way in format 4)."""
    _check_layout(obj, apart=False)
    return _lockbox(obj, lambda ds, src: (decode_record(SegmentDescriptor, seg, "segment")
                                          for seg in src["segments"]))


def lockbox_from_split_json(obj: Any, segments: Mapping[str, Sequence[SegmentDescriptor]]) -> Lockbox:
    """The lockbox a :func:`split_snapshot_to_json` value describes, with ``segments``: per data source, the
    committed segments in commit order, at least the first ``segmentCount`` of them (later ones, committed
    after the snapshot, are left out: handling the requests after the snapshot commits them again). Raises
    :class:`SnapshotError` on another layout or when fewer segments than counted are given."""
    _check_layout(obj, apart=True)

    def first(ds: str, src: dict[str, Any]) -> Sequence[SegmentDescriptor]:
        count = src["segmentCount"]
        have = segments.get(ds, ())
        if len(have) < count:
            raise SnapshotError(f"data source {ds!r}: the snapshot counts {count} committed segments, "
                                f"{len(have)} are given")
        return have[:count]

    return _lockbox(obj, first)


def _check_layout(obj: Any, apart: bool) -> None:
    if not isinstance(obj, dict) or obj.get("version") not in _READABLE:
        found = obj.get("version") if isinstance(obj, dict) else type(obj).__name__
        raise SnapshotError(f"not a lockbox snapshot of version {' or '.join(map(str, _READABLE))} "
                            f"(found {found!r})")
    if bool(obj.get(_APART)) != apart:
        raise SnapshotError("a lockbox snapshot whose segments are stored apart: read it with its segments "
                            "(lockbox_from_split_json)" if not apart else
                            "a full lockbox snapshot, not the split form (read it with lockbox_from_json)")


def _lockbox(obj: dict[str, Any],
             segments_of: Callable[[str, dict[str, Any]], Iterable[SegmentDescriptor]]) -> Lockbox:
    box = Lockbox()
    box.tasks = {t[0]: TaskInfo(t[0], t[1], t[2], t[3], t[4]) for t in obj["tasks"]}
    box.lock_source = {lock_id: ds for lock_id, ds in obj["lockSource"]}
    box.sources = {ds: _source_from_json(src, segments_of(ds, src)) for ds, src in obj["sources"]}
    return box


def _source_from_json(obj: dict[str, Any], segments: Iterable[SegmentDescriptor]) -> SourceState:
    locks = [decode_record(TaskLock, lock, "lock") for lock in obj["locks"]]
    return SourceState(
        locks={lock.lock_id: lock for lock in locks},
        holders={lock_id: frozenset(tasks) for lock_id, tasks in obj["holders"]},
        lock_seq=obj["lockSeq"],
        segments={seg.id: seg for seg in segments},
        allocations={(k[0], k[1], k[2]): decode_record(SegmentAllocated, a, "allocation")
                     for k, a in obj["allocations"]},
        metadata=obj["metadata"],
        appended_under={lock_id: tuple(decode_record(SegmentDescriptor, s, "segment") for s in segs)
                        for lock_id, segs in obj["appendedUnder"]},
        committed_replaces=frozenset(obj["committedReplaces"]),
        waiters=[Waiter(decode_record(LockRequested, req, "waiter"), at) for req, at in obj["waiters"]],
        replace_chunks=frozenset((s, e, v) for s, e, v in obj["replaceChunks"]),
        released_overwrites=frozenset(obj["releasedOverwrites"]),
        allocators={group: frozenset(tasks) for group, tasks in obj["allocators"]},
    )


def encode_snapshot(box: LockboxState) -> bytes:
    """The snapshot as UTF-8 JSON bytes (a pure function of the state and its orders)."""
    return orjson.dumps(snapshot_to_json(box))


def decode_snapshot(data: bytes) -> Lockbox:
    """The lockbox of :func:`encode_snapshot` bytes."""
    try:
        obj = orjson.loads(data)
    except orjson.JSONDecodeError as e:
        raise SnapshotError(f"not a lockbox snapshot: {e}") from None
    return lockbox_from_json(obj)
