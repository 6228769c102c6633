"""Operators' marks: ``segcoord segments mark-used|mark-unused`` go through the lockbox, which seals them.

Marks change what is used, so only the coordinator writes them (docs/security.md). An operator holds
no publish key: the CLI sends a request on ``lock-requests`` and the lockbox decides:

- ``segments_mark_unused_requested``: every id must name a segment of the request's data source
  (ids the lockbox never committed are marked too: Druid's markUnused changes what it finds and the
  folds ignore unknown ids); the decision is the ``segments_marked_unused`` itself;
- ``segments_mark_used_requested``: each segment must be of the request's data source, named once,
  and committed earlier by this lockbox (a publish or an import) with exactly these contents, so a
  mark cannot make up a segment the lockbox never accepted (that is what an import is for); the
  decision is the ``segments_marked_used`` itself;
- anything else: ``segments_mark_rejected`` on ``locks`` with the reason.

The lockbox agent writes an accepted mark to ``segments`` sealed under the publish key
(:func:`coordinator.locks.seal.seal_event`). The lockbox's own state does not change: what is
committed stays committed (a mark-used later needs it).

>>> from events.interval import Interval
>>> from events.segment import SegmentDescriptor
>>> from coordinator.locks.lockbox import Lockbox
>>> seg = SegmentDescriptor("wiki", Interval.parse("2026-01-01/P1D"), "v1", 0, 10)
>>> box, out = Lockbox(), []
>>> mark_used(box, SegmentsMarkUsedRequested("r1", "wiki", (seg,), "again"), out.append)
>>> out[0].reason
'segments[0]: wiki_2026-01-01T00:00:00.000Z_2026-01-02T00:00:00.000Z_v1 was never committed by the lockbox'
>>> mark_unused(box, SegmentsMarkUnusedRequested("r2", "wiki", (str(seg.id),), "old"), out.append)
>>> type(out[1]).__name__, out[1].segment_ids == (str(seg.id),)
('SegmentsMarkedUnused', True)
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from coordinator.locks.conflicts import Emit
from events.locks import SegmentsMarkRejected
from events.segment import SegmentId, SegmentIdError
from events.segments import SegmentsMarkedUnused, SegmentsMarkedUsed
from events.tasks import SegmentsMarkUnusedRequested, SegmentsMarkUsedRequested

if TYPE_CHECKING:
    from coordinator.locks.lockbox import Lockbox

__all__ = ["mark_unused", "mark_used"]


def mark_unused(box: Lockbox, req: SegmentsMarkUnusedRequested, emit: Emit) -> None:
    """Decide on one mark-unused request: the mark, or a rejection naming the first wrong id."""
    del box  # marking unused needs no lock state; the parameter keeps the lockbox's handler shape
    for i, text in enumerate(req.segment_ids):
        try:
            ds = SegmentId.parse(text).data_source
        except SegmentIdError as e:
            return emit(SegmentsMarkRejected(request_id=req.request_id, reason=f"segmentIds[{i}]: {e}"))
        if ds != req.data_source:
            return emit(SegmentsMarkRejected(request_id=req.request_id,
                                             reason=f"segmentIds[{i}]: {text} is not of data source {req.data_source}"))
    if len(set(req.segment_ids)) != len(req.segment_ids):
        return emit(SegmentsMarkRejected(request_id=req.request_id, reason="the request names a segment twice"))
    emit(SegmentsMarkedUnused(segment_ids=req.segment_ids, reason=req.reason))
    return None


def mark_used(box: Lockbox, req: SegmentsMarkUsedRequested, emit: Emit) -> None:
    """Decide on one mark-used request: the mark, or a rejection naming the first segment refused."""
    def reject(reason: str) -> None:
        emit(SegmentsMarkRejected(request_id=req.request_id, reason=reason))

    if len({s.id for s in req.segments}) != len(req.segments):
        return reject("the request names a segment twice")
    src = box.sources.get(req.data_source)
    for i, seg in enumerate(req.segments):
        if seg.data_source != req.data_source:
            return reject(f"segments[{i}]: {seg.id} is not of data source {req.data_source}")
        held = src.segments.get(seg.id) if src is not None else None
        if held is None:
            return reject(f"segments[{i}]: {seg.id} was never committed by the lockbox")
        if held != seg:
            return reject(f"segments[{i}]: {seg.id} was committed with other contents")
    emit(SegmentsMarkedUsed(segments=req.segments, reason=req.reason))
    return None
