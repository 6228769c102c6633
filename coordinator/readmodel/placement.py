"""Placement answers: load status, servers, load queues, data sources, rules and config (Druid's shapes).

A segment **should be loaded** when it is used and the first rule matching it at ``now`` is a load rule
with at least one replica; it wants ``tieredReplicants[tier]`` copies in each tier. It is **available**
when some server announced it, **unavailable** otherwise; it is **under-replicated** in a tier when that
tier holds at least one copy and fewer than it wants (Druid's ``segment/underReplicated/count``).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from coordinator.placement.state import PlacementState
from events.segment import SegmentId

#: Druid's server type of a data server that serves segments from deep storage.
HISTORICAL = "historical"


@dataclass(frozen=True, slots=True)
class Want:
    """What the rules ask of one used segment: copies per tier (empty: nothing to load)."""

    segment: SegmentId
    replicants: tuple[tuple[str, int], ...]


def wants(p: PlacementState, now: int) -> list[Want]:
    """Every used segment that should be loaded, with its replica counts per tier, in id order.

    >>> wants(PlacementState(), 0)
    []
    """
    match = p.rules.matcher(now)
    out: list[Want] = []
    for sid in sorted(p.used, key=str):
        seg = p.segments[sid]
        rule = match(seg.data_source, seg.interval)
        if rule is None or rule.kind != "load":
            continue
        replicants = tuple(sorted((t, n) for t, n in rule.tiered_replicants.items() if n > 0))
        if replicants:
            out.append(Want(sid, replicants))
    return out


def loaded_in(p: PlacementState, sid: SegmentId, tier: str) -> int:
    """Announced copies of the segment on joined servers of the tier."""
    return p.copies(sid, tier).loaded


def load_status(p: PlacementState, now: int) -> dict[str, float]:
    """``GET /druid/coordinator/v1/loadstatus``: percent of each data source's segments that are available."""
    total: Counter[str] = Counter()
    available: Counter[str] = Counter()
    for w in wants(p, now):
        ds = w.segment.data_source
        total[ds] += 1
        if p.holders.get(w.segment):
            available[ds] += 1
    return {ds: 100.0 * available[ds] / total[ds] for ds in sorted(total)}


def load_status_simple(p: PlacementState, now: int) -> dict[str, int]:
    """``?simple``: per data source, the segments left to load until each is available (replicas not counted)."""
    out: Counter[str] = Counter()
    for w in wants(p, now):
        out[w.segment.data_source] += 0 if p.holders.get(w.segment) else 1
    return {ds: out[ds] for ds in sorted(out)}


def load_status_full(p: PlacementState, now: int) -> dict[str, dict[str, int]]:
    """``?full``: per tier and data source, the copies left to load until every replica is there."""
    out: dict[str, Counter[str]] = {}
    for w in wants(p, now):
        for tier, n in w.replicants:
            out.setdefault(tier, Counter())[w.segment.data_source] += max(0, n - loaded_in(p, w.segment, tier))
    return {tier: {ds: c[ds] for ds in sorted(c)} for tier, c in sorted(out.items())}


def tier_health(p: PlacementState, now: int) -> dict[str, dict[str, int]]:
    """Per tier the rules load into: segments wanted there, ``unavailable`` there (no copy in the tier) and
    ``underReplicated`` (some copies, fewer than wanted)."""
    counts = HealthCounts()
    counts.add(p, now, p.used)
    return counts.tiers()


@dataclass(slots=True)
class HealthCounts:
    """:func:`tier_health` and the segments that should be loaded but have no copy anywhere (the sum of
    :func:`load_status_simple`: Druid's ``segment/unavailable/count``), counted over used segments a slice at a
    time (:meth:`add`), in any order.

    **Invariant:** after :meth:`add` over slices that together name every used segment once, each segment is
    counted exactly once, as the state was when its slice was counted; a segment named but no longer used then
    is not counted. Over one slice of every used segment: exactly :func:`tier_health` and
    :func:`load_status_simple`. So a caller can count a large state in slices, letting other work on the state
    run between them, and each segment is still counted once."""

    unavailable: int = 0
    _tiers: dict[str, Counter[str]] = field(default_factory=dict)

    def add(self, p: PlacementState, now: int, segments: Iterable[SegmentId]) -> None:
        """Count ``segments`` (those still used) as ``p`` has them now, with the rules matched at ``now``."""
        match = p.rules.matcher(now)
        used, tiers, holders = p.used, self._tiers, p.holders
        for sid in segments:
            if sid not in used:
                continue
            seg = p.segments[sid]
            rule = match(seg.data_source, seg.interval)
            if rule is None or rule.kind != "load":
                continue
            wanted = [(tier, n) for tier, n in rule.tiered_replicants.items() if n > 0]
            if not wanted:
                continue
            if not holders.get(sid):
                self.unavailable += 1
            for tier, n in wanted:
                c = tiers.get(tier)
                if c is None:
                    c = tiers[tier] = Counter()
                have = p.copies(sid, tier).loaded
                c["segments"] += 1
                c["unavailable"] += have == 0
                c["underReplicated"] += 0 < have < n

    def tiers(self) -> dict[str, dict[str, int]]:
        """:func:`tier_health`'s answer for what was counted."""
        return {tier: {k: c[k] for k in ("segments", "unavailable", "underReplicated")}
                for tier, c in sorted(self._tiers.items())}


def held_bytes(p: PlacementState, name: str) -> int:
    """Bytes of the segments the server announced (Druid's ``currSize``)."""
    return sum(p.size(sid) for sid in p.held.get(name, ()))


def servers(p: PlacementState, last_heard: dict[str, int] | None = None) -> list[dict[str, Any]]:
    """Every joined server: tier, sizes, segments, queue, decommissioning and when it was last heard of
    (``lastHeard``, event time ms: the fold's heartbeats and the server's own events, unless the caller gives
    its own), by name."""
    out = []
    for name in sorted(p.tier_of):
        facts = p.servers[name]
        out.append({
            "name": name, "tier": facts.tier, "maxSize": facts.max_size_bytes, "currSize": held_bytes(p, name),
            "segments": len(p.held.get(name, ())), "segmentsToLoad": len(p.loading.get(name, ())),
            "segmentsToDrop": len(p.dropping.get(name, ())), "decommissioning": name in p.decommissioning,
            "lastHeard": (p.last_heard if last_heard is None else last_heard).get(name),
        })
    return out


def servers_simple(p: PlacementState) -> list[dict[str, Any]]:
    """``GET /druid/coordinator/v1/servers?simple``."""
    return [{"host": s["name"], "type": HISTORICAL, "tier": s["tier"], "currSize": s["currSize"],
             "maxSize": s["maxSize"], "priority": 0} for s in servers(p)]


def load_queue_simple(p: PlacementState) -> dict[str, dict[str, int]]:
    """``GET /druid/coordinator/v1/loadqueue?simple``: per server, segments and bytes to load and to drop."""
    out = {}
    for name in sorted(p.tier_of):
        loading, dropping = p.loading.get(name, {}), p.dropping.get(name, set())
        out[name] = {"segmentsToLoad": len(loading), "segmentsToDrop": len(dropping),
                     "segmentsToLoadSize": sum(p.size(s) for s in loading),
                     "segmentsToDropSize": sum(p.size(s) for s in dropping)}
    return out


def served_data_sources(p: PlacementState) -> list[str]:
    """``GET /druid/coordinator/v1/datasources``: data sources with a segment on a joined server."""
    return sorted({sid.data_source for name in p.tier_of for sid in p.held.get(name, ())})


def served_segments(p: PlacementState, data_source: str) -> list[str]:
    """``GET /druid/coordinator/v1/datasources/{ds}/segments``: ids of its segments served by a joined server."""
    return sorted({str(sid) for name in p.tier_of for sid in p.held.get(name, ()) if sid.data_source == data_source})


def used_data_sources(p: PlacementState) -> list[str]:
    """``GET /druid/coordinator/v1/metadata/datasources``: data sources with a used segment."""
    return sorted({sid.data_source for sid in p.used})


def used_segments(p: PlacementState, data_source: str) -> list[SegmentId]:
    """A data source's used segments, in id order."""
    return sorted((sid for sid in p.used if sid.data_source == data_source), key=str)


def data_source_summary(p: PlacementState, now: int) -> list[dict[str, Any]]:
    """Per data source with used segments: used count and bytes, served replicas and bytes, percent loaded."""
    status = load_status(p, now)
    out = []
    for ds in used_data_sources(p):
        used = used_segments(p, ds)
        replicas = sum(len(p.holders.get(sid, ())) for sid in used)
        out.append({"name": ds, "segments": len(used), "size": sum(p.size(s) for s in used),
                    "replicas": replicas, "replicatedSize": sum(p.size(s) * len(p.holders.get(s, ())) for s in used),
                    "minTime": min(s.interval.start for s in used), "maxTime": max(s.interval.end for s in used),
                    "loaded": status.get(ds, 100.0)})
    return out


def rules(p: PlacementState) -> dict[str, list[dict[str, Any]]]:
    """``GET /druid/coordinator/v1/rules``: every data source's rules as set, ``_default`` included."""
    return p.rules.to_json()


def rules_of(p: PlacementState, data_source: str) -> list[dict[str, Any]]:
    """``GET /druid/coordinator/v1/rules/{ds}``: the data source's own rules (empty: it follows ``_default``)."""
    return p.rules.to_json().get(data_source, [])


def config(p: PlacementState) -> dict[str, Any]:
    """``GET /druid/coordinator/v1/config``: the whole dynamic config, defaults filled in."""
    return p.config.to_json()
