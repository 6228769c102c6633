"""The record written to ``deadletter`` for a message no consumer could accept.

It keeps everything needed to inspect or re-drive the message: the original
key and value bytes (base64, so any bytes survive JSON), where it was read
(topic, partition, offset) and why it was refused. The deadletter message is
keyed by the original key.

**One dead letter per bad record.** Several consumers read each input topic (the
worker's agents, every historical, the Spark balancer, subscribers), so exactly one
of them is designated to dead-letter a topic's bad records (:data:`DEAD_LETTER_WRITER`);
every other reader skips them and counts them. The dead letter's event id is derived
from the bad record's (topic, partition, offset), so the designated writer re-reading
it after a crash writes the same id again, which readers of ``deadletter`` drop.
The coordinator's outputs (``locks``, ``timeline``, ``commands`` written by the agents)
are validated before they are produced; ``commands`` is also an input (the Spark
balancer writes there), dead-lettered by the planner agent.
"""

from __future__ import annotations

from dataclasses import dataclass

from events.registry import Event, event_type
from events.schema import wire
from events.topics import CLUSTER, COMMANDS, DEADLETTER, LOCK_REQUESTS, SEGMENTS

DEAD_LETTER_WRITER: dict[str, str] = {
    LOCK_REQUESTS: "lockbox agent",
    SEGMENTS: "timeline agent",
    CLUSTER: "planner agent",
    COMMANDS: "planner agent",
}


@event_type("dead_lettered", topic=DEADLETTER)
@dataclass(frozen=True, slots=True)
class DeadLettered(Event):
    reason: str = wire("reason")
    topic: str = wire("topic")
    partition: int = wire("partition", minimum=0)
    offset: int = wire("offset", minimum=0)
    original_value: str | None = wire("originalValue", None, allow_empty=True)  # base64 of b"" is ""
    original_key: str | None = wire("originalKey", None, allow_empty=True)
