"""Per-type decoders and encoders, generated once from the record declarations of :mod:`events.schema`.

The reflective codec of :mod:`events.schema` walks a list of field converters
for every value and builds each record through its dataclass ``__init__``.
This module turns each record type's declaration into one straight-line Python
function (source generated from the same field specs, compiled with
``exec``), with every check inlined and exact-type tests (``type(v) is str``)
instead of ``isinstance`` chains.

A generated decoder never raises and never builds an error message: on the
first value it is not sure of (a failed check, a ``dict`` or ``str``
subclass, a record whose construction could raise) it returns :data:`FAIL`,
and :func:`events.schema.decode_record` then runs the reflective codec on the
same object, which either accepts it or raises today's error (field path plus
reason). So errors stay byte-identical by construction, and the invariant the
tests check is:

- ``fast(obj)`` is :data:`FAIL` or equal to the reflective decode of ``obj``
  (same type, same field values);
- ``encode_fast(r) == encode_record_reflective(r)``, key order included.

Records without ``__post_init__`` are built without calling ``__init__``
(``object.__new__`` and the slot descriptors' setters): for a frozen slotted
dataclass that is the same object, at less than half the cost.

>>> from events.segment import SegmentDescriptor
>>> dec = compile_decoder(SegmentDescriptor)
>>> dec({"dataSource": "wiki", "interval": "2026-01-01/P1D", "version": "v1"}).interval.iso()
'2026-01-01T00:00:00.000Z/2026-01-02T00:00:00.000Z'
>>> dec({"dataSource": "", "interval": "2026-01-01/P1D", "version": "v1"}) is FAIL
True
"""

from __future__ import annotations

import dataclasses
import threading
import types
import typing
from collections.abc import Callable, Mapping
from typing import Any, Literal, TypeVar, Union, get_args, get_origin

from events.instant import InstantError, _parse_instant_cached, format_instant
from events.interval import Interval, IntervalError
from events.schema import FAIL, Instant, JsonObject, is_record

R = TypeVar("R")
FastDecoder = Callable[[Any], Any]
FastEncoder = Callable[[Any], dict[str, Any]]

_DECODERS: dict[type, FastDecoder] = {}
_ENCODERS: dict[type, FastEncoder] = {}
# One compilation at a time. A compile in progress keeps a forwarding placeholder in _PENDING (a record type
# that nests itself finds it there, in the compiling thread, which holds the re-entrant lock); only finished
# functions enter the caches the fast path reads. The placeholder used to sit in the cache itself, and another
# thread calling it before the compile ended recursed until RecursionError (the worker's planner thread and
# event loop encoding at once killed its timeline agent).
_COMPILING = threading.RLock()
_PENDING: dict[tuple[str, type], Callable[[Any], Any]] = {}

_INTERVALS: dict[str, Interval] = {}
_INTERVALS_MAX = 1 << 16


def _interval(text: str) -> Any:
    """``Interval.parse`` memoized by text (intervals are immutable); FAIL when it does not parse."""
    found = _INTERVALS.get(text)
    if found is not None:
        return found
    try:
        found = Interval.parse(text)
    except IntervalError:
        return FAIL
    if len(_INTERVALS) >= _INTERVALS_MAX:
        _INTERVALS.clear()
    _INTERVALS[text] = found
    return found


class _Source:
    """Lines of one generated function and the names its globals need."""

    def __init__(self) -> None:
        self.lines: list[str] = []
        self.env: dict[str, Any] = {"FAIL": FAIL, "_interval": _interval, "_interval_known": _INTERVALS.get}
        self._n = 0

    def name(self, value: Any, hint: str) -> str:
        self._n += 1
        key = f"_{hint}{self._n}"
        self.env[key] = value
        return key

    def emit(self, indent: int, line: str) -> None:
        self.lines.append("    " * indent + line)


def _convert(src: _Source, tp: Any, meta: Mapping[str, Any], var: str, indent: int, present: bool = False) -> None:
    """Emit code that checks ``var`` against ``tp`` and rebinds it to the decoded value, or returns FAIL.

    Mirrors :func:`events.schema._converters` exactly; anything it does not
    accept with certainty returns FAIL (the reflective codec decides then).
    ``present``: the code runs only where ``var`` is known not to be None.
    """
    origin = get_origin(tp)
    emit = src.emit
    if origin in (Union, types.UnionType):
        members = [a for a in get_args(tp) if a is not type(None)]
        if len(members) != 1:
            raise TypeError(f"unsupported union {tp}")
        if present:
            _convert(src, members[0], meta, var, indent)
            return
        emit(indent, f"if {var} is not None:")
        _convert(src, members[0], meta, var, indent + 1)
        return
    if origin is tuple:
        item_tp = get_args(tp)[0]
        emit(indent, f"if type({var}) is not list:")
        emit(indent + 1, "return FAIL")
        if meta.get("non_empty"):
            emit(indent, f"if not {var}:")
            emit(indent + 1, "return FAIL")
        if meta.get("max_items") is not None:  # a bound (events.limits): the reflective codec names the refusal
            emit(indent, f"if len({var}) > {int(meta['max_items'])}:")
            emit(indent + 1, "return FAIL")
        item_meta = {"minimum": meta.get("minimum")}
        if item_tp is Any or item_tp is typing.Any:
            emit(indent, f"{var} = tuple({var})")
            return
        item = f"{var}_i"
        out = f"{var}_t"
        emit(indent, f"if not {var}:")  # the common empty list: no loop (tuple([]) is () too)
        emit(indent + 1, f"{var} = ()")
        emit(indent, "else:")
        emit(indent + 1, f"{out} = []")
        emit(indent + 1, f"for {item} in {var}:")
        _convert(src, item_tp, item_meta, item, indent + 2)
        emit(indent + 2, f"{out}.append({item})")
        emit(indent + 1, f"{var} = tuple({out})")
        return
    if origin is Literal:
        allowed = src.name(frozenset(get_args(tp)), "allowed")
        emit(indent, f"if type({var}) is not str or {var} not in {allowed}:")
        emit(indent + 1, "return FAIL")
        return
    if tp is Instant:
        emit(indent, f"if type({var}) is not str:")
        emit(indent + 1, "return FAIL")
        emit(indent, "try:")
        emit(indent + 1, f"{var} = {src.name(_parse_instant_cached, 'parse_instant')}({var})")
        emit(indent, f"except {src.name(InstantError, 'InstantError')}:")
        emit(indent + 1, "return FAIL")
        return
    if tp is Interval:
        emit(indent, f"if type({var}) is not str:")
        emit(indent + 1, "return FAIL")
        emit(indent, f"{var}_m = _interval_known({var})")  # the memo's hit: no call into _interval
        emit(indent, f"if {var}_m is None:")
        emit(indent + 1, f"{var}_m = _interval({var})")
        emit(indent + 1, f"if {var}_m is FAIL:")
        emit(indent + 2, "return FAIL")
        emit(indent, f"{var} = {var}_m")
        return
    if tp is str:
        cond = f"type({var}) is not str" if meta.get("allow_empty") else f"type({var}) is not str or not {var}"
        emit(indent, f"if {cond}:")
        emit(indent + 1, "return FAIL")
        return
    if tp is bool:
        emit(indent, f"if type({var}) is not bool:")
        emit(indent + 1, "return FAIL")
        return
    if tp is int:
        minimum = meta.get("minimum")
        cond = f"type({var}) is not int"
        if minimum is not None:
            cond += f" or {var} < {int(minimum)}"
        emit(indent, f"if {cond}:")
        emit(indent + 1, "return FAIL")
        return
    if tp is float:
        emit(indent, f"if type({var}) is int:")
        emit(indent + 1, f"{var} = float({var})")
        emit(indent, f"elif type({var}) is not float:")
        emit(indent + 1, "return FAIL")
        return
    if tp is JsonObject or origin is Mapping:
        emit(indent, f"if type({var}) is not dict:")
        emit(indent + 1, "return FAIL")
        return
    if tp is Any:
        return
    if is_record(tp):
        nested = src.name(compile_decoder(tp), "dec")
        emit(indent, f"{var} = {nested}({var})")
        emit(indent, f"if {var} is FAIL:")
        emit(indent + 1, "return FAIL")
        return
    raise TypeError(f"unsupported field type {tp!r}")


def _fields(cls: type) -> list[tuple[dataclasses.Field[Any], Any]]:
    hints = typing.get_type_hints(cls)
    return [(f, hints[f.name]) for f in dataclasses.fields(cls)]


def _is_optional(tp: Any) -> bool:
    return get_origin(tp) in (Union, types.UnionType) and type(None) in get_args(tp)


def _builds_directly(cls: type) -> bool:
    """Whether a record can be built from its slots without ``__init__`` (nothing in it can raise or derive)."""
    if hasattr(cls, "__post_init__") or "__slots__" not in cls.__dict__:
        return False
    for f in dataclasses.fields(cls):
        slot = next((k.__dict__[f.name] for k in cls.__mro__ if f.name in k.__dict__), None)
        if type(slot) is not types.MemberDescriptorType:
            return False
    for f in dataclasses.fields(cls):
        if f.default_factory is not dataclasses.MISSING:
            return False
        if not f.init and f.default is dataclasses.MISSING:
            return False
    return True


_BUILDERS: dict[type, type | None] = {}


def _builder(cls: type) -> type | None:
    """A mutable twin of a slotted record class (same bases, same slots), or None when there can be none.

    An object built as the twin, its slots filled by plain attribute stores,
    then given ``__class__ = cls`` is the record ``cls.__init__`` would build:
    Python allows the class change exactly when both layouts agree, and it is
    tried once here. Needs bases that do not override ``__setattr__`` (a frozen
    dataclass base would refuse the stores).
    """
    if cls in _BUILDERS:
        return _BUILDERS[cls]
    twin: type | None = None
    if all(base.__setattr__ is object.__setattr__ for base in cls.__bases__):  # type: ignore[comparison-overlap]
        namespace: dict[str, Any] = {"__slots__": cls.__dict__["__slots__"], "__module__": cls.__module__}
        if "__orig_bases__" in cls.__dict__:
            namespace["__orig_bases__"] = cls.__dict__["__orig_bases__"]
        try:
            twin = type(f"{cls.__name__}Builder", cls.__bases__, namespace)
            probe: Any = object.__new__(twin)
            probe.__class__ = cls
        except TypeError:
            twin = None
    _BUILDERS[cls] = twin
    return twin


def _emit_build(src: _Source, cls: type, result: str, values: Mapping[str, str], indent: int) -> None:
    """Emit code that builds ``cls`` into ``result`` from its slot values, without ``__init__``."""
    twin = _builder(cls)
    if twin is not None:
        src.emit(indent, f"{result} = {src.name(object.__new__, 'new')}({src.name(twin, 'twin')})")
        for attr, value in values.items():
            src.emit(indent, f"{result}.{attr} = {value}")
        src.emit(indent, f"{result}.__class__ = {src.name(cls, 'cls')}")
        return
    src.emit(indent, f"{result} = {src.name(object.__new__, 'new')}({src.name(cls, 'cls')})")
    for attr, value in values.items():
        slot = next(k.__dict__[attr] for k in cls.__mro__ if attr in k.__dict__)
        src.emit(indent, f"{src.name(slot.__set__, 'set')}({result}, {value})")


def constructor(cls: type[R]) -> Callable[..., R]:
    """A positional constructor of a frozen slotted dataclass that skips ``__init__`` (same object, faster).

    For classes whose ``__init__`` only stores its arguments (no ``__post_init__``,
    no factories, every field an init field); others get ``cls`` itself.

    >>> from events.interval import Interval
    >>> from events.segment import SegmentId
    >>> make = constructor(SegmentId)  # has a __post_init__: the class itself
    >>> make is SegmentId
    True
    """
    fields = dataclasses.fields(cls)  # type: ignore[arg-type]
    if not _builds_directly(cls) or any(not f.init for f in fields):
        return cls
    return _slot_builder(cls, fields, f"construct {cls.__name__}")


def trusted_constructor(cls: type[R]) -> Callable[..., R]:
    """:func:`constructor` for callers that already hold what ``__post_init__`` checks: builds the record from its
    slots without ``__init__`` or ``__post_init__`` (which must only validate, never derive a field). Falls back to
    ``cls`` when the record cannot be built from its slots.

    >>> from events.interval import Interval
    >>> piece = trusted_constructor(Interval)
    >>> piece(1, 2) == Interval(1, 2), type(piece(1, 2)) is Interval
    (True, True)
    """
    fields = dataclasses.fields(cls)  # type: ignore[arg-type]
    if "__slots__" not in cls.__dict__ or any(not f.init or f.default_factory is not dataclasses.MISSING
                                              for f in fields):
        return cls
    for f in fields:
        slot = next((k.__dict__[f.name] for k in cls.__mro__ if f.name in k.__dict__), None)
        if type(slot) is not types.MemberDescriptorType:
            return cls
    return _slot_builder(cls, fields, f"construct trusted {cls.__name__}")


def _slot_builder(cls: type[R], fields: tuple[dataclasses.Field[Any], ...], label: str) -> Callable[..., R]:
    """A generated function taking ``cls``'s fields in order and building the record from its slots."""
    src = _Source()
    names = [f.name for f in fields]
    src.emit(0, f"def generated({', '.join(names)}):")
    _emit_build(src, cls, "r", {n: n for n in names}, 1)
    src.emit(1, "return r")
    made: Callable[..., R] = _function(src, label)
    return made


def _emit_record(src: _Source, cls: type, obj: str, indent: int) -> None:
    """Emit code that decodes the exact ``dict`` in ``obj`` into ``r`` (a ``cls`` record), or returns FAIL."""
    emit = src.emit
    prepare = getattr(cls, "_from_wire", None)
    if prepare is not None:
        # ``_wire_complete_with``: a key whose presence makes ``_from_wire`` return its argument unchanged
        complete = getattr(cls, "_wire_complete_with", None)
        inner = indent
        if complete is not None:
            emit(indent, f"if {complete!r} not in {obj}:")
            inner += 1
        emit(inner, f"{obj} = {src.name(prepare, 'prepare')}({obj})")
        emit(inner, f"if type({obj}) is not dict:")
        emit(inner + 1, "return FAIL")
    missing = src.name(object(), "missing")
    args: dict[str, str] = {}  # attribute -> variable
    for i, (f, tp) in enumerate(_fields(cls)):
        if not f.init:
            continue
        wire_name = f.metadata["wire"]
        optional = _is_optional(tp)
        required = f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING
        var = f"a{i}"
        args[f.name] = var
        defaulted = not required and f.default_factory is dataclasses.MISSING
        # the conversion of a value present, generated apart to learn whether it has any code at all
        check = _Source()
        check.env, check._n = src.env, src._n
        if optional and not (defaulted and f.default is None):
            # absent and null differ: absent takes the default (or is missing), null stays None
            emit(indent, f"{var} = {obj}.get({wire_name!r}, {missing})")
            emit(indent, f"if {var} is {missing}:")
            _convert(check, tp, f.metadata, var, indent + 1)
        else:
            # absent and null are the same: the default (None for an optional), or missing
            emit(indent, f"{var} = {obj}.get({wire_name!r})")
            _convert(check, tp, f.metadata, var, indent + 1, present=True)
            if defaulted and optional and f.default is None:
                src._n = check._n
                if check.lines:  # absent and null stay None; a value is checked
                    emit(indent, f"if {var} is not None:")
                    src.lines.extend(check.lines)
                continue  # without lines: absent, null or any value, taken as it is
            emit(indent, f"if {var} is None:")
        src._n = check._n
        if not defaulted:
            emit(indent + 1, "return FAIL")  # "is required", or cls() raising TypeError: the reflective codec says
        elif not (optional and f.default is None):
            emit(indent + 1, f"{var} = {src.name(f.default, 'default')}")
        else:
            emit(indent + 1, "pass")
        if check.lines:
            emit(indent, "else:")
            src.lines.extend(check.lines)
    if _builds_directly(cls):
        _emit_build(src, cls, "r", {**args, **{f.name: src.name(f.default, "default") for f in dataclasses.fields(cls)
                                              if not f.init}}, indent)
    else:
        emit(indent, "try:")
        call = ", ".join(f"{attr}={var}" for attr, var in args.items())
        emit(indent + 1, f"r = {src.name(cls, 'cls')}({call})")
        emit(indent, "except (ValueError, TypeError):")
        emit(indent + 1, "return FAIL")
    if getattr(cls, "_check", None) is not None:
        emit(indent, "try:")
        emit(indent + 1, "r._check('')")
        emit(indent, "except ValueError:")
        emit(indent + 1, "return FAIL")


def _function(src: _Source, name: str) -> Any:
    namespace = dict(src.env)
    exec(compile("\n".join(src.lines), f"<{name}>", "exec"), namespace)
    fn = namespace["generated"]
    fn.__qualname__ = fn.__name__ = name.replace(" ", "_")
    return fn


def compile_decoder(cls: type) -> FastDecoder:
    """The generated decoder of a record type: JSON object -> record, or FAIL (cached per type)."""
    found = _DECODERS.get(cls)
    if found is not None:
        return found
    with _COMPILING:
        found = _DECODERS.get(cls) or _PENDING.get(("decode", cls))
        if found is not None:
            return found
        # a recursive record type reaches itself through this placeholder until compiled
        _PENDING[("decode", cls)] = lambda obj: _DECODERS[cls](obj)
        try:
            return _compile_decoder(cls)
        finally:
            del _PENDING[("decode", cls)]


def _compile_decoder(cls: type) -> FastDecoder:
    src = _Source()
    src.emit(0, "def generated(obj):")
    src.emit(1, "if type(obj) is not dict:")
    src.emit(2, "return FAIL")
    _emit_record(src, cls, "obj", 1)
    src.emit(1, "return r")
    decoder: FastDecoder = _function(src, f"decode {cls.__name__}")
    return decoder


def compile_envelope_decoder(cls: type, envelope: type, max_id: int) -> FastDecoder:
    """The generated decoder of a whole envelope of event type ``cls`` (its ``event_type`` already matched).

    Accepts only the current ``schema_version`` (older ones need upcasting: FAIL)
    and builds ``envelope`` (a frozen slotted dataclass of ``event, event_id,
    occurred_at, key, causation_id``) from its slots. Mirrors
    :func:`events.envelope.from_json_checked`.
    """
    src = _Source()
    emit = src.emit
    version = int(cls.schema_version)  # type: ignore[attr-defined]
    emit(0, "def generated(obj):")
    emit(1, "v = obj.get('schema_version')")
    emit(1, f"if v != {version} or type(v) is not int:")
    emit(2, "return FAIL")
    emit(1, "event_id = obj.get('event_id')")
    emit(1, f"if type(event_id) is not str or not event_id or len(event_id) > {max_id}:")
    emit(2, "return FAIL")
    emit(1, "at = obj.get('occurred_at')")
    emit(1, "if type(at) is not str:")
    emit(2, "return FAIL")
    emit(1, "try:")
    emit(2, f"at = {src.name(_parse_instant_cached, 'parse_instant')}(at)")
    emit(1, f"except {src.name(InstantError, 'InstantError')}:")
    emit(2, "return FAIL")
    emit(1, "key = obj.get('key')")
    emit(1, "if type(key) is not str:")
    emit(2, "return FAIL")
    emit(1, "cause = obj.get('causation_id')")
    emit(1, f"if cause is not None and (type(cause) is not str or not cause or len(cause) > {max_id}):")
    emit(2, "return FAIL")
    emit(1, "p = obj.get('payload')")
    emit(1, "if type(p) is not dict:")
    emit(2, "return FAIL")
    _emit_record(src, cls, "p", 1)
    _emit_build(src, envelope, "env", {"event": "r", "event_id": "event_id", "occurred_at": "at", "key": "key",
                                       "causation_id": "cause"}, 1)
    emit(1, "return env")
    decoder: FastDecoder = _function(src, f"decode envelope {cls.__name__}")
    return decoder


def _encode_value(src: _Source, tp: Any, expr: str) -> str:
    """An expression encoding ``expr`` of type ``tp`` (mirrors the encoders of events.schema)."""
    origin = get_origin(tp)
    if origin in (Union, types.UnionType):
        inner = next(a for a in get_args(tp) if a is not type(None))
        return _encode_value(src, inner, expr)  # None never reaches here: the field is skipped
    if origin is tuple:
        item_tp = get_args(tp)[0]
        item = _encode_value(src, item_tp, "x")
        return f"list({expr})" if item == "x" else f"[{item} for x in {expr}]"
    if tp is Instant:
        return f"{src.name(format_instant, 'fmt')}({expr})"
    if tp is Interval:
        return f"{src.name(Interval.iso, 'iso')}({expr})"
    if is_record(tp):
        return f"{src.name(compile_encoder(tp), 'enc')}({expr})"
    return expr


def compile_encoder(cls: type) -> FastEncoder:
    """The generated encoder of a record type: record -> JSON object (cached per type)."""
    found = _ENCODERS.get(cls)
    if found is not None:
        return found
    with _COMPILING:
        found = _ENCODERS.get(cls) or _PENDING.get(("encode", cls))
        if found is not None:
            return found
        _PENDING[("encode", cls)] = lambda record: _ENCODERS[cls](record)
        try:
            return _compile_encoder(cls)
        finally:
            del _PENDING[("encode", cls)]


def _compile_encoder(cls: type) -> FastEncoder:
    src = _Source()
    emit = src.emit
    emit(0, "def generated(r):")
    emit(1, "out = {}")
    for f, tp in _fields(cls):
        if not f.init:
            continue
        emit(1, f"v = r.{f.name}")
        emit(1, "if v is not None:")
        emit(2, f"out[{f.metadata['wire']!r}] = {_encode_value(src, tp, 'v')}")
    emit(1, "return out")
    encoder: FastEncoder = _function(src, f"encode {cls.__name__}")
    return encoder
