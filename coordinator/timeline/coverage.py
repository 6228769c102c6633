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

from collections.abc import Iterable

from events.interval import Interval


def subtract(target: Interval, holes: Iterable[Interval]) -> tuple[Interval, ...]:
    """The maximal pieces of ``target`` not covered by any of ``holes``, in time order."""
    cuts = sorted((h.start, h.end) for h in holes if h.start < target.end and target.start < h.end)
    pieces: list[Interval] = []
    cursor = target.start
    for start, end in cuts:
        if start > cursor:
            pieces.append(Interval(cursor, min(start, target.end)))
        cursor = max(cursor, end)
        if cursor >= target.end:
            break
    if cursor < target.end:
        pieces.append(Interval(cursor, target.end))
    return tuple(pieces)


def covers(parts: Iterable[Interval], target: Interval) -> bool:
    """True when the union of ``parts`` contains every instant of ``target``."""
    return not subtract(target, parts)
