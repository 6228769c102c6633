"""The tier cost index follows a burst of loads through its own delta: no relisting of the servers, exact costs."""

from __future__ import annotations

from coordinator.balancer.server_costs import ServerSegments
from coordinator.placement.records import ServerFacts
from coordinator.placement.state import PlacementState
from events import Interval, SegmentDescriptor

H = 3_600_000
T0 = 1_767_225_600_000
NAMES = ["h0", "h1", "h2", "h3"]


def _segment(i: int) -> SegmentDescriptor:
    return SegmentDescriptor(f"ds{i % 3}", Interval(T0 + (i // 3) * H, T0 + (i // 3 + 1) * H), "v1", 0, 1 << 20)


def _cluster(held: int) -> PlacementState:
    """The four servers of one tier holding segments 0 .. ``held`` - 1 round robin."""
    state = PlacementState()
    for name in NAMES:
        state.set_server(name, ServerFacts("_default_tier", 1 << 50))
    _hold(state, range(held))
    return state


def _hold(state: PlacementState, segments: range) -> None:
    for i in segments:
        seg = _segment(i)
        state.learn(seg, True)
        state.hold(NAMES[i % 4], seg.id, True)


def _exact(state: PlacementState, probes: list[SegmentDescriptor]) -> None:
    brute = {}
    for n in NAMES:
        brute[n] = ServerSegments()
        for sid in state.projected_segments(n):
            brute[n].add(state.segments[sid])
    for seg in probes:
        got = state.costs_in("_default_tier", seg)
        for n in NAMES:
            want = brute[n].cost_of(seg)
            assert abs(got[n] - want) <= 1e-9 * max(abs(want), 1e-300), (n, seg, got[n], want)


def test_a_burst_of_loads_is_applied_to_the_index_not_relisted() -> None:
    """3000 held pairs, then a burst of 1500 more and 200 gone (more than the 1044 changes after which the index
    was dropped and built again from every server's projected segments): the same index takes them as its delta,
    holds exactly the projection, and answers the brute-force sums."""
    state = _cluster(3000)
    index = state.tier_index("_default_tier")
    assert index.static_rows == 3000
    _hold(state, range(3000, 4500))
    for i in range(0, 400, 2):
        state.hold(NAMES[i % 4], _segment(i).id, False)
    assert state.tier_index("_default_tier") is index
    assert index.static_rows == 3000 and index.delta_size() == 1700  # applied, not rebuilt
    assert len(index) == 4300 and all(index.holds(n, sid) for n in NAMES for sid in state.projected_segments(n))
    _exact(state, [_segment(i) for i in (1, 2, 3001, 4499, 4600)])


def test_flushing_the_noted_changes_after_each_batch_leaves_the_index_a_later_read_would() -> None:
    """What the planner's shell does after each batch: the noted pair changes go into the built index then, a
    batch at a time; the index holds exactly the projection after every flush, and the same pairs and answers as
    one that read them all at once."""
    flushed, once = _cluster(1000), _cluster(1000)
    for state in (flushed, once):
        state.tier_index("_default_tier")
    for batch in range(10):
        for state in (flushed, once):
            _hold(state, range(1000 + batch * 50, 1000 + (batch + 1) * 50))
            state.hold(NAMES[batch % 4], _segment(batch * 4).id, False)
        flushed.flush_index_deltas()
        index = flushed.tier_indexes["_default_tier"]
        assert not flushed._index_delta.get("_default_tier")  # handed over: nothing left for the next read
        assert len(index) == sum(len(flushed.projected_segments(n)) for n in NAMES)
        assert all(index.holds(n, sid) for n in NAMES for sid in flushed.projected_segments(n))
    assert once._index_delta["_default_tier"]  # still noted: the next read applies them
    a, b = flushed.tier_index("_default_tier"), once.tier_index("_default_tier")
    assert len(a) == len(b) and a.delta_size() == b.delta_size()
    _exact(flushed, [_segment(i) for i in (1, 2, 1001, 1499, 1600)])
    _exact(once, [_segment(i) for i in (1, 2, 1001, 1499, 1600)])
    empty = PlacementState()  # no index built: nothing is built by a flush
    empty.set_server("h0", ServerFacts("_default_tier", 1 << 50))
    empty.flush_index_deltas()
    assert empty.tier_indexes == {}
