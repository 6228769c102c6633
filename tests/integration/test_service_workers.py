"""Three ``segcoord run`` workers in one group, SIGKILLed at random points: nothing lost, nothing doubled.

Three workers (same topics and group, their own ``--state-dir`` and ``--worker-id``) split the 3 partitions of
``segments`` and ``lock-requests``; the planner runs on the one that holds the election partition. Three
simulated historicals serve ``hot``; rules ask two replicas of every ``wiki`` segment there; balancing is off
(``maxSegmentsToMove`` 0) so no decision asks for a copy twice. A seeded stream flows: timeline events over six
data sources (``SEGCOORD_WORKERS_EVENTS`` of them: 5000 here, 50k in ``make soak``), task lifecycles on
``lock-requests`` and ``wiki`` publishes. While it flows, a worker that is NOT the planner's owner is SIGKILLed
and restarted, then the planner's owner is (each at a seeded random point).

At the end:

- the deduplicated ``timeline`` output equals a pure fold of ``segments`` (every re-emission byte-identical);
- the deduplicated ``locks`` equal a pure fold of ``lock-requests``;
- every (server, segment) load on ``commands`` carries ONE id;
- commands came from one planner at a time: each carries its planner's ``<worker>@<epoch>`` header, and along
  every partition of ``commands`` the epochs never go down;
- placement converges: every ``wiki`` segment is announced by two servers and every command is answered;
- ``segcoord audit`` finds nothing (its lock and decision rules aside: the test seals its stream's publishes).
"""

from __future__ import annotations

import itertools
import os
import random
import time
import uuid
from pathlib import Path

import pytest
from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

from events import Interval, SegmentDescriptor, Topics, decode
from events.cluster import DynamicConfigSet, RulesSet
from events.commands import LoadSegment
from events.topics import COMMANDS, LOCK_REQUESTS, LOCKS, SEGMENTS, TIMELINE
from streaming.admin import create_topics
from streaming.offsets import watermarks
from streaming.producer import EventProducer
from streaming.replay import audit
from streaming.service.election import HEADER
from streaming.service.state import AgentStateStore
from streaming.service.timeline_agent import FORMAT_VERSION, STORE_NAME
from tests.accepted import import_request
from tests.integration.processes import SEGCOORD, SegcoordProcess, kill_alive, wait_for
from tests.integration.test_service_lockbox import dedup, request_stream
from tests.integration.test_service_lockbox import pure_fold as lockbox_fold
from tests.integration.test_service_planner import Historicals, send
from tests.integration.test_service_planner_crash import announced, answers_log, commands_log, unanswered
from tests.integration.test_service_timeline import T0, pure_fold, read_all, segment_stream

pytestmark = pytest.mark.integration

EVENTS = int(os.environ.get("SEGCOORD_WORKERS_EVENTS", "5000"))
DAY = 86_400_000
SERVERS = ["hw1", "hw2", "hw3"]  # not the h0..h4 the timeline stream announces from
REPLICAS = 2
# the timeline stream's publishes are sealed in the test as the lockbox would (tests.accepted), by no task and under
# decisions the running lockbox never wrote on locks: the audit's rules about them are left out
IN_TEST_PUBLISHES = ("publish without a live lock", "publish without its lockbox decision")


class Worker(SegcoordProcess):
    """One ``segcoord run`` worker as a subprocess, with its own state folder, id and log."""

    stop_timeout = 90.0

    def __init__(self, bootstrap: str, topics: Topics, home: Path, worker_id: str, *extra: str) -> None:
        super().__init__([SEGCOORD, "run", "--bootstrap", bootstrap, "--topic-prefix", topics.prefix,
                          "--state-dir", str(home / worker_id), "--worker-id", worker_id, "--plan-every", "1",
                          *extra], home / f"{worker_id}.log")
        self.worker_id = self.name = worker_id

    def leads(self) -> bool:
        """Alive, and its log's last election line says it leads."""
        if not self.alive():
            return False
        lines = [ln for ln in self.log.read_text().splitlines() if "planner election: this worker" in ln]
        return bool(lines) and "leads from epoch" in lines[-1]


def wiki(d: int) -> SegmentDescriptor:
    return SegmentDescriptor("wiki", Interval(T0 + d * DAY, T0 + (d + 1) * DAY), "v1", 0, 1000)


def command_epochs(bootstrap: str, topics: Topics) -> dict[int, list[tuple[str, int]]]:
    """Partition -> (worker, epoch) of every command in offset order, from the planner header."""
    name = topics.name(COMMANDS)
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"r-{uuid.uuid4().hex}", "enable.auto.commit": False})
    try:
        parts = sorted(c.list_topics(name, timeout=10).topics[name].partitions)
        ends = {p: watermarks(c, TopicPartition(name, p), timeout=10)[1] for p in parts}
        c.assign([TopicPartition(name, p, OFFSET_BEGINNING) for p in parts if ends[p] > 0])
        out: dict[int, list[tuple[str, int]]] = {p: [] for p in parts}
        deadline = time.monotonic() + 30
        while sum(len(v) for v in out.values()) < sum(ends.values()) and time.monotonic() < deadline:
            for m in c.consume(5000, 0.5):
                if m.error() is not None:
                    continue
                header = dict(m.headers() or []).get(HEADER)
                assert header is not None, f"a command without the planner header at {m.partition()}@{m.offset()}"
                worker, _, epoch = header.decode().rpartition("@")
                out[m.partition()].append((worker, int(epoch)))
        return out
    finally:
        c.close()


def test_three_workers_sigkilled_at_random_points_lose_and_double_nothing(kafka_bootstrap: str,
                                                                          tmp_path: Path) -> None:
    topics = Topics(f"t{uuid.uuid4().hex[:10]}.")
    create_topics(kafka_bootstrap, topics, partitions=3)
    rng = random.Random(20261125)
    timeline_events = segment_stream(rng, EVENTS)
    requests = request_stream(rng, max(50, EVENTS // 50))
    wiki_segments = [wiki(d) for d in range(30)]
    chunks = 40
    step = -(-len(timeline_events) // chunks)
    tl_chunks = [timeline_events[i:i + step] for i in range(0, len(timeline_events), step)]
    rq_step = -(-len(requests) // chunks)
    rq_chunks = [requests[i:i + rq_step] for i in range(0, len(requests), rq_step)]
    kill_at = sorted(rng.sample(range(8, chunks - 8), 2))  # chunk indices: a non-planner, then the planner owner

    send(kafka_bootstrap, topics, DynamicConfigSet(config={"smartSegmentLoading": False, "maxSegmentsToMove": 0}),
         "config")
    send(kafka_bootstrap, topics, RulesSet(data_source="wiki", rules=(
        {"type": "loadForever", "tieredReplicants": {"hot": REPLICAS}},)), "rules/wiki")
    workers = [Worker(kafka_bootstrap, topics, tmp_path, f"w{i}") for i in range(1, 4)]
    killed: list[str] = []
    try:
        with Historicals(kafka_bootstrap, topics, SERVERS, max_size=1_000_000):
            for w in workers:
                w.start()
            wait_for("an elected planner", lambda: sum(w.leads() for w in workers) == 1, workers, 120)
            wait_for("every worker in the group", lambda: all(
                "resumes at" in w.log.read_text() for w in workers), workers, 120)
            producer = EventProducer(kafka_bootstrap, topics)
            kills = iter(kill_at)
            next_kill = next(kills)
            for i in range(chunks):
                for item in tl_chunks[i] if i < len(tl_chunks) else ():
                    producer.send(item)
                for item in rq_chunks[i] if i < len(rq_chunks) else ():
                    if isinstance(item, bytes):
                        producer.send_raw(topics.name(LOCK_REQUESTS), b"bad", item)
                    else:
                        producer.send(item)
                producer.flush(60)
                if i < len(wiki_segments):
                    # through the lockbox (an import): only its sealed publishes change what is used
                    send(kafka_bootstrap, topics, import_request((wiki_segments[i],), f"wiki{i}"), "wiki")
                time.sleep(rng.uniform(0.1, 0.4))  # pacing of the stream, not a wait for an outcome
                if i == next_kill:
                    owner = [w for w in workers if w.leads()]
                    others = [w for w in workers if w.alive() and w not in owner]
                    victim = rng.choice(others) if not killed else owner[0] if owner else rng.choice(others)
                    killed.append(f"{victim.worker_id}{' (planner)' if victim in owner else ''} at chunk {i}")
                    victim.kill()
                    victim.start()
                    next_kill = next(kills, -1)
            producer.close()

            expected = pure_fold(read_all(kafka_bootstrap, topics.name(SEGMENTS)))
            expected_locks = lockbox_fold(read_all(kafka_bootstrap, topics.name(LOCK_REQUESTS)))
            want = {str(s.id) for s in wiki_segments}

            def converged() -> bool:
                commands, answers = commands_log(kafka_bootstrap, topics), answers_log(kafka_bootstrap, topics)
                placed = announced(answers)
                return set(placed) >= want and all(len(placed[s] & set(SERVERS)) == REPLICAS for s in want) \
                    and not unanswered(commands, answers)

            wait_for("placement to converge", converged, workers, 300)
            # the historicals' last announces are on segments too: the fold is taken once placement converged
            expected = pure_fold(read_all(kafka_bootstrap, topics.name(SEGMENTS)))
            wait_for("every visibility change", lambda: len({decode(r.value).event_id for r in read_all(
                kafka_bootstrap, topics.name(TIMELINE))}) >= len(expected.outputs), workers, 300)
            wait_for("every lock decision", lambda: len(dedup(read_all(kafka_bootstrap, topics.name(LOCKS))))
                       >= len(expected_locks.locks), workers, 120)
            for w in workers:
                assert w.stop() == 0, w.tail()
    finally:
        kill_alive(workers)
    print(f"{len(timeline_events)} timeline events, {len(requests)} lock requests; SIGKILLed: {', '.join(killed)}")
    assert len(killed) == 2 and "(planner)" in killed[1] and "(planner)" not in killed[0], killed

    # the deduplicated timeline output equals a pure fold (as a set of records: partitions interleave freely)
    first: dict[str, bytes] = {}
    for r in read_all(kafka_bootstrap, topics.name(TIMELINE)):
        e = decode(r.value)
        assert first.setdefault(e.event_id, r.value) == r.value, "a re-emitted visibility change differs"  # type: ignore[arg-type]
    from events import encode

    assert sorted(first.values()) == sorted(encode(e) for e in expected.outputs)
    assert sorted(dedup(read_all(kafka_bootstrap, topics.name(LOCKS)))) == sorted(expected_locks.locks)

    # one id per (server, segment) load
    commands, answers = commands_log(kafka_bootstrap, topics), answers_log(kafka_bootstrap, topics)
    ids: dict[tuple[str, str], set[str]] = {}
    for c in commands:
        if isinstance(c.event, LoadSegment):
            ids.setdefault((c.event.server, str(c.event.segment.id)), set()).add(c.event_id)
    assert ids and not {k: v for k, v in ids.items() if len(v) > 1}

    # one planner at a time: epochs never go down along a partition; more than one leadership happened
    epochs = command_epochs(kafka_bootstrap, topics)
    for partition, seq in epochs.items():
        assert all(a[1] <= b[1] for a, b in itertools.pairwise(seq)), (partition, seq)
    leaders = {e for seq in epochs.values() for e in seq}
    by_epoch: dict[int, set[str]] = {}
    for worker, epoch in leaders:
        by_epoch.setdefault(epoch, set()).add(worker)
    assert all(len(v) == 1 for v in by_epoch.values()), by_epoch
    assert len(by_epoch) >= 2, f"the planner never moved: {by_epoch}"

    placed = announced(answers)
    assert all(len(placed[s] & set(SERVERS)) == REPLICAS for s in {str(s.id) for s in wiki_segments})
    assert not unanswered(commands, answers)
    violations = [v for v in audit(kafka_bootstrap, topics, command_timeout_ms=0)
                  if v.rule not in IN_TEST_PUBLISHES]
    assert violations == [], violations[:10]
    print(f"{len(expected.outputs)} visibility changes (deduplicated, equal to the pure fold), "
          f"{len(expected_locks.locks)} lock decisions; {len(commands)} commands, {len(ids)} (server, segment) loads "
          f"under one id each; planners by epoch: {dict(sorted(by_epoch.items()))}; audit clean")
    # every worker applied a share of segments (the partitions were split), and for every partition some worker's
    # store reached its end
    ends = {(r.topic, r.partition): r.offset + 1 for r in read_all(kafka_bootstrap, topics.name(SEGMENTS))}
    reached: dict[tuple[str, int], int] = {}
    for w in workers:
        with AgentStateStore(tmp_path / w.worker_id / STORE_NAME, FORMAT_VERSION) as store:
            offsets = {tp: o for tp, o in store.offsets().items() if tp[0] == topics.name(SEGMENTS)}
        assert offsets, f"{w.worker_id} applied no partition of segments"
        for tp, o in offsets.items():
            reached[tp] = max(reached.get(tp, 0), o)
    assert reached == ends


def test_two_workers_with_the_same_id_the_second_refuses_to_start(kafka_bootstrap: str, tmp_path: Path) -> None:
    topics = Topics(f"t{uuid.uuid4().hex[:10]}.")
    create_topics(kafka_bootstrap, topics, partitions=3)
    first = Worker(kafka_bootstrap, topics, tmp_path, "same")
    second = Worker(kafka_bootstrap, topics, tmp_path / "other", "same")
    (tmp_path / "other").mkdir()
    first.start()
    try:
        wait_for("the first worker to lead", first.leads, [first], 120)
        second.start()
        assert second.proc is not None
        code = second.proc.wait(120)
        text = second.log.read_text()
        assert code != 0 and "another worker with id 'same' is running" in text, text[-2000:]
        assert first.alive()
        # the same state folder: RocksDB's lock, named as such
        third = Worker(kafka_bootstrap, topics, tmp_path, "same")
        third.log = tmp_path / "third.log"
        third.start()
        assert third.proc is not None
        code = third.proc.wait(120)
        text = third.log.read_text()
        assert code != 0 and "each worker needs its own" in text, text[-2000:]
    finally:
        if first.alive():
            assert first.stop() == 0


def claims(bootstrap: str, topics: Topics) -> list[str]:
    """The workers named by every claim written to the election topic, oldest first."""
    from streaming.service.election import Claim, election_topic

    name = election_topic(topics)
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"r-{uuid.uuid4().hex}", "enable.auto.commit": False})
    try:
        end = watermarks(c, TopicPartition(name, 0), timeout=10)[1]
        out: list[str] = []
        if end <= 0:
            return out
        c.assign([TopicPartition(name, 0, OFFSET_BEGINNING)])
        deadline = time.monotonic() + 30
        while len(out) < end and time.monotonic() < deadline:
            for m in c.consume(100, 0.5):
                if m.error() is None:
                    claim = Claim.decode(m.value(), m.offset())
                    out.append("?" if claim is None else claim.worker)
        return out
    finally:
        c.close()


def test_a_no_planner_worker_folds_the_timeline_and_never_leads_and_another_worker_plans(
        kafka_bootstrap: str, tmp_path: Path) -> None:
    """``segcoord run --no-planner``: alone, it folds ``segments`` into the timeline a pure fold predicts and never
    claims the planner's leadership (no claim on the election topic, nothing on ``commands``); once a second,
    ordinary worker joins, that one is elected and plans (wiki loads on ``commands`` under its header), and the
    --no-planner worker still never leads."""
    topics = Topics(f"t{uuid.uuid4().hex[:10]}.")
    create_topics(kafka_bootstrap, topics, partitions=2)
    events = segment_stream(random.Random(18), 600)
    bystander = Worker(kafka_bootstrap, topics, tmp_path, "bystander", "--no-planner")
    planner = Worker(kafka_bootstrap, topics, tmp_path, "planner")
    workers = [bystander, planner]
    send(kafka_bootstrap, topics, RulesSet(data_source="wiki", rules=(
        {"type": "loadForever", "tieredReplicants": {"hot": 1}},)), "rules/wiki")
    try:
        with Historicals(kafka_bootstrap, topics, SERVERS, max_size=1_000_000):
            bystander.start()
            wait_for("the --no-planner worker in the group", lambda: "resumes at" in bystander.log.read_text(),
                     [bystander], 120)
            producer = EventProducer(kafka_bootstrap, topics)
            for e in events:
                producer.send(e)
            producer.flush(60)
            send(kafka_bootstrap, topics, import_request((wiki(0),), "wiki0"), "wiki")
            expected = pure_fold(read_all(kafka_bootstrap, topics.name(SEGMENTS)))
            assert expected.outputs
            wait_for("the --no-planner worker's visibility changes", lambda: len({decode(r.value).event_id for r in
                     read_all(kafka_bootstrap, topics.name(TIMELINE))}) >= len(expected.outputs), [bystander], 180)
            text = bystander.log.read_text()
            assert "does not stand (--no-planner)" in text and "leads from epoch" not in text, text[-2000:]
            assert claims(kafka_bootstrap, topics) == []
            assert commands_log(kafka_bootstrap, topics) == []  # nobody plans: the wiki segment waits

            planner.start()
            wait_for("the ordinary worker elected", planner.leads, workers, 120)
            wiki_id = str(wiki(0).id)
            wait_for("the wiki segment loaded by the ordinary worker's planner", lambda: any(
                isinstance(c.event, LoadSegment) and str(c.event.segment.id) == wiki_id
                for c in commands_log(kafka_bootstrap, topics)), workers, 180)
            wait_for("the wiki segment announced", lambda: wiki_id in announced(answers_log(kafka_bootstrap, topics)),
                     workers, 120)
            expected = pure_fold(read_all(kafka_bootstrap, topics.name(SEGMENTS)))  # the announce included
            wait_for("every visibility change", lambda: len({decode(r.value).event_id for r in
                     read_all(kafka_bootstrap, topics.name(TIMELINE))}) >= len(expected.outputs), workers, 180)
            for w in workers:
                assert w.stop() == 0, w.tail()
    finally:
        kill_alive(workers)
    assert "leads from epoch" not in bystander.log.read_text()
    assert set(claims(kafka_bootstrap, topics)) == {"planner"}
    assert {w for seq in command_epochs(kafka_bootstrap, topics).values() for w, _ in seq} == {"planner"}
    first: dict[str, bytes] = {}
    for r in read_all(kafka_bootstrap, topics.name(TIMELINE)):
        assert first.setdefault(decode(r.value).event_id, r.value) == r.value  # type: ignore[arg-type]
    from events import encode

    assert sorted(first.values()) == sorted(encode(e) for e in expected.outputs)
