"""Marking overshadowed segments unused around what changed marks exactly what a look at every segment marks.

Histories mix versions, partitions and interval lengths (hours inside blocks of 2, 4 and 8 hours) of one
data source, with holders coming and going; after every step a scoped run (which looks only at the
neighbourhood of the segments whose used flag or holders changed since the last marking) must mark the
same segments as a full run on a copy of the same state.
"""

from __future__ import annotations

import copy

from hypothesis import given, settings
from hypothesis import strategies as st

from coordinator.placement.records import ServerFacts
from coordinator.placement.state import PlacementState
from coordinator.planner.planner import plan_state
from events import Interval, SegmentDescriptor
from events.envelope import Envelope
from events.registry import Event
from events.schema import Instant
from events.segments import SegmentAnnounced, SegmentsMarkedUnused, SegmentsPublished, SegmentUnannounced

H = 3_600_000
T0 = 1_767_225_600_000  # 2026-01-01
LATER = T0 + 400 * 24 * H  # well past millisToWaitBeforeDeleting
SHAPES = [(h * H, (h + 1) * H) for h in range(4)] + [(0, 2 * H), (2 * H, 4 * H), (0, 4 * H), (0, 8 * H)]
POOL = [SegmentDescriptor("wiki", Interval(T0 + s, T0 + e), v, p, 100)
        for (s, e) in SHAPES for v in ("v1", "v2", "v3") for p in (0, 1)]
SERVERS = ("h1", "h2")

step = st.tuples(st.sampled_from(["publish", "publish", "announce", "announce", "unannounce", "unused"]),
                 st.sampled_from(POOL), st.sampled_from(SERVERS))


def _event(kind: str, seg: SegmentDescriptor, server: str) -> Event:
    if kind == "publish":
        return SegmentsPublished(task_id="t", segments=(seg,))
    if kind == "announce":
        return SegmentAnnounced(server=server, segment=seg)
    if kind == "unannounce":
        return SegmentUnannounced(server=server, segment_id=str(seg.id))
    return SegmentsMarkedUnused(segment_ids=(str(seg.id),), reason="test")


def _marks(state: PlacementState, run: int, scoped: bool) -> set[str]:
    plan = plan_state(state, LATER, run, T0, balance=False, scope=set() if scoped else None)
    return {str(sid) for sid, _reason in plan.mark_unused}


@settings(max_examples=300, deadline=None)
@given(st.lists(step, min_size=1, max_size=40))
def test_scoped_marking_equals_a_full_marking(steps: list[tuple[str, SegmentDescriptor, str]]) -> None:
    state = PlacementState()
    for name in SERVERS:
        state.set_server(name, ServerFacts("_default_tier", 1 << 40))
    _marks(state, 0, scoped=False)  # the first marking looks at everything
    for i, (kind, seg, server) in enumerate(steps):
        state.evolve(Envelope(_event(kind, seg, server), f"e{i}", Instant(T0 + i), "wiki"))
        full = copy.deepcopy(state)
        expected = _marks(full, 2 * i + 1, scoped=False)
        assert _marks(state, 2 * i + 1, scoped=True) == expected
        assert state.used == full.used


@settings(max_examples=200, deadline=None)
@given(st.lists(step, min_size=1, max_size=40))
def test_a_sweeps_marking_slice_judging_every_source_whole_equals_a_full_marking(
        steps: list[tuple[str, SegmentDescriptor, str]]) -> None:
    """A sweep's marking slices (coordinator/planner/sweep.py) judge data sources whole: over all sources, what a
    full marking marks, with no change noted to look around (the changes were noted before the sweep began)."""
    state = PlacementState()
    for name in SERVERS:
        state.set_server(name, ServerFacts("_default_tier", 1 << 40))
    for i, (kind, seg, server) in enumerate(steps):
        state.evolve(Envelope(_event(kind, seg, server), f"e{i}", Instant(T0 + i), "wiki"))
    expected = _marks(copy.deepcopy(state), 1, scoped=False)
    state.mark_all = False
    state.mark_pending.clear()
    plan = plan_state(state, LATER, 1, T0, balance=False, scope=set(), mark_sources=tuple(sorted(state.used_index)))
    assert {str(sid) for sid, _reason in plan.mark_unused} == expected


def test_a_block_is_marked_when_the_last_hour_that_covers_it_is_served() -> None:
    """Given a 4-hour v1 block and newer v2 hours 1-3 served, when hour 0 of v2 is served, then the block is
    overshadowed, though hours 1-3 do not overlap the hour that changed (the block's neighbourhood counts)."""
    state = PlacementState()
    state.set_server("h1", ServerFacts("_default_tier", 1 << 40))
    block = SegmentDescriptor("wiki", Interval(T0, T0 + 4 * H), "v1", 0, 100)
    hours = [SegmentDescriptor("wiki", Interval(T0 + h * H, T0 + (h + 1) * H), "v2", 0, 100) for h in range(4)]
    events: list[Event] = [SegmentsPublished(task_id="t", segments=(block, *hours)),
                           SegmentAnnounced(server="h1", segment=block)]
    events += [SegmentAnnounced(server="h1", segment=seg) for seg in hours[1:]]
    for i, event in enumerate(events):
        state.evolve(Envelope(event, f"e{i}", Instant(T0 + i), "wiki"))
    assert _marks(state, 1, scoped=False) == set()
    state.evolve(Envelope(SegmentAnnounced(server="h1", segment=hours[0]), "last", Instant(T0 + 99), "wiki"))
    assert _marks(state, 2, scoped=True) == {str(block.id)}
