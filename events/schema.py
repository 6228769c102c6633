"""Typed records on the wire: one codec for every payload, descriptor and lock value.

A record is a frozen dataclass whose fields carry an explicit wire name
(``wire("taskId")``): names are chosen once and never derived from the Python
attribute. From the field's type annotation the codec derives how to check and
convert the JSON value, so every record validates the same way and every error
names the full path of the offending field (``payload.segments[2].interval``).

Supported field types: ``str`` (non-empty unless ``allow_empty``), ``int`` (not
bool; optional ``minimum``), ``bool``, ``float``, :class:`Instant` (ISO text on
the wire, UTC milliseconds in Python), :class:`~events.interval.Interval`,
``Literal[...]`` of strings, nested records, ``tuple[X, ...]`` (JSON arrays),
``X | None`` (absent or null on the wire), :data:`JsonObject` and
:data:`JsonValue` (opaque JSON kept as given).

Invariants: ``decode_record(cls, encode_record(r), p) == r`` for every valid
record ``r``; encoding is deterministic (field order is declaration order;
``None`` optionals are omitted); unknown wire fields are ignored, so an
additive change (a new field with a default) never breaks an older reader.
"""

from __future__ import annotations

import dataclasses
import types
import typing
from collections.abc import Callable, Mapping
from typing import Any, Literal, NewType, TypeVar, Union, get_args, get_origin

from events.instant import InstantError, format_instant, parse_instant
from events.interval import Interval, IntervalError

#: Milliseconds since the epoch, written as ISO-8601 text on the wire.
Instant = NewType("Instant", int)
#: An opaque JSON object (Druid rule, loadSpec, shardSpec, dynamic config ...).
JsonObject = Mapping[str, Any]
#: Any opaque JSON value (stream offsets metadata ...).
JsonValue = Any

R = TypeVar("R")

_MISSING: Any = dataclasses.MISSING


class EventValidationError(ValueError):
    """A value on the wire that breaks the contract; ``field`` is its full path."""

    def __init__(self, field: str, value: object, problem: str) -> None:
        self.field = field
        self.value = value
        self.problem = problem
        shown = repr(value)
        if len(shown) > 120:
            shown = shown[:117] + "..."
        super().__init__(f"{field}: {problem} (got {shown})")


def wire(
    name: str,
    default: Any = _MISSING,
    *,
    allow_empty: bool = False,
    minimum: int | None = None,
    non_empty: bool = False,
    max_items: int | None = None,
) -> Any:
    """Declare a record field with its stable wire name.

    ``allow_empty`` lets a string be ``""``; ``minimum`` bounds an int;
    ``non_empty`` requires a tuple to hold at least one item; ``max_items`` bounds
    its length (:mod:`events.limits`); ``minimum`` on a tuple of ints bounds each item.
    """
    meta = {"wire": name, "allow_empty": allow_empty, "minimum": minimum, "non_empty": non_empty,
            "max_items": max_items}
    if default is _MISSING:
        return dataclasses.field(metadata=meta)
    return dataclasses.field(default=default, metadata=meta)


Decoder = Callable[[Any, str], Any]
Encoder = Callable[[Any], Any]


@dataclasses.dataclass(frozen=True, slots=True)
class _FieldCodec:
    attr: str
    wire: str
    required: bool
    optional: bool
    decode: Decoder
    encode: Encoder


_CODECS: dict[type, tuple[_FieldCodec, ...]] = {}
_FAST_DECODERS: dict[type, Callable[[Any], Any]] = {}
_FAST_ENCODERS: dict[type, Callable[[Any], dict[str, Any]]] = {}


class _Fail:
    __slots__ = ()

    def __repr__(self) -> str:
        return "FAIL"


#: What a generated decoder (events.compiled) returns instead of raising: "ask the reflective codec".
FAIL: Any = _Fail()


def is_record(tp: object) -> bool:
    return isinstance(tp, type) and dataclasses.is_dataclass(tp) and any(
        "wire" in f.metadata for f in dataclasses.fields(tp)
    )


def _codecs(cls: type) -> tuple[_FieldCodec, ...]:
    found = _CODECS.get(cls)
    if found is not None:
        return found
    hints = typing.get_type_hints(cls)
    out = []
    for f in dataclasses.fields(cls):
        if not f.init:
            continue  # an internal cache (init=False), never on the wire
        if "wire" not in f.metadata:
            raise TypeError(f"{cls.__name__}.{f.name} has no wire name")
        tp = hints[f.name]
        optional = _is_optional(tp)
        decode, encode = _converters(tp, f.metadata)
        required = f.default is _MISSING and f.default_factory is _MISSING
        out.append(_FieldCodec(f.name, f.metadata["wire"], required, optional, decode, encode))
    codecs = tuple(out)
    _CODECS[cls] = codecs
    return codecs


def _is_optional(tp: Any) -> bool:
    return get_origin(tp) in (Union, types.UnionType) and type(None) in get_args(tp)


def _converters(tp: Any, meta: Mapping[str, Any]) -> tuple[Decoder, Encoder]:
    origin = get_origin(tp)
    if origin in (Union, types.UnionType):
        members = [a for a in get_args(tp) if a is not type(None)]
        if len(members) != 1:
            raise TypeError(f"unsupported union {tp}")
        inner_decode, inner_encode = _converters(members[0], meta)

        def decode_optional(v: Any, path: str) -> Any:
            return None if v is None else inner_decode(v, path)

        def encode_optional(v: Any) -> Any:
            return None if v is None else inner_encode(v)

        return decode_optional, encode_optional
    if origin is tuple:
        args = get_args(tp)
        if len(args) != 2 or args[1] is not Ellipsis:
            raise TypeError(f"only tuple[X, ...] is supported, not {tp}")
        item_decode, item_encode = _converters(args[0], {"minimum": meta.get("minimum")})
        non_empty = bool(meta.get("non_empty"))
        max_items = meta.get("max_items")

        def decode_tuple(v: Any, path: str) -> Any:
            if not isinstance(v, list):
                raise EventValidationError(path, v, "must be a JSON array")
            if non_empty and not v:
                raise EventValidationError(path, v, "must not be empty")
            if max_items is not None and len(v) > max_items:
                raise EventValidationError(path, f"{len(v)} items", f"must hold at most {max_items} items")
            return tuple(item_decode(x, f"{path}[{i}]") for i, x in enumerate(v))

        def encode_tuple(v: Any) -> Any:
            return [item_encode(x) for x in v]

        return decode_tuple, encode_tuple
    if origin is Literal:
        allowed = get_args(tp)

        def decode_literal(v: Any, path: str) -> Any:
            if v not in allowed or not isinstance(v, str):
                raise EventValidationError(path, v, "must be one of " + ", ".join(map(repr, allowed)))
            return v

        return decode_literal, _identity
    if tp is Instant:
        return decode_instant, format_instant
    if tp is Interval:
        return _decode_interval, Interval.iso
    if tp is str:
        allow_empty = bool(meta.get("allow_empty"))

        def decode_str(v: Any, path: str) -> Any:
            if not isinstance(v, str):
                raise EventValidationError(path, v, "must be a string")
            if not allow_empty and not v:
                raise EventValidationError(path, v, "must not be empty")
            return v

        return decode_str, _identity
    if tp is bool:
        return _decode_bool, _identity
    if tp is int:
        minimum = meta.get("minimum")

        def decode_int(v: Any, path: str) -> Any:
            if not isinstance(v, int) or isinstance(v, bool):
                raise EventValidationError(path, v, "must be an integer")
            if minimum is not None and v < minimum:
                raise EventValidationError(path, v, f"must be at least {minimum}")
            return v

        return decode_int, _identity
    if tp is float:
        return _decode_float, _identity
    if tp is JsonObject or origin is Mapping:
        return _decode_object, _identity
    if tp is Any:
        return _decode_any, _identity
    if is_record(tp):
        record_type = tp

        def decode_nested(v: Any, path: str) -> Any:
            return decode_record_reflective(record_type, v, path)

        return decode_nested, encode_record_reflective
    raise TypeError(f"unsupported field type {tp!r}")


def _identity(v: Any) -> Any:
    return v


def decode_instant(v: Any, path: str) -> int:
    if not isinstance(v, str):
        raise EventValidationError(path, v, "must be an ISO-8601 instant string")
    try:
        return parse_instant(v)
    except InstantError as e:
        raise EventValidationError(path, v, str(e)) from None


def _decode_interval(v: Any, path: str) -> Interval:
    if not isinstance(v, str):
        raise EventValidationError(path, v, "must be an ISO-8601 interval string start/end")
    try:
        return Interval.parse(v)
    except IntervalError as e:
        raise EventValidationError(path, v, str(e)) from None


def _decode_bool(v: Any, path: str) -> bool:
    if not isinstance(v, bool):
        raise EventValidationError(path, v, "must be true or false")
    return v


def _decode_float(v: Any, path: str) -> float:
    if not isinstance(v, int | float) or isinstance(v, bool):
        raise EventValidationError(path, v, "must be a number")
    return float(v)


def _decode_object(v: Any, path: str) -> Mapping[str, Any]:
    if not isinstance(v, dict):
        raise EventValidationError(path, v, "must be a JSON object")
    return v


def _decode_any(v: Any, path: str) -> Any:
    return v


def decode_record(cls: type[R], obj: Any, path: str) -> R:
    """Check a JSON object against a record type and build the record.

    Runs the type's generated decoder (:mod:`events.compiled`); whatever that
    one is not sure of goes to :func:`decode_record_reflective`, which accepts
    it or raises the error, so results and errors are those of the reflective
    codec.
    """
    fast = _FAST_DECODERS.get(cls)
    if fast is None:
        from events.compiled import compile_decoder

        fast = _FAST_DECODERS[cls] = compile_decoder(cls)
    record = fast(obj)
    if record is FAIL:
        return decode_record_reflective(cls, obj, path)
    return record  # type: ignore[no-any-return]


def encode_record(record: Any) -> dict[str, Any]:
    """The JSON object of a record: wire names in declaration order, ``None`` optionals omitted.

    Runs the type's generated encoder (:mod:`events.compiled`); same output as
    :func:`encode_record_reflective`.
    """
    cls = type(record)
    fast = _FAST_ENCODERS.get(cls)
    if fast is None:
        from events.compiled import compile_encoder

        fast = _FAST_ENCODERS[cls] = compile_encoder(cls)
    return fast(record)


def decode_record_reflective(cls: type[R], obj: Any, path: str) -> R:
    """The reference decoder: field by field through the converters derived from the annotations.

    Raises :class:`EventValidationError` naming ``path.<wire name>`` of the
    first missing or invalid field. A record class may define
    ``_from_wire(obj) -> obj`` to fill derived defaults and ``_check(path)``
    for rules that span fields.
    """
    if not isinstance(obj, dict):
        raise EventValidationError(path, obj, "must be a JSON object")
    prepare = getattr(cls, "_from_wire", None)
    if prepare is not None:
        obj = prepare(obj)
    kwargs: dict[str, Any] = {}
    for fc in _codecs(cls):
        where = f"{path}.{fc.wire}" if path else fc.wire
        if fc.wire not in obj or (obj[fc.wire] is None and not fc.optional):
            if fc.required and not fc.optional:
                raise EventValidationError(where, None, "is required")
            continue
        kwargs[fc.attr] = fc.decode(obj[fc.wire], where)
    try:
        record = cls(**kwargs)
    except (ValueError, TypeError) as e:
        raise EventValidationError(path or cls.__name__, obj, str(e)) from None
    check = getattr(record, "_check", None)
    if check is not None:
        check(path)
    return record


def encode_record_reflective(record: Any) -> dict[str, Any]:
    """The reference encoder (see :func:`encode_record`)."""
    out: dict[str, Any] = {}
    for fc in _codecs(type(record)):
        value = getattr(record, fc.attr)
        if value is None:
            continue
        out[fc.wire] = fc.encode(value)
    return out
