"""The consequences the timeline must show, one scenario each (given / when / then)."""

from __future__ import annotations

from coordinator.timeline.timeline import StateChange, Timeline
from events import Interval, SegmentDescriptor

DAY = Interval.parse("2026-01-01/P1D")


def seg(p: int = 0, version: str = "v1", interval: Interval = DAY, over: tuple[int, ...] = (),
        aug: tuple[int, ...] = (), core: int = 0) -> SegmentDescriptor:
    shard = {"type": "numbered", "partitionNum": p, "partitions": core} if core else None
    return SegmentDescriptor("wiki", interval, version, p, 100, over, aug, shard_spec=shard)


def online(tl: Timeline, *segments: SegmentDescriptor, server: str = "h1") -> None:
    tl.publish(segments)
    for s in segments:
        tl.announce(s, server)


def served(tl: Timeline, interval: Interval = DAY) -> list[tuple[str, list[str]]]:
    def short(i: Interval) -> str:
        return f"{i.iso()[8:13]}-{i.iso()[33:38]}"

    return [(f"{e.segment_id.version}/{e.segment_id.partition_id}", [short(i) for i in e.intervals])
            for e in tl.lookup(interval)]


def states(tl: Timeline) -> dict[str, str]:
    return {f"{s.version}/{s.partition_id}": st for s, st in tl.states().items()}


def test_the_proposals_example_and_removing_7_brings_back_4_and_5() -> None:
    tl = Timeline("wiki")
    online(tl, seg(1), seg(2), seg(3))
    online(tl, seg(4, over=(2, 3), aug=(4,)), seg(5))
    online(tl, seg(6, over=(4, 5), aug=(6, 7)), seg(7, over=(4, 5), aug=(6, 7)), seg(8))
    assert [k for k, v in states(tl).items() if v == "visible"] == ["v1/1", "v1/6", "v1/7", "v1/8"]
    assert sorted(s.partition_id for s in tl.overshadowed_used()) == [2, 3, 4, 5]
    changes = tl.unannounce(seg(7).id, "h1")
    assert {(c.segment_id.partition_id, c.old, c.new) for c in changes} == {
        (4, "overshadowed", "visible"), (5, "overshadowed", "visible"), (6, "visible", "standby"),
        (7, "visible", "offline")}
    assert sorted(s.partition_id for s in tl.overshadowed_used()) == [2, 3]


def test_an_incomplete_group_waits_in_standby_while_the_old_can_be_served_in_full() -> None:
    tl = Timeline("wiki")
    online(tl, seg(0), seg(1))
    tl.publish([seg(2, over=(0, 1), aug=(2, 3)), seg(3, over=(0, 1), aug=(2, 3))])
    changes = tl.announce(seg(2), "h1")
    assert [(c.segment_id.partition_id, c.new) for c in changes] == [(2, "standby")]
    assert states(tl)["v1/0"] == states(tl)["v1/1"] == "visible"
    changes = tl.announce(seg(3), "h2")  # the whole group is online: atomic swap
    assert {(c.segment_id.partition_id, c.new) for c in changes} == {
        (0, "overshadowed"), (1, "overshadowed"), (2, "visible"), (3, "visible")}


def test_newest_partial_data_wins_when_the_old_cannot_be_served_in_full() -> None:
    tl = Timeline("wiki")
    tl.publish([seg(0), seg(1)])
    tl.announce(seg(0), "h1")  # partition 1 of the old data is offline
    tl.publish([seg(2, over=(0, 1), aug=(2, 3)), seg(3, over=(0, 1), aug=(2, 3))])
    tl.announce(seg(2), "h1")
    assert states(tl) == {"v1/0": "overshadowed", "v1/1": "offline", "v1/2": "visible", "v1/3": "offline"}
    assert served(tl) == [("v1/2", ["01T00-02T00"])]  # never 0 and 2 together: no data twice


def test_complete_newer_versions_win_transitively() -> None:
    tl = Timeline("wiki")
    for v in ("v1", "v2", "v3"):
        online(tl, seg(0, v), seg(1, v))
    assert [k for k, v in states(tl).items() if v == "visible"] == ["v3/0", "v3/1"]
    assert len(tl.overshadowed_used()) == 4


def test_fallback_as_many_hops_down_as_needed() -> None:
    tl = Timeline("wiki")
    for v in ("v1", "v2", "v3"):
        online(tl, seg(0, v, core=1))
    tl.unannounce(seg(0, "v3").id, "h1")
    assert states(tl)["v2/0"] == "visible"
    tl.unannounce(seg(0, "v2").id, "h1")
    assert states(tl) == {"v1/0": "visible", "v2/0": "offline", "v3/0": "offline"}
    assert tl.overshadowed_used() == []


def test_a_new_version_replaces_the_old_only_once_all_core_partitions_are_online() -> None:
    tl = Timeline("wiki")
    online(tl, seg(0, "v1"))
    tl.publish([seg(0, "v2", core=2), seg(1, "v2", core=2)])
    tl.announce(seg(0, "v2", core=2), "h1")
    assert states(tl) == {"v1/0": "visible", "v2/0": "standby", "v2/1": "offline"}
    tl.announce(seg(1, "v2", core=2), "h1")
    assert states(tl) == {"v1/0": "overshadowed", "v2/0": "visible", "v2/1": "visible"}


def test_an_incomplete_version_serves_where_nothing_complete_does() -> None:
    tl = Timeline("wiki")
    hours = Interval.parse("2026-01-01T00/PT12H")
    online(tl, seg(0, "v1", interval=hours))
    tl.publish([seg(0, "v2", core=2), seg(1, "v2", core=2)])
    tl.announce(seg(0, "v2", core=2), "h1")
    assert served(tl) == [("v1/0", ["01T00-01T12"]), ("v2/0", ["01T12-02T00"])]
    assert states(tl)["v2/0"] == "visible"


def test_partial_overshadowing_across_granularities() -> None:
    tl = Timeline("wiki")
    online(tl, seg(0, "v1"))
    hour = Interval.parse("2026-01-01T05/PT1H")
    online(tl, seg(0, "v2", interval=hour))
    assert states(tl) == {"v1/0": "visible", "v2/0": "visible"}
    assert served(tl) == [("v1/0", ["01T00-01T05", "01T06-02T00"]), ("v2/0", ["01T05-01T06"])]
    assert tl.overshadowed_used() == []
    # the day is fully overwritten by hourly data of a newer version: v1 is overshadowed
    for h in range(24):
        online(tl, seg(0, "v3", interval=Interval.parse(f"2026-01-01T{h:02d}/PT1H")))
    assert states(tl)["v1/0"] == states(tl)["v2/0"] == "overshadowed"


def test_druids_versioned_interval_lookup() -> None:
    """As VersionedIntervalTimelineTest: 01-01/01-10 v1 under 01-01/01-03 v2 and 01-03/01-05 v3."""
    tl = Timeline("wiki")
    online(tl, seg(0, "v1", Interval.parse("2011-01-01/2011-01-10")))
    online(tl, seg(0, "v2", Interval.parse("2011-01-01/2011-01-03")))
    online(tl, seg(0, "v3", Interval.parse("2011-01-03/2011-01-05")))
    got = [(e.segment_id.version, [i.iso() for i in e.intervals])
           for e in tl.lookup(Interval.parse("2011-01-02/2011-01-08"))]
    assert got == [
        ("v2", ["2011-01-02T00:00:00.000Z/2011-01-03T00:00:00.000Z"]),
        ("v3", ["2011-01-03T00:00:00.000Z/2011-01-05T00:00:00.000Z"]),
        ("v1", ["2011-01-05T00:00:00.000Z/2011-01-08T00:00:00.000Z"]),
    ]
    assert tl.lookup(Interval.parse("2011-01-02/2011-01-02")) == []
    assert tl.lookup(Interval.parse("2012-01-01/2012-01-02")) == []


def test_replicas_keep_a_segment_online_until_the_last_server_leaves() -> None:
    tl = Timeline("wiki")
    tl.publish([seg(0)])
    assert [c.new for c in tl.announce(seg(0), "h1")] == ["visible"]
    assert tl.announce(seg(0), "h2") == [] and tl.announce(seg(0), "h2") == []
    assert tl.unannounce(seg(0).id, "h1") == []
    assert [c.new for c in tl.unannounce(seg(0).id, "h2")] == ["offline"]
    assert tl.unannounce(seg(0).id, "h9") == []


def test_a_segment_marked_unused_leaves_the_timeline_though_still_held() -> None:
    tl = Timeline("wiki")
    online(tl, seg(0))
    assert [(c.old, c.new) for c in tl.mark_unused([seg(0).id])] == [("visible", "absent")]
    assert tl.states() == {} and served(tl) == [] and tl.servers(seg(0).id) == {"h1"}
    assert [(c.old, c.new) for c in tl.publish([seg(0)])] == [("absent", "visible")]  # used again: still held
    assert tl.mark_unused([seg(0).id]) != [] and tl.unannounce(seg(0).id, "h1") == []
    assert tl.states() == {} and tl.segment(seg(0).id) is None  # neither used nor held: forgotten
    assert tl.mark_unused([seg(0).id]) == []


def test_an_announce_of_a_segment_nobody_published_is_never_served() -> None:
    """A historical (or anyone who may write ``segments``) announcing a segment that is not used: no state, no
    served piece, no lookup; it hides nothing, not even as a complete higher version (issue 19)."""
    tl = Timeline("wiki")
    online(tl, seg(0))
    assert tl.announce(seg(1), "h1") == []  # unpublished, same chunk
    assert tl.announce(seg(0, version="v2"), "h1") == []  # unpublished, complete, higher version
    assert states(tl) == {"v1/0": "visible"}
    assert served(tl) == [("v1/0", ["01T00-02T00"])]
    # its publish (read after the announce) makes it visible at once: the server was kept
    assert [(str(c.segment_id), c.new) for c in tl.publish([seg(0, version="v2")])] == [
        (str(seg(0).id), "overshadowed"), (str(seg(0, version="v2").id), "visible")]
    assert tl.unannounce(seg(1).id, "h1") == [] and tl.segment(seg(1).id) is None


def test_cycles_of_overshadowing_are_ignored() -> None:
    tl = Timeline("wiki")
    online(tl, seg(0, over=(1,)), seg(1, over=(0,)))
    assert states(tl) == {"v1/0": "visible", "v1/1": "visible"}


def test_servable_recurses_through_partially_online_groups() -> None:
    """Issue 14: A = {32768, 32770, 32771} overshadows the complete root {0}, only 32768 online; B = {32769, 32772}
    overshadows A's members, only 32769 online. A is servable because what it lists (0) is; B lists only servable
    things, so it waits: the complete root stays visible, never hidden by partial data."""
    tl = Timeline("wiki")
    online(tl, seg(0))
    a, b = (32768, 32770, 32771), (32769, 32772)
    online(tl, seg(32768, over=(0,), aug=a))
    online(tl, seg(32769, over=a, aug=b))
    assert states(tl) == {"v1/0": "visible", "v1/32768": "standby", "v1/32769": "standby"}
    assert served(tl) == [("v1/0", ["01T00-02T00"])]
    assert tl.overshadowed_used() == []
    # the rest of B comes online: B is complete and replaces A's members and (through A) the root
    tl.publish([seg(32772, over=a, aug=b)])
    changes = tl.announce(seg(32772, over=a, aug=b), "h2")
    assert {(c.segment_id.partition_id, c.new) for c in changes} == {
        (0, "overshadowed"), (32768, "overshadowed"), (32769, "visible"), (32772, "visible")}


def test_partial_generations_wait_while_an_older_one_can_be_served_in_full() -> None:
    """Five generations: the root is complete; each later generation of two partitions overshadows the one before and
    has only its first partition online. Every partial generation waits in standby behind the complete root."""
    tl = Timeline("wiki")
    online(tl, seg(0))
    previous: tuple[int, ...] = (0,)
    for g in range(1, 5):
        group = (32768 + 2 * g, 32768 + 2 * g + 1)
        online(tl, seg(group[0], over=previous, aug=group))
        previous = group
    assert states(tl) == {"v1/0": "visible", **{f"v1/{32768 + 2 * g}": "standby" for g in range(1, 5)}}
    assert served(tl) == [("v1/0", ["01T00-02T00"])]
    assert tl.overshadowed_used() == []


# -- Druid's OvershadowableManagerTest, in overshadowedSegments / atomicUpdateGroup terms ---------------------------
# Druid's root partitions 0..n are plain segments; a non-root group over the root range [a, b) lists a..b-1 and
# declares its members in atomicUpdateGroup (ids from 32768, as Druid's non-root partition ids).


def test_an_incomplete_group_over_roots_that_cannot_be_served_in_full_overshadows_them() -> None:
    """testAddOvershadowedChunkToIncompletePartition: group {32768, 32769} over roots 0..2, only 32768 online; root 1
    arrives and is overshadowed (roots 0 and 2 exist nowhere, so the old data cannot be served in full)."""
    tl = Timeline("wiki")
    group = (32768, 32769)
    online(tl, seg(32768, over=(0, 1, 2), aug=group))
    online(tl, seg(1))
    assert states(tl) == {"v1/1": "overshadowed", "v1/32768": "visible"}


def test_a_complete_older_generation_sends_an_incomplete_newer_group_to_standby() -> None:
    """testAddCompleteOvershadowedToInCompletePartition: group {32768, 32769, 32770} over roots 0..1 with two of three
    online; root 0 alone is overshadowed, with root 1 the roots are complete and the group waits in standby."""
    tl = Timeline("wiki")
    group = (32768, 32769, 32770)
    online(tl, seg(32768, over=(0, 1), aug=group), seg(32769, over=(0, 1), aug=group))
    online(tl, seg(0))
    assert states(tl) == {"v1/0": "overshadowed", "v1/32768": "visible", "v1/32769": "visible"}
    online(tl, seg(1))
    assert states(tl) == {"v1/0": "visible", "v1/1": "visible", "v1/32768": "standby", "v1/32769": "standby"}


def test_the_older_generation_returns_when_the_last_member_of_the_newer_goes_offline() -> None:
    """testRemoveChunkFromCompleteParition: root 1, then the complete group {32768, 32769} over roots 0..1 hides it;
    one member offline: the other still serves (root 0 exists nowhere); both offline: root 1 is visible again."""
    tl = Timeline("wiki")
    group = (32768, 32769)
    online(tl, seg(1))
    online(tl, seg(32768, over=(0, 1), aug=group), seg(32769, over=(0, 1), aug=group))
    assert states(tl) == {"v1/1": "overshadowed", "v1/32768": "visible", "v1/32769": "visible"}
    tl.unannounce(seg(32768).id, "h1")
    assert states(tl)["v1/1"] == "overshadowed" and states(tl)["v1/32769"] == "visible"
    tl.unannounce(seg(32769).id, "h1")
    assert states(tl)["v1/1"] == "visible"


def test_a_daily_chunk_under_hourly_ones_follows_each_hour_handed_back_and_forth() -> None:
    """One hour's chunk losing and regaining completeness re-covers the daily chunk beneath it from that hour
    alone (the incremental path, with overwrites and compactions of other hours around it); after every step
    the states, the served pieces and a day's lookup equal those of a timeline built in bulk from the same sets."""
    import random

    hour = 3_600_000
    day0 = DAY.start
    segments = [seg(0, "v0", DAY)]
    for h in range(24):
        iv = Interval(day0 + h * hour, day0 + (h + 1) * hour)
        segments += [seg(p, "v1", iv, core=3) for p in range(3)]
        if h % 3 == 0:
            segments += [seg(p, "v1", iv, over=(0, 1, 2), aug=(3, 4), core=3) for p in (3, 4)]
        if h % 4 == 0:
            segments += [seg(0, "v2", Interval(iv.start, iv.start + 2 * hour), core=1)]
    by_id = {s.id: s for s in segments}
    tl = Timeline("wiki")
    online(tl, *segments)
    rng = random.Random(18)
    for step in range(300):
        s = rng.choice(segments)
        tl.unannounce(s.id, "h1") if rng.random() < 0.5 else tl.announce(s, "h1")
        bulk = Timeline.build("wiki", segments, {x: (by_id[x], servers) for x, servers in tl.online().items()})
        assert tl.states() == bulk.states(), step
        assert tl.served_pieces() == bulk.served_pieces(), step
        assert tl.lookup(DAY) == bulk.lookup(DAY), step


def test_a_visible_segment_marked_unused_leaves_every_later_lookup() -> None:
    tl = Timeline("wiki")
    online(tl, seg(0), seg(1), seg(2))
    for _ in range(10):  # past the lookups that make the timeline keep a flat copy and each chunk's entries
        assert served(tl) == [("v1/0", ["01T00-02T00"]), ("v1/1", ["01T00-02T00"]), ("v1/2", ["01T00-02T00"])]
    tl.mark_unused([seg(1).id])
    assert served(tl) == [("v1/0", ["01T00-02T00"]), ("v1/2", ["01T00-02T00"])]
    tl.mark_unused([seg(0).id])
    for _ in range(10):
        assert served(tl) == [("v1/2", ["01T00-02T00"])]
    assert states(tl) == {"v1/2": "visible"}


def test_a_chunk_of_hundreds_of_members_reports_exactly_what_changed() -> None:
    """Wide chunks (over 256 members, many states changing at once) take the timeline's linear mask paths: the
    changes are exactly the differences of the states before and after, in id order. A lone plain chunk serves
    its interval whether complete or not, so every online member is visible and every other one offline."""
    tl = Timeline("wiki")
    members = [seg(p, core=300) for p in reversed(range(400))]  # published in descending order
    for s in members[::2]:
        tl.announce(s, "h1")  # announced before the publish: online at once
    used = {s.id: s for s in members}
    online = {s.id: s for s in members[::2]}
    before: dict[object, str] = {}

    def check(changes: list[StateChange]) -> None:
        after = {sid: "visible" if sid in online else "offline" for sid in sorted(used)}
        assert tl.states() == after
        ids = sorted(set(before) | set(after))
        diff = [(sid, before.get(sid, "absent"), after.get(sid, "absent")) for sid in ids
                if before.get(sid) != after.get(sid)]
        assert [(c.segment_id, c.old, c.new) for c in changes] == diff
        before.clear()
        before.update(after)

    changes = tl.publish(members)
    assert len(changes) == 400
    check(changes)
    for s in members[1:300:2]:  # the last of these completes the chunk: 300 core partitions
        online[s.id] = s
        check(tl.announce(s, "h1"))
    gone = [s.id for s in members[::7]]
    for sid in gone:
        used.pop(sid)
    check(tl.mark_unused(gone))
    for s in members[:300:3]:
        online.pop(s.id, None)
        check(tl.unannounce(s.id, "h1"))


def test_a_member_published_again_without_its_core_partitions_completes_its_chunk() -> None:
    """Given v2 serving the day, and v3 published as partitions 0 and 1 of a core of 2 of which 1 left the used
    set; when v3_0 is published again with no core partitions and announced, then v3 is complete, so v3_0 is
    visible and v2 overshadowed (as a timeline built from scratch says; a worker restored from a snapshot builds
    one)."""
    tl = Timeline("wiki")
    tl.publish([seg(0, "v3", core=2), seg(1, "v3", core=2)])
    tl.mark_unused([seg(1, "v3", core=2).id])
    online(tl, seg(0, "v2"))
    tl.publish([seg(0, "v3")])
    changes = tl.announce(seg(0, "v3"), "h2")
    assert states(tl) == {"v2/0": "overshadowed", "v3/0": "visible"}
    assert [(c.segment_id.version, c.old, c.new) for c in changes] == [
        ("v2", "visible", "overshadowed"), ("v3", "offline", "visible")]
    fresh = Timeline.build("wiki", [seg(0, "v2"), seg(0, "v3")], {
        seg(0, "v2").id: (seg(0, "v2"), ("h1",)), seg(0, "v3").id: (seg(0, "v3"), ("h2",))})
    assert fresh.states() == tl.states()
