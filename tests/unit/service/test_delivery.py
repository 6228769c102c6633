"""Batch delivery: whole batches to the agents of their topics, one decode per record whatever the readers.

Real agents on real RocksDB stores; the Faust consumer loop around :class:`BatchDelivery` is covered by the
service's integration tests (tests/integration/test_service_*.py)."""

from __future__ import annotations

import asyncio
import random
import sys
import threading
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from types import SimpleNamespace

import pytest

import events.envelope
import events.schema
from events import Envelope, Event, Topics, encode
from events.topics import LOCK_REQUESTS, SEGMENTS
from streaming.service import intake
from streaming.service.delivery import SHORT_SLICE_S, BatchDelivery, Route, off_loop, records_of
from streaming.service.intake import InputRecord
from streaming.service.state import AgentStateStore
from streaming.service.timeline_agent import FORMAT_VERSION, TimelineAgent
from streaming.service.timeline_facts import all_states
from tests.integration.test_service_timeline import segment_stream

TOPICS = Topics("unit.")


class Outputs:
    """A sink keeping what it was sent (flush has nothing to wait for)."""

    def __init__(self) -> None:
        self.sent: list[Envelope[Event]] = []

    def send(self, envelope: Envelope[Event]) -> None:
        self.sent.append(envelope)

    def flush(self, timeout: float = 30.0) -> None:
        pass


class Batches:
    """An agent that keeps the batches it was given."""

    def __init__(self) -> None:
        self.batches: list[list[InputRecord]] = []

    def process(self, records: Sequence[InputRecord]) -> None:
        self.batches.append(list(records))


def segment_records(n: int) -> list[InputRecord]:
    return [InputRecord(TOPICS.name(SEGMENTS), 0, i, e.key.encode(), encode(e), 0)
            for i, e in enumerate(segment_stream(random.Random(3), n))]


def test_two_agents_reading_segments_decode_each_record_once(tmp_path: Path,
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    decodes = 0
    real = events.envelope.decode

    def counted(data: bytes | None) -> Envelope[Event]:
        nonlocal decodes
        decodes += 1
        return real(data)

    monkeypatch.setattr(intake, "decode", counted)
    records = segment_records(300)
    with AgentStateStore(tmp_path / "a", FORMAT_VERSION) as a_store, \
            AgentStateStore(tmp_path / "b", FORMAT_VERSION) as b_store:
        a = TimelineAgent(a_store, TOPICS, Outputs())
        b = TimelineAgent(b_store, TOPICS, Outputs())
        delivery = BatchDelivery([Route("a", frozenset({TOPICS.name(SEGMENTS)}), a),
                                  Route("b", frozenset({TOPICS.name(SEGMENTS)}), b)])
        for start in range(0, len(records), 100):
            asyncio.run(delivery.deliver(records[start:start + 100]))
        assert decodes == len(records)
        assert a.counters.applied == b.counters.applied > 0
        assert all_states(a.timelines) == all_states(b.timelines)


def test_a_batch_goes_whole_to_each_agent_of_its_topics_in_order() -> None:
    seg, req = TOPICS.name(SEGMENTS), TOPICS.name(LOCK_REQUESTS)
    records = [InputRecord(seg if i % 3 else req, i % 2, i, None, b"{}") for i in range(30)]
    timeline, lockbox, both = Batches(), Batches(), Batches()
    delivery = BatchDelivery([Route("timeline", frozenset({seg}), timeline),
                              Route("lockbox", frozenset({req}), lockbox),
                              Route("both", frozenset({seg, req}), both)])
    asyncio.run(delivery.deliver(records))
    assert timeline.batches == [[r for r in records if r.topic == seg]]
    assert lockbox.batches == [[r for r in records if r.topic == req]]
    assert both.batches == [records]
    assert all(x is y for x, y in zip(both.batches[0], records, strict=True))  # the same objects: one decode


def test_records_of_a_fetch_keep_only_the_partitions_asked_for() -> None:
    def rec(topic: str, partition: int, offset: int) -> SimpleNamespace:
        return SimpleNamespace(topic=topic, partition=partition, offset=offset, key=b"k", value=b"v",
                               timestamp=1000 + offset)

    fetched = {("s", 0): [rec("s", 0, 5), rec("s", 0, 6)], ("s", 1): [rec("s", 1, 9)]}
    got = records_of(fetched, lambda tp: tp == ("s", 0))
    assert [(r.topic, r.partition, r.offset, r.timestamp_ms) for r in got] == [("s", 0, 5, 1005), ("s", 0, 6, 1006)]


def test_a_bad_record_raises_its_validation_error_on_every_read() -> None:
    rec = InputRecord("t", 0, 0, None, b"not json")
    with pytest.raises(events.schema.EventValidationError) as first:
        rec.decoded()
    with pytest.raises(events.schema.EventValidationError) as second:
        rec.decoded()
    assert str(first.value) == str(second.value)


def test_gil_slices_are_short_only_while_a_pool_call_runs_long() -> None:
    """A quick call leaves the interpreter's switch interval alone; a long one gets short slices until it ends."""
    pool = ThreadPoolExecutor(max_workers=1)
    before = sys.getswitchinterval()
    release = threading.Event()

    def long_call() -> str:
        release.wait(60)
        return "done"

    async def scenario() -> list[float]:
        seen = [sys.getswitchinterval()]
        assert await off_loop(pool, lambda: 41 + 1) == 42
        seen.append(sys.getswitchinterval())
        call = asyncio.ensure_future(off_loop(pool, long_call))
        for _ in range(3000):  # short once the call has run LONG_CALL_S (the bound only ends a broken run)
            if sys.getswitchinterval() == SHORT_SLICE_S:
                break
            await asyncio.sleep(0.01)
        seen.append(sys.getswitchinterval())
        release.set()
        assert await call == "done"
        seen.append(sys.getswitchinterval())
        return seen

    try:
        assert asyncio.run(scenario()) == [before, before, SHORT_SLICE_S, before]
    finally:
        release.set()
        pool.shutdown()


class Staged:
    """An agent that stages and finishes, writing each step to a shared log."""

    def __init__(self, log: list[tuple[str, int]]) -> None:
        self.log = log
        self.pending: int | None = None

    def process(self, records: Sequence[InputRecord]) -> None:
        raise AssertionError("a staged agent is staged and finished, not processed")

    def stage(self, records: Sequence[InputRecord]) -> None:
        assert self.pending is None, "staged again before the last batch was finished"
        self.pending = records[0].offset
        self.log.append(("stage", records[0].offset))

    def finish(self) -> None:
        assert self.pending is not None
        self.log.append(("finish", self.pending))
        self.pending = None


class Logged:
    def __init__(self, log: list[tuple[str, int]]) -> None:
        self.log = log

    def process(self, records: Sequence[InputRecord]) -> None:
        self.log.append(("process", records[0].offset))


def test_a_staged_agent_finishes_after_the_other_agents_and_before_the_next_batch() -> None:
    """The lockbox's flush and commit wait for the other event-loop agents of the same fetched batch (so its
    acknowledgements arrive while they work), and come before the next batch is delivered."""
    seg, req = TOPICS.name(SEGMENTS), TOPICS.name(LOCK_REQUESTS)
    log: list[tuple[str, int]] = []
    delivery = BatchDelivery([Route("lockbox", frozenset({req}), Staged(log)),
                              Route("timeline", frozenset({seg}), Logged(log))])
    for first in (0, 10):
        batch = [InputRecord(req, 0, first, None, b"x"), InputRecord(seg, 0, first, None, b"y")]
        asyncio.run(delivery.deliver(batch))
    assert log == [("stage", 0), ("process", 0), ("finish", 0), ("stage", 10), ("process", 10), ("finish", 10)]


def test_a_staged_agent_with_nothing_to_read_is_neither_staged_nor_finished() -> None:
    seg, req = TOPICS.name(SEGMENTS), TOPICS.name(LOCK_REQUESTS)
    log: list[tuple[str, int]] = []
    delivery = BatchDelivery([Route("lockbox", frozenset({req}), Staged(log)),
                              Route("timeline", frozenset({seg}), Logged(log))])
    asyncio.run(delivery.deliver([InputRecord(seg, 0, 5, None, b"y")]))
    assert log == [("process", 5)]


class Watched:
    """An observer keeping the lag of every batch it hears of."""

    def __init__(self) -> None:
        self.lags: list[int | None] = []

    def batch(self, agent: str, records: int, seconds: float, lag: int | None) -> None:
        self.lags.append(lag)


def test_the_lag_is_looked_up_after_every_batch_while_behind_and_rarely_once_caught_up(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """What a user reads on the lag gauge: after a catch-up it falls to 0 at the batch that caught up (never stays
    at the last non-zero value), and once caught up the high watermarks are not asked after every tiny batch."""
    seg = TOPICS.name(SEGMENTS)
    clock = [100.0]
    monkeypatch.setattr("streaming.service.delivery.time.perf_counter", lambda: clock[0])
    behind = [50, 20, 0, 7, 0]  # what each look-up finds
    asked: list[dict[tuple[str, int], int]] = []

    def lag(positions: dict[tuple[str, int], int]) -> int | None:
        asked.append(dict(positions))
        return behind[len(asked) - 1]

    watched = Watched()
    delivery = BatchDelivery([Route("timeline", frozenset({seg}), Batches())], observe=watched, lag=lag)
    offset = 0

    def batch(advance_s: float) -> None:
        nonlocal offset
        clock[0] += advance_s
        asyncio.run(delivery.deliver([InputRecord(seg, 0, offset, None, b"y")]))
        offset += 1

    for _ in range(3):  # behind: every batch asks, until one finds 0
        batch(0.001)
    assert watched.lags == [50, 20, 0]
    for _ in range(5):  # caught up: tiny batches within LAG_EVERY_S ask nothing (the gauge keeps its 0)
        batch(0.01)
    assert watched.lags[3:] == [None] * 5 and len(asked) == 3
    batch(1.0)  # a second later: asked again, and behind again -> the next batch asks too
    batch(0.001)
    assert watched.lags[8:] == [7, 0] and len(asked) == 5
    assert asked[-1] == {(seg, 0): offset}  # every position up to the last record, including the batches not asked
