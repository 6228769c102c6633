"""A builder for lockbox scenarios: send requests with stepped event time, read the decisions."""

from __future__ import annotations

from typing import Any

from coordinator.locks.lockbox import Lockbox
from events import (
    Envelope,
    Event,
    Instant,
    Interval,
    LockRequested,
    PublishRequested,
    SegmentAllocationRequested,
    SegmentDescriptor,
    TaskFinished,
    TaskStarted,
    parse_instant,
)

BASE = parse_instant("2026-01-10T00:00:00Z")
DAY = Interval.parse("2026-01-01/P1D")


class Script:
    def __init__(self, data_source: str = "wiki") -> None:
        self.box = Lockbox()
        self.ds = data_source
        self.now = BASE
        self.seq = 0
        self.log: list[Event] = []
        self.groups: dict[str, str] = {}
        self.types: dict[str, str] = {}

    def send(self, event: Event, at: int | None = None) -> list[Event]:
        self.seq += 1
        env = Envelope(event, f"in-{self.seq}", Instant(at if at is not None else self.now), self.ds)
        self.now += 1000
        out = self.box.handle(env)
        self.log.extend(out)
        return out

    def start(self, task: str, task_type: str = "index", group: str | None = None, priority: int | None = None,
              data_source: str | None = None) -> list[Event]:
        self.groups[task] = group or task
        self.types[task] = task_type
        return self.send(TaskStarted(task_id=task, group_id=group or task, task_type=task_type,
                                     data_source=data_source or self.ds, priority=priority))

    def lock(self, task: str, interval: Interval = DAY, lock_type: str = "exclusive", granularity: str = "timeChunk",
             priority: int | None = None, partitions: tuple[int, ...] | None = None, rid: str | None = None,
             at: int | None = None, **kw: Any) -> Event:
        rid = rid or f"r{self.seq + 1}"
        out = self.send(LockRequested(
            request_id=rid, task_id=task, group_id=self.groups.get(task, task), task_type=self.types.get(task, "index"),
            data_source=self.ds, interval=interval, granularity=granularity,  # type: ignore[arg-type]
            lock_type=lock_type, priority=priority, partition_ids=partitions,  # type: ignore[arg-type]
            **kw), at)
        answers = [e for e in out if getattr(e, "request_id", None) == rid and type(e).__name__ != "LockRevoked"]
        return answers[-1]

    def allocate(self, task: str, interval: Interval = DAY, sequence: str = "seq", previous: str | None = None,
                 granularity: str = "segment", lock_type: str = "exclusive", skip_lineage: bool = False,
                 timestamp: int | None = None, at: int | None = None) -> Event:
        rid = f"a{self.seq + 1}"
        out = self.send(SegmentAllocationRequested(
            request_id=rid, task_id=task, data_source=self.ds,
            timestamp=Instant(timestamp if timestamp is not None else interval.start), sequence_name=sequence,
            previous_segment_id=previous, skip_lineage_check=skip_lineage, interval=interval,
            lock_granularity=granularity, lock_type=lock_type,  # type: ignore[arg-type]
        ), at)
        return [e for e in out if getattr(e, "request_id", None) == rid][-1]

    def publish(self, task: str, *segments: SegmentDescriptor, start: Any = None, end: Any = None,
                **kw: Any) -> Event:
        rid = f"p{self.seq + 1}"
        out = self.send(PublishRequested(request_id=rid, task_id=task, segments=segments, start_metadata=start,
                                         end_metadata=end, **kw))
        return out[-1]

    def finish(self, task: str, status: str = "success") -> list[Event]:
        return self.send(TaskFinished(task_id=task, status=status))  # type: ignore[arg-type]


def seg(version: str, partition: int = 0, interval: Interval = DAY, data_source: str = "wiki", size: int = 1000,
        **kw: Any) -> SegmentDescriptor:
    return SegmentDescriptor(data_source, interval, version, partition, size, **kw)
