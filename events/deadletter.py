"""The record written to ``deadletter`` for a message no consumer could accept.

It keeps everything needed to inspect or re-drive the message: the original
key and value bytes (base64, so any bytes survive JSON), where it was read
(topic, partition, offset) and why it was refused. The deadletter message is
keyed by the original key.
"""

from __future__ import annotations

from dataclasses import dataclass

from events.registry import Event, event_type
from events.schema import wire
from events.topics import DEADLETTER


@event_type("dead_lettered", topic=DEADLETTER)
@dataclass(frozen=True, slots=True)
class DeadLettered(Event):
    reason: str = wire("reason")
    topic: str = wire("topic")
    partition: int = wire("partition", minimum=0)
    offset: int = wire("offset", minimum=0)
    original_value: str | None = wire("originalValue", None, allow_empty=True)  # base64 of b"" is ""
    original_key: str | None = wire("originalKey", None, allow_empty=True)
