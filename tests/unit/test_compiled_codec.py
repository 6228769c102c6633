"""The generated codec (events.compiled) against the reflective one (events.schema), its oracle.

What a user would notice: a valid event decodes to the same envelope whichever
path runs, and a broken one is refused with the same message (field path and
reason, byte for byte). Inputs are every event type's valid envelope, broken
at one random place (a key removed, or a value swapped for one of the values
that break codecs: wrong types, empty strings, negative ints, booleans,
floats, bad instants and intervals, nested garbage).
"""

from __future__ import annotations

import copy
import dataclasses
from typing import Any
from unittest import mock

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import events.envelope as envelope_module
from events import Envelope, Event, EventValidationError, SegmentDescriptor, all_event_classes, decode, encode
from events.compiled import FAIL, compile_decoder, compile_encoder
from events.envelope import from_json_checked
from events.schema import decode_record, decode_record_reflective, encode_record_reflective
from streaming.examples import example_envelopes
from tests.strategies import events_of, instants, json_values, names

ALL = all_event_classes()

NASTY: list[Any] = [
    None, "", "x", " ", 0, -1, 1, 2**40, True, False, 1.5, -0.0, [], [1], [-1], ["a"], [None], [{}], {}, {"a": 1},
    "2026-01-01", "2026-01-01T00:00:00.000Z", "2026-02-30T00:00:00Z", "2026-01-01/2026-01-02",
    "2026-01-02/2026-01-01", "2026-01-01/2026-01-01", "2026-01-01/P1D", "P1D/2026-01-02", "noon", "shared",
    "exclusive", "SUCCESS", "timeChunk", "a" * 201,
]


def _paths(value: Any, path: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    out = [path] if path else []
    if isinstance(value, dict):
        for k, v in value.items():
            out += _paths(v, (*path, k))
    elif isinstance(value, list):
        for i, v in enumerate(value):
            out += _paths(v, (*path, i))
    return out


def _reference(obj: Any) -> Envelope[Event]:
    """The reflective codec alone: from_json_checked with the reflective record decoder."""
    return from_json_checked(obj, decode_record_reflective)


def _outcome(fn: Any, obj: Any) -> tuple[str, str]:
    try:
        env = fn(obj)
    except EventValidationError as e:
        return "error", f"{e.field}|{e.problem}|{e}"
    return "ok", repr(env)  # repr tells 1 from True and from 1.0, which == does not


@st.composite
def broken_envelopes(draw: st.DrawFn) -> dict[str, Any]:
    cls = draw(st.sampled_from(ALL))
    env = Envelope(draw(events_of(cls)), draw(names), draw(instants), draw(st.text(max_size=8)),
                   draw(st.one_of(st.none(), names)))
    obj: dict[str, Any] = orjson.loads(encode(env))
    for _ in range(draw(st.integers(0, 2))):
        path = draw(st.sampled_from(_paths(obj)))
        parent = obj
        for step in path[:-1]:
            parent = parent[step]
        if isinstance(parent, dict) and draw(st.booleans()):
            del parent[path[-1]]
        else:
            # A copy: a later step may delete inside this value, and NASTY must stay what it is
            # (mutating it changed later draws and made Hypothesis report a flaky strategy).
            parent[path[-1]] = copy.deepcopy(draw(st.one_of(st.sampled_from(NASTY), json_values)))
    return obj


@settings(max_examples=600, deadline=None)
@given(obj=broken_envelopes())
def test_generated_decoder_agrees_with_the_reflective_one(obj: dict[str, Any]) -> None:
    assert _outcome(envelope_module.from_json, obj) == _outcome(_reference, obj)
    raw = orjson.dumps(obj)
    assert _outcome(decode, raw) == _outcome(lambda o: _reference(orjson.loads(o)), raw)


@pytest.mark.parametrize("cls", ALL, ids=lambda c: c.event_type)
@settings(max_examples=40, deadline=None)
@given(data=st.data())
def test_generated_encoder_writes_what_the_reflective_one_writes(cls: type[Event], data: st.DataObject) -> None:
    event = data.draw(events_of(cls))
    fast = compile_encoder(cls)(event)
    assert list(fast.items()) == list(encode_record_reflective(event).items())
    assert orjson.dumps(fast) == orjson.dumps(encode_record_reflective(event))


def test_every_example_takes_the_generated_path() -> None:
    """The fast path is no fast path if valid events fall back to the reflective codec."""
    for env in example_envelopes(1_795_219_200_000):
        payload = orjson.loads(encode(env))["payload"]
        assert compile_decoder(type(env.event))(payload) is not FAIL, env.event_type
        with mock.patch.object(envelope_module, "from_json_checked", side_effect=AssertionError("slow path")):
            assert decode(encode(env)) == env


def test_records_built_without_init_are_ordinary_frozen_records() -> None:
    env = next(e for e in example_envelopes(0) if e.event_type == "segments_published")
    back = decode(encode(env))
    seg = back.event.segments[0]  # type: ignore[attr-defined]
    assert type(back) is Envelope and type(seg) is SegmentDescriptor
    original = env.event.segments[0]  # type: ignore[attr-defined]
    assert seg == original and seg.id == original.id and hash(seg.id) == hash(original.id)
    with pytest.raises(dataclasses.FrozenInstanceError):
        seg.size = 1  # type: ignore[misc]
    with pytest.raises(dataclasses.FrozenInstanceError):
        back.key = "other"  # type: ignore[misc]


def test_decode_record_keeps_the_callers_path_in_errors() -> None:
    with pytest.raises(EventValidationError) as info:
        decode_record(SegmentDescriptor, {"dataSource": "ds", "interval": "2026-01-01/P1D", "version": ""},
                      "segments[3]")
    assert str(info.value) == "segments[3].version: must not be empty (got '')"


def test_a_type_compiled_on_one_thread_is_waited_for_by_another() -> None:
    """A worker encodes on its event loop and on its planner thread: the second thread asking for a type whose
    compilation the first has begun waits for it (it used to call the placeholder and recurse until
    RecursionError, which killed the timeline agent of a worker)."""
    import threading
    from dataclasses import dataclass

    from events import compiled
    from events.schema import wire

    @dataclass(frozen=True, slots=True)
    class Fresh:
        name: str = wire("name")

    started, release = threading.Event(), threading.Event()
    real = compiled._function

    def slow(src, name):  # type: ignore[no-untyped-def]
        started.set()
        release.wait(10)
        return real(src, name)

    compiled._function = slow  # type: ignore[assignment]
    try:
        first = threading.Thread(target=compiled.compile_encoder, args=(Fresh,))
        first.start()
        assert started.wait(10)
        out: list[object] = []
        second = threading.Thread(target=lambda: out.append(compiled.compile_encoder(Fresh)(Fresh("x"))))
        second.start()
        release.set()
        first.join(10)
        second.join(10)
    finally:
        compiled._function = real  # type: ignore[assignment]
    assert out == [{"name": "x"}]
