"""The coordinator service: one Faust (faust-streaming 0.15.3) worker per ``segcoord run``: timeline, lockbox
and planner agents.

Each agent has its own RocksDB store (``<state dir>/timeline``,
``<state dir>/lockbox``, ``<state dir>/planner``) and its own producer; inputs:
``segments`` (timeline), ``lock-requests`` (lockbox), ``segments`` + ``cluster``
+ ``commands`` (planner), all positioned from the stores. A topic two agents
read (``segments``) is fetched once by the worker's one consumer and delivered
to both: it is positioned at the lower of their stored offsets, and each agent
skips what its own store says it applied. The planner also runs on a timer
(``plan_every_s``, 5 s by default), in the same event loop as the agents.

Positioning is ours, not Faust's. Faust positions stream partitions in its
recovery service (``Recovery._resume_streams``: it sends ``on_rebalance_complete``,
then calls ``Consumer.perform_seek()``, which seeks every partition to the
offset committed in Kafka). A seek made from the public hooks
(``app.on_partitions_assigned``, ``on_rebalance_complete``) is therefore
overwritten whenever the group has a committed offset (checked on the real
broker: a seek to 5 in the signal, a committed 15, the agent got 15, 16, 17).
So :func:`_position_from_store` replaces the consumer's ``seek_to_committed``
(the one method ``perform_seek`` asks) with a seek to the offsets in RocksDB of
the agent owning each assigned topic, or to the beginning of partitions never
applied. That is the only Faust
internal touched. Faust's own Kafka offset commits still happen but are never
read: RocksDB holds the offsets that count (one write batch with the state).

Other settings and why: no tables (``memory://`` store, no changelogs; Faust's
table changelog writes data and offset separately); ``topic_disable_leader``
(no ``__assignor-__leader`` topic); ``consumer_group_instance_id`` (static
membership: a worker killed with SIGKILL and restarted takes its partitions back
at once instead of waiting for the dead member's session to expire); no web
server. The agent body takes batches (``take_events``) so one flush and one
write batch cover many records. If the agent raises, the process exits with
status 70 at once: the store is at its last whole batch, and a restart resumes
from there (docs/architecture.md: a crash at any point then restart equals full replay).
A broker outage is not a failure: the agents' producers wait it out and a stop
signal during it exits 0 (:mod:`streaming.service.outage`).

Dependency: the project's producers compress with lz4, and aiokafka (Faust's
client) decodes lz4 only with ``cramjam`` installed (``aiokafka[lz4]``);
without it the fetcher crashes on the first batch.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import socket
import sys
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, Protocol

from events.topics import CLUSTER, COMMANDS, LOCK_REQUESTS, SEGMENTS, Topics
from streaming.service import lockbox_agent as lockbox_mod
from streaming.service import planner_agent as planner_mod
from streaming.service import timeline_agent as timeline_mod
from streaming.service.heap import FrozenHeap
from streaming.service.intake import InputRecord
from streaming.service.lockbox_agent import LockboxAgent
from streaming.service.outage import PatientProducer, Shutdown, until_reachable
from streaming.service.planner_agent import PlannerAgent
from streaming.service.state import AgentStateStore
from streaming.service.timeline_agent import TimelineAgent
from streaming.service.worker_identity import WorkerIdentity

log = logging.getLogger("segcoord.service")

BATCH_MAX = 1000
BATCH_WITHIN_S = 0.01
FETCH_MAX_WAIT_MS = 10
EXIT_AGENT_FAILED = 70
PLAN_EVERY_S = 5.0
SHUTDOWN = Shutdown()  # one worker per process: its stores, closed by a stop (streaming.service.outage)


StoredOffsets = Callable[[], dict[tuple[str, int], int]]


Agent = TimelineAgent | LockboxAgent | PlannerAgent


class Observe(Protocol):
    """What the worker tells the observers (metrics, logs, the HTTP API; see :mod:`streaming.service.observe`)."""

    def attach(self, app: Any, planner_pool: ThreadPoolExecutor) -> None: ...

    def batch(self, agent: str, records: int, seconds: float, lag: int | None) -> None: ...

    async def tick(self) -> None: ...


def build_app(bootstrap: str, topics: Topics, timeline: TimelineAgent, lockbox: LockboxAgent,
              planner: PlannerAgent | None = None, plan_every_s: float = PLAN_EVERY_S,
              heap: FrozenHeap | None = None, observe: Observe | None = None,
              me: WorkerIdentity | None = None, planner_pool: ThreadPoolExecutor | None = None) -> Any:
    """A Faust app with the timeline agent over the worker's partitions of ``segments``, the lockbox agent over
    its partitions of ``lock-requests`` and (when given) the planner over ``segments``, ``cluster`` and
    ``commands`` plus its timer (``segcoord run`` feeds the planner on the elected worker instead:
    :mod:`streaming.service.planner_feed`); ``observe`` gets each agent's batches (metrics, logs, the HTTP
    API). ``me`` names the worker in the group (default: this host)."""
    import faust

    app_id = f"{topics.prefix}coordinator"
    instance_id = me.instance_id(app_id) if me is not None else f"{app_id}.{socket.gethostname()}"
    app = faust.App(
        app_id,
        broker=f"kafka://{bootstrap}",
        store="memory://",
        autodiscover=False,
        web_enabled=False,
        topic_disable_leader=True,
        consumer_group_instance_id=instance_id,
        **({"broker_client_id": me.client_id} if me is not None else {}),
        consumer_auto_offset_reset="earliest",
        broker_session_timeout=10.0,
        broker_heartbeat_interval=1.0,
        stream_buffer_maxsize=4 * BATCH_MAX,
    )
    agents: list[tuple[str, tuple[str, ...], Agent]] = [
        ("timeline", (topics.name(SEGMENTS),), timeline),
        ("lockbox", (topics.name(LOCK_REQUESTS),), lockbox),
    ]
    if planner is not None:
        agents.append(("planner", tuple(topics.name(t) for t in (SEGMENTS, CLUSTER, COMMANDS)), planner))
    stored: dict[str, list[StoredOffsets]] = {}
    # the planner's runs are O(cluster): they go to one thread of their own, so the timeline and lockbox
    # agents keep their batches flowing on the event loop while a plan runs (and runs and ticks stay serial)
    planner_thread = planner_pool or ThreadPoolExecutor(max_workers=1, thread_name_prefix="planner")
    for name, topic_names, agent in agents:
        topic = app.topic(*topic_names, key_serializer="raw", value_serializer="raw")
        pool = planner_thread if agent is planner else None
        app.agent(topic, name=f"{app_id}.{name}")(_agent_body(name, agent, heap, pool, observe, app))
        for topic_name in topic_names:
            stored.setdefault(topic_name, []).append(agent.next_offsets)
    if planner is not None:
        app.timer(plan_every_s, name=f"{app_id}.planner-timer")(_planner_timer(planner, planner_thread, observe))
    elif observe is not None:
        async def observe_timer() -> None:
            await observe.tick()

        app.timer(plan_every_s, name=f"{app_id}.observe-timer")(observe_timer)
    if observe is not None:
        observe.attach(app, planner_thread)
    _position_from_store(app, stored)
    _short_fetch_wait(app)
    return app


def _short_fetch_wait(app: Any) -> None:
    """Make the worker's fetches return within ``FETCH_MAX_WAIT_MS`` when no data is there, not Faust's 1.5 s.

    aiokafka leaves a partition out of the next fetch while records of it are still buffered, and Faust
    builds its consumer with a hard-coded ``fetch_max_wait_ms=1500``: a record arriving on such a partition
    then waits for the in-flight long poll of the other partitions, up to 1.5 s (measured: p50 0.6 s,
    p99 1.7 s from produce to visibility). Faust has no setting for it, so the one factory method that
    builds the aiokafka consumer is wrapped on this app's consumer thread."""
    thread = app.consumer._thread
    build = thread._create_worker_consumer

    def build_with_short_wait(transport: Any) -> Any:
        consumer = build(transport)
        consumer._fetch_max_wait_ms = FETCH_MAX_WAIT_MS
        return consumer

    thread._create_worker_consumer = build_with_short_wait


def _planner_timer(planner: PlannerAgent, pool: ThreadPoolExecutor,
                   observe: Observe | None = None) -> Callable[[], Any]:
    """The planner's timer run; skipped until the agent has applied a batch in this process and while its last
    batch was full (catching up: a run on a stale view could repeat commands the unread log already holds)."""

    async def planner_timer() -> None:
        if observe is not None:
            await observe.tick()
        if planner.batches_since_start == 0 or planner.last_batch_size >= BATCH_MAX:
            return
        try:
            await asyncio.get_running_loop().run_in_executor(pool, planner.tick, int(time.time() * 1000))
        except Exception:
            log.exception("planner timer run failed; exiting so a restart resumes from the store")
            logging.shutdown()
            os._exit(SHUTDOWN.exit_code(EXIT_AGENT_FAILED))

    return planner_timer


def _agent_body(name: str, agent: Agent, heap: FrozenHeap | None = None,
                pool: ThreadPoolExecutor | None = None, observe: Observe | None = None,
                app: Any = None) -> Callable[[Any], Any]:
    """The Faust agent coroutine: batches of records into ``agent.process`` (on ``pool`` when given, awaited:
    one batch at a time either way); any failure exits the process."""
    positions: dict[Any, int] = {}  # TP -> next offset this agent will read

    async def body(stream: Any) -> None:
        async for events in stream.take_events(BATCH_MAX, within=BATCH_WITHIN_S):
            records = [
                InputRecord(m.topic, m.partition, m.offset, m.key, m.value, round((m.timestamp or 0) * 1000))
                for m in (e.message for e in events)
            ]
            began = time.perf_counter()
            try:
                if pool is None:
                    agent.process(records)
                else:
                    await asyncio.get_running_loop().run_in_executor(pool, agent.process, records)
                if heap is not None:
                    heap.after_batch()
                if observe is not None:
                    for e in events:
                        positions[e.message.tp] = e.message.offset + 1
                    observe.batch(name, len(records), time.perf_counter() - began, _lag(app, positions))
            except Exception:
                log.exception("%s agent failed; exiting so a restart resumes from the store", name)
                logging.shutdown()
                os._exit(SHUTDOWN.exit_code(EXIT_AGENT_FAILED))

    body.__name__ = name
    return body


def _lag(app: Any, positions: dict[Any, int]) -> int | None:
    """Records behind the high watermarks of the partitions an agent has read (None when unknown)."""
    if app is None:
        return None
    total = 0
    for tp, position in positions.items():
        try:
            high = app.consumer.highwater(tp)
        except Exception:
            return None
        if high is not None:
            total += max(0, high - position)
    return total


def _position_from_store(app: Any, stored: dict[str, list[StoredOffsets]]) -> None:
    """Make Faust's post-assignment seek go to the stored offsets (or the beginning), not Kafka's commits.

    ``stored`` maps each input topic to the stored next offsets of every agent reading it; a partition is
    positioned at the lowest of them (the beginning when any agent never applied it)."""
    consumer = app.consumer

    async def seek_to_stored() -> dict[Any, int]:
        offsets = {topic: [read() for read in readers] for topic, readers in stored.items()}
        positions: dict[Any, int] = {}
        for tp in sorted(consumer.assignment()):
            if tp.topic not in offsets:
                continue
            known = [agent_offsets.get((tp.topic, tp.partition)) for agent_offsets in offsets[tp.topic]]
            offset = None if any(o is None for o in known) else min(o for o in known if o is not None)
            if offset is None:
                offset = (await consumer.earliest_offsets(tp))[tp]
            await consumer._seek(tp, offset)
            positions[tp] = offset
        log.info("positioned from the state stores: %s", positions)
        return positions

    consumer.seek_to_committed = seek_to_stored


def _resume_text(offsets: dict[tuple[str, int], int]) -> str:
    return ", ".join(f"{t}[{p}]@{o}" for (t, p), o in sorted(offsets.items())) or "the beginning"


SHUTDOWN_GRACE_S = 10.0
PLANNER_GIL_SLICE_S = 0.0005


def _worker_class(base: Any) -> Any:
    """Faust's worker, with a deadline on the shutdown a SIGTERM/SIGINT starts.

    Faust's orderly shutdown talks to the broker (consumer group leave, offset commits, producer flushes)
    and, with the broker down, retries for minutes: the service ignored SIGTERM during an outage. After
    ``SHUTDOWN_GRACE_S`` the process exits at once. That is safe for the same reason a SIGKILL is (tested
    20 times over): every agent commits its state, offsets and applied ids in one write batch after its
    output is flushed, so a restart re-reads and re-emits exactly what was not committed."""

    class Worker(base):  # type: ignore[misc, valid-type]
        def install_signal_handlers(self) -> None:
            """Faust's handlers run on the event loop, which a blocking flush (up to 30 s with the broker down)
            holds: the grace deadline also starts from the interpreter's own handler, which the main thread runs
            between two flush slices, whatever the loop is doing. The loop's handlers still run afterwards."""
            super().install_signal_handlers()
            for sig, name in ((signal.SIGTERM, "SIGTERM"), (signal.SIGINT, "SIGINT")):
                signal.signal(sig, lambda _s, _f, name=name: _exit_after_grace(name))

        def _on_sigterm(self) -> None:
            _exit_after_grace("SIGTERM")
            super()._on_sigterm()

        def _on_sigint(self) -> None:
            _exit_after_grace("SIGINT")
            super()._on_sigint()

    return Worker


_grace_started = threading.Event()


def _exit_after_grace(signal_name: str) -> None:
    """Exit ``SHUTDOWN_GRACE_S`` after the first stop signal (later calls change nothing)."""
    SHUTDOWN.request(signal_name)
    if _grace_started.is_set():
        return
    _grace_started.set()

    def force() -> None:
        SHUTDOWN.now(f"the orderly shutdown did not end within {SHUTDOWN_GRACE_S:g}s (broker unreachable?)")

    timer = threading.Timer(SHUTDOWN_GRACE_S, force)
    timer.daemon = True
    timer.start()


def run_service(bootstrap: str, topics: Topics, state_dir: Path, *, loglevel: str = "info",
                plan_every_s: float = PLAN_EVERY_S, balancing: bool = True, incremental: bool = True,
                http: tuple[str, int] | None = None, balancer_alive: Callable[[], bool] | None = None,
                worker_id: str | None = None) -> int:
    """Run the worker until SIGTERM/SIGINT; the state stores are closed on the way out. With ``http``
    (host, port) it also serves Druid's coordinator API and ``/metrics`` there (:mod:`streaming.http`).
    Several workers (same topics, own state folders) split the partitions; the planner runs on the one
    elected (:mod:`streaming.service.election`). Raises :class:`DuplicateWorkerError` when a live worker
    has this one's identity (``worker_id``, else derived from ``state_dir``)."""
    import faust

    from streaming.logs import LIBRDKAFKA_LOGGER
    from streaming.service.election import Election, election_topic, ensure_election_topic
    from streaming.service.observe import Observer
    from streaming.service.planner_feed import PlannerFeed
    from streaming.service.worker_identity import identity, refuse_duplicate

    def stop_before_start(signum: int, _frame: Any) -> None:
        """A stop signal before the worker installed its own handlers: unwind (the stores close) and exit 0."""
        raise SystemExit(0)

    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, stop_before_start)

    me = identity(state_dir, worker_id)
    refuse_duplicate(bootstrap, f"{topics.prefix}coordinator", me)
    until_reachable("creating the election topic", lambda: ensure_election_topic(bootstrap, topics))
    sock = None
    if http is not None:  # bound now, so a taken port is a clear error before the worker starts
        sock = socket.create_server(http)

    with contextlib.ExitStack() as stack:
        if sock is not None:
            stack.callback(sock.close)
        tl_store = stack.enter_context(AgentStateStore(state_dir / timeline_mod.STORE_NAME,
                                                       timeline_mod.FORMAT_VERSION))
        lb_store = stack.enter_context(AgentStateStore(state_dir / lockbox_mod.STORE_NAME,
                                                       lockbox_mod.FORMAT_VERSION))
        pl_store = stack.enter_context(AgentStateStore(state_dir / planner_mod.STORE_NAME,
                                                       planner_mod.FORMAT_VERSION))
        for store in (tl_store, lb_store, pl_store):
            SHUTDOWN.hold(store)
        # librdkafka's log lines through Python logging, so broker outages are summarized (streaming.logs)
        kafka_log = {"logger": logging.getLogger(LIBRDKAFKA_LOGGER)}
        tl_producer = PatientProducer(bootstrap, topics, SHUTDOWN, extra=kafka_log, name="timeline")
        lb_producer = PatientProducer(bootstrap, topics, SHUTDOWN, extra=kafka_log, name="lockbox")
        pl_producer = PatientProducer(bootstrap, topics, SHUTDOWN, extra=kafka_log, name="planner")
        stack.callback(sys.stdout.flush)
        stack.callback(pl_producer.flush)
        stack.callback(lb_producer.flush)
        stack.callback(tl_producer.flush)
        timeline = TimelineAgent(tl_store, topics, tl_producer)
        print(f"timeline agent resumes at {_resume_text(timeline.next_offsets())}"
              f"{' (store wiped: older format)' if tl_store.wiped else ''}", flush=True)
        lockbox = LockboxAgent(lb_store, topics, lb_producer)
        # worded apart from the timeline's " resumes at " line, which tests count
        print(f"lockbox agent: {lockbox.counters_restored} requests restored, resuming from "
              f"{_resume_text(lockbox.next_offsets())}"
              f"{' (store wiped: older format)' if lb_store.wiped else ''}", flush=True)
        planner = PlannerAgent(pl_store, topics, pl_producer, balancing=balancing, incremental=incremental)
        print(f"planner agent: {len(planner.state.servers)} servers, {len(planner.state.used)} used segments, "
              f"{len(planner.state.queue)} commands in flight restored; resuming from "
              f"{_resume_text(planner.next_offsets())}"
              f"{' (store wiped: older format)' if pl_store.wiped else ''}, planning every {plan_every_s:g}s"
              f"{'' if balancing else ', balancing left to the Spark balancer'}"
              f"{'' if incremental else ', full runs only'}",
              flush=True)
        sys.setswitchinterval(PLANNER_GIL_SLICE_S)
        heap = FrozenHeap()
        heap.start()  # the restored state is frozen out of the collector's scans
        observer = Observer(bootstrap, topics, planner, loglevel, sock, balancer_alive, lambda: timeline.timelines)
        stack.callback(observer.close)
        planner_pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="planner")
        app = build_app(bootstrap, topics, timeline, lockbox, None, plan_every_s, heap, observer, me, planner_pool)
        print(f"worker {me.worker_id}: group instance {me.instance_id(app.conf.id)}; the planner runs on the "
              f"worker elected through {election_topic(topics)}", flush=True)
        feed = PlannerFeed(bootstrap, planner, pl_producer, planner_pool, SHUTDOWN, worker_id=me.worker_id,
                           plan_every_s=plan_every_s, extra=kafka_log,
                           on_batch=lambda n, s, lag: observer.batch("planner", n, s, lag))
        election = Election(bootstrap, topics, me.worker_id, client_id=me.client_id, on_elected=feed.elected,
                            on_deposed=feed.deposed, extra=kafka_log).start()
        stack.callback(election.close)
        # Faust's own INFO is start-up chatter: the libraries log at warn or above, the service's lines at loglevel
        faust_level = "warn" if loglevel in ("info", "warn") else loglevel
        worker = _worker_class(faust.Worker)(app, loglevel=faust_level, quiet=True, redirect_stdouts=False)
        if not sys.stdout.isatty():
            worker.spinner = None  # its cursor escape codes end up in log files
        try:
            worker.execute_from_commandline()
        except SystemExit as e:
            return int(e.code or 0)
        return 0
