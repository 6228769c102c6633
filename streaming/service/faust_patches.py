"""Every Faust (faust-streaming) and aiokafka internal the service patches or overrides, in one place.

The service relies on a few private methods of pinned versions of its libraries. Each is named in
:data:`INTERNALS`; :func:`missing_internals` lists those a build lacks (a unit test fails on any), and
importing this module refuses other versions than :data:`PINNED` with a clear message, so an upgrade is a
deliberate change that re-checks every patch instead of a silent change of behaviour:

- ``faust.transport.drivers.aiokafka.Consumer.seek_to_committed`` is replaced
  (:func:`position_from_store`): Faust's recovery seeks every assigned partition to the offset committed in
  Kafka after the public rebalance hooks ran, so positions must come from here; it uses the consumer's
  ``_seek``, ``earliest_offsets`` and ``assignment``.
- ``faust.transport.drivers.aiokafka.AIOKafkaConsumerThread._create_worker_consumer`` is wrapped
  (:func:`short_fetch_wait`) to set aiokafka's ``AIOKafkaConsumer._fetch_max_wait_ms``, which Faust hard-codes
  to 1500 ms.
- ``aiokafka.client.AIOKafkaClient.bootstrap`` is wrapped (:func:`patient_bootstrap`): it raises
  ``KafkaConnectionError`` when no bootstrap server answers, and Faust then ends the worker with status 1; a
  worker whose broker went away after its topics were created waits for it instead.
- ``Consumer.highwater`` (the worker's lag), and ``mode.Worker.install_signal_handlers``, ``_on_sigterm``
  and ``_on_sigint``, which :func:`streaming.service.app._worker_class` overrides for the shutdown deadline,
  and ``on_setup_root_logger``, where it installs the outage summary's log filter.
"""

from __future__ import annotations

import inspect
import logging
from collections.abc import Awaitable, Callable
from importlib import import_module
from importlib.metadata import PackageNotFoundError, version
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from streaming.service.outage import Shutdown

log = logging.getLogger("segcoord.service")

PINNED = {"faust-streaming": "0.15.3", "aiokafka": "0.14.0"}
FETCH_MAX_WAIT_MS = 10

# (module, class, attribute): every internal used; an instance attribute is looked for in the class source
INTERNALS: tuple[tuple[str, str, str], ...] = (
    ("faust.transport.drivers.aiokafka", "Consumer", "seek_to_committed"),
    ("faust.transport.drivers.aiokafka", "Consumer", "_seek"),
    ("faust.transport.drivers.aiokafka", "Consumer", "earliest_offsets"),
    ("faust.transport.drivers.aiokafka", "Consumer", "assignment"),
    ("faust.transport.drivers.aiokafka", "Consumer", "highwater"),
    ("faust.transport.drivers.aiokafka", "AIOKafkaConsumerThread", "_create_worker_consumer"),
    ("faust.transport.consumer", "ThreadDelegateConsumer", "_thread"),
    ("aiokafka", "AIOKafkaConsumer", "_fetch_max_wait_ms"),
    ("mode", "Worker", "install_signal_handlers"),
    ("mode", "Worker", "_on_sigterm"),
    ("mode", "Worker", "_on_sigint"),
    ("mode", "Worker", "on_setup_root_logger"),
    # streaming.service.delivery: fetched batches go whole to the agents instead of Faust's per-message drain
    ("faust.transport.consumer", "Consumer", "_drain_messages"),
    ("faust.transport.consumer", "Consumer", "_wait_next_records"),
    ("faust.transport.consumer", "Consumer", "_commit_offsets"),
    ("faust.transport.consumer", "Consumer", "perform_seek"),
    ("faust.transport.consumer", "Consumer", "flow_active"),
    ("faust.transport.consumer", "Consumer", "should_stop"),
    ("mode.services", "Service", "_stopped"),  # the consumer's and the fetcher's
    ("aiokafka.client", "AIOKafkaClient", "bootstrap"),  # patient_bootstrap
    ("aiokafka.client", "AIOKafkaClient", "_client_id"),
)

StoredOffsets = Callable[[], dict[tuple[str, int], int]]


class UnsupportedVersion(RuntimeError):
    """An installed library is not the version these patches were written and tested against."""


def check_versions() -> None:
    """Raise :class:`UnsupportedVersion` naming every library whose installed version is not the pinned one."""
    wrong = []
    for dist, want in sorted(PINNED.items()):
        try:
            got = version(dist)
        except PackageNotFoundError:
            got = "not installed"
        if got != want:
            wrong.append(f"{dist} {got} (patched for {want})")
    if wrong:
        raise UnsupportedVersion("streaming.service.faust_patches: " + "; ".join(wrong) +
                                 ". Install the pinned versions (pyproject.toml), or re-check every patch in this "
                                 "module against the new ones and update PINNED.")


def missing_internals() -> list[str]:
    """The internals of :data:`INTERNALS` this build lacks (empty: every patch has its target)."""
    missing = []
    for module_name, class_name, attribute in INTERNALS:
        cls = getattr(import_module(module_name), class_name, None)
        where = f"{module_name}.{class_name}.{attribute}"
        if cls is None or (not hasattr(cls, attribute)
                           and f"self.{attribute} =" not in inspect.getsource(cls)):
            missing.append(where)
    return missing


check_versions()


def short_fetch_wait(app: Any) -> None:
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


def position_from_store(app: Any, stored: dict[str, list[StoredOffsets]],
                        prepare: Callable[[set[tuple[str, int]]], Awaitable[None]] | None = None) -> None:
    """Make Faust's post-assignment seek go to the stored offsets (or the beginning), not Kafka's commits.

    ``stored`` maps each input topic to the stored next offsets of every agent reading it; a partition is
    positioned at the lowest of them (the beginning when any agent never applied it). ``prepare`` gets the
    assigned (topic, partition)s first (the timeline agent adopts snapshots of the partitions it gained there,
    which moves its stored offsets)."""
    consumer = app.consumer

    async def seek_to_stored() -> dict[Any, int]:
        if prepare is not None:
            await prepare({(tp.topic, tp.partition) for tp in consumer.assignment()})
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
        if positions:
            # the group's offsets follow the stores: a kill -9 between a store commit and the next group commit
            # left them behind, and with nothing new to read no batch would move them (write confirmations and
            # `segcoord watch` read them)
            try:
                await consumer._commit_offsets(positions)
            except Exception as e:  # the next applied batch commits later offsets; the stores hold what counts
                log.warning("committing the stored positions to the group failed: %r", e)
        return positions

    consumer.seek_to_committed = seek_to_stored


def patient_bootstrap(shutdown: Shutdown) -> None:
    """Make the first connection of every aiokafka client in this process (Faust's producer and consumer) wait
    for an unreachable broker, with back-off and one line per attempt, instead of raising
    ``KafkaConnectionError`` (which Faust answers by ending the worker with status 1). A stop asked for while it
    waits exits 0 (:func:`streaming.service.outage.until_bootstrapped`). Idempotent: the original method is kept
    as ``__wrapped__`` and wrapped once, for the latest ``shutdown``."""
    from aiokafka.client import AIOKafkaClient

    from streaming.service.outage import until_bootstrapped

    original = getattr(AIOKafkaClient.bootstrap, "__wrapped__", AIOKafkaClient.bootstrap)

    async def bootstrap(self: Any) -> None:
        await until_bootstrapped(f"connecting {self._client_id}", lambda: original(self), shutdown)

    bootstrap.__wrapped__ = original  # type: ignore[attr-defined]
    AIOKafkaClient.bootstrap = bootstrap  # type: ignore[method-assign]
