"""Property: Druid's load status read from the placement fold is what an operator would count by hand.

Random histories of joins, leaves, publishes, unused marks, announces, unannounces and rule changes are
folded by ``PlacementState``; the read model must equal a small oracle that replays the same history with
sets: a segment a load rule wants is available when a joined server announced it and has not unannounced
it (an announce by a server that left and has not joined again does not count), and each tier is short of
``wanted - copies on its joined servers``.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

from hypothesis import example, given, settings
from hypothesis import strategies as st

from coordinator.placement.state import PlacementState
from coordinator.readmodel import placement
from events import Envelope, Event, Interval, SegmentDescriptor
from events.cluster import RulesSet, ServerJoined, ServerLeft
from events.segments import SegmentAnnounced, SegmentsMarkedUnused, SegmentsPublished, SegmentUnannounced

DAY = 86_400_000
T0 = 1_795_219_200_000
TIER = {"h0": "hot", "h1": "hot", "h2": "cold", "h3": "cold"}
RULES: list[list[dict[str, Any]]] = [
    [{"type": "loadForever", "tieredReplicants": {"hot": 2, "cold": 1}}],
    [{"type": "loadForever", "tieredReplicants": {"hot": 1}}],
    [{"type": "loadForever", "tieredReplicants": {"cold": 0}}],
    [{"type": "dropForever"}],
]


def seg(d: int, ds: str) -> SegmentDescriptor:
    return SegmentDescriptor(ds, Interval(T0 + d * DAY, T0 + (d + 1) * DAY), "v1", 0, 10)


ops = st.lists(st.one_of(
    st.tuples(st.just("join"), st.sampled_from(sorted(TIER))),
    st.tuples(st.just("leave"), st.sampled_from(sorted(TIER))),
    st.tuples(st.just("publish"), st.integers(0, 4), st.sampled_from(["wiki", "koala"])),
    st.tuples(st.just("unused"), st.integers(0, 4), st.sampled_from(["wiki", "koala"])),
    st.tuples(st.just("announce"), st.sampled_from(sorted(TIER)), st.integers(0, 4),
              st.sampled_from(["wiki", "koala"])),
    st.tuples(st.just("unannounce"), st.sampled_from(sorted(TIER)), st.integers(0, 4),
              st.sampled_from(["wiki", "koala"])),
    st.tuples(st.just("rules"), st.integers(0, len(RULES) - 1), st.sampled_from(["wiki", "koala"])),
), max_size=60)


@settings(max_examples=150, deadline=None)
@given(ops)
@example([("join", "h0"), ("publish", 0, "wiki"), ("leave", "h0"), ("announce", "h0", 0, "wiki"), ("join", "h0")])
def test_load_status_equals_counting_by_hand(history: list[tuple[Any, ...]]) -> None:
    p = PlacementState()
    joined: set[str] = set()
    known: set[str] = set()  # servers that ever joined
    used: set[SegmentDescriptor] = set()
    held: dict[str, set[SegmentDescriptor]] = {s: set() for s in TIER}
    rules: dict[str, list[dict[str, Any]]] = {}
    for n, op in enumerate(history):
        event: Event
        if op[0] == "join":
            event = ServerJoined(server=op[1], tier=TIER[op[1]], max_size_bytes=1000)
            joined.add(op[1])
            known.add(op[1])
        elif op[0] == "leave":
            event = ServerLeft(server=op[1])
            joined.discard(op[1])
        elif op[0] == "publish":
            event = SegmentsPublished(task_id="t", segments=(seg(op[1], op[2]),))
            used.add(seg(op[1], op[2]))
        elif op[0] == "unused":
            event = SegmentsMarkedUnused(segment_ids=(str(seg(op[1], op[2]).id),), reason="")
            used.discard(seg(op[1], op[2]))
        elif op[0] == "announce":
            event = SegmentAnnounced(server=op[1], segment=seg(op[2], op[3]))
            if op[1] in joined or op[1] not in known:  # as in Druid, a server that left re-joins before it announces
                held[op[1]].add(seg(op[2], op[3]))
        elif op[0] == "unannounce":
            event = SegmentUnannounced(server=op[1], segment_id=str(seg(op[2], op[3]).id))
            held[op[1]].discard(seg(op[2], op[3]))
        else:
            event = RulesSet(data_source=op[2], rules=tuple(RULES[op[1]]))
            rules[op[2]] = RULES[op[1]]
        p.evolve(Envelope(event, f"e{n}", T0 + n, "k"))

    simple: Counter[str] = Counter()
    full: dict[str, Counter[str]] = {}
    for s in used:
        chain = rules.get(s.data_source, [{"type": "loadForever", "tieredReplicants": {"_default_tier": 2}}])
        want = {t: k for t, k in chain[0].get("tieredReplicants", {}).items() if k > 0}
        if chain[0]["type"] != "loadForever" or not want:
            continue
        holders = [name for name in joined if s in held[name]]
        simple[s.data_source] += 0 if holders else 1
        for tier, k in want.items():
            copies = sum(1 for name in holders if TIER[name] == tier)
            full.setdefault(tier, Counter())[s.data_source] += max(0, k - copies)
    assert placement.load_status_simple(p, T0) == dict(sorted(simple.items()))
    assert placement.load_status_full(p, T0) == {t: dict(sorted(c.items())) for t, c in sorted(full.items())}
    status = placement.load_status(p, T0)
    assert set(status) == set(simple)
    for ds, pct in status.items():
        wanted = sum(1 for s in used if s.data_source == ds and _wants(rules, s.data_source))
        assert pct == 100.0 * (wanted - simple[ds]) / wanted
    currsize = {row["host"]: row["currSize"] for row in placement.servers_simple(p)}
    assert currsize == {name: 10 * len(held[name]) for name in sorted(joined)}


def _wants(rules: dict[str, list[dict[str, Any]]], ds: str) -> bool:
    chain = rules.get(ds, [{"type": "loadForever", "tieredReplicants": {"_default_tier": 2}}])
    return chain[0]["type"] == "loadForever" and any(k > 0 for k in chain[0]["tieredReplicants"].values())
