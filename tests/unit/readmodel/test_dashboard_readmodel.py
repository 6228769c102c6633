"""The dashboard's read models: the overview by tier and one data source's timeline, over the real folds."""

from __future__ import annotations

import dataclasses

from coordinator.readmodel import dashboard
from coordinator.readmodel.timeline import states_of
from events.cluster import RulesSet
from events.segments import SegmentAnnounced, SegmentsPublished
from tests.unit.readmodel.test_placement_readmodel import T0, Log, cluster, seg


def test_overview_groups_servers_by_tier_with_totals_and_health() -> None:
    log = cluster()  # hot: h1 (seg0, seg1), h2 (seg0); cold: c1 (seg0); wiki wants 2 hot + 1 cold
    doc = dashboard.overview(log.p, T0)
    hot, cold = {t["tier"]: t for t in doc["tiers"]}["hot"], {t["tier"]: t for t in doc["tiers"]}["cold"]
    assert [s["name"] for s in hot["servers"]] == ["h1", "h2"] and [s["name"] for s in cold["servers"]] == ["c1"]
    assert (hot["maxSize"], hot["currSize"], cold["currSize"]) == (2000, 300, 100)
    assert (hot["segments"], hot["unavailable"], hot["underReplicated"]) == (3, 1, 1)
    assert (cold["unavailable"], cold["underReplicated"]) == (2, 0)
    (wiki,) = doc["dataSources"]
    assert wiki["name"] == "wiki" and wiki["segments"] == 3 and wiki["unavailable"] == 1
    assert round(wiki["loaded"], 1) == 66.7


def test_a_tier_the_rules_want_and_no_server_serves_is_listed_with_its_segments_unavailable() -> None:
    log = cluster()
    log(RulesSet(data_source="wiki", rules=({"type": "loadForever", "tieredReplicants": {"hot": 1, "archive": 1}},)))
    tiers = {t["tier"]: t for t in dashboard.overview(log.p, T0)["tiers"]}
    assert set(tiers) == {"archive", "cold", "hot"}
    assert tiers["archive"]["servers"] == [] and tiers["archive"]["unavailable"] == 3
    assert tiers["cold"]["segments"] == 0  # servers there, nothing wanted: listed, zeros


def test_timeline_newest_chunk_first_with_states_holders_and_counts() -> None:
    log = cluster()
    newer = dataclasses.replace(seg(0), version="v2")
    log(SegmentsPublished(task_id="t2", segments=(newer,)))
    log(SegmentAnnounced(server="h2", segment=newer))
    doc = dashboard.timeline("wiki", states_of(log.tl, "wiki"), log.p)
    rows = [(r["interval"][:10], r["version"], r["state"], r["servers"]) for r in doc["segments"]]
    assert rows == [("2026-11-23", "v1", "offline", []), ("2026-11-22", "v1", "visible", ["h1"]),
                    ("2026-11-21", "v2", "visible", ["h2"]), ("2026-11-21", "v1", "overshadowed", ["c1", "h1", "h2"])]
    assert doc["counts"] == {"visible": 2, "standby": 0, "overshadowed": 1, "offline": 1}
    assert (doc["total"], doc["truncated"]) == (4, False)


def test_timeline_cut_at_the_limit_keeps_the_newest_and_counts_all() -> None:
    log = Log()
    log(SegmentsPublished(task_id="t", segments=tuple(seg(d) for d in range(10))))
    doc = dashboard.timeline("wiki", states_of(log.tl, "wiki"), log.p, limit=3)
    assert [r["interval"][:10] for r in doc["segments"]] == ["2026-11-30", "2026-11-29", "2026-11-28"]
    assert (doc["total"], doc["truncated"], doc["counts"]["offline"]) == (10, True, 10)
    assert dashboard.timeline("nope", states_of(log.tl, "nope"), log.p)["segments"] == []
