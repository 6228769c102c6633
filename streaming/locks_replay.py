"""``segcoord locks replay``: run a JSON-lines file of task requests through the lockbox.

One entry per answer to a request: ``granted`` (a lock, or an allocation's
segment id, with the locks it revoked or absorbed), ``waiting``, ``denied``
(including a try-lock that cannot be had now and a wait that timed out),
``released`` (a ``lock_release_requested``), ``accepted`` (a publish, with
its kind, its segments, the upgraded copies it made and whether it was a
re-sent publish already committed) or ``rejected``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from coordinator.locks.lockbox import Lockbox
from events.locks import (
    LockDenied,
    LockGranted,
    LockReleased,
    LockWaiting,
    PublishAccepted,
    PublishRejected,
    SegmentAllocated,
    TaskLock,
)
from events.registry import Event
from events.tasks import (
    LockReleaseRequested,
    LockRequested,
    PublishRequested,
    SegmentAllocationRequested,
    TaskFinished,
    TaskStarted,
)
from streaming.jsonlines import read_numbered_envelopes

REQUESTS = (TaskStarted, LockRequested, SegmentAllocationRequested, PublishRequested, TaskFinished,
            LockReleaseRequested)


def _decision(request_id: str, outcome: str, **fields: Any) -> dict[str, Any]:
    base: dict[str, Any] = {"requestId": request_id, "outcome": outcome, "lockId": None, "version": None,
                            "revokedLockIds": [], "reason": None, "segmentId": None, "absorbedLockIds": [],
                            "releasedLockIds": [], "kind": None, "segmentIds": [], "upgradedSegmentIds": [],
                            "alreadyPublished": False}
    base.update(fields)
    return base


def summarize(events: list[Event]) -> list[dict[str, Any]]:
    """One entry per answer to a request; an allocation's lock grant and its segment id merge into one."""
    out: list[dict[str, Any]] = []
    for e in events:
        if isinstance(e, LockGranted):
            out.append(_decision(e.request_id, "granted", lockId=e.lock.lock_id, version=e.lock.version,
                                 revokedLockIds=list(e.revoked_lock_ids), reason=e.reason,
                                 absorbedLockIds=list(e.absorbed_lock_ids or ())))
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
            upgraded = set(e.upgraded_segment_ids)
            out.append(_decision(e.request_id, "accepted", kind=e.kind or "insert",
                                 segmentIds=[str(s.id) for s in e.segments if str(s.id) not in upgraded],
                                 upgradedSegmentIds=list(e.upgraded_segment_ids),
                                 alreadyPublished=bool(e.already_published)))
        elif isinstance(e, LockReleased) and e.request_id is not None:
            out.append(_decision(e.request_id, "released", releasedLockIds=list(e.lock_ids), reason=e.reason))
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
        detail = " ".join(f"{k}={d[k]}" for k in ("lockId", "version", "segmentId", "kind") if d[k])
        for key, label in (("revokedLockIds", "revoked"), ("absorbedLockIds", "absorbed"),
                           ("releasedLockIds", "released"), ("segmentIds", "segments"),
                           ("upgradedSegmentIds", "upgraded")):
            if d[key]:
                detail += f" {label}=" + ",".join(d[key])
        if d["alreadyPublished"]:
            detail += " (already published)"
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
