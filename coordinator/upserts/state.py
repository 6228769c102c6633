"""The upsert fold: which version of every partition key is the latest *visible* one, per upsert table.

Inputs (any interleaving of the three topics gives the same state once all are applied):

- ``upsert_table_set`` declares a table (``cluster``);
- publishes, operator re-uses and announces carry descriptors whose ``upsertPartitions`` say which
  (key, version) pairs a segment holds (``segments``); ``segments_marked_unused`` forgets them;
- ``segment_visibility_changed`` (``timeline``) says which segments queries see;
- ``consolidation_requested`` / ``upsert_consolidation_asked`` (``cluster``) drive the schedule.

Invariants:

- **Versions count from visibility, not publishes.** A key's :class:`Latest` is the greatest version among
  the *visible* segments holding it (append or primary): a filter naming a version nobody serves would
  drop rows. Versions compare as text (Druid's segment versions are ISO timestamps). At equal versions
  the primary wins (it holds that version, consolidated).
- **Fresh keys** are the keys whose latest version is in the append table (a tombstone included): the
  filter selects their latest version in the append part and excludes them from the primary part. The
  strategy depends only on them, and they are kept incrementally, so its cost does not grow with history.
- **Stale** append segments: every (key, version) they hold is superseded, by a newer visible version or
  by a primary holding that version or a newer one. ``stale[sid]`` is the event time at which that became
  true (never the clock); a segment stops being stale when a newer version stops being visible.
- **Rejected** segments: a publish into a declared upsert data source without ``upsertPartitions``, or
  whose keys do not name the table's key columns; cleanup marks them unused at once.
- Segment ids are kept as their text (the timeline's events name them so).

>>> from events import Interval, SegmentDescriptor, SegmentsPublished, SegmentVisibilityChanged
>>> from events.upserts import UpsertPartition, UpsertTableSet
>>> st = UpsertState()
>>> _ = st.apply(UpsertTableSet(name="ads", append_data_source="ads_a", primary_data_source="ads_p",
...                             key_columns=("source", "date"), version_column="version"), 0)
>>> day = Interval.parse("2021-01-01/P1D")
>>> seg = SegmentDescriptor("ads_a", day, "v1", 0, 1, upsert_partitions=(
...     UpsertPartition({"source": "Facebook", "date": "2021-01-01"}, "ver1", 10),))
>>> st.apply(SegmentsPublished(task_id="t", segments=(seg,)), 1)
set()
>>> st.apply(SegmentVisibilityChanged(str(seg.id), "ads_a", day, "offline", "visible"), 2)
{'ads'}
>>> [(dict(k), l.version) for k, l in st.fresh("ads").items()]
[({'date': '2021-01-01', 'source': 'Facebook'}, 'ver1')]
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from coordinator.upserts.table import Key, Role, UpsertTable, UpsertTableError, canonical_key
from events.interval import Interval
from events.registry import Event
from events.segment import SegmentDescriptor
from events.segments import SegmentAnnounced, SegmentsMarkedUnused, SegmentsMarkedUsed, SegmentsPublished
from events.upserts import ConsolidationRequested, UpsertConsolidationAsked, UpsertTableSet
from events.visibility import SegmentVisibilityChanged


@dataclass(frozen=True, slots=True)
class Entry:
    """One (key, version) a segment holds."""

    key: Key
    version: str
    rows: int
    tombstone: bool


@dataclass(frozen=True, slots=True)
class Held:
    """What a used segment of an upsert data source holds."""

    data_source: str
    interval: Interval
    entries: tuple[Entry, ...]


@dataclass(frozen=True, slots=True)
class Latest:
    """A key's latest visible version: in which table, whether it deletes the key, the visible segments
    holding it (sorted ids)."""

    version: str
    primary: bool
    tombstone: bool
    segments: tuple[str, ...]


@dataclass(slots=True)
class _KeyState:
    counted: dict[tuple[str, str], tuple[bool, bool]] = field(default_factory=dict)  # (sid, version) -> flags
    holders: set[str] = field(default_factory=set)  # append segments holding the key, visible or not
    latest: Latest | None = None


@dataclass(slots=True)
class _TableState:
    table: UpsertTable
    keys: dict[Key, _KeyState] = field(default_factory=dict)
    fresh: dict[Key, Latest] = field(default_factory=dict)
    members: set[str] = field(default_factory=set)  # held segments of the table's two data sources


def entries_of(seg: SegmentDescriptor) -> tuple[Entry, ...] | None:
    """The descriptor's ``upsertPartitions`` as entries (None when it has none); raises
    :class:`UpsertTableError` naming ``upsertPartitions[i].key.<column>`` for a bad key value."""
    if seg.upsert_partitions is None:
        return None
    return tuple(Entry(canonical_key(p.key, f"upsertPartitions[{i}].key"), p.version, p.rows, p.tombstone)
                 for i, p in enumerate(seg.upsert_partitions))


class UpsertState:
    """The fold; :meth:`apply` returns the names of the tables whose strategy (fresh keys) changed."""

    def __init__(self) -> None:
        self.tables: dict[str, UpsertTable] = {}
        self.held: dict[str, Held] = {}
        self.visible: set[str] = set()
        self.rejected: dict[str, tuple[str, str]] = {}  # segment id -> (data source, reason)
        self.stale: dict[str, int] = {}  # segment id -> event time it became stale
        self.last_consolidation: dict[str, int] = {}  # table -> time of its last consolidation (or declaration)
        self.asked: set[str] = set()  # tables with a consolidation asked for and not answered yet
        self.last_event_at = 0
        self._by_ds: dict[str, tuple[str, Role]] = {}
        self._ts: dict[str, _TableState] = {}
        self.dirty: set[tuple[str, str]] = set()  # (family, key) changed since the adapter last drained

    # -- reads -------------------------------------------------------------------------------------
    def fresh(self, table: str) -> Mapping[Key, Latest]:
        """Keys whose latest visible version is in the append table, in key order."""
        ts = self._ts.get(table)
        return {} if ts is None else dict(sorted(ts.fresh.items()))

    def latest(self, table: str) -> dict[Key, Latest]:
        """Every key's latest visible version (append or primary), in key order (O(keys): replay, tests)."""
        ts = self._ts.get(table)
        if ts is None:
            return {}
        return {k: ks.latest for k, ks in sorted(ts.keys.items()) if ks.latest is not None}

    def table_of(self, data_source: str) -> tuple[str, Role] | None:
        return self._by_ds.get(data_source)

    def members(self, table: str) -> set[str]:
        ts = self._ts.get(table)
        return set() if ts is None else set(ts.members)

    def interval_of(self, sid: str) -> Interval | None:
        held = self.held.get(sid)
        return None if held is None else held.interval

    # -- the fold ----------------------------------------------------------------------------------
    def apply(self, event: Event, at: int) -> set[str]:
        """Fold one event that occurred at ``at`` (ms); other event types change nothing. Raises
        :class:`UpsertTableError` (a ValueError naming the field) for a table definition that cannot hold."""
        self.last_event_at = max(self.last_event_at, at)
        changed: set[str] = set()
        if isinstance(event, SegmentVisibilityChanged):
            self._visibility(event.segment_id, event.to_state == "visible", at, changed)
        elif isinstance(event, SegmentsPublished | SegmentsMarkedUsed):
            for seg in event.segments:
                self._learn(seg, True, at, changed)
        elif isinstance(event, SegmentAnnounced):
            self._learn(event.segment, False, at, changed)
        elif isinstance(event, SegmentsMarkedUnused):
            for sid in event.segment_ids:
                self._forget(sid, at, changed)
        elif isinstance(event, UpsertTableSet):
            self._set_table(event, at, changed)
        elif isinstance(event, ConsolidationRequested):
            if event.table in self.tables:
                self.last_consolidation[event.table] = at
                self.asked.discard(event.table)
                self.dirty.add(("table", event.table))
        elif isinstance(event, UpsertConsolidationAsked) and event.table in self.tables:
            self.asked.add(event.table)
            self.dirty.add(("table", event.table))
        return changed

    def _set_table(self, event: UpsertTableSet, at: int, changed: set[str]) -> None:
        table = UpsertTable.of(event)
        for ds in (table.append, table.primary):
            owner = self._by_ds.get(ds)
            if owner is not None and owner[0] != table.name:
                raise UpsertTableError(f"payload: data source {ds!r} already belongs to upsert table {owner[0]!r}")
        old = self.tables.get(table.name)
        if old == table:
            return
        if old is not None:
            self._by_ds.pop(old.append, None)
            self._by_ds.pop(old.primary, None)
            for sid in self._ts[old.name].members:
                self.stale.pop(sid, None)
                self.dirty.add(("stale", sid))
        self.tables[table.name] = table
        self.last_consolidation.setdefault(table.name, at)
        self.dirty.add(("table", table.name))
        self._by_ds[table.append] = (table.name, "append")
        self._by_ds[table.primary] = (table.name, "primary")
        self._ts[table.name] = _TableState(table)
        changed.add(table.name)
        for sid in sorted(s for s, h in self.held.items() if h.data_source in (table.append, table.primary)):
            self._attach(sid, at, changed)

    def _learn(self, seg: SegmentDescriptor, judge: bool, at: int, changed: set[str]) -> None:
        sid = str(seg.id)
        if sid in self.held:
            return
        owner = self._by_ds.get(seg.data_source)
        try:
            entries = entries_of(seg)
        except UpsertTableError as e:
            if owner is not None and judge:
                self._reject(sid, seg.data_source, f"upsert table {owner[0]}: {e}")
            return
        if entries is None:
            if owner is not None and judge:
                self._reject(sid, seg.data_source, f"upsert table {owner[0]}: a publish into {seg.data_source} "
                             "must carry upsertPartitions (the (key, version) pairs each segment holds)")
            return
        if owner is not None:
            table = self.tables[owner[0]]
            misfit = next((e for e in entries if not table.fits(e.key)), None)
            if misfit is not None:
                if judge:
                    self._reject(sid, seg.data_source,
                                 f"upsert table {table.name}: upsertPartitions: {table.misfit(misfit.key)}")
                return
        self.held[sid] = Held(seg.data_source, seg.interval, entries)
        self.dirty.add(("held", sid))
        if owner is not None:
            self._attach(sid, at, changed)

    def _reject(self, sid: str, data_source: str, reason: str) -> None:
        self.rejected[sid] = (data_source, reason)
        self.dirty.add(("rejected", sid))

    def _forget(self, sid: str, at: int, changed: set[str]) -> None:
        if self.rejected.pop(sid, None) is not None:
            self.dirty.add(("rejected", sid))
        held = self.held.get(sid)
        if held is None:
            return
        owner = self._by_ds.get(held.data_source)
        if owner is not None:
            self._detach(sid, at, changed)
        del self.held[sid]
        self.dirty.add(("held", sid))

    def _visibility(self, sid: str, visible: bool, at: int, changed: set[str]) -> None:
        if visible == (sid in self.visible):
            return
        self.dirty.add(("visible", sid))
        held = self.held.get(sid)
        owner = None if held is None else self._by_ds.get(held.data_source)
        if owner is not None:
            self._detach(sid, at, changed)
        if visible:
            self.visible.add(sid)
        else:
            self.visible.discard(sid)
        if owner is not None:
            self._attach(sid, at, changed)

    # -- indexes -----------------------------------------------------------------------------------
    def _attach(self, sid: str, at: int, changed: set[str]) -> None:
        held = self.held[sid]
        name, role = self._by_ds[held.data_source]
        ts = self._ts[name]
        ts.members.add(sid)
        primary = role == "primary"
        visible = sid in self.visible
        for e in held.entries:
            ks = ts.keys.get(e.key)
            if ks is None:
                ks = ts.keys[e.key] = _KeyState()
            if not primary:
                ks.holders.add(sid)
            if visible:
                ks.counted[(sid, e.version)] = (primary, e.tombstone)
        self._recompute(ts, (e.key for e in held.entries), at, changed)
        if not primary:
            self._judge_stale(ts, sid, at)

    def _detach(self, sid: str, at: int, changed: set[str]) -> None:
        held = self.held[sid]
        ts = self._ts[self._by_ds[held.data_source][0]]
        ts.members.discard(sid)
        for e in held.entries:
            ks = ts.keys.get(e.key)
            if ks is not None:
                ks.holders.discard(sid)
                ks.counted.pop((sid, e.version), None)
        if self.stale.pop(sid, None) is not None:
            self.dirty.add(("stale", sid))
        self._recompute(ts, (e.key for e in held.entries), at, changed, skip=sid)

    def _recompute(self, ts: _TableState, keys: Iterable[Key], at: int, changed: set[str],
                   skip: str | None = None) -> None:
        for key in dict.fromkeys(keys):
            ks = ts.keys.get(key)
            if ks is None:
                continue
            new = _latest_of(ks.counted)
            if not ks.counted and not ks.holders:
                del ts.keys[key]
            if new == ks.latest:
                continue
            ks.latest = new
            fresh = new if new is not None and not new.primary else None
            if ts.fresh.get(key) != fresh:
                if fresh is None:
                    del ts.fresh[key]
                else:
                    ts.fresh[key] = fresh
                changed.add(ts.table.name)
            for holder in sorted(ks.holders):
                if holder != skip:
                    self._judge_stale(ts, holder, at)

    def _judge_stale(self, ts: _TableState, sid: str, at: int) -> None:
        held = self.held[sid]
        superseded = all(_superseded(ts.keys[e.key].latest, e.version) for e in held.entries)
        if superseded and sid not in self.stale:
            self.stale[sid] = at
            self.dirty.add(("stale", sid))
        elif not superseded and sid in self.stale:
            del self.stale[sid]
            self.dirty.add(("stale", sid))

    # -- restore -----------------------------------------------------------------------------------
    @staticmethod
    def restore(tables: Iterable[tuple[UpsertTableSet, int, bool]], held: Iterable[tuple[str, Held]],
                visible: Iterable[str], rejected: Iterable[tuple[str, tuple[str, str]]],
                stale: Iterable[tuple[str, int]], last_event_at: int) -> UpsertState:
        """The state an adapter stored: tables as (definition, last consolidation, asked); the indexes are
        rebuilt, then the stored stale times put back (they are event times, not the rebuild's)."""
        st = UpsertState()
        st.held = dict(held)
        st.visible = set(visible)
        for event, last, asked in tables:
            st._set_table(event, last, set())
            st.last_consolidation[event.name] = last
            if asked:
                st.asked.add(event.name)
        st.rejected = dict(rejected)
        st.stale = dict(stale)
        st.last_event_at = last_event_at
        st.dirty.clear()
        return st


def _latest_of(counted: Mapping[tuple[str, str], tuple[bool, bool]]) -> Latest | None:
    if not counted:
        return None
    best = max((version, primary, tombstone) for (_, version), (primary, tombstone) in counted.items())
    version, primary, tombstone = best
    sids = tuple(sorted(sid for (sid, v), (p, _) in counted.items() if v == version and p == primary))
    return Latest(version, primary, tombstone, sids)


def _superseded(latest: Latest | None, version: str) -> bool:
    """Whether an append entry of ``version`` is no longer needed: a newer version is visible, or the primary
    holds this version or a newer one."""
    if latest is None:
        return False
    return latest.version > version or (latest.primary and latest.version >= version)
