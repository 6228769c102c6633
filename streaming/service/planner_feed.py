"""The planner's input on the elected worker: every partition of ``segments``, ``cluster`` and ``commands``.

The planner needs the whole cluster, so it is not fed by the worker's consumer
group (which splits partitions between workers) but by a consumer of its own
with a manual assignment of every partition of its three topics, positioned at
the planner store's offsets (the beginning of partitions never applied). It
runs only while this worker leads (:mod:`streaming.service.election`):
:meth:`PlannerFeed.elected` starts it, :meth:`PlannerFeed.deposed` stops it and
returns once the batch in progress is committed (or was never begun), so a
deposed worker emits nothing more.

**Catching up without planning.** A new leader's store may be behind the log
(it led before, or never). When it is more than :data:`QUIET_CATCH_UP` records
behind the high watermarks it saw when elected, it first folds up to them with
planning off (:attr:`PlannerAgent.catching_up`), then runs a full plan.
Planning on a stale view would repeat decisions the unread part of ``commands``
already holds; after the catch-up its queues hold them, and the decisions it
repeats anyway get the same content-derived ids as before, which consumers
drop. A shorter backlog (a first start, a restart) is planned batch by batch as
it is read, as a single worker always did, so a publish's loads still name the
publish as their cause. The liveness unannounces that folding a departure decides
are deferred to the end of the catch-up too (:meth:`PlannerAgent.finish_catch_up`):
the predecessor sent most of them long ago, and a copy sent again after the
consumers' applied-id window let the original go would be applied again.

**A deposed leader stops.** A leader cut off from the group (paused, partitioned) learns it was deposed only
when it hears from the group again, and may meanwhile decide on a stale view. Three things make that
harmless and short (docs/workers.md, "Fencing"):

- every command carries the leader's epoch (``plannerEpoch``), and whoever folds ``commands`` (historicals,
  this planner, replay, audit) voids a command whose server was already commanded in a later epoch
  (:mod:`coordinator.placement.fence`): the new leader's first command to a server ends the old one's say;
- the planner decides nothing once its own fold has read a later epoch (:attr:`PlannerAgent.superseded`),
  and this feed then stops;
- before it decides, when more than :data:`LEASE_S` passed since it last made sure, the feed checks that no
  later claim of another worker was written to the election topic (its end offset is still the claim's
  offset + 1, or the latest claim is this worker's); a
  process paused longer than the session timeout finds the successor's claim there and stops at once,
  without waiting for the group to tell it.

Batches and runs go to the planner's one thread (``pool``), as before: the HTTP
API reads the planner's state on that thread too (with short GIL slices while a
call runs long, :func:`~streaming.service.delivery.on_pool`, so the worker's
event-loop agents keep their batches flowing). The timer run (which also decides
``server_lost``, :meth:`PlannerAgent.decide_lost`) comes every ``plan_every_s``;
a balancing run or a sweep (the periodic full run) it starts goes on in slices, one between two fetched
batches (:meth:`PlannerAgent.next_slice`), and pauses while the feed reads full
batches (catching up), so a publish never waits for a whole balancing run or periodic full run. A planner
failure ends the process with status 70 (0 when a stop was asked for), as any agent failure does.

**No hand-over per batch with a** :class:`PlannerThread`. Handing each batch to the pool's thread and waiting for
it costs two thread wake-ups per batch (about 20 us of CPU and, on a busy machine, a wait for a core each time: at
200 publish requests/s the planner process feeds 500 batches a second of about 2 records). Given a
:class:`PlannerThread` (``segcoord run --planner-only``), the feed runs its calls on its own thread holding the
pool's lock, which every job of the pool (the API's reads, the observer's recounts) holds too: the planner's state
is still touched by one thread at a time, and a batch never sees a read half-way nor a read a batch half-way. A job
waiting for the lock goes first: while one is queued, the feed hands its next call to the pool behind it, as
before. (A worker's pool is a plain one: its calls keep going through :func:`on_pool`, whose short GIL slices the
event loop's agents need while a long run holds the thread.)
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any, ParamSpec, TypeVar

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, TopicPartition

from coordinator.placement import fence
from streaming import credentials
from streaming.service import stage_trace
from streaming.service.delivery import on_pool
from streaming.service.election import HEADER, SESSION_TIMEOUT_MS, Claim, say
from streaming.service.heap import release_free_memory
from streaming.service.intake import InputRecord
from streaming.service.outage import PatientProducer, Shutdown
from streaming.service.planner_agent import PlannerAgent

log = logging.getLogger("segcoord.service")

BATCH_MAX = 1000
# How long the broker holds an idle fetch. A fetch returns at the first record whatever this is (measured: produce ->
# consume 3-5 ms at 10 ms and at 500 ms alike), so at low rates it only sets how often an idle feed asks: at 10 ms
# librdkafka sends 100 fetches a second, 5.5-10.8 ms of the worker's CPU per second idle against 1.6-1.7 at 500 ms
# (16 partitions). Under load it sets more: a partition left out of a fetch because its local queue is full
# (PREFETCH) waits up to this long once it drains, with the rest of that queue still to fold. At 1000 publish
# requests/s (bench.service --deployment split, 10k segments, runs within one hour at load 2-9): 100 ms gave a p99 of
# 1.28-1.74 s (4 runs), 5 ms 302-575 ms (6), 10 ms 267-282 ms (2): the 1% of a core idle buys a fifth of the p99.
FETCH_WAIT_MS = 10
LEASE_S = SESSION_TIMEOUT_MS / 2000  # leadership is checked again before deciding when older than this
POLL_S = 0.05  # the longest the feed waits for input before it looks at its timer
QUIET_CATCH_UP = BATCH_MAX
# How often at most the feed commits the offsets it applied to Kafka while batches keep coming (an idle poll commits
# at once): informational (the store's offsets decide where the planner resumes), and one OffsetCommit request per
# batch cost the worker's librdkafka thread and the broker a request for every two or three records at low rates.
COMMIT_EVERY_S = 0.5
# What librdkafka fetches ahead of the planner: a few batches, not the backlog. Its defaults (100,000 messages per
# partition, 64 MB in all) let a newly elected worker's consumer hold the whole backlog it is behind (tens of
# thousands of records, read in seconds, folded at a few hundred a second), and the process keeps that high-water
# mark as resident memory after the catch-up (docs/workers.md, "The planner's memory").
PREFETCH = {"queued.min.messages": 2 * BATCH_MAX, "queued.max.messages.kbytes": 4096}
# How long the feed waits before it asks the broker again a question it could not answer (the topics' partitions,
# their ends, the election topic's end). With the broker down, librdkafka fails these at once (all broker
# connections down), and confluent-kafka 2.16 keeps every KafkaException it raises alive (about 300 bytes of
# resident memory each, most of it outside Python's allocator): asked in a loop without a pause, a leader asked
# about 100,000 times a second and grew by 180-275 MB per broker kill in the soak (docs/workers.md). With the
# pause, an outage costs 2 asks a second.
RETRY_S = 0.5
EXIT_AGENT_FAILED = 70
P = ParamSpec("P")
T = TypeVar("T")


class PlannerThread(ThreadPoolExecutor):
    """The planner's one thread, whose every job holds :attr:`lock`; the feed runs its own calls holding it too,
    on its own thread, when no job is waiting (module docstring, "No hand-over per batch")."""

    def __init__(self) -> None:
        super().__init__(max_workers=1, thread_name_prefix="planner")
        self.lock = threading.Lock()  # held by whoever touches the planner's state
        self._waiting = 0  # jobs submitted that do not hold the lock yet
        self._count = threading.Lock()

    def submit(self, fn: Callable[P, T], /, *args: P.args, **kwargs: P.kwargs) -> Future[T]:
        with self._count:
            self._waiting += 1

        def locked() -> T:
            with self.lock:
                with self._count:
                    self._waiting -= 1
                with stage_trace.held(getattr(fn, "__qualname__", "job")):
                    return fn(*args, **kwargs)

        return super().submit(locked)

    @property
    def waiting(self) -> bool:
        """Whether a job is queued or waits for the lock (the feed's next call then goes behind it)."""
        return self._waiting > 0


def _call(pool: ThreadPoolExecutor, fn: Callable[..., T], *args: Any) -> T:
    """``fn(*args)`` where the planner's state is touched: on this thread under a :class:`PlannerThread`'s lock
    when no job waits for it, else on the pool (:func:`on_pool`)."""
    if isinstance(pool, PlannerThread) and not pool.waiting:
        with pool.lock:
            return fn(*args)
    result: T = on_pool(pool, fn, *args)
    return result


def _traced_process(planner: PlannerAgent, records: list[InputRecord]) -> None:
    """``planner.process(records)``, its thread's CPU time traced (:mod:`streaming.service.stage_trace`)."""
    cpu = time.thread_time()
    stage_trace.records("begin:planner", records)
    planner.process(records)
    stage_trace.records("done:planner", records)
    stage_trace.mark("cpu:planner", n=int((time.thread_time() - cpu) * 1e6))


class PlannerFeed:
    """Feeds one :class:`PlannerAgent` while this worker leads (module docstring)."""

    def __init__(self, bootstrap: str, planner: PlannerAgent, producer: PatientProducer, pool: ThreadPoolExecutor,
                 shutdown: Shutdown, *, worker_id: str, plan_every_s: float,
                 on_batch: Callable[[int, float, int | None], None] | None = None,
                 extra: dict[str, Any] | None = None, election_topic: str | None = None,
                 latest_claim: Callable[[], Claim | None] | None = None) -> None:
        self.bootstrap = bootstrap
        self.planner = planner
        self.producer = producer
        self.pool = pool
        self.shutdown = shutdown
        self.worker_id = worker_id
        self.plan_every_s = plan_every_s
        self.on_batch = on_batch
        self.extra = dict(extra or {})
        self.caught_up = False
        self.election_topic = election_topic  # None: leadership is never re-checked against the log (tests)
        self.latest_claim = latest_claim  # the election topic's latest claim (a later record may be our own)
        self.epoch: int | None = None
        self._confirmed = 0.0  # monotonic time leadership was last confirmed
        self._own_end = 0  # the election topic's end offset as far as it holds claims of this worker only
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    # -- leadership ------------------------------------------------------------------
    def elected(self, epoch: int) -> None:
        self.deposed()
        self.producer.headers = [(HEADER, f"{self.worker_id}@{epoch}".encode())]
        # timer-run mark ids count runs per store: salted by the epoch, two leaders never share one
        self.planner.timer_salt = f"{epoch}:"
        self.planner.epoch = self.epoch = epoch
        self._confirmed = time.monotonic()
        self._own_end = epoch + 1
        self._stop = threading.Event()
        self.caught_up = False
        self._thread = threading.Thread(target=self._guarded, args=(self._stop,), name="planner-feed", daemon=True)
        self._thread.start()

    def deposed(self) -> None:
        """Stop feeding; returns when the batch or run in progress has committed."""
        self._stop.set()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join()
        self._thread = None

    # -- the feed ----------------------------------------------------------------------
    def _guarded(self, stop: threading.Event) -> None:
        try:
            self._feed(stop)
        except Exception:
            log.exception("planner agent failed; exiting so a restart resumes from the store")
            logging.shutdown()
            os._exit(self.shutdown.exit_code(EXIT_AGENT_FAILED))

    def _feed(self, stop: threading.Event) -> None:
        planner = self.planner
        consumer = Consumer({
            **credentials.client_config(self.bootstrap),
            "group.id": f"{planner.topics.prefix}coordinator.planner-feed",  # never joined: manual assignment
            "enable.auto.commit": False,
            "enable.auto.offset.store": False,
            "fetch.wait.max.ms": FETCH_WAIT_MS,
            **PREFETCH,
            **self.extra,
        })
        uncommitted: set[tuple[str, int]] = set()  # partitions applied past what was last committed to Kafka
        at: dict[tuple[str, int], int] = {}
        try:
            stored = planner.next_offsets()
            assignment: list[TopicPartition] = []
            while not assignment and not stop.is_set():
                assignment = self._partitions(consumer, stored)
                if not assignment:
                    stop.wait(RETRY_S)
            if stop.is_set():
                return
            consumer.assign(assignment)
            ends = self._ends(consumer, assignment, stop)
            at = {(tp.topic, tp.partition): stored.get((tp.topic, tp.partition), 0) for tp in assignment}
            behind = sum(max(0, end - at[tp]) for tp, end in ends.items())
            planner.catching_up = behind > QUIET_CATCH_UP
            say(f"planner: {behind} record(s) behind the log's end"
                f"{': folded before it plans' if planner.catching_up else ''}")
            next_tick = time.monotonic() + self.plan_every_s
            committed_at = 0.0
            while not stop.is_set():
                leads = self._confirm(consumer, stop)
                if leads is False or planner.superseded:
                    self._step_down(planner)
                    return
                if leads is None:
                    continue  # not confirmed (broker unreachable): decide nothing until it is
                msgs = self._fetch(consumer)
                records = [InputRecord(m.topic(), m.partition(), m.offset(), m.key(), m.value(),
                                       max(0, m.timestamp()[1])) for m in msgs if m.error() is None]
                for m in msgs:
                    if m.error() is not None and m.error().code() != KafkaError._PARTITION_EOF:
                        log.debug("planner feed: %s", m.error())
                if records:
                    began = time.perf_counter()
                    if stage_trace.enabled():
                        stage_trace.records("feed-fetched", records)
                        _call(self.pool, _traced_process, planner, records)
                        stage_trace.records("feed-done", records)
                    else:
                        _call(self.pool, planner.process, records)
                    for r in records:
                        at[(r.topic, r.partition)] = r.offset + 1
                    if self.on_batch is not None:
                        self.on_batch(len(records), time.perf_counter() - began, self._lag(consumer, at))
                    uncommitted.update((r.topic, r.partition) for r in records)
                if uncommitted and (not records or time.monotonic() - committed_at >= COMMIT_EVERY_S):
                    self._commit(consumer, at, uncommitted)
                    uncommitted, committed_at = set(), time.monotonic()
                if not self.caught_up and all(at[tp] >= end for tp, end in ends.items()):
                    self.caught_up = True
                    _call(self.pool, planner.finish_catch_up)  # what it deferred and the log did not settle
                    release_free_memory()  # what folding the backlog freed, kept at its high-water mark by malloc
                    say(f"planner: caught up; planning every {self.plan_every_s:g}s")
                    next_tick = time.monotonic()
                if not self.caught_up or len(records) >= BATCH_MAX:
                    continue  # behind the log: fold first, decide later
                if time.monotonic() >= next_tick:
                    next_tick = time.monotonic() + self.plan_every_s
                    with stage_trace.held("tick"):
                        _call(self.pool, planner.tick, int(time.time() * 1000))
                elif planner.slicing:  # one slice (of a sweep or a balancing run) between two batches
                    with stage_trace.held("slice"):
                        _call(self.pool, planner.next_slice, int(time.time() * 1000))
        finally:
            if planner.catching_up:
                planner.abandon_catch_up()
            if uncommitted:  # what the last batches applied (sent before the consumer closes)
                self._commit(consumer, at, uncommitted)
            try:
                consumer.close()
            except Exception as e:
                log.debug("planner feed: close: %s", e)

    def _confirm(self, consumer: Consumer, stop: threading.Event) -> bool | None:
        """:meth:`_still_leads`, after which an unanswered check waits :data:`RETRY_S` (or until stopped)."""
        leads = self._still_leads(consumer)
        if leads is None:
            stop.wait(RETRY_S)
        return leads

    def _still_leads(self, consumer: Consumer) -> bool | None:
        """Whether no later claim is on the election topic (checked when the last check is older than
        :data:`LEASE_S`); None when the broker did not answer (within a second)."""
        if self.election_topic is None or self.epoch is None or time.monotonic() - self._confirmed < LEASE_S:
            return True
        try:
            high = consumer.get_watermark_offsets(TopicPartition(self.election_topic, 0), timeout=1, cached=False)[1]
        except Exception as e:
            log.debug("planner feed: election watermark: %s", e)
            return None
        if high is None or high < 0:
            return None
        if high > self._own_end:
            if self.latest_claim is None:
                return False
            claim = self.latest_claim()
            if claim is None or claim.epoch < high - 1:
                return None  # the record at the end could not be read yet: ask again
            if claim.worker != self.worker_id:  # another worker claimed since: deposed
                return False
            self._own_end = high  # a second record of this worker's own claim: still ours
        self._confirmed = time.monotonic()
        return True

    def _step_down(self, planner: PlannerAgent) -> None:
        latest = fence.highest(planner.state.epochs)
        why = (f"its fold read a command of epoch {latest}" if planner.superseded
               else "a later claim is on the election topic")
        say(f"planner: epoch {self.epoch} was superseded ({why}); this worker ({self.worker_id}) stops planning")

    @staticmethod
    def _fetch(consumer: Consumer) -> list[Any]:
        """What the consumer holds, up to ``BATCH_MAX`` messages: one poll of at most ``POLL_S`` that returns at the
        first message, then what is already buffered, without waiting (``consume(n, t)`` alone waits until ``n``
        messages arrived or ``t`` passed: every publish read while the feed keeps up waited the whole ``t``)."""
        first = consumer.poll(POLL_S)
        return [] if first is None else [first, *consumer.consume(BATCH_MAX - 1, 0)]

    @staticmethod
    def _lag(consumer: Consumer, at: dict[tuple[str, int], int]) -> int | None:
        """Records behind the high watermarks last fetched (None when unknown)."""
        total = 0
        for (topic, partition), position in at.items():
            try:
                high = consumer.get_watermark_offsets(TopicPartition(topic, partition), cached=True)[1]
            except Exception:
                return None
            if high is not None and high >= 0:
                total += max(0, high - position)
        return total

    @staticmethod
    def _commit(consumer: Consumer, at: dict[tuple[str, int], int], touched: set[tuple[str, int]]) -> None:
        """Tell Kafka how far the planner applied (never read back: the store's offsets count), so an operator's
        write (``segcoord rules set`` ...) can see that the coordinator read it (group ``<group>.planner-feed``):
        the partitions ``touched`` since the last commit, at most every :data:`COMMIT_EVERY_S` while batches keep
        coming and at the first poll that brings none."""
        try:
            consumer.commit(offsets=[TopicPartition(t, p, at[(t, p)]) for t, p in sorted(touched)],
                            asynchronous=True)
        except Exception as e:
            log.debug("planner feed: commit: %s", e)

    def _partitions(self, consumer: Consumer, stored: dict[tuple[str, int], int]) -> list[TopicPartition]:
        try:
            meta = consumer.list_topics(timeout=5)
        except Exception as e:
            log.debug("planner feed: metadata: %s", e)
            return []
        out = []
        for topic in self.planner.input_topics:
            found = meta.topics.get(topic)
            if found is None or found.error is not None or not found.partitions:
                return []
            for p in sorted(found.partitions):
                out.append(TopicPartition(topic, p, stored.get((topic, p), OFFSET_BEGINNING)))
        return out

    @staticmethod
    def _ends(consumer: Consumer, assignment: list[TopicPartition],
              stop: threading.Event) -> dict[tuple[str, int], int]:
        ends: dict[tuple[str, int], int] = {}
        for tp in assignment:
            while (tp.topic, tp.partition) not in ends and not stop.is_set():
                try:
                    ends[(tp.topic, tp.partition)] = consumer.get_watermark_offsets(tp, timeout=5)[1]
                except Exception as e:
                    log.debug("planner feed: watermarks: %s", e)
                    stop.wait(RETRY_S)
        return ends
