"""Golden files: the bytes of every event type as this build writes them, and old payloads it must still read.

``tests/golden/current/<event_type>.json`` holds the encoded example of each
type: a change to the wire format shows up here as a diff. Regenerate on purpose
only, with ``SEGCOORD_UPDATE_GOLDEN=1 pytest tests/unit/test_golden.py``.
``tests/golden/v1/`` holds bytes written by schema version 1 of types since
bumped; they must decode (upcast) to today's value forever. ``tests/golden/compat/``
holds bytes written before an additive change (a new field with a default):
they must still decode, with the default.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from events import TaskFinished, decode, encode
from events.commands import DropSegment, LoadSegment, drop_segment_v1_to_v2, load_segment_v1_to_v2
from events.tasks import task_finished_v1_to_v2
from streaming.examples import example_envelopes

GOLDEN = Path(__file__).parent.parent / "golden"
EXAMPLES = {e.event_type: e for e in example_envelopes(1_795_219_200_000)}


@pytest.mark.parametrize("event_type", sorted(EXAMPLES))
def test_current_bytes(event_type: str) -> None:
    path = GOLDEN / "current" / f"{event_type}.json"
    raw = encode(EXAMPLES[event_type])
    if os.environ.get("SEGCOORD_UPDATE_GOLDEN") == "1":
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(raw + b"\n")
    stored = path.read_bytes().rstrip(b"\n")
    assert raw == stored, f"wire format of {event_type} changed; bump schema_version and add an upcaster"
    assert decode(stored) == EXAMPLES[event_type]


def test_v1_task_finished_is_upcast_to_v2() -> None:
    for name, status in (("task_finished_success.json", "success"), ("task_finished_failure.json", "failed")):
        raw = (GOLDEN / "v1" / name).read_bytes()
        assert b'"schema_version":1' in raw and b'"success"' in raw
        env = decode(raw)
        assert env.event == TaskFinished(task_id="index_parallel_wiki_2026", status=status)  # type: ignore[arg-type]
        assert env.schema_version == 2
        assert b'"status"' in encode(env)


def test_upcaster_is_pure_and_leaves_malformed_v1_to_validation() -> None:
    payload = {"taskId": "t", "success": True}
    assert task_finished_v1_to_v2(payload) == {"taskId": "t", "status": "success"}
    assert payload == {"taskId": "t", "success": True}
    assert task_finished_v1_to_v2({"taskId": "t"}) == {"taskId": "t"}


@pytest.mark.parametrize(("name", "purpose"), [
    ("load_segment_first_copy.json", "loading"),
    ("load_segment_replica.json", "replica"),
    ("load_segment_broadcast.json", "broadcast"),
    ("load_segment_spark_move.json", "balancing"),
    ("drop_segment_draining_move.json", "decommissioning"),
    ("drop_segment_balancing_move.json", "balancing"),
    ("drop_segment_over_replicated.json", "unloading"),
])
def test_v1_commands_are_upcast_with_their_purpose(name: str, purpose: str) -> None:
    """Commands written before ``purpose`` existed get the one their move id and reason meant; everything else
    they said is kept, and they re-encode as version 2."""
    raw = (GOLDEN / "v1" / name).read_bytes()
    assert b'"schema_version":1' in raw and b'"purpose"' not in raw
    env = decode(raw)
    assert isinstance(env.event, LoadSegment | DropSegment)
    assert env.event.purpose == purpose and env.schema_version == 2
    assert b'"purpose":"%s"' % purpose.encode() in encode(env)
    assert decode(encode(env)) == env


def test_command_upcasters_are_pure_and_keep_a_given_purpose() -> None:
    payload = {"commandId": "c", "reason": "draining h1", "moveId": "m"}
    assert load_segment_v1_to_v2(payload) == {**payload, "purpose": "decommissioning"}
    assert payload == {"commandId": "c", "reason": "draining h1", "moveId": "m"}
    assert drop_segment_v1_to_v2({"commandId": "c", "reason": "r", "purpose": "balancing"})["purpose"] == "balancing"
    assert load_segment_v1_to_v2({"commandId": "c", "reason": 7}) == {"commandId": "c", "reason": 7}


def test_a_command_without_a_known_purpose_is_refused_by_name() -> None:
    import orjson

    from events import EventValidationError

    doc = orjson.loads((GOLDEN / "current" / "load_segment.json").read_bytes())
    doc["payload"]["purpose"] = "tidying"
    with pytest.raises(EventValidationError, match=r"payload\.purpose"):
        decode(orjson.dumps(doc))
    del doc["payload"]["purpose"]
    with pytest.raises(EventValidationError, match=r"payload\.purpose"):
        decode(orjson.dumps(doc))


@pytest.mark.parametrize("path", sorted((GOLDEN / "compat").glob("*.json")), ids=lambda p: p.stem)
def test_bytes_from_before_additive_changes_still_decode(path: Path) -> None:
    env = decode(path.read_bytes())
    assert decode(encode(env)) == env


def test_additive_fields_take_their_defaults() -> None:
    from events import SegmentAllocated

    env = decode((GOLDEN / "compat" / "segment_allocated_without_sequence_fields.json").read_bytes())
    assert isinstance(env.event, SegmentAllocated)
    assert (env.event.sequence_name, env.event.previous_segment_id, env.event.skip_lineage_check) == (None, None, False)


def test_an_unannounce_from_before_the_reason_field_is_the_server_s_own() -> None:
    from events import SegmentUnannounced

    env = decode((GOLDEN / "compat" / "segment_unannounced_without_reason.json").read_bytes())
    assert isinstance(env.event, SegmentUnannounced) and env.event.reason is None
