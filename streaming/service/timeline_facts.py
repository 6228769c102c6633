"""The facts the timeline agent stores, and the bridge between them and the pure :class:`Timelines`.

A segment's states are a pure function of the used segments and the online
map (docs/timeline.md), so the agent stores exactly those facts per known segment:
its descriptor (the one the timeline holds: a published descriptor wins over an
announced one), whether it is used, and the servers announcing it; plus its
current state, and every segment id text the fold has learned (the fold
resolves id texts in ``unannounce``/``markUnused`` events against those first,
so a restore must know the same texts, even of segments since forgotten).
:func:`restore` rebuilds a :class:`Timelines` from them with ``Timeline.build``;
states after a restore equal those of the incremental fold (the timeline's
"bulk equals incremental" property).

This module is the only place of the shell that reads ``Timelines``/``Timeline``
internals (``_by_source``, ``_ids``, ``_used``, ``_resolve``): the core has no
public "restore from facts", "is used" or "resolve id text" yet. Moving these
three functions into ``coordinator/timeline/timelines.py`` would remove that.

Key layout (under the store's ``data/``): ``seg/<id key>`` -> facts JSON,
``state/<id key>`` -> state text, ``id/<id text>`` -> id key; an id key is the
JSON array ``[dataSource, startMs, endMs, version, partitionId]`` (segment id
*texts* can be ambiguous, the tuple cannot).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

import orjson

from coordinator.timeline.timeline import Timeline
from coordinator.timeline.timelines import Timelines
from events.interval import Interval
from events.registry import Event
from events.schema import decode_record, encode_record
from events.segment import SegmentDescriptor, SegmentId
from events.segments import (
    SegmentAnnounced,
    SegmentsMarkedUnused,
    SegmentsMarkedUsed,
    SegmentsPublished,
    SegmentUnannounced,
)
from events.visibility import SegmentState

SEG_PREFIX = b"seg/"
STATE_PREFIX = b"state/"
ID_PREFIX = b"id/"


@dataclass(frozen=True, slots=True)
class SegmentFacts:
    """What the timeline knows of one segment: descriptor, used or not, servers announcing it (sorted)."""

    segment: SegmentDescriptor
    used: bool
    servers: tuple[str, ...]

    def to_bytes(self) -> bytes:
        return orjson.dumps({"segment": encode_record(self.segment), "used": self.used, "servers": self.servers})

    @staticmethod
    def from_bytes(data: bytes) -> SegmentFacts:
        obj = orjson.loads(data)
        return SegmentFacts(decode_record(SegmentDescriptor, obj["segment"], "segment"), bool(obj["used"]),
                            tuple(obj["servers"]))


def id_key(sid: SegmentId) -> bytes:
    return orjson.dumps([sid.data_source, sid.interval.start, sid.interval.end, sid.version, sid.partition_id])


def parse_id_key(data: bytes) -> SegmentId:
    ds, start, end, version, partition = orjson.loads(data)
    return SegmentId(ds, Interval(start, end), version, partition)


def touched_ids(timelines: Timelines, event: Event) -> list[SegmentId]:
    """The segments whose facts ``event`` may change, resolved as ``Timelines.apply`` will resolve them.

    Call it before ``apply``; raises EventValidationError for an id text that names no segment.
    """
    if isinstance(event, SegmentsPublished | SegmentsMarkedUsed):
        return [s.id for s in event.segments]
    if isinstance(event, SegmentAnnounced):
        return [event.segment.id]
    if isinstance(event, SegmentUnannounced):
        return [timelines._resolve(event.segment_id, "payload.segmentId")]
    if isinstance(event, SegmentsMarkedUnused):
        return [timelines._resolve(t, f"payload.segmentIds[{i}]") for i, t in enumerate(event.segment_ids)]
    return []


def learned_ids(event: Event) -> list[SegmentId]:
    """The ids whose text ``Timelines.apply(event)`` records for later resolution (latest wins)."""
    if isinstance(event, SegmentsPublished | SegmentsMarkedUsed):
        return [s.id for s in event.segments]
    if isinstance(event, SegmentAnnounced):
        return [event.segment.id]
    return []


def unrecorded_ids(timelines: Timelines, event: Event) -> list[SegmentId]:
    """The ids of :func:`learned_ids` whose text the fold does not resolve to them yet (call before ``apply``):
    the only ``id/`` entries a commit has to write, since the store holds every text the fold resolves."""
    known = timelines._ids
    return [sid for sid in learned_ids(event) if known.get(str(sid)) != sid]


def facts_of(timelines: Timelines, sid: SegmentId) -> SegmentFacts | None:
    """The facts of one segment now, or None when the timeline no longer knows it."""
    tl = timelines._by_source.get(sid.data_source)
    seg = None if tl is None else tl.segment(sid)
    if tl is None or seg is None:
        return None
    return SegmentFacts(seg, sid in tl._used, tuple(sorted(tl.servers(sid))))


def all_facts(timelines: Timelines) -> dict[SegmentId, SegmentFacts]:
    """Every known segment's facts, by id (tests compare a store with a pure fold through this)."""
    out: dict[SegmentId, SegmentFacts] = {}
    for ds in timelines.data_sources():
        tl = timelines.timeline(ds)
        for sid in sorted(set(tl.used()) | set(tl.online())):
            facts = facts_of(timelines, sid)
            if facts is not None:
                out[sid] = facts
    return out


def all_states(timelines: Timelines) -> dict[SegmentId, SegmentState]:
    return {sid: st for ds in timelines.data_sources() for sid, st in timelines.timeline(ds).states().items()}


def restore(facts: Iterable[tuple[SegmentId, SegmentFacts]], known_ids: Iterable[tuple[str, SegmentId]]) -> Timelines:
    """A Timelines equal in states (and in id resolution) to the fold that produced these facts."""
    used: dict[str, list[SegmentDescriptor]] = {}
    online: dict[str, dict[SegmentId, tuple[SegmentDescriptor, tuple[str, ...]]]] = {}
    for sid, f in facts:
        if f.used:
            used.setdefault(sid.data_source, []).append(f.segment)
        if f.servers:
            online.setdefault(sid.data_source, {})[sid] = (f.segment, f.servers)
    timelines = Timelines()
    for ds in sorted(set(used) | set(online)):
        timelines._by_source[ds] = Timeline.build(ds, used.get(ds, ()), online.get(ds, {}))
    for text, sid in known_ids:
        timelines._ids[text] = sid
    return timelines
