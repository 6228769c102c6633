"""A deposed planner's commands are void: given commands of two epochs, when folded, then only the live epoch's
count (coordinator.placement.fence)."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from coordinator.placement import codec, fence
from coordinator.placement.state import PlacementState
from events.cluster import ServerJoined
from events.commands import DropSegment, LoadSegment
from events.envelope import Envelope
from events.registry import Event
from events.schema import Instant
from events.segments import SegmentsPublished
from tests.accepted import through_lockbox
from tests.unit.placement.history import POOL, T0


def env(event: Event, event_id: str, key: str = "k") -> Envelope[Event]:
    return Envelope(event, event_id, Instant(T0), key)


def load(cid: str, server: str, epoch: int | None, seg: int = 0, move_id: str | None = None) -> Envelope[Event]:
    return env(LoadSegment(command_id=cid, server=server, segment=POOL[seg], stage="1", purpose="loading",
                           reason="r", move_id=move_id, planner_epoch=epoch), cid, server)


def cluster() -> PlacementState:
    st = PlacementState()
    st.evolve_all([env(ServerJoined(server=n, tier="_default_tier", max_size_bytes=10_000), "j" + n)
                   for n in ("h1", "h2")])
    st.evolve_all([through_lockbox(env(SegmentsPublished(task_id="t", segments=tuple(POOL[:4])), "pub"))])
    return st


def test_a_command_of_an_older_epoch_after_a_newer_one_to_the_same_server_is_never_in_flight() -> None:
    st = cluster()
    st.evolve_all([load("new", "h1", 20, seg=0), load("zombie", "h1", 5, seg=1)])
    assert set(st.queue) == {"new"}
    assert st.epochs == {"h1": 20}
    assert not st.admits(LoadSegment(command_id="z", server="h1", segment=POOL[2], stage="1", purpose="loading",
                                     reason="r", planner_epoch=19))


def test_an_older_epoch_before_the_newer_one_and_on_another_server_still_counts() -> None:
    """The new leader's first command to a server ends the old one's say over that server, not before."""
    st = cluster()
    st.evolve_all([load("old", "h1", 5, seg=0), load("new", "h1", 20, seg=1), load("other", "h2", 5, seg=2)])
    assert set(st.queue) == {"old", "new", "other"}


def test_commands_without_an_epoch_are_always_admitted() -> None:
    """The Spark balancer's commands carry no epoch: the fence never voids them."""
    st = cluster()
    st.evolve_all([load("new", "h1", 20, seg=0), load("spark", "h1", None, seg=1)])
    assert set(st.queue) == {"new", "spark"}


def test_a_void_load_half_abandons_its_move_so_the_source_keeps_its_copy() -> None:
    st = cluster()
    drop = env(DropSegment(command_id="m-d", server="h2", segment_id=str(POOL[1].id), stage="7", purpose="balancing",
                           reason="r", move_id="m", planner_epoch=5), "m-d", "h2")
    st.evolve_all([load("new", "h1", 20, seg=0), drop, load("m", "h1", 5, seg=1, move_id="m")])
    assert set(st.queue) == {"new"}
    assert st.move_abandoned("m")


def test_the_fold_of_a_deposed_planner_says_it_is_superseded() -> None:
    st = cluster()
    st.evolve(load("new", "h2", 20))
    assert fence.superseded(st.epochs, 5) and not fence.superseded(st.epochs, 20)
    assert not fence.superseded(st.epochs, None)


def test_the_marks_survive_the_store() -> None:
    st = cluster()
    st.evolve(load("new", "h1", 20))
    restored, _ = codec.restore([(f, k, v) for f, k, v in codec.entries(st) if v is not None])
    restored.evolve(load("zombie", "h1", 5, seg=1))
    assert restored.epochs == {"h1": 20} and set(restored.queue) == {"new"}


@settings(max_examples=200, deadline=None, derandomize=True)
@given(st.lists(st.tuples(st.sampled_from(["h1", "h2", "h3"]), st.sampled_from([None, 1, 2, 3, 4])), max_size=30),
       st.randoms(use_true_random=False))
def test_what_is_admitted_depends_on_each_servers_order_only(commands: list[tuple[str, int | None]],
                                                             rnd: object) -> None:
    """Oracle: a command is admitted iff its epoch is None or no earlier command to its server had a higher
    epoch. Interleaving the servers' streams differently (as partitions of ``commands`` do) admits the same."""
    def oracle(seq: list[tuple[int, str, int | None]]) -> set[int]:
        out = set()
        for i, (_, server, epoch) in enumerate(seq):
            before = [e for j, (_, s, e) in enumerate(seq[:i]) if s == server and e is not None]
            if epoch is None or all(epoch >= e for e in before):
                out.add(seq[i][0])
        return out

    numbered = [(i, s, e) for i, (s, e) in enumerate(commands)]
    shuffled = sorted(numbered, key=lambda c: (rnd.random(), c[0]))  # type: ignore[attr-defined]
    # keep each server's own order (one partition per server), interleave the servers at random
    by_server = {s: [c for c in numbered if c[1] == s] for s in ("h1", "h2", "h3")}
    interleaved = [by_server[s].pop(0) for _, s, _ in shuffled]
    for seq in (numbered, interleaved):
        marks: dict[str, int] = {}
        admitted = {i for i, s, e in seq if fence.admit(marks, s, e)}
        assert admitted == oracle(numbered)
