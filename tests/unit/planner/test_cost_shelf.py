"""The cost-cache shelf: a reconciled cache holds exactly the placement asked for and costs as a fresh one."""

from __future__ import annotations

import random

from coordinator.balancer.cost_cache import ServerCostCache
from coordinator.planner.cost_shelf import CostCacheShelf
from events import Interval, SegmentDescriptor

HOUR = 3_600_000
T0 = 1_700_000_000_000


def segment(rng: random.Random, i: int) -> SegmentDescriptor:
    start = T0 + rng.randrange(0, 2000) * HOUR + rng.choice((0, rng.randrange(HOUR)))
    return SegmentDescriptor(rng.choice(("wiki", "logs")), Interval(start, start + rng.choice((HOUR, 24 * HOUR, 7))),
                             f"v{i}", 0, 100)


def test_reconciled_cache_holds_exactly_the_placement_and_costs_as_a_fresh_cache() -> None:
    rng = random.Random(7)
    pool = [segment(rng, i) for i in range(600)]
    shelf = CostCacheShelf()
    for _ in range(12):
        placed = rng.sample(pool, rng.randrange(0, 300))
        cache = shelf.cache_for("h1", placed)
        assert sorted(cache.segment_ids(), key=lambda s: s.sort_key) == sorted(
            (s.id for s in placed), key=lambda s: s.sort_key)
        fresh = ServerCostCache()
        fresh.extend(placed)
        for probe in rng.sample(pool, 20):
            got, want = cache.cost_of(probe), fresh.cost_of(probe)
            assert abs(got - want) <= 1e-9 * max(1.0, abs(want)), (got, want)
    assert shelf.built == 1 and shelf.added > 0 and shelf.removed > 0


def test_forget_drops_servers_that_left() -> None:
    shelf = CostCacheShelf()
    shelf.cache_for("a", [])
    shelf.cache_for("b", [])
    shelf.forget(["b"])
    assert len(shelf) == 1
    shelf.cache_for("a", [])
    assert shelf.built == 3
