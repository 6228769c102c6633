"""Given / when / then for upsert tables: seed 003's Facebook/Adwords example, tombstones, cleanup, consolidation,
rejections. The filter's *meaning* is checked by evaluating it on rows; its simplified shape is pinned."""

from __future__ import annotations

import itertools

import pytest

from coordinator.upserts import UpsertState, UpsertTableError, cleanup_due, consolidation_due, filter_terms
from coordinator.upserts.strategy import matches
from events import SegmentDescriptor, SegmentsPublished, UpsertConsolidationAsked
from tests.unit.upserts.builders import APPEND, PRIMARY, Log, day, part, table_set

D1, D2 = "2021-01-01", "2021-01-02"


def seed_003() -> Log:
    """The blog's example: a primary holding every source for both days, then fresh append data for Adwords and
    Facebook: (Facebook, D1, ver1), (Facebook, D2, ver2), (Adwords, D1, ver3)."""
    log = Log()
    log.add(table_set())
    for date in (D1, D2):
        log.primary(date, "2021-01-03T00:00:00.000Z",
                    *(part(src, date, "ver0") for src in ("Adwords", "Facebook", "Twitter")))
    log.reingest(D1, part("Facebook", D1, "ver1"))
    log.reingest(D2, part("Facebook", D2, "ver2"))
    log.reingest(D1, part("Adwords", D1, "ver3"))
    return log


def sel(dim: str, value: str) -> dict[str, str]:
    return {"type": "selector", "dimension": dim, "value": value}


def blog_filter(row: dict[str, str]) -> bool:
    """Seed 003's filter, word for word (its 'Adword' typo fixed), as a predicate."""
    t, s, d, v = row["table_type"], row["source"], row["date"], row["version"]
    append = t == "append" and ((s, d, v) in {("Facebook", D1, "ver1"), ("Facebook", D2, "ver2"),
                                              ("Adwords", D1, "ver3")})
    primary = t == "primary" and (d not in (D1, D2) or (d == D1 and s not in ("Facebook", "Adwords"))
                                  or (d == D2 and s not in ("Facebook",)))
    return append or primary


def test_seed_003_filter_has_the_blogs_meaning_in_the_pinned_simplified_form() -> None:
    out = seed_003().replay().report()["tables"]["ads"]
    assert out["filter"] == {"type": "or", "fields": [
        {"type": "and", "fields": [sel("table_type", "append"), {"type": "or", "fields": [
            {"type": "and", "fields": [sel("date", D1), sel("version", "ver1"), sel("source", "Facebook")]},
            {"type": "and", "fields": [sel("date", D1), sel("version", "ver3"), sel("source", "Adwords")]},
            {"type": "and", "fields": [sel("date", D2), sel("version", "ver2"), sel("source", "Facebook")]},
        ]}]},
        {"type": "and", "fields": [sel("table_type", "primary"), {"type": "not", "field": {"type": "or", "fields": [
            {"type": "and", "fields": [sel("date", D1),
                                       {"type": "in", "dimension": "source", "values": ["Adwords", "Facebook"]}]},
            {"type": "and", "fields": [sel("date", D2), sel("source", "Facebook")]},
        ]}}]},
    ]}
    rows = [dict(zip(("table_type", "source", "date", "version"), r, strict=True)) for r in itertools.product(
        ("append", "primary"), ("Facebook", "Adwords", "Twitter"), (D1, D2, "2021-01-03"),
        ("ver0", "ver1", "ver2", "ver3"))]
    assert [matches(out["filter"], r) for r in rows] == [blog_filter(r) for r in rows]
    latest = {(x["key"]["source"], x["key"]["date"]): x["version"] for x in out["latest"]}
    assert latest == {("Adwords", D1): "ver3", ("Facebook", D1): "ver1", ("Twitter", D1): "ver0",
                      ("Adwords", D2): "ver0", ("Facebook", D2): "ver2", ("Twitter", D2): "ver0"}
    assert out["stale"] == []


def test_a_version_counts_only_once_visible() -> None:
    log = seed_003()
    newer = log.reingest(D1, part("Facebook", D1, "ver4"), announce=False)
    out = log.replay().report()["tables"]["ads"]
    assert {(x["key"]["source"], x["key"]["date"], x["version"]) for x in out["latest"]} >= {("Facebook", D1, "ver1")}
    log.announce(newer)
    out = log.replay().report()["tables"]["ads"]
    latest = {(x["key"]["source"], x["key"]["date"]): x["version"] for x in out["latest"]}
    assert latest[("Facebook", D1)] == "ver4"
    assert out["stale"] == [f"{APPEND}_2021-01-01T00:00:00.000Z_2021-01-02T00:00:00.000Z_2021-01-01T00:00:00.000Z_1"]


def test_filter_size_depends_on_fresh_keys_not_on_the_primarys_history() -> None:
    small, big = seed_003(), seed_003()
    for i in range(200):
        big.primary(f"2020-{1 + i // 28:02d}-{1 + i % 28:02d}", "2021-01-03T00:00:00.000Z",
                    *(part(f"src{j}", "x", "ver0") for j in range(5)))
    f_small = small.replay().report()["tables"]["ads"]["filter"]
    f_big = big.replay().report()["tables"]["ads"]["filter"]
    assert f_small == f_big and filter_terms(f_big) == 16


def test_a_tombstone_deletes_the_key_and_makes_older_versions_stale() -> None:
    log = seed_003()
    log.reingest(D1, part("Facebook", D1, "ver5", rows=0, tombstone=True))
    out = log.replay().report()["tables"]["ads"]
    f = out["filter"]
    for table_type in ("append", "primary"):
        for version in ("ver0", "ver1", "ver5"):
            assert not matches(f, {"table_type": table_type, "source": "Facebook", "date": D1, "version": version})
    assert matches(f, {"table_type": "primary", "source": "Twitter", "date": D1, "version": "ver0"})
    assert [x["tombstone"] for x in out["latest"] if x["key"] == {"source": "Facebook", "date": D1}] == [True]
    assert out["stale"] == [f"{APPEND}_2021-01-01T00:00:00.000Z_2021-01-02T00:00:00.000Z_2021-01-01T00:00:00.000Z_1"]


def test_a_segment_still_holding_one_latest_version_is_never_stale() -> None:
    log = Log()
    log.add(table_set())
    both = log.reingest(D1, part("Facebook", D1, "ver1"), part("Adwords", D1, "ver1"))
    log.reingest(D1, part("Facebook", D1, "ver2"))
    st = log.replay().state
    assert str(both.id) not in st.stale
    log.reingest(D1, part("Adwords", D1, "ver2"))
    st = log.replay().state
    assert str(both.id) in st.stale


def test_cleanup_waits_for_the_grace_period_and_a_newer_version_going_away_unstales() -> None:
    log = Log()
    log.add(table_set(grace_ms=1000))
    old = log.reingest(D1, part("Facebook", D1, "ver1"))
    new = log.reingest(D1, part("Facebook", D1, "ver2"))
    st = log.replay().state
    since = st.stale[str(old.id)]
    assert cleanup_due(st, since + 999) == []
    [mark] = cleanup_due(st, since + 1000)
    assert mark.segment_ids == (str(old.id),) and "superseded" in mark.reason
    log.unannounce(new)  # the newer version is served by nobody: the older one is needed again
    st = log.replay().state
    assert str(old.id) not in st.stale and cleanup_due(st, since + 10_000) == []


def test_consolidation_names_primary_intervals_and_the_primary_publish_makes_append_stale() -> None:
    log = seed_003()
    st = log.replay().state
    assert consolidation_due(st, "ads", st.last_event_at) is None  # no schedule (period 0), not asked
    log.add(UpsertConsolidationAsked(table="ads"))
    st = log.replay().state
    req = consolidation_due(st, "ads", st.last_event_at)
    assert req is not None
    assert [(iv.interval, [(p.key["source"], p.version) for p in iv.partitions]) for iv in req.intervals] == [
        (day(D1), [("Adwords", "ver3"), ("Facebook", "ver1")]), (day(D2), [("Facebook", "ver2")])]
    log.add(req)
    for iv in req.intervals:  # the re-ingest: the primary's new chunk takes the named versions
        date = "2021-01-01" if iv.interval == day(D1) else "2021-01-02"
        taken = {p.key["source"]: p.version for p in iv.partitions}
        log.primary(date, "2021-01-04T00:00:00.000Z",
                    *(part(s, date, taken.get(s, "ver0")) for s in ("Adwords", "Facebook", "Twitter")))
    out = log.replay().report()["tables"]["ads"]
    assert out["filter"] == sel("table_type", "primary")
    assert len(out["stale"]) == 3
    st = log.replay().state
    assert st.asked == set() and consolidation_due(st, "ads", st.last_event_at) is None


def test_a_consolidation_never_takes_a_version_older_than_an_unserved_primary_holds() -> None:
    # given: s1 re-ingested as v1 then v2, v2 consolidated into a primary chunk nobody serves yet, and the
    # historical serving v2's append segment gone: the latest *visible* version of s1 is v1, in the append table
    log = Log()
    log.add(table_set())
    log.reingest(D1, part("s1", D1, "v1"))
    v2 = log.reingest(D1, part("s1", D1, "v2"))
    p2 = log.primary(D1, "P2", part("s1", D1, "v2"), announce=False)
    log.unannounce(v2)
    st = log.replay().state
    assert [(dict(k)["source"], lt.version) for k, lt in st.fresh("ads").items()] == [("s1", "v1")]
    # when: a consolidation is asked for
    log.add(UpsertConsolidationAsked(table="ads"))
    st = log.replay().state
    req = consolidation_due(st, "ads", st.last_event_at)
    # then: it does not take v1 (a re-ingest would overwrite the primary's v2 with it), and once the primary is
    # served the filter selects v2 only
    assert req is not None and req.intervals == ()
    log.add(req)
    log.announce(p2)
    out = log.replay().report()["tables"]["ads"]
    assert [(r["key"]["source"], r["version"]) for r in out["latest"]] == [("s1", "v2")]
    assert out["filter"] == sel("table_type", "primary")


def test_a_consolidation_keeps_the_keys_it_does_not_take_as_the_used_primary_chunk_holds_them() -> None:
    # given: s0 consolidated into the primary (its append segment cleaned), s1 fresh, and the primary chunk
    # holding s0 not served right now (a historical restarting)
    log = Log()
    log.add(table_set())
    a0 = log.reingest(D1, part("s0", D1, "v1"))
    log.reingest(D1, part("s1", D1, "v2"))
    p1 = log.primary(D1, "P1", part("s0", D1, "v1"))
    log.unused(a0)
    log.unannounce(p1)
    # when: a consolidation is asked for and the ingestion re-ingests the chunk: the versions taken, and every
    # other key as the chunk's used segments hold it
    log.add(UpsertConsolidationAsked(table="ads"))
    st = log.replay().state
    req = consolidation_due(st, "ads", st.last_event_at)
    assert req is not None
    assert [(p.key["source"], p.version) for iv in req.intervals for p in iv.partitions] == [("s1", "v2")]
    log.add(req)
    log.primary(D1, "P2", part("s0", D1, "v1"), part("s1", D1, "v2"))
    # then: every key's latest version is visible exactly once, from the primary
    out = log.replay().report()["tables"]["ads"]
    assert [(r["key"]["source"], r["version"]) for r in out["latest"]] == [("s0", "v1"), ("s1", "v2")]
    assert out["filter"] == sel("table_type", "primary")


def test_scheduled_consolidation_is_due_a_period_after_the_last() -> None:
    log = Log()
    log.add(table_set(period_ms=86_400_000))
    log.reingest(D1, part("Facebook", D1, "ver1"))
    st = log.replay().state
    declared = st.last_consolidation["ads"]
    assert consolidation_due(st, "ads", declared + 86_399_999) is None
    assert consolidation_due(st, "ads", declared + 86_400_000) is not None


def test_a_publish_without_upsert_partitions_is_rejected_with_its_reason() -> None:
    log = Log()
    log.add(table_set())
    bare = SegmentDescriptor(APPEND, day(D1), "v", 7, 1)
    wrong = SegmentDescriptor(PRIMARY, day(D1), "v", 0, 1, upsert_partitions=(
        part("Facebook", D1, "ver1").__class__(key={"source": "Facebook"}, version="ver1"),))
    log.add(SegmentsPublished(task_id="t", segments=(bare, wrong)))
    st = log.replay().state
    assert "must carry upsertPartitions" in st.rejected[str(bare.id)][1]
    assert "key columns ['source'] are not the table's ['date', 'source']" in st.rejected[str(wrong.id)][1]
    marks = cleanup_due(st, 0)
    assert sorted(i for m in marks for i in m.segment_ids) == sorted([str(bare.id), str(wrong.id)])


def test_bad_table_definitions_name_the_field() -> None:
    st = UpsertState()
    with pytest.raises(UpsertTableError, match=r"payload\.primaryDataSource"):
        st.apply(table_set().__class__(name="x", append_data_source="a", primary_data_source="a",
                                       key_columns=("k",), version_column="v"), 0)
    with pytest.raises(UpsertTableError, match=r"payload\.versionColumn"):
        st.apply(table_set().__class__(name="x", append_data_source="a", primary_data_source="b",
                                       key_columns=("k", "v"), version_column="v"), 0)
    st.apply(table_set(), 0)
    with pytest.raises(UpsertTableError, match="already belongs to upsert table 'ads'"):
        st.apply(table_set(name="other"), 0)


def test_the_fold_does_not_depend_on_how_topics_interleave() -> None:
    """The agent reads cluster, segments and timeline in any interleaving: publish after visibility gives the
    same state as before it."""
    from events import SegmentVisibilityChanged

    seg = SegmentDescriptor(APPEND, day(D1), "v", 1, 1, upsert_partitions=(part("Facebook", D1, "ver1"),))
    pub = SegmentsPublished(task_id="t", segments=(seg,))
    vis = SegmentVisibilityChanged(segment_id=str(seg.id), data_source=APPEND, interval=day(D1),
                                   from_state="offline", to_state="visible")
    a, b = UpsertState(), UpsertState()
    for ev in (table_set(), pub, vis):
        a.apply(ev, 1)
    for ev in (vis, pub, table_set()):
        b.apply(ev, 1)
    assert a.fresh("ads") == b.fresh("ads") and a.fresh("ads")
