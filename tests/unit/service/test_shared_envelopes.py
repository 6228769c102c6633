"""Each record decoded once per process: what a reader takes from :class:`SharedEnvelopes` is what it would decode,
an entry leaves with its last expected reader, and an unconfigured process shares nothing."""

from __future__ import annotations

import threading

from hypothesis import given, settings
from hypothesis import strategies as st

from events import Envelope, Interval, SegmentDescriptor, encode
from events.commands import LoadSegment
from events.schema import Instant
from events.segments import SegmentAnnounced
from streaming.service.intake import InputRecord
from streaming.service.shared_envelopes import SHARED, SharedEnvelopes

T0 = 1_795_219_200_000
HOUR = 3_600_000


def load(n: int) -> Envelope[LoadSegment]:
    seg = SegmentDescriptor("wiki", Interval(T0 + n * HOUR, T0 + (n + 1) * HOUR), "v1", 0, 1000)
    return Envelope(LoadSegment(command_id=f"c{n}", server="h1", segment=seg, stage="1", purpose="loading",
                                reason="r", planner_epoch=3), f"c{n}", Instant(T0 + n), "h1", f"pub-{n}")


def test_a_producer_side_entry_serves_each_expected_reader_once_then_leaves() -> None:
    shared = SharedEnvelopes()
    shared.configure({"x.segments": 2})
    env = load(1)
    value = encode(env)
    shared.produced("x.segments", value, env)
    assert shared.taken("x.segments", value) is env
    assert shared.taken("x.segments", bytes(value)) is env  # an equal copy of the bytes, as a consumer reads them
    assert shared.taken("x.segments", value) is None and len(shared) == 0


def test_a_decode_side_entry_is_kept_for_the_other_readers_only() -> None:
    shared = SharedEnvelopes()
    shared.configure({"x.segments": 2, "x.lock-requests": 1})
    env = load(2)
    value = encode(env)
    shared.decoded("x.lock-requests", value, env)  # its one reader decoded it: nobody else will ask
    assert len(shared) == 0
    shared.decoded("x.segments", value, env)
    assert shared.taken("x.segments", value) is env and len(shared) == 0


def test_unconfigured_topics_and_processes_share_nothing() -> None:
    shared = SharedEnvelopes()
    env = load(3)
    value = encode(env)
    shared.produced("x.commands", value, env)
    assert shared.taken("x.commands", value) is None and len(shared) == 0
    shared.configure({"x.segments": 2})
    shared.produced("x.commands", value, env)
    assert shared.taken("x.commands", value) is None and len(shared) == 0


def test_the_oldest_entries_leave_beyond_the_capacity() -> None:
    shared = SharedEnvelopes(capacity=3)
    shared.configure({"x.commands": 1})
    envs = [load(n) for n in range(5)]
    values = [encode(e) for e in envs]
    for env, value in zip(envs, values, strict=True):
        shared.produced("x.commands", value, env)
    assert len(shared) == 3
    assert shared.taken("x.commands", values[0]) is None and shared.taken("x.commands", values[1]) is None
    assert [shared.taken("x.commands", v) for v in values[2:]] == envs[2:]


@settings(max_examples=50, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 20), st.booleans()), min_size=1, max_size=40))
def test_a_reader_gets_what_it_would_decode_whatever_came_before(reads: list[tuple[int, bool]]) -> None:
    """Records produced here and records decoded by another reader, read in any order and repeated: every
    reader's envelope equals the decode of the value (what a user would notice is only the CPU it saves)."""
    shared = SharedEnvelopes(capacity=8)
    shared.configure({"x.segments": 2})
    for n, produced_here in reads:
        env = Envelope(SegmentAnnounced(server=f"h{n % 3}", segment=load(n).event.segment), f"a{n}",
                       Instant(T0 + n), "wiki", f"c{n}")
        value = encode(env)
        if produced_here:
            shared.produced("x.segments", value, env)
        got = shared.taken("x.segments", value)
        if got is None:
            from events.envelope import decode

            got = decode(value)
            shared.decoded("x.segments", value, got)
        assert got == env and encode(got) == value


def test_input_records_of_two_consumers_decode_a_value_once() -> None:
    """Two consumers' records of one message (the worker's and the planner feed's) get the same envelope object:
    the second never decoded."""
    env = load(7)
    value = encode(env)
    SHARED.configure({"x.segments": 2})
    try:
        first = InputRecord("x.segments", 0, 5, b"k", value).decoded()
        second = InputRecord("x.segments", 0, 5, b"k", bytes(value)).decoded()
        assert first == env and second is first and len(SHARED) == 0
    finally:
        SHARED.configure({})


def test_threads_taking_and_keeping_at_once_never_fail() -> None:
    shared = SharedEnvelopes(capacity=16)
    shared.configure({"x.segments": 2})
    envs = [load(n) for n in range(64)]
    values = [encode(e) for e in envs]
    errors: list[BaseException] = []

    def work(offset: int) -> None:
        try:
            for i in range(2000):
                k = (i + offset) % 64
                got = shared.taken("x.segments", values[k])
                assert got is None or got == envs[k]
                shared.produced("x.segments", values[k], envs[k])
        except BaseException as e:  # reported below
            errors.append(e)

    threads = [threading.Thread(target=work, args=(o,)) for o in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors and len(shared) <= 16


def test_a_reader_behind_another_keeps_nothing_and_the_leaders_entries_stay() -> None:
    """The leader's decodes are kept for the reader behind it; that reader's misses (entries gone before it came)
    are not kept, so they never push the leader's entries out: it takes them once it is within the capacity."""
    shared = SharedEnvelopes(capacity=4)
    shared.configure({"x.segments": 2})
    envs = [load(n) for n in range(12)]
    values = [encode(e) for e in envs]

    def read(offset: int) -> bool:
        """One reader's read of the record at ``offset`` of partition 0; whether it came from an entry."""
        got = shared.taken("x.segments", values[offset], (0, offset))
        if got is not None:
            assert got == envs[offset]
            return True
        shared.decoded("x.segments", values[offset], envs[offset], (0, offset))
        return False

    assert not any(read(o) for o in range(10))  # the leader, at 9: entries for 6..9 left
    assert list(shared._entries) == values[6:10]
    assert not any(read(o) for o in range(6))  # the reader behind: every entry it needed had left; nothing kept
    assert list(shared._entries) == values[6:10]
    assert all(read(o) for o in range(6, 10)) and len(shared) == 0  # within the capacity again: all taken
    # another partition has a mark of its own: the first reader of partition 1 keeps its decode
    env = load(20)
    assert shared.taken("x.segments", encode(env), (1, 0)) is None
    shared.decoded("x.segments", encode(env), env, (1, 0))
    assert shared.taken("x.segments", encode(env), (1, 0)) == env


def test_a_topic_with_one_reader_gets_its_producers_entries_and_misses_the_rest() -> None:
    """A worker that does not lead: ``segments`` has one reader, so only the lockbox's own publishes can be shared;
    every other record misses (the fast path of an empty table, or the lookup when another entry waits)."""
    shared = SharedEnvelopes()
    shared.configure({"x.segments": 1, "x.timeline": 1})
    mine, other, waiting = load(4), load(5), load(6)
    assert shared.taken("x.segments", encode(other), (0, 1)) is None and shared.misses == 1  # empty table
    shared.produced("x.timeline", encode(waiting), waiting)  # an entry of another topic waits for its reader
    assert shared.taken("x.segments", encode(other), (0, 2)) is None and shared.misses == 2
    shared.produced("x.segments", encode(mine), mine)
    assert shared.taken("x.segments", encode(mine), (0, 3)) is mine and shared.hits == 1
    assert shared.taken("x.timeline", encode(waiting), (0, 0)) is waiting and len(shared) == 0
    shared.decoded("x.segments", encode(other), other, (0, 4))  # its one reader decoded it: kept for nobody
    assert len(shared) == 0 and shared.taken("x.segments", encode(other), (0, 4)) is None
