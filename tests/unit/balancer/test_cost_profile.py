"""The coverage profile and the cache built on it: within 1e-9 of the brute-force sum for every alignment and
history, its error bounds honest, its snapshot kept across small changes and rebuilt after many."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from coordinator.balancer import cost_cache
from coordinator.balancer.cost import CostModel, costs, decay_rate, interval_joint_cost
from coordinator.balancer.cost_cache import ServerCostCache
from coordinator.balancer.cost_profile import SHORT_PIECES, CoverageProfile
from coordinator.balancer.server_costs import ServerSegments
from events import ETERNITY, Interval, SegmentDescriptor, parse_instant

MS, HOUR, DAY = 1, 3_600_000, 86_400_000
YEAR = 365 * DAY
T0 = parse_instant("2026-01-01")
LAM = decay_rate(24)


def _brute(x0: int, x1: int, held: list[tuple[int, int]]) -> float:
    return sum(interval_joint_cost(x0, x1, a, b, LAM) for a, b in held)


def _profile(held: list[tuple[int, int]]) -> CoverageProfile:
    starts = np.array([a for a, _ in held], np.int64)
    ends = np.array([b for _, b in held], np.int64)
    return CoverageProfile(starts, ends, np.ones(len(held), np.int64), LAM)


_length = st.one_of(st.sampled_from([MS, 7, 1000, HOUR, DAY, 30 * DAY, YEAR, 10 * YEAR]), st.integers(1, 3 * DAY))
_interval = st.one_of(
    st.builds(lambda off, length: (T0 + off, T0 + off + length), st.integers(-200 * DAY, 200 * DAY), _length),
    st.builds(lambda off, length: (T0 + off, T0 + off + length), st.integers(-2 * HOUR, 2 * HOUR), st.integers(1, 5)),
    st.just((ETERNITY.start, ETERNITY.end)))


@settings(max_examples=300, deadline=None)
@given(st.lists(_interval, min_size=1, max_size=40), _interval)
def test_the_profile_agrees_with_the_closed_form_and_bounds_its_error(held: list[tuple[int, int]],
                                                                      probe: tuple[int, int]) -> None:
    """Any intervals (1 ms to "all time", stacked, far apart) against any probe: the answer is within 1e-9 of the
    sum of closed forms, and within the error bound it reports."""
    answer = _profile(held).total(*probe)
    ref = _brute(*probe, held)
    if answer is None:  # only a probe of seconds over many pieces is left to the caller
        inside = {x for a, b in held for x in (a, b) if probe[0] < x < probe[1]}
        assert probe[1] - probe[0] < HOUR and len(inside) >= SHORT_PIECES - 1
        return
    value, bound = answer
    assert abs(value - ref) <= 1e-9 * ref + 1e-300, (value, ref)
    assert abs(value - ref) <= bound + 1e-12 * ref + 1e-300, (value, ref, bound)


def test_a_one_millisecond_probe_amid_far_mass_keeps_its_precision() -> None:
    """Prefix sums subtracted across the probe lose this (1.6e-7 relative): 20 segments months away and one that
    overlaps a 1 ms probe by 1 ms. The two-point form would cancel here; the inside form answers."""
    held = [(T0 - (100 + i) * DAY, T0 - (99 + i) * DAY) for i in range(20)] + [(T0, T0 + 1)]
    value, bound = _profile(held).total(T0, T0 + 1)  # type: ignore[misc]
    ref = _brute(T0, T0 + 1, held)
    assert abs(value - ref) <= 1e-12 * ref and bound <= 1e-12 * ref


def test_a_short_probe_over_many_pieces_is_left_to_the_caller_and_the_cache_still_answers_exactly() -> None:
    """A probe of a few ms over more than SHORT_PIECES coverage pieces: neither form is safe and cheap, the
    profile says so (None) and the cache sums the closed form over every held segment instead."""
    held = [(T0 + i, T0 + i + 1) for i in range(2 * SHORT_PIECES)] + [(T0 - 30 * DAY, T0 + 30 * DAY)]
    probe = (T0, T0 + 2 * SHORT_PIECES)
    assert _profile(held).total(*probe) is None
    cache = ServerCostCache()
    cache.extend(SegmentDescriptor("ds", Interval(a, b), f"v{i}") for i, (a, b) in enumerate(held))
    ref = _brute(*probe, held)
    assert abs(cache.cost_of(SegmentDescriptor("ds", Interval(*probe), "probe")) - 2 * ref) <= 1e-12 * ref


def test_masses_beyond_int64_stay_exact() -> None:
    """Many "all time" intervals: the cumulative mass passes 2^64, the mass between two points is still exact."""
    held = [(ETERNITY.start, ETERNITY.end)] * 5 + [(T0, T0 + HOUR), (T0 - YEAR, T0 + YEAR)]
    profile = _profile(held)
    for probe in [(ETERNITY.start, ETERNITY.end), (T0, T0 + 1), (ETERNITY.start, T0), (T0 + HOUR, ETERNITY.end)]:
        value, _ = profile.total(*probe)  # type: ignore[misc]
        ref = _brute(*probe, held)
        assert abs(value - ref) <= 1e-12 * ref, (probe, value, ref)


def _segment(i: int, a: int, b: int, source: int = 0) -> SegmentDescriptor:
    return SegmentDescriptor(f"ds{source}", Interval(a, b), f"v{i}")


def test_a_holder_whose_own_cost_dominates_is_answered_exactly() -> None:
    """Druid's rule takes the segment's own cost out of its holder's sum: for a server holding one long
    segment and a 1 ms one, that subtraction would cancel everything; the cache notices and sums exactly."""
    big, small = _segment(0, T0 - YEAR, T0 + YEAR), _segment(1, T0 + YEAR + DAY, T0 + YEAR + DAY + 1)
    cache, brute = ServerCostCache(), ServerSegments()
    for s in (big, small):
        cache.add(s)
        brute.add(s)
    ref = brute.cost_of(big)
    assert ref > 0.0 and abs(cache.cost_of(big) - ref) <= 1e-9 * ref


@settings(max_examples=80, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 3), _interval, st.integers(0, 2)), min_size=1, max_size=60),
       st.lists(st.integers(0, 100), max_size=30), _interval)
def test_any_delta_over_a_snapshot_agrees_with_brute_force(batch: list[tuple[int, tuple[int, int], int]],
                                                           changes: list[int], probe: tuple[int, int]) -> None:
    """A snapshot taken, then adds and removes noted in its delta (each followed by queries of a held segment
    and of a fresh one): every answer within 1e-9 of the brute-force sum, the holder's own cost excluded."""
    segments = [_segment(i, a, b, source) for i, (_, (a, b), source) in enumerate(batch)]
    cache, brute = ServerCostCache(), ServerSegments()
    first = segments[: len(segments) // 2 + 1]
    cache.extend(first)
    for s in first:
        brute.add(s)
    fresh = _segment(-1, *probe)
    cache.cost_of(fresh)  # the snapshot
    for c in changes:
        s = segments[c % len(segments)]
        if brute.holds(s.id):
            cache.remove(s.id)
            brute.remove(s.id)
        else:
            cache.add(s)
            brute.add(s)
        for p in (fresh, s):
            ours, ref = cache.cost_of(p), brute.cost_of(p)
            assert abs(ours - ref) <= 1e-9 * ref + 1e-300, (p, ours, ref)


def test_small_changes_keep_the_snapshot_and_queries_that_pay_for_many_rebuild_it() -> None:
    """An add or a remove is noted, not applied: the next query answers from the same snapshot plus the delta.
    Once the delta rows summed by queries cost as much as a rebuild, the next query rebuilds."""
    rng = np.random.default_rng(4)
    segments = [_segment(i, T0 + h * HOUR, T0 + (h + 1) * HOUR, int(rng.integers(3)))
                for i, h in enumerate(rng.integers(0, 5000, 2000).tolist())]
    cache = ServerCostCache()
    cache.extend(segments[:1000])
    probe = _segment(-1, T0, T0 + DAY)
    cache.cost_of(probe)
    snapshot = cache._snapshot
    cache.add(segments[1000])
    cache.remove(segments[0].id)
    cache.cost_of(probe)
    assert cache._snapshot is snapshot and len(cache._delta) == 2
    queries = 0
    while cache._snapshot is snapshot:
        cache.cost_of(probe)
        queries += 1
    rebuild, per_query = cost_cache.BUILD_MICROS * len(cache), 2 * cost_cache.ROW_MICROS  # two delta rows a query
    assert queries == math.ceil((rebuild - per_query) / per_query) + 1 and not cache._delta


def test_same_calls_same_answers() -> None:
    """Answers depend on the calls made (what the snapshot holds), never on timing: bit for bit."""
    rng = np.random.default_rng(7)
    segments = [_segment(i, T0 + int(a), T0 + int(a) + int(b), int(rng.integers(2)))
                for i, (a, b) in enumerate(zip(rng.integers(0, 300 * DAY, 600), rng.integers(1, 3 * DAY, 600),
                                               strict=True))]
    answers = []
    for _ in range(2):
        cache = ServerCostCache()
        cache.extend(segments[:400])
        run = []
        for i, s in enumerate(segments[400:]):
            cache.add(s)
            if i % 3 == 0:
                cache.remove(segments[i].id)
            run.append(cache.cost_of(segments[(7 * i) % len(segments)]))
        answers.append(run)
    assert answers[0] == answers[1]


def test_a_million_unaligned_segments_agree_with_brute_force() -> None:
    """The issue's bar at its size: 1e-9 of the brute-force sum at 1M unaligned segments (1 ms .. 48 h), probes
    of every length down to 1 ms."""
    rng = np.random.default_rng(99)
    n = 1_000_000
    starts = T0 + rng.integers(0, 100_000 * HOUR, n).astype(np.int64)
    ends = starts + rng.integers(1, 48 * HOUR, n).astype(np.int64)
    profile = CoverageProfile(starts, ends, np.ones(n, np.int64), LAM)
    model = CostModel()
    for length in [1, 1000, HOUR, DAY, 30 * DAY, 3 * YEAR]:
        x0 = T0 + int(rng.integers(0, 100_000 * HOUR))
        answer = profile.total(x0, x0 + length)
        assert answer is not None
        ref = float(np.sum(costs(Interval(x0, x0 + length), starts, ends, np.zeros(n, bool), model)))
        assert abs(answer[0] - ref) <= 1e-9 * ref, (length, answer, ref)


def test_holders_on_a_sparse_server_are_answered_from_the_profiles(monkeypatch: pytest.MonkeyPatch) -> None:
    """Daily segments weeks apart: each holder's own cost is nearly all of its sum, so subtracting it would
    cancel; the profiles' counts less its own copy answer instead (within 1e-9), never the O(n) exact sum."""
    segments = [_segment(i, T0 + 30 * i * DAY, T0 + (30 * i + 1) * DAY, i % 2) for i in range(60)]
    segments.append(_segment(60, T0 + 3 * DAY + 5, T0 + 4 * DAY - 7, 0))  # two pieces inside no other segment
    cache, brute = ServerCostCache(), ServerSegments()
    cache.extend(segments)
    for s in segments:
        brute.add(s)

    def no_exact(*_: object) -> float:
        raise AssertionError("summed over every segment")

    monkeypatch.setattr(cache, "_exact", no_exact)
    for s in segments:
        ours, ref = cache.cost_of(s), brute.cost_of(s)
        assert abs(ours - ref) <= 1e-9 * ref, (s, ours, ref)
    held = ServerCostCache()
    held.extend([segments[0], _segment(99, T0, T0 + DAY, 1)])  # the same interval twice (two data sources)
    both = ServerSegments()
    for s in (segments[0], _segment(99, T0, T0 + DAY, 1)):
        both.add(s)
    assert abs(held.cost_of(segments[0]) - both.cost_of(segments[0])) <= 1e-9 * both.cost_of(segments[0])
