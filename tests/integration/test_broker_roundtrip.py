"""Every event type through the real broker unchanged; bad messages to the dead-letter topic, the rest in order."""

from __future__ import annotations

import base64
import uuid

import pytest

from events import DeadLettered, Envelope, Event, SegmentAnnounced, Topics, decode, encode
from events.topics import DEADLETTER, SEGMENTS, TOPIC_SPECS
from streaming.consumer import EventConsumer, Record
from streaming.examples import example_envelopes, example_segment
from streaming.producer import EventProducer

pytestmark = pytest.mark.integration


def _drain(consumer: EventConsumer, want: int, idle: float = 10.0) -> list[Record]:
    got: list[Record] = []
    for rec in consumer.until_idle(idle):
        got.append(rec)
        if len(got) >= want:
            break
    consumer.commit()
    return got


def test_every_event_type_round_trips_unchanged(kafka_bootstrap: str, topics: Topics) -> None:
    sent = example_envelopes(1_795_219_200_000)
    producer = EventProducer(kafka_bootstrap, topics)
    for env in sent:
        producer.send(env)
    producer.flush()
    consumer = EventConsumer(kafka_bootstrap, topics, f"g-{uuid.uuid4().hex}", [s.name for s in TOPIC_SPECS])
    try:
        got = _drain(consumer, len(sent))
    finally:
        consumer.close()
    by_id = {r.envelope.event_id: r for r in got}
    assert set(by_id) == {e.event_id for e in sent}
    for env in sent:
        rec = by_id[env.event_id]
        assert rec.envelope == env
        assert encode(rec.envelope) == encode(env)
        assert rec.topic == topics.name(env.event.event_topic)
    assert consumer.dead_lettered == 0


def _announce(i: int) -> Envelope[Event]:
    event = SegmentAnnounced(server=f"historical-{i}", segment=example_segment(i))
    return Envelope(event, f"valid-{i:03d}", 1_795_219_200_000 + i, event.segment.data_source)  # type: ignore[arg-type]


BAD_MESSAGES: list[tuple[bytes | None, str]] = [
    (b"not json at all", "value: "),
    (b'{"event_type": "segment_announced"}', "schema_version"),
    (None, "tombstone"),
    (b'{"event_type":"nope","schema_version":1,"event_id":"x","occurred_at":"2026-01-01","key":"k","payload":{}}',
     "event_type"),
    (b'{"event_type":"segment_unannounced","schema_version":1,"event_id":"x","occurred_at":"2026-01-01",'
     b'"key":"k","causation_id":null,"payload":{"server":"h1"}}', "payload.segmentId"),
]


def test_malformed_messages_go_to_deadletter_and_valid_ones_stay_in_order(
    kafka_bootstrap: str, topics: Topics
) -> None:
    producer = EventProducer(kafka_bootstrap, topics)
    segments_topic = topics.name(SEGMENTS)
    valid: list[Envelope[Event]] = []
    bad_offsets: dict[int, tuple[bytes | None, str]] = {}
    offset = 0
    for i in range(20):
        env = _announce(i)
        valid.append(env)
        producer.send(env)
        offset += 1
        if i % 4 == 1:
            raw, reason = BAD_MESSAGES[(i // 4) % len(BAD_MESSAGES)]
            producer.send_raw(segments_topic, b"wiki-bad", raw)
            bad_offsets[offset] = (raw, reason)
            offset += 1
    producer.flush()

    consumer = EventConsumer(kafka_bootstrap, topics, f"g-{uuid.uuid4().hex}", [SEGMENTS])
    try:
        got = _drain(consumer, len(valid))
    finally:
        consumer.close()
    assert [r.envelope for r in got] == valid
    assert [r.offset for r in got] == sorted(set(range(offset)) - set(bad_offsets))
    assert consumer.dead_lettered == len(bad_offsets)

    dlq = EventConsumer(kafka_bootstrap, topics, f"g-{uuid.uuid4().hex}", [DEADLETTER])
    try:
        letters = _drain(dlq, len(bad_offsets))
    finally:
        dlq.close()
    assert len(letters) == len(bad_offsets)
    for rec in letters:
        letter = rec.envelope.event
        assert isinstance(letter, DeadLettered)
        assert letter.topic == segments_topic and letter.partition == 0
        raw, reason_part = bad_offsets[letter.offset]
        assert reason_part in letter.reason
        assert (None if letter.original_value is None else base64.b64decode(letter.original_value)) == raw
        assert letter.original_key is not None and base64.b64decode(letter.original_key) == b"wiki-bad"
        assert rec.envelope.key == "wiki-bad"
        assert decode(encode(rec.envelope)) == rec.envelope


def test_consumer_resumes_after_its_last_commit(kafka_bootstrap: str, topics: Topics) -> None:
    producer = EventProducer(kafka_bootstrap, topics)
    envs = [_announce(i) for i in range(10)]
    for env in envs[:6]:
        producer.send(env)
    producer.flush()
    group = f"g-{uuid.uuid4().hex}"
    first = EventConsumer(kafka_bootstrap, topics, group, [SEGMENTS])
    try:
        assert [r.envelope for r in _drain(first, 6)] == envs[:6]
    finally:
        first.close()
    for env in envs[6:]:
        producer.send(env)
    producer.flush()
    second = EventConsumer(kafka_bootstrap, topics, group, [SEGMENTS])
    try:
        assert [r.envelope for r in _drain(second, 4)] == envs[6:]
    finally:
        second.close()
