"""Segment identity and the segment descriptor (Druid's DataSegment JSON).

A segment id is Druid's ``dataSource_start_end_version`` with ``_partitionId``
appended when the partition is not 0. Data source names may contain
underscores; the two ISO timestamps anchor the parse.

>>> sid = SegmentId("wiki_edits", Interval.parse("2026-01-01/2026-01-02"), "v1", 3)
>>> str(sid)
'wiki_edits_2026-01-01T00:00:00.000Z_2026-01-02T00:00:00.000Z_v1_3'
>>> SegmentId.parse(str(sid)) == sid
True
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar

from events.instant import InstantError, parse_instant
from events.interval import Interval
from events.limits import MAX_OVERWRITE_GENERATIONS_PER_CHUNK, MAX_PARTITION_REFERENCES
from events.schema import EventValidationError, JsonObject, JsonValue, wire
from events.upserts import UpsertPartition

#: Druid's first partition id of segments overwritten under segment locks (NumberedOverwriteShardSpec).
OVERWRITE_PARTITION_START = 32768


class SegmentIdError(ValueError):
    """Text that is not a Druid segment id."""


@dataclass(frozen=True, slots=True, order=True)
class SegmentId:
    """Identity of a segment: (dataSource, interval, version, partitionId). Ordered field by field."""

    data_source: str
    interval: Interval
    version: str
    partition_id: int = 0
    _hash: int = field(init=False, repr=False, compare=False, default=0)
    _text: str = field(init=False, repr=False, compare=False, default="")

    def __post_init__(self) -> None:
        # Ids key every map of the timeline: hash once, not on every lookup.
        object.__setattr__(self, "_hash", hash((self.data_source, self.interval.start, self.interval.end,
                                                self.version, self.partition_id)))

    def __hash__(self) -> int:
        return self._hash

    @property
    def sort_key(self) -> tuple[str, int, int, str, int]:
        """The id's order as a plain tuple (sorting by it compares in C; same order as the dataclass's)."""
        return (self.data_source, self.interval.start, self.interval.end, self.version, self.partition_id)

    def __str__(self) -> str:
        text = self._text  # built once: outputs, stored facts and the id index all ask for it
        if not text:
            base = f"{self.data_source}_{self.interval.iso().replace('/', '_')}_{self.version}"
            text = base if self.partition_id == 0 else f"{base}_{self.partition_id}"
            object.__setattr__(self, "_text", text)
        return text

    @staticmethod
    def parse(text: str, data_source: str | None = None) -> SegmentId:
        """Parse Druid's id text; pass ``data_source`` when known to remove any ambiguity.

        Without it, the data source ends before the first pair of consecutive
        parts that both parse as instants. After the end instant, a trailing
        integer part is the partition when a version part precedes it (Druid's
        convention: ``_0`` is never written, so ``v_1`` is version ``v``, partition 1).
        """
        if not isinstance(text, str) or not text:
            raise SegmentIdError(f"{text!r} is not a segment id")
        if data_source is not None:
            prefix = data_source + "_"
            if not text.startswith(prefix):
                raise SegmentIdError(f"{text!r} is not a segment id of data source {data_source!r}")
            candidates = [(data_source, text[len(prefix):].split("_"))]
        else:
            parts = text.split("_")
            candidates = [("_".join(parts[:i]), parts[i:]) for i in range(1, len(parts) - 2)]
        for ds, rest in candidates:
            if len(rest) < 3 or not ds:
                continue
            try:
                start, end = parse_instant(rest[0]), parse_instant(rest[1])
            except InstantError:
                continue
            if "T" not in rest[0] or "T" not in rest[1] or end < start:
                continue
            tail = rest[2:]
            partition = 0
            if len(tail) > 1 and tail[-1].isdigit():
                partition = int(tail[-1])
                tail = tail[:-1]
            version = "_".join(tail)
            if not version:
                continue
            return SegmentId(ds, Interval(start, end), version, partition)
        raise SegmentIdError(f"{text!r} is not a segment id (expected dataSource_start_end_version[_partition])")


@dataclass(frozen=True, slots=True)
class SegmentDescriptor:
    """A published segment as Druid's DataSegment JSON describes it.

    Invariants: a non-empty interval; ``partitionId >= 0``; ``size >= 0``;
    ``overshadowedSegments`` and ``atomicUpdateGroup`` hold partition ids of the
    same (dataSource, interval, version) chunk. ``loadSpec``, ``shardSpec``,
    ``dimensions``, ``metrics`` and ``partitionVersions`` are opaque JSON, kept
    as given and never mutated. When ``partitionId`` is absent on the wire it is
    taken from ``shardSpec.partitionNum`` (Druid's own field; ``partitionId`` of a
    ``numbered_overwrite`` spec), else 0. A ``numbered_overwrite`` shard spec
    (:attr:`overwrite_spec`) says in Druid's form what ``overshadowedSegments``
    and ``atomicUpdateGroup`` say in the proposal's list form; the timeline reads
    either (:mod:`coordinator.timeline.overwrite`). ``upsertPartitions`` (optional, additive: no schema
    bump) lists the (partition key, version) pairs a segment of an upsert table holds (:mod:`events.upserts`).
    """

    data_source: str = wire("dataSource")
    interval: Interval = wire("interval")
    version: str = wire("version")
    partition_id: int = wire("partitionId", 0, minimum=0)
    size: int = wire("size", 0, minimum=0)
    overshadowed_segments: tuple[int, ...] = wire("overshadowedSegments", (), minimum=0,
                                                  max_items=MAX_PARTITION_REFERENCES)
    atomic_update_group: tuple[int, ...] = wire("atomicUpdateGroup", (), minimum=0, max_items=MAX_PARTITION_REFERENCES)
    load_spec: JsonObject | None = wire("loadSpec", None)
    shard_spec: JsonObject | None = wire("shardSpec", None)
    dimensions: JsonValue | None = wire("dimensions", None)
    metrics: JsonValue | None = wire("metrics", None)
    partition_versions: JsonValue | None = wire("partitionVersions", None)
    upsert_partitions: tuple[UpsertPartition, ...] | None = wire("upsertPartitions", None)

    _id: SegmentId | None = field(init=False, repr=False, compare=False, default=None)

    @property
    def id(self) -> SegmentId:
        """The segment's id, built once (descriptors are immutable)."""
        sid = self._id
        if sid is None:
            sid = SegmentId(self.data_source, self.interval, self.version, self.partition_id)
            object.__setattr__(self, "_id", sid)
        return sid

    @property
    def core_partitions(self) -> int:
        """Druid's NumberedShardSpec ``partitions`` (numCorePartitions); 0 when none is declared."""
        spec = self.shard_spec
        if spec is None:
            return 0
        n = spec.get("partitions", 0)
        return n if isinstance(n, int) and not isinstance(n, bool) and n > 0 else 0

    @property
    def overwrite_spec(self) -> tuple[int, int, int, int] | None:
        """(startRootPartitionId, endRootPartitionId, minorVersion, atomicUpdateGroupSize) of a Druid
        ``numbered_overwrite`` shard spec, else None. Root partitions ``[start, end)`` of the same version with a
        lower minor version are what it overwrites; its atomic update group is every segment of the chunk with
        the same (start, end, minorVersion), ``atomicUpdateGroupSize`` of them."""
        spec = self.shard_spec
        if spec is None or spec.get("type") != "numbered_overwrite":
            return None
        fields: list[int] = []
        for key in ("startRootPartitionId", "endRootPartitionId", "minorVersion", "atomicUpdateGroupSize"):
            value = spec.get(key)
            if not isinstance(value, int) or isinstance(value, bool):
                return None
            fields.append(value)
        return fields[0], fields[1], fields[2], fields[3]

    #: ``_from_wire`` returns its argument unchanged when this key is present (the generated decoder skips the call)
    _wire_complete_with: ClassVar[str] = "partitionId"

    @staticmethod
    def _from_wire(obj: Mapping[str, Any]) -> Mapping[str, Any]:
        if "partitionId" not in obj:
            spec = obj.get("shardSpec")
            if isinstance(spec, dict):
                for key in ("partitionNum", "partitionId"):  # numbered / numbered_overwrite
                    if isinstance(spec.get(key), int) and not isinstance(spec.get(key), bool):
                        return {**obj, "partitionId": spec[key]}
        return obj

    def _check(self, path: str) -> None:
        shard, interval = self.shard_spec, self.interval
        if interval.start != interval.end and (shard is None or shard.get("type") != "numbered_overwrite"):
            return  # the common case, decided without the calls below
        if self.interval.is_empty():
            raise EventValidationError(f"{path}.interval", self.interval.iso(), "a segment interval must not be empty")
        spec = self.overwrite_spec
        if spec is not None:  # Druid's ids: roots in [0, 32768), minor version and group size are shorts
            start, end, minor, size = spec
            if not (0 <= start < end <= OVERWRITE_PARTITION_START and 0 <= minor < 1 << 15 and 0 < size < 1 << 15):
                raise EventValidationError(
                    f"{path}.shardSpec", dict(self.shard_spec or {}),
                    f"a numbered_overwrite spec needs 0 <= startRootPartitionId < endRootPartitionId <= "
                    f"{OVERWRITE_PARTITION_START}, 0 <= minorVersion < 32768 and 0 < atomicUpdateGroupSize < 32768")


def check_overwrite_generations(segments: tuple[SegmentDescriptor, ...], path: str) -> None:
    """Refuse more than :data:`~events.limits.MAX_OVERWRITE_GENERATIONS_PER_CHUNK` distinct Druid overwrite
    generations (root range and minor version) in one time chunk of one event (``path``: the list's path)."""
    seen: dict[tuple[int, int, str], set[tuple[int, int, int]]] = {}
    for i, seg in enumerate(segments):
        shard = seg.shard_spec
        if shard is None or shard.get("type") != "numbered_overwrite":
            continue
        spec = seg.overwrite_spec
        if spec is None:
            continue
        chunk = seen.setdefault((seg.interval.start, seg.interval.end, seg.version), set())
        chunk.add(spec[:3])
        if len(chunk) > MAX_OVERWRITE_GENERATIONS_PER_CHUNK:
            raise EventValidationError(
                f"{path}[{i}].shardSpec", dict(shard),
                f"one time chunk may hold at most {MAX_OVERWRITE_GENERATIONS_PER_CHUNK} numbered_overwrite "
                f"generations (root range and minorVersion) per event")

