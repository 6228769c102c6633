"""Only the lockbox changes what is used: the seal on ``segments_published`` and its check.

Kafka ACLs are per topic, not per event type: the historical role must write announces to
``segments``, so an ACL cannot stop it (or anyone on an open broker) from writing a
``segments_published`` there too. The lockbox agent therefore *seals* every publish it
writes, and the timeline and planner take a publish only when the seal verifies:

- the lockbox agent writes ``segments_published`` only as the twin of its own decision on
  ``locks`` (``publish_accepted``, or ``segments_imported`` for ``segcoord segments import``);
  ``decisionId`` names that decision's event id and ``causation_id`` the request it answers;
- ``seal`` = HMAC-SHA256, under the coordinator's publish key, of the whole envelope except
  the seal itself (event id, key, causation, time, payload with ``decisionId``), so a copy
  with any field changed, or a publish made up by anyone without the key, does not verify;
- :func:`publish_refusal` is the one check, used by the timeline agent, the planner agent,
  replay and audit. It is a pure function of the envelope and the key, so the same log and
  the same key give the same decisions on every run and every worker (no race with the
  lockbox's own progress, no read of another topic).

Audit checks the other half against the log: every sealed publish's ``decisionId`` is a
``publish_accepted``/``segments_imported`` on ``locks`` with the same segments.

>>> from events.interval import Interval
>>> from events.segment import SegmentDescriptor
>>> seg = SegmentDescriptor("wiki", Interval.parse("2026-01-01/P1D"), "v1", 0, 10)
>>> env = Envelope(SegmentsPublished(task_id="t", segments=(seg,)), "e1", 0, "wiki", "r1")
>>> publish_refusal(env, b"k")
'segments_published e1 carries no lockbox decision (decisionId): only the lockbox publishes'
>>> sealed = seal_publish(env, "d1", b"k")
>>> publish_refusal(sealed, b"k") is None
True
>>> publish_refusal(sealed, b"another key")
'segments_published e1: the seal does not verify (not written by the lockbox)'
"""

from __future__ import annotations

import hashlib
import hmac
from dataclasses import replace

import orjson

from events.envelope import Envelope
from events.registry import Event
from events.segments import SegmentsPublished

__all__ = ["publish_refusal", "seal_of", "seal_publish"]


def _message(env: Envelope[SegmentsPublished]) -> bytes:
    """The sealed bytes: the envelope's JSON without the payload's ``seal``, keys sorted.

    The same bytes as encoding ``replace(env.event, seal=None)`` (a ``None`` seal is not written), without
    building and validating that second event (py-spy of ``bench.service``: the copy was half of the check)."""
    doc = env.to_json()
    doc["payload"].pop("seal", None)
    return orjson.dumps(doc, option=orjson.OPT_SORT_KEYS)


def seal_of(env: Envelope[SegmentsPublished], key: bytes) -> str:
    """The seal the envelope must carry under ``key`` (hex HMAC-SHA256 of the envelope without its seal)."""
    return hmac.digest(key, _message(env), hashlib.sha256).hex()


def seal_publish(env: Envelope[SegmentsPublished], decision_id: str, key: bytes) -> Envelope[SegmentsPublished]:
    """The envelope naming ``decision_id`` as its lockbox decision, sealed under ``key``."""
    named = Envelope(replace(env.event, decision_id=decision_id, seal=None), env.event_id, env.occurred_at, env.key,
                     env.causation_id)
    return Envelope(replace(named.event, seal=seal_of(named, key)), env.event_id, env.occurred_at, env.key,
                    env.causation_id)


def publish_refusal(env: Envelope[Event], key: bytes) -> str | None:
    """Why the timeline and planner must not take this event as a publish, or None (not a publish, or sealed)."""
    event = env.event
    if not isinstance(event, SegmentsPublished):
        return None
    if event.decision_id is None or event.seal is None:
        return (f"segments_published {env.event_id} carries no lockbox decision (decisionId): "
                "only the lockbox publishes")
    if not hmac.compare_digest(event.seal, seal_of(env, key)):  # type: ignore[arg-type]
        return f"segments_published {env.event_id}: the seal does not verify (not written by the lockbox)"
    return None
