"""A snapshot of one input partition's timeline state, and its codec: what the ``snapshots`` topic holds.

The timeline fold is per data source and ``segments`` is keyed by data source, so the state of the data
sources whose records arrive on one partition of ``segments`` depends on that partition's records alone. A
:class:`PartitionSnapshot` is that state after every record below ``next_offset``: the facts of every known
segment of those data sources (:mod:`coordinator.timeline.facts`), the id texts the fold learned for them, and
the ids of the last events applied in the partition (so a duplicate of one of them, arriving again at a new
position after ``next_offset``, is still dropped by whoever resumes from it). A worker that gains the partition
restores it (:func:`restore_partition`) and folds only the records from ``next_offset`` on.

**Invariant** (property-tested in ``tests/unit/timeline/test_partition_snapshot.py``): for any history ``h`` of
the partition and any cut ``k``, restoring ``decode_snapshot(encode_snapshot(take_snapshot(fold(h[:k]))))``
and folding ``h[k:]`` gives the state of ``fold(h)``, and emits the same changes for ``h[k:]`` as the fold
that never stopped.

**Wire form.** ``encode_snapshot`` writes the magic ``SCTS1`` then zlib-compressed JSON (a snapshot repeats
descriptors, and a Kafka record is limited to about 1 MB); ``decode_snapshot`` refuses anything else with a
:class:`SnapshotError` naming the field path and reason. The content is a function of the state only (facts
and ids in a fixed order), so two workers taking a snapshot of the same state at the same offset write equal
bytes but for ``writer``.

>>> from events import Interval, SegmentDescriptor, SegmentsPublished, SegmentAnnounced
>>> s = SegmentDescriptor("wiki", Interval.parse("2026-01-01/P1D"), "v1", 0, 1)
>>> tls = Timelines()
>>> _ = tls.apply(SegmentsPublished(task_id="t", segments=(s,)))
>>> _ = tls.apply(SegmentAnnounced(server="h1", segment=s))
>>> snap = take_snapshot(tls, {"wiki"}, "segments", 0, 2, ("e0", "e1"), "w1")
>>> back = decode_snapshot(encode_snapshot(snap))
>>> back == snap, back.next_offset, back.key
(True, 2, b'timeline/0')
>>> fresh = Timelines()
>>> restore_partition(fresh, back, drop=())
>>> fresh.states() == tls.states()
True
"""

from __future__ import annotations

import zlib
from collections.abc import Collection
from dataclasses import dataclass
from typing import Any

import orjson

from coordinator.timeline.facts import SegmentFacts, all_facts, forget_sources, known_ids, restore
from coordinator.timeline.timelines import Timelines
from events.schema import EventValidationError
from events.segment import SegmentId, SegmentIdError

MAGIC = b"SCTS1"
SNAPSHOT_FORMAT = 1
AGENT = "timeline"


class SnapshotError(ValueError):
    """Bytes that are not a timeline partition snapshot of this format; names the field path and reason."""


@dataclass(frozen=True, slots=True)
class PartitionSnapshot:
    """The timeline state of one partition of ``topic`` after every record below ``next_offset``."""

    topic: str  # the logical input topic (``segments``)
    partition: int
    next_offset: int
    facts: tuple[tuple[SegmentId, SegmentFacts], ...]  # segment id order
    known_ids: tuple[tuple[str, SegmentId], ...]  # text order
    recent_ids: tuple[str, ...]  # event ids of the last events applied in the partition, oldest first
    writer: str = ""  # the worker that wrote it (for the logs; not part of the state)

    @property
    def key(self) -> bytes:
        """The record key on ``snapshots``: ``<agent>/<partition>`` (compacted: the latest per key is kept)."""
        return snapshot_key(self.partition)

    @property
    def data_sources(self) -> set[str]:
        return {sid.data_source for sid, _ in self.facts} | {sid.data_source for _, sid in self.known_ids}


def snapshot_key(partition: int) -> bytes:
    return f"{AGENT}/{partition}".encode()


def take_snapshot(timelines: Timelines, data_sources: Collection[str], topic: str, partition: int,
                  next_offset: int, recent_ids: Collection[str], writer: str = "") -> PartitionSnapshot:
    """The snapshot of ``data_sources`` (those of the partition) in ``timelines``, covering ``next_offset``."""
    facts = tuple(all_facts(timelines, data_sources).items())
    return PartitionSnapshot(topic, partition, next_offset, facts, tuple(known_ids(timelines, data_sources)),
                             tuple(recent_ids), writer)


def restore_partition(timelines: Timelines, snapshot: PartitionSnapshot, drop: Collection[str]) -> None:
    """Replace the partition's state in ``timelines`` by the snapshot's: the data sources of ``drop`` (what the
    fold held of the partition before, possibly behind) are forgotten, then the snapshot's are rebuilt."""
    forget_sources(timelines, set(drop) | snapshot.data_sources)
    restore(snapshot.facts, snapshot.known_ids, into=timelines)


def _sid_json(sid: SegmentId) -> list[Any]:
    return [sid.data_source, sid.interval.start, sid.interval.end, sid.version, sid.partition_id]


def encode_snapshot(snapshot: PartitionSnapshot, facts_json: bytes | None = None,
                    ids_json: bytes | None = None) -> bytes:
    """The snapshot's record value. ``facts_json``: its facts already encoded, the JSON array of every fact's
    ``to_bytes()`` in the snapshot's order (then ``snapshot.facts`` is not read); ``ids_json``: its known ids
    already encoded, the JSON array of ``[text, id key]`` in text order (then ``snapshot.known_ids`` is not
    read). The same bytes either way."""
    body = {
        "format": SNAPSHOT_FORMAT, "agent": AGENT, "topic": snapshot.topic, "partition": snapshot.partition,
        "nextOffset": snapshot.next_offset, "writer": snapshot.writer,
        "facts": orjson.Fragment(facts_json) if facts_json is not None else [f.to_json() for _, f in snapshot.facts],
        "ids": orjson.Fragment(ids_json) if ids_json is not None
        else [[text, _sid_json(sid)] for text, sid in snapshot.known_ids],
        "recentIds": list(snapshot.recent_ids),
    }
    return MAGIC + zlib.compress(orjson.dumps(body), 6)


def _field(obj: Any, name: str, kind: type | tuple[type, ...], path: str = "") -> Any:
    if not isinstance(obj, dict) or name not in obj:
        raise SnapshotError(f"{path}{name}: missing")
    value = obj[name]
    if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
        raise SnapshotError(f"{path}{name}: expected {getattr(kind, '__name__', kind)}, got {type(value).__name__}")
    return value


def _sid_of(raw: Any, path: str) -> SegmentId:
    from events.interval import Interval

    if not (isinstance(raw, list) and len(raw) == 5 and isinstance(raw[0], str) and isinstance(raw[1], int)
            and isinstance(raw[2], int) and isinstance(raw[3], str) and isinstance(raw[4], int)):
        raise SnapshotError(f"{path}: expected [dataSource, startMs, endMs, version, partitionId]")
    try:
        return SegmentId(raw[0], Interval(raw[1], raw[2]), raw[3], raw[4])
    except (ValueError, SegmentIdError) as e:
        raise SnapshotError(f"{path}: {e}") from None


def decode_snapshot(data: bytes) -> PartitionSnapshot:
    """The snapshot :func:`encode_snapshot` wrote; raises :class:`SnapshotError` naming the field and reason."""
    if not data.startswith(MAGIC):
        raise SnapshotError(f"(record): not a timeline snapshot (expected the magic {MAGIC!r})")
    try:
        obj = orjson.loads(zlib.decompress(data[len(MAGIC):]))
    except (zlib.error, orjson.JSONDecodeError) as e:
        raise SnapshotError(f"(record): unreadable body: {e}") from None
    if _field(obj, "format", int) != SNAPSHOT_FORMAT:
        raise SnapshotError(f"format: expected {SNAPSHOT_FORMAT}, got {obj['format']}")
    if _field(obj, "agent", str) != AGENT:
        raise SnapshotError(f"agent: expected {AGENT!r}, got {obj['agent']!r}")
    facts = []
    for i, raw in enumerate(_field(obj, "facts", list)):
        path = f"facts[{i}]"
        if not isinstance(raw, dict) or not isinstance(raw.get("servers"), list) or "used" not in raw:
            raise SnapshotError(f"{path}: expected {{segment, used, servers}}")
        try:
            f = SegmentFacts.from_json(raw, path)
        except EventValidationError as e:
            raise SnapshotError(str(e)) from None
        facts.append((f.segment.id, f))
    ids = []
    for i, raw in enumerate(_field(obj, "ids", list)):
        if not (isinstance(raw, list) and len(raw) == 2 and isinstance(raw[0], str)):
            raise SnapshotError(f"ids[{i}]: expected [text, segment id]")
        ids.append((raw[0], _sid_of(raw[1], f"ids[{i}][1]")))
    recent = _field(obj, "recentIds", list)
    if not all(isinstance(x, str) for x in recent):
        raise SnapshotError("recentIds: expected a list of event ids")
    offset, partition = _field(obj, "nextOffset", int), _field(obj, "partition", int)
    if offset < 0 or partition < 0:
        raise SnapshotError("nextOffset/partition: must not be negative")
    return PartitionSnapshot(_field(obj, "topic", str), partition, offset, tuple(facts), tuple(ids),
                             tuple(recent), _field(obj, "writer", str))
