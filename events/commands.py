"""Commands on ``commands``, keyed by the server that must act.

A move is a ``load_segment`` on the target and a ``drop_segment`` on the source
sharing a ``moveId``; the drop is conditional on the load having succeeded.
"""

from __future__ import annotations

from dataclasses import dataclass

from events.registry import Event, event_type
from events.schema import wire
from events.segment import SegmentDescriptor
from events.topics import COMMANDS


@event_type("load_segment", topic=COMMANDS)
@dataclass(frozen=True, slots=True)
class LoadSegment(Event):
    command_id: str = wire("commandId")
    server: str = wire("server")
    segment: SegmentDescriptor = wire("segment")
    stage: str = wire("stage")
    reason: str = wire("reason", allow_empty=True)
    move_id: str | None = wire("moveId", None)


@event_type("drop_segment", topic=COMMANDS)
@dataclass(frozen=True, slots=True)
class DropSegment(Event):
    command_id: str = wire("commandId")
    server: str = wire("server")
    segment_id: str = wire("segmentId")
    stage: str = wire("stage")
    reason: str = wire("reason", allow_empty=True)
    move_id: str | None = wire("moveId", None)
