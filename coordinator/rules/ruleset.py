"""The rules of every data source, and the cluster-wide ``_default`` rules behind them.

Druid keeps one ordered list of rules per data source plus the list under ``_default``. A
segment's **chain** is its data source's rules followed by the ``_default`` rules
(``MetadataRuleManager.getRulesWithDefault``); the coordinator runs the **first** rule of the
chain that applies to the segment and stops there (``RunRules``). When none applies, nothing is
done with the segment and Druid reports it: :meth:`RuleSet.rule_for` then returns None.

Invariants:
- immutable; data sources are non-empty strings, held in sorted order, each with its rules in
  the order given (order is the meaning of a rule list);
- ``_default``, when present, is not empty (Druid: "Cluster-level rules cannot be empty"); a
  data source may have an empty list, which leaves it to ``_default``;
- ``RuleSet.parse(rs.to_json()) == rs``.

:meth:`RuleSet.parse` does not add Druid's initial ``_default`` rule; :meth:`RuleSet.druid_default`
is the rule set a fresh Druid cluster starts with (``loadForever`` two replicas on ``_default_tier``).

>>> from events.instant import parse_instant
>>> rs = RuleSet.parse({
...     "wiki": [{"type": "loadByPeriod", "period": "P7D", "tieredReplicants": {"hot": 2}},
...              {"type": "dropForever"}],
...     "_default": [{"type": "loadForever"}],
... })
>>> now = parse_instant("2026-01-10")
>>> str(rs.rule_for("wiki", Interval.parse("2026-01-09/P1D"), now))
'loadByPeriod(P7D+future, hot=2)'
>>> str(rs.rule_for("wiki", Interval.parse("2025-12-01/P1D"), now))
'dropForever()'
>>> str(rs.rule_for("other", Interval.parse("2025-12-01/P1D"), now))
'loadForever(_default_tier=2)'
>>> rs.unknown_tiers({"_default_tier"})
['hot']
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from coordinator.rules.rule import DEFAULT_NUM_REPLICANTS, DEFAULT_TIER, Rule, RuleError, parse_rule
from events.interval import Interval

#: Druid's ``druid.manager.rules.defaultRule``: the data source name of the cluster-wide rules.
DEFAULT_KEY = "_default"


@dataclass(frozen=True, slots=True)
class RuleSet:
    """Data source to its rules; ``entries`` are ``(data source, rules)`` pairs sorted by data source."""

    entries: tuple[tuple[str, tuple[Rule, ...]], ...] = ()

    def __post_init__(self) -> None:
        names = [name for name, _ in self.entries]
        for name, rules in self.entries:
            if not isinstance(name, str) or not name:
                raise RuleError(f"data source names must be non-empty strings, got {name!r}")
            if names.count(name) > 1:
                raise RuleError(f"{name}: the data source appears twice")
            if name == DEFAULT_KEY and not rules:
                raise RuleError(f"{DEFAULT_KEY}: cluster-level rules cannot be empty")
            if not all(isinstance(rule, Rule) for rule in rules):
                raise RuleError(f"{name}: rules must be Rule values")
        object.__setattr__(self, "entries", tuple(sorted((n, tuple(r)) for n, r in self.entries)))

    @staticmethod
    def parse(obj: object, path: str = "rules") -> RuleSet:
        """Druid's ``{dataSource: [rule, ...], "_default": [...]}``; :class:`RuleError` names the path."""
        if not isinstance(obj, Mapping):
            raise RuleError(f"{path}: expected a JSON object of data source to rules, got {obj!r}")
        entries: list[tuple[str, tuple[Rule, ...]]] = []
        for name, raw in obj.items():
            if not isinstance(name, str) or not name:
                raise RuleError(f"{path}: data source names must be non-empty strings, got {name!r}")
            entries.append((name, parse_rules(raw, f"{path}.{name}")))
            if name == DEFAULT_KEY and not entries[-1][1]:
                raise RuleError(f"{path}.{name}: cluster-level rules cannot be empty")
        return RuleSet(tuple(entries))

    @staticmethod
    def druid_default() -> RuleSet:
        """The rules of a fresh Druid cluster: ``_default`` is ``loadForever {"_default_tier": 2}``."""
        load = Rule(type="loadForever", replicants=((DEFAULT_TIER, DEFAULT_NUM_REPLICANTS),))
        return RuleSet(((DEFAULT_KEY, (load,)),))

    @property
    def data_sources(self) -> tuple[str, ...]:
        """The data sources with rules of their own (``_default`` excluded), sorted."""
        return tuple(name for name, _ in self.entries if name != DEFAULT_KEY)

    @property
    def default_rules(self) -> tuple[Rule, ...]:
        return self.rules_of(DEFAULT_KEY)

    def rules_of(self, data_source: str) -> tuple[Rule, ...]:
        """The data source's own rules (not followed by ``_default``); empty when it has none."""
        for name, rules in self.entries:
            if name == data_source:
                return rules
        return ()

    def chain(self, data_source: str) -> tuple[Rule, ...]:
        """The data source's rules followed by the ``_default`` rules: the order in which they are tried."""
        if data_source == DEFAULT_KEY:
            return self.default_rules
        return self.rules_of(data_source) + self.default_rules

    def rule_for(self, data_source: str, interval: Interval, now: int) -> Rule | None:
        """The first rule of the chain that applies to a segment of ``interval`` at ``now``; None when none does."""
        for rule in self.chain(data_source):
            if rule.applies_to(interval, now):
                return rule
        return None

    def interval_free(self, data_source: str) -> tuple[bool, Rule | None]:
        """``(True, rule)`` when every segment of the data source gets the same rule whatever its interval and
        ``now`` (its chain is empty, ``rule`` None, or starts with a ``*Forever`` rule); ``(False, None)`` when the
        rule depends on the interval (ask :meth:`rule_for` or :meth:`matcher` per segment)."""
        chain = self.chain(data_source)
        if not chain:
            return True, None
        if chain[0].matches_every_interval:
            return True, chain[0]
        return False, None

    def matcher(self, now: int) -> Callable[[str, Interval], Rule | None]:
        """``rule_for`` at a fixed ``now`` for many segments: each data source's chain and each period
        rule's window are computed once."""
        chains: dict[str, tuple[tuple[Rule, Interval | None], ...]] = {}

        def match(data_source: str, interval: Interval) -> Rule | None:
            chain = chains.get(data_source)
            if chain is None:
                chain = chains[data_source] = tuple((r, r.window(now)) for r in self.chain(data_source))
            for rule, window in chain:
                if rule.applies_to(interval, now, window):
                    return rule
            return None

        return match

    def with_rules(self, data_source: str, rules: Iterable[Rule]) -> RuleSet:
        """This rule set with ``data_source``'s rules replaced (as Druid's POST of a data source's rules)."""
        kept = tuple((name, r) for name, r in self.entries if name != data_source)
        return RuleSet((*kept, (data_source, tuple(rules))))

    def to_json(self) -> dict[str, list[dict[str, Any]]]:
        """Druid's JSON: data source to its list of rules."""
        return {name: [rule.to_json() for rule in rules] for name, rules in self.entries}

    def unknown_tiers(self, known_tiers: Collection[str]) -> list[str]:
        """Tiers named by any load rule (whatever its replica count) that no server has: sorted, each once.

        Druid reports these (its coordinator alerts on load rules for tiers without servers) and
        carries on; so does the caller.
        """
        named = {tier for _, rules in self.entries for rule in rules for tier in rule.tiered_replicants}
        return sorted(named - set(known_tiers))


def parse_rules(raw: object, path: str) -> tuple[Rule, ...]:
    """An ordered list of rules from Druid's JSON array; :class:`RuleError` names ``path[i]`` of a bad rule."""
    if isinstance(raw, (str, bytes)) or not isinstance(raw, Sequence):
        raise RuleError(f"{path}: expected a JSON array of rules, got {raw!r}")
    return tuple(parse_rule(item, f"{path}[{i}]") for i, item in enumerate(raw))
