"""The balancing order is a pure function of (run, tier, stage) and the candidates: the same on every machine.

The recorded order below was computed once; a NumPy (or Python) build that changed it would make a re-run on
another machine send other moves under other ids. It fails on the old code, which drew from
``np.random.default_rng``.
"""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from coordinator.planner.planner import _draws


def test_the_recorded_order_is_reproduced() -> None:
    assert list(_draws("3/_default_tier/7", 12)) == [11, 8, 3, 5, 4, 1, 9, 7, 2, 6, 0, 10]


@given(st.integers(min_value=0, max_value=300), st.text(max_size=20))
def test_every_candidate_is_drawn_once(n: int, seed: str) -> None:
    drawn = list(_draws(seed, n))
    assert sorted(drawn) == list(range(n))
    assert drawn == list(_draws(seed, n))


def test_run_tier_and_stage_each_change_the_order() -> None:
    base = list(_draws("1/hot/7", 50))
    assert base != list(_draws("2/hot/7", 50))
    assert base != list(_draws("1/cold/7", 50))
    assert base != list(_draws("1/hot/10", 50))
