"""A small, slow, separate statement of the timeline rules: the property tests compare against it.

Written from the issue's text, not from coordinator/timeline: sets and
recursion for the within-chunk rules, elementary time pieces for the
cross-version rules.
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping

from events import Interval, SegmentDescriptor, SegmentId


def chunk_verdicts(members: Mapping[int, SegmentDescriptor], online: set[int]) -> tuple[dict[int, str], set[int]]:
    """(state of each online member: visible/standby/overshadowed, hidden ids)."""
    # groups: connected components over atomicUpdateGroup declarations
    adj: dict[int, set[int]] = {}
    for p, seg in members.items():
        adj.setdefault(p, set())
        for q in seg.atomic_update_group:
            adj.setdefault(q, set())
            adj[p].add(q)
            adj[q].add(p)
    group_of: dict[int, frozenset[int]] = {}
    for start in adj:
        if start in group_of:
            continue
        comp, todo = {start}, [start]
        while todo:
            for nxt in adj[todo.pop()]:
                if nxt not in comp:
                    comp.add(nxt)
                    todo.append(nxt)
        for x in comp:
            group_of[x] = frozenset(comp)
    groups = set(group_of.values())
    raw = {g: {x for p in g if p in members for x in members[p].overshadowed_segments} - g for g in groups}

    def reaches(a: frozenset[int], b: frozenset[int]) -> bool:
        seen, todo = {a}, [a]
        while todo:
            g = todo.pop()
            if g == b:
                return True
            for x in raw[g]:
                h = group_of.get(x)
                if h is not None and h not in seen:
                    seen.add(h)
                    todo.append(h)
        return False

    lists = {g: {x for x in raw[g] if x not in group_of or not reaches(group_of[x], g)} for g in groups}

    memo: dict[frozenset[int], bool] = {}

    def servable(g: frozenset[int]) -> bool:
        if g not in memo:
            memo[g] = all(m in online for m in g) or (
                bool(lists[g]) and all(x in group_of and servable(group_of[x]) for x in lists[g]))
        return memo[g]

    hidden: set[int] = set()
    status: dict[frozenset[int], str] = {}
    while len(status) < len(groups):
        ready = [g for g in groups if g not in status
                 and all(h in status for h in groups if h != g and any(x in g for x in lists[h]))]
        g = ready[0]
        nh = [m for m in g if m not in hidden]
        some_hidden = len(nh) < len(g)
        if all(m in online for m in nh):
            st = "serve"
        elif not some_hidden and lists[g] and all(x in group_of and servable(group_of[x]) for x in lists[g]):
            st = "pass"
        elif any(m in online for m in nh):
            st = "serve"
        else:
            st = "serve" if some_hidden else "pass"
        status[g] = st
        if st == "serve":
            hidden |= lists[g]
    out = {}
    for p in members:
        if p in online:
            out[p] = "overshadowed" if p in hidden else ("visible" if status[group_of[p]] == "serve" else "standby")
    return out, hidden


def timeline_states(
    used: Mapping[SegmentId, SegmentDescriptor], online: Mapping[SegmentId, SegmentDescriptor]
) -> tuple[dict[SegmentId, str], list[tuple[Interval, tuple[Interval, str]]], list[SegmentId]]:
    """(state of every used segment, served pieces with their chunk, overshadowed used ids).

    Only used segments take part: an online segment that is not used has no state and serves nothing."""
    known = dict(used)
    chunks: dict[tuple[Interval, str], dict[int, SegmentDescriptor]] = {}
    for sid, seg in known.items():
        chunks.setdefault((sid.interval, sid.version), {})[sid.partition_id] = seg
    local: dict[tuple[Interval, str], tuple[dict[int, str], set[int]]] = {}
    complete: dict[tuple[Interval, str], bool] = {}
    for key, members in chunks.items():
        on = {p for p, s in members.items() if s.id in online}
        local[key] = chunk_verdicts(members, on)
        core = max((s.core_partitions for s in members.values()), default=0)
        has_visible = "visible" in local[key][0].values()
        complete[key] = has_visible and all(p in on for p in range(core))
    candidate = {k: "visible" in local[k][0].values() for k in chunks}

    def rank(key: tuple[Interval, str]) -> tuple[str, Interval]:
        return (key[1], key[0])

    bounds = sorted({b for (iv, _v) in chunks for b in (iv.start, iv.end)})
    served: dict[tuple[Interval, str], list[Interval]] = {k: [] for k in chunks}
    hidden_by_higher: dict[tuple[Interval, str], bool] = dict.fromkeys(chunks, True)
    pieces: list[tuple[Interval, tuple[Interval, str]]] = []
    for a, b in itertools.pairwise(bounds):
        here = [k for k in chunks if k[0].start <= a and b <= k[0].end]
        comp = [k for k in here if complete[k]]
        for k in here:
            if not any(complete[o] and rank(o) > rank(k) for o in here):
                hidden_by_higher[k] = False
        pool = comp or [k for k in here if candidate[k]]
        if pool:
            best = max(pool, key=rank)
            served[best].append(Interval(a, b))
            if pieces and pieces[-1][1] == best and pieces[-1][0].end == a:
                pieces[-1] = (Interval(pieces[-1][0].start, b), best)
            else:
                pieces.append((Interval(a, b), best))
    states: dict[SegmentId, str] = {}
    over_used: list[SegmentId] = []
    for key, members in chunks.items():
        verdicts, hidden = local[key]
        for p, seg in members.items():
            sid = seg.id
            if sid in used and (hidden_by_higher[key] or p in hidden):
                over_used.append(sid)
            if sid not in online:
                states[sid] = "offline"
            elif hidden_by_higher[key] or verdicts[p] == "overshadowed":
                states[sid] = "overshadowed"
            elif verdicts[p] == "visible" and served[key]:
                states[sid] = "visible"
            else:
                states[sid] = "standby"
    return states, pieces, sorted(over_used)
