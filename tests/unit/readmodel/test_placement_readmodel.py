"""The read models over the placement fold: Druid's load status, servers, load queues, data sources."""

from __future__ import annotations

import pytest

from coordinator.locks.lockbox import Lockbox
from coordinator.placement.state import PlacementState
from coordinator.readmodel import locks, placement, timeline
from coordinator.readmodel.validate import PayloadError, check_config, check_payload, check_rules, parse_assignments
from coordinator.timeline.timelines import Timelines
from events import Envelope, Event, Interval, SegmentDescriptor
from events.cluster import DynamicConfigSet, RulesSet, ServerDecommissioned, ServerJoined
from events.commands import LoadSegment
from events.segments import SegmentAnnounced, SegmentsPublished
from events.tasks import LockRequested, TaskStarted

DAY = 86_400_000
T0 = 1_795_219_200_000


def seg(d: int, ds: str = "wiki", size: int = 100) -> SegmentDescriptor:
    return SegmentDescriptor(ds, Interval(T0 + d * DAY, T0 + (d + 1) * DAY), "v1", 0, size)


class Log:
    def __init__(self) -> None:
        self.p, self.tl, self.n = PlacementState(), Timelines(), 0

    def __call__(self, event: Event, key: str = "k") -> Envelope[Event]:
        self.n += 1
        env = Envelope(event, f"e{self.n}", T0 + self.n, key)
        self.p.evolve(env)
        self.tl.apply(event)
        return env


def cluster() -> Log:
    """hot: h1, h2; cold: c1. wiki wants 2 hot + 1 cold; three segments, announced unevenly."""
    log = Log()
    for name, tier in (("h1", "hot"), ("h2", "hot"), ("c1", "cold")):
        log(ServerJoined(server=name, tier=tier, max_size_bytes=1000))
    log(RulesSet(data_source="wiki", rules=({"type": "loadForever", "tieredReplicants": {"hot": 2, "cold": 1}},)))
    log(SegmentsPublished(task_id="t", segments=(seg(0), seg(1), seg(2))))
    log(SegmentAnnounced(server="h1", segment=seg(0)))
    log(SegmentAnnounced(server="h2", segment=seg(0)))
    log(SegmentAnnounced(server="c1", segment=seg(0)))
    log(SegmentAnnounced(server="h1", segment=seg(1)))
    return log


def test_load_status_counts_available_segments_and_missing_replicas() -> None:
    p = cluster().p
    assert placement.load_status(p, T0) == {"wiki": pytest.approx(200 / 3)}
    assert placement.load_status_simple(p, T0) == {"wiki": 1}
    # seg0 complete; seg1 misses one hot and the cold copy; seg2 misses all three
    assert placement.load_status_full(p, T0) == {"cold": {"wiki": 2}, "hot": {"wiki": 3}}
    assert placement.tier_health(p, T0) == {"cold": {"segments": 3, "unavailable": 2, "underReplicated": 0},
                                            "hot": {"segments": 3, "unavailable": 1, "underReplicated": 1}}


def test_drop_rules_take_segments_out_of_the_load_status() -> None:
    log = cluster()
    log(RulesSet(data_source="wiki", rules=({"type": "dropForever"},)))
    assert placement.load_status(log.p, T0) == {} and placement.load_status_full(log.p, T0) == {}


def test_servers_and_load_queue() -> None:
    log = cluster()
    log(LoadSegment(server="h2", segment=seg(1), command_id="c-1", reason="r", stage="assign", purpose="loading"),
        key="h2")
    log(ServerDecommissioned(server="c1"))
    rows = {s["name"]: s for s in placement.servers(log.p, {"h1": 5})}
    assert rows["h1"]["currSize"] == 200 and rows["h1"]["segments"] == 2 and rows["h1"]["lastHeard"] == 5
    assert rows["h2"]["segmentsToLoad"] == 1 and rows["c1"]["decommissioning"] is True
    assert placement.servers_simple(log.p)[0] == {"host": "c1", "type": "historical", "tier": "cold",
                                                   "currSize": 100, "maxSize": 1000, "priority": 0}
    assert placement.load_queue_simple(log.p)["h2"] == {"segmentsToLoad": 1, "segmentsToDrop": 0,
                                                        "segmentsToLoadSize": 100, "segmentsToDropSize": 0}


def test_data_sources_segments_rules_and_config() -> None:
    log = cluster()
    log(DynamicConfigSet(config={"maxSegmentsToMove": 5}))
    p = log.p
    assert placement.served_data_sources(p) == ["wiki"] == placement.used_data_sources(p)
    assert placement.served_segments(p, "wiki") == sorted([str(seg(0).id), str(seg(1).id)])
    [summary] = placement.data_source_summary(p, T0)
    assert (summary["segments"], summary["size"], summary["replicas"]) == (3, 300, 4)
    assert placement.rules_of(p, "wiki")[0]["tieredReplicants"] == {"cold": 1, "hot": 2}
    assert placement.rules_of(p, "other") == [] and "_default" in placement.rules(p)
    assert placement.config(p)["maxSegmentsToMove"] == 5


def test_segments_with_timeline_state_and_lookup() -> None:
    log = cluster()
    rows = timeline.segments(log.tl, log.p, "wiki")
    assert [r["state"] for r in rows] == ["visible", "visible", "offline"]
    assert rows[0]["servers"] == ["c1", "h1", "h2"]  # holders of the placement fold
    assert [r["segment"] for r in timeline.segments(log.tl, log.p, "wiki", state="offline")] == [str(seg(2).id)]
    assert len(timeline.segments(log.tl, log.p, "wiki", Interval(T0 + DAY, T0 + 2 * DAY))) == 1
    assert timeline.segments(log.tl, log.p, "nope") == []
    assert timeline.lookup(log.tl, "wiki", Interval(T0, T0 + DAY)) == [
        {"segment": str(seg(0).id), "intervals": [Interval(T0, T0 + DAY).iso()]}]


def test_locks_and_waiters_from_the_lockbox() -> None:
    box = Lockbox()
    for n, task in enumerate(("t1", "t2")):
        box.handle(Envelope(TaskStarted(task_id=task, group_id=task, task_type="index_kafka", data_source="wiki"),
                            f"s{n}", T0, "wiki"))
        box.handle(Envelope(LockRequested(request_id=f"r{n}", task_id=task, group_id=task, task_type="index_kafka",
                                          data_source="wiki", interval=Interval(T0, T0 + DAY),
                                          granularity="timeChunk", lock_type="exclusive"), f"l{n}", T0 + n, "wiki"))
    [lock] = locks.locks(box)
    assert lock["holders"] == ["t1"] and lock["type"] == "exclusive"
    assert [(w["taskId"], w["since"]) for w in locks.waiters(box)] == [("t2", T0 + 1)]
    assert [(t["taskId"], len(t["locks"])) for t in locks.tasks(box)] == [("t1", 1), ("t2", 0)]


def test_validators_name_the_field() -> None:
    with pytest.raises(PayloadError, match=r"payload.rules\[0\].tieredReplicants.hot: expected a non-negative"):
        check_payload(RulesSet(data_source="wiki", rules=({"type": "loadForever", "tieredReplicants": {"hot": -1}},)))
    with pytest.raises(PayloadError, match="_default rules cannot be empty"):
        check_rules("_default", [])
    with pytest.raises(PayloadError, match=r"payload\.config\.maxSegmentsToMove: expected an integer"):
        check_payload(DynamicConfigSet(config={"maxSegmentsToMove": "x"}))
    assert check_config({"maxSegmentsToMove": 3}).max_segments_to_move == 3
    with pytest.raises(PayloadError, match="expected KEY=VALUE"):
        parse_assignments(["=1"])


@pytest.mark.parametrize("seed", range(5))
def test_health_counted_in_slices_counts_each_used_segment_once_as_the_whole_count_does(seed: int) -> None:
    """What the worker's metrics recount does (a slice per job on the planner's thread): any slicing, and ids no
    longer used among the slices, give the whole count's tier health and unavailable segments."""
    import random

    from events.segments import SegmentsMarkedUnused

    rng = random.Random(seed)
    log = Log()
    for name, tier in (("h1", "hot"), ("h2", "hot"), ("c1", "cold")):
        log(ServerJoined(server=name, tier=tier, max_size_bytes=10**6))
    log(RulesSet(data_source="wiki", rules=({"type": "loadForever", "tieredReplicants": {"hot": 2, "cold": 1}},)))
    segs = [seg(d) for d in range(60)]
    log(SegmentsPublished(task_id="t", segments=tuple(segs)))
    for s in segs:
        for server in ("h1", "h2", "c1"):
            if rng.random() < 0.5:
                log(SegmentAnnounced(server=server, segment=s))
    gone = rng.sample(segs, 10)
    ids = list(log.p.used)
    log(SegmentsMarkedUnused(segment_ids=tuple(str(s.id) for s in gone), reason="test"))  # named, no longer used
    rng.shuffle(ids)
    counts = placement.HealthCounts()
    i = 0
    while i < len(ids):
        n = rng.randint(1, 9)
        counts.add(log.p, T0, ids[i:i + n])
        i += n
    assert counts.tiers() == placement.tier_health(log.p, T0)
    assert counts.unavailable == sum(placement.load_status_simple(log.p, T0).values())
    assert counts.tiers()["hot"]["segments"] == 50
