"""``segcoord run --http HOST:PORT``: Druid's coordinator HTTP API and ``/metrics``, on aiohttp.

Served by the worker itself, in its event loop, from the agents' own folds: every answer is a read model
of :mod:`coordinator.readmodel` computed on the planner agent's thread (the one that folds its state), so
a request never sees a half-applied batch. Writes (rules, dynamic config) are validated with the same
pure validators as the CLI's, then become events on ``cluster`` (the planner applies them from the log,
like any other); the response is sent once the broker has the event.

Endpoints (Druid's paths and JSON shapes; ``?simple`` / ``?full`` as Druid reads them: present or not):

==========================================================  ===============================================
``GET /status/health``                                      ``true``
``GET /druid/coordinator/v1/loadstatus``                    ``{ds: percent loaded}``; ``?simple``:
                                                            ``{ds: segments left}``; ``?full``:
                                                            ``{tier: {ds: replicas left}}``
``GET /druid/coordinator/v1/servers``                       ``[host]``; ``?simple``: ``[{host, type, tier,
                                                            currSize, maxSize, priority}]``
``GET /druid/coordinator/v1/datasources``                   ``[ds]`` served by some server
``GET /druid/coordinator/v1/datasources/{ds}/segments``     ``[segment id]`` served (204 if none, as Druid)
``GET /druid/coordinator/v1/loadqueue``                     ``{server: {segmentsToLoad: [id], segmentsToDrop:
                                                            [id]}}``; ``?simple``: counts and bytes
``GET /druid/coordinator/v1/rules``                         ``{ds: [rule]}`` (``_default`` included)
``GET|POST /druid/coordinator/v1/rules/{ds}``               ``[rule]``; POST replaces them
``GET|POST /druid/coordinator/v1/config``                   the dynamic config; POST merges keys into it
``GET /druid/coordinator/v1/metadata/datasources``          ``[ds]`` with used segments
``GET /druid/coordinator/v1/metadata/datasources/{ds}/      ``[segment id]`` used; ``?full``: DataSegment
segments``                                                  objects (404 when the data source has none)
``GET /metrics``                                            Prometheus text (:mod:`streaming.metrics`)
==========================================================  ===============================================

**Authentication** (:class:`HttpAuth`, docs/security.md): every write (POST) needs a bearer token
(``Authorization: Bearer <SEGCOORD_HTTP_TOKEN>``) or basic auth (``SEGCOORD_HTTP_BASIC=user:password``);
with neither configured, writes are refused (403) rather than open. ``SEGCOORD_HTTP_AUTH_READS=1`` requires
the same for reads; ``/status/health`` is always open. ``--http :PORT`` binds to 127.0.0.1; give the host
(``0.0.0.0:PORT``) to listen elsewhere. Missing or wrong credentials: 401 with ``WWW-Authenticate``.

Errors are Druid's JSON error: ``{"error": "druidException", "errorCode", "persona", "category",
"errorMessage", "context"}`` with 400 (bad input), 404 (unknown path or data source) or 405.
"""

from __future__ import annotations

import asyncio
import base64
import hmac
import logging
import os
import time
from collections.abc import Awaitable, Callable, Mapping
from concurrent.futures import Executor
from dataclasses import dataclass
from typing import Any, TypeVar

import orjson
from aiohttp import web

from coordinator.placement.state import PlacementState
from coordinator.readmodel import placement as rm
from coordinator.readmodel.validate import PayloadError, check_config, check_rules
from events.cluster import DynamicConfigSet, RulesSet
from events.registry import Event
from events.segment import SegmentDescriptor
from streaming.metrics import ServiceMetrics

log = logging.getLogger("segcoord.http")
T = TypeVar("T")
PREFIX = "/druid/coordinator/v1"


class PlacementSource:
    """Runs a read of the planner agent's placement state on the executor that folds it (serialized)."""

    def __init__(self, state: Callable[[], PlacementState], executor: Executor | None) -> None:
        self.state = state
        self.executor = executor

    async def read(self, fn: Callable[[PlacementState, int], T]) -> T:
        def call() -> T:
            st = self.state()
            return fn(st, max(int(time.time() * 1000), st.last_event_at))
        return await asyncio.get_running_loop().run_in_executor(self.executor, call)


Send = Callable[[Event], None]  # produce one event and wait for the broker's ack (blocking)


def druid_error(status: int, message: str, code: str = "invalidInput") -> web.Response:
    category = {400: "INVALID_INPUT", 401: "UNAUTHORIZED", 403: "FORBIDDEN", 404: "NOT_FOUND",
                405: "UNSUPPORTED"}.get(status, "RUNTIME_FAILURE")
    body = {"error": "druidException", "errorCode": code, "persona": "USER", "category": category,
            "errorMessage": message, "context": {}}
    return web.Response(status=status, body=orjson.dumps(body), content_type="application/json")


def _json(doc: object) -> web.Response:
    return web.Response(body=orjson.dumps(doc), content_type="application/json")


def _flag(request: web.Request, name: str) -> bool:
    """Druid's flag parameters: present (``?simple``, ``?simple=true``) unless explicitly false."""
    value = request.query.get(name)
    return value is not None and value.lower() != "false"


def data_segment(seg: SegmentDescriptor) -> dict[str, Any]:
    """Druid's DataSegment JSON of a descriptor (no deep storage here: an empty ``loadSpec``)."""
    return {"dataSource": seg.data_source, "interval": seg.interval.iso(), "version": seg.version,
            "loadSpec": {}, "dimensions": "", "metrics": "",
            "shardSpec": {"type": "numbered", "partitionNum": seg.partition_id, "partitions": 0},
            "binaryVersion": 9, "size": seg.size, "identifier": str(seg.id)}


@web.middleware
async def _errors(request: web.Request, handler: Callable[[web.Request], Awaitable[web.StreamResponse]]
                  ) -> web.StreamResponse:
    try:
        return await handler(request)
    except web.HTTPNotFound:
        return druid_error(404, f"no such resource: {request.path}", "notFound")
    except web.HTTPMethodNotAllowed:
        return druid_error(405, f"{request.method} is not allowed on {request.path}", "unsupportedMethod")


@dataclass(frozen=True, slots=True)
class HttpAuth:
    """Who may write (and, with ``reads``, read): a bearer token and/or basic credentials."""

    token: str | None = None
    basic: tuple[str, str] | None = None
    reads: bool = False

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> HttpAuth:
        env = os.environ if environ is None else environ
        basic = None
        if env.get(BASIC_ENV):
            user, sep, password = env[BASIC_ENV].partition(":")
            if not sep or not user or not password:
                raise ValueError(f"{BASIC_ENV} must be user:password")
            basic = (user, password)
        return cls(env.get(TOKEN_ENV) or None, basic, env.get(READS_ENV, "") not in ("", "0", "false"))

    def allows(self, header: str | None) -> bool:
        if not header:
            return False
        scheme, _, value = header.partition(" ")
        if scheme.lower() == "bearer" and self.token is not None:
            return hmac.compare_digest(value.strip().encode(), self.token.encode())
        if scheme.lower() == "basic" and self.basic is not None:
            try:
                user, _, password = base64.b64decode(value.strip(), validate=True).decode().partition(":")
            except (ValueError, UnicodeDecodeError):
                return False
            return hmac.compare_digest(user.encode(), self.basic[0].encode()) & \
                hmac.compare_digest(password.encode(), self.basic[1].encode())
        return False


TOKEN_ENV, BASIC_ENV, READS_ENV = "SEGCOORD_HTTP_TOKEN", "SEGCOORD_HTTP_BASIC", "SEGCOORD_HTTP_AUTH_READS"


def _auth_middleware(auth: HttpAuth) -> Any:
    @web.middleware
    async def check(request: web.Request, handler: Callable[[web.Request], Awaitable[web.StreamResponse]]
                    ) -> web.StreamResponse:
        write = request.method not in ("GET", "HEAD", "OPTIONS")
        if request.path == "/status/health" or not (write or auth.reads):
            return await handler(request)
        if auth.token is None and auth.basic is None:
            return druid_error(403, f"{request.method} {request.path}: writes are disabled: configure "
                                    f"{TOKEN_ENV} or {BASIC_ENV} for the worker", "forbidden")
        if not auth.allows(request.headers.get("Authorization")):
            response = druid_error(401, f"{request.method} {request.path}: authentication required "
                                        "(Authorization: Bearer TOKEN, or Basic)", "unauthorized")
            response.headers["WWW-Authenticate"] = 'Bearer realm="segcoord", Basic realm="segcoord"'
            return response
        return await handler(request)
    return check


def build_web_app(source: PlacementSource, send: Send, metrics: ServiceMetrics | None = None,
                  auth: HttpAuth | None = None) -> web.Application:
    """The aiohttp application of the module docstring; ``auth`` defaults to :meth:`HttpAuth.from_env`."""
    app = web.Application(middlewares=[_errors, _auth_middleware(auth if auth is not None else HttpAuth.from_env())])
    r = app.router

    async def health(_req: web.Request) -> web.Response:
        return _json(True)

    async def loadstatus(req: web.Request) -> web.Response:
        if _flag(req, "simple"):
            return _json(await source.read(rm.load_status_simple))
        if _flag(req, "full"):
            return _json(await source.read(rm.load_status_full))
        return _json(await source.read(rm.load_status))

    async def servers(req: web.Request) -> web.Response:
        rows = await source.read(lambda p, _now: rm.servers_simple(p))
        return _json(rows if _flag(req, "simple") else [s["host"] for s in rows])

    async def datasources(_req: web.Request) -> web.Response:
        return _json(await source.read(lambda p, _now: rm.served_data_sources(p)))

    async def datasource_segments(req: web.Request) -> web.Response:
        ds = req.match_info["ds"]
        ids = await source.read(lambda p, _now: rm.served_segments(p, ds))
        return _json(ids) if ids else web.Response(status=204)  # Druid: an unknown data source is "no content"

    async def loadqueue(req: web.Request) -> web.Response:
        if _flag(req, "simple"):
            return _json(await source.read(lambda p, _now: rm.load_queue_simple(p)))

        def ids(p: PlacementState, _now: int) -> dict[str, dict[str, list[str]]]:
            return {n: {"segmentsToLoad": sorted(str(s) for s in p.loading.get(n, ())),
                        "segmentsToDrop": sorted(str(s) for s in p.dropping.get(n, ()))} for n in sorted(p.tier_of)}
        return _json(await source.read(ids))

    async def all_rules(_req: web.Request) -> web.Response:
        return _json(await source.read(lambda p, _now: rm.rules(p)))

    async def get_rules(req: web.Request) -> web.Response:
        ds = req.match_info["ds"]
        return _json(await source.read(lambda p, _now: rm.rules_of(p, ds)))

    async def post_rules(req: web.Request) -> web.Response:
        ds = req.match_info["ds"]
        body = await _body(req)
        if isinstance(body, web.Response):
            return body
        try:
            check_rules(ds, body, "rules")
        except PayloadError as e:
            return druid_error(400, str(e))
        await _send(send, RulesSet(data_source=ds, rules=tuple(body)))
        return web.Response(status=200)

    async def get_config(_req: web.Request) -> web.Response:
        return _json(await source.read(lambda p, _now: rm.config(p)))

    async def post_config(req: web.Request) -> web.Response:
        body = await _body(req)
        if isinstance(body, web.Response):
            return body
        try:
            await source.read(lambda p, _now: check_config(body, p.config, "config"))
        except PayloadError as e:
            return druid_error(400, str(e))
        await _send(send, DynamicConfigSet(config=body))
        return web.Response(status=200)

    async def metadata_datasources(_req: web.Request) -> web.Response:
        return _json(await source.read(lambda p, _now: rm.used_data_sources(p)))

    async def metadata_segments(req: web.Request) -> web.Response:
        ds = req.match_info["ds"]
        full = _flag(req, "full")

        def used(p: PlacementState, _now: int) -> list[Any]:
            return [data_segment(p.segments[s]) if full else str(s) for s in rm.used_segments(p, ds)]
        out = await source.read(used)
        return _json(out) if out else druid_error(404, f"data source {ds!r} has no used segments", "notFound")

    async def prometheus(_req: web.Request) -> web.Response:
        body = metrics.exposition() if metrics is not None else b""
        return web.Response(body=body, headers={"Content-Type": "text/plain; version=0.0.4; charset=utf-8"})

    r.add_get("/status/health", health)
    r.add_get(f"{PREFIX}/loadstatus", loadstatus)
    r.add_get(f"{PREFIX}/servers", servers)
    r.add_get(f"{PREFIX}/datasources", datasources)
    r.add_get(f"{PREFIX}/datasources/{{ds}}/segments", datasource_segments)
    r.add_get(f"{PREFIX}/loadqueue", loadqueue)
    r.add_get(f"{PREFIX}/rules", all_rules)
    r.add_get(f"{PREFIX}/rules/{{ds}}", get_rules)
    r.add_post(f"{PREFIX}/rules/{{ds}}", post_rules)
    r.add_get(f"{PREFIX}/config", get_config)
    r.add_post(f"{PREFIX}/config", post_config)
    r.add_get(f"{PREFIX}/metadata/datasources", metadata_datasources)
    r.add_get(f"{PREFIX}/metadata/datasources/{{ds}}/segments", metadata_segments)
    r.add_get("/metrics", prometheus)
    return app


async def _body(req: web.Request) -> Any:
    """The request's JSON body, or a Druid error response."""
    raw = await req.read()
    try:
        return orjson.loads(raw)
    except orjson.JSONDecodeError as e:
        return druid_error(400, f"request body is not JSON: {e}")


async def _send(send: Send, event: Event) -> None:
    await asyncio.get_running_loop().run_in_executor(None, send, event)


def parse_address(text: str) -> tuple[str, int]:
    """``HOST:PORT`` (``:PORT`` or ``PORT`` = loopback only); ValueError naming what is wrong."""
    host, _, port = text.rpartition(":")
    if not port.isdigit() or not 0 <= int(port) <= 65535:
        raise ValueError(f"{text!r}: expected HOST:PORT, e.g. 127.0.0.1:8081")
    return host or "127.0.0.1", int(port)
