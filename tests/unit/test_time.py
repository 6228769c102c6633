"""Instants, periods and intervals: exact parse/format over Druid's whole range."""

from __future__ import annotations

import datetime as dt

import pytest
from hypothesis import given
from hypothesis import strategies as st

from events.instant import MAX_INSTANT, MIN_INSTANT, InstantError, format_instant, parse_instant
from events.interval import ETERNITY, Interval, IntervalError
from events.period import Period, PeriodError


@given(st.integers(MIN_INSTANT, MAX_INSTANT))
def test_instant_round_trips_over_druids_whole_range(ms: int) -> None:
    assert parse_instant(format_instant(ms)) == ms


@given(st.integers(-62_135_596_800_000, 253_402_300_799_999))
def test_instant_agrees_with_datetime_in_years_1_to_9999(ms: int) -> None:
    expected = dt.datetime(1970, 1, 1, tzinfo=dt.UTC) + dt.timedelta(milliseconds=ms)
    assert format_instant(ms) == expected.isoformat(timespec="milliseconds").replace("+00:00", "Z")


@pytest.mark.parametrize(
    ("text", "iso"),
    [
        ("2026-11-21", "2026-11-21T00:00:00.000Z"),
        ("2026-11-21T10", "2026-11-21T10:00:00.000Z"),
        ("2026-11-21T10:15", "2026-11-21T10:15:00.000Z"),
        ("2026-11-21T10:15:30.5Z", "2026-11-21T10:15:30.500Z"),
        ("2026-11-21T10:15:30.123456789Z", "2026-11-21T10:15:30.123Z"),
        ("2026-11-21T10:00:00+05:30", "2026-11-21T04:30:00.000Z"),
        ("2026-11-21T00:00:00-0100", "2026-11-21T01:00:00.000Z"),
        ("2024-02-29T23:59:59.999Z", "2024-02-29T23:59:59.999Z"),
        ("1969-12-31T23:59:59.999Z", "1969-12-31T23:59:59.999Z"),
    ],
)
def test_instant_forms(text: str, iso: str) -> None:
    assert format_instant(parse_instant(text)) == iso


@pytest.mark.parametrize("bad", ["", "2026", "2026-13-01", "2025-02-29", "2026-11-21T25:00", "yesterday",
                                 "2026-11-21T10:00:00+19:00", "146140482-04-24T15:36:27.904Z"])
def test_bad_instants_are_refused_by_name(bad: str) -> None:
    with pytest.raises(InstantError) as info:
        parse_instant(bad)
    assert repr(bad) in str(info.value)


def test_eternity_is_druids_text() -> None:
    assert ETERNITY.iso() == "-146136543-09-08T08:23:32.096Z/146140482-04-24T15:36:27.903Z"
    assert Interval.parse(ETERNITY.iso()) == ETERNITY


@pytest.mark.parametrize(
    ("start", "period", "end"),
    [
        ("2026-01-31", "P1M", "2026-02-28"),
        ("2024-01-31", "P1M", "2024-02-29"),
        ("2024-02-29", "P1Y", "2025-02-28"),
        ("2026-11-21", "P1W", "2026-11-28"),
        ("2026-11-21T23:00", "PT2H", "2026-11-22T01:00"),
        ("2026-03-31", "P1Y2M3DT4H5M6.007S", "2027-06-03T04:05:06.007"),
    ],
)
def test_period_calendar_arithmetic(start: str, period: str, end: str) -> None:
    assert Period.parse(period).add_to(parse_instant(start)) == parse_instant(end)


@given(st.builds(Period, *(st.integers(0, 40) for _ in range(7)), st.integers(0, 999)))
def test_period_text_round_trips(p: Period) -> None:
    assert Period.parse(p.iso()) == p or p == Period()


@pytest.mark.parametrize("bad", ["", "P", "PT", "1D", "P1H", "PT1D", "P-1D", "P1DT"])
def test_bad_periods(bad: str) -> None:
    with pytest.raises(PeriodError):
        Period.parse(bad)


def test_interval_shorthands_and_relations() -> None:
    day = Interval.parse("2026-11-21/P1D")
    assert day == Interval.parse("P1D/2026-11-22") == Interval.parse("2026-11-21T00:00Z/2026-11-22T00:00Z")
    hour = Interval.parse("2026-11-21T05/PT1H")
    assert day.contains(hour) and day.overlaps(hour) and not hour.contains(day)
    nxt = Interval.parse("2026-11-22/P1D")
    assert not day.overlaps(nxt) and day.abuts(nxt) and day.intersection(nxt) is None
    empty = Interval(day.end, day.end)
    assert empty.is_empty() and not empty.overlaps(day)


@pytest.mark.parametrize("bad", ["2026-11-21", "2026-11-22/2026-11-21", "a/b", "2026-11-21/P", "1/2/3"])
def test_bad_intervals_name_the_text(bad: str) -> None:
    with pytest.raises(IntervalError):
        Interval.parse(bad)


def test_periods_add_years_then_months_like_joda() -> None:
    from events.instant import format_instant, parse_instant
    from events.period import Period

    leap = parse_instant("2024-02-29")
    assert format_instant(Period.parse("P1Y1M").subtract_from(leap)) == "2023-01-28T00:00:00.000Z"
    assert format_instant(Period.parse("P1Y").add_to(leap)) == "2025-02-28T00:00:00.000Z"
    assert format_instant(Period.parse("P1M").add_to(parse_instant("2026-01-31"))) == "2026-02-28T00:00:00.000Z"


def _outcome(fn, text: str) -> object:  # type: ignore[no-untyped-def]
    try:
        return fn(text)
    except InstantError as e:
        return str(e)


@given(st.integers(min_value=-(10**14), max_value=10**14), st.lists(
    st.tuples(st.integers(0, 23), st.sampled_from("0123456789:-.TZ+ 24٣")), max_size=3))
def test_the_canonical_shortcut_parses_as_the_full_parser(ms: int, edits: list[tuple[int, str]]) -> None:
    """Druid's own form skips the regular expression; any text, canonical or a character off, parses the same."""
    from events.instant import _MINUTES, _parse_full, _parse_instant

    text = list(format_instant(ms))
    for at, char in edits:
        text[at] = char
    s = "".join(text)
    for _ in range(2):  # the minute cache cold, then warm
        assert _outcome(_parse_instant, s) == _outcome(_parse_full, s)
    _MINUTES.clear()
