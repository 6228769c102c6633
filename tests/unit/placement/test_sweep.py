"""The planner agent's periodic full run as a sweep in slices (coordinator/planner/sweep.py), given / when / then.

The agent runs on a real RocksDB store with a sink that collects what it emits. The cluster: two servers, a rule
that loads the last day and drops what is older, twelve hourly segments loaded. Then time passes: every segment is
past its period, which only a run that looks at every segment notices (no event touched them). What a user would
notice when these fail: a publish waiting for a whole full run; a sweep that ends elsewhere than one full run (a
segment left loaded, or dropped twice under two ids); a restarted planner that redoes or skips part of a sweep.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

from events import Interval, SegmentDescriptor
from events.cluster import RulesSet, ServerJoined
from events.commands import DropSegment, LoadSegment
from events.envelope import Envelope
from events.registry import Event
from events.schema import Instant
from events.segments import SegmentAnnounced, SegmentsMarkedUnused, SegmentsPublished
from streaming.service.planner_agent import FORMAT_VERSION, PlannerAgent
from streaming.service.state import AgentStateStore
from tests.accepted import through_lockbox
from tests.unit.placement.history import T0
from tests.unit.placement.test_adapters_agree import TOPICS, Collect, Log

HOUR = 3_600_000
DAY = 24 * HOUR
LATER = T0 + 3 * DAY  # every old segment is past the rule's period by then
OLD = [SegmentDescriptor("wiki", Interval(T0 + h * HOUR, T0 + (h + 1) * HOUR), "v1", 0, 100) for h in range(12)]
FRESH = SegmentDescriptor("wiki", Interval(LATER - HOUR, LATER), "v1", 0, 100)
RULES = ({"type": "loadByPeriod", "period": "P1D", "tieredReplicants": {"_default_tier": 1}},
         {"type": "dropForever"})


def _env(event: Event, eid: str, at: int, key: str) -> Envelope[Event]:
    return Envelope(event, eid, Instant(at), key)


class Fed:
    """An agent on its own store, the log it reads and everything it emitted."""

    def __init__(self, path: Path, chunk: int, log: Log | None = None) -> None:
        self.store = AgentStateStore(path, FORMAT_VERSION)
        self.sink, self.log = Collect(), log or Log()
        self.agent = PlannerAgent(self.store, TOPICS, self.sink, server_timeout_ms=10 * DAY)
        self.agent.sweep_chunk = chunk
        self.emitted: list[Envelope[Event]] = []

    def take(self) -> list[Envelope[Event]]:
        out = self.sink.take()
        self.emitted += out
        return out

    def feed(self, events: list[Envelope[Event]]) -> list[Envelope[Event]]:
        self.agent.process([self.log.append(e) for e in events])
        return self.take()

    def loaded_cluster(self) -> None:
        """Rules, two servers, the twelve segments published, loaded where the agent sent them."""
        loads = self.feed([
            _env(RulesSet(data_source="_default", rules=RULES), "r", T0, "rules/_default"),
            _env(ServerJoined(server="h1", tier="_default_tier", max_size_bytes=10**9), "j1", T0, "h1"),
            _env(ServerJoined(server="h2", tier="_default_tier", max_size_bytes=10**9), "j2", T0, "h2"),
            through_lockbox(_env(SegmentsPublished(task_id="t", segments=tuple(OLD)), "p", T0 + 1, "wiki")),
        ])
        commands = [e.event for e in loads if isinstance(e.event, LoadSegment)]
        assert len(commands) == len(OLD)
        self.feed(loads)  # read back
        self.feed([_env(SegmentAnnounced(server=c.server, segment=c.segment), f"a{i}", T0 + 1000, "wiki")
                   for i, c in enumerate(commands)])

    def timer_after_loading(self) -> int:
        """:meth:`loaded_cluster`, then the timer's run at ``LATER`` (a sweep's first slice when ``chunk`` > 0);
        returns how many events were emitted before that run."""
        self.loaded_cluster()
        before = len(self.emitted)
        self.agent.tick(LATER)
        return before

    def publish_fresh(self) -> list[Envelope[Event]]:
        return self.feed([through_lockbox(_env(SegmentsPublished(task_id="t2", segments=(FRESH,)), "p2", LATER,
                                               "wiki"))])

    def slices(self) -> int:
        n = 0
        while self.agent.slicing:
            self.agent.next_slice(LATER)
            self.take()
            n += 1
        return n


def _decisions(emitted: list[Envelope[Event]]) -> tuple[set[str], set[str], set[str]]:
    """Command ids of the loads and of the drops, and the segments marked unused."""
    loads = {e.event_id for e in emitted if isinstance(e.event, LoadSegment)}
    drops = {e.event_id for e in emitted if isinstance(e.event, DropSegment)}
    marked = {s for e in emitted if isinstance(e.event, SegmentsMarkedUnused) for s in e.event.segment_ids}
    return loads, drops, marked


def _old_dropped(emitted: list[Envelope[Event]]) -> None:
    drops = [e.event for e in emitted if isinstance(e.event, DropSegment)]
    assert sorted(d.segment_id for d in drops) == sorted(str(s.id) for s in OLD)  # each once
    assert _decisions(emitted)[2] == {str(s.id) for s in OLD}


def test_a_publish_between_two_slices_is_planned_before_the_sweep_ends_and_the_sweep_ends_as_one_full_run() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        # the reference: the periodic full run in one run (sweep_chunk 0)
        ref = Fed(Path(tmp) / "ref", 0)
        ref_before = ref.timer_after_loading()
        ref.take()
        assert not ref.agent.slicing
        ref_fresh = ref.publish_fresh()
        # sliced: five segments a slice
        fed = Fed(Path(tmp) / "sliced", 5)
        before = fed.timer_after_loading()  # the sweep begins with its first slice
        first = fed.take()
        assert fed.agent.slicing and fed.agent.sweep is not None
        assert len([e for e in first if isinstance(e.event, DropSegment)]) == 5  # the newest five, no more
        # when a publish arrives between two slices, its load goes out at once, before the sweep ends
        fresh = fed.publish_fresh()
        assert [(e.event.segment.id) for e in fresh if isinstance(e.event, LoadSegment)] == [FRESH.id]
        assert fed.agent.sweep is not None
        assert fed.slices() == 3  # 12 segments in slices of 5 (the tick took the first 5), then one marking slice
        assert fed.agent.sweep is None and fed.agent.last_full_run == LATER
        # then the sweep has decided what the one full run decided, under the same ids
        swept = fed.emitted[before:]
        _old_dropped(swept)
        _old_dropped(ref.emitted)
        assert _decisions(swept) == _decisions(ref.emitted[ref_before:])
        assert _decisions(fresh)[0] == _decisions(ref_fresh)[0]
        # and a timer run after it has nothing left to do: no second sweep before FULL_RUN_EVERY_MS
        fed.agent.tick(LATER + 1000)
        assert fed.take() == [] and not fed.agent.slicing
        fed.store.close()
        ref.store.close()


def test_a_restart_resumes_the_sweep_where_its_last_committed_slice_left_it() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        whole = Fed(Path(tmp) / "whole", 3)
        before = whole.timer_after_loading()
        assert whole.slices() == 4  # 12 segments in slices of 3 (the tick took the first 3), then one marking slice
        uninterrupted = whole.emitted[before:]
        whole.store.close()

        fed = Fed(Path(tmp) / "crashed", 3)
        before = fed.timer_after_loading()
        fed.agent.next_slice(LATER)
        fed.take()
        progress = fed.agent.sweep.progress() if fed.agent.sweep is not None else None
        assert progress is not None and progress["slices"] == 2
        first_part = fed.emitted[before:]
        fed.store.close()  # the process ends here: each slice was committed with its progress
        again = Fed(Path(tmp) / "crashed", 3, fed.log)
        assert again.agent.sweep is not None and again.agent.sweep.progress() == progress
        assert again.slices() == 3  # two slices of 3, one marking
        second_part = again.emitted
        # the same decisions under the same ids as without the restart, none made twice
        assert not _decisions(first_part)[1] & _decisions(second_part)[1]
        assert _decisions(first_part + second_part) == _decisions(uninterrupted)
        _old_dropped(first_part + second_part)
        again.store.close()


def test_the_first_whole_cluster_marking_after_a_start_is_the_sweeps_in_marking_slices() -> None:
    """Given hours 0-5 of v1 overshadowed by a served v2 when the planner starts (nothing marked them: publishes and
    announces do not mark), when the timer runs, then its own run leaves the whole-cluster marking to the sweep,
    whose marking slice (after its planning slices) marks exactly those six unused."""
    v2 = [SegmentDescriptor("wiki", Interval(T0 + h * HOUR, T0 + (h + 1) * HOUR), "v2", 0, 100) for h in range(6)]
    other = [SegmentDescriptor("zoo", Interval(T0 + h * HOUR, T0 + (h + 1) * HOUR), "v1", 0, 100) for h in range(4)]
    with tempfile.TemporaryDirectory() as tmp:
        fed = Fed(Path(tmp) / "marking", 5)
        loads = fed.feed([
            _env(ServerJoined(server="h1", tier="_default_tier", max_size_bytes=10**9), "j1", T0, "h1"),
            through_lockbox(_env(SegmentsPublished(task_id="t", segments=(*OLD, *v2)), "p", T0 + 1, "wiki")),
            through_lockbox(_env(SegmentsPublished(task_id="t2", segments=tuple(other)), "p2", T0 + 1, "zoo")),
        ])
        commands = [e.event for e in loads if isinstance(e.event, LoadSegment)]
        assert len(commands) == len(OLD) + len(v2) + len(other)
        fed.feed([_env(SegmentAnnounced(server=c.server, segment=c.segment), f"a{i}", T0 + 1000, "wiki")
                  for i, c in enumerate(commands)])
        assert fed.agent.state.mark_all
        fed.agent.tick(LATER)
        first = fed.take()
        assert not [e for e in first if isinstance(e.event, SegmentsMarkedUnused)]  # the tick's run marks nothing
        marks: list[tuple[bool, set[str]]] = []  # per slice: whether it marked, and what
        while fed.agent.slicing:
            marking = fed.agent.sweep is not None and fed.agent.sweep.tail
            fed.agent.next_slice(LATER)
            marks.append((marking, _decisions(fed.take())[2]))
        assert [m for m, _ in marks] == [False] * (len(marks) - 1) + [True]  # planning slices, then one marking
        assert marks[-1][1] == {str(s.id) for s in OLD[:6]}
        assert not fed.agent.state.mark_all  # the whole-cluster marking is done
        fed.store.close()
