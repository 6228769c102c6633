"""A historical restarted while the broker is away waits for it, then answers nothing twice.

The 30-minute soak saw a restarted ``segcoord historical`` die in its start-up read during a broker outage
("Broker transport failure"), and a restarted one execute loads it had answered minutes before (its catch-up
ended at the first idle second, before its own answers were read). On the test's own broker, stopped and
started by the test: a historical answers a load, is stopped, and starts again while the broker is down. Once
the broker is back it answers a new load, and the old one was answered once, by the first start.
"""

from __future__ import annotations

import logging
import uuid

import pytest

from events import Envelope, Topics
from events.commands import LoadSegment
from events.segments import SegmentAnnounced
from streaming.admin import create_topics
from streaming.historical import Historical
from streaming.local_broker import LocalBroker
from streaming.producer import EventProducer
from tests.integration.processes import wait_for
from tests.integration.test_historical import T0, Running, read, seg

pytestmark = pytest.mark.integration


def test_a_historical_started_during_an_outage_waits_and_answers_nothing_twice(
        own_broker: LocalBroker, caplog: pytest.LogCaptureFixture) -> None:
    bootstrap = own_broker.start()
    topics = Topics(f"t{uuid.uuid4().hex[:10]}.")
    create_topics(bootstrap, topics)
    a, b = seg(0, 100), seg(1, 100)

    def load(command_id: str, segment: object) -> str:
        producer = EventProducer(bootstrap, topics)
        event_id = uuid.uuid4().hex
        producer.send(Envelope(LoadSegment(command_id=command_id, server="h1", segment=segment,  # type: ignore[arg-type]
                                           stage="1", purpose="loading", reason="first copy"), event_id, T0, "h1"))
        producer.flush()
        producer.close()
        return event_id

    first = Running(Historical("h1", "hot", 10_000, bootstrap, topics))
    load_a = load("c1", a)
    wait_for("h1 to read its answer to c1 back", lambda: load_a in first.historical.state.answered, [], 120)
    first.halt()

    own_broker.stop()
    with caplog.at_level(logging.WARNING, logger="segcoord.consumer"):
        again = Running(Historical("h1", "hot", 10_000, bootstrap, topics))  # starts with no broker to read from
        wait_for("the restarted historical to wait for the broker",
                 lambda: "broker unreachable" in caplog.text or not again.thread.is_alive(), [], 120)
        assert again.thread.is_alive(), "the restarted historical died during the outage"
    assert own_broker.start() == bootstrap
    load_b = load("c2", b)

    def answered_b(records: list) -> bool:  # type: ignore[type-arg]
        return any(r.envelope.causation_id == load_b for r in records)

    try:
        records = read(bootstrap, topics, answered_b, timeout=180)
        assert again.thread.is_alive(), "the restarted historical died during the outage"
    finally:
        again.halt()
    assert answered_b(records), "the restarted historical never answered the load sent after the outage"
    # c1 and c2 are in one partition (keyed by the server): c1 was read, and skipped, before c2 was answered
    answers_a = [r for r in records if r.envelope.causation_id == load_a and isinstance(r.envelope.event,
                                                                                          SegmentAnnounced)]
    assert len(answers_a) == 1, f"c1 answered {len(answers_a)} times"
