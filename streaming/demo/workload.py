"""The demo's workload: streaming ingestion of three data sources, then the operator's day, step by step.

:class:`Ingestion` runs one thread per data source, as Druid's Kafka indexing
tasks: a task (``index_kafka``) registers, allocates the segment of each hour it
reads (its lock taken by the allocation), publishes it, and after a few hours hands
off (finishes) to the next task of the data source. Hours are real: the first full
UTC day of the range (``compaction_day``, two days ago) and then the hours up to
now, so a ``loadByPeriod P1D`` rule picks the recent ones.

The steps the demo runs with it (:mod:`streaming.demo`) are the operator's: rules,
dynamic config, a compaction of one day (a new version that overshadows the day's
24 hourly segments at once), a server joining, one decommissioned, one killed.
Every step is an event on the demo's topics, as an operator's tool would write it.
"""

from __future__ import annotations

import dataclasses
import random
import threading
import time
import uuid
from dataclasses import dataclass, field

from events.cluster import DynamicConfigSet, RulesSet, ServerDecommissioned, ServerLeft
from events.envelope import Envelope
from events.interval import Interval
from events.locks import LockGranted, SegmentAllocated
from events.registry import Event
from events.schema import Instant, JsonObject
from events.segment import SegmentDescriptor
from events.topics import Topics
from streaming.producer import EventProducer
from streaming.task_client import TaskClient

HOUR = 3_600_000
DAY = 24 * HOUR
DATA_SOURCES = ("wikipedia", "clicks", "metrics")
MB = 1_000_000

INITIAL_RULES: tuple[JsonObject, ...] = ({"type": "loadForever", "tieredReplicants": {"_default_tier": 1}},)
HOT_RULES: tuple[JsonObject, ...] = (
    {"type": "loadByPeriod", "period": "P1D", "includeFuture": True, "tieredReplicants": {"hot": 1}},
    {"type": "loadForever", "tieredReplicants": {"_default_tier": 1}},
)


def hours_of(now_ms: int, recent_hours: int) -> tuple[Interval, list[Interval]]:
    """The compaction day (the UTC day two days before ``now``) and the hours to ingest, in time order:
    the day's 24, then the ``recent_hours`` up to the hour before ``now``'s."""
    day_start = (now_ms // DAY - 2) * DAY
    day = Interval(day_start, day_start + DAY)
    top = now_ms // HOUR * HOUR
    recent = [Interval(top - k * HOUR, top - (k - 1) * HOUR) for k in range(recent_hours, 0, -1)]
    return day, [Interval(day_start + h * HOUR, day_start + (h + 1) * HOUR) for h in range(24)] + \
        [iv for iv in recent if iv.start >= day.end]


@dataclass
class Ingestion:
    """One thread per data source publishing its hours; ``pace_s`` between hours."""

    bootstrap: str
    topics: Topics
    hours: list[Interval]
    pace_s: float
    hours_per_task: int = 8
    seed: int = 15
    published: dict[str, list[SegmentDescriptor]] = field(default_factory=dict)
    errors: list[str] = field(default_factory=list)
    tasks: int = 0

    def __post_init__(self) -> None:
        self._threads = [threading.Thread(target=self._run, args=(ds,), name=f"ingest-{ds}", daemon=True)
                         for ds in DATA_SOURCES]
        self._stop = threading.Event()
        self._lock = threading.Lock()

    def start(self) -> None:
        for t in self._threads:
            t.start()

    def done(self) -> bool:
        return not any(t.is_alive() for t in self._threads)

    def stop(self) -> None:
        self._stop.set()
        for t in self._threads:
            t.join(60)

    def count(self) -> int:
        with self._lock:
            return sum(len(v) for v in self.published.values())

    def _run(self, ds: str) -> None:
        rng = random.Random(f"{self.seed}-{ds}")
        try:
            for first in range(0, len(self.hours), self.hours_per_task):
                if self._stop.is_set():
                    return
                task_id = f"index_kafka_{ds}_{uuid.uuid4().hex[:8]}"
                with TaskClient(self.bootstrap, self.topics, task_id, f"index_kafka_{ds}", "index_kafka", ds,
                                timeout=60) as task:
                    with self._lock:
                        self.tasks += 1
                    task.start()
                    previous: str | None = None
                    for hour in self.hours[first:first + self.hours_per_task]:
                        got = task.allocate(hour.start + rng.randrange(HOUR), f"{task_id}_0", previous,
                                            interval=hour).event
                        assert isinstance(got, SegmentAllocated)
                        seg = dataclasses.replace(got.segment, size=rng.randrange(40, 160) * MB)
                        task.publish([seg])
                        previous = got.segment_id
                        with self._lock:
                            self.published.setdefault(ds, []).append(seg)
                        if self._stop.wait(self.pace_s):
                            break
                    task.finish()
        except Exception as e:  # shown in the report; the demo fails on it
            self.errors.append(f"{ds}: {type(e).__name__}: {e}")


def compact(bootstrap: str, topics: Topics, data_source: str, day: Interval,
            inputs: list[SegmentDescriptor]) -> SegmentDescriptor:
    """A compaction task: an exclusive lock on the day (a new version), one segment for it, published at once."""
    task_id = f"compact_{data_source}_{uuid.uuid4().hex[:8]}"
    with TaskClient(bootstrap, topics, task_id, task_id, "compact", data_source, timeout=60) as task:
        task.start()
        lock = task.lock(day)
        assert isinstance(lock.event, LockGranted)
        out = task.allocate(day.start, "compact", interval=day).event
        assert isinstance(out, SegmentAllocated)
        total = sum(s.size for s in inputs)
        seg = dataclasses.replace(out.segment, size=int(total * 0.6))  # compacted: fewer, bigger rows
        task.publish([seg])
        task.finish()
    return seg


class Operator:
    """The operator's events: rules, dynamic config, decommissioning, a dead server's ServerLeft."""

    def __init__(self, bootstrap: str, topics: Topics) -> None:
        self._producer = EventProducer(bootstrap, topics)

    def _send(self, event: Event, key: str) -> None:
        self._producer.send(Envelope(event, uuid.uuid4().hex, Instant(int(time.time() * 1000)), key))
        self._producer.flush()

    def rules(self, data_source: str, rules: tuple[JsonObject, ...]) -> None:
        self._send(RulesSet(data_source=data_source, rules=rules), f"rules/{data_source}")

    def config(self, config: JsonObject) -> None:
        self._send(DynamicConfigSet(config=config), "config")

    def decommission(self, server: str, tier: str, max_size: int) -> None:
        self._send(ServerDecommissioned(server=server, tier=tier, max_size_bytes=max_size), server)

    def server_left(self, server: str, tier: str, max_size: int) -> None:
        self._send(ServerLeft(server=server, tier=tier, max_size_bytes=max_size), server)

    def close(self) -> None:
        self._producer.close()
