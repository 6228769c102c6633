"""Creating the topics of events/topics.py on a broker (idempotent)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import AdminClient, ConfigResource, NewTopic

from events.topics import TOPIC_SPECS, Topics
from streaming import credentials

BROKER_DEFAULT = -1  # a replication factor of -1: the brokers' default.replication.factor


@dataclass(frozen=True, slots=True)
class TopicResult:
    name: str
    partitions: int
    outcome: str  # "created" | "exists"


def create_topics(
    bootstrap: str,
    topics: Topics,
    *,
    partitions: int = 3,
    overrides: Mapping[str, int] | None = None,
    replication: int | None = 1,
    timeout: float = 30.0,
) -> list[TopicResult]:
    """Create every topic of the design (``overrides`` maps logical names to partition counts).

    Event logs keep their whole history; ``snapshots`` is compacted. Topics that
    already exist are left as they are and reported as ``exists``. With ``replication`` > 1 every topic
    gets ``min.insync.replicas = replication - 1`` (3 replicas: 2), so with the producers' ``acks=all`` an
    acknowledged record is on two nodes and one node may be down without stopping writes. ``replication=None``
    takes the cluster's defaults (``default.replication.factor`` and ``min.insync.replicas`` of the brokers:
    what ``segcoord run`` uses for topics it has to create itself).
    """
    overrides = dict(overrides or {})
    unknown = set(overrides) - {s.name for s in TOPIC_SPECS}
    if unknown:
        raise ValueError(f"unknown topic(s) in partition overrides: {', '.join(sorted(unknown))}")
    if partitions < 1 or any(n < 1 for n in overrides.values()):
        raise ValueError("partition counts must be at least 1")
    admin = AdminClient(credentials.client_config(bootstrap))
    wanted = [
        NewTopic(
            topics.name(s.name),
            num_partitions=overrides.get(s.name, partitions),
            replication_factor=BROKER_DEFAULT if replication is None else replication,
            config={**s.configs(), **({"min.insync.replicas": str(replication - 1)}
                                      if replication is not None and replication > 1 else {})},
        )
        for s in TOPIC_SPECS
    ]
    futures = admin.create_topics(wanted, operation_timeout=timeout, request_timeout=timeout)
    results = []
    for topic in wanted:
        try:
            futures[topic.topic].result(timeout=timeout)
            outcome = "created"
        except KafkaException as e:
            if e.args[0].code() != KafkaError.TOPIC_ALREADY_EXISTS:
                raise
            outcome = "exists"
        results.append(TopicResult(topic.topic, topic.num_partitions, outcome))
    return results


def create_topic(bootstrap: str, name: str, partitions: int = 1, config: Mapping[str, str] | None = None,
                 replication: int = 1) -> None:
    """Create one topic by its physical name (tests and tools); an existing topic is fine. ``replication``
    :data:`BROKER_DEFAULT` takes the brokers' ``default.replication.factor``."""
    admin = AdminClient(credentials.client_config(bootstrap))
    fut = admin.create_topics([NewTopic(name, num_partitions=partitions, replication_factor=replication,
                                        config=dict(config or {}))])[name]
    try:
        fut.result(timeout=30)
    except KafkaException as e:
        if e.args[0].code() != KafkaError.TOPIC_ALREADY_EXISTS:
            raise


@dataclass(frozen=True, slots=True)
class Replication:
    """How a topic is replicated: its replica count and its ``min.insync.replicas`` (None: unknown)."""

    factor: int
    min_insync: str | None

    def topic_config(self) -> dict[str, str]:
        return {} if self.min_insync is None else {"min.insync.replicas": self.min_insync}


def replication_of(bootstrap: str, name: str, timeout: float = 10.0) -> Replication | None:
    """The replication of an existing topic (None: it does not exist). A topic created at run time (the planner
    election's) is replicated like the deployment's own topics, read from one of them, so a 3-node cluster
    whose topics have 3 replicas and ``min.insync.replicas=2`` gets the same for it."""
    admin = AdminClient(credentials.client_config(bootstrap))
    found = admin.list_topics(name, timeout=timeout).topics.get(name)
    if found is None or found.error is not None or not found.partitions:
        return None
    factor = min(len(p.replicas) for p in found.partitions.values())
    resource = ConfigResource(ConfigResource.Type.TOPIC, name)
    try:
        entry = admin.describe_configs([resource])[resource].result(timeout=timeout).get("min.insync.replicas")
    except KafkaException:  # not allowed to describe configs: the count alone
        entry = None
    return Replication(factor, None if entry is None else entry.value)
