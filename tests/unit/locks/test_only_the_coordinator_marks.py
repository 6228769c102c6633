"""Only the coordinator marks segments used or unused (docs/security.md).

What a user would notice when this fails: a ``segments_marked_unused`` written to ``segments`` by anyone
(a historical's principal, a stray producer on an open broker) drops a segment from the timeline and off
the historicals, or a ``segments_marked_used`` brings back (or makes up) a segment nobody accepted; or an
operator's ``segcoord segments mark-unused`` does nothing.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from coordinator.locks.lockbox import Lockbox
from coordinator.locks.seal import seal_event, use_refusal
from events import Envelope, Event, Interval, SegmentDescriptor, Topics, decode, encode
from events.deadletter import DeadLettered
from events.locks import SegmentsImported, SegmentsMarkRejected
from events.schema import Instant
from events.segments import SegmentAnnounced, SegmentsMarkedUnused, SegmentsMarkedUsed, SegmentsPublished
from events.tasks import SegmentsImportRequested, SegmentsMarkUnusedRequested, SegmentsMarkUsedRequested
from events.topics import LOCK_REQUESTS, SEGMENTS
from streaming.service.lockbox_agent import FORMAT_VERSION as LB_FORMAT
from streaming.service.lockbox_agent import LockboxAgent
from streaming.service.state import AgentStateStore
from streaming.service.timeline_agent import FORMAT_VERSION as TL_FORMAT
from streaming.service.timeline_agent import TimelineAgent
from tests.unit.locks.test_only_the_lockbox_publishes import ListSink, records  # the same agents' harness

KEY = b"unit-test-publish-key"
T0 = 1_767_225_600_000
DAY = 86_400_000
TOPICS = Topics("unit.")


def seg(day: int, version: str = "v1", ds: str = "wiki", size: int = 10) -> SegmentDescriptor:
    return SegmentDescriptor(ds, Interval(T0 + day * DAY, T0 + (day + 1) * DAY), version, 0, size)


def req(event: Event, event_id: str, key: str = "wiki") -> Envelope[Event]:
    return Envelope(event, event_id, Instant(T0), key)


def unused(*ids: str, event_id: str = "m1") -> Envelope[Event]:
    return req(SegmentsMarkedUnused(segment_ids=ids, reason="r"), event_id)


def committed_box() -> Lockbox:
    box = Lockbox()
    box.handle(req(SegmentsImportRequested(request_id="i1", segments=(seg(0), seg(1)), source="unit"), "i1"))
    return box


# -- the seal of a mark -----------------------------------------------------------------------------------
def test_a_sealed_mark_verifies_after_the_wire_and_nothing_else_does() -> None:
    sealed = seal_event(unused(str(seg(0).id)), KEY)  # type: ignore[type-var]
    assert use_refusal(decode(encode(sealed)), KEY) is None  # the seal survives encoding
    assert "not sealed: only the coordinator marks segments" in (use_refusal(unused(str(seg(0).id)), KEY) or "")
    assert "does not verify" in (use_refusal(sealed, b"another key") or "")
    event = sealed.event
    assert isinstance(event, SegmentsMarkedUnused)
    tampered: list[Envelope[Event]] = [
        replace(sealed, event=replace(event, segment_ids=(str(seg(1).id),))),  # another segment
        replace(sealed, event=replace(event, segment_ids=(str(seg(0).id), str(seg(1).id)))),  # one more
        replace(sealed, event=replace(event, reason="other")),
        replace(sealed, event_id="m2"),  # a copy under a new id
        replace(sealed, causation_id="r2"),
    ]
    for env in tampered:
        assert "does not verify" in (use_refusal(env, KEY) or ""), env
    used = req(SegmentsMarkedUsed(segments=(seg(0),), reason="r"), "u1")
    assert "segments_marked_used u1 is not sealed" in (use_refusal(used, KEY) or "")
    sealed_used = seal_event(used, KEY)  # type: ignore[type-var]
    assert use_refusal(sealed_used, KEY) is None
    assert "does not verify" in (use_refusal(replace(sealed_used, event=replace(  # a changed load spec
        sealed_used.event, segments=(seg(0, size=11),))), KEY) or "")  # type: ignore[type-var]


def test_a_mark_stored_before_seals_decodes_and_is_refused() -> None:
    raw = (Path(__file__).parents[2] / "golden" / "compat" / "segments_marked_unused_without_seal.json").read_bytes()
    env = decode(raw)
    assert isinstance(env.event, SegmentsMarkedUnused) and env.event.seal is None
    assert "not sealed" in (use_refusal(env, KEY) or "")


# -- the lockbox's decision on an operator's mark -----------------------------------------------------------
def test_the_lockbox_marks_unused_what_it_is_asked_for() -> None:
    [out] = committed_box().handle(req(SegmentsMarkUnusedRequested(
        request_id="r1", data_source="wiki", segment_ids=(str(seg(0).id),), reason="old"), "r1"))
    assert out == SegmentsMarkedUnused(segment_ids=(str(seg(0).id),), reason="old")


def test_the_lockbox_marks_used_only_what_it_committed_with_these_contents() -> None:
    box = committed_box()
    ask = SegmentsMarkUsedRequested(request_id="r1", data_source="wiki", segments=(seg(1),), reason="again")
    assert box.handle(req(ask, "r1")) == [SegmentsMarkedUsed(segments=(seg(1),), reason="again")]


@pytest.mark.parametrize(("request_", "why"), [
    (SegmentsMarkUsedRequested("r", "wiki", (seg(5),), ""), "segments[0]: wiki_2026-01-06T00:00:00.000Z_"),
    (SegmentsMarkUsedRequested("r", "wiki", (seg(0, size=99),), ""), "was committed with other contents"),
    (SegmentsMarkUsedRequested("r", "wiki", (seg(0), seg(0)), ""), "names a segment twice"),
    (SegmentsMarkUsedRequested("r", "koala", (seg(0),), ""), "is not of data source koala"),
    (SegmentsMarkUnusedRequested("r", "koala", (str(seg(0).id),), ""), "segmentIds[0]: wiki_"),
    (SegmentsMarkUnusedRequested("r", "wiki", ("not an id",), ""), "segmentIds[0]"),
])
def test_a_mark_request_is_refused_with_the_reason(request_: Event, why: str) -> None:
    [out] = committed_box().handle(req(request_, "r"))
    assert isinstance(out, SegmentsMarkRejected) and out.request_id == "r" and why in out.reason, out


# -- the agents: the lockbox seals the operator's mark, the timeline takes only sealed marks ------------------
def test_the_timeline_takes_the_lockbox_mark_and_dead_letters_a_forged_one(tmp_path: Path) -> None:
    lb_sink, tl_sink = ListSink(), ListSink()
    with AgentStateStore(tmp_path / "lb", LB_FORMAT) as lb_store, AgentStateStore(tmp_path / "tl", TL_FORMAT) as tl:
        lockbox = LockboxAgent(lb_store, TOPICS, lb_sink, publish_key=KEY)
        lockbox.process(records(TOPICS.name(LOCK_REQUESTS), [
            req(SegmentsImportRequested(request_id="i1", segments=(seg(0), seg(1)), source="unit"), "i1"),
            req(SegmentsMarkUnusedRequested(request_id="r1", data_source="wiki", segment_ids=(str(seg(0).id),),
                                            reason="operator"), "r1")]))
        assert any(isinstance(e.event, SegmentsImported) for e in lb_sink.sent)
        [publish] = [e for e in lb_sink.sent if isinstance(e.event, SegmentsPublished)]
        [mark] = [e for e in lb_sink.sent if isinstance(e.event, SegmentsMarkedUnused)]
        assert mark.causation_id == "r1" and mark.key == "wiki" and use_refusal(mark, KEY) is None

        timeline = TimelineAgent(tl, TOPICS, tl_sink, publish_key=KEY)
        announce = req(SegmentAnnounced(server="h1", segment=seg(1)), "a1")
        forged = [unused(str(seg(1).id), event_id="forged"),  # unsealed
                  seal_event(unused(str(seg(1).id), event_id="guessed"), b"guessed key"),  # type: ignore[type-var]
                  replace(mark, event_id="copy", event=replace(  # a sealed mark copied onto another segment
                      mark.event, segment_ids=(str(seg(1).id),)))]  # type: ignore[type-var]
        timeline.process(records(TOPICS.name(SEGMENTS), [publish, announce, *forged, mark]))
        letters = [e.event for e in tl_sink.sent if isinstance(e.event, DeadLettered)]
        assert [(d.offset, "only the coordinator" in d.reason or "does not verify" in d.reason)
                for d in letters] == [(2, True), (3, True), (4, True)]
        assert timeline.timelines.states() == {str(seg(1).id): "visible"}  # seg(0) marked unused, seg(1) kept
