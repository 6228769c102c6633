"""A typed producer of envelopes over confluent-kafka: idempotent, acks=all, errors surfaced.

The topic of an event is its registered logical topic under the deployment
prefix; the message key is the envelope's key. ``flush`` raises if any
message of the batch failed, so a caller never commits input whose output
was lost.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from typing import Any

from confluent_kafka import KafkaError, KafkaException, Message, Producer

from events.envelope import Envelope, encode
from events.registry import Event
from events.topics import Topics
from streaming import credentials

POLL_EVERY = 500


class ProduceError(RuntimeError):
    """A message could not be delivered; names the topic and Kafka's error."""


class EventProducer:
    def __init__(self, bootstrap: str, topics: Topics, *, extra: Mapping[str, Any] | None = None) -> None:
        self.topics = topics
        self._errors: list[str] = []
        self.headers: list[tuple[str, bytes]] | None = None  # sent with every message when set
        # told (physical topic, value, envelope) of every envelope sent: a reader in this process can take the
        # envelope instead of decoding the value (streaming/service/shared_envelopes.py)
        self.on_sent: Callable[[str, bytes, Envelope[Event]], None] | None = None
        self._unpolled = 0
        self._producer = Producer({
            **credentials.client_config(bootstrap),
            "enable.idempotence": True,
            "acks": "all",
            "linger.ms": 5,
            "compression.type": "lz4",
            **(extra or {}),
        })

    def _on_delivery(self, err: KafkaError | None, msg: Message) -> None:
        if err is not None:
            self._errors.append(f"{msg.topic()}: {err.str()}")

    def send(self, envelope: Envelope[Event]) -> None:
        """Queue one envelope on its event's topic, keyed by ``envelope.key``."""
        topic, value = self.topics.name(envelope.event.event_topic), encode(envelope)
        self.send_raw(topic, envelope.key.encode(), value)
        if self.on_sent is not None:
            self.on_sent(topic, value, envelope)

    def send_encoded(self, envelope: Envelope[Event], value: bytes) -> None:
        """:meth:`send` of an envelope whose encoding the caller already made: ``value`` must be
        ``encode(envelope)`` (the lockbox agent builds a sealed publish's bytes while it seals it)."""
        topic = self.topics.name(envelope.event.event_topic)
        self.send_raw(topic, envelope.key.encode(), value)
        if self.on_sent is not None:
            self.on_sent(topic, value, envelope)

    def send_raw(self, topic: str, key: bytes | None, value: bytes | None) -> None:
        """Queue raw bytes on a physical topic (dead letters, tests of malformed input).

        Delivery reports are served every ``POLL_EVERY`` sends, when the local queue is full, and by
        :meth:`flush` (a poll per message cost 9% of the worker in py-spy)."""
        while True:
            try:
                self._producer.produce(topic, value=value, key=key, on_delivery=self._on_delivery,
                                       headers=self.headers)
                break
            except BufferError:
                self._producer.poll(0.1)
        self._unpolled += 1
        if self._unpolled >= POLL_EVERY:
            self._unpolled = 0
            self._producer.poll(0)

    def flush(self, timeout: float = 30.0) -> None:
        """Wait until every queued message is acknowledged; raise :class:`ProduceError` on any failure.

        The wait is cut in half-second slices so the calling thread returns to the interpreter between them
        (a stop signal's handler runs there, even while the broker is down)."""
        deadline = time.monotonic() + timeout
        try:
            remaining = self._producer.flush(min(0.5, timeout))
            while remaining and time.monotonic() < deadline:
                remaining = self._producer.flush(min(0.5, max(0.0, deadline - time.monotonic())))
        except (KafkaException, SystemError) as e:  # a fatal error (e.g. the idempotent producer not authorized)
            cause = e.__cause__ or e.__context__ or e
            raise ProduceError(f"delivery failed: {cause}; " + "; ".join(self._errors[:5])) from e
        if remaining:
            raise ProduceError(f"{remaining} message(s) not delivered within {timeout:.0f}s")
        if self._errors:
            errors, self._errors = self._errors, []
            raise ProduceError("delivery failed: " + "; ".join(errors[:5]))

    def close(self) -> None:
        self.flush()
