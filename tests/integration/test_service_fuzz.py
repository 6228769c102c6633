"""Fuzzing ``segcoord run``: 10k malformed or invalid payloads mixed into valid streams on ``segments`` and
``lock-requests``.

The valid streams are the seeded ones of the timeline and lockbox tests; 10,000 bad records of many kinds
(see :data:`KINDS`) are interleaved with them, all produced before the service starts so every input
position is known. Every bad record is checked to be refused by the pure core while it is generated (so the
generator cannot quietly produce a valid one). At the end:

- the service is still running (and stops cleanly on SIGTERM);
- the timeline agent's RocksDB state and deduplicated output equal a pure fold of the ``segments`` topic,
  the lockbox agent's decisions, publishes and stored requests equal a pure fold of ``lock-requests``;
- ``deadletter`` holds exactly the bad records, identified by original (topic, partition, offset), each with
  a non-empty reason and the original key and value bytes.
"""

from __future__ import annotations

import base64
import random
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import orjson
import pytest

from coordinator.locks.seal import publish_refusal
from coordinator.timeline.timelines import Timelines
from events import DeadLettered, Envelope, Event, Topics, decode, encode
from events.schema import EventValidationError
from events.segments import SegmentsPublished
from events.topics import DEADLETTER, LOCK_REQUESTS, LOCKS, SEGMENTS, TIMELINE
from streaming.credentials import publish_key
from streaming.producer import EventProducer
from streaming.service.lockbox_agent import FORMAT_VERSION as LB_FORMAT
from streaming.service.lockbox_agent import STORE_NAME as LB_STORE
from streaming.service.lockbox_agent import stored_requests
from streaming.service.state import AgentStateStore
from tests.integration.test_service_lockbox import dedup, request_stream
from tests.integration.test_service_lockbox import pure_fold as lockbox_fold
from tests.integration.test_service_timeline import (
    Service,
    check_agent_equals_fold,
    count_distinct_ids,
    read_all,
    segment_stream,
    wait_for,
)

pytestmark = pytest.mark.integration

N_BAD = 10_000
SEED = 424242

Json = dict[str, Any]


# -- why a record is refused: the same checks as the agents, through the pure core ------------------------
def refusal(value: bytes | None, logical_topic: str) -> str | None:
    """The reason the agent of ``logical_topic`` must refuse ``value`` (None: it is valid).

    Segments records are also folded into a fresh timeline: a segment id that cannot be parsed is refused
    there whatever the state."""
    try:
        env = decode(value)
        if env.event.event_topic != logical_topic:
            return f"belongs on {env.event.event_topic}"
        if logical_topic == SEGMENTS:
            sealed = publish_refusal(env, publish_key())  # a changed publish no longer carries the lockbox's seal
            if sealed is not None:
                return sealed
            Timelines().apply(env.event)
    except EventValidationError as e:
        return str(e)
    return None


# -- bad record generators -------------------------------------------------------------------------------
def _copy(obj: Json) -> Json:
    return orjson.loads(orjson.dumps(obj))


def _set(obj: Json, path: tuple[Any, ...], value: Any) -> Json:
    out = _copy(obj)
    target = out
    for step in path[:-1]:
        target = target[step]
    if value is _DELETE:
        del target[path[-1]]
    else:
        target[path[-1]] = value
    return out


_DELETE = object()

# (event_type, path inside the envelope, bad value) per input topic; every one must be refused
_PAYLOAD_MUTATIONS: dict[str, list[tuple[str, tuple[Any, ...], Any]]] = {
    SEGMENTS: [
        ("segments_published", ("payload", "segments", 0, "interval"), "2026-11-22T00:00:00Z/2026-11-21T00:00:00Z"),
        ("segments_published", ("payload", "segments", 0, "interval"), "2026-11-21T00:00:00Z"),
        ("segments_published", ("payload", "segments", 0, "interval"), "not/an-interval"),
        ("segments_published", ("payload", "segments", 0, "interval"), "2026-11-21T00:00:00Z/2026-11-21T00:00:00Z"),
        ("segments_published", ("payload", "segments", 0, "size"), -1),
        ("segments_published", ("payload", "segments", 0, "size"), -(2**40)),
        ("segments_published", ("payload", "segments", 0, "size"), "1000"),
        ("segments_published", ("payload", "segments", 0, "partitionId"), -3),
        ("segments_published", ("payload", "segments", 0, "partitionId"), 1.5),
        ("segments_published", ("payload", "segments", 0, "dataSource"), ""),
        ("segments_published", ("payload", "segments", 0, "dataSource"), None),
        ("segments_published", ("payload", "segments", 0, "version"), 7),
        ("segments_published", ("payload", "segments", 0), "wiki_2026"),
        ("segments_published", ("payload", "segments"), []),
        ("segments_published", ("payload", "segments"), "x"),
        ("segments_published", ("payload", "segments", 0, "interval"), _DELETE),
        ("segments_published", ("payload", "segments"), _DELETE),
        ("segment_announced", ("payload", "segment", "interval"), "2026-11-21T00:00:00Z/garbage"),
        ("segment_announced", ("payload", "segment", "size"), -100),
        ("segment_announced", ("payload", "server"), ""),
        ("segment_announced", ("payload", "server"), 42),
        ("segment_announced", ("payload", "server"), _DELETE),
        ("segment_announced", ("payload", "segment"), _DELETE),
        ("segment_unannounced", ("payload", "segmentId"), "no-such-segment"),
        ("segment_unannounced", ("payload", "segmentId"), "wiki_2026-11-21_v1"),
        ("segment_unannounced", ("payload", "segmentId"), "ds1_2026-11-22T00:00:00.000Z_2026-11-21T00:00:00.000Z_v1"),
        ("segment_unannounced", ("payload", "segmentId"), ""),
        ("segment_unannounced", ("payload", "segmentId"), ["ds1"]),
        ("segment_unannounced", ("payload", "server"), _DELETE),
        ("segments_marked_unused", ("payload", "segmentIds"), ["garbage"]),
        ("segments_marked_unused", ("payload", "segmentIds"), "ds1_2026"),
        ("segments_marked_unused", ("payload", "segmentIds"), [1, 2]),
        ("segments_marked_unused", ("payload", "segmentIds"), _DELETE),
    ],
    LOCK_REQUESTS: [
        ("lock_requested", ("payload", "interval"), "2026-11-22T00:00:00Z/2026-11-21T00:00:00Z"),
        ("lock_requested", ("payload", "interval"), "yesterday/today"),
        ("lock_requested", ("payload", "interval"), 86_400_000),
        ("lock_requested", ("payload", "granularity"), "week"),
        ("lock_requested", ("payload", "lockType"), "bogus"),
        ("lock_requested", ("payload", "priority"), "high"),
        ("lock_requested", ("payload", "partitionIds"), [-1]),
        ("lock_requested", ("payload", "requestId"), _DELETE),
        ("lock_requested", ("payload", "taskId"), ""),
        ("lock_requested", ("payload", "dataSource"), None),
        ("segment_allocation_requested", ("payload", "timestamp"), "garbage"),
        ("segment_allocation_requested", ("payload", "timestamp"), 1_795_219_200_000),
        ("segment_allocation_requested", ("payload", "lockGranularity"), "hour"),
        ("segment_allocation_requested", ("payload", "interval"), "2026-11-21T00:00:00Z/"),
        ("segment_allocation_requested", ("payload", "sequenceName"), _DELETE),
        ("segment_allocation_requested", ("payload", "skipLineageCheck"), "yes"),
        ("publish_requested", ("payload", "segments", 0, "size"), -5),
        ("publish_requested", ("payload", "segments", 0, "interval"), "2026-11-22T00:00:00Z/2026-11-21T00:00:00Z"),
        ("publish_requested", ("payload", "segments"), []),
        ("publish_requested", ("payload", "segments"), None),
        ("publish_requested", ("payload", "taskId"), 17),
        ("task_started", ("payload", "taskId"), _DELETE),
        ("task_started", ("payload", "priority"), [10]),
        ("task_started", ("payload", "groupId"), ""),
        ("task_finished", ("payload", "status"), "maybe"),
        ("task_finished", ("payload", "status"), _DELETE),
        ("task_finished", ("payload", "taskId"), None),
    ],
}

_ENVELOPE_FIELDS = ("event_type", "schema_version", "event_id", "occurred_at", "key", "payload")
_WRONG_TYPES: dict[str, list[Any]] = {
    "event_type": [5, None, [], {"name": "segments_published"}],
    "schema_version": ["1", 1.0, 1.5, True, None, [1]],
    "event_id": [7, None, [], {"id": "x"}],
    "occurred_at": [1_795_219_200_000, "yesterday", "2026-13-45T00:00:00Z", None, {}],
    "key": [5, None, ["wiki"]],
    "causation_id": [5, "", ["x"]],
    "payload": [[], "payload", 3, None],
}


class BadRecords:
    """A seeded generator of refused records for one input topic; every kind is checked by :func:`refusal`.

    Empty keys and empty values are left out here: their dead letters cannot be decoded (see
    :func:`test_dead_letter_of_an_empty_key_or_value_decodes`)."""

    def __init__(self, rng: random.Random, logical: str, templates: list[Json], foreign: list[Json]) -> None:
        self.rng = rng
        self.logical = logical
        self.templates = templates  # valid envelopes of this topic
        self.foreign = foreign  # valid envelopes of another topic
        self.by_type: dict[str, list[Json]] = {}
        for t in templates:
            self.by_type.setdefault(t["event_type"], []).append(t)
        self.mutations = [m for m in _PAYLOAD_MUTATIONS[logical] if m[0] in self.by_type]
        self.kinds: dict[str, Callable[[], bytes | None]] = {
            "not_json": self.not_json,
            "invalid_utf8": self.invalid_utf8,
            "truncated_json": self.truncated_json,
            "json_not_object": self.json_not_object,
            "missing_envelope_field": self.missing_envelope_field,
            "wrong_envelope_type": self.wrong_envelope_type,
            "unknown_event_type": self.unknown_event_type,
            "wrong_topic": self.wrong_topic,
            "wrong_schema_version": self.wrong_schema_version,
            "bad_payload": self.bad_payload,
            "empty_strings": self.empty_strings,
            "huge_strings": self.huge_strings,
            "tombstone": lambda: None,
        }
        self.counts: Counter[str] = Counter()

    def template(self, among: list[Json] | None = None) -> Json:
        """A copy of a valid envelope under a fresh event id: a refused record must not share the id of a valid
        one, else (if it decodes) the agents drop it as a duplicate before folding it, as they should."""
        return _set(self.rng.choice(among or self.templates), ("event_id",), f"bad{self.rng.getrandbits(64):016x}")

    def not_json(self) -> bytes:
        r = self.rng
        return r.choice([b" ", b"\n", b"not json at all", b"{", b"}", b"[1,", b"{'single': 'quotes'}", b"NaN",
                         b"\x00\x01\x02", r.randbytes(r.randrange(1, 64)) + b"\x00"])

    def invalid_utf8(self) -> bytes:
        return b'{"event_type": "' + self.rng.randbytes(4).replace(b'"', b"x") + b'\xff\xfe"}'

    def truncated_json(self) -> bytes:
        data = orjson.dumps(self.template())
        return data[: self.rng.randrange(1, len(data) - 1)]

    def json_not_object(self) -> bytes:
        return orjson.dumps(self.rng.choice([[], [self.template()], 1, -2.5, "segments_published", None, True]))

    def missing_envelope_field(self) -> bytes:
        return orjson.dumps(_set(self.template(), (self.rng.choice(_ENVELOPE_FIELDS),), _DELETE))

    def wrong_envelope_type(self) -> bytes:
        name = self.rng.choice(sorted(_WRONG_TYPES))
        return orjson.dumps(_set(self.template(), (name,), self.rng.choice(_WRONG_TYPES[name])))

    def unknown_event_type(self) -> bytes:
        name = self.rng.choice(["nope", "SegmentsPublished", "segments_published ", "segment-announced",
                                f"evt_{self.rng.getrandbits(32):x}", "lock_request"])
        return orjson.dumps(_set(self.template(), ("event_type",), name))

    def wrong_topic(self) -> bytes:
        return orjson.dumps(self.rng.choice(self.foreign))

    def wrong_schema_version(self) -> bytes:
        t = self.template()
        version = self.rng.choice([0, -1, t["schema_version"] + 1, 99, 2**31])
        return orjson.dumps(_set(t, ("schema_version",), version))

    def bad_payload(self) -> bytes:
        event_type, path, value = self.rng.choice(self.mutations)
        return orjson.dumps(_set(self.template(self.by_type[event_type]), path, value))

    def empty_strings(self) -> bytes:
        field = self.rng.choice(["event_type", "event_id", "occurred_at", "causation_id"])
        return orjson.dumps(_set(self.template(), (field,), ""))

    def huge_strings(self) -> bytes:
        r = self.rng
        if r.random() < 0.02:  # a few big blobs (well under Kafka's 1 MB message limit)
            return b"x" * r.randrange(100_000, 400_000)
        field = r.choice(["event_id", "causation_id", "event_type"])
        return orjson.dumps(_set(self.template(), (field,), "e" * r.randrange(201, 20_000)))

    def make(self) -> tuple[str, bytes | None]:
        kind = self.rng.choice(sorted(self.kinds))
        value = self.kinds[kind]()
        reason = refusal(value, self.logical)
        assert reason is not None, f"generator kind {kind} made a valid {self.logical} record: {value!r}"
        self.counts[kind] += 1
        return kind, value

    def key(self) -> bytes | None:
        r = self.rng
        return r.choice([None, b"", b"ds1", b"wiki", r.randbytes(8), "dätä".encode()])


Item = tuple[bytes | None, bytes | None, bool]  # key, value, is_bad


def wire(rng: random.Random, e: Envelope[Event]) -> bytes:
    """A valid envelope's bytes; half of the ``task_finished`` ones in their older schema version 1 (valid: the
    decoder upcasts them, so they must not be dead-lettered)."""
    if e.event_type == "task_finished" and e.event.status == "success" and rng.random() < 0.5:  # type: ignore[attr-defined]
        obj = e.to_json()
        obj["schema_version"] = 1
        obj["payload"] = {"taskId": obj["payload"]["taskId"], "success": True}
        value = orjson.dumps(obj)
        assert decode(value) == e
        return value
    return encode(e)


def interleave(rng: random.Random, valid: list[Envelope[Event]], bad: BadRecords, n_bad: int) -> list[Item]:
    """The valid envelopes in order, with ``n_bad`` bad records inserted at random points."""
    slots = sorted(rng.randrange(len(valid) + 1) for _ in range(n_bad))
    out: list[Item] = []
    j = 0
    for i, e in enumerate(valid):
        while j < n_bad and slots[j] == i:
            out.append((bad.key(), bad.make()[1], True))
            j += 1
        out.append((e.key.encode(), wire(rng, e), False))
    while j < n_bad:
        out.append((bad.key(), bad.make()[1], True))
        j += 1
    return out



def test_10k_bad_payloads_go_to_deadletter_and_every_valid_event_is_applied(
    kafka_bootstrap: str, topics: Topics, tmp_path: Path
) -> None:
    rng = random.Random(SEED)
    seg_valid = segment_stream(rng, 3000)
    lr_valid = [e for e in request_stream(rng, 400) if not isinstance(e, bytes)]
    seg_json = [e.to_json() for e in seg_valid]
    lr_json = [e.to_json() for e in lr_valid]
    n_seg_bad = N_BAD * 6 // 10
    seg_bad = BadRecords(rng, SEGMENTS, seg_json, lr_json)
    lr_bad = BadRecords(rng, LOCK_REQUESTS, lr_json, seg_json)
    plan = {
        topics.name(SEGMENTS): interleave(rng, seg_valid, seg_bad, n_seg_bad),
        topics.name(LOCK_REQUESTS): interleave(rng, lr_valid, lr_bad, N_BAD - n_seg_bad),
    }
    assert set(seg_bad.counts) == set(seg_bad.kinds) and set(lr_bad.counts) == set(lr_bad.kinds)

    # everything is in the log before the service starts: positions are those of the plan (1 partition each)
    producer = EventProducer(kafka_bootstrap, topics)
    for topic, items in plan.items():
        for key, value, _ in items:
            producer.send_raw(topic, key, value)
    producer.flush(60)
    bad_positions: dict[tuple[str, int, int], tuple[bytes | None, bytes | None]] = {}
    for topic, items in plan.items():
        logged = read_all(kafka_bootstrap, topic)
        assert [(r.key, r.value) for r in logged] == [(k, v) for k, v, _ in items]
        bad_positions.update({(topic, 0, i): (k, v) for i, (k, v, bad) in enumerate(items) if bad})
    assert len(bad_positions) == N_BAD

    seg_topic, lr_topic = topics.name(SEGMENTS), topics.name(LOCK_REQUESTS)
    n_seg_mine = len(plan[seg_topic])
    lockbox_expected = lockbox_fold(read_all(kafka_bootstrap, lr_topic))
    assert lockbox_expected.bad == N_BAD - n_seg_bad

    service = Service(kafka_bootstrap, topics, tmp_path / "state", tmp_path / "run.log")
    started = time.monotonic()
    service.start()
    try:
        def lockbox_done() -> bool:
            published = [r for r in read_all(kafka_bootstrap, seg_topic) if r.offset >= n_seg_mine]
            return (len(dedup(read_all(kafka_bootstrap, topics.name(LOCKS)))) >= len(lockbox_expected.locks)
                    and len(dedup(published)) >= len(lockbox_expected.segments))

        wait_for("lockbox decisions and publishes", lockbox_done, service, 60)
        from tests.integration.test_service_timeline import pure_fold as timeline_fold

        timeline_expected = timeline_fold(read_all(kafka_bootstrap, seg_topic))
        wait_for("visibility changes", lambda: count_distinct_ids(kafka_bootstrap, topics.name(TIMELINE))
                 >= len(timeline_expected.outputs), service, 60)

        def letter_positions() -> set[tuple[str, int, int]]:
            return {(e.event.topic, e.event.partition, e.event.offset)  # type: ignore[attr-defined]
                    for e in (decode(r.value) for r in read_all(kafka_bootstrap, topics.name(DEADLETTER)))}

        try:
            wait_for("10k dead letters", lambda: len(letter_positions()) >= N_BAD, service, 60)
        except AssertionError:
            missing = sorted(set(bad_positions) - letter_positions())
            raise AssertionError(f"{len(missing)} bad records not dead-lettered, e.g. "
                                 f"{[(p, bad_positions[p]) for p in missing[:5]]}") from None
        took = time.monotonic() - started
        assert service.alive()
    finally:
        if service.alive():
            assert service.stop() == 0

    # the timeline: state and deduplicated output equal the pure fold; the fold refuses exactly the bad ones
    assert {(seg_topic, p, o) for p, o in timeline_expected.bad_offsets} == {
        pos for pos in bad_positions if pos[0] == seg_topic}
    outcome = check_agent_equals_fold(kafka_bootstrap, topics, tmp_path / "state")

    # the lockbox: decisions, publishes and stored requests equal the pure fold
    assert dedup(read_all(kafka_bootstrap, topics.name(LOCKS))) == lockbox_expected.locks
    published = [r for r in read_all(kafka_bootstrap, seg_topic) if r.offset >= n_seg_mine]
    assert dedup(published, SegmentsPublished) == lockbox_expected.segments
    with AgentStateStore(tmp_path / "state" / LB_STORE, LB_FORMAT) as store:
        assert [e.event_id for e in stored_requests(store)] == lockbox_expected.applied
        assert store.offsets() == {(lr_topic, 0): len(plan[lr_topic])}

    # dead letters: exactly the bad records, by position, with a reason and the original bytes
    letters: dict[tuple[str, int, int], list[DeadLettered]] = {}
    for r in read_all(kafka_bootstrap, topics.name(DEADLETTER)):
        letter = decode(r.value).event
        assert isinstance(letter, DeadLettered)
        letters.setdefault((letter.topic, letter.partition, letter.offset), []).append(letter)
    assert set(letters) == set(bad_positions)
    for pos, found in letters.items():
        key, value = bad_positions[pos]
        for letter in found:
            assert letter.reason.strip(), pos
            assert (None if letter.original_value is None else base64.b64decode(letter.original_value)) == value
            assert (None if letter.original_key is None else base64.b64decode(letter.original_key)) == key
    print(f"{len(seg_valid)} valid segments events, {len(lr_valid)} valid requests, {N_BAD} bad "
          f"({dict(seg_bad.counts)} on segments, {dict(lr_bad.counts)} on lock-requests); "
          f"{len(outcome.expected.outputs)} visibility changes, {len(lockbox_expected.locks)} decisions; "
          f"service done in {took:.1f}s")



def test_dead_letter_of_an_empty_key_or_value_decodes(kafka_bootstrap: str, topics: Topics, tmp_path: Path) -> None:
    producer = EventProducer(kafka_bootstrap, topics)
    producer.send_raw(topics.name(SEGMENTS), b"", b"not json")
    producer.send_raw(topics.name(LOCK_REQUESTS), b"ds1", b"")
    producer.flush()
    service = Service(kafka_bootstrap, topics, tmp_path / "state", tmp_path / "run.log")
    service.start()
    try:
        wait_for("2 dead letters", lambda: len(read_all(kafka_bootstrap, topics.name(DEADLETTER))) >= 2, service, 60)
    finally:
        assert service.stop() == 0
    letters = [decode(r.value).event for r in read_all(kafka_bootstrap, topics.name(DEADLETTER))]
    assert {(lt.original_key, lt.original_value) for lt in letters} == {  # type: ignore[attr-defined]
        ("", base64.b64encode(b"not json").decode()), (base64.b64encode(b"ds1").decode(), "")}
