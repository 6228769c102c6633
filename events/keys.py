"""The partition key each event gets (docs/architecture.md), where the event itself determines it.

``segments``, ``timeline``, ``locks`` and ``lock-requests`` are keyed by data source,
``commands`` by server, ``cluster`` by server name, ``rules/<dataSource>``, ``config`` or
``upserts/<table>``.
Task-scoped events that do not name their data source (``task_finished``, most
lock decisions) return None: their producer knows the task's data source and
passes the key itself.

>>> from events.cluster import RulesSet
>>> partition_key(RulesSet(data_source="wiki", rules=()))
'rules/wiki'
"""

from __future__ import annotations

from events.cluster import (
    DynamicConfigSet,
    RulesSet,
    ServerDecommissioned,
    ServerHeartbeat,
    ServerJoined,
    ServerLeft,
    ServerLost,
    ServerRecommissioned,
)
from events.commands import CancelSegmentLoad, DropSegment, LoadSegment
from events.registry import Event
from events.segment import SegmentId, SegmentIdError
from events.segments import (
    SegmentAnnounced,
    SegmentsMarkedUnused,
    SegmentsMarkedUsed,
    SegmentsPublished,
    SegmentUnannounced,
)
from events.tasks import SegmentsImportRequested
from events.upserts import ConsolidationRequested, UpsertConsolidationAsked, UpsertTableSet


def partition_key(event: Event) -> str | None:
    if isinstance(event, RulesSet):
        return f"rules/{event.data_source}"
    if isinstance(event, DynamicConfigSet):
        return "config"
    if isinstance(event, ServerJoined | ServerLeft | ServerLost | ServerHeartbeat | ServerDecommissioned
                         | ServerRecommissioned):
        return event.server
    if isinstance(event, UpsertTableSet):
        return f"upserts/{event.name}"
    if isinstance(event, UpsertConsolidationAsked | ConsolidationRequested):
        return f"upserts/{event.table}"
    if isinstance(event, LoadSegment | DropSegment | CancelSegmentLoad):
        return event.server
    if isinstance(event, SegmentsPublished | SegmentsMarkedUsed | SegmentsImportRequested):
        return event.segments[0].data_source
    if isinstance(event, SegmentAnnounced):
        return event.segment.data_source
    if isinstance(event, SegmentUnannounced):
        return _data_source_of(event.segment_id)
    if isinstance(event, SegmentsMarkedUnused):
        return _data_source_of(event.segment_ids[0])
    data_source = getattr(event, "data_source", None)
    return data_source if isinstance(data_source, str) else None


def _data_source_of(segment_id: str) -> str | None:
    try:
        return SegmentId.parse(segment_id).data_source
    except SegmentIdError:
        return None
