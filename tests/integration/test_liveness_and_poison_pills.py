"""Issue 16 on the real broker: a SIGKILLed historical is decided lost and its segment served again; bad records
(tombstones, malformed JSON) on every input topic are dead-lettered exactly once and crash nothing.

**Liveness.** ``segcoord run`` with a short ``--server-timeout-millis`` and two historicals (real
``segcoord historical`` processes, heartbeating). A rule keeps one replica; the segment lands on one of them,
which is SIGKILLed. Within the timeout plus one planner period: ``server_lost`` on ``cluster``, the segment
unannounced (offline in the timeline and the feed), loaded on the other server, visible again. At every step
the replay of the log (``LogFold``) and :class:`~streaming.subscribers.QueryableView` agree with the
timeline agent's output.

**Poison pills.** With the service and a historical running, a tombstone and a malformed record go to each of
``lock-requests``, ``segments``, ``cluster`` and ``commands``; a valid publish follows. Every bad record gets
one dead letter (by topic, partition and offset), the service and the historical keep running and the publish
still gets its load. (The Spark balancer's decoding of the same kinds of values is tested in
``tests/unit/balancer/test_poison_pills.py``.)
"""

from __future__ import annotations

import base64
import signal
import subprocess
import time
from collections import Counter
from pathlib import Path

import pytest
from confluent_kafka import Producer

from events import Envelope, Event, Interval, SegmentDescriptor, Topics, decode
from events.cluster import RulesSet, ServerJoined, ServerLost
from events.commands import LoadSegment
from events.deadletter import DeadLettered
from events.schema import EventValidationError
from events.segments import SegmentAnnounced, SegmentsPublished, SegmentUnannounced
from events.topics import CLUSTER, COMMANDS, DEADLETTER, LOCK_REQUESTS, SEGMENTS, TIMELINE
from events.visibility import SegmentVisibilityChanged
from streaming.replay import LogFold, read_log
from streaming.subscribers import QueryableView
from tests.integration.processes import SegcoordProcess
from tests.integration.test_service_planner import decoded, send
from tests.integration.test_service_timeline import SEGCOORD, T0, Service, read_all, wait_for

pytestmark = pytest.mark.integration
DAY = 86_400_000
TIMEOUT_MS = 4000
SEG = SegmentDescriptor("wiki", Interval(T0, T0 + DAY), "v1", 0, 1000)


class LiveService(Service):
    def __init__(self, bootstrap: str, topics: Topics, state_dir: Path, log: Path) -> None:
        super().__init__(bootstrap, topics, state_dir, log)
        self.args += ["--plan-every", "1", "--server-timeout-millis", str(TIMEOUT_MS)]


class HistoricalProcess(SegcoordProcess):
    def __init__(self, name: str, bootstrap: str, topics: Topics, log: Path) -> None:
        super().__init__([SEGCOORD, "historical", "--name", name, "--tier", "_default_tier", "--max-size", "1MB",
                          "--load-ms", "10", "--heartbeat-ms", "500", "--bootstrap", bootstrap,
                          "--topic-prefix", topics.prefix], log)
        self.name = name

    def running(self) -> bool:
        """True while it runs; fails with its log once it exited."""
        assert self.alive(), f"historical {self.name} exited; log:\n{self.log.read_text()[-3000:]}"
        return True

    def stop(self, sig: int = signal.SIGTERM) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(sig)
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)


def _valid(bootstrap: str, topics: Topics, name: str) -> list[Envelope[Event]]:
    """The decodable events of a topic (the bad records sent by the test are skipped)."""
    out = []
    for raw in read_all(bootstrap, topics.name(name)):
        try:
            out.append(decode(raw.value))
        except EventValidationError:
            continue
    return out


def _timeline_states(bootstrap: str, topics: Topics) -> dict[str, str]:
    """The timeline agent's output folded: each segment's latest state (deduplicated by id, in log order)."""
    seen: set[str] = set()
    states: dict[str, str] = {}
    for raw in read_all(bootstrap, topics.name(TIMELINE)):
        env = decode(raw.value)
        if env.event_id in seen or not isinstance(env.event, SegmentVisibilityChanged):
            continue
        seen.add(env.event_id)
        states[env.event.segment_id] = env.event.to_state
    return states


def _agree(bootstrap: str, topics: Topics, view: QueryableView) -> tuple[str, LogFold]:
    """The segment's state, once replay, the queryable view and the timeline agent's output all say the same."""
    fold = LogFold()
    for record in read_log(bootstrap, topics):
        fold.apply(record)
    view.catch_up(0.5)
    replayed = fold.timelines.states().get(str(SEG.id))
    viewed = view.states().get(str(SEG.id))
    agent = _timeline_states(bootstrap, topics).get(str(SEG.id))
    return (replayed if replayed == viewed == agent else ""), fold


@pytest.fixture
def procs(kafka_bootstrap: str, topics: Topics, tmp_path: Path):  # type: ignore[no-untyped-def]
    started: list[HistoricalProcess] = []
    svc = LiveService(kafka_bootstrap, topics, tmp_path / "state", tmp_path / "run.log")
    svc.start()
    try:
        yield svc, started
    finally:
        for h in started:
            h.stop()
        assert svc.stop() == 0


def test_a_sigkilled_only_holder_is_lost_and_its_segment_served_again(
        kafka_bootstrap: str, topics: Topics, tmp_path: Path, procs) -> None:  # type: ignore[no-untyped-def]
    svc, started = procs
    svc.loaded(1)
    h1 = HistoricalProcess("h1", kafka_bootstrap, topics, tmp_path / "h1.log")
    h1.start()
    started.append(h1)

    def joined(names: set[str]) -> bool:
        return names <= {e.event.server for e in decoded(kafka_bootstrap, topics, CLUSTER)  # type: ignore[attr-defined]
                         if isinstance(e.event, ServerJoined)}

    wait_for("h1 joined", lambda: h1.running() and joined({"h1"}), svc, 60)
    send(kafka_bootstrap, topics, RulesSet(data_source="wiki", rules=(
        {"type": "loadForever", "tieredReplicants": {"_default_tier": 1}},)), "rules/wiki")
    send(kafka_bootstrap, topics, SegmentsPublished(task_id="t1", segments=(SEG,)), "wiki")
    view = QueryableView(kafka_bootstrap, topics)
    try:
        wait_for("the segment visible on h1, everywhere alike",
                 lambda: _agree(kafka_bootstrap, topics, view)[0] == "visible", svc, 90)
        h2 = HistoricalProcess("h2", kafka_bootstrap, topics, tmp_path / "h2.log")
        h2.start()
        started.append(h2)
        wait_for("h2 joined", lambda: h2.running() and joined({"h2"}), svc, 60)

        h1.stop(signal.SIGKILL)  # the only holder: no ServerLeft, only silence
        killed_at = time.monotonic()

        def lost() -> list[Envelope[Event]]:
            return [e for e in decoded(kafka_bootstrap, topics, CLUSTER) if isinstance(e.event, ServerLost)]

        decisions = wait_for("server_lost of h1", lost, svc, 90)
        assert [e.event.server for e in decisions] == ["h1"]  # type: ignore[attr-defined]
        # offline in between: the coordinator's unannounce, then h2's announce of its load
        wait_for("the coordinator's unannounce", lambda: any(
            isinstance(e.event, SegmentUnannounced) and e.event.reason == "server_lost"
            for e in decoded(kafka_bootstrap, topics, SEGMENTS)), svc, 60)
        wait_for("visible again, everywhere alike",
                 lambda: _agree(kafka_bootstrap, topics, view)[0] == "visible", svc, 90)
        print(f"served again {time.monotonic() - killed_at:.1f}s after the SIGKILL (timeout {TIMEOUT_MS} ms)")
        segments = decoded(kafka_bootstrap, topics, SEGMENTS)
        announces = [e.event.server for e in segments if isinstance(e.event, SegmentAnnounced)]  # type: ignore[attr-defined]
        assert announces[-1] == "h2"
        states = [e.event.to_state for e in decoded(kafka_bootstrap, topics, TIMELINE)  # type: ignore[attr-defined]
                  if isinstance(e.event, SegmentVisibilityChanged)]
        assert "offline" in states[states.index("visible") + 1:], states  # it went offline, then visible again
        loads = [e.event.server for e in decoded(kafka_bootstrap, topics, COMMANDS)  # type: ignore[attr-defined]
                 if isinstance(e.event, LoadSegment)]
        assert loads[-1] == "h2"
        _, fold = _agree(kafka_bootstrap, topics, view)
        assert not fold.placement.servers["h1"].joined and not fold.placement.held.get("h1")
    finally:
        view.close()


def test_a_tombstone_and_a_malformed_record_on_every_input_topic_are_dead_lettered_once(
        kafka_bootstrap: str, topics: Topics, tmp_path: Path, procs) -> None:  # type: ignore[no-untyped-def]
    svc, started = procs
    svc.loaded(1)
    h1 = HistoricalProcess("h1", kafka_bootstrap, topics, tmp_path / "h1.log")
    h1.start()
    started.append(h1)
    wait_for("h1 joined", lambda: h1.running() and any(isinstance(e.event, ServerJoined)
                                                       for e in decoded(kafka_bootstrap, topics, CLUSTER)), svc, 60)
    producer = Producer({"bootstrap.servers": kafka_bootstrap})
    bad = 0
    for logical, key in ((LOCK_REQUESTS, b"wiki"), (SEGMENTS, b"wiki"), (CLUSTER, b"h1"), (COMMANDS, b"h1")):
        producer.produce(topics.name(logical), key=key, value=None)  # a tombstone
        producer.produce(topics.name(logical), key=key, value=b'{"event_type": "segments_published", "pay')
        bad += 2
    producer.flush(30)
    send(kafka_bootstrap, topics, SegmentsPublished(task_id="t1", segments=(SEG,)), "wiki")

    def answered() -> bool:
        return h1.running() and any(isinstance(e.event, SegmentAnnounced)
                                    for e in _valid(kafka_bootstrap, topics, SEGMENTS))

    wait_for("the publish after the bad records loaded and announced", answered, svc, 90)

    def letters() -> list[DeadLettered]:
        got = [decode(r.value).event for r in read_all(kafka_bootstrap, topics.name(DEADLETTER))]
        return got if len({(d.topic, d.partition, d.offset) for d in got}) >= bad else []  # type: ignore[attr-defined]

    got: list[DeadLettered] = wait_for("a dead letter of every bad record", letters, svc, 60)
    copies = Counter((d.topic, d.partition, d.offset) for d in got)
    assert len(copies) == bad and set(copies.values()) == {1}, copies
    assert sorted(topics.logical(t) for t, _, _ in copies) == sorted(
        [LOCK_REQUESTS, LOCK_REQUESTS, SEGMENTS, SEGMENTS, CLUSTER, CLUSTER, COMMANDS, COMMANDS])
    tombstones = [d for d in got if d.original_value is None]
    assert len(tombstones) == 4 and all("tombstone" in d.reason for d in tombstones)
    malformed = [d for d in got if d.original_value is not None]
    assert all(base64.b64decode(d.original_value or "").startswith(b'{"event_type"') for d in malformed)
    assert svc.alive() and h1.alive()
