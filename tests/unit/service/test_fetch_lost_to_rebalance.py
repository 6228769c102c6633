"""A fetch lost to a rebalance is read again; a consumer that cannot go on still ends the worker.

The 30-minute soak's run 8 lost two workers at start-up (docs/workers.md): aiokafka handed a SyncGroup
``UnknownError`` to the fetch as a plain ``KafkaError``, and its ``fetched_records`` raised ``KeyError`` for a
partition whose buffer a seek had dropped. Both times the group went on, but Faust's fetcher crashed the worker.
"""

from __future__ import annotations

import asyncio
import threading
from types import SimpleNamespace
from typing import Any

import pytest
from aiokafka.errors import GroupAuthorizationFailedError, KafkaError
from aiokafka.structs import ConsumerRecord, TopicPartition

from streaming.service import delivery as delivery_module
from streaming.service.delivery import install, lost_to_rebalance
from streaming.service.intake import InputRecord

SEGMENTS = TopicPartition("p.segments", 2)


def test_what_counts_as_lost_to_a_rebalance() -> None:
    assert lost_to_rebalance(KafkaError("UnknownError()"))  # a SyncGroup error pushed to the waiting fetch
    assert lost_to_rebalance(KeyError(SEGMENTS))  # a partition's buffer dropped under the fetch
    # the coordinator routine ended: nothing would assign again, the worker must exit and restart
    assert not lost_to_rebalance(KafkaError("Unexpected error during coordination KeyError(1)"))
    assert not lost_to_rebalance(GroupAuthorizationFailedError("g"))  # a named error: not ours to retry
    assert not lost_to_rebalance(KeyError("segments"))  # a defect elsewhere, not a partition's buffer
    assert not lost_to_rebalance(ValueError("x"))


class FakeConsumer:
    """Fails its first fetches with ``failures``, then returns one batch, then asks the loop to stop."""

    def __init__(self, failures: list[BaseException]) -> None:
        self.failures = list(failures)
        self._stopped = threading.Event()
        self.should_stop = False
        self.flow_active = True
        self.fetches = 0

    async def _wait_next_records(self, timeout: float) -> tuple[dict[Any, list[Any]], set[Any]]:
        self.fetches += 1
        if self.failures:
            raise self.failures.pop(0)
        self._stopped.set()  # one batch, then the loop ends
        record = ConsumerRecord(SEGMENTS.topic, SEGMENTS.partition, 41, 0, 0, b"k", b"v", None, 1, 1, [])
        return {SEGMENTS: [record]}, {SEGMENTS}

    def assignment(self) -> set[Any]:
        return {SEGMENTS}

    async def _commit_offsets(self, offsets: dict[Any, int]) -> None:
        pass

    async def perform_seek(self) -> None:
        pass


class Collected:
    def __init__(self) -> None:
        self.records: list[InputRecord] = []

    async def deliver(self, records: list[InputRecord]) -> None:
        self.records.extend(records)


def drain(failures: list[BaseException], monkeypatch: pytest.MonkeyPatch) -> tuple[FakeConsumer, Collected]:
    monkeypatch.setattr(delivery_module, "REFETCH_AFTER_S", 0.0)
    consumer, collected = FakeConsumer(failures), Collected()
    app = SimpleNamespace(consumer=consumer, consumer_generation_id=1, conf=SimpleNamespace(broker_commit_interval=60),
                          monitor=SimpleNamespace(stream_inbound_time={}))
    install(app, collected)  # type: ignore[arg-type]
    fetcher = SimpleNamespace(_stopped=threading.Event())
    asyncio.run(consumer._drain_messages(fetcher))  # type: ignore[attr-defined]
    return consumer, collected


def test_a_fetch_lost_to_a_rebalance_is_read_again(monkeypatch: pytest.MonkeyPatch) -> None:
    consumer, collected = drain([KafkaError("UnknownError()"), KeyError(SEGMENTS)], monkeypatch)
    assert consumer.fetches == 3
    assert [(r.topic, r.partition, r.offset) for r in collected.records] == [(SEGMENTS.topic, 2, 41)]


@pytest.mark.parametrize("fatal", [GroupAuthorizationFailedError("g"),
                                   KafkaError("Unexpected error during coordination KeyError(1)")])
def test_a_consumer_that_cannot_go_on_still_ends_the_fetch(fatal: BaseException,
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(type(fatal)):
        drain([fatal], monkeypatch)
