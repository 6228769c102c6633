"""Every event type: decode(encode(e)) == e, deterministic bytes, and validation that names the field."""

from __future__ import annotations

import functools

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from events import (
    Envelope,
    Event,
    EventValidationError,
    Instant,
    SegmentAnnounced,
    all_event_classes,
    decode,
    encode,
    event_class,
)
from streaming.examples import example_envelopes
from tests.strategies import events_of, instants, names

ALL = all_event_classes()


def test_registry_holds_every_type_of_the_design() -> None:
    design = {
        "task_started", "lock_requested", "segment_allocation_requested", "publish_requested", "task_finished",
        "lock_granted", "lock_waiting", "lock_denied", "lock_revoked", "lock_released", "segment_allocated",
        "publish_rejected", "segments_published", "segments_marked_unused", "segment_announced",
        "segment_unannounced", "server_joined", "server_left", "server_decommissioned", "server_recommissioned",
        "rules_set", "dynamic_config_set", "segment_visibility_changed", "load_segment", "drop_segment",
        "dead_lettered", "publish_accepted", "task_registered", "task_deregistered", "segment_load_refused",
        "cancel_segment_load", "segments_marked_used", "lock_release_requested", "server_heartbeat", "server_lost",
        "upsert_table_set", "upsert_consolidation_asked", "consolidation_requested",
        "segments_import_requested", "segments_imported", "segments_import_rejected",
        "segments_mark_unused_requested", "segments_mark_used_requested", "segments_mark_rejected",
    }
    assert {c.event_type for c in ALL} == design


@functools.cache
def envelopes_of(cls: type[Event]) -> st.SearchStrategy[Envelope[Event]]:
    return st.builds(
        Envelope,
        events_of(cls),
        names,
        instants.map(Instant),
        st.text(max_size=20),
        st.one_of(st.none(), names),
    )


@pytest.mark.parametrize("cls", ALL, ids=lambda c: c.event_type)
@settings(max_examples=60)
@given(data=st.data())
def test_round_trip(cls: type[Event], data: st.DataObject) -> None:
    env = data.draw(envelopes_of(cls))
    raw = encode(env)
    back = decode(raw)
    assert back == env
    assert encode(back) == raw  # same envelope, same bytes


def test_envelope_shape_matches_the_design() -> None:
    env = example_envelopes(1_763_719_200_000)[0]
    obj = orjson.loads(encode(env))
    assert list(obj) == ["event_type", "schema_version", "event_id", "occurred_at", "key", "causation_id",
                         "payload"]
    assert obj["occurred_at"] == "2025-11-21T10:00:00.000Z"


def _valid(event_type: str) -> dict:
    for env in example_envelopes(0):
        if env.event_type == event_type:
            return orjson.loads(encode(env))
    raise KeyError(event_type)


@pytest.mark.parametrize(
    ("event_type", "mutate", "field"),
    [
        ("segment_announced", lambda o: o["payload"].pop("server"), "payload.server"),
        ("segment_announced", lambda o: o["payload"].__setitem__("server", 7), "payload.server"),
        ("segment_announced", lambda o: o["payload"]["segment"].__setitem__("interval", "2026-01-02/2026-01-01"),
         "payload.segment.interval"),
        ("segment_announced", lambda o: o["payload"]["segment"].__setitem__("interval", "2026-01-01/2026-01-01"),
         "payload.segment.interval"),
        ("segment_announced", lambda o: o["payload"]["segment"].__setitem__("size", -1), "payload.segment.size"),
        ("segment_announced", lambda o: o["payload"]["segment"].__setitem__("partitionId", True),
         "payload.segment.partitionId"),
        ("segments_published", lambda o: o["payload"].__setitem__("segments", []), "payload.segments"),
        ("segments_published", lambda o: o["payload"]["segments"][0].__setitem__("overshadowedSegments", ["1"]),
         "payload.segments[0].overshadowedSegments[0]"),
        ("segments_published", lambda o: o["payload"]["segments"][0].__setitem__("atomicUpdateGroup", [0, -2]),
         "payload.segments[0].atomicUpdateGroup[1]"),
        ("lock_requested", lambda o: o["payload"].__setitem__("lockType", "sharedd"), "payload.lockType"),
        ("lock_requested", lambda o: o["payload"].__setitem__("granularity", None), "payload.granularity"),
        ("segment_allocation_requested", lambda o: o["payload"].__setitem__("timestamp", "noon"),
         "payload.timestamp"),
        ("task_finished", lambda o: o["payload"].__setitem__("status", "done"), "payload.status"),
        ("rules_set", lambda o: o["payload"].__setitem__("rules", [3]), "payload.rules[0]"),
        ("server_joined", lambda o: o["payload"].__setitem__("maxSizeBytes", -5), "payload.maxSizeBytes"),
        ("load_segment", lambda o: o.__setitem__("event_type", "load_segmnt"), "event_type"),
        ("load_segment", lambda o: o.__setitem__("schema_version", 99), "schema_version"),
        ("load_segment", lambda o: o.__setitem__("schema_version", "1"), "schema_version"),
        ("load_segment", lambda o: o.__setitem__("event_id", ""), "event_id"),
        ("load_segment", lambda o: o.__setitem__("occurred_at", "2026-02-30T00:00:00Z"), "occurred_at"),
        ("load_segment", lambda o: o.__setitem__("key", None), "key"),
        ("load_segment", lambda o: o.__setitem__("payload", []), "payload"),
    ],
)
def test_invalid_events_name_the_field(event_type: str, mutate, field: str) -> None:  # type: ignore[no-untyped-def]
    obj = _valid(event_type)
    mutate(obj)
    with pytest.raises(EventValidationError) as info:
        decode(orjson.dumps(obj))
    assert info.value.field == field
    assert str(info.value).startswith(field + ":")


@pytest.mark.parametrize("raw", [b"", b"{", b"\xff\xfe", b"[]", b"null", b'"text"', None])
def test_undecodable_bytes(raw: bytes | None) -> None:
    with pytest.raises(EventValidationError):
        decode(raw)


def test_unknown_payload_fields_are_ignored_for_forward_compatibility() -> None:
    obj = _valid("segment_announced")
    obj["payload"]["addedInAFutureVersion"] = {"x": 1}
    env = decode(orjson.dumps(obj))
    assert isinstance(env.event, SegmentAnnounced)


def test_partition_id_defaults_to_druids_shard_spec_partition_num() -> None:
    obj = _valid("segment_announced")
    seg = obj["payload"]["segment"]
    del seg["partitionId"]
    seg["shardSpec"] = {"type": "numbered", "partitionNum": 4, "partitions": 6}
    env = decode(orjson.dumps(obj))
    assert isinstance(env.event, SegmentAnnounced)
    assert env.event.segment.partition_id == 4
    assert env.event.segment.core_partitions == 6


def test_event_class_lookup() -> None:
    assert event_class("segment_announced") is SegmentAnnounced
    assert event_class("nope") is None
