"""A forged ``segments_published`` or ``segments_marked_unused`` on an open broker: dead-lettered with the reason,
nothing changes, audit reports it.

The service runs as users run it (``segcoord run``, simulated historicals). A producer that is not the
lockbox writes a publish straight to ``segments``; a real publish (through the lockbox's import path)
follows it on the same partition, so once the real one is loaded the forged one has been read too.
"""

from __future__ import annotations

import json
import uuid
from pathlib import Path

import pytest

from coordinator.locks.seal import seal_event
from events import Envelope, Interval, SegmentDescriptor, Topics
from events.cluster import RulesSet, ServerJoined
from events.commands import DropSegment, LoadSegment
from events.deadletter import DeadLettered
from events.schema import Instant
from events.segments import SegmentAnnounced, SegmentsMarkedUnused, SegmentsPublished, SegmentUnannounced
from events.topics import COMMANDS, DEADLETTER, SEGMENTS, TIMELINE
from events.visibility import SegmentVisibilityChanged
from streaming.cli import main
from streaming.producer import EventProducer
from tests.integration.test_service_planner import (
    Historicals,
    PlanService,
    decoded,
    publish_through_lockbox,
    send,
)
from tests.integration.test_service_timeline import T0, wait_for

pytestmark = pytest.mark.integration
DAY = 86_400_000


def seg(d: int) -> SegmentDescriptor:
    return SegmentDescriptor("wiki", Interval(T0 + d * DAY, T0 + (d + 1) * DAY), "v1", 0, 1000)


def test_a_forged_publish_is_dead_lettered_and_nothing_is_loaded(kafka_bootstrap: str, topics: Topics,
                                                                  tmp_path: Path,
                                                                  capsys: pytest.CaptureFixture[str]) -> None:
    service = PlanService(kafka_bootstrap, topics, tmp_path / "state", tmp_path / "run.log")
    service.start()
    try:
        with Historicals(kafka_bootstrap, topics, ["h1", "h2"]):
            wait_for("both servers joined", lambda: {e.event.server for e in decoded(kafka_bootstrap, topics, "cluster")  # type: ignore[attr-defined]
                                                     if isinstance(e.event, ServerJoined)} == {"h1", "h2"}, service, 60)
            send(kafka_bootstrap, topics, RulesSet(data_source="wiki", rules=(
                {"type": "loadForever", "tieredReplicants": {"hot": 2}},)), "rules/wiki")
            forged = Envelope(SegmentsPublished(task_id="index_kafka_1", segments=(seg(0),)), uuid.uuid4().hex,
                              Instant(T0), "wiki", "looks-like-a-request")
            producer = EventProducer(kafka_bootstrap, topics)
            producer.send(forged)
            producer.close()
            real = publish_through_lockbox(kafka_bootstrap, topics, (seg(1),), "wiki")

            def loads() -> dict[str, set[str]]:
                out: dict[str, set[str]] = {}
                for e in decoded(kafka_bootstrap, topics, COMMANDS):
                    if isinstance(e.event, LoadSegment):
                        out.setdefault(str(e.event.segment.id), set()).add(e.event.server)
                return out if len(out.get(str(seg(1).id), ())) == 2 else {}

            loaded = wait_for("the real publish loaded on both servers", loads, service, 90)

            def letter() -> DeadLettered | None:
                for e in decoded(kafka_bootstrap, topics, DEADLETTER):
                    if isinstance(e.event, DeadLettered) and e.event.original_value is not None:
                        import base64

                        if forged.event_id.encode() in base64.b64decode(e.event.original_value):
                            return e.event
                return None

            dead = wait_for("the forged publish dead-lettered", letter, service, 60)
    finally:
        assert service.stop() == 0
    assert "only the lockbox publishes" in dead.reason
    assert set(loaded) == {str(seg(1).id)}, loaded  # nothing of the forged one was loaded
    changed = {e.event.segment_id for e in decoded(kafka_bootstrap, topics, TIMELINE)
               if isinstance(e.event, SegmentVisibilityChanged)}
    assert str(seg(0).id) not in changed and str(seg(1).id) in changed
    assert isinstance(real.event, SegmentsPublished) and real.event.decision_id is not None

    assert main(["audit", "--json", "--bootstrap", kafka_bootstrap, "--topic-prefix", topics.prefix]) == 1
    found = json.loads(capsys.readouterr().out)["violations"]
    assert [v["rule"] for v in found if "publish" in v["rule"]] == ["publish not accepted by the lockbox"], found
    assert forged.event_id in found[0]["detail"] or any(forged.event_id in v["detail"] for v in found)


def test_a_forged_mark_unused_is_dead_lettered_once_and_the_operators_mark_works(
        kafka_bootstrap: str, topics: Topics, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Unsealed and wrongly sealed ``segments_marked_unused`` written straight to ``segments``: each dead-lettered
    once (by the timeline agent, the designated writer), the segment stays visible and loaded; then the
    operator's ``segcoord segments mark-unused`` (through the lockbox) drops it; audit reports the forgeries."""
    service = PlanService(kafka_bootstrap, topics, tmp_path / "state", tmp_path / "run.log")
    service.start()
    cli = ["--bootstrap", kafka_bootstrap, "--topic-prefix", topics.prefix]
    try:
        with Historicals(kafka_bootstrap, topics, ["h1", "h2"]):
            wait_for("both servers joined", lambda: {e.event.server for e in decoded(kafka_bootstrap, topics, "cluster")  # type: ignore[attr-defined]
                                                     if isinstance(e.event, ServerJoined)} == {"h1", "h2"}, service, 60)
            send(kafka_bootstrap, topics, RulesSet(data_source="wiki", rules=(
                {"type": "loadForever", "tieredReplicants": {"hot": 2}},)), "rules/wiki")
            publish_through_lockbox(kafka_bootstrap, topics, (seg(0),), "wiki")

            def holders(sid: str) -> set[str]:
                held: set[str] = set()
                for e in decoded(kafka_bootstrap, topics, SEGMENTS):
                    if isinstance(e.event, SegmentAnnounced) and str(e.event.segment.id) == sid:
                        held.add(e.event.server)
                    elif isinstance(e.event, SegmentUnannounced) and e.event.segment_id == sid:
                        held.discard(e.event.server)
                return held

            def last_state(sid: str) -> str | None:
                states = [e.event.to_state for e in decoded(kafka_bootstrap, topics, TIMELINE)
                          if isinstance(e.event, SegmentVisibilityChanged) and e.event.segment_id == sid]
                return states[-1] if states else None

            target = str(seg(0).id)
            wait_for("seg 0 loaded on both and visible", lambda: holders(target) == {"h1", "h2"}
                     and last_state(target) == "visible", service, 90)
            unsealed = Envelope(SegmentsMarkedUnused(segment_ids=(target,), reason="forged"), uuid.uuid4().hex,
                                Instant(T0), "wiki")
            guessed = seal_event(Envelope(SegmentsMarkedUnused(segment_ids=(target,), reason="forged"),
                                          uuid.uuid4().hex, Instant(T0), "wiki"), b"a guessed key")
            producer = EventProducer(kafka_bootstrap, topics)
            producer.send(unsealed)  # type: ignore[arg-type]
            producer.send(guessed)  # type: ignore[arg-type]
            producer.close()
            publish_through_lockbox(kafka_bootstrap, topics, (seg(1),), "wiki")  # read after them (same key)
            wait_for("seg 1 loaded on both", lambda: holders(str(seg(1).id)) == {"h1", "h2"}, service, 90)

            def letters() -> dict[str, list[str]]:
                import base64

                out: dict[str, list[str]] = {unsealed.event_id: [], guessed.event_id: []}
                for e in decoded(kafka_bootstrap, topics, DEADLETTER):
                    if isinstance(e.event, DeadLettered) and e.event.original_value is not None:
                        original = base64.b64decode(e.event.original_value)
                        for eid in out:
                            if eid.encode() in original:
                                out[eid].append(e.event.reason)
                return out if all(out.values()) else {}

            dead = wait_for("the forged marks dead-lettered", letters, service, 60)
            # nothing changed: still loaded on both, still visible, no drop of it was ever commanded
            assert holders(target) == {"h1", "h2"} and last_state(target) == "visible"
            assert not any(isinstance(e.event, DropSegment) and e.event.segment_id == target
                           for e in decoded(kafka_bootstrap, topics, COMMANDS))

            # the operator's mark goes through the lockbox (no key on the operator's side) and takes effect
            assert main(["segments", "mark-unused", target, "--reason", "retired", *cli]) == 0
            wait_for("seg 0 dropped from both", lambda: not holders(target), service, 90)
            assert last_state(target) != "visible"
    finally:
        assert service.stop() == 0
    assert len(dead[unsealed.event_id]) == 1 and "only the coordinator marks segments" in dead[unsealed.event_id][0]
    assert len(dead[guessed.event_id]) == 1 and "does not verify" in dead[guessed.event_id][0]
    [mark] = [e for e in decoded(kafka_bootstrap, topics, SEGMENTS)
              if isinstance(e.event, SegmentsMarkedUnused) and e.event.reason == "retired"]
    assert mark.event.seal is not None  # type: ignore[attr-defined]

    capsys.readouterr()
    assert main(["audit", "--json", *cli]) == 1
    found = json.loads(capsys.readouterr().out)["violations"]
    assert sorted(v["rule"] for v in found) == ["mark not sealed by the coordinator"] * 2, found
