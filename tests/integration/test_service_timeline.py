"""The timeline agent of ``segcoord run`` on the real broker: outputs, dead letters, and crash recovery.

The agent always runs as a user runs it, a ``segcoord run`` subprocess. The
oracle is a small pure fold written here (decode, drop seen ids, ``Timelines.apply``,
derived ids): the agent's RocksDB state and its output, deduplicated by event
id, must equal it whatever happened to the process in between.
"""

from __future__ import annotations

import base64
import random
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

from coordinator.locks.seal import publish_refusal
from coordinator.timeline.timelines import Timelines
from events import DeadLettered, Envelope, Event, Interval, SegmentDescriptor, Topics, decode
from events.ids import derived_event_id
from events.schema import EventValidationError, Instant
from events.segments import SegmentAnnounced, SegmentsMarkedUnused, SegmentsPublished, SegmentUnannounced
from events.topics import DEADLETTER, SEGMENTS, TIMELINE
from events.visibility import SegmentVisibilityChanged
from streaming.admin import create_topics
from streaming.credentials import publish_key
from streaming.producer import EventProducer
from streaming.service.state import AgentStateStore
from streaming.service.timeline_agent import FORMAT_VERSION, STORE_NAME, stored_facts, stored_states
from streaming.service.timeline_facts import all_facts, all_states
from tests.accepted import through_lockbox
from tests.integration.processes import SEGCOORD, SegcoordProcess, wait_for

pytestmark = pytest.mark.integration
T0 = 1_795_219_200_000  # 2026-11-21T00:00Z


# -- builders --------------------------------------------------------------------------------------
def seg(ds: str, day: int, version: str, partition: int = 0, core: int = 0) -> SegmentDescriptor:
    start = T0 + day * 86_400_000
    shard = {"type": "numbered", "partitionNum": partition, "partitions": core} if core else None
    return SegmentDescriptor(ds, Interval(start, start + 86_400_000), version, partition, 1000, shard_spec=shard)


def env(event: Event, event_id: str, key: str, at: int = T0) -> Envelope[Event]:
    """The envelope; a ``segments_published`` as the lockbox writes it (only its publishes are taken)."""
    return through_lockbox(Envelope(event, event_id, Instant(at), key))


# -- the oracle: a pure fold of the input topic -----------------------------------------------------
@dataclass(frozen=True, slots=True)
class Raw:
    topic: str
    partition: int
    offset: int
    key: bytes | None
    value: bytes | None


@dataclass(frozen=True, slots=True)
class Expected:
    timelines: Timelines
    outputs: list[Envelope[Event]]  # in input order (partition by partition)
    bad_offsets: dict[tuple[int, int], str]  # (partition, offset) -> reason


def pure_fold(records: list[Raw]) -> Expected:
    timelines = Timelines()
    seen: set[str] = set()
    outputs: list[Envelope[Event]] = []
    bad: dict[tuple[int, int], str] = {}
    for r in records:
        try:
            e = decode(r.value)
            if e.event.event_topic != SEGMENTS:
                raise EventValidationError("event_type", e.event_type, "not a segments event")
            if e.event_id in seen:
                continue
            refused = publish_refusal(e, publish_key())
            if refused is not None:
                raise EventValidationError("payload.seal", None, refused)
            changes = timelines.apply(e.event)
        except EventValidationError as err:
            bad[(r.partition, r.offset)] = str(err)
            continue
        seen.add(e.event_id)
        for i, c in enumerate(changes):
            out = SegmentVisibilityChanged(segment_id=str(c.segment_id), data_source=c.segment_id.data_source,
                                           interval=c.segment_id.interval, from_state=c.old, to_state=c.new)
            outputs.append(Envelope(out, derived_event_id(r.topic, r.partition, r.offset, i), e.occurred_at,
                                    c.segment_id.data_source, e.event_id))
    return Expected(timelines, outputs, bad)


# -- Kafka helpers ---------------------------------------------------------------------------------
def read_all(bootstrap: str, topic: str, timeout: float = 30.0) -> list[Raw]:
    """Every record of ``topic`` up to its current end, partition by partition, in offset order."""
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"r-{uuid.uuid4().hex}", "enable.auto.commit": False,
                  "enable.partition.eof": True})
    try:
        parts = sorted(c.list_topics(topic, timeout=10).topics[topic].partitions)
        ends = {p: c.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1] for p in parts}
        c.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in parts])
        out: dict[int, list[Raw]] = {p: [] for p in parts}
        pending = {p for p in parts if ends[p] > 0}
        deadline = time.monotonic() + timeout
        while pending and time.monotonic() < deadline:
            for m in c.consume(5000, 0.5):
                if m.error() is not None:
                    continue
                p = m.partition()
                if m.offset() < ends[p]:
                    out[p].append(Raw(topic, p, m.offset(), m.key(), m.value()))
                if m.offset() >= ends[p] - 1:
                    pending.discard(p)
        assert not pending, f"could not read {topic} to its end: {pending}"
        return [r for p in parts for r in out[p]]
    finally:
        c.close()


def count_distinct_ids(bootstrap: str, topic: str) -> int:
    return len({decode(r.value).event_id for r in read_all(bootstrap, topic)})


class Service(SegcoordProcess):
    """``segcoord run`` as a subprocess."""

    name = "segcoord run"

    def __init__(self, bootstrap: str, topics: Topics, state_dir: Path, log: Path) -> None:
        super().__init__([SEGCOORD, "run", "--bootstrap", bootstrap, "--topic-prefix", topics.prefix,
                          "--state-dir", str(state_dir)], log)

    def loaded(self, starts: int, timeout: float = 60.0) -> None:
        """Wait until the ``starts``-th run has loaded its stores (its " resumes at " line is out), so a kill that
        follows hits the worker itself, not the interpreter's start-up (slow on a loaded machine)."""
        wait_for(f"start {starts} to load its state",
                 lambda: self.log.read_text().count(" resumes at ") >= starts, self, timeout)


class Flow:
    """A paced producer thread that holds back its last ``reserve`` chunks. Once it reaches them, each
    :meth:`release` lets one go, so every start of :func:`kill_and_restart` has new input to work on however
    slow the restarts are (on a loaded machine the paced part can end after a few kills); :meth:`kills_done`
    lets the rest go. With ``reserve`` above the number of kills, every kill lands while the stream flows."""

    def __init__(self, chunks: list[Any], send: Callable[[Any], None], seconds: float, reserve: int) -> None:
        self._done = threading.Event()
        self._holding = threading.Event()
        self._go = threading.Semaphore(0)
        self._sent = threading.Semaphore(0)

        def produce() -> None:
            for i, chunk in enumerate(chunks):
                held = i >= len(chunks) - reserve
                if held:
                    self._holding.set()
                    while not self._done.is_set() and not self._go.acquire(timeout=0.2):
                        pass
                send(chunk)
                if held:
                    self._sent.release()
                else:
                    time.sleep(seconds / len(chunks))

        self.thread = threading.Thread(target=produce, name="produce")

    def start(self) -> None:
        self.thread.start()

    def alive(self) -> bool:
        return self.thread.is_alive()

    def release(self) -> None:
        """Once the paced part is over, send one held-back chunk and return when it is flushed."""
        if self._holding.is_set() and not self._done.is_set():
            self._go.release()
            self._sent.acquire(timeout=120)

    def kills_done(self) -> None:
        self._done.set()

    def join(self) -> None:
        self.kills_done()
        self.thread.join()


def kill_and_restart(service: Service, pauses: list[float], flow: Flow,
                     progress: Callable[[], tuple[int, int]] | None = None) -> int:
    """Start the service; then, per pause, wait until the running start has loaded its stores (its
    " resumes at " line) and, with ``progress`` (:func:`group_progress`), until this start committed work or
    has nothing left to read, so each kill lands after the start did something whatever the machine's load;
    sleep the pause, SIGKILL and restart it. Returns the kills made while ``flow`` was still producing;
    releases the flow's held-back chunks at the end."""
    kills_while_flowing = 0
    service.start()
    for starts, pause in enumerate(pauses, start=1):
        service.loaded(starts)
        if progress is not None:
            worked = _worked(progress)
            flow.release()  # new input for this start, sent after its committed position was read
            wait_for(f"start {starts} to commit work", worked, service, 120)
        time.sleep(pause)
        kills_while_flowing += flow.alive()
        service.kill()
        service.start()
    flow.kills_done()
    return kills_while_flowing


def _worked(progress: Callable[[], tuple[int, int]]) -> Callable[[], bool]:
    """A check that the committed position grew past its value now, or reached the end of the input."""
    before, _ = progress()

    def check() -> bool:
        committed, end = progress()
        print(f"progress: committed {committed} (at start {before}), end {end}", flush=True)
        return committed > before or committed >= end

    return check


def group_progress(bootstrap: str, topics: Topics, topic: str) -> Callable[[], tuple[int, int]]:
    """(offsets the worker's consumer group committed on ``topic``, its high watermarks), each summed over the
    partitions: the worker commits only what its stores hold."""
    group = f"{topics.prefix}coordinator"

    def read() -> tuple[int, int]:
        c = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False})
        try:
            parts = c.list_topics(topic, timeout=10).topics[topic].partitions
            tps = [TopicPartition(topic, p) for p in parts]
            committed = sum(max(tp.offset, 0) for tp in c.committed(tps, timeout=10))
            return committed, sum(c.get_watermark_offsets(tp, timeout=10)[1] for tp in tps)
        finally:
            c.close()

    return read


def wait_for_outputs(bootstrap: str, topics: Topics, want: int, service: Service, timeout: float = 90.0) -> None:
    deadline = time.monotonic() + timeout
    got = 0
    while time.monotonic() < deadline:
        assert service.alive(), f"segcoord run exited; log:\n{service.log.read_text()[-3000:]}"
        got = count_distinct_ids(bootstrap, topics.name(TIMELINE))
        if got >= want:
            return
        time.sleep(0.5)
    raise AssertionError(f"{got}/{want} timeline records after {timeout}s; log:\n{service.log.read_text()[-3000:]}")


@dataclass(frozen=True, slots=True)
class Outcome:
    expected: Expected
    outputs: list[Raw]


def check_agent_equals_fold(bootstrap: str, topics: Topics, state_dir: Path) -> Outcome:
    """The store equals the pure fold of the input topic; deduplicated output equals the fold's, per partition."""
    expected = pure_fold(read_all(bootstrap, topics.name(SEGMENTS)))
    with AgentStateStore(state_dir / STORE_NAME, FORMAT_VERSION) as store:
        assert not store.wiped
        assert stored_states(store) == all_states(expected.timelines)
        assert stored_facts(store) == all_facts(expected.timelines)
        ends = {(r.topic, r.partition): r.offset + 1 for r in read_all(bootstrap, topics.name(SEGMENTS))}
        assert store.offsets() == ends
    outputs = read_all(bootstrap, topics.name(TIMELINE))
    by_partition: dict[int, list[bytes]] = {}
    first: dict[str, bytes] = {}
    key_partition: dict[str, int] = {}
    for r in outputs:
        e = decode(r.value)
        key_partition[e.key] = r.partition
        if e.event_id in first:
            assert first[e.event_id] == r.value, "a re-emitted record differs from the first emission"
            continue
        first[e.event_id] = r.value  # type: ignore[assignment]
        by_partition.setdefault(r.partition, []).append(r.value)  # type: ignore[arg-type]
    want: dict[int, list[bytes]] = {}
    from events import encode

    for e in expected.outputs:
        want.setdefault(key_partition[e.key], []).append(encode(e))
    assert {p: len(v) for p, v in by_partition.items()} == {p: len(v) for p, v in want.items()}
    assert by_partition == want
    return Outcome(expected, outputs)


# -- tests -----------------------------------------------------------------------------------------
def test_publish_announce_unannounce_emit_visibility_changes_in_order(
    kafka_bootstrap: str, topics: Topics, tmp_path: Path
) -> None:
    v1, v2 = seg("wiki", 0, "v1"), seg("wiki", 0, "v2")
    sent = [
        env(SegmentsPublished(task_id="t1", segments=(v1,)), "e1", "wiki"),
        env(SegmentAnnounced(server="h1", segment=v1), "e2", "wiki"),
        env(SegmentsPublished(task_id="t2", segments=(v2,)), "e3", "wiki"),
        env(SegmentAnnounced(server="h2", segment=v2), "e4", "wiki"),
        env(SegmentUnannounced(server="h2", segment_id=str(v2.id)), "e5", "wiki"),
        env(SegmentAnnounced(server="h2", segment=v2), "e4", "wiki"),  # a duplicate: dropped by id
        env(SegmentsMarkedUnused(segment_ids=(str(v2.id),), reason="test"), "e6", "wiki"),
    ]
    producer = EventProducer(kafka_bootstrap, topics)
    for e in sent:
        producer.send(e)
    producer.flush()
    service = Service(kafka_bootstrap, topics, tmp_path / "state", tmp_path / "run.log")
    service.start()
    try:
        wait_for_outputs(kafka_bootstrap, topics, 8, service)
    finally:
        assert service.stop() == 0
    got = [decode(r.value) for r in read_all(kafka_bootstrap, topics.name(TIMELINE))]
    a, b = str(v1.id), str(v2.id)
    assert [(e.event.segment_id, e.event.from_state, e.event.to_state, e.causation_id)  # type: ignore[attr-defined]
            for e in got] == [
        (a, "absent", "offline", "e1"),
        (a, "offline", "visible", "e2"),
        (b, "absent", "offline", "e3"),
        (a, "visible", "overshadowed", "e4"),
        (b, "offline", "visible", "e4"),
        (a, "overshadowed", "visible", "e5"),
        (b, "visible", "offline", "e5"),
        (b, "offline", "absent", "e6"),
    ]
    assert all(e.key == "wiki" and e.occurred_at == T0 for e in got)
    segments_topic = topics.name(SEGMENTS)
    assert got[0].event_id == derived_event_id(segments_topic, 0, 0, 0)
    assert [e.event_id for e in got[3:5]] == [derived_event_id(segments_topic, 0, 3, i) for i in (0, 1)]
    check_agent_equals_fold(kafka_bootstrap, topics, tmp_path / "state")


BAD: list[tuple[bytes | None, str]] = [
    (b"not json at all", "not UTF-8 JSON"),
    (b'{"event_type": "segment_announced"}', "schema_version"),
    (None, "tombstone"),
    (b'{"event_type":"nope","schema_version":1,"event_id":"x","occurred_at":"2026-01-01","key":"k","payload":{}}',
     "unknown event type"),
    (b'{"event_type":"segment_unannounced","schema_version":1,"event_id":"x","occurred_at":"2026-01-01",'
     b'"key":"k","causation_id":null,"payload":{"server":"h1"}}', "payload.segmentId"),
    (b'{"event_type":"segment_unannounced","schema_version":1,"event_id":"y","occurred_at":"2026-01-01",'
     b'"key":"k","causation_id":null,"payload":{"server":"h1","segmentId":"no-such-segment"}}', "payload.segmentId"),
    (b'{"event_type":"server_left","schema_version":1,"event_id":"z","occurred_at":"2026-01-01",'
     b'"key":"h1","causation_id":null,"payload":{"server":"h1"}}', "not 'segments'"),
]


def test_bad_payloads_go_to_deadletter_and_every_valid_event_is_applied(
    kafka_bootstrap: str, topics: Topics, tmp_path: Path
) -> None:
    producer = EventProducer(kafka_bootstrap, topics)
    segments_topic = topics.name(SEGMENTS)
    n_bad = 0
    for i in range(40):
        s = seg(f"ds{i % 3}", i // 3, "v1", 0)
        producer.send(env(SegmentsPublished(task_id=f"t{i}", segments=(s,)), f"p{i}", s.data_source))
        producer.send(env(SegmentAnnounced(server="h1", segment=s), f"a{i}", s.data_source))
        raw, _ = BAD[i % len(BAD)]
        producer.send_raw(segments_topic, b"bad-key", raw)
        n_bad += 1
    producer.flush()
    expected = pure_fold(read_all(kafka_bootstrap, segments_topic))
    assert len(expected.bad_offsets) == n_bad and len(expected.outputs) == 80

    service = Service(kafka_bootstrap, topics, tmp_path / "state", tmp_path / "run.log")
    service.start()
    try:
        wait_for_outputs(kafka_bootstrap, topics, 80, service)
        deadline = time.monotonic() + 30
        while count_distinct_ids(kafka_bootstrap, topics.name(DEADLETTER)) < n_bad and time.monotonic() < deadline:
            time.sleep(0.5)
    finally:
        assert service.stop() == 0
    check_agent_equals_fold(kafka_bootstrap, topics, tmp_path / "state")
    letters = [decode(r.value) for r in read_all(kafka_bootstrap, topics.name(DEADLETTER))]
    by_offset = {e.event.offset: e.event for e in letters}  # type: ignore[attr-defined]
    assert len(by_offset) == n_bad
    for partition, offset in expected.bad_offsets:
        letter = by_offset[offset]
        assert isinstance(letter, DeadLettered) and letter.topic == segments_topic and letter.partition == partition
        raw, part = BAD[(offset // 3) % len(BAD)]
        assert part in letter.reason
        assert (None if letter.original_value is None else base64.b64decode(letter.original_value)) == raw


def segment_stream(rng: random.Random, n: int, resend_within: int | None = None) -> list[Envelope[Event]]:
    """A seeded stream of ``n`` segments events over 6 data sources: publishes (some with core partitions),
    announces, unannounces, marks unused, and about 1% re-sent duplicates (same event id), each of any earlier
    event or, with ``resend_within``, of one of the last ``resend_within`` events (a worker with a bounded
    applied-id window drops only duplicates within its window)."""
    out: list[Envelope[Event]] = []
    published: list[SegmentDescriptor] = []
    announced: list[tuple[str, SegmentDescriptor]] = []
    servers = [f"h{i}" for i in range(5)]
    for i in range(n):
        at = T0 + i * 10
        roll = rng.random()
        if out and roll < 0.01:
            low = 0 if resend_within is None else max(0, len(out) - resend_within)
            out.append(out[rng.randrange(len(out))] if low == 0 else out[rng.randrange(low, len(out))])
            continue
        if roll < 0.25 or not published:
            ds, day, version = f"ds{rng.randrange(6)}", rng.randrange(40), f"v{rng.randrange(1, 5)}"
            core = rng.choice((0, 0, 2))
            segs = tuple(seg(ds, day, version, p, core) for p in range(core or 1))
            published.extend(segs)
            ev: Event = SegmentsPublished(task_id=f"task{i}", segments=segs)
            key = ds
        elif roll < 0.65:
            s = rng.choice(published)
            server = rng.choice(servers)
            announced.append((server, s))
            ev, key = SegmentAnnounced(server=server, segment=s), s.data_source
        elif roll < 0.9 and announced:
            server, s = announced.pop(rng.randrange(len(announced)))
            ev, key = SegmentUnannounced(server=server, segment_id=str(s.id)), s.data_source
        else:
            s = rng.choice(published)
            ev, key = SegmentsMarkedUnused(segment_ids=(str(s.id),), reason="overshadowed"), s.data_source
        out.append(env(ev, f"ev{i:06d}", key, at))
    return out


def test_crash_recovery_sigkill_at_20_points_equals_pure_fold(kafka_bootstrap: str, tmp_path: Path) -> None:
    topics = Topics(f"t{uuid.uuid4().hex[:10]}.")
    create_topics(kafka_bootstrap, topics, partitions=3)
    rng = random.Random(20261121)
    events = segment_stream(rng, 50_000)
    pauses = [rng.uniform(0.8, 3.5) for _ in range(20)]
    chunks = [events[i:i + 250] for i in range(0, len(events), 250)]
    producer = EventProducer(kafka_bootstrap, topics)

    def send(chunk: list[Envelope[Event]]) -> None:
        for e in chunk:
            producer.send(e)
        producer.flush()

    # each restart also loads its state before its pause starts: about 1.5 s more per kill
    flow = Flow(chunks, send, seconds=sum(pauses) + 20 * 1.5, reserve=25)
    service = Service(kafka_bootstrap, topics, tmp_path / "state", tmp_path / "run.log")
    flow.start()
    kills_while_flowing = 0
    try:
        kills_while_flowing = kill_and_restart(service, pauses, flow,
                                               group_progress(kafka_bootstrap, topics, topics.name(SEGMENTS)))
        flow.join()
        expected = pure_fold(read_all(kafka_bootstrap, topics.name(SEGMENTS)))
        wait_for_outputs(kafka_bootstrap, topics, len(expected.outputs), service, timeout=120)
    finally:
        flow.join()
        if service.alive():
            assert service.stop() == 0
    assert kills_while_flowing == 20
    outcome = check_agent_equals_fold(kafka_bootstrap, topics, tmp_path / "state")
    assert len(outcome.expected.outputs) > 10_000
    # every restart resumed from the store, and the kills hit the agent at different points of the stream
    resumes = [line.split(" resumes at ", 1)[1] for line in service.log.read_text().splitlines()
               if " resumes at " in line]
    assert len(resumes) == 21 and resumes[0] == "the beginning"
    assert len(set(resumes)) >= 10, resumes  # a kill during start-up resumes where the previous one did
    print(f"resume points: {resumes}")
    print(f"{len(events)} events, {len(outcome.expected.outputs)} visibility changes, "
          f"{len(outcome.outputs) - len(outcome.expected.outputs)} re-emitted duplicates dropped by id")
