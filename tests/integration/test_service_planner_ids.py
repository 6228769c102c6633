"""The planner agent's command ids and cancels, driven directly (no broker) over a real RocksDB store.

The agent is transport-free (:meth:`PlannerAgent.process` takes raw records), so these tests feed it records
with made-up positions and collect what it sends. A "crash" is a sink whose ``flush`` raises after the
commands were handed over: :meth:`process` then never commits, exactly as a SIGKILL between the producer's
flush and the write batch leaves things (the commands are on the log, the store is at the previous batch).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from events import Envelope, Event, Interval, SegmentDescriptor, Topics, encode
from events.cluster import DynamicConfigSet, RulesSet, SegmentLoadRefused, ServerJoined
from events.commands import CancelSegmentLoad, DropSegment, LoadSegment
from events.schema import Instant
from events.segments import SegmentAnnounced, SegmentsPublished
from events.topics import CLUSTER, COMMANDS, SEGMENTS
from streaming.service.intake import InputRecord
from streaming.service.planner_agent import FORMAT_VERSION, PlannerAgent, command_id
from streaming.service.state import AgentStateStore
from tests.accepted import through_lockbox

T0 = 1_795_219_200_000
DAY = 86_400_000
TOPICS = Topics("ids.")
NO_BALANCING = {"smartSegmentLoading": False, "maxSegmentsToMove": 0}


def seg(d: int) -> SegmentDescriptor:
    return SegmentDescriptor("wiki", Interval(T0 + d * DAY, T0 + (d + 1) * DAY), "v1", 0, 1000)


class Sink:
    """Collects what the agent sends; ``crash`` makes the next flush fail (nothing is committed then)."""

    def __init__(self) -> None:
        self.sent: list[Envelope[Event]] = []
        self.crash = False

    def send(self, envelope: Envelope[Event]) -> None:
        self.sent.append(envelope)

    def flush(self, timeout: float = 30.0) -> None:
        if self.crash:
            self.crash = False
            raise RuntimeError("killed before the commit")

    def commands(self) -> list[Event]:
        return [e.event for e in self.sent if e.event.event_topic == COMMANDS]


class Log:
    """Records with positions, one partition per topic, in the order they are appended."""

    def __init__(self) -> None:
        self.next: dict[str, int] = {}

    def record(self, logical: str, env: Envelope[Event]) -> InputRecord:
        topic = TOPICS.name(logical)
        offset = self.next.get(topic, 0)
        self.next[topic] = offset + 1
        return InputRecord(topic, 0, offset, env.key.encode(), encode(env), T0)

    def event(self, event: Event, event_id: str, key: str, at: int = T0) -> InputRecord:
        return self.record(event.event_topic, through_lockbox(Envelope(event, event_id, Instant(at), key)))


def cluster(log: Log, servers: tuple[str, ...] = ("h1", "h2")) -> list[InputRecord]:
    out = [log.event(DynamicConfigSet(config=NO_BALANCING), "config", "config"),
           log.event(RulesSet(data_source="wiki", rules=({"type": "loadForever", "tieredReplicants": {"hot": 1}},)),
                     "rules", "rules/wiki")]
    out += [log.event(ServerJoined(server=s, tier="hot", max_size_bytes=10_000), f"join-{s}", s) for s in servers]
    return out


def agent(path: Path, sink: Sink) -> tuple[PlannerAgent, AgentStateStore]:
    store = AgentStateStore(path, FORMAT_VERSION)
    return PlannerAgent(store, TOPICS, sink), store


def stored(path: Path) -> dict[bytes, bytes]:
    """Everything the store holds but the plan-run counter, when balancing last began and the sweeps' counter and
    progress (how often and when it planned depend on the batch cuts)."""
    with AgentStateStore(path, FORMAT_VERSION) as store:
        out = dict(store.scan_raw(b""))
    import orjson

    meta = orjson.loads(out.pop(b"data/meta/"))
    scheduling = ("runs", "balancingRuns", "balancedAt", "sweeps", "sweep")
    out[b"data/meta/"] = orjson.dumps({k: v for k, v in meta.items() if k not in scheduling})
    return out


def test_the_same_decision_gets_the_same_ids_whatever_the_batch_cut(tmp_path: Path) -> None:
    log = Log()
    setup = cluster(log)
    publish = log.event(SegmentsPublished(task_id="t", segments=(seg(0), seg(1), seg(2))), "pub", "wiki")
    sinks = []
    # one batch ending on the publish, and one where a server's join comes last (another trigger position)
    for name, batch in (("a", [*setup, publish]), ("b", [*setup[:3], publish, setup[3]])):
        sink = Sink()
        a, store = agent(tmp_path / name, sink)
        a.process(batch)
        store.close()
        sinks.append(sink)
    loads = [sorted((c.server, c.segment.id, c.command_id) for c in s.commands() if isinstance(c, LoadSegment))
             for s in sinks]
    assert len(loads[0]) == 3 and loads[0] == loads[1]
    assert all(cid == command_id("load", server, str(sid), "0") for server, sid, cid in loads[0])
    assert all(e.event_id == e.event.command_id for s in sinks for e in s.sent  # type: ignore[attr-defined]
               if e.event.event_topic == COMMANDS)


def test_a_crash_before_the_commit_replans_under_the_same_ids_and_the_store_equals_a_fresh_fold(
        tmp_path: Path) -> None:
    log = Log()
    setup = cluster(log, ("h1",))  # one server: the re-plan must take the same decisions (on two it need not)
    publish = log.event(SegmentsPublished(task_id="t", segments=(seg(0), seg(1), seg(2))), "pub", "wiki")
    sink = Sink()
    a, store = agent(tmp_path / "live", sink)
    a.process(setup)
    sink.crash = True
    with pytest.raises(RuntimeError):
        a.process([publish])
    store.close()
    before = sink.commands()
    assert len(before) == 3
    # the commands reached the log; one was even answered before the restart
    on_log = [log.record(COMMANDS, e) for e in sink.sent]
    first = before[0]
    assert isinstance(first, LoadSegment)
    answer = log.record(SEGMENTS, Envelope(SegmentAnnounced(server=first.server, segment=first.segment), "ann-0",
                                           Instant(T0 + 5), "wiki", first.command_id))

    # restart: the same inputs, cut otherwise (the announce comes first), then the log's copies
    sink2 = Sink()
    a, store = agent(tmp_path / "live", sink2)
    a.process([publish, answer])
    again = sink2.commands()
    assert len(again) == 2 and {c.command_id for c in again} <= {c.command_id for c in before}  # type: ignore[attr-defined]
    on_log += [log.record(COMMANDS, e) for e in sink2.sent]
    a.process(on_log)
    assert sink2.commands() == again  # the copies read back decide nothing new
    answers = [log.record(SEGMENTS, Envelope(SegmentAnnounced(server=c.server, segment=c.segment),  # type: ignore[attr-defined]
                                             f"ann-{i}", Instant(T0 + 10), "wiki", c.command_id))  # type: ignore[attr-defined]
               for i, c in enumerate(before[1:], 1)]
    a.process(answers)
    assert a.state.queue == {} and sink2.commands() == again
    store.close()

    # a fresh agent folding the same log, in log order, in one batch: the same store (the run counter aside)
    fresh_sink = Sink()
    f, fstore = agent(tmp_path / "fresh", fresh_sink)
    f.process([*setup, publish, *on_log, answer, *answers])
    fstore.close()
    assert fresh_sink.commands() == []  # nothing left to decide
    assert stored(tmp_path / "fresh") == stored(tmp_path / "live")


def test_cancel_of_a_queued_load_and_the_next_load_of_the_same_copy(tmp_path: Path) -> None:
    log = Log()
    sink = Sink()
    a, store = agent(tmp_path / "s", sink)
    publish = log.event(SegmentsPublished(task_id="t", segments=(seg(0),)), "pub", "wiki")
    a.process([*cluster(log), publish])
    (load,) = sink.commands()
    assert isinstance(load, LoadSegment)
    sid = seg(0).id
    assert load.command_id == command_id("load", load.server, str(sid), "0")

    # the rule drops the data source before the load was answered: the queued load is cancelled, not dropped
    a.process([log.event(RulesSet(data_source="wiki", rules=({"type": "dropForever"},)), "drop-rule", "rules/wiki")])
    cancels = [c for c in sink.commands() if isinstance(c, CancelSegmentLoad)]
    assert [c for c in sink.commands() if isinstance(c, DropSegment)] == []
    assert len(cancels) == 1
    cancel = cancels[0]
    assert (cancel.server, cancel.segment_id, cancel.cancels) == (load.server, str(sid), load.command_id)
    assert cancel.command_id == command_id("cancel", load.command_id)
    assert a.state.queue == {}
    # the log's copies and the server's answer (a refusal of the load, caused by the cancel) change nothing
    refusal = SegmentLoadRefused(server=load.server, command_id=load.command_id, segment_id=str(sid),
                                 reason="cancelled: unused")
    a.process([*(log.record(COMMANDS, e) for e in sink.sent if e.event.event_topic == COMMANDS),
               log.record(CLUSTER, Envelope(refusal, "ref", Instant(T0), load.server, cancel.command_id))])
    assert a.state.queue == {}
    n_commands = len(sink.commands())

    # loaded again: the copy on the same server is a new command, so it gets the next count
    a.process([log.event(RulesSet(data_source="wiki", rules=(
        {"type": "loadForever", "tieredReplicants": {"hot": 1}},)), "load-rule", "rules/wiki"),
               log.event(SegmentsPublished(task_id="t2", segments=(seg(0),)), "pub-2", "wiki")])
    (reload,) = sink.commands()[n_commands:]
    assert isinstance(reload, LoadSegment)
    n = "1" if reload.server == load.server else "0"
    assert reload.command_id == command_id("load", reload.server, str(sid), n) != load.command_id
    store.close()


@pytest.mark.parametrize("balancing", [True, False])
def test_balancing_runs_on_the_timer_and_on_cluster_changes_never_after_publishes_alone(
        tmp_path: Path, balancing: bool) -> None:
    """Publishes and announces get their loads at once but no moves; a server joining (a cluster change)
    or the timer balances; with ``balancing=False`` (the Spark balancer's job) nothing ever moves."""
    log, sink = Log(), Sink()
    store = AgentStateStore(tmp_path / "planner", FORMAT_VERSION)
    planner = PlannerAgent(store, TOPICS, sink, balancing=balancing)
    moves = {"smartSegmentLoading": False, "maxSegmentsToMove": 50, "maxSegmentsInNodeLoadingQueue": 100}
    setup = [log.event(DynamicConfigSet(config=moves), "config", "config"),
             log.event(RulesSet(data_source="wiki",
                                rules=({"type": "loadForever", "tieredReplicants": {"hot": 1}},)),
                       "rules", "rules/wiki"),
             log.event(ServerJoined(server="h1", tier="hot", max_size_bytes=10**9), "join-h1", "h1")]
    segs = [seg(d) for d in range(12)]
    setup.append(log.event(SegmentsPublished(task_id="t", segments=tuple(segs)), "pub", "wiki"))
    planner.process(setup)
    assert sorted(c.segment.id for c in sink.commands() if isinstance(c, LoadSegment)) == sorted(s.id for s in segs)
    planner.process([log.event(SegmentAnnounced(server="h1", segment=s), f"ann-{i}", "wiki")
                     for i, s in enumerate(segs)])
    # a second server: a cluster change, so that batch balances (when the planner owns balancing)
    sink.sent.clear()
    planner.process([log.event(ServerJoined(server="h2", tier="hot", max_size_bytes=10**9), "join-h2", "h2")])
    moved = [c for c in sink.commands() if isinstance(c, LoadSegment) and c.move_id is not None]
    assert (len(moved) > 0) == balancing
    # new publishes alone: loads at once, no moves in that batch
    sink.sent.clear()
    more = [seg(d) for d in range(12, 16)]
    planner.process([log.event(SegmentsPublished(task_id="t", segments=tuple(more)), "pub2", "wiki")])
    loads = [c for c in sink.commands() if isinstance(c, LoadSegment)]
    assert sorted(c.segment.id for c in loads) == sorted(s.id for s in more)
    assert all(c.move_id is None for c in loads)
    # the timer balances (or, with balancing off, does nothing but what loading asks)
    sink.sent.clear()
    planner.tick(T0 + DAY)
    timer_moves = [c for c in sink.commands() if isinstance(c, LoadSegment) and c.move_id is not None]
    if not balancing:
        assert timer_moves == []
    store.close()


# -- balancing: once per coordinator period, in slices between events ------------------------------------------
BALANCING = {"smartSegmentLoading": False, "maxSegmentsToMove": 5, "maxSegmentsInNodeLoadingQueue": 100}


def loaded_on_h1(log: Log, n: int) -> list[InputRecord]:
    """One server holding ``n`` segments (published, loaded and announced), balancing allowed 5 moves a run."""
    segs = [seg(d) for d in range(n)]
    return [log.event(DynamicConfigSet(config=BALANCING), "config", "config"),
            log.event(RulesSet(data_source="wiki", rules=({"type": "loadForever", "tieredReplicants": {"hot": 1}},)),
                      "rules", "rules/wiki"),
            log.event(ServerJoined(server="h1", tier="hot", max_size_bytes=10**9), "join-h1", "h1"),
            log.event(SegmentsPublished(task_id="t", segments=tuple(segs)), "pub", "wiki"),
            *(log.event(SegmentAnnounced(server="h1", segment=s), f"ann-{i}", "wiki") for i, s in enumerate(segs))]


def moves_in(sink: Sink) -> list[str]:
    return [c.command_id for c in sink.commands() if isinstance(c, LoadSegment) and c.move_id is not None]


def test_a_publish_during_a_long_balancing_run_is_planned_before_the_run_ends(tmp_path: Path) -> None:
    """A server joining starts a balancing run; the run goes on in slices of one candidate, and a publish that
    arrives meanwhile gets its load in its own batch, while the run still has slices left (event order, not
    time); the run then makes its moves, within maxSegmentsToMove."""
    log, sink = Log(), Sink()
    store = AgentStateStore(tmp_path / "planner", FORMAT_VERSION)
    planner = PlannerAgent(store, TOPICS, sink, slice_draws=1)
    planner.process(loaded_on_h1(log, 20))
    planner.process([log.event(ServerJoined(server="h2", tier="hot", max_size_bytes=10**9), "join-h2", "h2")])
    assert planner.balancing_in_progress and len(moves_in(sink)) == 1  # the first slice: one candidate, moved
    planner.process([log.event(SegmentsPublished(task_id="t", segments=(seg(30),)), "pub-late", "wiki")])
    late = [c for c in sink.commands() if isinstance(c, LoadSegment) and c.segment.id == seg(30).id]
    assert len(late) == 1 and late[0].move_id is None
    assert planner.balancing_in_progress and len(moves_in(sink)) == 1  # planned before the run's next slice
    slices = 0
    while planner.balancing_in_progress:
        planner.balance_slice(T0)
        slices += 1
    moves = moves_in(sink)
    assert len(moves) == 5 and slices >= 4  # maxSegmentsToMove, one candidate per slice
    sent = [e.event for e in sink.sent if e.event.event_topic == COMMANDS]
    assert sent.index(late[0]) < max(i for i, c in enumerate(sent) if isinstance(c, LoadSegment) and c.move_id)
    store.close()


def test_balancing_runs_once_per_coordinator_period(tmp_path: Path) -> None:
    """After a run ends, timer runs within the period balance nothing; the first one a period later balances."""
    log, sink = Log(), Sink()
    store = AgentStateStore(tmp_path / "planner", FORMAT_VERSION)
    planner = PlannerAgent(store, TOPICS, sink, period_ms=60_000)
    planner.process(loaded_on_h1(log, 40))
    planner.process([log.event(ServerJoined(server="h2", tier="hot", max_size_bytes=10**9), "join-h2", "h2")])
    while planner.balancing_in_progress:
        planner.balance_slice(T0)
    assert len(moves_in(sink)) == 5
    for wall in (T0 + 1_000, T0 + 30_000, T0 + 59_999):
        planner.tick(wall)
        while planner.balancing_in_progress:
            planner.balance_slice(wall)
    assert len(moves_in(sink)) == 5  # within the period: no second run
    planner.tick(T0 + 60_000)
    while planner.balancing_in_progress:
        planner.balance_slice(T0 + 60_000)
    assert len(moves_in(sink)) == 10  # a period later: the next run
    store.close()


def test_a_restart_resumes_the_balancing_run_under_its_run_number_and_makes_the_same_moves(tmp_path: Path) -> None:
    """A run interrupted by a restart resumes from the store with its run number (the same seeded draws) and the
    moves it made counted: it ends with the moves, and the ids, of a run that was never interrupted."""
    def start(path: Path, sink: Sink) -> tuple[PlannerAgent, AgentStateStore]:
        store = AgentStateStore(path, FORMAT_VERSION)
        return PlannerAgent(store, TOPICS, sink, slice_draws=1), store

    log = Log()
    history = [*loaded_on_h1(log, 40),
               log.event(ServerJoined(server="h2", tier="hot", max_size_bytes=10**9), "join-h2", "h2")]
    whole = Sink()
    a, store = start(tmp_path / "whole", whole)
    a.process(history[:-1])
    a.process(history[-1:])
    while a.balancing_in_progress:
        a.balance_slice(T0)
    store.close()

    cut = Sink()
    b, store = start(tmp_path / "cut", cut)
    b.process(history[:-1])
    b.process(history[-1:])
    b.balance_slice(T0)
    store.close()
    b, store = start(tmp_path / "cut", cut)
    assert b.balancing_in_progress
    while b.balancing_in_progress:
        b.balance_slice(T0)
    store.close()
    assert len(moves_in(whole)) == 5 and moves_in(cut) == moves_in(whole)
