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


@pytest.mark.parametrize("path", sorted((GOLDEN / "compat").glob("*.json")), ids=lambda p: p.stem)
def test_bytes_from_before_additive_changes_still_decode(path: Path) -> None:
    env = decode(path.read_bytes())
    assert decode(encode(env)) == env


def test_additive_fields_take_their_defaults() -> None:
    from events import SegmentAllocated

    env = decode((GOLDEN / "compat" / "segment_allocated_without_sequence_fields.json").read_bytes())
    assert isinstance(env.event, SegmentAllocated)
    assert (env.event.sequence_name, env.event.previous_segment_id, env.event.skip_lineage_check) == (None, None, False)
