"""The lockbox agent on a real RocksDB store, without a broker: snapshot + tail restarts, and a start whose reads
do not grow with the history.

The oracle is an agent that never restarts (its own store, same inputs): a
restarted agent must emit the same records and hold an equal lockbox (equal
snapshot: same state, same orders, waiters included). The sink is a list; a
sink whose flush fails stands for a crash after the outputs were sent and
before the commit.
"""

from __future__ import annotations

import random
from pathlib import Path

import orjson
import pytest

from coordinator.locks.lockbox import Lockbox
from coordinator.locks.snapshot import encode_snapshot
from events import Envelope, Event, Topics, decode, encode
from events.locks import PublishAccepted
from events.topics import LOCK_REQUESTS
from streaming.service.intake import InputRecord
from streaming.service.lockbox_agent import (
    FORMAT_VERSION,
    SNAPSHOT_EVERY_ENV,
    LockboxAgent,
    applied_requests,
    load_lockbox,
    stored_segments,
    tail_requests,
)
from streaming.service.state import AgentStateStore
from tests.integration.test_service_lockbox import request_stream

TOPICS = Topics("unit.")
TOPIC = TOPICS.name(LOCK_REQUESTS)


class ListSink:
    def __init__(self, fail_on_flush: int | None = None) -> None:
        self.sent: list[bytes] = []
        self.flushes = 0
        self.fail_on_flush = fail_on_flush

    def send(self, envelope: Envelope[Event]) -> None:
        self.sent.append(encode(envelope))

    def flush(self, timeout: float = 30.0) -> None:
        self.flushes += 1
        if self.flushes == self.fail_on_flush:
            raise RuntimeError("broker gone")


class CountingStore(AgentStateStore):
    """A store that counts the records its reads return (point reads and scans)."""

    def __init__(self, path: Path, format_version: str) -> None:
        super().__init__(path, format_version)
        self.records_read = 0

    def get(self, key: bytes) -> bytes | None:
        value = super().get(key)
        self.records_read += value is not None
        return value

    def scan_raw(self, prefix: bytes) -> list[tuple[bytes, bytes]]:
        out = super().scan_raw(prefix)
        self.records_read += len(out)
        return out


def records(n_tasks: int, seed: int = 7) -> list[InputRecord]:
    """A seeded request stream (waits, revocations, publishes, duplicates, malformed records) as Kafka records."""
    stream = request_stream(random.Random(seed), n_tasks)
    return [InputRecord(TOPIC, 0, offset, b"k", item if isinstance(item, bytes) else encode(item))
            for offset, item in enumerate(stream)]


def batches(recs: list[InputRecord], rng: random.Random) -> list[list[InputRecord]]:
    out, i = [], 0
    while i < len(recs):
        n = rng.randint(1, 40)
        out.append(recs[i:i + n])
        i += n
    return out


def never_restarted(recs: list[InputRecord], path: Path, snapshot_every: int) -> tuple[LockboxAgent, ListSink]:
    sink = ListSink()
    store = AgentStateStore(path, FORMAT_VERSION)
    agent = LockboxAgent(store, TOPICS, sink, snapshot_every=snapshot_every)
    for b in batches(recs, random.Random(1)):
        agent.process(b)
    return agent, sink


def test_restarts_and_crashes_after_snapshots_equal_the_never_restarted_agent(tmp_path: Path) -> None:
    recs = records(150)
    every = 37
    oracle, oracle_sink = never_restarted(recs, tmp_path / "oracle", every)
    assert oracle.snapshots_written >= 10

    rng = random.Random(3)
    sent: list[bytes] = []
    path = tmp_path / "restarted"
    all_batches = batches(recs, random.Random(1))
    pending = all_batches
    restarts = crashes = 0
    resumed_from_snapshot = 0
    while pending:
        store = AgentStateStore(path, FORMAT_VERSION)
        fail = rng.choice([None, None, rng.randint(1, 6)])
        sink = ListSink(fail_on_flush=fail)
        agent = LockboxAgent(store, TOPICS, sink, snapshot_every=every)
        resumed_from_snapshot += agent.counters_restored > agent.restored_tail
        assert agent.restored_tail < every
        # Kafka redelivers from the stored offsets: re-feed what was not committed
        done = agent.next_offsets().get((TOPIC, 0), 0)
        pending = [kept for b in all_batches if (kept := [r for r in b if r.offset >= done])]
        try:
            for _ in range(rng.randint(1, 8)):
                if not pending:
                    break
                agent.process(pending.pop(0))
        except RuntimeError:
            crashes += 1
        sent.extend(sink.sent)
        store.close()
        restarts += 1
    assert crashes >= 3 and resumed_from_snapshot >= 5, (crashes, resumed_from_snapshot)

    def first_by_id(values: list[bytes]) -> list[bytes]:
        first: dict[str, bytes] = {}
        for v in values:
            assert first.setdefault(decode(v).event_id, v) == v, "a re-emission differs"
        return list(first.values())

    assert first_by_id(sent) == first_by_id(oracle_sink.sent)
    with AgentStateStore(path, FORMAT_VERSION) as store:
        restored = load_lockbox(store)
        assert encode_snapshot(restored.lockbox) == encode_snapshot(oracle.lockbox)
        assert [a.event_id for a in applied_requests(store)] == [
            a.event_id for a in applied_requests(oracle.store)]
        assert restored.next_seq == oracle.counters.applied
    oracle.store.close()


def test_records_read_on_start_do_not_grow_with_the_applied_requests(tmp_path: Path) -> None:
    every = 50
    read: dict[int, tuple[int, int, int, int]] = {}
    for n_tasks in (60, 600):
        path = tmp_path / f"h{n_tasks}"
        agent, _ = never_restarted(records(n_tasks), path, every)
        applied = agent.counters.applied
        agent.store.close()
        with CountingStore(path, FORMAT_VERSION) as store:
            store.records_read = 0  # the format check of opening is not the agent's start
            started = LockboxAgent(store, TOPICS, ListSink(), snapshot_every=every)
            segments = sum(len(src.segments) for src in started.lockbox.sources.values())
            read[n_tasks] = (applied, store.records_read, started.restored_tail, segments)
            assert len(tail_requests(store)) == started.restored_tail < every
            assert len(applied_requests(store)) == applied == started.counters_restored
    (small_applied, small_read, _, small_segs), (big_applied, big_read, _, big_segs) = read[60], read[600]
    assert big_applied > 8 * small_applied > 2000
    # one snapshot, one entry per committed segment (the state: what the snapshot value held before the
    # segments were stored apart), fewer than `every` tail requests, one offset per partition: whatever the
    # number of requests applied
    assert small_read <= 1 + small_segs + (every - 1) + 1 and big_read <= 1 + big_segs + (every - 1) + 1, read
    assert big_read - big_segs <= every + 1, read
    print(f"records read on start (applied, read, tail, committed segments): {read}")


def test_a_store_of_the_previous_format_is_wiped_and_rebuilt_from_the_log(tmp_path: Path) -> None:
    with AgentStateStore(tmp_path / "lb", "lockbox-agent/1") as old:
        batch = old.batch()
        batch.put(b"in/0000000000000000", b"old layout")
        batch.set_offset(TOPIC, 0, 10)
        old.commit(batch)
    with AgentStateStore(tmp_path / "lb", FORMAT_VERSION) as store:
        assert store.wiped
        agent = LockboxAgent(store, TOPICS, ListSink())
        assert agent.next_offsets() == {} and agent.counters_restored == 0


def test_snapshot_interval_from_the_environment(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(SNAPSHOT_EVERY_ENV, "5")
    with AgentStateStore(tmp_path / "lb", FORMAT_VERSION) as store:
        agent = LockboxAgent(store, TOPICS, ListSink())
        assert agent.snapshot_every == 5
        agent.process(records(3)[:12])
        assert agent.snapshots_written == 1 and len(tail_requests(store)) == 0
    monkeypatch.setenv(SNAPSHOT_EVERY_ENV, "zero")
    with AgentStateStore(tmp_path / "lb", FORMAT_VERSION) as store, pytest.raises(ValueError, match=SNAPSHOT_EVERY_ENV):
        LockboxAgent(store, TOPICS, ListSink())


def test_stage_then_finish_is_process_and_a_crash_between_them_re_emits_the_same_records(tmp_path: Path) -> None:
    """The worker stages the lockbox's batch, lets the other agents work, then finishes it (flush, commit). A
    process that dies between the two may have lost the batch's sends (never acknowledged) and left its store at
    the previous batch: the restart re-reads the batch and sends byte-identical records, and ends equal to the agent
    that never stopped (a ``stage`` that committed would skip the batch and its outputs would be missing)."""
    recs = records(60, seed=11)
    every = 23
    oracle, oracle_sink = never_restarted(recs, tmp_path / "oracle", every)
    rng = random.Random(5)
    sent: list[bytes] = []
    path = tmp_path / "staged"
    all_batches = batches(recs, random.Random(1))
    pending = all_batches
    died_between = 0
    while pending:
        sink = ListSink()
        with AgentStateStore(path, FORMAT_VERSION) as store:
            agent = LockboxAgent(store, TOPICS, sink, snapshot_every=every)
            done = agent.next_offsets().get((TOPIC, 0), 0)
            pending = [kept for b in all_batches if (kept := [r for r in b if r.offset >= done])]
            for _ in range(rng.randint(1, 6)):
                if not pending:
                    break
                acknowledged = len(sink.sent)
                agent.stage(pending.pop(0))
                if rng.random() < 0.2:  # dies after sending, before the flush and the commit: the sends may be lost
                    died_between += 1
                    del sink.sent[acknowledged:]
                    break
                agent.finish()
            sent.extend(sink.sent)
    assert died_between >= 3
    first: dict[str, bytes] = {}
    for v in sent:
        assert first.setdefault(decode(v).event_id, v) == v, "a re-emission differs"
    assert list(first.values()) == oracle_sink.sent
    with AgentStateStore(path, FORMAT_VERSION) as store:
        assert encode_snapshot(load_lockbox(store).lockbox) == encode_snapshot(oracle.lockbox)
    oracle.store.close()


def test_staging_twice_without_finishing_is_refused(tmp_path: Path) -> None:
    recs = records(5)
    with AgentStateStore(tmp_path / "s", FORMAT_VERSION) as store:
        agent = LockboxAgent(store, TOPICS, ListSink())
        agent.stage(recs[:3])
        with pytest.raises(RuntimeError, match="twice"):
            agent.stage(recs[3:])
        agent.finish()
        agent.finish()  # nothing staged: nothing to do
        agent.stage(recs[3:])
        agent.finish()
        assert agent.next_offsets()[(TOPIC, 0)] == len(recs[:3]) + len(recs[3:])


def segments_of(box: Lockbox) -> dict[str, list[object]]:
    return {ds: list(src.segments.values()) for ds, src in box.sources.items() if src.segments}


@pytest.mark.parametrize("every", [1, 4, 13])
def test_a_restore_after_every_batch_equals_the_live_agent(tmp_path: Path, every: int) -> None:
    """The committed segments are stored apart, one entry per segment, and the snapshot only counts them: after
    every batch, the stored segments are the live lockbox's, in its order, and a restore (the snapshot, its
    count of stored segments, the tail) equals the live lockbox, orders included. A count too high or too low,
    a segment stored twice or missed, or another order, would fail here (the tail would commit a segment the
    restore already has, or the restore would miss one the tail does not commit)."""
    recs = records(120, seed=23)
    with AgentStateStore(tmp_path / "lb", FORMAT_VERSION) as store:
        agent = LockboxAgent(store, TOPICS, ListSink(), snapshot_every=every)
        restores_with_segments_after_the_snapshot = 0
        rng, i = random.Random(2), 0
        while i < len(recs):  # small batches: the tail after a snapshot spans several of them
            n = rng.randint(1, 6)
            agent.process(recs[i:i + n])
            i += n
            assert stored_segments(store) == segments_of(agent.lockbox)
            restored = load_lockbox(store)
            assert encode_snapshot(restored.lockbox) == encode_snapshot(agent.lockbox)
            assert restored.next_seq == agent.counters.applied and restored.tail < every
            # a snapshot taken after segments were committed, and more committed by the tail after it
            snap = store.get(b"snapshot")
            if snap is not None and restored.tail:
                counted = sum(src["segmentCount"] for _, src in orjson.loads(snap)["lockbox"]["sources"])
                restores_with_segments_after_the_snapshot += 0 < counted < sum(
                    len(src.segments) for src in agent.lockbox.sources.values())
        assert sum(len(v) for v in segments_of(agent.lockbox).values()) > 50
        assert agent.snapshots_written >= 5
        if every > 1:
            assert restores_with_segments_after_the_snapshot >= 5


class PoisonedLockbox(Lockbox):
    """A lockbox with a defect: the second publish it commits in one batch raises once it is committed (the
    state is part-way mutated, its segments added), once."""

    def __init__(self) -> None:
        super().__init__()
        self.commits_in_batch = 0
        self.poisoned: str | None = None

    def handle(self, envelope: Envelope[Event]) -> list[Event]:
        out = super().handle(envelope)
        if any(isinstance(d, PublishAccepted) and not d.already_published for d in out):
            self.commits_in_batch += 1
            if self.commits_in_batch == 2 and self.poisoned is None:
                self.poisoned = envelope.event_id
                raise RuntimeError("a defect of the core")
        return out


def test_a_core_failure_after_segments_were_committed_in_the_batch_stores_each_segment_once(
        tmp_path: Path) -> None:
    """When ``Lockbox.handle`` raises part way, the agent rebuilds the lockbox from the store and re-handles the
    requests applied earlier in the batch: the segments they committed are stored once, those of the failed
    request never, as if that request had been an undecodable record."""
    recs = records(60, seed=5)
    every = 6
    with AgentStateStore(tmp_path / "poisoned", FORMAT_VERSION) as store:
        agent = LockboxAgent(store, TOPICS, ListSink(), snapshot_every=every)
        box = agent.lockbox = PoisonedLockbox()
        for b in batches(recs, random.Random(4)):
            box.commits_in_batch = 0
            agent.process(b)
        assert box.poisoned is not None and agent.lockbox is not box  # rebuilt from the store
        assert agent.counters.dead_lettered == sum(r.value in BAD for r in recs) + 1
        poisoned = box.poisoned
        live, stored = encode_snapshot(agent.lockbox), stored_segments(store)
        assert stored == segments_of(agent.lockbox)
        assert encode_snapshot(load_lockbox(store).lockbox) == live
    # the oracle: the same records, the failed one undecodable instead
    bad = [InputRecord(r.topic, r.partition, r.offset, r.key, b"not json")
           if r.value is not None and not r.value.startswith(b"not") and r.value not in BAD
           and decode(r.value).event_id == poisoned else r for r in recs]
    assert sum(a is not b for a, b in zip(bad, recs, strict=True)) >= 1
    oracle, _ = never_restarted(bad, tmp_path / "oracle", every)
    assert encode_snapshot(oracle.lockbox) == live
    assert stored_segments(oracle.store) == stored
    oracle.store.close()


BAD = {b"not json", b'{"event_type": "lock_requested"}', b'{"event_type":"x"}'}
