"""Commands on ``commands``, keyed by the server that must act.

A move is a ``load_segment`` on the target and a ``drop_segment`` on the source
sharing a ``moveId``; the drop is conditional on the load having succeeded.
A ``cancel_segment_load`` withdraws a load the server has queued and not yet
announced (``cancels`` names that load's ``commandId``; absent when unknown, in
which case the server's queued load of ``segmentId`` is meant). A load already
announced stays: a cancel never drops anything.
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


@event_type("cancel_segment_load", topic=COMMANDS)
@dataclass(frozen=True, slots=True)
class CancelSegmentLoad(Event):
    """Withdraw a queued load. The server answers a cancelled load with a ``SegmentLoadRefused`` of that load
    (caused by this command); if the load already ran, or the server never queued it, nothing happens and
    nothing answers: a cancel itself needs no answer (the audit counts it answered when sent)."""

    command_id: str = wire("commandId")
    server: str = wire("server")
    segment_id: str = wire("segmentId")
    reason: str = wire("reason", allow_empty=True)
    cancels: str | None = wire("cancels", None)
