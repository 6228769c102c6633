"""The timeline agent's per-partition snapshots on real RocksDB stores, without a broker.

Worker A owns partition 0 and writes snapshots of it; worker B owns partition 1. A stops (SIGKILL: nothing
after its last commit); B gains partition 0, adopts A's latest snapshot and folds only the tail from its
offset. What a user would notice is checked: B's output for the tail has the ids and bytes A's had for the
records A also did, the deduplicated output of both equals the pure fold of the log, B's states equal the
pure fold's, and B read the tail only. A restart of B keeps all of it.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from coordinator.timeline.snapshot import decode_snapshot, encode_snapshot
from events import Envelope, Topics, encode
from events.registry import Event
from events.topics import SEGMENTS, SNAPSHOTS, TIMELINE
from streaming.service.intake import InputRecord
from streaming.service.state import AgentStateStore, StoreView
from streaming.service.timeline_agent import FORMAT_VERSION, TimelineAgent
from streaming.service.timeline_facts import all_facts, all_states
from streaming.service.timeline_snapshots import SnapshotPolicy
from tests.deferred_executor import Deferred
from tests.integration.test_service_timeline import Raw, pure_fold, segment_stream

TOPICS = Topics("unit.")


class Sink:
    def __init__(self) -> None:
        self.sent: list[bytes] = []
        self.snapshots: dict[bytes, bytes] = {}

    def send(self, envelope: Envelope[Event]) -> None:
        self.sent.append(encode(envelope))

    def send_raw(self, topic: str, key: bytes | None, value: bytes | None) -> None:
        assert key is not None and value is not None
        if topic == TOPICS.name(TIMELINE):  # a visibility change, as bytes (the same as ``encode``)
            self.sent.append(value)
            return
        assert topic == TOPICS.name(SNAPSHOTS)
        self.snapshots[key] = value  # compacted: the latest per key

    def flush(self, timeout: float = 30.0) -> None:
        pass


def log_of(n: int) -> list[InputRecord]:
    """A seeded stream, data sources ds0, ds2, ds4 on partition 0 and the others on 1, with its positions."""
    events = segment_stream(random.Random(7), n)
    offsets = [0, 0]
    out = []
    for e in events:
        p = int(e.key[2:]) % 2
        out.append(InputRecord(TOPICS.name(SEGMENTS), p, offsets[p], e.key.encode(), encode(e)))
        offsets[p] += 1
    return out


def feed(agent: TimelineAgent, records: list[InputRecord], size: int = 37) -> None:
    resume = agent.next_offsets()
    pending = [r for r in records if r.offset >= resume.get((r.topic, r.partition), 0)]
    for i in range(0, len(pending), size):
        agent.process(pending[i:i + size])


@pytest.mark.parametrize("kill_after", [250, 611])
def test_a_gained_partition_resumes_from_the_snapshot_and_the_tail_exactly(tmp_path: Path, kill_after: int) -> None:
    log = log_of(1500)
    p0 = [r for r in log if r.partition == 0]
    p1 = [r for r in log if r.partition == 1]
    policy = SnapshotPolicy(every_records=100, every_ms=10**9)
    a_sink, b_sink = Sink(), Sink()
    with AgentStateStore(tmp_path / "a", FORMAT_VERSION) as a_store:
        a = TimelineAgent(a_store, TOPICS, a_sink)
        a.enable_snapshots(policy, a_sink, "A")
        feed(a, p0[:kill_after])
    snap = decode_snapshot(a_sink.snapshots[b"timeline/0"])
    assert 0 < snap.next_offset <= kill_after and snap.writer == "A"
    assert kill_after - snap.next_offset < 100 + 37  # the latest snapshot is at most one policy step behind

    with AgentStateStore(tmp_path / "b", FORMAT_VERSION) as b_store:
        b = TimelineAgent(b_store, TOPICS, b_sink)
        b.enable_snapshots(policy, b_sink, "B")
        feed(b, p1)
        assert b.adopt(snap) and not b.adopt(snap)  # a snapshot not ahead of the store is not adopted
        assert b.next_offsets()[(TOPICS.name(SEGMENTS), 0)] == snap.next_offset
        feed(b, p0)
        assert b.adopted[0] == {"offset": snap.next_offset, "writer": "A", "read": len(p0) - snap.next_offset}

    expected = pure_fold([Raw(r.topic, r.partition, r.offset, r.key, r.value) for r in log])
    first: dict[str, bytes] = {}
    for raw in a_sink.sent + b_sink.sent:  # what consumers of `timeline` see, deduplicated by id
        from events import decode

        assert first.setdefault(decode(raw).event_id, raw) == raw, "a re-emitted change differs"
    assert sorted(first.values()) == sorted(encode(e) for e in expected.outputs)
    overlap = set(decode_ids(a_sink.sent)) & set(decode_ids(b_sink.sent))
    assert overlap or kill_after == snap.next_offset  # B re-sent what A sent after its snapshot, same bytes

    with AgentStateStore(tmp_path / "b", FORMAT_VERSION) as b_store:  # a restart of B
        b = TimelineAgent(b_store, TOPICS, Sink())
        assert all_states(b.timelines) == all_states(expected.timelines)
        assert all_facts(b.timelines) == all_facts(expected.timelines)
        assert b.adopted[0]["read"] == len(p0) - snap.next_offset
        assert b.partition_of == {"ds0": 0, "ds2": 0, "ds4": 0, "ds1": 1, "ds3": 1, "ds5": 1}


def decode_ids(raws: list[bytes]) -> list[str]:
    from events import decode

    return [decode(r).event_id for r in raws]


def test_snapshots_are_due_by_count_or_by_time(tmp_path: Path) -> None:
    log = [r for r in log_of(400) if r.partition == 0]
    now = [0.0]
    with AgentStateStore(tmp_path / "s", FORMAT_VERSION) as store:
        sink = Sink()
        agent = TimelineAgent(store, TOPICS, sink)
        agent.clock = lambda: now[0]
        agent.enable_snapshots(SnapshotPolicy(every_records=1000, every_ms=5000), sink, "w")
        agent.process(log[:10])
        assert agent.snapshots_written == 0
        now[0] = 5.0  # 5 s later, with events applied since the last one
        agent.process(log[10:20])
        assert agent.snapshots_written == 1
        assert decode_snapshot(sink.snapshots[b"timeline/0"]).next_offset == 20
        now[0] = 6.0
        agent.process(log[20:25])  # 1 s after the last: not due
        assert agent.snapshots_written == 1
        now[0] = 10.0  # the partition went quiet; the worker's snapshot timer runs between batches
        assert agent.write_snapshots() == 1
        assert decode_snapshot(sink.snapshots[b"timeline/0"]).next_offset == 25
        now[0] = 20.0
        agent.process([])  # nothing applied since: nothing to write
        assert agent.write_snapshots() == 0 and agent.snapshots_written == 2


def test_the_policy_from_the_environment_names_the_variable() -> None:
    assert SnapshotPolicy.from_env({}) == SnapshotPolicy()
    assert SnapshotPolicy.from_env({"SEGCOORD_TIMELINE_SNAPSHOT_EVERY": "0"}) is None
    assert SnapshotPolicy.from_env({"SEGCOORD_TIMELINE_SNAPSHOT_MS": "5"}).every_ms == 5  # type: ignore[union-attr]
    with pytest.raises(ValueError, match="SEGCOORD_TIMELINE_SNAPSHOT_IDS must be an integer"):
        SnapshotPolicy.from_env({"SEGCOORD_TIMELINE_SNAPSHOT_IDS": "many"})
    with pytest.raises(ValueError, match="SEGCOORD_TIMELINE_SNAPSHOT_EVERY"):
        SnapshotPolicy.from_env({"SEGCOORD_TIMELINE_SNAPSHOT_EVERY": "-3"})


def test_a_snapshot_is_the_encoding_of_the_fold_s_own_facts(tmp_path: Path) -> None:
    """The agent splices a snapshot's facts from its committed store entries: the bytes must be those of encoding
    the fold's facts (what a worker gaining the partition restores), before and after a restart."""
    log = log_of(1200)
    checked = 0
    for part in (log[:600], log[600:]):  # the second half after a restart from the store
        with AgentStateStore(tmp_path / "s", FORMAT_VERSION) as store:
            sink = Sink()
            agent = TimelineAgent(store, TOPICS, sink)
            agent.enable_snapshots(SnapshotPolicy(every_records=50, every_ms=10**9), sink, "w")
            for i in range(0, len(part), 37):
                sink.snapshots.clear()
                agent.process(part[i:i + 37])
                for key, value in sink.snapshots.items():
                    assert value == encode_snapshot(agent.snapshot(int(key.split(b"/")[1])))
                    checked += 1
    assert checked >= 10


def ticking() -> Callable[[], float]:
    """A clock one second further at every reading."""
    now = [0.0]

    def clock() -> float:
        now[0] += 1.0
        return now[0]

    return clock


def count_builds(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The partitions whose snapshot the agent builds from now on, in order."""
    from streaming.service import timeline_agent

    built: list[int] = []
    build = timeline_agent._build_and_close

    def counted(view: StoreView, sources: set[str], p: int, *rest: Any) -> bytes:
        built.append(p)
        return build(view, sources, p, *rest)

    monkeypatch.setattr(timeline_agent, "_build_and_close", counted)
    return built


def test_a_partition_too_large_for_a_snapshot_is_not_snapshotted_again_until_it_holds_fewer_segments(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from streaming.service import timeline_agent

    log = [r for r in log_of(400) if r.partition == 0]
    with AgentStateStore(tmp_path / "s", FORMAT_VERSION) as store:
        sink = Sink()
        agent = TimelineAgent(store, TOPICS, sink)
        agent.clock = ticking()  # due by time at every batch, whatever the partition's size
        agent.enable_snapshots(SnapshotPolicy(every_records=10**6, every_ms=1), sink, "w")
        taken = count_builds(monkeypatch)
        monkeypatch.setattr(timeline_agent, "MAX_SNAPSHOT_BYTES", 10)  # no snapshot fits
        agent.process(log[:20])  # due: taken, too large, not written
        assert (len(taken), agent.snapshots_written, agent.snapshots_skipped) == (1, 0, 0)
        monkeypatch.setattr(timeline_agent, "MAX_SNAPSHOT_BYTES", 10**9)  # it would fit now, but the partition
        agent.process(log[20:40])  # holds at least as many segments as the one that did not: not even taken
        assert (len(taken), agent.snapshots_written, agent.snapshots_skipped) == (1, 0, 1)
        assert sink.snapshots == {}
        agent._oversized[0] = 10**6  # as if it had held more segments when it did not fit: it holds fewer now
        agent.process(log[40:60])
        assert (len(taken), agent.snapshots_written) == (2, 1)
        assert decode_snapshot(sink.snapshots[b"timeline/0"]).next_offset == log[59].offset + 1
        agent.process(log[60:80])  # written once again: nothing is remembered against it any more
        assert (len(taken), agent.snapshots_written) == (3, 2)


def test_a_snapshot_built_off_the_event_loop_is_that_of_the_commit_it_was_started_after(tmp_path: Path) -> None:
    """Built later, while the fold moved on: still the state of the commit after which it was due (a store view
    of that commit), sent by a later call; the partition is not due again while it is being built."""
    log = [r for r in log_of(600) if r.partition == 0]
    executor = Deferred()
    with AgentStateStore(tmp_path / "s", FORMAT_VERSION) as store:
        sink = Sink()
        agent = TimelineAgent(store, TOPICS, sink)
        agent.enable_snapshots(SnapshotPolicy(every_records=20, every_ms=10**9), sink, "w", executor)
        agent.process(log[:20])  # due: started, not built yet
        assert len(executor.queued) == 1 and sink.snapshots == {} and agent.snapshots_written == 0
        expected = encode_snapshot(agent.snapshot(0))
        agent.process(log[20:45])  # due again by count, but its snapshot is being built: nothing more started
        assert len(executor.queued) == 1
        executor.run_all()
        assert agent.wait_snapshots(timeout=0)
        agent.process(log[45:50])  # sends the built one; the partition is due again: the next one starts
        assert agent.snapshots_written == 1 and sink.snapshots[b"timeline/0"] == expected
        assert decode_snapshot(expected).next_offset == log[19].offset + 1
        assert len(executor.queued) == 1
        expected = encode_snapshot(agent.snapshot(0))
        executor.run_all()
        assert agent.write_snapshots() == 1 and sink.snapshots[b"timeline/0"] == expected


def test_a_snapshot_being_built_when_its_partition_is_adopted_is_dropped(tmp_path: Path) -> None:
    log = [r for r in log_of(600) if r.partition == 0]
    policy = SnapshotPolicy(every_records=20, every_ms=10**9)
    with AgentStateStore(tmp_path / "a", FORMAT_VERSION) as a_store:
        a_sink = Sink()
        a = TimelineAgent(a_store, TOPICS, a_sink)
        a.enable_snapshots(policy, a_sink, "A")
        feed(a, log[:100])
    newer = decode_snapshot(a_sink.snapshots[b"timeline/0"])
    executor = Deferred()
    with AgentStateStore(tmp_path / "b", FORMAT_VERSION) as b_store:
        b_sink = Sink()
        b = TimelineAgent(b_store, TOPICS, b_sink)
        b.enable_snapshots(policy, b_sink, "B", executor)
        b.process(log[:20])  # B's own snapshot of offset 20 is being built
        assert len(executor.queued) == 1
        assert b.adopt(newer)  # the partition jumps ahead: what is being built is stale
        executor.run_all()
        assert b.write_snapshots() == 0 and b_sink.snapshots == {}


def test_a_snapshot_reads_only_its_partition_s_data_sources_even_when_names_share_a_prefix(tmp_path: Path) -> None:
    """Data sources whose names prefix one another (``wiki``, ``wiki_edits``, ``wiki"x``) on two partitions: each
    partition's snapshot, read by one prefix scan per data source, is byte for byte that of the fold."""
    from events.segments import SegmentAnnounced, SegmentsPublished, SegmentUnannounced
    from tests.integration.test_service_timeline import env, seg

    names = {"wiki": 0, "wiki_edits": 1, 'wiki"x': 0, "wiki_": 1, "w": 0}
    records: list[InputRecord] = []
    offsets = [0, 0]
    n = 0
    for day in range(3):
        for ds, p in names.items():
            s = seg(ds, day, "v1")
            for event in (SegmentsPublished(task_id=f"t{n}", segments=(s,)), SegmentAnnounced(server="h", segment=s),
                          SegmentUnannounced(server="h", segment_id=str(s.id))):
                records.append(InputRecord(TOPICS.name(SEGMENTS), p, offsets[p], ds.encode(),
                                           encode(env(event, f"e{n}", ds))))
                offsets[p] += 1
                n += 1
    with AgentStateStore(tmp_path / "s", FORMAT_VERSION) as store:
        sink = Sink()
        agent = TimelineAgent(store, TOPICS, sink)
        agent.enable_snapshots(SnapshotPolicy(every_records=10**6, every_ms=10**9), sink, "w")
        agent.process(records)
        assert agent.write_snapshots(force=True) == 2
        for p in (0, 1):
            snap = decode_snapshot(sink.snapshots[f"timeline/{p}".encode()])
            assert snap.data_sources == {ds for ds, q in names.items() if q == p}
            assert sink.snapshots[f"timeline/{p}".encode()] == encode_snapshot(agent.snapshot(p))


def test_a_partition_with_more_segments_than_any_snapshot_holds_is_not_even_built(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from streaming.service import timeline_agent

    log = [r for r in log_of(400) if r.partition == 0]
    built = count_builds(monkeypatch)
    with AgentStateStore(tmp_path / "s", FORMAT_VERSION) as store:
        sink = Sink()
        agent = TimelineAgent(store, TOPICS, sink)
        agent.clock = ticking()  # due by time at every batch, whatever the partition's size
        agent.enable_snapshots(SnapshotPolicy(every_records=10**6, every_ms=1), sink, "w")
        agent.process(log[:20])
        assert (built, agent.snapshots_written) == ([0], 1)  # small enough: built and written
        monkeypatch.setattr(timeline_agent, "MAX_SNAPSHOT_SEGMENTS", 1)  # no partition of this log fits now
        agent.process(log[20:40])
        agent.process(log[40:60])
        assert (built, agent.snapshots_written, agent.snapshots_skipped) == ([0], 1, 2)
        monkeypatch.setattr(timeline_agent, "MAX_SNAPSHOT_SEGMENTS", 10**6)
        agent._oversized[0] = 10**6  # as if it had held more: it is tried again
        agent.process(log[60:80])
        assert (built, agent.snapshots_written) == ([0, 0], 2)


def test_a_partition_larger_than_the_count_policy_is_due_after_as_many_events_as_it_held() -> None:
    """Building a snapshot costs in proportion to the partition: a partition that held more segments at its last
    snapshot than ``every_records`` waits as many events as it held, not ``every_records``."""
    import tempfile

    log = [r for r in log_of(1200) if r.partition == 0]
    executor = Deferred()
    with tempfile.TemporaryDirectory() as tmp, AgentStateStore(Path(tmp) / "s", FORMAT_VERSION) as store:
        sink = Sink()
        agent = TimelineAgent(store, TOPICS, sink)
        agent.enable_snapshots(SnapshotPolicy(every_records=10, every_ms=10**9), sink, "w", executor)
        agent.process(log[:100])  # due (100 >= 10): started with the partition's size noted
        held = agent._held_at[0]
        assert held > 10 and len(executor.queued) == 1
        executor.run_all()
        agent.process([])  # sent
        since = 0
        for rec in log[100:]:
            agent.process([rec])
            since += 1
            if executor.queued:
                break
        assert since == max(10, held)  # not after 10 events: after as many as it held
        executor.run_all()  # (its store view closed before the store is)
