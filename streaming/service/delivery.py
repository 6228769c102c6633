"""Batch delivery: every fetched batch goes whole to the agents of its topics, each record decoded once.

Faust's own path hands a worker's records to agents one message at a time: per
message its drain loop starts two tasks and waits on them
(``Service.wait_first(callback(message), suspend_flow.wait())``), the conductor
takes a lock, builds an ``Event`` per reading agent and puts it on that agent's
queue, and each agent's stream takes it back off (py-spy of ``bench.service``:
those steps cost more of the worker than the timeline fold, and agents saw
batches of ~60 records). Here the batch the consumer fetched (``getmany``: up to
``broker_max_poll_records`` records over the assigned partitions) is turned into
:class:`~streaming.service.intake.InputRecord` objects once and given to every
agent reading one of its topics as ONE ``process`` call: one flush and one
RocksDB write batch per agent per fetched batch. A topic read by two agents
(``segments``: timeline and planner) is delivered as the same record objects,
so each record is decoded once (:meth:`InputRecord.decoded`).

**Invariants.**

- Each agent gets its topics' records in fetch order, every partition in offset
  order, and one batch at a time (the next batch is fetched in the background
  while agents work, but delivered only after every agent finished the last).
- Records of partitions no longer assigned, or fetched under an earlier
  consumer generation (a rebalance happened meanwhile), are dropped: the
  seek after the rebalance (:func:`~streaming.service.app._position_from_store`)
  positions from the stores again, so nothing applied is lost and nothing is
  applied twice.
- An agent that raises ends the process (status 70) before anything else is
  delivered: its store holds its last whole batch and a restart resumes there.
- An agent with ``stage``/``finish`` (:class:`StagedAgent`: the lockbox) is
  staged first (it decides and sends), then the other event-loop agents
  process the same fetched batch, then it finishes (flush, then commit). Its
  store commit still follows the flush that covers its sends, and comes before
  the next batch is delivered (so the next batch's duplicate check sees it);
  only the wait for the broker's acknowledgements overlaps the other agents'
  work. Without it, the lockbox's flush held the event loop for 75 ms (p50) to
  520 ms (p99) per fetched batch at 1000 publish requests/s before the
  timeline agent could start (docs/service.md, "Where publish -> load_segment
  waits").

Agents on a ``pool`` (the planner: its runs are O(cluster)) run on that thread
while the others run on the event loop, and the delivery waits for both.

**GIL slices.** A thread holding the GIL hands it over after the interpreter's
switch interval (5 ms by default). While a long planner run (seconds at 1M
segments) holds the thread, the event loop's agents would wait up to that long
after each of their I/O calls, so :func:`off_loop` shortens the interval to
``SHORT_SLICE_S`` (0.5 ms) while a call on the pool has run longer than
``LONG_CALL_S``, and restores it when the call ends. Short slices all the time
cost the timeline agent a quarter of its throughput (``bench.service``: 9.8k
-> 13.2k events/s on the same machine with 5 ms slices), since every batch's
planner share runs beside it.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import logging
import os
import sys
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, Protocol

from streaming.service import stage_trace
from streaming.service.intake import InputRecord

log = logging.getLogger("segcoord.service")

EXIT_AGENT_FAILED = 70
LONG_CALL_S = 0.05
SHORT_SLICE_S = 0.0005

_short_slice_users = 0
_saved_slice = 0.005
_slice_lock = threading.Lock()  # the event loop and the planner feed's thread both take short slices


@contextlib.contextmanager
def short_slices() -> Iterator[None]:
    """The interpreter's GIL switch interval is ``SHORT_SLICE_S`` inside (nested uses keep it until the last ends)."""
    global _short_slice_users, _saved_slice
    with _slice_lock:
        if _short_slice_users == 0:
            _saved_slice = sys.getswitchinterval()
            sys.setswitchinterval(SHORT_SLICE_S)
        _short_slice_users += 1
    try:
        yield
    finally:
        with _slice_lock:
            _short_slice_users -= 1
            if _short_slice_users == 0:
                sys.setswitchinterval(_saved_slice)


def on_pool(pool: ThreadPoolExecutor, fn: Callable[..., Any], *args: Any) -> Any:
    """``fn(*args)`` on ``pool``, waited for by a thread other than the event loop's (the planner feed); short GIL
    slices once it has run ``LONG_CALL_S``, as :func:`off_loop` does."""
    future = pool.submit(fn, *args)
    try:
        return future.result(timeout=LONG_CALL_S)
    except concurrent.futures.TimeoutError:
        pass
    with short_slices():
        return future.result()


async def off_loop(pool: ThreadPoolExecutor | None, fn: Callable[..., Any], *args: Any) -> Any:
    """``fn(*args)`` on ``pool``, awaited; short GIL slices once it has run ``LONG_CALL_S`` (see the module doc)."""
    future = asyncio.get_running_loop().run_in_executor(pool, fn, *args)
    done, _ = await asyncio.wait((future,), timeout=LONG_CALL_S)
    if done:
        return future.result()
    with short_slices():
        return await future


class BatchAgent(Protocol):
    def process(self, records: Sequence[InputRecord]) -> None: ...


class StagedAgent(Protocol):
    """An agent whose ``process`` splits in two: ``stage`` (decide and send) and ``finish`` (flush, then commit)."""

    def stage(self, records: Sequence[InputRecord]) -> None: ...

    def finish(self) -> None: ...


class BatchObserver(Protocol):
    def batch(self, agent: str, records: int, seconds: float, lag: int | None) -> None: ...


class AfterBatch(Protocol):
    def after_batch(self) -> None: ...


@dataclass
class Route:
    """One agent and the physical topics it reads; ``pool`` runs it off the event loop."""

    name: str
    topics: frozenset[str]
    agent: BatchAgent
    pool: ThreadPoolExecutor | None = None
    positions: dict[tuple[str, int], int] = field(default_factory=dict)  # next offset read, for the lag
    lag_at: float = float("-inf")  # perf_counter of the last lag look-up
    lag: int | None = None  # what it found


def records_of(fetched: dict[Any, Sequence[Any]], keep: Callable[[Any], bool]) -> list[InputRecord]:
    """The InputRecords of a ``getmany`` result (TP -> aiokafka ``ConsumerRecord``s) for the partitions kept."""
    return [InputRecord(r.topic, r.partition, r.offset, r.key, r.value, r.timestamp or 0)
            for tp, rs in fetched.items() if keep(tp) for r in rs]


LAG_EVERY_S = 1.0  # an agent found caught up has its lag looked up again at most this often (see _observed)
REFETCH_AFTER_S = 0.5  # the pause before reading again after a fetch lost to a rebalance (never a busy loop)


def lost_to_rebalance(exc: BaseException) -> bool:
    """Whether a failed fetch was lost to a rebalance the group goes on with, so the worker reads again.

    Two such failures ended workers in the 30-minute soak's run 8 (docs/workers.md), both while three workers'
    first joins rebalanced the group:

    - aiokafka 0.14 hands a SyncGroup error it has no name for (``UnknownError``) to every assignment waiter as
      a plain ``KafkaError("UnknownError()")`` and then rejoins; the waiter was the fetch;
    - ``KeyError`` of a partition in aiokafka's ``fetched_records``: the partition's buffer was dropped (a seek)
      between listing the buffers and reading one; nothing was returned from it, so its position did not move.

    Not lost to a rebalance (the worker exits and a restart resumes from its stores, as before): any subclass of
    ``KafkaError`` (authorization and every error aiokafka names), and the end of aiokafka's coordinator routine
    (``Unexpected error during coordination``), after which nothing would assign partitions again."""
    from aiokafka.errors import KafkaError

    if type(exc) is KafkaError:
        return "Unexpected error during coordination" not in str(exc)
    if type(exc) is KeyError and exc.args:
        return type(exc.args[0]).__name__ in ("TopicPartition", "TP")
    return False


def _fail(name: str, exit_code: Callable[[int], int]) -> None:
    log.exception("%s agent failed; exiting so a restart resumes from the store", name)
    logging.shutdown()
    os._exit(exit_code(EXIT_AGENT_FAILED))


class BatchDelivery:
    """Delivers record batches to the routes; ``lag`` tells an agent's records behind the high watermarks."""

    def __init__(self, routes: Sequence[Route], heap: AfterBatch | None = None,
                 observe: BatchObserver | None = None,
                 lag: Callable[[dict[tuple[str, int], int]], int | None] | None = None,
                 exit_code: Callable[[int], int] = lambda code: code) -> None:
        self.routes = list(routes)
        self.heap = heap
        self.observe = observe
        self.lag = lag
        self.last_size = 0  # records in the last batch delivered (all topics)
        self.exit_code = exit_code  # the status an agent failure exits with (0 once a stop was asked for)

    async def deliver(self, records: Sequence[InputRecord]) -> None:
        """Every route's share of ``records`` through its agent, threaded routes first (they overlap the rest)."""
        self.last_size = len(records)
        shares = [(route, [r for r in records if r.topic in route.topics]) for route in self.routes]
        shares = [(route, share) for route, share in shares if share]
        if not shares:
            return
        pending = [(route, share, time.perf_counter(),
                    asyncio.ensure_future(off_loop(route.pool, route.agent.process, share)))
                   for route, share in shares if route.pool is not None]
        staged: list[tuple[Route, Sequence[InputRecord], float, float]] = []
        for route, share in shares:
            if route.pool is None:
                began = time.perf_counter()
                cpu = time.thread_time() if stage_trace.enabled() else 0.0
                if cpu:
                    stage_trace.records(f"begin:{route.name}", share)
                stages = getattr(route.agent, "stage", None)
                try:
                    if stages is not None:  # its flush and commit come after the other agents' work (module doc)
                        stages(share)
                        staged.append((route, share, began, cpu and time.thread_time() - cpu))
                        if cpu:
                            stage_trace.records(f"staged:{route.name}", share)
                        continue
                    route.agent.process(share)
                except Exception:
                    _fail(route.name, self.exit_code)
                if cpu:
                    stage_trace.records(f"done:{route.name}", share)
                    stage_trace.mark(f"cpu:{route.name}", n=int((time.thread_time() - cpu) * 1e6))
                self._observed(route, share, began)
        for route, staged_share, began, used in staged:
            cpu = time.thread_time() if stage_trace.enabled() else 0.0
            try:
                route.agent.finish()  # type: ignore[attr-defined]
            except Exception:
                _fail(route.name, self.exit_code)
            if cpu:
                stage_trace.records(f"done:{route.name}", staged_share)
                stage_trace.mark(f"cpu:{route.name}", n=int((used + time.thread_time() - cpu) * 1e6))
            self._observed(route, staged_share, began)
        for route, share, began, future in pending:
            try:
                await future
            except Exception:
                _fail(route.name, self.exit_code)
            self._observed(route, share, began)
        if self.heap is not None:
            with stage_trace.held("heap"):
                self.heap.after_batch()

    def _observed(self, route: Route, share: Sequence[InputRecord], began: float) -> None:
        """The batch's records and time to the observer, and the route's lag: a look-up of every partition's high
        watermark through Faust's consumer thread, so it is made after every batch only while the route was
        behind at the last look-up (catching up: big batches), and at most every ``LAG_EVERY_S`` once it was
        found caught up (tiny batches, where it cost 4% of the worker's Python time at 200 publishes/s;
        docs/service.md, "Fixed cost per fetched batch"). The observer keeps the last lag in between (None:
        not looked up), so a route that caught up never stays reported behind."""
        if self.observe is None:
            return
        positions = route.positions
        for r in share:
            positions[(r.topic, r.partition)] = r.offset + 1
        now = time.perf_counter()
        lag = None
        if self.lag is not None and (route.lag != 0 or now - route.lag_at >= LAG_EVERY_S):
            route.lag_at = now
            lag = route.lag = self.lag(positions)
        self.observe.batch(route.name, len(share), now - began, lag)


def install(app: Any, delivery: BatchDelivery) -> None:
    """Make this app's consumer deliver fetched batches through ``delivery`` instead of message by message.

    Replaces ``Consumer._drain_messages`` (the loop Faust's ``Fetcher`` service runs) on this app's consumer.
    The rest of Faust's consumer is kept: group membership, assignment, flow control around rebalances, the
    background fetch, and the seek after an assignment (which :func:`_position_from_store` points at the
    stores). No message passes Faust's acking path, so the group's Kafka offsets (which ``segcoord`` write
    confirmations and ``watch`` read; the stores decide where the worker resumes) are committed here: every
    ``broker_commit_interval`` the next offset of each partition whose batch every agent applied."""
    consumer = app.consumer
    applied: dict[Any, int] = {}  # TP -> next offset, applied by every agent, not yet committed
    monitor = app.monitor

    async def commit_applied() -> None:
        while True:
            await asyncio.sleep(app.conf.broker_commit_interval)
            if not applied:
                continue
            offsets = dict(applied)
            applied.clear()
            try:
                await consumer._commit_offsets(offsets)
            except Exception as e:  # the next round commits later offsets; the stores hold what counts
                log.warning("committing the group's offsets failed: %r", e)

    async def drain_batches(fetcher: Any) -> None:
        committer = asyncio.ensure_future(commit_applied())
        try:
            while not (consumer._stopped.is_set() or fetcher._stopped.is_set()):
                generation = app.consumer_generation_id
                if stage_trace.enabled():
                    stage_trace.mark("fetch-wait")
                try:
                    fetched, _active = await consumer._wait_next_records(1.0)
                except Exception as e:
                    if not lost_to_rebalance(e):
                        raise
                    log.warning("a fetch was lost to a rebalance (read again after it): %r", e)
                    await asyncio.sleep(REFETCH_AFTER_S)
                    continue
                await asyncio.sleep(0)  # timers and the observer's ticks run between batches
                if not fetched or consumer.should_stop:
                    continue
                if not consumer.flow_active or generation != app.consumer_generation_id:
                    # a rebalance came between the fetch and now: drop the batch and read again from the stores
                    try:
                        await consumer.perform_seek()
                    except Exception as e:
                        log.warning("seek to the stored offsets after a rebalance failed (the next one repeats it): "
                                    "%r", e)
                    continue
                assigned = consumer.assignment()
                batch = records_of(fetched, assigned.__contains__)
                if stage_trace.enabled():
                    stage_trace.records("fetched", batch)
                await delivery.deliver(batch)
                now = time.monotonic()
                for tp, rs in fetched.items():
                    if rs and tp in assigned:
                        applied[tp] = rs[-1].offset + 1
                        monitor.stream_inbound_time[tp] = now  # Faust's slow-stream check reads it
        finally:
            committer.cancel()

    consumer._drain_messages = drain_batches
