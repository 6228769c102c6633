"""A forged ``segments_published`` on an open broker: dead-lettered with the reason, nothing loaded, audit reports it.

The service runs as users run it (``segcoord run``, simulated historicals). A producer that is not the
lockbox writes a publish straight to ``segments``; a real publish (through the lockbox's import path)
follows it on the same partition, so once the real one is loaded the forged one has been read too.
"""

from __future__ import annotations

import json
import uuid
from pathlib import Path

import pytest

from events import Envelope, Interval, SegmentDescriptor, Topics
from events.cluster import RulesSet, ServerJoined
from events.commands import LoadSegment
from events.deadletter import DeadLettered
from events.schema import Instant
from events.segments import SegmentsPublished
from events.topics import COMMANDS, DEADLETTER, TIMELINE
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
