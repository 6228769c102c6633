"""Random histories of publish / mark_unused / announce / unannounce: incremental = bulk = oracle."""

from __future__ import annotations

import itertools
import os

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from coordinator.timeline.timeline import Timeline
from events import Interval, SegmentDescriptor, SegmentId
from tests.unit.timeline.oracle import timeline_states

H = 3_600_000
BASE = 1_767_225_600_000  # 2026-01-01
INTERVALS = [Interval(BASE + a * H, BASE + b * H) for a, b in
             [(0, 24), (0, 24), (24, 48), (0, 48), (0, 6), (6, 12), (3, 9), (12, 36), (0, 1)]]
VERSIONS = ["v1", "v2", "v3"]


@st.composite
def segment_pool(draw: st.DrawFn) -> list[SegmentDescriptor]:
    pool: dict[SegmentId, SegmentDescriptor] = {}
    for _ in range(draw(st.integers(1, 14))):
        interval = draw(st.sampled_from(INTERVALS))
        version = draw(st.sampled_from(VERSIONS))
        pid = draw(st.integers(0, 5))
        ids = st.lists(st.integers(0, 6), max_size=3, unique=True).map(tuple)
        over = draw(ids) if draw(st.booleans()) else ()
        aug = draw(ids) if draw(st.booleans()) else ()
        core = draw(st.sampled_from([0, 0, 0, 2, 3]))
        shard = {"type": "numbered", "partitionNum": pid, "partitions": core} if core else None
        seg = SegmentDescriptor("ds", interval, version, pid, 1, over, aug, shard_spec=shard)
        pool.setdefault(seg.id, seg)
    return list(pool.values())


def _merged(intervals: list[Interval]) -> list[tuple[int, int]]:
    out: list[tuple[int, int]] = []
    for iv in sorted(intervals):
        if out and out[-1][1] >= iv.start:
            out[-1] = (out[-1][0], max(out[-1][1], iv.end))
        else:
            out.append((iv.start, iv.end))
    return out


ops = st.tuples(st.sampled_from(["publish", "unused", "announce", "unannounce"]), st.integers(0, 100),
                st.sampled_from(["h1", "h2"]))
steps = st.tuples(st.sampled_from(["publish", "republish", "unused", "announce", "unannounce"]), st.integers(0, 100),
                  st.sampled_from(["h1", "h2"]))


@settings(max_examples=int(os.environ.get("TIMELINE_EXAMPLES", "300")), deadline=None,
          suppress_health_check=[HealthCheck.too_slow])
@given(segment_pool(), st.lists(ops, min_size=1, max_size=40))
def test_incremental_equals_bulk_equals_oracle(pool: list[SegmentDescriptor], history: list) -> None:  # type: ignore[type-arg]
    tl = Timeline("ds")
    used: dict[SegmentId, SegmentDescriptor] = {}
    servers: dict[SegmentId, set[str]] = {}
    announced: dict[SegmentId, SegmentDescriptor] = {}
    previous = tl.states()
    for op, index, server in history:
        seg = pool[index % len(pool)]
        sid = seg.id
        if op == "publish":
            changes = tl.publish([seg])
            used[sid] = seg
        elif op == "unused":
            changes = tl.mark_unused([sid])
            used.pop(sid, None)
        elif op == "announce":
            changes = tl.announce(seg, server)
            servers.setdefault(sid, set()).add(server)
            announced[sid] = seg
        else:
            changes = tl.unannounce(sid, server)
            servers.get(sid, set()).discard(server)
        online = {s: announced[s] for s, names in servers.items() if names}

        expected, pieces, over_used = timeline_states(used, online)
        states = tl.states()
        assert {str(k): v for k, v in states.items()} == {str(k): v for k, v in sorted(expected.items())}
        assert tl.overshadowed_used() == over_used

        bulk = Timeline.build("ds", used.values(), {s: (announced[s], servers[s]) for s in online})
        assert bulk.states() == states
        assert bulk.served_pieces() == tl.served_pieces()

        # changes applied to the previous states give the new states, in segment id order
        replayed = dict(previous)
        for c in changes:
            assert replayed.get(c.segment_id, "absent") == c.old and c.old != c.new
            replayed[c.segment_id] = c.new
        assert {k: v for k, v in replayed.items() if v != "absent"} == states
        assert [c.segment_id for c in changes] == sorted(c.segment_id for c in changes)
        previous = states

        # one served chunk per instant, and it is what the oracle serves
        assert tl.served_pieces() == pieces
        everything = Interval(BASE - H, BASE + 60 * H)
        covered: list[Interval] = []
        for entry in tl.lookup(everything):
            assert states[entry.segment_id] == "visible"
            covered.extend(entry.intervals)
        assert _merged(covered) == _merged([piece for piece, _chunk in pieces])
        for _piece, (interval, version) in pieces:
            chunk_states = [st_ for s, st_ in states.items() if (s.interval, s.version) == (interval, version)]
            assert "visible" in chunk_states, "a served chunk has visible segments"
        # no instant is served by two versions
        by_version: dict[str, list[Interval]] = {}
        for entry in tl.lookup(everything):
            by_version.setdefault(entry.segment_id.version + str(entry.segment_id.interval), []).extend(entry.intervals)
        flat = sorted((iv.start, iv.end, k) for k, ivs in by_version.items() for iv in ivs)
        for (_s1, e1, k1), (s2, _e2, k2) in itertools.pairwise(flat):
            assert e1 <= s2 or k1 == k2


def test_the_oracle_recurses_through_partially_online_groups() -> None:
    """Issue 14's example, stated to the oracle alone: the complete root stays visible, both partial groups wait."""
    day = INTERVALS[0]
    a, b = (32768, 32770, 32771), (32769, 32772)
    segments = [SegmentDescriptor("ds", day, "v1", 0, 1), SegmentDescriptor("ds", day, "v1", 32768, 1, (0,), a),
                SegmentDescriptor("ds", day, "v1", 32769, 1, a, b)]
    members = {s.id: s for s in segments}
    states, _pieces, over = timeline_states(members, members)
    assert {sid.partition_id: s for sid, s in states.items()} == {0: "visible", 32768: "standby", 32769: "standby"}
    assert over == []


def apply_op(tl: Timeline, op: str, seg: SegmentDescriptor, server: str) -> None:
    """One history step: ``serve`` (publish, then announce), ``publish``, ``unused``, ``announce`` or
    ``unannounce``."""
    if op in ("serve", "publish"):
        tl.publish([seg])
    if op in ("serve", "announce"):
        tl.announce(seg, server)
    elif op == "unused":
        tl.mark_unused([seg.id])
    elif op == "unannounce":
        tl.unannounce(seg.id, server)


def _lookup_oracle(tl: Timeline, q: Interval) -> list[tuple[SegmentId, tuple[Interval, ...]]]:
    """The served pieces clipped to ``q``, handed to every visible segment of their chunk, in time order."""
    states = tl.states()
    parts: dict[SegmentId, list[Interval]] = {}
    for piece, (interval, version) in tl.served_pieces():
        if piece.end <= q.start or q.end <= piece.start or q.is_empty():
            continue
        sub = Interval(max(piece.start, q.start), min(piece.end, q.end))
        for sid in sorted(s for s, st_ in states.items()
                          if st_ == "visible" and (s.interval, s.version) == (interval, version)):
            ivs = parts.setdefault(sid, [])
            if ivs and ivs[-1].end == sub.start:
                ivs[-1] = Interval(ivs[-1].start, sub.end)
            else:
                ivs.append(sub)
    return [(sid, tuple(ivs)) for sid, ivs in parts.items()]


@settings(max_examples=int(os.environ.get("TIMELINE_EXAMPLES", "300")), deadline=None,
          suppress_health_check=[HealthCheck.too_slow])
@given(segment_pool(), st.lists(ops, min_size=1, max_size=40),
       st.lists(st.tuples(st.integers(-2, 62), st.integers(0, 64)), min_size=1, max_size=6))
def test_lookup_of_any_interval_hands_out_the_served_pieces(
    pool: list[SegmentDescriptor], history: list, queries: list[tuple[int, int]]  # type: ignore[type-arg]
) -> None:
    """Whether a chunk is served wholly inside the query (cached entries) or cut by it, and whether its answer
    comes from the flat layout (coordinator/timeline/served.py) or the piece-by-piece walk, lookup says the same;
    lookups repeat after each change (the first one rebuilds the blocks the change left stale)."""
    tl = Timeline("ds")
    for op, index, server in history:
        apply_op(tl, op, pool[index % len(pool)], server)
        for start, length in (queries * 9)[: max(9, 2 * len(queries))]:
            q = Interval(BASE + start * H, BASE + (start + length) * H)
            assert [(e.segment_id, e.intervals) for e in tl.lookup(q)] == _lookup_oracle(tl, q)


@settings(max_examples=5 * int(os.environ.get("TIMELINE_EXAMPLES", "300")), deadline=None,
          suppress_health_check=[HealthCheck.too_slow])
@given(segment_pool(), st.lists(steps, min_size=1, max_size=40), st.lists(steps, min_size=1, max_size=40))
def test_a_timeline_rebuilt_in_bulk_goes_on_like_the_one_it_was_built_from(
        pool: list[SegmentDescriptor], before: list, after: list) -> None:  # type: ignore[type-arg]
    """A worker restored from a snapshot (``Timeline.build`` from the used set and the online segments) and the
    worker that wrote the snapshot, given the same later events, emit the same changes and serve the same."""
    live = Timeline("ds")
    announced: dict[SegmentId, SegmentDescriptor] = {}
    descriptors: dict[SegmentId, SegmentDescriptor] = {}  # the last one published of each id
    for op, index, server in before:
        seg = _as_published(op, pool[index % len(pool)])
        _step(live, op, seg, server)
        if op in ("publish", "republish"):
            descriptors[seg.id] = seg
        if op == "announce":
            announced[seg.id] = seg
    used = [descriptors[sid] for sid in live.states()]
    online = {sid: (announced[sid], names) for sid, names in live._servers.items()}
    rebuilt = Timeline.build("ds", used, online)
    assert rebuilt.states() == live.states()
    everything = Interval(BASE - H, BASE + 60 * H)
    for op, index, server in after:
        seg = _as_published(op, pool[index % len(pool)])
        ours = _step(rebuilt, op, seg, server)
        theirs = _step(live, op, seg, server)
        assert ours == theirs, (op, seg.id, server)
        assert rebuilt.states() == live.states()
        assert rebuilt.served_pieces() == live.served_pieces()
        assert rebuilt.lookup(everything) == live.lookup(everything)


def _as_published(op: str, seg: SegmentDescriptor) -> SegmentDescriptor:
    """``republish``: the segment published again under its id with another descriptor (no core partitions)."""
    if op != "republish":
        return seg
    return SegmentDescriptor(seg.data_source, seg.interval, seg.version, seg.partition_id, seg.size + 1,
                             seg.overshadowed_segments, seg.atomic_update_group)


def _step(tl: Timeline, op: str, seg: SegmentDescriptor, server: str) -> list:  # type: ignore[type-arg]
    if op in ("publish", "republish"):
        return tl.publish([seg])
    if op == "unused":
        return tl.mark_unused([seg.id])
    if op == "announce":
        return tl.announce(seg, server)
    return tl.unannounce(seg.id, server)
