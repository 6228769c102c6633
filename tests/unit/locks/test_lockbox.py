"""The lockbox, bullet by bullet: given past events, when a request, then these decisions."""

from __future__ import annotations

from coordinator.locks.lockbox import Lockbox, decide
from events import (
    Envelope,
    Instant,
    Interval,
    LockDenied,
    LockGranted,
    LockReleased,
    LockRequested,
    LockRevoked,
    LockWaiting,
    PublishAccepted,
    PublishRejected,
    SegmentAllocated,
    SegmentAllocationRequested,
    TaskStarted,
    format_instant,
    parse_instant,
)
from tests.unit.locks.script import BASE, DAY, Script, seg

HOUR = Interval.parse("2026-01-01T05/PT1H")
TWO_DAYS = Interval.parse("2026-01-01/P2D")


def granted(e: object) -> LockGranted:
    assert isinstance(e, LockGranted), e
    return e


def batch_published(s: Script, partitions: int) -> str:
    """Given: a batch task locked the day, published ``partitions`` segments and ended. Returns their version."""
    s.start("batch")
    version = granted(s.lock("batch")).lock.version
    assert isinstance(s.publish("batch", *(seg(version, p) for p in range(partitions))), PublishAccepted)
    s.finish("batch")
    return version


# -- requests, tasks, priorities ---------------------------------------------------------------
def test_default_priorities_by_task_type_and_overrides() -> None:
    s = Script()
    for task, kind in (("k", "index_kafka"), ("b", "index_parallel"), ("c", "compact"), ("o", "kill")):
        s.start(task, kind)
    assert [s.box.tasks[t].priority for t in "kbco"] == [75, 50, 25, 0]
    s.start("p", "compact", priority=90)
    assert s.box.tasks["p"].priority == 90
    assert granted(s.lock("c", priority=60)).lock.priority == 60


def test_requests_from_unknown_or_finished_tasks_and_empty_intervals_are_denied() -> None:
    s = Script()
    d = s.lock("ghost")
    assert isinstance(d, LockDenied) and "unknown" in d.reason
    s.start("t")
    s.finish("t")
    d = s.lock("t")
    assert isinstance(d, LockDenied) and "finished" in d.reason
    s.start("u")
    d = s.lock("u", interval=Interval(DAY.start, DAY.start))
    assert isinstance(d, LockDenied) and "empty" in d.reason
    d = s.lock("u", granularity="segment", lock_type="append", partitions=(0,))
    assert isinstance(d, LockDenied) and "timeChunk granularity only" in d.reason
    s.start("other", data_source="clicks")
    d = s.lock("other")
    assert isinstance(d, LockDenied) and "clicks" in d.reason


# -- conflicts ------------------------------------------------------------------------------------
def test_an_existing_time_chunk_lock_conflicts_with_any_overlapping_request() -> None:
    s = Script()
    s.start("a"), s.start("b")
    granted(s.lock("a", interval=DAY))
    assert isinstance(s.lock("b", interval=HOUR, granularity="segment", partitions=(3,)), LockWaiting)
    assert isinstance(s.lock("b", interval=Interval.parse("2026-01-02/P1D")), LockGranted)  # adjacent: fine


def test_segment_locks_on_different_partitions_of_one_chunk_coexist() -> None:
    s = Script()
    s.start("append", "index_kafka"), s.start("compact", "compact")
    granted(s.lock("append", granularity="segment", partitions=(5,)))
    granted(s.lock("compact", granularity="segment", partitions=(0, 1, 2)))
    same = s.lock("compact", granularity="segment", partitions=(5,), rid="same-partition")
    assert isinstance(same, LockWaiting)
    other_interval = s.lock("compact", interval=TWO_DAYS, granularity="segment", partitions=(9,))
    assert isinstance(other_interval, LockWaiting)
    time_chunk = s.lock("compact", interval=HOUR)
    assert isinstance(time_chunk, LockWaiting)


def test_compatibility_shared_append_replace() -> None:
    s = Script()
    for t in ("s1", "s2", "a1", "a2", "r1", "r2", "x"):
        s.start(t)
    granted(s.lock("s1", lock_type="shared"))
    granted(s.lock("s2", lock_type="shared"))
    assert isinstance(s.lock("x", lock_type="exclusive"), LockWaiting)
    t = Script()
    for task in ("a1", "a2", "r1", "r2"):
        t.start(task)
    granted(t.lock("a1", interval=HOUR, lock_type="append"))
    granted(t.lock("a2", interval=HOUR, lock_type="append"))
    granted(t.lock("r1", interval=DAY, lock_type="replace"))  # encloses the appends
    assert isinstance(t.lock("r2", interval=DAY, lock_type="replace"), LockWaiting)
    assert isinstance(t.lock("a2", interval=TWO_DAYS, lock_type="append"), LockWaiting)  # not enclosed


# -- decisions ----------------------------------------------------------------------------------
def test_strictly_higher_priority_revokes_every_incompatible_lock_in_one_event() -> None:
    s = Script()
    s.start("c1", "compact"), s.start("c2", "compact"), s.start("k", "index_kafka")
    l1 = granted(s.lock("c1", interval=Interval.parse("2026-01-01T00/PT12H"))).lock
    l2 = granted(s.lock("c2", interval=Interval.parse("2026-01-01T12/PT12H"))).lock
    out = s.send(LockRequested(
        request_id="k1", task_id="k", group_id="k", task_type="index_kafka", data_source="wiki", interval=DAY,
        granularity="timeChunk", lock_type="exclusive"))
    revoked = [e for e in out if isinstance(e, LockRevoked)]
    assert len(revoked) == 1 and revoked[0].lock_ids == (l1.lock_id, l2.lock_id) and revoked[0].request_id == "k1"
    assert granted(out[-1]).revoked_lock_ids == (l1.lock_id, l2.lock_id)
    assert all(s.box.sources["wiki"].locks[i].revoked for i in (l1.lock_id, l2.lock_id))


def test_equal_priority_waits_and_waiters_are_granted_in_arrival_order_when_freed() -> None:
    s = Script()
    for t in ("holder", "w1", "w2"):
        s.start(t)
    granted(s.lock("holder"))
    assert isinstance(s.lock("w1", rid="w1-req"), LockWaiting)
    assert isinstance(s.lock("w2", rid="w2-req"), LockWaiting)
    out = s.finish("holder")
    grants = [e for e in out if isinstance(e, LockGranted)]
    assert [g.request_id for g in grants] == ["w1-req"]  # w2 still conflicts with w1's new lock
    assert [w.request.request_id for w in s.box.sources["wiki"].waiters] == ["w2-req"]
    out = s.finish("w1")
    assert [e.request_id for e in out if isinstance(e, LockGranted)] == ["w2-req"]


def test_waiters_are_reexamined_after_a_revocation() -> None:
    s = Script()
    s.start("low", "compact"), s.start("mid", "index_parallel"), s.start("high", "index_kafka")
    granted(s.lock("low", interval=HOUR))
    assert isinstance(s.lock("mid", interval=Interval.parse("2026-01-01T05/PT30M"), priority=25,
                             rid="mid-req"), LockWaiting)
    out = s.send(LockRequested(
        request_id="high-req", task_id="high", group_id="high", task_type="index_kafka", data_source="wiki",
        interval=Interval.parse("2026-01-01T05:30/PT30M"), granularity="timeChunk", lock_type="exclusive"))
    assert [type(e).__name__ for e in out] == ["LockRevoked", "LockGranted", "LockGranted"]
    assert [e.request_id for e in out if isinstance(e, LockGranted)] == ["high-req", "mid-req"]


def test_idempotent_re_request_returns_the_groups_lock_and_a_revoked_one_stays_revoked() -> None:
    s = Script()
    s.start("t1", group="g"), s.start("t2", group="g"), s.start("k", "index_kafka")
    first = granted(s.lock("t1", interval=DAY, priority=10)).lock
    again = granted(s.lock("t2", interval=HOUR, priority=10))
    assert again.lock == first and s.box.sources["wiki"].holders[first.lock_id] == {"t1", "t2"}
    granted(s.lock("k", interval=HOUR))
    back = granted(s.lock("t1", interval=HOUR, priority=10))
    assert back.lock.lock_id == first.lock_id and back.lock.revoked and "revoked" in (back.reason or "")


# -- versions -----------------------------------------------------------------------------------
def test_lock_versions_follow_the_request_time_and_never_lose_to_existing_data() -> None:
    s = Script()
    s.start("t")
    lock = granted(s.lock("t")).lock
    assert lock.version == format_instant(BASE + 1000)
    newer = "2027-06-01T00:00:00.000Z"  # data published earlier by a coordinator whose clock ran ahead
    assert isinstance(s.publish("t", seg(lock.version)), PublishAccepted)
    s.box.apply(PublishAccepted(request_id="old", task_id="t", segments=(seg(newer, interval=HOUR),)))
    s.finish("t")
    s.start("u")
    assert granted(s.lock("u")).lock.version == "2027-06-01T00:00:00.001Z"


def test_append_locks_have_the_epoch_version_and_segment_locks_their_segments_version() -> None:
    s = Script()
    v = batch_published(s, partitions=2)
    s.start("stream", "index_kafka"), s.start("compact", "compact")
    assert granted(s.lock("stream", lock_type="append")).lock.version == "1970-01-01T00:00:00.000Z"
    s.finish("stream")  # a timeChunk append lock and a segment lock on the chunk do conflict
    assert granted(s.lock("compact", granularity="segment", partitions=(0, 1))).lock.version == v


# -- allocation ---------------------------------------------------------------------------------
def test_allocation_is_consecutive_idempotent_and_never_reuses_ids() -> None:
    s = Script()
    s.start("k1", "index_kafka"), s.start("k2", "index_kafka")
    a = s.allocate("k1", sequence="s1")
    b = s.allocate("k1", sequence="s1", previous=a.segment_id)  # type: ignore[attr-defined]
    c = s.allocate("k2", sequence="s2")
    assert [x.segment.partition_id for x in (a, b, c)] == [0, 1, 2]  # type: ignore[attr-defined]
    again = s.allocate("k1", sequence="s1", previous=a.segment_id)  # type: ignore[attr-defined]
    assert isinstance(again, SegmentAllocated) and again.segment_id == b.segment_id  # type: ignore[attr-defined]
    skip1 = s.allocate("k2", sequence="s9", skip_lineage=True, previous="whatever")
    skip2 = s.allocate("k2", sequence="s9", skip_lineage=True, previous="something else")
    assert skip1.segment_id == skip2.segment_id  # type: ignore[attr-defined]
    s.finish("k1")
    s.start("k3", "index_kafka")
    d = s.allocate("k3", sequence="new")
    assert d.segment.partition_id == 4, "k2's records keep the chunk's ids"  # type: ignore[attr-defined]
    s.finish("k2"), s.finish("k3")
    s.start("k4", "index_kafka")  # every allocator is gone (their records pruned): a fresh id all the same
    fresh = s.allocate("k4", sequence="new")
    assert isinstance(fresh, SegmentAllocated)
    assert fresh.segment_id not in {x.segment_id for x in (a, b, c, skip1, d)}  # type: ignore[attr-defined]


def test_segment_lock_allocation_locks_the_new_partition_atomically() -> None:
    s = Script()
    s.start("k", "index_kafka")
    out = s.send(SegmentAllocationRequested(
        request_id="alloc", task_id="k", data_source="wiki", timestamp=Instant(DAY.start + 5), sequence_name="q",
        interval=DAY, lock_granularity="segment", lock_type="exclusive"))
    assert [type(e).__name__ for e in out] == ["LockGranted", "SegmentAllocated"]
    lock, allocated = out[0].lock, out[1]  # type: ignore[attr-defined]
    assert lock.granularity == "segment" and lock.partition_ids == (allocated.segment.partition_id,)
    assert allocated.lock_id == lock.lock_id


def test_append_plus_compaction_with_segment_locks_has_no_contention_and_survives_a_restart() -> None:
    """Seed 001: a streaming task appends while compaction overwrites the same chunk."""
    s = Script()
    v = batch_published(s, partitions=2)
    s.start("compact", "compact"), s.start("kafka", "index_kafka")
    granted(s.lock("compact", granularity="segment", partitions=(0, 1)))  # inputs
    out1 = s.allocate("compact", sequence="c")
    app = s.allocate("kafka", sequence="k")  # appending into the same chunk meanwhile
    assert isinstance(out1, SegmentAllocated) and isinstance(app, SegmentAllocated)
    assert out1.segment.version == app.segment.version == v
    assert out1.segment.overshadowed_segments == (0, 1) and app.segment.overshadowed_segments == ()
    assert (out1.segment.partition_id, app.segment.partition_id) == (32768, 2)  # Druid's overwrite ids
    assert out1.segment.shard_spec == {"type": "numbered_overwrite", "partitionId": 32768, "startRootPartitionId": 0,
                                       "endRootPartitionId": 2, "minorVersion": 1, "atomicUpdateGroupSize": 1}
    # restart: a lockbox rebuilt from the decision log decides the same from here on
    rebuilt = Lockbox.replay(s.log)
    assert rebuilt.persistent() == s.box.persistent()
    s.box = rebuilt
    out2 = s.allocate("compact", sequence="c", previous=out1.segment_id)
    assert isinstance(out2, SegmentAllocated) and out2.segment.atomic_update_group == (32768, 32769)
    assert out1.segment.atomic_update_group == (32768,)  # provisional: the second output was not known yet
    done = s.publish("compact", out1.segment, out2.segment)
    assert isinstance(done, PublishAccepted)
    assert [(x.overshadowed_segments, x.atomic_update_group) for x in done.segments] == [((0, 1), (32768, 32769))] * 2
    assert [x.overwrite_spec for x in done.segments] == [(0, 2, 1, 2)] * 2  # Druid's form, in agreement
    assert isinstance(s.publish("kafka", app.segment), PublishAccepted)


# -- publish --------------------------------------------------------------------------------------
def test_publish_needs_a_covering_live_lock() -> None:
    s = Script()
    s.start("t"), s.start("k", "index_kafka")
    v = granted(s.lock("t", priority=10)).lock.version
    assert "not covered" in s.publish("t", seg(v, interval=TWO_DAYS)).reason  # type: ignore[attr-defined]
    assert "newer than lock" in s.publish("t", seg("9999")).reason  # type: ignore[attr-defined]
    granted(s.lock("k"))  # revokes t's lock
    rejected = s.publish("t", seg(v))
    assert isinstance(rejected, PublishRejected) and "revoked" in rejected.reason


def test_stream_offsets_compare_and_swap() -> None:
    s = Script()
    s.start("k", "index_kafka")
    v = granted(s.lock("k", lock_type="append")).lock.version
    assert isinstance(s.publish("k", seg(v, 0), start={"p0": 0}, end={"p0": 100}, kind="append"), PublishAccepted)
    bad = s.publish("k", seg(v, 1), start={"p0": 0}, end={"p0": 200}, kind="append")
    assert isinstance(bad, PublishRejected) and "does not match" in bad.reason
    assert isinstance(s.publish("k", seg(v, 1), start={"p0": 100}, end={"p0": 200}, kind="append"), PublishAccepted)
    assert s.box.sources["wiki"].metadata == {"p0": 200}


def test_replace_commit_upgrades_appends_and_later_appends_come_with_their_copy() -> None:
    s = Script()
    v1 = batch_published(s, partitions=1)
    s.start("append", "index_kafka"), s.start("replace", "compact")
    a = granted(s.lock("append", interval=HOUR, lock_type="append")).lock
    r = granted(s.lock("replace", interval=DAY, lock_type="replace")).lock
    assert a.version == "1970-01-01T00:00:00.000Z" and r.version > v1
    early = seg(v1, 1, interval=HOUR)
    assert isinstance(s.publish("append", early, kind="append"), PublishAccepted)
    commit = s.publish("replace", seg(r.version, 0), kind="replace")
    assert isinstance(commit, PublishAccepted)
    upgraded = [x for x in commit.segments if str(x.id) in commit.upgraded_segment_ids]
    # into the replace's version and the interval of its segment holding the append
    assert [(x.interval, x.version, x.partition_id) for x in upgraded] == [(DAY, r.version, 1)]
    assert commit.upgraded_from_segment_ids == (str(early.id),)
    late = seg(v1, 2, interval=HOUR)
    after = s.publish("append", late, kind="append")
    assert isinstance(after, PublishAccepted)
    assert [(x.interval, x.version, x.partition_id) for x in after.segments] == [(HOUR, v1, 2), (DAY, r.version, 2)]


# -- task end, replay ----------------------------------------------------------------------------
def test_task_end_releases_and_a_group_lock_goes_with_its_last_member() -> None:
    s = Script()
    s.start("t1", group="g"), s.start("t2", group="g")
    lock = granted(s.lock("t1")).lock
    granted(s.lock("t2"))
    out = s.finish("t1")
    assert next(e for e in out if isinstance(e, LockReleased)).lock_ids == (lock.lock_id,)
    assert lock.lock_id in s.box.sources["wiki"].locks
    s.finish("t2")
    assert s.box.sources["wiki"].locks == {}


def test_decide_is_pure_and_replay_rebuilds_the_state() -> None:
    s = Script()
    s.start("t")
    before = s.box.persistent()
    env = Envelope(TaskStarted(task_id="u", group_id="u", task_type="index", data_source="wiki"), "x",
                   Instant(parse_instant("2026-01-10T00:00:00Z")), "wiki")
    assert [type(e).__name__ for e in decide(s.box, env)] == ["TaskRegistered"]
    assert s.box.persistent() == before
    granted(s.lock("t"))
    assert Lockbox.replay(s.log).persistent() == s.box.persistent()
