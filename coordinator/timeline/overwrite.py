"""Druid's ``numbered_overwrite`` shard specs, read as the proposal's list form.

Real Druid metadata says what a segment overwritten under segment locks hides
with a ``numbered_overwrite`` shard spec: ``startRootPartitionId`` /
``endRootPartitionId`` (the root partitions it covers), ``minorVersion`` and
``atomicUpdateGroupSize``. The chunk rules (:mod:`coordinator.timeline.chunk`)
read the list form: ``overshadowedSegments`` and ``atomicUpdateGroup``.
:func:`as_list_form` turns the first into the second for one chunk's members,
so both forms give identical timeline states:

- a member with the Druid form and no list fields **overshadows** every root
  partition id in ``[start, end)`` (known or not, as a list names its inputs)
  and every known overwrite member whose root range lies inside that range with
  a lower minor version;
- its **atomic update group** is the known members with the same (start, end,
  minorVersion); while fewer than ``atomicUpdateGroupSize`` are known, ids that
  no segment can have (Druid's partition ids are below 65536) stand for the
  missing ones, so the group waits for them as a listed group does.

Members that already carry the list form keep it (the lockbox writes both).
A chunk with no Druid-form member is returned as is.

>>> from events import Interval, SegmentDescriptor
>>> day = Interval.parse("2026-01-01/P1D")
>>> def ow(p, size):
...     spec = {"type": "numbered_overwrite", "partitionId": p, "startRootPartitionId": 0,
...             "endRootPartitionId": 2, "minorVersion": 1, "atomicUpdateGroupSize": size}
...     return SegmentDescriptor("ds", day, "v1", p, 1, shard_spec=spec)
>>> members = {0: SegmentDescriptor("ds", day, "v1", 0), 32768: ow(32768, 2), 32769: ow(32769, 2)}
>>> listed = as_list_form(members)
>>> listed[32768].overshadowed_segments, listed[32768].atomic_update_group
((0, 1), (32768, 32769))
>>> as_list_form({32768: ow(32768, 2)})[32768].atomic_update_group
(32768, 1000000000)
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace

from events.segment import SegmentDescriptor

#: First stand-in id for atomic update group members not known yet (above any Druid partition id).
_MISSING_BASE = 1_000_000_000


def _root_range(partition: int, seg: SegmentDescriptor) -> tuple[int, int, int]:
    spec = seg.overwrite_spec
    return (spec[0], spec[1], spec[2]) if spec is not None else (partition, partition + 1, 0)


def as_list_form(members: Mapping[int, SegmentDescriptor]) -> Mapping[int, SegmentDescriptor]:
    """The chunk's members with every Druid-form overwrite also stated in the list form (module docstring)."""
    druid = [p for p, seg in members.items()
             if seg.overwrite_spec is not None and not seg.overshadowed_segments and not seg.atomic_update_group]
    if not druid:
        return members
    ranges = {p: _root_range(p, seg) for p, seg in members.items()}
    groups: dict[tuple[int, int, int], list[int]] = {}
    for p in sorted(members):
        if members[p].overwrite_spec is not None:
            groups.setdefault(ranges[p], []).append(p)
    missing_base = {key: _MISSING_BASE + 1000 * i for i, key in enumerate(sorted(groups))}
    out = dict(members)
    for p in druid:
        seg = members[p]
        start, end, minor, size = seg.overwrite_spec or (0, 0, 0, 0)
        hidden = set(range(start, end))
        hidden.update(q for q, (s, e, m) in ranges.items() if q != p and start <= s and e <= end and m < minor)
        key = (start, end, minor)
        known = groups[key]
        stand_ins = [missing_base[key] + i for i in range(max(0, size - len(known)))]
        out[p] = replace(seg, overshadowed_segments=tuple(sorted(hidden)), atomic_update_group=(*known, *stand_ins))
    return out
