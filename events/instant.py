"""Instants: UTC milliseconds since the epoch, and their ISO-8601 text.

Pure integer arithmetic (proleptic Gregorian calendar, Howard Hinnant's
days-from-civil), so every instant a Java ``long`` divided by two can hold
parses and formats exactly, including Druid's ``ETERNITY`` bounds in the year
-146136543 and 146140482, which :mod:`datetime` cannot represent.

Invariants:
- ``parse_instant(format_instant(ms)) == ms`` for every ``MIN_INSTANT <= ms <= MAX_INSTANT``.
- ``format_instant`` always writes Joda's/Druid's form ``YYYY-MM-DDTHH:MM:SS.mmmZ``
  (years past 9999 and before 0 with as many digits as needed, negative years signed).

>>> format_instant(0)
'1970-01-01T00:00:00.000Z'
>>> format_instant(parse_instant("2026-11-21T10:00:00+01:00"))
'2026-11-21T09:00:00.000Z'
>>> format_instant(MIN_INSTANT)
'-146136543-09-08T08:23:32.096Z'
"""

from __future__ import annotations

import functools
import re

MILLIS_PER_SECOND = 1_000
MILLIS_PER_MINUTE = 60_000
MILLIS_PER_HOUR = 3_600_000
MILLIS_PER_DAY = 86_400_000

#: Druid's JodaUtils.MIN_INSTANT / MAX_INSTANT (Long.MIN_VALUE / 2, Long.MAX_VALUE / 2).
MIN_INSTANT = -4_611_686_018_427_387_904
MAX_INSTANT = 4_611_686_018_427_387_903


class InstantError(ValueError):
    """Text that is not an ISO-8601 instant, or an instant outside Druid's range."""


_INSTANT = re.compile(
    r"""^(?P<year>[+-]?\d{4,})-(?P<month>\d{2})-(?P<day>\d{2})
        (?:[T ](?P<hour>\d{2})(?::?(?P<minute>\d{2})(?::?(?P<second>\d{2})(?:[.,](?P<fraction>\d{1,9}))?)?)?)?
        (?P<zone>Z|[+-]\d{2}(?::?\d{2})?)?$""",
    re.VERBOSE,
)


def days_from_civil(year: int, month: int, day: int) -> int:
    """Days since 1970-01-01 of a proleptic Gregorian date (any year)."""
    y = year - 1 if month <= 2 else year
    era = y // 400
    yoe = y - era * 400
    mp = (month + 9) % 12
    doy = (153 * mp + 2) // 5 + day - 1
    doe = yoe * 365 + yoe // 4 - yoe // 100 + doy
    return era * 146_097 + doe - 719_468


def civil_from_days(days: int) -> tuple[int, int, int]:
    """The (year, month, day) of a day count since 1970-01-01; inverse of :func:`days_from_civil`."""
    z = days + 719_468
    era = z // 146_097
    doe = z - era * 146_097
    yoe = (doe - doe // 1460 + doe // 36_524 - doe // 146_096) // 365
    doy = doe - (365 * yoe + yoe // 4 - yoe // 100)
    mp = (5 * doy + 2) // 153
    day = doy - (153 * mp + 2) // 5 + 1
    month = mp + 3 if mp < 10 else mp - 9
    year = yoe + era * 400 + (1 if month <= 2 else 0)
    return year, month, day


def is_leap_year(year: int) -> bool:
    return year % 4 == 0 and (year % 100 != 0 or year % 400 == 0)


def days_in_month(year: int, month: int) -> int:
    if month == 2:
        return 29 if is_leap_year(year) else 28
    return 30 if month in (4, 6, 9, 11) else 31


def instant_from_fields(
    year: int, month: int, day: int, hour: int = 0, minute: int = 0, second: int = 0, millis: int = 0
) -> int:
    """Milliseconds since the epoch of a UTC date and time (fields are not range-checked here)."""
    return (
        days_from_civil(year, month, day) * MILLIS_PER_DAY
        + hour * MILLIS_PER_HOUR
        + minute * MILLIS_PER_MINUTE
        + second * MILLIS_PER_SECOND
        + millis
    )


def fields_from_instant(ms: int) -> tuple[int, int, int, int, int, int, int]:
    """(year, month, day, hour, minute, second, millis) of an instant, in UTC."""
    days, rest = divmod(ms, MILLIS_PER_DAY)
    year, month, day = civil_from_days(days)
    hour, rest = divmod(rest, MILLIS_PER_HOUR)
    minute, rest = divmod(rest, MILLIS_PER_MINUTE)
    second, millis = divmod(rest, MILLIS_PER_SECOND)
    return year, month, day, hour, minute, second, millis


def parse_instant(text: str) -> int:
    """Parse an ISO-8601 date or date-time to UTC milliseconds (see :func:`_parse_instant`).

    Memoized (bounded): a stream names the same interval boundaries over and over.
    """
    if not isinstance(text, str):
        raise InstantError(f"{text!r} is not an ISO-8601 instant (expected e.g. 2026-11-21T10:00:00.000Z)")
    return _parse_instant_cached(text)


_MINUTES: dict[str, int] = {}
_MINUTES_MAX = 1 << 14


def _parse_canonical(text: str) -> int | None:
    """The instant of Druid's own form ``YYYY-MM-DDTHH:MM:SS.mmmZ`` (what every event carries), or None.

    Events of one minute share ``YYYY-MM-DDTHH:MM``: its instant is parsed
    once by the full parser (which checks the calendar) and kept (bounded), so
    only seconds and milliseconds are read per call. None for any other form
    (hour 24 included): the full parser decides then.
    """
    if len(text) != 24 or text[23] != "Z" or text[19] != "." or text[16] != ":":
        return None
    prefix = text[:16]
    base = _MINUTES.get(prefix)
    if base is None:
        if (text[4] != "-" or text[7] != "-" or text[10] != "T" or text[13] != ":" or text[11:13] == "24"
                or not prefix.isascii()):
            return None
        try:
            base = _parse_full(prefix + ":00.000Z")
        except InstantError:
            return None
        if len(_MINUTES) >= _MINUTES_MAX:
            _MINUTES.clear()
        _MINUTES[prefix] = base
    seconds, millis = text[17:19], text[20:23]
    if not (seconds.isascii() and seconds.isdigit() and millis.isascii() and millis.isdigit()) or seconds > "59":
        return None
    return base + int(seconds) * MILLIS_PER_SECOND + int(millis)


def _parse_instant(text: str) -> int:
    """Parse an ISO-8601 date or date-time to UTC milliseconds.

    Accepts a date alone (midnight UTC), optional minutes/seconds/fraction, and a
    ``Z`` or ``+hh:mm`` offset (none means UTC, as in Druid). Digits past the
    millisecond are truncated toward the past. Raises :class:`InstantError`
    naming the text when it is not an instant or lies outside Druid's range.
    """
    if isinstance(text, str):
        fast = _parse_canonical(text)
        if fast is not None:
            return fast
    return _parse_full(text)


def _parse_full(text: str) -> int:
    m = _INSTANT.match(text.strip()) if isinstance(text, str) else None
    if m is None:
        raise InstantError(f"{text!r} is not an ISO-8601 instant (expected e.g. 2026-11-21T10:00:00.000Z)")
    year = int(m["year"])
    month, day = int(m["month"]), int(m["day"])
    hour = int(m["hour"] or 0)
    minute = int(m["minute"] or 0)
    second = int(m["second"] or 0)
    fraction = m["fraction"] or ""
    if not 1 <= month <= 12:
        raise InstantError(f"{text!r}: month {month} is not 1-12")
    if not 1 <= day <= days_in_month(year, month):
        raise InstantError(f"{text!r}: day {day} does not exist in {year:04d}-{month:02d}")
    if hour > 24 or minute > 59 or second > 59 or (hour == 24 and (minute or second or fraction.strip("0"))):
        raise InstantError(f"{text!r}: time of day out of range")
    millis = int((fraction + "000")[:3]) if fraction else 0
    ms = instant_from_fields(year, month, day, hour, minute, second, millis)
    zone = m["zone"]
    if zone and zone != "Z":
        sign = -1 if zone[0] == "-" else 1
        digits = zone[1:].replace(":", "")
        offset_minutes = int(digits[:2]) * 60 + (int(digits[2:4]) if len(digits) > 2 else 0)
        if int(digits[:2]) > 18 or (len(digits) > 2 and int(digits[2:4]) > 59):
            raise InstantError(f"{text!r}: zone offset {zone} out of range")
        ms -= sign * offset_minutes * MILLIS_PER_MINUTE
    if not MIN_INSTANT <= ms <= MAX_INSTANT:
        raise InstantError(f"{text!r} lies outside Druid's instant range")
    return ms


@functools.lru_cache(maxsize=1 << 16)
def format_instant(ms: int) -> str:
    """Druid's text of an instant: ``YYYY-MM-DDTHH:MM:SS.mmmZ`` in UTC (memoized, bounded)."""
    year, month, day, hour, minute, second, millis = fields_from_instant(ms)
    year_text = f"-{-year:04d}" if year < 0 else f"{year:04d}"
    return f"{year_text}-{month:02d}-{day:02d}T{hour:02d}:{minute:02d}:{second:02d}.{millis:03d}Z"


_parse_instant_cached = functools.lru_cache(maxsize=1 << 16)(_parse_instant)
