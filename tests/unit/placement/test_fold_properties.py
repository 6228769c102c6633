"""The placement fold, kept incrementally, equals the same facts derived afresh, after every event."""

from __future__ import annotations

import os

from hypothesis import HealthCheck, given, settings

from coordinator.balancer.server_costs import ServerSegments
from coordinator.placement import codec
from coordinator.placement.projected import snapshot
from coordinator.placement.state import PlacementState
from events.envelope import Envelope
from events.registry import Event
from tests.unit.placement.history import T0, history

EXAMPLES = int(os.environ.get("PLACEMENT_EXAMPLES", "300"))


def _rebuilt(state: PlacementState) -> PlacementState:
    fresh, _ = codec.restore((f, k, v) for f, k, v in codec.entries(state) if v is not None)
    return fresh


def _with_caches(state: PlacementState) -> PlacementState:
    for name in sorted(state.tier_of):
        state.cache(name)
    for tier in sorted(state.tiers):
        state.tier_index(tier)
    return state


def _indexes_exact(state: PlacementState) -> None:
    """Each tier's cost index holds exactly its servers' projected segments, and its costs are the brute-force
    sums over them (1e-9 relative) for every known segment."""
    for tier, index in sorted(state.tier_indexes.items()):
        names = state.tiers[tier]
        assert list(index.servers) == names
        assert len(index) == sum(len(state.projected_segments(n)) for n in names)
        brute = {}
        for n in names:
            brute[n] = ServerSegments()
            for sid in state.projected_segments(n):
                assert index.holds(n, sid)
                brute[n].add(state.segments[sid])
        for seg in list(state.segments.values())[:8]:
            got = state.costs_in(tier, seg)
            for n in names:
                want = brute[n].cost_of(seg)
                assert abs(got[n] - want) <= 1e-9 * max(abs(want), 1e-300), (tier, n, seg, got[n], want)


@settings(max_examples=EXAMPLES, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow])
@given(history())
def test_incremental_projection_equals_a_fresh_derivation(events: list[Envelope[Event]]) -> None:
    state = PlacementState(load_timeout_ms=20 * 60_000)
    for i, env in enumerate(events):
        _with_caches(state)  # caches built early are then kept current by every change
        state.evolve(env)
        if i % 5 == 4:
            state.expire(env.occurred_at)
        assert snapshot(_with_caches(state)) == snapshot(_with_caches(_rebuilt(state)))
        for name in state.caches:  # a cache holds exactly the server's projected segments
            assert sorted(state.caches[name].segment_ids()) == state.projected_segments(name)
        _indexes_exact(state)


@settings(max_examples=EXAMPLES // 3, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow])
@given(history())
def test_the_store_of_changed_entries_equals_the_whole_state(events: list[Envelope[Event]]) -> None:
    """An adapter that writes only what the fold marked changed holds exactly the state's entries."""
    state = PlacementState()
    stored: dict[tuple[str, str], bytes] = {}
    settled: set[str] = set()
    state.settled_before = settled.__contains__
    for env in events:
        state.evolve(env)
        for family, key, value in codec.changed(state):
            if family == "ans":  # None: the window forgot it
                (settled.add if value is not None else settled.discard)(key)
            elif value is None:
                stored.pop((family, key), None)
            else:
                stored[(family, key)] = value
        whole = {(f, k): v for f, k, v in codec.entries(state) if v is not None}
        assert stored == whole
    assert T0 > 0
