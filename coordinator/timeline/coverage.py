"""Set arithmetic on half-open intervals: does a union cover a target, and what of it is left uncovered.

>>> from events import Interval
>>> day = Interval.parse("2026-01-01/P1D")
>>> morning, evening = Interval.parse("2026-01-01T00/PT6H"), Interval.parse("2026-01-01T18/PT6H")
>>> [i.iso()[11:13] + "-" + i.iso()[36:38] for i in subtract(day, [evening, morning])]
['06-18']
>>> covers([morning, Interval.parse("2026-01-01T06/PT18H")], day)
True
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from events.compiled import trusted_constructor
from events.interval import Interval

#: Builds a piece without Interval's start <= end check: every piece here is cut from a valid target, start < end.
make_piece = trusted_constructor(Interval)


def subtract(target: Interval, holes: Iterable[Interval]) -> tuple[Interval, ...]:
    """The maximal pieces of ``target`` not covered by any of ``holes``, in time order."""
    lo, hi = target.start, target.end
    cuts = [(h.start, h.end) for h in holes if h.start < hi and lo < h.end]
    if not cuts:
        return (target,) if lo < hi else ()
    cuts.sort()
    pieces: list[Interval] = []
    cursor = lo
    for start, end in cuts:
        if start > cursor:
            pieces.append(Interval(cursor, start if start < hi else hi))
        if end > cursor:
            cursor = end
            if cursor >= hi:
                break
    if cursor < hi:
        pieces.append(Interval(cursor, hi))
    return tuple(pieces)


def covers(parts: Iterable[Interval], target: Interval) -> bool:
    """True when the union of ``parts`` contains every instant of ``target``."""
    return not subtract(target, parts)


def subtract_sorted(target: Interval, cuts: Sequence[tuple[int, int, object]]) -> tuple[Interval, ...]:
    """:func:`subtract` for holes given as ``(start, end, ...)`` tuples already sorted by start, each
    overlapping ``target`` (what the timeline keeps per chunk: no filtering, no sorting, no Interval reads).

    >>> day = Interval.parse("2026-01-01/P1D")
    >>> six, eighteen = 1767225600000 + 6 * 3_600_000, 1767225600000 + 18 * 3_600_000
    >>> [i.iso()[11:13] for i in subtract_sorted(day, [(day.start, six, "v2"), (eighteen, day.end, "v2")])]
    ['06']
    """
    lo, hi = target.start, target.end
    if not cuts:
        return (target,) if lo < hi else ()
    pieces: list[Interval] = []
    cursor = lo
    for cut in cuts:
        start, end = cut[0], cut[1]
        if start > cursor:
            pieces.append(make_piece(cursor, start if start < hi else hi))
        if end > cursor:
            cursor = end
            if cursor >= hi:
                break
    if cursor < hi:
        pieces.append(make_piece(cursor, hi))
    return tuple(pieces)
