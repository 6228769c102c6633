"""Examples of the placement fold where the order of the log matters: answers before their commands."""

from __future__ import annotations

from coordinator.placement import codec
from coordinator.placement.state import PlacementState
from events.cluster import SegmentLoadRefused, ServerJoined
from events.commands import DropSegment, LoadSegment
from events.envelope import Envelope
from events.registry import Event
from events.schema import Instant
from events.segments import SegmentsPublished
from tests.accepted import through_lockbox
from tests.unit.placement.history import POOL, T0

SEG = POOL[0]


def env(event: Event, event_id: str, key: str = "k") -> Envelope[Event]:
    return Envelope(event, event_id, Instant(T0), key)


def move(move_id: str) -> tuple[Envelope[Event], Envelope[Event]]:
    load = LoadSegment(command_id=move_id, server="h2", segment=SEG, stage="7", purpose="balancing",
                       reason="cheaper than h1", move_id=move_id)
    drop = DropSegment(command_id=move_id + "-d", server="h1", segment_id=str(SEG.id), stage="7",
                       purpose="balancing", reason="cheaper than h1", move_id=move_id)
    return env(load, move_id), env(drop, move_id + "-d")


def refused(move_id: str) -> Envelope[Event]:
    return env(SegmentLoadRefused(server="h2", command_id=move_id, segment_id=str(SEG.id), reason="no room",
                                  move_id=move_id), "r-" + move_id)


def test_a_drop_half_read_after_its_move_was_refused_never_enters_the_queue() -> None:
    """The source keeps its copy whichever half the log shows first (the drop half used to wait for the
    timeout when the refusal came before it)."""
    load, drop = move("m1")
    for order in ([load, drop, refused("m1")], [load, refused("m1"), drop], [refused("m1"), load, drop]):
        st = PlacementState()
        st.evolve_all([env(ServerJoined(server=n, tier="hot", max_size_bytes=10_000), "j" + n) for n in ("h1", "h2")])
        st.evolve_all(order)
        assert st.queue == {}, order
        assert st.move_abandoned("m1") and not st.move_abandoned("m2")


def test_a_refused_move_is_remembered_through_the_store() -> None:
    """An adapter that stores the settled ids (and forgets them in memory) still knows the move was refused."""
    st = PlacementState()
    st.evolve(refused("m1"))
    stored = {key for family, key, _ in codec.changed(st) if family == "ans"}
    restored, _ = codec.restore([], settled_before=stored.__contains__)
    assert restored.move_abandoned("m1")
    load, drop = move("m1")
    restored.evolve_all([load, drop])
    assert restored.queue == {}


def test_two_moves_of_one_segment_each_from_the_others_target_fold_without_error() -> None:
    """h2 takes the segment from h1 while h1 takes it from h2 (two balancers, or a deposed planner's move read
    with the new one's): each server is the other's move source. Refreshing one pair re-entered the other's
    refresh, which removed the first pair's contribution twice (KeyError); found by the adapter property test."""
    def cross(mid: str, target: str, source: str) -> tuple[Envelope[Event], Envelope[Event]]:
        load = LoadSegment(command_id=mid, server=target, segment=SEG, stage="7", purpose="balancing", reason="r",
                           move_id=mid)
        drop = DropSegment(command_id=mid + "-d", server=source, segment_id=str(SEG.id), stage="7",
                           purpose="balancing", reason="r", move_id=mid)
        return env(load, mid), env(drop, mid + "-d")

    (l1, d1), (l2, d2) = cross("m1", "h2", "h1"), cross("m2", "h1", "h2")
    for order in ([l1, d1, l2, d2], [l1, l2, d1, d2], [l2, d1, d2, l1]):
        st = PlacementState()
        st.evolve_all([env(ServerJoined(server=n, tier="hot", max_size_bytes=10_000), "j" + n) for n in ("h1", "h2")])
        st.evolve_all(order)
        assert sorted(st.queue) == ["m1", "m1-d", "m2", "m2-d"], order
        if order == [l1, d1, l2, d2]:  # each move read whole, loads first: both servers are move sources
            assert st.move_sources.get(SEG.id) == {"h1", "h2"}
        fresh, _ = codec.restore([(f, k, v) for f, k, v in codec.entries(st) if v is not None])
        assert fresh.move_sources.get(SEG.id) == st.move_sources.get(SEG.id)
        assert fresh.loading == st.loading


def test_a_move_read_drop_half_first_knows_its_source_as_when_read_load_first() -> None:
    """The halves are keyed by two servers, so on two partitions: a new leader, replay or a historical may read
    either first. The load used to learn its source only when read before the drop half."""
    load, drop = move("m1")
    seen = []
    for order in ([load, drop], [drop, load]):
        st = PlacementState()
        st.evolve_all([env(ServerJoined(server=n, tier="hot", max_size_bytes=10_000), "j" + n) for n in ("h1", "h2")])
        st.evolve(through_lockbox(env(SegmentsPublished(task_id="t", segments=(SEG,)), "pub")))
        st.evolve_all(order)
        seen.append(({c: (q.server, q.action, q.source) for c, q in sorted(st.queue.items())},
                     st.move_sources.get(SEG.id)))
    assert seen[0] == seen[1] and seen[0][0]["m1"] == ("h2", "load", "h1") and seen[0][1] == {"h1"}
