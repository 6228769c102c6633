"""Decisions over the upsert fold, at a time the shell passes in: cleanup marks and consolidation requests.

Both return events (``segments_marked_unused``, ``consolidation_requested``); the
agent emits them and folds them back, so a replay of the log sees the decisions
themselves and never re-decides from a clock.

- :func:`cleanup_due`: an append segment stale (every (key, version) it holds
  superseded) since ``upsertStaleGraceMillis`` or longer, and every rejected
  segment (published into an upsert table without valid ``upsertPartitions``). A
  segment holding one latest version is never stale, so it is never here.
- :func:`consolidation_due`: when asked, or ``consolidationPeriodMillis`` after the
  table's last consolidation (or declaration) with fresh keys to take; never a
  version older than one a used primary segment (served or not) holds.

>>> st = UpsertState()
>>> cleanup_due(st, 0)
[]
"""

from __future__ import annotations

from coordinator.upserts.state import UpsertState
from coordinator.upserts.table import Key
from events.interval import Interval
from events.segments import SegmentsMarkedUnused
from events.upserts import ConsolidationInterval, ConsolidationRequested, UpsertPartition


def cleanup_due(state: UpsertState, now: int) -> list[SegmentsMarkedUnused]:
    """One ``segments_marked_unused`` per data source (sorted ids) for what is due at ``now``."""
    by_ds: dict[str, dict[str, str]] = {}
    for sid, since in state.stale.items():
        held = state.held.get(sid)
        owner = None if held is None else state.table_of(held.data_source)
        if held is None or owner is None:
            continue
        table = state.tables[owner[0]]
        if since + table.stale_grace_ms <= now:
            by_ds.setdefault(held.data_source, {})[sid] = (
                f"upsert table {table.name}: every version it holds is superseded "
                f"(stale for {table.stale_grace_ms} ms or more)")
    for sid, (ds, reason) in state.rejected.items():
        by_ds.setdefault(ds, {})[sid] = reason
    out = []
    for _, marks in sorted(by_ds.items()):
        ids = tuple(sorted(marks))
        out.append(SegmentsMarkedUnused(segment_ids=ids, reason="; ".join(sorted(set(marks.values())))))
    return out


def consolidation_due(state: UpsertState, table: str, now: int) -> ConsolidationRequested | None:
    """The consolidation of ``table`` due at ``now``, or None. It names, per primary interval to re-ingest, the
    fresh (key, version) pairs to take: the primary's visible segments overlapping the fresh versions' append
    segments give the intervals (so a re-ingest replaces whole primary time chunks), else the append segment's
    own interval. A fresh version is not taken when a used primary segment, served or not, already holds that
    version of the key or a newer one: the re-ingest keeps the keys it does not take as the chunk's used
    segments hold them, so taking an older version would put the key back in time."""
    t = state.tables.get(table)
    if t is None:
        return None
    asked = table in state.asked
    fresh = state.fresh(table)
    scheduled = (t.consolidation_period_ms > 0 and bool(fresh)
                 and now - state.last_consolidation.get(table, now) >= t.consolidation_period_ms)
    if not asked and not scheduled:
        return None
    primary = sorted({h.interval for sid, h in state.held.items()
                      if h.data_source == t.primary and sid in state.visible})
    in_primary: dict[Key, str] = {}  # the newest version any used primary segment holds, served or not
    for h in state.held.values():
        if h.data_source == t.primary:
            for e in h.entries:
                if e.version > in_primary.get(e.key, ""):
                    in_primary[e.key] = e.version
    taken: dict[Interval, dict[tuple[Key, str], UpsertPartition]] = {}
    for key, latest in fresh.items():
        if in_primary.get(key, "") >= latest.version:
            continue  # the primary already holds it or a newer one (not served yet): taking it would go back
        rows = 0
        for sid in latest.segments:
            held = state.held[sid]
            rows += sum(e.rows for e in held.entries if e.key == key and e.version == latest.version)
        part = UpsertPartition(key=dict(key), version=latest.version, rows=rows, tombstone=latest.tombstone)
        for sid in latest.segments:
            iv = state.held[sid].interval
            targets = [p for p in primary if p.overlaps(iv)] or [iv]
            for target in targets:
                taken.setdefault(target, {})[(key, latest.version)] = part
    if not taken and not asked:
        return None  # every fresh version is already in the primary, waiting to be served
    intervals = tuple(ConsolidationInterval(interval=iv, partitions=tuple(parts[k] for k in sorted(parts)))
                      for iv, parts in sorted(taken.items()))
    reason = "asked by an operator" if asked else f"every {t.consolidation_period_ms} ms"
    return ConsolidationRequested(table=table, intervals=intervals, reason=reason)
