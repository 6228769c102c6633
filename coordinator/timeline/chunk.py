"""Within one time chunk (dataSource, interval, version): which partitions serve, wait, or are hidden.

The rules (seed 001's overshadowedSegments / atomicUpdateGroup, made exact):

- **Groups** are the connected components of the atomicUpdateGroup
  declarations; a segment without one is a group of its own. Ids named in a
  declaration but not known (neither used nor online) are members too, so a
  group waits for every partition it was published with.
- A group **lists** the partition ids named in its members' overshadowedSegments,
  other than its own. Edges on a cycle of the group graph are ignored.
- A group is **complete** when all its members are online. It is **servable**
  when complete, or when it lists something and everything it lists is
  servable. An id is servable when its group is, also an id neither used nor
  online that some atomicUpdateGroup declares (the recursion goes through
  partially online groups, not only through offline segments); an id no
  group declares is never servable.
- Visiting groups so that each comes after every group listing one of its ids,
  an id is **hidden** when a group listing it is SERVE, and a group is:
  (1) SERVE if all its non-hidden members are online; else (2) PASS if none of
  its members is hidden, it lists something and everything it lists is
  servable; else (3) SERVE if one of its non-hidden members is online; else
  (4) PASS if none of its members is hidden, SERVE if one is.
- An online segment is overshadowed if hidden, visible if its group is SERVE,
  standby if its group is PASS.

The result is a pure function of the known members and the online set; the
visiting order among unrelated groups does not matter (hiding only flows from
a lister to what it lists).

>>> from events import Interval, SegmentDescriptor
>>> day = Interval.parse("2026-01-01/P1D")
>>> def seg(p, over=(), aug=()):
...     return SegmentDescriptor("ds", day, "v1", p, 1, tuple(over), tuple(aug))
>>> batch = {1: seg(1), 2: seg(2), 3: seg(3)}
>>> compaction = {4: seg(4, (2, 3), (4,)), 5: seg(5)}
>>> second = {6: seg(6, (4, 5), (6, 7)), 7: seg(7, (4, 5), (6, 7)), 8: seg(8)}
>>> members = {**batch, **compaction, **second}
>>> r = resolve_chunk(members, frozenset(members))
>>> sorted(r.visible), sorted(r.hidden & set(members))
([1, 6, 7, 8], [2, 3, 4, 5])
>>> r = resolve_chunk(members, frozenset(members) - {7})
>>> sorted(r.visible), sorted(r.standby)
([1, 4, 5, 8], [6])
"""

from __future__ import annotations

from collections.abc import Mapping, Set
from dataclasses import dataclass, field
from heapq import heappop, heappush

from events.compiled import constructor
from events.segment import SegmentDescriptor

_NONE: frozenset[int] = frozenset()

SERVE = "serve"
PASS = "pass"


@dataclass(frozen=True, slots=True)
class ChunkResolution:
    """The within-chunk verdict: ``visible``/``standby``/``overshadowed`` hold online partitions only;
    ``hidden`` holds every hidden id (online, offline or unknown)."""

    visible: frozenset[int]
    standby: frozenset[int]
    overshadowed: frozenset[int]
    hidden: frozenset[int]


def _groups(members: Mapping[int, SegmentDescriptor]) -> dict[int, int]:
    """Partition id -> representative (smallest id) of its atomic update group (union-find)."""
    parent: dict[int, int] = {}

    def find(x: int) -> int:
        root = x
        while parent.setdefault(root, root) != root:
            root = parent[root]
        while parent[x] != root:
            parent[x], x = root, parent[x]
        return root

    # Declarations already joined (members of a group repeat theirs): by identity first (the list form of a Druid
    # generation shares one tuple; hashing it per member would cost its length each time), then by value.
    same: set[int] = set()
    joined: set[tuple[int, ...]] = set()
    for pid in sorted(members):
        find(pid)
        group = members[pid].atomic_update_group
        if id(group) in same or group in joined:  # its ids are one set already: join pid to it
            others: tuple[int, ...] = group[:1]
        else:
            same.add(id(group))
            joined.add(group)
            others = group
        for other in others:
            a, b = find(pid), find(other)
            if a != b:
                parent[max(a, b)] = min(a, b)
    return {x: find(x) for x in list(parent)}


def _strongly_connected(nodes: list[int], edges: Mapping[int, Set[int]]) -> dict[int, int]:
    """Node -> component id (Tarjan, iterative so long compaction chains need no recursion)."""
    index: dict[int, int] = {}
    low: dict[int, int] = {}
    comp: dict[int, int] = {}
    stack: list[int] = []
    on_stack: set[int] = set()
    counter = 0
    for root in nodes:
        if root in index:
            continue
        work = [(root, iter(sorted(edges.get(root, ()))))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            advanced = False
            for child in children:
                if child not in index:
                    index[child] = low[child] = counter
                    counter += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(edges.get(child, ())))))
                    advanced = True
                    break
                if child in on_stack:
                    low[node] = min(low[node], index[child])
            if advanced:
                continue
            work.pop()
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[node])
            if low[node] == index[node]:
                while True:
                    top = stack.pop()
                    on_stack.discard(top)
                    comp[top] = node
                    if top == node:
                        break
    return comp


@dataclass(frozen=True, slots=True)
class ChunkStructure:
    """What the rules derive from the members alone (not from who is online), shared by same-shape chunks.

    ``order`` lists group representatives with every lister before what it
    lists; ``lists`` are the listings with cycle edges removed. A structure is
    *plain* when no member declares anything: every group is a single segment
    listing nothing, so the visible segments are exactly the online ones.
    """

    plain: bool
    core: int  # declared core partitions (NumberedShardSpec ``partitions``), 0 when none
    group_of: Mapping[int, int]
    group_members: Mapping[int, frozenset[int]]
    lists: Mapping[int, frozenset[int]]
    order: tuple[int, ...]
    known: frozenset[int]
    #: The distinct groups of what each group lists (None when it lists nothing or an id no group declares: such
    #: a group is never servable through its listings). Derived from the fields above.
    via: Mapping[int, tuple[int, ...] | None] = field(default_factory=dict, compare=False, repr=False)
    #: Verdicts already computed, by online set (a pure function of it; bounded, see resolve_structure).
    memo: dict[frozenset[int], ChunkResolution] = field(default_factory=dict, compare=False, repr=False)
    #: The timeline's form of the same memo: online members as a bit mask over the chunk's member slots (slot i is
    #: the i-th smallest partition id, the same in every chunk sharing this structure) -> (verdict, visible mask,
    #: overshadowed mask). Bounded like ``memo``.
    masks: dict[int, tuple[ChunkResolution, int, int]] = field(default_factory=dict, compare=False, repr=False)


def chunk_structure(members: Mapping[int, SegmentDescriptor]) -> ChunkStructure:
    """Groups, listings (cycle edges dropped) and a lister-first order for the chunk's known members."""
    core = max((m.core_partitions for m in members.values()), default=0)
    if all(not m.overshadowed_segments and set(m.atomic_update_group) <= {p} for p, m in members.items()):
        return ChunkStructure(True, core, {}, {}, {}, (), frozenset(members))
    group_of = _groups(members)
    group_members: dict[int, list[int]] = {}
    for pid in sorted(group_of):
        group_members.setdefault(group_of[pid], []).append(pid)
    groups = sorted(group_members)

    raw_lists: dict[int, set[int]] = {g: set() for g in groups}
    added: set[tuple[int, tuple[int, ...]]] = set()  # (group, list) already added: a group's members repeat theirs
    for pid, seg in members.items():
        g = group_of[pid]
        over = seg.overshadowed_segments
        if over and (g, over) not in added:
            added.add((g, over))
            raw_lists[g].update(over)
    for g, raw in raw_lists.items():
        raw.difference_update(group_members[g])
    edges = {g: {group_of[x] for x in raw_lists[g] if x in group_of} for g in groups}
    order = _lister_first(groups, edges)
    if len(order) == len(groups):  # no cycle: no edge to drop (the common case; Tarjan only when needed)
        lists: dict[int, frozenset[int]] = {g: frozenset(raw_lists[g]) for g in groups}
    else:
        comp = _strongly_connected(groups, edges)
        lists = {
            g: frozenset(x for x in raw_lists[g] if x not in group_of or comp[group_of[x]] != comp[g])
            for g in groups
        }
        order = _lister_first(groups, {g: {group_of[x] for x in lists[g] if x in group_of} for g in groups})
    via: dict[int, tuple[int, ...] | None] = {}
    for g in groups:
        listed = lists[g]
        via[g] = tuple(sorted({group_of[x] for x in listed})) if listed and all(x in group_of for x in listed) \
            else None
    return ChunkStructure(
        False, core, group_of, {g: _member_set(m) for g, m in group_members.items()}, lists, tuple(order),
        frozenset(members), via=via,
    )


def _lister_first(groups: list[int], dag: Mapping[int, Set[int]]) -> list[int]:
    """Every lister before what it lists (Kahn, smallest representative first); shorter than ``groups`` when the
    graph has a cycle (its groups are left out)."""
    indegree = dict.fromkeys(groups, 0)
    for g in groups:
        for h in dag[g]:
            indegree[h] += 1
    ready = sorted(g for g in groups if indegree[g] == 0)  # a heap: the smallest ready representative first
    order: list[int] = []
    while ready:
        g = heappop(ready)
        order.append(g)
        for h in dag[g]:
            indegree[h] -= 1
            if indegree[h] == 0:
                heappush(ready, h)
    return order


_SHARED: dict[tuple[int, tuple[tuple[int, tuple[int, ...], tuple[int, ...]], ...]], ChunkStructure] = {}
_SHARED_MAX = 4096
#: Chunks of more members get a structure of their own: the cache holds at most 4,096 x 64 members' worth, and a
#: chunk grown one member at a time (hostile input: docs/security.md) leaves no trail of its past shapes in it.
_SHARED_MEMBERS_MAX = 64


def shared_structure(members: Mapping[int, SegmentDescriptor]) -> ChunkStructure:
    """:func:`chunk_structure`, one object for every chunk whose members declare the same things.

    A structure (and its memo of verdicts, a pure function of the online set) depends only on the partition ids,
    their declarations and the core partition count, so chunks of the same shape (every compacted hour of a data
    source) share one: built once, and a verdict found for one chunk answers the others. The cache is bounded
    (cleared when full, chunks of at most 64 members); what it returns never depends on what it holds.
    """
    plain = True
    for p, m in members.items():
        if m.overshadowed_segments or (m.atomic_update_group and set(m.atomic_update_group) != {p}):
            plain = False
            break
    if plain or len(members) > _SHARED_MEMBERS_MAX:  # nothing to share but the known ids; or too big to keep
        return chunk_structure(members)
    core = max(m.core_partitions for m in members.values())
    shape = (core, tuple(sorted((p, m.overshadowed_segments, m.atomic_update_group) for p, m in members.items())))
    found = _SHARED.get(shape)
    if found is None:
        found = chunk_structure(members)
        if len(_SHARED) >= _SHARED_MAX:
            _SHARED.clear()
        _SHARED[shape] = found
    return found


_SINGLES = [frozenset((p,)) for p in range(1024)]  # shared: most groups are one low partition id


def _member_set(members: list[int]) -> frozenset[int]:
    if len(members) == 1 and 0 <= members[0] < len(_SINGLES):
        return _SINGLES[members[0]]
    return frozenset(members)


def resolve_chunk(members: Mapping[int, SegmentDescriptor], online: Set[int]) -> ChunkResolution:
    """Apply the rules of the module docstring to the known segments of one chunk.

    ``members`` maps partition id -> descriptor for every used or online segment
    of the chunk; ``online`` holds the partition ids announced by a server.
    """
    return resolve_structure(chunk_structure(members), online)


def resolve_structure(structure: ChunkStructure, online: Set[int]) -> ChunkResolution:
    """The verdict for one online set, given the chunk's cached structure."""
    if structure.plain:
        return _resolution(structure.known.intersection(online), _NONE, _NONE, _NONE)
    key = frozenset(online)
    memo = structure.memo
    found = memo.get(key)
    if found is None:
        found = _resolve_groups(structure, online)
        if len(memo) >= _MEMO_MAX:
            memo.clear()
        memo[key] = found
    return found


_MEMO_MAX = 16  # a chunk of 9 partitions with one of them offline at a time: 10 online sets
_resolution = constructor(ChunkResolution)  # no __init__: a frozen dataclass's stores its fields one by one


def _resolve_groups(structure: ChunkStructure, online: Set[int]) -> ChunkResolution:
    """The module docstring's rules, with set operations (run in C) where the rules quantify over members."""
    group_sets, via, order, lists = structure.group_members, structure.via, structure.order, structure.lists
    servable: set[int] = set()
    by_listings: set[int] = set()  # groups that list something, everything they list servable
    for g in reversed(order):  # listed groups before their listers
        listed_groups = via[g]
        if listed_groups is not None and servable.issuperset(listed_groups):
            by_listings.add(g)
            servable.add(g)
        elif online >= group_sets[g]:
            servable.add(g)

    hidden: set[int] = set()
    serving: set[int] = set()  # members of SERVE groups
    for g in order:
        mem = group_sets[g]
        if hidden and not hidden.isdisjoint(mem):
            serve = True  # rules (1) to (4) with a hidden member: SERVE whoever is online
        elif online >= mem:
            serve = True
        elif g in by_listings:
            serve = False
        else:
            serve = not online.isdisjoint(mem)
        if serve:
            serving |= mem
            hidden |= lists[g]

    shown = structure.known & online
    overshadowed = shown & hidden
    if overshadowed:
        shown = shown - overshadowed
    visible = shown & serving
    return _resolution(visible, shown - visible if len(visible) < len(shown) else _NONE, overshadowed,
                       frozenset(hidden))
