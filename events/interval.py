"""Half-open UTC time intervals ``[start, end)`` in milliseconds, as Druid's Joda intervals.

Wire form is ISO-8601 ``start/end``; parsing also takes Druid's shorthands
``start/PERIOD`` and ``PERIOD/end``. ``ETERNITY`` is Druid's "all time".

Invariants: ``start <= end``; an interval with ``start == end`` is empty and
overlaps nothing; ``Interval.parse(i.iso()) == i``.

>>> Interval.parse("2026-01-01/P1D").iso()
'2026-01-01T00:00:00.000Z/2026-01-02T00:00:00.000Z'
>>> Interval.parse("2026-01-01/2026-01-03").overlaps(Interval.parse("2026-01-02/2026-01-04"))
True
"""

from __future__ import annotations

from dataclasses import dataclass

from events.instant import MAX_INSTANT, MIN_INSTANT, InstantError, format_instant, parse_instant
from events.period import Period, PeriodError


class IntervalError(ValueError):
    """Text that is not an ISO-8601 interval, or an interval that ends before it starts."""


@dataclass(frozen=True, slots=True, order=True)
class Interval:
    """``[start, end)`` in UTC milliseconds. Ordered by start, then end."""

    start: int
    end: int

    def __post_init__(self) -> None:
        if self.end < self.start:
            raise IntervalError(
                f"interval ends before it starts: {format_instant(self.start)}/{format_instant(self.end)}"
            )

    @staticmethod
    def parse(text: str) -> Interval:
        if not isinstance(text, str) or text.count("/") != 1:
            raise IntervalError(f"{text!r} is not an ISO-8601 interval (expected start/end)")
        left, right = text.split("/")
        try:
            if left.startswith("P"):
                end = parse_instant(right)
                return Interval(Period.parse(left).subtract_from(end), end)
            start = parse_instant(left)
            if right.startswith("P"):
                return Interval(start, Period.parse(right).add_to(start))
            return Interval(start, parse_instant(right))
        except (InstantError, PeriodError) as e:
            raise IntervalError(f"{text!r} is not an ISO-8601 interval: {e}") from None

    def iso(self) -> str:
        return f"{format_instant(self.start)}/{format_instant(self.end)}"

    def __str__(self) -> str:
        return self.iso()

    @property
    def duration(self) -> int:
        return self.end - self.start

    def is_empty(self) -> bool:
        return self.start == self.end

    def overlaps(self, other: Interval) -> bool:
        """True when the two share at least one millisecond (empty intervals overlap nothing)."""
        return self.start < other.end and other.start < self.end

    def contains(self, other: Interval) -> bool:
        """True when ``other`` lies within this interval (an empty ``other`` at an inner point included)."""
        return self.start <= other.start and other.end <= self.end

    def contains_instant(self, instant: int) -> bool:
        return self.start <= instant < self.end

    def abuts(self, other: Interval) -> bool:
        return self.end == other.start or other.end == self.start

    def intersection(self, other: Interval) -> Interval | None:
        """The common part, or None when they do not overlap."""
        if not self.overlaps(other):
            return None
        return Interval(max(self.start, other.start), min(self.end, other.end))


#: Druid's Intervals.ETERNITY.
ETERNITY = Interval(MIN_INSTANT, MAX_INSTANT)
