"""Only the coordinator changes what is used: the seal on publishes and marks, and its one check.

Kafka ACLs are per topic, not per event type: the historical role must write announces to
``segments``, so an ACL cannot stop it (or anyone on an open broker) from writing a
``segments_published``, ``segments_marked_unused`` or ``segments_marked_used`` there too. The
coordinator therefore *seals* every event that changes what is used, and every fold takes one
only when the seal verifies:

- the lockbox agent writes ``segments_published`` only as the twin of its own decision on
  ``locks`` (``publish_accepted``, or ``segments_imported`` for ``segcoord segments import``);
  ``decisionId`` names that decision's event id and ``causation_id`` the request it answers;
- marks are written by the coordinator alone: the lockbox for an operator's
  ``segcoord segments mark-used|mark-unused`` (a request on ``lock-requests``; operators hold no
  key), the upsert agent's stale cleanup and the planner's overshadowed marking;
- ``seal`` = HMAC-SHA256, under the coordinator's publish key, of the whole envelope except
  the seal itself (event id, key, causation, time, payload), so a copy with any field changed,
  or an event made up by anyone without the key, does not verify;
- :func:`use_refusal` is the one check, used by the timeline, planner and upsert agents, the
  Spark balancer, the read model, replay and audit. It is a pure function of the envelope and
  the key, so the same log and the same key give the same decisions on every run and every
  worker (no race with the lockbox's own progress, no read of another topic).

Audit checks the other half of a publish against the log: every sealed publish's ``decisionId``
is a ``publish_accepted``/``segments_imported`` on ``locks`` with the same segments.

>>> from events.interval import Interval
>>> from events.segment import SegmentDescriptor
>>> seg = SegmentDescriptor("wiki", Interval.parse("2026-01-01/P1D"), "v1", 0, 10)
>>> env = Envelope(SegmentsPublished(task_id="t", segments=(seg,)), "e1", 0, "wiki", "r1")
>>> use_refusal(env, b"k")
'segments_published e1 carries no lockbox decision (decisionId): only the lockbox publishes'
>>> sealed = seal_publish(env, "d1", b"k")
>>> use_refusal(sealed, b"k") is None
True
>>> use_refusal(sealed, b"another key")
'segments_published e1: the seal does not verify (not written by the lockbox)'
>>> mark = Envelope(SegmentsMarkedUnused(segment_ids=(str(seg.id),), reason="r"), "m1", 0, "wiki")
>>> use_refusal(mark, b"k")
'segments_marked_unused m1 is not sealed: only the coordinator marks segments'
>>> use_refusal(seal_event(mark, b"k"), b"k") is None
True
"""

from __future__ import annotations

import hashlib
import hmac
import threading
from collections import OrderedDict
from dataclasses import replace
from functools import lru_cache
from typing import Any, TypeVar

import orjson

from events.compiled import trusted_constructor
from events.envelope import Envelope
from events.registry import Event
from events.segments import SegmentsMarkedUnused, SegmentsMarkedUsed, SegmentsPublished

__all__ = ["Sealed", "publish_refusal", "seal_event", "seal_of", "seal_publish", "sealed_publish", "use_refusal"]

#: The events that change what is used: each carries the coordinator's seal.
Sealed = SegmentsPublished | SegmentsMarkedUsed | SegmentsMarkedUnused
E = TypeVar("E", SegmentsPublished, SegmentsMarkedUsed, SegmentsMarkedUnused)


def _message(env: Envelope[Sealed]) -> bytes:
    """The sealed bytes: the envelope's JSON without the payload's ``seal``, keys sorted.

    The same bytes as encoding ``replace(env.event, seal=None)`` (a ``None`` seal is not written), without
    building and validating that second event (py-spy of ``bench.service``: the copy was half of the check)."""
    doc = env.to_json()
    doc["payload"].pop("seal", None)
    return orjson.dumps(doc, option=orjson.OPT_SORT_KEYS)


def seal_of(env: Envelope[Sealed], key: bytes) -> str:
    """The seal the envelope must carry under ``key`` (hex HMAC-SHA256 of the envelope without its seal)."""
    return _hmac_hex(key, _message(env))


_BLOCK = 64  # SHA-256's block size in bytes

#: How many envelopes sealed by this process :func:`use_refusal` remembers (a few fetched batches' worth).
VOUCHED_MAX = 4096


class _Vouched:
    """The envelopes this process sealed, by identity, with the key each was sealed under: bounded, oldest first
    out, thread-safe (the worker seals on its event loop and checks on the planner's thread too).

    An envelope is immutable (frozen records all the way down), so the object the lockbox sealed still has the
    message its seal was computed from: :func:`use_refusal` of that same object under that same key answers
    None without computing the HMAC again. It is the object the timeline and planner agents read back through
    :mod:`streaming.service.shared_envelopes`; any other object (a decode of bytes from the log, a copy) is
    checked in full. An entry holds its envelope, so its ``id`` cannot be reused while it is remembered."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        # FIFO by insertion; an OrderedDict so the oldest leaves in O(1) (``popitem(last=False)``), where
        # ``next(iter(d))`` on a plain dict skips every slot freed at its front (streaming.service.shared_envelopes)
        self._by_id: OrderedDict[int, tuple[Envelope[Any], bytes]] = OrderedDict()
        self._lock = threading.Lock()

    def add(self, env: Envelope[Any], key: bytes) -> None:
        with self._lock:
            by_id = self._by_id
            by_id[id(env)] = (env, key)
            if len(by_id) > self.limit:
                by_id.popitem(last=False)

    def vouches(self, env: Envelope[Any], key: bytes) -> bool:
        got = self._by_id.get(id(env))
        return got is not None and got[0] is env and got[1] == key

    def clear(self) -> None:
        with self._lock:
            self._by_id.clear()


VOUCHED = _Vouched(VOUCHED_MAX)
_sealed_publish_event = trusted_constructor(SegmentsPublished)  # a copy with its seal: the rest validated already


@lru_cache(maxsize=8)
def _pads(key: bytes) -> tuple[Any, Any]:
    """SHA-256 states with the key's inner and outer pads absorbed (RFC 2104), computed once per key."""
    if len(key) > _BLOCK:
        key = hashlib.sha256(key).digest()
    key = key.ljust(_BLOCK, b"\0")
    return hashlib.sha256(key.translate(_IPAD)), hashlib.sha256(key.translate(_OPAD))


_IPAD = bytes(x ^ 0x36 for x in range(256))
_OPAD = bytes(x ^ 0x5C for x in range(256))


def _hmac_hex(key: bytes, message: bytes) -> str:
    """``hmac.digest(key, message, hashlib.sha256).hex()`` (unit-tested equal), from copies of the key's padded
    states: the one-shot ``hmac.digest`` looks SHA-256 up in OpenSSL 3 on every call, which made it 2-3x slower
    than this for the 0.5-1 kB of an envelope (py-spy of the worker: a fifth of the lockbox agent's samples)."""
    inner_pad, outer_pad = _pads(key)
    inner = inner_pad.copy()
    inner.update(message)
    outer = outer_pad.copy()
    outer.update(inner.digest())
    return str(outer.hexdigest())


def seal_publish(env: Envelope[SegmentsPublished], decision_id: str, key: bytes) -> Envelope[SegmentsPublished]:
    """The envelope naming ``decision_id`` as its lockbox decision, sealed under ``key``."""
    return sealed_publish(env, decision_id, key)[0]


def sealed_publish(env: Envelope[SegmentsPublished], decision_id: str,
                   key: bytes) -> tuple[Envelope[SegmentsPublished], bytes]:
    """:func:`seal_publish` and the sealed envelope's message value (``encode`` of it), from one ``to_json``.

    The lockbox agent seals every publish it writes and then sends it: the seal's message is the envelope's
    JSON without the seal, keys sorted, and the message value is the same JSON with the seal, in field order.
    ``seal`` is the last field of ``segments_published`` and a ``None`` field is not written, so adding it to the
    payload of that JSON gives the bytes ``encode`` gives (unit-tested against ``encode`` for every optional
    field present or absent); building them once saves a second encoding of every segment descriptor."""
    event = env.event
    if event.decision_id != decision_id or event.seal is not None:
        event = replace(event, decision_id=decision_id, seal=None)
        env = Envelope(event, env.event_id, env.occurred_at, env.key, env.causation_id)
    doc = env.to_json()
    seal = _hmac_hex(key, orjson.dumps(doc, option=orjson.OPT_SORT_KEYS))
    doc["payload"]["seal"] = seal
    sealed = Envelope(_sealed_publish_event(event.task_id, event.segments, event.start_metadata, event.end_metadata,
                                            event.decision_id, seal),
                      env.event_id, env.occurred_at, env.key, env.causation_id)
    VOUCHED.add(sealed, key)
    return sealed, orjson.dumps(doc)


def seal_event(env: Envelope[E], key: bytes) -> Envelope[E]:
    """A mark (or any sealed type) as the coordinator writes it: sealed under ``key``, all else unchanged."""
    unsealed = Envelope(replace(env.event, seal=None), env.event_id, env.occurred_at, env.key,
                        env.causation_id)
    sealed = Envelope(replace(env.event, seal=seal_of(unsealed, key)),
                      env.event_id, env.occurred_at, env.key, env.causation_id)
    VOUCHED.add(sealed, key)
    return sealed


def _verifies_as_read(value: bytes, seal: str, key: bytes) -> bool:
    """Whether ``seal`` verifies over the JSON of the message value itself (its ``seal`` taken out, keys sorted).

    Sound as a shortcut of the full check: the key's holder only ever seals ``env.to_json()`` (without the seal) of
    some envelope ``e``; if ``value``'s JSON without the seal is that document, ``value`` is, as JSON, the encoding
    of ``e`` sealed, so its decode is that sealed envelope (``decode(encode(e)) == e``) and its :func:`seal_of`
    is ``seal``. False does not refuse anything: the caller then computes the full check (a value whose JSON is
    not the canonical encoding of its envelope, such as an older schema version, takes that path). It saves
    re-encoding the decoded envelope (``to_json``: a third of the check, py-spy of ``bench.service --only
    agent``) for the values the coordinator wrote, which are their envelope's encoding."""
    try:
        doc = orjson.loads(value)
        if doc["payload"].pop("seal") != seal:
            return False
    except (orjson.JSONDecodeError, TypeError, KeyError, AttributeError):
        return False
    return hmac.compare_digest(seal, _hmac_hex(key, orjson.dumps(doc, option=orjson.OPT_SORT_KEYS)))


def use_refusal(env: Envelope[Event], key: bytes, value: bytes | None = None) -> str | None:
    """Why no fold may take this event as a change of what is used, or None (another event type, or sealed).

    A publish needs its lockbox decision (``decisionId``) and a seal that verifies; a mark
    (``segments_marked_used``/``segments_marked_unused``) a seal that verifies. An envelope this process sealed
    under ``key`` (the same object, see :class:`_Vouched`) verifies without computing its HMAC again. ``value``:
    the message value ``env`` was decoded from, when the caller has it; a seal that verifies over it
    (:func:`_verifies_as_read`) verifies without re-encoding ``env``. The answer is the same with or without it."""
    event = env.event
    if isinstance(event, SegmentsPublished):
        if event.decision_id is None or event.seal is None:
            return (f"segments_published {env.event_id} carries no lockbox decision (decisionId): "
                    "only the lockbox publishes")
        if VOUCHED.vouches(env, key) or (type(value) is bytes and _verifies_as_read(value, event.seal, key)):
            return None
        if not hmac.compare_digest(event.seal, seal_of(env, key)):  # type: ignore[arg-type]
            return f"segments_published {env.event_id}: the seal does not verify (not written by the lockbox)"
        return None
    if isinstance(event, SegmentsMarkedUnused | SegmentsMarkedUsed):
        if event.seal is None:
            return f"{event.event_type} {env.event_id} is not sealed: only the coordinator marks segments"
        if VOUCHED.vouches(env, key) or (type(value) is bytes and _verifies_as_read(value, event.seal, key)):
            return None
        if not hmac.compare_digest(event.seal, seal_of(env, key)):  # type: ignore[arg-type]
            return f"{event.event_type} {env.event_id}: the seal does not verify (not written by the coordinator)"
    return None


#: The former name of :func:`use_refusal` (it covered publishes only).
publish_refusal = use_refusal
