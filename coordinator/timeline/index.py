"""An index of keyed intervals answering "which keys overlap this interval" fast for any mix of lengths.

A multi-level grid: an interval of length L goes to the level whose bucket width
``w = 2**(level + BASE_BITS)`` is the smallest at least L, in bucket
``start // w``; it then lies inside buckets ``b`` and ``b + 1``. A query scans,
per populated level, the buckets that can hold an overlapping interval (or the
whole level when that is fewer), so hourly, daily, monthly and all-time
intervals mix without any one length slowing the others.

Invariants: ``overlapping(q)`` returns the values of exactly the keys whose
interval shares a millisecond with ``q`` (in a deterministic but unspecified
order); add and remove are O(1).

>>> from events import Interval
>>> idx = IntervalIndex()
>>> idx.add("day", Interval.parse("2026-01-01/P1D"), "the day")
>>> idx.add("hour", Interval.parse("2026-01-01T05/PT1H"), "an hour")
>>> idx.add("next", Interval.parse("2026-01-02/P1D"), "the next day")
>>> sorted(idx.overlapping(Interval.parse("2026-01-01T05:30/PT1H")))
['an hour', 'the day']
"""

from __future__ import annotations

from collections.abc import Hashable, Mapping
from typing import Generic, TypeVar

from events.interval import Interval

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")

BASE_BITS = 20  # about 17.5 minutes


def _level(length: int) -> int:
    return max(0, (length - 1).bit_length() - BASE_BITS)


class IntervalIndex(Generic[K, V]):
    """Values stored under keys with their interval."""

    def __init__(self) -> None:
        self._levels: dict[int, dict[int, dict[K, tuple[int, int, V]]]] = {}
        self._where: dict[K, tuple[int, int]] = {}

    def __len__(self) -> int:
        return len(self._where)

    def __contains__(self, key: K) -> bool:
        return key in self._where

    def keyed(self) -> Mapping[K, object]:
        """Every key, as a mapping to read only (a dict: ``set.update`` and ``dict.fromkeys`` of it reuse the keys'
        stored hashes instead of hashing each key again)."""
        return self._where

    def add(self, key: K, interval: Interval, value: V) -> None:
        if key in self._where:
            self.remove(key)
        level = _level(max(interval.duration, 1))
        bucket = interval.start >> (level + BASE_BITS)
        self._levels.setdefault(level, {}).setdefault(bucket, {})[key] = (interval.start, interval.end, value)
        self._where[key] = (level, bucket)

    def remove(self, key: K) -> None:
        level, bucket = self._where.pop(key)
        buckets = self._levels[level]
        del buckets[bucket][key]
        if not buckets[bucket]:
            del buckets[bucket]
            if not buckets:
                del self._levels[level]

    def overlapping(self, query: Interval) -> list[V]:
        """Values whose interval overlaps ``query`` (shares at least one millisecond)."""
        if query.is_empty():
            return []
        found: list[V] = []
        append = found.append
        qs, qe = query.start, query.end
        for level, buckets in self._levels.items():
            shift = level + BASE_BITS
            first, last = (qs >> shift) - 1, (qe - 1) >> shift
            if last - first + 1 <= len(buckets):
                get = buckets.get
                for b in range(first, last + 1):
                    items = get(b)
                    if items is not None:
                        for s, e, v in items.values():
                            if s < qe and qs < e:
                                append(v)
            else:
                for b, items in buckets.items():
                    if first <= b <= last:
                        for s, e, v in items.values():
                            if s < qe and qs < e:
                                append(v)
        return found
