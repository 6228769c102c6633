"""The planner agent of ``segcoord run`` on the real broker, with two simulated historicals in threads.

Servers join, rules say ``loadForever`` one replica, a publish lands on
``segments``: LoadSegment commands go out at once (well before the timer's
period), the historicals load and announce, the planner settles its queue from
the answers; a rule change to ``dropForever`` marks the segments unused and
drops them from the servers. Finally the planner's store is checked against
what the log says, and a restart re-plans nothing.
"""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import orjson
import pytest
from confluent_kafka import Consumer, KafkaException, TopicPartition

from events import Envelope, Event, Interval, SegmentDescriptor, Topics, decode
from events.cluster import RulesSet, ServerJoined
from events.commands import DropSegment, LoadSegment
from events.schema import EventValidationError, Instant
from events.segments import SegmentAnnounced, SegmentsMarkedUnused, SegmentsPublished, SegmentUnannounced
from events.topics import CLUSTER, COMMANDS, SEGMENTS
from streaming.historical import Historical
from streaming.offsets import watermarks
from streaming.producer import EventProducer
from streaming.service.planner_agent import FORMAT_VERSION, STORE_NAME, load_state
from streaming.service.state import AgentStateStore
from streaming.writes import coordinator_group
from tests.accepted import import_request
from tests.integration.test_service_timeline import SEGCOORD, T0, Service, read_all, wait_for

pytestmark = pytest.mark.integration
DAY = 86_400_000


class PlanService(Service):
    """``segcoord run`` with a long planner period: what happens at once is not the timer's doing."""

    def __init__(self, bootstrap: str, topics: Topics, state_dir: Path, log: Path, plan_every: float = 60) -> None:
        super().__init__(bootstrap, topics, state_dir, log)
        self.args = [SEGCOORD, "run", "--bootstrap", bootstrap, "--topic-prefix", topics.prefix,
                     "--state-dir", str(state_dir), "--plan-every", str(plan_every)]


def decoded(bootstrap: str, topics: Topics, name: str) -> list[Envelope[Event]]:
    for attempt in range(20):  # a topic just created may have no leader yet
        try:
            out = []
            for r in read_all(bootstrap, topics.name(name)):
                try:
                    out.append(decode(r.value))
                except EventValidationError:  # a poison pill a test wrote: the service dead-letters it
                    continue
            return out
        except KafkaException:
            if attempt == 19:
                raise
            time.sleep(0.5)
    return []



def described(commands: list[Envelope[Event]], service: Service) -> str:
    """The commands (one line each) and the worker's log, for an assertion's message."""
    lines = [f"{e.event_type} {e.event_id} server={e.event.server} segment={e.event.segment.id} "  # type: ignore[attr-defined]
             f"purpose={e.event.purpose} reason={e.event.reason} epoch={e.event.planner_epoch} "  # type: ignore[attr-defined]
             f"caused by {e.causation_id} at {e.occurred_at}" for e in commands]
    return "\n".join([*lines, "log:", service.log.read_text()[-3000:]])


def planner_read_all(bootstrap: str, topics: Topics) -> bool:
    """Whether the elected planner has applied every record now on ``segments``, ``cluster`` and ``commands``: its
    feed commits what it applied under ``<group>.planner-feed`` after each batch (and after its flush)."""
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": coordinator_group(topics) + ".planner-feed",
                  "enable.auto.commit": False})
    try:
        for name in (SEGMENTS, CLUSTER, COMMANDS):
            topic = topics.name(name)
            for p in c.list_topics(topic, timeout=10).topics[topic].partitions:
                end = watermarks(c, TopicPartition(topic, p), timeout=10)[1]
                if end > 0 and c.committed([TopicPartition(topic, p)], timeout=10)[0].offset < end:
                    return False
        return True
    finally:
        c.close()


class Historicals:
    """Simulated historicals in threads, stopped (ServerLeft) at the end."""

    def __init__(self, bootstrap: str, topics: Topics, names: list[str], max_size: int = 10_000) -> None:
        self.stop = threading.Event()
        self.servers = [Historical(n, "hot", max_size, bootstrap, topics, load_ms=20) for n in names]
        self.threads = [threading.Thread(target=s.run, args=(self.stop,), daemon=True) for s in self.servers]

    def __enter__(self) -> Historicals:
        for t in self.threads:
            t.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        for t in self.threads:
            t.join(30)


@pytest.fixture
def service(kafka_bootstrap: str, topics: Topics, tmp_path: Path) -> Iterator[PlanService]:
    svc = PlanService(kafka_bootstrap, topics, tmp_path / "state", tmp_path / "run.log")
    svc.start()
    try:
        yield svc
    finally:
        assert svc.stop() == 0


def seg(d: int, version: str = "v1", size: int = 1000) -> SegmentDescriptor:
    return SegmentDescriptor("wiki", Interval(T0 + d * DAY, T0 + (d + 1) * DAY), version, 0, size)


def send(bootstrap: str, topics: Topics, event: Event, key: str) -> Envelope[Event]:
    """Write one event; a ``SegmentsPublished`` goes through the lockbox instead (only its publishes count): its
    segments are imported (``segments_import_requested``) and the lockbox's sealed publish is returned."""
    if isinstance(event, SegmentsPublished):
        return publish_through_lockbox(bootstrap, topics, event.segments, key)
    env = Envelope(event, uuid.uuid4().hex, Instant(int(time.time() * 1000)), key)
    producer = EventProducer(bootstrap, topics)
    try:
        producer.send(env)
        producer.flush()
    finally:
        producer.close()
    return env


def publish_through_lockbox(bootstrap: str, topics: Topics, segments: tuple[SegmentDescriptor, ...], key: str,
                            timeout: float = 120.0, request_event: Event | None = None) -> Envelope[Event]:
    """Import ``segments`` (or send ``request_event``, e.g. a task's ``PublishRequested``) through the running
    service's lockbox; its ``segments_published`` once on the log."""
    request = send(bootstrap, topics, request_event or import_request(segments, uuid.uuid4().hex), key)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for env in decoded(bootstrap, topics, SEGMENTS):
            if isinstance(env.event, SegmentsPublished) and env.causation_id == request.event_id:
                return env
        time.sleep(0.2)
    raise AssertionError(f"the lockbox published no import of {len(segments)} segment(s) within {timeout:.0f}s")


def test_publish_loads_at_once_and_drop_rule_unloads(kafka_bootstrap: str, topics: Topics, tmp_path: Path,
                                                      service: PlanService) -> None:
    with Historicals(kafka_bootstrap, topics, ["h1", "h2"]):
        def joined() -> bool:
            return {e.event.server for e in decoded(kafka_bootstrap, topics, "cluster")  # type: ignore[attr-defined]
                    if isinstance(e.event, ServerJoined)} == {"h1", "h2"}

        wait_for("both servers joined", joined, service)
        send(kafka_bootstrap, topics, RulesSet(data_source="wiki", rules=(
            {"type": "loadForever", "tieredReplicants": {"hot": 1}},)), "rules/wiki")
        segments = (seg(0), seg(1), seg(2))
        published = send(kafka_bootstrap, topics, SegmentsPublished(task_id="t1", segments=segments), "wiki")

        # LoadSegment for each segment, one replica each, caused by the publish (timer runs have no causation)
        def load_commands() -> list[Envelope[Event]]:
            got = [e for e in decoded(kafka_bootstrap, topics, COMMANDS) if isinstance(e.event, LoadSegment)]
            return got if len(got) >= 3 else []

        loads = wait_for("3 loads", load_commands, service)
        assert len(loads) == 3, described(loads, service)
        assert sorted(str(e.event.segment.id) for e in loads) == sorted(str(s.id) for s in segments)  # type: ignore[attr-defined]
        assert {e.causation_id for e in loads} == {published.event_id}
        assert all(e.key == e.event.server and e.event.command_id == e.event_id for e in loads)  # type: ignore[attr-defined]

        # the historicals load and announce; every load is answered
        def announced() -> dict[str, str]:
            got = {e.causation_id: e.event.server for e in decoded(kafka_bootstrap, topics, SEGMENTS)  # type: ignore[attr-defined]
                   if isinstance(e.event, SegmentAnnounced)}
            return got if all(e.event_id in got for e in loads) else {}

        answers = wait_for("announces", announced, service)
        assert {answers[e.event_id] for e in loads} <= {"h1", "h2"}


        # dropForever: marked unused on `segments`, and every copy dropped
        rule_change = send(kafka_bootstrap, topics, RulesSet(data_source="wiki", rules=({"type": "dropForever"},)),
                           "rules/wiki")

        def unused() -> list[Envelope[Event]]:
            return [e for e in decoded(kafka_bootstrap, topics, SEGMENTS) if isinstance(e.event, SegmentsMarkedUnused)]

        marks = wait_for("unused marks", unused, service)
        assert sorted(t for m in marks for t in m.event.segment_ids) == sorted(str(s.id) for s in segments)  # type: ignore[attr-defined]
        assert marks[0].causation_id == rule_change.event_id

        def unannounced() -> list[Envelope[Event]]:
            got = [e for e in decoded(kafka_bootstrap, topics, SEGMENTS) if isinstance(e.event, SegmentUnannounced)]
            return got if len(got) >= 3 else []

        gone = wait_for("unannounces", unannounced, service)
        drops = [e for e in decoded(kafka_bootstrap, topics, COMMANDS) if isinstance(e.event, DropSegment)]
        assert len(drops) == 3 and {e.causation_id for e in gone} == {e.event_id for e in drops}
        assert {(e.event.server, e.event.segment_id) for e in gone} == {  # type: ignore[attr-defined]
            (answers[e.event_id], str(e.event.segment.id)) for e in loads}  # type: ignore[attr-defined]
        # the planner counted the answers: no further load was ever issued
        all_loads = [e for e in decoded(kafka_bootstrap, topics, COMMANDS) if isinstance(e.event, LoadSegment)]
        assert len(all_loads) == 3, described(all_loads, service)
    # the servers left (ServerLeft on cluster): stop once the planner applied everything, so its store has it all
    wait_for("the planner to read the log to its end", lambda: planner_read_all(kafka_bootstrap, topics), service)
    assert service.stop() == 0

    # the store: nothing in flight, nothing used or held, both servers known (they left when stopped)
    with AgentStateStore(tmp_path / "state" / STORE_NAME, FORMAT_VERSION) as store:
        st = load_state(store)
        assert st.queue == {} and st.used == set()
        assert all(not held for held in st.held.values())
        assert sorted(st.servers) == ["h1", "h2"]
        assert st.start is not None and orjson.loads(store.get(b"meta/") or b"{}")["runs"] >= 4
    commands_before = len(read_all(kafka_bootstrap, topics.name(COMMANDS)))

    # a restart resumes from the store and re-plans nothing: not at its catch-up, its first (full) timer run, nor
    # after a later input (a rule change for another data source, applied after both)
    service.start()
    wait_for("the restarted planner to catch up",
             lambda: service.log.read_text().count("planner: caught up") >= 2, service, timeout=120)
    send(kafka_bootstrap, topics, RulesSet(data_source="other", rules=({"type": "dropForever"},)), "rules/other")
    wait_for("the restarted planner to read the log to its end",
             lambda: planner_read_all(kafka_bootstrap, topics), service)
    assert len(read_all(kafka_bootstrap, topics.name(COMMANDS))) == commands_before
