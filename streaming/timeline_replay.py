"""``segcoord timeline replay|lookup``: fold a JSON-lines file of segment events and show the timeline."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from coordinator.timeline.timelines import Timelines
from events.interval import Interval, IntervalError
from events.schema import EventValidationError
from streaming.jsonlines import JsonLinesError, read_numbered_envelopes


def replay(path: Path, at: int | None = None) -> Timelines:
    """Apply the file's events up to line ``at`` (inclusive); errors name the line and the field."""
    timelines = Timelines()
    for lineno, env in read_numbered_envelopes(path, until_line=at):
        try:
            timelines.apply(env.event)
        except EventValidationError as e:
            raise JsonLinesError(f"{path}:{lineno}: {e}") from None
    return timelines


def replay_json(timelines: Timelines) -> dict[str, Any]:
    return {"segments": timelines.states(), "visible": timelines.visible()}


def replay_text(timelines: Timelines) -> str:
    lines = [f"{state:12s} {sid}" for sid, state in timelines.states().items()]
    for ds, ids in timelines.visible().items():
        lines.append(f"visible in {ds}: {len(ids)} segment(s)")
        lines.extend(f"  {sid}" for sid in ids)
    return "\n".join(lines) if lines else "no segments"


def parse_interval(text: str) -> Interval:
    try:
        return Interval.parse(text)
    except IntervalError as e:
        raise JsonLinesError(f"--interval: {e}") from None


def lookup_json(timelines: Timelines, data_source: str, interval: Interval) -> list[dict[str, Any]]:
    return [{"segment": str(e.segment_id), "intervals": [i.iso() for i in e.intervals]}
            for e in timelines.lookup(data_source, interval)]
