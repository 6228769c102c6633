"""Events on ``segments``: what is used (published, marked unused or used again) and what is online (announced)."""

from __future__ import annotations

from dataclasses import dataclass

from events.limits import MAX_SEGMENT_IDS, MAX_SEGMENTS_PER_REQUEST
from events.registry import Event, event_type
from events.schema import JsonValue, wire
from events.segment import SegmentDescriptor, check_overwrite_generations
from events.topics import SEGMENTS


@event_type("segments_published", topic=SEGMENTS)
@dataclass(frozen=True, slots=True)
class SegmentsPublished(Event):
    """Segments that became used: the twin of a lockbox decision (``publish_accepted`` or ``segments_imported``).

    ``decisionId`` is the event id of that decision on ``locks``; ``seal`` is the coordinator's HMAC over this
    envelope (see :mod:`coordinator.locks.seal`). The timeline and planner take a publish only when its seal
    verifies; anything else is dead-lettered (docs/security.md).
    """

    task_id: str = wire("taskId")
    segments: tuple[SegmentDescriptor, ...] = wire("segments", non_empty=True)
    start_metadata: JsonValue | None = wire("startMetadata", None)
    end_metadata: JsonValue | None = wire("endMetadata", None)
    decision_id: str | None = wire("decisionId", None)
    seal: str | None = wire("seal", None)

    def _check(self, path: str) -> None:
        check_overwrite_generations(self.segments, f"{path}.segments" if path else "segments")


@event_type("segments_marked_unused", topic=SEGMENTS)
@dataclass(frozen=True, slots=True)
class SegmentsMarkedUnused(Event):
    """Segments no longer used (Druid's markUnused). Written only by the coordinator: the lockbox for an
    operator's ``segcoord segments mark-unused`` (a ``segments_mark_unused_requested`` on ``lock-requests``),
    the upsert agent's cleanup and the planner's overshadowed marking. ``seal`` is the coordinator's HMAC
    over the envelope (:mod:`coordinator.locks.seal`); an unsealed mark is dead-lettered and changes nothing.
    """

    segment_ids: tuple[str, ...] = wire("segmentIds", non_empty=True, max_items=MAX_SEGMENT_IDS)
    reason: str = wire("reason", allow_empty=True)
    seal: str | None = wire("seal", None)


@event_type("segments_marked_used", topic=SEGMENTS)
@dataclass(frozen=True, slots=True)
class SegmentsMarkedUsed(Event):
    """Segments marked used again by an operator (Druid's markUsed); they carry their descriptors, since the
    folds forget what they knew of a segment once it is neither used nor served. Folded as a publish is.

    Written only by the lockbox, for ``segments_mark_used_requested`` of segments it committed, and sealed
    as a publish is (:mod:`coordinator.locks.seal`); an unsealed mark is dead-lettered and changes nothing."""

    segments: tuple[SegmentDescriptor, ...] = wire("segments", non_empty=True, max_items=MAX_SEGMENTS_PER_REQUEST)
    reason: str = wire("reason", allow_empty=True)
    seal: str | None = wire("seal", None)

    def _check(self, path: str) -> None:
        check_overwrite_generations(self.segments, f"{path}.segments" if path else "segments")


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
