"""The wire contract: envelope, every event type, codecs, validation, upcasters, topic names.

Pure: no I/O library, no clock, no randomness. Importing this package
registers every event type.
"""

from events.cluster import (
    DynamicConfigSet,
    RulesSet,
    SegmentLoadRefused,
    ServerDecommissioned,
    ServerHeartbeat,
    ServerJoined,
    ServerLeft,
    ServerLost,
    ServerRecommissioned,
)
from events.commands import CancelSegmentLoad, DropSegment, LoadSegment
from events.deadletter import DeadLettered
from events.envelope import Envelope, decode, encode, from_json
from events.ids import derived_event_id
from events.instant import format_instant, parse_instant
from events.interval import ETERNITY, Interval, IntervalError
from events.locks import (
    LockDenied,
    LockGranted,
    LockReleased,
    LockRevoked,
    LockWaiting,
    PublishAccepted,
    PublishRejected,
    SegmentAllocated,
    SegmentsImported,
    SegmentsImportRejected,
    SegmentsMarkRejected,
    TaskDeregistered,
    TaskLock,
    TaskRegistered,
)
from events.period import Period, PeriodError
from events.registry import Event, all_event_classes, event_class
from events.schema import EventValidationError, Instant
from events.segment import SegmentDescriptor, SegmentId, SegmentIdError
from events.segments import (
    SegmentAnnounced,
    SegmentsMarkedUnused,
    SegmentsMarkedUsed,
    SegmentsPublished,
    SegmentUnannounced,
)
from events.tasks import (
    LockReleaseRequested,
    LockRequested,
    PublishRequested,
    SegmentAllocationRequested,
    SegmentsImportRequested,
    SegmentsMarkUnusedRequested,
    SegmentsMarkUsedRequested,
    TaskFinished,
    TaskStarted,
)
from events.topics import TOPIC_SPECS, Topics, TopicSpec
from events.upserts import (
    ConsolidationInterval,
    ConsolidationRequested,
    UpsertConsolidationAsked,
    UpsertPartition,
    UpsertTableSet,
)
from events.visibility import SegmentVisibilityChanged

__all__ = [
    "ETERNITY",
    "TOPIC_SPECS",
    "CancelSegmentLoad",
    "ConsolidationInterval",
    "ConsolidationRequested",
    "DeadLettered",
    "DropSegment",
    "DynamicConfigSet",
    "Envelope",
    "Event",
    "EventValidationError",
    "Instant",
    "Interval",
    "IntervalError",
    "LoadSegment",
    "LockDenied",
    "LockGranted",
    "LockReleaseRequested",
    "LockReleased",
    "LockRequested",
    "LockRevoked",
    "LockWaiting",
    "Period",
    "PeriodError",
    "PublishAccepted",
    "PublishRejected",
    "PublishRequested",
    "RulesSet",
    "SegmentAllocated",
    "SegmentAllocationRequested",
    "SegmentAnnounced",
    "SegmentDescriptor",
    "SegmentId",
    "SegmentIdError",
    "SegmentLoadRefused",
    "SegmentUnannounced",
    "SegmentVisibilityChanged",
    "SegmentsImportRejected",
    "SegmentsImportRequested",
    "SegmentsImported",
    "SegmentsMarkRejected",
    "SegmentsMarkUnusedRequested",
    "SegmentsMarkUsedRequested",
    "SegmentsMarkedUnused",
    "SegmentsMarkedUsed",
    "SegmentsPublished",
    "ServerDecommissioned",
    "ServerHeartbeat",
    "ServerJoined",
    "ServerLeft",
    "ServerLost",
    "ServerRecommissioned",
    "TaskDeregistered",
    "TaskFinished",
    "TaskLock",
    "TaskRegistered",
    "TaskStarted",
    "TopicSpec",
    "Topics",
    "UpsertConsolidationAsked",
    "UpsertPartition",
    "UpsertTableSet",
    "all_event_classes",
    "decode",
    "derived_event_id",
    "encode",
    "event_class",
    "format_instant",
    "from_json",
    "parse_instant",
]
