"""Events on ``segments``: what is used (published, marked unused or used again) and what is online (announced)."""

from __future__ import annotations

from dataclasses import dataclass

from events.registry import Event, event_type
from events.schema import JsonValue, wire
from events.segment import SegmentDescriptor
from events.topics import SEGMENTS


@event_type("segments_published", topic=SEGMENTS)
@dataclass(frozen=True, slots=True)
class SegmentsPublished(Event):
    task_id: str = wire("taskId")
    segments: tuple[SegmentDescriptor, ...] = wire("segments", non_empty=True)
    start_metadata: JsonValue | None = wire("startMetadata", None)
    end_metadata: JsonValue | None = wire("endMetadata", None)


@event_type("segments_marked_unused", topic=SEGMENTS)
@dataclass(frozen=True, slots=True)
class SegmentsMarkedUnused(Event):
    segment_ids: tuple[str, ...] = wire("segmentIds", non_empty=True)
    reason: str = wire("reason", allow_empty=True)


@event_type("segments_marked_used", topic=SEGMENTS)
@dataclass(frozen=True, slots=True)
class SegmentsMarkedUsed(Event):
    """Segments marked used again by an operator (Druid's markUsed); they carry their descriptors, since the
    folds forget what they knew of a segment once it is neither used nor served. Folded as a publish is."""

    segments: tuple[SegmentDescriptor, ...] = wire("segments", non_empty=True)
    reason: str = wire("reason", allow_empty=True)


@event_type("segment_announced", topic=SEGMENTS)
@dataclass(frozen=True, slots=True)
class SegmentAnnounced(Event):
    server: str = wire("server")
    segment: SegmentDescriptor = wire("segment")


@event_type("segment_unannounced", topic=SEGMENTS)
@dataclass(frozen=True, slots=True)
class SegmentUnannounced(Event):
    """``reason`` is absent when the server itself unannounces; the coordinator unannounces everything a server
    held when it left or was lost, with the reason (``server_left`` / ``server_lost``) and the departure's event
    id as causation."""

    server: str = wire("server")
    segment_id: str = wire("segmentId")
    reason: str | None = wire("reason", None)
