"""The planner's projection of the placement facts, kept current pair by pair.

:class:`Projected` holds the raw facts every placement adapter shares (servers,
holdings, commands in flight, segments) and the indexes a planning run reads,
derived from them and updated in O(1) (O(log n) for the cost caches) whenever a
fact of one (server, segment) pair changes. :class:`~coordinator.placement.state.PlacementState`
adds the fold of events on top; this module knows nothing of events.

**The projection of a pair** (server ``n``, segment ``s``), defined only while
``n`` has joined and ``s`` is known:

- *loaded*: ``n`` announced ``s`` (and has not unannounced it);
- *the queue item*: of the commands in flight to ``n`` for ``s`` (a move's drop
  half excepted: a move is modelled by its load half's ``source``), the earliest
  (by time sent, then id): at most one item per server and segment;
- *dropping*: loaded, and the queue item is a drop;
- *holder*: loaded and not dropping (a move's source still holds: a move counts once);
- *move source*: some queued move load of ``s`` names ``n`` as its ``source``;
- *projected* (what ``n``'s cost cache holds): a holder that is not a move source,
  or the queue item is a load;
- *active holder*: a holder on a server that is not decommissioning (a balancing move can start from it).

**Derived indexes** (every one a sum over pairs, so refreshing a pair keeps them exact):
``loaded[n]``, ``dropping[n]``, ``loading[n][s]`` (queued loads), ``queued[n][purpose]``,
``used_bytes[n]`` = loaded + loading - dropping bytes (Druid's projected size),
``holders[s]``, ``pending[s]`` (servers with a plain queued load), ``move_sources[s]``,
``loaded_in[s][tier]`` (holders per tier), ``pending_in[s][tier]``, and per tier the
``replica_loads`` in flight (plain queued loads of segments the tier already holds;
the replication throttle counts them), ``active_in[s][tier]`` (active holders per tier) and
per tier the ``balanceable`` segments (those with an active holder there), kept in segment id
order with O(log n) access by rank, so a balancing run samples its candidates without listing
the tier. A server's cost cache, once built, holds exactly its projected segments.
``used_index[data source]`` holds the used segments by interval, so marking overshadowed
segments can look at the neighbourhood of what changed (``mark_pending``: every segment whose
used flag or projection changed since the planner last marked) instead of every used segment.
"""

from __future__ import annotations

import hashlib
from collections import Counter
from collections.abc import Callable, Collection, Iterable, Mapping
from dataclasses import dataclass
from operator import attrgetter
from typing import Any, Literal, NamedTuple

from sortedcontainers import SortedKeyList

from coordinator.balancer.cost_cache import ServerCostCache
from coordinator.balancer.cost_index import ClusterCostIndex, index_rebuild_size
from coordinator.placement.records import InFlight, ServerFacts
from coordinator.timeline.index import IntervalIndex
from events.compiled import constructor
from events.segment import SegmentDescriptor, SegmentId

Purpose = Literal["loading", "decommissioning", "balancing"]
QueueAction = Literal["load", "drop"]
Pair = tuple[str, SegmentId]


@dataclass(frozen=True, slots=True)
class QueueItem:
    """A queued load or drop as the planner sees it; ``move_id`` and ``source`` are set for a move's load half."""

    action: QueueAction
    segment: SegmentId
    purpose: Purpose = "loading"
    move_id: str | None = None
    source: str | None = None


@dataclass(frozen=True, slots=True)
class Copies:
    loaded: int = 0
    pending: int = 0

    @property
    def total(self) -> int:
        return self.loaded + self.pending


class _Derived(NamedTuple):
    """One pair's projection (see the module docstring); equal values contribute equally. A tuple: one is made
    and compared on every refresh of a pair (a frozen dataclass's ``__init__`` set each field through
    ``object.__setattr__``, and its ``==`` built two tuples in Python)."""

    tier: str
    size: int
    loaded: bool
    item: QueueItem | None
    item_id: str | None
    move_source: bool
    draining: bool

    @property
    def dropping(self) -> bool:
        return self.loaded and self.item is not None and self.item.action == "drop"

    @property
    def holder(self) -> bool:
        return self.loaded and not self.dropping

    @property
    def loading(self) -> bool:
        return self.item is not None and self.item.action == "load"

    @property
    def projected(self) -> bool:
        return (self.holder and not self.move_source) or self.loading

    @property
    def active_holder(self) -> bool:
        return self.holder and not self.draining


def command_id(*content: str) -> str:
    """A command's id: a pure function of what it commands (kind, server, segment, n-th such command).

    >>> command_id("load", "h1", "wiki_2026-01-01T00:00:00.000Z_2026-01-02T00:00:00.000Z_v1", "0")
    'b284393f2b6a345853b75188ea3b3387'
    >>> command_id("load", "h1", "s", "0") != command_id("load", "h1", "s", "1")
    True
    """
    text = "\x00".join(("planner-command", *content)).encode()
    return hashlib.blake2b(text, digest_size=16).hexdigest()


_PREFIXES: dict[str, Any] = {}  # command kind -> blake2b that has hashed "planner-command\0<kind>\0"


def _prefix(kind: str) -> Any:
    """A blake2b that has hashed everything of ``command_id(kind, ...)`` before the kind's content (kept per kind and
    copied: blake2b is a stream, so hashing the rest into a copy gives the digest of the whole text)."""
    prefix = _PREFIXES.get(kind)
    if prefix is None:
        prefix = _PREFIXES[kind] = hashlib.blake2b(f"planner-command\x00{kind}\x00".encode(), digest_size=16)
    return prefix


_LOAD_PREFIX = _prefix("load")


def _id_hasher(kind: str, rest: tuple[str, ...]) -> Any:
    """A blake2b that has hashed everything of ``command_id(kind, *rest, n)`` but ``n`` (a planned command's id costs
    one copy and one short update, not a join and a fresh hash of the whole text)."""
    h = _prefix(kind).copy()
    h.update(("\x00".join(rest) + "\x00").encode())
    return h


_new_queue_item = constructor(QueueItem)  # QueueItem(...) positionally, without the frozen __init__'s setattr calls
_new_counter = Counter.__new__  # Counter.__new__(Counter): an empty Counter (its __init__ only fills it)
_new_tuple = tuple.__new__  # tuple.__new__(_Derived, fields): the NamedTuple without its Python-level __new__


def _queue_purpose(purpose: str) -> Purpose:
    if purpose in ("decommissioning", "balancing"):
        return purpose  # type: ignore[return-value]
    return "loading"


class Projected:
    """Raw placement facts plus the planner's projection of them (see the module docstring)."""

    def __init__(self) -> None:
        # facts
        self.segments: dict[SegmentId, SegmentDescriptor] = {}
        self.by_text: dict[str, SegmentId] = {}
        self.used: set[SegmentId] = set()
        self.servers: dict[str, ServerFacts] = {}
        self.held: dict[str, set[SegmentId]] = {}
        self.queue: dict[str, InFlight] = {}
        self.by_place: dict[Pair, set[str]] = {}
        self.by_move: dict[str, set[str]] = {}
        self.in_flight: Counter[SegmentId] = Counter()
        self.settled: set[str] = set()  # settled ids not yet handed to an adapter's store
        self.settled_seg: dict[str, str] = {}  # of those, the segment (id text) each belongs to
        self.settled_ids: dict[str, set[str]] = {}  # and the reverse: segment id text -> those ids
        self.settled_before: Callable[[str], bool] = lambda _cid: False  # an adapter's store of older ones
        # the adapter's stored settled ids of one segment (id text); the window forgets them (settled.py)
        self.settled_of: Callable[[str], Iterable[str]] = lambda _text: ()
        self.forgotten: set[str] = set()  # settled ids forgotten since the adapter last stored (it deletes them)
        self.config_decommissioning: frozenset[str] = frozenset()
        # derived
        self._pairs: dict[Pair, _Derived] = {}
        self._sourced: dict[str, Counter[SegmentId]] = {}  # server -> queued move loads naming it as source
        # move sources whose flag may have changed, refreshed after the pair being refreshed is done (a refresh
        # in the middle of another re-entered it: two moves of one segment between two servers, each the other's
        # source, removed one contribution twice)
        self._stale_sources: list[Pair] = []
        self._refreshing = False
        # while one event is folded (PlacementState.evolve): the pairs whose facts changed, refreshed once each
        # at its end (an announce answering a load settles it and holds the copy: one refresh, not two)
        self._deferred: dict[Pair, None] | None = None
        self._by_server: dict[str, set[str]] = {}  # server -> ids of the commands in flight to it
        self._unknown_refs: dict[SegmentId, set[str]] = {}  # segments not known yet -> servers referring to them
        self.tier_of: dict[str, str] = {}
        self.tiers: dict[str, list[str]] = {}
        self.decommissioning: set[str] = set()
        self.active: Counter[str] = Counter()
        self.loaded: dict[str, set[SegmentId]] = {}
        self.dropping: dict[str, set[SegmentId]] = {}
        self.loading: dict[str, dict[SegmentId, QueueItem]] = {}
        self.queued: dict[str, Counter[str]] = {}
        self.used_bytes: dict[str, int] = {}
        self.loading_bytes: dict[str, int] = {}  # server -> bytes of the loads queued to it
        self.holders: dict[SegmentId, set[str]] = {}
        self.pending: dict[SegmentId, set[str]] = {}
        self.move_sources: dict[SegmentId, set[str]] = {}
        self.loaded_in: dict[SegmentId, Counter[str]] = {}
        self.pending_in: dict[SegmentId, Counter[str]] = {}
        self.replica_loads: Counter[str] = Counter()
        self.active_in: dict[SegmentId, Counter[str]] = {}
        self.balanceable: dict[str, Any] = {}  # tier -> SortedKeyList of segment ids (see the module docstring)
        self.caches: dict[str, ServerCostCache] = {}
        # tier -> the cost index of its servers' projected segments (built on first use, then updated pair by pair)
        self.tier_indexes: dict[str, ClusterCostIndex] = {}
        # whether the indexes only note a rebuild that pays (ClusterCostIndex.deferred_rebuilds): the planner's shell
        # then builds it on a thread of its own (PlannerAgent.build_index_rebuilds_on)
        self.defer_index_rebuilds = False
        # tier -> (server, segment) pairs whose membership in its built index changed since it was last read
        self._index_delta: dict[str, dict[Pair, bool]] = {}
        # server -> segments whose membership in its built cache changed since the cache was last read (True: in)
        self._cache_delta: dict[str, dict[SegmentId, bool]] = {}
        self.touched_segments: set[SegmentId] = set()  # every segment whose projection changed (callers drain it)
        # every segment that lost a holder or a command in flight, whether or not its projection changed (a server
        # that is not joined projects nothing): the fold's candidates to forget (callers drain it)
        self.released: set[SegmentId] = set()
        # overshadowed marking: used segments by data source and interval, and the segments whose used flag or
        # projection changed since the planner last marked (``mark_all``: it must look at every segment)
        self.used_index: dict[str, IntervalIndex[SegmentId, SegmentId]] = {}
        self.mark_pending: set[SegmentId] = set()
        self.mark_all = True
        self.dirty: set[tuple[str, str]] = set()  # (family, key) of changed facts, for the adapters' stores

    # -- reading (the planner's view) -----------------------------------------------------------
    def segment(self, sid: SegmentId) -> SegmentDescriptor:
        return self.segments[sid]

    def size(self, sid: SegmentId) -> int:
        seg = self.segments.get(sid)
        return seg.size if seg is not None else 0

    def server(self, name: str) -> ServerFacts:
        return self.servers[name]

    def free_bytes(self, name: str) -> int:
        return self.servers[name].max_size_bytes - self.used_bytes[name]

    def copies(self, sid: SegmentId, tier: str) -> Copies:
        loaded, pending = self.loaded_in.get(sid), self.pending_in.get(sid)
        return Copies(loaded[tier] if loaded else 0, pending[tier] if pending else 0)

    def tiers_with_copies(self, sid: SegmentId) -> set[str]:
        loaded, pending = self.loaded_in.get(sid), self.pending_in.get(sid)
        return {t for c in (loaded, pending) if c for t, n in c.items() if n > 0}

    def anywhere(self, sid: SegmentId) -> bool:
        return bool(self.holders.get(sid)) or bool(self.pending.get(sid))

    def present(self, sid: SegmentId, name: str) -> bool:
        """Loaded (and not being dropped) or queued to load on the server."""
        return name in self.holders.get(sid, ()) or sid in self.loading[name]

    def queue_size(self, name: str) -> int:
        return len(self.loading[name])

    def is_replica(self, sid: SegmentId, tier: str) -> bool:
        """A load of ``sid`` in ``tier`` is a replica load when the tier already holds a copy."""
        loaded = self.loaded_in.get(sid)
        return bool(loaded) and loaded[tier] > 0  # type: ignore[index]

    def projected_segments(self, name: str) -> list[SegmentId]:
        """The segments the server's cost cache holds (see the module docstring), sorted."""
        out = {s for s in self.loaded.get(name, ()) if self._pairs[(name, s)].projected}
        out.update(self.loading.get(name, ()))
        return sorted(out, key=_ID)  # id order, compared as plain tuples (not dataclass by dataclass)

    def cache(self, name: str) -> ServerCostCache:
        """The server's cost cache of its projected segments: built on first use, then kept current lazily: the
        fold notes which segments entered or left the projection and the next read applies them at once (removes,
        then one bulk add), so a burst of loads costs one tree update per server when a cost is next asked for,
        not one per load on the publish path. A noted change is the pair's final state, so applying it to a
        cache that already has it changes nothing."""
        cache = self.caches.get(name)
        delta = self._cache_delta.pop(name, None)
        if cache is None:
            cache = ServerCostCache()
            cache.extend(self.segments[s] for s in self.projected_segments(name))
            self.caches[name] = cache
        elif delta:
            added = []
            for sid, now_in in sorted(delta.items(), key=lambda kv: kv[0].sort_key):
                if now_in:
                    added.append(self.segments[sid])
                else:
                    cache.remove(sid)
            if len(added) == 1:
                cache.add(added[0])
            elif added:
                cache.extend(added)
        return cache

    def tier_index(self, tier: str) -> ClusterCostIndex:
        """The cost index of the tier's servers (every joined one, in name order) over their projected segments:
        built in bulk on first use, then kept current: the fold notes each change of a pair's projection
        (:meth:`_refresh`) and the next read hands them to the index in one :meth:`ClusterCostIndex.update`
        (a dict lookup and an append per change, one vectorized binary search for all of them, no pass over
        the pairs held: a burst of publishes' loads costs what it changed; the index folds its delta into a
        rebuild from its own columns, in NumPy, when that pays). Only a delta larger than the index itself
        (a full run's loads on an empty tier) lists the servers' projected segments again, as a first build
        does; a server joining or leaving the tier drops the index (built again when next asked for). One
        :meth:`ClusterCostIndex.costs_of` answers a segment's cost on every server of the tier."""
        index = self.tier_indexes.get(tier)
        delta = self._index_delta.pop(tier, None)
        if index is not None and delta and len(delta) > index_rebuild_size(index.static_rows):
            index = None  # the delta outnumbers the index: listing the projection costs no more than applying it
        if index is None:
            names = self.tiers.get(tier, [])
            index = ClusterCostIndex.build(
                {n: [self.segments[s] for s in self.projected_segments(n)] for n in names})
            index.deferred_rebuilds = self.defer_index_rebuilds
            self.tier_indexes[tier] = index
        elif delta:
            changes = sorted(delta.items(), key=lambda kv: (kv[0][0], kv[0][1].sort_key))  # the same log: one order
            index.update(added=[(name, self.segments[sid]) for (name, sid), now_in in changes if now_in],
                         removed=[(name, sid) for (name, sid), now_in in changes if not now_in])
        return index

    def flush_index_deltas(self) -> None:
        """Hand every built tier index the pair changes noted since it was last read, as its next read
        (:meth:`tier_index`) would: the index afterwards is the one that read would leave. Indexes not built are left
        alone (built when first asked for). The planner's shell calls it after each batch, so the changes go in a
        batch at a time instead of all at the next balancing run's first read (at 100k segments and 1000
        publishes/s, a minute of loads: 46,533 changes, 477 ms of the planner's thread at once)."""
        for tier in [t for t, delta in self._index_delta.items() if delta and t in self.tier_indexes]:
            self.tier_index(tier)

    def costs_in(self, tier: str, seg: SegmentDescriptor) -> dict[str, float]:
        """Σ cost(seg, y) over each tier server's projected segments y, the segment itself excluded (a holder and
        a candidate are scored alike): one query of the tier's index."""
        index = self.tier_index(tier)
        return dict(zip(index.servers, index.costs_of(seg).tolist(), strict=True))

    def known_command(self, cid: str) -> bool:
        """Whether a command with this id was sent or read back: in flight, or settled (and not forgotten)."""
        return cid in self.queue or self.known_settled(cid)

    def known_settled(self, cid: str) -> bool:
        """Whether the id is settled: in this batch, or in the adapter's store and not forgotten since."""
        return cid in self.settled or (cid not in self.forgotten and self.settled_before(cid))

    def fresh_command_id(self, *content: str) -> str:
        """The id of the next command of this content: ``command_id(*content, n)`` with ``n`` the first count no known
        command holds.

        >>> p = Projected()
        >>> p.fresh_command_id("drop", "h1", "s") == command_id("drop", "h1", "s", "0")
        True
        >>> p.settled.add(command_id("load", "h1", "s", "0"))
        >>> p.fresh_load_id("h1", "s") == p.fresh_command_id("load", "h1", "s") == command_id("load", "h1", "s", "1")
        True
        """
        base = _id_hasher(content[0], content[1:])  # command_id(*content, n) for every n, the common part hashed once
        return self._first_free_id(base)

    def fresh_load_id(self, name: str, text: str) -> str:
        """``fresh_command_id("load", name, text)``, the first candidate hashed from the kind's prefix directly."""
        h = _LOAD_PREFIX.copy()
        h.update(f"{name}\x00{text}\x000".encode())
        cid: str = h.hexdigest()
        if not (cid in self.queue or cid in self.settled or (cid not in self.forgotten and self.settled_before(cid))):
            return cid
        return self.fresh_command_id("load", name, text)

    def _first_free_id(self, base: Any) -> str:
        """The first ``command_id(..., n)`` no known command holds, from a hasher of everything but ``n``."""
        h = base.copy()
        h.update(b"0")
        cid: str = h.hexdigest()
        n = 0
        while cid in self.queue or cid in self.settled or (cid not in self.forgotten and self.settled_before(cid)):
            n += 1  # known_command, written out
            h = base.copy()
            h.update(str(n).encode())
            cid = h.hexdigest()
        return cid

    # -- facts: servers --------------------------------------------------------------------------
    def set_server(self, name: str, facts: ServerFacts) -> None:
        """Assign a server's facts; its pairs are re-projected when it joins, leaves or changes tier."""
        old = self.servers.get(name)
        if old == facts:
            return
        self.servers[name] = facts
        self.dirty.add(("srv", name))
        was_in = old is not None and old.joined
        now_in = facts.joined
        if was_in and (not now_in or old.tier != facts.tier):  # type: ignore[union-attr]
            self._leave(name)
        if now_in and (not was_in or old.tier != facts.tier):  # type: ignore[union-attr]
            self._join(name, facts.tier)
        self._set_decommissioning(name)

    def set_config_decommissioning(self, names: Iterable[str]) -> None:
        old, self.config_decommissioning = self.config_decommissioning, frozenset(names)
        for name in sorted(old ^ self.config_decommissioning):
            if name in self.tier_of:
                self._set_decommissioning(name)

    def _set_decommissioning(self, name: str) -> None:
        if name not in self.tier_of:
            return
        facts = self.servers[name]
        draining = facts.decommissioning or name in self.config_decommissioning
        tier = self.tier_of[name]
        if draining and name not in self.decommissioning:
            self.decommissioning.add(name)
            self.active[tier] -= 1
        elif not draining and name in self.decommissioning:
            self.decommissioning.discard(name)
            self.active[tier] += 1
        else:
            return
        for sid in sorted(self._server_pairs(name)):  # its holders stop (or start) being active ones
            self._refresh(name, sid)

    def _server_pairs(self, name: str) -> set[SegmentId]:
        """Every segment a pair of this server can be derived for: held, queued, or named as a move source."""
        out = set(self.held.get(name, ()))
        out.update(self.queue[cid].segment for cid in self._by_server.get(name, ()))
        out.update(self._sourced.get(name, ()))
        return out

    def _join(self, name: str, tier: str) -> None:
        self.tier_indexes.pop(tier, None)  # its servers change: built again when next asked for
        self._index_delta.pop(tier, None)
        self.tier_of[name] = tier
        names = self.tiers.setdefault(tier, [])
        names.append(name)
        names.sort()
        self.active[tier] += 1
        self.loaded[name], self.dropping[name], self.loading[name] = set(), set(), {}
        self.queued[name], self.used_bytes[name], self.loading_bytes[name] = Counter(), 0, 0
        for sid in sorted(self._server_pairs(name)):
            self._refresh(name, sid)

    def _leave(self, name: str) -> None:
        tier = self.tier_of.pop(name)
        self.tier_indexes.pop(tier, None)
        self._index_delta.pop(tier, None)
        for sid in sorted(self._server_pairs(name)):
            self._refresh(name, sid)
        self.tiers[tier].remove(name)
        if not self.tiers[tier]:
            del self.tiers[tier]
        if name in self.decommissioning:
            self.decommissioning.discard(name)
        else:
            self.active[tier] -= 1
        if not self.active[tier]:
            del self.active[tier]
        for index in (self.loaded, self.dropping, self.loading, self.queued, self.used_bytes, self.loading_bytes,
                      self.caches, self._cache_delta):
            index.pop(name, None)

    # -- facts: segments and holdings --------------------------------------------------------------
    def learn(self, seg: SegmentDescriptor, used: bool | None) -> None:
        """Know a segment (a publish: ``used=True`` and its descriptor wins; an announce or load: ``None``).

        An announce or load of a known segment changes nothing here (its descriptor stays, and a used one is indexed
        since it became both known and used): it returns at once, nothing marked dirty, as every announce and every
        command read back reaches here (a third of the planner's fold, ``bench.service --only placement``)."""
        sid = seg.id
        if used is None and sid in self.segments:
            return
        new = sid not in self.segments
        if new or used:
            self.segments[sid] = seg
        self.by_text[str(sid)] = sid
        if used is True or sid in self.used:
            self.set_used(sid)
        self.dirty.add(("seg", str(sid)))
        for name in sorted(self._unknown_refs.pop(sid, ())) if new else ():
            self._refresh(name, sid)

    def set_used(self, sid: SegmentId) -> None:
        """The segment is used (indexed by interval once its descriptor is known)."""
        if sid not in self.used:
            self.used.add(sid)
            self.touched_segments.add(sid)
            self.mark_pending.add(sid)
            self.dirty.add(("seg", str(sid)))
        seg = self.segments.get(sid)
        index = self.used_index.get(sid.data_source)
        if index is None:  # not setdefault(..., IntervalIndex()): that built an index on every call
            index = self.used_index[sid.data_source] = IntervalIndex()
        if seg is not None and sid not in index:
            index.add(sid, seg.interval, sid)

    def mark_unused(self, sid: SegmentId) -> None:
        if sid in self.used:
            self.used.discard(sid)
            index = self.used_index.get(sid.data_source)
            if index is not None and sid in index:
                index.remove(sid)
                if not len(index):
                    del self.used_index[sid.data_source]
            self.touched_segments.add(sid)
            self.mark_pending.add(sid)
            self.dirty.add(("seg", str(sid)))

    def hold(self, name: str, sid: SegmentId, held: bool) -> None:
        mine = self.held.setdefault(name, set())
        if (sid in mine) == held:
            return
        if held:
            mine.add(sid)
        else:
            mine.discard(sid)
            self.released.add(sid)
        self.dirty.add(("held", f"{name}\x00{sid}"))  # the ``seg`` entry (descriptor, used) is not the holding's
        self._note_ref(name, sid)
        self._refresh(name, sid)

    def hold_stored(self, holdings: Mapping[str, Iterable[SegmentId]]) -> None:
        """Holdings read back from an adapter's store (a restore): :meth:`hold` ``(name, s, True)`` of each server's
        segments, server by server, in order, without marking them dirty (the store has them). The indexes end as
        :meth:`hold`'s would leave them (each is a sum over pairs; ``balanceable`` is sorted): a pair that derived
        nothing before (not held, nothing in flight for it, not a move source) of a known segment with no plain
        load queued anywhere, on a joined server, gets its projection (a plain loaded copy) and its contribution
        written out here, as :meth:`_enqueue_lone_load` does for loads, and the segments that got their first
        active holder of a tier join its ``balanceable`` list in one sorted update; any other pair takes
        :meth:`hold`. At 1M segments a restore holds 2M such pairs: the general path's derive and contribute were a
        third of the worker's start-up, and one ``balanceable`` insertion each another tenth."""
        ranked: dict[str, list[SegmentId]] = {}  # tier -> segments that got their first active holder there

        def flush() -> None:  # the written-out contributions the general path reads
            for tier, sids in ranked.items():
                if not sids:
                    continue  # no empty list is kept (as _contribute deletes one)
                balanceable = self.balanceable.get(tier)
                if balanceable is None:
                    self.balanceable[tier] = SortedKeyList(sids, key=_ID)
                else:
                    balanceable.update(sids)
            ranked.clear()

        for name, sids in holdings.items():
            tier = self.tier_of.get(name)
            if tier is None or self._deferred is not None or self._refreshing:
                flush()
                for sid in sids:
                    self._hold_general(name, sid)
                continue
            mine = self.held.setdefault(name, set())
            segments, by_place, pending_in = self.segments, self.by_place, self.pending_in
            sourced: Mapping[SegmentId, int] = self._sourced.get(name) or {}
            draining = name in self.decommissioning
            loaded, holders, loaded_in, active_in = self.loaded[name], self.holders, self.loaded_in, self.active_in
            pairs, touched, mark = self._pairs, self.touched_segments, self.mark_pending
            cached, indexed = name in self.caches, tier in self.tier_indexes
            first_active = ranked.setdefault(tier, [])
            for sid in sids:
                seg = segments.get(sid)
                if seg is None or sid in mine or (name, sid) in by_place or sid in sourced or pending_in.get(sid):
                    flush()
                    first_active = ranked.setdefault(tier, [])
                    self._hold_general(name, sid)
                    continue
                mine.add(sid)
                size = seg.size
                pairs[(name, sid)] = _new_tuple(_Derived, (tier, size, True, None, None, False, draining))
                touched.add(sid)
                mark.add(sid)
                loaded.add(sid)
                self.used_bytes[name] += size
                servers = holders.get(sid)
                if servers is None:
                    holders[sid] = {name}
                else:
                    servers.add(name)
                counts = loaded_in.get(sid)
                if counts is None:
                    counts = loaded_in[sid] = _new_counter(Counter)
                counts[tier] = counts.get(tier, 0) + 1
                if not draining:
                    active = active_in.get(sid)
                    if active is None:
                        active = active_in[sid] = _new_counter(Counter)
                    n = active.get(tier, 0) + 1
                    active[tier] = n
                    if n == 1:
                        first_active.append(sid)
                if cached:  # the pair entered the projection (see _refresh_pair)
                    self._cache_delta.setdefault(name, {})[sid] = True
                if indexed:
                    self._index_delta.setdefault(tier, {})[(name, sid)] = True
        flush()

    def _hold_general(self, name: str, sid: SegmentId) -> None:
        """:meth:`hold` ``(name, sid, True)`` leaving the dirty set as it was."""
        key = ("held", f"{name}\x00{sid}")
        was = key in self.dirty
        self.hold(name, sid, True)
        if not was:
            self.dirty.discard(key)

    def forgettable(self, sid: SegmentId) -> bool:
        """Unused, held by no server (joined or not) and with no command in flight: nothing needs it."""
        return sid not in self.used and not self.in_flight[sid] and not any(
            sid in h for h in self.held.values())

    # -- facts: the queue -------------------------------------------------------------------------
    def enqueue(self, cid: str, item: InFlight) -> None:
        """Put ``item`` in flight under ``cid`` (replacing an item of the same id)."""
        if item.move_id is None and item.action == "load" and self._deferred is None and not self._refreshing \
                and cid not in self.queue and self._enqueue_lone_load(cid, item):
            return
        self._enqueue_general(cid, item)

    def enqueue_load(self, cid: str, item: InFlight) -> None:
        """:meth:`enqueue` of a plain load (no move) under an id nothing holds (a fresh one): its checks written
        out, the fast path tried first."""
        if self._deferred is None and not self._refreshing and self._enqueue_lone_load(cid, item):
            return
        self._enqueue_general(cid, item)

    def _enqueue_general(self, cid: str, item: InFlight) -> None:
        old = self._unindex(cid)
        self.queue[cid] = item
        self.by_place.setdefault((item.server, item.segment), set()).add(cid)
        self._by_server.setdefault(item.server, set()).add(cid)
        self._note_ref(item.server, item.segment)
        if item.move_id is not None:
            self.by_move.setdefault(item.move_id, set()).add(cid)
        self.in_flight[item.segment] += 1
        self.dirty.add(("q", cid))
        if old is not None and (old.server, old.segment) != (item.server, item.segment):
            self._refresh(old.server, old.segment)
        self._refresh(item.server, item.segment)

    def _enqueue_lone_load(self, cid: str, item: InFlight) -> bool:
        """:meth:`enqueue`'s fast path (every load of a full run takes it): a plain load (no move) of a known
        segment to a joined server that neither holds it, nor has anything in flight for it, nor is a move's source
        of it. The pair had no projection, and gets the one :meth:`_derive` gives (a queued plain load), whose
        contribution is written out here (what :meth:`_contribute` adds for it). False, with nothing changed, when
        the pair is not such a one (the general path then runs). It leaves the same indexes, in the same insertion
        order, as the general path (``tests/unit/placement/test_lone_load.py``)."""
        name, sid = item.server, item.segment
        tier = self.tier_of.get(name)
        seg = self.segments.get(sid)
        if tier is None or seg is None:
            return False
        held, sourced = self.held.get(name), self._sourced.get(name)
        if (held is not None and sid in held) or (sourced is not None and sid in sourced):
            return False
        place = (name, sid)
        cids = {cid}
        if self.by_place.setdefault(place, cids) is not cids:
            return False  # something in flight for the pair (setdefault left it as it was)
        # not held, nothing in flight, not a move source: the pair derived nothing, so it has no entry in _pairs
        # the facts (as the general path's bookkeeping; by_place was written just above)
        self.queue[cid] = item
        mine = self._by_server.get(name)
        if mine is None:
            self._by_server[name] = {cid}
        else:
            mine.add(cid)
        in_flight = self.in_flight
        in_flight[sid] = in_flight.get(sid, 0) + 1
        self.dirty.add(("q", cid))
        # the pair's projection and its contribution (as _refresh_pair and _contribute: loading, not loaded)
        self.touched_segments.add(sid)
        self.mark_pending.add(sid)
        purpose = item.purpose
        if purpose != "decommissioning" and purpose != "balancing":
            purpose = "loading"  # _queue_purpose, written out
        queued = _new_queue_item("load", sid, purpose, None, item.source)
        size = seg.size
        self._pairs[place] = _new_tuple(_Derived, (tier, size, False, queued, cid, False, name in self.decommissioning))
        self.loading[name][sid] = queued
        self.queued[name][purpose] += 1
        self.used_bytes[name] += size
        self.loading_bytes[name] += size
        servers = {name}
        pending = self.pending.setdefault(sid, servers)
        if pending is not servers:
            pending.add(name)
        counts = self.pending_in.get(sid)
        if counts is None:
            counts = self.pending_in[sid] = _new_counter(Counter)  # an empty Counter without its Python __init__
        counts[tier] = counts.get(tier, 0) + 1
        loaded = self.loaded_in.get(sid)
        # a replica load (the tier holds a copy) is one more for the throttle (the key is made either way, as there)
        replica_loads = self.replica_loads
        replica_loads[tier] = replica_loads.get(tier, 0) + (1 if loaded and loaded.get(tier, 0) > 0 else 0)
        if name in self.caches:  # the pair entered the projection (see _refresh_pair)
            self._cache_delta.setdefault(name, {})[sid] = True
        if tier in self.tier_indexes:
            self._index_delta.setdefault(tier, {})[place] = True
        return True

    def settle(self, cid: str, segment: str) -> InFlight | None:
        """The command is answered (or withdrawn, or timed out): out of flight, its id known while its segment
        is (``segment``: the segment's id text, unless the command is in flight: then its own segment's) and for
        the window after (:mod:`coordinator.placement.settled`)."""
        item = self._unindex(cid)
        if item is not None:
            segment = str(item.segment)
        if cid not in self.settled:
            self.settled.add(cid)
            self.dirty.add(("ans", cid))
        self.forgotten.discard(cid)
        old = self.settled_seg.get(cid)
        if old != segment:
            if old is not None:
                self._unsettle_seg(cid, old)
            self.settled_seg[cid] = segment
            self.settled_ids.setdefault(segment, set()).add(cid)
        self.settled_for(segment)
        self.dirty.add(("q", cid))
        if item is not None:
            self._refresh(item.server, item.segment)
        return item

    def _unindex(self, cid: str) -> InFlight | None:
        item = self.queue.pop(cid, None)
        if item is None:
            return None
        place = (item.server, item.segment)
        self.by_place[place].discard(cid)
        if not self.by_place[place]:
            del self.by_place[place]
        mine = self._by_server[item.server]
        mine.discard(cid)
        if not mine:
            del self._by_server[item.server]
        if item.move_id is not None:
            self.by_move[item.move_id].discard(cid)
            if not self.by_move[item.move_id]:
                del self.by_move[item.move_id]
        self.in_flight[item.segment] -= 1
        self.released.add(item.segment)
        if not self.in_flight[item.segment]:
            del self.in_flight[item.segment]
        return item

    def _note_ref(self, name: str, sid: SegmentId) -> None:
        if sid not in self.segments:
            self._unknown_refs.setdefault(sid, set()).add(name)

    def queued_at(self, name: str, sid: SegmentId, action: str | None = None) -> list[str]:
        """Ids of the commands in flight for ``sid`` on ``name`` (of ``action`` when given), sorted."""
        return sorted(cid for cid in self.by_place.get((name, sid), ())
                      if action is None or self.queue[cid].action == action)

    def of_move(self, move_id: str) -> list[str]:
        """Ids of the commands in flight of one move (its load and drop halves), sorted."""
        return sorted(self.by_move.get(move_id, ()))

    def settle_matching(self, name: str, sid: SegmentId, action: str) -> None:
        for cid in self.queued_at(name, sid, action):
            self.settle(cid, str(sid))

    def settled_for(self, segment: str) -> None:
        """An id of ``segment`` was settled (the fold adds the window's bookkeeping)."""

    def _unsettle_seg(self, cid: str, segment: str) -> None:
        ids = self.settled_ids[segment]
        ids.discard(cid)
        if not ids:
            del self.settled_ids[segment]

    def forget_settled(self, cid: str) -> None:
        """The id is no longer settled: out of this batch's ids, and the adapter deletes its stored one (an
        adapter that stores none, replay or a historical's view, remembers nothing of it)."""
        self.settled.discard(cid)
        segment = self.settled_seg.pop(cid, None)
        if segment is not None:
            self._unsettle_seg(cid, segment)
        if self.settled_before(cid):
            self.forgotten.add(cid)
        self.dirty.add(("ans", cid))

    def stored_settled(self) -> None:
        """The adapter stored this batch's settled ids and deleted the forgotten ones: both are its now."""
        self.settled.clear()
        self.settled_seg.clear()
        self.settled_ids.clear()
        self.forgotten.clear()

    # -- the projection ----------------------------------------------------------------------------
    def _derive(self, name: str, sid: SegmentId) -> _Derived | None:
        tier = self.tier_of.get(name)
        seg = self.segments.get(sid)
        if tier is None or seg is None:
            return None
        loaded = sid in self.held.get(name, ())
        best: tuple[int, str] | None = None
        for cid in self.by_place.get((name, sid), ()):
            q = self.queue[cid]
            if q.action == "drop" and q.move_id is not None:
                continue  # a move's source half: modelled by the load's ``source``
            if best is None or (q.sent_at, cid) < best:
                best = (q.sent_at, cid)
        item = None
        if best is not None:
            q = self.queue[best[1]]
            action: QueueAction = "load" if q.action == "load" else "drop"
            item = QueueItem(action, sid, _queue_purpose(q.purpose), q.move_id, q.source)
        sourced = self._sourced.get(name)
        move_source = sourced is not None and sourced[sid] > 0
        if not loaded and item is None and not move_source:
            return None
        return _Derived(tier, seg.size, loaded, item, None if best is None else best[1], move_source,
                        name in self.decommissioning)

    def defer_refreshes(self) -> None:
        """From now until :meth:`refresh_deferred`, a pair whose facts change is refreshed once, at the end.
        Only while facts alone are changed (segments, holdings, the queue): nothing in between may read a derived
        index, and servers may not join or leave (their indexes are made and dropped around their refreshes).
        The indexes end the same (each is a sum over pairs of a function of the facts); a pair whose facts
        changed and changed back touches nothing."""
        self._deferred = {}

    def refresh_deferred(self) -> None:
        """Refresh every pair named since :meth:`defer_refreshes`, in the order first named; refreshes are
        immediate again."""
        pairs, self._deferred = self._deferred, None
        for name, sid in pairs or ():
            self._refresh(name, sid)

    def _refresh(self, name: str, sid: SegmentId) -> None:
        """Re-derive one pair and move its contribution in every index (O(1); O(log n) in a built cache), then
        the move sources that changed with it, one whole pair at a time, in the order they were named."""
        if self._deferred is not None:
            self._deferred[(name, sid)] = None
            return
        self._refresh_pair(name, sid)
        if self._refreshing:
            return  # the outer call refreshes the sources this one named
        self._refreshing = True
        try:
            while self._stale_sources:
                self._refresh_pair(*self._stale_sources.pop(0))
        finally:
            self._refreshing = False

    def _refresh_pair(self, name: str, sid: SegmentId) -> None:
        key = (name, sid)
        old = self._pairs.get(key)
        new = self._derive(name, sid)
        if old == new:
            return
        self.touched_segments.add(sid)
        self.mark_pending.add(sid)
        cached = name in self.caches
        was = old is not None and old.projected
        if old is not None:
            self._contribute(name, sid, old, -1)
            del self._pairs[key]
        if new is not None:
            self._pairs[key] = new
            self._contribute(name, sid, new, +1)
        now = new is not None and new.projected
        if was != now:
            if cached:  # applied when the cache is next read (see ``cache``)
                self._cache_delta.setdefault(name, {})[sid] = now
            tier = (new or old).tier  # type: ignore[union-attr]
            if tier in self.tier_indexes:  # applied when the index is next read (see ``tier_index``)
                self._index_delta.setdefault(tier, {})[key] = now

    def _contribute(self, name: str, sid: SegmentId, d: _Derived, sign: int) -> None:
        tier = d.tier
        replica_before = self._replica_part(sid, tier)
        if d.loaded:
            _toggle(self.loaded[name], sid, sign)
            self.used_bytes[name] += sign * d.size
        if d.dropping:
            _toggle(self.dropping[name], sid, sign)
            self.used_bytes[name] -= sign * d.size
        if d.holder:
            _toggle(self.holders.setdefault(sid, set()), name, sign)
            _count(self.loaded_in, sid, tier, sign)
        if d.move_source:
            _toggle(self.move_sources.setdefault(sid, set()), name, sign)
        if d.active_holder:
            active = self.active_in.get(sid)
            if active is None:  # not setdefault(sid, Counter()): that built a Counter on every call
                active = self.active_in[sid] = _new_counter(Counter)
            active[tier] += sign
            if sign > 0 and active[tier] == 1:
                self.balanceable.setdefault(tier, SortedKeyList(key=_ID)).add(sid)
            elif sign < 0 and not active[tier]:
                del active[tier]
                if not active:
                    del self.active_in[sid]
                ranked = self.balanceable[tier]
                ranked.discard(sid)
                if not ranked:
                    del self.balanceable[tier]
        item = d.item
        if item is not None and item.action == "load":
            if sign > 0:
                self.loading[name][sid] = item
            else:
                del self.loading[name][sid]
            self.queued[name][item.purpose] += sign
            self.used_bytes[name] += sign * d.size
            self.loading_bytes[name] += sign * d.size
            if item.move_id is None:
                _toggle(self.pending.setdefault(sid, set()), name, sign)
                _count(self.pending_in, sid, tier, sign)
        for index in (self.holders, self.pending, self.move_sources):
            if sid in index and not index[sid]:
                del index[sid]
        self.replica_loads[tier] += self._replica_part(sid, tier) - replica_before
        if item is not None and item.action == "load" and item.move_id is not None and item.source is not None \
                and item.source != name:  # a move onto its own source moves nothing
            sourced = self._sourced.setdefault(item.source, Counter())
            sourced[sid] += sign
            if not sourced[sid]:
                del sourced[sid]
                if not sourced:
                    del self._sourced[item.source]
            self._stale_sources.append((item.source, sid))  # its move-source flag may have changed

    def _replica_part(self, sid: SegmentId, tier: str) -> int:
        """Plain queued loads of ``sid`` in ``tier`` that count as replica loads (the tier holds a copy)."""
        pending = self.pending_in.get(sid)
        if not pending or not pending[tier] or not self.is_replica(sid, tier):
            return 0
        return pending[tier]


_ID = attrgetter("sort_key")


def _toggle(members: set[str] | set[SegmentId], x: object, sign: int) -> None:
    if sign > 0:
        members.add(x)  # type: ignore[arg-type]
    else:
        members.discard(x)


def _count(index: dict[SegmentId, Counter[str]], sid: SegmentId, tier: str, sign: int) -> None:
    c = index.get(sid)
    if c is None:  # not setdefault(sid, Counter()): that built a Counter (a Python-level __init__) on every call
        c = index[sid] = _new_counter(Counter)
    c[tier] += sign
    if not c[tier]:
        del c[tier]
    if not c:
        del index[sid]


def snapshot(p: Projected) -> dict[str, object]:
    """Facts and every derived index in a plain, comparable form (for tests: incremental == rebuilt)."""

    def sets(d: Mapping[Any, Collection[Any]]) -> dict[str, list[str]]:
        return {str(k): sorted(str(x) for x in v) for k, v in sorted(d.items(), key=lambda kv: str(kv[0])) if v}

    def counters(d: dict[SegmentId, Counter[str]]) -> dict[str, dict[str, int]]:
        return {str(k): dict(sorted((t, n) for t, n in v.items() if n)) for k, v in d.items() if +v}

    return {
        "segments": sorted(str(s) for s in p.segments), "used": sorted(str(s) for s in p.used),
        "servers": {n: f.to_json() for n, f in sorted(p.servers.items())},
        "held": sets({n: h for n, h in p.held.items()}),
        "queue": {c: i.to_json() for c, i in sorted(p.queue.items())},
        "tier_of": dict(sorted(p.tier_of.items())), "tiers": dict(sorted(p.tiers.items())),
        "decommissioning": sorted(p.decommissioning), "active": {t: n for t, n in sorted(p.active.items()) if n},
        "loaded": sets(p.loaded), "dropping": sets(p.dropping),
        "loading": {n: {str(s): q for s, q in sorted(v.items())} for n, v in sorted(p.loading.items()) if v},
        "queued": {n: {k: c for k, c in sorted(v.items()) if c} for n, v in sorted(p.queued.items())},
        "used_bytes": dict(sorted(p.used_bytes.items())), "loading_bytes": dict(sorted(p.loading_bytes.items())),
        "holders": sets(p.holders), "pending": sets(p.pending), "move_sources": sets(p.move_sources),
        "loaded_in": counters(p.loaded_in), "pending_in": counters(p.pending_in),
        "replica_loads": {t: n for t, n in sorted(p.replica_loads.items()) if n},
        "active_in": counters(p.active_in),
        "balanceable": {t: [str(s) for s in ranked] for t, ranked in sorted(p.balanceable.items())},
        "caches": {n: sorted(str(s) for s in p.cache(n).segment_ids()) for n in sorted(p.caches)},
        "projected": {n: [str(s) for s in p.projected_segments(n)] for n in sorted(p.caches)},
    }
