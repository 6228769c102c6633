"""Server choice: eligibility, ranking with tie-breaks, B, and the move rule."""

from __future__ import annotations

import numpy as np
import pytest

from coordinator.balancer.cost import CostModel
from coordinator.balancer.server_costs import ServerSegments
from coordinator.balancer.simulation import Cluster, hourly_segments, place_greedy, place_random, rebalance, report
from coordinator.balancer.strategy import Candidate, best_servers, choose_move, num_best_servers, rank
from events import Interval, SegmentDescriptor, parse_instant

T0 = parse_instant("2026-01-01")
H = 3_600_000


def seg(h: int, ds: str = "wiki", size: int = 10) -> SegmentDescriptor:
    return SegmentDescriptor(ds, Interval(T0 + h * H, T0 + (h + 1) * H), "v1", 0, size)


def server(name: str, *segments: SegmentDescriptor, max_size: int = 1000, decommissioning: bool = False) -> Candidate:
    held = ServerSegments()
    for s in segments:
        held.add(s)
    return Candidate(name, max_size, held.size_bytes, held, decommissioning)


@pytest.mark.parametrize(("replicants", "servers", "base", "expected"),
                         [(1, 1, 5, 1), (1, 5, 5, 2), (1, 24, 5, 2), (1, 25, 5, 3), (2, 300, 5, 5), (3, 8, 2, 6),
                          (1, 0, 5, 0), (4, 2, 5, 2)])
def test_num_best_servers(replicants: int, servers: int, base: float, expected: int) -> None:
    assert num_best_servers(replicants, servers, base) == expected


def test_ranking_by_cost_then_free_space_then_name() -> None:
    near, far = seg(0), seg(200)
    servers = [server("b", far, max_size=500), server("a", far, max_size=500), server("c", far, max_size=900),
               server("d", near)]
    assert [r.name for r in rank(seg(1), servers)] == ["c", "a", "b", "d"]


def test_full_and_decommissioning_servers_are_not_eligible() -> None:
    big = seg(0, size=600)
    servers = [server("full", seg(50, size=500)), server("draining", decommissioning=True), server("ok")]
    assert [r.name for r in best_servers(big, servers, 5)] == ["ok"]


def test_a_segment_moves_only_to_a_strictly_cheaper_server() -> None:
    a, b = seg(0), seg(1)
    holder = server("h", a, b)
    other = server("s", seg(1, "other"), seg(2, "other"))
    assert choose_move(a, holder, [holder, other], best=2) is not None  # other data source, farther: cheaper
    twin = server("t", seg(1))
    alone = server("h2", a, seg(1))
    assert choose_move(a, alone, [alone, twin], best=2) is None  # equal cost: stay


def test_a_new_empty_fifth_server_gets_segments() -> None:
    """Seed 004's literal rule (move only when the holder is outside the top B) would leave it empty."""
    segments = [seg(h) for h in range(40)]
    holders = [server(f"s{k}", *[s for i, s in enumerate(segments) if i % 4 == k]) for k in range(4)]
    empty = server("s4")
    everyone = [*holders, empty]
    best = num_best_servers(1, 5)
    moved = [choose_move(s, holders[i % 4], everyone, best) for i, s in enumerate(segments)]
    assert any(m is not None and m.name == "s4" for m in moved)


def test_greedy_placement_spreads_queries_and_rebalancing_improves_random() -> None:
    segments = hourly_segments(3, 4, T0)
    names = [f"s{i}" for i in range(8)]
    rand = Cluster(segments, names, CostModel())
    place_random(rand, np.random.default_rng(1))
    greedy = Cluster(segments, names, CostModel())
    place_greedy(greedy)
    r, g = report(rand), report(greedy)
    assert g.mean_spread > r.mean_spread and g.total_cost < r.total_cost
    assert g.max_per_server - g.min_per_server <= 1
    before = r.total_cost
    made = rebalance(rand, 100, np.random.default_rng(2))
    after = report(rand)
    assert made > 0 and after.total_cost < before and after.mean_spread >= r.mean_spread


def test_simulation_is_deterministic() -> None:
    segments = hourly_segments(2, 2, T0)
    runs = []
    for _ in range(2):
        c = Cluster(segments, ["a", "b", "c"], CostModel())
        place_random(c, np.random.default_rng(5))
        rebalance(c, 20, np.random.default_rng(6))
        runs.append(c.assignment())
    assert runs[0] == runs[1]


def test_disk_normalized_ranking_prefers_emptier_disks() -> None:
    """Same cost per segment: plain cost ties break on free space; normalized cost is lower on the emptier disk."""
    crowded = ServerSegments()
    roomy = ServerSegments()
    for h in (100, 101):
        crowded.add(seg(h, "a", size=300))
        roomy.add(seg(h, "b", size=10))
    servers = [Candidate("crowded", 1000, crowded.size_bytes, crowded, segment_count=2),
               Candidate("roomy", 1000, roomy.size_bytes, roomy, segment_count=2)]
    plain = rank(seg(0), servers)
    normalized = rank(seg(0), servers, disk_normalized=True)
    assert plain[0].cost == plain[1].cost
    assert [r.name for r in normalized] == ["roomy", "crowded"]
    assert normalized[1].cost == pytest.approx(plain[1].cost / 2 * 0.6)
