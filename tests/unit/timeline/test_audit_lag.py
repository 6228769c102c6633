"""Audit against a timeline agent that has not read the end of ``segments`` yet (a service stopped right after the
planner wrote its last unannounces): the real :class:`TimelineAgent` on a real RocksDB store folds a prefix of
the log, its output is appended as ``timeline`` records, and :func:`audit_records` checks the whole log.

What the agent has not read is lag (``behind``), not a violation; a change missing *before* what the agent
emitted on the same partition is still one.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

from events.cluster import ServerJoined
from events.envelope import Envelope, encode
from events.locks import SegmentsImported
from events.registry import Event
from events.schema import Instant
from events.segments import SegmentAnnounced, SegmentsPublished, SegmentUnannounced
from events.topics import TIMELINE
from streaming.replay import LogRecord, audit_records
from streaming.service.intake import InputRecord
from streaming.service.state import AgentStateStore
from streaming.service.timeline_agent import FORMAT_VERSION, TimelineAgent
from tests.accepted import through_lockbox
from tests.unit.placement.history import POOL, T0
from tests.unit.placement.test_adapters_agree import TOPICS, Collect, Log


def _env(event: Event, eid: str, at: int, key: str) -> Envelope[Event]:
    return Envelope(event, eid, Instant(at), key)


def _log() -> Log:
    """Two segments published and announced by h1, then the planner's unannounces of both (h1 left)."""
    a, b = POOL[0], POOL[1]
    log = Log()
    published = through_lockbox(_env(SegmentsPublished(task_id="t", segments=(a, b)), "p", T0, "wiki"))
    decision = published.event.decision_id  # type: ignore[attr-defined]
    for env in [
        _env(ServerJoined(server="h1", tier="_default_tier", max_size_bytes=10_000), "j1", T0, "h1"),
        _env(SegmentsImported(request_id="req-p", segments=(a, b), source="test"), decision, T0, "wiki"),
        published,
        _env(SegmentAnnounced(server="h1", segment=a), "a1", T0 + 1, "wiki"),
        _env(SegmentAnnounced(server="h1", segment=b), "a2", T0 + 2, "wiki"),
        _env(SegmentUnannounced(server="h1", segment_id=str(a.id), reason="server_left"), "u1", T0 + 3, "wiki"),
        _env(SegmentUnannounced(server="h1", segment_id=str(b.id), reason="server_left"), "u2", T0 + 4, "wiki"),
    ]:
        log.append(env)
    return log


def _agent_output(log: Log, read: int) -> list[Envelope[Event]]:
    """What the timeline agent emits having read the first ``read`` records of ``segments``."""
    inputs = [r for r in log.records if r.topic == "segments"][:read]
    with tempfile.TemporaryDirectory() as tmp, AgentStateStore(Path(tmp) / "t", FORMAT_VERSION) as store:
        sink = Collect()
        agent = TimelineAgent(store, TOPICS, sink)
        agent.process([InputRecord(TOPICS.name("segments"), r.partition, r.offset, r.envelope.key.encode(),
                                   encode(r.envelope), r.timestamp) for r in inputs])
        return sink.take()


def _with_timeline(log: Log, output: list[Envelope[Event]]) -> list[LogRecord]:
    at = max(r.timestamp for r in log.records)
    return log.records + [LogRecord(TIMELINE, 0, i, at, env) for i, env in enumerate(output)]


def test_the_agent_fully_caught_up_agrees_with_the_fold() -> None:
    log = _log()
    report = audit_records(_with_timeline(log, _agent_output(log, read=5)), TOPICS)
    assert report.violations == []
    assert report.behind == []


def test_unread_unannounces_at_the_end_are_lag_not_violations() -> None:
    log = _log()
    # the agent stopped before the last unannounce: the fold's visible -> offline of b is not emitted yet
    report = audit_records(_with_timeline(log, _agent_output(log, read=4)), TOPICS)
    assert report.violations == []
    assert len(report.behind) == 1
    # nor either unannounce
    report = audit_records(_with_timeline(log, _agent_output(log, read=3)), TOPICS)
    assert report.violations == []
    assert len(report.behind) == 2


def test_a_change_missing_before_what_the_agent_emitted_is_a_violation() -> None:
    log = _log()
    output = _agent_output(log, read=5)
    offline = [e for e in output if (e.event.from_state, e.event.to_state)  # type: ignore[attr-defined]
               == ("visible", "offline")]
    assert len(offline) == 2
    gap = [e for e in output if e is not offline[0]]  # the first unannounce's change dropped, the second kept
    report = audit_records(_with_timeline(log, gap), TOPICS)
    assert [v.rule for v in report.violations] == ["timeline change missing"]
    assert report.violations[0].at == offline[0].event_id
    assert report.behind == []
