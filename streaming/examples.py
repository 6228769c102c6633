"""One realistic example of every event type, in a plausible order (the demo and round-trip tests use it)."""

from __future__ import annotations

from events import (
    CancelSegmentLoad,
    ConsolidationInterval,
    ConsolidationRequested,
    DeadLettered,
    DropSegment,
    DynamicConfigSet,
    Envelope,
    Event,
    Instant,
    Interval,
    LoadSegment,
    LockDenied,
    LockGranted,
    LockReleased,
    LockReleaseRequested,
    LockRequested,
    LockRevoked,
    LockWaiting,
    PublishAccepted,
    PublishRejected,
    PublishRequested,
    RulesSet,
    SegmentAllocated,
    SegmentAllocationRequested,
    SegmentAnnounced,
    SegmentDescriptor,
    SegmentLoadRefused,
    SegmentsImported,
    SegmentsImportRejected,
    SegmentsImportRequested,
    SegmentsMarkedUnused,
    SegmentsMarkedUsed,
    SegmentsMarkRejected,
    SegmentsMarkUnusedRequested,
    SegmentsMarkUsedRequested,
    SegmentsPublished,
    SegmentUnannounced,
    SegmentVisibilityChanged,
    ServerDecommissioned,
    ServerHeartbeat,
    ServerJoined,
    ServerLeft,
    ServerLost,
    ServerRecommissioned,
    TaskDeregistered,
    TaskFinished,
    TaskLock,
    TaskRegistered,
    TaskStarted,
    UpsertConsolidationAsked,
    UpsertPartition,
    UpsertTableSet,
    all_event_classes,
    derived_event_id,
    parse_instant,
)
from events.keys import partition_key

DS = "wikipedia_edits"
DAY = Interval.parse("2026-11-20/2026-11-21")
VERSION = "2026-11-21T10:00:00.000Z"


def example_segment(partition: int = 0) -> SegmentDescriptor:
    return SegmentDescriptor(
        data_source=DS,
        interval=DAY,
        version=VERSION,
        partition_id=partition,
        size=52_428_800,
        load_spec={"type": "local", "path": f"/druid/segments/{DS}/{partition}/index.zip"},
        shard_spec={"type": "numbered", "partitionNum": partition, "partitions": 2},
        dimensions="page,user,namespace",
        metrics="count,added",
    )


def example_events() -> list[Event]:
    """One event of every registered type."""
    seg = example_segment()
    seg_id = str(seg.id)
    lock = TaskLock(
        lock_id="lock-1", task_id="index_kafka_1", group_id="index_kafka_wiki", data_source=DS, interval=DAY,
        granularity="timeChunk", lock_type="append", version=VERSION, priority=75,
    )
    events: list[Event] = [
        ServerJoined(server="historical-1:8083", tier="_default_tier", max_size_bytes=10 * 2**30),
        RulesSet(data_source="_default", rules=({"type": "loadForever", "tieredReplicants": {"_default_tier": 2}},)),
        DynamicConfigSet(config={"maxSegmentsToMove": 100, "replicationThrottleLimit": 500}),
        TaskStarted(task_id="index_kafka_1", group_id="index_kafka_wiki", task_type="index_kafka", data_source=DS),
        TaskRegistered(task_id="index_kafka_1", group_id="index_kafka_wiki", task_type="index_kafka", data_source=DS,
                       priority=75),
        LockRequested(
            request_id="req-1", task_id="index_kafka_1", group_id="index_kafka_wiki", task_type="index_kafka",
            data_source=DS, interval=DAY, granularity="timeChunk", lock_type="append", priority=75,
        ),
        LockGranted(request_id="req-1", task_id="index_kafka_1", lock=lock),
        LockWaiting(request_id="req-2", task_id="compact_1", reason="blocked by lock-1", blocking_lock_ids=("lock-1",)),
        LockDenied(request_id="req-3", task_id="unknown_task", reason="task unknown_task was never started"),
        LockReleaseRequested(request_id="req-7", task_id="index_kafka_1", data_source=DS, interval=DAY),
        SegmentAllocationRequested(
            request_id="req-4", task_id="index_kafka_1", data_source=DS,
            timestamp=Instant(parse_instant("2026-11-20T12:34:56Z")), sequence_name="seq-0",
            lock_granularity="timeChunk", lock_type="append", skip_lineage_check=True,
        ),
        SegmentAllocated(request_id="req-4", task_id="index_kafka_1", segment_id=seg_id, segment=seg, lock_id="lock-1"),
        PublishRequested(
            request_id="req-5", task_id="index_kafka_1", segments=(seg,),
            start_metadata={"partitions": {"0": 0}}, end_metadata={"partitions": {"0": 1200}},
        ),
        PublishAccepted(request_id="req-5", task_id="index_kafka_1", segments=(seg,),
                        start_metadata={"partitions": {"0": 0}}, end_metadata={"partitions": {"0": 1200}}),
        PublishRejected(request_id="req-6", task_id="index_kafka_2", reason="lock lock-9 was revoked"),
        SegmentsImportRequested(request_id="import-1", segments=(seg,), source="druid metadata export"),
        SegmentsImported(request_id="import-1", segments=(seg,), source="druid metadata export"),
        SegmentsImportRejected(request_id="import-2", reason=f"segments[0]: segment {seg_id} is already committed "
                                                             "with other contents"),
        SegmentsPublished(task_id="index_kafka_1", segments=(seg,), end_metadata={"partitions": {"0": 1200}}),
        LoadSegment(command_id="cmd-1", server="historical-1:8083", segment=seg, stage="assign",
                    purpose="loading", reason="unreplicated"),
        SegmentAnnounced(server="historical-1:8083", segment=seg),
        CancelSegmentLoad(command_id="cmd-4", server="historical-2:8083", segment_id=seg_id,
                          reason="over-replicated in _default_tier", cancels="cmd-3"),
        SegmentLoadRefused(server="historical-2:8083", command_id="cmd-3", segment_id=seg_id,
                           reason="no room: 10737418000 of 10737418240 bytes used", used_bytes=10737418000,
                           max_size_bytes=10 * 2**30),
        SegmentVisibilityChanged(segment_id=seg_id, data_source=DS, interval=DAY, from_state="offline",
                                 to_state="visible"),
        LockRevoked(lock_ids=("lock-7",), reason="revoked by higher-priority lock-8", request_id="req-8"),
        TaskFinished(task_id="index_kafka_1", status="success"),
        TaskDeregistered(task_id="index_kafka_1", status="success"),
        LockReleased(task_id="index_kafka_1", lock_ids=("lock-1",), reason="task finished"),
        ServerDecommissioned(server="historical-1:8083"),
        DropSegment(command_id="cmd-2", server="historical-1:8083", segment_id=seg_id, stage="decommission",
                    purpose="decommissioning", reason="draining decommissioning server", move_id="move-1"),
        SegmentUnannounced(server="historical-1:8083", segment_id=seg_id, reason="server_lost"),
        ServerRecommissioned(server="historical-1:8083"),
        SegmentsMarkedUnused(segment_ids=(seg_id,), reason="overshadowed"),
        SegmentsMarkUsedRequested(request_id="mark-1", data_source=DS, segments=(seg,),
                                  reason="marked used by the operator"),
        SegmentsMarkedUsed(segments=(seg,), reason="marked used by the operator"),
        SegmentsMarkUnusedRequested(request_id="mark-2", data_source=DS, segment_ids=("not a segment id",),
                                    reason="marked unused by the operator"),
        SegmentsMarkRejected(request_id="mark-2", reason="segmentIds[0]: not a segment id"),
        ServerLeft(server="historical-1:8083"),
        UpsertTableSet(name="ads", append_data_source="ads_append", primary_data_source="ads_primary",
                       key_columns=("source", "date"), version_column="version"),
        UpsertConsolidationAsked(table="ads"),
        ConsolidationRequested(table="ads", reason="daily consolidation", intervals=(ConsolidationInterval(
            interval=DAY, partitions=(UpsertPartition(key={"source": "Facebook", "date": "2026-11-20"},
                                                      version="ver2", rows=1200),)),)),
        ServerHeartbeat(server="historical-2:8083", tier="_default_tier", max_size_bytes=10 * 2**30),
        ServerLost(server="historical-2:8083", tier="_default_tier", max_size_bytes=10 * 2**30,
                   last_heard_at=1_795_219_170_000, server_timeout_millis=30_000),
        DeadLettered(reason="value: not UTF-8 JSON", topic="segcoord.segments", partition=0, offset=17,
                     original_value="e2JhZA==", original_key="d2lraQ=="),
    ]
    covered = {type(e) for e in events}
    missing = [c.event_type for c in all_event_classes() if c not in covered]
    if missing:
        raise AssertionError(f"examples miss event types: {missing}")
    return events


def example_envelopes(start_ms: int) -> list[Envelope[Event]]:
    """The examples wrapped in envelopes whose ids depend on the event type only (stable golden files)."""
    return [
        Envelope(event, derived_event_id(f"examples/{event.event_type}", 0, 0, 0), Instant(start_ms),
                 partition_key(event) or DS)
        for event in example_events()
    ]
