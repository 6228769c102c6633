"""Druid's retention rules and the coordinator's dynamic configuration, parsed from Druid's JSON.

- :mod:`.rule`: one rule (load / drop / broadcast, forever / by period / by interval) and when
  it applies to a segment interval at a given ``now``.
- :mod:`.ruleset`: every data source's rules, the ``_default`` chain, first match wins.
- :mod:`.dynamic_config`: Druid's coordinator dynamic configuration, seed 004's queue shares and
  smart segment loading's effective limits.

Pure: ``now`` is always an argument, never read from a clock.
"""

from coordinator.rules.dynamic_config import ConfigError, DynamicConfig, EffectiveLimits, QueueShares
from coordinator.rules.rule import (
    DEFAULT_NUM_REPLICANTS,
    DEFAULT_TIER,
    RULE_TYPES,
    Rule,
    RuleError,
    RuleKind,
    parse_rule,
)
from coordinator.rules.ruleset import DEFAULT_KEY, RuleSet, parse_rules

__all__ = [
    "DEFAULT_KEY",
    "DEFAULT_NUM_REPLICANTS",
    "DEFAULT_TIER",
    "RULE_TYPES",
    "ConfigError",
    "DynamicConfig",
    "EffectiveLimits",
    "QueueShares",
    "Rule",
    "RuleError",
    "RuleKind",
    "RuleSet",
    "parse_rule",
    "parse_rules",
]
