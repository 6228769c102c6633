"""Random interleavings of task starts, lock requests, allocations, publishes and task ends.

Invariants after every step: no two incompatible live locks overlap; allocated
segment ids are unique per allocation key; a revoked lock never publishes;
folding the decision log rebuilds the lockbox.
"""

from __future__ import annotations

import itertools
import os

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from coordinator.locks.conflicts import scopes_conflict, types_compatible
from coordinator.locks.lockbox import Lockbox
from coordinator.locks.state import allocation_key
from events import (
    Envelope,
    Instant,
    Interval,
    LockRequested,
    PublishAccepted,
    PublishRequested,
    SegmentAllocated,
    SegmentAllocationRequested,
    TaskFinished,
    TaskStarted,
)

H = 3_600_000
BASE = 1_767_225_600_000
INTERVALS = [Interval(BASE + a * H, BASE + b * H) for a, b in [(0, 24), (0, 12), (12, 24), (6, 18), (0, 48), (24, 48)]]
TASKS = [f"t{i}" for i in range(6)]
TYPES = ["index_kafka", "index_parallel", "compact", "kill"]

lock = st.tuples(st.just("lock"), st.sampled_from(TASKS), st.sampled_from(INTERVALS),
                 st.sampled_from(["timeChunk", "timeChunk", "segment"]),
                 st.sampled_from(["exclusive", "shared", "append", "replace"]),
                 st.one_of(st.none(), st.integers(0, 100)), st.lists(st.integers(0, 4), min_size=1, max_size=2))
alloc = st.tuples(st.just("alloc"), st.sampled_from(TASKS), st.sampled_from(INTERVALS),
                  st.sampled_from(["timeChunk", "segment"]), st.sampled_from(["exclusive", "append", "replace"]),
                  st.sampled_from(["s0", "s1"]), st.booleans())
publish = st.tuples(st.just("publish"), st.sampled_from(TASKS), st.integers(0, 50))
finish = st.tuples(st.just("finish"), st.sampled_from(TASKS))
steps = st.lists(st.one_of(lock, lock, lock, alloc, alloc, publish, finish), min_size=1, max_size=40)
# every history starts all its tasks first (random types and groups), so requests mostly reach the lock rules
GROUPS = ["g0", "g1", None]
starts = st.tuples(*[st.tuples(st.just("start"), st.just(t), st.sampled_from(TYPES), st.sampled_from(GROUPS))
                     for t in TASKS])


def _live_conflicts(box: Lockbox) -> list[tuple[str, str]]:
    bad = []
    for src in box.sources.values():
        live = [lk for lk in src.locks.values() if not lk.revoked]
        for a, b in itertools.combinations(live, 2):
            if (a.group_id != b.group_id
                    and scopes_conflict(a.granularity, a.interval, a.partition_ids, b.granularity, b.interval,
                                        b.partition_ids)
                    and not types_compatible(a.lock_type, a.interval, b.lock_type, b.interval)):
                bad.append((a.lock_id, b.lock_id))  # locks of one group are compatible (Druid's lock posse)
    return bad


@settings(max_examples=int(os.environ.get("LOCKBOX_EXAMPLES", "300")), deadline=None,
          suppress_health_check=[HealthCheck.too_slow])
@given(starts, steps)
def test_lockbox_invariants(started: tuple, rest: list[tuple]) -> None:  # type: ignore[type-arg]
    history = [*started, *rest]
    box = Lockbox()
    log = []
    allocated: dict[str, tuple[str, str, str]] = {}
    groups: dict[str, str] = {}
    allocations: list[SegmentAllocated] = []
    now = BASE + 10 * 24 * H
    for n, step in enumerate(history):
        kind, task = step[0], step[1]
        if kind == "start":
            groups.setdefault(task, step[3] or task)
            event = TaskStarted(task_id=task, group_id=groups[task], task_type=step[2], data_source="wiki")
        elif kind == "lock":
            _, _, interval, gran, ltype, prio, parts = step
            event = LockRequested(request_id=f"r{n}", task_id=task, group_id=groups.get(task, task),
                                  task_type="index", data_source="wiki", interval=interval, granularity=gran,
                                  lock_type=ltype, priority=prio, partition_ids=tuple(parts))
        elif kind == "alloc":
            _, _, interval, gran, ltype, seq, skip = step
            mine = [a.segment_id for a in allocations if a.task_id == task]
            event = SegmentAllocationRequested(
                request_id=f"a{n}", task_id=task, data_source="wiki", timestamp=Instant(interval.start),
                sequence_name=seq, previous_segment_id=mine[-1] if mine else None, skip_lineage_check=skip,
                interval=interval, lock_granularity=gran, lock_type=ltype)
        elif kind == "publish":
            mine = [a for a in allocations if a.task_id == task]
            if not mine:
                continue
            chosen = mine[step[2] % len(mine)]
            event = PublishRequested(request_id=f"p{n}", task_id=task, segments=(chosen.segment,))
        else:
            event = TaskFinished(task_id=task, status="success")
        before = box.copy()
        out = box.handle(Envelope(event, f"e{n}", Instant(now + n * 1000), "wiki"))
        log.extend(out)

        for e in out:
            if isinstance(e, SegmentAllocated):
                allocations.append(e)
                key = allocation_key(e.sequence_name or "", e.previous_segment_id, e.segment.interval,
                                     e.skip_lineage_check)
                assert allocated.setdefault(e.segment_id, key) == key, "one segment id, two allocations"
            if isinstance(e, PublishAccepted):
                upgraded = set(e.upgraded_segment_ids)
                held = before.sources["wiki"].locks_of(e.task_id)
                for s in e.segments:
                    if str(s.id) not in upgraded:
                        assert any(not lk.revoked and lk.interval.contains(s.interval) for lk in held), \
                            "published without a live lock"
        assert _live_conflicts(box) == []
        assert Lockbox.replay(log).persistent() == box.persistent()
