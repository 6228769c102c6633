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
So :func:`~streaming.service.faust_patches.position_from_store` replaces the consumer's
``seek_to_committed`` (the one method ``perform_seek`` asks) with a seek to the offsets in
RocksDB of the agent owning each assigned topic, or to the beginning of partitions never
applied. Every Faust / aiokafka internal the service touches is patched in
:mod:`streaming.service.faust_patches`, which checks the pinned versions on import.
Faust's own Kafka offset commits still happen but are never
read: RocksDB holds the offsets that count (one write batch with the state).

Other settings and why: no tables (``memory://`` store, no changelogs; Faust's
table changelog writes data and offset separately); ``topic_disable_leader``
(no ``__assignor-__leader`` topic); ``consumer_group_instance_id`` (static
membership: a worker killed with SIGKILL and restarted takes its partitions back
at once instead of waiting for the dead member's session to expire); no web
server. Records reach the agents as whole fetched batches, not through Faust
streams: :mod:`streaming.service.delivery` replaces the consumer's per-message
drain loop (the second Faust internal touched), so one flush and one write batch
cover up to ``broker_max_poll_records`` (``BATCH_MAX``) records and each record is
decoded once for every agent reading it. If an agent raises, the process exits with
status 70 at once: the store is at its last whole batch, and a restart resumes
from there (docs/architecture.md: a crash at any point then restart equals full replay).

Dependency: the project's producers compress with lz4, and aiokafka (Faust's
client) decodes lz4 only with ``cramjam`` installed (``aiokafka[lz4]``);
without it the fetcher crashes on the first batch.

A broker outage is not a failure: the agents' producers wait it out and a stop
signal during it exits 0 (:mod:`streaming.service.outage`).
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import socket
import sys
import threading
import time
from collections.abc import Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, Protocol

from coordinator.placement.settled import DEFAULT_WINDOW, SettledWindow
from coordinator.planner.balancing import DEFAULT_PERIOD_MS
from events.topics import CLUSTER, COMMANDS, LOCK_REQUESTS, SEGMENTS, TIMELINE, Topics
from streaming import credentials
from streaming.service import delivery, faust_patches, stage_trace
from streaming.service import lockbox_agent as lockbox_mod
from streaming.service import planner_agent as planner_mod
from streaming.service import timeline_agent as timeline_mod
from streaming.service import upsert_agent as upsert_mod
from streaming.service.delivery import BatchDelivery, Route
from streaming.service.faust_patches import position_from_store as _position_from_store
from streaming.service.faust_patches import short_fetch_wait as _short_fetch_wait
from streaming.service.heap import FrozenHeap
from streaming.service.lockbox_agent import LockboxAgent
from streaming.service.outage import PatientProducer, Shutdown, until_reachable
from streaming.service.planner_agent import PlannerAgent
from streaming.service.shared_envelopes import SHARED as SHARED_ENVELOPES
from streaming.service.state import AgentStateStore, AppliedWindow
from streaming.service.timeline_agent import TimelineAgent
from streaming.service.timeline_snapshots import SnapshotPolicy, SnapshotTail
from streaming.service.upsert_agent import UpsertAgent
from streaming.service.worker_identity import WorkerIdentity

log = logging.getLogger("segcoord.service")

BATCH_MAX = 2000  # records per fetched batch (broker_max_poll_records); bench.service: 1000 -> 2000 +5-20%, 5000 same
FETCH_MAX_WAIT_MS = faust_patches.FETCH_MAX_WAIT_MS  # kept here for the readers that import it
EXIT_AGENT_FAILED = delivery.EXIT_AGENT_FAILED
PLAN_EVERY_S = 5.0
# The consumer's metadata refresh period (Faust's default: 5 min). A group joined while a restarted broker did
# not list the topics yet gets no partitions ("Ignoring missing topic"), and only a metadata refresh that sees
# them again makes it rejoin: the worker would sit idle for up to this long (seen on a worker started as the
# broker went down).
METADATA_MAX_AGE_MS = 10_000
SHUTDOWN = Shutdown()  # one worker per process: its stores, closed by a stop (streaming.service.outage)


StoredOffsets = Callable[[], dict[tuple[str, int], int]]


Agent = TimelineAgent | LockboxAgent | PlannerAgent | UpsertAgent


class Observe(Protocol):
    """What the worker tells the observers (metrics, logs, the HTTP API; see :mod:`streaming.service.observe`)."""

    def attach(self, app: Any, planner_pool: ThreadPoolExecutor) -> None: ...

    def batch(self, agent: str, records: int, seconds: float, lag: int | None) -> None: ...

    async def tick(self) -> None: ...


def build_app(bootstrap: str, topics: Topics, timeline: TimelineAgent, lockbox: LockboxAgent,
              planner: PlannerAgent | None = None, plan_every_s: float = PLAN_EVERY_S,
              heap: FrozenHeap | None = None, observe: Observe | None = None,
              upserts: UpsertAgent | None = None, me: WorkerIdentity | None = None,
              planner_pool: ThreadPoolExecutor | None = None, snapshot_tail: SnapshotTail | None = None) -> Any:
    """A Faust app with the timeline agent over the worker's partitions of ``segments``, the lockbox agent over
    its partitions of ``lock-requests``, (when given) the upsert agent over ``cluster``, ``segments`` and
    ``timeline``, and (when given) the planner over ``segments``, ``cluster`` and ``commands`` plus its timer
    (``segcoord run`` feeds the planner on the elected worker instead: :mod:`streaming.service.planner_feed`);
    ``observe`` gets each agent's batches (metrics, logs, the HTTP API). ``me`` names the worker in the group
    (default: this host)."""
    import faust

    app_id = f"{topics.prefix}coordinator"
    instance_id = me.instance_id(app_id) if me is not None else f"{app_id}.{socket.gethostname()}"
    app = faust.App(
        app_id,
        broker=f"kafka://{bootstrap}",
        broker_credentials=credentials.faust_credentials(bootstrap),
        store="memory://",
        autodiscover=False,
        web_enabled=False,
        topic_disable_leader=True,
        consumer_group_instance_id=instance_id,
        **({"broker_client_id": me.client_id} if me is not None else {}),
        consumer_auto_offset_reset="earliest",
        broker_session_timeout=10.0,
        broker_heartbeat_interval=1.0,
        broker_max_poll_records=BATCH_MAX,
        consumer_metadata_max_age_ms=METADATA_MAX_AGE_MS,
    )
    # delivered in this order within a fetched batch: the lockbox first, so a publish request is decided and its
    # sealed segments_published sent before the timeline and upsert agents fold the rest of the batch (the
    # planner, on the elected worker, waits for that record; docs/service.md, "Publish -> load_segment latency")
    agents: list[tuple[str, tuple[str, ...], Agent]] = [
        ("lockbox", (topics.name(LOCK_REQUESTS),), lockbox),
        ("timeline", (topics.name(SEGMENTS),), timeline),
    ]
    if planner is not None:
        agents.append(("planner", tuple(topics.name(t) for t in (SEGMENTS, CLUSTER, COMMANDS)), planner))
    if upserts is not None:  # upsert tables (docs/upserts.md): versions from visibility, strategies, cleanup
        agents.append(("upserts", tuple(topics.name(t) for t in (CLUSTER, SEGMENTS, TIMELINE)), upserts))
        upserts.owned = lambda: {(tp.topic, tp.partition) for tp in app.consumer.assignment()}  # lost: not its own
        app.timer(plan_every_s, name=f"{app_id}.upserts-timer")(_upsert_timer(upserts))
    stored: dict[str, list[StoredOffsets]] = {}
    # the planner's runs are O(cluster): they go to one thread of their own, so the timeline and lockbox
    # agents keep their batches flowing on the event loop while a plan runs (and runs and ticks stay serial)
    planner_thread = planner_pool or ThreadPoolExecutor(max_workers=1, thread_name_prefix="planner")
    routes = []
    for name, topic_names, agent in agents:
        app.topics.add(app.topic(*topic_names, key_serializer="raw", value_serializer="raw"))
        routes.append(Route(name, frozenset(topic_names), agent, planner_thread if agent is planner else None))
        for topic_name in topic_names:
            stored.setdefault(topic_name, []).append(agent.next_offsets)
    batches = BatchDelivery(routes, heap, observe, lambda positions: _lag(app, positions),
                            exit_code=SHUTDOWN.exit_code)
    delivery.install(app, batches)
    if planner is not None:
        timer = _planner_timer(planner, planner_thread, observe, plan_every_s, lambda: batches.last_size)
        app.timer(plan_every_s, name=f"{app_id}.planner-timer")(timer)
    elif observe is not None:
        async def observe_timer() -> None:
            await observe.tick()

        app.timer(plan_every_s, name=f"{app_id}.observe-timer")(observe_timer)
    if observe is not None:
        observe.attach(app, planner_thread)
    prepare = None
    if timeline.snapshot_policy is not None and snapshot_tail is not None:  # per-partition snapshots (workers.md)
        prepare = _snapshot_adopter(snapshot_tail, timeline)

        async def snapshot_timer() -> None:
            """Between batches: a partition that went quiet still gets its snapshot once its period passed."""
            with stage_trace.held("snapshot-timer"):
                timeline.write_snapshots()

        app.timer(max(1.0, timeline.snapshot_policy.every_ms / 1000 / 4), name=f"{app_id}.snapshot-timer")(
            snapshot_timer)
    _position_from_store(app, stored, prepare)
    _short_fetch_wait(app)
    return app


def _snapshot_adopter(tail: SnapshotTail, timeline: TimelineAgent) -> Callable[[set[tuple[str, int]]],
                                                                                 Awaitable[None]]:
    """Before each seek: for every partition of ``segments`` gained by this assignment, the latest snapshot the
    worker's :class:`SnapshotTail` has read (a lookup in memory: the seek must stay quick), adopted by the
    timeline agent when it is ahead of its store (docs/workers.md)."""
    held: set[int] = set()

    async def adopt_gained(assigned: set[tuple[str, int]]) -> None:
        mine = {p for t, p in assigned if t == timeline.input_topic}
        gained = mine - held
        held.clear()
        held.update(mine)
        if not gained:
            return
        found = tail.latest(sorted(gained))
        for partition in sorted(gained):
            snap = found.get(partition)
            before = timeline.next_offsets().get((timeline.input_topic, partition), 0)
            if snap is not None and timeline.adopt(snap):  # on the event loop, between two batches
                print(f"timeline agent: partition {partition} of {timeline.input_topic} from the snapshot at offset "
                      f"{snap.next_offset} (written by {snap.writer or '?'}: {len(snap.facts)} segments, "
                      f"{len(snap.recent_ids)} recent ids), not from offset {before}", flush=True)
            else:
                print(f"timeline agent: partition {partition} of {timeline.input_topic}: no snapshot ahead of the "
                      f"store; folding from the store's offset {before}", flush=True)

    return adopt_gained


def _planner_timer(planner: PlannerAgent, pool: ThreadPoolExecutor, observe: Observe | None = None,
                   plan_every_s: float = PLAN_EVERY_S,
                   last_fetched: Callable[[], int] = lambda: 0) -> Callable[[], Any]:
    """The planner's timer run; skipped until the agent has applied a batch in this process and while its last
    batch, or the worker's last fetched batch, was full (catching up: a run on a stale view could repeat commands
    the unread log already holds)."""

    async def planner_timer() -> None:
        if observe is not None:
            await observe.tick()
        if planner.batches_since_start == 0 or max(planner.last_batch_size, last_fetched()) >= BATCH_MAX:
            return
        try:
            await delivery.off_loop(pool, planner.tick, int(time.time() * 1000))
            # a balancing run or a sweep goes on in slices, one executor job each: the agent's batches queue between
            until = time.monotonic() + plan_every_s
            while (planner.slicing and time.monotonic() < until
                   and max(planner.last_batch_size, last_fetched()) < BATCH_MAX):
                await delivery.off_loop(pool, planner.next_slice, int(time.time() * 1000))
        except Exception:
            log.exception("planner timer run failed; exiting so a restart resumes from the store")
            logging.shutdown()
            os._exit(SHUTDOWN.exit_code(EXIT_AGENT_FAILED))

    return planner_timer


def _upsert_timer(agent: UpsertAgent) -> Callable[[], Any]:
    """The upsert agent's timer run (cleanup after the grace period, scheduled consolidations), skipped like the
    planner's until a batch was applied in this process and while catching up."""

    async def upsert_timer() -> None:
        if agent.batches_since_start == 0 or agent.last_batch_size >= BATCH_MAX:
            return
        try:
            with stage_trace.held("upsert-timer"):
                agent.tick(int(time.time() * 1000))
        except Exception:
            log.exception("upsert timer run failed; exiting so a restart resumes from the store")
            logging.shutdown()
            os._exit(SHUTDOWN.exit_code(EXIT_AGENT_FAILED))

    return upsert_timer


def _lag(app: Any, positions: dict[tuple[str, int], int]) -> int | None:
    """Records behind the high watermarks of the partitions an agent has read (None when unknown)."""
    from faust.types import TP

    total = 0
    for (topic, partition), position in positions.items():
        try:
            high = app.consumer.highwater(TP(topic, partition))
        except Exception:
            return None
        if high is not None:
            total += max(0, high - position)
    return total


def _say_planner_restored(planner: PlannerAgent, wiped: bool, plan_every_s: float, balancing: bool,
                          incremental: bool) -> None:
    print(f"planner agent: {len(planner.state.servers)} servers, {len(planner.state.used)} used segments, "
          f"{len(planner.state.queue)} commands in flight restored; resuming from "
          f"{_resume_text(planner.next_offsets())}"
          f"{' (store wiped: older format)' if wiped else ''}, planning every {plan_every_s:g}s"
          f"{'' if balancing else ', balancing left to the Spark balancer'}"
          f"{'' if incremental else ', full runs only'}",
          flush=True)


def _resume_text(offsets: dict[tuple[str, int], int]) -> str:
    return ", ".join(f"{t}[{p}]@{o}" for (t, p), o in sorted(offsets.items())) or "the beginning"


SHUTDOWN_GRACE_S = 10.0


def _worker_class(base: Any, on_logging: Callable[[], None] | None = None) -> Any:
    """Faust's worker, with a deadline on the shutdown a SIGTERM/SIGINT starts, and ``on_logging`` called as soon
    as it has configured logging (before the app starts: the outage summary of :mod:`streaming.logs` then covers
    a broker that goes away while the worker starts, instead of one error line per connection attempt).

    Faust's orderly shutdown talks to the broker (consumer group leave, offset commits, producer flushes)
    and, with the broker down, retries for minutes: the service ignored SIGTERM during an outage. After
    ``SHUTDOWN_GRACE_S`` the process exits at once. That is safe for the same reason a SIGKILL is (tested
    20 times over): every agent commits its state, offsets and applied ids in one write batch after its
    output is flushed, so a restart re-reads and re-emits exactly what was not committed."""

    class Worker(base):  # type: ignore[misc, valid-type]
        def on_setup_root_logger(self, logger: logging.Logger, level: int) -> None:
            super().on_setup_root_logger(logger, level)
            if on_logging is not None:
                on_logging()

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
    if _grace_started.is_set():
        return
    _grace_started.set()
    SHUTDOWN.request(signal_name)

    def force() -> None:
        SHUTDOWN.now(f"the orderly shutdown did not end within {SHUTDOWN_GRACE_S:g}s (broker unreachable?)")

    timer = threading.Timer(SHUTDOWN_GRACE_S, force)
    timer.daemon = True
    timer.start()


def run_service(bootstrap: str, topics: Topics, state_dir: Path, *, loglevel: str = "info",
                plan_every_s: float = PLAN_EVERY_S, balancing: bool = True, incremental: bool = True,
                http: tuple[str, int] | None = None, balancer_alive: Callable[[], bool] | None = None,
                server_timeout_ms: int = planner_mod.DEFAULT_SERVER_TIMEOUT_MS,
                applied_window: AppliedWindow | None = None, balancer: Any = None,
                period_ms: int = DEFAULT_PERIOD_MS, worker_id: str | None = None,
                http_advertise: str | None = None, settled_window: SettledWindow | None = DEFAULT_WINDOW,
                plans: bool = True, agents: bool = True) -> int:
    """Run the worker until SIGTERM/SIGINT; the state stores are closed on the way out. With ``http``
    (host, port) it also serves Druid's coordinator API and ``/metrics`` there (:mod:`streaming.http`). With
    ``balancer`` (a :class:`~streaming.balancer.supervisor.BalancerSupervisor`) its health is reported and, when
    it gives up, the planner agent balances again. Several workers (same topics, own state folders) split the
    partitions; the planner runs on the one elected (:mod:`streaming.service.election`). With ``plans`` False
    (``segcoord run --no-planner``) this worker never stands for that election: it runs the timeline, lockbox
    and upsert agents only, and some other worker plans. With ``agents`` False (``segcoord run --planner-only``)
    it is the other half: a process that only stands for the election and plans while it leads, with no Faust
    app and no share of the agents' partitions (:mod:`streaming.service.planner_process`), so the planner has a
    core and a GIL of its own beside the workers that run the agents. Raises
    :class:`~streaming.service.worker_identity.DuplicateWorkerError` when a live worker has this one's identity
    (``worker_id``, else derived from ``state_dir``)."""
    import faust

    from streaming.http_leader import advertised_url
    from streaming.logs import LIBRDKAFKA_LOGGER
    from streaming.service.election import election_topic, ensure_election_topic
    from streaming.service.observe import Observer
    from streaming.service.planner_process import lead
    from streaming.service.worker_identity import identity, refuse_duplicate

    def stop_before_start(signum: int, _frame: Any) -> None:
        """A stop signal before the worker installed its own handlers: unwind (the stores close) and exit 0."""
        raise SystemExit(0)

    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, stop_before_start)

    me = identity(state_dir, worker_id)
    refuse_duplicate(bootstrap, f"{topics.prefix}coordinator", me)
    warning = until_reachable("creating the election topic", lambda: ensure_election_topic(bootstrap, topics))
    if warning:
        print(f"segcoord run: warning: {warning}", flush=True)
    sock = None
    if http is not None:  # bound now, so a taken port is a clear error before the worker starts
        sock = socket.create_server(http)

    with contextlib.ExitStack() as stack:
        if sock is not None:
            stack.callback(sock.close)
        pl_store = stack.enter_context(AgentStateStore(state_dir / planner_mod.STORE_NAME,
                                                       planner_mod.FORMAT_VERSION, applied_window))
        SHUTDOWN.hold(pl_store)
        # librdkafka's log lines through Python logging, so broker outages are summarized (streaming.logs)
        kafka_log = {"logger": logging.getLogger(LIBRDKAFKA_LOGGER)}
        pl_producer = PatientProducer(bootstrap, topics, SHUTDOWN, extra=kafka_log, name="planner")
        pl_producer.on_sent = SHARED_ENVELOPES.produced
        planner = PlannerAgent(pl_store, topics, pl_producer, balancing=balancing, incremental=incremental,
                               server_timeout_ms=server_timeout_ms, period_ms=period_ms,
                               settled_window=settled_window)
        index_builder = ThreadPoolExecutor(1, thread_name_prefix="index-rebuild")  # off the planner's thread
        stack.callback(index_builder.shutdown)
        planner.build_index_rebuilds_on(index_builder)
        if not agents:
            from streaming.service.planner_process import run_planner_only

            stack.callback(sys.stdout.flush)
            stack.callback(pl_producer.flush)
            _say_planner_restored(planner, pl_store.wiped, plan_every_s, balancing, incremental)
            return run_planner_only(bootstrap, topics, planner, pl_producer, stack, me=me, sock=sock,
                                    loglevel=loglevel, plan_every_s=plan_every_s, balancer=balancer,
                                    balancer_alive=balancer_alive, http_advertise=http_advertise,
                                    shutdown=SHUTDOWN, on_signal=_exit_after_grace, kafka_log=kafka_log)
        tl_store = stack.enter_context(AgentStateStore(state_dir / timeline_mod.STORE_NAME,
                                                       timeline_mod.FORMAT_VERSION, applied_window))
        lb_store = stack.enter_context(AgentStateStore(state_dir / lockbox_mod.STORE_NAME,
                                                       lockbox_mod.FORMAT_VERSION, applied_window))
        up_store = stack.enter_context(AgentStateStore(state_dir / upsert_mod.STORE_NAME,
                                                       upsert_mod.FORMAT_VERSION, applied_window))
        for store in (tl_store, lb_store, up_store):
            SHUTDOWN.hold(store)
        tl_producer = PatientProducer(bootstrap, topics, SHUTDOWN, extra=kafka_log, name="timeline")
        # no linger: the lockbox's flush comes after the other agents' work (delivery.py), so its publishes would
        # otherwise wait out the linger before the planner can read them
        lb_producer = PatientProducer(bootstrap, topics, SHUTDOWN, extra={**kafka_log, "linger.ms": 0}, name="lockbox")
        up_producer = PatientProducer(bootstrap, topics, SHUTDOWN, extra=kafka_log, name="upsert")
        # a record read by more than one consumer of this process, or produced here and read back, is decoded
        # once (streaming/service/shared_envelopes.py): segments (worker: timeline + upserts; planner feed),
        # cluster (worker: upserts; planner feed), commands (planner feed), timeline (worker: upserts); the
        # planner feed's reads count only while this worker leads (else nothing would take its share)
        def share_envelopes(leading: bool) -> None:
            planner_reads = 1 if leading else 0
            SHARED_ENVELOPES.configure({topics.name(SEGMENTS): 1 + planner_reads,
                                        topics.name(CLUSTER): 1 + planner_reads,
                                        topics.name(COMMANDS): planner_reads, topics.name(TIMELINE): 1})

        share_envelopes(False)
        for producer in (tl_producer, lb_producer, up_producer):
            producer.on_sent = SHARED_ENVELOPES.produced
        stack.callback(up_producer.flush)
        stack.callback(sys.stdout.flush)
        stack.callback(pl_producer.flush)
        stack.callback(lb_producer.flush)
        stack.callback(tl_producer.flush)
        timeline = TimelineAgent(tl_store, topics, tl_producer)
        snapshot_policy = SnapshotPolicy.from_env()
        snapshot_tail = None
        if snapshot_policy is not None:  # per-partition snapshots on `snapshots` (docs/workers.md)
            # built on their own thread, off the agents' event loop (timeline_agent.py); stopped before the stores
            snapshot_builder = ThreadPoolExecutor(1, thread_name_prefix="timeline-snapshots")
            stack.callback(snapshot_builder.shutdown)
            timeline.enable_snapshots(snapshot_policy, tl_producer, me.worker_id, snapshot_builder)
            snapshot_tail = SnapshotTail(bootstrap, topics, extra=kafka_log).start()
            stack.callback(snapshot_tail.close)
        print(f"timeline agent resumes at {_resume_text(timeline.next_offsets())}"
              f"{' (store wiped: older format)' if tl_store.wiped else ''}", flush=True)
        lockbox = LockboxAgent(lb_store, topics, lb_producer)
        # worded apart from the timeline's " resumes at " line, which tests count
        print(f"lockbox agent: {lockbox.counters_restored} requests restored, resuming from "
              f"{_resume_text(lockbox.next_offsets())}"
              f"{' (store wiped: older format)' if lb_store.wiped else ''}", flush=True)
        _say_planner_restored(planner, pl_store.wiped, plan_every_s, balancing, incremental)
        upserts = UpsertAgent(up_store, topics, up_producer)
        upserts.timer_salt = f":{me.worker_id}"  # its timer runs on every worker: run counters are per store
        print(f"upsert agent: {len(upserts.state.tables)} tables, {len(upserts.state.held)} segments restored; "
              f"resuming from {_resume_text(upserts.next_offsets())}"
              f"{' (store wiped: older format)' if up_store.wiped else ''}", flush=True)
        if balancer is not None:
            balancer_alive = balancer.health
            balancer.on_give_up = lambda: setattr(planner, "balancing", True)
        heap = FrozenHeap()
        heap.start()  # the restored state is frozen out of the collector's scans
        observer = Observer(bootstrap, topics, planner, loglevel, sock, balancer_alive, lambda: timeline.timelines)
        stack.callback(observer.close)
        planner_pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="planner")
        app = build_app(bootstrap, topics, timeline, lockbox, None, plan_every_s, heap, observer,
                        upserts=upserts, me=me, planner_pool=planner_pool, snapshot_tail=snapshot_tail)
        print(f"worker {me.worker_id}: group instance {me.instance_id(app.conf.id)}; the planner runs on the "
              f"worker elected through {election_topic(topics)}"
              f"{'' if plans else ', never this one (--no-planner)'}", flush=True)
        http_url = None if sock is None else advertised_url(*sock.getsockname()[:2], http_advertise)
        election = lead(bootstrap, topics, planner, pl_producer, planner_pool, observer, SHUTDOWN, me=me,
                        plan_every_s=plan_every_s, kafka_log=kafka_log, http_url=http_url, candidate=plans,
                        on_leading=share_envelopes)
        election.start()
        stack.callback(election.close)
        faust_patches.patient_bootstrap(SHUTDOWN)  # the broker can go away between the topics' creation and here
        # Faust's own INFO is start-up chatter: the libraries log at warn or above, the service's lines at loglevel
        faust_level = "warn" if loglevel in ("info", "warn") else loglevel
        worker = _worker_class(faust.Worker, observer.logging_configured)(app, loglevel=faust_level, quiet=True,
                                                                          redirect_stdouts=False)
        if not sys.stdout.isatty():
            worker.spinner = None  # its cursor escape codes end up in log files
        try:
            worker.execute_from_commandline()
        except SystemExit as e:
            return int(e.code or 0)
        finally:
            # closing Faust's event loop reset SIGTERM/SIGINT to the default action: a signal during the unwind
            # below (stores, producer flushes) would end the process with -15 instead of the grace exit
            for sig, name in ((signal.SIGTERM, "SIGTERM"), (signal.SIGINT, "SIGINT")):
                signal.signal(sig, lambda _s, _f, name=name: _exit_after_grace(name))
        return 0
