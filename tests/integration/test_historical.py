"""Simulated historicals on the real broker: loads, refusals beyond size, conditional move drops, restarts."""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Iterator

import pytest

from events import Envelope, Event, Interval, SegmentDescriptor, Topics, decode
from events.cluster import SegmentLoadRefused, ServerJoined, ServerLeft
from events.commands import DropSegment, LoadSegment
from events.segments import SegmentAnnounced, SegmentUnannounced
from events.topics import CLUSTER, SEGMENTS
from streaming.consumer import EventConsumer, Record
from streaming.historical import Historical, parse_size
from streaming.producer import EventProducer
from tests.integration.test_service_timeline import read_all

pytestmark = pytest.mark.integration
H = 3_600_000
T0 = 1_795_219_200_000


def seg(hour: int, size: int) -> SegmentDescriptor:
    return SegmentDescriptor("wiki", Interval(T0 + hour * H, T0 + (hour + 1) * H), "v1", 0, size)


class Running:
    def __init__(self, historical: Historical) -> None:
        self.historical, self.stop = historical, threading.Event()
        self.thread = threading.Thread(target=historical.run, args=(self.stop,), daemon=True)
        self.thread.start()

    def halt(self) -> None:
        self.stop.set()
        self.thread.join(30)


@pytest.fixture
def send(kafka_bootstrap: str, topics: Topics) -> Iterator[object]:
    producer = EventProducer(kafka_bootstrap, topics)

    def _send(event: Event, key: str) -> str:
        event_id = uuid.uuid4().hex
        producer.send(Envelope(event, event_id, T0, key))  # type: ignore[arg-type]
        producer.flush()
        return event_id

    yield _send
    producer.close()


def read(kafka_bootstrap: str, topics: Topics, until: object, timeout: float = 30.0) -> list[Record]:
    """Everything on segments and cluster, polled until ``until(records)`` holds (or the timeout)."""
    consumer = EventConsumer(kafka_bootstrap, topics, f"r-{uuid.uuid4().hex}", [SEGMENTS, CLUSTER])
    got: list[Record] = []
    deadline = time.monotonic() + timeout
    try:
        while time.monotonic() < deadline:
            got.extend(consumer.poll(timeout=0.5))
            if until(got):  # type: ignore[operator]
                break
    finally:
        consumer.close()
    return got


def of(records: list[Record], kind: type) -> list[Event]:
    return [r.envelope.event for r in records if isinstance(r.envelope.event, kind)]


def test_parse_size() -> None:
    assert parse_size("10GB") == 10**10 and parse_size("512MiB") == 512 * 2**20 and parse_size("1024") == 1024
    with pytest.raises(ValueError, match="not a size"):
        parse_size("ten gigs")


def test_loads_refusals_conditional_moves_and_restart(kafka_bootstrap: str, topics: Topics, send) -> None:  # type: ignore[no-untyped-def]
    h1 = Running(Historical("h1", "hot", 1000, kafka_bootstrap, topics))
    h2 = Running(Historical("h2", "hot", 10_000, kafka_bootstrap, topics, load_ms=400))
    a, b, c = seg(0, 600), seg(1, 600), seg(2, 1500)
    try:
        load_a = send(LoadSegment(command_id="c1", server="h1", segment=a, stage="1",
                                  purpose="loading", reason="first copy"), "h1")
        send(LoadSegment(command_id="c2", server="h1", segment=b, stage="1",
                         purpose="loading", reason="first copy"), "h1")
        send(LoadSegment(command_id="c3", server="h2", segment=c, stage="1",
                         purpose="loading", reason="first copy"), "h2")
        # a move of a to h2: the drop is sent first, and must wait for h2's announce
        send(DropSegment(command_id="c4", server="h1", segment_id=str(a.id), stage="7",
                         purpose="balancing", reason="move",
                         move_id="m1"), "h1")
        send(LoadSegment(command_id="c5", server="h2", segment=a, stage="7",
                         purpose="balancing", reason="move", move_id="m1"), "h2")
        # a move of c to h1, which has no room: h1 refuses, h2 keeps c
        send(LoadSegment(command_id="c6", server="h1", segment=c, stage="7",
                         purpose="balancing", reason="move", move_id="m2"), "h1")
        send(DropSegment(command_id="c7", server="h2", segment_id=str(c.id), stage="7",
                         purpose="balancing", reason="move",
                         move_id="m2"), "h2")

        def settled(rs: list[Record]) -> bool:
            return len(of(rs, SegmentUnannounced)) >= 1 and len(of(rs, SegmentLoadRefused)) >= 2

        records = read(kafka_bootstrap, topics, settled)
    finally:
        h1.halt()
        h2.halt()
    announced = [(e.server, str(e.segment.id)) for e in of(records, SegmentAnnounced)]  # type: ignore[attr-defined]
    assert ("h1", str(a.id)) in announced and ("h2", str(c.id)) in announced and ("h2", str(a.id)) in announced
    assert ("h1", str(b.id)) not in announced
    refused = {e.command_id: e for e in of(records, SegmentLoadRefused)}  # type: ignore[attr-defined]
    assert set(refused) == {"c2", "c6"} and refused["c2"].used_bytes == 600 and refused["c6"].move_id == "m2"
    order = [(type(r.envelope.event).__name__, getattr(r.envelope.event, "server", None)) for r in records
             if r.topic == topics.name(SEGMENTS)]
    assert order.index(("SegmentAnnounced", "h2"), 1) < order.index(("SegmentUnannounced", "h1"))  # drop waited
    unannounced = [(e.server, e.segment_id) for e in of(records, SegmentUnannounced)]  # type: ignore[attr-defined]
    assert unannounced == [("h1", str(a.id))]  # the refused move left c on h2
    first = next(r for r in records if isinstance(r.envelope.event, SegmentAnnounced)
                 and r.envelope.event.server == "h1")
    assert first.envelope.causation_id == load_a
    joined = [e.server for e in of(records, ServerJoined)]  # type: ignore[attr-defined]
    assert sorted(joined) == ["h1", "h2"]

    # a restarted h1 rebuilds what it holds from the log and answers nothing twice
    again = Running(Historical("h1", "hot", 1000, kafka_bootstrap, topics))
    try:
        time.sleep(3)
        assert again.historical.state.loaded == {}
        send(LoadSegment(command_id="c8", server="h1", segment=b, stage="1",
                         purpose="loading", reason="first copy"), "h1")
        records = read(kafka_bootstrap, topics, lambda rs: ("h1", str(b.id)) in
                       [(e.server, str(e.segment.id)) for e in of(rs, SegmentAnnounced)])  # type: ignore[attr-defined]
    finally:
        again.halt()
    ids = [r.envelope.event_id for r in records if r.topic == topics.name(SEGMENTS)]
    assert len(ids) == len(set(ids))
    assert ("h1", str(b.id)) in [(e.server, str(e.segment.id)) for e in of(records, SegmentAnnounced)]  # type: ignore[attr-defined]
    left = read(kafka_bootstrap, topics, lambda rs: len(of(rs, ServerLeft)) >= 3)
    assert sorted(e.server for e in of(left, ServerLeft)) == ["h1", "h1", "h2"]  # type: ignore[attr-defined]


def test_the_historical_command_serves_until_terminated(kafka_bootstrap: str, topics: Topics, send) -> None:  # type: ignore[no-untyped-def]
    import signal
    import subprocess
    import sys

    proc = subprocess.Popen([sys.executable, "-m", "streaming.cli", "historical", "--name", "hx", "--tier", "hot",
                             "--max-size", "1KB", "--load-ms", "10", "--bootstrap", kafka_bootstrap,
                             "--topic-prefix", topics.prefix], stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None and "serving" in proc.stdout.readline()
        send(LoadSegment(command_id="x1", server="hx", segment=seg(5, 100), stage="1",
                         purpose="loading", reason="first copy"), "hx")
        records = read(kafka_bootstrap, topics, lambda rs: any(isinstance(r.envelope.event, SegmentAnnounced)
                                                              for r in rs))
        assert [e.server for e in of(records, SegmentAnnounced)] == ["hx"]  # type: ignore[attr-defined]
    finally:
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(30) == 0
    left = read(kafka_bootstrap, topics, lambda rs: len(of(rs, ServerLeft)) >= 1)
    assert [e.server for e in of(left, ServerLeft)] == ["hx"]  # type: ignore[attr-defined]


def test_cancel_withdraws_a_queued_load_and_leaves_a_loaded_one(kafka_bootstrap: str, topics: Topics,  # type: ignore[no-untyped-def]
                                                                 send) -> None:
    from events.commands import CancelSegmentLoad

    h = Running(Historical("h1", "hot", 10_000, kafka_bootstrap, topics, load_ms=1500))
    a, b, c = seg(0, 100), seg(1, 100), seg(2, 100)
    try:
        send(LoadSegment(command_id="l1", server="h1", segment=a, stage="1",
                         purpose="loading", reason="first copy"), "h1")
        send(LoadSegment(command_id="l2", server="h1", segment=b, stage="1",
                         purpose="loading", reason="first copy"), "h1")
        send(LoadSegment(command_id="l3", server="h1", segment=c, stage="1",
                         purpose="loading", reason="first copy"), "h1")
        # b waits behind a (1.5 s each): cancelled by its id; c by its segment (no id given)
        cancel_b = send(CancelSegmentLoad(command_id="k1", server="h1", segment_id=str(b.id), reason="unused",
                                          cancels="l2"), "h1")
        cancel_c = send(CancelSegmentLoad(command_id="k2", server="h1", segment_id=str(c.id), reason="unused"), "h1")
        records = read(kafka_bootstrap, topics, lambda rs: len(of(rs, SegmentLoadRefused)) >= 2
                       and len(of(rs, SegmentAnnounced)) >= 1)
        # a is announced; cancelling it now changes nothing (the coordinator drops it if it must)
        send(CancelSegmentLoad(command_id="k3", server="h1", segment_id=str(a.id), reason="late", cancels="l1"), "h1")
        time.sleep(2)
    finally:
        h.halt()
    refused = {r.envelope.event.command_id: r.envelope for r in records  # type: ignore[attr-defined]
               if isinstance(r.envelope.event, SegmentLoadRefused)}
    assert set(refused) == {"l2", "l3"}
    assert refused["l2"].causation_id == cancel_b and refused["l3"].causation_id == cancel_c
    assert refused["l2"].event.reason == "cancelled: unused"  # type: ignore[attr-defined]
    assert [str(e.segment.id) for e in of(records, SegmentAnnounced)] == [str(a.id)]  # type: ignore[attr-defined]
    read(kafka_bootstrap, topics, lambda rs: len(of(rs, ServerLeft)) >= 1)  # it left: it wrote all it ever will
    # every record of both topics up to their ends (a read until its ServerLeft alone could stop before reaching
    # the announce, on another topic: it failed so once in CI)
    later = [decode(r.value).event for name in (SEGMENTS, CLUSTER)
             for r in read_all(kafka_bootstrap, topics.name(name))]
    assert [str(e.segment.id) for e in later if isinstance(e, SegmentAnnounced)] == [str(a.id)]
    assert not [e for e in later if isinstance(e, SegmentUnannounced)]
    assert len([e for e in later if isinstance(e, SegmentLoadRefused)]) == 2

    # a restart answers nothing twice: the cancelled loads stay cancelled
    again = Running(Historical("h1", "hot", 10_000, kafka_bootstrap, topics, load_ms=10))
    try:
        time.sleep(3)
        assert set(again.historical.state.loaded) == {str(a.id)}
        assert again.historical.state.refused == {"l2", "l3"}
        assert {cancel_b, cancel_c} <= again.historical.state.answered
    finally:
        again.halt()
    final = read(kafka_bootstrap, topics, lambda rs: len(of(rs, ServerLeft)) >= 2)
    assert len(of(final, SegmentAnnounced)) == 1 and len(of(final, SegmentLoadRefused)) == 2
    # the audit: every load answered (by its announce, or by the cancel and its refusal); cancels owe nothing
    from streaming.replay import audit

    assert audit(kafka_bootstrap, topics, command_timeout_ms=0) == []
