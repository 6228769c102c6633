"""The HTTP API on a worker that does not lead: redirect to the leader's, as Druid's non-leader coordinators do.

Only the elected worker's planner is current (:mod:`streaming.service.election`); the others keep a planner
store that stopped when they last led, or never started. So, as Druid's coordinator does for a request that
reaches a coordinator which is not the leader (its ``RedirectFilter``), a worker that does not lead answers
every request under ``/druid/coordinator/v1`` and the dashboard with **307 Temporary Redirect** to the same
path and query on the leader's HTTP API (its address is in its election claim). 307 keeps the method and
body, so a POST of rules or config is repeated against the leader. It answers ``503`` (Druid's error JSON,
naming the leading worker) when no leader is known or the leader serves no HTTP API. The leader itself
answers ``503`` until its planner has read the log up to its end after the election (a new leader's view
is the log's only then).

Answered locally on every worker, as in Druid:

- ``GET /druid/coordinator/v1/leader``: the leader's base URL (text; 503 when unknown, or when the leader
  serves no HTTP API);
- ``GET /druid/coordinator/v1/isLeader``: ``{"leader": true}`` with 200 on the leader once its planner has
  read the log up to its end, ``{"leader": false}`` with 404 elsewhere (a load balancer's health check finds
  the leader this way);
- ``/status/health`` and ``/metrics`` (this worker's own).

A redirect (or a 503 that knows the leader) carries ``X-Segcoord-Leader: <worker>@<epoch>``.
"""

from __future__ import annotations

import asyncio
import socket
from collections.abc import Awaitable, Callable
from typing import Any, Protocol

from aiohttp import web

from streaming.http import PREFIX, druid_error
from streaming.service.election import Claim

LOCAL = frozenset({f"{PREFIX}/leader", f"{PREFIX}/isLeader", "/status/health", "/metrics"})
LEADER_HEADER = "X-Segcoord-Leader"


class Leadership(Protocol):
    """Whether this worker leads, and the current leader's claim (blocking; called off the event loop)."""

    @property
    def worker_id(self) -> str: ...

    def leads(self) -> bool: ...

    def ready(self) -> bool:
        """Whether this worker's planner has read the log up to its end since it was elected (its view is
        current); a leader that is not ready yet answers 503."""
        ...

    def leader(self) -> Claim | None: ...


def advertised_url(host: str, port: int, advertise: str | None = None) -> str:
    """The base URL other workers redirect to: ``advertise`` when given, else ``http://HOST:PORT`` of the
    bound socket (a wildcard host is replaced by this machine's name).

    >>> advertised_url("127.0.0.1", 8081)
    'http://127.0.0.1:8081'
    >>> advertised_url("0.0.0.0", 8081, "http://coord-1.example:8081/")
    'http://coord-1.example:8081'
    """
    if advertise:
        return advertise.rstrip("/")
    if host in ("0.0.0.0", "::", ""):
        host = socket.getfqdn()
    return f"http://[{host}]:{port}" if ":" in host else f"http://{host}:{port}"


def leader_middleware(leadership: Leadership) -> Any:
    """The aiohttp middleware of the module docstring."""

    @web.middleware
    async def redirect(request: web.Request, handler: Callable[[web.Request], Awaitable[web.StreamResponse]]
                       ) -> web.StreamResponse:
        if request.path in LOCAL or (leadership.leads() and leadership.ready()):
            return await handler(request)
        claim = await asyncio.get_running_loop().run_in_executor(None, leadership.leader)
        if leadership.leads():
            response = druid_error(503, f"{request.method} {request.path}: this worker runs the planner but is "
                                        "still reading the log up to its end (it was just elected); retry shortly",
                                   "serviceUnavailable")
        elif claim is None or claim.worker == leadership.worker_id:  # none yet, or this worker's own ended claim
            response = druid_error(503, f"{request.method} {request.path}: this worker does not run the planner, "
                                        "and no other leader is known yet (an election is under way?)",
                                   "serviceUnavailable")
        elif claim.http is None:
            response = druid_error(503, f"{request.method} {request.path}: the planner runs on worker "
                                        f"{claim.worker!r} (epoch {claim.epoch}), which serves no HTTP API "
                                        "(start it with --http)", "serviceUnavailable")
        else:
            response = web.Response(status=307, headers={"Location": claim.http + request.path_qs})
        if claim is not None:
            response.headers[LEADER_HEADER] = f"{claim.worker}@{claim.epoch}"
        return response

    return redirect


def add_leader_routes(app: web.Application, leadership: Leadership) -> None:
    """``/leader`` and ``/isLeader`` (module docstring)."""

    async def leader(_req: web.Request) -> web.StreamResponse:
        claim = await asyncio.get_running_loop().run_in_executor(None, leadership.leader)
        if claim is None:
            return druid_error(503, "no leader is known yet", "serviceUnavailable")
        if claim.http is None:
            return druid_error(503, f"the planner runs on worker {claim.worker!r} (epoch {claim.epoch}), which "
                                    "serves no HTTP API", "serviceUnavailable")
        return web.Response(text=claim.http)

    async def is_leader(_req: web.Request) -> web.StreamResponse:
        leads = leadership.leads() and leadership.ready()
        return web.json_response({"leader": leads}, status=200 if leads else 404)

    app.router.add_get(f"{PREFIX}/leader", leader)
    app.router.add_get(f"{PREFIX}/isLeader", is_leader)
