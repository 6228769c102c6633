"""A REPLACE of a finer interval than an appended chunk (a day inside a month appended at the epoch version).

Druid refuses it at two points, and so does the lockbox; no committed row is ever lost or hidden at once:

- the REPLACE commit, while an uncommitted appending allocation of an older version overlaps one of its
  segments without lying inside it ("Replacing with a finer segment granularity than a concurrent append is
  unsupported", IndexerSQLMetadataStorageCoordinator's pending segment upgrade);
- a later appending allocation into the chunk the day only partly overshadows ("already has [n] versions":
  the interval shows more than one visible version, a new segment there would be partly hidden at once).

An appended segment that lies inside the replaced day is upgraded as before.
"""

from __future__ import annotations

from events import Interval, LockDenied, LockReleaseRequested, PublishRejected, TaskFinished
from tests.unit.locks.script import Script
from tests.unit.locks.test_lockbox_correctness import accepted, allocated, rows, seen

MONTH = Interval.parse("2026-01-01/P1M")
JAN2 = Interval.parse("2026-01-02/P1D")
JAN2_HOUR = Interval.parse("2026-01-02T05/PT1H")


def _append(s: Script, task: str, interval: Interval, sequence: str = "seq") -> object:
    return s.allocate(task, interval=interval, sequence=sequence, granularity="timeChunk", lock_type="append")


def _replace_day(s: Script, task: str) -> object:
    return s.allocate(task, interval=JAN2, sequence=f"{task}-r", granularity="timeChunk", lock_type="replace",
                      timestamp=JAN2.start)


def test_a_day_replace_is_refused_while_a_month_append_is_pending() -> None:
    s = Script()
    s.start("k", "index_kafka", group="g"), s.start("c", "compact", group="g")  # one group: the locks coexist
    month = allocated(_append(s, "k", MONTH))
    day = allocated(_replace_day(s, "c"))
    refused = s.publish("c", rows(day.segment, 2), kind="replace")
    assert isinstance(refused, PublishRejected), refused
    assert refused.reason.startswith("Replacing with a finer segment granularity than a concurrent append is "
                                     "unsupported"), refused.reason
    assert str(month.segment.id) in refused.reason and JAN2.iso() in refused.reason
    accepted(s.publish("k", rows(month.segment, 1), kind="append"))
    assert seen(s) == {1: 1}


def _day_replaced_in_a_committed_month() -> tuple[Script, str]:
    """Task k appends a month and commits it, then releases its lock; task c REPLACEs one day inside it (both
    accepted: committed rows are in the timeline the REPLACE reads, Druid's pending record of a committed segment
    aside); returns the script and the day's version."""
    s = Script()
    s.start("k", "index_kafka", group="g"), s.start("c", "compact", group="h")
    month = allocated(_append(s, "k", MONTH))
    accepted(s.publish("k", rows(month.segment, 1), kind="append"))
    s.send(LockReleaseRequested(request_id="rel", task_id="k", data_source="wiki", interval=MONTH))
    day = allocated(_replace_day(s, "c"))
    accepted(s.publish("c", rows(day.segment, 2), kind="replace"))
    return s, day.segment.version


def test_a_day_replace_commits_once_the_month_append_is_committed() -> None:
    _day_replaced_in_a_committed_month()


def test_no_append_goes_into_a_month_a_committed_day_replace_partly_overshadows() -> None:
    s, day_version = _day_replaced_in_a_committed_month()
    refused = _append(s, "k", MONTH, sequence="seq-2")  # the row at 2026-01-01: the month chunk holds it
    assert isinstance(refused, LockDenied), refused
    assert "partly overshadowed by version" in refused.reason and JAN2.iso() in refused.reason
    inside = allocated(s.allocate("k", interval=MONTH, sequence="seq-3", granularity="timeChunk",
                                  lock_type="append", timestamp=JAN2.start))  # a row of the replaced day
    assert (inside.segment.interval, inside.segment.version) == (JAN2, day_version)
    accepted(s.publish("k", rows(inside.segment, 3), kind="append"))
    assert seen(s)[3] == 1


def test_an_append_inside_the_replaced_day_is_upgraded_not_refused() -> None:
    s = Script()
    s.start("k", "index_kafka", group="g"), s.start("c", "compact", group="h")
    day = allocated(_replace_day(s, "c"))
    hour = allocated(_append(s, "k", JAN2_HOUR))
    accepted(s.publish("c", rows(day.segment, 2), kind="replace"))
    done = accepted(s.publish("k", rows(hour.segment, 1), kind="append"))
    assert done.upgraded_segment_ids, "the hour's copy lands in the replaced day"
    assert seen(s) == {2: 1, 1: 1}


def test_an_allocation_pending_under_a_released_append_lock_keeps_its_chunk() -> None:
    """Druid's createNewSegment counts every pending segment of the interval: an appending allocation of another
    group joins the version of one whose APPEND lock its running task released, instead of opening a newer
    version over it that would hide its rows once the task locks again and commits them."""
    s = Script()
    s.start("k", "index_kafka", group="g"), s.start("b", "index_parallel", group="h")
    month = allocated(_append(s, "k", MONTH))
    s.send(LockReleaseRequested(request_id="rel", task_id="k", data_source="wiki", interval=MONTH))
    other = allocated(s.allocate("b", interval=MONTH, sequence="b", granularity="timeChunk",
                                 lock_type="exclusive"))
    assert (other.segment.interval, other.segment.version) == (MONTH, month.segment.version)
    accepted(s.publish("b", rows(other.segment, 2), kind="insert"))
    s.send(TaskFinished(task_id="b", status="success"))
    s.lock("k", interval=MONTH, lock_type="append")
    accepted(s.publish("k", rows(month.segment, 1), kind="append"))
    assert seen(s) == {1: 1, 2: 1}
