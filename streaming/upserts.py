"""``UpsertStrategy``: the client that follows the ``upsert-strategy`` topic and answers ``filter_for``.

The upsert agent (:mod:`streaming.service.upsert_agent`) writes each upsert
table's current strategy to the compacted ``upsert-strategy`` topic, keyed by
table name. This client reads it from the beginning (compaction keeps the latest
record of every table), keeps the latest per table, and builds the Druid filter
for a query interval with the same pure code the agent uses
(:class:`~coordinator.upserts.strategy.Strategy`).

Like :class:`~streaming.subscribers.QueryableView`, it writes nothing and assigns
partitions explicitly, so any number of clients read independently. Records it
cannot parse are counted (``undecodable``) and skipped.
"""

from __future__ import annotations

from typing import Any

import orjson
from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, TopicPartition

from coordinator.upserts.strategy import Filter, Strategy
from events.interval import Interval
from events.topics import UPSERT_STRATEGY, Topics
from streaming import credentials


class UnknownUpsertTable(LookupError):
    """No strategy was read for this table (not declared, or the agent has not written it yet)."""


class UpsertStrategy:
    """The latest strategy of every upsert table, kept current by :meth:`refresh`."""

    def __init__(self, bootstrap: str, topics: Topics) -> None:
        self.topic = topics.name(UPSERT_STRATEGY)
        self._consumer = Consumer({**credentials.client_config(bootstrap), "group.id": "segcoord-upsert-strategy",
                                   "enable.auto.commit": False, "enable.partition.eof": False})
        partitions = sorted(self._consumer.list_topics(self.topic, timeout=10).topics[self.topic].partitions)
        self._consumer.assign([TopicPartition(self.topic, p, OFFSET_BEGINNING) for p in partitions])
        self._records: dict[str, dict[str, Any]] = {}
        self._strategies: dict[str, Strategy] = {}
        self.timestamps: dict[str, int] = {}  # table -> broker timestamp (ms) of its latest record
        self.updates = 0
        self.undecodable = 0

    def refresh(self, timeout: float = 0.2) -> int:
        """Apply the records the topic has gained; returns how many."""
        first = self._consumer.poll(timeout)
        messages = [] if first is None else [first, *self._consumer.consume(499, 0)]
        applied = 0
        for msg in messages:
            err = msg.error()
            if err is not None:
                if err.code() == KafkaError._PARTITION_EOF:
                    continue
                raise RuntimeError(f"consumer error: {err.str()}")
            key, value = msg.key(), msg.value()
            if key is None or value is None:
                continue
            try:
                record = orjson.loads(value)
                strategy = Strategy.from_json(record)
            except (orjson.JSONDecodeError, KeyError, TypeError, ValueError):
                self.undecodable += 1
                continue
            table = key.decode()
            self._records[table] = record
            self._strategies[table] = strategy
            self.timestamps[table] = msg.timestamp()[1]
            applied += 1
        self.updates += applied
        return applied

    def catch_up(self, idle_timeout: float = 1.0) -> None:
        while self.refresh(idle_timeout):
            pass

    def tables(self) -> list[str]:
        return sorted(self._records)

    def record(self, table: str) -> dict[str, Any]:
        """The table's latest record as the agent wrote it (``latest``, ``superseded``, ``filter`` ...)."""
        try:
            return self._records[table]
        except KeyError:
            raise UnknownUpsertTable(f"no strategy for upsert table {table!r} (known: "
                                     f"{', '.join(self.tables()) or 'none'})") from None

    def strategy(self, table: str) -> Strategy:
        self.record(table)
        return self._strategies[table]

    def filter_for(self, table: str, interval: Interval | None = None) -> Filter:
        """The Druid filter for a query of ``table`` over ``interval`` (all of time when None): only the fresh
        keys whose segments overlap the interval appear in it."""
        return self.strategy(table).filter_for(interval)

    def close(self) -> None:
        self._consumer.close()
