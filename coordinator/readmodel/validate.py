"""The pure checks a write runs before it is sent: the same parsers the placement fold applies.

An envelope that decodes can still carry rules or a dynamic config the planner cannot use (the schema
carries them as opaque JSON); :func:`check_payload` parses them as the fold will, so a bad write is refused
with the field path (``payload.rules[0].tieredReplicants.hot: expected a non-negative integer, got -1``)
instead of ending as a dead letter.

>>> from events.cluster import RulesSet
>>> check_payload(RulesSet(data_source="wiki", rules=({"type": "loadForever", "tieredReplicants": {"hot": -1}},)))
Traceback (most recent call last):
...
coordinator.readmodel.validate.PayloadError: payload.rules[0].tieredReplicants.hot: expected a non-negative ...
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from coordinator.rules.dynamic_config import ConfigError, DynamicConfig
from coordinator.rules.rule import RuleError
from coordinator.rules.ruleset import DEFAULT_KEY, parse_rules
from events.cluster import DynamicConfigSet, RulesSet
from events.registry import Event


class PayloadError(ValueError):
    """A payload the coordinator would refuse; the message starts with the field path."""


def check_rules(data_source: str, rules: object, path: str = "payload.rules") -> None:
    """Druid's rules of one data source (``_default``: the cluster's, never empty)."""
    if not isinstance(rules, list | tuple):
        raise PayloadError(f"{path}: expected a JSON list of rules, got {rules!r}")
    if data_source == DEFAULT_KEY and not rules:
        raise PayloadError(f"{path}: the {DEFAULT_KEY} rules cannot be empty")
    try:
        parse_rules([dict(r) if isinstance(r, dict) else r for r in rules], path)
    except RuleError as e:
        raise PayloadError(str(e)) from None


def check_config(update: object, current: DynamicConfig | None = None, path: str = "payload.config") -> DynamicConfig:
    """A dynamic-config update merged into ``current`` (default: Druid's defaults); returns the merged config."""
    try:
        return (current or DynamicConfig()).updated(update)
    except ConfigError as e:
        raise PayloadError(f"{path}.{e}" if not str(e).startswith("dynamic config") else f"{path}: {e}") from None


def check_payload(event: Event) -> None:
    """Refuse an event whose payload the coordinator's folds would not take (rules, dynamic config)."""
    if isinstance(event, RulesSet):
        check_rules(event.data_source, list(event.rules))
    elif isinstance(event, DynamicConfigSet):
        check_config(dict(event.config))


def parse_assignments(items: Sequence[str]) -> dict[str, Any]:
    """``KEY=VALUE`` pairs (VALUE as JSON, else a plain string) into a config update.

    >>> parse_assignments(["maxSegmentsToMove=5", "decommissioningNodes=[\\"h1\\"]", "x=abc"])
    {'maxSegmentsToMove': 5, 'decommissioningNodes': ['h1'], 'x': 'abc'}
    """
    import json

    out: dict[str, Any] = {}
    for item in items:
        key, sep, text = item.partition("=")
        if not sep or not key:
            raise PayloadError(f"{item!r}: expected KEY=VALUE, e.g. maxSegmentsToMove=50")
        try:
            out[key] = json.loads(text)
        except ValueError:
            out[key] = text
    return out
