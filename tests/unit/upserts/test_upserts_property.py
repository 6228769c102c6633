"""Property: whatever the re-ingests, deletions, consolidations and announce/unannounce timings, once visibility
has settled (every used segment is served), scanning the visible segments through the current filter returns
exactly the latest version's rows of every live key and nothing of deleted keys; cleanup never marks unused a
segment the filter still selects; and the incremental fold equals a fold of the whole log from scratch.

The oracle is the history itself: a key's latest version is its last re-ingest (versions increase), its rows
are that re-ingest's row count. Segments are modelled as rows tagged (key, version).
"""

from __future__ import annotations

import os
from collections import Counter
from typing import Any

from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from coordinator.upserts import cleanup_due, consolidation_due
from coordinator.upserts.replay import UpsertReplay
from coordinator.upserts.strategy import matches
from events import Event, SegmentDescriptor, UpsertConsolidationAsked, UpsertPartition
from tests.unit.upserts.builders import APPEND, PRIMARY, Log, day, part, table_set

SOURCES, DATES = ("s0", "s1"), ("2021-01-01", "2021-01-02")

reingest = st.tuples(st.just("reingest"), st.sampled_from(SOURCES), st.sampled_from(DATES), st.booleans(),
                     st.integers(1, 3), st.booleans())
ops = st.one_of(
    reingest, reingest,
    st.tuples(st.just("announce"), st.integers(0, 50)),
    st.tuples(st.just("unannounce"), st.integers(0, 50)),
    st.tuples(st.just("consolidate"), st.sampled_from(DATES), st.booleans()),
    st.tuples(st.just("cleanup")),
)


class World:
    """The log, folded as it grows, plus what the oracle knows."""

    def __init__(self) -> None:
        self.log = Log()
        self.replay = UpsertReplay()
        self.used: dict[str, SegmentDescriptor] = {}
        self.announced: set[str] = set()
        self.newest: dict[tuple[str, str], tuple[str, int, bool]] = {}  # key -> (version, rows, tombstone)
        self.rows: dict[tuple[str, str, str], int] = {}  # (source, date, version) -> rows
        self.counter = 0
        self.primary_version = 0
        self.add(table_set())

    def add(self, event: Event) -> None:
        self.log.add(event)
        self.replay.apply(self.log.envelopes[-1])

    def publish(self, seg: SegmentDescriptor, announce: bool) -> None:
        from events import SegmentsPublished

        self.add(SegmentsPublished(task_id="t", segments=(seg,)))
        self.used[str(seg.id)] = seg
        if announce:
            self.announce(seg)

    def announce(self, seg: SegmentDescriptor) -> None:
        from events import SegmentAnnounced

        self.add(SegmentAnnounced(server="h1", segment=seg))
        self.announced.add(str(seg.id))

    def unannounce(self, sid: str) -> None:
        from events import SegmentUnannounced

        self.add(SegmentUnannounced(server="h1", segment_id=sid))
        self.announced.discard(sid)

    def settled(self) -> bool:
        return all(sid in self.announced for sid in self.used)

    def filter(self) -> dict[str, Any]:
        return self.replay.report()["tables"]["ads"]["filter"]  # type: ignore[no-any-return]

    def selected(self, sid: str, f: dict[str, Any]) -> Counter[tuple[str, str, str]]:
        seg = self.used.get(sid) or self.log_segment(sid)
        table_type = "append" if seg.data_source == APPEND else "primary"
        out: Counter[tuple[str, str, str]] = Counter()
        for p in seg.upsert_partitions or ():
            if p.tombstone:
                continue
            row = {"table_type": table_type, "source": p.key["source"], "date": p.key["date"], "version": p.version}
            if matches(f, row):
                out[(p.key["source"], p.key["date"], p.version)] += p.rows
        return out

    def log_segment(self, sid: str) -> SegmentDescriptor:
        raise AssertionError(f"unknown segment {sid}")

    def primary_chunk(self, date: str) -> tuple[UpsertPartition, ...]:
        """What the day's used primary chunk holds: its newest Druid version overshadows the older ones."""
        chunk = [seg for seg in self.used.values() if seg.data_source == PRIMARY and seg.interval == day(date)]
        return max(chunk, key=lambda seg: seg.version).upsert_partitions or () if chunk else ()

    def rows_of(self, src: str, date: str, version: str) -> int:
        return self.rows[(src, date, version)]


def check_settled(w: World) -> None:
    f = w.filter()
    visible = [sid for ids in w.replay.timelines.visible().values() for sid in ids]
    got: Counter[tuple[str, str, str]] = Counter()
    for sid in visible:
        got += w.selected(sid, f)
    expected = Counter({(src, date, v): rows for (src, date), (v, rows, tomb) in w.newest.items() if not tomb})
    assert got == expected


@settings(max_examples=int(os.environ.get("UPSERT_EXAMPLES", "200")), deadline=None,
          suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(ops, min_size=10, max_size=50))
# a consolidation of a chunk whose primary is not served keeps the keys it does not take (the re-ingest reads the
# chunk's used segments, not what is served)
@example(history=[("reingest", "s0", "2021-01-01", False, 1, True), ("reingest", "s1", "2021-01-01", False, 1, False),
                  ("consolidate", "2021-01-01", False), ("announce", 0), ("announce", 0), ("cleanup",),
                  ("unannounce", 0), ("unannounce", 0), ("announce", 0), ("consolidate", "2021-01-01", False)])
# a consolidation never takes a visible append version older than an unserved primary holds
@example(history=[("reingest", "s1", "2021-01-02", False, 1, True), ("consolidate", "2021-01-02", False),
                  ("unannounce", 0), ("reingest", "s1", "2021-01-02", False, 1, True),
                  ("consolidate", "2021-01-02", False), ("unannounce", 0), ("consolidate", "2021-01-02", False),
                  ("announce", 0), ("consolidate", "2021-01-02", False), ("announce", 12), ("cleanup",)])
def test_the_filter_over_settled_visible_segments_returns_exactly_the_latest_rows(history: list[Any]) -> None:
    w = World()
    for op in history:
        kind = op[0]
        if kind == "reingest":
            _, src, date, tomb, rows, announce = op
            w.counter += 1
            version = f"v{w.counter:04d}"
            rows = 0 if tomb else rows
            w.newest[(src, date)] = (version, rows, tomb)
            w.rows[(src, date, version)] = rows
            w.log.appended += 1
            seg = SegmentDescriptor(APPEND, day(date), "2021-01-01T00:00:00.000Z", w.log.appended, 1,
                                    upsert_partitions=(part(src, date, version, rows, tomb),))
            w.publish(seg, announce)
        elif kind == "announce":
            pending = sorted(s for s in w.used if s not in w.announced)
            if pending:
                w.announce(w.used[pending[op[1] % len(pending)]])
        elif kind == "unannounce":
            served = sorted(w.announced)
            if served:
                w.unannounce(served[op[1] % len(served)])
        elif kind == "consolidate":
            _, date, announce = op
            w.add(UpsertConsolidationAsked(table="ads"))
            st_ = w.replay.state
            req = consolidation_due(st_, "ads", st_.last_event_at)
            assert req is not None
            w.add(req)
            taken = {p.key["source"]: p for iv in req.intervals for p in iv.partitions if p.key["date"] == date}
            # The re-ingest replaces the day's primary chunk: the keys taken, and every other key as the chunk's
            # used segments hold it (a re-index reads deep storage, whether or not a historical serves it now).
            kept = {p.key["source"]: p for p in w.primary_chunk(date)}
            parts = [part(src, date, p.version, 0 if p.tombstone else w.rows_of(src, date, p.version), p.tombstone)
                     for src in SOURCES for p in (taken.get(src) or kept.get(src),) if p is not None]
            if parts:
                w.primary_version += 1
                seg = SegmentDescriptor(PRIMARY, day(date), f"P{w.primary_version:04d}", 0, 1,
                                        upsert_partitions=tuple(parts))
                w.publish(seg, announce)
        else:
            st_ = w.replay.state
            marks = cleanup_due(st_, st_.last_event_at)
            f = w.filter()
            for mark in marks:
                for sid in mark.segment_ids:
                    assert not w.selected(sid, f), f"cleanup would mark {sid}, which the filter selects"
                w.add(mark)
                for sid in mark.segment_ids:
                    w.used.pop(sid, None)
                    if sid in w.announced:
                        w.unannounce(sid)  # the planner drops it
        if w.settled():
            check_settled(w)
    for sid in sorted(w.used):  # settle: serve everything still used
        if sid not in w.announced:
            w.announce(w.used[sid])
    check_settled(w)
    scratch = UpsertReplay().apply_all(w.log.envelopes)
    assert scratch.report() == w.replay.report()
    assert scratch.state.stale == w.replay.state.stale

