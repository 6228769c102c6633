"""The dashboard's answers: the cluster at a glance, and one data source's timeline, from the existing folds.

Nothing new is derived here: :func:`overview` groups the answers of :mod:`coordinator.readmodel.placement`
(servers, per-tier health, per-data-source load status) by tier, and :func:`timeline` arranges the rows of
:func:`coordinator.readmodel.timeline.segment_rows` (the timeline fold's states joined with the placement
fold's holders) for drawing: newest time chunks first, at most ``limit`` segments, with the count per state
of all of them. Tiers are listed when a server is in them *or* a rule loads into them, so a tier the rules
want and no server serves shows up (its segments unavailable) instead of vanishing.
"""

from __future__ import annotations

import heapq
from collections import Counter
from collections.abc import Mapping
from typing import Any

from coordinator.placement.state import PlacementState
from coordinator.readmodel import placement as rm
from coordinator.readmodel.timeline import STATES, segment_rows
from events.segment import SegmentId
from events.visibility import SegmentState

#: Segments of one data source the timeline answer carries at most (the newest time chunks first).
TIMELINE_LIMIT = 400


def overview(p: PlacementState, now: int, last_heard: Mapping[str, int] | None = None) -> dict[str, Any]:
    """Servers by tier (with the tier's totals and health) and data sources with their load status.

    >>> overview(PlacementState(), 0)
    {'now': 0, 'tiers': [], 'dataSources': []}
    """
    health = rm.tier_health(p, now)
    servers = rm.servers(p, dict(last_heard or {}))
    names = sorted({s["tier"] for s in servers} | set(health))
    tiers = []
    for tier in names:
        members = [s for s in servers if s["tier"] == tier]
        h = health.get(tier, {"segments": 0, "unavailable": 0, "underReplicated": 0})
        tiers.append({"tier": tier, "servers": members,
                      "maxSize": sum(s["maxSize"] for s in members), "currSize": sum(s["currSize"] for s in members),
                      "segmentsToLoad": sum(s["segmentsToLoad"] for s in members),
                      "segmentsToDrop": sum(s["segmentsToDrop"] for s in members), **h})
    left = rm.load_status_simple(p, now)
    sources = [{**ds, "unavailable": left.get(ds["name"], 0)} for ds in rm.data_source_summary(p, now)]
    return {"now": now, "tiers": tiers, "dataSources": sources}


def timeline(data_source: str, known: Mapping[SegmentId, SegmentState], p: PlacementState,
             limit: int = TIMELINE_LIMIT) -> dict[str, Any]:
    """One data source's segments with their timeline state and holders, newest time chunk first (then version,
    newest first, then partition), cut at ``limit``; ``counts`` and ``total`` cover every segment. Only the
    ``limit`` segments shown become rows (O(n log limit)), so a data source of 100k segments stays cheap.

    >>> timeline("wiki", {}, PlacementState())
    {'dataSource': 'wiki', 'total': 0, 'counts': {'visible': 0, 'standby': 0, 'overshadowed': 0, 'offline': 0}, \
'segments': [], 'truncated': False}
    """
    counts: Counter[str] = Counter(st for st in known.values() if st != "absent")
    total = sum(counts.values())
    shown = heapq.nlargest(limit, (sid for sid, st in known.items() if st != "absent"), key=_newest_first)
    by_id = {str(sid): i for i, sid in enumerate(shown)}
    rows = sorted(segment_rows({sid: known[sid] for sid in shown}, p), key=lambda r: by_id[r["segment"]])
    return {"dataSource": data_source, "total": total, "counts": {s: counts[s] for s in STATES},
            "segments": rows, "truncated": total > limit}


def _newest_first(sid: SegmentId) -> tuple[int, int, str, int]:
    """Larger is shown first: later chunk start, then later end, newer version, lower partition."""
    return sid.interval.start, sid.interval.end, sid.version, -sid.partition_id
