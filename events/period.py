"""ISO-8601 periods (``P1D``, ``PT1H``, ``P1M``, ``P2Y3M``, ``P1W``), with Joda's calendar arithmetic.

Druid expresses rule windows and interval shorthands as periods. A period is
not a fixed number of milliseconds: ``P1M`` added to January 31st gives the
last day of February. Arithmetic follows Joda-Time's ``DateTime.plus(Period)``
in UTC: years and months first (clamping the day of month), then weeks and
days, then the time fields.

>>> from events.instant import format_instant, parse_instant
>>> format_instant(Period.parse("P1M").add_to(parse_instant("2026-01-31")))
'2026-02-28T00:00:00.000Z'
>>> Period.parse("PT1H30M").fixed_millis()
5400000
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from events.instant import (
    MILLIS_PER_DAY,
    MILLIS_PER_HOUR,
    MILLIS_PER_MINUTE,
    MILLIS_PER_SECOND,
    days_in_month,
    fields_from_instant,
    instant_from_fields,
)


class PeriodError(ValueError):
    """Text that is not an ISO-8601 period."""


_PERIOD = re.compile(
    r"^P(?:(?P<years>\d+)Y)?(?:(?P<months>\d+)M)?(?:(?P<weeks>\d+)W)?(?:(?P<days>\d+)D)?"
    r"(?:T(?:(?P<hours>\d+)H)?(?:(?P<minutes>\d+)M)?(?:(?P<seconds>\d+)(?:[.,](?P<fraction>\d{1,3}))?S)?)?$"
)


@dataclass(frozen=True, slots=True)
class Period:
    """A calendar period; all fields non-negative, at least one non-zero once parsed."""

    years: int = 0
    months: int = 0
    weeks: int = 0
    days: int = 0
    hours: int = 0
    minutes: int = 0
    seconds: int = 0
    millis: int = 0

    @staticmethod
    def parse(text: str) -> Period:
        m = _PERIOD.match(text) if isinstance(text, str) else None
        if m is None or text in ("P", "PT") or text.endswith("T"):
            raise PeriodError(f"{text!r} is not an ISO-8601 period (expected e.g. P1D, PT1H, P1M)")
        fraction = m["fraction"] or ""
        return Period(
            years=int(m["years"] or 0),
            months=int(m["months"] or 0),
            weeks=int(m["weeks"] or 0),
            days=int(m["days"] or 0),
            hours=int(m["hours"] or 0),
            minutes=int(m["minutes"] or 0),
            seconds=int(m["seconds"] or 0),
            millis=int((fraction + "00")[:3]) if fraction else 0,
        )

    def iso(self) -> str:
        date = "".join(
            f"{n}{u}" for n, u in ((self.years, "Y"), (self.months, "M"), (self.weeks, "W"), (self.days, "D")) if n
        )
        secs = ""
        if self.seconds or self.millis:
            secs = f"{self.seconds}.{self.millis:03d}S" if self.millis else f"{self.seconds}S"
        time = "".join(f"{n}{u}" for n, u in ((self.hours, "H"), (self.minutes, "M")) if n) + secs
        if not date and not time:
            return "PT0S"
        return "P" + date + ("T" + time if time else "")

    def fixed_millis(self) -> int | None:
        """The length in milliseconds when it does not depend on the calendar (no years or months)."""
        if self.years or self.months:
            return None
        return (
            (self.weeks * 7 + self.days) * MILLIS_PER_DAY
            + self.hours * MILLIS_PER_HOUR
            + self.minutes * MILLIS_PER_MINUTE
            + self.seconds * MILLIS_PER_SECOND
            + self.millis
        )

    def add_to(self, instant: int, times: int = 1) -> int:
        """``instant`` plus this period ``times`` times (negative ``times`` subtracts), UTC calendar."""
        year, month, day, hour, minute, second, millis = fields_from_instant(instant)
        # Joda's order: years, then months, clamping the day of month after each
        # (2024-02-29 minus P1Y1M is 2023-01-28, not 2023-01-29).
        year += times * self.years
        day = min(day, days_in_month(year, month))
        year, month0 = divmod(year * 12 + (month - 1) + times * self.months, 12)
        month = month0 + 1
        day = min(day, days_in_month(year, month))
        base = instant_from_fields(year, month, day, hour, minute, second, millis)
        fixed = (
            (self.weeks * 7 + self.days) * MILLIS_PER_DAY
            + self.hours * MILLIS_PER_HOUR
            + self.minutes * MILLIS_PER_MINUTE
            + self.seconds * MILLIS_PER_SECOND
            + self.millis
        )
        return base + times * fixed

    def subtract_from(self, instant: int) -> int:
        return self.add_to(instant, -1)
