"""Commands on ``commands``, keyed by the server that must act.

A move is a ``load_segment`` on the target and a ``drop_segment`` on the source
sharing a ``moveId``; the drop is conditional on the load having succeeded.
A ``cancel_segment_load`` withdraws a load the server has queued and not yet
announced (``cancels`` names that load's ``commandId``; absent when unknown, in
which case the server's queued load of ``segmentId`` is meant). A load already
announced stays: a cancel never drops anything.

**Purpose.** ``load_segment`` and ``drop_segment`` are at schema version 2: they say why they were
issued in ``purpose`` (:data:`CommandPurpose`), next to the planner ``stage`` that issued them:

- ``loading``: a first copy of an unavailable segment;
- ``replica``: a further copy up to the rules' replicants;
- ``broadcast``: a copy a broadcast rule puts on every server;
- ``decommissioning``: a move (both halves) draining a decommissioning server;
- ``balancing``: a move (both halves) to a cheaper server;
- ``unloading``: a drop of a copy the rules no longer want (over-replicated, unused, dropped by a rule).

The queue share a command counts against follows from it (``decommissioning`` and ``balancing``
their own, the others ``loading``); ``reason`` is free text for people, never parsed.
Version 1 had no ``purpose``: :func:`load_segment_v1_to_v2` and :func:`drop_segment_v1_to_v2`
derive it from what a v1 payload carries (the ``moveId``, and the reason texts the planner and
the Spark balancer wrote then).

**Planner epoch.** ``plannerEpoch`` (optional, additive: absent on commands of the Spark balancer and of logs
written before it) is the epoch of the elected planner that decided the command
(:mod:`streaming.service.election`). A command whose epoch is lower than one already read for the same
server is from a deposed planner and is acted on by nobody (:mod:`coordinator.placement.fence`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from events.registry import Event, Payload, event_type, upcaster
from events.schema import wire
from events.segment import SegmentDescriptor
from events.topics import COMMANDS

CommandPurpose = Literal["loading", "replica", "broadcast", "decommissioning", "balancing", "unloading"]
PURPOSES: tuple[str, ...] = ("loading", "replica", "broadcast", "decommissioning", "balancing", "unloading")


@event_type("load_segment", topic=COMMANDS, version=2)
@dataclass(frozen=True, slots=True)
class LoadSegment(Event):
    command_id: str = wire("commandId")
    server: str = wire("server")
    segment: SegmentDescriptor = wire("segment")
    stage: str = wire("stage")
    purpose: CommandPurpose = wire("purpose")
    reason: str = wire("reason", allow_empty=True)
    move_id: str | None = wire("moveId", None)
    planner_epoch: int | None = wire("plannerEpoch", None, minimum=0)


@event_type("drop_segment", topic=COMMANDS, version=2)
@dataclass(frozen=True, slots=True)
class DropSegment(Event):
    command_id: str = wire("commandId")
    server: str = wire("server")
    segment_id: str = wire("segmentId")
    stage: str = wire("stage")
    purpose: CommandPurpose = wire("purpose")
    reason: str = wire("reason", allow_empty=True)
    move_id: str | None = wire("moveId", None)
    planner_epoch: int | None = wire("plannerEpoch", None, minimum=0)


def _move_purpose(reason: str) -> str:
    """A v1 move's purpose: the planner wrote ``draining <server>`` for a decommissioning move; every other
    move (the planner's ``cheaper than <server>``, the Spark balancer's ``balancing: ...``) balanced."""
    return "decommissioning" if reason.startswith("draining") else "balancing"


def _with_purpose(payload: Payload, purpose: str) -> Payload:
    if "purpose" in payload:
        return payload
    return {**payload, "purpose": purpose}


@upcaster("load_segment", from_version=1)
def load_segment_v1_to_v2(payload: Payload) -> Payload:
    """v1 ``load_segment`` -> v2: adds ``purpose``. A move (``moveId``) is ``decommissioning`` when its reason
    says ``draining``, else ``balancing``; a plain load is ``broadcast`` for the reason ``broadcast``,
    ``replica`` for ``under-replicated in <tier>``, else ``loading`` (v1 reasons were written by the planner
    alone). A reason that is not a string is left to validation; nothing else changes.

    >>> load_segment_v1_to_v2({"commandId": "c", "reason": "under-replicated in hot"})["purpose"]
    'replica'
    >>> load_segment_v1_to_v2({"commandId": "c", "reason": "draining h1", "moveId": "m"})["purpose"]
    'decommissioning'
    """
    reason = payload.get("reason", "")
    if not isinstance(reason, str):
        return payload
    if payload.get("moveId") is not None:
        return _with_purpose(payload, _move_purpose(reason))
    if reason == "broadcast":
        return _with_purpose(payload, "broadcast")
    return _with_purpose(payload, "replica" if reason.startswith("under-replicated") else "loading")


@upcaster("drop_segment", from_version=1)
def drop_segment_v1_to_v2(payload: Payload) -> Payload:
    """v1 ``drop_segment`` -> v2: adds ``purpose``: a move's drop half (``moveId``) as its load half
    (``decommissioning`` when the reason says ``draining``, else ``balancing``), any other drop ``unloading``.

    >>> drop_segment_v1_to_v2({"commandId": "c", "reason": "over-replicated in hot"})["purpose"]
    'unloading'
    """
    reason = payload.get("reason", "")
    if not isinstance(reason, str):
        return payload
    if payload.get("moveId") is not None:
        return _with_purpose(payload, _move_purpose(reason))
    return _with_purpose(payload, "unloading")


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
    planner_epoch: int | None = wire("plannerEpoch", None, minimum=0)
