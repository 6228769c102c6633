"""The incremental planner over random clusters: at quiescence a full plan has nothing left to do, every
segment is at its replica count, and queue limits, the replication throttle and the drop guard (a drop never
takes a used segment below its replica count) hold at every step."""

from __future__ import annotations

import os
from collections import Counter
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from coordinator.planner.planner import plan
from coordinator.planner.simulator import RunReport, Scenario, Simulator

EXAMPLES = int(os.environ.get("PLACEMENT_EXAMPLES", "60"))
TIERS = ["_default_tier", "hot"]


@st.composite
def scenarios(draw: st.DrawFn) -> dict[str, Any]:
    n = draw(st.integers(1, 5))
    servers = [{"name": f"h{i}", "tier": draw(st.sampled_from(TIERS)), "maxSizeBytes": 10**9} for i in range(n)]
    replicants = {t: draw(st.integers(0, 2)) for t in TIERS}
    events: list[dict[str, Any]] = []
    for run in range(2, 6):
        kind = draw(st.sampled_from(["none", "add", "publish", "unused", "decommission", "queue_limit", "outside",
                                     "outside"]))
        if kind == "add":
            events.append({"beforeRun": run, "type": "add_server",
                           "server": {"name": f"new{run}", "tier": draw(st.sampled_from(TIERS)),
                                      "maxSizeBytes": 10**9}})
        elif kind == "publish":
            events.append({"beforeRun": run, "type": "publish",
                           "segments": [{"dataSource": "late", "start": "2026-05-03", "count": draw(st.integers(1, 6)),
                                         "granularity": "PT1H", "sizeBytes": 1000}]})
        elif kind == "unused":
            events.append({"beforeRun": run, "type": "mark_unused",
                           "segments": ["wiki_2026-05-01T00:00:00.000Z_2026-05-01T01:00:00.000Z_v1"]})
        elif kind == "outside":  # a server loads a copy the coordinator did not ask for (one too many, maybe)
            events.append({"beforeRun": run, "type": "server_adds_segments", "name": f"h{draw(st.integers(0, n - 1))}",
                           "segments": [f"wiki_2026-05-01T0{h}:00:00.000Z_2026-05-01T0{h + 1}:00:00.000Z_v1"
                                        for h in range(draw(st.integers(1, 3)))]})
        elif kind == "decommission" and n > 1:
            events.append({"beforeRun": run, "type": "decommission", "name": "h0"})
        elif kind == "queue_limit":
            events.append({"beforeRun": run, "type": "set_dynamic_config",
                           "dynamicConfig": {"smartSegmentLoading": False, "maxSegmentsInNodeLoadingQueue": 2,
                                             "replicationThrottleLimit": 3}})
    return {"now": "2026-06-01T00:00:00Z", "servers": servers,
            "segments": [{"dataSource": "wiki", "start": "2026-05-01", "count": draw(st.integers(3, 12)),
                          "granularity": "PT1H", "sizeBytes": 1000}],
            "rules": {"_default": [{"type": "loadForever", "tieredReplicants": replicants}]},
            "events": events, "runs": 14, "seed": draw(st.integers(0, 5))}


@settings(max_examples=EXAMPLES, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow])
@given(scenarios(), st.sampled_from(["incremental", "sweep"]), st.integers(1, 4))
def test_at_quiescence_a_full_plan_has_nothing_to_do(doc: dict[str, Any], planner: str, chunk: int) -> None:
    """Also with the first and periodic full runs taken as sweeps in slices of ``chunk`` segments: a completed
    sweep leaves the cluster where one full run leaves it, nothing for a full plan to do."""
    sim = Simulator(Scenario.parse(doc))
    reports = sim.run(planner=planner, compute_cost=False, sweep_chunk=chunk)
    want = doc["rules"]["_default"][0]["tieredReplicants"]
    for r in reports:  # the queue limit holds at every step (0: unlimited)
        limits = sim.config.effective(len(r.used), len(r.servers))
        cap = limits.max_segments_in_node_loading_queue
        if cap > 0:
            assert all(sum(1 for q in queue if q.action == "load") <= cap for _s, _l, queue in r.servers.values())
        _throttled_and_guarded(r, want, limits.replication_throttle_limit)
    sim.complete()
    final = plan(sim.view(10_000), compute_cost=False, balance=False)
    assert [c for c in final.commands if c.type in ("load", "drop", "cancel")] == []
    # every used segment is at its replica count on every tier that has an active server
    for sid, used in sim.used.items():
        if not used:
            continue
        for tier, n in want.items():
            active = [n for n in sim.historicals if sim.server(n).tier == tier and not sim.server(n).decommissioning]
            have = sum(1 for n in active if sid in sim.held(n))
            assert have >= min(n, len(active)), (str(sid), tier, have, n)


def _throttled_and_guarded(r: RunReport, want: dict[str, int], throttle: int) -> None:
    """In every run: no tier gets more replica loads than the replication throttle, and no drop takes a used
    segment below its tier's replica count (right after the run's decisions: copies loaded and not being
    dropped, on any server of the tier)."""
    replicas = Counter(c.tier for c in r.plan.commands if c.type == "load" and c.replica)
    assert all(n <= throttle for n in replicas.values()), (replicas, throttle)
    for c in r.plan.commands:
        if c.type != "drop" or not r.used.get(c.segment):
            continue
        kept = sum(1 for srv, loaded, queue in r.planned.values()
                   if srv.tier == c.tier and c.segment in loaded
                   and not any(q.action == "drop" and q.segment == c.segment for q in queue))
        assert kept >= want.get(c.tier, 0), (str(c.segment), c.tier, kept, want)
