"""The planner agent under SIGKILL: ``segcoord run`` killed at random points while servers load segments.

Three simulated historicals (threads) serve; rules ask two replicas on ``hot``
of every segment; publishes arrive over a few seconds while the service is
killed with SIGKILL (6 times, seeded) and restarted. Balancing is off
(``maxSegmentsToMove`` 0), so no decision ever asks for a copy twice: every
(server, segment) load in the log must carry ONE id, however often the agent
re-planned after a crash under other batch cuts (its ids are content-derived).

At the end:

- **one id per copy**: the loads on ``commands``, grouped by (server, segment),
  hold one command id each (copies of it may repeat; they are the same command);
- **convergence**: the deduplicated commands (loads, minus loads refused or
  cancelled before they ran, minus drops) give exactly the placement the
  servers announce, and that placement is what the rules ask (every segment on
  two servers); every load and drop is answered (the audit's rule, with a
  timeout of 0), and the audit finds nothing else (its lock rule aside: these
  publishes come from no task);
- **the store equals a fresh fold**: a fresh agent (new RocksDB store) folds the
  log up to the offsets the live store says it applied, in one batch in broker
  time order, plans once at the end and decides nothing; its store then equals
  the live one key for key: facts (segments, used flags, holdings, servers, rules,
  config), the queue (empty), every settled command id, the applied input ids,
  the offsets, the coordinator start and the latest event time. Not compared:
  the plan-run counter (how many plans ran depends on batch cuts, the timer and
  the kills; it only salts the ids of unused marks, of which there are none here),
  and what the agent emitted beyond ids (stage, reason, causation and time of a
  command re-sent after a crash may differ from its first copy; receivers keep
  the first).
"""

from __future__ import annotations

import heapq
import random
import signal
import threading
import time
import uuid
from pathlib import Path

import orjson
import pytest
from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

from events import Envelope, Event, Interval, SegmentDescriptor, Topics, decode
from events.cluster import DynamicConfigSet, RulesSet, SegmentLoadRefused, ServerJoined
from events.commands import CancelSegmentLoad, DropSegment, LoadSegment
from events.topics import CLUSTER, COMMANDS, SEGMENTS
from streaming.admin import create_topics
from streaming.offsets import watermarks
from streaming.replay import audit
from streaming.service.intake import InputRecord
from streaming.service.planner_agent import FAULT_ENV, FORMAT_VERSION, STORE_NAME, PlannerAgent
from streaming.service.state import AgentStateStore
from tests.accepted import import_request
from tests.integration.test_service_planner import Historicals, PlanService, planner_read_all, send
from tests.integration.test_service_timeline import T0, wait_for

pytestmark = pytest.mark.integration
DAY = 86_400_000
SERVERS = ["h1", "h2", "h3"]
REPLICAS = 2
SELF_KILL_P = 0.4  # per batch that emitted: the agent SIGKILLs itself between flush and commit


def seg(d: int) -> SegmentDescriptor:
    return SegmentDescriptor("wiki", Interval(T0 + d * DAY, T0 + (d + 1) * DAY), "v1", 0, 1000)


def read_records(bootstrap: str, topic: str, ends: dict[int, int] | None = None) -> list[list[InputRecord]]:
    """Every record of ``topic`` below ``ends`` (default: the current end), one list per partition. Fails when 30 s
    pass without a new record (not 30 s in all: a soak's topic of 200k records takes longer on a loaded machine)."""
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"r-{uuid.uuid4().hex}", "enable.auto.commit": False})
    try:
        parts = sorted(c.list_topics(topic, timeout=10).topics[topic].partitions)
        if ends is None:
            ends = {p: watermarks(c, TopicPartition(topic, p), timeout=10)[1] for p in parts}
        out: dict[int, list[InputRecord]] = {p: [] for p in parts}
        pending = {p for p in parts if ends.get(p, 0) > 0}
        c.assign([TopicPartition(topic, p, OFFSET_BEGINNING) for p in pending])
        deadline = time.monotonic() + 30
        while pending and time.monotonic() < deadline:
            for m in c.consume(5000, 0.5):
                p = m.partition()
                if m.error() is not None or p not in pending or m.offset() >= ends[p]:
                    continue
                deadline = time.monotonic() + 30
                out[p].append(InputRecord(topic, p, m.offset(), m.key(), m.value(), m.timestamp()[1]))
                if m.offset() >= ends[p] - 1:
                    pending.discard(p)
        assert not pending, f"could not read {topic} to its end: {pending}"
        return [out[p] for p in parts]
    finally:
        c.close()


def commands_log(bootstrap: str, topics: Topics) -> list[Envelope[Event]]:
    return [decode(r.value) for part in read_records(bootstrap, topics.name(COMMANDS)) for r in part]


def answers_log(bootstrap: str, topics: Topics) -> list[Envelope[Event]]:
    return [decode(r.value) for name in (SEGMENTS, CLUSTER) for part in read_records(bootstrap, topics.name(name))
            for r in part]


def announced(answers: list[Envelope[Event]]) -> dict[str, set[str]]:
    """Segment id -> servers serving it (announces minus unannounces; one partition per data source)."""
    out: dict[str, set[str]] = {}
    for e in answers:
        ev = e.event
        if ev.event_type == "segment_announced":
            out.setdefault(str(ev.segment.id), set()).add(ev.server)  # type: ignore[attr-defined]
        elif ev.event_type == "segment_unannounced":
            out.setdefault(ev.segment_id, set()).discard(ev.server)  # type: ignore[attr-defined]
    return out


def unanswered(commands: list[Envelope[Event]], answers: list[Envelope[Event]]) -> set[str]:
    """Loads and drops answered by nothing (the audit's rule): causation ids, refusals, cancels."""
    done = {e.causation_id for e in answers if e.causation_id is not None}
    done |= {e.event.command_id for e in answers if isinstance(e.event, SegmentLoadRefused)}
    done |= {e.event.cancels for e in commands if isinstance(e.event, CancelSegmentLoad) and e.event.cancels}
    return {e.event_id for e in commands if isinstance(e.event, LoadSegment | DropSegment)} - done


def commanded(commands: list[Envelope[Event]], answers: list[Envelope[Event]]) -> dict[str, set[str]]:
    """The placement the deduplicated commands give: loads not refused, minus drops."""
    refused = {e.event.command_id for e in answers if isinstance(e.event, SegmentLoadRefused)}
    firsts = {e.event_id: e.event for e in reversed(commands)}  # the first copy of every id
    out: dict[str, set[str]] = {}
    for cid, ev in sorted(firsts.items()):
        if isinstance(ev, LoadSegment) and cid not in refused:
            out.setdefault(str(ev.segment.id), set()).add(ev.server)
    for ev in firsts.values():
        if isinstance(ev, DropSegment):
            out.setdefault(ev.segment_id, set()).discard(ev.server)
    return out


SCHEDULING = ("runs", "balancingRuns", "balancedAt", "balanceRequested", "balancingRun", "sweeps", "sweep")


def store_contents(path: Path) -> dict[bytes, bytes]:
    """The whole store (data, offsets, applied ids, format marker) but the agent's own scheduling: the plan-run
    counter, the balancing run's and the sweep's timing and progress (they depend on when the timer fired)."""
    with AgentStateStore(path, FORMAT_VERSION) as store:
        assert not store.wiped
        out = dict(store.scan_raw(b""))
    meta = orjson.loads(out.pop(b"data/meta/"))
    out[b"data/meta/"] = orjson.dumps({k: v for k, v in meta.items() if k not in SCHEDULING})
    return out


class NullSink:
    def __init__(self) -> None:
        self.sent: list[Envelope[Event]] = []

    def send(self, envelope: Envelope[Event]) -> None:
        self.sent.append(envelope)

    def flush(self, timeout: float = 30.0) -> None:
        pass


def fresh_fold(bootstrap: str, topics: Topics, offsets: dict[tuple[str, int], int], path: Path) -> NullSink:
    """A fresh agent folds the three input topics up to ``offsets``, merged by broker time, in one batch."""
    order = (COMMANDS, CLUSTER, SEGMENTS)  # at one broker time, a command before its answer
    ranks = {topics.name(n): i for i, n in enumerate(order)}
    lists: list[list[InputRecord]] = []
    for logical in order:
        name = topics.name(logical)
        lists += read_records(bootstrap, name, {p: o for (t, p), o in offsets.items() if t == name})
    merged = list(heapq.merge(*lists, key=lambda r: (r.timestamp_ms, ranks[r.topic])))  # keeps partition order
    sink = NullSink()
    with AgentStateStore(path, FORMAT_VERSION) as store:
        PlannerAgent(store, topics, sink).process(merged)
    return sink


def test_sigkill_at_random_points_one_id_per_copy_convergence_and_store_equals_fresh_fold(
        kafka_bootstrap: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    topics = Topics(f"t{uuid.uuid4().hex[:10]}.")
    create_topics(kafka_bootstrap, topics, partitions=3)
    rng = random.Random(20261122)
    segments = [seg(d) for d in range(60)]
    batches = [segments[i:i + 2] for i in range(0, len(segments), 2)]
    gaps = [rng.uniform(0.2, 1.2) for _ in batches]
    pauses = [rng.uniform(2.0, 4.5) for _ in range(6)]

    send(kafka_bootstrap, topics, DynamicConfigSet(config={"smartSegmentLoading": False, "maxSegmentsToMove": 0}),
         "config")
    send(kafka_bootstrap, topics, RulesSet(data_source="wiki", rules=(
        {"type": "loadForever", "tieredReplicants": {"hot": REPLICAS}},)), "rules/wiki")
    service = PlanService(kafka_bootstrap, topics, tmp_path / "state", tmp_path / "run.log", plan_every=1)
    starts = 0
    self_kills = 0
    caught_up_before = 0  # "planner: caught up" lines in the log before the running process started
    kills_done = threading.Event()

    def caught_up_lines() -> int:
        return service.log.read_text().count("planner: caught up") if service.log.exists() else 0

    def start(fault: bool = True) -> None:
        nonlocal starts, caught_up_before
        caught_up_before = caught_up_lines()
        if fault:  # each process its own seed: a restart at the same position does not die the same way
            monkeypatch.setenv(FAULT_ENV, f"kill-after-flush:{SELF_KILL_P}:{rng.randrange(2**32)}")
        else:
            monkeypatch.delenv(FAULT_ENV, raising=False)
        service.start()
        starts += 1

    def supervise(seconds: float) -> None:
        """Wait, restarting the service whenever it killed itself."""
        nonlocal self_kills
        until = time.monotonic() + seconds
        while time.monotonic() < until:
            if not service.alive():
                assert service.proc is not None and service.proc.returncode == -signal.SIGKILL, \
                    service.log.read_text()[-3000:]
                self_kills += 1
                start()
            time.sleep(0.05)

    def planning() -> None:
        """Wait until the running process plans (it caught up after its election), restarting it whenever it
        killed itself: a kill then lands after it made progress, so restarts resume at different points however
        slowly a loaded machine starts it."""
        deadline = time.monotonic() + 180
        while caught_up_lines() <= caught_up_before:
            assert time.monotonic() < deadline, f"the planner never caught up; log:\n{service.log.read_text()[-3000:]}"
            supervise(0.1)

    def publish() -> None:
        for i, (batch, gap) in enumerate(zip(batches, gaps, strict=True)):
            time.sleep(gap)
            if i == len(batches) - 1:  # the last batch waits for the kills: every kill lands while publishes flow
                kills_done.wait(600)
            # through the lockbox (an import), without waiting for it: the worker is being killed meanwhile
            send(kafka_bootstrap, topics, import_request(batch, f"t{batch[0].interval.start}"), "wiki")

    want = {str(s.id) for s in segments}

    def converged() -> bool:
        commands, answers = commands_log(kafka_bootstrap, topics), answers_log(kafka_bootstrap, topics)
        placed = announced(answers)
        return set(placed) >= want and all(len(placed[s]) == REPLICAS for s in want) and \
            not unanswered(commands, answers)

    with Historicals(kafka_bootstrap, topics, SERVERS, max_size=1_000_000):
        start()
        try:
            wait_for("the servers", lambda: {e.event.server for e in answers_log(kafka_bootstrap, topics)  # type: ignore[attr-defined]
                                            if isinstance(e.event, ServerJoined)} == set(SERVERS), service)
            flow = threading.Thread(target=publish, name="publish")
            flow.start()
            kills_while_flowing = 0
            for pause in pauses:
                planning()
                supervise(pause)
                kills_while_flowing += flow.is_alive()
                service.kill()
                start()
            kills_done.set()
            flow.join()
            deadline = time.monotonic() + 90
            while not converged():
                assert time.monotonic() < deadline, f"no convergence; log:\n{service.log.read_text()[-3000:]}"
                supervise(0.5)
            # a last restart without faults; its first batches may plan on a part of the unread tail (Kafka
            # orders nothing across topics), so it may still trim; whatever it sends must converge again
            n_ids = len({e.event_id for e in commands_log(kafka_bootstrap, topics)})
            if service.alive():
                service.kill()
            caught_up = service.log.read_text().count("planner: caught up")
            start(fault=False)
            # it catches up, its first timer run (full) plans on the converged view, and it reads back what it sent
            wait_for("the last start to catch up",
                     lambda: service.log.read_text().count("planner: caught up") > caught_up, service, timeout=120)
            wait_for("the planner to read the log to its end", lambda: planner_read_all(kafka_bootstrap, topics),
                     service)
            wait_for("still converged", converged, service)
            late = len({e.event_id for e in commands_log(kafka_bootstrap, topics)}) - n_ids
        finally:
            kills_done.set()  # (a failure above must not leave the publisher waiting)
            if service.alive():
                assert service.stop() == 0
    assert kills_while_flowing == len(pauses)

    commands, answers = commands_log(kafka_bootstrap, topics), answers_log(kafka_bootstrap, topics)
    n_loads = len({e.event_id for e in commands if isinstance(e.event, LoadSegment)})
    n_copies = len(commands) - len({e.event_id for e in commands})
    n_cancels = len({e.event_id for e in commands if isinstance(e.event, CancelSegmentLoad)})
    print(f"{starts} starts, {self_kills} self-kills after a flush, {n_loads} loads, {n_copies} re-sent copies, "
          f"{n_cancels} cancels, {late} commands after the last restart")
    # one id per (server, segment) load
    ids: dict[tuple[str, str], set[str]] = {}
    for e in commands:
        if isinstance(e.event, LoadSegment):
            ids.setdefault((e.event.server, str(e.event.segment.id)), set()).add(e.event_id)
    twice = {copy: sorted(cids) for copy, cids in ids.items() if len(cids) > 1}
    assert not twice, f"copies commanded under more than one id: {twice}"
    # the deduplicated commands give the announced placement, and that is the rules' placement
    placed = {s: servers for s, servers in announced(answers).items() if servers}
    assert {s: servers for s, servers in commanded(commands, answers).items() if servers} == placed
    assert set(placed) == want and all(len(v) == REPLICAS and v <= set(SERVERS) for v in placed.values())
    assert not unanswered(commands, answers)
    violations = [v for v in audit(kafka_bootstrap, topics, command_timeout_ms=0)
                  if v.rule != "publish without a live lock"]
    assert violations == []

    # the live store equals a fresh agent's fold of the same log
    with AgentStateStore(tmp_path / "state" / STORE_NAME, FORMAT_VERSION) as store:
        offsets = store.offsets()
    sink = fresh_fold(kafka_bootstrap, topics, offsets, tmp_path / "fresh")
    assert sink.sent == []  # the converged view: nothing left to decide
    live, fresh = store_contents(tmp_path / "state" / STORE_NAME), store_contents(tmp_path / "fresh")
    assert {k for k in live if k.startswith(b"data/q/")} == set()
    assert sorted(set(live) ^ set(fresh)) == []
    assert {k: (v, fresh[k]) for k, v in live.items() if fresh[k] != v} == {}

    # every start resumed from the store, at different points; the crash path was taken
    resumes = [line.split("resuming from ", 1)[1] for line in service.log.read_text().splitlines()
               if line.startswith("planner agent:")]
    # (a start killed before it printed leaves no line)
    assert resumes[0].startswith("the beginning") and len(set(resumes)) >= 3, resumes
    assert self_kills >= 1  # (0.6 ** the number of emitting batches: about 1e-5)
