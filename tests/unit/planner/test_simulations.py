"""The planner in simulated clusters: assertions on metrics and placement after each run, no mocks."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from coordinator.planner.simulator import RunReport, Scenario, ScenarioError, Simulator

NOW = "2026-06-01T00:00:00Z"
GB = 1 << 30


def servers(n: int, tier: str = "_default_tier", prefix: str = "h", size: int = 100 * GB) -> list[dict[str, Any]]:
    return [{"name": f"{prefix}{i}", "tier": tier, "maxSizeBytes": size} for i in range(n)]


def hourly(source: str, count: int, start: str = "2026-05-01", size: int = 1000) -> dict[str, Any]:
    return {"dataSource": source, "start": start, "count": count, "granularity": "PT1H", "sizeBytes": size}


def run(doc: dict[str, Any]) -> list[RunReport]:
    """The full planner's reports; every scenario also runs with the incremental planner, which must end it in the
    same state (placement and used flags)."""
    full = Simulator(Scenario.parse(doc)).run(planner="full")
    incremental = Simulator(Scenario.parse(doc)).run(planner="incremental")
    assert _end_state(incremental) == _end_state(full), "the incremental planner ends the scenario differently"
    return full


def loaded_counts(report: RunReport) -> Counter[str]:
    counts: Counter[str] = Counter()
    for _name, (_srv, loaded, _queue) in report.servers.items():
        for sid in loaded:
            counts[str(sid)] += 1
    return counts


def test_a_dead_server_first_copies_before_second_copies() -> None:
    base = run({"now": NOW, "servers": servers(4), "segments": [hourly("wiki", 60)],
                "rules": {"_default": [{"type": "loadForever", "tieredReplicants": {"_default_tier": 2}}]},
                "runs": 2})
    assert all(n == 2 for n in loaded_counts(base[-1]).values()) and len(loaded_counts(base[-1])) == 60
    placement = {name: [str(s) for s in loaded] for name, (_s, loaded, _q) in base[-1].servers.items()}
    reports = run({"now": NOW, "servers": servers(4), "segments": [hourly("wiki", 60)], "initialPlacement": placement,
                   "rules": {"_default": [{"type": "loadForever"}]},
                   "events": [{"beforeRun": 1, "type": "remove_server", "name": "h0"}],
                   "dynamicConfig": {"smartSegmentLoading": False, "replicationThrottleLimit": 1000,
                                     "maxSegmentsInNodeLoadingQueue": 1000}, "runs": 2})
    first = reports[0].plan
    lost = {c.segment for c in first.commands if c.type == "load"}
    orphans = {s for s, n in loaded_counts(base[-1]).items() if n == 2} - set()
    del orphans
    loads = [c for c in first.commands if c.type == "load"]
    assert loads, "the dead server's segments are reloaded"
    # every segment that lost a copy gets exactly one new copy; none of them is assigned twice
    assert len(lost) == len(loads)
    assert all(n == 2 for n in loaded_counts(reports[0]).values())


def test_every_unavailable_segment_gets_a_copy_before_any_gets_its_second() -> None:
    reports = run({"now": NOW, "servers": servers(3), "segments": [hourly("wiki", 40)],
                   "rules": {"_default": [{"type": "loadForever", "tieredReplicants": {"_default_tier": 2}}]},
                   "dynamicConfig": {"smartSegmentLoading": False, "maxSegmentsInNodeLoadingQueue": 20,
                                     "replicationThrottleLimit": 1000}, "runs": 3})
    first = reports[0]
    loads = [c for c in first.plan.commands if c.type == "load"]
    firsts = [c for c in loads if c.stage == 1]
    assert len({c.segment for c in firsts}) == len(firsts) == 40  # stage 1: one copy each
    assert not any(c.replica for c in loads)  # no tier served them at the start of the run: not replica loads
    seen: set[str] = set()
    for c in loads:  # a second copy of any segment only after every segment has its first
        if str(c.segment) in seen:
            assert len(seen) == 40
        seen.add(str(c.segment))
    assert all(len(q) <= 20 for _s, _l, q in ((x[0], x[1], x[2]) for x in first.servers.values()))
    assert all(n == 2 for n in loaded_counts(reports[-1]).values())


def test_decommissioning_drains_without_losing_replicas() -> None:
    doc = {"now": NOW, "servers": servers(4), "segments": [hourly("wiki", 30)],
           "rules": {"_default": [{"type": "loadForever", "tieredReplicants": {"_default_tier": 2}}]}, "runs": 2}
    settled = run(doc)[-1]
    placement = {name: [str(s) for s in loaded] for name, (_s, loaded, _q) in settled.servers.items()}
    reports = run({**doc, "initialPlacement": placement, "runs": 4,
                   "events": [{"beforeRun": 1, "type": "decommission", "name": "h1"}]})
    for r in reports:
        assert all(n >= 2 for n in loaded_counts(r).values())  # never below target while draining
        assert not any(c.type == "load" and c.server == "h1" for c in r.plan.commands)
    assert reports[-1].servers["h1"][1] == ()


def test_a_new_empty_server_fills_until_balanced() -> None:
    doc = {"now": NOW, "servers": servers(4), "segments": [hourly(f"ds{d}", 48) for d in range(3)],
           "rules": {"_default": [{"type": "loadForever", "tieredReplicants": {"_default_tier": 1}}]}, "runs": 1}
    settled = run(doc)[-1]
    placement = {name: [str(s) for s in loaded] for name, (_s, loaded, _q) in settled.servers.items()}
    reports = run({**doc, "initialPlacement": placement, "runs": 12,
                   "events": [{"beforeRun": 1, "type": "add_server",
                               "server": {"name": "h9", "tier": "_default_tier", "maxSizeBytes": 100 * GB}}]})
    counts = {n: len(loaded) for n, (_s, loaded, _q) in reports[-1].servers.items()}
    mean = sum(counts.values()) / len(counts)
    assert all(abs(c - mean) <= 0.1 * mean for c in counts.values()), counts
    assert all(n == 1 for n in loaded_counts(reports[-1]).values())


def test_ten_and_zero_become_five_and_five_in_one_run() -> None:
    """The projection is updated after every decision: one run never overshoots."""
    seg_ids = [f"wiki_2026-05-01T{h:02d}:00:00.000Z_2026-05-01T{h + 1:02d}:00:00.000Z_v1" for h in range(10)]
    reports = run({"now": NOW, "servers": servers(2), "segments": [hourly("wiki", 10)],
                   "initialPlacement": {"h0": seg_ids},
                   "rules": {"_default": [{"type": "loadForever", "tieredReplicants": {"_default_tier": 1}}]},
                   "dynamicConfig": {"smartSegmentLoading": False, "maxSegmentsToMove": 100,
                                     "maxSegmentsInNodeLoadingQueue": 100}, "runs": 1})
    counts = sorted(len(loaded) for _s, loaded, _q in reports[0].servers.values())
    assert counts == [5, 5]


def test_hot_and_cold_tiers_by_period_rules_as_segments_age() -> None:
    rules = {"_default": [{"type": "loadByPeriod", "period": "P7D", "tieredReplicants": {"hot": 1}},
                          {"type": "loadForever", "tieredReplicants": {"cold": 1}}]}
    doc = {"now": "2026-05-05T00:00:00Z", "servers": servers(2, "hot", "hot") + servers(2, "cold", "cold"),
           "segments": [{"dataSource": "wiki", "start": "2026-05-01", "count": 4, "granularity": "P1D",
                         "sizeBytes": 10}],
           "rules": rules, "runs": 3,
           "events": [{"beforeRun": 2, "type": "set_now", "now": "2026-05-20T00:00:00Z"}]}
    reports = run(doc)
    tiers = {r.run: {n: s.tier for n, (s, loaded, _q) in r.servers.items() for _ in loaded} for r in reports}
    first = reports[0]
    assert {first.servers[n][0].tier for n in first.servers if first.servers[n][1]} == {"hot"}
    last = reports[-1]
    assert {last.servers[n][0].tier for n in last.servers if last.servers[n][1]} == {"cold"}
    assert all(n == 1 for n in loaded_counts(last).values()) and len(loaded_counts(last)) == 4
    del tiers


def test_a_tier_shift_never_drops_before_the_new_copies_load() -> None:
    rules = {"_default": [{"type": "loadForever", "tieredReplicants": {"cold": 1}}]}
    ids = [f"wiki_2026-05-01T{h:02d}:00:00.000Z_2026-05-01T{h + 1:02d}:00:00.000Z_v1" for h in range(5)]
    reports = run({"now": NOW, "servers": servers(1, "hot", "hot") + servers(1, "cold", "cold"),
                   "segments": [hourly("wiki", 5)], "initialPlacement": {"hot0": ids}, "rules": rules,
                   "loadCompletion": "manual", "runs": 2,
                   "events": [{"beforeRun": 2, "type": "complete_queues"}]})
    first = reports[0].plan
    assert not any(c.type == "drop" for c in first.commands)  # the cold copies are only queued
    assert sum(1 for c in first.commands if c.type == "load" and c.tier == "cold") == 5
    second = reports[1].plan
    assert sum(1 for c in second.commands if c.type == "drop" and c.server == "hot0") == 5


def test_broadcast_reaches_every_server() -> None:
    reports = run({"now": NOW, "servers": servers(3, "hot", "a") + servers(2, "cold", "b"),
                   "segments": [hourly("lookup", 2), hourly("wiki", 3)],
                   "rules": {"lookup": [{"type": "broadcastForever"}],
                             "_default": [{"type": "loadForever", "tieredReplicants": {"hot": 1}}]}, "runs": 1})
    for name, (_s, loaded, _q) in reports[0].servers.items():
        assert sum(1 for s in loaded if s.data_source == "lookup") == 2, name


def test_queue_and_move_limits_hold_in_every_run() -> None:
    reports = run({"now": NOW, "servers": servers(5), "segments": [hourly(f"ds{d}", 60) for d in range(2)],
                   "rules": {"_default": [{"type": "loadForever", "tieredReplicants": {"_default_tier": 2}}]},
                   "dynamicConfig": {"smartSegmentLoading": False, "maxSegmentsInNodeLoadingQueue": 15,
                                     "maxSegmentsToMove": 3, "replicationThrottleLimit": 10},
                   "loadCompletion": "between_runs", "runs": 25,
                   "events": [{"beforeRun": 12, "type": "add_server",
                               "server": {"name": "new", "tier": "_default_tier", "maxSizeBytes": 100 * GB}}]})
    for r in reports:
        per_server = Counter(c.server for c in r.plan.commands if c.type in ("load", "move"))
        assert max(per_server.values(), default=0) <= 15
        assert sum(1 for c in r.plan.commands if c.type == "move" and c.stage in (7, 10, 11)) <= 3
        assert sum(1 for c in r.plan.commands if c.type == "load" and c.replica) <= 10
    assert all(n == 2 for n in loaded_counts(reports[-1]).values())
    assert len(reports[-1].servers["new"][1]) > 0


def test_drop_rules_and_overshadowed_segments_are_unloaded() -> None:
    reports = run({"now": NOW, "servers": servers(2),
                   "segments": [hourly("wiki", 4), {"dataSource": "old", "start": "2020-01-01", "count": 2,
                                                     "granularity": "P1D", "sizeBytes": 5}],
                   "rules": {"old": [{"type": "dropForever"}],
                             "_default": [{"type": "loadForever", "tieredReplicants": {"_default_tier": 1}}]},
                   "dynamicConfig": {"millisToWaitBeforeDeleting": 0}, "runs": 4,
                   "events": [{"beforeRun": 2, "type": "publish", "segments": [
                       {"dataSource": "wiki", "start": "2026-05-01", "count": 1, "granularity": "PT4H",
                        "version": "v2", "sizeBytes": 4000}]}]})
    assert not any(s.data_source == "old" for r in reports for _n, (_s, loaded, _q) in r.servers.items()
                   for s in loaded)
    assert {s.data_source for s, _reason in reports[0].plan.mark_unused} == {"old"}  # drop rules mark unused
    last = reports[-1]
    v1 = [s for s, used in last.used.items() if s.data_source == "wiki" and s.version == "v1"]
    assert v1 and not any(last.used[s] for s in v1)  # overshadowed by the served v2, then unused
    held = {s for _n, (_s, loaded, _q) in last.servers.items() for s in loaded}
    assert not any(s in held for s in v1)
    # not before v2 is served: in run 2 v2 was only queued, so v1 stayed used
    assert not any(sid.version == "v1" for sid, _ in reports[1].plan.mark_unused)


def test_a_paused_coordinator_issues_nothing() -> None:
    reports = run({"now": NOW, "servers": servers(2), "segments": [hourly("wiki", 5)],
                   "dynamicConfig": {"pauseCoordination": True}, "runs": 2})
    assert all(not r.plan.commands and not r.plan.mark_unused for r in reports)


def test_a_failed_move_leaves_the_source_copy() -> None:
    ids = [f"wiki_2026-05-01T{h:02d}:00:00.000Z_2026-05-01T{h + 1:02d}:00:00.000Z_v1" for h in range(10)]
    reports = run({"now": NOW, "servers": servers(2), "segments": [hourly("wiki", 10)],
                   "initialPlacement": {"h0": ids}, "failureRate": 1.0,
                   "rules": {"_default": [{"type": "loadForever", "tieredReplicants": {"_default_tier": 1}}]},
                   "runs": 2})
    assert any(c.type == "move" for c in reports[0].plan.commands)
    assert len(reports[0].servers["h0"][1]) == 10 and len(reports[0].servers["h1"][1]) == 0


def test_same_scenario_same_output() -> None:
    doc = {"now": NOW, "servers": servers(6), "segments": [hourly(f"ds{d}", 30) for d in range(3)],
           "rules": {"_default": [{"type": "loadForever", "tieredReplicants": {"_default_tier": 2}}]},
           "failureRate": 0.2, "seed": 3, "runs": 4}
    a = [r.to_json() for r in run(doc)]
    b = [r.to_json() for r in run(doc)]
    assert a == b


@pytest.mark.parametrize(("doc", "message"), [
    ({"servers": []}, "scenario.now: required"),
    ({"now": NOW, "servers": [{"name": "a"}]}, r"servers\[0\].maxSizeBytes: required"),
    ({"now": NOW, "servers": [], "segments": [{"dataSource": "x", "start": "2026-01-01", "count": 2,
                                              "granularity": "P1Q"}]}, r"segments\[0\].granularity"),
    ({"now": NOW, "servers": [], "events": [{"beforeRun": 1, "type": "explode"}]}, r"events\[0\].type: unknown"),
    ({"now": NOW, "servers": [], "rules": {"_default": [{"type": "loadSometimes"}]}}, "rules"),
    ({"now": NOW, "servers": [], "dynamicConfig": {"maxSegmentsToMove": -1}}, "maxSegmentsToMove"),
    ({"now": NOW, "servers": [], "initialPlacement": {"ghost": []}}, "initialPlacement.ghost: no such server"),
    ({"now": NOW, "servers": [], "bogus": 1}, "scenario.bogus: unknown field"),
])
def test_bad_scenarios_name_the_field(doc: dict[str, Any], message: str) -> None:
    with pytest.raises(ScenarioError, match=message):
        Scenario.parse(doc)


def test_queued_loads_count_as_copies_across_runs() -> None:
    """With loads still queued (manual completion), the next run assigns nothing twice."""
    reports = run({"now": NOW, "servers": servers(3), "segments": [hourly("wiki", 12)],
                   "rules": {"_default": [{"type": "loadForever", "tieredReplicants": {"_default_tier": 2}}]},
                   "loadCompletion": "manual", "runs": 3})
    assert sum(1 for c in reports[0].plan.commands if c.type == "load") == 24
    assert not any(c.type == "load" for r in reports[1:] for c in r.plan.commands)
    queued = Counter(str(q.segment) for r in reports[-1:] for _s, _l, queue in r.servers.values() for q in queue)
    assert set(queued.values()) == {2} and len(queued) == 12


def test_decommissioning_cancels_queued_loads_and_gets_nothing_new() -> None:
    reports = run({"now": NOW, "servers": servers(3), "segments": [hourly("wiki", 12)],
                   "rules": {"_default": [{"type": "loadForever", "tieredReplicants": {"_default_tier": 1}}]},
                   "loadCompletion": "manual", "runs": 2,
                   "events": [{"beforeRun": 2, "type": "decommission", "name": "h0"}]})
    queued_on_h0 = [c.segment for c in reports[0].plan.commands if c.type == "load" and c.server == "h0"]
    assert queued_on_h0
    second = reports[1].plan.commands
    assert sorted(c.segment for c in second if c.type == "cancel" and c.server == "h0") == sorted(queued_on_h0)
    reassigned = {c.segment for c in second if c.type == "load"}
    assert reassigned == set(queued_on_h0) and not any(c.server == "h0" for c in second if c.type == "load")


def test_cost_based_assignment_spreads_one_interval_across_servers() -> None:
    """With useRoundRobinSegmentAssignment off, the cost function picks servers: the partitions of one hour
    (same data source, same interval) land on different servers."""
    reports = run({"now": NOW, "servers": servers(4),
                   "segments": [{"dataSource": "wiki", "start": "2026-05-01", "count": 6, "granularity": "PT1H",
                                 "partitions": 4, "sizeBytes": 10}],
                   "rules": {"_default": [{"type": "loadForever", "tieredReplicants": {"_default_tier": 1}}]},
                   "dynamicConfig": {"useRoundRobinSegmentAssignment": False, "smartSegmentLoading": False},
                   "runs": 1})
    by_hour: dict[int, set[str]] = {}
    for c in reports[0].plan.commands:
        if c.type == "load":
            by_hour.setdefault(c.segment.interval.start, set()).add(c.server)
    assert len(by_hour) == 6 and all(len(names) == 4 for names in by_hour.values())


def test_metrics_and_unknown_tiers() -> None:
    reports = run({"now": NOW, "servers": servers(2),
                   "segments": [hourly("wiki", 4)],
                   "rules": {"_default": [{"type": "loadForever", "tieredReplicants": {"_default_tier": 2,
                                                                                     "ghost": 1}}]},
                   "runs": 2})
    first = reports[0].plan
    assert first.unknown_tiers == ("ghost",)
    assert first.metrics["segment/unavailable/count"] == 4
    assert first.metrics["segment/assigned/count"] == {"_default_tier": 8}
    assert "balancer/cost/after" in first.metrics and first.metrics["decisions"] == 8
    second = reports[1].plan
    assert "segment/unavailable/count" not in second.metrics and not second.commands


def test_slow_servers_finish_loading_after_their_load_time() -> None:
    """A 150 s load time with a 60 s coordinator period: loads queued in run 1 finish after run 3."""
    reports = run({"now": NOW, "servers": [{"name": "slow", "maxSizeBytes": 10**12, "loadTimeMillis": 150_000}],
                   "segments": [hourly("wiki", 3)],
                   "rules": {"_default": [{"type": "loadForever", "tieredReplicants": {"_default_tier": 1}}]},
                   "runs": 3})
    assert [len(r.servers["slow"][1]) for r in reports] == [0, 0, 3]
    assert [len(r.servers["slow"][2]) for r in reports] == [3, 3, 0]
    assert sum(1 for r in reports for c in r.plan.commands if c.type == "load") == 3  # queued loads count


def test_event_and_segment_spellings() -> None:
    """Inline or nested servers, name or server, interval or start/end, segmentIds."""
    reports = run({"now": NOW, "servers": servers(1),
                   "segments": [{"dataSource": "wiki", "interval": "2026-05-01/2026-05-02", "version": "v1",
                                 "sizeBytes": 5},
                                {"dataSource": "wiki", "start": "2026-05-02", "end": "2026-05-03", "size": 5}],
                   "rules": {"_default": [{"type": "loadForever", "tieredReplicants": {"_default_tier": 1}}]},
                   "runs": 3,
                   "events": [{"beforeRun": 2, "type": "add_server", "name": "h9", "maxSizeBytes": 10**9},
                              {"beforeRun": 2, "type": "decommission", "server": "h0"},
                              {"beforeRun": 3, "type": "mark_unused",
                               "segmentIds": ["wiki_2026-05-01T00:00:00.000Z_2026-05-02T00:00:00.000Z_v1"]}]})
    assert "h9" in reports[1].servers and reports[1].servers["h0"][0].decommissioning
    assert list(reports[2].used.values()).count(False) == 1


def test_cost_caches_kept_across_runs_plan_exactly_as_fresh_ones() -> None:
    """The fold keeps each server's cost cache current across runs; plans equal those with caches rebuilt each run."""
    doc = {"now": NOW, "servers": servers(5), "segments": [hourly(f"ds{d}", 40) for d in range(3)],
           "rules": {"_default": [{"type": "loadForever", "tieredReplicants": {"_default_tier": 2}}]},
           "failureRate": 0.15, "seed": 11, "runs": 8,
           "events": [{"beforeRun": 3, "type": "add_server",
                       "server": {"name": "h9", "tier": "_default_tier", "maxSizeBytes": 100 * GB}},
                      {"beforeRun": 5, "type": "decommission", "server": "h1"}]}
    fresh = Simulator(Scenario.parse(doc)).run(fresh_caches=True)
    kept = Simulator(Scenario.parse(doc)).run()
    assert [r.plan.commands for r in kept] == [r.plan.commands for r in fresh]
    assert sum(len(r.plan.commands) for r in fresh) > 100
    assert any(c.type == "move" for r in fresh for c in r.plan.commands)
    for a, b in zip(fresh, kept, strict=True):
        cost_a, cost_b = a.plan.metrics.get("balancer/cost/after"), b.plan.metrics.get("balancer/cost/after")
        assert (cost_a is None) == (cost_b is None)
        if isinstance(cost_a, float) and isinstance(cost_b, float):
            assert abs(cost_a - cost_b) <= 1e-9 * max(1.0, abs(cost_a))


def _end_state(reports: list) -> tuple:  # type: ignore[type-arg]
    last = reports[-1]
    return ({n: (srv, loaded) for n, (srv, loaded, _q) in sorted(last.servers.items())},
            sorted(last.used.items()))


def test_both_planners_end_every_example_scenario_in_the_same_state() -> None:
    """The incremental planner (scoped runs) and the full reference end the shipped scenario alike, and also
    a long run of it with queues completed: every segment at its replica count, the same placement."""
    root = Path(__file__).resolve().parents[3]
    doc = json.loads((root / "examples" / "cluster-scenario.json").read_text())
    full = Simulator(Scenario.parse(doc)).run(planner="full")
    incremental = Simulator(Scenario.parse(doc)).run(planner="incremental")
    assert _end_state(incremental) == _end_state(full)
    longer = {**doc, "runs": doc.get("runs", 10) + 20}
    assert _end_state(Simulator(Scenario.parse(longer)).run(planner="incremental")) == _end_state(
        Simulator(Scenario.parse(longer)).run(planner="full"))
    # the first and periodic full runs in slices of one segment, a few, all at once: the same end (in scenarios with
    # queue limits or load failures a sweep may place copies on other servers than one full run, as the order of
    # its loads differs; tests/unit/placement/test_incremental_properties.py checks that it still reaches quiescence)
    for chunk in (1, 3, 1000):
        assert _end_state(Simulator(Scenario.parse(doc)).run(planner="sweep", sweep_chunk=chunk)) == _end_state(full)
        assert _end_state(Simulator(Scenario.parse(longer)).run(planner="sweep", sweep_chunk=chunk)) == _end_state(
            Simulator(Scenario.parse(longer)).run(planner="full"))
