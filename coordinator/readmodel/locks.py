"""Lockbox answers: live locks with their holders, waiting requests, and registered tasks."""

from __future__ import annotations

from typing import Any

from coordinator.locks.state import LockboxState


def locks(box: LockboxState) -> list[dict[str, Any]]:
    """Every live lock (granted, not released; revoked ones flagged) with the tasks holding it."""
    out = []
    for ds in sorted(box.sources):
        src = box.sources[ds]
        for lk in src.locks.values():
            out.append({"lockId": lk.lock_id, "dataSource": ds, "interval": lk.interval.iso(), "type": lk.lock_type,
                        "granularity": lk.granularity, "version": lk.version, "priority": lk.priority,
                        "groupId": lk.group_id, "holders": sorted(src.holders.get(lk.lock_id, {lk.task_id})),
                        "revoked": lk.revoked})
    return out


def waiters(box: LockboxState) -> list[dict[str, Any]]:
    """Every lock request waiting for conflicting locks to go, in arrival order per data source."""
    out = []
    for ds in sorted(box.sources):
        for w in box.sources[ds].waiters:
            r = w.request
            out.append({"requestId": r.request_id, "taskId": r.task_id, "dataSource": ds,
                        "interval": r.interval.iso(), "type": r.lock_type, "since": w.at})
    return out


def tasks(box: LockboxState) -> list[dict[str, Any]]:
    """Every registered (not ended) task, with the ids of the locks it holds, by task id."""
    held: dict[str, list[str]] = {}
    for src in box.sources.values():
        for lock_id, holders in src.holders.items():
            for task in holders:
                held.setdefault(task, []).append(lock_id)
    return [{"taskId": t.task_id, "groupId": t.group_id, "type": t.task_type, "dataSource": t.data_source,
             "priority": t.priority, "locks": sorted(held.get(t.task_id, []))}
            for t in sorted(box.tasks.values(), key=lambda t: t.task_id)]
