"""Watching the running system: ``tail`` one topic decoded, and ``status`` of the worker.

``tail`` reads like kafka-console-consumer (no consumer group, nothing committed): from the end, or from
the beginning, every partition, one line per event. ``status`` asks Kafka only: the coordinator worker's
consumer group (members = alive; committed offsets against the ends = each agent's lag), the last
planning run from the ``metrics`` topic, and the dead letters of the last hour.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import orjson
from confluent_kafka import OFFSET_BEGINNING, OFFSET_END, Consumer, KafkaError, TopicPartition

from events.envelope import decode
from events.instant import format_instant
from events.schema import EventValidationError, encode_record
from events.topics import CLUSTER, COMMANDS, DEADLETTER, LOCK_REQUESTS, METRICS, SEGMENTS, Topics
from streaming import credentials

#: Which topics each agent of the worker reads (its lag is the sum over them).
AGENT_INPUTS = {"timeline": (SEGMENTS,), "lockbox": (LOCK_REQUESTS,), "planner": (SEGMENTS, CLUSTER, COMMANDS)}


class WatchError(RuntimeError):
    """A missing topic or an unreachable broker."""


def _partitions(consumer: Consumer, name: str) -> list[int]:
    meta = consumer.list_topics(name, timeout=10).topics.get(name)
    if meta is None or meta.error is not None:
        raise WatchError(f"topic {name} does not exist (run `segcoord topics create`)")
    return sorted(meta.partitions)


def line_of(logical: str, value: bytes | None, *, as_json: bool) -> str:
    """One decoded record as one line (the envelope JSON with ``--json``)."""
    if logical == METRICS:
        return (value or b"").decode(errors="replace")
    try:
        env = decode(value)
    except EventValidationError as e:
        return orjson.dumps({"undecodable": str(e)}).decode() if as_json else f"(undecodable: {e})"
    if as_json:
        return orjson.dumps(env.to_json()).decode()
    payload = orjson.dumps(encode_record(env.event)).decode()
    return f"{format_instant(env.occurred_at)} {env.event_type} [{env.key}] {payload}"


def tail(bootstrap: str, topics: Topics, logical: str, *, from_beginning: bool, as_json: bool,
         max_messages: int | None, timeout_s: float | None, out: Callable[[str], None]) -> int:
    """Print records of one topic until ``max_messages`` were printed or nothing came for ``timeout_s``."""
    name = topics.name(logical)
    consumer = Consumer({**credentials.client_config(bootstrap),
                         "group.id": "segcoord-tail", "enable.auto.commit": False,
                         "isolation.level": "read_committed"})
    printed = 0
    try:
        start = OFFSET_BEGINNING if from_beginning else OFFSET_END
        consumer.assign([TopicPartition(name, p, start) for p in _partitions(consumer, name)])
        last = time.monotonic()
        while max_messages is None or printed < max_messages:
            msg = consumer.poll(0.5)
            if msg is None:
                if timeout_s is not None and time.monotonic() - last >= timeout_s:
                    break
                continue
            if msg.error() is not None:
                if msg.error().code() == KafkaError._PARTITION_EOF:
                    continue
                raise WatchError(f"reading {name}: {msg.error().str()}")
            last = time.monotonic()
            out(line_of(logical, msg.value(), as_json=as_json))
            printed += 1
    finally:
        consumer.close()
    return printed


@dataclass(frozen=True, slots=True)
class Status:
    worker_alive: bool
    members: int
    lag: dict[str, int]
    last_plan: dict[str, Any] | None
    dead_letters_last_hour: int
    balancer: str  # "alive", "exited", "failed" (as last reported by the worker that started it) or "not started"

    def to_json(self) -> dict[str, Any]:
        return {"workerAlive": self.worker_alive, "members": self.members, "lag": self.lag,
                "lastPlan": self.last_plan, "deadLettersLastHour": self.dead_letters_last_hour,
                "sparkBalancer": self.balancer}


def status(bootstrap: str, topics: Topics, now_ms: int | None = None) -> Status:
    from confluent_kafka.admin import AdminClient

    from streaming.writes import coordinator_group

    now_ms = now_ms if now_ms is not None else int(time.time() * 1000)
    group = coordinator_group(topics)
    admin = AdminClient(credentials.client_config(bootstrap))
    try:
        described = admin.describe_consumer_groups([group], request_timeout=10)[group].result(timeout=15)
        members = len(described.members)
    except Exception:  # an unknown group: no worker ever ran
        members = 0
    consumer = Consumer({**credentials.client_config(bootstrap), "group.id": group, "enable.auto.commit": False})
    # the planner's inputs are read by the elected worker's own consumer, which commits under <group>.planner-feed
    feed = Consumer({**credentials.client_config(bootstrap), "group.id": group + ".planner-feed",
                     "enable.auto.commit": False})
    try:
        lag: dict[str, int] = {}
        for agent, ins in AGENT_INPUTS.items():
            reader = feed if agent == "planner" else consumer
            total = 0
            for logical in ins:
                name = topics.name(logical)
                tps = [TopicPartition(name, p) for p in _partitions(consumer, name)]
                for tp in reader.committed(tps, timeout=10):
                    low, high = consumer.get_watermark_offsets(tp, timeout=10)
                    total += high - (tp.offset if tp.offset >= 0 else low)
            lag[agent] = total
        dead = _count_since(consumer, topics.name(DEADLETTER), now_ms - 3600_000)
        last_plan, balancer = _last_reports(consumer, topics.name(METRICS))
    finally:
        consumer.close()
        feed.close()
    return Status(members > 0, members, lag, last_plan, dead, balancer)


def _count_since(consumer: Consumer, name: str, since_ms: int) -> int:
    total = 0
    tps = [TopicPartition(name, p, since_ms) for p in _partitions(consumer, name)]
    for tp in consumer.offsets_for_times(tps, timeout=10):
        _low, high = consumer.get_watermark_offsets(tp, timeout=10)
        total += 0 if tp.offset < 0 else high - tp.offset
    return total


def _last_reports(consumer: Consumer, name: str) -> tuple[dict[str, Any] | None, str]:
    """The newest ``coordinator/time`` metric event (Druid's emitter shape), if any, and the Spark balancer's
    last reported state."""
    newest: dict[str, dict[str, Any]] = {}
    for doc in _tail_records(consumer, name, 500):
        metric = doc.get("metric")
        if metric in ("coordinator/time", "segcoord/balancer/alive") and \
                (metric not in newest or doc["timestamp"] >= newest[metric]["timestamp"]):
            newest[str(metric)] = doc
    plan = newest.get("coordinator/time")
    alive = newest.get("segcoord/balancer/alive")
    return (None if plan is None else {"at": plan["timestamp"], "durationMs": plan["value"]},
            "not started" if alive is None else {1: "alive", 0: "exited (restarting)"}.get(
                int(alive["value"]), "failed (the planner agent balances)"))


def _tail_records(consumer: Consumer, name: str, per_partition: int) -> Iterator[dict[str, Any]]:
    tps = []
    ends: dict[int, int] = {}
    for p in _partitions(consumer, name):
        low, high = consumer.get_watermark_offsets(TopicPartition(name, p), timeout=10)
        if high > low:
            tps.append(TopicPartition(name, p, max(low, high - per_partition)))
            ends[p] = high
    if not tps:
        return
    consumer.assign(tps)
    remaining = dict(ends)
    while remaining:
        msg = consumer.poll(5.0)
        if msg is None:
            return
        if msg.error() is not None:
            continue
        if msg.offset() >= remaining.get(msg.partition(), 0) - 1:
            remaining.pop(msg.partition(), None)
        try:
            doc = orjson.loads(msg.value() or b"")
        except orjson.JSONDecodeError:
            continue
        if isinstance(doc, dict):
            yield doc
