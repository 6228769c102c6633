"""VisibilityFeed and QueryableView on the real broker."""

from __future__ import annotations

import itertools
import time
import uuid

import pytest

from coordinator.timeline.timelines import Timelines
from events import Envelope, Event, Interval, SegmentDescriptor, Topics
from events.ids import derived_event_id
from events.segments import SegmentAnnounced, SegmentsPublished, SegmentUnannounced
from events.visibility import SegmentVisibilityChanged
from streaming.producer import EventProducer
from streaming.subscribers import QueryableView, VisibilityFeed
from tests.accepted import through_lockbox

pytestmark = pytest.mark.integration
H = 3_600_000
T0 = 1_795_219_200_000
DAY = Interval(T0, T0 + 24 * H)


def seg(version: str, start_h: int, hours: int, partition: int = 0) -> SegmentDescriptor:
    return SegmentDescriptor("wiki", Interval(T0 + start_h * H, T0 + (start_h + hours) * H), version, partition, 10)


def history() -> list[Event]:
    v1 = [seg("v1", h, 6) for h in (0, 6, 12, 18)]
    v2 = seg("v2", 0, 24)
    return [
        SegmentsPublished(task_id="t1", segments=tuple(v1)),
        *[SegmentAnnounced(server="h1", segment=s) for s in v1],
        SegmentsPublished(task_id="t2", segments=(v2,)),
        SegmentAnnounced(server="h2", segment=v2),  # the day flips to v2
        SegmentUnannounced(server="h2", segment_id=str(v2.id)),  # and back to v1
        SegmentAnnounced(server="h1", segment=v2),
    ]


def test_feed_from_the_beginning_from_offsets_and_from_a_time_without_duplicates(
        kafka_bootstrap: str, topics: Topics) -> None:
    fold = Timelines()
    producer = EventProducer(kafka_bootstrap, topics)
    sent: list[str] = []
    for i, event in enumerate(history()):
        for j, change in enumerate(fold.apply(event)):
            seg_id = str(change.segment_id)
            out = SegmentVisibilityChanged(segment_id=seg_id, data_source="wiki", interval=change.segment_id.interval,
                                           from_state=change.old, to_state=change.new)
            env = Envelope(out, derived_event_id("segments", 0, i, j), T0 + i * 1000, "wiki", f"cause-{i}")  # type: ignore[arg-type]
            producer.send(env)
            sent.append(env.event_id)
        if i == 5:
            producer.flush()
            time.sleep(1.5)
            middle_ms = int(time.time() * 1000)
            time.sleep(1.5)
    producer.send(Envelope(out, env.event_id, T0, "wiki", "again"))  # a re-emitted duplicate  # type: ignore[arg-type]
    producer.flush()
    producer.close()

    feed = VisibilityFeed(kafka_bootstrap, topics)
    got = list(feed.until_idle(3.0))
    feed.close()
    assert [c.envelope.event_id for c in got] == sent and feed.duplicates == 1
    assert got[0].event.to_state in ("offline", "visible") and got[-1].envelope.causation_id == "cause-8"

    later = VisibilityFeed(kafka_bootstrap, topics, offsets={0: 3})
    assert next(c.offset for c in later.until_idle(3.0)) == 3
    later.close()
    recent = VisibilityFeed(kafka_bootstrap, topics, since_ms=middle_ms)
    tail = [c.envelope.event_id for c in recent.until_idle(3.0)]
    recent.close()
    assert tail and tail == sent[len(sent) - len(tail):] and len(tail) < len(sent)
    with pytest.raises(ValueError, match="not both"):
        VisibilityFeed(kafka_bootstrap, topics, offsets={0: 0}, since_ms=0)


def test_the_view_answers_with_parts_and_servers_and_never_two_versions(kafka_bootstrap: str, topics: Topics) -> None:
    producer = EventProducer(kafka_bootstrap, topics)
    view = QueryableView(kafka_bootstrap, topics)
    seen_versions: list[set[str]] = []
    for event in history():
        producer.send(through_lockbox(Envelope(event, uuid.uuid4().hex, T0, "wiki")))  # type: ignore[arg-type]
        producer.flush()
        deadline = time.monotonic() + 10
        while view.refresh(0.2) == 0 and time.monotonic() < deadline:
            pass
        answer = view.lookup("wiki", DAY)
        pieces = sorted((iv.start, iv.end) for q in answer for iv in q.intervals)
        assert all(a[1] <= b[0] for a, b in itertools.pairwise(pieces))  # one version per instant
        seen_versions.append({q.segment_id.split("_")[-1] for q in answer})
    producer.close()
    assert seen_versions[4] == {"v1"} and seen_versions[6] == {"v2"} and seen_versions[7] == {"v1"}
    final = view.lookup("wiki", Interval(T0 + 3 * H, T0 + 9 * H))
    assert [(q.segment_id.split("_")[-1], q.servers) for q in final] == [("v2", ("h1",))]
    assert final[0].intervals == (Interval(T0 + 3 * H, T0 + 9 * H),)
    assert view.lookup("nothing", DAY) == []

    # a forged (unsealed) publish of v3 with its announce, and an announce of a v4 nobody published: the view
    # skips the publish and serves neither (docs/security.md)
    v3, v4 = seg("v3", 0, 24), seg("v4", 0, 24)
    for event in (SegmentsPublished(task_id="forged", segments=(v3,)), SegmentAnnounced(server="h1", segment=v3),
                  SegmentAnnounced(server="h1", segment=v4)):
        producer = EventProducer(kafka_bootstrap, topics)
        producer.send(Envelope(event, uuid.uuid4().hex, T0, "wiki"))  # type: ignore[arg-type]
        producer.close()
    view.catch_up(3.0)
    assert view.refused == 1
    assert {q.segment_id.split("_")[-1] for q in view.lookup("wiki", DAY)} == {"v2"}
    view.close()
