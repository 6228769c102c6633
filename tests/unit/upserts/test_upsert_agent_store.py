"""The upsert agent on a real RocksDB store, without a broker: crashes between flush and commit, restarts from
the store, and the end state equals the pure fold; the strategies it writes are the pure strategy.

Inputs are a seeded history on the three topics the agent reads (``cluster``, ``segments``, and ``timeline`` as
the timeline agent emits it from the same pure timeline), in random batches. The sink is a list; a sink whose
flush fails stands for a crash after the outputs were sent and before the commit.
"""

from __future__ import annotations

import random
from pathlib import Path

import orjson

from coordinator.timeline.timelines import Timelines
from coordinator.upserts.replay import UpsertReplay
from events import Envelope, Event, SegmentVisibilityChanged, Topics, decode, derived_event_id, encode
from events.topics import CLUSTER, SEGMENTS, TIMELINE, UPSERT_STRATEGY
from streaming.service.intake import InputRecord
from streaming.service.state import AgentStateStore
from streaming.service.upsert_agent import FORMAT_VERSION, UpsertAgent, load_state
from tests.accepted import through_lockbox
from tests.unit.upserts.builders import Log, part, table_set

TOPICS = Topics("unit.")


class ListSink:
    def __init__(self, fail_on_flush: int | None = None) -> None:
        self.sent: list[bytes] = []
        self.strategies: dict[str, bytes] = {}
        self.flushes = 0
        self.fail_on_flush = fail_on_flush

    def send(self, envelope: Envelope[Event]) -> None:
        self.sent.append(encode(envelope))

    def send_raw(self, topic: str, key: bytes | None, value: bytes | None) -> None:
        assert topic == TOPICS.name(UPSERT_STRATEGY) and key is not None and value is not None
        self.strategies[key.decode()] = value

    def flush(self, timeout: float = 30.0) -> None:
        self.flushes += 1
        if self.flushes == self.fail_on_flush:
            raise RuntimeError("broker gone")


def history(seed: int) -> Log:
    rng = random.Random(seed)
    log = Log()
    log.add(table_set(grace_ms=5))
    version = 0
    segs = []
    for _ in range(120):
        r = rng.random()
        if r < 0.6 or not segs:
            version += 1
            date = rng.choice(["2021-01-01", "2021-01-02"])
            segs.append(log.reingest(date, part(rng.choice("abc"), date, f"v{version:04d}",
                                                tombstone=rng.random() < 0.1), announce=rng.random() < 0.8))
        elif r < 0.8:
            log.announce(rng.choice(segs))
        else:
            log.unannounce(rng.choice(segs))
    return log


def records(log: Log) -> list[InputRecord]:
    """The log on its topics, with the timeline's visibility changes on ``timeline`` right after their input."""
    tl = Timelines()
    out: list[InputRecord] = []
    offsets = {CLUSTER: 0, SEGMENTS: 0, TIMELINE: 0}

    def put(topic: str, env: Envelope[Event]) -> None:
        out.append(InputRecord(TOPICS.name(topic), 0, offsets[topic], env.key.encode(), encode(env)))
        offsets[topic] += 1

    for env in log.envelopes:
        put(env.event.event_topic, through_lockbox(env))  # publishes and marks sealed as the coordinator writes them
        if env.event.event_topic == SEGMENTS:
            for i, c in enumerate(tl.apply(env.event)):
                sid = c.segment_id
                vis = SegmentVisibilityChanged(segment_id=str(sid), data_source=sid.data_source,
                                               interval=sid.interval, from_state=c.old, to_state=c.new)
                put(TIMELINE, Envelope(vis, derived_event_id("tl", 0, offsets[SEGMENTS], i), env.occurred_at,
                                       sid.data_source, env.event_id))
    return out


def run(recs: list[InputRecord], path: Path, rng: random.Random, crash_every: int | None) -> ListSink:
    """Feed ``recs`` in random batches; with ``crash_every``, the flush of every so many batches fails and the
    agent is rebuilt from its store (the worker exits and restarts)."""
    sink = ListSink()
    flushes = 0
    i = 0
    while i < len(recs):
        with AgentStateStore(path, FORMAT_VERSION) as store:
            crash_at = None if crash_every is None else flushes + rng.randint(1, crash_every)
            sink.fail_on_flush, sink.flushes = crash_at, flushes
            agent = UpsertAgent(store, TOPICS, sink)
            resume = agent.next_offsets()
            pending = [r for r in recs if r.offset >= resume.get((r.topic, r.partition), 0)]
            try:
                j = 0
                while j < len(pending):
                    n = rng.randint(1, 25)
                    agent.process(pending[j:j + n])
                    j += n
                i = len(recs)
            except RuntimeError:
                pass
            flushes = sink.flushes
    return sink


def test_crashes_between_flush_and_commit_end_equal_to_the_pure_fold(tmp_path: Path) -> None:
    log = history(11)
    recs = records(log)
    calm = run(recs, tmp_path / "calm", random.Random(1), None)
    crashed = run(recs, tmp_path / "crashed", random.Random(2), crash_every=4)
    pure = UpsertReplay().apply_all(log.envelopes)
    for path, sink in ((tmp_path / "calm", calm), (tmp_path / "crashed", crashed)):
        # cleanup decides at batch ends (event time), so where batches are cut may change which briefly stale
        # segments it marked; each run is checked against its own marks
        marked = {sid for b in sink.sent for sid in getattr(decode(b).event, "segment_ids", ())}
        assert marked  # the stale segments were marked unused (the pure fold of the input keeps them)
        with AgentStateStore(path, FORMAT_VERSION) as store:
            state, _ = load_state(store)
        assert state.fresh("ads") == pure.state.fresh("ads")
        # marked segments are forgotten (one announced again later is learned again from its announce)
        assert pure.state.held.keys() - marked <= state.held.keys() <= pure.state.held.keys()
        assert state.visible == pure.state.visible
        assert set(state.stale) <= set(pure.state.stale)
    # the strategy on the topic is the pure strategy's filter
    for sink in (calm, crashed):
        record = orjson.loads(sink.strategies["ads"])
        assert record["filter"] == pure.report()["tables"]["ads"]["filter"]
        assert record["format"] == 1 and record["table"] == "ads"
    # a re-emission after a crash is byte-identical: one content per id
    by_id: dict[str, set[bytes]] = {}
    for b in crashed.sent:
        by_id.setdefault(decode(b).event_id, set()).add(b)
    assert len(crashed.sent) > len(by_id) and all(len(v) == 1 for v in by_id.values())


def test_cleanup_marks_are_emitted_folded_and_dropped_when_read_back(tmp_path: Path) -> None:
    log = Log()
    log.add(table_set(grace_ms=0))
    old = log.reingest("2021-01-01", part("a", "2021-01-01", "v1"))
    log.reingest("2021-01-01", part("a", "2021-01-01", "v2"))
    recs = records(log)
    with AgentStateStore(tmp_path / "s", FORMAT_VERSION) as store:
        sink = ListSink()
        agent = UpsertAgent(store, TOPICS, sink)
        agent.process(recs)
        marks = [decode(b) for b in sink.sent]
        assert [m.event.segment_ids for m in marks] == [(str(old.id),)]  # type: ignore[attr-defined]
        assert str(old.id) not in agent.state.held
        back = InputRecord(TOPICS.name(SEGMENTS), 0, 100, b"k", sink.sent[0])
        agent.process([back])
        assert agent.counters.duplicates == 1
        assert agent.tick(10**13) == 0


def test_a_table_that_cannot_hold_is_dead_lettered_with_its_reason(tmp_path: Path) -> None:
    bad = Log().add(table_set().__class__(name="x", append_data_source="a", primary_data_source="a",
                                          key_columns=("k",), version_column="v"))
    with AgentStateStore(tmp_path / "s", FORMAT_VERSION) as store:
        sink = ListSink()
        agent = UpsertAgent(store, TOPICS, sink)
        agent.process(records(bad))
        [dead] = [decode(b) for b in sink.sent]
        assert "payload.primaryDataSource: must differ" in dead.event.reason  # type: ignore[attr-defined]


def test_the_timer_acts_only_for_partitions_the_worker_owns_now(tmp_path: Path) -> None:
    """A worker keeps the state of a partition it lost; its timer must leave that partition's cleanup (and the
    table's consolidations) to the new owner, and act again once the partition is back, also after a restart."""
    log = Log()
    log.add(table_set(grace_ms=60_000))
    old = log.reingest("2021-01-01", part("a", "2021-01-01", "v1"))
    log.reingest("2021-01-01", part("a", "2021-01-01", "v2"))
    recs = records(log)
    everything = {(r.topic, r.partition) for r in recs}
    lost_segments = everything - {(TOPICS.name(SEGMENTS), 0)}
    with AgentStateStore(tmp_path / "s", FORMAT_VERSION) as store:
        sink = ListSink()
        agent = UpsertAgent(store, TOPICS, sink)
        agent.owned = lambda: everything
        agent.process(recs)
        assert sink.sent == []  # stale, but not for the grace period yet
        agent.owned = lambda: lost_segments  # the segments partition went to another worker
        assert agent.tick(10**13) == 0 and sink.sent == []
        agent.owned = lambda: set()
        assert agent.tick(10**13) == 0
    with AgentStateStore(tmp_path / "s", FORMAT_VERSION) as store:  # a restart remembers where keys came from
        agent = UpsertAgent(store, TOPICS, sink)
        agent.owned = lambda: lost_segments
        assert agent.tick(10**13) == 0
        agent.owned = lambda: everything  # the partition came back
        assert agent.tick(10**13) == 1
        assert [decode(b).event.segment_ids for b in sink.sent] == [(str(old.id),)]  # type: ignore[attr-defined]


def test_a_valid_event_under_a_key_that_is_not_utf8_is_applied_and_survives_a_restart(tmp_path: Path) -> None:
    """A hostile producer may put any bytes in a record's key (the fuzz test does): the agent applies the valid
    event, remembers where the key came from, and reopens its store; it used to stop with UnicodeDecodeError."""
    from dataclasses import replace

    log = Log()
    log.add(table_set(grace_ms=60_000))
    log.reingest("2021-01-01", part("a", "2021-01-01", "v1"))
    recs = [replace(r, key=b"ds\xce\xff" + r.key) if r.key else r for r in records(log)]
    with AgentStateStore(tmp_path / "s", FORMAT_VERSION) as store:
        agent = UpsertAgent(store, TOPICS, ListSink())
        agent.process(recs)
        applied = agent.counters.applied
        assert applied == len(recs)
    with AgentStateStore(tmp_path / "s", FORMAT_VERSION) as store:
        again = UpsertAgent(store, TOPICS, ListSink())
        assert again.sources == agent.sources and len(again.sources) > 0


def test_the_assignment_is_asked_only_when_there_is_a_decision_to_own(tmp_path: Path) -> None:
    """Asking the consumer's assignment goes through Faust's consumer thread: a batch that decides nothing (every
    batch of a cluster without stale versions) must not ask it, a timer run that decides something must."""
    log = Log()
    log.add(table_set(grace_ms=60_000))
    log.reingest("2021-01-01", part("a", "2021-01-01", "v1"))
    log.reingest("2021-01-01", part("a", "2021-01-01", "v2"))
    recs = records(log)
    asked = 0

    def owned() -> set[tuple[str, int]]:
        nonlocal asked
        asked += 1
        return {(r.topic, r.partition) for r in recs}

    with AgentStateStore(tmp_path / "s", FORMAT_VERSION) as store:
        agent = UpsertAgent(store, TOPICS, ListSink())
        agent.owned = owned
        for r in recs:
            agent.process([r])
        assert agent.counters.applied == len(recs) and asked == 0
        assert agent.tick(10**13) == 1 and asked == 1  # the stale v1 is due: its partition is asked after
