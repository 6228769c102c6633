"""The timeline's per-partition snapshot: the codec round-trips, and snapshot + tail equals the full fold.

What a user would notice: a worker that takes over a partition from a snapshot must show the same segment states,
serve the same lookups and emit the same visibility changes for the tail as the worker that folded everything.
The oracle is the fold that never stopped. Histories run over two data sources of the partition and one of
another partition (which a restore must leave alone), with id texts resolved against what was learned.
"""

from __future__ import annotations

import os
import zlib

import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from coordinator.timeline.facts import all_facts, known_ids
from coordinator.timeline.snapshot import (
    MAGIC,
    SnapshotError,
    decode_snapshot,
    encode_snapshot,
    restore_partition,
    take_snapshot,
)
from coordinator.timeline.timelines import Timelines
from events import Interval, SegmentDescriptor
from events.registry import Event
from events.segments import SegmentAnnounced, SegmentsMarkedUnused, SegmentsPublished, SegmentUnannounced
from tests.unit.timeline.test_timeline_properties import INTERVALS, VERSIONS

MINE = ("wiki", "wiki_edits")  # the partition's data sources (one name a prefix of the other: id texts resolve)
OTHER = "ads"  # another partition's


@st.composite
def pool(draw: st.DrawFn) -> list[SegmentDescriptor]:
    out = {}
    for _ in range(draw(st.integers(1, 10))):
        ds = draw(st.sampled_from([*MINE, OTHER]))
        pid = draw(st.integers(0, 3))
        core = draw(st.sampled_from([0, 0, 2]))
        shard = {"type": "numbered", "partitionNum": pid, "partitions": core} if core else None
        seg = SegmentDescriptor(ds, draw(st.sampled_from(INTERVALS)), draw(st.sampled_from(VERSIONS)), pid, 1,
                                shard_spec=shard)
        out.setdefault(seg.id, seg)
    return list(out.values())


ops = st.tuples(st.sampled_from(["publish", "unused", "announce", "unannounce"]), st.integers(0, 100),
                st.sampled_from(["h1", "h2"]))


def event_of(op: str, seg: SegmentDescriptor, server: str) -> Event:
    if op == "publish":
        return SegmentsPublished(task_id="t", segments=(seg,))
    if op == "unused":
        return SegmentsMarkedUnused(segment_ids=(str(seg.id),), reason="test")
    if op == "announce":
        return SegmentAnnounced(server=server, segment=seg)
    return SegmentUnannounced(server=server, segment_id=str(seg.id))


def views(tls: Timelines) -> tuple[object, ...]:
    everything = Interval(INTERVALS[0].start - 3_600_000, INTERVALS[0].start + 60 * 3_600_000)
    return (tls.states(), all_facts(tls), known_ids(tls, {*MINE, OTHER}),
            [[(e.segment_id, e.intervals) for e in tls.lookup(ds, everything)] for ds in (*MINE, OTHER)])


@settings(max_examples=int(os.environ.get("TIMELINE_EXAMPLES", "300")), deadline=None,
          suppress_health_check=[HealthCheck.too_slow])
@given(pool(), st.lists(ops, min_size=1, max_size=40), st.data())
def test_snapshot_plus_tail_equals_the_full_fold(segments: list[SegmentDescriptor], history: list,  # type: ignore[type-arg]
                                                 data: st.DataObject) -> None:
    combined = [(segments[i % len(segments)].data_source in MINE, event_of(op, segments[i % len(segments)], server))
                for op, i, server in history]  # (of this partition?, event), in log order over both partitions
    mine = [e for is_mine, e in combined if is_mine]
    cut = data.draw(st.integers(0, len(mine)), label="cut")  # the snapshot covers mine[:cut]
    stale = data.draw(st.integers(0, cut), label="stale prefix")  # what the gaining worker had folded of it
    full = Timelines()
    full_changes = []
    for is_mine, e in combined:
        changes = full.apply(e)
        if is_mine:
            full_changes.append(changes)

    writer = Timelines()  # the worker that owned the partition folded it (and maybe other data too) up to the cut
    seen = 0
    for is_mine, e in combined:
        if is_mine and seen == cut:
            break
        seen += is_mine
        writer.apply(e)
    snap = take_snapshot(writer, set(MINE), "segments", 0, cut, tuple(f"e{i}" for i in range(cut)), "w1")
    back = decode_snapshot(encode_snapshot(snap))
    assert back == snap  # the codec round-trips

    gainer = Timelines()  # owns the other partition, and held a stale prefix of this one
    seen = 0
    for is_mine, e in combined:
        if not is_mine or seen < stale:
            gainer.apply(e)
        seen += is_mine
    restore_partition(gainer, back, drop=set(MINE))
    tail_changes = [gainer.apply(e) for e in mine[cut:]]
    assert tail_changes == full_changes[cut:]  # the same visibility changes for the tail, in the same order
    assert views(gainer) == views(full)


def _snap_bytes() -> bytes:
    seg = SegmentDescriptor("wiki", INTERVALS[0], "v1", 0, 1)
    tls = Timelines()
    tls.apply(SegmentsPublished(task_id="t", segments=(seg,)))
    return encode_snapshot(take_snapshot(tls, {"wiki"}, "segments", 2, 7, ("a",), "w"))


def _with(mutate: object) -> bytes:
    body = orjson.loads(zlib.decompress(_snap_bytes()[len(MAGIC):]))
    mutate(body)  # type: ignore[operator]
    return MAGIC + zlib.compress(orjson.dumps(body))


@pytest.mark.parametrize(("data", "message"), [
    (b"{}", "not a timeline snapshot"),
    (MAGIC + b"garbage", "unreadable body"),
    (_with(lambda b: b.update(format=9)), "format: expected 1"),
    (_with(lambda b: b.pop("nextOffset")), "nextOffset: missing"),
    (_with(lambda b: b.update(partition="2")), "partition: expected int"),
    (_with(lambda b: b["facts"][0].pop("used")), "facts[0]: expected"),
    (_with(lambda b: b["facts"][0]["segment"].update(dataSource="")), "facts[0].segment"),
    (_with(lambda b: b.update(ids=[["x", [1, 2]]])), "ids[0][1]"),
    (_with(lambda b: b.update(recentIds=[1])), "recentIds"),
])
def test_bad_snapshots_are_refused_naming_the_field(data: bytes, message: str) -> None:
    with pytest.raises(SnapshotError, match=None) as err:
        decode_snapshot(data)
    assert message in str(err.value)


def test_a_snapshot_leaves_other_partitions_data_sources_alone() -> None:
    mine = SegmentDescriptor("wiki", INTERVALS[0], "v1", 0, 1)
    theirs = SegmentDescriptor(OTHER, INTERVALS[0], "v1", 0, 1)
    src = Timelines()
    src.apply(SegmentsPublished(task_id="t", segments=(mine,)))
    gainer = Timelines()
    gainer.apply(SegmentsPublished(task_id="t", segments=(theirs,)))
    gainer.apply(SegmentAnnounced(server="h9", segment=SegmentDescriptor("wiki", INTERVALS[2], "v9", 0, 1)))
    restore_partition(gainer, decode_snapshot(encode_snapshot(take_snapshot(src, {"wiki"}, "segments", 0, 1, (),
                                                                            ""))), drop={"wiki"})
    assert gainer.states() == {str(mine.id): "offline", str(theirs.id): "offline"}
