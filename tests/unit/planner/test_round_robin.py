"""Round-robin assignment (Druid's default, ``useRoundRobinSegmentAssignment``) spreads loads over every server of
the tier, across planning runs too: the planner agent plans each publish in its own run, and a cursor that
restarted at the first server every run sent every load of a 2-replica rule on 3 servers to the first two."""

from __future__ import annotations

from collections import Counter
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from coordinator.planner.simulator import RunReport, Scenario, Simulator


def _scenario(servers: int, replicas: int, per_publish: int, publishes: int) -> dict[str, Any]:
    """``servers`` empty servers; before each run from the second on, ``per_publish`` new hourly segments of a
    day of their own are published; balancing is off (maxSegmentsToMove 0), so every copy is where its load put
    it."""
    events = [{"beforeRun": 2 + k, "type": "publish",
               "segments": [{"dataSource": "wiki", "start": f"2026-{3 + k // 28:02d}-{1 + k % 28:02d}",
                             "count": per_publish, "granularity": "PT1H", "sizeBytes": 1000}]}
              for k in range(publishes)]
    return {"now": "2026-06-01T00:00:00Z",
            "servers": [{"name": f"h{i}", "tier": "_default_tier", "maxSizeBytes": 10**12} for i in range(servers)],
            "segments": [], "events": events, "runs": 1 + publishes,
            "rules": {"_default": [{"type": "loadForever", "tieredReplicants": {"_default_tier": replicas}}]},
            "dynamicConfig": {"smartSegmentLoading": False, "maxSegmentsToMove": 0,
                              "maxSegmentsInNodeLoadingQueue": 0}}


def _loads(reports: list[RunReport]) -> Counter[str]:
    return Counter(c.server for r in reports for c in r.plan.commands if c.type == "load")


def _run(doc: dict[str, Any], planner: str) -> list[RunReport]:
    return Simulator(Scenario.parse(doc)).run(compute_cost=False, planner=planner)


def test_two_replicas_on_three_servers_take_turns_across_runs() -> None:
    """One segment per run, 2 replicas, 3 servers: each server gets two thirds of the segments (h0 h1, h2 h0,
    h1 h2, ...), with the incremental planner (one run per publish) and the full one alike."""
    doc = _scenario(servers=3, replicas=2, per_publish=1, publishes=30)
    for planner in ("incremental", "full"):
        reports = _run(doc, planner)
        assert _loads(reports) == {"h0": 20, "h1": 20, "h2": 20}, planner
        held = Counter(n for n, (_srv, loaded, _q) in reports[-1].servers.items() for _ in loaded)
        assert held == {"h0": 20, "h1": 20, "h2": 20}, planner


@settings(max_examples=40, deadline=None, derandomize=True)
@given(servers=st.integers(2, 6), data=st.data())
def test_loads_spread_evenly_over_every_server(servers: int, data: st.DataObject) -> None:
    """Whatever the servers, replicas and publish sizes, no server gets more than one load above another's count
    (every server can take every segment), and both planners make the same loads."""
    replicas = data.draw(st.integers(1, servers), label="replicas")
    per_publish = data.draw(st.integers(1, 5), label="per_publish")
    publishes = data.draw(st.integers(1, 12), label="publishes")
    doc = _scenario(servers, replicas, per_publish, publishes)
    incremental, full = _run(doc, "incremental"), _run(doc, "full")
    loads = _loads(incremental)
    counts = [loads.get(f"h{i}", 0) for i in range(servers)]
    assert sum(counts) == replicas * per_publish * publishes
    assert max(counts) - min(counts) <= 1, counts
    assert [[c.to_json() for c in r.plan.commands] for r in full] == \
        [[c.to_json() for c in r.plan.commands] for r in incremental]
