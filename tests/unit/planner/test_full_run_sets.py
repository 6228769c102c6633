"""A full planning run finds the segments that need something with set arithmetic over target classes and
per-tier copy sets (stages 1, 3-4, 12 and the start metrics); a scoped run asks each segment of its scope.
Over random clusters (tiers, decommissioning servers, holdings, queued loads, drops and moves, rules that
depend on the interval or not, drop and broadcast rules, queue limits and throttles) the full run makes
exactly the commands, in the same order and with the same ids, and the same metrics, as a scoped run whose
scope is every segment anywhere: what a user sees does not depend on which way the segments were found."""

from __future__ import annotations

import os
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from coordinator.placement.state import PlacementState
from coordinator.planner.cluster import ClusterView, QueueItem, Server, ServerState
from coordinator.planner.planner import Plan, plan_state
from coordinator.rules.dynamic_config import DynamicConfig
from coordinator.rules.ruleset import RuleSet
from events import Interval, SegmentDescriptor, parse_instant

EXAMPLES = int(os.environ.get("PLANNER_EXAMPLES", "80"))
HOUR = 3_600_000
NOW = parse_instant("2026-06-01")
START = parse_instant("2026-05-30")
TIERS = ("hot", "cold")
RULES = {
    # interval-free: one target for the whole data source
    "wiki": [{"type": "loadForever", "tieredReplicants": {"hot": 2, "cold": 1}}],
    # interval-dependent: recent segments on both tiers, older ones dropped
    "logs": [{"type": "loadByPeriod", "period": "P1D", "tieredReplicants": {"hot": 1, "cold": 1}},
             {"type": "dropForever"}],
    "dims": [{"type": "broadcastForever"}],
    "_default": [{"type": "loadForever", "tieredReplicants": {"hot": 1}}],
}


@st.composite
def views(draw: st.DrawFn) -> ClusterView:
    names = [f"s{i}" for i in range(draw(st.integers(1, 6)))]
    tier_of = {n: draw(st.sampled_from(TIERS)) for n in names}
    segments = {}
    for source in draw(st.lists(st.sampled_from(["wiki", "logs", "dims", "other"]), min_size=1, max_size=3,
                                unique=True)):
        for h in range(draw(st.integers(1, 8))):
            start = START + h * 6 * HOUR
            seg = SegmentDescriptor(source, Interval(start, start + HOUR), "v1", draw(st.integers(0, 1)),
                                    draw(st.sampled_from([0, 1000, 5000])))
            segments[seg.id] = seg
    ids = sorted(segments, key=lambda s: s.sort_key)
    used = frozenset(s for s in ids if draw(st.integers(0, 9)) > 0)
    loaded: dict[str, set[Any]] = {n: set() for n in names}
    queues: dict[str, list[QueueItem]] = {n: [] for n in names}
    for sid in ids:
        for n in names:
            roll = draw(st.integers(0, 9))
            if roll < 4:
                loaded[n].add(sid)
            elif roll == 4:
                queues[n].append(QueueItem("load", sid))
            elif roll == 5 and len(names) > 1:  # a move onto n from a server holding it
                sources = [m for m in names if m != n and sid in loaded[m]]
                if sources:
                    queues[n].append(QueueItem("load", sid, "balancing", f"m-{n}-{sid}", sources[0]))
    for n in names:  # a queued drop of something held
        held = sorted(loaded[n], key=lambda s: s.sort_key)
        if held and draw(st.booleans()):
            queues[n].append(QueueItem("drop", held[draw(st.integers(0, len(held) - 1))]))
    decommissioning = {n for n in names if len(names) > 1 and draw(st.integers(0, 4)) == 0}
    capacity = draw(st.sampled_from([10**9, 12_000]))
    servers = {n: ServerState(Server(n, tier_of[n], capacity, n in decommissioning), frozenset(loaded[n]),
                              tuple(queues[n])) for n in names}
    config = draw(st.sampled_from([
        {}, {"smartSegmentLoading": False, "maxSegmentsInNodeLoadingQueue": 2, "replicationThrottleLimit": 1},
        {"smartSegmentLoading": False, "maxSegmentsInNodeLoadingQueue": 0, "replicationThrottleLimit": 3},
    ]))
    return ClusterView(NOW, servers, segments, used, RuleSet.parse(RULES), DynamicConfig().updated(config))


def _full(view: ClusterView) -> Plan:
    return plan_state(view.placement(), view.now, 1, view.coordinator_start, balance=False,
                      mark_overshadowed=False)


def _scoped_everywhere(view: ClusterView) -> Plan:
    state: PlacementState = view.placement()
    everywhere = set(state.used) | set(state.holders) | set(state.pending)
    for name in state.tier_of:
        everywhere.update(state.loading[name])
    return plan_state(state, view.now, 1, view.coordinator_start, balance=False, mark_overshadowed=False,
                      scope=everywhere)


def _per_segment_metrics(p: Plan) -> dict[str, object]:
    return {k: v for k, v in p.metrics.items() if not k.startswith(("segment/loadQueue", "segment/dropQueue"))}


@settings(max_examples=EXAMPLES, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(views())
def test_a_full_run_decides_as_if_it_asked_every_segment(view: ClusterView) -> None:
    full, scoped = _full(view), _scoped_everywhere(view)
    assert full.commands == scoped.commands
    assert full.mark_unused == scoped.mark_unused
    assert full.deferred == scoped.deferred
    assert _per_segment_metrics(full) == _per_segment_metrics(scoped)


def test_the_sets_find_what_needs_something() -> None:
    """Not vacuous: a cluster with an unserved segment, a short one, a surplus copy and an unused copy."""
    segs = [SegmentDescriptor("wiki", Interval(START + h * HOUR, START + (h + 1) * HOUR), "v1") for h in range(4)]
    a, b, c, d = (s.id for s in segs)
    servers = {"h1": ServerState(Server("h1", "hot", 10**9), frozenset({b, c, d})),
               "h2": ServerState(Server("h2", "hot", 10**9), frozenset({c})),
               "h3": ServerState(Server("h3", "hot", 10**9), frozenset({c})),
               "c1": ServerState(Server("c1", "cold", 10**9), frozenset({b, c}))}
    view = ClusterView(NOW, servers, {s.id: s for s in segs}, frozenset({a, b, c}), RuleSet.parse(RULES))
    full = _full(view)
    kinds = sorted((cmd.type, str(cmd.segment) == str(x)) for cmd in full.commands for x in (a, b, c, d)
                   if cmd.segment == x)
    assert ("load", True) in kinds and ("drop", True) in kinds
    assert {cmd.segment for cmd in full.commands if cmd.type == "load"} >= {a, b}  # a: 3 copies, b: a second hot
    assert {cmd.segment for cmd in full.commands if cmd.type == "drop"} == {c, d}  # c: one hot copy too many
    assert full.commands == _scoped_everywhere(view).commands
