"""Druid's retention rules: matching at every edge, the chain, defaults, round trips and errors."""

from __future__ import annotations

import dataclasses
import json
from typing import Any

import pytest

from coordinator.rules import DEFAULT_KEY, RULE_TYPES, Rule, RuleError, RuleSet, parse_rule
from coordinator.rules.rule import joda_contains
from events import ETERNITY, Interval, Period, parse_instant

MS = 1
DAY = 86_400_000
NOW = parse_instant("2026-01-10T00:00:00Z")
WEEK_AGO = parse_instant("2026-01-03T00:00:00Z")  # NOW - P7D


def iv(start: int, end: int) -> Interval:
    return Interval(start, end)


def rule(type_: str, **fields: Any) -> Rule:
    return parse_rule({"type": type_, **fields})


def day(text: str) -> Interval:
    return Interval.parse(f"{text}/P1D")


# -- forever ----------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("type_", ["loadForever", "dropForever", "broadcastForever"])
@pytest.mark.parametrize("segment", [ETERNITY, day("1970-01-01"), day("2026-01-09"), day("2999-12-31"),
                                     iv(NOW, NOW)])
def test_forever_rules_always_apply(type_: str, segment: Interval) -> None:
    assert rule(type_).applies_to(segment, NOW)


# -- by interval ------------------------------------------------------------------------------------------------

RULE_IV = Interval.parse("2026-01-01/2026-01-05")
S, E = RULE_IV.start, RULE_IV.end


@pytest.mark.parametrize("type_", ["loadByInterval", "broadcastByInterval"])
@pytest.mark.parametrize(("segment", "expected"), [
    (iv(S, E), True),                       # the same interval
    (day("2026-01-02"), True),              # inside
    (iv(S - DAY, S + MS), True),            # overlaps the first millisecond
    (iv(E - MS, E + DAY), True),            # overlaps the last millisecond
    (iv(S - DAY, E + DAY), True),           # covers the rule's interval
    (iv(S - DAY, S), False),                # ends where the rule starts: abuts
    (iv(E, E + DAY), False),                # starts where the rule ends: abuts (half-open)
    (day("2025-06-01"), False),
    (day("2026-06-01"), False),
])
def test_load_and_broadcast_by_interval_match_on_overlap(type_: str, segment: Interval, expected: bool) -> None:
    r = rule(type_, interval=RULE_IV.iso())
    assert r.applies_to(segment, NOW) is expected
    assert r.applies_to(segment, 0) is expected  # now plays no part


@pytest.mark.parametrize(("segment", "expected"), [
    (iv(S, E), True),                       # equal intervals contain each other
    (day("2026-01-02"), True),
    (iv(S, S + DAY), True),                 # shares the start
    (iv(E - DAY, E), True),                 # ends exactly at the rule's end
    (iv(S - MS, S + DAY), False),           # one millisecond before the rule
    (iv(E - DAY, E + MS), False),           # one millisecond past it
    (iv(S - DAY, E + DAY), False),          # covers it: overlaps, does not fit
    (iv(S + DAY, S + DAY), True),           # empty, inside
    (iv(E, E), False),                      # empty at the end: Joda's contains says no
])
def test_drop_by_interval_matches_when_contained(segment: Interval, expected: bool) -> None:
    assert rule("dropByInterval", interval=RULE_IV.iso()).applies_to(segment, NOW) is expected


def test_joda_contains_differs_from_interval_contains_only_for_empty_intervals() -> None:
    assert RULE_IV.contains(iv(E, E)) and not joda_contains(RULE_IV, iv(E, E))
    assert not joda_contains(iv(S, S), iv(S, S))
    assert joda_contains(RULE_IV, day("2026-01-04")) == RULE_IV.contains(day("2026-01-04"))


# -- by period: load and broadcast ------------------------------------------------------------------------------

LOADISH = ["loadByPeriod", "broadcastByPeriod"]


@pytest.mark.parametrize("type_", LOADISH)
@pytest.mark.parametrize(("segment", "expected"), [
    (iv(WEEK_AGO - DAY, WEEK_AGO), False),      # ends at the window's start
    (iv(WEEK_AGO - DAY, WEEK_AGO + MS), True),  # one millisecond inside
    (day("2026-01-05"), True),
    (iv(NOW - MS, NOW + DAY), True),            # straddles now
    (iv(NOW, NOW + DAY), True),                 # entirely in the future
    (day("2030-01-01"), True),
    (day("2025-01-01"), False),
])
def test_load_by_period_with_future(type_: str, segment: Interval, expected: bool) -> None:
    r = rule(type_, period="P7D")  # includeFuture defaults to true
    assert r.include_future
    assert r.applies_to(segment, NOW) is expected


@pytest.mark.parametrize("type_", LOADISH)
@pytest.mark.parametrize(("segment", "expected"), [
    (iv(WEEK_AGO - DAY, WEEK_AGO), False),      # abuts the window's start
    (iv(WEEK_AGO - DAY, WEEK_AGO + MS), True),
    (day("2026-01-05"), True),
    (iv(NOW - MS, NOW + DAY), True),            # its first part is in the window
    (iv(NOW, NOW + DAY), False),                # starts at now: abuts the window's end
    (day("2030-01-01"), False),
    (day("2025-01-01"), False),
])
def test_load_by_period_without_future(type_: str, segment: Interval, expected: bool) -> None:
    assert rule(type_, period="P7D", includeFuture=False).applies_to(segment, NOW) is expected


# -- by period: drop --------------------------------------------------------------------------------------------


@pytest.mark.parametrize(("segment", "expected"), [
    (iv(WEEK_AGO, WEEK_AGO + DAY), True),       # starts exactly at the window's start
    (iv(WEEK_AGO - MS, WEEK_AGO + DAY), False), # starts one millisecond before it
    (day("2026-01-09"), True),
    (iv(NOW - DAY, NOW + DAY), True),
    (day("2030-01-01"), True),                  # the future too
    (day("2025-01-01"), False),
])
def test_drop_by_period_with_future(segment: Interval, expected: bool) -> None:
    assert rule("dropByPeriod", period="P7D").applies_to(segment, NOW) is expected


@pytest.mark.parametrize(("segment", "expected"), [
    (iv(WEEK_AGO, WEEK_AGO + DAY), True),
    (iv(WEEK_AGO - MS, WEEK_AGO + DAY), False),
    (iv(WEEK_AGO, NOW), True),                  # the whole window
    (iv(NOW - DAY, NOW), True),                 # ends exactly at now
    (iv(NOW - DAY, NOW + MS), False),           # one millisecond past now
    (day("2030-01-01"), False),
])
def test_drop_by_period_without_future(segment: Interval, expected: bool) -> None:
    assert rule("dropByPeriod", period="P7D", includeFuture=False).applies_to(segment, NOW) is expected


@pytest.mark.parametrize(("segment", "expected"), [
    (iv(WEEK_AGO - DAY, WEEK_AGO), True),       # ends exactly at now - period
    (iv(WEEK_AGO - DAY, WEEK_AGO + MS), False),
    (day("2020-01-01"), True),
    (day("2026-01-09"), False),
    (day("2030-01-01"), False),
])
def test_drop_before_by_period(segment: Interval, expected: bool) -> None:
    assert rule("dropBeforeByPeriod", period="P7D").applies_to(segment, NOW) is expected


def test_drop_before_by_period_accepts_and_ignores_include_future() -> None:
    # Druid's web console writes includeFuture on dropBeforeByPeriod; Druid ignores it.
    r = rule("dropBeforeByPeriod", period="P7D", includeFuture=False)
    assert r == rule("dropBeforeByPeriod", period="P7D")
    assert r.to_json() == {"type": "dropBeforeByPeriod", "period": "P7D"}


# -- calendar periods -------------------------------------------------------------------------------------------


@pytest.mark.parametrize(("now", "start"), [
    ("2026-03-31", "2026-02-28"),   # no February 31st: clamped
    ("2024-03-31", "2024-02-29"),   # leap year
    ("2026-05-31", "2026-04-30"),
    ("2026-03-01", "2026-02-01"),
    ("2026-01-15T12:30:00Z", "2025-12-15T12:30:00Z"),  # across the year end, time of day kept
])
def test_one_month_window_is_calendar_aware(now: str, start: str) -> None:
    r = rule("loadByPeriod", period="P1M", includeFuture=False)
    window = r.window(parse_instant(now))
    assert window == Interval(parse_instant(start), parse_instant(now))


def test_month_window_edges_across_february() -> None:
    now = parse_instant("2026-03-31")
    load = rule("loadByPeriod", period="P1M")
    drop_before = rule("dropBeforeByPeriod", period="P1M")
    assert not load.applies_to(day("2026-02-27"), now)     # ends at Feb 28th 00:00, the window's start
    assert load.applies_to(day("2026-02-28"), now)
    assert drop_before.applies_to(day("2026-02-27"), now)
    assert not drop_before.applies_to(day("2026-02-28"), now)
    # Thirty days would have reached back to March 1st: the month is not a fixed length.
    assert not rule("loadByPeriod", period="P30D").applies_to(day("2026-02-28"), now)


def test_year_and_hour_periods() -> None:
    now = parse_instant("2026-01-10T06:00:00Z")
    assert rule("loadByPeriod", period="P1Y", includeFuture=False).applies_to(day("2025-01-10"), now)
    assert not rule("loadByPeriod", period="P1Y", includeFuture=False).applies_to(day("2025-01-09"), now)
    assert rule("dropByPeriod", period="PT6H").applies_to(day("2026-01-10"), now)
    assert not rule("dropByPeriod", period="PT6H", includeFuture=False).applies_to(day("2026-01-10"), now)


def test_window_is_none_without_a_period() -> None:
    assert rule("loadForever").window(NOW) is None
    assert rule("dropByInterval", interval="2026-01-01/P1D").window(NOW) is None


# -- kinds and defaults -----------------------------------------------------------------------------------------


@pytest.mark.parametrize(("type_", "fields", "kind"), [
    ("loadForever", {}, "load"),
    ("loadByPeriod", {"period": "P1D"}, "load"),
    ("loadByInterval", {"interval": "2026-01-01/P1D"}, "load"),
    ("dropForever", {}, "drop"),
    ("dropByPeriod", {"period": "P1D"}, "drop"),
    ("dropBeforeByPeriod", {"period": "P1D"}, "drop"),
    ("dropByInterval", {"interval": "2026-01-01/P1D"}, "drop"),
    ("broadcastForever", {}, "broadcast"),
    ("broadcastByPeriod", {"period": "P1D"}, "broadcast"),
    ("broadcastByInterval", {"interval": "2026-01-01/P1D"}, "broadcast"),
])
def test_every_type_has_its_kind(type_: str, fields: dict[str, Any], kind: str) -> None:
    r = rule(type_, **fields)
    assert (r.type, r.kind) == (type_, kind)
    assert dict(r.tiered_replicants) == ({"_default_tier": 2} if kind == "load" else {})


def test_rule_types_are_druids_ten() -> None:
    assert len(RULE_TYPES) == 10 and len(set(RULE_TYPES)) == 10


@pytest.mark.parametrize("fields", [{}, {"tieredReplicants": None}, {"useDefaultTierForNull": True},
                                    {"useDefaultTierForNull": None}])
def test_missing_tiered_replicants_means_two_on_the_default_tier(fields: dict[str, Any]) -> None:
    assert dict(rule("loadForever", **fields).tiered_replicants) == {"_default_tier": 2}


def test_use_default_tier_for_null_false_means_no_replicas() -> None:
    r = rule("loadByPeriod", period="P1D", useDefaultTierForNull=False)
    assert dict(r.tiered_replicants) == {}
    assert r.to_json()["useDefaultTierForNull"] is False
    # an explicit map wins over the flag either way
    assert dict(rule("loadForever", tieredReplicants={"hot": 1}, useDefaultTierForNull=False).tiered_replicants) == {
        "hot": 1}


def test_explicit_empty_tiered_replicants_is_kept() -> None:
    assert dict(rule("loadForever", tieredReplicants={}).tiered_replicants) == {}


def test_zero_replicas_are_allowed() -> None:
    assert dict(rule("loadForever", tieredReplicants={"hot": 0, "cold": 1}).tiered_replicants) == {"cold": 1, "hot": 0}


@pytest.mark.parametrize("value", [None, True])
def test_include_future_defaults_to_true(value: bool | None) -> None:
    assert rule("loadByPeriod", period="P1D", includeFuture=value).include_future
    assert rule("dropByPeriod", period="P1D", includeFuture=value).include_future


def test_rules_are_immutable() -> None:
    r = rule("loadForever", tieredReplicants={"hot": 2})
    with pytest.raises(dataclasses.FrozenInstanceError):
        r.type = "dropForever"  # type: ignore[misc]
    with pytest.raises(TypeError):
        r.tiered_replicants["hot"] = 3  # type: ignore[index]


def test_tier_order_does_not_matter() -> None:
    a = rule("loadForever", tieredReplicants={"hot": 2, "cold": 1})
    b = rule("loadForever", tieredReplicants={"cold": 1, "hot": 2})
    assert a == b and list(a.tiered_replicants) == ["cold", "hot"]


def test_rule_text() -> None:
    assert str(rule("loadByPeriod", period="P1M", includeFuture=False, tieredReplicants={"hot": 2})) == (
        "loadByPeriod(P1M, hot=2)")
    assert str(rule("dropBeforeByPeriod", period="P3M")) == "dropBeforeByPeriod(P3M)"
    assert str(rule("loadForever", tieredReplicants={})) == "loadForever(no replicas)"


# -- the chain --------------------------------------------------------------------------------------------------

RULES_JSON: dict[str, Any] = {
    "wiki": [
        {"type": "loadByPeriod", "period": "P7D", "tieredReplicants": {"hot": 2, "_default_tier": 1}},
        {"type": "loadByPeriod", "period": "P30D", "tieredReplicants": {"cold": 1}},
        {"type": "dropForever"},
    ],
    "koala": [
        {"type": "dropByInterval", "interval": "2020-01-01/2021-01-01"},
    ],
    "empty": [],
    DEFAULT_KEY: [
        {"type": "loadByInterval", "interval": "2019-01-01/2030-01-01", "tieredReplicants": {"_default_tier": 2}},
        {"type": "dropForever"},
    ],
}


def test_chain_is_own_rules_then_default() -> None:
    rs = RuleSet.parse(RULES_JSON)
    assert [r.type for r in rs.chain("wiki")] == ["loadByPeriod", "loadByPeriod", "dropForever", "loadByInterval",
                                                   "dropForever"]
    assert rs.chain("koala") == rs.rules_of("koala") + rs.default_rules
    assert rs.chain("unknown") == rs.default_rules
    assert rs.chain("empty") == rs.default_rules
    assert rs.chain(DEFAULT_KEY) == rs.default_rules  # not twice
    assert rs.data_sources == ("empty", "koala", "wiki")


def test_first_matching_rule_wins() -> None:
    rs = RuleSet.parse(RULES_JSON)
    recent, month, old = day("2026-01-08"), day("2025-12-20"), day("2025-06-01")
    assert rs.rule_for("wiki", recent, NOW) == rs.chain("wiki")[0]  # P30D matches too, but comes second
    assert rs.rule_for("wiki", month, NOW) == rs.chain("wiki")[1]
    assert rs.rule_for("wiki", old, NOW) == rs.chain("wiki")[2]     # its own dropForever, before _default's
    # koala's own rule drops 2020; anything else falls through to _default
    assert rs.rule_for("koala", day("2020-06-01"), NOW) == rs.rules_of("koala")[0]
    assert rs.rule_for("koala", day("2025-06-01"), NOW) == rs.default_rules[0]
    assert rs.rule_for("koala", day("2018-06-01"), NOW) == rs.default_rules[1]


def test_no_matching_rule_gives_none() -> None:
    rs = RuleSet.parse({"wiki": [{"type": "loadByPeriod", "period": "P1D", "includeFuture": False}]})
    assert rs.rule_for("wiki", day("2020-01-01"), NOW) is None
    assert rs.rule_for("other", day("2020-01-01"), NOW) is None
    assert RuleSet().rule_for("wiki", day("2020-01-01"), NOW) is None


def test_with_rules_replaces_one_data_source() -> None:
    rs = RuleSet.parse(RULES_JSON)
    updated = rs.with_rules("wiki", [rule("loadForever")])
    assert [r.type for r in updated.rules_of("wiki")] == ["loadForever"]
    assert updated.rules_of("koala") == rs.rules_of("koala")
    assert rs.rules_of("wiki")[0].type == "loadByPeriod"  # the original is untouched
    assert updated.with_rules("new", []).rules_of("new") == ()
    with pytest.raises(RuleError, match="cluster-level rules cannot be empty"):
        rs.with_rules(DEFAULT_KEY, [])


def test_druid_default_rule_set() -> None:
    rs = RuleSet.druid_default()
    assert rs.to_json() == {DEFAULT_KEY: [
        {"type": "loadForever", "tieredReplicants": {"_default_tier": 2}, "useDefaultTierForNull": True}]}
    assert rs.rule_for("anything", day("1990-01-01"), NOW) == rule("loadForever")


# -- unknown tiers ----------------------------------------------------------------------------------------------


def test_unknown_tiers_are_sorted_and_unique() -> None:
    rs = RuleSet.parse({
        "a": [{"type": "loadForever", "tieredReplicants": {"hot": 1, "zeta": 0}}],
        "b": [{"type": "loadByPeriod", "period": "P1D", "tieredReplicants": {"hot": 2, "cold": 1}}],
        DEFAULT_KEY: [{"type": "loadForever"}, {"type": "dropForever"}],
    })
    assert rs.unknown_tiers(set()) == ["_default_tier", "cold", "hot", "zeta"]
    assert rs.unknown_tiers({"hot", "_default_tier"}) == ["cold", "zeta"]
    assert rs.unknown_tiers({"hot", "cold", "zeta", "_default_tier", "extra"}) == []


# -- round trips ------------------------------------------------------------------------------------------------


def test_rule_set_round_trips_through_druid_json() -> None:
    rs = RuleSet.parse(RULES_JSON)
    text = json.dumps(rs.to_json())
    assert RuleSet.parse(json.loads(text)) == rs


def test_to_json_writes_druids_fields() -> None:
    assert rule("loadByPeriod", period="P1M", tieredReplicants={"hot": 2}).to_json() == {
        "type": "loadByPeriod", "period": "P1M", "includeFuture": True, "tieredReplicants": {"hot": 2},
        "useDefaultTierForNull": True}
    assert rule("loadByInterval", interval="2026-01-01/P1D").to_json() == {
        "type": "loadByInterval", "interval": "2026-01-01T00:00:00.000Z/2026-01-02T00:00:00.000Z",
        "tieredReplicants": {"_default_tier": 2}, "useDefaultTierForNull": True}
    assert rule("dropByPeriod", period="P2W", includeFuture=False).to_json() == {
        "type": "dropByPeriod", "period": "P2W", "includeFuture": False}
    assert rule("dropByInterval", interval="2026-01-01/2026-02-01").to_json() == {
        "type": "dropByInterval", "interval": "2026-01-01T00:00:00.000Z/2026-02-01T00:00:00.000Z"}
    assert rule("broadcastByPeriod", period="PT12H").to_json() == {
        "type": "broadcastByPeriod", "period": "PT12H", "includeFuture": True}
    assert rule("dropForever").to_json() == {"type": "dropForever"}
    assert rule("broadcastForever").to_json() == {"type": "broadcastForever"}


@pytest.mark.parametrize("obj", [
    {"type": "loadForever", "tieredReplicants": {}, "useDefaultTierForNull": False},
    {"type": "loadByPeriod", "period": "P1Y2M3DT4H5M6.007S", "includeFuture": False,
     "tieredReplicants": {"a": 0, "b": 3}, "useDefaultTierForNull": True},
    {"type": "loadByInterval", "interval": "2026-01-01T05:00:00.000Z/2026-01-01T06:00:00.000Z",
     "tieredReplicants": {"hot": 1}, "useDefaultTierForNull": True},
    {"type": "dropBeforeByPeriod", "period": "P3M"},
    {"type": "broadcastByInterval", "interval": "2026-01-01T00:00:00.000Z/2026-01-02T00:00:00.000Z"},
])
def test_canonical_json_round_trips_exactly(obj: dict[str, Any]) -> None:
    assert parse_rule(obj).to_json() == obj


def test_druid_shorthands_and_legacy_fields_are_accepted() -> None:
    # interval shorthand, a zone offset, broadcast's old colocatedDataSources
    assert rule("dropByInterval", interval="2026-01-01T01:00:00+01:00/P1D").interval == day("2026-01-01")
    assert rule("broadcastForever", colocatedDataSources=["a"]) == rule("broadcastForever")


def test_direct_construction_is_canonical_and_checked() -> None:
    r = Rule(type="loadForever", replicants=(("hot", 1), ("cold", 2)))
    assert r.replicants == (("cold", 2), ("hot", 1))
    assert Rule(type="dropForever", include_future=False) == Rule(type="dropForever")
    assert Rule(type="loadByPeriod", period=Period(days=1)) == rule("loadByPeriod", period="P1D", tieredReplicants={})
    for bad, message in [
        (dict(type="loadSometimes"), "unknown rule type"),
        (dict(type="loadByPeriod"), "needs period"),
        (dict(type="loadForever", period=Period(days=1)), "takes no period"),
        (dict(type="loadByPeriod", period=Period()), "must be positive"),
        (dict(type="dropByInterval"), "needs interval"),
        (dict(type="dropForever", replicants=(("hot", 1),)), "takes no tieredReplicants"),
        (dict(type="loadForever", replicants=(("hot", 1), ("hot", 2))), "names a tier twice"),
        (dict(type="loadForever", replicants=(("hot", -1),)), "non-negative"),
    ]:
        with pytest.raises(RuleError, match=message):
            Rule(**bad)  # type: ignore[arg-type]


# -- errors -----------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(("bad", "message"), [
    ({"type": "loadSometimes"}, "rules.wiki[1].type: unknown rule type 'loadSometimes'"),
    ({"type": 3}, "rules.wiki[1].type: unknown rule type 3"),
    ({"period": "P1D"}, "rules.wiki[1]: missing required field 'type'"),
    ({"type": None}, "rules.wiki[1]: missing required field 'type'"),
    ({"type": "loadByPeriod"}, "rules.wiki[1]: missing required field 'period'"),
    ({"type": "dropBeforeByPeriod", "period": None}, "rules.wiki[1]: missing required field 'period'"),
    ({"type": "loadByPeriod", "period": "PX"}, "rules.wiki[1].period: 'PX' is not an ISO-8601 period"),
    ({"type": "loadByPeriod", "period": "1 day"}, "rules.wiki[1].period: '1 day' is not an ISO-8601 period"),
    ({"type": "loadByPeriod", "period": 7}, "rules.wiki[1].period: 7 is not an ISO-8601 period"),
    ({"type": "dropByPeriod", "period": "P0D"}, "rules.wiki[1].period: 'P0D' is not a positive period"),
    ({"type": "dropByPeriod", "period": "PT0S"}, "rules.wiki[1].period: 'PT0S' is not a positive period"),
    ({"type": "loadByInterval"}, "rules.wiki[1]: missing required field 'interval'"),
    ({"type": "dropByInterval", "interval": "yesterday"}, "rules.wiki[1].interval: 'yesterday' is not an ISO-8601"),
    ({"type": "dropByInterval", "interval": "2026-02-01/2026-01-01"}, "rules.wiki[1].interval: interval ends before"),
    ({"type": "broadcastByInterval", "interval": "2026-13-01/P1D"}, "rules.wiki[1].interval: "),
    ({"type": "loadByPeriod", "period": "P1D", "includeFuture": "true"},
     "rules.wiki[1].includeFuture: expected true or false, got 'true'"),
    ({"type": "loadForever", "useDefaultTierForNull": 0},
     "rules.wiki[1].useDefaultTierForNull: expected true or false, got 0"),
    ({"type": "loadForever", "tieredReplicants": {"hot": -1}},
     "rules.wiki[1].tieredReplicants.hot: expected a non-negative integer, got -1"),
    ({"type": "loadForever", "tieredReplicants": {"hot": 1.5}},
     "rules.wiki[1].tieredReplicants.hot: expected an integer, got 1.5"),
    ({"type": "loadForever", "tieredReplicants": {"hot": "2"}},
     "rules.wiki[1].tieredReplicants.hot: expected an integer, got '2'"),
    ({"type": "loadForever", "tieredReplicants": {"hot": True}},
     "rules.wiki[1].tieredReplicants.hot: expected an integer, got True"),
    ({"type": "loadForever", "tieredReplicants": {"hot": None}},
     "rules.wiki[1].tieredReplicants.hot: replica count must not be null"),
    ({"type": "loadForever", "tieredReplicants": {"hot": 2**31}},
     "rules.wiki[1].tieredReplicants.hot: 2147483648 exceeds the maximum 2147483647"),
    ({"type": "loadForever", "tieredReplicants": {"": 1}},
     "rules.wiki[1].tieredReplicants: tier names must be non-empty strings, got ''"),
    ({"type": "loadForever", "tieredReplicants": [["hot", 1]]},
     "rules.wiki[1].tieredReplicants: expected a JSON object of tier to replica count"),
    ({"type": "dropForever", "tieredReplicants": {"hot": 1}},
     "rules.wiki[1].tieredReplicants: unknown field for a dropForever rule (allowed: type)"),
    ({"type": "loadForever", "period": "P1D"}, "rules.wiki[1].period: unknown field for a loadForever rule"),
    ({"type": "dropByInterval", "interval": "2026-01-01/P1D", "includeFuture": True},
     "rules.wiki[1].includeFuture: unknown field for a dropByInterval rule"),
    ({"type": "loadByPeriod", "peroid": "P1D"}, "rules.wiki[1].peroid: unknown field for a loadByPeriod rule"),
    ("dropForever", "rules.wiki[1]: expected a JSON object, got 'dropForever'"),
])
def test_invalid_rules_name_the_path_and_the_reason(bad: Any, message: str) -> None:
    with pytest.raises(RuleError) as info:
        RuleSet.parse({"wiki": [{"type": "dropForever"}, bad]})
    assert str(info.value).startswith(message), str(info.value)


@pytest.mark.parametrize(("bad", "message"), [
    ([], "rules: expected a JSON object of data source to rules"),
    ({"wiki": {"type": "dropForever"}}, "rules.wiki: expected a JSON array of rules"),
    ({"wiki": "dropForever"}, "rules.wiki: expected a JSON array of rules"),
    ({"": []}, "rules: data source names must be non-empty strings"),
    ({DEFAULT_KEY: []}, "rules._default: cluster-level rules cannot be empty"),
    ({DEFAULT_KEY: [{"type": "dropForever"}, {"type": "x"}]}, "rules._default[1].type: unknown rule type 'x'"),
])
def test_invalid_rule_sets_name_the_path(bad: Any, message: str) -> None:
    with pytest.raises(RuleError) as info:
        RuleSet.parse(bad)
    assert str(info.value).startswith(message), str(info.value)


def test_rule_errors_are_value_errors() -> None:
    assert issubclass(RuleError, ValueError)
    with pytest.raises(ValueError, match=r"^rule\.type: unknown rule type"):
        parse_rule({"type": "loadSometimes"})


def test_direct_rule_set_construction_is_checked() -> None:
    rs = RuleSet((("wiki", (rule("dropForever"),)), ("alpha", ())))
    assert rs.data_sources == ("alpha", "wiki")
    with pytest.raises(RuleError, match="wiki: the data source appears twice"):
        RuleSet((("wiki", ()), ("wiki", ())))
    with pytest.raises(RuleError, match="non-empty strings"):
        RuleSet((("", ()),))
    with pytest.raises(RuleError, match="rules must be Rule values"):
        RuleSet((("wiki", ({"type": "dropForever"},)),))  # type: ignore[arg-type]


def test_the_matcher_agrees_with_rule_for() -> None:
    from coordinator.rules.ruleset import RuleSet as _RuleSet
    from events import Interval as _Interval
    from events import parse_instant as _parse

    rules = _RuleSet.parse({"wiki": [{"type": "loadByPeriod", "period": "P1M", "tieredReplicants": {"hot": 1}},
                                     {"type": "dropBeforeByPeriod", "period": "P1Y"}],
                            "_default": [{"type": "loadByInterval", "interval": "2020-01-01/2030-01-01"},
                                         {"type": "dropForever"}]})
    now = _parse("2026-03-31T12:00:00Z")
    match = rules.matcher(now)
    day = 86_400_000
    for ds in ("wiki", "other"):
        for k in range(-800, 40, 7):
            interval = _Interval(now + k * day, now + (k + 1) * day)
            assert match(ds, interval) == rules.rule_for(ds, interval, now)
