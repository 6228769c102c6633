"""Lockbox decisions on ``locks``: every answer to a request is one of these events.

Each decision carries the ``requestId`` it answers (release and revocation
carry the request that caused them when there is one), the lock or segment it
concerns, and a ``reason`` where something is refused.

The topic is the lockbox's whole history: folding it rebuilds the lockbox
exactly. That is why the task lifecycle (``task_registered``,
``task_deregistered``) and accepted publishes (``publish_accepted``, with the
upgraded copies a replace commit creates) are decisions here too; the lock agent
also writes accepted publishes to ``segments`` as ``segments_published``.
"""

from __future__ import annotations

from dataclasses import dataclass

from events.interval import Interval
from events.registry import Event, event_type
from events.schema import JsonValue, wire
from events.segment import SegmentDescriptor
from events.tasks import LockGranularity, LockType, PublishKind, TaskStatus
from events.topics import LOCKS


@dataclass(frozen=True, slots=True)
class TaskLock:
    """A lock as the lockbox holds it. ``partitionIds`` only for segment granularity.

    ``forAllocation``: the lock was taken by a segment allocation (Druid's SegmentAllocateAction), not
    requested by the task beforehand. Allocations under such an exclusive lock append to the existing time
    chunk; under an exclusive lock the task requested itself they overwrite with the lock's version.
    """

    lock_id: str = wire("lockId")
    task_id: str = wire("taskId")
    group_id: str = wire("groupId")
    data_source: str = wire("dataSource")
    interval: Interval = wire("interval")
    granularity: LockGranularity = wire("granularity")
    lock_type: LockType = wire("type")
    version: str = wire("version")
    priority: int = wire("priority")
    partition_ids: tuple[int, ...] = wire("partitionIds", (), minimum=0)
    revoked: bool = wire("revoked", False)
    for_allocation: bool | None = wire("forAllocation", None)


@event_type("lock_granted", topic=LOCKS)
@dataclass(frozen=True, slots=True)
class LockGranted(Event):
    """The task holds ``lock`` (a new one, or its group's existing one that the task joins).

    An idempotent re-request answered with a revoked lock carries ``revoked: true``
    in the lock and says so in ``reason``. ``absorbedLockIds``: the group's APPEND
    locks inside this wider APPEND lock, which it replaces (their holders hold it).
    """

    request_id: str = wire("requestId")
    task_id: str = wire("taskId")
    lock: TaskLock = wire("lock")
    revoked_lock_ids: tuple[str, ...] = wire("revokedLockIds", ())
    reason: str | None = wire("reason", None)
    absorbed_lock_ids: tuple[str, ...] | None = wire("absorbedLockIds", None)


@event_type("lock_waiting", topic=LOCKS)
@dataclass(frozen=True, slots=True)
class LockWaiting(Event):
    request_id: str = wire("requestId")
    task_id: str = wire("taskId")
    reason: str = wire("reason")
    blocking_lock_ids: tuple[str, ...] = wire("blockingLockIds", ())


@event_type("lock_denied", topic=LOCKS)
@dataclass(frozen=True, slots=True)
class LockDenied(Event):
    request_id: str = wire("requestId")
    task_id: str = wire("taskId")
    reason: str = wire("reason")


@event_type("lock_revoked", topic=LOCKS)
@dataclass(frozen=True, slots=True)
class LockRevoked(Event):
    lock_ids: tuple[str, ...] = wire("lockIds", non_empty=True)
    reason: str = wire("reason")
    request_id: str | None = wire("requestId", None)


@event_type("lock_released", topic=LOCKS)
@dataclass(frozen=True, slots=True)
class LockReleased(Event):
    task_id: str = wire("taskId")
    lock_ids: tuple[str, ...] = wire("lockIds", non_empty=True)
    reason: str = wire("reason", allow_empty=True)
    request_id: str | None = wire("requestId", None)


@event_type("segment_allocated", topic=LOCKS)
@dataclass(frozen=True, slots=True)
class SegmentAllocated(Event):
    """A new segment id. The sequence fields are the allocation's idempotency key, kept for replay."""

    request_id: str = wire("requestId")
    task_id: str = wire("taskId")
    segment_id: str = wire("segmentId")
    segment: SegmentDescriptor = wire("segment")
    lock_id: str | None = wire("lockId", None)
    sequence_name: str | None = wire("sequenceName", None)
    previous_segment_id: str | None = wire("previousSegmentId", None)
    skip_lineage_check: bool = wire("skipLineageCheck", False)


@event_type("publish_rejected", topic=LOCKS)
@dataclass(frozen=True, slots=True)
class PublishRejected(Event):
    request_id: str = wire("requestId")
    task_id: str = wire("taskId")
    reason: str = wire("reason")


@event_type("publish_accepted", topic=LOCKS)
@dataclass(frozen=True, slots=True)
class PublishAccepted(Event):
    """Every segment the publish commits: the task's own and any upgraded copies, in commit order.

    ``upgradedFromSegmentIds`` is parallel to ``upgradedSegmentIds``: the appended
    segment each copy holds the rows of. ``kind`` is the request's publish kind.
    ``alreadyPublished``: a re-sent publish of exactly what is committed, answered
    as accepted; it changes nothing (not even the stream offsets).
    """

    request_id: str = wire("requestId")
    task_id: str = wire("taskId")
    segments: tuple[SegmentDescriptor, ...] = wire("segments", non_empty=True)
    upgraded_segment_ids: tuple[str, ...] = wire("upgradedSegmentIds", ())
    start_metadata: JsonValue | None = wire("startMetadata", None)
    end_metadata: JsonValue | None = wire("endMetadata", None)
    upgraded_from_segment_ids: tuple[str, ...] | None = wire("upgradedFromSegmentIds", None)
    kind: PublishKind | None = wire("kind", None)
    already_published: bool | None = wire("alreadyPublished", None)


@event_type("task_registered", topic=LOCKS)
@dataclass(frozen=True, slots=True)
class TaskRegistered(Event):
    """The lockbox knows the task from now on, with its effective priority."""

    task_id: str = wire("taskId")
    group_id: str = wire("groupId")
    task_type: str = wire("taskType")
    data_source: str = wire("dataSource")
    priority: int = wire("priority")


@event_type("task_deregistered", topic=LOCKS)
@dataclass(frozen=True, slots=True)
class TaskDeregistered(Event):
    """The task ended; requests from it are denied from now on."""

    task_id: str = wire("taskId")
    status: TaskStatus = wire("status")


@event_type("segments_imported", topic=LOCKS)
@dataclass(frozen=True, slots=True)
class SegmentsImported(Event):
    """Segments imported from outside (an existing Druid's metadata), checked and committed by the lockbox.

    ``alreadyImported``: every segment was already committed with exactly these contents; nothing changes.
    """

    request_id: str = wire("requestId")
    segments: tuple[SegmentDescriptor, ...] = wire("segments", non_empty=True)
    source: str = wire("source", allow_empty=True)
    already_imported: bool | None = wire("alreadyImported", None)


@event_type("segments_import_rejected", topic=LOCKS)
@dataclass(frozen=True, slots=True)
class SegmentsImportRejected(Event):
    request_id: str = wire("requestId")
    reason: str = wire("reason")


@event_type("segments_mark_rejected", topic=LOCKS)
@dataclass(frozen=True, slots=True)
class SegmentsMarkRejected(Event):
    """The lockbox's refusal of a ``segments_mark_used_requested`` or ``segments_mark_unused_requested``."""

    request_id: str = wire("requestId")
    reason: str = wire("reason")
