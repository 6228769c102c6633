"""Every adapter's view of placement equals the pure fold's, from the same random history.

The history (``history.py``: joins, leaves, crashes with work queued, refusals, early and late
answers, moves, cancels, duplicate command ids) is cut into batches; some events are delivered
twice (a redelivery after a crash). Adapters:

- **the planner agent** (``streaming/service/planner_agent.py``, a real RocksDB store, no Kafka):
  it folds each batch, plans, emits; what it emits is appended to the log right after the batch
  and read back in the next batch, as Kafka would deliver it. Its stored codec entries, restored,
  must equal a fresh ``PlacementState`` folded over the log it saw (inputs deduplicated by event
  id as the agent does; its own commands at the point it decided them; timer runs settling
  timed-out commands at the same points), entry for entry and index for index, and its stored
  settled ids must be the fold's;
- **replay** (``streaming/replay.py``, ``LogFold``): the same log, as ``segcoord replay`` reads it,
  gives the fresh fold's placement; when no timer run expired anything (timeouts are wall-clock,
  not in the log) it is the planner agent's placement too;
- the Spark balancer keeps the same fold in its state store; its restored-and-folded state is
  compared with the pure fold in ``tests/unit/balancer/test_adapter_properties.py``.

What a user would notice when this fails: ``segcoord replay`` shows a server, copy or command in
flight that the planner does not plan with (or the reverse), or the planner, restarted from its
store, plans from another placement than the one it had.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from coordinator.placement import codec
from coordinator.placement.liveness import unannounce_departed
from coordinator.placement.projected import snapshot
from coordinator.placement.state import PlacementState
from events.cluster import ServerLeft, ServerLost
from events.envelope import Envelope, encode
from events.registry import Event
from events.topics import COMMANDS, Topics
from streaming.replay import LogFold, LogRecord
from streaming.service.intake import InputRecord
from streaming.service.planner_agent import FORMAT_VERSION, PlannerAgent, load_state
from streaming.service.state import AgentStateStore
from tests.accepted import through_lockbox
from tests.unit.placement.history import history

EXAMPLES = int(os.environ.get("PLACEMENT_EXAMPLES", "100"))
TOPICS = Topics("p.")
LOAD_TIMEOUT_MS = 20 * 60_000


class Collect:
    """The agent's sink: what it emitted since the last take."""

    def __init__(self) -> None:
        self.sent: list[Envelope[Event]] = []

    def send(self, envelope: Envelope[Event]) -> None:
        self.sent.append(envelope)

    def flush(self) -> None:
        pass

    def take(self) -> list[Envelope[Event]]:
        out, self.sent = self.sent, []
        return out


@st.composite
def deliveries(draw: st.DrawFn) -> tuple[list[list[Envelope[Event]]], list[bool]]:
    """The history in batches (some events delivered again later), and after which batches the timer runs."""
    events = draw(history())
    again = draw(st.lists(st.integers(0, len(events) - 1), max_size=4))
    stream = list(events)
    for i in again:  # a redelivery, somewhere after the original
        stream.insert(draw(st.integers(i + 1, len(stream))), events[i])
    batches: list[list[Envelope[Event]]] = []
    while stream:
        n = draw(st.integers(1, 6))
        batches.append(stream[:n])
        stream = stream[n:]
    ticks = [draw(st.booleans()) and draw(st.booleans()) for _ in batches]
    return batches, ticks


class Log:
    """The log as Kafka would hold it: per topic, records in append order."""

    def __init__(self) -> None:
        self.records: list[LogRecord] = []
        self.offsets: dict[str, int] = {}

    def append(self, env: Envelope[Event]) -> InputRecord:
        topic = env.event.event_topic
        offset = self.offsets.get(topic, 0)
        self.offsets[topic] = offset + 1
        self.records.append(LogRecord(topic, 0, offset, env.occurred_at, env))
        return InputRecord(TOPICS.name(topic), 0, offset, env.key.encode(), encode(env), env.occurred_at)


class Oracle:
    """A fresh fold of what the agent saw: inputs once per event id (commands every time), decisions as sent."""

    def __init__(self) -> None:
        self.state = PlacementState(LOAD_TIMEOUT_MS)
        self.seen: set[str] = set()
        self.decided: set[str] = set()  # the unannounces of departed servers, folded where the agent decides them

    def input(self, env: Envelope[Event]) -> None:
        if env.event.event_topic != COMMANDS:
            if env.event_id in self.seen:
                return
            self.seen.add(env.event_id)
        self.state.evolve(env)
        if isinstance(env.event, ServerLeft | ServerLost):
            for unannounce in unannounce_departed(self.state, env):  # type: ignore[arg-type]
                self.state.evolve(unannounce)
                self.seen.add(unannounce.event_id)
                self.decided.add(unannounce.event_id)

    def decision(self, env: Envelope[Event]) -> None:
        """One event the agent emitted: folded now, unless the oracle decided it already. A ``ServerLost`` is
        not folded here: the agent folds its own ``server_lost`` only when it reads it back from ``cluster``,
        like any other server event (then :meth:`input` folds it, with the unannounces it causes)."""
        if env.event_id not in self.decided and not isinstance(env.event, ServerLost):
            self.state.evolve(env)


def _entries(state: PlacementState) -> list[codec.Entry]:
    return codec.entries(state)


@settings(max_examples=EXAMPLES, deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(deliveries())
def test_planner_store_and_replay_equal_the_pure_fold(case: tuple[list[list[Envelope[Event]]], list[bool]]) -> None:
    batches, ticks = case
    log, oracle, sink = Log(), Oracle(), Collect()
    read_back: list[InputRecord] = []  # the agent's output, delivered with the next batch
    expired_any = False
    with tempfile.TemporaryDirectory() as tmp, AgentStateStore(Path(tmp) / "planner", FORMAT_VERSION) as store:
        agent = PlannerAgent(store, TOPICS, sink, LOAD_TIMEOUT_MS, slice_draws=2)  # balancing runs span batches
        for batch, tick in zip(batches, ticks, strict=True):
            records = read_back + [log.append(env) for env in batch]
            for rec in records:
                oracle.input(_decode(rec))
            agent.process(records)
            read_back = []
            emitted = sink.take()
            for env in emitted:  # the batch's decisions, folded where the agent decided them
                oracle.decision(env)
            if tick:  # the timer: timed-out commands settle, then it plans
                now = max(agent.state.last_event_at, oracle.state.last_event_at)
                before = len(oracle.state.queue)
                oracle.state.expire(now)
                expired_any |= len(oracle.state.queue) < before
                agent.tick(now)
                if agent.balancing_in_progress:  # one more slice of the balancing run, between two batches
                    agent.balance_slice(now)
                for env in (timer := sink.take()):
                    oracle.decision(env)
                emitted += timer
            read_back = [log.append(env) for env in emitted]
        for _ in range(5):  # Kafka delivers the last decisions too (a server_lost is folded only when read back)
            if not read_back:
                break
            for rec in read_back:
                oracle.input(_decode(rec))
            agent.process(read_back)
            emitted = sink.take()
            for env in emitted:
                oracle.decision(env)
            read_back = [log.append(env) for env in emitted]
        assert not read_back, "reading back its own decisions did not settle"
        restored = load_state(store, LOAD_TIMEOUT_MS)
        settled = {k[len(b"ans/"):].decode() for k, _ in store.scan(b"ans/")}

    # the planner agent's store, restored, is the fold of what it saw
    got, want = _without_runs(_entries(restored)), _without_runs(_entries(oracle.state))
    assert got == want, (sorted(set(got) - set(want)), sorted(set(want) - set(got)))
    assert snapshot(restored) == snapshot(_fresh(oracle.state))
    assert settled == oracle.state.settled

    # replay of the log: the same fold, and the planner's placement when no timeout (wall-clock) intervened
    replayed = LogFold()
    for record in log.records:
        replayed.apply(record)
    pure = PlacementState()
    pure_seen: set[str] = set()
    for record in log.records:
        env = record.envelope
        if record.topic != COMMANDS and env.event_id in pure_seen:
            continue
        pure_seen.add(env.event_id)
        pure.evolve(env)
    assert _entries(replayed.placement) == _entries(pure)
    assert snapshot(replayed.placement) == snapshot(_fresh(pure))
    if not expired_any:
        assert _without_runs(_entries(replayed.placement)) == _without_runs(_entries(restored))
        placement = replayed.to_json()["placement"]
        assert isinstance(placement, dict)
        for name, facts in restored.servers.items():  # a server that left is still shown, with what it holds
            shown = placement[name]
            assert shown["joined"] == facts.joined
            assert shown["segments"] == sorted(str(s) for s in restored.held.get(name, ()))


def _decode(rec: InputRecord) -> Envelope[Event]:
    from events.envelope import decode

    assert rec.value is not None
    return decode(rec.value)


def _fresh(state: PlacementState) -> PlacementState:
    """The state without built cost caches (a restored state builds them on demand)."""
    fresh, _ = codec.restore((f, k, v) for f, k, v in codec.entries(state) if v is not None)
    return fresh


def _without_runs(entries: list[codec.Entry]) -> list[codec.Entry]:
    """The entries with the agent's own meta (its run counter) left out."""
    import orjson

    out: list[codec.Entry] = []
    for family, key, value in entries:
        if family == "meta" and value is not None:
            meta = orjson.loads(value)
            meta.pop("runs", None)
            value = orjson.dumps(meta)
        out.append((family, key, value))
    return out


def test_a_server_that_left_serves_nothing_in_replay_timeline_and_planner() -> None:
    """Issue 16: after ``server_left`` the planner kept the server's holdings and the timeline kept its segments
    served, while replay dropped the server. Now the planner unannounces what it held (on ``segments``), and
    the planner's store, replay's placement and replay's timeline all show the segment served by no one."""
    from events.cluster import ServerJoined, ServerLeft
    from events.schema import Instant
    from events.segments import SegmentAnnounced, SegmentsPublished, SegmentUnannounced
    from tests.unit.placement.history import POOL, T0

    seg = POOL[0]
    events: list[Envelope[Event]] = [
        Envelope(ServerJoined(server="h1", tier="hot", max_size_bytes=1000), "e0", Instant(T0), "h1"),
        through_lockbox(Envelope(SegmentsPublished(task_id="t", segments=(seg,)), "e1", Instant(T0), "wiki")),
        Envelope(SegmentAnnounced(server="h1", segment=seg), "e2", Instant(T0), "wiki"),
        Envelope(ServerLeft(server="h1"), "e3", Instant(T0 + 1), "h1")]
    sink = Collect()
    with tempfile.TemporaryDirectory() as tmp, AgentStateStore(Path(tmp) / "planner", FORMAT_VERSION) as store:
        agent = PlannerAgent(store, TOPICS, sink, LOAD_TIMEOUT_MS)
        log = Log()
        agent.process([log.append(env) for env in events])
        emitted = sink.take()
        agent.process([log.append(env) for env in emitted])  # read back: changes nothing
        planner = load_state(store, LOAD_TIMEOUT_MS)
    unannounced = [e for e in emitted if isinstance(e.event, SegmentUnannounced)]
    assert [(e.event.server, e.event.segment_id, e.event.reason, e.causation_id)  # type: ignore[attr-defined]
            for e in unannounced] == [("h1", str(seg.id), "server_left", "e3")]
    assert not planner.held.get("h1") and not planner.servers["h1"].joined
    fold = LogFold()
    for record in log.records:
        fold.apply(record)
    shown = fold.to_json()["placement"]
    assert isinstance(shown, dict)
    assert shown["h1"]["joined"] is False and shown["h1"]["segments"] == []
    assert fold.timelines.states() == {str(seg.id): "offline"}
