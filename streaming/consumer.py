"""A consumer of envelopes with manual commits, sending undecodable messages to ``deadletter``.

Every message read is either yielded as a decoded :class:`Record`, in partition
order, or written to the dead-letter topic with the reason, its original key
and value bytes and its topic/partition/offset; consumption goes on either way.
The dead letter is flushed before the poll that found it returns, so a commit
made after processing the yielded records never skips an undelivered dead
letter. The dead letter's event id is derived from the bad message's position,
so re-reading it after a crash writes a duplicate a reader can drop.
With ``dead_letter=False`` (a reader that is not the topic's designated dead-letter
writer, :data:`events.deadletter.DEAD_LETTER_WRITER`: the historicals) bad messages are
skipped and counted in ``skipped_bad`` instead, so one bad record gets one dead letter.
"""

from __future__ import annotations

import base64
import logging
import time
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, KafkaException, Message, TopicPartition

from events.deadletter import DeadLettered
from events.envelope import Envelope, decode
from events.ids import derived_event_id
from events.registry import Event
from events.schema import EventValidationError, Instant
from events.topics import Topics
from streaming import credentials
from streaming.offsets import watermarks
from streaming.producer import EventProducer

log = logging.getLogger("segcoord.consumer")

# errors a patient consumer waits out: the broker unreachable, or every broker down (librdkafka reconnects)
_TRANSIENT = frozenset({KafkaError._TRANSPORT, KafkaError._ALL_BROKERS_DOWN})


@dataclass(frozen=True, slots=True)
class Record:
    """A decoded message and where it was read."""

    topic: str
    partition: int
    offset: int
    envelope: Envelope[Event]


class EventConsumer:
    def __init__(
        self,
        bootstrap: str,
        topics: Topics,
        group_id: str,
        subscribe: Iterable[str],
        *,
        deadletters: EventProducer | None = None,
        from_beginning: bool = True,
        extra: Mapping[str, Any] | None = None,
        dead_letter: bool = True,
        patient: bool = False,
    ) -> None:
        """Subscribe to logical topic names; ``deadletters`` defaults to a producer of its own.

        ``patient``: for a long-running reader that must not act on a partial log (the historical). A broker that
        is unreachable or moving a partition's leadership is waited out (librdkafka reconnects; the error is
        skipped, not raised), and :meth:`until_end` reads to the end whatever the pauses on the way. Without it,
        such an error raises and an idle poll ends :meth:`until_end`: right for one-shot tools, which must fail or
        finish rather than hang."""
        self.dead_letter = dead_letter
        self.patient = patient
        self.skipped_bad = 0
        self.topics = topics
        self._own_producer = deadletters is None
        self._dlq = deadletters or EventProducer(bootstrap, topics)
        self._consumer = Consumer({
            **credentials.client_config(bootstrap),
            "group.id": group_id,
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest" if from_beginning else "latest",
            "isolation.level": "read_committed",
            **(extra or {}),
        })
        self._subscribed = [topics.name(t) for t in subscribe]
        self._consumer.subscribe(self._subscribed)
        self._positions: dict[tuple[str, int], int] = {}  # next offset of every partition read
        self.dead_lettered = 0

    def poll(self, timeout: float = 1.0, max_records: int = 500) -> list[Record]:
        """Up to ``max_records`` decoded records, in order; bad messages go to the dead-letter topic."""
        # Wait for the first message only, then take what is already fetched:
        # consume(n, timeout) alone would block until n messages or the timeout.
        first = self._consumer.poll(timeout)
        messages = [] if first is None else [first, *self._consumer.consume(max_records - 1, 0)]
        out: list[Record] = []
        letters = 0
        for msg in messages:
            err = msg.error()
            if err is not None:
                if err.code() == KafkaError._PARTITION_EOF:
                    continue
                if self.patient and (err.retriable() or err.code() in _TRANSIENT):
                    continue  # librdkafka reconnects and fetches again
                raise RuntimeError(f"consumer error: {err.str()}")
            self._positions[(msg.topic(), msg.partition())] = msg.offset() + 1
            try:
                envelope = decode(msg.value())
            except EventValidationError as e:
                if not self.dead_letter:
                    self.skipped_bad += 1
                    continue
                self._dead_letter(msg, str(e))
                letters += 1
                continue
            out.append(Record(msg.topic(), msg.partition(), msg.offset(), envelope))
        if letters:
            self._dlq.flush()
            self.dead_lettered += letters
        return out

    def until_idle(self, idle_timeout: float = 5.0) -> Iterator[Record]:
        """Yield records until a poll of ``idle_timeout`` seconds brings nothing (valid or bad)."""
        while True:
            before = self.dead_lettered + self.skipped_bad
            batch = self.poll(timeout=idle_timeout)
            if not batch and self.dead_lettered + self.skipped_bad == before:
                return
            yield from batch

    def until_end(self, idle_timeout: float = 5.0) -> Iterator[Record]:
        """Yield records until every subscribed partition is read up to its end as of the call (what a topic gains
        meanwhile, such as heartbeats, may follow but is not waited for), or a poll of ``idle_timeout`` seconds
        brings nothing. A patient consumer never stops on an idle poll (a group join, a slow broker or an outage
        can be longer than any timeout): it stops when the consumer's own position, which also steps over
        transaction markers, reaches every end."""
        ends = self._ends()
        pending = {tp for tp, end in ends.items() if end > self._positions.get(tp, 0)}
        while pending:
            before = dict(self._positions)
            yield from self.poll(timeout=idle_timeout)
            if self._positions == before:
                if not self.patient:
                    return
                self._positions_from_consumer(pending)
            pending = {tp for tp in pending if self._positions.get(tp, 0) < ends[tp]}

    def _ends(self) -> dict[tuple[str, int], int]:
        """Every subscribed partition's end offset; a patient consumer waits out a broker it cannot reach."""
        while True:
            try:
                ends: dict[tuple[str, int], int] = {}
                for name in self._subscribed:
                    for p in sorted(self._consumer.list_topics(name, timeout=10).topics[name].partitions):
                        ends[(name, p)] = self._high_watermark(name, p)
                return ends
            except KafkaException as e:
                code = e.args[0].code() if e.args and isinstance(e.args[0], KafkaError) else None
                if not self.patient or code not in (*_TRANSIENT, KafkaError._TIMED_OUT):
                    raise
                log.warning("broker unreachable (%s); waiting for it to read %s to its end",
                            e.args[0].str() if e.args else e, ", ".join(self._subscribed))
                time.sleep(1.0)  # the broker is away: ask again (librdkafka reconnects meanwhile)

    def _positions_from_consumer(self, partitions: set[tuple[str, int]]) -> None:
        """Take the consumer's position where it is past the last record read (a transaction's commit marker
        is the last offset of a partition written in transactions, and no record)."""
        try:
            known = self._consumer.position([TopicPartition(t, p) for t, p in sorted(partitions)])
        except KafkaException:
            return  # not assigned yet: the next poll joins the group
        for tp in known:
            if tp.offset >= 0 and tp.offset > self._positions.get((tp.topic, tp.partition), 0):
                self._positions[(tp.topic, tp.partition)] = tp.offset

    def _high_watermark(self, name: str, partition: int) -> int:
        """A partition's end offset; a topic created a moment ago may have no leader yet: wait for one."""
        return watermarks(self._consumer, TopicPartition(name, partition))[1]

    def _dead_letter(self, msg: Message, reason: str) -> None:
        self._dlq.send(dead_letter_envelope(msg.topic(), msg.partition(), msg.offset(), msg.key(), msg.value(),
                                            msg.timestamp()[1], reason))

    def commit(self) -> None:
        """Synchronously commit everything polled so far, dead-lettered messages included.

        Call it after the records of the last poll are processed: their dead
        letters are already flushed, so nothing is skipped.
        """
        try:
            self._consumer.commit(asynchronous=False)
        except KafkaException as e:
            if e.args[0].code() != KafkaError._NO_OFFSET:
                raise

    def seek_to_beginning(self) -> None:
        for tp in self._consumer.assignment():
            self._consumer.seek(TopicPartition(tp.topic, tp.partition, OFFSET_BEGINNING))

    def close(self) -> None:
        try:
            self._consumer.close()
        finally:
            if self._own_producer:
                self._dlq.flush()


def dead_letter_envelope(topic: str, partition: int, offset: int, key: bytes | None, value: bytes | None,
                         timestamp_ms: int, reason: str) -> Envelope[DeadLettered]:
    """The dead letter of one bad message: its original bytes (base64), position and reason, keyed by its key,
    with an id derived from its position (a re-read writes a duplicate readers drop)."""
    letter = DeadLettered(
        reason=reason, topic=topic, partition=partition, offset=offset,
        original_value=None if value is None else base64.b64encode(value).decode(),
        original_key=None if key is None else base64.b64encode(key).decode(),
    )
    return Envelope(letter, derived_event_id(topic, partition, offset, 0), Instant(max(timestamp_ms, 0)),
                    key_text(key))


def key_text(key: bytes | None) -> str:
    """A message key as text for an envelope (base64 when it is not UTF-8)."""
    if key is None:
        return ""
    try:
        return key.decode()
    except UnicodeDecodeError:
        return base64.b64encode(key).decode()
