"""What every agent does first with a record: the seal verdict is computed once per record and key.

What a user would notice when this fails: a forged publish taken by one agent of the worker and refused by
another (the timeline and upsert agents read the same record objects), or a verdict reached under one key
reused under another.
"""

from __future__ import annotations

from unittest import mock

from coordinator.locks import seal
from coordinator.locks.seal import seal_publish, use_refusal
from events import Envelope, Interval, SegmentDescriptor, encode
from events.segments import SegmentsPublished
from streaming.service import intake
from streaming.service.intake import InputRecord

KEY = b"intake-key"


def _record(sealed_with: bytes | None) -> InputRecord:
    seg = SegmentDescriptor("wiki", Interval.parse("2026-01-01/P1D"), "v1", 0, 10)
    env = Envelope(SegmentsPublished(task_id="t", segments=(seg,)), "e1", 0, "wiki", "r1")
    if sealed_with is not None:
        env = seal_publish(env, "d1", sealed_with)
    return InputRecord("p.segments", 0, 7, b"wiki", encode(env), 1)


def test_the_verdict_is_use_refusal_s_whatever_the_key_asked_before() -> None:
    for sealed_with in (KEY, b"another key", None):
        rec = _record(sealed_with)
        for key in (KEY, b"another key", KEY):
            assert rec.refusal(rec.decoded(), key) == use_refusal(rec.decoded(), key)


def test_a_second_agent_asking_the_same_record_does_not_check_the_seal_again() -> None:
    rec = _record(KEY)
    with mock.patch.object(intake, "use_refusal", wraps=seal.use_refusal) as checked:  # (the check, either way)
        assert rec.refusal(rec.decoded(), KEY) is None
        assert rec.refusal(rec.decoded(), KEY) is None
        assert checked.call_count == 1
        assert rec.refusal(rec.decoded(), b"another key") is not None  # another key: checked anew
        assert checked.call_count == 2
