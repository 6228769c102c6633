"""The event envelope (docs/architecture.md) and the codec of whole messages (orjson, UTF-8).

Wire form::

    {"event_type": "segments_published", "schema_version": 1, "event_id": "<hex>",
     "occurred_at": "2026-11-21T10:00:00.000Z", "key": "<partition key>",
     "causation_id": "<event id or null>", "payload": {...}}

Invariants:
- ``decode(encode(e)) == e`` for every valid envelope, and ``encode`` is a pure
  function of the envelope (same envelope, same bytes).
- ``decode`` always returns the current schema version of the event type: older
  payloads are upcast first; a newer version than this build knows is refused.
- ``decode`` raises :class:`~events.schema.EventValidationError` naming the
  offending field (``payload.segments[0].interval``) and never anything else
  for bad bytes; a message over :data:`~events.limits.MAX_EVENT_BYTES` is refused unparsed.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

import orjson

from events.compiled import compile_envelope_decoder
from events.instant import format_instant
from events.limits import MAX_EVENT_BYTES
from events.registry import Event, event_class, upcast
from events.schema import FAIL, EventValidationError, Instant, decode_instant, decode_record, encode_record

E_co = TypeVar("E_co", bound=Event, covariant=True)

_MAX_ID = 200


@dataclass(frozen=True, slots=True)
class Envelope(Generic[E_co]):
    """One message: a typed event with its identity, time, partition key and cause.

    ``occurred_at`` is UTC milliseconds. ``causation_id`` is the id of the event
    this one answers (None for events that start a chain).
    """

    event: E_co
    event_id: str
    occurred_at: Instant
    key: str
    causation_id: str | None = None

    @property
    def event_type(self) -> str:
        return self.event.event_type

    @property
    def schema_version(self) -> int:
        return self.event.schema_version

    def to_json(self) -> dict[str, Any]:
        return {
            "event_type": self.event.event_type,
            "schema_version": self.event.schema_version,
            "event_id": self.event_id,
            "occurred_at": format_instant(self.occurred_at),
            "key": self.key,
            "causation_id": self.causation_id,
            "payload": encode_record(self.event),
        }


_ENVELOPE_DECODERS: dict[str, Callable[[Any], Any]] = {}


def _envelope_decoder(name: str) -> Callable[[Any], Any] | None:
    """The generated envelope decoder of a registered event type (None for an unknown name)."""
    cls = event_class(name)
    if cls is None:
        return None
    decoder = _ENVELOPE_DECODERS[name] = compile_envelope_decoder(cls, Envelope, _MAX_ID)
    return decoder


def encode(envelope: Envelope[Event]) -> bytes:
    """The message value of an envelope."""
    return orjson.dumps(envelope.to_json())


def decode(data: bytes | bytearray | memoryview | str | None) -> Envelope[Event]:
    """Parse, upcast and validate one message value."""
    if type(data) is not bytes or len(data) > MAX_EVENT_BYTES:  # a consumer hands over bytes: the rest is rare
        if data is None:
            raise EventValidationError("value", None, "message has no value (tombstone)")
        if not isinstance(data, bytes | bytearray | memoryview | str):  # a null cell of a data frame: NaN
            raise EventValidationError("value", repr(data)[:80], "message has no value (tombstone) or is not bytes")
        if len(data) > MAX_EVENT_BYTES:
            raise EventValidationError("value", f"{len(data)} bytes",
                                       f"an event may hold at most {MAX_EVENT_BYTES} bytes")
    try:
        obj = orjson.loads(data)
    except orjson.JSONDecodeError as e:
        shown = bytes(data[:80]) if not isinstance(data, str) else data[:80]
        raise EventValidationError("value", shown, f"not UTF-8 JSON: {e}") from None
    return from_json(obj)


def from_json(obj: Any) -> Envelope[Event]:
    """Validate an already parsed JSON envelope (the JSON-lines readers of the CLI use this).

    The common case (a current-version envelope whose every value has its exact
    JSON type) runs the event type's generated decoder (:mod:`events.compiled`)
    and builds the envelope from its slots; anything else, and anything that
    fast path is not sure of, goes through :func:`from_json_checked`, which
    gives the same envelope or raises the error naming the field.
    """
    if type(obj) is dict:
        name = obj.get("event_type")
        if type(name) is str:
            decoder = _ENVELOPE_DECODERS.get(name) or _envelope_decoder(name)
            if decoder is not None:
                env = decoder(obj)
                if env is not FAIL:
                    return env  # type: ignore[no-any-return]
    return from_json_checked(obj)


def from_json_checked(
    obj: Any, record_decoder: Callable[[type[Event], Any, str], Event] = decode_record
) -> Envelope[Event]:
    """The reference path of :func:`from_json`: every check in order, the first failure raised.

    ``record_decoder`` decodes the payload (the tests and ``bench.codec`` pass
    :func:`~events.schema.decode_record_reflective` to run the reflective codec alone).
    """
    if not isinstance(obj, dict):
        raise EventValidationError("value", obj, "an event must be a JSON object")
    name = obj.get("event_type")
    if not isinstance(name, str) or not name:
        raise EventValidationError("event_type", name, "must be a non-empty string")
    cls = event_class(name)
    if cls is None:
        raise EventValidationError("event_type", name, "unknown event type")
    version = obj.get("schema_version")
    if not isinstance(version, int) or isinstance(version, bool) or version < 1:
        raise EventValidationError("schema_version", version, "must be a positive integer")
    event_id = _id(obj.get("event_id"), "event_id")
    occurred_at = decode_instant(obj.get("occurred_at"), "occurred_at")
    key = obj.get("key")
    if not isinstance(key, str):
        raise EventValidationError("key", key, "must be a string")
    causation = obj.get("causation_id")
    causation_id = None if causation is None else _id(causation, "causation_id")
    payload = obj.get("payload")
    if not isinstance(payload, dict):
        raise EventValidationError("payload", payload, "must be a JSON object")
    try:
        payload = upcast(name, version, payload)
    except (LookupError, ValueError) as e:
        raise EventValidationError("schema_version", version, str(e)) from None
    event = record_decoder(cls, payload, "payload")
    return Envelope(event, event_id, Instant(occurred_at), key, causation_id)


def _id(value: Any, field: str) -> str:
    if not isinstance(value, str) or not value or len(value) > _MAX_ID:
        raise EventValidationError(field, value, f"must be a non-empty string of at most {_MAX_ID} characters")
    return value
