"""Upsert tables (versioned pipeline partitions over an append and a primary data source), on ``cluster``.

An upsert table pairs an *append* data source, where every re-ingest of a
pipeline partition (for instance source x date) is appended as a new version,
with a *primary* data source re-ingested now and then with one version per
partition. Segments of both say what they hold in the descriptor field
``upsertPartitions`` (:class:`UpsertPartition`, on
:class:`~events.segment.SegmentDescriptor`). The pure fold is
:mod:`coordinator.upserts`; docs/upserts.md tells the whole story.

All three events are keyed ``upserts/<name>`` (one partition per table, in order).
"""

from __future__ import annotations

from dataclasses import dataclass

from events.interval import Interval
from events.registry import Event, event_type
from events.schema import JsonObject, wire
from events.topics import CLUSTER

DEFAULT_STALE_GRACE_MS = 900_000  #: 15 minutes, Druid's default millisToWaitBeforeDeleting
DEFAULT_CONSOLIDATION_PERIOD_MS = 86_400_000  #: daily, as seed 003 re-ingests its primary table


@dataclass(frozen=True, slots=True)
class UpsertPartition:
    """One (partition key, version) a segment holds: ``key`` maps every key column to its value; ``rows`` is
    how many rows of that version the segment holds; a ``tombstone`` deletes the key (it holds no rows)."""

    key: JsonObject = wire("key")
    version: str = wire("version")
    rows: int = wire("rows", 0, minimum=0)
    tombstone: bool = wire("tombstone", False)


@event_type("upsert_table_set", topic=CLUSTER)
@dataclass(frozen=True, slots=True)
class UpsertTableSet(Event):
    """Declare (or redefine) the upsert table ``name``. ``upsertStaleGraceMillis``: how long an append segment
    holding only superseded versions stays used (running queries finish) before it is marked unused;
    ``consolidationPeriodMillis``: how often ``consolidation_requested`` is emitted (0: never on a schedule)."""

    name: str = wire("name")
    append_data_source: str = wire("appendDataSource")
    primary_data_source: str = wire("primaryDataSource")
    key_columns: tuple[str, ...] = wire("keyColumns", non_empty=True)
    version_column: str = wire("versionColumn")
    table_type_column: str = wire("tableTypeColumn", "table_type")
    stale_grace_millis: int = wire("upsertStaleGraceMillis", DEFAULT_STALE_GRACE_MS, minimum=0)
    consolidation_period_millis: int = wire("consolidationPeriodMillis", DEFAULT_CONSOLIDATION_PERIOD_MS,
                                            minimum=0)


@event_type("upsert_consolidation_asked", topic=CLUSTER)
@dataclass(frozen=True, slots=True)
class UpsertConsolidationAsked(Event):
    """An operator asks for a consolidation of ``table`` now (``segcoord upserts consolidate``); the upsert
    agent answers with ``consolidation_requested``."""

    table: str = wire("table")


@dataclass(frozen=True, slots=True)
class ConsolidationInterval:
    """A primary interval to re-ingest and the (key, version) pairs to take into it from the append table
    (a tombstone pair: the key is left out of the primary)."""

    interval: Interval = wire("interval")
    partitions: tuple[UpsertPartition, ...] = wire("partitions")


@event_type("consolidation_requested", topic=CLUSTER)
@dataclass(frozen=True, slots=True)
class ConsolidationRequested(Event):
    """The primary intervals of ``table`` that need re-ingesting, each with the keys and versions to take.
    When the primary publishes them (its segments naming those versions), the append data they cover is
    superseded and cleaned."""

    table: str = wire("table")
    intervals: tuple[ConsolidationInterval, ...] = wire("intervals")
    reason: str = wire("reason", allow_empty=True)
