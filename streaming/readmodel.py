"""The read side of the operator's commands and of the HTTP API: the coordinator's folds, kept current.

:class:`ClusterView` bundles the folds the answers of :mod:`coordinator.readmodel` read: the placement
fold (:class:`PlacementState`), the timeline (:class:`Timelines`) and the lockbox (:class:`Lockbox`, fed
the task requests in log order, so it holds the waiters the decisions alone do not show), plus when each
server was last heard of and every descriptor ever published (``segments mark-used`` sends them back).
The command line fills it by folding the whole log (:func:`from_log`: no running worker needed); the
HTTP API of ``segcoord run`` reads the planner agent's own fold instead (:class:`streaming.http.PlacementSource`).
Nothing here decides how an event changes state: each event goes to the fold that owns it.
"""

from __future__ import annotations

import contextlib
import logging
import time
from dataclasses import dataclass, field

from confluent_kafka import KafkaException

from coordinator.locks.lockbox import Lockbox
from coordinator.locks.seal import use_refusal
from coordinator.locks.state import LockboxState
from coordinator.placement.state import PlacementState
from coordinator.timeline.timelines import Timelines
from events.schema import EventValidationError
from events.segment import SegmentDescriptor
from events.segments import SegmentsMarkedUsed, SegmentsPublished
from events.topics import CLUSTER, COMMANDS, LOCK_REQUESTS, SEGMENTS, Topics
from streaming import credentials
from streaming.replay import LogRecord, ReplayError, read_log

log = logging.getLogger("segcoord.readmodel")


@dataclass
class ClusterView:
    """The folds the operator's answers read; ``now`` is the latest event time seen (ms)."""

    placement: PlacementState = field(default_factory=PlacementState)
    timelines: Timelines = field(default_factory=Timelines)
    lockbox: LockboxState = field(default_factory=Lockbox)
    descriptors: dict[str, SegmentDescriptor] = field(default_factory=dict)  # every segment ever published
    now: int = 0
    position: str | None = None
    publish_key: bytes | None = None  # None: the deployment's (streaming.credentials.publish_key)

    @property
    def last_heard(self) -> dict[str, int]:
        """When each server was last heard of (event time): the placement fold's (heartbeats, its own events)."""
        return self.placement.last_heard

    def apply(self, record: LogRecord) -> None:
        """One record of the log to the folds that own its event."""
        env, event = record.envelope, record.envelope.event
        self.now = max(self.now, env.occurred_at)
        self.position = record.position
        if self.publish_key is None:
            self.publish_key = credentials.publish_key()
        if record.topic == SEGMENTS and use_refusal(env, self.publish_key) is not None:
            return  # not the lockbox's publish: the timeline and planner agents dead-letter it (docs/security.md)
        if record.topic in (SEGMENTS, CLUSTER, COMMANDS):
            try:
                self.placement.evolve(env)
            except ValueError as e:  # bad rules or config: the planner agent dead-letters them too
                log.debug("placement fold refused %s: %s", record.position, e)
        if record.topic == SEGMENTS:
            with contextlib.suppress(EventValidationError):  # the timeline agent dead-letters these
                self.timelines.apply(event)
        if record.topic == LOCK_REQUESTS and isinstance(self.lockbox, Lockbox):
            self.lockbox.handle(env)
        if isinstance(event, SegmentsPublished | SegmentsMarkedUsed):
            self.descriptors.update((str(s.id), s) for s in event.segments)


def from_log(bootstrap: str, topics: Topics, attempts: int = 20) -> ClusterView:
    """The folds of the whole log as it is now. A topic created a moment ago may have no partition leader
    yet: the read is tried again (``attempts`` times, half a second apart) before it fails clearly."""
    for attempt in range(attempts):
        try:
            view = ClusterView()
            for record in read_log(bootstrap, topics):
                view.apply(record)
            return view
        except KafkaException as e:
            if attempt == attempts - 1:
                raise ReplayError(f"reading the log from {bootstrap}: {e}") from None
            time.sleep(0.5)
    raise AssertionError("unreachable")
