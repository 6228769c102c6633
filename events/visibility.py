"""Events on ``timeline``: a segment's state changed; the cause is the envelope's ``causation_id``.

States: ``visible`` (served by queries), ``standby`` (online, waiting for what it
replaces to be servable in full), ``overshadowed`` (online, hidden by newer
data), ``offline`` (used but announced by no server), ``absent`` (neither used
nor online: published-then-removed, or never known).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from events.interval import Interval
from events.registry import Event, event_type
from events.schema import wire
from events.topics import TIMELINE

SegmentState = Literal["visible", "standby", "overshadowed", "offline", "absent"]


@event_type("segment_visibility_changed", topic=TIMELINE)
@dataclass(frozen=True, slots=True)
class SegmentVisibilityChanged(Event):
    segment_id: str = wire("segmentId")
    data_source: str = wire("dataSource")
    interval: Interval = wire("interval")
    from_state: SegmentState = wire("from")
    to_state: SegmentState = wire("to")
