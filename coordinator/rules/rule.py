"""Druid's retention rules: load, drop or broadcast the segments of a time range.

A rule is Druid's JSON as is, named by its ``type``: ``loadForever``, ``loadByPeriod``,
``loadByInterval``, ``dropForever``, ``dropByPeriod``, ``dropBeforeByPeriod``,
``dropByInterval``, ``broadcastForever``, ``broadcastByPeriod``, ``broadcastByInterval``.
The coordinator runs, for each segment, the first rule of its data source's chain that
*applies to* the segment's interval at the reference time ``now`` (see :mod:`.ruleset`).

**Matching**, exactly as Druid's ``Rules.eligibleForLoad``, ``PeriodDropRule``,
``PeriodDropBeforeRule``, ``IntervalDropRule`` and the load and broadcast rules. ``seg`` is
the segment's interval; a period rule's window is Joda's ``new Interval(period, now)``,
``[now - period, now)`` with calendar arithmetic (``P1M`` before March 31st is February 28th
or 29th):

- ``*Forever``: always.
- ``loadByInterval``, ``broadcastByInterval``: the rule's interval overlaps ``seg``
  (half-open: intervals that only abut do not overlap).
- ``dropByInterval``: the rule's interval contains ``seg``.
- ``loadByPeriod``, ``broadcastByPeriod``: with ``includeFuture`` (the default)
  ``window.start < seg.end``, so anything newer than the window's start; without, the
  window overlaps ``seg``.
- ``dropByPeriod``: with ``includeFuture`` (the default) ``window.start <= seg.start``;
  without, the window contains ``seg``.
- ``dropBeforeByPeriod``: ``seg.end <= window.start``.

"Contains" is Joda's ``Interval.contains``: ``a.start <= b.start < a.end and b.end <= a.end``.
It differs from :meth:`events.interval.Interval.contains` only for an empty ``b`` at
``a.end`` or inside an empty ``a``, which Joda does not count as contained.

**Load rules** carry ``tieredReplicants`` (tier to replica count). Missing or null means
``{"_default_tier": 2}``, or ``{}`` when ``useDefaultTierForNull`` is false (Druid's
``LoadRule``); an explicit ``{}`` is kept (segments matched are loaded nowhere).

**Parsing is strict** where Druid's Jackson is lenient: a field that no Druid rule of that
type reads is an error rather than silently ignored, except the two Druid's own tools write:
``includeFuture`` on ``dropBeforeByPeriod`` (the web console sets it) and
``colocatedDataSources`` on broadcast rules (Druid 0.19 and older); both are ignored. Scalars
are not coerced (``"2"`` is not a replica count). Every error is a :class:`RuleError` naming
the path, e.g. ``rules.wiki[1].period: 'PX' is not an ISO-8601 period (...)``.

Invariants: a :class:`Rule` is immutable and canonical (tiers sorted, fields that the type
does not use at their defaults), so ``parse_rule(r.to_json()) == r`` for every rule.

>>> from events.instant import parse_instant
>>> rule = parse_rule({"type": "loadByPeriod", "period": "P1M", "tieredReplicants": {"hot": 2}})
>>> now = parse_instant("2026-03-31T00:00:00Z")
>>> rule.window(now).iso()
'2026-02-28T00:00:00.000Z/2026-03-31T00:00:00.000Z'
>>> rule.applies_to(Interval.parse("2026-02-27/P1D"), now), rule.applies_to(Interval.parse("2026-02-28/P1D"), now)
(False, True)
>>> str(rule)
'loadByPeriod(P1M+future, hot=2)'
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import Any, Literal

from coordinator.rules._json import read_bool, read_int, read_str
from events.interval import Interval, IntervalError
from events.period import Period, PeriodError

RuleKind = Literal["load", "drop", "broadcast"]
_Scope = Literal["forever", "period", "before", "interval"]


class RuleError(ValueError):
    """A rule, or a rule set, that is not valid Druid rule JSON; the message names the path and the reason."""


#: Druid's ``DruidServer.DEFAULT_TIER`` and ``DEFAULT_NUM_REPLICANTS``.
DEFAULT_TIER = "_default_tier"
DEFAULT_NUM_REPLICANTS = 2

_TYPES: Mapping[str, tuple[RuleKind, _Scope]] = MappingProxyType({
    "loadForever": ("load", "forever"),
    "loadByPeriod": ("load", "period"),
    "loadByInterval": ("load", "interval"),
    "dropForever": ("drop", "forever"),
    "dropByPeriod": ("drop", "period"),
    "dropBeforeByPeriod": ("drop", "before"),
    "dropByInterval": ("drop", "interval"),
    "broadcastForever": ("broadcast", "forever"),
    "broadcastByPeriod": ("broadcast", "period"),
    "broadcastByInterval": ("broadcast", "interval"),
})

#: Every rule type Druid knows, in Druid's documentation order.
RULE_TYPES: tuple[str, ...] = tuple(_TYPES)

_ZERO = Period()


def _fields(kind: RuleKind, scope: _Scope) -> frozenset[str]:
    """The JSON fields a rule of this kind and scope may carry."""
    names = {"type"}
    if scope in ("period", "before"):
        # On dropBeforeByPeriod, includeFuture is written by Druid's web console and ignored by Druid.
        names |= {"period", "includeFuture"}
    elif scope == "interval":
        names.add("interval")
    if kind == "load":
        names |= {"tieredReplicants", "useDefaultTierForNull"}
    elif kind == "broadcast":
        names.add("colocatedDataSources")  # Druid <= 0.19; ignored since
    return frozenset(names)


def joda_contains(outer: Interval, inner: Interval) -> bool:
    """Joda's ``outer.contains(inner)``: an empty interval contains nothing, nor is one at ``outer.end`` contained."""
    return outer.start <= inner.start < outer.end and inner.end <= outer.end


@dataclass(frozen=True, slots=True)
class Rule:
    """One Druid rule. Build it with :func:`parse_rule`, or directly (then validated the same way).

    ``period`` is set exactly for the ``*ByPeriod`` types, ``interval`` exactly for the
    ``*ByInterval`` types; ``replicants`` (sorted ``(tier, count)`` pairs) only for load rules.
    """

    type: str
    period: Period | None = None
    interval: Interval | None = None
    include_future: bool = True
    replicants: tuple[tuple[str, int], ...] = ()
    use_default_tier_for_null: bool = True

    def __post_init__(self) -> None:
        shape = _TYPES.get(self.type)
        if shape is None:
            raise RuleError(f"unknown rule type {self.type!r} (known: {', '.join(RULE_TYPES)})")
        kind, scope = shape
        if (scope in ("period", "before")) != (self.period is not None):
            raise RuleError(f"a {self.type} rule {'needs' if self.period is None else 'takes no'} period")
        if self.period is not None and self.period == _ZERO:
            raise RuleError(f"the period of a {self.type} rule must be positive, got {self.period.iso()}")
        if (scope == "interval") != (self.interval is not None):
            raise RuleError(f"a {self.type} rule {'needs' if self.interval is None else 'takes no'} interval")
        if kind != "load" and self.replicants:
            raise RuleError(f"a {self.type} rule takes no tieredReplicants")
        tiers = [tier for tier, _ in self.replicants]
        if len(set(tiers)) != len(tiers):
            raise RuleError(f"tieredReplicants names a tier twice: {tiers}")
        for tier, count in self.replicants:
            read_str(tier, "tieredReplicants", RuleError)
            read_int(count, f"tieredReplicants.{tier}", RuleError)
        # Canonical form: sorted tiers; flags the type does not read at their defaults.
        object.__setattr__(self, "replicants", tuple(sorted(self.replicants)))
        if scope != "period":
            object.__setattr__(self, "include_future", True)
        if kind != "load":
            object.__setattr__(self, "use_default_tier_for_null", True)

    @property
    def kind(self) -> RuleKind:
        """``'load'``, ``'drop'`` or ``'broadcast'``."""
        return _TYPES[self.type][0]

    @property
    def matches_every_interval(self) -> bool:
        """Whether the rule applies to every segment whatever its interval and the time (the ``*Forever`` rules)."""
        return _TYPES[self.type][1] == "forever"

    @property
    def tiered_replicants(self) -> Mapping[str, int]:
        """Tier to replica count (read-only); empty for drop and broadcast rules."""
        return MappingProxyType(dict(self.replicants))

    def window(self, now: int) -> Interval | None:
        """``[now - period, now)`` for the period rules, None for the others."""
        if self.period is None:
            return None
        return Interval(self.period.subtract_from(now), now)

    def applies_to(self, interval: Interval, now: int, window: Interval | None = None) -> bool:
        """Whether this rule matches a segment of ``interval`` at reference time ``now`` (ms), as Druid decides.

        ``window``, when given, must be ``self.window(now)`` (callers matching many segments compute it once).
        """
        kind, scope = _TYPES[self.type]
        if scope == "forever":
            return True
        if scope == "interval":
            assert self.interval is not None
            if kind == "drop":
                return joda_contains(self.interval, interval)
            return self.interval.overlaps(interval)
        if window is None:
            window = self.window(now)
        assert window is not None
        if scope == "before":
            return interval.end <= window.start
        if kind == "drop":
            return window.start <= interval.start if self.include_future else joda_contains(window, interval)
        return window.start < interval.end if self.include_future else window.overlaps(interval)

    def to_json(self) -> dict[str, Any]:
        """Druid's JSON for this rule (as Druid writes it: load rules carry ``useDefaultTierForNull``)."""
        kind, scope = _TYPES[self.type]
        out: dict[str, Any] = {"type": self.type}
        if self.period is not None:
            out["period"] = self.period.iso()
        if scope == "period":
            out["includeFuture"] = self.include_future
        if self.interval is not None:
            out["interval"] = self.interval.iso()
        if kind == "load":
            out["tieredReplicants"] = dict(self.replicants)
            out["useDefaultTierForNull"] = self.use_default_tier_for_null
        return out

    def __str__(self) -> str:
        """Short text as Druid's web console shows a rule, with the tiers spelled out."""
        params: list[str] = []
        if self.period is not None:
            future = _TYPES[self.type][1] == "period" and self.include_future
            params.append(self.period.iso() + ("+future" if future else ""))
        if self.interval is not None:
            params.append(self.interval.iso())
        if self.kind == "load":
            params.append(", ".join(f"{tier}={count}" for tier, count in self.replicants) or "no replicas")
        return f"{self.type}({', '.join(params)})"


def parse_rule(obj: object, path: str = "rule") -> Rule:
    """One rule from Druid's JSON; :class:`RuleError` names ``path`` (and the field) when it is invalid."""
    if not isinstance(obj, Mapping):
        raise RuleError(f"{path}: expected a JSON object, got {obj!r}")
    if obj.get("type") is None:
        raise RuleError(f"{path}: missing required field 'type'")
    rule_type = obj["type"]
    if not isinstance(rule_type, str) or rule_type not in _TYPES:
        raise RuleError(f"{path}.type: unknown rule type {rule_type!r} (known: {', '.join(RULE_TYPES)})")
    kind, scope = _TYPES[rule_type]
    allowed = _fields(kind, scope)
    for key in obj:
        if key not in allowed:
            names = ", ".join(sorted(allowed))
            raise RuleError(f"{path}.{key}: unknown field for a {rule_type} rule (allowed: {names})")

    period = _read_period(obj, path) if scope in ("period", "before") else None
    interval = _read_interval(obj, path) if scope == "interval" else None
    include_future = True
    if obj.get("includeFuture") is not None:
        include_future = read_bool(obj["includeFuture"], f"{path}.includeFuture", RuleError)
    replicants: tuple[tuple[str, int], ...] = ()
    use_default = True
    if kind == "load":
        if obj.get("useDefaultTierForNull") is not None:
            use_default = read_bool(obj["useDefaultTierForNull"], f"{path}.useDefaultTierForNull", RuleError)
        raw = obj.get("tieredReplicants")
        if raw is None:
            replicants = ((DEFAULT_TIER, DEFAULT_NUM_REPLICANTS),) if use_default else ()
        else:
            replicants = _read_replicants(raw, f"{path}.tieredReplicants")
    return Rule(type=rule_type, period=period, interval=interval, include_future=include_future,
                replicants=replicants, use_default_tier_for_null=use_default)


def _read_period(obj: Mapping[str, Any], path: str) -> Period:
    raw = obj.get("period")
    if raw is None:
        raise RuleError(f"{path}: missing required field 'period'")
    try:
        period = Period.parse(raw)
    except PeriodError as e:
        raise RuleError(f"{path}.period: {e}") from None
    if period == _ZERO:
        raise RuleError(f"{path}.period: {raw!r} is not a positive period")
    return period


def _read_interval(obj: Mapping[str, Any], path: str) -> Interval:
    raw = obj.get("interval")
    if raw is None:
        raise RuleError(f"{path}: missing required field 'interval'")
    try:
        return Interval.parse(raw)
    except IntervalError as e:
        raise RuleError(f"{path}.interval: {e}") from None


def _read_replicants(raw: object, path: str) -> tuple[tuple[str, int], ...]:
    if not isinstance(raw, Mapping):
        raise RuleError(f"{path}: expected a JSON object of tier to replica count, got {raw!r}")
    pairs: list[tuple[str, int]] = []
    for tier, count in raw.items():
        if not isinstance(tier, str) or not tier:
            raise RuleError(f"{path}: tier names must be non-empty strings, got {tier!r}")
        if count is None:
            raise RuleError(f"{path}.{tier}: replica count must not be null")
        pairs.append((tier, read_int(count, f"{path}.{tier}", RuleError)))
    return tuple(sorted(pairs))
