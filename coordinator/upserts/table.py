"""An upsert table's definition and its partition keys.

A partition key is kept in one canonical, table-independent form: the sorted
tuple of ``(column, value)`` pairs, values as text (Druid's selector filters
compare strings). A segment's ``upsertPartitions`` entry belongs to a table when
its key names exactly the table's key columns.

>>> t = UpsertTable.of(UpsertTableSet(name="ads", append_data_source="ads_a", primary_data_source="ads_p",
...                                   key_columns=("source", "date"), version_column="version"))
>>> k = canonical_key({"source": "Facebook", "date": "2021-01-01"}, "p")
>>> k
(('date', '2021-01-01'), ('source', 'Facebook'))
>>> t.values(k)
('Facebook', '2021-01-01')
>>> t.role_of("ads_a"), t.role_of("wiki")
('append', None)
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

from events.upserts import UpsertTableSet

Role = Literal["append", "primary"]
Key = tuple[tuple[str, str], ...]


class UpsertTableError(ValueError):
    """A partition entry that does not fit its table; the text names the field path and the reason."""


def canonical_key(key: Mapping[str, Any], path: str) -> Key:
    """The sorted ``(column, text value)`` pairs of a key object; strings and integers only."""
    if not key:
        raise UpsertTableError(f"{path}: must name at least one key column")
    out: list[tuple[str, str]] = []
    for column, value in key.items():
        if isinstance(value, bool) or not isinstance(value, str | int):
            raise UpsertTableError(f"{path}.{column}: must be a string or an integer (got {value!r})")
        out.append((column, str(value)))
    out.sort()
    return tuple(out)


def key_object(key: Key) -> dict[str, str]:
    return dict(key)


@dataclass(frozen=True, slots=True)
class UpsertTable:
    """Invariants: the append and primary data sources differ; key columns are distinct and differ from the
    version and table-type columns."""

    name: str
    append: str
    primary: str
    key_columns: tuple[str, ...]
    version_column: str
    table_type_column: str
    stale_grace_ms: int
    consolidation_period_ms: int

    @staticmethod
    def of(event: UpsertTableSet) -> UpsertTable:
        """The table an ``upsert_table_set`` declares; raises :class:`UpsertTableError` naming the field."""
        if event.append_data_source == event.primary_data_source:
            raise UpsertTableError("payload.primaryDataSource: must differ from appendDataSource "
                                   f"({event.primary_data_source!r})")
        if len(set(event.key_columns)) != len(event.key_columns):
            raise UpsertTableError(f"payload.keyColumns: columns must be distinct (got {list(event.key_columns)})")
        for field, column in (("versionColumn", event.version_column), ("tableTypeColumn", event.table_type_column)):
            if column in event.key_columns:
                raise UpsertTableError(f"payload.{field}: {column!r} is also a key column")
        if event.version_column == event.table_type_column:
            raise UpsertTableError("payload.tableTypeColumn: must differ from versionColumn")
        return UpsertTable(event.name, event.append_data_source, event.primary_data_source, event.key_columns,
                           event.version_column, event.table_type_column, event.stale_grace_millis,
                           event.consolidation_period_millis)

    def role_of(self, data_source: str) -> Role | None:
        if data_source == self.append:
            return "append"
        if data_source == self.primary:
            return "primary"
        return None

    def fits(self, key: Key) -> bool:
        """Whether the key names exactly this table's key columns."""
        return len(key) == len(self.key_columns) and {c for c, _ in key} == set(self.key_columns)

    def values(self, key: Key) -> tuple[str, ...]:
        """The key's values in key-column order (the key must fit)."""
        d = dict(key)
        return tuple(d[c] for c in self.key_columns)

    def misfit(self, key: Key) -> str:
        return f"key columns {sorted(c for c, _ in key)} are not the table's {sorted(self.key_columns)}"
