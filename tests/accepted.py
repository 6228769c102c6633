"""Publishes and marks as the coordinator writes them, for tests that feed its agents without a running lockbox.

:func:`through_lockbox` takes the ``segments_published`` a test wants on ``segments`` and puts its
segments through the lockbox's import path (:mod:`coordinator.locks.imports`): the decision it gets
back is the one the publish names, and the envelope is sealed with the session's publish key exactly
as :class:`~streaming.service.lockbox_agent.LockboxAgent` seals its own (the test keeps its event id,
time, key and task). A segment set the lockbox refuses fails the test. Tests that run the service
send a ``segments_import_requested`` (:func:`import_request`) and let its lockbox agent publish.
"""

from __future__ import annotations

from dataclasses import replace

from coordinator.locks.lockbox import Lockbox
from coordinator.locks.seal import seal_event, seal_publish
from events.envelope import Envelope
from events.ids import derived_event_id
from events.locks import SegmentsImported
from events.registry import Event
from events.segment import SegmentDescriptor
from events.segments import SegmentsMarkedUnused, SegmentsMarkedUsed, SegmentsPublished
from events.tasks import SegmentsImportRequested
from streaming import credentials


def import_request(segments: tuple[SegmentDescriptor, ...] | list[SegmentDescriptor], request_id: str,
                   source: str = "test") -> SegmentsImportRequested:
    return SegmentsImportRequested(request_id=request_id, segments=tuple(segments), source=source)


def through_lockbox(env: Envelope[Event], box: Lockbox | None = None) -> Envelope[Event]:
    """``env`` sealed as the lockbox's twin of its import decision, a mark sealed as the coordinator writes it;
    any other event is returned as it is."""
    event = env.event
    if isinstance(event, SegmentsMarkedUnused | SegmentsMarkedUsed):
        return seal_event(env, credentials.publish_key())  # type: ignore[arg-type]
    if not isinstance(event, SegmentsPublished):
        return env
    box = box if box is not None else Lockbox()
    request = Envelope(import_request(event.segments, f"req-{env.event_id}"), f"req-{env.event_id}",
                       env.occurred_at, env.key)
    decisions = box.handle(request)
    assert len(decisions) == 1 and isinstance(decisions[0], SegmentsImported), decisions
    decision_id = derived_event_id("test.lock-requests", 0, 0, 0) + env.event_id
    unsealed = Envelope(replace(event, decision_id=None, seal=None), env.event_id, env.occurred_at, env.key,
                        request.event_id)
    return seal_publish(unsealed, decision_id, credentials.publish_key())  # type: ignore[return-value]
