"""A balancing run taken in slices (``coordinator/planner/balancing.py``).

Properties a user would notice: slicing a run changes nothing when no event comes in between (the same moves,
same ids, same order as one unsliced run of stages 7, 10 and 11); with publishes folded between slices the
moves still respect maxSegmentsToMove and every server's load queue limit, and no move takes a segment that
has a load queued.
"""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from coordinator.placement.state import PlacementState
from coordinator.planner.balancing import BalancingRun
from coordinator.planner.cluster import ClusterView, Server, ServerState
from coordinator.planner.planner import plan_state
from coordinator.rules.dynamic_config import DynamicConfig
from coordinator.rules.ruleset import RuleSet
from events import Envelope, Interval, SegmentDescriptor
from events.schema import Instant
from events.segment import SegmentId
from events.segments import SegmentsPublished

HOUR = 3_600_000
QUEUE = 4
CONFIG = {"smartSegmentLoading": False, "maxSegmentsToMove": 12, "maxSegmentsInNodeLoadingQueue": QUEUE}


@st.composite
def clusters(draw: st.DrawFn) -> ClusterView:
    """Servers of two tiers holding hourly segments of two data sources, unevenly (some servers empty)."""
    n_servers = draw(st.integers(2, 6))
    names = [f"s{i}" for i in range(n_servers)]
    tier_of = {n: ("hot" if i % 2 == 0 else "cold") for i, n in enumerate(names)}
    segs = [SegmentDescriptor(f"ds{d}", Interval(h * HOUR, (h + 1) * HOUR), "v1", 0, 100)
            for d in range(2) for h in range(draw(st.integers(1, 30)))]
    held: dict[str, set[SegmentId]] = {n: set() for n in names}
    for s in segs:
        for tier in ("hot", "cold"):
            options = [n for n in names if tier_of[n] == tier]
            if options:
                held[options[draw(st.integers(0, len(options) - 1)) % max(1, draw(st.integers(1, 3)))]].add(s.id)
    servers = {n: ServerState(Server(n, tier_of[n], 10**9), frozenset(held[n])) for n in names}
    rules = RuleSet.parse({"_default": [{"type": "loadForever", "tieredReplicants": {"hot": 1, "cold": 1}}]})
    return ClusterView(0, servers, {s.id: s for s in segs}, frozenset(s.id for s in segs), rules,
                       DynamicConfig.parse(CONFIG))


def _moves(commands: Any) -> list[tuple[str, str | None, str, str | None]]:
    return [(str(c.segment), c.source, c.server, c.command_id) for c in commands if c.type == "move"]


@settings(max_examples=60, deadline=None, derandomize=True)
@given(clusters(), st.lists(st.integers(1, 5), min_size=1, max_size=40))
def test_slices_without_events_between_make_the_moves_of_one_unsliced_run(view: ClusterView,
                                                                          sizes: list[int]) -> None:
    whole = plan_state(view.placement(), 0, 1, 0, balance=True, scope=set(), mark_overshadowed=False)
    run = BalancingRun(view.placement(), now=0, run=1, start=0)
    got = []
    for n in [*sizes, *([1000] * 1000)]:
        if run.done:
            break
        got += _moves(run.step(0, n).commands)
    assert run.done
    assert got == _moves(whole.commands)


@settings(max_examples=60, deadline=None, derandomize=True)
@given(clusters(), st.lists(st.integers(0, 3), min_size=1, max_size=30))
def test_publishes_between_slices_keep_the_move_budget_and_queue_limits(view: ClusterView,
                                                                        publishes: list[int]) -> None:
    state = view.placement()
    run = BalancingRun(state, now=0, run=1, start=0)
    moved: list[tuple[str, str | None, str, str | None]] = []
    new = 0
    for count in publishes:  # a few publishes planned (scoped runs) between any two slices of one candidate
        segs = tuple(SegmentDescriptor("late", Interval((new + k) * HOUR, (new + k + 1) * HOUR), "v1", 0, 100)
                     for k in range(count))
        new += count
        if segs:
            state.evolve(Envelope(SegmentsPublished(task_id="t", segments=segs), f"pub-{new}", Instant(0), "late"))
            plan_state(state, 0, 2 + new, 0, balance=False, scope={s.id for s in segs}, mark_overshadowed=False)
        step = run.step(0, 1)
        for c in step.commands:
            assert c.type == "move" and c.source is not None
            assert not any(item.move_id is None for item in _queued_loads(state, str(c.segment)))
        moved += _moves(step.commands)
        for name in state.tier_of:
            assert state.queue_size(name) <= QUEUE
        if run.done:
            break
    for tier in ("hot", "cold"):
        assert sum(1 for _sid, src, _dst, _id in moved if src is not None and state.tier_of[src] == tier) <= 12


def _queued_loads(state: PlacementState, sid_text: str) -> list[Any]:
    return [item for item in state.queue.values() if str(item.segment) == sid_text and item.action == "load"]


def test_a_slice_draws_at_least_one_candidate() -> None:
    state = PlacementState()
    with pytest.raises(ValueError, match="draws"):
        BalancingRun(state, now=0, run=1, start=0).step(0, 0)
