"""Two histories minimized from ``test_lockbox_rows_property.py`` at ``LOCKBOX_EXAMPLES=10000``.

History A: a task holding a REPLACE lock (an overwriting version, v10) also
allocates under a lock the allocation takes itself (exclusive, appending, a
newer version v14); an APPEND of its group joins that pending v14 chunk; the
REPLACE commits; the v14 append then hid the REPLACE's rows, with nothing
overwriting them. Druid's TaskLockbox never lets the two locks coexist (the
exclusive request conflicts with the group's own REPLACE lock of the same
priority), so no append can ever be written above an uncommitted REPLACE of its
group.

History B: a group holds an exclusive month lock (overwriting, v6) and a shared
month lock an allocation took (appending, v9, with a pending month segment); a
segment-lock allocation for a day was judged with the exclusive lock's version
but written at v9, next to the pending v9 month: two intervals of one version
overlap, and whichever the timeline shows, one of them was hidden.
"""

from __future__ import annotations

from coordinator.locks.lockbox import EPOCH_VERSION
from events import Interval, LockDenied, LockGranted
from tests.unit.locks.script import Script
from tests.unit.locks.test_lockbox_correctness import DAY, JANUARY, accepted, allocated, rows, seen


def test_an_append_never_hides_its_groups_committed_replace() -> None:
    """History A: the exclusive allocation beside the group's REPLACE lock is refused, so the group's APPEND
    gets the epoch version and an upgraded copy in the REPLACE's version."""
    s = Script()
    s.start("c", "compact", group="g"), s.start("k", "index_kafka", group="g")
    replaced = allocated(s.allocate("c", interval=JANUARY, sequence="c-replace", granularity="timeChunk",
                                    lock_type="replace"))
    refused = s.allocate("c", interval=DAY, sequence="c-exclusive", granularity="timeChunk", lock_type="exclusive")
    assert isinstance(refused, LockDenied) and "REPLACE lock" in refused.reason, refused
    assert not any(isinstance(e, LockGranted) for e in s.log[-2:]), "no lock is taken for a refused allocation"
    appended = allocated(s.allocate("k", interval=DAY, sequence="k-append", granularity="timeChunk",
                                    lock_type="append"))
    assert appended.segment.version == EPOCH_VERSION
    accepted(s.publish("c", rows(replaced.segment, 1), kind="replace"))
    accepted(s.publish("k", rows(appended.segment, 2), kind="append"))
    assert seen(s) == {1: 1, 2: 1}


def test_a_shared_lock_beside_the_groups_replace_lock_allocates_nothing() -> None:
    """The same history with a shared lock the task requested itself (it does not overwrite either)."""
    s = Script()
    s.start("c", "compact", group="g")
    allocated(s.allocate("c", interval=JANUARY, sequence="c-replace", granularity="timeChunk", lock_type="replace"))
    s.lock("c", interval=DAY, lock_type="shared")
    refused = s.allocate("c", interval=DAY, sequence="c-shared", granularity="timeChunk", lock_type="shared")
    assert isinstance(refused, LockDenied) and "REPLACE lock" in refused.reason, refused


def test_an_overwriting_lock_beside_the_groups_replace_lock_still_allocates() -> None:
    """An exclusive timeChunk lock the task requested itself overwrites (Druid's batch overwrite): its
    allocations write its version, which no append joins, so they are not refused."""
    s = Script()
    s.start("c", "compact", group="g")
    allocated(s.allocate("c", interval=JANUARY, sequence="c-replace", granularity="timeChunk", lock_type="replace"))
    s.lock("c", interval=DAY, lock_type="exclusive")
    allocated(s.allocate("c", interval=DAY, sequence="c-insert", granularity="timeChunk", lock_type="exclusive"))


def test_a_segment_lock_allocation_never_overlaps_a_pending_chunk_of_its_version() -> None:
    """History B: the day allocation would be written at the pending month's version: refused (Druid's
    "conflicting segment"), in the day and in every finer bucket."""
    s = Script()
    s.start("t0", "index_kafka", group="g"), s.start("t1", "index_kafka", group="g")
    s.lock("t0", interval=JANUARY, lock_type="exclusive")
    month = allocated(s.allocate("t0", interval=JANUARY, sequence="t0-shared", granularity="timeChunk",
                                 lock_type="shared"))
    day = s.allocate("t1", interval=DAY, sequence="t1-segment", granularity="segment", lock_type="exclusive")
    assert isinstance(day, LockDenied) and "one interval per time chunk" in day.reason, day
    accepted(s.publish("t0", rows(month.segment, 1)))
    assert seen(s) == {1: 1}


def test_an_append_between_two_commits_of_one_replace_lock_is_upgraded() -> None:
    """History C (seed 5 at 10000 examples): two members of a compaction group share one REPLACE lock of the
    month and commit twice (January 1, then January 2). An append into January 2 committed between the two
    commits was not recorded under the lock (it had committed once), got no copy (January 2 was not replaced
    yet), and the second commit hid it."""
    second_day = Interval.parse("2026-01-02/P1D")
    s = Script()
    s.start("c1", "compact", group="g"), s.start("c2", "compact", group="g"), s.start("k", "index_kafka")
    s.lock("c1", interval=JANUARY, lock_type="replace")
    later = allocated(s.allocate("c2", interval=second_day, sequence="c2", granularity="timeChunk",
                                 lock_type="replace"))
    first = allocated(s.allocate("c1", interval=DAY, sequence="c1", granularity="timeChunk", lock_type="replace"))
    accepted(s.publish("c1", rows(first.segment, 1), kind="replace"))
    appended = allocated(s.allocate("k", interval=second_day, sequence="k", granularity="timeChunk",
                                    lock_type="append"))
    accepted(s.publish("k", rows(appended.segment, 2), kind="append"))
    done = accepted(s.publish("c2", rows(later.segment, 3), kind="replace"))
    assert done.upgraded_from_segment_ids == (appended.segment_id,)
    assert seen(s) == {1: 1, 2: 1, 3: 1}


def test_an_append_at_the_replace_version_is_not_copied_again() -> None:
    """The first fix of history C copied too much: an append into the REPLACE's committed chunk takes its
    version, is visible already, and a second commit under the lock must not copy it (visible twice)."""
    s = Script()
    s.start("c", "compact", group="g"), s.start("k", "index_kafka")
    first = allocated(s.allocate("c", interval=JANUARY, sequence="c1", granularity="timeChunk", lock_type="replace"))
    accepted(s.publish("c", rows(first.segment, 1), kind="replace"))
    appended = allocated(s.allocate("k", interval=DAY, sequence="k", granularity="timeChunk", lock_type="append"))
    assert appended.segment.version == first.segment.version
    second = allocated(s.allocate("c", interval=JANUARY, sequence="c2", granularity="timeChunk", lock_type="replace"))
    accepted(s.publish("k", rows(appended.segment, 2), kind="append"))
    accepted(s.publish("c", rows(second.segment, 3), kind="replace"))
    assert seen(s) == {1: 1, 2: 1, 3: 1}
