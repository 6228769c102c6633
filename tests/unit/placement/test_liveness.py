"""Historical liveness, given / when / then: heartbeats, the ``server_lost`` decision, and what follows it.

The planner agent runs on a real RocksDB store with a sink that collects what it emits; what it emits is
read back in the next batch, as Kafka would deliver it. Replay (``LogFold``) of the resulting log must show
the same placement and a timeline where a segment served only by the lost server went offline and came
back once another server announced it.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

from events.cluster import ServerHeartbeat, ServerJoined, ServerLost
from events.commands import LoadSegment
from events.envelope import Envelope
from events.registry import Event
from events.schema import Instant
from events.segments import SegmentAnnounced, SegmentsPublished, SegmentUnannounced
from streaming.replay import LogFold
from streaming.service.planner_agent import FORMAT_VERSION, PlannerAgent, load_state
from streaming.service.state import AgentStateStore
from tests.accepted import through_lockbox
from tests.unit.placement.history import POOL, T0
from tests.unit.placement.test_adapters_agree import TOPICS, Collect, Log

TIMEOUT = 30_000
SEG = POOL[0]
ONE_REPLICA = {"type": "loadForever", "tieredReplicants": {"_default_tier": 1}}


def _env(event: Event, eid: str, at: int, key: str) -> Envelope[Event]:
    return Envelope(event, eid, Instant(at), key)


def _cluster() -> list[Envelope[Event]]:
    from events.cluster import RulesSet

    return [
        _env(RulesSet(data_source="_default", rules=(ONE_REPLICA,)), "r", T0, "rules/_default"),
        _env(ServerJoined(server="h1", tier="_default_tier", max_size_bytes=10_000), "j1", T0, "h1"),
        _env(ServerJoined(server="h2", tier="_default_tier", max_size_bytes=10_000), "j2", T0, "h2"),
        through_lockbox(_env(SegmentsPublished(task_id="t", segments=(SEG,)), "p", T0, "wiki")),
        _env(SegmentAnnounced(server="h1", segment=SEG), "a1", T0 + 1000, "wiki"),
    ]


class Run:
    """The agent, its sink and the log it reads (its own output appended after each batch)."""

    def __init__(self, store: AgentStateStore) -> None:
        self.sink, self.log = Collect(), Log()
        self.agent = PlannerAgent(store, TOPICS, self.sink, server_timeout_ms=TIMEOUT)
        self.emitted: list[Envelope[Event]] = []

    def feed(self, events: list[Envelope[Event]]) -> list[Envelope[Event]]:
        self.agent.process([self.log.append(e) for e in events])
        out = self.sink.take()
        self.emitted += out
        return out

    def tick(self, wall: int) -> list[Envelope[Event]]:
        self.agent.tick(wall)
        out = self.sink.take()
        self.emitted += out
        return out

    def replay(self) -> LogFold:
        fold = LogFold()
        for record in self.log.records:
            fold.apply(record)
        return fold


def test_a_heartbeat_is_heard_and_plans_nothing() -> None:
    with tempfile.TemporaryDirectory() as tmp, AgentStateStore(Path(tmp) / "p", FORMAT_VERSION) as store:
        run = Run(store)
        run.feed(_cluster())
        run.feed(run.sink.take())
        out = run.feed([_env(ServerHeartbeat(server="h2"), "hb", T0 + 5000, "h2")])
        assert out == []
        assert run.agent.state.last_heard == {"h1": T0 + 1000, "h2": T0 + 5000}
        assert load_state(store).last_heard == {"h1": T0 + 1000, "h2": T0 + 5000}


def test_a_silent_server_is_lost_once_its_segment_goes_offline_and_is_loaded_elsewhere() -> None:
    with tempfile.TemporaryDirectory() as tmp, AgentStateStore(Path(tmp) / "p", FORMAT_VERSION) as store:
        run = Run(store)
        run.feed(_cluster())
        assert run.tick(T0 + 2000) == []  # the agent's first tick: it waits a timeout before deciding anyone lost
        run.feed([_env(ServerHeartbeat(server="h2"), "hb1", T0 + 30_000, "h2")])
        # given h1 silent since T0 + 1000 and h2 heard at T0 + 30 000, when the timer runs at T0 + 32 001
        lost = run.tick(T0 + 32_001)
        # then h1, and only h1, is decided lost, once
        assert [(e.event.server, e.event.last_heard_at, e.key) for e in lost  # type: ignore[attr-defined]
                ] == [("h1", T0 + 1000, "h1")]
        assert run.tick(T0 + 33_000) == []
        # when the decision is read back: h1's segment is unannounced and loaded on h2 in the same batch
        after = run.feed(lost)
        unannounced = [e for e in after if isinstance(e.event, SegmentUnannounced)]
        loads = [e.event for e in after if isinstance(e.event, LoadSegment)]
        assert [(e.event.server, e.event.reason, e.causation_id) for e in unannounced  # type: ignore[attr-defined]
                ] == [("h1", "server_lost", lost[0].event_id)]
        assert [(ld.server, ld.segment.id) for ld in loads] == [("h2", SEG.id)]
        assert run.feed(after) == []  # read back: nothing new
        fold = run.replay()
        assert fold.timelines.states() == {str(SEG.id): "offline"}
        # h2 announces it: visible again, and replay and the planner agree on who holds what
        run.feed([_env(SegmentAnnounced(server="h2", segment=SEG), "a2", T0 + 34_000, "wiki")])
        fold = run.replay()
        assert fold.timelines.states() == {str(SEG.id): "visible"}
        assert {n: sorted(map(str, s)) for n, s in run.agent.state.held.items() if s} == \
            {n: sorted(map(str, s)) for n, s in fold.placement.held.items() if s} == {"h2": [str(SEG.id)]}
        assert not run.agent.state.servers["h1"].joined and not fold.placement.servers["h1"].joined


def test_the_same_silence_gets_the_same_id_and_a_new_silence_a_new_one() -> None:
    from coordinator.placement.liveness import server_lost
    from coordinator.placement.state import PlacementState

    st = PlacementState()
    for env in _cluster():
        st.evolve(env)
    first = server_lost(st, "h1", T0 + 40_000, TIMEOUT)
    assert first.event_id == server_lost(st, "h1", T0 + 90_000, TIMEOUT).event_id
    st.evolve(_env(ServerHeartbeat(server="h1"), "hb", T0 + 50_000, "h1"))
    assert server_lost(st, "h1", T0 + 90_000, TIMEOUT).event_id != first.event_id


def test_a_lost_server_that_joins_and_announces_again_serves_again() -> None:
    with tempfile.TemporaryDirectory() as tmp, AgentStateStore(Path(tmp) / "p", FORMAT_VERSION) as store:
        run = Run(store)
        run.feed(_cluster())
        lost = _env(ServerLost(server="h1", last_heard_at=T0 + 1000, server_timeout_millis=TIMEOUT), "lost",
                    T0 + 40_000, "h1")
        after = run.feed([lost])
        run.feed([*after,
                  _env(ServerJoined(server="h1", tier="_default_tier", max_size_bytes=10_000), "j1b", T0 + 41_000,
                       "h1"),
                  _env(SegmentAnnounced(server="h1", segment=SEG), "a1b", T0 + 41_000, "wiki")])
        fold = run.replay()
        assert fold.timelines.states() == {str(SEG.id): "visible"}
        assert run.agent.state.servers["h1"].joined and SEG.id in run.agent.state.held["h1"]
        assert run.agent.state.last_heard["h1"] == T0 + 41_000


def test_an_announce_read_after_server_lost_does_not_count_until_the_server_joins_again() -> None:
    """Druid: a server must re-join before its announces count. The dead server's last announce, read after its
    ``server_lost``, is not held and is unannounced on ``segments``; replay agrees with the live planner."""
    seg2 = POOL[1]
    with tempfile.TemporaryDirectory() as tmp, AgentStateStore(Path(tmp) / "p", FORMAT_VERSION) as store:
        run = Run(store)
        run.feed([*_cluster(), through_lockbox(_env(SegmentsPublished(task_id="t2", segments=(seg2,)), "p2", T0,
                                                    "wiki"))])
        run.feed(run.sink.take())
        lost = _env(ServerLost(server="h1", last_heard_at=T0 + 1000, server_timeout_millis=TIMEOUT), "lost",
                    T0 + 40_000, "h1")
        after = run.feed([lost])
        late = _env(SegmentAnnounced(server="h1", segment=seg2), "late", T0 + 39_000, "wiki")
        out = run.feed([*after, late])
        stale = [e for e in out if isinstance(e.event, SegmentUnannounced)]
        assert [(e.event.server, e.event.segment_id, e.event.reason, e.causation_id)  # type: ignore[attr-defined]
                for e in stale] == [("h1", str(seg2.id), "server_not_joined", "late")]
        assert seg2.id not in run.agent.state.held.get("h1", set())
        assert not [e for e in run.feed(out) if isinstance(e.event, SegmentUnannounced)]  # read back: nothing new
        fold = run.replay()
        assert fold.timelines.states()[str(seg2.id)] != "visible"  # the timeline does not show h1 serving it
        assert "h1" not in fold.timelines.timeline("wiki").servers(seg2.id)
        assert {n: sorted(map(str, s)) for n, s in run.agent.state.held.items() if s} == \
            {n: sorted(map(str, s)) for n, s in fold.placement.held.items() if s}
        # the same decision again (a restart re-reading the announce) has the same id
        from coordinator.placement.liveness import unannounce_not_joined
        again = unannounce_not_joined(run.agent.state, late)
        assert again is not None and again.event_id == stale[0].event_id
        # once h1 joins again, its announce counts
        run.feed([_env(ServerJoined(server="h1", tier="_default_tier", max_size_bytes=10_000), "j1b", T0 + 41_000,
                       "h1"),
                  _env(SegmentAnnounced(server="h1", segment=seg2), "a2b", T0 + 41_500, "wiki")])
        assert seg2.id in run.agent.state.held["h1"]
        fold = run.replay()
        assert "h1" in fold.timelines.timeline("wiki").servers(seg2.id)
        assert {n: sorted(map(str, s)) for n, s in run.agent.state.held.items() if s} == \
            {n: sorted(map(str, s)) for n, s in fold.placement.held.items() if s}


def _catch_up(records: list[Envelope[Event]], tmp: Path) -> tuple[Run, list[Envelope[Event]]]:
    """A newly elected planner with a fresh store folding ``records`` (its predecessor's log) in one catch-up, as
    the planner feed runs it: planning off, then :meth:`PlannerAgent.finish_catch_up`. Returns it and what it sent
    while catching up."""
    store = AgentStateStore(tmp / "successor", FORMAT_VERSION)
    successor = Run(store)
    successor.agent.catching_up = True
    during = successor.feed(records)
    return successor, during


def test_a_new_leader_catching_up_does_not_send_again_what_its_predecessor_sent() -> None:
    """Soak run 4: a worker elected to plan folded its stale store up to the log's end and, on each ``server_lost``
    it read, sent the unannounces of the lost server's segments again under the predecessor's ids, minutes later.
    A timeline whose applied-id window had let the originals go applied them again and took offline a segment
    the server had announced again since it rejoined. Catching up, the successor now sends none of them: the
    log already holds the originals, and the server's later announce."""
    with tempfile.TemporaryDirectory() as tmp, AgentStateStore(Path(tmp) / "p", FORMAT_VERSION) as store:
        old = Run(store)
        old.feed(_cluster())
        old.feed(old.sink.take())
        lost = _env(ServerLost(server="h1", last_heard_at=T0 + 1000, server_timeout_millis=TIMEOUT), "lost",
                    T0 + 40_000, "h1")
        after = old.feed([lost])
        assert [e.event.server for e in after if isinstance(e.event, SegmentUnannounced)] == ["h1"]
        old.feed([*after,
                  _env(ServerJoined(server="h1", tier="_default_tier", max_size_bytes=10_000), "j1b", T0 + 41_000,
                       "h1"),
                  _env(SegmentAnnounced(server="h1", segment=SEG), "a1b", T0 + 41_500, "wiki")])
        log = [r.envelope for r in old.log.records]
        successor, during = _catch_up(log, Path(tmp))
        try:
            assert [e for e in during if isinstance(e.event, SegmentUnannounced)] == []
            assert successor.agent.finish_catch_up() == 0 and successor.sink.take() == []
            assert SEG.id in successor.agent.state.held["h1"] and successor.agent.state.servers["h1"].joined
            assert {n: sorted(map(str, s)) for n, s in successor.agent.state.held.items() if s} == \
                {n: sorted(map(str, s)) for n, s in old.agent.state.held.items() if s}
        finally:
            successor.agent.store.close()


def test_a_new_leader_catching_up_sends_the_unannounces_its_predecessor_never_sent() -> None:
    """The predecessor died after ``server_lost`` reached the log and before it folded it: nobody unannounced the
    lost server's segment. The successor sends that unannounce once its catch-up ends, under the id the predecessor
    would have used, and the timeline shows the segment offline."""
    from coordinator.placement.projected import command_id

    with tempfile.TemporaryDirectory() as tmp:
        lost = _env(ServerLost(server="h1", last_heard_at=T0 + 1000, server_timeout_millis=TIMEOUT), "lost",
                    T0 + 40_000, "h1")
        successor, during = _catch_up([*_cluster(), lost], Path(tmp))
        try:
            assert [e for e in during if isinstance(e.event, SegmentUnannounced)] == []
            assert successor.agent.finish_catch_up() == 1
            sent = successor.sink.take()
            once = command_id("unannounce", "lost", str(SEG.id))  # the predecessor's id for it
            assert [(e.event.server, e.event.segment_id, e.event.reason, e.event_id)  # type: ignore[attr-defined]
                    for e in sent] == [("h1", str(SEG.id), "server_lost", once)]
            assert SEG.id not in successor.agent.state.held.get("h1", set())
            assert successor.agent.finish_catch_up() == 0  # once
            successor.feed(sent)  # read back: applied already
            fold = successor.replay()
            assert fold.timelines.states() == {str(SEG.id): "offline"}
        finally:
            successor.agent.store.close()


def test_a_catch_up_cut_short_after_a_departure_leaves_its_unannounces_to_the_next_one() -> None:
    """The successor folded the ``server_lost`` (its batch committed, offsets past it) and was killed before its
    catch-up ended: what it deferred is gone with the process. Restarted on the same store, it has nothing left to
    fold, and when it has caught up it unannounces what the fold still shows the lost server holding."""
    with tempfile.TemporaryDirectory() as tmp:
        lost = _env(ServerLost(server="h1", last_heard_at=T0 + 1000, server_timeout_millis=TIMEOUT), "lost",
                    T0 + 40_000, "h1")
        successor, during = _catch_up([*_cluster(), lost], Path(tmp))
        assert during == []
        store, log = successor.agent.store, successor.log
        restarted = Run(store)  # the same store, the commits of the cut-short catch-up in it
        restarted.log = log
        assert SEG.id in restarted.agent.state.held["h1"] and not restarted.agent.state.servers["h1"].joined
        try:
            assert restarted.agent.finish_catch_up() == 1
            sent = restarted.sink.take()
            assert [(e.event.server, e.event.segment_id, e.event.reason)  # type: ignore[attr-defined]
                    for e in sent] == [("h1", str(SEG.id), "server_not_joined")]
            assert restarted.agent.finish_catch_up() == 0  # once
            restarted.feed(sent)
            assert restarted.replay().timelines.states() == {str(SEG.id): "offline"}
        finally:
            store.close()
