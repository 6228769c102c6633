"""One tier's placement as the balancer folds it from ``segments``, ``cluster`` and ``commands``.

:class:`TierPlacement` is the balancer's state for one tier: the segments it knows
(used or not), which servers of the tier hold each one, the tier's servers, the
commands in flight to them, the rules, the dynamic configuration and the latest
event time. It has no Spark in it: :mod:`streaming.balancer.state` persists it in
Spark's state store and keeps it alive in the Python worker between micro-batches.

**Folding** follows the planner agent (:mod:`streaming.service.planner_agent`):
announce / unannounce set holdings and settle the command they answer (by causation
id, or the same server, segment and action); a refusal settles the command and the
drop half of its move; a server that leaves takes its queue with it; a command read
back from ``commands`` joins the queue unless it was answered already; commands
older than ``load_timeout_ms`` (event time) stop counting as in flight.

**Invariants.**
- Only servers of this tier hold segments here and only commands to them are queued;
  events about other tiers' servers change nothing but the server facts.
- ``dirty`` names every state entry changed since the last :meth:`take_dirty`, so
  persisting costs what changed, not the tier's size.
- ``projected(server, segment)`` is the planner's projection (loaded, not being
  dropped, not a move's source; or queued to load): the rolling cost caches hold
  exactly the projected segments of each server, and :meth:`touched_pairs` names
  every (server, segment) whose projection an event may have changed.
- No clock, no randomness: the same records in the same order give the same state.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from typing import Any

import orjson

from coordinator.balancer.cost_cache import ServerCostCache
from coordinator.planner.cluster import ClusterView, QueueItem, Server, ServerState
from coordinator.rules.dynamic_config import DynamicConfig
from coordinator.rules.ruleset import RuleSet, parse_rules
from events.cluster import (
    DynamicConfigSet,
    RulesSet,
    SegmentLoadRefused,
    ServerDecommissioned,
    ServerJoined,
    ServerLeft,
    ServerRecommissioned,
)
from events.commands import DropSegment, LoadSegment
from events.envelope import Envelope
from events.registry import Event
from events.schema import decode_record, encode_record
from events.segment import SegmentDescriptor, SegmentId
from events.segments import (
    SegmentAnnounced,
    SegmentsMarkedUnused,
    SegmentsMarkedUsed,
    SegmentsPublished,
    SegmentUnannounced,
)
from streaming.inflight import DEFAULT_LOAD_TIMEOUT_MS, InFlight, ServerFacts

# state entry families (one Spark MapState each) and the meta value
SEGMENTS = "segments"  # segment id text -> {"segment", "used", "holders"}
SERVERS = "servers"    # server -> {"tier", "maxSizeBytes", "decommissioning", "joined"}
QUEUE = "queue"        # command id -> in-flight command
ANSWERED = "answered"  # command id -> "" (answered before it was read back)
PairKey = tuple[str, SegmentId]


@dataclass
class TierPlacement:
    tier: str
    load_timeout_ms: int = DEFAULT_LOAD_TIMEOUT_MS
    segments: dict[SegmentId, SegmentDescriptor] = field(default_factory=dict)
    by_text: dict[str, SegmentId] = field(default_factory=dict)
    used: set[SegmentId] = field(default_factory=set)
    holders: dict[SegmentId, set[str]] = field(default_factory=dict)
    held: dict[str, set[SegmentId]] = field(default_factory=dict)
    servers: dict[str, ServerFacts] = field(default_factory=dict)
    queue: dict[str, InFlight] = field(default_factory=dict)
    by_pair: dict[PairKey, set[str]] = field(default_factory=dict)  # (server, segment) -> in-flight command ids
    answered: set[str] = field(default_factory=set)  # answered in this process (the state keeps them all)
    rules_json: dict[str, Any] = field(default_factory=dict)
    config_json: dict[str, Any] = field(default_factory=dict)
    rules: RuleSet = field(default_factory=RuleSet.druid_default)
    config: DynamicConfig = field(default_factory=DynamicConfig)
    now: int = 0
    runs: int = 0  # balancing runs of this tier so far: the seed and the id space of the next run
    version: int = -1  # the batch id of the state this object reflects (-1: empty)
    caches: dict[str, ServerCostCache] = field(default_factory=dict)  # rolling, per server of the tier
    dirty: set[tuple[str, str]] = field(default_factory=set)
    touched: set[PairKey] = field(default_factory=set)

    # -- facts ----------------------------------------------------------------------------
    def mine(self, server: str) -> bool:
        f = self.servers.get(server)
        return f is not None and f.tier == self.tier

    def learn(self, seg: SegmentDescriptor, used: bool | None) -> None:
        sid = seg.id
        if sid not in self.segments or used:
            self.segments[sid] = seg
        self.by_text[str(sid)] = sid
        if used is True:
            self.used.add(sid)
        self.dirty.add((SEGMENTS, str(sid)))

    def hold(self, server: str, sid: SegmentId, held: bool) -> None:
        names = self.holders.setdefault(sid, set())
        mine = self.held.setdefault(server, set())
        if held:
            names.add(server)
            mine.add(sid)
        else:
            names.discard(server)
            mine.discard(sid)
        self.dirty.add((SEGMENTS, str(sid)))
        self.touched.add((server, sid))

    def enqueue(self, command_id: str, item: InFlight) -> None:
        old = self.queue.get(command_id)
        if old is not None:
            self._unindex(command_id, old)
        self.queue[command_id] = item
        for pair in _pairs(item):
            self.by_pair.setdefault(pair, set()).add(command_id)
            self.touched.add(pair)
        self.dirty.add((QUEUE, command_id))

    def settle(self, command_id: str) -> InFlight | None:
        item = self.queue.pop(command_id, None)
        if item is not None:
            self._unindex(command_id, item)
        if command_id not in self.answered:
            self.answered.add(command_id)
            self.dirty.add((ANSWERED, command_id))
        self.dirty.add((QUEUE, command_id))
        return item

    def _unindex(self, command_id: str, item: InFlight) -> None:
        for pair in _pairs(item):
            ids = self.by_pair.get(pair)
            if ids is not None:
                ids.discard(command_id)
                if not ids:
                    del self.by_pair[pair]
            self.touched.add(pair)

    def settle_matching(self, server: str, sid: SegmentId, action: str) -> None:
        for cid in sorted(self.by_pair.get((server, sid), ())):
            item = self.queue[cid]
            if item.server == server and item.action == action:
                self.settle(cid)

    # -- folding ------------------------------------------------------------------------------
    def apply(self, env: Envelope[Event], answered_before: bool = False) -> bool:
        """Fold one event; True when it can change the balance (a trigger). ``answered_before``: the state
        says this command id was answered in an earlier batch (the caller looks it up)."""
        event, cause = env.event, env.causation_id
        self.now = max(self.now, env.occurred_at)
        if isinstance(event, LoadSegment | DropSegment):
            return self._command(env, answered_before)
        if isinstance(event, SegmentsPublished | SegmentsMarkedUsed):
            for seg in event.segments:
                self.learn(seg, True)
            return True
        if isinstance(event, SegmentsMarkedUnused):
            for text in event.segment_ids:
                sid = self.by_text.get(text)
                if sid is not None and sid in self.used:
                    self.used.discard(sid)
                    self.dirty.add((SEGMENTS, text))
            return True
        if isinstance(event, SegmentAnnounced | SegmentUnannounced):
            if cause is not None and cause in self.queue:
                self.settle(cause)
            if not self.mine(event.server):
                return False
            if isinstance(event, SegmentAnnounced):
                self.learn(event.segment, None)
                self.hold(event.server, event.segment.id, True)
                self.settle_matching(event.server, event.segment.id, "load")
            else:
                sid = self.by_text.get(event.segment_id)
                if sid is None:
                    return False
                self.hold(event.server, sid, False)
                self.settle_matching(event.server, sid, "drop")
            return True
        if isinstance(event, SegmentLoadRefused):
            self.settle(event.command_id)
            if cause is not None:
                self.settle(cause)
            if event.move_id is not None:
                for cid, item in sorted(self.queue.items()):
                    if item.move_id == event.move_id:
                        self.settle(cid)
            return self.mine(event.server)
        if isinstance(event, ServerJoined):
            old = self.servers.get(event.server) or ServerFacts()
            was_mine = old.tier == self.tier and old.joined
            f = replace(old, tier=event.tier or old.tier, joined=True, max_size_bytes=event.max_size_bytes
                        if event.max_size_bytes is not None else old.max_size_bytes)
            self._server(event.server, f)
            return was_mine or f.tier == self.tier
        if isinstance(event, ServerLeft):
            f = self.servers.get(event.server)
            if f is None:
                return False
            f = replace(f, joined=False)
            self._server(event.server, f)
            for cid, item in sorted(self.queue.items()):
                if item.server == event.server:
                    self.settle(cid)
            return f.tier == self.tier
        if isinstance(event, ServerDecommissioned | ServerRecommissioned):
            f = replace(self.servers.get(event.server) or ServerFacts(joined=False),
                        decommissioning=isinstance(event, ServerDecommissioned))
            self._server(event.server, f)
            return f.tier == self.tier
        if isinstance(event, RulesSet):
            self.rules = self.rules.with_rules(event.data_source,
                                               parse_rules(list(event.rules), f"payload.rules[{event.data_source}]"))
            self.rules_json[event.data_source] = [dict(r) for r in event.rules]
            return True
        if isinstance(event, DynamicConfigSet):
            self.config = self.config.updated(dict(event.config))
            self.config_json.update(dict(event.config))
            return True
        return False

    def _server(self, name: str, f: ServerFacts) -> None:
        self.servers[name] = f
        self.dirty.add((SERVERS, name))
        for sid in self.held.get(name, ()):  # a server joining, leaving or draining changes its projection
            self.touched.add((name, sid))

    def _command(self, env: Envelope[Event], answered_before: bool) -> bool:
        event = env.event
        assert isinstance(event, LoadSegment | DropSegment)
        if not self.mine(event.server) or env.event_id in self.answered or answered_before:
            return False
        known = self.queue.get(env.event_id)
        if isinstance(event, LoadSegment):
            self.learn(event.segment, None)
            purpose = event.purpose  # why it was issued (v1 payloads: the upcaster derived it)
            source = None
            if event.move_id is not None:
                source = next((q.source for q in self.queue.values() if q.move_id == event.move_id and q.source),
                              None)
            item = InFlight(event.server, "load", event.segment.id, env.occurred_at, event.move_id, source, purpose)
        else:
            sid = self.by_text.get(event.segment_id)
            if sid is None:
                return False
            item = InFlight(event.server, "drop", sid, env.occurred_at, event.move_id, None, event.purpose)
            if event.move_id is not None:  # tell the load half where it moves from
                for cid, q in sorted(self.queue.items()):
                    if q.move_id == event.move_id and q.action == "load" and q.source is None:
                        self.enqueue(cid, InFlight(q.server, q.action, q.segment, q.sent_at, q.move_id,
                                                   event.server, q.purpose))
        if known is not None:
            item = InFlight(item.server, item.action, item.segment, known.sent_at, item.move_id,
                            item.source or known.source, item.purpose)
            if item == known:
                return False  # our own command read back: nothing new
        self.enqueue(env.event_id, item)
        return True

    def expire(self) -> None:
        """Commands older than the load timeout (event time) are no longer in flight."""
        for cid, item in sorted(self.queue.items()):
            if self.now - item.sent_at > self.load_timeout_ms:
                self.settle(cid)

    # -- the projection and the view ----------------------------------------------------------
    def active_servers(self) -> list[str]:
        return sorted(n for n, f in self.servers.items() if f.joined and f.tier == self.tier)

    def projected(self, server: str, sid: SegmentId) -> bool:
        """The planner's projection of one pair (see :mod:`coordinator.planner.projection`)."""
        f = self.servers.get(server)
        if f is None or not f.joined or f.tier != self.tier or sid not in self.segments:
            return False
        items = [self.queue[c] for c in self.by_pair.get((server, sid), ())]
        if any(i.action == "load" and i.server == server for i in items):
            return True
        if server not in self.holders.get(sid, ()):
            return False
        if any(i.action == "drop" and i.server == server and i.move_id is None for i in items):
            return False
        return not any(i.action == "load" and i.source == server for i in items)

    def roll_caches(self) -> int:
        """Apply the touched pairs to the live cost caches; returns how many pairs were looked at."""
        touched, self.touched = self.touched, set()
        gone = [n for n in self.caches if not (self.servers.get(n) and self.servers[n].joined)]
        for n in gone:
            del self.caches[n]
        for server, sid in touched:
            cache = self.caches.get(server)
            if cache is None:
                continue
            if self.projected(server, sid):
                cache.add(self.segments[sid])
            else:
                cache.remove(sid)
        return len(touched)

    def view(self, run: int) -> ClusterView:
        """The tier as the pure planner sees it (queues as the planner agent builds them)."""
        self.expire()
        names = self.active_servers()
        queues: dict[str, list[QueueItem]] = {}
        for _cid, item in sorted(self.queue.items(), key=lambda kv: (kv[1].sent_at, kv[0])):
            if item.action == "drop" and item.move_id is not None:
                continue  # a move's source half: the view models it by the load's ``source``
            if item.server not in names or any(q.segment == item.segment for q in queues.get(item.server, ())):
                continue
            queues.setdefault(item.server, []).append(
                QueueItem(item.action, item.segment, item.purpose, item.move_id, item.source))  # type: ignore[arg-type]
        servers = {}
        for name in names:
            f = self.servers[name]
            loaded = frozenset(s for s in self.held.get(name, ()) if s in self.segments)
            servers[name] = ServerState(Server(name, f.tier, f.max_size_bytes, f.decommissioning), loaded,
                                        tuple(queues.get(name, ())))
        relevant = set(self.used)
        for state in servers.values():
            relevant |= state.loaded
            relevant |= {q.segment for q in state.queue}
        segments = {sid: self.segments[sid] for sid in relevant if sid in self.segments}
        return ClusterView(self.now, servers, segments, frozenset(s for s in self.used if s in self.segments),
                           self.rules, self.config, self.now, run)

    # -- state entries ---------------------------------------------------------------------------
    def take_dirty(self) -> list[tuple[str, str, str | None]]:
        """(family, key, JSON value or None to delete) for every entry changed since the last call, sorted."""
        out: list[tuple[str, str, str | None]] = []
        for family, key in sorted(self.dirty):
            out.append((family, key, self._entry(family, key)))
        self.dirty.clear()
        return out

    def _entry(self, family: str, key: str) -> str | None:
        if family == SEGMENTS:
            sid = self.by_text.get(key)
            seg = self.segments.get(sid) if sid is not None else None
            if sid is None or seg is None:
                return None
            holders = sorted(self.holders.get(sid, ()))
            return orjson.dumps({"segment": encode_record(seg), "used": sid in self.used,
                                 "holders": holders}).decode()
        if family == SERVERS:
            f = self.servers.get(key)
            return None if f is None else orjson.dumps({"tier": f.tier, "maxSizeBytes": f.max_size_bytes,
                                                        "decommissioning": f.decommissioning,
                                                        "joined": f.joined}).decode()
        if family == QUEUE:
            item = self.queue.get(key)
            return None if item is None else orjson.dumps(item.to_json()).decode()
        if family == ANSWERED:
            return ""
        raise KeyError(family)

    def meta(self) -> str:
        return orjson.dumps({"version": self.version, "now": self.now, "runs": self.runs, "rules": self.rules_json,
                             "config": self.config_json}).decode()

    @staticmethod
    def restore(tier: str, meta: str | None, segments: Iterable[tuple[str, str]], servers: Iterable[tuple[str, str]],
                queue: Iterable[tuple[str, str]], load_timeout_ms: int = DEFAULT_LOAD_TIMEOUT_MS) -> TierPlacement:
        """Rebuild from state entries (the cold path: a new worker, a restart, a retried batch)."""
        p = TierPlacement(tier, load_timeout_ms)
        if meta is not None:
            m = orjson.loads(meta)
            p.version, p.now, p.runs = m["version"], m["now"], m["runs"]
            p.rules_json, p.config_json = m["rules"], m["config"]
            for ds, raw in sorted(p.rules_json.items()):
                p.rules = p.rules.with_rules(ds, parse_rules(raw, f"rules.{ds}"))
            p.config = DynamicConfig().updated(p.config_json)
        for key, value in segments:
            o = orjson.loads(value)
            seg = decode_record(SegmentDescriptor, o["segment"], "segment")
            sid = seg.id
            p.segments[sid], p.by_text[key] = seg, sid
            if o["used"]:
                p.used.add(sid)
            for name in o["holders"]:
                p.holders.setdefault(sid, set()).add(name)
                p.held.setdefault(name, set()).add(sid)
        for key, value in servers:
            o = orjson.loads(value)
            p.servers[key] = ServerFacts(o["tier"], o["maxSizeBytes"], o["decommissioning"], o["joined"])
        for key, value in queue:
            o = orjson.loads(value)
            sid = p.by_text.get(o["segment"]) or SegmentId.parse(o["segment"])
            item = InFlight.from_json(o, sid)
            p.queue[key] = item
            for pair in _pairs(item):
                p.by_pair.setdefault(pair, set()).add(key)
        p.dirty.clear()
        p.touched.clear()
        return p


def _pairs(item: InFlight) -> list[PairKey]:
    pairs = [(item.server, item.segment)]
    if item.source is not None:
        pairs.append((item.source, item.segment))
    return pairs
