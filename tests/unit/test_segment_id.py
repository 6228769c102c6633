"""Druid segment ids: format and parse round-trip, underscores in data sources and versions."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from events.interval import Interval
from events.segment import SegmentId, SegmentIdError
from tests.strategies import intervals

DAY = Interval.parse("2011-01-01/2011-01-02")


def test_druid_format() -> None:
    assert str(SegmentId("wiki", DAY, "v1")) == "wiki_2011-01-01T00:00:00.000Z_2011-01-02T00:00:00.000Z_v1"
    assert str(SegmentId("wiki", DAY, "v1", 2)).endswith("_v1_2")


@pytest.mark.parametrize(
    "sid",
    [
        SegmentId("wiki_edits_2", DAY, "2011-01-03T00:00:00.000Z", 0),
        SegmentId("_leading", DAY, "v1", 7),
        SegmentId("ds", DAY, "v_1_with_underscores", 3),
        SegmentId("ds_2011-01-01T00:00:00.000Z", DAY, "v", 1),
    ],
)
def test_parse_with_underscores(sid: SegmentId) -> None:
    assert SegmentId.parse(str(sid), data_source=sid.data_source) == sid


data_sources = st.text(alphabet="abcxyz_-0123456789", min_size=1, max_size=12).filter(lambda s: "T" not in s)
versions = st.one_of(st.text(alphabet="abcv.-:0123456789", min_size=1, max_size=10),
                     st.just("2026-11-21T10:00:00.000Z"))


@given(data_sources, intervals(non_empty=True), versions, st.integers(0, 10_000))
def test_round_trip_with_known_data_source(ds: str, interval: Interval, version: str, partition: int) -> None:
    sid = SegmentId(ds, interval, version, partition)
    assert SegmentId.parse(str(sid), data_source=ds) == sid


@given(data_sources, intervals(non_empty=True), versions, st.integers(0, 10_000))
def test_round_trip_without_data_source(ds: str, interval: Interval, version: str, partition: int) -> None:
    sid = SegmentId(ds, interval, version, partition)
    parsed = SegmentId.parse(str(sid))
    # Without the data source, the text alone decides; it always formats back to the same text.
    assert str(parsed) == str(sid)
    if not version.isdigit():
        assert parsed == sid


@pytest.mark.parametrize("bad", ["", "wiki", "wiki_2011-01-01_2011-01-02_v1", "wiki_x_y_v1"])
def test_bad_ids(bad: str) -> None:
    with pytest.raises(SegmentIdError):
        SegmentId.parse(bad)
