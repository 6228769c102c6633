"""Hostile input for every agent: records built to be large or deep, fed one per batch, each timed.

Used by ``bench/hostile.py`` (prints the worst per-event time against a plain event measured in the same
run) and by ``tests/unit/service/test_hostile_input.py`` (nothing lost, nothing crashes, every refused
record dead-lettered with a reason). Each case is a name and a list of raw records for one agent's input
topic; the agents run on a real RocksDB store with a sink that keeps what they emit.

The cases, per agent (size and shape, :mod:`events.limits`):

- every agent: a message just over ``MAX_EVENT_BYTES``; a list one over its bound; a 900 KB string; a
  deeply nested opaque JSON value (``loadSpec``/``startMetadata`` of depth 5,000);
- timeline and planner (``segments``): a segment overshadowing 32,768 ids; one chunk's atomic update group
  of 400 segments naming all 400 ids; a chain of 300 overwrite generations in one chunk, each hiding the
  last (each event re-resolves the chunk); a Druid ``numbered_overwrite`` shard spec with a root range
  of 2^31 and a group size of 2^31 (refused: outside Druid's partition id space); 5,000 segments in one
  publish; mark-unused of 10,000 ids; a forged mark-unused; a mark-unused request of 10,000 ids;
- lockbox (``lock-requests``): a publish request of 5,000 segments; a lock request naming 32,768 partitions
  (and 32,769: refused);
  500 tasks each waiting on one lock (the waiter queue is re-examined on every release);
- planner (``cluster``): 100 rules for one data source (and 101: refused); a dynamic config with 50,000 keys;
- in one time chunk and one event (what made the timeline quadratic or large before): 5,000 segments in
  descending partition order; 2,000 Druid ``numbered_overwrite`` segments of one generation over roots
  [0, 32768); 64 generations over [0, 32768) (the bound) and 65 (refused); 16 generations of an atomic update
  group size of 30,000 (their stand-ins collided once); a lock request of 65 generations (lockbox);
- upsert agent (``segments`` and ``cluster``, as the timeline's cases plus): an upsert table of 10,000 key
  columns; a publish whose segment carries 14,000 upsert keys; a consolidation request of 5,000 intervals.

The upsert agent reads the same ``segments`` records as the timeline and planner (it skips what the timeline
agent dead-letters: its refusals count as skipped) and ``cluster``; so does the Spark balancer's fold
(:class:`SparkBalancerFold`: its batch work without Spark, balancing tier ``hot`` after every record).
"""

from __future__ import annotations

import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import orjson

from coordinator.locks.lockbox import Lockbox
from coordinator.locks.seal import seal_event, seal_publish
from events import Envelope, Event, Interval, SegmentDescriptor, Topics, encode
from events.cluster import DynamicConfigSet, RulesSet, ServerJoined
from events.deadletter import DeadLettered
from events.ids import derived_event_id
from events.limits import MAX_EVENT_BYTES, MAX_OVERWRITE_GENERATIONS_PER_CHUNK
from events.locks import SegmentsImported
from events.schema import Instant
from events.segments import SegmentAnnounced, SegmentsMarkedUnused, SegmentsPublished
from events.tasks import (
    LockReleaseRequested,
    LockRequested,
    PublishRequested,
    SegmentsImportRequested,
    SegmentsMarkUnusedRequested,
    TaskStarted,
)
from events.topics import CLUSTER, LOCK_REQUESTS, SEGMENTS
from events.upserts import ConsolidationInterval, ConsolidationRequested, UpsertPartition, UpsertTableSet
from streaming.service.intake import InputRecord

T0 = 1_767_225_600_000
DAY = 86_400_000
TOPICS = Topics("hostile.")
Raw = tuple[bytes | None, bytes | None]  # key, value


@dataclass
class Case:
    name: str
    topic: str  # logical
    records: list[Raw]


@dataclass
class Timed:
    name: str
    agent: str
    events: int
    worst_s: float
    total_s: float
    dead_lettered: int
    applied: int


@dataclass
class KeepSink:
    sent: list[Envelope[Event]] = field(default_factory=list)
    largest_raw: int = 0  # bytes of the largest record written raw (the upsert agent's strategies)

    def send(self, envelope: Envelope[Event]) -> None:
        self.sent.append(envelope)

    def send_raw(self, topic: str, key: bytes | None, value: bytes | None) -> None:
        self.largest_raw = max(self.largest_raw, len(value or b""))

    def flush(self, timeout: float = 30.0) -> None:
        pass


def seg(day: int, p: int = 0, version: str = "v1", ds: str = "wiki", **kw: Any) -> SegmentDescriptor:
    return SegmentDescriptor(ds, Interval(T0 + day * DAY, T0 + (day + 1) * DAY), version, p, 100, **kw)


def ow(day: int, p: int, minor: int, size: int, start: int = 0, end: int = 32768) -> SegmentDescriptor:
    """A Druid ``numbered_overwrite`` segment (Druid's form only: no list fields)."""
    spec = {"type": "numbered_overwrite", "partitionId": p, "startRootPartitionId": start,
            "endRootPartitionId": end, "minorVersion": minor, "atomicUpdateGroupSize": size}
    return SegmentDescriptor("wiki", Interval(T0 + day * DAY, T0 + (day + 1) * DAY), "v1", p, 100, shard_spec=spec)


def raw(event: Event, event_id: str, key: str = "wiki") -> Raw:
    return key.encode(), encode(Envelope(event, event_id, Instant(T0), key))


class Publisher:
    """Publishes as the lockbox writes them: each batch of segments imported through a pure lockbox, sealed."""

    def __init__(self, key: bytes) -> None:
        self.key = key
        self.box = Lockbox()
        self.n = 0

    def publish(self, segments: tuple[SegmentDescriptor, ...]) -> Raw:
        self.n += 1
        rid = f"imp{self.n}"
        [decision] = self.box.handle(Envelope(SegmentsImportRequested(rid, segments, "hostile"), rid, Instant(T0),
                                              "wiki"))
        assert isinstance(decision, SegmentsImported), decision
        out = SegmentsPublished(task_id=f"import:{rid}", segments=segments)
        env = Envelope(out, f"pub{self.n}", Instant(T0), segments[0].data_source, rid)
        sealed = seal_publish(env, derived_event_id("hostile", 0, self.n, 0), self.key)
        return sealed.event.segments[0].data_source.encode(), encode(sealed)

    def mark(self, event: SegmentsMarkedUnused, event_id: str) -> Raw:
        """A mark as the coordinator writes it: sealed."""
        return b"wiki", encode(seal_event(Envelope(event, event_id, Instant(T0), "wiki"), self.key))


def _oversized(template: Raw) -> Raw:
    doc = orjson.loads(template[1] or b"{}")
    doc["payload"]["padding"] = "x" * MAX_EVENT_BYTES
    return template[0], orjson.dumps(doc)


def segments_cases(key: bytes) -> list[Case]:
    pub = Publisher(key)
    plain = pub.publish((seg(0),))
    cases = [Case("plain publish + announce", SEGMENTS, [plain, raw(SegmentAnnounced(server="h1", segment=seg(0)),
                                                                     "a0")])]
    cases.append(Case("oversized message", SEGMENTS, [_oversized(plain)]))
    cases.append(Case("900 KB string", SEGMENTS, [raw(SegmentAnnounced(server="h" * 900_000, segment=seg(1)),
                                                      "big-server")]))
    cases.append(Case("nested loadSpec depth 5000", SEGMENTS, [
        (b"wiki", orjson.dumps({"event_type": "segment_announced", "schema_version": 1, "event_id": "deep",
                                "occurred_at": "2026-01-01T00:00:00Z", "key": "wiki", "causation_id": None,
                                "payload": {"server": "h1", "segment": {
                                    "dataSource": "wiki", "interval": "2026-01-02/P1D", "version": "v1",
                                    "loadSpec": {"n": [[[[]]]]}}}}).replace(
            b'{"n":[[[[]]]]}', b'{"n":' + b"[" * 5000 + b"]" * 5000 + b"}"))]))
    cases.append(Case("overshadowedSegments of 32768 ids", SEGMENTS, [
        pub.publish((seg(2, 32768, overshadowed_segments=tuple(range(32768)), atomic_update_group=(32768,)),)),
        raw(SegmentAnnounced(server="h1", segment=seg(2, 32768, overshadowed_segments=tuple(range(32768)),
                                                      atomic_update_group=(32768,))), "a-over")]))
    group = tuple(range(32768, 32768 + 400))
    wide = tuple(seg(3, p, atomic_update_group=group, overshadowed_segments=(0,)) for p in group)
    cases.append(Case("atomicUpdateGroup of 400 x 400", SEGMENTS,
                      [pub.publish(wide), *[raw(SegmentAnnounced(server="h1", segment=s), f"a-wide{i}")
                                            for i, s in enumerate(wide[:50])]]))
    chain = []
    for k in range(300):  # generation k hides generation k-1 in one chunk
        s = seg(4, 32768 + k, overshadowed_segments=(32768 + k - 1,) if k else (0,), atomic_update_group=(32768 + k,))
        chain += [pub.publish((s,)), raw(SegmentAnnounced(server="h1", segment=s), f"a-chain{k}")]
    cases.append(Case("overwrite chain of 300 generations", SEGMENTS, chain))
    huge = {"type": "numbered_overwrite", "partitionId": 32768, "startRootPartitionId": 0,
            "endRootPartitionId": 2**31, "minorVersion": 1, "atomicUpdateGroupSize": 2**31}
    cases.append(Case("numbered_overwrite root range 2^31", SEGMENTS, [
        raw(SegmentAnnounced(server="h1", segment=seg(5, 32768, shard_spec=huge)), "a-huge")]))
    many = tuple(seg(6 + i // 100, i % 100) for i in range(5000))
    cases.append(Case("publish of 5000 segments", SEGMENTS, [pub.publish(many)]))
    too_many = orjson.loads(orjson.dumps({"ids": [str(s.id) for s in many] * 3}))["ids"][:10_001]
    cases.append(Case("mark-unused of 10001 ids (over the bound)", SEGMENTS, [
        (b"wiki", orjson.dumps({"event_type": "segments_marked_unused", "schema_version": 1, "event_id": "mu",
                                "occurred_at": "2026-01-01T00:00:00Z", "key": "wiki", "causation_id": None,
                                "payload": {"segmentIds": too_many, "reason": "x"}}))]))
    cases.append(Case("mark-unused of 5000 ids", SEGMENTS, [
        pub.mark(SegmentsMarkedUnused(segment_ids=tuple(str(s.id) for s in many), reason="x"), "mu2")]))
    cases.append(Case("5000 segments of one chunk, descending partition ids", SEGMENTS,
                      [pub.publish(tuple(seg(8, p) for p in reversed(range(5000))))]))
    one_gen = tuple(ow(9, 32768 + i, 1, 2000) for i in range(2000))
    cases.append(Case("2000 numbered_overwrite of one generation over 32768 roots", SEGMENTS,
                      [pub.publish(one_gen), raw(SegmentAnnounced(server="h1", segment=one_gen[0]), "a-gen")]))
    gens = tuple(ow(10, 32768 + i, i + 1, 1) for i in range(MAX_OVERWRITE_GENERATIONS_PER_CHUNK))
    cases.append(Case("64 numbered_overwrite generations over 32768 roots", SEGMENTS,
                      [pub.publish(gens), *[raw(SegmentAnnounced(server="h1", segment=g), f"a-g{i}")
                                            for i, g in enumerate(gens[:8])]]))
    sized = tuple(ow(11, 32768 + i, i + 1, 30_000) for i in range(16))
    cases.append(Case("16 generations of atomicUpdateGroupSize 30000", SEGMENTS, [pub.publish(sized)]))
    over_gens = (*gens, ow(10, 32768 + 64, 65, 1))
    cases.append(Case("65 numbered_overwrite generations in one chunk (over the bound)", SEGMENTS, [
        (b"wiki", encode(Envelope(SegmentsPublished(task_id="t", segments=over_gens), "gens", Instant(T0), "wiki")))]))
    forged = replace(SegmentsPublished(task_id="t", segments=(seg(7),)))
    cases.append(Case("forged publish", SEGMENTS, [raw(forged, "forged")]))
    cases.append(Case("forged mark-unused", SEGMENTS, [
        raw(SegmentsMarkedUnused(segment_ids=(str(seg(0).id),), reason="forged"), "forged-mark")]))
    return cases


def lock_request_cases() -> list[Case]:
    def task(i: int) -> Raw:
        return raw(TaskStarted(task_id=f"t{i}", group_id=f"g{i}", task_type="index", data_source="wiki"), f"s{i}")

    def lock(i: int, **kw: Any) -> Raw:
        return raw(LockRequested(request_id=f"l{i}", task_id=f"t{i}", group_id=f"g{i}", task_type="index",
                                 data_source="wiki", interval=Interval(T0, T0 + DAY), granularity="timeChunk",
                                 lock_type="exclusive", **kw), f"l{i}")

    cases = [Case("plain task + lock", LOCK_REQUESTS, [task(0), lock(0)])]
    cases.append(Case("oversized message", LOCK_REQUESTS, [_oversized(task(1))]))
    cases.append(Case("publish request of 5000 segments", LOCK_REQUESTS, [
        raw(PublishRequested(request_id="p", task_id="t0", segments=tuple(seg(0, p) for p in range(5000))), "p")]))
    over = {"event_type": "publish_requested", "schema_version": 1, "event_id": "p2",
            "occurred_at": "2026-01-01T00:00:00Z", "key": "wiki", "causation_id": None,
            "payload": {"requestId": "p2", "taskId": "t0", "segments": [
                {"dataSource": "wiki", "interval": "2026-01-01/P1D", "version": "v1", "partitionId": p}
                for p in range(5001)]}}
    cases.append(Case("publish request of 5001 segments (over the bound)", LOCK_REQUESTS,
                      [(b"wiki", orjson.dumps(over))]))
    cases.append(Case("mark-unused request of 10000 ids", LOCK_REQUESTS, [
        raw(SegmentsMarkUnusedRequested(request_id="mu", data_source="wiki", reason="x",
                                        segment_ids=tuple(str(seg(i // 100, i % 100).id) for i in range(10_000))),
            "mu")]))
    cases.append(Case("segment lock of 32768 partitions", LOCK_REQUESTS, [
        task(2), raw(LockRequested(request_id="l2", task_id="t2", group_id="g2", task_type="index", data_source="wiki",
                                   interval=Interval(T0 + DAY, T0 + 2 * DAY), granularity="segment",
                                   lock_type="exclusive", partition_ids=tuple(range(32768))), "l2")]))
    cases.append(Case("segment lock of 32769 partitions (over the bound)", LOCK_REQUESTS, [
        raw(LockRequested(request_id="l3", task_id="t2", group_id="g2", task_type="index", data_source="wiki",
                          interval=Interval(T0 + 2 * DAY, T0 + 3 * DAY), granularity="segment",
                          lock_type="exclusive", partition_ids=tuple(range(32769))), "l3")]))
    waiters = [r for i in range(10, 510) for r in (task(i), lock(i, mode="blocking"))]
    waiters.append(raw(LockReleaseRequested(request_id="rel", task_id="t0", data_source="wiki",
                                            interval=Interval(T0, T0 + DAY)), "rel"))
    cases.append(Case("500 waiters on one lock, then its release", LOCK_REQUESTS, waiters))
    gens = tuple(ow(0, 32768 + i, i + 1, 1) for i in range(MAX_OVERWRITE_GENERATIONS_PER_CHUNK + 1))
    cases.append(Case("publish request of 65 overwrite generations (over the bound)", LOCK_REQUESTS, [
        (b"wiki", encode(Envelope(PublishRequested(request_id="pg", task_id="t0", segments=gens), "pg",
                                  Instant(T0), "wiki")))]))
    shallow = encode(Envelope(PublishRequested(request_id="pm", task_id="t0", segments=(seg(9),),
                                               start_metadata={"n": 1}), "pm", Instant(T0), "wiki"))
    cases.append(Case("nested startMetadata depth 5000", LOCK_REQUESTS, [
        (b"wiki", shallow.replace(b'{"n":1}', b'{"n":' + b"[" * 5000 + b"]" * 5000 + b"}"))]))
    return cases


def cluster_cases() -> list[Case]:
    rules = tuple({"type": "loadByInterval", "interval": f"{2000 + i}-01-01/P1Y", "tieredReplicants": {"hot": 1}}
                  for i in range(100))
    return [
        Case("plain server join", CLUSTER, [raw(ServerJoined(server="h1", tier="hot", max_size_bytes=10**9), "j",
                                                "h1")]),
        Case("100 rules for one data source", CLUSTER, [raw(RulesSet(data_source="wiki", rules=rules), "r",
                                                            "rules/wiki")]),
        Case("101 rules for one data source (over the bound)", CLUSTER, [
            raw(RulesSet(data_source="wiki", rules=(*rules, rules[0])), "r101", "rules/wiki")]),
        Case("dynamic config of 50000 keys", CLUSTER, [raw(DynamicConfigSet(config={f"k{i}": i for i in range(50_000)}),
                                                           "c", "config")]),
        Case("oversized message", CLUSTER, [_oversized(raw(ServerJoined(server="h2", tier="hot", max_size_bytes=1),
                                                           "j2", "h2"))]),
    ]


def upsert_cases(key: bytes) -> list[Case]:
    """The upsert agent's own shapes: an upsert table first (so the later publishes feed it), then large ones."""
    table = UpsertTableSet(name="up", append_data_source="up_append", primary_data_source="up_primary",
                           key_columns=("k",), version_column="v")
    wide = UpsertTableSet(name="wide", append_data_source="wide_append", primary_data_source="wide_primary",
                          key_columns=tuple(f"c{i}" for i in range(10_000)), version_column="v")
    keys = tuple(UpsertPartition(key={"k": i}, version=f"{i:08d}") for i in range(14_000))
    heavy = SegmentDescriptor("up_append", Interval(T0, T0 + DAY), "v1", 0, 100, upsert_partitions=keys)
    pub = Publisher(key)
    pub.n = 10_000  # other ids than segments_cases' publisher
    intervals = tuple(ConsolidationInterval(interval=Interval(T0 + i * DAY, T0 + (i + 1) * DAY),
                                            partitions=(UpsertPartition(key={"k": i}, version="1"),))
                      for i in range(5_000))
    return [
        Case("plain upsert table", CLUSTER, [raw(table, "ut", "upserts/up")]),
        Case("upsert table of 10000 key columns", CLUSTER, [raw(wide, "ut-wide", "upserts/wide")]),
        Case("publish of one segment with 14000 upsert keys", SEGMENTS,
             [pub.publish((heavy,)), raw(SegmentAnnounced(server="h1", segment=heavy), "a-heavy", "up_append")]),
        Case("consolidation request of 5000 intervals", CLUSTER, [
            raw(ConsolidationRequested(table="up", intervals=intervals, reason="x"), "cr", "upserts/up")]),
    ]


class SparkBalancerFold:
    """The Spark balancer's work per micro-batch without Spark: the batch's values decoded as the job decodes
    them (:func:`streaming.balancer.state.decode_rows`, values cast to strings as Spark casts them) and
    :func:`streaming.balancer.batch.run_batch` on its placement (seal check, fold, balancing of tier ``hot``).
    Undecodable, refused and unfoldable records count as skipped (the worker's agents dead-letter them)."""

    def __init__(self, key: bytes) -> None:
        import streaming.balancer.batch
        import streaming.balancer.state  # noqa: F401  (imported here: not timed with the first record)
        from streaming.balancer.placement import BalancerPlacement
        from streaming.service.intake import AgentCounters

        self.key = key
        self.placement = BalancerPlacement()
        self.counters = AgentCounters()
        self.batches = 0

    def process(self, records: list[InputRecord]) -> None:
        from streaming.balancer.batch import run_batch
        from streaming.balancer.state import decode_rows

        envelopes = decode_rows(None if r.value is None else r.value.decode(errors="replace") for r in records)
        self.batches += 1
        summary = run_batch(self.placement, envelopes, self.batches, ("hot",), publish_key=self.key).summaries["hot"]
        c = self.counters
        c.applied += summary["records"]
        c.skipped += summary["skipped"] + summary["refused"] + len(records) - len(envelopes)


@contextmanager
def agents(key: bytes) -> Iterator[dict[str, tuple[Any, KeepSink]]]:
    """The four agents on fresh RocksDB stores under a temporary folder, with keeping sinks, and the Spark
    balancer's fold."""
    from streaming.service.lockbox_agent import FORMAT_VERSION as LB
    from streaming.service.lockbox_agent import LockboxAgent
    from streaming.service.planner_agent import FORMAT_VERSION as PL
    from streaming.service.planner_agent import PlannerAgent
    from streaming.service.state import AgentStateStore
    from streaming.service.timeline_agent import FORMAT_VERSION as TL
    from streaming.service.timeline_agent import TimelineAgent
    from streaming.service.upsert_agent import FORMAT_VERSION as UP
    from streaming.service.upsert_agent import UpsertAgent

    with tempfile.TemporaryDirectory() as tmp, AgentStateStore(Path(tmp) / "tl", TL) as tl, \
            AgentStateStore(Path(tmp) / "lb", LB) as lb, AgentStateStore(Path(tmp) / "pl", PL) as pl, \
            AgentStateStore(Path(tmp) / "up", UP) as up:
        sinks = KeepSink(), KeepSink(), KeepSink(), KeepSink()
        yield {"timeline": (TimelineAgent(tl, TOPICS, sinks[0], publish_key=key), sinks[0]),
               "lockbox": (LockboxAgent(lb, TOPICS, sinks[1], publish_key=key), sinks[1]),
               "planner": (PlannerAgent(pl, TOPICS, sinks[2], publish_key=key), sinks[2]),
               "upserts": (UpsertAgent(up, TOPICS, sinks[3], publish_key=key), sinks[3]),
               "balancer": (SparkBalancerFold(key), KeepSink())}


def run(key: bytes, clock: Callable[[], float] = time.perf_counter) -> Iterator[Timed]:
    """Every case through every agent that reads its topic, one record per batch; the per-case figures."""
    plan = {SEGMENTS: ("timeline", "planner", "upserts", "balancer"), LOCK_REQUESTS: ("lockbox",),
            CLUSTER: ("planner", "upserts", "balancer")}
    upserts = upsert_cases(key)
    cases = [*upserts[:2], *segments_cases(key), *lock_request_cases(), *cluster_cases(), *upserts[2:]]
    from events.envelope import decode
    from events.schema import EventValidationError

    for case in cases:  # untimed: the process's one-off work per event type (its generated decoder)
        for _k, v in case.records:
            with suppress(EventValidationError):
                decode(v)
    with agents(key) as by_name:
        offsets: dict[tuple[str, str], int] = {}
        for case in cases:
            for name in plan[case.topic]:
                agent, sink = by_name[name]
                topic = TOPICS.name(case.topic)
                worst = total = 0.0
                before = (agent.counters.dead_lettered, agent.counters.applied, agent.counters.skipped)
                for k, v in case.records:
                    offset = offsets.get((name, topic), 0)
                    offsets[(name, topic)] = offset + 1
                    record = InputRecord(topic, 0, offset, k, v, T0)
                    started = clock()
                    agent.process([record])
                    took = clock() - started
                    worst, total = max(worst, took), total + took
                c = agent.counters
                yield Timed(case.name, name, len(case.records), worst, total,
                            c.dead_lettered - before[0] + c.skipped - before[2], c.applied - before[1])
                del sink.sent[:]


def dead_letters(sink: KeepSink) -> list[DeadLettered]:
    return [e.event for e in sink.sent if isinstance(e.event, DeadLettered)]
