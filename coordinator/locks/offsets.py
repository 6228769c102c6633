"""Stream offsets committed with a publish, compared and merged per partition (Druid's SeekableStream metadata).

A task group of a streaming supervisor owns some of the stream's partitions;
partitions are added over time. So a publish's offsets never have to equal the
stored ones as a whole:

- :func:`matches` (Druid's ``matches``): the start offsets agree with the
  stored ones on every partition present in both (and on the stream name when
  both name one). Partitions only one side knows are fine.
- :func:`plus` (Druid's ``plus``): the end offsets merged into the stored ones;
  partitions the publish does not name keep their stored offset.
- :func:`moves_backwards`: a partition whose end offset is below its start
  offset, or below the stored offset: such a publish is refused, so stored
  offsets never move backwards.

Accepted shapes: a flat ``{partition: offset}`` map; ``{"partitions": {...}}``;
Druid's ``{"type": "kafka", "partitions": {"stream": s,
"partitionSequenceNumberMap" | "partitionOffsetMap": {...}}}``. Offsets are
integers or digit strings (Kinesis sequence numbers), compared as numbers.
Any other JSON is opaque: it must equal the stored value, and the end value
replaces it.

>>> matches({"p0": 100, "p1": 50}, {"p1": 50, "p2": 0})
True
>>> matches({"p0": 100}, {"p0": 90})
False
>>> plus({"p0": 100, "p1": 50}, {"p1": 80, "p2": 10})
{'p0': 100, 'p1': 80, 'p2': 10}
>>> moves_backwards({"p0": 200}, {"p0": 200}, {"p0": 150})
'p0'
"""

from __future__ import annotations

from typing import Any

_MAP_KEYS = ("partitionSequenceNumberMap", "partitionOffsetMap")
_STREAM_KEYS = ("stream", "topic")


def _split(meta: Any) -> tuple[dict[str, Any], str | None] | None:
    """(partition -> offset, stream name) of a known shape, else None (opaque)."""
    if not isinstance(meta, dict):
        return None
    inner = meta.get("partitions")
    if isinstance(inner, dict):
        for key in _MAP_KEYS:
            if isinstance(inner.get(key), dict):
                stream = next((inner[k] for k in _STREAM_KEYS if isinstance(inner.get(k), str)), None)
                return dict(inner[key]), stream
        return dict(inner), None
    if "partitions" in meta or "type" in meta:
        return None
    return dict(meta), None


def _join(template: Any, offsets: dict[str, Any]) -> Any:
    """``offsets`` in the shape of ``template``."""
    if isinstance(template, dict) and isinstance(template.get("partitions"), dict):
        inner = dict(template["partitions"])
        for key in _MAP_KEYS:
            if isinstance(inner.get(key), dict):
                inner[key] = offsets
                return {**template, "partitions": inner}
        return {**template, "partitions": offsets}
    return offsets


def _number(offset: Any) -> int | None:
    if isinstance(offset, bool):
        return None
    if isinstance(offset, int):
        return offset
    if isinstance(offset, str) and offset.isdigit():
        return int(offset)
    return None


def matches(stored: Any, start: Any) -> bool:
    """Whether ``start`` agrees with ``stored`` on every partition both name (see the module docstring)."""
    a, b = _split(stored), _split(start)
    if a is None or b is None:
        return bool(stored == start)
    (sa, stream_a), (sb, stream_b) = a, b
    if stream_a is not None and stream_b is not None and stream_a != stream_b:
        return False
    return all(sa[p] == sb[p] or (_number(sa[p]) is not None and _number(sa[p]) == _number(sb[p]))
               for p in sa.keys() & sb.keys())


def plus(stored: Any, end: Any) -> Any:
    """``end`` merged into ``stored`` per partition, in ``end``'s shape; ``end`` itself when nothing is stored."""
    if stored is None:
        return end
    a, b = _split(stored), _split(end)
    if a is None or b is None:
        return end
    merged = dict(a[0])
    merged.update(b[0])
    return _join(end, {k: merged[k] for k in sorted(merged)})


def moves_backwards(stored: Any, start: Any, end: Any) -> str | None:
    """The first partition (sorted) whose end offset is below its start or stored offset, if any."""
    e = _split(end)
    if e is None:
        return None
    floors: dict[str, int] = {}
    for meta in (stored, start):
        split = _split(meta) if meta is not None else None
        for p, offset in (split[0] if split is not None else {}).items():
            n = _number(offset)
            if n is not None:
                floors[p] = max(floors.get(p, n), n)
    for p in sorted(e[0]):
        n = _number(e[0][p])
        if n is not None and p in floors and n < floors[p]:
            return p
    return None
