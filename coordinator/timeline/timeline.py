"""The segment timeline of one data source: standby / visible / overshadowed as a function of two sets.

Inputs are the **used** segments (published, not marked unused; their
descriptors are known while offline) and the **online** segments (announced by
at least one server; replicas counted). Every used segment has a state:
``visible``, ``standby`` or ``overshadowed`` when online, ``offline`` when
announced by no server; anything else is ``absent``. Only used segments take
part: a segment that is online but not used (announced before its publish is
read, never published at all, or marked unused while a server still holds it)
is ``absent``, completes no chunk and hides nothing, so an announce alone never
makes data visible (docs/security.md). Its servers are kept, so a later
publish (or mark-used) of it is online at once.

Within a chunk (interval, version) :func:`~coordinator.timeline.chunk.resolve_chunk`
decides. Across versions:

- A chunk is **complete** when it has a visible segment and, if its segments
  declare core partitions (NumberedShardSpec ``partitions``), every core
  partition ``0..n-1`` is online. Only a complete chunk hides lower versions on
  its interval (the atomic version swap: new data replaces old only once it can
  be served whole).
- At each instant the **served** chunk is the highest complete chunk covering
  it; where none covers it, the highest chunk with a visible segment (newest
  partial data wins). "Higher" orders by version, then interval, so exactly one
  chunk serves an instant and no data is served twice.
- A segment of a chunk whose whole interval lies under higher complete chunks
  is overshadowed; a segment visible within its chunk whose chunk serves no
  instant is standby; one hidden over part of its interval stays visible.

Because states are a pure function of the two sets, bulk construction,
incremental updates and snapshot restores agree. An update re-resolves only the
touched chunks, and re-covers the chunks overlapping them only when a touched
chunk became (or stopped being) complete or servable: cost proportional to the
chunk and its overlapping versions, never the data source.

>>> from events import Interval, SegmentDescriptor
>>> day = Interval.parse("2026-01-01/P1D")
>>> v1 = SegmentDescriptor("wiki", day, "v1", 0, 10)
>>> v2 = SegmentDescriptor("wiki", day, "v2", 0, 10)
>>> tl = Timeline("wiki")
>>> [str(c) for c in tl.publish([v1, v2])]
['wiki_2026-01-01T00:00:00.000Z_2026-01-02T00:00:00.000Z_v1: absent -> offline', \
'wiki_2026-01-01T00:00:00.000Z_2026-01-02T00:00:00.000Z_v2: absent -> offline']
>>> [str(c) for c in tl.announce(v1, "h1")]
['wiki_2026-01-01T00:00:00.000Z_2026-01-02T00:00:00.000Z_v1: offline -> visible']
>>> [c.new for c in tl.announce(v2, "h2")]
['overshadowed', 'visible']
>>> [(str(e.segment_id)[-2:], [i.iso()[11:16] for i in e.intervals]) for e in tl.lookup(day)]
[('v2', ['00:00'])]
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import NamedTuple

from sortedcontainers import SortedList

from coordinator.timeline.chunk import ChunkResolution, ChunkStructure, chunk_structure, resolve_structure
from coordinator.timeline.coverage import subtract_sorted
from coordinator.timeline.index import IntervalIndex
from coordinator.timeline.overwrite import as_list_form
from events.compiled import constructor
from events.interval import Interval
from events.segment import SegmentDescriptor, SegmentId
from events.visibility import SegmentState

ChunkKey = tuple[int, int, str]  # (start, end, version): plain values hash and compare fast
_EMPTY = ChunkResolution(frozenset(), frozenset(), frozenset(), frozenset())


@dataclass(frozen=True, slots=True)
class StateChange:
    """One segment's state before and after a mutation."""

    segment_id: SegmentId
    old: SegmentState
    new: SegmentState

    def __str__(self) -> str:
        return f"{self.segment_id}: {self.old} -> {self.new}"


_state_change = constructor(StateChange)


class LookupEntry(NamedTuple):
    """A visible segment and the parts of the queried interval it serves, in time order."""

    segment_id: SegmentId
    intervals: tuple[Interval, ...]


class _Chunk:
    """Mutable bookkeeping of one (interval, version); only the Timeline touches it."""

    __slots__ = ("candidate", "complete", "covered", "entries", "fully_hidden", "higher", "ids", "interval", "key",
                 "members", "neighbors", "neighbors_epoch", "online", "rank", "resolution", "served", "states",
                 "structure", "version", "visible_ids")

    def __init__(self, interval: Interval, version: str) -> None:
        self.interval = interval
        self.version = version
        self.key: ChunkKey = (interval.start, interval.end, version)
        self.rank = (version, interval.start, interval.end)  # "higher" chunk order
        self.members: dict[int, SegmentDescriptor] = {}
        self.ids: dict[int, SegmentId] = {}
        self.online: set[int] = set()
        self.states: dict[int, SegmentState] = {}  # each member's state as in Timeline._state (no id hashing)
        self.resolution = _EMPTY
        self.structure: ChunkStructure | None = None  # None: members changed since last resolve
        self.complete = False
        self.candidate = False  # has a visible segment: may serve where no complete chunk does
        self.visible_ids: tuple[SegmentId, ...] = ()
        self.served: tuple[Interval, ...] = ()
        self.fully_hidden = False
        self.covered = False  # coverage computed at least once
        self.neighbors: list[_Chunk] = []  # the other chunks overlapping this one, valid at neighbors_epoch
        self.higher: list[_Chunk] = []  # those of them ranked higher; both in (start, end, version) order
        self.neighbors_epoch = -1
        self.entries: list[LookupEntry] | None = None  # lookup entries of the whole served pieces (cache)


    def set_member(self, sid: SegmentId, segment: SegmentDescriptor) -> None:
        partition = sid.partition_id
        if self.members.get(partition) is not segment:
            self.members[partition] = segment
            self.ids[partition] = sid
            self.structure = None

    def drop_member(self, partition: int) -> None:
        if self.members.pop(partition, None) is not None:
            del self.ids[partition]
            self.structure = None
        self.online.discard(partition)
        self.states.pop(partition, None)

    def resolve(self) -> None:
        structure = self.structure
        if structure is None:
            structure = self.structure = chunk_structure(as_list_form(self.members))
        self.resolution = resolve_structure(structure, self.online)
        visible = self.resolution.visible
        self.candidate = bool(visible)
        self.complete = bool(visible) and self.online.issuperset(range(structure.core))
        visible_ids = tuple(self.ids[p] for p in sorted(visible))
        if visible_ids != self.visible_ids:
            self.visible_ids = visible_ids
            self.entries = None


def _change_order(change: StateChange) -> tuple[str, int, int, str, int]:
    return change.segment_id.sort_key


def _chunk_key(chunk: _Chunk) -> ChunkKey:
    return chunk.key


def _key(sid: SegmentId) -> ChunkKey:
    return (sid.interval.start, sid.interval.end, sid.version)


class Timeline:
    """The timeline of one data source; every mutation returns the state changes it caused, by segment id."""

    def __init__(self, data_source: str) -> None:
        self.data_source = data_source
        self._segments: dict[SegmentId, SegmentDescriptor] = {}
        self._used: set[SegmentId] = set()
        self._servers: dict[SegmentId, tuple[str, ...]] = {}  # replicas are few: a tuple is 4x smaller than a set
        self._chunks: dict[ChunkKey, _Chunk] = {}
        self._index: IntervalIndex[ChunkKey, _Chunk] = IntervalIndex()
        self._served: SortedList = SortedList()  # (start, end, chunk key, piece), disjoint pieces
        self._state: dict[SegmentId, SegmentState] = {}
        self._forgotten: list[SegmentId] = []
        self._epoch = 0  # bumped whenever a chunk is added or removed: the chunks' neighbor lists go stale

    # -- construction -------------------------------------------------------------
    @classmethod
    def build(
        cls,
        data_source: str,
        used: Iterable[SegmentDescriptor],
        online: Mapping[SegmentId, tuple[SegmentDescriptor, Iterable[str]]] | None = None,
    ) -> Timeline:
        """Bulk construction from the used set and the online segments (id -> (descriptor, servers))."""
        tl = cls(data_source)
        for seg in used:
            tl._check(seg)
            sid = seg.id
            tl._segments[sid] = seg
            tl._used.add(sid)
        for sid, (seg, servers) in (online or {}).items():
            tl._check(seg)
            names = tuple(sorted(set(servers)))
            if names:
                tl._servers[sid] = names
                tl._segments.setdefault(sid, seg)
        for sid in tl._used:
            seg = tl._segments[sid]
            chunk = tl._chunk_for(seg)
            chunk.set_member(sid, seg)
            if sid in tl._servers:
                chunk.online.add(sid.partition_id)
        for chunk in tl._chunks.values():
            chunk.resolve()
        for chunk in tl._chunks.values():
            tl._cover(chunk)
        for chunk in tl._chunks.values():
            for p, sid in chunk.ids.items():
                tl._state[sid] = chunk.states[p] = tl._state_in(chunk, p)
        return tl

    def _check(self, seg: SegmentDescriptor) -> None:
        if seg.data_source != self.data_source:
            raise ValueError(f"segment {seg.id} belongs to {seg.data_source!r}, not {self.data_source!r}")

    def _chunk_for(self, seg: SegmentDescriptor) -> _Chunk:
        key = (seg.interval.start, seg.interval.end, seg.version)
        chunk = self._chunks.get(key)
        if chunk is None:
            chunk = self._chunks[key] = _Chunk(seg.interval, seg.version)
            self._index.add(key, seg.interval, chunk)
            self._epoch += 1
        return chunk

    def _neighbors(self, chunk: _Chunk) -> list[_Chunk]:
        """The other chunks overlapping ``chunk``, from its cache while no chunk came or went."""
        if chunk.neighbors_epoch != self._epoch:
            neighbors = [o for o in self._index.overlapping(chunk.interval) if o is not chunk]
            neighbors.sort(key=_chunk_key)  # by start: what coverage.subtract_sorted reads
            rank = chunk.rank
            chunk.neighbors = neighbors
            chunk.higher = [o for o in neighbors if o.rank > rank]
            chunk.neighbors_epoch = self._epoch
        return chunk.neighbors

    # -- mutations --------------------------------------------------------------------
    def publish(self, segments: Iterable[SegmentDescriptor]) -> list[StateChange]:
        """Add segments to the used set (their descriptors become authoritative)."""
        touched: set[ChunkKey] = set()
        for seg in segments:
            self._check(seg)
            sid = seg.id
            self._used.add(sid)
            self._segments[sid] = seg
            chunk = self._chunk_for(seg)
            chunk.set_member(sid, seg)
            if sid in self._servers:  # announced before its publish was read: online at once
                chunk.online.add(sid.partition_id)
            touched.add(chunk.key)
        return self._settle(touched)

    def mark_unused(self, segment_ids: Iterable[SegmentId]) -> list[StateChange]:
        """Remove segments from the used set: they leave the timeline (``absent``) even while a server still
        holds them; their servers stay known until they unannounce."""
        touched: set[ChunkKey] = set()
        for sid in segment_ids:
            if sid in self._used:
                self._used.discard(sid)
                touched.add(_key(sid))
                self._forgotten.append(sid)
                self._chunks[_key(sid)].drop_member(sid.partition_id)
                if sid not in self._servers:
                    self._segments.pop(sid, None)
        return self._settle(touched)

    def announce(self, segment: SegmentDescriptor, server: str) -> list[StateChange]:
        """A server serves the segment (idempotent per server); only a used segment's state can change."""
        self._check(segment)
        sid = segment.id
        servers = self._servers.get(sid, ())
        if server in servers:
            return []
        self._servers[sid] = (*servers, server)
        if servers:
            return []
        self._segments.setdefault(sid, segment)
        if sid not in self._used:
            return []  # not used: held by the server, served by no one
        chunk = self._chunks[_key(sid)]
        chunk.online.add(sid.partition_id)
        return self._settle({chunk.key})

    def unannounce(self, segment_id: SegmentId, server: str) -> list[StateChange]:
        """A server stopped serving the segment (unknown pairs change nothing)."""
        servers = self._servers.get(segment_id, ())
        if server not in servers:
            return []
        remaining = tuple(s for s in servers if s != server)
        if remaining:
            self._servers[segment_id] = remaining
            return []
        del self._servers[segment_id]
        if segment_id not in self._used:
            self._segments.pop(segment_id, None)  # neither used nor online: forgotten
            return []
        key = _key(segment_id)
        self._chunks[key].online.discard(segment_id.partition_id)
        return self._settle({key})

    def _settle(self, touched: set[ChunkKey]) -> list[StateChange]:
        """Re-resolve touched chunks, re-cover where completeness changed, diff the states."""
        if not touched:
            return []
        restate: dict[ChunkKey, _Chunk] = {}
        recover: dict[ChunkKey, _Chunk] = {}
        dirty: list[list[_Chunk]] = []  # chunks whose interval changed hands
        for key in sorted(touched) if len(touched) > 1 else touched:
            chunk = self._chunks[key]
            before = (chunk.complete, chunk.candidate)
            chunk.resolve()
            if not chunk.members:
                neighbors = self._neighbors(chunk)
                self._uncover(chunk)
                self._index.remove(key)
                del self._chunks[key]
                self._epoch += 1
                dirty.append(neighbors)
                continue
            restate[key] = chunk
            if (chunk.complete, chunk.candidate) != before:
                dirty.append([chunk])
                dirty.append(self._neighbors(chunk))
            elif not chunk.covered:
                recover[key] = chunk  # a new chunk may lie under higher ones
        for chunks in dirty:
            for other in chunks:
                if self._chunks.get(other.key) is other:  # not removed later in this settle
                    recover[other.key] = other
        for key, chunk in recover.items():
            if self._cover(chunk):
                restate[key] = chunk
        changes: list[StateChange] = []
        state = self._state
        for chunk in restate.values():
            known = chunk.states
            online = chunk.online
            res = chunk.resolution
            hidden, overshadowed, visible = chunk.fully_hidden, res.overshadowed, res.visible
            served = bool(chunk.served)
            for p, sid in chunk.ids.items():
                # _state_in, inlined (this loop runs for every member of every restated chunk)
                if p not in online:
                    new: SegmentState = "offline"
                elif hidden or p in overshadowed:
                    new = "overshadowed"
                elif served and p in visible:
                    new = "visible"
                else:
                    new = "standby"
                old = known.get(p, "absent")
                if new != old:
                    state[sid] = known[p] = new
                    changes.append(_state_change(sid, old, new))
        for sid in self._forgotten:  # left the used set: no longer in any chunk
            if sid in state and sid not in self._used:
                changes.append(StateChange(sid, state.pop(sid), "absent"))
        self._forgotten.clear()
        changes.sort(key=_change_order)  # the ids' order, compared as plain tuples (in C)
        return changes

    # -- coverage -----------------------------------------------------------------------
    def _cover(self, chunk: _Chunk) -> bool:
        """Recompute where ``chunk`` is served and whether higher complete chunks hide all of it.

        Returns whether either changed (only then can its members' states change).
        """
        chunk.covered = True
        others = self._neighbors(chunk)
        higher = chunk.higher
        interval = chunk.interval
        served: tuple[Interval, ...] = ()
        if chunk.complete:
            served = subtract_sorted(interval, [o.key for o in higher if o.complete])
            fully_hidden = not served
        else:
            fully_hidden = not subtract_sorted(interval, [o.key for o in higher if o.complete])
            if chunk.candidate and not fully_hidden:
                rank = chunk.rank
                blockers = [o.key for o in others if o.complete or (o.candidate and o.rank > rank)]
                served = subtract_sorted(interval, blockers)
        changed = fully_hidden != chunk.fully_hidden
        chunk.fully_hidden = fully_hidden
        if served != chunk.served:
            self._uncover(chunk)
            chunk.served = served
            chunk.entries = None
            for piece in served:
                self._served.add((piece.start, piece.end, chunk.key, piece))
            changed = True
        return changed

    def _uncover(self, chunk: _Chunk) -> None:
        for piece in chunk.served:
            self._served.remove((piece.start, piece.end, chunk.key, piece))
        chunk.served = ()
        chunk.entries = None

    def _state_in(self, chunk: _Chunk, p: int) -> SegmentState:
        if p not in chunk.online:
            return "offline"
        res = chunk.resolution
        if chunk.fully_hidden or p in res.overshadowed:
            return "overshadowed"
        if p in res.visible and chunk.served:
            return "visible"
        return "standby"

    # -- queries ------------------------------------------------------------------------
    def state(self, segment_id: SegmentId) -> SegmentState:
        return self._state.get(segment_id, "absent")

    def states(self) -> dict[SegmentId, SegmentState]:
        """Every known segment's state, by segment id."""
        return {sid: self._state[sid] for sid in sorted(self._state)}

    def segment(self, segment_id: SegmentId) -> SegmentDescriptor | None:
        return self._segments.get(segment_id)

    def servers(self, segment_id: SegmentId) -> frozenset[str]:
        return frozenset(self._servers.get(segment_id, ()))

    def used(self) -> list[SegmentId]:
        return sorted(self._used)

    def online(self) -> dict[SegmentId, frozenset[str]]:
        return {sid: frozenset(self._servers[sid]) for sid in sorted(self._servers)}

    def visible(self) -> list[SegmentId]:
        return [sid for sid, st in self.states().items() if st == "visible"]

    def lookup(self, interval: Interval) -> list[LookupEntry]:
        """The visible segments serving ``interval`` and, for each, the parts of it they serve.

        Entries come in the order of the first instant each serves, then by
        segment id: pieces are visited in time order and a chunk's visible ids
        are sorted, so no sort is needed. A chunk served only inside the query
        answers with its cached entries (built once per change of its visible
        ids or served pieces), so a long query costs its pieces, not its segments.
        """
        if interval.is_empty():
            return []
        qs, qe = interval.start, interval.end
        pieces = self._served
        i = pieces.bisect_left((qs,))
        if i > 0 and pieces[i - 1][1] > qs:
            i -= 1
        # A chunk's visible segments serve the same parts, so the parts are gathered per chunk, in the
        # order of its first piece (pieces are disjoint: no two chunks start serving at the same instant).
        # None: every piece of the chunk lies inside the query, its cached entries are the answer.
        parts: dict[ChunkKey, list[Interval] | None] = {}
        chunks = self._chunks
        for start, end, key, piece in pieces.islice(i):
            if start >= qe:
                break
            if key in parts:
                ivs = parts[key]
                if ivs is None:
                    continue
            else:
                served = chunks[key].served
                if served[0].start >= qs and served[-1].end <= qe:
                    parts[key] = None
                    continue
                ivs = parts[key] = []
            sub = piece if qs <= start and end <= qe else Interval(max(start, qs), min(end, qe))
            if ivs and ivs[-1].end == sub.start:
                ivs[-1] = Interval(ivs[-1].start, sub.end)
            else:
                ivs.append(sub)
        out: list[LookupEntry] = []
        for key, ivs in parts.items():
            chunk = chunks[key]
            if ivs is None:
                entries = chunk.entries
                if entries is None:
                    entries = chunk.entries = [LookupEntry(sid, chunk.served) for sid in chunk.visible_ids]
                out += entries
            else:
                clipped = tuple(ivs)
                out += [LookupEntry(sid, clipped) for sid in chunk.visible_ids]
        return out

    def served_pieces(self) -> list[tuple[Interval, tuple[Interval, str]]]:
        """The disjoint pieces of time and the chunk (interval, version) serving each, in time order."""
        return [(piece, (Interval(key[0], key[1]), key[2])) for _s, _e, key, piece in self._served]

    def overshadowed_used(self) -> list[SegmentId]:
        """Used segments, online or not, hidden by what is served now (may be marked unused after a wait)."""
        out = []
        for chunk in self._chunks.values():
            for p, sid in chunk.ids.items():
                if sid in self._used and (chunk.fully_hidden or p in chunk.resolution.hidden):
                    out.append(sid)
        out.sort()
        return out
