"""The live dashboard at ``/`` of ``segcoord run --http``: static HTML, CSS and a small script, plus three JSON
answers it polls.

==============================================  =============================================================
``GET /``                                       the page (``static/index.html``; ``/dashboard/static/...``)
``GET /segcoord/v1/dashboard/overview``         servers by tier with sizes, queues and health; data sources
                                                with load status (:func:`coordinator.readmodel.dashboard.overview`)
``GET /segcoord/v1/datasources/{ds}/timeline``  one data source's segments, newest time chunk first, with
                                                their timeline state and holders (``?limit=N``, default 400)
``GET /segcoord/v1/dashboard/recent``           the last commands and visibility changes (``?since=SEQ``: only
                                                newer ones) (:class:`~streaming.dashboard.recent.RecentEvents`)
==============================================  =============================================================

**Short polling, not server-sent events.** The answers are snapshots of folds (level-triggered, like the
planner itself): a missed poll costs one interval, never a wrong picture, and the page needs no diffing or
reconnect logic. The overview is O(used segments) on the planner's thread (the same read the load-status
metrics make) and a timeline O(its segments), so the server computes each at a bounded rate, shared by every
viewer: at most once per ``max(1 s, 10 x its last duration)`` (measured: a 100k-segment timeline takes
0.12 s on the loop and 0.13 s on the planner's thread); with SSE the server would still have to pick that
rate, and would hold one connection open per viewer through the worker's shutdown. The page polls every
2 s while visible.

Threads: the placement fold is read on the planner's thread (:class:`streaming.http.PlacementSource`); the
timeline fold is folded on the event loop (the timeline agent runs there), so its states are read in the
request handler itself, between two of its batches, then joined with the placement on the planner's thread.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import orjson
from aiohttp import web

from coordinator.readmodel import dashboard as dm
from coordinator.readmodel.timeline import states_of
from coordinator.timeline.timelines import Timelines
from streaming.dashboard.recent import RecentEvents
from streaming.http import PlacementSource, druid_error

STATIC = Path(__file__).parent / "static"
API = "/segcoord/v1"
TIMELINE_CACHES = 32
FILES = {"index.html": "text/html", "dashboard.css": "text/css", "dashboard.js": "text/javascript"}


class RateLimited:
    """The last answer of an expensive read, recomputed at most once per ``max(floor_s, 10 x last duration)``."""

    def __init__(self, read: Callable[[], Awaitable[Any]], floor_s: float = 1.0) -> None:
        self.read = read
        self.floor_s = floor_s
        self._value: Any = None
        self._at = float("-inf")
        self._took = 0.0
        self._lock = asyncio.Lock()

    async def get(self) -> Any:
        async with self._lock:
            if time.monotonic() - self._at >= max(self.floor_s, 10 * self._took):
                began = time.monotonic()
                self._value = await self.read()
                self._at = time.monotonic()
                self._took = self._at - began
            return self._value


def add_dashboard(app: web.Application, source: PlacementSource, timelines: Callable[[], Timelines] | None,
                  recent: RecentEvents | None) -> None:
    """Add the page, its files and its JSON answers to the API's application (before it starts)."""
    r = app.router

    overview_cache = RateLimited(lambda: source.read(dm.overview))
    timeline_caches: dict[tuple[str, int], RateLimited] = {}  # the oldest goes first beyond TIMELINE_CACHES

    async def page(_req: web.Request) -> web.StreamResponse:
        return _file("index.html")

    async def static(req: web.Request) -> web.StreamResponse:
        name = req.match_info["name"]
        if name not in FILES:
            raise web.HTTPNotFound()
        return _file(name)

    async def overview(_req: web.Request) -> web.Response:
        return _json(await overview_cache.get())

    async def timeline(req: web.Request) -> web.Response:
        ds = req.match_info["ds"]
        try:
            limit = int(req.query.get("limit", dm.TIMELINE_LIMIT))
            if limit < 1:
                raise ValueError
        except ValueError:
            return druid_error(400, f"limit: expected a positive integer, got {req.query['limit']!r}")
        cache = timeline_caches.get((ds, limit))
        if cache is None:
            if len(timeline_caches) >= TIMELINE_CACHES:
                timeline_caches.pop(next(iter(timeline_caches)))
            cache = timeline_caches[ds, limit] = RateLimited(lambda: read_timeline(ds, limit))
        return _json(await cache.get())

    async def read_timeline(ds: str, limit: int) -> Any:
        known = states_of(timelines(), ds) if timelines is not None else {}  # on the loop, between timeline batches
        return await source.read(lambda p, _now: dm.timeline(ds, known, p, limit))

    async def recent_events(req: web.Request) -> web.Response:
        try:
            since = int(req.query.get("since", 0))
        except ValueError:
            return druid_error(400, f"since: expected an integer, got {req.query['since']!r}")
        if recent is None:
            return _json({"seq": 0, "commands": [], "visibility": []})
        return _json(recent.since(since))

    r.add_get("/", page)
    r.add_get("/dashboard/static/{name}", static)
    r.add_get(f"{API}/dashboard/overview", overview)
    r.add_get(f"{API}/datasources/{{ds}}/timeline", timeline)
    r.add_get(f"{API}/dashboard/recent", recent_events)


def _file(name: str) -> web.Response:
    return web.Response(body=(STATIC / name).read_bytes(), content_type=FILES[name],
                        charset="utf-8", headers={"Cache-Control": "no-cache"})


def _json(doc: object) -> web.Response:
    return web.Response(body=orjson.dumps(doc), content_type="application/json")
