"""Only lockbox-accepted publishes change what is used (docs/security.md).

What a user would notice when this fails: a ``segments_published`` written to ``segments`` by anyone
but the lockbox (a historical's principal, a stray producer on an open broker) becomes visible and is
loaded; or an import from an existing Druid is lost or committed twice.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from coordinator.locks.lockbox import Lockbox
from coordinator.locks.seal import _hmac_hex, publish_refusal, seal_publish, sealed_publish
from coordinator.locks.snapshot import lockbox_from_json, snapshot_to_json
from events import Envelope, Event, Interval, SegmentDescriptor, Topics, decode, encode
from events.deadletter import DeadLettered
from events.locks import LockGranted, PublishRejected, SegmentsImported, SegmentsImportRejected
from events.schema import Instant
from events.segments import SegmentAnnounced, SegmentsPublished
from events.tasks import LockRequested, PublishRequested, SegmentsImportRequested, TaskStarted
from events.topics import LOCK_REQUESTS, SEGMENTS
from streaming.service.intake import InputRecord
from streaming.service.lockbox_agent import FORMAT_VERSION as LB_FORMAT
from streaming.service.lockbox_agent import LockboxAgent
from streaming.service.state import AgentStateStore
from streaming.service.timeline_agent import FORMAT_VERSION as TL_FORMAT
from streaming.service.timeline_agent import TimelineAgent

KEY = b"unit-test-publish-key"
T0 = 1_767_225_600_000
DAY = 86_400_000
TOPICS = Topics("unit.")


def seg(day: int, version: str = "v1", ds: str = "wiki", size: int = 10) -> SegmentDescriptor:
    return SegmentDescriptor(ds, Interval(T0 + day * DAY, T0 + (day + 1) * DAY), version, 0, size)


def req(event: Event, event_id: str, key: str = "wiki") -> Envelope[Event]:
    return Envelope(event, event_id, Instant(T0), key)


def imp(request_id: str, *segments: SegmentDescriptor) -> Envelope[Event]:
    return req(SegmentsImportRequested(request_id=request_id, segments=segments, source="unit"), request_id)


# -- the import decision -----------------------------------------------------------------------------------
def test_an_import_commits_its_segments_and_a_reimport_changes_nothing() -> None:
    box = Lockbox()
    [first] = box.handle(imp("i1", seg(0), seg(1)))
    assert isinstance(first, SegmentsImported) and first.segments == (seg(0), seg(1))
    [again] = box.handle(imp("i2", seg(0), seg(1)))
    assert isinstance(again, SegmentsImported) and again.already_imported
    [more] = box.handle(imp("i3", seg(1), seg(2)))  # the committed one is skipped, the new one imported
    assert isinstance(more, SegmentsImported) and more.segments == (seg(2),) and not more.already_imported
    assert set(box.sources["wiki"].segments) == {seg(d).id for d in range(3)}
    restored = lockbox_from_json(snapshot_to_json(box))  # the snapshot keeps imported segments
    assert set(restored.sources["wiki"].segments) == set(box.sources["wiki"].segments)


@pytest.mark.parametrize(("setup", "request_", "reason"), [
    ([imp("i0", seg(0, size=10))], imp("i1", seg(0, size=99)), "already committed with other contents"),
    ([], imp("i1", seg(0), seg(0, ds="koala")), "one data source"),
    ([], imp("i1", seg(0), seg(0)), "names a segment twice"),
    ([req(TaskStarted(task_id="t", group_id="g", task_type="index", data_source="wiki"), "s"),
      req(LockRequested(request_id="l", task_id="t", group_id="g", task_type="index", data_source="wiki",
                        interval=Interval(T0, T0 + DAY), granularity="timeChunk", lock_type="exclusive"), "l")],
     imp("i1", seg(0)), "overlaps lock"),
])
def test_an_import_is_refused_with_the_reason(setup: list[Envelope[Event]], request_: Envelope[Event],
                                              reason: str) -> None:
    box = Lockbox()
    for e in setup:
        box.handle(e)
    before = dict(box.sources["wiki"].segments) if "wiki" in box.sources else {}
    [decision] = box.handle(request_)
    assert isinstance(decision, SegmentsImportRejected) and reason in decision.reason
    assert (dict(box.sources["wiki"].segments) if "wiki" in box.sources else {}) == before


def test_a_task_cannot_publish_over_an_imported_segment_with_other_contents() -> None:
    box = Lockbox()
    box.handle(imp("i1", seg(0)))
    box.handle(req(TaskStarted(task_id="t", group_id="g", task_type="index", data_source="wiki"), "s"))
    granted = box.handle(req(LockRequested(request_id="l", task_id="t", group_id="g", task_type="index",
                                           data_source="wiki", interval=Interval(T0, T0 + DAY),
                                           granularity="timeChunk", lock_type="exclusive", version="v1"), "l"))
    assert isinstance(granted[-1], LockGranted)
    [decision] = box.handle(req(PublishRequested(request_id="p", task_id="t", segments=(seg(0, size=5),)), "p"))
    assert isinstance(decision, PublishRejected) and "already published" in decision.reason


# -- the seal --------------------------------------------------------------------------------------------------
def published(*segments: SegmentDescriptor, event_id: str = "e1") -> Envelope[SegmentsPublished]:
    return Envelope(SegmentsPublished(task_id="t", segments=segments), event_id, Instant(T0), "wiki", "r1")


def test_a_sealed_publish_verifies_after_the_wire_and_nothing_else_does() -> None:
    sealed = seal_publish(published(seg(0)), "d1", KEY)
    assert publish_refusal(decode(encode(sealed)), KEY) is None  # the seal survives encoding
    assert "no lockbox decision" in (publish_refusal(published(seg(0)), KEY) or "")
    assert "does not verify" in (publish_refusal(sealed, b"another key") or "")
    event = sealed.event
    tampered: list[Envelope[Event]] = [
        replace(sealed, event=replace(event, segments=(seg(0, size=11),))),  # a field of a segment
        replace(sealed, event=replace(event, segments=(seg(0), seg(1)))),  # one segment more
        replace(sealed, event=replace(event, decision_id="d2")),  # another decision
        replace(sealed, event=replace(event, task_id="t2")),
        replace(sealed, event_id="e2"),  # a copy under a new id
        replace(sealed, causation_id="r2"),
        replace(sealed, key="koala"),
    ]
    for env in tampered:
        assert "does not verify" in (publish_refusal(env, KEY) or ""), env
    assert publish_refusal(Envelope(SegmentAnnounced(server="h1", segment=seg(0)), "a", Instant(T0), "wiki"),
                           KEY) is None  # only publishes carry a seal


# -- the agents: the lockbox seals, the timeline takes only what it sealed -------------------------------------
class ListSink:
    def __init__(self) -> None:
        self.sent: list[Envelope[Event]] = []

    def send(self, envelope: Envelope[Event]) -> None:
        self.sent.append(envelope)

    def flush(self, timeout: float = 30.0) -> None:
        pass


def records(topic: str, envs: list[Envelope[Event]], start: int = 0) -> list[InputRecord]:
    return [InputRecord(topic, 0, start + i, e.key.encode(), encode(e), T0) for i, e in enumerate(envs)]


def test_the_timeline_takes_the_lockbox_publish_and_dead_letters_a_forged_one(tmp_path: Path) -> None:
    lb_sink, tl_sink = ListSink(), ListSink()
    with AgentStateStore(tmp_path / "lb", LB_FORMAT) as lb_store, AgentStateStore(tmp_path / "tl", TL_FORMAT) as tl:
        lockbox = LockboxAgent(lb_store, TOPICS, lb_sink, publish_key=KEY)
        lockbox.process(records(TOPICS.name(LOCK_REQUESTS), [imp("i1", seg(0))]))
        twins = [e for e in lb_sink.sent if isinstance(e.event, SegmentsPublished)]
        [decision] = [e for e in lb_sink.sent if isinstance(e.event, SegmentsImported)]
        assert len(twins) == 1 and twins[0].event.decision_id == decision.event_id  # type: ignore[attr-defined]
        assert twins[0].causation_id == "i1"

        forged = [published(seg(1), event_id="forged"),  # no decision at all
                  replace(twins[0], event_id="copy",  # a sealed publish copied with a changed segment
                          event=replace(twins[0].event, segments=(seg(2),))),  # type: ignore[type-var]
                  seal_publish(published(seg(3), event_id="wrong-key"), decision.event_id, b"guessed key")]
        timeline = TimelineAgent(tl, TOPICS, tl_sink, publish_key=KEY)
        timeline.process(records(TOPICS.name(SEGMENTS), [*forged, twins[0]]))
        letters = [e.event for e in tl_sink.sent if isinstance(e.event, DeadLettered)]
        assert [(d.offset, "only the lockbox" in d.reason or "does not verify" in d.reason) for d in letters] == [
            (0, True), (1, True), (2, True)]
        changed = {e.event.segment_id for e in tl_sink.sent if not isinstance(e.event, DeadLettered)}  # type: ignore[attr-defined]
        assert changed == {str(seg(0).id)}
        assert timeline.timelines.states() == {str(seg(0).id): "offline"}


# -- the sealed bytes ------------------------------------------------------------------------------------
def _reference_message(env: Envelope[SegmentsPublished]) -> bytes:
    """The sealed bytes as first specified: the envelope of a copy of the event without its seal."""
    import orjson

    unsealed = Envelope(replace(env.event, seal=None), env.event_id, env.occurred_at, env.key, env.causation_id)
    return orjson.dumps(unsealed.to_json(), option=orjson.OPT_SORT_KEYS)


@pytest.mark.parametrize("decision, seal, cause", [(None, None, None), ("d1", None, "r1"), ("d1", "ab" * 32, None),
                                                   (None, "not-hex", "r2")])
def test_the_sealed_bytes_are_those_of_the_unsealed_copy(decision: str | None, seal: str | None,
                                                         cause: str | None) -> None:
    """A seal written before the cheaper message still verifies, and a changed field still breaks it."""
    import hashlib
    import hmac

    from coordinator.locks.seal import _message, seal_of

    core = tuple(replace(seg(3, "v2", "ds_x", 5), partition_id=p, shard_spec={"type": "numbered", "partitionNum": p,
                                                                             "partitions": 2}) for p in range(2))
    for segments in ((seg(0),), core):
        env = Envelope(SegmentsPublished(task_id="t", segments=segments, decision_id=decision, seal=seal), "e1",
                       Instant(T0), "wiki", cause)
        assert _message(env) == _reference_message(env)
        assert seal_of(env, KEY) == hmac.new(KEY, _reference_message(env), hashlib.sha256).hexdigest()
        sealed = seal_publish(env, "d9", KEY)
        assert publish_refusal(sealed, KEY) is None
        assert publish_refusal(replace(sealed, key="other"), KEY) is not None


# -- sealing and encoding in one pass ----------------------------------------------------------------------
@pytest.mark.parametrize("start, end", [(None, None), ({"p": 1}, None), (None, {"p": 2}), ({"p": 1}, {"p": 2})])
@pytest.mark.parametrize("named", [None, "earlier-decision"])
@pytest.mark.parametrize("causation", [None, "r1"])
def test_a_publish_sealed_with_its_bytes_is_what_encode_writes(start: object, end: object, named: str | None,
                                                               causation: str | None) -> None:
    """The lockbox sends a sealed publish as the bytes it built while sealing: a consumer reading them must get
    exactly the sealed envelope (the seal verifies on it), or every publish would be refused or differ."""
    event = SegmentsPublished(task_id="t", segments=(seg(0), seg(1, "v2")), start_metadata=start,
                              end_metadata=end, decision_id=named)
    env: Envelope[SegmentsPublished] = Envelope(event, "e1", Instant(T0), "wiki", causation)
    sealed, value = sealed_publish(env, "d1", KEY)
    assert sealed == seal_publish(env, "d1", KEY)
    assert value == encode(sealed)
    assert decode(value) == sealed and publish_refusal(decode(value), KEY) is None


@pytest.mark.parametrize("key_length", [0, 1, 32, 63, 64, 65, 200])
def test_the_seal_is_hmac_sha256_whatever_the_key_length(key_length: int) -> None:
    """The seal's HMAC is computed from the key's padded states (faster than ``hmac.digest``): it must stay
    HMAC-SHA256, or seals written by another build (or checked by audit with the standard library) disagree."""
    import hashlib
    import hmac

    key = bytes((7 * i + key_length) % 256 for i in range(key_length))
    for message in (b"", b"x", bytes(range(256)) * 3):
        assert _hmac_hex(key, message) == hmac.digest(key, message, hashlib.sha256).hex()


def test_an_envelope_this_process_sealed_verifies_without_its_hmac_and_only_that_object(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The agents reading back what the lockbox of their process sealed get that very object (shared
    envelopes): its seal is not recomputed. Any other object, equal or not, and any other key, is checked in full."""
    from coordinator.locks import seal as sealing

    sealed, _ = sealed_publish(published(seg(0)), "d1", KEY)
    equal_copy = decode(encode(sealed))
    assert equal_copy == sealed and equal_copy is not sealed
    computed: list[bytes] = []
    real = sealing._hmac_hex
    monkeypatch.setattr(sealing, "_hmac_hex", lambda key, message: computed.append(message) or real(key, message))
    assert publish_refusal(sealed, KEY) is None and not computed  # vouched: no HMAC
    assert publish_refusal(equal_copy, KEY) is None and len(computed) == 1  # decoded from bytes: checked
    assert "does not verify" in (publish_refusal(sealed, b"another key") or "")  # vouched under KEY only
    assert len(computed) == 2
    forged = replace(sealed, event=replace(sealed.event, segments=(seg(0, size=11),)))  # a new object
    assert "does not verify" in (publish_refusal(forged, KEY) or "")
    sealing.VOUCHED.clear()
    assert publish_refusal(sealed, KEY) is None and len(computed) == 4  # forgotten: checked in full again


def test_the_vouched_envelopes_are_bounded() -> None:
    from coordinator.locks.seal import _Vouched

    vouched = _Vouched(3)
    envs = [seal_publish(published(seg(i)), f"d{i}", KEY) for i in range(5)]
    for env in envs:
        vouched.add(env, KEY)
    assert [vouched.vouches(e, KEY) for e in envs] == [False, False, True, True, True]
