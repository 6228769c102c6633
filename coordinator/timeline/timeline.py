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

from bisect import bisect_left, insort
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass

from coordinator.timeline.chunk import ChunkResolution, ChunkStructure, resolve_structure, shared_structure
from coordinator.timeline.coverage import make_piece, subtract_sorted
from coordinator.timeline.index import IntervalIndex
from coordinator.timeline.overwrite import as_list_form
from coordinator.timeline.served import LookupEntry as LookupEntry  # re-exported: part of the timeline API
from coordinator.timeline.served import ServedPieces
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


class _Chunk:
    """Mutable bookkeeping of one (interval, version); only the Timeline touches it.

    Members are numbered by **slot**: bit ``i`` of every mask below is the member in slot ``i``. After
    :meth:`resolve` the slots are dense and in partition id order (slot ``i`` holds the ``i``-th smallest partition
    id), so masks iterate in segment id order and chunks of the same members number them alike (a shared
    structure's memo of masks answers them all). Between a membership change and the next resolve a joined member
    may sit in a slot out of order and a dropped one leave a hole (``reslot`` set).
    """

    __slots__ = (
        "_res",
        "candidate",
        "candidate_gaps",
        "complete",
        "core_need",
        "covered",
        "entries",
        "fully_hidden",
        "hidden_gaps",
        "higher",
        "ids",
        "interval",
        "key",
        "members",
        "neighbors",
        "online",
        "overwrite",
        "ovm",
        "pids",
        "rank",
        "removed",
        "reslot",
        "s_off",
        "s_over",
        "s_stby",
        "s_vis",
        "served",
        "sids",
        "slot",
        "slots",
        "structure",
        "version",
        "visible_ids",
        "vm",
    )

    def __init__(self, interval: Interval, version: str) -> None:
        self.interval = interval
        self.version = version
        self.key: ChunkKey = (interval.start, interval.end, version)
        self.rank = (version, interval.start, interval.end)  # "higher" chunk order
        self.members: dict[int, SegmentDescriptor] = {}
        self.ids: dict[int, SegmentId] = {}
        self.slot: dict[int, int] = {}  # partition id -> slot, for every member
        self.pids: list[int] = []  # slot -> partition id (-1: a hole left by a dropped member)
        self.sids: list[SegmentId | None] = []  # slot -> segment id
        self.slots = 0  # bits of the occupied slots
        self.reslot = False  # slots out of partition order or with holes: renumbered by the next resolve
        self.online = 0  # bits of the online members (only used members are ever online in a chunk)
        # Each member's state as four disjoint masks (the only copy; a member in none has no state yet).
        self.s_off = self.s_over = self.s_vis = self.s_stby = 0
        # The within-chunk verdict: its visible and overshadowed members as masks, and the verdict object itself
        # (None: a plain chunk's, built from ``vm`` when read).
        self.vm = self.ovm = 0
        self._res: ChunkResolution | None = _EMPTY
        self.core_need: int | None = 0  # slots of partitions 0..core-1, -1 when one is no member; None: unknown
        # None: members changed since last resolve. A new chunk has no members: the plain structure of none.
        self.structure: ChunkStructure | None = _plain_structure(0)
        self.complete = False
        self.candidate = False  # has a visible segment: may serve where no complete chunk does
        self.visible_ids: tuple[SegmentId, ...] | None = ()  # None: not built since the visible set changed
        self.served: tuple[Interval, ...] = ()
        self.fully_hidden = False
        self.covered = False  # coverage computed at least once
        # What of the interval no complete higher chunk covers (empty: fully hidden), and, kept only while this
        # chunk is a candidate that is neither complete nor fully hidden, what of it no complete chunk and no
        # higher candidate covers (where it serves). Maximal pieces in time order, as coverage.subtract_sorted
        # returns them; updated by one neighbor's change (Timeline._recover_after) or recomputed (_cover).
        self.hidden_gaps: tuple[Interval, ...] = ()
        self.candidate_gaps: tuple[Interval, ...] | None = None
        # The other chunks overlapping this one, and those of them ranked higher, both in (start, end, version)
        # order; kept current by the timeline as chunks come and go (Timeline._link / _unlink).
        self.neighbors: list[_Chunk] = []
        self.higher: list[_Chunk] = []
        self.removed = False
        # A member with a Druid-form overwrite spec may have joined (never reset: only costs a structure rebuild).
        self.overwrite = False  # dropped from the timeline (its last member left the used set)
        self.entries: list[LookupEntry] | None = None  # lookup entries of the whole served pieces (cache)

    @property
    def resolution(self) -> ChunkResolution:
        """The within-chunk verdict (by partition id)."""
        res = self._res
        if res is None:  # plain: the online members are the visible ones
            res = self._res = _resolution(frozenset(self.partitions(self.vm)), _NONE, _NONE, _NONE)
        return res

    def partitions(self, mask: int) -> list[int]:
        """The partition ids of the slots in ``mask``, in slot order."""
        pids = self.pids
        return [pids[s] for s in _bits(mask)]

    def mask(self, partitions: Iterable[int]) -> int:
        """The slots of ``partitions`` (members only) as a mask."""
        slot = self.slot
        return _mask([s for p in partitions if (s := slot.get(p)) is not None])

    def set_member(self, sid: SegmentId, segment: SegmentDescriptor) -> None:
        partition = sid.partition_id
        members = self.members
        if members.get(partition) is not segment:
            structure = self.structure
            overwrite = segment.overwrite_spec is not None
            new = partition not in members
            if (structure is not None and structure.plain and new and not self.overwrite
                    and not overwrite and _plain(partition, segment)):
                # A plain segment joining a plain chunk (no declarations, no Druid-form overwrite whose list form
                # could depend on it) keeps it plain: chunk_structure would only add it to the known ids, which a
                # plain chunk's verdict does not read (resolve), so a shared structure per core count serves.
                core = segment.core_partitions
                self.structure = structure if core <= structure.core else _plain_structure(core)
            else:
                self.structure = None
            members[partition] = segment
            if overwrite:
                self.overwrite = True
            self.ids[partition] = sid
            if new:
                pids = self.pids
                if pids and partition < pids[-1]:
                    self.reslot = True
                s = self.slot[partition] = len(pids)
                pids.append(partition)
                self.sids.append(sid)
                self.slots |= 1 << s
            else:
                self.sids[self.slot[partition]] = sid
            # a new member, or a member published again with another descriptor (its core partitions may differ)
            self.core_need = None

    def drop_member(self, partition: int) -> SegmentState | None:
        """Forget a member; returns the state it had (None when it had none)."""
        if self.members.pop(partition, None) is None:
            return None
        del self.ids[partition]
        self.structure = None
        s = self.slot.pop(partition)
        self.pids[s] = -1
        self.sids[s] = None
        bit = 1 << s
        old = _state_of(self, bit)
        if self.vm & bit:  # the visible set changes here, not in the next resolve's comparison of masks
            self.visible_ids = None
            self.entries = None
        keep = ~bit
        self.slots &= keep
        self.online &= keep
        self.s_off &= keep
        self.s_over &= keep
        self.s_vis &= keep
        self.s_stby &= keep
        self.vm &= keep
        self.ovm &= keep
        self.reslot = True
        self.core_need = None
        return None if old == "absent" else old

    def _renumber(self) -> None:
        """Dense slots in partition id order; every mask follows its members (linear in the members: masks are
        read and built as strings of bits, not one big-int operation per member)."""
        self.reslot = False
        order = sorted(self.slot)
        old_slot = self.slot
        olds = [old_slot[p] for p in order]
        width = len(self.pids)
        masks = [self.slots, self.online, self.s_off, self.s_over, self.s_vis, self.s_stby, self.vm, self.ovm]
        new: list[int] = []
        for m in masks:
            if not m:
                new.append(0)
                continue
            bits = format(m, "b").zfill(width)[::-1]  # bits[i]: slot i
            new.append(int("".join([bits[s] for s in reversed(olds)]), 2))
        sids = self.sids
        self.sids = [sids[s] for s in olds]
        self.slot = {p: i for i, p in enumerate(order)}
        self.pids = order
        self.slots, self.online, self.s_off, self.s_over, self.s_vis, self.s_stby, self.vm, self.ovm = new

    def resolve(self) -> bool:
        """Re-resolve the chunk from its members and online set; returns whether the visible mask changed here
        (a visible member dropped by :meth:`drop_member` changed it there: its caller records that)."""
        if self.reslot:
            self._renumber()
        structure = self.structure
        if structure is None:
            members = self.members  # the list form only when a Druid-form overwrite may be among them
            structure = self.structure = shared_structure(as_list_form(members) if self.overwrite else members)
        online = self.online
        if structure.plain:  # resolve_structure's plain case, inlined (most chunks)
            # The known ids ∩ online is the online set itself: only used members are ever online in a chunk
            # (announce and publish add a partition only when its segment is used, drop_member removes it).
            vm = online
            ovm = 0
            res: ChunkResolution | None = None
        else:
            memo = structure.masks
            found = memo.get(online)
            if found is None:
                res = resolve_structure(structure, frozenset(self.partitions(online)))
                found = (res, self.mask(res.visible), self.mask(res.overshadowed))
                if len(memo) >= _MASKS_MAX:
                    memo.clear()
                memo[online] = found
            res, vm, ovm = found
        self.candidate = bool(vm)
        need = self.core_need
        if need is None:
            need = self.core_need = self._core_need(structure.core)
        self.complete = bool(vm) and (online & need == need if need >= 0 else False)
        self.ovm = ovm
        self._res = res
        if vm != self.vm:
            self.vm = vm
            # Built again by the next lookup that needs it (a churn flips the visible set twice between lookups).
            self.visible_ids = None
            self.entries = None
            return True
        return False

    def _core_need(self, core: int) -> int:
        """The slots of core partitions 0..core-1, or -1 when one of them is not a member (never complete)."""
        if core > len(self.slot):
            return -1
        slot = self.slot
        need = 0
        for p in range(core):
            s = slot.get(p)
            if s is None:
                return -1
            need |= 1 << s
        return need

    def visible_segment_ids(self) -> tuple[SegmentId, ...]:
        """The ids of the visible members, by partition id (cached until the visible set changes)."""
        ids = self.visible_ids
        if ids is None:
            ids = self.visible_ids = tuple(self.ids[p] for p in sorted(self.resolution.visible))
        return ids

    def lookup_entries(self) -> list[LookupEntry]:
        """One entry per visible member, each with all the served pieces (cached until either changes)."""
        entries = self.entries
        if entries is None:
            entries = self.entries = [LookupEntry(sid, self.served) for sid in self.visible_segment_ids()]
        return entries


# Masks of more than _WIDE bits with more than _FEW of them set are read through their binary text (linear in
# the width) instead of one big-int operation per set bit (each linear in the width).
_WIDE = 256
_FEW = 32


def _bits(mask: int) -> list[int]:
    """The set bits of ``mask``, lowest first (linear in its width, also for wide chunks)."""
    if mask.bit_length() <= _WIDE or mask.bit_count() <= _FEW:  # one big-int step per set bit is cheaper
        out = []
        while mask:
            low = mask & -mask
            out.append(low.bit_length() - 1)
            mask ^= low
        return out
    text = format(mask, "b")[::-1]
    return [i for i, c in enumerate(text) if c == "1"]


def _mask(slots: list[int]) -> int:
    """The mask of ``slots`` (linear in the largest slot, also for wide chunks)."""
    if not slots:
        return 0
    top = max(slots)
    if top < _WIDE:
        m = 0
        for s in slots:
            m |= 1 << s
        return m
    bits = bytearray(b"0" * (top + 1))
    for s in slots:
        bits[top - s] = 49  # "1"
    return int(bits, 2)


def _state_of(chunk: _Chunk, bit: int) -> SegmentState:
    """The recorded state of the member in the slot of ``bit`` ("absent": none yet)."""
    if chunk.s_off & bit:
        return "offline"
    if chunk.s_over & bit:
        return "overshadowed"
    if chunk.s_vis & bit:
        return "visible"
    if chunk.s_stby & bit:
        return "standby"
    return "absent"


_CORES = [frozenset(range(n)) for n in range(257)]  # core partitions 0..n-1, shared
_PLAIN: dict[int, ChunkStructure] = {}


def _plain_structure(core: int) -> ChunkStructure:
    """A plain structure with ``core`` core partitions, shared by the chunks that need one: its ``known`` ids are
    left empty (the timeline's plain verdict reads the chunk's online set, always within its members)."""
    found = _PLAIN.get(core)
    if found is None:
        found = ChunkStructure(True, core, {}, {}, {}, (), frozenset())
        if len(_PLAIN) < 1024:
            _PLAIN[core] = found
    return found
_NONE: frozenset[int] = frozenset()
_resolution = constructor(ChunkResolution)


_PENDING_MAX = 4096
_MASKS_MAX = 16  # a shared structure's memo of masks, bounded like chunk.resolve_structure's


def _plain(partition: int, segment: SegmentDescriptor) -> bool:
    """The segment declares no overshadowed ids and no atomic update group beyond itself (the caller checks that
    it has no Druid overwrite spec)."""
    if segment.overshadowed_segments:
        return False
    group = segment.atomic_update_group
    return not group or all(p == partition for p in group)


def _new_states(chunk: _Chunk) -> tuple[int, int, int, int]:
    """The members' states the chunk's verdict and coverage give, as (offline, overshadowed, visible, standby)
    masks: offline when not online; overshadowed when hidden in the chunk or the chunk is fully hidden; visible
    when visible in the chunk and the chunk serves somewhere; standby otherwise."""
    online = chunk.online
    over = online if chunk.fully_hidden else online & chunk.ovm
    rest = online ^ over
    vis = rest & chunk.vm if chunk.served else 0
    return chunk.slots & ~online, over, vis, rest ^ vis


def _restate(chunk: _Chunk, changes: list[StateChange]) -> None:
    """Append the changes of ``chunk``'s members' states (by partition id) and record the new states.

    Computed on masks: only the members whose state changed are visited (slot order is partition id order)."""
    online = chunk.online
    over = online if chunk.fully_hidden else online & chunk.ovm
    rest = online ^ over
    vis = rest & chunk.vm if chunk.served else 0
    stby = rest ^ vis
    off = chunk.slots & ~online
    o_off, o_over, o_vis, o_stby = chunk.s_off, chunk.s_over, chunk.s_vis, chunk.s_stby
    changed = (off ^ o_off) | (over ^ o_over) | (vis ^ o_vis) | (stby ^ o_stby)
    if not changed:
        return
    chunk.s_off, chunk.s_over, chunk.s_vis, chunk.s_stby = off, over, vis, stby
    sids = chunk.sids
    if changed.bit_length() > _WIDE and changed.bit_count() > _FEW:
        _restate_wide(sids, changed, (o_off, o_over, o_vis, o_stby), (off, over, vis, stby), changes)
        return
    while changed:
        low = changed & -changed
        changed ^= low
        if o_off & low:
            old: SegmentState = "offline"
        elif o_over & low:
            old = "overshadowed"
        elif o_vis & low:
            old = "visible"
        elif o_stby & low:
            old = "standby"
        else:
            old = "absent"
        if off & low:
            new: SegmentState = "offline"
        elif over & low:
            new = "overshadowed"
        elif vis & low:
            new = "visible"
        else:
            new = "standby"
        changes.append(_state_change(sids[low.bit_length() - 1], old, new))


_NAMES: tuple[SegmentState, ...] = ("offline", "overshadowed", "visible", "standby")


def _restate_wide(sids: list[SegmentId | None], changed: int, olds: tuple[int, int, int, int],
                  news: tuple[int, int, int, int], changes: list[StateChange]) -> None:
    """:func:`_restate`'s loop for a wide chunk: each mask read once as text, so linear in the members."""
    width = changed.bit_length()

    def text(m: int) -> str:
        return format(m, "b").zfill(width)[::-1][:width]

    old_t = [text(m) for m in olds]
    new_t = [text(m) for m in news]
    for s in _bits(changed):
        old: SegmentState = "absent"
        for name, t in zip(_NAMES, old_t, strict=True):
            if t[s] == "1":
                old = name
                break
        new: SegmentState = "standby"
        for name, t in zip(_NAMES, new_t, strict=True):
            if t[s] == "1":
                new = name
                break
        changes.append(_state_change(sids[s], old, new))


_UNSEEN = make_piece(0, 0)  # "no pending entry" for _show (compared by identity)


def _without(gaps: tuple[Interval, ...], flip: _Chunk) -> tuple[Interval, ...]:
    """``gaps`` minus ``flip``'s interval (pieces stay maximal: cutting never makes two pieces touch)."""
    fs, fe = flip.key[0], flip.key[1]
    out: list[Interval] = []
    for piece in gaps:
        if piece.end <= fs or fe <= piece.start:
            out.append(piece)
            continue
        if piece.start < fs:
            out.append(make_piece(piece.start, fs))
        if fe < piece.end:
            out.append(make_piece(fe, piece.end))
    return tuple(out)


def _with(gaps: tuple[Interval, ...], chunk: _Chunk, flip: _Chunk, blockers: list[ChunkKey]) -> tuple[Interval, ...]:
    """``gaps`` plus what of ``chunk`` ∩ ``flip`` the other ``blockers`` (overlapping ``flip``, by start) leave
    uncovered, merged into maximal pieces. The added part lies inside ``flip``, which the old gaps avoided."""
    lo, hi = max(chunk.key[0], flip.key[0]), min(chunk.key[1], flip.key[1])
    added = subtract_sorted(make_piece(lo, hi), blockers)
    if not added:
        return gaps
    # The added pieces lie between two old ones (none of which overlaps ``flip``): insert them there, merging a
    # piece that touches its neighbor (what sorting all pieces and merging would give).
    i = bisect_left(gaps, lo, key=_piece_start)
    merged = list(added)
    if i < len(gaps) and gaps[i].start == merged[-1].end:
        merged[-1] = make_piece(merged[-1].start, gaps[i].end)
        j = i + 1
    else:
        j = i
    if i and gaps[i - 1].end == merged[0].start:
        i -= 1
        merged[0] = make_piece(gaps[i].start, merged[0].end)
    return (*gaps[:i], *merged, *gaps[j:])


def _piece_start(piece: Interval) -> int:
    return piece.start


def _change_order(change: StateChange) -> tuple[str, int, int, str, int]:
    return change.segment_id.sort_key


def _pair_order(pair: tuple[SegmentId, SegmentState]) -> tuple[str, int, int, str, int]:
    return pair[0].sort_key


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
        # The disjoint served pieces (start, end, chunk, piece) in time order, laid flat for lookups; a chunk whose
        # served pieces or visible segments change is touched (ServedPieces.touch) so its entries are rebuilt.
        self._served: ServedPieces[_Chunk] = ServedPieces()
        self._entries_changed = self._served.touched  # ServedPieces.touch without a call, on the hot paths
        # Filings (+1) and withdrawals (-1) of served pieces not yet applied to ``_served``: a piece handed from
        # one chunk to another and back (an announce undone) cancels here instead of costing four list updates.
        # Applied before every read of ``_served`` and whenever it grows past _PENDING_MAX.
        # Keyed by (start, end, chunk key) (an Interval hashes in Python); the piece to file, None to withdraw.
        self._pending: dict[tuple[int, int, ChunkKey], Interval | None] = {}
        # Members' states live in their chunks (``_Chunk``'s state masks, by slot: no SegmentId hashing on the hot
        # path); segments that left the used set in the current mutation wait here with their last state.
        self._forgotten: list[tuple[SegmentId, SegmentState]] = []

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
                chunk.online |= 1 << chunk.slot[sid.partition_id]
        for chunk in tl._chunks.values():
            chunk.resolve()
        for chunk in tl._chunks.values():
            tl._cover(chunk)
        tl._file_pending()
        tl._served.settle()  # every served chunk was touched: do not keep them all until the first lookup
        for chunk in tl._chunks.values():
            chunk.s_off, chunk.s_over, chunk.s_vis, chunk.s_stby = _new_states(chunk)
        return tl

    def _check(self, seg: SegmentDescriptor) -> None:
        if seg.data_source != self.data_source:
            raise ValueError(f"segment {seg.id} belongs to {seg.data_source!r}, not {self.data_source!r}")

    def _chunk_for(self, seg: SegmentDescriptor) -> _Chunk:
        key = (seg.interval.start, seg.interval.end, seg.version)
        chunk = self._chunks.get(key)
        if chunk is None:
            chunk = self._chunks[key] = _Chunk(seg.interval, seg.version)
            self._link(chunk)
            self._index.add(key, seg.interval, chunk)
        return chunk

    def _link(self, chunk: _Chunk) -> None:
        """Give a new chunk its neighbor lists and add it to those of the chunks it overlaps (one index query per
        new chunk, instead of every chunk's lists going stale whenever one is added)."""
        neighbors = self._index.overlapping(chunk.interval)
        neighbors.sort(key=_chunk_key)  # by start: what coverage.subtract_sorted reads
        rank = chunk.rank
        chunk.neighbors = neighbors
        chunk.higher = [o for o in neighbors if o.rank > rank]
        for other in neighbors:
            insort(other.neighbors, chunk, key=_chunk_key)
            if rank > other.rank:
                insort(other.higher, chunk, key=_chunk_key)

    def _unlink(self, chunk: _Chunk) -> list[_Chunk]:
        """Take a removed chunk out of its neighbors' lists; returns those neighbors."""
        neighbors = chunk.neighbors
        rank = chunk.rank
        for other in neighbors:
            other.neighbors.remove(chunk)
            if rank > other.rank:
                other.higher.remove(chunk)
        chunk.neighbors = []
        chunk.higher = []
        return neighbors

    # -- mutations --------------------------------------------------------------------
    def publish(self, segments: Iterable[SegmentDescriptor]) -> list[StateChange]:
        """Add segments to the used set (their descriptors become authoritative)."""
        touched: dict[_Chunk, None] = {}  # (chunks hash by identity: no tuple hashing)
        for seg in segments:
            self._check(seg)
            sid = seg.id
            self._used.add(sid)
            self._segments[sid] = seg
            chunk = self._chunk_for(seg)
            chunk.set_member(sid, seg)
            if sid in self._servers:  # announced before its publish was read: online at once
                chunk.online |= 1 << chunk.slot[sid.partition_id]
            touched[chunk] = None
        if len(touched) == 1:
            return self._settle_one(next(iter(touched)))
        return self._settle(touched)

    def mark_unused(self, segment_ids: Iterable[SegmentId]) -> list[StateChange]:
        """Remove segments from the used set: they leave the timeline (``absent``) even while a server still
        holds them; their servers stay known until they unannounce."""
        touched: dict[_Chunk, None] = {}
        for sid in segment_ids:
            if sid in self._used:
                self._used.discard(sid)
                chunk = self._chunks[_key(sid)]
                touched[chunk] = None
                if chunk.served and chunk.vm >> chunk.slot[sid.partition_id] & 1:
                    # drop_member takes it out of the visible mask itself, so resolve will not report it
                    self._entries_changed[chunk] = None
                old = chunk.drop_member(sid.partition_id)
                if old is not None:
                    self._forgotten.append((sid, old))
                if sid not in self._servers:
                    self._segments.pop(sid, None)
        return self._settle(touched)

    def announce(self, segment: SegmentDescriptor, server: str) -> list[StateChange]:
        """A server serves the segment (idempotent per server); only a used segment's state can change."""
        if segment.data_source != self.data_source:
            self._check(segment)
        sid = segment.id
        servers = self._servers.get(sid, ())
        if server in servers:
            return []
        self._servers[sid] = (*servers, server)
        if servers:
            return []
        if sid not in self._used:
            self._segments.setdefault(sid, segment)
            return []  # not used: held by the server, served by no one
        # (a used segment's descriptor is known already: publish stored it)
        interval = sid.interval
        chunk = self._chunks[(interval.start, interval.end, sid.version)]
        chunk.online |= 1 << chunk.slot[sid.partition_id]
        return self._settle_one(chunk)

    def unannounce(self, segment_id: SegmentId, server: str) -> list[StateChange]:
        """A server stopped serving the segment (unknown pairs change nothing)."""
        servers = self._servers.pop(segment_id, None)  # (its order in the map is never read: one probe, not two)
        if servers is None:
            return []
        if server not in servers:
            self._servers[segment_id] = servers
            return []
        if len(servers) > 1:
            self._servers[segment_id] = tuple(s for s in servers if s != server)
            return []
        if segment_id not in self._used:
            self._segments.pop(segment_id, None)  # neither used nor online: forgotten
            return []
        interval = segment_id.interval
        chunk = self._chunks[(interval.start, interval.end, segment_id.version)]
        chunk.online &= ~(1 << chunk.slot[segment_id.partition_id])
        return self._settle_one(chunk)

    def _settle_one(self, chunk: _Chunk) -> list[StateChange]:
        """:meth:`_settle` of one touched chunk that keeps members (an announce, an unannounce, most publishes):
        the same steps in the same order, without the bookkeeping of several chunks."""
        if not chunk.members or self._forgotten:
            return self._settle((chunk,))
        was_complete, was_candidate = chunk.complete, chunk.candidate
        if chunk.resolve() and chunk.served:
            self._entries_changed[chunk] = None  # its visible segments changed: so did its lookup entries
        changes: list[StateChange] = []
        if chunk.complete == was_complete and chunk.candidate == was_candidate:
            if not chunk.covered:
                self._cover(chunk)  # a new chunk may lie under higher ones
            _restate(chunk, changes)
            return changes
        more = [other for other in chunk.neighbors  # (_recover_after: their coverage moves inside its interval)
                if self._recover_after(other, chunk, was_complete, was_candidate)]
        self._recover_self(chunk)
        if more:  # restated in key order: the neighbors are, and the chunk goes before the first greater key
            key: ChunkKey | None = chunk.key
            for other in more:
                if key is not None and key < other.key:
                    _restate(chunk, changes)
                    key = None
                _restate(other, changes)
            if key is not None:
                _restate(chunk, changes)
        else:
            _restate(chunk, changes)
        return changes

    def _settle(self, touched: Collection[_Chunk]) -> list[StateChange]:
        """Re-resolve touched chunks, re-cover where completeness changed, diff the states.

        Chunks are keyed by identity here (``_Chunk`` hashes by ``id``): no tuple key is hashed per chunk."""
        if not touched:
            return []
        restate: dict[_Chunk, None] = {}
        recover: dict[_Chunk, None] = {}
        dirty: list[list[_Chunk]] = []  # chunks whose interval changed hands
        flipped: list[tuple[_Chunk, bool, bool]] = []  # chunks whose completeness or candidacy changed, as before
        removed = False
        for chunk in sorted(touched, key=_chunk_key) if len(touched) > 1 else touched:
            was_complete, was_candidate = chunk.complete, chunk.candidate
            if chunk.resolve() and chunk.served:
                self._entries_changed[chunk] = None  # its visible segments changed: so did its lookup entries
            if not chunk.members:
                key = chunk.key
                neighbors = self._unlink(chunk)
                self._uncover(chunk)
                self._index.remove(key)
                del self._chunks[key]
                chunk.removed = True
                dirty.append(neighbors)
                removed = True
                continue
            restate[chunk] = None
            if chunk.complete != was_complete or chunk.candidate != was_candidate:
                flipped.append((chunk, was_complete, was_candidate))
                recover[chunk] = None
            elif not chunk.covered:
                recover[chunk] = None  # a new chunk may lie under higher ones
        if len(flipped) == 1 and not removed:
            # One chunk changed hands: its neighbors' coverage moves only inside its interval (_recover_after).
            flip, was_complete, was_candidate = flipped[0]
            for other in flip.neighbors:
                if other not in recover and self._recover_after(other, flip, was_complete, was_candidate):
                    restate[other] = None
        else:
            for flip, _c, _v in flipped:
                dirty.append(flip.neighbors)
        for chunks in dirty:
            for other in chunks:
                if not other.removed:  # not removed later in this settle
                    recover[other] = None
        for chunk in recover:
            if self._cover(chunk):
                restate[chunk] = None
        changes: list[StateChange] = []
        # Chunks by key and members by partition id: the changes come out in segment id order (one data source:
        # an id's order is its chunk key's, then its partition id's), no sort needed but for forgotten ids.
        for chunk in sorted(restate, key=_chunk_key) if len(restate) > 1 else restate:
            _restate(chunk, changes)
        if self._forgotten:  # left the used set: no longer in any chunk
            changes += [StateChange(sid, old, "absent") for sid, old in self._forgotten]
            self._forgotten.clear()
            changes.sort(key=_change_order)  # the ids' order, compared as plain tuples (in C)
        return changes

    # -- coverage -----------------------------------------------------------------------
    def _cover(self, chunk: _Chunk) -> bool:
        """Recompute where ``chunk`` is served and whether higher complete chunks hide all of it.

        Returns whether either changed (only then can its members' states change).
        """
        chunk.covered = True
        others = chunk.neighbors
        interval = chunk.interval
        chunk.hidden_gaps = gaps = subtract_sorted(interval, [o.key for o in chunk.higher if o.complete])
        chunk.candidate_gaps = None
        if chunk.complete:
            served = gaps
        elif chunk.candidate and gaps:
            rank = chunk.rank
            blockers = [o.key for o in others if o.complete or (o.candidate and o.rank > rank)]
            chunk.candidate_gaps = served = subtract_sorted(interval, blockers)
        else:
            served = ()
        return self._show(chunk, not gaps, served)

    def _recover_self(self, chunk: _Chunk) -> bool:
        """:meth:`_cover` of a covered ``chunk`` after its own completeness or candidacy changed and nothing else
        did: what higher complete chunks leave of it (``hidden_gaps``) and what complete and higher candidate
        chunks leave of it do not depend on its own verdict, so the first is kept and the second computed only
        when the chunk now needs it (it is kept only while the chunk is a candidate neither complete nor fully
        hidden, which the chunk was not before such a change)."""
        if not chunk.covered:
            return self._cover(chunk)
        gaps = chunk.hidden_gaps
        served: tuple[Interval, ...]
        if chunk.complete:
            chunk.candidate_gaps = None
            served = gaps
        elif chunk.candidate and gaps:
            found = chunk.candidate_gaps
            if found is None:
                rank = chunk.rank
                found = chunk.candidate_gaps = subtract_sorted(
                    chunk.interval, [o.key for o in chunk.neighbors if o.complete or (o.candidate and o.rank > rank)])
            served = found
        else:
            chunk.candidate_gaps = None
            served = ()
        return self._show(chunk, not gaps, served)

    def _recover_after(self, chunk: _Chunk, flip: _Chunk, was_complete: bool, was_candidate: bool) -> bool:
        """:meth:`_cover` of ``chunk`` after one overlapping chunk, ``flip``, changed its completeness or candidacy
        (nothing else changed since ``chunk`` was last covered): the gaps change only inside ``flip``'s interval, so
        they are updated from ``flip``'s neighbors instead of ``chunk``'s (a daily chunk under 24 hourly ones
        re-covers from the hour's few). The result is :meth:`_cover`'s, piece for piece (maximal pieces)."""
        if not chunk.covered:
            return self._cover(chunk)
        rank = chunk.rank
        higher = flip.rank > rank
        if not higher and (chunk.complete or not chunk.candidate):
            # A lower chunk hides nothing of this one, and only blocks where a candidate neither complete nor
            # fully hidden serves: the gaps and the served pieces stay (what _cover would compute again).
            return False
        if len(flip.neighbors) >= len(chunk.neighbors):
            return self._cover(chunk)
        gaps = chunk.hidden_gaps
        if higher and was_complete != flip.complete:
            gaps = _without(gaps, flip) if flip.complete else _with(
                gaps, chunk, flip, [o.key for o in flip.neighbors if o.complete and o.rank > rank and o is not chunk])
            chunk.hidden_gaps = gaps
        if chunk.complete:
            served = gaps
        elif chunk.candidate and gaps:
            served_before = chunk.candidate_gaps
            if served_before is None:
                blockers = [o.key for o in chunk.neighbors if o.complete or (o.candidate and o.rank > rank)]
                served = subtract_sorted(chunk.interval, blockers)
            elif (was_complete or (was_candidate and higher)) != (flip.complete or (flip.candidate and higher)):
                if flip.complete or (flip.candidate and higher):
                    served = _without(served_before, flip)
                else:
                    served = _with(served_before, chunk, flip, [
                        o.key for o in flip.neighbors
                        if (o.complete or (o.candidate and o.rank > rank)) and o is not chunk])
            else:
                served = served_before
            chunk.candidate_gaps = served
        else:
            chunk.candidate_gaps = None
            served = ()
        return self._show(chunk, not gaps, served)

    def _show(self, chunk: _Chunk, fully_hidden: bool, served: tuple[Interval, ...]) -> bool:
        """Record the chunk's coverage (and its served pieces in the timeline's list); whether it changed."""
        changed = fully_hidden != chunk.fully_hidden
        chunk.fully_hidden = fully_hidden
        before = chunk.served
        if served != before:
            key = chunk.key
            pending = self._pending
            for piece in before:
                if piece not in served:
                    where = (piece.start, piece.end, key)
                    if pending.pop(where, None) is None:  # cancels a pending filing, or withdraws
                        pending[where] = None
            for piece in served:
                if piece not in before:
                    where = (piece.start, piece.end, key)
                    if pending.pop(where, _UNSEEN) is not None:  # cancels a pending withdrawal, or files
                        pending[where] = piece
            if len(pending) > _PENDING_MAX:
                self._file_pending()
            chunk.served = served
            chunk.entries = None
            # Pieces filed or withdrawn mark their own blocks; a piece the chunk keeps may sit in another block,
            # whose flat entries must learn that the chunk now serves one piece or several.
            self._entries_changed[chunk] = None
            changed = True
        return changed

    def _file_pending(self) -> None:
        """Apply the pending filings and withdrawals to ``_served``."""
        pending = self._pending
        if not pending:
            return
        pieces = self._served
        chunks = self._chunks
        # Withdrawals first: a piece handed from one chunk to another is withdrawn before it is filed again, so the
        # filed pieces stay disjoint (starts unique) at every step.
        for (start, _end, key), piece in pending.items():
            if piece is None:
                pieces.remove(start, chunks[key])
        for (start, end, key), piece in pending.items():
            if piece is not None:
                pieces.add(start, end, chunks[key], piece)
        self._pending.clear()

    def _uncover(self, chunk: _Chunk) -> None:
        self._file_pending()
        for piece in chunk.served:
            self._served.remove(piece.start, chunk)
        chunk.served = ()
        chunk.entries = None

    # -- queries ------------------------------------------------------------------------
    def state(self, segment_id: SegmentId) -> SegmentState:
        if segment_id.data_source != self.data_source:
            return "absent"
        chunk = self._chunks.get(_key(segment_id))
        if chunk is None:
            return "absent"
        p = segment_id.partition_id
        s = chunk.slot.get(p)
        return "absent" if s is None or chunk.ids[p] != segment_id else _state_of(chunk, 1 << s)

    def states(self) -> dict[SegmentId, SegmentState]:
        """Every known segment's state, by segment id."""
        pairs = [(sid, st) for chunk in self._chunks.values() for p, sid in chunk.ids.items()
                 if (st := _state_of(chunk, 1 << chunk.slot[p])) != "absent"]
        pairs.sort(key=_pair_order)
        return dict(pairs)

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
        if self._pending:
            self._file_pending()
        return self._served.lookup(interval.start, interval.end)

    def served_pieces(self) -> list[tuple[Interval, tuple[Interval, str]]]:
        """The disjoint pieces of time and the chunk (interval, version) serving each, in time order."""
        self._file_pending()
        return [(piece, (chunk.interval, chunk.version)) for _s, _e, chunk, piece in self._served]

    def overshadowed_used(self) -> list[SegmentId]:
        """Used segments, online or not, hidden by what is served now (may be marked unused after a wait)."""
        out = []
        for chunk in self._chunks.values():
            for p, sid in chunk.ids.items():
                if sid in self._used and (chunk.fully_hidden or p in chunk.resolution.hidden):
                    out.append(sid)
        out.sort()
        return out
