"""The timeline agent's snapshots on Kafka: when they are written, and how a gaining worker finds the latest.

The snapshot itself and its codec are pure (:mod:`coordinator.timeline.snapshot`); the agent takes and adopts
them (:meth:`~streaming.service.timeline_agent.TimelineAgent.write_snapshots`,
:meth:`~streaming.service.timeline_agent.TimelineAgent.adopt`). This module holds the shell's part:

- :class:`SnapshotPolicy`: a partition's state is written to ``snapshots`` (compacted, key
  ``timeline/<partition>``) after a batch once ``every_records`` events of it were applied since its last
  snapshot (default 10,000; or as many as the segments it held then, when more), or once ``every_ms`` passed
  (default 60 s) with at least one applied; each
  snapshot carries the ids of the last ``recent_ids`` events applied in the partition (default 10,000, the
  dedupe window a resuming worker gets; docs/workers.md says why that is enough). Environment:
  ``SEGCOORD_TIMELINE_SNAPSHOT_EVERY``, ``SEGCOORD_TIMELINE_SNAPSHOT_MS``, ``SEGCOORD_TIMELINE_SNAPSHOT_IDS``;
  ``SEGCOORD_TIMELINE_SNAPSHOT_EVERY=0`` turns snapshots off.
- :func:`latest_snapshots`: the latest snapshot of each asked partition, read from ``snapshots`` up to its end
  (the last record per key in log order: compaction keeps exactly that one). A record that does not decode is
  skipped with a warning (the worker then rebuilds that partition from the log, as without a snapshot).
- :class:`SnapshotTail`: the worker's reader: a thread that follows ``snapshots`` from the beginning and keeps
  the latest record per partition key, so a rebalance looks the snapshot up in memory instead of reading the
  topic inside the consumer's seek (a read there, about a second on a loaded machine, let the group's
  generation move on before the seek's offset commit, whose failure made the member rejoin: a rebalance
  storm). A snapshot written just before the gain that the thread has not read yet is missed; the worker
  then starts from an older one or from its store, which is still exact, only longer.
"""

from __future__ import annotations

import logging
import os
import threading
import time
import uuid
from collections.abc import Collection, Mapping
from dataclasses import dataclass
from typing import Any

from coordinator.timeline.snapshot import PartitionSnapshot, SnapshotError, decode_snapshot, snapshot_key
from events.topics import SNAPSHOTS, Topics
from streaming import credentials

log = logging.getLogger("segcoord.service")

EVERY_ENV, EVERY_MS_ENV, IDS_ENV = ("SEGCOORD_TIMELINE_SNAPSHOT_EVERY", "SEGCOORD_TIMELINE_SNAPSHOT_MS",
                                    "SEGCOORD_TIMELINE_SNAPSHOT_IDS")
MAX_SNAPSHOT_BYTES = 900_000  # under Kafka's default 1 MB record limit: a larger one is not written (logged)
# A partition holding more segments than this is not even tried: its snapshot cannot fit in MAX_SNAPSHOT_BYTES,
# since a segment's facts and id never compress below 8 bytes (each names its own interval twice, as two
# epoch-millisecond numbers and in its id text; 19-20 bytes a segment in bench.snapshot_stall, one data source of
# hourly segments). Building one costs CPU in proportion to the partition: seconds at 1M segments, for nothing.
MAX_SNAPSHOT_SEGMENTS = MAX_SNAPSHOT_BYTES // 8
# What librdkafka fetches ahead of the readers of ``snapshots``: a few records (up to ``MAX_SNAPSHOT_BYTES`` each),
# not its defaults (100,000 messages per partition, 64 MB), which would queue the whole uncompacted topic in native
# memory while a worker that is busy starting up reads it (only the last record per key is kept).
PREFETCH = {"queued.min.messages": 8, "queued.max.messages.kbytes": 2048}


@dataclass(frozen=True, slots=True)
class SnapshotPolicy:
    """When the timeline agent writes a partition's snapshot (see the module docstring)."""

    every_records: int = 10_000
    every_ms: int = 60_000
    recent_ids: int = 10_000

    def __post_init__(self) -> None:
        if self.every_records < 1 or self.every_ms < 1 or self.recent_ids < 0:
            raise ValueError(f"timeline snapshots: every_records and every_ms must be positive, recent_ids not "
                             f"negative, got {self}")

    @staticmethod
    def from_env(environ: dict[str, str] | None = None) -> SnapshotPolicy | None:
        """The policy the environment sets (None: ``SEGCOORD_TIMELINE_SNAPSHOT_EVERY=0``, snapshots off)."""
        env = os.environ if environ is None else environ
        values = {}
        for name, field, default in ((EVERY_ENV, "every_records", 10_000), (EVERY_MS_ENV, "every_ms", 60_000),
                                     (IDS_ENV, "recent_ids", 10_000)):
            raw = env.get(name)
            try:
                values[field] = default if raw is None else int(raw)
            except ValueError:
                raise ValueError(f"{name} must be an integer, not {raw!r}") from None
        if values["every_records"] == 0:
            return None
        try:
            return SnapshotPolicy(**values)
        except ValueError as e:
            raise ValueError(f"{EVERY_ENV} / {EVERY_MS_ENV} / {IDS_ENV}: {e}") from None


def latest_snapshots(bootstrap: str, topics: Topics, partitions: Collection[int],
                     timeout_s: float = 30.0) -> dict[int, PartitionSnapshot]:
    """The latest decodable timeline snapshot of each of ``partitions`` (of ``segments``) on ``snapshots``."""
    from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, TopicPartition

    if not partitions:
        return {}
    name = topics.name(SNAPSHOTS)
    wanted = {snapshot_key(p): p for p in partitions}
    latest: dict[int, bytes] = {}
    c = Consumer({**credentials.client_config(bootstrap), "group.id": f"segcoord-snapshots-{uuid.uuid4().hex}",
                  "enable.auto.commit": False, "enable.partition.eof": True, **PREFETCH})
    try:
        meta = c.list_topics(name, timeout=timeout_s).topics.get(name)
        if meta is None or meta.error is not None:
            return {}
        parts = sorted(meta.partitions)
        pending = set()
        for p in parts:
            low, high = c.get_watermark_offsets(TopicPartition(name, p), timeout=timeout_s)
            if high > low:
                pending.add(p)
        c.assign([TopicPartition(name, p, OFFSET_BEGINNING) for p in sorted(pending)])
        deadline = time.monotonic() + timeout_s
        while pending and time.monotonic() < deadline:
            for m in c.consume(500, 0.5):
                err = m.error()
                if err is not None:
                    if err.code() == KafkaError._PARTITION_EOF:
                        pending.discard(m.partition())
                    continue
                key, value = m.key(), m.value()
                if key in wanted and value is not None:
                    latest[wanted[key]] = value
                elif key in wanted:
                    latest.pop(wanted[key], None)  # a tombstone: no snapshot
        if pending:
            log.warning("reading %s: not at its end after %.0fs (partitions %s); using what was read",
                        name, timeout_s, sorted(pending))
    finally:
        c.close()
    out = {}
    for partition, raw in sorted(latest.items()):
        try:
            out[partition] = decode_snapshot(raw)
        except SnapshotError as e:
            log.warning("timeline snapshot of partition %d on %s skipped (the log is replayed instead): %s",
                        partition, name, e)
    return out


class SnapshotTail:
    """Follows ``snapshots`` on a thread of its own, keeping the latest timeline snapshot record per partition."""

    def __init__(self, bootstrap: str, topics: Topics, poll_s: float = 0.5,
                 extra: Mapping[str, Any] | None = None) -> None:
        self.bootstrap, self.name, self.poll_s = bootstrap, topics.name(SNAPSHOTS), poll_s
        self.extra = dict(extra or {})  # client settings: the worker routes librdkafka's log through Python's
        self._latest: dict[bytes, bytes] = {}
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="timeline-snapshots", daemon=True)

    def start(self) -> SnapshotTail:
        self._thread.start()
        return self

    def latest(self, partitions: Collection[int]) -> dict[int, PartitionSnapshot]:
        """The latest snapshot read so far of each of ``partitions`` that decodes (a bad one is logged)."""
        with self._lock:
            found = {p: self._latest[snapshot_key(p)] for p in partitions if snapshot_key(p) in self._latest}
        out = {}
        for partition, raw in sorted(found.items()):
            try:
                out[partition] = decode_snapshot(raw)
            except SnapshotError as e:
                log.warning("timeline snapshot of partition %d on %s skipped (the log is replayed instead): %s",
                            partition, self.name, e)
        return out

    def _run(self) -> None:
        from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition

        c = Consumer({**credentials.client_config(self.bootstrap), "group.id": f"segcoord-snapshots-{uuid.uuid4().hex}",
                      "enable.auto.commit": False, **PREFETCH, **self.extra})
        try:
            assigned: set[int] = set()
            while not self._stop.is_set():
                if not assigned:  # the topic may be created after the worker starts
                    try:
                        meta = c.list_topics(self.name, timeout=5).topics.get(self.name)
                    except Exception:
                        meta = None
                    if meta is None or meta.error is not None or not meta.partitions:
                        self._stop.wait(self.poll_s)
                        continue
                    assigned = set(meta.partitions)
                    c.assign([TopicPartition(self.name, p, OFFSET_BEGINNING) for p in sorted(assigned)])
                for m in c.consume(500, self.poll_s):
                    if m.error() is not None:
                        continue
                    key = m.key()
                    if key is None or not key.startswith(b"timeline/"):
                        continue
                    with self._lock:
                        value = m.value()
                        if value is None:
                            self._latest.pop(key, None)
                        else:
                            self._latest[key] = value
        except Exception as e:  # the snapshots are an optimization: without them the log is replayed
            log.warning("following %s stopped: %r (gained partitions replay the log)", self.name, e)
        finally:
            c.close()

    def close(self) -> None:
        self._stop.set()
        self._thread.join(10)
