"""A planned load of a pair with nothing projected takes :meth:`Projected.enqueue`'s fast path
(``_enqueue_lone_load``), which writes the pair's projection and contribution out instead of deriving them.
Over random histories folded into a state and then planned (twice, with events between, cost caches and tier
indexes built for some servers), the fast path leaves exactly what the general path (derive, contribute)
leaves: the same commands, every fact and index with the same contents in the same insertion order, the same
changed-entry marks; and the state equals a fresh derivation of its facts."""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from coordinator.placement import codec
from coordinator.placement.projected import Projected, snapshot
from coordinator.placement.state import PlacementState
from coordinator.planner.planner import Plan, plan_state
from events.envelope import Envelope
from events.registry import Event
from events.schema import Instant
from tests.accepted import through_lockbox
from tests.unit.placement.history import T0, history

EXAMPLES = int(os.environ.get("PLACEMENT_EXAMPLES", "300"))


def _canon(value: Any) -> Any:
    """Contents and order: dicts and sets as lists in iteration order (what a pass over them sees)."""
    if isinstance(value, dict):
        return [(_canon(k), _canon(v)) for k, v in value.items()]
    if isinstance(value, set | frozenset):
        return [_canon(x) for x in value]
    if isinstance(value, list | tuple):
        return [_canon(x) for x in value]
    if hasattr(value, "__iter__") and not isinstance(value, str):  # SortedKeyList, SortedList
        return [_canon(x) for x in value]
    return value


_OPAQUE = {"caches", "tier_indexes", "used_index", "settled_before", "settled_of", "window"}


def _everything(state: PlacementState) -> dict[str, Any]:
    out = {k: _canon(v) for k, v in vars(state).items() if k not in _OPAQUE and not callable(v)}
    out["snapshot"] = snapshot(state)
    return out


def _fold_and_plan(events: list[Envelope[Event]], split: int, warm: int) -> tuple[PlacementState, list[Plan]]:
    state = PlacementState(load_timeout_ms=20 * 60_000)
    for name in sorted(state.tier_of)[:warm]:
        state.cache(name)
    plans = []
    for part in (events[:split], events[split:]):
        for env in part:
            state.evolve(env)
        for name in sorted(state.tier_of)[:warm]:  # kept current through the fast path too
            state.cache(name)
        for tier in sorted(state.tiers)[:warm]:
            state.tier_index(tier)
        now = max((env.occurred_at for env in events), default=T0)
        plans.append(plan_state(state, now, len(plans) + 1, T0, balance=False))
    return state, plans


def _counting(taken: list[bool]) -> Callable[..., bool]:
    fast = Projected._enqueue_lone_load

    def spy(self: Projected, cid: str, item: Any) -> bool:
        took = fast(self, cid, item)
        taken.append(took)
        return took
    return spy


@settings(max_examples=EXAMPLES, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow])
@given(history(), st.integers(0, 40), st.integers(0, 3))
def test_the_lone_load_fast_path_leaves_what_the_general_path_leaves(
        events: list[Envelope[Event]], split: int, warm: int) -> None:
    taken: list[bool] = []
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(Projected, "_enqueue_lone_load", _counting(taken))
        fast, fast_plans = _fold_and_plan(events, split, warm)
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(Projected, "_enqueue_lone_load", lambda self, cid, item: False)
        general, general_plans = _fold_and_plan(events, split, warm)
    assert fast_plans == general_plans
    assert _everything(fast) == _everything(general)
    for name in fast.caches:
        assert sorted(fast.cache(name).segment_ids()) == fast.projected_segments(name)
    fresh, _ = codec.restore((f, k, v) for f, k, v in codec.entries(fast) if v is not None)
    for name in sorted(fast.caches):
        fresh.cache(name)
    assert snapshot(fast) == snapshot(fresh)


def test_the_fast_path_is_taken_and_declines_what_it_does_not_cover() -> None:
    """Not vacuous: a planned first copy takes it; a load of a held segment, a second command for a queued pair,
    a move's load half and an unjoined server do not."""
    from events import Interval, SegmentDescriptor
    from events.cluster import ServerJoined
    from events.segments import SegmentAnnounced, SegmentsPublished
    seg = SegmentDescriptor("wiki", Interval(T0, T0 + 3_600_000), "v1", 0, 100)
    other = SegmentDescriptor("wiki", Interval(T0 + 3_600_000, T0 + 7_200_000), "v1", 0, 100)
    state = PlacementState()
    for i, event in enumerate([ServerJoined(server="h1", tier="_default_tier", max_size_bytes=10**9),
                               ServerJoined(server="h2", tier="_default_tier", max_size_bytes=10**9),
                               SegmentsPublished(task_id="t", segments=(seg, other)),
                               SegmentAnnounced(server="h2", segment=other)]):
        state.evolve(through_lockbox(Envelope(event, f"e{i}", Instant(T0), "k", None)))
    taken: list[bool] = []
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(Projected, "_enqueue_lone_load", _counting(taken))
        state.plan_load("h1", seg.id, "loading", T0)  # taken
        state.plan_load("h1", seg.id, "loading", T0)  # the pair has a load in flight
        state.plan_load("h2", other.id, "loading", T0)  # held
        state.plan_load("h1", other.id, "balancing", T0, source="h2")  # a move: not a plain load
        state.plan_load("h3", seg.id, "loading", T0)  # not joined
    assert taken == [True, False, False, False]
    fresh, _ = codec.restore((f, k, v) for f, k, v in codec.entries(state) if v is not None)
    assert snapshot(state) == snapshot(fresh)
