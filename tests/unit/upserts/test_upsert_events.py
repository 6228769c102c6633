"""The upsert events and the descriptor field ``upsertPartitions`` on the wire: pinned bytes, round trips, errors
that name the field path, and descriptors written before the field existed."""

from __future__ import annotations

from pathlib import Path

import orjson
import pytest

from events import EventValidationError, SegmentsPublished, decode, encode
from events.keys import partition_key
from events.upserts import ConsolidationRequested, UpsertConsolidationAsked, UpsertTableSet

GOLDEN = Path(__file__).parent.parent.parent / "golden"


def published_with_partitions() -> dict:  # type: ignore[type-arg]
    doc = orjson.loads((GOLDEN / "current" / "segments_published.json").read_bytes())
    doc["payload"]["segments"][0]["upsertPartitions"] = [
        {"key": {"source": "Facebook", "date": "2021-01-01"}, "version": "ver1", "rows": 12, "tombstone": False},
        {"key": {"source": "Adwords", "date": "2021-01-01"}, "version": "ver1"},
    ]
    return doc  # type: ignore[no-any-return]


def test_upsert_partitions_round_trip_with_defaults() -> None:
    env = decode(orjson.dumps(published_with_partitions()))
    assert isinstance(env.event, SegmentsPublished)
    parts = env.event.segments[0].upsert_partitions
    assert parts is not None and [(p.key["source"], p.rows, p.tombstone) for p in parts] == [
        ("Facebook", 12, False), ("Adwords", 0, False)]
    assert decode(encode(env)) == env


def test_descriptors_without_the_field_still_decode_and_reencode_unchanged() -> None:
    raw = (GOLDEN / "current" / "segments_published.json").read_bytes().rstrip(b"\n")
    env = decode(raw)
    assert env.event.segments[0].upsert_partitions is None  # type: ignore[attr-defined]
    assert encode(env) == raw


@pytest.mark.parametrize(("mutate", "field"), [
    (lambda p: p.pop("version"), "payload.segments[0].upsertPartitions[0].version"),
    (lambda p: p.update(rows=-1), "payload.segments[0].upsertPartitions[0].rows"),
    (lambda p: p.update(tombstone="yes"), "payload.segments[0].upsertPartitions[0].tombstone"),
    (lambda p: p.update(key=["Facebook"]), "payload.segments[0].upsertPartitions[0].key"),
])
def test_bad_upsert_partitions_name_the_field(mutate, field: str) -> None:  # type: ignore[no-untyped-def]
    doc = published_with_partitions()
    mutate(doc["payload"]["segments"][0]["upsertPartitions"][0])
    with pytest.raises(EventValidationError) as e:
        decode(orjson.dumps(doc))
    assert e.value.field == field


def test_table_set_payload_names_are_pinned_and_optional_fields_default() -> None:
    doc = orjson.loads((GOLDEN / "current" / "upsert_table_set.json").read_bytes())
    assert list(doc["payload"])[:6] == ["name", "appendDataSource", "primaryDataSource", "keyColumns",
                                         "versionColumn", "tableTypeColumn"]
    assert doc["payload"]["tableTypeColumn"] == "table_type"
    for name in ("upsertStaleGraceMillis", "consolidationPeriodMillis", "tableTypeColumn"):
        del doc["payload"][name]
    env = decode(orjson.dumps(doc))
    assert isinstance(env.event, UpsertTableSet)
    assert (env.event.table_type_column, env.event.stale_grace_millis, env.event.consolidation_period_millis) == (
        "table_type", 900_000, 86_400_000)
    doc["payload"]["keyColumns"] = []
    with pytest.raises(EventValidationError, match=r"payload\.keyColumns"):
        decode(orjson.dumps(doc))


def test_upsert_events_are_keyed_by_table() -> None:
    assert partition_key(UpsertConsolidationAsked(table="ads")) == "upserts/ads"
    assert partition_key(ConsolidationRequested(table="ads", intervals=(), reason="")) == "upserts/ads"
