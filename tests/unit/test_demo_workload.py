"""The demo's hours: the compaction day is whole and older than the hot tier's P1D window; hours are in order."""

from __future__ import annotations

import itertools

from events.instant import parse_instant
from streaming.demo.workload import DAY, HOUR, hours_of


def test_hours_are_the_compaction_day_then_the_recent_hours() -> None:
    now = parse_instant("2026-11-25T08:17:00Z")
    day, hours = hours_of(now, 6)
    assert day.iso() == "2026-11-23T00:00:00.000Z/2026-11-24T00:00:00.000Z"
    assert hours[:24] == [h for h in hours if day.start <= h.start < day.end]
    assert [h.iso()[:13] for h in hours[24:]] == [f"2026-11-25T0{h}" for h in range(2, 8)]
    assert all(b.start >= a.end for a, b in itertools.pairwise(hours))
    assert all(h.end - h.start == HOUR for h in hours)
    assert day.end <= now - DAY  # no hour of the compacted day is in the P1D window: it stays on _default_tier


def test_recent_hours_never_repeat_the_compaction_day() -> None:
    now = parse_instant("2026-11-25T01:00:00Z")
    day, hours = hours_of(now, 60)  # reaches back past the day: those hours are not ingested twice
    assert len({h.start for h in hours}) == len(hours)
    assert hours[24].start == day.end
