"""The timelines of every data source, folded from ``segments`` events.

``apply(event)`` routes SegmentsPublished (and SegmentsMarkedUsed, folded alike), SegmentsMarkedUnused,
SegmentAnnounced and SegmentUnannounced to the data source's
:class:`~coordinator.timeline.timeline.Timeline` and returns the state changes,
in segment id order; other event types change nothing. Segment ids in events
are resolved against the ids already known first (exact text), so ids whose
text alone is ambiguous still name the right segment.

>>> from events import Interval, SegmentDescriptor, SegmentsPublished, SegmentAnnounced
>>> s = SegmentDescriptor("wiki_edits", Interval.parse("2026-01-01/P1D"), "v1", 0, 1)
>>> tls = Timelines()
>>> [c.new for c in tls.apply(SegmentsPublished(task_id="t", segments=(s,)))]
['offline']
>>> [c.new for c in tls.apply(SegmentAnnounced(server="h1", segment=s))]
['visible']
>>> tls.visible()
{'wiki_edits': ['wiki_edits_2026-01-01T00:00:00.000Z_2026-01-02T00:00:00.000Z_v1']}
>>> [e.intervals[0].iso() for e in tls.lookup("wiki_edits", Interval.parse("2026-01-01T06/PT1H"))]
['2026-01-01T06:00:00.000Z/2026-01-01T07:00:00.000Z']
"""

from __future__ import annotations

from coordinator.timeline.timeline import LookupEntry, StateChange, Timeline
from events.interval import Interval
from events.registry import Event
from events.schema import EventValidationError
from events.segment import SegmentDescriptor, SegmentId, SegmentIdError
from events.segments import (
    SegmentAnnounced,
    SegmentsMarkedUnused,
    SegmentsMarkedUsed,
    SegmentsPublished,
    SegmentUnannounced,
)
from events.visibility import SegmentState


class Timelines:
    def __init__(self) -> None:
        self._by_source: dict[str, Timeline] = {}
        self._ids: dict[str, SegmentId] = {}

    def timeline(self, data_source: str) -> Timeline:
        tl = self._by_source.get(data_source)
        if tl is None:
            tl = self._by_source[data_source] = Timeline(data_source)
        return tl

    def data_sources(self) -> list[str]:
        return sorted(self._by_source)

    def apply(self, event: Event) -> list[StateChange]:
        """Fold one event; raises EventValidationError for a segment id that cannot be parsed."""
        if isinstance(event, SegmentsPublished | SegmentsMarkedUsed):
            by_source: dict[str, list] = {}  # type: ignore[type-arg]
            for seg in event.segments:
                self.intern(seg)
                by_source.setdefault(seg.data_source, []).append(seg)
            changes = [c for ds in sorted(by_source) for c in self.timeline(ds).publish(by_source[ds])]
        elif isinstance(event, SegmentAnnounced):
            self.intern(event.segment)
            changes = self.timeline(event.segment.data_source).announce(event.segment, event.server)
        elif isinstance(event, SegmentUnannounced):
            sid = self._resolve(event.segment_id, "payload.segmentId")
            changes = self.timeline(sid.data_source).unannounce(sid, event.server)
        elif isinstance(event, SegmentsMarkedUnused):
            ids = [self._resolve(t, f"payload.segmentIds[{i}]") for i, t in enumerate(event.segment_ids)]
            grouped: dict[str, list[SegmentId]] = {}
            for sid in ids:
                grouped.setdefault(sid.data_source, []).append(sid)
            changes = [c for ds in sorted(grouped) for c in self.timeline(ds).mark_unused(grouped[ds])]
        else:
            return []
        return changes

    def intern(self, segment: SegmentDescriptor) -> SegmentId:
        """Record the text of ``segment``'s id for later resolution (latest wins) and return the id object the fold
        knows under it when that is an equal id, which ``segment.id`` then returns as well.

        **Invariant:** an id's text resolves to an id *equal* to the latest one named under that text, as before;
        only the object differs. The descriptor's ``id`` is a cache of ``SegmentId(dataSource, interval, version,
        partitionId)`` (``compare=False``), so pointing it at an equal object changes no value anywhere. What it
        changes: the fold's maps are keyed by the first object of each id, and a decoded event's descriptor
        carries a fresh one; with the known object, every look-up of the segment (the timeline's, the agents')
        takes the dict's identity shortcut instead of the dataclass ``__eq__`` (two Python calls per probe).
        Equality is told by version and partition id: with the same text, those leave
        ``<dataSource>_<start>_<end>`` equal, and an instant's text holds no ``_``, so all the fields are equal."""
        sid = segment.id
        ids = self._ids
        text = str(sid)
        known = ids.get(text)
        if known is sid:
            return sid
        if known is not None and known.version == sid.version and known.partition_id == sid.partition_id:
            object.__setattr__(segment, "_id", known)
            return known
        ids[text] = sid
        return sid

    def _resolve(self, text: str, field: str) -> SegmentId:
        known = self._ids.get(text)
        if known is not None:
            return known
        for ds in sorted(self._by_source, key=len, reverse=True):
            if text.startswith(ds + "_"):
                try:
                    return SegmentId.parse(text, ds)
                except SegmentIdError:
                    continue
        try:
            return SegmentId.parse(text)
        except SegmentIdError as e:
            raise EventValidationError(field, text, str(e)) from None

    def lookup(self, data_source: str, interval: Interval) -> list[LookupEntry]:
        """The visible segments of ``data_source`` serving ``interval``, with the parts each serves."""
        tl = self._by_source.get(data_source)
        return [] if tl is None else tl.lookup(interval)

    def states(self) -> dict[str, SegmentState]:
        """Every known segment's state by id text, data sources in order."""
        return {str(sid): st for ds in self.data_sources() for sid, st in self._by_source[ds].states().items()}

    def visible(self) -> dict[str, list[str]]:
        out = {ds: [str(s) for s in self._by_source[ds].visible()] for ds in self.data_sources()}
        return {ds: ids for ds, ids in out.items() if ids}
