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

- :func:`unannounce_not_joined`: an announce by a known server that is not joined (read after its
  ``server_lost``: written just before it died, or by a paused server that has not joined again) is not held
  by the fold (Druid: a server must re-join before its announces count), and is unannounced on ``segments``
  (``reason`` ``server_not_joined``), so the timeline does not show it served either.

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
from events.registry import Event
from events.schema import Instant
from events.segments import SegmentAnnounced, SegmentUnannounced

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


NOT_JOINED = "server_not_joined"


def unannounce_not_joined(state: PlacementState, announce: Envelope[Event]) -> Envelope[SegmentUnannounced] | None:
    """The coordinator's unannounce of an announce the fold does not hold because its server is known and not
    joined (:meth:`PlacementState.announces_count`), or None for any other event.

    This closes the gap of a departure: an announce the dead server wrote just before its ``server_lost`` and
    read after it would otherwise show the segment served in the timeline (which folds ``segments`` only) by a
    server the planner no longer counts. Reason ``server_not_joined``; id = hash of (announce id, segment), so
    a re-decision after a restart is dropped; keyed by data source, at the announce's time, caused by it. A
    historical that is alive reads it, joins again and announces again (``streaming.historical``).

    >>> from events.cluster import ServerJoined, ServerLeft
    >>> from events.interval import Interval
    >>> from events.segment import SegmentDescriptor
    >>> seg = SegmentDescriptor("wiki", Interval(0, 3_600_000), "v1", 0, 1)
    >>> st = PlacementState()
    >>> joined = ServerJoined(server="h1", tier="_default_tier", max_size_bytes=10)
    >>> _ = st.evolve(Envelope(joined, "j", Instant(0), "h1"))
    >>> _ = st.evolve(Envelope(ServerLeft(server="h1"), "l", Instant(1), "h1"))
    >>> late = Envelope(SegmentAnnounced(server="h1", segment=seg), "a", Instant(2), "wiki")
    >>> _ = st.evolve(late)
    >>> out = unannounce_not_joined(st, late)
    >>> (out.event.reason, out.causation_id, st.held.get("h1", set()))
    ('server_not_joined', 'a', set())
    """
    event = announce.event
    if not isinstance(event, SegmentAnnounced) or state.announces_count(event.server):
        return None
    text = str(event.segment.id)
    out = SegmentUnannounced(server=event.server, segment_id=text, reason=NOT_JOINED)
    return Envelope(out, command_id("unannounce-not-joined", announce.event_id, text), announce.occurred_at,
                    event.segment.data_source, announce.event_id)


def unannounce_held_not_joined(state: PlacementState) -> list[Envelope[SegmentUnannounced]]:
    """The coordinator's unannounce of every segment the fold still shows a known, not joined server holding
    (reason ``server_not_joined``), by server and segment id; empty once every departure's
    :func:`unannounce_departed` was folded. A planner that caught up after a predecessor (or its own earlier
    catch-up) died between folding a departure and sending its unannounces finds them here. The id is a function
    of (server, when it was last heard, segment), so the same leftover gets the same id whoever decides it; keyed by
    data source, at the time the server was last heard.

    >>> from events.cluster import ServerJoined, ServerLost
    >>> from events.interval import Interval
    >>> from events.segment import SegmentDescriptor
    >>> seg = SegmentDescriptor("wiki", Interval(0, 3_600_000), "v1", 0, 1)
    >>> st = PlacementState()
    >>> joined = ServerJoined(server="h1", tier="_default_tier", max_size_bytes=10)
    >>> _ = st.evolve(Envelope(joined, "j", Instant(0), "h1"))
    >>> _ = st.evolve(Envelope(SegmentAnnounced(server="h1", segment=seg), "a", Instant(1), "wiki"))
    >>> unannounce_held_not_joined(st)
    []
    >>> _ = st.evolve(Envelope(ServerLost(server="h1", last_heard_at=1), "lost", Instant(40_000), "h1"))
    >>> [(u.event.server, u.event.reason, u.occurred_at) for u in unannounce_held_not_joined(st)]
    [('h1', 'server_not_joined', 1)]
    """
    out = []
    for name, facts in sorted(state.servers.items()):
        held = state.held.get(name)
        if facts.joined or not held:
            continue
        heard = state.last_heard.get(name, 0)
        for sid in sorted(held, key=str):
            text = str(sid)
            event = SegmentUnannounced(server=name, segment_id=text, reason=NOT_JOINED)
            out.append(Envelope(event, command_id("unannounce-held-not-joined", name, str(heard), text),
                                Instant(heard), sid.data_source, None))
    return out
