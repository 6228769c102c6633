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
