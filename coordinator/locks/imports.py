"""``segments_import_requested``: segments that exist outside (an existing Druid's metadata) become committed.

The lockbox is the one gate of what is used, imports included (docs/security.md), so an import is
a request on ``lock-requests`` answered on ``locks`` like any publish:

- one data source per request, no segment id twice;
- a segment already committed with exactly the same contents is skipped (a re-import of the same
  file changes nothing: ``alreadyImported`` when nothing is new); with other contents, refused;
- no segment may overlap a live lock of a task (an import must not race a running ingestion or
  compaction); refused with the lock named.

Accepted segments are committed as a publish's are (:meth:`LockboxState.apply`), so later
allocations, overwrites and publishes of tasks see them.

>>> from events.interval import Interval
>>> from events.segment import SegmentDescriptor
>>> from coordinator.locks.lockbox import Lockbox
>>> seg = SegmentDescriptor("wiki", Interval.parse("2026-01-01/P1D"), "v1", 0, 10)
>>> box, out = Lockbox(), []
>>> import_segments(box, SegmentsImportRequested("r1", (seg,), "druid"), out.append)
>>> type(out[0]).__name__, out[0].segments == (seg,)
('SegmentsImported', True)
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from coordinator.locks.conflicts import Emit
from events.locks import SegmentsImported, SegmentsImportRejected
from events.tasks import SegmentsImportRequested

if TYPE_CHECKING:
    from coordinator.locks.lockbox import Lockbox

__all__ = ["import_segments"]


def import_segments(box: Lockbox, req: SegmentsImportRequested, emit: Emit) -> None:
    """Decide on one import request (see the module docstring); emits one decision."""
    def reject(reason: str) -> None:
        emit(SegmentsImportRejected(request_id=req.request_id, reason=reason))

    sources = sorted({s.data_source for s in req.segments})
    if len(sources) != 1:
        return reject(f"an import names one data source, not {len(sources)} ({', '.join(sources[:5])})")
    ids = {s.id for s in req.segments}
    if len(ids) != len(req.segments):
        return reject("the request names a segment twice")
    src = box.sources.get(sources[0])
    if src is None:
        emit(SegmentsImported(request_id=req.request_id, segments=req.segments, source=req.source))
        return None
    new = []
    for i, seg in enumerate(req.segments):
        held = src.segments.get(seg.id)
        if held is None:
            new.append(seg)
        elif held != seg:
            return reject(f"segments[{i}]: segment {seg.id} is already committed with other contents")
    for i, seg in enumerate(new):
        for lock in src.locks.values():
            if lock.interval.overlaps(seg.interval):
                return reject(f"segments[{i}]: {seg.id} overlaps lock {lock.lock_id} of task {lock.task_id}")
    if not new:
        emit(SegmentsImported(request_id=req.request_id, segments=req.segments, source=req.source,
                              already_imported=True))
        return None
    emit(SegmentsImported(request_id=req.request_id, segments=tuple(new), source=req.source))
    return None
