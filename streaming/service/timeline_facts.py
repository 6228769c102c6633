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

The facts themselves, their restore and the id keys live in the core
(:mod:`coordinator.timeline.facts`, shared with the per-partition snapshots) and
are re-exported here; this module keeps the store's key layout and the two
helpers that resolve what an event touches (``_resolve``).

Key layout (under the store's ``data/``): ``seg/<id key>`` -> facts JSON,
``state/<id key>`` -> state text, ``id/<dataSource as JSON><id text>`` -> id key;
an id key is the JSON array ``[dataSource, startMs, endMs, version, partitionId]``
(segment id *texts* can be ambiguous, the tuple cannot). Both ``seg/`` and ``id/``
entries are grouped by data source (:func:`source_prefix`, :func:`id_entry_key`),
so one data source's entries are one prefix scan: what a partition's snapshot
reads (:func:`streaming.service.timeline_agent.build_snapshot`).
"""

from __future__ import annotations

from collections.abc import Sequence

import orjson

from coordinator.timeline.facts import (
    FactsEncoder,
    SegmentFacts,
    all_facts,
    all_states,
    facts_of,
    id_key,
    parse_id_key,
    restore,
)
from coordinator.timeline.timelines import Timelines
from events.registry import Event
from events.segment import SegmentId
from events.segments import (
    SegmentAnnounced,
    SegmentsMarkedUnused,
    SegmentsMarkedUsed,
    SegmentsPublished,
    SegmentUnannounced,
)

__all__ = ["ID_PREFIX", "SEG_PREFIX", "STATE_PREFIX", "FactsEncoder", "SegmentFacts", "all_facts", "all_states",
           "facts_of", "id_entry_key", "id_key", "id_text_of", "ids_of", "learned_ids", "parse_id_key", "restore",
           "source_prefix", "touched_ids", "unrecorded_ids"]

SEG_PREFIX = b"seg/"
STATE_PREFIX = b"state/"
ID_PREFIX = b"id/"


def source_prefix(data_source: str) -> bytes:
    """What every id key of ``data_source`` starts with (``[`` and the data source's JSON string, then ``,``):
    ``seg/`` + it is the prefix of that data source's facts."""
    return b"[" + orjson.dumps(data_source) + b","


def id_entry_key(data_source: str, text: str) -> bytes:
    """The ``id/`` entry's key of an id text of ``data_source``: the data source's JSON string (its closing quote
    ends it: no data source's prefix is another's), then the text."""
    return ID_PREFIX + orjson.dumps(data_source) + text.encode()


def id_text_of(key: bytes, data_source: str) -> str:
    """The id text of an :func:`id_entry_key` of ``data_source``."""
    return key[len(ID_PREFIX) + len(orjson.dumps(data_source)):].decode()


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


_NONE: tuple[SegmentId, ...] = ()


def ids_of(timelines: Timelines, event: Event) -> tuple[Sequence[SegmentId], Sequence[SegmentId]]:
    """``(touched_ids(timelines, event), unrecorded_ids(timelines, event))`` in one pass (call it before
    ``apply``; raises EventValidationError as :func:`touched_ids` does): the timeline agent asks both of every
    event, and the two walked the event's segments three times (py-spy: 8% of the agent)."""
    cls = type(event)
    known = timelines._ids
    # ``known[str(sid)] == sid`` without the dataclass __eq__ (two Python calls): the two ids have the same text
    # ``<dataSource>_<start>_<end>_<version>[_<partition>]`` (the dict's key), and with the same version and
    # partition that leaves ``<dataSource>_<start>_<end>`` equal, where the instants' texts hold no "_": so the
    # data source and both instants are equal too (an instant's text names one millisecond). A touched id already
    # known is returned as the fold's own object (``Timelines.intern``): the agent's look-ups of it take the
    # identity shortcut
    if cls is SegmentAnnounced:
        sid = event.segment.id  # type: ignore[attr-defined]
        prev = known.get(str(sid))
        if prev is not None and prev.version == sid.version and prev.partition_id == sid.partition_id:
            return (prev,), _NONE
        return (sid,), (sid,)
    if cls is SegmentUnannounced:
        return (timelines._resolve(event.segment_id, "payload.segmentId"),), _NONE  # type: ignore[attr-defined]
    if cls is SegmentsPublished or cls is SegmentsMarkedUsed:
        sids = []
        unrecorded = []
        for s in event.segments:  # type: ignore[attr-defined]
            sid = s.id
            prev = known.get(str(sid))
            if prev is None or prev.version != sid.version or prev.partition_id != sid.partition_id:
                unrecorded.append(sid)
                sids.append(sid)
            else:
                sids.append(prev)
        return sids, unrecorded
    unrecorded = unrecorded_ids(timelines, event)  # (the order of the two calls before: only touched_ids raises)
    return touched_ids(timelines, event), unrecorded
