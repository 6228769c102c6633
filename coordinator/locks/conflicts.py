"""When two locks of one data source collide, and when colliding locks may still coexist.

**Conflict** (the locks' scopes collide): an existing timeChunk lock conflicts
with any overlapping request; an existing segment lock conflicts with an
overlapping timeChunk request, with a segment request for the same interval and
a shared partition, and with a segment request for a different but overlapping
interval. So exclusive segment locks on different partitions of one chunk never
conflict: appends and compaction of one chunk do not block each other.

**Compatibility** (colliding locks that may both be live): shared with shared;
append with append, and with the one replace lock whose interval encloses it;
replace with the appends it encloses, never with another replace; exclusive
with nothing.

>>> from events import Interval
>>> day, hour = Interval.parse("2026-01-01/P1D"), Interval.parse("2026-01-01T05/PT1H")
>>> scopes_conflict("segment", day, (0, 1), "segment", day, (2,))
False
>>> scopes_conflict("segment", day, (0,), "timeChunk", hour, ())
True
>>> types_compatible("append", hour, "replace", day), types_compatible("replace", day, "replace", day)
(True, False)
"""

from __future__ import annotations

from collections.abc import Callable, Collection

from events.interval import Interval
from events.registry import Event

#: How decision code hands each decision to the lockbox, which applies and records it.
Emit = Callable[[Event], None]


class Blocked(Exception):
    """A lock request cannot be granted now; ``blocking`` are the incompatible live lock ids."""

    def __init__(self, blocking: list[str]) -> None:
        super().__init__(", ".join(blocking))
        self.blocking = blocking


def scopes_conflict(
    held_granularity: str,
    held_interval: Interval,
    held_partitions: Collection[int],
    req_granularity: str,
    req_interval: Interval,
    req_partitions: Collection[int],
) -> bool:
    if not held_interval.overlaps(req_interval):
        return False
    if held_granularity == "timeChunk" or req_granularity == "timeChunk":
        return True
    if held_interval != req_interval:
        return True
    return not set(held_partitions).isdisjoint(req_partitions)


def types_compatible(held_type: str, held_interval: Interval, req_type: str, req_interval: Interval) -> bool:
    if held_type == "shared" and req_type == "shared":
        return True
    if held_type == "append" and req_type == "append":
        return True
    if held_type == "append" and req_type == "replace":
        return req_interval.contains(held_interval)
    if held_type == "replace" and req_type == "append":
        return held_interval.contains(req_interval)
    return False
