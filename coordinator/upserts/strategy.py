"""The query strategy of an upsert table and its Druid native filter (seed 003's two-part shape).

The filter keeps, of the rows of both data sources (told apart by the constant
table-type column, ``append`` / ``primary``), exactly the latest version of every
live key:

- the **append part**: ``table_type = append AND (OR over groups)``, one group per
  (values of every key column but the first, version):
  ``col2 = v2 AND ... AND version = V AND col1 IN (...)``; tombstoned keys are
  left out (a deleted key has no rows);
- the **primary part**: ``table_type = primary AND NOT (OR over groups)``, one
  group per (values of every key column but the first): ``col2 = v2 AND ... AND
  col1 IN (...)``, the keys whose primary data is superseded (every fresh key,
  tombstones included).

With key columns ``source, date`` that is seed 003's shape grouped by date:
``date = d AND version = V AND source IN (...)`` and
``NOT (date = d AND source IN (...))``. Both parts grow with the append
table's *fresh* keys only, never with the primary's history. Only Druid's
``and``, ``or``, ``not``, ``selector`` and ``in`` filters are used; a one-value
``in`` is a ``selector``, a one-field ``and`` / ``or`` is its field. Output order
is sorted, so the same strategy gives the same JSON.

>>> from coordinator.upserts.table import UpsertTable
>>> t = UpsertTable("ads", "ads_a", "ads_p", ("source", "date"), "version", "table_type", 0, 0)
>>> k = (("date", "2021-01-01"), ("source", "Facebook"))
>>> f = build_filter(t, {k: Latest("ver1", False, False, ("s",))})
>>> f["type"], [p["fields"][0]["value"] for p in f["fields"]]
('or', ['append', 'primary'])
>>> filter_terms(f)
7
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from coordinator.upserts.state import Latest
from coordinator.upserts.table import Key, UpsertTable, key_object
from events.interval import Interval

Filter = dict[str, Any]


def selector(dimension: str, value: str) -> Filter:
    return {"type": "selector", "dimension": dimension, "value": value}


def in_or_selector(dimension: str, values: Iterable[str]) -> Filter:
    vs = sorted(set(values))
    return selector(dimension, vs[0]) if len(vs) == 1 else {"type": "in", "dimension": dimension, "values": vs}


def all_of(fields: list[Filter]) -> Filter:
    return fields[0] if len(fields) == 1 else {"type": "and", "fields": fields}


def any_of(fields: list[Filter]) -> Filter:
    return fields[0] if len(fields) == 1 else {"type": "or", "fields": fields}


def build_filter(table: UpsertTable, fresh: Mapping[Key, Latest]) -> Filter:
    """The filter selecting exactly the latest version of every live key, given the table's fresh keys (keys
    whose latest visible version is in the append table). O(fresh keys x key columns), sorted output."""
    first, rest = table.key_columns[0], table.key_columns[1:]
    live: dict[tuple[tuple[str, ...], str], list[str]] = {}
    superseded: dict[tuple[str, ...], list[str]] = {}
    for key, latest in fresh.items():
        values = table.values(key)
        superseded.setdefault(values[1:], []).append(values[0])
        if not latest.tombstone:
            live.setdefault((values[1:], latest.version), []).append(values[0])
    parts: list[Filter] = []
    if live:
        groups = [all_of([*(selector(c, v) for c, v in zip(rest, others, strict=True)),
                          selector(table.version_column, version), in_or_selector(first, firsts)])
                  for (others, version), firsts in sorted(live.items())]
        parts.append(all_of([selector(table.table_type_column, "append"), any_of(groups)]))
    primary = [selector(table.table_type_column, "primary")]
    if superseded:
        groups = [all_of([*(selector(c, v) for c, v in zip(rest, others, strict=True)), in_or_selector(first, firsts)])
                  for others, firsts in sorted(superseded.items())]
        primary.append({"type": "not", "field": any_of(groups)})
    parts.append(all_of(primary))
    return any_of(parts)


def naive_filter(table: UpsertTable, latest: Mapping[Key, Latest]) -> Filter:
    """The baseline seed 003 starts from: OR over every key of (every key column AND version), no primary
    table. Size grows with every key ever ingested; for benchmarks and as a test oracle's counterpart."""
    terms = [all_of([*(selector(c, v) for c, v in zip(table.key_columns, table.values(k), strict=True)),
                     selector(table.version_column, lt.version)])
             for k, lt in sorted(latest.items()) if not lt.tombstone]
    return any_of(terms) if terms else {"type": "not", "field": selector(table.table_type_column, "append")}


def filter_terms(f: Mapping[str, Any]) -> int:
    """The filter's size: its selectors, plus the values of its ``in`` filters."""
    kind = f["type"]
    if kind == "selector":
        return 1
    if kind == "in":
        return len(f["values"])
    if kind == "not":
        return filter_terms(f["field"])
    return sum(filter_terms(x) for x in f["fields"])


def matches(f: Mapping[str, Any], row: Mapping[str, str]) -> bool:
    """Evaluate a filter of the five types on one row (Druid's semantics for string columns): the property
    tests scan segments through it."""
    kind = f["type"]
    if kind == "selector":
        return bool(row.get(f["dimension"]) == f["value"])
    if kind == "in":
        return bool(row.get(f["dimension"]) in f["values"])
    if kind == "not":
        return not matches(f["field"], row)
    if kind == "and":
        return all(matches(x, row) for x in f["fields"])
    if kind == "or":
        return any(matches(x, row) for x in f["fields"])
    raise ValueError(f"filter type {kind!r} is not one of and, or, not, selector, in")


@dataclass(frozen=True, slots=True)
class Strategy:
    """A table's current strategy as the agent writes it on ``upsert-strategy`` (and clients read it): the
    table, its fresh keys (latest append version, tombstone flag, the intervals of the segments holding it),
    and the filter over all of them. :meth:`filter_for` narrows the filter to the keys whose segments overlap
    an interval (a query over that interval sees no other segment of the append table)."""

    table: UpsertTable
    fresh: tuple[tuple[Key, Latest, tuple[Interval, ...]], ...]

    @staticmethod
    def of(table: UpsertTable, fresh: Mapping[Key, Latest], intervals: Mapping[str, Interval]) -> Strategy:
        rows = tuple((k, lt, tuple(sorted({intervals[s] for s in lt.segments if s in intervals})))
                     for k, lt in sorted(fresh.items()))
        return Strategy(table, rows)

    def filter(self) -> Filter:
        return build_filter(self.table, {k: lt for k, lt, _ in self.fresh})

    def filter_for(self, interval: Interval | None = None) -> Filter:
        if interval is None:
            return self.filter()
        return build_filter(self.table, {k: lt for k, lt, ivs in self.fresh
                                         if any(iv.overlaps(interval) for iv in ivs)})

    def to_json(self) -> dict[str, Any]:
        t = self.table
        return {
            "table": t.name, "appendDataSource": t.append, "primaryDataSource": t.primary,
            "keyColumns": list(t.key_columns), "versionColumn": t.version_column,
            "tableTypeColumn": t.table_type_column,
            "latest": [{"key": key_object(k), "version": lt.version, "tombstone": lt.tombstone,
                        "intervals": [iv.iso() for iv in ivs]} for k, lt, ivs in self.fresh],
            "superseded": [key_object(k) for k, _, _ in self.fresh],
            "filter": self.filter(),
        }

    @staticmethod
    def from_json(obj: Mapping[str, Any]) -> Strategy:
        """The strategy of a record written by :meth:`to_json` (raises KeyError/ValueError on other shapes)."""
        from coordinator.upserts.table import canonical_key

        table = UpsertTable(obj["table"], obj["appendDataSource"], obj["primaryDataSource"],
                            tuple(obj["keyColumns"]), obj["versionColumn"], obj["tableTypeColumn"], 0, 0)
        rows = tuple((canonical_key(r["key"], "latest.key"), Latest(r["version"], False, bool(r["tombstone"]), ()),
                      tuple(Interval.parse(i) for i in r["intervals"])) for r in obj["latest"])
        return Strategy(table, rows)
