"""The planner agent does not commit a batch that sent nothing and changed no stored entry (its own commands read
back): its offsets go with the next commit, and a restart from the store in between folds the re-read commands to
the same state."""

from __future__ import annotations

import tempfile
from pathlib import Path

from coordinator.placement import codec
from events.commands import LoadSegment
from events.envelope import Envelope
from events.registry import Event
from events.schema import Instant
from events.segments import SegmentAnnounced, SegmentsPublished
from events.topics import COMMANDS
from streaming.service.planner_agent import FORMAT_VERSION, PlannerAgent
from streaming.service.state import AgentStateStore
from tests.accepted import through_lockbox
from tests.unit.placement.history import POOL, T0
from tests.unit.placement.test_adapters_agree import TOPICS
from tests.unit.placement.test_liveness import Run, _cluster, _env

NEW = POOL[1]


def _commands_offset(store: AgentStateStore) -> int | None:
    return store.offsets().get((TOPICS.name(COMMANDS), 0))


def _entries(agent: PlannerAgent) -> list[codec.Entry]:
    """The agent's state as stored entries, its own meta (run counters) left out."""
    return [e for e in codec.entries(agent.state) if e[0] != "meta"]


def test_own_commands_read_back_wait_for_the_next_commit_and_a_restart_folds_them_again() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "planner"
        store = AgentStateStore(path, FORMAT_VERSION)
        run = Run(store)
        run.feed(_cluster())
        loads = run.feed([through_lockbox(_env(SegmentsPublished(task_id="t", segments=(NEW,)), "p2", T0 + 2000,
                                                "wiki"))])
        assert [type(e.event) for e in loads] == [LoadSegment]
        assert _commands_offset(store) is None  # nothing read from commands yet
        before = _entries(run.agent)

        readback = run.log.append(loads[0])
        run.agent.process([readback])  # the agent's own load read back: nothing new
        assert run.sink.take() == [] and _entries(run.agent) == before
        assert run.agent.next_offsets()[(TOPICS.name(COMMANDS), 0)] == 1
        assert _commands_offset(store) is None  # not committed on its own

        # a crash here: the restarted agent re-reads the load from the stored offsets and folds it to the same state
        store.close()
        store = AgentStateStore(path, FORMAT_VERSION)
        again = PlannerAgent(store, TOPICS, run.sink)
        assert again.next_offsets().get((TOPICS.name(COMMANDS), 0)) is None
        assert _entries(again) == before
        again.process([readback])  # the same record, as Kafka delivers it again
        assert run.sink.take() == [] and _entries(again) == before
        assert _commands_offset(store) is None

        # the announce answering it changes the state: committed, with the commands' offset that waited
        announce: Envelope[Event] = Envelope(SegmentAnnounced(server=loads[0].event.server, segment=NEW), "a2",
                                             Instant(T0 + 3000), "wiki", loads[0].event_id)
        again.process([run.log.append(announce)])
        assert run.sink.take() == [] and _commands_offset(store) == 1
        assert loads[0].event_id not in again.state.queue  # answered
        after = _entries(again)
        store.close()
        store = AgentStateStore(path, FORMAT_VERSION)
        assert _entries(PlannerAgent(store, TOPICS, run.sink)) == after
        store.close()


def test_the_commands_built_without_validation_are_those_the_validating_constructors_and_decode_give() -> None:
    """Loads and drops are built from the planner's own values without their validating __init__: each is the event
    its class builds from the same fields, and what it encodes to decodes (validated) back to it."""
    import dataclasses

    from events.commands import DropSegment
    from events.envelope import decode, encode

    with tempfile.TemporaryDirectory() as tmp, AgentStateStore(Path(tmp) / "planner", FORMAT_VERSION) as store:
        run = Run(store)
        run.feed(_cluster())
        run.feed([through_lockbox(_env(SegmentsPublished(task_id="t", segments=(NEW,)), "p2", T0 + 2000, "wiki"))])
        extra = _env(SegmentAnnounced(server="h2", segment=POOL[0]), "a-extra", T0 + 3000, "wiki")
        run.feed([extra])  # a second copy where the rule wants one: a drop
        commands = [e for e in run.emitted if isinstance(e.event, LoadSegment | DropSegment)]
        assert {type(e.event) for e in commands} == {LoadSegment, DropSegment}
        for env in commands:
            event = env.event
            fields = {f.name: getattr(event, f.name) for f in dataclasses.fields(event)}
            assert type(event)(**fields) == event
            assert decode(encode(env)) == env
