"""``segcoord run --planner-only``: a process that stands for the planner election and plans, and nothing else.

A worker runs its agents (timeline, lockbox, upserts) on Faust's event loop and, while it leads, the planner on a
thread of its own (:mod:`streaming.service.planner_feed`). Both share the process's one GIL, so at 1000 publish
requests a second the planner's folds and runs and the agents' batches wait for each other: the worker is
CPU-bound on one core while the other is idle (docs/service.md, "Publish -> load_segment latency"). A planner in
a process of its own gets the second core.

This process is the planner half of the worker split in two. It opens only the planner's store
(``<state dir>/planner``), never joins the agents' consumer group (it takes no partition of ``segments`` or
``lock-requests``: workers started with ``--no-planner`` fold those), stands for the election like any worker,
and while it leads, feeds its planner exactly as a worker would (same feed, same fencing, same store, so a crash
and restart equals a full replay as before). It serves the HTTP API and metrics on an asyncio loop of its own;
the API's reads of the planner's state go to the planner's thread as in a worker. There is no timeline here, so
the dashboard's per-interval visibility is empty on this process's API (the workers that fold the timeline have
it). Stop signals unwind as in a worker: the feed stops after its batch in progress, the election is left (so
another candidate is elected at once), the producer is flushed and the store closed; a planner failure exits
with status 70.

:func:`lead` is the election wiring both kinds of process share.
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
import socket
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from events.topics import CLUSTER, COMMANDS, SEGMENTS, Topics
from streaming.service import stage_trace
from streaming.service.election import Election, ElectionLeadership, LeaderDirectory, election_topic
from streaming.service.heap import FrozenHeap
from streaming.service.observe import Observer
from streaming.service.outage import PatientProducer, Shutdown
from streaming.service.planner_agent import PlannerAgent
from streaming.service.planner_feed import PlannerFeed, PlannerThread
from streaming.service.shared_envelopes import SHARED as SHARED_ENVELOPES
from streaming.service.worker_identity import WorkerIdentity


def lead(bootstrap: str, topics: Topics, planner: PlannerAgent, producer: PatientProducer,
         pool: ThreadPoolExecutor, observer: Observer, shutdown: Shutdown, *, me: WorkerIdentity,
         plan_every_s: float, kafka_log: dict[str, Any], http_url: str | None, candidate: bool,
         on_leading: Callable[[bool], None], after_batch: Callable[[], None] | None = None) -> Election:
    """The election of this process and the planner feed it starts and stops (not started yet: the caller calls
    :meth:`Election.start` and closes it on the way out). ``on_leading(True)`` runs before the feed starts and
    ``on_leading(False)`` after it stopped; ``after_batch`` after each batch the feed applied."""
    directory = LeaderDirectory(bootstrap, topics, extra=kafka_log)

    def on_batch(n: int, seconds: float, lag: int | None) -> None:
        observer.batch("planner", n, seconds, lag)
        if after_batch is not None:
            with stage_trace.held("heap:planner"):
                after_batch()

    feed = PlannerFeed(bootstrap, planner, producer, pool, shutdown, worker_id=me.worker_id,
                       plan_every_s=plan_every_s, extra=kafka_log, election_topic=election_topic(topics),
                       latest_claim=lambda: directory.current(max_age_s=0), on_batch=on_batch)

    def elected(epoch: int) -> None:
        on_leading(True)
        feed.elected(epoch)

    def deposed() -> None:
        feed.deposed()
        on_leading(False)

    election = Election(bootstrap, topics, me.worker_id, client_id=me.client_id, on_elected=elected,
                        on_deposed=deposed, extra=kafka_log, http=http_url, candidate=candidate)
    observer.leadership = ElectionLeadership(election, directory, ready=lambda: feed.caught_up)
    return election


def run_planner_only(bootstrap: str, topics: Topics, planner: PlannerAgent, producer: PatientProducer,
                     stack: contextlib.ExitStack, *, me: WorkerIdentity, sock: socket.socket | None,
                     loglevel: str, plan_every_s: float, balancer: Any, balancer_alive: Callable[[], bool] | None,
                     http_advertise: str | None, shutdown: Shutdown,
                     on_signal: Callable[[str], None], kafka_log: dict[str, Any]) -> int:
    """Serve until a stop signal (module docstring); the stores and producer are the caller's (``stack``)."""
    from streaming.http_leader import advertised_url

    def share_envelopes(leading: bool) -> None:  # the feed's reads only: no agent reads here
        reads = 1 if leading else 0
        SHARED_ENVELOPES.configure({topics.name(t): reads for t in (SEGMENTS, CLUSTER, COMMANDS)})

    share_envelopes(False)
    if balancer is not None:
        balancer_alive = balancer.health
        balancer.on_give_up = lambda: setattr(planner, "balancing", True)
    heap = FrozenHeap()
    heap.start()  # the restored state is frozen out of the collector's scans
    observer = Observer(bootstrap, topics, planner, loglevel, sock, balancer_alive, None)
    stack.callback(observer.close)
    pool = PlannerThread()  # the feed runs its batches on its own thread under the pool's lock (planner_feed.py)
    stack.callback(pool.shutdown)
    http_url = None if sock is None else advertised_url(*sock.getsockname()[:2], http_advertise)
    election = lead(bootstrap, topics, planner, producer, pool, observer, shutdown, me=me,
                    plan_every_s=plan_every_s, kafka_log=kafka_log, http_url=http_url, candidate=True,
                    on_leading=share_envelopes, after_batch=heap.after_batch)
    print(f"worker {me.worker_id}: planner only (--planner-only): no agent and no partition of the group; it "
          f"plans while elected through {election_topic(topics)}", flush=True)
    election.start()
    stack.callback(election.close)  # before the store closes: a leader's feed stops at its last whole batch
    try:
        asyncio.run(_serve(observer, pool, plan_every_s, on_signal))
    finally:
        # the closed loop left SIGTERM/SIGINT at their default action: a signal during the unwind (the feed's last
        # batch, the producer's flush, the store) would end the process with -15 instead of the grace exit
        for sig, name in ((signal.SIGTERM, "SIGTERM"), (signal.SIGINT, "SIGINT")):
            signal.signal(sig, lambda _s, _f, name=name: on_signal(name))
    return 0


async def _serve(observer: Observer, pool: ThreadPoolExecutor, tick_every_s: float,
                 on_signal: Callable[[str], None]) -> None:
    """The HTTP API and the observer's timer (metrics, lag, broker probes) until SIGTERM/SIGINT."""
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig, name in ((signal.SIGTERM, "SIGTERM"), (signal.SIGINT, "SIGINT")):
        loop.add_signal_handler(sig, lambda name=name: (on_signal(name), stop.set()))
    await observer.start(pool)
    try:
        while not stop.is_set():
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), tick_every_s)
            if not stop.is_set():
                await observer.tick()
    finally:
        await observer.stop()
