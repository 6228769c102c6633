"""Broker outages are waited out, not died of; a stop signal ends the worker at its last whole batch.

**Waiting.** :class:`PatientProducer` is the agents' producer. Its messages never
time out in librdkafka (``message.timeout.ms=0``: the client keeps retrying the
same queued bytes, under the same idempotent sequence numbers, until the broker
takes them), and its :meth:`~PatientProducer.flush` waits for as long as the
broker is away instead of raising after 30 s. So an agent blocked on a flush
during an outage simply resumes when the broker returns: the batch commits as
if nothing happened, and the output ids are those it would have had (they are
derived from the input positions and contents, never from time). A delivery
that fails for good (a permanent error: topic deleted, message too large,
authorization) still raises :class:`~streaming.producer.ProduceError`, and the
worker exits non-zero without committing the batch; a restart re-emits it under
the same ids.

While waiting it says so, with back-off: ``flush waiting for the broker: N
message(s) queued for S s`` once after ``timeout`` (the caller's, 30 s by
default), then after 2x, 4x ... that delay, capped at :data:`REMIND_MAX_S`.

**Starting.** A worker started while the broker is away waits for it: :func:`until_reachable` around the
topic creation, and :func:`until_bootstrapped` around the first connection of each of Faust's aiokafka clients
(:func:`streaming.service.faust_patches.patient_bootstrap`), since the broker can go away between the two.
Each retries with back-off (1 s doubling to :data:`BACKOFF_MAX_S`) and prints one line per attempt.

**Stopping.** :class:`Shutdown` holds the worker's state stores. A stop signal
calls :meth:`Shutdown.request`; a flush blocked on an outage then ends the
process at once (:meth:`Shutdown.now`): every store is closed (a commit in
progress finishes first, see :meth:`~streaming.service.state.AgentStateStore.close`;
no later one starts), so each store holds its last whole batch, and the process
exits 0. Without a blocked flush the orderly shutdown runs, under the worker's
grace deadline, which also ends with :meth:`Shutdown.now`. Nothing else is
needed for correctness: a batch whose flush did not complete was never
committed, so the restart re-reads and re-emits it under the same ids.
"""

from __future__ import annotations

import contextlib
import logging
import os
import sys
import threading
import time
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, NoReturn, Protocol, TypeVar

from confluent_kafka import KafkaException

from events.topics import Topics
from streaming.producer import EventProducer, ProduceError
from streaming.service import stage_trace

log = logging.getLogger("segcoord.service")

REMIND_MAX_S = 300.0
SLICE_S = 0.5
BACKOFF_MAX_S = 30.0
T = TypeVar("T")


def until_reachable(what: str, call: Callable[[], T], *, sleep: Callable[[float], None] = time.sleep) -> T:
    """``call()``, retried with back-off (1 s doubling to :data:`BACKOFF_MAX_S`) while it fails with a Kafka
    error: a worker started during an outage waits for the broker instead of exiting. A stop signal ends the
    wait (the default handlers: nothing is open yet)."""
    from confluent_kafka import KafkaException

    delay, began = 1.0, time.monotonic()
    while True:
        try:
            return call()
        except (KafkaException, TimeoutError) as e:  # an admin call's future times out with the broker away
            why = str(e) or type(e).__name__
            print(f"segcoord run: {what}: broker unreachable for {time.monotonic() - began:.0f}s ({why}); "
                  f"retrying in {delay:.0f}s", flush=True)
        sleep(delay)
        delay = min(delay * 2, BACKOFF_MAX_S)


async def until_bootstrapped(what: str, call: Callable[[], Awaitable[T]], shutdown: Shutdown, *,
                             first_delay_s: float = 1.0, max_delay_s: float = BACKOFF_MAX_S) -> T:
    """``await call()``, retried with back-off (``first_delay_s`` doubling to ``max_delay_s``) while it fails with
    aiokafka's ``KafkaConnectionError``: a Faust client (producer or consumer) whose first connection finds the
    broker away waits for it instead of ending the worker. One line per attempt says so. A stop asked for while it
    waits ends the process at once with 0 (:meth:`Shutdown.now`: nothing was consumed yet, the stores are at
    their last whole batch)."""
    import asyncio

    from aiokafka.errors import KafkaConnectionError

    delay, began, waited = first_delay_s, time.monotonic(), False
    while True:
        if shutdown.requested:
            shutdown.now(f"{what} was waiting for the broker")
        try:
            result = await call()
        except KafkaConnectionError as e:
            waited = True
            print(f"segcoord run: {what}: broker unreachable for {time.monotonic() - began:.0f}s ({e}); "
                  f"retrying in {delay:g}s", flush=True)
        else:
            if waited:
                print(f"segcoord run: {what}: broker reached after {time.monotonic() - began:.0f}s", flush=True)
            return result
        until = time.monotonic() + delay
        while (left := until - time.monotonic()) > 0:
            if shutdown.requested:
                shutdown.now(f"{what} was waiting for the broker")
            await asyncio.sleep(min(SLICE_S, left))
        delay = min(delay * 2, max_delay_s)


class Closable(Protocol):
    def close(self) -> None: ...


class Shutdown:
    """The stop switch of one worker process: what to close, and whether a stop was asked for."""

    def __init__(self, exit: Callable[[int], object] = os._exit) -> None:
        self._exit = exit  # tests pass one that raises instead of ending the process
        self._stores: list[Closable] = []
        self._requested = threading.Event()
        self._lock = threading.Lock()
        self.signal_name = ""

    def hold(self, store: Closable) -> None:
        """Close ``store`` on :meth:`now`."""
        self._stores.append(store)

    @property
    def requested(self) -> bool:
        return self._requested.is_set()

    def request(self, signal_name: str) -> None:
        """A stop signal arrived (later calls change nothing)."""
        if not self._requested.is_set():
            self.signal_name = signal_name
            self._requested.set()

    def exit_code(self, failed: int) -> int:
        """The code to exit with after an agent failure: 0 once a stop was asked for (a store closed under a
        blocked agent makes it fail on the way out), else ``failed``."""
        return 0 if self.requested else failed

    def now(self, why: str) -> NoReturn:
        """Close every store (each at its last whole batch) and exit 0; never returns."""
        with self._lock:
            print(f"segcoord run: {self.signal_name or 'stop'}: {why}; the state stores are closed at their last "
                  f"whole batch", flush=True)
            for store in self._stores:
                with contextlib.suppress(Exception):
                    store.close()
            logging.shutdown()
            with contextlib.suppress(Exception):
                sys.stdout.flush()
            self._exit(0)
        raise SystemExit(0)  # only reached with a test's exit


class PatientProducer(EventProducer):
    """An :class:`EventProducer` that waits out outages (module docstring); ``flush`` raises only on a
    permanent delivery error, and ends the process when a stop is asked for while it waits."""

    def __init__(self, bootstrap: str, topics: Topics, shutdown: Shutdown, *,
                 extra: Mapping[str, Any] | None = None, name: str = "agent") -> None:
        super().__init__(bootstrap, topics, extra={"message.timeout.ms": 0, **(extra or {})})
        self.shutdown = shutdown
        self.name = name
        self.waits = 0  # flushes that outlasted their timeout (an outage)

    def flush(self, timeout: float = 30.0) -> None:
        """:meth:`EventProducer.flush`, waiting out outages. With nothing queued, in flight or awaiting its delivery
        report (``len`` of the client is 0), the client's flush is not called: it would only wake every broker
        thread and release the GIL, once per fetched batch for an agent that sent nothing (the upsert agent on
        most batches); failures reported earlier are raised as before."""
        began = time.monotonic()
        traced = stage_trace.enabled()
        queued = len(self._producer)
        if traced:
            stage_trace.mark(f"flush-begin:{self.name}", n=queued)
        try:
            if queued:
                self._wait_out(began, timeout)
            if traced:
                stage_trace.mark(f"flush-done:{self.name}")
        except (KafkaException, SystemError) as e:  # a fatal error (e.g. the idempotent producer not authorized)
            cause = e.__cause__ or e.__context__ or e
            raise ProduceError(f"delivery failed: {cause}; " + "; ".join(self._errors[:5])) from e
        if self._errors:
            errors, self._errors = self._errors, []
            raise ProduceError("delivery failed: " + "; ".join(errors[:5]))

    def _wait_out(self, began: float, timeout: float) -> None:
        """Flush until nothing is queued (or a stop ends the process); reminds with back-off while it waits."""
        remind_after = max(timeout, SLICE_S)
        waited = False
        remaining = self._producer.flush(SLICE_S)
        while remaining:
            if self.shutdown.requested:
                self.shutdown.now(f"the {self.name} agent's flush was waiting for the broker "
                                  f"({remaining} message(s) not acknowledged, re-sent under the same ids on restart)")
            elapsed = time.monotonic() - began
            if elapsed >= remind_after:
                if not waited:
                    self.waits += 1
                    waited = True
                log.warning("%s agent: flush waiting for the broker: %d message(s) queued for %.0f s",
                            self.name, remaining, elapsed)
                remind_after = min(remind_after * 2, elapsed + REMIND_MAX_S)
            remaining = self._producer.flush(SLICE_S)
        if waited:
            log.warning("%s agent: flush completed after %.0f s", self.name, time.monotonic() - began)
