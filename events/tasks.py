"""Events ingestion tasks write on ``lock-requests``: task lifecycle, lock, allocation and publish requests.

``task_finished`` is at schema version 2: version 1 said ``{"taskId", "success": bool}``;
version 2 says ``{"taskId", "status": "success" | "failed"}`` as Druid's TaskStatus
does, which leaves room for more terminal states. :func:`task_finished_v1_to_v2`
upcasts the old payloads on read.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from events.interval import Interval
from events.limits import MAX_PARTITIONS_PER_LOCK_REQUEST, MAX_SEGMENT_IDS, MAX_SEGMENTS_PER_REQUEST
from events.registry import Event, Payload, event_type, upcaster
from events.schema import Instant, JsonValue, wire
from events.segment import SegmentDescriptor, check_overwrite_generations
from events.topics import LOCK_REQUESTS

LockGranularity = Literal["timeChunk", "segment"]
LockType = Literal["exclusive", "shared", "append", "replace"]
TaskStatus = Literal["success", "failed"]
LockMode = Literal["blocking", "try"]
PublishKind = Literal["insert", "append", "replace"]


@event_type("task_started", topic=LOCK_REQUESTS)
@dataclass(frozen=True, slots=True)
class TaskStarted(Event):
    task_id: str = wire("taskId")
    group_id: str = wire("groupId")
    task_type: str = wire("taskType")
    data_source: str = wire("dataSource")
    priority: int | None = wire("priority", None)


@event_type("lock_requested", topic=LOCK_REQUESTS)
@dataclass(frozen=True, slots=True)
class LockRequested(Event):
    """A request for a lock. The interval may be empty on the wire: the lockbox denies it with a reason.

    ``mode`` ``try`` (Druid's TimeChunkLockTryAcquireAction) is denied at once
    when the lock cannot be granted now; ``blocking`` (the default) waits, for at
    most ``timeoutMs`` of event time when given. ``version`` names the version of
    a segment lock (the segments it locks) or a timeChunk lock's preferred version.
    """

    request_id: str = wire("requestId")
    task_id: str = wire("taskId")
    group_id: str = wire("groupId")
    task_type: str = wire("taskType")
    data_source: str = wire("dataSource")
    interval: Interval = wire("interval")
    granularity: LockGranularity = wire("granularity")
    lock_type: LockType = wire("lockType")
    priority: int | None = wire("priority", None)
    partition_ids: tuple[int, ...] | None = wire("partitionIds", None, minimum=0,
                                                 max_items=MAX_PARTITIONS_PER_LOCK_REQUEST)
    mode: LockMode | None = wire("mode", None)
    timeout_ms: int | None = wire("timeoutMs", None, minimum=0)
    version: str | None = wire("version", None)


@event_type("lock_release_requested", topic=LOCK_REQUESTS)
@dataclass(frozen=True, slots=True)
class LockReleaseRequested(Event):
    """Release the task's locks on exactly ``interval`` without ending the task (Druid's LockReleaseAction)."""

    request_id: str = wire("requestId")
    task_id: str = wire("taskId")
    data_source: str = wire("dataSource")
    interval: Interval = wire("interval")


@event_type("segment_allocation_requested", topic=LOCK_REQUESTS)
@dataclass(frozen=True, slots=True)
class SegmentAllocationRequested(Event):
    request_id: str = wire("requestId")
    task_id: str = wire("taskId")
    data_source: str = wire("dataSource")
    timestamp: Instant = wire("timestamp")
    sequence_name: str = wire("sequenceName")
    lock_granularity: LockGranularity = wire("lockGranularity")
    lock_type: LockType = wire("lockType")
    interval: Interval | None = wire("interval", None)
    previous_segment_id: str | None = wire("previousSegmentId", None)
    skip_lineage_check: bool = wire("skipLineageCheck", False)


@event_type("publish_requested", topic=LOCK_REQUESTS)
@dataclass(frozen=True, slots=True)
class PublishRequested(Event):
    """A transactional publish. ``kind`` says which of Druid's actions it is (absent: ``insert``):

    - ``insert`` (SegmentTransactionalInsertAction): under exclusive/shared
      timeChunk or segment locks; ``segmentsToBeOverwritten`` names published
      segments it overwrites (they must be locked by the task);
    - ``append`` (SegmentTransactionalAppendAction): under APPEND locks;
    - ``replace`` (SegmentTransactionalReplaceAction): under REPLACE locks; no stream metadata.
    """

    request_id: str = wire("requestId")
    task_id: str = wire("taskId")
    segments: tuple[SegmentDescriptor, ...] = wire("segments", non_empty=True, max_items=MAX_SEGMENTS_PER_REQUEST)
    start_metadata: JsonValue | None = wire("startMetadata", None)
    end_metadata: JsonValue | None = wire("endMetadata", None)
    kind: PublishKind | None = wire("kind", None)
    segments_to_be_overwritten: tuple[str, ...] | None = wire("segmentsToBeOverwritten", None)

    def _check(self, path: str) -> None:
        check_overwrite_generations(self.segments, f"{path}.segments" if path else "segments")


@event_type("task_finished", topic=LOCK_REQUESTS, version=2)
@dataclass(frozen=True, slots=True)
class TaskFinished(Event):
    task_id: str = wire("taskId")
    status: TaskStatus = wire("status")


@upcaster("task_finished", from_version=1)
def task_finished_v1_to_v2(payload: Payload) -> Payload:
    """v1 ``{"taskId", "success": bool}`` -> v2 ``{"taskId", "status"}``.

    A v1 payload without a boolean ``success`` is passed through unchanged, so
    validation of the v2 shape reports the missing ``status`` by name.

    >>> task_finished_v1_to_v2({"taskId": "t1", "success": False})
    {'taskId': 't1', 'status': 'failed'}
    """
    success = payload.get("success")
    if not isinstance(success, bool):
        return payload
    out = {k: v for k, v in payload.items() if k != "success"}
    out["status"] = "success" if success else "failed"
    return out


@event_type("segments_import_requested", topic=LOCK_REQUESTS)
@dataclass(frozen=True, slots=True)
class SegmentsImportRequested(Event):
    """An operator's import of segments that exist outside (``segcoord segments import FILE.json``).

    One data source per request; the lockbox answers ``segments_imported`` or ``segments_import_rejected``.
    """

    request_id: str = wire("requestId")
    segments: tuple[SegmentDescriptor, ...] = wire("segments", non_empty=True, max_items=MAX_SEGMENTS_PER_REQUEST)
    source: str = wire("source", allow_empty=True)

    def _check(self, path: str) -> None:
        check_overwrite_generations(self.segments, f"{path}.segments" if path else "segments")


@event_type("segments_mark_unused_requested", topic=LOCK_REQUESTS)
@dataclass(frozen=True, slots=True)
class SegmentsMarkUnusedRequested(Event):
    """An operator's ``segcoord segments mark-unused`` (Druid's ``POST .../datasources/{ds}/markUnused``).

    Operators hold no publish key, so they ask the lockbox, which writes the sealed ``segments_marked_unused``
    on ``segments`` (or ``segments_mark_rejected`` on ``locks``). Every id belongs to ``dataSource``.
    """

    request_id: str = wire("requestId")
    data_source: str = wire("dataSource")
    segment_ids: tuple[str, ...] = wire("segmentIds", non_empty=True, max_items=MAX_SEGMENT_IDS)
    reason: str = wire("reason", allow_empty=True)


@event_type("segments_mark_used_requested", topic=LOCK_REQUESTS)
@dataclass(frozen=True, slots=True)
class SegmentsMarkUsedRequested(Event):
    """An operator's ``segcoord segments mark-used`` (Druid's ``markUsed``): segments the lockbox committed
    earlier (published or imported) become used again. The lockbox writes the sealed ``segments_marked_used``
    or refuses a segment it never committed with these contents (``segments_mark_rejected``)."""

    request_id: str = wire("requestId")
    data_source: str = wire("dataSource")
    segments: tuple[SegmentDescriptor, ...] = wire("segments", non_empty=True, max_items=MAX_SEGMENTS_PER_REQUEST)
    reason: str = wire("reason", allow_empty=True)


    def _check(self, path: str) -> None:
        check_overwrite_generations(self.segments, f"{path}.segments" if path else "segments")
