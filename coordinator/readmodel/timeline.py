"""Timeline answers: segments with their state, and the queryable view of an interval."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from coordinator.placement.state import PlacementState
from coordinator.timeline.timelines import Timelines
from events.interval import Interval
from events.segment import SegmentId
from events.visibility import SegmentState

#: The states ``segcoord segments --state`` filters on (``absent`` segments are never listed).
STATES = ("visible", "standby", "overshadowed", "offline")


def segments(tl: Timelines, p: PlacementState, data_source: str, interval: Interval | None = None,
             state: str | None = None) -> list[dict[str, Any]]:
    """A data source's known segments with their timeline state and the servers holding them, in id order;
    only those overlapping ``interval`` and in ``state`` when given."""
    return segment_rows(states_of(tl, data_source), p, interval, state)


def states_of(tl: Timelines, data_source: str) -> dict[SegmentId, SegmentState]:
    """The data source's known segments and their timeline states (empty for an unknown data source)."""
    return tl.timeline(data_source).states() if data_source in tl.data_sources() else {}


def segment_rows(known: Mapping[SegmentId, SegmentState], p: PlacementState, interval: Interval | None = None,
                 state: str | None = None) -> list[dict[str, Any]]:
    """:func:`segments` from states already read off the timeline (the worker reads them on the thread that folds
    the timeline, and the rest on the planner's)."""
    out = []
    for sid, st in known.items():
        if st == "absent" or (state is not None and st != state):
            continue
        if interval is not None and not (sid.interval.start < interval.end and interval.start < sid.interval.end):
            continue
        out.append({"segment": str(sid), "interval": sid.interval.iso(), "version": sid.version,
                    "partition": sid.partition_id, "state": st, "used": sid in p.used,
                    "size": p.size(sid), "servers": sorted(p.holders.get(sid, ()))})
    return sorted(out, key=lambda e: e["segment"])


def lookup(tl: Timelines, data_source: str, interval: Interval) -> list[dict[str, Any]]:
    """The queryable view: the visible segments serving ``interval`` and the parts each serves, in time order."""
    return [{"segment": str(e.segment_id), "intervals": [i.iso() for i in e.intervals]}
            for e in tl.lookup(data_source, interval)]
