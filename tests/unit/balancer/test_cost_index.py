"""The cluster-wide cost index against the brute-force sum of every server, under adds, removes and any alignment."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from coordinator.balancer import cost_index
from coordinator.balancer.cost import CostModel
from coordinator.balancer.cost_cache import ServerCostCache
from coordinator.balancer.cost_index import ClusterCostIndex, _DecayedSums, _Ranking
from coordinator.balancer.server_costs import ServerSegments
from events import ETERNITY, Interval, SegmentDescriptor
from events.segment import SegmentId
from tests.unit.balancer.test_cost_cache import DAY, LENGTHS, T0, _close, _mixed

SERVERS = ["h0", "h1", "h2", "h3"]


def _brute(placement: dict[str, list[SegmentDescriptor]], model: CostModel | None = None) -> dict[str, ServerSegments]:
    out = {}
    for name, segments in placement.items():
        out[name] = ServerSegments(model)
        for s in segments:
            out[name].add(s)
    return out


def _agree(index: ClusterCostIndex, brute: dict[str, ServerSegments], probe: SegmentDescriptor) -> None:
    ours = index.costs_of(probe).tolist()
    refs = [brute[name].cost_of(probe) if name in brute else 0.0 for name in index.servers]
    assert all(_close(a, b) for a, b in zip(ours, refs, strict=True)), (probe, ours, refs)


def test_agrees_with_brute_force_on_mixed_granularities() -> None:
    """Hour/day/month aligned, unaligned 1 ms .. 10 years, "all time", 1970 .. 2200, five servers."""
    segments = _mixed(4000, seed=31)
    owners = np.random.default_rng(32).integers(0, 5, len(segments)).tolist()
    placement = {f"s{k}": [s for s, o in zip(segments, owners, strict=True) if o == k] for k in range(5)}
    index, brute = ClusterCostIndex.build(placement), _brute(placement)
    for probe in [*segments[::23], SegmentDescriptor("new", ETERNITY, "v"),
                  SegmentDescriptor("ds1", Interval(T0, T0 + 1), "v")]:
        _agree(index, brute, probe)


def test_the_model_is_honoured() -> None:
    segments = _mixed(500, seed=41)
    model = CostModel(half_life_hours=6.0, same_source_factor=3.0)
    placement = {"a": segments[::2], "b": segments[1::2]}
    index, brute = ClusterCostIndex.build(placement, model), _brute(placement, model)
    for probe in segments[::17]:
        _agree(index, brute, probe)


_lengths = st.one_of(st.sampled_from(LENGTHS), st.integers(1, 3 * DAY))
_segment = st.builds(
    lambda ds, off, length, v: SegmentDescriptor(f"ds{ds}", Interval(T0 + off, T0 + off + length), f"v{v}"),
    st.integers(0, 2), st.integers(-200 * DAY, 200 * DAY), _lengths, st.integers(0, 3))


@settings(max_examples=150, deadline=None)
@given(st.lists(st.tuples(st.sampled_from(SERVERS), st.booleans(), _segment), min_size=1, max_size=40),
       st.integers(0, 40), _segment)
def test_any_history_of_adds_and_removes(history: list[tuple[str, bool, SegmentDescriptor]], built_after: int,
                                         probe: SegmentDescriptor) -> None:
    """The index built in bulk from a history's first part, then updated through its delta, always agrees."""
    placement: dict[str, dict[SegmentId, SegmentDescriptor]] = {name: {} for name in SERVERS}
    index: ClusterCostIndex | None = None
    for step, (server, remove, s) in enumerate(history):
        if step == built_after:
            index = ClusterCostIndex.build({n: list(v.values()) for n, v in placement.items()})
        if remove and s.id in placement[server]:
            del placement[server][s.id]
            if index is not None:
                index.remove(server, s.id)
        else:
            placement[server].setdefault(s.id, s)
            if index is not None:
                index.add(server, s)
        if index is not None:
            brute = _brute({n: list(v.values()) for n, v in placement.items()})
            _agree(index, brute, probe)
            assert all(index.holds(n, sid) for n, v in placement.items() for sid in v)
            assert len(index) == sum(len(v) for v in placement.values())


def test_a_cancelling_delta_is_recomputed_exactly() -> None:
    """Removing every segment near the probe leaves only a far one, 1e-18 of what was removed: the guard sums
    that server again rather than trusting a difference of two large sums (which would be off by ~1e-4)."""
    near = [SegmentDescriptor("ds", Interval(T0 + i * 1000, T0 + i * 1000 + 999), f"v{i}") for i in range(500)]
    far = SegmentDescriptor("ds", Interval(T0 + 60 * DAY, T0 + 60 * DAY + 1000), "far")
    index = ClusterCostIndex.build({"a": [*near, far], "b": near})
    for s in near:
        index.remove("a", s.id)
    probe = SegmentDescriptor("ds", Interval(T0 - 1000, T0 - 1), "probe")
    _agree(index, _brute({"a": [far], "b": near}), probe)


def test_the_delta_is_folded_into_a_rebuild() -> None:
    """2900 adds onto 100 rows, no query in between: the delta is rebuilt each time it outgrows the index (it
    doubles at most), never held past that."""
    segments = _mixed(3000, seed=51)
    index = ClusterCostIndex.build({"a": segments[:100], "b": []})
    for s in segments[100:]:
        index.add("b", s)
        assert index.delta_size() <= cost_index.index_rebuild_size(index.static_rows)
    assert len(index) == 3000 and index.static_rows > 100  # folded into a rebuild on the way
    _agree(index, _brute({"a": segments[:100], "b": segments[100:]}), segments[7])


def test_queries_pay_for_a_rebuild(monkeypatch: pytest.MonkeyPatch) -> None:
    """A small delta stays while the queries' delta work is less than REBUILD_QUERY_WORK rows per row of the
    index, and the query that passes it rebuilds (its answer, and every later one, still exact); a delta no
    query reads is never rebuilt below the doubling bound."""
    monkeypatch.setattr(cost_index, "REBUILD_QUERY_WORK", 2)
    segments = _mixed(1100, seed=52)
    index = ClusterCostIndex.build({"a": segments[:600], "b": segments[600:1000]})
    for s in segments[1000:]:
        index.add("a", s)
    index.remove("b", segments[600].id)
    placement = {"a": [*segments[:600], *segments[1000:]], "b": segments[601:1000]}
    assert index.delta_size() == 101 and index.static_rows == 1000
    brute = _brute(placement)
    queries = 0
    while index.delta_size():
        _agree(index, brute, segments[queries % 1100])
        queries += 1
        assert queries < 100
    assert queries == 2 * 1100 // 101 + 1  # 2 x (1000 + 100) rows of work at 101 delta rows a query
    assert index.static_rows == len(index) == 1099
    _agree(index, brute, segments[3])


def test_a_pair_named_twice_in_an_update_changes_once() -> None:
    """A static pair removed twice in one update is subtracted once (no other segment of the server cancels),
    an added pair named twice is one row, and a pair both removed and added is held."""
    near = [SegmentDescriptor("ds", Interval(T0 + i * 1000, T0 + i * 1000 + 999), f"v{i}") for i in range(50)]
    index = ClusterCostIndex.build({"a": near, "b": near[:10]})
    extra = SegmentDescriptor("ds", Interval(T0 - 5000, T0 - 4000), "x")
    index.update(added=[("b", extra), ("b", extra), ("a", near[3])], removed=[("a", near[3].id), ("a", near[7].id),
                                                                              ("a", near[7].id)])
    assert index.delta_size() == 4 and len(index) == 60  # 2 static rows out (one back in the delta), 2 rows in
    held = [s for s in near if s is not near[7]]
    brute = _brute({"a": held, "b": [*near[:10], extra]})
    for probe in near[::5]:
        _agree(index, brute, probe)


_POOL = _mixed(8, seed=53)
_change = st.tuples(st.sampled_from([*SERVERS, "h7"]), st.booleans(),
                    st.one_of(st.sampled_from(_POOL), _segment))  # a small pool: pairs named again


@settings(max_examples=150, deadline=None)
@given(st.lists(st.lists(_change, max_size=12), min_size=2, max_size=6), _segment)
def test_a_bulk_update_is_the_changes_one_by_one(batches: list[list[tuple[str, bool, SegmentDescriptor]]],
                                                  probe: SegmentDescriptor) -> None:
    """The index built from a first batch's adds, then batches of changes (duplicates, removes of pairs not held,
    of static and of added rows, a server and data sources first seen) given to ``update`` (removes, then adds)
    hold the pairs that remove and add one by one hold, and costs stay exact."""
    placement: dict[str, dict[SegmentId, SegmentDescriptor]] = {name: {} for name in SERVERS}
    for server, _, s in batches[0]:
        placement.setdefault(server, {}).setdefault(s.id, s)
    index = ClusterCostIndex.build({n: list(v.values()) for n, v in placement.items()})
    one_by_one = ClusterCostIndex.build({n: list(v.values()) for n, v in placement.items()})
    for batch in batches[1:]:
        removed = [(server, s.id) for server, remove, s in batch if remove]
        added = [(server, s) for server, remove, s in batch if not remove]
        index.update(added=added, removed=removed)
        for server, sid in removed:
            one_by_one.remove(server, sid)
            placement.get(server, {}).pop(sid, None)
        for server, s in added:
            one_by_one.add(server, s)
            placement.setdefault(server, {}).setdefault(s.id, s)
        held = {(n, sid) for n, v in placement.items() for sid in v}
        assert len(index) == len(one_by_one) == len(held)
        assert all(index.holds(n, sid) for n, sid in held)
        brute = _brute({n: list(v.values()) for n, v in placement.items()})
        for p in [probe, *_POOL]:
            _agree(index, brute, p)


def test_cheapest_agrees_with_the_per_server_caches() -> None:
    segments = _mixed(2000, seed=61)
    owners = np.random.default_rng(62).integers(0, 6, len(segments)).tolist()
    placement = {f"s{k}": [s for s, o in zip(segments, owners, strict=True) if o == k] for k in range(6)}
    caches = {}
    for name, held in placement.items():
        caches[name] = ServerCostCache()
        caches[name].extend(held)
    index = ClusterCostIndex.build(placement)
    for probe in segments[::41]:
        expected = min(sorted(caches), key=lambda n: caches[n].cost_of(probe))
        assert index.cheapest(probe) == expected
        assert index.cheapest(probe, ["s2", "s4"]) == min(["s2", "s4"], key=lambda n: caches[n].cost_of(probe))
    assert index.cheapest(segments[0], []) is None


@pytest.mark.parametrize("every", [1, 7, 1024])
def test_the_decayed_sums_match_their_definition(monkeypatch: pytest.MonkeyPatch, every: int) -> None:
    """Per group and lane, at any q (below, between and above the points, on a point): the table rows (every
    ``every`` points of a group), decayed, plus the tail after the last row, equal the sum over the points."""
    monkeypatch.setattr(cost_index, "CHECKPOINT_EVERY", every)
    n, n_groups, n_lanes = 3000, 4, 5
    rng = np.random.default_rng(71)
    groups = rng.integers(0, n_groups - 1, n).astype(np.int64)  # the last group stays empty
    lanes = rng.integers(0, n_lanes, n).astype(np.int64)
    ys = rng.integers(-10**10, 10**10, n).astype(np.int64)
    ys[::5] = ys[1::5]  # ties
    w, k = rng.random(n), 3e-9
    sums = _DecayedSums(groups, lanes, ys, w, k, _Ranking(ys).by_lane(groups), n_groups, n_lanes)
    for q in [int(v) for v in rng.choice(ys, 40)] + [-10**11, 10**11, 0]:
        for g in range(n_groups):
            got = sums.at(g, q)
            for lane in range(n_lanes):
                same = (groups == g) & (lanes == lane) & (ys <= q)
                ref = float(np.sum(w[same] * np.exp(-k * (q - ys[same]).astype(np.float64))))
                assert got[lane] == pytest.approx(ref, rel=1e-13, abs=1e-300), (g, lane, q)


@pytest.mark.parametrize(("every", "entries"), [(1, 1 << 22), (3, 1 << 22), (64, 1 << 22), (1, 500)])
def test_agrees_with_brute_force_with_short_table_rows(monkeypatch: pytest.MonkeyPatch, every: int,
                                                       entries: int) -> None:
    """The decayed sums' table rows come every few points, so the row + tail path is taken at these sizes (and,
    with a table capped at 500 entries, rows come every 6000 x 4 / 500 = 48 points instead of every one)."""
    monkeypatch.setattr(cost_index, "CHECKPOINT_EVERY", every)
    monkeypatch.setattr(cost_index, "TABLE_ENTRIES", entries)
    segments = _mixed(3000, seed=33)
    owners = np.random.default_rng(34).integers(0, 4, len(segments)).tolist()
    placement = {f"s{k}": [s for s, o in zip(segments, owners, strict=True) if o == k] for k in range(4)}
    index, brute = ClusterCostIndex.build(placement), _brute(placement)
    for probe in [*segments[::37], SegmentDescriptor("new", ETERNITY, "v"),
                  SegmentDescriptor("ds1", Interval(T0, T0 + 1), "v")]:
        _agree(index, brute, probe)



def test_errors_name_the_problem() -> None:
    one = np.array([0], np.int64)
    seg = SegmentDescriptor("ds", Interval(T0, T0 + 1), "v")
    with pytest.raises(ValueError, match="differ in length"):
        ClusterCostIndex(["a"], one, one + 1, one, one, ["ds"], [])
    with pytest.raises(ValueError, match="row 0 has an empty interval"):
        ClusterCostIndex(["a"], one, one, one, one, ["ds"], [seg])


def test_rebuilds_under_churn_keep_the_delta_exact(monkeypatch: pytest.MonkeyPatch) -> None:
    """Many rebuilds (a delta of 8 rows), with removes of added and of static rows, a server and data sources
    first seen in an update: after every step each server's cost equals the brute-force sum, and holds() is
    exactly the placement."""
    import coordinator.balancer.cost_index as module
    monkeypatch.setattr(module, "REBUILD_BASE", 8)
    monkeypatch.setattr(module, "REBUILD_QUERY_WORK", 1)  # the queries below rebuild too
    rng = np.random.default_rng(81)
    segments = _mixed(300, seed=82)
    names = ["h0", "h1", "h2", "h9"]
    placement: dict[str, dict[SegmentId, SegmentDescriptor]] = {name: {} for name in names}
    for s in segments[:60]:
        placement[names[int(rng.integers(0, 3))]][s.id] = s
    index = ClusterCostIndex.build({n: list(v.values()) for n, v in placement.items() if n != "h9"})
    for step in range(400):
        name = names[int(rng.integers(0, 4))]
        s = segments[int(rng.integers(0, len(segments)))]
        if step % 7 == 0:
            s = SegmentDescriptor(f"new{step}", s.interval, s.version)
        if s.id in placement[name] and rng.random() < 0.7:
            del placement[name][s.id]
            index.remove(name, s.id)
        else:
            placement[name][s.id] = s
            index.add(name, s)
        if step % 9 == 0:
            _agree(index, _brute({n: list(v.values()) for n, v in placement.items()}), segments[step % 300])
        assert len(index) == sum(len(v) for v in placement.values())
    assert all(index.holds(n, sid) for n, v in placement.items() for sid in v)
    assert index.servers == tuple(names)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.sampled_from([*SERVERS, "h9"]), st.booleans(), _segment), min_size=1, max_size=60),
       st.integers(0, 60), st.integers(0, 60), _segment)
def test_a_rebuild_built_elsewhere_and_adopted_holds_what_the_index_held(
        history: list[tuple[str, bool, SegmentDescriptor]], begun_at: int, adopted_at: int,
        probe: SegmentDescriptor) -> None:
    """With deferred rebuilds, a rebuild that pays is only noted; begun at one step, built from what it took
    (as on another thread) and adopted later, after more adds and removes (a server new to the index among them):
    the index then holds exactly the pairs and agrees with brute force, as if it had never been rebuilt."""
    placement: dict[str, dict[SegmentId, SegmentDescriptor]] = {name: {} for name in SERVERS}
    index = ClusterCostIndex.build({n: [] for n in SERVERS})
    index.deferred_rebuilds = True
    inputs = None
    for step, (server, remove, s) in enumerate(history):
        if step == begun_at:
            inputs = index.begin_rebuild()
        if step == adopted_at and inputs is not None:
            index.adopt(cost_index.build_index(inputs))
            inputs = None
        held = placement.setdefault(server, {})
        if remove and s.id in held:
            del held[s.id]
            index.update(removed=[(server, s.id)]) if step % 2 else index.remove(server, s.id)
        else:
            held.setdefault(s.id, s)
            index.update(added=[(server, s)]) if step % 2 else index.add(server, s)
    if inputs is not None:
        index.adopt(cost_index.build_index(inputs))
    assert not index.rebuilding and index.deferred_rebuilds
    _agree(index, _brute({n: list(v.values()) for n, v in placement.items()}), probe)
    assert all(index.holds(n, sid) for n, v in placement.items() for sid in v)
    assert len(index) == sum(len(v) for v in placement.values())


def test_a_deferred_rebuild_is_noted_not_done_and_adopting_one_not_begun_is_refused() -> None:
    segments = _mixed(1400, seed=53)  # 1300 adds onto 100 rows: past index_rebuild_size(100) = 1124
    index = ClusterCostIndex.build({"a": segments[:100], "b": []})
    index.deferred_rebuilds = True
    for s in segments[100:]:
        index.add("b", s)
    assert index.static_rows == 100 and index.rebuild_due  # outgrown, not rebuilt
    inputs = index.begin_rebuild()
    assert not index.rebuild_due and index.rebuilding
    index.remove("a", segments[0].id)
    index.adopt(cost_index.build_index(inputs))
    assert index.static_rows == 1400 and index.delta_size() == 1 and len(index) == 1399
    _agree(index, _brute({"a": segments[1:100], "b": segments[100:]}), segments[7])
    with pytest.raises(ValueError, match="begin_rebuild"):
        index.adopt(cost_index.build_index(inputs))


def test_with_deferred_rebuilds_one_is_due_once_the_delta_holds_a_tenth_of_the_index() -> None:
    segments = _mixed(13000, seed=57)
    index = ClusterCostIndex.build({"a": segments[:10000], "b": []})
    index.deferred_rebuilds = True
    limit = int(cost_index.DEFERRED_REBUILD_SHARE * 10000) + cost_index.REBUILD_BASE
    for s in segments[10000:10000 + limit]:
        index.add("b", s)
    assert not index.rebuild_due  # (a delta of 2024 rows on 10000: not yet)
    index.add("b", segments[10000 + limit])
    assert index.rebuild_due and index.static_rows == 10000
    synchronous = ClusterCostIndex.build({"a": segments[:10000], "b": []})
    for s in segments[10000:10000 + limit + 1]:
        synchronous.add("b", s)
    assert not synchronous.rebuild_due and synchronous.static_rows == 10000  # in place, only when it outgrows
