"""The lockbox agent of ``segcoord run`` on the real broker, driven by :class:`TaskClient` and ``segcoord task``.

The service always runs as a user runs it, a ``segcoord run`` subprocess. The
crash test's oracle is a pure fold written here (decode, drop seen ids,
``Lockbox.handle``, derived ids): the agent's applied request ids, its lockbox
restored from snapshot + tail, and its output deduplicated by event id, must
equal it whatever happened to the process in between; its restarts resume from
snapshots.
"""

from __future__ import annotations

import random
import subprocess
import threading
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

import orjson
import pytest

from coordinator.locks.lockbox import Lockbox
from coordinator.locks.seal import seal_publish
from coordinator.locks.snapshot import encode_snapshot
from events import Envelope, Event, Interval, SegmentDescriptor, Topics, decode, encode
from events.ids import derived_event_id
from events.locks import LockGranted, LockWaiting, PublishAccepted, SegmentAllocated, SegmentsImported
from events.schema import EventValidationError, Instant
from events.segments import SegmentsPublished
from events.tasks import LockRequested, PublishRequested, SegmentAllocationRequested, TaskFinished, TaskStarted
from events.topics import DEADLETTER, LOCK_REQUESTS, LOCKS, SEGMENTS, TIMELINE
from events.visibility import SegmentVisibilityChanged
from streaming.admin import create_topics
from streaming.credentials import publish_key
from streaming.producer import EventProducer
from streaming.service.lockbox_agent import (
    FORMAT_VERSION,
    SNAPSHOT_EVERY_ENV,
    STORE_NAME,
    applied_requests,
    load_lockbox,
    tail_requests,
)
from streaming.service.state import AgentStateStore
from streaming.task_client import RequestRefused, TaskClient, TaskClientError
from tests.integration.test_service_timeline import (
    SEGCOORD,
    T0,
    Flow,
    Raw,
    Service,
    group_progress,
    kill_and_restart,
    read_all,
    wait_for,
)

pytestmark = pytest.mark.integration
DAY = 86_400_000


def day(d: int) -> Interval:
    return Interval(T0 + d * DAY, T0 + (d + 1) * DAY)



def decoded(bootstrap: str, topics: Topics, name: str) -> list[Envelope[Event]]:
    return [decode(r.value) for r in read_all(bootstrap, topics.name(name))]


# -- end to end with clients -------------------------------------------------------------------------
def test_lock_allocate_publish_becomes_segments_published_and_visibility(
    kafka_bootstrap: str, topics: Topics, tmp_path: Path
) -> None:
    service = Service(kafka_bootstrap, topics, tmp_path / "state", tmp_path / "run.log")
    service.start()
    try:
        with TaskClient(kafka_bootstrap, topics, "index_wiki_1", "g1", "index_kafka", "wiki") as task:
            started = task.start()
            assert started.answer.causation_id == started.request.event_id
            granted = task.lock(day(0))
            assert isinstance(granted.event, LockGranted) and granted.event.lock.lock_id == "wiki#0"
            alloc = task.allocate(T0 + 3_600_000, "seq-0", interval=day(0))
            assert isinstance(alloc.event, SegmentAllocated)
            segment = alloc.event.segment
            assert segment.version == granted.event.lock.version
            pub = task.publish([segment], end_metadata={"offset": 42})
            assert isinstance(pub.event, PublishAccepted)
            finished = task.finish()
            assert {type(e.event).__name__ for e in finished.seen} == {"TaskDeregistered"}

        # the accepted publish is on `segments`, caused by the publish request, with the next derived index
        published = [e for e in decoded(kafka_bootstrap, topics, SEGMENTS) if isinstance(e.event, SegmentsPublished)]
        assert len(published) == 1
        sp = published[0]
        assert sp.causation_id == pub.request.event_id and sp.key == "wiki"
        assert sp.event.segments == (segment,) and sp.event.end_metadata == {"offset": 42}  # type: ignore[attr-defined]
        assert sp.event_id == derived_event_id(topics.name(LOCK_REQUESTS), 0, 3, 1)  # 4th request, 1 decision
        assert pub.answer.event_id == derived_event_id(topics.name(LOCK_REQUESTS), 0, 3, 0)

        # ... and the timeline agent turns it into a visibility change caused by it
        def changes() -> list[Envelope[Event]]:
            return decoded(kafka_bootstrap, topics, TIMELINE)

        got = wait_for("visibility change", changes, service)
        vis = got[0].event
        assert isinstance(vis, SegmentVisibilityChanged)
        assert (vis.segment_id, vis.from_state, vis.to_state, got[0].causation_id) == (
            str(segment.id), "absent", "offline", sp.event_id)

        # the CLI prints the decisions as JSON lines; a refusal exits 1 with one line on stderr
        base = ["--bootstrap", kafka_bootstrap, "--topic-prefix", topics.prefix, "--task-id", "cli_1",
                "--datasource", "wiki", "--timeout", "30"]
        out = subprocess.run([SEGCOORD, "task", "start", *base], capture_output=True, text=True, timeout=60)
        assert out.returncode == 0, out.stderr
        assert [orjson.loads(line)["event_type"] for line in out.stdout.splitlines()] == ["task_registered"]
        out = subprocess.run([SEGCOORD, "task", "lock", *base, "--interval", day(1).iso()],
                             capture_output=True, text=True, timeout=60)
        assert out.returncode == 0, out.stderr
        line = orjson.loads(out.stdout.splitlines()[-1])
        assert line["event_type"] == "lock_granted" and line["payload"]["lock"]["lockId"] == "wiki#1"
        out = subprocess.run([SEGCOORD, "task", "publish", *base, "--segment", orjson.dumps(
            {"dataSource": "wiki", "interval": day(5).iso(), "version": "v1", "partitionId": 0, "size": 1}).decode()],
            capture_output=True, text=True, timeout=60)
        assert out.returncode == 1
        assert orjson.loads(out.stdout.splitlines()[-1])["event_type"] == "publish_rejected"
        assert out.stderr.count("\n") == 1 and "not covered by a lock" in out.stderr
    finally:
        assert service.stop() == 0


def test_higher_priority_revokes_lower_and_revoked_publish_is_rejected_waiters_are_granted(
    kafka_bootstrap: str, topics: Topics, tmp_path: Path
) -> None:
    service = Service(kafka_bootstrap, topics, tmp_path / "state", tmp_path / "run.log")
    service.start()
    clients = [TaskClient(kafka_bootstrap, topics, f"t_{name}", f"g_{name}", "index", "wiki", priority)
               for name, priority in (("low", 10), ("high", 90), ("peer", 90))]
    low, high, peer = clients
    try:
        for c in clients:
            c.start()
        low_lock = low.lock(day(0)).event.lock  # type: ignore[attr-defined]
        seg = low.allocate(T0 + 1000, "low-seq", interval=day(0)).event.segment  # type: ignore[attr-defined]
        granted = high.lock(day(0))
        assert isinstance(granted.event, LockGranted) and granted.event.revoked_lock_ids == (low_lock.lock_id,)
        assert [type(e.event).__name__ for e in granted.seen] == ["LockRevoked", "LockGranted"]
        with pytest.raises(RequestRefused) as refused:
            low.publish([seg])
        assert "revoked" in refused.value.reason and refused.value.decision.event.event_type == "publish_rejected"
        # the low task saw its lock revoked while waiting for the publish answer
        assert low_lock.lock_id in low.revoked

        # an equal priority waits; the holder's finish grants it (the client waits through LockWaiting)
        result: dict[str, object] = {}

        def wait_for_lock() -> None:
            result["decision"] = peer.lock(day(0), timeout=30)

        waiter = threading.Thread(target=wait_for_lock)
        waiter.start()
        time.sleep(1.5)
        assert waiter.is_alive()
        high.finish()
        waiter.join(35)
        decision = result["decision"]
        assert [type(e.event).__name__ for e in decision.seen] == ["LockWaiting", "LockGranted"]  # type: ignore[attr-defined]
        assert isinstance(decision.seen[0].event, LockWaiting)  # type: ignore[attr-defined]
        assert decision.answer.causation_id != decision.request.event_id  # type: ignore[attr-defined]
    finally:
        for c in clients:
            c.close()
        assert service.stop() == 0


def test_client_timeout_names_the_request_and_what_it_awaited(kafka_bootstrap: str, topics: Topics) -> None:
    # no service runs: nothing answers
    with TaskClient(kafka_bootstrap, topics, "lonely", "g", "index", "wiki", timeout=1.5) as task:
        started = time.monotonic()
        with pytest.raises(TaskClientError) as err:
            task.lock(day(0))
        assert 1.4 < time.monotonic() - started < 5
    message = str(err.value)
    assert not isinstance(err.value, RequestRefused)
    assert "timeout after 1.5s waiting for LockGranted or LockDenied" in message
    assert "lock_requested" in message and "of task lonely" in message and "nothing seen" in message
    sent = decoded(kafka_bootstrap, topics, LOCK_REQUESTS)
    assert len(sent) == 1 and sent[0].event.request_id in message and sent[0].event_id in message  # type: ignore[attr-defined]


# -- crash recovery ----------------------------------------------------------------------------------
def request_stream(rng: random.Random, n_tasks: int) -> list[Envelope[Event] | bytes]:
    """A seeded interleaving of ``n_tasks`` task lifecycles (start, lock, allocate, publish, finish) over 4 data
    sources and 6 days, priorities that revoke, ~1% re-sent duplicates and ~1% malformed records. A lockbox run
    alongside picks what each task publishes (its allocated segment, or an uncovered one that is rejected)."""
    box = Lockbox()
    out: list[Envelope[Event] | bytes] = []
    sent: list[Envelope[Event]] = []
    allocated: dict[str, SegmentDescriptor] = {}
    pending = list(range(n_tasks))
    stage: dict[int, int] = {}
    active: list[int] = []

    def add(event: Event, key: str) -> None:
        env = Envelope(event, f"rq{len(out):06d}", Instant(T0 + len(out) * 10), key)
        out.append(env)
        sent.append(env)
        for d in box.handle(env):
            if isinstance(d, SegmentAllocated):
                allocated[d.task_id] = d.segment

    while pending or active:
        roll = rng.random()
        if sent and roll < 0.01:
            out.append(rng.choice(sent))
            continue
        if roll < 0.02:
            out.append(rng.choice([b"not json", b'{"event_type": "lock_requested"}', b'{"event_type":"x"}']))
            continue
        if pending and (len(active) < 6 or not active):
            active.append(pending.pop(0))
        i = rng.choice(active)
        ds, d, tid = f"ds{i % 4}", rng.randrange(6), f"task{i}"
        s = stage.get(i, 0)
        stage[i] = s + 1
        if s == 0:
            add(TaskStarted(task_id=tid, group_id=f"g{i}", task_type="index", data_source=ds,
                            priority=rng.choice((None, 10, 90))), ds)
        elif s == 1:
            add(LockRequested(request_id=f"r{i}l", task_id=tid, group_id=f"g{i}", task_type="index",
                              data_source=ds, interval=day(d), granularity="timeChunk",
                              lock_type=rng.choice(("exclusive", "exclusive", "shared"))), ds)
        elif s == 2:
            add(SegmentAllocationRequested(request_id=f"r{i}a", task_id=tid, data_source=ds,
                                           timestamp=Instant(T0 + d * DAY + 5), sequence_name=f"seq{i}",
                                           lock_granularity="timeChunk", lock_type="exclusive", interval=day(d)), ds)
        elif s == 3:
            seg = allocated.get(tid) or SegmentDescriptor(ds, day(d), "v0", 0, 10)
            add(PublishRequested(request_id=f"r{i}p", task_id=tid, segments=(seg,)), ds)
        else:
            add(TaskFinished(task_id=tid, status="success"), ds)
            active.remove(i)
    return out


@dataclass(frozen=True, slots=True)
class Expected:
    box: Lockbox
    applied: list[str]  # request event ids in applied order
    locks: list[bytes]  # encoded outputs on `locks`, in order
    segments: list[bytes]  # encoded SegmentsPublished, in order
    bad: int


def pure_fold(records: list[Raw]) -> Expected:
    box = Lockbox()
    seen: set[str] = set()
    applied: list[str] = []
    locks: list[bytes] = []
    segments: list[bytes] = []
    bad = 0
    for r in records:
        try:
            e = decode(r.value)
            if e.event.event_topic != LOCK_REQUESTS:
                raise EventValidationError("event_type", e.event_type, "not a lock-requests event")
        except EventValidationError:
            bad += 1
            continue
        if e.event_id in seen:
            continue
        seen.add(e.event_id)
        applied.append(e.event_id)
        decisions = box.handle(e)
        for i, d in enumerate(decisions):
            locks.append(encode(Envelope(d, derived_event_id(r.topic, r.partition, r.offset, i), e.occurred_at,
                                         e.key, e.event_id)))
        accepted = [(i, d) for i, d in enumerate(decisions) if isinstance(d, PublishAccepted)
                    or (isinstance(d, SegmentsImported) and not d.already_imported)]
        for j, (i, d) in enumerate(accepted):  # each sealed, naming its decision (coordinator/locks/seal.py)
            if isinstance(d, SegmentsImported):
                sp = SegmentsPublished(task_id=f"import:{d.request_id}", segments=d.segments)
            else:
                assert isinstance(d, PublishAccepted)
                sp = SegmentsPublished(task_id=d.task_id, segments=d.segments, start_metadata=d.start_metadata,
                                       end_metadata=d.end_metadata)
            unsealed = Envelope(sp, derived_event_id(r.topic, r.partition, r.offset, len(decisions) + j),
                                e.occurred_at, d.segments[0].data_source, e.event_id)
            decision_id = derived_event_id(r.topic, r.partition, r.offset, i)
            segments.append(encode(seal_publish(unsealed, decision_id, publish_key())))
    return Expected(box, applied, locks, segments, bad)


def dedup(records: list[Raw], keep: type | None = None) -> list[bytes]:
    """First emission of every event id, in log order; every re-emission must be byte-identical."""
    first: dict[str, bytes] = {}
    for r in records:
        e = decode(r.value)
        if keep is not None and not isinstance(e.event, keep):
            continue
        assert first.setdefault(e.event_id, r.value) == r.value, "a re-emitted record differs"  # type: ignore[arg-type]
    return list(first.values())


def test_kill_9_restarts_mid_stream_lose_and_duplicate_nothing(kafka_bootstrap: str, tmp_path: Path,
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    """Every restart after the first resumes from a snapshot (taken every 100 requests) plus its tail."""
    every = 100
    monkeypatch.setenv(SNAPSHOT_EVERY_ENV, str(every))  # the service subprocess inherits it
    topics = Topics(f"t{uuid.uuid4().hex[:10]}.")
    create_topics(kafka_bootstrap, topics, partitions=1)
    rng = random.Random(7)
    stream = request_stream(rng, 700)
    assert len(stream) > 3000
    chunks = [stream[i:i + 100] for i in range(0, len(stream), 100)]
    pauses = [rng.uniform(3.0, 5.0) for _ in range(3)]
    request_topic = topics.name(LOCK_REQUESTS)
    producer = EventProducer(kafka_bootstrap, topics)

    def send(chunk: list[Envelope[Event] | bytes]) -> None:
        for item in chunk:
            if isinstance(item, bytes):
                producer.send_raw(request_topic, b"bad", item)
            else:
                producer.send(item)
        producer.flush()

    flow = Flow(chunks, send, seconds=sum(pauses) + 3 * 1.5 + 3.0, reserve=5)
    service = Service(kafka_bootstrap, topics, tmp_path / "state", tmp_path / "run.log")
    flow.start()
    kills_while_flowing = 0
    try:
        kills_while_flowing = kill_and_restart(service, pauses, flow,
                                               group_progress(kafka_bootstrap, topics, request_topic))
        flow.join()
        expected = pure_fold(read_all(kafka_bootstrap, request_topic))
        wait_for("all decisions", lambda: len(dedup(read_all(kafka_bootstrap, topics.name(LOCKS))))
                   >= len(expected.locks), service, timeout=60)
        wait_for("all dead letters", lambda: len(dedup(read_all(kafka_bootstrap, topics.name(DEADLETTER))))
                   >= expected.bad, service, timeout=30)
    finally:
        flow.join()
        if service.alive():
            assert service.stop() == 0
    assert kills_while_flowing == 3
    assert dedup(read_all(kafka_bootstrap, topics.name(LOCKS))) == expected.locks
    assert dedup(read_all(kafka_bootstrap, topics.name(SEGMENTS)), SegmentsPublished) == expected.segments
    assert len(dedup(read_all(kafka_bootstrap, topics.name(DEADLETTER)))) == expected.bad
    with AgentStateStore(tmp_path / "state" / STORE_NAME, FORMAT_VERSION) as store:
        assert [a.event_id for a in applied_requests(store)] == expected.applied
        restored = load_lockbox(store)
        assert restored.next_seq == len(expected.applied)
        assert restored.snapshot_seq > 0 and restored.tail == len(tail_requests(store)) < every
        # the whole state, waiting requests and every order included, equals the pure fold's
        assert encode_snapshot(restored.lockbox) == encode_snapshot(expected.box)
        assert restored.lockbox.persistent() == expected.box.persistent()
        ends = {(r.topic, r.partition): r.offset + 1 for r in read_all(kafka_bootstrap, request_topic)}
        assert store.offsets() == ends
    kinds = {decode(b).event_type for b in expected.locks}
    assert {"lock_granted", "lock_revoked", "lock_waiting", "publish_accepted", "publish_rejected"} <= kinds
    resumes = [line for line in service.log.read_text().splitlines() if line.startswith("lockbox agent:")]
    assert len(resumes) == 4
    # "lockbox agent: <n> requests restored, ...": n >= every means a snapshot was there (the tail is shorter)
    restored_counts = [int(line.split()[2]) for line in resumes]
    assert restored_counts[0] == 0 and all(n >= every for n in restored_counts[1:]), resumes
    print(f"{len(stream)} requests, {len(expected.locks)} decisions, {len(expected.segments)} publishes, "
          f"{expected.bad} dead letters; restarts: {resumes[1:]}")
