"""A released overwriting lock's allocations never steer appends (regressions of the rows property test).

A task of a streaming group allocates under a REPLACE lock (an overwriting
version, not data until it commits), releases that lock, then appends: its
REPLACE allocation stays recorded (a repeated request gets its id back) but
must not count as a pending chunk of the interval any more. When it did, the
appends of the whole group took the uncommitted REPLACE version, and either
(history 1) a publish of segments allocated under the group's APPEND lock was
refused as "hidden at once", or (history 2) it was accepted and hid rows the
group had committed at the chunk's real version, with nothing overwriting them.
Both histories are minimized from the failing seed of
``test_lockbox_rows_property.py`` (the interval, lock types and order kept).
"""

from __future__ import annotations

from coordinator.locks.lockbox import EPOCH_VERSION, Lockbox
from coordinator.locks.snapshot import decode_snapshot, encode_snapshot
from events import (
    Envelope,
    Instant,
    Interval,
    LockReleased,
    LockReleaseRequested,
    SegmentAllocated,
    SegmentAllocationRequested,
)
from tests.unit.locks.script import Script
from tests.unit.locks.test_lockbox_correctness import accepted, allocated, rows, seen

HALF_DAY = Interval.parse("2026-01-01T00/PT12H")


def _group_with_a_released_replace_allocation() -> tuple[Script, str]:
    """Tasks ``r`` and ``k`` of one group: ``r`` allocated under a REPLACE lock of HALF_DAY and released it."""
    s = Script()
    s.start("r", "index_kafka", group="g"), s.start("k", "index_kafka", group="g")
    replaced = allocated(s.allocate("r", interval=HALF_DAY, sequence="r-replace", granularity="timeChunk",
                                    lock_type="replace"))
    assert replaced.segment.version > EPOCH_VERSION
    return s, replaced.segment.version


def _release(s: Script, task: str) -> None:
    out = s.send(LockReleaseRequested(request_id=f"rel-{task}", task_id=task, data_source="wiki",
                                      interval=HALF_DAY))
    assert any(isinstance(e, LockReleased) for e in out), out


def _commit_a_row_then_release_r(s: Script) -> SegmentAllocated:
    """Task ``k`` appends row 1 in HALF_DAY and commits it; then ``r`` releases its REPLACE lock."""
    committed = allocated(s.allocate("k", interval=HALF_DAY, sequence="k-append", granularity="timeChunk",
                                     lock_type="append"))
    accepted(s.publish("k", rows(committed.segment, 1), kind="append"))
    _release(s, "r")
    return committed


def test_an_append_after_a_released_replace_allocation_is_not_refused() -> None:
    """History 1: nothing committed at the REPLACE version, yet the group's append publish was refused."""
    s, replace_version = _group_with_a_released_replace_allocation()
    first = allocated(s.allocate("k", interval=HALF_DAY, sequence="k-append", granularity="timeChunk",
                                 lock_type="append"))
    _release(s, "r")
    mine = allocated(s.allocate("r", interval=HALF_DAY, sequence="r-append", granularity="timeChunk",
                                lock_type="append"))
    second = allocated(s.allocate("k", interval=HALF_DAY, sequence="k-append", previous=first.segment_id,
                                  granularity="timeChunk", lock_type="append"))
    for a in (first, mine, second):
        assert a.segment.version == EPOCH_VERSION != replace_version, a.segment_id
    assert [a.segment.partition_id for a in (first, mine, second)] == [0, 1, 2]
    accepted(s.publish("k", rows(first.segment, 1), rows(second.segment, 2), kind="append"))
    assert seen(s) == {1: 1, 2: 1}


def test_rows_appended_before_a_released_replace_allocation_stay_visible() -> None:
    """History 2: the group's committed rows were hidden by a later append at the REPLACE version."""
    s, replace_version = _group_with_a_released_replace_allocation()
    committed = _commit_a_row_then_release_r(s)
    later = allocated(s.allocate("r", interval=HALF_DAY, sequence="r-append", granularity="timeChunk",
                                 lock_type="append"))
    assert later.segment.version == committed.segment.version != replace_version
    accepted(s.publish("r", rows(later.segment, 2), kind="append"))
    assert seen(s) == {1: 1, 2: 1}


def test_a_released_replace_allocation_is_still_answered_again() -> None:
    """The allocation stays recorded: repeating the request gets the same id (under a lock acquired again)."""
    s, replace_version = _group_with_a_released_replace_allocation()
    _release(s, "r")
    again = allocated(s.allocate("r", interval=HALF_DAY, sequence="r-replace", granularity="timeChunk",
                                 lock_type="replace"))
    assert (again.segment.version, again.segment.partition_id) == (replace_version, 0)


def test_a_restored_or_replayed_lockbox_remembers_the_released_replace_lock() -> None:
    """Crash + restart == full replay: the snapshot and the decision log both keep the released lock's id."""
    s, _ = _group_with_a_released_replace_allocation()
    _release(s, "r")
    assert s.box.sources["wiki"].released_overwrites
    for other in (decode_snapshot(encode_snapshot(s.box)), Lockbox.replay(s.log)):
        assert other.persistent() == s.box.persistent()
        env = Envelope(SegmentAllocationRequested(
            request_id="after", task_id="r", data_source="wiki", timestamp=Instant(HALF_DAY.start),
            sequence_name="r-append", interval=HALF_DAY, lock_granularity="timeChunk", lock_type="append"),
            "after", Instant(s.now), "wiki")
        answer = [e for e in other.handle(env) if isinstance(e, SegmentAllocated)]
        assert answer and answer[0].segment.version == EPOCH_VERSION


def test_a_segment_lock_allocation_takes_the_published_chunks_version() -> None:
    """History 3 (the same seed, after the first fix): a segment-lock allocation of the appending group took
    the released REPLACE allocation's version (the newest *reserved* version of the chunk), its pending
    partition made that the chunk's version, and the group's next append hid its committed rows."""
    s = Script()
    s.start("r", "compact", group="g0")
    s.start("k", "index_kafka", group="g1"), s.start("b", "index_kafka", group="g1")
    replaced = allocated(s.allocate("r", interval=HALF_DAY, sequence="r-replace", granularity="timeChunk",
                                    lock_type="replace"))
    committed = _commit_a_row_then_release_r(s)
    batch = allocated(s.allocate("b", interval=HALF_DAY, sequence="b-segment", granularity="segment",
                                 lock_type="exclusive"))
    assert batch.segment.version == committed.segment.version != replaced.segment.version
    later = allocated(s.allocate("k", interval=HALF_DAY, sequence="k-append", previous=committed.segment_id,
                                 granularity="timeChunk", lock_type="append"))
    assert later.segment.version == committed.segment.version
    accepted(s.publish("k", rows(later.segment, 2), kind="append"))
    accepted(s.publish("b", rows(batch.segment, 3), kind="insert"))
    assert seen(s) == {1: 1, 2: 1, 3: 1}
