"""Issue 7's end-to-end scenario on the real broker: ``segcoord run``, tasks, historicals, subscribers, audit.

Tasks lock, allocate and publish through :class:`TaskClient`; the planner sends
loads at once; two simulated historicals load and announce; visibility changes
arrive at a :class:`VisibilityFeed`. Then a compaction with segment locks
replaces the two partitions of the day by one (``overshadowedSegments``) and a
re-index under a new timeChunk lock replaces everything with a higher version:
each swap is atomic, so a :class:`QueryableView`, checked after every feed
event, never shows two versions (or two segments) for one instant. The planner
marks what is overshadowed unused and drops it. ``segcoord audit`` over the
whole log finds nothing.
"""

from __future__ import annotations

import dataclasses
import itertools
import time
from pathlib import Path

import pytest

from events import Interval, SegmentDescriptor, Topics
from events.cluster import DynamicConfigSet, RulesSet, ServerJoined
from events.locks import LockGranted, PublishAccepted, SegmentAllocated
from streaming.cli import main
from streaming.subscribers import Change, QueryableView, VisibilityFeed
from streaming.task_client import TaskClient
from tests.integration.test_service_planner import Historicals, PlanService, decoded, send, wait_for
from tests.integration.test_service_timeline import T0

pytestmark = pytest.mark.integration
DAY = Interval(T0, T0 + 86_400_000)


class Watcher:
    """The feed and the view; after every feed event the view is brought to the log's end and checked."""

    def __init__(self, bootstrap: str, topics: Topics) -> None:
        self.feed = VisibilityFeed(bootstrap, topics)
        self.view = QueryableView(bootstrap, topics)
        self.changes: list[Change] = []
        self.checks = 0
        self.version: dict[str, str] = {}  # segment id -> version, of every segment the test published
        self.replaces: dict[str, set[str]] = {}  # segment id -> the same version's ids it overshadows

    def published(self, segments: list[SegmentDescriptor]) -> None:
        for seg in segments:
            self.version[str(seg.id)] = seg.version
            self.replaces[str(seg.id)] = {str(dataclasses.replace(seg, partition_id=p).id)
                                          for p in seg.overshadowed_segments}

    def pump(self, timeout: float = 0.3) -> None:
        for change in self.feed.poll(timeout):
            self.changes.append(change)
            self.view.refresh(0.05)
            self.check()
        self.view.refresh(0.05)
        self.check()

    def check(self) -> None:
        """No instant served by two versions; no segment served beside one that replaces it (same version)."""
        served = self.view.lookup("wiki", DAY)
        pieces = sorted((iv, self.version[q.segment_id], q.segment_id) for q in served for iv in q.intervals)
        for (a, va, sa), (b, vb, sb) in itertools.combinations(pieces, 2):
            if a.start < b.end and b.start < a.end:
                assert va == vb, f"two versions serve one instant: {sa} {a.iso()} and {sb} {b.iso()}"
        ids = {q.segment_id for q in served}
        for sid in ids:
            replaced = self.replaces.get(sid, set())
            assert not ids & replaced, f"{sid} is served beside what it replaces: {sorted(ids & replaced)}"
        self.checks += 1

    def state(self, segment_id: str) -> str | None:
        last = [c.event.to_state for c in self.changes if c.event.segment_id == segment_id]
        return last[-1] if last else None

    def until(self, what: str, service: PlanService, cond, timeout: float = 180.0) -> None:  # type: ignore[no-untyped-def]
        def step() -> bool:
            self.pump()
            return bool(cond())

        wait_for(what, step, service, timeout)

    def served(self) -> list[str]:
        return sorted(q.segment_id for q in self.view.lookup("wiki", DAY))

    def close(self) -> None:
        self.feed.close()
        self.view.close()


def test_end_to_end(kafka_bootstrap: str, topics: Topics, tmp_path: Path) -> None:
    started = time.monotonic()
    service = PlanService(kafka_bootstrap, topics, tmp_path / "state", tmp_path / "run.log", plan_every=2)
    service.start()
    watcher = Watcher(kafka_bootstrap, topics)
    try:
        with Historicals(kafka_bootstrap, topics, ["h1", "h2"], max_size=100_000):
            wait_for("both servers joined", lambda: {e.event.server for e in decoded(kafka_bootstrap, topics, "cluster")  # type: ignore[attr-defined]
                                                     if isinstance(e.event, ServerJoined)} == {"h1", "h2"}, service)
            send(kafka_bootstrap, topics, RulesSet(data_source="_default", rules=(
                {"type": "loadForever", "tieredReplicants": {"hot": 1}},)), "rules/_default")
            send(kafka_bootstrap, topics, DynamicConfigSet(config={"millisToWaitBeforeDeleting": 0}), "config")

            # 1. a batch task: lock the day, allocate two partitions, publish them, finish
            with TaskClient(kafka_bootstrap, topics, "index_wiki_1", "g1", "index", "wiki") as task:
                task.start()
                lock = task.lock(DAY)
                assert isinstance(lock.event, LockGranted)
                first = task.allocate(T0 + 1000, "seq", interval=DAY).event
                second = task.allocate(T0 + 2000, "seq", first.segment_id, interval=DAY).event  # type: ignore[attr-defined]
                assert isinstance(first, SegmentAllocated) and isinstance(second, SegmentAllocated)
                batch = [dataclasses.replace(a.segment, size=1000) for a in (first, second)]
                watcher.published(batch)
                assert isinstance(task.publish(batch).event, PublishAccepted)
                task.finish()
            v1 = [str(s.id) for s in batch]
            watcher.until("the batch visible", service, lambda: all(watcher.state(s) == "visible" for s in v1))
            assert watcher.served() == sorted(v1)

            # 2. compaction with segment locks: partitions 0 and 1 replaced by one segment of the same version
            with TaskClient(kafka_bootstrap, topics, "compact_wiki_1", "g2", "compact", "wiki") as task:
                task.start()
                assert isinstance(task.lock(DAY, granularity="segment", partition_ids=(0, 1)).event, LockGranted)
                out = task.allocate(T0 + 1000, "compact", interval=DAY, lock_granularity="segment").event
                assert isinstance(out, SegmentAllocated) and out.segment.overshadowed_segments == (0, 1)
                compacted = dataclasses.replace(out.segment, size=1500)
                watcher.published([compacted])
                assert isinstance(task.publish([compacted]).event, PublishAccepted)
                task.finish()
            c1 = str(compacted.id)
            watcher.until("the compacted segment visible and the inputs overshadowed", service,
                          lambda: watcher.state(c1) == "visible"
                          and all(watcher.state(s) in ("overshadowed", "absent") for s in v1))
            assert watcher.served() == [c1]

            # 3. a re-index under a new timeChunk lock: a higher version replaces the day
            with TaskClient(kafka_bootstrap, topics, "index_wiki_2", "g3", "index", "wiki") as task:
                task.start()
                lock = task.lock(DAY)
                assert isinstance(lock.event, LockGranted) and lock.event.lock.version > batch[0].version
                out = task.allocate(T0 + 1000, "seq2", interval=DAY).event
                assert isinstance(out, SegmentAllocated) and out.segment.version == lock.event.lock.version
                reindexed = dataclasses.replace(out.segment, size=2000)
                watcher.published([reindexed])
                assert isinstance(task.publish([reindexed]).event, PublishAccepted)
                task.finish()
            v2 = str(reindexed.id)
            # the planner marks the overshadowed segments unused and the historicals drop them
            watcher.until("only the new version left", service,
                          lambda: watcher.state(v2) == "visible"
                          and all(watcher.state(s) == "absent" for s in [*v1, c1]), timeout=180)
            assert watcher.served() == [v2]
            assert watcher.checks > len(watcher.changes) > 8
            time.sleep(1.0)
        assert service.stop() == 0
    finally:
        watcher.close()
        if service.alive():
            service.stop()

    # the whole log holds: no instant with two visible versions, every publish locked, sizes kept,
    # every command answered
    assert main(["audit", "--bootstrap", kafka_bootstrap, "--topic-prefix", topics.prefix]) == 0
    assert time.monotonic() - started < 90
