"""Marking overshadowed segments skips a data source whose time chunks never share an instant: the check
(:func:`_versions_overlap`, vectorised, with a fast path for ids that all have distinct intervals) must say
exactly what comparing every pair of distinct chunks says, or an overshadowed segment would never be marked."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from coordinator.planner.planner import _newest_first, _newest_first_order, _versions_overlap
from events import Interval, SegmentId

_ids = st.lists(st.builds(lambda s, length, v, p: SegmentId("w", Interval(s, s + length), f"v{v}", p),
                          st.integers(0, 40), st.integers(0, 12), st.integers(0, 2), st.integers(0, 2)),
                max_size=12)


def _pairwise(ids: list[SegmentId]) -> bool:
    chunks = {(s.interval.start, s.interval.end, s.version) for s in ids}
    return any(a != b and max(a[0], b[0]) < min(a[1], b[1]) for a in chunks for b in chunks)


@settings(max_examples=500, deadline=None, derandomize=True)
@given(_ids)
def test_overlap_check_agrees_with_every_pair_of_chunks(ids: list[SegmentId]) -> None:
    # empty intervals share no instant; the sorted check counts one inside another as starting before its end,
    # as the marking path always has: compare on ids with non-empty intervals only
    ids = [s for s in ids if s.interval.end > s.interval.start]
    assert _versions_overlap(ids) == _pairwise(ids)


_many_ids = st.lists(st.builds(lambda ds, s, length, v, p: SegmentId(ds, Interval(s, s + length), f"v{v}", p),
                               st.sampled_from(["a", "b", "a_b"]), st.integers(-5, 30), st.integers(0, 8),
                               st.integers(0, 2), st.integers(0, 3)), min_size=250, max_size=400, unique=True)


@settings(max_examples=60, deadline=None, derandomize=True)
@given(_many_ids)
def test_the_loading_order_is_newest_first_then_version_partition_data_source(ids: list[SegmentId]) -> None:
    """Stages 1 and 3-4 visit segments in this order (which segment gets a server first when room runs out): the
    NumPy path for many ids must give exactly the plain sort's order."""
    assert _newest_first_order(ids) == sorted(ids, key=_newest_first)
