"""Issue 13, missing operations: release one lock, try-lock and timeouts, lock versions, same-group APPEND
absorption, explicit publish kinds."""

from __future__ import annotations

from coordinator.locks.lockbox import EPOCH_VERSION, Lockbox
from events import (
    Interval,
    LockDenied,
    LockGranted,
    LockReleased,
    LockReleaseRequested,
    LockRequested,
    LockWaiting,
    PublishAccepted,
    PublishRejected,
)
from tests.unit.locks.script import DAY, Script, seg

HOUR5 = Interval.parse("2026-01-01T05/PT1H")
HOUR6 = Interval.parse("2026-01-01T06/PT1H")


def granted(e: object) -> LockGranted:
    assert isinstance(e, LockGranted), e
    return e


def test_a_task_releases_one_lock_and_keeps_running() -> None:
    s = Script()
    s.start("t"), s.start("u")
    five = granted(s.lock("t", interval=HOUR5)).lock
    six = granted(s.lock("t", interval=HOUR6)).lock
    assert isinstance(s.lock("u", interval=HOUR5, rid="u-wait"), LockWaiting)
    out = s.send(LockReleaseRequested(request_id="rel", task_id="t", data_source="wiki", interval=HOUR5))
    released = next(e for e in out if isinstance(e, LockReleased))
    assert released.lock_ids == (five.lock_id,) and released.request_id == "rel"
    assert [e.request_id for e in out if isinstance(e, LockGranted)] == ["u-wait"]  # the waiter gets it
    assert six.lock_id in s.box.sources["wiki"].locks and "t" in s.box.tasks
    nothing = s.send(LockReleaseRequested(request_id="rel2", task_id="t", data_source="wiki", interval=DAY))
    assert isinstance(nothing[-1], LockDenied) and "holds no lock" in nothing[-1].reason
    assert Lockbox.replay(s.log).persistent() == s.box.persistent()


def test_a_try_lock_is_denied_at_once_and_a_blocking_one_times_out() -> None:
    s = Script()
    s.start("holder"), s.start("t"), s.start("w")
    granted(s.lock("holder"))
    def ask(rid: str, task: str, **kw: object) -> list[object]:
        return list(s.send(LockRequested(request_id=rid, task_id=task, group_id=task, task_type="index",
                                         data_source="wiki", interval=DAY, granularity="timeChunk",
                                         lock_type="exclusive", **kw)))  # type: ignore[arg-type]

    tried = ask("try", "t", mode="try")
    assert isinstance(tried[-1], LockDenied) and "try-lock" in tried[-1].reason
    assert s.box.sources["wiki"].waiters == []
    assert isinstance(ask("wait", "w", timeout_ms=5000)[-1], LockWaiting)
    s.now += 2000
    s.start("other")  # event time passes: not yet expired
    assert [w.request.request_id for w in s.box.sources["wiki"].waiters] == ["wait"]
    s.now += 5000
    out = s.start("another")
    assert isinstance(out[0], LockDenied) and out[0].request_id == "wait" and "timed out" in out[0].reason
    assert s.box.sources["wiki"].waiters == []


def test_lock_requests_name_a_version() -> None:
    s = Script()
    v = "2026-01-05T00:00:00.000Z"
    s.start("batch")
    assert granted(s.lock("batch")).lock.version > v
    s.send(LockReleaseRequested(request_id="rel", task_id="batch", data_source="wiki", interval=DAY))
    out = s.send(LockRequested(request_id="pref", task_id="batch", group_id="batch", task_type="index",
                               data_source="wiki", interval=DAY, granularity="timeChunk", lock_type="exclusive",
                               version=v))
    assert granted(out[-1]).lock.version == v  # nothing at or above it exists
    accepted = s.publish("batch", seg(v, 0), seg(v, 1))
    assert isinstance(accepted, PublishAccepted)
    s.finish("batch")
    s.start("c", "compact")
    out = s.send(LockRequested(request_id="seg", task_id="c", group_id="c", task_type="compact", data_source="wiki",
                               interval=DAY, granularity="segment", lock_type="exclusive", partition_ids=(1,),
                               version=v))
    lock = granted(out[-1]).lock
    assert (lock.version, lock.partition_ids) == (v, (1,))


def test_a_wider_append_lock_absorbs_the_groups_narrower_ones() -> None:
    s = Script()
    s.start("k1", "index_kafka", group="g"), s.start("k2", "index_kafka", group="g")
    five = granted(s.lock("k1", interval=HOUR5, lock_type="append")).lock
    six = granted(s.lock("k2", interval=HOUR6, lock_type="append")).lock
    day = granted(s.lock("k1", interval=DAY, lock_type="append"))
    assert day.absorbed_lock_ids == (five.lock_id, six.lock_id) and day.lock.version == EPOCH_VERSION
    src = s.box.sources["wiki"]
    assert list(src.locks) == [day.lock.lock_id] and src.holders[day.lock.lock_id] == {"k1", "k2"}
    assert isinstance(s.publish("k2", seg(EPOCH_VERSION, 0, interval=HOUR6), kind="append"), PublishAccepted)
    assert Lockbox.replay(s.log).persistent() == s.box.persistent()


def test_publish_kinds_need_their_lock_types() -> None:
    s = Script()
    s.start("a", "index_kafka"), s.start("x"), s.start("r", "compact")
    granted(s.lock("a", interval=HOUR5, lock_type="append"))
    no = s.publish("a", seg(EPOCH_VERSION, 0, interval=HOUR5))  # kind absent: insert
    assert isinstance(no, PublishRejected) and "insert publish needs EXCLUSIVE or SHARED" in no.reason
    v = granted(s.lock("x", interval=HOUR6)).lock.version
    no = s.publish("x", seg(v, 0, interval=HOUR6), kind="append")
    assert isinstance(no, PublishRejected) and "append publish needs APPEND" in no.reason
    no = s.publish("x", seg(v, 0, interval=HOUR6), kind="replace")
    assert isinstance(no, PublishRejected) and "replace publish needs REPLACE" in no.reason
    s.finish("x")
    r = granted(s.lock("r", interval=DAY, lock_type="replace")).lock
    no = s.publish("r", seg(r.version, 0), kind="replace", end={"p0": 1})
    assert isinstance(no, PublishRejected) and "no stream metadata" in no.reason
    assert isinstance(s.publish("r", seg(r.version, 0), kind="replace"), PublishAccepted)


def test_segments_to_be_overwritten_must_be_published_and_locked() -> None:
    s = Script()
    s.start("batch")
    v = granted(s.lock("batch")).lock.version
    assert isinstance(s.publish("batch", seg(v, 0), seg(v, 1)), PublishAccepted)
    s.finish("batch")
    s.start("c", "compact")
    granted(s.lock("c", granularity="segment", partitions=(0, 1), version=None))
    out = s.allocate("c", sequence="c")
    new = out.segment  # type: ignore[attr-defined]
    ghost = str(seg(v, 7).id)
    no = s.publish("c", new, segments_to_be_overwritten=(ghost,))
    assert isinstance(no, PublishRejected) and "segmentsToBeOverwritten[0]" in no.reason
    ok = s.publish("c", new, segments_to_be_overwritten=(str(seg(v, 0).id),))
    assert isinstance(ok, PublishAccepted) and ok.segments[0].overshadowed_segments == (0,)
