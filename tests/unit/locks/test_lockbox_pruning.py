"""Allocation records and released overwriting locks are pruned, as Druid deletes a task allocator's pending
segments when its last task ends.

- While any task of the group runs, a repeated allocation request gets the same id back (another member
  included: replicas of a streaming task repeat each other's requests).
- Once the group's last task ended, its allocations are gone: a new task of the group repeating the same
  sequence gets a fresh allocation (above every id still published or recorded).
- Partition counters and ended tasks are derived: bounded by the published chunks and the running groups'
  records, the same live, replayed and restored (a format 4 snapshot is upcast).
- Over a long run of tasks the allocation records, the allocating tasks and the released overwriting lock
  ids stay bounded by what running tasks hold, and a replayed or restored lockbox equals the live one.
"""

from __future__ import annotations

from coordinator.locks.lockbox import Lockbox
from coordinator.locks.snapshot import decode_snapshot, encode_snapshot, lockbox_from_json, snapshot_to_json
from events import Envelope, Instant, Interval, LockReleaseRequested, TaskFinished
from tests.unit.locks.script import Script
from tests.unit.locks.test_lockbox_correctness import accepted, allocated, rows

HOUR = Interval.parse("2026-01-01T05/PT1H")


def _append(s: Script, task: str, sequence: str, interval: Interval = HOUR, previous: str | None = None) -> object:
    return s.allocate(task, interval=interval, sequence=sequence, previous=previous, granularity="timeChunk",
                      lock_type="append")


def test_a_repeated_request_gets_the_same_id_while_its_group_runs() -> None:
    s = Script()
    s.start("k1", "index_kafka", group="g"), s.start("k2", "index_kafka", group="g")
    first = allocated(_append(s, "k1", "seq-0"))
    assert allocated(_append(s, "k1", "seq-0")).segment_id == first.segment_id
    s.finish("k1")
    assert s.box.sources["wiki"].allocations, "the group still runs: the record stays"
    assert allocated(_append(s, "k2", "seq-0")).segment_id == first.segment_id


def test_the_groups_allocations_go_when_its_last_task_ends() -> None:
    s = Script()
    s.start("k1", "index_kafka", group="g"), s.start("other", "index_kafka", group="h")
    first = allocated(_append(s, "k1", "seq-0"))
    kept = allocated(_append(s, "other", "seq-h"))
    s.finish("k1")
    src = s.box.sources["wiki"]
    assert [a.segment_id for a in src.allocations.values()] == [kept.segment_id]
    assert list(src.allocators) == ["h"]
    s.start("k1b", "index_kafka", group="g")
    again = allocated(_append(s, "k1b", "seq-0"))
    assert again.segment_id != first.segment_id
    assert (again.segment.version, again.segment.partition_id) == (first.segment.version, 2), \
        "h's record keeps partition 1"


def test_state_stays_bounded_over_a_long_run_of_tasks() -> None:
    """Generations of a streaming group append and publish; compaction tasks allocate under REPLACE locks and
    release them (released overwriting locks) or commit; everything ends. The records stay bounded."""
    s = Script()
    sizes = []
    previous = None
    for n in range(60):
        stream, compact = f"k{n}", f"c{n}"
        s.start(stream, "index_kafka", group="stream"), s.start(compact, "compact", group=f"compact{n % 3}")
        replace_alloc = allocated(s.allocate(compact, interval=HOUR, sequence=f"{compact}-r", granularity="timeChunk",
                                             lock_type="replace"))
        if n % 2:
            s.send(LockReleaseRequested(request_id=f"rel{n}", task_id=compact, data_source="wiki", interval=HOUR))
        appended = allocated(_append(s, stream, "stream-seq", previous=previous))
        previous = appended.segment_id
        accepted(s.publish(stream, rows(appended.segment, 2 * n + 1), kind="append"))
        if not n % 2:
            accepted(s.publish(compact, rows(replace_alloc.segment, 2 * n + 2), kind="replace"))
        src = s.box.sources["wiki"]
        sizes.append((len(src.allocations), len(src.released_overwrites), len(src.allocators)))
        s.finish(compact), s.finish(stream)
        src = s.box.sources["wiki"]
        assert (src.allocations, src.released_overwrites, src.allocators) == ({}, frozenset(), {}), n
    assert max(sizes) <= (2, 1, 2), sizes
    assert sizes[-1] == sizes[1]
    assert Lockbox.replay(s.log).persistent() == s.box.persistent()
    assert snapshot_to_json(decode_snapshot(encode_snapshot(s.box))) == snapshot_to_json(s.box)


def test_a_released_overwriting_lock_is_forgotten_with_its_tasks_allocations() -> None:
    s = Script()
    s.start("r", "index_kafka", group="g"), s.start("k", "index_kafka", group="g")
    allocated(s.allocate("r", interval=HOUR, sequence="r-replace", granularity="timeChunk", lock_type="replace"))
    s.send(LockReleaseRequested(request_id="rel", task_id="r", data_source="wiki", interval=HOUR))
    src = s.box.sources["wiki"]
    assert src.released_overwrites, "r still runs: its allocation must not steer appends"
    s.finish("r")
    assert src.released_overwrites == frozenset(), "r ended: its allocation steers nothing any more"
    assert src.allocations, "k still runs in the group: the records stay for a repeated request"
    for other in (Lockbox.replay(s.log), decode_snapshot(encode_snapshot(s.box))):
        assert other.persistent() == s.box.persistent()


def test_a_restored_lockbox_counts_the_groups_running_tasks() -> None:
    """The running tasks per group are derived, not stored: a restored or copied lockbox counts them again
    and prunes exactly when the live one does."""
    s = Script()
    s.start("k1", "index_kafka", group="g"), s.start("k2", "index_kafka", group="g")
    allocated(_append(s, "k1", "seq-0"))
    for other in (decode_snapshot(encode_snapshot(s.box)), s.box.copy()):
        assert isinstance(other, Lockbox)
        for task in ("k1", "k2"):
            other.handle(Envelope(TaskFinished(task_id=task, status="success"), f"end-{task}", Instant(s.now),
                                  "wiki"))
            assert bool(other.sources["wiki"].allocations) == (task == "k1"), task


def _published_chunks(s: Script) -> set[tuple[int, int, str]]:
    return set(s.box.sources["wiki"].chunk_partitions)


def test_partition_counters_and_ended_tasks_stay_bounded_over_task_generations() -> None:
    """The counters per (interval, version) are those of published chunks and of chunks allocation records
    name; an idle group's unpublished chunks (released REPLACE allocations here) leave no counter behind, and
    no ended task is remembered once nothing refers to it. Replay, snapshot and live stay equal throughout."""
    s = Script()
    previous = None
    for n in range(40):
        stream, compact = f"k{n}", f"c{n}"
        s.start(stream, "index_kafka", group="stream"), s.start(compact, "compact", group=f"compact{n % 3}")
        r = allocated(s.allocate(compact, interval=HOUR, sequence=f"{compact}-r", granularity="timeChunk",
                                 lock_type="replace"))
        appended = allocated(_append(s, stream, "stream-seq", previous=previous))
        previous = appended.segment_id
        accepted(s.publish(stream, rows(appended.segment, 2 * n + 1), kind="append"))
        if n % 2:
            s.send(LockReleaseRequested(request_id=f"rel{n}", task_id=compact, data_source="wiki", interval=HOUR))
        else:
            accepted(s.publish(compact, rows(r.segment, 2 * n + 2), kind="replace"))
        src = s.box.sources["wiki"]
        named = {(a.segment.interval.start, a.segment.interval.end, a.segment.version)
                 for a in src.allocations.values()}
        assert set(src.next_partition) <= _published_chunks(s) | named
        assert (HOUR.start, HOUR.end, r.segment.version) in src.next_partition, "a running task's chunk counts"
        s.finish(compact), s.finish(stream)
        assert set(src.next_partition) == _published_chunks(s), n
        assert (HOUR.start, HOUR.end, r.segment.version) in src.next_partition or n % 2 == 1
        assert s.box.ended == frozenset(), n
        assert "ghost" not in s.box.ended
    assert Lockbox.replay(s.log).persistent() == s.box.persistent()
    restored = decode_snapshot(encode_snapshot(s.box))
    assert snapshot_to_json(restored) == snapshot_to_json(s.box)
    assert restored.sources["wiki"].next_partition == s.box.sources["wiki"].next_partition


def test_an_ended_task_is_remembered_while_its_groups_records_are() -> None:
    s = Script()
    s.start("k1", "index_kafka", group="g"), s.start("k2", "index_kafka", group="g"), s.start("x", group="x")
    allocated(_append(s, "k1", "seq-0"))
    s.finish("k1"), s.finish("x")
    assert s.box.ended == frozenset({"k1"}), "x never allocated: nothing refers to it"
    assert "has finished" in getattr(s.lock("k1"), "reason", "")
    assert "unknown" in getattr(s.lock("x"), "reason", "")
    s.finish("k2")
    assert s.box.ended == frozenset()


def test_counters_follow_the_records_a_running_group_keeps() -> None:
    """While a group runs, ids its ended members allocated are not handed out again (a member may publish
    them); once it is idle, the next allocation counts from the published ids only."""
    s = Script()
    s.start("k1", "index_kafka", group="g"), s.start("k2", "index_kafka", group="g")
    first = allocated(_append(s, "k1", "seq-a"))
    second = allocated(_append(s, "k1", "seq-b"))
    accepted(s.publish("k1", rows(first.segment, 1), kind="append"))
    s.finish("k1")
    third = allocated(_append(s, "k2", "seq-c"))
    assert third.segment.partition_id == 2, "k1's unpublished partition 1 is still named by the group's records"
    s.finish("k2")
    s.start("k3", "index_kafka", group="g")
    fourth = allocated(_append(s, "k3", "seq-d"))
    assert (fourth.segment.version, fourth.segment.partition_id) == (first.segment.version, 1), \
        "the idle group's unpublished ids are forgotten, as Druid's deleted pending segments"
    assert second.segment.partition_id == 1
    for other in (Lockbox.replay(s.log), decode_snapshot(encode_snapshot(s.box))):
        assert other.persistent() == s.box.persistent()
        assert other.sources["wiki"].next_partition == s.box.sources["wiki"].next_partition


def test_a_format_4_snapshot_is_upcast() -> None:
    """Format 4 stored the ended tasks and never-pruned counters: reading it derives both again, giving what a
    replay of the same log gives."""
    s = Script()
    s.start("k1", "index_kafka", group="g"), s.start("k2", "index_kafka", group="h")
    a = allocated(_append(s, "k1", "seq-0"))
    allocated(_append(s, "k2", "seq-1"))
    s.finish("k1")
    obj = snapshot_to_json(s.box)
    old = {**obj, "version": 4, "ended": ["k0", "k1"],
           "sources": [[ds, {**src, "nextPartition": [[HOUR.start, HOUR.end, a.segment.version, 7]],
                             "nextOverwrite": []}] for ds, src in obj["sources"]]}
    restored = lockbox_from_json(old)
    assert snapshot_to_json(restored) == obj
    assert restored.persistent() == Lockbox.replay(s.log).persistent() == s.box.persistent()
    assert restored.sources["wiki"].next_partition == s.box.sources["wiki"].next_partition
