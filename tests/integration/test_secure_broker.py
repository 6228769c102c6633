"""On a ``--secure`` local broker: each role does its job end to end, each is refused where it does not belong,
and a bad password is refused (docs/security.md).

Every client takes its credentials from ``SEGCOORD_KAFKA_CONFIG`` (the role's properties file that
``segcoord kafka start --secure`` wrote), as users run them: the coordinator is ``segcoord run`` in a
subprocess, the task is a :class:`~streaming.task_client.TaskClient`, the historicals are the simulated
ones, the operator uses ``segcoord segments import``, ``segments mark-unused`` and a rules write, the
subscriber reads ``timeline`` and ``upsert-strategy``.
"""

from __future__ import annotations

import contextlib
import json
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import pytest
from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, KafkaException, TopicPartition

from events import Interval, SegmentDescriptor, Topics, decode
from events.cluster import RulesSet
from events.commands import DropSegment, LoadSegment
from events.locks import LockGranted, PublishAccepted
from events.topics import CLUSTER, COMMANDS, LOCK_REQUESTS, LOCKS, SEGMENTS, TIMELINE
from events.visibility import SegmentVisibilityChanged
from streaming import local_sasl
from streaming.admin import create_topics
from streaming.cli import main
from streaming.credentials import CONFIG_ENV, client_config
from streaming.local_broker import LocalBroker
from streaming.offsets import watermarks
from streaming.producer import EventProducer, ProduceError
from streaming.task_client import TaskClient
from streaming.upserts import UpsertStrategy
from streaming.writes import submit
from tests.integration.test_service_planner import Historicals, PlanService
from tests.integration.test_service_timeline import T0, wait_for

pytestmark = pytest.mark.integration
T = TypeVar("T")
DAY = 86_400_000


def props(broker: LocalBroker, role: str) -> str:
    return str(local_sasl.credentials_dir(broker.dir) / f"{role}.properties")


def values(bootstrap: str, settings: dict[str, str], topic: str) -> list[bytes]:
    """Every value of a 1-partition topic, read with ``settings`` (raises on an authorization error)."""
    consumer = Consumer({"bootstrap.servers": bootstrap, **settings, "group.id": f"read-{uuid.uuid4().hex}",
                         "enable.auto.commit": False})
    try:
        low, high = watermarks(consumer, TopicPartition(topic, 0), timeout=15)
        consumer.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])
        out: list[bytes] = []
        deadline = time.monotonic() + 30
        while len(out) < high - low and time.monotonic() < deadline:
            msg = consumer.poll(0.5)
            if msg is None:
                continue
            if msg.error() is not None:
                raise KafkaException(msg.error())
            out.append(msg.value())
        return out
    finally:
        consumer.close()


def until_authorized(action: Callable[[], T], timeout: float = 60.0) -> T:
    """``action()`` once every broker has the ACLs: ``grant_acls`` waits until one node lists them, and on a
    cluster the partition's leader may learn them from the metadata log a moment later. Only an authorization
    refusal is retried (it wrote nothing); any other error, or a refusal past ``timeout``, is raised."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            return action()
        except (ProduceError, KafkaException) as err:
            if "authorization failed" not in str(err).lower() or time.monotonic() > deadline:
                raise
        time.sleep(0.2)


def test_each_role_does_its_job_and_nothing_else(secure_broker: LocalBroker, tmp_path: Path,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    bootstrap = secure_broker.status().bootstrap
    assert bootstrap is not None
    topics = Topics(f"s{uuid.uuid4().hex[:10]}.")
    admin = secure_broker.admin_config()
    monkeypatch.setenv(CONFIG_ENV, props(secure_broker, "admin"))
    create_topics(bootstrap, topics, partitions=1)
    local_sasl.grant_acls(bootstrap, admin, topics)

    monkeypatch.setenv(CONFIG_ENV, props(secure_broker, "coordinator"))
    service = PlanService(bootstrap, topics, tmp_path / "state", tmp_path / "run.log", plan_every=2)
    service.start()
    try:
        monkeypatch.setenv(CONFIG_ENV, props(secure_broker, "historical"))
        with Historicals(bootstrap, topics, ["h1"]):
            # operator: rules on cluster, and an import of existing segments through the lockbox
            monkeypatch.setenv(CONFIG_ENV, props(secure_broker, "operator"))
            assert submit(bootstrap, topics, RulesSet(data_source="wiki", rules=(
                {"type": "loadForever", "tieredReplicants": {"hot": 1}},)), wait_s=60).applied
            old = SegmentDescriptor("wiki", Interval(T0 - DAY, T0), "v0", 0, 100)
            dump = tmp_path / "druid-segments.json"
            dump.write_text(json.dumps([{"dataSource": "wiki", "interval": old.interval.iso(), "version": "v0",
                                         "shardSpec": {"type": "numbered", "partitionNum": 0, "partitions": 1},
                                         "size": 100}]))
            assert main(["segments", "import", str(dump), "--bootstrap", bootstrap, "--topic-prefix",
                         topics.prefix, "--wait", "60"]) == 0

            # task: lock, publish (the lockbox accepts; the coordinator publishes, the historical loads)
            monkeypatch.setenv(CONFIG_ENV, props(secure_broker, "task"))
            day = Interval(T0, T0 + DAY)
            with TaskClient(bootstrap, topics, "index_1", "g1", "index", "wiki", timeout=60) as task:
                task.start()
                granted = task.lock(day).event
                assert isinstance(granted, LockGranted)
                new = SegmentDescriptor("wiki", day, granted.lock.version, 0, 100)
                assert isinstance(task.publish([new]).event, PublishAccepted)
                task.finish()

            # subscriber: both segments become visible on timeline
            monkeypatch.setenv(CONFIG_ENV, props(secure_broker, "subscriber"))
            subscriber = client_config(bootstrap)

            def visible() -> set[str]:
                seen = {e.event.segment_id for e in (decode(v) for v in values(bootstrap, subscriber,
                                                                                 topics.name(TIMELINE)))
                        if isinstance(e.event, SegmentVisibilityChanged) and e.event.to_state == "visible"}
                return seen if {str(old.id), str(new.id)} <= seen else set()

            wait_for("the imported and the published segment visible", visible, service, 120)
            strategies = UpsertStrategy(bootstrap, topics)  # `segcoord upserts` reads upsert-strategy as a subscriber
            strategies.catch_up(0.5)
            assert strategies.tables() == [] and strategies.undecodable == 0

            # operator: mark the imported segment unused (through the lockbox: the operator holds no publish key)
            monkeypatch.setenv(CONFIG_ENV, props(secure_broker, "operator"))
            assert main(["segments", "mark-unused", str(old.id), "--bootstrap", bootstrap, "--topic-prefix",
                         topics.prefix, "--wait", "60"]) == 0
            monkeypatch.setenv(CONFIG_ENV, props(secure_broker, "subscriber"))

            def unused() -> bool:
                last = [e.event.to_state for e in (decode(v) for v in values(bootstrap, subscriber,
                                                                              topics.name(TIMELINE)))
                        if isinstance(e.event, SegmentVisibilityChanged) and e.event.segment_id == str(old.id)]
                return bool(last) and last[-1] != "visible"

            wait_for("the segment the operator marked unused no longer visible", unused, service, 120)
    finally:
        code = service.stop()
    assert code == 0, service.log.read_text()[-3000:]
    loads = {str(e.event.segment.id) for e in (decode(v) for v in values(bootstrap, admin, topics.name(COMMANDS)))
             if isinstance(e.event, LoadSegment)}
    assert loads == {str(old.id), str(new.id)}
    drops = {e.event.segment_id for e in (decode(v) for v in values(bootstrap, admin, topics.name(COMMANDS)))
             if isinstance(e.event, DropSegment)}
    assert drops == {str(old.id)}  # the operator's mark took effect on the historical

    # each role refused where it does not belong; the topics are unchanged
    refused = [("task", SEGMENTS), ("task", COMMANDS), ("historical", LOCKS), ("historical", COMMANDS),
               ("operator", SEGMENTS), ("operator", COMMANDS), ("subscriber", TIMELINE), ("subscriber", CLUSTER),
               ("task", LOCKS)]
    before = {t: len(values(bootstrap, admin, topics.name(t))) for _, t in refused}
    for role, logical in refused:
        monkeypatch.setenv(CONFIG_ENV, props(secure_broker, role))
        producer = EventProducer(bootstrap, topics, extra={"message.timeout.ms": 10000})
        producer.send_raw(topics.name(logical), b"wiki", b'{"forged": true}')
        # (a role with no write ACL at all is refused earlier: its idempotent producer gets no producer id)
        with pytest.raises(ProduceError, match=r"(Topic|Cluster) authorization failed"):
            producer.flush(20)
    assert {t: len(values(bootstrap, admin, topics.name(t))) for _, t in refused} == before
    for role, logical in [("task", SEGMENTS), ("historical", LOCK_REQUESTS), ("subscriber", LOCKS)]:
        with pytest.raises(KafkaException) as err:
            values(bootstrap, local_sasl.client_settings(secure_broker.dir, role), topics.name(logical))
        # not authorized, or not even shown: a topic the principal may not DESCRIBE is absent from its metadata
        assert err.value.args[0].code() in (KafkaError.TOPIC_AUTHORIZATION_FAILED, KafkaError._UNKNOWN_PARTITION,
                                            KafkaError.UNKNOWN_TOPIC_OR_PART), (role, logical, err.value)


def test_a_bad_password_is_refused(secure_broker: LocalBroker) -> None:
    from confluent_kafka.admin import AdminClient

    bootstrap = secure_broker.status().bootstrap
    errors: list[str] = []
    settings = {**local_sasl.client_settings(secure_broker.dir, "admin"), "sasl.password": "not-the-password"}
    admin = AdminClient({"bootstrap.servers": bootstrap, **settings, "error_cb": lambda e: errors.append(str(e))})
    with pytest.raises(KafkaException):
        admin.list_topics(timeout=10)
    deadline = time.monotonic() + 30
    while not any("Authentication failed" in e for e in errors) and time.monotonic() < deadline:
        admin.poll(0.5)  # serves the error callback
    assert any("Authentication failed" in e for e in errors), errors
    no_sasl = AdminClient({"bootstrap.servers": bootstrap, "socket.timeout.ms": 3000})  # plaintext: no answer
    with pytest.raises(KafkaException):
        no_sasl.list_topics(timeout=5)


@pytest.mark.spark
def test_the_spark_balancer_reads_and_writes_with_the_coordinators_credentials(
        secure_broker: LocalBroker, spark: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Spark's Kafka source and the job's command sink take the coordinator's credentials from
    ``SEGCOORD_KAFKA_CONFIG``: the moves are the pure balancing stage's, and no process's command line
    (the Spark JVM's included) and no file of the checkpoint holds the password."""
    from tests.integration.test_spark_balancer import moves_of, pure_moves, run_available_now
    from tests.unit.balancer.balancer_events import ClusterSpec

    bootstrap = secure_broker.status().bootstrap
    assert bootstrap is not None
    topics = Topics(f"k{uuid.uuid4().hex[:10]}.")
    admin = secure_broker.admin_config()
    monkeypatch.setenv(CONFIG_ENV, props(secure_broker, "admin"))
    create_topics(bootstrap, topics, partitions=1)
    local_sasl.grant_acls(bootstrap, admin, topics)
    spec = ClusterSpec(servers=8, new_servers=1, data_sources=3, hours=48)
    events = spec.events()
    producer = EventProducer(bootstrap, topics)  # as the admin: the cluster's history
    for env in events:
        producer.send(env)
    producer.flush()
    producer.close()

    monkeypatch.setenv(CONFIG_ENV, props(secure_broker, "coordinator"))
    run_available_now(spark, bootstrap, topics, tmp_path / "ck")
    commands = [decode(v) for v in values(bootstrap, admin, topics.name(COMMANDS))]
    assert moves_of(commands) == pure_moves(spec, events)

    secret = local_sasl.password(secure_broker.dir, "coordinator").encode()
    leaks = []
    for proc in Path("/proc").iterdir():
        try:
            if proc.name.isdigit() and secret in (proc / "cmdline").read_bytes():
                leaks.append(proc.name)
        except OSError:
            continue  # gone, or not ours to read
    assert not leaks, f"the coordinator's password is on the command line of processes {leaks}"
    stored = [p for p in (tmp_path / "ck").rglob("*") if p.is_file() and secret in p.read_bytes()]
    assert not stored, f"the Spark checkpoint holds the password: {stored}"


def test_the_secure_three_node_cluster_authenticates_and_authorizes_each_role(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """``segcoord kafka start --brokers 3 --secure``: replicated topics created by the admin; a task writes its
    lock requests and is refused on ``segments``; a subscriber reads ``timeline`` and no ``locks``; a bad
    password is refused. (The roles' whole jobs run on the one-node broker above: same settings per node.)"""
    from streaming.local_cluster import LocalCluster

    cluster = LocalCluster(tmp_path / "home", 3, secure=True)
    bootstrap = cluster.start()
    try:
        topics = Topics(f"c{uuid.uuid4().hex[:10]}.")
        monkeypatch.setenv(CONFIG_ENV, str(local_sasl.credentials_dir(cluster.dir) / "admin.properties"))
        create_topics(bootstrap, topics, partitions=1, replication=3)
        local_sasl.grant_acls(bootstrap, cluster.admin_config(), topics)

        monkeypatch.setenv(CONFIG_ENV, str(local_sasl.credentials_dir(cluster.dir) / "task.properties"))

        def request() -> EventProducer:  # a new producer each try: a refused one may be left in a fatal state
            producer = EventProducer(bootstrap, topics, extra={"message.timeout.ms": 20000})
            producer.send_raw(topics.name(LOCK_REQUESTS), b"wiki", b'{"a task": "request"}')
            try:
                producer.flush(30)  # allowed (acks=all across the 3 replicas)
            except ProduceError:
                with contextlib.suppress(ProduceError):
                    producer.close()
                raise
            return producer

        producer = until_authorized(request)
        producer.send_raw(topics.name(SEGMENTS), b"wiki", b'{"forged": true}')
        with pytest.raises(ProduceError, match="Topic authorization failed"):
            producer.flush(30)
        admin = cluster.admin_config()
        assert values(bootstrap, admin, topics.name(LOCK_REQUESTS)) == [b'{"a task": "request"}']
        assert values(bootstrap, admin, topics.name(SEGMENTS)) == []

        subscriber = local_sasl.client_settings(cluster.dir, "subscriber")
        assert until_authorized(lambda: values(bootstrap, subscriber, topics.name(TIMELINE))) == []
        with pytest.raises(KafkaException):
            values(bootstrap, subscriber, topics.name(LOCKS))

        wrong = {**local_sasl.client_settings(cluster.dir, "task"), "sasl.password": "not-the-password"}
        with pytest.raises(KafkaException):
            values(bootstrap, wrong, topics.name(LOCKS))
    finally:
        cluster.stop()
