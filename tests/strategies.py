"""Hypothesis strategies for every record and event type, derived from the same type hints the codec uses.

Deriving from the hints means a new event type is covered the moment it is
registered; ``test_every_event_type_has_a_strategy`` guards that.
"""

from __future__ import annotations

import dataclasses
import functools
import types
import typing
from collections.abc import Mapping
from typing import Any, Literal, Union, get_args, get_origin

from hypothesis import strategies as st

from events.instant import MAX_INSTANT, MIN_INSTANT
from events.interval import Interval
from events.registry import Event
from events.schema import Instant, JsonObject, is_record

# Instants mostly near today, sometimes anywhere in Druid's range.
instants = st.one_of(
    st.integers(min_value=0, max_value=7_258_118_400_000),  # 1970..2200
    st.integers(min_value=MIN_INSTANT, max_value=MAX_INSTANT),
)


@st.composite
def intervals(draw: st.DrawFn, non_empty: bool = False) -> Interval:
    start = draw(instants)
    length = draw(st.one_of(st.integers(0, 10 * 366 * 86_400_000), st.sampled_from([1, 3_600_000, 86_400_000])))
    if non_empty:
        start = min(start, MAX_INSTANT - 1)
        length = max(length, 1)
    return Interval(start, min(start + length, MAX_INSTANT))


names = st.text(alphabet=st.characters(codec="utf-8", exclude_categories=("Cs",)), min_size=1, max_size=20)
json_scalars = st.one_of(st.none(), st.booleans(), st.integers(-(2**53), 2**53), st.text(max_size=10),
                         st.floats(allow_nan=False, allow_infinity=False))
json_values = st.recursive(
    json_scalars,
    lambda inner: st.one_of(st.lists(inner, max_size=3), st.dictionaries(st.text(max_size=8), inner, max_size=3)),
    max_leaves=8,
)
json_objects = st.dictionaries(st.text(max_size=8), json_values, max_size=4)


def for_type(tp: Any, meta: Mapping[str, Any]) -> st.SearchStrategy[Any]:
    origin = get_origin(tp)
    if origin in (Union, types.UnionType):
        inner = next(a for a in get_args(tp) if a is not type(None))
        return st.one_of(st.none(), for_type(inner, meta))
    if origin is tuple:
        item = get_args(tp)[0]
        item_strategy = for_type(item, {"minimum": meta.get("minimum")})
        return st.lists(item_strategy, min_size=1 if meta.get("non_empty") else 0, max_size=3).map(tuple)
    if origin is Literal:
        return st.sampled_from(get_args(tp))
    if tp is Instant:
        return instants
    if tp is Interval:
        return intervals()
    if tp is str:
        return st.text(max_size=12) if meta.get("allow_empty") else names
    if tp is bool:
        return st.booleans()
    if tp is int:
        lo = meta.get("minimum")
        return st.integers(min_value=lo if lo is not None else -(2**31), max_value=2**40)
    if tp is float:
        return st.floats(allow_nan=False, allow_infinity=False)
    if tp is JsonObject or origin is Mapping:
        return json_objects
    if tp is Any:
        return json_values
    if is_record(tp):
        return records(tp)
    raise TypeError(f"no strategy for {tp!r}")


@functools.cache
def records(cls: type) -> st.SearchStrategy[Any]:
    hints = typing.get_type_hints(cls)
    fields = {f.name: for_type(hints[f.name], f.metadata) for f in dataclasses.fields(cls) if f.init}
    if cls.__name__ == "SegmentDescriptor":
        fields["interval"] = intervals(non_empty=True)
    return st.builds(cls, **fields)


def events_of(cls: type[Event]) -> st.SearchStrategy[Event]:
    return records(cls)
