"""A worker started while the broker is away waits for it, and a stop during that wait exits 0.

The soak found a worker restarted 2 s before the broker was killed: it got past its wait for the broker
(creating the topics), then Faust's first connection (aiokafka's bootstrap) found no broker and the worker
exited 1. Now every connection the worker makes on its way up waits with back-off and says so. On the test's
own broker (:class:`LocalBroker` under a temporary home, stopped and started by the test):

- aiokafka's bootstrap itself, as the worker patches it, against the stopped broker: it waits, then connects
  once the broker is back; a stop during the wait exits 0 (the Faust path of the soak's failure, taken
  deterministically);
- ``segcoord run`` started with the broker stopped: a SIGTERM during the wait exits 0; started again, it
  waits, and once the broker is back it processes input (an input event's id is seen as the cause of a
  ``timeline`` record) and exits 0 on SIGTERM;
- ``segcoord run`` whose broker is killed just after it created its topics, or as Faust starts (the soak's
  case): it waits wherever its start-up is when the broker goes, then processes input and exits 0 on SIGTERM.

Every wait is for a condition (a log line, an id on the output), never a fixed sleep.
"""

from __future__ import annotations

import asyncio
import io
import time
import uuid
from contextlib import redirect_stdout
from pathlib import Path

import pytest

from events import Envelope, Event, Topics, decode
from events.segments import SegmentAnnounced, SegmentsPublished
from events.topics import TIMELINE
from streaming.admin import create_topics
from streaming.local_broker import LocalBroker
from streaming.producer import EventProducer
from streaming.service import faust_patches
from streaming.service.outage import Shutdown
from tests.integration.test_service_timeline import Service, env, read_all, seg, wait_for

pytestmark = pytest.mark.integration

WAITING = "broker unreachable for"  # the start-up waits' line (until_reachable, until_bootstrapped)


class Exited(Exception):
    def __init__(self, code: int) -> None:
        super().__init__(code)
        self.code = code


def raise_exit(code: int) -> None:
    raise Exited(code)


def publish_and_announce(bootstrap: str, topics: Topics, tag: str, day: int) -> set[str]:
    """A new segment published and announced; the ids of the two input events."""
    s = seg(f"start-{tag}", day, "v1")
    events: list[Envelope[Event]] = [env(SegmentsPublished(task_id=f"task-{tag}", segments=(s,)), f"pub-{tag}",
                                         s.data_source),
                                     env(SegmentAnnounced(server="h1", segment=s), f"ann-{tag}", s.data_source)]
    producer = EventProducer(bootstrap, topics)
    for e in events:
        producer.send(e)
    producer.flush(60)
    return {e.event_id for e in events}


def caused(bootstrap: str, topics: Topics, ids: set[str]) -> bool:
    """Some ``timeline`` record was caused by one of ``ids``."""
    causes = {getattr(decode(r.value), "causation_id", None) for r in read_all(bootstrap, topics.name(TIMELINE))}
    return bool(causes & ids)


def test_fausts_first_connection_waits_for_the_broker_and_a_stop_during_the_wait_exits_0(
        own_broker: LocalBroker) -> None:
    from aiokafka.client import AIOKafkaClient

    bootstrap = own_broker.start()
    own_broker.stop()
    shutdown = Shutdown(exit=raise_exit)
    out = io.StringIO()
    faust_patches.patient_bootstrap(shutdown)
    try:
        async def connect_once_back() -> int:
            client = AIOKafkaClient(bootstrap_servers=bootstrap, client_id="start-outage-test")
            try:
                attempt = asyncio.ensure_future(client.bootstrap())
                while WAITING not in out.getvalue():  # it waits, it does not raise
                    assert not attempt.done(), attempt.exception()
                    await asyncio.sleep(0.1)
                await asyncio.get_running_loop().run_in_executor(None, own_broker.start)
                await attempt
                return len(client.cluster.brokers())
            finally:
                await client.close()

        async def stopped_while_waiting() -> int:
            client = AIOKafkaClient(bootstrap_servers=bootstrap, client_id="start-outage-test-2")
            try:
                attempt = asyncio.ensure_future(client.bootstrap())
                while "start-outage-test-2: " + WAITING not in out.getvalue():
                    assert not attempt.done(), attempt.exception()
                    await asyncio.sleep(0.1)
                shutdown.request("SIGTERM")
                try:
                    await attempt
                except Exited as e:
                    return e.code
                raise AssertionError("the bootstrap returned with no broker")
            finally:
                await client.close()

        with redirect_stdout(out):
            brokers = asyncio.run(connect_once_back())
            assert brokers == 1, out.getvalue()
            assert "connecting start-outage-test: broker reached after" in out.getvalue(), out.getvalue()
            own_broker.stop()
            assert asyncio.run(stopped_while_waiting()) == 0, out.getvalue()
    finally:
        import aiokafka.client

        wrapped = aiokafka.client.AIOKafkaClient.bootstrap
        aiokafka.client.AIOKafkaClient.bootstrap = getattr(wrapped, "__wrapped__", wrapped)  # type: ignore[method-assign]
    assert "connecting start-outage-test-2: broker unreachable for" in out.getvalue()


def test_a_worker_started_with_the_broker_down_waits_then_processes_and_stops_with_0(
        own_broker: LocalBroker, tmp_path: Path) -> None:
    bootstrap = own_broker.start()
    topics = Topics(f"t{uuid.uuid4().hex[:10]}.")
    create_topics(bootstrap, topics, partitions=1)
    own_broker.stop()
    service = Service(bootstrap, topics, tmp_path / "state", tmp_path / "run.log")

    # stopped while it waits: 0
    service.start()
    wait_for("the worker to say it waits for the broker", lambda: WAITING in service.log.read_text(), service, 120)
    assert service.stop() == 0, service.tail()

    # waits, then works once the broker is back
    service.start()
    try:
        wait_for("the restarted worker to wait for the broker",
                 lambda: service.log.read_text().count(WAITING) >= 2, service, 120)
        assert own_broker.start() == bootstrap
        ids = publish_and_announce(bootstrap, topics, "a", 1)
        wait_for("a timeline record caused by the input", lambda: caused(bootstrap, topics, ids), service, 180)
    finally:
        code = service.stop()
    assert code == 0, service.tail()


@pytest.mark.parametrize("killed_after", ["timeline, lockbox and planner agents on", ": group instance "],
                         ids=["topics-created", "faust-starting"])
def test_a_worker_whose_broker_dies_just_after_it_created_its_topics_waits_then_processes(
        own_broker: LocalBroker, tmp_path: Path, killed_after: str) -> None:
    """The soak's case: the broker goes away while the worker starts, after its topic creation (its line
    naming the topics), or as Faust starts (its line naming the group instance, printed just before). Where
    exactly the worker is when the broker goes (the election topic, opening its clients, Faust's first
    connection, or already consuming) varies with the machine's load; in every case it waits, says so, and
    carries on when the broker returns."""
    bootstrap = own_broker.start()
    topics = Topics(f"t{uuid.uuid4().hex[:10]}.")
    create_topics(bootstrap, topics, partitions=1)
    service = Service(bootstrap, topics, tmp_path / "state", tmp_path / "run.log")
    service.start()
    try:
        wait_for(f"the worker's line {killed_after!r}", lambda: killed_after in service.log.read_text(), service,
                 120)
        own_broker.kill()
        killed_at = time.monotonic()
        wait_for("the worker to say it waits for the broker",
                 lambda: WAITING in (text := service.log.read_text()) or "broker unreachable since" in text,
                 service, 180)
        print(f"waiting line {time.monotonic() - killed_at:.1f}s after the kill")
        assert own_broker.start() == bootstrap
        ids = publish_and_announce(bootstrap, topics, "b", 2)
        wait_for("a timeline record caused by the input", lambda: caused(bootstrap, topics, ids), service, 180)
    finally:
        code = service.stop()
    assert code == 0, service.tail()
