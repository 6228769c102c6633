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
  minorVersion); while fewer than ``atomicUpdateGroupSize`` are known, an id
  that no segment can have stands for the missing ones, so the group waits for
  them as a listed group does.

**Size: linear in the members, not in the ranges.** The ids of a range that
are neither a member nor named in any atomic update group all act alike in the
chunk rules: each is never servable (so a group listing one is servable only
when complete) and nothing online has it (so hiding it hides nothing that
exists). The list form therefore names, of ``[start, end)``, the members and
declared ids inside it, plus one stand-in (:data:`UNDECLARED`, negative: no
decoded id is) when the range holds any other id; ``ChunkResolution.hidden``
then holds that stand-in instead of those ids, which is all the timeline reads
of it (whether a member is hidden). Likewise one negative stand-in per
(start, end, minorVersion) stands for all the missing members of a group
(none can be online or listed, so their number does not matter). Members of one
generation share one computed list and one group tuple. Before this, a root
range of 32,768 was expanded for every member: a publish of 1,000 such
segments took 17 s and 1.3 GB, and atomicUpdateGroupSize stand-ins collided
between generations when above 1,000.

Members that already carry the list form keep it (the lockbox writes both).
A chunk with no Druid-form member is returned as is.

>>> from events import Interval, SegmentDescriptor
>>> day = Interval.parse("2026-01-01/P1D")
>>> def ow(p, size):
...     spec = {"type": "numbered_overwrite", "partitionId": p, "startRootPartitionId": 0,
...             "endRootPartitionId": 2, "minorVersion": 1, "atomicUpdateGroupSize": size}
...     return SegmentDescriptor("ds", day, "v1", p, 1, shard_spec=spec)
>>> roots = {p: SegmentDescriptor("ds", day, "v1", p) for p in (0, 1)}
>>> members = {**roots, 32768: ow(32768, 2), 32769: ow(32769, 2)}
>>> listed = as_list_form(members)
>>> listed[32768].overshadowed_segments, listed[32768].atomic_update_group
((0, 1), (32768, 32769))
>>> as_list_form({32768: ow(32768, 2)})[32768].atomic_update_group
(32768, -2)
>>> as_list_form({0: roots[0], 32768: ow(32768, 2)})[32768].overshadowed_segments  # root 1: not known
(-1, 0)
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Mapping
from dataclasses import replace

from events.segment import SegmentDescriptor

#: Stands for every id of a root range that is neither a member nor declared in an atomic update group.
UNDECLARED = -1


def _root_range(partition: int, seg: SegmentDescriptor) -> tuple[int, int, int]:
    spec = seg.overwrite_spec
    return (spec[0], spec[1], spec[2]) if spec is not None else (partition, partition + 1, 0)


def as_list_form(members: Mapping[int, SegmentDescriptor]) -> Mapping[int, SegmentDescriptor]:
    """The chunk's members with every Druid-form overwrite also stated in the list form (module docstring)."""
    druid = [p for p, seg in members.items()
             if seg.overwrite_spec is not None and not seg.overshadowed_segments and not seg.atomic_update_group]
    if not druid:
        return members
    groups: dict[tuple[int, int, int], list[int]] = {}  # (start, end, minor) -> overwrite members, by id
    for p in sorted(members):
        if members[p].overwrite_spec is not None:
            groups.setdefault(_root_range(p, members[p]), []).append(p)
    rewritten = set(druid)
    declared = set(members)
    for p, seg in members.items():
        if p not in rewritten:
            declared.update(seg.atomic_update_group)
    ids = sorted(declared)  # what a range's ids may be told apart by: members and declared ids
    keys = sorted(groups)
    stand_in = {key: -2 - i for i, key in enumerate(keys)}  # below UNDECLARED
    lists: dict[tuple[int, int, int], tuple[tuple[int, ...], tuple[int, ...]]] = {}
    out = dict(members)
    for p in druid:
        seg = members[p]
        start, end, minor, size = seg.overwrite_spec or (0, 0, 0, 0)
        key = (start, end, minor)
        found = lists.get(key)
        if found is None:
            lo, hi = bisect_left(ids, start), bisect_left(ids, end)
            hidden = set(ids[lo:hi])
            if hi - lo < end - start:
                hidden.add(UNDECLARED)
            for s, e, m in keys:  # earlier overwrite generations inside the range
                if start <= s and e <= end and m < minor:
                    hidden.update(groups[(s, e, m)])
            known = groups[key]
            group = (*known, stand_in[key]) if size > len(known) else tuple(known)
            found = lists[key] = (tuple(sorted(hidden)), group)
        out[p] = replace(seg, overshadowed_segments=found[0], atomic_update_group=found[1])
    return out
