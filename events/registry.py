"""The registry of event types: stable wire names, schema versions, topics, upcasters.

Every event type is registered once under an explicit ``event_type`` string
that never changes, with the ``schema_version`` this build writes and the
logical topic it travels on. A renamed class keeps its wire name.

A change that only adds a field with a default keeps the version. Any other
change bumps ``schema_version`` and registers a pure upcaster
``v{n}_to_v{n+1}(payload) -> payload``; decoding applies the chain, so readers
only ever see the current shape and old bytes stay readable forever.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, ClassVar, TypeVar

Payload = Mapping[str, Any]
Upcaster = Callable[[Payload], Payload]


class Event:
    """Base of every event payload type: a frozen, slotted dataclass registered below."""

    __slots__ = ()
    event_type: ClassVar[str]
    schema_version: ClassVar[int]
    event_topic: ClassVar[str]


E = TypeVar("E", bound=type[Event])

_BY_NAME: dict[str, type[Event]] = {}
_UPCASTERS: dict[tuple[str, int], Upcaster] = {}


def event_type(name: str, *, topic: str, version: int = 1) -> Callable[[E], E]:
    """Register an event class under its stable wire ``name`` (decorator)."""

    def register(cls: E) -> E:
        if name in _BY_NAME and _BY_NAME[name] is not cls:
            raise ValueError(f"event_type {name!r} registered twice")
        cls.event_type = name
        cls.schema_version = version
        cls.event_topic = topic
        _BY_NAME[name] = cls
        return cls

    return register


def upcaster(name: str, from_version: int) -> Callable[[Upcaster], Upcaster]:
    """Register the pure function that turns a ``from_version`` payload into ``from_version + 1``."""

    def register(fn: Upcaster) -> Upcaster:
        key = (name, from_version)
        if key in _UPCASTERS:
            raise ValueError(f"upcaster {name} v{from_version} registered twice")
        _UPCASTERS[key] = fn
        return fn

    return register


def event_class(name: str) -> type[Event] | None:
    return _BY_NAME.get(name)


def all_event_classes() -> tuple[type[Event], ...]:
    """Every registered type, ordered by wire name (deterministic)."""
    return tuple(_BY_NAME[n] for n in sorted(_BY_NAME))


def upcast(name: str, version: int, payload: Payload) -> Payload:
    """Apply the chain of upcasters from ``version`` to the current version of ``name``.

    Raises ``LookupError`` when a step of the chain is missing (a bug: every bump
    must ship its upcaster) and ``ValueError`` for a version newer than this build.
    """
    cls = _BY_NAME[name]
    if version > cls.schema_version:
        raise ValueError(f"schema_version {version} of {name} is newer than this build knows ({cls.schema_version})")
    while version < cls.schema_version:
        step = _UPCASTERS.get((name, version))
        if step is None:
            raise LookupError(f"no upcaster for {name} from schema_version {version}")
        payload = step(payload)
        version += 1
    return payload
