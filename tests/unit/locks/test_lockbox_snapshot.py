"""Snapshot + tail equals never restarted: a lockbox restored from its snapshot decides exactly as the live one.

The oracle is the live lockbox itself: one history is handled by a lockbox that
never stops and, request for request, by one that is encoded to snapshot bytes
and decoded again at random cuts (none, one or several). Both must emit the
same decisions (dataclass equality: same fields, same tuple orders) and end in
equal snapshots (equal states with equal iteration orders, waiters included).
Histories span two data sources and mix task starts (some re-started after
finishing), lock requests that wait, revoke or are re-sent, allocations of
both granularities, publishes with stream metadata (replace/append upgrades
included) and task ends.
"""

from __future__ import annotations

import os
from typing import Any

import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from coordinator.locks.lockbox import Lockbox
from coordinator.locks.snapshot import (
    SnapshotError,
    decode_snapshot,
    encode_snapshot,
    lockbox_from_json,
    lockbox_from_split_json,
    snapshot_to_json,
    split_snapshot_to_json,
)
from coordinator.locks.state import LockboxState
from events import (
    Envelope,
    Event,
    Instant,
    Interval,
    LockDenied,
    LockGranted,
    LockReleaseRequested,
    LockRequested,
    LockRevoked,
    LockWaiting,
    PublishAccepted,
    PublishRequested,
    SegmentAllocated,
    SegmentAllocationRequested,
    SegmentDescriptor,
    SegmentsImported,
    TaskFinished,
    TaskStarted,
)
from tests.unit.locks.script import DAY, Script, seg
from tests.unit.locks.test_lockbox import HOUR, TWO_DAYS, batch_published, granted

H = 3_600_000
BASE = 1_767_225_600_000
INTERVALS = [Interval(BASE + a * H, BASE + b * H) for a, b in [(0, 24), (0, 12), (12, 24), (6, 18), (0, 48), (24, 48)]]
TASKS = [f"t{i}" for i in range(6)]
SOURCES = ["wiki", "koala"]
TYPES = ["index_kafka", "index_parallel", "compact", "kill"]
PRIORITIES = st.sampled_from([None, None, None, 10, 50, 90])

start = st.tuples(st.just("start"), st.sampled_from(TASKS), st.sampled_from(TYPES),
                  st.sampled_from(["g0", "g1", None, None, None]), PRIORITIES)
lock = st.tuples(st.just("lock"), st.sampled_from(TASKS), st.sampled_from(INTERVALS),
                 st.sampled_from(["timeChunk", "timeChunk", "segment"]),
                 st.sampled_from(["exclusive", "exclusive", "shared", "append", "replace"]),
                 PRIORITIES, st.lists(st.integers(0, 3), min_size=1, max_size=2),
                 # mostly blocking; else mode try, or a blocking timeout (ms)
                 st.sampled_from([None, None, None, None, None, "try", 3000, 60_000]))
release = st.tuples(st.just("release"), st.sampled_from(TASKS), st.sampled_from(INTERVALS))
alloc = st.tuples(st.just("alloc"), st.sampled_from(TASKS), st.sampled_from(INTERVALS),
                  st.sampled_from(["timeChunk", "timeChunk", "segment"]),
                  st.sampled_from(["exclusive", "append", "replace"]), st.sampled_from(["s0", "s1"]), st.booleans())
publish = st.tuples(st.just("publish"), st.sampled_from(TASKS), st.integers(0, 50),
                    st.one_of(st.none(), st.integers(0, 3)))
finish = st.tuples(st.just("finish"), st.sampled_from(TASKS), st.sampled_from(["success", "failed"]))
resend = st.tuples(st.just("resend"), st.integers(0, 1000))
steps = st.lists(st.one_of(lock, lock, lock, alloc, alloc, publish, publish, finish, finish, start, resend, release),
                 min_size=5, max_size=80)
starts = st.tuples(*[st.tuples(st.just("start"), st.just(t), st.sampled_from(TYPES),
                               st.sampled_from(["g0", "g1", None, None, None]), PRIORITIES) for t in TASKS])

EXAMPLES = int(os.environ.get("LOCKBOX_EXAMPLES", "300"))
PROBE = int(os.environ.get("LOCKBOX_PROBE", "2000"))  # coverage probe: waiters get granted only now and then


def history(steps: list[tuple[Any, ...]]) -> list[Envelope[Event]]:
    """The request envelopes of ``steps``; publishes pick among the task's allocations, read off a live run."""
    box = Lockbox()
    out: list[Envelope[Event]] = []
    groups: dict[str, str] = {}
    allocations: dict[str, list[SegmentDescriptor]] = {}
    alloc_types: dict[Any, str] = {}  # segment id -> the lock type it was allocated under
    for n, step in enumerate(steps):
        kind = step[0]
        task = step[1] if kind != "resend" else ""
        ds = SOURCES[TASKS.index(task) % 2] if task else ""
        event: Event
        if kind == "start":
            groups.setdefault(task, step[3] or task)
            event = TaskStarted(task_id=task, group_id=groups[task], task_type=step[2], data_source=ds,
                                priority=step[4])
        elif kind == "lock":
            _, _, interval, gran, ltype, prio, parts, wait = step
            event = LockRequested(request_id=f"r{n}", task_id=task, group_id=groups.get(task, task),
                                  mode="try" if wait == "try" else None,
                                  timeout_ms=wait if isinstance(wait, int) else None,
                                  task_type="index", data_source=ds, interval=interval, granularity=gran,
                                  lock_type=ltype, priority=prio, partition_ids=tuple(parts))
        elif kind == "alloc":
            _, _, interval, gran, ltype, seq, skip = step
            mine = allocations.get(task, [])
            event = SegmentAllocationRequested(
                request_id=f"a{n}", task_id=task, data_source=ds, timestamp=Instant(interval.start),
                sequence_name=seq, previous_segment_id=str(mine[-1].id) if mine else None, skip_lineage_check=skip,
                interval=interval, lock_granularity=gran, lock_type=ltype)
        elif kind == "publish":
            mine = allocations.get(task, [])
            if not mine and step[2] % 4:
                continue  # mostly publish what was allocated; sometimes a segment no lock covers
            chosen = mine[step[2] % len(mine)] if mine else SegmentDescriptor(ds, INTERVALS[0], "v0", 0, 10)
            meta = step[3]
            kinds = {"append": "append", "replace": "replace"}
            matching = kinds.get(alloc_types.get(chosen.id, ""), "insert")
            event = PublishRequested(request_id=f"p{n}", task_id=task, segments=(chosen,),  # mostly the right kind
                                     kind=matching if step[2] % 5 else ("insert", "append", "replace")[step[2] % 3],
                                     start_metadata=None if meta is None or meta == 0 else {"offset": meta - 1},
                                     end_metadata=None if meta is None else {"offset": meta})
        elif kind == "release":
            event = LockReleaseRequested(request_id=f"l{n}", task_id=task, data_source=ds, interval=step[2])
        elif kind == "finish":
            event = TaskFinished(task_id=task, status=step[2])
        else:
            if not out:
                continue
            earlier = out[step[1] % len(out)]
            event, ds = earlier.event, earlier.key
        env = Envelope(event, f"e{n}", Instant(BASE + 10 * 24 * H + n * 1000), ds)
        out.append(env)
        for d in box.handle(env):
            if isinstance(d, SegmentAllocated):
                allocations.setdefault(d.task_id, []).append(d.segment)
                if isinstance(event, SegmentAllocationRequested):
                    alloc_types[d.segment.id] = event.lock_type
    return out


def roundtrip(box: Lockbox) -> Lockbox:
    return decode_snapshot(encode_snapshot(box))


@settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(starts, steps, st.data())
def test_restored_lockbox_decides_as_the_never_restarted_one(started: tuple[Any, ...], rest: list[tuple[Any, ...]],
                                                              data: st.DataObject) -> None:
    envs = history([*started, *rest])
    cuts = set(data.draw(st.lists(st.integers(0, len(envs)), max_size=4), label="cuts"))
    live, restarted = Lockbox(), Lockbox()
    for i, env in enumerate(envs):
        if i in cuts:
            restarted = roundtrip(restarted)
            assert snapshot_to_json(restarted) == snapshot_to_json(live)
        assert restarted.handle(env) == live.handle(env), f"request {i} ({env.event_type}) decided differently"
    final = roundtrip(restarted)
    assert snapshot_to_json(final) == snapshot_to_json(live)
    assert final.persistent() == live.persistent()
    assert encode_snapshot(final) == encode_snapshot(live)


def committed_by(decisions: list[Event]) -> dict[str, list[SegmentDescriptor]]:
    """What the decisions commit, per data source in order: read off the decisions, not the fold (the oracle)."""
    out: dict[str, list[SegmentDescriptor]] = {}
    for d in decisions:
        if (isinstance(d, PublishAccepted) and not d.already_published) or (
                isinstance(d, SegmentsImported) and not d.already_imported):
            out.setdefault(d.segments[0].data_source, []).extend(d.segments)
    return out


def split_roundtrip(box: LockboxState, stored: dict[str, list[SegmentDescriptor]]) -> Lockbox:
    """Through the split form's bytes, with ``stored``: per data source, at least the segments committed so far."""
    return lockbox_from_split_json(orjson.loads(orjson.dumps(split_snapshot_to_json(box))), stored)


@settings(max_examples=EXAMPLES // 2, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(starts, steps, st.data())
def test_the_split_snapshot_with_the_segments_stored_apart_restores_the_full_one(
        started: tuple[Any, ...], rest: list[tuple[Any, ...]], data: st.DataObject) -> None:
    """At every point of a history, the split form restored with every segment the history ever commits (the
    store holds those committed after the snapshot too, in order) equals the full form restored: the same
    state in the same orders, so the same decisions after. And the segments the fold says each request
    committed (``segments_since`` the counts before it) are exactly those its decisions commit."""
    envs = history([*started, *rest])
    live = Lockbox()
    committed: dict[str, list[SegmentDescriptor]] = {}
    for env in envs:
        before = live.segment_counts()
        decisions = live.handle(env)
        added = live.segments_since(before)
        assert added == committed_by(decisions), f"{env.event_type}: the fold's new segments"
        for ds, segs in added.items():
            committed.setdefault(ds, []).extend(segs)
        assert live.segment_counts() == {ds: len(v) for ds, v in committed.items()}
    assert {ds: list(src.segments.values()) for ds, src in live.sources.items() if src.segments} == committed
    cuts = set(data.draw(st.lists(st.integers(0, len(envs)), max_size=4), label="cuts"))
    box, restarted = Lockbox(), Lockbox()
    for i, env in enumerate(envs):
        restored = split_roundtrip(box, committed)
        assert snapshot_to_json(restored) == snapshot_to_json(box) == snapshot_to_json(roundtrip(box))
        if i in cuts:
            restarted = split_roundtrip(restarted, committed)
        assert restarted.handle(env) == box.handle(env), f"request {i} ({env.event_type}) decided differently"
    assert encode_snapshot(split_roundtrip(restarted, committed)) == encode_snapshot(live)


def test_the_split_form_is_refused_without_its_segments_and_by_the_full_reader() -> None:
    s = Script()
    v1 = batch_published(s, partitions=3)
    box = s.box
    segs = list(box.sources["wiki"].segments.values())
    assert len(segs) == 3 and all(x.version == v1 for x in segs)
    split = split_snapshot_to_json(box)
    assert [src["segmentCount"] for _, src in split["sources"]] == [3]
    assert all("segments" not in src for _, src in split["sources"])
    with pytest.raises(SnapshotError, match="counts 3 committed segments, 2 are given"):
        lockbox_from_split_json(split, {"wiki": segs[:2]})
    with pytest.raises(SnapshotError, match="stored apart"):
        lockbox_from_json(split)
    with pytest.raises(SnapshotError, match="not the split form"):
        lockbox_from_split_json(snapshot_to_json(box), {"wiki": segs})
    # another order of the stored segments is another state: the restore keeps the order it is given
    swapped = lockbox_from_split_json(split, {"wiki": [segs[1], segs[0], segs[2]]})
    assert snapshot_to_json(swapped) != snapshot_to_json(box)
    assert snapshot_to_json(lockbox_from_split_json(split, {"wiki": [*segs, seg(v1, 9)]})) == snapshot_to_json(box)


def test_a_segment_is_committed_once_and_keeps_its_place() -> None:
    """``segments`` only grows at its end: a foreign decision log naming a committed id again (the lockbox
    refuses such a publish) leaves the first descriptor in its place, so stored counts stay exact."""
    s = Script()
    v1 = batch_published(s, partitions=2)
    src = s.box.sources["wiki"]
    first = list(src.segments.values())
    other = SegmentDescriptor(first[0].data_source, first[0].interval, v1, 0, 999)
    assert other.id == first[0].id and other != first[0]
    s.box.apply(PublishAccepted(request_id="forged", task_id="x", segments=(other, seg(v1, 5))))
    assert list(src.segments.values()) == [*first, seg(v1, 5)]
    assert src.segments_since(2) == [seg(v1, 5)] and src.segments_since(3) == [] and src.segments_since(0)[:2] == first


def test_histories_reach_waiters_revocations_upgrades_and_metadata_at_cuts() -> None:
    """The generator is not vacuous: over the examples, snapshots are taken while requests wait, and the
    tails after them revoke, grant waiters and publish with metadata (upgrades: the scripted test below)."""
    seen: dict[str, int] = {}

    @settings(max_examples=PROBE, deadline=None, database=None, derandomize=True,
              suppress_health_check=[HealthCheck.too_slow])
    @given(starts, steps)
    def probe(started: tuple[Any, ...], rest: list[tuple[Any, ...]]) -> None:
        envs = history([*started, *rest])
        box = Lockbox()
        waited = False
        for env in envs:
            if any(src.waiters for src in box.sources.values()):
                waited = True
                seen["snapshot with waiters"] = seen.get("snapshot with waiters", 0) + 1
            for d in box.handle(env):
                name = type(d).__name__
                if isinstance(d, LockGranted) and waited and d.request_id != getattr(env.event, "request_id", None):
                    name = "waiter granted"
                if isinstance(d, PublishAccepted) and d.upgraded_segment_ids:
                    name = "upgrade"
                if isinstance(d, PublishAccepted) and d.end_metadata is not None:
                    seen["metadata"] = seen.get("metadata", 0) + 1
                seen[name] = seen.get(name, 0) + 1

    probe()
    for kind in ("snapshot with waiters", "waiter granted", LockRevoked.__name__, LockWaiting.__name__,
                 "metadata", "PublishAccepted", "PublishRejected", "LockDenied", "SegmentAllocated"):
        assert seen.get(kind, 0) > 0, f"no {kind} in the generated histories: {seen}"


class RecordingLockbox(Lockbox):
    """A lockbox that keeps the requests it handled, to replay a scripted history with cuts."""

    def __init__(self) -> None:
        super().__init__()
        self.requests: list[Envelope[Event]] = []

    def handle(self, envelope: Envelope[Event]) -> list[Event]:
        self.requests.append(envelope)
        return super().handle(envelope)


def assert_every_cut_agrees(requests: list[Envelope[Event]]) -> None:
    live_out = []
    live = Lockbox()
    for env in requests:
        live_out.append(live.handle(env))
    for k in range(len(requests) + 1):
        box = Lockbox()
        for env in requests[:k]:
            box.handle(env)
        box = roundtrip(box)
        assert [box.handle(env) for env in requests[k:]] == live_out[k:], f"cut at {k}"
        assert encode_snapshot(box) == encode_snapshot(live)


def test_every_cut_of_an_append_replace_upgrade_history_agrees() -> None:
    s = Script()
    s.box = RecordingLockbox()
    v1 = batch_published(s, partitions=1)
    s.start("append", "index_kafka"), s.start("replace", "compact")
    granted(s.lock("append", interval=HOUR, lock_type="append"))
    r = granted(s.lock("replace", interval=DAY, lock_type="replace")).lock
    assert isinstance(s.publish("append", seg(v1, 1, interval=HOUR), kind="append"), PublishAccepted)
    assert s.box.sources["wiki"].appended_under  # a cut here must keep the appends under the replace lock
    commit = s.publish("replace", seg(r.version, 0), kind="replace")
    assert isinstance(commit, PublishAccepted) and commit.upgraded_segment_ids
    assert s.box.sources["wiki"].replace_chunks  # a cut here must keep the committed replace chunks
    after = s.publish("append", seg(v1, 2, interval=HOUR), kind="append")
    assert isinstance(after, PublishAccepted) and len(after.segments) == 2
    s.finish("replace"), s.finish("append")
    assert_every_cut_agrees(s.box.requests)


def test_every_cut_of_a_waiting_revoking_history_agrees() -> None:
    s = Script()
    s.box = RecordingLockbox()
    s.start("low", priority=10), s.start("peer", priority=10), s.start("high", priority=90)
    s.start("seg", "index_kafka", priority=10)
    granted(s.lock("low"))
    assert isinstance(s.lock("peer", rid="peer-1"), LockWaiting)
    assert isinstance(s.allocate("seg", interval=TWO_DAYS, granularity="segment"), LockDenied)
    assert isinstance(s.lock("peer", rid="peer-1"), LockWaiting)  # re-sent: still one waiter
    granted(s.lock("high"))  # revokes low; peer keeps waiting behind high
    assert [w.request.request_id for w in s.box.sources["wiki"].waiters] == ["peer-1"]
    released = s.finish("high")  # low's revoked lock blocks nobody: the waiter is granted
    assert [type(e).__name__ for e in released] == ["TaskDeregistered", "LockReleased", "LockGranted"]
    s.finish("low")
    s.finish("peer"), s.finish("seg")
    assert_every_cut_agrees(s.box.requests)


def test_a_waiter_snapshotted_is_granted_after_restore_as_without_restart() -> None:
    s = Script()
    s.start("a")
    s.start("b")
    assert isinstance(s.lock("a"), LockGranted)
    assert isinstance(s.lock("b", rid="rb"), LockWaiting)
    restored = roundtrip(s.box)
    assert [w.request.request_id for w in restored.sources["wiki"].waiters] == ["rb"]
    finish = Envelope(TaskFinished(task_id="a", status="success"), "fin", Instant(s.now), "wiki")
    got = restored.handle(finish)
    assert got == s.box.handle(finish)
    assert [type(e).__name__ for e in got] == ["TaskDeregistered", "LockReleased", "LockGranted"]
    # the persistent form alone would have lost the waiter: nothing is granted then
    rebuilt = Lockbox.replay(s.log)
    assert rebuilt.persistent() == roundtrip(rebuilt).persistent()
    assert rebuilt.sources["wiki"].waiters == []


def test_snapshot_keeps_dict_orders_the_decisions_read() -> None:
    s = Script()
    s.start("a", group="g")
    s.start("b", group="g")
    s.lock("a", interval=Interval.parse("2026-01-01/PT12H"), lock_type="shared")
    s.lock("b", interval=DAY, lock_type="shared")
    restored = roundtrip(s.box)
    assert list(restored.sources["wiki"].locks) == list(s.box.sources["wiki"].locks) == ["wiki#0", "wiki#1"]
    # the group's re-request inside both locks gets the first one back, in both
    req = LockRequested(request_id="again", task_id="b", group_id="g", task_type="index", data_source="wiki",
                        interval=Interval.parse("2026-01-01T01/PT1H"), granularity="timeChunk", lock_type="shared")
    env = Envelope(req, "again", Instant(s.now), "wiki")
    assert restored.handle(env) == s.box.handle(env)


def test_snapshot_bytes_are_json_and_other_layouts_are_refused() -> None:
    s = Script()
    s.start("a")
    s.lock("a")
    obj = orjson.loads(encode_snapshot(s.box))
    assert obj["version"] == 5 and obj["sources"][0][0] == "wiki"
    with pytest.raises(SnapshotError, match="version 4 or 5"):
        lockbox_from_json({**obj, "version": 3})
    with pytest.raises(SnapshotError):
        decode_snapshot(b"not json")
