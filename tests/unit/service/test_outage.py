"""Outages are waited out: a flush with no broker waits past its timeout instead of raising, and a stop during
it closes the stores (each at its last whole batch) and exits 0. The store refuses a commit once closed."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest

from events.topics import Topics
from streaming.service.outage import PatientProducer, Shutdown
from streaming.service.state import AgentStateStore, StoreClosedError


class Exited(Exception):
    def __init__(self, code: int) -> None:
        super().__init__(code)
        self.code = code


def raise_exit(code: int) -> None:
    raise Exited(code)


def test_a_flush_without_a_broker_waits_past_its_timeout_and_a_stop_exits_0_with_the_store_closed(
        tmp_path: Path) -> None:
    store = AgentStateStore(tmp_path / "s", "t/1")
    batch = store.batch()
    batch.set_offset("in", 0, 7)
    store.commit(batch)
    shutdown = Shutdown(exit=raise_exit)
    shutdown.hold(store)
    producer = PatientProducer("127.0.0.1:1", Topics("t."), shutdown, extra={"log_level": 0}, name="test")
    producer.send_raw("t.segments", b"k", b"v")
    outcome: list[object] = []

    def flush() -> None:
        try:
            producer.flush(timeout=0.5)
            outcome.append("returned")
        except Exited as e:
            outcome.append(e.code)
        except Exception as e:  # a ProduceError: what the old producer raised after its timeout
            outcome.append(e)

    thread = threading.Thread(target=flush, daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while producer.waits == 0 and time.monotonic() < deadline:  # the flush outlasted its timeout, still waiting
        time.sleep(0.05)
    assert producer.waits == 1 and thread.is_alive() and outcome == []
    shutdown.request("SIGTERM")
    thread.join(10)
    assert outcome == [0]
    with pytest.raises(StoreClosedError):
        store.commit(store.batch())
    store.close()  # twice: nothing happens
    with AgentStateStore(tmp_path / "s", "t/1") as again:  # the lock is released, the last batch is there
        assert again.offsets() == {("in", 0): 7}


def test_after_a_stop_an_agent_failure_exits_0() -> None:
    shutdown = Shutdown(exit=raise_exit)
    assert shutdown.exit_code(70) == 70
    shutdown.request("SIGTERM")
    assert shutdown.exit_code(70) == 0


def test_a_call_failing_with_the_broker_away_is_retried_with_back_off() -> None:
    from confluent_kafka import KafkaError, KafkaException

    from streaming.service.outage import until_reachable

    failures = [KafkaException(KafkaError(KafkaError._TRANSPORT)), TimeoutError("admin call"),
                KafkaException(KafkaError(KafkaError._TRANSPORT))]
    slept: list[float] = []

    def call() -> str:
        if failures:
            raise failures.pop(0)
        return "created"

    assert until_reachable("creating the topics", call, sleep=slept.append) == "created"
    assert slept == [1.0, 2.0, 4.0]
    with pytest.raises(ValueError):  # not an outage: raised at once
        until_reachable("x", lambda: (_ for _ in ()).throw(ValueError("bad")), sleep=slept.append)


def test_a_first_connection_failing_with_the_broker_away_is_retried_with_back_off(
        capsys: pytest.CaptureFixture[str]) -> None:
    import asyncio

    from aiokafka.errors import KafkaConnectionError

    from streaming.service.outage import until_bootstrapped

    failures = [KafkaConnectionError("Unable to bootstrap from [('127.0.0.1', 1)]") for _ in range(3)]

    async def call() -> str:
        if failures:
            raise failures.pop(0)
        return "connected"

    got = asyncio.run(until_bootstrapped("connecting w1", call, Shutdown(exit=raise_exit), first_delay_s=0.01))
    lines = capsys.readouterr().out.splitlines()
    assert got == "connected" and len(lines) == 4, lines
    assert [line.rsplit("retrying in ", 1)[-1] for line in lines[:3]] == ["0.01s", "0.02s", "0.04s"]
    assert lines[0].startswith("segcoord run: connecting w1: broker unreachable for 0s (KafkaConnectionError: "
                               "Unable to bootstrap"), lines
    assert lines[3].startswith("segcoord run: connecting w1: broker reached after"), lines

    async def other() -> str:
        raise ValueError("bad")

    with pytest.raises(ValueError):  # not an outage: raised at once
        asyncio.run(until_bootstrapped("x", other, Shutdown(exit=raise_exit)))


def test_fausts_first_connection_waits_with_no_broker_and_a_stop_exits_0_with_the_store_closed(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """aiokafka's own bootstrap (Faust's producer and consumer start with it), as the worker patches it, against
    a port where no broker listens: it waits instead of raising, and a stop ends it with 0, the store closed."""
    import asyncio

    import aiokafka.client
    from aiokafka.client import AIOKafkaClient

    from streaming.service import faust_patches

    store = AgentStateStore(tmp_path / "s", "t/1")
    shutdown = Shutdown(exit=raise_exit)
    shutdown.hold(store)
    original = AIOKafkaClient.bootstrap
    faust_patches.patient_bootstrap(shutdown)
    faust_patches.patient_bootstrap(shutdown)  # twice: wrapped once
    assert AIOKafkaClient.bootstrap.__wrapped__ is original  # type: ignore[attr-defined]

    async def start() -> object:
        client = AIOKafkaClient(bootstrap_servers="127.0.0.1:1", client_id="w1-test")
        attempt = asyncio.ensure_future(client.bootstrap())
        try:
            seen = ""
            while "broker unreachable for" not in seen:  # the first failed attempt: it waits, it does not raise
                assert not attempt.done(), attempt.exception()
                await asyncio.sleep(0.05)
                seen += capsys.readouterr().out
            shutdown.request("SIGTERM")
            try:
                await attempt
            except Exited as e:
                return e.code
            return "returned"
        finally:
            await client.close()

    try:
        assert asyncio.run(start()) == 0
    finally:
        aiokafka.client.AIOKafkaClient.bootstrap = original  # type: ignore[method-assign]
    with pytest.raises(StoreClosedError):
        store.commit(store.batch())


class CountedClient:
    """Stands for confluent-kafka's producer: ``queued`` messages not yet acknowledged; counts flush calls."""

    def __init__(self, queued: int) -> None:
        self.queued = queued
        self.flushes = 0

    def __len__(self) -> int:
        return self.queued

    def flush(self, timeout: float) -> int:
        self.flushes += 1
        self.queued = 0
        return 0


def test_a_flush_with_nothing_queued_leaves_the_client_alone_and_still_raises_earlier_failures() -> None:
    from streaming.producer import ProduceError

    producer = PatientProducer("127.0.0.1:1", Topics("t."), Shutdown(exit=raise_exit), extra={"log_level": 0})
    real = producer._producer
    client = CountedClient(0)
    producer._producer = client  # type: ignore[assignment]
    try:
        producer.flush()  # nothing sent: no call (it would wake every broker thread, once per fetched batch)
        assert client.flushes == 0
        client.queued = 2
        producer.flush()  # something queued: flushed as before
        assert client.flushes == 1
        producer._errors.append("t.segments: Broker: Not enough in-sync replicas")  # a delivery report served
        with pytest.raises(ProduceError, match="in-sync replicas"):
            producer.flush()
        assert client.flushes == 1
    finally:
        producer._producer = real
