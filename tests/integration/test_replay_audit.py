"""`segcoord replay` and `segcoord audit` over a hand-made log on the real broker."""

from __future__ import annotations

import json
import time
import uuid

import pytest

from coordinator.locks.seal import publish_refusal, seal_publish
from coordinator.timeline.timelines import Timelines
from events import Envelope, Event, Interval, SegmentDescriptor, Topics
from events.cluster import ServerJoined
from events.commands import LoadSegment
from events.ids import derived_event_id
from events.locks import LockGranted, PublishAccepted, TaskLock
from events.segments import SegmentAnnounced, SegmentsPublished
from events.tasks import TaskStarted
from events.topics import SEGMENTS
from events.visibility import SegmentVisibilityChanged
from streaming.cli import main
from streaming.credentials import publish_key
from streaming.producer import EventProducer

pytestmark = pytest.mark.integration
H = 3_600_000
T0 = 1_795_219_200_000
DAY = Interval(T0, T0 + 24 * H)


def seg(hour: int, size: int, version: str = "v1") -> SegmentDescriptor:
    return SegmentDescriptor("wiki", Interval(T0 + hour * H, T0 + (hour + 1) * H), version, 0, size)


def test_replay_and_audit(kafka_bootstrap: str, topics: Topics, capsys: pytest.CaptureFixture[str]) -> None:
    producer = EventProducer(kafka_bootstrap, topics)
    fold = Timelines()
    segments_offset = 0

    def send(event: Event, key: str, event_id: str | None = None, cause: str | None = None) -> str:
        nonlocal segments_offset
        eid = event_id or uuid.uuid4().hex
        env: Envelope[Event] = Envelope(event, eid, T0, key, cause)  # type: ignore[arg-type]
        if isinstance(event, PublishAccepted):  # the lockbox's decision, then its sealed twin on segments
            producer.send(env)
            twin = Envelope(SegmentsPublished(task_id=event.task_id, segments=event.segments), uuid.uuid4().hex,
                            T0, key, cause)  # type: ignore[arg-type]
            env, event = seal_publish(twin, eid, publish_key()), twin.event
        producer.send(env)
        producer.flush()
        forged = publish_refusal(env, publish_key()) is not None  # the timeline agent dead-letters it
        if event.event_topic == SEGMENTS and not forged:  # what the timeline agent would emit for it
            for i, change in enumerate(fold.apply(event)):
                out = SegmentVisibilityChanged(segment_id=str(change.segment_id), data_source="wiki",
                                               interval=change.segment_id.interval, from_state=change.old,
                                               to_state=change.new)
                producer.send(Envelope(out, derived_event_id(topics.name(SEGMENTS), 0, segments_offset, i), T0,
                                       "wiki", eid))
            producer.flush()
            segments_offset += 1
        elif event.event_topic == SEGMENTS:
            segments_offset += 1
        time.sleep(0.02)  # distinct broker timestamps: the merge follows send order
        return eid

    lock = TaskLock(lock_id="L1", task_id="t1", group_id="g1", data_source="wiki", interval=DAY,
                    granularity="timeChunk", lock_type="exclusive", version="v1", priority=50)
    send(TaskStarted(task_id="t1", group_id="g1", task_type="index", data_source="wiki"), "wiki")
    send(LockGranted(request_id="r1", task_id="t1", lock=lock), "wiki")
    send(PublishAccepted(request_id="p1", task_id="t1", segments=(seg(0, 80), seg(1, 50))), "wiki")  # under L1
    send(ServerJoined(server="h1", tier="hot", max_size_bytes=100), "h1")
    load = send(LoadSegment(command_id="c1", server="h1", segment=seg(0, 80), stage="1",
                            purpose="loading", reason="x"), "h1")
    send(SegmentAnnounced(server="h1", segment=seg(0, 80)), "wiki", cause=load)
    midpoint_ms = int(time.time() * 1000)
    time.sleep(0.05)
    send(PublishAccepted(request_id="p9", task_id="t9", segments=(seg(5, 10),)), "wiki")  # no lock: a violation
    forged = send(SegmentsPublished(task_id="t1", segments=(seg(7, 10),)), "wiki")  # not the lockbox's: a violation
    send(SegmentAnnounced(server="h1", segment=seg(1, 50)), "wiki")  # 130 > 100 bytes: a violation
    send(LoadSegment(command_id="c2", server="h2", segment=seg(5, 10), stage="1",
                     purpose="loading", reason="x"), "h2")  # unanswered
    producer.send(Envelope(SegmentVisibilityChanged(segment_id="wiki_bogus", data_source="wiki", interval=DAY,
                                                    from_state="absent", to_state="visible"),
                           "made-up", T0, "wiki"))  # emitted with no cause in the log
    producer.flush()
    producer.close()
    args = ["--bootstrap", kafka_bootstrap, "--topic-prefix", topics.prefix]

    assert main(["audit", "--json", "--command-timeout-ms", "0", *args]) == 1
    found = json.loads(capsys.readouterr().out)["violations"]
    rules = sorted(v["rule"] for v in found)
    assert rules == ["command unanswered", "publish not accepted by the lockbox", "publish without a live lock",
                     "server beyond its size", "timeline change without cause"], found
    assert "t9" in next(v["detail"] for v in found if v["rule"] == "publish without a live lock")
    assert forged in next(v["detail"] for v in found if v["rule"] == "publish not accepted by the lockbox")
    assert main(["audit", *args]) == 1  # default timeout: c2 is young, the other four remain
    out = capsys.readouterr().out
    assert out.strip().endswith("4 violation(s)")

    assert main(["replay", "--json", "--until", f"{SEGMENTS}:0:1", *args]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["position"]["record"] == f"{SEGMENTS}:0:1"
    assert doc["placement"]["h1"]["segments"] == [str(seg(0, 80).id)]
    assert [lk["lockId"] for lk in doc["locks"]] == ["L1"]
    assert doc["timeline"]["states"][str(seg(0, 80).id)] == "visible"
    from events.instant import format_instant
    assert main(["replay", "--json", "--until", format_instant(midpoint_ms), *args]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert str(seg(5, 10).id) not in doc["timeline"]["states"]
    assert main(["replay", "--json", *args]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert str(seg(7, 10).id) not in doc["timeline"]["states"]  # the forged publish made nothing used
    assert doc["usedSegments"] == 3
    assert str(seg(5, 10).id) in doc["timeline"]["states"]
    assert main(["replay", *args]) == 0
    assert "placement: 1 servers" in capsys.readouterr().out
