"""Chunks of the same shape share one structure (coordinator.timeline.chunk.shared_structure): the verdicts it
gives are those of the chunk's own structure, whatever other chunks put in the shared cache and its memo."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from coordinator.timeline import chunk
from coordinator.timeline.chunk import chunk_structure, resolve_structure, shared_structure
from events import Interval, SegmentDescriptor

DAY = Interval.parse("2026-01-01/P1D")
NEXT = Interval.parse("2026-01-02/P1D")


def _seg(interval: Interval, p: int, over: tuple[int, ...] = (), aug: tuple[int, ...] = ()) -> SegmentDescriptor:
    return SegmentDescriptor("ds", interval, "v1", p, 1, over, aug)


ids = st.lists(st.integers(0, 7), max_size=3, unique=True).map(tuple)
members_st = st.dictionaries(st.integers(0, 7), st.tuples(ids, ids), min_size=1, max_size=8)


@settings(max_examples=300, deadline=None)
@given(st.lists(st.tuples(members_st, st.sets(st.integers(0, 7))), min_size=1, max_size=6))
def test_a_shared_structure_gives_the_verdicts_of_the_chunks_own(chunks: list) -> None:  # type: ignore[type-arg]
    # Several chunks (alternating intervals, so equal shapes meet in different chunks) resolved in turn: the
    # shared structure's memo then holds verdicts another chunk asked for.
    for i, (declared, online) in enumerate(chunks):
        interval = DAY if i % 2 else NEXT
        members = {p: _seg(interval, p, over, aug) for p, (over, aug) in declared.items()}
        shared, own = shared_structure(members), chunk_structure(members)
        on = frozenset(online) & frozenset(members)
        assert (shared.plain, shared.core, dict(shared.group_of), dict(shared.lists), shared.order) == (
            own.plain, own.core, dict(own.group_of), dict(own.lists), own.order)
        assert resolve_structure(shared, on) == resolve_structure(own, on)


def test_chunks_of_the_same_shape_share_one_structure_and_big_chunks_have_their_own() -> None:
    def compacted(interval: Interval, n: int) -> dict[int, SegmentDescriptor]:
        members = {p: _seg(interval, p) for p in range(n)}
        members[n] = _seg(interval, n, tuple(range(n)), (n,))
        return members

    assert shared_structure(compacted(DAY, 6)) is shared_structure(compacted(NEXT, 6))
    assert shared_structure(compacted(DAY, 6)) is not shared_structure(compacted(DAY, 5))
    big = chunk._SHARED_MEMBERS_MAX + 1
    assert shared_structure(compacted(DAY, big)) is not shared_structure(compacted(NEXT, big))
