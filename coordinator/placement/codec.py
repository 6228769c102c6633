"""The one stored form of placement state: entries ``(family, key) -> bytes`` an adapter keeps as they are.

Families and values (JSON, UTF-8):

| family | key | value |
| --- | --- | --- |
| ``seg`` | segment id text | ``{"segment": descriptor, "used": bool}`` |
| ``held`` | server ``\\x00`` segment id text | ``""`` (present: the server announced the segment) |
| ``srv`` | server name | ``{"tier", "maxSizeBytes", "decommissioning", "joined"}`` |
| ``heard`` | server name | the event time (ms, decimal) it was last heard of |
| ``epoch`` | server name | the latest planner epoch it was commanded in (decimal) |
| ``q`` | command id | the command in flight (:meth:`InFlight.to_json`) |
| ``ans`` | command id | the id text of the segment it belongs to: settled, never in flight again |
| ``gone`` | segment id text | the event time (ms, decimal) it was forgotten (its ``ans`` ids are kept for the window) |
| ``rules`` | data source | its rules, as set |
| ``config`` | ``""`` | the dynamic config keys set so far (merged) |
| ``meta`` | ``""`` | ``{"start", "lastEventAt"}`` plus whatever the adapter adds |

**Invariant.** ``restore(entries(state))`` folds to a state equal to ``state`` (facts and every derived
index); the adapters write exactly :func:`changed` after each batch (what the fold marked dirty), so the
stored entries always equal :func:`entries` of the state. Settled ids are written once and then
looked up, not kept in memory (``PlacementState.settled_before``; ``PlacementState.settled_of`` lists a
segment's, for the window to delete them: an ``ans`` entry whose value is None).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

import orjson

from coordinator.placement.records import DEFAULT_LOAD_TIMEOUT_MS, InFlight, ServerFacts
from coordinator.placement.settled import DEFAULT_WINDOW, SettledWindow
from coordinator.placement.state import PlacementState
from events.schema import decode_record, encode_record
from events.segment import SegmentDescriptor, SegmentId

Entry = tuple[str, str, bytes | None]
FAMILIES = ("seg", "srv", "heard", "epoch", "held", "q", "ans", "gone", "rules", "config", "meta")


def value(state: PlacementState, family: str, key: str, meta: dict[str, Any] | None = None) -> bytes | None:
    """The stored value of one entry (None: delete it)."""
    if family == "seg":
        sid = state.by_text.get(key)
        seg = state.segments.get(sid) if sid is not None else None
        if sid is None or seg is None:
            return None
        return orjson.dumps({"segment": encode_record(seg), "used": sid in state.used})
    if family == "heard":
        at = state.last_heard.get(key)
        return None if at is None else str(at).encode()
    if family == "epoch":
        epoch = state.epochs.get(key)
        return None if epoch is None else str(epoch).encode()
    if family == "held":
        server, _, text = key.partition("\x00")
        sid = state.by_text.get(text)
        return b"" if sid is not None and sid in state.held.get(server, ()) else None
    if family == "srv":
        facts = state.servers.get(key)
        return None if facts is None else orjson.dumps(facts.to_json())
    if family == "q":
        item = state.queue.get(key)
        return None if item is None else orjson.dumps(item.to_json())
    if family == "ans":
        segment = state.settled_seg.get(key)
        return None if segment is None else segment.encode()
    if family == "gone":
        at = state.gone.get(key)
        return None if at is None else str(at).encode()
    if family == "rules":
        raw = state.rules_json.get(key)
        return None if raw is None else orjson.dumps(raw)
    if family == "config":
        return orjson.dumps(state.config_json)
    if family == "meta":
        return orjson.dumps({"start": state.start, "lastEventAt": state.last_event_at, **(meta or {})})
    raise KeyError(family)


def changed(state: PlacementState, meta: dict[str, Any] | None = None) -> list[Entry]:
    """The entries the fold changed since the last call (sorted), then the meta entry; clears the dirty set and
    the in-memory settled ids (the adapter stores them now and looks them up later; an ``ans`` entry with the
    value None is a settled id the window forgot: the adapter deletes it). Tombstones a plan's decisions left
    past the window expire first, so what is stored is within the window."""
    state.expire_window()
    out = [(family, key, value(state, family, key)) for family, key in sorted(state.dirty)]
    out.append(("meta", "", value(state, "meta", "", meta)))
    state.dirty.clear()
    state.stored_settled()
    return out


def entries(state: PlacementState, meta: dict[str, Any] | None = None) -> list[Entry]:
    """Every entry of the state (settled ids excepted: they live in the adapter's store), sorted."""
    keys: list[tuple[str, str]] = [("seg", str(s)) for s in state.segments]
    keys += [("srv", n) for n in state.servers]
    keys += [("heard", n) for n in state.last_heard]
    keys += [("epoch", n) for n in state.epochs]
    keys += [("held", f"{n}\x00{s}") for n, held in state.held.items() for s in held]
    keys += [("q", c) for c in state.queue]
    keys += [("gone", text) for text in state.gone]
    keys += [("rules", ds) for ds in state.rules_json]
    if state.config_json:
        keys.append(("config", ""))
    out = [(f, k, value(state, f, k)) for f, k in sorted(keys)]
    out.append(("meta", "", value(state, "meta", "", meta)))
    return out


def restore(stored: Iterable[tuple[str, str, bytes]], load_timeout_ms: int = DEFAULT_LOAD_TIMEOUT_MS,
            settled_before: Callable[[str], bool] | None = None,
            settled_of: Callable[[str], Iterable[str]] | None = None,
            window: SettledWindow | None = DEFAULT_WINDOW) -> tuple[PlacementState, dict[str, Any]]:
    """The state the entries describe, and the meta entry's contents. Entries may come in any order.
    ``settled_before`` / ``settled_of``: the adapter's lookups of its stored ``ans`` ids (by id, by segment)."""
    by_family: dict[str, list[tuple[str, bytes]]] = {f: [] for f in FAMILIES}
    for family, key, raw in stored:
        by_family[family].append((key, raw))
    st = PlacementState(load_timeout_ms, window)
    for key, raw in sorted(by_family["seg"]):
        o = orjson.loads(raw)
        seg = decode_record(SegmentDescriptor, o["segment"], "segment")
        st.learn(seg, True if o["used"] else None)
        if str(seg.id) != key:
            st.by_text[key] = seg.id
    for key, raw in sorted(by_family["rules"]):
        st.set_rules(key, orjson.loads(raw), f"rules.{key}")
    for _key, raw in by_family["config"]:
        st.set_config(orjson.loads(raw))
    for key, raw in sorted(by_family["srv"]):
        st.set_server(key, ServerFacts.from_json(orjson.loads(raw)))
    for key, raw in sorted(by_family["heard"]):
        st.last_heard[key] = int(raw)
    for key, raw in sorted(by_family["epoch"]):
        st.epochs[key] = int(raw)
    for key, raw in sorted(by_family["gone"]):
        st.bury(key, int(raw))
    held: dict[str, list[SegmentId]] = {}  # per server, in key order (one bulk hold each)
    for key, _raw in sorted(by_family["held"]):
        server, _, text = key.partition("\x00")
        sids = held.get(server)
        if sids is None:
            sids = held[server] = []
        sids.append(_segment_id(st, text))
    st.hold_stored(held)
    for key, raw in sorted(by_family["q"]):
        o = orjson.loads(raw)
        st.enqueue(key, InFlight.from_json(o, _segment_id(st, o["segment"])))
    meta: dict[str, Any] = {}
    for _key, raw in by_family["meta"]:
        meta = orjson.loads(raw)
        st.start, st.last_event_at = meta.pop("start"), meta.pop("lastEventAt")
    st.dirty.clear()
    st.stored_settled()
    st.touched_segments = set()
    if settled_before is not None:
        st.settled_before = settled_before
    if settled_of is not None:
        st.settled_of = settled_of
    return st, meta


def _segment_id(st: PlacementState, text: str) -> SegmentId:
    sid = st.by_text.get(text)
    return sid if sid is not None else SegmentId.parse(text)
