"""What watches the worker: metrics (prometheus and the ``metrics`` topic), readable logs, the HTTP API.

One :class:`Observer` per ``segcoord run``. It hears every agent batch (records, seconds, lag) and
every planner run (through :attr:`PlannerAgent.on_run`, on the planner's thread), and on the planner's
timer reports the scoped planner runs since the last tick as one (:meth:`ServiceMetrics.flush_runs`), publishes the
agents' lag and, during a broker outage, probes the broker so the
"reconnected after" line comes even when no input arrives. With an HTTP socket it serves
:mod:`streaming.http` in the worker's event loop. It never changes what an agent decides.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import socket
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import TYPE_CHECKING, Any

from coordinator.readmodel.placement import HealthCounts
from coordinator.timeline.timelines import Timelines
from events.registry import Event
from events.segment import SegmentId
from events.topics import METRICS, Topics
from streaming.logs import LIBRDKAFKA_LOGGER, ConnectionErrors, setup
from streaming.metrics import ServiceMetrics
from streaming.producer import EventProducer
from streaming.service.planner_agent import PlannerAgent

if TYPE_CHECKING:
    from streaming.dashboard.recent import RecentEvents
    from streaming.http_leader import Leadership

log = logging.getLogger("segcoord.service")
HEALTH_EVERY_S = 30.0  # unavailable / under-replicated over every used segment: O(used segments), so not per run
HEALTH_SHARE_INVERSE = 100  # ... and never more often than 100 times its own duration (seconds at 1M segments)
HEALTH_SLICE = 2_000  # used segments per job of that recount (a few ms of the planner's thread each)


class Observer:
    def __init__(self, bootstrap: str, topics: Topics, planner: PlannerAgent, loglevel: str,
                 sock: socket.socket | None = None, balancer_alive: Callable[[], bool] | None = None,
                 timelines: Callable[[], Timelines] | None = None) -> None:
        self.bootstrap = bootstrap
        self.topics = topics
        self.timelines = timelines  # the timeline agent's fold, for the dashboard (read on the event loop)
        self.planner = planner
        self.loglevel = loglevel
        self.sock = sock
        self.balancer_alive = balancer_alive
        self.producer = EventProducer(bootstrap, topics, extra={"enable.idempotence": False, "acks": "1",
                                                                "logger": logging.getLogger(LIBRDKAFKA_LOGGER)})
        metrics_topic = topics.name(METRICS)
        self.metrics = ServiceMetrics(lambda key, value: self.producer.send_raw(metrics_topic, key, value)
                                      if self._topic_exists(metrics_topic) else None)
        self.errors = ConnectionErrors()
        self._runner: Any = None
        self._recent: RecentEvents | None = None
        self._pool: ThreadPoolExecutor | None = None
        self._health_at = 0.0
        self._health_every = HEALTH_EVERY_S
        self._health_task: asyncio.Future[None] | None = None
        self._metrics_topic_ok: bool | None = None
        self.leadership: Leadership | None = None  # set by a worker in an election: non-leaders redirect (307)
        setup(loglevel)  # the levels now (the worker's start-up); the handlers' filter once it runs
        planner.on_run = self.metrics.plan_run

    def logging_configured(self) -> None:
        """The worker configured logging: the outage summary's filter on its handlers from now on."""
        setup(self.loglevel, self.errors)

    def attach(self, app: Any, planner_pool: ThreadPoolExecutor) -> None:
        """Start (:meth:`start`) when the Faust ``app`` starts."""

        async def started() -> None:
            await self.start(planner_pool)

        app.task(started)

    async def start(self, planner_pool: ThreadPoolExecutor) -> None:
        """On the event loop that serves the HTTP API: the logging filter, and the API when there is a socket.
        ``planner_pool`` is the planner's one thread, where the API reads its state."""
        self._pool = planner_pool
        setup(self.loglevel, self.errors)
        if self.sock is not None:
            await self._serve(planner_pool)

    async def stop(self) -> None:
        """Stop serving the HTTP API (a process without Faust, whose loop would not do it)."""
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    async def _serve(self, planner_pool: ThreadPoolExecutor) -> None:
        from aiohttp import web

        from streaming.dashboard import add_dashboard
        from streaming.dashboard.recent import RecentEvents
        from streaming.http import PlacementSource, build_web_app
        from streaming.writes import envelope_of

        def send(event: Event) -> None:
            self.producer.send(envelope_of(event))
            self.producer.flush(15)

        assert self.sock is not None
        source = PlacementSource(lambda: self.planner.state, planner_pool)
        webapp = build_web_app(source, send, self.metrics)
        self._recent = RecentEvents(self.bootstrap, self.topics).start()
        add_dashboard(webapp, source, self.timelines, self._recent)
        if self.leadership is not None:  # Druid's RedirectFilter: a worker that does not lead sends to the leader
            from streaming.http_leader import add_leader_routes, leader_middleware

            webapp.middlewares.append(leader_middleware(self.leadership))
            add_leader_routes(webapp, self.leadership)
        self._runner = web.AppRunner(webapp, access_log=None)
        await self._runner.setup()
        await web.SockSite(self._runner, self.sock).start()
        host, port = self.sock.getsockname()[:2]
        log.info("HTTP API on http://%s:%d/ (the dashboard; Druid's /druid/coordinator/v1/..., /metrics)", host, port)

    def batch(self, agent: str, records: int, seconds: float, lag: int | None) -> None:
        self.metrics.batch(agent, records, seconds, lag)
        self.errors.healthy()

    async def tick(self) -> None:
        now = int(time.time() * 1000)
        self.metrics.flush_runs()  # the planner's scoped runs since the last tick, reported as one
        self.metrics.publish_agents(now)
        if self.balancer_alive is not None:
            self.metrics.balancer(self.balancer_alive(), now)
        if self._pool is not None and time.monotonic() - self._health_at >= self._health_every and (
                self._health_task is None or self._health_task.done()):
            self._health_at = time.monotonic()
            # beside the tick (the planner's timer run goes on meanwhile); one recount at a time
            self._health_task = asyncio.ensure_future(self._recount_health(self._pool, now))
        if self.errors.unreachable:
            loop = asyncio.get_running_loop()
            try:
                await loop.run_in_executor(None, self._probe)
            except Exception:
                return
            self.errors.healthy()

    async def _recount_health(self, pool: ThreadPoolExecutor, now: int) -> None:
        """``segment/unavailable/count`` and ``segment/underReplicated/count`` over every used segment, counted
        on the planner's thread in slices of :data:`HEALTH_SLICE` segments, each one job: the planner's batches
        go between them instead of waiting for a count of the whole cluster (642 ms at 30k segments on a loaded
        machine, seconds at 1M). Each used segment is counted once (:class:`HealthCounts`). The next recount is
        due after 100 times the time the slices held that thread, and at least :data:`HEALTH_EVERY_S`."""
        loop = asyncio.get_running_loop()
        planner = self.planner
        try:
            began = time.perf_counter()
            at, ids = await loop.run_in_executor(pool, _used_ids, planner)
            held = time.perf_counter() - began
            counts = HealthCounts()
            for i in range(0, len(ids), HEALTH_SLICE):
                began = time.perf_counter()
                await loop.run_in_executor(pool, _count_slice, planner, counts, max(now, at),
                                           ids[i:i + HEALTH_SLICE])
                held += time.perf_counter() - began
            self.metrics.publish_health(counts, max(now, at))
        except Exception as e:  # a metric only (the pool stops with the worker): the next tick tries again
            log.warning("segment health recount failed: %s: %s", type(e).__name__, e)
            return
        self._health_every = max(HEALTH_EVERY_S, HEALTH_SHARE_INVERSE * held)

    def _topic_exists(self, name: str) -> bool:
        """Checked once: without the topic (created by ``segcoord run``/``topics create``) metrics stay local."""
        if self._metrics_topic_ok is None:
            try:
                meta = self.producer._producer.list_topics(name, timeout=5).topics.get(name)
                self._metrics_topic_ok = meta is not None and meta.error is None
            except Exception:
                return False  # the broker is away: ask again next time
            if not self._metrics_topic_ok:
                log.warning("topic %s does not exist: metrics go to /metrics only (run `segcoord topics create`)",
                            name)
        return self._metrics_topic_ok

    def _probe(self) -> None:
        self.producer._producer.list_topics(timeout=2)

    def close(self) -> None:
        self.metrics.flush_runs()
        if self._recent is not None:
            self._recent.close()
        with contextlib.suppress(Exception):
            self.producer.flush(5)


def _used_ids(planner: PlannerAgent) -> tuple[int, list[SegmentId]]:
    """The planner's last event time and its used segments now (on the planner's thread)."""
    st = planner.state
    return st.last_event_at, list(st.used)


def _count_slice(planner: PlannerAgent, counts: HealthCounts, at_ms: int, ids: list[SegmentId]) -> None:
    counts.add(planner.state, at_ms, ids)
