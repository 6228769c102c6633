"""Builders for upsert tests: a table, re-ingests as append segments, consolidations as primary segments, and a
log that folds through the offline replay (the timeline decides visibility, as in the service)."""

from __future__ import annotations

from dataclasses import dataclass, field

from coordinator.upserts.replay import UpsertReplay
from events import (
    Envelope,
    Event,
    Instant,
    Interval,
    SegmentAnnounced,
    SegmentDescriptor,
    SegmentsMarkedUnused,
    SegmentsPublished,
    SegmentUnannounced,
    UpsertPartition,
    UpsertTableSet,
    parse_instant,
)

APPEND, PRIMARY = "ads_append", "ads_primary"


def table_set(grace_ms: int = 0, period_ms: int = 0, name: str = "ads") -> UpsertTableSet:
    return UpsertTableSet(name=name, append_data_source=APPEND, primary_data_source=PRIMARY,
                          key_columns=("source", "date"), version_column="version",
                          stale_grace_millis=grace_ms, consolidation_period_millis=period_ms)


def day(date: str) -> Interval:
    return Interval.parse(f"{date}/P1D")


def part(source: str, date: str, version: str, rows: int = 10, tombstone: bool = False) -> UpsertPartition:
    return UpsertPartition(key={"source": source, "date": date}, version=version, rows=rows, tombstone=tombstone)


@dataclass
class Log:
    """Envelopes in log order, each at the next millisecond; ``replay()`` folds them all."""

    envelopes: list[Envelope[Event]] = field(default_factory=list)
    now: int = parse_instant("2021-01-03T00:00:00Z")
    appended: int = 0

    def add(self, event: Event, key: str = "k") -> Log:
        self.now += 1
        self.envelopes.append(Envelope(event, f"e{len(self.envelopes)}", Instant(self.now), key))
        return self

    def reingest(self, date: str, *parts: UpsertPartition, announce: bool = True) -> SegmentDescriptor:
        """An append segment (appended to the day's chunk: one Druid version, the next partition id)."""
        self.appended += 1
        seg = SegmentDescriptor(APPEND, day(date), "2021-01-01T00:00:00.000Z", self.appended, 100,
                                upsert_partitions=parts)
        self.add(SegmentsPublished(task_id=f"append-{self.appended}", segments=(seg,)), APPEND)
        if announce:
            self.announce(seg)
        return seg

    def primary(self, date: str, version: str, *parts: UpsertPartition, announce: bool = True) -> SegmentDescriptor:
        """A primary segment replacing the day's chunk (a new Druid version overshadows the old one)."""
        seg = SegmentDescriptor(PRIMARY, day(date), version, 0, 100, upsert_partitions=parts)
        self.add(SegmentsPublished(task_id=f"primary-{version}", segments=(seg,)), PRIMARY)
        if announce:
            self.announce(seg)
        return seg

    def announce(self, seg: SegmentDescriptor, server: str = "h1") -> None:
        self.add(SegmentAnnounced(server=server, segment=seg), seg.data_source)

    def unannounce(self, seg: SegmentDescriptor, server: str = "h1") -> None:
        self.add(SegmentUnannounced(server=server, segment_id=str(seg.id)), seg.data_source)

    def unused(self, *segs: SegmentDescriptor) -> None:
        self.add(SegmentsMarkedUnused(segment_ids=tuple(str(s.id) for s in segs), reason="test"), segs[0].data_source)

    def replay(self) -> UpsertReplay:
        return UpsertReplay().apply_all(self.envelopes)
