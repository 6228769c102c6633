"""The facts a timeline fold is a function of, per segment, and the fold rebuilt from them.

A segment's states are a pure function of the used segments and the online map (docs/timeline.md), so the
facts kept per known segment are exactly those: its descriptor (the one the timeline holds: a published
descriptor wins over an announced one), whether it is used, and the servers announcing it; plus every
segment id text the fold has learned (:class:`~coordinator.timeline.timelines.Timelines` resolves id texts in
``unannounce`` / ``markUnused`` events against those first, so a restore must know the same texts, even of
segments since forgotten). :func:`restore` rebuilds a ``Timelines`` from them with ``Timeline.build``; states
after a restore equal those of the incremental fold (the timeline's "bulk equals incremental" property), and
so do the changes every later event gives.

This module is the one place that reads ``Timelines`` / ``Timeline`` internals (``_by_source``, ``_ids``,
``_used``): the agent's store (:mod:`streaming.service.timeline_facts`) and the per-partition snapshots
(:mod:`coordinator.timeline.snapshot`) both go through it.

>>> from events import Interval, SegmentDescriptor, SegmentsPublished, SegmentAnnounced
>>> s = SegmentDescriptor("wiki", Interval.parse("2026-01-01/P1D"), "v1", 0, 1)
>>> tls = Timelines()
>>> _ = tls.apply(SegmentsPublished(task_id="t", segments=(s,)))
>>> _ = tls.apply(SegmentAnnounced(server="h1", segment=s))
>>> facts = all_facts(tls)
>>> facts[s.id].used, facts[s.id].servers
(True, ('h1',))
>>> restore(facts.items(), known_ids(tls, {"wiki"})).states() == tls.states()
True
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Collection, Iterable
from dataclasses import dataclass

import orjson

from coordinator.timeline.timeline import Timeline
from coordinator.timeline.timelines import Timelines
from events.interval import Interval
from events.schema import decode_record, encode_record
from events.segment import SegmentDescriptor, SegmentId
from events.visibility import SegmentState


@dataclass(frozen=True, slots=True)
class SegmentFacts:
    """What the timeline knows of one segment: descriptor, used or not, servers announcing it (sorted)."""

    segment: SegmentDescriptor
    used: bool
    servers: tuple[str, ...]

    def to_json(self) -> dict[str, object]:
        return {"segment": encode_record(self.segment), "used": self.used, "servers": list(self.servers)}

    @staticmethod
    def from_json(obj: dict[str, object], path: str = "facts") -> SegmentFacts:
        """Raises EventValidationError naming ``path`` and the field for a descriptor that does not decode."""
        servers = obj["servers"]
        assert isinstance(servers, list)
        return SegmentFacts(decode_record(SegmentDescriptor, obj["segment"], f"{path}.segment"), bool(obj["used"]),
                            tuple(str(s) for s in servers))

    def to_bytes(self) -> bytes:
        return orjson.dumps(self.to_json())

    @staticmethod
    def from_bytes(data: bytes) -> SegmentFacts:
        return SegmentFacts.from_json(orjson.loads(data))


def id_key(sid: SegmentId) -> bytes:
    """The unambiguous key of a segment id: JSON ``[dataSource, startMs, endMs, version, partitionId]``."""
    return orjson.dumps([sid.data_source, sid.interval.start, sid.interval.end, sid.version, sid.partition_id])


def parse_id_key(data: bytes) -> SegmentId:
    ds, start, end, version, partition = orjson.loads(data)
    return SegmentId(ds, Interval(start, end), version, partition)


def facts_of(timelines: Timelines, sid: SegmentId) -> SegmentFacts | None:
    """The facts of one segment now, or None when the timeline no longer knows it."""
    tl = timelines._by_source.get(sid.data_source)
    seg = None if tl is None else tl.segment(sid)
    if tl is None or seg is None:
        return None
    return SegmentFacts(seg, sid in tl._used, tuple(sorted(tl.servers(sid))))


class FactsEncoder:
    """The stored bytes of segments' facts and their id keys, for a fold that changes a few segments at a time.

    :meth:`facts_bytes` is ``facts_of(timelines, sid).to_bytes()`` (None when that is None) and :meth:`key` is
    ``id_key(sid)``, byte for byte (unit-tested), without building a :class:`SegmentFacts` and with the JSON of
    each descriptor encoded once while it is remembered: a segment's descriptor rarely changes, its servers and
    used flag do. Remembered per segment id: the descriptor object the JSON was made from (a hit needs that very
    object: a descriptor is immutable, so the same object has the same JSON) and the id key; at most
    ``capacity`` segments, the oldest first out (``bench.service --only agent``: building and encoding the facts
    of every touched segment was a seventh of the timeline agent)."""

    __slots__ = ("_memo", "capacity")

    def __init__(self, capacity: int = 16_384) -> None:
        self.capacity = capacity
        self._memo: OrderedDict[SegmentId, tuple[bytes, SegmentDescriptor | None, bytes]] = OrderedDict()

    def key(self, sid: SegmentId) -> bytes:
        """``id_key(sid)``."""
        got = self._memo.get(sid)
        return id_key(sid) if got is None else got[0]

    def stage(self, timelines: Timelines, sid: SegmentId) -> tuple[bytes, bytes | None]:
        """``(id_key(sid), facts_of(timelines, sid).to_bytes())``; None for the facts when the timeline no longer
        knows the segment."""
        memo = self._memo
        got = memo.get(sid)
        if got is None:
            key, known, seg_json = id_key(sid), None, b""
        else:
            key, known, seg_json = got
        tl = timelines._by_source.get(sid.data_source)
        seg = None if tl is None else tl._segments.get(sid)
        if tl is None or seg is None:
            return key, None
        if known is not seg:
            seg_json = orjson.dumps(encode_record(seg))
            memo[sid] = (key, seg, seg_json)
            if got is None and len(memo) > self.capacity:
                memo.popitem(last=False)
        servers = tl._servers.get(sid)
        return key, b"".join((b'{"segment":', seg_json, b',"used":true,"servers":' if sid in tl._used
                              else b',"used":false,"servers":', orjson.dumps(sorted(servers)) if servers else b"[]",
                              b"}"))

    def forget(self) -> None:
        """Drop everything remembered."""
        self._memo.clear()


def all_facts(timelines: Timelines, data_sources: Collection[str] | None = None) -> dict[SegmentId, SegmentFacts]:
    """Every known segment's facts (of ``data_sources`` only, when given), in segment id order."""
    out: dict[SegmentId, SegmentFacts] = {}
    for ds in timelines.data_sources():
        if data_sources is not None and ds not in data_sources:
            continue
        for sid in known_segments(timelines, ds):
            facts = facts_of(timelines, sid)
            if facts is not None:
                out[sid] = facts
    return out


def known_segments(timelines: Timelines, data_source: str) -> list[SegmentId]:
    """The segments of ``data_source`` that have facts (used or announced), in segment id order."""
    tl = timelines._by_source[data_source]
    return sorted(set(tl._used) | set(tl._servers), key=_order)  # a key: dataclass __lt__ is slow


def count_known(timelines: Timelines, data_source: str) -> int:
    """How many segments of ``data_source`` have facts: the length of :func:`known_segments`, without sorting."""
    tl = timelines._by_source.get(data_source)
    return 0 if tl is None else len(set(tl._used).union(tl._servers))


def _order(sid: SegmentId) -> tuple[int, int, str, int]:
    """Segment id order within a data source (as ``SegmentId``'s own: interval, version, partition)."""
    return sid.interval.start, sid.interval.end, sid.version, sid.partition_id


def all_states(timelines: Timelines) -> dict[SegmentId, SegmentState]:
    return {sid: st for ds in timelines.data_sources() for sid, st in timelines.timeline(ds).states().items()}


def known_ids(timelines: Timelines, data_sources: Collection[str]) -> list[tuple[str, SegmentId]]:
    """The id texts the fold has learned for segments of ``data_sources``, by text."""
    return sorted((text, sid) for text, sid in timelines._ids.items() if sid.data_source in data_sources)


def restore(facts: Iterable[tuple[SegmentId, SegmentFacts]], known: Iterable[tuple[str, SegmentId]],
            into: Timelines | None = None) -> Timelines:
    """A Timelines equal in states (and in id resolution) to the fold that produced these facts. With ``into``,
    the data sources of ``facts`` are rebuilt in that Timelines (the others are kept) and the ids are added."""
    used: dict[str, list[SegmentDescriptor]] = {}
    online: dict[str, dict[SegmentId, tuple[SegmentDescriptor, tuple[str, ...]]]] = {}
    # one object per id, as the incremental fold has (Timelines.intern): the facts' descriptors and the known ids
    # take the object ``sid`` of their facts; keyed by plain tuples (a dataclass __eq__ per id would add seconds
    # to a restore of a million segments)
    ids: dict[tuple[str, int, int, str, int], SegmentId] = {}
    for sid, f in facts:
        seg, iv = f.segment, sid.interval
        if (seg.version == sid.version and seg.partition_id == sid.partition_id and seg.data_source == sid.data_source
                and seg.interval.start == iv.start and seg.interval.end == iv.end):
            object.__setattr__(seg, "_id", sid)
        ids[(sid.data_source, iv.start, iv.end, sid.version, sid.partition_id)] = sid
        if f.used:
            used.setdefault(sid.data_source, []).append(f.segment)
        if f.servers:
            online.setdefault(sid.data_source, {})[sid] = (f.segment, f.servers)
    timelines = into if into is not None else Timelines()
    for ds in sorted(set(used) | set(online)):
        timelines._by_source[ds] = Timeline.build(ds, used.get(ds, ()), online.get(ds, {}))
    for text, sid in known:
        iv = sid.interval
        timelines._ids[text] = ids.get((sid.data_source, iv.start, iv.end, sid.version, sid.partition_id), sid)
    return timelines


def forget_sources(timelines: Timelines, data_sources: Collection[str]) -> None:
    """Drop every data source of ``data_sources`` from the fold: its timeline and the id texts it learned."""
    for ds in data_sources:
        timelines._by_source.pop(ds, None)
    for text in [t for t, sid in timelines._ids.items() if sid.data_source in data_sources]:
        del timelines._ids[text]
