"""``segcoord locks replay``: run a JSON-lines file of task requests through the lockbox."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from coordinator.locks.lockbox import Lockbox
from events.locks import (
    LockDenied,
    LockGranted,
    LockWaiting,
    PublishAccepted,
    PublishRejected,
    SegmentAllocated,
    TaskLock,
)
from events.registry import Event
from events.tasks import LockRequested, PublishRequested, SegmentAllocationRequested, TaskFinished, TaskStarted
from streaming.jsonlines import read_numbered_envelopes

REQUESTS = (TaskStarted, LockRequested, SegmentAllocationRequested, PublishRequested, TaskFinished)


def _decision(request_id: str, outcome: str, **fields: Any) -> dict[str, Any]:
    base: dict[str, Any] = {"requestId": request_id, "outcome": outcome, "lockId": None, "version": None,
                            "revokedLockIds": [], "reason": None, "segmentId": None}
    base.update(fields)
    return base


def summarize(events: list[Event]) -> list[dict[str, Any]]:
    """One entry per answer to a request; an allocation's lock grant and its segment id merge into one."""
    out: list[dict[str, Any]] = []
    for e in events:
        if isinstance(e, LockGranted):
            out.append(_decision(e.request_id, "granted", lockId=e.lock.lock_id, version=e.lock.version,
                                 revokedLockIds=list(e.revoked_lock_ids), reason=e.reason))
        elif isinstance(e, SegmentAllocated):
            if out and out[-1]["requestId"] == e.request_id and out[-1]["outcome"] == "granted":
                out[-1]["segmentId"] = e.segment_id
            else:
                out.append(_decision(e.request_id, "granted", lockId=e.lock_id, version=e.segment.version,
                                     segmentId=e.segment_id))
        elif isinstance(e, LockWaiting):
            out.append(_decision(e.request_id, "waiting", reason=e.reason))
        elif isinstance(e, LockDenied):
            out.append(_decision(e.request_id, "denied", reason=e.reason))
        elif isinstance(e, PublishRejected):
            out.append(_decision(e.request_id, "rejected", reason=e.reason))
        elif isinstance(e, PublishAccepted):
            out.append(_decision(e.request_id, "granted"))
    return out


def lock_json(lock: TaskLock) -> dict[str, Any]:
    return {"lockId": lock.lock_id, "taskId": lock.task_id, "groupId": lock.group_id, "dataSource": lock.data_source,
            "interval": lock.interval.iso(), "granularity": lock.granularity, "type": lock.lock_type,
            "version": lock.version, "priority": lock.priority, "revoked": lock.revoked,
            "partitionIds": list(lock.partition_ids)}


def replay(path: Path) -> tuple[Lockbox, list[dict[str, Any]]]:
    box = Lockbox()
    decisions: list[dict[str, Any]] = []
    for _lineno, env in read_numbered_envelopes(path):
        if isinstance(env.event, REQUESTS):
            decisions.extend(summarize(box.handle(env)))
    return box, decisions


def replay_json(path: Path) -> dict[str, Any]:
    box, decisions = replay(path)
    return {"decisions": decisions, "locks": [lock_json(lk) for lk in box.live_locks()]}


def replay_text(path: Path) -> str:
    result = replay_json(path)
    lines = []
    for d in result["decisions"]:
        detail = " ".join(f"{k}={d[k]}" for k in ("lockId", "version", "segmentId") if d[k])
        if d["revokedLockIds"]:
            detail += " revoked=" + ",".join(d["revokedLockIds"])
        if d["reason"]:
            detail += f" ({d['reason']})"
        lines.append(f"{d['requestId']:12s} {d['outcome']:8s} {detail}".rstrip())
    lines.append(f"locks: {len(result['locks'])}")
    for lk in result["locks"]:
        flag = " REVOKED" if lk["revoked"] else ""
        parts = f" partitions={lk['partitionIds']}" if lk["partitionIds"] else ""
        lines.append(f"  {lk['lockId']:14s} {lk['type']:9s} {lk['granularity']:9s} {lk['interval']} "
                     f"v={lk['version']} prio={lk['priority']} task={lk['taskId']}{parts}{flag}")
    return "\n".join(lines)
