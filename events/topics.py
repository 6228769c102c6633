"""Topic names, spelled out once; everything else imports them from here.

Names are stable strings, never generated from code layout. A deployment
prefix (default ``segcoord.``) is put in front of every name by
:meth:`Topics.name`.

Every event-log topic keeps its whole history (``retention.ms=-1``): the log is
the source of truth and replay to any point in time needs all of it. None of
them is compacted, not even ``cluster``: its events are deltas keyed by server
(``server_decommissioned`` after ``server_joined``), so compaction would drop
the tier and size that only the join carries. Compaction is for topics that
hold state, where the latest record per key is the whole value: ``snapshots``,
where agents keep their state snapshots keyed by ``<agent>/<partition>``, and
``upsert-strategy``, the current query strategy of each upsert table keyed by its name. ``metrics`` is not part of
the log: the service's metrics as Druid's Kafka emitter writes them, kept for a week.
"""

from __future__ import annotations

from dataclasses import dataclass

LOCK_REQUESTS = "lock-requests"
LOCKS = "locks"
SEGMENTS = "segments"
CLUSTER = "cluster"
TIMELINE = "timeline"
COMMANDS = "commands"
DEADLETTER = "deadletter"
SNAPSHOTS = "snapshots"
METRICS = "metrics"
UPSERT_STRATEGY = "upsert-strategy"

DEFAULT_PREFIX = "segcoord."


@dataclass(frozen=True, slots=True)
class TopicSpec:
    """A topic's logical name, what its messages are keyed by, and its cleanup policy."""

    name: str
    keyed_by: str
    compacted: bool = False
    retention_ms: int = -1

    def configs(self) -> dict[str, str]:
        """Broker topic configs: infinite retention for logs, compaction for state, a bounded time for metrics."""
        if self.compacted:
            return {"cleanup.policy": "compact", "min.compaction.lag.ms": "0"}
        return {"cleanup.policy": "delete", "retention.ms": str(self.retention_ms), "retention.bytes": "-1"}


TOPIC_SPECS: tuple[TopicSpec, ...] = (
    TopicSpec(LOCK_REQUESTS, "dataSource"),
    TopicSpec(LOCKS, "dataSource"),
    TopicSpec(SEGMENTS, "dataSource"),
    TopicSpec(CLUSTER, "server name, rules/<dataSource>, or config"),
    TopicSpec(TIMELINE, "dataSource"),
    TopicSpec(COMMANDS, "server name"),
    TopicSpec(DEADLETTER, "original key"),
    TopicSpec(SNAPSHOTS, "<agent>/<partition>", compacted=True),
    # state, not log: the latest query strategy of each upsert table (coordinator.upserts), keyed by table name
    TopicSpec(UPSERT_STRATEGY, "upsert table name", compacted=True),
    # not part of the event log: Druid Kafka-emitter JSON (one object per metric value), kept a week
    TopicSpec(METRICS, "metric name", retention_ms=7 * 24 * 3600 * 1000),
)


def spec(name: str) -> TopicSpec:
    for s in TOPIC_SPECS:
        if s.name == name:
            return s
    raise KeyError(f"unknown topic {name!r}; known: {', '.join(s.name for s in TOPIC_SPECS)}")


@dataclass(frozen=True, slots=True)
class Topics:
    """Physical topic names under one deployment prefix."""

    prefix: str = DEFAULT_PREFIX

    def name(self, logical: str) -> str:
        spec(logical)
        return self.prefix + logical

    def logical(self, physical: str) -> str:
        """The logical name of a physical topic under this prefix."""
        if not physical.startswith(self.prefix):
            raise KeyError(f"topic {physical!r} does not carry the prefix {self.prefix!r}")
        logical = physical[len(self.prefix):]
        spec(logical)
        return logical
