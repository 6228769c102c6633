"""The timeline agent's hot path keeps its outputs and its store byte for byte.

What a user would notice when this fails: a visibility change on ``timeline`` whose bytes differ from the
envelope the agent used to write (consumers that dedupe or compare by bytes see a new record), a store that a
restarted worker reads differently, or an event re-sent after a restart applied twice.
"""

from __future__ import annotations

import random
from pathlib import Path
from typing import get_args

from events import Envelope, Event, Interval, Topics, encode
from events.schema import Instant
from events.segment import SegmentId
from events.topics import SEGMENTS, TIMELINE
from events.visibility import SegmentState, SegmentVisibilityChanged
from streaming.service.intake import InputRecord
from streaming.service.state import AgentStateStore
from streaming.service.timeline_agent import FORMAT_VERSION, TimelineAgent, change_value
from tests.integration.test_service_timeline import segment_stream

TOPICS = Topics("unit.")


class Envelopes:
    """A sink that takes envelopes only (the agent builds them)."""

    def __init__(self) -> None:
        self.sent: list[tuple[str, bytes, bytes]] = []

    def send(self, envelope: Envelope[Event]) -> None:
        self.sent.append((TOPICS.name(envelope.event.event_topic), envelope.key.encode(), encode(envelope)))

    def flush(self, timeout: float = 30.0) -> None:
        pass


class Producer(Envelopes):
    """A sink that also takes raw records, as the worker's producer does."""

    def send_raw(self, topic: str, key: bytes | None, value: bytes | None) -> None:
        assert key is not None and value is not None
        self.sent.append((topic, key, value))


def test_a_change_value_is_the_encoded_envelope_of_the_change() -> None:
    states: tuple[SegmentState, ...] = get_args(SegmentState)
    for partition in (0, 3):
        sid = SegmentId("wiki_edits", Interval(1_795_219_200_000, 1_795_305_600_000), "v1_2", partition)
        for old in states:
            for new in states:
                for cause in ("ev1", "é\"\\"):
                    change = SegmentVisibilityChanged(segment_id=str(sid), data_source=sid.data_source,
                                                      interval=sid.interval, from_state=old, to_state=new)
                    env = Envelope(change, "id1", Instant(1_795_219_200_123), sid.data_source, cause)
                    assert change_value(sid, old, new, "id1", Instant(1_795_219_200_123), cause) == encode(env)


def _records(n: int) -> list[InputRecord]:
    return [InputRecord(TOPICS.name(SEGMENTS), 0, i, e.key.encode(), encode(e), 1000 + i)
            for i, e in enumerate(segment_stream(random.Random(18), n))]


def _run(path: Path, sink: Envelopes, records: list[InputRecord]) -> tuple[list[tuple[bytes, bytes]], tuple[int, ...]]:
    with AgentStateStore(path, FORMAT_VERSION) as store:
        agent = TimelineAgent(store, TOPICS, sink)
        for start in range(0, len(records), 250):
            agent.process(records[start:start + 250])
        c = agent.counters
        return store.scan_raw(b""), (c.applied, c.duplicates, c.dead_lettered, c.emitted)


def test_a_producer_gets_the_bytes_of_the_envelopes_and_the_store_is_the_same(tmp_path: Path) -> None:
    records = _records(3000)  # ~1% re-sent events, some in later batches than their first copy
    envelopes, producer = Envelopes(), Producer()
    stored_a, counts_a = _run(tmp_path / "a", envelopes, records)
    stored_b, counts_b = _run(tmp_path / "b", producer, records)
    assert producer.sent == envelopes.sent
    assert {t for t, _, _ in producer.sent} == {TOPICS.name(TIMELINE)}
    assert stored_a == stored_b
    assert counts_a == counts_b and counts_a[1] > 0  # duplicates were met, and dropped alike


def test_events_re_sent_after_a_restart_are_dropped_by_id(tmp_path: Path) -> None:
    records = _records(600)
    _run(tmp_path / "s", Producer(), records)
    again = [InputRecord(r.topic, r.partition, r.offset + len(records), r.key, r.value, r.timestamp_ms)
             for r in records]  # the same events at new positions (a writer re-sending after its crash)
    sink = Producer()
    _, (applied, duplicates, dead, emitted) = _run(tmp_path / "s", sink, again)
    assert (applied, emitted, sink.sent) == (0, 0, [])
    assert duplicates + dead == len(again) and duplicates > 0
