"""The Spark balancer's per-batch logic without Spark: agreement with the planner, rolling equals rebuilding,
restore from state entries, convergence of the move loop, limits per batch."""

from __future__ import annotations

import statistics
from dataclasses import replace
from typing import Any

from coordinator.balancer.cost_cache import ServerCostCache
from coordinator.locks.seal import seal_event
from coordinator.placement.projected import snapshot
from coordinator.planner.cluster import ClusterView, Server, ServerState
from coordinator.planner.planner import balance_tier, plan
from coordinator.rules.dynamic_config import DynamicConfig
from coordinator.rules.ruleset import RuleSet
from events import Envelope
from events.registry import Event
from events.segments import SegmentsMarkedUnused, SegmentsPublished
from streaming.balancer.batch import BatchResult, run_batch
from streaming.balancer.commands import move_ids
from streaming.balancer.placement import ANSWERED, META, BalancerPlacement
from tests.unit.balancer.balancer_events import TIER, ClusterSpec, Executor, hourly

TIERS = (TIER,)


class Store:
    """What the Spark state holds: the ``placement`` and ``answered`` maps and the ``meta`` value, written only
    with :meth:`BalancerPlacement.changed` (as the stateful processor does)."""

    def __init__(self) -> None:
        self.placement: dict[tuple[str, ...], str] = {}
        self.answered: set[str] = set()
        self.meta: str | None = None

    def save(self, p: BalancerPlacement) -> None:
        for family, key, value in p.changed():
            if family == META:
                self.meta = value
            elif family == ANSWERED:
                self.answered.add(key[0])
            elif value is None:
                self.placement.pop(key, None)
            else:
                self.placement[key] = value

    def restore(self) -> BalancerPlacement:
        return BalancerPlacement.restore(((f, k, v) for (f, k), v in sorted(self.placement.items())), self.meta,
                                         answered=self.answered.__contains__)


def loop(spec: ClusterSpec, batches: int, rebuild_every_batch: bool) -> tuple[list[BatchResult], Executor]:
    executor = Executor.of(spec.placement())
    store = Store()
    placement = BalancerPlacement()
    pending: list[Envelope[Event]] = spec.events()
    results = []
    for b in range(batches):
        if rebuild_every_batch:
            placement = store.restore()
        result = run_batch(placement, pending, b, TIERS, store.answered.__contains__)
        store.save(placement)
        results.append(result)
        pending = result.commands + executor.answer(result.commands)
        if result.summaries[TIER]["moves"] == 0 and b > 0:
            break
    return results, executor


def frozen_view(spec: ClusterSpec, run: int) -> ClusterView:
    placement = spec.placement()
    segments = {s.id: s for held in placement.values() for s in held}
    return ClusterView(
        now=spec.events()[-1].occurred_at,
        servers={n: ServerState(Server(n, TIER, 10**12), frozenset(s.id for s in held))
                 for n, held in placement.items()},
        segments=segments, used=frozenset(segments),
        rules=RuleSet.parse({"_default": [{"type": "loadForever", "tieredReplicants": {TIER: 1}}]}),
        config=DynamicConfig.parse(spec.config), run=run)


def moves(result: BatchResult) -> list[tuple[str, str, str]]:
    out = []
    for env in result.commands:
        e: Any = env.event
        if env.event_type == "load_segment":
            out.append((str(e.segment.id), e.server, e.move_id))
    return out


def test_first_batch_picks_the_planner_moves_with_the_run_number_as_seed() -> None:
    spec = ClusterSpec(servers=8, data_sources=3, hours=48)
    placement = BalancerPlacement()
    run_batch(placement, [], 3, TIERS)  # a batch that balances nothing does not advance the run number
    result = run_batch(placement, spec.events(), 5, TIERS)
    assert result.summaries[TIER]["run"] == 1
    pure = balance_tier(frozen_view(spec, 1), TIER).commands
    assert pure and [(str(c.segment), c.server) for c in pure] == [(s, t) for s, t, _ in moves(result)]
    assert [c for c in plan(frozen_view(spec, 1)).commands if c.type == "move"] == list(pure)
    assert [m for _, _, m in moves(result)] == [move_ids(TIER, 1, i)[0] for i in range(len(pure))]
    other_seed = balance_tier(frozen_view(spec, 2), TIER).commands
    assert [c.segment for c in other_seed] != [c.segment for c in pure]  # the seed matters


def test_plan_without_balancing_has_no_balancing_moves() -> None:
    spec = ClusterSpec(servers=8, data_sources=3, hours=48)
    assert plan(frozen_view(spec, 1), balance=False).commands == ()


def test_rolling_caches_equal_a_rebuild_from_state_every_batch() -> None:
    spec = ClusterSpec(servers=10, data_sources=3, hours=72,
                       config={"smartSegmentLoading": False, "maxSegmentsToMove": 15,
                               "maxSegmentsInNodeLoadingQueue": 30})
    rolled, ex1 = loop(spec, 12, rebuild_every_batch=False)
    rebuilt, ex2 = loop(spec, 12, rebuild_every_batch=True)
    assert [r.commands for r in rolled] == [r.commands for r in rebuilt]
    assert ex1.counts() == ex2.counts()
    assert sum(r.summaries[TIER]["moves"] for r in rolled) > 15


def test_live_cost_indexes_hold_the_projected_placement() -> None:
    spec = ClusterSpec(servers=6, data_sources=2, hours=48,
                       config={"smartSegmentLoading": False, "maxSegmentsToMove": 5,
                               "maxSegmentsInNodeLoadingQueue": 20})
    placement = BalancerPlacement()
    executor = Executor.of(spec.placement())
    pending: list[Envelope[Event]] = spec.events()
    for b in range(4):
        result = run_batch(placement, pending, b, TIERS)
        answers = executor.answer(result.commands)
        pending = result.commands + answers[: len(answers) // 2]  # half the answers arrive: moves stay in flight
    state = placement.state
    assert state.tier_indexes and state.queue  # the tier's cost index was used, moves are still in flight
    for tier in list(state.tier_indexes):
        index = state.tier_index(tier)  # built, with the changes the fold noted since its last read applied
        for name in state.tiers[tier]:
            expected = set(state.projected_segments(name))
            assert all(index.holds(name, sid) for sid in expected)
            fresh = ServerCostCache()
            fresh.extend(state.segments[s] for s in expected)
            for probe in list(state.segments.values())[:20]:
                want = fresh.cost_of(probe)
                assert abs(state.costs_in(tier, probe)[name] - want) <= 1e-9 * max(1.0, want)
        assert len(index) == sum(len(state.projected_segments(n)) for n in state.tiers[tier])


def test_own_commands_read_back_and_duplicates_change_nothing() -> None:
    spec = ClusterSpec(servers=6, data_sources=2, hours=48)
    placement = BalancerPlacement()
    first = run_batch(placement, spec.events(), 0, TIERS)
    assert first.commands
    queued = dict(placement.state.queue)
    again = run_batch(placement, first.commands + first.commands, 1, TIERS)
    assert not again.summaries[TIER]["triggered"] and again.commands == []
    assert placement.state.queue == queued


def test_the_move_loop_converges_within_limits() -> None:
    spec = ClusterSpec(servers=20, new_servers=1, data_sources=5, hours=120,
                       config={"smartSegmentLoading": False, "maxSegmentsToMove": 100,
                               "maxSegmentsInNodeLoadingQueue": 100})
    results, executor = loop(spec, 80, rebuild_every_batch=False)
    assert results[-1].summaries[TIER]["moves"] == 0
    counts = executor.counts()
    mean = statistics.mean(counts.values())
    assert all(abs(c - mean) <= 0.05 * mean for c in counts.values()), counts
    for r in results:
        s = r.summaries[TIER]
        assert s["moves"] <= s["maxSegmentsToMove"]
        assert all(n <= s["balancingQueueCap"] for n in s["balancingQueues"].values())


def test_unsealed_publishes_and_marks_change_nothing() -> None:
    spec = ClusterSpec(servers=6, data_sources=2, hours=48)
    events = spec.events()
    ids = tuple(sorted(str(s.id) for segs in spec.placement().values() for s in segs))
    at = events[-1].occurred_at
    forged: list[Envelope[Event]] = [
        Envelope(SegmentsMarkedUnused(segment_ids=ids, reason="forged"), "f1", at, "ds0"),
        seal_event(Envelope(SegmentsMarkedUnused(segment_ids=ids, reason="forged"), "f2", at, "ds0"), b"guess"),
        Envelope(SegmentsPublished(task_id="forged", segments=(replace(hourly(1, 1)[0], version="v9"),)), "f3", at,
                 "ds0"),
    ]
    clean, dirty = BalancerPlacement(), BalancerPlacement()
    expected = run_batch(clean, events, 0, TIERS)
    got = run_batch(dirty, [*events[:-1], *forged, events[-1]], 0, TIERS)
    assert got.summaries[TIER]["refused"] == 3 and expected.summaries[TIER]["refused"] == 0
    assert got.commands == expected.commands and got.commands  # the forgeries changed no move
    assert snapshot(dirty.state) == snapshot(clean.state)
