"""Historical liveness as decisions in the log: who is lost, and what a departed server no longer serves.

Historicals heartbeat on ``cluster`` (``server_heartbeat``, every ``heartbeatMillis``); the placement fold
keeps when each server was last heard of (``PlacementState.last_heard``, event time). Two decisions follow,
both pure, both written to the log by the planner agent so that every fold (timeline, feed, queryable view,
replay, audit) reads the same facts and never a clock:

- :func:`silent_servers` / :func:`server_lost`: a joined server not heard of for more than
  ``serverTimeoutMillis`` (Druid's ZooKeeper session timeout plays this part there: an ephemeral
  announcement vanishes when its session expires; default 30 s, as ``druid.zk.service.sessionTimeoutMs``)
  is decided lost: a ``server_lost`` on ``cluster``. Its id is a function of (server, last heard), so the same
  silence gives the same id however often (or after however many restarts) it is decided again; a server
  that speaks again and then falls silent again is a new silence and a new decision.
- :func:`unannounce_departed`: when a ``server_left`` or ``server_lost`` is folded, every segment the fold
  still shows the server holding is unannounced on ``segments`` (``reason`` names the departure, causation
  its event id, the id a function of (departure id, segment)), so a segment served only there goes offline
  in the timeline, and the planner, which takes the server out of its projection at the departure itself,
  re-replicates at once.

A historical that comes back re-announces what it holds (it reads its own ``server_lost`` or restarts with
``server_joined``); its announces are ordinary ``segment_announced`` events.

>>> from events import Envelope, Interval, SegmentAnnounced, SegmentDescriptor, ServerJoined, ServerLeft
>>> from coordinator.placement.state import PlacementState
>>> st = PlacementState()
>>> seg = SegmentDescriptor("wiki", Interval.parse("2026-01-01/P1D"), "v1", 0, 10)
>>> _ = st.evolve(Envelope(ServerJoined(server="h1", tier="_default_tier", max_size_bytes=100), "j", 1000, "h1"))
>>> _ = st.evolve(Envelope(SegmentAnnounced(server="h1", segment=seg), "a", 2000, "wiki"))
>>> silent_servers(st, now=31_000, timeout_ms=30_000), silent_servers(st, now=32_001, timeout_ms=30_000)
([], [('h1', 2000)])
>>> lost = server_lost(st, "h1", now=32_001, timeout_ms=30_000)
>>> lost.event.last_heard_at, lost.key
(2000, 'h1')
>>> left = Envelope(ServerLeft(server="h1"), "left-1", 40_000, "h1")
>>> _ = st.evolve(left)
>>> [(e.event.segment_id[-2:], e.event.reason, e.causation_id) for e in unannounce_departed(st, left)]
[('v1', 'server_left', 'left-1')]
"""

from __future__ import annotations

from coordinator.placement.projected import command_id
from coordinator.placement.state import PlacementState
from events.cluster import ServerLeft, ServerLost
from events.envelope import Envelope
from events.schema import Instant
from events.segments import SegmentUnannounced

DEFAULT_SERVER_TIMEOUT_MS = 30_000  # serverTimeoutMillis: as Druid's default ZooKeeper session timeout
DEFAULT_HEARTBEAT_MS = 5_000  # heartbeatMillis: a historical heartbeats six times per timeout


def silent_servers(state: PlacementState, now: int, timeout_ms: int) -> list[tuple[str, int]]:
    """(server, last heard) of every joined server not heard of for more than ``timeout_ms`` before ``now``,
    by name. A server the fold never heard of (a store from before heartbeats) is never silent."""
    out = []
    for name, facts in sorted(state.servers.items()):
        heard = state.last_heard.get(name)
        if facts.joined and heard is not None and now - heard > timeout_ms:
            out.append((name, heard))
    return out


def server_lost(state: PlacementState, name: str, now: int, timeout_ms: int) -> Envelope[ServerLost]:
    """The ``server_lost`` decision for a silent server (keyed by its name, as every ``cluster`` server event)."""
    facts = state.servers[name]
    heard = state.last_heard[name]
    event = ServerLost(server=name, tier=facts.tier, max_size_bytes=facts.max_size_bytes, last_heard_at=heard,
                       server_timeout_millis=timeout_ms)
    return Envelope(event, command_id("server-lost", name, str(heard)), Instant(now), name)


def unannounce_departed(state: PlacementState, departure: Envelope[ServerLeft | ServerLost]
                        ) -> list[Envelope[SegmentUnannounced]]:
    """The coordinator's unannounce of every segment the departed server still holds in ``state`` (by segment
    id), keyed by data source, at the departure's time, caused by it."""
    name = departure.event.server
    reason = departure.event.event_type
    out = []
    for sid in sorted(state.held.get(name, ()), key=str):
        text = str(sid)
        event = SegmentUnannounced(server=name, segment_id=text, reason=reason)
        out.append(Envelope(event, command_id("unannounce", departure.event_id, text), departure.occurred_at,
                            sid.data_source, departure.event_id))
    return out
