"""The joint cost: closed forms against numerical double integration, and its algebraic properties."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from coordinator.balancer.cost import cost, decay_rate, interval_joint_cost, joint_cost, joint_costs
from events import ETERNITY, Interval, parse_instant
from tests.unit.balancer.reference import reference_joint_cost

MS, SECOND, MINUTE, HOUR, DAY = 1, 1000, 60_000, 3_600_000, 86_400_000
YEAR = 365 * DAY
T1970, T2200 = 0, parse_instant("2200-01-01")
LAM = decay_rate(24)
LENGTHS = [MS, 7 * MS, SECOND, MINUTE, HOUR, DAY, 30 * DAY, 10 * YEAR]


def _cases(n: int, seed: int) -> list[tuple[int, int, int, int]]:
    """Generated pairs: lengths from 1 ms to 10 years, every relative position, anywhere in 1970-2200."""
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(n):
        lx = int(rng.choice(LENGTHS)) if rng.random() < 0.7 else int(rng.integers(1, 3 * YEAR))
        ly = int(rng.choice(LENGTHS)) if rng.random() < 0.7 else int(rng.integers(1, 3 * YEAR))
        x0 = int(rng.integers(T1970, T2200 - lx))
        relation = rng.integers(0, 6)
        if relation == 0:  # overlapping somewhere
            y0 = x0 + int(rng.integers(-ly + 1, lx))
        elif relation == 1:  # adjacent
            y0 = x0 + lx if rng.random() < 0.5 else x0 - ly
        elif relation == 2:  # nested
            y0 = x0 + int(rng.integers(0, max(1, lx - ly))) if ly <= lx else x0 - int(rng.integers(0, ly - lx + 1))
        elif relation == 3:  # near
            y0 = x0 + lx + int(rng.integers(0, 5 * DAY))
        elif relation == 4:  # decades apart
            y0 = x0 + lx + int(rng.integers(10 * YEAR, 60 * YEAR))
        else:  # identical
            y0, ly = x0, lx
        out.append((x0, x0 + lx, y0, y0 + ly))
    return out


def _close(ours: float, ref: float) -> bool:
    return abs(ours - ref) <= 1e-9 * abs(ref) + 1e-300


def _case_id(c: tuple[int, int, int, int]) -> str:
    return f"{c[1] - c[0]}ms~{c[3] - c[2]}ms@{c[2] - c[0]}"


@pytest.mark.parametrize("case", _cases(240, seed=20261121), ids=_case_id)
def test_closed_form_matches_numerical_double_integration(case: tuple[int, int, int, int]) -> None:
    x0, x1, y0, y1 = case
    ours = interval_joint_cost(x0, x1, y0, y1, LAM)
    ref = reference_joint_cost(x0, x1, y0, y1)
    assert _close(ours, ref), (ours, ref, (ours - ref) / ref if ref else None)


@pytest.mark.parametrize(
    ("x", "y"),
    [
        (ETERNITY, Interval.parse("2026-01-01/PT1H")),
        (ETERNITY, Interval.parse("2026-01-01T00:00:00.000/2026-01-01T00:00:00.001")),
        (Interval(ETERNITY.start, parse_instant("2026-01-01")), Interval.parse("2026-01-01/P1D")),
        (Interval.parse("1970-01-01/PT0.001S"), Interval.parse("2199-12-31T23:59:59.999/PT0.001S")),
        (Interval.parse("2026-01-01T00:00:00.000/PT0.001S"), Interval.parse("2026-01-01T00:00:00.000/PT0.001S")),
        (Interval.parse("2026-01-01T00:00:00.000/PT0.001S"), Interval.parse("2026-01-01T00:00:00.001/PT0.001S")),
    ],
    ids=["all-time~hour", "all-time~1ms", "half-eternity~day", "1ms~1ms-230y", "1ms-same", "1ms-adjacent"],
)
def test_extreme_inputs(x: Interval, y: Interval) -> None:
    ours = joint_cost(x, y)
    ref = reference_joint_cost(x.start, x.end, y.start, y.end)
    assert math.isfinite(ours) and ours >= 0
    assert _close(ours, ref), (ours, ref)


def test_known_values_and_the_data_source_factor() -> None:
    day = Interval.parse("2026-01-01/P1D")
    u = LAM * 24
    assert joint_cost(day, day) == pytest.approx(2 * (u - 1 + math.exp(-u)) / LAM**2, rel=1e-14)
    one_ms = Interval.parse("2026-01-01T00:00:00.000/PT0.001S")
    t = 1 / 3_600_000
    assert joint_cost(one_ms, one_ms) == pytest.approx(t * t * (1 - LAM * t / 3), rel=1e-13)
    assert cost(day, day, same_data_source=True) == 2 * cost(day, day)
    assert joint_cost(day, day, half_life_hours=12) < joint_cost(day, day)


instants = st.integers(T1970, T2200)
lengths = st.one_of(st.sampled_from(LENGTHS), st.integers(1, 3 * YEAR))


@st.composite
def intervals(draw: st.DrawFn) -> Interval:
    start = draw(instants)
    return Interval(start, start + draw(lengths))


def _rel(a: float, b: float) -> float:
    return abs(a - b) / max(abs(a), abs(b), 1e-300)


@settings(max_examples=300)
@given(intervals(), intervals())
def test_symmetric(x: Interval, y: Interval) -> None:
    assert _rel(joint_cost(x, y), joint_cost(y, x)) <= 1e-12


@settings(max_examples=300)
@given(intervals(), intervals(), st.integers(-50 * YEAR, 50 * YEAR))
def test_translation_invariant(x: Interval, y: Interval, shift: int) -> None:
    moved = joint_cost(Interval(x.start + shift, x.end + shift), Interval(y.start + shift, y.end + shift))
    assert _rel(joint_cost(x, y), moved) <= 1e-12 or max(joint_cost(x, y), moved) < 1e-290


@settings(max_examples=300)
@given(intervals(), intervals(), st.integers(1, 10**6))
def test_additive_over_adjacent_pieces(a: Interval, bc: Interval, cut_per_million: int) -> None:
    cut = bc.start + max(1, min(bc.duration - 1, bc.duration * cut_per_million // 10**6)) if bc.duration > 1 else None
    if cut is None:
        return
    b, c = Interval(bc.start, cut), Interval(cut, bc.end)
    whole, parts = joint_cost(a, bc), joint_cost(a, b) + joint_cost(a, c)
    assert _rel(whole, parts) <= 1e-10 or max(whole, parts) < 1e-290


def test_vectorized_form_equals_the_scalar_one() -> None:
    rng = np.random.default_rng(5)
    for x0, x1, _, _ in _cases(20, seed=9):
        cases = _cases(500, seed=int(rng.integers(1 << 30)))
        starts = np.array([c[2] for c in cases], dtype=np.int64)
        ends = np.array([c[3] for c in cases], dtype=np.int64)
        vec = joint_costs(Interval(x0, x1), starts, ends, LAM)
        scalar = np.array([interval_joint_cost(x0, x1, int(s), int(e), LAM) for s, e in zip(starts, ends, strict=True)])
        assert np.all(np.abs(vec - scalar) <= 1e-12 * np.abs(scalar) + 1e-300)


def test_balance_cost_command(capsys: pytest.CaptureFixture[str]) -> None:
    from streaming.cli import main

    assert main(["balance", "cost", "2026-01-01/P1D", "2026-01-02/P1D", "--same-datasource"]) == 0
    day, nxt = Interval.parse("2026-01-01/P1D"), Interval.parse("2026-01-02/P1D")
    assert float(capsys.readouterr().out) == cost(day, nxt, same_data_source=True)
    assert main(["balance", "cost", "2026-01-01/P1D", "2026-01-02/P1D", "--half-life-hours", "12"]) == 0
    assert float(capsys.readouterr().out) == joint_cost(day, nxt, half_life_hours=12)
    assert main(["balance", "cost", "2026-01-01/P1D", "2026-02-30/P1D"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("segcoord: error: Y_INTERVAL: ")
    assert main(["balance", "cost", "2026-01-01/P1D", "2026-01-02/P1D", "--half-life-hours", "-1"]) == 2
    assert "--half-life-hours" in capsys.readouterr().err
