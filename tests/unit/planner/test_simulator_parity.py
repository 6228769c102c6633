"""Issue 14: the simulator and the planner agent's fold change rules and config the way Druid's APIs do, servers
join with data, scenarios are strict, and ``--json`` shows what a checker needs."""

from __future__ import annotations

from typing import Any

import pytest

from coordinator.placement.state import PlacementState
from coordinator.planner.simulator import Scenario, ScenarioError, Simulator
from events.cluster import DynamicConfigSet, RulesSet
from events.envelope import Envelope
from events.interval import Interval
from events.registry import Event
from events.schema import Instant
from tests.unit.planner.test_simulations import NOW, hourly, loaded_counts, run, servers

HOT_1 = [{"type": "loadForever", "tieredReplicants": {"hot": 1}}]


def _ids(source: str, count: int) -> list[str]:
    return [f"{source}_2026-05-01T{h:02d}:00:00.000Z_2026-05-01T{h + 1:02d}:00:00.000Z_v1" for h in range(count)]


# -- rules and config, as Druid's APIs change them ------------------------------------------------------------


def test_set_rules_of_one_data_source_leaves_the_others_alone() -> None:
    reports = run({"now": NOW, "servers": servers(2, "hot", "hot"),
                   "segments": [hourly("wiki", 3), hourly("koala", 3)],
                   "rules": {"wiki": HOT_1, "koala": HOT_1}, "runs": 3,
                   "events": [{"beforeRun": 2, "type": "set_rules", "rules": {"koala": [{"type": "dropForever"}]}},
                              {"beforeRun": 2, "type": "publish", "segments": [hourly("wiki", 4)]}]})
    last = loaded_counts(reports[-1])
    assert {s for s in last if s.startswith("wiki_")} == set(_ids("wiki", 4))  # wiki keeps its rule: hour 4 loads
    assert not any(s.startswith("koala_") for s in last)


def test_a_fresh_cluster_has_druids_default_rule() -> None:
    """No rules given: loadForever, 2 replicas on _default_tier (Druid's ``_default``), until someone sets another."""
    reports = run({"now": NOW, "servers": servers(3), "segments": [hourly("wiki", 4)], "runs": 3,
                   "events": [{"beforeRun": 3, "type": "set_rules", "rules": {"_default": [
                       {"type": "loadForever", "tieredReplicants": {"_default_tier": 1}}]}}]})
    assert set(loaded_counts(reports[1]).values()) == {2} and len(loaded_counts(reports[1])) == 4
    assert set(loaded_counts(reports[2]).values()) == {1}


def test_a_dynamic_config_update_merges_into_the_current_config() -> None:
    """Keys not given keep their values: the queue limit of 2 set at the start still holds after maxSegmentsToMove
    is changed (a replacement would turn smart loading back on, whose queue is unlimited)."""
    reports = run({"now": NOW, "servers": servers(2), "segments": [hourly("wiki", 12)],
                   "rules": {"_default": [{"type": "loadForever", "tieredReplicants": {"_default_tier": 1}}]},
                   "dynamicConfig": {"smartSegmentLoading": False, "maxSegmentsInNodeLoadingQueue": 2,
                                     "replicationThrottleLimit": 1000},
                   "loadCompletion": "manual", "runs": 2,
                   "events": [{"beforeRun": 2, "type": "set_dynamic_config",
                               "dynamicConfig": {"maxSegmentsToMove": 5}}]})
    assert sum(1 for c in reports[0].plan.commands if c.type == "load") == 4
    assert not any(c.type == "load" for c in reports[1].plan.commands)  # the queues are still full
    assert all(len(queue) == 2 for _s, _l, queue in reports[1].servers.values())


def _env(event: Event, n: int) -> Envelope[Event]:
    return Envelope(event, f"e{n}", Instant(1_767_225_600_000 + n), "k", None)


def test_the_agents_fold_sets_rules_per_data_source_merges_config_and_starts_with_druids_default() -> None:
    """The planner agent folds ``rules_set`` and ``dynamic_config_set`` with PlacementState.evolve (this held before
    issue 14; the test pins it)."""
    state = PlacementState()
    day = Interval.parse("2026-01-01/P1D")
    fresh = state.rules.rule_for("anything", day, 0)
    assert fresh is not None and fresh.kind == "load" and fresh.tiered_replicants == {"_default_tier": 2}
    state.evolve(_env(RulesSet(data_source="wiki", rules=tuple(HOT_1)), 1))
    state.evolve(_env(RulesSet(data_source="koala", rules=({"type": "dropForever"},)), 2))
    state.evolve(_env(RulesSet(data_source="koala", rules=({"type": "loadForever"},)), 3))
    wiki = state.rules.rule_for("wiki", day, 0)
    assert wiki is not None and wiki.tiered_replicants == {"hot": 1}  # untouched by koala's update
    other = state.rules.rule_for("other", day, 0)
    assert other is not None and other.tiered_replicants == {"_default_tier": 2}  # still Druid's _default
    state.evolve(_env(DynamicConfigSet(config={"smartSegmentLoading": False, "maxSegmentsInNodeLoadingQueue": 2}), 4))
    touched = state.evolve(_env(DynamicConfigSet(config={"maxSegmentsToMove": 5}), 5))
    assert touched.config
    assert (state.config.smart_segment_loading, state.config.max_segments_in_node_loading_queue,
            state.config.max_segments_to_move) == (False, 2, 5)


# -- servers that join with data ---------------------------------------------------------------------------------


def test_a_server_can_join_already_holding_segments() -> None:
    reports = run({"now": NOW, "servers": servers(1), "segments": [hourly("wiki", 4)],
                   "rules": {"_default": [{"type": "loadForever", "tieredReplicants": {"_default_tier": 1}}]},
                   "loadCompletion": "manual", "runs": 2,
                   "events": [{"beforeRun": 1, "type": "add_server", "name": "full", "maxSizeBytes": 10**9,
                               "segments": _ids("wiki", 4)}]})
    assert reports[0].servers["full"][1] == tuple(sorted(reports[0].servers["full"][1]))
    assert [str(s) for s in reports[0].servers["full"][1]] == sorted(_ids("wiki", 4))
    assert not any(c.type == "load" for c in reports[0].plan.commands)  # they are served already


def test_loads_made_outside_the_coordinator_are_announced_and_trimmed() -> None:
    doc = {"now": NOW, "servers": servers(2), "segments": [hourly("wiki", 4)],
           "rules": {"_default": [{"type": "loadForever", "tieredReplicants": {"_default_tier": 1}}]},
           "runs": 3, "events": [{"beforeRun": 2, "type": "server_adds_segments", "server": "h0",
                                  "segments": _ids("wiki", 4)}]}
    reports = run(doc)
    assert set(loaded_counts(reports[0]).values()) == {1}
    drops = [c for c in reports[1].plan.commands if c.type == "drop"]
    assert drops  # h0 now holds copies the rule does not ask for
    assert set(loaded_counts(reports[-1]).values()) == {1} and len(loaded_counts(reports[-1])) == 4


@pytest.mark.parametrize(("event", "message"), [
    ({"type": "add_server", "name": "x", "maxSizeBytes": 1, "segments": ["nope"]},
     r"events\[0\]\.segments\[0\]: unknown segment 'nope'"),
    ({"type": "server_adds_segments", "server": "h0", "segments": ["nope"]},
     r"events\[0\]\.segments\[0\]: unknown segment 'nope'"),
    ({"type": "server_adds_segments", "server": "h0", "segments": [3]}, r"events\[0\]\.segments\[0\]: expected"),
])
def test_servers_joining_with_unknown_segments_are_rejected(event: dict[str, Any], message: str) -> None:
    with pytest.raises(ScenarioError, match=message):
        Scenario.parse({"now": NOW, "servers": servers(1), "segments": [hourly("wiki", 1)],
                        "events": [{"beforeRun": 1, **event}]})


def test_a_segment_published_by_a_later_event_may_be_added_after_it() -> None:
    late = {"dataSource": "late", "start": "2026-05-01", "count": 1, "granularity": "PT1H", "sizeBytes": 1}
    doc = {"now": NOW, "servers": servers(1), "runs": 2,
           "events": [{"beforeRun": 2, "type": "publish", "segments": [late]},
                      {"beforeRun": 1, "type": "server_adds_segments", "server": "h0", "segments": _ids("late", 1)}]}
    with pytest.raises(ScenarioError, match=r"events\[1\]\.segments\[0\]: unknown segment .* \(not published yet\)"):
        Simulator(Scenario.parse(doc)).run()
    doc["events"][1]["beforeRun"] = 2
    reports = Simulator(Scenario.parse(doc)).run()
    assert [str(s) for s in reports[-1].servers["h0"][1]] == _ids("late", 1)


# -- strict input ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize(("doc", "message"), [
    ({"servers": [{"name": "a", "maxSizeBytes": 1, "size": 3}]}, r"servers\[0\]\.size: unknown field"),
    ({"segments": [{**hourly("w", 1), "partitons": 2}]}, r"segments\[0\]\.partitons: unknown field"),
    ({"segments": [{"dataSource": "w", "interval": "2026-01-01/P1D", "verison": "v2"}]},
     r"segments\[0\]\.verison: unknown field"),
    ({"events": [{"beforeRun": 1, "type": "set_now", "now": NOW, "when": 1}]}, r"events\[0\]\.when: unknown field"),
    ({"events": [{"beforeRun": 1, "type": "add_server", "server": {"name": "b", "maxSizeBytes": 1, "cores": 4}}]},
     r"events\[0\]\.server\.cores: unknown field"),
    ({"events": [{"beforeRun": 1, "type": "add_server", "server": {"name": "b", "maxSizeBytes": 1}, "tier": "x"}]},
     r"events\[0\]\.tier: unknown field"),
    ({"events": [{"beforeRun": 1, "type": "publish", "segments": [{**hourly("w", 1), "color": "red"}]}]},
     r"events\[0\]\.segments\[0\]\.color: unknown field"),
    ({"events": [{"beforeRun": 1, "type": "complete_queues", "all": True}]}, r"events\[0\]\.all: unknown field"),
])
def test_unknown_keys_anywhere_name_their_path(doc: dict[str, Any], message: str) -> None:
    with pytest.raises(ScenarioError, match=message):
        Scenario.parse({"now": NOW, "servers": [], **doc})


def test_a_generator_honours_used_false() -> None:
    reports = run({"now": NOW, "servers": servers(2), "segments": [{**hourly("wiki", 3), "used": False},
                                                                   hourly("koala", 2)], "runs": 2})
    assert sorted(str(s) for s, used in reports[-1].used.items() if not used) == _ids("wiki", 3)
    assert not any(s.startswith("wiki_") for s in loaded_counts(reports[-1]))


# -- what --json shows ------------------------------------------------------------------------------------------


def test_json_queue_entries_carry_purpose_replica_and_from_in_a_snapshot_before_loads_complete() -> None:
    ids = _ids("wiki", 4)
    reports = Simulator(Scenario.parse({
        "now": NOW, "servers": servers(3), "segments": [hourly("wiki", 4), hourly("fresh", 1)],
        "initialPlacement": {"h0": ids, "h2": ids[:1]},
        "rules": {"wiki": [{"type": "loadForever", "tieredReplicants": {"_default_tier": 2}}],
                  "_default": [{"type": "loadForever", "tieredReplicants": {"_default_tier": 1}}]},
        "dynamicConfig": {"smartSegmentLoading": False, "maxSegmentsToMove": 2},
        "events": [{"beforeRun": 1, "type": "decommission", "name": "h2"}], "runs": 1})).run()
    doc = reports[0].to_json()
    planned = [dict(q, server=n) for n, s in doc["planned"].items() for q in s["queue"]]
    assert all({"type", "segment", "purpose", "replica"} <= set(q) for q in planned)
    replica = [q for q in planned if q["replica"]]
    assert replica and all(q["purpose"] == "replica" and q["type"] == "load" for q in replica)
    first = [q for q in planned if q["segment"].startswith("fresh_")]
    assert first and first[0]["purpose"] == "loading" and not first[0]["replica"]
    moves = [q for q in planned if q["type"] == "move"]
    assert moves and all(q["from"] == "h2" and q["purpose"] == "decommissioning" for q in moves)
    assert not any("from" in q for q in planned if q["type"] != "move")
    # the planned snapshot is taken before loads complete; the servers' at the end of the period
    assert sum(len(s["queue"]) for s in doc["planned"].values()) == len(planned) > 0
    assert all(not s["queue"] for s in doc["servers"].values())
    assert len(doc["servers"]["h1"]["loaded"]) > len(doc["planned"]["h1"]["loaded"])


def test_planning_on_the_simulators_fold_decides_as_the_reference_on_a_snapshot(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """Every full run on the simulator's fold decides what ``plan`` decides on a fresh snapshot of the same cluster
    (the fold keeps no second placement: its view is the snapshot)."""
    import coordinator.planner.simulator as simulator
    from coordinator.planner.planner import plan

    doc = {"now": NOW, "servers": servers(4), "segments": [hourly(f"ds{d}", 20) for d in range(2)],
           "rules": {"_default": [{"type": "loadForever", "tieredReplicants": {"_default_tier": 2}}]},
           "failureRate": 0.2, "seed": 5, "runs": 6, "loadTimeMillis": 90_000,  # queues carry over runs
           "dynamicConfig": {"smartSegmentLoading": False, "maxSegmentsInNodeLoadingQueue": 8,
                             "replicationThrottleLimit": 6, "maxSegmentsToMove": 4},
           "events": [{"beforeRun": 2, "type": "add_server", "name": "h9", "maxSizeBytes": 10**11},
                      {"beforeRun": 4, "type": "decommission", "name": "h1"},
                      {"beforeRun": 5, "type": "server_adds_segments", "server": "h2",
                       "segments": _ids("ds0", 5)}]}
    sim = Simulator(Scenario.parse(doc))
    compared = []
    real = simulator.plan_state

    def checked(state: PlacementState, now: int, run: int, *args: Any, **kwargs: Any) -> Any:
        reference = plan(sim.view(run), compute_cost=False)
        result = real(state, now, run, *args, **kwargs)

        def key(p: Any) -> list[tuple[object, ...]]:
            return [(c.type, c.server, str(c.segment), c.source, c.stage, c.reason) for c in p.commands]

        assert key(result) == key(reference), f"run {run}"
        assert result.mark_unused == reference.mark_unused
        compared.append(len(result.commands))
        return result

    monkeypatch.setattr(simulator, "plan_state", checked)
    reports = sim.run(planner="full", compute_cost=False)
    assert len(compared) == 6 and sum(compared) > 50
    assert any(r.planned[n][2] and r.servers[n][2] for r in reports for n in r.servers)  # queues carried over
