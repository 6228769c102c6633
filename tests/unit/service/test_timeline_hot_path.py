"""The timeline agent's shortcuts give the answers of the plain functions they stand for, byte for byte.

What a user would notice when this fails: a stored fact or a visibility change whose bytes differ from what the
agent wrote before (a restarted worker reads its store differently, consumers see new records), an id text the
store forgets (an unannounce after a restart resolved to another segment), or a forged publish or mark taken as
the coordinator's (or a genuine one dead-lettered) because the seal was checked over the message as read.
"""

from __future__ import annotations

import gc
import random
from dataclasses import replace
from pathlib import Path
from typing import Any, get_args

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from bench.service import BytesSink
from coordinator.locks.seal import VOUCHED, seal_event, use_refusal
from coordinator.timeline.facts import FactsEncoder, SegmentFacts, facts_of, id_key, parse_id_key, restore
from coordinator.timeline.timelines import Timelines
from events import Envelope, Event, Interval, decode, encode
from events.ids import derived_event_id
from events.schema import EventValidationError, Instant
from events.segment import SegmentDescriptor, SegmentId
from events.segments import SegmentAnnounced, SegmentsMarkedUnused, SegmentsMarkedUsed, SegmentUnannounced
from events.topics import SEGMENTS, Topics
from events.visibility import SegmentState, SegmentVisibilityChanged
from streaming.credentials import publish_key
from streaming.service.intake import InputRecord
from streaming.service.state import AgentStateStore
from streaming.service.timeline_agent import FORMAT_VERSION, ChangeValues, TimelineAgent, _EventIds, stored_states
from streaming.service.timeline_facts import (
    SEG_PREFIX,
    all_facts,
    all_states,
    ids_of,
    touched_ids,
    unrecorded_ids,
)
from tests.integration.test_service_timeline import segment_stream

T0 = 1_795_219_200_000
DAY = 86_400_000
TOPICS = Topics("unit.")


def _stream(seed: int, n: int) -> list[Envelope[Event]]:
    """The benchmark's stream, plus marks used and ids whose text is ambiguous (version ``v_1`` partition 0 and
    version ``v`` partition 1 have the same text)."""
    rng = random.Random(seed)
    out = list(segment_stream(rng, n))
    twins = [SegmentDescriptor("ds0", Interval(T0, T0 + DAY), "v_1", 0, 5),
             SegmentDescriptor("ds0", Interval(T0, T0 + DAY), "v", 1, 5)]
    assert str(twins[0].id) == str(twins[1].id) and twins[0].id != twins[1].id
    extra: list[Event] = [SegmentAnnounced(server="h9", segment=twins[0]),
                          SegmentAnnounced(server="h9", segment=twins[1]),
                          SegmentUnannounced(server="h9", segment_id=str(twins[0].id)),
                          SegmentsMarkedUsed(segments=(twins[1], twins[0]), reason="r"),
                          SegmentAnnounced(server="h8", segment=twins[0]),
                          SegmentsMarkedUnused(segment_ids=(str(twins[0].id), "no-such-segment"), reason="r")]
    for i, ev in enumerate(extra):
        out.insert(rng.randrange(len(out)), Envelope(ev, f"x{i}", Instant(T0), "ds0"))
    return out


@pytest.mark.parametrize("capacity", [1, 7, 16_384])
def test_staged_facts_and_keys_are_those_of_the_facts(capacity: int) -> None:
    timelines, encoder = Timelines(), FactsEncoder(capacity)
    seen: set[SegmentId] = set()
    for env in _stream(3, 3000):
        try:
            sids = touched_ids(timelines, env.event)
            changes = timelines.apply(env.event)
        except EventValidationError:
            continue
        for sid in [*sids, *(c.segment_id for c in changes)]:
            seen.add(sid)
            facts = facts_of(timelines, sid)
            assert encoder.stage(timelines, sid) == (id_key(sid), None if facts is None else facts.to_bytes())
            assert encoder.key(sid) == id_key(sid)
    assert len(encoder._memo) <= capacity
    forgotten = [sid for sid in seen if facts_of(timelines, sid) is None]
    assert forgotten, "the stream forgets segments (unannounced, never used)"
    for sid in seen:  # later, from whatever the memo still holds
        facts = facts_of(timelines, sid)
        assert encoder.stage(timelines, sid) == (id_key(sid), None if facts is None else facts.to_bytes())


def test_ids_of_are_the_touched_and_the_unrecorded_ids() -> None:
    timelines = Timelines()
    kinds = set()
    for env in _stream(4, 3000):
        kinds.add(type(env.event))
        try:
            expected = (touched_ids(timelines, env.event), unrecorded_ids(timelines, env.event))
        except EventValidationError as e:
            with pytest.raises(EventValidationError) as got:
                ids_of(timelines, env.event)
            assert str(got.value) == str(e)
            continue
        touched, unrecorded = ids_of(timelines, env.event)
        assert (list(touched), list(unrecorded)) == expected
        timelines.apply(env.event)
    assert {SegmentAnnounced, SegmentUnannounced, SegmentsMarkedUnused} <= kinds


_STATES: tuple[SegmentState, ...] = get_args(SegmentState)


@settings(max_examples=200, deadline=None)
@given(data_source=st.text(min_size=1, max_size=8), version=st.text(min_size=1, max_size=6),
       partition=st.integers(0, 5), start=st.integers(-10**12, 10**13), length=st.integers(1, 10**10),
       cause=st.text(max_size=8), event_id=st.text(min_size=1, max_size=40), at=st.integers(-10**12, 10**13),
       old=st.sampled_from(_STATES), new=st.sampled_from(_STATES), capacity=st.integers(0, 3))
def test_an_output_value_is_the_encoded_envelope(data_source: str, version: str, partition: int, start: int,
                                                 length: int, cause: str, event_id: str, at: int, old: SegmentState,
                                                 new: SegmentState, capacity: int) -> None:
    sid = SegmentId(data_source, Interval(start, start + length), version, partition)
    values = ChangeValues(capacity)
    for _ in range(2):  # a miss, then (capacity > 0) a hit
        change = SegmentVisibilityChanged(segment_id=str(sid), data_source=data_source, interval=sid.interval,
                                          from_state=old, to_state=new)
        expected = encode(Envelope(change, event_id, Instant(at), data_source, cause))
        assert values.value(sid, old, new, event_id, ChangeValues.when(Instant(at), cause)) == \
            (data_source.encode(), expected)


@given(topic=st.text(min_size=1, max_size=20), partition=st.integers(0, 10**4), offset=st.integers(0, 10**15),
       index=st.integers(0, 10**3))
def test_output_ids_are_derived_event_ids(topic: str, partition: int, offset: int, index: int) -> None:
    ids = _EventIds()
    for _ in range(2):
        assert ids.of(topic, partition, offset, index) == derived_event_id(topic, partition, offset, index)


def test_the_agent_s_outputs_carry_the_derived_ids_of_their_input_s_position(tmp_path: Path) -> None:
    """Every visibility change the agent emits has ``derived_event_id(topic, partition, offset, index)`` of its input
    record (``index``: its place among that record's outputs), over two partitions of one batch: the ids a restarted
    worker re-emits under, which consumers drop by."""
    events = segment_stream(random.Random(11), 600)
    topic = TOPICS.name(SEGMENTS)
    records = [InputRecord(topic, i % 2, i // 2, None, encode(e), 1000 + i) for i, e in enumerate(events)]
    position = {e.event_id: (r.partition, r.offset) for e, r in zip(events, records, strict=True)}
    sink = BytesSink()
    with AgentStateStore(tmp_path / "s", FORMAT_VERSION) as store:
        agent = TimelineAgent(store, TOPICS, sink)
        for start in range(0, len(records), 200):
            agent.process(records[start:start + 200])
    index: dict[str, int] = {}
    outputs = [decode(v) for v in sink.values]
    assert len(outputs) > len(events) / 2
    for out in outputs:
        cause = out.causation_id
        assert cause is not None
        partition, offset = position[cause]
        i = index[cause] = index.get(cause, -1) + 1
        assert out.event_id == derived_event_id(topic, partition, offset, i)


# -- the seal, checked over the message as read ----------------------------------------------------------------
def _sealed_values() -> list[bytes]:
    """Publishes (sealed by the import path) and marks as the coordinator writes them."""
    out = [encode(e) for e in segment_stream(random.Random(5), 200)
           if e.event.event_type == "segments_published"][:20]
    mark = Envelope(SegmentsMarkedUnused(segment_ids=("ds0_x",), reason="r"), "m1", Instant(T0), "ds0")
    out.append(encode(seal_event(mark, publish_key())))
    VOUCHED.clear()  # every check below is a full one or the shortcut, never the memory of this process
    return out


def _mutations(value: bytes, rng: random.Random) -> list[bytes]:
    doc: dict[str, Any] = orjson.loads(value)
    out = [value, b" " + value.replace(b",", b", "),  # the same JSON, spaced: verifies, by the shortcut too
           orjson.dumps(doc, option=orjson.OPT_SORT_KEYS)]  # the same JSON, keys sorted
    for path in (("event_id",), ("key",), ("occurred_at",), ("causation_id",), ("payload", "seal")):
        changed = orjson.loads(value)
        target = changed
        for p in path[:-1]:
            target = target[p]
        original = target.get(path[-1])
        target[path[-1]] = "zz" + original[2:] if isinstance(original, str) else "zz"
        out.append(orjson.dumps(changed))
    extra = orjson.loads(value)
    extra["payload"]["unknown"] = 1  # a field the decoder ignores or refuses
    out.append(orjson.dumps(extra))
    no_seal = orjson.loads(value)
    no_seal["payload"].pop("seal")
    out.append(orjson.dumps(no_seal))
    older = orjson.loads(value)
    older["occurred_at"] = older["occurred_at"].replace(".000Z", "Z")  # another text of the same instant
    out.append(orjson.dumps(older))
    if "segments" in doc["payload"]:
        bigger = orjson.loads(value)
        bigger["payload"]["segments"][0]["size"] = bigger["payload"]["segments"][0].get("size", 0) + 1
        out.append(orjson.dumps(bigger))
        floats = orjson.loads(value)
        floats["payload"]["segments"][0]["size"] = float(floats["payload"]["segments"][0].get("size", 0))
        out.append(orjson.dumps(floats))
    return out


def test_the_seal_checked_over_the_message_as_read_gives_the_full_check_s_answer() -> None:
    rng = random.Random(6)
    verdicts = {True: 0, False: 0}
    for value in _sealed_values():
        for mutated in _mutations(value, rng):
            try:
                env = decode(mutated)
            except EventValidationError:
                continue
            for key in (publish_key(), b"another key"):
                full = use_refusal(env, key)
                assert use_refusal(env, key, mutated) == full
                rec = InputRecord(TOPICS.name(SEGMENTS), 0, 0, None, mutated)  # as the agents ask it
                assert rec.refusal(rec.decoded(), key) == full
                verdicts[full is None] += 1
    assert verdicts[True] > 0 and verdicts[False] > 0


def test_a_copied_seal_on_changed_contents_is_refused_with_the_message_as_read() -> None:
    [value, *_] = _sealed_values()
    doc = orjson.loads(value)
    doc["payload"]["segments"][0]["size"] += 1
    forged = orjson.dumps(doc)
    env = decode(forged)
    assert use_refusal(env, publish_key(), forged) == use_refusal(env, publish_key()) is not None
    unsealed = replace(env.event, seal=None)
    assert use_refusal(Envelope(unsealed, env.event_id, env.occurred_at, env.key, env.causation_id),
                       publish_key(), forged) is not None


def test_a_value_the_coordinator_wrote_verifies_without_re_encoding_its_envelope(
        monkeypatch: pytest.MonkeyPatch) -> None:
    import coordinator.locks.seal as seal

    values = _sealed_values()
    envs = [decode(v) for v in values]

    def no_encoding(env: Envelope[Any], key: bytes) -> str:
        raise AssertionError("re-encoded")

    monkeypatch.setattr(seal, "seal_of", no_encoding)
    for env, value in zip(envs, values, strict=True):
        assert use_refusal(env, publish_key(), value) is None


def test_the_store_holds_the_fold_s_facts_after_every_batch_though_only_named_segments_are_staged(
        tmp_path: Path) -> None:
    """A batch writes the facts of the segments its events name, not of those whose state alone changed: the
    store must still hold exactly the fold's facts (a restart restores from them) and its states."""
    records = [InputRecord(TOPICS.name(SEGMENTS), 0, i, None, encode(e), 1000 + i)
               for i, e in enumerate(segment_stream(random.Random(8), 2500))]
    with AgentStateStore(tmp_path / "s", FORMAT_VERSION) as store:
        agent = TimelineAgent(store, TOPICS, BytesSink())
        for start in range(0, len(records), 100):
            agent.process(records[start:start + 100])
            stored = dict(store.scan(SEG_PREFIX))
            expected = {SEG_PREFIX + id_key(sid): f.to_bytes() for sid, f in all_facts(agent.timelines).items()}
            assert stored == expected
            assert stored_states(store) == all_states(agent.timelines)
        overshadowed = [s for s in all_states(agent.timelines).values() if s in ("overshadowed", "standby")]
        assert overshadowed, "the stream changes states of segments it does not name"


def _keys_of(timelines: Timelines) -> dict[SegmentId, SegmentId]:
    """Every id the fold keys a segment by (descriptor, used flag or servers), mapped to the key object itself."""
    keys: dict[SegmentId, SegmentId] = {}
    for ds in timelines.data_sources():
        tl = timelines.timeline(ds)
        for sid in [*tl._segments, *tl._used, *tl._servers]:
            keys.setdefault(sid, sid)
    return keys


def _descriptors(event: Event) -> tuple[SegmentDescriptor, ...]:
    if isinstance(event, SegmentAnnounced):
        return (event.segment,)
    return tuple(getattr(event, "segments", ()))


def test_a_decoded_event_names_the_fold_s_own_id_objects() -> None:
    """Every event decoded from its bytes (as a worker reads it: fresh objects), folded: the ids ``ids_of`` gives
    the agent and the descriptors' ids are the objects the fold keys its maps by (the agent's look-ups take the
    identity shortcut), one object per id in all the fold's maps, with the states and id resolution of a fold
    that shares no object with it (the interning changes no value). Not for an id whose text another id has (the
    stream's twins): the text resolves to the latest of them, so the other's objects are not interned."""
    stream = _stream(5, 3000)
    by_text: dict[str, set[SegmentId]] = {}
    for env in stream:
        for seg in _descriptors(env.event):
            by_text.setdefault(str(seg.id), set()).add(seg.id)
    twins = {sid for ids in by_text.values() if len(ids) > 1 for sid in ids}
    assert twins
    timelines, plain, named = Timelines(), Timelines(), 0
    for env in stream:
        event = decode(encode(env)).event
        try:
            touched, _ = ids_of(timelines, event)
            changes = timelines.apply(event)
        except EventValidationError:
            continue
        keys = _keys_of(timelines)
        for sid in touched:
            if sid in keys and sid not in twins:
                assert keys[sid] is sid
                named += 1
        for seg in _descriptors(event):
            if seg.id not in twins:
                assert keys[seg.id] is seg.id
        assert changes == plain.apply(decode(encode(env)).event)
        for ds in timelines.data_sources():  # one object per id across the timeline's maps
            tl = timelines.timeline(ds)
            for sid in [*tl._segments, *tl._used, *tl._servers]:
                assert sid in twins or keys[sid] is sid
    assert named > 1000
    assert all_states(timelines) == all_states(plain)
    assert timelines._ids == plain._ids


def test_a_restored_fold_has_one_id_object_per_segment() -> None:
    """After a restore (a restart), the id texts resolve to the objects the timeline keys its maps by."""
    timelines = Timelines()
    for env in _stream(6, 2000):
        try:
            timelines.apply(decode(encode(env)).event)
        except EventValidationError:
            continue
    facts = [(parse_id_key(id_key(sid)), SegmentFacts.from_bytes(f.to_bytes()))
             for sid, f in all_facts(timelines).items()]
    known = [(text, parse_id_key(id_key(sid))) for text, sid in timelines._ids.items()]
    restored = restore(facts, known)
    keys = _keys_of(restored)
    assert all_states(restored) == all_states(timelines)
    shared = [sid for sid in restored._ids.values() if sid in keys]
    assert len(shared) > 100
    assert all(keys[sid] is sid for sid in shared)
    for ds in restored.data_sources():
        tl = restored.timeline(ds)
        assert all(keys[seg.id] is seg.id for seg in tl._segments.values())


@pytest.mark.parametrize("heap", ["worker", "default"])
def test_the_agent_bench_leaves_the_collector_as_it_found_it(heap: str, capsys: pytest.CaptureFixture[str]) -> None:
    """``bench.service --only agent`` runs under the worker's heap policy (a raised young threshold, frozen objects)
    and must undo it: a process running it (the tests, a script comparing builds) would otherwise go on with its
    collector changed and its objects frozen out of every scan."""
    from bench.service import agent_in_process

    thresholds = gc.get_threshold()
    agent_in_process([encode(e) for e in segment_stream(random.Random(3), 300)], batch=100, rounds=2, heap=heap)
    assert gc.get_threshold() == thresholds
    assert gc.get_freeze_count() == 0  # (FrozenHeap.start unfreezes whatever was frozen before: nothing is left)
    assert f"best of 2 ({heap} heap policy)" in capsys.readouterr().out
