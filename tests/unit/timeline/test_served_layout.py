"""The flat lookup layout (coordinator/timeline/served.py) answers every lookup as the piece-by-piece walk does.

A user reads lookups: for any history of publish / mark-unused / announce / unannounce and any query, the answer
read from the per-block flat entries (one slice per block) is the answer of walking every served piece, and both
are the served pieces clipped to the query (the oracle). Blocks are made tiny here so that histories split them,
queries span several of them, and stale blocks are rebuilt between changes.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from coordinator.timeline import served
from coordinator.timeline.timeline import Timeline
from events import Interval, SegmentDescriptor, SegmentId
from tests.unit.timeline.test_timeline_properties import _lookup_oracle, apply_op

H = 3_600_000
BASE = 1_767_225_600_000  # 2026-01-01
# Hours (many one-piece chunks in a row: the flat path) and longer chunks that higher hours cut into several
# pieces (the piece-by-piece path), in three versions.
SPANS = [(h, h + 1) for h in range(12)] + [(0, 24), (12, 24), (0, 48), (6, 12), (3, 9), (10, 14)]


@st.composite
def segment_pool(draw: st.DrawFn) -> list[SegmentDescriptor]:
    """A few chunks of 1-3 segments each (so an unannounce can change a chunk's visible set and nothing else)."""
    pool: dict[SegmentId, SegmentDescriptor] = {}
    for _ in range(draw(st.integers(1, 14))):
        a, b = draw(st.sampled_from(SPANS))
        version = draw(st.sampled_from(["v1", "v2", "v3"]))
        core = draw(st.sampled_from([0, 0, 2]))
        for pid in range(draw(st.integers(1, 3))):
            over = draw(st.lists(st.integers(0, 3), max_size=2, unique=True).map(tuple)) if draw(st.booleans()) else ()
            shard = {"type": "numbered", "partitionNum": pid, "partitions": core} if core else None
            seg = SegmentDescriptor("ds", Interval(BASE + a * H, BASE + b * H), version, pid, 1, over,
                                    shard_spec=shard)
            pool.setdefault(seg.id, seg)
    return list(pool.values())


ops = st.tuples(st.sampled_from(["serve", "serve", "serve", "publish", "unused", "announce", "unannounce"]),
                st.integers(0, 100), st.sampled_from(["h1", "h2"]))
queries = st.lists(st.tuples(st.integers(-2, 50), st.integers(0, 52)), min_size=1, max_size=5)


@contextmanager
def block_size(n: int) -> Iterator[None]:
    before = served.BLOCK
    served.BLOCK = n
    try:
        yield
    finally:
        served.BLOCK = before


def _answer(entries: list[served.LookupEntry]) -> list[tuple[SegmentId, tuple[Interval, ...]]]:
    return [(e.segment_id, e.intervals) for e in entries]


@settings(max_examples=int(os.environ.get("TIMELINE_EXAMPLES", "300")), deadline=None,
          suppress_health_check=[HealthCheck.too_slow])
@given(segment_pool(), st.lists(ops, min_size=1, max_size=80), queries, st.sampled_from([1, 2, 3, 64]))
def test_the_flat_layout_answers_as_the_walk_over_every_piece(
    pool: list[SegmentDescriptor], history: list, asked: list[tuple[int, int]], size: int  # type: ignore[type-arg]
) -> None:
    with block_size(size):
        tl = Timeline("ds")
        for op, index, server in history:
            apply_op(tl, op, pool[index % len(pool)], server)  # "serve": most segments of a real timeline
            for start, length in asked:
                q = Interval(BASE + start * H, BASE + (start + length) * H)
                flat = _answer(tl.lookup(q))
                assert flat == _lookup_oracle(tl, q), (q, op)
                if not q.is_empty():
                    assert flat == _answer(tl._served.lookup_by_piece(q.start, q.end))  # the walk before the layout
        # the layout holds the served pieces, in time order, in blocks of at most 2 * size pieces
        pieces = [(piece, (chunk.interval, chunk.version)) for _s, _e, chunk, piece in tl._served]
        assert pieces == tl.served_pieces()
        assert all(0 < len(b.pieces) <= 2 * size for b in tl._served._blocks)
        assert tl._served._firsts == [b.starts[0] for b in tl._served._blocks]


def test_a_query_cut_inside_one_hour_and_across_blocks_gets_the_cut_parts() -> None:
    """Hours 0..9 each served by their own chunk (blocks of at most 2 pieces): a query from 2:30 to 7:15 gets
    2:30-3:00 from hour 2, hours 3..6 whole, 7:00-7:15 from hour 7; a query inside hour 4 gets that part only."""
    with block_size(1):
        segs = [SegmentDescriptor("ds", Interval(BASE + h * H, BASE + (h + 1) * H), "v1", 0, 1) for h in range(10)]
        tl = Timeline.build("ds", segs, {s.id: (s, ("h1",)) for s in segs})
        half, quarter = H // 2, H // 4
        got = tl.lookup(Interval(BASE + 2 * H + half, BASE + 7 * H + quarter))
        assert [(e.segment_id, e.intervals) for e in got] == (
            [(segs[2].id, (Interval(BASE + 2 * H + half, BASE + 3 * H),))]
            + [(segs[h].id, (segs[h].interval,)) for h in range(3, 7)]
            + [(segs[7].id, (Interval(BASE + 7 * H, BASE + 7 * H + quarter),))])
        inside = Interval(BASE + 4 * H + quarter, BASE + 4 * H + half)
        assert [(e.segment_id, e.intervals) for e in tl.lookup(inside)] == [(segs[4].id, (inside,))]
        # an unannounce of hour 5 takes it out of the next answer (its block is rebuilt)
        tl.unannounce(segs[5].id, "h1")
        got = tl.lookup(Interval(BASE, BASE + 10 * H))
        assert [e.segment_id for e in got] == [s.id for h, s in enumerate(segs) if h != 5]
