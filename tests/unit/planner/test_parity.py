"""Issue 14: the planner where it differed from Druid (drops, drains within maxSegmentsToMove, smart loading per
tier, rules and config as Druid's APIs change them). Every scenario runs with both planners (see ``run``)."""

from __future__ import annotations

from collections import Counter
from typing import Any

import pytest

from coordinator.planner.simulator import Scenario, Simulator
from tests.unit.planner.test_simulations import NOW, hourly, run, servers


def _ids(count: int, day: str = "2026-05-01") -> list[str]:
    return [f"wiki_{day}T{h:02d}:00:00.000Z_{day}T{h + 1:02d}:00:00.000Z_v1" for h in range(count)]


ONE_REPLICA = {"_default": [{"type": "loadForever", "tieredReplicants": {"_default_tier": 1}}]}


@pytest.mark.parametrize("size", [1000, 0])
def test_surplus_copies_are_dropped_from_the_fullest_server_first(size: int) -> None:
    """Two servers hold the same 4 segments, the rule asks for 1 replica: they end with 2 each, not 4 and 0
    (free space, then segments held, re-read after every queued drop; equal sizes and zero sizes alike)."""
    reports = run({"now": NOW, "servers": servers(2), "segments": [hourly("wiki", 4, size=size)],
                   "initialPlacement": {"h0": _ids(4), "h1": _ids(4)}, "rules": ONE_REPLICA, "runs": 1})
    drops = Counter(c.server for c in reports[0].plan.commands if c.type == "drop")
    assert drops == {"h0": 2, "h1": 2}
    assert sorted(len(loaded) for _s, loaded, _q in reports[0].servers.values()) == [2, 2]


def test_surplus_copies_follow_the_projection_across_three_servers() -> None:
    reports = run({"now": NOW, "servers": servers(3), "segments": [hourly("wiki", 6)],
                   "initialPlacement": {"h0": _ids(6), "h1": _ids(6), "h2": _ids(6)}, "rules": ONE_REPLICA,
                   "runs": 1})
    assert sorted(len(loaded) for _s, loaded, _q in reports[0].servers.values()) == [2, 2, 2]


def _draining(config: dict[str, Any], runs: int = 1, count: int = 10) -> list[Any]:
    """h0 (decommissioning) holds ``count`` segments, h1 holds them too (2 replicas wanted), h2 is empty."""
    return run({"now": NOW, "servers": servers(3), "segments": [hourly("wiki", count)],
                "initialPlacement": {"h0": _ids(count), "h1": _ids(count)},
                "rules": {"_default": [{"type": "loadForever", "tieredReplicants": {"_default_tier": 2}}]},
                "dynamicConfig": {"smartSegmentLoading": False, "maxSegmentsInNodeLoadingQueue": 0, **config},
                "events": [{"beforeRun": 1, "type": "decommission", "name": "h0"}], "runs": runs})


def test_drains_count_against_max_segments_to_move() -> None:
    """Moves off a decommissioning server are moves: per tier and run drains plus balancing moves stay within
    maxSegmentsToMove (the old planner drained all 10 in one run)."""
    reports = _draining({"maxSegmentsToMove": 3}, runs=6)
    for r in reports:
        moves = [c for c in r.plan.commands if c.type == "move"]
        assert len(moves) <= 3
    first = [c for c in reports[0].plan.commands if c.type == "move"]
    assert len(first) == 3 and all(c.source == "h0" for c in first)  # drains go first
    assert reports[-1].servers["h0"][1] == ()  # and the server still empties, 3 per run


def test_decommissioning_max_percent_of_max_segments_to_move_is_honoured() -> None:
    """Druid 27's rule (its BalanceSegmentsTest: 60 % of 3 moves): ceil(0.6 * 3) = 2 drains per run, the balancer
    may use the rest; 0 % drains nothing."""
    reports = _draining({"maxSegmentsToMove": 3, "decommissioningMaxPercentOfMaxSegmentsToMove": 60}, runs=2)
    for r in reports:
        drains = [c for c in r.plan.commands if c.type == "move" and c.source == "h0"]
        assert len(drains) == 2
        assert sum(1 for c in r.plan.commands if c.type == "move") <= 3
    none = _draining({"maxSegmentsToMove": 3, "decommissioningMaxPercentOfMaxSegmentsToMove": 0}, runs=2)
    assert not any(c.type == "move" and c.source == "h0" for r in none for c in r.plan.commands)


def test_drains_leave_balancing_only_what_remains_of_max_segments_to_move() -> None:
    """A skewed tier that also drains: with maxSegmentsToMove 4 and 3 segments to drain, balancing gets 1."""
    ids = _ids(20)
    reports = run({"now": NOW, "servers": servers(3), "segments": [hourly("wiki", 20)],
                   "initialPlacement": {"h0": ids[:3], "h1": ids[3:]}, "rules": ONE_REPLICA,
                   "dynamicConfig": {"smartSegmentLoading": False, "maxSegmentsInNodeLoadingQueue": 0,
                                     "maxSegmentsToMove": 4},
                   "events": [{"beforeRun": 1, "type": "decommission", "name": "h0"}], "runs": 1})
    moves = [c for c in reports[0].plan.commands if c.type == "move"]
    assert sum(1 for c in moves if c.source == "h0") == 3
    assert sum(1 for c in moves if c.source != "h0") == 1


def test_smart_loading_computes_max_segments_to_move_per_tier() -> None:
    """1,000 replicas on a tier of one full and one empty server: smart loading allows 12.5 % of them (125) to
    move, where Druid 27's cluster-wide formula stopped at 100; a small tier beside it keeps the floor of 100."""
    ids = [str(seg.id) for seg, _used in Scenario.parse({"now": NOW, "servers": [],
                                                          "segments": [hourly("wiki", 1000)]}).segments]
    reports = run({"now": NOW, "servers": servers(2, "big", "b") + servers(2, "small", "s"),
                   "segments": [hourly("wiki", 1000), hourly("tiny", 40)],
                   "initialPlacement": {"b0": ids},
                   "rules": {"tiny": [{"type": "loadForever", "tieredReplicants": {"small": 1}}],
                             "_default": [{"type": "loadForever", "tieredReplicants": {"big": 1}}]},
                   "runs": 1})
    moved = reports[0].plan.metrics["segment/moved/count"]
    assert isinstance(moved, dict) and moved["big"] == 125


def test_a_move_whose_target_leaves_keeps_the_source_copy_and_leaves_nothing_in_flight() -> None:
    """Druid's SegmentBalancingTest.testDropDoesNotHappenWhenLoadFails: moves are queued, the target leaves before
    loading them; the source keeps every segment and the moves' drop halves are settled with their load halves."""
    segs = [{"dataSource": "wiki", "start": "2026-05-01", "count": 10, "granularity": "P1D", "sizeBytes": 500}]
    ids = [str(seg.id) for seg, _used in Scenario.parse({"now": NOW, "servers": [], "segments": segs}).segments]
    doc = {"now": NOW, "servers": servers(2), "segments": segs, "initialPlacement": {"h0": ids},
           "rules": {"wiki": [{"type": "loadForever", "tieredReplicants": {"_default_tier": 1}}]},
           "dynamicConfig": {"smartSegmentLoading": False, "maxSegmentsToMove": 10,
                             "maxSegmentsInNodeLoadingQueue": 0},
           "loadCompletion": "manual", "runs": 2,
           "events": [{"beforeRun": 2, "type": "remove_server", "name": "h1"},
                      {"beforeRun": 2, "type": "complete_queues"}]}
    for planner in ("full", "incremental"):
        sim = Simulator(Scenario.parse(doc))
        reports = sim.run(planner=planner)
        assert any(c.type == "move" for c in reports[0].plan.commands)
        assert [str(s) for s in reports[1].servers["h0"][1]] == sorted(ids)
        assert sim.state.queue == {}


# -- Druid's coordinator simulation tests (SegmentLoadingTest), through servers that join or load with data ---------

_DAYS = [{"dataSource": "wiki", "start": "2026-05-01", "count": 10, "granularity": "P1D", "sizeBytes": 500}]


def _day_ids() -> list[str]:
    return [str(seg.id) for seg, _used in Scenario.parse({"now": NOW, "servers": [], "segments": _DAYS}).segments]


def _config(moves: int, queue: int, throttle: int) -> dict[str, Any]:
    return {"smartSegmentLoading": False, "maxSegmentsToMove": moves, "maxSegmentsInNodeLoadingQueue": queue,
            "replicationThrottleLimit": throttle}


def _replicas(n: int) -> dict[str, Any]:
    return {"wiki": [{"type": "loadForever", "tieredReplicants": {"_default_tier": n}}]}


def _assigned(report: Any) -> int:
    counts = report.plan.metrics.get("segment/assigned/count") or {}
    return sum(counts.values())


def test_second_replica_is_throttled() -> None:
    """SegmentLoadingTest.testSecondReplicaOnAnyTierIsThrottled: replicationThrottleLimit 2 assigns 2 replicas."""
    reports = run({"now": NOW, "servers": servers(2), "segments": _DAYS, "initialPlacement": {"h0": _day_ids()},
                   "rules": _replicas(2), "dynamicConfig": _config(0, 0, 2), "runs": 1})
    assert _assigned(reports[0]) == 2
    assert [len(reports[0].servers[n][1]) for n in ("h0", "h1")] == [10, 2]


def test_loads_of_fully_replicated_segments_are_cancelled_when_a_server_joins_with_them() -> None:
    """SegmentLoadingTest.testLoadOfFullyReplicatedSegmentGetsCancelled: a server joins holding the second replica
    of every segment; the 10 replica loads still queued elsewhere are cancelled."""
    ids = _day_ids()
    reports = run({"now": NOW, "servers": servers(2), "segments": _DAYS, "initialPlacement": {"h0": ids},
                   "rules": _replicas(2), "dynamicConfig": _config(0, 0, 10), "loadCompletion": "manual", "runs": 2,
                   "events": [{"beforeRun": 2, "type": "add_server", "name": "h2", "maxSizeBytes": 10**9,
                               "segments": ids}]})
    assert _assigned(reports[0]) == 10 and len(reports[0].servers["h1"][2]) == 10
    cancels = [c for c in reports[1].plan.commands if c.type == "cancel"]
    assert len(cancels) == 10 and {c.server for c in cancels} == {"h1"}
    assert reports[1].servers["h1"][2] == ()


def test_a_full_load_queue_takes_more_once_the_historical_loads_some_itself() -> None:
    """SegmentLoadingTest.testMaxSegmentsInNodeLoadingQueue: a queue of 5 fills in run 1 and stays full in run 2;
    then the historical loads two of the queued segments outside the coordinator. Druid cancels those two loads in
    run 3 and assigns two more in run 4; here the announcements answer the two loads (the fold settles a queued load
    its server announces), so the two new assignments come in run 3. Same placement, one run earlier."""
    ids = _day_ids()
    reports = run({"now": NOW, "servers": servers(1), "segments": _DAYS, "rules": _replicas(1),
                   "dynamicConfig": _config(0, 5, 10), "loadCompletion": "manual", "runs": 4,
                   "events": [{"beforeRun": 3, "type": "server_adds_segments", "server": "h0",
                               "segments": [ids[9], ids[8]]}]})
    assert [_assigned(r) for r in reports] == [5, 0, 2, 0]
    assert len(reports[-1].servers["h0"][1]) == 2 and len(reports[-1].servers["h0"][2]) == 5
