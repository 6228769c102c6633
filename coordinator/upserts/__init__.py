"""Upsert tables by versioned pipeline partitions (seed 003, Singular's "fast upserts for Apache Druid").

Every re-ingest of a pipeline partition (the key: for instance source x date) is
appended to an *append* data source as a new version; a *primary* data source is
re-ingested now and then (consolidation) with one version per key. Queries keep
only the latest version of each key, through a Druid filter this package builds.

- :mod:`coordinator.upserts.table`: the table definition and partition keys;
- :mod:`coordinator.upserts.state`: the one fold (versions kept from visibility);
- :mod:`coordinator.upserts.strategy`: the query strategy and its Druid filter;
- :mod:`coordinator.upserts.decide`: cleanup of stale segments and consolidation requests;
- :mod:`coordinator.upserts.replay`: the offline replay (timeline + upsert fold over envelopes).

Pure: no I/O, no clock. docs/upserts.md tells the design.
"""

from coordinator.upserts.decide import cleanup_due, consolidation_due
from coordinator.upserts.state import Latest, UpsertState
from coordinator.upserts.strategy import Strategy, build_filter, filter_terms, naive_filter
from coordinator.upserts.table import Key, UpsertTable, UpsertTableError

__all__ = [
    "Key",
    "Latest",
    "Strategy",
    "UpsertState",
    "UpsertTable",
    "UpsertTableError",
    "build_filter",
    "cleanup_due",
    "consolidation_due",
    "filter_terms",
    "naive_filter",
]
