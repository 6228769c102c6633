"""Issue 13, "wrong today": one given/when/then test per broken invariant.

Rows are modelled by the segment ``size``: each published original segment gets
a unique size (its row-set id) and the upgraded copies the lockbox makes keep
it. Folding the accepted publishes through the timeline (every segment online)
and looking up an instant inside each original segment's interval tells which
row sets a query would see, and how many times.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from coordinator.timeline.timeline import Timeline
from events import (
    Interval,
    LockDenied,
    LockGranted,
    LockWaiting,
    PublishAccepted,
    PublishRejected,
    SegmentAllocated,
    SegmentDescriptor,
)
from tests.unit.locks.script import DAY, Script, seg

HOUR5 = Interval.parse("2026-01-01T05/PT1H")
HOUR6 = Interval.parse("2026-01-01T06/PT1H")
NEXT_DAY = Interval.parse("2026-01-02/P1D")
JANUARY = Interval.parse("2026-01-01/P1M")


def allocated(e: object) -> SegmentAllocated:
    assert isinstance(e, SegmentAllocated), e
    return e


def accepted(e: object) -> PublishAccepted:
    assert isinstance(e, PublishAccepted), e
    return e


def rows(segment: SegmentDescriptor, row_set: int) -> SegmentDescriptor:
    return replace(segment, size=row_set)


def seen(s: Script) -> dict[int, int]:
    """How many times a query sees each row set (keyed by size), looking inside each original's interval."""
    published: dict[Any, SegmentDescriptor] = {}
    for e in s.log:
        if isinstance(e, PublishAccepted):
            for x in e.segments:
                published[x.id] = x
    tl = Timeline.build("wiki", published.values(), {sid: (x, ("h1",)) for sid, x in published.items()})
    where: dict[int, int] = {}  # row set -> an instant inside its original (first published) interval
    for x in sorted(published.values(), key=lambda x: x.version):
        where.setdefault(x.size, x.interval.start)
    out: dict[int, int] = {}
    for row_set, at in where.items():
        served = [published[e.segment_id] for e in tl.lookup(Interval(at, at + 1))]
        out[row_set] = sum(1 for x in served if x.size == row_set)
    return out


# -- 1. allocation respects the existing time chunk ----------------------------------------------
def test_second_task_of_a_group_allocates_the_next_partition_of_the_existing_version() -> None:
    s = Script()
    s.start("k1", "index_kafka", group="supervisor"), s.start("k2", "index_kafka", group="supervisor")
    first = allocated(s.allocate("k1", interval=HOUR5, sequence="s1", granularity="timeChunk"))
    accepted(s.publish("k1", rows(first.segment, 1)))
    s.finish("k1")
    second = allocated(s.allocate("k2", interval=HOUR5, sequence="s2", granularity="timeChunk"))
    assert (second.segment.version, second.segment.partition_id) == (first.segment.version, 1)
    accepted(s.publish("k2", rows(second.segment, 2)))
    assert seen(s) == {1: 1, 2: 1}


def test_under_an_exclusive_lock_the_task_requested_itself_allocation_overwrites() -> None:
    """Druid's batch overwrite: the task locks the interval first, then writes its lock's version."""
    s = Script()
    s.start("k", "index_kafka")
    old = allocated(s.allocate("k", sequence="k", granularity="timeChunk"))
    accepted(s.publish("k", rows(old.segment, 1)))
    s.finish("k")
    s.start("reindex")
    lock = s.lock("reindex").lock  # type: ignore[attr-defined]
    new = allocated(s.allocate("reindex", sequence="r", granularity="timeChunk"))
    assert (new.segment.version, new.segment.partition_id) == (lock.version, 0) and lock.version > old.segment.version
    assert not lock.for_allocation
    accepted(s.publish("reindex", rows(new.segment, 2)))
    assert seen(s) == {1: 0, 2: 1}  # the re-index replaced what it read


def test_a_day_request_over_hourly_chunks_falls_back_to_the_chunk_or_a_finer_bucket() -> None:
    s = Script()
    s.start("batch")
    v = s.lock("batch").lock.version  # type: ignore[attr-defined]
    accepted(s.publish("batch", seg(v, 0, interval=HOUR5), seg(v, 0, interval=HOUR6)))
    s.finish("batch")
    s.start("k", "index_kafka")
    inside = allocated(s.allocate("k", interval=DAY, sequence="a", granularity="timeChunk",
                                  timestamp=HOUR5.start + 60_000))
    assert (inside.segment.interval, inside.segment.version, inside.segment.partition_id) == (HOUR5, v, 1)
    ten = Interval.parse("2026-01-01T10/PT1H")
    outside = allocated(s.allocate("k", interval=DAY, sequence="b", granularity="timeChunk",
                                   timestamp=ten.start + 60_000))
    assert outside.segment.interval == ten


def test_an_allocation_that_fits_no_bucket_is_refused_not_made_over_existing_chunks() -> None:
    s = Script()
    s.start("batch")
    odd = Interval.parse("2026-01-01T10:00:00.000Z/2026-01-01T10:00:00.500Z")
    v = s.lock("batch").lock.version  # type: ignore[attr-defined]
    accepted(s.publish("batch", seg(v, 0, interval=odd)))
    s.finish("batch")
    s.start("k", "index_kafka")
    refused = s.allocate("k", interval=DAY, sequence="a", granularity="timeChunk", timestamp=odd.start + 700)
    assert isinstance(refused, LockDenied), refused
    assert all(lk.interval != DAY for lk in s.box.live_locks())


# -- 2. lineage idempotency includes the interval ------------------------------------------------
def test_the_same_lineage_for_another_interval_is_refused() -> None:
    s = Script()
    s.start("k", "index_kafka")
    first = allocated(s.allocate("k", interval=DAY, sequence="s", granularity="timeChunk"))
    other = s.allocate("k", interval=NEXT_DAY, sequence="s", granularity="timeChunk")
    assert isinstance(other, LockDenied), other
    assert first.segment_id in other.reason
    again = allocated(s.allocate("k", interval=DAY, sequence="s", granularity="timeChunk"))
    assert again.segment_id == first.segment_id


# -- 3. a repeated allocation does what a fresh one does --------------------------------------------
def test_a_resent_allocation_by_another_member_of_the_group_joins_the_lock() -> None:
    s = Script()
    s.start("r1", "index_kafka", group="g"), s.start("r2", "index_kafka", group="g")
    first = allocated(s.allocate("r1", sequence="s"))  # a segment lock on the new partition
    again = allocated(s.allocate("r2", sequence="s"))
    assert again.segment_id == first.segment_id
    assert "r2" in s.box.sources["wiki"].holders[first.lock_id or ""]
    accepted(s.publish("r2", rows(first.segment, 1)))


def test_a_resent_allocation_under_a_revoked_lock_is_refused() -> None:
    s = Script()
    s.start("c", "compact"), s.start("k", "index_kafka")
    allocated(s.allocate("c", sequence="s", granularity="timeChunk"))
    assert isinstance(s.lock("k"), LockGranted)  # revokes c's lock
    again = s.allocate("c", sequence="s", granularity="timeChunk")
    assert isinstance(again, LockDenied) and "revoked" in again.reason


# -- 4. stream offsets compare per partition ------------------------------------------------------
def test_offsets_compare_only_shared_partitions_and_merge() -> None:
    s = Script()
    s.start("a", "index_kafka", group="g1"), s.start("b", "index_kafka", group="g2")
    va = allocated(s.allocate("a", sequence="a")).segment  # segment locks: the groups do not block each other
    accepted(s.publish("a", rows(va, 1), start={"p0": 0, "p1": 0}, end={"p0": 100, "p1": 50}))
    vb = allocated(s.allocate("b", sequence="b")).segment
    accepted(s.publish("b", rows(vb, 2), start={"p1": 50, "p2": 0}, end={"p1": 80, "p2": 10}))
    assert s.box.sources["wiki"].metadata == {"p0": 100, "p1": 80, "p2": 10}


def test_a_resent_publish_is_accepted_and_changes_nothing_and_offsets_never_move_back() -> None:
    s = Script()
    s.start("k", "index_kafka")
    one = allocated(s.allocate("k", sequence="s", granularity="timeChunk")).segment
    accepted(s.publish("k", rows(one, 1), start={"p0": 0}, end={"p0": 100}))
    two = allocated(s.allocate("k", sequence="s", previous=str(one.id), granularity="timeChunk")).segment
    accepted(s.publish("k", rows(two, 2), start={"p0": 100}, end={"p0": 200}))
    accepted(s.publish("k", rows(one, 1), start={"p0": 0}, end={"p0": 100}))  # re-sent
    assert s.box.sources["wiki"].metadata == {"p0": 200}
    three = allocated(s.allocate("k", sequence="s", previous=str(two.id), granularity="timeChunk")).segment
    back = s.publish("k", rows(three, 3), start={"p0": 200}, end={"p0": 150})
    assert isinstance(back, PublishRejected) and "p0" in back.reason
    assert s.box.sources["wiki"].metadata == {"p0": 200}


# -- 5. concurrent APPEND and REPLACE ---------------------------------------------------------------
def _append_replace(order: str, append_interval: Interval = HOUR5, replace_interval: Interval = DAY,
                    existing: bool = True) -> Script:
    """Given existing data (row set 1) and a REPLACE lock, run the steps in ``order``.

    A = the append task allocates, C = it commits (row set 2), R = the replace task
    commits (row set 3), E = the replace task ends.
    """
    s = Script()
    if existing:
        s.start("batch")
        v = s.lock("batch", interval=replace_interval).lock.version  # type: ignore[attr-defined]
        accepted(s.publish("batch", seg(v, 0, interval=replace_interval, size=1)))
        s.finish("batch")
    s.start("app", "index_kafka"), s.start("rep", "compact")
    assert isinstance(s.lock("app", interval=append_interval, lock_type="append"), LockGranted)
    r = s.lock("rep", interval=replace_interval, lock_type="replace")
    assert isinstance(r, LockGranted)
    mine: list[SegmentDescriptor] = []
    for step in order:
        if step == "A":
            mine.append(allocated(s.allocate("app", interval=append_interval, sequence="a", granularity="timeChunk",
                                             lock_type="append")).segment)
        elif step == "C":
            accepted(s.publish("app", rows(mine[-1], 2), **_kind("append")))
        elif step == "R":
            accepted(s.publish("rep", seg(r.lock.version, 0, interval=replace_interval, size=3), **_kind("replace")))
        elif step == "E":
            s.finish("rep")
    return s


def _kind(kind: str) -> dict[str, str]:
    return {"kind": kind} if KINDS else {}


KINDS = True


def test_append_then_replace_upgrades_once() -> None:
    for order in ("ACR", "ACRE", "RACE", "ARCE", "AREC", "RAEC", "REAC"):
        s = _append_replace(order)
        assert seen(s) == {1: 0, 2: 1, 3: 1}, order


def test_append_without_existing_data_takes_the_epoch_version_and_replace_supersedes_it() -> None:
    for order in ("ACR", "ARC", "AREC", "RAC"):
        s = _append_replace(order, existing=False)
        assert seen(s) == {2: 1, 3: 1}, order


def test_a_day_append_inside_a_month_replace_is_upgraded_into_the_month() -> None:
    for order in ("ACR", "ARC", "AREC", "RAEC"):
        s = _append_replace(order, append_interval=DAY, replace_interval=JANUARY)
        assert seen(s) == {1: 0, 2: 1, 3: 1}, order
    for order in ("ACR", "ARC", "AREC"):  # no data yet: the append is a day segment of the epoch version
        s = _append_replace(order, append_interval=DAY, replace_interval=JANUARY, existing=False)
        copies = [x for e in s.log if isinstance(e, PublishAccepted) for x in e.segments
                  if str(x.id) in e.upgraded_segment_ids]
        assert [x.interval for x in copies] == [JANUARY], order
        assert seen(s) == {2: 1, 3: 1}, order


# -- 6. a task group never blocks itself ----------------------------------------------------------
def test_a_segment_lock_inside_the_groups_time_chunk_lock_is_granted() -> None:
    s = Script()
    s.start("t1", group="g"), s.start("t2", group="g")
    assert isinstance(s.lock("t1", interval=DAY), LockGranted)
    got = s.lock("t2", interval=HOUR5, granularity="segment", partitions=(0,))
    assert isinstance(got, LockGranted) and not isinstance(got, LockWaiting), got


def test_a_replace_allocation_of_a_version_goes_into_that_versions_existing_chunk() -> None:
    """Found by the rows property test: a group holds REPLACE locks on the day (version V) and the month
    (a newer version). A member allocating half a day joins the day lock (V) and used to get a half-day
    chunk of V over the day chunk of V its group had already published there; the timeline keeps one
    interval per version, so those rows were never visible. As Druid (SegmentAllocateAction,
    createNewSegment), the existing chunk of the version holding the row wins: the next partition of it."""
    s = Script()
    s.start("t0", group="g"), s.start("t3", group="g")
    half = Interval.parse("2026-01-01/PT12H")
    day = allocated(s.allocate("t0", interval=DAY, sequence="t0", granularity="timeChunk", lock_type="replace"))
    accepted(s.publish("t0", rows(day.segment, 1), kind="replace"))
    month = s.lock("t0", interval=JANUARY, lock_type="replace")
    assert isinstance(month, LockGranted) and month.lock.version > day.segment.version
    second = allocated(s.allocate("t3", interval=half, sequence="t3", granularity="timeChunk", lock_type="replace"))
    assert (second.segment.interval, second.segment.version, second.segment.partition_id) == \
        (DAY, day.segment.version, 1)
    accepted(s.publish("t3", rows(second.segment, 2), kind="replace"))
    assert seen(s) == {1: 1, 2: 1}
