"""Operator writes: one event, validated first, sent, then acknowledged by the coordinator.

:func:`submit` checks the payload with the same pure validators the folds apply
(:func:`coordinator.readmodel.validate.check_payload`), produces the envelope (acks=all, idempotent), and
waits until the coordinator worker (consumer group ``<prefix>coordinator``) has committed an offset past
the event on its partition: the worker read and applied it. Without a running worker the write stands in
the log and is applied when one starts; :class:`Ack` then says ``applied=False``.
"""

from __future__ import annotations

import time
import uuid
from dataclasses import dataclass

from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition

from coordinator.readmodel.validate import check_payload
from events.envelope import Envelope, encode
from events.keys import partition_key
from events.registry import Event
from events.schema import Instant
from events.topics import Topics
from streaming import credentials


class WriteError(RuntimeError):
    """The event could not be delivered (broker unreachable, topic missing)."""


@dataclass(frozen=True, slots=True)
class Ack:
    """Where the event landed and whether the worker applied it within the wait."""

    event_id: str
    topic: str
    partition: int
    offset: int
    applied: bool
    waited_s: float

    @property
    def position(self) -> str:
        return f"{self.topic}:{self.partition}:{self.offset}"


def envelope_of(event: Event, now_ms: int | None = None, key: str | None = None) -> Envelope[Event]:
    """A fresh envelope for an operator's event (a random id: each write is its own decision)."""
    k = key or partition_key(event)
    if k is None:
        raise ValueError(f"{event.event_type}: no partition key")
    at = Instant(now_ms if now_ms is not None else int(time.time() * 1000))
    return Envelope(event, f"op-{uuid.uuid4().hex}", at, k)


def coordinator_group(topics: Topics) -> str:
    """The worker's Faust consumer group (``segcoord run``)."""
    return f"{topics.prefix}coordinator"


def submit(bootstrap: str, topics: Topics, event: Event, *, wait_s: float = 20.0) -> Ack:
    """Validate, send and wait for the worker's acknowledgement (see the module docstring)."""
    check_payload(event)
    env = envelope_of(event)
    topic = topics.name(event.event_topic)
    landed: list[tuple[int, int]] = []
    errors: list[str] = []

    def delivered(err: object, msg: object) -> None:
        if err is not None:
            errors.append(str(err))
        else:
            landed.append((msg.partition(), msg.offset()))  # type: ignore[attr-defined]

    producer = Producer({**credentials.client_config(bootstrap), "enable.idempotence": True, "acks": "all",
                         "message.timeout.ms": 15000})
    producer.produce(topic, value=encode(env), key=env.key.encode(), on_delivery=delivered)
    producer.flush(20)
    if errors or not landed:
        raise WriteError(f"{topic}: not delivered: {'; '.join(errors) or 'no answer from the broker'}")
    partition, offset = landed[0]
    started = time.monotonic()
    # the planner reads cluster/commands/segments on the elected worker with a consumer of its own, which commits
    # under <group>.planner-feed (streaming/service/planner_feed.py); the workers' group commits the rest
    groups = (coordinator_group(topics), coordinator_group(topics) + ".planner-feed")
    applied = wait_applied(bootstrap, groups, topic, partition, offset, wait_s)
    return Ack(env.event_id, topic, partition, offset, applied, time.monotonic() - started)


def wait_applied(bootstrap: str, group: str | tuple[str, ...], topic: str, partition: int, offset: int,
                 wait_s: float) -> bool:
    """Whether one of the groups committed an offset past ``offset`` on the partition within ``wait_s`` seconds."""
    groups = (group,) if isinstance(group, str) else group
    consumers = [Consumer({**credentials.client_config(bootstrap), "group.id": g, "enable.auto.commit": False})
                 for g in groups]
    deadline = time.monotonic() + wait_s
    try:
        while True:
            for consumer in consumers:
                try:
                    committed = consumer.committed([TopicPartition(topic, partition)], timeout=5)[0].offset
                except KafkaException:
                    committed = -1
                if committed > offset:
                    return True
            if time.monotonic() >= deadline:
                return False
            time.sleep(0.2)
    finally:
        for consumer in consumers:
            consumer.close()
